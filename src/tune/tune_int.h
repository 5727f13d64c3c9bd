/* tune_int.h - what the files of src/tune share (internal). */
#ifndef KILN_TUNE_INT_H
#define KILN_TUNE_INT_H

#include "kiln/tune.h"

uint64_t kiln__tune_rng_next(uint64_t *st);
double kiln__tune_uniform(uint64_t *st); /* [0, 1) */
/* How many values a parameter takes (0: continuous). */
size_t kiln__tune_choices(const kiln_parameter_spec *p);
/* A parameter's value for u in [0, 1] (categorical: the index), and back. */
double kiln__tune_value(const kiln_parameter_spec *p, double u);
double kiln__tune_unit(const kiln_parameter_spec *p, double v);
/* Conditional parameters (parentParameterName): a trial's value of a
 * parameter it does not have is NAN. kiln__tune_parent: the index of
 * params[i]'s parent, -1 for none (or a name kiln_tune_check refused).
 * kiln__tune_active: whether a trial with `values` (its parents' already
 * set) has params[i]. kiln__tune_prune: sets NAN, in order, every value
 * whose parameter the trial does not have, so that parents decide first. */
int kiln__tune_parent(const kiln_hyperparameter_spec *hp, size_t i);
bool kiln__tune_active(const kiln_hyperparameter_spec *hp, size_t i, const double *values);
void kiln__tune_prune(const kiln_hyperparameter_spec *hp, double *values);
/* Grid point k (0-based); false past the end of the grid. */
bool kiln__tune_grid(const kiln_hyperparameter_spec *hp, uint64_t k, double *out);
void kiln__tune_random(const kiln_hyperparameter_spec *hp, uint64_t *rng, double *out);
/* Gaussian-process regression with expected improvement (gp.c) over the
 * trials in `done`; false while there are too few of them. */
bool kiln__tune_gp(const kiln_hyperparameter_spec *hp, const kiln_trial *const *done, size_t n,
                   bool maximize, uint64_t *rng, double *out);
/* gp.c's linear algebra, row-major n x n. kiln__tune_cholesky: in place,
 * the lower triangle becomes L with A = L L' (the upper one is left as it
 * was); false when A is not positive definite. The solves work in place on
 * b: L x = b (forward) and L' x = b (backward), reading L's lower triangle. */
bool kiln__tune_cholesky(double *A, size_t n);
void kiln__tune_lsolve(const double *L, size_t n, double *b);
void kiln__tune_ltsolve(const double *L, size_t n, double *b);
/* The spec's goal (unset or anything but MINIMIZE: maximise), as the study
 * and resume.c read it; its metric tag is kiln_tune_metric_tag (kiln/tune.h). */
bool kiln__tune_maximize(const kiln_hyperparameter_spec *hp);
/* Forgets a trial's event files (tfevents.c). */
void kiln__tune_tb_clear(kiln_trial *t);

#endif
