/* optim/optim.c - SGD with momentum and Adam, on the thread pool, with the
 * per-element arithmetic of optim/update.c. */
#include "optim/optim.h"

#include "collective/shm/sum.h"
#include "core/pool.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* One pass of the thread pool over `count` buffers: bufs (opt_task) or
 * shards (shard_task); adam 0 is SGD with momentum. */
typedef struct opt_ctx {
    const kiln_opt_buf *bufs;
    const kiln_opt_shard *shards;
    int count, parts, adam;
    float lr, mom, b1, b2, eps, step, sbc2;
} opt_ctx;

static void run_sgd(opt_ctx *c, void (*task)(void *, int, int), float lr, float momentum)
{
    c->lr = lr;
    c->mom = momentum;
    c->parts = kiln_get_threads();
    kiln__parallel_for(c->parts, task, c);
}

static void run_adam(opt_ctx *c, void (*task)(void *, int, int), float lr, float b1, float b2,
                     float eps, uint64_t t)
{
    c->adam = 1;
    c->b1 = b1;
    c->b2 = b2;
    c->eps = eps;
    kiln__adam_consts(lr, b1, b2, t, &c->step, &c->sbc2);
    c->parts = kiln_get_threads();
    kiln__parallel_for(c->parts, task, c);
}

/* The per-element loops of the fast forms. Each takes its constants by
 * value and its arrays as restrict pointers, so the compiler vectorises it:
 * reading lr or the arrays through the context struct made GCC reload them
 * in a scalar loop (the sharded SGD step was 2.4x slower per element than it
 * needed, bench/scaling.sh). Same per-element arithmetic as the _ref forms
 * (-ffp-contract=off), so every clone gives the same bits. */
KILN_HOT static void sgd_apply(float *restrict p, const float *restrict m, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        p[i] -= lr * m[i];
}

KILN_HOT static void sgd_mom(float *restrict p, float *restrict m, const float *restrict g,
                             size_t n, float lr, float mom)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = mom * m[i] + g[i];
        p[i] -= lr * m[i];
    }
}

KILN_HOT static void adam_loop(float *restrict p, float *restrict m, float *restrict v,
                               const float *restrict g, size_t n, float b1, float b2, float step,
                               float sbc2, float eps)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
    }
}

/* Two sources (two replicas): the sum fused into the update, and the new
 * parameters also stored to po when it is not NULL, in the same pass (GCC
 * unswitches the loop on po and vectorises both versions). */
KILN_HOT static void sgd_mom2(float *restrict p, float *restrict m, const float *restrict g0,
                              const float *restrict g1, float *restrict po, size_t n, float lr,
                              float mom)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = mom * m[i] + (g0[i] + g1[i]);
        p[i] -= lr * m[i];
        if (po) po[i] = p[i];
    }
}

