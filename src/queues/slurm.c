/* src/queues/slurm.c - what a Kueue file means under --executor slurm
 * (docs/queues.md, "Under --executor slurm").
 *
 * The Slurm executor hands each job whole to Slurm at once and Slurm's own
 * scheduler admits it: kiln holds no queue there, so no field of the file
 * can be acted on by kiln itself. Each field present is named here with
 * what does its work in Slurm: either Slurm's own object for it (an
 * account's GrpTRES, a QOS's Preempt, the association's Fairshare), set
 * with sacctmgr by the site, or why Slurm has no meaning for it (cohort
 * lending, flavors' node labels, StrictFIFO). */
#include <stdio.h>

#include "kiln/queues.h"

static const char *res_name(int r)
{
    return r == KILN_QRES_GPU ? "nvidia.com/gpu" : r == KILN_QRES_CPU ? "cpu" : "memory";
}

static const char *tres_name(int r)
{
    return r == KILN_QRES_GPU ? "gres/gpu" : r == KILN_QRES_CPU ? "cpu" : "mem";
}

static void add(kiln_diag *d, const char *kind, const char *name, const char *field,
                const char *why)
{
    char path[600];
    snprintf(path, sizeof path, "%s %s: %s", kind, name, field);
    kiln_diag_add(d, path, "%s", why);
}

static void cq_fields(const kiln_qcq *c, kiln_diag *d)
{
    char f[300], why[600];
    const char *n = c->name;
    for (size_t g = 0; g < c->ngroups; g++)
        for (size_t i = 0; i < c->groups[g].n; i++)
            for (int r = 0; r < KILN_QRES_COUNT; r++) {
                const kiln_qgroup *grp = &c->groups[g];
                if (!grp->covers[r]) continue;
                const kiln_qquota *q = &grp->flavors[i].q[r];
                snprintf(f, sizeof f, "spec.resourceGroups[%zu].flavors[%zu] %s nominalQuota", g, i,
                         res_name(r));
                snprintf(why, sizeof why,
                         "under --executor slurm Slurm admits, not kiln: a nominal quota is the "
                         "Slurm account's GrpTRES (sacctmgr modify account %s set "
                         "GrpTRES=%s=%lld%s), set by the site in Slurm",
                         n, tres_name(r), (long long)q->nominal,
                         r == KILN_QRES_MEMORY ? " (bytes; Slurm counts MB)"
                         : r == KILN_QRES_CPU  ? " (millicores; Slurm counts CPUs)"
                                               : "");
                add(d, "ClusterQueue", n, f, why);
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
    if (c->cohort)
        add(d, "ClusterQueue", n, "spec.cohort",
            "meaningless in Slurm: accounts lend no quota to each other (a parent account's "
            "GrpTRES caps its children together, it does not lend between them)");
    if (c->strategy == KILN_Q_STRICT_FIFO)
        add(d, "ClusterQueue", n, "spec.queueingStrategy: StrictFIFO",
            "meaningless in Slurm: its backfill scheduler starts a later job that fits before "
            "an earlier one that does not (BestEffortFIFO is what Slurm does)");
    if (c->within_cq != KILN_QP_NEVER || c->reclaim != KILN_QP_NEVER)
        add(d, "ClusterQueue", n, "spec.preemption",
            "under --executor slurm preemption is Slurm's: a QOS's Preempt= list with "
            "PreemptMode=REQUEUE (sacctmgr), set by the site in Slurm");
    if (c->fair_sharing) {
        snprintf(why, sizeof why,
                 "under --executor slurm fair sharing is Slurm's multifactor priority: the "
                 "account's Fairshare (sacctmgr modify account %s set Fairshare=%g), set by the "
                 "site in Slurm",
                 n, c->weight);
        add(d, "ClusterQueue", n, "spec.fairSharing.weight", why);
    }
    if (c->stop == KILN_QSTOP_HOLD)
        add(d, "ClusterQueue", n, "spec.stopPolicy: Hold",
            "under --executor slurm holding is Slurm's: scontrol hold, or the account's "
            "MaxSubmitJobs=0");
}

size_t kiln_queues_slurm_refusals(const kiln_queues *q, kiln_diag *d)
{
    size_t before = d->n + d->dropped;
    for (size_t i = 0; i < q->nflavors; i++)
        if (q->flavors[i].node_labels.n)
            add(d, "ResourceFlavor", q->flavors[i].name, "spec.nodeLabels",
                "meaningless under --executor slurm: jobs go to the one partition "
                "--slurm-partition names and Slurm chooses the nodes");
    for (size_t i = 0; i < q->ncqs; i++)
        cq_fields(&q->cqs[i], d);
    for (size_t i = 0; i < q->nlqs; i++) {
        char why[600], name[300];
        snprintf(name, sizeof name, "%s/%s", q->lqs[i].namespace_, q->lqs[i].name);
        snprintf(why, sizeof why,
                 "not acted on under --executor slurm yet: project %s's jobs go to the account "
                 "--slurm-account names, not to an account named for ClusterQueue %s",
                 q->lqs[i].namespace_, q->cqs[q->lqs[i].cq].name);
        add(d, "LocalQueue", name, "spec.clusterQueue", why);
    }
    for (size_t i = 0; i < q->npcs; i++)
        add(d, "WorkloadPriorityClass", q->pcs[i].name, "value",
            "not acted on under --executor slurm: kiln passes a job's scheduling.priority as "
            "--nice; a priority class is a Slurm QOS's Priority (sacctmgr)");
    if (d->n + d->dropped == before) /* only Cohort declarations: nothing to act on */
        kiln_diag_add(d, "",
                      "under --executor slurm Slurm admits every job: a file that sets "
                      "nothing Slurm could act on has no use there (remove --queues)");
    return d->n + d->dropped - before;
}
