/* src/exec/supervisor/admit.c - with --queues, a scheduling pass admits
 * queued jobs as Kueue admits workloads (docs/queues.md).
 *
 * Each pass recounts every ClusterQueue's usage from the jobs running now
 * (their placed replicas, charged to the flavor whose nodeLabels their
 * nodes carry), so a reload of the queues file or a restart of kilnd never
 * leaves quota counted twice or lost. Then, as Kueue's scheduler does:
 *  - each ClusterQueue offers its head: its first job in order (with
 *    admission fair sharing its LocalQueue's decayed usage first, then
 *    priority, the WorkloadPriorityClass's value when the job names one,
 *    then creation time); under StrictFIFO a head that cannot be admitted
 *    holds back the rest of its queue, under BestEffortFIFO the next one is
 *    tried;
 *  - the whole gang is checked against quota, flavor by flavor in the
 *    resource group's order, borrowing from the cohort where allowed;
 *  - a head that does not fit may preempt admitted jobs, as its
 *    ClusterQueue's preemption policies allow; the victims are stopped
 *    (requeued) and it is admitted once they are gone;
 *  - among the heads that fit, those that need not borrow go first; with
 *    fairSharing, the one whose weighted share after admission is lowest;
 *    then priority, then age;
 *  - a flavor whose nodeTaints (NoSchedule, NoExecute) the job's pods do
 *    not tolerate, with the flavor's own tolerations, is skipped (Kueue's
 *    "untolerated taint ... in flavor ...");
 *  - an admitted job is placed on nodes with its flavor's nodeLabels (the
 *    flavor's labels join the job's own nodeSelector), its pods tolerating
 *    the flavor's tolerations besides their own. A job whose quota
 *    fits but whose devices are busy waits, and is counted nowhere.
 * The decisions are src/queues' (kiln/queues.h): the quota arithmetic, the
 * order of a queue and of heads (kiln_q_queue_order, kiln_q_goes_first)
 * and whom a head preempts (kiln_q_preempt). This file builds their inputs
 * from kilnd's jobs and carries the answers out: it charges usage, places
 * and starts jobs, stops the victims (events, the audit log), and
 * publishes why each job waits.
 *
 * Under Slurm (--executor slurm) placement answers later: an admitted
 * job's allocation may wait in Slurm. Such a job is admitted as a Kueue
 * workload is before its pods are scheduled: it holds its quota from the
 * pass that admitted it (each pass charges it again, place_waiting says
 * which jobs they are), is asked of Slurm before any head, and gives the
 * quota back when it leaves the queue, or is preempted (its allocation
 * cancelled). Otherwise every job of a queue would be admitted against the
 * same free quota while Slurm holds their allocations, and all would run
 * when Slurm starts them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/supervisor/qwait.h"
#include "exec/supervisor/supervisor_int.h"
#include "kiln/auth.h"
#include "kiln/queues.h"

/* C_SLURM: admitted and charged, its allocation waiting in Slurm */
enum { C_PENDING, C_ADMITTED, C_WAITING, C_SLURM };

typedef struct cand {
    qent *e;
    long lq; /* -1: routes nowhere now */
    size_t cq;
    int64_t prio;
    double afs; /* its LocalQueue's admission fair share when its ClusterQueue has one, else 0 */
    int64_t req[KILN_QRES_COUNT];
    bool *usable; /* per flavor: some node of it can hold the job's replicas */
    int state;
    bool tuning;    /* a tuning job: its study starts, holding nothing; its trials are admitted */
    kiln_qassign a; /* C_SLURM: the flavors it is charged to */
    char why[512];
} cand;

static bool map_matches(const kiln_map *want, const kiln_map *labels)
{
    for (size_t i = 0; want && i < want->n; i++) {
        const char *v = kiln_map_get(labels, want->keys[i]);
        if (!v || strcmp(v, want->vals[i]) != 0) return false;
    }
    return true;
}

static bool node_has(const kiln_node *n, const char *type)
{
    if (!type || strcmp(type, KILN_ACCEL_ANY_GPU) == 0) return true;
    for (size_t k = 0; k < n->n_devs; k++)
        if (strcmp(n->devs[k].type, type) == 0) return true;
    return false;
}

/* The first of flavor f's nodeTaints that some replica plan's pods do not
 * tolerate (their tolerations with f's own), or NULL; *role gets whose. */
static const kiln_taint *plans_untolerated(const kiln_qflavor *f, const kiln_job *job,
                                           const kiln_replica_plan *plans, size_t np,
                                           kiln_role *role)
{
    for (size_t p = 0; f->n_node_taints && p < np; p++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, plans[p].role);
        const kiln_taint *t = kiln_queues_flavor_untolerated(f, rc ? rc->tolerations : NULL,
                                                             rc ? rc->n_tolerations : 0);
        if (t) {
            if (role) *role = plans[p].role;
            return t;
        }
    }
    return NULL;
}

/* Whether the job may use flavor f (its nodeTaints tolerated) and each of
 * its replica plans has a node carrying f's labels, the role's
 * nodeSelector and its accelerator type, whose taints the role's
 * tolerations and f's allow (as placement will: kiln/sched.h). */
static bool plans_usable(const kilnd *d, const kiln_qflavor *f, const kiln_job *job,
                         const kiln_replica_plan *plans, size_t np)
{
    if (plans_untolerated(f, job, plans, np, NULL)) return false;
    /* a topology request: only a flavor whose Topology has its level */
    if (!kiln_queues_flavor_topology_ok(d->queues, (size_t)(f - d->queues->flavors), job))
        return false;
    kiln_sched_rules ru;
    kiln_sched_rules_of(job, &ru);
    ru.extra = f->tolerations;
    ru.n_extra = f->n_tolerations;
    for (size_t p = 0; p < np; p++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, plans[p].role);
        bool any = false;
        for (size_t n = 0; n < d->cluster.n && !any; n++) {
            const kiln_node *node = &d->cluster.nodes[n];
            any = kiln_queues_flavor_matches(f, &node->labels) &&
                  map_matches(rc ? &rc->node_selector : NULL, &node->labels) &&
                  node_has(node, plans[p].accelerator_type) &&
                  kiln_sched_taint_verdict(&ru, plans[p].role, node, NULL) < 2;
        }
        if (!any) return false;
    }
    return true;
}

/* Kueue's words ("untolerated taint ... in flavor ...") where the quota
 * module says a flavor's nodes cannot run the job and the reason is that
 * flavor's nodeTaints. */
