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

/* ---------- conditional parameters ---------- */

int kiln__tune_parent(const kiln_hyperparameter_spec *hp, size_t i)
{
    const char *name = hp->params[i].parent_parameter;
    if (!name || !*name) return -1;
    for (size_t k = 0; k < i; k++)
        if (is(hp->params[k].parameter_name, name)) return (int)k;
    return -1;
}

/* Whether params[c]'s condition lists `v`, a value of its parent params[p]
 * (a CATEGORICAL parent's: the index). */
static bool listed(const kiln_hyperparameter_spec *hp, size_t c, size_t p, double v)
{
    const kiln_parameter_spec *cs = &hp->params[c], *ps = &hp->params[p];
    if (isnan(v)) return false;
    if (is(ps->type, "CATEGORICAL")) {
        if (v < 0 || (size_t)v >= ps->categorical_values.n) return false;
        const char *name = ps->categorical_values.v[(size_t)v];
        for (size_t k = 0; k < cs->parent_categorical_values.n; k++)
            if (strcmp(cs->parent_categorical_values.v[k], name) == 0) return true;
        return false;
    }
    for (size_t k = 0; k < cs->n_parent_values; k++)
        if (cs->parent_values[k] == v) return true;
    return false;
}

bool kiln__tune_active(const kiln_hyperparameter_spec *hp, size_t i, const double *values)
{
    int p = kiln__tune_parent(hp, i);
    return p < 0 || listed(hp, i, (size_t)p, values[p]);
}

void kiln__tune_prune(const kiln_hyperparameter_spec *hp, double *values)
{
    for (size_t i = 0; i < hp->n_params; i++)
        if (!kiln__tune_active(hp, i, values)) values[i] = NAN;
}

/* ---------- the grid over the conditional tree ---------- */

/* The grid walks the conditional tree, not the cross product: a parameter's
 * "count" is the number of settings of it and of the parameters under it,
 * the sum over its values of the product of the counts of the children that
 * value switches on (1 for a value that switches none on). Counts saturate
 * at GRID_CAP, far above any trial number asked for (maxTrials <= 1000), so
 * that the first GRID_CAP points come out exactly as with exact counts. */
#define GRID_CAP (UINT64_C(1) << 62)

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return a && b > GRID_CAP / a ? GRID_CAP : a * b;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b > GRID_CAP ? GRID_CAP : a + b;
}

/* Grid value number r of params[i] (a CATEGORICAL one's: the index). */
static double grid_value(const kiln_parameter_spec *p, uint64_t r)
{
    if (is(p->type, "CATEGORICAL")) return (double)r;
    if (is(p->type, "DISCRETE")) return p->discrete_values[r];
    return p->min_value + (double)r;
}

/* Grid value number of a value a child lists for params[p]; false when
 * params[p] does not take it (kiln_tune_check refuses such a spec). */
static bool grid_index(const kiln_parameter_spec *p, double v, uint64_t *r)
{
    size_t n = kiln__tune_choices(p);
    if (is(p->type, "INTEGER")) {
        if (v < p->min_value || v > p->max_value || v != floor(v)) return false;
        *r = (uint64_t)(v - p->min_value);
        return true;
    }
    for (size_t k = 0; k < n; k++)
        if (grid_value(p, k) == v) return (*r = k), true;
    return false;
}

/* The settings under value `v` of params[i]: the product of the counts of
 * the children that v switches on. */
