/* src/api/api_queues.c - GET /v1/queues and /v1/queues/NAME (kilnd --queues):
 * each ClusterQueue's quota, usage, borrowing, workloads and weighted share,
 * and the cohort tree's nodes (list only)
 * as the supervisor's last admission pass counted them (docs/queues.md),
 * and Kueue's metric names for /metrics. */
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/api_int.h"
#include "kiln/queues.h"

/* An amount as Kueue's API shows a quantity: GPUs and bytes as whole
 * numbers, CPUs as cores or millicores. */
static json_t *amount(kiln_qres r, int64_t v)
{
    char b[32];
    kiln_queues_format(r, v, b, sizeof b);
    return json_string(b);
}

static json_t *cq_json(const kiln_queues *q, size_t k)
{
    const kiln_qcq *cq = &q->cqs[k];
    json_t *groups = json_array(), *local = json_array();
    int64_t borrowed[KILN_QRES_COUNT];
    kiln_queues_borrowed(q, k, borrowed);
    for (size_t g = 0; g < cq->ngroups; g++) {
        json_t *fl = json_array();
        for (size_t i = 0; i < cq->groups[g].n; i++) {
            const kiln_qgflavor *gf = &cq->groups[g].flavors[i];
            json_t *res = json_array();
            for (int r = 0; r < KILN_QRES_COUNT; r++) {
                if (!cq->groups[g].covers[r]) continue;
                json_t *o = json_pack(
                    "{s:s,s:o,s:o,s:o}", "name", kiln_queues_res_name((kiln_qres)r), "nominalQuota",
                    amount((kiln_qres)r, gf->q[r].nominal), "usage",
                    amount((kiln_qres)r, gf->usage[r]), "borrowed",
                    amount((kiln_qres)r,
                           gf->usage[r] > gf->q[r].nominal ? gf->usage[r] - gf->q[r].nominal : 0));
                if (gf->q[r].has_borrowing_limit)
                    json_object_set_new(o, "borrowingLimit",
                                        amount((kiln_qres)r, gf->q[r].borrowing_limit));
                if (gf->q[r].has_lending_limit)
                    json_object_set_new(o, "lendingLimit",
                                        amount((kiln_qres)r, gf->q[r].lending_limit));
                json_array_append_new(res, o);
            }
            json_array_append_new(
                fl, json_pack("{s:s,s:o}", "name", q->flavors[gf->flavor].name, "resources", res));
        }
        json_array_append_new(groups, json_pack("{s:o}", "flavors", fl));
    }
    for (size_t i = 0; i < q->nlqs; i++)
        if (q->lqs[i].cq == k)
            json_array_append_new(local,
                                  json_sprintf("%s/%s", q->lqs[i].namespace_, q->lqs[i].name));
    json_t *o =
        json_pack("{s:s,s:s,s:o,s:i,s:i,s:o,s:o}", "name", cq->name, "queueingStrategy",
                  cq->strategy == KILN_Q_STRICT_FIFO ? "StrictFIFO" : "BestEffortFIFO",
                  "resourceGroups", groups, "pendingWorkloads", (json_int_t)cq->pending,
                  "admittedWorkloads", (json_int_t)cq->admitted, "localQueues", local, "borrowed",
                  json_pack("{s:o,s:o,s:o,s:o}", "nvidia.com/gpu",
                            amount(KILN_QRES_GPU, borrowed[KILN_QRES_GPU]), "cpu",
                            amount(KILN_QRES_CPU, borrowed[KILN_QRES_CPU]), "memory",
                            amount(KILN_QRES_MEMORY, borrowed[KILN_QRES_MEMORY]), "pods",
                            amount(KILN_QRES_PODS, borrowed[KILN_QRES_PODS])));
    if (cq->cohort) json_object_set_new(o, "cohort", json_string(cq->cohort));
    if (cq->fair_sharing) json_object_set_new(o, "fairSharingWeight", json_real(cq->weight));
    int64_t share = kiln_queues_share(q, k, NULL);
    json_object_set_new(o, "weightedShare", json_integer(share == INT64_MAX ? -1 : share));
    json_object_set_new(o, "stopPolicy", json_string(kiln_queues_stop_name(cq->stop)));
    return o;
}

/* A cohort of the tree: its parent, and per flavor and resource its subtree
 * quota (its members' lendable quota and its own) and what its subtree draws
 * on it, as Kueue's cohort arithmetic counts them (kiln_queues_available). */
static json_t *cohort_json(const kiln_queues *q, size_t k)
{
    const kiln_qcohort *c = &q->cnodes[k];
    json_t *res = json_array();
    for (size_t f = 0; f < q->nflavors; f++)
        for (int r = 0; r < KILN_QRES_COUNT; r++) {
            int64_t quota = kiln_queues_cohort_quota(q, k, f, (kiln_qres)r);
            int64_t use = kiln_queues_cohort_usage(q, k, f, (kiln_qres)r);
            if (!quota && !use) continue;
            json_array_append_new(res, json_pack("{s:s,s:s,s:o,s:o}", "flavor", q->flavors[f].name,
                                                 "name", kiln_queues_res_name((kiln_qres)r),
                                                 "subtreeQuota", amount((kiln_qres)r, quota),
                                                 "usage", amount((kiln_qres)r, use)));
        }
    json_t *o =
        json_pack("{s:s,s:b,s:o}", "name", c->name, "declared", c->declared, "resources", res);
    if (c->parent >= 0)
        json_object_set_new(o, "parentName", json_string(q->cnodes[c->parent].name));
    return o;
}

