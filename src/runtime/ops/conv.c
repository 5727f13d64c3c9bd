/* ops/conv.c - 2-D convolution (NHWC, HWIO kernels), reference and fast.
 *
 * Fast path: im2col + SGEMM, in chunks of a few images so the column matrix
 * (rows = output pixels, cols = KH*KW*C) stays in the core's L2 cache instead
 * of streaming a whole batch's worth (80 MB for the reference CNN's second
 * conv) through memory. With NHWC every im2col row is KH*KW contiguous runs
 * of C floats, and the GEMM output is directly the NHWC output chunk, to
 * which bias and ReLU are applied while it is hot.
 *
 * Threads split the batch by images. Weight and bias gradients are summed
 * per task into private buffers and added in task order at the end, so the
 * result is the same on every run with the same thread count.
 *
 * Where oneDNN has a direct convolution kernel for the shape on this CPU,
 * each task hands its images to that instead (ops/conv_dnnl.c); the split,
 * the ReLU mask, the bias gradient and the task-ordered sums stay here. */
#include "ops/ops.h"

#include "core/gemm.h"
#include "ops/conv_dnnl.h"
#include "core/pool.h"
#include "kiln/tensor.h"

#include <stdlib.h>
#include <string.h>

int kiln_conv_shape_init(kiln_conv_shape *s, int n, int h, int w, int c, int oc, int kh, int kw,
                         int stride, int pad)
{
    *s = (kiln_conv_shape){
        .n = n, .h = h, .w = w, .c = c, .oc = oc, .kh = kh, .kw = kw, .stride = stride, .pad = pad};
    if (stride < 1 || n < 1 || c < 1 || oc < 1 || kh < 1 || kw < 1 || pad < 0) return -1;
    s->oh = (h + 2 * pad - kh) / stride + 1;
    s->ow = (w + 2 * pad - kw) / stride + 1;
    return s->oh > 0 && s->ow > 0 ? 0 : -1;
}

#define XAT(S_, P_, N_, Y_, X_, C_)                                                                \
    (P_)[(((size_t)(N_) * (S_)->h + (Y_)) * (S_)->w + (X_)) * (S_)->c + (C_)]

void kiln_conv2d_fwd_ref(const kiln_conv_shape *s, const float *x, const float *w, const float *b,
                         float *y, int relu)
{
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int o = 0; o < s->oc; o++) {
                    double acc = b ? b[o] : 0.0;
                    for (int ky = 0; ky < s->kh; ky++)
                        for (int kx = 0; kx < s->kw; kx++) {
                            int iy = oy * s->stride - s->pad + ky,
                                ix = ox * s->stride - s->pad + kx;
                            if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                            for (int c = 0; c < s->c; c++)
                                acc += (double)XAT(s, x, n, iy, ix, c) *
                                       w[(((size_t)ky * s->kw + kx) * s->c + c) * s->oc + o];
                        }
                    float v = (float)acc;
                    y[(((size_t)n * s->oh + oy) * s->ow + ox) * s->oc + o] =
                        relu && v < 0.0f ? 0.0f : v;
                }
}

