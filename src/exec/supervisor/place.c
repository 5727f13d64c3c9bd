/* src/exec/supervisor/place.c - where a job's replicas go: the placement
 * backends under the one supervisor.
 *
 * Two backends, a table of them (`placers`):
 *  - kiln's own scheduler (kiln/sched.h) on the nodes kilnd was given:
 *    an answer at once;
 *  - Slurm (kilnd --executor slurm): a gang is one
 *    allocation (src/exec/slurm/alloc.h) that Slurm places whole, with its
 *    own priorities; the answer is "waits" until Slurm runs it, then the
 *    nodes and GPUs Slurm chose. kiln's book claims the same slots, so
 *    `kiln nodes` and the GPU figures read as on one machine.
 * Everything above (restart policies, elastic workers and the autoscaler,
 * trials, drains, deadlines, adoption, logs) is the supervisor's, the same
 * code for both; a replica placed by Slurm is launched as a step of its
 * allocation (spawn.c puts `srun --jobid` before its program). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/slurm/accounts.h"
#include "exec/slurm/alloc.h"
#include "exec/slurm/slurm.h"
#include "exec/supervisor/qwait.h"
#include "exec/supervisor/supervisor_int.h"
#include "kiln/catalog.h"

/* An allocation asked for and not yet handed to a job: kept between passes
 * (Slurm answers later), cancelled when no pass has asked for it for
 * STALE_NS (its job left the queue, the autoscaler wants fewer workers). */
#define STALE_NS (5 * 1000000000LL)

typedef struct palloc {
    char name[256];
    long id;
    int64_t asked_ns, submitted_ns;
    bool gang; /* a job's gang (no tag): asked by the scheduling pass only */
    /* whose it is (its jobPosition), and under --slurm-queues accounts the
     * account and QOS it went with (why Slurm holds it PENDING is said in
     * those words) */
    char project[128], job_id[256], account[128], qos[128];
    struct palloc *next;
} palloc;

bool place_slurm(const sup *s)
{
    return s->d->slurm.on;
}

