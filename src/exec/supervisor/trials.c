/* src/exec/supervisor/trials.c - tuning jobs in the supervisor (placement, ports and
 * spawning are the runner's: runner_int.h).
 *
 * A tuning job is RUNNING as a whole while its trials run; each trial is an
 * rjob of the same job with `trial` set, placed whole like any job, with the
 * study (src/tune) deciding its values. The study lives in the job's runtime
 * record ("study"), so a kilnd restart or a requeue keeps its trials. A
 * kilnd restart adopts the trials that were running, through their
 * replicas' monitors (adopt.c), their reports read on from where the record
 * says; a trial that cannot be adopted, or one running when the job was
 * requeued, starts again with the same values. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "exec/supervisor/pskeys.h"
#include "exec/trials/trialbook.h"
#include "exec/supervisor/trainmetrics.h"
#include "kiln/exec.h"
#include "kiln/objects.h"
#include "kiln/tune.h"
#include "kiln/submit.h" /* kiln_job_program_args */

#include "exec/supervisor/supervisor_int.h"

/* Unlinks t from s->studies when it is there, and frees it (NULL: nothing). */
static void study_free(sup *s, tstudy *t)
{
    if (!t) return;
    for (tstudy **l = &s->studies; *l; l = &(*l)->next)
        if (*l == t) {
            *l = t->next;
            break;
        }
    kiln_study_free(t->st);
    kiln_job_free(t->job);
    free(t->project);
    free(t->job_id);
    free(t);
}

/* Shutdown: the studies still running are kept in their runtime records
 * (the next kilnd goes on with them); only the memory goes. */
void studies_free(sup *s)
{
    while (s->studies)
        study_free(s, s->studies);
}

/* The job's runtime record: the study and its running trials' replicas
 * (replicas.c). */
static void study_save(sup *s, tstudy *t)
{
    study_save_runtime(s, t);
}

/* A tuning job that fits the cluster starts: its study is made (or read
 * back from the runtime record) and the job is RUNNING; start_trials
 * places the trials. */
void study_begin(sup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    const char *id = rec->job->job_id;
    tstudy *t = calloc(1, sizeof *t);
    char msg[300];
    if (!t) goto fail;
    t->project = strdup(rec->project);
    t->job_id = strdup(id);
    t->job = kiln_job_clone(rec->job);
    if (!t->project || !t->job_id || !t->job) goto fail;
    const kiln_hyperparameter_spec *hp = &t->job->training_input.hyperparameters;
    /* kept, resumed or new (trialbook.h); trials that were running (kilnd
     * restart, drain) run again, same values */
    t->st =
        kiln_trials_open(d->store, rec->project, id, t->job, rec->runtime, true, msg, sizeof msg);
    if (!t->st && msg[0]) { /* resumePreviousJobId's study is gone */
        kiln_store_job_transition(d->store, rec->project, id, KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_FAILED, msg, kiln_now_ns(), NULL);
        kiln_jobfiles_event(d->jobfiles, rec->project, id, "ERROR", "Job FAILED: %s", msg);
        study_free(s, t);
        return;
    }
    if (!t->st) goto fail;
    t->next = s->studies;
    s->studies = t;
    study_save(s, t);
    if (kiln_store_job_transition(d->store, rec->project, id, KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_RUNNING, NULL, kiln_now_ns(), NULL) == KILN_OK) {
        kiln_job_record *fresh = NULL;
        if (kiln_store_job_get(d->store, rec->project, id, &fresh) == KILN_OK)
            t->start_ns = fresh->start_ns;
        kiln_job_record_free(fresh);
    }
    kiln_jobfiles_event(
        d->jobfiles, rec->project, id, "INFO",
        "Job RUNNING: a hyperparameter tuning study of %lld trials, %lld at once (%zu "
        "trials kept from before)",
        (long long)(hp->max_trials > 0 ? hp->max_trials : 1),
        (long long)(hp->max_parallel_trials > 0 ? hp->max_parallel_trials : 1),
        kiln_study_trial_count(t->st));
    return;
fail:
    study_free(s, t);
    kiln_store_job_transition(d->store, rec->project, id, KILN_STATE_MASK(PREPARING),
                              KILN_STATE_QUEUED, NULL, kiln_now_ns(), NULL);
}

