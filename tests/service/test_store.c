/* tests/service/test_store.c - the SQLite store: create/duplicate, state
 * compare-and-set, queue order and positions, list filter and pagination,
 * labels, persistence across reopen, node cordons. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/store.h"
#include "job_fixture.h"
#include "test.h"

static void add(kiln_store *s, const char *project, const char *id, int64_t prio, int64_t t)
{
    kiln_job *j = mkjob(id, prio, NULL, NULL);
    CHECK(kiln_store_job_create(s, project, j, t, NULL) == KILN_OK);
    kiln_job_free(j);
}

int main(void)
{
    char dir[] = "/tmp/kiln-store-XXXXXX", path[256];
    kiln_store *s = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job_record *r = NULL, **v = NULL;
    size_t n = 0;
    int64_t next = 0, pos = 0;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/k.db", dir);
    CHECK(kiln_store_open(path, &s, &d) == KILN_OK);

    /* create, duplicate, get */
    kiln_job *j = mkjob("census_1", 0, NULL, NULL);
    kiln_map_set(&j->labels, "team", "a");
    j->state = KILN_STATE_SUCCEEDED; /* output-only: ignored on create */
    CHECK(kiln_store_job_create(s, "p1", j, 1000000000, &r) == KILN_OK);
    CHECK(r && r->job->state == KILN_STATE_QUEUED);
    CHECK_STR(r->job->create_time, "1970-01-01T00:00:01.000Z");
    CHECK_STR(kiln_map_get(&r->job->labels, "team"), "a");
    kiln_job_record_free(r);
    r = NULL;
    CHECK(kiln_store_job_create(s, "p1", j, 2, NULL) == KILN_EEXIST);
    CHECK(kiln_store_job_create(s, "p2", j, 2, NULL) == KILN_OK); /* other project: fine */
    kiln_job_free(j);
    CHECK(kiln_store_job_get(s, "p1", "nope", &r) == KILN_ENOTFOUND && r == NULL);

    /* compare-and-set transitions */
    kiln_job_state was = KILN_STATE_UNSPECIFIED;
    CHECK(kiln_store_job_transition(s, "p1", "census_1", KILN_STATE_MASK(RUNNING),
                                    KILN_STATE_SUCCEEDED, NULL, 5, &was) == KILN_ECONFLICT);
    CHECK(was == KILN_STATE_QUEUED);
    CHECK(kiln_store_job_transition(s, "p1", "census_1", KILN_STATE_MASK(QUEUED),
                                    KILN_STATE_RUNNING, NULL, 3000000000, NULL) == KILN_OK);
    CHECK(kiln_store_job_transition(s, "p1", "census_1", KILN_STATE_MASK(RUNNING),
                                    KILN_STATE_FAILED, "boom", 4000000000, NULL) == KILN_OK);
    CHECK(kiln_store_job_get(s, "p1", "census_1", &r) == KILN_OK);
    CHECK(r->job->state == KILN_STATE_FAILED);
    CHECK_STR(r->job->error_message, "boom");
    CHECK_STR(r->job->start_time, "1970-01-01T00:00:03.000Z");
    CHECK_STR(r->job->end_time, "1970-01-01T00:00:04.000Z");
    CHECK(r->start_ns == 3000000000);
    CHECK(r->end_ns == 4000000000);
    char *etag1 = strdup(r->job->etag);
    kiln_job_record_free(r);
    r = NULL;
    CHECK(kiln_store_job_transition(s, "p1", "nope", KILN_STATES_ACTIVE, KILN_STATE_CANCELLED, NULL,
                                    1, NULL) == KILN_ENOTFOUND);

    /* the version read on a thread's own connection follows every write */
    int64_t vseq = 0, v1 = 0, v2 = 0;
    kiln_job_state vst = KILN_STATE_UNSPECIFIED;
    CHECK(kiln_store_job_version(s, "p1", "census_1", &vseq, &v1, &vst) == KILN_OK);
    CHECK(vst == KILN_STATE_FAILED && vseq > 0);
    CHECK(kiln_store_job_set_runtime(s, "p1", "census_1", 0, 0, NULL) == KILN_OK);
    CHECK(kiln_store_job_version(s, "p1", "census_1", &vseq, &v2, &vst) == KILN_OK && v2 == v1 + 1);
    CHECK(kiln_store_job_version(s, "p1", "nope", &vseq, &v2, &vst) == KILN_ENOTFOUND);

    /* counts by state (/metrics): census_1 FAILED in p1, QUEUED in p2 */
    int64_t counts[KILN_STORE_STATES];
    CHECK(kiln_store_job_counts(s, counts) == KILN_OK);
    CHECK(counts[KILN_STATE_FAILED] == 1 && counts[KILN_STATE_QUEUED] == 1);
    CHECK(counts[KILN_STATE_RUNNING] == 0 && counts[KILN_STATE_SUCCEEDED] == 0);
    /* every write so far was timed: 2 creates (and a refused one), 3 transitions
     * (and a refused one), a runtime; the histogram is cumulative */
    kiln_store_write_stats ws;
    kiln_store_write_stats_get(s, &ws);
    CHECK_MSG(ws.count >= 7, "%llu writes", (unsigned long long)ws.count);
    CHECK(ws.sum_seconds > 0.0 && ws.le[KILN_STORE_WRITE_BUCKETS - 1] <= ws.count);
    for (int b = 1; b < KILN_STORE_WRITE_BUCKETS; b++)
        CHECK(ws.le[b] >= ws.le[b - 1] &&
              kiln_store_write_bounds[b] > kiln_store_write_bounds[b - 1]);

    /* labels (etag changes) */
    kiln_map lab = {0};
    kiln_map_set(&lab, "env", "prod");
    CHECK(kiln_store_job_set_labels(s, "p1", "census_1", &lab, &r) == KILN_OK);
    CHECK(r && kiln_map_get(&r->job->labels, "team") == NULL);
    CHECK_STR(kiln_map_get(&r->job->labels, "env"), "prod");
    CHECK(r && strcmp(r->job->etag, etag1) != 0);
    CHECK(r && r->job->state == KILN_STATE_FAILED); /* state untouched by labels */
    kiln_job_record_free(r);
    r = NULL;
    kiln_map_clear(&lab);
    free(etag1);

    /* queue order: priority desc, then submit time */
    add(s, "p1", "low_early", 0, 10);
    add(s, "p1", "high_late", 500, 30);
    add(s, "p1", "low_late", 0, 20);
    CHECK(kiln_store_jobs_by_state(s, KILN_STATE_MASK(QUEUED), &v, &n) == KILN_OK);
    CHECK(n == 4); /* + census_1 of p2 (created at t=2) */
    if (n == 4) {
        CHECK_STR(v[0]->job->job_id, "high_late");
        CHECK_STR(v[1]->job->job_id, "census_1");
        CHECK_STR(v[2]->job->job_id, "low_early");
        CHECK_STR(v[3]->job->job_id, "low_late");
        CHECK(kiln_store_job_position(s, v[0], &pos) == KILN_OK && pos == 1);
        CHECK(kiln_store_job_position(s, v[3], &pos) == KILN_OK && pos == 4);
    }
    kiln_job_records_free(v, n);

    /* list: pagination over 23 more jobs, filters */
    for (int i = 0; i < 23; i++) {
        char id[32];
        snprintf(id, sizeof id, "rnn_%02d", i);
        add(s, "p1", id, 0, 100 + i);
    }
    size_t total = 0;
    int pages = 0;
    int64_t after = 0;
    do {
        CHECK(kiln_store_job_list(s, "p1", NULL, after, 10, &v, &n, &next) == KILN_OK);
        total += n;
        pages++;
        kiln_job_records_free(v, n);
        after = next;
    } while (next && pages < 10);
    CHECK_MSG(total == 27 && pages == 3, "total %zu pages %d", total, pages);

    kiln_job_filter *f = NULL;
    CHECK(kiln_job_filter_parse("jobId:rnn_1* AND state:QUEUED", &f, &d) == KILN_OK);
    CHECK(kiln_store_job_list(s, "p1", f, 0, 100, &v, &n, &next) == KILN_OK);
    CHECK(n == 10 && next == 0); /* rnn_10 .. rnn_19 */
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    CHECK(kiln_job_filter_parse("state:FAILED", &f, &d) == KILN_OK);
    CHECK(kiln_store_job_list(s, "p1", f, 0, 100, &v, &n, &next) == KILN_OK);
    CHECK(n == 1 && n == 1 && strcmp(v[0]->job->job_id, "census_1") == 0);
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    CHECK(kiln_job_filter_parse("labels.env=prod", &f, &d) == KILN_OK);
    CHECK(kiln_store_job_list(s, "p1", f, 0, 100, &v, &n, &next) == KILN_OK && n == 1);
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    CHECK(kiln_job_filter_parse("jobId!=census_1 AND jobId:low*", &f, &d) == KILN_OK);
    CHECK(kiln_store_job_list(s, "p1", f, 0, 100, &v, &n, &next) == KILN_OK && n == 2);
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    /* bad filters: each names the filter */
    const char *bad[] = {"color:red", "state:BOILING", "jobId:a OR jobId:b", "jobId",
                         "jobId:\"open"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kiln_diag_clear(&d);
        CHECK_MSG(kiln_job_filter_parse(bad[i], &f, &d) == KILN_EINVAL && f == NULL &&
                      kiln_diag_has(&d, "filter"),
                  "%s", bad[i]);
    }

    /* cordons and runtime */
    bool c = true;
    CHECK(kiln_store_node_cordoned(s, "n1", &c) == KILN_OK && !c);
    CHECK(kiln_store_node_set_cordon(s, "n1", true) == KILN_OK);
    CHECK(kiln_store_job_set_runtime(s, "p1", "rnn_00", 2, 1, "{\"replicas\":[]}") == KILN_OK);

    /* persistence: close and reopen */
    kiln_store_close(s);
    s = NULL;
    CHECK(kiln_store_open(path, &s, &d) == KILN_OK);
    CHECK(kiln_store_node_cordoned(s, "n1", &c) == KILN_OK && c);
    CHECK(kiln_store_job_get(s, "p1", "rnn_00", &r) == KILN_OK);
    CHECK(r && r->restarts == 2 && r->failures == 1 && r->runtime &&
          strcmp(r->runtime, "{\"replicas\":[]}") == 0);
    kiln_job_record_free(r);
    CHECK(kiln_store_job_list(s, "p1", NULL, 0, 100, &v, &n, &next) == KILN_OK && n == 27);
    kiln_job_records_free(v, n);

    kiln_store_close(s);
    kiln_diag_free(&d);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
