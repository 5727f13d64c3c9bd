/* ops/pool2d.c - max and average pooling (NHWC, no padding).
 * The fast paths run images on the thread pool and keep C innermost, where
 * the loads are contiguous and vectorise; the arithmetic (a max, or a sum in
 * window order then one multiply) is the reference's, so results are equal. */
#include "ops/ops.h"

#include "core/pool.h"

#include <string.h>

int kiln_pool_shape_init(kiln_pool_shape *s, int n, int h, int w, int c, int k, int stride)
{
    *s = (kiln_pool_shape){.n = n, .h = h, .w = w, .c = c, .k = k, .stride = stride};
    if (n < 1 || c < 1 || k < 1 || stride < 1 || h < k || w < k) return -1;
    s->oh = (h - k) / stride + 1;
    s->ow = (w - k) / stride + 1;
    return 0;
}

#define IN(s, n, y, x)  ((((size_t)(n) * (s)->h + (y)) * (s)->w + (x)) * (s)->c)
#define OUT(s, n, y, x) ((((size_t)(n) * (s)->oh + (y)) * (s)->ow + (x)) * (s)->c)

void kiln_maxpool_fwd_ref(const kiln_pool_shape *s, const float *x, float *y, int32_t *idx)
{
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int c = 0; c < s->c; c++) {
                    size_t best = IN(s, n, oy * s->stride, ox * s->stride) + c;
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++) {
                            size_t i = IN(s, n, oy * s->stride + ky, ox * s->stride + kx) + c;
                            if (x[i] > x[best]) best = i;
                        }
                    y[OUT(s, n, oy, ox) + c] = x[best];
                    idx[OUT(s, n, oy, ox) + c] = (int32_t)best;
                }
}

void kiln_maxpool_bwd_ref(const kiln_pool_shape *s, const float *dy, const int32_t *idx, float *dx)
{
    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * s->c);
    size_t ny = (size_t)s->n * s->oh * s->ow * s->c;
    for (size_t j = 0; j < ny; j++)
        dx[idx[j]] += dy[j];
}

void kiln_avgpool_fwd_ref(const kiln_pool_shape *s, const float *x, float *y)
{
    float inv = 1.0f / (float)(s->k * s->k);
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int c = 0; c < s->c; c++) {
                    float acc = 0.0f;
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++)
                            acc += x[IN(s, n, oy * s->stride + ky, ox * s->stride + kx) + c];
                    y[OUT(s, n, oy, ox) + c] = acc * inv;
                }
}

void kiln_avgpool_bwd_ref(const kiln_pool_shape *s, const float *dy, float *dx)
{
    float inv = 1.0f / (float)(s->k * s->k);
    memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * s->c);
    for (int n = 0; n < s->n; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int c = 0; c < s->c; c++)
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++)
                            dx[IN(s, n, oy * s->stride + ky, ox * s->stride + kx) + c] +=
                                dy[OUT(s, n, oy, ox) + c] * inv;
}

typedef struct pool_ctx {
    const kiln_pool_shape *s;
    const float *x, *dy;
    float *y, *dx;
    const int32_t *cidx;
    int32_t *idx;
    int tasks;
} pool_ctx;

/* The common 2x2/stride-2 window, with the four candidates compared in the
 * reference's order (row-major in the window, strict >, so the first
 * maximum wins), on whole rows of C channels at a time. */
KILN_HOT static void max2x2(const kiln_pool_shape *s, const float *x, float *y, int32_t *idx,
                            int n0, int n1)
{
    int C = s->c;
    size_t rowstride = (size_t)s->w * C;
    for (int n = n0; n < n1; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                size_t b = IN(s, n, 2 * oy, 2 * ox);
                const float *a0 = x + b, *a1 = a0 + C, *a2 = a0 + rowstride, *a3 = a2 + C;
                float *yo = y + OUT(s, n, oy, ox);
                int32_t *io = idx + OUT(s, n, oy, ox);
                int32_t i0 = (int32_t)b;
                for (int c = 0; c < C; c++) {
                    float m = a0[c];
                    int32_t k = i0 + c;
                    if (a1[c] > m) {
                        m = a1[c];
                        k = i0 + C + c;
                    }
                    if (a2[c] > m) {
                        m = a2[c];
                        k = i0 + (int32_t)rowstride + c;
                    }
                    if (a3[c] > m) {
                        m = a3[c];
                        k = i0 + (int32_t)rowstride + C + c;
                    }
                    yo[c] = m;
                    io[c] = k;
                }
            }
}

static void maxf_task(void *p, int task, int tid)
{
    pool_ctx *q = p;
    const kiln_pool_shape *s = q->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, q->tasks, task, 1, &n0, &n1);
    int C = s->c;
    if (s->k == 2 && s->stride == 2) {
        max2x2(s, q->x, q->y, q->idx, (int)n0, (int)n1);
        return;
    }
    for (int n = (int)n0; n < (int)n1; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *yo = q->y + OUT(s, n, oy, ox);
                int32_t *io = q->idx + OUT(s, n, oy, ox);
                size_t first = IN(s, n, oy * s->stride, ox * s->stride);
                for (int c = 0; c < C; c++) {
                    yo[c] = q->x[first + c];
                    io[c] = (int32_t)(first + c);
                }
                for (int ky = 0; ky < s->k; ky++)
                    for (int kx = 0; kx < s->k; kx++) {
                        size_t b = IN(s, n, oy * s->stride + ky, ox * s->stride + kx);
                        const float *xi = q->x + b;
                        for (int c = 0; c < C; c++) {
                            int gt = xi[c] > yo[c];
                            yo[c] = gt ? xi[c] : yo[c];
                            io[c] = gt ? (int32_t)(b + c) : io[c];
                        }
                    }
            }
}

