/* test_catalog_configs.c - the example configs (examples/configs/NAME.yaml)
 * must decode and validate; each near miss (tests/data/configs/NAME.yaml)
 * must fail with exactly one violation - in the catalog, or for a few (an
 * unknown enum value) already in the decoder - at the field path its header
 * names:
 *
 *   # expect: trainingInput.workerConfig.acceleratorConfig.count
 *
 * The files are read through kiln_job_from_yaml(), the path a user's
 * config.yaml takes, so this tests the decoder and the catalog together. */
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"
#include "kiln/job.h"
#include "spec/tree.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .yaml files of `dir`, sorted; caller frees each and the array. */
static size_t list_yaml(const char *dir, char ***out)
{
    DIR *dp = opendir(dir);
    struct dirent *e;
    size_t n = 0, cap = 0;
    char **v = NULL;
    while (dp && (e = readdir(dp))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            v = realloc(v, cap * sizeof *v);
            if (!v) abort();
        }
        size_t size = strlen(dir) + len + 2;
        if (!(v[n] = malloc(size))) abort();
        snprintf(v[n++], size, "%s/%s", dir, e->d_name);
    }
    if (dp) closedir(dp);
    if (n) qsort(v, n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

/* Reads and decodes a config file into *job (NULL when it does not decode:
 * the decoder's violations are then in `d`). Returns the text (caller frees). */
static char *load(const char *path, kiln_job **job, kiln_diag *d)
{
    size_t len = 0;
    char *text = NULL;
    *job = NULL;
    if (kiln__read_file(path, KILN_SPEC_MAX_BYTES, &text, &len) != KILN_OK) {
        CHECK_MSG(0, "cannot read %s", path);
        return NULL;
    }
    kiln_job_from_yaml(text, len, job, d);
    return text;
}

static void test_examples(const kiln_catalog *c)
{
    char **files;
    size_t n = list_yaml(KILN_SOURCE_DIR "/examples/configs", &files);
    CHECK(n >= 6);
    for (size_t i = 0; i < n; i++) {
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *job;
        char *text = load(files[i], &job, &d);
        CHECK_MSG(job != NULL, "%s does not decode", files[i]);
        if (job) {
            kiln_err e = kiln_catalog_validate(c, job, &d);
            CHECK_MSG(e == KILN_OK && d.n == 0, "%s should validate", files[i]);
            kiln_diag_print(&d, stderr);
            kiln_replica_plan plan[KILN_ROLE_COUNT];
            CHECK(kiln_catalog_normalise(c, job) == KILN_OK);
            CHECK(kiln_catalog_plan(c, job, plan) >= 1);
        }
        kiln_diag_free(&d);
        kiln_job_free(job);
        free(text);
        free(files[i]);
    }
    free(files);
}

/* The field named by the "# expect: FIELD" header line. */
static bool expected_field(const char *text, char *buf, size_t cap)
{
    const char *p = strstr(text, "# expect: ");
    if (!p) return false;
    p += strlen("# expect: ");
    size_t len = strcspn(p, "\r\n");
    if (len == 0 || len >= cap) return false;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return true;
}

static void test_near_misses(const kiln_catalog *c)
{
    char **files;
    size_t n = list_yaml(KILN_SOURCE_DIR "/tests/data/configs", &files);
    CHECK(n >= 20);
    for (size_t i = 0; i < n; i++) {
        char want[256] = "";
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *job;
        char *text = load(files[i], &job, &d);
        CHECK_MSG(text && expected_field(text, want, sizeof want), "%s has no '# expect:' line",
                  files[i]);
        /* A few near misses are caught by the decoder already (an enum
         * value); the rest decode and must fail in the catalog. */
        if (job) kiln_catalog_validate(c, job, &d);
        bool ok = d.n == 1 && kiln_diag_has(&d, want);
        CHECK_MSG(ok, "%s: expected exactly one violation at %s", files[i], want);
        if (!ok) kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        kiln_job_free(job);
        free(text);
        free(files[i]);
    }
    free(files);
}

int main(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    if (kiln_catalog_default(&c, &d) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        return 1;
    }
    test_examples(c);
    test_near_misses(c);
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
