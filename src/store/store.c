/* src/store/store.c - jobs and node cordons in SQLite (see kiln/store.h).
 *
 * The Job's input fields live in `spec` as the Job JSON (kiln_job_to_json,
 * output fields cleared); the output fields live in their own columns, so a
 * state change is one conditional UPDATE and never rewrites the spec. */
#include "kiln/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A read-only connection per reading thread (WAL readers do not block each
 * other or the writer): the hot GET path needs no lock of the store's. */
typedef struct reader {
    sqlite3 *db;
    sqlite3_stmt *version; /* prepared once */
} reader;

struct kiln_store {
    sqlite3 *db;
    pthread_mutex_t mu;
    char *path;
    pthread_key_t key; /* -> reader of the calling thread */
    reader **readers;  /* every reader, closed with the store (guarded by mu) */
    size_t n_readers;
    kiln_store_write_stats wstats; /* guarded by mu */
};

const double kiln_store_write_bounds[KILN_STORE_WRITE_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Counts one write that started at t0 (mono_ns); called with mu held. */
static void note_write(kiln_store *s, int64_t t0)
{
    double secs = (double)(mono_ns() - t0) / 1e9;
    s->wstats.count++;
    s->wstats.sum_seconds += secs;
    for (int i = 0; i < KILN_STORE_WRITE_BUCKETS; i++)
        if (secs <= kiln_store_write_bounds[i]) s->wstats.le[i]++;
}

void kiln_store_write_stats_get(kiln_store *s, kiln_store_write_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->wstats;
    pthread_mutex_unlock(&s->mu);
}

kiln_err kiln_store_job_counts(kiln_store *s, int64_t counts[KILN_STORE_STATES])
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    int rc;

    memset(counts, 0, sizeof(int64_t) * KILN_STORE_STATES);
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, "SELECT state, COUNT(*) FROM jobs GROUP BY state", -1, &st,
                           NULL) != SQLITE_OK)
        goto out;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int state = sqlite3_column_int(st, 0);
        if (state >= 0 && state < KILN_STORE_STATES) counts[state] = sqlite3_column_int64(st, 1);
    }
    if (rc == SQLITE_DONE) err = KILN_OK;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS jobs("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " project TEXT NOT NULL, job_id TEXT NOT NULL, spec TEXT NOT NULL,"
    " state INTEGER NOT NULL, priority INTEGER NOT NULL,"
    " create_ns INTEGER NOT NULL, start_ns INTEGER NOT NULL DEFAULT 0,"
    " end_ns INTEGER NOT NULL DEFAULT 0, error TEXT, version INTEGER NOT NULL DEFAULT 1,"
    " restarts INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, runtime TEXT,"
    " UNIQUE(project, job_id));"
    "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(state, priority DESC, create_ns);"
    "CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, cordoned INTEGER NOT NULL);";

#define JOB_COLS                                                                                   \
    "seq, project, job_id, spec, state, priority, create_ns, start_ns, end_ns, error, version,"    \
    " restarts, failures, runtime"

int64_t kiln_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kiln_format_time(int64_t ns, char buf[32])
{
    time_t sec = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(buf, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, 32 - n, ".%03dZ", (int)((ns / 1000000) % 1000));
}

kiln_err kiln_store_open(const char *path, kiln_store **out, kiln_diag *d)
{
    kiln_store *s = calloc(1, sizeof *s);
    char *msg = NULL;
    kiln_err err = KILN_EIO;

    *out = NULL;
    if (!s) return KILN_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_key_create(&s->key, NULL) != 0 || !(s->path = strdup(path))) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return KILN_ENOMEM;
    }
    int rc = sqlite3_open_v2(
        path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        kiln_diag_add(d, "--data-dir", "cannot open the store '%s': %s", path,
                      s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto out;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /* WAL. Every commit is in the OS before the call returns, so it survives
     * kill -9 of kilnd; creates are also fsynced (synchronous=FULL around
     * them) so an acknowledged job survives a power cut too. The supervisor's
     * state changes run with NORMAL: after a power cut the newest of them may
     * be lost, which reconcile treats like any crash (the job is requeued). */
    rc = sqlite3_exec(s->db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                      NULL, NULL, &msg);
    if (rc == SQLITE_OK) rc = sqlite3_exec(s->db, schema, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        kiln_diag_add(d, "--data-dir", "cannot initialise the store '%s': %s", path,
                      msg ? msg : sqlite3_errstr(rc));
        goto out;
    }
    err = KILN_OK;
out:
    sqlite3_free(msg);
    if (err != KILN_OK) {
        kiln_store_close(s);
        s = NULL;
    }
    *out = s;
    return err;
}

void kiln_store_close(kiln_store *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_readers; i++) {
        sqlite3_finalize(s->readers[i]->version);
        sqlite3_close(s->readers[i]->db);
        free(s->readers[i]);
    }
    free(s->readers);
    pthread_key_delete(s->key);
    free(s->path);
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void kiln_job_record_free(kiln_job_record *r)
{
    if (!r) return;
    free(r->project);
    kiln_job_free(r->job);
    free(r->runtime);
    free(r);
}

void kiln_job_records_free(kiln_job_record **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kiln_job_record_free(v[i]);
    free(v);
}

static char *dup_col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

/* The row under `st` (selected with JOB_COLS) as a record. */
static kiln_err row_to_record(sqlite3_stmt *st, kiln_job_record **out)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job_record *r = calloc(1, sizeof *r);
    kiln_err err = KILN_ENOMEM;
    char buf[32];

    *out = NULL;
    if (!r) goto out;
    r->seq = sqlite3_column_int64(st, 0);
    r->project = dup_col(st, 1);
    const char *spec = (const char *)sqlite3_column_text(st, 3);
    if (!r->project || !spec) goto out;
    err = kiln_job_from_json(spec, strlen(spec), &r->job, &d);
    if (err != KILN_OK) {
        /* the store only holds what kiln_job_to_json wrote: a bug or a codec change */
        err = KILN_EINTERNAL;
        goto out;
    }
    err = KILN_ENOMEM;
    kiln_job *j = r->job;
    j->state = (kiln_job_state)sqlite3_column_int(st, 4);
    r->priority = sqlite3_column_int64(st, 5);
    r->create_ns = sqlite3_column_int64(st, 6);
    r->start_ns = sqlite3_column_int64(st, 7);
    int64_t end_ns = sqlite3_column_int64(st, 8);
    r->end_ns = end_ns;
    kiln_format_time(r->create_ns, buf);
    if (kiln_set_str(&j->create_time, buf) != KILN_OK) goto out;
    if (r->start_ns) {
        kiln_format_time(r->start_ns, buf);
        if (kiln_set_str(&j->start_time, buf) != KILN_OK) goto out;
    }
    if (end_ns) {
        kiln_format_time(end_ns, buf);
        if (kiln_set_str(&j->end_time, buf) != KILN_OK) goto out;
    }
    const char *emsg = (const char *)sqlite3_column_text(st, 9);
    if (kiln_set_str(&j->error_message, emsg) != KILN_OK) goto out;
    r->version = sqlite3_column_int64(st, 10);
    snprintf(buf, sizeof buf, "%llx-%llx", (unsigned long long)r->seq,
             (unsigned long long)r->version);
    if (kiln_set_str(&j->etag, buf) != KILN_OK) goto out;
    r->restarts = sqlite3_column_int(st, 11);
    r->failures = sqlite3_column_int(st, 12);
    if (sqlite3_column_type(st, 13) != SQLITE_NULL && !(r->runtime = dup_col(st, 13))) goto out;
    err = KILN_OK;
out:
    kiln_diag_free(&d);
    if (err != KILN_OK) {
        kiln_job_record_free(r);
        r = NULL;
    }
    *out = r;
    return err;
}

