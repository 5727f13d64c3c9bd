/* test_proto3.c - proto3 JSON, as Google's clients write it, into the ml v1
 * and aiplatform v1 decoders (src/spec/codec.c, src/spec/vertex.c).
 *
 * Every accepted message of the corpora is rewritten the ways a proto3 JSON
 * writer may write the same message, and each rewrite must decode to the
 * same kiln job as the original:
 *   - defaults dropped: a scalar at its default (0, "", false) and an empty
 *     list are left out, as proto3 JSON writers do by default (an empty
 *     object stays: a message that is set, such as
 *     medianAutomatedStoppingSpec {}, is not a default);
 *   - snake_case: every field name as the .proto spells it (map keys, the
 *     labels, are data and stay);
 *   - integers as strings (int64's JSON form), enum fields excepted;
 *   - enums as numbers (what the Python SDK's REST transport sends). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "test.h"

typedef enum { MSG_ML, MSG_CUSTOM_JOB, MSG_HP_JOB } msg_kind;

static kiln_job *decode(msg_kind k, const char *s, kiln_diag *d)
{
    kiln_job *job = NULL;
    size_t n = strlen(s);
    kiln_err e = k == MSG_ML           ? kiln_job_from_json(s, n, &job, d)
                 : k == MSG_CUSTOM_JOB ? kiln_job_from_custom_job(s, n, &job, d)
                                       : kiln_job_from_hp_tuning_job(s, n, &job, d);
    if (e != KILN_OK) {
        kiln_job_free(job);
        return NULL;
    }
    return job;
}

/* the enum fields of the two APIs and their numbers, by name */
static const struct {
    const char *key, *name;
    int num;
} enums[] = {
    {"acceleratorType", "NVIDIA_TESLA_K80", 1},
    {"acceleratorType", "NVIDIA_TESLA_V100", 3},
    {"acceleratorType", "NVIDIA_TESLA_T4", 5},
    {"acceleratorType", "NVIDIA_TESLA_A100", 8},
    {"acceleratorType", "NVIDIA_L4", 11},
    {"goal", "MAXIMIZE", 1},
    {"goal", "MINIMIZE", 2},
    {"scaleType", "UNIT_LINEAR_SCALE", 1},
    {"scaleType", "UNIT_LOG_SCALE", 2},
    {"scaleType", "UNIT_REVERSE_LOG_SCALE", 3},
    {"algorithm", "GRID_SEARCH", 2},
    {"algorithm", "RANDOM_SEARCH", 3},
    {"measurementSelectionType", "LAST_MEASUREMENT", 1},
    {"measurementSelectionType", "BEST_MEASUREMENT", 2},
    {"type", "DOUBLE", 1},
    {"type", "INTEGER", 2},
    {"type", "CATEGORICAL", 3},
    {"type", "DISCRETE", 4},
};
#define N_ENUMS (sizeof enums / sizeof enums[0])

static bool is_enum_key(const char *k)
{
    for (size_t i = 0; i < N_ENUMS; i++)
        if (strcmp(enums[i].key, k) == 0) return true;
    return false;
}

typedef enum { RW_DROP_DEFAULTS, RW_SNAKE, RW_INT_STRINGS, RW_ENUM_NUMBERS, RW_COUNT } rewrite;
static const char *const rw_names[RW_COUNT] = {"defaults dropped", "snake_case names",
                                               "integers as strings", "enums as numbers"};