/* A previous kilnd's tuning job, RUNNING or CANCELLING, whose running
 * trials adopt.c takes over: its study read back from the runtime record,
 * its trials left in their states (the caller requeues the running ones it
 * cannot adopt). NULL when the record holds no study that fits the spec. */
tstudy *study_adopt(sup *s, kiln_job_record *rec)
{
    tstudy *t = calloc(1, sizeof *t);
    json_t *kept = runtime_kept(rec->runtime, "study");
    if (!t || !kept) goto fail;
    t->project = strdup(rec->project);
    t->job_id = strdup(rec->job->job_id);
    t->job = kiln_job_clone(rec->job);
    if (!t->project || !t->job_id || !t->job) goto fail;
    t->st = kiln_study_from_json(&t->job->training_input.hyperparameters, kept);
    if (!t->st) goto fail;
    t->start_ns = rec->start_ns;
    t->cancelling = rec->job->state == KILN_STATE_CANCELLING;
    t->next = s->studies;
    s->studies = t;
    json_decref(kept);
    return t;
fail:
    json_decref(kept);
    study_free(s, t);
    return NULL;
}

/* A trial's copy of the spec: its output directory is JOBDIR/TRIAL_ID, as
 * AI Platform gives it (or `job_dir` when given: the one an adopted trial's
 * replicas were started with). NULL on ENOMEM. */
kiln_job *trial_job(tstudy *st, int trial, const char *job_dir)
{
    return kiln_trials_job(st->job, trial, job_dir);
}

/* The job is over when its study is: SUCCEEDED when a trial succeeded,
 * FAILED when none did, CANCELLED when it was cancelled. */
static void study_end(sup *s, tstudy *t)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();
    char msg[200];
    kiln_job_state end = kiln_trials_outcome(t->st, t->cancelling, msg, sizeof msg);
    study_save(s, t);
    if (kiln_admits(d)) trial_wait_clear(s, t->project, t->job_id);
    if (end == KILN_STATE_CANCELLED) {
        kiln_store_job_transition(d->store, t->project, t->job_id,
                                  KILN_STATE_MASK(CANCELLING) | KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_CANCELLED, NULL, now, NULL);
        kiln_jobfiles_event(d->jobfiles, t->project, t->job_id, "INFO", "%s", msg);
    } else if (end == KILN_STATE_SUCCEEDED) {
        kiln_store_job_transition(d->store, t->project, t->job_id, KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_SUCCEEDED, NULL, now, NULL);
        kiln_jobfiles_event(d->jobfiles, t->project, t->job_id, "INFO", "%s", msg);
    } else {
        kiln_store_job_transition(d->store, t->project, t->job_id, KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_FAILED, msg, now, NULL);
        kiln_jobfiles_event(d->jobfiles, t->project, t->job_id, "ERROR", "Job FAILED: %s", msg);
    }
    study_free(s, t);
}

kiln_err trial_args(rjob *j, kiln_strv *argv)
{
    kiln_trial *t = kiln_study_find(j->study->st, j->trial);
    return t ? kiln_trial_args(j->study->st, t, argv) : KILN_EINVAL;
}

static void trial_metric_file(rjob *j, char *buf, size_t len)
{
    kiln_trials_metric_file(j->dir, j->trial, buf, len);
}

kiln_err trial_env(rjob *j, kiln_strv *env)
{
    char path[PATH_MAX + 48];
    kiln_trial *t = kiln_study_find(j->study->st, j->trial);
    trial_metric_file(j, path, sizeof path);
    return t ? kiln_trial_env(j->study->st, t, path, env) : KILN_EINVAL;
}

