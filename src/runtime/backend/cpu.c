/* backend/cpu.c - the backend table on the CPU ops and host memory (see
 * backend/backend.h for why it exists beside the CPU's fused path). Copies
 * are memcpy, there are no graphs, and every op is the runtime's fast CPU
 * op where its contract fits, a plain loop where the table asks for more
 * (in-place ReLU and add, max-pool backward without arg-max indices, int32
 * labels).
 *
 * Mixed precision (set_precision) is the reference of backend.h's rule:
 * the GEMM and convolution inputs are rounded into copies, and the table's
 * own fp32 op (fast or reference) multiplies and sums those in fp32. */
#include "backend/backend.h"

#include "kiln/tensor.h"
#include "optim/update.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A table's fp32 GEMM ops, which its mixed-precision entries run on
 * rounded copies. */
typedef struct fp32_ops {
    int (*dense_fwd)(kiln__dev *d, const float *x, const float *w, const float *b, float *y, int B,
                     int in, int out, int relu);
    int (*dense_bwd)(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                     float *dx, float *dw, float *db, int B, int in, int out, int relu, float beta);
    int (*conv_fwd)(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                    const float *b, float *y, int relu);
    int (*conv_bwd)(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                    const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                    float beta);
} fp32_ops;

enum { LP_X, LP_W, LP_DY, LP_DB, LP_N }; /* the rounded copies (and a bias gradient) */

struct kiln__dev {
    const fp32_ops *ops;
    int lowp; /* KILN__LOWP_* */
    float *lp[LP_N];
    size_t lp_n[LP_N];
    float *scratch; /* bn_bwd's dx when the caller needs none; xent's labels */
    size_t scratch_n;
    float *db; /* conv_bwd's bias gradient when the caller needs none */
    size_t db_n;
    char err[256];
};

