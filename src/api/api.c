/* src/api/api.c - the REST API of kilnd over libmicrohttpd.
 *
 * Resources (docs/openapi.yaml has the details):
 *   POST  /v1/projects/P/jobs                 create (body: Job)
 *   GET   /v1/projects/P/jobs/J               get
 *   GET   /v1/projects/P/jobs?filter=&pageSize=&pageToken=   list
 *   POST  /v1/projects/P/jobs/J:cancel        cancel (body {})
 *   PATCH /v1/projects/P/jobs/J?updateMask=labels             labels only
 *   GET   /v1/projects/P/jobs/J:logs?offset=&taskName=        kiln: log lines
 *   GET   /v1/nodes, /v1/nodes/N; POST /v1/nodes/N:drain, N:uncordon
 *   GET   /healthz
 * Errors use Google's envelope (kiln_diag_to_envelope). Bodies are capped
 * (d->max_body), headers by libmicrohttpd's per-connection memory limit.
 *
 * Auth: with a tokens file, "Authorization: Bearer TOKEN" names a project
 * and a role; another project's jobs answer 404 as if they did not exist. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "util/utf8.h"

#define LOG_CHUNK   (256u * 1024u)
#define CACHE_SLOTS 4096

/* Rendered GET responses keyed by (project/job, seq, version): a job's
 * version changes with every write to it, so an entry is either exact or
 * skipped. QUEUED jobs are never cached (their jobPosition moves without a
 * write to them). */
typedef struct centry {
    char *key;
    int64_t seq, version;
    char *body;
    size_t len;
} centry;

struct kiln_api_cache {
    pthread_mutex_t mu;
    centry slot[CACHE_SLOTS];
};

static size_t cache_slot(const char *project, const char *id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = project; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ '/') * 1099511628211ull;
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (size_t)(h % CACHE_SLOTS);
}

typedef struct req {
    char *body;
    size_t len;
    bool too_big;
} req;

typedef struct auth {
    bool ok;
    const char *project; /* NULL = no auth configured: everything allowed */
    kilnd_role role;
} auth;

/* ---------- responses ---------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned code, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"code\":500,\"status\":\"INTERNAL\","
                                  "\"message\":\"out of memory\"}}";
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        enum MHD_Result rc = MHD_queue_response(c, 500, r);
        MHD_destroy_response(r);
        return rc;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    return send_text(c, code, s);
}

static const char *status_of(unsigned code)
{
    switch (code) {
    case 400:
        return "INVALID_ARGUMENT";
    case 401:
        return "UNAUTHENTICATED";
    case 403:
        return "PERMISSION_DENIED";
    case 404:
        return "NOT_FOUND";
    case 405:
        return "UNIMPLEMENTED";
    case 409:
        return "ALREADY_EXISTS";
    case 413:
        return "INVALID_ARGUMENT";
    default:
        return "INTERNAL";
    }
}

static enum MHD_Result send_error_st(struct MHD_Connection *c, unsigned code, const char *status,
                                     const kiln_diag *dg, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error_st(struct MHD_Connection *c, unsigned code, const char *status,
                                     const kiln_diag *dg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* messages may quote the request (a path, a name): keep them printable
     * ASCII, so that the envelope is always valid UTF-8 JSON */
    for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f) *q = '?';
    return send_text(c, code, kiln_diag_to_envelope(dg, (int)code, status, msg));
}

#define send_error(c, code, dg, ...) send_error_st(c, code, status_of(code), dg, __VA_ARGS__)

/* ---------- the Job resource as the API shows it ---------- */

static json_t *job_json(kilnd *d, const kiln_job_record *r)
{
    char *s = kiln_job_to_json(r->job, KILN_ENC_COMPACT);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    if (!o) return NULL;
    if (r->job->state == KILN_STATE_QUEUED) {
        int64_t pos = 0;
        char b[32];
        if (kiln_store_job_position(d->store, r, &pos) == KILN_OK && pos > 0) {
            snprintf(b, sizeof b, "%lld", (long long)pos);
            json_object_set_new(o, "jobPosition", json_string(b));
        }
    }
    /* kiln's own status: restarts and where the replicas are */
    json_t *ks = json_pack("{s:i,s:i}", "restarts", r->restarts, "failures", r->failures);
    if (ks && r->runtime) {
        json_t *rt = json_loads(r->runtime, 0, NULL);
        json_t *reps = json_object_get(rt, "replicas");
        if (reps) json_object_set(ks, "replicas", reps);
        json_decref(rt);
    }
    if (ks) json_object_set_new(o, "kilnStatus", ks);
    return o;
}

