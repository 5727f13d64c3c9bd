/* cuda/dnn.c - convolution, pooling, batch norm and ReLU on cuDNN 9's
 * legacy (v7-style) API, fp32 NHWC.
 *
 * Descriptors are made per call: a few microseconds against the milliseconds
 * of a ResNet layer, and it keeps every function stateless. A cache keyed by
 * shape is the obvious next step once a GPU profile says it matters.
 *
 * Conv weights: kiln keeps HWIO ([KH, KW, C, OC], what checkpoints hold);
 * cuDNN's NHWC filter layout is KRSC ([OC, KH, KW, C]). HWIO is KRSC
 * transposed as a [KH*KW*C, OC] matrix, so cublasSgeam converts in one call
 * each way (weights in, weight gradient out) into the context's scratch. */
#include "cuda/conv_plan.h"
#include "cuda/ctx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- descriptors ---- */

/* x, y, w: what cuDNN convolves, NHWC (KRSC filters), or with c->conv_nchw
 * NCHW (KCRS); then xh, yh are NHWC views of x and y and wh, wc the filter
 * as a tensor in KRSC and KCRS, for the transforms between the two */
typedef struct conv_desc {
    cudnnTensorDescriptor_t x, y, xh, yh, wh, wc;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} conv_desc;

static void conv_desc_free(conv_desc *d)
{
    cudnnTensorDescriptor_t t[] = {d->x, d->y, d->xh, d->yh, d->wh, d->wc};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i]) cudnnDestroyTensorDescriptor(t[i]);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

