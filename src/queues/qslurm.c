/* src/queues/qslurm.c - what a Kueue file means under --executor slurm
 * (docs/queues.md, "Under --executor slurm"; docs/slurm.md, "Queues").
 *
 * With --slurm-queues accounts Slurm's own scheduler admits each job's
 * allocation, so the file is carried out with Slurm's own accounting objects
 * (src/exec/slurm/accounts.c makes them with sacctmgr): a ClusterQueue is an
 * account whose GrpTRES is its nominal quota and whose Fairshare is its
 * fairSharing.weight, a LocalQueue an association of its project's Unix user
 * to that account, a WorkloadPriorityClass a QOS of that Priority. This file
 * says what those objects are (pure arithmetic, no Slurm) and refuses, each
 * at its path, the fields Slurm gives no meaning (cohort lending, flavors'
 * node labels, StrictFIFO, preemption: Slurm's frees nodes, not an
 * account's quota) or that kiln does not carry into Slurm (a LocalQueue's
 * stopPolicy: Hold), naming Slurm's way to do it. A ClusterQueue's
 * stopPolicy: Hold is its account's GrpJobs=0: pending jobs stay pending
 * (AssocGrpJobsLimit), running ones run on, as Kueue's Hold. */
#include <stdio.h>
#include <string.h>

#include "kiln/queues.h"

static const char *res_name(int r)
{
    return kiln_queues_res_name((kiln_qres)r);
}

static void add(kiln_diag *d, const char *kind, const char *name, const char *field,
                const char *why)
{
    char path[600];
    snprintf(path, sizeof path, "%s %s: %s", kind, name, field);
    kiln_diag_add(d, path, "%s", why);
}

#define MIB (1024LL * 1024LL)

