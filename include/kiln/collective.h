/* kiln/collective.h - all-reduce and friends for data-parallel training.
 *
 * A communicator (kiln_comm) joins the `world_size` replicas of one job into
 * one all-reduce group. Every replica calls the same collectives in the same
 * order; each call returns only when this replica's part is done.
 *
 *     kiln_tf_group g;
 *     char err[256];
 *     if (kiln_tf_config_parse(getenv("TF_CONFIG"), &g, err, sizeof err)) ...
 *     kiln_comm_config cfg = kiln_comm_config_from_tf(&g);
 *     kiln_comm *c;
 *     if (kiln_comm_init(&cfg, &c, err, sizeof err)) ...
 *     kiln_comm_allreduce_sum_f32(c, grads, n);   // grads now hold the sum
 *     kiln_comm_destroy(c);
 *     kiln_tf_group_free(&g);
 *
 * Backends sit behind one table of function pointers (src/collective/coll_int.h):
 *   shm  every replica on this host: a POSIX shared-memory segment, reduce-
 *        scatter + all-gather with a vectorised sum. Deterministic: every rank
 *        gets bit-identical output, equal to summing in rank order.
 *   mpi  replicas on several hosts: OpenMPI's MPI_Allreduce (the program is
 *        started under mpirun; see docs/collectives.md). Built when CMake finds MPI.
 *
 * Failure: a peer that dies, hangs or leaves makes every other replica's call
 * fail within `timeout_s` (shm; death is seen within ~50 ms) with a message
 * naming the peer rank, the operation and its sequence number. A failed
 * communicator stays failed: later calls return the same error at once. The
 * platform restarts the job; nothing here tries to limp on.
 *
 * Errors: functions return a kiln_err (kiln/diag.h). KILN_EIO means a peer
 * failed (died, hung, left); KILN_EINVAL a bad argument or configuration;
 * KILN_ENOTFOUND a backend that is not built in. kiln_comm_error() holds the
 * sentence. Not thread-safe: one thread per communicator at a time (besides
 * kiln's own communication thread for the non-blocking calls); read
 * kiln_comm_error after a wait, not while calls are queued. */
#ifndef KILN_COLLECTIVE_H
#define KILN_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the group, from TF_CONFIG (platform facts §6) ---- */

/* TF_CONFIG's cluster lists chief (or master: one or the other, never both)
 * and worker tasks; they form the all-reduce group in that order: chief or
 * master is rank 0 and worker i is rank i+1 (rank i without a chief or
 * master). ps and evaluator tasks are not in the group (rank -1). */
typedef struct kiln_tf_group {
    int world_size;     /* chief/master + workers */
    int rank;           /* this task's rank, or -1 for ps / evaluator */
    char **hosts;       /* world_size "host:port" strings in rank order */
    char task_type[16]; /* "chief", "master", "worker", "ps" or "evaluator" */
    int task_index;     /* task.index */
    int num_ps;         /* ps tasks in the cluster (served variables; not in the group) */
    char **ps_hosts;    /* num_ps "host:port" strings, cluster.ps in index order
                         * (NULL when num_ps is 0) */
    char key[24];       /* job-unique rendezvous key: a hash of the cluster, equal
                         * on every replica of one job (used to name the shm segment) */
} kiln_tf_group;

/* Parses TF_CONFIG (or CLUSTER_SPEC; same shape). On failure returns
 * KILN_EINVAL with one sentence in err (the JSON path and what is wrong) and
 * leaves *g empty (safe to free). json NULL or "" is KILN_ENOTFOUND: no
 * cluster, run as one replica. The caller frees with kiln_tf_group_free. */
kiln_err kiln_tf_config_parse(const char *json, kiln_tf_group *g, char *err, size_t errlen);
void kiln_tf_group_free(kiln_tf_group *g);

/* ---- communicator ---- */

typedef enum kiln_coll_backend {
    KILN_COLL_AUTO = 0, /* shm when every host in `hosts` is this machine (or hosts
                         * is NULL), MPI otherwise */
    KILN_COLL_SHM = 1,
    KILN_COLL_MPI = 2,
} kiln_coll_backend;