static kiln_err conv_desc_make(kiln_cuda_ctx *c, const kiln_conv_shape *s, conv_desc *d)
{
    kiln_err rc = KILN_OK;
    int n, ch, h, w;
    cudnnTensorFormat_t f = c->conv_nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->x));
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->y));
    CK_DNN(c, cudnnCreateFilterDescriptor(&d->w));
    CK_DNN(c, cudnnCreateConvolutionDescriptor(&d->conv));
    CK_DNN(c, cudnnSetTensor4dDescriptor(d->x, f, CUDNN_DATA_FLOAT, s->n, s->c, s->h, s->w));
    CK_DNN(c, cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, f, s->oc, s->c, s->kh, s->kw));
    if (c->conv_nchw) {
        CK_DNN(c, cudnnCreateTensorDescriptor(&d->xh));
        CK_DNN(c, cudnnCreateTensorDescriptor(&d->yh));
        CK_DNN(c, cudnnCreateTensorDescriptor(&d->wh));
        CK_DNN(c, cudnnCreateTensorDescriptor(&d->wc));
        CK_DNN(c, cudnnSetTensor4dDescriptor(d->xh, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n, s->c,
                                             s->h, s->w));
        CK_DNN(c, cudnnSetTensor4dDescriptor(d->yh, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n,
                                             s->oc, s->oh, s->ow));
        CK_DNN(c, cudnnSetTensor4dDescriptor(d->wh, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->oc,
                                             s->c, s->kh, s->kw));
        CK_DNN(c, cudnnSetTensor4dDescriptor(d->wc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->oc,
                                             s->c, s->kh, s->kw));
    }
    CK_DNN(c, cudnnSetConvolution2dDescriptor(d->conv, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    /* On Ampere and later CUDNN_DEFAULT_MATH lets fp32 convolutions use TF32;
     * FMA_MATH is the only way to keep them fp32. */
    CK_DNN(c,
           cudnnSetConvolutionMathType(d->conv, c->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    CK_DNN(c, cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &n, &ch, &h, &w));
    if (n != s->n || ch != s->oc || h != s->oh || w != s->ow) {
        rc = kiln_cu__invalid(c, "conv2d: cuDNN output %dx%dx%dx%d differs from kiln's %dx%dx%dx%d",
                              n, h, w, ch, s->n, s->oh, s->ow, s->oc);
        goto out;
    }
    CK_DNN(c, cudnnSetTensor4dDescriptor(d->y, f, CUDNN_DATA_FLOAT, s->n, s->oc, s->oh, s->ow));
out:
    return rc;
}

/* dst (described by to) = src (described by from): a layout change */
static kiln_err relayout(kiln_cuda_ctx *c, cudnnTensorDescriptor_t from, const float *src,
                         cudnnTensorDescriptor_t to, float *dst)
{
    kiln_err rc = KILN_OK;
    const float one = 1.0f, zero = 0.0f;
    CK_DNN(c, cudnnTransformTensor(c->dnn, &one, from, src, &zero, to, dst));
out:
    return rc;
}

static kiln_err check_conv(kiln_cuda_ctx *c, const kiln_conv_shape *s)
{
    size_t nx = (size_t)s->n * s->h * s->w * s->c, ny = (size_t)s->n * s->oh * s->ow * s->oc;
    if (s->n < 1 || s->c < 1 || s->oc < 1 || s->oh < 1 || s->ow < 1 || nx > INT_MAX || ny > INT_MAX)
        return kiln_cu__invalid(c, "conv2d: bad or too large shape (run kiln_conv_shape_init)");
    return kiln_cu__enter(c);
}

/* ---- the algorithm of a convolution, chosen once per shape ----
 * Accepted: an algorithm that can run, is deterministic (a run killed and
 * resumed must end bit-identical, and two runs of the same step must
 * agree), and with TF32 off does not use tensor cores (fp32 stays fp32).
 * With autotune (the default) the candidates are timed on the real buffers
 * (cudnnFind*Ex, as PyTorch's cudnn.benchmark) the first time a shape is
 * seen, in a workspace of up to FIND_WS; otherwise, or while a graph is
 * being captured (timing runs kernels and waits), cuDNN's heuristics rank
 * them. Either way the choice is cached in the context, so later calls make
 * no query at all. */
#define FIND_WS ((size_t)256 << 20)
enum { DIR_FWD = 0, DIR_BWD_FILTER = 1, DIR_BWD_DATA = 2 };

static int fp32_ok(const kiln_cuda_ctx *c, cudnnMathType_t m)
{
    return c->tf32 || (m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

#define PICK_ALGO(c, perf, count, chosen, found)                                                   \
    do {                                                                                           \
        (found) = 0;                                                                               \
        for (int i_ = 0; i_ < (count) && !(found); i_++)                                           \
            if ((perf)[i_].status == CUDNN_STATUS_SUCCESS &&                                       \
                (perf)[i_].determinism == CUDNN_DETERMINISTIC &&                                   \
                fp32_ok((c), (perf)[i_].mathType)) {                                               \
                (chosen) = (int)(perf)[i_].algo;                                                   \
                math = (int)(perf)[i_].mathType;                                                   \
                ms = (perf)[i_].time;                                                              \
                (found) = 1;                                                                       \
            }                                                                                      \
    } while (0)

static void algo_key(const kiln_cuda_ctx *c, int dir, const kiln_conv_shape *s, int key[12])
{
    /* the last: 1 timed, 2 heuristics (KILN_CUDNN_FIND=0 must not reuse a timed choice) */
    int k[12] = {dir,       s->n,   s->h,    s->w,
                 s->c,      s->oc,  s->kh,   s->kw,
                 s->stride, s->pad, c->tf32, (c->autotune ? 1 : 2) + (c->conv_nchw ? 10 : 0)};
    memcpy(key, k, sizeof k);
}

/* The choices are shared by every context of the process on the same GPU
 * (two models in one process compute alike), and, where
 * KILN_CUDNN_ALGO_FILE names a file, by every process that names it:
 * kiln-train points it into its model_dir, so a run killed and resumed
 * uses the algorithms its first start timed and ends bit-identical. Timing
 * is noisy, and two deterministic algorithms still sum in different
 * orders (the H100 showed two runs of a bf16 ResNet differ at step 1).
 * The file holds one line per choice, with the GPU's name and cuDNN's
 * version: a line of another GPU or cuDNN is not used. */
static pthread_mutex_t algo_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared_algo {
    int device;
    kiln_cu_algo a;
} shared[KILN_CU_ALGOS];
static int nshared;
static unsigned long long file_read; /* a bit per device: its lines are in */

static void algo_ident(const kiln_cuda_ctx *c, char *buf, size_t len)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, c->device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(p.name, sizeof p.name, "gpu%d", c->device);
    }
    snprintf(buf, len, "%zu %.100s", cudnnGetVersion(), p.name);
    for (char *q = buf; *q; q++)
        if (*q == ' ' && q > strchr(buf, ' ')) *q = '_'; /* the name in one word */
}

static void shared_add(int device, const int key[12], int algo, size_t ws)
{
    if (nshared == KILN_CU_ALGOS) return; /* full: chosen again next time */
    shared[nshared].device = device;
    memcpy(shared[nshared].a.key, key, sizeof shared[nshared].a.key);
    shared[nshared].a.algo = algo;
    shared[nshared].a.ws = ws;
    nshared++;
}

static const kiln_cu_algo *shared_find(int device, const int key[12])
{
    for (int i = 0; i < nshared; i++)
        if (shared[i].device == device && memcmp(shared[i].a.key, key, sizeof shared[i].a.key) == 0)
            return &shared[i].a;
    return NULL;
}

/* The file's lines for c's GPU, once per device (under algo_mu). */
static void file_load(const kiln_cuda_ctx *c)
{
    const char *path = getenv("KILN_CUDNN_ALGO_FILE");
    char ident[160], line[512];
    FILE *f;
    if (c->device < 0 || c->device >= 64 || (file_read >> c->device & 1)) return;
    file_read |= 1ULL << c->device;
    if (!path || !*path || !(f = fopen(path, "r"))) return;
    algo_ident(c, ident, sizeof ident);
    size_t il = strlen(ident);
    while (fgets(line, sizeof line, f)) {
        int k[12], algo, used = 0;
        size_t ws;
        if (strncmp(line, "algo ", 5) != 0 || strncmp(line + 5, ident, il) != 0 ||
            line[5 + il] != ' ')
            continue;
        if (sscanf(line + 5 + il, " %d %d %d %d %d %d %d %d %d %d %d %d %d %zu%n", &k[0], &k[1],
                   &k[2], &k[3], &k[4], &k[5], &k[6], &k[7], &k[8], &k[9], &k[10], &k[11], &algo,
                   &ws, &used) == 14 &&
            !shared_find(c->device, k))
            shared_add(c->device, k, algo, ws);
    }
    fclose(f);
}

static int algo_find(const kiln_cuda_ctx *c, const int key[12], int *algo, size_t *ws)
{
    pthread_mutex_lock(&algo_mu);
    file_load(c);
    const kiln_cu_algo *a = shared_find(c->device, key);
    if (a) *algo = a->algo, *ws = a->ws;
    pthread_mutex_unlock(&algo_mu);
    return a != NULL;
}

/* timed: the choice goes to KILN_CUDNN_ALGO_FILE too (heuristics need no
 * file: they answer the same each time). One write per line, appended: the
 * replicas of one job may share the file. */
static void algo_keep(const kiln_cuda_ctx *c, const int key[12], int algo, size_t ws, int timed)
{
    const char *path = getenv("KILN_CUDNN_ALGO_FILE");
    pthread_mutex_lock(&algo_mu);
    if (!shared_find(c->device, key)) {
        shared_add(c->device, key, algo, ws);
        int fd = timed && path && *path
                     ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)
                     : -1;
        if (fd >= 0) {
            char ident[160], line[512];
            algo_ident(c, ident, sizeof ident);
            int n =
                snprintf(line, sizeof line, "algo %s %d %d %d %d %d %d %d %d %d %d %d %d %d %zu\n",
                         ident, key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
                         key[8], key[9], key[10], key[11], algo, ws);
            if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n)
                fprintf(stderr, "kiln cudnn: %s: %s\n", path, strerror(errno));
            close(fd);
        }
    }
    pthread_mutex_unlock(&algo_mu);
}

