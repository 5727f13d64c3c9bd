/* src/api/api_vertex.c - Vertex AI's aiplatform v1 surface over kiln's jobs.
 *
 *   POST   /v1/projects/P/locations/L/customJobs          create (body: CustomJob)
 *   GET    /v1/projects/P/locations/L/customJobs/ID       get
 *   GET    /v1/projects/P/locations/L/customJobs?filter=&pageSize=&pageToken=   list
 *   POST   /v1/projects/P/locations/L/customJobs/ID:cancel
 *   DELETE /v1/projects/P/locations/L/customJobs/ID       a done Operation
 *   GET    /v1/projects/P/locations/L/operations/OP       the Operations deletes, uploads return
 * and the same for hyperparameterTuningJobs and trainingPipelines (custom
 * task only: a pipeline is the CustomJob its trainingTaskInputs describe,
 * its state a PipelineState).
 * Models, those pipelines made (modelToUpload) and those uploaded:
 *   POST   /v1/projects/P/locations/L/models:upload       a Model (body: UploadModelRequest)
 *   GET    /v1/projects/P/locations/L/models[/ID]         get, list (uploaded and pipelines')
 *   DELETE /v1/projects/P/locations/L/models/ID           an uploaded Model; a done Operation
 * The same paths under /v1beta1/ come here too (src/api/api.c routes them).
 *
 * A CustomJob is a kiln job (kiln_job_from_custom_job: workerPoolSpecs[0..3]
 * are the master, workers, parameter servers, evaluators) whose id is a
 * number, as Vertex's are; it is stored, scheduled and run as every job is,
 * and the ml v1 API shows it too (projects/P/jobs/ID). What differs is the
 * wire format: JobState names (or numbers, when the client asks for
 * `$alt=json;enum-encoding=int`, as the Python SDK's REST transport does),
 * `error` as a google.rpc.Status, RFC 3339 times, int64 as strings. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api_int.h"
#include "kiln/tune.h"

/* The two resources, each a kind of kiln job. kiln's job ids start with a
 * letter (the ml API's rule) and Vertex's are numbers: the kiln job of
 * CustomJob N is customjob_N, of HyperparameterTuningJob N hptuningjob_N
 * (what the ml API and `kiln jobs` show). */
typedef struct vx_kind {
    const char *coll;   /* the collection in the URL, and the list's key */
    const char *prefix; /* of the kiln job id */
    const char *what;   /* in messages */
    bool hp;            /* a tuning job */
    bool pipeline;      /* a TrainingPipeline: PipelineState, trainingTaskInputs */
} vx_kind;
static const vx_kind CJ = {"customJobs", "customjob_", "CustomJob", false, false};
static const vx_kind HPT = {"hyperparameterTuningJobs", "hptuningjob_", "HyperparameterTuningJob",
                            true, false};
/* a TrainingPipeline of the custom task is the CustomJob its
 * trainingTaskInputs describe, shown as a pipeline */
static const vx_kind TP = {"trainingPipelines", "trainingpipeline_", "TrainingPipeline", false,
                           true};

static const char *vx_id(const vx_kind *k, const char *job_id)
{
    size_t n = strlen(k->prefix);
    return strncmp(job_id, k->prefix, n) == 0 ? job_id + n : job_id;
}

static bool is_kind(const vx_kind *k, const kiln_job *job)
{
    const kiln_training_input *ti = &job->training_input;
    return ti->has_vertex && ti->has_hyperparameters == k->hp &&
           strncmp(job->job_id, k->prefix, strlen(k->prefix)) == 0;
}

/* JobState (google/cloud/aiplatform/v1/job_state.proto) of a kiln state */
static int vx_state_num(kiln_job_state s)
{
    switch (s) {
    case KILN_STATE_QUEUED:
        return 1; /* JOB_STATE_QUEUED */
    case KILN_STATE_PREPARING:
        return 2; /* JOB_STATE_PENDING */
    case KILN_STATE_RUNNING:
        return 3;
    case KILN_STATE_SUCCEEDED:
        return 4;
    case KILN_STATE_FAILED:
        return 5;
    case KILN_STATE_CANCELLING:
        return 6;
    case KILN_STATE_CANCELLED:
        return 7;
    default:
        return 0;
    }
}

static const char *const vx_state_names[] = {
    "JOB_STATE_UNSPECIFIED", "JOB_STATE_QUEUED",    "JOB_STATE_PENDING",
    "JOB_STATE_RUNNING",     "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLING",  "JOB_STATE_CANCELLED", "JOB_STATE_PAUSED",
    "JOB_STATE_EXPIRED",     "JOB_STATE_UPDATING",  "JOB_STATE_PARTIALLY_SUCCEEDED"};

/* PipelineState (google/cloud/aiplatform/v1/pipeline_state.proto): the
 * same numbers as JobState for every state a kiln job takes */
static const char *const tp_state_names[] = {
    "PIPELINE_STATE_UNSPECIFIED", "PIPELINE_STATE_QUEUED",    "PIPELINE_STATE_PENDING",
    "PIPELINE_STATE_RUNNING",     "PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED",
    "PIPELINE_STATE_CANCELLING",  "PIPELINE_STATE_CANCELLED", "PIPELINE_STATE_PAUSED"};

static const char *state_name(const vx_kind *k, int st)
{
    return k->pipeline ? (st >= 0 && st <= 8 ? tp_state_names[st] : tp_state_names[0])
                       : vx_state_names[st];
}

/* kiln's state name of a JobState (PipelineState for k a pipeline) name,
 * or NULL for a state no kiln job is ever in (PAUSED, EXPIRED...). */
static const char *kiln_state_of(const vx_kind *k, const char *vx)
{
    static const char *const ks[] = {NULL,        "QUEUED", "PREPARING",  "RUNNING",
                                     "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED"};
    for (size_t i = 1; i < sizeof ks / sizeof ks[0]; i++)
        if (strcmp(vx, state_name(k, (int)i)) == 0) return ks[i];
    return NULL;
}

/* Whether the client asked for enums as numbers ($alt=json;enum-encoding=int). */
static bool enum_ints(struct MHD_Connection *c)
{
    const char *alt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "$alt");
    return alt && strstr(alt, "enum-encoding=int") != NULL;
}

