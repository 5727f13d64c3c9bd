/* src/exec/supervisor/supervisor.c - the one thread that runs jobs.
 *
 * Replicas run through the executor (kiln/exec.h): a backend table (local
 * processes, podman containers) where each replica runs under a monitor that
 * writes its log lines and records its exit, so replicas outlive kilnd and
 * are adopted by the next one. Everything that decides stays here, above the
 * backends: restart policy, drain, cancel, gang failure.
 *
 * Each tick (at most 100 ms, sooner when woken or when a monitor reports):
 *   1. poll every replica's monitor (started, exited, gone);
 *   2. reap exited monitors and helpers (zombies only: exits come from the
 *      monitors' files);
 *   3. per running job: cancel requests, deadlines, exits -> restart policy;
 *      jobs that are stopping get SIGKILL once their grace period is over,
 *      and are finished (state written) when their last replica is gone;
 *   4. drains: jobs with replicas on a drained node stop and are requeued;
 *   5. the queue: priority then submit time; each job placed whole or not
 *      at all; a job that can never fit fails at once.
 * The store's state is the truth: every change is a compare-and-set, so an
 * API cancel racing with a placement is decided by the store, not by luck. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "util/crc32c.h"
#include "exec/supervisor/pskeys.h"
#include "exec/supervisor/trainmetrics.h"
#include "kiln/exec.h"
#include "kiln/objects.h"
#include "kiln/tune.h"
#include "kiln/submit.h" /* kiln_job_program_args */

#include "exec/slurm/slurm.h"
#include "exec/supervisor/fetch.h"
#include "exec/supervisor/supervisor_int.h"

/* ---------- the queue ---------- */

/* The jobs the supervisor runs, by (project, job id), for one pass: whether
 * a queued job is one of them is O(1) instead of a walk of the running list. */
typedef struct running_set {
    rjob **tab; /* open addressing; NULL = empty */
    size_t cap;
} running_set;

