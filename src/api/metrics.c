/* src/api/metrics.c - GET /metrics in Prometheus' text format (0.0.4), and
 * the API request counters behind part of it.
 *
 * What is exported (docs/service.md lists it with the meaning of each):
 * jobs by state, the queue, replicas running, restarts and failures by
 * reason, accelerators per node and type, API requests and their latency,
 * store write latency, and the training metrics jobs report. Everything is
 * computed at scrape time from the store, the scheduler and a few counters;
 * nothing is kept per job in memory.
 *
 * Label values that come from requests are never used as they are: a route
 * is one of a fixed set of templates ("/v1/projects/{project}/jobs/{job}")
 * and a method one of the HTTP verbs or "other", so no client can grow the
 * series table. */
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"

#define N_LAT_BOUNDS 11
static const double lat_bounds[N_LAT_BOUNDS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1.0};
static const char *const methods[] = {"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "other"};
#define N_METHODS (sizeof methods / sizeof methods[0])
static const char *const routes[] = {
    "/",
    "/ui",
    "/healthz",
    "/metrics",
    "/v1/nodes",
    "/v1/nodes/{node}",
    "/v1/nodes/{node}:verb",
    "/v1/projects/{project}/jobs",
    "/v1/projects/{project}/jobs/{job}",
    "/v1/projects/{project}/jobs/{job}:cancel",
    "/v1/projects/{project}/jobs/{job}:logs",
    "/v1/projects/{project}/jobs/{job}:metrics",
    "/v1/projects/{project}/jobs/{job}:verb",
    "other",
};
#define N_ROUTES  (sizeof routes / sizeof routes[0])
#define MAX_CODES 16 /* distinct status codes counted per (method, route) */

typedef struct series {
    unsigned code[MAX_CODES];
    uint64_t count[MAX_CODES];
    uint64_t le[N_LAT_BOUNDS]; /* cumulative */
    uint64_t n;
    double sum;
} series;

struct kiln_api_metrics {
    pthread_mutex_t mu;
    series s[N_METHODS][N_ROUTES];
};

void kiln__api_metrics_init(kilnd *d)
{
    d->metrics = calloc(1, sizeof *d->metrics);
    if (d->metrics) pthread_mutex_init(&d->metrics->mu, NULL);
}

void kiln__api_metrics_free(kilnd *d)
{
    if (!d->metrics) return;
    pthread_mutex_destroy(&d->metrics->mu);
    free(d->metrics);
    d->metrics = NULL;
}

static size_t method_index(const char *m)
{
    for (size_t i = 0; i + 1 < N_METHODS; i++)
        if (strcmp(m, methods[i]) == 0) return i;
    return N_METHODS - 1;
}

static size_t route_index(const char *url)
{
    if (strcmp(url, "/") == 0) return 0;
    if (strncmp(url, "/ui/", 4) == 0) return 1;
    if (strcmp(url, "/healthz") == 0) return 2;
    if (strcmp(url, "/metrics") == 0) return 3;
    if (strcmp(url, "/v1/nodes") == 0) return 4;
    if (strncmp(url, "/v1/nodes/", 10) == 0) return strchr(url + 10, ':') ? 6 : 5;
    if (strncmp(url, "/v1/projects/", 13) != 0) return N_ROUTES - 1;
    const char *j = strchr(url + 13, '/');
    if (!j || strncmp(j, "/jobs", 5) != 0) return N_ROUTES - 1;
    j += 5;
    if (!*j || strcmp(j, "/") == 0) return 7;
    const char *colon = strchr(j, ':');
    if (!colon) return 8;
    if (strcmp(colon, ":cancel") == 0) return 9;
    if (strcmp(colon, ":logs") == 0) return 10;
    if (strcmp(colon, ":metrics") == 0) return 11;
    return 12;
}

void kiln__api_metrics_observe(kilnd *d, const char *method, const char *url, unsigned code,
                               int64_t t0_ns)
{
    struct kiln_api_metrics *m = d->metrics;
    if (!m || !method || !url) return;
    double secs = (double)(kiln__api_mono_ns() - t0_ns) / 1e9;
    series *s = &m->s[method_index(method)][route_index(url)];
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < MAX_CODES; i++)
        if (s->code[i] == code || s->code[i] == 0) {
            s->code[i] = code;
            s->count[i]++;
            break;
        }
    s->n++;
    s->sum += secs;
    for (size_t i = 0; i < N_LAT_BOUNDS; i++)
        if (secs <= lat_bounds[i]) s->le[i]++;
    pthread_mutex_unlock(&m->mu);
}