static int fail(kiln__dev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(kiln__dev *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* at least n floats of scratch, NULL (error set) when out of memory */
static float *scratch(kiln__dev *d, size_t n)
{
    if (n <= d->scratch_n) return d->scratch;
    kiln_ffree(d->scratch);
    d->scratch_n = 0;
    if (!(d->scratch = kiln_falloc(n))) {
        fail(d, "cpu: out of memory for %zu floats of scratch", n);
        return NULL;
    }
    d->scratch_n = n;
    return d->scratch;
}

static int open_with(const fp32_ops *ops, int index, kiln__dev **out, char *err, size_t errlen)
{
    *out = NULL;
    if (index != 0) {
        snprintf(err, errlen, "/cpu:%d does not exist: the CPU is /cpu:0", index);
        return -1;
    }
    if (!(*out = calloc(1, sizeof **out))) {
        snprintf(err, errlen, "cpu: out of memory");
        return -1;
    }
    (*out)->ops = ops;
    return 0;
}

static void cpu_close(kiln__dev *d)
{
    if (!d) return;
    kiln_ffree(d->db);
    kiln_ffree(d->scratch);
    for (int i = 0; i < LP_N; i++)
        kiln_ffree(d->lp[i]);
    free(d);
}

static const char *cpu_error(const kiln__dev *d)
{
    return d->err;
}

static void cpu_describe(kiln__dev *d, char *buf, size_t len)
{
    (void)d;
    snprintf(buf, len, "CPU (the backend table on the CPU ops)");
}

static int cpu_set_tf32(kiln__dev *d, int on)
{
    (void)d;
    (void)on; /* fp32 is fp32 on the CPU */
    return 0;
}

static int cpu_set_precision(kiln__dev *d, int lowp)
{
    if (lowp != KILN__LOWP_OFF && lowp != KILN__LOWP_BF16 && lowp != KILN__LOWP_FP16)
        return fail(d, "cpu: unknown low-precision format %d", lowp);
    d->lowp = lowp;
    return 0;
}

/* the CPU has one batch norm: a cuDNN choice is refused, not ignored */
static int cpu_set_option(kiln__dev *d, int opt, int val)
{
    if ((opt == KILN__OPT_BN_CUDNN || opt == KILN__OPT_CONV_NCHW || opt == KILN__OPT_DENSE_LT) &&
        val == 0)
        return 0;
    return fail(d,
                "cpu: no option %d=%d here (cuDNN's batch norm, NCHW convolutions and cuBLASLt "
                "are the CUDA backend's)",
                opt, val);
}

/* bn_fwd_train_add_relu's tail: the add and relu_fwd's arithmetic in turn */
static void add_relu(const float *res, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float t = res ? y[i] + res[i] : y[i];
        y[i] = t > 0.0f ? t : 0.0f;
    }
}

static int cpu_sync(kiln__dev *d)
{
    (void)d;
    return 0;
}

static int cpu_alloc(kiln__dev *d, size_t bytes, void **out)
{
    size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
    float *p = kiln_falloc(n ? n : 1);
    *out = NULL;
    if (!p) return fail(d, "cpu: out of memory for %zu bytes", bytes);
    memset(p, 0, n * sizeof(float));
    *out = p;
    return 0;
}

static void cpu_free(kiln__dev *d, void *p)
{
    (void)d;
    kiln_ffree(p);
}

static int cpu_copy(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

/* ---- ops ---- */

static int cpu_dense_fwd(kiln__dev *d, const float *x, const float *w, const float *b, float *y,
                         int B, int in, int out, int relu)
{
    (void)d;
    kiln_dense_fwd(x, w, b, y, B, in, out, relu);
    return 0;
}

static int cpu_dense_bwd(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                         float *dx, float *dw, float *db, int B, int in, int out, int relu,
                         float beta)
{
    (void)d;
    kiln_dense_bwd_acc(x, w, y, dy, dx, dw, db, B, in, out, relu, beta);
    return 0;
}

static int cpu_conv_fwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                        const float *b, float *y, int relu)
{
    (void)d;
    kiln_conv2d_fwd(s, x, w, b, y, relu);
    return 0;
}

static int cpu_conv_bwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                        const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                        float beta)
{
    if (!db) { /* the CPU op always sums the bias gradient */
        if ((size_t)s->oc > d->db_n) {
            kiln_ffree(d->db);
            d->db_n = 0;
            if (!(d->db = kiln_falloc((size_t)s->oc)))
                return fail(d, "cpu: out of memory for a bias gradient");
            memset(d->db, 0, sizeof(float) * (size_t)s->oc);
            d->db_n = (size_t)s->oc;
        }
        db = d->db; /* its content is never read back; dw still takes beta */
    }
    kiln_conv2d_bwd_acc(s, x, w, y, dy, dx, dw, db, relu, beta);
    return 0;
}

/* Window j of the pool: its first input index, for each output position. */
#define POOL_LOOP(s, body)                                                                         \
    for (int n_ = 0; n_ < (s)->n; n_++)                                                            \
        for (int oy_ = 0; oy_ < (s)->oh; oy_++)                                                    \
            for (int ox_ = 0; ox_ < (s)->ow; ox_++)                                                \
                for (int c_ = 0; c_ < (s)->c; c_++) {                                              \
                    size_t o_ = (((size_t)n_ * (s)->oh + oy_) * (s)->ow + ox_) * (s)->c + c_;      \
                    size_t i0_ = (((size_t)n_ * (s)->h + (size_t)oy_ * (s)->stride) * (s)->w +     \
                                  (size_t)ox_ * (s)->stride) *                                     \
                                     (s)->c +                                                      \
                                 c_;                                                               \
                    body                                                                           \
                }
#define AT(s, i0, ky, kx) ((i0) + ((size_t)(ky) * (s)->w + (size_t)(kx)) * (s)->c)

static int cpu_maxpool_fwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y)
{
    (void)d;
    POOL_LOOP(s, {
        float m = x[i0_];
        for (int ky = 0; ky < s->k; ky++)
            for (int kx = 0; kx < s->k; kx++)
                if (x[AT(s, i0_, ky, kx)] > m) m = x[AT(s, i0_, ky, kx)];
        y[o_] = m;
    })
    return 0;
}

static int cpu_maxpool_bwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                           const float *dy, float *dx)
{
    (void)d;
    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * s->c);
    POOL_LOOP(s, {
        int done = 0;
        for (int ky = 0; ky < s->k && !done; ky++)
            for (int kx = 0; kx < s->k && !done; kx++)
                if (x[AT(s, i0_, ky, kx)] == y[o_]) {
                    dx[AT(s, i0_, ky, kx)] += dy[o_];
                    done = 1;
                }
    })
    return 0;
}

