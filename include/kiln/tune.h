/* kiln/tune.h - hyperparameter studies: the rules of a tuning spec, the
 * trials of a study and the algorithms that choose their values.
 *
 * A tuning job (trainingInput.hyperparameters) runs as trials: each trial is
 * one run of the job's whole replica set with the trial's values appended to
 * its arguments (--NAME=VALUE). This module knows nothing of processes: kilnd
 * asks a study for the next trial, tells it what the trial reported and how
 * it ended, and keeps the study's JSON form in its store.
 *
 * Algorithms (trainingInput.hyperparameters.algorithm):
 *   GRID_SEARCH           every combination, in order (the last parameter
 *                         varies fastest), capped by maxTrials; with
 *                         conditional parameters (parentParameterName) the
 *                         settings of the tree, not the cross product;
 *   RANDOM_SEARCH         values drawn uniformly in each parameter's scaled
 *                         space; trial N's values depend only on the
 *                         study's seed and N (reproducible);
 *   ALGORITHM_UNSPECIFIED Gaussian-process regression with expected
 *                         improvement (src/tune/gp.c) once max(5, params + 2)
 *                         trials have succeeded with a metric, random before.
 *
 * Ownership: a kiln_study owns its trials; pointers returned by
 * kiln_study_trial() stay valid until the next call that adds a trial. */
#ifndef KILN_TUNE_H
#define KILN_TUNE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kiln's limits on a study (AI Platform's own are per project quota). */
#define KILN_TUNE_MAX_TRIALS  1000
#define KILN_TUNE_MAX_PARAMS  64
#define KILN_TUNE_MAX_CHOICES 1000 /* categoricalValues / discreteValues */
#define KILN_TUNE_MAX_DEPTH   8    /* a conditional parameter's parents, and theirs */
#define KILN_TUNE_DEFAULT_TAG "training/hptuning/metric"
#define KILN_TUNE_CURVE_MAX   1000 /* intermediate reports kept per trial */
/* ASHA (earlyStoppingRule: ASHA, a kiln extension): the defaults of
 * ashaReductionFactor and ashaMinSteps, kiln's limit on the first, and the
 * most rungs a study has (min_steps * eta^k stays within int64). */
#define KILN_TUNE_ASHA_ETA       3
#define KILN_TUNE_ASHA_MIN_STEPS 1
#define KILN_TUNE_ASHA_MAX_ETA   1000
#define KILN_TUNE_ASHA_MAX_RUNGS 63

/* Checks every rule of a tuning spec; each violation goes to `d` at its field
 * path (trainingInput.hyperparameters.params[2].maxValue, ...). Returns the
 * number of violations. */
int kiln_tune_check(const kiln_hyperparameter_spec *hp, kiln_diag *d);

/* The scalings, between the unit interval and a parameter's value:
 * UNIT_LINEAR_SCALE (or none) is affine; UNIT_LOG_SCALE is affine in log(x);
 * UNIT_REVERSE_LOG_SCALE mirrors the log scale, so that resolution is finest
 * near maxValue (1 - x near 1 for a momentum). u is clamped to [0, 1]. */
double kiln_tune_from_unit(const char *scale_type, double min, double max, double u);
double kiln_tune_to_unit(const char *scale_type, double min, double max, double x);

typedef enum kiln_trial_state {
    KILN_TRIAL_QUEUED = 0, /* chosen, waiting to (re)start */
    KILN_TRIAL_RUNNING,
    KILN_TRIAL_SUCCEEDED,
    KILN_TRIAL_FAILED,
    KILN_TRIAL_CANCELLED,
} kiln_trial_state;

/* An event file a trial is read from (persisted while the trial runs). */
typedef struct kiln_tb_file {
    char *path;
    long offset; /* the whole records read so far */
    bool dead;   /* corrupt: not read any more */
} kiln_tb_file;

typedef struct kiln_trial {
    int id;         /* 1, 2, ... */
    double *values; /* per parameter: the value, or the category's index;
                     * NAN: a conditional parameter the trial does not have */
    kiln_trial_state state;
    bool has_metric; /* objective and step hold the last report (with
                      * BEST_MEASUREMENT: the best by the goal) */
    double objective;
    int64_t step;
    bool stopped_early;
    int64_t start_ns, end_ns;
    size_t n_curve;     /* intermediate reports: (step, value) */
    uint64_t n_reports; /* every report, past KILN_TUNE_CURVE_MAX too */
    int64_t *curve_steps;
    double *curve_values;
    int asha_rungs;   /* ASHA: the rungs it is recorded at (0, 1, ... asha_rungs - 1) */
    bool asha_stop;   /* ASHA: not in the top 1/eta at its last rung: to be stopped */
    long file_offset; /* how far the hypertune file was read (persisted while it runs) */
    kiln_tb_file *tb; /* TensorBoard event files read so far (persisted while it runs) */
    size_t n_tb;
} kiln_trial;

