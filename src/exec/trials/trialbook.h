/* src/exec/trials/trialbook.h - a tuning job's trials, decided apart from
 * their placement.
 *
 * The supervisor (src/exec/supervisor/trials.c) only places and launches a
 * tuning job's trials, on kiln's nodes or as Slurm allocations; what the
 * trials are, what they reported, whether one stops early and how the job
 * ends are decided here, over the study of src/tune. This module knows
 * nothing of processes, Slurm jobs or the supervisor's structures: it reads the files a trial's
 * program writes (its hypertune file, its TensorBoard event files) under the job's directory, which
 * must therefore be on a file system kilnd sees (on a cluster: shared with the nodes,
 * docs/slurm.md). */
#ifndef KILN_TRIALBOOK_H
#define KILN_TRIALBOOK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/job.h"
#include "kiln/store.h"
#include "kiln/tune.h"

/* The study a tuning job starts or goes on with, over the spec `job` (which
 * must outlive it): the one kept in its runtime record (`runtime`, its
 * "study"), else the study of resumePreviousJobId (read from the store),
 * else a new one seeded by the job's name (the same job id draws the same
 * trials). With `requeue_running`, trials that were RUNNING are QUEUED to
 * run again with the same values (their processes are gone). NULL with the
 * sentence in `why` (or "" on ENOMEM). */
kiln_study *kiln_trials_open(kiln_store *store, const char *project, const char *job_id,
                             const kiln_job *job, const char *runtime, bool requeue_running,
                             char *why, size_t whylen);

/* A trial's copy of the spec: its jobDir is JOBDIR/TRIAL_ID, as AI Platform
 * gives it (or `job_dir` when given). NULL on ENOMEM. */
kiln_job *kiln_trials_job(const kiln_job *job, int trial, const char *job_dir);

/* The trial's own directory under the job's (`dir`/N: its working directory
 * and where its hypertune file is), and that file. */
void kiln_trials_dir(const char *dir, int trial, char *buf, size_t len);
void kiln_trials_metric_file(const char *dir, int trial, char *buf, size_t len);

/* A trial's new reports: the hypertune file's new lines and the new records
 * of its event files (in its directory, and in `trial_job_dir` when that is
 * a local path elsewhere). True when anything new was read (the caller then
 * saves the study: an adopting kilnd reads on from the recorded offsets). */
bool kiln_trials_read(kiln_study *st, kiln_trial *t, const char *dir, const char *trial_job_dir);

/* A training metrics report of the trial's program (kiln-train's JSON
 * lines on stdout, as src/exec/supervisor/trainmetrics.h turns them into an
 * object): its number for the study's metric tag, as written or in its
 * camelCase form (test_accuracy -> testAccuracy), at its "step" (or
 * "epoch"), is reported to the study. */
void kiln_trials_report(kiln_study *st, kiln_trial *t, const json_t *report);

/* enableTrialEarlyStopping: true when running trial `t` is to stop now (the
 * median rule or ASHA), with why in `why`; the trial is marked stopped early
 * and, once its processes are gone, ends SUCCEEDED. */
bool kiln_trials_stop_early(kiln_study *st, kiln_trial *t, const kiln_hyperparameter_spec *hp,
                            char *why, size_t whylen);

/* How many trials may run at once (maxParallelTrials, at least 1). */
int kiln_trials_parallel(const kiln_hyperparameter_spec *hp);

/* The job's end once its study is over and no trial runs: CANCELLED when it
 * was cancelled, SUCCEEDED when a trial succeeded, else FAILED; the message
 * for the job's event (and errorMessage when FAILED) in `msg`. */
kiln_job_state kiln_trials_outcome(const kiln_study *st, bool cancelling, char *msg, size_t len);

/* "SUCCEEDED", "FAILED", "and is queued again" or "CANCELLED": a trial's
 * end in the job's events. */
const char *kiln_trials_end_word(kiln_trial_state end);

#endif