static void taint_why(const kiln_queues *q, const kiln_job *job, const kiln_replica_plan *plans,
                      size_t np, char *why, size_t len)
{
    for (size_t f = 0; f < q->nflavors; f++) {
        char pre[300], ts[300];
        snprintf(pre, sizeof pre, "flavor %s: no node", q->flavors[f].name);
        if (!strstr(why, pre)) continue;
        kiln_role r = KILN_ROLE_MASTER;
        const kiln_taint *t = plans_untolerated(&q->flavors[f], job, plans, np, &r);
        if (!t) continue;
        char *at = strstr(why, pre);
        snprintf(at, len - (size_t)(at - why),
                 "untolerated taint %s in flavor %s (the %s replica's pods do not tolerate it: "
                 "give the pod template a matching toleration)",
                 kiln_taint_str(t, ts, sizeof ts), q->flavors[f].name, kiln_role_name(r));
        return;
    }
}

/* The tolerations of the flavors an assignment chose (Kueue adds them to
 * the admitted workload's pods): a new array of shallow copies, the
 * strings still the flavors', or NULL (none, or out of memory). */
static kiln_toleration *assignment_tolerations(const kiln_queues *q, size_t cq,
                                               const kiln_qassign *a, size_t *n)
{
    size_t k = 0;
    *n = 0;
    for (size_t g = 0; g < q->cqs[cq].ngroups && g < 8; g++)
        if (a->flavor[g] >= 0) k += q->flavors[a->flavor[g]].n_tolerations;
    kiln_toleration *v = k ? malloc(k * sizeof *v) : NULL;
    for (size_t g = 0; v && g < q->cqs[cq].ngroups && g < 8; g++) {
        if (a->flavor[g] < 0) continue;
        const kiln_qflavor *f = &q->flavors[a->flavor[g]];
        for (size_t i = 0; i < f->n_tolerations; i++)
            v[(*n)++] = f->tolerations[i];
    }
    return v;
}

static bool flavor_usable(const kilnd *d, const kiln_qflavor *f, const qent *e)
{
    return plans_usable(d, f, e->rec->job, e->plans, e->np);
}

/* A running job's ClusterQueue, request (its replicas as placed) and
 * flavors (each group's: the one its first GPU replica's node belongs to).
 * False when it routes to no queue now. */
static bool running_usage(kilnd *d, const kiln_queues *q, const rjob *j, size_t *cq_out,
                          int64_t req[KILN_QRES_COUNT], kiln_qassign *a)
{
    char why[256];
    /* a trial of a tuning job is a workload of its own (admit_trial): its
     * j->job is the trial's copy of the spec, with the job's labels */
    if (!j->job) return false;
    long lq = kiln_queues_route(q, j->project, &j->job->labels, why, sizeof why);
    if (lq < 0) return false;
    size_t cq = q->lqs[lq].cq;
    memset(req, 0, KILN_QRES_COUNT * sizeof *req);
    long node = -1;
    for (size_t i = 0; i < j->n; i++) {
        const replica *r = &j->reps[i];
        if (r->dropped) continue;
        req[KILN_QRES_GPU] += r->n_gpus;
        req[KILN_QRES_PODS]++; /* a replica is one pod */
        if (i < j->pl.n) {
            req[KILN_QRES_CPU] += (int64_t)j->pl.slots[i].vcpus * 1000;
            req[KILN_QRES_MEMORY] += (int64_t)(j->pl.slots[i].memory_gb * 1073741824.0);
        }
        if (node < 0 || (r->n_gpus && !j->reps[node].n_gpus)) node = (long)i;
    }
    for (size_t g = 0; g < 8; g++)
        a->flavor[g] = -1;
    a->borrows = false;
    const kiln_qcq *c = &q->cqs[cq];
    for (size_t g = 0; g < c->ngroups && g < 8; g++) {
        long f =
            node >= 0 && j->reps[node].node < d->cluster.n
                ? kiln_queues_node_flavor(q, cq, g, &d->cluster.nodes[j->reps[node].node].labels)
                : -1;
        /* a node in none of the group's flavors (the file changed): charged
         * to the first, so that quota is never under-counted */
        a->flavor[g] = f >= 0 ? f : c->groups[g].n ? (long)c->groups[g].flavors[0].flavor : -1;
    }
    *cq_out = cq;
    return true;
}

/* Charges a running job to its ClusterQueue. */
static void charge_running(kilnd *d, kiln_queues *q, rjob *j)
{
    size_t cq;
    int64_t req[KILN_QRES_COUNT];
    kiln_qassign a;
    if (!running_usage(d, q, j, &cq, req, &a)) return;
    q->cqs[cq].admitted++;
    kiln_queues_charge(q, cq, &a, req, 1);
    /* its LocalQueue's running usage, for admission fair sharing */
    char why[256];
    long lq = kiln_queues_route(q, j->project, &j->job->labels, why, sizeof why);
    if (lq >= 0) kiln_queues_lq_charge(q, (size_t)lq, req, 1);
}

static int64_t job_priority(const kiln_queues *q, const kiln_job *job)
{
    int64_t p = job->training_input.has_scheduling ? job->training_input.scheduling.priority : 0;
    char why[256];
    kiln_queues_priority(q, &job->labels, p, &p, why, sizeof why);
    return p;
}

/* x as src/queues' decisions see it. */
static kiln_qcand qcand(const cand *x)
{
    kiln_qcand k = {.routed = x->lq >= 0,
                    .cq = x->cq,
                    .usable = x->usable,
                    .prio = x->prio,
                    .create_ns = x->e->create_ns,
                    .seq = x->e->seq,
                    .afs = x->afs};
    memcpy(k.req, x->req, sizeof k.req);
    return k;
}

static int by_queue_order(const void *pa, const void *pb)
{
    kiln_qcand a = qcand(pa), b = qcand(pb);
    return kiln_q_queue_order(&a, &b);
}

/* Replaces kilnd's record of why jobs wait (under queues_mu, held); the
 * running tuning jobs' waiting trials (admit_trial's) are kept. */
