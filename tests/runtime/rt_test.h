/* tests/runtime/rt_test.h - helpers shared by the runtime tests.
 *
 * KILN_TEST_SCALE: builds with sanitizers (KILN_SANITIZED, set by CMake) run
 * the same assertions on smaller problems, since ASan/UBSan make the numeric
 * loops ~20x slower. Never fewer assertions, only smaller inputs. */
#ifndef KILN_RT_TEST_H
#define KILN_RT_TEST_H

#include "kiln/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_SANITIZED
#define KILN_HEAVY 0
#else
#define KILN_HEAVY 1
#endif

static inline float *rand_buf(kiln_rng *r, size_t n, float lo, float hi)
{
    float *p = kiln_falloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * kiln_rng_uniform(r);
    return p;
}

static inline float *copy_buf(const float *a, size_t n)
{
    float *p = kiln_falloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = a[i];
    return p;
}

/* max |a-b| / max(1, max |b|): the error relative to the output's scale */
static inline double rel_err(const float *a, const float *b, size_t n)
{
    double m = 0.0, s = 1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return m / s;
}

static inline int bits_equal(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return 0;
    return 1;
}

#endif
