/* test_trainjob.c - Kubeflow Trainer v2's TrainJob -> kiln_job
 * (src/spec/trainjob.c), against the stock runtimes in data/runtimes and
 * runtimes of the test's own: the merge of the trainer over the runtime's
 * node container, numNodes, PET_NPROC_PER_NODE as Trainer works it out,
 * and each refusal at its path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "kiln/job.h"
#include "kiln/queues.h"
#include "kubeflow_test.h"
#include "spec/kubeflow.h"
#include "test.h"

#define HEAD "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\n"

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_stock_torch(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/kubeflow/trainjob-torch.yaml", KILN_SOURCE_DIR);
    const char *yaml = read_all(path);
    CHECK(yaml != NULL);
    if (!yaml) return;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(yaml, &d, NULL);
    kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK_STR(job->job_id, "tj_torch");
    CHECK_STR(kiln_map_get(&job->labels, "team"), "vision");
    CHECK_STR(ti->kubeflow_job.kind, "TrainJob");
    CHECK_STR(ti->kubeflow_job.runtime, "ClusterTrainingRuntime/torch-distributed");
    CHECK(ti->kubeflow_job.workers_only);
    /* numNodes 3: node 0 is kiln's master, 2 workers */
    CHECK(ti->has_master_config && ti->has_worker_config);
    CHECK(ti->worker_count == 2);
    /* the trainer's image, command, args and resources replace the runtime's */
    CHECK_STR(ti->master_config.image_uri, "localhost/kiln-examples/allreduce:0.1");
    CHECK_STR(ti->worker_config.image_uri, "localhost/kiln-examples/allreduce:0.1");
    CHECK(ti->master_config.container_command.n == 2);
    if (ti->master_config.container_command.n == 2)
        CHECK_STR(ti->master_config.container_command.v[0], "torchrun");
    CHECK_STR(kiln_map_get(&ti->master_config.env, "LR"), "0.1");
    CHECK_STR(ti->master_config.cpu_limit, "2");
    CHECK_STR(ti->master_config.cpu_request, "1500m");
    /* no numProcPerNode, no GPUs: the CPU request rounded up */
    CHECK_STR(ti->kubeflow_job.nproc_per_node, "2");
    kiln_job_free(job);
}

/* a runtime directory of the test's own */
static char dir[64];

static void put_runtime(const char *name, const char *body)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(body, f);
    fclose(f);
}

#define RT(name, policy, extra)                                                                    \
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"                    \
    "metadata: {name: " name "}\nspec:\n  mlPolicy:\n" policy "  template:\n    spec:\n"           \
    "      replicatedJobs:\n" extra                                                                \
    "        - name: node\n          template:\n            spec:\n              template:\n"      \
    "                spec:\n                  containers:\n"                                       \
    "                    - name: node\n                      image: rt-image\n"                    \
    "                      command: [python3, rt.py]\n"                                            \
    "                      env: [{name: KEEP, value: rt}, {name: LR, value: rt}]\n"                \
    "                      resources: {limits: {nvidia.com/gpu: 2}}\n"

static void test_own_runtime(void)
{
    put_runtime("four", RT("four", "    numNodes: 4\n    torch: {}\n", ""));
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n  runtimeRef: {name: four}\n"
                                "  trainer: {env: [{name: LR, value: job}]}\n",
                           &d, NULL);
    kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    /* the runtime's numNodes, image and command where the trainer gives none */
    CHECK(ti->worker_count == 3);
    CHECK_STR(ti->master_config.image_uri, "rt-image");
    /* env upserted by name: the trainer's LR wins, the runtime's KEEP stays */
    CHECK_STR(kiln_map_get(&ti->master_config.env, "LR"), "job");
    CHECK_STR(kiln_map_get(&ti->master_config.env, "KEEP"), "rt");
    /* GPUs on the node and no numProcPerNode: auto */
    CHECK_STR(ti->kubeflow_job.nproc_per_node, "auto");
    kiln_job_free(job);
    /* numProcPerNode given wins */
    job = decode(HEAD "spec:\n  runtimeRef: {name: four}\n  trainer: {numProcPerNode: 3}\n", &d,
                 NULL);
    kiln_diag_free(&d);
    CHECK(job && strcmp(job->training_input.kubeflow_job.nproc_per_node, "3") == 0);
    kiln_job_free(job);
}

