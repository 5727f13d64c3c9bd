/* study.c - a study's trials: choosing, reporting, ending, persisting, and
 * what trainingOutput shows of them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tune/tune_int.h"

/* One ASHA rung's records, in the order they were made. */
typedef struct rung {
    int *ids;
    double *values;
    size_t n, cap;
} rung;

struct kiln_study {
    const kiln_hyperparameter_spec *hp;
    uint64_t seed;
    kiln_trial *trials;
    size_t n, cap;
    bool asha;  /* earlyStoppingRule ASHA (with enableTrialEarlyStopping) */
    bool best;  /* measurementSelectionType BEST_MEASUREMENT */
    bool decay; /* earlyStoppingRule DECAY_CURVE (with enableTrialEarlyStopping) */
    int64_t eta, min_steps;
    rung rungs[KILN_TUNE_ASHA_MAX_RUNGS];
};

static bool is(const char *s, const char *want)
{
    return s && strcmp(s, want) == 0;
}

static int64_t max_trials(const kiln_study *s)
{
    return s->hp->max_trials > 0 ? s->hp->max_trials : 1;
}

bool kiln__tune_maximize(const kiln_hyperparameter_spec *hp)
{
    return !is(hp->goal, "MINIMIZE");
}

const char *kiln_tune_metric_tag(const kiln_hyperparameter_spec *hp)
{
    const char *t = hp->hyperparameter_metric_tag;
    return t && *t ? t : KILN_TUNE_DEFAULT_TAG;
}

static bool maximize(const kiln_study *s)
{
    return kiln__tune_maximize(s->hp);
}

const char *kiln_study_metric_tag(const kiln_study *s)
{
    return kiln_tune_metric_tag(s->hp);
}

kiln_study *kiln_study_new(const kiln_hyperparameter_spec *hp, uint64_t seed)
{
    kiln_study *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->hp = hp;
    s->seed = seed;
    s->asha = hp->enable_trial_early_stopping && is(hp->early_stopping_rule, "ASHA");
    s->best = is(hp->measurement_selection, "BEST_MEASUREMENT");
    s->decay = hp->enable_trial_early_stopping && is(hp->early_stopping_rule, "DECAY_CURVE");
    s->eta = hp->has_asha_reduction_factor ? hp->asha_reduction_factor : KILN_TUNE_ASHA_ETA;
    s->min_steps = hp->has_asha_min_steps ? hp->asha_min_steps : KILN_TUNE_ASHA_MIN_STEPS;
    if (s->eta < 2) s->eta = 2; /* kiln_tune_check refused these */
    if (s->min_steps < 1) s->min_steps = 1;
    return s;
}

static void trial_clear(kiln_trial *t)
{
    free(t->values);
    free(t->curve_steps);
    free(t->curve_values);
    kiln__tune_tb_clear(t);
}

void kiln_study_free(kiln_study *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        trial_clear(&s->trials[i]);
    for (int k = 0; k < KILN_TUNE_ASHA_MAX_RUNGS; k++) {
        free(s->rungs[k].ids);
        free(s->rungs[k].values);
    }
    free(s->trials);
    free(s);
}

size_t kiln_study_trial_count(const kiln_study *s)
{
    return s->n;
}

kiln_trial *kiln_study_trial(kiln_study *s, size_t i)
{
    return i < s->n ? &s->trials[i] : NULL;
}

kiln_trial *kiln_study_find(kiln_study *s, int id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->trials[i].id == id) return &s->trials[i];
    return NULL;
}

size_t kiln_study_count(const kiln_study *s, kiln_trial_state st)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += s->trials[i].state == st;
    return n;
}

bool kiln_study_failed_out(const kiln_study *s)
{
    int64_t lim = s->hp->max_failed_trials > 0 ? s->hp->max_failed_trials : max_trials(s);
    return (int64_t)kiln_study_count(s, KILN_TRIAL_FAILED) >= lim;
}

