/* cuda/cuda_ops.h - the CUDA backend's ops (internal; tests use it).
 *
 * Each op computes what its CPU namesake in ops/ops.h (or optim/optim.h)
 * computes, on device memory, with the same layouts: row-major, NHWC
 * activations, dense weights [in, out], conv weights [KH, KW, C, OC] (HWIO).
 * Backward functions overwrite dx (NULL skips it); dw/db are
 * dw = beta*dw + grad (beta 0: overwrite, like kiln_*_bwd; beta = momentum:
 * the CPU's kiln_*_bwd_acc). With relu set, backward first masks dy IN PLACE
 * (dy = 0 where y <= 0), exactly as on the CPU.
 *
 * Engines: cuBLAS for GEMMs (sgemm; cublasGemmEx with fp32 accumulation for
 * bf16/fp16), cuDNN for convolution, pooling, batch norm and ReLU (NHWC
 * fp32, v7 "Get" heuristics, one growing workspace), own kernels for the
 * rest (cuda/kernels.cu). TF32 is off unless kiln_cu_set_tf32 turns it on:
 * the tests compare fp32 results with the CPU reference.
 *
 * All work is queued on the context's compute stream; functions return when
 * it is queued, except those that say they synchronise. Every CUDA, cuBLAS
 * and cuDNN status is checked; on failure the function returns KILN_EIO (or
 * KILN_EINVAL / KILN_ENOMEM) and kiln_cu_error() names the device and the
 * call, e.g. "/gpu:1: cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM". Errors of kernels
 * surface at the next synchronising call. One thread per context. */
#ifndef KILN_CUDA_OPS_H
#define KILN_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "ops/ops.h" /* kiln_conv_shape, kiln_pool_shape */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cuda_ctx kiln_cuda_ctx;

/* Low-precision element types for mixed precision (2 bytes each). */
typedef enum kiln_cu_dtype { KILN_CU_BF16 = 0, KILN_CU_FP16 = 1 } kiln_cu_dtype;

/* ---- context: device, streams, cuBLAS and cuDNN handles, workspace ---- */
/* Selects visible device `device` (see kiln/cuda.h for CUDA_VISIBLE_DEVICES)
 * and creates a compute stream, a copy stream and the library handles. On
 * failure *out is NULL and err says which call failed. */
kiln_err kiln_cu_ctx_create(int device, kiln_cuda_ctx **out, char *err, size_t errlen);
void kiln_cu_ctx_destroy(kiln_cuda_ctx *c); /* NULL is fine; synchronises first */
const char *kiln_cu_error(const kiln_cuda_ctx *c);
int kiln_cu_device(const kiln_cuda_ctx *c);
/* Allow TF32 tensor cores for fp32 GEMMs and convolutions (off by default). */
kiln_err kiln_cu_set_tf32(kiln_cuda_ctx *c, int allow);
/* Batch norm on cuDNN's kernels (1) or kiln's own (0, the default:
 * cuDNN's legacy kernels are slow on NHWC rows; $KILN_BN=cudnn picks
 * cuDNN's at context creation). Both compute the CPU reference's result. */
void kiln_cu_set_bn_cudnn(kiln_cuda_ctx *c, int on);
/* The backend table's set_option (backend.h's KILN__OPT_*): KILN_EINVAL
 * with a sentence for an option or value this backend does not have. */
kiln_err kiln_cu_set_option(kiln_cuda_ctx *c, int opt, int val);
/* the device's memory in use (total - free, every process's) */
kiln_err kiln_cu_mem_used(kiln_cuda_ctx *c, size_t *bytes);
/* Waits for all queued work; reports errors of earlier kernels. */
kiln_err kiln_cu_sync(kiln_cuda_ctx *c);

