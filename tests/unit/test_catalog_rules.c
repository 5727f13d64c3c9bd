/* test_catalog_rules.c - the validator's rules other than the count table
 * (platform facts §1, §2, §4, §5 and kiln's own), site overlays, normalise
 * and plan. Jobs are built in C so that each test changes one thing. */
#include "test.h"
#include "test_catalog_helpers.h"

/* ---------- jobId, labels, required fields ---------- */

static void test_job_id(const kiln_catalog *c, kiln_diag *d)
{
    static const char *const good[] = {"a", "census_1", "Job2", "x_y_z_9"};
    static const char *const bad[] = {"", "1job", "_job", "my-job", "job.1", "job 1", "jöb"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kiln_job *j = mkcustom("n1-standard-4", NULL, 0);
        kiln_set_str(&j->job_id, good[i]);
        CHECK_VALID(c, j, d);
        kiln_job_free(j);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_job *j = mkcustom("n1-standard-4", NULL, 0);
        kiln_set_str(&j->job_id, bad[i]);
        CHECK_ONLY(c, j, d, "jobId");
        kiln_job_free(j);
    }
    char long_id[200];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    kiln_job *j = mkcustom("n1-standard-4", NULL, 0);
    kiln_set_str(&j->job_id, long_id);
    CHECK_ONLY(c, j, d, "jobId");
    long_id[128] = '\0'; /* the cap itself is fine */
    kiln_set_str(&j->job_id, long_id);
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
}

static void test_labels(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-4", NULL, 0);
    kiln_map_set(&j->labels, "team", "vision");
    kiln_map_set(&j->labels, "run-id", "r_17");
    kiln_map_set(&j->labels, "empty", "");
    CHECK_VALID(c, j, d);
    kiln_map_set(&j->labels, "Team", "x");
    CHECK_ONLY(c, j, d, "labels.Team");
    kiln_job_free(j);

    j = mkcustom("n1-standard-4", NULL, 0);
    kiln_map_set(&j->labels, "owner", "Alice");
    CHECK_ONLY(c, j, d, "labels.owner");
    kiln_map_set(&j->labels, "owner", "alice");
    kiln_map_set(&j->labels, "9lives", "x");
    CHECK_ONLY(c, j, d, "labels.9lives");
    kiln_job_free(j);

    j = mkcustom("n1-standard-4", NULL, 0);
    for (int i = 0; i < 65; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        kiln_map_set(&j->labels, k, "v");
    }
    CHECK_ONLY(c, j, d, "labels");
    kiln_job_free(j);

    /* Kubernetes keys (PREFIX/NAME) follow Kubernetes' rule, value included */
    j = mkcustom("n1-standard-4", NULL, 0);
    kiln_map_set(&j->labels, "app.kubernetes.io/name", "MNIST.v2");
    kiln_map_set(&j->labels, "kueue.x-k8s.io/queue-name", "");
    CHECK_VALID(c, j, d);
    kiln_map_set(&j->labels, "Bad_Prefix.io/name", "x");
    CHECK_ONLY(c, j, d, "labels.Bad_Prefix.io/name");
    kiln_map_clear(&j->labels);
    kiln_map_set(&j->labels, "app.kubernetes.io/name", "-starts-with-dash");
    CHECK_ONLY(c, j, d, "labels.app.kubernetes.io/name");
    kiln_map_clear(&j->labels);
    kiln_map_set(&j->labels, "example.com/", "x");
    CHECK_ONLY(c, j, d, "labels.example.com/");
    kiln_job_free(j);
}

