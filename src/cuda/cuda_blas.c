/* cuda/cuda_blas.c - dense layers on cuBLAS.
 *
 * cuBLAS is column-major; kiln's matrices are row-major. A row-major
 * [r, c] matrix is the column-major [c, r] matrix with the same bytes, so
 *   y[B,out]  = x[B,in] w[in,out]   is  y' = w' x'          (m=out, n=B, k=in)
 *   dw[in,out] = x^T dy             is  dw' = dy' x'^T      (m=out, n=in, k=B)
 *   dx[B,in]  = dy w^T              is  dx' = w'^T dy'      (m=in, n=B, k=out)
 * where ' is the column-major view. No copies or transposes are made. */
#include "cuda/ctx.h"

static kiln_err check_dims(kiln_cuda_ctx *c, int B, int in, int out)
{
    if (B < 1 || in < 1 || out < 1)
        return kiln_cu__invalid(c, "dense: bad shape B=%d in=%d out=%d", B, in, out);
    return kiln_cu__enter(c);
}

kiln_err kiln_cu_dense_fwd(kiln_cuda_ctx *c, const float *x, const float *w, const float *b,
                           float *y, int B, int in, int out, int relu)
{
    kiln_err rc = check_dims(c, B, in, out);
    const float one = 1.0f, zero = 0.0f;
    if (rc != KILN_OK) return rc;
    if (c->dense_lt) return kiln_cu__dense_fwd_lt(c, CUDA_R_32F, x, w, b, y, B, in, out, relu);
    CK_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, out, B, in, &one, w, out, x, in,
                           &zero, y, out));
    if (b || relu) CK_KILN(kiln_cu_bias_act(c, y, b, B, out, relu));
out:
    return rc;
}

kiln_err kiln_cu_dense_bwd(kiln_cuda_ctx *c, const float *x, const float *w, const float *y,
                           float *dy, float *dx, float *dw, float *db, int B, int in, int out,
                           int relu, float beta)
{
    kiln_err rc = check_dims(c, B, in, out);
    const float one = 1.0f, zero = 0.0f;
    if (rc != KILN_OK) return rc;
    /* mask first: dw and dx need the pre-activation gradient */
    CK_KILN(kiln_cu_mask_colsum(c, dy, y, relu, db, beta, B, out));
    CK_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, out, in, B, &one, dy, out, x, in,
                           &beta, dw, out));
    if (dx)
        CK_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, in, B, out, &one, w, out, dy, out,
                               &zero, dx, in));
out:
    return rc;
}

kiln_err kiln_cu_dense_fwd_lowp(kiln_cuda_ctx *c, kiln_cu_dtype t, const void *x, const void *w,
                                const float *b, float *y, int B, int in, int out, int relu)
{
    kiln_err rc = check_dims(c, B, in, out);
    const float one = 1.0f, zero = 0.0f;
    cudaDataType ab = t == KILN_CU_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (rc != KILN_OK) return rc;
    if (c->dense_lt) return kiln_cu__dense_fwd_lt(c, ab, x, w, b, y, B, in, out, relu);
    /* fp32 output and CUBLAS_COMPUTE_32F: products and sums in fp32, tensor
     * cores used for the 16-bit inputs */
    CK_BLAS(c,
            cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, out, B, in, &one, w, ab, out, x, ab, in,
                         &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (b || relu) CK_KILN(kiln_cu_bias_act(c, y, b, B, out, relu));
out:
    return rc;
}
