/* tests/queues/test_qpreempt.c - Kueue's decisions (src/queues/qpreempt.c),
 * with real numbers in nvidia.com/gpu of one flavor: fits within nominal,
 * only by borrowing, not at all; borrowingLimit; preemption within a
 * ClusterQueue by priority (lower only, the newest first, the fewest);
 * reclaim within the cohort (only from queues that borrow);
 * borrowWithinCohort with maxPriorityThreshold; no victim set suffices;
 * the order of heads (non-borrowing first, fair share, priority, age). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/queues.h"
#include "test.h"

#define HDR "apiVersion: kueue.x-k8s.io/v1beta1\n"

/* A file of ClusterQueues over flavor v100's GPUs: each "name cohort
 * nominal" plus its extra spec lines and extra lines under its resource. */
typedef struct qdef {
    const char *name, *cohort;
    int nominal;
    const char *res_extra, *spec_extra;
} qdef;

static kiln_queues *load(const qdef *defs, size_t n)
{
    char buf[8192];
    size_t off = (size_t)snprintf(buf, sizeof buf,
                                  HDR "kind: ResourceFlavor\nmetadata:\n"
                                      "  name: v100\n---\n");
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(
            buf + off, sizeof buf - off,
            HDR "kind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n"
                "%s%s%s%s"
                "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n    flavors:\n"
                "    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n"
                "        nominalQuota: %d\n%s---\n",
            defs[i].name, defs[i].cohort ? "  cohort: " : "", defs[i].cohort ? defs[i].cohort : "",
            defs[i].cohort ? "\n" : "", defs[i].spec_extra ? defs[i].spec_extra : "",
            defs[i].nominal, defs[i].res_extra ? defs[i].res_extra : "");
    kiln_diag d = KILN_DIAG_INIT;
    kiln_queues *q = NULL;
    if (kiln_queues_load(buf, off, &q, &d) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        q = NULL;
    }
    kiln_diag_free(&d);
    return q;
}

static const kiln_qassign V100 = {.flavor = {0, -1, -1, -1, -1, -1, -1, -1}, .borrows = false};

static int64_t used(const kiln_queues *q, size_t cq)
{
    return q->cqs[cq].groups[0].flavors[0].usage[KILN_QRES_GPU];
}

static kiln_qcand cand(size_t cq, int64_t gpus, int64_t prio, int64_t create_ns)
{
    kiln_qcand x = {.routed = true, .cq = cq, .prio = prio, .create_ns = create_ns};
    x.req[KILN_QRES_GPU] = gpus;
    return x;
}

/* An admitted workload of `gpus`, charged to cq's usage. */
static kiln_qvictim admitted(kiln_queues *q, size_t ref, size_t cq, int64_t gpus, int64_t prio,
                             int64_t admit_ns)
{
    kiln_qvictim v = {.ref = ref, .cq = cq, .a = V100, .prio = prio, .admit_ns = admit_ns};
    v.create_ns = admit_ns;
    v.req[KILN_QRES_GPU] = gpus;
    kiln_queues_charge(q, cq, &v.a, v.req, 1);
    return v;
}

/* The victim given as ref, wherever kiln_q_preempt moved it. */
static const kiln_qvictim *by_ref(const kiln_qvictim *vs, size_t n, size_t ref)
{
    for (size_t i = 0; i < n; i++)
        if (vs[i].ref == ref) return &vs[i];
    return NULL;
}

static bool fits(const kiln_queues *q, const kiln_qcand *x, bool *borrows)
{
    kiln_qassign a;
    char why[400];
    bool ok = kiln_queues_fit(q, x->cq, x->req, x->usable, &a, why, sizeof why);
    if (borrows) *borrows = ok && a.borrows;
    return ok;
}

