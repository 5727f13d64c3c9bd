/* tests/cuda/test_cuda_model.c - training on a GPU (the runtime's device
 * path on the CUDA backend plugin) against the CPU, with real Fashion-MNIST
 * batches and the ResNet of models/resnet_dev.c:
 *
 *  - the MLP (SGD, Adam) and a CNN with batch norm, max and average pooling
 *    trained on /gpu:0, after 1 step and after STEPS steps, against the
 *    same model on the reference ops (double sums): at least about as close
 *    to it as the CPU's fast path is (3x, or a floor). Batch norm and Adam
 *    amplify rounding, so the CPU's fast path itself ends 3e-4..2e-3 from
 *    the reference there (measured); a wrong gradient ends far further;
 *  - the step replayed from a CUDA graph (after the eager warm-up steps)
 *    gives the bits of the same step run eagerly (KILN_CUDA_GRAPHS=0), and
 *    two runs give the same bits (deterministic algorithms: what a
 *    bit-exact resume on the same GPU needs);
 *  - a GPU model restored from another's host copies continues with the
 *    same bits;
 *  - TF32 trains, within a TF32 tolerance of fp32;
 *  - ResNet (width 8, 64x64, batch 8) on the GPU: the first loss and the
 *    update of every parameter buffer against the CPU model on its
 *    reference ops, calibrated by the CPU's fast path the same way (its
 *    first update is up to 24% off the reference in the last stage's
 *    buffers, where batch norm normalises 32 values: measured),
 *    with kiln's and cuDNN's batch norm, timed and heuristic convolution
 *    algorithms; two runs bit-identical, the second on staged batches
 *    (kiln_resnet_dev_stage: the copy stream and its events), also over
 *    four more steps queued without waiting; the loss falls over more steps;
 *  - mixed precision (bf16, fp16: cuBLAS GemmEx on 16-bit copies, cuDNN on
 *    rounded copies with TF32 math) against the same precision on the CPU
 *    table's reference ops (backend.h's rounding rule, double sums),
 *    calibrated by the CPU table's fast ops in that precision (within 3x,
 *    or a floor: LP_FLOOR1 after 1 step, LP_FLOOR after STEPS), graph
 *    replay vs eager and two runs bit-identical, and an fp16 step whose
 *    forward overflows skipped with every buffer's bits kept;
 *  - ResNet in bf16 and fp16 on the GPU against the CPU table in the same
 *    precision: inference logits within R_BF16 / R_FP16 (the CPU table's
 *    bf16 is 1.0e-2 from fp32 at this shape, its reference ops 3.1e-3 from
 *    its fast ones, measured; a wrong op is O(1) off), the loss falls over
 *    12 steps (fp16 skips its first 2 for overflow on the CPU table,
 *    measured), two GPU runs bit-identical.
 * Skips (77, reason printed) without a GPU or without the CUDA backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if KILN_CUDA_BUILT
#include "backend/backend.h"
#include "kiln/cuda.h"
#include "kiln/train.h"
#include "models/resnet.h"
#include "rt_test.h"
#include "small_models.h"
#include "test.h"

#define STEPS 12
#define B     64

static kiln_data train, test;
enum { MLP = 0, CNN = 1 };

static kiln_model *build(int shape, kiln_optimizer opt, const char *device, int graphs,
                         kiln_precision prec)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    if (shape == CNN) {
        kiln_model_add(m, kiln_conv2d(8, 5, 1, KILN_SAME, KILN_RELU));
        kiln_model_add(m, kiln_batchnorm(0.9f, 1e-5f));
        kiln_model_add(m, kiln_maxpool2d(2, 2));
        kiln_model_add(m, kiln_conv2d(16, 3, 1, KILN_VALID, KILN_LINEAR));
        kiln_model_add(m, kiln_relu());
        kiln_model_add(m, kiln_avgpool2d(2, 2));
        kiln_model_add(m, kiln_flatten());
        kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    } else {
        kiln_model_add(m, kiln_flatten());
        kiln_model_add(m, kiln_dense(256, KILN_RELU));
        kiln_model_add(m, kiln_dense(128, KILN_RELU));
        kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    }
    setenv("KILN_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    /* "ref": the CPU's reference ops through the backend table */
    if (strcmp(device, "ref") == 0) setenv("KILN_CPU_DEVICE_TABLE", "ref", 1);
    int bad = kiln_model_set_device(m, strcmp(device, "ref") == 0 ? "/cpu:0" : device) ||
              kiln_model_set_precision(m, prec) ||
              kiln_model_compile(m, opt, KILN_SOFTMAX_XENT, B, 7);
    unsetenv("KILN_CUDA_GRAPHS");
    unsetenv("KILN_CPU_DEVICE_TABLE");
    if (bad) {
        fprintf(stderr, "build on %s: %s\n", device, kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static int steps(kiln_model *m, int from, int n, float *losses)
{
    for (int s = from; s < from + n; s++)
        if (kiln_model_train_step(m, train.x + (size_t)s * B * train.dim, train.y + (size_t)s * B,
                                  B, losses ? &losses[s - from] : NULL, NULL)) {
            fprintf(stderr, "step %d: %s\n", s, kiln_model_error(m));
            return -1;
        }
    return 0;
}

/* The GPU against the reference ops (double sums), calibrated by the
 * CPU's fast path: a GPU must be at least about as close to the reference
 * as the CPU's own fast path is (within 3x, or an absolute floor). Where a
 * model amplifies rounding (batch norm, many steps), both drift from the
 * reference by a similar amount; a wrong gradient drifts by far more. */
static int calibrated(const char *what, const char *when, double gpu, double cpu, double floor)
{
    double lim = 3 * cpu > floor ? 3 * cpu : floor;
    printf("%-12s %-14s vs the reference ops: /gpu:0 %.3g, CPU fast path %.3g (limit %.3g)\n", what,
           when, gpu, cpu, lim);
    return gpu <= lim;
}

static void against_cpu(int shape, kiln_optimizer opt, const char *what)
{
    kiln_model *c = build(shape, opt, "/cpu:0", 1, KILN_PRECISION_FP32);
    kiln_model *r = build(shape, opt, "ref", 1, KILN_PRECISION_FP32);
    kiln_model *g = build(shape, opt, "/gpu:0", 1, KILN_PRECISION_FP32);
    kiln_model *e = build(shape, opt, "/gpu:0", 0, KILN_PRECISION_FP32);
    kiln_model *g2 = build(shape, opt, "/gpu:0", 1, KILN_PRECISION_FP32);
    kiln_model *t = build(shape, opt, "/gpu:0", 1, KILN_PRECISION_TF32);
    float lc[STEPS], lr[STEPS], lg[STEPS];
    int ident;
    CHECK(c && r && g && e && g2 && t);
    if (!c || !r || !g || !e || !g2 || !t) goto out;
    /* one step: the gradient and update, before rounding had steps to grow */
    CHECK(steps(c, 0, 1, lc) == 0 && steps(r, 0, 1, lr) == 0 && steps(g, 0, 1, lg) == 0);
    CHECK_MSG(
        calibrated(what, "after 1 step", param_diff(g, r, &ident), param_diff(c, r, &ident), 1e-6),
        "%s: one GPU step is off the reference", what);
    CHECK(steps(c, 1, STEPS - 1, lc + 1) == 0 && steps(r, 1, STEPS - 1, lr + 1) == 0 &&
          steps(g, 1, STEPS - 1, lg + 1) == 0);
    CHECK(steps(e, 0, STEPS, NULL) == 0 && steps(g2, 0, STEPS, NULL) == 0);
    CHECK(steps(t, 0, STEPS, NULL) == 0);
    char when[32];
    snprintf(when, sizeof when, "after %d steps", STEPS);
    CHECK_MSG(calibrated(what, when, param_diff(g, r, &ident), param_diff(c, r, &ident), 1e-5),
              "%s: the GPU drifted off the reference", what);
    double dl = fabs((double)lg[STEPS - 1] - lr[STEPS - 1]),
           dc = fabs((double)lc[STEPS - 1] - lr[STEPS - 1]);
    CHECK_MSG(dl <= fmax(3 * dc, 1e-4 * fabs(lr[STEPS - 1])), "%s: last loss %g (GPU) %g (ref)",
              what, lg[STEPS - 1], lr[STEPS - 1]);
    double ge = param_diff(g, e, &ident);
    printf("%-12s graph replay vs eager: %s\n", what, ident ? "bit-identical" : "DIFFERENT");
    CHECK_MSG(ident, "%s: graph replay and eager steps differ (%g)", what, ge);
    param_diff(g, g2, &ident);
    printf("%-12s two GPU runs: %s\n", what, ident ? "bit-identical" : "DIFFERENT");
    CHECK_MSG(ident, "%s: two GPU runs differ", what);
    double te = param_diff(t, r, &ident);
    printf("%-12s tf32 vs the fp32 reference: params rel err %.3g (tol 5e-2)\n", what, te);
    CHECK_MSG(te <= 5e-2, "%s: tf32 parameters off by %g", what, te);
    float ta, tb, tr, aa, ab, ar;
    CHECK(kiln_model_evaluate(c, test.x, test.y, 1000, &ta, &aa) == 0);
    CHECK(kiln_model_evaluate(g, test.x, test.y, 1000, &tb, &ab) == 0);
    CHECK(kiln_model_evaluate(r, test.x, test.y, 1000, &tr, &ar) == 0);
    printf("%-12s evaluation: loss %.5f acc %.4f (CPU) %.5f %.4f (GPU) %.5f %.4f (reference)\n",
           what, ta, aa, tb, ab, tr, ar);
    CHECK_MSG(fabsf(tb - tr) <= fmaxf(3 * fabsf(ta - tr), 1e-4f * tr) && fabsf(ab - ar) <= 0.02f,
              "%s: evaluation off the reference", what);
out:
    kiln_model_free(c);
    kiln_model_free(r);
    kiln_model_free(g);
    kiln_model_free(e);
    kiln_model_free(g2);
    kiln_model_free(t);
}

/* 16-bit rounding makes two correct implementations differ by a whole
 * bf16/fp16 step wherever their fp32 sums round an activation to
 * neighbouring values: floors of that size (bf16 2^-8, fp16 2^-11 relative)
 * times the layers' growth; the CPU table's calibration usually sets the
 * limit. */
#define LP_FLOOR1(p) ((p) == KILN_PRECISION_BF16 ? 4e-3 : 1e-3)
#define LP_FLOOR(p)  ((p) == KILN_PRECISION_BF16 ? 2e-2 : 3e-3)

static void mixed(int shape, kiln_optimizer opt, kiln_precision prec, const char *what)
{
    const char *pn = kiln_precision_name(prec);
    kiln_model *c = build(shape, opt, "/cpu:0", 1, prec); /* the CPU table, fast ops */
    kiln_model *r = build(shape, opt, "ref", 1, prec);
    kiln_model *g = build(shape, opt, "/gpu:0", 1, prec);
    kiln_model *e = build(shape, opt, "/gpu:0", 0, prec);
    kiln_model *g2 = build(shape, opt, "/gpu:0", 1, prec);
    char label[48];
    int ident;
    snprintf(label, sizeof label, "%s %s", what, pn);
    CHECK(c && r && g && e && g2);
    if (!c || !r || !g || !e || !g2) goto out;
    CHECK(steps(c, 0, 1, NULL) == 0 && steps(r, 0, 1, NULL) == 0 && steps(g, 0, 1, NULL) == 0);
    CHECK_MSG(calibrated(label, "after 1 step", param_diff(g, r, &ident), param_diff(c, r, &ident),
                         LP_FLOOR1(prec)),
              "%s: one GPU step is off the CPU table's %s reference", label, pn);
    CHECK(steps(c, 1, STEPS - 1, NULL) == 0 && steps(r, 1, STEPS - 1, NULL) == 0 &&
          steps(g, 1, STEPS - 1, NULL) == 0);
    CHECK(steps(e, 0, STEPS, NULL) == 0 && steps(g2, 0, STEPS, NULL) == 0);
    char when[32];
    snprintf(when, sizeof when, "after %d steps", STEPS);
    CHECK_MSG(
        calibrated(label, when, param_diff(g, r, &ident), param_diff(c, r, &ident), LP_FLOOR(prec)),
        "%s: the GPU drifted off the CPU table's %s reference", label, pn);
    double ge = param_diff(g, e, &ident);
    printf("%-12s graph replay vs eager: %s\n", label, ident ? "bit-identical" : "DIFFERENT");
    CHECK_MSG(ident, "%s: graph replay and eager steps differ (%g)", label, ge);
    param_diff(g, g2, &ident);
    printf("%-12s two GPU runs: %s\n", label, ident ? "bit-identical" : "DIFFERENT");
    CHECK_MSG(ident, "%s: two GPU runs differ", label);
    if (prec == KILN_PRECISION_FP16) {
        /* an overflowing forward (a pixel beyond 65504): the step is skipped */
        float *x = copy_buf(train.x, (size_t)B * train.dim), **snap;
        size_t nb = kiln_model_num_buffers(g);
        uint64_t skipped = 0;
        CHECK(x && kiln_model_sync_host(g) == 0);
        snap = calloc(nb, sizeof *snap);
        for (size_t i = 0; snap && i < nb; i++)
            snap[i] = copy_buf(kiln_model_buffer(g, i).data, kiln_model_buffer(g, i).size);
        x[300] = 1e6f;
        CHECK(kiln_model_train_step(g, x, train.y, B, NULL, NULL) == 0);
        CHECK(kiln_model_sync_host(g) == 0);
        int same = 1;
        for (size_t i = 0; snap && i < nb; i++)
            same &= bits_equal(kiln_model_buffer(g, i).data, snap[i], kiln_model_buffer(g, i).size);
        float sc = kiln_model_loss_scale(g, &skipped);
        printf("%-12s an overflowing step: %s, scale %g, %llu skipped\n", label,
               same ? "skipped, every buffer bit-identical" : "BUFFERS CHANGED", sc,
               (unsigned long long)skipped);
        CHECK_MSG(same && sc == 32768.0f && skipped == 1, "%s: the overflow was not skipped",
                  label);
        for (size_t i = 0; snap && i < nb; i++)
            free(snap[i]);
        free(snap);
        free(x);
    }
out:
    kiln_model_free(c);
    kiln_model_free(r);
    kiln_model_free(g);
    kiln_model_free(e);
    kiln_model_free(g2);
}

static void restore(void)
{
    kiln_optimizer opt = kiln_adam(0.001f);
    kiln_model *a = build(CNN, opt, "/gpu:0", 1, KILN_PRECISION_FP32);
    kiln_model *b = build(CNN, opt, "/gpu:0", 1, KILN_PRECISION_FP32);
    int ident;
    CHECK(a && b);
    if (!a || !b) goto out;
    CHECK(steps(a, 0, 5, NULL) == 0);
    CHECK(kiln_model_sync_host(a) == 0);
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i), y = kiln_model_buffer(b, i);
        memcpy(y.data, x.data, sizeof(float) * x.size);
    }
    kiln_model_set_step(b, kiln_model_step(a));
    CHECK(steps(a, 5, 5, NULL) == 0 && steps(b, 5, 5, NULL) == 0);
    param_diff(a, b, &ident);
    printf("restored from host copies on /gpu:0: %s\n", ident ? "bit-identical" : "DIFFERENT");
    CHECK_MSG(ident, "a restored GPU model diverged");
out:
    kiln_model_free(a);
    kiln_model_free(b);
}