/* ---- memory ---- */
/* Device allocation, zero-filled (synchronously, so it is ready at return). */
kiln_err kiln_cu_alloc(kiln_cuda_ctx *c, size_t bytes, void **out);
void kiln_cu_free(kiln_cuda_ctx *c, void *p); /* NULL is fine */
/* Synchronous copies (checkpoints, tests). */
kiln_err kiln_cu_upload(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
kiln_err kiln_cu_download(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* Pinned host memory for input batches: copies from it overlap compute. */
kiln_err kiln_cu_host_alloc(kiln_cuda_ctx *c, size_t bytes, void **out);
void kiln_cu_host_free(kiln_cuda_ctx *c, void *p);
/* Queues src (pinned) -> dst on the copy stream and makes the compute stream
 * wait for it: work queued afterwards sees the data, work queued before runs
 * alongside the copy. With two pinned buffers the caller fills one while the
 * other is in flight (double buffering); kiln_cu_copy_wait before reusing src. */
kiln_err kiln_cu_upload_async(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
kiln_err kiln_cu_copy_wait(kiln_cuda_ctx *c);
/* Events on the compute (copy 0) or copy (copy 1) stream: the backend
 * table's event_* (backend.h), for the input's double buffering. */
kiln_err kiln_cu_event_create(kiln_cuda_ctx *c, void **ev);
void kiln_cu_event_free(kiln_cuda_ctx *c, void *ev);
kiln_err kiln_cu_event_record(kiln_cuda_ctx *c, void *ev, int copy);
kiln_err kiln_cu_event_wait(kiln_cuda_ctx *c, void *ev, int copy);
kiln_err kiln_cu_event_sync(kiln_cuda_ctx *c, void *ev);
/* src (pinned) -> dst on the copy stream, nothing made to wait for it */
kiln_err kiln_cu_upload_staged(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);

/* ---- dense (cuBLAS) ---- */
kiln_err kiln_cu_dense_fwd(kiln_cuda_ctx *c, const float *x, const float *w, const float *b,
                           float *y, int B, int in, int out, int relu);
kiln_err kiln_cu_dense_bwd(kiln_cuda_ctx *c, const float *x, const float *w, const float *y,
                           float *dy, float *dx, float *dw, float *db, int B, int in, int out,
                           int relu, float beta);
/* Mixed precision forward: x and w in bf16/fp16 (cast copies of fp32 master
 * weights), products accumulated in fp32, y = act(x w + b) in fp32. */
kiln_err kiln_cu_dense_fwd_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, const void *x, const void *w,
                                const float *b, float *y, int B, int in, int out, int relu);

/* ---- conv2d (cuDNN; weights HWIO as on the CPU, transposed on the device
 *      to cuDNN's KRSC per call) ---- */
kiln_err kiln_cu_conv2d_fwd(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                            const float *w, const float *b, float *y, int relu);
kiln_err kiln_cu_conv2d_bwd(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                            const float *w, const float *y, float *dy, float *dx, float *dw,
                            float *db, int relu, float beta);

/* ---- pooling (cuDNN). No arg-max indices: backward recomputes the window
 *      maxima from x and y (on ties cuDNN may pick another element than the
 *      CPU's first maximum; the tests use tie-free inputs). ---- */
kiln_err kiln_cu_maxpool_fwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x, float *y);
kiln_err kiln_cu_maxpool_bwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x,
                             const float *y, const float *dy, float *dx);
kiln_err kiln_cu_avgpool_fwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x, float *y);
kiln_err kiln_cu_avgpool_bwd(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x,
                             const float *y, const float *dy, float *dx);

/* ---- batch norm over rows of x[M, C] (cuDNN spatial mode) ----
 * Same outputs as the CPU: saved mean and 1/sqrt(var+eps), running stats
 * r = (1-momentum)*r + momentum*batch (unbiased variance); run_mean and
 * run_var may both be NULL. Backward needs the forward's eps. */
kiln_err kiln_cu_bn_fwd_train(kiln_cuda_ctx *c, const float *x, const float *gamma,
                              const float *beta, float *y, float *mean, float *invstd,
                              float *run_mean, float *run_var, float momentum, float eps, int M,
                              int C);
/* y = max(bn(x) + res, 0) (res NULL: max(bn(x), 0)): on kiln's kernels one
 * apply pass for all three; with cuDNN's batch norm its forward, add and
 * ReLU in turn. The same bits as those three calls. */
kiln_err kiln_cu_bn_fwd_train_add_relu(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                       const float *beta, const float *res, float *y, float *mean,
                                       float *invstd, float *run_mean, float *run_var,
                                       float momentum, float eps, int M, int C);
kiln_err kiln_cu_bn_fwd_infer(kiln_cuda_ctx *c, const float *x, const float *gamma,
                              const float *beta, const float *run_mean, const float *run_var,
                              float eps, float *y, int M, int C);
kiln_err kiln_cu_bn_bwd(kiln_cuda_ctx *c, const float *x, const float *gamma, const float *mean,
                        const float *invstd, const float *dy, float *dx, float *dgamma,
                        float *dbeta, float eps, int M, int C);

