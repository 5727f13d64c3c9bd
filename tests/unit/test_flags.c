/* test_flags.c - gcloud-style flags (kiln/submit.h): parsing, flags over a
 * config file for every flag, `--` user args, errors, program args. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/job.h"
#include "kiln/submit.h"
#include "spec/flags.h"
#include "test.h"

#define NARGS(...) ((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)))
#define ARGV(...)                                                                                  \
    NARGS(__VA_ARGS__), (char *[])                                                                 \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }

/* A config.yaml that sets every field a flag can set, to a "file" value. */
static const char config_yaml[] = "jobId: from_file\n"
                                  "labels:\n"
                                  "  team: file\n"
                                  "  keep: kept\n"
                                  "trainingInput:\n"
                                  "  scaleTier: BASIC\n"
                                  "  masterType: n1-standard-8\n"
                                  "  masterConfig:\n"
                                  "    imageUri: file/master\n"
                                  "    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K80}\n"
                                  "  workerType: n1-standard-8\n"
                                  "  workerCount: 2\n"
                                  "  workerConfig:\n"
                                  "    imageUri: file/worker\n"
                                  "    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K80}\n"
                                  "  parameterServerType: n1-standard-8\n"
                                  "  parameterServerCount: 1\n"
                                  "  parameterServerConfig:\n"
                                  "    imageUri: file/ps\n"
                                  "    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K80}\n"
                                  "  evaluatorType: n1-standard-8\n"
                                  "  evaluatorCount: 1\n"
                                  "  evaluatorConfig:\n"
                                  "    imageUri: file/eval\n"
                                  "    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K80}\n"
                                  "  packageUris: [file:///file/pkg.tar.gz]\n"
                                  "  pythonModule: file.task\n"
                                  "  args: [--file-arg, '1']\n"
                                  "  region: europe-west4\n"
                                  "  jobDir: /file/dir\n"
                                  "  runtimeVersion: '1.15'\n"
                                  "  pythonVersion: '3.7'\n";

static char config_path[64] = "/tmp/kiln_test_flags_XXXXXX";
static char pkg_dir[64] = "/tmp/kiln test pkg XXXXXX"; /* a space, to test URI escaping */

static void write_file(char *tmpl, const char *text)
{
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) exit(1);
    close(fd);
}

/* parse + build; returns the job (NULL on error) and leaves violations in d */
static kiln_job *build(int argc, char **argv, kiln_diag *d, kiln_err *errp)
{
    kiln_submit_args a;
    kiln_job *job = NULL;
    kiln_err err = kiln_submit_parse(argc, argv, &a, d);
    if (err == KILN_OK) err = kiln_submit_build(&a, &job, d);
    kiln_submit_args_free(&a);
    if (errp) *errp = err;
    return job;
}

static kiln_job *file_job(void)
{
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err err = kiln_job_from_yaml(config_yaml, strlen(config_yaml), &job, &d);
    if (err != KILN_OK) {
        kiln_diag_print(&d, stderr);
        exit(1);
    }
    kiln_diag_free(&d);
    return job;
}

/* ---- flags over the file, one flag at a time ---- */

typedef void (*setter)(kiln_job *);
#define SETTER(fn, ...)                                                                            \
    static void fn(kiln_job *j)                                                                    \
    {                                                                                              \
        kiln_training_input *ti = &j->training_input;                                              \
        (void)ti;                                                                                  \
        __VA_ARGS__;                                                                               \
    }

static void set_accel(kiln_replica_config *rc, int64_t n, const char *type)
{
    rc->has_accelerator_config = true;
    rc->accelerator_config.count = n;
    kiln_set_str(&rc->accelerator_config.type, type);
}

