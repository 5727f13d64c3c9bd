/* src/spec/kubeflow.c - the parts of a Kubeflow training job (kubeflow.org/v1)
 * that TFJob and PyTorchJob share, and the entry point that reads a file by
 * its kind (see kubeflow.h).
 *
 * The shared mapping (docs/cli.md has the user-facing version):
 *   metadata.name                      -> jobId, with '-' and '.' turned into '_'
 *   metadata.labels                    -> labels, verbatim (Kubernetes keys included)
 *   metadata.annotations[kiln.dev/region]  -> trainingInput.region (else unset: the
 *                                         CLI uses the catalog's default region)
 *   metadata.annotations[kiln.dev/job-dir] -> trainingInput.jobDir
 *   the program's container (by name, see pick_container): image, command, args,
 *   env, resources.limits (nvidia.com/gpu, cpu, memory), volumeMounts of hostPath
 *   volumes, nodeSelector, tolerations, securityContext (the container's over
 *   the pod's) -> the role's ReplicaConfig
 *   restartPolicy                       -> the role's restartPolicy
 *   spec.runPolicy (or the older fields directly under spec) -> runPolicy
 * Machine types come from the pod template annotation kiln.dev/machine-type,
 * else kiln__default_machine_type().
 *
 * Only shape is checked here (with field paths into the Kubeflow file);
 * catalog rules (machine types, GPU counts, regions) are kiln/catalog.h's
 * business. Every key kiln reads is in kiln__kf_key_tables (below); any other
 * key is refused at its path, so nothing in the file is silently ignored
 * (docs/job-model.md has a row for each, checked by test_field_docs). */
#include "spec/kubeflow.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "spec/flags.h"
#include "spec/tree.h"

#define KF_GPU_RESOURCE  "nvidia.com/gpu"
#define KF_MIG_PREFIX    "nvidia.com/mig-" /* MIG instances, the device plugin's mixed strategy */
#define ANN_REGION       "kiln.dev/region"
#define ANN_JOB_DIR      "kiln.dev/job-dir"
#define ANN_MACHINE_TYPE "kiln.dev/machine-type"
#define CTR_PATH_MAX     192

/* ---- the keys kiln reads, by where they sit ----
 * One list per object of a Kubeflow job; check_keys refuses any other key at
 * its path. `where` is the object's path as docs/job-model.md writes it
 * (<replica> is spec.tfReplicaSpecs.<type> or spec.pytorchReplicaSpecs.<type>). */
static const char *const top_keys[] = {"apiVersion", "kind", "metadata", "spec", NULL};
static const char *const meta_keys[] = {"name",        "generateName",      "namespace", "labels",
                                        "annotations", "creationTimestamp", NULL};
static const char *const replica_keys[] = {"replicas", "restartPolicy", "template", NULL};
static const char *const template_keys[] = {"metadata", "spec", NULL};
static const char *const template_meta_keys[] = {"annotations", "labels", "creationTimestamp",
                                                 NULL};
static const char *const pod_keys[] = {"containers",      "nodeSelector",  "affinity",
                                       "volumes",         "restartPolicy", "schedulerName",
                                       "securityContext", "tolerations",   NULL};
/* securityContext: the pod's (defaults for its containers) and the container's */
static const char *const pod_sc_keys[] = {"runAsUser", "runAsGroup",         "runAsNonRoot",
                                          "fsGroup",   "supplementalGroups", "seccompProfile",
                                          NULL};
static const char *const ctr_sc_keys[] = {"runAsUser",
                                          "runAsGroup",
                                          "runAsNonRoot",
                                          "allowPrivilegeEscalation",
                                          "privileged",
                                          "readOnlyRootFilesystem",
                                          "capabilities",
                                          "seccompProfile",
                                          NULL};
static const char *const caps_keys[] = {"drop", "add", NULL};
static const char *const seccomp_keys[] = {"type", "localhostProfile", NULL};
static const char *const toleration_keys[] = {"key",    "operator",          "value",
                                              "effect", "tolerationSeconds", NULL};
static const char *const affinity_keys[] = {"nodeAffinity", NULL};
static const char *const node_affinity_keys[] = {"requiredDuringSchedulingIgnoredDuringExecution",
                                                 NULL};
static const char *const node_selector_keys[] = {"nodeSelectorTerms", NULL};
static const char *const term_keys[] = {"matchExpressions", NULL};
static const char *const expr_keys[] = {"key", "operator", "values", NULL};
static const char *const container_keys[] = {
    "name",         "image",      "imagePullPolicy", "command",         "args", "env", "resources",
    "volumeMounts", "workingDir", "ports",           "securityContext", NULL};
/* an MPIJob Worker's sshd container (kiln__kf.sshd_probe_ok) */
static const char *const sshd_container_keys[] = {
    "name",       "image", "imagePullPolicy", "command",
    "args",       "env",   "resources",       "volumeMounts",
    "workingDir", "ports", "securityContext", "readinessProbe",
    NULL};
static const char *const port_keys[] = {"name", "containerPort", "protocol", NULL};
static const char *const env_keys[] = {"name", "value", NULL};
static const char *const resources_keys[] = {"limits", "requests", NULL};
static const char *const limits_keys[] = {KF_GPU_RESOURCE, "cpu", "memory", NULL};
static const char *const mount_keys[] = {"name", "mountPath", "readOnly", NULL};
static const char *const volume_keys[] = {"name", "hostPath", "emptyDir", "persistentVolumeClaim",
                                          NULL};
static const char *const pvc_keys[] = {"claimName", "readOnly", NULL};
static const char *const host_path_keys[] = {"path", NULL};
static const char *const empty_dir_keys[] = {"medium", "sizeLimit", NULL};
static const char *const run_policy_keys[] = {"backoffLimit",
                                              "activeDeadlineSeconds",
                                              "ttlSecondsAfterFinished",
                                              "cleanPodPolicy",
                                              "suspend",
                                              NULL};

#define CTR "<replica>.template.spec.containers[]"
#define NODE_REQ                                                                                   \
    "<replica>.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
const kiln__kf_keys kiln__kf_key_tables[] = {
    {"", top_keys},
    {"metadata", meta_keys},
    {"spec", kiln__tf_spec_keys},
    {"spec", kiln__pt_spec_keys},
    {"spec", kiln__jax_spec_keys},
    {"spec", kiln__paddle_spec_keys},
    {"spec", kiln__xgb_spec_keys},
    {"spec", kiln__mpi_v1_spec_keys},
    {"spec", kiln__mpi_v2_spec_keys},
    {"spec", kiln__trainjob_spec_keys},
    {"spec.runPolicy", run_policy_keys},
    {"spec.elasticPolicy", kiln__pt_elastic_keys},
    {"<replica>", replica_keys},
    {"<replica>.template", template_keys},
    {"<replica>.template.metadata", template_meta_keys},
    {"<replica>.template.spec", pod_keys},
    {CTR, container_keys},
    {CTR ".env[]", env_keys},
    {CTR ".ports[]", port_keys},
    {CTR ".resources", resources_keys},
    {CTR ".resources.limits", limits_keys},
    {CTR ".resources.requests", limits_keys},
    {CTR ".volumeMounts[]", mount_keys},
    {"<replica>.template.spec.affinity", affinity_keys},
    {"<replica>.template.spec.affinity.nodeAffinity", node_affinity_keys},
    {NODE_REQ, node_selector_keys},
    {NODE_REQ ".nodeSelectorTerms[]", term_keys},
    {NODE_REQ ".nodeSelectorTerms[].matchExpressions[]", expr_keys},
    {"<replica>.template.spec.tolerations[]", toleration_keys},
    {"<replica>.template.spec.volumes[]", volume_keys},
    {"<replica>.template.spec.volumes[].hostPath", host_path_keys},
    {"<replica>.template.spec.volumes[].emptyDir", empty_dir_keys},
    {"<replica>.template.spec.volumes[].persistentVolumeClaim", pvc_keys},
    {"<replica>.template.spec.securityContext", pod_sc_keys},
    {"<replica>.template.spec.securityContext.seccompProfile", seccomp_keys},
    {CTR ".securityContext", ctr_sc_keys},
    {CTR ".securityContext.capabilities", caps_keys},
    {CTR ".securityContext.seccompProfile", seccomp_keys},
    {NULL, NULL},
};
#undef CTR
#undef NODE_REQ

