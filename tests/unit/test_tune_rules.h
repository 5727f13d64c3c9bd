/* test_tune_rules.h - the two checks of a tuning spec's rules that
 * test_tune and test_tune_cond make: a hyperparameters object (JSON text)
 * is valid, or has exactly one violation at a field path. */
#ifndef KILN_TEST_TUNE_RULES_H
#define KILN_TEST_TUNE_RULES_H

#include "test.h"
#include "test_catalog_helpers.h"
#include "test_tune_helpers.h"

/* One violation, at `field`, for the hyperparameters `hp`. */
static inline void bad(const kiln_catalog *c, kiln_diag *d, const char *hp, const char *field)
{
    kiln_job *j = hpjob(hp);
    size_t n = run_validate(c, j, d);
    CHECK_MSG(n == 1 && kiln_diag_has(d, field), "%s: expected one violation at %s", hp, field);
    if (n != 1 || !kiln_diag_has(d, field)) kiln_diag_print(d, stderr);
    kiln_job_free(j);
}

/* No violation for the hyperparameters `hp`. */
static inline void good(const kiln_catalog *c, kiln_diag *d, const char *hp)
{
    kiln_job *j = hpjob(hp);
    size_t n = run_validate(c, j, d);
    CHECK_MSG(n == 0, "%s: expected valid", hp);
    if (n) kiln_diag_print(d, stderr);
    kiln_job_free(j);
}

#endif