static void test_refusals(void)
{
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n  suspend: true\n",
               "spec.suspend", "no resume");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n"
                    "  initializer: {dataset: {storageUri: 'hf://x'}}\n",
               "spec.initializer", "initializer step");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n"
                    "  podTemplateOverrides: []\n",
               "spec.podTemplateOverrides", "pod overrides");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n"
                    "  managedBy: kueue.x-k8s.io/multikueue\n",
               "spec.managedBy", "kiln manages");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: no-such-runtime}\n", "spec.runtimeRef.name",
               "no ClusterTrainingRuntime 'no-such-runtime'");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: ../etc}\n", "spec.runtimeRef.name",
               "not a valid name");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed, kind: Runtime}\n",
               "spec.runtimeRef.kind", "not a runtime kind");
    /* a TrainingRuntime ref does not read a ClusterTrainingRuntime's file */
    expect_bad(HEAD "spec:\n  runtimeRef: {name: four, kind: TrainingRuntime}\n", "spec.runtimeRef",
               "not the TrainingRuntime 'four'");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n"
                    "  trainer: {env: [{name: PET_NNODES, value: '9'}]}\n",
               "spec.trainer.env[0]", "torch policy");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 0}\n",
               "spec.trainer.numNodes", "at least 1");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {gpus: 1}\n",
               "spec.trainer.gpus", "");
    /* the stock MPI runtimes: read, and refused at their policy */
    expect_bad(HEAD "spec:\n  runtimeRef: {name: deepspeed-distributed}\n",
               "ClusterTrainingRuntime/deepspeed-distributed: spec.mlPolicy.mpi",
               "not supported yet");
    expect_bad(HEAD "spec:\n  runtimeRef: {name: mpi-distributed}\n",
               "ClusterTrainingRuntime/mpi-distributed: spec.mlPolicy.mpi", "not supported yet");
    /* a runtime's initializer job */
    put_runtime("init", RT("init", "    torch: {}\n",
                           "        - name: dataset-initializer\n          template:\n"
                           "            metadata:\n              labels:\n"
                           "                trainer.kubeflow.org/trainjob-ancestor-step: "
                           "dataset-initializer\n"));
    expect_bad(HEAD "spec:\n  runtimeRef: {name: init}\n",
               "ClusterTrainingRuntime/init: spec.template.spec.replicatedJobs[0]",
               "dataset-initializer");
    /* torchrun's variables in the runtime's node container */
    put_runtime("pet", RT("pet", "    torch: {}\n", ""));
    {
        char path[256], body[4096];
        snprintf(path, sizeof path, "%s/pet.yaml", dir);
        const char *b = read_all(path);
        snprintf(body, sizeof body, "%s", b ? b : "");
        char *at = strstr(body, "{name: KEEP, value: rt}");
        if (at) { /* the runtime's first variable becomes PET_NNODES */
            char tail[4096];
            snprintf(tail, sizeof tail, "%s", at + strlen("{name: KEEP, value: rt}"));
            snprintf(at, sizeof body - (size_t)(at - body), "{name: PET_NNODES, value: '7'}%s",
                     tail);
        }
        put_runtime("pet", body);
    }
    expect_bad(HEAD "spec:\n  runtimeRef: {name: pet}\n",
               "ClusterTrainingRuntime/pet: the trainer job's containers[0].env[0]",
               "PET_NNODES is set by the torch policy");
    /* a TrainingRuntime of another namespace */
    put_runtime("ns-rt", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\n"
                         "metadata: {name: ns-rt, namespace: team-b}\nspec: {}\n");
    expect_bad("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"
               "metadata: {name: tj, namespace: team-a}\n"
               "spec:\n  runtimeRef: {name: ns-rt, kind: TrainingRuntime}\n",
               "spec.runtimeRef", "a TrainJob uses a TrainingRuntime of its own namespace");
    /* the v1alpha1 apiVersion only */
    expect_bad("apiVersion: trainer.kubeflow.org/v1\nkind: TrainJob\nmetadata: {name: tj}\n"
               "spec:\n  runtimeRef: {name: torch-distributed}\n",
               "apiVersion", "not supported");
}

