/* test_tune_helpers.h - a valid job around a hyperparameters object given as
 * JSON text, so that each tuning test's study reads as a user writes it
 * (test_tune, test_tfevents*; the tuning benchmarks' tuning_job in
 * bench/tuning_common.h). Needs nothing of test.h. */
#ifndef KILN_TEST_TUNE_HELPERS_H
#define KILN_TEST_TUNE_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"

static inline kiln_job *hpjob(const char *hp)
{
    char buf[4096];
    kiln_job *j = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    snprintf(buf, sizeof buf,
             "{\"jobId\":\"t1\",\"trainingInput\":{\"scaleTier\":\"BASIC\",\"region\":"
             "\"us-central1\",\"pythonModule\":\"m\",\"packageUris\":[\"/p\"],"
             "\"hyperparameters\":%s}}",
             hp);
    if (kiln_job_from_json(buf, strlen(buf), &j, &d) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        fprintf(stderr, "does not decode: %s\n", hp);
        exit(1);
    }
    kiln_diag_free(&d);
    return j;
}

/* One DOUBLE parameter x in [0, 1], the given goal, metric tag and maxTrials:
 * the study an event file test reads into. */
static inline kiln_job *hpjob_x(const char *goal, const char *tag, int max_trials)
{
    char hp[512];
    snprintf(hp, sizeof hp,
             "{\"goal\":\"%s\",\"hyperparameterMetricTag\":\"%s\",\"maxTrials\":%d,\"params\":"
             "[{\"parameterName\":\"x\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1}]}",
             goal, tag, max_trials);
    return hpjob(hp);
}

#endif
