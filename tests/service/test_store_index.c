/* tests/service/test_store_index.c - the store at scale: list and filter
 * queries use indexes (EXPLAIN QUERY PLAN shows no full scan and no sort),
 * the label index follows creates and label changes, page tokens refuse
 * edits and foreign use, an old (version 0) store is migrated on open and a
 * newer one refused, jobPosition from memory equals the queue order,
 * group commit makes every write durable with at most one fsync each, and a
 * failed fsync fails every write it covered and refuses the later ones. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/store.h"
#include "job_fixture.h"
#include "store/store_int.h"
#include "test.h"

static void add(kiln_store *s, const char *project, const char *id, int64_t prio, int64_t t,
                const char *k, const char *v)
{
    kiln_job *j = mkjob(id, prio, k, v);
    CHECK_MSG(kiln_store_job_create(s, project, j, t, NULL) == KILN_OK, "create %s", id);
    kiln_job_free(j);
}

/* A create that must fail with `want`. */
static void add_err(kiln_store *s, const char *project, const char *id, kiln_err want)
{
    kiln_job *j = mkjob(id, 0, NULL, NULL);
    kiln_err got = kiln_store_job_create(s, project, j, 1, NULL);
    CHECK_MSG(got == want, "create %s: %s", id, kiln_err_str(got));
    kiln_job_free(j);
}

/* Whether the plan of `sql` reads through indexes only: no SCAN of a whole
 * table and no sort of the result (a temp b-tree needs every row first). */
static bool plan_indexed(sqlite3 *db, const char *sql, char *plan, size_t cap)
{
    char *q = sqlite3_mprintf("EXPLAIN QUERY PLAN %s", sql);
    sqlite3_stmt *st = NULL;
    bool ok = q && sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK;
    size_t o = 0;
    plan[0] = '\0';
    while (ok && sqlite3_step(st) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, 3);
        o += (size_t)snprintf(plan + o, o < cap ? cap - o : 0, "%s; ", d);
        if (strncmp(d, "SCAN ", 5) == 0 || strstr(d, "TEMP B-TREE")) ok = false;
    }
    sqlite3_finalize(st);
    sqlite3_free(q);
    return ok;
}

static size_t list_count(kiln_store *s, const char *project, const char *filter)
{
    kiln_job_filter *f = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job_record **v = NULL;
    size_t n = 0, total = 0;
    int64_t after = 0, next = 0;
    CHECK_MSG(!filter || kiln_job_filter_parse(filter, &f, &d) == KILN_OK, "%s", filter);
    do { /* small pages: the walk resumes after each */
        CHECK(kiln_store_job_list(s, project, f, after, 3, &v, &n, &next) == KILN_OK);
        total += n;
        kiln_job_records_free(v, n);
        after = next;
    } while (next);
    kiln_job_filter_free(f);
    kiln_diag_free(&d);
    return total;
}

typedef struct writer {
    kiln_store *s;
    int id;
    int fails;
} writer;

static void *write_jobs(void *arg)
{
    writer *w = arg;
    for (int i = 0; i < 25; i++) {
        char id[32];
        snprintf(id, sizeof id, "gc_%d_%d", w->id, i);
        kiln_job *j = mkjob(id, 0, NULL, NULL);
        w->fails += kiln_store_job_create(w->s, "gc", j, 1, NULL) != KILN_OK;
        w->fails += kiln_store_job_transition(w->s, "gc", id, KILN_STATE_MASK(QUEUED),
                                              KILN_STATE_RUNNING, NULL, 2, NULL) != KILN_OK;
        kiln_job_free(j);
    }
    return NULL;
}

