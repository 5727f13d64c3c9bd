/* roundtrip.h - the property every Job front end's fuzz target checks: a
 * job that decoded must survive encode -> decode unchanged, through JSON and
 * through YAML. A libFuzzer target defines DECODE and includes this file. */
#ifndef KILN_FUZZ_ROUNDTRIP_H
#define KILN_FUZZ_ROUNDTRIP_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"

static void round_trip(const kiln_job *job)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *a = NULL, *b = NULL;
    char *js = kiln_job_to_json(job, KILN_ENC_COMPACT);
    char *ys = kiln_job_to_yaml(job);
    if (!js || !ys) abort();
    if (kiln_job_from_json(js, strlen(js), &a, &d) != KILN_OK || !kiln_job_equal(job, a)) abort();
    if (kiln_job_from_yaml(ys, strlen(ys), &b, &d) != KILN_OK || !kiln_job_equal(job, b)) abort();
    kiln_job_free(a);
    kiln_job_free(b);
    free(js);
    free(ys);
    kiln_diag_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    if (DECODE((const char *)data, size, &job, &d) == KILN_OK) round_trip(job);
    kiln_job_free(job);
    kiln_diag_free(&d);
    return 0;
}
#endif
