/* kiln/strategy.h - data-parallel training with TensorFlow's distribution
 * strategies, for any program built on the kiln runtime (kiln/train.h).
 *
 *   one_device             one replica on this process's CPU threads
 *   mirrored               the devices of one machine; this build is CPU-only,
 *                          so one replica on the CPU, as one_device
 *   multi_worker_mirrored  synchronous: the replicas form one all-reduce group
 *                          (kiln/collective.h) and every step sums their
 *                          gradients, so they stay bit-identical
 *   parameter_server       asynchronous: the trainable variables live on the
 *                          ps tasks (kiln/ps.h); replicas push gradients and
 *                          pull parameters without waiting for each other
 *
 * The replicas come from TF_CONFIG (or CLUSTER_SPEC), as a TensorFlow program
 * on AI Platform or a Kubeflow TFJob gets them, or from a local group that the
 * program started itself (world_size, rank and a key in the config). A
 * program's life with a strategy:
 *
 *     kiln_strategy_config cfg = {0};          // AUTO: from TF_CONFIG
 *     kiln_strategy *s;
 *     char err[256];
 *     if (kiln_strategy_new(&cfg, &s, err, sizeof err)) ...
 *     kiln_model *m = ...;                     // the same model, same seed, everywhere
 *     if (kiln_strategy_attach(s, m)) ...      // joins the group / dials the ps tasks
 *     if (kiln_strategy_broadcast_model(s, m)) ...  // rank 0's state to everyone
 *     for (each step)                          // this replica's slice of the batch
 *         kiln_strategy_train_step(s, m, x, y, n, 0, &loss, NULL);
 *     kiln_strategy_finish(s, m);              // everyone done; ps: shut them down
 *     kiln_strategy_free(s);
 *
 * or, for the all-reduce strategies, kiln_strategy_fit in place of the loop.
 * A ps task (kiln_strategy_role KILN_ROLE_PS) calls kiln_strategy_serve
 * instead of training; an evaluator task is in no group and only evaluates.
 *
 * Errors: functions return a kiln_err (kiln/diag.h): KILN_OK, KILN_EINVAL (a
 * bad configuration or call), KILN_EIO (a peer or ps failed), KILN_ENOTFOUND
 * (a strategy that is not built in: parameter_server needs ZeroMQ), KILN_ENOMEM;
 * kiln_strategy_error(s) then holds one sentence. Nothing prints.
 *
 * Build: `pkg-config --cflags --libs kiln` after `cmake --install`. One
 * strategy per process, used from one thread at a time. */
#ifndef KILN_STRATEGY_H
#define KILN_STRATEGY_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TensorFlow's names (tf.distribute). */
typedef enum kiln_strategy_kind {
    KILN_STRATEGY_AUTO = 0, /* TF_CONFIG with ps tasks: parameter_server, else
                             * multi_worker_mirrored (one replica without a cluster) */
    KILN_STRATEGY_ONE_DEVICE = 1,
    KILN_STRATEGY_MIRRORED = 2,
    KILN_STRATEGY_MULTI_WORKER_MIRRORED = 3,
    KILN_STRATEGY_PARAMETER_SERVER = 4,
} kiln_strategy_kind;

/* "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"
 * (and "auto") into *out: KILN_OK, or KILN_EINVAL for any other name. */
kiln_err kiln_strategy_parse(const char *name, kiln_strategy_kind *out);
/* The name of a kind ("auto" for KILN_STRATEGY_AUTO). */
const char *kiln_strategy_kind_name(kiln_strategy_kind k);

/* What this process does in the job. */
typedef enum kiln_strategy_role {
    KILN_ROLE_REPLICA = 0,   /* trains: chief/master (rank 0), a worker, or the only replica */
    KILN_ROLE_EVALUATOR = 1, /* TF_CONFIG task "evaluator": in no group */
    KILN_ROLE_PS = 2,        /* a parameter-server task: kiln_strategy_serve */
} kiln_strategy_role;

