/* cuda/kernels.cu - the backend's own kernels, for what cuBLAS and cuDNN do
 * not serve: bias + ReLU, the ReLU mask fused with the bias gradient, add,
 * softmax cross-entropy, SGD and Adam updates, fp32 <-> bf16/fp16 casts and
 * the loss-scaling check.
 *
 * Arithmetic that the CPU does with -ffp-contract=off is written here with
 * __fmul_rn/__fadd_rn (never contracted into an FMA), and sqrtf and '/' are
 * IEEE-rounded (nvcc's default -prec-sqrt/-prec-div), so the elementwise
 * updates compute the CPU's exact operations. Reductions (column sums, the
 * softmax sum) run in a fixed order per launch configuration, so results do
 * not change from run to run, but their order differs from the CPU's. */
#include "cuda/ctx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#define THREADS 256

/* Enough blocks to fill any current GPU; grid-stride loops do the rest. */
static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return b < 1 ? 1u : b > 8192 ? 8192u : (unsigned)b;
}

#define FOR_EACH(i, n)                                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* Launch errors (bad configuration, no kernel image for this GPU) show at
 * once; faults inside kernels show at the next synchronising call. */
#define CK_LAUNCH(c, what)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) {                                                                   \
            rc = kiln_cu__fail((c), what, cudaGetErrorString(e_));                                 \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* ---- bias + ReLU ---- */