enum MHD_Result kiln__api_queues(kilnd *d, struct MHD_Connection *c, const char *method,
                                 const char *rest, const kiln_api_auth *a)
{
    (void)a; /* queues are the whole kilnd's, as its nodes: any caller may read them */
    if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
    if (!d->queues_path)
        return send_error(c, 404, NULL, "kilnd runs without --queues: there are no queues");
    json_t *out = NULL;
    pthread_mutex_lock(&d->queues_mu);
    const kiln_queues *q = d->queues;
    if (!*rest) {
        json_t *arr = json_array();
        for (size_t k = 0; k < q->ncqs; k++)
            json_array_append_new(arr, cq_json(q, k));
        json_t *coh = json_array();
        for (size_t k = 0; k < q->ncnodes; k++)
            json_array_append_new(coh, cohort_json(q, k));
        out = json_pack("{s:o,s:o}", "clusterQueues", arr, "cohorts", coh);
    } else {
        /* ?view=kueue: the ClusterQueue as a kueue.x-k8s.io/v1beta2 object */
        const char *view = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "view");
        bool kueue = view && strcmp(view, "kueue") == 0;
        if (view && !kueue) {
            pthread_mutex_unlock(&d->queues_mu);
            return send_error(c, 400, NULL, "view: '%.40s' is not kueue", view);
        }
        for (size_t k = 0; k < q->ncqs && !out; k++)
            if (strcmp(q->cqs[k].name, rest) == 0)
                out = kueue ? kiln_queues_cq_v1beta2(q, k, true) : cq_json(q, k);
    }
    pthread_mutex_unlock(&d->queues_mu);
    if (!out) return send_error(c, 404, NULL, "ClusterQueue %.200s not found", rest);
    return send_json(c, 200, out);
}

/* Prometheus text for Kueue's metrics, appended to `put`'s buffer by metrics.c. */
void kiln__api_queues_metrics(kilnd *d, void (*emit)(void *, const char *, ...), void *o)
{
    if (!d->queues_path) return;
    pthread_mutex_lock(&d->queues_mu);
    const kiln_queues *q = d->queues;
    emit(o, "# HELP kueue_pending_workloads Jobs waiting in each ClusterQueue (last pass).\n"
            "# TYPE kueue_pending_workloads gauge\n");
    for (size_t k = 0; k < q->ncqs; k++)
        emit(o, "kueue_pending_workloads{cluster_queue=\"%s\",status=\"active\"} %ld\n",
             q->cqs[k].name, q->cqs[k].pending);
    emit(o, "# HELP kueue_admitted_active_workloads Jobs admitted and running per ClusterQueue.\n"
            "# TYPE kueue_admitted_active_workloads gauge\n");
    for (size_t k = 0; k < q->ncqs; k++)
        emit(o, "kueue_admitted_active_workloads{cluster_queue=\"%s\"} %ld\n", q->cqs[k].name,
             q->cqs[k].admitted);
    static const char *const names[2] = {"kueue_cluster_queue_resource_usage",
                                         "kueue_cluster_queue_nominal_quota"};
    for (int m = 0; m < 2; m++) {
        emit(o, "# HELP %s %s\n# TYPE %s gauge\n", names[m],
             m ? "Nominal quota per flavor and resource (cpu in cores, memory in bytes)."
               : "Usage per flavor and resource (cpu in cores, memory in bytes).",
             names[m]);
        for (size_t k = 0; k < q->ncqs; k++) {
            const kiln_qcq *cq = &q->cqs[k];
            for (size_t g = 0; g < cq->ngroups; g++)
                for (size_t i = 0; i < cq->groups[g].n; i++)
                    for (int r = 0; r < KILN_QRES_COUNT; r++) {
                        if (!cq->groups[g].covers[r]) continue;
                        const kiln_qgflavor *gf = &cq->groups[g].flavors[i];
                        int64_t v = m ? gf->q[r].nominal : gf->usage[r];
                        emit(o,
                             "%s{cohort=\"%s\",cluster_queue=\"%s\",flavor=\"%s\",resource=\"%s\"} "
                             "%.17g\n",
                             names[m], cq->cohort ? cq->cohort : "", cq->name,
                             q->flavors[gf->flavor].name, kiln_queues_res_name((kiln_qres)r),
                             r == KILN_QRES_CPU ? (double)v / 1000.0 : (double)v);
                    }
        }
    }
    emit(o, "# HELP kueue_cluster_queue_weighted_share Weighted dominant resource share "
            "(x1000 over the weight; -1: weight 0 while borrowing).\n"
            "# TYPE kueue_cluster_queue_weighted_share gauge\n");
    for (size_t k = 0; k < q->ncqs; k++) {
        int64_t s = kiln_queues_share(q, k, NULL);
        emit(o, "kueue_cluster_queue_weighted_share{cluster_queue=\"%s\"} %lld\n", q->cqs[k].name,
             (long long)(s == INT64_MAX ? -1 : s));
    }
    emit(o, "# HELP kueue_preempted_workloads_total Jobs preempted, by reason (since kilnd "
            "started).\n# TYPE kueue_preempted_workloads_total counter\n");
    emit(o, "kueue_preempted_workloads_total{reason=\"InClusterQueue\"} %llu\n",
         d->preempted_in_cq);
    emit(o, "kueue_preempted_workloads_total{reason=\"InCohortReclamation\"} %llu\n",
         d->preempted_reclaim);
    emit(o, "kueue_preempted_workloads_total{reason=\"InCohortReclaimWhileBorrowing\"} %llu\n",
         d->preempted_borrow);
    pthread_mutex_unlock(&d->queues_mu);
}