/* What to say about a key kiln refuses, where a reason helps more than the list. */
static const char *refusal_hint(const char *key)
{
    static const struct {
        const char *key, *why;
    } hints[] = {
        {"envFrom", "give each variable in env as {name, value}"},
        {"valueFrom", "give the value itself in value"},
        {"configMap", "kiln mounts hostPath, emptyDir and persistentVolumeClaim volumes: kiln has "
                      "no ConfigMaps (put the files in "
                      "a hostPath directory)"},
        {"secret", "kiln mounts hostPath, emptyDir and persistentVolumeClaim volumes: kiln has no "
                   "Secrets (put the files in a "
                   "hostPath directory readable by the project's user)"},
        {"subPath", "mount the hostPath directory you want"},
        /* securityContext: what kiln has no way to act on */
        {"seLinuxOptions", "kiln sets no SELinux labels (podman gives a container its default "
                           "label)"},
        {"seLinuxChangePolicy", "kiln sets no SELinux labels"},
        {"appArmorProfile", "kiln loads no AppArmor profiles (podman applies its default one "
                            "where AppArmor is on)"},
        {"procMount", "kiln mounts /proc as podman does (Default)"},
        {"windowsOptions", "kiln runs Linux replicas only"},
        {"sysctls", "kiln sets no sysctls: replicas share the node's network settings (host "
                    "networking)"},
        {"fsGroupChangePolicy", "kiln does not change volumes' ownership (fsGroup is refused)"},
        {"supplementalGroupsPolicy", "kiln gives a replica its project user's group only"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
        if (strcmp(key, hints[i].key) == 0) return hints[i].why;
    return NULL;
}

bool kiln__kf_runs_sshd(const json_t *ctr)
{
    const json_t *cmd = kiln__kf_get(ctr, "command");
    if (!json_is_array(cmd) || json_array_size(cmd) == 0) cmd = kiln__kf_get(ctr, "args");
    const char *prog = json_is_array(cmd) ? kiln__kf_scalar(json_array_get(cmd, 0)) : NULL;
    const char *base = prog && strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
    return base && strcmp(base, "sshd") == 0;
}

void kiln__kf_check_keys(kiln__kf *c, const json_t *obj, const char *path, const char *const *keys)
{
    const char *key;
    json_t *val;
    if (!json_is_object(obj)) return; /* the shape is the readers' to report */
    json_object_foreach((json_t *)obj, key, val)
    {
        size_t k = 0;
        while (keys[k] && strcmp(key, keys[k]) != 0)
            k++;
        if (keys[k]) continue;
        char p[KILN__KF_PATH], list[256] = "";
        size_t used = 0;
        for (k = 0; keys[k] && used < sizeof list; k++)
            used +=
                (size_t)snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", keys[k]);
        snprintf(p, sizeof p, "%s%s%.64s", path, *path ? "." : "", key);
        const char *hint = refusal_hint(key);
        kiln__kf_bad(c, p, "not supported by kiln%s%s; kiln reads %s here", hint ? ": " : "",
                     hint ? hint : "", list);
    }
}

/* Node-selector keys that name the GPU model, most specific first. */
static const char *const gpu_selector_keys[] = {"cloud.google.com/gke-accelerator",
                                                "kiln.dev/accelerator", "accelerator"};

void kiln__kf_bad(kiln__kf *c, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(c->d, field, fmt, ap);
    va_end(ap);
    c->bad++;
}

void kiln__kf_note(kiln__kf *c, const char *field, const char *fmt, ...)
{
    va_list ap;
    if (!c->notes) return;
    va_start(ap, fmt);
    kiln_diag_addv(c->notes, field, fmt, ap);
    va_end(ap);
}

/* Notes every annotation of `ann` (at `path`) but `kept`, which kiln reads. */
static void note_annotations(kiln__kf *c, const json_t *ann, const char *path,
                             const char *const *kept, const char *reads)
{
    const char *key;
    json_t *val;
    if (!json_is_object(ann)) return;
    json_object_foreach((json_t *)ann, key, val)
    {
        bool read = false;
        for (size_t i = 0; kept[i] && !read; i++)
            read = strcmp(key, kept[i]) == 0;
        if (!read)
            kiln__kf_note(c, path,
                          "'%.128s' is kept in the file only: kiln does not use it (it reads %s "
                          "here)",
                          key, reads);
        (void)val;
    }
}

void kiln__kf_nomem(kiln__kf *c, kiln_err e)
{
    if (e != KILN_OK && c->err == KILN_OK) c->err = e;
}

json_t *kiln__kf_get(const json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

const char *kiln__kf_scalar(const json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

bool kiln__kf_present(const json_t *v)
{
    return v != NULL && !json_is_null(v);
}

bool kiln__kf_get_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    const char *s = kiln__kf_scalar(v);
    return s != NULL && kiln__parse_i64(s, out);
}

bool kiln__kf_opt_count(kiln__kf *c, const json_t *obj, const char *key, const char *path,
                        bool *has, int64_t *out)
{
    const json_t *v = kiln__kf_get(obj, key);
    if (!kiln__kf_present(v)) return true;
    int64_t n;
    if (!kiln__kf_get_int(v, &n) || n < 0) {
        const char *s = kiln__kf_scalar(v);
        kiln__kf_bad(c, path, "%s must be a whole number, 0 or more", s ? s : "value");
        return false;
    }
    *has = true;
    *out = n;
    return true;
}

bool kiln__kf_opt_bool(kiln__kf *c, const json_t *obj, const char *key, const char *path, bool *out)
{
    const json_t *v = kiln__kf_get(obj, key);
    const char *s = kiln__kf_scalar(v);
    if (!kiln__kf_present(v)) return true;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return true;
    }
    if (kiln__parse_bool(s, out)) return true;
    kiln__kf_bad(c, path, "'%.32s' must be true or false", s ? s : "value");
    return false;
}

/* ---- metadata ---- */

/* creationTimestamp: the API server sets it and ignores what a file says;
 * `kubectl create --dry-run -o yaml` writes it as null. Null is accepted
 * silently; a value is kept in the file only (kiln records its createTime). */
static void check_creation_timestamp(kiln__kf *c, const json_t *meta, const char *path)
{
    const json_t *v = kiln__kf_get(meta, "creationTimestamp");
    if (!kiln__kf_present(v)) return;
    if (!kiln__kf_scalar(v)) {
        kiln__kf_bad(c, path, "must be null or a time (RFC 3339)");
        return;
    }
    kiln__kf_note(c, path,
                  "kept in the file only: the server sets it (kiln records the job's createTime)");
}

bool kiln__kf_generate_name(const char *prefix, char out[KILN__KF_NAME_MAX + 1])
{
    /* k8s.io/apiserver/pkg/storage/names: the prefix cut to 58 characters,
     * then 5 from utilrand's alphabet (no vowels, no 0/1/3: no words, no
     * look-alikes), so the name stays within 63 */
    static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    unsigned char rnd[KILN__KF_NAME_RANDOM];
    size_t n = strlen(prefix);
    if (n > KILN__KF_NAME_MAX - KILN__KF_NAME_RANDOM) n = KILN__KF_NAME_MAX - KILN__KF_NAME_RANDOM;
    if (getentropy(rnd, sizeof rnd) != 0) return false;
    memcpy(out, prefix, n);
    for (size_t i = 0; i < sizeof rnd; i++)
        out[n + i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
    out[n + sizeof rnd] = '\0';
    return true;
}

/* Kubernetes names allow lowercase letters, digits, '-' and '.'; jobIds allow
 * letters, digits and '_' and start with a letter. */
static void map_name(kiln__kf *c, const json_t *meta, kiln_job *job)
{
    char made[KILN__KF_NAME_MAX + 1];
    const char *name = kiln__kf_scalar(kiln__kf_get(meta, "name"));
    const char *prefix = kiln__kf_scalar(kiln__kf_get(meta, "generateName"));
    if ((name == NULL || *name == '\0') && prefix && *prefix) {
        /* as the API server does: generateName is used only without a name */
        if (!kiln__kf_generate_name(prefix, made)) {
            kiln__kf_nomem(c, KILN_EIO);
            return;
        }
        name = made;
        kiln__kf_note(c, "metadata.generateName",
                      "the %s is named '%s' (the prefix and 5 random characters, as the "
                      "Kubernetes API server names it)",
                      c->kind, made);
    }
    if (name == NULL || *name == '\0') {
        kiln__kf_bad(c, "metadata.name",
                     "required (or metadata.generateName): the %s's name becomes the kiln jobId",
                     c->kind);
        return;
    }
    char *id = strdup(name);
    if (id == NULL) {
        kiln__kf_nomem(c, KILN_ENOMEM);
        return;
    }
    for (char *p = id; *p; p++)
        if (*p == '-' || *p == '.') *p = '_';
    bool ok = (id[0] >= 'a' && id[0] <= 'z') || (id[0] >= 'A' && id[0] <= 'Z');
    for (const char *p = id; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '_';
    if (!ok)
        kiln__kf_bad(c, "metadata.name",
                     "'%s' cannot become a jobId: after '-' and '.' become '_', it must start "
                     "with a letter and hold only letters, digits and '_'",
                     name);
    else
        kiln__kf_nomem(c, kiln_set_str(&job->job_id, id));
    free(id);
}

static void map_string_map(kiln__kf *c, const json_t *obj, const char *path, kiln_map *out)
{
    if (!kiln__kf_present(obj)) return;
    if (!json_is_object(obj)) {
        kiln__kf_bad(c, path, "must be a map of strings");
        return;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val)
    {
        const char *s = json_is_null(val) ? "" : kiln__kf_scalar(val);
        if (s == NULL) {
            kiln__kf_bad(c, path, "the value of '%s' must be a string", key);
            continue;
        }
        kiln__kf_nomem(c, kiln_map_set(out, key, s));
    }
}

#define KF_TOLERATIONS_MAX 64

/* The pod's spec.tolerations, checked as Kubernetes checks them
 * (kiln_toleration_check), into rc: placement honours them against the
 * nodes' taints (kiln/sched.h). */
/* Kueue's topology-aware scheduling annotations on a pod template. */
#define ANN_TAS               "kueue.x-k8s.io/podset-"
#define ANN_TAS_REQUIRED      ANN_TAS "required-topology"
#define ANN_TAS_PREFERRED     ANN_TAS "preferred-topology"
#define ANN_TAS_UNCONSTRAINED ANN_TAS "unconstrained-topology"
#define ANN_TAS_GROUP         ANN_TAS "group-name"

/* The role's topology request from its pod template's annotations: acted on
 * where its ClusterQueue's flavor has a Topology (kiln/sched.h); slices are
 * refused by name. */
static void map_topology(kiln__kf *c, const json_t *ann, const char *rpath, kiln_replica_config *rc)
{
    char p[KILN__KF_PATH];
    const char *req = kiln__kf_scalar(kiln__kf_get(ann, ANN_TAS_REQUIRED));
    const char *pref = kiln__kf_scalar(kiln__kf_get(ann, ANN_TAS_PREFERRED));
    const char *unc = kiln__kf_scalar(kiln__kf_get(ann, ANN_TAS_UNCONSTRAINED));
    const char *grp = kiln__kf_scalar(kiln__kf_get(ann, ANN_TAS_GROUP));
    static const char *const slices[] = {ANN_TAS "slice-required-topology", ANN_TAS "slice-size",
                                         ANN_TAS "slice-required-topology-constraints", NULL};
    for (size_t i = 0; slices[i]; i++)
        if (kiln__kf_get(ann, slices[i])) {
            snprintf(p, sizeof p, "%s.template.metadata.annotations[%s]", rpath, slices[i]);
            kiln__kf_bad(c, p,
                         "kiln does not place slices of a podset yet: ask for the whole role in "
                         "one domain (" ANN_TAS_REQUIRED ") instead");
        }
    const char *names[3] = {ANN_TAS_REQUIRED, ANN_TAS_PREFERRED, ANN_TAS_UNCONSTRAINED};
    const char *vals[3] = {req, pref, unc};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const json_t *v = kiln__kf_get(ann, names[i]);
        snprintf(p, sizeof p, "%s.template.metadata.annotations[%s]", rpath, names[i]);
        if (v && (!vals[i] || !*vals[i])) {
            kiln__kf_bad(c, p, "must be %s", i == 2 ? "\"true\"" : "a Topology level's node label");
            return;
        }
        n += vals[i] != NULL;
    }
    if (unc && strcmp(unc, "true") != 0) {
        snprintf(p, sizeof p, "%s.template.metadata.annotations[%s]", rpath, ANN_TAS_UNCONSTRAINED);
        if (strcmp(unc, "false") != 0) kiln__kf_bad(c, p, "must be \"true\" or \"false\"");
        unc = NULL, n--;
    }
    if (n > 1) {
        snprintf(p, sizeof p, "%s.template.metadata.annotations", rpath);
        kiln__kf_bad(c, p,
                     "Kueue takes one of " ANN_TAS_REQUIRED ", " ANN_TAS_PREFERRED
                     " and " ANN_TAS_UNCONSTRAINED ": keep one");
        return;
    }
    if (grp && n == 0) {
        snprintf(p, sizeof p, "%s.template.metadata.annotations[%s]", rpath, ANN_TAS_GROUP);
        kiln__kf_bad(c, p, "a podset group needs a topology request (" ANN_TAS_REQUIRED ")");
        return;
    }
    if (n == 0) return;
    rc->has_topology = true;
    kiln_topology_request *t = &rc->topology;
    if ((req && !(t->required = strdup(req))) || (pref && !(t->preferred = strdup(pref))) ||
        (grp && !(t->group = strdup(grp))))
        kiln__kf_nomem(c, KILN_ENOMEM);
    t->unconstrained = unc != NULL;
}

static void map_tolerations(kiln__kf *c, const json_t *pod, const char *rpath,
                            kiln_replica_config *rc)
{
    char p[KILN__KF_PATH], why[256];
    const json_t *v = kiln__kf_get(pod, "tolerations");
    snprintf(p, sizeof p, "%s.template.spec.tolerations", rpath);
    if (!kiln__kf_present(v)) return;
    if (!json_is_array(v) || json_array_size(v) > KF_TOLERATIONS_MAX) {
        kiln__kf_bad(c, p,
                     "must be a list of at most %d tolerations {key, operator, value, effect, "
                     "tolerationSeconds}",
                     KF_TOLERATIONS_MAX);
        return;
    }
    size_t n = json_array_size(v);
    if (n == 0) return;
    kiln_toleration *out = calloc(n, sizeof *out);
    if (!out) {
        kiln__kf_nomem(c, KILN_ENOMEM);
        return;
    }
    rc->tolerations = out;
    size_t i;
    const json_t *e;
    json_array_foreach((json_t *)v, i, e)
    {
        snprintf(p, sizeof p, "%s.template.spec.tolerations[%zu]", rpath, i);
        if (!json_is_object(e)) {
            kiln__kf_bad(c, p, "must be a toleration {key, operator, value, effect}");
            continue;
        }
        kiln__kf_check_keys(c, e, p, toleration_keys);
        static const char *const str_keys[] = {"key", "operator", "value", "effect"};
        const char *f[4];
        bool ok = true;
        for (size_t k = 0; k < 4; k++) {
            const json_t *fv = kiln__kf_get(e, str_keys[k]);
            f[k] = kiln__kf_present(fv) ? kiln__kf_scalar(fv) : NULL;
            if (kiln__kf_present(fv) && !f[k]) {
                snprintf(p, sizeof p, "%s.template.spec.tolerations[%zu].%s", rpath, i,
                         str_keys[k]);
                kiln__kf_bad(c, p, "must be a string");
                ok = false;
            }
        }
        kiln_toleration t = {
            .key = (char *)f[0], .op = (char *)f[1], .value = (char *)f[2], .effect = (char *)f[3]};
        const json_t *secs = kiln__kf_get(e, "tolerationSeconds");
        if (kiln__kf_present(secs)) {
            t.has_toleration_seconds = true;
            if (!kiln__kf_get_int(secs, &t.toleration_seconds)) {
                snprintf(p, sizeof p, "%s.template.spec.tolerations[%zu].tolerationSeconds", rpath,
                         i);
                kiln__kf_bad(c, p, "must be a whole number of seconds");
                ok = false;
            }
        }
        if (!ok) continue;
        if (!kiln_toleration_check(&t, why, sizeof why)) {
            size_t cut = strcspn(why, ":");
            snprintf(p, sizeof p, "%s.template.spec.tolerations[%zu].%.*s", rpath, i, (int)cut,
                     why);
            kiln__kf_bad(c, p, "%s", why[cut] ? why + cut + 2 : why);
            continue;
        }
        kiln_toleration *o = &out[rc->n_tolerations++];
        kiln__kf_nomem(c, kiln_set_str(&o->key, t.key));
        kiln__kf_nomem(c, kiln_set_str(&o->op, t.op));
        kiln__kf_nomem(c, kiln_set_str(&o->value, t.value));
        kiln__kf_nomem(c, kiln_set_str(&o->effect, t.effect));
        o->has_toleration_seconds = t.has_toleration_seconds;
        o->toleration_seconds = t.toleration_seconds;
    }
}

/* Labels are kept verbatim, Kubernetes keys with a DNS prefix included
 * ("app.kubernetes.io/name"): the catalog checks them by Kubernetes' rule
 * (validate.c), and list filters find them as labels.app.kubernetes.io/name. */
static void map_labels(kiln__kf *c, const json_t *labels, kiln_map *out)
{
    map_string_map(c, labels, "metadata.labels", out);
}

void kiln__kf_metadata(kiln__kf *c, const json_t *root, kiln_job *job)
{
    const json_t *meta = kiln__kf_get(root, "metadata");
    if (!json_is_object(meta)) {
        kiln__kf_bad(c, "metadata", "required: a %s needs metadata.name", c->kind);
        return;
    }
    kiln__kf_check_keys(c, meta, "metadata", meta_keys);
    map_name(c, meta, job);
    map_labels(c, kiln__kf_get(meta, "labels"), &job->labels);
    const char *queue =
        kiln__kf_scalar(kiln__kf_get(kiln__kf_get(meta, "labels"), KILN__KF_QUEUE_LABEL));
    c->queue = queue && *queue ? queue : NULL;
    check_creation_timestamp(c, meta, "metadata.creationTimestamp");

    const char *ns = kiln__kf_scalar(kiln__kf_get(meta, "namespace"));
    if (ns && *ns)
        kiln__kf_note(c, "metadata.namespace",
                      "'%.64s' is not used: kiln has no namespaces (the job goes to the "
                      "project the request names, kiln --project)",
                      ns);
    const json_t *ann = kiln__kf_get(meta, "annotations");
    note_annotations(c, ann, "metadata.annotations",
                     (const char *const[]){ANN_REGION, ANN_JOB_DIR, NULL},
                     ANN_REGION " and " ANN_JOB_DIR);
    const char *region = kiln__kf_scalar(kiln__kf_get(ann, ANN_REGION));
    const char *job_dir = kiln__kf_scalar(kiln__kf_get(ann, ANN_JOB_DIR));
    /* no annotation: region stays unset, and the CLI fills in the catalog's
     * default region (kiln_catalog_default_region) - a Kubeflow job has no region */
    if (region) kiln__kf_nomem(c, kiln_set_str(&job->training_input.region, region));
    if (job_dir) kiln__kf_nomem(c, kiln_set_str(&job->training_input.job_dir, job_dir));
}

/* ---- one replica spec ---- */

static void map_strv(kiln__kf *c, const json_t *arr, const char *path, kiln_strv *out)
{
    if (!kiln__kf_present(arr)) return;
    if (!json_is_array(arr)) {
        kiln__kf_bad(c, path, "must be a list of strings");
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = kiln__kf_scalar(v);
        if (s == NULL) {
            char p[KILN__KF_PATH];
            snprintf(p, sizeof p, "%s[%zu]", path, i);
            kiln__kf_bad(c, p, "must be a string");
            continue;
        }
        kiln__kf_nomem(c, kiln_strv_push(out, s));
    }
}

/* The container that runs the program: the one named c->container; else the
 * first (TFJob), or an error (PyTorchJob: the operator requires the name). */
static const json_t *pick_container(kiln__kf *c, const json_t *containers, const char *path,
                                    size_t *index)
{
    if (!json_is_array(containers) || json_array_size(containers) == 0) {
        kiln__kf_bad(c, path, "required: a list with the '%s' container", c->container);
        return NULL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(containers, i, v)
    {
        const char *name = kiln__kf_scalar(kiln__kf_get(v, "name"));
        if (name && strcmp(name, c->container) == 0) {
            *index = i;
            return v;
        }
    }
    if (c->container_required) {
        kiln__kf_bad(c, path,
                     "a %s needs a container named '%s' in every replica type: it is the one "
                     "that runs the program",
                     c->kind, c->container);
        return NULL;
    }
    *index = 0;
    return json_array_get(containers, 0);
}

/* GPUs: resources.limits["nvidia.com/gpu"] (Kubernetes wants GPUs in limits).
 * As under the NVIDIA device plugin it means any N GPUs of one model on a
 * node: the model from a GPU-model key of the node selector (nodeSelector or
 * required node affinity, rc->node_selector by now) when there is one
 * ("nvidia-h100-80gb" -> NVIDIA_H100_80GB), else no type, which kiln's
 * scheduler reads as any model (KILN_ACCEL_ANY_GPU). nvidia.com/gpu.product
 * stays a node label the scheduler matches (NVIDIA-H100-80GB-HBM3). */
static void map_gpus(kiln__kf *c, const json_t *ctr, const kiln_map *selector, const char *cpath,
                     kiln_replica_config *rc)
{
    const json_t *lim = kiln__kf_get(kiln__kf_get(ctr, "resources"), "limits");
    const json_t *gpu = kiln__kf_get(lim, KF_GPU_RESOURCE);
    char p[KILN__KF_PATH];
    /* a MIG instance by the device plugin's mixed-strategy name
     * (nvidia.com/mig-1g.10gb: 1): that type, as kiln lists MIG devices */
    const char *key;
    json_t *val;
    int migs = 0;
    json_object_foreach((json_t *)lim, key, val)
    {
        if (strncmp(key, KF_MIG_PREFIX, sizeof KF_MIG_PREFIX - 1) != 0) continue;
        snprintf(p, sizeof p, "%.150s.resources.limits[\"%.40s\"]", cpath, key);
        int64_t n;
        if (++migs > 1 || kiln__kf_present(gpu)) {
            kiln__kf_bad(c, p,
                         "a container asks for one kind of GPU: one nvidia.com/mig-* resource, "
                         "or nvidia.com/gpu");
            continue;
        }
        if (!kiln__kf_get_int(val, &n) || n <= 0) {
            kiln__kf_bad(c, p, "must be a whole number of MIG instances, at least 1");
            continue;
        }
        rc->has_accelerator_config = true;
        rc->accelerator_config.count = n;
        kiln__kf_nomem(c, kiln_set_str(&rc->accelerator_config.type, key));
    }
    if (migs || !kiln__kf_present(gpu)) return;
    snprintf(p, sizeof p, "%s.resources.limits[\"" KF_GPU_RESOURCE "\"]", cpath);
    int64_t n;
    if (!kiln__kf_get_int(gpu, &n) || n < 0) {
        const char *s = kiln__kf_scalar(gpu);
        kiln__kf_bad(c, p, "%s is not a whole number of GPUs", s ? s : "value");
        return;
    }
    if (n == 0) return;
    const char *model = NULL;
    for (size_t i = 0; model == NULL && i < sizeof gpu_selector_keys / sizeof *gpu_selector_keys;
         i++)
        model = kiln_map_get(selector, gpu_selector_keys[i]);
    rc->has_accelerator_config = true;
    rc->accelerator_config.count = n;
    if (model == NULL) return; /* any model */
    char *type = kiln__accelerator_enum(model);
    if (type == NULL) {
        kiln__kf_bad(c, p,
                     "the node selector names GPU model '%s', which is not an accelerator "
                     "name",
                     model);
        return;
    }
    free(rc->accelerator_config.type);
    rc->accelerator_config.type = type;
}

/* Required node affinity, in the one shape a node selector can say: one
 * nodeSelectorTerm whose matchExpressions are each `key In [value]` (how
 * GKE's and NVIDIA's docs pin a GPU model). They join the node selector;
 * any other shape is refused at its path rather than loosened. */
static void map_affinity(kiln__kf *c, const json_t *pod, const char *rpath, kiln_replica_config *rc)
{
    char p[KILN__KF_PATH];
    const json_t *aff = kiln__kf_get(pod, "affinity");
    if (!kiln__kf_present(aff)) return;
    snprintf(p, sizeof p, "%s.template.spec.affinity", rpath);
    kiln__kf_check_keys(c, aff, p, affinity_keys);
    const json_t *na = kiln__kf_get(aff, "nodeAffinity");
    snprintf(p, sizeof p, "%s.template.spec.affinity.nodeAffinity", rpath);
    kiln__kf_check_keys(c, na, p, node_affinity_keys);
    const json_t *req = kiln__kf_get(na, "requiredDuringSchedulingIgnoredDuringExecution");
    if (!kiln__kf_present(req)) return;
    snprintf(
        p, sizeof p,
        "%s.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        rpath);
    kiln__kf_check_keys(c, req, p, node_selector_keys);
    const json_t *terms = kiln__kf_get(req, "nodeSelectorTerms");
    snprintf(p, sizeof p, "%s.template.spec.affinity.nodeAffinity.required...nodeSelectorTerms",
             rpath);
    if (!json_is_array(terms) || json_array_size(terms) != 1) {
        kiln__kf_bad(c, p,
                     "kiln reads exactly one nodeSelectorTerm (terms are ORed; kiln's node "
                     "selector is one set of labels)");
        return;
    }
    const json_t *term = json_array_get(terms, 0);
    snprintf(p, sizeof p, "%s.template.spec.affinity.nodeAffinity.required...nodeSelectorTerms[0]",
             rpath);
    kiln__kf_check_keys(c, term, p, term_keys);
    const json_t *exprs = kiln__kf_get(term, "matchExpressions");
    size_t i;
    json_t *e;
    if (!json_is_array(exprs)) {
        kiln__kf_bad(c, p, "needs matchExpressions: a list of {key, operator: In, values}");
        return;
    }
    json_array_foreach((json_t *)exprs, i, e)
    {
        snprintf(p, sizeof p,
                 "%s.template.spec.affinity.nodeAffinity.required...matchExpressions[%zu]", rpath,
                 i);
        kiln__kf_check_keys(c, e, p, expr_keys);
        const char *key = kiln__kf_scalar(kiln__kf_get(e, "key"));
        const char *op = kiln__kf_scalar(kiln__kf_get(e, "operator"));
        const json_t *vals = kiln__kf_get(e, "values");
        const char *val = kiln__kf_scalar(json_array_get(vals, 0));
        if (!key || !*key || !op || strcmp(op, "In") != 0 || !json_is_array(vals) ||
            json_array_size(vals) != 1 || !val) {
            kiln__kf_bad(c, p,
                         "kiln reads `key In [one value]` here (a node label the node must "
                         "have); %s cannot be placed by kiln's node selector",
                         op && strcmp(op, "In") != 0 ? "this operator"
                                                     : "a choice among several values");
            continue;
        }
        const char *have = kiln_map_get(&rc->node_selector, key);
        if (have && strcmp(have, val) != 0) {
            kiln__kf_bad(c, p, "'%s' is '%s' in nodeSelector and '%s' here: no node has both", key,
                         have, val);
            continue;
        }
        kiln__kf_nomem(c, kiln_map_set(&rc->node_selector, key, val));
    }
}

static void map_restart_policy(kiln__kf *c, const json_t *spec, const char *rpath,
                               kiln_replica_config *rc)
{
    static const char *const ok[] = {"Always", "OnFailure", "Never", "ExitCode"};
    const json_t *v = kiln__kf_get(spec, "restartPolicy");
    if (!kiln__kf_present(v)) return; /* unset: left to the executor's default */
    const char *s = kiln__kf_scalar(v);
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.restartPolicy", rpath);
    for (size_t i = 0; s && i < sizeof ok / sizeof *ok; i++)
        if (strcmp(s, ok[i]) == 0) {
            kiln__kf_nomem(c, kiln_set_str(&rc->restart_policy, s));
            return;
        }
    kiln__kf_bad(c, p, "'%s' is not a restart policy; use Always, OnFailure, Never or ExitCode",
                 s ? s : "value");
}

void kiln__kf_find_specs(kiln__kf *c, const json_t *specs, const char *path, const char *kind,
                         const char *const *names, size_t n, const json_t **found)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)specs, key, val)
    {
        size_t t = 0;
        while (t < n && strcasecmp(key, names[t]) != 0)
            t++;
        char p[KILN__KF_PATH], list[128] = "";
        if (t == n) {
            /* "use A, B or C" from the names themselves */
            for (size_t k = 0; k < n; k++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s",
                         k == 0       ? ""
                         : k + 1 == n ? " or "
                                      : ", ",
                         names[k]);
            }
            kiln__kf_bad(c, path, "'%s' is not a %s replica type; use %s", key, kind, list);
            continue;
        }
        snprintf(p, sizeof p, "%s.%s", path, names[t]);
        if (found[t] != NULL)
            kiln__kf_bad(c, p, "given twice (names differ only in letter case)");
        else if (!json_is_object(val))
            kiln__kf_bad(c, p, "must be a replica spec (replicas, restartPolicy, template)");
        else
            found[t] = val;
    }
}

/* env: a list of {name, value} -> rc->env, in order. The names kiln sets
 * itself are refused by the catalog's check (kiln_catalog_check_honoured),
 * for Jobs and Kubeflow jobs alike. */
static void map_env(kiln__kf *c, const json_t *env, const char *cpath, kiln_replica_config *rc)
{
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.env", cpath);
    if (!kiln__kf_present(env)) return;
    if (!json_is_array(env)) {
        kiln__kf_bad(c, p, "must be a list of {name, value}");
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(env, i, e)
    {
        snprintf(p, sizeof p, "%s.env[%zu]", cpath, i);
        if (!json_is_object(e)) {
            kiln__kf_bad(c, p, "must be a map {name, value}");
            continue;
        }
        kiln__kf_check_keys(c, e, p, env_keys);
        const char *name = kiln__kf_scalar(kiln__kf_get(e, "name"));
        const json_t *v = kiln__kf_get(e, "value");
        const char *val = json_is_null(v) || v == NULL ? "" : kiln__kf_scalar(v);
        if (name == NULL || *name == '\0') {
            snprintf(p, sizeof p, "%s.env[%zu].name", cpath, i);
            kiln__kf_bad(c, p, "required: the variable's name");
        } else if (val == NULL) {
            snprintf(p, sizeof p, "%s.env[%zu].value", cpath, i);
            kiln__kf_bad(c, p, "must be a string (quote numbers and booleans)");
        } else {
            kiln__kf_nomem(c, kiln_map_set(&rc->env, name, val));
        }
    }
}

/* cpu and memory of one of resources.limits / resources.requests (`which`),
 * kept as the Kubernetes quantities; the catalog checks their form. */
static void map_quantities(kiln__kf *c, const json_t *obj, const char *cpath, const char *which,
                           char **cpu, char **memory)
{
    char p[KILN__KF_PATH];
    static const char *const names[2] = {"cpu", "memory"};
    char **slots[2] = {cpu, memory};
    for (int k = 0; k < 2; k++) {
        const json_t *v = kiln__kf_get(obj, names[k]);
        if (!kiln__kf_present(v)) continue;
        char num[32];
        const char *s = kiln__kf_scalar(v);
        if (s == NULL && json_is_integer(v)) {
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            s = num;
        } else if (s == NULL && json_is_real(v)) {
            snprintf(num, sizeof num, "%g", json_real_value(v));
            s = num;
        }
        snprintf(p, sizeof p, "%s.resources.%s.%s", cpath, which, names[k]);
        if (s == NULL || *s == '\0')
            kiln__kf_bad(c, p, "must be a quantity (cpu: 2 or 500m; memory: 4Gi)");
        else
            kiln__kf_nomem(c, kiln_set_str(slots[k], s));
    }
}

/* A GPU count as the file gives it ("2", 2), for comparing requests with limits. */
static bool gpu_count(const json_t *v, int64_t *n)
{
    return kiln__kf_present(v) && kiln__kf_get_int(v, n);
}

/* resources: limits (the cap: --cpus, --memory) and requests (what the
 * placement reserves; unset, the limit, as the API server defaults a pod's).
 * A request above its limit is refused by the catalog (honoured.c) for every
 * front end; GPUs cannot be overcommitted, so Kubernetes wants them in limits
 * and a GPU request, if given, equal to the limit: the same here. */
static void map_limits(kiln__kf *c, const json_t *ctr, const char *cpath, kiln_replica_config *rc)
{
    char p[KILN__KF_PATH];
    const json_t *res = kiln__kf_get(ctr, "resources");
    snprintf(p, sizeof p, "%s.resources", cpath);
    kiln__kf_check_keys(c, res, p, resources_keys);
    const json_t *lim = kiln__kf_get(res, "limits");
    const json_t *req = kiln__kf_get(res, "requests");
    snprintf(p, sizeof p, "%s.resources.limits", cpath);
    /* nvidia.com/mig-* keys are map_gpus' (a family, not one key) */
    json_t *rest = json_is_object(lim) ? json_copy((json_t *)lim) : NULL;
    const char *key;
    json_t *val;
    void *tmp;
    json_object_foreach_safe(rest, tmp, key, val)
    {
        if (strncmp(key, KF_MIG_PREFIX, sizeof KF_MIG_PREFIX - 1) == 0) json_object_del(rest, key);
    }
    kiln__kf_check_keys(c, rest ? rest : lim, p, limits_keys);
    json_decref(rest);
    snprintf(p, sizeof p, "%s.resources.requests", cpath);
    kiln__kf_check_keys(c, req, p, limits_keys);
    map_quantities(c, lim, cpath, "limits", &rc->cpu_limit, &rc->memory_limit);
    map_quantities(c, req, cpath, "requests", &rc->cpu_request, &rc->memory_request);
    const json_t *rg = kiln__kf_get(req, KF_GPU_RESOURCE);
    const json_t *lg = kiln__kf_get(lim, KF_GPU_RESOURCE);
    int64_t rn = 0, ln = 0;
    if (!kiln__kf_present(rg)) return;
    snprintf(p, sizeof p, "%s.resources.requests[\"" KF_GPU_RESOURCE "\"]", cpath);
    if (!gpu_count(rg, &rn) || rn < 0)
        kiln__kf_bad(c, p, "must be a whole number of GPUs");
    else if (!kiln__kf_present(lg))
        kiln__kf_bad(c, p,
                     "a limit must be set for non overcommitable resources (Kubernetes' rule): "
                     "give the GPUs in resources.limits");
    else if (gpu_count(lg, &ln) && ln != rn)
        kiln__kf_bad(c, p, "%lld must be equal to the " KF_GPU_RESOURCE " limit of %lld",
                     (long long)rn, (long long)ln);
}

/* workingDir: the directory the program starts in (podman -w for a
 * container; the node's directory for a process). */
static void map_working_dir(kiln__kf *c, const json_t *ctr, const char *cpath,
                            kiln_replica_config *rc)
{
    const json_t *v = kiln__kf_get(ctr, "workingDir");
    const char *s = kiln__kf_scalar(v);
    if (!kiln__kf_present(v) || (s && *s == '\0')) return; /* empty: the image's own, as k8s */
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.workingDir", cpath);
    if (s == NULL || s[0] != '/')
        kiln__kf_bad(c, p, "must be an absolute path in the container");
    else
        kiln__kf_nomem(c, kiln_set_str(&rc->working_dir, s));
}

/* An emptyDir volume's medium and sizeLimit -> `*spec` ("" for disk, else
 * ":Memory" or ":Memory:SIZE"), false after reporting. A disk emptyDir is a
 * podman volume of the container's own, which podman cannot cap: a
 * sizeLimit there is refused rather than ignored; HugePages is refused. */
static bool empty_dir_spec(kiln__kf *c, const json_t *ed, const char *vpath, char *spec, size_t len)
{
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.emptyDir", vpath);
    if (kiln__kf_present(ed) && !json_is_object(ed)) {
        kiln__kf_bad(c, p, "must be a map ({} or {medium, sizeLimit})");
        return false;
    }
    kiln__kf_check_keys(c, ed, p, empty_dir_keys);
    const char *medium = kiln__kf_scalar(kiln__kf_get(ed, "medium"));
    const json_t *sl = kiln__kf_get(ed, "sizeLimit");
    const char *size = kiln__kf_scalar(sl);
    bool mem = medium && strcmp(medium, "Memory") == 0;
    snprintf(p, sizeof p, "%s.emptyDir.medium", vpath);
    if (medium && *medium && !mem) {
        kiln__kf_bad(c, p,
                     "'%.32s' is not supported: kiln gives an emptyDir on disk (medium \"\") or "
                     "in memory (Memory, a tmpfs); HugePages is not",
                     medium);
        return false;
    }
    snprintf(p, sizeof p, "%s.emptyDir.sizeLimit", vpath);
    if (kiln__kf_present(sl) && (size == NULL || *size == '\0' || strchr(size, ':'))) {
        kiln__kf_bad(c, p, "must be a memory quantity (1Gi, 512Mi)");
        return false;
    }
    if (size && !mem) {
        kiln__kf_bad(c, p,
                     "not supported on disk: kiln's disk emptyDir is a container volume that "
                     "cannot be capped; use medium: Memory (a tmpfs of this size) or leave it out");
        return false;
    }
    snprintf(spec, len, "%s%s%s", mem ? ":Memory" : "", size ? ":" : "", size ? size : "");
    return true;
}

/* volumeMounts of the pod's volumes: hostPath -> rc->host_mounts
 * ("HOST:MOUNT[:ro]"), emptyDir -> rc->scratch_mounts ("MOUNT[:Memory[:SIZE]]",
 * the container's own, removed with it); any other volume source is refused. */
static void map_mounts(kiln__kf *c, const json_t *pod, const char *rpath, const json_t *ctr,
                       const char *cpath, kiln_replica_config *rc)
{
    char p[KILN__KF_PATH];
    const json_t *vols = kiln__kf_get(pod, "volumes");
    const json_t *mounts = kiln__kf_get(ctr, "volumeMounts");
    size_t i;
    json_t *v;
    snprintf(p, sizeof p, "%s.template.spec.volumes", rpath);
    if (kiln__kf_present(vols) && !json_is_array(vols)) kiln__kf_bad(c, p, "must be a list");
    if (json_is_array(vols)) json_array_foreach(vols, i, v)
        {
            char vp[CTR_PATH_MAX], ed[96];
            snprintf(vp, sizeof vp, "%s.template.spec.volumes[%zu]", rpath, i);
            kiln__kf_check_keys(c, v, vp, volume_keys);
            const json_t *hp = kiln__kf_get(v, "hostPath");
            const json_t *edv = kiln__kf_get(v, "emptyDir");
            const json_t *pvc = kiln__kf_get(v, "persistentVolumeClaim");
            if (json_object_get(v, "persistentVolumeClaim")) {
                snprintf(p, sizeof p, "%s.persistentVolumeClaim", vp);
                kiln__kf_check_keys(c, pvc, p, pvc_keys);
                const char *cn = kiln__kf_scalar(kiln__kf_get(pvc, "claimName"));
                bool ro = false;
                if (kiln__kf_present(hp) || json_object_get(v, "emptyDir"))
                    kiln__kf_bad(c, vp, "has two sources: give one");
                if (!cn || !*cn || strchr(cn, ':')) {
                    snprintf(p, sizeof p, "%s.persistentVolumeClaim.claimName", vp);
                    kiln__kf_bad(c, p, "required: the claim's name (without ':')");
                }
                snprintf(p, sizeof p, "%s.persistentVolumeClaim.readOnly", vp);
                kiln__kf_opt_bool(c, pvc, "readOnly", p, &ro);
                continue;
            }
            if (json_object_get(v, "emptyDir")) {
                if (kiln__kf_present(hp))
                    kiln__kf_bad(c, vp, "has two sources (hostPath and emptyDir): give one");
                empty_dir_spec(c, edv, vp, ed, sizeof ed);
                continue;
            }
            snprintf(p, sizeof p, "%s.hostPath", vp);
            kiln__kf_check_keys(c, hp, p, host_path_keys);
            const char *path = kiln__kf_scalar(kiln__kf_get(hp, "path"));
            /* another source (persistentVolumeClaim...) was refused just above */
            bool other = json_object_size(v) > (size_t)(1 + kiln__kf_present(hp));
            if (!other && (path == NULL || path[0] != '/' || strchr(path, ':')))
                kiln__kf_bad(c, p,
                             "required: kiln mounts hostPath volumes, each an absolute path on "
                             "the node without ':' (hostPath.path), and emptyDir volumes");
        }
    snprintf(p, sizeof p, "%s.volumeMounts", cpath);
    if (!kiln__kf_present(mounts)) return;
    if (!json_is_array(mounts)) {
        kiln__kf_bad(c, p, "must be a list of {name, mountPath, readOnly}");
        return;
    }
    json_array_foreach(mounts, i, v)
    {
        snprintf(p, sizeof p, "%s.volumeMounts[%zu]", cpath, i);
        kiln__kf_check_keys(c, v, p, mount_keys);
        const char *name = kiln__kf_scalar(kiln__kf_get(v, "name"));
        const char *at = kiln__kf_scalar(kiln__kf_get(v, "mountPath"));
        bool read_only = false;
        snprintf(p, sizeof p, "%s.volumeMounts[%zu].readOnly", cpath, i);
        kiln__kf_opt_bool(c, v, "readOnly", p, &read_only);
        const char *host = NULL;
        const json_t *edir = NULL;
        const char *claim = NULL;
        bool claim_ro = false;
        size_t k, vi = 0;
        json_t *vol;
        if (json_is_array(vols)) json_array_foreach(vols, k, vol)
            {
                const char *vn = kiln__kf_scalar(kiln__kf_get(vol, "name"));
                if (!name || !vn || strcmp(vn, name) != 0) continue;
                host = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(vol, "hostPath"), "path"));
                edir = json_object_get(vol, "emptyDir") ? vol : NULL;
                const json_t *pv = kiln__kf_get(vol, "persistentVolumeClaim");
                claim = kiln__kf_scalar(kiln__kf_get(pv, "claimName"));
                claim_ro = false;
                if (claim) {
                    kiln__kf qc = *c; /* its problems are the volume's, reported above */
                    kiln_diag quiet = KILN_DIAG_INIT;
                    qc.d = &quiet;
                    kiln__kf_opt_bool(&qc, pv, "readOnly", "", &claim_ro);
                    kiln_diag_free(&quiet);
                }
                vi = k;
            }
        /* the same emptyDir at two places would be two volumes here, one on Kubernetes */
        size_t before = 0;
        for (size_t m = 0; edir && m < i; m++) {
            const char *mn = kiln__kf_scalar(kiln__kf_get(json_array_get(mounts, m), "name"));
            if (mn && strcmp(mn, name) == 0) before++;
        }
        if (at == NULL || at[0] != '/' || strchr(at, ':')) {
            snprintf(p, sizeof p, "%s.volumeMounts[%zu].mountPath", cpath, i);
            kiln__kf_bad(c, p, "required: an absolute path in the container, without ':'");
        } else if (edir) {
            char vp[CTR_PATH_MAX], ed[96], *m = NULL;
            snprintf(vp, sizeof vp, "%s.template.spec.volumes[%zu]", rpath, vi);
            kiln_diag quiet = KILN_DIAG_INIT; /* the volume's problems are reported above */
            kiln__kf qc = *c;
            qc.d = &quiet;
            bool ok = empty_dir_spec(&qc, kiln__kf_get(edir, "emptyDir"), vp, ed, sizeof ed);
            kiln_diag_free(&quiet);
            snprintf(p, sizeof p, "%s.volumeMounts[%zu]", cpath, i);
            if (read_only)
                kiln__kf_bad(c, p, "readOnly on an emptyDir: it would stay empty; leave it out");
            else if (before)
                kiln__kf_bad(c, p,
                             "emptyDir '%s' is mounted twice: kiln gives each mount a volume "
                             "of its own, so mount it once",
                             name);
            else if (ok) {
                if (asprintf(&m, "%s%s", at, ed) < 0) m = NULL;
                kiln__kf_nomem(c, m ? kiln_strv_push(&rc->scratch_mounts, m) : KILN_ENOMEM);
                free(m);
            }
        } else if (claim && *claim && !strchr(claim, ':')) {
            /* the site's claim table resolves it at create (kiln/claims.h) */
            char *m = NULL;
            if (asprintf(&m, "%s:%s%s", claim, at, read_only || claim_ro ? ":ro" : "") < 0)
                m = NULL;
            kiln__kf_nomem(c, m ? kiln_strv_push(&rc->claim_mounts, m) : KILN_ENOMEM);
            free(m);
        } else if (claim) {
            /* a bad claimName is reported at the volume */
        } else if (host == NULL || host[0] != '/' || strchr(host, ':')) {
            snprintf(p, sizeof p, "%s.volumeMounts[%zu].name", cpath, i);
            kiln__kf_bad(c, p,
                         "'%s' names no hostPath, emptyDir or persistentVolumeClaim volume of "
                         "the pod (spec.volumes with hostPath.path, an absolute path without "
                         "':', emptyDir or persistentVolumeClaim.claimName)",
                         name ? name : "");
        } else {
            char *m = NULL;
            if (asprintf(&m, "%s:%s%s", host, at, read_only ? ":ro" : "") < 0) m = NULL;
            kiln__kf_nomem(c, m ? kiln_strv_push(&rc->host_mounts, m) : KILN_ENOMEM);
            free(m);
        }
    }
}

