/* src/queues/quota.c - routing, requests and quota arithmetic (kiln/queues.h).
 *
 * Quota as Kueue counts it, per flavor and resource:
 *  - without a cohort, a ClusterQueue holds at most its nominalQuota;
 *  - in a cohort, each ClusterQueue keeps (nominalQuota - lendingLimit) to
 *    itself (all of it when lendingLimit is unset it lends everything) and
 *    puts the rest in the cohort's pool; what a queue uses beyond its kept
 *    part comes out of the pool, and it may hold at most nominalQuota +
 *    borrowingLimit (no limit when unset). A queue using more than its
 *    nominalQuota borrows. */
#include <stdio.h>
#include <string.h>

#include "kiln/queues.h"

const char *kiln_queues_res_name(kiln_qres r)
{
    static const char *const n[KILN_QRES_COUNT] = {"nvidia.com/gpu", "cpu", "memory", "pods"};
    return r < KILN_QRES_COUNT ? n[r] : "?";
}

void kiln_queues_format(kiln_qres r, int64_t v, char *buf, size_t len)
{
    if (r == KILN_QRES_CPU && v % 1000)
        snprintf(buf, len, "%lldm", (long long)v);
    else if (r == KILN_QRES_CPU)
        snprintf(buf, len, "%lld", (long long)(v / 1000));
    else if (r == KILN_QRES_MEMORY && v && v % (1LL << 30) == 0)
        snprintf(buf, len, "%lldGi", (long long)(v >> 30));
    else if (r == KILN_QRES_MEMORY && v && v % (1LL << 20) == 0)
        snprintf(buf, len, "%lldMi", (long long)(v >> 20));
    else
        snprintf(buf, len, "%lld", (long long)v);
}

/* ---------- routing ---------- */

static bool admits_project(const kiln_qcq *cq, const char *project)
{
    if (cq->all_namespaces) return true;
    for (size_t i = 0; i < cq->namespaces.n; i++)
        if (strcmp(cq->namespaces.v[i], project) == 0) return true;
    return false;
}

long kiln_queues_route(const kiln_queues *q, const char *project, const kiln_map *labels, char *why,
                       size_t whylen)
{
    const char *want = labels ? kiln_map_get(labels, KILN_QUEUE_LABEL) : NULL;
    const char *name = want ? want : KILN_DEFAULT_LOCAL_QUEUE;
    for (size_t i = 0; i < q->nlqs; i++) {
        const kiln_qlq *lq = &q->lqs[i];
        if (strcmp(lq->name, name) != 0 || strcmp(lq->namespace_, project) != 0) continue;
        if (!admits_project(&q->cqs[lq->cq], project)) {
            snprintf(why, whylen,
                     "LocalQueue %s/%s points to ClusterQueue %s, whose namespaceSelector "
                     "leaves project %s out",
                     project, name, q->cqs[lq->cq].name, project);
            return -1;
        }
        return (long)i;
    }
    if (want) {
        bool elsewhere = false;
        for (size_t i = 0; i < q->nlqs; i++)
            elsewhere |= strcmp(q->lqs[i].name, want) == 0;
        snprintf(why, whylen, "label %s: no LocalQueue '%s' in project %s%s", KILN_QUEUE_LABEL,
                 want, project,
                 elsewhere ? " (a LocalQueue of that name is in another project)" : "");
    } else {
        snprintf(why, whylen,
                 "project %s has no LocalQueue named '%s' and the job has no %s label: kilnd runs "
                 "with --queues, so every job goes through a queue",
                 project, KILN_DEFAULT_LOCAL_QUEUE, KILN_QUEUE_LABEL);
    }
    return -1;
}

bool kiln_queues_priority(const kiln_queues *q, const kiln_map *labels, int64_t fallback,
                          int64_t *out, char *why, size_t whylen)
{
    const char *pc = labels ? kiln_map_get(labels, KILN_PRIORITY_CLASS_LABEL) : NULL;
    *out = fallback;
    if (!pc) return true;
    for (size_t i = 0; i < q->npcs; i++)
        if (strcmp(q->pcs[i].name, pc) == 0) {
            *out = q->pcs[i].value;
            return true;
        }
    snprintf(why, whylen, "label %s: no WorkloadPriorityClass '%s' in the queues file",
             KILN_PRIORITY_CLASS_LABEL, pc);
    return false;
}

