/* hpa.c - elasticPolicy.metrics: kilnd as the HorizontalPodAutoscaler that
 * the Kubeflow training operator creates for an elastic PyTorchJob
 * (autoscaling/v2, minReplicas/maxReplicas from elasticPolicy).
 *
 * Every --hpa-sync-period (Kubernetes' default 15 s) each live worker is
 * measured: CPU time since the last look and memory, from /proc for a
 * process worker's process group (resident memory), from its cgroup for a
 * container worker (its processes are children of conmon, outside its
 * `podman run`'s group; memory is the working set, as metrics-server
 * reports it: kiln/exec.h kiln_cgroup_read), or from Slurm's job accounting
 * for a worker that is a step on a Slurm node (sstat: alloc.h
 * kiln_slurm_step_usage; its memory is Slurm's figure); and, for an nvidia.com/gpu
 * metric, the percent busy of the worker's GPUs from the GPU watch (NVML).
 * Kubernetes' algorithm then gives the workers wanted:
 *   ratio = current / target   (Utilization: percent of the replicas'
 *           requests, the slot's vCPUs and memory, or of its GPUs' time;
 *           AverageValue: per worker)
 *   no change while |ratio - 1| <= 0.1 (the tolerance)
 *   desired = ceil(ratio * measured workers), the largest over the metrics;
 *   a worker not measured yet counts as using nothing when scaling up
 * Scaling up goes at most to max(2 * current, current + 4) a look (the
 * default scaleUp policy); scaling down takes the highest recommendation
 * of the stabilisation window (--hpa-downscale-stabilization, 300 s).
 * The result is clamped to [minReplicas, maxReplicas]. */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/supervisor/supervisor_int.h"
#include "kiln/catalog.h"

#define HPA_TOLERANCE 0.1
#define HPA_RECS      512 /* recommendations kept for the stabilisation window */

typedef struct hpa_rec {
    int64_t ns;
    int n;
} hpa_rec;

struct hpa {
    int want;        /* workers wanted now */
    int64_t next_ns; /* next look */
    hpa_rec recs[HPA_RECS];
    size_t nrec, head; /* a ring, oldest at head */
    /* the last look, for GET (percent for Utilization, millicores or bytes per worker) */
    double last[8];
    int measured;
};

void hpa_start(rjob *j, int workers)
{
    const kiln_elastic_policy *ep = &j->job->training_input.pytorch_job.elastic_policy;
    if (!j->elastic || ep->n_metrics == 0 || j->hpa) return;
    j->hpa = calloc(1, sizeof *j->hpa);
    if (!j->hpa) return; /* no HPA: the job keeps the workers it has */
    j->hpa->want = workers;
    for (size_t i = 0; i < 8; i++)
        j->hpa->last[i] = -1;
}

void hpa_free(rjob *j)
{
    free(j->hpa);
    j->hpa = NULL;
}

/* One process's CPU ticks and resident bytes, with its process group. */
static bool proc_stat(const char *pid, long *pgrp, unsigned long long *ticks, long long *rss)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold anything */
    if (!p) return false;
    unsigned long long ut = 0, st = 0;
    long rs = 0;
    /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime cutime cstime priority nice threads
     * itrealvalue starttime vsize rss */
    if (sscanf(p + 1,
               " %*c %*d %ld %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%*u %*u %ld",
               pgrp, &ut, &st, &rs) != 4)
        return false;
    *ticks = ut + st;
    *rss = (long long)rs * sysconf(_SC_PAGESIZE);
    return true;
}

/* Sums CPU ticks and memory of the process groups `pg[0..n)` into the
 * same-indexed totals, in one pass over /proc. */