static bool is_scalar_default(const json_t *v)
{
    return json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
           (json_is_real(v) && json_real_value(v) == 0.0) ||
           (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

static void snake(const char *k, char *out, size_t cap)
{
    size_t n = 0;
    for (; *k && n + 2 < cap; k++) {
        if (*k >= 'A' && *k <= 'Z') {
            out[n++] = '_';
            out[n++] = (char)(*k - 'A' + 'a');
        } else {
            out[n++] = *k;
        }
    }
    out[n] = '\0';
}

/* v rewritten by rw; a new reference. key: the field v is the value of. */
static json_t *rw_tree(const json_t *v, const char *key, rewrite rw, bool in_map)
{
    if (json_is_array(v)) {
        json_t *a = json_array(), *e;
        size_t i;
        json_array_foreach((json_t *)v, i, e) json_array_append_new(a, rw_tree(e, key, rw, false));
        return a;
    }
    if (json_is_object(v)) {
        json_t *o = json_object(), *e;
        const char *k;
        json_object_foreach((json_t *)v, k, e)
        {
            char nk[256];
            if (rw == RW_DROP_DEFAULTS && !in_map && is_scalar_default(e)) continue;
            if (rw == RW_SNAKE && !in_map)
                snake(k, nk, sizeof nk);
            else
                snprintf(nk, sizeof nk, "%s", k);
            bool map = strcmp(k, "labels") == 0;
            json_object_set_new(o, nk, rw_tree(e, in_map ? "" : k, rw, map));
        }
        return o;
    }
    if (rw == RW_INT_STRINGS && json_is_integer(v) && !is_enum_key(key)) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
        return json_string(b);
    }
    if (rw == RW_ENUM_NUMBERS && json_is_string(v))
        for (size_t i = 0; i < N_ENUMS; i++)
            if (strcmp(enums[i].key, key) == 0 && strcmp(enums[i].name, json_string_value(v)) == 0)
                return json_integer(enums[i].num);
    return json_incref((json_t *)v);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL)
        buf[fread(buf, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return buf;
}

/* Decodes text, then each rewrite of it; all must give the same job. */
static void round_trip(msg_kind k, const char *what, const char *text)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *want = decode(k, text, &d);
    CHECK_MSG(want != NULL, "%s: accepted as written", what);
    if (!want) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    json_t *root = json_loads(text, 0, NULL);
    CHECK(root != NULL);
    for (int rw = 0; want && root && rw < RW_COUNT; rw++) {
        json_t *t = rw_tree(root, "", (rewrite)rw, false);
        char *s = json_dumps(t, JSON_COMPACT);
        kiln_diag d2 = KILN_DIAG_INIT;
        kiln_job *got = s ? decode(k, s, &d2) : NULL;
        CHECK_MSG(got != NULL, "%s, %s: accepted", what, rw_names[rw]);
        if (!got) {
            fprintf(stderr, "  %s\n", s);
            kiln_diag_print(&d2, stderr);
        }
        CHECK_MSG(!got || kiln_job_equal(want, got), "%s, %s: the same job", what, rw_names[rw]);
        if (got && !kiln_job_equal(want, got)) {
            char *a = kiln_job_to_json(want, 0), *b = kiln_job_to_json(got, 0);
            fprintf(stderr, "  want %s\n  got  %s\n", a, b);
            free(a);
            free(b);
        }
        kiln_job_free(got);
        kiln_diag_free(&d2);
        free(s);
        json_decref(t);
    }
    json_decref(root);
    kiln_job_free(want);
}

static void round_trip_file(msg_kind k, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", KILN_SOURCE_DIR, rel);
    char *s = slurp(path);
    CHECK_MSG(s != NULL, "read %s", rel);
    if (s) round_trip(k, rel, s);
    free(s);
}

#define POOL0                                                                                      \
    "{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"}," \
    "\"replicaCount\":\"1\"}"

