/* src/exec/supervisor/adopt.c - what a previous kilnd left: reconcile and adoption. */
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
#include "exec/supervisor/trainmetrics.h"
#include "kiln/exec.h"
#include "kiln/objects.h"
#include "kiln/tune.h"
#include "kiln/submit.h" /* kiln_job_program_args */

#include "exec/supervisor/supervisor_int.h"

/* A runtime record that names monitors: its replicas can be adopted. */
static bool adoptable(const char *runtime)
{
    json_t *root = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *reps = json_object_get(root, "replicas"), *r;
    size_t i;
    bool any = false;
    /* a tuning job's running trials are adopted too (adopt_study) */
    json_array_foreach(reps, i, r)
    {
        any |= json_integer_value(json_object_get(r, "monitor")) > 0 ||
               json_object_get(r, "executor") != NULL;
    }
    json_decref(root);
    return any;
}

/* Stops the monitors (and their programs) that run under a job's
 * replicas/ directory (those whose task names start with `prefix`, when
 * not NULL: one trial's): a job that cannot be adopted leaves none unseen. */
static void kill_monitors(kilnd *d, const char *project, const char *id, const char *prefix)
{
    char dir[PATH_MAX], rdir[PATH_MAX + 16];
    kiln_strv tasks = {0};
    kiln_jobfiles_dir(d->jobfiles, project, id, dir, sizeof dir);
    snprintf(rdir, sizeof rdir, "%s/replicas", dir);
    if (kiln_exec_list(rdir, &tasks) != KILN_OK) return;
    for (size_t i = 0; i < tasks.n; i++) {
        char state[PATH_MAX + 200];
        if (prefix && strncmp(tasks.v[i], prefix, strlen(prefix)) != 0) continue;
        kiln_exec_handle h;
        snprintf(state, sizeof state, "%s/%s", rdir, tasks.v[i]);
        kiln_exec_adopt(KILN_EXEC_LOCAL, state, NULL, 0, 0, &h);
        FILE *f = NULL;
        char path[PATH_MAX + 220], buf[256];
        int mpid = 0;
        unsigned long long mst = 0;
        snprintf(path, sizeof path, "%s.state", state);
        if ((f = fopen(path, "re"))) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = '\0';
            fclose(f);
            if (sscanf(buf, "monitor %d %llu", &mpid, &mst) == 2 &&
                kiln_proc_start_time(mpid) == mst)
                kill(mpid, SIGKILL);
        }
        kiln_exec_signal(&d->exec, &h, SIGKILL);
    }
    kiln_strv_clear(&tasks);
}

/* Jobs a previous kilnd left PREPARING, RUNNING or CANCELLING. Those whose
 * runtime record names monitors are adopted by the supervisor when it
 * starts (adopt_all). The others (a kilnd that died before it recorded
 * them) lose what runs of them, and are requeued or cancelled. */
void kilnd_reconcile(kilnd *d)
{
    kiln_job_record **v = NULL;
    size_t n = 0;
    int64_t now = kiln_now_ns();
    unsigned mask =
        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);
    if (kiln_store_jobs_by_state(d->store, mask, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++) {
        kiln_job_record *r = v[i];
        const char *id = r->job->job_id;
        if (adoptable(r->runtime)) continue;
        kill_recorded(r->runtime);
        kill_monitors(d, r->project, id, NULL);
        if (r->job->state == KILN_STATE_CANCELLING) {
            kiln_store_job_transition(d->store, r->project, id, KILN_STATE_MASK(CANCELLING),
                                      KILN_STATE_CANCELLED, NULL, now, NULL);
            kiln_jobfiles_event(d->jobfiles, r->project, id, "INFO",
                                "kilnd restarted; Job CANCELLED");
            continue;
        }
        json_t *m = runtime_kept(r->runtime, "metrics"), *st = runtime_kept(r->runtime, "study");
        json_t *gu = runtime_kept(r->runtime, "gpuUsage");
        char *keep = runtime_for_requeue(m, st, gu);
        json_decref(st);
        json_decref(gu);
        kiln_store_job_set_runtime(d->store, r->project, id, r->restarts + 1, r->failures, keep);
        free(keep);
        json_decref(m);
        d->restarts_total[KILND_RESTART_KILND]++;
        kiln_store_job_transition(d->store, r->project, id, mask & ~KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_QUEUED, NULL, now, NULL);
        kiln_jobfiles_event(
            d->jobfiles, r->project, id, "WARNING",
            "kilnd restarted while the job was %s, before its replicas were recorded: "
            "they were stopped and the job is queued again (restart %d)",
            kiln_job_state_name(r->job->state), r->restarts + 1);
    }
    kiln_job_records_free(v, n);
}