typedef struct kiln_study kiln_study;

/* A study of `hp` (which must have passed kiln_tune_check and outlive the
 * study). The seed makes RANDOM_SEARCH and the model-based search
 * reproducible. NULL on ENOMEM. */
kiln_study *kiln_study_new(const kiln_hyperparameter_spec *hp, uint64_t seed);
void kiln_study_free(kiln_study *s);
/* resumePreviousJobId (resume.c): `prev` is the job it names in the same
 * project (NULL: none), `prev_runtime` its runtime record. It must be a
 * finished tuning job that ran trials, with the same params (in order), goal
 * and metric tag as `hp`. Returns the violations (0 or 1), at the field's
 * path. */
int kiln_tune_check_resume(const kiln_hyperparameter_spec *hp, const char *prev_id,
                           const kiln_job *prev, const char *prev_runtime, kiln_diag *d);
/* The study a resumed job starts with: the previous job's, read from its
 * runtime record (its seed and its trials, whose ids the new trials follow).
 * NULL when the record holds none that fits `hp`. */
kiln_study *kiln_study_resume(const kiln_hyperparameter_spec *hp, const char *prev_runtime);

/* The persisted form (new reference) and back. from_json returns NULL on a
 * record that does not fit `hp` (a changed spec) or on ENOMEM. Trials come
 * back in their state (trainingOutput shows a running trial RUNNING), a
 * running trial with how far its hypertune file and event files were read
 * (so that reports go on from there, none lost or counted twice): kilnd
 * adopts a running trial whose replicas still run, and ends the others
 * QUEUED, to run again. */
json_t *kiln_study_to_json(const kiln_study *s);
kiln_study *kiln_study_from_json(const kiln_hyperparameter_spec *hp, const json_t *j);

size_t kiln_study_trial_count(const kiln_study *s);
kiln_trial *kiln_study_trial(kiln_study *s, size_t i);
kiln_trial *kiln_study_find(kiln_study *s, int id);
/* Trials in a given state. */
size_t kiln_study_count(const kiln_study *s, kiln_trial_state st);

/* The next trial to start, marked RUNNING at `now_ns`: a QUEUED one first,
 * else a new one from the algorithm. NULL when there is nothing to start:
 * maxTrials reached, the grid is exhausted, or maxFailedTrials trials failed. */
kiln_trial *kiln_study_next(kiln_study *s, int64_t now_ns);
/* Whether kiln_study_next may give a trial: a QUEUED one, or a new one below
 * maxTrials while the study has not failed out (a grid may still be
 * exhausted). False: asking for quota for a next trial is pointless. */
bool kiln_study_may_start(const kiln_study *s);
/* An intermediate or final report: the objective is the last reported value,
 * or with measurementSelectionType BEST_MEASUREMENT (a kiln extension, from
 * Vertex's studySpec) the best reported value by the goal, and the trial's
 * step that value's step. */
void kiln_study_report(kiln_study *s, kiln_trial *t, int64_t step, double value);
/* A trial's end. QUEUED puts it back to run again later (a drain). */
void kiln_study_end(kiln_study *s, kiln_trial *t, kiln_trial_state st, int64_t now_ns);
/* True when no trial runs or waits and none will be started. */
bool kiln_study_finished(const kiln_study *s);
/* The study's failure limit (maxFailedTrials; 0 means maxTrials). */
bool kiln_study_failed_out(const kiln_study *s);

/* Whether a running trial is to be stopped early. The median stopping rule
 * (as Vizier; earlyStoppingRule unset or MEDIAN): its best value so far is
 * worse than the median, over the SUCCEEDED trials, of their running
 * averages up to the same step. Needs 3 such trials. With ASHA: see below.
 * With the decay-curve rule (earlyStoppingRule DECAY_CURVE, a kiln extension;
 * Vertex's decayCurveStoppingSpec), instead of the median rule: a running
 * trial at step S (its latest report) with best value so far V is projected
 * to end at V + G, where G is the largest gain by the goal (final objective
 * minus the value last reported at or before S) among the SUCCEEDED trials,
 * not stopped early, that reported at or before S and ended past S; it is
 * stopped when even that projection is worse than the best final objective
 * of the SUCCEEDED trials. Needs 3 trials to project from. kiln fits no Gaussian process (as
 * Vertex does): the projection is the most optimistic curve seen so far. */