static kiln_trial *add_trial(kiln_study *s)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        kiln_trial *v = realloc(s->trials, cap * sizeof *v);
        if (!v) return NULL;
        s->trials = v;
        s->cap = cap;
    }
    kiln_trial *t = &s->trials[s->n];
    *t = (kiln_trial){.id = (int)s->n + 1};
    t->values = calloc(s->hp->n_params ? s->hp->n_params : 1, sizeof *t->values);
    if (!t->values) return NULL;
    s->n++;
    return t;
}

/* Values for trial number `k` (0-based) from the algorithm; false when the
 * algorithm has no more (a grid exhausted). */
static bool choose(kiln_study *s, uint64_t k, double *out)
{
    uint64_t rng = s->seed ^ (0x9e3779b97f4a7c15ULL * (k + 1));
    if (is(s->hp->algorithm, "GRID_SEARCH")) return kiln__tune_grid(s->hp, k, out);
    if (!is(s->hp->algorithm, "RANDOM_SEARCH")) {
        const kiln_trial **done = calloc(s->n ? s->n : 1, sizeof *done);
        size_t nd = 0;
        for (size_t i = 0; done && i < s->n; i++)
            if (s->trials[i].has_metric && s->trials[i].state == KILN_TRIAL_SUCCEEDED)
                done[nd++] = &s->trials[i];
        bool ok = done && kiln__tune_gp(s->hp, done, nd, maximize(s), &rng, out);
        free(done);
        if (ok) return true;
    }
    kiln__tune_random(s->hp, &rng, out);
    return true;
}

bool kiln_study_may_start(const kiln_study *s)
{
    if (kiln_study_failed_out(s)) return false;
    for (size_t i = 0; i < s->n; i++)
        if (s->trials[i].state == KILN_TRIAL_QUEUED) return true;
    return (int64_t)s->n < max_trials(s);
}

kiln_trial *kiln_study_next(kiln_study *s, int64_t now_ns)
{
    kiln_trial *t = NULL;
    if (kiln_study_failed_out(s)) return NULL;
    for (size_t i = 0; i < s->n && !t; i++)
        if (s->trials[i].state == KILN_TRIAL_QUEUED) t = &s->trials[i];
    if (!t) {
        if ((int64_t)s->n >= max_trials(s)) return NULL;
        double *v = calloc(s->hp->n_params ? s->hp->n_params : 1, sizeof *v);
        if (!v) return NULL;
        bool more = choose(s, s->n, v);
        t = more ? add_trial(s) : NULL;
        if (t) memcpy(t->values, v, s->hp->n_params * sizeof *v);
        free(v);
        if (!t) return NULL;
    }
    t->state = KILN_TRIAL_RUNNING;
    t->start_ns = now_ns;
    t->end_ns = 0;
    t->file_offset = 0;
    kiln__tune_tb_clear(t);
    return t;
}

static void asha_record(kiln_study *s, kiln_trial *t, int64_t step, double value, bool decide);

/* A report kept in the trial (the persisted form's curve comes back this
 * way too, without ASHA's records). The objective is the last report, or
 * with BEST_MEASUREMENT the best so far by the goal (the first of equals):
 * step is then the best report's step. */
static void add_report(const kiln_study *s, kiln_trial *t, int64_t step, double value)
{
    bool better =
        !t->has_metric || !s->best || (maximize(s) ? value > t->objective : value < t->objective);
    t->n_reports++;
    if (better) {
        t->has_metric = true;
        t->objective = value;
        t->step = step;
    }
    if (t->n_curve >= KILN_TUNE_CURVE_MAX) return; /* the objective still follows */
    int64_t *st = realloc(t->curve_steps, (t->n_curve + 1) * sizeof *st);
    if (!st) return;
    t->curve_steps = st;
    double *cv = realloc(t->curve_values, (t->n_curve + 1) * sizeof *cv);
    if (!cv) return;
    t->curve_values = cv;
    st[t->n_curve] = step;
    cv[t->n_curve] = value;
    t->n_curve++;
}

void kiln_study_report(kiln_study *s, kiln_trial *t, int64_t step, double value)
{
    if (!isfinite(value)) return;
    add_report(s, t, step, value);
    if (s->asha && t->state == KILN_TRIAL_RUNNING) asha_record(s, t, step, value, true);
}

static void asha_forget(kiln_study *s, kiln_trial *t);

