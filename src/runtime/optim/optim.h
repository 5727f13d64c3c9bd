/* optim/optim.h - parameter updates (internal; the public choice of
 * optimizer is kiln_optimizer in kiln/train.h).
 *
 * SGD with momentum, PyTorch's form: v = momentum*v + g; p -= lr*v.
 * Adam (Kingma & Ba) in PyTorch's arithmetic: m = b1*m + (1-b1)*g,
 * v = b2*v + (1-b2)*g*g, p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps),
 * t = the 1-based step number. The `_ref` forms are one plain loop; the fast
 * forms run slices of the buffers on the thread pool with the same per-element
 * arithmetic, so both give bit-identical results (tested). */
#ifndef KILN_RT_OPTIM_H
#define KILN_RT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

void kiln_sgd_update_ref(float *p, const float *g, float *v, size_t n, float lr, float momentum);
void kiln_adam_update_ref(float *p, const float *g, float *m, float *v, size_t n, float lr,
                          float b1, float b2, float eps, uint64_t t);

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
void kiln_adam_update(const kiln_opt_buf *bufs, int count, float lr, float b1, float b2, float eps,
                      uint64_t t);

/* The cosine schedule of kiln-train (single run, replicas and parameter
 * servers alike): base * (1 + cos(pi * step / total)) / 2, step capped at
 * total; base when total is 0. A pure function of the step, so a resumed run
 * needs no extra state for it. */
float kiln_lr_cosine(double base, uint64_t step, uint64_t total);

#endif