void kiln_conv2d_bwd_ref(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                         float *dy, float *dx, float *dw, float *db, int relu)
{
    size_t ny = (size_t)s->n * s->oh * s->ow * s->oc;
    size_t kk = (size_t)s->kh * s->kw * s->c * s->oc;
    if (relu)
        for (size_t i = 0; i < ny; i++)
            if (y[i] <= 0.0f) dy[i] = 0.0f;
    for (int o = 0; o < s->oc; o++) {
        double acc = 0.0;
        for (size_t i = (size_t)o; i < ny; i += (size_t)s->oc)
            acc += dy[i];
        db[o] = (float)acc;
    }
    /* dw in double, then rounded once */
    for (size_t i = 0; i < kk; i++) {
        int o = (int)(i % s->oc);
        size_t r = i / s->oc;
        int c = (int)(r % s->c), kx = (int)(r / s->c % s->kw), ky = (int)(r / s->c / s->kw);
        double acc = 0.0;
        for (int n = 0; n < s->n; n++)
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++) {
                    int iy = oy * s->stride - s->pad + ky, ix = ox * s->stride - s->pad + kx;
                    if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                    acc += (double)XAT(s, x, n, iy, ix, c) *
                           dy[(((size_t)n * s->oh + oy) * s->ow + ox) * s->oc + o];
                }
        dw[i] = (float)acc;
    }
    if (!dx) return;
    for (int n = 0; n < s->n; n++)
        for (int iy = 0; iy < s->h; iy++)
            for (int ix = 0; ix < s->w; ix++)
                for (int c = 0; c < s->c; c++) {
                    double acc = 0.0;
                    for (int ky = 0; ky < s->kh; ky++)
                        for (int kx = 0; kx < s->kw; kx++) {
                            int ty = iy + s->pad - ky, tx = ix + s->pad - kx;
                            if (ty < 0 || tx < 0 || ty % s->stride || tx % s->stride) continue;
                            int oy = ty / s->stride, ox = tx / s->stride;
                            if (oy >= s->oh || ox >= s->ow) continue;
                            for (int o = 0; o < s->oc; o++)
                                acc += (double)
                                           dy[(((size_t)n * s->oh + oy) * s->ow + ox) * s->oc + o] *
                                       w[(((size_t)ky * s->kw + kx) * s->c + c) * s->oc + o];
                        }
                    XAT(s, dx, n, iy, ix, c) = (float)acc;
                }
}

/* ---- fast path ---- */

/* One image of the reference CNN's second conv is 627 KB of columns; chunks
 * of about 1 MB measured best here (bigger ones spill the 2 MB L2). */
#define L2_CHUNK_BYTES ((size_t)1 << 20)

static int chunk_images(const kiln_conv_shape *s)
{
    size_t per = (size_t)s->oh * s->ow * s->kh * s->kw * s->c * sizeof(float);
    size_t k = L2_CHUNK_BYTES / (per ? per : 1);
    return k < 1 ? 1 : (int)k;
}

/* Copies of a few floats: memcpy calls cost more than the data for the
 * 1-channel first layer (runs of 5 floats). */
static inline void copy_run(float *restrict d, const float *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

/* col[p][(ky*KW + kx)*C + c] for the output pixels p of images [n0, n0+cnt). */
KILN_HOT static void im2col(const kiln_conv_shape *s, const float *x, int n0, int cnt, float *col)
{
    size_t K = (size_t)s->kh * s->kw * s->c, run = (size_t)s->c;
    for (int n = n0; n < n0 + cnt; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *row = col + ((((size_t)(n - n0) * s->oh) + oy) * s->ow + ox) * K;
                for (int ky = 0; ky < s->kh; ky++) {
                    int iy = oy * s->stride - s->pad + ky;
                    float *dst = row + (size_t)ky * s->kw * run;
                    if (iy < 0 || iy >= s->h) {
                        memset(dst, 0, sizeof(float) * s->kw * run);
                        continue;
                    }
                    int ix0 = ox * s->stride - s->pad;
                    if (ix0 >= 0 && ix0 + s->kw <= s->w) { /* interior: one copy */
                        copy_run(dst, &XAT(s, x, n, iy, ix0, 0), s->kw * run);
                        continue;
                    }
                    for (int kx = 0; kx < s->kw; kx++) {
                        int ix = ix0 + kx;
                        if (ix < 0 || ix >= s->w)
                            memset(dst + kx * run, 0, sizeof(float) * run);
                        else
                            copy_run(dst + kx * run, &XAT(s, x, n, iy, ix, 0), run);
                    }
                }
            }
}

/* dx[images n0..] += col2im(dcol) */
KILN_HOT static void col2im_add(const kiln_conv_shape *s, const float *dcol, int n0, int cnt,
                                float *dx)
{
    size_t K = (size_t)s->kh * s->kw * s->c;
    int C = s->c;
    for (int n = n0; n < n0 + cnt; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const float *row = dcol + ((((size_t)(n - n0) * s->oh) + oy) * s->ow + ox) * K;
                for (int ky = 0; ky < s->kh; ky++) {
                    int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        int ix = ox * s->stride - s->pad + kx;
                        if (ix < 0 || ix >= s->w) continue;
                        float *d = &XAT(s, dx, n, iy, ix, 0);
                        const float *src = row + ((size_t)ky * s->kw + kx) * C;
                        for (int c = 0; c < C; c++)
                            d[c] += src[c];
                    }
                }
            }
}