bool kiln_study_should_stop(const kiln_study *s, const kiln_trial *t);

/* ASHA, asynchronous successive halving (Li et al.), when the spec has
 * enableTrialEarlyStopping and earlyStoppingRule ASHA; it replaces the
 * median rule. Rung k is at step min_steps * eta^k. A report at or past a
 * rung's step records the trial there, with the reported value, in the order
 * reports arrive (a report past several rungs records it at each in turn).
 * The trial may go on past the rung only while it is among the best
 * max(1, floor(n / eta)) of the n trials recorded at that rung so far
 * (itself included; a tie counts for it); otherwise kiln_study_should_stop
 * answers true and it records at no further rung. A trial queued again
 * (to rerun from the start) loses its records. The rungs are persisted with
 * the study. */
bool kiln_study_asha(const kiln_study *s);
/* Rung k's records: how many, and (when ids/values are not NULL) the
 * trial id and value of record i, in the order they were recorded. */
size_t kiln_study_rung(const kiln_study *s, int k, size_t i, int *id, double *value);
/* Why kiln_study_should_stop answered true for `t`, for the job's events. */
void kiln_study_stop_reason(const kiln_study *s, const kiln_trial *t, char *buf, size_t len);

/* "--NAME=VALUE" for each parameter the trial has, appended to `args`. */
kiln_err kiln_trial_args(const kiln_study *s, const kiln_trial *t, kiln_strv *args);
/* Adds what a trial's replicas see to `env` (KEY=VALUE strings): TF_CONFIG's
 * task gets "trial", and CLOUD_ML_TRIAL_ID, CLOUD_ML_HP_METRIC_TAG and
 * CLOUD_ML_HP_METRIC_FILE are set. */
kiln_err kiln_trial_env(const kiln_study *s, const kiln_trial *t, const char *metric_file,
                        kiln_strv *env);

/* Reads the cloudml-hypertune JSON lines that `t`'s program appended to
 * `path` since the last call and reports those for the study's tag. */
void kiln_study_read_hypertune(kiln_study *s, kiln_trial *t, const char *path);

/* ---- TensorBoard event files (tfevents.c) ---- */
#define KILN_TFEVENTS_MAX_RECORD  (1u << 20) /* longer records: a corrupt file */
#define KILN_TFEVENTS_MAX_FILES   64         /* event files read per trial */
#define KILN_TFEVENTS_MAX_DEPTH   3          /* subdirectories searched */
#define KILN_TFEVENTS_MAX_ENTRIES 2000       /* directory entries looked at per read */

typedef void (*kiln_tfevents_fn)(void *ud, int64_t step, double value);
/* Decodes the whole TFRecords at the start of buf[0, len), checking both
 * CRCs, and calls fn for each scalar (a simple_value, or a float or double
 * tensor of one element) whose tag is `tag`, at its Event's step. Returns the
 * bytes of whole records consumed: a record cut short at the end is left for
 * the next call. *corrupt is set when a CRC does not match or a length
 * passes KILN_TFEVENTS_MAX_RECORD (nothing after it is consumed). A record
 * whose protobuf does not decode is skipped. */
size_t kiln_tfevents_scan(const uint8_t *buf, size_t len, const char *tag, kiln_tfevents_fn fn,
                          void *ud, bool *corrupt);
/* Reads on, from where the last call stopped, every event file
 * (*tfevents*) under `dir` (and its subdirectories, KILN_TFEVENTS_MAX_DEPTH
 * deep, KILN_TFEVENTS_MAX_ENTRIES entries in all) that this run of `t` wrote
 * (modified since its start), and reports the scalars tagged with the
 * study's metric tag. A corrupt file is not read any further. */
void kiln_study_read_tfevents(kiln_study *s, kiln_trial *t, const char *dir);

/* trainingOutput.trials as AI Platform shows them, best first by the goal
 * (new reference). */
json_t *kiln_study_output_trials(const kiln_study *s);
const char *kiln_study_metric_tag(const kiln_study *s);
/* The metric tag of a spec: its hyperparameterMetricTag, or
 * KILN_TUNE_DEFAULT_TAG when that is unset or empty (what the study reads,
 * a resumed study compares and the API shows). */
const char *kiln_tune_metric_tag(const kiln_hyperparameter_spec *hp);

#ifdef __cplusplus
}
#endif
#endif
