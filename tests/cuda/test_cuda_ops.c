/* tests/cuda/test_cuda_ops.c - every CUDA op against the CPU reference
 * (ops/ops.h, optim/optim.h), on random inputs.
 *
 * Tolerances, as max |gpu - cpu| / max(1, max |cpu|) (rel_err in rt_test.h);
 * TF32 is off (kiln_cu_set_tf32(0): cuBLAS default math, cuDNN FMA math):
 *  - dense (cuBLAS sgemm):                      1e-4
 *  - conv2d (cuDNN; the heuristics may choose
 *    Winograd or FFT, which round differently):  3e-4
 *  - batch norm (outputs, saved stats, running
 *    stats, gradients):                         1e-4
 *  - softmax cross-entropy (loss, dlogits):      1e-5; arg-max count exact
 *  - avg pool 1e-6; max pool, ReLU, add, the ReLU mask, casts to bf16 (vs a
 *    host round-to-nearest-even) and loss scaling: exact
 *  - SGD and Adam: 1e-6 (the kernels use the CPU's uncontracted operations,
 *    so they should be bit-identical; the test prints whether they are)
 *  - conv2d on NCHW copies (the nchw variant): conv2d's tolerances; dense
 *    forward on cuBLASLt (the cublaslt-fc variant): dense's
 *  - batch norm + add + ReLU in one pass (the fused variant), and the
 *    ReLU's backward + batch norm's: bit-identical to the ops in turn
 *  - bf16/fp16 GEMM (fp32 accumulation on tensor cores) vs the CPU on the
 *    same rounded inputs: 1e-3; vs the unrounded fp32 result: 2e-2
 *  - fp16 round trip: within half an fp16 ulp (2^-11 relative)
 *  - mixed precision as the runtime's table runs it (cuda/lowp.c), vs the
 *    CPU table's reference (backend/cpu.c, same rounding, double sums):
 *    the rounding kernel bit-identical to kiln__round_lowp; dense forward
 *    and backward (GemmEx) 1e-4, since the products of rounded inputs are
 *    exact and only the order of the fp32 sums differs; convolutions
 *    (cuDNN with TF32 allowed, whose Winograd variants round their
 *    transforms to TF32) 1e-2, against bf16's own 4e-3 from fp32
 * Without a GPU (or a build without the backend) it prints why and exits 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KILN_CUDA_BUILT
#include "rt_test.h"
#include "test.h"

#include "backend/backend.h"
#include "cuda/cuda_ops.h"
#include "kiln/cuda.h"
#include "ops/ops.h"
#include "optim/optim.h"

static kiln_rng R;
static kiln_cuda_ctx *C;

#define MAX_DEV 1024
static void *devs[MAX_DEV];
static int ndevs;

/* Device copy of n floats of h (or zeros when h is NULL); freed at exit. */
static void *dbuf(const void *h, size_t bytes)
{
    void *d = NULL;
    if (kiln_cu_alloc(C, bytes, &d) != KILN_OK || ndevs == MAX_DEV) {
        fprintf(stderr, "FATAL: device allocation of %zu bytes: %s\n", bytes, kiln_cu_error(C));
        exit(1);
    }
    if (h && kiln_cu_upload(C, d, h, bytes) != KILN_OK) {
        fprintf(stderr, "FATAL: upload: %s\n", kiln_cu_error(C));
        exit(1);
    }
    devs[ndevs++] = d;
    return d;
}

static float *dcopy(const float *h, size_t n)
{
    return dbuf(h, n * sizeof(float));
}

/* Host copy of a device buffer (synchronises: kernel errors show here). */
static float *hcopy(const float *d, size_t n)
{
    float *h = kiln_falloc(n);
    if (kiln_cu_download(C, h, d, n * sizeof(float)) != KILN_OK) {
        fprintf(stderr, "FATAL: download: %s\n", kiln_cu_error(C));
        exit(1);
    }
    return h;
}

#define OK(call) CHECK_MSG((call) == KILN_OK, "%s: %s", #call, kiln_cu_error(C))

/* got is a device buffer, want a host one */
static void near(const char *what, const float *got_dev, const float *want, size_t n, double tol)
{
    float *got = hcopy(got_dev, n);
    double e = rel_err(got, want, n);
    CHECK_MSG(e <= tol, "%s: error %g > %g", what, e, tol);
    printf("  %-34s err %.3g (tol %.0e)\n", what, e, tol);
    kiln_ffree(got);
}

static void same(const char *what, const float *got_dev, const float *want, size_t n)
{
    float *got = hcopy(got_dev, n);
    CHECK_MSG(bits_equal(got, want, n), "%s: not bit-identical", what);
    kiln_ffree(got);
}

static void check_dense(int B, int in, int out, int relu)
{
    size_t nx = (size_t)B * in, nw = (size_t)in * out, ny = (size_t)B * out;
    float *x = rand_buf(&R, nx, -1, 1), *w = rand_buf(&R, nw, -0.5, 0.5);
    float *b = rand_buf(&R, out, -0.5, 0.5), *y = kiln_falloc(ny);
    float *dy = rand_buf(&R, ny, -1, 1), *dyc = copy_buf(dy, ny);
    float *dx = kiln_falloc(nx), *dw = kiln_falloc(nw), *db = kiln_falloc(out);
    float *acc = rand_buf(&R, nw, -1, 1), *accb = rand_buf(&R, out, -1, 1);
    float *dX = dcopy(x, nx), *dW = dcopy(w, nw), *dB = dcopy(b, out), *dY = dcopy(NULL, ny);
    float *dDY = dcopy(dy, ny), *dDX = dcopy(NULL, nx), *dDW = dcopy(NULL, nw);
    float *dDB = dcopy(NULL, out), *dACC = dcopy(acc, nw), *dACCB = dcopy(accb, out);
    char what[96];

    printf("dense %dx%dx%d relu=%d\n", B, in, out, relu);
    kiln_dense_fwd_ref(x, w, b, y, B, in, out, relu);
    OK(kiln_cu_dense_fwd(C, dX, dW, dB, dY, B, in, out, relu));
    near("fwd", dY, y, ny, 1e-4);

    kiln_dense_bwd_ref(x, w, y, dyc, dx, dw, db, B, in, out, relu);
    OK(kiln_cu_dense_bwd(C, dX, dW, dY, dDY, dDX, dDW, dDB, B, in, out, relu, 0.0f));
    same("relu mask of dy", dDY, dyc, ny);
    near("bwd dx", dDX, dx, nx, 1e-4);
    near("bwd dw", dDW, dw, nw, 1e-4);
    near("bwd db", dDB, db, out, 1e-4);

    /* accumulating form: dw = 0.9*dw_old + dW (dy is already masked) */
    for (size_t i = 0; i < nw; i++)
        acc[i] = 0.9f * acc[i] + dw[i];
    for (int j = 0; j < out; j++)
        accb[j] = 0.9f * accb[j] + db[j];
    OK(kiln_cu_dense_bwd(C, dX, dW, dY, dDY, NULL, dACC, dACCB, B, in, out, relu, 0.9f));
    snprintf(what, sizeof what, "bwd_acc dw (beta 0.9)");
    near(what, dACC, acc, nw, 1e-4);
    near("bwd_acc db (beta 0.9)", dACCB, accb, out, 1e-4);

    float *f[] = {x, w, b, y, dy, dyc, dx, dw, db, acc, accb};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
}