/* alt / $alt other than json (proto, media) is a format kilnd does not
 * write: refused rather than answered in JSON anyway. */
static bool alt_ok(struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "alt");
    const char *b = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "$alt");
    if (a && strcmp(a, "json") != 0) return false;
    return !b || strncmp(b, "json", 4) == 0;
}

/* ---------- the resources as the API shows them ---------- */

/* A tuning job's trials as Vertex shows them (Trial: id, state, parameters,
 * finalMeasurement, times), in id order, from the study kilnd keeps in the
 * job's runtime record (src/exec/supervisor/trials.c). */
static json_t *trials_json(const kiln_job_record *r, bool ints, int *succeeded)
{
    static const char *const tstate[] = {"REQUESTED", "ACTIVE", "SUCCEEDED", "INFEASIBLE",
                                         "STOPPING"};
    static const int tnum[] = {1, 2, 4, 5, 3};
    const kiln_hyperparameter_spec *hp = &r->job->training_input.hyperparameters;
    json_t *rt = r->runtime ? json_loads(r->runtime, 0, NULL) : NULL;
    kiln_study *st = kiln_study_from_json(hp, json_object_get(rt, "study"));
    json_t *out = json_array();
    *succeeded = 0;
    for (size_t i = 0; st && out && i < kiln_study_trial_count(st); i++) {
        kiln_trial *t = kiln_study_trial(st, i);
        char id[16], when[40];
        snprintf(id, sizeof id, "%d", t->id);
        /* FAILED and CANCELLED trials are INFEASIBLE for Vertex; a trial
         * stopped early SUCCEEDED with its last measurement */
        int k = t->state == KILN_TRIAL_QUEUED      ? 0
                : t->state == KILN_TRIAL_RUNNING   ? 1
                : t->state == KILN_TRIAL_SUCCEEDED ? 2
                                                   : 3;
        if (k == 2) ++*succeeded;
        json_t *ps = json_array(), *o;
        for (size_t p = 0; ps && p < hp->n_params; p++) {
            const kiln_parameter_spec *sp = &hp->params[p];
            /* a conditional parameter the trial does not have: not listed,
             * as Vertex lists only a trial's own parameters */
            if (isnan(t->values[p])) continue;
            json_t *v = strcmp(sp->type, "CATEGORICAL") == 0
                            ? json_string(sp->categorical_values.v[(size_t)t->values[p]])
                        : strcmp(sp->type, "INTEGER") == 0 ? json_integer((json_int_t)t->values[p])
                                                           : json_real(t->values[p]);
            json_array_append_new(
                ps, json_pack("{s:s,s:o}", "parameterId", sp->parameter_name, "value", v));
        }
        o = json_pack("{s:s,s:o,s:o}", "id", id, "state",
                      ints ? json_integer(tnum[k]) : json_string(tstate[k]), "parameters",
                      ps ? ps : json_array());
        if (!o) continue;
        if (t->has_metric) {
            char step[24];
            snprintf(step, sizeof step, "%lld", (long long)t->step);
            json_object_set_new(o, "finalMeasurement",
                                json_pack("{s:s,s:[{s:s,s:f}]}", "stepCount", step, "metrics",
                                          "metricId", kiln_study_metric_tag(st), "value",
                                          t->objective));
        }
        if (t->start_ns) {
            time_t sec = (time_t)(t->start_ns / 1000000000);
            struct tm tm;
            gmtime_r(&sec, &tm);
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
            json_object_set_new(o, "startTime", json_string(when));
        }
        if (t->end_ns) {
            time_t sec = (time_t)(t->end_ns / 1000000000);
            struct tm tm;
            gmtime_r(&sec, &tm);
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
            json_object_set_new(o, "endTime", json_string(when));
        }
        json_array_append_new(out, o);
    }
    kiln_study_free(st);
    json_decref(rt);
    return out;
}

static json_t *resource_json(const vx_kind *k, const char *project, const char *location,
                             const kiln_job_record *r, bool ints)
{
    const kiln_job *job = r->job;
    const kiln_training_input *ti = &job->training_input;
    char name[512];
    snprintf(name, sizeof name, "projects/%s/locations/%s/%s/%s", project, location, k->coll,
             vx_id(k, job->job_id));
    json_t *o = json_object(), *spec = kiln_job_custom_job_spec(job);
    if (!o || !spec) {
        json_decref(o);
        json_decref(spec);
        return NULL;
    }
    int st = vx_state_num(job->state);
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "displayName",
                        json_string(ti->vertex.display_name ? ti->vertex.display_name : ""));
    if (k->hp) {
        const kiln_hyperparameter_spec *hp = &ti->hyperparameters;
        json_t *ss = kiln_job_study_spec(job);
        if (ss) json_object_set_new(o, "studySpec", ss);
        json_object_set_new(o, "maxTrialCount", json_integer(hp->max_trials));
        json_object_set_new(o, "parallelTrialCount", json_integer(hp->max_parallel_trials));
        if (hp->max_failed_trials)
            json_object_set_new(o, "maxFailedTrialCount", json_integer(hp->max_failed_trials));
        json_object_set_new(o, "trialJobSpec", spec);
        int done = 0;
        json_t *tr = trials_json(r, ints, &done);
        if (tr && json_array_size(tr))
            json_object_set_new(o, "trials", tr);
        else
            json_decref(tr);
    } else if (k->pipeline) {
        /* the definition read back byte for byte (the SDK's get() checks it) */
        json_object_set_new(o, "trainingTaskDefinition", json_string(KILN_VERTEX_CUSTOM_TASK));
        json_object_set_new(o, "trainingTaskInputs", spec);
        /* modelToUpload as sent; on success it names the Model it became
         * (what run() then gets: models/ID@versionId) */
        json_t *m =
            ti->vertex.model_to_upload ? json_loads(ti->vertex.model_to_upload, 0, NULL) : NULL;
        if (m && job->state == KILN_STATE_SUCCEEDED) {
            char mn[512];
            snprintf(mn, sizeof mn, "projects/%s/locations/%s/models/%s", project, location,
                     vx_id(k, job->job_id));
            json_object_set_new(m, "name", json_string(mn));
            json_object_set_new(m, "versionId", json_string("1"));
        }
        if (m) json_object_set_new(o, "modelToUpload", m);
    } else {
        json_object_set_new(o, "jobSpec", spec);
    }
    json_object_set_new(o, "state", ints ? json_integer(st) : json_string(state_name(k, st)));
    if (job->create_time) json_object_set_new(o, "createTime", json_string(job->create_time));
    if (job->start_time) json_object_set_new(o, "startTime", json_string(job->start_time));
    if (job->end_time) json_object_set_new(o, "endTime", json_string(job->end_time));
    const char *upd = job->end_time     ? job->end_time
                      : job->start_time ? job->start_time
                                        : job->create_time;
    if (upd) json_object_set_new(o, "updateTime", json_string(upd));
    if (job->state == KILN_STATE_FAILED || job->state == KILN_STATE_CANCELLED) {
        /* google.rpc.Status: CANCELLED (1) for a cancelled job, else
         * INTERNAL (13), what Vertex reports for a replica's failure */
        bool cancelled = job->state == KILN_STATE_CANCELLED;
        const char *msg = job->error_message && *job->error_message ? job->error_message
                          : cancelled                               ? "CANCELED"
                                                                    : "The job failed.";
        json_object_set_new(o, "error",
                            json_pack("{s:i,s:s}", "code", cancelled ? 1 : 13, "message", msg));
    }
    if (job->labels.n) {
        json_t *l = json_object();
        for (size_t i = 0; l && i < job->labels.n; i++)
            json_object_set_new(l, job->labels.keys[i], json_string(job->labels.vals[i]));
        if (l) json_object_set_new(o, "labels", l);
    }
    return o;
}

