/* src/spec/trainjob.c - Kubeflow Trainer v2's TrainJob
 * (trainer.kubeflow.org/v1alpha1, Trainer v2.3) -> kiln_job, read against
 * the ClusterTrainingRuntime or TrainingRuntime its runtimeRef names.
 *
 * The runtime is a document of the TrainJob's own file (Trainer's examples
 * ship one so, for `kubectl apply -f`), else a file, <runtimes dir>/<name>.yaml
 * (data/runtimes holds the stock ones, a site edits or adds its own). What
 * Trainer does with the two is done here, in its order:
 *   - the runtime's replicated job labelled trainer.kubeflow.org/
 *     trainjob-ancestor-step: trainer (or named "node") is the trainer; its
 *     pod template is read as any Kubeflow replica's (kubeflow.c), with the
 *     TrainJob's trainer fields laid over its container `node`: image,
 *     command, args and resources replace the runtime's, env is upserted by
 *     name (TR plugins/torch/torch.go, runtime/core/trainingruntime.go);
 *   - numNodes: trainer.numNodes, else the runtime's mlPolicy.numNodes, else 1;
 *     node 0 is kiln's master, nodes 1.. its workers (ranks as Trainer's
 *     job-completion-index);
 *   - the torch policy's PET_* variables (src/exec/kfenv.c), with
 *     PET_NPROC_PER_NODE worked out here as Trainer does.
 * A runtime's podGroupPolicy (Volcano, coscheduling) asks for the gang kiln
 * always makes; a suspended TrainJob is accepted under a queue (Kueue's way:
 * kiln's admission is its unsuspend). What kiln does not do is refused, each
 * at its path: a suspended TrainJob without a queue (kiln has no resume),
 * initializers, pod overrides and runtime patches, another manager, policies
 * other than torch (mpi, jax, xgboost, flux), the gang schedulers' own
 * settings, and a runtime's other replicated jobs (and dependsOn). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/submit.h"
#include "spec/kubeflow.h"
#include "spec/tree.h"

#ifndef KILN_DEFAULT_RUNTIMES_DIR
#define KILN_DEFAULT_RUNTIMES_DIR "data/runtimes"
#endif
#ifndef KILN_INSTALLED_RUNTIMES_DIR
#define KILN_INSTALLED_RUNTIMES_DIR "/usr/share/kiln/runtimes"
#endif

#define ANCESTOR_LABEL "trainer.kubeflow.org/trainjob-ancestor-step"
/* paths here are a runtime's name (<= 86 characters) and a known suffix */
#define TJ_PATH         (2 * KILN__KF_PATH)
#define MANAGER_DEFAULT "trainer.kubeflow.org/trainjob-controller"

const char *const kiln__trainjob_spec_keys[] = {"runtimeRef",
                                                "trainer",
                                                "suspend",
                                                "managedBy",
                                                "activeDeadlineSeconds",
                                                "initializer",
                                                "runtimePatches",
                                                "podSpecOverrides",
                                                "podTemplateOverrides",
                                                NULL};
static const char *const ref_keys[] = {"name", "apiGroup", "kind", NULL};
static const char *const trainer_keys[] = {"image",    "command",          "args",           "env",
                                           "numNodes", "resourcesPerNode", "numProcPerNode", NULL};
static const char *const rt_top_keys[] = {"apiVersion", "kind", "metadata", "spec", NULL};
static const char *const rt_spec_keys[] = {"mlPolicy", "podGroupPolicy", "template", NULL};
static const char *const pod_group_keys[] = {"coscheduling", "volcano", NULL};
static const char *const policy_keys[] = {"numNodes", "torch", "mpi", "jax",
                                          "xgboost",  "flux",  NULL};
static const char *const rt_template_keys[] = {"metadata", "spec", NULL};
static const char *const jobset_keys[] = {"replicatedJobs", NULL};
static const char *const rjob_keys[] = {"name", "replicas", "template", "dependsOn", NULL};
static const char *const job_template_keys[] = {"metadata", "spec", NULL};
static const char *const job_spec_keys[] = {"template", NULL};
/* what torchrun reads, set by Trainer and so refused in trainer.env */
static const char *const pet_names[] = {"PET_NNODES",      "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                        "PET_MASTER_ADDR", "PET_MASTER_PORT",    NULL};

/* A runtime name is a Kubernetes object name: lowercase letters, digits,
 * '-' and '.', which also keeps the lookup inside the runtimes directory
 * (kiln takes up to 63 characters, a file name's part of a path). */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '.' || s[0] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return strstr(s, "..") == NULL;
}