/* ---------- the exposition ---------- */

typedef struct out {
    char *p;
    size_t len, cap;
    bool oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    if (o->oom) return;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if (o->p && o->len + (size_t)n < o->cap) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = (o->cap ? o->cap * 2 : 16384) + (size_t)n;
        char *np = realloc(o->p, cap);
        if (!np) {
            o->oom = true;
            return;
        }
        o->p = np;
        o->cap = cap;
    }
}

/* put() for another file's writer (api_queues.c): formats, then appends. */
static void put_any(void *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_any(void *o, const char *fmt, ...)
{
    char *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) {
        ((out *)o)->oom = true;
        return;
    }
    put(o, "%s", line);
    free(line);
}

static void head(out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value from configuration (node names, accelerator types): the
 * exposition format escapes backslash, quote and newline. */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t k = 0;
    for (; s && *s && k + 3 < len; s++) {
        if (*s == '\\' || *s == '"') buf[k++] = '\\';
        if (*s == '\n') {
            buf[k++] = '\\';
            buf[k++] = 'n';
            continue;
        }
        buf[k++] = *s;
    }
    buf[k] = '\0';
    return buf;
}

static const char *const restart_reasons[KILND_RESTART_REASONS] = {
    "replica_failure", "drain", "kilnd_restart", "gpu_failure", "preempted", "taint_eviction"};
static const char *const fail_reasons[KILND_FAIL_REASONS] = {
    "start_error",   "replica_exit", "backoff_limit", "deadline",
    "unschedulable", "gpu_failure",  "taint_eviction"};

static void jobs_part(kilnd *d, out *o)
{
    int64_t counts[KILN_STORE_STATES];
    kiln_job_record **v = NULL;
    size_t n = 0;
    int64_t now = kiln_now_ns(), oldest = 0, queued = 0;
    long long running = 0;

    if (kiln_store_job_counts(d->store, counts) == KILN_OK) {
        head(o, "kiln_jobs", "gauge", "Jobs by state (every project).");
        for (int st = KILN_STATE_QUEUED; st < KILN_STORE_STATES; st++)
            put(o, "kiln_jobs{state=\"%s\"} %lld\n", kiln_job_state_name((kiln_job_state)st),
                (long long)counts[st]);
        queued = counts[KILN_STATE_QUEUED];
    }
    /* queued jobs in queue order: the first is not always the oldest
     * (priorities), so look at all of them */
    if (kiln_store_jobs_by_state(d->store, KILN_STATE_MASK(QUEUED), &v, &n) == KILN_OK)
        for (size_t i = 0; i < n; i++)
            if (!oldest || v[i]->create_ns < oldest) oldest = v[i]->create_ns;
    kiln_job_records_free(v, n);
    head(o, "kiln_queue_length", "gauge", "Jobs waiting to be placed (QUEUED).");
    put(o, "kiln_queue_length %lld\n", (long long)queued);
    head(o, "kiln_queue_oldest_age_seconds", "gauge",
         "Age of the oldest QUEUED job (0 when the queue is empty).");
    put(o, "kiln_queue_oldest_age_seconds %.3f\n",
        oldest && now > oldest ? (double)(now - oldest) / 1e9 : 0.0);

    /* replicas and training metrics of the active jobs */
    v = NULL;
    n = 0;
    unsigned mask =
        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);
    if (kiln_store_jobs_by_state(d->store, mask, &v, &n) != KILN_OK) n = 0;
    json_t **rt = calloc(n ? n : 1, sizeof *rt);
    for (size_t i = 0; rt && i < n; i++) {
        rt[i] = v[i]->runtime ? json_loads(v[i]->runtime, 0, NULL) : NULL;
        json_t *rep;
        size_t k;
        json_array_foreach(json_object_get(rt[i], "replicas"), k, rep)
        {
            const char *st = json_string_value(json_object_get(rep, "state"));
            running += st && strcmp(st, "RUNNING") == 0;
        }
    }
    head(o, "kiln_replicas_running", "gauge", "Replica processes running now.");
    put(o, "kiln_replicas_running %lld\n", running);
    static const struct {
        const char *key, *name, *help;
    } tm[] = {
        {"samplesPerSecond", "kiln_job_training_samples_per_second",
         "Training throughput the job last reported (samples per second)."},
        {"loss", "kiln_job_training_loss", "Training loss the job last reported."},
        {"accuracy", "kiln_job_training_accuracy", "Training accuracy the job last reported."},
        {"step", "kiln_job_training_step", "Training step the job last reported."},
    };
    for (size_t t = 0; rt && t < sizeof tm / sizeof tm[0]; t++) {
        head(o, tm[t].name, "gauge", tm[t].help);
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_object_get(json_object_get(rt[i], "metrics"), tm[t].key);
            if (json_is_number(x))
                put(o, "%s{project=\"%s\",job=\"%s\"} %.9g\n", tm[t].name, v[i]->project,
                    v[i]->job->job_id, json_number_value(x));
        }
    }
    if (!rt) o->oom = true;
    for (size_t i = 0; rt && i < n; i++)
        json_decref(rt[i]);
    free(rt);
    kiln_job_records_free(v, n);

    head(o, "kiln_restarts_total", "counter",
         "Times a job's replicas were started again, by reason (since kilnd started).");
    for (int r = 0; r < KILND_RESTART_REASONS; r++)
        put(o, "kiln_restarts_total{reason=\"%s\"} %llu\n", restart_reasons[r],
            (unsigned long long)d->restarts_total[r]);
    head(o, "kiln_job_failures_total", "counter",
         "Jobs that ended FAILED, by reason (since kilnd started).");
    for (int r = 0; r < KILND_FAIL_REASONS; r++)
        put(o, "kiln_job_failures_total{reason=\"%s\"} %llu\n", fail_reasons[r],
            (unsigned long long)d->failures_total[r]);
    kiln__api_queues_metrics(d, put_any, o); /* kueue_*: kilnd --queues */
}

