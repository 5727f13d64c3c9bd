/* src/exec/trials/trialbook.c - see trialbook.h. */
#include "exec/trials/trialbook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a of the job's name: a study's seed, so that the same job id draws
 * the same trials (and a resumed study carries its own seed). */
static uint64_t study_seed(const char *project, const char *id)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = project; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h;
}

kiln_study *kiln_trials_open(kiln_store *store, const char *project, const char *job_id,
                             const kiln_job *job, const char *runtime, bool requeue_running,
                             char *why, size_t whylen)
{
    const kiln_hyperparameter_spec *hp = &job->training_input.hyperparameters;
    const char *resume = hp->resume_previous_job_id;
    json_t *rt = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *kept = json_object_get(rt, "study");
    kiln_study *st = NULL;
    why[0] = '\0';
    if (json_is_object(kept)) {
        st = kiln_study_from_json(hp, kept);
    } else if (resume && *resume) { /* the previous job's study, checked at create */
        kiln_job_record *prev = NULL;
        if (kiln_store_job_get(store, project, resume, &prev) == KILN_OK)
            st = kiln_study_resume(hp, prev->runtime);
        kiln_job_record_free(prev);
        if (!st)
            snprintf(why, whylen,
                     "resumePreviousJobId: job '%.100s' has no study to resume any more", resume);
    } else {
        st = kiln_study_new(hp, study_seed(project, job_id));
    }
    json_decref(rt);
    /* trials that were running (kilnd restart, drain) run again, same values */
    for (size_t i = 0; st && requeue_running && i < kiln_study_trial_count(st); i++)
        if (kiln_study_trial(st, i)->state == KILN_TRIAL_RUNNING)
            kiln_study_end(st, kiln_study_trial(st, i), KILN_TRIAL_QUEUED, 0);
    return st;
}

kiln_job *kiln_trials_job(const kiln_job *src, int trial, const char *job_dir)
{
    kiln_job *job = kiln_job_clone(src);
    if (!job) return NULL;
    char *jd = job->training_input.job_dir, *tjd = NULL;
    if (job_dir) {
        if (kiln_set_str(&job->training_input.job_dir, job_dir) != KILN_OK) goto fail;
    } else if (jd && *jd &&
               asprintf(&tjd, "%s%s%d", jd, jd[strlen(jd) - 1] == '/' ? "" : "/", trial) >= 0) {
        kiln_err err = kiln_set_str(&job->training_input.job_dir, tjd);
        free(tjd);
        if (err != KILN_OK) goto fail;
    }
    return job;
fail:
    kiln_job_free(job);
    return NULL;
}

void kiln_trials_dir(const char *dir, int trial, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%d", dir, trial);
}

void kiln_trials_metric_file(const char *dir, int trial, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%d/hypertune.metrics", dir, trial);
}

bool kiln_trials_read(kiln_study *st, kiln_trial *t, const char *dir, const char *trial_job_dir)
{
    char path[4200];
    long off = t->file_offset;
    uint64_t reports = t->n_reports;
    kiln_trials_metric_file(dir, t->id, path, sizeof path);
    kiln_study_read_hypertune(st, t, path);
    /* TensorBoard event files: in the trial's directory and in its jobDir
     * (jobDir/N) when that is a local path elsewhere */
    kiln_trials_dir(dir, t->id, path, sizeof path);
    kiln_study_read_tfevents(st, t, path);
    const char *jd = trial_job_dir;
    if (jd && jd[0] == '/' && strncmp(jd, path, strlen(path)) != 0)
        kiln_study_read_tfevents(st, t, jd);
    return t->file_offset != off || t->n_reports != reports;
}

void kiln_trials_report(kiln_study *st, kiln_trial *t, const json_t *report)
{
    const char *tag = kiln_study_metric_tag(st);
    char camel[128];
    size_t n = 0;
    bool up = false;
    for (const char *p = tag; *p && n + 1 < sizeof camel; p++) {
        if (*p == '_' && n > 0) {
            up = true;
            continue;
        }
        camel[n++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
        up = false;
    }
    camel[n] = '\0';
    json_t *v = json_object_get(report, tag);
    if (!json_is_number(v)) v = json_object_get(report, camel);
    json_t *step = json_object_get(report, "step");
    if (!json_is_integer(step)) step = json_object_get(report, "epoch");
    if (json_is_number(v)) kiln_study_report(st, t, json_integer_value(step), json_number_value(v));
}

bool kiln_trials_stop_early(kiln_study *st, kiln_trial *t, const kiln_hyperparameter_spec *hp,
                            char *why, size_t whylen)
{
    if (!hp->enable_trial_early_stopping || t->state != KILN_TRIAL_RUNNING ||
        !kiln_study_should_stop(st, t))
        return false;
    kiln_study_stop_reason(st, t, why, whylen);
    t->stopped_early = true;
    return true;
}

int kiln_trials_parallel(const kiln_hyperparameter_spec *hp)
{
    return hp->max_parallel_trials > 0 ? (int)hp->max_parallel_trials : 1;
}

kiln_job_state kiln_trials_outcome(const kiln_study *st, bool cancelling, char *msg, size_t len)
{
    size_t ok = kiln_study_count(st, KILN_TRIAL_SUCCEEDED);
    size_t failed = kiln_study_count(st, KILN_TRIAL_FAILED);
    if (cancelling) {
        snprintf(msg, len, "Job CANCELLED");
        return KILN_STATE_CANCELLED;
    }
    if (ok) {
        snprintf(msg, len, "Job completed successfully: %zu trials succeeded, %zu failed", ok,
                 failed);
        return KILN_STATE_SUCCEEDED;
    }
    snprintf(msg, len,
             "%zu trials failed and none succeeded (maxFailedTrials reached or every trial "
             "failed)",
             failed);
    return KILN_STATE_FAILED;
}

const char *kiln_trials_end_word(kiln_trial_state end)
{
    return end == KILN_TRIAL_SUCCEEDED ? "SUCCEEDED"
           : end == KILN_TRIAL_FAILED  ? "FAILED"
           : end == KILN_TRIAL_QUEUED  ? "and is queued again"
                                       : "CANCELLED";
}
