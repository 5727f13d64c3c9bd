/* src/api/api.c - kilnd's HTTP server (libmicrohttpd): bodies, auth, routing.
 * The surfaces live beside it (api_int.h lists them).
 *
 * Resources (docs/openapi.yaml has the details):
 *   POST  /v1/projects/P/jobs                 create (body: Job)
 *   GET   /v1/projects/P/jobs/J               get
 *   GET   /v1/projects/P/jobs?filter=&pageSize=&pageToken=   list
 *   POST  /v1/projects/P/jobs/J:cancel        cancel (body {})
 *   PATCH /v1/projects/P/jobs/J?updateMask=labels             labels only
 *   GET   /v1/projects/P/jobs/J:logs?offset=&taskName=        kiln: log lines
 *   GET   /v1/nodes, /v1/nodes/N; POST /v1/nodes/N:drain, N:uncordon
 *   GET   /v1/queues, /v1/queues/CQ                     kilnd --queues (docs/queues.md)
 *   POST  /v2/entries:list                    Logging: the jobs' log lines
 *   GET   /healthz, /version (no token needed; every answer also carries
 *         a Kiln-Version header: src/util/version.h)
 *   /storage/v1/b/B/o..., /upload/storage/v1/..., /download/storage/v1/...
 *         the Cloud Storage subset (storage.c, docs/service.md "Storage")
 *   GET   /metrics (Prometheus), / and /ui/... (the dashboard)
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
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include "api/api_int.h"
#include "kiln/auth.h"
#include "kiln/objects.h"
#include "util/utf8.h"
#include "util/version.h"

/* ---------- responses ---------- */

/* The status of the response this thread queued last: libmicrohttpd runs a
 * request's handler on one thread of its pool and does not tell the
 * completion callback the code, so the handler reads it here after route(). */
static _Thread_local unsigned last_code;
static _Thread_local bool hidden;

void kiln__api_note_hidden(void)
{
    hidden = true;
}

/* The job a create made (its id is the body's, or kilnd's), for the
 * audit line's objectRef: set by the handler, read and cleared by audit(). */
static _Thread_local char created_job[256];

void kiln__api_note_created(const char *job_id)
{
    snprintf(created_job, sizeof created_job, "%s", job_id ? job_id : "");
}

bool kiln__api_hidden(bool reset)
{
    bool h = hidden;
    if (reset) hidden = false;
    return h;
}

unsigned kiln__api_last_code(bool reset)
{
    unsigned c = last_code;
    if (reset) last_code = 0;
    return c;
}

int64_t kiln__api_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum MHD_Result kiln__api_queue(struct MHD_Connection *c, unsigned code, struct MHD_Response *r)
{
    last_code = code;
    /* every answer names the build, so a client or a proxy's log can tell
     * which kilnd served it (the same words as `kilnd --version`) */
    MHD_add_response_header(r, "Kiln-Version", kiln__version_string());
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result kiln__api_send_text(struct MHD_Connection *c, unsigned code, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"code\":500,\"status\":\"INTERNAL\","
                                  "\"message\":\"out of memory\"}}";
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        return kiln__api_queue(c, 500, r);
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    return kiln__api_queue(c, code, r);
}

enum MHD_Result kiln__api_send_json(struct MHD_Connection *c, unsigned code, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    return send_text(c, code, s);
}

const char *kiln__api_status_of(unsigned code)
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
    case 429:
        return "RESOURCE_EXHAUSTED";
    case 503:
        return "UNAVAILABLE";
    default:
        return "INTERNAL";
    }
}

