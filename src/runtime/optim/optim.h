/* optim/optim.h - parameter updates (internal; the public choice of
 * optimizer is kiln_optimizer in kiln/train.h).
 *
 * The update rules and their plain `_ref` loops are optim/update.h. The
 * forms here run slices of the buffers on the thread pool with the same
 * per-element arithmetic, so both give bit-identical results (tested). */
#ifndef KILN_RT_OPTIM_H
#define KILN_RT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "optim/update.h"

/* One optimizer step over `count` buffers at once (one hand-off to the pool).
 * For SGD state2 is unused (may be NULL). */
typedef struct kiln_opt_buf {
    float *p;
    const float *g;
    float *s1, *s2;
    size_t n;
    int fused; /* SGD: 1 = s1 already holds momentum*v + g (fused into the
                  backward GEMM): only p -= lr * s1 is left; 2 = the backward
                  pass did that too (dense layers): nothing left */
} kiln_opt_buf;

void kiln_sgd_update(const kiln_opt_buf *bufs, int count, float lr, float momentum);

/* The sharded step (ZeRO-1, strategy/allreduce.c): a buffer's slice whose
 * gradient is the sum of nsrc replicas' gradients, summed here, in the
 * update's own pass, in the all-reduce's order: ((src[0][i] + src[1][i]) +
 * ...), so the result is bit for bit that of summing first (kiln__sum_ref)
 * and updating then. The updated parameters are also stored to pout (for
 * the all-gather) when it is not NULL. */
#define KILN_OPT_MAX_SRC 8
typedef struct kiln_opt_shard {
    float *p, *s1, *s2;
    const float *src[KILN_OPT_MAX_SRC];
    int nsrc;
    float *pout;
    size_t n;
} kiln_opt_shard;

/* Plain references: one loop, sum then update, as kiln__sum_ref and the
 * _ref updates of optim/update.h. */
void kiln_sgd_shard_ref(const kiln_opt_shard *b, float lr, float momentum);
void kiln_adam_shard_ref(const kiln_opt_shard *b, float lr, float b1, float b2, float eps,
                         uint64_t t);
/* The fast forms: `count` slices at once on the thread pool. */
void kiln_sgd_shard(const kiln_opt_shard *bufs, int count, float lr, float momentum);
void kiln_adam_shard(const kiln_opt_shard *bufs, int count, float lr, float b1, float b2, float eps,
                     uint64_t t);
void kiln_adam_update(const kiln_opt_buf *bufs, int count, float lr, float b1, float b2, float eps,
                      uint64_t t);

#endif
