/* src/store/store.c - jobs and node cordons in SQLite (see kiln/store.h).
 *
 * The Job's input fields live in `spec` as the Job JSON (kiln_job_to_json,
 * output fields cleared); the output fields live in their own columns, so a
 * state change is one conditional UPDATE and never rewrites the spec. The
 * labels are also copied into job_labels (schema.c), which list filters walk.
 *
 * Every write commits, takes a group-commit ticket under the lock, and waits
 * for its ticket outside the lock (commit.c): the fsync no longer serialises
 * the writers, so every state change can be durable at the price of one. */
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store_int.h"

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
    kiln_store_sync sync;          /* guarded by mu */
    kiln__gcommit gc;
    kiln__qrank *queue;        /* keys of the QUEUED jobs (guarded by mu) */
    bool queue_ok;             /* false after an allocation failure: count in SQL */
    kiln_store_watch_fn watch; /* told of every committed job write (guarded by mu) */
    void *watch_arg;
    unsigned char token_key[32]; /* page tokens' MAC key (schema.c) */
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

#define JOB_COLS                                                                                   \
    "seq, project, job_id, spec, state, priority, create_ns, start_ns, end_ns, error, version,"    \
    " restarts, failures, runtime"
/* the same, qualified, for statements that join job_labels */
#define JOB_COLS_J                                                                                 \
    "j.seq, j.project, j.job_id, j.spec, j.state, j.priority, j.create_ns, j.start_ns, j.end_ns,"  \
    " j.error, j.version, j.restarts, j.failures, j.runtime"

/* After a write committed (mu held): the ticket to wait for, 0 = none. */
static uint64_t committed(kiln_store *s)
{
    return s->sync == KILN_STORE_SYNC_GROUP ? kiln__gcommit_ticket(&s->gc) : 0;
}

/* After the lock is dropped: a write's result once it is durable. */
static kiln_err durable(kiln_store *s, uint64_t ticket, kiln_err err)
{
    if (err != KILN_OK || ticket == 0) return err;
    return kiln__gcommit_wait(&s->gc, ticket);
}

/* Before a write (mu held): after a failed sync no write can be durable
 * (commit.c), so none is made; a write made and then reported failed would
 * still be seen by readers and the supervisor. */
static bool writes_refused(kiln_store *s)
{
    return kiln__gcommit_failed(&s->gc);
}

static kiln__qkey qkey(int64_t priority, int64_t create_ns, int64_t seq)
{
    return (kiln__qkey){.priority = priority, .create_ns = create_ns, .seq = seq};
}

/* Keeps the in-memory queue in step with a job now in state `to` (mu held). */
static void queue_note(kiln_store *s, kiln__qkey k, kiln_job_state to)
{
    if (to != KILN_STATE_QUEUED)
        kiln__qrank_remove(s->queue, k);
    else if (kiln__qrank_add(s->queue, k) != KILN_OK)
        s->queue_ok = false;
}

void kiln_store_set_watch(kiln_store *s, kiln_store_watch_fn fn, void *arg)
{
    pthread_mutex_lock(&s->mu);
    s->watch = fn;
    s->watch_arg = arg;
    pthread_mutex_unlock(&s->mu);
}

/* After a committed write to a job (mu held): the watcher hears of it. */
static void watch_note(kiln_store *s, const char *project, const char *job_id, int64_t seq)
{
    if (s->watch) s->watch(s->watch_arg, project, job_id, seq);
}