/* bf16/fp16 inputs, fp32 accumulation and output */
static void check_dense_lowp(kiln_cu_dtype t, int B, int in, int out)
{
    size_t nx = (size_t)B * in, nw = (size_t)in * out, ny = (size_t)B * out;
    float *x = rand_buf(&R, nx, -1, 1), *w = rand_buf(&R, nw, -0.5, 0.5);
    float *b = rand_buf(&R, out, -0.5, 0.5), *y = kiln_falloc(ny), *y32 = kiln_falloc(ny);
    float *dX = dcopy(x, nx), *dW = dcopy(w, nw), *dB = dcopy(b, out), *dY = dcopy(NULL, ny);
    void *hX = dbuf(NULL, nx * 2), *hW = dbuf(NULL, nw * 2);
    float *xr, *wr;
    const char *name = t == KILN_CU_BF16 ? "bf16" : "fp16";

    printf("dense %s %dx%dx%d\n", name, B, in, out);
    OK(kiln_cu_cast_to_lowp(C, t, hX, dX, nx));
    OK(kiln_cu_cast_to_lowp(C, t, hW, dW, nw));
    /* the CPU reference on exactly the rounded inputs */
    OK(kiln_cu_cast_from_lowp(C, t, dX, hX, nx));
    OK(kiln_cu_cast_from_lowp(C, t, dW, hW, nw));
    xr = hcopy(dX, nx);
    wr = hcopy(dW, nw);
    kiln_dense_fwd_ref(xr, wr, b, y, B, in, out, 1);
    kiln_dense_fwd_ref(x, w, b, y32, B, in, out, 1);
    OK(kiln_cu_dense_fwd_lowp(C, t, hX, hW, dB, dY, B, in, out, 1));
    near("fwd vs cpu on rounded inputs", dY, y, ny, 1e-3);
    near("fwd vs fp32 inputs", dY, y32, ny, 2e-2);
    float *f[] = {x, w, b, y, y32, xr, wr};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
}

static void check_conv(int n, int h, int w, int c, int oc, int k, int stride, int pad, int relu)
{
    kiln_conv_shape s;
    if (kiln_conv_shape_init(&s, n, h, w, c, oc, k, k, stride, pad)) {
        CHECK(!"bad conv shape in test");
        return;
    }
    size_t nx = (size_t)n * h * w * c, nw = (size_t)k * k * c * oc;
    size_t ny = (size_t)n * s.oh * s.ow * oc;
    float *x = rand_buf(&R, nx, -1, 1), *wt = rand_buf(&R, nw, -0.5, 0.5);
    float *b = rand_buf(&R, oc, -0.5, 0.5), *y = kiln_falloc(ny);
    float *dy = rand_buf(&R, ny, -1, 1), *dyc = copy_buf(dy, ny);
    float *dx = kiln_falloc(nx), *dw = kiln_falloc(nw), *db = kiln_falloc(oc);
    float *acc = rand_buf(&R, nw, -1, 1);
    float *dX = dcopy(x, nx), *dW = dcopy(wt, nw), *dB = dcopy(b, oc), *dY = dcopy(NULL, ny);
    float *dDY = dcopy(dy, ny), *dDX = dcopy(NULL, nx), *dDW = dcopy(NULL, nw);
    float *dDB = dcopy(NULL, oc), *dACC = dcopy(acc, nw), *dACCB = dcopy(NULL, oc);

    printf("conv n=%d %dx%dx%d -> %d, k=%d s=%d p=%d relu=%d\n", n, h, w, c, oc, k, stride, pad,
           relu);
    kiln_conv2d_fwd_ref(&s, x, wt, b, y, relu);
    OK(kiln_cu_conv2d_fwd(C, &s, dX, dW, dB, dY, relu));
    near("fwd", dY, y, ny, 3e-4);

    kiln_conv2d_bwd_ref(&s, x, wt, y, dyc, dx, dw, db, relu);
    OK(kiln_cu_conv2d_bwd(C, &s, dX, dW, dY, dDY, dDX, dDW, dDB, relu, 0.0f));
    same("relu mask of dy", dDY, dyc, ny);
    near("bwd dx", dDX, dx, nx, 3e-4);
    near("bwd dw", dDW, dw, nw, 3e-4);
    near("bwd db", dDB, db, oc, 1e-4);

    for (size_t i = 0; i < nw; i++)
        acc[i] = 0.5f * acc[i] + dw[i];
    OK(kiln_cu_conv2d_bwd(C, &s, dX, dW, dY, dDY, NULL, dACC, dACCB, relu, 0.5f));
    near("bwd_acc dw (beta 0.5)", dACC, acc, nw, 3e-4);
    near("bwd_acc db (beta 0.5, from 0)", dACCB, db, oc, 1e-4);

    float *f[] = {x, wt, b, y, dy, dyc, dx, dw, db, acc};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
}