/* y[i][o] = act(y[i][o] + b[o]) over an M x OC block */
KILN_HOT static void bias_act(float *y, int M, int OC, const float *b, int relu)
{
    for (int i = 0; i < M; i++) {
        float *r = y + (size_t)i * OC;
        if (b)
            for (int o = 0; o < OC; o++)
                r[o] += b[o];
        if (relu)
            for (int o = 0; o < OC; o++)
                r[o] = r[o] > 0.0f ? r[o] : 0.0f;
    }
}

/* dy[i][o] = 0 where y <= 0 (ReLU), then db[o] += dy[i][o] in row order */
KILN_HOT static void mask_sum(float *dy, const float *y, size_t M, int OC, int relu, float *db)
{
    for (size_t i = 0; i < M; i++) {
        float *r = dy + i * OC;
        const float *ry = y + i * OC;
        if (relu)
            for (int o = 0; o < OC; o++)
                r[o] = ry[o] > 0.0f ? r[o] : 0.0f;
        for (int o = 0; o < OC; o++)
            db[o] += r[o];
    }
}

/* dw = beta*dw + g */
KILN_HOT static void axpby(float *dw, const float *g, size_t n, float beta)
{
    for (size_t i = 0; i < n; i++)
        dw[i] = beta * dw[i] + g[i];
}

typedef struct conv_ctx {
    const kiln_conv_shape *s;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    int relu, tasks;
    float beta;                        /* task 0 accumulates into dw/db scaled by beta */
    float *dw_part[KILN__MAX_THREADS]; /* task 0 writes dw/db directly */
    float *db_part[KILN__MAX_THREADS];
} conv_ctx;

static void fwd_task(void *p, int task, int tid)
{
    conv_ctx *c = p;
    const kiln_conv_shape *s = c->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, c->tasks, task, 1, &n0, &n1);

    int ch = chunk_images(s);
    size_t K = (size_t)s->kh * s->kw * s->c, P1 = (size_t)s->oh * s->ow;
    if (n1 > n0) {
        kiln_conv_shape ts = *s;
        ts.n = (int)(n1 - n0);
        const kiln__conv_dnnl *e = kiln__conv_dnnl_get(&ts, c->b != NULL, c->relu, KILN__CONV_FWD);
        if (e && kiln__conv_dnnl_fwd(e, tid, &XAT(s, c->x, n0, 0, 0, 0), c->w, c->b,
                                     c->yo + n0 * P1 * s->oc) == 0)
            return;
    }
    int direct = s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
    float *col = direct ? NULL : kiln__scratch(tid, 0, (size_t)ch * P1 * K);
    for (int n = (int)n0; n < (int)n1; n += ch) {
        int cnt = (int)n1 - n < ch ? (int)n1 - n : ch;
        const float *a = &XAT(s, c->x, n, 0, 0, 0);
        if (!direct) {
            im2col(s, c->x, n, cnt, col);
            a = col;
        }
        int M = cnt * (int)P1;
        float *out = c->yo + (size_t)n * P1 * s->oc;
        kiln__sgemm(0, 0, M, s->oc, (int)K, 1.0f, a, (int)K, c->w, s->oc, 0.0f, out, s->oc);
        bias_act(out, M, s->oc, c->b, c->relu);
    }
}

