/* src/exec/slurm/alloc.h - Slurm as the placement and launch backend under
 * kiln's one supervisor (kilnd --executor slurm).
 *
 * Placement: a gang is one Slurm job holding an allocation (`sbatch` of a
 * heterogeneous job, one component per replica, whose batch script only
 * waits), so Slurm places the whole gang at once, with its priorities,
 * accounts and QOS. Launch: each replica is a step of that allocation,
 * `srun --jobid=A --het-group=K`, run on kilnd's machine under kiln-monitor
 * like any local replica; the step's output comes back through srun, its
 * exit status is srun's. What to do about a replica (restart it, drain it,
 * stop the gang, adopt it after a kilnd restart) is the supervisor's
 * decision, made in the same code as on one machine: nothing here decides.
 *
 * Everything goes through Slurm's own commands (sbatch, squeue, scontrol,
 * scancel, sinfo) with kilnd's allow-listed environment (kiln_slurm_run).
 * docs/slurm.md, "One supervisor". */
#ifndef KILN_EXEC_SLURM_ALLOC_H
#define KILN_EXEC_SLURM_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/devices.h"
#include "kiln/diag.h"
#include "kiln/exec.h"
#include "kiln/sched.h"

/* One component of an allocation: the replicas of one role (Slurm gives
 * the components of a heterogeneous job nodes of their own). */
typedef struct kiln_slurm_comp {
    int tasks;        /* replicas (one task each) */
    int gpus;         /* GPUs per replica (--gpus-per-task), 0: none */
    const char *gres; /* the GPUs' GRES type (--slurm-gpu-type), NULL: any */
    int cpus;         /* --cpus-per-task (0: Slurm's default) */
    long mem_mb;      /* per replica (0: Slurm's default; asked as --mem-per-cpu) */
    const char *node; /* --nodelist: exactly this node (NULL: any) */
} kiln_slurm_comp;

typedef struct kiln_slurm_alloc_req {
    const char *name;             /* the Slurm job's name (kiln-P-J ...) */
    const char *dir;              /* its batch script, output and layout go here: a
                                     directory its user can write, shared with the nodes */
    const char *partition;        /* -p */
    const char *account, *qos;    /* NULL: none */
    long uid, gid;                /* -1: kilnd's own (root submits with --uid/--gid) */
    long time_limit_s;            /* --time (0: none) */
    int nice;                     /* --nice (-1: none): kiln's priority in Slurm's order */
    const kiln_slurm_comp *comps; /* one per role */
    size_t n;
} kiln_slurm_alloc_req;

/* The last non-empty line of a command's output (Slurm's error sentence)
 * into buf; "" for none. */
void kiln_slurm_last_line(const char *out, char *buf, size_t len);

/* Submits the allocation; *id is its Slurm job id. KILN_EINVAL: Slurm
 * refused it for good (no node could ever hold it), KILN_EIO: sbatch failed
 * otherwise; `why` has Slurm's words either way. */
kiln_err kiln_slurm_alloc_submit(const kiln_slurm_alloc_req *rq, long *id, char *why,
                                 size_t whylen);

typedef enum kiln_slurm_alloc_state {
    KILN_SLURM_ALLOC_PENDING,
    KILN_SLURM_ALLOC_RUNNING,
    KILN_SLURM_ALLOC_ENDED, /* gone from squeue, or in a final state */
} kiln_slurm_alloc_state;

/* One squeue call for every kiln allocation: id, name, state, reason, and
 * the node of each component that Slurm put on one node (squeue lists a
 * heterogeneous job's components as rows "ID+K"; one row per id here). */
#define KILN_SLURM_COMPS 16
typedef char kiln_slurm_node_name[64];
typedef struct kiln_slurm_alloc_row {
    long id;
    char name[200];
    char state[32];
    char reason[128];
    uint32_t one_node; /* bit K: component K runs on one node, comp_node[K] */
    kiln_slurm_node_name comp_node[KILN_SLURM_COMPS];
} kiln_slurm_alloc_row;
typedef struct kiln_slurm_alloc_list {
    kiln_slurm_alloc_row *rows;
    size_t n;
    bool ok; /* false: squeue failed, nothing is known (nothing has ended) */
} kiln_slurm_alloc_list;

/* squeue of every job whose name starts with `prefix` ("kiln-"). */
void kiln_slurm_alloc_list_read(const char *prefix, kiln_slurm_alloc_list *out);
void kiln_slurm_alloc_list_free(kiln_slurm_alloc_list *l);
/* The row of allocation `id` or of Slurm job name `name` (either may be 0/NULL). */
const kiln_slurm_alloc_row *kiln_slurm_alloc_find(const kiln_slurm_alloc_list *l, long id,
                                                  const char *name);
kiln_slurm_alloc_state kiln_slurm_alloc_state_of(const kiln_slurm_alloc_row *r);