static void check_pool(int n, int h, int w, int c, int k, int stride, int ties)
{
    kiln_pool_shape s;
    if (kiln_pool_shape_init(&s, n, h, w, c, k, stride)) {
        CHECK(!"bad pool shape in test");
        return;
    }
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * c;
    /* a shuffled ramp: no ties, so the arg-max is the same on both sides */
    float *x = kiln_falloc(nx), *y = kiln_falloc(ny), *dy = rand_buf(&R, ny, -1, 1);
    float *dx = kiln_falloc(nx);
    int32_t *idx = malloc(ny * sizeof *idx);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)i / (float)nx - 0.5f;
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = kiln_rng_next(&R) % (i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    /* ties: three values only, and whole windows of one value (an image's
     * background): the gradient goes to each window's first maximum, bit
     * for bit the CPU's (the max-pool kernel is kiln's own for that) */
    if (ties)
        for (size_t i = 0; i < nx; i++)
            x[i] = i < nx / 3 ? 0.25f : (float)(kiln_rng_next(&R) % 3);
    float *dX = dcopy(x, nx), *dY = dcopy(NULL, ny), *dDY = dcopy(dy, ny), *dDX = dcopy(NULL, nx);

    printf("pool n=%d %dx%dx%d k=%d s=%d%s\n", n, h, w, c, k, stride, ties ? " (ties)" : "");
    kiln_maxpool_fwd_ref(&s, x, y, idx);
    OK(kiln_cu_maxpool_fwd(C, &s, dX, dY));
    same("maxpool fwd", dY, y, ny);
    kiln_maxpool_bwd_ref(&s, dy, idx, dx);
    OK(kiln_cu_maxpool_bwd(C, &s, dX, dY, dDY, dDX));
    same("maxpool bwd (first maximum, CPU order)", dDX, dx, nx);

    kiln_avgpool_fwd_ref(&s, x, y);
    OK(kiln_cu_avgpool_fwd(C, &s, dX, dY));
    near("avgpool fwd", dY, y, ny, 1e-6);
    kiln_avgpool_bwd_ref(&s, dy, dx);
    OK(kiln_cu_avgpool_bwd(C, &s, dX, dY, dDY, dDX));
    near("avgpool bwd", dDX, dx, nx, 1e-6);
    kiln_ffree(x), kiln_ffree(y), kiln_ffree(dy), kiln_ffree(dx);
    free(idx);
}

static void check_bn(int M, int Cn)
{
    size_t n = (size_t)M * Cn;
    const float mom = 0.1f, eps = 1e-5f;
    float *x = rand_buf(&R, n, -2, 3), *g = rand_buf(&R, Cn, 0.5, 1.5);
    float *be = rand_buf(&R, Cn, -0.5, 0.5), *y = kiln_falloc(n), *mean = kiln_falloc(Cn);
    float *istd = kiln_falloc(Cn), *rm = rand_buf(&R, Cn, -0.1, 0.1);
    float *rv = rand_buf(&R, Cn, 0.9, 1.1), *dy = rand_buf(&R, n, -1, 1), *dx = kiln_falloc(n);
    float *dg = kiln_falloc(Cn), *dbe = kiln_falloc(Cn);
    float *dX = dcopy(x, n), *dG = dcopy(g, Cn), *dBE = dcopy(be, Cn), *dY = dcopy(NULL, n);
    float *dM = dcopy(NULL, Cn), *dI = dcopy(NULL, Cn), *dRM = dcopy(rm, Cn), *dRV = dcopy(rv, Cn);
    float *dDY = dcopy(dy, n), *dDX = dcopy(NULL, n), *dDG = dcopy(NULL, Cn);
    float *dDBE = dcopy(NULL, Cn);

    printf("batch norm M=%d C=%d\n", M, Cn);
    kiln_bn_fwd_train_ref(x, g, be, y, mean, istd, rm, rv, mom, eps, M, Cn);
    OK(kiln_cu_bn_fwd_train(C, dX, dG, dBE, dY, dM, dI, dRM, dRV, mom, eps, M, Cn));
    near("fwd train y", dY, y, n, 1e-4);
    near("saved mean", dM, mean, Cn, 1e-4);
    near("saved invstd", dI, istd, Cn, 1e-4);
    near("running mean", dRM, rm, Cn, 1e-4);
    near("running var (unbiased)", dRV, rv, Cn, 1e-4);

    kiln_bn_bwd_ref(x, g, mean, istd, dy, dx, dg, dbe, M, Cn);
    OK(kiln_cu_bn_bwd(C, dX, dG, dM, dI, dDY, dDX, dDG, dDBE, eps, M, Cn));
    near("bwd dx", dDX, dx, n, 1e-4);
    near("bwd dgamma", dDG, dg, Cn, 1e-4);
    near("bwd dbeta", dDBE, dbe, Cn, 1e-4);

    kiln_bn_fwd_infer(x, g, be, rm, rv, eps, y, M, Cn);
    OK(kiln_cu_bn_fwd_infer(C, dX, dG, dBE, dRM, dRV, eps, dY, M, Cn));
    near("fwd infer", dY, y, n, 1e-4);

    /* the documented refusal: training statistics need two rows */
    CHECK(kiln_cu_bn_fwd_train(C, dX, dG, dBE, dY, dM, dI, NULL, NULL, mom, eps, 1, Cn) ==
          KILN_EINVAL);
    float *f[] = {x, g, be, y, mean, istd, rm, rv, dy, dx, dg, dbe};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
}

/* kiln's batch-norm kernels (the default) and, where cuDNN takes the
 * shape, cuDNN's, each vs the CPU. cuDNN's legacy inference batch norm
 * answers CUDNN_STATUS_NOT_SUPPORTED for 100,003 rows (an H100, cuDNN 9.19):
 * one more reason for kiln's own. */
static void check_bn_both(int M, int Cn)
{
    for (int cudnn = 0; cudnn < (M <= 65535 ? 2 : 1); cudnn++) {
        kiln_cu_set_bn_cudnn(C, cudnn);
        printf("%s: ", cudnn ? "cuDNN" : "kiln kernels");
        check_bn(M, Cn);
    }
    kiln_cu_set_bn_cudnn(C, 0);
}

/* The fused variant's ops (issue 45): bn_fwd_train_add_relu bit-identical
 * to batch norm, the add and the ReLU in turn, with and without the
 * residual, on kiln's kernels and on cuDNN's batch norm, the saved and the
 * running statistics too; bn_bwd_relu to the ReLU's backward then batch
 * norm's (dx, dgamma, dbeta). */
