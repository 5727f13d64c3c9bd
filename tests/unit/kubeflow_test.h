/* tests/unit/kubeflow_test.h - decode and expect_bad for the Kubeflow front
 * ends' tests (test_tfjob.c, test_pytorchjob.c), header only: a Kubeflow
 * file is read by its kind (kiln_job_from_kubeflow), as `--tfjob` does. */
#ifndef KILN_KUBEFLOW_TEST_H
#define KILN_KUBEFLOW_TEST_H

#include <stdio.h>
#include <string.h>

#include "kiln/job.h"
#include "test.h"

static kiln_job *decode(const char *yaml, kiln_diag *d, kiln_err *errp)
{
    kiln_job *job = NULL;
    kiln_err err = kiln_job_from_kubeflow(yaml, strlen(yaml), &job, d);
    if (errp) *errp = err;
    CHECK((err == KILN_OK) == (job != NULL));
    return job;
}

/* expects a failed decode with a violation on `field` containing `needle` */
static void expect_bad(const char *yaml, const char *field, const char *needle)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err err;
    kiln_job *job = decode(yaml, &d, &err);
    CHECK_MSG(job == NULL && err != KILN_OK, "%s: decoded", field);
    bool found = false;
    for (size_t i = 0; i < d.n; i++)
        if (strcmp(d.v[i].field, field) == 0 && strstr(d.v[i].description, needle)) found = true;
    CHECK_MSG(found, "no violation on '%s' containing '%s'", field, needle);
    if (!found) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

#endif
