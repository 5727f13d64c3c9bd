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

#include "kiln/auth.h"
#include "kiln/catalog.h"
#include "kiln/claims.h"
#include "kiln/devices.h"
#include "kiln/exec.h"
#include "kiln/sched.h"
#include "kiln/store.h"
#include "exec/slurm/slurm.h"  /* kiln_slurm_cfg */
#include "jobfiles/jobfiles.h" /* a job's directory, events and TTL: below the API */
#include "util/doorbell.h"

/* Why a job's replicas were started again (kiln_restarts_total{reason}). */
typedef enum kilnd_restart_reason {
    KILND_RESTART_FAILURE,   /* a replica failed and its restart policy retries */
    KILND_RESTART_DRAIN,     /* its node was drained: requeued */
    KILND_RESTART_KILND,     /* kilnd restarted while the job ran: requeued */
    KILND_RESTART_GPU,       /* a GPU it held failed: requeued to run elsewhere */
    KILND_RESTART_PREEMPTED, /* --queues: preempted to free quota: requeued */
    KILND_RESTART_EVICTED,   /* a NoExecute taint of its node it does not tolerate: requeued */
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
    KILND_FAIL_EVICTED,       /* evicted by a NoExecute taint past its backoff limit; a trial */
    KILND_FAIL_REASONS
} kilnd_fail_reason;

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
    char *runtimes_dir; /* a TrainJob's runtimes (NULL: KILN_RUNTIMES_DIR, else data/runtimes) */
    char *tokens_path;  /* NULL: no auth (loopback only) */
    char *kiln_train;   /* NULL: not found */
    char *mpi_agent;    /* kiln-mpi-agent next to kilnd; NULL: not found */
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
    kiln_claims claims;       /* the node config's persistentVolumeClaims (kiln/claims.h) */
    bool allow_root_replicas; /* kilnd as root may run replicas as root (kiln_users_new) */
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
    /* what the Slurm code (src/exec/slurm) is given of the above, the
     * catalog, users and exec: built once by main, after the catalog */
    kiln_slurm_cfg slurm_cfg;
    /* the run-as users of the tokens file's project lines (kiln/auth.h),
     * read once at start; never NULL once options are parsed */
    kiln_users *users;
    /* notebook instances (src/notebooks/notebooks.h): the Python with
     * JupyterLab for the known vmImage families, and KEY=PYTHON overrides;
     * main hands them to the notebooks handle, which borrows them */
    char *nb_python;
    const char **nb_env;
    size_t nb_env_n;

    kiln_store *store;
    kiln_catalog *catalog;
    /* built by main once the store is open (they borrow it and the rest):
     * a job's files, events and TTL (jobfiles/jobfiles.h), and notebook
     * instances (notebooks/notebooks.h), whose thread main starts */
    kiln_jobfiles *jobfiles;
    struct kiln_notebooks *notebooks;
    kiln_cluster cluster;
    /* this machine's GPUs (no --node-config): health and telemetry of the
     * devices of cluster node 0, NULL without NVML (kiln/devices.h) */
    const char *nvml_library; /* --nvml-library, NULL: the default */
    kiln_gpu_watch *gpus;
    /* the GPU check before work (docs/gpu.md): --gpu-check PROGRAM (NULL:
     * none), run at start on every idle GPU, then every --gpu-check-every
     * seconds (0: never again), and on kiln nodes uncordon NODE --gpu N */
    const char *gpu_check;
    /* --gpu-share INDEX=N (docs/gpu.md): GPUs shared through MPS, whose
     * control daemons kilnd started (DATA/mps/INDEX) and stops */
    const char *gpu_share[KILN_MAX_NODE_DEVICES];
    size_t n_gpu_share;
    bool mps_started[KILN_MAX_NODE_DEVICES];
    int gpu_check_every, gpu_check_timeout;
    /* the tokens in force (kiln/auth.h): no table, no auth. SIGHUP swaps
     * in the tokens file again; the API checks callers against it. */
    kiln_auth *auth;

    /* --queues PATH...: Kueue's admission (kiln/queues.h, docs/queues.md);
     * NULL: today's one queue. SIGHUP swaps it under queues_mu; the
     * supervisor holds queues_mu through the admission part of a pass (and
     * may take mu inside it), API threads while they read it (never with
     * mu held). */
    char *queues_path;   /* the first --queues (non-NULL: queues are on) */
    char **queues_paths; /* every --queues PATH (files or directories), argv's */
    size_t n_queues_paths;
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
    kiln_audit *audit;                /* the audit log (kiln/auth.h) */
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