/* ---------- names ---------- */

static bool valid_name(const char *s, size_t len)
{
    if (len == 0 || len > 63) return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ((ch == '-' || ch == '_') && i > 0);
        if (!ok) return false;
    }
    return true;
}

/* ---------- auth ---------- */

static auth authenticate(kilnd *d, struct MHD_Connection *c)
{
    auth a = {.ok = true, .project = NULL, .role = KILND_EDITOR};
    if (d->n_tokens == 0) return a;
    a.ok = false;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return a;
    h += 7;
    for (size_t i = 0; i < d->n_tokens; i++)
        if (strcmp(d->tokens[i].token, h) == 0) {
            a.ok = true;
            a.project = d->tokens[i].project;
            a.role = d->tokens[i].role;
        }
    return a;
}

static bool sees(const auth *a, const char *project)
{
    return !a->project || strcmp(a->project, "*") == 0 || strcmp(a->project, project) == 0;
}

/* ---------- jobs ---------- */

static enum MHD_Result job_create(kilnd *d, struct MHD_Connection *c, const char *project,
                                  const req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *rec = NULL;
    enum MHD_Result rc;

    kiln_err err = kiln_job_from_json(rq->body ? rq->body : "", rq->len, &job, &dg);
    if (err != KILN_OK) {
        rc = send_error(c, 400, &dg, "The request body is not a valid Job: %s", kiln_err_str(err));
        goto out;
    }
    /* output-only fields are the service's to set */
    job->state = KILN_STATE_UNSPECIFIED;
    err = kiln_catalog_validate(d->catalog, job, &dg);
    if (err != KILN_OK) {
        rc = send_error(c, 400, &dg, "Field: %s Error: %s", dg.n ? dg.v[0].field : "",
                        dg.n ? dg.v[0].description : "invalid job");
        goto out;
    }
    if (kiln_catalog_normalise(d->catalog, job) != KILN_OK) {
        rc = send_error(c, 500, NULL, "cannot normalise the job");
        goto out;
    }
    err = kiln_store_job_create(d->store, project, job, kiln_now_ns(), &rec);
    if (err == KILN_EEXIST) {
        rc = send_error(c, 409, NULL, "Resource projects/%s/jobs/%s already exists", project,
                        job->job_id);
        goto out;
    }
    if (err != KILN_OK) {
        rc = send_error(c, 500, NULL, "cannot store the job: %s", kiln_err_str(err));
        goto out;
    }
    kilnd_event(d, project, job->job_id, "INFO", "Job QUEUED (created)");
    kilnd_wake(d);
    rc = send_json(c, 200, job_json(d, rec));
out:
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return rc;
}

/* A cached response for the job at this version, or NULL. */
static struct MHD_Response *cache_get(kilnd *d, const char *key, size_t slot, int64_t seq,
                                      int64_t version)
{
    struct kiln_api_cache *c = d->cache;
    struct MHD_Response *r = NULL;
    if (!c) return NULL;
    pthread_mutex_lock(&c->mu);
    centry *e = &c->slot[slot];
    if (e->key && e->seq == seq && e->version == version && strcmp(e->key, key) == 0)
        r = MHD_create_response_from_buffer(e->len, e->body, MHD_RESPMEM_MUST_COPY);
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void cache_put(kilnd *d, const char *key, size_t slot, int64_t seq, int64_t version,
                      const char *body)
{
    struct kiln_api_cache *c = d->cache;
    if (!c) return;
    char *k = strdup(key), *b = strdup(body);
    if (!k || !b) {
        free(k);
        free(b);
        return;
    }
    pthread_mutex_lock(&c->mu);
    centry *e = &c->slot[slot];
    free(e->key);
    free(e->body);
    *e = (centry){.key = k, .seq = seq, .version = version, .body = b, .len = strlen(b)};
    pthread_mutex_unlock(&c->mu);
}

static enum MHD_Result job_get(kilnd *d, struct MHD_Connection *c, const char *project,
                               const char *id)
{
    kiln_job_record *rec = NULL;
    int64_t seq = 0, version = 0;
    kiln_job_state state = KILN_STATE_UNSPECIFIED;
    char key[256];
    size_t slot = cache_slot(project, id);

    snprintf(key, sizeof key, "%s/%s", project, id);
    kiln_err err = kiln_store_job_version(d->store, project, id, &seq, &version, &state);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err == KILN_OK && state != KILN_STATE_QUEUED) {
        struct MHD_Response *r = cache_get(d, key, slot, seq, version);
        if (r) {
            MHD_add_response_header(r, "Content-Type", "application/json");
            enum MHD_Result rc = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r);
            return rc;
        }
    }
    err = kiln_store_job_get(d->store, project, id, &rec);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    json_t *o = job_json(d, rec);
    char *body = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (body && rec->job->state != KILN_STATE_QUEUED)
        cache_put(d, key, slot, rec->seq, rec->version, body);
    kiln_job_record_free(rec);
    return send_text(c, 200, body);
}

