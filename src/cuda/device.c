/* cuda/device.c - the context (streams, cuBLAS and cuDNN handles,
 * workspace) and device memory. Host code only:
 * it calls the CUDA runtime and the libraries, so gcc compiles it with the
 * project's warnings; the kernels are in kernels.cu. */
#include "cuda/ctx.h"
#include "kiln/cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */

kiln_err kiln_cu__fail(kiln_cuda_ctx *c, const char *call, const char *reason)
{
    size_t n = strcspn(call, "(");
    /* the device too: one process may drive several GPUs (mirrored), and
     * "out of memory" means nothing until the user knows which one */
    snprintf(c->err, sizeof c->err, "/gpu:%d: %.*s: %s", c->device, (int)n, call, reason);
    return KILN_EIO;
}

kiln_err kiln_cu__invalid(kiln_cuda_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return KILN_EINVAL;
}

kiln_err kiln_cu__enter(kiln_cuda_ctx *c)
{
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return kiln_cu__fail(c, "cudaSetDevice", cudaGetErrorString(e));
    /* A failed runtime call (a cudaMalloc out of memory, a cudaSetDevice on a
     * GPU that does not exist) also stays in this thread's last-error slot,
     * and the launch checks read that slot: without this, the next kernel
     * launched here, on any context, failed with the earlier call's error
     * (seen on an H100: "bias_act kernel: invalid device ordinal" after a
     * context for an absent /gpu:1 was refused). That failure was already
     * returned by its own call; sticky errors (a kernel fault) are not
     * cleared by this and still fail every later call. */
    (void)cudaGetLastError();
    return KILN_OK;
}

const char *kiln_cu__cublas_str(cublasStatus_t s)
{
    return cublasGetStatusName(s);
}

const char *kiln_cu_error(const kiln_cuda_ctx *c)
{
    return c->err;
}

int kiln_cu_device(const kiln_cuda_ctx *c)
{
    return c->device;
}

/* ---- context ---- */

