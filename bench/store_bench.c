/* bench/store_bench.c - the store's side of bench/service_scale.sh.
 *
 *   kiln-store-bench fill DB N [NODE]   N finished jobs in project "bench", inserted
 *                                       through the store library without fsyncs;
 *                                       labels k = i % 5, and 2 in 3 SUCCEEDED (the
 *                                       rest FAILED or CANCELLED), independently, so
 *                                       that labels.k=3 AND state:SUCCEEDED matches
 *                                       2 in 15: a full page of 100 even at 1k jobs;
 *                                       cordons NODE so that jobs created later
 *                                       over HTTP stay QUEUED
 *   kiln-store-bench commit DIR THREADS JOBS
 *                                       creates/s with every write fsynced: each
 *                                       job is a create and three state changes
 *                                       (PREPARING, RUNNING, SUCCEEDED), from
 *                                       THREADS threads, once with one fsync per
 *                                       commit (synchronous=FULL: the bound before)
 *                                       and once with group commit; prints both
 *                                       and the ratio
 *   kiln-store-bench queue DIR N        N QUEUED jobs: the time to read the queue
 *                                       (the supervisor's pass does) and to compute
 *                                       every jobPosition (exact), against one
 *                                       SQL COUNT per job, the way it was done
 *   kiln-store-bench queued DB N NODES  N QUEUED jobs in project "bench" for kilnd's
 *                                       scheduling pass (bench/service_scale.sh),
 *                                       four shapes in turn as kiln-sched-bench's (1
 *                                       V100; a master and 2 workers of 2 V100s; CPU
 *                                       only; a CPU master and 4 workers of 4 V100s),
 *                                       priorities 0-6; cordons node0000 ..
 *                                       node(NODES-1) so that nothing starts: every
 *                                       pass is the steady state of a full cluster */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/store.h"
#include "../tests/service/job_fixture.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static kiln_store *open_store(const char *path)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_store *s = NULL;
    if (kiln_store_open(path, &s, &d) != KILN_OK)
        fprintf(stderr, "cannot open %s: %s\n", path, d.n ? d.v[0].description : "?");
    kiln_diag_free(&d);
    return s;
}

static int fill(const char *path, long n, const char *node)
{
    static const kiln_job_state ends[6] = {KILN_STATE_SUCCEEDED, KILN_STATE_SUCCEEDED,
                                           KILN_STATE_FAILED,    KILN_STATE_SUCCEEDED,
                                           KILN_STATE_CANCELLED, KILN_STATE_SUCCEEDED};
    kiln_store *s = open_store(path);
    int rc = 1;
    if (!s || kiln_store_set_sync(s, KILN_STORE_SYNC_NONE) != KILN_OK) goto out;
    int64_t t0 = kiln_now_ns() - (int64_t)n * 1000000;
    for (long i = 0; i < n; i++) {
        char id[32], k[8];
        snprintf(id, sizeof id, "fill_%07ld", i);
        snprintf(k, sizeof k, "%ld", i % 5);
        kiln_job *j = mkjob(id, 0, "k", k);
        kiln_err err =
            j ? kiln_store_job_create(s, "bench", j, t0 + i * 1000000, NULL) : KILN_ENOMEM;
        kiln_job_free(j);
        if (err == KILN_OK)
            err =
                kiln_store_job_transition(s, "bench", id, KILN_STATE_MASK(QUEUED),
                                          ends[(i / 5) % 6], NULL, t0 + i * 1000000 + 500000, NULL);
        if (err != KILN_OK) {
            fprintf(stderr, "job %ld: %s\n", i, kiln_err_str(err));
            goto out;
        }
    }
    if (node && kiln_store_node_set_cordon(s, node, true) != KILN_OK) goto out;
    rc = 0;
out:
    kiln_store_close(s);
    return rc;
}