/* ---------- requests ---------- */

static bool is_gpu(const char *accel)
{
    return accel && strncmp(accel, "TPU", 3) != 0;
}

void kiln_queues_request(const kiln_replica_plan *plans, size_t np, int64_t req[KILN_QRES_COUNT])
{
    memset(req, 0, KILN_QRES_COUNT * sizeof *req);
    for (size_t p = 0; p < np; p++) {
        const kiln_replica_plan *pl = &plans[p];
        if (is_gpu(pl->accelerator_type))
            req[KILN_QRES_GPU] += pl->count * pl->accelerators_per_replica;
        req[KILN_QRES_CPU] += pl->count * (int64_t)pl->vcpus * 1000;
        req[KILN_QRES_MEMORY] += pl->count * (int64_t)(pl->memory_gb * 1073741824.0);
        req[KILN_QRES_PODS] += pl->count; /* a replica is one pod */
    }
}

/* ---------- quota ---------- */

static int64_t over(int64_t a, int64_t b)
{
    return a > b ? a - b : 0;
}

/* ---------- the cohort tree (Kueue's resource nodes), per flavor and resource ---------- */

/* A node: a ClusterQueue (cq) or a cohort (index into cnodes). */
typedef struct node {
    bool cq;
    size_t i;
} node;

/* The node's own quota entry for (f, r) in its resource groups, or NULL. */
static const kiln_qgflavor *own(const kiln_queues *q, node n, size_t f, kiln_qres r)
{
    const kiln_qgroup *groups = n.cq ? q->cqs[n.i].groups : q->cnodes[n.i].groups;
    size_t ng = n.cq ? q->cqs[n.i].ngroups : q->cnodes[n.i].ngroups;
    for (size_t g = 0; g < ng; g++) {
        if (!groups[g].covers[r]) continue;
        for (size_t k = 0; k < groups[g].n; k++)
            if (groups[g].flavors[k].flavor == f) return &groups[g].flavors[k];
    }
    return NULL;
}

static long parent_of(const kiln_queues *q, node n)
{
    return n.cq ? q->cqs[n.i].cohort_i : q->cnodes[n.i].parent;
}

static int64_t subtree(const kiln_queues *q, node n, size_t f, kiln_qres r);

static int64_t guaranteed(const kiln_queues *q, node n, size_t f, kiln_qres r)
{
    const kiln_qgflavor *e = own(q, n, f, r);
    if (!e || !e->q[r].has_lending_limit) return 0;
    return over(subtree(q, n, f, r), e->q[r].lending_limit);
}

static int64_t subtree(const kiln_queues *q, node n, size_t f, kiln_qres r)
{
    const kiln_qgflavor *e = own(q, n, f, r);
    int64_t v = e ? e->q[r].nominal : 0;
    if (n.cq) return v;
    for (size_t c = 0; c < q->ncqs; c++)
        if (q->cqs[c].cohort_i == (long)n.i) {
            node ch = {true, c};
            v += subtree(q, ch, f, r) - guaranteed(q, ch, f, r);
        }
    for (size_t k = 0; k < q->ncnodes; k++)
        if (q->cnodes[k].parent == (long)n.i) {
            node ch = {false, k};
            v += subtree(q, ch, f, r) - guaranteed(q, ch, f, r);
        }
    return v;
}

static int64_t usage(const kiln_queues *q, node n, size_t f, kiln_qres r, bool empty)
{
    if (empty) return 0;
    if (n.cq) {
        const kiln_qgflavor *e = own(q, n, f, r);
        return e ? e->usage[r] : 0;
    }
    int64_t v = 0;
    for (size_t c = 0; c < q->ncqs; c++)
        if (q->cqs[c].cohort_i == (long)n.i) {
            node ch = {true, c};
            v += over(usage(q, ch, f, r, false), guaranteed(q, ch, f, r));
        }
    for (size_t k = 0; k < q->ncnodes; k++)
        if (q->cnodes[k].parent == (long)n.i) {
            node ch = {false, k};
            v += over(usage(q, ch, f, r, false), guaranteed(q, ch, f, r));
        }
    return v;
}

/* Kueue's available(): what node n may still use of (f, r), its own and
 * what its ancestors lend it. */