static void check_bn_add_relu(int M, int Cn)
{
    size_t n = (size_t)M * Cn;
    float *x = rand_buf(&R, n, -2, 2), *res = rand_buf(&R, n, -1, 1);
    float *g = rand_buf(&R, (size_t)Cn, 0.5f, 1.5f), *be = rand_buf(&R, (size_t)Cn, -0.5f, 0.5f);
    float *dX = dcopy(x, n), *dR = dcopy(res, n), *dG = dcopy(g, Cn), *dBE = dcopy(be, Cn);
    float *dY = dcopy(NULL, n), *dF = dcopy(NULL, n);
    float *st[8];
    for (int i = 0; i < 8; i++)
        st[i] = dcopy(NULL, Cn); /* mean, invstd, run mean, run var: unfused, then fused */
    for (int cudnn = 0; cudnn < 2; cudnn++)
        for (int with_res = 0; with_res < 2; with_res++) {
            kiln_cu_set_bn_cudnn(C, cudnn);
            printf("bn + add + relu M=%d C=%d (%s, %s)\n", M, Cn, cudnn ? "cuDNN" : "kiln",
                   with_res ? "residual" : "no residual");
            OK(kiln_cu_bn_fwd_train(C, dX, dG, dBE, dY, st[0], st[1], st[2], st[3], 0.1f, 1e-5f, M,
                                    Cn));
            if (with_res) OK(kiln_cu_add_fwd(C, dY, dR, dY, n));
            OK(kiln_cu_relu_fwd(C, dY, dY, n));
            OK(kiln_cu_bn_fwd_train_add_relu(C, dX, dG, dBE, with_res ? dR : NULL, dF, st[4], st[5],
                                             st[6], st[7], 0.1f, 1e-5f, M, Cn));
            float *a = hcopy(dY, n);
            same("fused y", dF, a, n);
            for (int i = 0; i < 4; i++) {
                float *h = hcopy(st[i], Cn);
                same("fused statistics", st[4 + i], h, Cn);
                kiln_ffree(h);
            }
            kiln_ffree(a);
        }
    /* the backward: the ReLU's mask read inside batch norm's passes */
    {
        float *dy = rand_buf(&R, n, -1, 1), *dDY = dcopy(dy, n), *dDY2 = dcopy(dy, n);
        float *dDX = dcopy(NULL, n), *dDX2 = dcopy(NULL, n);
        float *dg[4] = {dcopy(NULL, Cn), dcopy(NULL, Cn), dcopy(NULL, Cn), dcopy(NULL, Cn)};
        for (int cudnn = 0; cudnn < 2; cudnn++) {
            kiln_cu_set_bn_cudnn(C, cudnn);
            printf("bn + relu backward M=%d C=%d (%s)\n", M, Cn, cudnn ? "cuDNN" : "kiln");
            OK(kiln_cu_upload(C, dDY, dy, n * sizeof(float)));
            OK(kiln_cu_upload(C, dDY2, dy, n * sizeof(float)));
            OK(kiln_cu_relu_bwd(C, dF, dDY, dDY, n));
            OK(kiln_cu_bn_bwd(C, dX, dG, st[0], st[1], dDY, dDX, dg[0], dg[1], 1e-5f, M, Cn));
            OK(kiln_cu_bn_bwd_relu(C, dX, dG, st[0], st[1], dF, dDY2, dDX2, dg[2], dg[3], 1e-5f, M,
                                   Cn));
            float *a = hcopy(dDX, n), *b0 = hcopy(dg[0], Cn), *b1 = hcopy(dg[1], Cn);
            same("fused backward dx", dDX2, a, n);
            same("fused backward dgamma", dg[2], b0, Cn);
            same("fused backward dbeta", dg[3], b1, Cn);
            kiln_ffree(a), kiln_ffree(b0), kiln_ffree(b1);
        }
        kiln_ffree(dy);
    }
    kiln_cu_set_bn_cudnn(C, 0);
    kiln_ffree(x), kiln_ffree(res), kiln_ffree(g), kiln_ffree(be);
}

static void check_eltwise(size_t n)
{
    float *a = rand_buf(&R, n, -1, 1), *b = rand_buf(&R, n, -1, 1), *y = kiln_falloc(n);
    float *dx = kiln_falloc(n);
    float *dA = dcopy(a, n), *dB = dcopy(b, n), *dY = dcopy(NULL, n), *dDX = dcopy(NULL, n);
    float *dDB = dcopy(NULL, n);

    printf("elementwise n=%zu\n", n);
    kiln_relu_fwd_ref(a, y, n);
    OK(kiln_cu_relu_fwd(C, dA, dY, n));
    same("relu fwd", dY, y, n);
    kiln_relu_bwd_ref(y, b, dx, n);
    OK(kiln_cu_relu_bwd(C, dY, dB, dDX, n));
    same("relu bwd", dDX, dx, n);
    /* in place (dx aliases dy), as the CPU allows */
    OK(kiln_cu_relu_bwd(C, dY, dB, dB, n));
    same("relu bwd in place", dB, dx, n);

    OK(kiln_cu_upload(C, dB, b, n * sizeof(float)));
    kiln_add_fwd_ref(a, b, y, n);
    OK(kiln_cu_add_fwd(C, dA, dB, dY, n));
    same("add fwd", dY, y, n);
    OK(kiln_cu_add_bwd(C, dA, dDX, dDB, n));
    same("add bwd da", dDX, a, n);
    same("add bwd db", dDB, a, n);
    kiln_ffree(a), kiln_ffree(b), kiln_ffree(y), kiln_ffree(dx);
}