static bool role_by_name(const char *name, kiln_role *out)
{
    for (int k = 0; name && k < KILN_ROLE_COUNT; k++)
        if (strcmp(kiln_role_name((kiln_role)k), name) == 0) {
            *out = (kiln_role)k;
            return true;
        }
    return false;
}

static size_t node_by_name(const kilnd *d, const char *name)
{
    for (size_t i = 0; name && i < d->cluster.n; i++)
        if (strcmp(d->cluster.nodes[i].name, name) == 0) return i;
    return (size_t)-1;
}

/* Lets go of an rjob adopt_reps made and that is not adopted after all:
 * its live replicas are killed, its ports (when `ports`: they were marked)
 * given back; its placement was never claimed. */
static void reps_drop(sup *s, rjob *j, bool ports)
{
    for (size_t i = 0; j->reps && i < j->n; i++) {
        if (j->reps[i].alive) rep_signal(s, j, &j->reps[i], SIGKILL);
        if (ports && j->reps[i].port > 0 && !j->reps[i].dropped) port_give(s, j->reps[i].port);
    }
    free(j->reps);
    free(j->pl.slots);
    free(j->project);
    free(j->job_id);
    kiln_job_free(j->job);
    free(j);
}

static void adopt_job_failed(sup *s, kiln_job_record *rec);

/* The rjob of recorded replicas `reps` (one job's, or one trial's): their
 * slots, ports and monitors. NULL when they cannot be adopted (a record
 * kilnd cannot read, a node no longer configured); nothing is marked used
 * then. *adopted counts the replicas whose monitors are taken over, *away
 * those that had ended before and are judged again. */
