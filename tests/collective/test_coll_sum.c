/* test_coll_sum.c - the vectorised sums against the plain reference.
 *
 * Tolerance: none. Each element is summed in the same order (source 0 first)
 * on every path and vectorisation only runs across elements, so fast paths
 * must match the reference bit for bit, NaN payloads, infinities, signed
 * zeros and subnormals included. That exactness is what lets every replica
 * hold identical parameters. */
#include "collective/shm/sum.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* A float of any magnitude and sign, sometimes a special value, so that the
 * order of additions shows in the result. */
static float any_float(void)
{
    uint32_t r = next_u32();
    switch (r % 16) {
    case 0:
        return NAN;
    case 1:
        return INFINITY;
    case 2:
        return -0.0f;
    case 3:
        return 1e-40f; /* subnormal */
    default: {
        float m = (float)(next_u32() % 2000000) / 1000.0f - 1000.0f;
        int ex = (int)(next_u32() % 40) - 20;
        return ldexpf(m, ex);
    }
    }
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(float)) == 0;
}

static void compare(const char *name, kiln__sum_fn fast)
{
    static const size_t sizes[] = {0,  1,  2,  7,  8,   9,   15,  16,   17,   31,   32,
                                   33, 63, 64, 65, 127, 128, 129, 1000, 1023, 4097, 65536 + 13};
    for (int nsrc = 1; nsrc <= 6; nsrc++) {
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            size_t n = sizes[si];
            float *src[6],
                *want = malloc((n + 1) * sizeof(float)), *got = malloc((n + 1) * sizeof(float)),
                *want2 = malloc((n + 1) * sizeof(float)), *got2 = malloc((n + 1) * sizeof(float));
            const float *csrc[6];
            for (int s = 0; s < nsrc; s++) {
                src[s] = malloc((n + 1) * sizeof(float));
                for (size_t i = 0; i < n; i++)
                    src[s][i] = any_float();
                csrc[s] = src[s];
            }
            kiln__sum_ref(want, want2, csrc, nsrc, n);
            /* out2 path */
            fast(got, got2, csrc, nsrc, n);
            CHECK_MSG(same_bits(want, got, n) && same_bits(want2, got2, n),
                      "%s: nsrc %d n %zu differs from the reference", name, nsrc, n);
            CHECK(same_bits(want, want2, n));
            /* out2 NULL, and out aliasing the last source (the reducing
             * rank's own buffer in the all-reduce) */
            float *alias = malloc((n + 1) * sizeof(float));
            if (n) memcpy(alias, src[nsrc - 1], n * sizeof(float));
            csrc[nsrc - 1] = alias;
            fast(alias, NULL, csrc, nsrc, n);
            CHECK_MSG(same_bits(want, alias, n), "%s: nsrc %d n %zu in place differs", name, nsrc,
                      n);
            free(alias);
            for (int s = 0; s < nsrc; s++)
                free(src[s]);
            free(want);
            free(got);
            free(want2);
            free(got2);
        }
    }
    /* a sentinel past the end must survive (the masked AVX-512 tail) */
    float a[21], b[21], out[21];
    for (int i = 0; i < 21; i++)
        a[i] = b[i] = 1.0f, out[i] = -7.0f;
    const float *ab[2] = {a, b};
    fast(out, NULL, ab, 2, 20);
    CHECK(out[19] == 2.0f && out[20] == -7.0f);
}

int main(void)
{
    /* the reference itself, on numbers where the order is visible:
     * (1e8 + 1) - 1e8 = 0 in float, (1e8 - 1e8) + 1 = 1: sources are added
     * first to last, whatever their values */
    {
        float x[1] = {1e8f}, y[1] = {1.0f}, z[1] = {-1e8f}, out[1];
        const float *s[3] = {x, y, z};
        kiln__sum_ref(out, NULL, s, 3, 1);
        CHECK(out[0] == 0.0f);
        const float *t[3] = {y, x, z};
        kiln__sum_ref(out, NULL, t, 3, 1);
        CHECK(out[0] == 0.0f);
        const float *u[3] = {x, z, y};
        kiln__sum_ref(out, NULL, u, 3, 1);
        CHECK(out[0] == 1.0f);
    }
    kiln__sum_fn f;
    if ((f = kiln__sum_avx2()))
        compare("avx2", f);
    else
        printf("SKIP avx2: not supported by this CPU\n");
    if ((f = kiln__sum_avx512()))
        compare("avx512", f);
    else
        printf("SKIP avx512: not supported by this CPU\n");
    compare("best", kiln__sum_best());
    printf("best sum: %s\n", kiln__sum_best_name());
    TEST_DONE();
}