static void test_fit(void)
{
    /* a and b lend each other their 2 GPUs; a borrows at most 1 */
    qdef defs[] = {{"a", "lab", 2, "        borrowingLimit: 1\n", NULL},
                   {"b", "lab", 2, NULL, NULL}};
    kiln_queues *q = load(defs, 2);
    CHECK(q != NULL);
    if (!q) return;
    bool borrows = true;
    kiln_qcand two = cand(0, 2, 0, 0), one = cand(0, 1, 0, 0);
    /* within nominal */
    CHECK(kiln_q_fits_nominal(q, &two));
    CHECK(fits(q, &two, &borrows) && !borrows);
    CHECK(!kiln_q_borrows_now(q, 0));
    /* no usable flavor: nothing fits nominal */
    bool none[1] = {false};
    kiln_qcand nowhere = two;
    nowhere.usable = none;
    CHECK(!kiln_q_fits_nominal(q, &nowhere));
    kiln_queues_charge(q, 0, &V100, two.req, 1);
    /* only by borrowing: a's nominal is used up, b lends */
    CHECK(!kiln_q_fits_nominal(q, &one));
    CHECK(fits(q, &one, &borrows) && borrows);
    /* not at all: 2 more is past borrowingLimit 1 though b has 2 free */
    CHECK(!fits(q, &two, NULL));
    kiln_qcand two_b = cand(1, 2, 0, 0);
    CHECK(kiln_q_fits_nominal(q, &two_b) && fits(q, &two_b, &borrows) && !borrows);
    kiln_queues_charge(q, 0, &V100, one.req, 1);
    CHECK(kiln_q_borrows_now(q, 0) && !kiln_q_borrows_now(q, 1));
    /* b lent 1 to a: 2 no longer fits, though it is within b's own
     * nominal quota (what reclaimWithinCohort is for); 3 is not */
    kiln_qcand three_b = cand(1, 3, 0, 0);
    CHECK(!fits(q, &two_b, NULL) && kiln_q_fits_nominal(q, &two_b));
    CHECK(!kiln_q_fits_nominal(q, &three_b));
    kiln_queues_free(q);

    /* without a borrowingLimit a may take all of b's */
    qdef open[] = {{"a", "lab", 2, NULL, NULL}, {"b", "lab", 2, NULL, NULL}};
    q = load(open, 2);
    CHECK(q != NULL);
    if (!q) return;
    kiln_queues_charge(q, 0, &V100, two.req, 1);
    kiln_qcand three = cand(0, 3, 0, 0);
    CHECK(fits(q, &two, &borrows) && borrows);
    CHECK(!fits(q, &three, NULL));
    kiln_queues_free(q);
}

static void test_within_cq(void)
{
    qdef defs[] = {
        {"solo", NULL, 4, NULL, "  preemption:\n    withinClusterQueue: LowerPriority\n"}};
    kiln_queues *q = load(defs, 1);
    CHECK(q != NULL);
    if (!q) return;
    kiln_qvictim vs[3];
    vs[0] = admitted(q, 0, 0, 1, 5, 100); /* older, priority 5 */
    vs[1] = admitted(q, 1, 0, 1, 5, 300); /* newer, priority 5 */
    vs[2] = admitted(q, 2, 0, 2, 20, 50); /* above the preemptor */
    CHECK(used(q, 0) == 4);
    kiln_qcand x = cand(0, 1, 10, 400);
    CHECK(!fits(q, &x, NULL));
    kiln_qpreempt p = kiln_q_preempt(q, &x, vs, 3);
    /* lower priority only: the two of priority 5, the newest first; one suffices */
    CHECK(p.fits && p.n == 2);
    CHECK(vs[0].ref == 1 && vs[1].ref == 0 && vs[2].ref == 2);
    CHECK(by_ref(vs, 3, 1)->reason == KILN_QPR_IN_CLUSTER_QUEUE);
    CHECK(by_ref(vs, 3, 0)->reason == KILN_QPR_NONE);
    CHECK(by_ref(vs, 3, 2)->reason == KILN_QPR_NONE);
    CHECK_STR(kiln_q_preason_name(by_ref(vs, 3, 1)->reason), "InClusterQueue");
    CHECK(used(q, 0) == 4); /* the simulation leaves the usage as it was */

    /* 3 GPUs: both of priority 5 free only 2; the one of 20 is above x */
    x = cand(0, 3, 10, 400);
    p = kiln_q_preempt(q, &x, vs, 3);
    CHECK(!p.fits && p.n == 2 && p.over_threshold == 0);
    for (size_t i = 0; i < 3; i++)
        CHECK(vs[i].reason == KILN_QPR_NONE);
    CHECK(used(q, 0) == 4);

    /* the fewest: the newest (1 GPU) is taken first, then the 2-GPU one;
     * x needs 2, so the first is given back */
    kiln_queues_reset_usage(q);
    vs[0] = admitted(q, 0, 0, 1, 1, 900); /* lowest priority, newest */
    vs[1] = admitted(q, 1, 0, 2, 2, 100);
    vs[2] = admitted(q, 2, 0, 1, 30, 100);
    x = cand(0, 2, 10, 1000);
    p = kiln_q_preempt(q, &x, vs, 3);
    CHECK(p.fits && p.n == 2 && vs[0].ref == 0 && vs[1].ref == 1);
    CHECK(by_ref(vs, 3, 0)->reason == KILN_QPR_NONE);
    CHECK(by_ref(vs, 3, 1)->reason == KILN_QPR_IN_CLUSTER_QUEUE);
    CHECK(used(q, 0) == 4);

    /* equal priority: LowerPriority never takes it; LowerOrNewerEqualPriority
     * takes one created after x, not one created before */
    kiln_qcand eq = cand(0, 1, 5, 200);
    kiln_qvictim newer = {.cq = 0, .prio = 5, .create_ns = 300};
    kiln_qvictim older = {.cq = 0, .prio = 5, .create_ns = 100};
    CHECK(!kiln_q_may_preempt(q, &eq, &newer));
    q->cqs[0].within_cq = KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY;
    CHECK(kiln_q_may_preempt(q, &eq, &newer) && !newer.other);
    CHECK(!kiln_q_may_preempt(q, &eq, &older));
    /* Never: nothing is a victim */
    q->cqs[0].within_cq = KILN_QP_NEVER;
    p = kiln_q_preempt(q, &x, vs, 3);
    CHECK(!p.fits && p.n == 0);
    kiln_queues_free(q);
}