/* decodes with the notes kept in *notes (the caller frees both diags) */
static kiln_job *decode_notes(const char *yaml, kiln_diag *d, kiln_diag *notes)
{
    kiln_job *job = NULL;
    kiln_err err = kiln_job_from_kubeflow_notes(yaml, strlen(yaml), &job, d, notes);
    CHECK((err == KILN_OK) == (job != NULL));
    if (!job) kiln_diag_print(d, stderr);
    return job;
}

/* a note on `field` containing `needle` */
static bool has_note(const kiln_diag *notes, const char *field, const char *needle)
{
    for (size_t i = 0; i < notes->n; i++)
        if (strcmp(notes->v[i].field, field) == 0 && strstr(notes->v[i].description, needle))
            return true;
    return false;
}

static char *read_data(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/kubeflow/%s", KILN_SOURCE_DIR, name);
    return read_all(path);
}

#define TJ_OF(ref) HEAD "spec:\n  runtimeRef: {" ref "}\n"
#define NS_RT                                                                                      \
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\n"                           \
    "metadata: {name: ns-one}\nspec:\n  mlPolicy: {torch: {}}\n  template:\n    spec:\n"           \
    "      replicatedJobs:\n        - name: node\n          template:\n            spec:\n"        \
    "              template:\n                spec:\n"                                             \
    "                  containers: [{name: node, image: ns-img}]\n"

/* A TrainJob shipped with its runtimes (Trainer's examples do so): the
 * file's runtime is used before the runtimes directory's, and said. */
static void test_file_runtime(void)
{
    /* the directory has a gang-torch too, of another image: the file's wins */
    put_runtime("gang-torch", RT("gang-torch", "    torch: {}\n", ""));
    const char *yaml = read_data("trainjob-with-runtime.yaml");
    CHECK(yaml != NULL);
    if (!yaml) return;
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
    kiln_job *job = decode_notes(yaml, &d, &notes);
    CHECK(job != NULL);
    if (job) {
        const kiln_training_input *ti = &job->training_input;
        CHECK_STR(job->job_id, "tj_gang");
        CHECK_STR(ti->kubeflow_job.runtime, "ClusterTrainingRuntime/gang-torch");
        CHECK_STR(ti->master_config.image_uri, "localhost/kiln-examples/gang:0.1");
        CHECK(ti->worker_count == 2); /* the trainer's numNodes 3 over the runtime's 2 */
        CHECK(has_note(&notes, "spec.runtimeRef",
                       "the ClusterTrainingRuntime 'gang-torch' is the file's document 1"));
        CHECK(has_note(&notes, "ClusterTrainingRuntime/gang-torch: spec.podGroupPolicy.volcano",
                       "all its nodes start together or none does"));
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);

    /* a runtime of the file that the TrainJob does not name: noted as not
     * used, and runtimeRef read from the directory (and said) */
    job = decode_notes(RT("other", "    torch: {}\n", "") "---\n" TJ_OF("name: four"), &d, &notes);
    CHECK(job != NULL);
    if (job) {
        CHECK_STR(job->training_input.kubeflow_job.runtime, "ClusterTrainingRuntime/four");
        CHECK(job->training_input.worker_count == 3);
        CHECK(has_note(&notes, "spec.runtimeRef",
                       "document 1 (ClusterTrainingRuntime 'other') is not used"));
        CHECK(has_note(&notes, "spec.runtimeRef", "is read from the runtimes directory"));
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);

    /* the TrainJob first and a TrainingRuntime after it, comments-only
     * documents between and at the end: they count as no document */
    job = decode_notes(
        TJ_OF("name: ns-one, kind: TrainingRuntime") "---\n# only a comment\n---\n" NS_RT
                                                     "---\n# the end\n",
        &d, &notes);
    CHECK(job != NULL);
    if (job) {
        CHECK_STR(job->training_input.kubeflow_job.runtime, "TrainingRuntime/ns-one");
        CHECK_STR(job->training_input.master_config.image_uri, "ns-img");
        CHECK(has_note(&notes, "spec.runtimeRef", "is the file's document 2"));
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);

    /* one TrainJob and a comments-only document is one document */
    job = decode_notes(TJ_OF("name: four") "---\n# nothing here\n", &d, &notes);
    CHECK(job != NULL && !has_note(&notes, "spec.runtimeRef", ""));
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);

    /* any other mix keeps the several-documents error */
    static const char *const mixes[] = {
        TJ_OF("name: four") "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc}\n",
        TJ_OF("name: four") "---\n" TJ_OF("name: four"),
        RT("four", "    torch: {}\n", "") "---\n" RT("five", "    torch: {}\n", ""),
    };
    for (size_t i = 0; i < sizeof mixes / sizeof *mixes; i++) {
        kiln_err err;
        job = decode(mixes[i], &d, &err);
        CHECK_MSG(job == NULL && err == KILN_EINVAL && d.n == 1 &&
                      strstr(d.v[0].description, "the file holds 2 YAML documents"),
                  "mix %zu", i);
        if (i == 0)
            CHECK(d.n == 1 && strstr(d.v[0].description, "a TrainJob's file may also hold "
                                                         "ClusterTrainingRuntime and "
                                                         "TrainingRuntime documents"));
        kiln_job_free(job);
        kiln_diag_free(&d);
    }
    /* the runtime given twice; one of another apiVersion */
    expect_bad(RT("dup", "    torch: {}\n", "") "---\n" RT("dup", "    torch: {}\n",
                                                           "") "---\n" TJ_OF("name: dup"),
               "spec.runtimeRef", "holds the ClusterTrainingRuntime 'dup' twice");
    expect_bad("apiVersion: trainer.kubeflow.org/v1\nkind: ClusterTrainingRuntime\n"
               "metadata: {name: old}\nspec: {}\n---\n" TJ_OF("name: old"),
               "spec.runtimeRef", "document 1 of the file holds trainer.kubeflow.org/v1");
    /* a runtime neither in the file nor in the directory: both said */
    expect_bad(RT("other", "    torch: {}\n", "") "---\n" TJ_OF("name: nowhere"),
               "spec.runtimeRef.name", "nor among the file's runtime documents");
}