/* The Job JSON kept in `spec`: input fields only. */
static char *spec_json(const kiln_job *job)
{
    kiln_job *c = kiln_job_clone(job);
    char *s = NULL;
    if (!c) return NULL;
    c->state = KILN_STATE_UNSPECIFIED;
    kiln_set_str(&c->create_time, NULL);
    kiln_set_str(&c->start_time, NULL);
    kiln_set_str(&c->end_time, NULL);
    kiln_set_str(&c->error_message, NULL);
    kiln_set_str(&c->etag, NULL);
    s = kiln_job_to_json(c, KILN_ENC_COMPACT);
    kiln_job_free(c);
    return s;
}

/* Runs a prepared single-row lookup and converts it. Caller holds the lock. */
static kiln_err get_locked(kiln_store *s, const char *project, const char *job_id,
                           kiln_job_record **out)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    *out = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT " JOB_COLS " FROM jobs WHERE project = ?1 AND job_id = ?2", -1,
                           &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        err = KILN_ENOTFOUND;
        goto out;
    }
    if (rc != SQLITE_ROW) goto out;
    err = row_to_record(st, out);
out:
    sqlite3_finalize(st);
    return err;
}

kiln_err kiln_store_job_create(kiln_store *s, const char *project, const kiln_job *job,
                               int64_t now_ns, kiln_job_record **out)
{
    sqlite3_stmt *st = NULL;
    char *spec = spec_json(job);
    kiln_err err = KILN_ENOMEM;
    int64_t prio = job->training_input.has_scheduling ? job->training_input.scheduling.priority : 0;

    if (out) *out = NULL;
    if (!spec) return KILN_ENOMEM;
    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    err = KILN_EIO;
    if (sqlite3_exec(s->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK) goto out;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO jobs(project, job_id, spec, state, priority, create_ns)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job->job_id ? job->job_id : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, spec, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, KILN_STATE_QUEUED);
    sqlite3_bind_int64(st, 5, prio);
    sqlite3_bind_int64(st, 6, now_ns);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT) {
        err = KILN_EEXIST;
        goto out;
    }
    if (rc != SQLITE_DONE) goto out;
    err = out ? get_locked(s, project, job->job_id, out) : KILN_OK;