static void publish(kilnd *d, kiln_queues *q, cand *c, size_t nc)
{
    size_t n = 0, nt = 0;
    for (size_t i = 0; i < d->n_qwait; i++)
        nt += d->qwait[i].trial;
    kilnd_qwait *w = calloc(nc + nt ? nc + nt : 1, sizeof *w);
    for (size_t i = 0; w && i < d->n_qwait; i++)
        if (d->qwait[i].trial) { /* moved over: the old array's copy is cleared */
            w[n++] = d->qwait[i];
            d->qwait[i] = (kilnd_qwait){0};
        }
    long pos = 0;
    size_t last_cq = (size_t)-1;
    for (size_t i = 0; w && i < nc; i++) {
        if (c[i].state == C_ADMITTED) continue;
        if (c[i].lq >= 0 && c[i].state != C_SLURM) { /* admitted: not pending, no position */
            if (c[i].cq != last_cq) pos = 0;
            last_cq = c[i].cq;
            pos++;
            q->cqs[c[i].cq].pending++;
        }
        kilnd_qwait *x = &w[n++];
        x->project = strdup(c[i].e->rec->project);
        x->job_id = strdup(c[i].e->rec->job->job_id);
        x->local_queue = c[i].lq >= 0 ? strdup(q->lqs[c[i].lq].name) : NULL;
        x->cluster_queue = c[i].lq >= 0 ? strdup(q->cqs[c[i].cq].name) : NULL;
        if (!c[i].why[0] && c[i].lq >= 0) /* never its queue's head this pass */
            snprintf(c[i].why, sizeof c[i].why,
                     "waiting behind earlier jobs of ClusterQueue %s (%s)", q->cqs[c[i].cq].name,
                     q->cqs[c[i].cq].strategy == KILN_Q_STRICT_FIFO
                         ? "StrictFIFO: its head must be admitted first"
                         : "BestEffortFIFO");
        x->why = strdup(c[i].why);
        x->position = c[i].lq >= 0 && c[i].state != C_SLURM ? pos : 0;
        if (!x->project || !x->job_id || !x->why) kilnd_qwait_clear(&w[--n]); /* out of memory */
    }
    kilnd_qwait_publish(d, w, n);
}

/* The Topology of the flavors an assignment chose: the first one's that
 * has one (NULL: none). */
static const kiln_qtopology *assignment_topology(const kiln_queues *q, size_t cq,
                                                 const kiln_qassign *a)
{
    for (size_t g = 0; g < q->cqs[cq].ngroups && g < 8; g++)
        if (a->flavor[g] >= 0 && q->flavors[a->flavor[g]].topology >= 0)
            return &q->topologies[q->flavors[a->flavor[g]].topology];
    return NULL;
}

/* The labels of the flavors an assignment chose, joined. */
static void assignment_labels(const kiln_queues *q, size_t cq, const kiln_qassign *a, kiln_map *out)
{
    for (size_t g = 0; g < q->cqs[cq].ngroups && g < 8; g++) {
        if (a->flavor[g] < 0) continue;
        const kiln_map *nl = &q->flavors[a->flavor[g]].node_labels;
        for (size_t i = 0; i < nl->n; i++)
            kiln_map_set(out, nl->keys[i], nl->vals[i]);
    }
}

static const char *flavor_names(const kiln_queues *q, size_t cq, const kiln_qassign *a, char *buf,
                                size_t len)
{
    buf[0] = 0;
    for (size_t g = 0; g < q->cqs[cq].ngroups && g < 8; g++)
        if (a->flavor[g] >= 0)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? "," : "",
                     q->flavors[a->flavor[g]].name);
    return buf;
}

static void trials_recharge(sup *s, kiln_queues *q); /* below, with admit_trial */

/* ---------- preemption ---------- */

/* Who a kiln_qvictim (its ref) is: a running job; or (j NULL) an
 * admitted one whose allocation waits in Slurm (C_SLURM). */
typedef struct vwho {
    rjob *j;
    cand *pc;
} vwho;

/* Whether a preemption is under way (a victim still stopping): then no
 * new one starts, so that victims are never chosen twice and two queues
 * never take turns preempting each other. */
static long preempting(const sup *s)
{
    long n = 0;
    for (const rjob *j = s->jobs; j; j = j->next)
        n += j->preempted != NULL;
    return n;
}

static void rfc3339(int64_t ns, char *buf, size_t len)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The audit log's line for a preemption (verb PREEMPT) or an eviction
 * (EVICT): kilnd itself acted on a job. */
static void audit_stop(kilnd *d, const char *project, const char *job_id, const char *verb,
                       const char *why)
{
    if (!d->audit) return;
    char uri[600];
    snprintf(uri, sizeof uri, "/v1/projects/%s/jobs/%s", project, job_id);
    kiln_audit_event ev = {.verb = verb,
                           .resource = uri,
                           .project = "system:kilnd",
                           .code = 200,
                           .object_project = project,
                           .object_job = job_id,
                           .reason = why};
    kiln_audit_write(d->audit, &ev);
}

/* A victim whose allocation waits in Slurm: nothing runs to stop, so it is
 * given up now (preempt_for has given its quota back), the allocation
 * cancelled, and it waits in the queue again. */
static void preempt_waiting(sup *s, kiln_queues *q, const cand *x, cand *pc, const char *reason,
                            const char *how)
{
    kilnd *d = s->d;
    const char *vp = pc->e->rec->project, *vid = pc->e->rec->job->job_id;
    place_who who = {vp, vid, NULL, NULL};
    place_forget(s, &who);
    pc->e->q_held = false;
    q->cqs[pc->cq].admitted--;
    pc->state = C_WAITING;
    snprintf(pc->why, sizeof pc->why,
             "preempted while its Slurm allocation was pending, to accommodate %s/%s of "
             "ClusterQueue %s (%s): %s; the allocation was cancelled and it waits for quota again",
             x->e->rec->project, x->e->rec->job->job_id, q->cqs[x->cq].name, how, reason);
    kiln_jobfiles_event(d->jobfiles, vp, vid, "WARNING", "Preempted: %s", pc->why);
    char aw[600];
    snprintf(aw, sizeof aw, "%s: preempted by %s/%s while its allocation was pending", reason,
             x->e->rec->project, x->e->rec->job->job_id);
    audit_stop(d, vp, vid, "PREEMPT", aw);
}

/* Tries to make room for head x by preempting admitted jobs, as its
 * ClusterQueue's preemption policies allow: running ones, and (under
 * Slurm) those whose allocation still waits in Slurm, c[0..nc)'s C_SLURM.
 * Which ones is src/queues' decision (kiln_q_preempt); this carries it out.
 * 0: none; 1: running victims are being stopped (x waits for them; their
 * quota stays charged until they are gone); 2: only waiting ones were
 * taken, their quota is free now (x fits). */
