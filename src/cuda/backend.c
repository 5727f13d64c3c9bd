/* cuda/backend.c - the runtime's backend table (backend/backend.h) on the
 * CUDA ops of cuda_ops.h. Built into the plugin libkiln_cuda_backend.so,
 * whose one exported symbol is kiln_cuda_backend_v1; the runtime loads it
 * with dlopen (backend/backend_load.c) when a model is put on a GPU.
 *
 * Every entry is a thin call of the op with the same contract, already
 * compared with the CPU reference by tests/cuda/test_cuda_ops.c; this file
 * only adapts the return convention (0 / -1, the message in the context).
 * The GEMM and convolution entries are cuda/lowp.c's, which are the fp32
 * ops until set_precision turns mixed precision on. */
#include "backend/backend.h"
#include "cuda/cuda_ops.h"
#include "kiln/cuda.h"

#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* The table's device is the CUDA context itself. */
#define CTX(d)  ((kiln_cuda_ctx *)(d))
#define R(call) ((call) == KILN_OK ? 0 : -1)

static int b_open(int index, kiln__dev **out, char *err, size_t errlen)
{
    kiln_cuda_ctx *c = NULL;
    *out = NULL;
    if (kiln_cu_ctx_create(index, &c, err, errlen) != KILN_OK) return -1;
    *out = (kiln__dev *)c;
    return 0;
}

static void b_close(kiln__dev *d)
{
    kiln_cu_ctx_destroy(CTX(d));
}

static const char *b_error(const kiln__dev *d)
{
    return kiln_cu_error((const kiln_cuda_ctx *)d);
}

static void b_describe(kiln__dev *d, char *buf, size_t len)
{
    kiln_cuda_device_info info;
    char err[128];
    if (kiln_cuda_device_info_get(kiln_cu_device(CTX(d)), &info, err, sizeof err) == KILN_OK)
        snprintf(buf, len, "%s", info.name);
    else
        snprintf(buf, len, "GPU %d", kiln_cu_device(CTX(d)));
}

static int b_set_tf32(kiln__dev *d, int on)
{
    return R(kiln_cu_set_tf32(CTX(d), on));
}

static int b_set_precision(kiln__dev *d, int lowp)
{
    if (lowp == KILN__LOWP_OFF) return R(kiln_cu_set_lowp(CTX(d), 0, KILN_CU_BF16));
    if (lowp != KILN__LOWP_BF16 && lowp != KILN__LOWP_FP16)
        return R(kiln_cu_set_lowp(CTX(d), 1, (kiln_cu_dtype)-1)); /* refused, named */
    return R(kiln_cu_set_lowp(CTX(d), 1, lowp == KILN__LOWP_BF16 ? KILN_CU_BF16 : KILN_CU_FP16));
}

static int b_set_option(kiln__dev *d, int opt, int val)
{
    _Static_assert(KILN__OPT_BN_CUDNN == 1 && KILN__OPT_CONV_NCHW == 2 && KILN__OPT_DENSE_LT == 3,
                   "kiln_cu_set_option's numbering");
    return R(kiln_cu_set_option(CTX(d), opt, val));
}

static int b_mem_used(kiln__dev *d, size_t *bytes)
{
    return R(kiln_cu_mem_used(CTX(d), bytes));
}

static int b_sync(kiln__dev *d)
{
    return R(kiln_cu_sync(CTX(d)));
}

static int b_alloc(kiln__dev *d, size_t bytes, void **out)
{
    return R(kiln_cu_alloc(CTX(d), bytes, out));
}

static void b_free(kiln__dev *d, void *p)
{
    kiln_cu_free(CTX(d), p);
}

static int b_host_alloc(kiln__dev *d, size_t bytes, void **out)
{
    return R(kiln_cu_host_alloc(CTX(d), bytes, out));
}

static void b_host_free(kiln__dev *d, void *p)
{
    kiln_cu_host_free(CTX(d), p);
}

static int b_upload(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_upload(CTX(d), dst, src, bytes));
}

static int b_download(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_download(CTX(d), dst, src, bytes));
}

static int b_upload_async(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_upload_async(CTX(d), dst, src, bytes));
}

static int b_upload_staged(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_upload_staged(CTX(d), dst, src, bytes));
}

static int b_event_create(kiln__dev *d, void **ev)
{
    return R(kiln_cu_event_create(CTX(d), ev));
}