typedef struct kiln_comm_config {
    int rank;       /* this replica, 0 <= rank < world_size (MPI: -1 = take MPI's) */
    int world_size; /* MPI: 0 = take MPI's */
    kiln_coll_backend backend;
    /* shm: names the segment; equal on every rank of the job and unique per job
     * ([A-Za-z0-9._-], at most 64 characters). NULL: $KILN_COLL_KEY. */
    const char *job_key;
    /* Optional: world_size "host[:port]" in rank order; AUTO uses it to tell
     * one host from many. */
    char *const *hosts;
    /* A peer that does not make progress for this long fails the call.
     * 0: $KILN_COLL_TIMEOUT_S, else 30 s. */
    double timeout_s;
    /* shm: bytes per rank per pipeline stage (the segment is
     * 2 * world_size * chunk_bytes plus a header). 0: 128 KiB. Rounded up to 256 bytes. */
    size_t chunk_bytes;
} kiln_comm_config;

/* rank, world_size, hosts and key taken from a parsed TF_CONFIG (g must
 * outlive the config); backend AUTO, default timeout and chunk. The key is
 * $KILN_COLL_KEY when set (an executor can make it unique per attempt), else
 * g->key. */
kiln_comm_config kiln_comm_config_from_tf(const kiln_tf_group *g);

typedef struct kiln_comm kiln_comm;

/* Joins the group: returns when every rank has joined, or fails within
 * timeout_s naming the ranks that did not come. *out is NULL on failure and the
 * reason is in err. Call it after fork(), never before (shm liveness is per
 * process). */
kiln_err kiln_comm_init(const kiln_comm_config *cfg, kiln_comm **out, char *err, size_t errlen);

/* buf[0..count) becomes the element-wise sum over all ranks, in place. Any
 * count, including 0 (then it is a barrier). Either every rank passes plain
 * memory, or every rank passes the same range of a kiln_comm_alloc_f32 buffer. */
kiln_err kiln_comm_allreduce_sum_f32(kiln_comm *c, float *buf, size_t count);
/* A buffer for all-reduce that the backend can reach from every rank
 * (collective: every rank calls it, in the same order, with the same count).
 * shm: the buffer lives in shared memory, and an all-reduce on it (or on any
 * range of it, at the same offset on every rank) reads the peers' buffers in
 * place instead of copying through the segment: about half the memory
 * traffic for cache-sized buffers. Other backends: plain aligned memory.
 * 64-byte aligned, zero-filled. NULL on failure (kiln_comm_error says why;
 * the communicator is then failed). Give the training loop's flat gradient
 * buffer this way. */
float *kiln_comm_alloc_f32(kiln_comm *c, size_t count);
/* Frees a buffer from kiln_comm_alloc_f32 (NULL is fine), before
 * kiln_comm_destroy. Not collective. */
void kiln_comm_free(kiln_comm *c, float *buf);
/* Non-blocking all-reduce, for gradient buckets overlapped with the backward
 * pass: queues the call and returns at once with a ticket. A communication
 * thread (started on first use) runs queued calls in the order they were
 * made, with the same code as the blocking call. Do not touch buf until
 * kiln_comm_wait(c, ticket) returns. Every rank must queue the same calls in
 * the same order. A blocking call (all-reduce, broadcast, barrier, alloc,
 * check_identical) first waits for everything queued, so calls still run in
 * program order. Errors are sticky: a failed queued call fails the
 * communicator, and wait returns that error (for this ticket or any later). */
typedef uint64_t kiln_comm_ticket;
kiln_err kiln_comm_iallreduce_sum_f32(kiln_comm *c, float *buf, size_t count,
                                      kiln_comm_ticket *ticket);
