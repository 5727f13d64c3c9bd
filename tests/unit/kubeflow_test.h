/* tests/unit/kubeflow_test.h - decode, expect_bad and kubeflow_example for
 * the tests of the Kubeflow front ends and of what their replicas see
 * (test_tfjob.c, test_kfkinds.c, test_mpijob.c, tests/service/test_kfenv.c
 * ...), header only: a Kubeflow file is read by its kind
 * (kiln_job_from_kubeflow), as `--tfjob` does. static inline, so that a
 * test that uses some of them is not warned of the others. */
#ifndef KILN_KUBEFLOW_TEST_H
#define KILN_KUBEFLOW_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "spec/tree.h"
#include "test.h"

static inline kiln_job *decode(const char *yaml, kiln_diag *d, kiln_err *errp)
{
    kiln_job *job = NULL;
    kiln_err err = kiln_job_from_kubeflow(yaml, strlen(yaml), &job, d);
    if (errp) *errp = err;
    CHECK((err == KILN_OK) == (job != NULL));
    return job;
}

/* expects a failed decode with a violation on `field` containing `needle` */
static inline void expect_bad(const char *yaml, const char *field, const char *needle)
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

/* tests/data/kubeflow/NAME decoded (NULL, with the reason on stderr, when
 * it cannot be read or does not decode: counted as a failed check). */
static inline kiln_job *kubeflow_example(const char *name)
{
    char path[512], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tests/data/kubeflow/%s", KILN_SOURCE_DIR, name);
    CHECK_MSG(kiln__read_file(path, KILN_SPEC_MAX_BYTES, &buf, &len) == KILN_OK, "read %s", path);
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = buf ? decode(buf, &d, NULL) : NULL;
    CHECK_MSG(job != NULL, "%s does not decode", name);
    if (!job) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    free(buf);
    return job;
}

#endif