__global__ void bias_act_k(float *y, const float *b, size_t total, int N, int relu)
{
    FOR_EACH(i, total)
    {
        float v = y[i];
        if (b) v = __fadd_rn(v, b[i % (size_t)N]);
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

extern "C" kiln_err kiln_cu_bias_act(kiln_cuda_ctx *c, float *y, const float *b, int M, int N,
                                     int relu)
{
    kiln_err rc = KILN_OK;
    size_t total = (size_t)M * (size_t)N;
    if (total == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    bias_act_k<<<blocks_for(total), THREADS, 0, c->stream>>>(y, b, total, N, relu);
    CK_LAUNCH(c, "bias_act kernel");
out:
    return rc;
}

/* ---- ReLU mask + column sums (bias gradient) ----
 * Block (32, 16): the 32 threads of a warp take 32 adjacent columns (loads
 * coalesce); the 16 rows of threads stride down the rows; a fixed-order
 * reduction over the 16 partial sums follows. */
#define CS_COLS 32
#define CS_ROWS 16

__global__ void mask_colsum_k(float *dy, const float *y, int relu, float *db, float beta, int M,
                              int N)
{
    __shared__ float part[CS_ROWS][CS_COLS];
    int j = blockIdx.x * CS_COLS + threadIdx.x;
    float acc = 0.0f;
    if (j < N)
        for (int i = threadIdx.y; i < M; i += CS_ROWS) {
            size_t k = (size_t)i * N + j;
            float g = dy[k];
            if (relu && y[k] <= 0.0f) {
                g = 0.0f;
                dy[k] = 0.0f;
            }
            acc = __fadd_rn(acc, g);
        }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < N && db) {
        float s = 0.0f;
        for (int r = 0; r < CS_ROWS; r++)
            s = __fadd_rn(s, part[r][threadIdx.x]);
        /* beta 0 overwrites: db may hold garbage (0 * NaN is NaN) */
        db[j] = beta == 0.0f ? s : __fadd_rn(__fmul_rn(beta, db[j]), s);
    }
}

extern "C" kiln_err kiln_cu_mask_colsum(kiln_cuda_ctx *c, float *dy, const float *y, int relu,
                                        float *db, float beta, int M, int N)
{
    kiln_err rc = KILN_OK;
    dim3 block(CS_COLS, CS_ROWS), grid((unsigned)((N + CS_COLS - 1) / CS_COLS));
    if (M < 1 || N < 1) return kiln_cu__invalid(c, "mask_colsum: bad shape %dx%d", M, N);
    if (!relu && !db) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    mask_colsum_k<<<grid, block, 0, c->stream>>>(dy, y, relu, db, beta, M, N);
    CK_LAUNCH(c, "mask_colsum kernel");
out:
    return rc;
}

/* ---- add ---- */

__global__ void add_k(const float *a, const float *b, float *y, size_t n)
{
    FOR_EACH(i, n) y[i] = __fadd_rn(a[i], b[i]);
}

extern "C" kiln_err kiln_cu_add_fwd(kiln_cuda_ctx *c, const float *a, const float *b, float *y,
                                    size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    add_k<<<blocks_for(n), THREADS, 0, c->stream>>>(a, b, y, n);
    CK_LAUNCH(c, "add kernel");
out:
    return rc;
}

extern "C" kiln_err kiln_cu_add_bwd(kiln_cuda_ctx *c, const float *dy, float *da, float *db,
                                    size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    if (da && da != dy)
        CK_CUDA(c, cudaMemcpyAsync(da, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    if (db && db != dy)
        CK_CUDA(c, cudaMemcpyAsync(db, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
out:
    return rc;
}

/* ---- softmax cross-entropy: one block per row, then one block sums the
 *      per-row losses in a fixed order ---- */

__global__ void xent_rows_k(const float *logits, const int32_t *labels, int K, float *dlogits,
                            float gscale, float *row_loss, int *row_ok)
{
    __shared__ float sv[THREADS];
    __shared__ int si[THREADS];
    const float *z = logits + (size_t)blockIdx.x * K;
    int t = threadIdx.x, lab = labels[blockIdx.x];
    int B = gridDim.x;

    /* arg-max, the first one on ties (the CPU's rule) */
    float best = -INFINITY;
    int bi = K;
    for (int k = t; k < K; k += THREADS)
        if (bi == K || z[k] > best) {
            best = z[k];
            bi = k;
        }
    sv[t] = best;
    si[t] = bi;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            float ov = sv[t + s];
            int oi = si[t + s];
            if (oi < K && (si[t] == K || ov > sv[t] || (ov == sv[t] && oi < si[t]))) {
                sv[t] = ov;
                si[t] = oi;
            }
        }
        __syncthreads();
    }
    float mx = sv[0];
    int am = si[0];
    __syncthreads();

    float acc = 0.0f;
    for (int k = t; k < K; k += THREADS)
        acc += expf(z[k] - mx);
    sv[t] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sv[t] += sv[t + s];
        __syncthreads();
    }
    float sum = sv[0];
    int bad = lab < 0 || lab >= K;

    if (dlogits) {
        float *d = dlogits + (size_t)blockIdx.x * K;
        float f = gscale / (float)B;
        for (int k = t; k < K; k += THREADS)
            d[k] = bad ? NAN : (expf(z[k] - mx) / sum - (k == lab ? 1.0f : 0.0f)) * f;
    }
    if (t == 0) {
        row_loss[blockIdx.x] = bad ? NAN : logf(sum) - (z[lab] - mx);
        row_ok[blockIdx.x] = !bad && am == lab;
    }
}

__global__ void xent_sum_k(const float *row_loss, const int *row_ok, int B, float *loss,
                           int *correct)
{
    __shared__ float sv[THREADS];
    __shared__ int si[THREADS];
    int t = threadIdx.x;
    float a = 0.0f;
    int ok = 0;
    for (int i = t; i < B; i += THREADS) {
        a += row_loss[i];
        ok += row_ok[i];
    }
    sv[t] = a;
    si[t] = ok;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            sv[t] += sv[t + s];
            si[t] += si[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        if (loss) *loss = sv[0] / (float)B;
        if (correct) *correct = si[0];
    }
}

extern "C" kiln_err kiln_cu_xent(kiln_cuda_ctx *c, const float *logits, const int32_t *labels,
                                 int B, int K, float *dlogits, float grad_scale, float *loss,
                                 int *correct)
{
    kiln_err rc = KILN_OK;
    float *row_loss;
    int *row_ok;
    if (B < 1 || K < 1 || B > 65535 * 1024)
        return kiln_cu__invalid(c, "xent: bad shape B=%d K=%d", B, K);
    CK_KILN(kiln_cu__enter(c));
    CK_KILN(kiln_cu__ensure_scratch(c, 2 * sizeof(float) * (size_t)B));
    row_loss = c->scratch;
    row_ok = (int *)(c->scratch + B);
    xent_rows_k<<<(unsigned)B, THREADS, 0, c->stream>>>(logits, labels, K, dlogits, grad_scale,
                                                        row_loss, row_ok);
    CK_LAUNCH(c, "xent_rows kernel");
    xent_sum_k<<<1, THREADS, 0, c->stream>>>(row_loss, row_ok, B, loss, correct);
    CK_LAUNCH(c, "xent_sum kernel");
out:
    return rc;
}

/* ---- optimizers: the CPU's per-element operations, uncontracted ----
 * One element's update each, shared by the kernels that take their
 * hyper-parameters by value and those that read them from device memory. */

__device__ __forceinline__ void sgd_elem(float *p, const float *g, float *v, size_t i, float lr,
                                         float mom)
{
    float vi = __fadd_rn(__fmul_rn(mom, v[i]), g[i]);
    v[i] = vi;
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, vi));
}

__device__ __forceinline__ void adam_elem(float *p, const float *g, float *m, float *v, size_t i,
                                          float b1, float b2, float eps, float step, float sbc2)
{
    float gi = g[i];
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(__fsub_rn(1.0f, b1), gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gi), gi));
    m[i] = mi;
    v[i] = vi;
    float den = __fadd_rn(__fdiv_rn(sqrtf(vi), sbc2), eps);
    p[i] = __fsub_rn(p[i], __fdiv_rn(__fmul_rn(step, mi), den));
}