/* Whether `rt`, read from `where` (a file's path, or "document N of the
 * file"), is the runtime asked for: `kind` and `name` of the Trainer API, and
 * for a TrainingRuntime of namespace `ns` when both say one; false after
 * reporting. */
static bool runtime_is(kiln__kf *c, const json_t *rt, const char *where, const char *name,
                       const char *kind, const char *ns)
{
    const char *rk = kiln__kf_scalar(kiln__kf_get(rt, "kind"));
    const char *ra = kiln__kf_scalar(kiln__kf_get(rt, "apiVersion"));
    const char *rn = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(rt, "metadata"), "name"));
    if (!rk || strcmp(rk, kind) != 0 || !ra || strcmp(ra, KILN__KF_TRAINER_API) != 0 || !rn ||
        strcmp(rn, name) != 0) {
        kiln__kf_bad(c, "spec.runtimeRef",
                     "%s holds %s %s '%s', not the %s '%s' (" KILN__KF_TRAINER_API ") asked for",
                     where, ra ? ra : "(no apiVersion)", rk ? rk : "(no kind)", rn ? rn : "", kind,
                     name);
        return false;
    }
    /* Trainer's rule: a namespaced TrainingRuntime is the TrainJob's namespace's */
    const char *rns = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(rt, "metadata"), "namespace"));
    if (strcmp(kind, "TrainingRuntime") == 0 && rns && ns && strcmp(rns, ns) != 0) {
        kiln__kf_bad(c, "spec.runtimeRef",
                     "the TrainingRuntime '%s' is of namespace '%.64s', the TrainJob of '%.64s': "
                     "a TrainJob uses a TrainingRuntime of its own namespace",
                     name, rns, ns);
        return false;
    }
    return true;
}

/* Reads <dir>/<name>.yaml (one document of `kind`, runtime_is); NULL after
 * reporting. With `say`, a note names the file it came from. */
static json_t *load_runtime(kiln__kf *c, const char *name, const char *kind, const char *ns,
                            bool say)
{
    const char *dir = c->runtimes_dir;
    if (dir == NULL || *dir == '\0') dir = getenv("KILN_RUNTIMES_DIR");
    /* the source tree's stock runtimes where kiln runs from its build, else
     * the installed ones (a package's: the source tree is not there) */
    if (dir == NULL || *dir == '\0')
        dir = access(KILN_DEFAULT_RUNTIMES_DIR, R_OK) == 0 ? KILN_DEFAULT_RUNTIMES_DIR
                                                           : KILN_INSTALLED_RUNTIMES_DIR;
    char *path = NULL, *buf = NULL;
    size_t len = 0;
    json_t *docs = NULL, *rt = NULL;
    kiln_diag rd = KILN_DIAG_INIT;
    if (asprintf(&path, "%s/%s.yaml", dir, name) < 0) {
        kiln__kf_nomem(c, KILN_ENOMEM);
        path = NULL;
        goto out;
    }
    kiln_err err = kiln_read_input(path, "spec.runtimeRef.name", &buf, &len, &rd);
    if (err == KILN_ENOMEM) kiln__kf_nomem(c, err);
    if (err != KILN_OK) {
        kiln__kf_bad(c, "spec.runtimeRef.name",
                     "no %s '%s' in the runtimes directory %s (%s.yaml cannot be read; give "
                     "kiln --runtimes-dir DIR, or KILN_RUNTIMES_DIR)%s",
                     kind, name, dir, name,
                     c->file_docs ? ", nor among the file's runtime documents" : "");
        goto out;
    }
    docs = kiln__yaml_load_all(buf, len, &rd, &err);
    if (docs == NULL || json_array_size(docs) != 1 || !json_is_object(json_array_get(docs, 0))) {
        kiln__kf_bad(c, "spec.runtimeRef.name", "%s is not one %s document%s%s", path, kind,
                     rd.n ? ": " : "", rd.n ? rd.v[0].description : "");
        goto out;
    }
    rt = json_array_get(docs, 0);
    if (!runtime_is(c, rt, path, name, kind, ns)) {
        rt = NULL;
        goto out;
    }
    json_incref(rt);
    if (say)
        kiln__kf_note(c, "spec.runtimeRef",
                      "the %s '%s' is read from the runtimes directory (%s): the file's runtime "
                      "documents hold no %s of that name",
                      kind, name, path, kind);
out:
    kiln_diag_free(&rd);
    json_decref(docs);
    free(buf);
    free(path);
    return rt;
}