/* Fills the in-memory queue from the table (at open). */
static kiln_err queue_load(kiln_store *s)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    int rc;
    if (!(s->queue = kiln__qrank_new())) return KILN_ENOMEM;
    s->queue_ok = true;
    if (sqlite3_prepare_v2(s->db, "SELECT priority, create_ns, seq FROM jobs WHERE state = ?1", -1,
                           &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_int(st, 1, KILN_STATE_QUEUED);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        queue_note(s,
                   qkey(sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                        sqlite3_column_int64(st, 2)),
                   KILN_STATE_QUEUED);
    if (rc == SQLITE_DONE) err = KILN_OK;
out:
    sqlite3_finalize(st);
    return err;
}

/* fsync of the directory holding `path`: the WAL's directory entry must be
 * on disk before commits in it can be called durable. */
static void sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

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
    if (pthread_key_create(&s->key, NULL) != 0 || !(s->path = strdup(path)) ||
        kiln__gcommit_init(&s->gc, path) != KILN_OK) {
        kiln__gcommit_destroy(&s->gc);
        free(s->path);
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
    /* WAL with synchronous=NORMAL: every commit is in the OS before the
     * call returns, so it survives kill -9 of kilnd; group commit (commit.c)
     * then puts it on disk before the call returns, so it survives a power
     * cut too: creates and every later state change alike. */
    rc = sqlite3_exec(s->db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                      NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        kiln_diag_add(d, "--data-dir", "cannot initialise the store '%s': %s", path,
                      msg ? msg : sqlite3_errstr(rc));
        goto out;
    }
    if ((err = kiln__store_schema(s->db, path, d)) != KILN_OK) goto out;
    err = KILN_EIO;
    if (kiln__store_secret(s->db, s->token_key) != KILN_OK) {
        kiln_diag_add(d, "--data-dir", "the store '%s' has no page-token key", path);
        goto out;
    }
    if ((err = queue_load(s)) != KILN_OK) {
        kiln_diag_add(d, "--data-dir", "cannot read the queue of '%s'", path);
        goto out;
    }
    sync_dir(path);
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
    kiln__qrank_free(s->queue);
    kiln__gcommit_destroy(&s->gc);
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

/* The job's labels into job_labels (mu held, inside the write's transaction). */
static kiln_err put_labels(kiln_store *s, const char *project, int64_t seq, const kiln_map *labels)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO job_labels(project, key, value, seq)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    for (size_t i = 0; i < labels->n; i++) {
        sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, labels->keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, labels->vals[i] ? labels->vals[i] : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, seq);
        if (sqlite3_step(st) != SQLITE_DONE) goto out;
        sqlite3_reset(st);
    }
    err = KILN_OK;
out:
    sqlite3_finalize(st);
    return err;
}

/* Ends the transaction a write began (mu held): COMMIT when err is OK, else
 * ROLLBACK. A failed COMMIT is KILN_EIO. */
