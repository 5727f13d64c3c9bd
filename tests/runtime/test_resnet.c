/* tests/runtime/test_resnet.c - ResNet-50 v1.5 on the CPU (models/resnet.h).
 *
 *  - ResNet-50 (width 64, 1000 classes) has exactly 25,557,032 parameters
 *    (PyTorch's and the paper's count) and 7x7 final maps at 224x224;
 *  - the same topology at width 4: the fast ops and the _ref ops agree on
 *    logits, loss and the parameters after a training step (rel. 1e-3: float
 *    vs double sums through 53 layers), inference is deterministic (64x64
 *    images: at 32x32 the last stage's batch norms normalise 2 values per
 *    channel, which amplifies any rounding difference);
 *  - gradients: a small step against the gradient of each part of the
 *    network (stem, first block, stages 1-2, 3-4, classifier) lowers the
 *    loss by h*|g|^2 within 10%;
 *  - it trains: a fixed batch of 4 images is fitted (loss below 1/4 of the
 *    first step's within 12 SGD steps);
 *  - bad input (too small images, a label beyond the classes) is refused. */
#include "models/resnet.h"
#include "rt_test.h"
#include "test.h"

#include <stdio.h>

static kiln_rng R;

static void architecture(void)
{
    char err[256] = "";
    kiln_resnet_cfg cfg = {.width = 64, .classes = 1000, .seed = 1};
    kiln_resnet *r = kiln_resnet_create(&cfg, err, sizeof err);
    int sp[5];
    CHECK_MSG(r != NULL, "create: %s", err);
    if (r) {
        CHECK_MSG(kiln_resnet_param_count(r) == 25557032, "ResNet-50 has %zu parameters",
                  kiln_resnet_param_count(r));
        kiln_resnet_destroy(r);
    }
    CHECK(kiln_resnet_spatial(224, sp) == 0);
    CHECK(sp[0] == 56 && sp[1] == 56 && sp[2] == 28 && sp[3] == 14 && sp[4] == 7);
    CHECK(kiln_resnet_spatial(31, sp) == -1);
    cfg.width = 0;
    CHECK(kiln_resnet_create(&cfg, err, sizeof err) == NULL && strstr(err, "width"));
}

/* fast and reference paths of the same small model */
static void fast_vs_ref(int size)
{
    char err[256] = "";
    const int n = 2, K = 10;
    kiln_resnet_cfg cf = {.width = 4, .classes = K, .seed = 7}, cr = cf;
    cr.use_ref = 1;
    kiln_resnet *f = kiln_resnet_create(&cf, err, sizeof err);
    kiln_resnet *r = kiln_resnet_create(&cr, err, sizeof err);
    float *x = rand_buf(&R, (size_t)n * size * size * 3, -1, 1);
    float *lf = kiln_falloc(n * K), *lr = kiln_falloc(n * K), *l2 = kiln_falloc(n * K);
    uint8_t lab[2] = {3, 7};
    float lossf = 0, lossr = 0;
    double e;

    CHECK_MSG(f && r, "create: %s", err);
    if (!f || !r) goto out;
    CHECK(kiln_resnet_forward(f, x, n, size, lf, 1, err, sizeof err) == KILN_OK);
    CHECK(kiln_resnet_forward(r, x, n, size, lr, 1, err, sizeof err) == KILN_OK);
    CHECK_MSG((e = rel_err(lf, lr, (size_t)n * K)) < 1e-3, "training logits fast vs ref %g", e);
    CHECK(kiln_resnet_train_step(f, x, lab, n, size, 0.01f, 0.9f, &lossf, err, sizeof err) ==
          KILN_OK);
    CHECK(kiln_resnet_train_step(r, x, lab, n, size, 0.01f, 0.9f, &lossr, err, sizeof err) ==
          KILN_OK);
    CHECK_MSG(fabsf(lossf - lossr) < 1e-3f * fmaxf(1.0f, lossr), "loss %g vs %g", lossf, lossr);
    CHECK(isfinite(lossf) && lossf > 0);
    /* after the step: the parameters are compared through the outputs */
    CHECK(kiln_resnet_forward(f, x, n, size, lf, 0, err, sizeof err) == KILN_OK);
    CHECK(kiln_resnet_forward(r, x, n, size, lr, 0, err, sizeof err) == KILN_OK);
    CHECK_MSG((e = rel_err(lf, lr, (size_t)n * K)) < 1e-3, "inference logits after a step %g", e);
    CHECK(kiln_resnet_forward(f, x, n, size, l2, 0, err, sizeof err) == KILN_OK);
    CHECK(bits_equal(lf, l2, (size_t)n * K));
    for (int i = 0; i < n * K; i++)
        CHECK(isfinite(lf[i]));
    printf("fast vs ref at %dx%d: loss %.6f vs %.6f, logits err %.3g\n", size, size, lossf, lossr,
           e);
out:
    kiln_resnet_destroy(f);
    kiln_resnet_destroy(r);
    kiln_ffree(x), kiln_ffree(lf), kiln_ffree(lr), kiln_ffree(l2);
}

