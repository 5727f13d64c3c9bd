/* src/exec/supervisor/supervisor_int.h - what the supervisor's files share
 * (internal to kilnd).
 *
 * The supervisor is kilnd's one thread that runs jobs, above the executor's
 * backend table (kiln/exec.h): it places queued jobs, starts their replicas
 * through a backend, acts on their exits (restart policy, drain, cancel) and
 * writes every state change after QUEUED. Its files:
 *   supervisor.c  the thread, the queue, exits and restart policy, drains;
 *   replicas.c    ports, training metrics, the runtime record, freeing;
 *   spawn.c       staging packages and starting a job's replicas;
 *   adopt.c       what a previous kilnd left: reconcile and adoption;
 *   trials.c      tuning jobs: placing and starting a study's trials (what
 *                 the trials are, their reports, early stopping and the
 *                 job's end: src/exec/trials/trialbook.h);
 *   pskeys.c      per-attempt parameter-server CURVE keys;
 *   trainmetrics.c  training metrics reports on a replica's stdout;
 *   gpus.c        GPU health (a failed GPU's job) and GPU time and utilisation. */
#ifndef KILN_SUPERVISOR_INT_H
#define KILN_SUPERVISOR_INT_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>

#include "daemon/kilnd.h"
#include "exec/slurm/alloc.h"
#include "kiln/exec.h"
#include "kiln/queues.h"
#include "kiln/tune.h"

#define LINE_MAX_BYTES 8192
#define TICK_MS        100

typedef struct replica {
    kiln_role role;
    int index;
    char task[48];
    size_t node;
    int port;
    int gpus[KILN_MAX_REPLICA_DEVICES];
    int n_gpus;
    bool simulated;
    kiln_exec_kind kind;
    kiln_exec_handle h;
    bool spawned;       /* its monitor was started (or adopted): its end is acted on */
    bool started;       /* its program runs (after any image pull) */
    bool alive;         /* its monitor runs */
    bool handled;       /* its exit has been acted on */
    bool dropped;       /* elastic: left the job (drained, out of restarts); its slot is released */
    bool leaving;       /* elastic: stopped for a drain, leaves the job when it exits */
    bool scaled_in;     /* elastic: leaving because the autoscaler wants fewer (hpa.c) */
    int restarts;       /* elastic: times this replica alone was started again */
    int code;           /* exit code (a signal is 128 + its number) */
    char why[512];      /* it could never run (image pull), or its monitor is gone */
    bool lost;          /* its monitor is gone without an exit status */
    bool alloc_gone;    /* Slurm ended its allocation: its srun was stopped (place.c) */
    bool failed;        /* it could never run */
    int64_t kill_at_ns; /* elastic: a leaving worker gets SIGKILL then (0 = not due) */
    long long moff;     /* bytes of its monitor's metrics file (TASK.metrics) read */
    /* elasticPolicy.metrics: its CPU time (microseconds: its process group's,
     * or its container's cgroup's) and when it was read (0: not yet), for the
     * HPA's next look (hpa.c) */
    unsigned long long hpa_cpu_us;
    int64_t hpa_ns;
    pid_t hpa_pid;         /* the replica measured (a restarted replica starts afresh) */
    kiln_cgroup hpa_cg;    /* a container's cgroup, found once per start */
    pid_t hpa_cg_for;      /* the `podman run` hpa_cg was found for (0: none yet) */
    int64_t taint_seen_ns; /* evict.c: when it was first seen under a NoExecute taint (0: not) */
} replica;

typedef enum after_stop {
    AS_NONE,
    AS_SUCCEED,
    AS_FAIL,
    AS_CANCEL,
    AS_RESTART,
    AS_REQUEUE
} after_stop;