static enum MHD_Result job_list(kilnd *d, struct MHD_Connection *c, const char *project)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job_filter *f = NULL;
    kiln_job_record **v = NULL;
    size_t n = 0;
    int64_t after = 0, next = 0, size = 20;
    enum MHD_Result rc;
    char *end;

    const char *ps = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageSize");
    const char *pt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageToken");
    const char *ft = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "filter");
    if (ps && *ps) {
        errno = 0;
        size = strtoll(ps, &end, 10);
        if (errno || *end || size < 0)
            kiln_diag_add(&dg, "pageSize", "'%.32s' is not a page size (0 to 100)", ps);
        if (size == 0) size = 20;
        if (size > 100) size = 100; /* the documented maximum */
    }
    if (pt && *pt) {
        errno = 0;
        after = (pt[0] == 's') ? strtoll(pt + 1, &end, 10) : -1;
        if (pt[0] != 's' || errno || *end || after <= 0)
            kiln_diag_add(&dg, "pageToken", "not a page token this server returned");
    }
    if (ft && *ft) kiln_job_filter_parse(ft, &f, &dg);
    if (dg.n) {
        rc = send_error(c, 400, &dg, "Invalid list request: %s", dg.v[0].description);
        goto out;
    }
    kiln_err err = kiln_store_job_list(d->store, project, f, after, (size_t)size, &v, &n, &next);
    if (err != KILN_OK) {
        rc = send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
        goto out;
    }
    json_t *o = json_object(), *jobs = json_array();
    for (size_t i = 0; o && jobs && i < n; i++) {
        json_t *jj = job_json(d, v[i]);
        if (jj) json_array_append_new(jobs, jj);
    }
    if (o && jobs && json_array_size(jobs)) json_object_set(o, "jobs", jobs);
    json_decref(jobs);
    if (o && next) {
        char tok[32];
        snprintf(tok, sizeof tok, "s%lld", (long long)next);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    rc = send_json(c, 200, o);
out:
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    kiln_diag_free(&dg);
    return rc;
}

static enum MHD_Result job_cancel(kilnd *d, struct MHD_Connection *c, const char *project,
                                  const char *id)
{
    int64_t now = kiln_now_ns();
    kiln_job_state was = KILN_STATE_UNSPECIFIED;
    kiln_err err = kiln_store_job_transition(d->store, project, id, KILN_STATE_MASK(QUEUED),
                                             KILN_STATE_CANCELLED, NULL, now, &was);
    if (err == KILN_OK) {
        kilnd_event(d, project, id, "INFO", "Job CANCELLED while queued");
    } else if (err == KILN_ECONFLICT) {
        err = kiln_store_job_transition(d->store, project, id,
                                        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) |
                                            KILN_STATE_MASK(CANCELLING),
                                        KILN_STATE_CANCELLING, NULL, now, &was);
        if (err == KILN_OK) kilnd_event(d, project, id, "INFO", "Job CANCELLING (requested)");
    }
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err == KILN_ECONFLICT)
        return send_error_st(c, 400, "FAILED_PRECONDITION", NULL,
                             "Job projects/%s/jobs/%s is already %s and cannot be cancelled",
                             project, id, kiln_job_state_name(was));
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    kilnd_wake(d);
    return send_json(c, 200, json_object());
}