static int cpu_avgpool_fwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y)
{
    (void)d;
    kiln_avgpool_fwd(s, x, y);
    return 0;
}

static int cpu_avgpool_bwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                           const float *dy, float *dx)
{
    (void)d;
    (void)x;
    (void)y;
    kiln_avgpool_bwd(s, dy, dx);
    return 0;
}

static int cpu_bn_fwd_train(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                            float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                            float momentum, float eps, int M, int C)
{
    (void)d;
    kiln_bn_fwd_train(x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, M, C);
    return 0;
}

static int cpu_bn_add_relu(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                           const float *res, float *y, float *mean, float *invstd, float *run_mean,
                           float *run_var, float momentum, float eps, int M, int C)
{
    (void)d;
    kiln_bn_fwd_train(x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, M, C);
    add_relu(res, y, (size_t)M * C);
    return 0;
}

static int cpu_bn_fwd_infer(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                            const float *run_mean, const float *run_var, float eps, float *y, int M,
                            int C)
{
    (void)d;
    kiln_bn_fwd_infer(x, gamma, beta, run_mean, run_var, eps, y, M, C);
    return 0;
}

static int cpu_bn_bwd(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                      const float *invstd, const float *dy, float *dx, float *dgamma, float *dbeta,
                      float eps, int M, int C)
{
    (void)eps; /* the CPU's backward uses the saved 1/sqrt(var + eps) */
    if (!dx && !(dx = scratch(d, (size_t)M * C))) return -1;
    kiln_bn_bwd(x, gamma, mean, invstd, dy, dx, dgamma, dbeta, M, C);
    return 0;
}

static int cpu_relu_bwd(kiln__dev *d, const float *y, const float *dy, float *dx, size_t n);

/* the table's relu_bwd in place, then its bn_bwd: what the fused op equals */
static int bwd_relu_with(int (*bn)(kiln__dev *, const float *, const float *, const float *,
                                   const float *, const float *, float *, float *, float *, float,
                                   int, int),
                         kiln__dev *d, const float *x, const float *gamma, const float *mean,
                         const float *invstd, const float *y, float *dy, float *dx, float *dgamma,
                         float *dbeta, float eps, int M, int C)
{
    if (cpu_relu_bwd(d, y, dy, dy, (size_t)M * C)) return -1;
    return bn(d, x, gamma, mean, invstd, dy, dx, dgamma, dbeta, eps, M, C);
}

static int cpu_bn_bwd_relu(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                           const float *invstd, const float *y, float *dy, float *dx, float *dgamma,
                           float *dbeta, float eps, int M, int C)
{
    return bwd_relu_with(cpu_bn_bwd, d, x, gamma, mean, invstd, y, dy, dx, dgamma, dbeta, eps, M,
                         C);
}

static int cpu_relu_fwd(kiln__dev *d, const float *x, float *y, size_t n)
{
    (void)d;
    for (size_t i = 0; i < n; i++) /* kiln_relu_fwd's arithmetic; in place allowed */
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}

static int cpu_relu_bwd(kiln__dev *d, const float *y, const float *dy, float *dx, size_t n)
{
    (void)d;
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return 0;
}

static int cpu_add(kiln__dev *d, const float *a, const float *b, float *y, size_t n)
{
    (void)d;
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
    return 0;
}

static int cpu_pad2d(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p)
{
    (void)d;
    size_t sp = (size_t)s + 2 * (size_t)p, row = sizeof(float) * (size_t)s * c;
    memset(dst, 0, sizeof(float) * (size_t)n * sp * sp * c);
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t y = 0; y < (size_t)s; y++)
            memcpy(dst + ((i * sp + y + p) * sp + p) * c, src + ((i * s + y) * s) * c, row);
    return 0;
}

static int cpu_crop2d(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p)
{
    (void)d;
    size_t sp = (size_t)s + 2 * (size_t)p, row = sizeof(float) * (size_t)s * c;
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t y = 0; y < (size_t)s; y++)
            memcpy(dst + ((i * s + y) * s) * c, src + ((i * sp + y + p) * sp + p) * c, row);
    return 0;
}