static int preempt_for(sup *s, kiln_queues *q, cand *x, cand *c, size_t nc)
{
    kilnd *d = s->d;
    const kiln_qcq *cq = &q->cqs[x->cq];
    int res = 0;
    if (cq->within_cq == KILN_QP_NEVER && cq->reclaim == KILN_QP_NEVER) return 0;
    size_t nj = nc;
    for (rjob *j = s->jobs; j; j = j->next)
        nj++;
    kiln_qvictim *vs = calloc(nj ? nj : 1, sizeof *vs);
    vwho *who = calloc(nj ? nj : 1, sizeof *who);
    if (!vs || !who) goto out;
    size_t nv = 0;
    for (rjob *j = s->jobs; j; j = j->next) {
        kiln_qvictim *v = &vs[nv];
        if (j->after != AS_NONE || !running_usage(d, q, j, &v->cq, v->req, &v->a)) continue;
        v->ref = nv;
        v->prio = job_priority(q, j->job);
        v->create_ns = j->create_ns;
        v->admit_ns = j->admit_ns;
        who[nv++].j = j;
    }
    for (size_t i = 0; i < nc; i++) {
        if (c[i].state != C_SLURM) continue;
        kiln_qvictim *v = &vs[nv];
        *v = (kiln_qvictim){.ref = nv,
                            .cq = c[i].cq,
                            .a = c[i].a,
                            .prio = c[i].prio,
                            .create_ns = c[i].e->create_ns,
                            .admit_ns = c[i].e->q_held ? c[i].e->q_admit_ns : c[i].e->create_ns};
        memcpy(v->req, c[i].req, sizeof v->req);
        who[nv++].pc = &c[i];
    }
    kiln_qcand xk = qcand(x);
    kiln_qpreempt p = kiln_q_preempt(q, &xk, vs, nv);
    if (!p.fits) {
        if (p.over_threshold)
            snprintf(x->why + strlen(x->why), sizeof x->why - strlen(x->why),
                     " (borrowWithinCohort: the cohort's borrowers of lower priority are above "
                     "maxPriorityThreshold %lld)",
                     (long long)cq->max_priority_threshold);
        goto out;
    }
    /* running victims hold their devices until they stop: still charged;
     * one waiting in Slurm holds nothing once its allocation is cancelled */
    for (size_t i = 0; i < p.n; i++)
        if (vs[i].reason != KILN_QPR_NONE && !who[vs[i].ref].j)
            kiln_queues_charge(q, vs[i].cq, &vs[i].a, vs[i].req, -1);
    res = 2;
    char when[40], names[400] = "";
    rfc3339(kiln_now_ns(), when, sizeof when);
    for (size_t i = 0; i < p.n; i++) {
        kiln_qvictim *v = &vs[i];
        if (v->reason == KILN_QPR_NONE) continue;
        rjob *vj = who[v->ref].j;
        const char *reason = kiln_q_preason_name(v->reason);
        char msg[600], how[200];
        if (v->reason == KILN_QPR_RECLAIM_WHILE_BORROWING)
            snprintf(how, sizeof how,
                     "borrowing within cohort %s: priority %lld over this job's %lld", cq->cohort,
                     (long long)x->prio, (long long)v->prio);
        else
            snprintf(how, sizeof how, "%s",
                     v->other ? "reclaiming quota its cohort lent" : "higher priority");
        if (v->reason == KILN_QPR_RECLAIM_WHILE_BORROWING)
            d->preempted_borrow++;
        else if (v->other)
            d->preempted_reclaim++;
        else
            d->preempted_in_cq++;
        if (!vj) {
            preempt_waiting(s, q, x, who[v->ref].pc, reason, how);
            continue;
        }
        res = 1;
        const char *vp = vj->project, *vid = vj->job_id;
        snprintf(msg, sizeof msg,
                 "Preempted to accommodate %s/%s of ClusterQueue %s (%s): %s; queued again, "
                 "it resumes from its newest checkpoint, not charged to its backoff limit",
                 x->e->rec->project, x->e->rec->job->job_id, cq->name, how, reason);
        vj->preempted = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "Preempted", "status",
                                  "True", "reason", reason, "message", msg, "lastTransitionTime",
                                  when, "preemptor", x->e->rec->job->job_id);
        kiln_jobfiles_event(d->jobfiles, vp, vid, "WARNING", "%s", msg);
        char aw[600];
        snprintf(aw, sizeof aw, "%s: preempted by %s/%s", reason, x->e->rec->project,
                 x->e->rec->job->job_id);
        audit_stop(d, vp, vid, "PREEMPT", aw);
        /* recorded before the first SIGTERM: a kilnd killed while the
         * victim stops must requeue it, not judge its exit a failure */
        save_runtime(s, vj);
        begin_stop(s, vj, AS_REQUEUE, "%s", msg);
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s/%s",
                 names[0] ? ", " : "", vp, vid);
    }
    if (res == 1)
        snprintf(x->why, sizeof x->why,
                 "preempting %s to free ClusterQueue %s's quota; admitted once they stop", names,
                 cq->name);
out:
    free(vs);
    free(who);
    return res;
}

/* stopPolicy HoldAndDrain: the running workloads of a ClusterQueue or
 * LocalQueue so held are evicted, stopped as a preemption stops them
 * (SIGTERM, grace period, SIGKILL), back to QUEUED with an Evicted
 * condition naming the hold, not charged to their backoff limit; the hold
 * keeps them there. A trial goes back to its study. Each pass looks, so a
 * file loaded at start or on SIGHUP drains from its first pass. */
static void drain_held(sup *s, kiln_queues *q)
{
    kilnd *d = s->d;
    char when[40];
    rfc3339(kiln_now_ns(), when, sizeof when);
    for (rjob *j = s->jobs; j; j = j->next) {
        char why[256];
        if (j->after != AS_NONE || j->preempted || !j->job) continue;
        long lq = kiln_queues_route(q, j->project, &j->job->labels, why, sizeof why);
        if (lq < 0) continue;
        const kiln_qlq *l = &q->lqs[lq];
        const kiln_qcq *c = &q->cqs[l->cq];
        bool by_cq = c->stop == KILN_QSTOP_HOLD_AND_DRAIN;
        if (!by_cq && l->stop != KILN_QSTOP_HOLD_AND_DRAIN) continue;
        const char *reason = by_cq ? "ClusterQueueStopped" : "LocalQueueStopped";
        char msg[600];
        if (by_cq)
            snprintf(msg, sizeof msg,
                     "Evicted: ClusterQueue %s has stopPolicy HoldAndDrain: %s; queued again, "
                     "it waits while the hold lasts and resumes from its newest checkpoint, not "
                     "charged to its backoff limit",
                     c->name, reason);
        else
            snprintf(msg, sizeof msg,
                     "Evicted: LocalQueue %s/%s has stopPolicy HoldAndDrain: %s; queued again, "
                     "it waits while the hold lasts and resumes from its newest checkpoint, not "
                     "charged to its backoff limit",
                     l->namespace_, l->name, reason);
        j->preempted = json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "Evicted", "status", "True",
                                 "reason", reason, "message", msg, "lastTransitionTime", when);
        if (!j->preempted) continue; /* out of memory: the next pass tries again */
        kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "WARNING", "%s", msg);
        audit_stop(d, j->project, j->job_id, "EVICT", msg);
        save_runtime(s, j); /* before the SIGTERM, as a preemption (preempt_for) */
        begin_stop(s, j, AS_REQUEUE, "%s", msg);
    }
}