static void test_required(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkjob(NULL, NULL);
    run_validate(c, j, d);
    CHECK(d->n == 2);
    CHECK(kiln_diag_has(d, "trainingInput.scaleTier"));
    CHECK(kiln_diag_has(d, "trainingInput.region"));
    kiln_set_str(&j->training_input.scale_tier, "ULTRA");
    kiln_set_str(&j->training_input.region, "us-central2");
    run_validate(c, j, d);
    CHECK(d->n == 2);
    CHECK_SAYS(d, "trainingInput.scaleTier", "BASIC, STANDARD_1, PREMIUM_1, BASIC_GPU");
    CHECK_SAYS(d, "trainingInput.region", "did you mean 'us-central1'");
    kiln_job_free(j);

    j = kiln_job_new();
    kiln_set_str(&j->job_id, "j");
    CHECK_ONLY(c, j, d, "trainingInput");
    kiln_job_free(j);
}

/* ---------- scale tiers and CUSTOM ---------- */

static void test_preset_tiers(const kiln_catalog *c, kiln_diag *d)
{
    static const char *const tiers[] = {"BASIC", "STANDARD_1", "PREMIUM_1", "BASIC_GPU",
                                        "BASIC_TPU"};
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
        kiln_job *j = mkjob(tiers[i], "us-central1");
        CHECK_MSG(run_validate(c, j, d) == 0, "%s", tiers[i]);
        kiln_diag_print(d, stderr);
        kiln_job_free(j);
    }
    /* per-type settings and counts only with CUSTOM */
    kiln_job *j = mkjob("BASIC", "us-central1");
    set_role(j, KILN_ROLE_MASTER, "n1-standard-4", 1);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-4", 2);
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_TESLA_T4", 1);
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->image_uri, "gcr.io/p/t:1");
    run_validate(c, j, d);
    CHECK(d->n == 5);
    CHECK(kiln_diag_has(d, "trainingInput.masterType"));
    CHECK(kiln_diag_has(d, "trainingInput.workerType"));
    CHECK(kiln_diag_has(d, "trainingInput.workerCount"));
    CHECK(kiln_diag_has(d, "trainingInput.masterConfig.acceleratorConfig"));
    CHECK(kiln_diag_has(d, "trainingInput.workerConfig")); /* BASIC has no workers */
    CHECK_SAYS(d, "trainingInput.masterType", "only allowed with scaleTier CUSTOM");
    kiln_job_free(j);

    /* a custom image is fine with a preset tier */
    j = mkjob("BASIC", "us-central1");
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "gcr.io/p/trainer:1");
    CHECK_VALID(c, j, d);
    kiln_job_free(j);

    /* BASIC_GPU is a K80: not in a region without K80s */
    j = mkjob("BASIC_GPU", "us-west2");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    kiln_job_free(j);
    /* BASIC_TPU needs a TPU region */
    j = mkjob("BASIC_TPU", "us-east1");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    kiln_job_free(j);
}

static void test_custom(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkjob("CUSTOM", "us-central1");
    CHECK_ONLY(c, j, d, "trainingInput.masterType");
    kiln_job_free(j);

    j = mkcustom("n1-standard-8", NULL, 0);
    j->training_input.worker_count = 3;
    CHECK_ONLY(c, j, d, "trainingInput.workerType");
    CHECK_SAYS(d, "trainingInput.workerType", "workerCount is 3");
    j->training_input.worker_count = 0;
    j->training_input.parameter_server_count = 2;
    CHECK_ONLY(c, j, d, "trainingInput.parameterServerType");
    j->training_input.parameter_server_count = 0;
    j->training_input.evaluator_count = 1;
    CHECK_ONLY(c, j, d, "trainingInput.evaluatorType");
    set_role(j, KILN_ROLE_EVALUATOR, "n1-standard-4", -1);
    CHECK_ONLY(c, j, d, "trainingInput.evaluatorCount");
    set_role(j, KILN_ROLE_EVALUATOR, "n1-standard-44", 1);
    CHECK_ONLY(c, j, d, "trainingInput.evaluatorType");
    CHECK_SAYS(d, "trainingInput.evaluatorType", "unknown machine type 'n1-standard-44'");
    set_role(j, KILN_ROLE_EVALUATOR, "n1-standard-4", 1);
    set_role(j, KILN_ROLE_WORKER, "n1-highmem-8", 4);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "n1-highcpu-16", 2);
    CHECK_VALID(c, j, d);
    kiln_job_free(j);

    j = mkcustom("cloud_tpu", NULL, 0);
    CHECK_ONLY(c, j, d, "trainingInput.masterType");
    kiln_job_free(j);
}

