/* src/daemon/supervisor.c - the one thread that runs jobs.
 *
 * Replicas run through the executor (kiln/exec.h): a backend table (local
 * processes, podman containers) where each replica runs under a monitor that
 * writes its log lines and records its exit, so replicas outlive kilnd and
 * are adopted by the next one. Everything that decides stays here, above the
 * backends: restart policy, drain, cancel, gang failure.
 *
 * Each tick (at most 100 ms, sooner when woken or when a monitor reports):
 *   1. poll every replica's monitor (started, exited, gone);
 *   2. reap exited monitors and helpers (zombies only: exits come from the
 *      monitors' files);
 *   3. per running job: cancel requests, deadlines, exits -> restart policy;
 *      jobs that are stopping get SIGKILL once their grace period is over,
 *      and are finished (state written) when their last replica is gone;
 *   4. drains: jobs with replicas on a drained node stop and are requeued;
 *   5. the queue: priority then submit time; each job placed whole or not
 *      at all; a job that can never fit fails at once.
 * The store's state is the truth: every change is a compare-and-set, so an
 * API cancel racing with a placement is decided by the store, not by luck. */
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
#include "daemon/pskeys.h"
#include "daemon/trainmetrics.h"
#include "kiln/exec.h"
#include "kiln/objects.h"
#include "kiln/tune.h"
#include "kiln/submit.h" /* kiln_job_program_args */

#define LINE_MAX_BYTES 8192
#define TICK_MS        100

typedef struct replica {
    kiln_role role;
    int index;
    char task[48];
    size_t node;
    int port;
    int gpus[KILN_MAX_REPLICA_DEVICES];
    int n_gpus;
    bool simulated;
    kiln_exec_kind kind;
    kiln_exec_handle h;
    bool spawned;       /* its monitor was started (or adopted): its end is acted on */
    bool started;       /* its program runs (after any image pull) */
    bool alive;         /* its monitor runs */
    bool handled;       /* its exit has been acted on */
    bool dropped;       /* elastic: left the job (drained, out of restarts); its slot is released */
    bool leaving;       /* elastic: stopped for a drain, leaves the job when it exits */
    int restarts;       /* elastic: times this replica alone was started again */
    int code;           /* exit code (a signal is 128 + its number) */
    char why[512];      /* it could never run (image pull), or its monitor is gone */
    bool lost;          /* its monitor is gone without an exit status */
    bool failed;        /* it could never run */
    int64_t kill_at_ns; /* elastic: a leaving worker gets SIGKILL then (0 = not due) */
    long long moff;     /* bytes of its monitor's metrics file (TASK.metrics) read */
} replica;

typedef enum after_stop {
    AS_NONE,
    AS_SUCCEED,
    AS_FAIL,
    AS_CANCEL,
    AS_RESTART,
    AS_REQUEUE
} after_stop;

typedef struct rjob {
    char *project, *job_id;
    kiln_job *job;
    int64_t start_ns;
    bool running; /* RUNNING written (PREPARING until every replica runs) */
    int restarts, failures;
    kiln_placement pl;
    replica *reps;
    size_t n;
    int log_fd;
    size_t log_bytes; /* written to the job's log by replicas (an estimate) */
    bool log_capped;
    char dir[PATH_MAX];
    char ps_keys[PATH_MAX + 16]; /* this attempt's CURVE keys (pskeys.h) */
    after_stop after;            /* AS_NONE while running */
    char *after_msg;
    int64_t kill_at_ns;
    bool killed;
    char pypath[4 * PATH_MAX]; /* PYTHONPATH of the staged packages ("" = none) */
    /* elastic PyTorchJobs: bounds on the PyTorch workers (kiln's master is
     * one of them when the PyTorchJob has Workers only: `wo`) */
    bool elastic;
    int el_min, el_max, wo;
    int64_t grow_at_ns;            /* next attempt to add a worker */
    json_t *metrics;               /* the chief's last training metrics report (trainmetrics.h) */
    kilnd_fail_reason fail_reason; /* counted when AS_FAIL ends the job FAILED */
    struct tstudy *study;          /* a tuning job's trial: its study (NULL: a plain job) */
    int trial;                     /* the trial's id */
    struct rjob *next;
} rjob;

/* A tuning job while it runs: its study (src/tune) and the trials running
 * now, each an rjob of the same job with `trial` set. */
typedef struct tstudy {
    char *project, *job_id;
    kiln_job *job; /* the spec the study points into */
    kiln_study *st;
    int running;
    bool cancelling;
    int64_t start_ns;
    struct tstudy *next;
} tstudy;

typedef struct sup {
    kilnd *d;
    rjob *jobs;
    bool dirty; /* capacity or the queue changed: look at the queue this tick */
    bool *port_used;
    int port_next;
    tstudy *studies;
} sup;

static void save_runtime(sup *s, rjob *j);
static kiln_err trial_args(rjob *j, kiln_strv *argv);
static kiln_err trial_env(rjob *j, kiln_strv *env);
static void trial_metrics(rjob *j, json_t *report);

/* ---------- small helpers ---------- */

void kilnd_job_dir(const kilnd *d, const char *project, const char *job_id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/jobs/%s/%s", d->data_dir, project, job_id);
}

int kilnd_mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return (mkdir(tmp, 0755) < 0 && errno != EEXIST) ? -1 : 0;
}

void kilnd_event(kilnd *d, const char *project, const char *job_id, const char *severity,
                 const char *fmt, ...)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    kilnd_job_dir(d, project, job_id, dir, sizeof dir);
    kilnd_mkdirs(dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        kiln_log_write(fd, severity, "service", msg, (size_t)n);
        close(fd);
    }
    free(msg);
}

static int64_t duration_ns(const kiln_duration *dur)
{
    return dur->seconds * 1000000000LL + dur->nanos;
}

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

static int port_take(sup *s)
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

static void port_give(sup *s, int port)
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
static void pump_metrics(sup *s, rjob *j, replica *r)
{
    char path[PATH_MAX + 80], buf[LINE_MAX_BYTES + 1];
    if (!r->spawned) return;
    snprintf(path, sizeof path, "%s/replicas/%s.metrics", j->dir, r->task);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    for (;;) {
        ssize_t n = pread(fd, buf, LINE_MAX_BYTES, (off_t)r->moff);
        if (n <= 0) break;
        size_t start = 0;
        for (size_t i = 0; i < (size_t)n; i++)
            if (buf[i] == '\n') {
                note_metrics(s, j, r, buf + start, i - start);
                start = i + 1;
            }
        if (start == 0) {
            if ((size_t)n < LINE_MAX_BYTES) break; /* a partial line: the rest comes later */
            start = (size_t)n;                     /* longer than any report: skipped */
        }
        r->moff += (long long)start;
        if (start < (size_t)n && (size_t)n < LINE_MAX_BYTES) break; /* a partial last line */
    }
    close(fd);
}

/* ---------- the runtime record (for reconcile and for GET) ---------- */