/* ---------- under Slurm: admitted, the allocation waiting ---------- */

/* Whether assignment a is one of ClusterQueue cq's now (the file may have
 * been loaded again since it was made). */
static bool assign_valid(const kiln_queues *q, size_t cq, const kiln_qassign *a)
{
    const kiln_qcq *c = &q->cqs[cq];
    for (size_t g = 0; g < 8; g++) {
        if (a->flavor[g] < 0) continue;
        bool in = false;
        for (size_t i = 0; g < c->ngroups && i < c->groups[g].n && !in; i++)
            in = (long)c->groups[g].flavors[i].flavor == a->flavor[g];
        if (!in) return false;
    }
    return true;
}

/* Why x waits although admitted: ClusterQueue, flavors and Slurm's word. */
static void waiting_why(const kiln_queues *q, cand *x, const char *slurm)
{
    char fl[128];
    snprintf(x->why, sizeof x->why,
             "admitted by ClusterQueue %s (flavor %s); waiting for Slurm: %.300s",
             q->cqs[x->cq].name, flavor_names(q, x->cq, &x->a, fl, sizeof fl), slurm);
}

/* Charges x, admitted (earlier) under assignment a, whose allocation
 * waits in Slurm. */
static void hold(kiln_queues *q, cand *x, const kiln_qassign *a)
{
    x->a = *a;
    kiln_queues_charge(q, x->cq, a, x->req, 1);
    q->cqs[x->cq].admitted++;
    x->state = C_SLURM;
}

/* At a pass's start: whether x was admitted by an earlier pass and its
 * allocation still waits in Slurm (place_waiting); then it holds its
 * quota (C_SLURM). A stopPolicy HoldAndDrain gives it up (as drain_held
 * evicts running jobs): the allocation is cancelled, and the head loop
 * says why it waits. */
static void hold_waiting(sup *s, kiln_queues *q, cand *x)
{
    char sw[300];
    place_who who = {x->e->rec->project, x->e->rec->job->job_id, NULL, NULL};
    if (x->state != C_PENDING || x->tuning || !place_waiting(s, &who, sw, sizeof sw)) {
        x->e->q_held = false;
        return;
    }
    if (q->cqs[x->cq].stop == KILN_QSTOP_HOLD_AND_DRAIN ||
        q->lqs[x->lq].stop == KILN_QSTOP_HOLD_AND_DRAIN) {
        place_forget(s, &who);
        x->e->q_held = false;
        return;
    }
    kiln_qassign a;
    if (x->e->q_held && assign_valid(q, x->cq, &x->e->q_a)) {
        a = x->e->q_a;
    } else {
        /* its entry was read again (or the file changed): charged to each
         * group's first usable flavor, so that quota is never under-counted */
        const kiln_qcq *c = &q->cqs[x->cq];
        a.borrows = false;
        for (size_t g = 0; g < 8; g++) {
            a.flavor[g] = -1;
            for (size_t i = 0; g < c->ngroups && i < c->groups[g].n && a.flavor[g] < 0; i++)
                if (x->usable[c->groups[g].flavors[i].flavor] || i + 1 == c->groups[g].n)
                    a.flavor[g] = (long)c->groups[g].flavors[i].flavor;
        }
        x->e->q_held = true;
        x->e->q_a = a;
        x->e->q_admit_ns = x->e->create_ns;
    }
    hold(q, x, &a);
    waiting_why(q, x, sw);
}

/* Asks Slurm again for x (C_SLURM): started, it runs (charged already; the
 * next pass counts it as running); gone from the queue (cancelled, failed),
 * its quota is given back; else it keeps waiting, and says for what. */
static void ask_waiting(sup *s, kiln_queues *q, cand *x)
{
    kiln_map extra = {0};
    char why[512] = "", sw[300];
    size_t nt = 0;
    assignment_labels(q, x->cq, &x->a, &extra);
    kiln_toleration *tol = assignment_tolerations(q, x->cq, &x->a, &nt);
    bool started = start_admitted(s, x->e, &extra, tol, nt, assignment_topology(q, x->cq, &x->a),
                                  why, sizeof why);
    kiln_map_clear(&extra);
    free(tol);
    if (started || x->e->gone) {
        if (!started) {
            kiln_queues_charge(q, x->cq, &x->a, x->req, -1);
            q->cqs[x->cq].admitted--;
        }
        x->e->q_held = false;
        x->state = C_ADMITTED;
        return;
    }
    place_who who = {x->e->rec->project, x->e->rec->job->job_id, NULL, NULL};
    /* not waiting any more (Slurm ended it before it ran: asked again at
     * the next pass, as a head): held this pass all the same */
    waiting_why(q, x, place_waiting(s, &who, sw, sizeof sw) ? sw : why);
}

/* x was just admitted under a and did not start: under Slurm, when its
 * allocation now waits in Slurm, it holds a's quota from here (true). */
static bool hold_new(sup *s, kiln_queues *q, cand *x, const kiln_qassign *a)
{
    char sw[300];
    place_who who = {x->e->rec->project, x->e->rec->job->job_id, NULL, NULL};
    if (!place_waiting(s, &who, sw, sizeof sw)) return false;
    hold(q, x, a);
    x->e->q_held = true;
    x->e->q_a = *a;
    x->e->q_admit_ns = kiln_now_ns();
    waiting_why(q, x, sw);
    return true;
}

/* Whether the tuning job of `rec` has a running study. */
static bool study_running(const sup *s, const kiln_job_record *rec)
{
    for (const tstudy *t = s->studies; t; t = t->next)
        if (strcmp(t->project, rec->project) == 0 && rec->job &&
            strcmp(t->job_id, rec->job->job_id) == 0)
            return true;
    return false;
}