__global__ void sgd_k(float *p, const float *g, float *v, size_t n, float lr, float mom)
{
    FOR_EACH(i, n) sgd_elem(p, g, v, i, lr, mom);
}

extern "C" kiln_err kiln_cu_sgd_update(kiln_cuda_ctx *c, float *p, const float *g, float *v,
                                       size_t n, float lr, float momentum)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    sgd_k<<<blocks_for(n), THREADS, 0, c->stream>>>(p, g, v, n, lr, momentum);
    CK_LAUNCH(c, "sgd kernel");
out:
    return rc;
}

__global__ void adam_k(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                       float eps, float step, float sbc2)
{
    FOR_EACH(i, n) adam_elem(p, g, m, v, i, b1, b2, eps, step, sbc2);
}

extern "C" kiln_err kiln_cu_adam_update(kiln_cuda_ctx *c, float *p, const float *g, float *m,
                                        float *v, size_t n, float lr, float b1, float b2, float eps,
                                        uint64_t t)
{
    kiln_err rc = KILN_OK;
    /* bias corrections in double, rounded once: optim.c's adam_consts */
    double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
    float step = (float)(lr / bc1), sbc2 = (float)sqrt(bc2);
    if (n == 0) return KILN_OK;
    if (t < 1) return kiln_cu__invalid(c, "adam: step number t starts at 1");
    CK_KILN(kiln_cu__enter(c));
    adam_k<<<blocks_for(n), THREADS, 0, c->stream>>>(p, g, m, v, n, b1, b2, eps, step, sbc2);
    CK_LAUNCH(c, "adam kernel");
out:
    return rc;
}

/* ---- casts ---- */

__global__ void to_bf16_k(__nv_bfloat16 *d, const float *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __float2bfloat16_rn(s[i]);
}
__global__ void to_fp16_k(__half *d, const float *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __float2half_rn(s[i]);
}
__global__ void from_bf16_k(float *d, const __nv_bfloat16 *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __bfloat162float(s[i]);
}
__global__ void from_fp16_k(float *d, const __half *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __half2float(s[i]);
}

extern "C" kiln_err kiln_cu_cast_to_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, void *dst,
                                         const float *src, size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    if (t == KILN_CU_BF16)
        to_bf16_k<<<blocks_for(n), THREADS, 0, c->stream>>>((__nv_bfloat16 *)dst, src, n);
    else
        to_fp16_k<<<blocks_for(n), THREADS, 0, c->stream>>>((__half *)dst, src, n);
    CK_LAUNCH(c, "cast kernel");
out:
    return rc;
}

extern "C" kiln_err kiln_cu_cast_from_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, float *dst,
                                           const void *src, size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    if (t == KILN_CU_BF16)
        from_bf16_k<<<blocks_for(n), THREADS, 0, c->stream>>>(dst, (const __nv_bfloat16 *)src, n);
    else
        from_fp16_k<<<blocks_for(n), THREADS, 0, c->stream>>>(dst, (const __half *)src, n);
    CK_LAUNCH(c, "cast kernel");
out:
    return rc;
}

/* dst = src rounded to bf16/fp16 and back (mixed precision on fp32 math:
 * cuda/lowp.c); the same rounding as the casts above */