static void nodes_part(kilnd *d, out *o)
{
    char nb[256], tb[256];
    head(o, "kiln_node_cordoned", "gauge", "1 when the node takes no new replicas (drain).");
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->cluster.n; i++)
        put(o, "kiln_node_cordoned{node=\"%s\"} %d\n", esc(d->cluster.nodes[i].name, nb, sizeof nb),
            kiln_sched_cordoned(d->sched, i) ? 1 : 0);
    /* per node and type: capacity, allocated (held by a replica), allocatable */
    static const char *const kinds[] = {"kiln_accelerators_capacity", "kiln_accelerators_allocated",
                                        "kiln_accelerators_allocatable"};
    static const char *const helps[] = {
        "Accelerators the node has, by type.", "Accelerators held by a replica, by node and type.",
        "Accelerators free for new replicas, by node and type (0 on a cordoned node; failed "
        "and refused GPUs are not free)."};
    for (int k = 0; k < 3; k++) {
        head(o, kinds[k], "gauge", helps[k]);
        for (size_t i = 0; i < d->cluster.n; i++) {
            const kiln_node *nd = &d->cluster.nodes[i];
            bool cordoned = kiln_sched_cordoned(d->sched, i);
            for (size_t j = 0; j < nd->n_devs; j++) {
                /* one line per type: only at its first device */
                bool first = true;
                for (size_t p = 0; p < j; p++)
                    first &= strcmp(nd->devs[p].type, nd->devs[j].type) != 0;
                if (!first) continue;
                long long cap = 0, used = 0, avail = 0;
                for (size_t q = j; q < nd->n_devs; q++)
                    if (strcmp(nd->devs[q].type, nd->devs[j].type) == 0) {
                        cap++;
                        used += kiln_sched_device_busy(d->sched, i, q);
                        avail += kiln_sched_device_free(d->sched, i, q);
                    }
                long long val = k == 0 ? cap : k == 1 ? used : (cordoned ? 0 : avail);
                put(o, "%s{node=\"%s\",type=\"%s\"} %lld\n", kinds[k], esc(nd->name, nb, sizeof nb),
                    esc(nd->devs[j].type, tb, sizeof tb), val);
            }
        }
    }
    pthread_mutex_unlock(&d->mu);
}

/* This machine's GPUs as NVIDIA's DCGM exporter shows them (its default
 * counters and labels, so that its stock Grafana dashboards work), plus
 * hpc_job = PROJECT/JOB on a GPU a job holds (dcgm-exporter's
 * --hpc-job-mapping-dir label) and kiln's own health gauge. Values are the
 * GPU watch's newest sample (one a second); a value NVML did not give is
 * left out. DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is typed gauge, not
 * counter as dcgm-exporter has it: Prometheus' text format wants counters
 * named *_total, and rate() works on it all the same. */