/* Gradients: for each group of buffers (stem, first block, stages 1-2,
 * stages 3-4, classifier), a step of -h*g on that group alone must lower the
 * loss by h*|g|^2 to first order. h is chosen so the predicted decrease is
 * 0.002 (far above float noise, small enough for first order); the measured
 * decrease must be within 10% of it. Reference path; lr 0 steps only compute
 * gradients. 128x128 images: the untrained narrow network is very sharp
 * (stem gradients ~10 per weight), and larger maps keep the batch norms of
 * the last stage (16 rows per channel here) well conditioned. */
static void gradients(int size)
{
    char err[256] = "";
    const int n = 2, K = 10;
    kiln_resnet_cfg cfg = {.width = 4, .classes = K, .seed = 11, .use_ref = 1};
    kiln_resnet *r = kiln_resnet_create(&cfg, err, sizeof err);
    float *x = rand_buf(&R, (size_t)n * size * size * 3, -1, 1), loss = 0, l2 = 0;
    uint8_t lab[2] = {2, 5};
    int nb;

    CHECK_MSG(r != NULL, "create: %s", err);
    if (!r) goto out;
    nb = kiln_resnet_buffer(r, -1, NULL, NULL, NULL);
    CHECK(nb == 3 + 3 * 3 * 16 + 3 * 4 + 2);
    int groups[][2] = {{0, 3}, {3, 15}, {15, 3 + 9 * 7 + 6}, {3 + 9 * 7 + 6, nb - 2}, {nb - 2, nb}};
    for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++) {
        int lo = groups[k][0], hi = groups[k][1];
        double g2 = 0, h;
        float *p;
        const float *g;
        size_t len;
        /* the gradient at the unperturbed parameters */
        CHECK(kiln_resnet_train_step(r, x, lab, n, size, 0.0f, 0.0f, &loss, err, sizeof err) ==
              KILN_OK);
        for (int b = lo; b < hi; b++) {
            kiln_resnet_buffer(r, b, &p, &g, &len);
            for (size_t i = 0; i < len; i++)
                g2 += (double)g[i] * g[i];
        }
        h = 0.002 / g2;
        float **keep = calloc((size_t)(hi - lo), sizeof *keep);
        for (int b = lo; b < hi && keep; b++) {
            kiln_resnet_buffer(r, b, &p, &g, &len);
            keep[b - lo] = copy_buf(p, len);
            for (size_t i = 0; i < len; i++)
                p[i] -= (float)(h * g[i]);
        }
        CHECK(kiln_resnet_train_step(r, x, lab, n, size, 0.0f, 0.0f, &l2, err, sizeof err) ==
              KILN_OK);
        double ratio = ((double)loss - l2) / 0.002;
        CHECK_MSG(ratio > 0.9 && ratio < 1.1, "buffers %d..%d: decrease %.4g of predicted 0.002",
                  lo, hi, (double)loss - l2);
        printf("gradient of buffers %3d..%3d: |g| %.3g, loss %.6f -> %.6f, ratio %.4f\n", lo, hi,
               sqrt(g2), loss, l2, ratio);
        for (int b = lo; b < hi && keep; b++) {
            kiln_resnet_buffer(r, b, &p, &g, &len);
            memcpy(p, keep[b - lo], len * sizeof(float));
            kiln_ffree(keep[b - lo]);
        }
        free(keep);
    }
out:
    kiln_resnet_destroy(r);
    kiln_ffree(x);
}

static void fits_a_batch(int size)
{
    char err[256] = "";
    const int n = 4, K = 10;
    kiln_resnet_cfg cfg = {.width = 4, .classes = K, .seed = 3};
    kiln_resnet *r = kiln_resnet_create(&cfg, err, sizeof err);
    float *x = rand_buf(&R, (size_t)n * size * size * 3, -1, 1), first = 0, loss = 0;
    uint8_t lab[4] = {1, 4, 4, 9};
    int steps = 0;

    CHECK_MSG(r != NULL, "create: %s", err);
    if (!r) goto out;
    for (; steps < 12; steps++) {
        if (kiln_resnet_train_step(r, x, lab, n, size, 0.05f, 0.9f, &loss, err, sizeof err)) {
            CHECK_MSG(0, "step %d: %s", steps, err);
            break;
        }
        if (steps == 0) first = loss;
        if (loss < first / 4) break;
    }
    printf("fit: loss %.4f -> %.4f in %d steps\n", first, loss, steps + 1);
    CHECK_MSG(loss < first / 4, "loss %g did not fall below a quarter of %g", loss, first);

    /* refusals */
    lab[2] = K;
    CHECK(kiln_resnet_train_step(r, x, lab, n, size, 0.05f, 0.9f, &loss, err, sizeof err) ==
          KILN_EINVAL);
    CHECK(strstr(err, "label") != NULL);
    CHECK(kiln_resnet_forward(r, x, 1, 16, NULL, 0, err, sizeof err) == KILN_EINVAL);
    CHECK(strstr(err, "32x32") != NULL);
out:
    kiln_resnet_destroy(r);
    kiln_ffree(x);
}

int main(void)
{
    kiln_rng_seed(&R, 50);
    architecture();
    /* 64x64: stage 4 maps are 2x2, so its batch norms see 8 rows; at 32x32
     * they would see 2 (1x1 maps), where normalisation amplifies rounding */
    fast_vs_ref(64);
    gradients(128);
    fits_a_batch(64);
    TEST_DONE();
}
