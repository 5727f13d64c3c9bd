/* tests/runtime/test_ops.c - every op's fast path against its reference.
 *
 * Tolerances (relative to the largest output magnitude, see rel_err):
 *  - kiln__sgemm (oneDNN or OpenBLAS, core/gemm.h) against its double loop:
 *    2e-5, the same bound and reason as below. Results must also be the same
 *    bits when computed twice, and when two pool threads compute them at once.
 *  - GEMM-based ops (dense, conv): 2e-5. The reference sums in double, the
 *    fast path in float through SGEMM in a different order; for the K <= 800
 *    term sums here, float rounding stays around 1e-6..1e-5 of the scale.
 *    oneDNN's direct convolutions (ops/conv_dnnl.c) also sum in float in an
 *    order of their own: the same bound and reason. Every conv case runs
 *    three times: im2col only, oneDNN where it has a kernel of its own (the
 *    default), and oneDNN wherever it accepts the shape; each run must also
 *    give the same bits twice.
 *  - batch norm 1e-4 (float sums of up to M*C terms, then a rsqrt);
 *    cross-entropy 1e-5 (expf/logf vs exp/log).
 *  - pooling, ReLU, add: bit-identical (same arithmetic, nothing to round
 *    differently). */
#include "core/gemm.h"
#include "core/pool.h"
#include "ops/conv_dnnl.h"
#include "ops/ops.h"
#include "rt_test.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static kiln_rng R;

typedef struct gemm_case {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C[2]; /* one output per pool task */
} gemm_case;

static void gemm_task(void *p, int task, int tid)
{
    gemm_case *g = p;
    kiln__sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta,
                g->C[task], g->ldc);
}

/* C = alpha op(A) op(B) + beta C with padded leading dimensions (pad floats
 * past each row, which must stay untouched). */
static void check_gemm(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad)
{
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    gemm_case g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta};
    g.lda = ac + pad, g.ldb = bc + pad, g.ldc = N + pad;
    size_t na = (size_t)ar * g.lda, nb = (size_t)br * g.ldb, nc = (size_t)M * g.ldc;
    float *A = rand_buf(&R, na, -1, 1), *B = rand_buf(&R, nb, -1, 1);
    float *c0 = rand_buf(&R, nc, -1, 1), *want = copy_buf(c0, nc);
    if (beta == 0.0f) /* BLAS semantics: C is not read when beta is 0 */
        for (size_t i = 0; i < nc; i++)
            c0[i] = NAN;
    float *got = copy_buf(c0, nc), *again = copy_buf(c0, nc);
    g.A = A, g.B = B;
    g.C[0] = copy_buf(c0, nc), g.C[1] = copy_buf(c0, nc);
    kiln__sgemm_ref(ta, tb, M, N, K, alpha, A, g.lda, B, g.ldb, beta, want, g.ldc);
    kiln__sgemm(ta, tb, M, N, K, alpha, A, g.lda, B, g.ldb, beta, got, g.ldc);
    kiln__sgemm(ta, tb, M, N, K, alpha, A, g.lda, B, g.ldb, beta, again, g.ldc);
    kiln__parallel_for(2, gemm_task, &g);
    double e = 0.0;
    for (int i = 0; i < M; i++) { /* the padding is compared too: bits_equal below */
        double ei = rel_err(got + (size_t)i * g.ldc, want + (size_t)i * g.ldc, (size_t)N);
        e = ei > e || ei != ei ? ei : e;
    }
    CHECK_MSG(e < 2e-5, "sgemm %c%c %dx%dx%d alpha %g beta %g pad %d (%s) err %g", ta ? 'T' : 'N',
              tb ? 'T' : 'N', M, N, K, alpha, beta, pad, kiln__gemm_backend(), e);
    int pad_ok = 1;
    for (int i = 0; i < M; i++)
        pad_ok &= bits_equal(got + (size_t)i * g.ldc + N, c0 + (size_t)i * g.ldc + N, (size_t)pad);
    CHECK_MSG(pad_ok, "sgemm wrote past N columns (%dx%dx%d)", M, N, K);
    CHECK(bits_equal(got, again, nc));
    CHECK(bits_equal(got, g.C[0], nc) && bits_equal(got, g.C[1], nc));
    float *f[] = {A, B, c0, want, got, again, g.C[0], g.C[1]};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        kiln_ffree(f[i]);
}