static int64_t available(const kiln_queues *q, node n, size_t f, kiln_qres r, bool empty)
{
    int64_t sub = subtree(q, n, f, r), use = usage(q, n, f, r, empty);
    long p = parent_of(q, n);
    if (p < 0) return sub - use;
    int64_t g = guaranteed(q, n, f, r);
    int64_t local = over(g, use);
    int64_t from_parent = available(q, (node){false, (size_t)p}, f, r, empty);
    const kiln_qgflavor *e = own(q, n, f, r);
    if (e && e->q[r].has_borrowing_limit) {
        int64_t cap = sub - g - over(use, g) + e->q[r].borrowing_limit;
        if (cap < from_parent) from_parent = cap;
    }
    return local + from_parent;
}

int64_t kiln_queues_available(const kiln_queues *q, size_t cq, size_t f, kiln_qres r, bool empty)
{
    return available(q, (node){true, cq}, f, r, empty);
}

int64_t kiln_queues_cohort_quota(const kiln_queues *q, size_t k, size_t f, kiln_qres r)
{
    return subtree(q, (node){false, k}, f, r);
}

int64_t kiln_queues_cohort_usage(const kiln_queues *q, size_t k, size_t f, kiln_qres r)
{
    return usage(q, (node){false, k}, f, r, false);
}

static long root_of(const kiln_queues *q, long k)
{
    /* the loader refuses cycles; the bound only guards the walk */
    for (size_t steps = 0; k >= 0 && q->cnodes[k].parent >= 0 && steps <= q->ncnodes; steps++)
        k = q->cnodes[k].parent;
    return k;
}

bool kiln_queues_same_tree(const kiln_queues *q, size_t a, size_t b)
{
    long ra = root_of(q, q->cqs[a].cohort_i), rb = root_of(q, q->cqs[b].cohort_i);
    return ra >= 0 && ra == rb;
}

/* Whether `want` more of r fits flavor entry gf of cq; `why` when not. */
static bool fits_one(const kiln_queues *q, size_t cq_i, const kiln_qgflavor *gf, kiln_qres r,
                     int64_t want, bool *borrows, char *why, size_t whylen)
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    const kiln_qquota *qq = &gf->q[r];
    int64_t after = gf->usage[r] + want;
    char a[32], b[32], c[32];
    const char *fname = q->flavors[gf->flavor].name;
    if (cq->cohort_i < 0) {
        if (after <= qq->nominal) return true;
        kiln_queues_format(r, want, a, sizeof a);
        kiln_queues_format(r, gf->usage[r], b, sizeof b);
        kiln_queues_format(r, qq->nominal, c, sizeof c);
        snprintf(why, whylen, "%s of flavor %s: asks %s, %s of nominalQuota %s in use",
                 kiln_queues_res_name(r), fname, a, b, c);
        return false;
    }
    if (qq->has_borrowing_limit && after > qq->nominal + qq->borrowing_limit) {
        kiln_queues_format(r, want, a, sizeof a);
        kiln_queues_format(r, gf->usage[r], b, sizeof b);
        kiln_queues_format(r, qq->nominal + qq->borrowing_limit, c, sizeof c);
        snprintf(why, whylen,
                 "%s of flavor %s: asks %s, %s in use of nominalQuota + borrowingLimit %s",
                 kiln_queues_res_name(r), fname, a, b, c);
        return false;
    }
    int64_t avail = kiln_queues_available(q, cq_i, gf->flavor, r, false);
    if (want > avail) {
        /* what the cohort (and the tree above it) still lends this queue */
        int64_t g = qq->has_lending_limit ? over(qq->nominal, qq->lending_limit) : 0;
        int64_t lends = avail - over(g, gf->usage[r]);
        kiln_queues_format(r, want, a, sizeof a);
        kiln_queues_format(r, gf->usage[r], b, sizeof b);
        kiln_queues_format(r, lends > 0 ? lends : 0, c, sizeof c);
        snprintf(why, whylen,
                 "%s of flavor %s: asks %s, %s in use in this ClusterQueue; cohort %s has %s "
                 "left to lend",
                 kiln_queues_res_name(r), fname, a, b, cq->cohort, c);
        return false;
    }
    if (after > qq->nominal) *borrows = true;
    return true;
}

