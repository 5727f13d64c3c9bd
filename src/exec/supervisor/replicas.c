/* src/exec/supervisor/replicas.c - a job's replicas: ports, training metrics, the runtime record.
 */
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

#include "exec/supervisor/fetch.h"
#include "exec/supervisor/supervisor_int.h"

/* ---------- ports: unique across every running job ---------- */

static bool port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int port_take(sup *s)
{
    int n = s->d->port_count;
    for (int k = 0; k < n; k++) {
        int i = (s->port_next + k) % n;
        if (s->port_used[i]) continue;
        if (!port_bindable(s->d->port_base + i)) continue;
        s->port_used[i] = true;
        s->port_next = (i + 1) % n;
        return s->d->port_base + i;
    }
    return -1;
}

void port_give(sup *s, int port)
{
    int i = port - s->d->port_base;
    if (i >= 0 && i < s->d->port_count) s->port_used[i] = false;
}

/* ---------- training metrics ---------- */

/* A training metrics report on stdout (trainmetrics.h): appended with its
 * time and task to DATA/jobs/P/J/metrics.jsonl (the history the dashboard's
 * chart reads) and kept as the job's last report in the runtime record (what
 * trainingOutput and /metrics show). Reports arrive once per epoch, so a
 * store write for each costs nothing that matters. */
static void note_metrics(sup *s, rjob *j, replica *r, const char *m, size_t n)
{
    char path[PATH_MAX + 16], when[32];
    char *txt = NULL;
    int fd = -1;
    json_t *p = kilnd_train_metrics_parse(m, n);

    if (!p) return;
    kiln_format_time(kiln_now_ns(), when);
    json_object_set_new(p, "time", json_string(when));
    json_object_set_new(p, "task", json_string(r->task));
    txt = json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER);
    snprintf(path, sizeof path, "%s/metrics.jsonl", j->dir);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || !txt) goto out;
    size_t len = strlen(txt);
    txt[len] = '\n'; /* json_dumps' NUL becomes the line end: one write per line */
    if (write(fd, txt, len + 1) < 0) goto out;
out:
    if (fd >= 0) close(fd);
    free(txt);
    /* a "done" line carries the final numbers but not the last epoch's loss:
     * merge into what is there rather than replace it */
    if (j->study) trial_metrics(j, p);
    if (!j->metrics) {
        j->metrics = p;
    } else {
        json_object_update(j->metrics, p);
        json_decref(p);
    }
    save_runtime(s, j);
}

/* The monitor writes the replica's stdout lines that may be training metrics
 * reports to STATE.metrics (kiln-monitor.c); kilnd reads what is new there
 * each tick (and once more when the replica has ended). The offset read so
 * far is in the runtime record, so an adopting kilnd neither repeats nor
 * loses a report. The file is the monitor's own, apart from the job's log
 * and its cap: a report past the log cap still counts. */
void pump_metrics(sup *s, rjob *j, replica *r)
{
    char path[PATH_MAX + 80], buf[LINE_MAX_BYTES + 1];
    if (!r->spawned) return;
    snprintf(path, sizeof path, "%s/replicas/%s.metrics", j->dir, r->task);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    for (;;) {
        long long base = r->moff;
        ssize_t n = pread(fd, buf, LINE_MAX_BYTES, (off_t)base);
        if (n <= 0) break;
        size_t start = 0;
        for (size_t i = 0; i < (size_t)n; i++)
            if (buf[i] == '\n') {
                /* the offset past this line is recorded with the report it
                 * carries (note_metrics saves the runtime record) */
                r->moff = base + (long long)i + 1;
                note_metrics(s, j, r, buf + start, i - start);
                start = i + 1;
            }
        if (start == 0) {
            if ((size_t)n < LINE_MAX_BYTES) break; /* a partial line: the rest comes later */
            start = (size_t)n;                     /* longer than any report: skipped */
        }
        r->moff = base + (long long)start;
        if (start < (size_t)n && (size_t)n < LINE_MAX_BYTES) break; /* a partial last line */
    }
    close(fd);
}

/* ---------- the runtime record (for reconcile and for GET) ---------- */