static void save_runtime(sup *s, rjob *j)
{
    json_t *reps = json_array();
    for (size_t i = 0; reps && i < j->n; i++) {
        replica *r = &j->reps[i];
        json_t *g = json_array();
        for (int k = 0; g && k < r->n_gpus; k++)
            json_array_append_new(g, json_integer(r->gpus[k]));
        json_t *o = json_pack("{s:s,s:s,s:i,s:I,s:I,s:o,s:b,s:s}", "task", r->task, "node",
                              s->d->cluster.nodes[r->node].name, "port", r->port, "pid",
                              (json_int_t)(r->alive ? r->h.pid : 0), "startTicks",
                              (json_int_t)(r->alive ? r->h.pid_start : 0), "gpus",
                              g ? g : json_array(), "simulatedGpus", r->simulated && r->n_gpus,
                              "state", r->alive ? "RUNNING" : "EXITED");
        /* what the next kilnd needs to adopt the replica (monitor, slot) */
        const kiln_slot *sl = &j->pl.slots[i];
        json_t *devs = json_array();
        for (int k = 0; devs && k < sl->n_devs; k++)
            json_array_append_new(devs, json_integer(sl->devs[k]));
        json_t *a = json_pack(
            "{s:s,s:i,s:s,s:I,s:I,s:s,s:o,s:i,s:f,s:b,s:b,s:i}", "role", kiln_role_name(r->role),
            "index", r->index, "executor", kiln_exec_kind_name(r->kind), "monitor",
            (json_int_t)(r->alive ? r->h.monitor : 0), "monitorStart",
            (json_int_t)(r->alive ? r->h.monitor_start : 0), "container", r->h.name, "devs",
            devs ? devs : json_array(), "vcpus", sl->vcpus, "memoryGb", sl->memory_gb, "dropped",
            r->dropped, "started", r->started, "restarts", r->restarts);
        if (a && r->leaving) json_object_set_new(a, "leaving", json_true());
        if (a) json_object_set_new(a, "code", json_integer(r->code));
        if (a) json_object_set_new(a, "metricsOffset", json_integer(r->moff));
        /* for the dashboard: how this replica ended (its restarts alone are
         * "restarts"; group restarts are the job's kilnStatus.restarts) */
        if (a && !r->alive && r->spawned && !r->failed)
            json_object_set_new(a, "exitCode", json_integer(r->code));
        if (o && a) json_object_update(o, a);
        json_decref(a);
        if (o) json_array_append_new(reps, o);
    }
    json_t *root =
        json_pack("{s:o,s:b}", "replicas", reps ? reps : json_array(), "running", j->running);
    if (root && j->metrics) json_object_set(root, "metrics", j->metrics);
    if (root && j->study) json_object_set_new(root, "study", kiln_study_to_json(j->study->st));
    if (root && j->elastic) {
        int cur = 0;
        for (size_t i = 0; i < j->n; i++)
            cur += !j->reps[i].dropped && j->reps[i].alive &&
                   (j->reps[i].role == KILN_ROLE_WORKER ||
                    (j->wo && j->reps[i].role == KILN_ROLE_MASTER));
        json_object_set_new(
            root, "elasticWorkers",
            json_pack("{s:i,s:i,s:i}", "current", cur, "wanted", j->el_max, "min", j->el_min));
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
static char *runtime_for_requeue(json_t *metrics, json_t *study)
{
    if (!metrics && !study) return NULL;
    json_t *o = json_object();
    if (o && metrics) json_object_set(o, "metrics", metrics);
    if (o && study) json_object_set(o, "study", study); /* the trials so far stay */
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return txt;
}

/* The object a runtime record keeps under `key` ("metrics": the last report,
 * "study": the trials so far) as a new reference, or NULL. */
static json_t *runtime_kept(const char *runtime, const char *key)
{
    json_t *rt = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *m = json_object_get(rt, key);
    m = json_is_object(m) ? json_incref(m) : NULL;
    json_decref(rt);
    return m;
}

/* Kills the process groups a runtime record names, when they are still the
 * same processes (pid + start time), and waits for them to go. */
static void kill_recorded(const char *runtime)
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

/* Lets go of a replica's monitor (its life pipe); the monitor runs on. */
static void close_replica(sup *s, rjob *j, replica *r)
{
    if (r->h.life_fd >= 0) close(r->h.life_fd);
    r->h.life_fd = -1;
    (void)s;
    (void)j;
}

static void rjob_free(sup *s, rjob *j)
{
    if (!j) return;
    for (size_t i = 0; i < j->n; i++) {
        close_replica(s, j, &j->reps[i]);
        if (j->reps[i].port > 0) port_give(s, j->reps[i].port);
    }
    if (j->pl.n) {
        pthread_mutex_lock(&s->d->mu);
        kiln_sched_release(s->d->sched, &j->pl);
        pthread_mutex_unlock(&s->d->mu);
    }
    kiln_placement_free(&j->pl);
    if (j->log_fd >= 0) close(j->log_fd);
    free(j->reps);
    free(j->project);
    free(j->job_id);
    free(j->after_msg);
    json_decref(j->metrics);
    kiln_job_free(j->job);
    free(j);
}

/* Runs a helper (cp, tar) to completion; true when it exited 0. */
static bool run_helper(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void path_add(char *pp, size_t len, const char *dir)
{
    size_t n = strlen(pp);
    snprintf(pp + n, len - n, "%s%s", n ? ":" : "", dir);
}

/* The file behind gs://BUCKET/NAME in kilnd's staging store (the API
 * refused, at create, any gs:// URI the store does not hold). */
static bool gs_path(kilnd *d, const char *uri, char *buf, size_t len)
{
    char bucket[64];
    const char *p = uri + 5, *sl = strchr(p, '/');
    if (strncmp(uri, "gs://", 5) != 0 || !sl || (size_t)(sl - p) >= sizeof bucket) return false;
    memcpy(bucket, p, (size_t)(sl - p));
    bucket[sl - p] = '\0';
    return kiln_objects_holds(d->objects, bucket, NULL) &&
           kiln_objects_path(d->objects, bucket, sl + 1, buf, len) == KILN_OK;
}

/* --job-dir gs://BUCKET/PATH on a held bucket: the replicas get the local
 * directory DATA/objects/BUCKET/PATH (made here), so that what they write
 * there is readable back as objects BUCKET/PATH/... */
static kiln_err map_job_dir(kilnd *d, rjob *j, char *why, size_t whylen)
{
    char *jd = j->job->training_input.job_dir, local[PATH_MAX], name[PATH_MAX];
    if (!jd || strncmp(jd, "gs://", 5) != 0) return KILN_OK;
    snprintf(name, sizeof name, "%s", jd);
    size_t n = strlen(name);
    while (n > 5 && name[n - 1] == '/')
        name[--n] = '\0';
    if (!gs_path(d, name, local, sizeof local) || kilnd_mkdirs(local) < 0) {
        snprintf(why, whylen, "jobDir '%s': cannot make its directory in kilnd's staging store",
                 jd);
        return KILN_EIO;
    }
    return kiln_set_str(&j->job->training_input.job_dir, local);
}

/* Stages packageUris (local: file:// or absolute paths; gs:// URIs of
 * kilnd's staging store, which are files under DATA/objects) under
 * DIR/staging and builds the PYTHONPATH that finds them:
 *   a directory (--package-path)  copied; staging/ goes on the path;
 *   NAME.whl (pure Python)        copied; the wheel itself goes on the path;
 *   NAME.tar.gz / .tgz (an sdist) unpacked into staging/sdistN; its top-level
 *                                 directories go on the path. */
static kiln_err stage_packages(kilnd *d, rjob *j, char *why, size_t whylen, char *pypath,
                               size_t plen)
{
    const kiln_strv *uris = &j->job->training_input.package_uris;
    char staging[PATH_MAX + 16], dst[PATH_MAX + 64];
    bool dirs = false;

    pypath[0] = '\0';
    if (uris->n == 0) return KILN_OK;
    snprintf(staging, sizeof staging, "%s/staging", j->dir);
    kilnd_mkdirs(staging);
    for (size_t i = 0; i < uris->n; i++) {
        const char *u = uris->v[i];
        const char *path = strncmp(u, "file://", 7) == 0 ? u + 7 : (u[0] == '/' ? u : NULL);
        char gs[PATH_MAX];
        if (gs_path(d, u, gs, sizeof gs)) path = gs;
        struct stat st;
        if (!path || stat(path, &st) < 0) {
            snprintf(why, whylen,
                     "packageUris[%zu] '%s': kilnd stages local packages (a directory, .whl "
                     "or .tar.gz on this machine) and the gs:// objects it holds",
                     i, u);
            return KILN_EINVAL;
        }
        bool ok;
        if (S_ISDIR(st.st_mode)) {
            ok = run_helper((char *[]){"cp", "-R", (char *)path, staging, NULL});
            dirs = true;
        } else if (ends_with(path, ".whl")) {
            const char *base = strrchr(path, '/');
            ok = snprintf(dst, sizeof dst, "%s/%s", staging, base ? base + 1 : path) <
                 (int)sizeof dst;
            ok = ok && run_helper((char *[]){"cp", (char *)path, dst, NULL});
            if (ok) path_add(pypath, plen, dst);
        } else if (ends_with(path, ".tar.gz") || ends_with(path, ".tgz")) {
            snprintf(dst, sizeof dst, "%s/sdist%zu", staging, i);
            kilnd_mkdirs(dst);
            ok = run_helper((char *[]){"tar", "-xzf", (char *)path, "-C", dst, NULL});
            DIR *dd = ok ? opendir(dst) : NULL;
            struct dirent *e;
            while (dd && (e = readdir(dd))) {
                char sub[PATH_MAX + 320];
                struct stat ss;
                if (e->d_name[0] == '.') continue;
                snprintf(sub, sizeof sub, "%s/%s", dst, e->d_name);
                if (stat(sub, &ss) == 0 && S_ISDIR(ss.st_mode)) path_add(pypath, plen, sub);
            }
            if (dd) closedir(dd);
        } else {
            snprintf(why, whylen, "packageUris[%zu] '%s': not a directory, .whl or .tar.gz", i, u);
            return KILN_EINVAL;
        }
        if (!ok) {
            snprintf(why, whylen, "cannot stage package '%s' into the job's directory", path);
            return KILN_EIO;
        }
    }
    if (dirs) path_add(pypath, plen, staging);
    return KILN_OK;
}

static void stop_all(sup *s, rjob *j, int sig)
{
    for (size_t i = 0; i < j->n; i++)
        if (j->reps[i].alive) kiln_exec_signal(&s->d->exec, &j->reps[i].h, sig);
}

static void begin_stop(sup *s, rjob *j, after_stop after, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void begin_stop(sup *s, rjob *j, after_stop after, const char *fmt, ...)
{
    va_list ap;
    if (j->after != AS_NONE) return; /* already stopping: the first reason stands */
    j->after = after;
    free(j->after_msg);
    j->after_msg = NULL;
    va_start(ap, fmt);
    if (vasprintf(&j->after_msg, fmt, ap) < 0) j->after_msg = NULL;
    va_end(ap);
    j->kill_at_ns = kiln_now_ns() + (int64_t)s->d->grace_ms * 1000000;
    j->killed = false;
    stop_all(s, j, SIGTERM);
}

/* The cluster as the replicas see it; NULL on ENOMEM. Dropped replicas are
 * out of it. */
static kiln_exec_task *job_tasks(sup *s, rjob *j, size_t *n)
{
    kiln_exec_task *tasks = calloc(j->n ? j->n : 1, sizeof *tasks);
    *n = 0;
    for (size_t i = 0; tasks && i < j->n; i++) {
        if (j->reps[i].dropped) continue;
        tasks[*n].role = j->reps[i].role;
        tasks[*n].index = j->reps[i].index;
        tasks[*n].host = s->d->cluster.nodes[j->reps[i].node].address;
        tasks[*n].port = j->reps[i].port;
        ++*n;
    }
    return tasks;
}

/* The image a replica of `role` runs (its own imageUri, else the master's,
 * as AI Platform defaults it), or NULL: it runs as a process. */
static const char *image_of(const kiln_job *job, kiln_role role)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    if (rc && rc->image_uri && *rc->image_uri) return rc->image_uri;
    if (mc && mc->image_uri && *mc->image_uri) return mc->image_uri;
    return NULL;
}

/* A container's ENTRYPOINT override (containerCommand) and CMD override
 * (containerArgs, then the program args: user args after `--` and
 * --job-dir), each the role's, else the master's. */
static kiln_err container_program(const kiln_job *job, kiln_role role, kiln_strv *cmd,
                                  kiln_strv *args)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    kiln_strv pargs = {0};
    if (!rc || (rc->container_command.n == 0 && rc->container_args.n == 0)) rc = mc;
    kiln_err err = kiln_job_program_args(job, &pargs);
    for (size_t i = 0; err == KILN_OK && rc && i < rc->container_command.n; i++)
        err = kiln_strv_push(cmd, rc->container_command.v[i]);
    for (size_t i = 0; err == KILN_OK && rc && i < rc->container_args.n; i++)
        err = kiln_strv_push(args, rc->container_args.v[i]);
    for (size_t i = 0; err == KILN_OK && i < pargs.n; i++)
        err = kiln_strv_push(args, pargs.v[i]);
    kiln_strv_clear(&pargs);
    return err;
}

/* "kiln-P-J-TASK": a container name unique per replica (P and J are
 * [A-Za-z0-9_-], the API checked them). */
static void container_name(const rjob *j, const replica *r, char *buf, size_t len)
{
    snprintf(buf, len, "kiln-%s-%s-%s", j->project, j->job_id, r->task);
}

/* Starts replica `i` of a running job (every replica at first; one alone
 * when an elastic worker is restarted or added). */
static kiln_err spawn_one(sup *s, rjob *j, size_t i, char *why, size_t whylen)
{
    kiln_strv argv = {0}, env = {0}, cargs = {0}, hosts = {0};
    char state[PATH_MAX + 64], rlog[PATH_MAX + 64], jlog[PATH_MAX + 16], work[PATH_MAX + 16];
    char name[160] = "";
    size_t nt = 0, self = 0;
    kiln_exec_task *tasks = job_tasks(s, j, &nt);
    replica *r = &j->reps[i];
    const char *image = image_of(j->job, r->role);
    kiln_err err = KILN_ENOMEM;

    if (!tasks) goto out;
    for (size_t k = 0; k < nt; k++)
        if (tasks[k].role == r->role && tasks[k].index == r->index) self = k;
    if (j->study)
        snprintf(work, sizeof work, "%s/%d", j->dir, j->trial); /* the trial's own directory */
    else
        snprintf(work, sizeof work, "%s/work", j->dir);
    kilnd_mkdirs(work);
    kiln_exec_paths paths = {.kiln_train = s->d->kiln_train,
                             .python = s->d->python,
                             .staging = j->pypath[0] ? j->pypath : NULL};
    r->kind = image ? KILN_EXEC_CONTAINER : KILN_EXEC_LOCAL;
    if (image)
        err = container_program(j->job, r->role, &argv, &cargs);
    else
        err = kiln_exec_program(j->job, r->role, &paths, &argv, why, whylen);
    /* a trial's --NAME=VALUE flags follow the program's own args */
    if (err == KILN_OK && j->study) err = trial_args(j, image ? &cargs : &argv);
    if (err != KILN_OK) goto out;
    err = kiln_exec_replica_env(j->job, tasks, nt, self, r->gpus, (size_t)r->n_gpus, r->simulated,
                                &env);
    if (err == KILN_OK && j->study) err = trial_env(j, &env);
    if (err != KILN_OK) goto out;
    char key[64], *kkv = NULL;
    kiln_exec_coll_key(j->project, j->job_id, (long)getpid(), j->restarts, key);
    if (asprintf(&kkv, "KILN_COLL_KEY=%s", key) < 0) kkv = NULL;
    err = kkv ? kiln_strv_push(&env, kkv) : KILN_ENOMEM;
    free(kkv);
    if (err != KILN_OK) goto out;
    if (j->ps_keys[0]) { /* a path, never the keys themselves: argv and env are visible */
        char *kv = NULL;
        if (asprintf(&kv, "KILN_PS_KEYS=%s", j->ps_keys) < 0) kv = NULL;
        err = kv ? kiln_strv_push(&env, kv) : KILN_ENOMEM;
        free(kv);
        if (err != KILN_OK) goto out;
    }
    if (paths.staging) {
        /* only the staged packages: kilnd's own PYTHONPATH is not the replica's */
        char *kv = NULL;
        if (asprintf(&kv, "PYTHONPATH=%s", paths.staging) < 0) kv = NULL;
        err = kv ? kiln_strv_push(&env, kv) : KILN_ENOMEM;
        free(kv);
        if (err != KILN_OK) goto out;
    }
    snprintf(state, sizeof state, "%s/replicas/%s", j->dir, r->task);
    snprintf(rlog, sizeof rlog, "%s/replicas/%s.log", j->dir, r->task);
    snprintf(jlog, sizeof jlog, "%s/log.tsv", j->dir);
    if (image) container_name(j, r, name, sizeof name);
    /* a container sees the job's directories at the same paths: kiln's
     * (working dir, staged packages) and the user's jobDir */
    const char *jd = j->job->training_input.job_dir;
    const char *mounts[2] = {j->dir, jd};
    size_t n_mounts = jd && jd[0] == '/' ? 2 : 1;
    if (n_mounts == 2) kilnd_mkdirs(jd);
    /* every replica's hostname (its container's name) resolves to its node,
     * as pod names do: torchrun hands its peers the host agent's hostname */
    for (size_t k = 0; image && k < j->n; k++) {
        char hn[160], *kv = NULL;
        if (j->reps[k].dropped) continue;
        container_name(j, &j->reps[k], hn, sizeof hn);
        if (asprintf(&kv, "%s:%s", hn, s->d->cluster.nodes[j->reps[k].node].address) < 0 ||
            kiln_strv_push(&hosts, kv) != KILN_OK) {
            free(kv);
            err = KILN_ENOMEM;
            goto out;
        }
        free(kv);
    }
    long uid = -1, gid = -1;
    if (kilnd_project_user(s->d, j->project, &uid, &gid, why, whylen) != KILN_OK) {
        err = KILN_EINVAL;
        goto out;
    }
    if (uid >= 0) {
        /* the replica's files are its user's: the job dir, its log, work dir */
        int fd = open(rlog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
        kilnd_chown_job(j->dir, uid, gid);
        if (chown(rlog, (uid_t)uid, (gid_t)gid) < 0) { /* reported by the monitor's writes */
        }
        if (n_mounts == 2 && chown(jd, (uid_t)uid, (gid_t)gid) < 0) {
        }
    }
    kiln_exec_spec spec = {.kind = r->kind,
                           .task = r->task,
                           .state = state,
                           .job_log = jlog,
                           .rep_log = rlog,
                           .work_dir = work,
                           .argv = &argv,
                           .args = &cargs,
                           .env = &env,
                           .image = image,
                           .name = name,
                           .mounts = mounts,
                           .n_mounts = n_mounts,
                           .hosts = (const char *const *)hosts.v,
                           .n_hosts = hosts.n,
                           .gpus = r->gpus,
                           .n_gpus = (size_t)r->n_gpus,
                           .simulated = r->simulated,
                           .uid = uid,
                           .gid = gid};
    close_replica(s, j, r);
    r->moff = 0; /* kiln_exec_start forgets the previous run's metrics file */
    err = kiln_exec_start(&s->d->exec, &spec, &r->h, why, whylen);
    if (err != KILN_OK) goto out;
    r->alive = true;
    r->spawned = true;
    r->started = false;
    r->handled = false;
    r->lost = r->failed = false;
    r->code = 0;
    r->why[0] = '\0';
    char gl[128] = "";
    size_t gn = 0;
    for (int k = 0; k < r->n_gpus && gn < sizeof gl - 8; k++)
        gn += (size_t)snprintf(gl + gn, sizeof gl - gn, "%s%d", k ? "," : "", r->gpus[k]);
    char *m = NULL;
    int n =
        image ? asprintf(&m,
                         "Started %s on node %s (container %s of image %s, monitor %d, port "
                         "%d, GPUs [%s]%s)",
                         r->task, s->d->cluster.nodes[r->node].name, name, image, (int)r->h.monitor,
                         r->port, gl, r->simulated && r->n_gpus ? ", SIMULATED" : "")
              : asprintf(&m, "Started %s on node %s (monitor %d, port %d, GPUs [%s]%s): %s",
                         r->task, s->d->cluster.nodes[r->node].name, (int)r->h.monitor, r->port, gl,
                         r->simulated && r->n_gpus ? ", SIMULATED" : "", argv.v[0]);
    if (n >= 0) kiln_log_write(j->log_fd, "INFO", "service", m, (size_t)n);
    free(m);
    err = KILN_OK;
out:
    free(tasks);
    kiln_strv_clear(&argv);
    kiln_strv_clear(&cargs);
    kiln_strv_clear(&hosts);
    kiln_strv_clear(&env);
    return err;
}

/* Starts every replica of a placed job. */
static kiln_err spawn_all(sup *s, rjob *j, char *why, size_t whylen)
{
    kiln_err err = stage_packages(s->d, j, why, whylen, j->pypath, sizeof j->pypath);
    if (err == KILN_OK) err = map_job_dir(s->d, j, why, whylen);
    /* new parameter-server keys for every attempt */
    if (err == KILN_OK && kilnd_ps_keys_write(j->dir, j->ps_keys, sizeof j->ps_keys) != 0) {
        snprintf(why, whylen, "cannot write the job's ps keys: %s", strerror(errno));
        j->ps_keys[0] = '\0';
        err = KILN_EIO;
    }
    for (size_t i = 0; err == KILN_OK && i < j->n; i++)
        if (!j->reps[i].dropped) err = spawn_one(s, j, i, why, whylen);
    if (err != KILN_OK) stop_all(s, j, SIGKILL);
    return err;
}

/* ---------- the queue ---------- */

static void study_begin(sup *s, kiln_job_record *rec);

static bool is_running(sup *s, const char *project, const char *id)
{
    for (rjob *j = s->jobs; j; j = j->next)
        if (strcmp(j->project, project) == 0 && strcmp(j->job_id, id) == 0) return true;
    return false;
}

static void fail_queued(sup *s, kiln_job_record *r, kiln_job_state to, const char *msg)
{
    kilnd *d = s->d;
    if (kiln_store_job_transition(d->store, r->project, r->job->job_id, KILN_STATE_MASK(QUEUED), to,
                                  msg, kiln_now_ns(), NULL) != KILN_OK)
        return;
    if (to == KILN_STATE_FAILED) d->failures_total[KILND_FAIL_UNSCHEDULABLE]++;
    kilnd_event(d, r->project, r->job->job_id, to == KILN_STATE_FAILED ? "ERROR" : "WARNING",
                "Job %s: %s", kiln_job_state_name(to), msg);
}

/* Elastic PyTorchJobs start with as many workers as fit now, from maxReplicas
 * down to minReplicas (the rest are added when devices free up: grow()).
 * `plans` has room for KILN_ROLE_COUNT; *np is updated. Called under d->mu. */
static kiln_err place_elastic(kilnd *d, const kiln_job *job, kiln_replica_plan *plans, size_t *np,
                              const kiln_map *const sel[KILN_ROLE_COUNT], kiln_placement *pl,
                              char *why, size_t whylen)
{
    const kiln_elastic_policy *ep = &job->training_input.pytorch_job.elastic_policy;
    int64_t wo = job->training_input.pytorch_job.workers_only ? 1 : 0;
    size_t w = *np;
    for (size_t p = 0; p < *np; p++)
        if (plans[p].role == KILN_ROLE_WORKER) w = p;
    if (w == *np) { /* one Worker only: the others have the master's shape (worker 0's) */
        if (*np == 0 || *np >= KILN_ROLE_COUNT || !wo)
            return kiln_sched_place_sel(d->sched, plans, *np, sel, pl, why, whylen);
        plans[w] = plans[0];
        plans[w].role = KILN_ROLE_WORKER;
    }
    kiln_err err = KILN_EINVAL;
    for (int64_t want = ep->max_replicas; want >= ep->min_replicas && want >= 1; want--) {
        plans[w].count = want - wo;
        size_t n = plans[w].count > 0 ? w + 1 : w; /* a PyTorchJob has no roles past Worker */
        err = kiln_sched_place_sel(d->sched, plans, n, sel, pl, why, whylen);
        if (err == KILN_OK) {
            *np = n;
            break;
        }
    }
    return err;
}

/* Accelerator types that a job earlier in the queue is waiting for. */
typedef struct blocked {
    const char *types[16]; /* catalog-owned names */
    size_t n;
} blocked;

static bool is_blocked(const blocked *b, const char *type)
{
    for (size_t i = 0; type && i < b->n; i++)
        if (strcmp(b->types[i], type) == 0) return true;
    return false;
}

/* Tries to start one QUEUED job. Queue order is kept per accelerator type: a
 * job waiting for busy V100s holds back the later jobs that want V100s (so a
 * big job is not starved by small ones arriving after it), while jobs wanting
 * other types, or none, may start past it. */
static void try_start(sup *s, kiln_job_record *rec, blocked *b)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    char why[512];
    kiln_placement pl = {0};
    rjob *j = NULL;
    const kiln_training_input *ti = &rec->job->training_input;
    int64_t now = kiln_now_ns();

    if (ti->has_scheduling && ti->scheduling.has_max_wait_time &&
        now - rec->create_ns > duration_ns(&ti->scheduling.max_wait_time)) {
        snprintf(why, sizeof why, "still queued after maxWaitTime (%llds); cancelled",
                 (long long)ti->scheduling.max_wait_time.seconds);
        fail_queued(s, rec, KILN_STATE_CANCELLED, why);
        return;
    }
    size_t np = kiln_catalog_plan(d->catalog, rec->job, plans);
    if (np == 0) { /* validated jobs always have a master; a catalog change could break that */
        fail_queued(s, rec, KILN_STATE_FAILED, "the job has no replicas to run in this catalog");
        return;
    }
    pthread_mutex_lock(&d->mu);
    const kiln_map *sel[KILN_ROLE_COUNT];
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(rec->job, (kiln_role)r);
        sel[r] = rc && rc->node_selector.n ? &rc->node_selector : NULL;
    }
    kiln_err err = rec->job->training_input.pytorch_job.has_elastic_policy
                       ? place_elastic(d, rec->job, plans, &np, sel, &pl, why, sizeof why)
                       : kiln_sched_place_sel(d->sched, plans, np, sel, &pl, why, sizeof why);
    pthread_mutex_unlock(&d->mu);
    if (err == KILN_EINVAL || err == KILN_ELIMIT) {
        char msg[600];
        snprintf(msg, sizeof msg, "This job can never run on this cluster: %s", why);
        fail_queued(s, rec, KILN_STATE_FAILED, msg);
        return;
    }
    bool held = false;
    for (size_t p = 0; p < np; p++)
        held |= is_blocked(b, plans[p].accelerator_type);
    if (err == KILN_OK && held) { /* it fits, but an earlier job waits for these devices */
        pthread_mutex_lock(&d->mu);
        kiln_sched_release(d->sched, &pl);
        pthread_mutex_unlock(&d->mu);
        kiln_placement_free(&pl);
        return;
    }
    if (err != KILN_OK) { /* waits for devices: later jobs wanting them wait behind it */
        for (size_t p = 0; p < np; p++)
            if (plans[p].accelerator_type && !is_blocked(b, plans[p].accelerator_type) &&
                b->n < sizeof b->types / sizeof *b->types)
                b->types[b->n++] = plans[p].accelerator_type;
        return;
    }
    if (kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(QUEUED),
                                  KILN_STATE_PREPARING, NULL, now, NULL) != KILN_OK ||
        rec->job->training_input.has_hyperparameters) {
        /* cancelled meanwhile; or a tuning job, which fits: its trials are
         * placed one by one (start_trials) */
        if (rec->job->training_input.has_hyperparameters) study_begin(s, rec);
        pthread_mutex_lock(&d->mu);
        kiln_sched_release(d->sched, &pl);
        pthread_mutex_unlock(&d->mu);
        kiln_placement_free(&pl);
        return;
    }
    j = calloc(1, sizeof *j);
    if (!j) goto nomem;
    j->log_fd = -1;
    j->project = strdup(rec->project);
    j->job_id = strdup(rec->job->job_id);
    j->reps = calloc(pl.n ? pl.n : 1, sizeof *j->reps);
    if (!j->project || !j->job_id || !j->reps) goto nomem;
    j->pl = pl;
    pl = (kiln_placement){0};
    j->n = j->pl.n;
    j->job = rec->job;
    rec->job = NULL;
    const kiln_pytorch_job *pt = &j->job->training_input.pytorch_job;
    if (j->job->training_input.has_pytorch_job && pt->has_elastic_policy) {
        j->elastic = true;
        j->wo = pt->workers_only ? 1 : 0;
        j->el_min = (int)pt->elastic_policy.min_replicas;
        j->el_max = (int)pt->elastic_policy.max_replicas;
        j->grow_at_ns = now + 1000000000LL;
    }
    j->start_ns = rec->start_ns;
    j->restarts = rec->restarts;
    j->failures = rec->failures;
    j->metrics = runtime_kept(rec->runtime, "metrics"); /* a requeued job's last report */
    j->next = s->jobs;
    s->jobs = j; /* from here on the job is released through the normal path */
    kilnd_job_dir(d, j->project, j->job_id, j->dir, sizeof j->dir);
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/replicas", j->dir);
    kilnd_mkdirs(sub);
    snprintf(sub, sizeof sub, "%s/log.tsv", j->dir);
    j->log_fd = open(sub, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        const kiln_slot *sl = &j->pl.slots[i];
        const kiln_node *node = &d->cluster.nodes[sl->node];
        r->role = sl->role;
        r->index = sl->index;
        r->node = sl->node;
        r->h.life_fd = -1;
        kiln_exec_task_name(r->role, r->index, r->task);
        r->n_gpus = sl->n_devs;
        for (int k = 0; k < sl->n_devs; k++) {
            r->gpus[k] = node->devs[sl->devs[k]].index;
            r->simulated |= node->devs[sl->devs[k]].simulated;
        }
        r->port = port_take(s);
        if (r->port < 0) {
            begin_stop(s, j, AS_FAIL, "no free port in %d-%d for the replicas", d->port_base,
                       d->port_base + d->port_count - 1);
            return;
        }
    }
    kilnd_event(d, j->project, j->job_id, "INFO", "Job PREPARING: placed %zu replica%s", j->n,
                j->n == 1 ? "" : "s");
    /* what the placement cannot see: a container runtime, a CDI spec for
     * real GPUs in a container. Not now means never here. */
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        kiln_exec_kind kind = image_of(j->job, r->role) ? KILN_EXEC_CONTAINER : KILN_EXEC_LOCAL;
        if (kiln_exec_check(&d->exec, kind, (size_t)r->n_gpus, r->simulated, why, sizeof why) !=
            KILN_OK) {
            begin_stop(s, j, AS_FAIL, "This job can never run on node %s: the %s replica: %s",
                       d->cluster.nodes[r->node].name, r->task, why);
            return;
        }
    }
    err = spawn_all(s, j, why, sizeof why);
    if (err != KILN_OK) {
        begin_stop(s, j, AS_FAIL, "%s", why);
        return;
    }
    /* RUNNING once every replica's program runs (an image may be pulled first) */
    save_runtime(s, j);
    return;
