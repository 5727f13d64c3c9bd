/* src/exec/exec_int.h - the executor's backend table (internal to src/exec).
 *
 * Like curl's vtls: one table of function pointers per backend, picked by
 * kind in exec.c; kiln/exec.h is the only public face. A backend says how a
 * replica is checked, started, signalled, watched and adopted. The monitor
 * helpers below (kiln__mon_*) are what the local and container backends
 * share: both run their program under kiln-monitor. A Slurm backend fills
 * the same slots with sbatch/scancel/sacct. */
#ifndef KILN_EXEC_INT_H
#define KILN_EXEC_INT_H

#include "kiln/exec.h"

typedef struct kiln__exec_backend {
    const char *name;
    kiln_err (*check)(const kiln_exec_config *cfg, size_t n_gpus, bool simulated, char *why,
                      size_t whylen);
    kiln_err (*start)(const kiln_exec_config *cfg, const kiln_exec_spec *spec, kiln_exec_handle *h,
                      char *why, size_t whylen);
    void (*signal)(const kiln_exec_config *cfg, const kiln_exec_handle *h, int sig);
    kiln_exec_status (*poll)(const kiln_exec_config *cfg, kiln_exec_handle *h, int *code, char *why,
                             size_t whylen);
    void (*adopt)(const char *state, const char *name, pid_t monitor, uint64_t monitor_start,
                  kiln_exec_handle *h);
} kiln__exec_backend;

extern const kiln__exec_backend kiln__exec_local;
extern const kiln__exec_backend kiln__exec_container;

/* Starts `prog` under kiln-monitor (a session of its own, so it outlives
 * kilnd), with exactly spec->env as its environment. pull/exists: the image
 * pull and check the monitor runs first, by spec->pull_policy (NULL for
 * none; pull NULL alone: the check only, as for Never). */
/* The one writer of kiln-monitor's command line (src/exec/monitor reads it):
 *   MONITOR STATE JOBLOG REPLOG TASK LOGCAP CWD UID GID POLICY
 *           NPULL PULL... NEXISTS EXISTS... -- PROG...
 * appended to *av. Used by kiln__mon_start and by kiln-slurm-task (the Slurm
 * executor's replicas). `pull`, `exists` may be NULL (none); `policy` NULL:
 * IfNotPresent. */
typedef struct kiln__mon_args {
    const char *monitor, *state, *job_log, *rep_log, *task, *work_dir, *pull_policy;
    long long log_cap, uid, gid; /* uid/gid -1: kilnd's own */
    bool no_new_privs;           /* PR_SET_NO_NEW_PRIVS before the program's exec */
    const kiln_strv *cap_drop;   /* capabilities off the bounding set (NULL: none) */
    const kiln_strv *pull, *exists;
    /* --exec-socket: where the monitor serves execs, and the command each
     * runs before "/bin/sh -c LINE" (`podman exec -i NAME`); NULL: none */
    const char *exec_socket;
    const kiln_strv *exec_argv;
    long long exec_uid; /* whose connections are served besides root's (-1: root's only) */
} kiln__mon_args;
/* A child started and not waited for (a monitor, `podman kill`), for
 * kiln_exec_reap to collect. */
void kiln__exec_child(pid_t pid);
kiln_err kiln__mon_argv(const kiln__mon_args *a, const char *const *prog, size_t nprog,
                        kiln_strv *av);

kiln_err kiln__mon_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                         const kiln_strv *prog, const kiln_strv *pull, const kiln_strv *exists,
                         const kiln_strv *exec_argv, long exec_uid, kiln_exec_handle *h, char *why,
                         size_t whylen);
kiln_exec_status kiln__mon_poll(const kiln_exec_config *cfg, kiln_exec_handle *h, int *code,
                                char *why, size_t whylen);
/* The container backend's command lines for `spec` (src/exec/container):
 * `podman run ...` (prog), the pull the monitor runs first (pull: left
 * empty for pullPolicy Never) and the image check (exists). The container
 * backend runs them under its monitor (under Slurm as a step, on the node
 * Slurm chose). */
kiln_err kiln__podman_argv(const kiln_exec_config *cfg, const kiln_exec_spec *spec, kiln_strv *prog,
                           kiln_strv *pull, kiln_strv *exists);
/* `podman kill --signal KILL NAME` with the runtime's global args: what
 * ends a container whose program outlived the grace period (the local
 * backend's SIGKILL). */
kiln_err kiln__podman_kill_argv(const kiln_exec_config *cfg, const char *name, kiln_strv *av);
/* What a replica may keep of kilnd's own environment (NULL-terminated):
 * nothing else, so that no secret of kilnd's reaches a replica. The monitor
 * adds HOME, USER, LOGNAME; Slurm's commands kilnd runs take the same list
 * (src/exec/slurm). */
extern const char *const kiln__exec_allowed_env[];

/* In a forked child before exec: the default dispositions of the signals
 * kilnd changes (SIGPIPE, SIGTERM, SIGINT) and an empty signal mask, so the
 * program starts as from a shell (src/exec/proc.c). */
void kiln__child_default_signals(void);

void kiln__mon_adopt(const char *state, const char *name, pid_t monitor, uint64_t monitor_start,
                     kiln_exec_handle *h);
/* True while the process (pid, start time) still runs. */
bool kiln__alive(pid_t pid, uint64_t start);

#endif