/* Where Slurm put the tasks of a running allocation: the batch script
 * writes DIR/layout (each component's SLURM_TASKS_PER_NODE and its nodes,
 * in order) as it starts. nodes[c][t] gets component c's task t's node
 * (block distribution, as srun lays tasks out). KILN_ECONFLICT while the
 * file is not there yet; KILN_EIO when it does not hold `tasks` tasks. */
kiln_err kiln_slurm_alloc_layout(const char *dir, long id, const kiln_slurm_comp *comps, size_t n,
                                 kiln_slurm_node_name *const nodes[], char *why, size_t whylen);
/* The same from the file's text: KILN_EIO for anything but exactly the
 * components' lines, each with its tasks' count and nodes. */
kiln_err kiln_slurm_alloc_layout_parse(const char *text, const kiln_slurm_comp *comps, size_t n,
                                       kiln_slurm_node_name *const nodes[]);
/* The same from squeue's row of a running allocation, without waiting for
 * the batch script: where each component runs on one node, all its tasks
 * are there. KILN_ECONFLICT when a component spans nodes or is not listed
 * (the file says how its tasks are spread). */
kiln_err kiln_slurm_alloc_layout_row(const kiln_slurm_alloc_row *r, const kiln_slurm_comp *comps,
                                     size_t n, kiln_slurm_node_name *const nodes[]);

/* Whether allocation `id` has ended, asked of squeue now (its state in
 * `state`: "" when squeue no longer lists it); false when squeue fails. */
bool kiln_slurm_alloc_ended(long id, char *state, size_t slen);

/* How an allocation that held running replicas ended, by Slurm's own
 * record: squeue's state, else (squeue forgot it, MinJobAge) sacct's
 * State and ExitCode.
 *   RUNNING  still running: the replica exited by itself;
 *   TAKEN    Slurm took it away: CANCELLED, PREEMPTED, NODE_FAIL, TIMEOUT,
 *            DEADLINE, BOOT_FAIL, or queued again (PENDING, REQUEUED...),
 *            or no record at all (no accounting to ask);
 *   EXITED   its batch script ended by itself (COMPLETED, FAILED,
 *            OUT_OF_MEMORY): what runs in it failed, not Slurm.
 * `state` gets the state and `exit_code` sacct's "N:S" ("" when unknown). */
typedef enum { KILN_SLURM_END_RUNNING, KILN_SLURM_END_TAKEN, KILN_SLURM_END_EXITED } kiln_slurm_end;
kiln_slurm_end kiln_slurm_alloc_end(long id, char *state, size_t slen, char *exit_code,
                                    size_t elen);
/* The same from a state word ("CANCELLED by 0" reads as CANCELLED). */
kiln_slurm_end kiln_slurm_end_of(const char *state);

/* scancel of the whole allocation (every step in it ends). */
void kiln_slurm_alloc_cancel(long id);

/* The command that runs a replica on its node: `srun --jobid=ID
 * [--het-group=K] --nodes=1 --ntasks=1 --nodelist=NODE --exact
 * [--gpus-per-task=G] [--cpus-per-task=C] --job-name=STEP ... --` (cpus 0:
 * Slurm's default),
 * appended to *av; het < 0 for an allocation of one component. Concurrent
 * steps of one component on a node get distinct GPUs (Slurm's choice, in
 * the step's CUDA_VISIBLE_DEVICES). */
kiln_err kiln_slurm_step_argv(long id, int het, const char *node, int gpus, int cpus,
                              const char *step, kiln_strv *av);
/* Sends `sig` to the step called `step` of allocation `id` (scancel
 * --signal): srun itself, signalled, would cancel the step at once. */
void kiln_slurm_step_signal(long id, const char *step, int sig);

/* The CPU time (microseconds) and memory (bytes) used so far by the step
 * called `step` of allocation `id`, as Slurm's job accounting gathers them
 * (sstat's TRESUsageInTot: the site needs a JobAcctGatherType other than
 * none; its frequency bounds how fresh they are). false when Slurm does
 * not say. For elasticPolicy.metrics of workers on Slurm's nodes. */
bool kiln_slurm_step_usage(long id, const char *step, unsigned long long *cpu_us, long long *mem);

/* The partition's nodes as kiln's cluster: names, NodeAddr, CPUs, memory
 * (hard limits for placement when `hard`: --slurm-machine-resources yes),
 * GPUs (GRES gpu, their kiln type through the --slurm-gpu-type map: `type_of`
 * maps a GRES type to kiln's, NULL: NVIDIA_GPU). The GPUs are named by
 * their index, which is what Slurm's CUDA_VISIBLE_DEVICES uses. A node's
 * address is its NodeAddr (NodeHostname, NodeName when unset) resolved to
 * a numeric one (kiln_node_resolve); a node whose address does not resolve
 * is left out and named in `note` ("" when none), for kilnd's log. */
typedef const char *(*kiln_slurm_type_of)(void *ctx, const char *gres_type);
kiln_err kiln_slurm_cluster(const char *partition, bool hard, kiln_slurm_type_of type_of, void *ctx,
                            kiln_cluster *out, char *note, size_t notelen, char *why,
                            size_t whylen);

#endif