/* Replica i of `j` as the runtime record keeps it: what GET shows, and
 * what the next kilnd needs to adopt it (monitor, slot, metrics offset). */
static json_t *replica_json(sup *s, rjob *j, size_t i)
{
    replica *r = &j->reps[i];
    json_t *g = json_array();
    for (int k = 0; g && k < r->n_gpus; k++)
        json_array_append_new(g, json_integer(r->gpus[k]));
    json_t *o = json_pack("{s:s,s:s,s:i,s:I,s:I,s:o,s:b,s:s}", "task", r->task, "node",
                          s->d->cluster.nodes[r->node].name, "port", r->port, "pid",
                          (json_int_t)(r->alive ? r->h.pid : 0), "startTicks",
                          (json_int_t)(r->alive ? r->h.pid_start : 0), "gpus", g ? g : json_array(),
                          "simulatedGpus", r->simulated && r->n_gpus, "state",
                          r->alive ? "RUNNING" : "EXITED");
    /* what the next kilnd needs to adopt the replica (monitor, slot) */
    const kiln_slot *sl = &j->pl.slots[i];
    json_t *devs = json_array(), *uuids = json_array();
    for (int k = 0; devs && k < sl->n_devs; k++)
        json_array_append_new(devs, json_integer(sl->devs[k]));
    /* which GPUs by identity: the model it got (nvidia.com/gpu asks for any)
     * and the UUIDs a restarted kilnd claims again, whatever order NVML
     * lists them in then */
    const kiln_node *node = sl->node < s->d->cluster.n ? &s->d->cluster.nodes[sl->node] : NULL;
    for (int k = 0; node && uuids && k < sl->n_devs; k++)
        json_array_append_new(uuids, json_string(node->devs[sl->devs[k]].uuid));
    if (o && node && sl->n_devs > 0) {
        const kiln_device *d0 = &node->devs[sl->devs[0]];
        json_object_set_new(o, "gpuType", json_string(d0->type));
        if (d0->model) json_object_set_new(o, "gpuModel", json_string(d0->model));
        json_object_set(o, "gpuUuids", uuids);
    }
    json_decref(uuids);
    json_t *a = json_pack(
        "{s:s,s:i,s:s,s:I,s:I,s:s,s:o,s:i,s:f,s:b,s:b,s:i}", "role", kiln_role_name(r->role),
        "index", r->index, "executor", kiln_exec_kind_name(r->kind), "monitor",
        (json_int_t)(r->alive ? r->h.monitor : 0), "monitorStart",
        (json_int_t)(r->alive ? r->h.monitor_start : 0), "container", r->h.name, "devs",
        devs ? devs : json_array(), "vcpus", sl->vcpus, "memoryGb", sl->memory_gb, "dropped",
        r->dropped, "started", r->started, "restarts", r->restarts);
    if (a && r->leaving) json_object_set_new(a, "leaving", json_true());
    /* not started yet (an MPIJob launcher waiting for its workers) */
    if (a && !r->spawned && !r->dropped) json_object_set_new(a, "unspawned", json_true());
    /* placed by Slurm: the allocation and component it is a step of */
    if (a && sl->alloc > 0) {
        json_object_set_new(a, "slurmAllocation", json_integer(sl->alloc));
        json_object_set_new(a, "slurmComponent", json_integer(sl->alloc_part));
    }
    if (a) json_object_set_new(a, "code", json_integer(r->code));
    if (a) json_object_set_new(a, "metricsOffset", json_integer(r->moff));
    /* a tuning job's replicas say whose trial they are */
    if (a && j->study) json_object_set_new(a, "trial", json_integer(j->trial));
    /* for the dashboard: how this replica ended (its restarts alone are
     * "restarts"; group restarts are the job's kilnStatus.restarts) */
    if (a && !r->alive && r->spawned && !r->failed)
        json_object_set_new(a, "exitCode", json_integer(r->code));
    if (o && a) json_object_update(o, a);
    json_decref(a);
    return o;
}