/* The largest relative difference between a parameter UPDATE of one step
 * (p_after - p_before) and the reference model's, over the buffers, relative
 * to each update's own scale; the other model is the host model h2 or the
 * device model d; *worst names the buffer; *same: d and d2 hold the same
 * bits (when d2 is given). */
static double resnet_update_err(kiln_resnet *h, float **before, kiln_resnet *h2, kiln_resnet_dev *d,
                                kiln_resnet_dev *d2, int *worst, int *same)
{
    double w = 0.0;
    int nb = kiln_resnet_buffer(h, -1, NULL, NULL, NULL);
    *same = 1;
    *worst = -1;
    for (int i = 0; i < nb; i++) {
        float *p, *p2;
        const float *g;
        size_t n;
        kiln_resnet_buffer(h, i, &p, &g, &n);
        float *q = kiln_falloc(n), *q2 = kiln_falloc(n), *uc = kiln_falloc(n), *ug = kiln_falloc(n);
        if (h2) {
            kiln_resnet_buffer(h2, i, &p2, &g, &n);
            memcpy(q, p2, sizeof(float) * n);
        } else {
            CHECK(kiln_resnet_dev_param(d, i, q, n) == KILN_OK);
        }
        if (d2) {
            CHECK(kiln_resnet_dev_param(d2, i, q2, n) == KILN_OK);
            *same &= bits_equal(q, q2, n);
        }
        for (size_t j = 0; j < n; j++) {
            uc[j] = p[j] - before[i][j];
            ug[j] = q[j] - before[i][j];
        }
        double e = rel_err(ug, uc, n);
        /* relative to the update's own scale, not max(1, ...) */
        double sc = 0.0;
        for (size_t j = 0; j < n; j++)
            if (fabs(uc[j]) > sc) sc = fabs(uc[j]);
        if (sc > 0 && sc < 1) e /= sc;
        if (e > w) w = e, *worst = i;
        kiln_ffree(q), kiln_ffree(q2), kiln_ffree(uc), kiln_ffree(ug);
    }
    return w;
}