KILN_HOT static void adam2(float *restrict p, float *restrict m, float *restrict v,
                           const float *restrict g0, const float *restrict g1, float *restrict po,
                           size_t n, float b1, float b2, float step, float sbc2, float eps)
{
    for (size_t i = 0; i < n; i++) {
        float g = g0[i] + g1[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
        if (po) po[i] = p[i];
    }
}

static void opt_task(void *p, int task, int tid)
{
    (void)tid;
    const opt_ctx *c = p;
    for (int k = 0; k < c->count; k++) {
        const kiln_opt_buf *b = &c->bufs[k];
        size_t i0, i1;
        kiln__split(b->n, c->parts, task, 16, &i0, &i1);
        if (b->fused == 2 || i1 <= i0) continue;
        size_t n = i1 - i0;
        if (!c->adam && b->fused)
            sgd_apply(b->p + i0, b->s1 + i0, n, c->lr);
        else if (!c->adam)
            sgd_mom(b->p + i0, b->s1 + i0, b->g + i0, n, c->lr, c->mom);
        else
            adam_loop(b->p + i0, b->s1 + i0, b->s2 + i0, b->g + i0, n, c->b1, c->b2, c->step,
                      c->sbc2, c->eps);
    }
}

void kiln_sgd_update(const kiln_opt_buf *bufs, int count, float lr, float momentum)
{
    opt_ctx c = {.bufs = bufs, .count = count};
    run_sgd(&c, opt_task, lr, momentum);
}

void kiln_adam_update(const kiln_opt_buf *bufs, int count, float lr, float b1, float b2, float eps,
                      uint64_t t)
{
    opt_ctx c = {.bufs = bufs, .count = count};
    run_adam(&c, opt_task, lr, b1, b2, eps, t);
}

/* ---- the sharded step: the gradient summed in the update's pass ---- */

static float gsum(const kiln_opt_shard *b, size_t i)
{
    float acc = b->src[0][i];
    for (int s = 1; s < b->nsrc; s++)
        acc += b->src[s][i];
    return acc;
}

void kiln_sgd_shard_ref(const kiln_opt_shard *b, float lr, float momentum)
{
    for (size_t i = 0; i < b->n; i++) {
        float g = gsum(b, i);
        b->s1[i] = momentum * b->s1[i] + g;
        b->p[i] -= lr * b->s1[i];
        if (b->pout) b->pout[i] = b->p[i];
    }
}

void kiln_adam_shard_ref(const kiln_opt_shard *b, float lr, float b1, float b2, float eps,
                         uint64_t t)
{
    float step, sbc2;
    kiln__adam_consts(lr, b1, b2, t, &step, &sbc2);
    for (size_t i = 0; i < b->n; i++) {
        float g = gsum(b, i);
        b->s1[i] = b1 * b->s1[i] + (1.0f - b1) * g;
        b->s2[i] = b2 * b->s2[i] + (1.0f - b2) * g * g;
        b->p[i] -= step * b->s1[i] / (sqrtf(b->s2[i]) / sbc2 + eps);
        if (b->pout) b->pout[i] = b->p[i];
    }
}

/* The shm all-reduce's sum (collective/shm/sum.h: sources in rank order,
 * bit for bit kiln__sum_ref and gsum), resolved once. */
static kiln__sum_fn sum_fn(void)
{
    static _Atomic(kiln__sum_fn) f;
    kiln__sum_fn g = atomic_load_explicit(&f, memory_order_relaxed);
    if (!g) atomic_store_explicit(&f, g = kiln__sum_best(), memory_order_relaxed);
    return g;
}

/* More than two sources: their sum a tile at a time into the stack, then
 * the plain update loops above on it, and the copy-out. */
static void shard_n(const opt_ctx *c, const kiln_opt_shard *b, size_t i0, size_t i1)
{
    enum { TILE = 512 };
    kiln__sum_fn sum = sum_fn();
    float g[TILE];
    const float *at[KILN_OPT_MAX_SRC];
    for (size_t i = i0; i < i1; i += TILE) {
        size_t n = i1 - i < TILE ? i1 - i : TILE;
        for (int s = 0; s < b->nsrc; s++)
            at[s] = b->src[s] + i;
        sum(g, NULL, at, b->nsrc, n);
        if (c->adam)
            adam_loop(b->p + i, b->s1 + i, b->s2 + i, g, n, c->b1, c->b2, c->step, c->sbc2, c->eps);
        else
            sgd_mom(b->p + i, b->s1 + i, g, n, c->lr, c->mom);
        if (b->pout) memcpy(b->pout + i, b->p + i, n * sizeof(float));
    }
}

/* Two sources (two replicas) take the fused loops above; more, shard_n. */
static void shard_task(void *p, int task, int tid)
{
    (void)tid;
    const opt_ctx *c = p;
    for (int k = 0; k < c->count; k++) {
        const kiln_opt_shard *b = &c->shards[k];
        size_t i0, i1;
        kiln__split(b->n, c->parts, task, 16, &i0, &i1);
        if (i1 <= i0) continue;
        size_t n = i1 - i0;
        float *po = b->pout ? b->pout + i0 : NULL;
        if (b->nsrc != 2)
            shard_n(c, b, i0, i1);
        else if (!c->adam)
            sgd_mom2(b->p + i0, b->s1 + i0, b->src[0] + i0, b->src[1] + i0, po, n, c->lr, c->mom);
        else
            adam2(b->p + i0, b->s1 + i0, b->s2 + i0, b->src[0] + i0, b->src[1] + i0, po, n, c->b1,
                  c->b2, c->step, c->sbc2, c->eps);
    }
}

void kiln_sgd_shard(const kiln_opt_shard *bufs, int count, float lr, float momentum)
{
    opt_ctx c = {.shards = bufs, .count = count};
    run_sgd(&c, shard_task, lr, momentum);
}

void kiln_adam_shard(const kiln_opt_shard *bufs, int count, float lr, float b1, float b2, float eps,
                     uint64_t t)
{
    opt_ctx c = {.shards = bufs, .count = count};
    run_adam(&c, shard_task, lr, b1, b2, eps, t);
}