/* A tuning job's runtime record: its study, and the replicas of every trial
 * running now (each with "trial"), with what each trial's run needs to be
 * adopted ("trialRuns": its id, start, RUNNING flag, jobDir, last report).
 * One snapshot: the study's reports and read offsets match the replicas'
 * metrics offsets, so that an adopting kilnd neither loses nor repeats a
 * report. */
void study_save_runtime(sup *s, tstudy *st)
{
    json_t *reps = json_array(), *runs = json_array();
    for (rjob *j = s->jobs; reps && runs && j; j = j->next) {
        if (j->study != st) continue;
        for (size_t i = 0; i < j->n; i++) {
            json_t *o = replica_json(s, j, i);
            if (o) json_array_append_new(reps, o);
        }
        const char *jd = j->job ? j->job->training_input.job_dir : NULL;
        json_t *run = json_pack("{s:i,s:I,s:b}", "trial", j->trial, "start",
                                (json_int_t)j->start_ns, "running", j->running);
        if (run && jd) json_object_set_new(run, "jobDir", json_string(jd));
        if (run && j->metrics) json_object_set(run, "metrics", j->metrics);
        if (run) json_array_append_new(runs, run);
    }
    json_t *root = json_pack("{s:o,s:o,s:o}", "replicas", reps ? reps : json_array(), "trialRuns",
                             runs ? runs : json_array(), "study", kiln_study_to_json(st->st));
    char *txt = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    kiln_store_job_set_runtime(s->d->store, st->project, st->job_id, 0, 0, txt);
    free(txt);
    json_decref(root);
}

void save_runtime(sup *s, rjob *j)
{
    if (j->study) {
        study_save_runtime(s, j->study);
        return;
    }
    json_t *reps = json_array();
    for (size_t i = 0; reps && i < j->n; i++) {
        json_t *o = replica_json(s, j, i);
        if (o) json_array_append_new(reps, o);
    }
    json_t *root =
        json_pack("{s:o,s:b}", "replicas", reps ? reps : json_array(), "running", j->running);
    if (root && j->metrics) json_object_set(root, "metrics", j->metrics);
    /* being preempted (admit.c): the next kilnd finishes the stop */
    if (root && j->preempted) json_object_set(root, "preempting", j->preempted);
    json_t *gu = root ? gpu_usage_json(j) : NULL;
    if (gu) json_object_set_new(root, "gpuUsage", gu);
    json_t *xt = root ? xtol_json(j) : NULL; /* its flavors' tolerations (evict.c) */
    if (xt) json_object_set_new(root, "flavorTolerations", xt);
    if (root && j->elastic) {
        int cur = 0;
        for (size_t i = 0; i < j->n; i++)
            cur += !j->reps[i].dropped && j->reps[i].alive &&
                   (j->reps[i].role == KILN_ROLE_WORKER ||
                    (j->wo && j->reps[i].role == KILN_ROLE_MASTER));
        json_object_set_new(root, "elasticWorkers",
                            json_pack("{s:i,s:i,s:i}", "current", cur, "wanted",
                                      j->hpa ? hpa_wanted(j) : j->el_max, "min", j->el_min));
        json_t *hpa = hpa_json(j);
        if (hpa) json_object_set_new(root, "autoscaler", hpa);
    }
    char *txt = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    kiln_store_job_set_runtime(s->d->store, j->project, j->job_id, j->restarts, j->failures, txt);
    free(txt);
    json_decref(root);
}

/* The runtime record of a job that is requeued (drain, kilnd restart): no
 * replicas, but the last training metrics report stays, so that the job's
 * trainingOutput keeps it until the job reports again. NULL when there is
 * none; the caller frees the text. */
char *runtime_for_requeue(json_t *metrics, json_t *study, json_t *gpu_usage)
{
    if (!metrics && !study && !gpu_usage) return NULL;
    json_t *o = json_object();
    if (o && metrics) json_object_set(o, "metrics", metrics);
    if (o && study) json_object_set(o, "study", study);            /* the trials so far stay */
    if (o && gpu_usage) json_object_set(o, "gpuUsage", gpu_usage); /* GPU-hours go on adding */
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return txt;
}

/* The object a runtime record keeps under `key` ("metrics": the last report,
 * "study": the trials so far) as a new reference, or NULL. */