static void test_family(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "complex_model_m", 2);
    CHECK_ONLY(c, j, d, "trainingInput.workerType");
    CHECK_SAYS(d, "trainingInput.workerType", "must be of the master's family");
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 2);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "large_model", 1);
    set_role(j, KILN_ROLE_EVALUATOR, "standard", 1);
    run_validate(c, j, d);
    CHECK(d->n == 2);
    CHECK(kiln_diag_has(d, "trainingInput.parameterServerType"));
    CHECK(kiln_diag_has(d, "trainingInput.evaluatorType"));
    kiln_job_free(j);

    j = mkcustom("complex_model_m", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "complex_model_m", 4);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "large_model", 2);
    CHECK_VALID(c, j, d);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "n1-highmem-8", 2);
    CHECK_ONLY(c, j, d, "trainingInput.parameterServerType");
    kiln_job_free(j);
}

/* ---------- zones ---------- */

static void test_zones(const kiln_catalog *c, kiln_diag *d)
{
    /* us-central1 offers V100, K80 and P100, but no zone offers all three */
    kiln_job *j = mkcustom("n1-standard-8", "NVIDIA_TESLA_V100", 1);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 2);
    set_accel(j, KILN_ROLE_WORKER, "NVIDIA_TESLA_K80", 1);
    set_role(j, KILN_ROLE_EVALUATOR, "n1-standard-8", 1);
    set_accel(j, KILN_ROLE_EVALUATOR, "NVIDIA_TESLA_P100", 1);
    CHECK_ONLY(c, j, d, "trainingInput.region");
    CHECK_SAYS(d, "trainingInput.region", "no zone of us-central1 offers all of");
    CHECK_SAYS(d, "trainingInput.region", "us-central1-a offers K80, P4, T4, V100, A100");
    CHECK_SAYS(d, "trainingInput.region", "us-central1-c offers K80, P4, P100, T4");
    /* each pair is offered together by one zone */
    set_role(j, KILN_ROLE_EVALUATOR, NULL, 0);
    CHECK_VALID(c, j, d); /* V100 + K80: us-central1-a */
    set_accel(j, KILN_ROLE_WORKER, "NVIDIA_TESLA_P100", 1);
    CHECK_VALID(c, j, d); /* V100 + P100: us-central1-f */
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_TESLA_K80", 1);
    CHECK_VALID(c, j, d); /* K80 + P100: us-central1-c */
    kiln_job_free(j);

    /* the built-in GPUs of legacy types count too */
    j = mkcustom("standard_v100", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "complex_model_m_gpu", 1);
    set_role(j, KILN_ROLE_EVALUATOR, "standard_p100", 1);
    CHECK_ONLY(c, j, d, "trainingInput.region");
    kiln_job_free(j);

    /* a region without GPUs */
    j = mkcustom("n1-standard-8", "NVIDIA_TESLA_T4", 1);
    kiln_set_str(&j->training_input.region, "europe-north1");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    CHECK_SAYS(d, "trainingInput.region", "offers no GPUs");
    set_accel(j, KILN_ROLE_MASTER, NULL, 0);
    j->training_input.master_config.has_accelerator_config = false;
    CHECK_VALID(c, j, d); /* CPU only is fine there */
    /* a GPU region that lacks the type */
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_TESLA_V100", 1);
    kiln_set_str(&j->training_input.region, "us-west2");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    kiln_job_free(j);

    /* every GPU region of the facts has zones with GPUs */
    static const char *const gpu_regions[] = {"us-west1",           "us-west2",
                                              "us-central1",        "us-east1",
                                              "us-east4",           "northamerica-northeast1",
                                              "southamerica-east1", "europe-west1",
                                              "europe-west2",       "europe-west4",
                                              "asia-south1",        "asia-southeast1",
                                              "asia-east1",         "asia-northeast1",
                                              "asia-northeast3",    "australia-southeast1"};
    for (size_t i = 0; i < sizeof gpu_regions / sizeof gpu_regions[0]; i++) {
        const kiln_region *r = kiln_catalog_region(c, gpu_regions[i]);
        size_t gpus = 0;
        for (size_t z = 0; r && z < r->n_zones; z++)
            gpus += r->zones[z].n_accelerators;
        CHECK_MSG(r && gpus > 0, "%s", gpu_regions[i]);
    }
}

