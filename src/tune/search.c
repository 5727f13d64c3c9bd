/* search.c - the scalings and the algorithms that choose a trial's values.
 *
 * Every parameter is searched in a unit interval u in [0, 1] that its scale
 * maps onto its values; categorical parameters use their index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune/tune_int.h"

/* ---------- scalings ---------- */

static bool is(const char *s, const char *want)
{
    return s && strcmp(s, want) == 0;
}

double kiln_tune_from_unit(const char *scale, double min, double max, double u)
{
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    if (is(scale, "UNIT_LOG_SCALE") && min > 0) return exp(log(min) + u * (log(max) - log(min)));
    if (is(scale, "UNIT_REVERSE_LOG_SCALE") && min > 0) /* the log scale, mirrored */
        return max + min - exp(log(min) + (1 - u) * (log(max) - log(min)));
    return min + u * (max - min);
}

double kiln_tune_to_unit(const char *scale, double min, double max, double x)
{
    double u;
    if (max <= min) return 0;
    if (is(scale, "UNIT_LOG_SCALE") && min > 0 && x > 0)
        u = (log(x) - log(min)) / (log(max) - log(min));
    else if (is(scale, "UNIT_REVERSE_LOG_SCALE") && min > 0 && max + min - x > 0)
        u = 1 - (log(max + min - x) - log(min)) / (log(max) - log(min));
    else
        u = (x - min) / (max - min);
    return u < 0 ? 0 : u > 1 ? 1 : u;
}

/* ---------- random numbers: splitmix64, one stream per trial ---------- */

uint64_t kiln__tune_rng_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double kiln__tune_uniform(uint64_t *st)
{
    return (double)(kiln__tune_rng_next(st) >> 11) * 0x1.0p-53;
}

static double normal(uint64_t *st)
{
    double a = kiln__tune_uniform(st), b = kiln__tune_uniform(st);
    return sqrt(-2 * log(a > 0 ? a : 1e-300)) * cos(2 * M_PI * b);
}

/* ---------- parameter <-> unit ---------- */

size_t kiln__tune_choices(const kiln_parameter_spec *p)
{
    if (is(p->type, "CATEGORICAL")) return p->categorical_values.n;
    if (is(p->type, "DISCRETE")) return p->n_discrete_values;
    if (is(p->type, "INTEGER")) return (size_t)(p->max_value - p->min_value) + 1;
    return 0; /* DOUBLE: continuous */
}

/* The value of u for parameter p (categorical: the index). */
double kiln__tune_value(const kiln_parameter_spec *p, double u)
{
    if (is(p->type, "CATEGORICAL")) {
        size_t k = (size_t)(u * (double)p->categorical_values.n);
        return (double)(k < p->categorical_values.n ? k : p->categorical_values.n - 1);
    }
    if (is(p->type, "DISCRETE")) { /* the nearest listed value in the scaled space */
        size_t best = 0;
        double lo = p->discrete_values[0], hi = p->discrete_values[p->n_discrete_values - 1];
        for (size_t k = 1; k < p->n_discrete_values; k++)
            if (fabs(kiln_tune_to_unit(p->scale_type, lo, hi, p->discrete_values[k]) - u) <
                fabs(kiln_tune_to_unit(p->scale_type, lo, hi, p->discrete_values[best]) - u))
                best = k;
        return p->discrete_values[best];
    }
    if (is(p->type, "INTEGER")) { /* every integer gets an equal share of u */
        double lo = p->min_value - 0.5 + 1e-9, hi = p->max_value + 0.5 - 1e-9;
        double x =
            is(p->scale_type, "UNIT_LOG_SCALE") || is(p->scale_type, "UNIT_REVERSE_LOG_SCALE")
                ? kiln_tune_from_unit(p->scale_type, p->min_value, p->max_value, u)
                : kiln_tune_from_unit(NULL, lo, hi, u);
        x = floor(x + 0.5);
        return x < p->min_value ? p->min_value : x > p->max_value ? p->max_value : x;
    }
    return kiln_tune_from_unit(p->scale_type, p->min_value, p->max_value, u);
}

double kiln__tune_unit(const kiln_parameter_spec *p, double v)
{
    if (is(p->type, "CATEGORICAL"))
        return (v + 0.5) / (double)(p->categorical_values.n ? p->categorical_values.n : 1);
    if (is(p->type, "DISCRETE"))
        return kiln_tune_to_unit(p->scale_type, p->discrete_values[0],
                                 p->discrete_values[p->n_discrete_values - 1], v);
    return kiln_tune_to_unit(p->scale_type, p->min_value, p->max_value, v);
}

/* ---------- the algorithms ---------- */

/* Trial number `k` (0-based) of a grid: the last parameter varies fastest.
 * False once the grid is exhausted. */
bool kiln__tune_grid(const kiln_hyperparameter_spec *hp, uint64_t k, double *out)
{
    for (size_t i = hp->n_params; i-- > 0;) {
        const kiln_parameter_spec *p = &hp->params[i];
        uint64_t n = kiln__tune_choices(p), r = k % n;
        k /= n;
        if (is(p->type, "CATEGORICAL"))
            out[i] = (double)r;
        else if (is(p->type, "DISCRETE"))
            out[i] = p->discrete_values[r];
        else
            out[i] = p->min_value + (double)r;
    }
    return k == 0;
}