static void gpu_part(kilnd *d, out *o, const kiln_api_auth *a)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
        {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."},
        {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
        {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
        {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
        {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
        {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
         "Total energy consumption since the driver loaded (in mJ)."},
        {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."},
    };
    if (!d->gpus || !d->cluster.n) return;
    const kiln_node *n = &d->cluster.nodes[0];
    kiln_gpu_status *st = calloc(n->n_devs ? n->n_devs : 1, sizeof *st);
    char(*lb)[1024] = calloc(n->n_devs ? n->n_devs : 1, sizeof *lb);
    json_t *held = kiln__api_gpu_holders(d, a);
    if (!st || !lb) {
        o->oom = true;
        goto out;
    }
    for (size_t j = 0; j < n->n_devs; j++) {
        char hb[256], ub[128], mb[192], jb[300], key[200];
        snprintf(key, sizeof key, "%.150s/%d", n->name, n->devs[j].index);
        const char *job = json_string_value(json_object_get(json_object_get(held, key), "hpcJob"));
        /* a GPU shared through MPS: its series name every share's holder */
        char sj[300] = "";
        for (size_t q = 0; !job && q < n->n_devs; q++) {
            if (!n->devs[q].share || n->devs[q].parent != (int)j) continue;
            snprintf(key, sizeof key, "%.150s/%d", n->name, n->devs[q].index);
            const char *h =
                json_string_value(json_object_get(json_object_get(held, key), "hpcJob"));
            size_t u = strlen(sj);
            if (h) snprintf(sj + u, sizeof sj - u, "%s%s", u ? "," : "", h);
        }
        if (!job && sj[0]) job = sj;
        kiln_gpu_watch_get(d->gpus, j, &st[j]);
        /* a MIG instance as dcgm-exporter labels it: its GPU's gpu, UUID,
         * device and modelName, and GPU_I_PROFILE and GPU_I_ID of its own */
        const kiln_device *dv = &n->devs[j];
        const kiln_device *g = dv->mig_profile || dv->share ? &n->devs[dv->parent] : dv;
        char mig[160] = "", pb[96];
        if (dv->share) /* an MPS share: its GPU's labels and which share */
            snprintf(mig, sizeof mig, ",kiln_share=\"%d/%d\"", dv->share, dv->n_shares);
        else if (dv->mig_profile)
            snprintf(mig, sizeof mig, ",GPU_I_PROFILE=\"%s\",GPU_I_ID=\"%u\"",
                     esc(dv->mig_profile, pb, sizeof pb), dv->gpu_instance);
        snprintf(
            lb[j], sizeof lb[j],
            "gpu=\"%d\",UUID=\"%s\",device=\"nvidia%d\",modelName=\"%s\",Hostname=\"%s\"%s%s%s%s",
            g->index, esc(g->uuid, ub, sizeof ub), g->index,
            esc(g->model ? g->model : g->type, mb, sizeof mb), esc(n->name, hb, sizeof hb), mig,
            job ? ",hpc_job=\"" : "", job ? esc(job, jb, sizeof jb) : "", job ? "\"" : "");
    }
    for (size_t f = 0; f < sizeof fam / sizeof *fam; f++) {
        head(o, fam[f].name, "gauge", fam[f].help);
        for (size_t j = 0; j < n->n_devs; j++) {
            const kiln_gpu_status *g = &st[j];
            bool have[] = {g->have_util, g->have_util,  g->have_memory, g->have_memory,
                           g->have_temp, g->have_power, g->have_energy, g->at_ns != 0};
            double v[] = {(double)g->util_gpu,        (double)g->util_memory,
                          (double)(g->fb_used >> 20), (double)(g->fb_free >> 20),
                          (double)g->temp_c,          g->power_w,
                          (double)g->energy_mj,       (double)g->last_xid};
            if (have[f]) put(o, "%s{%s} %.9g\n", fam[f].name, lb[j], v[f]);
        }
    }
    head(o, "kiln_gpu_in_service", "gauge",
         "1 while kiln hands the GPU out; 0 after a failure (reason: the Xid or what failed) "
         "until kiln nodes uncordon NODE --gpu N, or when refused at discovery (MIG mode).");
    pthread_mutex_lock(&d->mu);
    for (size_t j = 0; j < n->n_devs; j++) {
        char rb[600];
        bool out_of = n->devs[j].refused || kiln_sched_device_failed(d->sched, 0, j);
        const char *why = n->devs[j].refused ? n->devs[j].refused : st[j].why;
        if (out_of)
            put(o, "kiln_gpu_in_service{%s,reason=\"%s\"} 0\n", lb[j], esc(why, rb, sizeof rb));
        else
            put(o, "kiln_gpu_in_service{%s} 1\n", lb[j]);
    }
    pthread_mutex_unlock(&d->mu);
out:
    json_decref(held);
    free(st);
    free(lb);
}

static void hist(out *o, const char *name, const char *labels, const uint64_t *le,
                 const double *bounds, size_t nb, uint64_t n, double sum)
{
    const char *sep = *labels ? "," : "";
    for (size_t i = 0; i < nb; i++)
        put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i],
            (unsigned long long)le[i]);
    put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)n);
    if (*labels)
        put(o, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, sum, name, labels,
            (unsigned long long)n);
    else
        put(o, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)n);
}