/* ports: only the operator's own port (tfjob-port, pytorchjob-port), the
 * one Kubeflow writes into TF_CONFIG. kiln hands every replica a port of its
 * own and writes that one into TF_CONFIG and MASTER_PORT, so a program that
 * listens where TF_CONFIG says runs unchanged; other ports would need a
 * Service kiln does not make, and are refused. */
static void check_ports(kiln__kf *c, const json_t *ctr, const char *cpath)
{
    char p[KILN__KF_PATH], own[32];
    const json_t *ports = kiln__kf_get(ctr, "ports");
    snprintf(p, sizeof p, "%s.ports", cpath);
    if (!kiln__kf_present(ports)) return;
    if (!json_is_array(ports)) {
        kiln__kf_bad(c, p, "must be a list of {name, containerPort}");
        return;
    }
    snprintf(own, sizeof own, "%s", c->port);
    size_t i;
    json_t *v;
    json_array_foreach(ports, i, v)
    {
        snprintf(p, sizeof p, "%s.ports[%zu]", cpath, i);
        kiln__kf_check_keys(c, v, p, port_keys);
        const char *name = kiln__kf_scalar(kiln__kf_get(v, "name"));
        if (name == NULL || strcmp(name, own) != 0) {
            kiln__kf_bad(c, p,
                         "only the %s's own port (name: %s) is accepted: kiln gives every "
                         "replica a port of its own and writes it in TF_CONFIG (and "
                         "MASTER_PORT); it opens no other",
                         c->kind, own);
            continue;
        }
        /* kiln's port is a TCP port: another protocol would not be what it opens */
        const json_t *proto = kiln__kf_get(v, "protocol");
        const char *ps = kiln__kf_scalar(proto);
        if (kiln__kf_present(proto) && !(ps && strcmp(ps, "TCP") == 0)) {
            snprintf(p, sizeof p, "%s.ports[%zu].protocol", cpath, i);
            kiln__kf_bad(c, p,
                         "'%.16s' is not supported: the %s's port is TCP (leave protocol out "
                         "or give TCP)",
                         ps ? ps : "value", c->kind);
        }
        int64_t port;
        const json_t *cp = kiln__kf_get(v, "containerPort");
        if (kiln__kf_present(cp) && (!kiln__kf_get_int(cp, &port) || port < 1 || port > 65535)) {
            snprintf(p, sizeof p, "%s.ports[%zu].containerPort", cpath, i);
            kiln__kf_bad(c, p, "must be a port number from 1 to 65535");
        }
    }
}