static palloc *pending_find(const sup *s, const char *name)
{
    for (palloc *p = s->pending; p; p = p->next)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

/* The allocation name of w's gang: "kiln-PROJECT-JOB" then its tag. */
static void alloc_name(const place_who *w, char *buf, size_t len)
{
    snprintf(buf, len, "kiln-%s-%s%s", w->project, w->job_id, w->tag ? w->tag : "");
}

static void pending_drop(sup *s, palloc *gone)
{
    for (palloc **l = &s->pending; *l; l = &(*l)->next)
        if (*l == gone) {
            *l = gone->next;
            free(gone);
            return;
        }
}

/* Gives allocation `id` back to Slurm (scancel), and marks it ended in the
 * squeue last read: until squeue is read again that snapshot still shows
 * it RUNNING, and a job queued again at once (a drain's move, a restart)
 * would take it over by its name, only to see it end under its replicas. */
static void give_back(sup *s, long id)
{
    kiln_slurm_alloc_cancel(id);
    for (size_t i = 0; i < s->sq.n; i++)
        if (s->sq.rows[i].id == id)
            snprintf(s->sq.rows[i].state, sizeof s->sq.rows[i].state, "CANCELLED");
}

/* The node a role's nodeSelector pins (kubernetes.io/hostname or
 * kiln.dev/node), or NULL; false with `why` for a label Slurm has no
 * meaning for (Slurm's nodes have features, not labels). */
static bool pinned_node(const kiln_map *sel, const char **node, char *why, size_t whylen)
{
    *node = NULL;
    for (size_t i = 0; sel && i < sel->n; i++) {
        if (strcmp(sel->keys[i], "kubernetes.io/hostname") == 0 ||
            strcmp(sel->keys[i], "kiln.dev/node") == 0) {
            *node = sel->vals[i];
            continue;
        }
        snprintf(why, whylen,
                 "nodeSelector %s: Slurm's nodes have no labels (only kubernetes.io/hostname "
                 "or kiln.dev/node, a node's name, can be asked of Slurm)",
                 sel->keys[i]);
        return false;
    }
    return true;
}

/* The components of plans[0..np): one per role, in plan order (a role's
 * replicas are one component's tasks, laid out by Slurm). */
static kiln_err comps_of(const kilnd *d, const kiln_replica_plan *plans, size_t np,
                         const kiln_sched_rules *ru, kiln_slurm_comp *comps, char *why,
                         size_t whylen)
{
    for (size_t p = 0; p < np; p++) {
        kiln_slurm_comp *cp = &comps[p];
        *cp = (kiln_slurm_comp){.tasks = (int)plans[p].count};
        if (!pinned_node(ru ? ru->selector[plans[p].role] : NULL, &cp->node, why, whylen))
            return KILN_EINVAL;
        if (plans[p].accelerator_type && plans[p].accelerators_per_replica > 0) {
            cp->gpus = (int)plans[p].accelerators_per_replica;
            cp->gres = kiln_slurm_gres_type(&d->slurm_cfg, plans[p].accelerator_type);
        }
        if (d->slurm.machine_resources) {
            cp->cpus = plans[p].vcpus;
            cp->mem_mb = (long)(plans[p].memory_gb * 1024.0);
        }
    }
    return KILN_OK;
}

/* The directory of allocation `name`: its script, output and layout, in
 * the job's directory (which the nodes share); written by the batch
 * script, so its user's. */
static void alloc_dir(kilnd *d, const place_who *w, const char *name, long uid, long gid, char *buf,
                      size_t len)
{
    char jd[PATH_MAX];
    kiln_jobfiles_dir(d->jobfiles, w->project, w->job_id, jd, sizeof jd);
    if (snprintf(buf, len, "%.3800s/slurm/%.250s", jd, name) >= (int)len) buf[0] = '\0';
    kilnd_mkdirs(buf);
    if (uid >= 0 && chown(buf, (uid_t)uid, (gid_t)gid) < 0) {
        /* sbatch's job then cannot write its layout: kilnd says so, waiting */
    }
}

/* The slots of a running allocation from its layout; kiln's book claims
 * them. Slurm chooses a step's GPUs on its node when it starts (its
 * CUDA_VISIBLE_DEVICES); the book takes as many of the node's, free ones
 * first, so that `kiln nodes` counts what Slurm holds. */
static kiln_err slots_of(sup *s, const kiln_slurm_alloc_row *row, long id, const char *dir,
                         const kiln_replica_plan *plans, size_t np, const kiln_slurm_comp *comps,
                         kiln_placement *pl, bool *from_squeue, char *why, size_t whylen)
{
    kilnd *d = s->d;
    size_t n = 0;
    for (size_t p = 0; p < np; p++)
        n += (size_t)comps[p].tasks;
    kiln_slurm_node_name *names = calloc(n, sizeof *names);
    kiln_slurm_node_name *rows[KILN_ROLE_COUNT];
    pl->slots = calloc(n, sizeof *pl->slots);
    kiln_err err = names && pl->slots ? KILN_OK : KILN_ENOMEM;
    for (size_t p = 0, at = 0; err == KILN_OK && p < np; at += (size_t)comps[p++].tasks)
        rows[p] = names + at;
    /* squeue's row says it where each component is on one node (the usual
     * case: a component's tasks on one node); else the batch script's file
     * (bench/slurm_latency.sh: waiting for the script cost 0.2-0.8 s) */
    *from_squeue =
        err == KILN_OK &&
        kiln_slurm_alloc_layout_row(row, comps, np, (kiln_slurm_node_name *const *)rows) == KILN_OK;
    if (err == KILN_OK && !*from_squeue)
        err = kiln_slurm_alloc_layout(dir, id, comps, np, (kiln_slurm_node_name *const *)rows, why,
                                      whylen);
    pthread_mutex_lock(&d->mu);
    for (size_t p = 0, k = 0; err == KILN_OK && p < np; p++)
        for (int t = 0; err == KILN_OK && t < comps[p].tasks; t++, k++) {
            long node = kiln_cluster_find(&d->cluster, rows[p][t]);
            if (node < 0) {
                snprintf(why, whylen,
                         "Slurm placed a %s replica on node %s, which was not in partition %s "
                         "when kilnd started (restart kilnd to see it)",
                         kiln_role_name(plans[p].role), rows[p][t], d->slurm.partition);
                err = KILN_EIO;
                break;
            }
            kiln_slot *sl = &pl->slots[k];
            *sl = (kiln_slot){.role = plans[p].role,
                              .index = t,
                              .node = (size_t)node,
                              .vcpus = plans[p].vcpus,
                              .memory_gb = plans[p].memory_gb,
                              .alloc = id,
                              .alloc_part = np > 1 ? (int)p : -1};
            const kiln_node *nd = &d->cluster.nodes[node];
            for (int pass = 0; pass < 2; pass++) /* free ones first, then any */
                for (size_t v = 0; v < nd->n_devs && sl->n_devs < comps[p].gpus; v++) {
                    bool taken = pass == 0 && !kiln_sched_device_free(d->sched, (size_t)node, v);
                    for (size_t q = 0; !taken && q <= k; q++)
                        for (int g = 0; !taken && g < pl->slots[q].n_devs; g++)
                            taken =
                                pl->slots[q].node == (size_t)node && pl->slots[q].devs[g] == (int)v;
                    if (!taken) sl->devs[sl->n_devs++] = (int)v;
                }
            pl->n = k + 1;
        }
    if (err == KILN_OK) kiln_sched_claim(d->sched, pl);
    pthread_mutex_unlock(&d->mu);
    free(names);
    if (err != KILN_OK) kiln_placement_free(pl);
    return err;
}

kiln_err place_fits(sup *s, const kiln_replica_plan *plans, size_t np, const kiln_sched_rules *ru,
                    char *why, size_t whylen)
{
    kilnd *d = s->d;
    kiln_slurm_comp comps[KILN_ROLE_COUNT];
    if (place_slurm(s)) {
        kiln_err err = np > 0 && np <= KILN_ROLE_COUNT
                           ? comps_of(d, plans, np, ru, comps, why, whylen)
                           : KILN_EINVAL;
        if (err != KILN_OK) return err;
        if (np > d->cluster.n) {
            snprintf(why, whylen,
                     "its %zu replica types would each need nodes of their own (Slurm gives "
                     "the components of a heterogeneous job no node in common), and partition "
                     "%s has %zu",
                     np, d->slurm.partition, d->cluster.n);
            return KILN_EINVAL;
        }
    }
    kiln_placement probe = {0};
    pthread_mutex_lock(&d->mu);
    kiln_err err = kiln_sched_place_rules(d->sched, plans, np, ru, &probe, why, whylen);
    if (err == KILN_OK) kiln_sched_release(d->sched, &probe);
    pthread_mutex_unlock(&d->mu);
    kiln_placement_free(&probe);
    return err == KILN_ECONFLICT ? KILN_OK : err;
}

/* A job's scheduling.priority (0..1000, higher first; none: 0) as Slurm's
 * --nice=1000-priority: never negative, so no Slurm privilege is needed,
 * and kiln's pending allocations keep kiln's order among themselves in
 * Slurm's queue. */
static int nice_of(const kiln_job *job)
{
    long long prio = job && job->training_input.has_scheduling
                         ? (long long)job->training_input.scheduling.priority
                         : 0;
    return prio >= 1000 ? -1 : prio < 0 ? 1000 : (int)(1000 - prio);
}

/* Slurm: the allocation `name` for plans[0..np) (ECONFLICT while it waits). */
static kiln_err place_in_slurm(sup *s, const place_who *w, const kiln_replica_plan *plans,
                               size_t np, const kiln_sched_rules *ru, kiln_placement *pl, char *why,
                               size_t whylen)
{
    kilnd *d = s->d;
    kiln_slurm_comp comps[KILN_ROLE_COUNT];
    kiln_err err = np > 0 && np <= KILN_ROLE_COUNT ? comps_of(d, plans, np, ru, comps, why, whylen)
                                                   : KILN_EINVAL;
    if (err != KILN_OK) return err;
    long uid = -1, gid = -1;
    if (kiln_users_job(d->users, w->project, w->job ? w->job->training_input.service_account : NULL,
                       &uid, &gid, why, whylen) != KILN_OK)
        return KILN_EINVAL;
    char dir[PATH_MAX + 256], name[256];
    alloc_name(w, name, sizeof name);
    alloc_dir(d, w, name, uid, gid, dir, sizeof dir);
    if (!dir[0]) {
        snprintf(why, whylen, "the job's directory path is too long for its Slurm files");
        return KILN_EINVAL;
    }
    int64_t now = kiln_now_ns();
    palloc *pa = pending_find(s, name);
    if (!pa) {
        if (!s->sq.ok) {
            snprintf(why, whylen, "waiting for squeue to answer");
            return KILN_ECONFLICT;
        }
        /* --slurm-queues accounts: the account of its ClusterQueue, the QOS
         * of its priority class (accounts.h). A job no LocalQueue takes now
         * (the file changed since its create) is asked for nowhere: without
         * its account it would run outside every quota */
        char acct[128] = "", qos[128] = "";
        bool accounts = d->queues_path && d->slurm.accounts, routed = false;
        if (accounts) {
            pthread_mutex_lock(&d->queues_mu);
            routed = kiln_slurm_job_account(d->queues, w->project, w->job ? &w->job->labels : NULL,
                                            acct, sizeof acct, qos, sizeof qos);
            pthread_mutex_unlock(&d->queues_mu);
        }
        if (accounts && !routed) {
            snprintf(why, whylen,
                     "no LocalQueue of the queues file takes project %s's job now (it changed "
                     "since the job was created), so it has no Slurm account",
                     w->project);
            return KILN_EINVAL;
        }
        /* a previous kilnd's allocation of that name is this one's */
        const kiln_slurm_alloc_row *row = kiln_slurm_alloc_find(&s->sq, 0, name);
        long id = row && kiln_slurm_alloc_state_of(row) != KILN_SLURM_ALLOC_ENDED ? row->id : 0;
        if (!id) {
            /* what can never fit the partition's nodes is said by kiln's
             * own rules (Slurm would keep it pending for ever) */
            kiln_err perr = place_fits(s, plans, np, ru, why, whylen);
            if (perr != KILN_OK) return perr;
            kiln_slurm_alloc_req rq = {.name = name,
                                       .dir = dir,
                                       .partition = d->slurm.partition,
                                       .account = accounts ? acct : d->slurm.account,
                                       .qos = qos[0] ? qos : NULL,
                                       .nice = nice_of(w->job),
                                       .uid = uid,
                                       .gid = gid,
                                       .comps = comps,
                                       .n = np};
            err = kiln_slurm_alloc_submit(&rq, &id, why, whylen);
            if (err == KILN_EINVAL) return KILN_EINVAL; /* Slurm: never */
            if (err != KILN_OK) return KILN_ECONFLICT;  /* sbatch again at the next pass */
        }
        pa = calloc(1, sizeof *pa);
        if (!pa) {
            give_back(s, id);
            return KILN_ENOMEM;
        }
        kiln_jobfiles_event(d->jobfiles, w->project, w->job_id, "INFO",
                            "%s Slurm allocation %ld (%s) for %zu replica type%s: Slurm places it",
                            row && row->id == id ? "Taking over the" : "Asked for", id, name, np,
                            np == 1 ? "" : "s");
        snprintf(pa->name, sizeof pa->name, "%s", name);
        snprintf(pa->project, sizeof pa->project, "%s", w->project);
        snprintf(pa->job_id, sizeof pa->job_id, "%s", w->job_id);
        snprintf(pa->account, sizeof pa->account, "%s", acct);
        snprintf(pa->qos, sizeof pa->qos, "%s", qos);
        pa->id = id;
        pa->gang = !w->tag;
        pa->submitted_ns = now;
        pa->next = s->pending;
        s->pending = pa;
        s->sq_fast_until = now + 2000000000LL; /* Slurm often starts it within 0.2 s */
    }
    pa->asked_ns = now;
    const kiln_slurm_alloc_row *row = kiln_slurm_alloc_find(&s->sq, pa->id, NULL);
    kiln_slurm_alloc_state st = row ? kiln_slurm_alloc_state_of(row) : KILN_SLURM_ALLOC_PENDING;
    /* not listed although squeue answered after the submit: gone */
    if (st == KILN_SLURM_ALLOC_ENDED || (s->sq.ok && !row && s->sq_ns_read > pa->submitted_ns)) {
        snprintf(why, whylen, "Slurm job %ld ended before it ran (%s); asking again", pa->id,
                 row ? row->state : "gone from squeue");
        pending_drop(s, pa);
        return KILN_ECONFLICT;
    }
    if (st == KILN_SLURM_ALLOC_PENDING) {
        snprintf(why, whylen, "Slurm job %ld is pending (%s)", pa->id,
                 row && row->reason[0] ? row->reason : "submitted");
        return KILN_ECONFLICT;
    }
    /* running: where Slurm put each replica, from squeue or the batch script */
    bool from_squeue = false;
    err = slots_of(s, row, pa->id, dir, plans, np, comps, pl, &from_squeue, why, whylen);
    if (err == KILN_OK)
        kiln_jobfiles_event(
            d->jobfiles, w->project, w->job_id, "INFO",
            "Slurm allocation %ld runs (%.1f s after it was asked for; its nodes from %s)", pa->id,
            (double)(now - pa->submitted_ns) / 1e9,
            from_squeue ? "squeue" : "its batch script's layout");
    if (err == KILN_ECONFLICT) { /* the script has not written it yet: look again soon */
        s->sq_fast_until = now + 1000000000LL;
        return KILN_ECONFLICT;
    }
    if (err != KILN_OK) { /* nothing can run in it: give it back, ask again later */
        give_back(s, pa->id);
        pending_drop(s, pa);
        return err == KILN_ENOMEM ? KILN_ENOMEM : KILN_ECONFLICT;
    }
    pending_drop(s, pa); /* the job holds it now: its slots say which */
    return KILN_OK;
}

/* kiln's own nodes: the book answers at once */
static kiln_err place_local(sup *s, const place_who *w, const kiln_replica_plan *plans, size_t np,
                            const kiln_sched_rules *ru, kiln_placement *pl, char *why,
                            size_t whylen)
{
    (void)w;
    pthread_mutex_lock(&s->d->mu);
    kiln_err err = kiln_sched_place_rules(s->d->sched, plans, np, ru, pl, why, whylen);
    pthread_mutex_unlock(&s->d->mu);
    return err;
}

static void slurm_tick(sup *s, int64_t now);

/* The placement backends' table (the layout of src/exec's): what differs
 * between them. Releasing is common (kiln's book, then the allocations a
 * slot names, which kiln's own slots never do). */
typedef struct placer {
    const char *name;
    kiln_err (*place)(sup *s, const place_who *w, const kiln_replica_plan *plans, size_t np,
                      const kiln_sched_rules *ru, kiln_placement *pl, char *why, size_t whylen);
    void (*tick)(sup *s, int64_t now); /* NULL: nothing to look at */
} placer;

static const placer placers[] = {
    {"kiln", place_local, NULL},
    {"slurm", place_in_slurm, slurm_tick},
};

static const placer *placer_of(const sup *s)
{
    return &placers[place_slurm(s) ? 1 : 0];
}

kiln_err place_job(sup *s, const place_who *w, const kiln_replica_plan *plans, size_t np,
                   const kiln_sched_rules *ru, kiln_placement *pl, char *why, size_t whylen)
{
    return placer_of(s)->place(s, w, plans, np, ru, pl, why, whylen);
}

/* Cancels the allocations that hold p's slots [from, to) (each once). */
static void cancel_allocs(sup *s, const kiln_placement *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        long a = p->slots[i].alloc;
        bool seen = a <= 0;
        for (size_t k = from; !seen && k < i; k++)
            seen = p->slots[k].alloc == a;
        if (!seen) give_back(s, a);
    }
}