static uint64_t job_hash(const char *project, const char *id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over "project\0id" */
    for (const char *p = project; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h *= 1099511628211ull;
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* false when out of memory (is_running then walks the list) */
static bool running_build(sup *s, running_set *rs)
{
    size_t n = 0;
    for (rjob *j = s->jobs; j; j = j->next)
        n++;
    rs->cap = 16;
    while (rs->cap < 2 * n)
        rs->cap *= 2;
    rs->tab = calloc(rs->cap, sizeof *rs->tab);
    if (!rs->tab) return false;
    for (rjob *j = s->jobs; j; j = j->next) {
        size_t k = job_hash(j->project, j->job_id) & (rs->cap - 1);
        while (rs->tab[k])
            k = (k + 1) & (rs->cap - 1);
        rs->tab[k] = j;
    }
    return true;
}

static bool is_running(sup *s, const running_set *rs, const char *project, const char *id)
{
    if (!rs->tab) {
        for (rjob *j = s->jobs; j; j = j->next)
            if (strcmp(j->project, project) == 0 && strcmp(j->job_id, id) == 0) return true;
        return false;
    }
    for (size_t k = job_hash(project, id) & (rs->cap - 1); rs->tab[k]; k = (k + 1) & (rs->cap - 1))
        if (strcmp(rs->tab[k]->project, project) == 0 && strcmp(rs->tab[k]->job_id, id) == 0)
            return true;
    return false;
}

static void fail_queued(sup *s, kiln_job_record *r, kiln_job_state to, const char *msg)
{
    kilnd *d = s->d;
    if (kiln_store_job_transition(d->store, r->project, r->job->job_id, KILN_STATE_MASK(QUEUED), to,
                                  msg, kiln_now_ns(), NULL) != KILN_OK)
        return;
    if (to == KILN_STATE_FAILED) d->failures_total[KILND_FAIL_UNSCHEDULABLE]++;
    kiln_jobfiles_event(d->jobfiles, r->project, r->job->job_id,
                        to == KILN_STATE_FAILED ? "ERROR" : "WARNING", "Job %s: %s",
                        kiln_job_state_name(to), msg);
}

/* Elastic PyTorchJobs start with as many workers as fit now, from maxReplicas
 * down to minReplicas (the rest are added when devices free up: grow()).
 * With elasticPolicy.metrics they start from the Worker replicas (within
 * the bounds), as the operator's job does before its HPA acts (hpa.c).
 * `plans` has room for KILN_ROLE_COUNT; *np is updated. Called under d->mu. */
static kiln_err place_elastic(sup *s, const place_who *who, const kiln_job *job,
                              kiln_replica_plan *plans, size_t *np, const kiln_sched_rules *ru,
                              kiln_placement *pl, char *why, size_t whylen)
{
    const kiln_elastic_policy *ep = &job->training_input.pytorch_job.elastic_policy;
    int64_t wo = job->training_input.pytorch_job.workers_only ? 1 : 0;
    size_t w = *np;
    for (size_t p = 0; p < *np; p++)
        if (plans[p].role == KILN_ROLE_WORKER) w = p;
    if (w == *np) { /* one Worker only: the others have the master's shape (worker 0's) */
        if (*np == 0 || *np >= KILN_ROLE_COUNT || !wo)
            return place_job(s, who, plans, *np, ru, pl, why, whylen);
        plans[w] = plans[0];
        plans[w].role = KILN_ROLE_WORKER;
    }
    kiln_err err = KILN_EINVAL;
    int64_t top = ep->max_replicas;
    if (ep->n_metrics > 0) { /* autoscaled: the Worker replicas first, then the HPA decides */
        top = job->training_input.worker_count + wo;
        if (top < ep->min_replicas) top = ep->min_replicas;
        if (top > ep->max_replicas) top = ep->max_replicas;
    }
    /* Slurm: the gang is minReplicas workers, one allocation; the others
     * are asked of Slurm one by one (grow), each an allocation of its own,
     * and join the job as Slurm grants them */
    if (place_slurm(s)) top = ep->min_replicas > 1 ? ep->min_replicas : 1;
    for (int64_t want = top; want >= ep->min_replicas && want >= 1; want--) {
        plans[w].count = want - wo;
        size_t n = plans[w].count > 0 ? w + 1 : w; /* a PyTorchJob has no roles past Worker */
        err = place_job(s, who, plans, n, ru, pl, why, whylen);
        if (err == KILN_ECONFLICT && place_slurm(s)) break; /* Slurm's answer: it waits */
        if (err == KILN_OK) {
            *np = n;
            break;
        }
    }
    return err;
}

/* Accelerator types that a job earlier in the queue is waiting for. */
typedef struct blocked {
    const char *types[16]; /* catalog-owned names */
    size_t n;
} blocked;

static bool is_blocked(const blocked *b, const char *type)
{
    for (size_t i = 0; type && i < b->n; i++)
        if (b->types[i] == type || strcmp(b->types[i], type) == 0) return true;
    return false;
}

/* Whether try_start may pass over e without asking the placement, to the
 * same effect (no side effects: a pure test):
 *  - a job that can fit this cluster (placement said so for its shape once)
 *    whose every accelerator type an earlier job waits for: placed, it
 *    would be given back (held); not placed, it would block only types
 *    already blocked;
 *  - a job whose shape did not fit earlier in this pass: the cluster has
 *    only filled up since (placements taken, held ones given back), so it
 *    does not fit now, and that job blocked the same types.
 * maxWaitTime is not looked at here: try_start does that first. */
static bool skip_now(sup *s, const qent *e, const blocked *b)
{
    /* Slurm orders the allocations (priorities, backfill): every queued
     * job's is asked for, and looked at, on every pass */
    if (place_slurm(s)) return false;
    if (squeue_failed_now(s, e)) return true;
    if (e->nt == 0 || !squeue_fits(s, e)) return false;
    for (size_t t = 0; t < e->nt; t++)
        if (!is_blocked(b, e->types[t])) return false;
    return true;
}

/* Tries to start one QUEUED job. Queue order is kept per accelerator type: a
 * job waiting for busy V100s holds back the later jobs that want V100s (so a
 * big job is not starved by small ones arriving after it), while jobs wanting
 * other types, or none, may start past it. */
static void try_start(sup *s, qent *e, blocked *b, const kiln_map *extra,
                      const kiln_toleration *xtol, size_t n_xtol, const kiln_qtopology *topo,
                      char *wait_why, size_t wait_len)
{
    kilnd *d = s->d;
    kiln_job_record *rec = e->rec;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    char why[512];
    kiln_placement pl = {0};
    rjob *j = NULL;
    const kiln_training_input *ti = &rec->job->training_input;
    int64_t now = kiln_now_ns();

    if (ti->has_scheduling && ti->scheduling.has_max_wait_time &&
        now - rec->create_ns > duration_ns(&ti->scheduling.max_wait_time)) {
        snprintf(why, sizeof why, "still queued after maxWaitTime (%llds); cancelled",
                 (long long)ti->scheduling.max_wait_time.seconds);
        fail_queued(s, rec, KILN_STATE_CANCELLED, why);
        squeue_gone(s, e);
        return;
    }
    size_t np = e->np; /* planned once, when it was queued (queue.c) */
    if (np == 0) {     /* validated jobs always have a master; a catalog change could break that */
        fail_queued(s, rec, KILN_STATE_FAILED, "the job has no replicas to run in this catalog");
        squeue_gone(s, e);
        return;
    }
    if (skip_now(s, e, b)) return;
    memcpy(plans, e->plans, np * sizeof *plans); /* place_elastic changes its copy */
    kiln_sched_rules ru; /* the roles' selectors (joined with `extra`) and tolerations */
    kiln_sched_rules_of(rec->job, &ru);
    ru.extra = xtol;
    ru.n_extra = n_xtol;
    rules_topology(&ru, topo);
    const kiln_map **sel = ru.selector;
    kiln_map merged[KILN_ROLE_COUNT] = {0}; /* the role's selector and `extra` */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        if (!extra || !extra->n) continue;
        bool ok = true;
        for (size_t i = 0; ok && sel[r] && i < sel[r]->n; i++)
            ok = kiln_map_set(&merged[r], sel[r]->keys[i], sel[r]->vals[i]) == KILN_OK;
        for (size_t i = 0; ok && i < extra->n; i++)
            ok = kiln_map_set(&merged[r], extra->keys[i], extra->vals[i]) == KILN_OK;
        if (ok) sel[r] = &merged[r];
    }
    /* the placement backend takes d->mu itself (kiln's book); Slurm's
     * commands run without it */
    place_who who = {rec->project, rec->job->job_id, NULL, rec->job};
    /* under Slurm a tuning job's study starts holding nothing (each trial
     * is an allocation of its own, launch_trial): nothing is asked of
     * Slurm for the job itself, only whether its shape can ever fit */
    bool study_only = rec->job->training_input.has_hyperparameters && place_slurm(s);
    kiln_err err = study_only ? place_fits(s, plans, np, &ru, why, sizeof why)
                   : rec->job->training_input.pytorch_job.has_elastic_policy
                       ? place_elastic(s, &who, rec->job, plans, &np, &ru, &pl, why, sizeof why)
                       : place_job(s, &who, plans, np, &ru, &pl, why, sizeof why);
    for (int r = 0; r < KILN_ROLE_COUNT; r++)
        kiln_map_clear(&merged[r]);
    if (wait_why && wait_len) snprintf(wait_why, wait_len, "%s", err == KILN_OK ? "" : why);
    if (err == KILN_EINVAL && extra && extra->n) {
        /* never fits under this flavor's nodes: the admission tries another
         * flavor or waits; the job is not failed for the flavor's sake */
        return;
    }
    if (err == KILN_EINVAL || err == KILN_ELIMIT) {
        char msg[600];
        snprintf(msg, sizeof msg, "This job can never run on this cluster: %s", why);
        fail_queued(s, rec, KILN_STATE_FAILED, msg);
        squeue_gone(s, e);
        return;
    }
    if (err == KILN_OK || err == KILN_ECONFLICT)
        squeue_note_fits(s, e); /* the cluster can hold it (not: out of memory) */
    bool held = false;
    for (size_t p = 0; p < np; p++)
        held |= is_blocked(b, plans[p].accelerator_type);
    if (err == KILN_OK && held) { /* it fits, but an earlier job waits for these devices */
        place_release(s, &pl);
        kiln_placement_free(&pl);
        return;
    }
    /* sbatch refused it (an account or QOS Slurm does not know, slurmctld
     * down): it is asked again at each pass, and its log says Slurm's words
     * each time they change, not at every pass */
    if (err == KILN_ECONFLICT && place_slurm(s) && strncmp(why, "sbatch: ", 8) == 0) {
        uint32_t h = kiln_crc32c_update(0, why, strlen(why)) | 1;
        if (h != e->refused)
            kiln_jobfiles_event(d->jobfiles, rec->project, rec->job->job_id, "WARNING",
                                "Slurm refused its allocation (%s); kilnd asks again at each pass",
                                why);
        e->refused = h;
    }
    if (err != KILN_OK && place_slurm(s)) return; /* Slurm keeps the order of what waits */
    if (err != KILN_OK) { /* waits for devices: later jobs wanting them wait behind it */
        if (err == KILN_ECONFLICT) squeue_fail_now(s, e);
        for (size_t p = 0; p < np; p++)
            if (plans[p].accelerator_type && !is_blocked(b, plans[p].accelerator_type) &&
                b->n < sizeof b->types / sizeof *b->types)
                b->types[b->n++] = plans[p].accelerator_type;
        return;
    }
    squeue_gone(s, e); /* started, or no longer QUEUED: the store's answer decides */
    if (kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(QUEUED),
                                  KILN_STATE_PREPARING, NULL, now, NULL) != KILN_OK ||
        rec->job->training_input.has_hyperparameters) {
        /* cancelled meanwhile; or a tuning job, which fits: its trials are
         * placed one by one (start_trials) */
        if (rec->job->training_input.has_hyperparameters) study_begin(s, rec);
        place_release(s, &pl);
        kiln_placement_free(&pl);
        return;
    }
    j = calloc(1, sizeof *j);
    if (!j) goto nomem;
    j->log_fd = -1;
    j->project = strdup(rec->project);
    j->job_id = strdup(rec->job->job_id);
    j->reps = calloc(pl.n ? pl.n : 1, sizeof *j->reps);
    if (!j->project || !j->job_id || !j->reps) goto nomem;
    /* the admitting flavors' tolerations, for evict.c */
    if (!tolerations_copy(&j->xtol, &j->n_xtol, xtol, n_xtol)) goto nomem;
    j->pl = pl;
    pl = (kiln_placement){0};
    j->n = j->pl.n;
    j->job = rec->job;
    rec->job = NULL;
    rjob_elastic(j, now);
    j->start_ns = rec->start_ns;
    j->create_ns = rec->create_ns;
    j->admit_ns = now;
    j->restarts = rec->restarts;
    j->failures = rec->failures;
    j->metrics = runtime_kept(rec->runtime, "metrics"); /* a requeued job's last report */
    gpu_usage_load(j, rec->runtime);                    /* and its GPU time so far */
    j->next = s->jobs;
    s->jobs = j; /* from here on the job is released through the normal path */
    kiln_jobfiles_dir(d->jobfiles, j->project, j->job_id, j->dir, sizeof j->dir);
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/replicas", j->dir);
    kilnd_mkdirs(sub);
    snprintf(sub, sizeof sub, "%s/log.tsv", j->dir);
    j->log_fd = open(sub, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        replica_from_slot(s, r, &j->pl.slots[i]);
        r->port = port_take(s);
        if (r->port < 0) {
            begin_stop(s, j, AS_FAIL, "no free port in %d-%d for the replicas", d->port_base,
                       d->port_base + d->port_count - 1);
            return;
        }
    }
    kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "INFO",
                        "Job PREPARING: placed %zu replica%s", j->n, j->n == 1 ? "" : "s");
    /* a runtimeVersion the catalog mapped at create, and no longer maps
     * (kilnd restarted with another --catalog): no image to run it in */
    const kiln_training_input *jti = &j->job->training_input;
    if (jti->runtime_version && *jti->runtime_version &&
        !kiln_catalog_runtime(d->catalog, jti->runtime_version, jti->python_version)) {
        begin_stop(s, j, AS_FAIL,
                   "trainingInput.runtimeVersion %s (pythonVersion %s): this kilnd's catalog "
                   "maps it to no image any more (kiln catalog list runtime-versions)",
                   jti->runtime_version,
                   jti->python_version && *jti->python_version ? jti->python_version : "default");
        return;
    }
    /* what the placement cannot see: a container runtime, a CDI spec for
     * real GPUs in a container. Not now means never here. */
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        kiln_exec_kind kind =
            image_of(d->catalog, j->job, r->role) ? KILN_EXEC_CONTAINER : KILN_EXEC_LOCAL;
        /* a Slurm node's GPUs are that node's business (its CDI spec) */
        size_t ng = j->pl.slots[i].alloc > 0 ? 0 : (size_t)r->n_gpus;
        if (kiln_exec_check(&d->exec, kind, ng, r->simulated, why, sizeof why) != KILN_OK) {
            begin_stop(s, j, AS_FAIL, "This job can never run on node %s: the %s replica: %s",
                       d->cluster.nodes[r->node].name, r->task, why);
            return;
        }
    }
    spawn_attempt(s, j);
    return;
