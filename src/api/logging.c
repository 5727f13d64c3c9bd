/* src/api/logging.c - the Cloud Logging v2 subset gcloud uses:
 * POST /v2/entries:list, over the jobs' logs (DATA/jobs/P/J/log.tsv).
 *
 * Every line of a job's log is one LogEntry, shaped as AI Platform's are
 * (resource ml_job with job_id, task_name, project_id; jsonPayload.message).
 * Its insertId is the line's byte offset in log.tsv, zero-padded so that
 * string order is file order, plus the job id: stable across polls, so that
 * gcloud's stream (which resumes after the last timestamp + insertId it saw)
 * never repeats or drops a line. Entries are ordered by (timestamp,
 * insertId); a page token is the key of the last entry returned. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_int.h"
#include "util/logfilter.h"
#include "util/utf8.h"

#define PAGE_DEFAULT  50
#define PAGE_MAX      1000 /* Logging's own maximum */
#define BODY_MAX      (64u * 1024u)
#define PROJECTS_MAX  1
#define INSERT_ID_MAX 96

typedef struct ent {
    int64_t ts;
    char insert_id[INSERT_ID_MAX];
    char severity[16];
    char *job, *task, *msg;
} ent;

/* The best `cap` entries seen so far, in the requested order. */
typedef struct page {
    ent **v;
    size_t n, cap;
    bool desc;
    size_t more; /* matches that did not fit */
    int64_t after_ts;
    char after_id[INSERT_ID_MAX];
    bool has_after;
} page;

static void ent_free(ent *e)
{
    if (!e) return;
    free(e->job);
    free(e->task);
    free(e->msg);
    free(e);
}

/* <0 when a comes first in ascending order */
static int key_cmp(int64_t ts_a, const char *id_a, int64_t ts_b, const char *id_b)
{
    if (ts_a != ts_b) return ts_a < ts_b ? -1 : 1;
    return strcmp(id_a, id_b);
}

/* Whether an entry with this key belongs before `e` in the page's order. */
static bool before(const page *pg, int64_t ts, const char *id, const ent *e)
{
    int c = key_cmp(ts, id, e->ts, e->insert_id);
    return pg->desc ? c > 0 : c < 0;
}

/* Offers one matching line; copies it only when it makes the page. */
static bool page_offer(page *pg, int64_t ts, const char *id, const char *sev, const char *job,
                       const char *task, const char *msg)
{
    if (pg->has_after) {
        int c = key_cmp(ts, id, pg->after_ts, pg->after_id);
        if (pg->desc ? c >= 0 : c <= 0) return true; /* on an earlier page */
    }
    if (pg->n == pg->cap && !before(pg, ts, id, pg->v[pg->n - 1])) {
        pg->more++;
        return true;
    }
    ent *e = calloc(1, sizeof *e);
    if (!e) return false;
    e->ts = ts;
    snprintf(e->insert_id, sizeof e->insert_id, "%s", id);
    snprintf(e->severity, sizeof e->severity, "%s", sev);
    e->job = strdup(job);
    e->task = strdup(task);
    e->msg = strdup(msg);
    if (!e->job || !e->task || !e->msg) {
        ent_free(e);
        return false;
    }
    if (pg->n == pg->cap) {
        ent_free(pg->v[--pg->n]);
        pg->more++;
    }
    size_t i = pg->n;
    while (i > 0 && before(pg, ts, id, pg->v[i - 1]))
        i--;
    memmove(pg->v + i + 1, pg->v + i, (pg->n - i) * sizeof *pg->v);
    pg->v[i] = e;
    pg->n++;
    return true;
}