nomem:
    /* give the job back to the queue; the placement was not handed to j */
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(PREPARING),
                              KILN_STATE_QUEUED, NULL, now, NULL);
    rjob_free(s, j);
    pthread_mutex_lock(&d->mu);
    kiln_sched_release(d->sched, &pl);
    pthread_mutex_unlock(&d->mu);
    kiln_placement_free(&pl);
}

static void schedule(sup *s)
{
    kiln_job_record **v = NULL;
    size_t n = 0;
    if (kiln_store_jobs_by_state(s->d->store, KILN_STATE_MASK(QUEUED), &v, &n) != KILN_OK) return;
    blocked b = {0};
    for (size_t i = 0; i < n && !s->d->stop; i++)
        if (!is_running(s, v[i]->project, v[i]->job->job_id)) try_start(s, v[i], &b);
    kiln_job_records_free(v, n);
}

#include "daemon/trials.inc"

/* ---------- exits and the restart policy ---------- */

static const char *policy_of(const rjob *j, kiln_role role)
{
    const kiln_replica_config *c = kiln_job_role_config(j->job, role);
    if (c && c->restart_policy && *c->restart_policy) return c->restart_policy;
    return "Never";
}

static int backoff_limit(const rjob *j)
{
    const kiln_training_input *ti = &j->job->training_input;
    if (ti->has_run_policy && ti->run_policy.has_backoff_limit)
        return (int)ti->run_policy.backoff_limit;
    return 3;
}