void kiln__tune_random(const kiln_hyperparameter_spec *hp, uint64_t *rng, double *out)
{
    for (size_t i = 0; i < hp->n_params; i++)
        out[i] = kiln__tune_value(&hp->params[i], kiln__tune_uniform(rng));
}

/* A Parzen density in unit space: a Gaussian per point plus a uniform prior
 * (so that no region gets zero density), as hyperopt's TPE does. For
 * categorical parameters a smoothed histogram. */
static double parzen(const double *pts, size_t n, double u, double bw, size_t cats)
{
    if (cats) {
        size_t c = (size_t)(u * (double)cats), hits = 0;
        for (size_t i = 0; i < n; i++)
            hits += (size_t)(pts[i] * (double)cats) == c;
        return ((double)hits + 1.0) / ((double)n + (double)cats);
    }
    double sum = 1.0; /* the prior: density 1 on [0, 1] */
    for (size_t i = 0; i < n; i++) {
        double z = (u - pts[i]) / bw;
        sum += exp(-0.5 * z * z) / (bw * sqrt(2 * M_PI));
    }
    return sum / ((double)n + 1.0);
}

typedef struct scored {
    double y; /* objective, larger is better */
    const double *x;
} scored;

static int by_y_desc(const void *a, const void *b)
{
    double ya = ((const scored *)a)->y, yb = ((const scored *)b)->y;
    return (ya < yb) - (ya > yb);
}

/* TPE (Bergstra et al. 2011): split the trials with a metric into the best
 * quarter and the rest, model each parameter's density in both (Parzen
 * estimators), draw candidates from the good density and keep the one with
 * the largest ratio good/bad. Parameters are modelled independently, which
 * is TPE's usual simplification. Returns false (the caller draws at random)
 * while too few trials have a metric. */
bool kiln__tune_tpe(const kiln_hyperparameter_spec *hp, const kiln_trial *const *done, size_t n,
                    bool maximize, uint64_t *rng, double *out)
{
    enum { STARTUP = 8, CANDIDATES = 48 };
    size_t np = hp->n_params;
    bool ok = false;
    if (n < STARTUP) return false;
    scored *sc = calloc(n, sizeof *sc);
    double *good = calloc(n * np, sizeof *good), *bad = calloc(n * np, sizeof *bad);
    double *cand = calloc(np, sizeof *cand), *best = calloc(np, sizeof *best);
    if (!sc || !good || !bad || !cand || !best) goto out;
    for (size_t i = 0; i < n; i++)
        sc[i] = (scored){maximize ? done[i]->objective : -done[i]->objective, done[i]->values};
    qsort(sc, n, sizeof *sc, by_y_desc);
    size_t ng = (size_t)ceil(0.25 * (double)n), nb = n - ng;
    if (ng < 1) ng = 1;
    /* per parameter, column-major: good[i * n + k] */
    for (size_t i = 0; i < np; i++)
        for (size_t k = 0; k < n; k++) {
            double u = kiln__tune_unit(&hp->params[i], sc[k].x[i]);
            if (k < ng)
                good[i * n + k] = u;
            else
                bad[i * n + (k - ng)] = u;
        }
    double best_score = -INFINITY;
    for (int c = 0; c < CANDIDATES; c++) {
        double score = 0;
        for (size_t i = 0; i < np; i++) {
            const kiln_parameter_spec *p = &hp->params[i];
            size_t cats = is(p->type, "CATEGORICAL") ? p->categorical_values.n : 0;
            /* Scott-like bandwidth, shrinking as the good set grows */
            double bwg = fmax(0.03, 0.6 * pow((double)ng, -0.2) / 2);
            double bwb = fmax(0.03, 0.6 * pow((double)(nb ? nb : 1), -0.2) / 2);
            double u;
            if (cats) { /* draw a category from the good histogram */
                double r = kiln__tune_uniform(rng), acc = 0;
                size_t k = 0;
                for (; k + 1 < cats; k++) {
                    acc += parzen(&good[i * n], ng, ((double)k + 0.5) / (double)cats, 0, cats);
                    if (r < acc) break;
                }
                u = ((double)k + 0.5) / (double)cats;
            } else { /* a point of the good set, jittered; or the prior */
                size_t k = (size_t)(kiln__tune_uniform(rng) * (double)(ng + 1));
                u = k < ng ? good[i * n + k] + bwg * normal(rng) : kiln__tune_uniform(rng);
                u = u < 0 ? 0 : u > 1 ? 1 : u;
            }
            cand[i] = u;
            score += log(parzen(&good[i * n], ng, u, bwg, cats)) -
                     log(parzen(&bad[i * n], nb, u, bwb, cats));
        }
        if (score > best_score) {
            best_score = score;
            memcpy(best, cand, np * sizeof *best);
        }
    }
    for (size_t i = 0; i < np; i++)
        out[i] = kiln__tune_value(&hp->params[i], best[i]);
    ok = true;
out:
    free(sc);
    free(good);
    free(bad);
    free(cand);
    free(best);
    return ok;
}
