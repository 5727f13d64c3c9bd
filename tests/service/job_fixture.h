/* tests/service/job_fixture.h - the small valid job the store's tests and
 * benchmark create (test_store, test_store_index, bench/store_bench.c):
 * BASIC in us-central1, with a priority and a label where given. */
#ifndef KILN_TEST_JOB_FIXTURE_H
#define KILN_TEST_JOB_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/job.h"

/* Job `id`; prio 0 leaves scheduling unset; label k=v where k is not NULL.
 * NULL where it cannot be allocated. */
static inline kiln_job *mkjob(const char *id, int64_t prio, const char *k, const char *v)
{
    kiln_job *j = kiln_job_new();
    if (!j) return NULL;
    kiln_set_str(&j->job_id, id);
    j->has_training_input = true;
    kiln_set_str(&j->training_input.scale_tier, "BASIC");
    kiln_set_str(&j->training_input.region, "us-central1");
    if (prio) {
        j->training_input.has_scheduling = true;
        j->training_input.scheduling.priority = prio;
    }
    if (k) kiln_map_set(&j->labels, k, v);
    return j;
}

#endif
