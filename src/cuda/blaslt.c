/* cuda/blaslt.c - the cublaslt-fc variant (issue 45): a dense layer's
 * forward on cuBLASLt, its bias and ReLU in the GEMM's epilogue instead of
 * a pass of their own (cuda_blas.c's bias_act). The layouts are lt_plan.h's.
 * The algorithm is cuBLASLt's first heuristic choice among those that make
 * no split-K reduction (a reduction's order would make two runs differ),
 * in cuBLAS's own workspace (the same stream: never at the same time). */
#include "cuda/ctx.h"
#include "cuda/lt_plan.h"

kiln_err kiln_cu__dense_fwd_lt(kiln_cuda_ctx *c, cudaDataType ab, const void *x, const void *w,
                               const float *b, float *y, int B, int in, int out, int relu)
{
    kiln_err rc = KILN_OK;
    kiln_cu_lt_plan p;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int got = 0;
    const float one = 1.0f, zero = 0.0f;
    static const cublasLtEpilogue_t eps[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                             CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS};
    if (kiln_cu__lt_plan(B, in, out, b != NULL, relu, &p))
        return kiln_cu__invalid(c, "dense: bad shape B=%d in=%d out=%d", B, in, out);
    CK_KILN(kiln_cu__enter(c));
    if (!c->lt) CK_BLAS(c, cublasLtCreate(&c->lt));
    cublasComputeType_t ct =
        ab == CUDA_R_32F && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtEpilogue_t ep = eps[p.epilogue];
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t wsb = KILN_CU_BLAS_WS;
    CK_BLAS(c, cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    CK_BLAS(c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    if (b)
        CK_BLAS(
            c, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
    CK_BLAS(c, cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)p.m, (uint64_t)p.k, p.lda));
    CK_BLAS(c, cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)p.k, (uint64_t)p.n, p.ldb));
    CK_BLAS(c, cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)p.m, (uint64_t)p.n, p.ldd));
    CK_BLAS(c, cublasLtMatmulPreferenceCreate(&pref));
    CK_BLAS(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &wsb, sizeof wsb));
    CK_BLAS(c, cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
    CK_BLAS(c, cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, ld, ld, pref, 1, &h, &got));
    if (got < 1) {
        rc = kiln_cu__invalid(c,
                              "dense: cuBLASLt has no algorithm without a split-K reduction "
                              "for B=%d in=%d out=%d",
                              B, in, out);
        goto out;
    }
    CK_BLAS(c, cublasLtMatmul(c->lt, op, &one, w, la, x, lb, &zero, y, ld, y, ld, &h.algo,
                              c->blas_ws, KILN_CU_BLAS_WS, c->stream));
out:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}
