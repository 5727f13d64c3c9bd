/* test_kubeflow_pod.c - the pod fields of a Kubeflow job with Kubernetes'
 * meaning (issue 41): resources.requests (what placement reserves; limits
 * the cap; only limits means requests = limits; a request above its limit
 * refused), workingDir, metadata.generateName, schedulerName, the pod
 * template's restartPolicy and creationTimestamp: null; securityContext
 * (the pod's and the container's, merged; each setting acted on, checked
 * against the project's user, or refused naming the field). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kubeflow_test.h"
#include "spec/kubeflow.h"
#include "test.h"

#define HEAD "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pod-fields\n"
#define MASTER(pod, ctr)                                                                           \
    HEAD "spec:\n  pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n" pod        \
         "          containers:\n          - name: pytorch\n            image: reg/t:1\n" ctr
#define CTP "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"

/* Decodes `yaml` (must pass) with its notes; the caller frees both. */
static kiln_job *decode_notes(const char *yaml, kiln_diag *notes)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_err err = kiln_job_from_kubeflow_notes(yaml, strlen(yaml), &job, &d, notes);
    CHECK_MSG(err == KILN_OK && job != NULL, "decode failed");
    if (d.n) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

static bool has_note(const kiln_diag *n, const char *field, const char *needle)
{
    for (size_t i = 0; i < n->n; i++)
        if (strcmp(n->v[i].field, field) == 0 && strstr(n->v[i].description, needle)) return true;
    return false;
}

