/* core/gemm.c - single-threaded SGEMM dispatch: oneDNN or OpenBLAS.
 *
 * Why oneDNN: the training step's GEMMs are small (128 x 256 x 784 and the
 * like, one per pool thread). OpenBLAS 0.3.21 packs both operands for each
 * call and reaches 140-175 GFLOP/s on one core for these shapes; oneDNN's
 * JIT SGEMM (2.6, AVX-512) reaches 165-215 on the same calls, and 1.3-1.8x on
 * the im2col shapes of the CNN (bench/README.md, gemm shapes table). For
 * outputs narrower than one vector (the 10-class layers) OpenBLAS is as fast
 * or faster (their 256x10 dW: 142 against 73 GFLOP/s), so those stay with it.
 *
 * Threads: Debian's libdnnl uses OpenMP (libgomp). Each of kiln's threads
 * sets its own OpenMP thread count to 1 once (the count is per thread), so a
 * call never starts an OpenMP team of its own next to kiln's pool. The
 * function is looked up in the libgomp that libdnnl loaded rather than linked
 * directly: clang builds (fuzz) have no omp.h or -lgomp of their own. */
#include "core/gemm.h"

#include "kiln/tensor.h"

#include <cblas.h>
#include <stddef.h>

#ifdef KILN_HAVE_DNNL
#include <dlfcn.h>
#include <dnnl.h>

/* Outputs narrower than this go to OpenBLAS (see above). */
#define DNNL_MIN_N 16

static _Thread_local int omp_single;

static void omp_one_thread(void)
{
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (set) set(1);
    omp_single = 1;
}

void kiln__dnnl_one_thread(void)
{
    if (!omp_single) omp_one_thread();
}

static int use_dnnl(int M, int N, int K)
{
    return N >= DNNL_MIN_N && M > 0 && K > 0;
}
#endif

void kiln__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
#ifdef KILN_HAVE_DNNL
    if (use_dnnl(M, N, K)) {
        if (!omp_single) omp_one_thread();
        /* dnnl_sgemm only fails on bad arguments; ours are checked by the
         * callers' shapes, and OpenBLAS below is the fallback if it does */
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                       ldc) == dnnl_success)
            return;
    }
#endif
    /* the one call into BLAS in kiln, so its start-up is done here and not
     * by the callers (after the first call, a pthread_once check) */
    kiln_blas_init();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void kiln__sgemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
            }
            float *c = &C[(size_t)i * ldc + j];
            /* beta == 0 ignores C (it may hold NaN), as BLAS does */
            *c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
}

const char *kiln__gemm_backend(void)
{
#ifdef KILN_HAVE_DNNL
    return "onednn";
#else
    return "openblas";
#endif
}