/* imagePullPolicy -> rc->image_pull_policy, Kubernetes' three values with
 * their meaning (the podman backend: src/exec/container/podman.c). */
static void map_pull_policy(kiln__kf *c, const json_t *ctr, const char *cpath,
                            kiln_replica_config *rc)
{
    const json_t *v = kiln__kf_get(ctr, "imagePullPolicy");
    const char *s = kiln__kf_scalar(v);
    if (!kiln__kf_present(v)) return;
    if (s &&
        (strcmp(s, "IfNotPresent") == 0 || strcmp(s, "Always") == 0 || strcmp(s, "Never") == 0)) {
        kiln__kf_nomem(c, kiln_set_str(&rc->image_pull_policy, s));
        return;
    }
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.imagePullPolicy", cpath);
    kiln__kf_bad(c, p, "'%s' is not a pull policy; use IfNotPresent, Always or Never",
                 s ? s : "value");
}

/* The pod template's own restartPolicy: the operator overwrites it with the
 * replica spec's (ExitCode becomes Never; TO pkg/controller.v1/common
 * setRestartPolicy), so kiln does the same: a valid value is accepted and
 * the replica's restartPolicy rules, as on Kubernetes. */
static void check_pod_restart_policy(kiln__kf *c, const json_t *pod, const char *rpath)
{
    static const char *const ok[] = {"Always", "OnFailure", "Never"};
    const json_t *v = kiln__kf_get(pod, "restartPolicy");
    if (!kiln__kf_present(v)) return;
    const char *s = kiln__kf_scalar(v);
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.template.spec.restartPolicy", rpath);
    for (size_t i = 0; s && i < sizeof ok / sizeof *ok; i++)
        if (strcmp(s, ok[i]) == 0) {
            kiln__kf_note(c, p,
                          "'%s' is replaced by %s.restartPolicy, as the training operator "
                          "replaces a pod template's restartPolicy with its replica spec's",
                          s, rpath);
            return;
        }
    kiln__kf_bad(c, p, "'%s' is not a pod restart policy; use Always, OnFailure or Never",
                 s ? s : "value");
}