/* A job of this project of kind k (made through this API), or NULL after
 * answering 404. */
static kiln_job_record *get_vx(const vx_kind *k, kilnd *d, struct MHD_Connection *c,
                               const char *project, const char *location, const char *id,
                               enum MHD_Result *rc)
{
    kiln_job_record *r = NULL;
    char kid[64];
    snprintf(kid, sizeof kid, "%s%s", k->prefix, id);
    kiln_err err = kiln_store_job_get(d->store, project, kid, &r);
    if (err == KILN_OK && is_kind(k, r->job)) return r;
    kiln_job_record_free(r);
    if (err != KILN_OK && err != KILN_ENOTFOUND)
        *rc = send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    else
        *rc = send_error(c, 404, NULL, "%s projects/%s/locations/%s/%s/%s not found", k->what,
                         project, location, k->coll, id);
    return NULL;
}

/* ---------- create ---------- */

/* A CustomJob's id: a positive 19-digit number, as Vertex's are. */
static void new_id(char out[24])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)kiln_now_ns() * 2654435761u;
    snprintf(out, 24, "%llu", 1000000000000000000ull + v % 8000000000000000000ull);
}

/* The ml v1 field paths of the shared checks (kiln__api_job_admit) as
 * CustomJob paths, in place. */
static void rename_fields(const vx_kind *k, kiln_diag *dg)
{
    for (size_t i = 0; i < dg->n; i++) {
        char f[512];
        if (!dg->v[i].field) continue;
        if (strcmp(dg->v[i].field, "trainingInput.region") == 0)
            snprintf(f, sizeof f, "parent (the location)");
        else
            kiln_job_custom_job_field(dg->v[i].field, f, sizeof f);
        if (k->pipeline && strncmp(f, "jobSpec", 7) == 0) { /* its jobSpec is trainingTaskInputs */
            char g[512];
            snprintf(g, sizeof g, "%s", f + 7);
            snprintf(f, sizeof f, "trainingTaskInputs%.480s", g);
        }
        char *nf = strdup(f);
        if (!nf) continue;
        free(dg->v[i].field);
        dg->v[i].field = nf;
    }
}

static enum MHD_Result cj_create(const vx_kind *k, kilnd *d, struct MHD_Connection *c,
                                 const char *project, const char *location, const kiln_api_req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *rec = NULL;
    kiln_api_refusal why = {0};
    enum MHD_Result rc;
    char low[256], id[24];

    if (kiln__api_disk_low(d, low, sizeof low)) {
        rc = send_error(c, 503, NULL, "%s", low);
        goto out;
    }
    if (rq->len == 0) {
        rc = send_error(c, 400, NULL, "The request body is empty: send a %s as JSON", k->what);
        goto out;
    }
    kiln_err err = k->hp         ? kiln_job_from_hp_tuning_job(rq->body, rq->len, &job, &dg)
                   : k->pipeline ? kiln_job_from_training_pipeline(rq->body, rq->len, &job, &dg)
                                 : kiln_job_from_custom_job(rq->body, rq->len, &job, &dg);
    if (err != KILN_OK) {
        if (dg.n && dg.v[0].field && dg.v[0].field[0])
            rc = send_error(c, 400, &dg, "Field: %s Error: %s", dg.v[0].field, dg.v[0].description);
        else
            rc = send_error(c, 400, &dg, "The request body is not a valid %s: %s", k->what,
                            dg.n ? dg.v[0].description : kiln_err_str(err));
        goto out;
    }
    kiln_set_str(&job->training_input.region, location);
    /* a new number until one is free (a clash is one in 8e18) */
    for (int tries = 0; tries < 4; tries++) {
        char kid[64];
        new_id(id);
        snprintf(kid, sizeof kid, "%s%s", k->prefix, id);
        kiln_set_str(&job->job_id, kid);
        kiln_diag_clear(&dg);
        why = (kiln_api_refusal){0};
        rec = kiln__api_job_admit(d, project, job, &dg, &why);
        if (rec || why.code != 409) break;
    }
    if (!rec) {
        rename_fields(k, &dg);
        if (why.code == 400 && dg.n && dg.v[0].field)
            rc = send_error_st(c, 400, why.status ? why.status : "INVALID_ARGUMENT", &dg,
                               "Field: %s Error: %s", dg.v[0].field, dg.v[0].description);
        else
            rc = send_error_st(c, why.code, why.status ? why.status : kiln__api_status_of(why.code),
                               &dg, "%s", why.msg);
        goto out;
    }
    rc = send_json(c, 200, resource_json(k, project, location, rec, enum_ints(c)));
out:
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return rc;
}