__global__ void round_bf16_k(float *d, const float *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __bfloat162float(__float2bfloat16_rn(s[i]));
}
__global__ void round_fp16_k(float *d, const float *s, size_t n)
{
    FOR_EACH(i, n) d[i] = __half2float(__float2half_rn(s[i]));
}

extern "C" kiln_err kiln_cu_round_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, float *dst,
                                       const float *src, size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    if (t == KILN_CU_BF16)
        round_bf16_k<<<blocks_for(n), THREADS, 0, c->stream>>>(dst, src, n);
    else
        round_fp16_k<<<blocks_for(n), THREADS, 0, c->stream>>>(dst, src, n);
    CK_LAUNCH(c, "round kernel");
out:
    return rc;
}

/* ---- loss scaling ---- */

__global__ void scale_check_k(float *g, size_t n, float factor, int *found)
{
    int bad = 0;
    FOR_EACH(i, n)
    {
        float v = __fmul_rn(g[i], factor);
        g[i] = v;
        bad |= !isfinite(v);
    }
    /* one store per warp at most; any non-zero value means "found" */
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *found = 1;
}

extern "C" kiln_err kiln_cu_scale_check(kiln_cuda_ctx *c, float *g, size_t n, float factor,
                                        int *found)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    scale_check_k<<<blocks_for(n), THREADS, 0, c->stream>>>(g, n, factor, found);
    CK_LAUNCH(c, "scale_check kernel");
out:
    return rc;
}

/* ---- host helpers ---- */

extern "C" uint16_t kiln_cu_f32_to_bf16_host(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

extern "C" float kiln_cu_bf16_to_f32_host(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the training step's helpers (cuda_ops.h) ---- */

/* hyper-parameters read once per thread from device memory: the same
 * values, the same per-element operations as sgd_k / adam_k */
__global__ void sgd_dev_k(float *p, const float *g, float *v, size_t n, const float *hyper)
{
    float lr = hyper[0], mom = hyper[1];
    FOR_EACH(i, n) sgd_elem(p, g, v, i, lr, mom);
}

extern "C" kiln_err kiln_cu_sgd_update_dev(kiln_cuda_ctx *c, float *p, const float *g, float *v,
                                           size_t n, const float *hyper)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    sgd_dev_k<<<blocks_for(n), THREADS, 0, c->stream>>>(p, g, v, n, hyper);
    CK_LAUNCH(c, "sgd kernel");
out:
    return rc;
}

__global__ void adam_dev_k(float *p, const float *g, float *m, float *v, size_t n,
                           const float *hyper)
{
    float step = hyper[0], sbc2 = hyper[1], b1 = hyper[2], b2 = hyper[3], eps = hyper[4];
    FOR_EACH(i, n) adam_elem(p, g, m, v, i, b1, b2, eps, step, sbc2);
}

extern "C" kiln_err kiln_cu_adam_update_dev(kiln_cuda_ctx *c, float *p, const float *g, float *m,
                                            float *v, size_t n, const float *hyper)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    adam_dev_k<<<blocks_for(n), THREADS, 0, c->stream>>>(p, g, m, v, n, hyper);
    CK_LAUNCH(c, "adam kernel");
out:
    return rc;
}

__global__ void relu_ew_k(const float *x, float *y, size_t n)
{
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" kiln_err kiln_cu_relu_ew(kiln_cuda_ctx *c, const float *x, float *y, size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    relu_ew_k<<<blocks_for(n), THREADS, 0, c->stream>>>(x, y, n);
    CK_LAUNCH(c, "relu kernel");
out:
    return rc;
}

