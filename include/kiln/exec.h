/* kiln/exec.h - what a replica runs and sees, and the processes themselves.
 *
 * Pure parts (testable without processes): the replica's task name, its
 * program (argv) and its environment exactly as facts §6 describes:
 *   TF_CONFIG     {"cluster": {"master"|"chief": [..], "worker": [..], "ps": [..]},
 *                  "task": {"type": .., "index": N}, "job": {trainingInput},
 *                  "environment": "cloud"} - evaluators get a task but are
 *                  not in the cluster; useChiefInTfConfig picks "chief";
 *   CLUSTER_SPEC  the same document;
 *   MASTER_ADDR, MASTER_PORT, WORLD_SIZE (master + workers), RANK (master 0,
 *                  worker i -> i+1) for the master and workers; a job read
 *                  from a PyTorchJob gets the training operator's variables
 *                  instead (PYTHONUNBUFFERED, PET_*, torchrun's rendezvous for
 *                  elastic jobs: docs/job-model.md);
 *   CUDA_VISIBLE_DEVICES  exactly the replica's GPUs, "" without any: their
 *                  NVML UUIDs ("GPU-8f..."), which name the same GPUs however
 *                  CUDA counts; simulated GPUs by index (CUDA_DEVICE_ORDER=PCI_BUS_ID);
 *   NVIDIA_VISIBLE_DEVICES  the same UUIDs, "void" without real GPUs (NVIDIA's
 *                  container runtime reads it);
 *   KILN_SIMULATED_DEVICES=1 when those GPUs are simulated (node config);
 *   KILN_TASK_NAME, KILN_JOB_ID.
 *
 * Process parts: kiln_proc_spawn starts a helper that dies with its caller
 * (PR_SET_PDEATHSIG). Replicas go through the executor instead (below): each
 * under a monitor, so that they outlive kilnd and are adopted again.
 *
 * Ownership: kiln_strv outputs are cleared first and owned by the caller. */
#ifndef KILN_EXEC_H
#define KILN_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One member of a job's cluster: where the replica (role, index) listens. */
typedef struct kiln_exec_task {
    kiln_role role;
    int index;
    const char *host;
    int port;
} kiln_exec_task;

/* "master-replica-0", "worker-replica-2", "ps-replica-0", "evaluator-replica-0". */
void kiln_exec_task_name(kiln_role role, int index, char buf[48]);

/* The TF_CONFIG document of tasks[self] (caller frees). NULL on ENOMEM. */
char *kiln_exec_tf_config(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self);

/* A Vertex AI CustomJob's CLUSTER_SPEC for tasks[self] (caller frees; NULL
 * on ENOMEM): {"cluster": {"workerpool0": [HOST:PORT], ...}, "environment":
 * "cloud", "task": {"type": "workerpoolK", "index": I}, "job": jobSpec},
 * pool K being the replica's index in workerPoolSpecs (its role). */
char *kiln_exec_vertex_cluster_spec(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                                    size_t self);
/* A Vertex job's AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR:
 * baseOutputDirectory + model/, checkpoints/, logs/, and for tuning trial N
 * (trial > 0) baseOutputDirectory/N/...; nothing for other jobs. Appended
 * to env. */
kiln_err kiln_exec_vertex_dirs(const kiln_job *job, int trial, kiln_strv *env);

/* The environment variables kilnd sets for tasks[self] ("NAME=VALUE" each).
 * `gpus`: how CUDA_VISIBLE_DEVICES names its GPUs - UUIDs, or for simulated
 * GPUs their indices as text (n_gpus may be 0). */
kiln_err kiln_exec_replica_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                               size_t self, const char *const *gpus, size_t n_gpus, bool simulated,
                               kiln_strv *env);

/* An MPIJob's replica `role` `index` as the hostfile names it:
 * "<job>-launcher", "<job>-worker-<i>" (kiln-mpi-agent knows these names). */