static kiln_err end_tx(kiln_store *s, kiln_err err)
{
    if (err == KILN_OK && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
        return KILN_OK;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return err == KILN_OK ? KILN_EIO : err;
}

kiln_err kiln_store_job_create(kiln_store *s, const char *project, const kiln_job *job,
                               int64_t now_ns, kiln_job_record **out)
{
    sqlite3_stmt *st = NULL;
    char *spec = spec_json(job);
    kiln_err err = KILN_ENOMEM;
    int64_t prio = job->training_input.has_scheduling ? job->training_input.scheduling.priority : 0;
    uint64_t ticket = 0;
    bool tx = false;

    if (out) *out = NULL;
    if (!spec) return KILN_ENOMEM;
    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    err = KILN_EIO;
    if (writes_refused(s)) goto out;
    /* the row and its labels in one transaction: a filter never sees half */
    if (sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) goto out;
    tx = true;
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
    int64_t seq = sqlite3_last_insert_rowid(s->db);
    if ((err = put_labels(s, project, seq, &job->labels)) != KILN_OK) goto out;
    err = end_tx(s, KILN_OK);
    tx = false;
    if (err != KILN_OK) goto out;
    queue_note(s, qkey(prio, now_ns, seq), KILN_STATE_QUEUED);
    watch_note(s, project, job->job_id ? job->job_id : "", seq);
    ticket = committed(s);
    if (out) err = get_locked(s, project, job->job_id, out);
out:
    sqlite3_finalize(st);
    if (tx) err = end_tx(s, err == KILN_OK ? KILN_EIO : err);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    free(spec);
    err = durable(s, ticket, err);
    if (err != KILN_OK && out) {
        kiln_job_record_free(*out);
        *out = NULL;
    }
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
    uint64_t ticket = 0;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (writes_refused(s)) goto out;
    /* The state test is in the WHERE clause: compare-and-set in one statement. */
    if (sqlite3_prepare_v2(
            s->db,
            "UPDATE jobs SET state = ?3, version = version + 1,"
            " start_ns = CASE WHEN ?3 = ?7 AND start_ns = 0 THEN ?5 ELSE start_ns END,"
            " end_ns = CASE WHEN ?6 THEN ?5 ELSE end_ns END,"
            " error = CASE WHEN ?4 IS NULL THEN error ELSE ?4 END"
            " WHERE project = ?1 AND job_id = ?2 AND ((1 << state) & ?8) != 0"
            " RETURNING seq, priority, create_ns",
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
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) { /* the one row it changed: the queue follows */
        kiln__qkey k = qkey(sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                            sqlite3_column_int64(st, 0));
        if (sqlite3_step(st) != SQLITE_DONE) goto out;
        queue_note(s, k, to);
        watch_note(s, project, job_id, k.seq);
        ticket = committed(s);
        err = KILN_OK;
        goto out;
    }
    if (step != SQLITE_DONE) goto out;
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
    return durable(s, ticket, err);
}

kiln_err kiln_store_job_set_labels(kiln_store *s, const char *project, const char *job_id,
                                   const kiln_map *labels, kiln_job_record **out)
{
    kiln_job_record *r = NULL;
    sqlite3_stmt *st = NULL;
    char *spec = NULL;
    kiln_err err;
    uint64_t ticket = 0;
    bool tx = false;

    if (out) *out = NULL;
    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    err = KILN_EIO;
    if (writes_refused(s)) goto out;
    err = get_locked(s, project, job_id, &r);
    if (err != KILN_OK) goto out;
    err = KILN_ENOMEM;
    kiln_map_clear(&r->job->labels);
    for (size_t i = 0; i < labels->n; i++)
        if (kiln_map_set(&r->job->labels, labels->keys[i], labels->vals[i]) != KILN_OK) goto out;
    if (!(spec = spec_json(r->job))) goto out;
    err = KILN_EIO;
    /* the spec and the label index change together */
    if (sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) goto out;
    tx = true;
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE jobs SET spec = ?3, version = version + 1"
                           " WHERE project = ?1 AND job_id = ?2",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, spec, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM job_labels WHERE seq = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        goto out;
    sqlite3_bind_int64(st, 1, r->seq);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    if ((err = put_labels(s, project, r->seq, &r->job->labels)) != KILN_OK) goto out;
    err = end_tx(s, KILN_OK);
    tx = false;
    if (err != KILN_OK) goto out;
    watch_note(s, project, job_id, r->seq);
    ticket = committed(s);
    if (out) err = get_locked(s, project, job_id, out);
out:
    sqlite3_finalize(st);
    if (tx) err = end_tx(s, err == KILN_OK ? KILN_EIO : err);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    kiln_job_record_free(r);
    free(spec);
    err = durable(s, ticket, err);
    if (err != KILN_OK && out) {
        kiln_job_record_free(*out);
        *out = NULL;
    }
    return err;
}

kiln_err kiln_store_job_delete(kiln_store *s, const char *project, const char *job_id,
                               kiln_job_state *was)
{
    kiln_job_record *r = NULL;
    sqlite3_stmt *st = NULL;
    kiln_err err;
    uint64_t ticket = 0;
    bool tx = false;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    err = KILN_EIO;
    if (writes_refused(s)) goto out;
    err = get_locked(s, project, job_id, &r);
    if (err != KILN_OK) goto out;
    if (was) *was = r->job->state;
    err = KILN_ECONFLICT;
    if (!(KILN_STATES_TERMINAL & (1u << r->job->state))) goto out;
    err = KILN_EIO;
    /* the row and its labels together: a filter never sees half */
    if (sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) goto out;
    tx = true;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM job_labels WHERE seq = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        goto out;
    sqlite3_bind_int64(st, 1, r->seq);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM jobs WHERE seq = ?1", -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_int64(st, 1, r->seq);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    err = end_tx(s, KILN_OK);
    tx = false;
    if (err != KILN_OK) goto out;
    /* an ended job is in no queue and no supervisor's hands: no watcher to tell */
    ticket = committed(s);
out:
    sqlite3_finalize(st);
    if (tx) err = end_tx(s, err == KILN_OK ? KILN_EIO : err);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    kiln_job_record_free(r);
    return durable(s, ticket, err);
}

kiln_err kiln_store_job_set_runtime(kiln_store *s, const char *project, const char *job_id,
                                    int restarts, int failures, const char *runtime)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    uint64_t ticket = 0;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (writes_refused(s)) goto out;
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE jobs SET restarts = ?3, failures = ?4, runtime = ?5,"
                           " version = version + 1 WHERE project = ?1 AND job_id = ?2"
                           " RETURNING seq",
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
    int step = sqlite3_step(st);
    if (step == SQLITE_DONE) { /* no such job */
        err = KILN_ENOTFOUND;
        goto out;
    }
    if (step != SQLITE_ROW) goto out;
    int64_t seq = sqlite3_column_int64(st, 0);
    if (sqlite3_step(st) != SQLITE_DONE) goto out;
    err = KILN_OK;
    watch_note(s, project, job_id, seq);
    ticket = committed(s);
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return durable(s, ticket, err);
}

kiln_err kiln_store_job_position(kiln_store *s, const kiln_job_record *r, int64_t *pos)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    *pos = 0;
    if (r->job->state != KILN_STATE_QUEUED) return KILN_OK;
    pthread_mutex_lock(&s->mu);
    if (s->queue_ok) { /* O(log queue): the in-memory order (qrank.c) */
        *pos = (int64_t)kiln__qrank_before(s->queue, qkey(r->priority, r->create_ns, r->seq)) + 1;
        err = KILN_OK;
        goto out;
    }
    /* after an allocation failure the memory may miss jobs: the exact count */
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
    /* state IN (the mask's states), not a bit test: the queue index
     * (state, priority DESC, create_ns) finds them without reading the
     * other jobs */
    char sql[512], in[64];
    size_t o = 0;
    in[0] = '\0';
    for (int i = 0; i < KILN_STORE_STATES; i++)
        if ((mask >> i) & 1u) o += (size_t)snprintf(in + o, sizeof in - o, "%s%d", o ? "," : "", i);
    snprintf(sql, sizeof sql,
             "SELECT " JOB_COLS " FROM jobs WHERE state IN (%s)"
             " ORDER BY priority DESC, create_ns, seq",
             o ? in : "-1");
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) goto out;
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
    char *sql = kiln__filter_sql(f, JOB_COLS_J);
    if (!sql) return KILN_ENOMEM;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) goto out;
    sqlite3_bind_text(st, 1, project, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, after);
    kiln__filter_bind(f, st);
    err = collect(st, f, limit, out, n, &more);
    if (err == KILN_OK && more && *n > 0) *next = (*out)[*n - 1]->seq;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    free(sql);
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
    uint64_t ticket = 0;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (writes_refused(s)) goto out;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO nodes(name, cordoned) VALUES (?1, ?2)",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, cordoned);
    if (sqlite3_step(st) == SQLITE_DONE) {
        err = KILN_OK;
        ticket = committed(s);
    }
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return durable(s, ticket, err);
}