/* Labels of up to 256 classes go through the CPU's own kernel (uint8
 * labels); a label it cannot hold makes the loss NaN, as on the GPU. */
typedef float (*xent_fn)(const float *logits, const uint8_t *labels, int B, int K, float *dlogits,
                         int *correct);

/* The table's cross-entropy on one of the CPU's (fast or reference) */
static int xent_with(xent_fn fn, kiln__dev *d, const float *logits, const int32_t *labels, int B,
                     int K, float *dlogits, float grad_scale, float *loss, int *correct)
{
    uint8_t *y = (uint8_t *)scratch(d, ((size_t)B + 3) / 4);
    int bad = 0, ok = 0;
    float l;
    if (!y) return -1;
    if (K > 256) return fail(d, "cpu: cross-entropy over %d classes: at most 256", K);
    for (int i = 0; i < B; i++) {
        bad |= labels[i] < 0 || labels[i] >= K;
        y[i] = bad ? 0 : (uint8_t)labels[i];
    }
    l = fn(logits, y, B, K, dlogits, &ok);
    if (dlogits && grad_scale != 1.0f)
        for (size_t i = 0; i < (size_t)B * K; i++)
            dlogits[i] *= grad_scale;
    if (loss) *loss = bad ? NAN : l;
    if (correct) *correct = ok;
    return 0;
}

static int cpu_xent(kiln__dev *d, const float *logits, const int32_t *labels, int B, int K,
                    float *dlogits, float grad_scale, float *loss, int *correct)
{
    return xent_with(kiln_xent, d, logits, labels, B, K, dlogits, grad_scale, loss, correct);
}

static int cpu_sgd(kiln__dev *d, float *p, const float *g, float *v, size_t n, const float *hyper)
{
    (void)d;
    kiln_sgd_update_ref(p, g, v, n, hyper[KILN__H_LR], hyper[KILN__H_MOMENTUM]);
    return 0;
}

/* kiln_adam_update_ref's loop with its two constants taken from hyper */
static int cpu_adam(kiln__dev *d, float *p, const float *g, float *m, float *v, size_t n,
                    const float *hyper)
{
    (void)d;
    float step = hyper[KILN__H_ASTEP], sbc2 = hyper[KILN__H_ASBC2], b1 = hyper[KILN__H_B1],
          b2 = hyper[KILN__H_B2], eps = hyper[KILN__H_EPS];
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
    }
    return 0;
}

/* ---- mixed precision (backend.h): the reference ---- */

/* bf16: the upper 16 bits, rounded to nearest even (the carry of a mantissa
 * that rounds up goes into the exponent, up to inf, as it should) */
static float round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x; /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* fp16: 10 mantissa bits for normals (2^-14 and up), multiples of 2^-24
 * below (subnormals, rintf: nearest even in the default rounding mode),
 * inf beyond 65504 (65520, the midpoint to 2^16, ties to even: inf) */
static float round_fp16(float x)
{
    float a = fabsf(x), r;
    uint32_t u;
    if (isnan(x)) return x;
    if (a >= 65520.0f) return copysignf(INFINITY, x); /* inf too */
    if (a < 0x1p-14f) return rintf(x * 0x1p24f) * 0x1p-24f;
    memcpy(&u, &x, sizeof u);
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
    memcpy(&r, &u, sizeof r);
    return r;
}

