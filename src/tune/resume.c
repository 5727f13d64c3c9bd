/* resume.c - resumePreviousJobId: a new tuning job that continues a
 * finished tuning job's study. The previous job must be of the same project
 * (the caller looks it up there), finished, a tuning job that ran (its
 * runtime record holds a study), with the same params (conditions
 * included), goal, metric tag and measurementSelectionType.
 * The new study starts with the previous one's trials: they count toward
 * maxTrials (and failed ones toward maxFailedTrials), feed the model-based
 * search, and the new trials' ids follow theirs. */
#include <math.h>
#include <string.h>

#include "tune/tune_int.h"

#define FIELD "trainingInput.hyperparameters.resumePreviousJobId"

static bool same_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Linear scale unset or named: the same scale. */
static bool same_scale(const char *a, const char *b)
{
    const char *la = a && *a && strcmp(a, "NONE") != 0 ? a : "UNIT_LINEAR_SCALE";
    const char *lb = b && *b && strcmp(b, "NONE") != 0 ? b : "UNIT_LINEAR_SCALE";
    return strcmp(la, lb) == 0;
}

/* Where two parameters differ, in words; NULL when they do not. */
static const char *param_diff(const kiln_parameter_spec *a, const kiln_parameter_spec *b)
{
    if (!same_str(a->parameter_name, b->parameter_name)) return "parameterName";
    if (!same_str(a->type, b->type)) return "type";
    if (a->min_value != b->min_value || a->max_value != b->max_value) return "minValue/maxValue";
    if (!same_scale(a->scale_type, b->scale_type)) return "scaleType";
    if (a->categorical_values.n != b->categorical_values.n) return "categoricalValues";
    for (size_t i = 0; i < a->categorical_values.n; i++)
        if (!same_str(a->categorical_values.v[i], b->categorical_values.v[i]))
            return "categoricalValues";
    if (a->n_discrete_values != b->n_discrete_values) return "discreteValues";
    for (size_t i = 0; i < a->n_discrete_values; i++)
        if (a->discrete_values[i] != b->discrete_values[i]) return "discreteValues";
    /* a conditional parameter: the trials kept were chosen under its condition */
    if (!same_str(a->parent_parameter, b->parent_parameter)) return "parentParameterName";
    if (a->parent_categorical_values.n != b->parent_categorical_values.n)
        return "parentCategoricalValues";
    for (size_t i = 0; i < a->parent_categorical_values.n; i++)
        if (!same_str(a->parent_categorical_values.v[i], b->parent_categorical_values.v[i]))
            return "parentCategoricalValues";
    if (a->n_parent_values != b->n_parent_values) return "parentValues";
    for (size_t i = 0; i < a->n_parent_values; i++)
        if (a->parent_values[i] != b->parent_values[i]) return "parentValues";
    return NULL;
}

static json_t *runtime_study(const char *runtime)
{
    json_t *rt = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *st = json_object_get(rt, "study");
    st = json_is_object(st) ? json_incref(st) : NULL;
    json_decref(rt);
    return st;
}

static const char *goal_of(const kiln_hyperparameter_spec *hp)
{
    return kiln__tune_maximize(hp) ? "MAXIMIZE" : "MINIMIZE";
}

/* measurementSelectionType, unset being LAST_MEASUREMENT */
static const char *sel_of(const kiln_hyperparameter_spec *hp)
{
    const char *m = hp->measurement_selection;
    return m && strcmp(m, "BEST_MEASUREMENT") == 0 ? m : "LAST_MEASUREMENT";
}

int kiln_tune_check_resume(const kiln_hyperparameter_spec *hp, const char *prev_id,
                           const kiln_job *prev, const char *prev_runtime, kiln_diag *d)
{
    if (!prev) {
        kiln_diag_add(d, FIELD,
                      "job '%s' not found in this project: only a finished tuning job "
                      "of the same project can be resumed",
                      prev_id);
        return 1;
    }
    if (!prev->has_training_input || !prev->training_input.has_hyperparameters) {
        kiln_diag_add(d, FIELD, "job '%s' is not a hyperparameter tuning job", prev_id);
        return 1;
    }
    if (prev->state != KILN_STATE_SUCCEEDED && prev->state != KILN_STATE_FAILED &&
        prev->state != KILN_STATE_CANCELLED) {
        kiln_diag_add(d, FIELD,
                      "job '%s' is %s: only a finished study (SUCCEEDED, FAILED or "
                      "CANCELLED) can be resumed",
                      prev_id, kiln_job_state_name(prev->state));
        return 1;
    }
    const kiln_hyperparameter_spec *ph = &prev->training_input.hyperparameters;
    if (hp->n_params != ph->n_params) {
        kiln_diag_add(d, FIELD,
                      "job '%s' has %zu params and this job %zu: a resumed study "
                      "must have the same params",
                      prev_id, ph->n_params, hp->n_params);
        return 1;
    }
    for (size_t i = 0; i < hp->n_params; i++) {
        const char *what = param_diff(&hp->params[i], &ph->params[i]);
        if (what) {
            kiln_diag_add(d, FIELD,
                          "params[%zu] differs from job '%s''s (%s): a resumed study "
                          "must have the same params, in the same order",
                          i, prev_id, what);
            return 1;
        }
    }
    if (kiln__tune_maximize(hp) != kiln__tune_maximize(ph)) {
        kiln_diag_add(d, FIELD, "job '%s' %ss and this job %ss: a resumed study keeps its goal",
                      prev_id, goal_of(ph), goal_of(hp));
        return 1;
    }
    const char *ta = kiln_tune_metric_tag(hp), *tb = kiln_tune_metric_tag(ph);
    if (strcmp(ta, tb) != 0) {
        kiln_diag_add(d, FIELD,
                      "job '%s''s hyperparameterMetricTag is '%s', this job's '%s': a "
                      "resumed study keeps its metric",
                      prev_id, tb, ta);
        return 1;
    }
    /* the trials' objectives were chosen by the previous job's rule */
    const char *ma = sel_of(hp), *mb = sel_of(ph);
    if (strcmp(ma, mb) != 0) {
        kiln_diag_add(d, FIELD,
                      "job '%s''s measurementSelectionType is %s, this job's %s: a resumed "
                      "study keeps how its trials' objectives were chosen",
                      prev_id, mb, ma);
        return 1;
    }
    json_t *st = runtime_study(prev_runtime);
    kiln_study *s = st ? kiln_study_from_json(hp, st) : NULL;
    json_decref(st);
    if (!s) {
        kiln_diag_add(d, FIELD, "job '%s' ran no trial: it has no study to resume", prev_id);
        return 1;
    }
    kiln_study_free(s);
    return 0;
}

kiln_study *kiln_study_resume(const kiln_hyperparameter_spec *hp, const char *prev_runtime)
{
    json_t *st = runtime_study(prev_runtime);
    kiln_study *s = st ? kiln_study_from_json(hp, st) : NULL;
    json_decref(st);
    /* a finished job has no running trial; one queued then was never run:
     * it runs in the new job */
    for (size_t i = 0; s && i < kiln_study_trial_count(s); i++) {
        kiln_trial *t = kiln_study_trial(s, i);
        if (t->state == KILN_TRIAL_RUNNING) kiln_study_end(s, t, KILN_TRIAL_QUEUED, 0);
    }
    return s;
}