/* The runtime runtimeRef names: for a TrainJob shipped with its runtimes
 * (c->file_docs), the file's document of that kind and name, else, as for a
 * TrainJob alone, <dir>/<name>.yaml (load_runtime). A note says which and
 * where it came from, and names the file's runtimes left unused (kubectl
 * would create them; kiln has no use for them). NULL after reporting. */
static json_t *find_runtime(kiln__kf *c, const char *name, const char *kind, const char *ns)
{
    const json_t *found = NULL;
    size_t at = 0;
    for (size_t i = 0; c->file_docs && i < json_array_size(c->file_docs); i++) {
        const json_t *doc = json_array_get(c->file_docs, i);
        const char *rk = kiln__kf_scalar(kiln__kf_get(doc, "kind"));
        const char *rn = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(doc, "metadata"), "name"));
        if (i == c->file_job) continue;
        if (rk && rn && strcmp(rk, kind) == 0 && strcmp(rn, name) == 0) {
            if (found) {
                kiln__kf_bad(c, "spec.runtimeRef",
                             "the file holds the %s '%s' twice (documents %zu and %zu): give it "
                             "once",
                             kind, name, at + 1, i + 1);
                return NULL;
            }
            found = doc;
            at = i;
            continue;
        }
        kiln__kf_note(c, "spec.runtimeRef",
                      "document %zu (%.64s '%.64s') is not used: the TrainJob's runtimeRef "
                      "names the %s '%s'",
                      i + 1, rk ? rk : "(no kind)", rn ? rn : "", kind, name);
    }
    if (found == NULL) return load_runtime(c, name, kind, ns, c->file_docs != NULL);
    char where[64];
    snprintf(where, sizeof where, "document %zu of the file", at + 1);
    if (!runtime_is(c, found, where, name, kind, ns)) return NULL;
    kiln__kf_note(c, "spec.runtimeRef",
                  "the %s '%s' is the file's document %zu (a runtime in the TrainJob's file is "
                  "used before the runtimes directory's)",
                  kind, name, at + 1);
    return json_incref((json_t *)found);
}

/* The runtime's trainer job: labelled as Trainer's ancestor step "trainer",
 * else the one named "node". The others are refused: kiln has no initializer
 * step, and the launcher belongs to the mpi policy refused before. */
static const json_t *trainer_job(kiln__kf *c, const json_t *rjobs, const char *rp)
{
    const json_t *pick = NULL, *node = NULL;
    char p[TJ_PATH + 32];
    size_t i;
    json_t *j;
    if (!json_is_array(rjobs) || json_array_size(rjobs) == 0) {
        kiln__kf_bad(c, rp, "required: spec.template.spec.replicatedJobs with the 'node' job");
        return NULL;
    }
    json_array_foreach(rjobs, i, j)
    {
        snprintf(p, sizeof p, "%s[%zu]", rp, i);
        kiln__kf_check_keys(c, j, p, rjob_keys);
        const char *name = kiln__kf_scalar(kiln__kf_get(j, "name"));
        const json_t *labels =
            kiln__kf_get(kiln__kf_get(kiln__kf_get(j, "template"), "metadata"), "labels");
        const char *step = kiln__kf_scalar(kiln__kf_get(labels, ANCESTOR_LABEL));
        /* JobSet's dependsOn: this job starts once those are Complete (or
         * Ready); kiln runs one job, so there is nothing to wait for */
        const json_t *dep = kiln__kf_get(j, "dependsOn");
        if (kiln__kf_present(dep)) {
            const char *first = kiln__kf_scalar(kiln__kf_get(json_array_get(dep, 0), "name"));
            char dp[TJ_PATH + 48];
            snprintf(dp, sizeof dp, "%s.dependsOn", p);
            kiln__kf_bad(c, dp,
                         "not supported: kiln runs no step before the trainer, so '%.64s' would "
                         "have nothing to wait for ('%.64s' is not run): fetch the data in the "
                         "trainer's command, or give the trainer a volume that holds it",
                         name ? name : "", first ? first : "");
        }
        if (step && strcmp(step, "trainer") == 0)
            pick = j;
        else if (name && strcmp(name, "node") == 0)
            node = j;
        else
            kiln__kf_bad(c, p,
                         "replicated job '%s'%s%s is not supported: kiln runs the trainer job "
                         "(the 'node' job) only, with no initializer or launcher step (an "
                         "initializer's work can be done by the trainer's command)",
                         name ? name : "", step ? " of step " : "", step ? step : "");
    }
    if (pick && node && node != pick) {
        snprintf(p, sizeof p, "%s", rp);
        kiln__kf_bad(c, p, "has a 'node' job besides the trainer job: kiln runs one");
    }
    if (!pick) pick = node;
    if (!pick) kiln__kf_bad(c, rp, "has no trainer job (labelled " ANCESTOR_LABEL ": trainer)");
    return pick;
}