/* ---------- elastic PyTorchJobs: workers come and go ---------- */

/* A PyTorch worker of an elastic job (kiln's master is Worker 0 when the
 * PyTorchJob has Workers only). */
static bool elastic_worker(const rjob *j, const replica *r)
{
    return j->elastic && (r->role == KILN_ROLE_WORKER || (j->wo && r->role == KILN_ROLE_MASTER));
}

static int live_workers(const rjob *j)
{
    int n = 0;
    for (size_t i = 0; i < j->n; i++)
        n += elastic_worker(j, &j->reps[i]) && !j->reps[i].dropped && !j->reps[i].leaving;
    return n;
}

/* Takes replica `r` out of the job: its slot and port go back. */
static void drop_replica(sup *s, rjob *j, replica *r)
{
    size_t i = (size_t)(r - j->reps);
    kiln_placement one = {.slots = &j->pl.slots[i], .n = 1};
    pthread_mutex_lock(&s->d->mu);
    kiln_sched_release(s->d->sched, &one);
    pthread_mutex_unlock(&s->d->mu);
    j->pl.slots[i].node = (size_t)-1; /* released: kiln_sched_release skips it */
    if (r->port > 0) port_give(s, r->port);
    r->port = 0;
    r->dropped = true;
    r->leaving = false;
    r->kill_at_ns = 0;
    s->dirty = true; /* its devices may start a queued job */
}