static void check_gemms(void)
{
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++) {
            check_gemm(ta, tb, 7, 10, 13, 1.0f, 0.0f, 0);  /* narrow: OpenBLAS */
            check_gemm(ta, tb, 33, 48, 21, 1.0f, 0.0f, 3); /* wide: oneDNN if built with it */
            check_gemm(ta, tb, 20, 70, 40, 0.5f, 0.9f, 5);
            check_gemm(ta, tb, 1, 16, 1, 1.0f, 1.0f, 0);
        }
    /* the MLP step's shapes (per pool thread) and the CNN's im2col ones */
    int s = KILN_HEAVY ? 1 : 4;
    check_gemm(0, 0, 128 / s, 256 / s, 784 / s, 1.0f, 0.0f, 256 / s); /* forward, ldb 512 */
    check_gemm(1, 0, 392 / s, 512 / s, 128 / s, 1.0f, 0.9f, 392 / s); /* dW, lda 784 */
    check_gemm(0, 1, 128 / s, 256 / s, 512 / s, 1.0f, 0.0f, 256 / s); /* dx */
    check_gemm(1, 0, 256 / s, 10, 128 / s, 1.0f, 0.9f, 0);            /* 10-class dW */
    check_gemm(0, 0, 196 * 4 / s, 64, 800 / s, 1.0f, 0.0f, 0);        /* conv2 forward */
    check_gemm(1, 0, 25, 32, 10192 / s, 1.0f, 1.0f, 0);               /* conv1 dW */
}

