/* ops/dense.c - fully connected layer, reference and fast (SGEMM) paths.
 *
 * Fast path threading: each of the pool's threads takes a slice of the
 * output columns (multiples of 16 floats = one AVX-512 vector) and runs a
 * single-threaded SGEMM (core/gemm.h) on it, then adds bias and applies ReLU to the slice
 * while it is still in its cache. No output element is written by two
 * threads, so no cross-thread reduction exists and results do not depend on
 * timing. */
#include "ops/ops.h"

#include "core/gemm.h"
#include "core/pool.h"
#include "kiln/tensor.h"

#include <string.h>

void kiln_dense_fwd_ref(const float *x, const float *w, const float *b, float *y, int B, int in,
                        int out, int relu)
{
    for (int i = 0; i < B; i++)
        for (int j = 0; j < out; j++) {
            double acc = b ? b[j] : 0.0;
            for (int k = 0; k < in; k++)
                acc += (double)x[(size_t)i * in + k] * w[(size_t)k * out + j];
            float v = (float)acc;
            y[(size_t)i * out + j] = relu && v < 0.0f ? 0.0f : v;
        }
}

void kiln_dense_bwd_ref(const float *x, const float *w, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu)
{
    if (relu)
        for (size_t i = 0; i < (size_t)B * out; i++)
            if (y[i] <= 0.0f) dy[i] = 0.0f;
    for (int j = 0; j < out; j++) {
        double acc = 0.0;
        for (int i = 0; i < B; i++)
            acc += dy[(size_t)i * out + j];
        db[j] = (float)acc;
    }
    for (int k = 0; k < in; k++)
        for (int j = 0; j < out; j++) {
            double acc = 0.0;
            for (int i = 0; i < B; i++)
                acc += (double)x[(size_t)i * in + k] * dy[(size_t)i * out + j];
            dw[(size_t)k * out + j] = (float)acc;
        }
    if (dx)
        for (int i = 0; i < B; i++)
            for (int k = 0; k < in; k++) {
                double acc = 0.0;
                for (int j = 0; j < out; j++)
                    acc += (double)dy[(size_t)i * out + j] * w[(size_t)k * out + j];
                dx[(size_t)i * in + k] = (float)acc;
            }
}

typedef struct dense_ctx {
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    int B, in, out, relu, parts;
    float beta;
    float *uw, *ub; /* if set: SGD step on these with lr after the gradient */
    float lr;
} dense_ctx;

/* Column slices of at least this many floats per thread; below it the
 * thread hand-off costs more than it saves. */
#define MIN_COLS 64

static int parts_for(int cols, int rows)
{
    int t = kiln_get_threads();
    while (t > 1 && (cols / t < MIN_COLS || (size_t)cols * rows < 4096))
        t--;
    return t;
}

/* The elementwise passes around the GEMMs, compiled for AVX-512 where the
 * CPU has it (KILN_HOT, core/pool.h): same operations in the same order in
 * every clone, so the bits do not depend on which one runs. Over B rows of
 * n columns with row stride ld. */
KILN_HOT static void bias_act(float *y, int B, int n, int ld, const float *b, int relu)
{
    for (int i = 0; i < B; i++) {
        float *restrict row = y + (size_t)i * ld;
        if (relu)
            for (int j = 0; j < n; j++) {
                float v = row[j] + (b ? b[j] : 0.0f);
                row[j] = v > 0.0f ? v : 0.0f;
            }
        else if (b)
            for (int j = 0; j < n; j++)
                row[j] += b[j];
    }
}

/* dy = 0 where y <= 0 (if relu), then db[j] += dy[i][j] in row order */
KILN_HOT static void mask_bias_grad(float *dy, const float *y, int B, int n, int ld, int relu,
                                    float *restrict db)
{
    for (int i = 0; i < B; i++) {
        float *restrict d = dy + (size_t)i * ld;
        if (relu) {
            const float *restrict yy = y + (size_t)i * ld;
            for (int j = 0; j < n; j++) {
                d[j] = yy[j] > 0.0f ? d[j] : 0.0f;
                db[j] += d[j];
            }
        } else {
            for (int j = 0; j < n; j++)
                db[j] += d[j];
        }
    }
}