nomem:
    /* give the job back to the queue; the placement was not handed to j */
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(PREPARING),
                              KILN_STATE_QUEUED, NULL, now, NULL);
    rjob_free(s, j);
    place_release(s, &pl);
    kiln_placement_free(&pl);
}

bool start_admitted(sup *s, qent *e, const kiln_map *extra, const kiln_toleration *xtol,
                    size_t n_xtol, const kiln_qtopology *topo, char *why, size_t whylen)
{
    blocked b = {0}; /* admission ordered the jobs: no holding back by type here */
    rjob *before = s->jobs;
    if (why && whylen) why[0] = 0;
    /* a started job's spec moves to its rjob (e->rec->job is then NULL) */
    try_start(s, e, &b, extra, xtol, n_xtol, topo, why, whylen);
    return s->jobs != before && s->jobs && strcmp(s->jobs->project, e->rec->project) == 0;
}

/* A pass over the queue (kept in memory: queue.c), in queue order. */
static void schedule(sup *s)
{
    kilnd *d = s->d;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n = 0;
    qent **v = squeue_begin(s, &n);
    running_set rs = {0};
    running_build(s, &rs);
    blocked b = {0};
    if (kiln_admits(d)) { /* Kueue's admission decides the order (admit.c) */
        for (size_t i = 0; i < n; i++)
            v[i]->running =
                !v[i]->gone && is_running(s, &rs, v[i]->rec->project, v[i]->rec->job->job_id);
        admit_pass(s, v, n);
        n = 0;
    }
    for (size_t i = 0; i < n && !d->stop; i++) {
        qent *e = v[i];
        if (e->gone) continue;
        /* the cheap way past (to the same effect as try_start's) first:
         * most of a long queue waits behind a full cluster */
        if ((e->max_wait_ns == INT64_MAX || kiln_now_ns() <= e->max_wait_ns) && skip_now(s, e, &b))
            continue;
        if (!is_running(s, &rs, e->rec->project, e->rec->job->job_id))
            try_start(s, e, &b, NULL, NULL, 0, NULL, NULL, 0);
    }
    free(rs.tab);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    static const double bounds[KILND_PASS_BUCKETS] = KILND_PASS_BOUNDS;
    s->pass_seconds_last = (double)ns / 1e9;
    d->sched_pass.count++; /* before the buckets: /metrics reads them first */
    d->sched_pass.sum_ns += (unsigned long long)ns;
    for (size_t i = 0; i < KILND_PASS_BUCKETS; i++)
        if (s->pass_seconds_last <= bounds[i]) d->sched_pass.le[i]++;
}