/* schedulerName: kiln's scheduler places every replica, all of a job's at
 * once (a gang). The default scheduler's name, and the gang schedulers the
 * operator's docs name (Volcano, scheduler-plugins' coscheduling), ask for
 * what kiln already does; any other scheduler is refused, naming it. */
static void check_scheduler(kiln__kf *c, const json_t *pod, const char *rpath)
{
    static const char *const ok[] = {"default-scheduler", "volcano", "scheduler-plugins-scheduler"};
    const json_t *v = kiln__kf_get(pod, "schedulerName");
    const char *s = kiln__kf_scalar(v);
    if (!kiln__kf_present(v) || (s && *s == '\0')) return;
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.template.spec.schedulerName", rpath);
    for (size_t i = 0; s && i < sizeof ok / sizeof *ok; i++)
        if (strcmp(s, ok[i]) == 0) {
            kiln__kf_note(c, p,
                          "'%s': kiln's own scheduler places the job, all its replicas at once "
                          "(as a gang scheduler does)",
                          s);
            return;
        }
    kiln__kf_bad(c, p,
                 "'%.64s' is not a scheduler kiln stands in for: kiln's scheduler places every "
                 "job, all replicas at once; give default-scheduler, volcano or "
                 "scheduler-plugins-scheduler, or leave it out",
                 s ? s : "value");
}

