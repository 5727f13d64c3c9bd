/* src/api/api_int.h - what the API's surfaces share (internal to src/api).
 *
 * api.c owns the libmicrohttpd daemon, request bodies, authentication and
 * routing; each API surface lives in a file of its own and is reached from
 * route() by its URL prefix:
 *   api_jobs.c   the ml API's projects.jobs (/v1/projects/P/jobs...)
 *   api_nodes.c  kiln's nodes (/v1/nodes...)
 *   logging.c    the Logging API's entries.list over the jobs' logs (/v2/...)
 *   storage.c    the Cloud Storage JSON API subset (/storage/v1/, /upload/storage/v1/,
 *                /download/storage/v1/) over the staging store (kiln/objects.h)
 *   metrics.c    /metrics (Prometheus) and the request counters behind it
 *   web.c        the dashboard's static files (/ and /ui/...)
 * Every surface answers with the helpers below, so that every error is
 * Google's envelope and every body is JSON. */
#ifndef KILN_API_INT_H
#define KILN_API_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/kilnd.h"

/* Who is calling: with no tokens file, project is NULL and everything is
 * allowed. */
typedef struct kiln_api_auth {
    bool ok;
    const char *project; /* NULL = no auth configured; "*" = every project */
    kiln_auth_role role;
} kiln_api_auth;

/* A request's body, read whole before routing (capped at d->max_body).
 * Storage uploads (kiln__api_storage_spools) are larger: their body goes to
 * an unlinked temp file instead (spool_fd, spool_len; body stays NULL),
 * capped by kiln__api_storage_cap. */
typedef struct kiln_api_req {
    char *body;
    size_t len;
    bool too_big;
    int spool_fd; /* -1: the body is in memory */
    uint64_t spool_len;
    int spool_err; /* errno of a failed spool write (0: none) */
    int64_t t0_ns; /* arrival (CLOCK_MONOTONIC), for the latency histogram */
    /* who is calling, decided once when the headers are in */
    kiln_api_auth auth;
    char project[128]; /* auth.project points here */
    char token_id[16]; /* the presented token's id ("": none presented) */
    bool limited;      /* answered 429 at once; the body is dropped */
    int slot;          /* the per-token counter it holds (-1: none) */
    bool counted;      /* holds one of the overall in-flight count */
    bool begun;        /* begin() ran (the URI callback made rq before it) */
    /* called once when the request ends (completed()), if set: the notebook
     * proxy frees a WebSocket splice whose upgrade never happened */
    void (*on_done)(void *arg);
    void *on_done_arg;
    char *uri; /* the request target as sent (path and query, not decoded) */
} kiln_api_req;

/* Queues `body` (taken over, freed by libmicrohttpd) as application/json;
 * body NULL answers 500 "out of memory". */
enum MHD_Result kiln__api_send_text(struct MHD_Connection *c, unsigned code, char *body);
/* Queues and releases r with this status; every response goes through here
 * (or send_text), which notes the code for the request metrics. */
