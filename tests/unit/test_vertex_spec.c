/* test_vertex_spec.c - Vertex AI CustomJob / HyperparameterTuningJob -> kiln_job
 * (src/spec/vertex.c): the pools onto roles, enums as names or numbers, the
 * refusals by CustomJob path, and the CustomJobSpec shown back. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "test.h"

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

/* Decodes s; expects a refusal naming `field` (NULL: expects success). */
static kiln_job *decode(const char *s, const char *field, bool hp)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_err err = hp ? kiln_job_from_hp_tuning_job(s, strlen(s), &job, &d)
                      : kiln_job_from_custom_job(s, strlen(s), &job, &d);
    if (field) {
        CHECK_MSG(err == KILN_EINVAL && kiln_diag_has(&d, field), "want a refusal of %s in %s",
                  field, s);
        if (!kiln_diag_has(&d, field)) kiln_diag_print(&d, stderr);
    } else {
        CHECK_MSG(err == KILN_OK, "want %s accepted", s);
        if (err != KILN_OK) kiln_diag_print(&d, stderr);
    }
    kiln_diag_free(&d);
    return job;
}

#define POOL0                                                                                      \
    "{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"}," \
    "\"replicaCount\":\"1\"}"
#define CJ(pools, extra)                                                                           \
    "{\"displayName\":\"x\",\"jobSpec\":{\"workerPoolSpecs\":[" pools "]" extra "}}"

/* The start and end every aiplatform decoder shares (vertex_begin,
 * display_name, vertex_end): each of the three refuses a body too large, one
 * that is not JSON, one that is not an object (naming its kind) and a
 * missing or too long displayName, each with its own sentence. */
typedef kiln_err (*vertex_decoder)(const char *, size_t, kiln_job **, kiln_diag *);

static bool said(const kiln_diag *d, const char *field, const char *needle)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].field ? d->v[i].field : "", field) == 0 &&
            strstr(d->v[i].description, needle))
            return true;
    return false;
}

static void expect_frame(vertex_decoder dec, const char *kind, const char *body, kiln_err want,
                         const char *field, const char *needle)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_err e = dec(body, strlen(body), &job, &d);
    CHECK_MSG(e == want && job == NULL && said(&d, field, needle),
              "%s: want %d with '%s' on '%s', got %d", kind, (int)want, needle, field, (int)e);
    if (!said(&d, field, needle)) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_frame(void)
{
    static const struct {
        vertex_decoder dec;
        const char *kind;
    } decs[] = {{kiln_job_from_custom_job, "CustomJob"},
                {kiln_job_from_hp_tuning_job, "HyperparameterTuningJob"},
                {kiln_job_from_training_pipeline, "TrainingPipeline"}};
    char *big = malloc(KILN_SPEC_MAX_BYTES + 2), longname[160], body[256];
    if (big) {
        memset(big, ' ', KILN_SPEC_MAX_BYTES + 1);
        big[KILN_SPEC_MAX_BYTES + 1] = '\0';
    }
    memset(longname, 'n', 129);
    longname[129] = '\0';
    for (size_t i = 0; i < sizeof decs / sizeof decs[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "the %s is larger than", decs[i].kind);
        if (big) expect_frame(decs[i].dec, decs[i].kind, big, KILN_ELIMIT, "", want);
        expect_frame(decs[i].dec, decs[i].kind, "{\"displayName\":", KILN_EINVAL, "", "not JSON: ");
        snprintf(want, sizeof want, "a %s is a JSON object", decs[i].kind);
        expect_frame(decs[i].dec, decs[i].kind, "[1]", KILN_EINVAL, "", want);
        expect_frame(decs[i].dec, decs[i].kind, "{}", KILN_EINVAL, "displayName", "is required");
        snprintf(body, sizeof body, "{\"displayName\":\"%s\"}", longname);
        expect_frame(decs[i].dec, decs[i].kind, body, KILN_EINVAL, "displayName",
                     "is longer than 128 characters");
    }
    free(big);
}

/* models:upload's UploadModelRequest: the Model kept as sent, its
 * artifactUri and modelId read; what kiln would not act on refused by name */