void kiln__round_lowp(int lowp, const float *src, float *dst, size_t n)
{
    if (lowp == KILN__LOWP_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = round_bf16(src[i]);
    else if (lowp == KILN__LOWP_FP16)
        for (size_t i = 0; i < n; i++)
            dst[i] = round_fp16(src[i]);
    else if (dst != src)
        memmove(dst, src, sizeof(float) * n);
}

/* copy `which` of n floats (grown as needed), src rounded into it */
static float *rounded(kiln__dev *d, int which, const float *src, size_t n)
{
    if (n > d->lp_n[which]) {
        kiln_ffree(d->lp[which]);
        d->lp_n[which] = 0;
        if (!(d->lp[which] = kiln_falloc(n))) {
            fail(d, "cpu: out of memory for %zu floats of rounded inputs", n);
            return NULL;
        }
        d->lp_n[which] = n;
    }
    if (src) kiln__round_lowp(d->lowp, src, d->lp[which], n);
    return d->lp[which];
}

/* With relu: dy = 0 where y <= 0, in place (the table's contract). Then
 * db = beta*db + the column sums of dy[M, N] (db may be NULL), in double:
 * the bias gradient of the fp32 gradient. */
static void mask_colsum(float *dy, const float *y, int relu, float *db, float beta, size_t M,
                        size_t N)
{
    if (relu)
        for (size_t i = 0; i < M * N; i++)
            dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    if (!db) return;
    for (size_t j = 0; j < N; j++) {
        double acc = 0.0;
        for (size_t i = 0; i < M; i++)
            acc += dy[i * N + j];
        db[j] = (beta != 0.0f ? beta * db[j] : 0.0f) + (float)acc;
    }
}

static int lp_dense_fwd(kiln__dev *d, const float *x, const float *w, const float *b, float *y,
                        int B, int in, int out, int relu)
{
    const float *xr, *wr;
    if (!d->lowp) return d->ops->dense_fwd(d, x, w, b, y, B, in, out, relu);
    if (!(xr = rounded(d, LP_X, x, (size_t)B * in)) ||
        !(wr = rounded(d, LP_W, w, (size_t)in * out)))
        return -1;
    return d->ops->dense_fwd(d, xr, wr, b, y, B, in, out, relu);
}

static int lp_dense_bwd(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                        float *dx, float *dw, float *db, int B, int in, int out, int relu,
                        float beta)
{
    float *xr, *wr, *dyr, *dbr;
    if (!d->lowp) return d->ops->dense_bwd(d, x, w, y, dy, dx, dw, db, B, in, out, relu, beta);
    mask_colsum(dy, y, relu, db, beta, (size_t)B, (size_t)out);
    if (!(xr = rounded(d, LP_X, x, (size_t)B * in)) ||
        !(wr = rounded(d, LP_W, w, (size_t)in * out)) ||
        !(dyr = rounded(d, LP_DY, dy, (size_t)B * out)) || !(dbr = rounded(d, LP_DB, NULL, out)))
        return -1;
    /* the op's own bias gradient (of the rounded dy) goes to dbr, unread */
    return d->ops->dense_bwd(d, xr, wr, y, dyr, dx, dw, dbr, B, in, out, 0, beta);
}

static int lp_conv_fwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                       const float *b, float *y, int relu)
{
    const float *xr, *wr;
    if (!d->lowp) return d->ops->conv_fwd(d, s, x, w, b, y, relu);
    if (!(xr = rounded(d, LP_X, x, (size_t)s->n * s->h * s->w * s->c)) ||
        !(wr = rounded(d, LP_W, w, (size_t)s->kh * s->kw * s->c * s->oc)))
        return -1;
    return d->ops->conv_fwd(d, s, xr, wr, b, y, relu);
}

static int lp_conv_bwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                       const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                       float beta)
{
    size_t M = (size_t)s->n * s->oh * s->ow;
    float *xr, *wr, *dyr;
    if (!d->lowp) return d->ops->conv_bwd(d, s, x, w, y, dy, dx, dw, db, relu, beta);
    mask_colsum(dy, y, relu, db, beta, M, (size_t)s->oc);
    if (!(xr = rounded(d, LP_X, x, (size_t)s->n * s->h * s->w * s->c)) ||
        !(wr = rounded(d, LP_W, w, (size_t)s->kh * s->kw * s->c * s->oc)) ||
        !(dyr = rounded(d, LP_DY, dy, M * s->oc)))
        return -1;
    return d->ops->conv_bwd(d, s, xr, wr, y, dyr, dx, dw, NULL, 0, beta);
}

static int cpu_scale_check(kiln__dev *d, float *g, size_t n, float factor, int *found)
{
    (void)d;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float v = g[i] * factor;
        g[i] = v;
        bad |= !isfinite(v);
    }
    if (bad) *found = 1;
    return 0;
}