enum MHD_Result kiln__api_send_error_st(struct MHD_Connection *c, unsigned code, const char *status,
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

/* ---------- names ---------- */

bool kiln__api_valid_name(const char *s, size_t len)
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

/* ---------- disk ---------- */

bool kiln__api_disk_low(kilnd *d, char *why, size_t len)
{
    struct statvfs vs;
    if (statvfs(d->data_dir, &vs) != 0) return false; /* unknown: let the write say */
    unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
    if (avail >= d->min_free) return false;
    snprintf(why, len,
             "The data dir's file system is full (%llu bytes free, under --min-free-bytes "
             "%llu): kilnd takes no new job until space returns",
             avail, (unsigned long long)d->min_free);
    return true;
}

/* ---------- auth ---------- */

/* Decides who is calling into rq->auth (rq->project holds its project, a
 * copy: a SIGHUP may replace the tokens while the request runs). */
static void authenticate(kilnd *d, struct MHD_Connection *c, kiln_api_req *rq)
{
    kiln_api_auth *a = &rq->auth;
    kiln_token_match m;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *bearer = h && strncmp(h, "Bearer ", 7) == 0 ? h + 7 : NULL;

    *a = (kiln_api_auth){.ok = true, .project = NULL, .role = KILN_AUTH_EDITOR};
    if (bearer) {
        kiln_tokens_id(bearer, m.id);
        snprintf(rq->token_id, sizeof rq->token_id, "%s", m.id);
    }
    switch (kiln_auth_check(d->auth, bearer, &m)) {
    case KILN_AUTH_OPEN:
        break;
    case KILN_AUTH_MATCH:
        snprintf(rq->project, sizeof rq->project, "%s", m.project);
        a->project = rq->project;
        a->role = m.role;
        break;
    case KILN_AUTH_DENIED:
        a->ok = false;
        break;
    }
}

bool kiln__api_sees(const kiln_api_auth *a, const char *project)
{
    return !a->project || strcmp(a->project, "*") == 0 || strcmp(a->project, project) == 0;
}

/* ---------- routing ---------- */

static enum MHD_Result route(kilnd *d, struct MHD_Connection *c, const char *url,
                             const char *method, const kiln_api_req *rq)
{
    if (strcmp(url, "/healthz") == 0) return send_text(c, 200, strdup("{\"status\":\"ok\"}"));
    /* without a token, as /healthz: a client checks what it talks to first */
    if (strcmp(url, "/version") == 0)
        return send_json(c, 200,
                         json_pack("{s:s, s:s}", "release", kiln__version_release(), "commit",
                                   kiln__version_commit()));
    if (kiln__api_is_web(url)) return kiln__api_web(c, method, url);
    /* the proxy may hang an end hook on its request (rq is the handler's own) */
    if (kiln__api_nbproxy_owns(url))
        return kiln__api_nbproxy(d, c, method, url, (kiln_api_req *)rq);
    kiln_api_auth a = rq->auth;
    if (!a.ok)
        return send_error(c, 401, NULL,
                          "Request had invalid authentication credentials: "
                          "expected 'Authorization: Bearer TOKEN'");
    if (kiln__api_storage_owns(url)) return kiln__api_storage(d, c, method, url, rq, &a);
    if (strcmp(url, "/metrics") == 0) return kiln__api_metrics(d, c, method, &a);
    if (strncmp(url, "/v1/queues", 10) == 0 && (url[10] == '\0' || url[10] == '/'))
        return kiln__api_queues(d, c, method, url[10] ? url + 11 : "", &a);
    if (strcmp(url, "/v1/notebooks:signin") == 0) return kiln__api_notebooks_signin(d, c, method);
    if (strncmp(url, "/v1/nodes", 9) == 0 && (url[9] == '\0' || url[9] == '/'))
        return kiln__api_nodes(d, c, method, url[9] ? url + 10 : "", &a);
    if (strncmp(url, "/v2/", 4) == 0) return kiln__api_logging(d, c, method, url + 4, rq, &a);
    /* aiplatform v1beta1 (gcloud beta ai, the SDK's preview classes): the
     * same resources and handlers as v1, under projects/P/locations/L only */
    bool beta = strncmp(url, "/v1beta1/projects/", 18) == 0;
    if (!beta && strncmp(url, "/v1/projects/", 13) != 0)
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    const char *p = url + (beta ? 18 : 13), *slash = strchr(p, '/');
    /* the ml API's jobs, or locations/L/...: the Notebooks API's instances
     * and their operations (ids "operation-..."), else aiplatform v1's
     * customJobs, hyperparameterTuningJobs and their operations (numeric
     * ids) */
    bool loc = slash && strncmp(slash, "/locations/", 11) == 0;
    if (!slash || (beta && !loc) ||
        (!loc && (strncmp(slash, "/jobs", 5) != 0 || (slash[5] && slash[5] != '/'))))
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    size_t pl = (size_t)(slash - p);
    if (!kiln__api_valid_name(p, pl))
        return send_error(c, 400, NULL, "'%.*s' is not a project id", (int)(pl > 64 ? 64 : pl), p);
    char project[64];
    memcpy(project, p, pl);
    project[pl] = '\0';
    if (!kiln__api_sees(&a, project)) { /* 404, not 403: a token learns nothing of other projects */
        kiln__api_note_hidden();
        return send_error(c, 404, NULL, "Project %s not found", project);
    }
    if (loc) {
        const char *coll = strchr(slash + 11, '/');
        coll = coll ? coll + 1 : "";
        bool nb =
            strncmp(coll, "instances", 9) == 0 || strncmp(coll, "operations/operation-", 21) == 0;
        if (nb && beta) return send_error(c, 404, NULL, "no such resource: %.200s", url);
        if (nb) return kiln__api_notebooks(d, c, method, project, slash + 11, rq, &a);
        return kiln__api_vertex(d, c, method, project, slash + 11, rq, &a);
    }
    return kiln__api_jobs(d, c, method, project, slash + 5, rq, &a);
}

/* ---------- requests in flight ---------- */

/* Per-token counters live in KILN_API_SLOTS buckets keyed by the token id:
 * two tokens whose ids share a bucket share its limit (rare with a few
 * hundred tokens; it only ever makes the limit stricter). */
#define KILN_API_SLOTS 4096

struct kiln_api_limits {
    atomic_int total;
    atomic_int per[KILN_API_SLOTS];
};

static int slot_of(const char *token_id)
{
    return (int)(strtoul((char[]){token_id[0], token_id[1], token_id[2], 0}, NULL, 16) %
                 KILN_API_SLOTS);
}

/* Takes a place for the request; false when it is over a limit (what it
 * took is noted in rq and given back in completed()). */
static bool admit(kilnd *d, kiln_api_req *rq)
{
    struct kiln_api_limits *l = d->limits;
    rq->counted = true;
    if (atomic_fetch_add(&l->total, 1) >= d->max_inflight) return false;
    if (!rq->auth.ok || !rq->auth.project || !rq->token_id[0]) return true;
    rq->slot = slot_of(rq->token_id);
    return atomic_fetch_add(&l->per[rq->slot], 1) < d->max_inflight_token;
}

static void release(kilnd *d, kiln_api_req *rq)
{
    if (rq->counted) atomic_fetch_sub(&d->limits->total, 1);
    if (rq->slot >= 0) atomic_fetch_sub(&d->limits->per[rq->slot], 1);
    rq->counted = false;
    rq->slot = -1;
}

void kiln__api_release(kilnd *d, kiln_api_req *rq)
{
    release(d, rq);
}

static enum MHD_Result send_429(struct MHD_Connection *c)
{
    char *body = kiln_diag_to_envelope(NULL, 429, "RESOURCE_EXHAUSTED",
                                       "Too many requests in flight; retry after 1 second");
    struct MHD_Response *r =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Retry-After", "1");
    return kiln__api_queue(c, 429, r);
}

/* ---------- the audit log ---------- */

/* Appends the request to the audit log when it changed state (any method
 * but GET/HEAD/OPTIONS) or was denied. A line that cannot be written is
 * said on stderr, never dropped in silence. */
static void audit(kilnd *d, struct MHD_Connection *c, const char *method, const char *url,
                  const kiln_api_req *rq, unsigned code)
{
    bool denied = kiln__api_hidden(true) || code == 401 || code == 403;
    bool mutating =
        strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && strcmp(method, "OPTIONS") != 0;
    char ip[INET6_ADDRSTRLEN] = "";
    if (!d->audit || (!denied && !mutating)) return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof ip);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof ip);
    /* objectRef: the project and job the path names; a create's new job */
    char oproj[128] = "", ojob[256] = "";
    if (strncmp(url, "/v1/projects/", 13) == 0) {
        const char *p = url + 13, *sl = strchr(p, '/');
        size_t pl = sl ? (size_t)(sl - p) : strlen(p);
        if (pl < sizeof oproj) {
            memcpy(oproj, p, pl);
            oproj[pl] = '\0';
        }
        if (sl && strncmp(sl, "/jobs/", 6) == 0) {
            const char *j = sl + 6;
            size_t jl = strcspn(j, ":/");
            if (jl < sizeof ojob) {
                memcpy(ojob, j, jl);
                ojob[jl] = '\0';
            }
        }
    }
    if (!ojob[0] && created_job[0]) snprintf(ojob, sizeof ojob, "%s", created_job);
    created_job[0] = '\0';
    kiln_audit_event e = {.token_id = rq->token_id[0] ? rq->token_id : NULL,
                          .project = rq->auth.ok ? rq->auth.project : NULL,
                          .verb = method,
                          .resource = url,
                          .code = code,
                          .source = ip[0] ? ip : NULL,
                          .denied = denied,
                          .object_project = oproj[0] ? oproj : NULL,
                          .object_job = ojob[0] ? ojob : NULL};
    if (kiln_audit_write(d->audit, &e) < 0)
        fprintf(stderr, "kilnd: cannot append to the audit log: %s\n", strerror(errno));
}