/* ---------- TPU ---------- */

static kiln_job *mktpu(const char *master, const char *tpu, int64_t cores)
{
    kiln_job *j = mkcustom(master, NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "cloud_tpu", 1);
    if (tpu) set_accel(j, KILN_ROLE_WORKER, tpu, cores);
    return j;
}

static void test_tpu(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mktpu("standard", NULL, 0); /* legacy master: TPU v2 */
    CHECK_VALID(c, j, d);
    set_accel(j, KILN_ROLE_WORKER, "TPU_V3", 8);
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig");
    kiln_job_free(j);

    j = mktpu("n1-standard-16", NULL, 0); /* CE master must name the TPU */
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig");
    set_accel(j, KILN_ROLE_WORKER, "TPU_V3", 8);
    CHECK_VALID(c, j, d);
    set_accel(j, KILN_ROLE_WORKER, "TPU_V3", 16);
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig.count");
    set_accel(j, KILN_ROLE_WORKER, "NVIDIA_TESLA_V100", 8);
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig.type");
    set_accel(j, KILN_ROLE_WORKER, "TPU_V2_POD", 512);
    CHECK_VALID(c, j, d);
    set_accel(j, KILN_ROLE_WORKER, "TPU_V3_POD", 512);
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig.count");
    set_accel(j, KILN_ROLE_WORKER, "TPU_V3_POD", 256);
    CHECK_VALID(c, j, d);

    /* exactly one TPU worker; no parameter servers */
    j->training_input.worker_count = 2;
    CHECK_ONLY(c, j, d, "trainingInput.workerCount");
    j->training_input.worker_count = 1;
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "n1-standard-8", 1);
    CHECK_ONLY(c, j, d, "trainingInput.parameterServerCount");
    set_role(j, KILN_ROLE_PARAMETER_SERVER, NULL, 0);

    /* TPU regions */
    kiln_set_str(&j->training_input.region, "europe-west4");
    CHECK_VALID(c, j, d);
    kiln_set_str(&j->training_input.region, "asia-east1");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    CHECK_SAYS(d, "trainingInput.region", "us-central1, europe-west4");
    kiln_set_str(&j->training_input.region, "us-central1");

    /* runtime versions for TPU */
    static const char *const ok[] = {"1.15", "2.1", "2.5", "2.9", "2.11"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kiln_set_str(&j->training_input.runtime_version, ok[i]);
        CHECK_VALID(c, j, d);
    }
    kiln_set_str(&j->training_input.runtime_version, "2.10");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    kiln_set_str(&j->training_input.runtime_version, "1.14");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    kiln_set_str(&j->training_input.runtime_version, NULL);

    /* a custom image on the TPU worker needs tpuTfVersion */
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "gcr.io/p/xla:1");
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.tpuTfVersion");
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->tpu_tf_version, "pytorch-1.11");
    CHECK_VALID(c, j, d);
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->tpu_tf_version, "pytorch-1.5");
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.tpuTfVersion");
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->tpu_tf_version, "2.3");
    CHECK_VALID(c, j, d);
    kiln_job_free(j);

    /* a TPU type on a GPU machine, tpuTfVersion off a TPU worker */
    j = mkcustom("n1-standard-8", "TPU_V2", 8);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.type");
    kiln_job_free(j);
    j = mkcustom("n1-standard-8", NULL, 0);
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->tpu_tf_version, "2.3");
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.tpuTfVersion");
    kiln_job_free(j);

    /* BASIC_TPU: no parameter servers can be added anyway; tpuTfVersion allowed */
    j = mkjob("BASIC_TPU", "europe-west4");
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->tpu_tf_version, "2.11");
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
}

