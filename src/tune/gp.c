/* gp.c - the model-based search: Gaussian-process regression with expected
 * improvement (as Vizier's default and Spearmint do), over the trials with a
 * metric, in each parameter's unit space (categorical parameters by their
 * index's place in [0, 1]).
 *
 * Model: objectives turned into a loss (negated when the goal is MAXIMIZE),
 * standardised; a Matern-5/2 kernel of one length scale with a noise term,
 * both chosen by the largest marginal likelihood over a small grid; the
 * Cholesky factor written out here (the matrices are at most GP_MAX_POINTS
 * square: the best trials when there are more).
 * Acquisition: expected improvement over the best loss, maximised over
 * random points of the unit cube and perturbations of the best trials.
 *
 * Conditional parameters: a trial that lacks a parameter (its value NAN)
 * sits at GP_ABSENT, the low end of that parameter's unit interval, in the
 * kernel, as if the parameter had a fixed default there; trials that both
 * lack it do not differ in it. A candidate is mapped to the trial it would
 * be (values, then kiln__tune_prune) and its absent parameters put at
 * GP_ABSENT too before its improvement is weighed, so that candidates and
 * trials are compared in one embedding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune/tune_int.h"

enum { GP_STARTUP_MIN = 5, GP_MAX_POINTS = 200, GP_RANDOM = 1000, GP_LOCAL = 400 };
#define GP_ABSENT 0.0

static double matern52(const double *a, const double *b, size_t d, double ls)
{
    double r2 = 0;
    for (size_t i = 0; i < d; i++)
        r2 += (a[i] - b[i]) * (a[i] - b[i]);
    double r = sqrt(5.0 * r2) / ls;
    return (1 + r + r * r / 3) * exp(-r);
}

/* The plain Cholesky factorisation (Cholesky-Crout, column by column): at
 * most GP_MAX_POINTS square, a few milliseconds, so no BLAS/LAPACK is linked
 * for it. test_tune's test_cholesky compares it and the two solves with
 * Gaussian elimination. */
bool kiln__tune_cholesky(double *A, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        double s = A[j * n + j];
        for (size_t k = 0; k < j; k++)
            s -= A[j * n + k] * A[j * n + k];
        if (s <= 0) return false;
        double l = sqrt(s);
        A[j * n + j] = l;
        for (size_t i = j + 1; i < n; i++) {
            double t = A[i * n + j];
            for (size_t k = 0; k < j; k++)
                t -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = t / l;
        }
    }
    return true;
}

void kiln__tune_lsolve(const double *L, size_t n, double *b)
{
    for (size_t i = 0; i < n; i++) {
        double t = b[i];
        for (size_t k = 0; k < i; k++)
            t -= L[i * n + k] * b[k];
        b[i] = t / L[i * n + i];
    }
}

void kiln__tune_ltsolve(const double *L, size_t n, double *b)
{
    for (size_t i = n; i-- > 0;) {
        double t = b[i];
        for (size_t k = i + 1; k < n; k++)
            t -= L[k * n + i] * b[k];
        b[i] = t / L[i * n + i];
    }
}

typedef struct gp {
    size_t n, d;
    const double *X; /* n x d */
    double *L;       /* n x n */
    double *alpha;   /* K^-1 y */
    double ls, noise;
} gp;

/* Fits L and alpha for (ls, noise); returns the log marginal likelihood, or
 * -inf when the matrix is not positive definite. */
static double fit(gp *g, const double *y, double ls, double noise)
{
    size_t n = g->n;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k <= i; k++) {
            double v = matern52(g->X + i * g->d, g->X + k * g->d, g->d, ls);
            g->L[i * n + k] = g->L[k * n + i] = v + (i == k ? noise + 1e-8 : 0);
        }
    if (!kiln__tune_cholesky(g->L, n)) return -INFINITY;
    memcpy(g->alpha, y, n * sizeof *y);
    kiln__tune_lsolve(g->L, n, g->alpha);
    double quad = 0, logdet = 0;
    for (size_t i = 0; i < n; i++) {
        quad += g->alpha[i] * g->alpha[i];
        logdet += log(g->L[i * n + i]);
    }
    kiln__tune_ltsolve(g->L, n, g->alpha);
    g->ls = ls;
    g->noise = noise;
    return -0.5 * quad - logdet;
}

/* Expected improvement (of a loss below `best`) at x; `tmp` has n places. */
static double ei(const gp *g, const double *x, double best, double *tmp)
{
    size_t n = g->n;
    double mu = 0;
    for (size_t i = 0; i < n; i++) {
        tmp[i] = matern52(x, g->X + i * g->d, g->d, g->ls);
        mu += tmp[i] * g->alpha[i];
    }
    kiln__tune_lsolve(g->L, n, tmp);
    double var = 1.0 + g->noise;
    for (size_t i = 0; i < n; i++)
        var -= tmp[i] * tmp[i];
    double sd = sqrt(var > 1e-12 ? var : 1e-12);
    double z = (best - mu) / sd;
    return sd * (z * 0.5 * erfc(-z / M_SQRT2) + exp(-0.5 * z * z) / sqrt(2 * M_PI));
}