/* ---------- the handler ---------- */

/* The first call, headers in: who is calling, whether there is room, and
 * whether the body is refused before it is read. */
static enum MHD_Result begin(kilnd *d, struct MHD_Connection *c, const char *url,
                             const char *method, kiln_api_req *rq)
{
    authenticate(d, c, rq);
    if (!admit(d, rq)) {
        rq->limited = true; /* never queued: answered now, the body dropped */
        enum MHD_Result rc = send_429(c);
        kiln__api_metrics_observe(d, method, url, 429, rq->t0_ns);
        return rc;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    /* storage uploads stream to a temp file under their own cap; every
     * other body keeps max_body */
    bool spool = kiln__api_storage_spools(url, method);
    uint64_t cap = spool                         ? kiln__api_storage_cap(d)
                   : kiln__api_nbproxy_owns(url) ? kiln__api_nbproxy_cap()
                                                 : d->max_body;
    if (cl && strtoull(cl, NULL, 10) > cap) {
        /* refused before reading it: MHD drops the rest and closes */
        rq->too_big = true;
        return send_error(c, 413, NULL, "The request body is larger than %llu bytes (%s)",
                          (unsigned long long)cap,
                          spool                         ? "kilnd --max-object"
                          : kiln__api_nbproxy_owns(url) ? "the notebook proxy's cap"
                                                        : "kilnd --max-body");
    }
    /* no disk for a caller without a valid token */
    if (spool && !rq->auth.ok) {
        rq->too_big = true; /* the body is not read */
        return send_error(c, 401, NULL,
                          "Request had invalid authentication credentials: "
                          "expected 'Authorization: Bearer TOKEN'");
    }
    if (spool && (rq->spool_fd = kiln__api_storage_spool_open(d)) < 0)
        return send_error(c, 500, NULL, "cannot open a temp file for the upload under %s/.tmp: %s",
                          kiln_objects_root(d->objects), strerror(errno));
    return MHD_YES;
}

static kiln_api_req *new_req(const char *uri)
{
    kiln_api_req *rq = calloc(1, sizeof *rq);
    if (!rq) return NULL;
    rq->spool_fd = -1;
    rq->slot = -1;
    rq->t0_ns = kiln__api_mono_ns();
    if (uri && !(rq->uri = strdup(uri))) {
        free(rq);
        return NULL;
    }
    return rq;
}

/* Before the headers: the request target as sent, which the notebook proxy
 * forwards unchanged (libmicrohttpd hands the handler a decoded path). */
static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls, (void)c;
    return new_req(uri);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    kilnd *d = cls;
    kiln_api_req *rq = *con_cls;
    (void)version;
    if (!rq || !rq->begun) {
        if (!rq && !(rq = new_req(NULL))) return MHD_NO;
        rq->begun = true;
        *con_cls = rq;
        kiln__api_last_code(true);
        enum MHD_Result rc = begin(d, c, url, method, rq);
        unsigned code = kiln__api_last_code(true);
        /* answered before the body (429, 413, 401 for an upload): audited
         * here, since the handler is not called again */
        if (code) audit(d, c, method, url, rq, code);
        return rc;
    }
    if (rq->limited) { /* answered already */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size && rq->spool_fd >= 0) {
        if (!rq->too_big && rq->spool_len + *upload_size > kiln__api_storage_cap(d))
            rq->too_big = true;
        for (size_t done = 0; !rq->too_big && !rq->spool_err && done < *upload_size;) {
            ssize_t k = write(rq->spool_fd, upload + done, *upload_size - done);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) rq->spool_err = k < 0 ? errno : EIO;
            if (k > 0) done += (size_t)k;
        }
        if (!rq->too_big && !rq->spool_err) rq->spool_len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t cap = kiln__api_nbproxy_owns(url) ? (size_t)kiln__api_nbproxy_cap() : d->max_body;
        if (!rq->too_big && rq->len + *upload_size > cap) {
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
    enum MHD_Result rc;
    kiln__api_last_code(true);
    kiln__api_hidden(true);
    kiln__api_note_created(NULL);
    if (rq->too_big && rq->spool_fd >= 0)
        rc = send_error(c, 413, NULL, "The upload is larger than %llu bytes (kilnd --max-object)",
                        (unsigned long long)kiln__api_storage_cap(d));
    else if (rq->too_big && kiln__api_nbproxy_owns(url))
        rc = send_error(c, 413, NULL,
                        "The request body is larger than %llu bytes (the notebook "
                        "proxy's cap)",
                        (unsigned long long)kiln__api_nbproxy_cap());
    else if (rq->too_big)
        rc =
            send_error(c, 413, NULL, "The request body is larger than %zu bytes (kilnd --max-body)",
                       d->max_body);
    else if (rq->spool_err)
        /* a full disk is the service's state, not a fault: 503, as creates */
        rc = send_error(c, rq->spool_err == ENOSPC ? 503 : 500, NULL,
                        "cannot write the upload to a temp file under %s/.tmp: %s",
                        kiln_objects_root(d->objects), strerror(rq->spool_err));
    else
        rc = route(d, c, url, method, rq);
    unsigned code = kiln__api_last_code(true);
    kiln__api_metrics_observe(d, method, url, code, rq->t0_ns);
    audit(d, c, method, url, rq, code);
    return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    kiln_api_req *rq = *con_cls;
    (void)c, (void)toe;
    if (!rq) return;
    if (rq->on_done) rq->on_done(rq->on_done_arg);
    release(cls, rq);
    if (rq->spool_fd >= 0) close(rq->spool_fd);
    free(rq->body);
    free(rq->uri);
    free(rq);
    *con_cls = NULL;
}

/* ---------- TLS ---------- */

/* The certificate chain and key GnuTLS hands out, one generation per
 * (re)load. A handshake in progress may still use an older one, and GnuTLS
 * does not say when it is done with it, so every generation lives until
 * kilnd stops (a SIGHUP costs a few KiB). */
typedef struct tls_gen {
    gnutls_pcert_st pcert[8];
    unsigned n;
    gnutls_privkey_t key;
    struct tls_gen *older;
} tls_gen;

struct kiln_api_tls {
    pthread_mutex_t mu;
    tls_gen *cur;
};

static int read_file(const char *path, gnutls_datum_t *out)
{
    FILE *f = fopen(path, "rb");
    long n = -1;
    out->data = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || n > (1 << 20) || fseek(f, 0, SEEK_SET) != 0) goto fail;
    out->data = gnutls_malloc((size_t)n + 1);
    if (!out->data || fread(out->data, 1, (size_t)n, f) != (size_t)n) goto fail;
    out->size = (unsigned)n;
    fclose(f);
    return 0;
fail:
    if (f) fclose(f);
    gnutls_free(out->data);
    out->data = NULL;
    return -1;
}