static void test_reclaim(void)
{
    /* a reclaims; b borrows from c; c uses only its own */
    qdef defs[] = {{"a", "lab", 2, NULL, "  preemption:\n    reclaimWithinCohort: Any\n"},
                   {"b", "lab", 2, NULL, NULL},
                   {"c", "lab", 2, NULL, NULL}};
    kiln_queues *q = load(defs, 3);
    CHECK(q != NULL);
    if (!q) return;
    kiln_qvictim vs[3];
    vs[0] = admitted(q, 0, 2, 2, -5, 999); /* c's, within its nominal */
    vs[1] = admitted(q, 1, 1, 2, 0, 100);  /* b's */
    vs[2] = admitted(q, 2, 1, 2, 0, 200);  /* b's, newer: b borrows 2 */
    CHECK(kiln_q_borrows_now(q, 1) && !kiln_q_borrows_now(q, 2));
    kiln_qcand x = cand(0, 2, 0, 1000);
    CHECK(kiln_q_fits_nominal(q, &x) && !fits(q, &x, NULL));
    kiln_qpreempt p = kiln_q_preempt(q, &x, vs, 3);
    /* only b's (it borrows), the newer first, and one is enough */
    CHECK(p.fits && p.n == 2);
    CHECK(vs[0].ref == 2 && vs[1].ref == 1 && vs[0].other && vs[1].other);
    CHECK(by_ref(vs, 3, 2)->reason == KILN_QPR_RECLAIM);
    CHECK(by_ref(vs, 3, 1)->reason == KILN_QPR_NONE);
    CHECK(by_ref(vs, 3, 0)->reason == KILN_QPR_NONE); /* c lends nothing */
    CHECK_STR(kiln_q_preason_name(KILN_QPR_RECLAIM), "InCohortReclamation");
    CHECK(used(q, 1) == 4 && used(q, 2) == 2);

    /* reclaimWithinCohort LowerPriority: b's jobs at x's priority stay */
    q->cqs[0].reclaim = KILN_QP_LOWER_PRIORITY;
    p = kiln_q_preempt(q, &x, vs, 3);
    CHECK(!p.fits && p.n == 0);
    x.prio = 1;
    p = kiln_q_preempt(q, &x, vs, 3);
    CHECK(p.fits && p.n == 2 && by_ref(vs, 3, 2)->reason == KILN_QPR_RECLAIM);
    q->cqs[0].reclaim = KILN_QP_ANY;

    /* an x beyond a's nominal quota (it would borrow) reclaims nothing
     * without borrowWithinCohort */
    kiln_qcand big = cand(0, 3, 100, 1000);
    CHECK(!kiln_q_fits_nominal(q, &big));
    p = kiln_q_preempt(q, &big, vs, 3);
    CHECK(!p.fits && p.n == 2);
    for (size_t i = 0; i < 3; i++)
        CHECK(vs[i].reason == KILN_QPR_NONE);
    CHECK(used(q, 1) == 4);
    kiln_queues_free(q);
}

/* A queue that stops borrowing once one of its jobs is taken gives no more:
 * its next job is within its nominal quota again. */