out:
    sqlite3_finalize(st);
    sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    free(spec);
    return err;
}

kiln_err kiln_store_job_get(kiln_store *s, const char *project, const char *job_id,
                            kiln_job_record **out)
{
    pthread_mutex_lock(&s->mu);
    kiln_err err = get_locked(s, project, job_id, out);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_job_transition(kiln_store *s, const char *project, const char *job_id,
                                   unsigned from_mask, kiln_job_state to, const char *error,
                                   int64_t now_ns, kiln_job_state *was)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    bool terminal = (KILN_STATES_TERMINAL >> to) & 1u;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    /* The state test is in the WHERE clause: compare-and-set in one statement. */
    if (sqlite3_prepare_v2(
            s->db,
            "UPDATE jobs SET state = ?3, version = version + 1,"
            " start_ns = CASE WHEN ?3 = ?7 AND start_ns = 0 THEN ?5 ELSE start_ns END,"
            " end_ns = CASE WHEN ?6 THEN ?5 ELSE end_ns END,"
            " error = CASE WHEN ?4 IS NULL THEN error ELSE ?4 END"
            " WHERE project = ?1 AND job_id = ?2 AND ((1 << state) & ?8) != 0",
            -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, to);
    if (error)
        sqlite3_bind_text(st, 4, error, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, now_ns);
    sqlite3_bind_int(st, 6, terminal);
    sqlite3_bind_int(st, 7, KILN_STATE_RUNNING);
    sqlite3_bind_int64(st, 8, from_mask);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    if (sqlite3_changes(s->db) == 1) {
        err = KILN_OK;
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT state FROM jobs WHERE project = ?1 AND job_id = ?2", -1,
                           &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (was) *was = (kiln_job_state)sqlite3_column_int(st, 0);
        err = KILN_ECONFLICT;
    } else if (rc == SQLITE_DONE) {
        err = KILN_ENOTFOUND;
    }
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_job_set_labels(kiln_store *s, const char *project, const char *job_id,
                                   const kiln_map *labels, kiln_job_record **out)
{
    kiln_job_record *r = NULL;
    sqlite3_stmt *st = NULL;
    char *spec = NULL;
    kiln_err err;

    if (out) *out = NULL;
    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    err = get_locked(s, project, job_id, &r);
    if (err != KILN_OK) goto out;
    err = KILN_ENOMEM;
    kiln_map_clear(&r->job->labels);
    for (size_t i = 0; i < labels->n; i++)
        if (kiln_map_set(&r->job->labels, labels->keys[i], labels->vals[i]) != KILN_OK) goto out;
    if (!(spec = spec_json(r->job))) goto out;
    err = KILN_EIO;
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE jobs SET spec = ?3, version = version + 1"
                           " WHERE project = ?1 AND job_id = ?2",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, spec, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    err = out ? get_locked(s, project, job_id, out) : KILN_OK;
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    kiln_job_record_free(r);
    free(spec);
    return err;
}

kiln_err kiln_store_job_set_runtime(kiln_store *s, const char *project, const char *job_id,
                                    int restarts, int failures, const char *runtime)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE jobs SET restarts = ?3, failures = ?4, runtime = ?5,"
                           " version = version + 1 WHERE project = ?1 AND job_id = ?2",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, restarts);
    sqlite3_bind_int(st, 4, failures);
    if (runtime)
        sqlite3_bind_text(st, 5, runtime, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 5);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    err = sqlite3_changes(s->db) == 1 ? KILN_OK : KILN_ENOTFOUND;
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_job_position(kiln_store *s, const kiln_job_record *r, int64_t *pos)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    *pos = 0;
    if (r->job->state != KILN_STATE_QUEUED) return KILN_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT COUNT(*) FROM jobs WHERE state = ?1 AND (priority > ?2 OR"
                           " (priority = ?2 AND (create_ns < ?3 OR"
                           " (create_ns = ?3 AND seq < ?4))))",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_int(st, 1, KILN_STATE_QUEUED);
    sqlite3_bind_int64(st, 2, r->priority);
    sqlite3_bind_int64(st, 3, r->create_ns);
    sqlite3_bind_int64(st, 4, r->seq);
    if (sqlite3_step(st) != SQLITE_ROW) goto out;
    *pos = sqlite3_column_int64(st, 0) + 1;
    err = KILN_OK;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* Appends every row of `st` (JOB_COLS) that matches `f` to a growing vector,
 * stopping after `limit` matches; *last_seq gets the seq of the last row
 * examined and *more whether a further matching row exists. */
static kiln_err collect(sqlite3_stmt *st, const kiln_job_filter *f, size_t limit,
                        kiln_job_record ***out, size_t *n, bool *more)
{
    kiln_job_record **v = NULL;
    size_t cnt = 0, cap = 0;
    kiln_err err = KILN_OK;
    int rc;

    *more = false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        kiln_job_record *r;
        err = row_to_record(st, &r);
        if (err != KILN_OK) goto out;
        if (f && !kiln_job_filter_match(f, r)) {
            kiln_job_record_free(r);
            continue;
        }
        if (cnt == limit) {
            kiln_job_record_free(r);
            *more = true;
            break;
        }
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            kiln_job_record **nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                kiln_job_record_free(r);
                err = KILN_ENOMEM;
                goto out;
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = r;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) err = KILN_EIO;
out:
    if (err != KILN_OK) {
        kiln_job_records_free(v, cnt);
        v = NULL;
        cnt = 0;
    }
    *out = v;
    *n = cnt;
    return err;
}

kiln_err kiln_store_jobs_by_state(kiln_store *s, unsigned mask, kiln_job_record ***out, size_t *n)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    bool more;

    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT " JOB_COLS " FROM jobs WHERE ((1 << state) & ?1) != 0"
                           " ORDER BY priority DESC, create_ns, seq",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_int64(st, 1, mask);
    err = collect(st, NULL, SIZE_MAX, out, n, &more);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_job_list(kiln_store *s, const char *project, const kiln_job_filter *f,
                             int64_t after, size_t limit, kiln_job_record ***out, size_t *n,
                             int64_t *next)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    bool more = false;

    *out = NULL;
    *n = 0;
    *next = 0;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT " JOB_COLS " FROM jobs WHERE project = ?1 AND seq > ?2"
                           " ORDER BY seq",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, after);
    err = collect(st, f, limit, out, n, &more);
    if (err == KILN_OK && more && *n > 0) *next = (*out)[*n - 1]->seq;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_node_cordoned(kiln_store *s, const char *node, bool *cordoned)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    *cordoned = false;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, "SELECT cordoned FROM nodes WHERE name = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *cordoned = sqlite3_column_int(st, 0) != 0;
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) err = KILN_OK;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

