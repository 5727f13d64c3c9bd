/* src/spec/kfkinds.c - Kubeflow JAXJob, PaddleJob and XGBoostJob
 * (kubeflow.org/v1, training operator v1.9) -> kiln_job.
 *
 * The three differ from one another only in a row of `kinds` below: where
 * their replica specs sit, which replica types they have, the container
 * that runs the program, the operator's port name and its default restart
 * policy. The rest (metadata, pod templates, runPolicy) is kubeflow.c's.
 *   Master (PaddleJob, XGBoostJob)  -> kiln's master (exactly 1 replica)
 *   Worker                         -> workers; without a Master, worker 0 is
 *                                     kiln's master (kubeflowJob.workersOnly)
 * The operator's webhook rules are kept, each at its field path: the named
 * container in every replica type, XGBoostJob's Master present with 1
 * replica. What each operator sets in the replicas' environment is
 * src/exec/kfenv.c's (from kubeflowJob.kind). scaleTier is CUSTOM. */
#include <stdio.h>
#include <string.h>

#include "spec/kubeflow.h"

const char *const kiln__jax_spec_keys[] = {"jaxReplicaSpecs", "runPolicy", NULL};
const char *const kiln__paddle_spec_keys[] = {"paddleReplicaSpecs", "runPolicy", "elasticPolicy",
                                              NULL};
const char *const kiln__xgb_spec_keys[] = {"xgbReplicaSpecs", "runPolicy", NULL};

enum { KFK_MASTER, KFK_WORKER, KFK_NTYPES };

typedef struct kfk_kind {
    const char *kind, *specs, *container, *port, *restart;
    const char *const *spec_keys;
    bool has_master;  /* a Master replica type exists */
    bool need_master; /* ... and is required (XGBoostJob's webhook) */
} kfk_kind;

/* Container, port and restart-policy defaults: TO pkg/apis/kubeflow.org/v1
 * jax_types.go / paddlepaddle_types.go / xgboost_types.go. */
static const kfk_kind kinds[] = {
    {"JAXJob", "spec.jaxReplicaSpecs", "jax", "jaxjob-port", "Never", kiln__jax_spec_keys, false,
     false},
    {"PaddleJob", "spec.paddleReplicaSpecs", "paddle", "master", "OnFailure",
     kiln__paddle_spec_keys, true, false},
    {"XGBoostJob", "spec.xgbReplicaSpecs", "xgboost", "xgboostjob-port", "Never",
     kiln__xgb_spec_keys, true, true},
};
#define N_KINDS (sizeof kinds / sizeof *kinds)

static const kfk_kind *find_kind(const char *kind)
{
    for (size_t i = 0; kind && i < N_KINDS; i++)
        if (strcmp(kind, kinds[i].kind) == 0) return &kinds[i];
    return NULL;
}

bool kiln__kfk_known(const char *kind)
{
    return find_kind(kind) != NULL;
}

/* The operator's default restart policy where the file gives none. */
static void default_restart(kiln__kf *c, const kfk_kind *k, kiln_training_input *ti, kiln_role r)
{
    kiln_role_fields f = kiln_job_role_fields(ti, r);
    if (*f.has_config && f.config->restart_policy == NULL)
        kiln__kf_nomem(c, kiln_set_str(&f.config->restart_policy, k->restart));
}

/* The variables each operator sets on every replica (kfenv.c): a user's
 * value would be overwritten there (the operator appends its own after the
 * container's env), so a file that sets one is refused, at its path, rather
 * than surprised. */
static void check_env(kiln__kf *c, const kfk_kind *k, const json_t *spec_of, const char *type)
{
    static const char *const jax[] = {"COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES",
                                      "PROCESS_ID", NULL};
    static const char *const paddle[] = {"PADDLE_JOB_ID",
                                         "PADDLE_NNODES",
                                         "PADDLE_MASTER",
                                         "PADDLE_SERVER_NUM",
                                         "PADDLE_TRAINER_NUM",
                                         "POD_IP_DUMMY",
                                         NULL};
    static const char *const xgb[] = {"WORKER_PORT", "WORKER_ADDRS", NULL};
    const char *const *own = k == &kinds[0] ? jax : k == &kinds[1] ? paddle : xgb;
    const json_t *ctrs =
        kiln__kf_get(kiln__kf_get(kiln__kf_get(spec_of, "template"), "spec"), "containers");
    size_t i, j;
    json_t *ctr, *e;
    json_array_foreach((json_t *)ctrs, i, ctr)
    {
        json_array_foreach(kiln__kf_get(ctr, "env"), j, e)
        {
            const char *name = kiln__kf_scalar(kiln__kf_get(e, "name"));
            for (size_t o = 0; name && own[o]; o++) {
                if (strcmp(name, own[o]) != 0) continue;
                char p[KILN__KF_PATH];
                snprintf(p, sizeof p, "%s.%s.template.spec.containers[%zu].env[%zu]", k->specs,
                         type, i, j);
                kiln__kf_bad(c, p,
                             "%s is set by the %s operator on every replica, and by kiln as it "
                             "does: leave it out",
                             name, k->kind);
            }
        }
    }
}

