/* Job model codec: JSON/YAML decoding, encoding, lossless round trips, and
 * the shape errors a user sees (unknown fields, wrong types, bad YAML). */
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "spec/tree.h"
#include "util/utf8.h"
#include "test.h"

static const char *full_json =
    "{\"jobId\":\"census_42\",\"labels\":{\"team\":\"ml\",\"env\":\"dev\"},"
    "\"trainingInput\":{\"scaleTier\":\"CUSTOM\",\"masterType\":\"n1-standard-8\","
    "\"masterConfig\":{\"acceleratorConfig\":{\"count\":\"2\",\"type\":\"NVIDIA_TESLA_V100\"},"
    "\"imageUri\":\"gcr.io/p/img:1\",\"containerCommand\":[\"python\",\"-m\",\"t\"],"
    "\"diskConfig\":{\"bootDiskType\":\"pd-ssd\",\"bootDiskSizeGb\":\"200\"},"
    "\"restartPolicy\":\"ExitCode\",\"nodeSelector\":{\"pool\":\"gpu\"}},"
    "\"workerType\":\"n1-standard-8\",\"workerCount\":\"9\","
    "\"workerConfig\":{\"acceleratorConfig\":{\"count\":\"2\",\"type\":\"NVIDIA_TESLA_V100\"}},"
    "\"parameterServerType\":\"n1-highmem-8\",\"parameterServerCount\":3,"
    "\"evaluatorType\":\"n1-standard-4\",\"evaluatorCount\":\"1\","
    "\"packageUris\":[\"gs://b/p.tar.gz\"],\"pythonModule\":\"trainer.task\","
    "\"args\":[\"--epochs\",\"5\",\"--\",\"x y\"],\"region\":\"us-central1\","
    "\"jobDir\":\"gs://b/out\",\"pythonVersion\":\"3.7\","
    "\"hyperparameters\":{\"goal\":\"MAXIMIZE\",\"maxTrials\":\"10\",\"params\":["
    "{\"parameterName\":\"lr\",\"type\":\"DOUBLE\",\"minValue\":0.0001,\"maxValue\":0.1,"
    "\"scaleType\":\"UNIT_LOG_SCALE\"},{\"parameterName\":\"layers\",\"type\":\"DISCRETE\","
    "\"discreteValues\":[1,2,4]}]},"
    "\"scheduling\":{\"maxRunningTime\":\"7200s\",\"maxWaitTime\":\"1800.5s\",\"priority\":\"7\"},"
    "\"serviceAccount\":\"sa@p\",\"network\":\"default\",\"useChiefInTfConfig\":true,"
    "\"enableWebAccess\":true,\"runPolicy\":{\"backoffLimit\":\"0\",\"cleanPodPolicy\":\"All\"}},"
    "\"state\":\"RUNNING\",\"createTime\":\"2026-01-01T00:00:00Z\",\"etag\":\"abc\"}";