/* ---------- exits and the restart policy ---------- */

/* ---------- elastic PyTorchJobs: workers come and go ---------- */

/* A PyTorch worker of an elastic job (kiln's master is Worker 0 when the
 * PyTorchJob has Workers only). */
static bool elastic_worker(const rjob *j, const replica *r)
{
    return j->elastic && (r->role == KILN_ROLE_WORKER || (j->wo && r->role == KILN_ROLE_MASTER));
}

static int live_workers(const rjob *j)
{
    int n = 0;
    for (size_t i = 0; i < j->n; i++)
        n += elastic_worker(j, &j->reps[i]) && !j->reps[i].dropped && !j->reps[i].leaving;
    return n;
}

/* Takes replica `r` out of the job: its slot and port go back. */
static void drop_replica(sup *s, rjob *j, replica *r)
{
    size_t i = (size_t)(r - j->reps);
    place_release_slot(s, &j->pl, i);
    j->pl.slots[i].node = (size_t)-1; /* released: kiln_sched_release skips it */
    if (r->port > 0) port_give(s, r->port);
    r->port = 0;
    r->dropped = true;
    r->leaving = false;
    r->kill_at_ns = 0;
    s->dirty = true; /* its devices may start a queued job */
}

/* An elastic worker ended. One that failed is started again alone, up to
 * maxRestarts, while the others carry on (torchrun's rendezvous re-forms
 * the group with it); one leaving for a drain, or out of restarts, leaves
 * the job, which goes on while minReplicas workers remain. Returns false
 * when the ordinary rules decide (success, or too few workers left). */
static bool elastic_exit(sup *s, rjob *j, replica *r, int code)
{
    if (!elastic_worker(j, r) || (code == 0 && !r->leaving)) return false;
    const kiln_elastic_policy *ep = &j->job->training_input.pytorch_job.elastic_policy;
    int max = ep->has_max_restarts ? (int)ep->max_restarts : kiln_job_backoff_limit(j->job);
    bool rdzv_host = j->wo ? r->role == KILN_ROLE_MASTER : r->index == 0;
    char why[512];
    if (!r->leaving && r->restarts < max) {
        r->restarts++;
        kiln_jobfiles_event(
            s->d->jobfiles, j->project, j->job_id, "WARNING",
            "%s exited with status %d: starting it again alone (restart %d of at most %d, "
            "elasticPolicy.maxRestarts); the other workers carry on",
            r->task, code, r->restarts, max);
        close_replica(s, j, r);
        if (spawn_one(s, j, (size_t)(r - j->reps), why, sizeof why) != KILN_OK)
            begin_stop(s, j, AS_FAIL, "%s", why);
        save_runtime(s, j);
        return true;
    }
    bool was_leaving = r->leaving;
    r->leaving = true; /* not counted below */
    if (rdzv_host || live_workers(j) < j->el_min) {
        r->leaving = was_leaving;
        return false;
    }
    drop_replica(s, j, r);
    close_replica(s, j, r);
    kiln_jobfiles_event(
        s->d->jobfiles, j->project, j->job_id, "WARNING",
        "%s left the job (%s); %d workers carry on (minReplicas %d, maxReplicas %d)", r->task,
        !was_leaving    ? "out of restarts"
        : r->scaled_in  ? "the autoscaler took it away"
        : r->alloc_gone ? "Slurm ended its allocation"
                        : "its node is drained",
        live_workers(j), j->el_min, j->el_max);
    save_runtime(s, j);
    return true;
}

/* Takes workers out of an elastic job down to `want` (the autoscaler's
 * count): the newest first, never the rendezvous host, each stopped as a
 * drain stops it (SIGTERM, SIGKILL after the grace period; elastic_exit
 * then drops it). torchrun's agents re-form the group without them. */
static void shrink(sup *s, rjob *j, int want)
{
    while (live_workers(j) > want && live_workers(j) > j->el_min) {
        replica *pick = NULL;
        for (size_t i = 0; i < j->n; i++) {
            replica *r = &j->reps[i];
            bool rdzv_host = j->wo ? r->role == KILN_ROLE_MASTER : r->index == 0;
            if (!elastic_worker(j, r) || r->dropped || r->leaving || rdzv_host) continue;
            if (!pick || r->index > pick->index) pick = r;
        }
        if (!pick) break;
        pick->leaving = true;
        pick->scaled_in = true;
        if (pick->alive) {
            rep_signal(s, j, pick, SIGTERM);
            pick->kill_at_ns = kiln_now_ns() + (int64_t)s->d->grace_ms * 1000000;
        }
        kiln_jobfiles_event(
            s->d->jobfiles, j->project, j->job_id, "INFO",
            "Removing %s: the autoscaler wants %d workers (SIGTERM, SIGKILL after %d ms)",
            pick->task, want, s->d->grace_ms);
    }
    save_runtime(s, j);
}