SETTER(s_scale_tier, kiln_set_str(&ti->scale_tier, "CUSTOM"))
SETTER(s_master_type, kiln_set_str(&ti->master_type, "n1-highmem-16"))
SETTER(s_worker_type, kiln_set_str(&ti->worker_type, "n1-highmem-16"))
SETTER(s_ps_type, kiln_set_str(&ti->parameter_server_type, "n1-highmem-16"))
SETTER(s_eval_type, kiln_set_str(&ti->evaluator_type, "n1-highmem-16"))
SETTER(s_worker_count, ti->worker_count = 7)
SETTER(s_ps_count, ti->parameter_server_count = 3)
SETTER(s_eval_count, ti->evaluator_count = 0)
SETTER(s_master_accel, set_accel(&ti->master_config, 4, "NVIDIA_TESLA_T4"))
SETTER(s_worker_accel, set_accel(&ti->worker_config, 2, "NVIDIA_TESLA_V100"))
SETTER(s_ps_accel, set_accel(&ti->parameter_server_config, 1, "NVIDIA_TESLA_P100"))
SETTER(s_eval_accel, set_accel(&ti->evaluator_config, 8, "NVIDIA_TESLA_A100"))
SETTER(s_master_image, kiln_set_str(&ti->master_config.image_uri, "flag/master"))
SETTER(s_worker_image, kiln_set_str(&ti->worker_config.image_uri, "flag/worker"))
SETTER(s_ps_image, kiln_set_str(&ti->parameter_server_config.image_uri, "flag/ps"))
SETTER(s_eval_image, kiln_set_str(&ti->evaluator_config.image_uri, "flag/eval"))
SETTER(s_job_dir, kiln_set_str(&ti->job_dir, "gs://bucket/flag"))
SETTER(s_region, kiln_set_str(&ti->region, "us-east1"))
SETTER(s_module, kiln_set_str(&ti->python_module, "flag.task"))
SETTER(s_packages, kiln_strv_clear(&ti->package_uris);
       kiln_strv_push(&ti->package_uris, "a.tar.gz"); kiln_strv_push(&ti->package_uris, "b.whl"))
SETTER(s_runtime, kiln_set_str(&ti->runtime_version, "2.11"))
SETTER(s_python, kiln_set_str(&ti->python_version, "3.10"))
SETTER(s_labels, kiln_map_set(&j->labels, "team", "flag"); kiln_map_set(&j->labels, "new", "x"))
SETTER(s_job_id, kiln_set_str(&j->job_id, "from_flags"))
SETTER(s_args, kiln_strv_clear(&ti->args); kiln_strv_push(&ti->args, "--lr");
       kiln_strv_push(&ti->args, "0.1"))
SETTER(s_nothing, )

typedef struct flag_case {
    const char *flag, *value; /* value NULL: a flag without value */
    setter set;
} flag_case;

static const flag_case cases[] = {
    {"--scale-tier", "custom", s_scale_tier},
    {"--master-machine-type", "n1-highmem-16", s_master_type},
    {"--worker-machine-type", "n1-highmem-16", s_worker_type},
    {"--parameter-server-machine-type", "n1-highmem-16", s_ps_type},
    {"--evaluator-machine-type", "n1-highmem-16", s_eval_type},
    {"--worker-count", "7", s_worker_count},
    {"--parameter-server-count", "3", s_ps_count},
    {"--evaluator-count", "0", s_eval_count},
    {"--master-accelerator", "count=4,type=nvidia-tesla-t4", s_master_accel},
    {"--worker-accelerator", "type=NVIDIA_TESLA_V100,count=2", s_worker_accel},
    {"--parameter-server-accelerator", "type=nvidia-tesla-p100", s_ps_accel},
    {"--evaluator-accelerator", "count=8,type=nvidia-tesla-a100", s_eval_accel},
    {"--master-image-uri", "flag/master", s_master_image},
    {"--worker-image-uri", "flag/worker", s_worker_image},
    {"--parameter-server-image-uri", "flag/ps", s_ps_image},
    {"--evaluator-image-uri", "flag/eval", s_eval_image},
    {"--job-dir", "gs://bucket/flag", s_job_dir},
    {"--region", "us-east1", s_region},
    {"--module-name", "flag.task", s_module},
    {"--packages", "a.tar.gz,b.whl", s_packages},
    {"--runtime-version", "2.11", s_runtime},
    {"--python-version", "3.10", s_python},
    {"--labels", "team=flag,new=x", s_labels},
    /* flags that are not job fields leave the job as the file has it */
    {"--format", "json", s_nothing},
    {"--catalog", "/nonexistent/site.yaml", s_nothing},
    {"--stream-logs", NULL, s_nothing},
    {"--async", NULL, s_nothing},
};