static void test_upload(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_vertex_upload u;
    static const char ok[] =
        "{\"model\":{\"display_name\":\"m\",\"artifactUri\":\"gs://b/m/\",\"containerSpec\":"
        "{\"imageUri\":\"serve:1\"}},\"modelId\":\"my-model_1\"}";
    CHECK(kiln_vertex_upload_parse(ok, strlen(ok), &u, &d) == KILN_OK);
    if (d.n) kiln_diag_print(&d, stderr);
    CHECK(u.model && strcmp(u.model, "{\"artifactUri\":\"gs://b/m/\",\"containerSpec\":{"
                                     "\"imageUri\":\"serve:1\"},\"displayName\":\"m\"}") == 0);
    CHECK(u.model_id && strcmp(u.model_id, "my-model_1") == 0);
    CHECK(u.artifact_uri && strcmp(u.artifact_uri, "gs://b/m/") == 0);
    kiln_vertex_upload_clear(&u);
    CHECK(u.model == NULL && u.model_id == NULL && u.artifact_uri == NULL);
    kiln_diag_free(&d);
    static const char bare[] = "{\"model\":{\"displayName\":\"m\"}}";
    d = (kiln_diag)KILN_DIAG_INIT;
    CHECK(kiln_vertex_upload_parse(bare, strlen(bare), &u, &d) == KILN_OK);
    CHECK(u.model && !u.model_id && !u.artifact_uri);
    kiln_vertex_upload_clear(&u);
    kiln_diag_free(&d);
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"model\":{\"displayName\":\"m\"},\"parentModel\":\"projects/p/locations/l/models/1\"}",
         "parentModel"},
        {"{\"model\":{\"displayName\":\"m\"},\"serviceAccount\":\"a@b\"}", "serviceAccount"},
        {"{\"model\":{\"displayName\":\"m\"},\"parent\":\"x\"}", "parent"},
        {"{\"model\":{\"displayName\":\"m\",\"explanationSpec\":{\"x\":1}}}",
         "model.explanationSpec"},
        {"{\"model\":{\"displayName\":\"m\",\"artifactUri\":\"/tmp/m\"}}", "model.artifactUri"},
        {"{\"model\":{\"description\":\"no name\"}}", "model.displayName"},
        {"{\"model\":{\"displayName\":\"m\"},\"modelId\":\"1abc\"}", "modelId"},
        {"{\"model\":{\"displayName\":\"m\"},\"modelId\":\"Upper\"}", "modelId"},
        {"{\"modelId\":\"abc\"}", "model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = (kiln_diag)KILN_DIAG_INIT;
        kiln_err e = kiln_vertex_upload_parse(bad[i].body, strlen(bad[i].body), &u, &d);
        CHECK_MSG(e == KILN_EINVAL && kiln_diag_has(&d, bad[i].field) && !u.model,
                  "upload refused at %s: %s", bad[i].field, bad[i].body);
        if (!kiln_diag_has(&d, bad[i].field)) kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
    }
    CHECK(kiln_vertex_model_id_valid("a", 1) && !kiln_vertex_model_id_valid("-a", 2) &&
          !kiln_vertex_model_id_valid("a.b", 3));
}

