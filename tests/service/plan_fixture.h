/* tests/service/plan_fixture.h - the replica plan the scheduler's test and
 * benchmark place (test_sched, bench/sched_bench.c): n1-standard-8 machines
 * (8 vCPUs, 30 GB) with `per` accelerators of type `acc` each. */
#ifndef KILN_TEST_PLAN_FIXTURE_H
#define KILN_TEST_PLAN_FIXTURE_H

#include <stdint.h>

#include "kiln/sched.h"

static inline kiln_replica_plan plan(kiln_role r, int64_t count, const char *acc, int64_t per)
{
    return (kiln_replica_plan){.role = r,
                               .machine_type = "n1-standard-8",
                               .count = count,
                               .accelerator_type = acc,
                               .accelerators_per_replica = per,
                               .vcpus = 8,
                               .memory_gb = 30};
}

#endif
