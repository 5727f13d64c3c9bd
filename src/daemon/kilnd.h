/* src/daemon/kilnd.h - what kilnd's parts share (internal to kilnd).
 *
 * Threads: libmicrohttpd's threads run the API (src/api); one supervisor
 * thread (src/exec/supervisor/supervisor.c) owns every replica process and every
 * state change after QUEUED. They meet in three places only:
 *   - the store (thread safe, state changes are compare-and-set);
 *   - `mu`, which guards the scheduler's usage and the drain requests (the
 *     API shows node usage and asks for drains);
 *   - the wake pipe, which the API writes to after a create, cancel or drain
 *     so that the supervisor acts at once rather than on its next tick. */
#ifndef KILND_H
#define KILND_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/catalog.h"
#include "kiln/devices.h"
#include "kiln/exec.h"
#include "kiln/sched.h"
#include "kiln/store.h"
#include "jobfiles/jobfiles.h" /* a job's directory, events and TTL: below the API */
#include "util/doorbell.h"

typedef enum kilnd_role { KILND_VIEWER = 1, KILND_EDITOR = 2 } kilnd_role;

/* Why a job's replicas were started again (kiln_restarts_total{reason}). */
typedef enum kilnd_restart_reason {
    KILND_RESTART_FAILURE,   /* a replica failed and its restart policy retries */
    KILND_RESTART_DRAIN,     /* its node was drained: requeued */
    KILND_RESTART_KILND,     /* kilnd restarted while the job ran: requeued */
    KILND_RESTART_GPU,       /* a GPU it held failed: requeued to run elsewhere */
    KILND_RESTART_PREEMPTED, /* --queues: preempted to free quota: requeued */
    KILND_RESTART_REASONS
} kilnd_restart_reason;

/* Why a job FAILED (kiln_job_failures_total{reason}). */
typedef enum kilnd_fail_reason {
    KILND_FAIL_START,         /* its replicas could not be started (ports, packages, exec) */
    KILND_FAIL_REPLICA_EXIT,  /* a replica failed and its restart policy does not retry */
    KILND_FAIL_BACKOFF_LIMIT, /* retried runPolicy.backoffLimit times already */
    KILND_FAIL_DEADLINE,      /* runPolicy.activeDeadlineSeconds */
    KILND_FAIL_UNSCHEDULABLE, /* can never fit this cluster */
    KILND_FAIL_GPU,           /* a GPU it held failed and its restart policy does not retry */
    KILND_FAIL_REASONS
} kilnd_fail_reason;

/* The Unix user (and group) a project's replicas run as ("project P user U
 * [group G]" lines of the tokens file). */
typedef struct kilnd_user {
    char *project;
    long uid, gid;
    char *user; /* for messages */
} kilnd_user;

/* Upper bounds (seconds) of kiln_schedule_pass_seconds' buckets. */
#define KILND_PASS_BUCKETS 10
#define KILND_PASS_BOUNDS                                                                          \
    {                                                                                              \
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0                            \
    }

/* With --queues: why a QUEUED job waits (the supervisor's admission pass,
 * src/exec/supervisor/admit.c), or why a RUNNING tuning job's next trial
 * waits (admit_trial), for the API's kilnStatus.queue. */
typedef struct kilnd_qwait {
    char *project, *job_id;
    char *local_queue, *cluster_queue; /* NULL: it routes to none now */
    char *why;                         /* the reason it was not admitted in the last pass */
    long position;                     /* 1-based, in its ClusterQueue's order; 0 for a trial */
    bool trial;                        /* its job runs: the next trial waits */
} kilnd_qwait;

/* Under --executor slurm: a QUEUED job whose allocation Slurm holds
 * PENDING, and its place in Slurm's pending queue of the partition (every
 * user's jobs, in Slurm's order): the API's jobPosition for it. */
typedef struct kilnd_spos {
    char *project, *job_id;
    long position; /* 1-based */
} kilnd_spos;