static void check_flag_over_file(const flag_case *fc, bool with_equals)
{
    kiln_diag d = KILN_DIAG_INIT;
    char joined[256];
    char *argv[4];
    int argc = 0;
    argv[argc++] = "--config";
    argv[argc++] = config_path;
    if (fc->value && with_equals) {
        snprintf(joined, sizeof joined, "%s=%s", fc->flag, fc->value);
        argv[argc++] = joined;
    } else {
        argv[argc++] = (char *)fc->flag;
        if (fc->value) argv[argc++] = (char *)fc->value;
    }
    kiln_job *want = file_job();
    fc->set(want);
    kiln_job *got = build(argc, argv, &d, NULL);
    CHECK_MSG(got != NULL, "%s: build failed", fc->flag);
    if (got) {
        bool eq = kiln_job_equal(want, got);
        CHECK_MSG(eq, "%s%s: job differs from the file with only that field changed", fc->flag,
                  with_equals ? "=" : " ");
        if (!eq) {
            char *a = kiln_job_to_json(want, 0), *b = kiln_job_to_json(got, 0);
            fprintf(stderr, "want %s\ngot  %s\n", a, b);
            free(a);
            free(b);
        }
    }
    CHECK_MSG(d.n == 0, "%s: %zu violations", fc->flag, d.n);
    kiln_job_free(want);
    kiln_job_free(got);
    kiln_diag_free(&d);
}

static void test_each_flag_over_file(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check_flag_over_file(&cases[i], false);
        check_flag_over_file(&cases[i], true);
    }
}

static void test_file_alone_and_job_and_args(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *want = file_job();
    kiln_job *got = build(ARGV("--config", config_path), &d, NULL);
    CHECK(got && kiln_job_equal(want, got)); /* no flags: the file as it is */
    kiln_job_free(got);

    s_job_id(want);
    got = build(ARGV("from_flags", "--config", config_path), &d, NULL);
    CHECK(got && kiln_job_equal(want, got)); /* JOB positional wins over jobId */
    kiln_job_free(got);

    s_args(want);
    got = build(ARGV("--config", config_path, "from_flags", "--", "--lr", "0.1"), &d, NULL);
    CHECK(got && kiln_job_equal(want, got)); /* user args replace the file's */
    kiln_job_free(got);
    CHECK(d.n == 0);
    kiln_job_free(want);
    kiln_diag_free(&d);
}

static void test_package_path(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    char *real = realpath(pkg_dir, NULL);
    char want[256];
    /* "/tmp/kiln test pkg X" -> file:///tmp/kiln%20test%20pkg%20X */
    char *o = want + sprintf(want, "file://");
    for (const char *p = real; *p; p++)
        o += *p == ' ' ? sprintf(o, "%%20") : sprintf(o, "%c", *p);

    kiln_job *got =
        build(ARGV("--config", config_path, "--package-path", pkg_dir, "--packages", "extra.whl"),
              &d, NULL);
    CHECK(got != NULL);
    if (got) {
        kiln_strv *pk = &got->training_input.package_uris;
        CHECK(pk->n == 2);
        if (pk->n == 2) {
            CHECK(strcmp(pk->v[0], want) == 0);
            CHECK_STR(pk->v[1], "extra.whl");
        }
    }
    kiln_job_free(got);

    got = build(ARGV("--package-path=/nonexistent/kiln/pkg"), &d, NULL);
    CHECK(got == NULL && kiln_diag_has(&d, "--package-path"));
    kiln_diag_free(&d);
    free(real);
}

