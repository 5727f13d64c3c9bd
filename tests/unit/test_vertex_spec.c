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
    kiln_job_free(decode(CJ("{\"containerSpec\":{\"imageUri\":\"i\"},\"machineSpec\":{"
                            "\"machineType\":\"m\"},\"replicaCount\":1,\"diskSpec\":{"
                            "\"bootDiskSizeGb\":200}}",
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
    TEST_DONE();
}