static rjob *adopt_reps(sup *s, const char *project, const char *job_id, json_t *reps, int *adopted,
                        int *away)
{
    kilnd *d = s->d;
    json_t *o;
    size_t n = json_array_size(reps), idx;
    rjob *j = calloc(1, sizeof *j);
    *adopted = *away = 0;
    if (!j) return NULL;
    j->log_fd = -1;
    if (!n) goto fail;
    j->project = strdup(project);
    j->job_id = strdup(job_id);
    j->reps = calloc(n, sizeof *j->reps);
    j->pl.slots = calloc(n, sizeof *j->pl.slots);
    if (!j->project || !j->job_id || !j->reps || !j->pl.slots) goto fail;
    j->pl.n = j->n = n;
    kiln_jobfiles_dir(d->jobfiles, j->project, j->job_id, j->dir, sizeof j->dir);
    json_array_foreach(reps, idx, o)
    {
        replica *r = &j->reps[idx];
        kiln_slot *sl = &j->pl.slots[idx];
        r->h.life_fd = -1;
        if (!role_by_name(json_string_value(json_object_get(o, "role")), &r->role)) goto fail;
        r->index = (int)json_integer_value(json_object_get(o, "index"));
        r->node = node_by_name(d, json_string_value(json_object_get(o, "node")));
        if (r->node == (size_t)-1) goto fail; /* the node config changed */
        r->port = (int)json_integer_value(json_object_get(o, "port"));
        r->dropped = json_is_true(json_object_get(o, "dropped"));
        r->restarts = (int)json_integer_value(json_object_get(o, "restarts"));
        r->simulated = json_is_true(json_object_get(o, "simulatedGpus"));
        r->code = (int)json_integer_value(json_object_get(o, "code"));
        r->moff = (long long)json_integer_value(json_object_get(o, "metricsOffset"));
        /* a trial's task names carry the trial ("trial-3-master-replica-0") */
        const char *task = json_string_value(json_object_get(o, "task"));
        if (json_object_get(o, "trial") && task)
            snprintf(r->task, sizeof r->task, "%s", task);
        else
            kiln_exec_task_name(r->role, r->index, r->task);
        json_t *g = json_object_get(o, "gpus"), *devs = json_object_get(o, "devs");
        json_t *uuids = json_object_get(o, "gpuUuids");
        r->n_gpus = (int)json_array_size(g);
        if (r->n_gpus > KILN_MAX_REPLICA_DEVICES) goto fail;
        for (int k = 0; k < r->n_gpus; k++) {
            r->gpus[k] = (int)json_integer_value(json_array_get(g, (size_t)k));
            sl->devs[k] = (int)json_integer_value(json_array_get(devs, (size_t)k));
            /* the same GPUs by UUID: NVML may list them in another order
             * now (a GPU gone, a driver reloaded); one no longer there
             * cannot be claimed, and the job is queued again */
            const char *u = json_string_value(json_array_get(uuids, (size_t)k));
            if (!u || r->dropped) continue;
            const kiln_node *node = &d->cluster.nodes[r->node];
            long at = -1;
            for (size_t q = 0; q < node->n_devs && at < 0; q++)
                if (strcmp(node->devs[q].uuid, u) == 0) at = (long)q;
            if (at < 0) goto fail;
            j->gpus_moved |= sl->devs[k] != (int)at;
            sl->devs[k] = (int)at;
            r->gpus[k] = node->devs[at].index;
        }
        sl->n_devs = r->n_gpus;
        sl->role = r->role;
        sl->index = r->index;
        sl->node = r->dropped ? (size_t)-1 : r->node;
        sl->alloc = (long)json_integer_value(json_object_get(o, "slurmAllocation"));
        sl->alloc_part = json_object_get(o, "slurmComponent")
                             ? (int)json_integer_value(json_object_get(o, "slurmComponent"))
                             : -1;
        sl->vcpus = (int)json_integer_value(json_object_get(o, "vcpus"));
        sl->memory_gb = json_number_value(json_object_get(o, "memoryGb"));
        const char *ex = json_string_value(json_object_get(o, "executor"));
        r->kind = ex && strcmp(ex, "container") == 0 ? KILN_EXEC_CONTAINER : KILN_EXEC_LOCAL;
        pid_t mon = (pid_t)json_integer_value(json_object_get(o, "monitor"));
        uint64_t mst = (uint64_t)json_integer_value(json_object_get(o, "monitorStart"));
        char state[PATH_MAX + 64];
        snprintf(state, sizeof state, "%s/replicas/%s", j->dir, r->task);
        kiln_exec_adopt(r->kind, state, json_string_value(json_object_get(o, "container")), mon,
                        mst, &r->h);
        r->started = json_is_true(json_object_get(o, "started"));
        /* a drain's leaver keeps its SIGKILL, one grace period from now */
        r->leaving = json_is_true(json_object_get(o, "leaving"));
        if (r->leaving) r->kill_at_ns = kiln_now_ns() + (int64_t)d->grace_ms * 1000000;
        if (mon > 0 && !r->dropped) {
            r->alive = r->spawned = true; /* the first tick's watch() says if it still runs */
            ++*adopted;
        } else if (json_is_true(json_object_get(o, "unspawned"))) {
            /* never started (a waiting MPIJob launcher): nothing to judge;
             * mpijob_adopted starts it when its time comes */
            r->spawned = r->handled = false;
        } else {
            /* it had ended before kilnd went: judged again unless it was a
             * finished worker (its exit decided nothing) */
            r->handled = r->dropped || (r->code == 0 && r->role != KILN_ROLE_MASTER);
            r->spawned = !r->handled;
            *away += !r->handled;
        }
    }
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (r->port > 0 && r->port - d->port_base >= 0 && r->port - d->port_base < d->port_count &&
            !r->dropped)
            s->port_used[r->port - d->port_base] = true;
    }
    return j;
fail:
    reps_drop(s, j, false);
    return NULL;
}

/* The adopted rjob's placement is claimed, its log opened, and it joins
 * the running jobs. */
