/* src/spec/pytorchjob.c - Kubeflow PyTorchJob (kubeflow.org/v1) -> kiln_job.
 *
 * What is PyTorchJob's own (the rest is shared with TFJob, kubeflow.c):
 *   spec.pytorchReplicaSpecs.Master -> master (exactly 1 replica)
 *   spec.pytorchReplicaSpecs.Worker -> workers; without a Master, worker 0 is
 *                                      kiln's master (pytorchJob.workersOnly)
 *   the pod container "pytorch" runs the program; the operator requires it
 *   spec.nprocPerNode               -> pytorchJob.nprocPerNode (auto|cpu|gpu|N)
 *   spec.elasticPolicy              -> pytorchJob.elasticPolicy (torchrun's
 *                                      rendezvous; metrics: kiln's HPA,
 *                                      Resource cpu/memory only)
 * The operator's validation rules are kept, each reported at its field path:
 * one Master replica, the "pytorch" container in every replica type, a Worker
 * spec with elasticPolicy, and elasticPolicy.nProcPerNode not together with
 * spec.nprocPerNode. scaleTier is CUSTOM. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>

#include "spec/kubeflow.h"

#define PT_CONTAINER "pytorch"
#define PT_SPECS     "spec.pytorchReplicaSpecs"
#define PT_ELASTIC   "spec.elasticPolicy"

enum { PT_MASTER, PT_WORKER, PT_NTYPES };
static const char *const pt_type_names[PT_NTYPES] = {"Master", "Worker"};

/* spec keys kiln reads; anything else is refused rather than ignored */
const char *const kiln__pt_spec_keys[] = {"pytorchReplicaSpecs",
                                          "runPolicy",
                                          "elasticPolicy",
                                          "nprocPerNode",
                                          "backoffLimit",
                                          "activeDeadlineSeconds",
                                          "ttlSecondsAfterFinished",
                                          "cleanPodPolicy",
                                          NULL};
#define N_SPEC_KEYS (sizeof kiln__pt_spec_keys / sizeof *kiln__pt_spec_keys - 1)

static bool one_of(const char *s, const char *const *v, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, v[i]) == 0) return true;
    return false;
}

static void check_spec_keys(kiln__kf *c, const json_t *spec)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)spec, key, val)
    {
        if (one_of(key, kiln__pt_spec_keys, N_SPEC_KEYS)) continue;
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, "spec.%.200s", key);
        kiln__kf_bad(c, p,
                     "not a PyTorchJob field kiln reads (pytorchReplicaSpecs, runPolicy, "
                     "elasticPolicy, nprocPerNode)");
    }
}

/* auto | cpu | gpu | a whole number >= 1, as torchrun's --nproc_per_node. */
static void map_nproc(kiln__kf *c, const json_t *v, const char *path, char **out)
{
    static const char *const words[] = {"auto", "cpu", "gpu"};
    if (!kiln__kf_present(v)) return;
    const char *s = kiln__kf_scalar(v);
    int64_t n = 0;
    char num[32];
    if (s == NULL && json_is_integer(v)) {
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        s = num;
    }
    if (one_of(s, words, 3) || (s && kiln__kf_get_int(v, &n) && n >= 1 && n <= 1024)) {
        kiln__kf_nomem(c, kiln_set_str(out, s));
        return;
    }
    kiln__kf_bad(c, path,
                 "'%s' is not a number of processes per node: use auto, cpu, gpu or "
                 "a whole number from 1 to 1024",
                 s ? s : "value");
}

/* ---- elasticPolicy ---- */

const char *const kiln__pt_elastic_keys[] = {
    "minReplicas", "maxReplicas", "rdzvBackend", "rdzvHost",     "rdzvPort", "rdzvId",
    "rdzvConf",    "maxRestarts", "standalone",  "nProcPerNode", "metrics",  NULL};
#define N_ELASTIC_KEYS (sizeof kiln__pt_elastic_keys / sizeof *kiln__pt_elastic_keys - 1)

static void map_rdzv_conf(kiln__kf *c, const json_t *v, kiln_elastic_policy *ep)
{
    if (!kiln__kf_present(v)) return;
    if (!json_is_array(v)) {
        kiln__kf_bad(c, PT_ELASTIC ".rdzvConf", "must be a list of {key, value}");
        return;
    }
    size_t i;
    json_t *kv;
    json_array_foreach(v, i, kv)
    {
        const char *k = kiln__kf_scalar(kiln__kf_get(kv, "key"));
        const char *val = kiln__kf_scalar(kiln__kf_get(kv, "value"));
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, PT_ELASTIC ".rdzvConf[%zu]", i);
        /* torchrun joins them as key=value,key=value: neither may hold those */
        if (!k || !*k || !val || strpbrk(k, "=,") || strchr(val, ','))
            kiln__kf_bad(c, p,
                         "must be {key, value}: strings, the key without '=' or ',' and "
                         "the value without ','");
        else
            kiln__kf_nomem(c, kiln_map_set(&ep->rdzv_conf, k, val));
    }
}

