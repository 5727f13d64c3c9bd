/* src/devices/tool/kiln_gpu_check.c - kiln-gpu-check [UUID]: the check
 * kilnd --gpu-check runs on one idle GPU before it takes work (docs/gpu.md):
 *   1. a GEMM (512 x 512 x 512, cublasSgemm in FP32) against a CPU
 *      reference in double, each element within 1e-4 of the sum of |a||b|
 *      over its row and column (FP32 rounding over 512 terms stays far
 *      below; a wrong result does not);
 *   2. a memory pattern over most of the free memory (90%, in 256 MiB
 *      blocks): every block set to 0xA5 bytes, verified whole on the GPU
 *      (cublasIsamax and cublasIsamin of a block of equal floats are its
 *      first element, and that element is read back), then 0x5A the same.
 * The CUDA runtime and cuBLAS are dlopen'd (libcudart.so.13/.12, the
 * same major of libcublas), so it builds without CUDA. The GPU is device 0
 * of CUDA_VISIBLE_DEVICES, which kilnd sets to UUID. Prints one RESULT line;
 * exit 0 when both pass, 1 when one fails (the last line says which and
 * how), 2 when CUDA cannot be used. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N         512
#define BLOCK     (256ull << 20)
#define MAX_BLOCK 2048 /* 512 GiB */

static struct {
    int (*count)(int *);
    int (*set)(int);
    int (*meminfo)(size_t *, size_t *);
    int (*malloc)(void **, size_t);
    int (*free)(void *);
    int (*memset)(void *, int, size_t);
    int (*memcpy)(void *, const void *, size_t, int);
    int (*sync)(void);
    const char *(*err)(int);
    int (*create)(void **);
    int (*destroy)(void *);
    int (*sgemm)(void *, int, int, int, int, int, const float *, const float *, int, const float *,
                 int, const float *, float *, int);
    int (*isamax)(void *, int, const float *, int, int *);
    int (*isamin)(void *, int, const float *, int, int *);
} cu;

#define SYM(lib, f, name) (*(void **)&cu.f = dlsym(lib, name))

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *cerr(int rc)
{
    const char *s = cu.err ? cu.err(rc) : NULL;
    return s ? s : "CUDA error";
}

/* The runtime and cuBLAS of one CUDA major; NULL handles when absent. */
static bool load(char *why, size_t len)
{
    static const char *const majors[] = {"13", "12", "11"};
    char name[64];
    for (size_t m = 0; m < sizeof majors / sizeof *majors; m++) {
        snprintf(name, sizeof name, "libcudart.so.%s", majors[m]);
        void *rt = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!rt) continue;
        snprintf(name, sizeof name, "libcublas.so.%s", majors[m]);
        void *bl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!bl) {
            snprintf(why, len, "libcudart.so.%s is here but not %s", majors[m], name);
            return false;
        }
        SYM(rt, count, "cudaGetDeviceCount");
        SYM(rt, set, "cudaSetDevice");
        SYM(rt, meminfo, "cudaMemGetInfo");
        SYM(rt, malloc, "cudaMalloc");
        SYM(rt, free, "cudaFree");
        SYM(rt, memset, "cudaMemset");
        SYM(rt, memcpy, "cudaMemcpy");
        SYM(rt, sync, "cudaDeviceSynchronize");
        SYM(rt, err, "cudaGetErrorString");
        SYM(bl, create, "cublasCreate_v2");
        SYM(bl, destroy, "cublasDestroy_v2");
        SYM(bl, sgemm, "cublasSgemm_v2");
        SYM(bl, isamax, "cublasIsamax_v2");
        SYM(bl, isamin, "cublasIsamin_v2");
        if (cu.count && cu.set && cu.meminfo && cu.malloc && cu.free && cu.memset && cu.memcpy &&
            cu.sync && cu.create && cu.destroy && cu.sgemm && cu.isamax && cu.isamin)
            return true;
        snprintf(why, len, "CUDA %s's runtime or cuBLAS lacks a function this check calls",
                 majors[m]);
        return false;
    }
    snprintf(why, len, "no CUDA runtime (libcudart.so.13, .12 or .11)");
    return false;
}

