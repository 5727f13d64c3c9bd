/* cuda/lowp.c - mixed precision for the runtime's backend table (see
 * cuda_ops.h, "mixed precision"): the GEMM and convolution ops on inputs
 * rounded to bf16 or fp16, sums in fp32, everything else fp32.
 *
 * One buffer (c->lowp_buf) holds an op's rounded copies, carved in 256-byte
 * aligned pieces; it grows like the other workspaces (mem_epoch changes, so
 * a captured graph that saw the old one is captured again). */
#include "cuda/ctx.h"

#define ALIGN(b) (((b) + 255) & ~(size_t)255)

kiln_err kiln_cu_set_lowp(kiln_cuda_ctx *c, int on, kiln_cu_dtype t)
{
    kiln_err rc = KILN_OK;
    if (on && t != KILN_CU_BF16 && t != KILN_CU_FP16)
        return kiln_cu__invalid(c, "mixed precision: unknown format %d", (int)t);
    /* convolutions on rounded fp32 copies: TF32 tensor cores hold bf16 and
     * fp16 values exactly, so they compute the low-precision products */
    CK_KILN(kiln_cu_set_tf32(c, on));
    c->lowp = on;
    c->lowp_t = t;
out:
    return rc;
}

/* Pieces of lowp_buf of the given byte sizes (up to 3), in order. */
static kiln_err carve(kiln_cuda_ctx *c, size_t a, size_t b, size_t d, void **pa, void **pb,
                      void **pd)
{
    kiln_err rc = kiln_cu__ensure_lowp(c, ALIGN(a) + ALIGN(b) + ALIGN(d));
    char *p = c->lowp_buf;
    if (rc != KILN_OK) return rc;
    *pa = p;
    *pb = p + ALIGN(a);
    if (pd) *pd = p + ALIGN(a) + ALIGN(b);
    return KILN_OK;
}