/* An elastic worker ended. One that failed is started again alone, up to
 * maxRestarts, while the others carry on (torchrun's rendezvous re-forms
 * the group with it); one leaving for a drain, or out of restarts, leaves
 * the job, which goes on while minReplicas workers remain. Returns false
 * when the ordinary rules decide (success, or too few workers left). */
static bool elastic_exit(sup *s, rjob *j, replica *r, int code)
{
    if (!elastic_worker(j, r) || (code == 0 && !r->leaving)) return false;
    const kiln_elastic_policy *ep = &j->job->training_input.pytorch_job.elastic_policy;
    int max = ep->has_max_restarts ? (int)ep->max_restarts : backoff_limit(j);
    bool rdzv_host = j->wo ? r->role == KILN_ROLE_MASTER : r->index == 0;
    char why[512];
    if (!r->leaving && r->restarts < max) {
        r->restarts++;
        kilnd_event(s->d, j->project, j->job_id, "WARNING",
                    "%s exited with status %d: starting it again alone (restart %d of at most %d, "
                    "elasticPolicy.maxRestarts); the other workers carry on",
                    r->task, code, r->restarts, max);
        close_replica(s, j, r);
        if (spawn_one(s, j, (size_t)(r - j->reps), why, sizeof why) != KILN_OK)
            begin_stop(s, j, AS_FAIL, "%s", why);
        save_runtime(s, j);
        return true;
    }
    bool was_leaving = r->leaving;
    r->leaving = true; /* not counted below */
    if (rdzv_host || live_workers(j) < j->el_min) {
        r->leaving = was_leaving;
        return false;
    }
    drop_replica(s, j, r);
    close_replica(s, j, r);
    kilnd_event(s->d, j->project, j->job_id, "WARNING",
                "%s left the job (%s); %d workers carry on (minReplicas %d, maxReplicas %d)",
                r->task, was_leaving ? "its node is drained" : "out of restarts", live_workers(j),
                j->el_min, j->el_max);
    save_runtime(s, j);
    return true;
}

/* Adds one worker to an elastic job below maxReplicas when one fits now:
 * torchrun's agents see it waiting and re-form the group with it. */