/* ---------- list ---------- */

/* One term of a list filter, as Vertex's list methods take them (AIP-160):
 *   state="JOB_STATE_SUCCEEDED" | state!=...   -> kiln's state=SUCCEEDED
 *   labels.KEY="VALUE" | labels.KEY!=...        -> kiln's labels.KEY=VALUE
 *   display_name="NAME" | display_name!=...     -> matched here
 * joined by AND. Anything else is refused, naming the term. */
typedef struct vx_filter {
    char kiln[1024]; /* the store filter ("" = none) */
    char name[256];
    bool has_name, name_neg;
} vx_filter;

static void unquote(char *v)
{
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        memmove(v, v + 1, n - 2);
        v[n - 2] = '\0';
    }
}

static bool parse_filter(const vx_kind *k, const char *text, vx_filter *f, char *why, size_t whylen)
{
    char buf[1024], *save = NULL;
    size_t kl = 0;
    *f = (vx_filter){0};
    if (!text || !*text) return true;
    if (strlen(text) >= sizeof buf) {
        snprintf(why, whylen, "the filter is longer than %zu characters", sizeof buf - 1);
        return false;
    }
    snprintf(buf, sizeof buf, "%s", text);
    /* split on " AND " */
    char *p = buf;
    while (p) {
        char *and = strstr(p, " AND ");
        if (and) *and = '\0';
        char *term = p;
        p = and? and+5 : NULL;
        while (*term == ' ')
            term++;
        size_t tl = strlen(term);
        while (tl && term[tl - 1] == ' ')
            term[--tl] = '\0';
        char *op = strstr(term, "!=");
        bool neg = op != NULL;
        if (!op) op = strchr(term, '=');
        if (!op || op == term) {
            snprintf(why, whylen,
                     "'%.64s': kiln reads terms FIELD=\"VALUE\" or FIELD!=\"VALUE\" on state, "
                     "display_name and labels.KEY, joined by AND",
                     term);
            return false;
        }
        char field[128], val[256];
        snprintf(field, sizeof field, "%.*s", (int)(op - term), term);
        size_t fl = strlen(field);
        while (fl && field[fl - 1] == ' ')
            field[--fl] = '\0';
        const char *v = op + (neg ? 2 : 1);
        while (*v == ' ')
            v++;
        snprintf(val, sizeof val, "%s", v);
        unquote(val);
        (void)save;
        if (strcmp(field, "display_name") == 0 || strcmp(field, "displayName") == 0) {
            snprintf(f->name, sizeof f->name, "%s", val);
            f->has_name = true;
            f->name_neg = neg;
            continue;
        }
        const char *kval = val;
        if (strcmp(field, "state") == 0) {
            kval = kiln_state_of(k, val);
            if (!kval) {
                snprintf(why, whylen, "'%.64s' is not a %s a kiln job takes (%s, %s, %s...)", val,
                         k->pipeline ? "PipelineState" : "JobState", state_name(k, 1),
                         state_name(k, 3), state_name(k, 4));
                return false;
            }
        } else if (strncmp(field, "labels.", 7) != 0 || !field[7]) {
            snprintf(why, whylen, "'%.64s': kiln filters %ss on state, display_name and labels.KEY",
                     field, k->what);
            return false;
        }
        if (strpbrk(kval, " \"")) {
            snprintf(why, whylen, "'%.64s': a value with spaces or quotes is not read", val);
            return false;
        }
        int n = snprintf(f->kiln + kl, sizeof f->kiln - kl, "%s%s%s%s", kl ? " AND " : "", field,
                         neg ? "!=" : "=", kval);
        if (n < 0 || (size_t)n >= sizeof f->kiln - kl) {
            snprintf(why, whylen, "the filter is too long");
            return false;
        }
        kl += (size_t)n;
    }
    return true;
}

static bool name_matches(const vx_filter *f, const kiln_job *job)
{
    if (!f->has_name) return true;
    const char *dn = job->training_input.vertex.display_name;
    bool eq = strcmp(dn ? dn : "", f->name) == 0;
    return f->name_neg ? !eq : eq;
}

/* The page token names the store's position under the store filter text
 * plus the display-name term, so that a token is only good for its own list. */
static enum MHD_Result cj_list(const vx_kind *k, kilnd *d, struct MHD_Connection *c,
                               const char *project, const char *location)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job_filter *kf = NULL;
    vx_filter vf;
    json_t *o = NULL, *jobs = NULL;
    enum MHD_Result rc;
    int64_t after = 0, size = 100;
    char why[512], tokkey[1400], *end;
    bool ints = enum_ints(c);

    const char *ps = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageSize");
    const char *pt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageToken");
    const char *ft = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "filter");
    if (ps && *ps) {
        errno = 0;
        size = strtoll(ps, &end, 10);
        if (errno || *end || size < 0) {
            rc = send_error(c, 400, NULL, "pageSize '%.32s' is not a page size (0 to 1000)", ps);
            goto out;
        }
        if (size == 0) size = 100;
        if (size > 1000) size = 1000;
    }
    if (!parse_filter(k, ft, &vf, why, sizeof why)) {
        kiln_diag_add(&dg, "filter", "%s", why);
        rc = send_error(c, 400, &dg, "Invalid list filter: %s", why);
        goto out;
    }
    snprintf(tokkey, sizeof tokkey, "%s:%s|%s%s", k->coll, vf.kiln, vf.name_neg ? "!" : "",
             vf.has_name ? vf.name : "");
    if (pt && *pt && kiln_store_page_after(d->store, project, tokkey, pt, &after) != KILN_OK) {
        rc = send_error(c, 400, NULL,
                        "pageToken: not a page token this server returned for this list");
        goto out;
    }
    if (vf.kiln[0] && kiln_job_filter_parse(vf.kiln, &kf, &dg) != KILN_OK) {
        rc = send_error(c, 400, &dg, "Invalid list filter: %s",
                        dg.n ? dg.v[0].description : "bad filter");
        goto out;
    }
    o = json_object();
    jobs = json_array();
    if (!o || !jobs) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto out;
    }
    /* store pages until this one is full: jobs made through the ml API
     * are not CustomJobs and are skipped; bounded, so a project of many
     * ml jobs answers a short page with a token rather than a slow one */
    int64_t next = after;
    for (int round = 0; round < 32 && (int64_t)json_array_size(jobs) < size; round++) {
        kiln_job_record **v = NULL;
        size_t n = 0;
        int64_t nx = 0;
        size_t want = (size_t)(size - (int64_t)json_array_size(jobs));
        kiln_err err = kiln_store_job_list(d->store, project, kf, next, want, &v, &n, &nx);
        if (err != KILN_OK) {
            rc = send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            if (!is_kind(k, v[i]->job) || !name_matches(&vf, v[i]->job)) continue;
            json_t *jj = resource_json(k, project, location, v[i], ints);
            if (jj) json_array_append_new(jobs, jj);
        }
        kiln_job_records_free(v, n);
        next = nx;
        if (!nx) break;
    }
    if (json_array_size(jobs)) json_object_set(o, k->coll, jobs);
    if (next) {
        char tok[KILN_STORE_TOKEN_LEN];
        kiln_store_page_token(d->store, project, tokkey, next, tok);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    rc = send_json(c, 200, o);
    o = NULL;
out:
    json_decref(o);
    json_decref(jobs);
    kiln_job_filter_free(kf);
    kiln_diag_free(&dg);
    return rc;
}