/* Trainer's merge: the TrainJob's trainer fields over container `node`. */
static void overlay_trainer(kiln__kf *c, json_t *pod, const json_t *trainer)
{
    json_t *ctrs = kiln__kf_get(kiln__kf_get(pod, "spec"), "containers");
    json_t *node = NULL, *v;
    size_t i;
    json_array_foreach(ctrs, i, v)
    {
        const char *name = kiln__kf_scalar(kiln__kf_get(v, "name"));
        if (name && strcmp(name, "node") == 0) node = v;
    }
    if (node == NULL || !json_is_object(trainer)) return; /* reported by the pod reader */
    static const char *const replace[] = {"image", "command", "args", NULL};
    for (int k = 0; replace[k]; k++) {
        json_t *t = kiln__kf_get(trainer, replace[k]);
        if (kiln__kf_present(t) && json_object_set(node, replace[k], t) != 0)
            kiln__kf_nomem(c, KILN_ENOMEM);
    }
    json_t *res = kiln__kf_get(trainer, "resourcesPerNode");
    if (kiln__kf_present(res) && json_object_set(node, "resources", res) != 0)
        kiln__kf_nomem(c, KILN_ENOMEM);
    json_t *env = kiln__kf_get(trainer, "env");
    if (!json_is_array(env) || json_array_size(env) == 0) return;
    json_t *have = kiln__kf_get(node, "env");
    if (!json_is_array(have)) {
        have = json_array();
        if (!have || json_object_set_new(node, "env", have) != 0) {
            kiln__kf_nomem(c, KILN_ENOMEM);
            return;
        }
    }
    json_t *e;
    json_array_foreach(env, i, e)
    {
        const char *name = kiln__kf_scalar(kiln__kf_get(e, "name"));
        size_t k;
        json_t *h;
        bool done = false;
        json_array_foreach(have, k, h)
        {
            const char *hn = kiln__kf_scalar(kiln__kf_get(h, "name"));
            if (name && hn && strcmp(name, hn) == 0) {
                done = true;
                if (json_array_set(have, k, e) != 0) kiln__kf_nomem(c, KILN_ENOMEM);
            }
        }
        if (!done && json_array_append(have, e) != 0) kiln__kf_nomem(c, KILN_ENOMEM);
    }
}

/* The runtime's node container may not set torchrun's variables either:
 * the policy's would replace them (Trainer upserts its own over them). */
static void check_runtime_env(kiln__kf *c, const json_t *pod, const char *rtn)
{
    size_t i, j;
    json_t *ctr, *e;
    json_array_foreach(kiln__kf_get(kiln__kf_get(pod, "spec"), "containers"), i, ctr)
    {
        json_array_foreach(kiln__kf_get(ctr, "env"), j, e)
        {
            const char *name = kiln__kf_scalar(kiln__kf_get(e, "name"));
            for (int k = 0; name && pet_names[k]; k++) {
                if (strcmp(name, pet_names[k]) != 0) continue;
                char p[TJ_PATH];
                snprintf(p, sizeof p, "%s: the trainer job's containers[%zu].env[%zu]", rtn, i, j);
                kiln__kf_bad(c, p, "%s is set by the torch policy: leave it out of the runtime",
                             name);
            }
        }
    }
}

/* The trainer's shape, each at its own path (the merged pod is read again
 * by kubeflow.c, whose paths are the runtime's). */