bool place_waiting(const sup *s, const place_who *w, char *why, size_t whylen)
{
    char name[256];
    alloc_name(w, name, sizeof name);
    const palloc *pa = place_slurm(s) ? pending_find(s, name) : NULL;
    if (!pa) return false;
    const kiln_slurm_alloc_row *row = kiln_slurm_alloc_find(&s->sq, pa->id, NULL);
    kiln_slurm_alloc_state st = row ? kiln_slurm_alloc_state_of(row) : KILN_SLURM_ALLOC_PENDING;
    if (st == KILN_SLURM_ALLOC_PENDING)
        snprintf(why, whylen, "allocation %ld is pending (%s)", pa->id,
                 row && row->reason[0] ? row->reason : "submitted");
    else
        snprintf(why, whylen, "allocation %ld is %s; its layout is being read", pa->id,
                 row ? row->state : "gone from squeue");
    return true;
}

void place_forget(sup *s, const place_who *w)
{
    char name[256];
    alloc_name(w, name, sizeof name);
    palloc *pa = place_slurm(s) ? pending_find(s, name) : NULL;
    if (!pa) return;
    give_back(s, pa->id);
    pending_drop(s, pa);
}

void place_sweep(sup *s, int64_t since)
{
    for (palloc *p = s->pending, *next; place_slurm(s) && p; p = next) {
        next = p->next;
        if (!p->gang || p->asked_ns >= since) continue;
        give_back(s, p->id);
        pending_drop(s, p);
    }
}