/* Reads one job's log.tsv and offers every line that matches. */
static bool scan_job(kilnd *d, const char *project, const char *job, const kiln_log_filter *f,
                     page *pg)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], log_name[128], id[INSERT_ID_MAX];
    char *line = NULL;
    size_t cap = 0;
    bool ok = true;

    kiln_jobfiles_dir(d->jobfiles, project, job, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    FILE *fp = fopen(path, "re");
    if (!fp) return true; /* no log yet: no entries */
    /* a CustomJob's entries carry its Vertex id, the number (api_vertex.c) */
    const char *shown = strncmp(job, "customjob_", 10) == 0     ? job + 10
                        : strncmp(job, "hptuningjob_", 12) == 0 ? job + 12
                                                                : job;
    long long off = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, fp)) > 0) {
        long long at = off;
        off += n;
        if (line[n - 1] != '\n') break; /* a line still being written */
        line[n - 1] = '\0';
        char *fld[4] = {0}, *save = NULL;
        fld[0] = strtok_r(line, "\t", &save);
        fld[1] = fld[0] ? strtok_r(NULL, "\t", &save) : NULL;
        fld[2] = fld[1] ? strtok_r(NULL, "\t", &save) : NULL;
        fld[3] = fld[2] ? strtok_r(NULL, "", &save) : NULL;
        int64_t ts;
        if (!fld[2] || !kiln_rfc3339_parse(fld[1], &ts)) continue;
        int sev = kiln_log_severity(fld[0]);
        if (sev < 0) sev = 0;
        kiln__utf8_scrub(fld[2]);
        snprintf(id, sizeof id, "%020lld-%s", at, job);
        snprintf(log_name, sizeof log_name, "projects/%s/logs/%.60s", project, fld[2]);
        kiln_log_view v = {.resource_type = "ml_job",
                           .job_id = shown,
                           .task_name = fld[2],
                           .project_id = project,
                           .log_name = log_name,
                           .insert_id = id,
                           .severity = sev,
                           .ts_ns = ts};
        if (!kiln_log_filter_match(f, &v)) continue;
        if (fld[3]) kiln__utf8_scrub(fld[3]);
        if (!page_offer(pg, ts, id, sev ? fld[0] : "DEFAULT", shown, fld[2],
                        fld[3] ? fld[3] : "")) {
            ok = false;
            break;
        }
    }
    free(line);
    fclose(fp);
    return ok;
}

static json_t *entry_json(const char *project, const ent *e)
{
    char ts[48], log_name[320];
    time_t sec = (time_t)(e->ts / 1000000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t k = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + k, sizeof ts - k, ".%09dZ", (int)(e->ts % 1000000000));
    snprintf(log_name, sizeof log_name, "projects/%s/logs/%.60s", project, e->task);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:s,s:{s:s,s:s,s:s}},s:{s:s}}", "insertId",
                     e->insert_id, "logName", log_name, "severity", e->severity, "timestamp", ts,
                     "receiveTimestamp", ts, "resource", "type", "ml_job", "labels", "job_id",
                     e->job, "task_name", e->task, "project_id", project, "jsonPayload", "message",
                     e->msg);
}

/* The request's fields, each checked; the first problem goes to dg. */
static bool parse_request(json_t *body, char project[64], const char **ft, page *pg, kiln_diag *dg)
{
    const char *key;
    json_t *v;
    if (!json_is_object(body)) {
        kiln_diag_add(dg, "", "the body must be a JSON object (ListLogEntriesRequest)");
        return false;
    }
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "filter") == 0) {
            if (!json_is_string(v)) kiln_diag_add(dg, "filter", "must be a string");
            *ft = json_string_value(v);
        } else if (strcmp(key, "orderBy") == 0) {
            const char *o = json_string_value(v);
            if (o && (strcmp(o, "timestamp desc") == 0 || strcmp(o, "timestamp DESC") == 0))
                pg->desc = true;
            else if (!o || (*o && strcmp(o, "timestamp asc") != 0 &&
                            strcmp(o, "timestamp ASC") != 0 && strcmp(o, "timestamp") != 0))
                kiln_diag_add(dg, "orderBy", "kiln orders by 'timestamp asc' or 'timestamp desc'");
        } else if (strcmp(key, "pageSize") == 0) {
            long long ps = -1;
            if (json_is_integer(v)) ps = json_integer_value(v);
            if (json_is_string(v)) {
                char *end;
                errno = 0;
                ps = strtoll(json_string_value(v), &end, 10);
                if (errno || *end) ps = -1;
            }
            if (ps < 0) kiln_diag_add(dg, "pageSize", "must be a number from 0 to %d", PAGE_MAX);
            if (ps > 0) pg->cap = ps > PAGE_MAX ? PAGE_MAX : (size_t)ps;
        } else if (strcmp(key, "pageToken") == 0) {
            const char *t = json_string_value(v);
            char *end = NULL;
            if (t && *t) {
                errno = 0;
                pg->after_ts = t[0] == 't' ? strtoll(t + 1, &end, 10) : 0;
                pg->has_after = t[0] == 't' && !errno && end && *end == '.' &&
                                strlen(end + 1) < INSERT_ID_MAX && end[1];
                if (pg->has_after)
                    snprintf(pg->after_id, INSERT_ID_MAX, "%s", end + 1);
                else
                    kiln_diag_add(dg, "pageToken", "not a page token this server returned");
            }
        } else if (strcmp(key, "resourceNames") == 0) {
            size_t i;
            json_t *r;
            if (!json_is_array(v) || json_array_size(v) == 0)
                kiln_diag_add(dg, "resourceNames", "must list one 'projects/PROJECT'");
            else if (json_array_size(v) > PROJECTS_MAX)
                kiln_diag_add(dg, "resourceNames", "kiln reads one project per request (got %zu)",
                              json_array_size(v));
            json_array_foreach(v, i, r)
            {
                const char *s = json_string_value(r);
                if (!s || strncmp(s, "projects/", 9) != 0 ||
                    !kiln__api_valid_name(s + 9, strlen(s + 9))) {
                    kiln_diag_add(dg, "resourceNames",
                                  "kiln serves 'projects/PROJECT' only (got '%.80s')", s ? s : "");
                    break;
                }
                snprintf(project, 64, "%s", s + 9);
            }
        } else {
            kiln_diag_add(dg, key, "'%.60s' is not served by kiln's entries.list", key);
        }
    }
    if (!dg->n && !project[0])
        kiln_diag_add(dg, "resourceNames", "must list one 'projects/PROJECT'");
    return dg->n == 0;
}