/* ---------- operations ---------- */

/* The Operations this kilnd has returned (deletes and Model uploads, done
 * when returned), newest OPS of them, for the clients that poll them by
 * name. In memory: a kilnd restart forgets them, and a GET then answers
 * 404. */
#define OPS 128
static struct {
    pthread_mutex_t mu;
    unsigned next;
    struct {
        char name[256];
        char body[2048];
    } v[OPS];
} ops = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A done Operation: metadata of type `meta` (an aiplatform v1 message with
 * genericMetadata, its times `created`), `response` its result (taken;
 * NULL: google.protobuf.Empty). Remembered for op_get. */
static json_t *new_operation(const char *project, const char *location, const char *created,
                             const char *meta, json_t *response)
{
    char id[24], name[256], type[160], *s;
    new_id(id);
    snprintf(name, sizeof name, "projects/%s/locations/%s/operations/%s", project, location, id);
    snprintf(type, sizeof type, "type.googleapis.com/google.cloud.aiplatform.v1.%s", meta);
    if (!response)
        response = json_pack("{s:s}", "@type", "type.googleapis.com/google.protobuf.Empty");
    json_t *op = json_pack("{s:s,s:{s:s,s:{s:s,s:s}},s:b,s:o}", "name", name, "metadata", "@type",
                           type, "genericMetadata", "createTime", created, "updateTime", created,
                           "done", 1, "response", response);
    if (op && (s = json_dumps(op, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL) {
        pthread_mutex_lock(&ops.mu);
        unsigned k = ops.next++ % OPS;
        snprintf(ops.v[k].name, sizeof ops.v[k].name, "%s", name);
        snprintf(ops.v[k].body, sizeof ops.v[k].body, "%s", s);
        pthread_mutex_unlock(&ops.mu);
        free(s);
    }
    return op;
}

/* now, RFC 3339 to the second (the times of a delete's Operation) */
static void now_time(char out[40])
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, 40, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static enum MHD_Result op_get(struct MHD_Connection *c, const char *project, const char *location,
                              const char *id)
{
    char name[256], *body = NULL;
    snprintf(name, sizeof name, "projects/%s/locations/%s/operations/%s", project, location, id);
    pthread_mutex_lock(&ops.mu);
    for (unsigned k = 0; k < OPS && !body; k++)
        if (strcmp(ops.v[k].name, name) == 0) body = strdup(ops.v[k].body);
    pthread_mutex_unlock(&ops.mu);
    if (!body) return send_error(c, 404, NULL, "Operation %s not found", name);
    return send_text(c, 200, body);
}

/* ---------- cancel, delete ---------- */

/* A cancel's or delete's failure: gone (404), in a state that forbids it
 * (FAILED_PRECONDITION, with the state between `pre` and `post`), or the
 * store's own error. The job's kind names it (a CustomJob or a
 * HyperparameterTuningJob, in its own collection). */
static enum MHD_Result send_act_err(const vx_kind *k, struct MHD_Connection *c, const char *project,
                                    const char *location, const char *id, kiln_err err,
                                    kiln_job_state was, const char *pre, const char *post)
{
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "%s projects/%s/locations/%s/%s/%s not found", k->what,
                          project, location, k->coll, id);
    if (err == KILN_ECONFLICT)
        return send_error_st(c, 400, "FAILED_PRECONDITION", NULL,
                             "%s projects/%s/locations/%s/%s/%s %s%s%s", k->what, project, location,
                             k->coll, id, pre, state_name(k, vx_state_num(was)), post);
    return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
}

static enum MHD_Result cj_cancel(const vx_kind *k, kilnd *d, struct MHD_Connection *c,
                                 const char *project, const char *location, const char *id)
{
    enum MHD_Result rc;
    kiln_job_record *r = get_vx(k, d, c, project, location, id, &rc);
    if (!r) return rc;
    kiln_job_record_free(r);
    kiln_job_state was = KILN_STATE_UNSPECIFIED;
    char kid[64];
    snprintf(kid, sizeof kid, "%s%s", k->prefix, id);
    kiln_err err = kiln__api_job_cancel(d, project, kid, &was);
    if (err != KILN_OK)
        return send_act_err(k, c, project, location, id, err, was, "is already ",
                            " and cannot be cancelled");
    return send_json(c, 200, json_object());
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static enum MHD_Result cj_delete(const vx_kind *k, kilnd *d, struct MHD_Connection *c,
                                 const char *project, const char *location, const char *id)
{
    enum MHD_Result rc;
    kiln_job_record *r = get_vx(k, d, c, project, location, id, &rc);
    if (!r) return rc;
    char created[40];
    snprintf(created, sizeof created, "%s", r->job->end_time ? r->job->end_time : "");
    kiln_job_record_free(r);
    kiln_job_state was = KILN_STATE_UNSPECIFIED;
    char kid[64];
    snprintf(kid, sizeof kid, "%s%s", k->prefix, id);
    kiln_err err = kiln_store_job_delete(d->store, project, kid, &was);
    if (err != KILN_OK)
        return send_act_err(k, c, project, location, id, err, was, "is ",
                            ": cancel it and let it end before deleting it");
    /* its files (log, replicas' output, staged packages) go with it */
    char dir[PATH_MAX];
    kiln_jobfiles_dir(d->jobfiles, project, kid, dir, sizeof dir);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    now_time(created);
    return send_json(c, 200,
                     new_operation(project, location, created, "DeleteOperationMetadata", NULL));
}

/* ---------- models ---------- */

static bool valid_id(const char *s, size_t n);

/* A Model as kilnd shows it, from the Model as sent (m, taken): its name
 * (models/ID), version 1 (alias "default"), artifactUri when `art` is
 * given (else as sent), the pipeline that made it (tp NULL: an uploaded
 * one) and its times (`t`, NULL: none known). */
static json_t *model_show(json_t *m, const char *project, const char *location, const char *id,
                          const char *art, const char *tp, const char *t)
{
    char name[512];
    snprintf(name, sizeof name, "projects/%s/locations/%s/models/%s", project, location, id);
    json_object_set_new(m, "name", json_string(name));
    json_object_set_new(m, "versionId", json_string("1"));
    if (!json_object_get(m, "versionAliases"))
        json_object_set_new(m, "versionAliases", json_pack("[s]", "default"));
    if (art) json_object_set_new(m, "artifactUri", json_string(art));
    if (tp) {
        char tpn[512];
        snprintf(tpn, sizeof tpn, "projects/%s/locations/%s/trainingPipelines/%s", project,
                 location, tp);
        json_object_set_new(m, "trainingPipeline", json_string(tpn));
    }
    if (t) {
        json_object_set_new(m, "createTime", json_string(t));
        json_object_set_new(m, "updateTime", json_string(t));
        json_object_set_new(m, "versionCreateTime", json_string(t));
        json_object_set_new(m, "versionUpdateTime", json_string(t));
    }
    return m;
}

/* The Model a succeeded pipeline with a modelToUpload made: the Model as
 * sent, named by the pipeline's number, its artifactUri
 * baseOutputDirectory/model/ (the job's AIP_MODEL_DIR, in kilnd's staging
 * store), its times the job's end. NULL: no Model. */
static json_t *model_json(const char *project, const char *location, const kiln_job_record *r)
{
    const kiln_job *job = r->job;
    const kiln_vertex_job *vx = &job->training_input.vertex;
    if (!is_kind(&TP, job) || job->state != KILN_STATE_SUCCEEDED || !vx->model_to_upload ||
        !vx->base_output_directory)
        return NULL;
    json_t *m = json_loads(vx->model_to_upload, 0, NULL);
    if (!m) return NULL;
    char art[4200];
    const char *b = vx->base_output_directory;
    size_t bl = strlen(b);
    snprintf(art, sizeof art, "%s%smodel/", b, bl && b[bl - 1] == '/' ? "" : "/");
    const char *id = vx_id(&TP, job->job_id);
    return model_show(m, project, location, id, art, id, job->end_time);
}

/* Uploaded Models (models:upload) are store documents of this kind, named
 * by the Model's id: the Model as sent (its artifactUri the client's) with
 * the createTime of the upload. A pipeline's Model is its job's. */
#define MODEL_DOC "vxmodel"

/* An uploaded Model's document shown as a Model; NULL when unreadable. */
static json_t *upload_json(const char *project, const char *location, const char *id,
                           const char *doc)
{
    json_t *m = json_loads(doc, 0, NULL);
    if (!json_is_object(m)) {
        json_decref(m);
        return NULL;
    }
    char t[40] = "";
    const char *ct = json_string_value(json_object_get(m, "createTime"));
    if (ct) snprintf(t, sizeof t, "%s", ct);
    return model_show(m, project, location, id, NULL, NULL, *t ? t : NULL);
}

/* The Model of that id, uploaded or a pipeline's; NULL: none. */
static json_t *model_find(kilnd *d, const char *project, const char *location, const char *id)
{
    char *doc = NULL;
    json_t *m = NULL;
    if (kiln_store_doc_get(d->store, MODEL_DOC, project, id, &doc) == KILN_OK) {
        m = upload_json(project, location, id, doc);
        free(doc);
        return m;
    }
    if (!valid_id(id, strlen(id))) return NULL;
    kiln_job_record *r = NULL;
    char kid[64];
    snprintf(kid, sizeof kid, "%s%s", TP.prefix, id);
    if (kiln_store_job_get(d->store, project, kid, &r) == KILN_OK)
        m = model_json(project, location, r);
    kiln_job_record_free(r);
    return m;
}

static enum MHD_Result model_get(kilnd *d, struct MHD_Connection *c, const char *project,
                                 const char *location, const char *id)
{
    json_t *m = model_find(d, project, location, id);
    if (!m)
        return send_error(c, 404, NULL, "Model projects/%s/locations/%s/models/%s not found",
                          project, location, id);
    return send_json(c, 200, m);
}

/* Every Model of the project, one page (pageSize, pageToken as for jobs;
 * a filter is refused: kiln reads none on Models). The uploaded ones come
 * first, on the first page; the pipelines' pages follow the job list. */
static enum MHD_Result model_list(kilnd *d, struct MHD_Connection *c, const char *project,
                                  const char *location)
{
    const char *ft = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "filter");
    const char *pt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageToken");
    json_t *o = json_object(), *ms = json_array();
    int64_t after = 0, next = 0;
    kiln_store_doc *docs = NULL;
    size_t nd = 0;
    enum MHD_Result rc;
    if (!o || !ms) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto out;
    }
    if (ft && *ft) {
        rc = send_error(c, 400, NULL, "filter: kilnd lists every Model (no filter is read)");
        goto out;
    }
    if (pt && *pt && kiln_store_page_after(d->store, project, "models", pt, &after) != KILN_OK) {
        rc = send_error(c, 400, NULL,
                        "pageToken: not a page token this server returned for this list");
        goto out;
    }
    if (!(pt && *pt)) {
        if (kiln_store_doc_list(d->store, MODEL_DOC, project, &docs, &nd) != KILN_OK) {
            rc = send_error(c, 500, NULL, "store: cannot list");
            goto out;
        }
        for (size_t i = 0; i < nd; i++) {
            json_t *m = upload_json(project, location, docs[i].name, docs[i].json);
            if (m) json_array_append_new(ms, m);
        }
    }
    next = after;
    for (int round = 0; round < 32 && json_array_size(ms) < 100; round++) {
        kiln_job_record **v = NULL;
        size_t n = 0;
        int64_t nx = 0;
        if (kiln_store_job_list(d->store, project, NULL, next, 100, &v, &n, &nx) != KILN_OK) {
            rc = send_error(c, 500, NULL, "store: cannot list");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *m = model_json(project, location, v[i]);
            if (m) json_array_append_new(ms, m);
        }
        kiln_job_records_free(v, n);
        next = nx;
        if (!nx) break;
    }
    if (json_array_size(ms)) json_object_set(o, "models", ms);
    if (next) {
        char tok[KILN_STORE_TOKEN_LEN];
        kiln_store_page_token(d->store, project, "models", next, tok);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    rc = send_json(c, 200, o);
    o = NULL;
out:
    kiln_store_docs_free(docs, nd);
    json_decref(o);
    json_decref(ms);
    return rc;
}

/* held from an upload's "is the id free" to its put, so that two uploads
 * of one modelId cannot both succeed */
static pthread_mutex_t upload_mu = PTHREAD_MUTEX_INITIALIZER;

/* POST models:upload (an UploadModelRequest): the Model is kept as sent
 * (kiln_vertex_upload_parse refuses what kiln would not act on), its
 * artifactUri a directory of objects in a bucket kilnd holds; its id
 * modelId (409 ALREADY_EXISTS when taken) or a new number. Answers a
 * done Operation whose response is the UploadModelResponse. */
static enum MHD_Result model_upload(kilnd *d, struct MHD_Connection *c, const char *project,
                                    const char *location, const kiln_api_req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_vertex_upload u = {0};
    json_t *m = NULL;
    char *doc = NULL, low[256], id[64], t[32], name[512];
    bool locked = false;
    enum MHD_Result rc;

    if (kiln__api_disk_low(d, low, sizeof low)) {
        rc = send_error(c, 503, NULL, "%s", low);
        goto out;
    }
    if (rq->len == 0) {
        rc = send_error(c, 400, NULL, "The request body is empty: send an UploadModelRequest");
        goto out;
    }
    kiln_err err = kiln_vertex_upload_parse(rq->body, rq->len, &u, &dg);
    if (err == KILN_OK && u.artifact_uri)
        kiln__api_storage_check_prefix(d, project, u.artifact_uri, "model.artifactUri", &dg);
    if (err != KILN_OK || dg.n) {
        if (err == KILN_ENOMEM)
            rc = send_error(c, 500, NULL, "out of memory");
        else if (dg.n && dg.v[0].field && dg.v[0].field[0])
            rc = send_error(c, 400, &dg, "Field: %s Error: %s", dg.v[0].field, dg.v[0].description);
        else
            rc = send_error(c, 400, &dg, "The request body is not a valid UploadModelRequest: %s",
                            dg.n ? dg.v[0].description : kiln_err_str(err));
        goto out;
    }
    kiln_format_time(kiln_now_ns(), t);
    m = json_loads(u.model, 0, NULL);
    if (!m || json_object_set_new(m, "createTime", json_string(t)) != 0 ||
        !(doc = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS))) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto out;
    }
    pthread_mutex_lock(&upload_mu);
    locked = true;
    if (u.model_id) {
        snprintf(id, sizeof id, "%s", u.model_id);
        json_t *had = model_find(d, project, location, id);
        if (had) {
            json_decref(had);
            rc = send_error_st(c, 409, "ALREADY_EXISTS", NULL,
                               "Model projects/%s/locations/%s/models/%s already exists", project,
                               location, id);
            goto out;
        }
    } else {
        /* a new number no Model has (a clash is one in 8e18) */
        json_t *had = NULL;
        for (int tries = 0; tries < 4; tries++) {
            json_decref(had);
            new_id(id);
            if (!(had = model_find(d, project, location, id))) break;
        }
        if (had) {
            json_decref(had);
            rc = send_error(c, 500, NULL, "no free Model id");
            goto out;
        }
    }
    if ((err = kiln_store_doc_put(d->store, MODEL_DOC, project, id, doc)) != KILN_OK) {
        rc = send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
        goto out;
    }
    pthread_mutex_unlock(&upload_mu);
    locked = false;
    snprintf(name, sizeof name, "projects/%s/locations/%s/models/%s", project, location, id);
    json_t *resp = json_pack("{s:s,s:s,s:s}", "@type",
                             "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
                             "model", name, "modelVersionId", "1");
    rc = send_json(c, 200,
                   new_operation(project, location, t, "UploadModelOperationMetadata", resp));