static void cq_fields(const kiln_qcq *c, bool machine_resources, kiln_diag *d)
{
    char f[300], why[600];
    const char *n = c->name;
    /* a held account's jobs run on (GrpJobs=0); kilnd does not cancel and
     * requeue them through Slurm */
    if (c->stop == KILN_QSTOP_HOLD_AND_DRAIN)
        add(d, "ClusterQueue", n, "spec.stopPolicy: HoldAndDrain",
            "not carried into Slurm by kiln: Slurm's GrpJobs=0 holds the account's new jobs "
            "but does not stop those running; use Hold (and scancel or scontrol requeue the "
            "running jobs)");
    for (size_t g = 0; g < c->ngroups; g++) {
        const kiln_qgroup *grp = &c->groups[g];
        /* kiln counts a replica's machine type's CPUs and memory against the
         * quota; Slurm counts what sbatch asked, which is 1 CPU and its
         * default memory unless the machine types are passed on */
        for (int r = KILN_QRES_CPU; r <= KILN_QRES_MEMORY && !machine_resources; r++)
            if (grp->covers[r]) {
                snprintf(f, sizeof f, "spec.resourceGroups[%zu].coveredResources %s", g,
                         res_name(r));
                add(d, "ClusterQueue", n, f,
                    "under --executor slurm a replica asks Slurm for its machine type's CPUs "
                    "and memory only with --slurm-machine-resources yes (else 1 CPU and "
                    "Slurm's default memory): without it the account's GrpTRES would count "
                    "other amounts than kiln's quota");
            }
        if (grp->covers[KILN_QRES_PODS]) {
            snprintf(f, sizeof f, "spec.resourceGroups[%zu].coveredResources pods", g);
            add(d, "ClusterQueue", n, f,
                "meaningless in Slurm: an account's GrpTRES counts CPUs, memory, GPUs and "
                "nodes, not a job's replicas (kiln's pods); use --slurm-queues kiln, which "
                "counts them");
        }
        if (grp->n > 1) {
            snprintf(f, sizeof f, "spec.resourceGroups[%zu].flavors[1]", g);
            add(d, "ClusterQueue", n, f,
                "meaningless in Slurm: an account has one GrpTRES per resource, not one per "
                "flavor (jobs go to the one partition --slurm-partition names): give each "
                "resource group one flavor");
        }
        for (size_t i = 0; i < grp->n; i++)
            for (int r = 0; r < KILN_QRES_COUNT; r++) {
                if (!grp->covers[r]) continue;
                const kiln_qquota *q = &grp->flavors[i].q[r];
                if (r == KILN_QRES_CPU && q->nominal % 1000) {
                    snprintf(f, sizeof f, "spec.resourceGroups[%zu].flavors[%zu] cpu nominalQuota",
                             g, i);
                    add(d, "ClusterQueue", n, f,
                        "Slurm's GrpTRES counts whole CPUs: give a whole number of CPUs");
                }
                if (r == KILN_QRES_MEMORY && q->nominal % MIB) {
                    snprintf(f, sizeof f,
                             "spec.resourceGroups[%zu].flavors[%zu] memory nominalQuota", g, i);
                    add(d, "ClusterQueue", n, f,
                        "Slurm's GrpTRES counts memory in MiB: give a whole number of Mi");
                }
                if (q->has_borrowing_limit || q->has_lending_limit) {
                    snprintf(f, sizeof f, "spec.resourceGroups[%zu].flavors[%zu] %s %s", g, i,
                             res_name(r),
                             q->has_borrowing_limit ? "borrowingLimit" : "lendingLimit");
                    add(d, "ClusterQueue", n, f,
                        "meaningless in Slurm: an account's GrpTRES is a hard cap and Slurm "
                        "lends nothing between accounts (idle GPUs go to others only through a "
                        "shared partition or QOS, taken back by QOS preemption)");
                }
            }
    }
    if (c->cohort)
        add(d, "ClusterQueue", n, "spec.cohort",
            "meaningless in Slurm: accounts lend no quota to each other (a parent account's "
            "GrpTRES caps its children together, it does not lend between them)");
    if (c->afs)
        add(d, "ClusterQueue", n, "spec.admissionScope",
            "meaningless in Slurm as kiln maps the file: a LocalQueue is an association, "
            "and Slurm orders an account's pending jobs by its own priority, not by each "
            "association's decayed usage; use --slurm-queues kiln");
    if (c->strategy == KILN_Q_STRICT_FIFO)
        add(d, "ClusterQueue", n, "spec.queueingStrategy: StrictFIFO",
            "meaningless in Slurm: its backfill scheduler starts a later job that fits before "
            "an earlier one that does not (BestEffortFIFO is what Slurm does)");
    if (c->within_cq != KILN_QP_NEVER || c->reclaim != KILN_QP_NEVER ||
        c->borrow_within != KILN_QP_NEVER)
        add(d, "ClusterQueue", n, "spec.preemption",
            "meaningless in Slurm as kiln maps the file: Slurm's preemption (a QOS's Preempt= "
            "list, PreemptType=preempt/qos, PreemptMode=REQUEUE) frees nodes, never an "
            "account's GrpTRES (a higher-QOS job of a full account stays PENDING with "
            "AssocGrpGRES), so withinClusterQueue cannot happen, and reclaimWithinCohort "
            "needs a cohort, which Slurm has not; a site wanting node preemption sets it in "
            "Slurm");
    if (c->fair_sharing &&
        (c->weight < 1 || c->weight != (double)(long)c->weight || c->weight > 1e6)) {
        snprintf(why, sizeof why,
                 "the weight is the account's Slurm Fairshare, a whole number of shares from 1 "
                 "(got %g)",
                 c->weight);
        add(d, "ClusterQueue", n, "spec.fairSharing.weight", why);
    }
}

/* A node's name as a label: what Slurm can be asked (--nodelist). */
static bool names_a_node(const char *key)
{
    return strcmp(key, "kubernetes.io/hostname") == 0 || strcmp(key, "kiln.dev/node") == 0;
}

/* Each flavor's nodeLabels that Slurm cannot honour: every one when Slurm
 * admits (--slurm-queues accounts: no flavor is ever assigned), under kiln's
 * own admission those that do not name a node (they pin the admitted job's
 * replicas there, as a nodeSelector of the same key does). One diagnostic
 * per label, named. */
