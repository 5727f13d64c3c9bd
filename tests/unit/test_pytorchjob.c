/* test_pytorchjob.c - Kubeflow PyTorchJob -> kiln_job (kiln_job_from_kubeflow):
 * kiln's own test files in the shape of the training operator's examples, the
 * operator's validation rules with
 * their field paths, elasticPolicy, runPolicy.suspend under a queue, and the
 * refusals (other kinds, several YAML documents, metrics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "spec/tree.h"
#include "kubeflow_test.h"
#include "test.h"

static char *example(const char *name)
{
    char path[512], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tests/data/pytorchjob/%s", KILN_SOURCE_DIR, name);
    CHECK_MSG(kiln__read_file(path, KILN_SPEC_MAX_BYTES, &buf, &len) == KILN_OK, "read %s", path);
    return buf;
}

/* kiln's files in the shape of the operator's examples all decode. */
static void test_examples(void)
{
    static const char *const ok[] = {
        "simple.yaml",         "cpu-demo.yaml",      "elastic-echo.yaml",
        "mnist-gloo.yaml",     "mnist-nccl.yaml",    "mnist-mpi.yaml",
        "smoke-sendrecv.yaml", "mnist2-sample.yaml", "deepspeed-demo.yaml"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char *buf = example(ok[i]);
        kiln_diag d = KILN_DIAG_INIT;
        kiln_job *job = buf ? decode(buf, &d, NULL) : NULL;
        CHECK_MSG(job != NULL, "%s does not decode", ok[i]);
        if (!job) kiln_diag_print(&d, stderr);
        CHECK(job == NULL || job->training_input.has_pytorch_job);
        kiln_job_free(job);
        kiln_diag_free(&d);
        free(buf);
    }
}

static void test_simple(void)
{
    char *buf = example("smoke-sendrecv.yaml");
    kiln_job *job = decode(buf, &(kiln_diag)KILN_DIAG_INIT, NULL);
    CHECK(job != NULL);
    if (job) {
        const kiln_training_input *ti = &job->training_input;
        CHECK_STR(job->job_id, "kiln_ring_token");
        CHECK_STR(ti->scale_tier, "CUSTOM");
        CHECK(ti->worker_count == 3);
        CHECK(!ti->pytorch_job.workers_only && !ti->pytorch_job.has_elastic_policy);
        CHECK_STR(ti->master_config.image_uri, "localhost/kiln-examples/ring-token:1.1");
        CHECK_STR(ti->worker_config.restart_policy, "OnFailure");
        CHECK(!ti->use_chief_in_tf_config);
    }
    kiln_job_free(job);
    free(buf);

    buf = example("cpu-demo.yaml");
    job = decode(buf, &(kiln_diag)KILN_DIAG_INIT, NULL);
    CHECK(job && job->training_input.pytorch_job.nproc_per_node &&
          strcmp(job->training_input.pytorch_job.nproc_per_node, "2") == 0);
    kiln_job_free(job);
    free(buf);

    buf = example("mnist2-sample.yaml"); /* a Kubernetes label key with a DNS prefix */
    job = decode(buf, &(kiln_diag)KILN_DIAG_INIT, NULL);
    CHECK(job && kiln_map_get(&job->labels, "kueue.x-k8s.io/queue-name") &&
          strcmp(kiln_map_get(&job->labels, "kueue.x-k8s.io/queue-name"), "kiln-queue") == 0);
    CHECK(job && job->training_input.master_config.cpu_limit &&
          strcmp(job->training_input.master_config.cpu_limit, "1") == 0);
    kiln_job_free(job);
    free(buf);
}

/* elastic: Workers only, worker 0 plays kiln's master; the policy survives a
 * round trip through the Job JSON the store keeps. */