void kiln_study_end(kiln_study *s, kiln_trial *t, kiln_trial_state st, int64_t now_ns)
{
    t->state = st;
    t->end_ns = st == KILN_TRIAL_QUEUED ? 0 : now_ns;
    if (st == KILN_TRIAL_QUEUED) { /* runs again from the start: its reports too */
        t->has_metric = false;
        t->n_curve = 0;
        t->n_reports = 0;
        t->stopped_early = false;
        asha_forget(s, t);
    }
}

bool kiln_study_finished(const kiln_study *s)
{
    if (kiln_study_count(s, KILN_TRIAL_RUNNING)) return false;
    if (kiln_study_failed_out(s)) return true;
    if (kiln_study_count(s, KILN_TRIAL_QUEUED)) return false;
    if ((int64_t)s->n >= max_trials(s)) return true;
    if (is(s->hp->algorithm, "GRID_SEARCH")) {
        double *v = calloc(s->hp->n_params ? s->hp->n_params : 1, sizeof *v);
        bool more = v && kiln__tune_grid(s->hp, s->n, v);
        free(v);
        return !more;
    }
    return false;
}

/* ---------- the median stopping rule ---------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The decay-curve rule (kiln_study_decay_curve): false when there is no
 * basis yet. *proj and *target say why, for the job's events. */
static bool decay_stop(const kiln_study *s, const kiln_trial *t, double *proj, double *target)
{
    enum { MIN_COMPLETED = 3 };
    bool max = maximize(s);
    int64_t at = t->curve_steps[t->n_curve - 1];
    double now = t->curve_values[0];
    for (size_t k = 1; k < t->n_curve; k++)
        now = max ? fmax(now, t->curve_values[k]) : fmin(now, t->curve_values[k]);
    double gain = 0, best = 0;
    size_t n = 0, nb = 0;
    for (size_t i = 0; i < s->n; i++) {
        const kiln_trial *c = &s->trials[i];
        if (c == t || c->state != KILN_TRIAL_SUCCEEDED || !c->has_metric) continue;
        best = nb++ == 0 ? c->objective : max ? fmax(best, c->objective) : fmin(best, c->objective);
        if (c->stopped_early || c->n_curve == 0 || c->curve_steps[0] > at ||
            c->curve_steps[c->n_curve - 1] <= at)
            continue;
        size_t k = 0; /* its last report at or before `at` */
        while (k + 1 < c->n_curve && c->curve_steps[k + 1] <= at)
            k++;
        double g = c->objective - c->curve_values[k]; /* what it gained (or lost) after */
        gain = n++ == 0 ? g : max ? fmax(gain, g) : fmin(gain, g);
    }
    if (n < MIN_COMPLETED) return false;
    *proj = now + gain;
    *target = best;
    return max ? *proj < best : *proj > best;
}

bool kiln_study_should_stop(const kiln_study *s, const kiln_trial *t)
{
    enum { MIN_COMPLETED = 3 };
    if (s->asha) return t->state == KILN_TRIAL_RUNNING && t->asha_stop;
    if (s->decay) {
        double proj, target;
        return t->state == KILN_TRIAL_RUNNING && t->n_curve > 0 && decay_stop(s, t, &proj, &target);
    }
    if (t->state != KILN_TRIAL_RUNNING || t->n_curve == 0) return false;
    bool max = maximize(s);
    int64_t at = t->curve_steps[t->n_curve - 1];
    double best = t->curve_values[0];
    for (size_t k = 1; k < t->n_curve; k++)
        best = max ? fmax(best, t->curve_values[k]) : fmin(best, t->curve_values[k]);
    double *avg = calloc(s->n ? s->n : 1, sizeof *avg);
    size_t na = 0;
    for (size_t i = 0; avg && i < s->n; i++) {
        const kiln_trial *c = &s->trials[i];
        if (c == t || c->state != KILN_TRIAL_SUCCEEDED || c->stopped_early) continue;
        double sum = 0;
        size_t m = 0;
        for (size_t k = 0; k < c->n_curve && c->curve_steps[k] <= at; k++, m++)
            sum += c->curve_values[k];
        if (m) avg[na++] = sum / (double)m;
    }
    bool stop = false;
    if (na >= MIN_COMPLETED) {
        qsort(avg, na, sizeof *avg, cmp_double);
        double med = na % 2 ? avg[na / 2] : (avg[na / 2 - 1] + avg[na / 2]) / 2;
        stop = max ? best < med : best > med;
    }
    free(avg);
    return stop;
}