static void grow(sup *s, rjob *j, int64_t now)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    kiln_placement pl = {0};
    char why[512];
    if (!j->elastic || j->after != AS_NONE || now < j->grow_at_ns || live_workers(j) >= j->el_max)
        return;
    j->grow_at_ns = now + 1000000000LL; /* a try a second at most */
    size_t np = kiln_catalog_plan(d->catalog, j->job, plans), w = 0;
    while (w < np && plans[w].role != KILN_ROLE_WORKER)
        w++;
    if (np == 0) return;
    if (w == np) w = 0; /* Workers only, one of them: the others have worker 0's shape */
    plans[w].role = KILN_ROLE_WORKER;
    plans[w].count = 1;
    const kiln_replica_config *rc = kiln_job_role_config(j->job, KILN_ROLE_WORKER);
    if (!rc) rc = kiln_job_role_config(j->job, KILN_ROLE_MASTER);
    const kiln_map *sel[KILN_ROLE_COUNT] = {0};
    sel[KILN_ROLE_WORKER] = rc && rc->node_selector.n ? &rc->node_selector : NULL;
    pthread_mutex_lock(&d->mu);
    kiln_err err = kiln_sched_place_sel(d->sched, &plans[w], 1, sel, &pl, why, sizeof why);
    pthread_mutex_unlock(&d->mu);
    if (err != KILN_OK) return;
    replica *reps = realloc(j->reps, (j->n + 1) * sizeof *reps);
    if (reps) j->reps = reps;
    kiln_slot *slots = reps ? realloc(j->pl.slots, (j->pl.n + 1) * sizeof *slots) : NULL;
    if (slots) j->pl.slots = slots;
    int port = slots ? port_take(s) : -1;
    if (port < 0) {
        pthread_mutex_lock(&d->mu);
        kiln_sched_release(d->sched, &pl);
        pthread_mutex_unlock(&d->mu);
        kiln_placement_free(&pl);
        return;
    }
    int index = 0;
    for (size_t i = 0; i < j->n; i++)
        if (j->reps[i].role == KILN_ROLE_WORKER && j->reps[i].index >= index)
            index = j->reps[i].index + 1;
    j->pl.slots[j->pl.n++] = pl.slots[0];
    j->pl.slots[j->pl.n - 1].index = index;
    replica *r = &j->reps[j->n++];
    *r =
        (replica){.role = KILN_ROLE_WORKER, .index = index, .node = pl.slots[0].node, .port = port};
    r->h.life_fd = -1;
    kiln_exec_task_name(r->role, r->index, r->task);
    const kiln_node *node = &d->cluster.nodes[r->node];
    r->n_gpus = pl.slots[0].n_devs;
    for (int k = 0; k < r->n_gpus; k++) {
        r->gpus[k] = node->devs[pl.slots[0].devs[k]].index;
        r->simulated |= node->devs[pl.slots[0].devs[k]].simulated;
    }
    kiln_placement_free(&pl);
    kilnd_event(d, j->project, j->job_id, "INFO",
                "Adding %s: devices are free; the job now has %d of at most %d workers", r->task,
                live_workers(j), j->el_max);
    if (spawn_one(s, j, j->n - 1, why, sizeof why) != KILN_OK) begin_stop(s, j, AS_FAIL, "%s", why);
    save_runtime(s, j);
}

static void on_exit_of(sup *s, rjob *j, replica *r)
{
    int code = r->code;
    r->handled = true;
    if (r->failed) { /* it could never run: no restart policy can help */
        kilnd_event(s->d, j->project, j->job_id, "ERROR", "%s", r->why);
        begin_stop(s, j, AS_FAIL, "%s", r->why);
        return;
    }
    if (r->lost)
        kilnd_event(s->d, j->project, j->job_id, "WARNING",
                    "%s: %s; counted as killed (status %d) for its restart policy", r->task, r->why,
                    code);
    else
        kilnd_event(s->d, j->project, j->job_id, code ? "WARNING" : "INFO",
                    "%s exited with status %d", r->task, code);
    if (j->after != AS_NONE) return; /* stopping anyway */
    if (elastic_exit(s, j, r, code)) return;
    const char *pol = policy_of(j, r->role);
    if (code == 0 && r->role == KILN_ROLE_MASTER) {
        begin_stop(s, j, AS_SUCCEED, "Job completed successfully.");
        return;
    }
    bool retry;
    if (strcmp(pol, "Always") == 0)
        retry = true;
    else if (code == 0)
        return; /* a worker or ps that finished: fine */
    else if (strcmp(pol, "OnFailure") == 0)
        retry = true;
    else if (strcmp(pol, "ExitCode") == 0)
        retry = code >= 128; /* 1-127 permanent, 128-255 retried */
    else
        retry = false;
    if (retry && j->failures < backoff_limit(j)) {
        /* an all-reduce group cannot lose a member: restart all of it */
        begin_stop(s, j, AS_RESTART,
                   "The replica %s exited with status %d%s; restarting the job's replicas "
                   "(restart policy %s, restart %d of at most %d)",
                   r->task, code, r->lost ? " (its monitor is gone)" : "", pol, j->failures + 1,
                   backoff_limit(j));
        return;
    }
    j->fail_reason = retry ? KILND_FAIL_BACKOFF_LIMIT : KILND_FAIL_REPLICA_EXIT;
    if (retry)
        begin_stop(s, j, AS_FAIL,
                   "The replica %s exited with a non-zero status of %d; the backoff limit (%d "
                   "restarts) is reached.",
                   r->task, code, backoff_limit(j));
    else
        begin_stop(s, j, AS_FAIL,
                   "The replica %s exited with a non-zero status of %d (restart policy %s)%s%s.",
                   r->task, code, pol, r->lost ? ": " : "", r->lost ? r->why : "");
}

static void finish(sup *s, rjob *j, rjob **link)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();
    const char *msg = j->after_msg ? j->after_msg : "";
    char why[512];

    for (size_t i = 0; i < j->n; i++)
        pump_metrics(s, j, &j->reps[i]); /* the last reports before the end */
    if (j->study && j->after != AS_RESTART) {
        trial_finish(s, j);
        *link = j->next;
        rjob_free(s, j);
        return;
    }
    switch (j->after) {
    case AS_RESTART:
        j->failures++;
        j->restarts++;
        d->restarts_total[KILND_RESTART_FAILURE]++;
        kiln_log_write(j->log_fd, "WARNING", "service", msg, strlen(msg));
        for (size_t i = 0; i < j->n; i++) {
            close_replica(s, j, &j->reps[i]);
            j->reps[i].alive = false;
        }
        j->after = AS_NONE;
        if (spawn_all(s, j, why, sizeof why) != KILN_OK) {
            begin_stop(s, j, AS_FAIL, "%s", why);
            return;
        }
        save_runtime(s, j);
        return;
    case AS_REQUEUE: {
        j->restarts++;
        d->restarts_total[KILND_RESTART_DRAIN]++;
        char *keep = runtime_for_requeue(j->metrics, NULL);
        kiln_store_job_set_runtime(d->store, j->project, j->job_id, j->restarts, j->failures, keep);
        free(keep);
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_QUEUED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "WARNING", "service", msg, strlen(msg));
        break;
    }
    case AS_SUCCEED:
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING) |
                                      KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_SUCCEEDED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "INFO", "service", msg, strlen(msg));
        break;
    case AS_FAIL:
        if (kiln_store_job_transition(d->store, j->project, j->job_id,
                                      KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING),
                                      KILN_STATE_FAILED, msg, now, NULL) == KILN_OK)
            d->failures_total[j->fail_reason]++;
        kiln_store_job_transition(d->store, j->project, j->job_id, KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_CANCELLED, NULL, now, NULL);
        kiln_log_write(j->log_fd, "ERROR", "service", msg, strlen(msg));
        break;
    case AS_CANCEL:
    case AS_NONE:
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(CANCELLING) | KILN_STATE_MASK(RUNNING) |
                                      KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_CANCELLED, msg[0] ? msg : NULL, now, NULL);
        kiln_log_write(j->log_fd, "INFO", "service", "Job CANCELLED", 13);
        break;
    }
    if (j->after != AS_REQUEUE) save_runtime(s, j);
    *link = j->next;
    rjob_free(s, j);
}

/* ---------- one tick ---------- */