/* spec.suspend: under Kueue a TrainJob is created suspended and admitted;
 * with the queue label kiln's admission is that, without it refused. */
static void test_suspend(void)
{
    CHECK_STR(KILN__KF_QUEUE_LABEL, KILN_QUEUE_LABEL); /* the label the queues route by */
    const char *yaml = read_data("trainjob-kueue.yaml");
    CHECK(yaml != NULL);
    if (!yaml) return;
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
    kiln_job *job = decode_notes(yaml, &d, &notes);
    CHECK(job != NULL);
    if (job) {
        CHECK_STR(job->job_id, "tj_queued");
        CHECK_STR(kiln_map_get(&job->labels, KILN_QUEUE_LABEL), "team-queue");
        CHECK(job->training_input.worker_count == 1);
        CHECK(has_note(&notes, "spec.suspend", "waits for its queue 'team-queue'"));
        CHECK(has_note(&notes, "spec.suspend", "is its unsuspend"));
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
    /* suspend: false needs no queue and says nothing */
    job = decode_notes(TJ_OF("name: four") "  suspend: false\n", &d, &notes);
    CHECK(job != NULL && !has_note(&notes, "spec.suspend", ""));
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
    /* without the label (or with an empty one): refused, saying what to do */
    expect_bad(TJ_OF("name: four") "  suspend: true\n", "spec.suspend",
               "leave suspend out to run it when submitted, or give it the label "
               "kueue.x-k8s.io/queue-name");
    expect_bad("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"
               "metadata: {name: tj, labels: {kueue.x-k8s.io/queue-name: ''}}\n"
               "spec:\n  runtimeRef: {name: four}\n  suspend: true\n",
               "spec.suspend", "no resume");
    expect_bad(TJ_OF("name: four") "  suspend: later\n", "spec.suspend", "true or false");
}

/* a runtime's podGroupPolicy: the gang kiln always makes; the plugins'
 * own settings refused */
static void test_pod_group(void)
{
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
    put_runtime("cos", RT("cos", "    torch: {}\n  podGroupPolicy: {coscheduling: {}}\n", ""));
    kiln_job *job = decode_notes(TJ_OF("name: cos"), &d, &notes);
    CHECK(job != NULL &&
          has_note(&notes, "ClusterTrainingRuntime/cos: spec.podGroupPolicy.coscheduling",
                   "kiln's own scheduler gang-places the TrainJob"));
    kiln_job_free(job);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
    put_runtime(
        "cos-t",
        RT("cos-t",
           "    torch: {}\n  podGroupPolicy: {coscheduling: {scheduleTimeoutSeconds: 100}}\n", ""));
    expect_bad(TJ_OF("name: cos-t"),
               "ClusterTrainingRuntime/cos-t: spec.podGroupPolicy.coscheduling."
               "scheduleTimeoutSeconds",
               "kiln has no timeout for placing a gang");
    put_runtime("vol-n",
                RT("vol-n",
                   "    torch: {}\n  podGroupPolicy: {volcano: {networkTopology: {mode: hard}}}\n",
                   ""));
    expect_bad(TJ_OF("name: vol-n"),
               "ClusterTrainingRuntime/vol-n: spec.podGroupPolicy.volcano.networkTopology",
               "network topology");
    put_runtime(
        "both",
        RT("both", "    torch: {}\n  podGroupPolicy: {volcano: {}, coscheduling: {}}\n", ""));
    expect_bad(TJ_OF("name: both"), "ClusterTrainingRuntime/both: spec.podGroupPolicy",
               "both volcano and coscheduling");
    put_runtime("kai", RT("kai", "    torch: {}\n  podGroupPolicy: {kai: {}}\n", ""));
    expect_bad(TJ_OF("name: kai"), "ClusterTrainingRuntime/kai: spec.podGroupPolicy.kai", "");
}

/* a runtime's trainer job that depends on an initializer job (Trainer's
 * multi-step example): both refused, saying why */
static void test_depends_on(void)
{
    put_runtime("steps", RT("steps", "    torch: {}\n",
                            "        - name: dataset-initializer\n          template:\n"
                            "            metadata:\n              labels:\n"
                            "                trainer.kubeflow.org/trainjob-ancestor-step: "
                            "dataset-initializer\n"));
    char path[256], body[4096];
    snprintf(path, sizeof path, "%s/steps.yaml", dir);
    const char *b = read_all(path);
    snprintf(body, sizeof body, "%s", b ? b : "");
    char *at = strstr(body, "        - name: node\n");
    CHECK(at != NULL);
    if (at) { /* the node job waits for the initializer to complete */
        char tail[4096];
        snprintf(tail, sizeof tail, "%s", at + strlen("        - name: node\n"));
        snprintf(at, sizeof body - (size_t)(at - body),
                 "        - name: node\n          dependsOn: [{name: dataset-initializer, "
                 "status: Complete}]\n%s",
                 tail);
    }
    put_runtime("steps", body);
    expect_bad(TJ_OF("name: steps"),
               "ClusterTrainingRuntime/steps: spec.template.spec.replicatedJobs[1].dependsOn",
               "kiln runs no step before the trainer, so 'node' would have nothing to wait "
               "for ('dataset-initializer' is not run)");
    expect_bad(TJ_OF("name: steps"),
               "ClusterTrainingRuntime/steps: spec.template.spec.replicatedJobs[0]",
               "can be done by the trainer's command");
}

/* status.conditions as Trainer reports them, by kiln's state */
static void test_conditions(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n  runtimeRef: {name: torch-distributed}\n", &d, NULL);
    kiln_diag_free(&d);
    if (!job) return;
    json_t *c = kiln_trainjob_conditions(job); /* not started: none */
    CHECK(json_is_array(c) && json_array_size(c) == 0);
    json_decref(c);
    job->state = KILN_STATE_SUCCEEDED;
    CHECK(kiln_set_str(&job->end_time, "2026-12-01T22:00:00Z") == KILN_OK);
    c = kiln_trainjob_conditions(job);
    CHECK(json_array_size(c) == 1);
    json_t *c0 = json_array_get(c, 0);
    CHECK_STR(json_string_value(json_object_get(c0, "type")), "Complete");
    CHECK_STR(json_string_value(json_object_get(c0, "status")), "True");
    CHECK_STR(json_string_value(json_object_get(c0, "reason")), "AllJobsCompleted");
    CHECK_STR(json_string_value(json_object_get(c0, "lastTransitionTime")), "2026-12-01T22:00:00Z");
    json_decref(c);
    job->state = KILN_STATE_FAILED;
    CHECK(kiln_set_str(&job->error_message, "node 1 exited 3") == KILN_OK);
    c = kiln_trainjob_conditions(job);
    c0 = json_array_get(c, 0);
    CHECK_STR(json_string_value(json_object_get(c0, "type")), "Failed");
    CHECK_STR(json_string_value(json_object_get(c0, "reason")), "FailedJobs");
    CHECK_STR(json_string_value(json_object_get(c0, "message")), "node 1 exited 3");
    json_decref(c);
    kiln_job_free(job);
    /* created suspended (under a queue): Suspended while it waits, Resumed
     * once it started, beside the terminal condition */
    d = (kiln_diag)KILN_DIAG_INIT;
    job = decode("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n"
                 "  name: tj-s\n  labels: {kueue.x-k8s.io/queue-name: q}\n"
                 "spec:\n  suspend: true\n  runtimeRef: {name: torch-distributed}\n",
                 &d, NULL);
    kiln_diag_free(&d);
    CHECK(job != NULL);
    if (!job) return;
    CHECK(job->training_input.kubeflow_job.suspend);
    c = kiln_trainjob_conditions(job);
    CHECK(json_array_size(c) == 1);
    c0 = json_array_get(c, 0);
    CHECK_STR(json_string_value(json_object_get(c0, "type")), "Suspended");
    CHECK_STR(json_string_value(json_object_get(c0, "status")), "True");
    CHECK_STR(json_string_value(json_object_get(c0, "reason")), "Suspended");
    json_decref(c);
    job->state = KILN_STATE_SUCCEEDED;
    CHECK(kiln_set_str(&job->start_time, "2026-12-01T21:00:00Z") == KILN_OK);
    CHECK(kiln_set_str(&job->end_time, "2026-12-01T22:00:00Z") == KILN_OK);
    c = kiln_trainjob_conditions(job);
    CHECK(json_array_size(c) == 2);
    c0 = json_array_get(c, 0);
    CHECK_STR(json_string_value(json_object_get(c0, "status")), "False");
    CHECK_STR(json_string_value(json_object_get(c0, "reason")), "Resumed");
    CHECK_STR(json_string_value(json_object_get(c0, "lastTransitionTime")), "2026-12-01T21:00:00Z");
    CHECK_STR(json_string_value(json_object_get(json_array_get(c, 1), "type")), "Complete");
    json_decref(c);
    /* the flag survives the store's JSON */
    char *js = kiln_job_to_json(job, KILN_ENC_COMPACT);
    CHECK(js && strstr(js, "\"suspend\":true"));
    free(js);
    kiln_job_free(job);
    /* another kind has none */
    job = kiln_job_new();
    CHECK(job && kiln_trainjob_conditions(job) == NULL);
    kiln_job_free(job);
}

int main(void)
{
    test_stock_torch();
    test_conditions();
    snprintf(dir, sizeof dir, "/tmp/kiln-test-trainjob.XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    /* own runtimes through KILN_RUNTIMES_DIR, the stock ones copied there */
    static const char *const stock[] = {"torch-distributed", "deepspeed-distributed",
                                        "mpi-distributed"};
    for (size_t i = 0; i < 3; i++) {
        char src[512];
        snprintf(src, sizeof src, "%s/data/runtimes/%s.yaml", KILN_SOURCE_DIR, stock[i]);
        const char *body = read_all(src);
        CHECK(body != NULL);
        if (body) put_runtime(stock[i], body);
    }
    setenv("KILN_RUNTIMES_DIR", dir, 1);
    test_own_runtime();
    test_refusals();
    test_file_runtime();
    test_suspend();
    test_pod_group();
    test_depends_on();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