typedef struct worker {
    kiln_store *s;
    int id;
    long jobs;
    long fails;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    static const kiln_job_state path[3] = {KILN_STATE_PREPARING, KILN_STATE_RUNNING,
                                           KILN_STATE_SUCCEEDED};
    for (long i = 0; i < w->jobs; i++) {
        char id[48];
        snprintf(id, sizeof id, "c_%d_%ld", w->id, i);
        kiln_job *j = mkjob(id, 0, "k", "1");
        w->fails += !j || kiln_store_job_create(w->s, "bench", j, kiln_now_ns(), NULL) != KILN_OK;
        kiln_job_free(j);
        kiln_job_state from = KILN_STATE_QUEUED;
        for (int k = 0; k < 3; k++) {
            w->fails += kiln_store_job_transition(w->s, "bench", id, 1u << from, path[k], NULL,
                                                  kiln_now_ns(), NULL) != KILN_OK;
            from = path[k];
        }
    }
    return NULL;
}

/* Jobs per second through a fresh store in `mode`. */
static double commit_rate(const char *dir, const char *name, kiln_store_sync mode, int threads,
                          long jobs, uint64_t *syncs)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    kiln_store *s = open_store(path);
    worker w[64];
    pthread_t th[64];
    long fails = 0;
    if (!s || kiln_store_set_sync(s, mode) != KILN_OK) {
        kiln_store_close(s);
        return -1;
    }
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (worker){.s = s, .id = i, .jobs = jobs / threads};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        fails += w[i].fails;
    }
    double secs = now_s() - t0;
    *syncs = kiln_store_group_syncs(s);
    kiln_store_close(s);
    if (fails) fprintf(stderr, "%s: %ld writes failed\n", name, fails);
    return fails ? -1 : (double)(jobs / threads * threads) / secs;
}

static int commit(const char *dir, int threads, long jobs)
{
    uint64_t se = 0, sg = 0;
    if (threads < 1 || threads > 64) return 2;
    double each = commit_rate(dir, "each", KILN_STORE_SYNC_EACH, threads, jobs, &se);
    double group = commit_rate(dir, "group", KILN_STORE_SYNC_GROUP, threads, jobs, &sg);
    if (each <= 0 || group <= 0) return 1;
    printf("creates/s, every write fsynced (create + 3 transitions per job), %d threads, %ld "
           "jobs: one fsync per commit %.0f, group commit %.0f (%llu fsyncs for %ld writes), "
           "ratio %.2f\n",
           threads, jobs, each, group, (unsigned long long)sg, jobs * 4, group / each);
    return 0;
}

static int queue(const char *dir, long n)
{
    char path[512];
    kiln_job_record **v = NULL;
    size_t got = 0;
    int rc = 1;
    snprintf(path, sizeof path, "%s/queue.db", dir);
    kiln_store *s = open_store(path);
    if (!s || kiln_store_set_sync(s, KILN_STORE_SYNC_NONE) != KILN_OK) goto out;
    for (long i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "q_%07ld", i);
        kiln_job *j = mkjob(id, i % 7, NULL, NULL);
        if (!j || kiln_store_job_create(s, "bench", j, 1000 + i, NULL) != KILN_OK) {
            kiln_job_free(j);
            goto out;
        }
        kiln_job_free(j);
    }
    double t0 = now_s();
    if (kiln_store_jobs_by_state(s, KILN_STATE_MASK(QUEUED), &v, &got) != KILN_OK) goto out;
    double t_read = now_s() - t0;
    int64_t pos = 0, bad = 0;
    t0 = now_s();
    for (size_t i = 0; i < got; i++)
        bad += kiln_store_job_position(s, v[i], &pos) != KILN_OK || pos != (int64_t)i + 1;
    double t_pos = now_s() - t0;
    /* the peer: one COUNT(*) per job, on its own connection, for 1000 jobs */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    size_t m = got < 1000 ? got : 1000;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT COUNT(*) FROM jobs WHERE state = 1 AND (priority > ?1 OR"
                           " (priority = ?1 AND (create_ns < ?2 OR"
                           " (create_ns = ?2 AND seq < ?3))))",
                           -1, &st, NULL) != SQLITE_OK)
        goto out;
    t0 = now_s();
    for (size_t i = 0; i < m; i++) {
        size_t at = got - 1 - i * (got / m); /* spread over the queue */
        sqlite3_bind_int64(st, 1, v[at]->priority);
        sqlite3_bind_int64(st, 2, v[at]->create_ns);
        sqlite3_bind_int64(st, 3, v[at]->seq);
        if (sqlite3_step(st) == SQLITE_ROW) bad += sqlite3_column_int64(st, 0) != (int64_t)at;
        sqlite3_reset(st);
    }
    double t_count = (now_s() - t0) / (double)m * (double)got;
    sqlite3_finalize(st);
    sqlite3_close(db);
    printf("queue of %zu: read %.1f ms; every jobPosition %.2f ms (%.2f us each; SQL COUNT "
           "per job would take %.1f ms, ratio %.0fx)%s\n",
           got, t_read * 1e3, t_pos * 1e3, t_pos * 1e6 / (double)got, t_count * 1e3,
           t_count / t_pos, bad ? " POSITIONS WRONG" : "");
    rc = bad ? 1 : 0;