typedef struct kilnd {
    /* configuration (read only once started) */
    char *listen; /* HOST:PORT */
    char *data_dir;
    char *node_config;  /* NULL: this machine */
    char *catalog_path; /* NULL: built-in only */
    char *tokens_path;  /* NULL: no auth (loopback only) */
    char *kiln_train;   /* NULL: not found */
    const char *python; /* for pythonModule jobs; default "python3" from PATH */
    int grace_ms;       /* SIGTERM -> SIGKILL */
    /* elasticPolicy.metrics (src/exec/supervisor/hpa.c): how often the HPA
     * looks (--hpa-sync-period) and how long a lower count must stand
     * before workers are taken away (--hpa-downscale-stabilization) */
    int hpa_sync_ms, hpa_down_window_ms;
    int port_base, port_count;
    size_t max_body;
    uint64_t max_object;        /* bytes per storage object (--max-object) */
    uint64_t max_package_bytes; /* bytes per http(s) packageUri (--max-package-bytes) */
    size_t log_cap;             /* bytes of replica output kept per job (and run) */
    int threads;
    char *audit_path;         /* DATA/audit.log unless --audit-log */
    uint64_t audit_max_bytes; /* rotate past this size */
    int audit_keep;           /* rotated files kept (audit.log.1 ...) */
    int max_inflight;         /* requests in flight at once; past it 429 */
    int max_inflight_token;   /* the same per token */
    uint64_t min_free;        /* creates answer 503 below this many free bytes */
    const char *tls_cert;     /* PEM files; NULL: plain HTTP */
    const char *tls_key;
    kiln_exec_config exec;    /* monitor, container runtime and its args, log cap */
    bool allow_root_replicas; /* kilnd as root may run replicas as root */
    /* --executor slurm: the nodes are a Slurm partition's; Slurm places each
     * gang as an allocation (src/exec/slurm, src/exec/supervisor/place.c) */
    struct {
        bool on;
        char *partition;        /* --slurm-partition */
        char *account;          /* --slurm-account, NULL: the user's default */
        char *task;             /* kiln-slurm-task, found next to kilnd */
        bool machine_resources; /* --slurm-machine-resources yes: CPU, memory of machine types */
        char **gpu_types;       /* --slurm-gpu-type KILN_TYPE=GRES_TYPE ("K=G"), repeatable */
        size_t gpu_type_n;
        /* --slurm-queues accounts: the --queues file is carried out by
         * Slurm's accounting (src/exec/slurm/accounts.h: ClusterQueues are
         * accounts with GrpTRES, priority classes QOS) and Slurm admits;
         * kiln (the default): kiln's own admission (admit.c). */
        bool accounts;
    } slurm;
    kilnd_user *users;
    size_t n_users;
    /* notebook instances (src/notebooks/notebooks.h): the Python with
     * JupyterLab for the known vmImage families, and KEY=PYTHON overrides */
    char *nb_python;
    const char **nb_env;
    size_t nb_env_n;

    kiln_store *store;
    kiln_catalog *catalog;
    kiln_cluster cluster;
    /* this machine's GPUs (no --node-config): health and telemetry of the
     * devices of cluster node 0, NULL without NVML (kiln/devices.h) */
    const char *nvml_library; /* --nvml-library, NULL: the default */
    kiln_gpu_watch *gpus;
    /* the tokens file (src/daemon/tokens.h); NULL: no auth. SIGHUP swaps
     * it under tokens_mu (writer); the API reads under it (reader). */
    struct kilnd_tokens *tokens;
    pthread_rwlock_t tokens_mu;

    /* --queues FILE: Kueue's admission (kiln/queues.h, docs/queues.md);
     * NULL: today's one queue. SIGHUP swaps it under queues_mu; the
     * supervisor holds queues_mu through the admission part of a pass (and
     * may take mu inside it), API threads while they read it (never with
     * mu held). */
    char *queues_path;
    struct kiln_queues *queues;
    pthread_mutex_t queues_mu;
    unsigned long queues_gen; /* bumped by every swap (under queues_mu) */
    /* jobs preempted (kueue_preempted_workloads_total): within their
     * ClusterQueue, reclaimed by another of the cohort, and taken by a
     * borrower (borrowWithinCohort); under queues_mu */
    unsigned long long preempted_in_cq, preempted_reclaim, preempted_borrow;
    kilnd_qwait *qwait; /* sorted by project, job id; under queues_mu */
    size_t n_qwait;
    kilnd_spos *spos; /* sorted by project, job id; under queues_mu */
    size_t n_spos;

    pthread_mutex_t mu; /* guards sched and drain_pending */
    kiln_sched *sched;
    bool *drain_pending; /* per node */

    struct kiln_api_cache *cache;     /* rendered GET responses (src/api) */
    struct kiln_objects *objects;     /* the staging store (--bucket); never NULL once started */
    struct kiln_api_metrics *metrics; /* request counters for /metrics (src/api) */
    struct kiln_audit *audit;         /* the audit log (src/api/audit.h) */
    struct kiln_api_limits *limits;   /* requests in flight (src/api) */
    struct kiln_api_tls *tls;         /* certificate and key (src/api), NULL: plain */

    /* counters for /metrics: the supervisor adds, API threads read */
    _Atomic unsigned long long restarts_total[KILND_RESTART_REASONS];
    _Atomic unsigned long long failures_total[KILND_FAIL_REASONS];
    /* scheduling passes (the supervisor's queue walk): a cumulative
     * histogram over KILND_PASS_BOUNDS, and their total time in ns */
    struct {
        _Atomic unsigned long long le[KILND_PASS_BUCKETS];
        _Atomic unsigned long long count, sum_ns;
    } sched_pass;

    /* rung by whoever has work for the supervisor thread (util/doorbell.h):
     * a create, a cancel, a drain, a fetch that ended, kilnd stopping */
    kiln_doorbell wake;
    volatile sig_atomic_t stop;
} kilnd;

/* The user a project's replicas run as: uid and gid -1 for kilnd's own.
 * KILN_EINVAL with a sentence naming what to change when that would be
 * root and the site did not allow it, or a user kilnd cannot switch to
 * (src/daemon/users.c). The API asks it when a job is created, the
 * supervisor again at placement. */
kiln_err kilnd_project_user(const kilnd *d, const char *project, long *uid, long *gid, char *why,
                            size_t whylen);
/* At start: one line on stderr for each kind of job kilnd will refuse as
 * configured (kilnd_project_user's refusals), nothing when there is none. */
void kilnd_users_report(const kilnd *d);
/* Gives a job's directory, its replicas/ and log files to uid:gid (the
 * monitor's own files stay kilnd's). */
void kilnd_chown_job(const char *job_dir, long uid, long gid);
/* Parses a "project P user U [group G]" line into d->users; -1 with a
 * message on stderr when it is malformed or names an unknown user. */
int kilnd_parse_project_line(kilnd *d, const char *path, int lineno, const char *line);

/* The supervisor: reconciles what a previous kilnd left, then runs until d->stop. */
void kilnd_reconcile(kilnd *d);
void *kilnd_supervisor(void *arg);

/* The API (src/api/api.c) on an already bound, listening socket. */
struct MHD_Daemon;
struct MHD_Daemon *kiln_api_start(kilnd *d, int listen_fd);
void kiln_api_stop(kilnd *d, struct MHD_Daemon *m);
/* SIGHUP: reads the certificate and key again (with --tls-cert). Returns 0,
 * or -1 after printing why (the old pair stays in use). */
int kiln_api_tls_reload(kilnd *d);

#endif