/* The trial's new reports (trialbook.h): its hypertune file and its
 * TensorBoard event files, in JOBS/P/ID/N and in its jobDir (jobDir/N,
 * once spawn made it a local path). True when anything was new. */
static bool trial_read(rjob *j, kiln_trial *t)
{
    return kiln_trials_read(j->study->st, t, j->dir,
                            j->job ? j->job->training_input.job_dir : NULL);
}

/* kiln-train's reports on stdout (trainmetrics.h): measured by trialbook.h. */
void trial_metrics(rjob *j, json_t *report)
{
    kiln_trial *t = kiln_study_find(j->study->st, j->trial);
    if (t) kiln_trials_report(j->study->st, t, report);
}

/* Each tick: the hypertune file's new lines, the event files' new records,
 * and the early-stopping rule (median or ASHA). */
void trial_check(sup *s, rjob *j)
{
    if (!j->study || j->after != AS_NONE) return;
    kiln_trial *t = kiln_study_find(j->study->st, j->trial);
    if (!t) return;
    /* new reports are recorded at once, with the offsets they were read up
     * to: an adopting kilnd reads on from there */
    if (trial_read(j, t)) save_runtime(s, j);
    char why[256];
    if (kiln_trials_stop_early(j->study->st, t, &j->study->job->training_input.hyperparameters, why,
                               sizeof why))
        begin_stop(s, j, AS_SUCCEED, "%s", why);
}

/* A trial's replicas are gone: the trial ends in its study, and the job
 * ends when the study does. */
void trial_finish(sup *s, rjob *j)
{
    tstudy *st = j->study;
    kiln_trial *t = kiln_study_find(st->st, j->trial);
    const char *msg = j->after_msg ? j->after_msg : "";
    kiln_trial_state end = KILN_TRIAL_CANCELLED;
    if (j->after == AS_SUCCEED) end = KILN_TRIAL_SUCCEEDED;
    if (j->after == AS_FAIL) end = KILN_TRIAL_FAILED;
    if (j->after == AS_REQUEUE) end = KILN_TRIAL_QUEUED; /* a drain: it runs again later */
    if (j->after == AS_CANCEL || j->after == AS_NONE) st->cancelling = true;
    if (t) trial_read(j, t);
    if (t) kiln_study_end(st->st, t, end, kiln_now_ns());
    st->running--;
    kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id,
                        end == KILN_TRIAL_FAILED ? "ERROR" : "INFO", "Trial %d ended %s%s%s",
                        j->trial, kiln_trials_end_word(end), msg[0] ? ": " : "", msg);
    j->study = NULL; /* the rjob's runtime record is the study's from here */
    study_save(s, st);
    if (st->running == 0 && (st->cancelling || kiln_study_finished(st->st))) study_end(s, st);
}