/* every flag at once, no file: a job from flags alone */
static void test_flags_alone(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job =
        build(ARGV("census_1", "--scale-tier", "custom", "--master-machine-type", "n1-standard-8",
                   "--master-accelerator", "count=2,type=nvidia-tesla-v100", "--worker-count=4",
                   "--worker-machine-type", "n1-standard-8", "--region", "us-central1", "--job-dir",
                   "/srv/jobs/census", "--module-name", "trainer.task", "--labels", "team=ml", "--",
                   "--epochs", "3"),
              &d, NULL);
    CHECK(job != NULL);
    if (job) {
        kiln_training_input *ti = &job->training_input;
        CHECK(job->has_training_input);
        CHECK_STR(job->job_id, "census_1");
        CHECK_STR(ti->scale_tier, "CUSTOM");
        CHECK_STR(ti->master_type, "n1-standard-8");
        CHECK(ti->has_master_config && ti->master_config.has_accelerator_config);
        CHECK(ti->master_config.accelerator_config.count == 2);
        CHECK_STR(ti->master_config.accelerator_config.type, "NVIDIA_TESLA_V100");
        CHECK(ti->worker_count == 4);
        CHECK(!ti->has_worker_config);
        CHECK_STR(kiln_map_get(&job->labels, "team"), "ml");
        CHECK(ti->args.n == 2);
    }
    CHECK(d.n == 0);
    kiln_job_free(job);

    job = build(0, NULL, &d, NULL); /* nothing at all: an empty job */
    CHECK(job && !job->has_training_input && job->job_id == NULL);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* ---- `--` ---- */

static void test_user_args(void)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_submit_parse(
              ARGV("job1", "--region", "r", "--", "--foo", "--", "--region=x", "-v", "", "--help"),
              &a, &d) == KILN_OK);
    CHECK(a.has_user_args && a.user_args.n == 6);
    if (a.user_args.n == 6) {
        CHECK_STR(a.user_args.v[0], "--foo");
        CHECK_STR(a.user_args.v[1], "--");
        CHECK_STR(a.user_args.v[2], "--region=x");
        CHECK_STR(a.user_args.v[3], "-v");
        CHECK_STR(a.user_args.v[4], "");
        CHECK_STR(a.user_args.v[5], "--help");
    }
    CHECK_STR(a.region, "r"); /* the --region=x after -- did not count */
    kiln_submit_args_free(&a);

    /* `--` first; nothing after it; no `--` at all */
    CHECK(kiln_submit_parse(ARGV("--", "job1"), &a, &d) == KILN_OK);
    CHECK(a.job_id == NULL && a.user_args.n == 1);
    kiln_submit_args_free(&a);
    CHECK(kiln_submit_parse(ARGV("job1", "--"), &a, &d) == KILN_OK);
    CHECK(a.has_user_args && a.user_args.n == 0);
    kiln_submit_args_free(&a);
    CHECK(kiln_submit_parse(ARGV("job1"), &a, &d) == KILN_OK);
    CHECK(!a.has_user_args);
    kiln_submit_args_free(&a);
    CHECK(d.n == 0);

    /* a bare `--` with nothing after it clears the file's args; no `--` keeps them */
    kiln_job *job = build(ARGV("--config", config_path, "--"), &d, NULL);
    CHECK(job && job->training_input.args.n == 0);
    kiln_job_free(job);
    job = build(ARGV("--config", config_path), &d, NULL);
    CHECK(job && job->training_input.args.n == 2);
    kiln_job_free(job);
    /* a flag value is never taken from after `--` */
    CHECK(kiln_submit_parse(ARGV("--region", "--", "x"), &a, &d) == KILN_EINVAL);
    CHECK(kiln_diag_has(&d, "--region") && a.user_args.n == 1);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
}

/* ---- repeated flags, both spellings ---- */

static void test_repeated_and_equals(void)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_submit_parse(ARGV("--region", "a", "--region=b", "--worker-count", "1",
                                 "--worker-count=2", "--labels", "x=1,y=2", "--labels", "z=3",
                                 "--master-accelerator", "count=2,type=nvidia-tesla-k80",
                                 "--master-accelerator=type=nvidia-tesla-t4", "--packages", "a,b",
                                 "--packages=c", "--format=json", "--format", "yaml"),
                            &a, &d) == KILN_OK);
    CHECK_STR(a.region, "b");
    CHECK(a.has_worker_count && a.worker_count == 2);
    CHECK(a.labels.n == 1 && kiln_map_get(&a.labels, "z") != NULL);
    CHECK(a.master_accelerator.count == 1); /* count defaults to 1, not the earlier 2 */
    CHECK_STR(a.master_accelerator.type, "NVIDIA_TESLA_T4");
    CHECK(a.packages.n == 1);
    CHECK_STR(a.format, "yaml");
    CHECK(d.n == 0);
    kiln_submit_args_free(&a);

    /* values with '=' inside survive --flag=value */
    CHECK(kiln_submit_parse(ARGV("--master-image-uri=reg/img:1", "--labels=a=b=c"), &a, &d) ==
          KILN_OK);
    CHECK_STR(a.master_image_uri, "reg/img:1");
    CHECK_STR(kiln_map_get(&a.labels, "a"), "b=c");
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
}

/* ---- errors ---- */

static const char *message_of(const kiln_diag *d, const char *field)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].field, field) == 0) return d->v[i].description;
    return "";
}

