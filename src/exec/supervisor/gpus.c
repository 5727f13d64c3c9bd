/* src/exec/supervisor/gpus.c - what the supervisor does with the GPU
 * watch's news (kiln/devices.h): a failed GPU leaves the scheduler's free
 * devices at once and the job on it is stopped by its restart policy (queued
 * again to run on other GPUs, or FAILED, with a reason naming the GPU and
 * what failed); one put back in service frees up; and every job's GPU time
 * and utilisation are summed for its trainingOutput.
 *
 * The watch covers this machine's GPUs only: cluster node 0 without a node
 * config. GPU time is counted for every replica holding GPUs, simulated
 * ones too (it is time, not telemetry). */
#include <stdio.h>
#include <string.h>

#include "exec/supervisor/supervisor_int.h"

/* Whether slot sl holds device `dev` of node 0. */
static bool holds(const kiln_slot *sl, size_t dev)
{
    if (sl->node != 0) return false;
    for (int k = 0; k < sl->n_devs; k++)
        if (sl->devs[k] == (int)dev) return true;
    return false;
}

/* GPU `dev` of node 0 failed: the job holding it stops, by the restart
 * policy of the replica on it. The replica is not waited for: its GPU is
 * gone, and whatever it does next is not training. */
static void on_failed(sup *s, size_t dev, const kiln_gpu_status *st)
{
    kilnd *d = s->d;
    const kiln_node *n = &d->cluster.nodes[0];
    const kiln_device *dv = &n->devs[dev];
    char what[400];
    snprintf(what, sizeof what, "GPU %d (%s, %s) of node %s failed: %s", dv->index, dv->uuid,
             dv->model ? dv->model : dv->type, n->name, st->why);
    if (st->checking)
        fprintf(stderr, "kilnd: GPU %d (%s) of node %s: out of service while a GPU check runs\n",
                dv->index, dv->uuid, n->name);
    else
        fprintf(stderr, "kilnd: %s; out of service until kiln nodes uncordon %s --gpu %d\n", what,
                n->name, dv->index);
    for (rjob *j = s->jobs; j; j = j->next) {
        if (j->after != AS_NONE) continue;
        for (size_t i = 0; i < j->n; i++) {
            replica *r = &j->reps[i];
            if (r->dropped || !holds(&j->pl.slots[i], dev)) continue;
            const char *pol = kiln_job_restart_policy(j->job, r->role);
            /* a replica that lost its GPU is killed, not failing by itself:
             * every policy but Never retries it (ExitCode: 137 is retried) */
            bool retry = strcmp(pol, "Never") != 0;
            int limit = kiln_job_backoff_limit(j->job);
            kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "ERROR",
                                "%s; the %s replica held it", what, r->task);
            if (retry && !j->study && j->failures < limit) {
                j->gpu_failure = true;
                begin_stop(s, j, AS_REQUEUE,
                           "%s under the %s replica; the job is queued again to run on other "
                           "GPUs (restart policy %s, restart %d of at most %d)",
                           what, r->task, pol, j->failures + 1, limit);
            } else {
                j->fail_reason = KILND_FAIL_GPU;
                begin_stop(s, j, AS_FAIL, "%s under the %s replica (restart policy %s%s)", what,
                           r->task, pol, retry && !j->study ? ", backoff limit reached" : "");
            }
            break;
        }
    }
}

/* The watch's health against the scheduler's: failures go out, returns come back. */
static void reconcile(sup *s)
{
    kilnd *d = s->d;
    const kiln_node *n = &d->cluster.nodes[0];
    for (size_t j = 0; j < n->n_devs; j++) {
        kiln_gpu_status st;
        if (!kiln_gpu_watch_get(d->gpus, j, &st)) continue;
        pthread_mutex_lock(&d->mu);
        bool was = kiln_sched_device_failed(d->sched, 0, j);
        if (was != st.failed) kiln_sched_set_device_failed(d->sched, 0, j, st.failed);
        pthread_mutex_unlock(&d->mu);
        if (st.failed && !was) on_failed(s, j, &st);
        if (!st.failed && was) {
            fprintf(stderr, "kilnd: GPU %d (%s) of node %s is back in service\n", n->devs[j].index,
                    n->devs[j].uuid, n->name);
            s->dirty = true; /* a queued job may fit now */
        }
    }
}

/* GPU j of node 0, queued for a check, leaves the scheduler's free devices
 * now, with its shares and MIG instances (the watch's news follows). Under
 * d->mu. */