/* ---------- ASHA ---------- */

bool kiln_study_asha(const kiln_study *s)
{
    return s->asha;
}

/* Rung k's step, min_steps * eta^k; -1 past int64. */
static int64_t rung_step(const kiln_study *s, int k)
{
    int64_t v = s->min_steps;
    for (int i = 0; i < k; i++) {
        if (v > INT64_MAX / s->eta) return -1;
        v *= s->eta;
    }
    return v;
}

static bool rung_push(rung *r, int id, double value)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        int *ids = realloc(r->ids, cap * sizeof *ids);
        if (!ids) return false;
        r->ids = ids;
        double *v = realloc(r->values, cap * sizeof *v);
        if (!v) return false;
        r->values = v;
        r->cap = cap;
    }
    r->ids[r->n] = id;
    r->values[r->n] = value;
    r->n++;
    return true;
}

/* Whether `value`, recorded at rung k, is among the best max(1, n / eta)
 * of the n records there: fewer than that many are strictly better. */
static bool asha_keeps(const kiln_study *s, int k, double value)
{
    const rung *r = &s->rungs[k];
    bool max = maximize(s);
    size_t better = 0, keep = (size_t)((int64_t)r->n / s->eta);
    for (size_t i = 0; i < r->n; i++)
        better += max ? r->values[i] > value : r->values[i] < value;
    return better < (keep ? keep : 1);
}

/* Records `t` at each rung its report at `step` reached; with `decide`,
 * stops at the first rung where it is not kept (it records no further). */
static void asha_record(kiln_study *s, kiln_trial *t, int64_t step, double value, bool decide)
{
    while (!t->asha_stop && t->asha_rungs < KILN_TUNE_ASHA_MAX_RUNGS) {
        int k = t->asha_rungs;
        int64_t at = rung_step(s, k);
        if (at < 0 || step < at) return;
        if (!rung_push(&s->rungs[k], t->id, value)) return;
        t->asha_rungs++;
        if (decide && !asha_keeps(s, k, value)) t->asha_stop = true;
    }
}

static void asha_forget(kiln_study *s, kiln_trial *t)
{
    for (int k = 0; k < KILN_TUNE_ASHA_MAX_RUNGS; k++) {
        rung *r = &s->rungs[k];
        size_t o = 0;
        for (size_t i = 0; i < r->n; i++)
            if (r->ids[i] != t->id) {
                r->ids[o] = r->ids[i];
                r->values[o++] = r->values[i];
            }
        r->n = o;
    }
    t->asha_rungs = 0;
    t->asha_stop = false;
}

size_t kiln_study_rung(const kiln_study *s, int k, size_t i, int *id, double *value)
{
    if (k < 0 || k >= KILN_TUNE_ASHA_MAX_RUNGS) return 0;
    const rung *r = &s->rungs[k];
    if (i < r->n && id) *id = r->ids[i];
    if (i < r->n && value) *value = r->values[i];
    return r->n;
}

void kiln_study_stop_reason(const kiln_study *s, const kiln_trial *t, char *buf, size_t len)
{
    if (s->asha) {
        int k = t->asha_rungs > 0 ? t->asha_rungs - 1 : 0;
        snprintf(buf, len,
                 "Trial %d stopped early (ASHA): at rung %d (step %lld) it is not among the "
                 "best 1/%lld of the %zu trials recorded there",
                 t->id, k, (long long)rung_step(s, k), (long long)s->eta, s->rungs[k].n);
    } else if (s->decay) {
        double proj = 0, target = 0;
        if (t->n_curve) decay_stop(s, t, &proj, &target);
        snprintf(buf, len,
                 "Trial %d stopped early (decay curve): its best value so far plus the most "
                 "any completed trial gained after the same step projects %g, worse than the "
                 "best completed trial's %g",
                 t->id, proj, target);
    } else {
        snprintf(buf, len,
                 "Trial %d stopped early: its best value so far is worse than the median of "
                 "the completed trials at the same step",
                 t->id);
    }
}