static void check_xent(int B, int K)
{
    size_t n = (size_t)B * K;
    float *z = rand_buf(&R, n, -8, 8), *dz = kiln_falloc(n), loss_g = 0;
    uint8_t *lab8 = malloc((size_t)B);
    int32_t *lab = malloc((size_t)B * sizeof *lab);
    int ok_c = 0, ok_g = -1;
    int kmax = K < 256 ? K : 256; /* the CPU's labels are uint8 */
    for (int i = 0; i < B; i++) {
        lab8[i] = (uint8_t)(kiln_rng_next(&R) % (uint64_t)kmax);
        lab[i] = lab8[i];
    }
    /* make some rows right so the arg-max count is not trivially 0 */
    for (int i = 0; i < B; i += 3)
        z[(size_t)i * K + lab[i]] = 20.0f;
    float *dZ = dcopy(z, n), *dDZ = dcopy(NULL, n), *dL = dcopy(NULL, 1);
    int32_t *dLab = dbuf(lab, (size_t)B * sizeof *lab);
    int *dOk = dbuf(NULL, sizeof(int));

    printf("softmax xent B=%d K=%d\n", B, K);
    float loss_c = kiln_xent_ref(z, lab8, B, K, dz, &ok_c);
    OK(kiln_cu_xent(C, dZ, dLab, B, K, dDZ, 1.0f, dL, dOk));
    near("dlogits", dDZ, dz, n, 1e-5);
    OK(kiln_cu_download(C, &loss_g, dL, sizeof loss_g));
    OK(kiln_cu_download(C, &ok_g, dOk, sizeof ok_g));
    CHECK_MSG(fabs(loss_g - loss_c) <= 1e-5 * fmax(1.0, fabs(loss_c)), "loss %g vs %g", loss_g,
              loss_c);
    CHECK_MSG(ok_g == ok_c, "correct %d vs %d", ok_g, ok_c);
    printf("  loss %.7g vs cpu %.7g, correct %d vs %d\n", loss_g, loss_c, ok_g, ok_c);

    /* a label out of range must not pass silently */
    lab[0] = K;
    OK(kiln_cu_upload(C, dLab, lab, (size_t)B * sizeof *lab));
    OK(kiln_cu_xent(C, dZ, dLab, B, K, NULL, 1.0f, dL, NULL));
    OK(kiln_cu_download(C, &loss_g, dL, sizeof loss_g));
    CHECK_MSG(isnan(loss_g), "bad label gave loss %g, want NaN", loss_g);
    kiln_ffree(z), kiln_ffree(dz);
    free(lab8), free(lab);
}

static void check_optim(size_t n)
{
    float *p = rand_buf(&R, n, -1, 1), *g = rand_buf(&R, n, -1, 1), *v = rand_buf(&R, n, -1, 1);
    float *m = rand_buf(&R, n, -1, 1), *v2 = rand_buf(&R, n, 0, 1);
    float *dP = dcopy(p, n), *dG = dcopy(g, n), *dV = dcopy(v, n), *dM = dcopy(m, n);
    float *dV2 = dcopy(v2, n), *got;

    printf("optimizers n=%zu\n", n);
    kiln_sgd_update_ref(p, g, v, n, 0.05f, 0.9f);
    OK(kiln_cu_sgd_update(C, dP, dG, dV, n, 0.05f, 0.9f));
    near("sgd p", dP, p, n, 1e-6);
    near("sgd v", dV, v, n, 1e-6);
    got = hcopy(dP, n);
    printf("  sgd bit-identical to the CPU: %s\n", bits_equal(got, p, n) ? "yes" : "no");
    kiln_ffree(got);

    for (uint64_t t = 1; t <= 3; t++) {
        kiln_adam_update_ref(p, g, m, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t);
        OK(kiln_cu_adam_update(C, dP, dG, dM, dV2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t));
    }
    near("adam p (3 steps)", dP, p, n, 1e-6);
    near("adam m", dM, m, n, 1e-6);
    near("adam v", dV2, v2, n, 1e-6);
    got = hcopy(dP, n);
    printf("  adam bit-identical to the CPU: %s\n", bits_equal(got, p, n) ? "yes" : "no");
    kiln_ffree(got);
    kiln_ffree(p), kiln_ffree(g), kiln_ffree(v), kiln_ffree(m), kiln_ffree(v2);
}

/* The training step's helpers (the backend table's): the updates with
 * device hyper-parameters, in-place ReLU and its mask, padding and crop,
 * the stream-ordered upload, and a captured graph replayed. */
