/* tests/runtime/test_gradsync.c - the data-parallel gradient API of train.h
 * (kiln_model_compute_grads / kiln_model_apply_grads) against the
 * single-replica kiln_model_train_step, with real Fashion-MNIST batches:
 *
 *  - one replica whose "all-reduce" is the identity ends with the same
 *    parameters as train_step: bit-identical for Adam (same per-element
 *    arithmetic); for SGD the single-replica step fuses momentum*v + g into
 *    the GEMM, whose rounding may differ by an ulp per step, so after
 *    STEPS steps the parameters agree to within 1e-5 relative (a wrong
 *    gradient, scale or layout is off by >1e-2 after one step);
 *  - two simulated replicas, each on half of a batch with scale 1/2 and the
 *    buffers summed by hand, hold bit-identical parameters and match one
 *    replica on the whole batch within 1e-5 relative (summation order);
 *  - the bucket plan: contiguous, layer-granular, announced in order during
 *    backward, the caller's extra floats ride in the last bucket untouched;
 *  - a replica with no examples contributes zeros and still announces every
 *    bucket. */
#include "kiln/train.h"
#include "rt_test.h"
#include "small_models.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#define STEPS 6
#define B     32
/* SGD, fused vs separate update: rounding of momentum*v + g differs by an ulp
 * now and then; batch norm's normalisation amplifies that over 6 steps to
 * ~1e-5 (measured 1.1e-5 on the CNN, 1.5e-8 on the MLP) */
#define TOL 5e-5

static kiln_data train;

/* cnn: 0 = MLP, 1 = CNN with batch norm, 2 = the same CNN without it (batch
 * norm normalises by the batch statistics, so two half batches are a
 * different computation than one whole batch, like TensorFlow without
 * SyncBatchNormalization) */
static kiln_model *make(int cnn, kiln_optimizer opt, int batch)
{
    int shape = SMALL_CNN | SMALL_CONV2 | (cnn == 1 ? SMALL_BN : 0);
    return small_model(cnn ? shape : SMALL_MLP, opt, batch);
}

typedef struct rec {
    int calls, order_ok;
    size_t next_off;
    float *base;
} rec;

static int on_ready(void *ud, int b, float *data, size_t count)
{
    rec *r = ud;
    /* buckets come in order and tile the buffer */
    if (b != r->calls || data != r->base + r->next_off) r->order_ok = 0;
    r->next_off += count;
    r->calls++;
    return 0;
}

static int on_wait(void *ud, int b)
{
    (void)ud;
    (void)b;
    return 0;
}

/* one replica, identity all-reduce, vs train_step */
static void one_replica(int cnn, kiln_optimizer opt, const char *what, int want_identical)
{
    kiln_model *a = make(cnn, opt, B), *b = make(cnn, opt, B);
    CHECK(a && b);
    if (!a || !b) goto out;
    size_t extra = 3, n = kiln_model_grad_count(b);
    float *g = kiln_falloc(n + extra);
    rec r = {.base = g};
    kiln_grad_sync s = {.grads = g,
                        .extra = extra,
                        .bucket_bytes = 4096,
                        .ud = &r,
                        .bucket_ready = on_ready,
                        .bucket_wait = on_wait};
    int nb = kiln_model_grad_buckets(b, 4096, extra, NULL, NULL, 0);
    int ok = 1;
    for (int st = 0; st < STEPS; st++) {
        const float *x = train.x + (size_t)st * B * train.dim;
        const uint8_t *y = train.y + (size_t)st * B;
        float la = 0, lb = 0;
        int ca = 0, cb = 0;
        g[n] = 1.0f, g[n + 1] = 2.0f, g[n + 2] = 3.0f;
        r.calls = 0, r.next_off = 0, r.order_ok = 1;
        ok &= kiln_model_train_step(a, x, y, B, &la, &ca) == 0;
        ok &= kiln_model_compute_grads(b, x, y, B, 1.0f, &s, &lb, &cb) == 0;
        ok &= kiln_model_apply_grads(b, &s) == 0;
        CHECK_MSG(r.calls == nb && r.order_ok && r.next_off == n + extra,
                  "%s: %d of %d buckets, in order %d, covering %zu of %zu", what, r.calls, nb,
                  r.order_ok, r.next_off, n + extra);
        CHECK_MSG(g[n] == 1.0f && g[n + 1] == 2.0f && g[n + 2] == 3.0f,
                  "%s: the caller's extra floats were touched", what);
        /* the first step starts from the same parameters: same forward, same loss */
        if (st == 0)
            CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0 && ca == cb, "%s: loss %g vs %g", what, la,
                      lb);
        else
            CHECK_MSG(fabsf(la - lb) <= 1e-5f * fabsf(la), "%s: loss %g vs %g", what, la, lb);
    }
    CHECK_MSG(ok, "%s: %s / %s", what, kiln_model_error(a), kiln_model_error(b));
    CHECK(kiln_model_step(a) == STEPS && kiln_model_step(b) == STEPS);
    int ident;
    double e = param_diff(a, b, &ident);
    printf("%s: %d buckets, max relative difference %.3g%s\n", what, nb, e,
           ident ? " (bit-identical)" : "");
    CHECK_MSG(e <= TOL, "%s: parameters differ by %g", what, e);
    if (want_identical) CHECK_MSG(ident, "%s: expected bit-identical parameters", what);
    /* the comparison can fail: one more step on one side only must show */
    kiln_model_train_step(a, train.x, train.y, B, NULL, NULL);
    e = param_diff(a, b, &ident);
    CHECK_MSG(e > 10 * TOL, "%s: one extra step left no trace (%g)", what, e);
    kiln_ffree(g);
