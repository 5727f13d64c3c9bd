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
 *   CUDA_VISIBLE_DEVICES  exactly the replica's GPUs, "" without any (NVML
 *                  indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees);
 *   KILN_SIMULATED_DEVICES=1 when those GPUs are simulated (node config);
 *   KILN_TASK_NAME, KILN_JOB_ID.
 *
 * Process parts: spawn in a new process group (so a replica's children are
 * signalled with it) with stdout/stderr on pipes, and die-with-kilnd
 * (PR_SET_PDEATHSIG) so that no replica outlives a crashed kilnd unnoticed.
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

/* The environment variables kilnd sets for tasks[self] ("NAME=VALUE" each).
 * `gpus`: the CUDA indices of its GPUs (n_gpus may be 0). */
kiln_err kiln_exec_replica_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                               size_t self, const int *gpus, size_t n_gpus, bool simulated,
                               kiln_strv *env);

/* KILN_COLL_KEY for every replica of one attempt of a job: names the shared
 * memory of kiln's collectives (kiln/collective.h), so a restarted attempt
 * never meets the segment of the one before, and two jobs never meet.
 * "kiln-<hash of project/jobId>-<instance>-a<attempt>" ([A-Za-z0-9.-], < 64
 * characters); `instance` tells two kilnd lives apart (its pid). */
void kiln_exec_coll_key(const char *project, const char *job_id, long instance, int attempt,
                        char out[64]);

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
 * pid, or -1 with errno set. */
pid_t kiln_proc_spawn(const kiln_strv *argv, const kiln_strv *env, const char *cwd, int *out_fd,
                      int *err_fd);
/* Signals the process group of `pid` (the replica and its children). */
void kiln_proc_signal(pid_t pid, int sig);
/* The start time of a process (/proc/PID/stat field 22) or 0: with the pid
 * it identifies a process across pid reuse. */
uint64_t kiln_proc_start_time(pid_t pid);

/* Appends one log line "SEVERITY\tTIMESTAMP\tTASK\tMESSAGE\n" to fd
 * (O_APPEND; one write, so concurrent writers do not interleave). */
void kiln_log_write(int fd, const char *severity, const char *task, const char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