kiln_err kiln_cu_ctx_create(int device, kiln_cuda_ctx **out, char *err, size_t errlen)
{
    kiln_err rc = KILN_OK;
    kiln_cuda_ctx *c = calloc(1, sizeof *c);
    int n = 0;

    *out = NULL;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return KILN_ENOMEM;
    }
    c->device = device;
    rc = kiln_cuda_device_count(&n, c->err, sizeof c->err);
    if (rc != KILN_OK) goto out;
    if (device < 0 || device >= n) {
        rc = kiln_cu__invalid(c, "/gpu:%d does not exist: this process sees %d GPU%s", device, n,
                              n == 1 ? "" : "s");
        goto out;
    }
    CK_CUDA(c, cudaSetDevice(device));
    CK_CUDA(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CK_CUDA(c, cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    CK_CUDA(c, cudaEventCreateWithFlags(&c->copied, cudaEventDisableTiming));
    CK_BLAS(c, cublasCreate(&c->blas));
    CK_BLAS(c, cublasSetStream(c->blas, c->stream));
    /* a workspace of its own (32 MiB: cuBLAS's advice for Hopper), so that
     * a captured graph never sees cuBLAS allocate */
    CK_CUDA(c, cudaMalloc(&c->blas_ws, KILN_CU_BLAS_WS));
    CK_BLAS(c, cublasSetWorkspace(c->blas, c->blas_ws, KILN_CU_BLAS_WS));
    CK_DNN(c, cudnnCreate(&c->dnn));
    CK_DNN(c, cudnnSetStream(c->dnn, c->stream));
    CK_KILN(kiln_cu_set_tf32(c, 0));
    /* convolution algorithms timed once per shape, as PyTorch's
     * cudnn.benchmark; KILN_CUDNN_FIND=0 takes cuDNN's heuristics instead */
    {
        const char *f = getenv("KILN_CUDNN_FIND"), *b = getenv("KILN_BN"),
                   *v = getenv("KILN_CUDNN_VERBOSE");
        c->autotune = !(f && strcmp(f, "0") == 0);
        /* KILN_BN=cudnn: batch norm on cuDNN's kernels (slow on NHWC rows) */
        c->bn_cudnn = b && strcmp(b, "cudnn") == 0;
        c->verbose = v && strcmp(v, "1") == 0;
    }
out:
    if (rc != KILN_OK) {
        snprintf(err, errlen, "%s", c->err);
        kiln_cu_ctx_destroy(c);
        return rc;
    }
    *out = c;
    return KILN_OK;
}

void kiln_cu_ctx_destroy(kiln_cuda_ctx *c)
{
    if (!c) return;
    /* handles and streams are freed on their device; a context refused
     * before cudaSetDevice succeeded has none, and must not leave that
     * call's "invalid device ordinal" behind for the next caller */
    if (c->stream) {
        cudaSetDevice(c->device);
        cudaStreamSynchronize(c->stream);
    }
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    if (c->lt) cublasLtDestroy(c->lt);
    c->lt = NULL;
    if (c->blas) cublasDestroy(c->blas); /* before its workspace */
    c->blas = NULL;
    cudaFree(c->blas_ws);
    cudaFree(c->ws);
    cudaFree(c->scratch);
    cudaFree(c->lowp_buf);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->copied) cudaEventDestroy(c->copied);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

kiln_err kiln_cu_set_tf32(kiln_cuda_ctx *c, int allow)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    /* CUBLAS_DEFAULT_MATH keeps sgemm in fp32 FMA (TF32 needs an explicit opt-in
     * since CUDA 11); NVIDIA_TF32_OVERRIDE=0 in the environment also wins. */
    CK_BLAS(c,
            cublasSetMathMode(c->blas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    c->tf32 = allow;
out:
    return rc;
}

void kiln_cu_set_bn_cudnn(kiln_cuda_ctx *c, int on)
{
    c->bn_cudnn = on;
}

kiln_err kiln_cu_mem_used(kiln_cuda_ctx *c, size_t *bytes)
{
    kiln_err rc = KILN_OK;
    size_t free_b = 0, total_b = 0;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMemGetInfo(&free_b, &total_b));
    *bytes = total_b - free_b;
out:
    return rc;
}

kiln_err kiln_cu_set_option(kiln_cuda_ctx *c, int opt, int val)
{
    /* 1 and 2 are backend.h's KILN__OPT_BN_CUDNN and KILN__OPT_CONV_NCHW
     * (this file does not include the runtime's headers; backend.c checks
     * the numbering) */
    if (opt == 1 && (val == 0 || val == 1)) {
        c->bn_cudnn = val;
        return KILN_OK;
    }
    if (opt == 2 && val == 1 && c->lowp)
        return kiln_cu__invalid(c, "cuda: NCHW convolutions are fp32 and tf32 only (mixed "
                                   "precision rounds NHWC copies, cuda/lowp.c)");
    if (opt == 2 && (val == 0 || val == 1)) {
        c->conv_nchw = val;
        return KILN_OK;
    }
    if (opt == 3 && (val == 0 || val == 1)) { /* KILN__OPT_DENSE_LT */
        c->dense_lt = val;
        return KILN_OK;
    }
    return kiln_cu__invalid(c, "cuda: no option %d=%d", opt, val);
}

kiln_err kiln_cu_sync(kiln_cuda_ctx *c)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaStreamSynchronize(c->stream));
    CK_CUDA(c, cudaGetLastError());
out:
    return rc;
}

static kiln_err grow(kiln_cuda_ctx *c, void **buf, size_t *have, size_t bytes)
{
    kiln_err rc = KILN_OK;
    void *p = NULL;
    if (bytes <= *have) return KILN_OK;
    /* the old buffer may still be read by queued work */
    CK_CUDA(c, cudaStreamSynchronize(c->stream));
    CK_CUDA(c, cudaFree(*buf));
    *buf = NULL;
    *have = 0;
    CK_CUDA(c, cudaMalloc(&p, bytes));
    *buf = p;
    *have = bytes;
    c->mem_epoch++;
out:
    return rc;
}

kiln_err kiln_cu__ensure_ws(kiln_cuda_ctx *c, size_t bytes)
{
    return grow(c, &c->ws, &c->ws_bytes, bytes);
}

kiln_err kiln_cu__ensure_lowp(kiln_cuda_ctx *c, size_t bytes)
{
    return grow(c, &c->lowp_buf, &c->lowp_bytes, bytes);
}

