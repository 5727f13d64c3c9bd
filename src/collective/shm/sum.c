/* sum.c - reference and vectorised multi-source float sums (see sum.h). */
#include "collective/shm/sum.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

/* The plain reference: one element at a time, sources in order. Kept free of
 * vectorisation so that it stays the obvious definition (GCC: the optimize
 * attribute; clang: a loop pragma). */
#if defined(__clang__)
#define KILN_NO_VECTORIZE
#else
#define KILN_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#endif
KILN_NO_VECTORIZE void kiln__sum_ref(float *out, float *out2, const float *const *src, int nsrc,
                                     size_t n)
{
#if defined(__clang__)
#pragma clang loop vectorize(disable) interleave(disable)
#endif
    for (size_t i = 0; i < n; i++) {
        float acc = src[0][i];
        for (int s = 1; s < nsrc; s++)
            acc += src[s][i];
        out[i] = acc;
        if (out2) out2[i] = acc;
    }
}

#if defined(__x86_64__)
/* Two sources is the common case (2 replicas) and the most bandwidth-bound:
 * a dedicated loop avoids the per-vector source loop. Both variants load every
 * source for a block before storing, so out aliasing a source is safe. */
__attribute__((target("avx2"))) static void sum_avx2(float *out, float *out2,
                                                     const float *const *src, int nsrc, size_t n)
{
    size_t i = 0;
    if (nsrc == 2) {
        const float *a = src[0], *b = src[1];
        for (; i + 32 <= n; i += 32) {
            __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
            __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
            __m256 x2 = _mm256_add_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
            __m256 x3 = _mm256_add_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
            _mm256_storeu_ps(out + i, x0);
            _mm256_storeu_ps(out + i + 8, x1);
            _mm256_storeu_ps(out + i + 16, x2);
            _mm256_storeu_ps(out + i + 24, x3);
            if (out2) {
                _mm256_storeu_ps(out2 + i, x0);
                _mm256_storeu_ps(out2 + i + 8, x1);
                _mm256_storeu_ps(out2 + i + 16, x2);
                _mm256_storeu_ps(out2 + i + 24, x3);
            }
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(src[0] + i);
        for (int s = 1; s < nsrc; s++)
            acc = _mm256_add_ps(acc, _mm256_loadu_ps(src[s] + i));
        _mm256_storeu_ps(out + i, acc);
        if (out2) _mm256_storeu_ps(out2 + i, acc);
    }
    if (i < n) {
        const float *tail[64];
        int k = nsrc < 64 ? nsrc : 64;
        for (int s = 0; s < k; s++)
            tail[s] = src[s] + i;
        if (k == nsrc) {
            kiln__sum_ref(out + i, out2 ? out2 + i : NULL, tail, nsrc, n - i);
        } else {
            /* more than 64 sources: still correct, just not batched */
            for (; i < n; i++) {
                float acc = src[0][i];
                for (int s = 1; s < nsrc; s++)
                    acc += src[s][i];
                out[i] = acc;
                if (out2) out2[i] = acc;
            }
        }
    }
}

__attribute__((target("avx512f"))) static void
sum_avx512(float *out, float *out2, const float *const *src, int nsrc, size_t n)
{
    size_t i = 0;
    if (nsrc == 2) {
        const float *a = src[0], *b = src[1];
        for (; i + 64 <= n; i += 64) {
            __m512 x0 = _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
            __m512 x1 = _mm512_add_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
            __m512 x2 = _mm512_add_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
            __m512 x3 = _mm512_add_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
            _mm512_storeu_ps(out + i, x0);
            _mm512_storeu_ps(out + i + 16, x1);
            _mm512_storeu_ps(out + i + 32, x2);
            _mm512_storeu_ps(out + i + 48, x3);
            if (out2) {
                _mm512_storeu_ps(out2 + i, x0);
                _mm512_storeu_ps(out2 + i + 16, x1);
                _mm512_storeu_ps(out2 + i + 32, x2);
                _mm512_storeu_ps(out2 + i + 48, x3);
            }
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_loadu_ps(src[0] + i);
        for (int s = 1; s < nsrc; s++)
            acc = _mm512_add_ps(acc, _mm512_loadu_ps(src[s] + i));
        _mm512_storeu_ps(out + i, acc);
        if (out2) _mm512_storeu_ps(out2 + i, acc);
    }
    if (i < n) {
        /* masked tail: lanes past n are neither loaded (no fault) nor stored */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 acc = _mm512_maskz_loadu_ps(m, src[0] + i);
        for (int s = 1; s < nsrc; s++)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, src[s] + i));
        _mm512_mask_storeu_ps(out + i, m, acc);
        if (out2) _mm512_mask_storeu_ps(out2 + i, m, acc);
    }
}
#endif

kiln__sum_fn kiln__sum_avx2(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) return sum_avx2;
#endif
    return NULL;
}

kiln__sum_fn kiln__sum_avx512(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return sum_avx512;
#endif
    return NULL;
}

static const char *pick(kiln__sum_fn *fn)
{
    const char *force = getenv("KILN_COLL_SUM");
    kiln__sum_fn f;

    if (force && strcmp(force, "ref") == 0) {
        *fn = kiln__sum_ref;
        return "ref";
    }
    if ((!force || strcmp(force, "avx2") != 0) && (f = kiln__sum_avx512())) {
        *fn = f;
        return "avx512";
    }
    if ((f = kiln__sum_avx2())) {
        *fn = f;
        return "avx2";
    }
    *fn = kiln__sum_ref;
    return "ref";
}

kiln__sum_fn kiln__sum_best(void)
{
    kiln__sum_fn f;
    pick(&f);
    return f;
}

const char *kiln__sum_best_name(void)
{
    kiln__sum_fn f;
    return pick(&f);
}
