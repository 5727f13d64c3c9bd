/* kiln/tensor.h - fp32 tensors, the seeded RNG and the compute threads of
 * the kiln runtime.
 *
 * Layout: a tensor is a dense, row-major (C order) array of float32 with up to
 * KILN_MAX_DIMS dimensions; the last dimension is contiguous. Images and
 * feature maps are NHWC: element (n, y, x, c) of a [N, H, W, C] tensor is
 * data[((n*H + y)*W + x)*C + c]. Dense kernels are [in, out] (Keras layout),
 * conv kernels are [KH, KW, C_in, C_out] (TensorFlow's HWIO). NHWC was chosen
 * because it makes im2col rows contiguous runs of C floats and turns a whole
 * chunk of a batch into one large GEMM with the channels as the N dimension.
 *
 * Data is 64-byte aligned (one cache line, one AVX-512 vector). */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAX_DIMS 4

typedef struct kiln_tensor {
    float *data; /* owned, 64-byte aligned, zero-initialised */
    int ndim;
    int shape[KILN_MAX_DIMS];
    size_t size; /* product of shape */
} kiln_tensor;

/* A new zeroed tensor; NULL on allocation failure or a bad shape. Free with
 * kiln_tensor_free (NULL is fine). */
kiln_tensor *kiln_tensor_new(int ndim, const int *shape);
void kiln_tensor_free(kiln_tensor *t);

/* 64-byte aligned allocation of n floats (zeroed) and its release. */
float *kiln_falloc(size_t n);
void kiln_ffree(float *p);

/* ---- RNG: xoshiro256** seeded through SplitMix64 ----
 * The whole state is the four words below, so a checkpoint stores it as a
 * 32-byte blob (kiln_rng_encode) and a resumed run continues the exact stream. */
typedef struct kiln_rng {
    uint64_t s[4];
} kiln_rng;

#define KILN_RNG_STATE_SIZE 32
void kiln_rng_seed(kiln_rng *r, uint64_t seed);
uint64_t kiln_rng_next(kiln_rng *r);
/* Uniform in [0, 1) with 24 random bits: exact in float, identical everywhere. */
float kiln_rng_uniform(kiln_rng *r);
void kiln_rng_encode(const kiln_rng *r, uint8_t out[KILN_RNG_STATE_SIZE]);
void kiln_rng_decode(kiln_rng *r, const uint8_t in[KILN_RNG_STATE_SIZE]);

/* ---- compute threads ----
 * kiln runs its kernels on its own pool of `n` threads (the caller plus n-1
 * workers) and calls OpenBLAS single-threaded from each of them. Results are
 * bit-identical run to run for the same thread count; every reduction that
 * crosses threads is done in a fixed order. 0 = number of online CPUs.
 * Returns the count in effect. */
int kiln_set_threads(int n);
int kiln_get_threads(void);

/* OpenBLAS setup, idempotent, done automatically by the first kernel call:
 * Debian's OpenBLAS 0.3.21 falls back to generic kernels (~5x slower) on CPUs
 * it does not know. If the user has not set OPENBLAS_CORETYPE and the CPU has
 * AVX-512 (F, DQ, BW, VL) but OpenBLAS picked a non-AVX-512 core, kiln selects
 * SkylakeX and re-runs OpenBLAS's core selection. Returns the core name. */
const char *kiln_blas_init(void);

#ifdef __cplusplus
}
#endif
#endif