/* Timing is allowed: autotune on and the stream not being captured. */
static int may_time(kiln_cuda_ctx *c)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (!c->autotune) return 0;
    if (cudaStreamIsCapturing(c->stream, &st) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return st == cudaStreamCaptureStatusNone;
}

/* The operands a direction's Find runs on: real buffers, whose outputs it
 * overwrites (the caller computes them again afterwards). */
typedef struct conv_io {
    const float *x, *w, *dy;
    float *y, *dw, *dx;
} conv_io;

static kiln_err choose(kiln_cuda_ctx *c, int dir, const kiln_conv_shape *s, const conv_desc *d,
                       const conv_io *io, int *algo, size_t *ws)
{
    kiln_err rc = KILN_OK;
    int key[12], got = 0, found = 0, timed = 0, math = -1;
    float ms = -1.0f;
    algo_key(c, dir, s, key);
    if (algo_find(c, key, algo, ws)) return KILN_OK;
    if (may_time(c)) {
        CK_KILN(kiln_cu__ensure_ws(c, FIND_WS));
        if (dir == DIR_FWD) {
            cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            if (cudnnFindConvolutionForwardAlgorithmEx(c->dnn, d->x, io->x, d->w, io->w, d->conv,
                                                       d->y, io->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p,
                                                       c->ws, c->ws_bytes) == CUDNN_STATUS_SUCCESS)
                PICK_ALGO(c, p, got, *algo, found);
        } else if (dir == DIR_BWD_FILTER) {
            cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            if (cudnnFindConvolutionBackwardFilterAlgorithmEx(
                    c->dnn, d->x, io->x, d->y, io->dy, d->conv, d->w, io->dw,
                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p, c->ws,
                    c->ws_bytes) == CUDNN_STATUS_SUCCESS)
                PICK_ALGO(c, p, got, *algo, found);
        } else {
            cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            if (cudnnFindConvolutionBackwardDataAlgorithmEx(
                    c->dnn, d->w, io->w, d->y, io->dy, d->conv, d->x, io->dx,
                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p, c->ws,
                    c->ws_bytes) == CUDNN_STATUS_SUCCESS)
                PICK_ALGO(c, p, got, *algo, found);
        }
        timed = found;
        cudaGetLastError(); /* a Find that failed falls back to the heuristics below */
    }
    if (!found) {
        if (dir == DIR_FWD) {
            cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            CK_DNN(c, cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, d->x, d->w, d->conv, d->y,
                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                             p));
            PICK_ALGO(c, p, got, *algo, found);
        } else if (dir == DIR_BWD_FILTER) {
            cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            CK_DNN(c, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          c->dnn, d->x, d->y, d->conv, d->w,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));
            PICK_ALGO(c, p, got, *algo, found);
        } else {
            cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            CK_DNN(c, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          c->dnn, d->w, d->y, d->conv, d->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                          &got, p));
            PICK_ALGO(c, p, got, *algo, found);
        }
    }
    if (!found) {
        rc = kiln_cu__invalid(c, "conv2d: cuDNN offers no deterministic%s algorithm for this shape",
                              c->tf32 ? "" : " fp32");
        goto out;
    }
    if (dir == DIR_FWD)
        CK_DNN(c, cudnnGetConvolutionForwardWorkspaceSize(c->dnn, d->x, d->w, d->conv, d->y,
                                                          (cudnnConvolutionFwdAlgo_t)*algo, ws));
    else if (dir == DIR_BWD_FILTER)
        CK_DNN(c,
               cudnnGetConvolutionBackwardFilterWorkspaceSize(
                   c->dnn, d->x, d->y, d->conv, d->w, (cudnnConvolutionBwdFilterAlgo_t)*algo, ws));
    else
        CK_DNN(c, cudnnGetConvolutionBackwardDataWorkspaceSize(
                      c->dnn, d->w, d->y, d->conv, d->x, (cudnnConvolutionBwdDataAlgo_t)*algo, ws));
    /* a choice made while capturing is not kept: timing may do better later */
    if (timed || !c->autotune) algo_keep(c, key, *algo, *ws, timed);
    if (c->verbose)
        fprintf(stderr,
                "kiln cudnn: %s n=%d %dx%dx%d -> %d k=%d s=%d p=%d: algo %d math %d %s %.3f ms, "
                "workspace %zu\n",
                dir == DIR_FWD          ? "fwd"
                : dir == DIR_BWD_FILTER ? "bwd-filter"
                                        : "bwd-data",
                s->n, s->h, s->w, s->c, s->oc, s->kh, s->stride, s->pad, *algo, math,
                timed ? "timed" : "heuristic", ms, *ws);
