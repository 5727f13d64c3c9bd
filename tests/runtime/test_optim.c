/* tests/runtime/test_optim.c - optimizer updates and the cosine learning
 * rate schedule against values worked out by hand, and the fast (threaded, multi-buffer) updates
 * against the plain loops: those must be bit-identical (same per-element arithmetic). */
#include "optim/optim.h"
#include "rt_test.h"
#include "test.h"

#include <math.h>

static int near(float a, double b)
{
    return fabs((double)a - b) <= 1e-6 * (1.0 + fabs(b));
}

int main(void)
{
    /* SGD momentum 0.9, lr 0.1: p=1, g=0.5 twice.
     * step 1: v = 0.5, p = 1 - 0.05 = 0.95
     * step 2: v = 0.9*0.5 + 0.5 = 0.95, p = 0.95 - 0.095 = 0.855 */
    /* the cosine schedule: base at step 0 and with no total, base/2 half
     * way, (1 + cos(pi/3)) / 2 = 3/4 of base a third of the way, 0 at the
     * end and after it */
    CHECK(kiln_lr_cosine(0.05, 0, 100) == 0.05f);
    CHECK(kiln_lr_cosine(0.05, 7, 0) == 0.05f);
    CHECK(near(kiln_lr_cosine(0.05, 50, 100), 0.025));
    CHECK(near(kiln_lr_cosine(0.08, 1, 3), 0.06));
    CHECK(kiln_lr_cosine(0.05, 100, 100) == 0.0f && kiln_lr_cosine(0.05, 250, 100) == 0.0f);

    float p = 1.0f, g = 0.5f, v = 0.0f;
    kiln_sgd_update_ref(&p, &g, &v, 1, 0.1f, 0.9f);
    CHECK(near(v, 0.5) && near(p, 0.95));
    kiln_sgd_update_ref(&p, &g, &v, 1, 0.1f, 0.9f);
    CHECK(near(v, 0.95) && near(p, 0.855));

    /* Adam lr 0.001, b1 0.9, b2 0.999, eps 1e-8, p=1, g=0.5:
     * t=1: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25 -> p = 1 - 0.001*0.5/(0.5+1e-8)
     * t=2 with g=-0.25: m = 0.045-0.025 = 0.02, v = 0.00024975+0.0000625 = 0.00031225
     *      mhat = 0.02/0.19, vhat = 0.00031225/0.001999 */
    float m = 0.0f;
    p = 1.0f, v = 0.0f;
    kiln_adam_update_ref(&p, &g, &m, &v, 1, 0.001f, 0.9f, 0.999f, 1e-8f, 1);
    CHECK(near(m, 0.05) && near(v, 0.00025));
    double p1 = 1.0 - 0.001 * 0.5 / (0.5 + 1e-8);
    CHECK_MSG(near(p, p1), "adam t=1 p %.9g want %.9g", p, p1);
    g = -0.25f;
    kiln_adam_update_ref(&p, &g, &m, &v, 1, 0.001f, 0.9f, 0.999f, 1e-8f, 2);
    double mh = 0.02 / (1 - 0.81), vh = 0.00031225 / (1 - 0.998001);
    double p2 = p1 - 0.001 * mh / (sqrt(vh) + 1e-8);
    CHECK(near(m, 0.02) && near(v, 0.00031225));
    CHECK_MSG(near(p, p2), "adam t=2 p %.9g want %.9g", p, p2);

    /* fast vs reference, several buffers of awkward sizes, 1 and 2 threads */
    kiln_rng r;
    kiln_rng_seed(&r, 7);
    size_t sizes[] = {1, 17, 1000, 70001};
    for (int threads = 1; threads <= 2; threads++) {
        kiln_set_threads(threads);
        for (int adam = 0; adam <= 1; adam++) {
            kiln_opt_buf fast[4] = {0}; /* .fused = 0: the plain update */
            float *pr[4], *s1r[4], *s2r[4];
            for (int i = 0; i < 4; i++) {
                size_t n = sizes[i];
                fast[i].p = rand_buf(&r, n, -1, 1);
                fast[i].g = rand_buf(&r, n, -1, 1);
                fast[i].s1 = rand_buf(&r, n, -1, 1);
                fast[i].s2 = rand_buf(&r, n, 0, 1);
                fast[i].n = n;
                pr[i] = copy_buf(fast[i].p, n);
                s1r[i] = copy_buf(fast[i].s1, n);
                s2r[i] = copy_buf(fast[i].s2, n);
            }
            for (uint64_t t = 1; t <= 3; t++) {
                if (adam) {
                    kiln_adam_update(fast, 4, 0.01f, 0.9f, 0.999f, 1e-8f, t);
                    for (int i = 0; i < 4; i++)
                        kiln_adam_update_ref(pr[i], fast[i].g, s1r[i], s2r[i], sizes[i], 0.01f,
                                             0.9f, 0.999f, 1e-8f, t);
                } else {
                    kiln_sgd_update(fast, 4, 0.05f, 0.9f);
                    for (int i = 0; i < 4; i++)
                        kiln_sgd_update_ref(pr[i], fast[i].g, s1r[i], sizes[i], 0.05f, 0.9f);
                }
            }
            for (int i = 0; i < 4; i++) {
                CHECK_MSG(bits_equal(fast[i].p, pr[i], sizes[i]) &&
                              bits_equal(fast[i].s1, s1r[i], sizes[i]) &&
                              (!adam || bits_equal(fast[i].s2, s2r[i], sizes[i])),
                          "optimizer fast != ref (adam=%d, n=%zu, threads=%d)", adam, sizes[i],
                          threads);
                kiln_ffree(fast[i].p), kiln_ffree((float *)fast[i].g), kiln_ffree(fast[i].s1),
                    kiln_ffree(fast[i].s2), kiln_ffree(pr[i]), kiln_ffree(s1r[i]),
                    kiln_ffree(s2r[i]);
            }
        }
    }
    TEST_DONE();
}