/* ---- securityContext ----
 * The pod's securityContext gives its containers' defaults; the container's
 * own values win, field by field, as Kubernetes merges them. Each setting is
 * acted on (noNewPrivileges, readOnlyRootFilesystem, capDrop, seccompProfile
 * -> rc->security_context, carried out at start), checked at create where
 * only kilnd knows the answer (runAsUser, runAsGroup, runAsNonRoot: the
 * project's user, kiln_catalog_check_run_as), or refused here at its path,
 * saying why; none is accepted and dropped. */

/* One securityContext value as read: absent, or its value. */
typedef struct sc_val {
    bool set;
    int64_t n; /* runAsUser, runAsGroup */
    bool b;    /* runAsNonRoot */
    char path[KILN__KF_PATH];
} sc_val;

/* A user or group id (Kubernetes: 0 to 2147483647) at obj[key]. */
static void sc_id(kiln__kf *c, const json_t *obj, const char *key, const char *sc_path, sc_val *out)
{
    const json_t *v = kiln__kf_get(obj, key);
    char p[KILN__KF_PATH];
    if (!kiln__kf_present(v)) return;
    snprintf(p, sizeof p, "%.160s.%s", sc_path, key);
    int64_t n;
    if (!kiln__kf_get_int(v, &n) || n < 0 || n > INT32_MAX) {
        kiln__kf_bad(c, p, "must be a %s id, a whole number from 0 to 2147483647",
                     strcmp(key, "runAsUser") == 0 ? "user" : "group");
        return;
    }
    out->set = true;
    out->n = n;
    snprintf(out->path, sizeof out->path, "%s", p);
}

static void sc_bool(kiln__kf *c, const json_t *obj, const char *key, const char *sc_path,
                    sc_val *out)
{
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%.160s.%s", sc_path, key);
    bool b = false;
    if (!kiln__kf_present(kiln__kf_get(obj, key)) || !kiln__kf_opt_bool(c, obj, key, p, &b)) return;
    out->set = true;
    out->b = b;
    snprintf(out->path, sizeof out->path, "%s", p);
}

/* seccompProfile: RuntimeDefault (podman's default profile, container
 * replicas: honoured.c refuses it on a process) into *profile. */
static void sc_seccomp(kiln__kf *c, const json_t *sc, const char *sc_path, const char **profile)
{
    const json_t *sp = kiln__kf_get(sc, "seccompProfile");
    char p[KILN__KF_PATH];
    if (!kiln__kf_present(sp)) return;
    snprintf(p, sizeof p, "%.160s.seccompProfile", sc_path);
    if (!json_is_object(sp)) {
        kiln__kf_bad(c, p, "must be a map {type}");
        return;
    }
    kiln__kf_check_keys(c, sp, p, seccomp_keys);
    const char *type = kiln__kf_scalar(kiln__kf_get(sp, "type"));
    snprintf(p, sizeof p, "%.160s.seccompProfile.type", sc_path);
    if (type && strcmp(type, "RuntimeDefault") == 0)
        *profile = "RuntimeDefault";
    else if (type && strcmp(type, "Unconfined") == 0)
        kiln__kf_bad(c, p,
                     "'Unconfined' is refused: kiln runs every container under podman's default "
                     "seccomp profile (RuntimeDefault) and lifts it for none");
    else if (type && strcmp(type, "Localhost") == 0)
        kiln__kf_bad(c, p,
                     "'Localhost' is refused: kiln loads no seccomp profile of the node's; "
                     "RuntimeDefault (podman's default profile) is what it runs containers under");
    else
        kiln__kf_bad(c, p, "'%.32s' is not a seccomp profile type kiln runs; give RuntimeDefault",
                     type ? type : "value");
    snprintf(p, sizeof p, "%.160s.seccompProfile.localhostProfile", sc_path);
    if (kiln__kf_present(kiln__kf_get(sp, "localhostProfile")))
        kiln__kf_bad(c, p, "refused: it goes with type Localhost, which kiln does not load");
}

static void map_security_context(kiln__kf *c, const json_t *pod, const char *rpath,
                                 const json_t *ctr, const char *cpath, kiln_replica_config *rc)
{
    char pp[KILN__KF_PATH], cp[KILN__KF_PATH], p[KILN__KF_PATH];
    const json_t *psc = kiln__kf_get(pod, "securityContext");
    const json_t *csc = kiln__kf_get(ctr, "securityContext");
    kiln_security_context *out = &rc->security_context;
    snprintf(pp, sizeof pp, "%.160s.template.spec.securityContext", rpath);
    snprintf(cp, sizeof cp, "%.160s.securityContext", cpath);
    if (kiln__kf_present(psc) && !json_is_object(psc)) kiln__kf_bad(c, pp, "must be a map");
    if (kiln__kf_present(csc) && !json_is_object(csc)) kiln__kf_bad(c, cp, "must be a map");
    if (!json_is_object(psc) && !json_is_object(csc)) return;
    kiln__kf_check_keys(c, psc, pp, pod_sc_keys);
    kiln__kf_check_keys(c, csc, cp, ctr_sc_keys);

    /* runAsUser, runAsGroup, runAsNonRoot, seccompProfile: the pod's, then the container's */
    sc_val user = {0}, group = {0}, non_root = {0};
    const char *seccomp = NULL;
    const json_t *scs[2] = {psc, csc};
    const char *paths[2] = {pp, cp};
    for (int k = 0; k < 2; k++) {
        sc_id(c, scs[k], "runAsUser", paths[k], &user);
        sc_id(c, scs[k], "runAsGroup", paths[k], &group);
        sc_bool(c, scs[k], "runAsNonRoot", paths[k], &non_root);
        sc_seccomp(c, scs[k], paths[k], &seccomp);
    }
    /* the kubelet refuses to start such a container; so does kiln, at once */
    if (non_root.set && non_root.b && user.set && user.n == 0)
        kiln__kf_bad(c, user.path, "0 (root) contradicts runAsNonRoot: true at %s", non_root.path);
    out->has_run_as_user = user.set;
    out->run_as_user = user.n;
    out->has_run_as_group = group.set;
    out->run_as_group = group.n;
    out->run_as_non_root = non_root.set && non_root.b;

    /* fsGroup, supplementalGroups: groups a job would choose for itself */
    snprintf(p, sizeof p, "%.160s.fsGroup", pp);
    if (kiln__kf_present(kiln__kf_get(psc, "fsGroup")))
        kiln__kf_bad(c, p,
                     "refused: kiln does not change volumes' group ownership, and a replica "
                     "runs with its project user's group only (a group of the job's choosing "
                     "would open that group's files on the node)");
    const json_t *sg = kiln__kf_get(psc, "supplementalGroups");
    snprintf(p, sizeof p, "%.160s.supplementalGroups", pp);
    if (kiln__kf_present(sg) && !(json_is_array(sg) && json_array_size(sg) == 0))
        kiln__kf_bad(c, p,
                     "refused: a replica runs with its project user's group only (kilnd's "
                     "tokens file names it); groups of the job's choosing would open those "
                     "groups' files on the node");

    /* the container's own */
    sc_val ape = {0}, priv = {0}, ro = {0};
    sc_bool(c, csc, "allowPrivilegeEscalation", cp, &ape);
    sc_bool(c, csc, "privileged", cp, &priv);
    sc_bool(c, csc, "readOnlyRootFilesystem", cp, &ro);
    if (priv.set && priv.b)
        kiln__kf_bad(c, priv.path,
                     "true is refused: kiln never runs a privileged container (every device and "
                     "capability of the node)");
    out->no_new_privileges = ape.set && !ape.b;
    out->read_only_root_filesystem = ro.set && ro.b;
    const json_t *caps = kiln__kf_get(csc, "capabilities");
    snprintf(p, sizeof p, "%.160s.capabilities", cp);
    if (kiln__kf_present(caps) && !json_is_object(caps)) kiln__kf_bad(c, p, "must be a map {drop}");
    kiln__kf_check_keys(c, caps, p, caps_keys);
    const json_t *add = kiln__kf_get(caps, "add");
    snprintf(p, sizeof p, "%.160s.capabilities.add", cp);
    if (kiln__kf_present(add) && !(json_is_array(add) && json_array_size(add) == 0))
        kiln__kf_bad(c, p,
                     "refused: kiln adds no capabilities to a replica (it runs as its project's "
                     "unprivileged user, or in a container with podman's default set)");
    snprintf(p, sizeof p, "%.160s.capabilities.drop", cp);
    map_strv(c, kiln__kf_get(caps, "drop"), p, &out->cap_drop);
    if (seccomp) kiln__kf_nomem(c, kiln_set_str(&out->seccomp_profile, seccomp));
    rc->has_security_context = out->has_run_as_user || out->has_run_as_group ||
                               out->run_as_non_root || out->no_new_privileges ||
                               out->read_only_root_filesystem || out->cap_drop.n ||
                               out->seccomp_profile;
}