static void b_event_free(kiln__dev *d, void *ev)
{
    kiln_cu_event_free(CTX(d), ev);
}

static int b_event_record(kiln__dev *d, void *ev, int stream)
{
    return R(kiln_cu_event_record(CTX(d), ev, stream == KILN__STREAM_COPY));
}

static int b_event_wait(kiln__dev *d, void *ev, int stream)
{
    return R(kiln_cu_event_wait(CTX(d), ev, stream == KILN__STREAM_COPY));
}

static int b_event_sync(kiln__dev *d, void *ev)
{
    return R(kiln_cu_event_sync(CTX(d), ev));
}

static int b_upload_ordered(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_upload_ordered(CTX(d), dst, src, bytes));
}

static int b_copy(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_copy_dev(CTX(d), dst, src, bytes));
}

static int b_download_async(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    return R(kiln_cu_download_async(CTX(d), dst, src, bytes));
}

static int b_graph_begin(kiln__dev *d)
{
    return R(kiln_cu_graph_begin(CTX(d)));
}

static int b_graph_end(kiln__dev *d, void **graph)
{
    return R(kiln_cu_graph_end(CTX(d), graph));
}

static int b_graph_launch(kiln__dev *d, void *graph)
{
    return R(kiln_cu_graph_launch(CTX(d), graph));
}

static void b_graph_free(kiln__dev *d, void *graph)
{
    kiln_cu_graph_free(CTX(d), graph);
}

static unsigned long b_mem_epoch(kiln__dev *d)
{
    return kiln_cu_mem_epoch(CTX(d));
}

static int b_dense_fwd(kiln__dev *d, const float *x, const float *w, const float *b, float *y,
                       int B, int in, int out, int relu)
{
    return R(kiln_cu_dense_fwd_lp(CTX(d), x, w, b, y, B, in, out, relu));
}

static int b_dense_bwd(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                       float *dx, float *dw, float *db, int B, int in, int out, int relu,
                       float beta)
{
    return R(kiln_cu_dense_bwd_lp(CTX(d), x, w, y, dy, dx, dw, db, B, in, out, relu, beta));
}

static int b_conv_fwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                      const float *b, float *y, int relu)
{
    return R(kiln_cu_conv2d_fwd_lp(CTX(d), s, x, w, b, y, relu));
}

static int b_conv_bwd(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                      const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                      float beta)
{
    return R(kiln_cu_conv2d_bwd_lp(CTX(d), s, x, w, y, dy, dx, dw, db, relu, beta));
}

static int b_maxpool_fwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y)
{
    return R(kiln_cu_maxpool_fwd(CTX(d), s, x, y));
}

static int b_maxpool_bwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                         const float *dy, float *dx)
{
    return R(kiln_cu_maxpool_bwd(CTX(d), s, x, y, dy, dx));
}

static int b_avgpool_fwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y)
{
    return R(kiln_cu_avgpool_fwd(CTX(d), s, x, y));
}

static int b_avgpool_bwd(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                         const float *dy, float *dx)
{
    return R(kiln_cu_avgpool_bwd(CTX(d), s, x, y, dy, dx));
}

static int b_bn_fwd_train_add_relu(kiln__dev *d, const float *x, const float *gamma,
                                   const float *beta, const float *res, float *y, float *mean,
                                   float *invstd, float *run_mean, float *run_var, float momentum,
                                   float eps, int M, int C)
{
    return R(kiln_cu_bn_fwd_train_add_relu(CTX(d), x, gamma, beta, res, y, mean, invstd, run_mean,
                                           run_var, momentum, eps, M, C));
}

static int b_bn_bwd_relu(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                         const float *invstd, const float *y, float *dy, float *dx, float *dgamma,
                         float *dbeta, float eps, int M, int C)
{
    return R(
        kiln_cu_bn_bwd_relu(CTX(d), x, gamma, mean, invstd, y, dy, dx, dgamma, dbeta, eps, M, C));
}

static int b_bn_fwd_train(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                          float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                          float momentum, float eps, int M, int C)
{
    return R(kiln_cu_bn_fwd_train(CTX(d), x, gamma, beta, y, mean, invstd, run_mean, run_var,
                                  momentum, eps, M, C));
}

static int b_bn_fwd_infer(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                          const float *run_mean, const float *run_var, float eps, float *y, int M,
                          int C)
{
    return R(kiln_cu_bn_fwd_infer(CTX(d), x, gamma, beta, run_mean, run_var, eps, y, M, C));
}