static enum MHD_Result job_patch(kilnd *d, struct MHD_Connection *c, const char *project,
                                 const char *id, const req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *cur = NULL, *rec = NULL;
    enum MHD_Result rc;

    const char *mask = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "updateMask");
    if (!mask || strcmp(mask, "labels") != 0) {
        kiln_diag_add(&dg, "updateMask", "only 'labels' can be updated (got '%.64s')",
                      mask ? mask : "");
        rc = send_error(c, 400, &dg, "Only labels can be changed on a job");
        goto out;
    }
    kiln_err err = kiln_job_from_json(rq->body ? rq->body : "", rq->len, &job, &dg);
    if (err != KILN_OK) {
        rc = send_error(c, 400, &dg, "The request body is not a valid Job");
        goto out;
    }
    err = kiln_store_job_get(d->store, project, id, &cur);
    if (err == KILN_ENOTFOUND) {
        rc = send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
        goto out;
    }
    if (err == KILN_OK && job->etag && *job->etag && strcmp(job->etag, cur->job->etag) != 0) {
        rc = send_error_st(c, 409, "ABORTED", NULL,
                           "etag mismatch: the job changed since it was read");
        goto out;
    }
    /* the labels are checked by the same rules as on create */
    kiln_map_clear(&cur->job->labels);
    for (size_t i = 0; i < job->labels.n; i++)
        kiln_map_set(&cur->job->labels, job->labels.keys[i], job->labels.vals[i]);
    if (kiln_catalog_validate(d->catalog, cur->job, &dg) != KILN_OK) {
        rc = send_error(c, 400, &dg, "Invalid labels");
        goto out;
    }
    err = kiln_store_job_set_labels(d->store, project, id, &job->labels, &rec);
    if (err != KILN_OK) {
        rc = send_error(c, err == KILN_ENOTFOUND ? 404 : 500, NULL, "cannot update labels: %s",
                        kiln_err_str(err));
        goto out;
    }
    rc = send_json(c, 200, job_json(d, rec));
out:
    kiln_job_record_free(cur);
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return rc;
}

/* Log lines from byte `offset` of the job's log: whole lines only. */
static enum MHD_Result job_logs(kilnd *d, struct MHD_Connection *c, const char *project,
                                const char *id)
{
    kiln_job_record *rec = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 16], *buf = NULL, *end;
    enum MHD_Result rc;
    int fd = -1;

    kiln_err err = kiln_store_job_get(d->store, project, id, &rec);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    const char *os = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset");
    const char *task = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "taskName");
    long long off = 0;
    if (os && *os) {
        errno = 0;
        off = strtoll(os, &end, 10);
        if (errno || *end || off < 0) {
            rc = send_error(c, 400, NULL, "offset must be a byte offset from nextOffset");
            goto out;
        }
    }
    kilnd_job_dir(d, project, id, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    json_t *o = json_object(), *entries = json_array();
    long long next = off;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    buf = malloc(LOG_CHUNK + 1);
    if (fd >= 0 && buf) {
        ssize_t n = pread(fd, buf, LOG_CHUNK, (off_t)off);
        size_t used = 0;
        for (ssize_t i = 0; n > 0 && i < n; i++) {
            if (buf[i] != '\n') continue;
            buf[i] = '\0';
            char *line = buf + used, *f[4] = {0}, *save = NULL;
            used = (size_t)i + 1;
            f[0] = strtok_r(line, "\t", &save);
            f[1] = f[0] ? strtok_r(NULL, "\t", &save) : NULL;
            f[2] = f[1] ? strtok_r(NULL, "\t", &save) : NULL;
            f[3] = f[2] ? strtok_r(NULL, "", &save) : NULL;
            if (!f[2]) continue;
            if (task && *task && strcmp(task, f[2]) != 0) continue;
            /* programs print what they like, JSON strings must be UTF-8 */
            kiln__utf8_scrub(f[2]);
            if (f[3]) kiln__utf8_scrub(f[3]);
            json_t *e = json_pack("{s:s,s:s,s:s,s:s}", "severity", f[0], "timestamp", f[1],
                                  "taskName", f[2], "message", f[3] ? f[3] : "");
            if (e) json_array_append_new(entries, e);
        }
        next = off + (long long)used;
    }
    char nb[32];
    snprintf(nb, sizeof nb, "%lld", next);
    json_object_set_new(o, "entries", entries);
    json_object_set_new(o, "nextOffset", json_string(nb));
    json_object_set_new(o, "jobState", json_string(kiln_job_state_name(rec->job->state)));
    rc = send_json(c, 200, o);
out:
    if (fd >= 0) close(fd);
    free(buf);
    kiln_job_record_free(rec);
    return rc;
}

/* ---------- nodes ---------- */