/* The ReLU's backward (y its output) and batch norm's in one: dy masked by
 * y > 0, then kiln_cu_bn_bwd. On kiln's kernels the mask is read in both
 * passes (dy left as it was); with cuDNN's batch norm dy is masked in
 * place first. dy's contents after the call are unspecified. The same bits
 * as kiln_cu_relu_bwd then kiln_cu_bn_bwd. */
kiln_err kiln_cu_bn_bwd_relu(kiln_cuda_ctx *c, const float *x, const float *gamma,
                             const float *mean, const float *invstd, const float *y, float *dy,
                             float *dx, float *dgamma, float *dbeta, float eps, int M, int C);

/* ---- elementwise: ReLU via cuDNN, add via an own kernel ---- */
kiln_err kiln_cu_relu_fwd(kiln_cuda_ctx *c, const float *x, float *y, size_t n);
kiln_err kiln_cu_relu_bwd(kiln_cuda_ctx *c, const float *y, const float *dy, float *dx, size_t n);
kiln_err kiln_cu_add_fwd(kiln_cuda_ctx *c, const float *a, const float *b, float *y, size_t n);
kiln_err kiln_cu_add_bwd(kiln_cuda_ctx *c, const float *dy, float *da, float *db, size_t n);

/* ---- own kernels (cuda/kernels.cu) ---- */
/* y[i][j] = act(y[i][j] + b[j]) over y[M, N]; b may be NULL. */
kiln_err kiln_cu_bias_act(kiln_cuda_ctx *c, float *y, const float *b, int M, int N, int relu);
/* With relu: dy = 0 where y <= 0 (in place). Then db = beta*db + column sums
 * of dy[M, N] (db may be NULL). */
kiln_err kiln_cu_mask_colsum(kiln_cuda_ctx *c, float *dy, const float *y, int relu, float *db,
                             float beta, int M, int N);

/* Softmax cross-entropy over logits[B, K] with int32 labels (device memory;
 * the CPU takes uint8 labels, which cannot name 1000 classes). Writes the
 * mean loss to *loss and the number of rows whose label is the first arg-max
 * to *correct (both device pointers, either may be NULL) and, if dlogits is
 * not NULL, (softmax - onehot) * grad_scale / B. The row max is subtracted
 * before exp. A label outside 0..K-1 makes the loss NaN, so it cannot pass
 * unnoticed. grad_scale is the loss scale of fp16 training (1 otherwise). */
kiln_err kiln_cu_xent(kiln_cuda_ctx *c, const float *logits, const int32_t *labels, int B, int K,
                      float *dlogits, float grad_scale, float *loss, int *correct);

/* Optimizer updates, the CPU's arithmetic (optim/optim.h). */
kiln_err kiln_cu_sgd_update(kiln_cuda_ctx *c, float *p, const float *g, float *v, size_t n,
                            float lr, float momentum);
kiln_err kiln_cu_adam_update(kiln_cuda_ctx *c, float *p, const float *g, float *m, float *v,
                             size_t n, float lr, float b1, float b2, float eps, uint64_t t);

/* Casts for mixed precision (round to nearest even). */
kiln_err kiln_cu_cast_to_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, void *dst, const float *src,
                              size_t n);
kiln_err kiln_cu_cast_from_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, float *dst, const void *src,
                                size_t n);

/* dst = src rounded to t and back to fp32 (round to nearest even; fp16
 * overflows to inf): fp32 values a tensor-core format holds exactly. */
kiln_err kiln_cu_round_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, float *dst, const float *src,
                            size_t n);

/* ---- mixed precision (cuda/lowp.c): the runtime's backend table's rule
 * (backend/backend.h, set_precision) ----
 * After kiln_cu_set_lowp(c, 1, t) the _lp ops below take their GEMM and
 * convolution inputs rounded to t and sum in fp32; outputs, bias and the
 * bias gradient (the column sum of the fp32 dy, masked by ReLU first) stay
 * fp32. Dense: cublasGemmEx on bf16/fp16 copies, CUBLAS_COMPUTE_32F.
 * Convolution: cuDNN's fp32 NHWC convolution on rounded fp32 copies with
 * TF32 tensor cores allowed: a bf16 or fp16 value is exact in TF32, so the
 * products are those of the low-precision inputs and the sums fp32 (the
 * speed is TF32's, not bf16's: bf16 storage is the next step). Without
 * lowp on they are the fp32 ops. */