enum MHD_Result kiln__api_queue(struct MHD_Connection *c, unsigned code, struct MHD_Response *r);
/* Serialises and releases v (NULL: 500). */
enum MHD_Result kiln__api_send_json(struct MHD_Connection *c, unsigned code, json_t *v);
/* Google's error envelope with this status word (e.g. "ABORTED"); dg may be NULL. */
enum MHD_Result kiln__api_send_error_st(struct MHD_Connection *c, unsigned code, const char *status,
                                        const kiln_diag *dg, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The canonical status word of an HTTP code (400 INVALID_ARGUMENT, ...). */
const char *kiln__api_status_of(unsigned code);
/* A project or job id: [A-Za-z0-9][A-Za-z0-9_-]{0,62}. */
bool kiln__api_valid_name(const char *s, size_t len);
/* Whether this caller may see the project's resources. */
bool kiln__api_sees(const kiln_api_auth *a, const char *project);
/* Who holds which device, from the runtime records of the active jobs this
 * caller may see: {"NODE/INDEX": {"job": "projects/P/jobs/J", "hpcJob":
 * "P/J", "task": T}} (src/api/api_nodes.c; /metrics' hpc_job label too). */
json_t *kiln__api_gpu_holders(kilnd *d, const kiln_api_auth *a);

#define send_text     kiln__api_send_text
#define send_json     kiln__api_send_json
#define send_error_st kiln__api_send_error_st
#define send_error(c, code, dg, ...)                                                               \
    kiln__api_send_error_st(c, code, kiln__api_status_of(code), dg, __VA_ARGS__)

/* ---- the surfaces ---- */

/* /v1/projects/PROJECT/jobs + rest ("", "/", "/ID", "/ID:verb"); the project
 * is already checked (name, visibility). */
enum MHD_Result kiln__api_jobs(kilnd *d, struct MHD_Connection *c, const char *method,
                               const char *project, const char *rest, const kiln_api_req *rq,
                               const kiln_api_auth *a);
/* Why kiln__api_job_admit refused a job: the HTTP code, Google's status
 * word (NULL: the code's own) and the message; violations are in its dg. */
typedef struct kiln_api_refusal {
    unsigned code;
    const char *status;
    char msg[1024];
} kiln_api_refusal;
/* Everything a create does after the body is parsed into `job` (its jobId
 * set, output fields cleared): the catalog's and kiln's own checks, the
 * store, the TTL marker, the QUEUED event, waking the supervisor. Returns
 * the stored record (caller frees), or NULL with *why (and dg) filled. The
 * ml v1 create and aiplatform v1's customJobs create (api_vertex.c) share it,
 * so that a job is checked the same whichever API made it. May normalise
 * `job` in place. */
kiln_job_record *kiln__api_job_admit(kilnd *d, const char *project, kiln_job *job, kiln_diag *dg,
                                     kiln_api_refusal *why);
/* Cancels a job as projects.jobs.cancel does (QUEUED -> CANCELLED,
 * running -> CANCELLING, the event written, the supervisor woken):
 * KILN_ENOTFOUND, KILN_ECONFLICT (already ended; *was its state) or a store
 * error. */
kiln_err kiln__api_job_cancel(kilnd *d, const char *project, const char *id, kiln_job_state *was);
/* The GET cache of api_jobs.c. */
void kiln__api_jobs_cache_init(kilnd *d);
void kiln__api_jobs_cache_free(kilnd *d);

/* /v1/queues + rest ("" or a ClusterQueue's name): kilnd --queues (api_queues.c). */
enum MHD_Result kiln__api_queues(kilnd *d, struct MHD_Connection *c, const char *method,
                                 const char *rest, const kiln_api_auth *a);
/* Kueue's metrics (kueue_*) for /metrics; nothing without --queues. */
void kiln__api_queues_metrics(kilnd *d, void (*emit)(void *, const char *, ...), void *o);
/* /v1/projects/PROJECT/locations/ + rest: the aiplatform v1 surface
 * (api_vertex.c): customJobs, hyperparameterTuningJobs, operations. The project
 * is already checked. */
enum MHD_Result kiln__api_vertex(kilnd *d, struct MHD_Connection *c, const char *method,
                                 const char *project, const char *rest, const kiln_api_req *rq,
                                 const kiln_api_auth *a);

/* /v1/nodes + rest ("" or "NAME" or "NAME:verb"). */
enum MHD_Result kiln__api_nodes(kilnd *d, struct MHD_Connection *c, const char *method,
                                const char *rest, const kiln_api_auth *a);

/* /v2/ + rest ("entries:list"): the Logging API subset gcloud reads job logs
 * with; the project comes from the body's resourceNames and is checked there. */
enum MHD_Result kiln__api_logging(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *rest, const kiln_api_req *rq, const kiln_api_auth *a);

/* The storage subset: the URLs it owns (prefixes above), their handler,
 * and the spooling of upload bodies. */
bool kiln__api_storage_owns(const char *url);
bool kiln__api_storage_spools(const char *url, const char *method);
uint64_t kiln__api_storage_cap(const kilnd *d);
int kiln__api_storage_spool_open(kilnd *d); /* an unlinked temp file, or -1 */
enum MHD_Result kiln__api_storage(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *url, const kiln_api_req *rq, const kiln_api_auth *a);
/* Ends the resumable sessions still open (at kiln_api_stop). */
void kiln__api_storage_free(kilnd *d);
/* At job create: every gs:// URI of the job (packageUris, jobDir) must name
 * a bucket this kilnd holds for the project, and a package an object in it.
 * Adds a violation per problem to dg. */
void kiln__api_storage_check_job(kilnd *d, const char *project, const kiln_job *job, kiln_diag *dg);
/* A gs:// URI that must be a prefix of objects in a bucket held for the
 * project (a Model's artifactUri); a violation goes to dg under field. */
void kiln__api_storage_check_prefix(kilnd *d, const char *project, const char *uri,
                                    const char *field, kiln_diag *dg);
/* GET /metrics; the caller is authenticated (metrics.c decides who may see). */
enum MHD_Result kiln__api_metrics(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const kiln_api_auth *a);
/* Request counters: init/free with the daemon; observe() after each request
 * with the code its response was queued with (0: none, the connection
 * failed). Thread safe. */
void kiln__api_metrics_init(kilnd *d);
void kiln__api_metrics_free(kilnd *d);
void kiln__api_metrics_observe(kilnd *d, const char *method, const char *url, unsigned code,
                               int64_t t0_ns);
/* Whether the data dir's file system has less than --min-free-bytes free;
 * why gets the sentence a 503 says. Creates check it first, so that kilnd
 * refuses new work before SQLite or a log write meets ENOSPC, and takes it
 * again by itself once space returns. */
bool kiln__api_disk_low(kilnd *d, char *why, size_t len);

/* A surface answering 404 to hide another project's resource calls this,
 * so that the audit log records the request as denied; hidden(true) reads
 * and clears it (per thread, like last_code). */
void kiln__api_note_hidden(void);
bool kiln__api_hidden(bool reset);
/* A create's new job id, for the audit line's objectRef (this request). */
void kiln__api_note_created(const char *job_id);
/* The code of the response this thread queued last (0 = none since reset). */
unsigned kiln__api_last_code(bool reset);
int64_t kiln__api_mono_ns(void);

/* /v1/projects/PROJECT/locations/ + rest ("L/instances...", "L/operations/ID"):
 * the Notebooks API subset (api_notebooks.c); the project is already checked. */
enum MHD_Result kiln__api_notebooks(kilnd *d, struct MHD_Connection *c, const char *method,
                                    const char *project, const char *rest, const kiln_api_req *rq,
                                    const kiln_api_auth *a);
/* Gives back the in-flight places rq holds (once; completed() does it for
 * every request): an upgraded WebSocket lives on but is no request in
 * flight, so the proxy gives its places back at the upgrade. */
void kiln__api_release(kilnd *d, kiln_api_req *rq);
/* POST /v1/notebooks:signin: the bearer token as the proxy's cookie. */
enum MHD_Result kiln__api_notebooks_signin(kilnd *d, struct MHD_Connection *c, const char *method);
/* /notebooks/P/NAME/...: the proxy to an instance's JupyterLab (nbproxy.c),
 * which authenticates itself (bearer token or the kiln_token cookie), its
 * body cap, and stop (ends the WebSocket splices before the daemon stops). */
bool kiln__api_nbproxy_owns(const char *url);
uint64_t kiln__api_nbproxy_cap(void);
enum MHD_Result kiln__api_nbproxy(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *url, kiln_api_req *rq);
void kiln__api_nbproxy_stop(void);

/* GET / and /ui/FILE: the dashboard, served without auth (it holds no data;
 * its pages call the API with the token the user gives them). Returns false
 * when url is not the dashboard's. */
bool kiln__api_is_web(const char *url);
enum MHD_Result kiln__api_web(struct MHD_Connection *c, const char *method, const char *url);

#endif
