/* test_tfjob.c - Kubeflow TFJob -> kiln_job (kiln_job_from_tfjob). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "kiln/submit.h"
#include "kubeflow_test.h"
#include "test.h"

#define HEAD "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: mnist-dist\n"

/* A pod template with one container; IMG, extra container lines. */
#define POD(img, extra)                                                                            \
    "      template:\n"                                                                            \
    "        spec:\n"                                                                              \
    "          containers:\n"                                                                      \
    "          - name: tensorflow\n"                                                               \
    "            image: " img "\n" extra

static const char distributed[] =
    HEAD "  namespace: ml\n"
         "  labels: {team: vision, tier: gold}\n"
         "  annotations:\n"
         "    kiln.dev/region: europe-west4\n"
         "    kiln.dev/job-dir: /srv/jobs/mnist\n"
         "spec:\n"
         "  runPolicy:\n"
         "    backoffLimit: 3\n"
         "    activeDeadlineSeconds: 3600\n"
         "    ttlSecondsAfterFinished: 600\n"
         "    cleanPodPolicy: Running\n"
         "  tfReplicaSpecs:\n"
         "    Chief:\n"
         "      replicas: 1\n"
         "      restartPolicy: ExitCode\n"
         "      template:\n"
         "        metadata:\n"
         "          labels: {app: x}\n"
         "        spec:\n"
         "          nodeSelector:\n"
         "            cloud.google.com/gke-accelerator: nvidia-tesla-v100\n"
         "          volumes: [{name: data, hostPath: {path: /srv/data}}]\n"
         "          containers:\n"
         "          - name: tensorflow\n"
         "            image: reg/mnist:1\n"
         "            command: [python, -m, trainer.task]\n"
         "            args: [--epochs, '3']\n"
         "            env: [{name: A, value: b}, {name: EMPTY}]\n"
         "            volumeMounts: [{name: data, mountPath: /data, readOnly: true}]\n"
         "            resources:\n"
         "              limits: {nvidia.com/gpu: 2, cpu: '8', memory: 16Gi}\n"
         "    Worker:\n"
         "      replicas: 3\n"
         "      restartPolicy: OnFailure\n" POD(
             "reg/mnist:1",
             "            resources:\n"
             "              limits:\n"
             "                nvidia.com/gpu: 1\n") "    PS:\n"
                                                    "      replicas: 2\n"
                                                    "      restartPolicy: Always\n" POD(
                                                        "reg/ps:1",
                                                        "") "    Evaluator:\n"
                                                            "      replicas: 1\n"
                                                            "      restartPolicy: Never\n" POD(
                                                                "reg/eval:1", "");

