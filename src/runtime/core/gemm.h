/* core/gemm.h - the runtime's one single-threaded SGEMM entry point (internal).
 *
 * kiln__sgemm computes C = alpha op(A) op(B) + beta C, row-major, on the
 * calling thread only: kiln splits work across its own pool (core/pool.h) and
 * each task calls this serially. It goes to oneDNN's JIT SGEMM (Debian's
 * libdnnl) when kiln was built with it and the shape is one where it measured
 * faster than OpenBLAS here (bench/README.md), and to OpenBLAS otherwise.
 * Which library runs depends only on the shape, so results are the same bits
 * for the same inputs and thread count. kiln__sgemm_ref is the plain loop
 * the tests compare it with. */
#ifndef KILN_RT_CORE_GEMM_H
#define KILN_RT_CORE_GEMM_H

/* ta/tb: 0 = as stored, 1 = transposed. */
void kiln__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);

/* The same product in double precision with a plain triple loop. */
void kiln__sgemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

/* Sets the calling thread's OpenMP thread count to 1 once (see gemm.c), so
 * that a oneDNN call on it starts no OpenMP team; other oneDNN users (the
 * convolution primitives, ops/conv_dnnl.c) call it too. Only with oneDNN. */
void kiln__dnnl_one_thread(void);

/* "onednn" or "openblas": which library serves the large shapes. */
const char *kiln__gemm_backend(void);

#endif
