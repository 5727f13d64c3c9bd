/* bench/sgemm_peak.c - the machine's measured SGEMM peak, the yardstick for
 * "what fraction of the machine does training reach". Square 2048^3 SGEMM
 * through OpenBLAS after kiln's core fix-up (kiln_blas_init), with 1 thread
 * and with every core; best of several 1-second runs. Prints JSON, with the
 * library that serves the training step's small GEMMs (core/gemm.h). */
#include "core/gemm.h"
#include "kiln/tensor.h"

#include <cblas.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double measure(int threads, int n)
{
    openblas_set_num_threads(threads);
    float *a = kiln_falloc((size_t)n * n), *b = kiln_falloc((size_t)n * n),
          *c = kiln_falloc((size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = b[i] = (float)(i % 7) * 0.1f;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        int it = 0;
        double t0 = now_s(), t;
        do {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                        c, n);
            it++;
        } while ((t = now_s() - t0) < 1.0);
        double g = 2.0 * n * n * (double)n * it / t / 1e9;
        best = g > best ? g : best;
    }
    kiln_ffree(a), kiln_ffree(b), kiln_ffree(c);
    return best;
}

int main(void)
{
    const char *core = kiln_blas_init();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double one = measure(1, 2048), all = measure((int)ncpu, 2048);
    printf("{\"core\":\"%s\",\"step_gemm\":\"%s\",\"cpus\":%ld,\"sgemm_gflops_1thread\":%.1f,"
           "\"sgemm_gflops_all\":%.1f}\n",
           core, kiln__gemm_backend(), ncpu, one, all);
    return 0;
}