void kiln_exec_mpi_host(const kiln_job *job, kiln_role role, int index, char *buf, size_t len);

/* An MPIJob's hostfile (caller frees; NULL on ENOMEM): one line per worker
 * of `tasks` ("<host> slots=N", or "<host>:N" for v2beta1's Intel and
 * MPICH), the launcher first with v2beta1's runLauncherAsWorker. */
char *kiln_exec_mpi_hostfile(const kiln_job *job, const kiln_exec_task *tasks, size_t n);

/* Appends what an MPIJob's operator sets on tasks[self] to `env` (nothing
 * for other jobs): the launcher's OMPI_MCA_* / I_MPI_* / HYDRA_* with the
 * hostfile at MPI_DIR/hostfile and `agent` (kiln-mpi-agent) as the rsh
 * agent, v2beta1's K_MPI_JOB_ROLE, and KILN_MPI_DIR on every replica. */
kiln_err kiln_exec_mpi_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self,
                           const char *mpi_dir, const char *agent, kiln_strv *env);

/* The image a replica of `role` runs (its own imageUri, else the master's,
 * as AI Platform defaults it), or NULL: it runs as a process. */
const char *kiln_exec_image(const kiln_job *job, kiln_role role);

/* A container replica's ENTRYPOINT override (containerCommand, into `cmd`)
 * and CMD override (containerArgs, then the program args: user args after
 * `--` and --job-dir, into `args`), each the role's, else the master's.
 * Both executors start containers from it. */
kiln_err kiln_exec_container_program(const kiln_job *job, kiln_role role, kiln_strv *cmd,
                                     kiln_strv *args);

/* "kiln-P-J-TASK": a replica's container name and hostname, unique per
 * replica (P and J are [A-Za-z0-9_-], the API checked them). */
void kiln_exec_container_name(const char *project, const char *job_id, const char *task, char *buf,
                              size_t len);

/* The hostname a container replica gets for `name` (its container name):
 * `name` itself when that is a DNS label (RFC 1123: [a-z0-9-], 1-63
 * characters, no '-' at either end), else a label made from it: lowercased,
 * any other character '-', cut to a readable prefix and ended with "-" and
 * 8 hex digits of a hash of the whole name, so replicas whose names differ
 * only past the cut (or in case, or '_' against '-') still differ. The
 * kernel refuses a hostname over 64 bytes (runc: "sethostname: invalid
 * argument"), which a Vertex trial's name passes. Writes at most 63
 * characters and the NUL into `out`. */
void kiln_exec_container_hostname(const char *name, char out[64]);

/* Appends the user's own variables of `role` (<role>Config.env: a TFJob
 * container's env) to `env`, after kiln's; every executor calls it, so no
 * executor drops them. The names kiln sets were refused at create
 * (kiln_catalog_check_honoured). */
kiln_err kiln_exec_user_env(const kiln_job *job, kiln_role role, kiln_strv *env);

/* KILN_COLL_KEY for every replica of one attempt of a job: names the shared
 * memory of kiln's collectives (kiln/collective.h), so a restarted attempt
 * never meets the segment of the one before, and two jobs never meet.
 * "kiln-<hash of project/jobId>-<instance>-a<attempt>" ([A-Za-z0-9.-], < 64
 * characters); `instance` tells two kilnd lives apart (its pid). */
void kiln_exec_coll_key(const char *project, const char *job_id, long instance, int attempt,
                        char out[64]);

/* The run limits of a started job, decided here once for every executor
 * (the local supervisor and the Slurm one call it; docs/slurm.md):
 * scheduling.maxRunningTime cancels the job, runPolicy.activeDeadlineSeconds
 * fails it (Kubeflow's DeadlineExceeded). `which` is a mask of the limits
 * the caller enforces itself (Slurm's --time does maxRunningTime there). */
typedef enum kiln_exec_limit {
    KILN_LIMIT_NONE = 0,
    KILN_LIMIT_MAX_RUNNING_TIME = 1,
    KILN_LIMIT_ACTIVE_DEADLINE = 2,
} kiln_exec_limit;