static enum MHD_Result entries_list(kilnd *d, struct MHD_Connection *c, const kiln_api_req *rq,
                                    const kiln_api_auth *a)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_log_filter *f = NULL;
    json_t *body = NULL;
    page pg = {.cap = PAGE_DEFAULT};
    char project[64] = "";
    const char *ft = NULL;
    DIR *dir = NULL;
    enum MHD_Result rc;

    if (rq->len > BODY_MAX) {
        rc = send_error(c, 413, NULL, "The request body is larger than %u bytes", BODY_MAX);
        goto out;
    }
    body = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, NULL);
    if (!parse_request(body, project, &ft, &pg, &dg)) {
        rc = send_error(c, 400, &dg, "Invalid entries.list request: %s: %s", dg.v[0].field,
                        dg.v[0].description);
        goto out;
    }
    if (!kiln__api_sees(a, project)) { /* as for jobs: nothing about other projects */
        kiln__api_note_hidden();
        rc = send_error(c, 404, NULL, "Project %s not found", project);
        goto out;
    }
    if (ft && kiln_log_filter_parse(ft, &f, &dg) != KILN_OK) {
        rc = send_error(c, 400, &dg, "Invalid filter: %s",
                        dg.n ? dg.v[0].description : "cannot parse");
        goto out;
    }
    pg.v = calloc(pg.cap, sizeof *pg.v);
    if (!pg.v) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto out;
    }
    bool ok = true;
    const char *job = kiln_log_filter_job(f);
    if (job) {
        /* a number is a CustomJob's id: its kiln job is customjob_N */
        char cj[96];
        bool num = *job && strspn(job, "0123456789") == strlen(job) && strlen(job) < 64;
        if (num) {
            snprintf(cj, sizeof cj, "customjob_%s", job);
            ok = scan_job(d, project, cj, f, &pg);
            snprintf(cj, sizeof cj, "hptuningjob_%s", job);
            if (ok) ok = scan_job(d, project, cj, f, &pg);
        } else if (kiln__api_valid_name(job, strlen(job)))
            ok = scan_job(d, project, job, f, &pg);
    } else {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/jobs/%s", d->data_dir, project);
        dir = opendir(path);
        for (struct dirent *de; ok && dir && (de = readdir(dir));)
            if (kiln__api_valid_name(de->d_name, strlen(de->d_name)))
                ok = scan_job(d, project, de->d_name, f, &pg);
    }
    if (!ok) {
        rc = send_error(c, 500, NULL, "out of memory reading the logs");
        goto out;
    }
    json_t *o = json_object(), *arr = json_array();
    for (size_t i = 0; o && arr && i < pg.n; i++)
        json_array_append_new(arr, entry_json(project, pg.v[i]));
    if (o && arr && pg.n) json_object_set(o, "entries", arr);
    json_decref(arr);
    if (o && pg.more && pg.n) {
        char tok[32 + INSERT_ID_MAX];
        const ent *last = pg.v[pg.n - 1];
        snprintf(tok, sizeof tok, "t%" PRId64 ".%s", last->ts, last->insert_id);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    rc = send_json(c, 200, o);
out:
    if (dir) closedir(dir);
    for (size_t i = 0; i < pg.n; i++)
        ent_free(pg.v[i]);
    free(pg.v);
    kiln_log_filter_free(f);
    json_decref(body);
    kiln_diag_free(&dg);
    return rc;
}

enum MHD_Result kiln__api_logging(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *rest, const kiln_api_req *rq, const kiln_api_auth *a)
{
    if (strcmp(rest, "entries:list") != 0)
        return send_error(c, 404, NULL,
                          "no such Logging resource: /v2/%.100s (kiln serves entries:list)", rest);
    if (strcmp(method, "POST") != 0)
        return send_error(c, 405, NULL, "use POST on /v2/entries:list");
    return entries_list(d, c, rq, a);
}