static void check_trainer(kiln__kf *c, const json_t *trainer, bool *has_n, int64_t *n,
                          bool *has_nproc, int64_t *nproc)
{
    if (!kiln__kf_present(trainer)) return;
    if (!json_is_object(trainer)) {
        kiln__kf_bad(c, "spec.trainer", "must be a map (image, command, args, env, numNodes...)");
        return;
    }
    kiln__kf_check_keys(c, trainer, "spec.trainer", trainer_keys);
    if (kiln__kf_opt_count(c, trainer, "numNodes", "spec.trainer.numNodes", has_n, n) && *has_n &&
        *n < 1)
        kiln__kf_bad(c, "spec.trainer.numNodes", "must be at least 1");
    /* v2.0 wrote numProcPerNode as a string ("auto" or "4"): auto is the default */
    const json_t *np = kiln__kf_get(trainer, "numProcPerNode");
    const char *nps = kiln__kf_scalar(np);
    if (nps && strcmp(nps, "auto") == 0)
        ;
    else if (kiln__kf_opt_count(c, trainer, "numProcPerNode", "spec.trainer.numProcPerNode",
                                has_nproc, nproc) &&
             *has_nproc && *nproc < 1)
        kiln__kf_bad(c, "spec.trainer.numProcPerNode", "must be at least 1 (or auto)");
    const json_t *env = kiln__kf_get(trainer, "env");
    if (kiln__kf_present(env) && !json_is_array(env)) {
        kiln__kf_bad(c, "spec.trainer.env", "must be a list of {name, value}");
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)env, i, e)
    {
        const char *name = kiln__kf_scalar(kiln__kf_get(e, "name"));
        char p[TJ_PATH];
        snprintf(p, sizeof p, "spec.trainer.env[%zu]", i);
        if (name == NULL) {
            kiln__kf_bad(c, p, "needs a name");
            continue;
        }
        for (int k = 0; pet_names[k]; k++)
            if (strcmp(name, pet_names[k]) == 0)
                kiln__kf_bad(c, p,
                             "%s is set by the torch policy (Trainer's rule, and kiln's): leave "
                             "it out",
                             name);
    }
}

/* Kubernetes' Quantity.Value() of a CPU quantity: whole CPUs, rounded up;
 * -1 when it is not one ("2", "0.5", "500m"). */
static int64_t cpus_up(const json_t *q)
{
    const char *s = kiln__kf_scalar(q);
    char buf[32];
    if (s == NULL && json_is_integer(q)) return json_integer_value(q);
    if (s == NULL && json_is_real(q)) {
        snprintf(buf, sizeof buf, "%.6f", json_real_value(q));
        s = buf;
    }
    if (s == NULL || *s == '\0') return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || v > 1e9) return -1;
    if (strcmp(end, "m") == 0)
        v /= 1000;
    else if (*end != '\0')
        return -1;
    int64_t whole = (int64_t)v;
    return (double)whole < v ? whole + 1 : whole;
}

/* PET_NPROC_PER_NODE (TR torch.go): numProcPerNode if given; else "auto"
 * with GPUs on the node; else its CPUs (request, else limit), at least 1. */
static void nproc_per_node(kiln__kf *c, const json_t *pod, bool has_nproc, int64_t nproc,
                           kiln_kubeflow_job *kj)
{
    char buf[32] = "auto";
    const json_t *res = NULL, *v;
    size_t i;
    json_array_foreach(kiln__kf_get(kiln__kf_get(pod, "spec"), "containers"), i, v)
    {
        const char *name = kiln__kf_scalar(kiln__kf_get(v, "name"));
        if (name && strcmp(name, "node") == 0) res = kiln__kf_get(v, "resources");
    }
    const json_t *lim = kiln__kf_get(res, "limits"), *req = kiln__kf_get(res, "requests");
    int64_t gpus = 0;
    bool gpu = kiln__kf_get_int(kiln__kf_get(lim, "nvidia.com/gpu"), &gpus) && gpus > 0;
    if (!gpu) gpu = kiln__kf_get_int(kiln__kf_get(req, "nvidia.com/gpu"), &gpus) && gpus > 0;
    if (has_nproc) {
        snprintf(buf, sizeof buf, "%lld", (long long)nproc);
    } else if (!gpu) {
        int64_t cpus = cpus_up(kiln__kf_get(req, "cpu"));
        if (cpus <= 0) cpus = cpus_up(kiln__kf_get(lim, "cpu"));
        snprintf(buf, sizeof buf, "%lld", (long long)(cpus < 1 ? 1 : cpus));
    }
    kiln__kf_nomem(c, kiln_set_str(&kj->nproc_per_node, buf));
}

