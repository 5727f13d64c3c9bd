/* tests/runtime/test_ops_grad.c - backward passes checked by central finite
 * differences on the reference kernels (the fast paths are checked against
 * the references in test_ops.c).
 *
 * Each check builds L = sum_i r_i * y_i (r fixed random, summed in double)
 * so that dL/dy = r, runs the op's backward with dy = r, and compares
 * dL/dtheta for sampled elements theta with (L(theta+h) - L(theta-h)) / 2h.
 * Tolerance |num - ana| <= 5e-3 + 1e-2*|ana|: outputs are float (relative
 * rounding 6e-8) so L carries ~1e-6 absolute noise, which the division by
 * 2h = 2e-3 turns into ~5e-4; linear ops use h = 1e-2 and are exact up to
 * that noise, nonlinear ones (BN, softmax) add O(h^2) truncation ~1e-6.
 * Inputs of ReLU and max pooling are kept away from their kinks/ties. */
#include "ops/ops.h"
#include "rt_test.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_rng R;

typedef struct fd {
    void (*fwd)(struct fd *); /* computes y from the inputs */
    float *y, *r;
    size_t ny;
    const kiln_conv_shape *cs;
    const kiln_pool_shape *ps;
    float *x, *w, *b, *g;
    int32_t *idx;
    uint8_t *lab;
    int B, in, out, relu, M, C, max;
    float *mean, *invstd;
} fd;

static double loss(fd *f)
{
    f->fwd(f);
    double s = 0.0;
    for (size_t i = 0; i < f->ny; i++)
        s += (double)f->r[i] * f->y[i];
    return s;
}

/* checks `samples` random elements of param[0..n) against grad */
static void fd_check(fd *f, const char *what, float *param, const float *grad, size_t n, float h,
                     int samples)
{
    int bad = 0;
    for (int k = 0; k < samples && !bad; k++) {
        size_t i = (size_t)(kiln_rng_next(&R) % n);
        float keep = param[i];
        param[i] = keep + h;
        double lp = loss(f);
        param[i] = keep - h;
        double lm = loss(f);
        param[i] = keep;
        double num = (lp - lm) / (2.0 * h), ana = grad[i];
        if (fabs(num - ana) > 5e-3 + 1e-2 * fabs(ana)) {
            bad = 1;
            fprintf(stderr, "%s[%zu]: finite difference %.6g, backward %.6g\n", what, i, num, ana);
        }
    }
    CHECK_MSG(!bad, "gradient check %s", what);
    loss(f); /* restore y for the caller */
}

static void dense_fwd(fd *f)
{
    kiln_dense_fwd_ref(f->x, f->w, f->b, f->y, f->B, f->in, f->out, f->relu);
}

static void grad_dense(int relu)
{
    fd f = {.fwd = dense_fwd, .B = 4, .in = 9, .out = 6, .relu = relu};
    f.x = rand_buf(&R, 36, -1, 1), f.w = rand_buf(&R, 54, -1, 1), f.b = rand_buf(&R, 6, -1, 1);
    f.ny = 24, f.y = kiln_falloc(24), f.r = rand_buf(&R, 24, -1, 1);
    loss(&f);
    if (relu) /* keep pre-activations away from 0 so +-h never crosses the kink */
        for (int i = 0; i < 24; i++)
            if (fabsf(f.y[i]) < 0.05f) f.r[i] = 0.0f;
    float *dy = copy_buf(f.r, 24), *dx = kiln_falloc(36), *dw = kiln_falloc(54),
          *db = kiln_falloc(6);
    kiln_dense_bwd_ref(f.x, f.w, f.y, dy, dx, dw, db, 4, 9, 6, relu);
    fd_check(&f, relu ? "dense+relu dx" : "dense dx", f.x, dx, 36, 1e-2f, 20);
    fd_check(&f, "dense dw", f.w, dw, 54, 1e-2f, 20);
    fd_check(&f, "dense db", f.b, db, 6, 1e-2f, 6);
    float *p[] = {f.x, f.w, f.b, f.y, f.r, dy, dx, dw, db};
    for (size_t i = 0; i < 9; i++)
        kiln_ffree(p[i]);
}