__global__ void relu_mask_k(const float *y, const float *dy, float *dx, size_t n)
{
    FOR_EACH(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

extern "C" kiln_err kiln_cu_relu_mask(kiln_cuda_ctx *c, const float *y, const float *dy, float *dx,
                                      size_t n)
{
    kiln_err rc = KILN_OK;
    if (n == 0) return KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    relu_mask_k<<<blocks_for(n), THREADS, 0, c->stream>>>(y, dy, dx, n);
    CK_LAUNCH(c, "relu mask kernel");
out:
    return rc;
}

/* One thread per element of the padded tensor [n, sp, sp, ch]: inside the
 * border it copies from src, on it writes 0 (pad); crop walks dst [n, s,
 * s, ch] and reads the padded src. */
__global__ void pad2d_k(const float *src, float *dst, size_t total, int s, int ch, int p)
{
    int sp = s + 2 * p;
    FOR_EACH(i, total)
    {
        size_t t = i / (size_t)ch;
        int c = (int)(i % (size_t)ch), x = (int)(t % (size_t)sp), y = (int)(t / sp % (size_t)sp);
        size_t img = t / ((size_t)sp * sp);
        int sx = x - p, sy = y - p;
        dst[i] = sx >= 0 && sx < s && sy >= 0 && sy < s
                     ? src[((img * s + (size_t)sy) * s + (size_t)sx) * ch + c]
                     : 0.0f;
    }
}

__global__ void crop2d_k(const float *src, float *dst, size_t total, int s, int ch, int p)
{
    size_t sp = (size_t)s + 2 * (size_t)p;
    FOR_EACH(i, total)
    {
        size_t t = i / (size_t)ch;
        int c = (int)(i % (size_t)ch);
        size_t x = t % (size_t)s, y = t / s % (size_t)s, img = t / ((size_t)s * s);
        dst[i] = src[((img * sp + y + p) * sp + x + p) * ch + c];
    }
}

extern "C" kiln_err kiln_cu_pad2d(kiln_cuda_ctx *c, const float *src, float *dst, int n, int s,
                                  int ch, int p)
{
    kiln_err rc = KILN_OK;
    size_t sp = (size_t)s + 2 * (size_t)p, total = (size_t)n * sp * sp * ch;
    if (n < 1 || s < 1 || ch < 1 || p < 0)
        return kiln_cu__invalid(c, "pad2d: bad shape n=%d s=%d c=%d p=%d", n, s, ch, p);
    CK_KILN(kiln_cu__enter(c));
    pad2d_k<<<blocks_for(total), THREADS, 0, c->stream>>>(src, dst, total, s, ch, p);
    CK_LAUNCH(c, "pad2d kernel");
out:
    return rc;
}

extern "C" kiln_err kiln_cu_crop2d(kiln_cuda_ctx *c, const float *src, float *dst, int n, int s,
                                   int ch, int p)
{
    kiln_err rc = KILN_OK;
    size_t total = (size_t)n * s * s * ch;
    if (n < 1 || s < 1 || ch < 1 || p < 0)
        return kiln_cu__invalid(c, "crop2d: bad shape n=%d s=%d c=%d p=%d", n, s, ch, p);
    CK_KILN(kiln_cu__enter(c));
    crop2d_k<<<blocks_for(total), THREADS, 0, c->stream>>>(src, dst, total, s, ch, p);
    CK_LAUNCH(c, "crop2d kernel");
out:
    return rc;
}

/* ---- batch norm over the rows of x[M, C] (NHWC), kiln's own kernels ----
 * cuDNN's legacy batch norm takes these rows as an NCHW [M, C, 1, 1]
 * tensor, a shape its kernels are not made for: on an H100 it took 64% of
 * a ResNet-50 step (docs/gpu.md). These are three memory-bound passes each
 * way: per-block partial sums (double, a fixed order: deterministic), the
 * per-channel statistics from them (one thread a channel, blocks in order),
 * then the elementwise map, in double like the CPU reference
 * (ops/bn.c, kiln_bn_*_ref). The partial sums live in the context's
 * scratch, free again when the call's kernels have run (stream order). */
#define BN_COLS       32
#define BN_LANES      8
#define BN_MAX_BLOCKS 512

static int bn_blocks(int M, int *rows_per_block)
{
    int rpb = (M + BN_MAX_BLOCKS - 1) / BN_MAX_BLOCKS;
    if (rpb < 64) rpb = 64;
    *rows_per_block = rpb;
    return (M + rpb - 1) / rpb;
}

/* part[(blk * C + c) * 2 + {0, 1}] = sums over the block's rows of a and
 * a * b, with (fwd) a = x, b = x, or (bwd) a = dy, b = (x - mean) * invstd;
 * mask (bwd, may be NULL): dy counts as 0 where mask <= 0 (a ReLU's output:
 * relu_mask_k's rule folded in) */
__global__ void bn_partial_k(const float *x, const float *dy, const float *mask, const float *mean,
                             const float *invstd, int M, int C, int rpb, double *part)
{
    __shared__ double s0[BN_LANES][BN_COLS], s1[BN_LANES][BN_COLS];
    int c = blockIdx.y * BN_COLS + threadIdx.x;
    int r0 = blockIdx.x * rpb, r1 = min(M, r0 + rpb);
    double a0 = 0.0, a1 = 0.0;
    if (c < C) {
        double mu = dy ? (double)mean[c] : 0.0, is = dy ? (double)invstd[c] : 0.0;
        for (int r = r0 + threadIdx.y; r < r1; r += BN_LANES) {
            size_t k = (size_t)r * C + c;
            double xv = x[k];
            if (dy) {
                double g = mask && !(mask[k] > 0.0f) ? 0.0 : dy[k];
                a0 += g;
                a1 += g * ((xv - mu) * is);
            } else {
                a0 += xv;
                a1 += xv * xv;
            }
        }
    }
    s0[threadIdx.y][threadIdx.x] = a0;
    s1[threadIdx.y][threadIdx.x] = a1;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t0 = 0.0, t1 = 0.0;
        for (int l = 0; l < BN_LANES; l++) {
            t0 += s0[l][threadIdx.x];
            t1 += s1[l][threadIdx.x];
        }
        part[((size_t)blockIdx.x * C + c) * 2] = t0;
        part[((size_t)blockIdx.x * C + c) * 2 + 1] = t1;
    }
}

/* Forward statistics: st[c*2] = mean, st[c*2+1] = 1/sqrt(var + eps) in
 * double for the map; the float outputs and the running statistics. */
__global__ void bn_stats_k(const double *part, int nblk, int M, int C, float eps, float momentum,
                           float *mean, float *invstd, float *run_mean, float *run_var, double *st)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, q = 0.0;
    for (int b = 0; b < nblk; b++) {
        s += part[((size_t)b * C + c) * 2];
        q += part[((size_t)b * C + c) * 2 + 1];
    }
    double mu = s / M, var = q / M - mu * mu;
    if (var < 0.0) var = 0.0;
    double is = 1.0 / sqrt(var + (double)eps);
    st[c * 2] = mu;
    st[c * 2 + 1] = is;
    mean[c] = (float)mu;
    invstd[c] = (float)is;
    if (run_mean) {
        double unb = M > 1 ? var * M / (M - 1) : var;
        run_mean[c] = (float)((1.0 - momentum) * run_mean[c] + momentum * mu);
        run_var[c] = (float)((1.0 - momentum) * run_var[c] + momentum * unb);
    }
}

