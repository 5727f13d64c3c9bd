/* ops/ops.h - the numeric kernels of the runtime (internal; tests use it).
 *
 * Every op comes twice: `_ref` is the plain loop nest that defines what the
 * op computes (accumulating in double where it sums), and the unsuffixed name
 * is the fast path (OpenBLAS SGEMM, cache-sized chunks, the kiln thread
 * pool). tests/runtime/test_ops*.c compare the two with stated tolerances.
 *
 * Conventions: all tensors are NHWC / row-major (see kiln/tensor.h). Backward
 * functions OVERWRITE their gradient outputs (dx, dw, db); they do not
 * accumulate. A NULL dx skips the input gradient (first layer). When `relu`
 * is set the op computes relu(op(x)) forward, and backward first turns dy
 * (the gradient w.r.t. the post-ReLU output y) into the pre-activation
 * gradient IN PLACE (dy[i] = 0 where y[i] <= 0). */
#ifndef KILN_RT_OPS_H
#define KILN_RT_OPS_H

#include <stddef.h>
#include <stdint.h>

/* ---- dense: x[B,in] w[in,out] b[out] -> y[B,out] ---- */
void kiln_dense_fwd_ref(const float *x, const float *w, const float *b, float *y, int B, int in,
                        int out, int relu);
void kiln_dense_fwd(const float *x, const float *w, const float *b, float *y, int B, int in,
                    int out, int relu);
void kiln_dense_bwd_ref(const float *x, const float *w, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu);
void kiln_dense_bwd(const float *x, const float *w, const float *y, float *dy, float *dx, float *dw,
                    float *db, int B, int in, int out, int relu);

/* Accumulating form for fused optimizers: dw = beta*dw + x^T dy and
 * db = beta*db + sum(dy) (beta = 0 is kiln_dense_bwd). With dw/db pointing
 * at SGD's momentum buffers and beta = momentum, the backward pass computes
 * v = momentum*v + g inside SGEMM, so the gradient never makes its own trip
 * through memory (see nn/model.c). */
void kiln_dense_bwd_acc(const float *x, const float *w, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu, float beta);
/* kiln_dense_bwd_acc followed by the SGD step w -= lr*dw, b -= lr*db done
 * slice by slice inside the same tasks, while each slice of dw is still in
 * cache (w is not const here). dx is computed from the old weights. */
void kiln_dense_bwd_sgd(const float *x, float *w, float *b, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu, float beta,
                        float lr);

/* ---- conv2d: x[N,H,W,C] w[KH,KW,C,OC] b[OC] -> y[N,OH,OW,OC] ---- */
typedef struct kiln_conv_shape {
    int n, h, w, c;  /* input */
    int oc, kh, kw;  /* filters */
    int stride, pad; /* same in both directions; zero padding */
    int oh, ow;      /* output, derived */
} kiln_conv_shape;
/* Fills oh/ow; returns 0, or -1 when the output would be empty. */
int kiln_conv_shape_init(kiln_conv_shape *s, int n, int h, int w, int c, int oc, int kh, int kw,
                         int stride, int pad);
void kiln_conv2d_fwd_ref(const kiln_conv_shape *s, const float *x, const float *w, const float *b,
                         float *y, int relu);
void kiln_conv2d_fwd(const kiln_conv_shape *s, const float *x, const float *w, const float *b,
                     float *y, int relu);
void kiln_conv2d_bwd_ref(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                         float *dy, float *dx, float *dw, float *db, int relu);
void kiln_conv2d_bwd(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                     float *dy, float *dx, float *dw, float *db, int relu);
/* dw = beta*dw + dW, db = beta*db + dB (see kiln_dense_bwd_acc) */
void kiln_conv2d_bwd_acc(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                         float *dy, float *dx, float *dw, float *db, int relu, float beta);

/* ---- pooling: x[N,H,W,C] -> y[N,OH,OW,C], window k, stride s, no padding ---- */
typedef struct kiln_pool_shape {
    int n, h, w, c, k, stride;
    int oh, ow; /* derived: (h - k) / stride + 1 */
} kiln_pool_shape;
int kiln_pool_shape_init(kiln_pool_shape *s, int n, int h, int w, int c, int k, int stride);
/* idx[j] = flat input index of the maximum of window j (first one on ties). */
void kiln_maxpool_fwd_ref(const kiln_pool_shape *s, const float *x, float *y, int32_t *idx);
void kiln_maxpool_fwd(const kiln_pool_shape *s, const float *x, float *y, int32_t *idx);
void kiln_maxpool_bwd_ref(const kiln_pool_shape *s, const float *dy, const int32_t *idx, float *dx);
void kiln_maxpool_bwd(const kiln_pool_shape *s, const float *dy, const int32_t *idx, float *dx);
void kiln_avgpool_fwd_ref(const kiln_pool_shape *s, const float *x, float *y);
void kiln_avgpool_fwd(const kiln_pool_shape *s, const float *x, float *y);
void kiln_avgpool_bwd_ref(const kiln_pool_shape *s, const float *dy, float *dx);
void kiln_avgpool_bwd(const kiln_pool_shape *s, const float *dy, float *dx);

/* ---- elementwise ---- */
void kiln_relu_fwd_ref(const float *x, float *y, size_t n);
void kiln_relu_fwd(const float *x, float *y, size_t n);
/* dx = dy where y > 0 else 0 (dx may alias dy) */
void kiln_relu_bwd_ref(const float *y, const float *dy, float *dx, size_t n);
void kiln_relu_bwd(const float *y, const float *dy, float *dx, size_t n);
void kiln_add_fwd_ref(const float *a, const float *b, float *y, size_t n);
void kiln_add_fwd(const float *a, const float *b, float *y, size_t n);
/* Backward of y = a + b: both inputs receive dy. da/db may be NULL. */
void kiln_add_bwd_ref(const float *dy, float *da, float *db, size_t n);
void kiln_add_bwd(const float *dy, float *da, float *db, size_t n);

/* ---- batch norm over the rows of x[M,C] (M = N*H*W in NHWC), per channel ----
 * Training: batch statistics (biased variance), saves mean and 1/sqrt(var+eps)
 * for backward, updates running stats as r = (1-momentum)*r + momentum*batch
 * (running variance uses the unbiased batch variance, like PyTorch). */
void kiln_bn_fwd_train_ref(const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *invstd, float *run_mean, float *run_var,
                           float momentum, float eps, int M, int C);
void kiln_bn_fwd_train(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                       float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                       int M, int C);
void kiln_bn_fwd_infer(const float *x, const float *gamma, const float *beta, const float *run_mean,
                       const float *run_var, float eps, float *y, int M, int C);
void kiln_bn_bwd_ref(const float *x, const float *gamma, const float *mean, const float *invstd,
                     const float *dy, float *dx, float *dgamma, float *dbeta, int M, int C);
void kiln_bn_bwd(const float *x, const float *gamma, const float *mean, const float *invstd,
                 const float *dy, float *dx, float *dgamma, float *dbeta, int M, int C);

/* ---- softmax cross-entropy over logits[B,K] with integer labels ----
 * Returns the mean loss over the B rows; if dlogits is non-NULL writes
 * d(mean loss)/d(logits) = (softmax - onehot) / B; *correct (if non-NULL)
 * gets how many rows have their label as the (first) arg-max. */
float kiln_xent_ref(const float *logits, const uint8_t *labels, int B, int K, float *dlogits,
                    int *correct);
float kiln_xent(const float *logits, const uint8_t *labels, int B, int K, float *dlogits,
                int *correct);

#endif