static void test_reclaim_stops(void)
{
    qdef defs[] = {{"a", "lab", 2, NULL, "  preemption:\n    reclaimWithinCohort: Any\n"},
                   {"b", "lab", 2, NULL, NULL},
                   {"c", "lab", 1, NULL, NULL}};
    kiln_queues *q = load(defs, 3);
    CHECK(q != NULL);
    if (!q) return;
    kiln_qvictim vs[3];
    vs[0] = admitted(q, 0, 1, 1, 0, 900); /* b: 3 of nominal 2 */
    vs[1] = admitted(q, 1, 1, 2, 0, 800);
    vs[2] = admitted(q, 2, 2, 2, 0, 100); /* c: 2 of nominal 1 */
    kiln_qcand x = cand(0, 2, 0, 1000);
    CHECK(kiln_q_fits_nominal(q, &x) && !fits(q, &x, NULL));
    kiln_qpreempt p = kiln_q_preempt(q, &x, vs, 3);
    /* b's newest frees 1 and b borrows no more: its other job stays, c's
     * is taken, and then b's newest is not needed after all */
    CHECK(p.fits && p.n == 3 && vs[0].ref == 0 && vs[1].ref == 1 && vs[2].ref == 2);
    CHECK(by_ref(vs, 3, 2)->reason == KILN_QPR_RECLAIM);
    CHECK(by_ref(vs, 3, 1)->reason == KILN_QPR_NONE);
    CHECK(by_ref(vs, 3, 0)->reason == KILN_QPR_NONE);
    CHECK(used(q, 1) == 3 && used(q, 2) == 2);
    kiln_queues_free(q);
}

static void test_borrow_within(void)
{
    /* a borrows to preempt lower-priority borrowers up to priority 5; b
     * borrows c's 4 */
    const char *pre = "  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n"
                      "      policy: LowerPriority\n      maxPriorityThreshold: 5\n";
    qdef defs[] = {
        {"a", "lab", 2, NULL, pre}, {"b", "lab", 2, NULL, NULL}, {"c", "lab", 4, NULL, NULL}};
    kiln_queues *q = load(defs, 3);
    CHECK(q != NULL);
    if (!q) return;
    CHECK(q->cqs[0].borrow_within == KILN_QP_LOWER_PRIORITY &&
          q->cqs[0].max_priority_threshold == 5);
    kiln_qvictim vs[4];
    vs[0] = admitted(q, 0, 0, 2, 100, 10); /* a's own, above x */
    vs[1] = admitted(q, 1, 1, 2, 50, 50);
    vs[2] = admitted(q, 2, 1, 2, 3, 100);
    vs[3] = admitted(q, 3, 1, 2, 8, 200);
    kiln_qcand x = cand(0, 2, 10, 1000);
    CHECK(!kiln_q_fits_nominal(q, &x) && !fits(q, &x, NULL));
    kiln_qpreempt p = kiln_q_preempt(q, &x, vs, 4);
    /* b's three, lowest priority first; the one of priority 3 (at most the
     * threshold) is enough */
    CHECK(p.fits && p.n == 3 && vs[0].ref == 2 && vs[1].ref == 3 && vs[2].ref == 1);
    CHECK(by_ref(vs, 4, 2)->reason == KILN_QPR_RECLAIM_WHILE_BORROWING);
    CHECK(by_ref(vs, 4, 3)->reason == KILN_QPR_NONE && by_ref(vs, 4, 1)->reason == KILN_QPR_NONE);
    CHECK(by_ref(vs, 4, 0)->reason == KILN_QPR_NONE);
    CHECK_STR(kiln_q_preason_name(KILN_QPR_RECLAIM_WHILE_BORROWING),
              "InCohortReclaimWhileBorrowing");
    CHECK(used(q, 1) == 6);

    /* priority 7 instead of 3: above the threshold, as the one of 8; the
     * one of 50 is not below x at all: no victim set suffices */
    kiln_queues_reset_usage(q);
    vs[0] = admitted(q, 0, 0, 2, 100, 10);
    vs[1] = admitted(q, 1, 1, 2, 50, 50);
    vs[2] = admitted(q, 2, 1, 2, 7, 100);
    vs[3] = admitted(q, 3, 1, 2, 8, 200);
    p = kiln_q_preempt(q, &x, vs, 4);
    CHECK(!p.fits && p.over_threshold == 2);
    for (size_t i = 0; i < 4; i++)
        CHECK(vs[i].reason == KILN_QPR_NONE);
    CHECK(used(q, 0) == 2 && used(q, 1) == 6);
    /* without the threshold, below x's priority is enough */
    q->cqs[0].has_max_priority_threshold = false;
    p = kiln_q_preempt(q, &x, vs, 4);
    CHECK(p.fits && p.over_threshold == 0);
    CHECK(by_ref(vs, 4, 2)->reason == KILN_QPR_RECLAIM_WHILE_BORROWING);
    CHECK(by_ref(vs, 4, 3)->reason == KILN_QPR_NONE);
    /* borrowWithinCohort Never: none of b's for a borrowing x */
    q->cqs[0].borrow_within = KILN_QP_NEVER;
    p = kiln_q_preempt(q, &x, vs, 4);
    CHECK(!p.fits && p.over_threshold == 0);
    kiln_queues_free(q);
}