typedef struct rjob {
    char *project, *job_id;
    kiln_job *job;
    int64_t start_ns;
    bool running; /* RUNNING written (PREPARING until every replica runs) */
    int restarts, failures;
    kiln_placement pl;
    replica *reps;
    size_t n;
    int log_fd;
    size_t log_bytes; /* written to the job's log by replicas (an estimate) */
    bool log_capped;
    char dir[PATH_MAX];
    char ps_keys[PATH_MAX + 16]; /* this attempt's CURVE keys (pskeys.h) */
    after_stop after;            /* AS_NONE while running */
    char *after_msg;
    int64_t kill_at_ns;
    bool killed;
    char pypath[4 * PATH_MAX]; /* PYTHONPATH of the staged packages ("" = none) */
    /* packageUris[fetch_next] over http(s) being fetched, off this thread
     * (fetch.h); the job stays PREPARING, its replicas unstarted, until
     * spawn_attempt collects it (NULL: none in flight) */
    struct kilnd_fetch_op *fetch;
    size_t fetch_next; /* packageUris before this one are fetched for this attempt */
    /* elastic PyTorchJobs: bounds on the PyTorch workers (kiln's master is
     * one of them when the PyTorchJob has Workers only: `wo`) */
    bool elastic;
    int el_min, el_max, wo;
    int64_t grow_at_ns;            /* next attempt to add a worker */
    struct hpa *hpa;               /* elasticPolicy.metrics: the job's HPA (NULL: none) */
    json_t *metrics;               /* the chief's last training metrics report (trainmetrics.h) */
    kilnd_fail_reason fail_reason; /* counted when AS_FAIL ends the job FAILED */
    struct tstudy *study;          /* a tuning job's trial: its study (NULL: a plain job) */
    /* GPU time and utilisation over its runs (trainingOutput; gpus.c) */
    double gpu_seconds, util_sum;
    long long util_n;
    bool gpu_failure;  /* AS_REQUEUE because a GPU it held failed (a failure, not a drain) */
    bool alloc_failed; /* AS_REQUEUE because its Slurm allocation ended by itself (a failure) */
    bool evicted;      /* AS_REQUEUE for a NoExecute taint (evict.c): counted as a failure */
    /* the tolerations of the Kueue flavors that admitted it (Kueue adds
     * them to its pods), kept in its runtime record for evict.c */
    kiln_toleration *xtol;
    size_t n_xtol;
    bool gpus_moved;   /* adopted: its GPUs (by UUID) have other indices than recorded */
    int trial;         /* the trial's id */
    json_t *preempted; /* --queues: it is being preempted: who and why (kept when requeued) */
    int64_t create_ns; /* the job's createTime (0: unknown), for preemption's "newer" */
    int64_t admit_ns;  /* when this run was placed (adopted: its start), for victims' order */
    /* an MPIJob with launcherCreationPolicy WaitForWorkersReady: its
     * launcher (kiln's master) starts once every worker runs (mpijob_tick) */
    bool mpi_wait_launcher;
    struct rjob *next;
} rjob;

/* A tuning job while it runs: its study (src/tune) and the trials running
 * now, each an rjob of the same job with `trial` set. */
typedef struct tstudy {
    char *project, *job_id;
    kiln_job *job; /* the spec the study points into */
    kiln_study *st;
    int running;
    bool cancelling;
    int64_t start_ns;
    struct tstudy *next;
} tstudy;

/* queue.c: the QUEUED jobs in memory, in queue order, between passes */
typedef struct squeue squeue;
typedef struct qent {
    int64_t seq, priority, create_ns;         /* the queue's order */
    int64_t max_wait_ns;                      /* maxWaitTime's end (INT64_MAX: none) */
    kiln_job_record *rec;                     /* read from the store when it was last written */
    kiln_replica_plan plans[KILN_ROLE_COUNT]; /* kiln_catalog_plan, once */
    size_t np;
    const char *types[KILN_ROLE_COUNT]; /* its accelerator types, each once */
    size_t nt;
    uint32_t shape;   /* interned placement shape; 0 = unknown */
    bool fits;        /* placement said OK or ECONFLICT once: it can fit this cluster */
    bool gone;        /* started or failed in a pass: leaves at the next one */
    bool running;     /* its job runs already (a requeue not yet seen): not admitted */
    uint32_t refused; /* under Slurm: CRC of sbatch's last refusal told in its log (0: none) */
    /* admit.c, under Slurm: admitted against quota with assignment q_a (at
     * q_admit_ns) and its allocation asked of Slurm, not yet running: it
     * holds that quota until it starts or is given up. Lost when the entry
     * is read again (then charged to its groups' first usable flavors). */
    bool q_held;
    kiln_qassign q_a;
    int64_t q_admit_ns;
} qent;

