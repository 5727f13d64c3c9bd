/* ops/bn.c - batch normalisation over the rows of x[M, C] (NHWC: M = N*H*W).
 * Reference: two passes in double. Fast: float accumulation with C innermost
 * (contiguous, vectorised), rows in order, so the result is deterministic;
 * it differs from the reference by float rounding only (see test_ops). */
#include "ops/ops.h"

#include "kiln/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kiln_bn_fwd_train_ref(const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *invstd, float *run_mean, float *run_var,
                           float momentum, float eps, int M, int C)
{
    for (int c = 0; c < C; c++) {
        double s = 0.0, v = 0.0;
        for (int i = 0; i < M; i++)
            s += x[(size_t)i * C + c];
        double mu = s / M;
        for (int i = 0; i < M; i++) {
            double d = x[(size_t)i * C + c] - mu;
            v += d * d;
        }
        double var = v / M, is = 1.0 / sqrt(var + eps);
        mean[c] = (float)mu;
        invstd[c] = (float)is;
        for (int i = 0; i < M; i++)
            y[(size_t)i * C + c] = (float)((x[(size_t)i * C + c] - mu) * is * gamma[c] + beta[c]);
        if (run_mean) {
            double unb = M > 1 ? v / (M - 1) : var;
            run_mean[c] = (float)((1.0 - momentum) * run_mean[c] + momentum * mu);
            run_var[c] = (float)((1.0 - momentum) * run_var[c] + momentum * unb);
        }
    }
}

void kiln_bn_fwd_infer(const float *x, const float *gamma, const float *beta, const float *run_mean,
                       const float *run_var, float eps, float *y, int M, int C)
{
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float is = 1.0f / sqrtf(run_var[c] + eps);
            y[(size_t)i * C + c] = (x[(size_t)i * C + c] - run_mean[c]) * is * gamma[c] + beta[c];
        }
}

void kiln_bn_bwd_ref(const float *x, const float *gamma, const float *mean, const float *invstd,
                     const float *dy, float *dx, float *dgamma, float *dbeta, int M, int C)
{
    for (int c = 0; c < C; c++) {
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < M; i++) {
            double xh = (x[(size_t)i * C + c] - (double)mean[c]) * invstd[c];
            sdy += dy[(size_t)i * C + c];
            sdyx += dy[(size_t)i * C + c] * xh;
        }
        dbeta[c] = (float)sdy;
        dgamma[c] = (float)sdyx;
        for (int i = 0; i < M; i++) {
            double xh = (x[(size_t)i * C + c] - (double)mean[c]) * invstd[c];
            dx[(size_t)i * C + c] =
                (float)(gamma[c] * invstd[c] / M * (M * dy[(size_t)i * C + c] - sdy - xh * sdyx));
        }
    }
}

/* Fast paths keep per-channel accumulators in a small stack/heap array and
 * sweep rows once per pass with C innermost. */
void kiln_bn_fwd_train(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                       float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                       int M, int C)
{
    float *acc = calloc((size_t)C, sizeof(float));
    if (!acc) { /* the reference needs no memory */
        kiln_bn_fwd_train_ref(x, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, M,
                              C);
        return;
    }
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++)
            acc[c] += x[(size_t)i * C + c];
    for (int c = 0; c < C; c++) {
        mean[c] = acc[c] / (float)M;
        acc[c] = 0.0f;
    }
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float d = x[(size_t)i * C + c] - mean[c];
            acc[c] += d * d;
        }
    for (int c = 0; c < C; c++) {
        float var = acc[c] / (float)M;
        invstd[c] = 1.0f / sqrtf(var + eps);
        if (run_mean) {
            float unb = M > 1 ? acc[c] / (float)(M - 1) : var;
            run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean[c];
            run_var[c] = (1.0f - momentum) * run_var[c] + momentum * unb;
        }
        acc[c] = gamma[c] * invstd[c]; /* scale */
    }
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++)
            y[(size_t)i * C + c] = (x[(size_t)i * C + c] - mean[c]) * acc[c] + beta[c];
    free(acc);
}

void kiln_bn_bwd(const float *x, const float *gamma, const float *mean, const float *invstd,
                 const float *dy, float *dx, float *dgamma, float *dbeta, int M, int C)
{
    memset(dgamma, 0, sizeof(float) * C);
    memset(dbeta, 0, sizeof(float) * C);
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float g = dy[(size_t)i * C + c];
            dbeta[c] += g;
            dgamma[c] += g * (x[(size_t)i * C + c] - mean[c]) * invstd[c];
        }
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float xh = (x[(size_t)i * C + c] - mean[c]) * invstd[c];
            dx[(size_t)i * C + c] = gamma[c] * invstd[c] / (float)M *
                                    ((float)M * dy[(size_t)i * C + c] - dbeta[c] - xh * dgamma[c]);
        }
}