/* Element i of the forward map, in double, rounded once to float: the one
 * expression both forward kernels below use, so the fused one's value is
 * the plain one's to the bit. */
__device__ __forceinline__ float bn_value(const float *x, const float *gamma, const float *beta,
                                          const double *st, size_t i, int C)
{
    int c = (int)(i % (size_t)C);
    return (float)((x[i] - st[c * 2]) * st[c * 2 + 1] * gamma[c] + beta[c]);
}

__global__ void bn_apply_k(const float *x, const float *gamma, const float *beta, const double *st,
                           float *y, size_t total, int C)
{
    FOR_EACH(i, total) y[i] = bn_value(x, gamma, beta, st, i, C);
}

/* bn_apply_k's value in float, then the add and the ReLU in float: the
 * bits of bn_apply_k, add_k and a ReLU in turn */
__global__ void bn_apply_add_relu_k(const float *x, const float *gamma, const float *beta,
                                    const double *st, const float *res, float *y, size_t total,
                                    int C)
{
    FOR_EACH(i, total)
    {
        float t = bn_value(x, gamma, beta, st, i, C);
        if (res) t = __fadd_rn(t, res[i]);
        y[i] = t > 0.0f ? t : 0.0f;
    }
}

/* Backward sums: st[c*2] = sum dy, st[c*2+1] = sum dy * xhat; dbeta, dgamma. */
__global__ void bn_bwd_stats_k(const double *part, int nblk, int C, float *dgamma, float *dbeta,
                               double *st)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, q = 0.0;
    for (int b = 0; b < nblk; b++) {
        s += part[((size_t)b * C + c) * 2];
        q += part[((size_t)b * C + c) * 2 + 1];
    }
    st[c * 2] = s;
    st[c * 2 + 1] = q;
    dbeta[c] = (float)s;
    dgamma[c] = (float)q;
}