typedef struct pt {
    double loss;
    const kiln_trial *t;
} pt;

static int by_loss(const void *a, const void *b)
{
    double x = ((const pt *)a)->loss, y = ((const pt *)b)->loss;
    return (x > y) - (x < y);
}

static double normal(uint64_t *rng)
{
    double a = kiln__tune_uniform(rng), b = kiln__tune_uniform(rng);
    return sqrt(-2 * log(a > 0 ? a : 1e-300)) * cos(2 * M_PI * b);
}

bool kiln__tune_gp(const kiln_hyperparameter_spec *hp, const kiln_trial *const *done, size_t n,
                   bool maximize, uint64_t *rng, double *out)
{
    size_t d = hp->n_params, startup = d + 2 > GP_STARTUP_MIN ? d + 2 : GP_STARTUP_MIN;
    bool ok = false;
    if (n < startup || d == 0) return false;
    pt *p = calloc(n, sizeof *p);
    size_t m = n < GP_MAX_POINTS ? n : GP_MAX_POINTS;
    double *X = calloc(m * d, sizeof *X), *y = calloc(m, sizeof *y);
    double *L = calloc(m * m, sizeof *L), *alpha = calloc(m, sizeof *alpha);
    double *tmp = calloc(m, sizeof *tmp), *cand = calloc(d, sizeof *cand);
    double *best = calloc(d, sizeof *best), *vals = calloc(d, sizeof *vals);
    bool cond = false;
    for (size_t k = 0; k < d; k++)
        cond = cond || kiln__tune_parent(hp, k) >= 0;
    if (!p || !X || !y || !L || !alpha || !tmp || !cand || !best || !vals) goto out;
    for (size_t i = 0; i < n; i++)
        p[i] = (pt){maximize ? -done[i]->objective : done[i]->objective, done[i]};
    qsort(p, n, sizeof *p, by_loss); /* the best m when there are more */
    double mean = 0, var = 0;
    for (size_t i = 0; i < m; i++)
        mean += p[i].loss / (double)m;
    for (size_t i = 0; i < m; i++)
        var += (p[i].loss - mean) * (p[i].loss - mean) / (double)m;
    double sdv = var > 0 ? sqrt(var) : 1;
    for (size_t i = 0; i < m; i++) {
        y[i] = (p[i].loss - mean) / sdv;
        for (size_t k = 0; k < d; k++)
            X[i * d + k] = isnan(p[i].t->values[k])
                               ? GP_ABSENT
                               : kiln__tune_unit(&hp->params[k], p[i].t->values[k]);
    }
    /* the length scale and noise with the largest marginal likelihood */
    static const double scales[] = {0.05, 0.1, 0.2, 0.35, 0.6, 1.0, 1.7};
    static const double noises[] = {1e-6, 1e-3, 3e-2};
    gp g = {m, d, X, L, alpha, 0, 0};
    double best_ll = -INFINITY, bls = 0.35, bnz = 1e-3;
    for (size_t a = 0; a < sizeof scales / sizeof *scales; a++)
        for (size_t b = 0; b < sizeof noises / sizeof *noises; b++) {
            double ll = fit(&g, y, scales[a] * sqrt((double)d), noises[b]);
            if (ll > best_ll) best_ll = ll, bls = scales[a] * sqrt((double)d), bnz = noises[b];
        }
    if (fit(&g, y, bls, bnz) == -INFINITY) goto out;
    double ymin = y[0], best_ei = -1;
    for (int c = 0; c < GP_RANDOM + GP_LOCAL; c++) {
        if (c < GP_RANDOM) {
            for (size_t k = 0; k < d; k++)
                cand[k] = kiln__tune_uniform(rng);
        } else { /* around one of the best five, at a few scales */
            size_t from = (size_t)(kiln__tune_uniform(rng) * (double)(m < 5 ? m : 5));
            double step = 0.2 * pow(0.3, (double)(c % 3));
            for (size_t k = 0; k < d; k++) {
                double u = X[from * d + k] + step * normal(rng);
                cand[k] = u < 0 ? 0 : u > 1 ? 1 : u;
            }
        }
        if (cond) { /* absent parameters where the trials' are */
            for (size_t k = 0; k < d; k++)
                vals[k] = kiln__tune_value(&hp->params[k], cand[k]);
            kiln__tune_prune(hp, vals);
            for (size_t k = 0; k < d; k++)
                if (isnan(vals[k])) cand[k] = GP_ABSENT;
        }
        double e = ei(&g, cand, ymin, tmp);
        if (e > best_ei) {
            best_ei = e;
            memcpy(best, cand, d * sizeof *best);
        }
    }
    for (size_t k = 0; k < d; k++)
        out[k] = kiln__tune_value(&hp->params[k], best[k]);
    kiln__tune_prune(hp, out);
    ok = true;
out:
    free(p);
    free(X);
    free(y);
    free(L);
    free(alpha);
    free(tmp);
    free(cand);
    free(best);
    free(vals);
    return ok;
}