static void check_step_helpers(size_t n)
{
    float *p = rand_buf(&R, n, -1, 1), *g = rand_buf(&R, n, -1, 1), *v = rand_buf(&R, n, -1, 1);
    float *m = rand_buf(&R, n, -1, 1), *v2 = rand_buf(&R, n, 0, 1), *y = kiln_falloc(n);
    float *dP = dcopy(p, n), *dG = dcopy(g, n), *dV = dcopy(v, n), *dM = dcopy(m, n);
    float *dV2 = dcopy(v2, n), *dH = dcopy(NULL, 8);
    float h[8] = {0.05f, 0.9f};

    printf("step helpers n=%zu\n", n);
    /* sgd/adam with hyper-parameters from device memory: the CPU's bits */
    OK(kiln_cu_upload_ordered(C, dH, h, sizeof h));
    h[0] = -1.0f; /* reusable at once: the copy above already has its values */
    kiln_sgd_update_ref(p, g, v, n, 0.05f, 0.9f);
    OK(kiln_cu_sgd_update_dev(C, dP, dG, dV, n, dH));
    same("sgd (device hyper) p", dP, p, n);
    same("sgd (device hyper) v", dV, v, n);
    for (uint64_t t = 1; t <= 3; t++) {
        float a[8];
        kiln__adam_consts(1e-3f, 0.9f, 0.999f, t, &a[0], &a[1]);
        a[2] = 0.9f, a[3] = 0.999f, a[4] = 1e-8f;
        OK(kiln_cu_upload_ordered(C, dH, a, sizeof a));
        kiln_adam_update_ref(p, g, m, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t);
        OK(kiln_cu_adam_update_dev(C, dP, dG, dM, dV2, n, dH));
    }
    same("adam (device hyper) p, 3 steps", dP, p, n);
    same("adam (device hyper) v", dV2, v2, n);

    /* ReLU in place and its mask in place */
    kiln_relu_fwd_ref(g, y, n);
    OK(kiln_cu_relu_ew(C, dG, dG, n));
    same("relu in place", dG, y, n);
    OK(kiln_cu_upload(C, dV, v, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        p[i] = y[i] > 0.0f ? v[i] : 0.0f;
    OK(kiln_cu_relu_mask(C, dG, dV, dV, n));
    same("relu mask in place", dV, p, n);

    /* padding by 1 around [2, 5, 5, 3] and the crop back */
    {
        int N = 2, S = 5, Ch = 3, P = 1, SP = S + 2 * P;
        size_t ni = (size_t)N * S * S * Ch, no = (size_t)N * SP * SP * Ch;
        float *src = rand_buf(&R, ni, -1, 1), *want = kiln_falloc(no);
        float *dS = dcopy(src, ni), *dO = dcopy(NULL, no), *dC = dcopy(NULL, ni);
        for (int i = 0; i < N; i++)
            for (int yy = 0; yy < SP; yy++)
                for (int xx = 0; xx < SP; xx++)
                    for (int c = 0; c < Ch; c++) {
                        int sy = yy - P, sx = xx - P;
                        want[(((size_t)i * SP + yy) * SP + xx) * Ch + c] =
                            sy >= 0 && sy < S && sx >= 0 && sx < S
                                ? src[(((size_t)i * S + sy) * S + sx) * Ch + c]
                                : 0.0f;
                    }
        OK(kiln_cu_pad2d(C, dS, dO, N, S, Ch, P));
        same("pad2d", dO, want, no);
        OK(kiln_cu_crop2d(C, dO, dC, N, S, Ch, P));
        same("crop2d", dC, src, ni);
        kiln_ffree(src), kiln_ffree(want);
    }

    /* a graph of two kernels, replayed: the second replay doubles again,
     * and a learning rate changed between replays is read by the graph */
    {
        void *gr = NULL;
        float ones[64], two[64];
        float *dA = dcopy(NULL, 64);
        for (int i = 0; i < 64; i++)
            ones[i] = 1.0f;
        OK(kiln_cu_upload(C, dA, ones, sizeof ones));
        OK(kiln_cu_graph_begin(C));
        OK(kiln_cu_add_fwd(C, dA, dA, dA, 64));
        OK(kiln_cu_graph_end(C, &gr));
        CHECK(gr != NULL);
        float *after = hcopy(dA, 64);
        CHECK_MSG(after[0] == 1.0f, "captured work ran at capture time (%g)", after[0]);
        kiln_ffree(after);
        OK(kiln_cu_graph_launch(C, gr));
        OK(kiln_cu_graph_launch(C, gr));
        for (int i = 0; i < 64; i++)
            two[i] = 4.0f;
        same("graph replayed twice", dA, two, 64);
        kiln_cu_graph_free(C, gr);
        printf("  graph capture and replay: ok (memory epoch %lu)\n", kiln_cu_mem_epoch(C));
    }
    kiln_ffree(p), kiln_ffree(g), kiln_ffree(v), kiln_ffree(m), kiln_ffree(v2), kiln_ffree(y);
}

static void check_casts_and_scaling(size_t n)
{
    float *x = rand_buf(&R, n, -1000, 1000), *back;
    uint16_t *h16 = malloc(n * sizeof *h16);
    float *dX = dcopy(x, n), *dBack = dcopy(NULL, n);
    void *dH = dbuf(NULL, n * 2);
    int *dFound = dbuf(NULL, sizeof(int)), found = -1, bad_bf16 = 0;
    double worst = 0;

    printf("casts and loss scaling n=%zu\n", n);
    OK(kiln_cu_cast_to_lowp(C, KILN_CU_BF16, dH, dX, n));
    OK(kiln_cu_download(C, h16, dH, n * 2));
    for (size_t i = 0; i < n; i++)
        bad_bf16 += h16[i] != kiln_cu_f32_to_bf16_host(x[i]);
    CHECK_MSG(bad_bf16 == 0, "%d bf16 values differ from round-to-nearest-even", bad_bf16);
    OK(kiln_cu_cast_from_lowp(C, KILN_CU_BF16, dBack, dH, n));
    back = hcopy(dBack, n);
    for (size_t i = 0; i < n; i++)
        bad_bf16 += back[i] != kiln_cu_bf16_to_f32_host(h16[i]);
    CHECK_MSG(bad_bf16 == 0, "bf16 -> f32 differs from the host");
    kiln_ffree(back);

    OK(kiln_cu_cast_to_lowp(C, KILN_CU_FP16, dH, dX, n));
    OK(kiln_cu_cast_from_lowp(C, KILN_CU_FP16, dBack, dH, n));
    back = hcopy(dBack, n);
    for (size_t i = 0; i < n; i++) {
        /* below 2^-14 fp16 is subnormal: absolute spacing 2^-24 */
        double e = fabs((double)back[i] - x[i]) / fmax(fabs(x[i]), ldexp(1.0, -14));
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst <= 1.0 / 2048, "fp16 round trip error %g > 2^-11", worst);
    kiln_ffree(back);

    /* scaling: exact products, flag only for non-finite results */
    for (size_t i = 0; i < n; i++)
        x[i] *= 0.25f;
    OK(kiln_cu_scale_check(C, dX, n, 0.25f, dFound));
    same("scale by 1/4", dX, x, n);
    OK(kiln_cu_download(C, &found, dFound, sizeof found));
    CHECK_MSG(found == 0, "finite gradients flagged (%d)", found);
    OK(kiln_cu_scale_check(C, dX, n, 3e38f, dFound)); /* overflows to inf */
    OK(kiln_cu_download(C, &found, dFound, sizeof found));
    CHECK_MSG(found == 1, "overflow not flagged (%d)", found);
    kiln_ffree(x);
    free(h16);
}

static void check_async_upload(size_t n)
{
    float *pin = NULL, *dst = dcopy(NULL, n), *out = dcopy(NULL, n);
    printf("pinned async upload n=%zu\n", n);
    OK(kiln_cu_host_alloc(C, n * sizeof(float), (void **)&pin));
    if (!pin) return;
    for (size_t i = 0; i < n; i++)
        pin[i] = (float)i * 0.5f + 1.0f;
    OK(kiln_cu_upload_async(C, dst, pin, n * sizeof(float)));
    /* queued after the upload on the compute stream: must see the data. Into
     * another buffer (all > 0: relu is the identity), so that a relu run
     * before the copy leaves zeros in `out` instead of being overwritten. */
    OK(kiln_cu_relu_fwd(C, dst, out, n));
    OK(kiln_cu_copy_wait(C));
    float *got = hcopy(dst, n);
    CHECK(bits_equal(got, pin, n));
    kiln_ffree(got);
    got = hcopy(out, n);
    CHECK_MSG(bits_equal(got, pin, n), "relu queued after the upload did not see its data");
    kiln_ffree(got);
    kiln_cu_host_free(C, pin);
}

/* The runtime table's mixed-precision ops (lowp.c) in format t against
 * the CPU reference table in the same precision. */
static void check_lp(kiln_cu_dtype t, int lowp)
{
    const kiln__backend *be = &kiln__backend_cpu_ref;
    kiln__dev *cd = NULL;
    char err[256];
    const char *name = t == KILN_CU_BF16 ? "bf16" : "fp16";
    printf("mixed precision %s (the runtime table's ops vs the CPU table's)\n", name);
    if (be->open(0, &cd, err, sizeof err) || be->set_precision(cd, lowp)) {
        CHECK_MSG(0, "cpu-ref table: %s", cd ? be->error(cd) : err);
        be->close(cd);
        return;
    }
    OK(kiln_cu_set_lowp(C, 1, t));
    /* rounding: edge values and random ones of every magnitude */
    {
        enum { NR = 4096 };
        float *v = rand_buf(&R, NR, -1, 1), *want = kiln_falloc(NR);
        static const float edge[] = {65504.0f,        65519.0f, 65520.0f, -70000.0f,
                                     0x1p-25f,        0x3p-25f, 0x1p-14f, 1.0f + 0x1p-8f,
                                     1.0f + 0x1p-11f, 3.0e38f,  -0.0f,    INFINITY};
        for (int i = 0; i < NR; i++)
            v[i] = ldexpf(v[i], (i % 80) - 40);
        memcpy(v, edge, sizeof edge);
        float *dV = dcopy(v, NR), *dO = dcopy(NULL, NR);
        kiln__round_lowp(lowp, v, want, NR);
        OK(kiln_cu_round_lowp(C, t, dO, dV, NR));
        same("round kernel vs kiln__round_lowp", dO, want, NR);
        kiln_ffree(v);
        kiln_ffree(want);
    }
    /* dense */
    {
        int B = 48, in = 96, out = 40;
        size_t nx = (size_t)B * in, nw = (size_t)in * out, ny = (size_t)B * out;
        float *x = rand_buf(&R, nx, -1, 1), *w = rand_buf(&R, nw, -0.5, 0.5);
        float *b = rand_buf(&R, out, -0.5, 0.5), *y = kiln_falloc(ny);
        float *dy = rand_buf(&R, ny, -1, 1), *dyc = copy_buf(dy, ny);
        float *dx = kiln_falloc(nx), *dw = kiln_falloc(nw), *db = kiln_falloc(out);
        float *dX = dcopy(x, nx), *dW = dcopy(w, nw), *dB = dcopy(b, out), *dY = dcopy(NULL, ny);
        float *dDY = dcopy(dy, ny), *dDX = dcopy(NULL, nx), *dDW = dcopy(NULL, nw);
        float *dDB = dcopy(NULL, out);
        CHECK(be->dense_fwd(cd, x, w, b, y, B, in, out, 1) == 0);
        OK(kiln_cu_dense_fwd_lp(C, dX, dW, dB, dY, B, in, out, 1));
        near("dense fwd (GemmEx)", dY, y, ny, 1e-4);
        CHECK(be->dense_bwd(cd, x, w, y, dyc, dx, dw, db, B, in, out, 1, 0.0f) == 0);
        OK(kiln_cu_dense_bwd_lp(C, dX, dW, dY, dDY, dDX, dDW, dDB, B, in, out, 1, 0.0f));
        same("dense relu mask of dy", dDY, dyc, ny);
        near("dense bwd dx", dDX, dx, nx, 1e-4);
        near("dense bwd dw", dDW, dw, nw, 1e-4);
        near("dense bwd db (fp32 dy)", dDB, db, out, 1e-4);
        float *f[] = {x, w, b, y, dy, dyc, dx, dw, db};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            kiln_ffree(f[i]);
    }
    /* convolution: a 3x3 with ReLU and ResNet's 1x1 stride-2 projection */
    for (int k = 0; k < 2; k++) {
        kiln_conv_shape s;
        if (k == 0)
            kiln_conv_shape_init(&s, 4, 12, 12, 8, 16, 3, 3, 1, 1);
        else
            kiln_conv_shape_init(&s, 2, 14, 14, 16, 32, 1, 1, 2, 0);
        int relu = k == 0;
        size_t nx = (size_t)s.n * s.h * s.w * s.c, nw = (size_t)s.kh * s.kw * s.c * s.oc;
        size_t ny = (size_t)s.n * s.oh * s.ow * s.oc;
        float *x = rand_buf(&R, nx, -1, 1), *w = rand_buf(&R, nw, -0.5, 0.5);
        float *b = rand_buf(&R, s.oc, -0.5, 0.5), *y = kiln_falloc(ny);
        float *dy = rand_buf(&R, ny, -1, 1), *dyc = copy_buf(dy, ny);
        float *dx = kiln_falloc(nx), *dw = kiln_falloc(nw), *db = kiln_falloc(s.oc);
        float *dX = dcopy(x, nx), *dW = dcopy(w, nw), *dB = dcopy(b, s.oc), *dY = dcopy(NULL, ny);
        float *dDY = dcopy(dy, ny), *dDX = dcopy(NULL, nx), *dDW = dcopy(NULL, nw);
        float *dDB = dcopy(NULL, s.oc);
        CHECK(be->conv_fwd(cd, &s, x, w, b, y, relu) == 0);
        OK(kiln_cu_conv2d_fwd_lp(C, &s, dX, dW, dB, dY, relu));
        near(k ? "conv 1x1/2 fwd" : "conv 3x3 fwd", dY, y, ny, 1e-2);
        CHECK(be->conv_bwd(cd, &s, x, w, y, dyc, dx, dw, db, relu, 0.0f) == 0);
        OK(kiln_cu_conv2d_bwd_lp(C, &s, dX, dW, dY, dDY, dDX, dDW, dDB, relu, 0.0f));
        same("conv relu mask of dy", dDY, dyc, ny);
        near("conv bwd dx", dDX, dx, nx, 1e-2);
        near("conv bwd dw", dDW, dw, nw, 1e-2);
        near("conv bwd db (fp32 dy)", dDB, db, s.oc, 1e-4);
        float *f[] = {x, w, b, y, dy, dyc, dx, dw, db};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            kiln_ffree(f[i]);
    }
    OK(kiln_cu_set_lowp(C, 0, t)); /* fp32, TF32 off again */
    be->close(cd);
}

int main(void)
{
    char err[512];
    int n = 0;
    if (kiln_cuda_device_count(&n, err, sizeof err) != KILN_OK) {
        printf("SKIP [gpu]: no CUDA device: %s\n", err);
        return 77;
    }
    if (kiln_cu_ctx_create(0, &C, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "context on /gpu:0: %s\n", err);
        return 1;
    }
    kiln_rng_seed(&R, 6);
    /* KILN_TEST_LIGHT=1 (under compute-sanitizer, which makes cuDNN's
     * kernels very slow): the ResNet-sized shapes are left out */
    const char *lt = getenv("KILN_TEST_LIGHT");
    int light = lt && strcmp(lt, "1") == 0;
    if (light) printf("KILN_TEST_LIGHT=1: the ResNet-sized shapes are left out\n");
    {
        kiln_cuda_ctx *bad = NULL;
        CHECK(kiln_cu_ctx_create(n, &bad, err, sizeof err) == KILN_EINVAL && bad == NULL);
    }
    check_dense(32, 100, 70, 0);
    check_dense(17, 64, 10, 1);
    check_dense_lowp(KILN_CU_BF16, 64, 128, 96);
    check_dense_lowp(KILN_CU_FP16, 64, 128, 96);
    /* the cublaslt-fc variant: the same on cuBLASLt, bias and ReLU in its
     * epilogue (ResNet-50's classifier shape too) */
    OK(kiln_cu_set_option(C, 3, 1));
    printf("cuBLASLt:\n");
    check_dense(32, 100, 70, 0);
    check_dense(17, 64, 10, 1);
    check_dense(256, 2048, 1000, 0);
    check_dense_lowp(KILN_CU_BF16, 64, 128, 96);
    check_dense_lowp(KILN_CU_FP16, 64, 128, 96);
    OK(kiln_cu_set_option(C, 3, 0));
    check_conv(4, 12, 12, 5, 8, 3, 1, 1, 1);   /* 3x3 same padding + ReLU */
    check_conv(2, 14, 14, 16, 32, 1, 2, 0, 0); /* ResNet's 1x1 stride-2 projection */
    check_conv(2, 32, 32, 3, 16, 7, 2, 3, 1);  /* ResNet's 7x7 stride-2 stem */
    check_conv(3, 9, 7, 4, 6, 3, 2, 1, 0);     /* odd sizes */
    /* ResNet-50 shapes at a real batch: the algorithms timed for these must
     * stay fp32 (TF32 would miss the tolerance by 10x) and accurate (FFT) */
    if (!light) {
        check_conv(8, 56, 56, 64, 64, 3, 1, 1, 0);
        check_conv(8, 28, 28, 256, 512, 1, 2, 0, 0);
    }
    /* the nchw variant (issue 45): the same convolutions on NCHW copies,
     * the same tolerances (a bwd with dx NULL and beta included) */
    OK(kiln_cu_set_option(C, 2, 1));
    printf("NCHW descriptors:\n");
    check_conv(4, 12, 12, 5, 8, 3, 1, 1, 1);
    check_conv(2, 14, 14, 16, 32, 1, 2, 0, 0);
    check_conv(2, 32, 32, 3, 16, 7, 2, 3, 1);
    check_conv(3, 9, 7, 4, 6, 3, 2, 1, 0);
    if (!light) check_conv(8, 28, 28, 256, 512, 1, 2, 0, 0);
    OK(kiln_cu_set_option(C, 2, 0));
    /* refused with mixed precision on (it rounds NHWC copies), and an
     * unknown option refused */
    OK(kiln_cu_set_lowp(C, 1, KILN_CU_BF16));
    CHECK(kiln_cu_set_option(C, 2, 1) == KILN_EINVAL);
    CHECK_MSG(strstr(kiln_cu_error(C), "NCHW") != NULL, "%s", kiln_cu_error(C));
    OK(kiln_cu_set_lowp(C, 0, KILN_CU_BF16));
    CHECK(kiln_cu_set_option(C, 99, 1) == KILN_EINVAL);
    check_pool(3, 8, 8, 5, 2, 2, 0);
    check_pool(2, 9, 9, 4, 3, 2, 0); /* overlapping windows */
    check_pool(3, 8, 8, 5, 2, 2, 1);
    check_pool(2, 9, 9, 4, 3, 2, 1);
    if (!light) check_pool(2, 114, 114, 8, 3, 2, 1); /* ResNet's stem pool (padded input) */
    check_bn_both(4 * 8 * 8, 16);
    check_bn_both(7, 3);
    check_bn_both(100003, 5);                   /* many row blocks: the fixed-order partial sums */
    if (!light) check_bn_both(8 * 56 * 56, 64); /* a ResNet-50 stage-1 shape */
    check_bn_both(2 * 7 * 7, 2048);             /* and a stage-4 one: many channels, few rows */
    check_bn_add_relu(4 * 8 * 8, 16);
    check_bn_add_relu(2 * 7 * 7, 2048);
    check_eltwise(100003);
    check_xent(37, 10);
    check_xent(8, 1000);
    check_optim(100003);
    check_step_helpers(100003);
    check_casts_and_scaling(50021);
    check_async_upload(1 << 20);
    check_lp(KILN_CU_BF16, KILN__LOWP_BF16);
    check_lp(KILN_CU_FP16, KILN__LOWP_FP16);
    {
        kiln_conv_shape s = {0}; /* never initialised: refused, not run */
        CHECK(kiln_cu_conv2d_fwd(C, &s, NULL, NULL, NULL, NULL, 0) == KILN_EINVAL);
    }
    CHECK_MSG(kiln_cu_sync(C) == KILN_OK, "sync: %s", kiln_cu_error(C));
    {
        /* a failed CUDA call names the device and the call, and is reported
         * by that call only: the runtime also leaves it in the thread's
         * last-error slot, which the next kernel launch must not read as its
         * own failure (an H100 run failed the first dense op with the refused
         * /gpu:N context's "invalid device ordinal") */
        void *huge = NULL;
        float h[64], *y, *got;
        for (int i = 0; i < 64; i++)
            h[i] = (float)(i % 2 ? i : -i);
        CHECK(kiln_cu_alloc(C, (size_t)1 << 62, &huge) != KILN_OK && huge == NULL);
        CHECK_MSG(strncmp(kiln_cu_error(C), "/gpu:0: cudaMalloc: ", 20) == 0,
                  "message '%s' does not name the device and the call", kiln_cu_error(C));
        y = dcopy(h, 64);
        OK(kiln_cu_bias_act(C, y, NULL, 8, 8, 1));
        CHECK_MSG(kiln_cu_sync(C) == KILN_OK, "sync after a failed cudaMalloc: %s",
                  kiln_cu_error(C));
        got = hcopy(y, 64);
        for (int i = 0; i < 64; i++)
            CHECK(got[i] == (h[i] < 0 ? 0.0f : h[i]));
        kiln_ffree(got);
    }
    for (int i = 0; i < ndevs; i++)
        kiln_cu_free(C, devs[i]);
    kiln_cu_ctx_destroy(C);
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