void admit_pass(sup *s, qent **v, size_t n)
{
    kilnd *d = s->d;
    pthread_mutex_lock(&d->queues_mu);
    kiln_queues *q = d->queues;
    cand *c = calloc(n ? n : 1, sizeof *c);
    bool *usable = calloc((n ? n : 1) * (q->nflavors ? q->nflavors : 1), sizeof *usable);
    size_t nc = 0;
    int64_t pass_ns = kiln_now_ns();
    if (!c || !usable) goto out; /* out of memory: this pass admits nothing */
    kiln_queues_reset_usage(q);
    s->admit_gen++; /* the trials' holds are counted no more (trial_hold) */
    for (size_t k = 0; k < q->ncqs; k++)
        q->cqs[k].pending = q->cqs[k].admitted = 0;
    for (rjob *j = s->jobs; j; j = j->next)
        charge_running(d, q, j);
    kiln_queues_afs_sample(q, pass_ns);
    trials_recharge(s, q);
    drain_held(s, q);

    for (size_t i = 0; i < n; i++) {
        qent *e = v[i];
        if (e->gone || e->running || !e->rec || !e->rec->job) continue;
        cand *x = &c[nc];
        x->e = e;
        x->usable = usable + nc * q->nflavors;
        x->lq = kiln_queues_route(q, e->rec->project, &e->rec->job->labels, x->why, sizeof x->why);
        nc++;
        if (x->lq < 0) {
            x->state = C_WAITING;
            continue;
        }
        x->cq = q->lqs[x->lq].cq;
        if (!kiln_queues_priority(q, &e->rec->job->labels, e->priority, &x->prio, x->why,
                                  sizeof x->why)) {
            x->state = C_WAITING;
            continue;
        }
        x->tuning = e->rec->job->training_input.has_hyperparameters;
        if (!x->tuning) kiln_queues_request(e->plans, e->np, x->req);
        x->afs = q->cqs[x->cq].afs ? kiln_queues_afs_share(q, (size_t)x->lq) : 0;
        for (size_t f = 0; f < q->nflavors; f++)
            x->usable[f] = flavor_usable(d, &q->flavors[f], e);
    }
    qsort(c, nc, sizeof *c, by_queue_order);
    /* under Slurm: those admitted earlier whose allocation waits hold their
     * quota (all charged first), then are asked of Slurm before any head */
    for (size_t i = 0; place_slurm(s) && i < nc; i++)
        hold_waiting(s, q, &c[i]);
    for (size_t i = 0; i < nc; i++)
        if (c[i].state == C_SLURM) ask_waiting(s, q, &c[i]);
    /* every allocation still wanted was asked for above: the others'
     * (their jobs cancelled or gone while Slurm held them) go back to
     * Slurm before any head is asked for, so that the queue never has
     * more allocations in Slurm than its quota admits */
    if (!d->stop) place_sweep(s, pass_ns);

    for (;;) {
        long best = -1;
        bool best_b = false, changed = false;
        int64_t best_s = 0;
        kiln_qassign best_a;
        for (size_t i = 0; i < nc;) {
            /* the ClusterQueue starting at i: its head */
            size_t end = i;
            while (end < nc && c[end].lq >= 0 && c[end].cq == c[i].cq)
                end++;
            if (c[i].lq < 0 || end == i) break; /* the unrouted, at the end */
            const kiln_qcq *cq = &q->cqs[c[i].cq];
            long h = -1;
            for (size_t k = i; k < end && h < 0; k++) {
                if (c[k].state == C_ADMITTED || c[k].state == C_SLURM) continue;
                if (c[k].state == C_WAITING) {
                    if (cq->strategy == KILN_Q_STRICT_FIFO) break;
                    continue;
                }
                h = (long)k;
            }
            /* admission fair sharing: an admission earlier in this pass
             * raised its LocalQueue's share (the entry penalty), so the
             * head is the pending one whose LocalQueue's share is lowest now */
            for (size_t k = i; cq->afs && h >= 0 && k < end; k++)
                if (c[k].state == C_PENDING && k != (size_t)h &&
                    (cq->strategy != KILN_Q_STRICT_FIFO || k < (size_t)h) &&
                    kiln_queues_afs_share(q, (size_t)c[k].lq) <
                        kiln_queues_afs_share(q, (size_t)c[h].lq))
                    h = (long)k;
            i = end;
            if (h < 0) continue;
            cand *x = &c[h];
            if (cq->stop != KILN_QSTOP_NONE || q->lqs[x->lq].stop != KILN_QSTOP_NONE) {
                bool held = cq->stop != KILN_QSTOP_NONE;
                snprintf(x->why, sizeof x->why, "%s %s has stopPolicy %s: it admits nothing",
                         held ? "ClusterQueue" : "LocalQueue", held ? cq->name : q->lqs[x->lq].name,
                         kiln_queues_stop_name(held ? cq->stop : q->lqs[x->lq].stop));
                x->state = C_WAITING;
                changed = true;
                continue;
            }
            kiln_qassign a;
            char why[400];
            if (x->tuning) { /* nothing to charge: each trial is admitted (admit_trial) */
                for (size_t g = 0; g < 8; g++)
                    a.flavor[g] = -1;
                a.borrows = false;
            } else if (!kiln_queues_fit(q, x->cq, x->req, x->usable, &a, why, sizeof why)) {
                taint_why(q, x->e->rec->job, x->e->plans, x->e->np, why, sizeof why);
                snprintf(x->why, sizeof x->why, "ClusterQueue %s: %s", cq->name, why);
                x->state = C_WAITING;
                changed = true;
                long busy = preempting(s);
                if (busy)
                    snprintf(x->why + strlen(x->why), sizeof x->why - strlen(x->why),
                             " (%ld preempted job%s still stopping)", busy, busy == 1 ? "" : "s");
                else if (preempt_for(s, q, x, c, nc) == 2)
                    x->state = C_PENDING; /* only waiting allocations were taken: it fits now */
                continue;
            }
            int64_t share = cq->fair_sharing ? kiln_queues_share(q, x->cq, x->req) : 0;
            kiln_qcand xk = qcand(x), bk = best >= 0 ? qcand(&c[best]) : xk;
            if (best < 0 || kiln_q_goes_first(q, &xk, a.borrows, share, &bk, best_b, best_s)) {
                best = h;
                best_b = a.borrows;
                best_s = share;
                best_a = a;
            }
        }
        if (best < 0) {
            if (!changed) break;
            continue;
        }
        cand *x = &c[best];
        kiln_map extra = {0};
        size_t nt = 0;
        assignment_labels(q, x->cq, &best_a, &extra);
        kiln_toleration *tol = assignment_tolerations(q, x->cq, &best_a, &nt);
        char why[512] = "", fl[128];
        bool started = start_admitted(s, x->e, &extra, tol, nt,
                                      assignment_topology(q, x->cq, &best_a), why, sizeof why);
        kiln_map_clear(&extra);
        free(tol);
        /* a tuning job that started is a study (no rjob: start_admitted
         * says false); it left the queue either way */
        if (x->tuning && x->e->gone) started = study_running(s, x->e->rec);
        if (started && x->tuning) {
            x->state = C_ADMITTED;
            kiln_jobfiles_event(
                d->jobfiles, x->e->rec->project, x->e->rec->job->job_id, "INFO",
                "Admitted by ClusterQueue %s (LocalQueue %s): each trial is admitted "
                "against its quota as its own workload",
                q->cqs[x->cq].name, q->lqs[x->lq].name);
        } else if (started) {
            kiln_queues_charge(q, x->cq, &best_a, x->req, 1);
            kiln_queues_lq_charge(q, (size_t)x->lq, x->req, 1);
            kiln_queues_afs_penalty(q, (size_t)x->lq, x->req);
            q->cqs[x->cq].admitted++;
            x->state = C_ADMITTED;
            kiln_jobfiles_event(d->jobfiles, s->jobs->project, s->jobs->job_id, "INFO",
                                "Admitted by ClusterQueue %s (LocalQueue %s, flavor %s%s%s)",
                                q->cqs[x->cq].name, q->lqs[x->lq].name,
                                flavor_names(q, x->cq, &best_a, fl, sizeof fl),
                                best_a.borrows ? ", borrowing from cohort " : "",
                                best_a.borrows ? q->cqs[x->cq].cohort : "");
        } else if (x->e->gone) {
            x->state = C_ADMITTED; /* failed or cancelled: it left the queue */
        } else if (!x->tuning && hold_new(s, q, x, &best_a)) {
            kiln_jobfiles_event(d->jobfiles, x->e->rec->project, x->e->rec->job->job_id, "INFO",
                                "Admitted by ClusterQueue %s (LocalQueue %s, flavor %s%s%s); %s",
                                q->cqs[x->cq].name, q->lqs[x->lq].name,
                                flavor_names(q, x->cq, &best_a, fl, sizeof fl),
                                best_a.borrows ? ", borrowing from cohort " : "",
                                best_a.borrows ? q->cqs[x->cq].cohort : "", x->why);
        } else {
            snprintf(x->why, sizeof x->why,
                     "ClusterQueue %s has quota for it (flavor %s), but its replicas do not fit "
                     "the nodes now%s%.300s",
                     q->cqs[x->cq].name, flavor_names(q, x->cq, &best_a, fl, sizeof fl),
                     why[0] ? ": " : "", why[0] ? why : "");
            x->state = C_WAITING;
        }
    }
    publish(d, q, c, nc);
out:
    pthread_mutex_unlock(&d->queues_mu);
    free(c);
    free(usable);
}