static void test_victim_order(void)
{
    kiln_qvictim v[4] = {{.ref = 0, .prio = 1, .admit_ns = 100},
                         {.ref = 1, .prio = 1, .admit_ns = 300},
                         {.ref = 2, .prio = 9, .admit_ns = 50, .other = true},
                         {.ref = 3, .prio = 0, .admit_ns = 10}};
    qsort(v, 4, sizeof *v, kiln_q_victim_order);
    /* another queue's first (whatever its priority), then the lowest
     * priority, then the most recently admitted */
    CHECK(v[0].ref == 2 && v[1].ref == 3 && v[2].ref == 1 && v[3].ref == 0);
}

static void test_heads(void)
{
    qdef defs[] = {{"a", "lab", 4, NULL, "  fairSharing:\n    weight: 1\n"},
                   {"b", "lab", 4, NULL, "  fairSharing:\n    weight: 1\n"},
                   {"c", "lab", 4, NULL, NULL}};
    kiln_queues *q = load(defs, 3);
    CHECK(q != NULL);
    if (!q) return;
    kiln_qcand hi = cand(0, 1, 100, 500), lo = cand(1, 1, 1, 100), plain = cand(2, 1, 50, 100);
    /* one that need not borrow goes before a borrower of higher priority */
    CHECK(kiln_q_goes_first(q, &lo, false, 900, &hi, true, 0));
    CHECK(!kiln_q_goes_first(q, &hi, true, 0, &lo, false, 900));
    /* both with fairSharing: the lower share, whatever the priority */
    CHECK(kiln_q_goes_first(q, &lo, true, 100, &hi, true, 200));
    CHECK(!kiln_q_goes_first(q, &hi, true, 200, &lo, true, 100));
    /* equal shares, or one without fairSharing: priority */
    CHECK(kiln_q_goes_first(q, &hi, true, 100, &lo, true, 100));
    CHECK(kiln_q_goes_first(q, &hi, false, 900, &plain, false, 0));
    CHECK(!kiln_q_goes_first(q, &plain, false, 0, &hi, false, 900));
    /* then age, then arrival */
    kiln_qcand old = cand(2, 1, 50, 50), twin = plain;
    twin.seq = plain.seq + 1;
    CHECK(kiln_q_goes_first(q, &old, false, 0, &plain, false, 0));
    CHECK(!kiln_q_goes_first(q, &plain, false, 0, &old, false, 0));
    CHECK(kiln_q_goes_first(q, &plain, false, 0, &twin, false, 0));
    CHECK(!kiln_q_goes_first(q, &twin, false, 0, &plain, false, 0));
    kiln_queues_free(q);

    /* a queue's order: routed first, by ClusterQueue; then the lower
     * admission fair share, the higher priority, the older, the earlier */
    kiln_qcand c[7] = {cand(1, 1, 0, 0),   cand(0, 1, 5, 200), cand(0, 1, 5, 100),
                       cand(0, 1, 9, 300), cand(0, 1, 1, 900), cand(0, 1, 5, 100),
                       cand(1, 1, 100, 0)};
    for (size_t i = 0; i < 7; i++) {
        c[i].seq = (int64_t)i;
        c[i].afs = 0.5;
    }
    c[0].routed = false;
    c[4].afs = 0.25; /* its LocalQueue used less: first, though its priority is lowest */
    qsort(c, 7, sizeof *c, kiln_q_queue_order);
    int64_t want[7] = {4, 3, 2, 5, 1, 6, 0};
    for (size_t i = 0; i < 7; i++)
        CHECK_MSG(c[i].seq == want[i], "position %zu: %lld, want %lld", i, (long long)c[i].seq,
                  (long long)want[i]);
    CHECK(!c[6].routed);
}

int main(void)
{
    test_fit();
    test_within_cq();
    test_reclaim();
    test_reclaim_stops();
    test_borrow_within();
    test_victim_order();
    test_heads();
    TEST_DONE();
}