/* The one catalog refusal (check_honoured) of `yaml`, or none (field NULL). */
static void expect_honoured(const kiln_catalog *c, const char *yaml, const char *field,
                            const char *needle)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(yaml, &d, NULL);
    CHECK(job != NULL);
    kiln_err err = job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL;
    if (field == NULL)
        CHECK_MSG(err == KILN_OK && d.n == 0, "refused");
    else
        CHECK_MSG(err == KILN_EINVAL && d.n == 1 && strcmp(d.v[0].field, field) == 0 &&
                      strstr(d.v[0].description, needle),
                  "wanted a refusal at %s with '%s'", field, needle);
    if (d.n && field == NULL) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* requests: kept apart from limits; placement reserves the request, and
 * without one the limit (the API server's default). */
static void test_requests_and_limits(const kiln_catalog *c)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(MASTER("", "            resources:\n"
                                      "              requests: {cpu: '6', memory: 20Gi}\n"
                                      "              limits: {cpu: '8', memory: 24Gi}\n"),
                           &d, NULL);
    CHECK(d.n == 0);
    kiln_replica_plan plan[KILN_ROLE_COUNT];
    if (job) {
        const kiln_replica_config *rc = &job->training_input.master_config;
        CHECK_STR(rc->cpu_request, "6");
        CHECK_STR(rc->memory_request, "20Gi");
        CHECK_STR(rc->cpu_limit, "8");
        CHECK_STR(rc->memory_limit, "24Gi");
        CHECK(kiln_catalog_plan(c, job, plan) == 1);
        /* the request is the floor a node must have, not the limit */
        CHECK(plan[0].limit_vcpus == 6);
        CHECK(plan[0].limit_memory_gb > 19.99 && plan[0].limit_memory_gb < 20.01);
        CHECK(plan[0].vcpus >= 6);
        /* and it survives the store's JSON */
        char *json = kiln_job_to_json(job, KILN_ENC_COMPACT);
        CHECK(json && strstr(json, "\"cpuRequest\":\"6\"") && strstr(json, "\"memoryRequest\""));
        kiln_job *back = NULL;
        CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d) == KILN_OK);
        if (back) CHECK_STR(back->training_input.master_config.cpu_request, "6");
        kiln_job_free(back);
        free(json);
    }
    kiln_job_free(job);
    /* only limits: the reservation is the limit (requests default to limits) */
    job =
        decode(MASTER("", "            resources: {limits: {cpu: '7', memory: 3Gi}}\n"), &d, NULL);
    if (job) {
        CHECK(job->training_input.master_config.cpu_request == NULL);
        CHECK(kiln_catalog_plan(c, job, plan) == 1 && plan[0].limit_vcpus == 7);
        CHECK(plan[0].limit_memory_gb > 2.99 && plan[0].limit_memory_gb < 3.01);
    }
    kiln_job_free(job);
    /* only requests: reserved, no cap */
    job = decode(MASTER("", "            resources: {requests: {cpu: 500m}}\n"), &d, NULL);
    if (job) {
        CHECK(job->training_input.master_config.cpu_limit == NULL);
        CHECK(kiln_catalog_plan(c, job, plan) == 1 && plan[0].limit_vcpus == 1);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);

    /* a request above its limit: refused as Kubernetes refuses it */
    expect_honoured(
        c, MASTER("", "            resources: {requests: {cpu: '4'}, limits: {cpu: '2'}}\n"),
        "trainingInput.masterConfig.cpuRequest", "less than or equal to cpu limit");
    expect_honoured(c,
                    MASTER("", "            resources: {requests: {memory: 2Gi}, limits: {memory: "
                               "1Gi}}\n"),
                    "trainingInput.masterConfig.memoryRequest", "memory limit");
    expect_honoured(c, MASTER("", "            resources: {requests: {cpu: lots}}\n"),
                    "trainingInput.masterConfig.cpuRequest", "CPU quantity");
    expect_honoured(
        c, MASTER("", "            resources: {requests: {cpu: '2'}, limits: {cpu: '2'}}\n"), NULL,
        NULL);
    /* GPUs cannot be overcommitted: in limits, and a request equal to it */
    expect_bad(MASTER("", "            resources: {requests: {nvidia.com/gpu: 1}}\n"),
               CTP ".resources.requests[\"nvidia.com/gpu\"]", "non overcommitable");
    expect_bad(MASTER("", "            resources: {requests: {nvidia.com/gpu: 1}, limits: "
                          "{nvidia.com/gpu: 2}}\n"),
               CTP ".resources.requests[\"nvidia.com/gpu\"]", "equal to the nvidia.com/gpu limit");
    job = decode(MASTER("", "            resources: {requests: {nvidia.com/gpu: 2}, limits: "
                            "{nvidia.com/gpu: 2}}\n"),
                 &d, NULL);
    CHECK(job && job->training_input.master_config.accelerator_config.count == 2);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_working_dir(const kiln_catalog *c)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(MASTER("", "            workingDir: /workspace/src\n"), &d, NULL);
    if (job) CHECK_STR(job->training_input.master_config.working_dir, "/workspace/src");
    char *json = job ? kiln_job_to_json(job, KILN_ENC_COMPACT) : NULL;
    CHECK(json && strstr(json, "\"workingDir\":\"/workspace/src\""));
    free(json);
    kiln_job_free(job);
    /* empty: the default, as Kubernetes reads it */
    job = decode(MASTER("", "            workingDir: ''\n"), &d, NULL);
    CHECK(job && job->training_input.master_config.working_dir == NULL);
    kiln_job_free(job);
    kiln_diag_free(&d);
    expect_bad(MASTER("", "            workingDir: src\n"), CTP ".workingDir", "absolute path");
    /* a JSON Job's workingDir is checked the same */
    expect_honoured(c, MASTER("", "            workingDir: /w\n"), NULL, NULL);
}