/* Fills `rc` and `*machine` from one replica spec (path `rpath`). */
static void map_replica_config(kiln__kf *c, const json_t *spec, const char *rpath,
                               kiln_replica_config *rc, const char **machine)
{
    char p[KILN__KF_PATH];
    const json_t *tmpl = kiln__kf_get(spec, "template");
    const json_t *pod = kiln__kf_get(tmpl, "spec");
    kiln__kf_check_keys(c, spec, rpath, replica_keys);
    snprintf(p, sizeof p, "%s.template", rpath);
    kiln__kf_check_keys(c, tmpl, p, template_keys);
    snprintf(p, sizeof p, "%s.template.metadata", rpath);
    kiln__kf_check_keys(c, kiln__kf_get(tmpl, "metadata"), p, template_meta_keys);
    snprintf(p, sizeof p, "%s.template.spec", rpath);
    kiln__kf_check_keys(c, pod, p, pod_keys);
    snprintf(p, sizeof p, "%s.template.spec.containers", rpath);
    size_t idx = 0;
    const json_t *ctr = pick_container(c, kiln__kf_get(pod, "containers"), p, &idx);

    map_restart_policy(c, spec, rpath, rc);
    check_pod_restart_policy(c, pod, rpath);
    check_scheduler(c, pod, rpath);
    snprintf(p, sizeof p, "%s.template.metadata.creationTimestamp", rpath);
    check_creation_timestamp(c, kiln__kf_get(tmpl, "metadata"), p);
    snprintf(p, sizeof p, "%s.template.spec.nodeSelector", rpath);
    const json_t *selector = kiln__kf_get(pod, "nodeSelector");
    map_string_map(c, selector, p, &rc->node_selector);
    map_affinity(c, pod, rpath, rc);
    map_tolerations(c, pod, rpath, rc);
    *machine = kiln__kf_scalar(kiln__kf_get(
        kiln__kf_get(kiln__kf_get(tmpl, "metadata"), "annotations"), ANN_MACHINE_TYPE));
    snprintf(p, sizeof p, "%s.template.metadata.annotations", rpath);
    const json_t *tann = kiln__kf_get(kiln__kf_get(tmpl, "metadata"), "annotations");
    map_topology(c, tann, rpath, rc);
    note_annotations(c, tann, p,
                     (const char *const[]){ANN_MACHINE_TYPE, ANN_TAS_REQUIRED, ANN_TAS_PREFERRED,
                                           ANN_TAS_UNCONSTRAINED, ANN_TAS_GROUP, NULL},
                     ANN_MACHINE_TYPE " and Kueue's " ANN_TAS "*-topology");
    const json_t *plabels = kiln__kf_get(kiln__kf_get(tmpl, "metadata"), "labels");
    if (json_is_object(plabels) && json_object_size(plabels)) {
        snprintf(p, sizeof p, "%s.template.metadata.labels", rpath);
        kiln__kf_note(c, p,
                      "kept in the file only: pod labels select pods for Kubernetes Services, "
                      "which kiln does not make (the job's labels are metadata.labels)");
    }
    if (ctr == NULL) return;
    /* a sidecar would not run: refused rather than dropped */
    for (size_t k = 0; k < json_array_size(kiln__kf_get(pod, "containers")); k++) {
        if (k == idx) continue;
        snprintf(p, sizeof p, "%s.template.spec.containers[%zu]", rpath, k);
        kiln__kf_bad(c, p, "kiln runs one container per replica (the one named '%s')",
                     c->container);
    }

    char cpath[CTR_PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s.template.spec.containers[%zu]", rpath, idx);
    if (!json_is_object(ctr)) {
        kiln__kf_bad(c, cpath, "must be a container");
        return;
    }
    bool sshd = c->sshd_probe_ok && kiln__kf_runs_sshd(ctr);
    kiln__kf_check_keys(c, ctr, cpath, sshd ? sshd_container_keys : container_keys);
    if (sshd && kiln__kf_present(kiln__kf_get(ctr, "readinessProbe"))) {
        snprintf(p, sizeof p, "%s.readinessProbe", cpath);
        kiln__kf_note(c, p,
                      "probes the Worker's sshd, which kiln does not run (kiln-mpi-agent takes "
                      "ssh's place): the Worker is ready once its container runs");
    }
    const char *image = kiln__kf_scalar(kiln__kf_get(ctr, "image"));
    snprintf(p, sizeof p, "%s.image", cpath);
    /* an MPIJob's container without an image runs its command as a process */
    if (image && *image)
        kiln__kf_nomem(c, kiln_set_str(&rc->image_uri, image));
    else if (!c->image_optional)
        kiln__kf_bad(c, p, "required: the container image to run");
    map_pull_policy(c, ctr, cpath, rc);
    check_ports(c, ctr, cpath);
    snprintf(p, sizeof p, "%s.command", cpath);
    map_strv(c, kiln__kf_get(ctr, "command"), p, &rc->container_command);
    snprintf(p, sizeof p, "%s.args", cpath);
    map_strv(c, kiln__kf_get(ctr, "args"), p, &rc->container_args);
    map_env(c, kiln__kf_get(ctr, "env"), cpath, rc);
    map_limits(c, ctr, cpath, rc);
    map_working_dir(c, ctr, cpath, rc);
    map_mounts(c, pod, rpath, ctr, cpath, rc);
    map_gpus(c, ctr, &rc->node_selector, cpath, rc);
    map_security_context(c, pod, rpath, ctr, cpath, rc);
}

int64_t kiln__kf_replicas(kiln__kf *c, const json_t *spec, const char *rpath, bool master)
{
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "%s.replicas", rpath);
    const json_t *v = kiln__kf_get(spec, "replicas");
    const char *s = kiln__kf_scalar(v);
    int64_t n = 1; /* the operators' default */
    if (kiln__kf_present(v) && (!kiln__kf_get_int(v, &n) || n < 0)) {
        kiln__kf_bad(c, p, "%s is not a whole number of replicas (0 or more)", s ? s : "value");
        return -1;
    }
    if (master && n != 1) {
        kiln__kf_bad(c, p, "%s: a %s has exactly one %s replica", s ? s : "value", c->kind,
                     strcmp(c->kind, "TFJob") == 0 ? "Chief or Master" : "Master");
        return -1;
    }
    return n;
}

void kiln__kf_fill_role(kiln__kf *c, const json_t *spec, const char *rpath, kiln_training_input *ti,
                        kiln_role role, int64_t count)
{
    kiln_role_fields s = kiln_job_role_fields(ti, role);
    const char *machine = NULL;
    map_replica_config(c, spec, rpath, s.config, &machine);
    *s.has_config = true;
    if (machine == NULL || *machine == '\0') {
        const kiln_accelerator_config *ac = &s.config->accelerator_config;
        machine = kiln__default_machine_type(s.config->has_accelerator_config ? ac->type : NULL,
                                             ac->count);
    }
    kiln__kf_nomem(c, kiln_set_str(s.type, machine));
    if (s.count) *s.count = count;
}

int64_t kiln__kf_promote_worker(kiln__kf *c, const json_t *worker, const char *rpath,
                                kiln_training_input *ti)
{
    int64_t n = kiln__kf_replicas(c, worker, rpath, false);
    if (n < 0) return -1;
    if (n == 0) {
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, "%s.replicas", rpath);
        kiln__kf_bad(c, p,
                     "0: without a Master, worker 0 takes the master's part, so at least 1 "
                     "replica is needed");
        return -1;
    }
    kiln__kf_fill_role(c, worker, rpath, ti, KILN_ROLE_MASTER, 1);
    ti->use_chief_in_tf_config = true;
    if (n == 1) return n;
    /* same spec again for the remaining workers; its problems are already reported */
    kiln_diag quiet = KILN_DIAG_INIT;
    kiln__kf qc = *c;
    qc.d = &quiet;
    qc.err = KILN_OK;
    kiln__kf_fill_role(&qc, worker, rpath, ti, KILN_ROLE_WORKER, n - 1);
    kiln__kf_nomem(c, qc.err);
    kiln_diag_free(&quiet);
    return n;
}

/* ---- runPolicy ---- */

/* spec.runPolicy, or for jobs written before runPolicy existed, the same
 * fields directly under spec (runPolicy wins where both are given). */