/* ---------- flags and environment ---------- */

/* A value as a flag shows it: integers without a fraction, doubles with
 * enough digits to come back the same. */
static void fmt_value(const kiln_parameter_spec *p, double v, char *buf, size_t len)
{
    if (is(p->type, "INTEGER") || (is(p->type, "DISCRETE") && v == floor(v) && fabs(v) < 1e15))
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%.17g", v);
}

kiln_err kiln_trial_args(const kiln_study *s, const kiln_trial *t, kiln_strv *args)
{
    for (size_t i = 0; i < s->hp->n_params; i++) {
        const kiln_parameter_spec *p = &s->hp->params[i];
        char val[64], *kv = NULL;
        const char *txt = val;
        if (isnan(t->values[i])) continue; /* a conditional parameter it does not have */
        if (is(p->type, "CATEGORICAL"))
            txt = p->categorical_values.v[(size_t)t->values[i]];
        else
            fmt_value(p, t->values[i], val, sizeof val);
        if (asprintf(&kv, "--%s=%s", p->parameter_name, txt) < 0) return KILN_ENOMEM;
        kiln_err err = kiln_strv_push(args, kv);
        free(kv);
        if (err != KILN_OK) return err;
    }
    return KILN_OK;
}

static kiln_err push_env(kiln_strv *env, const char *key, const char *val)
{
    char *kv = NULL;
    if (asprintf(&kv, "%s=%s", key, val) < 0) return KILN_ENOMEM;
    kiln_err err = kiln_strv_push(env, kv);
    free(kv);
    return err;
}

kiln_err kiln_trial_env(const kiln_study *s, const kiln_trial *t, const char *metric_file,
                        kiln_strv *env)
{
    char id[16];
    snprintf(id, sizeof id, "%d", t->id);
    /* TF_CONFIG's task carries the trial, as AI Platform sets it; so does
     * CLUSTER_SPEC's (its copy, or Vertex's own form) */
    for (size_t i = 0; i < env->n; i++) {
        const char *name = strncmp(env->v[i], "TF_CONFIG=", 10) == 0      ? "TF_CONFIG"
                           : strncmp(env->v[i], "CLUSTER_SPEC=", 13) == 0 ? "CLUSTER_SPEC"
                                                                          : NULL;
        if (!name) continue;
        json_t *tf = json_loads(env->v[i] + strlen(name) + 1, 0, NULL);
        json_t *task = json_object_get(tf, "task");
        char *txt = NULL, *kv = NULL;
        if (json_is_object(task)) json_object_set_new(task, "trial", json_string(id));
        txt = tf ? json_dumps(tf, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(tf);
        if (!txt || asprintf(&kv, "%s=%s", name, txt) < 0) {
            free(txt);
            return KILN_ENOMEM;
        }
        free(txt);
        free(env->v[i]);
        env->v[i] = kv;
    }
    kiln_err err = push_env(env, "CLOUD_ML_TRIAL_ID", id);
    if (err == KILN_OK) err = push_env(env, "CLOUD_ML_HP_METRIC_TAG", kiln_study_metric_tag(s));
    if (err == KILN_OK) err = push_env(env, "CLOUD_ML_HP_METRIC_FILE", metric_file);
    return err;
}

/* ---------- the cloudml-hypertune file ---------- */

/* One line as cloudml-hypertune writes it:
 * {"timestamp": 1.7e9, "trial": "1", "TAG": 0.93, "global_step": "200"}
 * (global_step a string or a number). */
static void hypertune_line(kiln_study *s, kiln_trial *t, const char *line)
{
    json_t *o = json_loads(line, 0, NULL);
    json_t *v = json_object_get(o, kiln_study_metric_tag(s));
    json_t *gs = json_object_get(o, "global_step");
    int64_t step = 0;
    if (json_is_integer(gs)) step = json_integer_value(gs);
    /* a trial's own line: a step out of int64's range (or NaN) is no step */
    if (json_is_real(gs) && fabs(json_real_value(gs)) < 9.2e18) step = (int64_t)json_real_value(gs);
    if (json_is_string(gs)) step = strtoll(json_string_value(gs), NULL, 10);
    if (json_is_string(v)) { /* hypertune's report_hyperparameter_tuning_metric stringifies */
        char *end = NULL;
        double d = strtod(json_string_value(v), &end);
        if (end && *end == '\0' && end != json_string_value(v)) kiln_study_report(s, t, step, d);
    } else if (json_is_number(v)) {
        kiln_study_report(s, t, step, json_number_value(v));
    }
    json_decref(o);
}

void kiln_study_read_hypertune(kiln_study *s, kiln_trial *t, const char *path)
{
    char line[4096];
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, t->file_offset, SEEK_SET) != 0) goto out;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') break; /* a line still being written */
        t->file_offset += (long)n;
        hypertune_line(s, t, line);
    }