kiln_err kiln_store_node_set_cordon(kiln_store *s, const char *node, bool cordoned)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO nodes(name, cordoned) VALUES (?1, ?2)",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, cordoned);
    if (sqlite3_step(st) == SQLITE_DONE) err = KILN_OK;
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* The calling thread's reader, opened on first use; NULL on failure. */
static reader *my_reader(kiln_store *s)
{
    reader *r = pthread_getspecific(s->key);
    if (r) return r;
    r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (sqlite3_open_v2(s->path, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(
            r->db, "SELECT seq, version, state FROM jobs WHERE project = ?1 AND job_id = ?2", -1,
            &r->version, NULL) != SQLITE_OK) {
        sqlite3_finalize(r->version);
        sqlite3_close(r->db);
        free(r);
        return NULL;
    }
    sqlite3_busy_timeout(r->db, 5000);
    pthread_mutex_lock(&s->mu);
    reader **nv = realloc(s->readers, (s->n_readers + 1) * sizeof *nv);
    if (nv) {
        s->readers = nv;
        s->readers[s->n_readers++] = r;
    }
    pthread_mutex_unlock(&s->mu);
    if (!nv) {
        sqlite3_finalize(r->version);
        sqlite3_close(r->db);
        free(r);
        return NULL;
    }
    pthread_setspecific(s->key, r);
    return r;
}

kiln_err kiln_store_job_version(kiln_store *s, const char *project, const char *job_id,
                                int64_t *seq, int64_t *version, kiln_job_state *state)
{
    reader *r = my_reader(s);
    kiln_err err = KILN_EIO;
    if (!r) return KILN_EIO;
    sqlite3_stmt *st = r->version;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *seq = sqlite3_column_int64(st, 0);
        *version = sqlite3_column_int64(st, 1);
        *state = (kiln_job_state)sqlite3_column_int(st, 2);
        err = KILN_OK;
    } else if (rc == SQLITE_DONE) {
        err = KILN_ENOTFOUND;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return err;
}