bool kiln_queues_fit(const kiln_queues *q, size_t cq_i, const int64_t req[KILN_QRES_COUNT],
                     const bool *usable, kiln_qassign *a, char *why, size_t whylen)
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    memset(a, 0, sizeof *a);
    for (size_t g = 0; g < 8; g++)
        a->flavor[g] = -1;
    if (why && whylen) why[0] = 0;
    for (int r = 0; r < KILN_QRES_COUNT; r++) {
        bool covered = false;
        for (size_t g = 0; g < cq->ngroups; g++)
            covered |= cq->groups[g].covers[r];
        if (req[r] > 0 && !covered && r == KILN_QRES_GPU) {
            snprintf(why, whylen, "ClusterQueue %s does not cover nvidia.com/gpu", cq->name);
            return false;
        }
    }
    for (size_t g = 0; g < cq->ngroups && g < 8; g++) {
        const kiln_qgroup *grp = &cq->groups[g];
        bool asks = false;
        for (int r = 0; r < KILN_QRES_COUNT; r++)
            asks |= grp->covers[r] && req[r] > 0;
        if (!asks) continue;
        char first_why[400] = "";
        bool found = false;
        long borrowing = -1; /* whenCanBorrow TryNextFlavor: the first fit that borrows */
        for (size_t i = 0; i < grp->n && !found; i++) {
            const kiln_qgflavor *gf = &grp->flavors[i];
            if (usable && !usable[gf->flavor]) {
                if (!first_why[0])
                    snprintf(first_why, sizeof first_why,
                             "flavor %s: no node with its nodeLabels can run the job",
                             q->flavors[gf->flavor].name);
                continue;
            }
            bool ok = true, borrows = false;
            char w[400] = "";
            for (int r = 0; r < KILN_QRES_COUNT && ok; r++)
                if (grp->covers[r] && req[r] > 0)
                    ok = fits_one(q, cq_i, gf, (kiln_qres)r, req[r], &borrows, w, sizeof w);
            if (ok && borrows && cq->borrow_try_next) {
                if (borrowing < 0) borrowing = (long)gf->flavor;
            } else if (ok) {
                a->flavor[g] = (long)gf->flavor;
                a->borrows |= borrows;
                found = true;
            } else if (!first_why[0] || (usable && strstr(first_why, "no node"))) {
                snprintf(first_why, sizeof first_why, "%s", w);
            }
        }
        if (!found && borrowing >= 0) {
            a->flavor[g] = borrowing;
            a->borrows = true;
            found = true;
        }
        if (!found) {
            snprintf(why, whylen, "%s", first_why[0] ? first_why : "no flavor fits");
            return false;
        }
    }
    return true;
}

static kiln_qgflavor *entry(kiln_queues *q, size_t cq_i, size_t g, long f)
{
    kiln_qcq *cq = &q->cqs[cq_i];
    if (g >= cq->ngroups || f < 0) return NULL;
    for (size_t i = 0; i < cq->groups[g].n; i++)
        if (cq->groups[g].flavors[i].flavor == (size_t)f) return &cq->groups[g].flavors[i];
    return NULL;
}

void kiln_queues_charge(kiln_queues *q, size_t cq_i, const kiln_qassign *a,
                        const int64_t req[KILN_QRES_COUNT], int sign)
{
    kiln_qcq *cq = &q->cqs[cq_i];
    for (size_t g = 0; g < cq->ngroups && g < 8; g++) {
        kiln_qgflavor *gf = entry(q, cq_i, g, a->flavor[g]);
        if (!gf) continue;
        for (int r = 0; r < KILN_QRES_COUNT; r++)
            if (cq->groups[g].covers[r]) gf->usage[r] += sign * req[r];
    }
}

void kiln_queues_reset_usage(kiln_queues *q)
{
    for (size_t c = 0; c < q->ncqs; c++)
        for (size_t g = 0; g < q->cqs[c].ngroups; g++)
            for (size_t i = 0; i < q->cqs[c].groups[g].n; i++)
                memset(q->cqs[c].groups[g].flavors[i].usage, 0,
                       sizeof q->cqs[c].groups[g].flavors[i].usage);
    for (size_t i = 0; i < q->nlqs; i++)
        memset(q->lqs[i].running, 0, sizeof q->lqs[i].running);
}