kiln_err kiln_store_doc_put(kiln_store *s, const char *kind, const char *project, const char *name,
                            const char *json)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    uint64_t ticket = 0;

    pthread_mutex_lock(&s->mu);
    int64_t t0 = mono_ns();
    if (writes_refused(s)) goto out;
    const char *sql = json ? "INSERT OR REPLACE INTO docs(kind, project, name, body)"
                             " VALUES (?1, ?2, ?3, ?4)"
                           : "DELETE FROM docs WHERE kind = ?1 AND project = ?2 AND name = ?3";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) goto out;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    if (json) sqlite3_bind_text(st, 4, json, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_DONE) {
        err = KILN_OK;
        ticket = committed(s);
    }
out:
    sqlite3_finalize(st);
    note_write(s, t0);
    pthread_mutex_unlock(&s->mu);
    return durable(s, ticket, err);
}

kiln_err kiln_store_doc_get(kiln_store *s, const char *kind, const char *project, const char *name,
                            char **json)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;

    *json = NULL;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT body FROM docs WHERE kind = ?1 AND project = ?2 AND name = ?3",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) err = KILN_ENOTFOUND;
    if (rc == SQLITE_ROW)
        err = (*json = strdup((const char *)sqlite3_column_text(st, 0))) ? KILN_OK : KILN_ENOMEM;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

