/* cuda/lt_plan.h - the cublaslt-fc variant's matrix layouts (blaslt.c) as
 * plain C with no CUDA in it, unit-tested on machines without a GPU
 * (tests/cuda/test_conv_plan.c). kiln's dense layer y[B,out] = x[B,in]
 * w[in,out] (+ b, ReLU) is, column-major (cuda_blas.c), D' = A' B' with
 * A' = w' [out, in] (ld out), B' = x' [in, B] (ld in), D' = y' [out, B]
 * (ld out): m = out, n = B, k = in, no transposes; the bias is one value
 * per row of D' (an output feature), which is what cuBLASLt's BIAS
 * epilogue adds. */
#ifndef KILN_CUDA_LT_PLAN_H
#define KILN_CUDA_LT_PLAN_H

/* the epilogue: none, bias, ReLU, bias then ReLU (cuBLASLt's DEFAULT,
 * BIAS, RELU, RELU_BIAS) */
enum { KILN_CU_LT_NONE, KILN_CU_LT_BIAS, KILN_CU_LT_RELU, KILN_CU_LT_RELU_BIAS };

typedef struct kiln_cu_lt_plan {
    int m, n, k, lda, ldb, ldd, epilogue;
} kiln_cu_lt_plan;

/* 0, or -1 for a shape that is not one */
static inline int kiln_cu__lt_plan(int B, int in, int out, int bias, int relu, kiln_cu_lt_plan *p)
{
    if (B < 1 || in < 1 || out < 1) return -1;
    p->m = out, p->n = B, p->k = in;
    p->lda = out, p->ldb = in, p->ldd = out;
    p->epilogue = bias ? (relu ? KILN_CU_LT_RELU_BIAS : KILN_CU_LT_BIAS)
                       : (relu ? KILN_CU_LT_RELU : KILN_CU_LT_NONE);
    return 0;
}

#endif