out:
    kiln_job_records_free(v, got);
    kiln_store_close(s);
    return rc;
}

static int queued(const char *path, long n, long nodes)
{
    static const char *const shapes[4] = {
        "\"masterConfig\":{\"acceleratorConfig\":{\"count\":\"1\",\"type\":"
        "\"NVIDIA_TESLA_V100\"}}",
        "\"masterConfig\":{\"acceleratorConfig\":{\"count\":\"2\",\"type\":"
        "\"NVIDIA_TESLA_V100\"}},\"workerType\":\"n1-standard-8\",\"workerCount\":\"2\","
        "\"workerConfig\":{\"acceleratorConfig\":{\"count\":\"2\",\"type\":"
        "\"NVIDIA_TESLA_V100\"}}",
        "\"masterConfig\":{}",
        "\"masterConfig\":{},\"workerType\":\"n1-standard-8\",\"workerCount\":\"4\","
        "\"workerConfig\":{\"acceleratorConfig\":{\"count\":\"4\",\"type\":"
        "\"NVIDIA_TESLA_V100\"}}"};
    kiln_store *s = open_store(path);
    int rc = 1;
    if (!s || kiln_store_set_sync(s, KILN_STORE_SYNC_NONE) != KILN_OK) goto out;
    int64_t t0 = kiln_now_ns() - (int64_t)n * 1000000;
    for (long i = 0; i < n; i++) {
        char buf[1024];
        kiln_diag dg = KILN_DIAG_INIT;
        kiln_job *j = NULL;
        int len = snprintf(buf, sizeof buf,
                           "{\"jobId\":\"q_%07ld\",\"trainingInput\":{\"scaleTier\":\"CUSTOM\","
                           "\"region\":\"us-central1\",\"masterType\":\"n1-standard-8\","
                           "\"scheduling\":{\"priority\":%ld},%s}}",
                           i, i % 7, shapes[i % 4]);
        kiln_err err = kiln_job_from_json(buf, (size_t)len, &j, &dg);
        if (err == KILN_OK) err = kiln_store_job_create(s, "bench", j, t0 + i * 1000000, NULL);
        kiln_job_free(j);
        if (err != KILN_OK) {
            fprintf(stderr, "job %ld: %s %s\n", i, kiln_err_str(err),
                    dg.n ? dg.v[0].description : "");
            kiln_diag_free(&dg);
            goto out;
        }
        kiln_diag_free(&dg);
    }
    for (long i = 0; i < nodes; i++) {
        char name[32];
        snprintf(name, sizeof name, "node%04ld", i);
        if (kiln_store_node_set_cordon(s, name, true) != KILN_OK) goto out;
    }
    rc = 0;
out:
    kiln_store_close(s);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "queued") == 0)
        return queued(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc >= 4 && strcmp(argv[1], "fill") == 0)
        return fill(argv[2], atol(argv[3]), argc > 4 ? argv[4] : NULL);
    if (argc == 5 && strcmp(argv[1], "commit") == 0)
        return commit(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "queue") == 0) return queue(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: kiln-store-bench fill DB N [NODE] | commit DIR THREADS JOBS | "
                    "queue DIR N | queued DB N NODES\n");
    return 2;
}