/* ---- the reference table: the _ref ops (double sums, plain loops) ----
 * What the GPU's results are compared against in tests/cuda: the fast CPU
 * ops round differently from both, and where a computation amplifies
 * rounding (batch norm over few rows, many layers deep) the fast CPU path
 * is no closer to the truth than the GPU. */

static int ref_dense_fwd(kiln__dev *d, const float *x, const float *w, const float *b, float *y,
                         int B, int in, int out, int relu)
{
    (void)d;
    kiln_dense_fwd_ref(x, w, b, y, B, in, out, relu);
    return 0;
}

static int ref_dense_bwd(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                         float *dx, float *dw, float *db, int B, int in, int out, int relu,
                         float beta)
{
    float *dbb = db;
    /* the device path overwrites gradients (beta 0); the references do too */
    if (beta != 0.0f) return fail(d, "cpu-ref: dense backward accumulates only with beta 0");
    if (!dbb && !(dbb = scratch(d, (size_t)out))) return -1;
    kiln_dense_bwd_ref(x, w, y, dy, dx, dw, dbb, B, in, out, relu);
    return 0;
}

static int ref_conv_fwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                        const float *b, float *y, int relu)
{
    (void)d;
    kiln_conv2d_fwd_ref(s, x, w, b, y, relu);
    return 0;
}

static int ref_conv_bwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                        const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                        float beta)
{
    float *dbb = db, *dxx = dx;
    if (beta != 0.0f) return fail(d, "cpu-ref: conv backward accumulates only with beta 0");
    if (!dbb && !(dbb = scratch(d, (size_t)s->oc))) return -1;
    /* the reference always writes dx: into memory of its own when the
     * caller needs none */
    if (!dxx && !(dxx = kiln_falloc((size_t)s->n * s->h * s->w * s->c)))
        return fail(d, "cpu-ref: out of memory");
    kiln_conv2d_bwd_ref(s, x, w, y, dy, dxx, dw, dbb, relu);
    if (!dx) kiln_ffree(dxx);
    return 0;
}

static int ref_avgpool_fwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y)
{
    (void)d;
    kiln_avgpool_fwd_ref(s, x, y);
    return 0;
}

static int ref_avgpool_bwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                           const float *dy, float *dx)
{
    (void)d;
    (void)x;
    (void)y;
    kiln_avgpool_bwd_ref(s, dy, dx);
    return 0;
}

static int ref_bn_fwd_train(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                            float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                            float momentum, float eps, int M, int C)
{
    (void)d;
    kiln_bn_fwd_train_ref(x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, M, C);
    return 0;
}

static int ref_bn_add_relu(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                           const float *res, float *y, float *mean, float *invstd, float *run_mean,
                           float *run_var, float momentum, float eps, int M, int C)
{
    (void)d;
    kiln_bn_fwd_train_ref(x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, M, C);
    add_relu(res, y, (size_t)M * C);
    return 0;
}

static int ref_bn_bwd(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                      const float *invstd, const float *dy, float *dx, float *dgamma, float *dbeta,
                      float eps, int M, int C);

static int ref_bn_bwd_relu(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                           const float *invstd, const float *y, float *dy, float *dx, float *dgamma,
                           float *dbeta, float eps, int M, int C)
{
    return bwd_relu_with(ref_bn_bwd, d, x, gamma, mean, invstd, y, dy, dx, dgamma, dbeta, eps, M,
                         C);
}

static int ref_bn_bwd(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                      const float *invstd, const float *dy, float *dx, float *dgamma, float *dbeta,
                      float eps, int M, int C)
{
    (void)eps;
    if (!dx && !(dx = scratch(d, (size_t)M * C))) return -1;
    kiln_bn_bwd_ref(x, gamma, mean, invstd, dy, dx, dgamma, dbeta, M, C);
    return 0;
}

static int ref_xent(kiln__dev *d, const float *logits, const int32_t *labels, int B, int K,
                    float *dlogits, float grad_scale, float *loss, int *correct)
{
    return xent_with(kiln_xent_ref, d, logits, labels, B, K, dlogits, grad_scale, loss, correct);
}

static void ref_describe(kiln__dev *d, char *buf, size_t len)
{
    (void)d;
    snprintf(buf, len, "CPU (the backend table on the reference ops)");
}

