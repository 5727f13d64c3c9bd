/* tests/runtime/test_device_table.c - the device path of the sequential
 * model (nn/model_dev.c: what a GPU runs), run here through the backend
 * table on the CPU ops (KILN_CPU_DEVICE_TABLE=1), against the CPU's own
 * fused path, with real Fashion-MNIST batches:
 *
 *  - the same model and seed trained STEPS steps both ways ends with the
 *    same parameters within TOL (the CPU path fuses SGD's momentum into the
 *    weight-gradient GEMM, the device path updates after: an ulp now and
 *    then; Adam's update is the same per-element arithmetic), for an MLP, a
 *    CNN with batch norm, max and average pooling; losses and evaluation
 *    agree too. A wrong gradient, layout or hyper-parameter is off by far
 *    more than TOL after one step (checked: one step more is detected);
 *  - the state round trip: the host copies of a device model, written into
 *    a second device model (what a checkpoint restore does), continue
 *    bit-identically with the first; a learning rate changed between steps
 *    reaches the device;
 *  - kiln_model_fit's pipelined device loop (batch k+1 staged while step k
 *    runs) trains on the same batches in the same order as the CPU's loop,
 *    and stopped by a callback and resumed where it stopped ends
 *    bit-identical to an uninterrupted device run;
 *  - mixed precision (bf16, fp16) on the CPU table, the reference of the
 *    rounding (backend.h): 6 steps end within LOWP_TOL of fp32 and yet not
 *    equal to it (the rounding is there); MIX_STEPS steps reach the fp32
 *    model's test accuracy within ACC_PTS points; an fp16 step whose
 *    forward overflows (a pixel of 1e6: inf in fp16) is skipped with every
 *    buffer's bits kept and the loss scale halved; the host copies of a bf16
 *    model continue bit-identically in a second one (a checkpoint restore);
 *    bf16 on /cpu:0 without the table goes through it;
 *  - refusals: an unknown device string, a GPU where none can be driven
 *    (named), a device set after compile, TF32 on the CPU. */
#include "backend/backend.h" /* kiln__round_lowp */
#include "kiln/train.h"
#include "rt_test.h"
#include "small_models.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 6
#define B     32
#define TOL   5e-5 /* test_gradsync.c's, for the same fused-vs-separate SGD rounding */
/* bf16 keeps 8 significant bits (relative rounding 2^-9 = 2e-3), fp16 11
 * (2.4e-4); param_diff is the largest absolute difference over the largest
 * parameter (>= 1), where a ReLU unit that switches on in one run and not
 * the other dominates. Measured (this file's output) after 6 steps: bf16
 * MLP SGD 8.5e-4, MLP Adam 6.5e-3, CNN SGD 1.0e-3; fp16 MLP SGD 8.5e-4,
 * CNN Adam 2.1e-3. Bounds with ~1.4-3x room. */
#define LOWP_TOL_BF16 2e-2
#define LOWP_TOL_FP16 3e-3
#define MIX_STEPS     600 /* 19,200 examples, SGD 0.01: ~81% test accuracy in fp32 */
#define ACC_PTS                                                                                    \
    2.0 /* test accuracy within 2 points of fp32's (1,000 images); measured                        \
           fp32 0.813, bf16 0.815, fp16 0.820 */

static kiln_data train, test;

enum { MLP = 0, CNN = 1 };

/* The model of `shape` (small_models.h's layers), on the CPU's fused path
 * (table 0), through the device table (1) or the reference table (2). */