static void api_part(kilnd *d, out *o)
{
    struct kiln_api_metrics *m = d->metrics;
    char lb[160];
    if (!m) return;
    series *snap = malloc(sizeof m->s);
    if (!snap) {
        o->oom = true;
        return;
    }
    pthread_mutex_lock(&m->mu);
    memcpy(snap, m->s, sizeof m->s);
    pthread_mutex_unlock(&m->mu);
    head(o, "kiln_api_requests_total", "counter",
         "API requests answered, by method, route template and status code.");
    for (size_t i = 0; i < N_METHODS; i++)
        for (size_t r = 0; r < N_ROUTES; r++)
            for (size_t k = 0; k < MAX_CODES && snap[i * N_ROUTES + r].count[k]; k++)
                put(o, "kiln_api_requests_total{method=\"%s\",route=\"%s\",code=\"%u\"} %llu\n",
                    methods[i], routes[r], snap[i * N_ROUTES + r].code[k],
                    (unsigned long long)snap[i * N_ROUTES + r].count[k]);
    head(o, "kiln_api_request_duration_seconds", "histogram",
         "Time from a request's arrival to its response being queued.");
    for (size_t i = 0; i < N_METHODS; i++)
        for (size_t r = 0; r < N_ROUTES; r++) {
            const series *s = &snap[i * N_ROUTES + r];
            if (!s->n) continue;
            snprintf(lb, sizeof lb, "method=\"%s\",route=\"%s\"", methods[i], routes[r]);
            hist(o, "kiln_api_request_duration_seconds", lb, s->le, lat_bounds, N_LAT_BOUNDS, s->n,
                 s->sum);
        }
    free(snap);

    kiln_store_write_stats ws;
    kiln_store_write_stats_get(d->store, &ws);
    head(o, "kiln_store_write_duration_seconds", "histogram",
         "Time spent in the store's write statements (lock wait excluded).");
    hist(o, "kiln_store_write_duration_seconds", "", ws.le, kiln_store_write_bounds,
         KILN_STORE_WRITE_BUCKETS, ws.count, ws.sum_seconds);

    static const double pass_bounds[KILND_PASS_BUCKETS] = KILND_PASS_BOUNDS;
    uint64_t ple[KILND_PASS_BUCKETS];
    for (size_t i = 0; i < KILND_PASS_BUCKETS; i++)
        ple[i] = d->sched_pass.le[i];
    uint64_t pn = d->sched_pass.count; /* after the buckets: counted before them */
    head(o, "kiln_schedule_pass_seconds", "histogram",
         "Time of the supervisor's scheduling passes over the queue (placement included).");
    hist(o, "kiln_schedule_pass_seconds", "", ple, pass_bounds, KILND_PASS_BUCKETS, pn,
         (double)d->sched_pass.sum_ns / 1e9);
}

enum MHD_Result kiln__api_metrics(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const kiln_api_auth *a)
{
    out o = {0};
    if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET on /metrics");
    /* the exposition names every project's jobs: a project's token must not
     * read it (Prometheus scrapes with a '*' token: bearer_token_file) */
    if (a->project && strcmp(a->project, "*") != 0)
        return send_error(c, 403, NULL, "/metrics needs a token for project '*'");
    jobs_part(d, &o);
    nodes_part(d, &o);
    gpu_part(d, &o, a);
    api_part(d, &o);
    if (o.oom || !o.p) {
        free(o.p);
        return send_error(c, 500, NULL, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(o.len, o.p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(o.p);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    return kiln__api_queue(c, 200, r);
}