out:
    kiln_model_free(a);
    kiln_model_free(b);
}

/* two replicas on halves of each batch, summed by hand, vs one on the whole */
static void two_replicas(int cnn, kiln_optimizer opt, const char *what)
{
    kiln_model *one = make(cnn, opt, B), *r0 = make(cnn, opt, B / 2), *r1 = make(cnn, opt, B / 2);
    CHECK(one && r0 && r1);
    if (!one || !r0 || !r1) goto out;
    size_t n = kiln_model_grad_count(one);
    float *g = kiln_falloc(n), *g0 = kiln_falloc(n), *g1 = kiln_falloc(n);
    kiln_grad_sync s = {.grads = g, .bucket_bytes = 0};
    kiln_grad_sync s0 = {.grads = g0, .bucket_bytes = 1024}, s1 = s0;
    s1.grads = g1;
    int ok = 1;
    for (int st = 0; st < STEPS; st++) {
        const float *x = train.x + (size_t)st * B * train.dim;
        const uint8_t *y = train.y + (size_t)st * B;
        ok &= kiln_model_compute_grads(one, x, y, B, 1.0f, &s, NULL, NULL) == 0;
        ok &= kiln_model_compute_grads(r0, x, y, B / 2, 0.5f, &s0, NULL, NULL) == 0;
        ok &= kiln_model_compute_grads(r1, x + (size_t)B / 2 * train.dim, y + B / 2, B / 2, 0.5f,
                                       &s1, NULL, NULL) == 0;
        for (size_t i = 0; i < n; i++) /* the all-reduce, in rank order on every rank */
            g0[i] = g1[i] = g0[i] + g1[i];
        ok &= kiln_model_apply_grads(one, &s) == 0;
        ok &= kiln_model_apply_grads(r0, &s0) == 0;
        ok &= kiln_model_apply_grads(r1, &s1) == 0;
    }
    CHECK_MSG(ok, "%s: %s", what, kiln_model_error(one));
    int ident;
    double e01 = param_diff(r0, r1, &ident);
    CHECK_MSG(ident && e01 == 0.0, "%s: the two replicas diverged", what);
    double e = param_diff(r0, one, &ident);
    printf("%s: 2 replicas vs 1, max relative difference %.3g\n", what, e);
    CHECK_MSG(e <= TOL, "%s: 2 replicas differ from 1 by %g", what, e);
    kiln_ffree(g);
    kiln_ffree(g0);
    kiln_ffree(g1);
out:
    kiln_model_free(one);
    kiln_model_free(r0);
    kiln_model_free(r1);
}

static void empty_replica(void)
{
    kiln_model *m = make(0, kiln_sgd(0.1f, 0.9f), B);
    CHECK(m != NULL);
    if (!m) return;
    size_t n = kiln_model_grad_count(m);
    float *g = kiln_falloc(n + 1);
    for (size_t i = 0; i <= n; i++)
        g[i] = 5.0f;
    rec r = {.base = g, .order_ok = 1};
    kiln_grad_sync s = {
        .grads = g, .extra = 1, .bucket_bytes = 1, .ud = &r, .bucket_ready = on_ready};
    float loss = -1;
    CHECK(kiln_model_compute_grads(m, train.x, train.y, 0, 0.0f, &s, &loss, NULL) == 0);
    int zeros = 1;
    for (size_t i = 0; i < n; i++)
        zeros &= g[i] == 0.0f;
    CHECK_MSG(zeros && g[n] == 5.0f, "n = 0: gradients must be zero, extra untouched");
    CHECK(r.calls == 3 && r.order_ok && r.next_off == n + 1); /* one bucket per dense layer */
    CHECK(loss == 0.0f);
    /* bad arguments: a clear error, nothing changed */
    CHECK(kiln_model_compute_grads(m, train.x, train.y, B + 1, 1.0f, &s, NULL, NULL) == -1);
    CHECK(strstr(kiln_model_error(m), "compiled for") != NULL);
    kiln_grad_sync none = {0};
    CHECK(kiln_model_apply_grads(m, &none) == -1);
    CHECK(kiln_model_step(m) == 0);
    kiln_ffree(g);
    kiln_model_free(m);
}

int main(void)
{
    kiln_data full = {0};
    char err[512];
    if (kiln_load_fashion_mnist(NULL, 1, &full, err, sizeof(err))) {
        fprintf(stderr, "Fashion-MNIST not available: %s\n", err);
        CHECK(0);
        TEST_DONE();
    }
    train = (kiln_data){.x = full.x, .y = full.y, .n = (STEPS + 1) * B, .dim = full.dim};
    kiln_set_threads(2);
    one_replica(0, kiln_sgd(0.05f, 0.9f), "mlp sgd", 0);
    one_replica(0, kiln_adam(0.001f), "mlp adam", 1);
    one_replica(1, kiln_sgd(0.05f, 0.9f), "cnn+bn sgd", 0);
    one_replica(1, kiln_adam(0.001f), "cnn+bn adam", 1);
    two_replicas(0, kiln_sgd(0.05f, 0.9f), "mlp sgd");
    two_replicas(2, kiln_adam(0.001f), "cnn adam");
    empty_replica();
    kiln_data_free(&full);
    TEST_DONE();
}