/* parses argv, expects EINVAL and a violation on `field` whose text has `needle` */
static void expect_bad(int argc, char **argv, const char *field, const char *needle, bool usage)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err err = kiln_submit_parse(argc, argv, &a, &d);
    CHECK_MSG(err == KILN_EINVAL, "%s: got %d", field, err);
    CHECK_MSG(kiln_diag_has(&d, field), "no violation on %s", field);
    const char *msg = message_of(&d, field);
    CHECK_MSG(strstr(msg, needle) != NULL, "%s: '%s' lacks '%s'", field, msg, needle);
    CHECK_MSG((a.usage_errors > 0) == usage, "%s: usage_errors=%u", field, a.usage_errors);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
}

static void test_bad_flags(void)
{
    expect_bad(ARGV("--wroker-count", "2"), "--wroker-count", "--worker-count", true);
    expect_bad(ARGV("--regoin=x"), "--regoin", "--region", true);
    expect_bad(ARGV("--zzzzzzzzzzzzzzzzzzzzzzzzz"), "--zzzzzzzzzzzzzzzzzzzzzzzzz", "unknown", true);
    expect_bad(ARGV("--region"), "--region", "needs a value", true);
    expect_bad(ARGV("--region", "--worker-count", "1"), "--region", "needs a value", true);
    expect_bad(ARGV("--region="), "--region", "needs a value", true);
    expect_bad(ARGV("--async=yes"), "--async", "no value", true);
    expect_bad(ARGV("-v"), "", "short options", true);
    expect_bad(ARGV("job1", "job2"), "", "unexpected argument 'job2'", true);
    expect_bad(ARGV("--config", "a.yaml", "--tfjob=b.yaml"), "--tfjob", "combined", true);
    expect_bad(ARGV("--tfjob", "a.yaml", "--kubeflow-job=b.yaml"), "--kubeflow-job",
               "already given ('a.yaml')", true);
    /* a Job is JSON: bytes that are not UTF-8 never get in (found by fuzzing) */
    expect_bad(ARGV("jjcatalo\x8cg--woak"), "", "argument 1 is not valid UTF-8", true);
    expect_bad(ARGV("j", "--", "\xff"), "", "argument 3 is not valid UTF-8", true);
    expect_bad(ARGV("--region", "\xc3"), "", "not valid UTF-8", true);
    expect_bad(ARGV("--worker-count", "-1"), "--worker-count", "not a count", false);
    expect_bad(ARGV("--worker-count", "abc"), "--worker-count", "not a count", false);
    expect_bad(ARGV("--evaluator-count", "99999999999999999999"), "--evaluator-count",
               "not a count", false);
    expect_bad(ARGV("--scale-tier", "huge"), "--scale-tier", "basic-gpu", false);
    expect_bad(ARGV("--format", "xml"), "--format", "json, yaml or table", false);
    expect_bad(ARGV("--labels", "novalue"), "--labels", "KEY=VALUE", false);
    expect_bad(ARGV("--labels", "=v"), "--labels", "KEY=VALUE", false);
    expect_bad(ARGV("--labels", "a=1,,b=2"), "--labels", "empty item", false);
    expect_bad(ARGV("--packages", "a,"), "--packages", "empty item", false);
    /* job dir: absolute path or URI, no '..' */
    expect_bad(ARGV("--job-dir", "relative/dir"), "--job-dir", "absolute", false);
    expect_bad(ARGV("--job-dir", "/a/../b"), "--job-dir", "'..'", false);
    expect_bad(ARGV("--job-dir", "gs://b/x/.."), "--job-dir", "'..'", false);
    expect_bad(ARGV("--job-dir", "://x"), "--job-dir", "absolute", false);
    expect_bad(ARGV("--job-dir", "s3:/x"), "--job-dir", "absolute", false);
    expect_bad(ARGV("--job-dir", "/a\tb"), "--job-dir", "control", false);

    /* several problems at once are all reported */
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_submit_parse(ARGV("--bogus", "--worker-count", "x", "--region"), &a, &d) ==
          KILN_EINVAL);
    CHECK(d.n == 3 && a.usage_errors == 2);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
}