/* Records (why != NULL) or forgets why a running tuning job's next trial
 * waits, for kilnStatus.queue (under queues_mu, held). */
static void trial_wait(kilnd *d, const char *project, const char *job_id, const char *lq,
                       const char *cq, const char *why)
{
    kilnd_qwait *x = NULL;
    for (size_t i = 0; i < d->n_qwait && !x; i++)
        if (d->qwait[i].trial && strcmp(d->qwait[i].project, project) == 0 &&
            strcmp(d->qwait[i].job_id, job_id) == 0)
            x = &d->qwait[i];
    if (x) { /* forgotten, or written again below */
        kilnd_qwait_clear(x);
        *x = d->qwait[--d->n_qwait];
    }
    kilnd_qwait *w = why ? realloc(d->qwait, (d->n_qwait + 1) * sizeof *w) : NULL;
    if (w) { /* out of memory: not shown */
        d->qwait = w;
        x = &w[d->n_qwait];
        *x = (kilnd_qwait){.project = strdup(project),
                           .job_id = strdup(job_id),
                           .local_queue = lq ? strdup(lq) : NULL,
                           .cluster_queue = cq ? strdup(cq) : NULL,
                           .why = strdup(why),
                           .trial = true};
        if (x->project && x->job_id && x->why)
            d->n_qwait++;
        else
            kilnd_qwait_clear(x);
    }
    kilnd_qwait_sort(d);
}

void trial_wait_clear(sup *s, const char *project, const char *job_id)
{
    pthread_mutex_lock(&s->d->queues_mu);
    trial_wait(s->d, project, job_id, NULL, NULL, NULL);
    pthread_mutex_unlock(&s->d->queues_mu);
}

/* A trial whose allocation waits in Slurm, charged by admit_trial. Trials
 * are asked every tick, passes (which reset usage) run less often: the
 * charge of the tick before is taken back before the trial is checked
 * again, so that it is counted once, and never against itself. */
typedef struct thold {
    char project[256], job_id[256], tag[32];
    unsigned long gen, qgen;
    size_t cq;
    kiln_qassign a;
    int64_t req[KILN_QRES_COUNT];
    struct thold *next;
} thold;

static bool thold_is(const thold *h, const place_who *w)
{
    return strcmp(h->project, w->project) == 0 && strcmp(h->job_id, w->job_id) == 0 &&
           strcmp(h->tag, w->tag ? w->tag : "") == 0;
}

/* Takes back w's charge if this pass's usage holds it (queues_mu held). */
static void trial_unhold(sup *s, kiln_queues *q, const place_who *w)
{
    for (thold **l = &s->trial_holds; *l; l = &(*l)->next) {
        thold *h = *l;
        if (!thold_is(h, w)) continue;
        if (h->gen == s->admit_gen && h->qgen == s->d->queues_gen) {
            kiln_queues_charge(q, h->cq, &h->a, h->req, -1);
            q->cqs[h->cq].admitted--;
        }
        *l = h->next;
        free(h);
        return;
    }
}

/* Charges w's trial, its allocation waiting in Slurm, and remembers it. */
static void trial_hold(sup *s, kiln_queues *q, const place_who *w, size_t cq, const kiln_qassign *a,
                       const int64_t req[KILN_QRES_COUNT])
{
    thold *h = calloc(1, sizeof *h);
    kiln_queues_charge(q, cq, a, req, 1);
    q->cqs[cq].admitted++;
    if (!h) return; /* out of memory: charged till the next pass all the same */
    snprintf(h->project, sizeof h->project, "%s", w->project);
    snprintf(h->job_id, sizeof h->job_id, "%s", w->job_id);
    snprintf(h->tag, sizeof h->tag, "%s", w->tag ? w->tag : "");
    h->gen = s->admit_gen;
    h->qgen = s->d->queues_gen;
    h->cq = cq;
    h->a = *a;
    memcpy(h->req, req, sizeof h->req);
    h->next = s->trial_holds;
    s->trial_holds = h;
}

/* At a pass's start: the trials whose allocation still waits in Slurm are
 * charged again (admitted workloads, as the jobs of hold_waiting), so that
 * the heads see their quota taken; the others are forgotten. */
static void trials_recharge(sup *s, kiln_queues *q)
{
    for (thold **l = &s->trial_holds; *l;) {
        thold *h = *l;
        place_who w = {h->project, h->job_id, h->tag, NULL};
        char sw[64];
        if (h->qgen == s->d->queues_gen && place_waiting(s, &w, sw, sizeof sw)) {
            kiln_queues_charge(q, h->cq, &h->a, h->req, 1);
            q->cqs[h->cq].admitted++;
            h->gen = s->admit_gen;
            l = &h->next;
        } else {
            *l = h->next;
            free(h);
        }
    }
}