static int tasks_for(const kiln_pool_shape *s)
{
    int t = kiln_get_threads();
    return t < s->n ? t : s->n;
}

void kiln_maxpool_fwd(const kiln_pool_shape *s, const float *x, float *y, int32_t *idx)
{
    pool_ctx q = {.s = s, .x = x, .y = y, .idx = idx, .tasks = tasks_for(s)};
    kiln__parallel_for(q.tasks, maxf_task, &q);
}

KILN_HOT static void scatter_add(float *dx, const float *dy, const int32_t *idx, size_t b, size_t e)
{
    for (size_t j = b; j < e; j++)
        dx[idx[j]] += dy[j];
}

/* 2x2/stride-2 windows on even H and W tile the input exactly: every input
 * element is in one window, so dx is written once (dy or 0) with no memset
 * and no scatter. Same values as the scatter: one addend or none. */
KILN_HOT static void max2x2_bwd(const kiln_pool_shape *s, const float *dy, const int32_t *idx,
                                float *dx, int n0, int n1)
{
    int C = s->c;
    size_t rowstride = (size_t)s->w * C;
    for (int n = n0; n < n1; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                int32_t b = (int32_t)IN(s, n, 2 * oy, 2 * ox);
                float *d0 = dx + b, *d1 = d0 + C, *d2 = d0 + rowstride, *d3 = d2 + C;
                const float *g = dy + OUT(s, n, oy, ox);
                const int32_t *io = idx + OUT(s, n, oy, ox);
                for (int c = 0; c < C; c++) {
                    int32_t k = io[c] - b - c;
                    d0[c] = k == 0 ? g[c] : 0.0f;
                    d1[c] = k == C ? g[c] : 0.0f;
                    d2[c] = k == (int32_t)rowstride ? g[c] : 0.0f;
                    d3[c] = k == (int32_t)rowstride + C ? g[c] : 0.0f;
                }
            }
}

static void maxb_task(void *p, int task, int tid)
{
    pool_ctx *q = p;
    const kiln_pool_shape *s = q->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, q->tasks, task, 1, &n0, &n1);
    if (s->k == 2 && s->stride == 2 && s->h % 2 == 0 && s->w % 2 == 0) {
        max2x2_bwd(s, q->dy, q->cidx, q->dx, (int)n0, (int)n1);
        return;
    }
    size_t in_img = (size_t)s->h * s->w * s->c, out_img = (size_t)s->oh * s->ow * s->c;
    memset(q->dx + n0 * in_img, 0, sizeof(float) * (n1 - n0) * in_img);
    scatter_add(q->dx, q->dy, q->cidx, n0 * out_img, n1 * out_img);
}

void kiln_maxpool_bwd(const kiln_pool_shape *s, const float *dy, const int32_t *idx, float *dx)
{
    pool_ctx q = {.s = s, .dy = dy, .cidx = idx, .dx = dx, .tasks = tasks_for(s)};
    kiln__parallel_for(q.tasks, maxb_task, &q);
}

static void avgf_task(void *p, int task, int tid)
{
    pool_ctx *q = p;
    const kiln_pool_shape *s = q->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, q->tasks, task, 1, &n0, &n1);
    float inv = 1.0f / (float)(s->k * s->k);
    int C = s->c;
    for (int n = (int)n0; n < (int)n1; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float *yo = q->y + OUT(s, n, oy, ox);
                for (int c = 0; c < C; c++)
                    yo[c] = 0.0f;
                for (int ky = 0; ky < s->k; ky++)
                    for (int kx = 0; kx < s->k; kx++) {
                        const float *xi = q->x + IN(s, n, oy * s->stride + ky, ox * s->stride + kx);
                        for (int c = 0; c < C; c++)
                            yo[c] += xi[c];
                    }
                for (int c = 0; c < C; c++)
                    yo[c] *= inv;
            }
}

void kiln_avgpool_fwd(const kiln_pool_shape *s, const float *x, float *y)
{
    pool_ctx q = {.s = s, .x = x, .y = y, .tasks = tasks_for(s)};
    kiln__parallel_for(q.tasks, avgf_task, &q);
}

static void avgb_task(void *p, int task, int tid)
{
    pool_ctx *q = p;
    const kiln_pool_shape *s = q->s;
    size_t n0, n1;
    kiln__split((size_t)s->n, q->tasks, task, 1, &n0, &n1);
    float inv = 1.0f / (float)(s->k * s->k);
    int C = s->c;
    size_t in_img = (size_t)s->h * s->w * s->c;
    memset(q->dx + n0 * in_img, 0, sizeof(float) * (n1 - n0) * in_img);
    for (int n = (int)n0; n < (int)n1; n++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                const float *g = q->dy + OUT(s, n, oy, ox);
                for (int ky = 0; ky < s->k; ky++)
                    for (int kx = 0; kx < s->k; kx++) {
                        float *d = q->dx + IN(s, n, oy * s->stride + ky, ox * s->stride + kx);
                        for (int c = 0; c < C; c++)
                            d[c] += g[c] * inv;
                    }
            }
}

void kiln_avgpool_bwd(const kiln_pool_shape *s, const float *dy, float *dx)
{
    pool_ctx q = {.s = s, .dy = dy, .dx = dx, .tasks = tasks_for(s)};
    kiln__parallel_for(q.tasks, avgb_task, &q);
}