__global__ void bn_bwd_apply_k(const float *x, const float *gamma, const float *mean,
                               const float *invstd, const float *dy, const float *mask,
                               const double *st, float *dx, size_t total, int M, int C)
{
    FOR_EACH(i, total)
    {
        int c = (int)(i % (size_t)C);
        double xh = (x[i] - (double)mean[c]) * invstd[c];
        float g = mask && !(mask[i] > 0.0f) ? 0.0f : dy[i];
        dx[i] = (float)((double)gamma[c] * invstd[c] / M *
                        ((double)M * g - st[c * 2] - xh * st[c * 2 + 1]));
    }
}

__global__ void bn_infer_k(const float *x, const float *gamma, const float *beta, const float *rm,
                           const float *rv, float eps, float *y, size_t total, int C)
{
    FOR_EACH(i, total)
    {
        int c = (int)(i % (size_t)C);
        float is = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(rv[c], eps)));
        y[i] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x[i], rm[c]), is), gamma[c]), beta[c]);
    }
}

/* The first pass of both directions: scratch for the partial sums (then 2
 * doubles a channel of statistics, *st) and bn_partial_k over it; dy NULL:
 * the forward sums of x and x*x, else the backward sums of dy and
 * dy*xhat (dy counted as 0 where mask, a ReLU's output, is <= 0; mask may
 * be NULL). *nblk: the row blocks summed. */
static kiln_err bn_partials(kiln_cuda_ctx *c, const float *x, const float *dy, const float *mask,
                            const float *mean, const float *invstd, int M, int C, int *nblk,
                            double **part, double **st, const char *what)
{
    kiln_err rc = KILN_OK;
    int rpb;
    CK_KILN(kiln_cu__enter(c));
    *nblk = bn_blocks(M, &rpb);
    {
        size_t np = (size_t)*nblk * C * 2;
        CK_KILN(kiln_cu__ensure_scratch(c, sizeof(double) * (np + 2 * (size_t)C)));
        *part = (double *)c->scratch;
        *st = *part + np;
        dim3 grid((unsigned)*nblk, (unsigned)((C + BN_COLS - 1) / BN_COLS)),
            block(BN_COLS, BN_LANES);
        bn_partial_k<<<grid, block, 0, c->stream>>>(x, dy, mask, mean, invstd, M, C, rpb, *part);
        CK_LAUNCH(c, what);
    }
out:
    return rc;
}

/* The first two passes of both forward entry points: the partial sums and
 * the statistics from them (mean, invstd, the running statistics; *st the
 * doubles the map reads), queued on the context's stream. */
static kiln_err bn_fwd_stats(kiln_cuda_ctx *c, const float *x, float *mean, float *invstd,
                             float *run_mean, float *run_var, float momentum, float eps, int M,
                             int C, double **st)
{
    kiln_err rc = KILN_OK;
    int nblk;
    double *part;
    CK_KILN(bn_partials(c, x, NULL, NULL, NULL, NULL, M, C, &nblk, &part, st,
                        "batch norm partial sums"));
    bn_stats_k<<<(C + 127) / 128, 128, 0, c->stream>>>(part, nblk, M, C, eps, momentum, mean,
                                                       invstd, run_mean, run_var, *st);
    CK_LAUNCH(c, "batch norm statistics");
out:
    return rc;
}

extern "C" kiln_err kiln_cu__bn_fwd_train_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                               const float *beta, float *y, float *mean,
                                               float *invstd, float *run_mean, float *run_var,
                                               float momentum, float eps, int M, int C)
{
    kiln_err rc = KILN_OK;
    double *st;
    size_t total = (size_t)M * C;
    CK_KILN(bn_fwd_stats(c, x, mean, invstd, run_mean, run_var, momentum, eps, M, C, &st));
    bn_apply_k<<<blocks_for(total), THREADS, 0, c->stream>>>(x, gamma, beta, st, y, total, C);
    CK_LAUNCH(c, "batch norm");
out:
    return rc;
}

extern "C" kiln_err kiln_cu__bn_fwd_train_add_relu_kiln(kiln_cuda_ctx *c, const float *x,
                                                        const float *gamma, const float *beta,
                                                        const float *res, float *y, float *mean,
                                                        float *invstd, float *run_mean,
                                                        float *run_var, float momentum, float eps,
                                                        int M, int C)
{
    kiln_err rc = KILN_OK;
    double *st;
    size_t total = (size_t)M * C;
    CK_KILN(bn_fwd_stats(c, x, mean, invstd, run_mean, run_var, momentum, eps, M, C, &st));
    bn_apply_add_relu_k<<<blocks_for(total), THREADS, 0, c->stream>>>(x, gamma, beta, st, res, y,
                                                                      total, C);
    CK_LAUNCH(c, "batch norm + add + ReLU");
out:
    return rc;
}