static void test_generate_name(void)
{
    static const char yaml[] =
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  generateName: mnist-run-\n"
        "spec:\n  pytorchReplicaSpecs:\n    Master:\n      template: {spec: {containers: "
        "[{name: pytorch, image: i}]}}\n";
    kiln_diag n1 = KILN_DIAG_INIT, n2 = KILN_DIAG_INIT;
    kiln_job *a = decode_notes(yaml, &n1), *b = decode_notes(yaml, &n2);
    if (a && b) {
        /* prefix (as a jobId) and 5 of the API server's characters */
        CHECK(strncmp(a->job_id, "mnist_run_", 10) == 0 && strlen(a->job_id) == 15);
        CHECK(strspn(a->job_id + 10, "bcdfghjklmnpqrstvwxz2456789") == 5);
        CHECK_MSG(strcmp(a->job_id, b->job_id) != 0, "two names alike: %s", a->job_id);
        CHECK(has_note(&n1, "metadata.generateName", "is named 'mnist-run-"));
    }
    kiln_job_free(a);
    kiln_job_free(b);
    kiln_diag_free(&n1);
    kiln_diag_free(&n2);
    /* name wins over generateName, as on the API server */
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n"
                           "  name: fixed\n  generateName: gen-\nspec:\n  pytorchReplicaSpecs:\n"
                           "    Master:\n      template: {spec: {containers: [{name: pytorch, "
                           "image: i}]}}\n",
                           &d, NULL);
    if (job) CHECK_STR(job->job_id, "fixed");
    kiln_job_free(job);
    kiln_diag_free(&d);
    /* the prefix is cut so the name stays within 63 characters */
    char long_prefix[80], out[KILN__KF_NAME_MAX + 1];
    memset(long_prefix, 'a', 70);
    long_prefix[70] = '\0';
    CHECK(kiln__kf_generate_name(long_prefix, out));
    CHECK(strlen(out) == 63 && strncmp(out, long_prefix, 58) == 0);
    expect_bad("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  labels: {}\n"
               "spec: {pytorchReplicaSpecs: {Master: {template: {spec: {containers: "
               "[{name: pytorch, image: i}]}}}}}\n",
               "metadata.name", "generateName");
}