static void adopt_link(sup *s, rjob *j)
{
    char sub[PATH_MAX + 16];
    pthread_mutex_lock(&s->d->mu);
    kiln_sched_claim(s->d->sched, &j->pl);
    pthread_mutex_unlock(&s->d->mu);
    snprintf(sub, sizeof sub, "%s/log.tsv", j->dir);
    j->log_fd = open(sub, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    j->next = s->jobs;
    s->jobs = j;
}

/* Takes over one job a previous kilnd ran: its placement, ports and
 * replicas, each through its monitor. Exits that happened while kilnd was
 * away are in the monitors' files and are judged on the first tick, with
 * their real codes; a replica whose monitor is gone is judged as killed. */
static void adopt_job(sup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    json_t *root = json_loads(rec->runtime, 0, NULL);
    int adopted = 0, away = 0;
    rjob *j = adopt_reps(s, rec->project, rec->job->job_id, json_object_get(root, "replicas"),
                         &adopted, &away);
    if (!j) goto fail;
    j->job = rec->job;
    rec->job = NULL;
    rjob_elastic(j, kiln_now_ns());
    mpijob_adopted(j);
    j->running =
        json_is_true(json_object_get(root, "running")) || j->job->state == KILN_STATE_RUNNING;
    j->metrics = runtime_kept(rec->runtime, "metrics"); /* trainingOutput keeps the last report */
    gpu_usage_load(j, rec->runtime);
    xtol_load(j, rec->runtime); /* its flavors' tolerations, for evict.c */
    j->start_ns = rec->start_ns;
    j->create_ns = rec->create_ns;
    j->admit_ns = rec->start_ns;
    j->restarts = rec->restarts;
    j->failures = rec->failures;
    adopt_link(s, j);
    kiln_jobfiles_event(
        d->jobfiles, j->project, j->job_id, "INFO",
        "kilnd restarted: adopted the job's %d running replica%s through their monitors "
        "(restarts stay %d); %d that had ended before are judged again",
        adopted, adopted == 1 ? "" : "s", j->restarts, away);
    /* NVML lists its GPUs in another order now: the record says where they are */
    if (j->gpus_moved) save_runtime(s, j);
    /* the previous kilnd was preempting it (admit.c): the stop goes on, and
     * its replicas' exits, SIGTERM's included, requeue it as a preemption */
    json_t *pre = json_object_get(root, "preempting");
    if (json_is_object(pre)) {
        const char *m = json_string_value(json_object_get(pre, "message"));
        j->preempted = json_incref(pre);
        begin_stop(s, j, AS_REQUEUE, "%s", m ? m : "Preempted");
    }
    json_decref(root);
    return;
fail:
    json_decref(root);
    adopt_job_failed(s, rec);
}

/* A job that cannot be adopted: what runs of it is stopped, and it is
 * queued again (restart counted; a tuning job keeps its study). */
static void adopt_job_failed(sup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    kill_recorded(rec->runtime);
    kill_monitors(d, rec->project, rec->job->job_id, NULL);
    int64_t now = kiln_now_ns();
    json_t *st = runtime_kept(rec->runtime, "study");
    json_t *gu = runtime_kept(rec->runtime, "gpuUsage");
    char *keep = runtime_for_requeue(NULL, st, gu);
    json_decref(st);
    json_decref(gu);
    kiln_store_job_set_runtime(d->store, rec->project, rec->job->job_id, rec->restarts + 1,
                               rec->failures, keep);
    free(keep);
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id,
                              KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING),
                              KILN_STATE_QUEUED, NULL, now, NULL);
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(CANCELLING),
                              KILN_STATE_CANCELLED, NULL, now, NULL);
    kiln_jobfiles_event(
        d->jobfiles, rec->project, rec->job->job_id, "WARNING",
        "kilnd restarted and could not adopt the job's replicas (its runtime record or "
        "the node config changed): they were stopped and the job is queued again");
}

/* Kills the replicas in `reps` (recorded pids and one trial's monitors,
 * task names "trial-ID-..."). */
static void kill_trial(kilnd *d, const char *project, const char *id, int trial, json_t *reps)
{
    json_t *o = json_pack("{s:O}", "replicas", reps ? reps : json_array());
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    char prefix[32];
    kill_recorded(txt);
    snprintf(prefix, sizeof prefix, "trial-%d-", trial);
    kill_monitors(d, project, id, prefix);
    free(txt);
    json_decref(o);
}

static json_t *trial_run(json_t *runs, int trial)
{
    json_t *o;
    size_t i;
    json_array_foreach(runs, i, o)
    {
        if (json_integer_value(json_object_get(o, "trial")) == trial) return o;
    }
    return NULL;
}

