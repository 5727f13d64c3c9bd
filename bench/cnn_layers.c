/* bench/cnn_layers.c - where kiln-train's CNN step spends its time.
 *
 * build/bin/kiln-cnn-layers [ROUNDS=5] [ITERS=20]
 *
 * Runs the ops of one training step of `kiln-train mnist --model=cnn` (batch
 * 128; conv 5x5 1->32 + ReLU, maxpool 2, conv 5x5 32->64 + ReLU, maxpool 2,
 * dense 3136->1024 + ReLU, dense 1024->10, softmax cross-entropy, SGD with
 * momentum fused as in nn/model.c) on random data with all cores, timing each
 * call. The convolutions run through each path in turn (im2col + GEMM, then
 * oneDNN's direct convolutions where ops/conv_dnnl.c takes them), alternating
 * per round so that load on a shared machine hits both alike; per op, the
 * median over ITERS steps of a round, best round. Prints one table of
 * milliseconds per step and the share of the step, and GFLOP/s for the
 * convolutions. */
#include "core/pool.h"
#include "kiln/tensor.h"
#include "ops/conv_dnnl.h"
#include "ops/ops.h"
#include "optim/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { C1F, P1F, C2F, P2F, D1F, D2F, XENT, D2B, D1B, P2B, C2B, P1B, C1B, SGD, NOPS };
static const char *NAMES[NOPS] = {"conv1 fwd (+bias+relu)",
                                  "pool1 fwd",
                                  "conv2 fwd (+bias+relu)",
                                  "pool2 fwd",
                                  "dense1 fwd",
                                  "dense2 fwd",
                                  "softmax xent",
                                  "dense2 bwd",
                                  "dense1 bwd+sgd (fused)",
                                  "pool2 bwd",
                                  "conv2 bwd (dw, db, dx)",
                                  "pool1 bwd",
                                  "conv1 bwd (dw, db)",
                                  "sgd step (conv, dense2)"};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *buf(size_t n, unsigned *seed)
{
    float *p = kiln_falloc(n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand_r(seed) / RAND_MAX * 0.2f - 0.1f;
    return p;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5, iters = argc > 2 ? atoi(argv[2]) : 20;
    int B = 128, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    kiln_set_threads(threads);
    unsigned seed = 1;
    kiln_conv_shape c1, c2;
    kiln_pool_shape p1, p2;
    kiln_conv_shape_init(&c1, B, 28, 28, 1, 32, 5, 5, 1, 2);
    kiln_conv_shape_init(&c2, B, 14, 14, 32, 64, 5, 5, 1, 2);
    kiln_pool_shape_init(&p1, B, 28, 28, 32, 2, 2);
    kiln_pool_shape_init(&p2, B, 14, 14, 64, 2, 2);
    size_t nx = (size_t)B * 784, ny1 = (size_t)B * 784 * 32, nq1 = ny1 / 4,
           ny2 = (size_t)B * 196 * 64, nq2 = ny2 / 4;
    size_t nw1 = 25 * 32, nw2 = 25 * 32 * 64, nd1 = 3136 * 1024, nd2 = 1024 * 10;
    float *x = buf(nx, &seed), *y1 = buf(ny1, &seed), *q1 = buf(nq1, &seed), *y2 = buf(ny2, &seed),
          *q2 = buf(nq2, &seed), *h = buf((size_t)B * 1024, &seed), *z = buf((size_t)B * 10, &seed);
    float *dy1 = buf(ny1, &seed), *dq1 = buf(nq1, &seed), *dy2 = buf(ny2, &seed),
          *dq2 = buf(nq2, &seed), *dh = buf((size_t)B * 1024, &seed),
          *dz = buf((size_t)B * 10, &seed);
    float *w1 = buf(nw1, &seed), *b1 = buf(32, &seed), *w2 = buf(nw2, &seed), *b2 = buf(64, &seed),
          *wd1 = buf(nd1, &seed), *bd1 = buf(1024, &seed), *wd2 = buf(nd2, &seed),
          *bd2 = buf(10, &seed);
    float *gw1 = buf(nw1, &seed), *gb1 = buf(32, &seed), *gw2 = buf(nw2, &seed),
          *gb2 = buf(64, &seed), *gd1 = buf(nd1, &seed), *gbd1 = buf(1024, &seed),
          *gd2 = buf(nd2, &seed), *gbd2 = buf(10, &seed);
    int32_t *i1 = malloc(nq1 * sizeof(int32_t)), *i2 = malloc(nq2 * sizeof(int32_t));
    uint8_t lab[128];
    for (int i = 0; i < B; i++)
        lab[i] = (uint8_t)(i % 10);
    /* SGD on the parameters whose step is not fused into their backward GEMM
     * (nn/model.c: conv and dense2 accumulate into the momentum buffer,
     * fused = 1; dense1 steps inside its backward, fused = 2) */
    kiln_opt_buf ob[] = {
        {.p = w1, .g = gw1, .s1 = gw1, .n = nw1, .fused = 1},
        {.p = b1, .g = gb1, .s1 = gb1, .n = 32, .fused = 1},
        {.p = w2, .g = gw2, .s1 = gw2, .n = nw2, .fused = 1},
        {.p = b2, .g = gb2, .s1 = gb2, .n = 64, .fused = 1},
        {.p = wd2, .g = gd2, .s1 = gd2, .n = nd2, .fused = 1},
        {.p = bd2, .g = gbd2, .s1 = gbd2, .n = 10, .fused = 1},
    };
    double best[2][NOPS];
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < NOPS; o++)
            best[p][o] = 1e30;
    double *t = malloc(sizeof(double) * iters * NOPS);
    for (int r = 0; r < rounds * 2; r++) {
        int path = r % 2;
        kiln__conv_dnnl_set_policy(path ? 1 : 0);
        for (int it = -2; it < iters; it++) { /* two warm-up steps */
            double t0 = now(), tt[NOPS + 1];
            int k = 0;
#define T(op, call)                                                                                \
    do {                                                                                           \
        call;                                                                                      \
        tt[op] = now();                                                                            \
        k++;                                                                                       \
    } while (0)
            T(C1F, kiln_conv2d_fwd(&c1, x, w1, b1, y1, 1));
            T(P1F, kiln_maxpool_fwd(&p1, y1, q1, i1));
            T(C2F, kiln_conv2d_fwd(&c2, q1, w2, b2, y2, 1));
            T(P2F, kiln_maxpool_fwd(&p2, y2, q2, i2));
            T(D1F, kiln_dense_fwd(q2, wd1, bd1, h, B, 3136, 1024, 1));
            T(D2F, kiln_dense_fwd(h, wd2, bd2, z, B, 1024, 10, 0));
            T(XENT, kiln_xent(z, lab, B, 10, dz, NULL));
            T(D2B, kiln_dense_bwd_acc(h, wd2, z, dz, dh, gd2, gbd2, B, 1024, 10, 0, 0.9f));
            T(D1B, kiln_dense_bwd_sgd(q2, wd1, bd1, h, dh, dq2, gd1, gbd1, B, 3136, 1024, 1, 0.9f,
                                      1e-6f));
            T(P2B, kiln_maxpool_bwd(&p2, dq2, i2, dy2));
            T(C2B, kiln_conv2d_bwd_acc(&c2, q1, w2, y2, dy2, dq1, gw2, gb2, 1, 0.9f));
            T(P1B, kiln_maxpool_bwd(&p1, dq1, i1, dy1));
            T(C1B, kiln_conv2d_bwd_acc(&c1, x, w1, y1, dy1, NULL, gw1, gb1, 1, 0.9f));
            T(SGD, kiln_sgd_update(ob, 6, 1e-6f, 0.9f));
#undef T
            (void)k;
            if (it < 0) continue;
            double prev = t0;
            for (int o = 0; o < NOPS; o++) {
                t[(size_t)o * iters + it] = tt[o] - prev;
                prev = tt[o];
            }
        }
        for (int o = 0; o < NOPS; o++) {
            qsort(t + (size_t)o * iters, iters, sizeof(double), cmp);
            double med = t[(size_t)o * iters + iters / 2];
            if (med < best[path][o]) best[path][o] = med;
        }
    }
    double flops[NOPS] = {0};
    flops[C1F] = 2.0 * B * 784 * 32 * 25;
    flops[C1B] = flops[C1F]; /* dw only */
    flops[C2F] = 2.0 * B * 196 * 64 * 800;
    flops[C2B] = 2 * flops[C2F];
    double tot[2] = {0, 0};
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < NOPS; o++)
            tot[p] += best[p][o];
    printf("CNN step ops, batch %d, %d threads, median of %d steps, best of %d rounds per path\n",
           B, threads, iters, rounds);
    printf("%-26s %10s %6s %8s | %10s %6s %8s\n", "op", "im2col ms", "share", "GFLOP/s",
           "oneDNN ms", "share", "GFLOP/s");
    for (int o = 0; o < NOPS; o++) {
        printf("%-26s", NAMES[o]);
        for (int p = 0; p < 2; p++) {
            printf(" %10.3f %5.1f%%", best[p][o] * 1e3, 100 * best[p][o] / tot[p]);
            if (flops[o] > 0)
                printf(" %8.0f", flops[o] / best[p][o] / 1e9);
            else
                printf(" %8s", "");
            if (!p) printf(" |");
        }
        printf("\n");
    }
    printf("%-26s %10.3f %6s %8s | %10.3f\n", "step (sum)", tot[0] * 1e3, "", "", tot[1] * 1e3);
    printf("RESULT step im2col %.3f ms, oneDNN %.3f ms: %.2fx\n", tot[0] * 1e3, tot[1] * 1e3,
           tot[0] / tot[1]);
    return 0;
}
