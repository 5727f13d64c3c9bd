/* tests/unit/test_logfilter.c - the Logging filter subset (util/logfilter.h):
 * the filters gcloud really sends, precedence, severity and timestamp
 * comparisons, and refusals that name the term. */
#include "test.h"
#include "util/logfilter.h"

#include <stdint.h>
#include <stdlib.h>

static kiln_log_view entry(const char *job, const char *task, int sev, const char *ts,
                           const char *insert)
{
    kiln_log_view e = {.resource_type = "ml_job",
                       .job_id = job,
                       .task_name = task,
                       .project_id = "p1",
                       .label_task_name = task,
                       .log_name = "projects/p1/logs/kiln",
                       .insert_id = insert,
                       .severity = sev};
    kiln_rfc3339_parse(ts, &e.ts_ns);
    return e;
}

/* 1 match, 0 no match, -1 refused */
static int run(const char *filter, const kiln_log_view *e)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_log_filter *f = NULL;
    int r = -1;
    if (kiln_log_filter_parse(filter, &f, &d) == KILN_OK) r = kiln_log_filter_match(f, e);
    kiln_log_filter_free(f);
    kiln_diag_free(&d);
    return r;
}

static const char *refusal(const char *filter)
{
    static char msg[512];
    kiln_diag d = KILN_DIAG_INIT;
    kiln_log_filter *f = NULL;
    msg[0] = '\0';
    if (kiln_log_filter_parse(filter, &f, &d) != KILN_OK && d.n)
        snprintf(msg, sizeof msg, "%s", d.v[0].description);
    kiln_log_filter_free(f);
    kiln_diag_free(&d);
    return msg;
}