extern "C" kiln_err kiln_cu__bn_bwd_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                         const float *mean, const float *invstd, const float *mask,
                                         const float *dy, float *dx, float *dgamma, float *dbeta,
                                         int M, int C)
{
    kiln_err rc = KILN_OK;
    int nblk;
    double *part, *st;
    size_t total = (size_t)M * C;
    CK_KILN(bn_partials(c, x, dy, mask, mean, invstd, M, C, &nblk, &part, &st,
                        "batch norm backward partial sums"));
    bn_bwd_stats_k<<<(C + 127) / 128, 128, 0, c->stream>>>(part, nblk, C, dgamma, dbeta, st);
    CK_LAUNCH(c, "batch norm backward sums");
    bn_bwd_apply_k<<<blocks_for(total), THREADS, 0, c->stream>>>(x, gamma, mean, invstd, dy, mask,
                                                                 st, dx, total, M, C);
    CK_LAUNCH(c, "batch norm backward");
out:
    return rc;
}

extern "C" kiln_err kiln_cu__bn_fwd_infer_kiln(kiln_cuda_ctx *c, const float *x, const float *gamma,
                                               const float *beta, const float *run_mean,
                                               const float *run_var, float eps, float *y, int M,
                                               int C)
{
    kiln_err rc = KILN_OK;
    size_t total = (size_t)M * C;
    CK_KILN(kiln_cu__enter(c));
    bn_infer_k<<<blocks_for(total), THREADS, 0, c->stream>>>(x, gamma, beta, run_mean, run_var, eps,
                                                             y, total, C);
    CK_LAUNCH(c, "batch norm (inference)");
out:
    return rc;
}

/* ---- max-pool backward, the CPU's rule ----
 * Each window's gradient goes to its FIRST maximum in scan order (ky, then
 * kx), as kiln_maxpool_fwd's arg-max does; cuDNN's backward routes ties its
 * own way (on Fashion-MNIST, whose background gives whole windows of equal
 * values, the two trainings drifted apart: docs/gpu.md). One thread per
 * input element sums dy over the windows whose first maximum it is, in
 * window order: no atomics, the CPU's order of additions. */
__global__ void maxpool_bwd_k(const float *x, const float *y, const float *dy, float *dx,
                              size_t total, int H, int W, int Cc, int OH, int OW, int k, int s)
{
    FOR_EACH(i, total)
    {
        size_t t = i / (size_t)Cc;
        int c = (int)(i % (size_t)Cc), ix = (int)(t % (size_t)W), iy = (int)(t / W % (size_t)H);
        size_t n = t / ((size_t)W * H);
        int oy0 = iy - k + 1 <= 0 ? 0 : (iy - k + 1 + s - 1) / s, oy1 = min(iy / s, OH - 1);
        int ox0 = ix - k + 1 <= 0 ? 0 : (ix - k + 1 + s - 1) / s, ox1 = min(ix / s, OW - 1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                size_t o = ((n * OH + oy) * OW + ox) * Cc + c;
                float m = y[o];
                int first = -1;
                for (int ky = 0; ky < k && first < 0; ky++)
                    for (int kx = 0; kx < k; kx++)
                        if (x[((n * H + (size_t)oy * s + ky) * W + (size_t)ox * s + kx) * Cc + c] ==
                            m) {
                            first = ky * k + kx;
                            break;
                        }
                if (first == (iy - oy * s) * k + (ix - ox * s)) acc = __fadd_rn(acc, dy[o]);
            }
        dx[i] = acc;
    }
}

extern "C" kiln_err kiln_cu__maxpool_bwd_first(kiln_cuda_ctx *c, const kiln_pool_shape *s,
                                               const float *x, const float *y, const float *dy,
                                               float *dx)
{
    kiln_err rc = KILN_OK;
    size_t total = (size_t)s->n * s->h * s->w * s->c;
    CK_KILN(kiln_cu__enter(c));
    maxpool_bwd_k<<<blocks_for(total), THREADS, 0, c->stream>>>(
        x, y, dy, dx, total, s->h, s->w, s->c, s->oh, s->ow, s->k, s->stride);
    CK_LAUNCH(c, "max pool backward");
out:
    return rc;
}