/* Places and starts one trial of `st`; false when none fits now. */
static bool launch_trial(sup *s, tstudy *st)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    kiln_placement pl = {0};
    char why[512];
    kiln_sched_rules ru;
    kiln_toleration *xtol = NULL; /* admitted: its flavors' tolerations (evict.c) */
    size_t n_xtol = 0;
    size_t np = kiln_catalog_plan(d->catalog, st->job, plans);
    if (np == 0) return false;
    kiln_sched_rules_of(st->job, &ru);
    kiln_err err;
    if (!kiln_study_may_start(st->st)) { /* no next trial: none waits */
        if (kiln_admits(d)) trial_wait_clear(s, st->project, st->job_id);
        return false;
    }
    /* under Slurm each trial is an allocation of its own, named for the
     * trial it will be (the study numbers them in order) */
    char tag[32];
    snprintf(tag, sizeof tag, "-t%zu", kiln_study_trial_count(st->st) + 1);
    place_who who = {st->project, st->job_id, tag, st->job};
    if (kiln_admits(d)) /* each trial is admitted against its job's quota */
        err = admit_trial(s, &who, st->job, plans, np, &pl, &xtol, &n_xtol, why, sizeof why);
    else
        err = place_job(s, &who, plans, np, &ru, &pl, why, sizeof why);
    if (err != KILN_OK) return false;
    kiln_trial *t = kiln_study_next(st->st, kiln_now_ns());
    rjob *j = t ? calloc(1, sizeof *j) : NULL;
    if (j) {
        j->log_fd = -1;
        j->project = strdup(st->project);
        j->job_id = strdup(st->job_id);
        j->reps = calloc(pl.n ? pl.n : 1, sizeof *j->reps);
        j->job = trial_job(st, t->id, NULL);
    }
    if (j) {
        j->xtol = xtol, j->n_xtol = n_xtol; /* the job's from here */
    } else {
        tolerations_free(&xtol, &n_xtol);
    }
    if (!j || !j->project || !j->job_id || !j->reps || !j->job) {
        if (t) kiln_study_end(st->st, t, KILN_TRIAL_QUEUED, 0);
        place_release(s, &pl);
        kiln_placement_free(&pl);
        if (j) rjob_free(s, j);
        return false;
    }
    j->pl = pl;
    j->n = pl.n;
    j->study = st;
    j->trial = t->id;
    j->start_ns = kiln_now_ns();
    j->admit_ns = j->start_ns; /* --queues: victims' order (newest admitted first) */
    st->running++;
    j->next = s->jobs;
    s->jobs = j; /* from here on released through the normal path */
    kiln_jobfiles_dir(d->jobfiles, j->project, j->job_id, j->dir, sizeof j->dir);
    char sub[PATH_MAX + 32];
    snprintf(sub, sizeof sub, "%s/replicas", j->dir);
    kilnd_mkdirs(sub);
    snprintf(sub, sizeof sub, "%s/%d", j->dir, j->trial);
    kilnd_mkdirs(sub);
    /* a trial that runs again (kilnd restart, drain) reports from the start:
     * its previous run's hypertune lines must not count a second time */
    trial_metric_file(j, sub, sizeof sub);
    unlink(sub);
    snprintf(sub, sizeof sub, "%s/log.tsv", j->dir);
    j->log_fd = open(sub, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        char base[48];
        replica_from_slot(s, r, &j->pl.slots[i]);
        snprintf(base, sizeof base, "%s", r->task);
        snprintf(r->task, sizeof r->task, "trial-%d-%.30s", j->trial, base);
        r->port = port_take(s);
        if (r->port < 0) {
            begin_stop(s, j, AS_FAIL, "no free port in %d-%d for the replicas", d->port_base,
                       d->port_base + d->port_count - 1);
            return true;
        }
    }
    kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "INFO",
                        "Trial %d: placed %zu replica%s", j->trial, j->n, j->n == 1 ? "" : "s");
    spawn_attempt(s, j);
    return true;
}

/* Starts trials up to maxParallelTrials for every running study; a study
 * whose job is being cancelled starts none and stops its trials. */
void start_trials(sup *s)
{
    for (tstudy *st = s->studies, *next; st; st = next) {
        next = st->next;
        const kiln_hyperparameter_spec *hp = &st->job->training_input.hyperparameters;
        int par = kiln_trials_parallel(hp);
        if (!st->cancelling) {
            kiln_job_record *r = NULL;
            if (kiln_store_job_get(s->d->store, st->project, st->job_id, &r) == KILN_OK &&
                r->job->state == KILN_STATE_CANCELLING)
                st->cancelling = true;
            kiln_job_record_free(r);
        }
        while (!st->cancelling && st->running < par && !kiln_study_finished(st->st) &&
               launch_trial(s, st)) {
        }
        if (st->running == 0 && (st->cancelling || kiln_study_finished(st->st))) study_end(s, st);
    }
}