int main(void)
{
    char *s = slurp(KILN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_custom_job/pools.json");
    CHECK(s != NULL);
    kiln_job *job = s ? decode(s, NULL, false) : NULL;
    free(s);
    if (job) {
        const kiln_training_input *ti = &job->training_input;
        CHECK(ti->has_vertex);
        CHECK_STR(ti->vertex.display_name, "pools");
        CHECK_STR(ti->master_type, "n1-standard-4");
        CHECK_STR(ti->master_config.accelerator_config.type, "NVIDIA_TESLA_V100"); /* enum 3 */
        CHECK(ti->master_config.accelerator_config.count == 2);
        CHECK_STR(kiln_map_get(&ti->master_config.env, "A"), "1");
        CHECK(ti->worker_count == 3 && ti->parameter_server_count == 0);
        CHECK(ti->evaluator_count == 1);
        CHECK_STR(ti->evaluator_config.container_command.v[2], "t.task");
        CHECK_STR(ti->package_uris.v[0], "gs://b/p.tar.gz");
        CHECK(ti->scheduling.max_running_time.seconds == 3600 &&
              ti->scheduling.max_running_time.nanos == 500000000);
        CHECK_STR(ti->worker_config.restart_policy, "OnFailure");
        CHECK(ti->master_config.restart_policy == NULL);
        CHECK_STR(ti->vertex.base_output_directory, "gs://b/out");
        /* shown back: the pools in order, pool 2 a placeholder */
        json_t *spec = kiln_job_custom_job_spec(job);
        json_t *pools = json_object_get(spec, "workerPoolSpecs");
        CHECK(json_array_size(pools) == 4);
        CHECK(json_object_size(json_array_get(pools, 2)) == 0);
        CHECK_STR(
            json_string_value(json_object_get(
                json_object_get(json_array_get(pools, 3), "pythonPackageSpec"), "pythonModule")),
            "t.task");
        CHECK_STR(
            json_string_value(json_object_get(json_object_get(spec, "scheduling"), "timeout")),
            "3600.500000000s");
        json_decref(spec);
        kiln_job_free(job);
    }
    /* jobSpec.serviceAccount: kept (kilnd maps it to a user), shown back */
    kiln_job *sj =
        decode(CJ(POOL0, ",\"serviceAccount\":\"t@p.iam.gserviceaccount.com\""), NULL, false);
    if (sj) {
        CHECK_STR(sj->training_input.service_account, "t@p.iam.gserviceaccount.com");
        json_t *spec = kiln_job_custom_job_spec(sj);
        CHECK_STR(json_string_value(json_object_get(spec, "serviceAccount")),
                  "t@p.iam.gserviceaccount.com");
        json_decref(spec);
        kiln_job_free(sj);
    }
    decode(CJ(POOL0, ",\"serviceAccount\":7"), "jobSpec.serviceAccount", false);
    /* jobSpec.persistentResourceId: kept (kilnd routes it to the ClusterQueue
     * declared as it), shown back, its ml v1 path mapped to the CustomJob's */
    kiln_job *pj = decode(CJ(POOL0, ",\"persistentResourceId\":\"team-a100s\""), NULL, false);
    if (pj) {
        CHECK_STR(pj->training_input.vertex.persistent_resource_id, "team-a100s");
        json_t *spec = kiln_job_custom_job_spec(pj);
        CHECK_STR(json_string_value(json_object_get(spec, "persistentResourceId")), "team-a100s");
        json_decref(spec);
        kiln_job_free(pj);
    }
    decode(CJ(POOL0, ",\"persistentResourceId\":[]"), "jobSpec.persistentResourceId", false);
    {
        char pb[128];
        const char *pf = pb;
        kiln_job_custom_job_field("trainingInput.vertex.persistentResourceId", pb, sizeof pb);
        CHECK_STR(pf, "jobSpec.persistentResourceId");
    }
    /* ml v1 field paths as CustomJob paths */
    char fb[256];
    const char *f = fb;
    kiln_job_custom_job_field("trainingInput.workerType", fb, sizeof fb);
    CHECK_STR(f, "jobSpec.workerPoolSpecs[1].machineSpec.machineType");
    kiln_job_custom_job_field("trainingInput.masterConfig.acceleratorConfig.type", fb, sizeof fb);
    CHECK_STR(f, "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType");
    kiln_job_custom_job_field("trainingInput.hyperparameters.maxTrials", fb, sizeof fb);
    CHECK_STR(f, "maxTrialCount");

    /* refusals, each by its CustomJob path */
    kiln_job_free(decode(CJ(POOL0, ",\"network\":\"n\""), "jobSpec.network", false));
    kiln_job_free(decode(CJ(POOL0, ",\"enableWebAccess\":false"), NULL, false)); /* default */
    kiln_job_free(decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                            "\"machineType\":\"m\"},\"replicaCount\":2}",
                            ""),
                         "jobSpec.workerPoolSpecs[0].replicaCount", false));
    kiln_job_free(
        decode(CJ(POOL0 ",{\"machineSpec\":{\"machineType\":\"m\"},\"replicaCount\":1}", ""),
               "jobSpec.workerPoolSpecs[1]", false));
    /* the Reduction Server pool: refused, naming its image */
    kiln_job_free(decode(CJ(POOL0 "," POOL0 ",{\"containerSpec\":{\"imageUri\":\"us-docker.pkg.dev/"
                                  "vertex-ai-restricted/training/reductionserver:latest\"},"
                                  "\"machineSpec\":{\"machineType\":\"n1-highcpu-16\"},"
                                  "\"replicaCount\":2}",
                            ""),
                         "jobSpec.workerPoolSpecs[2].containerSpec.imageUri", false));
    /* diskSpec: onto diskConfig (scratch space, checked at create), shown back */
    {
        kiln_job *dj = decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                                 "\"machineType\":\"m\"},\"replicaCount\":1,\"diskSpec\":{"
                                 "\"bootDiskType\":\"pd-standard\",\"bootDiskSizeGb\":\"200\"}}",
                                 ""),
                              NULL, false);
        const kiln_replica_config *rc = dj ? &dj->training_input.master_config : NULL;
        CHECK(rc && rc->has_disk_config && rc->disk_config.boot_disk_size_gb == 200);
        CHECK(rc && rc->disk_config.boot_disk_type &&
              strcmp(rc->disk_config.boot_disk_type, "pd-standard") == 0);
        json_t *spec = dj ? kiln_job_custom_job_spec(dj) : NULL;
        json_t *ds = json_object_get(json_array_get(json_object_get(spec, "workerPoolSpecs"), 0),
                                     "diskSpec");
        CHECK(json_integer_value(json_object_get(ds, "bootDiskSizeGb")) == 200);
        json_decref(spec);
        kiln_job_free(dj);
        kiln_job_custom_job_field("trainingInput.masterConfig.diskConfig.bootDiskSizeGb", fb,
                                  sizeof fb);
        CHECK_STR(f, "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb");
    }
    kiln_job_free(decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                            "\"machineType\":\"m\"},\"replicaCount\":1,\"diskSpec\":{"
                            "\"bootDiskType\":\"hyperdisk-ml\"}}",
                            ""),
                         "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskType", false));
    kiln_job_free(decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                            "\"machineType\":\"m\"},\"replicaCount\":1,\"diskSpec\":{"
                            "\"bootDiskSizeGb\":100000}}",
                            ""),
                         "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb", false));
    kiln_job_free(decode(CJ(POOL0, ",\"scheduling\":{\"timeout\":\"1h\"}"),
                         "jobSpec.scheduling.timeout", false));
    kiln_job_free(decode(CJ(POOL0, ",\"scheduling\":{\"disableRetries\":true,"
                                   "\"restartJobOnWorkerRestart\":true}"),
                         "jobSpec.scheduling.restartJobOnWorkerRestart", false));
    kiln_job_free(decode(CJ(POOL0, ",\"baseOutputDirectory\":{\"outputUriPrefix\":\"s3://x\"}"),
                         "jobSpec.baseOutputDirectory.outputUriPrefix", false));
    kiln_job_free(decode("{\"displayName\":\"x\",\"state\":\"JOB_STATE_RUNNING\",\"jobSpec\":{"
                         "\"workerPoolSpecs\":[" POOL0 "]}}",
                         "state", false));
    kiln_job_free(decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                            "\"machineType\":\"m\",\"acceleratorType\":99},\"replicaCount\":1}",
                            ""),
                         "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", false));

    /* a tuning job */
    s = slurp(KILN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_hp_tuning_job/study.json");
    job = s ? decode(s, NULL, true) : NULL;
    free(s);
    if (job) {
        const kiln_hyperparameter_spec *hp = &job->training_input.hyperparameters;
        CHECK(job->training_input.has_hyperparameters && job->training_input.has_vertex);
        CHECK_STR(hp->goal, "MINIMIZE"); /* goal 2 */
        CHECK_STR(hp->hyperparameter_metric_tag, "loss");
        CHECK(hp->n_params == 4);
        CHECK_STR(hp->params[0].scale_type, "UNIT_LOG_SCALE");
        CHECK_STR(hp->params[1].type, "INTEGER");
        CHECK(hp->params[1].max_value == 8);
        CHECK_STR(hp->params[2].categorical_values.v[1], "b");
        CHECK(hp->params[3].n_discrete_values == 2 && hp->params[3].discrete_values[1] == 32);
        CHECK_STR(hp->algorithm, "RANDOM_SEARCH"); /* 3 */
        CHECK(hp->enable_trial_early_stopping);
        CHECK(hp->max_trials == 4 && hp->max_parallel_trials == 2 && hp->max_failed_trials == 1);
        kiln_job_free(job);
    }
#define HP(study)                                                                                  \
    "{\"displayName\":\"h\",\"studySpec\":" study ",\"trialJobSpec\":{\"workerPoolSpecs\":[" POOL0 \
    "]}}"
#define M "\"metrics\":[{\"metricId\":\"m\",\"goal\":\"MAXIMIZE\"}]"
#define P                                                                                          \
    "\"parameters\":[{\"parameterId\":\"a\",\"doubleValueSpec\":{\"minValue\":0,\"maxValue\":1}}]"
    /* decayCurveStoppingSpec: kiln's decay-curve rule, shown back; by
     * elapsed time, or with the median spec too (a oneof), refused */
    {
        kiln_job *hj = decode(HP("{" M "," P ",\"decayCurveStoppingSpec\":{}}"), NULL, true);
        const kiln_hyperparameter_spec *hp = hj ? &hj->training_input.hyperparameters : NULL;
        CHECK(hp && hp->enable_trial_early_stopping && hp->early_stopping_rule &&
              strcmp(hp->early_stopping_rule, "DECAY_CURVE") == 0);
        json_t *ss = hj ? kiln_job_study_spec(hj) : NULL;
        CHECK(json_is_object(json_object_get(ss, "decayCurveStoppingSpec")) &&
              !json_object_get(ss, "medianAutomatedStoppingSpec"));
        json_decref(ss);
        kiln_job_free(hj);
        hj = decode(HP("{" M "," P ",\"medianAutomatedStoppingSpec\":{}}"), NULL, true);
        hp = hj ? &hj->training_input.hyperparameters : NULL;
        CHECK(hp && hp->enable_trial_early_stopping && !hp->early_stopping_rule);
        kiln_job_free(hj);
    }
    kiln_job_free(
        decode(HP("{" M "," P ",\"decayCurveStoppingSpec\":{\"useElapsedDuration\":true}}"),
               "studySpec.decayCurveStoppingSpec.useElapsedDuration", true));
    kiln_job_free(
        decode(HP("{" M "," P ",\"medianAutomatedStoppingSpec\":{},\"decayCurveStoppingSpec\":{}}"),
               "studySpec.decayCurveStoppingSpec", true));
    /* measurementSelectionType: BEST_MEASUREMENT (2, the SDK's default) and
     * LAST_MEASUREMENT carried to the study and shown back; unspecified
     * (0) is LAST, left unset; a number out of the enum is refused */
    {
        static const char *const sel[] = {"2", "\"BEST_MEASUREMENT\"", "1", "0"};
        static const char *const want[] = {"BEST_MEASUREMENT", "BEST_MEASUREMENT",
                                           "LAST_MEASUREMENT", NULL};
        for (int k = 0; k < 4; k++) {
            char buf[1024];
            snprintf(buf, sizeof buf, HP("{" M "," P ",\"measurementSelectionType\":%s}"), sel[k]);
            kiln_job *hj = decode(buf, NULL, true);
            const char *got =
                hj ? hj->training_input.hyperparameters.measurement_selection : "(no hj)";
            CHECK_MSG(want[k] ? got && strcmp(got, want[k]) == 0 : got == NULL,
                      "measurementSelectionType %s: %s", sel[k], got ? got : "(unset)");
            json_t *ss = hj ? kiln_job_study_spec(hj) : NULL;
            const char *shown = json_string_value(json_object_get(ss, "measurementSelectionType"));
            CHECK_MSG(want[k] ? shown && strcmp(shown, want[k]) == 0 : shown == NULL,
                      "studySpec shows %s", shown ? shown : "(nothing)");
            json_decref(ss);
            kiln_job_free(hj);
        }
    }
    kiln_job_free(decode(HP("{" M "," P ",\"measurementSelectionType\":3}"),
                         "studySpec.measurementSelectionType", true));
    kiln_job_free(decode(HP("{" M ",\"parameters\":[{\"parameterId\":\"a\",\"doubleValueSpec\":{"
                            "\"minValue\":0,\"maxValue\":1},\"conditionalParameterSpecs\":[{}]}]}"),
                         "studySpec.parameters[0].conditionalParameterSpecs", true));
    kiln_job_free(decode("{\"displayName\":\"h\",\"studySpec\":{" M "," P "},\"trialJobSpec\":{"
                         "\"workerPoolSpecs\":[" POOL0 "],\"network\":\"n\"}}",
                         "trialJobSpec.network", true));

    /* conditionalParameterSpecs: flattened parent first into params with
     * parentParameterName and the parent's values (a three-level tree and
     * an INTEGER parent, from the fuzz corpus), and folded back into the
     * studySpec shown */
    s = slurp(KILN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_hp_tuning_job/conditional.json");
    job = s ? decode(s, NULL, true) : NULL;
    free(s);
    if (job) {
        const kiln_hyperparameter_spec *hp = &job->training_input.hyperparameters;
        static const char *const names[] = {"optimizer", "learning_rate", "nesterov",
                                            "beta1",     "layers",        "width"};
        static const char *const parents[] = {NULL,        "optimizer", "learning_rate",
                                              "optimizer", NULL,        "layers"};
        CHECK(hp->n_params == 6);
        for (size_t i = 0; i < 6 && i < hp->n_params; i++) {
            CHECK_STR(hp->params[i].parameter_name, names[i]);
            CHECK_MSG(parents[i] ? hp->params[i].parent_parameter &&
                                       strcmp(hp->params[i].parent_parameter, parents[i]) == 0
                                 : hp->params[i].parent_parameter == NULL,
                      "params[%zu]'s parent", i);
        }
        if (hp->n_params == 6) {
            CHECK(hp->params[1].parent_categorical_values.n == 1);
            CHECK_STR(hp->params[1].parent_categorical_values.v[0], "sgd");
            CHECK(hp->params[2].n_parent_values == 1 && hp->params[2].parent_values[0] == 0.01);
            CHECK(hp->params[5].n_parent_values == 2 && hp->params[5].parent_values[0] == 2 &&
                  hp->params[5].parent_values[1] == 3);
        }
        json_t *ss = kiln_job_study_spec(job);
        json_t *ps = json_object_get(ss, "parameters");
        json_t *cs = json_object_get(json_array_get(ps, 0), "conditionalParameterSpecs");
        CHECK(json_array_size(ps) == 2 && json_array_size(cs) == 2);
        CHECK_STR(json_string_value(json_object_get(
                      json_object_get(json_array_get(cs, 0), "parameterSpec"), "parameterId")),
                  "learning_rate");
        CHECK_STR(
            json_string_value(json_array_get(
                json_object_get(json_object_get(json_array_get(cs, 1), "parentCategoricalValues"),
                                "values"),
                0)),
            "adam");
        json_t *deep = json_object_get(json_object_get(json_array_get(cs, 0), "parameterSpec"),
                                       "conditionalParameterSpecs");
        CHECK(json_number_value(json_array_get(
                  json_object_get(json_object_get(json_array_get(deep, 0), "parentDiscreteValues"),
                                  "values"),
                  0)) == 0.01);
        json_t *wc = json_object_get(json_array_get(ps, 1), "conditionalParameterSpecs");
        CHECK_STR(json_string_value(json_array_get(
                      json_object_get(json_object_get(json_array_get(wc, 0), "parentIntValues"),
                                      "values"),
                      1)),
                  "3");
        /* shown back, it decodes to the same params */
        char *txt = json_dumps(ss, JSON_COMPACT);
        char *again = NULL;
        if (txt && asprintf(&again,
                            "{\"displayName\":\"h\",\"studySpec\":%s,\"trialJobSpec\":{"
                            "\"workerPoolSpecs\":[" POOL0 "]}}",
                            txt) > 0) {
            kiln_job *j2 = decode(again, NULL, true);
            const kiln_hyperparameter_spec *h2 = j2 ? &j2->training_input.hyperparameters : NULL;
            CHECK(h2 && h2->n_params == 6);
            for (size_t i = 0; h2 && i < 6 && i < h2->n_params; i++)
                CHECK_STR(h2->params[i].parameter_name, names[i]);
            kiln_job_free(j2);
        }
        free(again);
        free(txt);
        json_decref(ss);
        kiln_job_free(job);
    }
#define CAT(id, vals) "\"parameterId\":\"" id "\",\"categoricalValueSpec\":{\"values\":[" vals "]}"
#define OPTC(conds)                                                                                \
    HP("{" M ",\"parameters\":[{" CAT(                                                             \
        "opt", "\"sgd\",\"adam\"") ",\"conditionalParameterSpecs\":[" conds "]}]}")
    /* the condition's kind is the parent's type; its values the parent's */
    kiln_job_free(decode(
        OPTC("{\"parameterSpec\":{" CAT("x", "\"a\"") "},"
                                                      "\"parentIntValues\":{\"values\":[\"1\"]}}"),
        "studySpec.parameters[0].conditionalParameterSpecs[0]", true));
    kiln_job_free(decode(OPTC("{\"parameterSpec\":{" CAT("x", "\"a\"") "}}"),
                         "studySpec.parameters[0].conditionalParameterSpecs[0]", true));
    kiln_job_free(decode(
        OPTC("{\"parameterSpec\":{" CAT(
            "x", "\"a\"") "},"
                          "\"parentCategoricalValues\":{\"values\":[\"rmsprop\"]}}"),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentCategoricalValues.values",
        true));
    kiln_job_free(decode(
        HP("{" M ",\"parameters\":[{\"parameterId\":\"n\",\"integerValueSpec\":{\"minValue\":"
           "\"1\",\"maxValue\":\"4\"},\"conditionalParameterSpecs\":[{\"parameterSpec\":{" CAT(
               "x", "\"a\"") "},\"parentIntValues\":{\"values\":[\"2\",\"9\"]}}]}]}"),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentIntValues.values", true));
    kiln_job_free(decode(
        HP("{" M ",\"parameters\":[{\"parameterId\":\"d\",\"discreteValueSpec\":{\"values\":[1,"
           "2]},\"conditionalParameterSpecs\":[{\"parameterSpec\":{" CAT(
               "x", "\"a\"") "},\"parentDiscreteValues\":{\"values\":[1.5]}}]}]}"),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parentDiscreteValues.values", true));
    /* names unique across the whole study, children included */
    kiln_job_free(decode(
        OPTC("{\"parameterSpec\":{" CAT(
            "opt", "\"a\"") "},"
                            "\"parentCategoricalValues\":{\"values\":[\"sgd\"]}}"),
        "studySpec.parameters[0].conditionalParameterSpecs[0].parameterSpec.parameterId", true));
    kiln_job_free(decode(
        HP("{" M ",\"parameters\":[{" CAT(
            "opt", "\"sgd\",\"adam\"") ",\"conditionalParameterSpecs"
                                       "\":[{\"parameterSpec\":{" CAT(
                                           "x",
                                           "\"a\"") "},\"parentCategoricalValues\":{\"values\":["
                                                    "\"sgd\"]}}]},{" CAT("x", "\"b\"") "}]}"),
        "studySpec.parameters[1].parameterId", true));
    /* at most 7 levels under a top-level parameter */
    for (int depth = 7; depth <= 8; depth++) {
        char buf[8192], path[1024];
        size_t o = (size_t)snprintf(buf, sizeof buf,
                                    "{\"displayName\":\"h\",\"studySpec\":{" M ",\"parameters\":[");
        size_t q = (size_t)snprintf(path, sizeof path, "studySpec.parameters[0]");
        for (int k = 0; k <= depth; k++) {
            o += (size_t)snprintf(buf + o, sizeof buf - o,
                                  "{\"parameterId\":\"c%d\",\"categoricalValueSpec\":{\"values\":["
                                  "\"a\"]}%s",
                                  k,
                                  k < depth ? ",\"conditionalParameterSpecs\":[{"
                                              "\"parentCategoricalValues\":{\"values\":[\"a\"]},"
                                              "\"parameterSpec\":"
                                            : "");
            if (k < depth - 1)
                q += (size_t)snprintf(path + q, sizeof path - q,
                                      ".conditionalParameterSpecs[0].parameterSpec");
        }
        o += (size_t)snprintf(buf + o, sizeof buf - o, "}"); /* the innermost */
        for (int k = 0; k < depth; k++)                      /* a condition, its list, its parent */
            o += (size_t)snprintf(buf + o, sizeof buf - o, "}]}");
        snprintf(buf + o, sizeof buf - o, "]},\"trialJobSpec\":{\"workerPoolSpecs\":[" POOL0 "]}}");
        snprintf(path + q, sizeof path - q, ".conditionalParameterSpecs");
        kiln_job *dj = decode(buf, depth == 7 ? NULL : path, true);
        CHECK(depth == 8 || (dj && dj->training_input.hyperparameters.n_params == 8));
        kiln_job_free(dj);
    }
    /* at most 100 ParameterSpecs in all: 1 parent and 100 children refused */
    {
        char *buf = malloc(20000);
        size_t o = (size_t)snprintf(
            buf, 20000,
            "{\"displayName\":\"h\",\"studySpec\":{" M
            ",\"parameters\":[{" CAT("opt", "\"a\"") ",\"conditionalParameterSpecs\":[");
        for (int k = 0; k < 100; k++)
            o += (size_t)snprintf(buf + o, 20000 - o,
                                  "%s{\"parentCategoricalValues\":{\"values\":[\"a\"]},"
                                  "\"parameterSpec\":{" CAT("x%d", "\"a\"") "}}",
                                  k ? "," : "", k);
        snprintf(buf + o, 20000 - o, "]}]},\"trialJobSpec\":{\"workerPoolSpecs\":[" POOL0 "]}}");
        kiln_job_free(decode(buf, "studySpec.parameters", true));
        free(buf);
    }
#undef OPTC
#undef CAT

    /* TrainingPipelines as the SDK's three training-job classes send them:
     * snake_case and camelCase mixed in one Struct, counts as doubles */
    {
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *tp = NULL;
        char *t = slurp(KILN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_custom_job/pipeline_sdk.json");
        CHECK(t && kiln_job_from_training_pipeline(t, strlen(t), &tp, &d) == KILN_OK);
        if (d.n) kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        free(t);
        const kiln_training_input *ti = tp ? &tp->training_input : NULL;
        CHECK(ti && ti->has_vertex && !ti->has_hyperparameters);
        CHECK(ti && ti->worker_count == 2 && ti->worker_type &&
              strcmp(ti->worker_type, "n2-highcpu-8") == 0);
        CHECK(ti && ti->master_config.container_args.n == 2);
        CHECK(ti && !ti->master_config.has_disk_config); /* Vertex's default disk */
        CHECK(ti && ti->worker_config.has_disk_config &&
              ti->worker_config.disk_config.boot_disk_size_gb == 200);
        CHECK(ti && ti->vertex.base_output_directory &&
              strcmp(ti->vertex.base_output_directory,
                     "gs://stage/aiplatform-custom-training-2026") == 0);
        CHECK(ti && ti->scheduling.max_running_time.seconds == 3600);
        CHECK(ti && ti->vertex.model_to_upload == NULL);
        kiln_job_free(tp);
        /* modelToUpload kept as sent (compact, sorted), for the Model */
        static const char mt[] =
            "{\"displayName\":\"p\",\"trainingTaskDefinition\":\"" KILN_VERTEX_CUSTOM_TASK
            "\",\"trainingTaskInputs\":{\"workerPoolSpecs\":[" POOL0
            "],\"baseOutputDirectory\":{\"outputUriPrefix\":\"gs://b/o\"}},\"modelToUpload\":{"
            "\"versionAliases\":[\"default\"],\"displayName\":\"p-model\",\"containerSpec\":{"
            "\"imageUri\":\"serve:1\"}}}";
        tp = NULL;
        d = (kiln_diag)KILN_DIAG_INIT;
        CHECK(kiln_job_from_training_pipeline(mt, strlen(mt), &tp, &d) == KILN_OK);
        if (d.n) kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        CHECK(tp && tp->training_input.vertex.model_to_upload &&
              strcmp(tp->training_input.vertex.model_to_upload,
                     "{\"containerSpec\":{\"imageUri\":\"serve:1\"},\"displayName\":\"p-model\","
                     "\"versionAliases\":[\"default\"]}") == 0);
        kiln_job_free(tp);
        tp = NULL;
        d = (kiln_diag)KILN_DIAG_INIT;
        t = slurp(KILN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_custom_job/pipeline_python.json");
        CHECK(t && kiln_job_from_training_pipeline(t, strlen(t), &tp, &d) == KILN_OK);
        if (d.n) kiln_diag_print(&d, stderr);
        kiln_diag_free(&d);
        free(t);
        ti = tp ? &tp->training_input : NULL;
        CHECK(ti && ti->package_uris.n == 1 && ti->master_config.container_command.n == 3);
        CHECK(ti && strcmp(ti->master_config.container_command.v[2],
                           "aiplatform_custom_trainer_script.task") == 0);
        CHECK(ti && ti->master_config.accelerator_config.count == 1);
        kiln_job_free(tp);
    }
#define TPJ(def, inputs, extra)                                                                    \
    "{\"displayName\":\"p\",\"trainingTaskDefinition\":\"" def                                     \
    "\",\"trainingTaskInputs\":" inputs extra "}"
#define CUSTOM_TASK                                                                                \
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
    {
        static const struct {
            const char *body, *field;
        } bad[] = {
            {TPJ("gs://google-cloud-aiplatform/schema/trainingjob/definition/"
                 "automl_tabular_1.0.0.yaml",
                 "{\"workerPoolSpecs\":[" POOL0 "]}", ""),
             "trainingTaskDefinition"},
            {TPJ(CUSTOM_TASK, "{\"workerPoolSpecs\":[" POOL0 "]}",
                 ",\"modelToUpload\":{\"displayName\":\"m\"}"),
             "trainingTaskInputs.baseOutputDirectory"},
            {TPJ(CUSTOM_TASK,
                 "{\"workerPoolSpecs\":[" POOL0 "],\"baseOutputDirectory\":{\"outputUriPrefix\":"
                 "\"gs://b/o\"}}",
                 ",\"modelToUpload\":{\"displayName\":\"m\",\"explanationSpec\":{\"x\":1}}"),
             "modelToUpload.explanationSpec"},
            {TPJ(CUSTOM_TASK,
                 "{\"workerPoolSpecs\":[" POOL0 "],\"baseOutputDirectory\":{\"outputUriPrefix\":"
                 "\"gs://b/o\"}}",
                 ",\"modelToUpload\":{\"description\":\"no name\"}"),
             "modelToUpload.displayName"},
            {TPJ(CUSTOM_TASK, "{\"workerPoolSpecs\":[" POOL0 "]}",
                 ",\"inputDataConfig\":{\"datasetId\":\"1\"}"),
             "inputDataConfig"},
            {TPJ(CUSTOM_TASK, "{\"workerPoolSpecs\":[" POOL0 "],\"network\":\"n\"}", ""),
             "trainingTaskInputs.network"},
            {TPJ(CUSTOM_TASK, "{\"worker_pool_specs\":[{\"replica_count\":1}]}", ""),
             "trainingTaskInputs.workerPoolSpecs[0].machineSpec"},
            {TPJ(CUSTOM_TASK, "{\"workerPoolSpecs\":[" POOL0 "]}", ",\"state\":3"), "state"},
            {TPJ(CUSTOM_TASK, "{}", ""), "trainingTaskInputs.workerPoolSpecs"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            kiln_diag d = KILN_DIAG_INIT;
            kiln_job *tp = NULL;
            kiln_err e = kiln_job_from_training_pipeline(bad[i].body, strlen(bad[i].body), &tp, &d);
            CHECK_MSG(e == KILN_EINVAL && kiln_diag_has(&d, bad[i].field),
                      "pipeline refused at %s: %s", bad[i].field, bad[i].body);
            if (!kiln_diag_has(&d, bad[i].field)) kiln_diag_print(&d, stderr);
            kiln_job_free(tp);
            kiln_diag_free(&d);
        }
    }
    test_frame();
    test_upload();
    TEST_DONE();
}