typedef struct kiln_strategy_config {
    kiln_strategy_kind kind;
    /* The cluster as JSON; NULL: $TF_CONFIG, else $CLUSTER_SPEC; "": none. */
    const char *tf_config;
    /* A local group the program started itself (no TF_CONFIG cluster):
     * world_size > 1 replicas on this host, this one's rank, and a key that
     * names the group's shared memory, equal in every replica and unique to
     * this run ([A-Za-z0-9._-], at most 64 characters). 0 or 1: none. */
    int world_size, rank;
    const char *job_key;
    /* all-reduce strategies: the gradient bucket size (0: one bucket for the
     * whole model; 1 MiB suits most models, kiln/train.h says why); 1 to sum
     * each bucket on the training thread as soon as the backward pass ends
     * it, 0 to queue it on the communication thread and wait before the
     * update (overlaps the sum with the rest of the backward pass) */
    size_t bucket_bytes;
    int inline_allreduce;
    /* Optional: a flag the program raises to stop (its SIGTERM). With
     * several replicas it travels in every step's last bucket, so that
     * kiln_strategy_stop_requested says yes on all of them after the same step. */
    volatile sig_atomic_t *stop;
    /* 1: one replica also goes through the gradient-sync path (compute,
     * then apply) instead of the fused step; for tests and measurements. */
    int always_sync;
    /* all-reduce strategies, replicas on one host (shm): 1 to shard the
     * optimizer (ZeRO-1): each replica sums only its slice of the gradient
     * (the all-reduce's own slice, in the same order, so the same bits), in
     * the optimizer's pass over that slice, updates only its slice of the
     * parameters and optimizer state, and the replicas then copy each
     * other's updated slices (all-gather). The parameters stay bit-identical
     * on every replica and equal to the unsharded step's; the optimizer
     * state is whole on a replica only after kiln_strategy_gather_state
     * (checkpoints) or finish. Ignored elsewhere (one replica, MPI, more
     * than 8 replicas): kiln_strategy_sharded says whether it is on. 0
     * here is off; kiln-train turns it on wherever it can be done, since it
     * measured faster than the overlapped all-reduce (bench/scaling.sh,
     * docs/distributed.md). */
    int shard_optimizer;
    /* parameter_server: give up on a ps after this long (0: 60 s); a ps
     * task drops a gradient staler than max_staleness versions (0: never); the
     * optimizer state on the ps tasks follows the model's optimizer, and
     * cosine decays its learning rate to 0 over total_updates when set. */
    double ps_timeout_s;
    long max_staleness;
    int ps_cosine;
    uint64_t ps_total_updates;
} kiln_strategy_config;

typedef struct kiln_strategy kiln_strategy;

/* Works out the strategy: the kind (AUTO resolved), the role, world and rank.
 * Reads TF_CONFIG but starts nothing, so the program can still refuse a
 * combination of its own before any peer waits for it. Refuses one_device or
 * mirrored with more than one replica, and a local group together with a
 * TF_CONFIG cluster. *out is NULL on failure, with the sentence in err. */
kiln_err kiln_strategy_new(const kiln_strategy_config *cfg, kiln_strategy **out, char *err,
                           size_t errlen);
/* Leaves the group (not collective: peers still waiting for this replica
 * fail) and frees s. NULL is fine. */
void kiln_strategy_free(kiln_strategy *s);

kiln_strategy_kind kiln_strategy_kind_of(const kiln_strategy *s);
kiln_strategy_role kiln_strategy_role_of(const kiln_strategy *s);
/* Training replicas in the job, and this one's place (0 = the chief, which
 * restores, checkpoints and logs). A ps task or an evaluator: rank -1. */
int kiln_strategy_world(const kiln_strategy *s);
int kiln_strategy_rank(const kiln_strategy *s);
/* TF_CONFIG's task type and index ("chief", "worker", "ps", "evaluator", ...;
 * "" and 0 without TF_CONFIG). */
const char *kiln_strategy_task_type(const kiln_strategy *s);
int kiln_strategy_task_index(const kiln_strategy *s);
/* The parsed TF_CONFIG (kiln/collective.h), or NULL without one; owned by s. */
const struct kiln_tf_group *kiln_strategy_tf_group(const kiln_strategy *s);
/* The last error as a sentence ("" when none). */
const char *kiln_strategy_error(const kiln_strategy *s);

/* Binds the strategy to the compiled model m, which must outlive s and be
 * the same network, optimizer and batch size on every replica. All-reduce
 * strategies with more than one replica: joins the group (collective: every
 * replica calls it) and allocates the gradient buffer. parameter_server:
 * shards m's trainable variables over the ps tasks and, on a replica, dials
 * them. One replica: nothing to join. */
kiln_err kiln_strategy_attach(kiln_strategy *s, kiln_model *m);
/* After attach: do all replicas run on this machine (shared memory)? 1 with
 * one replica. */
int kiln_strategy_one_host(const kiln_strategy *s);

/* ---- all-reduce strategies (one_device, mirrored, multi_worker_mirrored) ---- */

/* Rank 0's whole model state (parameters, optimizer slots, batch-norm
 * statistics, step count, RNG) is copied into every replica's m. Collective.
 * Call it after the chief restored its checkpoint, before the first step. */