static kiln_model *build_prec(int shape, kiln_optimizer opt, int table, kiln_precision prec)
{
    kiln_model *m =
        small_model_layers(shape == CNN ? SMALL_CNN | SMALL_BN | SMALL_CONV2 : SMALL_MLP);
    setenv("KILN_CPU_DEVICE_TABLE", table == 2 ? "ref" : table ? "1" : "0", 1);
    int bad = kiln_model_set_device(m, "/cpu:0");
    if (!bad) bad = kiln_model_set_precision(m, prec);
    if (!bad) bad = kiln_model_compile(m, opt, KILN_SOFTMAX_XENT, B, 7);
    unsetenv("KILN_CPU_DEVICE_TABLE");
    if (bad) {
        fprintf(stderr, "build: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static kiln_model *build(int shape, kiln_optimizer opt, int table)
{
    return build_prec(shape, opt, table, KILN_PRECISION_FP32);
}

static int steps(kiln_model *m, int from, int n, float *losses)
{
    for (int s = from; s < from + n; s++)
        if (kiln_model_train_step(m, train.x + (size_t)s * B * train.dim, train.y + (size_t)s * B,
                                  B, losses ? &losses[s - from] : NULL, NULL))
            return -1;
    return 0;
}

static void against_cpu(int shape, kiln_optimizer opt, const char *what, int table, double tol)
{
    kiln_model *a = build(shape, opt, 0), *b = build(shape, opt, table);
    float la[STEPS], lb[STEPS];
    int ident;
    CHECK(a && b);
    if (!a || !b) goto out;
    CHECK_MSG(strstr(kiln_model_device_name(b), "table") != NULL,
              "%s: device table not in use (%s)", what, kiln_model_device_name(b));
    CHECK_MSG(steps(a, 0, STEPS, la) == 0 && steps(b, 0, STEPS, lb) == 0, "%s: %s / %s", what,
              kiln_model_error(a), kiln_model_error(b));
    for (int i = 0; i < STEPS; i++)
        CHECK_MSG(fabsf(la[i] - lb[i]) <= fmax(1e-4, tol) * fabsf(la[i]),
                  "%s: step %d loss %g vs %g", what, i, la[i], lb[i]);
    CHECK(kiln_model_step(a) == STEPS && kiln_model_step(b) == STEPS);
    double e = param_diff(a, b, &ident);
    printf("%-14s %s table vs CPU path: params rel err %.3g (tol %g)\n", what,
           table == 2 ? "reference" : "device", e, tol);
    CHECK_MSG(e <= tol, "%s: parameters differ by %g", what, e);
    /* evaluation and prediction on the device path */
    float ta, tb, aa, ab, pa[10 * 5], pb[10 * 5];
    CHECK(kiln_model_evaluate(a, test.x, test.y, 100, &ta, &aa) == 0);
    CHECK(kiln_model_evaluate(b, test.x, test.y, 100, &tb, &ab) == 0);
    CHECK_MSG(fabsf(ta - tb) <= fmax(1e-4, tol) * fabsf(ta) && fabsf(aa - ab) <= 0.011f,
              "%s: evaluation %g/%g vs %g/%g", what, ta, aa, tb, ab);
    CHECK(kiln_model_predict(a, test.x, 5, pa) == 0 && kiln_model_predict(b, test.x, 5, pb) == 0);
    CHECK_MSG(rel_err(pb, pa, 50) <= fmax(1e-4, 10 * tol), "%s: predictions differ by %g", what,
              rel_err(pb, pa, 50));
    /* one step more on one side is far outside the tolerance */
    CHECK(steps(b, STEPS, 1, NULL) == 0);
    e = param_diff(a, b, &ident);
    CHECK_MSG(e > 10 * tol, "%s: one extra step left no trace (%g)", what, e);
out:
    kiln_model_free(a);
    kiln_model_free(b);
}

/* Copies every buffer of src into dst through kiln_model_buffer, as a
 * checkpoint restore does. */
static void copy_state(kiln_model *dst, kiln_model *src)
{
    for (size_t i = 0; i < kiln_model_num_buffers(src); i++) {
        kiln_buffer s = kiln_model_buffer(src, i), d = kiln_model_buffer(dst, i);
        memcpy(d.data, s.data, sizeof(float) * s.size);
    }
    kiln_model_set_step(dst, kiln_model_step(src));
}

static void state_round_trip_prec(int shape, kiln_optimizer opt, const char *what, kiln_precision p)
{
    kiln_model *a = build_prec(shape, opt, 1, p), *b = build_prec(shape, opt, 1, p),
               *c = build_prec(shape, opt, 1, p);
    int ident;
    CHECK(a && b && c);
    if (!a || !b || !c) goto out;
    CHECK(steps(a, 0, 3, NULL) == 0);
    CHECK(kiln_model_sync_host(a) == 0);
    copy_state(b, a); /* b: restored from a's host copies */
    CHECK(steps(a, 3, 3, NULL) == 0 && steps(b, 3, 3, NULL) == 0);
    double e = param_diff(a, b, &ident);
    CHECK_MSG(ident, "%s: a restored device model diverged from the original (%g)", what, e);
    /* the running statistics and optimizer slots too, not only parameters */
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i), y = kiln_model_buffer(b, i);
        CHECK_MSG(bits_equal(x.data, y.data, x.size), "%s: %s differs after the restore", what,
                  x.name);
    }
    /* a learning rate set between steps reaches the device: c trains with
     * a different rate from step 3 on and must end elsewhere */
    copy_state(c, a);
    copy_state(b, a);
    kiln_model_set_lr(c, kiln_model_lr(c) * 0.5f);
    CHECK(steps(b, 0, 2, NULL) == 0 && steps(c, 0, 2, NULL) == 0);
    e = param_diff(b, c, &ident);
    CHECK_MSG(!ident && e > 1e-6, "%s: a changed learning rate did not reach the device", what);
out:
    kiln_model_free(a);
    kiln_model_free(b);
    kiln_model_free(c);
}

static void state_round_trip(int shape, kiln_optimizer opt, const char *what)
{
    state_round_trip_prec(shape, opt, what, KILN_PRECISION_FP32);
}

typedef struct stopper {
    uint64_t stop_at; /* global step after which to stop; 0 = never */
    uint64_t epoch, step;
    int lr_changes;
} stopper;

static int on_step(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    stopper *s = ud;
    /* a schedule, as kiln-train runs one: the rate of the next step */
    kiln_model_set_lr(m, 0.05f / (float)(1 + in->global_step));
    s->lr_changes++;
    s->epoch = in->last_in_epoch ? in->epoch + 1 : in->epoch;
    s->step = in->last_in_epoch ? 0 : in->step + 1;
    return s->stop_at && in->global_step == s->stop_at;
}

static int fit(kiln_model *m, const kiln_data *d, uint64_t epoch, uint64_t step, stopper *st)
{
    kiln_fit_opts fo = {
        .epochs = 2, .shuffle_seed = 99, .initial_epoch = epoch, .initial_step = step};
    kiln_callbacks cb = {.ud = st, .on_step_end = on_step};
    return kiln_model_fit(m, d, &fo, &cb);
}

static void fit_pipelined(void)
{
    kiln_data d = {.x = train.x, .y = train.y, .n = 5 * B + 7, .dim = train.dim};
    kiln_model *cpu = build(MLP, kiln_sgd(0.05f, 0.9f), 0);
    kiln_model *dev = build(MLP, kiln_sgd(0.05f, 0.9f), 1);
    kiln_model *a = build(MLP, kiln_sgd(0.05f, 0.9f), 1);
    kiln_model *b = build(MLP, kiln_sgd(0.05f, 0.9f), 1);
    stopper s0 = {0}, s1 = {0}, s2 = {.stop_at = 4}, s3 = {0};
    int ident;
    CHECK(cpu && dev && a && b);
    if (!cpu || !dev || !a || !b) goto out;
    CHECK(fit(cpu, &d, 0, 0, &s0) == 0 && fit(dev, &d, 0, 0, &s1) == 0);
    CHECK_MSG(kiln_model_step(dev) == 12 && s1.lr_changes == 12, "fit: %llu steps",
              (unsigned long long)kiln_model_step(dev));
    double e = param_diff(cpu, dev, &ident);
    printf("fit (pipelined device loop) vs CPU loop: params rel err %.3g\n", e);
    CHECK_MSG(e <= TOL, "fit: the device loop trained differently (%g)", e);
    /* stopped after step 4 (a batch of step 5 was already staged) and
     * resumed in a new model from the host copies */
    CHECK(fit(a, &d, 0, 0, &s2) == 1);
    CHECK(kiln_model_step(a) == 4);
    copy_state(b, a);
    kiln_model_set_lr(b, kiln_model_lr(a));
    CHECK(fit(b, &d, s2.epoch, s2.step, &s3) == 0);
    e = param_diff(b, dev, &ident);
    CHECK_MSG(ident, "fit: stopped and resumed differs from uninterrupted (%g)", e);
out:
    kiln_model_free(cpu);
    kiln_model_free(dev);
    kiln_model_free(a);
    kiln_model_free(b);
}

/* ---- mixed precision ---- */

static const char *pname(kiln_precision p)
{
    return kiln_precision_name(p);
}

/* The reference rounding at its edges: ties to even, fp16's largest
 * finite value, its overflow to inf and its subnormals, NaN kept. */
static void rounding(void)
{
    static const float in[] = {1.0f + 0x1p-8f,
                               1.0f + 0x3p-8f,
                               1.0f + 0x1p-11f,
                               1.0f + 0x3p-11f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               -70000.0f,
                               0x1p-25f,
                               0x3p-25f,
                               0x1p-14f,
                               3.0e38f,
                               0.1f,
                               NAN};
    static const float bf[] = {1.0f,     1.0f + 0x1p-6f, 1.0f,          1.0f,     65536.0f,
                               65536.0f, 65536.0f,       -70144.0f,     0x1p-25f, 0x3p-25f,
                               0x1p-14f, 0x1.c4p+127f,   0.10009765625f};
    static const float hf[] = {
        1.0f + 0x1p-8f,  1.0f + 0x3p-8f, 1.0f, 1.0f + 0x1p-9f, 65504.0f, 65504.0f,
        INFINITY,        -INFINITY,      0.0f, 0x1p-23f,       0x1p-14f, INFINITY,
        0.0999755859375f};
    float ob[14], oh[14];
    kiln__round_lowp(KILN__LOWP_BF16, in, ob, 14);
    kiln__round_lowp(KILN__LOWP_FP16, in, oh, 14);
    for (int i = 0; i < 13; i++) {
        CHECK_MSG(ob[i] == bf[i], "bf16(%a) = %a, expected %a", in[i], ob[i], bf[i]);
        CHECK_MSG(oh[i] == hf[i], "fp16(%a) = %a, expected %a", in[i], oh[i], hf[i]);
    }
    CHECK(isnan(ob[13]) && isnan(oh[13]));
}

/* STEPS steps in prec on the CPU table against fp32 on the CPU path */
static void lowp_vs_fp32(int shape, kiln_optimizer opt, kiln_precision prec, const char *what)
{
    double tol = prec == KILN_PRECISION_BF16 ? LOWP_TOL_BF16 : LOWP_TOL_FP16;
    kiln_model *a = build(shape, opt, 0), *b = build_prec(shape, opt, 1, prec);
    float la[STEPS], lb[STEPS];
    int ident;
    CHECK(a && b);
    if (!a || !b) goto out;
    CHECK_MSG(steps(a, 0, STEPS, la) == 0 && steps(b, 0, STEPS, lb) == 0, "%s %s: %s / %s", what,
              pname(prec), kiln_model_error(a), kiln_model_error(b));
    for (int i = 0; i < STEPS; i++)
        CHECK_MSG(fabsf(la[i] - lb[i]) <= tol * fabsf(la[i]) + 1e-3f,
                  "%s %s: step %d loss %g vs %g", what, pname(prec), i, la[i], lb[i]);
    double e = param_diff(a, b, &ident);
    printf("%-14s %s on the CPU table vs fp32: params rel err %.3g (tol %g)\n", what, pname(prec),
           e, tol);
    CHECK_MSG(e <= tol, "%s %s: parameters differ from fp32 by %g", what, pname(prec), e);
    /* the rounding is there: fp32 on the table is within TOL of a (above) */
    CHECK_MSG(e > 10 * TOL, "%s %s: as close to fp32 as fp32 itself (%g): no rounding?", what,
              pname(prec), e);
    CHECK_MSG(kiln_model_loss_scale(b, NULL) == (prec == KILN_PRECISION_FP16 ? 65536.0f : 0.0f),
              "%s %s: loss scale %g", what, pname(prec), kiln_model_loss_scale(b, NULL));
out:
    kiln_model_free(a);
    kiln_model_free(b);
}

/* test accuracy on 1,000 images after MIX_STEPS steps */
static float trained_acc(kiln_model *m, const kiln_data *d)
{
    float loss = 0, acc = -1;
    for (int s = 0; s < MIX_STEPS; s++) {
        size_t at = (size_t)s * B % (d->n - B);
        if (kiln_model_train_step(m, d->x + at * d->dim, d->y + at, B, NULL, NULL)) return -1;
    }
    if (kiln_model_evaluate(m, test.x, test.y, 1000, &loss, &acc)) return -1;
    return acc;
}

static void lowp_accuracy(const kiln_data *d)
{
    kiln_precision ps[] = {KILN_PRECISION_FP32, KILN_PRECISION_BF16, KILN_PRECISION_FP16};
    float acc[3];
    for (int i = 0; i < 3; i++) {
        kiln_model *m = build_prec(MLP, kiln_sgd(0.02f, 0.9f), 1, ps[i]);
        CHECK(m != NULL);
        acc[i] = m ? trained_acc(m, d) : -1;
        CHECK_MSG(acc[i] >= 0, "%s: %s", pname(ps[i]), m ? kiln_model_error(m) : "no model");
        kiln_model_free(m);
    }
    printf(
        "mlp after %d steps, test accuracy: fp32 %.3f bf16 %.3f fp16 %.3f (within %.1f points)\n",
        MIX_STEPS, acc[0], acc[1], acc[2], ACC_PTS);
    CHECK_MSG(acc[0] > 0.6f, "fp32 learned too little to compare with (%.3f)", acc[0]);
    for (int i = 1; i < 3; i++)
        CHECK_MSG(fabs(acc[i] - acc[0]) * 100 <= ACC_PTS, "%s accuracy %.3f vs fp32 %.3f",
                  pname(ps[i]), acc[i], acc[0]);
}

/* every buffer of a (host copies) into fresh memory */
static float **snapshot(kiln_model *a)
{
    size_t nb = kiln_model_num_buffers(a);
    float **s = calloc(nb, sizeof *s);
    for (size_t i = 0; s && i < nb; i++) {
        kiln_buffer x = kiln_model_buffer(a, i);
        s[i] = copy_buf(x.data, x.size);
    }
    return s;
}

static int same_as(kiln_model *a, float **s, const char **which)
{
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i);
        if (!bits_equal(x.data, s[i], x.size)) {
            *which = x.name;
            return 0;
        }
    }
    return 1;
}