static void map_elastic_counts(kiln__kf *c, const json_t *el, kiln_elastic_policy *ep)
{
    bool has = false;
    kiln__kf_opt_count(c, el, "minReplicas", PT_ELASTIC ".minReplicas", &has, &ep->min_replicas);
    kiln__kf_opt_count(c, el, "maxReplicas", PT_ELASTIC ".maxReplicas", &has, &ep->max_replicas);
    kiln__kf_opt_count(c, el, "maxRestarts", PT_ELASTIC ".maxRestarts", &ep->has_max_restarts,
                       &ep->max_restarts);
    int64_t port = 0;
    if (kiln__kf_opt_count(c, el, "rdzvPort", PT_ELASTIC ".rdzvPort", &has, &port)) {
        if (port > 65535)
            kiln__kf_bad(c, PT_ELASTIC ".rdzvPort", "%lld is not a TCP port (1-65535)",
                         (long long)port);
        else
            ep->rdzv_port = port;
    }
}

/* elasticPolicy.metrics: the HorizontalPodAutoscaler (autoscaling/v2)
 * MetricSpecs the operator would give the job's HPA. kiln's supervisor is
 * that HPA for Resource metrics (cpu, memory, nvidia.com/gpu utilisation)
 * of the workers, processes or containers;
 * Pods, Object, External and ContainerResource metrics need a metrics
 * pipeline kiln does not have, so they are refused. */
/* Keys of a MetricSpec part other than `ok` are refused at their path. */
static bool only_keys(kiln__kf *c, const json_t *o, const char *p, const char *const *ok, size_t n)
{
    const char *key;
    json_t *val;
    bool clean = true;
    if (!json_is_object(o)) {
        kiln__kf_bad(c, p, "must be a map");
        return false;
    }
    json_object_foreach((json_t *)o, key, val)
    {
        if (one_of(key, ok, n)) continue;
        char q[KILN__KF_PATH + 64];
        snprintf(q, sizeof q, "%s.%.100s", p, key);
        kiln__kf_bad(c, q, "not read by kiln's autoscaler here");
        clean = false;
    }
    return clean;
}

static void map_metric(kiln__kf *c, const json_t *m, const char *p, kiln_elastic_metric *out)
{
    char q[KILN__KF_PATH + 64];
    const char *type = kiln__kf_scalar(kiln__kf_get(m, "type"));
    if (!type || strcmp(type, "Resource") != 0) {
        snprintf(q, sizeof q, "%s.type", p);
        kiln__kf_bad(c, q,
                     "'%s': kiln autoscales on Resource metrics only (cpu, memory or "
                     "nvidia.com/gpu of the workers); Pods, Object, External and "
                     "ContainerResource metrics are not supported",
                     type ? type : "missing");
        return;
    }
    static const char *const mk[] = {"type", "resource"}, *const rk[] = {"name", "target"},
                             *const tk[] = {"type", "averageUtilization", "averageValue"};
    const json_t *res = kiln__kf_get(m, "resource");
    snprintf(q, sizeof q, "%s.resource", p);
    if (!only_keys(c, m, p, mk, 2) || !only_keys(c, res, q, rk, 2)) return;
    const char *name = kiln__kf_scalar(kiln__kf_get(res, "name"));
    bool gpu = name && strcmp(name, "nvidia.com/gpu") == 0;
    if (!name || (strcmp(name, "cpu") != 0 && strcmp(name, "memory") != 0 && !gpu)) {
        snprintf(q, sizeof q, "%s.resource.name", p);
        kiln__kf_bad(c, q,
                     "'%s' is not a resource kiln measures: use cpu, memory or nvidia.com/gpu",
                     name ? name : "missing");
        return;
    }
    const json_t *tg = kiln__kf_get(res, "target");
    snprintf(q, sizeof q, "%s.resource.target", p);
    if (!only_keys(c, tg, q, tk, 3)) return;
    const char *tt = kiln__kf_scalar(kiln__kf_get(tg, "type"));
    int64_t pct = 0;
    const char *val = kiln__kf_scalar(kiln__kf_get(tg, "averageValue"));
    if (tt && strcmp(tt, "Utilization") == 0) {
        if (!kiln__kf_get_int(kiln__kf_get(tg, "averageUtilization"), &pct) || pct < 1) {
            snprintf(q, sizeof q, "%s.resource.target.averageUtilization", p);
            kiln__kf_bad(c, q, "required with type Utilization: a whole percent, 1 or more");
            return;
        }
    } else if (tt && strcmp(tt, "AverageValue") == 0 && gpu) {
        snprintf(q, sizeof q, "%s.resource.target.type", p);
        kiln__kf_bad(c, q,
                     "'AverageValue': nvidia.com/gpu is measured as utilisation (percent of the "
                     "time the workers' GPUs are busy), not as a quantity: use Utilization");
        return;
    } else if (tt && strcmp(tt, "AverageValue") == 0) {
        if (!val || !*val) { /* the quantity itself: honoured.c, at create */
            snprintf(q, sizeof q, "%s.resource.target.averageValue", p);
            kiln__kf_bad(c, q, "required with type AverageValue: a %s quantity above 0",
                         strcmp(name, "cpu") == 0 ? "CPU (\"500m\", \"2\")" : "memory (\"1Gi\")");
            return;
        }
    } else {
        snprintf(q, sizeof q, "%s.resource.target.type", p);
        kiln__kf_bad(c, q,
                     "'%s': use Utilization or AverageValue (Value is for Object and "
                     "External metrics)",
                     tt ? tt : "missing");
        return;
    }
    kiln__kf_nomem(c, kiln_set_str(&out->resource, name));
    kiln__kf_nomem(c, kiln_set_str(&out->target_type, tt));
    out->average_utilization = pct;
    if (strcmp(tt, "AverageValue") == 0) kiln__kf_nomem(c, kiln_set_str(&out->average_value, val));
}

