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
 *   POST  /v2/entries:list                    Logging: the jobs' log lines
 *   GET   /healthz
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

#include "api/api_int.h"
#include "util/utf8.h"

/* ---------- responses ---------- */

/* The status of the response this thread queued last: libmicrohttpd runs a
 * request's handler on one thread of its pool and does not tell the
 * completion callback the code, so the handler reads it here after route(). */
static _Thread_local unsigned last_code;

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

/* ---------- auth ---------- */

static kiln_api_auth authenticate(kilnd *d, struct MHD_Connection *c)
{
    kiln_api_auth a = {.ok = true, .project = NULL, .role = KILND_EDITOR};
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

bool kiln__api_sees(const kiln_api_auth *a, const char *project)
{
    return !a->project || strcmp(a->project, "*") == 0 || strcmp(a->project, project) == 0;
}

/* ---------- routing ---------- */

static enum MHD_Result route(kilnd *d, struct MHD_Connection *c, const char *url,
                             const char *method, const kiln_api_req *rq)
{
    if (strcmp(url, "/healthz") == 0) return send_text(c, 200, strdup("{\"status\":\"ok\"}"));
    if (kiln__api_is_web(url)) return kiln__api_web(c, method, url);
    kiln_api_auth a = authenticate(d, c);
    if (!a.ok)
        return send_error(c, 401, NULL,
                          "Request had invalid authentication credentials: "
                          "expected 'Authorization: Bearer TOKEN'");
    if (kiln__api_storage_owns(url)) return kiln__api_storage(d, c, method, url, rq, &a);
    if (strcmp(url, "/metrics") == 0) return kiln__api_metrics(d, c, method, &a);
    if (strncmp(url, "/v1/nodes", 9) == 0 && (url[9] == '\0' || url[9] == '/'))
        return kiln__api_nodes(d, c, method, url[9] ? url + 10 : "", &a);
    if (strncmp(url, "/v2/", 4) == 0) return kiln__api_logging(d, c, method, url + 4, rq, &a);
    if (strncmp(url, "/v1/projects/", 13) != 0)
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    const char *p = url + 13, *slash = strchr(p, '/');
    if (!slash || strncmp(slash, "/jobs", 5) != 0 || (slash[5] && slash[5] != '/'))
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    size_t pl = (size_t)(slash - p);
    if (!kiln__api_valid_name(p, pl))
        return send_error(c, 400, NULL, "'%.*s' is not a project id", (int)(pl > 64 ? 64 : pl), p);
    char project[64];
    memcpy(project, p, pl);
    project[pl] = '\0';
    if (!kiln__api_sees(&a, project)) /* 404, not 403: a token learns nothing of other projects */
        return send_error(c, 404, NULL, "Project %s not found", project);
    return kiln__api_jobs(d, c, method, project, slash + 5, rq, &a);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    kilnd *d = cls;
    kiln_api_req *rq = *con_cls;
    (void)version;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        rq->spool_fd = -1;
        rq->t0_ns = kiln__api_mono_ns();
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        /* storage uploads stream to a temp file under their own cap; every
         * other body keeps max_body */
        bool spool = kiln__api_storage_spools(url, method);
        uint64_t cap = spool ? kiln__api_storage_cap(d) : d->max_body;
        if (cl && strtoull(cl, NULL, 10) > cap) {
            /* refused before reading it: MHD drops the rest and closes */
            rq->too_big = true;
            return send_error(c, 413, NULL, "The request body is larger than %llu bytes",
                              (unsigned long long)cap);
        }
        /* no disk for a caller without a valid token */
        if (spool && !authenticate(d, c).ok) {
            rq->too_big = true; /* the body is not read */
            return send_error(c, 401, NULL,
                              "Request had invalid authentication credentials: "
                              "expected 'Authorization: Bearer TOKEN'");
        }
        if (spool && (rq->spool_fd = kiln__api_storage_spool_open(d)) < 0)
            return send_error(c, 500, NULL, "cannot open a temp file for the upload");
        return MHD_YES;
    }
    if (*upload_size && rq->spool_fd >= 0) {
        if (!rq->too_big && rq->spool_len + *upload_size > kiln__api_storage_cap(d))
            rq->too_big = true;
        for (size_t done = 0; !rq->too_big && !rq->spool_err && done < *upload_size;) {
            ssize_t k = write(rq->spool_fd, upload + done, *upload_size - done);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) rq->spool_err = true;
            if (k > 0) done += (size_t)k;
        }
        if (!rq->too_big && !rq->spool_err) rq->spool_len += *upload_size;
        *upload_size = 0;
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
    enum MHD_Result rc;
    kiln__api_last_code(true);
    if (rq->too_big && rq->spool_fd >= 0)
        rc = send_error(c, 413, NULL, "The upload is larger than %llu bytes",
                        (unsigned long long)kiln__api_storage_cap(d));
    else if (rq->too_big)
        rc = send_error(c, 413, NULL, "The request body is larger than %zu bytes", d->max_body);
    else if (rq->spool_err)
        rc = send_error(c, 500, NULL, "cannot write the upload to a temp file");
    else
        rc = route(d, c, url, method, rq);
    kiln__api_metrics_observe(d, method, url, kiln__api_last_code(true), rq->t0_ns);
    return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    kiln_api_req *rq = *con_cls;
    (void)cls, (void)c, (void)toe;
    if (!rq) return;
    if (rq->spool_fd >= 0) close(rq->spool_fd);
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

struct MHD_Daemon *kiln_api_start(kilnd *d, int listen_fd)
{
    kiln__api_jobs_cache_init(d);
    kiln__api_metrics_init(d);
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
    kiln__api_jobs_cache_free(d);
    kiln__api_storage_free(d);
    kiln__api_metrics_free(d);
}