/* ---------- images, commands, runtime versions ---------- */

static void test_images(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    kiln_set_str(&j->training_input.runtime_version, "2.11");
    CHECK_VALID(c, j, d);
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "gcr.io/p/t:1");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    CHECK_SAYS(d, "trainingInput.runtimeVersion", "at most one of masterConfig.imageUri");
    kiln_set_str(&j->training_input.runtime_version, NULL);
    CHECK_VALID(c, j, d);
    kiln_set_str(&j->training_input.runtime_version, "3.0");
    kiln_set_str(&j->training_input.master_config.image_uri, NULL);
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    kiln_job_free(j);

    /* containerCommand without an image: kiln runs it as a plain process */
    j = mkcustom("n1-standard-8", NULL, 0);
    kiln_strv_push(&role_cfg(j, KILN_ROLE_MASTER)->container_command, "python3");
    kiln_strv_push(&role_cfg(j, KILN_ROLE_MASTER)->container_args, "train.py");
    CHECK_VALID(c, j, d);
    kiln_strv_push(&j->training_input.args, "--epochs=3");
    CHECK_ONLY(c, j, d, "trainingInput.args");
    kiln_job_free(j);

    /* bare containerArgs need an image or a command */
    j = mkcustom("n1-standard-8", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 2);
    kiln_strv_push(&role_cfg(j, KILN_ROLE_WORKER)->container_args, "--lr=0.1");
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.containerArgs");
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "gcr.io/p/t:1"); /* inherited */
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
}

/* ---------- scheduling, jobDir, policies ---------- */

static void test_scheduling(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    kiln_scheduling *s = &j->training_input.scheduling;
    j->training_input.has_scheduling = true;
    s->has_max_wait_time = true;
    s->max_wait_time.seconds = 1800;
    s->priority = 1000;
    CHECK_VALID(c, j, d);
    s->max_wait_time.seconds = 1799;
    CHECK_ONLY(c, j, d, "trainingInput.scheduling.maxWaitTime");
    s->max_wait_time.seconds = 3600;
    s->priority = 1001;
    CHECK_ONLY(c, j, d, "trainingInput.scheduling.priority");
    s->priority = -1;
    CHECK_ONLY(c, j, d, "trainingInput.scheduling.priority");
    s->priority = 0;
    s->has_max_running_time = true;
    s->max_running_time.seconds = 0;
    CHECK_ONLY(c, j, d, "trainingInput.scheduling.maxRunningTime");
    s->max_running_time.seconds = -5;
    CHECK_ONLY(c, j, d, "trainingInput.scheduling.maxRunningTime");
    s->max_running_time.seconds = 7200;
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
}

static void test_job_dir(const kiln_catalog *c, kiln_diag *d)
{
    static const char *const good[] = {"gs://bucket/jobs/1", "/data/jobs/run1", "s3://b/x",
                                       "file:///tmp/x",      "/a/b..c/",        "hdfs://nn:8020/x"};
    static const char *const bad[] = {"jobs/1",   "./jobs",     "gs://bucket/../etc",
                                      "/data/..", "/data/../x", "gs:/bucket",
                                      "://x",     "gs://",      "../up",
                                      "/a/\n/b"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
        kiln_set_str(&j->training_input.job_dir, good[i]);
        CHECK_MSG(run_validate(c, j, d) == 0, "jobDir %s should be valid", good[i]);
        kiln_job_free(j);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
        kiln_set_str(&j->training_input.job_dir, bad[i]);
        CHECK_MSG(run_validate(c, j, d) == 1 && kiln_diag_has(d, "trainingInput.jobDir"),
                  "jobDir %s should be invalid", bad[i]);
        kiln_job_free(j);
    }
}