void place_release(sup *s, const kiln_placement *pl)
{
    pthread_mutex_lock(&s->d->mu);
    kiln_sched_release(s->d->sched, pl);
    pthread_mutex_unlock(&s->d->mu);
    if (pl->n) cancel_allocs(s, pl, 0, pl->n);
}

void place_release_slot(sup *s, kiln_placement *pl, size_t i)
{
    kiln_placement one = {.slots = &pl->slots[i], .n = 1};
    pthread_mutex_lock(&s->d->mu);
    kiln_sched_release(s->d->sched, &one);
    pthread_mutex_unlock(&s->d->mu);
    /* an allocation of its own (an elastic worker's) goes back to Slurm;
     * one its gang shares stays until the gang ends */
    long a = pl->slots[i].alloc;
    bool shared = false;
    for (size_t k = 0; a > 0 && k < pl->n; k++)
        shared |= k != i && pl->slots[k].alloc == a && pl->slots[k].node != (size_t)-1;
    if (a > 0 && !shared) give_back(s, a);
    pl->slots[i].alloc = 0;
}

void place_tick(sup *s, int64_t now)
{
    const placer *p = placer_of(s);
    if (p->tick) p->tick(s, now);
}

/* How often squeue is read: every 0.5 s, and every 25 ms for 2 s after a
 * submit (Slurm often starts an allocation within 0.5 s; squeue took 5 ms
 * on the test cluster, and a gang's RUNNING waits for it:
 * bench/slurm_latency.sh). */