/* ResNet on the GPU against the CPU model: the first step's loss and the
 * update of every parameter buffer; BN and conv choices by environment
 * (KILN_BN, KILN_CUDNN_FIND as a process sets them). */
static void resnet(const kiln__backend *be, const char *bn, const char *find, int full)
{
    enum { N = 8, SIZE = 64, CL = 10 };
    kiln_resnet_cfg cfg = {.width = 8, .classes = CL, .seed = 3};
    char err[512];
    kiln_rng r;
    int same, worst;
    kiln_rng_seed(&r, 2);
    float *x = rand_buf(&r, (size_t)N * SIZE * SIZE * 3, -1, 1), lh[N * CL], ld[N * CL];
    int32_t lab[N] = {1, 4, 9, 0, 3, 3, 7, 2};
    uint8_t lab8[N] = {1, 4, 9, 0, 3, 3, 7, 2};
    float *before[200] = {0};
    setenv("KILN_BN", bn, 1);
    setenv("KILN_CUDNN_FIND", find, 1);
    kiln_resnet_cfg rcfg = cfg;
    rcfg.use_ref = 1; /* the reference ops: what both are compared with */
    kiln_resnet *h = kiln_resnet_create(&rcfg, err, sizeof err);
    kiln_resnet *hf = kiln_resnet_create(&cfg, err, sizeof err);
    kiln_resnet_dev *d = kiln_resnet_dev_create(&cfg, be, 0, 0, N, SIZE, err, sizeof err);
    kiln_resnet_dev *d2 =
        full ? kiln_resnet_dev_create(&cfg, be, 0, 0, N, SIZE, err, sizeof err) : NULL;
    unsetenv("KILN_BN");
    unsetenv("KILN_CUDNN_FIND");
    CHECK_MSG(h && hf && d && (d2 || !full), "resnet: %s", err);
    if (!h || !hf || !d || (!d2 && full)) goto out;
    int nb = kiln_resnet_buffer(h, -1, NULL, NULL, NULL);
    for (int i = 0; i < nb && i < 200; i++) {
        float *p;
        const float *g;
        size_t n;
        kiln_resnet_buffer(h, i, &p, &g, &n);
        before[i] = copy_buf(p, n);
    }
    CHECK(kiln_resnet_dev_load(d, x, lab, N) == KILN_OK);
    /* the second run's batches are staged (the copy stream and its events):
     * it must match the loaded run bit for bit */
    if (d2) CHECK(kiln_resnet_dev_stage(d2, x, lab, N) == KILN_OK);
    float a, b, af;
    CHECK(kiln_resnet_train_step(h, x, lab8, N, SIZE, 0.05f, 0.9f, &a, err, sizeof err) == 0);
    CHECK(kiln_resnet_train_step(hf, x, lab8, N, SIZE, 0.05f, 0.9f, &af, err, sizeof err) == 0);
    CHECK_MSG(kiln_resnet_dev_step(d, 0.05f, 0.9f) == KILN_OK &&
                  kiln_resnet_dev_wait(d, &b) == KILN_OK,
              "resnet step: %s", kiln_resnet_dev_error(d));
    if (d2) CHECK(kiln_resnet_dev_step(d2, 0.05f, 0.9f) == 0 && kiln_resnet_dev_wait(d2, 0) == 0);
    int wf;
    double ef = resnet_update_err(h, before, hf, NULL, NULL, &wf, &same);
    double e = resnet_update_err(h, before, NULL, d, d2, &worst, &same);
    printf("resnet (batch norm %s, conv algorithms %s): loss %.6f (reference) %.6f (CPU fast) "
           "%.6f (/gpu:0); the first update vs the reference's: /gpu:0 %.3g (buffer %d), CPU "
           "fast path %.3g (buffer %d)%s\n",
           bn, strcmp(find, "1") == 0 ? "timed" : "by heuristics", a, af, b, e, worst, ef, wf,
           d2 ? (same ? "; two GPU runs bit-identical" : "; two GPU runs DIFFER") : "");
    CHECK_MSG(fabsf(a - b) <= fmaxf(3 * fabsf(a - af), 1e-5f * fabsf(a)),
              "resnet: first loss %g (GPU) vs %g (reference)", b, a);
    CHECK_MSG(e <= fmax(3 * ef, 1e-3),
              "resnet (%s, find %s): the first update is %g off the reference's (buffer %d), "
              "the CPU's fast path %g",
              bn, find, e, worst, ef);
    if (d2) CHECK_MSG(same, "two GPU resnet runs differ");
    if (full) {
        /* more steps: training goes on (the loss falls on the same batch) */
        float l0 = b, l1 = 0;
        for (int s = 0; s < 4; s++)
            CHECK(kiln_resnet_dev_step(d, 0.05f, 0.9f) == KILN_OK);
        CHECK(kiln_resnet_dev_wait(d, &l1) == KILN_OK);
        printf("resnet: loss %.4f -> %.4f after 5 steps on one batch\n", l0, l1);
        CHECK_MSG(l1 < l0, "resnet: the loss did not fall (%g -> %g)", l0, l1);
        /* the same steps on staged batches, queued without waiting: each
         * upload into the slot the step before last read (its event) */
        float l2 = 0;
        for (int s = 0; d2 && s < 4; s++)
            CHECK_MSG(kiln_resnet_dev_stage(d2, x, lab, N) == KILN_OK &&
                          kiln_resnet_dev_step(d2, 0.05f, 0.9f) == KILN_OK,
                      "staged step %d: %s", s, kiln_resnet_dev_error(d2));
        if (d2) {
            CHECK(kiln_resnet_dev_wait(d2, &l2) == KILN_OK);
            printf("resnet: staged batches: loss %.6f after 5 steps, loaded %.6f\n", l2, l1);
            CHECK_MSG(memcmp(&l1, &l2, sizeof l1) == 0, "staged batches train otherwise: %g vs %g",
                      l2, l1);
        }
        CHECK(kiln_resnet_dev_forward(d, ld, 0) == KILN_OK);
        CHECK(kiln_resnet_forward(hf, x, N, SIZE, lh, 0, err, sizeof err) == KILN_OK);
        CHECK(kiln_resnet_dev_profile(d, 0.05f, 0.9f, stdout) == KILN_OK);
    }
out:
    for (int i = 0; i < 200; i++)
        kiln_ffree(before[i]);
    kiln_resnet_destroy(h);
    kiln_resnet_destroy(hf);
    kiln_resnet_dev_destroy(d);
    kiln_resnet_dev_destroy(d2);
    kiln_ffree(x);
}