static void check_job(sup *s, rjob *j, bool woken, int64_t now)
{
    kilnd *d = s->d;
    if (j->after == AS_NONE && woken) {
        kiln_job_record *r = NULL;
        if (kiln_store_job_get(d->store, j->project, j->job_id, &r) == KILN_OK &&
            r->job->state == KILN_STATE_CANCELLING)
            begin_stop(s, j, AS_CANCEL, "Job cancelled by request");
        kiln_job_record_free(r);
    }
    const kiln_training_input *ti = &j->job->training_input;
    if (j->after == AS_NONE && j->start_ns && ti->has_scheduling &&
        ti->scheduling.has_max_running_time &&
        now - j->start_ns > duration_ns(&ti->scheduling.max_running_time)) {
        kiln_store_job_transition(d->store, j->project, j->job_id, KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_CANCELLING, NULL, now, NULL);
        begin_stop(s, j, AS_CANCEL, "The job ran longer than maxRunningTime (%llds); cancelled",
                   (long long)ti->scheduling.max_running_time.seconds);
    }
    /* Kubeflow's runPolicy.activeDeadlineSeconds: the job fails (DeadlineExceeded) */
    if (j->after == AS_NONE && j->start_ns && ti->has_run_policy &&
        ti->run_policy.has_active_deadline_seconds &&
        now - j->start_ns > ti->run_policy.active_deadline_seconds * 1000000000LL) {
        j->fail_reason = KILND_FAIL_DEADLINE;
        begin_stop(s, j, AS_FAIL,
                   "DeadlineExceeded: the job was active longer than "
                   "runPolicy.activeDeadlineSeconds (%llds)",
                   (long long)ti->run_policy.active_deadline_seconds);
    }
    for (size_t i = 0; i < j->n; i++)
        if (!j->reps[i].alive && !j->reps[i].handled && j->reps[i].spawned)
            on_exit_of(s, j, &j->reps[i]);
}

/* Collects exited monitors and helpers (`podman kill`): their exits are
 * learnt from the monitors' files, so this only keeps zombies away. */
static void reap(sup *s)
{
    int status;
    (void)s;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
}

/* Asks every replica's monitor where it is. */
static void watch(sup *s)
{
    for (rjob *j = s->jobs; j; j = j->next) {
        bool changed = false;
        for (size_t i = 0; i < j->n; i++) {
            replica *r = &j->reps[i];
            if (!r->alive) continue;
            int code = 0;
            kiln_exec_status st = kiln_exec_poll(&s->d->exec, &r->h, &code, r->why, sizeof r->why);
            switch (st) {
            case KILN_EXEC_STARTING:
                break;
            case KILN_EXEC_RUNNING:
                changed |= !r->started;
                r->started = true;
                break;
            case KILN_EXEC_EXITED:
                r->alive = false;
                r->code = code;
                changed = true;
                break;
            case KILN_EXEC_FAILED:
                r->alive = false;
                r->failed = true;
                r->code = 255;
                changed = true;
                break;
            case KILN_EXEC_LOST:
                r->alive = false;
                r->lost = true;
                r->code = 128 + SIGKILL;
                snprintf(r->why, sizeof r->why,
                         "its monitor is gone without recording an exit status (killed?)");
                /* whatever the monitor left running goes: never a replica unseen */
                kiln_exec_signal(&s->d->exec, &r->h, SIGKILL);
                changed = true;
                break;
            }
        }
        if (changed) save_runtime(s, j);
    }
}

/* PREPARING -> RUNNING once every replica of the job runs its program. */
static void mark_running(sup *s, rjob *j)
{
    if (j->running || j->after != AS_NONE) return;
    for (size_t i = 0; i < j->n; i++)
        if (!j->reps[i].dropped && !j->reps[i].started) return;
    j->running = true;
    if (kiln_store_job_transition(s->d->store, j->project, j->job_id, KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_RUNNING, NULL, kiln_now_ns(), NULL) == KILN_OK) {
        kiln_job_record *fresh = NULL;
        if (kiln_store_job_get(s->d->store, j->project, j->job_id, &fresh) == KILN_OK)
            j->start_ns = fresh->start_ns;
        kiln_job_record_free(fresh);
        kiln_log_write(j->log_fd, "INFO", "service", "Job RUNNING", 11);
    }
    save_runtime(s, j);
}

/* A drain takes the elastic workers on node `n` out of the job, which
 * carries on while minReplicas workers remain and the rendezvous host (worker
 * 0) is elsewhere. Returns false when the whole job must stop instead. */
static bool drain_elastic(sup *s, rjob *j, size_t n)
{
    int leaving = 0;
    if (!j->elastic) return false;
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (r->dropped || r->node != n) continue;
        bool rdzv_host = j->wo ? r->role == KILN_ROLE_MASTER : r->index == 0;
        if (!elastic_worker(j, r) || rdzv_host) return false;
        leaving++;
    }
    if (live_workers(j) - leaving < j->el_min) return false;
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (r->dropped || r->node != n) continue;
        r->leaving = true;
        if (r->alive) {
            kiln_exec_signal(&s->d->exec, &r->h, SIGTERM);
            r->kill_at_ns = kiln_now_ns() + (int64_t)s->d->grace_ms * 1000000;
        }
    }
    kilnd_event(s->d, j->project, j->job_id, "WARNING",
                "Node %s is being drained (maintenance): %d worker%s leave%s the job "
                "(SIGTERM, SIGKILL after %d ms); %d carry on (minReplicas %d)",
                s->d->cluster.nodes[n].name, leaving, leaving == 1 ? "" : "s",
                leaving == 1 ? "s" : "", s->d->grace_ms, live_workers(j), j->el_min);
    return true;
}

/* Elastic workers leaving for a drain that outlive the grace period after
 * their SIGTERM get SIGKILL, as a stopping job's replicas do. */
static void kill_leavers(sup *s, rjob *j, int64_t now)
{
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (!r->alive || !r->leaving || !r->kill_at_ns || now < r->kill_at_ns) continue;
        kiln_exec_signal(&s->d->exec, &r->h, SIGKILL);
        r->kill_at_ns = 0;
    }
}

static void drains(sup *s)
{
    kilnd *d = s->d;
    for (size_t n = 0; n < d->cluster.n; n++) {
        pthread_mutex_lock(&d->mu);
        bool pending = d->drain_pending[n];
        d->drain_pending[n] = false;
        pthread_mutex_unlock(&d->mu);
        if (!pending) continue;
        for (rjob *j = s->jobs; j; j = j->next) {
            bool on = false;
            for (size_t i = 0; i < j->n; i++)
                on |= j->reps[i].node == n;
            if (on && j->after == AS_NONE && drain_elastic(s, j, n)) {
                continue;
            } else if (on && j->after == AS_NONE) {
                kilnd_event(d, j->project, j->job_id, "WARNING",
                            "Node %s is being drained (maintenance): stopping replicas with "
                            "SIGTERM, SIGKILL after %d ms",
                            d->cluster.nodes[n].name, d->grace_ms);
                begin_stop(s, j, AS_REQUEUE,
                           "Replicas stopped for the drain of node %s; the job is queued "
                           "again and resumes from its newest checkpoint",
                           d->cluster.nodes[n].name);
            } else if (on && j->after == AS_RESTART) {
                /* a group restart would land on the drained node again: requeue instead */
                j->after = AS_REQUEUE;
                free(j->after_msg);
                if (asprintf(&j->after_msg,
                             "Replicas stopped for a restart and the drain of node %s; the job "
                             "is queued again",
                             d->cluster.nodes[n].name) < 0)
                    j->after_msg = NULL;
            }
        }
    }
}

static bool tick(sup *s, bool woken)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();

    watch(s);
    reap(s);
    drains(s);
    for (rjob *j = s->jobs; j; j = j->next) {
        mark_running(s, j);
        for (size_t i = 0; i < j->n; i++)
            pump_metrics(s, j, &j->reps[i]);
        check_job(s, j, woken, now);
        kill_leavers(s, j, now);
        grow(s, j, now);
        trial_check(s, j);
    }
    for (rjob **link = &s->jobs; *link;) {
        rjob *j = *link;
        bool any = false;
        for (size_t i = 0; i < j->n; i++)
            any |= j->reps[i].alive;
        if (j->after != AS_NONE && !any) {
            finish(s, j, link);
            s->dirty = true;
            if (*link == j) link = &j->next; /* restarted in place */
            continue;
        }
        if (j->after != AS_NONE && !j->killed && now >= j->kill_at_ns) {
            stop_all(s, j, SIGKILL);
            j->killed = true;
        }
        link = &j->next;
    }
    /* The queue is read when something may have changed (a wake-up from the
     * API, a job that ended) and every second anyway (maxWaitTime). */
    if (!d->stop && (woken || s->dirty)) schedule(s);
    if (!d->stop) start_trials(s);
    s->dirty = false;
    return true;
}

/* A runtime record that names monitors: its replicas can be adopted. */
static bool adoptable(const char *runtime)
{
    json_t *root = runtime ? json_loads(runtime, 0, NULL) : NULL;
    json_t *reps = json_object_get(root, "replicas"), *r;
    size_t i;
    bool any = false;
    /* a tuning job's trials are not adopted: the study resumes and runs
     * them again (kill_monitors stops what is left of them) */
    if (json_object_get(root, "study")) {
        json_decref(root);
        return false;
    }
    json_array_foreach(reps, i, r)
    {
        any |= json_integer_value(json_object_get(r, "monitor")) > 0 ||
               json_object_get(r, "executor") != NULL;
    }
    json_decref(root);
    return any;
}