static kiln_job *must_json(const char *s)
{
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err rc = kiln_job_from_json(s, strlen(s), &job, &d);
    if (rc != KILN_OK) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

static void test_decode_fields(void)
{
    kiln_job *job = must_json(full_json);
    CHECK(job != NULL);
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK_STR(job->job_id, "census_42");
    CHECK_STR(kiln_map_get(&job->labels, "env"), "dev");
    CHECK_STR(ti->scale_tier, "CUSTOM");
    CHECK(ti->has_master_config && ti->master_config.has_accelerator_config);
    CHECK(ti->master_config.accelerator_config.count == 2);
    CHECK(ti->worker_count == 9);           /* int64 as string */
    CHECK(ti->parameter_server_count == 3); /* int64 as number */
    CHECK(ti->master_config.disk_config.boot_disk_size_gb == 200);
    CHECK(ti->master_config.container_command.n == 3);
    CHECK_STR(ti->master_config.restart_policy, "ExitCode");
    CHECK(ti->args.n == 4 && strcmp(ti->args.v[2], "--") == 0);
    CHECK(ti->scheduling.max_running_time.seconds == 7200);
    CHECK(ti->scheduling.max_wait_time.seconds == 1800 &&
          ti->scheduling.max_wait_time.nanos == 500000000);
    CHECK(ti->scheduling.priority == 7);
    CHECK(ti->use_chief_in_tf_config && ti->enable_web_access);
    CHECK(ti->has_run_policy && ti->run_policy.has_backoff_limit &&
          ti->run_policy.backoff_limit == 0);
    CHECK(ti->hyperparameters.n_params == 2);
    CHECK(ti->hyperparameters.params[1].n_discrete_values == 3 &&
          ti->hyperparameters.params[1].discrete_values[2] == 4.0);
    CHECK(job->state == KILN_STATE_RUNNING);
    CHECK(kiln_job_role_count(job, KILN_ROLE_WORKER) == 9);
    CHECK_STR(kiln_job_role_type(job, KILN_ROLE_PARAMETER_SERVER), "n1-highmem-8");
    CHECK(kiln_job_role_config(job, KILN_ROLE_EVALUATOR) == NULL);
    kiln_job_free(job);
}

/* JSON -> model -> JSON -> model and JSON -> model -> YAML -> model must all
 * give the same model: nothing is lost or changed on the way. */
static void test_round_trips(void)
{
    kiln_job *a = must_json(full_json), *b = NULL, *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    char *js = a ? kiln_job_to_json(a, 0) : NULL;
    char *ys = a ? kiln_job_to_yaml(a) : NULL;
    CHECK(js && ys);
    if (!js || !ys) goto out;
    CHECK(kiln_job_from_json(js, strlen(js), &b, &d) == KILN_OK);
    CHECK(kiln_job_from_yaml(ys, strlen(ys), &c, &d) == KILN_OK);
    kiln_diag_print(&d, stderr);
    CHECK(b && kiln_job_equal(a, b));
    CHECK(c && kiln_job_equal(a, c));
    /* int64 travel as strings in JSON (proto3), numbers in YAML */
    CHECK(strstr(js, "\"workerCount\": \"9\"") != NULL);
    CHECK(strstr(ys, "workerCount: 9") != NULL);
    /* a version string must stay a string for other YAML readers */
    CHECK(strstr(ys, "pythonVersion: \"3.7\"") != NULL);
    kiln_job *e = kiln_job_clone(a);
    CHECK(e && kiln_job_equal(a, e));
    if (e) {
        kiln_set_str(&e->training_input.region, "europe-west4");
        CHECK(!kiln_job_equal(a, e));
    }
    kiln_job_free(e);
out:
    free(js);
    free(ys);
    kiln_job_free(a);
    kiln_job_free(b);
    kiln_job_free(c);
    kiln_diag_free(&d);
}

static void test_yaml_config(void)
{
    const char *y = "# AI Platform config.yaml\n"
                    "trainingInput:\n"
                    "  scaleTier: CUSTOM\n"
                    "  masterType: complex_model_m\n"
                    "  workerType: complex_model_m\n"
                    "  workerCount: 9\n"
                    "  runtimeVersion: 2.1\n"
                    "  useChiefInTfConfig: true\n"
                    "  args: [--epochs, 5, \"--flag=x\"]\n"
                    "  scheduling: {maxWaitTime: 3600s, priority: 10}\n"
                    "  masterConfig: ~\n";
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_yaml(y, strlen(y), &job, &d) == KILN_OK);
    kiln_diag_print(&d, stderr);
    if (job) {
        CHECK(job->training_input.worker_count == 9);
        CHECK_STR(job->training_input.runtime_version, "2.1"); /* not 2.1000000000000001 */
        CHECK(job->training_input.use_chief_in_tf_config);
        CHECK(job->training_input.args.n == 3 && strcmp(job->training_input.args.v[1], "5") == 0);
        CHECK(job->training_input.scheduling.max_wait_time.seconds == 3600);
        CHECK(!job->training_input.has_master_config); /* null = not set */
    }
    kiln_job_free(job);
    kiln_diag_free(&d);

    /* YAML's capitalised booleans (kiln__parse_bool, as the Kubeflow files read them) */
    const char *caps = "trainingInput: {useChiefInTfConfig: TRUE, enableWebAccess: False}\n";
    CHECK(kiln_job_from_yaml(caps, strlen(caps), &job, &d) == KILN_OK && job &&
          job->training_input.use_chief_in_tf_config && !job->training_input.enable_web_access);
    kiln_job_free(job);
    kiln_diag_free(&d);

    /* an empty file is an empty job: flags may supply everything */
    CHECK(kiln_job_from_yaml("", 0, &job, &d) == KILN_OK && job && !job->has_training_input);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* Each bad input must give KILN_EINVAL (or ELIMIT) and a violation at `path`. */
static void expect_error(int yaml, const char *in, const char *path, const char *needle)
{
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err rc = yaml ? kiln_job_from_yaml(in, strlen(in), &job, &d)
                       : kiln_job_from_json(in, strlen(in), &job, &d);
    CHECK_MSG(rc != KILN_OK && job == NULL, "accepted: %s", in);
    CHECK_MSG(kiln_diag_has(&d, path), "no violation at \"%s\" for %s", path, in);
    int found = !needle;
    for (size_t i = 0; i < d.n && !found; i++)
        found = strstr(d.v[i].description, needle) != NULL;
    CHECK_MSG(found, "no message containing \"%s\" for %s", needle, in);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_shape_errors(void)
{
    expect_error(0, "{\"trainingInput\":{\"workerCnt\":\"3\"}}", "trainingInput.workerCnt",
                 "did you mean \"workerCount\"");
    expect_error(0, "{\"trainingInput\":{\"workerCount\":\"three\"}}", "trainingInput.workerCount",
                 "not a whole number");
    expect_error(0, "{\"trainingInput\":{\"workerCount\":1.5}}", "trainingInput.workerCount",
                 "whole number");
    expect_error(0, "{\"trainingInput\":{\"scaleTier\":\"HUGE\"}}", "trainingInput.scaleTier",
                 "CUSTOM");
    expect_error(0, "{\"trainingInput\":{\"region\":5}}", "trainingInput.region",
                 "expected a string");
    expect_error(0, "{\"trainingInput\":{\"args\":[\"a\",7]}}", "trainingInput.args[1]",
                 "expected a string");
    expect_error(0, "{\"trainingInput\":{\"useChiefInTfConfig\":\"yes\"}}",
                 "trainingInput.useChiefInTfConfig", "true or false");
    expect_error(0, "{\"trainingInput\":{\"scheduling\":{\"maxWaitTime\":\"30m\"}}}",
                 "trainingInput.scheduling.maxWaitTime", "3600s");
    expect_error(0, "{\"trainingInput\":{\"masterConfig\":{\"restartPolicy\":\"Sometimes\"}}}",
                 "trainingInput.masterConfig.restartPolicy", "OnFailure");
    expect_error(0, "{\"state\":\"DONE\"}", "state", "SUCCEEDED");
    expect_error(0, "[1,2]", "", "expected an object");
    expect_error(0, "{\"jobId\": \"a\", \"jobId\": \"b\"}", "", "duplicate");
    /* JSON that does not parse is refused at the field where it stops */
    expect_error(0, "{\"jobId\": ", "jobId", "line 1");
    expect_error(0, "{\"trainingInput\":{\"args\":[\"x\",]}}", "trainingInput.args[1]",
                 "unexpected token");
    expect_error(0, "{\"trainingInput\":{\"masterConfig\":{\"env\":{\"A\":1e}}}}",
                 "trainingInput.masterConfig.env.A", "line 1");
    expect_error(0, "{\"trainingInput\":{\"workerCount\":99999999999999999999999}}",
                 "trainingInput.workerCount", "too big integer");
    expect_error(0, "{\"labels\":{\"a\\u0000b\":\"x\"}}", "labels", "NUL character");
    /* NUL is refused at its field, in every kind of field that reads text */
    expect_error(0, "{\"trainingInput\":{\"args\":[\"ok\",\"a\\u0000b\"]}}",
                 "trainingInput.args[1]", "NUL character (\\u0000) at byte 1");
    expect_error(0, "{\"trainingInput\":{\"workerCount\":\"2\\u0000\"}}",
                 "trainingInput.workerCount", "NUL");
    expect_error(0, "{\"trainingInput\":{\"scaleTier\":\"BASIC\\u0000\"}}",
                 "trainingInput.scaleTier", "NUL");
    expect_error(0, "{\"trainingInput\":{\"scheduling\":{\"maxWaitTime\":\"3600s\\u0000\"}}}",
                 "trainingInput.scheduling.maxWaitTime", "NUL");
    expect_error(0, "{\"state\":\"QUEUED\\u0000\"}", "state", "NUL");
    expect_error(1, "labels: {\"a\\0b\": x}\n", "", "NUL character");
    /* the limits name themselves */
    expect_error(0, "{\"trainingInput\":{\"scheduling\":{\"priority\":99999999999}}}",
                 "trainingInput.scheduling.priority", "an int32 holds -2147483648 to 2147483647");
    expect_error(1, "trainingInput:\n  workerCount: [1\n", "", "line");
    expect_error(1, "a: &x 1\nb: *x\n", "", "aliases");
    expect_error(1, "jobId: a\n---\njobId: b\n", "", "one YAML document");
    expect_error(1, "jobId: a\njobId: b\n", "", "duplicate key");
    expect_error(1, "trainingInput: {useChiefInTfConfig: yes}\n",
                 "trainingInput.useChiefInTfConfig", "true or false");
    expect_error(1, "? [a]\n: b\n", "", "keys must be plain strings");
    expect_error(1, "trainingInput: [1]\n", "trainingInput", "expected an object");
    expect_error(1, "\xff\xfe: x\n", "", NULL); /* not UTF-8 */
    expect_error(0, "{\"jobId\": \"\xc3\x28\"}", "jobId", NULL);
}

static void test_all_errors_reported(void)
{
    const char *in = "{\"trainingInput\":{\"workerCount\":\"x\",\"bogus\":1,"
                     "\"masterConfig\":{\"acceleratorConfig\":{\"count\":true}}}}";
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_json(in, strlen(in), &job, &d) == KILN_EINVAL);
    CHECK(d.n == 3);
    CHECK(kiln_diag_has(&d, "trainingInput.masterConfig.acceleratorConfig.count"));
    char *env = kiln_diag_to_envelope(&d, 400, "INVALID_ARGUMENT", "bad job");
    CHECK(env && strstr(env, "\"fieldViolations\"") && strstr(env, "INVALID_ARGUMENT") &&
          strstr(env, "google.rpc.BadRequest") && strstr(env, "trainingInput.bogus"));
    free(env);
    kiln_diag_free(&d);
}

/* A message that quotes user text cut to a length must stay valid UTF-8, or
 * the JSON error envelope could not be written at all. */
static void test_cut_utf8_in_messages(void)
{
    char in[256];
    /* 63 bytes, then a 2-byte character straddling the 64-byte quote limit */
    snprintf(in, sizeof in, "{\"trainingInput\":{\"workerCount\":\"%s\xc3\xa9x\"}}",
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_json(in, strlen(in), &job, &d) == KILN_EINVAL);
    CHECK(d.n == 1 && kiln__utf8_valid(d.v[0].description));
    char *env = kiln_diag_to_envelope(&d, 400, "INVALID_ARGUMENT", "bad");
    CHECK(env != NULL);
    free(env);
    kiln_diag_clear(&d);
    kiln_diag_add(&d, "f\xff", "raw \xc3 byte");
    CHECK(d.n == 1 && strcmp(d.v[0].field, "f?") == 0 &&
          strcmp(d.v[0].description, "raw ? byte") == 0);
    kiln_diag_free(&d);
}

static void test_limits(void)
{
    /* deep nesting: refused by depth cap, no crash */
    size_t depth = 10000;
    char *deep = malloc(depth * 2 + 1);
    for (size_t i = 0; i < depth; i++)
        deep[i] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[depth + i] = ']';
    deep[depth * 2] = 0;
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_yaml(deep, strlen(deep), &job, &d) == KILN_ELIMIT && !job);
    kiln_diag_clear(&d);
    CHECK(kiln_job_from_json(deep, strlen(deep), &job, &d) != KILN_OK && !job);
    kiln_diag_clear(&d);
    free(deep);

    /* oversized input is refused before parsing */
    size_t big = KILN_SPEC_MAX_BYTES + 1;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[big] = 0;
    CHECK(kiln_job_from_json(huge, big, &job, &d) == KILN_ELIMIT);
    CHECK(kiln_job_from_yaml(huge, big, &job, &d) == KILN_ELIMIT);
    free(huge);
    kiln_diag_clear(&d);

    /* the violation list is capped but counts what it dropped */
    for (int i = 0; i < KILN_DIAG_MAX + 10; i++)
        kiln_diag_add(&d, "f", "v%d", i);
    CHECK(d.n == KILN_DIAG_MAX && d.dropped == 10);
    kiln_diag_free(&d);
}