static void test_policies(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 1);
    static const char *const ok[] = {"Always", "OnFailure", "Never", "ExitCode"};
    for (size_t i = 0; i < 4; i++) {
        kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->restart_policy, ok[i]);
        CHECK_VALID(c, j, d);
    }
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->restart_policy, "always");
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.restartPolicy");
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->restart_policy, NULL);
    j->training_input.has_run_policy = true;
    j->training_input.run_policy.has_backoff_limit = true;
    j->training_input.run_policy.backoff_limit = -1;
    CHECK_ONLY(c, j, d, "trainingInput.runPolicy.backoffLimit");
    kiln_job_free(j);
}

/* ---------- all violations at once ---------- */

static void test_all_at_once(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-16", "NVIDIA_TESLA_K80", 3);
    set_role(j, KILN_ROLE_WORKER, "standard", 2);
    j->training_input.has_scheduling = true;
    j->training_input.scheduling.has_max_wait_time = true;
    j->training_input.scheduling.max_wait_time.seconds = 60;
    run_validate(c, j, d);
    CHECK(d->n == 3);
    CHECK(kiln_diag_has(d, "trainingInput.masterConfig.acceleratorConfig.count"));
    CHECK(kiln_diag_has(d, "trainingInput.workerType"));
    CHECK(kiln_diag_has(d, "trainingInput.scheduling.maxWaitTime"));
    kiln_diag_print(d, stdout); /* what a user sees */
    kiln_job_free(j);
}

/* ---------- site overlay ---------- */

static const char overlay[] =
    "machineTypes:\n"
    "  - {name: kiln-gpu-box, family: compute-engine, vcpus: 32, memoryGb: 256}\n"
    "  - {name: n1-standard-4, family: compute-engine, vcpus: 4, memoryGb: 16}\n"
    "accelerators:\n"
    "  - {name: NVIDIA_RTX_4090, maxVcpusPerAccelerator: 16, maxMemoryGbPerAccelerator: 128}\n"
    "acceleratorCounts:\n"
    "  - machineTypes: [kiln-gpu-box]\n"
    "    counts: {NVIDIA_RTX_4090: [2, 4], NVIDIA_TESLA_T4: [2]}\n"
    "  - machineTypes: [n1-standard-4]\n"
    "    counts: {NVIDIA_TESLA_K80: []}\n"
    "regions:\n"
    "  - name: onprem\n"
    "    zones: {onprem-rack1: [NVIDIA_RTX_4090, NVIDIA_TESLA_T4], onprem-rack2: []}\n"
    "runtimeVersions: [{version: \"2.12\", python: \"3.7\", image: localhost/tf:2.12}]\n"
    "defaults: {region: onprem}\n";