static void test_scheduler_restart_timestamp(void)
{
    kiln_diag notes = KILN_DIAG_INIT;
    kiln_job *job = decode_notes(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: p\n"
        "  creationTimestamp: null\nspec:\n  pytorchReplicaSpecs:\n    Master:\n"
        "      restartPolicy: OnFailure\n      template:\n        metadata:\n"
        "          creationTimestamp: null\n        spec:\n          schedulerName: volcano\n"
        "          restartPolicy: Never\n          containers: [{name: pytorch, image: i}]\n",
        &notes);
    if (job) CHECK_STR(job->training_input.master_config.restart_policy, "OnFailure");
    CHECK(has_note(&notes, "spec.pytorchReplicaSpecs.Master.template.spec.restartPolicy",
                   "replaced by spec.pytorchReplicaSpecs.Master.restartPolicy"));
    CHECK(has_note(&notes, "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName",
                   "all its replicas at once"));
    /* null creationTimestamps say nothing */
    for (size_t i = 0; i < notes.n; i++)
        CHECK(strstr(notes.v[i].field, "creationTimestamp") == NULL);
    kiln_job_free(job);
    kiln_diag_free(&notes);
    expect_bad(MASTER("          schedulerName: my-scheduler\n", ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName", "'my-scheduler'");
    expect_bad(MASTER("          restartPolicy: ExitCode\n", ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.restartPolicy",
               "not a pod restart policy");
    expect_bad(HEAD "  creationTimestamp: {a: 1}\nspec:\n  pytorchReplicaSpecs:\n    Master:\n"
                    "      template: {spec: {containers: [{name: pytorch, image: i}]}}\n",
               "metadata.creationTimestamp", "null or a time");
}

/* emptyDir: a scratch volume of the container's own (disk), or a tmpfs
 * (medium: Memory) capped by sizeLimit */
static void test_empty_dir(const kiln_catalog *c)
{
#define VP "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0]"
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(MASTER("          volumes:\n"
                                  "          - {name: shm, emptyDir: {medium: Memory, sizeLimit: "
                                  "1Gi}}\n"
                                  "          - {name: cache, emptyDir: {}}\n"
                                  "          - {name: tmp, emptyDir: {medium: Memory}}\n",
                                  "            volumeMounts:\n"
                                  "            - {name: shm, mountPath: /dev/shm}\n"
                                  "            - {name: cache, mountPath: /cache}\n"
                                  "            - {name: tmp, mountPath: /tmp}\n"),
                           &d, NULL);
    kiln_diag_print(&d, stderr);
    if (job) {
        const kiln_strv *m = &job->training_input.master_config.scratch_mounts;
        CHECK(m->n == 3);
        if (m->n == 3) {
            CHECK_STR(m->v[0], "/dev/shm:Memory:1Gi");
            CHECK_STR(m->v[1], "/cache");
            CHECK_STR(m->v[2], "/tmp:Memory");
        }
        CHECK(job->training_input.master_config.host_mounts.n == 0);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    expect_honoured(c,
                    MASTER("          volumes: [{name: s, emptyDir: {medium: Memory}}]\n",
                           "            volumeMounts: [{name: s, mountPath: /dev/shm}]\n"),
                    NULL, NULL);
    expect_bad(MASTER("          volumes: [{name: d, emptyDir: {medium: HugePages}}]\n", ""),
               VP ".emptyDir.medium", "HugePages is not");
    expect_bad(MASTER("          volumes: [{name: d, emptyDir: {sizeLimit: 1Gi}}]\n", ""),
               VP ".emptyDir.sizeLimit", "cannot be capped");
    expect_bad(MASTER("          volumes: [{name: d, emptyDir: {medium: Memory, sizeLimit: "
                      "1Gi, foo: 1}}]\n",
                      ""),
               VP ".emptyDir.foo", "not supported by kiln");
    expect_bad(MASTER("          volumes: [{name: d, emptyDir: {}}]\n",
                      "            volumeMounts: [{name: d, mountPath: /a, readOnly: true}]\n"),
               CTP ".volumeMounts[0]", "stay empty");
    expect_bad(MASTER("          volumes: [{name: d, emptyDir: {}}]\n",
                      "            volumeMounts: [{name: d, mountPath: /a}, {name: d, "
                      "mountPath: /b}]\n"),
               CTP ".volumeMounts[1]", "mounted twice");
    /* a bad sizeLimit in a JSON Job is the catalog's to refuse */
    static const char json[] =
        "{\"jobId\": \"j\", \"trainingInput\": {\"scaleTier\": \"CUSTOM\", \"masterType\": "
        "\"n1-standard-4\", \"region\": \"us-central1\", \"masterConfig\": {\"imageUri\": "
        "\"i\", \"scratchMounts\": [\"/dev/shm:Memory:lots\"]}}}";
    job = NULL;
    CHECK(kiln_job_from_json(json, strlen(json), &job, &d) == KILN_OK);
    CHECK(job && kiln_catalog_check_honoured(c, job, &d) == KILN_EINVAL && d.n == 1 &&
          strcmp(d.v[0].field, "trainingInput.masterConfig.scratchMounts[0]") == 0);
    kiln_job_free(job);
    kiln_diag_free(&d);
#undef VP
}

/* persistentVolumeClaim: a claim mount, resolved by kilnd's claim table at
 * create (test_claims, it_kfkinds); readOnly from the volume or the mount */
static void test_claims(const kiln_catalog *c)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(MASTER("          volumes:\n"
                                  "          - {name: data, persistentVolumeClaim: {claimName: "
                                  "mnist-data, readOnly: true}}\n"
                                  "          - {name: ckpt, persistentVolumeClaim: {claimName: "
                                  "ckpt}}\n",
                                  "            volumeMounts:\n"
                                  "            - {name: data, mountPath: /data}\n"
                                  "            - {name: ckpt, mountPath: /ckpt}\n"
                                  "            - {name: ckpt, mountPath: /ro, readOnly: true}\n"),
                           &d, NULL);
    kiln_diag_print(&d, stderr);
    if (job) {
        const kiln_strv *m = &job->training_input.master_config.claim_mounts;
        CHECK(m->n == 3);
        if (m->n == 3) {
            CHECK_STR(m->v[0], "mnist-data:/data:ro");
            CHECK_STR(m->v[1], "ckpt:/ckpt");
            CHECK_STR(m->v[2], "ckpt:/ro:ro");
        }
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    expect_honoured(c,
                    MASTER("          volumes: [{name: d, persistentVolumeClaim: {claimName: "
                           "x}}]\n",
                           "            volumeMounts: [{name: d, mountPath: /d}]\n"),
                    NULL, NULL);
    expect_bad(MASTER("          volumes: [{name: d, persistentVolumeClaim: {}}]\n", ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0].persistentVolumeClaim"
               ".claimName",
               "required");
    expect_bad(MASTER("          volumes: [{name: d, persistentVolumeClaim: {claimName: c, "
                      "readOnly: maybe}}]\n",
                      ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0].persistentVolumeClaim"
               ".readOnly",
               "true or false");
}

/* what is still refused names its field and says why */
static void test_volumes_still_refused(void)
{
    expect_bad(MASTER("          volumes: [{name: d, configMap: {name: c}}]\n", ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0].configMap",
               "no ConfigMaps");
    expect_bad(MASTER("          volumes: [{name: d, secret: {secretName: c}}]\n", ""),
               "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0].secret", "no Secrets");
    expect_bad(MASTER("", "            envFrom: [{configMapRef: {name: c}}]\n"), CTP ".envFrom",
               "{name, value}");
}

/* securityContext (issue 41): the container's settings over the pod's,
 * field by field, as Kubernetes merges them; carried in the job's JSON */
static void test_security_context_decode(void)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode(MASTER("          securityContext:\n"
                                  "            runAsUser: 1000\n"
                                  "            runAsGroup: 3000\n"
                                  "            runAsNonRoot: true\n"
                                  "            seccompProfile: {type: RuntimeDefault}\n"
                                  "            supplementalGroups: []\n",
                                  "            securityContext:\n"
                                  "              runAsUser: 2000\n"
                                  "              runAsNonRoot: false\n"
                                  "              allowPrivilegeEscalation: false\n"
                                  "              privileged: false\n"
                                  "              readOnlyRootFilesystem: true\n"
                                  "              capabilities: {drop: [ALL, NET_RAW], add: []}\n"),
                           &d, NULL);
    kiln_diag_print(&d, stderr);
    CHECK(d.n == 0);
    if (job) {
        const kiln_replica_config *rc = &job->training_input.master_config;
        const kiln_security_context *sc = &rc->security_context;
        CHECK(rc->has_security_context);
        CHECK(sc->has_run_as_user && sc->run_as_user == 2000);   /* the container's wins */
        CHECK(sc->has_run_as_group && sc->run_as_group == 3000); /* the pod's, not overridden */
        CHECK(!sc->run_as_non_root);                             /* the container's false */
        CHECK(sc->no_new_privileges);
        CHECK(sc->read_only_root_filesystem);
        CHECK(sc->cap_drop.n == 2);
        if (sc->cap_drop.n == 2) {
            CHECK_STR(sc->cap_drop.v[0], "ALL");
            CHECK_STR(sc->cap_drop.v[1], "NET_RAW");
        }
        CHECK_STR(sc->seccomp_profile, "RuntimeDefault"); /* the pod's */
        /* the job's JSON (the store's) keeps them all */
        char *json = kiln_job_to_json(job, 0);
        kiln_job *back = NULL;
        kiln_diag d2 = KILN_DIAG_INIT;
        CHECK(json && strstr(json, "\"noNewPrivileges\""));
        CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d2) == KILN_OK);
        CHECK(back && kiln_job_equal(job, back));
        if (back) CHECK(back->training_input.master_config.security_context.run_as_user == 2000);
        kiln_job_free(back);
        kiln_diag_free(&d2);
        free(json);
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
    /* allowPrivilegeEscalation: true asks for nothing kiln blocks */
    job = decode(MASTER("", "            securityContext: {allowPrivilegeEscalation: true}\n"), &d,
                 NULL);
    CHECK(d.n == 0 && job && !job->training_input.master_config.security_context.no_new_privileges);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

#define PSC "spec.pytorchReplicaSpecs.Master.template.spec.securityContext"
static void test_security_context_refused(void)
{
    expect_bad(MASTER("", "            securityContext: {privileged: true}\n"),
               CTP ".securityContext.privileged", "never runs a privileged container");
    expect_bad(MASTER("", "            securityContext: {capabilities: {add: [NET_ADMIN]}}\n"),
               CTP ".securityContext.capabilities.add", "adds no capabilities");
    expect_bad(MASTER("", "            securityContext: {seccompProfile: {type: Unconfined}}\n"),
               CTP ".securityContext.seccompProfile.type", "'Unconfined' is refused");
    expect_bad(MASTER("          securityContext: {seccompProfile: {type: Localhost, "
                      "localhostProfile: p.json}}\n",
                      ""),
               PSC ".seccompProfile.type", "'Localhost' is refused");
    expect_bad(MASTER("          securityContext: {fsGroup: 2000}\n", ""), PSC ".fsGroup",
               "group ownership");
    expect_bad(MASTER("          securityContext: {supplementalGroups: [4000]}\n", ""),
               PSC ".supplementalGroups", "project user's group only");
    expect_bad(MASTER("", "            securityContext: {runAsNonRoot: true, runAsUser: 0}\n"),
               CTP ".securityContext.runAsUser", "contradicts runAsNonRoot");
    expect_bad(MASTER("", "            securityContext: {runAsUser: -1}\n"),
               CTP ".securityContext.runAsUser", "whole number from 0");
    expect_bad(MASTER("", "            securityContext: {readOnlyRootFilesystem: maybe}\n"),
               CTP ".securityContext.readOnlyRootFilesystem", "true or false");
    /* what kiln has no way to act on, each named with why */
    expect_bad(MASTER("          securityContext: {seLinuxOptions: {level: 's0:c1'}}\n", ""),
               PSC ".seLinuxOptions", "no SELinux labels");
    expect_bad(MASTER("          securityContext: {sysctls: [{name: a, value: b}]}\n", ""),
               PSC ".sysctls", "sets no sysctls");
    expect_bad(MASTER("", "            securityContext: {appArmorProfile: {type: Unconfined}}\n"),
               CTP ".securityContext.appArmorProfile", "AppArmor");
    expect_bad(MASTER("", "            securityContext: {procMount: Unmasked}\n"),
               CTP ".securityContext.procMount", "/proc");
    expect_bad(MASTER("", "            securityContext: {windowsOptions: {}}\n"),
               CTP ".securityContext.windowsOptions", "Linux replicas only");
    /* a pod-only key in a container, a container-only key in the pod */
    expect_bad(MASTER("", "            securityContext: {fsGroup: 1}\n"),
               CTP ".securityContext.fsGroup", "kiln reads runAsUser");
    expect_bad(MASTER("          securityContext: {privileged: false}\n", ""), PSC ".privileged",
               "kiln reads runAsUser");
}

/* Decodes a Job (JSON) whose masterConfig has `members`. */
static kiln_job *job_json(const char *members)
{
    char buf[1024];
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    snprintf(buf, sizeof buf,
             "{\"jobId\":\"j\",\"trainingInput\":{\"scaleTier\":\"BASIC\",\"region\":"
             "\"us-central1\",\"masterConfig\":{\"containerCommand\":[\"true\"]%s}}}",
             members);
    CHECK(kiln_job_from_json(buf, strlen(buf), &job, &d) == KILN_OK);
    kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

/* One refusal at `field` containing `needle` (field NULL: none) of `err`, `d`. */
static void expect_one(kiln_err err, kiln_diag *d, const char *field, const char *needle)
{
    if (field == NULL)
        CHECK_MSG(err == KILN_OK && d->n == 0, "refused");
    else
        CHECK_MSG(err == KILN_EINVAL && d->n == 1 && strcmp(d->v[0].field, field) == 0 &&
                      strstr(d->v[0].description, needle),
                  "wanted a refusal at %s with '%s'", field, needle);
    if (d->n && (field == NULL || d->n != 1)) kiln_diag_print(d, stderr);
    kiln_diag_free(d);
}

#define MSC "trainingInput.masterConfig.securityContext"
/* what a process cannot carry out (check_honoured), and who the replicas
 * run as (check_run_as, at create) */
static void test_security_context_checks(const kiln_catalog *c)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = job_json(",\"securityContext\":{\"readOnlyRootFilesystem\":true}");
    expect_one(job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL, &d,
               MSC ".readOnlyRootFilesystem", "no root filesystem of its own");
    kiln_job_free(job);
    job = job_json(",\"securityContext\":{\"seccompProfile\":\"RuntimeDefault\"}");
    expect_one(job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL, &d,
               MSC ".seccompProfile", "without a seccomp filter");
    kiln_job_free(job);
    /* the same on a container: acted on */
    job = job_json(",\"imageUri\":\"reg/t:1\",\"securityContext\":{\"readOnlyRootFilesystem\":"
                   "true,\"seccompProfile\":\"RuntimeDefault\",\"capDrop\":[\"ALL\"]}");
    expect_one(job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL, &d, NULL, NULL);
    kiln_job_free(job);
    job = job_json(",\"imageUri\":\"reg/t:1\",\"securityContext\":{\"capDrop\":[\"NET_RAWW\"]}");
    expect_one(job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL, &d, MSC ".capDrop[0]",
               "not a Linux capability");
    kiln_job_free(job);

    /* runAsUser: true of the project's user, or refused naming it */
    const char *who = "user alice (uid 1000, gid 1001)";
    job = job_json(",\"securityContext\":{\"runAsUser\":\"1000\",\"runAsGroup\":\"1001\","
                   "\"runAsNonRoot\":true,\"capDrop\":[\"ALL\"]}");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 1000, 1001, true, who, &d) : KILN_EINVAL, &d,
               NULL, NULL);
    expect_one(job ? kiln_catalog_check_run_as(c, job, 1002, 1001, true, who, &d) : KILN_EINVAL, &d,
               MSC ".runAsUser", "kiln runs this project's replicas as user alice");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 1000, 50, true, who, &d) : KILN_EINVAL, &d,
               MSC ".runAsGroup", "cannot choose another group");
    kiln_job_free(job);
    /* root: runAsNonRoot refused, and a process of root drops nothing */
    job = job_json(",\"securityContext\":{\"runAsNonRoot\":true}");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 0, 0, true, "user root", &d) : KILN_EINVAL,
               &d, MSC ".runAsNonRoot", "which is root");
    kiln_job_free(job);
    job = job_json(",\"securityContext\":{\"capDrop\":[\"ALL\"]}");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 0, 0, true, "user root", &d) : KILN_EINVAL,
               &d, MSC ".capDrop", "drops none from a process");
    kiln_job_free(job);
    /* a container podman is given no --user runs as its image's user */
    job = job_json(",\"imageUri\":\"reg/t:1\",\"securityContext\":{\"runAsUser\":\"0\"}");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 0, 0, false, "user root", &d) : KILN_EINVAL,
               &d, MSC ".runAsUser", "image's user");
    expect_one(job ? kiln_catalog_check_run_as(c, job, 0, 0, true, "user root", &d) : KILN_EINVAL,
               &d, NULL, NULL);
    kiln_job_free(job);
}

int main(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_catalog_default(&c, &d) == KILN_OK);
    if (!c) return 1;
    test_requests_and_limits(c);
    test_working_dir(c);
    test_generate_name();
    test_scheduler_restart_timestamp();
    test_empty_dir(c);
    test_claims(c);
    test_volumes_still_refused();
    test_security_context_decode();
    test_security_context_refused();
    test_security_context_checks(c);
    kiln_catalog_free(c);
    kiln_diag_free(&d);
    TEST_DONE();
}