/* Which limit of `which` the job, running since start_ns (0: not started),
 * has passed at now_ns, with the sentence that ends it in `why`;
 * KILN_LIMIT_NONE while none has. */
kiln_exec_limit kiln_exec_limit_passed(const kiln_job *job, int64_t start_ns, int64_t now_ns,
                                       unsigned which, char *why, size_t whylen);

/* Where the program comes from and what it is. */
typedef struct kiln_exec_paths {
    const char *kiln_train; /* the kiln-train binary (for pythonModule kiln.NAME) */
    const char *python;     /* python3 */
    const char *staging;    /* PYTHONPATH entries of the staged packages, or NULL */
} kiln_exec_paths;

/* The argv of a replica of `role`:
 *   containerCommand + containerArgs (the role's, else the master's) - a plain process;
 *   pythonModule "kiln.NAME"  -> kiln-train NAME;
 *   pythonModule otherwise    -> python3 -m MODULE;
 * then (for the last two) the program args: user args, then --job-dir DIR.
 * KILN_EINVAL with a sentence in `why` when there is nothing to run. */
kiln_err kiln_exec_program(const kiln_job *job, kiln_role role, const kiln_exec_paths *paths,
                           kiln_strv *argv, char *why, size_t whylen);

/* Starts argv[0] (searched in PATH) with the current environment overlaid by
 * `env`, in `cwd`, in its own process group. *out_fd and *err_fd get the read
 * ends (non-blocking, close-on-exec) of its stdout and stderr. Returns the
 * pid, or -1 with errno set. (Replicas go through the executor below; this
 * stays for programs that must die with their caller.) */
pid_t kiln_proc_spawn(const kiln_strv *argv, const kiln_strv *env, const char *cwd, int *out_fd,
                      int *err_fd);
/* Signals the process group of `pid` (the replica and its children). */
void kiln_proc_signal(pid_t pid, int sig);
/* The start time of a process (/proc/PID/stat field 22) or 0: with the pid
 * it identifies a process across pid reuse. */
uint64_t kiln_proc_start_time(pid_t pid);

/* ---------- the executor: where and how a replica runs ----------
 *
 * Backends sit behind one table (src/exec/exec_int.h): "local" runs the
 * program as a process on this machine, "container" runs an image through
 * podman; a Slurm backend joins the same table later. Restart policy, drain,
 * cancel, gang failure and logs stay above it, in kilnd's supervisor.
 *
 * Both backends start every replica under a monitor (kiln-monitor, like
 * podman's conmon) that holds its output, writes its log lines and records
 * its exit status in a file, so replicas outlive kilnd and a new kilnd adopts
 * them (kiln_exec_adopt). */
typedef enum kiln_exec_kind {
    KILN_EXEC_LOCAL,
    KILN_EXEC_CONTAINER,
    KILN_EXEC_KINDS
} kiln_exec_kind;

/* The node's executor settings (kilnd's command line and node config). */
typedef struct kiln_exec_config {
    const char *monitor;           /* the kiln-monitor binary */
    const char *container_runtime; /* podman; NULL: this node runs no images */
    kiln_strv runtime_args;        /* global runtime args: "--runtime runc" */
    kiln_strv run_args;            /* podman run args: "--ulimit ...", "--network host" */
    const char *cdi_dirs;          /* where NVIDIA's CDI spec would be (":"-separated) */
    unsigned long long log_cap;    /* bytes of replica output per job log */
} kiln_exec_config;