static void test_overlay(kiln_diag *d)
{
    kiln_catalog *c = load_default();
    size_t machines = kiln_catalog_machine_count(c);
    kiln_diag_clear(d);
    CHECK(kiln_catalog_merge_buf(c, overlay, sizeof overlay - 1, "site.yaml", d) == KILN_OK);
    kiln_diag_print(d, stderr);
    CHECK(kiln_catalog_machine_count(c) == machines + 1); /* one added, one replaced */
    const kiln_machine_type *m = kiln_catalog_machine(c, "n1-standard-4");
    CHECK(m && m->memory_gb == 16);
    CHECK(kiln_catalog_machine(c, "kiln-gpu-box") != NULL);
    CHECK_STR(kiln_catalog_default_region(c), "onprem");
    CHECK(kiln_catalog_valid_counts(c, "n1-standard-4", "NVIDIA_TESLA_K80", NULL, 0) == 0);
    CHECK(kiln_catalog_valid_counts(c, "n1-standard-4", "NVIDIA_TESLA_T4", NULL, 0) == 3);

    kiln_job *j = mkcustom("kiln-gpu-box", "NVIDIA_RTX_4090", 2);
    kiln_set_str(&j->training_input.region, "onprem");
    kiln_set_str(&j->training_input.runtime_version, "2.12");
    CHECK_VALID(c, j, d);
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_RTX_4090", 1);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.count");
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig.count", "needs at least 2");
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_TESLA_V100", 8);
    run_validate(c, j, d);
    CHECK(kiln_diag_has(d, "trainingInput.masterConfig.acceleratorConfig.type"));
    kiln_job_free(j);

    /* the blanked cell: K80 no longer fits an n1-standard-4 */
    j = mkcustom("n1-standard-4", "NVIDIA_TESLA_K80", 1);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.type");
    kiln_job_free(j);
    kiln_catalog_free(c);
}

static void test_overlay_errors(kiln_diag *d)
{
    static const struct {
        const char *yaml, *field;
    } bad[] = {
        {"machineTypes:\n  - {name: x, family: cloud, vcpus: 4, memoryGb: 1}\n",
         "bad.yaml:machineTypes[0].family"},
        {"machineTypes:\n  - {name: x, family: legacy, vcpu: 4, memoryGb: 1}\n",
         "bad.yaml:machineTypes[0].vcpu"},
        {"acceleratorCounts:\n  - {machineTypes: [nope], counts: {NVIDIA_TESLA_T4: [1]}}\n",
         "bad.yaml:acceleratorCounts.nope.NVIDIA_TESLA_T4"},
        {"acceleratorCounts:\n  - {machineTypes: [n1-standard-4], counts: {NVIDIA_TESLA_T4: "
         "[0]}}\n",
         "bad.yaml:acceleratorCounts[0].counts.NVIDIA_TESLA_T4[0]"},
        {"regions:\n  - {name: r, zones: {r-a: [TPU_V2]}}\n", "bad.yaml:regions.r.zones.r-a"},
        {"machinetypes: []\n", "bad.yaml:machinetypes"},
        {"defaults: {region: mars}\n", "bad.yaml:defaults.region"},
        {"- just\n- a list\n", "bad.yaml:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_catalog *c = load_default();
        kiln_diag_clear(d);
        kiln_err e = kiln_catalog_merge_buf(c, bad[i].yaml, strlen(bad[i].yaml), "bad.yaml", d);
        CHECK_MSG(e == KILN_EINVAL && kiln_diag_has(d, bad[i].field), "overlay %zu: want %s", i,
                  bad[i].field);
        if (e != KILN_EINVAL || !kiln_diag_has(d, bad[i].field)) kiln_diag_print(d, stderr);
        kiln_catalog_free(c);
    }
    kiln_catalog *c = load_default();
    kiln_diag_clear(d);
    CHECK(kiln_catalog_merge_buf(c, "key: [unclosed\n", 15, "broken.yaml", d) != KILN_OK);
    CHECK(d->n >= 1);
    kiln_diag_clear(d);
    CHECK(kiln_catalog_merge_file(c, "/nonexistent/site.yaml", d) == KILN_EIO);
    CHECK(kiln_diag_has(d, "/nonexistent/site.yaml"));
    kiln_catalog_free(c);
}

/* ---------- normalise and plan ---------- */

static void test_normalise(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", "NVIDIA_TESLA_T4", 1);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 2);
    set_role(j, KILN_ROLE_EVALUATOR, "n1-standard-4", 1);
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "gcr.io/p/t:1");
    kiln_set_str(&role_cfg(j, KILN_ROLE_EVALUATOR)->image_uri, "gcr.io/p/eval:1");
    CHECK_VALID(c, j, d);
    CHECK(kiln_catalog_normalise(c, j) == KILN_OK);
    CHECK(j->training_input.has_scheduling && j->training_input.scheduling.has_max_running_time);
    CHECK(j->training_input.scheduling.max_running_time.seconds == 604800);
    CHECK_STR(j->training_input.worker_config.image_uri, "gcr.io/p/t:1");
    CHECK_STR(j->training_input.evaluator_config.image_uri, "gcr.io/p/eval:1");
    CHECK(!j->training_input.has_parameter_server_config); /* no ps: nothing to fill */
    CHECK_VALID(c, j, d);
    kiln_job_free(j);

    j = mkjob("BASIC", NULL); /* a TFJob has no region */
    CHECK(kiln_catalog_normalise(c, j) == KILN_OK);
    CHECK_STR(j->training_input.region, "us-central1");
    kiln_job_free(j);
}