/* Adds one worker to an elastic job below maxReplicas when one fits now:
 * torchrun's agents see it waiting and re-form the group with it. With
 * elasticPolicy.metrics the autoscaler's count (hpa.c) is the bound instead,
 * and workers above it are taken away (shrink). */
static void grow(sup *s, rjob *j, int64_t now)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    kiln_placement pl = {0};
    char why[512];
    if (!j->elastic || j->after != AS_NONE || j->fetch) return;
    int want = j->hpa ? hpa_tick(s, j, live_workers(j), elastic_worker, now) : j->el_max;
    if (j->hpa && live_workers(j) > want) shrink(s, j, want);
    if (now < j->grow_at_ns || live_workers(j) >= want) return;
    j->grow_at_ns = now + 1000000000LL; /* a try a second at most */
    size_t np = kiln_catalog_plan(d->catalog, j->job, plans), w = 0;
    while (w < np && plans[w].role != KILN_ROLE_WORKER)
        w++;
    if (np == 0) return;
    if (w == np) w = 0; /* Workers only, one of them: the others have worker 0's shape */
    plans[w].role = KILN_ROLE_WORKER;
    plans[w].count = 1;
    const kiln_replica_config *rc = kiln_job_role_config(j->job, KILN_ROLE_WORKER);
    if (!rc) rc = kiln_job_role_config(j->job, KILN_ROLE_MASTER);
    kiln_sched_rules ru = {0}; /* the worker's, from the config its shape has */
    ru.selector[KILN_ROLE_WORKER] = rc && rc->node_selector.n ? &rc->node_selector : NULL;
    ru.tolerations[KILN_ROLE_WORKER] = rc ? rc->tolerations : NULL;
    ru.n_tolerations[KILN_ROLE_WORKER] = rc ? rc->n_tolerations : 0;
    int index = 0;
    for (size_t i = 0; i < j->n; i++)
        if (j->reps[i].role == KILN_ROLE_WORKER && j->reps[i].index >= index)
            index = j->reps[i].index + 1;
    char tag[32];
    snprintf(tag, sizeof tag, "-w%d", index);
    place_who who = {j->project, j->job_id, tag, j->job};
    if (place_slurm(s)) j->grow_at_ns = now + 200000000LL; /* Slurm's answer comes by squeue */
    kiln_err err = place_job(s, &who, &plans[w], 1, &ru, &pl, why, sizeof why);
    if (err != KILN_OK) return;
    replica *reps = realloc(j->reps, (j->n + 1) * sizeof *reps);
    if (reps) j->reps = reps;
    kiln_slot *slots = reps ? realloc(j->pl.slots, (j->pl.n + 1) * sizeof *slots) : NULL;
    if (slots) j->pl.slots = slots;
    int port = slots ? port_take(s) : -1;
    if (port < 0) {
        place_release(s, &pl);
        kiln_placement_free(&pl);
        return;
    }
    j->pl.slots[j->pl.n++] = pl.slots[0];
    j->pl.slots[j->pl.n - 1].index = index;
    replica *r = &j->reps[j->n++];
    replica_from_slot(s, r, &j->pl.slots[j->pl.n - 1]); /* a worker: plans[w].role */
    r->port = port;
    kiln_placement_free(&pl);
    kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "INFO",
                        "Adding %s: %s; the job now has %d of at most %d workers", r->task,
                        j->hpa ? "the autoscaler wants more workers" : "devices are free",
                        live_workers(j), j->el_max);
    if (spawn_one(s, j, j->n - 1, why, sizeof why) != KILN_OK) begin_stop(s, j, AS_FAIL, "%s", why);
    save_runtime(s, j);
}