#define SQ_EVERY_NS      500000000LL
#define SQ_FAST_EVERY_NS 25000000LL

static int64_t sq_every(const sup *s, int64_t now)
{
    return now < s->sq_fast_until ? SQ_FAST_EVERY_NS : SQ_EVERY_NS;
}

int place_wait_ms(const sup *s, int64_t now)
{
    if (!place_slurm(s) || now >= s->sq_fast_until) return TICK_MS;
    int64_t left = s->sq_ns_read + sq_every(s, now) - now;
    int ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    return ms < TICK_MS ? ms : TICK_MS;
}

/* p's squeue row when p is a job's gang allocation that Slurm holds
 * PENDING (the job QUEUED), else NULL: a trial's or an elastic worker's
 * allocation waits inside a running job. */
static const kiln_slurm_alloc_row *gang_pending(const sup *s, const palloc *p)
{
    const kiln_slurm_alloc_row *row = p->gang ? kiln_slurm_alloc_find(&s->sq, p->id, NULL) : NULL;
    return row && kiln_slurm_alloc_state_of(row) == KILN_SLURM_ALLOC_PENDING ? row : NULL;
}

/* Puts Slurm's reasons for w[0..n) (accounts.h) in place of kilnd's record
 * of why jobs wait (d->qwait, the API's kilnStatus.queue), under queues_mu. */