json_t *runtime_kept(const char *runtime, const char *key)
{
    json_t *rt = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *m = json_object_get(rt, key);
    m = json_is_object(m) ? json_incref(m) : NULL;
    json_decref(rt);
    return m;
}

/* Kills the process groups a runtime record names, when they are still the
 * same processes (pid + start time), and waits for them to go. */
void kill_recorded(const char *runtime)
{
    json_t *root = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *reps = json_object_get(root, "replicas"), *r;
    size_t i;
    json_array_foreach(reps, i, r)
    {
        pid_t pid = (pid_t)json_integer_value(json_object_get(r, "pid"));
        uint64_t st = (uint64_t)json_integer_value(json_object_get(r, "startTicks"));
        if (pid <= 0) continue;
        uint64_t now_st = kiln_proc_start_time(pid);
        /* The leader itself died with kilnd (PDEATHSIG); what may be left is
         * its group (children of a shell). A live process with that pid but
         * another start time is someone else: leave it. With no process of
         * that pid, a group of that id can only be the old one (a pid is not
         * reused while a group carries its number). */
        if (now_st == st || now_st == 0) {
            if (kill(-pid, SIGKILL) < 0 && now_st == st) kill(pid, SIGKILL);
        }
    }
    json_decref(root);
}

/* ---------- starting and stopping a job's replicas ---------- */

void replica_from_slot(sup *s, replica *r, const kiln_slot *sl)
{
    const kiln_node *node = &s->d->cluster.nodes[sl->node];
    *r = (replica){.role = sl->role, .index = sl->index, .node = sl->node, .n_gpus = sl->n_devs};
    r->h.life_fd = -1;
    kiln_exec_task_name(r->role, r->index, r->task);
    for (int k = 0; k < sl->n_devs; k++) {
        r->gpus[k] = node->devs[sl->devs[k]].index;
        r->simulated |= node->devs[sl->devs[k]].simulated;
    }
}

void rjob_elastic(rjob *j, int64_t now)
{
    const kiln_pytorch_job *pt = &j->job->training_input.pytorch_job;
    if (!j->job->training_input.has_pytorch_job || !pt->has_elastic_policy) return;
    j->elastic = true;
    j->wo = pt->workers_only ? 1 : 0;
    j->el_min = (int)pt->elastic_policy.min_replicas;
    j->el_max = (int)pt->elastic_policy.max_replicas;
    j->grow_at_ns = now + 1000000000LL;
    int workers = 0; /* as placed (adopted: those still in the job) */
    for (size_t i = 0; i < j->pl.n; i++)
        workers += j->pl.slots[i].node != (size_t)-1 && /* not a dropped one */
                   (j->pl.slots[i].role == KILN_ROLE_WORKER ||
                    (j->wo && j->pl.slots[i].role == KILN_ROLE_MASTER));
    hpa_start(j, workers);
}

/* Lets go of a replica's monitor (its life pipe); the monitor runs on. */
void close_replica(sup *s, rjob *j, replica *r)
{
    if (r->h.life_fd >= 0) close(r->h.life_fd);
    r->h.life_fd = -1;
    (void)s;
    (void)j;
}

void rjob_free(sup *s, rjob *j)
{
    if (!j) return;
    if (j->fetch) { /* kilnd stopping mid-fetch: the next kilnd requeues the job */
        kilnd_fetch_cancel(j->fetch);
        kilnd_fetch_end(j->fetch, NULL, NULL, NULL, 0);
    }
    for (size_t i = 0; i < j->n; i++) {
        close_replica(s, j, &j->reps[i]);
        if (j->reps[i].port > 0) port_give(s, j->reps[i].port);
    }
    if (j->pl.n) place_release(s, &j->pl);
    kiln_placement_free(&j->pl);
    if (j->log_fd >= 0) close(j->log_fd);
    free(j->reps);
    free(j->project);
    free(j->job_id);
    free(j->after_msg);
    hpa_free(j);
    json_decref(j->metrics);
    json_decref(j->preempted);
    tolerations_free(&j->xtol, &j->n_xtol);
    kiln_job_free(j->job);
    free(j);
}