static void check_dense(int B, int in, int out, int relu, int with_dx)
{
    float *x = rand_buf(&R, (size_t)B * in, -1, 1), *w = rand_buf(&R, (size_t)in * out, -0.5, 0.5);
    float *b = rand_buf(&R, out, -0.5, 0.5);
    float *y1 = kiln_falloc((size_t)B * out), *y2 = kiln_falloc((size_t)B * out);
    kiln_dense_fwd_ref(x, w, b, y1, B, in, out, relu);
    kiln_dense_fwd(x, w, b, y2, B, in, out, relu);
    double e = rel_err(y2, y1, (size_t)B * out);
    CHECK_MSG(e < 2e-5, "dense fwd %dx%dx%d relu=%d err %g", B, in, out, relu, e);
    float *dy1 = rand_buf(&R, (size_t)B * out, -1, 1), *dy2 = copy_buf(dy1, (size_t)B * out);
    float *dx1 = kiln_falloc((size_t)B * in), *dx2 = kiln_falloc((size_t)B * in);
    float *dw1 = kiln_falloc((size_t)in * out), *dw2 = kiln_falloc((size_t)in * out);
    float *db1 = kiln_falloc(out), *db2 = kiln_falloc(out);
    kiln_dense_bwd_ref(x, w, y1, dy1, with_dx ? dx1 : NULL, dw1, db1, B, in, out, relu);
    kiln_dense_bwd(x, w, y1, dy2, with_dx ? dx2 : NULL, dw2, db2, B, in, out, relu);
    CHECK(bits_equal(dy1, dy2, (size_t)B * out)); /* the ReLU mask is exact */
    CHECK_MSG((e = rel_err(dw2, dw1, (size_t)in * out)) < 2e-5, "dense dw err %g", e);
    CHECK_MSG((e = rel_err(db2, db1, out)) < 2e-5, "dense db err %g", e);
    if (with_dx) CHECK_MSG((e = rel_err(dx2, dx1, (size_t)B * in)) < 2e-5, "dense dx err %g", e);
    /* accumulating form: dw = 0.9*dw_old + dW (same tolerance) */
    {
        float *acc = rand_buf(&R, (size_t)in * out, -1, 1), *accb = rand_buf(&R, out, -1, 1);
        float *want = kiln_falloc((size_t)in * out), *wantb = kiln_falloc(out);
        for (size_t i = 0; i < (size_t)in * out; i++)
            want[i] = 0.9f * acc[i] + dw1[i];
        for (int j = 0; j < out; j++)
            wantb[j] = 0.9f * accb[j] + db1[j];
        memcpy(dy2, dy1, sizeof(float) * (size_t)B * out); /* already masked: mask is idempotent */
        kiln_dense_bwd_acc(x, w, y1, dy2, NULL, acc, accb, B, in, out, relu, 0.9f);
        CHECK_MSG((e = rel_err(acc, want, (size_t)in * out)) < 2e-5, "dense dw acc err %g", e);
        CHECK_MSG((e = rel_err(accb, wantb, out)) < 2e-5, "dense db acc err %g", e);
        /* with the SGD step fused in: v = 0.9 v + dW, then w -= lr v (and for b) */
        float *w2 = copy_buf(w, (size_t)in * out), *b2 = copy_buf(b, out);
        float *v = copy_buf(acc, (size_t)in * out), *vb = copy_buf(accb, out);
        for (size_t i = 0; i < (size_t)in * out; i++) {
            want[i] = 0.9f * v[i] + dw1[i];
            v[i] = w[i] - 0.1f * want[i]; /* v now holds the expected weights */
        }
        for (int j = 0; j < out; j++) {
            wantb[j] = 0.9f * vb[j] + db1[j];
            vb[j] = b[j] - 0.1f * wantb[j];
        }
        memcpy(dy2, dy1, sizeof(float) * (size_t)B * out);
        kiln_dense_bwd_sgd(x, w2, b2, y1, dy2, NULL, acc, accb, B, in, out, relu, 0.9f, 0.1f);
        CHECK_MSG((e = rel_err(acc, want, (size_t)in * out)) < 2e-5, "dense sgd v err %g", e);
        CHECK_MSG((e = rel_err(accb, wantb, out)) < 2e-5, "dense sgd vb err %g", e);
        CHECK_MSG((e = rel_err(w2, v, (size_t)in * out)) < 2e-5, "dense sgd w err %g", e);
        CHECK_MSG((e = rel_err(b2, vb, out)) < 2e-5, "dense sgd b err %g", e);
        kiln_ffree(acc), kiln_ffree(accb), kiln_ffree(want), kiln_ffree(wantb);
        kiln_ffree(w2), kiln_ffree(b2), kiln_ffree(v), kiln_ffree(vb);
    }
    float *f[] = {x, w, b, y1, y2, dy1, dy2, dx1, dx2, dw1, dw2, db1, db2};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        kiln_ffree(f[i]);
}