static const fp32_ops cpu_ops = {cpu_dense_fwd, cpu_dense_bwd, cpu_conv_fwd, cpu_conv_bwd};
static const fp32_ops ref_ops = {ref_dense_fwd, ref_dense_bwd, ref_conv_fwd, ref_conv_bwd};

static int cpu_open(int index, kiln__dev **out, char *err, size_t errlen)
{
    return open_with(&cpu_ops, index, out, err, errlen);
}

static int ref_open(int index, kiln__dev **out, char *err, size_t errlen)
{
    return open_with(&ref_ops, index, out, err, errlen);
}

/* Events: the CPU table runs every call before it returns, so each mark is
 * complete when recorded and there is nothing to wait for; an event is a
 * byte of memory so that its create and free are real. */
static int cpu_event_create(kiln__dev *d, void **ev)
{
    *ev = malloc(1);
    return *ev ? 0 : fail(d, "cpu: out of memory for an event");
}

static void cpu_event_free(kiln__dev *d, void *ev)
{
    (void)d;
    free(ev);
}

static int cpu_event_mark(kiln__dev *d, void *ev, int stream)
{
    if (!ev) return fail(d, "cpu: no event");
    if (stream != KILN__STREAM_COMPUTE && stream != KILN__STREAM_COPY)
        return fail(d, "cpu: no stream %d", stream);
    return 0;
}

static int cpu_event_sync(kiln__dev *d, void *ev)
{
    return ev ? 0 : fail(d, "cpu: no event");
}

#define CPU_TABLE_COMMON                                                                           \
    .abi = KILN__BACKEND_ABI, .close = cpu_close, .error = cpu_error, .set_tf32 = cpu_set_tf32,    \
    .set_precision = cpu_set_precision, .set_option = cpu_set_option,                              \
    .scale_check = cpu_scale_check, .dense_fwd = lp_dense_fwd, .dense_bwd = lp_dense_bwd,          \
    .conv_fwd = lp_conv_fwd, .conv_bwd = lp_conv_bwd, .sync = cpu_sync, .alloc = cpu_alloc,        \
    .free = cpu_free, .host_alloc = cpu_alloc, .host_free = cpu_free, .upload = cpu_copy,          \
    .download = cpu_copy, .upload_async = cpu_copy, .upload_ordered = cpu_copy,                    \
    .download_async = cpu_copy, .copy = cpu_copy, .maxpool_fwd = cpu_maxpool_fwd,                  \
    .maxpool_bwd = cpu_maxpool_bwd, .bn_fwd_infer = cpu_bn_fwd_infer, .relu_fwd = cpu_relu_fwd,    \
    .relu_bwd = cpu_relu_bwd, .add = cpu_add, .pad2d = cpu_pad2d, .crop2d = cpu_crop2d,            \
    .sgd = cpu_sgd, .adam = cpu_adam, .event_create = cpu_event_create,                            \
    .event_free = cpu_event_free, .event_record = cpu_event_mark, .event_wait = cpu_event_mark,    \
    .event_sync = cpu_event_sync, .upload_staged = cpu_copy

const kiln__backend kiln__backend_cpu_ref = {
    CPU_TABLE_COMMON,
    .name = "cpu-ref",
    .open = ref_open,
    .describe = ref_describe,
    .avgpool_fwd = ref_avgpool_fwd,
    .avgpool_bwd = ref_avgpool_bwd,
    .bn_fwd_train = ref_bn_fwd_train,
    .bn_fwd_train_add_relu = ref_bn_add_relu,
    .bn_bwd = ref_bn_bwd,
    .bn_bwd_relu = ref_bn_bwd_relu,
    .xent = ref_xent,
};

const kiln__backend kiln__backend_cpu = {
    CPU_TABLE_COMMON,
    .name = "cpu",
    .open = cpu_open,
    .describe = cpu_describe,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .bn_fwd_train = cpu_bn_fwd_train,
    .bn_fwd_train_add_relu = cpu_bn_add_relu,
    .bn_bwd = cpu_bn_bwd,
    .bn_bwd_relu = cpu_bn_bwd_relu,
    .xent = cpu_xent,
};