static void conv_fwd(fd *f)
{
    kiln_conv2d_fwd_ref(f->cs, f->x, f->w, f->b, f->y, 0);
}

static void grad_conv(int k, int stride, int pad)
{
    kiln_conv_shape s;
    kiln_conv_shape_init(&s, 2, 6, 5, 3, 4, k, k, stride, pad);
    size_t nx = 2 * 6 * 5 * 3, nw = (size_t)k * k * 3 * 4, ny = (size_t)2 * s.oh * s.ow * 4;
    fd f = {.fwd = conv_fwd, .cs = &s, .ny = ny};
    f.x = rand_buf(&R, nx, -1, 1), f.w = rand_buf(&R, nw, -1, 1), f.b = rand_buf(&R, 4, -1, 1);
    f.y = kiln_falloc(ny), f.r = rand_buf(&R, ny, -1, 1);
    loss(&f);
    float *dy = copy_buf(f.r, ny), *dx = kiln_falloc(nx), *dw = kiln_falloc(nw),
          *db = kiln_falloc(4);
    kiln_conv2d_bwd_ref(&s, f.x, f.w, f.y, dy, dx, dw, db, 0);
    fd_check(&f, "conv dx", f.x, dx, nx, 1e-2f, 25);
    fd_check(&f, "conv dw", f.w, dw, nw, 1e-2f, 25);
    fd_check(&f, "conv db", f.b, db, 4, 1e-2f, 4);
    float *p[] = {f.x, f.w, f.b, f.y, f.r, dy, dx, dw, db};
    for (size_t i = 0; i < 9; i++)
        kiln_ffree(p[i]);
}

static void pool_fwd(fd *f)
{
    if (f->max)
        kiln_maxpool_fwd_ref(f->ps, f->x, f->y, f->idx);
    else
        kiln_avgpool_fwd_ref(f->ps, f->x, f->y);
}

static void grad_pool(int max)
{
    kiln_pool_shape s;
    kiln_pool_shape_init(&s, 2, 6, 6, 3, 2, 2);
    size_t nx = 2 * 6 * 6 * 3, ny = (size_t)2 * s.oh * s.ow * 3;
    fd f = {.fwd = pool_fwd, .ps = &s, .ny = ny, .max = max};
    /* distinct values 0.1 apart: a +-0.01 nudge never changes a window's max */
    f.x = kiln_falloc(nx);
    for (size_t i = 0; i < nx; i++)
        f.x[i] = 0.1f * (float)((i * 37) % nx);
    f.y = kiln_falloc(ny), f.r = rand_buf(&R, ny, -1, 1), f.idx = calloc(ny, sizeof(int32_t));
    loss(&f);
    float *dx = kiln_falloc(nx);
    if (max)
        kiln_maxpool_bwd_ref(&s, f.r, f.idx, dx);
    else
        kiln_avgpool_bwd_ref(&s, f.r, dx);
    fd_check(&f, max ? "maxpool dx" : "avgpool dx", f.x, dx, nx, 1e-2f, 30);
    kiln_ffree(f.x), kiln_ffree(f.y), kiln_ffree(f.r), kiln_ffree(dx);
    free(f.idx);
}

static void bn_fwd(fd *f)
{
    kiln_bn_fwd_train_ref(f->x, f->g, f->b, f->y, f->mean, f->invstd, NULL, NULL, 0.1f, 1e-5f, f->M,
                          f->C);
}