out:
    fclose(f);
}

/* ---------- persistence ---------- */

static const char *const state_names[] = {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"};

json_t *kiln_study_to_json(const kiln_study *s)
{
    json_t *trials = json_array();
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    json_t *root = json_pack("{s:s,s:o}", "seed", seed, "trials", trials ? trials : json_array());
    for (size_t i = 0; root && trials && i < s->n; i++) {
        const kiln_trial *t = &s->trials[i];
        json_t *vals = json_array(), *curve = json_array();
        for (size_t k = 0; vals && k < s->hp->n_params; k++)
            json_array_append_new(vals,
                                  isnan(t->values[k]) ? json_null() : json_real(t->values[k]));
        for (size_t k = 0; curve && k < t->n_curve; k++)
            json_array_append_new(
                curve, json_pack("[I,f]", (json_int_t)t->curve_steps[k], t->curve_values[k]));
        json_t *o = json_pack("{s:i,s:o,s:s,s:b,s:I,s:I,s:o}", "id", t->id, "values",
                              vals ? vals : json_array(), "state", state_names[t->state],
                              "stoppedEarly", t->stopped_early, "start", (json_int_t)t->start_ns,
                              "end", (json_int_t)t->end_ns, "curve", curve ? curve : json_array());
        if (o && t->has_metric) {
            json_object_set_new(o, "objective", json_real(t->objective));
            json_object_set_new(o, "step", json_integer(t->step));
        }
        if (o && t->asha_stop) json_object_set_new(o, "ashaStop", json_true());
        if (o && t->state == KILN_TRIAL_RUNNING) { /* where its reports were read up to */
            json_t *tb = json_array();
            for (size_t k = 0; tb && k < t->n_tb; k++)
                json_array_append_new(tb, json_pack("[s,I,b]", t->tb[k].path,
                                                    (json_int_t)t->tb[k].offset, t->tb[k].dead));
            json_object_set_new(o, "fileOffset", json_integer(t->file_offset));
            json_object_set_new(o, "tb", tb ? tb : json_array());
        }
        if (o) json_array_append_new(trials, o);
    }
    if (root && s->asha) { /* {"eta", "minSteps", "rungs": [[[id, value], ...], ...]} */
        json_t *rungs = json_array();
        for (int k = 0; rungs && k < KILN_TUNE_ASHA_MAX_RUNGS && s->rungs[k].n; k++) {
            json_t *r = json_array();
            for (size_t i = 0; r && i < s->rungs[k].n; i++)
                json_array_append_new(
                    r, json_pack("[i,f]", s->rungs[k].ids[i], s->rungs[k].values[i]));
            if (r) json_array_append_new(rungs, r);
        }
        json_object_set_new(root, "asha",
                            json_pack("{s:I,s:I,s:o}", "eta", (json_int_t)s->eta, "minSteps",
                                      (json_int_t)s->min_steps, "rungs",
                                      rungs ? rungs : json_array()));
    }
    return root;
}

/* ASHA's rungs from the persisted form when they were made with the same
 * eta and first rung; otherwise (a resumed study whose spec changed them, or
 * one that ran another rule) rebuilt from the trials' reports in id order. */
static void asha_restore(kiln_study *s, const json_t *a)
{
    json_t *rungs = json_object_get(a, "rungs"), *r, *pt;
    size_t k, i;
    if (json_integer_value(json_object_get(a, "eta")) == s->eta &&
        json_integer_value(json_object_get(a, "minSteps")) == s->min_steps &&
        json_is_array(rungs)) {
        json_array_foreach(rungs, k, r)
        {
            if (k >= KILN_TUNE_ASHA_MAX_RUNGS) break;
            json_array_foreach(r, i, pt)
            {
                int id = (int)json_integer_value(json_array_get(pt, 0));
                kiln_trial *t = kiln_study_find(s, id);
                if (!t || !rung_push(&s->rungs[k], id, json_number_value(json_array_get(pt, 1))))
                    continue;
                if (t->asha_rungs < (int)k + 1) t->asha_rungs = (int)k + 1;
            }
        }
        return;
    }
    for (size_t n = 0; n < s->n; n++) {
        kiln_trial *t = &s->trials[n];
        t->asha_stop = false; /* a decision by other rungs does not hold */
        if (t->state == KILN_TRIAL_QUEUED) continue;
        for (size_t c = 0; c < t->n_curve; c++)
            asha_record(s, t, t->curve_steps[c], t->curve_values[c], false);
    }
}

/* A running trial's read offsets (the hypertune file's and its event
 * files'), persisted with its reports so that a kilnd that adopts the trial
 * reads on where the reports it keeps end. False on ENOMEM. */
static bool tb_restore(kiln_trial *t, const json_t *o)
{
    json_t *tb = json_object_get(o, "tb"), *f;
    size_t k;
    json_int_t off = json_integer_value(json_object_get(o, "fileOffset"));
    t->file_offset = off > 0 ? (long)off : 0;
    if (!json_is_array(tb) || json_array_size(tb) == 0) return true;
    size_t n = json_array_size(tb) < KILN_TFEVENTS_MAX_FILES ? json_array_size(tb)
                                                             : KILN_TFEVENTS_MAX_FILES;
    t->tb = calloc(n, sizeof *t->tb);
    if (!t->tb) return false;
    json_array_foreach(tb, k, f)
    {
        const char *path = json_string_value(json_array_get(f, 0));
        if (k >= n) break;
        if (!path) continue;
        kiln_tb_file *e = &t->tb[t->n_tb];
        if (!(e->path = strdup(path))) return false;
        json_int_t fo = json_integer_value(json_array_get(f, 1));
        e->offset = fo > 0 ? (long)fo : 0;
        e->dead = json_is_true(json_array_get(f, 2));
        t->n_tb++;
    }
    return true;
}

kiln_study *kiln_study_from_json(const kiln_hyperparameter_spec *hp, const json_t *j)
{
    const char *seed = json_string_value(json_object_get(j, "seed"));
    json_t *trials = json_object_get(j, "trials"), *o;
    size_t i;
    if (!seed || !json_is_array(trials)) return NULL;
    kiln_study *s = kiln_study_new(hp, strtoull(seed, NULL, 10));
    json_array_foreach(trials, i, o)
    {
        json_t *vals = json_object_get(o, "values"), *curve = json_object_get(o, "curve"), *pt;
        const char *st = json_string_value(json_object_get(o, "state"));
        size_t k;
        kiln_trial *t = s ? add_trial(s) : NULL;
        if (!t || json_array_size(vals) != hp->n_params || !st) goto bad;
        /* null: a conditional parameter the trial does not have; it must
         * lack exactly those its spec's conditions leave out */
        for (k = 0; k < hp->n_params; k++) {
            json_t *v = json_array_get(vals, k);
            t->values[k] = json_is_null(v) ? NAN : json_number_value(v);
            if (isnan(t->values[k]) == kiln__tune_active(hp, k, t->values)) goto bad;
        }
        t->id = (int)json_integer_value(json_object_get(o, "id"));
        t->state = KILN_TRIAL_QUEUED;
        for (int n = 0; n < 5; n++)
            if (strcmp(st, state_names[n]) == 0) t->state = (kiln_trial_state)n;
        t->start_ns = json_integer_value(json_object_get(o, "start"));
        t->end_ns = json_integer_value(json_object_get(o, "end"));
        t->stopped_early = json_is_true(json_object_get(o, "stoppedEarly"));
        json_array_foreach(curve, k, pt)
        {
            double v = json_number_value(json_array_get(pt, 1));
            if (isfinite(v)) add_report(s, t, json_integer_value(json_array_get(pt, 0)), v);
        }
        t->asha_stop = json_is_true(json_object_get(o, "ashaStop"));
        if (t->state == KILN_TRIAL_RUNNING && !tb_restore(t, o)) goto bad;
        t->has_metric = json_is_number(json_object_get(o, "objective"));
        if (t->has_metric) {
            t->objective = json_number_value(json_object_get(o, "objective"));
            t->step = json_integer_value(json_object_get(o, "step"));
        }
    }
    if (s->asha) asha_restore(s, json_object_get(j, "asha"));
    return s;
bad:
    kiln_study_free(s);
    return NULL;
}

/* ---------- trainingOutput.trials ---------- */

typedef struct ranked {
    const kiln_trial *t;
    bool max;
} ranked;

static int by_goal(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->t->has_metric != y->t->has_metric) return x->t->has_metric ? -1 : 1;
    if (x->t->has_metric && x->t->objective != y->t->objective) {
        bool xb = x->max ? x->t->objective > y->t->objective : x->t->objective < y->t->objective;
        return xb ? -1 : 1;
    }
    return (x->t->id > y->t->id) - (x->t->id < y->t->id);
}