/* same_as without batch norm's moving statistics, which are each replica's
 * own (kiln/train.h: from its own batches) */
static int same_but_moving(kiln_model *a, float **s, const char **which)
{
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i);
        if (!strstr(x.name, "moving_") && !bits_equal(x.data, s[i], x.size)) {
            *which = x.name;
            return 0;
        }
    }
    return 1;
}

static void free_snapshot(kiln_model *a, float **s)
{
    for (size_t i = 0; s && i < kiln_model_num_buffers(a); i++)
        free(s[i]);
    free(s);
}

/* An fp16 step whose forward overflows is skipped: no buffer changes (batch
 * norm's running statistics too: the forward that overflowed updated them),
 * the scale halves; the next finite step trains again. For SGD and Adam. */
static void fp16_overflow(int shape, kiln_optimizer opt, const char *what)
{
    kiln_model *m = build_prec(shape, opt, 1, KILN_PRECISION_FP16);
    float *x = NULL, **snap = NULL, loss = 0;
    uint64_t skipped = 9;
    const char *which = "";
    CHECK(m != NULL);
    if (!m) return;
    CHECK(steps(m, 0, 2, NULL) == 0);
    CHECK(kiln_model_loss_scale(m, &skipped) == 65536.0f && skipped == 0);
    CHECK(kiln_model_sync_host(m) == 0);
    snap = snapshot(m);
    x = copy_buf(train.x + 2 * (size_t)B * train.dim, (size_t)B * train.dim);
    CHECK(snap && x);
    if (!snap || !x) goto out;
    x[100] = 1e6f; /* beyond fp16's 65504: inf after rounding */
    CHECK(kiln_model_train_step(m, x, train.y + 2 * B, B, &loss, NULL) == 0);
    CHECK(kiln_model_sync_host(m) == 0);
    CHECK_MSG(same_as(m, snap, &which), "%s: the skipped fp16 step changed %s", what, which);
    CHECK_MSG(kiln_model_loss_scale(m, &skipped) == 32768.0f && skipped == 1,
              "%s: after an overflow: scale %g, %llu skipped", what, kiln_model_loss_scale(m, NULL),
              (unsigned long long)skipped);
    printf("%s fp16: an overflowing step (loss %g) skipped, every buffer bit-identical, scale "
           "65536 -> %g\n",
           what, loss, kiln_model_loss_scale(m, NULL));
    /* the next finite step is applied */
    CHECK(steps(m, 3, 1, NULL) == 0);
    CHECK(kiln_model_sync_host(m) == 0);
    CHECK_MSG(!same_as(m, snap, &which), "%s: a finite step after the skip changed nothing", what);
    CHECK(kiln_model_loss_scale(m, &skipped) == 32768.0f && skipped == 1);
out:
    free(x);
    free_snapshot(m, snap);
    kiln_model_free(m);
}