static uint64_t grid_weight(const kiln_hyperparameter_spec *hp, const uint64_t *count, size_t i,
                            double v)
{
    uint64_t w = 1;
    for (size_t c = i + 1; c < hp->n_params; c++)
        if (kiln__tune_parent(hp, c) == (int)i && listed(hp, c, i, v)) w = sat_mul(w, count[c]);
    return w;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Every parameter's count, children (listed after their parent) first;
 * false on ENOMEM. Only the distinct values some child lists are weighed
 * one by one: the others count 1 each, so that an INTEGER parent of a wide
 * range costs no walk over its range. */
static bool grid_counts(const kiln_hyperparameter_spec *hp, uint64_t *count)
{
    for (size_t i = hp->n_params; i-- > 0;) {
        const kiln_parameter_spec *p = &hp->params[i];
        bool cat = is(p->type, "CATEGORICAL");
        size_t nl = 0, m = 0;
        for (size_t c = i + 1; c < hp->n_params; c++)
            if (kiln__tune_parent(hp, c) == (int)i)
                nl +=
                    cat ? hp->params[c].parent_categorical_values.n : hp->params[c].n_parent_values;
        uint64_t *r = malloc((nl ? nl : 1) * sizeof *r), sum = 0, seen = 0;
        if (!r) return false;
        for (size_t c = i + 1; c < hp->n_params; c++) {
            if (kiln__tune_parent(hp, c) != (int)i) continue;
            const kiln_parameter_spec *cs = &hp->params[c];
            for (size_t l = 0; cat && l < cs->parent_categorical_values.n; l++)
                for (size_t k = 0; k < p->categorical_values.n; k++)
                    if (strcmp(p->categorical_values.v[k], cs->parent_categorical_values.v[l]) == 0)
                        r[m++] = k;
            for (size_t l = 0; !cat && l < cs->n_parent_values; l++)
                if (grid_index(p, cs->parent_values[l], &r[m])) m++;
        }
        qsort(r, m, sizeof *r, cmp_u64);
        for (size_t k = 0; k < m; k++) {
            if (k && r[k] == r[k - 1]) continue;
            seen++;
            sum = sat_add(sum, grid_weight(hp, count, i, grid_value(p, r[k])));
        }
        free(r);
        count[i] = sat_add(kiln__tune_choices(p) - seen, sum);
    }
    return true;
}

/* Decodes k, mixed radix with the last parameter fastest, over the
 * parameters under params[parent] at its value v (parent -1: the top-level
 * ones); returns what is left of k (not 0: past the end of the grid). */
static uint64_t grid_list(const kiln_hyperparameter_spec *hp, const uint64_t *count, int parent,
                          double v, uint64_t k, double *out);

/* Setting r (below count[i]) of params[i] and the parameters under it. */
static void grid_param(const kiln_hyperparameter_spec *hp, const uint64_t *count, size_t i,
                       uint64_t r, double *out)
{
    const kiln_parameter_spec *p = &hp->params[i];
    uint64_t n = kiln__tune_choices(p);
    for (uint64_t x = 0; x < n; x++) { /* every weight is >= 1: at most r + 1 steps */
        double v = grid_value(p, x);
        uint64_t w = grid_weight(hp, count, i, v);
        if (r < w) {
            out[i] = v;
            grid_list(hp, count, (int)i, v, r, out);
            return;
        }
        r -= w;
    }
}

static uint64_t grid_list(const kiln_hyperparameter_spec *hp, const uint64_t *count, int parent,
                          double v, uint64_t k, double *out)
{
    for (size_t i = hp->n_params; i-- > 0;) {
        if (kiln__tune_parent(hp, i) != parent) continue;
        if (parent >= 0 && !listed(hp, i, (size_t)parent, v)) continue;
        uint64_t r = k % count[i];
        k /= count[i];
        grid_param(hp, count, i, r, out);
    }
    return k;
}

/* ---------- the algorithms ---------- */

/* Trial number `k` (0-based) of a grid: the last parameter varies fastest;
 * a parameter with conditional children varies as one digit over its
 * settings (grid_counts). False once the grid is exhausted. */
bool kiln__tune_grid(const kiln_hyperparameter_spec *hp, uint64_t k, double *out)
{
    uint64_t *count = calloc(hp->n_params ? hp->n_params : 1, sizeof *count);
    bool ok = count && grid_counts(hp, count);
    for (size_t i = 0; ok && i < hp->n_params; i++)
        out[i] = NAN; /* what grid_list does not reach: not in the trial */
    ok = ok && grid_list(hp, count, -1, 0, k, out) == 0;
    free(count);
    return ok;
}

void kiln__tune_random(const kiln_hyperparameter_spec *hp, uint64_t *rng, double *out)
{
    for (size_t i = 0; i < hp->n_params; i++)
        out[i] = kiln__tune_value(&hp->params[i], kiln__tune_uniform(rng));
    /* every parameter draws, so that trial N's values stay a function of
     * the seed and N; then the ones the trial does not have go */
    kiln__tune_prune(hp, out);
}