#define R_BF16 3e-2
#define R_FP16 1e-2

static void resnet_mixed(const kiln__backend *be, kiln_precision prec)
{
    const char *pn = kiln_precision_name(prec);
    double tol = prec == KILN_PRECISION_BF16 ? R_BF16 : R_FP16;
    enum { N = 8, SIZE = 64, CL = 10 };
    kiln_resnet_cfg cfg = {.width = 8, .classes = CL, .seed = 3};
    char err[512] = "";
    kiln_rng r;
    kiln_rng_seed(&r, 2);
    float *x = rand_buf(&r, (size_t)N * SIZE * SIZE * 3, -1, 1), lc[N * CL], lg[N * CL];
    int32_t lab[N] = {1, 4, 9, 0, 3, 3, 7, 2};
    kiln_resnet_dev *c =
        kiln_resnet_dev_create(&cfg, &kiln__backend_cpu, 0, prec, N, SIZE, err, sizeof err);
    kiln_resnet_dev *g = kiln_resnet_dev_create(&cfg, be, 0, prec, N, SIZE, err, sizeof err);
    kiln_resnet_dev *g2 = kiln_resnet_dev_create(&cfg, be, 0, prec, N, SIZE, err, sizeof err);
    float first = 0, last = 0, l2 = 0;
    int differ = 0;
    CHECK_MSG(c && g && g2, "resnet %s: %s", pn, err);
    if (!c || !g || !g2) goto out;
    CHECK(kiln_resnet_dev_load(c, x, lab, N) == KILN_OK &&
          kiln_resnet_dev_load(g, x, lab, N) == KILN_OK &&
          kiln_resnet_dev_load(g2, x, lab, N) == KILN_OK);
    CHECK_MSG(kiln_resnet_dev_forward(c, lc, 0) == KILN_OK &&
                  kiln_resnet_dev_forward(g, lg, 0) == KILN_OK,
              "resnet %s forward: %s", pn, kiln_resnet_dev_error(g));
    double e = rel_err(lg, lc, N * CL);
    printf("resnet %s  inference logits /gpu:0 vs the CPU table's %s: %.3g (tol %g)\n", pn, pn, e,
           tol);
    CHECK_MSG(e <= tol, "resnet %s logits off by %g", pn, e);
    for (int s = 0; s < 12; s++) {
        float l = 0;
        CHECK_MSG(kiln_resnet_dev_step(g, 0.02f, 0.9f) == KILN_OK &&
                      kiln_resnet_dev_wait(g, &l) == KILN_OK &&
                      kiln_resnet_dev_step(g2, 0.02f, 0.9f) == KILN_OK &&
                      kiln_resnet_dev_wait(g2, &l2) == KILN_OK,
                  "resnet %s step: %s", pn, kiln_resnet_dev_error(g));
        CHECK_MSG(l == l2, "resnet %s: two GPU runs differ at step %d (%g, %g)", pn, s, l, l2);
        differ |= l != l2;
        if (s == 0) first = l;
        last = l;
    }
    uint64_t skipped = 0;
    float sc = kiln_resnet_dev_loss_scale(g, &skipped);
    printf("resnet %s  loss %.4f -> %.4f over 12 steps (loss scale %g, %llu skipped); two runs "
           "%s\n",
           pn, first, last, sc, (unsigned long long)skipped,
           differ ? "DIFFERENT" : "bit-identical");
    CHECK_MSG(last == last && last < first, "resnet %s: the loss did not fall", pn);
    CHECK_MSG(skipped <= 6, "resnet %s: %llu of 12 steps skipped", pn, (unsigned long long)skipped);
out:
    kiln_resnet_dev_destroy(c);
    kiln_resnet_dev_destroy(g);
    kiln_resnet_dev_destroy(g2);
    kiln_ffree(x);
}

