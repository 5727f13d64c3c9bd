/* coll_int.h - inside the collectives module: the backend table and the
 * communicator every backend shares. Public API: kiln/collective.h.
 *
 * A backend is a table of function pointers (curl's TLS backends). The
 * generic layer (comm.c) checks arguments, numbers operations, keeps the
 * sticky error and dispatches; a backend only moves bytes and, on failure,
 * fills c->err / c->failed_peer via kiln__comm_fail(). */
#ifndef KILN_COLL_INT_H
#define KILN_COLL_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/collective.h"

typedef struct kiln__coll_ops {
    const char *name;
    /* Fills c->impl. On failure writes c->err and returns non-OK; the generic
     * layer then calls destroy, so init may leave partial state in c->impl. */
    kiln_err (*init)(kiln_comm *c, const kiln_comm_config *cfg);
    kiln_err (*allreduce_sum_f32)(kiln_comm *c, float *buf, size_t count);
    kiln_err (*broadcast)(kiln_comm *c, void *buf, size_t bytes, int root);
    kiln_err (*barrier)(kiln_comm *c);
    /* Optional (NULL: the generic layer uses aligned heap memory). */
    kiln_err (*alloc_f32)(kiln_comm *c, size_t count, float **out);
    void (*free_f32)(kiln_comm *c, float *buf);
    /* Optional (NULL: not offered): the sharded steps of kiln/collective.h,
     * on registered buffers. */
    kiln_err (*rs_begin)(kiln_comm *c, float *buf, size_t count, const float **srcs);
    kiln_err (*allgather_f32)(kiln_comm *c, float *buf, size_t count);
    kiln_err (*views)(kiln_comm *c, float *buf, size_t count, float **views);
    kiln_err (*allgather_written)(kiln_comm *c, float *buf, size_t count);
    void (*slice)(const kiln_comm *c, size_t count, int rank, size_t *lo, size_t *hi);
    /* Frees the backend's state, including buffers still allocated. */
    void (*destroy)(kiln_comm *c);
} kiln__coll_ops;

struct kiln__async;

struct kiln_comm {
    const kiln__coll_ops *ops;
    void *impl;
    struct kiln__async *async; /* the communication thread, once used (comm.c) */
    int rank, world;
    double timeout_s;
    uint64_t op_seq;     /* public operations started, 1-based in messages */
    const char *op_name; /* the operation in progress, for messages */
    int64_t user_step;   /* kiln_comm_set_step, -1 = none (caller's thread) */
    int64_t step;        /* the label of the operation running now (messages) */
    kiln_err failed;     /* sticky: once set every call returns it */
    int failed_peer;
    char err[512];
};

extern const kiln__coll_ops kiln__coll_shm;
#ifdef KILN_HAVE_MPI
extern const kiln__coll_ops kiln__coll_mpi;
#endif

/* Records a failure (first one wins) and returns e. */
kiln_err kiln__comm_fail(kiln_comm *c, kiln_err e, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Test-only hook: if set, the shm backend calls it at the start of every
 * pipeline step with the communicator's rank and global step number, so a test
 * can make a rank die at an exact point mid-collective. NULL in production. */
extern void (*kiln__coll_test_step_hook)(int rank, uint64_t step);

/* 64-bit FNV-1a, used for the checksum check and the TF_CONFIG key. */
uint64_t kiln__fnv1a64(const void *p, size_t n, uint64_t h);
#define KILN__FNV_OFFSET 0xcbf29ce484222325ull

#endif