static void check_conv(int n, int h, int w, int c, int oc, int k, int stride, int pad, int relu)
{
    kiln_conv_shape s;
    CHECK(kiln_conv_shape_init(&s, n, h, w, c, oc, k, k, stride, pad) == 0);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * oc,
           nw = (size_t)k * k * c * oc;
    float *x = rand_buf(&R, nx, -1, 1), *wt = rand_buf(&R, nw, -0.3f, 0.3f);
    float *b = rand_buf(&R, oc, -0.3f, 0.3f);
    float *y1 = kiln_falloc(ny), *y2 = kiln_falloc(ny);
    kiln_conv2d_fwd_ref(&s, x, wt, b, y1, relu);
    kiln_conv2d_fwd(&s, x, wt, b, y2, relu);
    {
        float *y3 = kiln_falloc(ny);
        kiln_conv2d_fwd(&s, x, wt, b, y3, relu);
        CHECK(bits_equal(y3, y2, ny));
        kiln_ffree(y3);
    }
    double e = rel_err(y2, y1, ny);
    CHECK_MSG(e < 2e-5, "conv fwd n%d %dx%dx%d->%d k%d s%d p%d err %g", n, h, w, c, oc, k, stride,
              pad, e);
    float *dy1 = rand_buf(&R, ny, -1, 1), *dy2 = copy_buf(dy1, ny);
    float *dx1 = kiln_falloc(nx), *dx2 = kiln_falloc(nx);
    float *dw1 = kiln_falloc(nw), *dw2 = kiln_falloc(nw), *db1 = kiln_falloc(oc),
          *db2 = kiln_falloc(oc);
    kiln_conv2d_bwd_ref(&s, x, wt, y1, dy1, dx1, dw1, db1, relu);
    kiln_conv2d_bwd(&s, x, wt, y1, dy2, dx2, dw2, db2, relu);
    CHECK(bits_equal(dy1, dy2, ny));
    CHECK_MSG((e = rel_err(dw2, dw1, nw)) < 2e-5, "conv dw err %g", e);
    CHECK_MSG((e = rel_err(db2, db1, oc)) < 2e-5, "conv db err %g", e);
    CHECK_MSG((e = rel_err(dx2, dx1, nx)) < 2e-5, "conv dx err %g", e);
    /* without dx (first layer) the weight gradients are the same */
    memcpy(dy2, dy1, ny * sizeof(float));
    float *dw3 = kiln_falloc(nw);
    kiln_conv2d_bwd(&s, x, wt, y1, dy2, NULL, dw3, db2, relu);
    CHECK(bits_equal(dw3, dw2, nw));
    /* and twice with dx: the same bits */
    {
        float *dx3 = kiln_falloc(nx);
        memcpy(dy2, dy1, ny * sizeof(float));
        kiln_conv2d_bwd(&s, x, wt, y1, dy2, dx3, dw3, db2, relu);
        CHECK(bits_equal(dw3, dw2, nw));
        CHECK(bits_equal(dx3, dx2, nx));
        kiln_ffree(dx3);
    }
    /* accumulating form: dw = 0.9*dw_old + dW */
    {
        float *acc = rand_buf(&R, nw, -1, 1), *accb = rand_buf(&R, oc, -1, 1);
        float *want = kiln_falloc(nw), *wantb = kiln_falloc(oc);
        for (size_t i = 0; i < nw; i++)
            want[i] = 0.9f * acc[i] + dw1[i];
        for (int j = 0; j < oc; j++)
            wantb[j] = 0.9f * accb[j] + db1[j];
        memcpy(dy2, dy1, ny * sizeof(float));
        kiln_conv2d_bwd_acc(&s, x, wt, y1, dy2, NULL, acc, accb, relu, 0.9f);
        CHECK_MSG((e = rel_err(acc, want, nw)) < 2e-5, "conv dw acc err %g", e);
        CHECK_MSG((e = rel_err(accb, wantb, oc)) < 2e-5, "conv db acc err %g", e);
        kiln_ffree(acc), kiln_ffree(accb), kiln_ffree(want), kiln_ffree(wantb);
    }
    float *f[] = {x, wt, b, y1, y2, dy1, dy2, dx1, dx2, dw1, dw2, db1, db2, dw3};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        kiln_ffree(f[i]);
}