/* bf16's state is fp32 masters: the host copies, written into a second
 * model, continue bit-identically; /cpu:0 without the table takes it */
static void bf16_resume(void)
{
    state_round_trip_prec(CNN, kiln_adam(0.001f), "cnn+bn adam bf16", KILN_PRECISION_BF16);
    state_round_trip_prec(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd fp16", KILN_PRECISION_FP16);
    kiln_model *m = small_model_layers(SMALL_MLP), *m2;
    CHECK(kiln_model_set_device(m, "/cpu:0") == 0);
    CHECK(kiln_model_set_precision(m, KILN_PRECISION_BF16) == 0);
    CHECK(kiln_model_compile(m, kiln_sgd(0.05f, 0.9f), KILN_SOFTMAX_XENT, B, 7) == 0);
    CHECK_MSG(strstr(kiln_model_device_name(m), "table") != NULL,
              "bf16 on /cpu:0 is not on the CPU table (%s)", kiln_model_device_name(m));
    /* and back to fp32: the CPU's own path again */
    m2 = small_model_layers(SMALL_MLP);
    CHECK(kiln_model_set_device(m2, "/cpu:0") == 0);
    CHECK(kiln_model_set_precision(m2, KILN_PRECISION_BF16) == 0);
    CHECK(kiln_model_set_precision(m2, KILN_PRECISION_FP32) == 0);
    CHECK(kiln_model_compile(m2, kiln_sgd(0.05f, 0.9f), KILN_SOFTMAX_XENT, B, 7) == 0);
    CHECK_MSG(strcmp(kiln_model_device_name(m2), "CPU") == 0, "bf16 then fp32: %s",
              kiln_model_device_name(m2));
    kiln_model_free(m2);
    kiln_model_free(m);
    /* the precision set before the device: the device's reset would leave
     * bf16 on the fp32 path: refused at compile */
    m = small_model_layers(SMALL_MLP);
    CHECK(kiln_model_set_precision(m, KILN_PRECISION_BF16) == 0);
    CHECK(kiln_model_set_device(m, "/cpu:0") == 0);
    CHECK(kiln_model_compile(m, kiln_sgd(0.05f, 0.9f), KILN_SOFTMAX_XENT, B, 7) == -1);
    CHECK_MSG(strstr(kiln_model_error(m), "bf16") != NULL, "bf16 then device: %s",
              kiln_model_error(m));
    kiln_model_free(m);
}

/* ---- data parallelism through the device path ----
 * Two replicas in this process, each summing the other's gradient as a
 * strategy's all-reduce does (kiln_model_compute_grads writes it to the
 * host buffer, kiln_model_apply_grads updates with the sum). */
static int dp_step(kiln_model *const *r, float *const *g, size_t ng, const float *const *x,
                   const uint8_t *const *y, const int *n)
{
    kiln_grad_sync s[2];
    for (int k = 0; k < 2; k++) {
        s[k] = (kiln_grad_sync){.grads = g[k]};
        if (kiln_model_compute_grads(r[k], x[k], y[k], n[k], (float)n[k] / (float)(n[0] + n[1]),
                                     &s[k], NULL, NULL)) {
            fprintf(stderr, "compute_grads: %s\n", kiln_model_error(r[k]));
            return -1;
        }
    }
    for (size_t i = 0; i < ng; i++)
        g[0][i] = g[1][i] = g[0][i] + g[1][i];
    for (int k = 0; k < 2; k++)
        if (kiln_model_apply_grads(r[k], &s[k])) {
            fprintf(stderr, "apply_grads: %s\n", kiln_model_error(r[k]));
            return -1;
        }
    return 0;
}

/* STEPS data-parallel steps of two replicas on the CPU table (each half of
 * a batch of B) against: each other (bit-identical: one sum, one update),
 * two replicas on the CPU's fused path (fp32: within TOL), and one model
 * taking the whole batch (the MLP, which has no per-replica batch norm:
 * within TOL in fp32, LOWP_TOL in bf16/fp16; then one step with every
 * example on replica 0 and none on 1). fp16: an overflow in one replica's
 * half makes both skip the step, bits kept, both scales halved. */
static void data_parallel(int shape, kiln_optimizer opt, kiln_precision prec, const char *what)
{
    int fp32 = prec == KILN_PRECISION_FP32, h = B / 2;
    double tol = fp32 ? TOL : prec == KILN_PRECISION_BF16 ? LOWP_TOL_BF16 : LOWP_TOL_FP16;
    kiln_model *a[2] = {fp32 ? build(shape, opt, 0) : NULL, fp32 ? build(shape, opt, 0) : NULL};
    kiln_model *b[2] = {build_prec(shape, opt, 1, prec), build_prec(shape, opt, 1, prec)};
    kiln_model *one = build_prec(shape, opt, 1, prec);
    float *ga[2] = {NULL, NULL}, *gb[2] = {NULL, NULL}, **snap = NULL, **snap1 = NULL, *bad = NULL;
    size_t ng = b[0] ? kiln_model_grad_count(b[0]) : 0, dim = train.dim;
    const char *which = "";
    int ident = 0, ok = 1;
    CHECK(b[0] && b[1] && one && (!fp32 || (a[0] && a[1])));
    if (!b[0] || !b[1] || !one || (fp32 && (!a[0] || !a[1]))) goto out;
    for (int k = 0; k < 2; k++) {
        ga[k] = calloc(ng, sizeof(float));
        gb[k] = calloc(ng, sizeof(float));
    }
    CHECK(ga[0] && ga[1] && gb[0] && gb[1]);
    if (!ga[0] || !ga[1] || !gb[0] || !gb[1]) goto out;
    for (int st = 0; st < STEPS && ok; st++) {
        const float *x0 = train.x + (size_t)st * B * dim;
        const uint8_t *y0 = train.y + (size_t)st * B;
        const float *x[2] = {x0, x0 + (size_t)h * dim};
        const uint8_t *y[2] = {y0, y0 + h};
        int n[2] = {h, h};
        ok = dp_step(b, gb, ng, x, y, n) == 0 && (!fp32 || dp_step(a, ga, ng, x, y, n) == 0) &&
             kiln_model_train_step(one, x0, y0, B, NULL, NULL) == 0;
    }
    CHECK_MSG(ok, "%s: a data-parallel step failed", what);
    if (!ok) goto out;
    CHECK(kiln_model_step(b[0]) == STEPS && kiln_model_step(b[1]) == STEPS);
    CHECK(kiln_model_sync_host(b[1]) == 0);
    snap = snapshot(b[1]);
    CHECK_MSG(snap && same_but_moving(b[0], snap, &which), "%s: the two replicas differ in %s",
              what, which);
    if (fp32) {
        double e = param_diff(a[0], b[0], &ident);
        printf("%-20s 2 replicas, device table vs CPU path: params rel err %.3g (tol %g)\n", what,
               e, tol);
        CHECK_MSG(e <= tol, "%s: data parallel on the device table differs from the CPU's by %g",
                  what, e);
    }
    if (shape == MLP) {
        double e = param_diff(one, b[0], &ident);
        printf("%-20s 2 replicas vs 1 with the whole batch: params rel err %.3g (tol %g)\n", what,
               e, tol);
        CHECK_MSG(e <= tol, "%s: 2 replicas differ from 1 by %g", what, e);
        CHECK_MSG(e > 0 || fp32, "%s: bit-identical to one replica: were the halves summed?", what);
        /* a replica with no examples contributes zeros and takes the step */
        const float *x[2] = {train.x + (size_t)STEPS * B * dim, NULL};
        const uint8_t *y[2] = {train.y + (size_t)STEPS * B, NULL};
        int n[2] = {B, 0};
        CHECK(dp_step(b, gb, ng, x, y, n) == 0 &&
              kiln_model_train_step(one, x[0], y[0], B, NULL, NULL) == 0);
        e = param_diff(one, b[0], &ident);
        CHECK_MSG(e <= tol, "%s: a step with an empty replica differs from 1 by %g", what, e);
    }
    if (prec == KILN_PRECISION_FP16) {
        /* one replica's half overflows: the sum is not finite on both */
        free_snapshot(b[1], snap);
        CHECK(kiln_model_sync_host(b[0]) == 0);
        snap = snapshot(b[0]);
        snap1 = snapshot(b[1]);
        bad = copy_buf(train.x + (size_t)h * dim, (size_t)h * dim);
        CHECK(snap && snap1 && bad);
        if (!snap || !snap1 || !bad) goto out;
        bad[7] = 1e6f;
        const float *x[2] = {train.x, bad};
        const uint8_t *y[2] = {train.y, train.y + h};
        int n[2] = {h, h};
        uint64_t sk0 = 0, sk1 = 0;
        float s0 = kiln_model_loss_scale(b[0], NULL);
        CHECK(dp_step(b, gb, ng, x, y, n) == 0);
        CHECK(kiln_model_sync_host(b[0]) == 0 && kiln_model_sync_host(b[1]) == 0);
        CHECK_MSG(same_as(b[0], snap, &which) && same_as(b[1], snap1, &which),
                  "%s: the overflowing data-parallel step changed %s", what, which);
        CHECK_MSG(kiln_model_loss_scale(b[0], &sk0) == s0 / 2 &&
                      kiln_model_loss_scale(b[1], &sk1) == s0 / 2 && sk0 == 1 && sk1 == 1,
                  "%s: after an overflow in one replica: scales %g %g (from %g), skipped %llu %llu",
                  what, kiln_model_loss_scale(b[0], NULL), kiln_model_loss_scale(b[1], NULL), s0,
                  (unsigned long long)sk0, (unsigned long long)sk1);
        printf("%-20s an overflow in replica 1's half: both skipped, bits kept, scale %g -> %g\n",
               what, s0, kiln_model_loss_scale(b[0], NULL));
    }
out:
    free(bad);
    if (snap) free_snapshot(b[0], snap);
    if (snap1) free_snapshot(b[1], snap1);
    for (int k = 0; k < 2; k++) {
        free(ga[k]);
        free(gb[k]);
        kiln_model_free(a[k]);
        kiln_model_free(b[k]);
    }
    kiln_model_free(one);
}

static void refusals(void)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    kiln_model_add(m, kiln_flatten());
    kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    CHECK(strcmp(kiln_model_device(m), "/cpu:0") == 0);
    CHECK(kiln_model_set_device(m, "/tpu:0") == -1);
    CHECK_MSG(strstr(kiln_model_error(m), "tpu") != NULL, "unknown device: %s",
              kiln_model_error(m));
    /* no GPU here (or no driver, or no plugin): an error naming the device,
     * never a quiet CPU model */
    int r = kiln_model_set_device(m, "/gpu:0");
    if (r == 0) {
        printf("a GPU is usable here: %s\n", kiln_model_device(m));
    } else {
        CHECK_MSG(strstr(kiln_model_error(m), "/gpu:0") != NULL, "GPU refusal: %s",
                  kiln_model_error(m));
        printf("/gpu:0 refused: %s\n", kiln_model_error(m));
    }
    CHECK(kiln_model_set_device(m, "/cpu:0") == 0);
    CHECK(kiln_model_set_precision(m, KILN_PRECISION_TF32) == -1);
    CHECK_MSG(strstr(kiln_model_error(m), "tf32") != NULL, "tf32: %s", kiln_model_error(m));
    CHECK(kiln_model_compile(m, kiln_sgd(0.1f, 0.0f), KILN_SOFTMAX_XENT, 4, 1) == 0);
    CHECK(kiln_model_set_device(m, "/cpu:0") == -1);
    CHECK_MSG(strstr(kiln_model_error(m), "before compile") != NULL, "after compile: %s",
              kiln_model_error(m));
    CHECK(kiln_precision_parse("bf16") == KILN_PRECISION_BF16 && kiln_precision_parse("fp8") < 0);
    kiln_model_free(m);
}