void kiln_queues_borrowed(const kiln_queues *q, size_t cq_i, int64_t out[KILN_QRES_COUNT])
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    memset(out, 0, KILN_QRES_COUNT * sizeof *out);
    for (size_t g = 0; g < cq->ngroups; g++)
        for (size_t i = 0; i < cq->groups[g].n; i++)
            for (int r = 0; r < KILN_QRES_COUNT; r++)
                if (cq->groups[g].covers[r])
                    out[r] += over(cq->groups[g].flavors[i].usage[r],
                                   cq->groups[g].flavors[i].q[r].nominal);
}

int64_t kiln_queues_share(const kiln_queues *q, size_t cq_i, const int64_t extra[KILN_QRES_COUNT])
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    if (cq->cohort_i < 0) return 0;
    int64_t best = 0;
    for (int r = 0; r < KILN_QRES_COUNT; r++) {
        int64_t above = 0, lend = 0, nominal = 0, usage = 0;
        for (size_t g = 0; g < cq->ngroups; g++) {
            if (!cq->groups[g].covers[r]) continue;
            for (size_t i = 0; i < cq->groups[g].n; i++) {
                nominal += cq->groups[g].flavors[i].q[r].nominal;
                usage += cq->groups[g].flavors[i].usage[r];
            }
        }
        usage += extra ? extra[r] : 0;
        above = over(usage, nominal);
        /* the cohort's lendable total of this resource, every flavor: its
         * subtree quota (its members' lendable quota and its own) */
        for (size_t f = 0; f < q->nflavors; f++)
            lend += kiln_queues_cohort_quota(q, (size_t)cq->cohort_i, f, (kiln_qres)r);
        if (above > 0 && lend > 0) {
            int64_t s = above * 1000 / lend;
            if (s > best) best = s;
        }
    }
    if (best == 0) return 0;
    if (cq->weight <= 0) return INT64_MAX;
    return (int64_t)((double)best / cq->weight);
}

const kiln_taint *kiln_queues_flavor_untolerated(const kiln_qflavor *f, const kiln_toleration *tol,
                                                 size_t n)
{
    for (size_t i = 0; i < f->n_node_taints; i++) {
        const kiln_taint *t = &f->node_taints[i];
        if (strcmp(t->effect, "NoSchedule") != 0 && strcmp(t->effect, "NoExecute") != 0) continue;
        if (!kiln_tolerations_tolerate(tol, n, f->tolerations, f->n_tolerations, t)) return t;
    }
    return NULL;
}

bool kiln_queues_flavor_matches(const kiln_qflavor *f, const kiln_map *node_labels)
{
    for (size_t i = 0; i < f->node_labels.n; i++) {
        const char *v = kiln_map_get(node_labels, f->node_labels.keys[i]);
        if (!v || strcmp(v, f->node_labels.vals[i]) != 0) return false;
    }
    return true;
}

long kiln_queues_node_flavor(const kiln_queues *q, size_t cq_i, size_t g,
                             const kiln_map *node_labels)
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    if (g >= cq->ngroups) return -1;
    for (size_t i = 0; i < cq->groups[g].n; i++) {
        size_t f = cq->groups[g].flavors[i].flavor;
        if (kiln_queues_flavor_matches(&q->flavors[f], node_labels)) return (long)f;
    }
    return -1;
}

long kiln_queues_persistent_lq(const kiln_queues *q, const char *project, const char *id, char *why,
                               size_t whylen)
{
    long cq = -1;
    for (size_t c = 0; c < q->ncqs && cq < 0; c++)
        if (q->cqs[c].persistent_resource && strcmp(q->cqs[c].persistent_resource, id) == 0)
            cq = (long)c;
    if (cq < 0) {
        snprintf(why, whylen,
                 "'%s': no ClusterQueue is declared as that persistent resource (a ClusterQueue's "
                 "label " KILN_PERSISTENT_RESOURCE_LABEL ": %s)",
                 id, id);
        return -1;
    }
    for (size_t i = 0; i < q->nlqs; i++)
        if ((long)q->lqs[i].cq == cq && strcmp(q->lqs[i].namespace_, project) == 0) return (long)i;
    snprintf(why, whylen,
             "'%s' is ClusterQueue %s, and project %s has no LocalQueue for it (a LocalQueue in "
             "namespace %s with spec.clusterQueue: %s)",
             id, q->cqs[cq].name, project, project, q->cqs[cq].name);
    return -1;
}