/* spec.mlPolicy: numNodes, and the torch policy (kiln's one). */
static void read_policy(kiln__kf *c, const json_t *rt, const char *rtn, bool *has_n, int64_t *n)
{
    char p[TJ_PATH];
    const json_t *pol = kiln__kf_get(kiln__kf_get(rt, "spec"), "mlPolicy");
    snprintf(p, sizeof p, "%s: spec.mlPolicy", rtn);
    if (!json_is_object(pol)) {
        kiln__kf_bad(c, p, "required: the runtime's mlPolicy (numNodes, torch)");
        return;
    }
    kiln__kf_check_keys(c, pol, p, policy_keys);
    snprintf(p, sizeof p, "%s: spec.mlPolicy.numNodes", rtn);
    if (kiln__kf_opt_count(c, pol, "numNodes", p, has_n, n) && *has_n && *n < 1)
        kiln__kf_bad(c, p, "must be at least 1");
    static const char *const others[] = {"mpi", "jax", "xgboost", "flux", NULL};
    for (int k = 0; others[k]; k++) {
        if (!kiln__kf_present(kiln__kf_get(pol, others[k]))) continue;
        snprintf(p, sizeof p, "%s: spec.mlPolicy.%s", rtn, others[k]);
        kiln__kf_bad(c, p,
                     "the %s policy is not supported yet: kiln runs a TrainJob on a runtime of "
                     "the torch policy (torch-distributed)%s",
                     others[k],
                     strcmp(others[k], "mpi") == 0 ? " (kiln's MPIJob does not run yet either)"
                                                   : "");
    }
    const json_t *torch = kiln__kf_get(pol, "torch");
    snprintf(p, sizeof p, "%s: spec.mlPolicy.torch", rtn);
    if (!kiln__kf_present(torch)) {
        bool other = false;
        for (int k = 0; others[k]; k++)
            other = other || kiln__kf_present(kiln__kf_get(pol, others[k]));
        if (!other) kiln__kf_bad(c, p, "required: kiln runs the torch policy");
    } else if (!json_is_object(torch)) {
        kiln__kf_bad(c, p, "must be a map");
    } else {
        static const char *const torch_keys[] = {NULL};
        kiln__kf_check_keys(c, torch, p, torch_keys); /* envInjection: not yet */
    }
}

/* spec.podGroupPolicy: a PodGroup for a gang scheduler (Volcano, or
 * scheduler-plugins' coscheduling), so that all the nodes start together or
 * none does. kiln's scheduler places every job so, all its replicas at once,
 * so the plugin asks what kiln does and is accepted (said in a note). Its
 * settings are the scheduler's own and have no meaning in kiln: refused. */
static void read_pod_group(kiln__kf *c, const json_t *rt, const char *rtn)
{
    char p[TJ_PATH];
    const json_t *pg = kiln__kf_get(kiln__kf_get(rt, "spec"), "podGroupPolicy");
    if (!kiln__kf_present(pg)) return;
    snprintf(p, sizeof p, "%s: spec.podGroupPolicy", rtn);
    if (!json_is_object(pg)) {
        kiln__kf_bad(c, p, "must be a map (volcano or coscheduling)");
        return;
    }
    kiln__kf_check_keys(c, pg, p, pod_group_keys);
    const json_t *vol = kiln__kf_get(pg, "volcano"), *cos = kiln__kf_get(pg, "coscheduling");
    if (kiln__kf_present(vol) && kiln__kf_present(cos)) {
        kiln__kf_bad(c, p, "gives both volcano and coscheduling: Trainer takes one of them");
        return;
    }
    static const struct {
        const char *plugin, *key, *why;
    } no[] = {
        {"volcano", "networkTopology",
         "kiln does not place by Volcano's network topology (HyperNodes): leave it out"},
        {"coscheduling", "scheduleTimeoutSeconds",
         "kiln has no timeout for placing a gang: the nodes wait in kiln's queue until all of "
         "them fit, and then start together; leave it out"},
    };
    const char *plugin = kiln__kf_present(vol) ? "volcano" : "coscheduling";
    const json_t *src = kiln__kf_present(vol) ? vol : cos;
    if (!kiln__kf_present(src)) return; /* {}: no plugin, nothing asked */
    snprintf(p, sizeof p, "%s: spec.podGroupPolicy.%s", rtn, plugin);
    if (!json_is_object(src)) {
        kiln__kf_bad(c, p, "must be a map ({} for the plugin's defaults)");
        return;
    }
    static const char *const vol_keys[] = {"networkTopology", NULL};
    static const char *const cos_keys[] = {"scheduleTimeoutSeconds", NULL};
    kiln__kf_check_keys(c, src, p, src == vol ? vol_keys : cos_keys);
    size_t before = c->bad;
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        if (strcmp(no[i].plugin, plugin) != 0 || !kiln__kf_present(kiln__kf_get(src, no[i].key)))
            continue;
        char kp[TJ_PATH + 32];
        snprintf(kp, sizeof kp, "%s.%s", p, no[i].key);
        kiln__kf_bad(c, kp, "not supported: %s", no[i].why);
    }
    if (c->bad == before)
        kiln__kf_note(c, p,
                      "kiln's own scheduler gang-places the TrainJob: all its nodes start "
                      "together or none does, as the %s PodGroup asks (none is made)",
                      plugin);
}