static json_t *node_json(kilnd *d, size_t i)
{
    const kiln_node *n = &d->cluster.nodes[i];
    json_t *cap = json_object(), *alloc = json_object(), *devs = json_array();
    bool any_sim = false;
    int used_cpus;
    double used_mem;
    /* CPUs and memory as Kubernetes shows them; allocatable counts what placed
     * replicas' machine types asked for (soft limits may overcommit it to 0) */
    kiln_sched_usage(d->sched, i, &used_cpus, &used_mem);
    json_object_set_new(cap, "cpu", json_integer(n->cpus));
    json_object_set_new(cap, "memoryGb", json_real(n->memory_gb));
    json_object_set_new(alloc, "cpu", json_integer(used_cpus < n->cpus ? n->cpus - used_cpus : 0));
    json_object_set_new(alloc, "memoryGb",
                        json_real(used_mem < n->memory_gb ? n->memory_gb - used_mem : 0.0));
    for (size_t j = 0; j < n->n_devs; j++) {
        const kiln_device *dv = &n->devs[j];
        bool busy = kiln_sched_device_busy(d->sched, i, j);
        json_int_t c = json_integer_value(json_object_get(cap, dv->type));
        json_object_set_new(cap, dv->type, json_integer(c + 1));
        json_int_t a = json_integer_value(json_object_get(alloc, dv->type));
        json_object_set_new(alloc, dv->type, json_integer(a + !busy));
        json_array_append_new(devs, json_pack("{s:i,s:s,s:s,s:b,s:b}", "index", dv->index, "type",
                                              dv->type, "uuid", dv->uuid, "simulated",
                                              dv->simulated, "assigned", busy));
        any_sim |= dv->simulated;
    }
    json_t *labels = json_object();
    for (size_t k = 0; labels && k < n->labels.n; k++)
        json_object_set_new(labels, n->labels.keys[k], json_string(n->labels.vals[k]));
    return json_pack("{s:s,s:s,s:i,s:f,s:b,s:b,s:b,s:o,s:o,s:o,s:o}", "name", n->name, "address",
                     n->address, "cpus", n->cpus, "memoryGb", n->memory_gb, "hardResources",
                     n->hard_resources, "cordoned", kiln_sched_cordoned(d->sched, i),
                     "simulatedAccelerators", any_sim, "labels", labels ? labels : json_object(),
                     "capacity", cap, "allocatable", alloc, "devices", devs);
}

static enum MHD_Result nodes(kilnd *d, struct MHD_Connection *c, const char *method,
                             const char *rest, const auth *a)
{
    if (!*rest) {
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
        json_t *arr = json_array();
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < d->cluster.n; i++)
            json_array_append_new(arr, node_json(d, i));
        pthread_mutex_unlock(&d->mu);
        return send_json(c, 200, json_pack("{s:o}", "nodes", arr));
    }
    char name[128];
    const char *colon = strchr(rest, ':');
    size_t nl = colon ? (size_t)(colon - rest) : strlen(rest);
    if (nl >= sizeof name) nl = sizeof name - 1;
    memcpy(name, rest, nl);
    name[nl] = '\0';
    long idx = kiln_cluster_find(&d->cluster, name);
    if (idx < 0) return send_error(c, 404, NULL, "Node %s not found", name);
    if (!colon) {
        pthread_mutex_lock(&d->mu);
        json_t *o = node_json(d, (size_t)idx);
        pthread_mutex_unlock(&d->mu);
        return send_json(c, 200, o);
    }
    bool drain = strcmp(colon, ":drain") == 0, uncordon = strcmp(colon, ":uncordon") == 0;
    if ((!drain && !uncordon) || strcmp(method, "POST") != 0)
        return send_error(c, 404, NULL, "unknown node method '%s'", colon);
    if (a->project && (strcmp(a->project, "*") != 0 || a->role != KILND_EDITOR))
        return send_error(c, 403, NULL, "draining nodes needs an editor token for project '*'");
    if (kiln_store_node_set_cordon(d->store, name, drain) != KILN_OK)
        return send_error(c, 500, NULL, "cannot record the cordon");
    pthread_mutex_lock(&d->mu);
    kiln_sched_set_cordon(d->sched, (size_t)idx, drain);
    if (drain) d->drain_pending[idx] = true;
    json_t *o = node_json(d, (size_t)idx);
    pthread_mutex_unlock(&d->mu);
    kilnd_wake(d);
    return send_json(c, 200, o);
}

/* ---------- routing ---------- */