typedef struct sup {
    kilnd *d;
    squeue *q;                /* queue.c */
    double pass_seconds_last; /* the last scheduling pass */
    rjob *jobs;
    bool dirty; /* capacity or the queue changed: look at the queue this tick */
    bool *port_used;
    int port_next;
    tstudy *studies;
    /* what the GPU watch said last (gpus.c) */
    uint64_t gpu_health_gen, gpu_sample_gen;
    bool gpu_check_done;       /* the first round of GPU checks (kilnd --gpu-check) ran */
    int64_t gpu_check_next_ns; /* when the next round is due (--gpu-check-every) */
    int64_t gpu_last_ns;
    /* place.c, under Slurm: allocations asked for and not yet handed to a
     * job, and squeue's last answer about kiln's allocations */
    struct palloc *pending;
    kiln_slurm_alloc_list sq;
    int64_t sq_ns_read, sq_fast_until;
    int64_t sq_down_ns;    /* when squeue first went unanswered (0: it answers) */
    int64_t usage_ns_read; /* --slurm-queues accounts: scontrol's usage, last read */
    size_t spos_n;         /* Slurm queue positions published (kilnd_spos) */
    int64_t spos_ns_read;  /* and when squeue of the partition was last read */
    /* admit.c, under Slurm: trials charged while their allocation waits,
     * since the last pass recounted (admit_gen) */
    struct thold *trial_holds;
    unsigned long admit_gen;
} sup;

static inline int64_t duration_ns(const kiln_duration *dur)
{
    return dur->seconds * 1000000000LL + dur->nanos;
}

/* replicas.c */
/* Writes the job's runtime record (replicas, metrics, study) to the store:
 * what GET shows and what the next kilnd adopts from. */
void save_runtime(sup *s, rjob *j);
/* A tuning job's runtime record: its study and its running trials'
 * replicas (save_runtime of a trial writes this). */
void study_save_runtime(sup *s, tstudy *st);
/* The runtime record of a requeued job: the last metrics report and the
 * study stay. NULL when there is none; the caller frees it. */
char *runtime_for_requeue(json_t *metrics, json_t *study, json_t *gpu_usage);
/* The object a runtime record keeps under `key`, as a new reference, or NULL. */
json_t *runtime_kept(const char *runtime, const char *key);
/* Kills the process groups a runtime record names, when still the same. */
void kill_recorded(const char *runtime);
/* A replica in placement slot `sl`: its role, index, node, task name and
 * devices, everything else zero (its port is the caller's: port_take). */
void replica_from_slot(sup *s, replica *r, const kiln_slot *sl);
/* An elastic PyTorchJob's bounds from j->job (nothing for another job);
 * its first try to add a worker a second after `now`. */
void rjob_elastic(rjob *j, int64_t now);
/* hpa.c: elasticPolicy.metrics. kilnd is the job's HorizontalPodAutoscaler:
 * every --hpa-sync-period it measures the workers' process groups and sets
 * the number of workers wanted by Kubernetes' algorithm; grow() and
 * shrink() in supervisor.c move the job to it. */
/* Sets up j->hpa for a job with metrics (nothing for another); `workers`
 * is how many workers it started with. */
void hpa_start(rjob *j, int workers);
void hpa_free(rjob *j);
/* Takes a measurement when one is due; returns the workers wanted now
 * (the count it was given while there is nothing to act on). `live` are
 * the job's workers now, `is_worker` tells them from the other replicas. */
int hpa_tick(sup *s, rjob *j, int live, bool (*is_worker)(const rjob *, const replica *),
             int64_t now);