void admit_free(sup *s)
{
    while (s->trial_holds) {
        thold *h = s->trial_holds;
        s->trial_holds = h->next;
        free(h);
    }
}

/* A trial of a running tuning job, after the pass (trials.c): its own
 * workload, as Kueue makes one per trial. It routes as its job does (the
 * trial's spec carries the job's labels), its whole gang is checked against
 * the ClusterQueue's quota (flavors, cohort borrowing), and placed on the
 * chosen flavor's nodes; then charged, so that the next trial and the next
 * pass see it (each pass recounts it as a running job, so it is also a
 * preemption victim like any other). It comes after the pass's heads: it
 * takes only quota that no queued head could use (BestEffortFIFO), and
 * under StrictFIFO or stopPolicy Hold it waits while its ClusterQueue has
 * pending workloads or admits nothing. A trial never preempts. */
kiln_err admit_trial(sup *s, const place_who *w, const kiln_job *job,
                     const kiln_replica_plan *plans, size_t np, kiln_placement *pl,
                     kiln_toleration **xtol_out, size_t *n_xtol_out, char *why, size_t whylen)
{
    kilnd *d = s->d;
    const char *project = w->project;
    kiln_err err = KILN_ECONFLICT;
    kiln_map sel[KILN_ROLE_COUNT] = {{0}};
    kiln_toleration *xtol = NULL; /* the chosen flavors' tolerations */
    int64_t req[KILN_QRES_COUNT];
    int64_t prio;
    kiln_qassign a;
    char qwhy[400];
    kiln_map extra = {0};
    size_t cq;
    const kiln_qcq *c;
    long lq = -1;
    bool held = false;
    pthread_mutex_lock(&d->queues_mu);
    kiln_queues *q = d->queues;
    trial_unhold(s, q, w); /* its charge of the tick before, if any */
    bool *usable = calloc(q->nflavors ? q->nflavors : 1, sizeof *usable);
    if (!usable) {
        err = KILN_ENOMEM;
        goto out;
    }
    lq = kiln_queues_route(q, project, &job->labels, why, whylen);
    if (lq < 0) goto out;
    cq = q->lqs[lq].cq;
    c = &q->cqs[cq];
    int64_t fallback =
        job->training_input.has_scheduling ? job->training_input.scheduling.priority : 0;
    if (!kiln_queues_priority(q, &job->labels, fallback, &prio, why, whylen)) goto out;
    if (c->stop != KILN_QSTOP_NONE || q->lqs[lq].stop != KILN_QSTOP_NONE) {
        snprintf(why, whylen, "stopPolicy %s: %s %s admits nothing",
                 kiln_queues_stop_name(c->stop != KILN_QSTOP_NONE ? c->stop : q->lqs[lq].stop),
                 c->stop != KILN_QSTOP_NONE ? "ClusterQueue" : "LocalQueue",
                 c->stop != KILN_QSTOP_NONE ? c->name : q->lqs[lq].name);
        goto out;
    }
    if (c->strategy == KILN_Q_STRICT_FIFO && c->pending > 0) {
        snprintf(why, whylen, "ClusterQueue %s is StrictFIFO and has %ld pending workloads",
                 c->name, (long)c->pending);
        goto out;
    }
    kiln_queues_request(plans, np, req);
    for (size_t f = 0; f < q->nflavors; f++)
        usable[f] = plans_usable(d, &q->flavors[f], job, plans, np);
    if (!kiln_queues_fit(q, cq, req, usable, &a, qwhy, sizeof qwhy)) {
        taint_why(q, job, plans, np, qwhy, sizeof qwhy);
        snprintf(why, whylen, "ClusterQueue %s: %s", c->name, qwhy);
        goto out;
    }
    /* on the chosen flavors' nodes: their labels join each role's selector */
    assignment_labels(q, cq, &a, &extra);
    kiln_sched_rules ru;
    kiln_sched_rules_of(job, &ru);
    xtol = assignment_tolerations(q, cq, &a, &ru.n_extra);
    ru.extra = xtol;
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        for (size_t i = 0; rc && i < rc->node_selector.n; i++)
            kiln_map_set(&sel[r], rc->node_selector.keys[i], rc->node_selector.vals[i]);
        for (size_t i = 0; i < extra.n; i++)
            kiln_map_set(&sel[r], extra.keys[i], extra.vals[i]);
        ru.selector[r] = sel[r].n ? &sel[r] : NULL;
    }
    rules_topology(&ru, assignment_topology(q, cq, &a));
    err = place_job(s, w, plans, np, &ru, pl, why, whylen);
    char sw[300], fl[128];
    /* copied while queues_mu is held: a SIGHUP's reload frees the flavors */
    if (err == KILN_OK && !tolerations_copy(xtol_out, n_xtol_out, xtol, ru.n_extra)) {
        place_release(s, pl);
        kiln_placement_free(pl);
        err = KILN_ENOMEM;
    }
    if (err == KILN_OK) {
        kiln_queues_charge(q, cq, &a, req, 1);
        q->cqs[cq].admitted++;
    } else if (err == KILN_ECONFLICT && place_waiting(s, w, sw, sizeof sw)) {
        held = true;
        /* its allocation waits in Slurm: it holds the quota for the rest of
         * this pass (the next trial and heads see it); the next check asks
         * again only if the quota is still there, else it is cancelled */
        trial_hold(s, q, w, cq, &a, req);
        snprintf(why, whylen, "admitted by ClusterQueue %s (flavor %s); waiting for Slurm: %s",
                 c->name, flavor_names(q, cq, &a, fl, sizeof fl), sw);
    } else if (err != KILN_ENOMEM) {
        char pw[400];
        snprintf(pw, sizeof pw, "%s", why);
        snprintf(why, whylen,
                 "ClusterQueue %s has quota for it (flavor %s), but its replicas do not fit the "
                 "nodes now: %s",
                 c->name, flavor_names(q, cq, &a, fl, sizeof fl), pw);
    }
out:
    /* Slurm: an allocation asked for earlier that this check does not keep
     * (no quota now, a stop policy) is given back at once */
    if (err != KILN_OK && err != KILN_ENOMEM && !held) place_forget(s, w);
    /* why the next trial waits, for its job's kilnStatus.queue */
    if (err != KILN_ENOMEM)
        trial_wait(d, project, job->job_id, lq >= 0 ? q->lqs[lq].name : NULL,
                   lq >= 0 ? q->cqs[q->lqs[lq].cq].name : NULL, err == KILN_OK ? NULL : why);
    pthread_mutex_unlock(&d->queues_mu);
    kiln_map_clear(&extra);
    for (int r = 0; r < KILN_ROLE_COUNT; r++)
        kiln_map_clear(&sel[r]);
    free(xtol);
    free(usable);
    return err;
}