int main(void)
{
    static const struct {
        msg_kind k;
        const char *path;
    } files[] = {
        {MSG_CUSTOM_JOB, "tests/fuzz/corpus/fuzz_custom_job/pools.json"},
        {MSG_CUSTOM_JOB, "tests/fuzz/corpus/fuzz_custom_job/noretry.json"},
        {MSG_CUSTOM_JOB, "tests/fuzz/corpus/fuzz_custom_job/sdk_defaults.json"},
        {MSG_HP_JOB, "tests/fuzz/corpus/fuzz_hp_tuning_job/study.json"},
        {MSG_HP_JOB, "tests/fuzz/corpus/fuzz_hp_tuning_job/zero_min.json"},
        {MSG_ML, "tests/fuzz/corpus/fuzz_json_job/basic.json"},
        {MSG_ML, "tests/fuzz/corpus/fuzz_json_job/full.json"},
        {MSG_ML, "tests/fuzz/corpus/fuzz_json_job/proto3.json"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        round_trip_file(files[i].k, files[i].path);

    /* the case: the SDK leaves a zero minValue out */
    {
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *j = decode(MSG_HP_JOB,
                             "{\"displayName\":\"h\",\"maxTrialCount\":2,\"studySpec\":{"
                             "\"metrics\":[{\"metricId\":\"m\",\"goal\":1}],\"parameters\":[{"
                             "\"parameterId\":\"lr\",\"doubleValueSpec\":{\"maxValue\":0.5}},"
                             "{\"parameterId\":\"n\",\"integerValueSpec\":{\"maxValue\":\"4\"}}]},"
                             "\"trialJobSpec\":{\"workerPoolSpecs\":[" POOL0 "]}}",
                             &d);
        CHECK(j != NULL);
        if (!j) kiln_diag_print(&d, stderr);
        if (j) {
            const kiln_hyperparameter_spec *hp = &j->training_input.hyperparameters;
            CHECK(hp->params[0].min_value == 0.0 && hp->params[0].max_value == 0.5);
            CHECK(hp->params[1].min_value == 0.0 && hp->params[1].max_value == 4.0);
        }
        kiln_job_free(j);
        kiln_diag_free(&d);
    }
    /* 1.0 for an int64 (a Struct's numbers are doubles); 1.5 is no int64 */
    {
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *j = decode(MSG_CUSTOM_JOB,
                             "{\"displayName\":\"x\",\"jobSpec\":{\"workerPoolSpecs\":[" POOL0
                             ",{\"container_spec\":{\"image_uri\":\"i\"},\"machine_spec\":{"
                             "\"machine_type\":\"n1-standard-4\"},\"replica_count\":2.0}]}}",
                             &d);
        CHECK(j && j->training_input.worker_count == 2);
        if (!j) kiln_diag_print(&d, stderr);
        kiln_job_free(j);
        kiln_diag_free(&d);
        d = (kiln_diag)KILN_DIAG_INIT;
        j = decode(MSG_CUSTOM_JOB,
                   "{\"displayName\":\"x\",\"jobSpec\":{\"workerPoolSpecs\":[" POOL0
                   ",{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                   "\"machineType\":\"n1-standard-4\"},\"replicaCount\":1.5}]}}",
                   &d);
        CHECK(j == NULL && kiln_diag_has(&d, "jobSpec.workerPoolSpecs[1].replicaCount"));
        kiln_job_free(j);
        kiln_diag_free(&d);
        /* both spellings of one field: refused, not one of them dropped */
        d = (kiln_diag)KILN_DIAG_INIT;
        j = decode(MSG_CUSTOM_JOB,
                   "{\"displayName\":\"x\",\"display_name\":\"y\",\"jobSpec\":{"
                   "\"workerPoolSpecs\":[" POOL0 "]}}",
                   &d);
        CHECK(j == NULL && kiln_diag_has(&d, "displayName"));
        kiln_job_free(j);
        kiln_diag_free(&d);
    }
    /* ml v1: an enum number out of the enum is refused by its path */
    {
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *j = decode(MSG_ML,
                             "{\"jobId\":\"j\",\"trainingInput\":{\"scaleTier\":\"BASIC\","
                             "\"region\":\"us-central1\",\"hyperparameters\":{\"goal\":7}}}",
                             &d);
        CHECK(j == NULL && kiln_diag_has(&d, "trainingInput.hyperparameters.goal"));
        kiln_job_free(j);
        kiln_diag_free(&d);
    }
    TEST_DONE();
}