void kiln_conv2d_fwd(const kiln_conv_shape *s, const float *x, const float *w, const float *b,
                     float *y, int relu)
{
    conv_ctx c = {.s = s, .x = x, .w = w, .b = b, .yo = y, .relu = relu};
    c.tasks = kiln_get_threads() < s->n ? kiln_get_threads() : s->n;
    kiln__parallel_for(c.tasks, fwd_task, &c);
}

/* dx for images [n0, n1) on the im2col path: dcol = dy w^T, then col2im
 * (dy already holds the pre-activation gradient) */
static void im2col_dx(conv_ctx *c, int tid, size_t n0, size_t n1)
{
    const kiln_conv_shape *s = c->s;
    int ch = chunk_images(s);
    size_t K = (size_t)s->kh * s->kw * s->c, P1 = (size_t)s->oh * s->ow;
    int direct = s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
    float *dcol = direct ? NULL : kiln__scratch(tid, 1, (size_t)ch * P1 * K);
    for (int n = (int)n0; n < (int)n1; n += ch) {
        int cnt = (int)n1 - n < ch ? (int)n1 - n : ch;
        int M = cnt * (int)P1;
        const float *d = c->dy + (size_t)n * P1 * s->oc;
        float *dxn = &XAT(s, c->dx, n, 0, 0, 0);
        if (direct) {
            kiln__sgemm(0, 1, M, (int)K, s->oc, 1.0f, d, s->oc, c->w, s->oc, 0.0f, dxn, (int)K);
        } else {
            kiln__sgemm(0, 1, M, (int)K, s->oc, 1.0f, d, s->oc, c->w, s->oc, 0.0f, dcol, (int)K);
            memset(dxn, 0, sizeof(float) * cnt * s->h * s->w * s->c);
            col2im_add(s, dcol, n, cnt, c->dx);
        }
    }
}

/* bwd_task's images [n0, n1) through oneDNN: 0, or -1 with dw and db as
 * they were (the caller then takes the im2col path; dy may already be
 * masked, which the im2col path repeats harmlessly). The weight gradient
 * takes oneDNN's path whenever it has a kernel for it, with or without dx,
 * so dw has the same bits either way; dx takes oneDNN's backward-data kernel
 * where it has one and the im2col path otherwise. */
static int dnnl_task(conv_ctx *c, int tid, size_t n0, size_t n1, float *dw, float *db, float beta)
{
    const kiln_conv_shape *s = c->s;
    kiln_conv_shape ts = *s;
    ts.n = (int)(n1 - n0);
    const kiln__conv_dnnl *e = kiln__conv_dnnl_get(&ts, c->b != NULL, c->relu, KILN__CONV_BWD_W);
    if (!e) return -1;
    int dx_dnnl = c->dx && kiln__conv_dnnl_get(&ts, c->b != NULL, c->relu, KILN__CONV_BWD);
    size_t P1 = (size_t)s->oh * s->ow, nw = (size_t)s->kh * s->kw * s->c * s->oc;
    /* slot 3: the new gradient when it must be added to dw, then db's old value */
    float *g = kiln__scratch(tid, 3, nw + (size_t)s->oc);
    if (!g) return -1;
    float *db_old = g + nw;
    memcpy(db_old, db, sizeof(float) * s->oc);
    float *d = c->dy + n0 * P1 * s->oc;
    mask_sum(d, c->y + n0 * P1 * s->oc, (n1 - n0) * P1, s->oc, c->relu, db);
    const float *x = &XAT(s, c->x, n0, 0, 0, 0);
    if (kiln__conv_dnnl_bwd_weights(e, tid, x, d, beta == 0.0f ? dw : g) ||
        (dx_dnnl && kiln__conv_dnnl_bwd_data(e, tid, c->w, d, &XAT(s, c->dx, n0, 0, 0, 0)))) {
        memcpy(db, db_old, sizeof(float) * s->oc);
        return -1;
    }
    if (c->dx && !dx_dnnl) im2col_dx(c, tid, n0, n1);
    if (beta != 0.0f) axpby(dw, g, nw, beta);
    return 0;
}

