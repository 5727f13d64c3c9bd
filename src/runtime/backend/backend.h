/* backend/backend.h - the runtime's compute backends (internal).
 *
 * A backend is a table of functions over one device's memory: allocation,
 * copies, the numeric ops of a training step, and (where the device has
 * them) captured graphs. The sequential model (nn/model_dev.c) and the
 * ResNet (models/resnet_dev.c) run a step as a sequence of calls through
 * the table, so the same code trains on any backend:
 *
 *   cpu   backend/cpu.c, built into the runtime: the CPU ops on host memory.
 *         The CPU's own fast path (nn/model.c, which fuses SGD into the
 *         backward GEMMs) stays the default on the CPU; this table exists so
 *         that everything the GPU path does above the ops (buffers, state
 *         sync, the pipelined fit loop, checkpoints) runs and is tested on
 *         machines without a GPU, against that reference.
 *   cuda  src/cuda/backend.c, built as the plugin libkiln_cuda_backend.so
 *         (cuBLAS, cuDNN, own kernels) and loaded with dlopen when a model
 *         is put on a GPU (backend/backend_load.c): kiln-train and every program on
 *         the runtime start without CUDA's libraries, and a machine without
 *         them gets an error naming the missing library instead of a
 *         program that does not start.
 *
 * Conventions: every function returns 0, or -1 with a sentence the
 * backend's error() returns; pointers called "device" are memory of the
 * backend's alloc. Work is queued in order on the device's compute stream
 * and may still run when a call returns; sync() waits for all of it and
 * reports errors of earlier work. Layouts and contracts are those of
 * ops/ops.h and cuda/cuda_ops.h: row-major, NHWC activations, dense
 * weights [in, out], conv weights HWIO; backward overwrites dx (NULL skips
 * it), dw = beta*dw + grad, and with relu masks dy in place first.
 *
 * Mixed precision (set_precision): every GEMM and convolution (dense and
 * conv, forward and backward) takes its inputs rounded to bf16 or fp16
 * (round to nearest even; fp16 overflows to inf) and multiplies and sums
 * them in fp32, as tensor cores do; outputs, bias, activations, batch norm,
 * the loss and the optimizer stay fp32 (fp32 master weights). A bias
 * gradient is the column sum of the fp32 gradient (masked by ReLU first).
 * The CPU table does exactly that with its fp32 ops on rounded copies: the
 * reference the CUDA table is compared with.
 *
 * The table is versioned: a plugin whose abi differs is refused. */
#ifndef KILN_RT_BACKEND_H
#define KILN_RT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h" /* kiln_conv_shape, kiln_pool_shape */

#define KILN__BACKEND_ABI 5
/* the plugin's one exported symbol: const kiln__backend *kiln_cuda_backend_v1(void) */
#define KILN__CUDA_BACKEND_SYMBOL "kiln_cuda_backend_v1"
#define KILN__CUDA_BACKEND_LIB    "libkiln_cuda_backend.so"

typedef struct kiln__dev kiln__dev;

/* Optimizer hyper-parameters live in device memory, so that a captured
 * graph of the training step reads this step's learning rate instead of
 * the one it was captured with. SGD reads hyper[0..1], Adam hyper[0..4]. */
enum { KILN__H_LR = 0, KILN__H_MOMENTUM = 1, KILN__HYPER_SGD = 2 };
/* Adam: step size lr/(1-b1^t) and sqrt(1-b2^t) from kiln__adam_consts */
enum {
    KILN__H_ASTEP = 0,
    KILN__H_ASBC2 = 1,
    KILN__H_B1 = 2,
    KILN__H_B2 = 3,
    KILN__H_EPS = 4,
    KILN__HYPER_ADAM = 5
};
#define KILN__HYPER_MAX 8

/* set_option's options (the ResNet's variants, models/resnet_variant.h) */
enum {
    KILN__OPT_BN_CUDNN = 1,  /* 1: batch norm on cuDNN's kernels; 0: the backend's own */
    KILN__OPT_CONV_NCHW = 2, /* 1: fp32/tf32 convolutions on NCHW descriptors (NHWC data) */
    KILN__OPT_DENSE_LT = 3,  /* 1: dense forwards on cuBLASLt, bias and ReLU in its epilogue */
};

/* the streams events mark (event_record, event_wait) */
enum { KILN__STREAM_COMPUTE = 0, KILN__STREAM_COPY = 1 };

/* set_precision's formats */
enum { KILN__LOWP_OFF = 0, KILN__LOWP_BF16 = 1, KILN__LOWP_FP16 = 2 };