int main(void)
{
    char dir[] = "/tmp/kiln-store-idx-XXXXXX", path[256], old[256], plan[2048];
    kiln_store *s = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    sqlite3 *db = NULL;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/k.db", dir);
    CHECK(kiln_store_open(path, &s, &d) == KILN_OK);
    CHECK(kiln_store_set_sync(s, KILN_STORE_SYNC_NONE) == KILN_OK);

    /* 60 jobs in p1: k = i % 3, every other one SUCCEEDED; a few in p2 */
    for (int i = 0; i < 60; i++) {
        char id[32], v[8];
        snprintf(id, sizeof id, "j%02d", i);
        snprintf(v, sizeof v, "%d", i % 3);
        add(s, "p1", id, i % 4, 1000 + i, "k", v);
        if (i % 2 == 0)
            CHECK(kiln_store_job_transition(s, "p1", id, KILN_STATE_MASK(QUEUED),
                                            KILN_STATE_SUCCEEDED, NULL, 5000, NULL) == KILN_OK);
    }
    for (int i = 0; i < 5; i++) {
        char id[32];
        snprintf(id, sizeof id, "j%02d", i);
        add(s, "p2", id, 0, 1, "k", "0");
    }

    /* ---- filters give the same answers as before, page by page ---- */
    CHECK(list_count(s, "p1", NULL) == 60);
    CHECK(list_count(s, "p2", NULL) == 5);
    CHECK(list_count(s, "p1", "state:SUCCEEDED") == 30);
    CHECK(list_count(s, "p1", "state!=SUCCEEDED") == 30);
    CHECK(list_count(s, "p1", "state:SUCC*") == 30);
    CHECK(list_count(s, "p1", "labels.k=1") == 20);
    CHECK(list_count(s, "p1", "labels.k:1") == 20);
    CHECK(list_count(s, "p1", "labels.k=1 AND state:SUCCEEDED") == 10); /* i = 4, 10, ... */
    CHECK(list_count(s, "p1", "labels.k=1 AND labels.k=2") == 0);
    CHECK(list_count(s, "p1", "labels.k!=1") == 40);
    CHECK(list_count(s, "p1", "labels.nope=1") == 0);
    CHECK(list_count(s, "p1", "jobId=j07 AND labels.k=1") == 1);
    CHECK(list_count(s, "p1", "state:S*") == 30);

    /* the label index follows a label change */
    kiln_map m = {0};
    kiln_map_set(&m, "k", "9");
    CHECK(kiln_store_job_set_labels(s, "p1", "j01", &m, NULL) == KILN_OK);
    kiln_map_clear(&m);
    CHECK(list_count(s, "p1", "labels.k=9") == 1);
    CHECK(list_count(s, "p1", "labels.k=1") == 19);

    /* ---- the plans: indexes, no scan, no sort ---- */
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    const char *filters[] = {NULL,
                             "state:SUCCEEDED",
                             "labels.k=3 AND state:SUCCEEDED",
                             "labels.a=1 AND labels.b=2",
                             "state!=QUEUED",
                             "jobId=x"};
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++) {
        kiln_job_filter *f = NULL;
        CHECK(!filters[i] || kiln_job_filter_parse(filters[i], &f, &d) == KILN_OK);
        char *sql = kiln__filter_sql(f, "j.seq");
        CHECK(sql != NULL);
        CHECK_MSG(sql && plan_indexed(db, sql, plan, sizeof plan), "filter '%s': %s",
                  filters[i] ? filters[i] : "", plan);
        free(sql);
        kiln_job_filter_free(f);
    }
    /* the supervisor's queue read */
    CHECK_MSG(plan_indexed(db,
                           "SELECT seq FROM jobs WHERE state IN (1) ORDER BY priority DESC,"
                           " create_ns, seq",
                           plan, sizeof plan),
              "queue: %s", plan);
    /* and the proof the check can fail: the old bit-test query scans */
    CHECK(
        !plan_indexed(db, "SELECT seq FROM jobs WHERE ((1 << state) & 2) != 0", plan, sizeof plan));
    sqlite3_close(db);
    db = NULL;

    /* ---- page tokens ---- */
    char tok[KILN_STORE_TOKEN_LEN], bad[KILN_STORE_TOKEN_LEN];
    int64_t after = 0;
    kiln_store_page_token(s, "p1", "state:SUCCEEDED", 42, tok);
    CHECK(kiln_store_page_after(s, "p1", "state:SUCCEEDED", tok, &after) == KILN_OK && after == 42);
    CHECK(kiln_store_page_after(s, "p2", "state:SUCCEEDED", tok, &after) == KILN_EINVAL);
    CHECK(kiln_store_page_after(s, "p1", NULL, tok, &after) == KILN_EINVAL);
    CHECK(kiln_store_page_after(s, "p1", "state:FAILED", tok, &after) == KILN_EINVAL);
    for (size_t i = 0; i < strlen(tok); i++) { /* every one-character edit is refused */
        memcpy(bad, tok, sizeof tok);
        bad[i] = bad[i] == 'A' ? 'B' : 'A';
        CHECK_MSG(kiln_store_page_after(s, "p1", "state:SUCCEEDED", bad, &after) == KILN_EINVAL,
                  "edit at %zu", i);
    }
    CHECK(kiln_store_page_after(s, "p1", NULL, "s42", &after) == KILN_EINVAL);
    CHECK(kiln_store_page_after(s, "p1", NULL, "", &after) == KILN_EINVAL);

    /* ---- jobPosition from memory equals the queue's order ---- */
    srand(7);
    for (int round = 0; round < 200; round++) {
        char id[32];
        snprintf(id, sizeof id, "q%03d", round);
        add(s, "pq", id, rand() % 5, 100 + rand() % 50, NULL, NULL);
        int victim = rand() % (round + 1);
        snprintf(id, sizeof id, "q%03d", victim);
        switch (rand() % 4) {
        case 0: /* starts, and sometimes comes back (a requeue) */
            kiln_store_job_transition(s, "pq", id, KILN_STATE_MASK(QUEUED), KILN_STATE_PREPARING,
                                      NULL, 9, NULL);
            if (rand() % 2)
                kiln_store_job_transition(s, "pq", id, KILN_STATE_MASK(PREPARING),
                                          KILN_STATE_QUEUED, NULL, 9, NULL);
            break;
        case 1:
            kiln_store_job_transition(s, "pq", id, KILN_STATES_ACTIVE, KILN_STATE_CANCELLED, NULL,
                                      9, NULL);
            break;
        default:
            break;
        }
    }
    kiln_job_record **v = NULL;
    size_t n = 0;
    CHECK(kiln_store_jobs_by_state(s, KILN_STATE_MASK(QUEUED), &v, &n) == KILN_OK);
    CHECK(n > 50);
    int wrong = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t pos = 0;
        CHECK(kiln_store_job_position(s, v[i], &pos) == KILN_OK);
        wrong += pos != (int64_t)i + 1;
    }
    CHECK_MSG(wrong == 0, "%d of %zu positions differ from the queue order", wrong, n);
    kiln_job_records_free(v, n);

    /* ---- group commit: every write fsynced, fsyncs shared ---- */
    CHECK(kiln_store_set_sync(s, KILN_STORE_SYNC_GROUP) == KILN_OK);
    uint64_t syncs0 = kiln_store_group_syncs(s);
    writer w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (writer){.s = s, .id = i};
        CHECK(pthread_create(&th[i], NULL, write_jobs, &w[i]) == 0);
    }
    int fails = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        fails += w[i].fails;
    }
    uint64_t syncs = kiln_store_group_syncs(s) - syncs0;
    CHECK(fails == 0);
    CHECK_MSG(syncs >= 1 && syncs <= 200, "%llu fsyncs for 200 writes", (unsigned long long)syncs);
    CHECK(list_count(s, "gc", "state:RUNNING") == 100);
    /* NONE makes none */
    CHECK(kiln_store_set_sync(s, KILN_STORE_SYNC_NONE) == KILN_OK);
    syncs0 = kiln_store_group_syncs(s);
    CHECK(kiln_store_node_set_cordon(s, "n1", true) == KILN_OK);
    CHECK(kiln_store_group_syncs(s) == syncs0);
    kiln_store_close(s);
    s = NULL;

    /* ---- a failed sync fails its whole batch and every write after it ---- */
    char gone[300], wal[310];
    snprintf(gone, sizeof gone, "%s/gone.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", gone);
    kiln__gcommit g;
    CHECK(kiln__gcommit_init(&g, gone) == KILN_OK);
    uint64_t t1 = kiln__gcommit_ticket(&g), t2 = kiln__gcommit_ticket(&g);
    CHECK(kiln__gcommit_wait(&g, t1) == KILN_EIO); /* no WAL to open: the sync fails */
    FILE *wf = fopen(wal, "w");                    /* a sync of it would now succeed, */
    CHECK(wf != NULL);
    if (wf) fclose(wf);
    CHECK(kiln__gcommit_wait(&g, t2) == KILN_EIO); /* but t2 rode on the failed one */
    uint64_t t3 = kiln__gcommit_ticket(&g);
    CHECK(kiln__gcommit_wait(&g, t3) == KILN_EIO); /* and nothing after it is durable */
    CHECK(kiln__gcommit_failed(&g) && g.flushes == 1);
    kiln__gcommit_destroy(&g);
    /* the store: the write whose sync failed says so, later ones are not made */
    snprintf(gone, sizeof gone, "%s/fail.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", gone);
    CHECK(kiln_store_open(gone, &s, &d) == KILN_OK);
    CHECK(unlink(wal) == 0); /* SQLite keeps its descriptor; the sync cannot open the file */
    add_err(s, "f", "a", KILN_EIO);
    add_err(s, "f", "b", KILN_EIO);
    kiln_job_record *gr = NULL;
    CHECK(kiln_store_job_get(s, "f", "b", &gr) == KILN_ENOTFOUND);
    kiln_job_record_free(gr);
    CHECK(kiln_store_node_set_cordon(s, "n1", true) == KILN_EIO);
    kiln_store_close(s);
    s = NULL;

    /* ---- migration: a version-0 store (the schema before versions) ---- */
    snprintf(old, sizeof old, "%s/old.db", dir);
    CHECK(sqlite3_open(old, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(
              db,
              "PRAGMA journal_mode=WAL;"
              "CREATE TABLE jobs(seq INTEGER PRIMARY KEY AUTOINCREMENT, project TEXT NOT NULL,"
              " job_id TEXT NOT NULL, spec TEXT NOT NULL, state INTEGER NOT NULL,"
              " priority INTEGER NOT NULL, create_ns INTEGER NOT NULL,"
              " start_ns INTEGER NOT NULL DEFAULT 0, end_ns INTEGER NOT NULL DEFAULT 0, error TEXT,"
              " version INTEGER NOT NULL DEFAULT 1, restarts INTEGER NOT NULL DEFAULT 0,"
              " failures INTEGER NOT NULL DEFAULT 0, runtime TEXT, UNIQUE(project, job_id));"
              "CREATE INDEX jobs_queue ON jobs(state, priority DESC, create_ns);"
              "CREATE TABLE nodes(name TEXT PRIMARY KEY, cordoned INTEGER NOT NULL);"
              "INSERT INTO jobs(project, job_id, spec, state, priority, create_ns) VALUES"
              " ('p', 'a', '{\"jobId\":\"a\",\"labels\":{\"team\":\"x\"},\"trainingInput\":"
              "{\"scaleTier\":\"BASIC\",\"region\":\"us-central1\"}}', 1, 0, 5),"
              " ('p', 'b', '{\"jobId\":\"b\",\"labels\":{\"team\":\"y\"},\"trainingInput\":"
              "{\"scaleTier\":\"BASIC\",\"region\":\"us-central1\"}}', 4, 0, 6);",
              NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    db = NULL;
    CHECK(kiln_store_open(old, &s, &d) == KILN_OK);
    if (s) {
        CHECK(list_count(s, "p", "labels.team=x") == 1);
        CHECK(list_count(s, "p", "labels.team=y AND state:SUCCEEDED") == 1);
        kiln_job_record *r = NULL;
        CHECK(kiln_store_job_get(s, "p", "a", &r) == KILN_OK);
        int64_t pos = 0;
        CHECK(r && kiln_store_job_position(s, r, &pos) == KILN_OK && pos == 1);
        kiln_job_record_free(r);
        kiln_store_close(s);
        s = NULL;
    }
    CHECK(sqlite3_open(old, &db) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    CHECK(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == KILN__STORE_SCHEMA);
    sqlite3_finalize(st);
    /* a store from a newer kilnd is refused, naming the versions */
    CHECK(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    kiln_diag_clear(&d);
    CHECK(kiln_store_open(old, &s, &d) == KILN_EINVAL && s == NULL);
    CHECK(d.n == 1 && strstr(d.v[0].description, "version 99"));

    kiln_diag_free(&d);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