static cudaDataType lowp_type(const kiln_cuda_ctx *c)
{
    return c->lowp_t == KILN_CU_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

kiln_err kiln_cu_dense_fwd_lp(kiln_cuda_ctx *c, const float *x, const float *w, const float *b,
                              float *y, int B, int in, int out, int relu)
{
    kiln_err rc = KILN_OK;
    void *x16 = NULL, *w16 = NULL;
    size_t nx = (size_t)B * in, nw = (size_t)in * out;
    if (!c->lowp) return kiln_cu_dense_fwd(c, x, w, b, y, B, in, out, relu);
    if (B < 1 || in < 1 || out < 1)
        return kiln_cu__invalid(c, "dense: bad shape B=%d in=%d out=%d", B, in, out);
    CK_KILN(kiln_cu__enter(c));
    CK_KILN(carve(c, 2 * nx, 2 * nw, 0, &x16, &w16, NULL));
    CK_KILN(kiln_cu_cast_to_lowp(c, c->lowp_t, x16, x, nx));
    CK_KILN(kiln_cu_cast_to_lowp(c, c->lowp_t, w16, w, nw));
    CK_KILN(kiln_cu_dense_fwd_lowp(c, c->lowp_t, x16, w16, b, y, B, in, out, relu));
out:
    return rc;
}

/* cuda_blas.c's products (row-major as column-major views) on 16-bit copies */
kiln_err kiln_cu_dense_bwd_lp(kiln_cuda_ctx *c, const float *x, const float *w, const float *y,
                              float *dy, float *dx, float *dw, float *db, int B, int in, int out,
                              int relu, float beta)
{
    kiln_err rc = KILN_OK;
    void *x16 = NULL, *w16 = NULL, *dy16 = NULL;
    size_t nx = (size_t)B * in, nw = (size_t)in * out, ny = (size_t)B * out;
    const float one = 1.0f, zero = 0.0f;
    if (!c->lowp) return kiln_cu_dense_bwd(c, x, w, y, dy, dx, dw, db, B, in, out, relu, beta);
    if (B < 1 || in < 1 || out < 1)
        return kiln_cu__invalid(c, "dense: bad shape B=%d in=%d out=%d", B, in, out);
    cudaDataType t = lowp_type(c);
    CK_KILN(kiln_cu__enter(c));
    /* mask, and the bias gradient of the fp32 dy, first */
    CK_KILN(kiln_cu_mask_colsum(c, dy, y, relu, db, beta, B, out));
    CK_KILN(carve(c, 2 * nx, 2 * nw, 2 * ny, &x16, &w16, &dy16));
    CK_KILN(kiln_cu_cast_to_lowp(c, c->lowp_t, x16, x, nx));
    CK_KILN(kiln_cu_cast_to_lowp(c, c->lowp_t, w16, w, nw));
    CK_KILN(kiln_cu_cast_to_lowp(c, c->lowp_t, dy16, dy, ny));
    /* dw' = dy' x'^T, accumulated into fp32 dw with beta */
    CK_BLAS(c,
            cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, out, in, B, &one, dy16, t, out, x16, t,
                         in, &beta, dw, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    /* dx' = w'^T dy' */
    if (dx)
        CK_BLAS(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, in, B, out, &one, w16, t, out,
                                dy16, t, out, &zero, dx, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
out:
    return rc;
}

static size_t conv_nx(const kiln_conv_shape *s)
{
    return (size_t)s->n * s->h * s->w * s->c;
}

static size_t conv_nw(const kiln_conv_shape *s)
{
    return (size_t)s->kh * s->kw * s->c * s->oc;
}

kiln_err kiln_cu_conv2d_fwd_lp(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                               const float *w, const float *b, float *y, int relu)
{
    kiln_err rc = KILN_OK;
    void *xr = NULL, *wr = NULL;
    size_t nx = conv_nx(s), nw = conv_nw(s);
    if (!c->lowp) return kiln_cu_conv2d_fwd(c, s, x, w, b, y, relu);
    CK_KILN(kiln_cu__enter(c));
    CK_KILN(carve(c, 4 * nx, 4 * nw, 0, &xr, &wr, NULL));
    CK_KILN(kiln_cu_round_lowp(c, c->lowp_t, xr, x, nx));
    CK_KILN(kiln_cu_round_lowp(c, c->lowp_t, wr, w, nw));
    CK_KILN(kiln_cu_conv2d_fwd(c, s, xr, wr, b, y, relu));
out:
    return rc;
}

kiln_err kiln_cu_conv2d_bwd_lp(kiln_cuda_ctx *c, const kiln_conv_shape *s, const float *x,
                               const float *w, const float *y, float *dy, float *dx, float *dw,
                               float *db, int relu, float beta)
{
    kiln_err rc = KILN_OK;
    void *xr = NULL, *wr = NULL, *dyr = NULL;
    size_t nx = conv_nx(s), nw = conv_nw(s), M = (size_t)s->n * s->oh * s->ow;
    if (!c->lowp) return kiln_cu_conv2d_bwd(c, s, x, w, y, dy, dx, dw, db, relu, beta);
    CK_KILN(kiln_cu__enter(c));
    CK_KILN(kiln_cu_mask_colsum(c, dy, y, relu, db, beta, (int)M, s->oc));
    CK_KILN(carve(c, 4 * nx, 4 * nw, 4 * M * s->oc, &xr, &wr, &dyr));
    CK_KILN(kiln_cu_round_lowp(c, c->lowp_t, xr, x, nx));
    CK_KILN(kiln_cu_round_lowp(c, c->lowp_t, wr, w, nw));
    CK_KILN(kiln_cu_round_lowp(c, c->lowp_t, dyr, dy, M * s->oc));
    CK_KILN(kiln_cu_conv2d_bwd(c, s, xr, wr, y, dyr, dx, dw, NULL, 0, beta));
out:
    return rc;
}