out:
    return rc;
}

/* dst[cols, rows] = src[rows, cols]^T + beta*dst (row-major terms). */
static kiln_err transpose(kiln_cuda_ctx *c, const float *src, float *dst, int rows, int cols,
                          float beta)
{
    kiln_err rc = KILN_OK;
    const float one = 1.0f;
    /* column-major: src is [cols, rows] (ld cols); dst is [rows, cols] (ld rows).
     * dst doubles as the beta operand: in place is allowed with op N on it. */
    CK_BLAS(c, cublasSgeam(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, &one, src, cols, &beta,
                           dst, rows, dst, rows));
out:
    return rc;
}

/* The nchw variant (c->conv_nchw, issue 45): kiln's activations stay NHWC
 * and its weights HWIO; each convolution makes NCHW copies of its operands
 * in the scratch (cudnnTransformTensor), runs cuDNN's NCHW kernels on them
 * and puts the results back: a few memory passes per convolution against
 * the fp32 NCHW kernels' speed, which the sweep measures. */
static kiln_err conv_fwd_nchw(kiln_cuda_ctx *c, const kiln_conv_shape *s, const conv_desc *d,
                              const float *x, const float *w, float *y)
{
    kiln_err rc = KILN_OK;
    int algo = 0, K = s->kh * s->kw * s->c;
    size_t ws = 0;
    kiln_cu_nchw_plan p;
    const float one = 1.0f, zero = 0.0f;
    kiln_cu__nchw_plan(s, 0, &p);
    CK_KILN(kiln_cu__ensure_scratch(c, sizeof(float) * p.total));
    float *wk = c->scratch + p.off[KILN_CU_NP_WK], *wc = c->scratch + p.off[KILN_CU_NP_WC];
    float *xc = c->scratch + p.off[KILN_CU_NP_XC], *yc = c->scratch + p.off[KILN_CU_NP_YC];
    CK_KILN(transpose(c, w, wk, K, s->oc, 0.0f)); /* HWIO -> KRSC */
    CK_KILN(relayout(c, d->wh, wk, d->wc, wc));   /* KRSC -> KCRS */
    CK_KILN(relayout(c, d->xh, x, d->x, xc));
    conv_io io = {.x = xc, .w = wc, .y = yc};
    CK_KILN(choose(c, DIR_FWD, s, d, &io, &algo, &ws));
    CK_KILN(kiln_cu__ensure_ws(c, ws));
    CK_DNN(c, cudnnConvolutionForward(c->dnn, &one, d->x, xc, d->w, wc, d->conv,
                                      (cudnnConvolutionFwdAlgo_t)algo, c->ws, ws, &zero, d->y, yc));
    CK_KILN(relayout(c, d->y, yc, d->yh, y));
out:
    return rc;
}