kiln_err kiln_cu__ensure_scratch(kiln_cuda_ctx *c, size_t bytes)
{
    void *p = c->scratch;
    kiln_err rc = grow(c, &p, &c->scratch_bytes, bytes);
    c->scratch = p;
    return rc;
}

/* ---- memory ---- */

kiln_err kiln_cu_alloc(kiln_cuda_ctx *c, size_t bytes, void **out)
{
    kiln_err rc = KILN_OK;
    void *p = NULL;
    *out = NULL;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMalloc(&p, bytes ? bytes : 1));
    CK_CUDA(c, cudaMemsetAsync(p, 0, bytes, c->stream));
    CK_CUDA(c, cudaStreamSynchronize(c->stream));
    *out = p;
    p = NULL;
out:
    cudaFree(p);
    return rc;
}

void kiln_cu_free(kiln_cuda_ctx *c, void *p)
{
    /* cudaFree synchronises the device: queued work using p finishes first */
    if (p && kiln_cu__enter(c) == KILN_OK) cudaFree(p);
}

/* On the compute stream, so the copy is ordered after queued work. */
/* A copy in compute-stream order; wait: until it (and all before it) is done. */
static kiln_err copy_on_stream(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                               enum cudaMemcpyKind kind, int wait)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMemcpyAsync(dst, src, bytes, kind, c->stream));
    if (wait) CK_CUDA(c, cudaStreamSynchronize(c->stream));
out:
    return rc;
}

kiln_err kiln_cu_upload(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    return copy_on_stream(c, dst, src, bytes, cudaMemcpyHostToDevice, 1);
}

kiln_err kiln_cu_download(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    return copy_on_stream(c, dst, src, bytes, cudaMemcpyDeviceToHost, 1);
}

kiln_err kiln_cu_host_alloc(kiln_cuda_ctx *c, size_t bytes, void **out)
{
    kiln_err rc = KILN_OK;
    *out = NULL;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMallocHost(out, bytes ? bytes : 1));
out:
    return rc;
}

void kiln_cu_host_free(kiln_cuda_ctx *c, void *p)
{
    if (p && kiln_cu__enter(c) == KILN_OK) cudaFreeHost(p);
}

kiln_err kiln_cu_upload_async(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    CK_CUDA(c, cudaEventRecord(c->copied, c->copy_stream));
    CK_CUDA(c, cudaStreamWaitEvent(c->stream, c->copied, 0));
out:
    return rc;
}

kiln_err kiln_cu_upload_staged(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream));
out:
    return rc;
}

kiln_err kiln_cu_event_create(kiln_cuda_ctx *c, void **ev)
{
    kiln_err rc = KILN_OK;
    cudaEvent_t e = NULL;
    *ev = NULL;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *ev = e;
out:
    return rc;
}

void kiln_cu_event_free(kiln_cuda_ctx *c, void *ev)
{
    if (ev && kiln_cu__enter(c) == KILN_OK) cudaEventDestroy((cudaEvent_t)ev);
}

kiln_err kiln_cu_event_record(kiln_cuda_ctx *c, void *ev, int copy)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaEventRecord((cudaEvent_t)ev, copy ? c->copy_stream : c->stream));
out:
    return rc;
}

kiln_err kiln_cu_event_wait(kiln_cuda_ctx *c, void *ev, int copy)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaStreamWaitEvent(copy ? c->copy_stream : c->stream, (cudaEvent_t)ev, 0));
out:
    return rc;
}

kiln_err kiln_cu_event_sync(kiln_cuda_ctx *c, void *ev)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaEventSynchronize((cudaEvent_t)ev));
out:
    return rc;
}

kiln_err kiln_cu_download_async(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    return copy_on_stream(c, dst, src, bytes, cudaMemcpyDeviceToHost, 0);
}

kiln_err kiln_cu_upload_ordered(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    return copy_on_stream(c, dst, src, bytes, cudaMemcpyHostToDevice, 0);
}

kiln_err kiln_cu_copy_dev(kiln_cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    return copy_on_stream(c, dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
}

unsigned long kiln_cu_mem_epoch(const kiln_cuda_ctx *c)
{
    return c->mem_epoch;
}

kiln_err kiln_cu_copy_wait(kiln_cuda_ctx *c)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaStreamSynchronize(c->copy_stream));
out:
    return rc;
}