/* Takes over a tuning job a previous kilnd ran: its study as the runtime
 * record keeps it, and each running trial's replicas through their monitors
 * (one rjob per trial, as launch_trial made them), their reports read on
 * from the recorded offsets. A running trial whose replicas cannot be
 * adopted is stopped and queued again (same values, from the start). */
static void adopt_study(sup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    const char *id = rec->job->job_id;
    tstudy *st = study_adopt(s, rec);
    if (!st) { /* no study that fits: its runs cannot be judged either */
        adopt_job_failed(s, rec);
        return;
    }
    json_t *root = json_loads(rec->runtime, 0, NULL);
    json_t *reps = json_object_get(root, "replicas"), *runs = json_object_get(root, "trialRuns");
    json_t *o;
    size_t k;
    int trials = 0, requeued = 0, replicas = 0;
    /* replicas of a trial the study does not have running: not ours to run */
    json_array_foreach(reps, k, o)
    {
        int tid = (int)json_integer_value(json_object_get(o, "trial"));
        kiln_trial *t = kiln_study_find(st->st, tid);
        if (!t || t->state != KILN_TRIAL_RUNNING) {
            json_t *one = json_pack("[O]", o);
            kill_trial(d, rec->project, id, tid, one);
            json_decref(one);
        }
    }
    for (size_t i = 0; i < kiln_study_trial_count(st->st); i++) {
        kiln_trial *t = kiln_study_trial(st->st, i);
        if (t->state != KILN_TRIAL_RUNNING) continue;
        json_t *sub = json_array(), *run = trial_run(runs, t->id);
        json_array_foreach(reps, k, o)
        {
            if (json_integer_value(json_object_get(o, "trial")) == t->id) json_array_append(sub, o);
        }
        int adopted = 0, away = 0;
        rjob *j = run && json_array_size(sub)
                      ? adopt_reps(s, rec->project, id, sub, &adopted, &away)
                      : NULL;
        if (j) j->job = trial_job(st, t->id, json_string_value(json_object_get(run, "jobDir")));
        if (!j || !j->job) {
            if (j) reps_drop(s, j, true);
            kill_trial(d, rec->project, id, t->id, sub);
            kiln_study_end(st->st, t, KILN_TRIAL_QUEUED, 0);
            kiln_jobfiles_event(
                d->jobfiles, rec->project, id, "WARNING",
                "kilnd restarted and could not adopt trial %d's replicas: they were "
                "stopped and the trial runs again from the start",
                t->id);
            requeued++;
            json_decref(sub);
            continue;
        }
        json_decref(sub);
        j->study = st;
        j->trial = t->id;
        j->start_ns = json_integer_value(json_object_get(run, "start"));
        j->running = json_is_true(json_object_get(run, "running"));
        json_t *m = json_object_get(run, "metrics");
        j->metrics = json_is_object(m) ? json_incref(m) : NULL;
        st->running++;
        adopt_link(s, j);
        kiln_jobfiles_event(
            d->jobfiles, rec->project, id, "INFO",
            "kilnd restarted: adopted trial %d's %d running replica%s through their "
            "monitors; %d that had ended before are judged again",
            t->id, adopted, adopted == 1 ? "" : "s", away);
        trials++;
        replicas += adopted;
    }
    json_decref(root);
    study_save_runtime(s, st);
    kiln_jobfiles_event(
        d->jobfiles, rec->project, id, "INFO",
        "kilnd restarted: the study goes on with %zu trials kept, %d running trial%s "
        "adopted (%d replica%s), %d queued again",
        kiln_study_trial_count(st->st), trials, trials == 1 ? "" : "s", replicas,
        replicas == 1 ? "" : "s", requeued);
}

void adopt_all(sup *s)
{
    kiln_job_record **v = NULL;
    size_t n = 0;
    unsigned mask =
        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);
    if (kiln_store_jobs_by_state(s->d->store, mask, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++)
        if (!adoptable(v[i]->runtime))
            continue;
        else if (v[i]->job->training_input.has_hyperparameters)
            adopt_study(s, v[i]);
        else
            adopt_job(s, v[i]);
    kiln_job_records_free(v, n);
}