static void map_metrics(kiln__kf *c, const json_t *v, kiln_elastic_policy *ep)
{
    if (!kiln__kf_present(v)) return;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 8) {
        kiln__kf_bad(c, PT_ELASTIC ".metrics",
                     "must be a list of 1 to 8 MetricSpecs (autoscaling/v2)");
        return;
    }
    ep->metrics = calloc(json_array_size(v), sizeof *ep->metrics);
    if (!ep->metrics) {
        kiln__kf_nomem(c, KILN_ENOMEM);
        return;
    }
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m)
    {
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, PT_ELASTIC ".metrics[%zu]", i);
        map_metric(c, m, p, &ep->metrics[ep->n_metrics]);
        if (ep->metrics[ep->n_metrics].resource) ep->n_metrics++;
    }
}

static void map_elastic(kiln__kf *c, const json_t *spec, kiln_pytorch_job *pt)
{
    static const char *const backends[] = {"c10d", "etcd", "etcd-v2", "static"};
    const json_t *el = kiln__kf_get(spec, "elasticPolicy");
    if (!kiln__kf_present(el)) return;
    if (!json_is_object(el)) {
        kiln__kf_bad(c, PT_ELASTIC, "must be a map (minReplicas, maxReplicas, rdzvBackend...)");
        return;
    }
    kiln_elastic_policy *ep = &pt->elastic_policy;
    pt->has_elastic_policy = true;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)el, key, val)
    {
        if (one_of(key, kiln__pt_elastic_keys, N_ELASTIC_KEYS)) continue;
        char p[KILN__KF_PATH];
        snprintf(p, sizeof p, PT_ELASTIC ".%.200s", key);
        kiln__kf_bad(c, p, "not an elasticPolicy field");
    }
    map_metrics(c, kiln__kf_get(el, "metrics"), ep);
    map_elastic_counts(c, el, ep);
    const char *b = kiln__kf_scalar(kiln__kf_get(el, "rdzvBackend"));
    if (kiln__kf_present(kiln__kf_get(el, "rdzvBackend")) && !one_of(b, backends, 4))
        kiln__kf_bad(c, PT_ELASTIC ".rdzvBackend",
                     "'%s' is not a torchrun rendezvous backend; use c10d, etcd, etcd-v2 or static",
                     b ? b : "value");
    else
        kiln__kf_nomem(c, kiln_set_str(&ep->rdzv_backend, b));
    kiln__kf_nomem(c, kiln_set_str(&ep->rdzv_host, kiln__kf_scalar(kiln__kf_get(el, "rdzvHost"))));
    kiln__kf_nomem(c, kiln_set_str(&ep->rdzv_id, kiln__kf_scalar(kiln__kf_get(el, "rdzvId"))));
    map_rdzv_conf(c, kiln__kf_get(el, "rdzvConf"), ep);
    kiln__kf_opt_bool(c, el, "standalone", PT_ELASTIC ".standalone", &ep->standalone);
    map_nproc(c, kiln__kf_get(el, "nProcPerNode"), PT_ELASTIC ".nProcPerNode",
              &ep->n_proc_per_node);
}