long kiln_queues_topology_for(const kiln_queues *q, size_t cq_i, const char *level)
{
    const kiln_qcq *cq = &q->cqs[cq_i];
    for (size_t g = 0; g < cq->ngroups; g++)
        for (size_t i = 0; i < cq->groups[g].n; i++) {
            long t = q->flavors[cq->groups[g].flavors[i].flavor].topology;
            if (t < 0) continue;
            const kiln_strv *lv = &q->topologies[t].levels;
            if (!level || kiln_topology_level((const char *const *)lv->v, lv->n, level) >= 0)
                return t;
        }
    return -1;
}

bool kiln_queues_flavor_topology_ok(const kiln_queues *q, size_t f, const kiln_job *job)
{
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        kiln_topology_request t;
        if (!kiln_job_topology(job, (kiln_role)r, &t)) continue;
        long ti = q->flavors[f].topology;
        if (ti < 0) return false;
        const char *lv = t.required ? t.required : t.preferred;
        const kiln_strv *v = &q->topologies[ti].levels;
        if (lv && kiln_topology_level((const char *const *)v->v, v->n, lv) < 0) return false;
    }
    return true;
}

bool kiln_queues_check_job(const kiln_queues *q, const char *project, const kiln_job *job,
                           const kiln_replica_plan *plans, size_t np, char *why, size_t whylen)
{
    long lq = kiln_queues_route(q, project, &job->labels, why, whylen);
    if (lq < 0) return false;
    int64_t prio;
    if (!kiln_queues_priority(q, &job->labels, 0, &prio, why, whylen)) return false;
    /* a tuning job: `plans` are one trial's gang, each trial a workload */
    int64_t req[KILN_QRES_COUNT];
    kiln_queues_request(plans, np, req);
    const kiln_qcq *cq = &q->cqs[q->lqs[lq].cq];
    /* a topology request: some flavor of the queue has a Topology with its level */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        kiln_topology_request t;
        if (!kiln_job_topology(job, (kiln_role)r, &t)) continue;
        const char *lv = t.required ? t.required : t.preferred;
        if (kiln_queues_topology_for(q, q->lqs[lq].cq, lv) >= 0) continue;
        if (lv)
            snprintf(why, whylen,
                     "the %s replicas ask for topology level '%s'; no flavor of ClusterQueue %s "
                     "has a Topology with that level (a ResourceFlavor's spec.topologyName)",
                     kiln_role_name((kiln_role)r), lv, cq->name);
        else
            snprintf(why, whylen,
                     "the %s replicas ask for topology-aware placement; no flavor of "
                     "ClusterQueue %s has a Topology (a ResourceFlavor's spec.topologyName)",
                     kiln_role_name((kiln_role)r), cq->name);
        return false;
    }
    /* the most each group's best flavor could ever hold for this queue */
    for (int r = 0; r < KILN_QRES_COUNT; r++) {
        if (req[r] <= 0) continue;
        bool covered = false;
        int64_t most = 0;
        for (size_t g = 0; g < cq->ngroups; g++) {
            if (!cq->groups[g].covers[r]) continue;
            covered = true;
            for (size_t i = 0; i < cq->groups[g].n; i++) {
                const kiln_qgflavor *gf = &cq->groups[g].flavors[i];
                int64_t cap =
                    kiln_queues_available(q, q->lqs[lq].cq, gf->flavor, (kiln_qres)r, true);
                if (cap > most) most = cap;
            }
        }
        char a[32], b[32];
        kiln_queues_format((kiln_qres)r, req[r], a, sizeof a);
        kiln_queues_format((kiln_qres)r, most, b, sizeof b);
        if (!covered && r == KILN_QRES_GPU) {
            snprintf(why, whylen,
                     "the job asks %s nvidia.com/gpu; ClusterQueue %s (LocalQueue %s/%s) "
                     "does not cover nvidia.com/gpu",
                     a, cq->name, project, q->lqs[lq].name);
            return false;
        }
        if (covered && req[r] > most) {
            snprintf(why, whylen,
                     "the job asks %s %s; ClusterQueue %s can never hold more than %s (its quota "
                     "with what its cohort may lend)",
                     a, kiln_queues_res_name((kiln_qres)r), cq->name, b);
            return false;
        }
    }
    return true;
}