static void take_out(kilnd *d, const kiln_node *n, size_t j)
{
    kiln_sched_set_device_failed(d->sched, 0, j, true);
    for (size_t q = 0; q < n->n_devs; q++)
        if ((n->devs[q].share || n->devs[q].mig_profile) && n->devs[q].parent == (int)j)
            kiln_sched_set_device_failed(d->sched, 0, q, true);
}

/* The GPU check before work (kilnd --gpu-check): at the first tick, then
 * every --gpu-check-every seconds, each GPU that holds no replica and is in
 * service is checked; one held now waits for a later round. A check takes
 * the GPU out of service until it passes (kiln_gpu_watch_check). */
static void gpu_checks(sup *s, int64_t now)
{
    kilnd *d = s->d;
    if (!kiln_gpu_watch_has_check(d->gpus) || (s->gpu_check_done && now < s->gpu_check_next_ns))
        return;
    if (s->gpu_check_done && !d->gpu_check_every) return;
    s->gpu_check_done = true;
    s->gpu_check_next_ns = now + (int64_t)d->gpu_check_every * 1000000000;
    const kiln_node *n = &d->cluster.nodes[0];
    for (size_t j = 0; j < n->n_devs; j++) {
        /* a GPU shared through MPS is checked whole, when none of its
         * shares is held; the shares themselves are no GPU to check */
        bool shared = n->devs[j].refused && strstr(n->devs[j].refused, "shared through MPS");
        if ((n->devs[j].refused && !shared) || n->devs[j].share) continue;
        pthread_mutex_lock(&d->mu);
        bool idle =
            !kiln_sched_device_busy(d->sched, 0, j) && !kiln_sched_device_failed(d->sched, 0, j);
        for (size_t q = 0; idle && q < n->n_devs; q++)
            if (n->devs[q].share && n->devs[q].parent == (int)j)
                idle = !kiln_sched_device_busy(d->sched, 0, q) &&
                       !kiln_sched_device_failed(d->sched, 0, q);
        /* queued and out of the scheduler's free devices under the same lock:
         * no replica is placed on it between the test and the check */
        if (idle && kiln_gpu_watch_check(d->gpus, j)) take_out(d, n, j);
        pthread_mutex_unlock(&d->mu);
    }
}

void gpu_tick(sup *s, int64_t now)
{
    kilnd *d = s->d;
    double dt = s->gpu_last_ns && now > s->gpu_last_ns ? (double)(now - s->gpu_last_ns) / 1e9 : 0;
    s->gpu_last_ns = now;
    for (rjob *j = s->jobs; j; j = j->next)
        for (size_t i = 0; i < j->n; i++)
            if (j->reps[i].alive && j->reps[i].started && !j->reps[i].dropped)
                j->gpu_seconds += dt * j->reps[i].n_gpus;
    if (!d->gpus) return;
    uint64_t sg = kiln_gpu_watch_sample_gen(d->gpus);
    if (sg != s->gpu_sample_gen) {
        s->gpu_sample_gen = sg;
        for (rjob *j = s->jobs; j; j = j->next)
            for (size_t i = 0; i < j->n; i++) {
                const replica *r = &j->reps[i];
                const kiln_slot *sl = &j->pl.slots[i];
                if (!r->alive || !r->started || r->dropped || sl->node != 0) continue;
                for (int k = 0; k < sl->n_devs; k++) {
                    kiln_gpu_status st;
                    if (!kiln_gpu_watch_get(d->gpus, (size_t)sl->devs[k], &st) || !st.have_util)
                        continue;
                    j->util_sum += st.util_gpu;
                    j->util_n++;
                }
            }
    }
    gpu_checks(s, now);
    uint64_t hg = kiln_gpu_watch_health_gen(d->gpus);
    if (hg != s->gpu_health_gen) {
        s->gpu_health_gen = hg;
        reconcile(s);
    }
}

json_t *gpu_usage_json(const rjob *j)
{
    if (j->gpu_seconds <= 0 && j->util_n == 0) return NULL;
    return json_pack("{s:f,s:f,s:I}", "gpuSeconds", j->gpu_seconds, "utilizationSum", j->util_sum,
                     "utilizationSamples", (json_int_t)j->util_n);
}

void gpu_usage_load(rjob *j, const char *runtime)
{
    json_t *u = runtime_kept(runtime, "gpuUsage");
    j->gpu_seconds = json_number_value(json_object_get(u, "gpuSeconds"));
    j->util_sum = json_number_value(json_object_get(u, "utilizationSum"));
    j->util_n = (long long)json_integer_value(json_object_get(u, "utilizationSamples"));
    json_decref(u);
}
