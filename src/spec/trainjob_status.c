/* src/spec/trainjob_status.c - a TrainJob's status conditions as Trainer
 * v2.3 reports them (kiln_trainjob_conditions in kiln/job.h), from kiln's
 * job state. Trainer copies its JobSet's terminal conditions
 * (TR pkg/runtime/framework/plugins/jobset/jobset.go Status):
 *   SUCCEEDED -> Complete, reason AllJobsCompleted (JobSet's)
 *   FAILED    -> Failed, reason FailedJobs (JobSet's), kiln's error message
 * and keeps a Suspended condition for a TrainJob created suspended (TR
 * pkg/controller/trainjob_controller.go setSuspendedCondition): True,
 * reason Suspended, while it is (kiln: it waits for its queue's admission,
 * which is the unsuspend, so until it starts), then False, reason Resumed,
 * from then on, beside the terminal one. A job not created suspended that is
 * queued, running or cancelled has no condition (a TrainJob in flight has
 * none in Trainer either; a cancel is kiln's, not a Trainer state). */
#include <jansson.h>
#include <string.h>

#include "kiln/job.h"

/* Appends {type, status, reason, message[, lastTransitionTime]}; false when
 * out of memory. */
static bool add(json_t *arr, const char *type, const char *status, const char *reason,
                const char *msg, const char *when)
{
    json_t *c = json_pack("{s:s, s:s, s:s, s:s}", "type", type, "status", status, "reason", reason,
                          "message", msg);
    if (c && when && *when && json_object_set_new(c, "lastTransitionTime", json_string(when))) {
        json_decref(c);
        c = NULL;
    }
    return c && json_array_append_new(arr, c) == 0;
}

json_t *kiln_trainjob_conditions(const kiln_job *job)
{
    const kiln_training_input *ti = &job->training_input;
    if (!job->has_training_input || !ti->has_kubeflow_job || !ti->kubeflow_job.kind ||
        strcmp(ti->kubeflow_job.kind, "TrainJob") != 0)
        return NULL;
    json_t *arr = json_array();
    bool ok = arr != NULL;
    if (ok && ti->kubeflow_job.suspend) {
        bool started = job->start_time && *job->start_time;
        ok = started
                 ? add(arr, "Suspended", "False", "Resumed", "TrainJob is resumed", job->start_time)
                 : add(arr, "Suspended", "True", "Suspended", "TrainJob is suspended",
                       job->create_time);
    }
    if (ok && job->state == KILN_STATE_SUCCEEDED)
        ok = add(arr, "Complete", "True", "AllJobsCompleted", "jobset completed successfully",
                 job->end_time);
    else if (ok && job->state == KILN_STATE_FAILED)
        ok = add(arr, "Failed", "True", "FailedJobs",
                 job->error_message && *job->error_message ? job->error_message : "jobset failed",
                 job->end_time);
    if (!ok) {
        json_decref(arr);
        arr = NULL;
    }
    return arr;
}