static void measure(const long *pg, size_t n, unsigned long long *ticks, long long *rss)
{
    DIR *dir = opendir("/proc");
    struct dirent *e;
    if (!dir) return;
    while ((e = readdir(dir)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        long g;
        unsigned long long t;
        long long r;
        if (!proc_stat(e->d_name, &g, &t, &r)) continue;
        for (size_t i = 0; i < n; i++)
            if (pg[i] == g) {
                ticks[i] += t;
                rss[i] += r;
            }
    }
    closedir(dir);
}

/* What a worker's use is measured in: use[NM * i + M] and req[NM * i + M]
 * for worker i (req: what Utilization is a percent of). */
enum { M_CPU, M_MEM, M_GPU, NM };

static int metric_of(const kiln_elastic_metric *m)
{
    if (strcmp(m->resource, "cpu") == 0) return M_CPU;
    return strcmp(m->resource, "memory") == 0 ? M_MEM : M_GPU;
}

/* Kubernetes' replica calculation for one metric: the workers it wants,
 * or `live` within the tolerance; *shown is its current value. */
static int recommend(const kiln_elastic_metric *m, const double *use, const double *req,
                     size_t measured, int missing, int live, double *shown)
{
    int k = metric_of(m);
    bool util = strcmp(m->target_type, "Utilization") == 0;
    int64_t tv = 0;
    double target;
    if (util)
        target = (double)m->average_utilization;
    else if (k == M_CPU   ? kiln_quantity_cpu_milli(m->average_value, &tv)
             : k == M_MEM ? kiln_quantity_bytes(m->average_value, &tv)
                          : false)
        target = (double)tv;
    else
        return live; /* refused at create (honoured.c): not reached */
    double u = 0, q = 0;
    for (size_t i = 0; i < measured; i++) {
        u += use[NM * i + k];
        q += req[NM * i + k];
    }
    if (measured == 0 || target <= 0 || (util && q <= 0)) return live;
    double cur = util ? 100.0 * u / q : u / (double)measured;
    *shown = cur;
    double ratio = cur / target;
    if (ratio > 1 && missing > 0) { /* the not-yet-measured as using nothing */
        double per = q / (double)measured;
        cur = util ? 100.0 * u / (q + per * missing) : u / (double)(measured + missing);
        ratio = cur / target;
        if (ratio <= 1) return live;
        measured += (size_t)missing;
    }
    if (fabs(ratio - 1.0) <= HPA_TOLERANCE) return live;
    return (int)ceil(ratio * (double)measured);
}

/* Finds the cgroups of the container workers idx[0..n) that have none for
 * their current start: one `podman ps`, bounded (the supervisor's thread
 * waits for it), only while some container worker is new. */
#define HPA_PODMAN_MS 2000
static void find_cgroups(sup *s, rjob *j, const size_t *idx, size_t n)
{
    const char **names = calloc(n ? n : 1, sizeof *names);
    pid_t *pids = calloc(n ? n : 1, sizeof *pids);
    size_t *which = calloc(n ? n : 1, sizeof *which);
    size_t nn = 0;
    if (!names || !pids || !which) goto out;
    for (size_t k = 0; k < n; k++) {
        replica *r = &j->reps[idx[k]];
        if (r->kind != KILN_EXEC_CONTAINER || r->hpa_cg_for == r->h.pid || !r->h.name[0] ||
            j->pl.slots[idx[k]].alloc > 0) /* on a Slurm node: measured by Slurm */
            continue;
        which[nn] = idx[k];
        names[nn++] = r->h.name;
    }
    if (nn == 0 || kiln_exec_container_pids(&s->d->exec, names, nn, pids, HPA_PODMAN_MS) == 0)
        goto out;
    for (size_t k = 0; k < nn; k++) {
        replica *r = &j->reps[which[k]];
        if (pids[k] > 0 && kiln_cgroup_of(pids[k], &r->hpa_cg)) r->hpa_cg_for = r->h.pid;
    }
out:
    free(names);
    free(pids);
    free(which);
}

/* The percent busy summed over the GPUs of slot `sl` (this machine's, read
 * by the GPU watch) into *sum; how many were read. */
static int gpu_busy(sup *s, const kiln_slot *sl, double *sum)
{
    int n = 0;
    *sum = 0;
    if (!s->d->gpus || sl->node != 0) return 0;
    for (int k = 0; k < sl->n_devs; k++) {
        kiln_gpu_status st;
        if (!kiln_gpu_watch_get(s->d->gpus, (size_t)sl->devs[k], &st) || !st.have_util) continue;
        *sum += st.util_gpu;
        n++;
    }
    return n;
}

static void remember(struct hpa *h, int64_t now, int n)
{
    size_t at = (h->head + h->nrec) % HPA_RECS;
    if (h->nrec == HPA_RECS)
        h->head = (h->head + 1) % HPA_RECS;
    else
        h->nrec++;
    h->recs[at] = (hpa_rec){.ns = now, .n = n};
}

/* The highest recommendation of the window: scaling down waits for it. */
static int window_max(const struct hpa *h, int64_t since)
{
    int best = 0;
    for (size_t k = 0; k < h->nrec; k++) {
        const hpa_rec *r = &h->recs[(h->head + k) % HPA_RECS];
        if (r->ns >= since && r->n > best) best = r->n;
    }
    return best;
}

int hpa_tick(sup *s, rjob *j, int live, bool (*is_worker)(const rjob *, const replica *),
             int64_t now)
{
    struct hpa *h = j->hpa;
    const kiln_elastic_policy *ep = &j->job->training_input.pytorch_job.elastic_policy;
    if (!h || now < h->next_ns || j->after != AS_NONE || j->fetch) return h ? h->want : live;
    h->next_ns = now + (int64_t)s->d->hpa_sync_ms * 1000000LL;
    size_t nw = 0, n1 = j->n ? j->n : 1;
    bool procs = false, gpu = false;
    for (size_t m = 0; m < ep->n_metrics; m++)
        gpu = gpu || metric_of(&ep->metrics[m]) == M_GPU;
    long *pg = calloc(n1, sizeof *pg);
    unsigned long long *ticks = calloc(n1, sizeof *ticks);
    long long *rss = calloc(n1, sizeof *rss);
    double *use = calloc(NM * n1, sizeof *use);
    double *req = calloc(NM * n1, sizeof *req);
    size_t *idx = calloc(n1, sizeof *idx);
    if (!pg || !ticks || !rss || !use || !req || !idx) goto out;
    for (size_t i = 0; i < j->n; i++) {
        replica *r = &j->reps[i];
        if (!is_worker(j, r) || r->dropped || r->leaving || !r->alive || !r->started ||
            r->h.pid <= 0)
            continue;
        /* a process replica leads its own group; a container's processes
         * are in no group of ours (its cgroup is read instead); a step on
         * a Slurm node is Slurm's to measure (-2) */
        pg[nw] = j->pl.slots[i].alloc > 0         ? -2
                 : r->kind == KILN_EXEC_CONTAINER ? -1
                                                  : (long)r->h.pid;
        procs = procs || pg[nw] > 0;
        idx[nw++] = i;
    }
    find_cgroups(s, j, idx, nw);
    if (procs) measure(pg, nw, ticks, rss);
    size_t measured = 0;
    int missing = 0;
    double hz = (double)sysconf(_SC_CLK_TCK);
    for (size_t k = 0; k < nw; k++) {
        replica *r = &j->reps[idx[k]];
        const kiln_slot *sl = &j->pl.slots[idx[k]];
        unsigned long long cpu_us = 0;
        long long mem = 0;
        bool read = true;
        if (pg[k] > 0) {
            cpu_us = (unsigned long long)((double)ticks[k] * 1e6 / hz);
            mem = rss[k];
        } else if (pg[k] == -2) {
            read = kiln_slurm_step_usage(sl->alloc, r->task, &cpu_us, &mem);
        } else if (r->hpa_cg_for != r->h.pid || !kiln_cgroup_read(&r->hpa_cg, &cpu_us, &mem)) {
            r->hpa_cg_for = 0; /* not found yet, or gone: looked for again next time */
            read = false;
        }
        double busy = 0;
        int ngpu = gpu ? gpu_busy(s, sl, &busy) : 0;
        bool had = read && r->hpa_ns > 0 && r->hpa_pid == r->h.pid && cpu_us >= r->hpa_cpu_us;
        double dt = (double)(now - r->hpa_ns) / 1e9;
        if (had && dt > 0 && (!gpu || ngpu > 0)) {
            double *u = &use[NM * measured], *q = &req[NM * measured];
            u[M_CPU] = (double)(cpu_us - r->hpa_cpu_us) / 1e3 / dt; /* millicores */
            u[M_MEM] = (double)mem;
            u[M_GPU] = busy;
            q[M_CPU] = 1000.0 * sl->vcpus;
            q[M_MEM] = sl->memory_gb * 1073741824.0;
            q[M_GPU] = 100.0 * ngpu;
            measured++;
        } else {
            missing++;
        }
        r->hpa_cpu_us = read ? cpu_us : 0;
        r->hpa_ns = read ? now : 0;
        r->hpa_pid = r->h.pid;
    }
    h->measured = (int)measured;
    int desired = -1;
    size_t top = 0; /* the metric that gave the count, for the event */
    for (size_t m = 0; m < ep->n_metrics; m++) {
        double shown = -1;
        int n = recommend(&ep->metrics[m], use, req, measured, missing, live, &shown);
        if (m < 8) h->last[m] = shown;
        if (n > desired) {
            desired = n;
            top = m < 8 ? m : top;
        }
    }
    if (measured == 0) goto out; /* nothing to go by yet: no change */
    remember(h, now, desired);
    int next = h->want;
    if (desired > h->want) {
        int cap = h->want * 2 > h->want + 4 ? h->want * 2 : h->want + 4;
        next = desired < cap ? desired : cap;
    } else if (desired < h->want) {
        int hi = window_max(h, now - (int64_t)s->d->hpa_down_window_ms * 1000000LL);
        next = hi < h->want ? hi : h->want;
    }
    if (next < ep->min_replicas) next = (int)ep->min_replicas;
    if (next > ep->max_replicas) next = (int)ep->max_replicas;
    if (next != h->want) {
        const kiln_elastic_metric *m0 = &ep->metrics[top];
        bool util = strcmp(m0->target_type, "Utilization") == 0;
        double v = h->last[top];
        char cur[64];
        if (metric_of(m0) == M_GPU)
            snprintf(cur, sizeof cur, "%.0f%% busy (target %lld%%)", v,
                     (long long)m0->average_utilization);
        else if (util)
            snprintf(cur, sizeof cur, "%.0f%% of requests (target %lld%%)", v,
                     (long long)m0->average_utilization);
        else
            snprintf(cur, sizeof cur, "%.0f%s a worker (target %s)", v,
                     strcmp(m0->resource, "cpu") == 0 ? "m" : " bytes", m0->average_value);
        kiln_jobfiles_event(
            s->d->jobfiles, j->project, j->job_id, "INFO",
            "Autoscaling (elasticPolicy.metrics): %s %s over %zu worker%s; %d -> %d "
            "workers (minReplicas %lld, maxReplicas %lld)",
            m0->resource, cur, measured, measured == 1 ? "" : "s", h->want, next,
            (long long)ep->min_replicas, (long long)ep->max_replicas);
        h->want = next;
    }
out:
    free(pg);
    free(ticks);
    free(rss);
    free(use);
    free(req);
    free(idx);
    return h->want;
}

int hpa_wanted(const rjob *j)
{
    return j->hpa->want;
}

json_t *hpa_json(const rjob *j)
{
    const kiln_elastic_policy *ep = &j->job->training_input.pytorch_job.elastic_policy;
    if (!j->hpa) return NULL;
    json_t *ms = json_array();
    for (size_t m = 0; ms && m < ep->n_metrics && m < 8; m++) {
        json_t *o = json_pack("{s:s,s:s}", "resource", ep->metrics[m].resource, "targetType",
                              ep->metrics[m].target_type);
        if (o && j->hpa->last[m] >= 0)
            json_object_set_new(o, "current", json_integer((json_int_t)llround(j->hpa->last[m])));
        json_array_append_new(ms, o);
    }
    return json_pack("{s:i,s:i,s:o}", "desiredWorkers", j->hpa->want, "measuredWorkers",
                     j->hpa->measured, "metrics", ms ? ms : json_array());
}