/* What to start. Strings are borrowed for the call. */
typedef struct kiln_exec_spec {
    kiln_exec_kind kind;
    const char *task;          /* master-replica-0 */
    const char *state;         /* path prefix of the monitor's files (DIR/replicas/TASK) */
    const char *job_log;       /* the job's log.tsv */
    const char *rep_log;       /* the replica's own log */
    const char *work_dir;      /* its working directory */
    const char *ctr_work_dir;  /* container: the directory in the image it starts in
                                  (the pod's workingDir; NULL: work_dir) */
    const kiln_strv *argv;     /* local: the program; container: containerCommand (may be empty) */
    const kiln_strv *args;     /* container: what replaces the image's CMD (may be empty) */
    const kiln_strv *env;      /* the complete environment ("NAME=VALUE") */
    const char *image;         /* container: the image */
    const char *name;          /* container: its name (unique per replica) */
    const char *const *mounts; /* container: directories mounted at the same path */
    size_t n_mounts;
    const kiln_strv *binds;   /* container: the user's host mounts "HOST:PATH[:ro]" (or NULL) */
    const kiln_strv *scratch; /* container: "PATH" (a volume removed with the container) or
                                 "PATH:tmpfs[:BYTES]" (a tmpfs of at most BYTES), or NULL */
    int64_t cpu_milli;        /* container: CPU limit in millicores (0: none) */
    int64_t memory_bytes;     /* container: memory limit (0: none) */
    const char *pull_policy;  /* container: IfNotPresent (NULL too) | Always | Never */
    const char *const *hosts; /* container: "NAME:ADDRESS" of the job's replicas, so that
                                 their hostnames resolve as a pod's do */
    size_t n_hosts;
    const int *gpus; /* the replica's GPUs (NVML indices) */
    size_t n_gpus;
    bool simulated; /* simulated GPUs: only CUDA_VISIBLE_DEVICES */
    /* container, instead of gpus: one argument standing where the GPUs'
     * --device arguments go, which kiln-slurm-task replaces on its node
     * with the GPUs Slurm gave the step (NULL: none) */
    const char *devices_arg;
    long uid, gid; /* run as (-1: the monitor's own) */
    /* securityContext (kiln_security_context): no_new_privs for both kinds
     * (a process: PR_SET_NO_NEW_PRIVS before its exec; a container: podman
     * --security-opt no-new-privileges); capabilities to drop (a container:
     * podman --cap-drop; a process: off its bounding set, so no setuid or
     * file-capability program it runs gains them; NULL: none); container
     * only: a read-only root filesystem (--read-only) */
    bool no_new_privs;
    bool read_only_root;
    const kiln_strv *cap_drop;
    /* where it runs: a command that runs what follows it on the replica's
     * node (`srun --jobid=A --het-group=K ... --`: a step of the Slurm
     * allocation its gang holds), put before the program and before the
     * image's pull and check; NULL or empty: this machine */
    const kiln_strv *via;
    /* container: a Unix socket (its path) on which the monitor runs
     * `podman exec` into this container for kiln-mpi-agent, the rsh agent
     * of an MPIJob's launcher (kiln-monitor.c, "--exec-socket"); NULL: none */
    const char *exec_socket;
} kiln_exec_spec;

/* What kilnd keeps of a started (or adopted) replica. */
typedef struct kiln_exec_handle {
    kiln_exec_kind kind;
    pid_t monitor;
    uint64_t monitor_start;
    pid_t pid; /* the program (local) or `podman run` (container); 0 until known */
    uint64_t pid_start;
    int life_fd; /* read end of the monitor's life pipe; -1 when adopted */
    char state[4096];
    char name[160]; /* container name */
    char lbuf[64];  /* a partial "S PID START" line */
    size_t llen;
} kiln_exec_handle;

/* Can a replica of this kind with these GPUs run on this node? KILN_EINVAL
 * with a sentence (no container runtime, no CDI spec for real GPUs). */
kiln_err kiln_exec_check(const kiln_exec_config *cfg, kiln_exec_kind kind, size_t n_gpus,
                         bool simulated, char *why, size_t whylen);
/* Starts a replica under its monitor; `h` is filled (h->pid may still be 0:
 * kiln_exec_poll learns it). KILN_EIO with a sentence when it cannot start. */