static void test_distributed(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(distributed, &d, NULL);
    kiln_diag_print(&d, stderr);
    CHECK(d.n == 0);
    if (!job) return;
    kiln_training_input *ti = &job->training_input;
    CHECK_STR(job->job_id, "mnist_dist");
    CHECK_STR(kiln_map_get(&job->labels, "team"), "vision");
    CHECK(job->labels.n == 2);
    CHECK_STR(ti->region, "europe-west4");
    CHECK_STR(ti->job_dir, "/srv/jobs/mnist");
    CHECK_STR(ti->scale_tier, "CUSTOM");
    CHECK(ti->use_chief_in_tf_config);

    /* Chief -> master: the "tensorflow" container, not the first one */
    CHECK_STR(ti->master_type, "n1-standard-4");
    CHECK(ti->has_master_config);
    kiln_replica_config *m = &ti->master_config;
    CHECK_STR(m->image_uri, "reg/mnist:1");
    CHECK(m->container_command.n == 3 && m->container_args.n == 2);
    CHECK(m->has_accelerator_config && m->accelerator_config.count == 2);
    CHECK_STR(m->accelerator_config.type, "NVIDIA_TESLA_V100");
    CHECK_STR(m->restart_policy, "ExitCode");
    CHECK_STR(kiln_map_get(&m->node_selector, "cloud.google.com/gke-accelerator"),
              "nvidia-tesla-v100");
    /* env, limits and hostPath mounts reach the model (spawn.c acts on them) */
    CHECK(m->env.n == 2);
    CHECK_STR(kiln_map_get(&m->env, "A"), "b");
    CHECK(kiln_map_get(&m->env, "EMPTY") && !*kiln_map_get(&m->env, "EMPTY"));
    CHECK_STR(m->cpu_limit, "8");
    CHECK_STR(m->memory_limit, "16Gi");
    CHECK(m->host_mounts.n == 1);
    CHECK(m->host_mounts.n == 1 && strcmp(m->host_mounts.v[0], "/srv/data:/data:ro") == 0);

    /* Worker: GPUs without a model label are any one model (the device
     * plugin's nvidia.com/gpu): a count and no type */
    CHECK(ti->worker_count == 3);
    CHECK_STR(ti->worker_type, "n1-standard-4");
    CHECK(ti->worker_config.has_accelerator_config);
    CHECK(ti->worker_config.accelerator_config.count == 1);
    CHECK(ti->worker_config.accelerator_config.type == NULL);
    CHECK_STR(ti->worker_config.restart_policy, "OnFailure");

    /* PS, Evaluator: CPU only */
    CHECK(ti->parameter_server_count == 2);
    CHECK_STR(ti->parameter_server_type, "n1-standard-4");
    CHECK(!ti->parameter_server_config.has_accelerator_config);
    CHECK_STR(ti->parameter_server_config.image_uri, "reg/ps:1");
    CHECK_STR(ti->parameter_server_config.restart_policy, "Always");
    CHECK(ti->evaluator_count == 1);
    CHECK_STR(ti->evaluator_config.image_uri, "reg/eval:1");
    CHECK_STR(ti->evaluator_config.restart_policy, "Never");

    /* runPolicy */
    kiln_run_policy *rp = &ti->run_policy;
    CHECK(ti->has_run_policy);
    CHECK(rp->has_backoff_limit && rp->backoff_limit == 3);
    CHECK(rp->has_active_deadline_seconds && rp->active_deadline_seconds == 3600);
    CHECK(rp->has_ttl_seconds_after_finished && rp->ttl_seconds_after_finished == 600);
    CHECK_STR(rp->clean_pod_policy, "Running");

    /* the result survives a round trip through the Job codec */
    char *json = kiln_job_to_json(job, 0);
    kiln_job *back = NULL;
    CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d) == KILN_OK);
    CHECK(back && kiln_job_equal(job, back));
    free(json);
    kiln_job_free(back);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_master_and_defaults(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n"
                                "  tfReplicaSpecs:\n"
                                "    Master:\n" POD("img", "") "    Worker:\n"
                                                               "      replicas: 0\n" POD("img", ""),
                           &d, NULL);
    CHECK(job != NULL);
    if (job) {
        kiln_training_input *ti = &job->training_input;
        CHECK(!ti->use_chief_in_tf_config); /* Master keeps the "master" name */
        CHECK_STR(ti->master_type, "n1-standard-4");
        CHECK(ti->worker_count == 0 && ti->worker_type == NULL); /* 0 workers: no worker role */
        CHECK(ti->region == NULL);                       /* no annotation: the CLI fills it */
        CHECK(ti->master_config.restart_policy == NULL); /* unset stays unset */
        CHECK(!ti->has_run_policy);
        CHECK(job->labels.n == 0);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* Without Chief/Master, worker 0 is the chief (facts §8). */
static void test_no_chief(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n"
                                "  tfReplicaSpecs:\n"
                                "    Worker:\n"
                                "      replicas: 4\n"
                                "      restartPolicy: OnFailure\n" POD(
                                    "img", "            resources: {limits: {nvidia.com/gpu: 4}}\n"
                                           "          nodeSelector: {accelerator: "
                                           "nvidia-tesla-a100}\n"),
                           &d, NULL);
    CHECK(job != NULL);
    if (job) {
        kiln_training_input *ti = &job->training_input;
        CHECK(ti->use_chief_in_tf_config);
        CHECK(ti->has_master_config && ti->worker_count == 3);
        CHECK_STR(ti->master_type, "a2-highgpu-4g");
        CHECK_STR(ti->worker_type, "a2-highgpu-4g");
        CHECK_STR(ti->master_config.accelerator_config.type, "NVIDIA_TESLA_A100");
        CHECK_STR(ti->worker_config.accelerator_config.type, "NVIDIA_TESLA_A100");
        CHECK_STR(ti->master_config.image_uri, "img");
        CHECK_STR(ti->worker_config.image_uri, "img");
        CHECK_STR(ti->worker_config.restart_policy, "OnFailure");
    }
    kiln_job_free(job);

    /* one worker: a master only; replicas defaults to 1 */
    job = decode(HEAD "spec:\n  tfReplicaSpecs:\n    worker:\n" POD("img", ""), &d, NULL);
    CHECK(job && job->training_input.worker_count == 0 && job->training_input.worker_type == NULL);
    CHECK(job && job->training_input.has_master_config && !job->training_input.has_worker_config);
    kiln_job_free(job);
    CHECK(d.n == 0);

    /* the same mistake in the promoted spec is reported once */
    job = decode(HEAD "spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 3\n" POD("''", ""),
                 &d, NULL);
    CHECK(job == NULL && d.n == 1);
    kiln_diag_free(&d);

    expect_bad(HEAD "spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 0\n" POD("img", ""),
               "spec.tfReplicaSpecs.Worker.replicas", "at least 1");
    expect_bad(HEAD "spec:\n  tfReplicaSpecs:\n    PS:\n" POD("img", ""), "spec.tfReplicaSpecs",
               "Chief, Master or Worker");
}

