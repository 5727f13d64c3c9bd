/* src/exec/limits.c - a started job's run limits (kiln/exec.h), decided
 * apart from the supervisor, which only carries the decision out (stop the
 * replicas, record the end). */
#include <stdio.h>

#include "kiln/exec.h"

kiln_exec_limit kiln_exec_limit_passed(const kiln_job *job, int64_t start_ns, int64_t now_ns,
                                       unsigned which, char *why, size_t whylen)
{
    const kiln_training_input *ti = &job->training_input;
    if (!start_ns) return KILN_LIMIT_NONE;
    int64_t ran = now_ns - start_ns;
    if ((which & KILN_LIMIT_MAX_RUNNING_TIME) && ti->has_scheduling &&
        ti->scheduling.has_max_running_time &&
        ran > ti->scheduling.max_running_time.seconds * 1000000000LL +
                  ti->scheduling.max_running_time.nanos) {
        snprintf(why, whylen, "The job ran longer than maxRunningTime (%llds); cancelled",
                 (long long)ti->scheduling.max_running_time.seconds);
        return KILN_LIMIT_MAX_RUNNING_TIME;
    }
    if ((which & KILN_LIMIT_ACTIVE_DEADLINE) && ti->has_run_policy &&
        ti->run_policy.has_active_deadline_seconds &&
        ran > ti->run_policy.active_deadline_seconds * 1000000000LL) {
        snprintf(why, whylen,
                 "DeadlineExceeded: the job was active longer than "
                 "runPolicy.activeDeadlineSeconds (%llds)",
                 (long long)ti->run_policy.active_deadline_seconds);
        return KILN_LIMIT_ACTIVE_DEADLINE;
    }
    return KILN_LIMIT_NONE;
}
