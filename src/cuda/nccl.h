/* cuda/nccl.h - all-reduce of device buffers over NCCL (internal).
 *
 * Two ways to form the group:
 *   mirrored               one process, several GPUs: kiln_nccl_init_local
 *                          makes one communicator per context (ncclCommInitAll)
 *                          and kiln_nccl_allreduce_group sums across them.
 *   multi_worker_mirrored  one process per GPU, on one or many hosts:
 *                          kiln_nccl_init_comm takes rank and world size from
 *                          kiln's CPU communicator (formed from TF_CONFIG, see
 *                          kiln/collective.h); rank 0 makes the ncclUniqueId
 *                          and kiln_comm_broadcast hands it to the others.
 * Operations are queued on the context's compute stream, so they order with
 * the backward pass that produced the gradients; kiln_cu_sync waits.
 * Without NCCL at build time every function fails with KILN_ENOTFOUND. */
#ifndef KILN_CUDA_NCCL_H
#define KILN_CUDA_NCCL_H

#include <stddef.h>

#include "cuda/cuda_ops.h"
#include "kiln/collective.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_nccl kiln_nccl;

/* 1 when NCCL was linked in. */
int kiln_nccl_available(void);

/* Collective over cpu's ranks: every rank calls it with its own context. */
kiln_err kiln_nccl_init_comm(kiln_comm *cpu, kiln_cuda_ctx *ctx, kiln_nccl **out, char *err,
                             size_t errlen);
/* One communicator per context, all in this process; out[n]. */
kiln_err kiln_nccl_init_local(kiln_cuda_ctx *const *ctxs, int n, kiln_nccl **out, char *err,
                              size_t errlen);
/* buf (device, on this communicator's GPU) = the sum over ranks, in place. */
kiln_err kiln_nccl_allreduce_sum_f32(kiln_nccl *c, float *buf, size_t count);
/* The same for n communicators of this process at once (ncclGroupStart/End;
 * one thread cannot drive them one after another without deadlocking). */
kiln_err kiln_nccl_allreduce_group(kiln_nccl *const *cs, float *const *bufs, size_t count, int n);
const char *kiln_nccl_error(const kiln_nccl *c);
int kiln_nccl_rank(const kiln_nccl *c);
int kiln_nccl_world_size(const kiln_nccl *c);
void kiln_nccl_destroy(kiln_nccl *c); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