static void grad_bn(void)
{
    int M = 12, C = 3;
    size_t n = (size_t)M * C;
    fd f = {.fwd = bn_fwd, .M = M, .C = C, .ny = n};
    f.x = rand_buf(&R, n, -2, 2), f.g = rand_buf(&R, C, 0.5, 1.5), f.b = rand_buf(&R, C, -1, 1);
    f.y = kiln_falloc(n), f.r = rand_buf(&R, n, -1, 1);
    f.mean = kiln_falloc(C), f.invstd = kiln_falloc(C);
    loss(&f);
    float *dx = kiln_falloc(n), *dg = kiln_falloc(C), *db = kiln_falloc(C);
    kiln_bn_bwd_ref(f.x, f.g, f.mean, f.invstd, f.r, dx, dg, db, M, C);
    fd_check(&f, "bn dx", f.x, dx, n, 1e-3f, 20);
    fd_check(&f, "bn dgamma", f.g, dg, C, 1e-3f, 3);
    fd_check(&f, "bn dbeta", f.b, db, C, 1e-3f, 3);
    float *p[] = {f.x, f.g, f.b, f.y, f.r, f.mean, f.invstd, dx, dg, db};
    for (size_t i = 0; i < 10; i++)
        kiln_ffree(p[i]);
}

static void xent_fwd(fd *f)
{
    f->y[0] = kiln_xent_ref(f->x, f->lab, f->B, f->C, NULL, NULL);
}

static void grad_xent(void)
{
    int B = 5, K = 7;
    float one = 1.0f;
    fd f = {.fwd = xent_fwd, .B = B, .C = K, .ny = 1, .r = &one};
    f.x = rand_buf(&R, (size_t)B * K, -3, 3), f.y = kiln_falloc(1);
    f.lab = malloc(B);
    for (int i = 0; i < B; i++)
        f.lab[i] = (uint8_t)(i * 3 % K);
    float *d = kiln_falloc((size_t)B * K);
    kiln_xent_ref(f.x, f.lab, B, K, d, NULL);
    fd_check(&f, "softmax xent dlogits", f.x, d, (size_t)B * K, 1e-3f, 35);
    kiln_ffree(f.x), kiln_ffree(f.y), kiln_ffree(d);
    free(f.lab);
}

static void relu_fwd(fd *f)
{
    kiln_relu_fwd_ref(f->x, f->y, f->ny);
}

static void add_fwd(fd *f)
{
    kiln_add_fwd_ref(f->x, f->w, f->y, f->ny);
}

static void grad_relu_add(void)
{
    size_t n = 40;
    fd f = {.fwd = relu_fwd, .ny = n};
    f.x = rand_buf(&R, n, -1, 1), f.w = rand_buf(&R, n, -1, 1), f.y = kiln_falloc(n);
    f.r = rand_buf(&R, n, -1, 1);
    for (size_t i = 0; i < n; i++) /* away from the kink */
        if (fabsf(f.x[i]) < 0.05f) f.x[i] = 0.5f;
    loss(&f);
    float *dx = kiln_falloc(n), *dw = kiln_falloc(n);
    kiln_relu_bwd_ref(f.y, f.r, dx, n);
    fd_check(&f, "relu dx", f.x, dx, n, 1e-2f, 20);
    f.fwd = add_fwd;
    loss(&f);
    kiln_add_bwd_ref(f.r, dx, dw, n);
    fd_check(&f, "add da", f.x, dx, n, 1e-2f, 10);
    fd_check(&f, "add db", f.w, dw, n, 1e-2f, 10);
    kiln_ffree(f.x), kiln_ffree(f.w), kiln_ffree(f.y), kiln_ffree(f.r), kiln_ffree(dx),
        kiln_ffree(dw);
}

int main(void)
{
    kiln_rng_seed(&R, 1234);
    grad_dense(0);
    grad_dense(1);
    grad_conv(5, 1, 2);
    grad_conv(3, 2, 1);
    grad_pool(1);
    grad_pool(0);
    grad_bn();
    grad_xent();
    grad_relu_add();
    TEST_DONE();
}