kiln_err kiln_cu_conv2d_fwd(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                            const float *w, const float *b, float *y, int relu)
{
    kiln_err rc = check_conv(c, s);
    conv_desc d = {0};
    int algo = 0, K = s->kh * s->kw * s->c;
    size_t ws = 0;
    const float one = 1.0f, zero = 0.0f;

    if (rc != KILN_OK) return rc;
    CK_KILN(conv_desc_make(c, s, &d));
    if (c->conv_nchw) {
        CK_KILN(conv_fwd_nchw(c, s, &d, x, w, y));
    } else {
        CK_KILN(kiln_cu__ensure_scratch(c, sizeof(float) * (size_t)K * s->oc));
        CK_KILN(transpose(c, w, c->scratch, K, s->oc, 0.0f));
        conv_io io = {.x = x, .w = c->scratch, .y = y};
        CK_KILN(choose(c, DIR_FWD, s, &d, &io, &algo, &ws));
        CK_KILN(kiln_cu__ensure_ws(c, ws));
        CK_DNN(c,
               cudnnConvolutionForward(c->dnn, &one, d.x, x, d.w, c->scratch, d.conv,
                                       (cudnnConvolutionFwdAlgo_t)algo, c->ws, ws, &zero, d.y, y));
    }
    if (b || relu) CK_KILN(kiln_cu_bias_act(c, y, b, s->n * s->oh * s->ow, s->oc, relu));
out:
    conv_desc_free(&d);
    return rc;
}

/* the backward of the nchw variant (above): dy already masked */
static kiln_err conv_bwd_nchw(kiln_cuda_ctx *c, const kiln_conv_shape *s, const conv_desc *d,
                              const float *x, const float *w, const float *dy, float *dx, float *dw,
                              float beta)
{
    kiln_err rc = KILN_OK;
    int falgo = 0, dalgo = 0, K = s->kh * s->kw * s->c;
    size_t fws = 0, dws = 0;
    kiln_cu_nchw_plan p;
    const float one = 1.0f, zero = 0.0f;
    kiln_cu__nchw_plan(s, 1, &p);
    CK_KILN(kiln_cu__ensure_scratch(c, sizeof(float) * p.total));
    float *wk = c->scratch + p.off[KILN_CU_NP_WK], *dwk = c->scratch + p.off[KILN_CU_NP_DWK];
    float *wc = c->scratch + p.off[KILN_CU_NP_WC], *dwc = c->scratch + p.off[KILN_CU_NP_DWC];
    float *xc = c->scratch + p.off[KILN_CU_NP_XC], *dyc = c->scratch + p.off[KILN_CU_NP_DYC];
    float *dxc = c->scratch + p.off[KILN_CU_NP_DXC];
    CK_KILN(relayout(c, d->xh, x, d->x, xc));
    CK_KILN(relayout(c, d->yh, dy, d->y, dyc));
    if (dx) {
        CK_KILN(transpose(c, w, wk, K, s->oc, 0.0f));
        CK_KILN(relayout(c, d->wh, wk, d->wc, wc));
    }
    conv_io io = {.x = xc, .w = wc, .dy = dyc, .dw = dwc, .dx = dxc};
    CK_KILN(choose(c, DIR_BWD_FILTER, s, d, &io, &falgo, &fws));
    if (dx) CK_KILN(choose(c, DIR_BWD_DATA, s, d, &io, &dalgo, &dws));
    CK_KILN(kiln_cu__ensure_ws(c, fws > dws ? fws : dws));
    CK_DNN(c, cudnnConvolutionBackwardFilter(c->dnn, &one, d->x, xc, d->y, dyc, d->conv,
                                             (cudnnConvolutionBwdFilterAlgo_t)falgo, c->ws, fws,
                                             &zero, d->w, dwc));
    CK_KILN(relayout(c, d->wc, dwc, d->wh, dwk));   /* KCRS -> KRSC */
    CK_KILN(transpose(c, dwk, dw, s->oc, K, beta)); /* -> HWIO, + beta * dw */
    if (dx) {
        CK_DNN(c, cudnnConvolutionBackwardData(c->dnn, &one, d->w, wc, d->y, dyc, d->conv,
                                               (cudnnConvolutionBwdDataAlgo_t)dalgo, c->ws, dws,
                                               &zero, d->x, dxc));
        CK_KILN(relayout(c, d->x, dxc, d->xh, dx));
    }
out:
    return rc;
}