out:
    if (locked) pthread_mutex_unlock(&upload_mu);
    free(doc);
    json_decref(m);
    kiln_vertex_upload_clear(&u);
    kiln_diag_free(&dg);
    return rc;
}

/* DELETE models/ID: an uploaded Model's document goes (its artifact
 * objects stay, as on Vertex); a pipeline's Model is its pipeline's
 * output, so deleting it is deleting the pipeline (refused here). */
static enum MHD_Result model_delete(kilnd *d, struct MHD_Connection *c, const char *project,
                                    const char *location, const char *id)
{
    char *doc = NULL, t[40];
    pthread_mutex_lock(&upload_mu);
    kiln_err err = kiln_store_doc_get(d->store, MODEL_DOC, project, id, &doc);
    if (err == KILN_OK) err = kiln_store_doc_put(d->store, MODEL_DOC, project, id, NULL);
    pthread_mutex_unlock(&upload_mu);
    free(doc);
    if (err == KILN_OK) {
        now_time(t);
        return send_json(c, 200,
                         new_operation(project, location, t, "DeleteOperationMetadata", NULL));
    }
    if (err != KILN_ENOTFOUND) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    json_t *m = model_find(d, project, location, id);
    if (!m)
        return send_error(c, 404, NULL, "Model projects/%s/locations/%s/models/%s not found",
                          project, location, id);
    json_decref(m);
    return send_error_st(c, 400, "FAILED_PRECONDITION", NULL,
                         "Model %s is the output of trainingPipelines/%s: delete the "
                         "pipeline, and the Model goes with it",
                         id, id);
}