int main(void)
{
    kiln_data full = {0}, tfull = {0};
    char err[256];
    if (kiln_load_fashion_mnist(NULL, 1, &full, err, sizeof(err)) ||
        kiln_load_fashion_mnist(NULL, 0, &tfull, err, sizeof(err))) {
        fprintf(stderr, "Fashion-MNIST not available: %s\n", err);
        CHECK(0);
        TEST_DONE();
    }
    train = (kiln_data){.x = full.x, .y = full.y, .n = (STEPS + 2) * B, .dim = full.dim};
    test = tfull;
    kiln_set_threads(2);
    against_cpu(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd", 1, TOL);
    against_cpu(MLP, kiln_adam(0.001f), "mlp adam", 1, TOL);
    against_cpu(CNN, kiln_sgd(0.05f, 0.9f), "cnn+bn sgd", 1, TOL);
    against_cpu(CNN, kiln_adam(0.001f), "cnn+bn adam", 1, TOL);
    /* the reference table (what tests/cuda compares GPUs with): the MLP
     * within TOL; the CNN's fast ops (float sums in batch norm, oneDNN's
     * convolutions) round differently enough that 6 steps of batch norm
     * over 32 images leave 3.2e-4 between the two (measured): 2e-3 */
    against_cpu(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd", 2, TOL);
    against_cpu(CNN, kiln_sgd(0.05f, 0.9f), "cnn+bn sgd", 2, 2e-3);
    state_round_trip(CNN, kiln_adam(0.001f), "cnn+bn adam");
    state_round_trip(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd");
    fit_pipelined();
    rounding();
    lowp_vs_fp32(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_BF16, "mlp sgd");
    lowp_vs_fp32(MLP, kiln_adam(0.001f), KILN_PRECISION_BF16, "mlp adam");
    lowp_vs_fp32(CNN, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_BF16, "cnn+bn sgd");
    lowp_vs_fp32(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP16, "mlp sgd");
    lowp_vs_fp32(CNN, kiln_adam(0.001f), KILN_PRECISION_FP16, "cnn+bn adam");
    fp16_overflow(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd");
    fp16_overflow(MLP, kiln_adam(0.001f), "mlp adam");
    fp16_overflow(CNN, kiln_sgd(0.05f, 0.9f), "cnn+bn sgd");
    bf16_resume();
    data_parallel(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP32, "mlp sgd");
    data_parallel(MLP, kiln_adam(0.001f), KILN_PRECISION_FP32, "mlp adam");
    data_parallel(CNN, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP32, "cnn+bn sgd");
    data_parallel(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_BF16, "mlp sgd bf16");
    data_parallel(CNN, kiln_adam(0.001f), KILN_PRECISION_BF16, "cnn+bn adam bf16");
    data_parallel(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP16, "mlp sgd fp16");
    data_parallel(CNN, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP16, "cnn+bn sgd fp16");
    lowp_accuracy(&full);
    refusals();
    kiln_data_free(&full);
    kiln_data_free(&tfull);
    TEST_DONE();
}