static void test_good_values(void)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_submit_parse(ARGV("--job-dir", "/a/..b/c..", "--scale-tier", "BASIC_GPU",
                                 "--evaluator-accelerator", "type=tpu-v2,count=8"),
                            &a, &d) == KILN_OK);
    CHECK_STR(a.job_dir, "/a/..b/c..");
    CHECK_STR(a.scale_tier, "BASIC_GPU");
    CHECK_STR(a.evaluator_accelerator.type, "TPU_V2");
    CHECK(a.evaluator_accelerator.count == 8);
    kiln_submit_args_free(&a);
    const char *uris[] = {"gs://bucket/dir", "file:///srv/x", "hdfs+ha://nn/x"};
    for (size_t i = 0; i < 3; i++) {
        CHECK(kiln_submit_parse(2, (char *[]){"--job-dir", (char *)uris[i]}, &a, &d) == KILN_OK);
        kiln_submit_args_free(&a);
    }
    CHECK(d.n == 0);
    kiln_diag_free(&d);
}

static void test_accelerator_errors(void)
{
    const char *f = "--master-accelerator";
    expect_bad(ARGV("--master-accelerator", "count=abc,type=nvidia-tesla-t4"), f, "count=abc",
               false);
    expect_bad(ARGV("--master-accelerator", "count=0,type=nvidia-tesla-t4"), f, "count=0", false);
    expect_bad(ARGV("--master-accelerator", "nothing=2"), f, "nothing", false);
    expect_bad(ARGV("--master-accelerator", "size=2,type=nvidia-tesla-t4"), f, "unknown key 'size'",
               false);
    expect_bad(ARGV("--master-accelerator", "count=1,count=2,type=t"), f, "twice", false);
    expect_bad(ARGV("--master-accelerator", "nvidia-tesla-t4"), f, "key=value", false);
    expect_bad(ARGV("--master-accelerator", "type=nvidia tesla"), f, "not an accelerator", false);
    expect_bad(ARGV("--master-accelerator", "type="), f, "not an accelerator", false);
    expect_bad(ARGV("--worker-accelerator", "count=2,,type=x"), "--worker-accelerator", "empty",
               false);
}

/* ---- files ---- */

static void test_files(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err err;
    kiln_job *job = build(ARGV("--config", "/nonexistent/kiln.yaml"), &d, &err);
    CHECK(job == NULL && err == KILN_EIO);
    CHECK(strstr(message_of(&d, "--config"), "/nonexistent/kiln.yaml") != NULL);
    kiln_diag_clear(&d);

    job = build(ARGV("--tfjob", "/tmp"), &d, &err); /* a directory */
    CHECK(job == NULL && err == KILN_EIO && kiln_diag_has(&d, "--tfjob"));
    kiln_diag_clear(&d);

    job = build(ARGV("--config", config_path, "--tfjob", config_path), &d, &err);
    CHECK(job == NULL && err == KILN_EINVAL && kiln_diag_has(&d, "--tfjob"));
    kiln_diag_clear(&d);

    /* a config.yaml with only trainingInput at the top */
    char path[64] = "/tmp/kiln_test_flags_ti_XXXXXX";
    write_file(path, "trainingInput:\n  scaleTier: BASIC\n  region: us-central1\n");
    job = build(ARGV("job_7", "--config", path), &d, &err);
    CHECK(job && err == KILN_OK);
    if (job) {
        CHECK_STR(job->job_id, "job_7");
        CHECK_STR(job->training_input.scale_tier, "BASIC");
    }
    kiln_job_free(job);
    unlink(path);

    /* a file that is not a Job: the decoder's violations, EINVAL */
    char bad[64] = "/tmp/kiln_test_flags_bad_XXXXXX";
    write_file(bad, "trainingInput:\n  workerCount: lots\n");
    job = build(ARGV("--config", bad), &d, &err);
    CHECK(job == NULL && err == KILN_EINVAL && d.n > 0);
    unlink(bad);
    kiln_diag_free(&d);
}

/* ---- what the program is given ---- */