static void rfc3339(int64_t ns, char *buf, size_t len)
{
    time_t sec = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(ns / 1000000 % 1000));
}

json_t *kiln_study_output_trials(const kiln_study *s)
{
    json_t *out = json_array();
    ranked *r = calloc(s->n ? s->n : 1, sizeof *r);
    if (!out || !r) goto out;
    for (size_t i = 0; i < s->n; i++)
        r[i] = (ranked){&s->trials[i], maximize(s)};
    qsort(r, s->n, sizeof *r, by_goal);
    for (size_t i = 0; i < s->n; i++) {
        const kiln_trial *t = r[i].t;
        char id[16], when[40];
        json_t *hp = json_object();
        snprintf(id, sizeof id, "%d", t->id);
        for (size_t k = 0; hp && k < s->hp->n_params; k++) {
            const kiln_parameter_spec *p = &s->hp->params[k];
            char val[64];
            if (isnan(t->values[k])) continue; /* not in this trial: not shown */
            if (is(p->type, "CATEGORICAL"))
                json_object_set_new(hp, p->parameter_name,
                                    json_string(p->categorical_values.v[(size_t)t->values[k]]));
            else {
                fmt_value(p, t->values[k], val, sizeof val);
                json_object_set_new(hp, p->parameter_name, json_string(val));
            }
        }
        json_t *o = json_pack("{s:s,s:o,s:s,s:b}", "trialId", id, "hyperparameters",
                              hp ? hp : json_object(), "state", state_names[t->state],
                              "isTrialStoppedEarly", t->stopped_early);
        if (!o) continue;
        if (t->has_metric) {
            char step[24];
            snprintf(step, sizeof step, "%lld", (long long)t->step);
            json_object_set_new(
                o, "finalMetric",
                json_pack("{s:s,s:f}", "trainingStep", step, "objectiveValue", t->objective));
            json_t *all = json_array();
            for (size_t k = 0; all && k < t->n_curve; k++) {
                snprintf(step, sizeof step, "%lld", (long long)t->curve_steps[k]);
                json_array_append_new(all, json_pack("{s:s,s:f}", "trainingStep", step,
                                                     "objectiveValue", t->curve_values[k]));
            }
            if (all) json_object_set_new(o, "allMetrics", all);
        }
        if (t->start_ns) {
            rfc3339(t->start_ns, when, sizeof when);
            json_object_set_new(o, "startTime", json_string(when));
        }
        if (t->end_ns) {
            rfc3339(t->end_ns, when, sizeof when);
            json_object_set_new(o, "endTime", json_string(when));
        }
        json_array_append_new(out, o);
    }
out:
    free(r);
    return out;
}
