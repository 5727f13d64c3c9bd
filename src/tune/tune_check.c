/* tune_check.c - the rules of a tuning spec (AI Platform's HyperparameterSpec).
 *
 * The decoder already refused unknown fields and enum values; what is left
 * are the rules between fields. Every accepted field is acted on by the study
 * or kilnd, so a spec that passes here runs as written. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tune/tune_int.h"

#define HP "trainingInput.hyperparameters"

typedef struct ctx {
    kiln_diag *d;
    int n;
} ctx;

static void viol(ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void viol(ctx *c, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(c->d, field, fmt, ap);
    va_end(ap);
    c->n++;
}

static bool set(const char *s)
{
    return s && *s;
}

static bool is(const char *s, const char *want)
{
    return s && strcmp(s, want) == 0;
}

/* A name that reads as a flag: --NAME=VALUE must parse back to NAME. */
static bool flag_name_ok(const char *s)
{
    if (!set(s) || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return false;
    return true;
}

static bool log_scale(const char *scale)
{
    return is(scale, "UNIT_LOG_SCALE") || is(scale, "UNIT_REVERSE_LOG_SCALE");
}

/* Fields that belong to other types must be absent (proto3: zero = unset). */
static void check_absent(ctx *c, const char *base, const kiln_parameter_spec *p, bool range,
                         bool cats, bool discrete, bool scale)
{
    char f[160];
    if (!range && (p->min_value != 0 || p->max_value != 0)) {
        snprintf(f, sizeof f, "%s.%s", base, p->min_value != 0 ? "minValue" : "maxValue");
        viol(c, f, "a %s parameter takes no minValue/maxValue", p->type);
    }
    if (!cats && p->categorical_values.n) {
        snprintf(f, sizeof f, "%s.categoricalValues", base);
        viol(c, f, "only a CATEGORICAL parameter takes categoricalValues");
    }
    if (!discrete && p->n_discrete_values) {
        snprintf(f, sizeof f, "%s.discreteValues", base);
        viol(c, f, "only a DISCRETE parameter takes discreteValues");
    }
    if (!scale && set(p->scale_type) && !is(p->scale_type, "NONE")) {
        snprintf(f, sizeof f, "%s.scaleType", base);
        viol(c, f, "%s: scale types apply to numeric parameters (DOUBLE, INTEGER, DISCRETE) only",
             p->scale_type);
    }
}

static void check_param(ctx *c, const kiln_hyperparameter_spec *hp, size_t i)
{
    const kiln_parameter_spec *p = &hp->params[i];
    char base[96], f[160];
    snprintf(base, sizeof base, HP ".params[%zu]", i);

    if (!flag_name_ok(p->parameter_name)) {
        snprintf(f, sizeof f, "%s.parameterName", base);
        viol(c, f,
             "'%.64s': required, a letter or '_' then letters, digits, '_', '-' or '.' (it "
             "becomes the flag --NAME=VALUE)",
             p->parameter_name ? p->parameter_name : "");
    }
    for (size_t k = 0; k < i && set(p->parameter_name); k++)
        if (is(hp->params[k].parameter_name, p->parameter_name)) {
            snprintf(f, sizeof f, "%s.parameterName", base);
            viol(c, f, "'%.64s' is also params[%zu]: names must be unique", p->parameter_name, k);
            break;
        }
    if (!set(p->type)) {
        snprintf(f, sizeof f, "%s.type", base);
        viol(c, f, "required: DOUBLE, INTEGER, CATEGORICAL or DISCRETE");
        return;
    }
    bool dbl = is(p->type, "DOUBLE"), integer = is(p->type, "INTEGER");
    if (dbl || integer) {
        check_absent(c, base, p, true, false, false, true);
        snprintf(f, sizeof f, "%s.maxValue", base);
        if (!(p->min_value < p->max_value))
            viol(c, f, "%g is not above minValue %g", p->max_value, p->min_value);
        if (integer && (p->min_value != floor(p->min_value) || p->max_value != floor(p->max_value)))
            viol(c, f, "an INTEGER parameter's minValue and maxValue are whole numbers");
        if (integer && p->max_value - p->min_value >= 1e9)
            viol(c, f, "the range of an INTEGER parameter is at most 1e9 values");
        if (log_scale(p->scale_type) && p->min_value <= 0) {
            snprintf(f, sizeof f, "%s.minValue", base);
            viol(c, f, "%g: %s needs positive bounds", p->min_value, p->scale_type);
        }
    } else if (is(p->type, "CATEGORICAL")) {
        check_absent(c, base, p, false, true, false, false);
        snprintf(f, sizeof f, "%s.categoricalValues", base);
        if (p->categorical_values.n == 0) viol(c, f, "required: at least one value");
        if (p->categorical_values.n > KILN_TUNE_MAX_CHOICES)
            viol(c, f, "%zu values: at most %d", p->categorical_values.n, KILN_TUNE_MAX_CHOICES);
        for (size_t a = 0; a < p->categorical_values.n; a++)
            for (size_t b = 0; b < a; b++)
                if (strcmp(p->categorical_values.v[a], p->categorical_values.v[b]) == 0) {
                    snprintf(f, sizeof f, "%s.categoricalValues[%zu]", base, a);
                    viol(c, f, "'%.64s' is listed twice", p->categorical_values.v[a]);
                }
    } else if (is(p->type, "DISCRETE")) {
        check_absent(c, base, p, false, false, true, true);
        snprintf(f, sizeof f, "%s.discreteValues", base);
        if (p->n_discrete_values == 0) viol(c, f, "required: at least one value");
        if (p->n_discrete_values > KILN_TUNE_MAX_CHOICES)
            viol(c, f, "%zu values: at most %d", p->n_discrete_values, KILN_TUNE_MAX_CHOICES);
        for (size_t k = 1; k < p->n_discrete_values; k++)
            if (!(p->discrete_values[k] > p->discrete_values[k - 1])) {
                snprintf(f, sizeof f, "%s.discreteValues[%zu]", base, k);
                viol(c, f, "%g does not increase on %g: discreteValues are in increasing order",
                     p->discrete_values[k], p->discrete_values[k - 1]);
                break;
            }
        if (log_scale(p->scale_type) && p->n_discrete_values && p->discrete_values[0] <= 0) {
            snprintf(f, sizeof f, "%s.discreteValues[0]", base);
            viol(c, f, "%g: %s needs positive values", p->discrete_values[0], p->scale_type);
        }
    } else {
        snprintf(f, sizeof f, "%s.type", base);
        viol(c, f, "'%.32s': one of DOUBLE, INTEGER, CATEGORICAL, DISCRETE", p->type);
        return;
    }
    if (is(hp->algorithm, "GRID_SEARCH") && dbl) {
        snprintf(f, sizeof f, "%s.type", base);
        viol(c, f,
             "GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE parameters only: give a "
             "DOUBLE as DISCRETE values, or choose RANDOM_SEARCH or ALGORITHM_UNSPECIFIED");
    }
}

/* A conditional parameter (parentParameterName, a kiln extension that
 * Vertex's conditionalParameterSpecs become): its parent comes before it,
 * is not DOUBLE (as Vertex), and every value its condition lists is one the
 * parent takes, in the list of the parent's type. */
static void check_condition(ctx *c, const kiln_hyperparameter_spec *hp, size_t i)
{
    const kiln_parameter_spec *p = &hp->params[i], *pp = NULL;
    char base[96], f[192];
    snprintf(base, sizeof base, HP ".params[%zu]", i);
    if (!set(p->parent_parameter)) {
        if (p->parent_categorical_values.n || p->n_parent_values) {
            snprintf(f, sizeof f, "%s.%s", base,
                     p->n_parent_values ? "parentValues" : "parentCategoricalValues");
            viol(c, f, "a condition needs parentParameterName");
        }
        return;
    }
    snprintf(f, sizeof f, "%s.parentParameterName", base);
    int at = kiln__tune_parent(hp, i), depth = 1;
    if (at < 0) {
        viol(c, f, "'%.64s' names no parameter listed before this one (a parent comes first)",
             p->parent_parameter);
        return;
    }
    pp = &hp->params[at];
    for (int k = at; (k = kiln__tune_parent(hp, (size_t)k)) >= 0;) /* the parents above */
        depth++;
    if (depth > KILN_TUNE_MAX_DEPTH - 1) {
        viol(c, f, "conditional parameters nest at most %d deep", KILN_TUNE_MAX_DEPTH - 1);
        return;
    }
    if (!set(pp->type) || is(pp->type, "DOUBLE")) {
        viol(c, f,
             "'%.64s' is %s: a parent is INTEGER, CATEGORICAL or DISCRETE (as Vertex: a "
             "condition lists values a parent takes)",
             p->parent_parameter, set(pp->type) ? pp->type : "untyped");
        return;
    }
    bool cat = is(pp->type, "CATEGORICAL");
    snprintf(f, sizeof f, "%s.%s", base, cat ? "parentCategoricalValues" : "parentValues");
    if (cat ? p->n_parent_values : p->parent_categorical_values.n) {
        char g[224];
        snprintf(g, sizeof g, "%s.%s", base, cat ? "parentValues" : "parentCategoricalValues");
        viol(c, g, "the parent '%.64s' is %s: its values go in %s", p->parent_parameter, pp->type,
             cat ? "parentCategoricalValues" : "parentValues");
    }
    size_t n = cat ? p->parent_categorical_values.n : p->n_parent_values;
    if (n == 0)
        viol(c, f, "required: at least one value of the parent '%.64s'", p->parent_parameter);
    if (n > KILN_TUNE_MAX_CHOICES) viol(c, f, "%zu values: at most %d", n, KILN_TUNE_MAX_CHOICES);
    for (size_t k = 0; k < n && k < KILN_TUNE_MAX_CHOICES; k++) {
        bool takes = false;
        if (cat)
            for (size_t v = 0; v < pp->categorical_values.n && !takes; v++)
                takes = strcmp(pp->categorical_values.v[v], p->parent_categorical_values.v[k]) == 0;
        else if (is(pp->type, "INTEGER"))
            takes = p->parent_values[k] == floor(p->parent_values[k]) &&
                    p->parent_values[k] >= pp->min_value && p->parent_values[k] <= pp->max_value;
        else
            for (size_t v = 0; v < pp->n_discrete_values && !takes; v++)
                takes = pp->discrete_values[v] == p->parent_values[k];
        if (!takes) {
            char g[224];
            snprintf(g, sizeof g, "%s[%zu]", f, k);
            if (cat)
                viol(c, g, "'%.64s' is not a value of '%.64s'", p->parent_categorical_values.v[k],
                     p->parent_parameter);
            else
                viol(c, g, "%g is not a value of '%.64s'", p->parent_values[k],
                     p->parent_parameter);
        }
    }
}

/* kiln's extension to enableTrialEarlyStopping: the rule, and ASHA's
 * numbers only where ASHA runs (so that none is accepted and ignored). */
static void check_early_stopping(ctx *c, const kiln_hyperparameter_spec *hp)
{
    bool asha = is(hp->early_stopping_rule, "ASHA");
    if (set(hp->early_stopping_rule) && !hp->enable_trial_early_stopping)
        viol(c, HP ".earlyStoppingRule",
             "%s: a rule for early stopping needs enableTrialEarlyStopping: true",
             hp->early_stopping_rule);
    if (hp->has_asha_reduction_factor) {
        if (!asha || !hp->enable_trial_early_stopping)
            viol(c, HP ".ashaReductionFactor",
                 "only with enableTrialEarlyStopping: true and earlyStoppingRule: ASHA");
        else if (hp->asha_reduction_factor < 2 ||
                 hp->asha_reduction_factor > KILN_TUNE_ASHA_MAX_ETA)
            viol(c, HP ".ashaReductionFactor", "%lld is outside 2..%d (unset: %d)",
                 (long long)hp->asha_reduction_factor, KILN_TUNE_ASHA_MAX_ETA, KILN_TUNE_ASHA_ETA);
    }
    if (hp->has_asha_min_steps) {
        if (!asha || !hp->enable_trial_early_stopping)
            viol(c, HP ".ashaMinSteps",
                 "only with enableTrialEarlyStopping: true and earlyStoppingRule: ASHA");
        else if (hp->asha_min_steps < 1)
            viol(c, HP ".ashaMinSteps", "%lld: the first rung is at step 1 or later (unset: %d)",
                 (long long)hp->asha_min_steps, KILN_TUNE_ASHA_MIN_STEPS);
    }
}

int kiln_tune_check(const kiln_hyperparameter_spec *hp, kiln_diag *d)
{
    ctx c = {.d = d};
    if (!is(hp->goal, "MAXIMIZE") && !is(hp->goal, "MINIMIZE"))
        viol(&c, HP ".goal", "required: MAXIMIZE or MINIMIZE");
    if (hp->n_params == 0) viol(&c, HP ".params", "required: at least one parameter to tune");
    if (hp->n_params > KILN_TUNE_MAX_PARAMS)
        viol(&c, HP ".params", "%zu parameters: at most %d", hp->n_params, KILN_TUNE_MAX_PARAMS);
    for (size_t i = 0; i < hp->n_params && i < KILN_TUNE_MAX_PARAMS; i++) {
        check_param(&c, hp, i);
        check_condition(&c, hp, i);
    }
    if (hp->max_trials < 0 || hp->max_trials > KILN_TUNE_MAX_TRIALS)
        viol(&c, HP ".maxTrials", "%lld is outside 1..%d (0 or unset: 1)",
             (long long)hp->max_trials, KILN_TUNE_MAX_TRIALS);
    int64_t trials = hp->max_trials > 0 ? hp->max_trials : 1;
    if (hp->max_parallel_trials < 0)
        viol(&c, HP ".maxParallelTrials", "%lld: must not be negative (0 or unset: 1)",
             (long long)hp->max_parallel_trials);
    else if (hp->max_parallel_trials > trials)
        viol(&c, HP ".maxParallelTrials", "%lld is above maxTrials (%lld)",
             (long long)hp->max_parallel_trials, (long long)trials);
    if (hp->max_failed_trials < 0)
        viol(&c, HP ".maxFailedTrials", "%lld: must not be negative (0 or unset: maxTrials)",
             (long long)hp->max_failed_trials);
    const char *tag = hp->hyperparameter_metric_tag;
    for (const char *p = tag; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\') {
            viol(&c, HP ".hyperparameterMetricTag",
                 "control characters, '\"' and '\\' are not "
                 "allowed in a metric tag");
            break;
        }
    check_early_stopping(&c, hp);
    /* resumePreviousJobId names a job of the project: kilnd checks it at
     * create (kiln_tune_check_resume), where the store is */
    return c.n;
}