static void test_program_args(void)
{
    kiln_job *job = kiln_job_new();
    kiln_strv out = {0};
    CHECK(kiln_job_program_args(job, &out) == KILN_OK && out.n == 0);

    job->has_training_input = true;
    kiln_strv_push(&job->training_input.args, "--epochs");
    kiln_strv_push(&job->training_input.args, "--");
    CHECK(kiln_job_program_args(job, &out) == KILN_OK && out.n == 2);

    kiln_set_str(&job->training_input.job_dir, "/srv/jobs/j1");
    kiln_strv_push(&out, "stale"); /* out is cleared first */
    CHECK(kiln_job_program_args(job, &out) == KILN_OK && out.n == 4);
    if (out.n == 4) {
        CHECK_STR(out.v[0], "--epochs");
        CHECK_STR(out.v[1], "--");
        CHECK_STR(out.v[2], "--job-dir");
        CHECK_STR(out.v[3], "/srv/jobs/j1");
    }
    kiln_strv_clear(&out);
    kiln_job_free(job);

    /* through the flags: -- args then --job-dir */
    kiln_diag d = KILN_DIAG_INIT;
    job = build(ARGV("j", "--job-dir=gs://b/j", "--", "--lr", "0.1"), &d, NULL);
    CHECK(job && kiln_job_program_args(job, &out) == KILN_OK && out.n == 4);
    if (out.n == 4) {
        CHECK_STR(out.v[0], "--lr");
        CHECK_STR(out.v[3], "gs://b/j");
    }
    kiln_strv_clear(&out);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* ---- the shared little parsers ---- */

static void test_helpers(void)
{
    int64_t v = 0;
    CHECK(kiln__parse_i64("0", &v) && v == 0);
    CHECK(kiln__parse_i64("9223372036854775807", &v) && v == INT64_MAX);
    CHECK(kiln__parse_i64("-9223372036854775808", &v) && v == INT64_MIN);
    CHECK(!kiln__parse_i64("9223372036854775808", &v));
    CHECK(!kiln__parse_i64("-9223372036854775809", &v));
    CHECK(!kiln__parse_i64("", &v) && !kiln__parse_i64("-", &v) && !kiln__parse_i64("+1", &v));
    CHECK(!kiln__parse_i64(" 1", &v) && !kiln__parse_i64("1x", &v) && !kiln__parse_i64(NULL, &v));

    char *s = kiln__accelerator_enum("nvidia-tesla-t4");
    CHECK_STR(s, "NVIDIA_TESLA_T4");
    free(s);
    s = kiln__accelerator_enum("NVIDIA_TESLA_V100");
    CHECK_STR(s, "NVIDIA_TESLA_V100");
    free(s);
    CHECK(kiln__accelerator_enum("") == NULL && kiln__accelerator_enum("a/b") == NULL);

    CHECK(kiln__utf8_valid("") && kiln__utf8_valid("abc") && kiln__utf8_valid("caf\xc3\xa9"));
    CHECK(kiln__utf8_valid("\xf0\x9f\x98\x80"));                   /* U+1F600 */
    CHECK(!kiln__utf8_valid("\x8c") && !kiln__utf8_valid("\xc3")); /* stray, cut short */
    CHECK(!kiln__utf8_valid("\xc0\xaf"));                          /* overlong '/' */
    CHECK(!kiln__utf8_valid("\xed\xa0\x80"));                      /* a surrogate */
    CHECK(!kiln__utf8_valid("\xf4\x90\x80\x80"));                  /* past U+10FFFF */
    CHECK(kiln__utf8_cut("ab\xc3\xa9", 3) == 2 && kiln__utf8_cut("ab\xc3\xa9", 4) == 4);
    CHECK(kiln__utf8_cut("abc", 10) == 3 && kiln__utf8_cut("abc", 2) == 2);
    char t1[] = "ab\xe2\x82", t2[] = "ab\xe2\x82\xac";
    kiln__utf8_trim(t1);
    kiln__utf8_trim(t2);
    CHECK(strcmp(t1, "ab") == 0);
    CHECK(strlen(t2) == 5);

    CHECK_STR(kiln__default_machine_type(NULL, 0), "n1-standard-4");
    CHECK_STR(kiln__default_machine_type("NVIDIA_TESLA_V100", 8), "n1-standard-4");
    CHECK_STR(kiln__default_machine_type("NVIDIA_TESLA_A100", 1), "a2-highgpu-1g");
    CHECK_STR(kiln__default_machine_type("NVIDIA_TESLA_A100", 3), "a2-highgpu-4g");
    CHECK_STR(kiln__default_machine_type("NVIDIA_TESLA_A100", 16), "a2-megagpu-16g");
}

int main(void)
{
    write_file(config_path, config_yaml);
    if (mkdtemp(pkg_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_each_flag_over_file();
    test_file_alone_and_job_and_args();
    test_package_path();
    test_flags_alone();
    test_user_args();
    test_repeated_and_equals();
    test_bad_flags();
    test_good_values();
    test_accelerator_errors();
    test_files();
    test_program_args();
    test_helpers();
    unlink(config_path);
    rmdir(pkg_dir);
    TEST_DONE();
}