/* The refusals of spec fields kiln does not act on (suspend: unless the
 * TrainJob names its queue, Kueue's way). */
static void refuse_unsupported(kiln__kf *c, const json_t *spec, bool *suspend)
{
    *suspend = false;
    if (kiln__kf_opt_bool(c, spec, "suspend", "spec.suspend", suspend) && *suspend)
        kiln__kf_suspend(c, "spec.suspend");
    static const char *const no[][2] = {
        {"initializer", "kiln has no dataset or model initializer step: fetch the data in the "
                        "trainer, or give it a volume"},
        {"runtimePatches", "kiln applies no runtime patches: edit the runtime file instead"},
        {"podSpecOverrides", "kiln applies no pod overrides (Trainer v2.0): edit the runtime "
                             "file instead"},
        {"podTemplateOverrides", "kiln applies no pod overrides (Trainer v2.1): edit the "
                                 "runtime file instead"},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        if (!kiln__kf_present(kiln__kf_get(spec, no[i][0]))) continue;
        char p[TJ_PATH];
        snprintf(p, sizeof p, "spec.%s", no[i][0]);
        kiln__kf_bad(c, p, "not supported: %s", no[i][1]);
    }
    const json_t *mb = kiln__kf_get(spec, "managedBy");
    const char *mbs = kiln__kf_scalar(mb);
    if (kiln__kf_present(mb) && !(mbs && strcmp(mbs, MANAGER_DEFAULT) == 0))
        kiln__kf_bad(c, "spec.managedBy",
                     "'%.64s': kiln manages the TrainJobs it runs, as " MANAGER_DEFAULT
                     " does: give that, or leave managedBy out",
                     mbs ? mbs : "value");
}