kiln_err kiln_cu_conv2d_bwd(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                            const float *w, const float *y, float *dy, float *dx, float *dw,
                            float *db, int relu, float beta)
{
    kiln_err rc = check_conv(c, s);
    conv_desc d = {0};
    int falgo = 0, dalgo = 0, K = s->kh * s->kw * s->c;
    size_t fws = 0, dws = 0, nw = (size_t)K * s->oc;
    const float one = 1.0f, zero = 0.0f;
    float *wk, *dwk; /* KRSC weights and weight gradient in scratch */

    if (rc != KILN_OK) return rc;
    CK_KILN(conv_desc_make(c, s, &d));
    /* ReLU mask and bias gradient first: both filters and data need the
     * pre-activation gradient */
    CK_KILN(kiln_cu_mask_colsum(c, dy, y, relu, db, beta, s->n * s->oh * s->ow, s->oc));
    if (c->conv_nchw) {
        CK_KILN(conv_bwd_nchw(c, s, &d, x, w, dy, dx, dw, beta));
        goto out;
    }
    CK_KILN(kiln_cu__ensure_scratch(c, 2 * sizeof(float) * nw));
    wk = c->scratch;
    dwk = c->scratch + nw;
    if (dx) CK_KILN(transpose(c, w, wk, K, s->oc, 0.0f));
    conv_io io = {.x = x, .w = wk, .dy = dy, .dw = dwk, .dx = dx};
    CK_KILN(choose(c, DIR_BWD_FILTER, s, &d, &io, &falgo, &fws));
    if (dx) CK_KILN(choose(c, DIR_BWD_DATA, s, &d, &io, &dalgo, &dws));
    CK_KILN(kiln_cu__ensure_ws(c, fws > dws ? fws : dws));
    CK_DNN(c, cudnnConvolutionBackwardFilter(c->dnn, &one, d.x, x, d.y, dy, d.conv,
                                             (cudnnConvolutionBwdFilterAlgo_t)falgo, c->ws, fws,
                                             &zero, d.w, dwk));
    CK_KILN(transpose(c, dwk, dw, s->oc, K, beta));
    if (dx)
        CK_DNN(c, cudnnConvolutionBackwardData(c->dnn, &one, d.w, wk, d.y, dy, d.conv,
                                               (cudnnConvolutionBwdDataAlgo_t)dalgo, c->ws, dws,
                                               &zero, d.x, dx));
out:
    conv_desc_free(&d);
    return rc;
}

/* ---- pooling ---- */

typedef struct pool_desc {
    cudnnTensorDescriptor_t x, y;
    cudnnPoolingDescriptor_t pool;
} pool_desc;

static void pool_desc_free(pool_desc *d)
{
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->pool) cudnnDestroyPoolingDescriptor(d->pool);
}

static kiln_err pool_desc_make(kiln_cuda_ctx *c, const kiln_pool_shape *s, int max, pool_desc *d)
{
    kiln_err rc = KILN_OK;
    int n, ch, h, w;
    /* deterministic max: the gradient of overlapping windows is summed in a
     * fixed order. No padding, so "include padding" changes nothing. */
    cudnnPoolingMode_t mode =
        max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    if (s->n < 1 || s->c < 1 || s->oh < 1 || s->ow < 1 ||
        (size_t)s->n * s->h * s->w * s->c > INT_MAX) {
        rc = kiln_cu__invalid(c, "pool: bad or too large shape (run kiln_pool_shape_init)");
        goto out;
    }
    CK_KILN(kiln_cu__enter(c));
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->x));
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->y));
    CK_DNN(c, cudnnCreatePoolingDescriptor(&d->pool));
    CK_DNN(c, cudnnSetPooling2dDescriptor(d->pool, mode, CUDNN_PROPAGATE_NAN, s->k, s->k, 0, 0,
                                          s->stride, s->stride));
    CK_DNN(c, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n, s->c,
                                         s->h, s->w));
    CK_DNN(c, cudnnGetPooling2dForwardOutputDim(d->pool, d->x, &n, &ch, &h, &w));
    if (n != s->n || ch != s->c || h != s->oh || w != s->ow) {
        rc = kiln_cu__invalid(c, "pool: cuDNN output %dx%d differs from kiln's %dx%d", h, w, s->oh,
                              s->ow);
        goto out;
    }
    CK_DNN(c, cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n, s->c,
                                         s->oh, s->ow));
out:
    return rc;
}

static kiln_err pool_fwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, int max, const float *x,
                         float *y)
{
    kiln_err rc = KILN_OK;
    pool_desc d = {0};
    const float one = 1.0f, zero = 0.0f;
    CK_KILN(pool_desc_make(c, s, max, &d));
    CK_DNN(c, cudnnPoolingForward(c->dnn, d.pool, &one, d.x, x, &zero, d.y, y));
out:
    pool_desc_free(&d);
    return rc;
}

static kiln_err pool_bwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, int max, const float *x,
                         const float *y, const float *dy, float *dx)
{
    kiln_err rc = KILN_OK;
    pool_desc d = {0};
    const float one = 1.0f, zero = 0.0f;
    CK_KILN(pool_desc_make(c, s, max, &d));
    CK_DNN(c, cudnnPoolingBackward(c->dnn, d.pool, &one, d.y, y, d.y, dy, d.x, x, &zero, d.x, dx));
out:
    pool_desc_free(&d);
    return rc;
}

kiln_err kiln_cu_maxpool_fwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x, float *y)
{
    return pool_fwd(c, s, 1, x, y);
}

kiln_err kiln_cu_maxpool_bwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x,
                             const float *y, const float *dy, float *dx)
{
    /* kiln's kernel: the CPU's first-maximum rule on ties (kernels.cu) */
    if (s->n < 1 || s->c < 1 || s->oh < 1 || s->ow < 1 || s->k < 1 || s->stride < 1)
        return kiln_cu__invalid(c, "pool: bad shape (run kiln_pool_shape_init)");
    return kiln_cu__maxpool_bwd_first(c, s, x, y, dy, dx);
}