kiln_err kiln_strategy_broadcast_model(kiln_strategy *s, kiln_model *m);
/* Rank 0's buf[0..bytes) into every replica's buf. Collective. */
kiln_err kiln_strategy_broadcast(kiln_strategy *s, void *buf, size_t bytes);
/* Do all replicas hold the same bytes (their flags, say)? *first_differs gets
 * the lowest rank whose bytes differ from rank 0's, or -1. Collective. */
kiln_err kiln_strategy_compare(kiln_strategy *s, const void *buf, size_t bytes, int *first_differs);
/* Debug: are the replicas' trainable parameters bit-identical? *first_differs
 * gets the lowest diverged rank or -1, and *buffer (may be NULL) the name of
 * the first parameter that differs. Collective. */
kiln_err kiln_strategy_check_replicas(kiln_strategy *s, kiln_model *m, int *first_differs,
                                      const char **buffer);
/* With shard_optimizer: makes this replica's optimizer state whole (every
 * replica's slice copied everywhere), e.g. before the chief writes a
 * checkpoint. Collective; a no-op (KILN_OK) without sharding. */
kiln_err kiln_strategy_gather_state(kiln_strategy *s, kiln_model *m);
/* Is the optimizer sharded (shard_optimizer asked for, and possible here)? */
int kiln_strategy_sharded(const kiln_strategy *s);
/* The measuring mode of $KILN_DIST_PROFILE this replica runs ("nocomm" or
 * "lockstep", docs/distributed.md: the replicas exchange nothing, so this is
 * not training), or NULL (also before attach, with one replica, and for
 * parameter_server). With one, the optimizer is not sharded and no
 * all-reduce runs: a caller should refuse options that tune them. */
const char *kiln_strategy_measuring(const kiln_strategy *s);
/* v[0..n) summed over the replicas in place (n <= 8; float precision:
 * for logged statistics). Collective. */
kiln_err kiln_strategy_sum(kiln_strategy *s, double *v, int n);
/* The gradient sync of one replica (kiln/train.h), for a training loop of
 * the program's own; NULL with one replica (the fused step). */
const kiln_grad_sync *kiln_strategy_grad_sync(const kiln_strategy *s);
/* After a step: did any replica's stop flag (config.stop) go up in it? */
int kiln_strategy_stop_requested(const kiln_strategy *s);
/* kiln_model_fit with this replica's slice of every global batch (opts'
 * rank, world and sync are filled in; the compiled batch size is the
 * per-replica batch). Returns fit's result: 0, 1 (a callback stopped it), or
 * -1 (kiln_strategy_error says why: the model's or the group's failure). */
int kiln_strategy_fit(kiln_strategy *s, kiln_model *m, const kiln_data *data,
                      const kiln_fit_opts *opts, const kiln_callbacks *cb);

/* ---- every strategy ---- */

/* One training step on this replica's n examples (x: n * input dim floats,
 * y: n labels; n <= the compiled batch size, 0 allowed in a group).
 * All-reduce: the gradient of the global batch's mean loss (global_n
 * examples over all replicas; 0 means n * world, i.e. every replica passes
 * n) is summed over the replicas and applied on each, so they stay
 * identical; collective. parameter_server: the gradient is pushed to the ps
 * tasks, which apply it, and m gets their parameters after it (global_n is
 * unused). loss (this replica's mean) and correct may be NULL. */
kiln_err kiln_strategy_train_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y,
                                  int n, int global_n, float *loss, int *correct);
/* The end of training. All-reduce: a barrier. parameter_server: tells the ps
 * tasks this replica is done; the chief then waits (up to the ps timeout)
 * for every replica, pulls the final parameters and optimizer slots into m
 * (step = shard 0's version) and shuts the ps tasks down. */
kiln_err kiln_strategy_finish(kiln_strategy *s, kiln_model *m);

/* ---- parameter_server ---- */

/* A ps task: serves its shard of m's variables, starting from m's
 * parameters, optimizer slots and step (restore a checkpoint into m first
 * to resume), on the port TF_CONFIG gives the task, until the chief shuts
 * the job down (KILN_OK) or *stop goes up (KILN_OK, *stopped = 1; stop and
 * stopped may be NULL). CURVE keys come from $KILN_PS_KEYS when set. */
kiln_err kiln_strategy_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop,
                             int *stopped);
/* Pulls the ps tasks' current parameters into m (replica only). */
kiln_err kiln_strategy_pull(kiln_strategy *s, kiln_model *m);
/* Shard 0's version: updates applied so far, as of the last push or pull. */
uint64_t kiln_strategy_ps_version(const kiln_strategy *s);

#ifdef __cplusplus
}
#endif
#endif
