/* bench/tuning_common.h - what the two tuning benchmarks (tuning_search.c,
 * tuning_kiln_train.c) share: the job around a hyperparameters object, and
 * the medians over study seeds of the best value after each trial, with the
 * trial at which the model-based search's median reaches random search's,
 * and the loop that drives one study.
 * Header-only (static functions): each benchmark is one program. */
#ifndef KILN_BENCH_TUNING_COMMON_H
#define KILN_BENCH_TUNING_COMMON_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "kiln/tune.h"
#include "../tests/unit/test_tune_helpers.h"

/* A job around `hyperparameters` (JSON text): the tests' hpjob, then checked
 * as kilnd would; a benchmark whose spec does not pass exits 1 with the
 * violations. */
static kiln_job *tuning_job(const char *hyperparameters)
{
    kiln_job *j = hpjob(hyperparameters);
    kiln_diag d = KILN_DIAG_INIT;
    if (kiln_tune_check(&j->training_input.hyperparameters, &d) != 0) {
        kiln_diag_print(&d, stderr);
        exit(1);
    }
    kiln_diag_free(&d);
    return j;
}

static int tuning_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* med[k] = the median over the seeds of best[seed * trials + k]. */
static void tuning_medians(const double *best, int seeds, int trials, double *med)
{
    double *col = malloc((size_t)seeds * sizeof *col);
    if (!col) exit(1);
    for (int k = 0; k < trials; k++) {
        for (int sd = 0; sd < seeds; sd++)
            col[sd] = best[sd * trials + k];
        qsort(col, (size_t)seeds, sizeof *col, tuning_cmp);
        med[k] = seeds % 2 ? col[seeds / 2] : (col[seeds / 2 - 1] + col[seeds / 2]) / 2;
    }
    free(col);
}

/* The first trial count (1-based) at which med[] reaches `target` (at or
 * above it when maximising, at or below otherwise); -1 when it never does. */
static int tuning_reach(const double *med, int trials, double target, bool maximize)
{
    for (int k = 0; k < trials; k++)
        if (maximize ? med[k] >= target : med[k] <= target) return k + 1;
    return -1;
}

/* A trial's objective: its value, or NAN where the trial failed. */
typedef double (*tuning_objective)(kiln_study *s, kiln_trial *t, void *ud);

/* One study of `trials` trials over j's hyperparameters with `seed`, driven
 * as kilnd drives it, one trial at a time: a trial whose value f(s, t, ud) is
 * a number reports it at `step` and SUCCEEDS, one whose value is NAN FAILS.
 * best[k]: the best value after k + 1 trials (the largest where maximize,
 * else the smallest); `none` while no trial has succeeded. */
static void tuning_study(const kiln_job *j, uint64_t seed, int trials, bool maximize, double none,
                         int64_t step, tuning_objective f, void *ud, double *best)
{
    kiln_study *s = kiln_study_new(&j->training_input.hyperparameters, seed);
    double b = none;
    for (int k = 0; k < trials; k++) {
        kiln_trial *t = kiln_study_next(s, k + 1);
        if (!t) {
            fprintf(stderr, "no trial %d\n", k + 1);
            exit(1);
        }
        double y = f(s, t, ud);
        if (isnan(y)) {
            kiln_study_end(s, t, KILN_TRIAL_FAILED, k + 2);
        } else {
            kiln_study_report(s, t, step, y);
            kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, k + 2);
            b = maximize ? fmax(b, y) : fmin(b, y);
        }
        best[k] = b;
    }
    kiln_study_free(s);
}

#endif