int main(void)
{
    kiln_log_view a = entry("census_1", "master-replica-0", 200, "2026-11-24T20:16:00.250Z",
                            "00000000000000000100");
    kiln_log_view w = entry("census_1", "worker-replica-0", 400, "2026-11-24T20:16:05.000Z",
                            "00000000000000000200");

    /* what `gcloud ai-platform jobs stream-logs --task-name` sends */
    const char *g = "(resource.type=\"ml_job\" OR resource.type=\"cloudml_job\") AND "
                    "resource.labels.job_id=\"census_1\" AND "
                    "(resource.labels.task_name=\"master-replica-0\" OR "
                    "labels.task_name=\"master-replica-0\") AND "
                    "timestamp>=\"1970-01-01T01:00:00.000000000Z\" AND "
                    "timestamp<\"2026-11-24T20:16:03.000000+00:00\"";
    CHECK(run(g, &a) == 1);
    CHECK(run(g, &w) == 0);
    /* the insertId tie-break of stream.py's LogPosition */
    const char *tie = "((timestamp=\"2026-11-24T20:16:00.250000000Z\" AND "
                      "insertId>\"00000000000000000050\") OR "
                      "timestamp>\"2026-11-24T20:16:00.250000000Z\")";
    CHECK(run(tie, &a) == 1);
    CHECK(run(tie, &w) == 1);
    CHECK(run("timestamp=\"2026-11-24T20:16:00.25Z\" AND insertId>\"00000000000000000100\"", &a) ==
          0);
    /* offsets: 21:16:00.25+01:00 is the same instant */
    CHECK(run("timestamp=\"2026-11-24T21:16:00.250+01:00\"", &a) == 1);
    CHECK(run("timestamp<2026-11-24T20:16:01Z", &a) == 1); /* unquoted */
    CHECK(run("timestamp<2026-11-24T20:16:01Z", &w) == 0);

    /* severity by level, names or numbers, any case */
    CHECK(run("severity>=WARNING", &a) == 0);
    CHECK(run("severity>=WARNING", &w) == 1);
    CHECK(run("severity>=warning", &w) == 1);
    CHECK(run("severity=400", &w) == 1);
    CHECK(run("severity<INFO", &a) == 0);
    CHECK(run("severity<=INFO", &a) == 1);

    /* precedence: AND binds tighter than OR; juxtaposition is AND; NOT and - */
    CHECK(run("severity=ERROR OR severity=INFO AND resource.labels.job_id=census_1", &a) == 1);
    CHECK(run("(severity=ERROR OR severity=INFO) resource.labels.job_id=other", &a) == 0);
    CHECK(run("NOT severity>=WARNING", &a) == 1);
    CHECK(run("-severity>=WARNING", &w) == 0);
    CHECK(run("NOT (severity=INFO OR severity=WARNING)", &w) == 0);
    CHECK(run("resource.labels.task_name:master", &a) == 1);
    CHECK(run("resource.labels.task_name:master", &w) == 0);
    CHECK(run("resource.labels.job_id!=census_1", &a) == 0);
    CHECK(run("logName=\"projects/p1/logs/kiln\"", &a) == 1);
    CHECK(run("resource.labels.project_id=p1", &a) == 1);
    /* a label kiln's entries lack matches nothing, so its negation matches */
    CHECK(run("labels.trial_id=\"3\"", &a) == 0);
    CHECK(run("NOT labels.trial_id=\"3\"", &a) == 1);
    CHECK(run("", &a) == 1);
    CHECK(run("   ", &a) == 1);
    CHECK(run("resource.labels.job_id=\"a \\\"quoted\\\" id\"", &a) == 0);

    /* the job a filter pins down */
    kiln_diag d = KILN_DIAG_INIT;
    kiln_log_filter *f = NULL;
    CHECK(kiln_log_filter_parse(g, &f, &d) == KILN_OK);
    CHECK_STR(kiln_log_filter_job(f), "census_1");
    kiln_log_filter_free(f);
    f = NULL;
    CHECK(kiln_log_filter_parse("resource.labels.job_id=a OR severity>=ERROR", &f, &d) == KILN_OK);
    CHECK(kiln_log_filter_job(f) == NULL);
    kiln_log_filter_free(f);
    kiln_diag_free(&d);

    /* refusals name the term */
    CHECK(strstr(refusal("jsonPayload.message:\"loss\""), "jsonPayload.message") != NULL);
    CHECK(strstr(refusal("hello"), "hello") != NULL);
    CHECK(strstr(refusal("severity>=LOUD"), "LOUD") != NULL);
    CHECK(strstr(refusal("timestamp>\"yesterday\""), "yesterday") != NULL);
    CHECK(strstr(refusal("timestamp:\"2026\""), "timestamp") != NULL);
    CHECK(strstr(refusal("(severity=INFO"), "')'") != NULL);
    CHECK(strstr(refusal("severity=\"INFO"), "unterminated") != NULL);
    CHECK(strstr(refusal("severity=INFO)"), "unexpected") != NULL);
    CHECK(strstr(refusal("severity="), "value") != NULL);
    CHECK(strstr(refusal("resource.labels.zone=us"), "resource.labels.zone") != NULL);
    CHECK(refusal("severity=INFO AND")[0] != '\0');
    CHECK(refusal("NOT")[0] != '\0');

    /* caps: nesting and term count */
    char deep[200];
    memset(deep, '(', 100);
    strcpy(deep + 100, "severity=INFO");
    CHECK(strstr(refusal(deep), "deeper") != NULL);
    size_t cap = 700 * 16 + 1;
    char *many = malloc(cap);
    many[0] = '\0';
    for (int i = 0; i < 700; i++)
        strcat(many, i ? " OR severity=1" : "severity=1");
    CHECK(strstr(refusal(many), "terms") != NULL);
    free(many);

    /* timestamps */
    int64_t ns = 0;
    CHECK(kiln_rfc3339_parse("1970-01-01T00:00:01.5Z", &ns) && ns == 1500000000LL);
    CHECK(kiln_rfc3339_parse("1970-01-01T01:00:00-01:00", &ns) && ns == 7200000000000LL);
    /* beyond int64 nanoseconds: saturated, not overflowed (found by the fuzzer) */
    CHECK(kiln_rfc3339_parse("5663-01-01T01:00:00.000000000Z", &ns) && ns == INT64_MAX);
    CHECK(kiln_rfc3339_parse("0001-01-01T00:00:00Z", &ns) && ns == INT64_MIN);
    CHECK(run("timestamp<\"9999-12-31T23:59:59Z\"", &a) == 1);
    CHECK(!kiln_rfc3339_parse("1970-01-01 00:00:01Z", &ns));
    CHECK(!kiln_rfc3339_parse("1970-01-01T00:00:01.Z", &ns));
    CHECK(!kiln_rfc3339_parse("1970-13-01T00:00:01Z", &ns));
    CHECK(!kiln_rfc3339_parse("1970-01-01T00:00:01Zjunk", &ns));
    TEST_DONE();
}