static void check_pool(int n, int h, int w, int c, int k, int stride)
{
    kiln_pool_shape s;
    CHECK(kiln_pool_shape_init(&s, n, h, w, c, k, stride) == 0);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * c;
    float *x = rand_buf(&R, nx, -1, 1), *y1 = kiln_falloc(ny), *y2 = kiln_falloc(ny);
    int32_t *i1 = calloc(ny, 4), *i2 = calloc(ny, 4);
    float *dy = rand_buf(&R, ny, -1, 1), *dx1 = kiln_falloc(nx), *dx2 = kiln_falloc(nx);
    kiln_maxpool_fwd_ref(&s, x, y1, i1);
    kiln_maxpool_fwd(&s, x, y2, i2);
    CHECK(bits_equal(y1, y2, ny) && memcmp(i1, i2, ny * 4) == 0);
    kiln_maxpool_bwd_ref(&s, dy, i1, dx1);
    kiln_maxpool_bwd(&s, dy, i1, dx2);
    CHECK(bits_equal(dx1, dx2, nx));
    kiln_avgpool_fwd_ref(&s, x, y1);
    kiln_avgpool_fwd(&s, x, y2);
    CHECK(bits_equal(y1, y2, ny));
    kiln_avgpool_bwd_ref(&s, dy, dx1);
    kiln_avgpool_bwd(&s, dy, dx2);
    CHECK(bits_equal(dx1, dx2, nx));
    kiln_ffree(x), kiln_ffree(y1), kiln_ffree(y2), kiln_ffree(dy), kiln_ffree(dx1), kiln_ffree(dx2);
    free(i1), free(i2);
}

static void check_eltwise(size_t n)
{
    float *a = rand_buf(&R, n, -1, 1), *b = rand_buf(&R, n, -1, 1);
    float *y1 = kiln_falloc(n), *y2 = kiln_falloc(n), *z1 = kiln_falloc(n), *z2 = kiln_falloc(n);
    kiln_relu_fwd_ref(a, y1, n);
    kiln_relu_fwd(a, y2, n);
    CHECK(bits_equal(y1, y2, n));
    kiln_relu_bwd_ref(y1, b, z1, n);
    kiln_relu_bwd(y1, b, z2, n);
    CHECK(bits_equal(z1, z2, n));
    kiln_add_fwd_ref(a, b, y1, n);
    kiln_add_fwd(a, b, y2, n);
    CHECK(bits_equal(y1, y2, n));
    kiln_add_bwd_ref(a, y1, z1, n);
    kiln_add_bwd(a, y2, z2, n);
    CHECK(bits_equal(y1, y2, n) && bits_equal(z1, z2, n) && bits_equal(y1, a, n));
    kiln_ffree(a), kiln_ffree(b), kiln_ffree(y1), kiln_ffree(y2), kiln_ffree(z1), kiln_ffree(z2);
}

static void check_bn(int M, int C)
{
    size_t n = (size_t)M * C;
    float *x = rand_buf(&R, n, -2, 3), *g = rand_buf(&R, C, 0.5, 1.5), *bt = rand_buf(&R, C, -1, 1);
    float *y1 = kiln_falloc(n), *y2 = kiln_falloc(n), *m1 = kiln_falloc(C), *m2 = kiln_falloc(C),
          *s1 = kiln_falloc(C), *s2 = kiln_falloc(C), *rm1 = kiln_falloc(C), *rm2 = kiln_falloc(C),
          *rv1 = kiln_falloc(C), *rv2 = kiln_falloc(C);
    kiln_bn_fwd_train_ref(x, g, bt, y1, m1, s1, rm1, rv1, 0.1f, 1e-5f, M, C);
    kiln_bn_fwd_train(x, g, bt, y2, m2, s2, rm2, rv2, 0.1f, 1e-5f, M, C);
    double e;
    CHECK_MSG((e = rel_err(y2, y1, n)) < 1e-4, "bn fwd err %g", e);
    CHECK(rel_err(rm2, rm1, C) < 1e-5 && rel_err(rv2, rv1, C) < 1e-4);
    float *dy = rand_buf(&R, n, -1, 1), *dx1 = kiln_falloc(n), *dx2 = kiln_falloc(n);
    float *dg1 = kiln_falloc(C), *dg2 = kiln_falloc(C), *db1 = kiln_falloc(C),
          *db2 = kiln_falloc(C);
    kiln_bn_bwd_ref(x, g, m1, s1, dy, dx1, dg1, db1, M, C);
    kiln_bn_bwd(x, g, m1, s1, dy, dx2, dg2, db2, M, C);
    CHECK_MSG((e = rel_err(dx2, dx1, n)) < 1e-4, "bn dx err %g", e);
    CHECK_MSG((e = rel_err(dg2, dg1, C)) < 1e-4, "bn dgamma err %g", e);
    CHECK_MSG((e = rel_err(db2, db1, C)) < 1e-4, "bn dbeta err %g", e);
    /* inference with the batch's own statistics reproduces training output */
    for (int c = 0; c < C; c++)
        rv1[c] = 1.0f / (s1[c] * s1[c]) - 1e-5f;
    kiln_bn_fwd_infer(x, g, bt, m1, rv1, 1e-5f, y2, M, C);
    CHECK_MSG((e = rel_err(y2, y1, n)) < 1e-3, "bn infer err %g", e);
    float *f[] = {x,   g,   bt,  y1, y2,  m1,  m2,  s1,  s2,  rm1,
                  rm2, rv1, rv2, dy, dx1, dx2, dg1, dg2, db1, db2};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        kiln_ffree(f[i]);
}