static void test_plan(const kiln_catalog *c, kiln_diag *d)
{
    kiln_replica_plan p[KILN_ROLE_COUNT];
    kiln_job *j = mkjob("BASIC_GPU", "us-central1");
    CHECK(kiln_catalog_plan(c, j, p) == 1);
    CHECK_STR(p[0].machine_type, "standard_gpu");
    CHECK_STR(p[0].accelerator_type, "NVIDIA_TESLA_K80");
    CHECK(p[0].accelerators_per_replica == 1 && p[0].count == 1);
    kiln_job_free(j);

    j = mkjob("BASIC_TPU", "us-central1");
    CHECK(kiln_catalog_plan(c, j, p) == 2);
    CHECK(p[1].role == KILN_ROLE_WORKER && p[1].count == 1);
    CHECK_STR(p[1].accelerator_type, "TPU_V2");
    CHECK(p[1].accelerators_per_replica == 8);
    kiln_job_free(j);

    j = mkjob("STANDARD_1", "us-central1");
    CHECK(kiln_catalog_plan(c, j, p) == 3);
    CHECK(p[1].role == KILN_ROLE_WORKER && p[1].count > 1);
    CHECK(p[2].role == KILN_ROLE_PARAMETER_SERVER && p[2].count > 0);
    kiln_job_free(j);

    j = mkcustom("n1-standard-16", "NVIDIA_TESLA_V100", 2);
    set_role(j, KILN_ROLE_WORKER, "complex_model_m_v100", 0);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 3);
    set_accel(j, KILN_ROLE_WORKER, "NVIDIA_TESLA_V100", 1);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "n1-highmem-8", 2);
    CHECK_VALID(c, j, d);
    CHECK(kiln_catalog_plan(c, j, p) == 3);
    CHECK(p[0].role == KILN_ROLE_MASTER && p[0].vcpus == 16 && p[0].memory_gb == 60);
    CHECK(p[0].accelerators_per_replica == 2);
    CHECK(p[1].count == 3 && p[1].accelerators_per_replica == 1);
    CHECK(p[2].accelerator_type == NULL && p[2].memory_gb == 52);
    kiln_job_free(j);

    j = mktpu("n1-standard-8", "TPU_V3_POD", 128);
    CHECK(kiln_catalog_plan(c, j, p) == 2);
    CHECK_STR(p[1].accelerator_type, "TPU_V3_POD");
    CHECK(p[1].accelerators_per_replica == 128);
    kiln_job_free(j);
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_job_id(c, &d);
    test_labels(c, &d);
    test_required(c, &d);
    test_preset_tiers(c, &d);
    test_custom(c, &d);
    test_family(c, &d);
    test_zones(c, &d);
    test_tpu(c, &d);
    test_images(c, &d);
    test_scheduling(c, &d);
    test_job_dir(c, &d);
    test_policies(c, &d);
    test_all_at_once(c, &d);
    test_overlay(&d);
    test_overlay_errors(&d);
    test_normalise(c, &d);
    test_plan(c, &d);
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