/* Stops the monitors (and their programs) that run under a job's
 * replicas/ directory: a job that cannot be adopted leaves none unseen. */
static void kill_monitors(kilnd *d, const char *project, const char *id)
{
    char dir[PATH_MAX], rdir[PATH_MAX + 16];
    kiln_strv tasks = {0};
    kilnd_job_dir(d, project, id, dir, sizeof dir);
    snprintf(rdir, sizeof rdir, "%s/replicas", dir);
    if (kiln_exec_list(rdir, &tasks) != KILN_OK) return;
    for (size_t i = 0; i < tasks.n; i++) {
        char state[PATH_MAX + 200];
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
        kill_monitors(d, r->project, id);
        if (r->job->state == KILN_STATE_CANCELLING) {
            kiln_store_job_transition(d->store, r->project, id, KILN_STATE_MASK(CANCELLING),
                                      KILN_STATE_CANCELLED, NULL, now, NULL);
            kilnd_event(d, r->project, id, "INFO", "kilnd restarted; Job CANCELLED");
            continue;
        }
        json_t *m = runtime_kept(r->runtime, "metrics"), *st = runtime_kept(r->runtime, "study");
        char *keep = runtime_for_requeue(m, st);
        json_decref(st);
        kiln_store_job_set_runtime(d->store, r->project, id, r->restarts + 1, r->failures, keep);
        free(keep);
        json_decref(m);
        d->restarts_total[KILND_RESTART_KILND]++;
        kiln_store_job_transition(d->store, r->project, id, mask & ~KILN_STATE_MASK(CANCELLING),
                                  KILN_STATE_QUEUED, NULL, now, NULL);
        kilnd_event(d, r->project, id, "WARNING",
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

/* Takes over one job a previous kilnd ran: its placement, ports and
 * replicas, each through its monitor. Exits that happened while kilnd was
 * away are in the monitors' files and are judged on the first tick, with
 * their real codes; a replica whose monitor is gone is judged as killed. */
static void adopt_job(sup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    json_t *root = json_loads(rec->runtime, 0, NULL);
    json_t *reps = json_object_get(root, "replicas"), *o;
    size_t n = json_array_size(reps), idx;
    rjob *j = calloc(1, sizeof *j);
    int adopted = 0, away = 0;
    if (!j || !n) goto fail;
    j->log_fd = -1;
    j->project = strdup(rec->project);
    j->job_id = strdup(rec->job->job_id);
    j->reps = calloc(n, sizeof *j->reps);
    j->pl.slots = calloc(n, sizeof *j->pl.slots);
    if (!j->project || !j->job_id || !j->reps || !j->pl.slots) goto fail;
    j->pl.n = j->n = n;
    kilnd_job_dir(d, j->project, j->job_id, j->dir, sizeof j->dir);
    json_array_foreach(reps, idx, o)
    {
        replica *r = &j->reps[idx];
        kiln_slot *sl = &j->pl.slots[idx];
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
        kiln_exec_task_name(r->role, r->index, r->task);
        json_t *g = json_object_get(o, "gpus"), *devs = json_object_get(o, "devs");
        r->n_gpus = (int)json_array_size(g);
        if (r->n_gpus > KILN_MAX_REPLICA_DEVICES) goto fail;
        for (int k = 0; k < r->n_gpus; k++) {
            r->gpus[k] = (int)json_integer_value(json_array_get(g, (size_t)k));
            sl->devs[k] = (int)json_integer_value(json_array_get(devs, (size_t)k));
        }
        sl->n_devs = r->n_gpus;
        sl->role = r->role;
        sl->index = r->index;
        sl->node = r->dropped ? (size_t)-1 : r->node;
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
        if (r->port > 0 && r->port - d->port_base >= 0 && r->port - d->port_base < d->port_count &&
            !r->dropped)
            s->port_used[r->port - d->port_base] = true;
        if (mon > 0 && !r->dropped) {
            r->alive = r->spawned = true; /* the first tick's watch() says if it still runs */
            adopted++;
        } else {
            /* it had ended before kilnd went: judged again unless it was a
             * finished worker (its exit decided nothing) */
            r->handled = r->dropped || (r->code == 0 && r->role != KILN_ROLE_MASTER);
            r->spawned = !r->handled;
            away += !r->handled;
        }
    }
    j->job = rec->job;
    rec->job = NULL;
    const kiln_pytorch_job *pt = &j->job->training_input.pytorch_job;
    if (j->job->training_input.has_pytorch_job && pt->has_elastic_policy) {
        j->elastic = true;
        j->wo = pt->workers_only ? 1 : 0;
        j->el_min = (int)pt->elastic_policy.min_replicas;
        j->el_max = (int)pt->elastic_policy.max_replicas;
        j->grow_at_ns = kiln_now_ns() + 1000000000LL;
    }
    j->running =
        json_is_true(json_object_get(root, "running")) || j->job->state == KILN_STATE_RUNNING;
    j->metrics = runtime_kept(rec->runtime, "metrics"); /* trainingOutput keeps the last report */
    j->start_ns = rec->start_ns;
    j->restarts = rec->restarts;
    j->failures = rec->failures;
    pthread_mutex_lock(&d->mu);
    kiln_sched_claim(d->sched, &j->pl);
    pthread_mutex_unlock(&d->mu);
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/log.tsv", j->dir);
    j->log_fd = open(sub, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    j->next = s->jobs;
    s->jobs = j;
    kilnd_event(d, j->project, j->job_id, "INFO",
                "kilnd restarted: adopted the job's %d running replica%s through their monitors "
                "(restarts stay %d); %d that had ended before are judged again",
                adopted, adopted == 1 ? "" : "s", j->restarts, away);
    json_decref(root);
    return;
fail:
    /* cannot be adopted: stop what runs, requeue (restart counted) */
    json_decref(root);
    if (j) {
        for (size_t i = 0; i < j->n; i++)
            if (j->reps[i].alive) kiln_exec_signal(&d->exec, &j->reps[i].h, SIGKILL);
        free(j->reps);
        free(j->pl.slots);
        free(j->project);
        free(j->job_id);
        free(j);
    }
    kill_recorded(rec->runtime);
    kill_monitors(d, rec->project, rec->job->job_id);
    int64_t now = kiln_now_ns();
    kiln_store_job_set_runtime(d->store, rec->project, rec->job->job_id, rec->restarts + 1,
                               rec->failures, NULL);
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id,
                              KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING),
                              KILN_STATE_QUEUED, NULL, now, NULL);
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(CANCELLING),
                              KILN_STATE_CANCELLED, NULL, now, NULL);
    kilnd_event(d, rec->project, rec->job->job_id, "WARNING",
                "kilnd restarted and could not adopt the job's replicas (its runtime record or "
                "the node config changed): they were stopped and the job is queued again");
}

static void adopt_all(sup *s)
{
    kiln_job_record **v = NULL;
    size_t n = 0;
    unsigned mask =
        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);
    if (kiln_store_jobs_by_state(s->d->store, mask, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++)
        if (adoptable(v[i]->runtime)) adopt_job(s, v[i]);
    kiln_job_records_free(v, n);
}

void *kilnd_supervisor(void *arg)
{
    sup s = {.d = arg};
    kilnd *d = s.d;
    s.port_used = calloc((size_t)d->port_count, sizeof(bool));
    if (!s.port_used) {
        d->stop = 1;
        return NULL;
    }
    adopt_all(&s);
    bool woken = true;
    unsigned ticks = 0;
    while (!d->stop) {
        tick(&s, woken);
        /* wait for the wake pipe, replica output or the tick */
        size_t nfds = 1;
        for (rjob *j = s.jobs; j; j = j->next)
            nfds += j->n;
        struct pollfd *pf = calloc(nfds, sizeof *pf);
        if (!pf) {
            usleep(TICK_MS * 1000);
            continue;
        }
        size_t k = 0;
        pf[k++] = (struct pollfd){.fd = d->wake_fd[0], .events = POLLIN};
        for (rjob *j = s.jobs; j; j = j->next)
            for (size_t i = 0; i < j->n; i++)
                pf[k++] = (struct pollfd){.fd = j->reps[i].h.life_fd, .events = POLLIN};
        int rc = poll(pf, k, TICK_MS);
        woken = false;
        if (rc > 0 && (pf[0].revents & POLLIN)) {
            char buf[256];
            while (read(d->wake_fd[0], buf, sizeof buf) > 0) {
            }
            woken = true;
        }
        free(pf);
        if (++ticks % 10 == 0) woken = true; /* re-read cancel requests at least every second */
    }
    /* shutting down: the replicas run on under their monitors, and the next
     * kilnd adopts them (an upgrade stops nothing) */
    reap(&s);
    while (s.jobs) {
        rjob *j = s.jobs;
        s.jobs = j->next;
        rjob_free(&s, j);
    }
    free(s.port_used);
    return NULL;
}