static void gen_free(tls_gen *g)
{
    while (g) {
        tls_gen *o = g->older;
        for (unsigned i = 0; i < g->n; i++)
            gnutls_pcert_deinit(&g->pcert[i]);
        if (g->key) gnutls_privkey_deinit(g->key);
        free(g);
        g = o;
    }
}

/* Reads the PEM pair into a new generation, or NULL after printing why. */
static tls_gen *gen_load(const char *cert, const char *key)
{
    gnutls_datum_t c = {0}, k = {0};
    tls_gen *g = calloc(1, sizeof *g);
    int e = 0;
    const char *what = "out of memory";
    if (!g) goto fail;
    what = "cannot read --tls-cert or --tls-key";
    if (read_file(cert, &c) < 0 || read_file(key, &k) < 0) goto fail;
    g->n = 8;
    what = "--tls-cert";
    if ((e = gnutls_pcert_list_import_x509_raw(g->pcert, &g->n, &c, GNUTLS_X509_FMT_PEM, 0)) < 0) {
        g->n = 0;
        goto fail;
    }
    what = "--tls-key";
    if ((e = gnutls_privkey_init(&g->key)) < 0 ||
        (e = gnutls_privkey_import_x509_raw(g->key, &k, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0)
        goto fail;
    gnutls_free(c.data);
    gnutls_free(k.data);
    return g;
fail:
    fprintf(stderr, "kilnd: TLS: %s%s%s\n", what, e ? ": " : "", e ? gnutls_strerror(e) : "");
    gnutls_free(c.data);
    gnutls_free(k.data);
    gen_free(g);
    return NULL;
}

static kilnd *tls_daemon; /* the one kilnd of this process, for the callback */

static int tls_pick(gnutls_session_t s, const gnutls_datum_t *req_ca, int n_req,
                    const gnutls_pk_algorithm_t *algos, int n_algos, gnutls_pcert_st **pcert,
                    unsigned int *n_pcert, gnutls_privkey_t *key)
{
    struct kiln_api_tls *t = tls_daemon->tls;
    (void)s, (void)req_ca, (void)n_req, (void)algos, (void)n_algos;
    pthread_mutex_lock(&t->mu);
    *pcert = t->cur->pcert;
    *n_pcert = t->cur->n;
    *key = t->cur->key;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int kiln_api_tls_reload(kilnd *d)
{
    if (!d->tls) return 0;
    tls_gen *g = gen_load(d->tls_cert, d->tls_key);
    if (!g) return -1;
    pthread_mutex_lock(&d->tls->mu);
    g->older = d->tls->cur;
    d->tls->cur = g;
    pthread_mutex_unlock(&d->tls->mu);
    return 0;
}

struct MHD_Daemon *kiln_api_start(kilnd *d, int listen_fd)
{
    /* upgrades: the notebook proxy's WebSockets (nbproxy.c) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_UPGRADE;
    kiln__api_jobs_cache_init(d);
    kiln__api_metrics_init(d);
    d->limits = calloc(1, sizeof *d->limits);
    if (!d->limits) return NULL;
    if (d->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
            MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
            fprintf(stderr, "kilnd: this libmicrohttpd was built without TLS (GnuTLS)\n");
            return NULL;
        }
        d->tls = calloc(1, sizeof *d->tls);
        if (!d->tls) return NULL;
        pthread_mutex_init(&d->tls->mu, NULL);
        if (!(d->tls->cur = gen_load(d->tls_cert, d->tls_key))) return NULL;
        tls_daemon = d;
        flags |= MHD_USE_TLS;
    }
    /* TLS 1.2 and 1.3 only. Without TLS the option list ends before the
     * certificate callback (MHD_OPTION_END in its place): libmicrohttpd
     * refuses TLS options on a plain daemon. */
    return MHD_start_daemon(
        flags, 0, NULL, NULL, handler, d, MHD_OPTION_LISTEN_SOCKET, listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(d->threads > 0 ? d->threads : 2),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_CONNECTION_LIMIT, 1024u,
        MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_NOTIFY_COMPLETED, completed, d,
        MHD_OPTION_URI_LOG_CALLBACK, uri_seen, d,
        d->tls ? MHD_OPTION_HTTPS_CERT_CALLBACK : MHD_OPTION_END, tls_pick,
        MHD_OPTION_HTTPS_PRIORITIES, "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", MHD_OPTION_END);
}

void kiln_api_stop(kilnd *d, struct MHD_Daemon *m)
{
    kiln__api_nbproxy_stop();
    if (m) MHD_stop_daemon(m);
    kiln__api_jobs_cache_free(d);
    kiln__api_storage_free(d);
    kiln__api_metrics_free(d);
    free(d->limits);
    d->limits = NULL;
    if (d->tls) {
        gen_free(d->tls->cur);
        pthread_mutex_destroy(&d->tls->mu);
        free(d->tls);
        d->tls = NULL;
    }
}
