/* src/queues/qpreempt.c - Kueue's decisions: the order of admission and
 * preemption (kiln/queues.h), pure over the model and plain descriptions of
 * the workloads. The supervisor (src/exec/supervisor/admit.c) builds the
 * inputs from its jobs and carries out the answers.
 *
 * Preemption as Kueue's preemptor does it: the candidates x's ClusterQueue's
 * policies allow (withinClusterQueue, reclaimWithinCohort,
 * borrowWithinCohort), in Kueue's order (other ClusterQueues' borrowers
 * first, then the lowest priority, then the most recently admitted), are
 * taken out of the usage one by one until x fits; then each one taken that
 * x does not need is given back, the last taken first, so that the fewest
 * are preempted. No loop follows: a victim taken while x borrows has a
 * lower priority than x, so it cannot take x's place back by
 * borrowWithinCohort, and x's queue, within its nominal quota once the
 * victim's queue stops borrowing, is not reclaimed from while it does not
 * borrow. */
#include <stdlib.h>

#include "kiln/queues.h"

int kiln_q_queue_order(const void *pa, const void *pb)
{
    const kiln_qcand *a = pa, *b = pb;
    if (a->routed != b->routed) return a->routed ? -1 : 1;
    if (a->cq != b->cq) return a->cq < b->cq ? -1 : 1;
    /* admission fair sharing: the LocalQueue that used less goes first */
    if (a->afs != b->afs) return a->afs < b->afs ? -1 : 1;
    if (a->prio != b->prio) return a->prio > b->prio ? -1 : 1;
    if (a->create_ns != b->create_ns) return a->create_ns < b->create_ns ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

bool kiln_q_goes_first(const kiln_queues *q, const kiln_qcand *x, bool xb, int64_t xs,
                       const kiln_qcand *y, bool yb, int64_t ys)
{
    if (xb != yb) return !xb;
    if (q->cqs[x->cq].fair_sharing && q->cqs[y->cq].fair_sharing && xs != ys) return xs < ys;
    if (x->prio != y->prio) return x->prio > y->prio;
    if (x->create_ns != y->create_ns) return x->create_ns < y->create_ns;
    return x->seq < y->seq;
}

bool kiln_q_fits_nominal(const kiln_queues *q, const kiln_qcand *x)
{
    const kiln_qcq *cq = &q->cqs[x->cq];
    for (size_t g = 0; g < cq->ngroups; g++) {
        const kiln_qgroup *grp = &cq->groups[g];
        bool asks = false, found = false;
        for (int r = 0; r < KILN_QRES_COUNT; r++)
            asks |= grp->covers[r] && x->req[r] > 0;
        if (!asks) continue;
        for (size_t i = 0; i < grp->n && !found; i++) {
            const kiln_qgflavor *gf = &grp->flavors[i];
            if (x->usable && !x->usable[gf->flavor]) continue;
            bool ok = true;
            for (int r = 0; r < KILN_QRES_COUNT; r++)
                if (grp->covers[r] && gf->usage[r] + x->req[r] > gf->q[r].nominal) ok = false;
            found = ok;
        }
        if (!found) return false;
    }
    return true;
}

bool kiln_q_borrows_now(const kiln_queues *q, size_t cq)
{
    int64_t b[KILN_QRES_COUNT];
    kiln_queues_borrowed(q, cq, b);
    for (int r = 0; r < KILN_QRES_COUNT; r++)
        if (b[r] > 0) return true;
    return false;
}

const char *kiln_q_preason_name(kiln_qpreason r)
{
    switch (r) {
    case KILN_QPR_IN_CLUSTER_QUEUE:
        return "InClusterQueue";
    case KILN_QPR_RECLAIM:
        return "InCohortReclamation";
    case KILN_QPR_RECLAIM_WHILE_BORROWING:
        return "InCohortReclaimWhileBorrowing";
    case KILN_QPR_NONE:
        break;
    }
    return "";
}

bool kiln_q_may_preempt(const kiln_queues *q, const kiln_qcand *x, kiln_qvictim *v)
{
    const kiln_qcq *cq = &q->cqs[x->cq];
    if (v->cq == x->cq) {
        bool lower = v->prio < x->prio;
        /* newer: created after the preemptor (unknown: not newer) */
        bool newer_eq = v->prio == x->prio && v->create_ns > x->create_ns;
        if (cq->within_cq == KILN_QP_LOWER_PRIORITY && lower) return true;
        return cq->within_cq == KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY && (lower || newer_eq);
    }
    /* reclaim along the cohort tree: any borrowing queue under the same root */
    if (kiln_queues_same_tree(q, x->cq, v->cq) && cq->reclaim != KILN_QP_NEVER &&
        kiln_q_borrows_now(q, v->cq)) {
        v->other = true;
        return cq->reclaim == KILN_QP_ANY || v->prio < x->prio;
    }
    return false;
}

int kiln_q_victim_order(const void *pa, const void *pb)
{
    const kiln_qvictim *a = pa, *b = pb;
    if (a->other != b->other) return a->other ? -1 : 1;
    if (a->prio != b->prio) return a->prio < b->prio ? -1 : 1;
    if (a->admit_ns != b->admit_ns) return a->admit_ns > b->admit_ns ? -1 : 1;
    return 0;
}

kiln_qpreempt kiln_q_preempt(kiln_queues *q, const kiln_qcand *x, kiln_qvictim *vs, size_t nv)
{
    kiln_qpreempt res = {0};
    const kiln_qcq *cq = &q->cqs[x->cq];
    for (size_t i = 0; i < nv; i++) {
        vs[i].other = false;
        vs[i].reason = KILN_QPR_NONE;
    }
    if (cq->within_cq == KILN_QP_NEVER && cq->reclaim == KILN_QP_NEVER) return res;
    /* the candidates to the front, in the order given (then sorted) */
    size_t n = 0;
    for (size_t i = 0; i < nv; i++) {
        if (!kiln_q_may_preempt(q, x, &vs[i])) continue;
        if (i != n) {
            kiln_qvictim t = vs[n];
            vs[n] = vs[i];
            vs[i] = t;
        }
        n++;
    }
    qsort(vs, n, sizeof *vs, kiln_q_victim_order);
    res.n = n;
    kiln_qassign a;
    char why[400];
    size_t last = n;
    /* a reclaim only from a queue that still borrows, and only for an x
     * within its nominal quota */
    bool reclaim = kiln_q_fits_nominal(q, x);
    /* borrowWithinCohort: Kueue's bound, below x's priority and at most the
     * threshold */
    bool borrow_pre = cq->borrow_within != KILN_QP_NEVER;
    int64_t below = x->prio;
    if (borrow_pre && cq->has_max_priority_threshold && cq->max_priority_threshold < below - 1)
        below = cq->max_priority_threshold + 1;
    for (size_t i = 0; i < n; i++) {
        kiln_qvictim *v = &vs[i];
        if (v->other && !kiln_q_borrows_now(q, v->cq)) continue;
        kiln_qpreason why_v = v->other ? KILN_QPR_RECLAIM : KILN_QPR_IN_CLUSTER_QUEUE;
        if (v->other && !reclaim) {
            if (!borrow_pre) continue;
            if (v->prio >= below) {
                res.over_threshold += v->prio < x->prio;
                continue;
            }
            why_v = KILN_QPR_RECLAIM_WHILE_BORROWING;
        }
        kiln_queues_charge(q, v->cq, &v->a, v->req, -1);
        v->reason = why_v;
        if (kiln_queues_fit(q, x->cq, x->req, x->usable, &a, why, sizeof why)) {
            last = i;
            res.fits = true;
            break;
        }
    }
    /* the fewest: give back, newest taken last first, any x does not need */
    for (size_t i = res.fits ? last : 0; res.fits && i-- > 0;) {
        kiln_qvictim *v = &vs[i];
        if (v->reason == KILN_QPR_NONE) continue;
        kiln_queues_charge(q, v->cq, &v->a, v->req, 1);
        if (kiln_queues_fit(q, x->cq, x->req, x->usable, &a, why, sizeof why))
            v->reason = KILN_QPR_NONE;
        else
            kiln_queues_charge(q, v->cq, &v->a, v->req, -1);
    }
    /* the usage as it was: the caller carries the answer out */
    for (size_t i = 0; i < n; i++) {
        if (vs[i].reason == KILN_QPR_NONE) continue;
        kiln_queues_charge(q, vs[i].cq, &vs[i].a, vs[i].req, 1);
        if (!res.fits) vs[i].reason = KILN_QPR_NONE;
    }
    return res;
}