/* w -= lr * g: the SGD step on parameters whose momentum is g */
KILN_HOT static void sgd_step(float *restrict w, const float *restrict g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

static void fwd_task(void *p, int task, int tid)
{
    dense_ctx *c = p;
    size_t c0, c1;
    kiln__split((size_t)c->out, c->parts, task, 16, &c0, &c1);
    int n = (int)(c1 - c0);
    if (n <= 0) return;
    kiln__sgemm(0, 0, c->B, n, c->in, 1.0f, c->x, c->in, c->w + c0, c->out, 0.0f, c->yo + c0,
                c->out);
    bias_act(c->yo + c0, c->B, n, c->out, c->b ? c->b + c0 : NULL, c->relu);
}

void kiln_dense_fwd(const float *x, const float *w, const float *b, float *y, int B, int in,
                    int out, int relu)
{
    dense_ctx c = {.x = x, .w = w, .b = b, .yo = y, .B = B, .in = in, .out = out, .relu = relu};
    c.parts = parts_for(out, B);
    kiln__parallel_for(c.parts, fwd_task, &c);
}

/* Stage 1, per column slice of dy: ReLU mask and bias gradient. */
static void bwd_mask_task(void *p, int task, int tid)
{
    dense_ctx *c = p;
    size_t c0, c1;
    kiln__split((size_t)c->out, c->parts, task, 16, &c0, &c1);
    int n = (int)(c1 - c0);
    if (n <= 0) return;
    float *db = c->db + c0;
    if (c->beta == 0.0f)
        memset(db, 0, sizeof(float) * (size_t)n);
    else
        for (int j = 0; j < n; j++)
            db[j] *= c->beta;
    mask_bias_grad(c->dy + c0, c->y ? c->y + c0 : NULL, c->B, n, c->out, c->relu, db);
    if (c->ub) sgd_step(c->ub + c0, db, (size_t)n, c->lr);
}

/* Stage 2, per slice [i0, i1) of the input features: the rows i0..i1 of
 * dW = x^T dy and the columns i0..i1 of dx = dy W^T. Splitting dW by rows
 * (not by columns) means each thread packs only its part of x^T, and the
 * slice is the same one the dx product needs, so one hand-off covers both:
 * measured 1.5x -> 1.8x two-thread scaling of the MLP's backward pass. */
static void bwd_wx_task(void *p, int task, int tid)
{
    dense_ctx *c = p;
    size_t i0, i1;
    kiln__split((size_t)c->in, c->parts, task, 16, &i0, &i1);
    int n = (int)(i1 - i0);
    if (n <= 0) return;
    kiln__sgemm(1, 0, n, c->out, c->B, 1.0f, c->x + i0, c->in, c->dy, c->out, c->beta,
                c->dw + i0 * (size_t)c->out, c->out);
    if (c->dx)
        kiln__sgemm(0, 1, c->B, n, c->out, 1.0f, c->dy, c->out, c->w + i0 * (size_t)c->out, c->out,
                    0.0f, c->dx + i0, c->in);
    if (c->uw) /* rows i0..i1 of w: only this task reads or writes them */
        sgd_step(c->uw + i0 * (size_t)c->out, c->dw + i0 * (size_t)c->out, (size_t)n * c->out,
                 c->lr);
}

void kiln_dense_bwd(const float *x, const float *w, const float *y, float *dy, float *dx, float *dw,
                    float *db, int B, int in, int out, int relu)
{
    kiln_dense_bwd_acc(x, w, y, dy, dx, dw, db, B, in, out, relu, 0.0f);
}

/* The backward pass both public entry points share. With uw/ub set, the SGD
 * step on them is done inside the weight-gradient tasks, while those rows are
 * still in cache. */
static void dense_bwd(const float *x, const float *w, float *uw, float *ub, const float *y,
                      float *dy, float *dx, float *dw, float *db, int B, int in, int out, int relu,
                      float beta, float lr)
{
    dense_ctx c = {.x = x,
                   .w = w,
                   .y = y,
                   .dy = dy,
                   .dx = dx,
                   .dw = dw,
                   .db = db,
                   .B = B,
                   .in = in,
                   .out = out,
                   .relu = relu,
                   .beta = beta,
                   .uw = uw,
                   .ub = ub,
                   .lr = lr};
    c.parts = (size_t)B * out < 32768 ? 1 : kiln_get_threads();
    kiln__parallel_for(c.parts, bwd_mask_task, &c);
    c.parts = parts_for(in, out);
    kiln__parallel_for(c.parts, bwd_wx_task, &c);
}

void kiln_dense_bwd_acc(const float *x, const float *w, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu, float beta)
{
    dense_bwd(x, w, NULL, NULL, y, dy, dx, dw, db, B, in, out, relu, beta, 0.0f);
}

void kiln_dense_bwd_sgd(const float *x, float *w, float *b, const float *y, float *dy, float *dx,
                        float *dw, float *db, int B, int in, int out, int relu, float beta,
                        float lr)
{
    dense_bwd(x, w, w, b, y, dy, dx, dw, db, B, in, out, relu, beta, lr);
}