kiln_err kiln__trainjob_decode(kiln__kf *c, const json_t *root, kiln_job *job)
{
    json_t *rt = NULL, *replica = NULL;
    char rtn[KILN__KF_PATH] = "";
    c->kind = "TrainJob";
    c->container = "node";
    c->port = "node";
    c->container_required = true;
    kiln__kf_metadata(c, root, job);
    job->has_training_input = true;
    kiln_training_input *ti = &job->training_input;
    const json_t *spec = kiln__kf_get(root, "spec");
    if (!json_is_object(spec)) {
        kiln__kf_bad(c, "spec", "required: the TrainJob spec with runtimeRef");
        goto out;
    }
    kiln__kf_check_keys(c, spec, "spec", kiln__trainjob_spec_keys);
    bool suspend = false;
    refuse_unsupported(c, spec, &suspend);
    ti->has_kubeflow_job = true;
    kiln_kubeflow_job *kj = &ti->kubeflow_job;
    kj->suspend = suspend;
    kiln__kf_nomem(c, kiln_set_str(&kj->kind, "TrainJob"));
    kiln__kf_nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    /* activeDeadlineSeconds: runPolicy's reader takes it where it sits (spec.) */
    kiln__kf_run_policy(c, spec, ti);

    const json_t *trainer = kiln__kf_get(spec, "trainer");
    bool has_n = false, has_nproc = false, rt_has_n = false;
    int64_t n = 1, nproc = 0, rt_n = 1;
    check_trainer(c, trainer, &has_n, &n, &has_nproc, &nproc);

    const json_t *ref = kiln__kf_get(spec, "runtimeRef");
    if (!json_is_object(ref)) {
        kiln__kf_bad(c, "spec.runtimeRef", "required: the runtime to train on (name, kind)");
        goto out;
    }
    kiln__kf_check_keys(c, ref, "spec.runtimeRef", ref_keys);
    const char *name = kiln__kf_scalar(kiln__kf_get(ref, "name"));
    const char *kind = kiln__kf_scalar(kiln__kf_get(ref, "kind"));
    const char *group = kiln__kf_scalar(kiln__kf_get(ref, "apiGroup"));
    if (kind == NULL) kind = "ClusterTrainingRuntime";
    if (strcmp(kind, "ClusterTrainingRuntime") != 0 && strcmp(kind, "TrainingRuntime") != 0)
        kiln__kf_bad(c, "spec.runtimeRef.kind",
                     "'%.64s' is not a runtime kind: ClusterTrainingRuntime or TrainingRuntime",
                     kind);
    if (group && strcmp(group, "trainer.kubeflow.org") != 0)
        kiln__kf_bad(c, "spec.runtimeRef.apiGroup",
                     "'%.64s': the runtimes are trainer.kubeflow.org", group);
    if (name == NULL || !name_ok(name)) {
        kiln__kf_bad(
            c, "spec.runtimeRef.name",
            "%s%.64s%s: a runtime's name (lowercase letters, digits, '-' and '.', up to 63)",
            name ? "'" : "required", name ? name : "", name ? "' is not a valid name" : "");
        goto out;
    }
    if (c->bad) goto out;
    const char *ns = kiln__kf_scalar(kiln__kf_get(kiln__kf_get(root, "metadata"), "namespace"));
    rt = find_runtime(c, name, kind, ns);
    if (rt == NULL) goto out;
    snprintf(rtn, sizeof rtn, "%s/%s", kind, name);
    kiln__kf_nomem(c, kiln_set_str(&kj->runtime, rtn));
    char p[TJ_PATH];
    snprintf(p, sizeof p, "%s: ", rtn);
    kiln__kf_check_keys(c, rt, p, rt_top_keys);
    snprintf(p, sizeof p, "%s: spec", rtn);
    kiln__kf_check_keys(c, kiln__kf_get(rt, "spec"), p, rt_spec_keys);
    read_policy(c, rt, rtn, &rt_has_n, &rt_n);
    read_pod_group(c, rt, rtn);
    const json_t *tmpl = kiln__kf_get(kiln__kf_get(rt, "spec"), "template");
    snprintf(p, sizeof p, "%s: spec.template", rtn);
    kiln__kf_check_keys(c, tmpl, p, rt_template_keys);
    snprintf(p, sizeof p, "%s: spec.template.spec", rtn);
    kiln__kf_check_keys(c, kiln__kf_get(tmpl, "spec"), p, jobset_keys);
    snprintf(p, sizeof p, "%s: spec.template.spec.replicatedJobs", rtn);
    const json_t *tj =
        trainer_job(c, kiln__kf_get(kiln__kf_get(tmpl, "spec"), "replicatedJobs"), p);
    if (tj == NULL || c->bad) goto out;
    const json_t *jt = kiln__kf_get(tj, "template");
    snprintf(p, sizeof p, "%s: the trainer job's template", rtn);
    kiln__kf_check_keys(c, jt, p, job_template_keys);
    snprintf(p, sizeof p, "%s: the trainer job's template.spec", rtn);
    kiln__kf_check_keys(c, kiln__kf_get(jt, "spec"), p, job_spec_keys);
    const json_t *pod = kiln__kf_get(kiln__kf_get(jt, "spec"), "template");
    if (!json_is_object(pod)) {
        snprintf(p, sizeof p, "%s: the trainer job's template.spec.template", rtn);
        kiln__kf_bad(c, p, "required: the pod template of the node");
        goto out;
    }
    check_runtime_env(c, pod, rtn);
    if (c->bad) goto out;

    int64_t nodes = has_n ? n : rt_has_n ? rt_n : 1;
    json_t *copy = json_deep_copy(pod);
    /* "o" takes the copy, also when the pack fails */
    replica = copy ? json_pack("{s:I, s:s, s:o}", "replicas", (json_int_t)nodes, "restartPolicy",
                               "Never", "template", copy)
                   : NULL;
    if (replica == NULL) {
        kiln__kf_nomem(c, KILN_ENOMEM);
        goto out;
    }
    overlay_trainer(c, copy, trainer);
    nproc_per_node(c, copy, has_nproc, nproc, kj);
    /* node 0 plays kiln's master, and the job succeeds when it does, as for
     * a PyTorchJob without a Master; Trainer's JobSet waits for every node
     * (a difference left open: docs/job-model.md) */
    snprintf(p, sizeof p, "%s (node, with spec.trainer)", rtn);
    kiln__kf_promote_worker(c, replica, p, ti);
    kj->workers_only = true;
out:
    json_decref(replica);
    json_decref(rt);
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}