static void test_header_errors(void)
{
    expect_bad("apiVersion: kubeflow.org/v1beta2\nkind: TFJob\n", "apiVersion", "v1beta2");
    expect_bad("apiVersion: kubeflow.org/v1\nkind: MXJob\n", "kind", "PyTorchJob");
    expect_bad("kind: TFJob\n", "apiVersion", "required");
    expect_bad("apiVersion: kubeflow.org/v1\n", "kind", "required");
    expect_bad("- a\n- b\n", "", "map");
    expect_bad("apiVersion: [\n", "", ""); /* not YAML */
    expect_bad("apiVersion: kubeflow.org/v1\nkind: TFJob\nspec: {}\n", "metadata", "name");
    expect_bad(HEAD, "spec", "required");
    expect_bad(HEAD "spec: {}\n", "spec.tfReplicaSpecs", "required");
    /* replica types: an unknown one names the known ones, a twice-given one is refused */
    expect_bad(HEAD "spec:\n  tfReplicaSpecs:\n    Boss:\n" POD("img", ""), "spec.tfReplicaSpecs",
               "'Boss' is not a TFJob replica type; use Chief, Master, PS, Worker or Evaluator");
    expect_bad(
        HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD("img", "") "    chief:\n" POD("img", ""),
        "spec.tfReplicaSpecs.Chief", "given twice");
    expect_bad("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: 1st-job}\n"
               "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD("img", ""),
               "metadata.name", "1st-job");

    /* JSON is YAML too; names with '.' map like '-' */
    const char *json = "{\"apiVersion\": \"kubeflow.org/v1\", \"kind\": \"TFJob\","
                       " \"metadata\": {\"name\": \"a.b-c\"}, \"spec\": {\"tfReplicaSpecs\":"
                       " {\"Chief\": {\"replicas\": 1, \"template\": {\"spec\": {\"containers\":"
                       " [{\"image\": \"i\", \"resources\": {\"limits\": {\"nvidia.com/gpu\": 1}}}]"
                       "}}}}}}";
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(json, &d, NULL);
    CHECK(job && job->job_id && strcmp(job->job_id, "a_b_c") == 0);
    CHECK(job && job->training_input.master_config.accelerator_config.count == 1);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_replica_errors(void)
{
    const char *spec = HEAD "spec:\n  tfReplicaSpecs:\n";
    char buf[2048];
#define BAD(body, field, needle)                                                                   \
    do {                                                                                           \
        snprintf(buf, sizeof buf, "%s%s", spec, body);                                             \
        expect_bad(buf, field, needle);                                                            \
    } while (0)

    BAD("    Chief:\n      replicas: 2\n" POD("img", ""), "spec.tfReplicaSpecs.Chief.replicas",
        "exactly one");
    BAD("    Master:\n      replicas: 0\n" POD("img", ""), "spec.tfReplicaSpecs.Master.replicas",
        "exactly one");
    BAD("    Chief:\n" POD("img", "") "    Master:\n" POD("img", ""), "spec.tfReplicaSpecs",
        "both Chief and Master");
    BAD("    Chief:\n" POD("img", "") "    Worker:\n      replicas: abc\n" POD("img", ""),
        "spec.tfReplicaSpecs.Worker.replicas", "abc");
    BAD("    Chief:\n" POD("img", "") "    PS:\n      replicas: -1\n" POD("img", ""),
        "spec.tfReplicaSpecs.PS.replicas", "-1");
    BAD("    Chief:\n" POD("img", "") "    Trainer:\n" POD("img", ""), "spec.tfReplicaSpecs",
        "'Trainer'");
    BAD("    Chief:\n" POD("img", "") "    Worker: 3\n", "spec.tfReplicaSpecs.Worker",
        "replica spec");
    BAD("    Chief:\n" POD("img", "") "    chief:\n" POD("img", ""), "spec.tfReplicaSpecs.Chief",
        "twice");
    BAD("    Chief:\n      restartPolicy: Sometimes\n" POD("img", ""),
        "spec.tfReplicaSpecs.Chief.restartPolicy", "Sometimes");
    BAD("    Chief:\n" POD("''", ""), "spec.tfReplicaSpecs.Chief.template.spec.containers[0].image",
        "required");
    BAD("    Chief:\n      template: {spec: {containers: []}}\n",
        "spec.tfReplicaSpecs.Chief.template.spec.containers", "required");
    BAD("    Chief:\n      replicas: 1\n", "spec.tfReplicaSpecs.Chief.template.spec.containers",
        "required");
    BAD("    Chief:\n" POD("img", "            resources: {limits: {nvidia.com/gpu: lots}}\n"),
        "spec.tfReplicaSpecs.Chief.template.spec.containers[0].resources.limits[\"nvidia.com/"
        "gpu\"]",
        "lots");
    BAD("    Chief:\n" POD("img", "            resources: {limits: {nvidia.com/gpu: 1}}\n"
                                  "          nodeSelector: {accelerator: 'nvidia tesla'}\n"),
        "spec.tfReplicaSpecs.Chief.template.spec.containers[0].resources.limits[\"nvidia.com/"
        "gpu\"]",
        "nvidia tesla");
    BAD("    Chief:\n" POD("img", "            command: python\n"),
        "spec.tfReplicaSpecs.Chief.template.spec.containers[0].command", "list");
    BAD("    Chief:\n" POD("img", "            args: [a, [b]]\n"),
        "spec.tfReplicaSpecs.Chief.template.spec.containers[0].args[1]", "string");
    BAD("    Chief:\n" POD("img", "") "  runPolicy: {cleanPodPolicy: Some}\n",
        "spec.runPolicy.cleanPodPolicy", "Some");
    BAD("    Chief:\n" POD("img", "") "  runPolicy: {backoffLimit: -2}\n",
        "spec.runPolicy.backoffLimit", "-2");
    BAD("    Chief:\n" POD("img", "") "  runPolicy: {activeDeadlineSeconds: 0}\n",
        "spec.runPolicy.activeDeadlineSeconds", "at least 1");
    BAD("    Chief:\n" POD("img", "") "  runPolicy: 5\n", "spec.runPolicy", "map");
    BAD("    Chief:\n" POD("img", "") "  successPolicy: AllWorkers\n", "spec.successPolicy",
        "AllWorkers");
#undef BAD
}

/* TFJobs written before runPolicy: the same fields directly under spec. */
static void test_legacy_run_policy(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n"
                                "  cleanPodPolicy: All\n"
                                "  backoffLimit: 2\n"
                                "  activeDeadlineSeconds: 100\n"
                                "  runPolicy: {backoffLimit: 5}\n"
                                "  tfReplicaSpecs:\n"
                                "    Chief:\n" POD("img", ""),
                           &d, NULL);
    CHECK(job != NULL);
    if (job) {
        kiln_run_policy *rp = &job->training_input.run_policy;
        CHECK(job->training_input.has_run_policy);
        CHECK_STR(rp->clean_pod_policy, "All");
        CHECK(rp->backoff_limit == 5); /* runPolicy wins */
        CHECK(rp->active_deadline_seconds == 100);
        CHECK(!rp->has_ttl_seconds_after_finished);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_machine_type_annotation_and_first_container(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job =
        decode(HEAD "spec:\n"
                    "  tfReplicaSpecs:\n"
                    "    Chief:\n"
                    "      template:\n"
                    "        metadata: {annotations: {kiln.dev/machine-type: n1-highmem-8}}\n"
                    "        spec:\n"
                    "          containers:\n"
                    "          - name: trainer\n"
                    "            image: first\n"
                    "            imagePullPolicy: Always\n"
                    "            resources: {limits: {nvidia.com/gpu: '0'}}\n",
               &d, NULL);
    CHECK(job != NULL);
    if (job) {
        CHECK_STR(job->training_input.master_type, "n1-highmem-8");
        CHECK_STR(job->training_input.master_config.image_uri, "first");
        /* Kubernetes' pull policy is kept for the podman backend */
        CHECK_STR(job->training_input.master_config.image_pull_policy, "Always");
        CHECK(!job->training_input.master_config.has_accelerator_config); /* 0 GPUs */
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* What kiln does not act on is refused at its path, never dropped (issue 16). */
static void test_unread_keys_refused(void)
{
#define CHIEF(extra)                                                                               \
    HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n      template:\n        spec:\n" extra
#define CT "spec.tfReplicaSpecs.Chief.template.spec"
    expect_bad(CHIEF("          hostNetwork: true\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".hostNetwork", "not supported by kiln");
    /* tolerations are read (placement honours them), checked as Kubernetes does */
    expect_bad(CHIEF("          tolerations: [{operator: Equal, value: v}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].operator", "must be Exists when key is empty");
    expect_bad(CHIEF("          tolerations: [{key: k, operator: Exists, value: v}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].value", "must be empty when operator is Exists");
    expect_bad(CHIEF("          tolerations: [{key: k, effect: NoSchedule, tolerationSeconds: 5}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].effect", "must be NoExecute when tolerationSeconds is set");
    expect_bad(CHIEF("          tolerations: [{key: k, operator: Lt, value: '5'}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].operator", "is not Equal or Exists");
    expect_bad(CHIEF("          tolerations: [{key: k, effect: Sometimes}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].effect", "is not NoSchedule, PreferNoSchedule or NoExecute");
    expect_bad(CHIEF("          tolerations: [{key: k, color: red}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".tolerations[0].color", "not supported by kiln");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i}, {name: s, image: j}]\n"),
               CT ".containers[1]", "one container per replica");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i,\n"
                     "            ports: [{name: http, containerPort: 80}]}]\n"),
               CT ".containers[0].ports[0]", "port of its own");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i, workingDir: x}]\n"),
               CT ".containers[0].workingDir", "absolute path");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i, imagePullPolicy: "
                     "Sometimes}]\n"),
               CT ".containers[0].imagePullPolicy", "IfNotPresent, Always or Never");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i,\n"
                     "            env: [{name: A, valueFrom: {secretKeyRef: {name: s}}}]}]\n"),
               CT ".containers[0].env[0].valueFrom", "value itself");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i, envFrom: []}]\n"),
               CT ".containers[0].envFrom", "{name, value}");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i,\n"
                     "            resources: {requests: {example.com/fpga: 1}}}]\n"),
               CT ".containers[0].resources.requests.example.com/fpga", "nvidia.com/gpu, cpu");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i,\n"
                     "            resources: {limits: {example.com/fpga: 1}}}]\n"),
               CT ".containers[0].resources.limits.example.com/fpga", "nvidia.com/gpu, cpu");
    expect_bad(CHIEF("          volumes: [{name: d, configMap: {name: c}}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".volumes[0].configMap", "no ConfigMaps");
    expect_bad(CHIEF("          volumes: [{name: d, hostPath: {path: /x}}]\n"
                     "          containers: [{name: tensorflow, image: i,\n"
                     "            volumeMounts: [{name: e, mountPath: /y}]}]\n"),
               CT ".containers[0].volumeMounts[0].name", "names no hostPath, emptyDir or");
    expect_bad(CHIEF("          volumes: [{name: d, hostPath: {path: rel}}]\n"
                     "          containers: [{name: tensorflow, image: i}]\n"),
               CT ".volumes[0].hostPath", "absolute path");
    expect_bad(HEAD "spec:\n  schedulingPolicy: {}\n  tfReplicaSpecs:\n    Chief:\n"
                    "      template: {spec: {containers: [{name: tensorflow, image: i}]}}\n",
               "spec.schedulingPolicy", "not supported");
    expect_bad(HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n      minAvailable: 1\n"
                    "      template: {spec: {containers: [{name: tensorflow, image: i}]}}\n",
               "spec.tfReplicaSpecs.Chief.minAvailable", "not supported");
    /* the operator's own port: only TCP, and containerPort a port number */
    expect_bad(
        CHIEF("          containers: [{name: tensorflow, image: i,\n"
              "            ports: [{name: tfjob-port, containerPort: 2222, protocol: UDP}]}]\n"),
        CT ".containers[0].ports[0].protocol", "TCP");
    expect_bad(CHIEF("          containers: [{name: tensorflow, image: i,\n"
                     "            ports: [{name: tfjob-port, containerPort: http}]}]\n"),
               CT ".containers[0].ports[0].containerPort", "1 to 65535");
    /* booleans: a value that is neither true nor false is refused, not read as false
     * (readOnly: yes would have mounted the directory writable) */
    expect_bad(CHIEF("          volumes: [{name: d, hostPath: {path: /x}}]\n"
                     "          containers: [{name: tensorflow, image: i,\n"
                     "            volumeMounts: [{name: d, mountPath: /y, readOnly: yes}]}]\n"),
               CT ".containers[0].volumeMounts[0].readOnly", "true or false");
    expect_bad(HEAD "spec:\n  runPolicy: {suspend: True}\n  tfReplicaSpecs:\n    Chief:\n"
                    "      template: {spec: {containers: [{name: tensorflow, image: i}]}}\n",
               "spec.runPolicy.suspend", "not supported");
    expect_bad(HEAD "spec:\n  runPolicy: {suspend: maybe}\n  tfReplicaSpecs:\n    Chief:\n"
                    "      template: {spec: {containers: [{name: tensorflow, image: i}]}}\n",
               "spec.runPolicy.suspend", "true or false");
#undef CHIEF
#undef CT
}

/* Kubernetes booleans in YAML's spellings: readOnly: True mounts read-only,
 * suspend: false and protocol: TCP are what kiln does anyway. */
static void test_booleans_and_port(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(HEAD "spec:\n  runPolicy: {suspend: false}\n  tfReplicaSpecs:\n"
                                "    Chief:\n      template:\n        spec:\n"
                                "          volumes: [{name: d, hostPath: {path: /x}}]\n"
                                "          containers: [{name: tensorflow, image: i,\n"
                                "            ports: [{name: tfjob-port, containerPort: 2222, "
                                "protocol: TCP}],\n"
                                "            volumeMounts: [{name: d, mountPath: /y, readOnly: "
                                "True}]}]\n",
                           &d, NULL);
    kiln_diag_print(&d, stderr);
    CHECK(job != NULL && d.n == 0);
    if (job) {
        const kiln_strv *m = &job->training_input.master_config.host_mounts;
        CHECK(m->n == 1 && strcmp(m->v[0], "/x:/y:ro") == 0);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* --tfjob with flags: flags win, the TFJob fills the rest. */
static void test_tfjob_with_flags(void)
{
    char path[64] = "/tmp/kiln_test_tfjob_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fputs(distributed, f);
    fclose(f);

    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    char *argv[] = {"renamed",
                    "--tfjob",
                    path,
                    "--worker-count",
                    "5",
                    "--region",
                    "us-east1",
                    "--worker-accelerator",
                    "count=2,type=nvidia-tesla-t4"};
    CHECK(kiln_submit_parse(9, argv, &a, &d) == KILN_OK);
    CHECK(kiln_submit_build(&a, &job, &d) == KILN_OK);
    if (job) {
        kiln_training_input *ti = &job->training_input;
        CHECK_STR(job->job_id, "renamed");
        CHECK(ti->worker_count == 5);
        CHECK_STR(ti->region, "us-east1");
        CHECK_STR(ti->worker_config.accelerator_config.type, "NVIDIA_TESLA_T4");
        CHECK(ti->worker_config.accelerator_config.count == 2);
        CHECK_STR(ti->worker_config.image_uri, "reg/mnist:1"); /* from the TFJob */
        CHECK(ti->parameter_server_count == 2);
    }
    kiln_job_free(job);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
    remove(path);
}

/* nvidia.com/gpu narrowed by required node affinity on a GPU-model key, as
 * GKE's docs pin a model; shapes kiln's node selector cannot say are refused. */
static void test_gpu_affinity(void)
{
    kiln_diag d = KILN_DIAG_INIT;
#define AFF(op, vals)                                                                              \
    "          affinity:\n"                                                                        \
    "            nodeAffinity:\n"                                                                  \
    "              requiredDuringSchedulingIgnoredDuringExecution:\n"                              \
    "                nodeSelectorTerms:\n"                                                         \
    "                - matchExpressions:\n"                                                        \
    "                  - {key: cloud.google.com/gke-accelerator, operator: " op ", values: " vals  \
    "}\n"                                                                                          \
    "                  - {key: nvidia.com/gpu.product, operator: In, values: "                     \
    "[NVIDIA-H100-80GB-HBM3]}\n"
    kiln_job *job = decode(HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD(
                               "img", "            resources: {limits: {nvidia.com/gpu: 2}}\n" AFF(
                                          "In", "[nvidia-h100-80gb]")),
                           &d, NULL);
    CHECK(job != NULL && d.n == 0);
    if (job) {
        const kiln_replica_config *m = &job->training_input.master_config;
        CHECK_STR(m->accelerator_config.type, "NVIDIA_H100_80GB");
        CHECK(m->accelerator_config.count == 2);
        CHECK_STR(kiln_map_get(&m->node_selector, "cloud.google.com/gke-accelerator"),
                  "nvidia-h100-80gb");
        CHECK_STR(kiln_map_get(&m->node_selector, "nvidia.com/gpu.product"),
                  "NVIDIA-H100-80GB-HBM3");
    }
    kiln_job_free(job);
    /* NotIn, or a choice of models, would loosen into something else: refused */
    kiln_diag_clear(&d);
    job = decode(HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD(
                     "img", "            resources: {limits: {nvidia.com/gpu: 1}}\n" AFF(
                                "In", "[nvidia-h100-80gb, nvidia-l4]")),
                 &d, NULL);
    CHECK(job == NULL && d.n == 1 && strstr(d.v[0].description, "several values") != NULL);
    kiln_job_free(job);
    kiln_diag_clear(&d);
    job = decode(HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD(
                     "img", "            resources: {limits: {nvidia.com/gpu: 1}}\n" AFF(
                                "NotIn", "[nvidia-l4]")),
                 &d, NULL);
    CHECK(job == NULL && d.n == 1 && strstr(d.v[0].description, "operator") != NULL);
    kiln_job_free(job);
    kiln_diag_free(&d);
#undef AFF
}

/* MIG instances by the device plugin's mixed-strategy names: the resource
 * is the accelerator type (kilnd lists it beside NVIDIA_MIG_*); mixed with
 * nvidia.com/gpu, two of them, or a count below 1: refused at the key. */
static void test_mig_resources(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job =
        decode(HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n" POD(
                   "img", "            resources: {limits: {nvidia.com/mig-1g.10gb: 2}}\n"),
               &d, NULL);
    CHECK_MSG(job != NULL, "%s", d.n ? d.v[0].description : "");
    if (job) {
        const kiln_replica_config *m = &job->training_input.master_config;
        CHECK(m->has_accelerator_config && m->accelerator_config.count == 2);
        CHECK_STR(m->accelerator_config.type, "nvidia.com/mig-1g.10gb");
        kiln_job_free(job);
    }
    kiln_diag_free(&d);
    const char *spec = HEAD "spec:\n  tfReplicaSpecs:\n    Chief:\n";
    const char *f = "spec.tfReplicaSpecs.Chief.template.spec.containers[0].resources.limits";
    char buf[2048], field[300];
    snprintf(buf, sizeof buf, "%s%s", spec,
             POD("img", "            resources: {limits: {nvidia.com/mig-1g.10gb: 1, "
                        "nvidia.com/gpu: 1}}\n"));
    snprintf(field, sizeof field, "%s[\"nvidia.com/mig-1g.10gb\"]", f);
    expect_bad(buf, field, "one kind of GPU");
    snprintf(buf, sizeof buf, "%s%s", spec,
             POD("img", "            resources: {limits: {nvidia.com/mig-1g.10gb: 0}}\n"));
    expect_bad(buf, field, "at least 1");
}

int main(void)
{
    test_mig_resources();
    test_distributed();
    test_master_and_defaults();
    test_no_chief();
    test_header_errors();
    test_replica_errors();
    test_legacy_run_policy();
    test_machine_type_annotation_and_first_container();
    test_unread_keys_refused();
    test_booleans_and_port();
    test_tfjob_with_flags();
    test_gpu_affinity();
    TEST_DONE();
}