static int b_bn_bwd(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                    const float *invstd, const float *dy, float *dx, float *dgamma, float *dbeta,
                    float eps, int M, int C)
{
    return R(kiln_cu_bn_bwd(CTX(d), x, gamma, mean, invstd, dy, dx, dgamma, dbeta, eps, M, C));
}

static int b_relu_fwd(kiln__dev *d, const float *x, float *y, size_t n)
{
    return R(kiln_cu_relu_ew(CTX(d), x, y, n));
}

static int b_relu_bwd(kiln__dev *d, const float *y, const float *dy, float *dx, size_t n)
{
    return R(kiln_cu_relu_mask(CTX(d), y, dy, dx, n));
}

static int b_add(kiln__dev *d, const float *a, const float *b, float *y, size_t n)
{
    return R(kiln_cu_add_fwd(CTX(d), a, b, y, n));
}

static int b_pad2d(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p)
{
    return R(kiln_cu_pad2d(CTX(d), src, dst, n, s, c, p));
}

static int b_crop2d(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p)
{
    return R(kiln_cu_crop2d(CTX(d), src, dst, n, s, c, p));
}

static int b_xent(kiln__dev *d, const float *logits, const int32_t *labels, int B, int K,
                  float *dlogits, float grad_scale, float *loss, int *correct)
{
    return R(kiln_cu_xent(CTX(d), logits, labels, B, K, dlogits, grad_scale, loss, correct));
}

static int b_scale_check(kiln__dev *d, float *g, size_t n, float factor, int *found)
{
    return R(kiln_cu_scale_check(CTX(d), g, n, factor, found));
}

static int b_sgd(kiln__dev *d, float *p, const float *g, float *v, size_t n, const float *hyper)
{
    return R(kiln_cu_sgd_update_dev(CTX(d), p, g, v, n, hyper));
}

static int b_adam(kiln__dev *d, float *p, const float *g, float *m, float *v, size_t n,
                  const float *hyper)
{
    return R(kiln_cu_adam_update_dev(CTX(d), p, g, m, v, n, hyper));
}

static const kiln__backend table = {
    .abi = KILN__BACKEND_ABI,
    .name = "cuda",
    .open = b_open,
    .close = b_close,
    .error = b_error,
    .describe = b_describe,
    .set_tf32 = b_set_tf32,
    .set_precision = b_set_precision,
    .set_option = b_set_option,
    .mem_used = b_mem_used,
    .sync = b_sync,
    .alloc = b_alloc,
    .free = b_free,
    .host_alloc = b_host_alloc,
    .host_free = b_host_free,
    .upload = b_upload,
    .download = b_download,
    .upload_async = b_upload_async,
    .upload_ordered = b_upload_ordered,
    .copy = b_copy,
    .download_async = b_download_async,
    .event_create = b_event_create,
    .event_free = b_event_free,
    .event_record = b_event_record,
    .event_wait = b_event_wait,
    .event_sync = b_event_sync,
    .upload_staged = b_upload_staged,
    .graph_begin = b_graph_begin,
    .graph_end = b_graph_end,
    .graph_launch = b_graph_launch,
    .graph_free = b_graph_free,
    .mem_epoch = b_mem_epoch,
    .dense_fwd = b_dense_fwd,
    .dense_bwd = b_dense_bwd,
    .conv_fwd = b_conv_fwd,
    .conv_bwd = b_conv_bwd,
    .maxpool_fwd = b_maxpool_fwd,
    .maxpool_bwd = b_maxpool_bwd,
    .avgpool_fwd = b_avgpool_fwd,
    .avgpool_bwd = b_avgpool_bwd,
    .bn_fwd_train = b_bn_fwd_train,
    .bn_fwd_train_add_relu = b_bn_fwd_train_add_relu,
    .bn_bwd_relu = b_bn_bwd_relu,
    .bn_fwd_infer = b_bn_fwd_infer,
    .bn_bwd = b_bn_bwd,
    .relu_fwd = b_relu_fwd,
    .relu_bwd = b_relu_bwd,
    .add = b_add,
    .pad2d = b_pad2d,
    .crop2d = b_crop2d,
    .xent = b_xent,
    .scale_check = b_scale_check,
    .sgd = b_sgd,
    .adam = b_adam,
};

EXPORT const kiln__backend *kiln_cuda_backend_v1(void)
{
    return &table;
}