static void test_elastic(void)
{
    char *buf = example("elastic-echo.yaml");
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(buf, &d, NULL);
    CHECK(job != NULL);
    if (job) {
        const kiln_training_input *ti = &job->training_input;
        const kiln_elastic_policy *ep = &ti->pytorch_job.elastic_policy;
        CHECK(ti->pytorch_job.workers_only && ti->pytorch_job.has_elastic_policy);
        CHECK(ti->has_master_config && ti->worker_count == 1);
        CHECK(ep->min_replicas == 1 && ep->max_replicas == 2);
        CHECK(ep->has_max_restarts && ep->max_restarts == 100);
        CHECK_STR(ep->rdzv_backend, "c10d");
        char *json = kiln_job_to_json(job, 0);
        kiln_job *back = NULL;
        CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d) == KILN_OK);
        CHECK(back && kiln_job_equal(job, back));
        kiln_job_free(back);
        free(json);
    }
    kiln_job_free(job);
    free(buf);
    kiln_diag_free(&d);

    job = decode("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: e}\nspec:\n"
                 "  elasticPolicy: {rdzvHost: h1, rdzvPort: 29400, rdzvId: run1, standalone: "
                 "true,\n    rdzvConf: [{key: timeout, value: '900'}], nProcPerNode: 2}\n"
                 "  pytorchReplicaSpecs:\n    Worker:\n      replicas: 3\n      template: {spec: "
                 "{containers: [{name: pytorch, image: i, command: [x]}]}}\n",
                 &(kiln_diag)KILN_DIAG_INIT, NULL);
    CHECK(job != NULL);
    if (job) {
        const kiln_elastic_policy *ep = &job->training_input.pytorch_job.elastic_policy;
        CHECK(ep->min_replicas == 3 && ep->max_replicas == 3); /* the operator's defaults */
        CHECK_STR(ep->rdzv_host, "h1");
        CHECK(ep->rdzv_port == 29400 && ep->standalone);
        CHECK_STR(kiln_map_get(&ep->rdzv_conf, "timeout"), "900");
        CHECK_STR(ep->n_proc_per_node, "2");
    }
    kiln_job_free(job);
}

#define HEAD      "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pt\n"
#define CTR(name) "      template: {spec: {containers: [{name: " name ", image: img}]}}\n"
#define MASTER(n) "    Master:\n      replicas: " n "\n" CTR("pytorch")
#define WORKER(n) "    Worker:\n      replicas: " n "\n" CTR("pytorch")
#define SPECS     "spec:\n  pytorchReplicaSpecs:\n"

/* The operator's validation rules, each at its field path. */
static void test_rules(void)
{
    expect_bad(HEAD SPECS MASTER("2"), "spec.pytorchReplicaSpecs.Master.replicas", "exactly one");
    expect_bad(HEAD SPECS MASTER("1") "    Boss:\n      replicas: 1\n" CTR("pytorch"),
               "spec.pytorchReplicaSpecs",
               "'Boss' is not a PyTorchJob replica type; use Master or Worker");
    expect_bad(HEAD SPECS MASTER("1") "    worker: []\n", "spec.pytorchReplicaSpecs.Worker",
               "must be a replica spec");
    expect_bad(HEAD SPECS MASTER("0"), "spec.pytorchReplicaSpecs.Master.replicas", "exactly one");
    expect_bad(HEAD SPECS MASTER("1") "    Worker:\n      replicas: 1\n" CTR("main"),
               "spec.pytorchReplicaSpecs.Worker.template.spec.containers", "'pytorch'");
    expect_bad(HEAD
               "spec:\n  elasticPolicy: {minReplicas: 1}\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.pytorchReplicaSpecs.Worker", "elasticPolicy");
    expect_bad(HEAD "spec:\n  nprocPerNode: '2'\n  elasticPolicy: {nProcPerNode: 2}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.nProcPerNode", "spec.nprocPerNode");
    expect_bad(HEAD "spec:\n  nprocPerNode: lots\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.nprocPerNode", "auto, cpu, gpu");
    expect_bad(HEAD "spec:\n  nprocPerNode: '0'\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.nprocPerNode", "auto, cpu, gpu");
    expect_bad(HEAD "spec:\n  elasticPolicy: {minReplicas: 3, maxReplicas: 2}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.minReplicas", "more than maxReplicas");
    expect_bad(HEAD
               "spec:\n  elasticPolicy: {rdzvBackend: zk}\n  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.rdzvBackend", "c10d");
    expect_bad(HEAD
               "spec:\n  elasticPolicy: {rdzvPort: 70000}\n  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.rdzvPort", "TCP port");
    expect_bad(HEAD
               "spec:\n  elasticPolicy: {minRepliacs: 1}\n  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.minRepliacs", "not an elasticPolicy field");
    expect_bad(HEAD "spec:\n  elasticPolicy: {rdzvConf: [{key: a=b, value: c}]}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.rdzvConf[0]", "key");
    expect_bad(HEAD "spec:\n  successPolicy: AllWorkers\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.successPolicy", "not a PyTorchJob field");
    expect_bad(HEAD "spec:\n  pytorchReplicaSpecs:\n    Launcher:\n      replicas: 1\n",
               "spec.pytorchReplicaSpecs", "Master or Worker");
    expect_bad(HEAD "spec:\n  pytorchReplicaSpecs: {}\n", "spec.pytorchReplicaSpecs", "required");
    expect_bad(HEAD "spec:\n  runPolicy: {suspend: true}\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.runPolicy.suspend", "PyTorchJob");
    expect_bad(HEAD "spec:\n  runPolicy: {suspend: true}\n  pytorchReplicaSpecs:\n" MASTER("1"),
               "spec.runPolicy.suspend",
               "without a queue: kiln has no resume, so nothing would ever unsuspend it; leave "
               "suspend out to run it when submitted, or give it the label "
               "kueue.x-k8s.io/queue-name");
    expect_bad(HEAD
               "spec:\n  elasticPolicy: {standalone: yes}\n  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.standalone", "true or false");
    expect_bad(HEAD SPECS WORKER("0"), "spec.pytorchReplicaSpecs.Worker.replicas", "at least 1");
}