/* models/...: get, list, upload, delete */
static enum MHD_Result models(kilnd *d, struct MHD_Connection *c, const char *method,
                              const char *project, const char *location, const char *tail,
                              const kiln_api_req *rq)
{
    if (!*tail || strcmp(tail, "/") == 0) {
        if (strcmp(method, "GET") == 0) return model_list(d, c, project, location);
        return send_error(c, 405, NULL, "use GET on models");
    }
    if (strcmp(tail, ":upload") == 0) {
        if (strcmp(method, "POST") == 0) return model_upload(d, c, project, location, rq);
        return send_error(c, 405, NULL, "use POST on models:upload");
    }
    const char *j = tail + 1;
    size_t il = strcspn(j, "@:");
    char id[64];
    if (*tail != '/' || !(valid_id(j, il) || kiln_vertex_model_id_valid(j, il)) ||
        (j[il] == '@' && strcmp(j + il, "@1") != 0 && strcmp(j + il, "@default") != 0) ||
        j[il] == ':')
        return send_error(c, 404, NULL, "Model projects/%s/locations/%s/models/%.64s not found",
                          project, location, j);
    memcpy(id, j, il);
    id[il] = '\0';
    if (strcmp(method, "GET") == 0) return model_get(d, c, project, location, id);
    if (strcmp(method, "DELETE") == 0) return model_delete(d, c, project, location, id);
    return send_error(c, 405, NULL, "use GET or DELETE on a Model");
}