static void bwd_task(void *p, int task, int tid)
{
    conv_ctx *c = p;
    const kiln_conv_shape *s = c->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, c->tasks, task, 1, &n0, &n1);
    int ch = chunk_images(s);
    size_t K = (size_t)s->kh * s->kw * s->c, P1 = (size_t)s->oh * s->ow;
    int direct = s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
    float *col = direct ? NULL : kiln__scratch(tid, 0, (size_t)ch * P1 * K);
    float *dcol = c->dx ? kiln__scratch(tid, 1, (size_t)ch * P1 * K) : NULL;
    float *dw = c->dw_part[task], *db = c->db_part[task];
    float beta = task == 0 ? c->beta : 0.0f;
    for (int o = 0; o < s->oc; o++)
        db[o] = beta == 0.0f ? 0.0f : db[o] * beta;
    if (n0 >= n1) {
        for (size_t i = 0; i < K * s->oc; i++)
            dw[i] = beta == 0.0f ? 0.0f : dw[i] * beta;
    }
    if (n1 > n0 && dnnl_task(c, tid, n0, n1, dw, db, beta) == 0) return;
    for (int n = (int)n0; n < (int)n1; n += ch) {
        int cnt = (int)n1 - n < ch ? (int)n1 - n : ch;
        int M = cnt * (int)P1;
        float *d = c->dy + (size_t)n * P1 * s->oc;
        const float *yy = c->y + (size_t)n * P1 * s->oc;
        mask_sum(d, yy, M, s->oc, c->relu, db);
        const float *a = &XAT(s, c->x, n, 0, 0, 0);
        if (!direct) {
            im2col(s, c->x, n, cnt, col);
            a = col;
        }
        kiln__sgemm(1, 0, (int)K, s->oc, M, 1.0f, a, (int)K, d, s->oc, beta, dw, s->oc);
        beta = 1.0f;
        if (c->dx) {
            float *dxn = &XAT(s, c->dx, n, 0, 0, 0);
            if (direct) {
                kiln__sgemm(0, 1, M, (int)K, s->oc, 1.0f, d, s->oc, c->w, s->oc, 0.0f, dxn, (int)K);
            } else {
                kiln__sgemm(0, 1, M, (int)K, s->oc, 1.0f, d, s->oc, c->w, s->oc, 0.0f, dcol,
                            (int)K);
                memset(dxn, 0, sizeof(float) * cnt * s->h * s->w * s->c);
                col2im_add(s, dcol, n, cnt, c->dx);
            }
        }
    }
}

void kiln_conv2d_bwd(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                     float *dy, float *dx, float *dw, float *db, int relu)
{
    kiln_conv2d_bwd_acc(s, x, w, y, dy, dx, dw, db, relu, 0.0f);
}

void kiln_conv2d_bwd_acc(const kiln_conv_shape *s, const float *x, const float *w, const float *y,
                         float *dy, float *dx, float *dw, float *db, int relu, float beta)
{
    conv_ctx c = {.s = s, .x = x, .w = w, .y = y, .dy = dy, .dx = dx, .relu = relu, .beta = beta};
    size_t K = (size_t)s->kh * s->kw * s->c, nw = K * s->oc;
    c.tasks = kiln_get_threads() < s->n ? kiln_get_threads() : s->n;
    c.dw_part[0] = dw;
    c.db_part[0] = db;
    for (int t = 1; t < c.tasks; t++) {
        /* slots 2 and 3 of thread 0's scratch hold the partials of tasks >= 1 */
        float *buf = kiln__scratch(0, 2, (nw + s->oc) * (size_t)(c.tasks - 1));
        c.dw_part[t] = buf + (nw + s->oc) * (size_t)(t - 1);
        c.db_part[t] = c.dw_part[t] + nw;
    }
    kiln__parallel_for(c.tasks, bwd_task, &c);
    for (int t = 1; t < c.tasks; t++) { /* fixed order: deterministic */
        for (size_t i = 0; i < nw; i++)
            dw[i] += c.dw_part[t][i];
        for (int o = 0; o < s->oc; o++)
            db[o] += c.db_part[t][o];
    }
}