static enum MHD_Result route(kilnd *d, struct MHD_Connection *c, const char *url,
                             const char *method, const req *rq)
{
    if (strcmp(url, "/healthz") == 0) return send_text(c, 200, strdup("{\"status\":\"ok\"}"));
    auth a = authenticate(d, c);
    if (!a.ok)
        return send_error(c, 401, NULL,
                          "Request had invalid authentication credentials: "
                          "expected 'Authorization: Bearer TOKEN'");
    if (strncmp(url, "/v1/nodes", 9) == 0 && (url[9] == '\0' || url[9] == '/'))
        return nodes(d, c, method, url[9] ? url + 10 : "", &a);
    if (strncmp(url, "/v1/projects/", 13) != 0)
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    const char *p = url + 13, *slash = strchr(p, '/');
    if (!slash || strncmp(slash, "/jobs", 5) != 0 || (slash[5] && slash[5] != '/'))
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    size_t pl = (size_t)(slash - p);
    if (!valid_name(p, pl))
        return send_error(c, 400, NULL, "'%.*s' is not a project id", (int)(pl > 64 ? 64 : pl), p);
    char project[64], id[160];
    memcpy(project, p, pl);
    project[pl] = '\0';
    if (!sees(&a, project)) /* 404, not 403: a token learns nothing of other projects */
        return send_error(c, 404, NULL, "Project %s not found", project);
    bool write = strcmp(method, "GET") != 0;
    if (write && a.role != KILND_EDITOR)
        return send_error(c, 403, NULL, "Permission denied: a viewer token cannot change jobs");
    const char *j = slash + 5;
    if (!*j || strcmp(j, "/") == 0) {
        if (strcmp(method, "POST") == 0) return job_create(d, c, project, rq);
        if (strcmp(method, "GET") == 0) return job_list(d, c, project);
        return send_error(c, 405, NULL, "use GET or POST on a job collection");
    }
    j++;
    const char *colon = strchr(j, ':');
    size_t il = colon ? (size_t)(colon - j) : strlen(j);
    if (il >= sizeof id || !valid_name(j, il))
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%.*s not found", project,
                          (int)(il > 128 ? 128 : il), j);
    memcpy(id, j, il);
    id[il] = '\0';
    if (!colon) {
        if (strcmp(method, "GET") == 0) return job_get(d, c, project, id);
        if (strcmp(method, "PATCH") == 0) return job_patch(d, c, project, id, rq);
        return send_error(c, 405, NULL, "use GET or PATCH on a job");
    }
    if (strcmp(colon, ":cancel") == 0 && strcmp(method, "POST") == 0)
        return job_cancel(d, c, project, id);
    if (strcmp(colon, ":logs") == 0 && strcmp(method, "GET") == 0)
        return job_logs(d, c, project, id);
    return send_error(c, 404, NULL, "unknown job method '%.40s' for %s", colon, method);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    kilnd *d = cls;
    req *rq = *con_cls;
    (void)version;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > d->max_body) {
            /* refused before reading it: MHD drops the rest and closes */
            rq->too_big = true;
            return send_error(c, 413, NULL, "The request body is larger than %zu bytes",
                              d->max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && rq->len + *upload_size > d->max_body) {
            rq->too_big = true;
            free(rq->body);
            rq->body = NULL;
            rq->len = 0;
        }
        if (!rq->too_big) {
            char *nb = realloc(rq->body, rq->len + *upload_size + 1);
            if (!nb) return MHD_NO;
            memcpy(nb + rq->len, upload, *upload_size);
            rq->body = nb;
            rq->len += *upload_size;
            rq->body[rq->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return send_error(c, 413, NULL, "The request body is larger than %zu bytes", d->max_body);
    return route(d, c, url, method, rq);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    req *rq = *con_cls;
    (void)cls, (void)c, (void)toe;
    if (!rq) return;
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

struct MHD_Daemon *kiln_api_start(kilnd *d, int listen_fd)
{
    d->cache = calloc(1, sizeof *d->cache);
    if (d->cache) pthread_mutex_init(&d->cache->mu, NULL);
    return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, handler,
                            d, MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
                            (unsigned)(d->threads > 0 ? d->threads : 2),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
}

void kiln_api_stop(kilnd *d, struct MHD_Daemon *m)
{
    if (m) MHD_stop_daemon(m);
    if (d->cache) {
        for (size_t i = 0; i < CACHE_SLOTS; i++) {
            free(d->cache->slot[i].key);
            free(d->cache->slot[i].body);
        }
        pthread_mutex_destroy(&d->cache->mu);
        free(d->cache);
        d->cache = NULL;
    }
}