static void check_xent(int B, int K)
{
    float *z = rand_buf(&R, (size_t)B * K, -5, 5), *d1 = kiln_falloc((size_t)B * K),
          *d2 = kiln_falloc((size_t)B * K);
    uint8_t *lab = malloc(B);
    for (int i = 0; i < B; i++)
        lab[i] = (uint8_t)(kiln_rng_next(&R) % K);
    int c1, c2;
    float l1 = kiln_xent_ref(z, lab, B, K, d1, &c1), l2 = kiln_xent(z, lab, B, K, d2, &c2);
    CHECK_MSG(fabsf(l1 - l2) < 1e-5f * fabsf(l1) + 1e-6f, "xent loss %g vs %g", l1, l2);
    CHECK(c1 == c2);
    CHECK(rel_err(d2, d1, (size_t)B * K) < 1e-5);
    /* huge logits must not overflow */
    z[0] = 1e30f;
    l2 = kiln_xent(z, lab, B, K, d2, NULL);
    CHECK(isfinite(l2));
    kiln_ffree(z), kiln_ffree(d1), kiln_ffree(d2);
    free(lab);
}

int main(void)
{
    kiln_rng_seed(&R, 42);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_set_threads(threads);
        check_gemms();
        check_dense(7, 33, 70, 0, 1);
        check_dense(5, 130, 200, 1, 1);
        check_dense(3, 20, 10, 1, 0);
        check_dense(KILN_HEAVY ? 128 : 16, 784, KILN_HEAVY ? 512 : 96, 1, 1);
        for (int policy = 0; policy <= 2; policy++) {
            kiln__conv_dnnl_set_policy(policy);
            check_conv(3, 9, 8, 3, 5, 5, 1, 2, 0);
            check_conv(2, 7, 7, 4, 6, 3, 2, 1, 1);
            check_conv(3, 5, 5, 8, 4, 1, 1, 0, 1);    /* 1x1: the no-im2col path */
            check_conv(3, 8, 8, 16, 24, 3, 2, 1, 1);  /* stride 2, floor leaves pad unused */
            check_conv(2, 9, 9, 16, 32, 1, 2, 0, 0);  /* ResNet's 1x1 stride-2 shortcut */
            check_conv(2, 16, 16, 3, 16, 7, 2, 3, 0); /* ResNet's stem shape, small */
            check_conv(5, 6, 7, 17, 33, 3, 1, 1, 1);  /* odd channels, odd images */
            check_conv(4, 28, 28, 1, 32, 5, 1, 2, 1); /* the CNN's conv1 */
            check_conv(KILN_HEAVY ? 5 : 3, 14, 14, 32, 64, 5, 1, 2, 1); /* the CNN's conv2 */
        }
        kiln__conv_dnnl_set_policy(1);
        check_pool(3, 8, 8, 5, 2, 2);
        check_pool(2, 7, 9, 3, 3, 2);
        check_pool(9, 28, 28, 32, 2, 2);
        check_eltwise(1000);
        check_eltwise(100003);
        check_bn(50, 7);
        check_bn(512, 32);
        check_xent(37, 10);
    }
    TEST_DONE();
}