/* Waits until the call with this ticket (and every earlier one) has run. */
kiln_err kiln_comm_wait(kiln_comm *c, kiln_comm_ticket ticket);
kiln_err kiln_comm_wait_all(kiln_comm *c);
/* Queued calls not finished yet. */
int kiln_comm_pending(kiln_comm *c);
/* ---- sharded steps (ZeRO-1: each rank updates its own slice) ----
 * On a kiln_comm_alloc_f32 buffer only (every rank the same range), and only
 * where kiln_comm_sharding() says yes (shm); elsewhere these return
 * KILN_EINVAL. Rank r's slice of count floats is [lo, hi) from
 * kiln_comm_slice: the slices the all-reduce itself sums, one per rank,
 * 64-byte aligned, covering [0, count). */
int kiln_comm_sharding(const kiln_comm *c);
void kiln_comm_slice(const kiln_comm *c, size_t count, int rank, size_t *lo, size_t *hi);
/* The first half of an all-reduce, with the sum left to the caller: returns
 * once every rank has called it on the same range (so every rank's buf is
 * final) with srcs[p] (world entries) pointing at rank p's copy of buf
 * (read-only). This rank may then read its slice of every copy: summed in
 * rank order, (src[0][i] + src[1][i]) + ..., that is bit for bit what
 * kiln_comm_allreduce_sum_f32 gives there (a caller can fuse the sum into
 * its next pass over the slice). The copies stay unchanged until every rank
 * has made its next call on the group, so read them before making one. */
kiln_err kiln_comm_reduce_scatter_begin(kiln_comm *c, float *buf, size_t count, const float **srcs);
/* Every rank's slice of its buf is copied into the same slice of every
 * other rank's buf: buf[0..count) is whole everywhere when it returns. */
kiln_err kiln_comm_allgather_f32(kiln_comm *c, float *buf, size_t count);
/* The all-gather with the copies made by the caller, e.g. straight from the
 * pass that computes its slice: views[p] (world entries) is rank p's copy of
 * buf (not a call on the group: no waiting). After a
 * kiln_comm_reduce_scatter_begin (every rank has arrived, so none still
 * reads buf from an earlier call), a rank writes its slice into every other
 * rank's copy and then calls kiln_comm_allgather_written, which returns once
 * every rank has: buf is then whole everywhere. */
kiln_err kiln_comm_shared_views(kiln_comm *c, float *buf, size_t count, float **views);
kiln_err kiln_comm_allgather_written(kiln_comm *c, float *buf, size_t count);

/* Root's buf[0..bytes) is copied to every rank's buf. */
kiln_err kiln_comm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root);
kiln_err kiln_comm_barrier(kiln_comm *c);
/* Debug check that all replicas hold identical bytes (parameters after a
 * step): a 64-bit hash of buf on each rank is compared with rank 0's.
 * *n_diverged (may be NULL) gets the number of ranks whose bytes differ from
 * rank 0's, the same on every rank; if first_diverged is not NULL it gets the
 * lowest such rank, or -1. Returns KILN_OK when the check ran, whatever it found. */
kiln_err kiln_comm_check_identical(kiln_comm *c, const void *buf, size_t bytes, int *n_diverged,
                                   int *first_diverged);

/* Labels the following calls with the training step, so that a failure
 * says which step it happened in ("step 1234: allreduce #5 ...: rank 2 died
 * ..."). Queued non-blocking calls keep the label they were queued with.
 * -1 removes the label. */
void kiln_comm_set_step(kiln_comm *c, int64_t step);

int kiln_comm_rank(const kiln_comm *c);
int kiln_comm_world_size(const kiln_comm *c);
const char *kiln_comm_backend_name(const kiln_comm *c); /* "shm", "mpi" */
/* The last error as a sentence ("" when none). */
const char *kiln_comm_error(const kiln_comm *c);
/* The peer rank that caused the last failure (died, hung, left), or -1. */
int kiln_comm_failed_peer(const kiln_comm *c);
/* Leaves the group and frees c (NULL is fine). Not collective: peers that
 * still wait for this rank fail with "left". */
void kiln_comm_destroy(kiln_comm *c);

/* Is this backend compiled in? */
int kiln_comm_backend_available(kiln_coll_backend b);

#ifdef __cplusplus
}
#endif
#endif
