/* cuda/ctx.h - the CUDA context's insides and the status checks every file
 * of the backend uses (private to src/cuda). */
#ifndef KILN_CUDA_CTX_H
#define KILN_CUDA_CTX_H

#include "cuda/cuda_ops.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CU_BLAS_WS ((size_t)32 << 20)

/* A convolution algorithm chosen for one shape and direction (dnn.c keeps
 * them, for the whole process). */
#define KILN_CU_ALGOS 512
typedef struct kiln_cu_algo {
    int key[12]; /* direction, n, h, w, c, oc, kh, kw, stride, pad, tf32, 1 timed / 2 not
                  * (+ 10 for NCHW descriptors) */
    int algo;
    size_t ws;
} kiln_cu_algo;

struct kiln_cuda_ctx {
    int device;
    cudaStream_t stream;      /* compute */
    cudaStream_t copy_stream; /* host -> device input batches */
    cudaEvent_t copied;       /* recorded after each async upload */
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *ws; /* cuDNN workspace, grown on demand, never shrunk */
    size_t ws_bytes;
    float *scratch; /* conv weights in cuDNN's layout; xent per-row losses */
    size_t scratch_bytes;
    unsigned long mem_epoch; /* + 1 each time ws or scratch is replaced (graphs) */
    void *blas_ws;           /* cuBLAS's workspace, set once: graph capture must not allocate */
    int autotune;            /* choose convolution algorithms by timing them (cudnnFind) */
    int bn_cudnn;            /* batch norm on cuDNN's kernels instead of kiln's (kernels.cu) */
    int conv_nchw;           /* fp32 convolutions on NCHW copies (dnn.c; the nchw variant) */
    int dense_lt;            /* dense forwards on cuBLASLt (blaslt.c; the cublaslt-fc variant) */
    cublasLtHandle_t lt;     /* made on the first cuBLASLt call */
    int verbose;             /* KILN_CUDNN_VERBOSE=1: each algorithm choice on stderr */
    int tf32;
    int lowp; /* mixed precision on (cuda/lowp.c), in format lowp_t */
    kiln_cu_dtype lowp_t;
    void *lowp_buf; /* the rounded / cast copies of one op's inputs */
    size_t lowp_bytes;
    char err[512];
};

/* Records "/gpu:<device>: <call>: <reason>" in c->err (call cut at its '(')
 * and returns KILN_EIO. */
kiln_err kiln_cu__fail(kiln_cuda_ctx *c, const char *call, const char *reason);
/* Records a bad-argument message and returns KILN_EINVAL. */
kiln_err kiln_cu__invalid(kiln_cuda_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *kiln_cu__cublas_str(cublasStatus_t s);
/* Makes c's GPU the calling thread's current device. Every entry point
 * calls it first: one thread may drive several contexts (mirrored), and
 * cudaMalloc, kernel launches and the cuBLAS/cuDNN handles all act on the
 * current device. cudaSetDevice to the current device costs next to nothing. */
kiln_err kiln_cu__enter(kiln_cuda_ctx *c);
/* kiln's batch-norm kernels (kernels.cu); the public kiln_cu_bn_* check
 * their arguments and choose between these and cuDNN's. */
kiln_err kiln_cu__bn_fwd_train_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                    const float *beta, float *y, float *mean, float *invstd,
                                    float *run_mean, float *run_var, float momentum, float eps,
                                    int M, int C);
/* the same, then y = max(y + res, 0) in the apply pass (res may be NULL) */
kiln_err kiln_cu__bn_fwd_train_add_relu_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                             const float *beta, const float *res, float *y,
                                             float *mean, float *invstd, float *run_mean,
                                             float *run_var, float momentum, float eps, int M,
                                             int C);
/* mask (may be NULL): a ReLU's output; dy counts as 0 where it is <= 0 */
kiln_err kiln_cu__bn_bwd_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                              const float *mean, const float *invstd, const float *mask,
                              const float *dy, float *dx, float *dgamma, float *dbeta, int M,
                              int C);
kiln_err kiln_cu__bn_fwd_infer_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                    const float *beta, const float *run_mean, const float *run_var,
                                    float eps, float *y, int M, int C);
kiln_err kiln_cu__maxpool_bwd_first(kiln_cuda_ctx *c, const kiln_pool_shape *s, const float *x,
                                    const float *y, const float *dy, float *dx);
/* the cublaslt-fc variant's dense forward, ab the inputs' type (blaslt.c) */
kiln_err kiln_cu__dense_fwd_lt(kiln_cuda_ctx *c, cudaDataType ab, const void *x, const void *w,
                               const float *b, float *y, int B, int in, int out, int relu);
/* Makes the workspace (or scratch) at least `bytes` large. */
kiln_err kiln_cu__ensure_ws(kiln_cuda_ctx *c, size_t bytes);
kiln_err kiln_cu__ensure_scratch(kiln_cuda_ctx *c, size_t bytes);
kiln_err kiln_cu__ensure_lowp(kiln_cuda_ctx *c, size_t bytes);

/* The checks: each jumps to the function's one cleanup label `out` with rc
 * set, so no path leaks a descriptor. */
#define CK_CUDA(c, call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            rc = kiln_cu__fail((c), #call, cudaGetErrorString(e_));                                \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
#define CK_BLAS(c, call)                                                                           \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            rc = kiln_cu__fail((c), #call, kiln_cu__cublas_str(s_));                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
#define CK_DNN(c, call)                                                                            \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
            rc = kiln_cu__fail((c), #call, cudnnGetErrorString(s_));                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
#define CK_KILN(call)                                                                              \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc != KILN_OK) goto out;                                                               \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