void kiln_store_docs_free(kiln_store_doc *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].project);
        free(v[i].name);
        free(v[i].json);
    }
    free(v);
}

kiln_err kiln_store_doc_list(kiln_store *s, const char *kind, const char *project,
                             kiln_store_doc **out, size_t *n)
{
    sqlite3_stmt *st = NULL;
    kiln_err err = KILN_EIO;
    kiln_store_doc *v = NULL;
    size_t k = 0, cap = 0;
    int rc;

    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT project, name, body FROM docs WHERE kind = ?1 AND"
                           " (?2 IS NULL OR project = ?2) ORDER BY project, name",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    if (project) sqlite3_bind_text(st, 2, project, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k == cap) {
            kiln_store_doc *nv = realloc(v, (cap = cap ? 2 * cap : 8) * sizeof *v);
            if (!nv) {
                err = KILN_ENOMEM;
                goto out;
            }
            v = nv;
        }
        v[k] = (kiln_store_doc){strdup((const char *)sqlite3_column_text(st, 0)),
                                strdup((const char *)sqlite3_column_text(st, 1)),
                                strdup((const char *)sqlite3_column_text(st, 2))};
        k++;
        if (!v[k - 1].project || !v[k - 1].name || !v[k - 1].json) {
            err = KILN_ENOMEM;
            goto out;
        }
    }
    if (rc == SQLITE_DONE) err = KILN_OK;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (err != KILN_OK) {
        kiln_store_docs_free(v, k);
        v = NULL;
        k = 0;
    }
    *out = v;
    *n = k;
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

kiln_err kiln_store_set_sync(kiln_store *s, kiln_store_sync mode)
{
    kiln_err err = KILN_OK;
    pthread_mutex_lock(&s->mu);
    /* EACH: SQLite syncs the WAL inside every commit, under the lock */
    const char *sql =
        mode == KILN_STORE_SYNC_EACH ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK)
        s->sync = mode;
    else
        err = KILN_EIO;
    pthread_mutex_unlock(&s->mu);
    return err;
}

uint64_t kiln_store_group_syncs(kiln_store *s)
{
    pthread_mutex_lock(&s->gc.mu);
    uint64_t n = s->gc.flushes;
    pthread_mutex_unlock(&s->gc.mu);
    return n;
}

void kiln_store_page_token(kiln_store *s, const char *project, const char *filter, int64_t after,
                           char out[KILN_STORE_TOKEN_LEN])
{
    kiln__token_make(s->token_key, project, filter ? filter : "", after, out);
}

kiln_err kiln_store_page_after(kiln_store *s, const char *project, const char *filter,
                               const char *token, int64_t *after)
{
    return kiln__token_read(s->token_key, project, filter ? filter : "", token, after)
               ? KILN_OK
               : KILN_EINVAL;
}