static void publish_waits(kilnd *d, const kiln_slurm_wait *w, size_t n)
{
    size_t k = 0;
    pthread_mutex_lock(&d->queues_mu);
    kiln_slurm_waiting *r = kiln_slurm_waits(d->queues, w, n, &k);
    kilnd_qwait *v = r ? calloc(k ? k : 1, sizeof *v) : NULL;
    if (r && !v) kiln_slurm_waiting_free(r, k); /* out of memory: none recorded */
    for (size_t i = 0; v && i < k; i++)         /* the strings move over */
        v[i] = (kilnd_qwait){.project = r[i].project,
                             .job_id = r[i].job_id,
                             .cluster_queue = r[i].cluster_queue,
                             .local_queue = r[i].local_queue,
                             .why = r[i].why};
    if (v) free(r);
    kilnd_qwait_publish(d, v, v ? k : 0);
    pthread_mutex_unlock(&d->queues_mu);
}

/* Each ClusterQueue's usage as Slurm counts its account (accounts.h), for
 * GET /v1/queues: queues_mu is held to read the accounts and to store the
 * answer, never while scontrol runs (an API thread would wait up to 10 s). */
static void queue_usage(kilnd *d)
{
    char accts[4096];
    kiln_slurm_usage u;
    pthread_mutex_lock(&d->queues_mu);
    bool any = kiln_slurm_usage_accounts(d->queues, accts, sizeof accts);
    pthread_mutex_unlock(&d->queues_mu);
    if (!any || !kiln_slurm_usage_read(accts, &u)) return;
    pthread_mutex_lock(&d->queues_mu);
    if (d->queues) kiln_slurm_usage_store(d->queues, &u); /* SIGHUP may have swapped them */
    pthread_mutex_unlock(&d->queues_mu);
    kiln_slurm_usage_free(&u);
}

/* --slurm-queues accounts: why each job whose allocation Slurm holds
 * PENDING waits, in the API's kilnStatus.queue (Slurm's reason in its
 * ClusterQueue's words: accounts.h), from the squeue just read; and, once
 * a second, each ClusterQueue's usage as Slurm counts its account. */
static void slurm_waits(sup *s, int64_t now)
{
    kilnd *d = s->d;
    size_t cap = 0, n = 0;
    for (const palloc *p = s->pending; p; p = p->next)
        cap++;
    kiln_slurm_wait *w = calloc(cap ? cap : 1, sizeof *w);
    for (const palloc *p = s->pending; w && p; p = p->next) {
        const kiln_slurm_alloc_row *row = gang_pending(s, p);
        if (!row) continue;
        w[n++] = (kiln_slurm_wait){p->project, p->job_id, p->account[0] ? p->account : NULL,
                                   p->qos[0] ? p->qos : NULL, row->reason};
    }
    if (w && s->sq.ok) publish_waits(d, w, n);
    free(w);
    if (now - s->usage_ns_read >= 1000000000LL && !d->stop) {
        queue_usage(d); /* GET /v1/queues: Slurm's count */
        s->usage_ns_read = now;
    }
}