/* Defaults and cross-field rules once the Worker count is known. */
static void check_elastic(kiln__kf *c, kiln_pytorch_job *pt, int64_t workers)
{
    kiln_elastic_policy *ep = &pt->elastic_policy;
    /* the operator's defaults: both bounds are the Worker replicas */
    if (ep->min_replicas == 0) ep->min_replicas = workers > 0 ? workers : 1;
    if (ep->max_replicas == 0)
        ep->max_replicas = workers > ep->min_replicas ? workers : ep->min_replicas;
    if (ep->min_replicas > ep->max_replicas)
        kiln__kf_bad(c, PT_ELASTIC ".minReplicas", "%lld is more than maxReplicas (%lld)",
                     (long long)ep->min_replicas, (long long)ep->max_replicas);
    if (pt->nproc_per_node && ep->n_proc_per_node)
        kiln__kf_bad(c, PT_ELASTIC ".nProcPerNode", "must not be used with spec.nprocPerNode");
}

/* ---- replica specs ---- */

/* Returns the Worker replica count (0 without a Worker spec). */
static int64_t map_replica_specs(kiln__kf *c, const json_t *spec, kiln_training_input *ti)
{
    const json_t *specs = kiln__kf_get(spec, "pytorchReplicaSpecs");
    if (!json_is_object(specs) || json_object_size(specs) == 0) {
        kiln__kf_bad(c, PT_SPECS, "required: the replica specs (Master, Worker)");
        return 0;
    }
    const json_t *found[PT_NTYPES] = {0};
    kiln__kf_find_specs(c, specs, PT_SPECS, "PyTorchJob", pt_type_names, PT_NTYPES, found);
    kiln__kf_nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    if (kiln__kf_present(kiln__kf_get(spec, "elasticPolicy")) && !found[PT_WORKER])
        kiln__kf_bad(c, PT_SPECS ".Worker",
                     "required with spec.elasticPolicy: the workers are "
                     "the elastic part of the job");
    int64_t workers = 0;
    if (found[PT_MASTER]) {
        const char *mp = PT_SPECS ".Master";
        int64_t n = kiln__kf_replicas(c, found[PT_MASTER], mp, true);
        kiln__kf_fill_role(c, found[PT_MASTER], mp, ti, KILN_ROLE_MASTER, 1);
        (void)n;
        if (found[PT_WORKER]) {
            const char *wp = PT_SPECS ".Worker";
            workers = kiln__kf_replicas(c, found[PT_WORKER], wp, false);
            if (workers != 0)
                kiln__kf_fill_role(c, found[PT_WORKER], wp, ti, KILN_ROLE_WORKER,
                                   workers < 0 ? 0 : workers);
        }
    } else if (found[PT_WORKER]) {
        /* the job succeeds when worker 0 does: it plays kiln's master */
        workers = kiln__kf_promote_worker(c, found[PT_WORKER], PT_SPECS ".Worker", ti);
        ti->pytorch_job.workers_only = true;
    } else if (c->bad == 0) {
        kiln__kf_bad(c, PT_SPECS, "needs a Master or Worker replica spec");
    }
    return workers < 0 ? 0 : workers;
}

kiln_err kiln__pytorchjob_decode(kiln__kf *c, const json_t *root, kiln_job *job)
{
    c->kind = "PyTorchJob";
    c->container = PT_CONTAINER;
    c->port = "pytorchjob-port";
    c->container_required = true;
    kiln__kf_metadata(c, root, job);
    job->has_training_input = true;
    kiln_training_input *ti = &job->training_input;
    const json_t *spec = kiln__kf_get(root, "spec");
    if (!json_is_object(spec)) {
        kiln__kf_bad(c, "spec", "required: the PyTorchJob spec with pytorchReplicaSpecs");
        return KILN_EINVAL;
    }
    ti->has_pytorch_job = true;
    check_spec_keys(c, spec);
    int64_t workers = map_replica_specs(c, spec, ti);
    kiln__kf_run_policy(c, spec, ti);
    map_nproc(c, kiln__kf_get(spec, "nprocPerNode"), "spec.nprocPerNode",
              &ti->pytorch_job.nproc_per_node);
    map_elastic(c, spec, &ti->pytorch_job);
    if (ti->pytorch_job.has_elastic_policy) check_elastic(c, &ti->pytorch_job, workers);
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}