/* The workers the HPA wants now (j->hpa set). */
int hpa_wanted(const rjob *j);
/* The runtime record's view: the HPA's last figures (NULL: none). */
json_t *hpa_json(const rjob *j);

/* Lets go of a replica's monitor (its life pipe); the monitor runs on. */
void close_replica(sup *s, rjob *j, replica *r);
/* Releases a job's ports, placement, log and memory. */
void rjob_free(sup *s, rjob *j);
/* A free, bindable replica port (unique across running jobs), or -1. */
int port_take(sup *s);
void port_give(sup *s, int port);
/* Reads what is new in a replica's metrics file (kiln-monitor writes it). */
void pump_metrics(sup *s, rjob *j, replica *r);

/* spawn.c */
/* Starts an attempt of a placed job: fetches its http(s) packages (off
 * this thread: while one is in flight j->fetch is set and the tick calls
 * this again once it is done), stages packages, maps the job dir, writes
 * this attempt's ps keys and starts every replica, then records them. On
 * failure it kills what started and begins stopping the job (AS_FAIL). A
 * new attempt (a group restart) sets fetch_next to 0 first. */
void spawn_attempt(sup *s, rjob *j);
kiln_err spawn_one(sup *s, rjob *j, size_t i, char *why, size_t whylen);
void stop_all(sup *s, rjob *j, int sig);
/* Starts stopping a running job: SIGTERM now, SIGKILL after the grace
 * period, then `after` with the message. The first reason stands. */