/* 1: the GEMM against the CPU. Returns 0, 1 (wrong), 2 (CUDA failed). */
static int gemm(void *h, double *max_err, char *why, size_t len)
{
    size_t bytes = (size_t)N * N * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    float *da = NULL, *db = NULL, *dc = NULL;
    int ret = 2, rc;
    const float one = 1.0f, zero = 0.0f;
    uint32_t x = 12345u;
    if (!a || !b || !c) {
        snprintf(why, len, "out of host memory");
        goto out;
    }
    for (size_t i = 0; i < (size_t)N * N; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (float)((double)(x >> 8) / (double)(1u << 24) * 2.0 - 1.0);
        x = x * 1664525u + 1013904223u;
        b[i] = (float)((double)(x >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
    if ((rc = cu.malloc((void **)&da, bytes)) || (rc = cu.malloc((void **)&db, bytes)) ||
        (rc = cu.malloc((void **)&dc, bytes)) || (rc = cu.memcpy(da, a, bytes, 1)) ||
        (rc = cu.memcpy(db, b, bytes, 1))) {
        snprintf(why, len, "gemm: %s", cerr(rc));
        goto out;
    }
    /* column-major: C = A * B with A, B, C as cuBLAS reads them */
    if ((rc = cu.sgemm(h, 0, 0, N, N, N, &one, da, N, db, N, &zero, dc, N)) != 0) {
        snprintf(why, len, "gemm: cublasSgemm failed (status %d)", rc);
        goto out;
    }
    if ((rc = cu.memcpy(c, dc, bytes, 2))) {
        snprintf(why, len, "gemm: %s", cerr(rc));
        goto out;
    }
    ret = 0;
    *max_err = 0;
    for (int j = 0; j < N && ret == 0; j++)
        for (int i = 0; i < N; i++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < N; k++) {
                double p = (double)a[(size_t)k * N + i] * (double)b[(size_t)j * N + k];
                ref += p;
                mag += fabs(p);
            }
            double e = fabs((double)c[(size_t)j * N + i] - ref) / (mag + 1e-30);
            if (e > *max_err || isnan(e)) *max_err = isnan(e) ? INFINITY : e;
            if (!(e <= 1e-4)) {
                snprintf(why, len,
                         "gemm %dx%d: C[%d,%d] = %.6g, the CPU reference %.6g (relative error "
                         "%.2e, allowed 1e-04)",
                         N, N, i, j, (double)c[(size_t)j * N + i], ref, e);
                ret = 1;
                break;
            }
        }
out:
    if (da) cu.free(da);
    if (db) cu.free(db);
    if (dc) cu.free(dc);
    free(a);
    free(b);
    free(c);
    return ret;
}

/* 2: the memory pattern. Returns 0, 1 (a byte differs), 2 (CUDA failed). */
static int memory(void *h, double *gib, char *why, size_t len)
{
    static void *blk[MAX_BLOCK];
    size_t nb = 0, fr = 0, tot = 0;
    int ret = 2, rc;
    if ((rc = cu.meminfo(&fr, &tot))) {
        snprintf(why, len, "memory: %s", cerr(rc));
        return 2;
    }
    size_t want = (size_t)((double)fr * 0.9) / BLOCK;
    while (nb < want && nb < MAX_BLOCK && cu.malloc(&blk[nb], BLOCK) == 0)
        nb++;
    *gib = (double)(nb * BLOCK) / (double)(1ull << 30);
    if (nb == 0) {
        snprintf(why, len, "memory: no 256 MiB block could be allocated (%zu MiB free)", fr >> 20);
        goto out;
    }
    static const unsigned char pats[] = {0xA5, 0x5A};
    int n = (int)(BLOCK / sizeof(float));
    for (size_t p = 0; p < sizeof pats; p++) {
        for (size_t i = 0; i < nb; i++)
            if ((rc = cu.memset(blk[i], pats[p], BLOCK))) {
                snprintf(why, len, "memory: cudaMemset: %s", cerr(rc));
                goto out;
            }
        if ((rc = cu.sync())) {
            snprintf(why, len, "memory: %s", cerr(rc));
            goto out;
        }
        for (size_t i = 0; i < nb; i++) {
            int mx = 0, mn = 0;
            unsigned char first[4];
            if (cu.isamax(h, n, blk[i], 1, &mx) || cu.isamin(h, n, blk[i], 1, &mn) ||
                (rc = cu.memcpy(first, blk[i], sizeof first, 2))) {
                snprintf(why, len, "memory: reading block %zu back failed", i);
                goto out;
            }
            for (int k = 0; k < 4; k++)
                if (first[k] != pats[p]) mx = -1;
            if (mx != 1 || mn != 1) {
                snprintf(why, len,
                         "memory pattern 0x%02X: block %zu (at %zu MiB) differs near float %d",
                         pats[p], i, i * (size_t)(BLOCK >> 20), mx != 1 ? mx - 1 : mn - 1);
                ret = 1;
                goto out;
            }
        }
    }
    ret = 0;
out:
    for (size_t i = 0; i < nb; i++)
        cu.free(blk[i]);
    return ret;
}

int main(int argc, char **argv)
{
    char why[512] = "";
    void *h = NULL;
    double t0 = now_s(), err = -1, gib = 0;
    int ndev = 0, rc, ret = 2;
    const char *uuid = argc > 1 ? argv[1] : getenv("CUDA_VISIBLE_DEVICES");
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr,
                "usage: kiln-gpu-check [UUID]  (the GPU: device 0 of CUDA_VISIBLE_DEVICES)\n");
        return 2;
    }
    if (!load(why, sizeof why)) goto out;
    if ((rc = cu.count(&ndev)) || ndev < 1) {
        snprintf(why, sizeof why, "no GPU visible (%s)", rc ? cerr(rc) : "0 devices");
        goto out;
    }
    if ((rc = cu.set(0))) {
        snprintf(why, sizeof why, "cudaSetDevice(0): %s", cerr(rc));
        goto out;
    }
    if ((rc = cu.create(&h)) != 0) {
        snprintf(why, sizeof why, "cublasCreate failed (status %d)", rc);
        goto out;
    }
    double tg = now_s();
    ret = gemm(h, &err, why, sizeof why);
    double tm = now_s();
    if (ret == 0) ret = memory(h, &gib, why, sizeof why);
    double te = now_s();
    printf("RESULT gpu_check uuid=%s gemm_rel_err=%.2e gemm_s=%.2f memory_gib=%.1f memory_s=%.2f "
           "total_s=%.2f ok=%d\n",
           uuid ? uuid : "-", err, tm - tg, gib, te - tm, te - t0, ret == 0);
out:
    if (h) cu.destroy(h);
    if (ret != 0)
        printf("%s\n", why);
    else
        printf("gemm and memory pattern passed\n");
    return ret;
}