kiln_err kiln_cu_avgpool_fwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x, float *y)
{
    return pool_fwd(c, s, 0, x, y);
}

kiln_err kiln_cu_avgpool_bwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x,
                             const float *y, const float *dy, float *dx)
{
    return pool_bwd(c, s, 0, x, y, dy, dx);
}

/* ---- batch norm: x[M, C] as a tensor of M images of 1x1 pixels;
 *      spatial mode normalises each channel over N*H*W = M ---- */

typedef struct bn_desc {
    cudnnTensorDescriptor_t x, p; /* data; per-channel parameters */
} bn_desc;

static void bn_desc_free(bn_desc *d)
{
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->p) cudnnDestroyTensorDescriptor(d->p);
}

static kiln_err bn_desc_make(kiln_cuda_ctx *c, int M, int C, float eps, bn_desc *d)
{
    kiln_err rc = KILN_OK;
    if (M < 1 || C < 1 || (size_t)M * C > INT_MAX) {
        rc = kiln_cu__invalid(c, "batch norm: bad or too large shape M=%d C=%d", M, C);
        goto out;
    }
    if (!(eps >= CUDNN_BN_MIN_EPSILON)) {
        rc = kiln_cu__invalid(c, "batch norm: eps %g is below cuDNN's minimum %g", eps,
                              CUDNN_BN_MIN_EPSILON);
        goto out;
    }
    CK_KILN(kiln_cu__enter(c));
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->x));
    CK_DNN(c, cudnnCreateTensorDescriptor(&d->p));
    /* with H = W = 1, NCHW and NHWC are the same bytes; NCHW is the layout
     * every legacy batch-norm kernel takes */
    CK_DNN(c, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, M, C, 1, 1));
    CK_DNN(c, cudnnDeriveBNTensorDescriptor(d->p, d->x, CUDNN_BATCHNORM_SPATIAL));
out:
    return rc;
}

kiln_err kiln_cu_bn_fwd_train(kiln_cuda_ctx *c, const float *x, const float *gamma,
                              const float *beta, float *y, float *mean, float *invstd,
                              float *run_mean, float *run_var, float momentum, float eps, int M,
                              int C)
{
    kiln_err rc = KILN_OK;
    bn_desc d = {0};
    const float one = 1.0f, zero = 0.0f;
    /* the unbiased running variance divides by M-1 (the CPU falls back to
     * the biased one for M = 1; cuDNN does not say what it does) */
    if (M < 2) return kiln_cu__invalid(c, "batch norm: training needs M >= 2 rows, got %d", M);
    if (!run_mean != !run_var)
        return kiln_cu__invalid(c, "batch norm: run_mean and run_var must both be set or NULL");
    if (!c->bn_cudnn) {
        if (!(eps > 0.0f) || (size_t)M * C > INT_MAX)
            return kiln_cu__invalid(c, "batch norm: bad shape M=%d C=%d or eps %g", M, C, eps);
        return kiln_cu__bn_fwd_train_kiln(c, x, gamma, beta, y, mean, invstd, run_mean, run_var,
                                          momentum, eps, M, C);
    }
    CK_KILN(bn_desc_make(c, M, C, eps, &d));
    CK_DNN(c, cudnnBatchNormalizationForwardTraining(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                     d.x, x, d.x, y, d.p, gamma, beta, momentum,
                                                     run_mean, run_var, eps, mean, invstd));
out:
    bn_desc_free(&d);
    return rc;
}

kiln_err kiln_cu_bn_fwd_train_add_relu(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                       const float *beta, const float *res, float *y, float *mean,
                                       float *invstd, float *run_mean, float *run_var,
                                       float momentum, float eps, int M, int C)
{
    kiln_err rc = KILN_OK;
    size_t n = (size_t)M * C;
    if (M < 2) return kiln_cu__invalid(c, "batch norm: training needs M >= 2 rows, got %d", M);
    if (!run_mean != !run_var)
        return kiln_cu__invalid(c, "batch norm: run_mean and run_var must both be set or NULL");
    if (!c->bn_cudnn) {
        if (!(eps > 0.0f) || n > INT_MAX)
            return kiln_cu__invalid(c, "batch norm: bad shape M=%d C=%d or eps %g", M, C, eps);
        return kiln_cu__bn_fwd_train_add_relu_kiln(c, x, gamma, beta, res, y, mean, invstd,
                                                   run_mean, run_var, momentum, eps, M, C);
    }
    /* cuDNN's batch norm has no residual input: its three steps in turn */
    CK_KILN(kiln_cu_bn_fwd_train(c, x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum,
                                 eps, M, C));
    if (res) CK_KILN(kiln_cu_add_fwd(c, y, res, y, n));
    CK_KILN(kiln_cu_relu_fwd(c, y, y, n));
out:
    return rc;
}