void kiln__kf_run_policy(kiln__kf *c, const json_t *spec, kiln_training_input *ti)
{
    static const char *const clean_ok[] = {"All", "Running", "None"};
    const json_t *rp = kiln__kf_get(spec, "runPolicy");
    if (kiln__kf_present(rp) && !json_is_object(rp)) {
        kiln__kf_bad(c, "spec.runPolicy", "must be a map (backoffLimit, activeDeadlineSeconds...)");
        return;
    }
    kiln__kf_check_keys(c, rp, "spec.runPolicy", run_policy_keys);
    kiln_run_policy *out = &ti->run_policy;
    const json_t *srcs[2] = {spec, rp}; /* later wins */
    const char *prefix[2] = {"spec.", "spec.runPolicy."};
    for (int i = 0; i < 2; i++) {
        const json_t *s = srcs[i];
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, "%sbackoffLimit", prefix[i]);
        kiln__kf_opt_count(c, s, "backoffLimit", p, &out->has_backoff_limit, &out->backoff_limit);
        snprintf(p, sizeof p, "%sactiveDeadlineSeconds", prefix[i]);
        kiln__kf_opt_count(c, s, "activeDeadlineSeconds", p, &out->has_active_deadline_seconds,
                           &out->active_deadline_seconds);
        snprintf(p, sizeof p, "%sttlSecondsAfterFinished", prefix[i]);
        kiln__kf_opt_count(c, s, "ttlSecondsAfterFinished", p, &out->has_ttl_seconds_after_finished,
                           &out->ttl_seconds_after_finished);
        const json_t *cp = kiln__kf_get(s, "cleanPodPolicy");
        if (!kiln__kf_present(cp)) continue;
        snprintf(p, sizeof p, "%scleanPodPolicy", prefix[i]);
        const char *v = kiln__kf_scalar(cp);
        size_t k = 0;
        while (v && k < 3 && strcmp(v, clean_ok[k]) != 0)
            k++;
        if (v == NULL || k == 3)
            kiln__kf_bad(c, p, "'%s' is not a clean-pod policy; use All, Running or None",
                         v ? v : "value");
        else
            kiln__kf_nomem(c, kiln_set_str(&out->clean_pod_policy, v));
    }
    if (out->has_active_deadline_seconds && out->active_deadline_seconds == 0)
        kiln__kf_bad(c,
                     kiln__kf_present(kiln__kf_get(rp, "activeDeadlineSeconds"))
                         ? "spec.runPolicy.activeDeadlineSeconds"
                         : "spec.activeDeadlineSeconds",
                     "must be at least 1 second");
    ti->has_run_policy = out->has_backoff_limit || out->has_active_deadline_seconds ||
                         out->has_ttl_seconds_after_finished || out->clean_pod_policy != NULL;
    bool suspend = false;
    if (kiln__kf_opt_bool(c, rp, "suspend", "spec.runPolicy.suspend", &suspend) && suspend)
        kiln__kf_suspend(c, "spec.runPolicy.suspend");
}

/* Under Kueue a job is created suspended and Kueue unsuspends it when it
 * admits it. kiln's queues stand in for Kueue: a job that names its
 * LocalQueue waits QUEUED until kiln admits it, and then starts, which is
 * that unsuspend. Without a queue nothing would ever unsuspend it (kiln has
 * no resume), so it is refused. */
void kiln__kf_suspend(kiln__kf *c, const char *path)
{
    if (c->queue)
        kiln__kf_note(c, path,
                      "true: the %s waits for its queue '%.64s' (label " KILN__KF_QUEUE_LABEL
                      "): kiln's queue admission stands in for Kueue's, and is its unsuspend "
                      "(kilnd --queues; without queues, kiln's scheduler admits it when it "
                      "fits)",
                      c->kind, c->queue);
    else
        kiln__kf_bad(c, path,
                     "suspended %ss are not supported without a queue: kiln has no resume, so "
                     "nothing would ever unsuspend it; leave suspend out to run it when "
                     "submitted, or give it the label " KILN__KF_QUEUE_LABEL
                     ": QUEUE, whose admission by kiln's queues is its unsuspend (as Kueue's)",
                     c->kind);
}

/* ---- the entry point: one document (or a TrainJob with its runtimes), read by its kind ---- */

/* The training-operator's other kinds: named in the refusal so that a user
 * sees kiln knows them and does not run them (yet). */
static const char *const other_kinds[] = {"MXJob", "PaddlePaddleJob"};

#define KINDS_READ                                                                                 \
    "TFJob, PyTorchJob, JAXJob, PaddleJob and XGBoostJob (apiVersion " KILN__KF_API_VERSION        \
    "), MPIJob (" KILN__KF_API_VERSION " or kubeflow.org/v2beta1) and TrainJob "                   \
    "(" KILN__KF_TRAINER_API ")"

static bool known_other(const char *kind)
{
    for (size_t i = 0; i < sizeof other_kinds / sizeof *other_kinds; i++)
        if (strcmp(kind, other_kinds[i]) == 0) return true;
    return false;
}

static bool kind_read(const char *kind)
{
    return kind &&
           (strcmp(kind, "TFJob") == 0 || strcmp(kind, "PyTorchJob") == 0 ||
            strcmp(kind, "MPIJob") == 0 || strcmp(kind, "TrainJob") == 0 || kiln__kfk_known(kind));
}

/* A file of several documents (a Service, a PVC and the job, say): kiln reads
 * one job per file (a TrainJob with its runtimes aside), and says which
 * documents it found and which it would read. */
static void several_documents(kiln_diag *d, const json_t *docs)
{
    char list[1024] = "";
    size_t used = 0, pick = 0, n_jobs = 0;
    for (size_t i = 0; i < json_array_size(docs); i++) {
        const json_t *doc = json_array_get(docs, i);
        const char *kind = kiln__kf_scalar(kiln__kf_get(doc, "kind"));
        const char *name = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(doc, "metadata"), "name"));
        if (kind_read(kind) && n_jobs++ == 0) pick = i + 1;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%zu: %.64s%s%.64s%s",
                                     i ? "; " : "", i + 1, kind ? kind : "(no kind)",
                                     name ? " '" : "", name ? name : "", name ? "'" : "");
    }
    const char *pk =
        pick ? kiln__kf_scalar(kiln__kf_get(json_array_get(docs, pick - 1), "kind")) : NULL;
    bool tj = pk && strcmp(pk, "TrainJob") == 0;
    if (pick)
        kiln_diag_add(d, "",
                      "the file holds %zu YAML documents (%s); kiln reads one job per file: it "
                      "would read document %zu, so put that one in a file of its own%s",
                      json_array_size(docs), list, pick,
                      tj ? " (a TrainJob's file may also hold ClusterTrainingRuntime and "
                           "TrainingRuntime documents, nothing else)"
                         : "");
    else
        kiln_diag_add(d, "",
                      "the file holds %zu YAML documents (%s) and none is a job kiln reads: "
                      "kiln reads " KINDS_READ ", one per file",
                      json_array_size(docs), list);
}

static bool is_runtime(const json_t *doc)
{
    const char *kind = kiln__kf_scalar(kiln__kf_get(doc, "kind"));
    return kind &&
           (strcmp(kind, "ClusterTrainingRuntime") == 0 || strcmp(kind, "TrainingRuntime") == 0);
}

/* A TrainJob shipped with its runtime, as Trainer's docs ship them (one file
 * that `kubectl apply -f` creates both from): every document a runtime but
 * exactly one TrainJob. Its index, or -1 for any other mix of documents. */
static long trainjob_with_runtimes(const json_t *docs)
{
    long job = -1;
    for (size_t i = 0; i < json_array_size(docs); i++) {
        const json_t *doc = json_array_get(docs, i);
        const char *kind = kiln__kf_scalar(kiln__kf_get(doc, "kind"));
        if (!json_is_object(doc)) return -1;
        if (is_runtime(doc)) continue;
        if (job >= 0 || !kind || strcmp(kind, "TrainJob") != 0) return -1;
        job = (long)i;
    }
    return job;
}

/* Checks apiVersion and kind; NULL (after reporting) when kiln does not read it. */
static const char *check_header(kiln__kf *c, const json_t *root)
{
    const char *api = kiln__kf_scalar(kiln__kf_get(root, "apiVersion"));
    const char *kind = kiln__kf_scalar(kiln__kf_get(root, "kind"));
    if (kind == NULL)
        kiln__kf_bad(c, "kind", "required: kiln reads kind " KINDS_READ);
    else if (known_other(kind))
        kiln__kf_bad(c, "kind",
                     "'%s' is a Kubeflow training job kiln does not run; kiln reads " KINDS_READ,
                     kind);
    else if (!kind_read(kind))
        kiln__kf_bad(c, "kind", "'%s' is not a training job kiln reads; kiln reads " KINDS_READ,
                     kind);
    if (api == NULL)
        kiln__kf_bad(c, "apiVersion",
                     "required: a Kubeflow job has apiVersion " KILN__KF_API_VERSION);
    else if (kind && strcmp(kind, "TrainJob") == 0) {
        if (strcmp(api, KILN__KF_TRAINER_API) != 0)
            kiln__kf_bad(c, "apiVersion",
                         "'%s' is not supported; kiln reads a TrainJob of " KILN__KF_TRAINER_API,
                         api);
    } else if (strcmp(api, KILN__KF_API_VERSION) != 0 &&
               !(kind && strcmp(kind, "MPIJob") == 0 && strcmp(api, "kubeflow.org/v2beta1") == 0))
        kiln__kf_bad(c, "apiVersion",
                     "'%s' is not supported; kiln reads apiVersion " KILN__KF_API_VERSION, api);
    return c->bad ? NULL : kind;
}

kiln_err kiln_job_from_kubeflow(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    return kiln_job_from_kubeflow_notes(buf, len, out, d, NULL);
}

kiln_err kiln_job_from_kubeflow_notes(const char *buf, size_t len, kiln_job **out, kiln_diag *d,
                                      kiln_diag *notes)
{
    return kiln_job_from_kubeflow_in(buf, len, out, d, notes, NULL);
}

kiln_err kiln_job_from_kubeflow_in(const char *buf, size_t len, kiln_job **out, kiln_diag *d,
                                   kiln_diag *notes, const char *runtimes_dir)
{
    kiln_err err = KILN_OK;
    json_t *docs = NULL;
    kiln_job *job = NULL;
    kiln__kf c = {.d = d, .notes = notes, .runtimes_dir = runtimes_dir};

    *out = NULL;
    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(d, "", "the file is %zu bytes; the limit is %u", len,
                      (unsigned)KILN_SPEC_MAX_BYTES);
        return KILN_ELIMIT;
    }
    docs = kiln__yaml_load_all(buf, len, d, &err);
    if (docs == NULL) goto out;
    size_t pick = 0;
    if (json_array_size(docs) > 1) {
        long job_at = trainjob_with_runtimes(docs);
        if (job_at < 0) {
            several_documents(d, docs);
            err = KILN_EINVAL;
            goto out;
        }
        pick = (size_t)job_at;
        c.file_docs = docs;
        c.file_job = pick;
    }
    const json_t *root = json_array_get(docs, pick);
    if (!json_is_object(root)) {
        kiln_diag_add(d, "", "a Kubeflow job must be a YAML or JSON map");
        err = KILN_EINVAL;
        goto out;
    }
    const char *kind = check_header(&c, root);
    if (kind == NULL) { /* not a job kiln reads: the rest would be noise */
        err = KILN_EINVAL;
        goto out;
    }
    job = kiln_job_new();
    if (job == NULL) {
        err = KILN_ENOMEM;
        goto out;
    }
    kiln__kf_check_keys(&c, root, "", top_keys);
    if (strcmp(kind, "PyTorchJob") == 0)
        err = kiln__pytorchjob_decode(&c, root, job);
    else if (strcmp(kind, "TFJob") == 0)
        err = kiln__tfjob_decode(&c, root, job);
    else if (strcmp(kind, "MPIJob") == 0)
        err = kiln__mpijob_decode(&c, root, job);
    else if (strcmp(kind, "TrainJob") == 0)
        err = kiln__trainjob_decode(&c, root, job);
    else
        err = kiln__kfk_decode(&c, root, job);
    if (err == KILN_OK) {
        *out = job;
        job = NULL;
    }
out:
    kiln_job_free(job);
    json_decref(docs);
    return err;
}

kiln_err kiln_job_from_tfjob(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    return kiln_job_from_kubeflow(buf, len, out, d);
}