static void flavor_label_refusals(const kiln_queues *q, bool steps, kiln_diag *d)
{
    for (size_t i = 0; i < q->nflavors; i++) {
        const kiln_map *nl = &q->flavors[i].node_labels;
        /* Slurm admits: no flavor is assigned, so no taint of one is
         * checked and no toleration of one added */
        if (!steps && q->flavors[i].n_node_taints)
            add(d, "ResourceFlavor", q->flavors[i].name, "spec.nodeTaints",
                "meaningless under --slurm-queues accounts: Slurm admits each job to its "
                "account, and no flavor is assigned whose taints could be checked");
        if (q->flavors[i].topology >= 0)
            add(d, "ResourceFlavor", q->flavors[i].name, "spec.topologyName",
                "a Slurm partition's nodes carry no topology labels: under --executor slurm "
                "Slurm places the job's nodes (its topology/tree or topology/block plugin, "
                "srun --switches); remove it");
        if (!steps && q->flavors[i].n_tolerations)
            add(d, "ResourceFlavor", q->flavors[i].name, "spec.tolerations",
                "meaningless under --slurm-queues accounts: Slurm admits each job to its "
                "account, and no flavor is assigned whose tolerations could be added");
        for (size_t k = 0; k < nl->n; k++) {
            if (steps && names_a_node(nl->keys[k])) continue;
            char field[300];
            snprintf(field, sizeof field, "spec.nodeLabels.%s", nl->keys[k]);
            add(d, "ResourceFlavor", q->flavors[i].name, field,
                steps ? "a Slurm partition's nodes carry no labels: under --executor slurm "
                        "only kubernetes.io/hostname or kiln.dev/node (a node's name) can be "
                        "asked of Slurm"
                      : "meaningless under --slurm-queues accounts: Slurm admits each job to "
                        "its account, in the one partition --slurm-partition names, and "
                        "chooses the nodes");
        }
    }
}

size_t kiln_queues_steps_refusals(const kiln_queues *q, kiln_diag *d)
{
    size_t before = d->n + d->dropped;
    flavor_label_refusals(q, true, d);
    return d->n + d->dropped - before;
}

size_t kiln_queues_slurm_refusals(const kiln_queues *q, bool machine_resources, kiln_diag *d)
{
    size_t before = d->n + d->dropped;
    flavor_label_refusals(q, false, d);
    for (size_t i = 0; i < q->cohorts.n; i++)
        add(d, "Cohort", q->cohorts.v[i], "kind: Cohort",
            "meaningless in Slurm: accounts lend no quota to each other");
    for (size_t i = 0; i < q->ncqs; i++)
        cq_fields(&q->cqs[i], machine_resources, d);
    for (size_t i = 0; i < q->nlqs; i++)
        if (q->lqs[i].stop != KILN_QSTOP_NONE) {
            char name[300];
            snprintf(name, sizeof name, "%s/%s", q->lqs[i].namespace_, q->lqs[i].name);
            add(d, "LocalQueue", name,
                q->lqs[i].stop == KILN_QSTOP_HOLD ? "spec.stopPolicy: Hold"
                                                  : "spec.stopPolicy: HoldAndDrain",
                "not carried into Slurm by kiln: a LocalQueue is an association of a Unix "
                "user, which other projects' LocalQueues may share (kilnd's own user by "
                "default), so its GrpJobs=0 could hold them too; hold the ClusterQueue, or "
                "the jobs (scontrol hold)");
        }
    for (size_t i = 0; i < q->npcs; i++)
        if (q->pcs[i].value < 0 || q->pcs[i].value > 2147483647LL)
            add(d, "WorkloadPriorityClass", q->pcs[i].name, "value",
                "the value is the Slurm QOS's Priority: 0 to 2147483647");
    return d->n + d->dropped - before;
}

void kiln_queues_slurm_tres(const kiln_queues *q, size_t cq, char *buf, size_t len)
{
    const kiln_qcq *c = &q->cqs[cq];
    int64_t v[KILN_QRES_COUNT];
    bool covered[KILN_QRES_COUNT] = {false};
    for (int r = 0; r < KILN_QRES_COUNT; r++)
        v[r] = 0;
    for (size_t g = 0; g < c->ngroups; g++)
        for (int r = 0; r < KILN_QRES_COUNT; r++)
            if (c->groups[g].covers[r]) {
                covered[r] = true;
                for (size_t i = 0; i < c->groups[g].n; i++)
                    v[r] += c->groups[g].flavors[i].q[r].nominal;
            }
    /* -1 clears a limit an earlier file set for a resource no longer covered */
    snprintf(buf, len, "gres/gpu=%lld,cpu=%lld,mem=%lld",
             covered[KILN_QRES_GPU] ? (long long)v[KILN_QRES_GPU] : -1LL,
             covered[KILN_QRES_CPU] ? (long long)(v[KILN_QRES_CPU] / 1000) : -1LL,
             covered[KILN_QRES_MEMORY] ? (long long)(v[KILN_QRES_MEMORY] / MIB) : -1LL);
}

long kiln_queues_slurm_fairshare(const kiln_queues *q, size_t cq)
{
    const kiln_qcq *c = &q->cqs[cq];
    return c->fair_sharing ? (long)c->weight : 1;
}