static void map_replica_specs(kiln__kf *c, const kfk_kind *k, const json_t *spec,
                              kiln_training_input *ti)
{
    static const char *const both[KFK_NTYPES] = {"Master", "Worker"};
    const json_t *specs = kiln__kf_get(spec, k->specs + 5); /* after "spec." */
    const json_t *found[KFK_NTYPES] = {0};
    char p[KILN__KF_ROLE_PATH];
    if (!json_is_object(specs) || json_object_size(specs) == 0) {
        kiln__kf_bad(c, k->specs, "required: the replica specs (%s)",
                     k->has_master ? "Master, Worker" : "Worker");
        return;
    }
    /* JAXJob has Worker only: its type list starts at Worker */
    const char *const *names = k->has_master ? both : both + 1;
    size_t n = k->has_master ? 2 : 1;
    kiln__kf_find_specs(c, specs, k->specs, k->kind, names, n, k->has_master ? found : found + 1);
    kiln__kf_nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    if (k->need_master && !found[KFK_MASTER]) {
        snprintf(p, sizeof p, "%s.Master", k->specs);
        kiln__kf_bad(c, p, "must be present: an %s has one Master (the operator's rule)", k->kind);
        return;
    }
    if (found[KFK_MASTER]) {
        snprintf(p, sizeof p, "%s.Master", k->specs);
        /* XGBoostJob: the operator's rule; PaddleJob: kiln's (its PS mode with
         * several servers is not supported yet), said as such */
        const json_t *mr = kiln__kf_get(found[KFK_MASTER], "replicas");
        int64_t mn = 1;
        bool ok = !kiln__kf_present(mr) || (kiln__kf_get_int(mr, &mn) && mn == 1);
        snprintf(p, sizeof p, "%s.Master.replicas", k->specs);
        if (!ok && k->need_master)
            kiln__kf_bad(c, p, "must be 1: an %s has exactly one Master (the operator's rule)",
                         k->kind);
        else if (!ok)
            kiln__kf_bad(c, p,
                         "kiln runs a %s with one Master (a parameter-server mode of several "
                         "servers is not supported yet): give 1",
                         k->kind);
        snprintf(p, sizeof p, "%s.Master", k->specs);
        kiln__kf_fill_role(c, found[KFK_MASTER], p, ti, KILN_ROLE_MASTER, 1);
        if (found[KFK_WORKER]) {
            snprintf(p, sizeof p, "%s.Worker", k->specs);
            int64_t w = kiln__kf_replicas(c, found[KFK_WORKER], p, false);
            if (w != 0)
                kiln__kf_fill_role(c, found[KFK_WORKER], p, ti, KILN_ROLE_WORKER, w < 0 ? 0 : w);
        }
    } else if (found[KFK_WORKER]) {
        /* the job succeeds when worker 0 does: it plays kiln's master */
        snprintf(p, sizeof p, "%s.Worker", k->specs);
        kiln__kf_promote_worker(c, found[KFK_WORKER], p, ti);
        /* promote_worker names it "chief" for TF_CONFIG; these kinds have no TF_CONFIG
         * of their own, and their rank 0 is worker 0 (kfenv.c) */
        ti->kubeflow_job.workers_only = true;
    } else if (c->bad == 0) {
        kiln__kf_bad(c, k->specs, "needs a %sWorker replica spec",
                     k->has_master ? "Master or " : "");
    }
    default_restart(c, k, ti, KILN_ROLE_MASTER);
    default_restart(c, k, ti, KILN_ROLE_WORKER);
    for (int t = 0; t < KFK_NTYPES; t++)
        if (found[t]) check_env(c, k, found[t], both[t]);
}

kiln_err kiln__kfk_decode(kiln__kf *c, const json_t *root, kiln_job *job)
{
    const kfk_kind *k = find_kind(kiln__kf_scalar(kiln__kf_get(root, "kind")));
    if (k == NULL) return KILN_EINVAL; /* kiln__kfk_known said yes first */
    c->kind = k->kind;
    c->container = k->container;
    c->port = k->port;
    c->container_required = true;
    kiln__kf_metadata(c, root, job);
    job->has_training_input = true;
    kiln_training_input *ti = &job->training_input;
    const json_t *spec = kiln__kf_get(root, "spec");
    if (!json_is_object(spec)) {
        kiln__kf_bad(c, "spec", "required: the %s spec with %s", k->kind, k->specs + 5);
        return KILN_EINVAL;
    }
    ti->has_kubeflow_job = true;
    kiln__kf_nomem(c, kiln_set_str(&ti->kubeflow_job.kind, k->kind));
    kiln__kf_check_keys(c, spec, "spec", k->spec_keys);
    map_replica_specs(c, k, spec, ti);
    kiln__kf_run_policy(c, spec, ti);
    if (kiln__kf_present(kiln__kf_get(spec, "elasticPolicy")))
        kiln__kf_bad(c, "spec.elasticPolicy",
                     "not supported for a PaddleJob yet: kiln runs a PaddleJob with its Worker "
                     "replicas (give replicas, and no elasticPolicy)");
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}