static void on_exit_of(sup *s, rjob *j, replica *r)
{
    int code = r->code;
    r->handled = true;
    if (r->failed) { /* it could never run: no restart policy can help */
        kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "ERROR", "%s", r->why);
        begin_stop(s, j, AS_FAIL, "%s", r->why);
        return;
    }
    if (r->lost)
        kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING",
                            "%s: %s; counted as killed (status %d) for its restart policy", r->task,
                            r->why, code);
    else
        kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, code ? "WARNING" : "INFO",
                            "%s exited with status %d", r->task, code);
    if (j->after != AS_NONE) return; /* stopping anyway */
    /* placed by Slurm: a step killed because Slurm ended its allocation
     * (scancel, a node lost, preempted) failed through no fault of its
     * own. An elastic worker in an allocation of its own leaves the job
     * (grow asks Slurm for another); anything else queues the job again */
    char lost[512];
    size_t ri = (size_t)(r - j->reps);
    /* the rendezvous host (a Workers-only job's Worker 0, kiln's master) is
     * in the gang's allocation, never one of its own, even when it is the
     * gang's only replica (minReplicas 1): its allocation ending queues the
     * job again rather than letting it leave */
    bool rdzv_host = j->wo && r->role == KILN_ROLE_MASTER;
    /* One rule for how a replica under Slurm ends, by Slurm's record of
     * its allocation (whatever the status: a shell whose child Slurm
     * killed may still end 0): Slurm took the allocation away, and the job
     * is queued again without a restart counted, up to
     * KILND_SLURM_FREE_REQUEUES times; or the allocation ended by itself
     * (its script failed: a set-up that cannot work), or still runs, and
     * the exit goes to the restart policy and backoffLimit below. */
    kiln_slurm_end how = place_ended(s, j, ri, lost, sizeof lost);
    if (how == KILN_SLURM_END_TAKEN) {
        if (elastic_worker(j, r) && !rdzv_host && place_own(j, ri)) {
            r->leaving = true;
            r->alloc_gone = true; /* elastic_exit says why it left */
            kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING",
                                "%s: the worker leaves the job", lost);
        } else if (j->restarts - j->failures < KILND_SLURM_FREE_REQUEUES) {
            begin_stop(s, j, AS_REQUEUE,
                       "%s; the job is queued again (free requeue %d of at most %d)", lost,
                       j->restarts - j->failures + 1, KILND_SLURM_FREE_REQUEUES);
            return;
        } else {
            kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING",
                                "%s, the job's %d free requeues spent: counted as a failure", lost,
                                KILND_SLURM_FREE_REQUEUES);
            if (code == 0) code = 1;
        }
    } else if (how == KILN_SLURM_END_EXITED) {
        kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING", "%s", lost);
        if (code == 0) code = 1; /* its step was killed with it: a failure */
        /* the allocation is gone: a retry the restart policy allows needs a
         * new one (a restart in place would die at start), counted */
        const char *p = kiln_job_restart_policy(j->job, r->role);
        if (!elastic_worker(j, r) && kiln_restart_policy_retries(p, code) &&
            j->failures < kiln_job_backoff_limit(j->job)) {
            j->alloc_failed = true;
            begin_stop(s, j, AS_REQUEUE,
                       "The replica %s exited with status %d (%s); the job is queued again for "
                       "a new allocation (restart policy %s, restart %d of at most %d)",
                       r->task, code, lost, p, j->failures + 1, kiln_job_backoff_limit(j->job));
            return;
        }
    }
    /* what the restart and failure messages say of Slurm's record */
    char cause[560] = "";
    if (how == KILN_SLURM_END_EXITED) snprintf(cause, sizeof cause, " (%s)", lost);
    if (elastic_exit(s, j, r, code)) return;
    const char *pol = kiln_job_restart_policy(j->job, r->role);
    if (code == 0 && r->role == KILN_ROLE_MASTER) {
        begin_stop(s, j, AS_SUCCEED, "Job completed successfully.");
        return;
    }
    if (code == 0 && strcmp(pol, "Always") != 0) return; /* a worker or ps that finished: fine */
    bool retry = kiln_restart_policy_retries(pol, code);
    if (retry && j->failures < kiln_job_backoff_limit(j->job)) {
        /* an all-reduce group cannot lose a member: restart all of it */
        begin_stop(s, j, AS_RESTART,
                   "The replica %s exited with status %d%s%s; restarting the job's replicas "
                   "(restart policy %s, restart %d of at most %d)",
                   r->task, code, r->lost ? " (its monitor is gone)" : "", cause, pol,
                   j->failures + 1, kiln_job_backoff_limit(j->job));
        return;
    }
    j->fail_reason = retry ? KILND_FAIL_BACKOFF_LIMIT : KILND_FAIL_REPLICA_EXIT;
    if (retry)
        begin_stop(s, j, AS_FAIL,
                   "The replica %s exited with a non-zero status of %d%s; the backoff limit "
                   "(%d restarts) is reached.",
                   r->task, code, cause, kiln_job_backoff_limit(j->job));
    else
        begin_stop(s, j, AS_FAIL,
                   "The replica %s exited with a non-zero status of %d (restart policy %s)%s%s%s.",
                   r->task, code, pol, r->lost ? ": " : "", r->lost ? r->why : "", cause);
}

static void enter_running(sup *s, rjob *j);

static void finish(sup *s, rjob *j, rjob **link)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();
    const char *msg = j->after_msg ? j->after_msg : "";

    for (size_t i = 0; i < j->n; i++)
        pump_metrics(s, j, &j->reps[i]); /* the last reports before the end */
    if (j->study && j->after != AS_RESTART) {
        trial_finish(s, j);
        *link = j->next;
        rjob_free(s, j);
        return;
    }
    switch (j->after) {
    case AS_RESTART:
        j->failures++;
        j->restarts++;
        d->restarts_total[KILND_RESTART_FAILURE]++;
        kiln_log_write(j->log_fd, "WARNING", "service", msg, strlen(msg));
        for (size_t i = 0; i < j->n; i++) {
            close_replica(s, j, &j->reps[i]);
            j->reps[i].alive = false;
        }
        j->after = AS_NONE;
        j->fetch_next = 0; /* a new attempt fetches its packages again */
        spawn_attempt(s, j);
        return;
    case AS_REQUEUE: {
        j->restarts++;
        /* a GPU that failed under it, or a taint eviction, counts against
         * backoffLimit; a drain or a preemption does not */
        j->failures += j->gpu_failure || j->alloc_failed || j->evicted;
        d->restarts_total[j->gpu_failure    ? KILND_RESTART_GPU
                          : j->alloc_failed ? KILND_RESTART_FAILURE
                          : j->evicted      ? KILND_RESTART_EVICTED
                          : j->preempted    ? KILND_RESTART_PREEMPTED
                                            : KILND_RESTART_DRAIN]++;
        json_t *gu = gpu_usage_json(j);
        char *keep = runtime_for_requeue(j->metrics, NULL, gu);
        json_decref(gu);
        if (j->preempted) { /* the Preempted condition, shown while it waits */
            json_t *k = keep ? json_loads(keep, 0, NULL) : json_object();
            if (k) {
                json_object_set(k, "preempted", j->preempted);
                char *nk = json_dumps(k, JSON_COMPACT);
                if (nk) {
                    free(keep);
                    keep = nk;
                }
                json_decref(k);
            }
        }
        kiln_store_job_set_runtime(d->store, j->project, j->job_id, j->restarts, j->failures, keep);
        free(keep);
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_QUEUED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "WARNING", "service", msg, strlen(msg));
        break;
    }
    case AS_SUCCEED:
        /* the chief succeeded before every replica had reported its start
         * (a quick job, a busy machine): the job ran all the same, and its
         * history and startTime say so */
        if (!j->running) enter_running(s, j);
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING) |
                                      KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_SUCCEEDED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "INFO", "service", msg, strlen(msg));
        break;
    case AS_FAIL:
        if (kiln_store_job_transition(d->store, j->project, j->job_id,
                                      KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING),
                                      KILN_STATE_FAILED, msg, now, NULL) == KILN_OK)
            d->failures_total[j->fail_reason]++;
        kiln_store_job_transition(d->store, j->project, j->job_id, KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_CANCELLED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "ERROR", "service", msg, strlen(msg));
        break;
    case AS_CANCEL:
    case AS_NONE:
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(CANCELLING) | KILN_STATE_MASK(RUNNING) |
                                      KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_CANCELLED, msg[0] ? msg : NULL, now, NULL);
        kiln_log_write(j->log_fd, "INFO", "service", "Job CANCELLED", 13);
        break;
    }
    if (j->after != AS_REQUEUE) save_runtime(s, j);
    *link = j->next;
    rjob_free(s, j);
}