kiln_err kiln_cu_bn_fwd_infer(kiln_cuda_ctx *c, const float *x, const float *gamma,
                              const float *beta, const float *run_mean, const float *run_var,
                              float eps, float *y, int M, int C)
{
    kiln_err rc = KILN_OK;
    bn_desc d = {0};
    const float one = 1.0f, zero = 0.0f;
    if (!c->bn_cudnn) {
        if (M < 1 || C < 1 || (size_t)M * C > INT_MAX)
            return kiln_cu__invalid(c, "batch norm: bad shape M=%d C=%d", M, C);
        return kiln_cu__bn_fwd_infer_kiln(c, x, gamma, beta, run_mean, run_var, eps, y, M, C);
    }
    CK_KILN(bn_desc_make(c, M, C, eps, &d));
    CK_DNN(c, cudnnBatchNormalizationForwardInference(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                      d.x, x, d.x, y, d.p, gamma, beta, run_mean,
                                                      run_var, eps));
out:
    bn_desc_free(&d);
    return rc;
}

kiln_err kiln_cu_bn_bwd(kiln_cuda_ctx *c, const float *x, const float *gamma, const float *mean,
                        const float *invstd, const float *dy, float *dx, float *dgamma,
                        float *dbeta, float eps, int M, int C)
{
    kiln_err rc = KILN_OK;
    bn_desc d = {0};
    const float one = 1.0f, zero = 0.0f;
    if (!c->bn_cudnn) {
        if (M < 1 || C < 1 || (size_t)M * C > INT_MAX)
            return kiln_cu__invalid(c, "batch norm: bad shape M=%d C=%d", M, C);
        return kiln_cu__bn_bwd_kiln(c, x, gamma, mean, invstd, NULL, dy, dx, dgamma, dbeta, M, C);
    }
    CK_KILN(bn_desc_make(c, M, C, eps, &d));
    CK_DNN(c, cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                              &zero, d.x, x, d.x, dy, d.x, dx, d.p, gamma, dgamma,
                                              dbeta, eps, mean, invstd));
out:
    bn_desc_free(&d);
    return rc;
}

kiln_err kiln_cu_bn_bwd_relu(kiln_cuda_ctx *c, const float *x, const float *gamma,
                             const float *mean, const float *invstd, const float *y, float *dy,
                             float *dx, float *dgamma, float *dbeta, float eps, int M, int C)
{
    kiln_err rc = KILN_OK;
    if (!c->bn_cudnn) {
        if (M < 1 || C < 1 || (size_t)M * C > INT_MAX)
            return kiln_cu__invalid(c, "batch norm: bad shape M=%d C=%d", M, C);
        return kiln_cu__bn_bwd_kiln(c, x, gamma, mean, invstd, y, dy, dx, dgamma, dbeta, M, C);
    }
    /* cuDNN's backward takes no mask: the ReLU's backward in place first */
    CK_KILN(kiln_cu_relu_bwd(c, y, dy, dy, (size_t)M * C));
    CK_KILN(kiln_cu_bn_bwd(c, x, gamma, mean, invstd, dy, dx, dgamma, dbeta, eps, M, C));
out:
    return rc;
}

/* ---- ReLU: n floats as a 1x1x1xn tensor ---- */

static kiln_err relu(kiln_cuda_ctx *c, const float *y, const float *dy, const float *x, float *out,
                     size_t n)
{
    kiln_err rc = KILN_OK;
    cudnnTensorDescriptor_t t = NULL;
    cudnnActivationDescriptor_t a = NULL;
    const float one = 1.0f, zero = 0.0f;
    if (n == 0) return KILN_OK;
    if (n > INT_MAX) return kiln_cu__invalid(c, "relu: %zu elements is more than cuDNN takes", n);
    CK_KILN(kiln_cu__enter(c));
    CK_DNN(c, cudnnCreateTensorDescriptor(&t));
    CK_DNN(c, cudnnCreateActivationDescriptor(&a));
    CK_DNN(c, cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, (int)n));
    CK_DNN(c, cudnnSetActivationDescriptor(a, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    if (dy)
        CK_DNN(c, cudnnActivationBackward(c->dnn, a, &one, t, y, t, dy, t, x, &zero, t, out));
    else
        CK_DNN(c, cudnnActivationForward(c->dnn, a, &one, t, x, &zero, t, out));
out:
    if (a) cudnnDestroyActivationDescriptor(a);
    if (t) cudnnDestroyTensorDescriptor(t);
    return rc;
}

kiln_err kiln_cu_relu_fwd(kiln_cuda_ctx *c, const float *x, float *y, size_t n)
{
    return relu(c, NULL, NULL, x, y, n);
}

kiln_err kiln_cu_relu_bwd(kiln_cuda_ctx *c, const float *y, const float *dy, float *dx, size_t n)
{
    /* the CPU masks on y > 0; relu's input x is positive exactly where y is,
     * so y serves as x */
    return relu(c, y, dy, y, dx, n);
}