kiln_err kiln_exec_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                         kiln_exec_handle *h, char *why, size_t whylen);
/* Signals the replica (and what it started). SIGKILL also reaches a
 * container that its `podman run` left behind. */
void kiln_exec_signal(const kiln_exec_config *cfg, const kiln_exec_handle *h, int sig);

typedef enum kiln_exec_status {
    KILN_EXEC_STARTING, /* the monitor runs; the program not yet (pulling the image) */
    KILN_EXEC_RUNNING,
    KILN_EXEC_EXITED, /* *code is its exit code (a signal is 128 + its number) */
    KILN_EXEC_FAILED, /* it could never run (the image pull failed): `why` says why */
    KILN_EXEC_LOST    /* the monitor is gone without an exit status */
} kiln_exec_status;

/* Where the replica is now (reads the life pipe without blocking, then the
 * monitor's files). Closes h->life_fd once the monitor is gone. */
kiln_exec_status kiln_exec_poll(const kiln_exec_config *cfg, kiln_exec_handle *h, int *code,
                                char *why, size_t whylen);
/* Takes a replica over from a previous kilnd: its monitor (pid + start time
 * from the runtime record) and the monitor's files under `state`. */
void kiln_exec_adopt(kiln_exec_kind kind, const char *state, const char *name, pid_t monitor,
                     uint64_t monitor_start, kiln_exec_handle *h);
/* The tasks whose monitors still run under a job's replicas/ directory
 * (`DIR/replicas`), one name per entry of *tasks (caller clears). */
kiln_err kiln_exec_list(const char *replicas_dir, kiln_strv *tasks);
/* Collects the exited children kilnd started and does not wait for (the
 * monitors, `podman kill`), and only those: a child another thread started
 * is its own to wait for. */
void kiln_exec_reap(void);
/* Removes a previous run's monitor files before a start. */
void kiln_exec_forget(const char *state);
/* The backend's name ("local", "container"). */
const char *kiln_exec_kind_name(kiln_exec_kind kind);

/* ---- a container's resource use, from its cgroup (elasticPolicy.metrics) ----
 * A container replica's processes live outside its `podman run`'s process
 * group, in the container's own cgroup. kiln_exec_container_pids finds the
 * containers' main processes by name (one `podman ps`, bounded); the cgroup
 * is then read from /proc/PID/cgroup once per container start and kept. */
typedef struct kiln_cgroup {
    char cpu[512]; /* cgroup v2 dir with cpu.stat, or v1 cpuacct dir ("": none) */
    char mem[512]; /* cgroup v2 dir with memory.current, or v1 memory dir ("": none) */
    bool cpu_v2, mem_v2;
} kiln_cgroup;

/* The main process of each running container names[0..n) into pids[i] (0:
 * not running, or podman did not answer within timeout_ms: the caller blocks
 * at most that long). Returns how many were found. */
size_t kiln_exec_container_pids(const kiln_exec_config *cfg, const char *const *names, size_t n,
                                pid_t *pids, int timeout_ms);
/* The cgroup of process `pid` (v2 preferred; v1 cpuacct/memory on a hybrid
 * host); false when it has none to read. */
bool kiln_cgroup_of(pid_t pid, kiln_cgroup *cg);
/* Its CPU time so far (microseconds) and working set (bytes: usage less
 * inactive_file, as the kubelet reports it to metrics-server); false when
 * the cgroup is gone (the container ended). */
bool kiln_cgroup_read(const kiln_cgroup *cg, unsigned long long *cpu_us, long long *mem_bytes);

/* Appends one log line "SEVERITY\tTIMESTAMP\tTASK\tMESSAGE\n" to fd
 * (O_APPEND; one write, so concurrent writers do not interleave). Returns 0
 * when the whole line was written, 1 when only part of it was (a full disk:
 * the file now ends mid-line), -1 when none of it was; errno says why. */
int kiln_log_write(int fd, const char *severity, const char *task, const char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