/* ---------- one tick ---------- */

static void check_job(sup *s, rjob *j, bool woken, int64_t now)
{
    kilnd *d = s->d;
    if (j->after == AS_NONE && woken) {
        kiln_job_record *r = NULL;
        if (kiln_store_job_get(d->store, j->project, j->job_id, &r) == KILN_OK &&
            r->job->state == KILN_STATE_CANCELLING)
            begin_stop(s, j, AS_CANCEL, "Job cancelled by request");
        kiln_job_record_free(r);
    }
    /* maxRunningTime cancels, Kubeflow's activeDeadlineSeconds fails
     * (DeadlineExceeded): decided in src/exec/limits.c */
    char lwhy[256];
    kiln_exec_limit lim =
        j->after == AS_NONE
            ? kiln_exec_limit_passed(j->job, j->start_ns, now,
                                     KILN_LIMIT_MAX_RUNNING_TIME | KILN_LIMIT_ACTIVE_DEADLINE, lwhy,
                                     sizeof lwhy)
            : KILN_LIMIT_NONE;
    if (lim == KILN_LIMIT_MAX_RUNNING_TIME) {
        kiln_store_job_transition(d->store, j->project, j->job_id, KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_CANCELLING, NULL, now, NULL);
        begin_stop(s, j, AS_CANCEL, "%s", lwhy);
    } else if (lim == KILN_LIMIT_ACTIVE_DEADLINE) {
        j->fail_reason = KILND_FAIL_DEADLINE;
        begin_stop(s, j, AS_FAIL, "%s", lwhy);
    }
    for (size_t i = 0; i < j->n; i++)
        if (!j->reps[i].alive && !j->reps[i].handled && j->reps[i].spawned)
            on_exit_of(s, j, &j->reps[i]);
}

/* Collects exited monitors and helpers (`podman kill`): their exits are
 * learnt from the monitors' files, so this only keeps zombies away. Only
 * those (kiln_exec_reap): other threads wait for their own children. */
static void reap(sup *s)
{
    (void)s;
    kiln_exec_reap();
}

/* Asks every replica's monitor where it is. */
static void watch(sup *s)
{
    for (rjob *j = s->jobs; j; j = j->next) {
        bool changed = false;
        for (size_t i = 0; i < j->n; i++) {
            replica *r = &j->reps[i];
            if (!r->alive) continue;
            int code = 0;
            kiln_exec_status st = kiln_exec_poll(&s->d->exec, &r->h, &code, r->why, sizeof r->why);
            switch (st) {
            case KILN_EXEC_STARTING:
                break;
            case KILN_EXEC_RUNNING:
                changed |= !r->started;
                r->started = true;
                break;
            case KILN_EXEC_EXITED:
                r->alive = false;
                r->code = code;
                changed = true;
                break;
            case KILN_EXEC_FAILED:
                r->alive = false;
                r->failed = true;
                r->code = 255;
                changed = true;
                break;
            case KILN_EXEC_LOST:
                r->alive = false;
                r->lost = true;
                r->code = 128 + SIGKILL;
                snprintf(r->why, sizeof r->why,
                         "its monitor is gone without recording an exit status (killed?)");
                /* whatever the monitor left running goes: never a replica unseen */
                kiln_exec_signal(&s->d->exec, &r->h, SIGKILL);
                changed = true;
                break;
            }
        }
        if (changed) save_runtime(s, j);
    }
}

/* PREPARING -> RUNNING: the transition, its startTime and its event. */
static void enter_running(sup *s, rjob *j)
{
    j->running = true;
    if (kiln_store_job_transition(s->d->store, j->project, j->job_id, KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_RUNNING, NULL, kiln_now_ns(), NULL) == KILN_OK) {
        kiln_job_record *fresh = NULL;
        if (kiln_store_job_get(s->d->store, j->project, j->job_id, &fresh) == KILN_OK)
            j->start_ns = fresh->start_ns;
        kiln_job_record_free(fresh);
        kiln_log_write(j->log_fd, "INFO", "service", "Job RUNNING", 11);
    }
}

/* PREPARING -> RUNNING once every replica of the job runs its program. */
static void mark_running(sup *s, rjob *j)
{
    if (j->running || j->after != AS_NONE) return;
    for (size_t i = 0; i < j->n; i++)
        if (!j->reps[i].dropped && !j->reps[i].started) return;
    enter_running(s, j);
    save_runtime(s, j);
}

/* A drain takes the elastic workers on node `n` out of the job, which
 * carries on while minReplicas workers remain and the rendezvous host (worker
 * 0) is elsewhere. Returns false when the whole job must stop instead. */
static bool drain_elastic(sup *s, rjob *j, size_t n)
{
    int leaving = 0;
    if (!j->elastic || j->fetch) return false; /* fetching: nothing started yet */
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (r->dropped || r->node != n) continue;
        bool rdzv_host = j->wo ? r->role == KILN_ROLE_MASTER : r->index == 0;
        if (!elastic_worker(j, r) || rdzv_host) return false;
        leaving++;
    }
    if (live_workers(j) - leaving < j->el_min) return false;
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (r->dropped || r->node != n) continue;
        r->leaving = true;
        if (r->alive) {
            rep_signal(s, j, r, SIGTERM);
            r->kill_at_ns = kiln_now_ns() + (int64_t)s->d->grace_ms * 1000000;
        }
    }
    kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING",
                        "Node %s is being drained (maintenance): %d worker%s leave%s the job "
                        "(SIGTERM, SIGKILL after %d ms); %d carry on (minReplicas %d)",
                        s->d->cluster.nodes[n].name, leaving, leaving == 1 ? "" : "s",
                        leaving == 1 ? "s" : "", s->d->grace_ms, live_workers(j), j->el_min);
    return true;
}

/* Elastic workers leaving for a drain that outlive the grace period after
 * their SIGTERM get SIGKILL, as a stopping job's replicas do. */