/* The ml v1 API's int32 fields are JSON numbers, its int64 fields strings
 * (proto3's JSON mapping, which gcloud decodes); both are read either way. */
static void test_int_wire_types(void)
{
    kiln_job *job = must_json("{\"jobId\":\"a\",\"trainingInput\":{\"workerCount\":3,"
                              "\"scheduling\":{\"priority\":\"5\"},\"masterConfig\":{"
                              "\"diskConfig\":{\"bootDiskSizeGb\":\"100\"}}}}");
    CHECK(job != NULL);
    char *js = job ? kiln_job_to_json(job, KILN_ENC_COMPACT) : NULL;
    CHECK(js && strstr(js, "\"workerCount\":\"3\""));
    CHECK(js && strstr(js, "\"priority\":5"));
    CHECK(js && strstr(js, "\"bootDiskSizeGb\":100"));
    free(js);
    kiln_job_free(job);
    expect_error(0, "{\"trainingInput\":{\"scheduling\":{\"priority\":4294967296}}}",
                 "trainingInput.scheduling.priority", "int32");
}

/* Kubeflow's restart rule, which both executors now ask (job.h). */
static void test_restart_policy_retries(void)
{
    CHECK(kiln_restart_policy_retries("Always", 0));
    CHECK(kiln_restart_policy_retries("Always", 1));
    CHECK(!kiln_restart_policy_retries("OnFailure", 0));
    CHECK(kiln_restart_policy_retries("OnFailure", 1));
    CHECK(kiln_restart_policy_retries("OnFailure", 137));
    CHECK(!kiln_restart_policy_retries("ExitCode", 0));
    CHECK(!kiln_restart_policy_retries("ExitCode", 1));
    CHECK(!kiln_restart_policy_retries("ExitCode", 127)); /* permanent */
    CHECK(kiln_restart_policy_retries("ExitCode", 128));
    CHECK(kiln_restart_policy_retries("ExitCode", 143)); /* SIGTERM */
    CHECK(!kiln_restart_policy_retries("Never", 137));
}

int main(void)
{
    test_decode_fields();
    test_round_trips();
    test_yaml_config();
    test_shape_errors();
    test_all_errors_reported();
    test_cut_utf8_in_messages();
    test_limits();
    test_int_wire_types();
    test_restart_policy_retries();
    TEST_DONE();
}