kiln_err kiln_cu_set_lowp(kiln_cuda_ctx *c, int on, kiln_cu_dtype t);
kiln_err kiln_cu_dense_fwd_lp(kiln_cuda_ctx *c, const float *x, const float *w, const float *b,
                              float *y, int B, int in, int out, int relu);
kiln_err kiln_cu_dense_bwd_lp(kiln_cuda_ctx *c, const float *x, const float *w, const float *y,
                              float *dy, float *dx, float *dw, float *db, int B, int in, int out,
                              int relu, float beta);
kiln_err kiln_cu_conv2d_fwd_lp(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                               const float *w, const float *b, float *y, int relu);
kiln_err kiln_cu_conv2d_bwd_lp(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                               const float *w, const float *y, float *dy, float *dx, float *dw,
                               float *db, int relu, float beta);

/* g *= factor, and *found (device int) is set to 1 if any result is inf or
 * NaN (never cleared here: zero it once per step, check all gradients, read
 * it back, then kiln_loss_scaler_update). factor = 1/scale unscales. */
kiln_err kiln_cu_scale_check(kiln_cuda_ctx *c, float *g, size_t n, float factor, int *found);

/* ---- the training step's helpers (the runtime's backend table) ---- */
/* dst (pinned host) <- src (device), queued on the compute stream: valid
 * after kiln_cu_sync. */
kiln_err kiln_cu_download_async(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* src (pageable host memory: CUDA stages it before returning, so the
 * caller may reuse it at once) -> dst, queued on the compute stream. */
kiln_err kiln_cu_upload_ordered(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* device -> device, queued on the compute stream */
kiln_err kiln_cu_copy_dev(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes);
/* The SGD and Adam updates above with their hyper-parameters read from
 * device memory (so a captured graph sees each step's learning rate):
 * SGD hyper = {lr, momentum}; Adam hyper = {lr/(1-b1^t), sqrt(1-b2^t), b1,
 * b2, eps} (optim/update.h's kiln__adam_consts). Same arithmetic. */
kiln_err kiln_cu_sgd_update_dev(kiln_cuda_ctx *c, float *p, const float *g, float *v, size_t n,
                                const float *hyper);
kiln_err kiln_cu_adam_update_dev(kiln_cuda_ctx *c, float *p, const float *g, float *m, float *v,
                                 size_t n, const float *hyper);
/* y = max(x, 0) (y may be x); dx = dy where y > 0, else 0 (dx may be dy). */
kiln_err kiln_cu_relu_ew(kiln_cuda_ctx *c, const float *x, float *y, size_t n);
kiln_err kiln_cu_relu_mask(kiln_cuda_ctx *c, const float *y, const float *dy, float *dx, size_t n);
/* NHWC zero padding of p pixels around [n, s, s, ch] into [n, s+2p, s+2p,
 * ch], and the crop back. */
kiln_err kiln_cu_pad2d(kiln_cuda_ctx *c, const float *src, float *dst, int n, int s, int ch, int p);
kiln_err kiln_cu_crop2d(kiln_cuda_ctx *c, const float *src, float *dst, int n, int s, int ch,
                        int p);

/* ---- CUDA graphs (cuda/graph.c) ----
 * Work queued on the compute stream between begin and end is recorded
 * (relaxed capture mode) instead of run; launch replays it. A graph holds
 * the addresses it was captured with, workspaces included:
 * kiln_cu_mem_epoch changes whenever the context replaced one, and a graph
 * older than that must not be launched. */
kiln_err kiln_cu_graph_begin(kiln_cuda_ctx *c);
/* Ends the capture (also after a failed op, so the stream is usable again);
 * *graph is NULL on failure. */
kiln_err kiln_cu_graph_end(kiln_cuda_ctx *c, void **graph);
kiln_err kiln_cu_graph_launch(kiln_cuda_ctx *c, void *graph);
void kiln_cu_graph_free(kiln_cuda_ctx *c, void *graph);
unsigned long kiln_cu_mem_epoch(const kiln_cuda_ctx *c);

/* Host-side helpers for tests and tools: round-to-nearest-even conversions
 * that match the device casts bit for bit. */
uint16_t kiln_cu_f32_to_bf16_host(float f);
float kiln_cu_bf16_to_f32_host(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