void begin_stop(sup *s, rjob *j, after_stop after, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The container image of a role, NULL for a process replica. */
const char *image_of(const kiln_catalog *c, const kiln_job *job, kiln_role role);

/* place.c: the placement backends (kiln's scheduler, or Slurm with
 * --executor slurm) and what a replica placed by Slurm needs to run */
bool place_slurm(const sup *s);
/* spawn.c: starts a waiting MPIJob launcher once every worker runs */
void mpijob_tick(sup *s, rjob *j, char *why, size_t whylen);
/* adopt.c: an adopted MPIJob whose launcher had not started waits again */
void mpijob_adopted(rjob *j);
/* Whose gang is placed: a job, and `tag` for one of its parts ("-t3":
 * trial 3, "-w4": elastic worker 4; NULL: the job's gang). Under Slurm the
 * allocation is "kiln-PROJECT-JOB" then the tag, its files in the job's
 * directory (slurm/NAME). */
typedef struct place_who {
    const char *project, *job_id, *tag;
    /* the job's spec, read by a new Slurm allocation only (NULL: none):
     * its scheduling.priority is Slurm's --nice, and under --slurm-queues
     * accounts its labels' LocalQueue and priority class name the
     * allocation's --account and --qos */
    const kiln_job *job;
} place_who;
/* Places plans[0..np) (KILN_OK, *pl filled), or says it waits
 * (KILN_ECONFLICT) or can never fit (KILN_EINVAL, KILN_ELIMIT), `why` saying
 * what. Under Slurm the allocation is asked for once and looked at on
 * every call until Slurm runs it. */
kiln_err place_job(sup *s, const place_who *w, const kiln_replica_plan *plans, size_t np,
                   const kiln_sched_rules *ru, kiln_placement *pl, char *why, size_t whylen);
/* Under Slurm: whether w's allocation was asked for and is not yet handed
 * to it (pending in Slurm, or running with its layout not yet read), `why`
 * saying which ("allocation N is pending (Resources)"). Admission
 * (admit.c) charges such a job's quota: Slurm may run it at any moment. */
bool place_waiting(const sup *s, const place_who *w, char *why, size_t whylen);
/* Under Slurm: cancels w's allocation if it is asked for and not yet handed
 * over (admission took the job's quota back: preempted while pending). */
void place_forget(sup *s, const place_who *w);
/* Whether plans[0..np) can ever be placed (KILN_OK, also when the nodes
 * are busy now), else why not (KILN_EINVAL, KILN_ELIMIT); places nothing
 * and asks nothing of Slurm. */
kiln_err place_fits(sup *s, const kiln_replica_plan *plans, size_t np, const kiln_sched_rules *ru,
                    char *why, size_t whylen);
/* Under Slurm: cancels the jobs' gang allocations (not trials', not
 * elastic workers') that no call asked for since `since`: in an admission
 * pass, once it has asked again for every one it keeps and before it asks
 * for any new one, those of jobs that left the queue (cancelled) go back
 * at once, not after place_tick's 5 s. */
void place_sweep(sup *s, int64_t since);
/* Gives a placement back (Slurm: cancels its allocations). */
void place_release(sup *s, const kiln_placement *pl);
/* Gives slot i back (an allocation of its own is cancelled). */
void place_release_slot(sup *s, kiln_placement *pl, size_t i);
/* Once a tick: squeue's view of kiln's allocations, and the cancel of those
 * no pass asks for any more. */
void place_tick(sup *s, int64_t now);
/* How long the supervisor may sleep before place_tick has work (at most
 * TICK_MS): shorter while an allocation just asked for may start. */
int place_wait_ms(const sup *s, int64_t now);
/* A running job's allocation ended under it (a node failed, scancel): the
 * slot of the first replica it held, or -1. */
long place_lost(const sup *s, const rjob *j, char *why, size_t whylen);
/* How replica i's allocation ended, asked of Slurm now (squeue, then
 * sacct: kiln_slurm_alloc_end), `why` saying so with Slurm's words:
 * TAKEN, its exit is the allocation's loss, not the program's failure;
 * EXITED, the allocation's own script ended (a set-up that cannot work:
 * the program's failure, for its restart policy); RUNNING (or not placed
 * by Slurm), the replica exited by itself. */
kiln_slurm_end place_ended(const sup *s, const rjob *j, size_t i, char *why, size_t whylen);
/* Free requeues of one job (restarts that counted no failure: Slurm taking
 * its allocation away, drains, preemptions; kilnStatus.restarts less
 * .failures, kept in the store) after which Slurm taking it away counts
 * against backoffLimit, so a job Slurm keeps taking back still ends. */
#define KILND_SLURM_FREE_REQUEUES 10
/* Replica i holds an allocation of its own (an elastic worker's). */
bool place_own(const rjob *j, size_t i);
void place_free(sup *s);
/* Signals a replica where it runs (a Slurm step: scancel --signal). */
void rep_signal(sup *s, rjob *j, replica *r, int sig);
/* The command before replica i's program that runs it on its node (none
 * for kiln's own nodes). */
kiln_err place_via(const sup *s, const rjob *j, size_t i, kiln_strv *via);

/* adopt.c */
/* Adopts the replicas a previous kilnd left running (its runtime records). */
void adopt_all(sup *s);

/* queue.c */
/* Starts keeping the queue: watches the store, reads the QUEUED jobs. */
kiln_err squeue_open(sup *s);
void squeue_close(sup *s);
/* Brings the queue up to date with the store's writes since the last call
 * and starts a pass: the entries in queue order (owned by the queue). */
qent **squeue_begin(sup *s, size_t *n);
/* A job of e's shape did not fit earlier in this pass (and then: mark it). */
bool squeue_failed_now(sup *s, const qent *e);
void squeue_fail_now(sup *s, const qent *e);
/* Placement said OK or ECONFLICT for e, or a job of its shape: it can fit
 * this cluster (the answer depends on the shape only: kiln/sched.h). */
bool squeue_fits(sup *s, const qent *e);
void squeue_note_fits(sup *s, qent *e);
/* e was started or failed: it is not looked at again. */
void squeue_gone(sup *s, qent *e);

/* supervisor.c: places and starts one queued job whose every replica must
 * also land on nodes with `extra`'s labels (a Kueue flavor's nodeLabels;
 * NULL: none) and tolerates, besides its own tolerations, xtol[0..n_xtol)
 * (the flavor's tolerations, which Kueue adds to an admitted workload's
 * pods; the caller's, for the call), and is placed by `topo` (the flavor's
 * Topology; NULL: none) where it asks to be. True when it started (it is s->jobs'
 * head); else `why` says what placement answered ("" when the job left
 * the queue). */
/* Placement by the Topology of the flavor a job was admitted to (NULL:
 * none): its name and levels join the placement rules (kiln/sched.h). */
static inline void rules_topology(kiln_sched_rules *ru, const kiln_qtopology *t)
{
    ru->topology = t ? t->name : NULL;
    ru->levels = t ? (const char *const *)t->levels.v : NULL;
    ru->n_levels = t ? t->levels.n : 0;
}

bool start_admitted(sup *s, qent *e, const kiln_map *extra, const kiln_toleration *xtol,
                    size_t n_xtol, const kiln_qtopology *topo, char *why, size_t whylen);

/* Whether kiln's own admission (admit.c) decides what starts: a --queues
 * file that Slurm's accounting does not carry out (--slurm-queues accounts,
 * where Slurm admits and kiln only asks with the job's account and QOS). */
static inline bool kiln_admits(const kilnd *d)
{
    return d->queues_path && !d->slurm.accounts;
}
/* admit.c: with --queues, a pass admits queued jobs as Kueue does: the
 * ClusterQueues' heads, against quota, non-borrowers first; it publishes
 * why each job waits (kilnd's qwait) and each queue's counts. */
void admit_pass(sup *s, qent **v, size_t n);
/* evict.c: NoExecute taints under running replicas, checked at each tick;
 * a deep copy of tolerations v[0..n) into *out (freed first; false: out of
 * memory, none); a job's flavor tolerations to and from its runtime record
 * ("flavorTolerations"; NULL: none) */
void evict_tick(sup *s, int64_t now);
bool tolerations_copy(kiln_toleration **out, size_t *n_out, const kiln_toleration *v, size_t n);
void tolerations_free(kiln_toleration **v, size_t *n);
json_t *xtol_json(const rjob *j);
void xtol_load(rjob *j, const char *runtime);

/* admit.c: with --queues, a trial of a running tuning job (w: its job and
 * the trial's tag) is a workload of its own: placed (into *pl) only when
 * its job's ClusterQueue has quota for its gang, then charged. KILN_ECONFLICT with `why` when it
 * waits. Placed, *xtol (n_xtol) gets a copy of the chosen flavors' tolerations (the
 * caller's to free with tolerations_free; none: NULL). */
kiln_err admit_trial(sup *s, const place_who *w, const kiln_job *job,
                     const kiln_replica_plan *plans, size_t np, kiln_placement *pl,
                     kiln_toleration **xtol_out, size_t *n_xtol_out, char *why, size_t whylen);
/* admit.c: frees what admission keeps between passes (kilnd stopping). */
void admit_free(sup *s);
/* admit.c: forgets why a tuning job's next trial waited (its study ended). */
void trial_wait_clear(sup *s, const char *project, const char *job_id);

/* gpus.c */
/* Each tick: GPU time of the replicas holding GPUs; on the watch's news,
 * utilisation samples and failed or returned GPUs. */
void gpu_tick(sup *s, int64_t now);
/* A job's GPU usage as its runtime record keeps it ("gpuUsage"), NULL when
 * none; and back from a record (a requeued or adopted job goes on counting). */
json_t *gpu_usage_json(const rjob *j);
void gpu_usage_load(rjob *j, const char *runtime);

/* trials.c */
void study_begin(sup *s, kiln_job_record *rec);
/* Frees every study in memory (kilnd stopping; their records stay). */
void studies_free(sup *s);
tstudy *study_adopt(sup *s, kiln_job_record *rec);
kiln_job *trial_job(tstudy *st, int trial, const char *job_dir);
kiln_err trial_args(rjob *j, kiln_strv *argv);
kiln_err trial_env(rjob *j, kiln_strv *env);
void trial_metrics(rjob *j, json_t *report);
void trial_check(sup *s, rjob *j);
void trial_finish(sup *s, rjob *j);
void start_trials(sup *s);

#endif
