/* backend/cpu.c - the backend table on the CPU ops and host memory (see
 * backend/backend.h for why it exists beside the CPU's fused path). Copies
 * are memcpy, there are no graphs, and every op is the runtime's fast CPU
 * op where its contract fits, a plain loop where the table asks for more
 * (in-place ReLU and add, max-pool backward without arg-max indices, int32
 * labels). */
#include "backend/backend.h"

#include "kiln/tensor.h"
#include "optim/update.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln__dev {
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

static int cpu_open(int index, kiln__dev **out, char *err, size_t errlen)
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
    return 0;
}

static void cpu_close(kiln__dev *d)
{
    if (!d) return;
    kiln_ffree(d->db);
    kiln_ffree(d->scratch);
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

#define CPU_TABLE_COMMON                                                                           \
    .abi = KILN__BACKEND_ABI, .open = cpu_open, .close = cpu_close, .error = cpu_error,            \
    .set_tf32 = cpu_set_tf32, .sync = cpu_sync, .alloc = cpu_alloc, .free = cpu_free,              \
    .host_alloc = cpu_alloc, .host_free = cpu_free, .upload = cpu_copy, .download = cpu_copy,      \
    .upload_async = cpu_copy, .upload_ordered = cpu_copy, .download_async = cpu_copy,              \
    .maxpool_fwd = cpu_maxpool_fwd, .maxpool_bwd = cpu_maxpool_bwd,                                \
    .bn_fwd_infer = cpu_bn_fwd_infer, .relu_fwd = cpu_relu_fwd, .relu_bwd = cpu_relu_bwd,          \
    .add = cpu_add, .pad2d = cpu_pad2d, .crop2d = cpu_crop2d, .sgd = cpu_sgd, .adam = cpu_adam

const kiln__backend kiln__backend_cpu_ref = {
    CPU_TABLE_COMMON,
    .name = "cpu-ref",
    .describe = ref_describe,
    .dense_fwd = ref_dense_fwd,
    .dense_bwd = ref_dense_bwd,
    .conv_fwd = ref_conv_fwd,
    .conv_bwd = ref_conv_bwd,
    .avgpool_fwd = ref_avgpool_fwd,
    .avgpool_bwd = ref_avgpool_bwd,
    .bn_fwd_train = ref_bn_fwd_train,
    .bn_bwd = ref_bn_bwd,
    .xent = ref_xent,
};

const kiln__backend kiln__backend_cpu = {
    CPU_TABLE_COMMON,
    .name = "cpu",
    .describe = cpu_describe,
    .dense_fwd = cpu_dense_fwd,
    .dense_bwd = cpu_dense_bwd,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd = cpu_conv_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .bn_fwd_train = cpu_bn_fwd_train,
    .bn_bwd = cpu_bn_bwd,
    .xent = cpu_xent,
};
