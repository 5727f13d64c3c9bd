/* src/util/logfilter.h - the Cloud Logging filter subset that gcloud sends
 * (`gcloud ai-platform jobs stream-logs`, `gcloud logging read`).
 *
 * A pure parser and matcher with no I/O, so that the unit test and the
 * libFuzzer target exercise exactly what kilnd's entries:list runs.
 *
 * Grammar (Logging's query language, the part gcloud uses):
 *   expr    := and { "OR" and }
 *   and     := unary { ["AND"] unary }          juxtaposition is AND
 *   unary   := ("NOT" | "-") unary | primary
 *   primary := "(" expr ")" | field op value
 *   op      := "=" | "!=" | ">" | ">=" | "<" | "<=" | ":"    (":" = has/substring)
 *   field   := resource.type | resource.labels.(job_id|task_name|project_id)
 *            | labels.KEY | severity | timestamp | insertId | logName
 *   value   := "double-quoted" (\" and \\ escapes) | a bare word
 * severity compares by level (DEBUG < INFO < ... < EMERGENCY); timestamp by
 * time (RFC 3339, any offset); the rest as strings. A field the entry lacks
 * matches nothing (so NOT of it matches). Anything else is refused, naming
 * the term, never ignored. */
#ifndef KILN_LOGFILTER_H
#define KILN_LOGFILTER_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/diag.h"

#define KILN_LOGFILTER_MAX_LEN   20000 /* bytes of filter text */
#define KILN_LOGFILTER_MAX_NODES 512
#define KILN_LOGFILTER_MAX_DEPTH 32

typedef struct kiln_log_filter kiln_log_filter;

/* One log entry as the matcher sees it; NULL strings are absent fields. */
typedef struct kiln_log_view {
    const char *resource_type, *job_id, *task_name, *project_id;
    const char *label_task_name; /* labels.task_name */
    const char *log_name, *insert_id;
    int severity; /* kiln_log_severity() of the entry's severity */
    int64_t ts_ns;
} kiln_log_view;

/* Parses text (NUL-terminated). On success *out owns the filter (free it with
 * kiln_log_filter_free); an empty text matches everything. On failure *out is
 * NULL and d names the offending term. */
kiln_err kiln_log_filter_parse(const char *text, kiln_log_filter **out, kiln_diag *d);
void kiln_log_filter_free(kiln_log_filter *f);
bool kiln_log_filter_match(const kiln_log_filter *f, const kiln_log_view *e);
/* The job id that every match must have (a resource.labels.job_id="X" term
 * ANDed at the top), or NULL: lets the caller read one job's log, not all. */
const char *kiln_log_filter_job(const kiln_log_filter *f);

/* LogSeverity's number for a name (DEFAULT 0 ... EMERGENCY 800) or a decimal
 * number; -1 when it is neither. */
int kiln_log_severity(const char *name);
/* RFC 3339 ("2026-11-24T20:16:00.123456Z", "...+01:00") to ns since the
 * epoch; false if it is not one. */
bool kiln_rfc3339_parse(const char *s, int64_t *ns);

#endif