typedef struct kiln__backend {
    int abi; /* KILN__BACKEND_ABI */
    const char *name;

    /* ---- the device ---- */
    /* index: among the GPUs this process sees (CUDA_VISIBLE_DEVICES applied) */
    int (*open)(int index, kiln__dev **out, char *err, size_t errlen);
    void (*close)(kiln__dev *d); /* NULL is fine; waits for queued work */
    const char *(*error)(const kiln__dev *d);
    /* "NVIDIA H100 80GB HBM3" */
    void (*describe)(kiln__dev *d, char *buf, size_t len);
    /* TF32 tensor cores for fp32 GEMMs and convolutions (off by default) */
    int (*set_tf32)(kiln__dev *d, int on);
    /* KILN__LOWP_*: the format GEMM and convolution inputs are rounded to
     * (see above); KILN__LOWP_OFF: fp32 (or TF32 as set) */
    int (*set_precision)(kiln__dev *d, int lowp);
    /* KILN__OPT_*: an implementation choice; -1 with a sentence for one
     * this backend does not have (never ignored) */
    int (*set_option)(kiln__dev *d, int opt, int val);
    int (*sync)(kiln__dev *d);
    /* the device's memory in use, all processes' (NULL where the device has
     * no memory of its own): what a run's peak is read from after it */
    int (*mem_used)(kiln__dev *d, size_t *bytes);

    /* ---- memory ---- */
    int (*alloc)(kiln__dev *d, size_t bytes, void **out); /* zero-filled when it returns */
    void (*free)(kiln__dev *d, void *p);
    /* host memory the device copies from without staging (pinned) */
    int (*host_alloc)(kiln__dev *d, size_t bytes, void **out);
    void (*host_free)(kiln__dev *d, void *p);
    /* synchronous copies */
    int (*upload)(kiln__dev *d, void *dst, const void *src, size_t bytes);
    int (*download)(kiln__dev *d, void *dst, const void *src, size_t bytes);
    /* src (host_alloc memory) -> dst on the copy stream; work queued on the
     * compute stream afterwards sees the data, work queued before runs
     * alongside the copy. src must stay untouched until the next sync. */
    int (*upload_async)(kiln__dev *d, void *dst, const void *src, size_t bytes);
    /* src (any host memory, reusable when the call returns) -> dst in
     * compute-stream order: after the work queued before, before the work
     * queued after (a step's learning rate, while earlier steps still run) */
    int (*upload_ordered)(kiln__dev *d, void *dst, const void *src, size_t bytes);
    /* dst (host_alloc memory) <- src in compute-stream order; valid after sync */
    int (*download_async)(kiln__dev *d, void *dst, const void *src, size_t bytes);
    /* device -> device in compute-stream order (an fp16 step keeps batch
     * norm's running statistics aside, to put them back if it is skipped) */
    int (*copy)(kiln__dev *d, void *dst, const void *src, size_t bytes);

    /* ---- events: the input's double buffering (models/resnet_dev.c) ----
     * An event marks a point in one of the device's two streams,
     * KILN__STREAM_COMPUTE or KILN__STREAM_COPY: event_record marks it after
     * the work queued on that stream so far; event_wait makes the work
     * queued on `stream` afterwards wait for the mark (without the host
     * waiting); event_sync makes the host wait for it. An event never
     * recorded is complete. upload_staged copies src (host_alloc memory)
     * to dst on the copy stream with nothing waiting for it: events order
     * it against the steps (src untouched until its event is complete). */
    int (*event_create)(kiln__dev *d, void **ev);
    void (*event_free)(kiln__dev *d, void *ev); /* NULL is fine */
    int (*event_record)(kiln__dev *d, void *ev, int stream);
    int (*event_wait)(kiln__dev *d, void *ev, int stream);
    int (*event_sync)(kiln__dev *d, void *ev);
    int (*upload_staged)(kiln__dev *d, void *dst, const void *src, size_t bytes);

    /* ---- captured graphs (NULL where the device has none) ----
     * Between graph_begin and graph_end the ops are recorded instead of
     * run; graph_launch replays them. A graph holds the device addresses it
     * was captured with, workspaces included: mem_epoch() changes whenever
     * the backend replaced a workspace, and a graph captured before must
     * not be launched again. */
    int (*graph_begin)(kiln__dev *d);
    int (*graph_end)(kiln__dev *d, void **graph);
    int (*graph_launch)(kiln__dev *d, void *graph);
    void (*graph_free)(kiln__dev *d, void *graph);
    unsigned long (*mem_epoch)(kiln__dev *d);

    /* ---- ops ---- */
    int (*dense_fwd)(kiln__dev *d, const float *x, const float *w, const float *b, float *y, int B,
                     int in, int out, int relu);
    int (*dense_bwd)(kiln__dev *d, const float *x, const float *w, const float *y, float *dy,
                     float *dx, float *dw, float *db, int B, int in, int out, int relu, float beta);
    int (*conv_fwd)(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                    const float *b, float *y, int relu);
    int (*conv_bwd)(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                    const float *y, float *dy, float *dx, float *dw, float *db, int relu,
                    float beta);
    /* max-pool backward from x and y: the gradient goes to the first
     * element of each window equal to its maximum (the CPU's rule) */
    int (*maxpool_fwd)(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y);
    int (*maxpool_bwd)(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                       const float *dy, float *dx);
    int (*avgpool_fwd)(kiln__dev *d, const kiln_pool_shape *s, const float *x, float *y);
    int (*avgpool_bwd)(kiln__dev *d, const kiln_pool_shape *s, const float *x, const float *y,
                       const float *dy, float *dx);
    int (*bn_fwd_train)(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                        float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                        float momentum, float eps, int M, int C);
    /* bn_fwd_train with the residual add and the ReLU in the same pass:
     * y = max(bn(x) + res, 0), res NULL: y = max(bn(x), 0); the same bits
     * as bn_fwd_train, add (bn's output + res) and relu_fwd in turn */
    int (*bn_fwd_train_add_relu)(kiln__dev *d, const float *x, const float *gamma,
                                 const float *beta, const float *res, float *y, float *mean,
                                 float *invstd, float *run_mean, float *run_var, float momentum,
                                 float eps, int M, int C);
    int (*bn_fwd_infer)(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                        const float *run_mean, const float *run_var, float eps, float *y, int M,
                        int C);
    int (*bn_bwd)(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                  const float *invstd, const float *dy, float *dx, float *dgamma, float *dbeta,
                  float eps, int M, int C);
    /* relu_bwd (y the ReLU's output) then bn_bwd in one: dy masked by
     * y > 0; dy's contents after the call are unspecified (the fused pass
     * reads the mask instead of writing it) */
    int (*bn_bwd_relu)(kiln__dev *d, const float *x, const float *gamma, const float *mean,
                       const float *invstd, const float *y, float *dy, float *dx, float *dgamma,
                       float *dbeta, float eps, int M, int C);
    /* elementwise; y may be x (in place) */
    int (*relu_fwd)(kiln__dev *d, const float *x, float *y, size_t n);
    /* dx = dy where y > 0, else 0; dx may be dy */
    int (*relu_bwd)(kiln__dev *d, const float *y, const float *dy, float *dx, size_t n);
    /* y = a + b; y may be a or b */
    int (*add)(kiln__dev *d, const float *a, const float *b, float *y, size_t n);
    /* NHWC spatial zero padding by p pixels on every side, and its inverse
     * (crop: dst [n, s, s, c] from src [n, s+2p, s+2p, c]) */
    int (*pad2d)(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p);
    int (*crop2d)(kiln__dev *d, const float *src, float *dst, int n, int s, int c, int p);
    /* softmax cross-entropy, int32 labels; mean loss and the count of rows
     * whose label is the first arg-max into device scalars (either may be
     * NULL); dlogits (may be NULL) = (softmax - onehot) * grad_scale / B */
    int (*xent)(kiln__dev *d, const float *logits, const int32_t *labels, int B, int K,
                float *dlogits, float grad_scale, float *loss, int *correct);
    /* fp16 loss scaling: g *= factor (1/scale unscales), and the device int
     * *found set to 1 when a result is inf or NaN (never cleared here) */
    int (*scale_check)(kiln__dev *d, float *g, size_t n, float factor, int *found);
    /* the update rules of optim/update.h, hyper-parameters from device memory */
    int (*sgd)(kiln__dev *d, float *p, const float *g, float *v, size_t n, const float *hyper);
    int (*adam)(kiln__dev *d, float *p, const float *g, float *m, float *v, size_t n,
                const float *hyper);
} kiln__backend;

/* The CPU table (backend/cpu.c), and the same on the _ref ops (double
 * sums, plain loops: slow; what tests compare the GPU with). */
extern const kiln__backend kiln__backend_cpu;
extern const kiln__backend kiln__backend_cpu_ref;

/* The CUDA table: loads the plugin on first use (backend/backend_load.c). NULL with
 * a sentence in err when it cannot: not built, or a library missing. */
const kiln__backend *kiln__backend_cuda(char *err, size_t errlen);

/* dst[i] = src[i] rounded to lowp (KILN__LOWP_BF16/FP16) and back to fp32,
 * round to nearest even, NaN kept, fp16 beyond 65504 to inf: what the
 * CUDA casts (__float2bfloat16_rn, __float2half_rn) give. dst may be src. */
void kiln__round_lowp(int lowp, const float *src, float *dst, size_t n);

#endif