/* ---------- dispatch ---------- */

static bool valid_location(const char *s, size_t n)
{
    if (n == 0 || n > 63) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

/* A CustomJob id: digits only (Vertex's ids are numbers). */
static bool valid_id(const char *s, size_t n)
{
    if (n == 0 || n > 20) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

enum MHD_Result kiln__api_vertex(kilnd *d, struct MHD_Connection *c, const char *method,
                                 const char *project, const char *rest, const kiln_api_req *rq,
                                 const kiln_api_auth *a)
{
    char location[64], id[24];
    const char *sl = strchr(rest, '/');
    size_t ll = sl ? (size_t)(sl - rest) : strlen(rest);
    if (!valid_location(rest, ll))
        return send_error(c, 404, NULL, "no such location: '%.64s'", rest);
    memcpy(location, rest, ll);
    location[ll] = '\0';
    if (!alt_ok(c)) return send_error(c, 400, NULL, "kilnd answers in JSON only (alt=json)");
    bool write = strcmp(method, "GET") != 0;
    if (write && a->role != KILN_AUTH_EDITOR)
        return send_error(c, 403, NULL, "Permission denied: a viewer token cannot change jobs");
    const char *coll = sl ? sl + 1 : "";
    const char *tail = NULL;
    const vx_kind *k = NULL;
    bool is_ops = false;
    size_t cl;
    if ((cl = strlen(CJ.coll), strncmp(coll, CJ.coll, cl) == 0) &&
        (coll[cl] == '\0' || coll[cl] == '/')) {
        k = &CJ;
        tail = coll + cl;
    } else if ((cl = strlen(HPT.coll), strncmp(coll, HPT.coll, cl) == 0) &&
               (coll[cl] == '\0' || coll[cl] == '/')) {
        k = &HPT;
        tail = coll + cl;
    } else if ((cl = strlen(TP.coll), strncmp(coll, TP.coll, cl) == 0) &&
               (coll[cl] == '\0' || coll[cl] == '/')) {
        k = &TP;
        tail = coll + cl;
    } else if (strncmp(coll, "models", 6) == 0 &&
               (coll[6] == '\0' || coll[6] == '/' || coll[6] == ':')) {
        return models(d, c, method, project, location, coll + 6, rq);
    } else if (strncmp(coll, "operations/", 11) == 0) {
        tail = coll + 10;
        is_ops = true;
    } else {
        return send_error(
            c, 404, NULL,
            "no such resource under projects/%s/locations/%s: '%.64s' (kilnd "
            "serves customJobs, hyperparameterTuningJobs, trainingPipelines, models and "
            "operations)",
            project, location, coll);
    }
    if (!*tail || strcmp(tail, "/") == 0) {
        if (is_ops) return send_error(c, 404, NULL, "kilnd lists no operations");
        if (strcmp(method, "POST") == 0) return cj_create(k, d, c, project, location, rq);
        if (strcmp(method, "GET") == 0) return cj_list(k, d, c, project, location);
        return send_error(c, 405, NULL, "use GET or POST on %s", k->coll);
    }
    const char *j = tail + 1, *colon = strchr(j, ':');
    size_t il = colon ? (size_t)(colon - j) : strlen(j);
    if (!valid_id(j, il))
        return send_error(c, 404, NULL, "%s projects/%s/locations/%s/%s/%.*s not found",
                          is_ops ? "Operation" : k->what, project, location,
                          is_ops ? "operations" : k->coll, (int)(il > 64 ? 64 : il), j);
    memcpy(id, j, il);
    id[il] = '\0';
    if (is_ops) {
        if (!colon && strcmp(method, "GET") == 0) return op_get(c, project, location, id);
        return send_error(c, 405, NULL, "use GET on an operation");
    }
    if (!colon) {
        enum MHD_Result rc;
        if (strcmp(method, "DELETE") == 0) return cj_delete(k, d, c, project, location, id);
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET or DELETE");
        kiln_job_record *r = get_vx(k, d, c, project, location, id, &rc);
        if (!r) return rc;
        rc = send_json(c, 200, resource_json(k, project, location, r, enum_ints(c)));
        kiln_job_record_free(r);
        return rc;
    }
    if (strcmp(colon, ":cancel") == 0 && strcmp(method, "POST") == 0)
        return cj_cancel(k, d, c, project, location, id);
    return send_error(c, 404, NULL, "unknown %s method '%.40s' for %s", k->what, colon, method);
}