/* Every timed choice is one line of the file, none twice: a resumed
 * kiln-train reads them back (device-checks resumes a CNN on the GPU). */
static void algo_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512], seen[256][160];
    int n = 0, dup = 0, bad = 0;
    CHECK(f != NULL);
    while (f && fgets(line, sizeof line, f)) {
        char *k = strrchr(line, ' ');
        int fields = 0;
        for (char *p = line; *p; p++)
            fields += *p == ' ';
        /* "algo VERSION NAME" and 14 numbers */
        bad += strncmp(line, "algo ", 5) != 0 || fields != 16 || !k;
        /* the key: everything before the algorithm and its workspace */
        char key[160];
        snprintf(key, sizeof key, "%.*s", (int)(strrchr(line, ' ') - line), line);
        if (strrchr(key, ' ')) *strrchr(key, ' ') = '\0';
        for (int i = 0; i < n && i < 256; i++)
            dup += strcmp(seen[i], key) == 0;
        if (n < 256) snprintf(seen[n], sizeof seen[n], "%s", key);
        n++;
    }
    if (f) fclose(f);
    printf("cuDNN algorithm file: %d timed choices, %d malformed, %d twice\n", n, bad, dup);
    CHECK_MSG(n > 0 && bad == 0 && dup == 0, "the algorithm file: %d lines, %d bad, %d twice", n,
              bad, dup);
}