/* runPolicy.suspend under Kueue: the job names its LocalQueue and is
 * created suspended; kiln's queue admission is its unsuspend (a note). */
static void test_suspend_queued(void)
{
    const char *yaml = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pt\n"
                       "  labels: {kueue.x-k8s.io/queue-name: user-queue}\n"
                       "spec:\n  runPolicy: {suspend: true}\n  pytorchReplicaSpecs:\n" MASTER("1");
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    CHECK(kiln_job_from_kubeflow_notes(yaml, strlen(yaml), &job, &d, &notes) == KILN_OK);
    CHECK(job != NULL &&
          strcmp(kiln_map_get(&job->labels, "kueue.x-k8s.io/queue-name"), "user-queue") == 0);
    bool said = false;
    for (size_t i = 0; i < notes.n; i++)
        said = said ||
               (strcmp(notes.v[i].field, "spec.runPolicy.suspend") == 0 &&
                strstr(notes.v[i].description, "the PyTorchJob waits for its queue 'user-queue'") &&
                strstr(notes.v[i].description, "is its unsuspend"));
    CHECK(said);
    if (!job) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
}

/* What kiln does not read, refused with a reason. */
static void test_refusals(void)
{
    /* elasticPolicy.metrics: Resource metrics become kiln's autoscaler's */
    char *buf = example("elastic-imagenet.yaml");
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(buf, &d, NULL);
    const kiln_elastic_policy *ep = job ? &job->training_input.pytorch_job.elastic_policy : NULL;
    CHECK(job && d.n == 0 && ep->n_metrics == 1 && strcmp(ep->metrics[0].resource, "cpu") == 0 &&
          strcmp(ep->metrics[0].target_type, "Utilization") == 0 &&
          ep->metrics[0].average_utilization == 75 && ep->metrics[0].average_value == NULL);
    kiln_job_free(job);
    kiln_diag_free(&d);
    free(buf);
    expect_bad(HEAD "spec:\n  elasticPolicy:\n    metrics:\n      - type: Pods\n        pods: {}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.metrics[0].type", "Resource metrics only");
    expect_bad(HEAD "spec:\n  elasticPolicy:\n    metrics:\n      - type: Resource\n"
                    "        resource: {name: cpu, target: {type: Value, value: 2}}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.metrics[0].resource.target.value", "not read");
    expect_bad(HEAD "spec:\n  elasticPolicy:\n    metrics:\n      - type: Resource\n"
                    "        resource: {name: ephemeral-storage, target: {type: Utilization}}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.metrics[0].resource.name", "cpu, memory or nvidia.com/gpu");
    /* nvidia.com/gpu: utilisation only (percent busy), never a quantity */
    expect_bad(HEAD "spec:\n  elasticPolicy:\n    metrics:\n      - type: Resource\n"
                    "        resource: {name: nvidia.com/gpu, target: {type: AverageValue, "
                    "averageValue: \"1\"}}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.metrics[0].resource.target.type", "use Utilization");
    expect_bad(HEAD "spec:\n  elasticPolicy:\n    metrics:\n      - type: Resource\n"
                    "        resource: {name: nvidia.com/gpu, target: {type: Utilization}}\n"
                    "  pytorchReplicaSpecs:\n" WORKER("2"),
               "spec.elasticPolicy.metrics[0].resource.target.averageUtilization",
               "a whole percent");
    buf = example("elastic-imagenet.yaml");
    char *gpu = strstr(buf, "name: cpu");
    CHECK(gpu != NULL);
    if (gpu) {
        /* the imagenet example with a GPU metric: read the same way */
        char *b2 = NULL;
        CHECK(asprintf(&b2, "%.*sname: nvidia.com/gpu%s", (int)(gpu - buf), buf, gpu + 9) > 0);
        job = decode(b2, &d, NULL);
        ep = job ? &job->training_input.pytorch_job.elastic_policy : NULL;
        CHECK(job && d.n == 0 && ep->n_metrics == 1 &&
              strcmp(ep->metrics[0].resource, "nvidia.com/gpu") == 0 &&
              strcmp(ep->metrics[0].target_type, "Utilization") == 0 &&
              ep->metrics[0].average_utilization == 75);
        kiln_job_free(job);
        kiln_diag_free(&d);
        free(b2);
    }
    free(buf);

    buf = example("elastic-etcd.yaml");
    job = decode(buf, &d, NULL);
    CHECK(job == NULL && d.n == 1 && strstr(d.v[0].description, "3 YAML documents") &&
          strstr(d.v[0].description, "2: Pod 'rdzv-store'") &&
          strstr(d.v[0].description, "none is a job"));
    kiln_job_free(job);
    kiln_diag_free(&d);
    free(buf);

    /* a Service, a PVC and the job: kiln names the one it would read */
    job = decode(
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\n---\n"
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\n---\n" HEAD SPECS
            MASTER("1"),
        &d, NULL);
    CHECK(job == NULL && d.n == 1 && strstr(d.v[0].description, "3 YAML documents") &&
          strstr(d.v[0].description, "3: PyTorchJob 'pt'") &&
          strstr(d.v[0].description, "would read document 3"));
    kiln_job_free(job);
    kiln_diag_free(&d);

    static const char *const others[] = {"MXJob", "PaddlePaddleJob"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char y[256];
        snprintf(y, sizeof y, "apiVersion: kubeflow.org/v1\nkind: %s\nmetadata: {name: x}\n",
                 others[i]);
        expect_bad(y, "kind", "kiln reads TFJob, PyTorchJob, JAXJob, PaddleJob and XGBoostJob");
    }
    expect_bad("apiVersion: kubeflow.org/v2beta1\nkind: PyTorchJob\n", "apiVersion", "v2beta1");
    /* a TrainJob is Trainer's kind: the training operator's apiVersion is not its */
    expect_bad("apiVersion: kubeflow.org/v1\nkind: TrainJob\n", "apiVersion",
               "trainer.kubeflow.org/v1alpha1");
    expect_bad("apiVersion: v1\nkind: Service\n", "kind", "not a training job");
    /* a trailing "---" is one document, not two */
    job = decode("---\n" HEAD SPECS MASTER("1") "---\n", &d, NULL);
    CHECK(job != NULL);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

int main(void)
{
    test_examples();
    test_simple();
    test_elastic();
    test_rules();
    test_refusals();
    test_suspend_queued();
    TEST_DONE();
}