static void kill_leavers(sup *s, rjob *j, int64_t now)
{
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (!r->alive || !r->leaving || !r->kill_at_ns || now < r->kill_at_ns) continue;
        rep_signal(s, j, r, SIGKILL);
        r->kill_at_ns = 0;
    }
}

static void drains(sup *s)
{
    kilnd *d = s->d;
    for (size_t n = 0; n < d->cluster.n; n++) {
        pthread_mutex_lock(&d->mu);
        bool pending = d->drain_pending[n];
        d->drain_pending[n] = false;
        pthread_mutex_unlock(&d->mu);
        if (!pending) continue;
        for (rjob *j = s->jobs; j; j = j->next) {
            bool on = false;
            for (size_t i = 0; i < j->n; i++)
                on |= j->reps[i].node == n;
            if (on && j->after == AS_NONE && drain_elastic(s, j, n)) {
                continue;
            } else if (on && j->after == AS_NONE) {
                kiln_jobfiles_event(
                    d->jobfiles, j->project, j->job_id, "WARNING",
                    "Node %s is being drained (maintenance): stopping replicas with "
                    "SIGTERM, SIGKILL after %d ms",
                    d->cluster.nodes[n].name, d->grace_ms);
                begin_stop(s, j, AS_REQUEUE,
                           "Replicas stopped for the drain of node %s; the job is queued "
                           "again and resumes from its newest checkpoint",
                           d->cluster.nodes[n].name);
            } else if (on && j->after == AS_RESTART) {
                /* a group restart would land on the drained node again: requeue instead */
                j->after = AS_REQUEUE;
                free(j->after_msg);
                if (asprintf(&j->after_msg,
                             "Replicas stopped for a restart and the drain of node %s; the job "
                             "is queued again",
                             d->cluster.nodes[n].name) < 0)
                    j->after_msg = NULL;
            }
        }
    }
}

static bool tick(sup *s, bool woken)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();

    watch(s);
    reap(s);
    gpu_tick(s, now);
    place_tick(s, now);
    drains(s);
    evict_tick(s, now);
    for (rjob *j = s->jobs; j; j = j->next) {
        char lost[512];
        /* Slurm took an allocation back (a node failed, scancel) while its
         * replicas' srun still runs: they are stopped, and their exits
         * decide (on_exit_of: the job queued again, or an elastic worker
         * of its own allocation leaving) */
        long li = j->after == AS_NONE && !j->fetch ? place_lost(s, j, lost, sizeof lost) : -1;
        if (li >= 0 && j->reps[li].alive && !j->reps[li].alloc_gone) {
            j->reps[li].alloc_gone = true;
            kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "WARNING", "%s", lost);
            rep_signal(s, j, &j->reps[li], SIGKILL);
        }
        /* a package fetched (or cancelled): the attempt goes on (or ends) */
        if (j->fetch && kilnd_fetch_done(j->fetch)) spawn_attempt(s, j);
        char mwhy[1024];
        mpijob_tick(s, j, mwhy, sizeof mwhy); /* a launcher waiting for its workers */
        mark_running(s, j);
        for (size_t i = 0; i < j->n; i++)
            pump_metrics(s, j, &j->reps[i]);
        check_job(s, j, woken, now);
        kill_leavers(s, j, now);
        grow(s, j, now);
        trial_check(s, j);
    }
    for (rjob **link = &s->jobs; *link;) {
        rjob *j = *link;
        bool any = j->fetch != NULL; /* a fetch in flight ends first (begin_stop cancels it) */
        for (size_t i = 0; i < j->n; i++)
            any |= j->reps[i].alive;
        if (j->after != AS_NONE && !any) {
            finish(s, j, link);
            s->dirty = true;
            if (*link == j) link = &j->next; /* restarted in place */
            continue;
        }
        if (j->after != AS_NONE && !j->killed && now >= j->kill_at_ns) {
            stop_all(s, j, SIGKILL);
            j->killed = true;
        }
        link = &j->next;
    }
    /* The queue is read when something may have changed (a wake-up from the
     * API, a job that ended) and every second anyway (maxWaitTime). */
    if (!d->stop && (woken || s->dirty)) schedule(s);
    if (!d->stop) start_trials(s);
    if (!d->stop) kiln_jobfiles_ttl_tick(d->jobfiles, now); /* runPolicy.ttlSecondsAfterFinished */
    s->dirty = false;
    return true;
}

void *kilnd_supervisor(void *arg)
{
    sup s = {.d = arg};
    kilnd *d = s.d;
    s.port_used = calloc((size_t)d->port_count, sizeof(bool));
    if (!s.port_used) {
        d->stop = 1;
        return NULL;
    }
    adopt_all(&s);
    squeue_open(&s);
    bool woken = true;
    unsigned ticks = 0;
    while (!d->stop) {
        tick(&s, woken);
        /* wait for the wake pipe, replica output or the tick */
        size_t nfds = 1;
        for (rjob *j = s.jobs; j; j = j->next)
            nfds += j->n;
        struct pollfd *pf = calloc(nfds, sizeof *pf);
        if (!pf) {
            usleep(TICK_MS * 1000);
            continue;
        }
        size_t k = 0;
        pf[k++] = (struct pollfd){.fd = kiln_doorbell_fd(&d->wake), .events = POLLIN};
        for (rjob *j = s.jobs; j; j = j->next)
            for (size_t i = 0; i < j->n; i++)
                pf[k++] = (struct pollfd){.fd = j->reps[i].h.life_fd, .events = POLLIN};
        int rc = poll(pf, k, place_wait_ms(&s, kiln_now_ns()));
        woken = false;
        if (rc > 0 && (pf[0].revents & POLLIN)) {
            kiln_doorbell_drain(&d->wake);
            woken = true;
        }
        free(pf);
        if (++ticks % 10 == 0) woken = true; /* re-read cancel requests at least every second */
    }
    /* shutting down: the replicas run on under their monitors, and the next
     * kilnd adopts them (an upgrade stops nothing) */
    reap(&s);
    while (s.jobs) {
        rjob *j = s.jobs;
        s.jobs = j->next;
        rjob_free(&s, j);
    }
    studies_free(&s);
    place_free(&s);
    admit_free(&s);
    squeue_close(&s);
    free(s.port_used);
    return NULL;
}