int main(void)
{
    char err[512];
    int n = 0;
    if (kiln_cuda_device_count(&n, err, sizeof err) != KILN_OK || n == 0) {
        printf("SKIP [gpu]: no CUDA device: %s\n", n == 0 && !err[0] ? "none visible" : err);
        return 77;
    }
    const kiln__backend *be = kiln__backend_cuda(err, sizeof err);
    if (!be) {
        fprintf(stderr, "the CUDA backend plugin: %s\n", err);
        return 1;
    }
    kiln_data full = {0}, tfull = {0};
    if (kiln_load_fashion_mnist(getenv("KILN_TEST_DATA_DIR"), 1, &full, err, sizeof(err)) ||
        kiln_load_fashion_mnist(getenv("KILN_TEST_DATA_DIR"), 0, &tfull, err, sizeof(err))) {
        fprintf(stderr, "Fashion-MNIST not available: %s\n", err);
        return 1;
    }
    /* the timed convolution algorithms go to a file (cuda/dnn.c) */
    char algos[] = "/tmp/kiln-cudnn-algos.XXXXXX";
    int afd = mkstemp(algos);
    CHECK(afd >= 0);
    if (afd >= 0) close(afd), setenv("KILN_CUDNN_ALGO_FILE", algos, 1);
    train = (kiln_data){.x = full.x, .y = full.y, .n = (STEPS + 10) * B, .dim = full.dim};
    test = tfull;
    kiln_set_threads(4);
    against_cpu(MLP, kiln_sgd(0.05f, 0.9f), "mlp sgd");
    against_cpu(MLP, kiln_adam(0.001f), "mlp adam");
    against_cpu(CNN, kiln_sgd(0.05f, 0.9f), "cnn+bn sgd");
    mixed(MLP, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_BF16, "mlp sgd");
    mixed(MLP, kiln_adam(0.001f), KILN_PRECISION_FP16, "mlp adam");
    mixed(CNN, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_BF16, "cnn+bn sgd");
    mixed(CNN, kiln_sgd(0.05f, 0.9f), KILN_PRECISION_FP16, "cnn+bn sgd");
    restore();
    resnet(be, "kiln", "1", 1);
    resnet(be, "cudnn", "1", 0);
    resnet(be, "kiln", "0", 0);
    resnet_mixed(be, KILN_PRECISION_BF16);
    resnet_mixed(be, KILN_PRECISION_FP16);
    algo_file(algos);
    if (afd >= 0) unlink(algos);
    kiln_data_free(&full);
    kiln_data_free(&tfull);
    TEST_DONE();
}

#else /* the backend is not in this build */

int main(void)
{
    printf("SKIP [gpu]: no CUDA device: the CUDA backend is not built in this configuration "
           "(nvcc not found, KILN_CUDA=OFF or a sanitized build)\n");
    return 77;
}
#endif