typedef struct spend {
    long long prio;
    long id;
} spend;

/* Slurm's order of pending jobs: higher priority first, then older. */
static int spend_cmp(const void *pa, const void *pb)
{
    const spend *a = pa, *b = pb;
    if (a->prio != b->prio) return a->prio > b->prio ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* jobPosition where Slurm tells it: each QUEUED job whose allocation Slurm
 * holds PENDING, placed among all of the partition's pending jobs, kiln's
 * or not, in Slurm's order (kilnd_spos_publish). One squeue of the
 * partition every 0.5 s, only while such an allocation exists. */
static void slurm_positions(sup *s, int64_t now)
{
    kilnd *d = s->d;
    size_t want = 0;
    if (now - s->spos_ns_read < SQ_EVERY_NS) return; /* not at the fast polls' pace */
    s->spos_ns_read = now;
    for (const palloc *p = s->pending; p; p = p->next)
        want += gang_pending(s, p) != NULL;
    if (!want) {
        if (s->spos_n) kilnd_spos_publish(d, NULL, 0);
        s->spos_n = 0;
        return;
    }
    char part[300], *text = NULL;
    snprintf(part, sizeof part, "--partition=%s", d->slurm.partition);
    char *argv[] = {"squeue", "--noheader", "--states=PENDING", part, "--format=%i|%Q", NULL};
    if (kiln_slurm_run(argv, &text, 10) != 0 || !text) { /* kept as they were */
        free(text);
        return;
    }
    size_t n = 0, cap = 64;
    spend *v = malloc(cap * sizeof *v);
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); v && ln; ln = strtok_r(NULL, "\n", &save)) {
        char *end = NULL;
        long id = strtol(ln, &end, 10);
        /* a heterogeneous job lists "ID+K" per component: counted once */
        if (!end || end == ln || (*end == '+' && strncmp(end, "+0|", 3) != 0)) continue;
        char *bar = strchr(ln, '|');
        if (!bar) continue;
        if (n == cap) {
            spend *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) break;
            v = nv;
            cap *= 2;
        }
        v[n++] = (spend){strtoll(bar + 1, NULL, 10), id};
    }
    free(text);
    if (!v) return;
    qsort(v, n, sizeof *v, spend_cmp);
    kilnd_spos *out = calloc(want, sizeof *out);
    size_t k = 0;
    for (const palloc *p = s->pending; out && p; p = p->next) {
        if (!gang_pending(s, p)) continue;
        long pos = 0;
        for (size_t i = 0; i < n && !pos; i++)
            if (v[i].id == p->id) pos = (long)i + 1;
        if (!pos || k == want) continue; /* pending a moment ago, not now */
        out[k].project = strdup(p->project);
        out[k].job_id = strdup(p->job_id);
        out[k].position = pos;
        if (!out[k].project || !out[k].job_id) { /* out of memory: left out */
            free(out[k].project);
            free(out[k].job_id);
            continue;
        }
        k++;
    }
    free(v);
    if (!out) return;
    kilnd_spos_publish(d, out, k);
    s->spos_n = k;
}

/* Slurm: squeue's view of kiln's allocations (sq_every), and the cancel of
 * pending ones nobody asks for. */
static void slurm_tick(sup *s, int64_t now)
{
    if (now - s->sq_ns_read < sq_every(s, now)) return;
    kiln_slurm_alloc_list_free(&s->sq);
    kiln_slurm_alloc_list_read("kiln-", &s->sq);
    s->sq_ns_read = now;
    /* slurmctld down or restarting: nothing is taken for lost while squeue
     * does not answer (place_lost), so the admin is told once, and once
     * more when it answers again */
    if (!s->sq.ok && !s->sq_down_ns) {
        s->sq_down_ns = now;
        fprintf(stderr,
                "kilnd: Slurm does not answer (squeue failed): running jobs are kept as they "
                "are, new allocations wait; asking again every %.1f s\n",
                SQ_EVERY_NS / 1e9);
    } else if (s->sq.ok && s->sq_down_ns) {
        fprintf(stderr, "kilnd: Slurm answers again, after %lld s\n",
                (long long)((now - s->sq_down_ns) / 1000000000));
        s->sq_down_ns = 0;
    }
    s->dirty = true; /* Slurm may have started a pending gang: a pass looks */
    for (palloc *p = s->pending, *next; p; p = next) {
        next = p->next;
        if (now - p->asked_ns > STALE_NS) { /* nobody wants it any more */
            give_back(s, p->id);
            pending_drop(s, p);
        }
    }
    if (s->d->queues_path && s->d->slurm.accounts) slurm_waits(s, now);
    if (!s->d->stop) slurm_positions(s, now);
}

