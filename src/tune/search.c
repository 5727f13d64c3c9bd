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
