/* src/queues/write.c - a loaded ClusterQueue as a kueue.x-k8s.io/v1beta2
 * object (kiln queues describe --format yaml|json).
 *
 * Whatever version the file was written in, the model holds its v1beta2
 * meaning (load.c converts v1beta1), so the object written here is what
 * Kueue's conversion webhook would serve: spec.cohortName, flavorFungibility
 * with MayStopSearch/TryNextFlavor, every defaulted field spelt out. Its
 * spec loads back into the same model; status is kiln's last admission
 * pass. */
#include <stdio.h>
#include <string.h>

#include "kiln/queues.h"

static json_t *quantity(kiln_qres r, int64_t v)
{
    char b[32];
    kiln_queues_format(r, v, b, sizeof b);
    return json_string(b);
}

static const char *policy_name(kiln_qpolicy p)
{
    switch (p) {
    case KILN_QP_LOWER_PRIORITY:
        return "LowerPriority";
    case KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY:
        return "LowerOrNewerEqualPriority";
    case KILN_QP_ANY:
        return "Any";
    case KILN_QP_NEVER:
        break;
    }
    return "Never";
}

/* fairSharing.weight as Kubernetes writes a quantity: "2", "500m". */
static json_t *weight(double w)
{
    long long m = (long long)(w * 1000.0 + 0.5);
    return m % 1000 ? json_sprintf("%lldm", m) : json_sprintf("%lld", m / 1000);
}

static json_t *resource_groups(const kiln_queues *q, const kiln_qcq *cq)
{
    json_t *groups = json_array();
    for (size_t g = 0; g < cq->ngroups; g++) {
        const kiln_qgroup *grp = &cq->groups[g];
        json_t *covered = json_array(), *fl = json_array();
        /* the order resources were listed in is not kept: kiln's order */
        for (int r = 0; r < KILN_QRES_COUNT; r++)
            if (grp->covers[r])
                json_array_append_new(covered, json_string(kiln_queues_res_name((kiln_qres)r)));
        for (size_t i = 0; i < grp->n; i++) {
            const kiln_qgflavor *gf = &grp->flavors[i];
            json_t *res = json_array();
            for (int r = 0; r < KILN_QRES_COUNT; r++) {
                if (!grp->covers[r]) continue;
                json_t *o = json_pack("{s:s,s:o}", "name", kiln_queues_res_name((kiln_qres)r),
                                      "nominalQuota", quantity((kiln_qres)r, gf->q[r].nominal));
                if (gf->q[r].has_borrowing_limit)
                    json_object_set_new(o, "borrowingLimit",
                                        quantity((kiln_qres)r, gf->q[r].borrowing_limit));
                if (gf->q[r].has_lending_limit)
                    json_object_set_new(o, "lendingLimit",
                                        quantity((kiln_qres)r, gf->q[r].lending_limit));
                json_array_append_new(res, o);
            }
            json_array_append_new(
                fl, json_pack("{s:s,s:o}", "name", q->flavors[gf->flavor].name, "resources", res));
        }
        json_array_append_new(groups,
                              json_pack("{s:o,s:o}", "coveredResources", covered, "flavors", fl));
    }
    return groups;
}

static json_t *status(const kiln_queues *q, const kiln_qcq *cq)
{
    json_t *usage = json_array();
    for (size_t g = 0; g < cq->ngroups; g++)
        for (size_t i = 0; i < cq->groups[g].n; i++) {
            const kiln_qgflavor *gf = &cq->groups[g].flavors[i];
            json_t *res = json_array();
            for (int r = 0; r < KILN_QRES_COUNT; r++) {
                if (!cq->groups[g].covers[r]) continue;
                int64_t b = gf->usage[r] > gf->q[r].nominal ? gf->usage[r] - gf->q[r].nominal : 0;
                json_array_append_new(res, json_pack("{s:s,s:o,s:o}", "name",
                                                     kiln_queues_res_name((kiln_qres)r), "total",
                                                     quantity((kiln_qres)r, gf->usage[r]),
                                                     "borrowed", quantity((kiln_qres)r, b)));
            }
            json_array_append_new(usage, json_pack("{s:s,s:o}", "name", q->flavors[gf->flavor].name,
                                                   "resources", res));
        }
    return json_pack("{s:I,s:I,s:o}", "pendingWorkloads", (json_int_t)cq->pending,
                     "admittedWorkloads", (json_int_t)cq->admitted, "flavorsUsage", usage);
}

json_t *kiln_queues_cq_v1beta2(const kiln_queues *q, size_t k, bool with_status)
{
    const kiln_qcq *cq = &q->cqs[k];
    json_t *spec = json_object();
    if (cq->cohort) json_object_set_new(spec, "cohortName", json_string(cq->cohort));
    /* null (absent) selects no namespace; {} every one */
    if (cq->all_namespaces)
        json_object_set_new(spec, "namespaceSelector", json_object());
    else if (cq->namespaces.n)
        json_object_set_new(spec, "namespaceSelector",
                            json_pack("{s:{s:s}}", "matchLabels", "kubernetes.io/metadata.name",
                                      cq->namespaces.v[0]));
    json_object_set_new(
        spec, "queueingStrategy",
        json_string(cq->strategy == KILN_Q_STRICT_FIFO ? "StrictFIFO" : "BestEffortFIFO"));
    json_object_set_new(spec, "resourceGroups", resource_groups(q, cq));
    json_t *bwc = json_pack("{s:s}", "policy", policy_name(cq->borrow_within));
    if (cq->has_max_priority_threshold)
        json_object_set_new(bwc, "maxPriorityThreshold", json_integer(cq->max_priority_threshold));
    json_object_set_new(spec, "preemption",
                        json_pack("{s:s,s:s,s:o}", "withinClusterQueue", policy_name(cq->within_cq),
                                  "reclaimWithinCohort", policy_name(cq->reclaim),
                                  "borrowWithinCohort", bwc));
    json_object_set_new(spec, "flavorFungibility",
                        json_pack("{s:s,s:s}", "whenCanBorrow",
                                  cq->borrow_try_next ? "TryNextFlavor" : "MayStopSearch",
                                  "whenCanPreempt", "TryNextFlavor"));
    if (cq->afs)
        json_object_set_new(spec, "admissionScope",
                            json_pack("{s:s}", "admissionMode", "UsageBasedAdmissionFairSharing"));
    if (cq->fair_sharing)
        json_object_set_new(spec, "fairSharing", json_pack("{s:o}", "weight", weight(cq->weight)));
    json_object_set_new(spec, "stopPolicy", json_string(kiln_queues_stop_name(cq->stop)));
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:o}", "apiVersion", "kueue.x-k8s.io/v1beta2", "kind",
                          "ClusterQueue", "metadata", "name", cq->name, "spec", spec);
    if (o && cq->persistent_resource)
        json_object_set_new(
            json_object_get(o, "metadata"), "labels",
            json_pack("{s:s}", KILN_PERSISTENT_RESOURCE_LABEL, cq->persistent_resource));
    if (o && with_status) json_object_set_new(o, "status", status(q, cq));
    return o;
}