long place_lost(const sup *s, const rjob *j, char *why, size_t whylen)
{
    if (!place_slurm(s) || !s->sq.ok) return -1;
    for (size_t i = 0; i < j->pl.n; i++) {
        const kiln_slot *sl = &j->pl.slots[i];
        if (sl->alloc <= 0 || sl->node == (size_t)-1) continue;
        const kiln_slurm_alloc_row *row = kiln_slurm_alloc_find(&s->sq, sl->alloc, NULL);
        if (row && kiln_slurm_alloc_state_of(row) != KILN_SLURM_ALLOC_ENDED) continue;
        /* an allocation handed over after this squeue was read is not lost */
        if (!row && s->sq_ns_read < j->admit_ns) continue;
        snprintf(why, whylen, "Slurm ended allocation %ld of %s (%s%s%s)", sl->alloc,
                 j->reps[i].task, row ? row->state : "gone from squeue",
                 row && row->reason[0] ? ": " : "", row ? row->reason : "");
        return (long)i;
    }
    return -1;
}

kiln_slurm_end place_ended(const sup *s, const rjob *j, size_t i, char *why, size_t whylen)
{
    const kiln_slot *sl = i < j->pl.n ? &j->pl.slots[i] : NULL;
    char st[64], ec[16];
    if (!place_slurm(s) || !sl || sl->alloc <= 0) return KILN_SLURM_END_RUNNING;
    /* a replica ran in it, so it was RUNNING: PENDING (or REQUEUED,
     * CONFIGURING) again is Slurm's requeue, the same id taken away from
     * under its replicas (whichever of the two the replica's exit finds
     * first on a loaded machine) */
    kiln_slurm_end e = kiln_slurm_alloc_end(sl->alloc, st, sizeof st, ec, sizeof ec);
    if (e == KILN_SLURM_END_TAKEN)
        snprintf(why, whylen, "Slurm ended allocation %ld of %s (%s%s%s)", sl->alloc,
                 j->reps[i].task, st[0] ? st : "gone from squeue, no accounting record",
                 ec[0] ? ", exit code " : "", ec);
    else if (e == KILN_SLURM_END_EXITED)
        snprintf(why, whylen,
                 "allocation %ld of %s ended by itself (%s%s%s): its batch script (which "
                 "writes the layout into the job's directory as the project's user, then "
                 "waits) ended",
                 sl->alloc, j->reps[i].task, st, ec[0] ? ", exit code " : "", ec);
    return e;
}

bool place_own(const rjob *j, size_t i)
{
    long a = i < j->pl.n ? j->pl.slots[i].alloc : 0;
    for (size_t k = 0; a > 0 && k < j->pl.n; k++)
        if (k != i && j->pl.slots[k].alloc == a) return false;
    return a > 0;
}

void place_free(sup *s)
{
    while (s->pending) { /* kilnd stopping: the next kilnd finds them by name */
        palloc *p = s->pending;
        s->pending = p->next;
        free(p);
    }
    kiln_slurm_alloc_list_free(&s->sq);
}

void rep_signal(sup *s, rjob *j, replica *r, int sig)
{
    size_t i = (size_t)(r - j->reps);
    const kiln_slot *sl = i < j->pl.n ? &j->pl.slots[i] : NULL;
    /* a step's program: Slurm signals it where it runs (srun, signalled
     * itself, would cancel the step at once, with no grace); SIGKILL ends
     * srun, and with it the step */
    if (sl && sl->alloc > 0 && sig != SIGKILL) {
        kiln_slurm_step_signal(sl->alloc, r->task, sig);
        return;
    }
    kiln_exec_signal(&s->d->exec, &r->h, sig);
}

kiln_err place_via(const sup *s, const rjob *j, size_t i, kiln_strv *via)
{
    const kiln_slot *sl = &j->pl.slots[i];
    if (sl->alloc <= 0) return KILN_OK;
    int cpus = s->d->slurm.machine_resources ? sl->vcpus : 0;
    return kiln_slurm_step_argv(sl->alloc, sl->alloc_part, s->d->cluster.nodes[sl->node].name,
                                sl->n_devs, cpus, j->reps[i].task, via);
}
