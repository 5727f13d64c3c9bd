/* src/store/filter.c - the list filter of projects.jobs.list (kiln/store.h).
 *
 * Grammar (a subset of Google's list filters, enough for gcloud's uses):
 *   filter := term { "AND" term }
 *   term   := field op value      op := ":" | "=" | "!="
 *   field  := "jobId" | "state" | "labels." KEY
 * A value may be double-quoted; with ":" a trailing '*' matches a prefix. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

#define FILTER_MAX_TERMS 32
#define FILTER_MAX_LEN   4096

enum op { OP_HAS, OP_EQ, OP_NE };
enum fld { F_JOB_ID, F_STATE, F_LABEL };

typedef struct term {
    enum fld field;
    enum op op;
    char *key;   /* label key */
    char *value; /* without quotes and without a trailing '*' when prefix */
    bool prefix;
} term;

struct kiln_job_filter {
    term t[FILTER_MAX_TERMS];
    size_t n;
};

void kiln_job_filter_free(kiln_job_filter *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->t[i].key);
        free(f->t[i].value);
    }
    free(f);
}

static bool is_field_char(char c)
{
    /* '/' for Kubernetes label keys: labels.app.kubernetes.io/name */
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-' || c == '/';
}

/* Parses one term at *p; advances *p. */
static bool parse_term(const char **p, term *t, kiln_diag *d)
{
    const char *s = *p, *start = s;
    while (is_field_char(*s))
        s++;
    size_t flen = (size_t)(s - start);
    if (flen == 0) {
        kiln_diag_add(d, "filter", "expected a field name (jobId, state, labels.KEY) at '%.20s'",
                      start);
        return false;
    }
    if (flen == 5 && strncmp(start, "jobId", 5) == 0)
        t->field = F_JOB_ID;
    else if (flen == 5 && strncmp(start, "state", 5) == 0)
        t->field = F_STATE;
    else if (flen > 7 && strncmp(start, "labels.", 7) == 0) {
        t->field = F_LABEL;
        t->key = strndup(start + 7, flen - 7);
        if (!t->key) return false;
    } else {
        kiln_diag_add(d, "filter", "unknown field '%.*s'; filterable: jobId, state, labels.KEY",
                      (int)flen, start);
        return false;
    }
    while (*s == ' ')
        s++;
    if (*s == ':')
        t->op = OP_HAS, s++;
    else if (*s == '=')
        t->op = OP_EQ, s++;
    else if (s[0] == '!' && s[1] == '=')
        t->op = OP_NE, s += 2;
    else {
        kiln_diag_add(d, "filter", "expected ':', '=' or '!=' after '%.*s'", (int)flen, start);
        return false;
    }
    while (*s == ' ')
        s++;
    const char *v = s;
    size_t vlen;
    if (*s == '"') {
        v = ++s;
        while (*s && *s != '"')
            s++;
        if (*s != '"') {
            kiln_diag_add(d, "filter", "unterminated quoted value");
            return false;
        }
        vlen = (size_t)(s - v);
        s++;
    } else {
        while (*s && *s != ' ')
            s++;
        vlen = (size_t)(s - v);
    }
    if (vlen == 0) {
        kiln_diag_add(d, "filter", "missing value after '%.*s'", (int)flen, start);
        return false;
    }
    if (t->op == OP_HAS && v[vlen - 1] == '*') {
        t->prefix = true;
        vlen--;
    }
    t->value = strndup(v, vlen);
    if (!t->value) return false;
    if (t->field == F_STATE && !t->prefix) {
        kiln_job_state st;
        if (!kiln_job_state_parse(t->value, &st)) {
            kiln_diag_add(d, "filter", "'%s' is not a job state (QUEUED, RUNNING, ...)", t->value);
            return false;
        }
    }
    *p = s;
    return true;
}

kiln_err kiln_job_filter_parse(const char *text, kiln_job_filter **out, kiln_diag *d)
{
    kiln_job_filter *f = calloc(1, sizeof *f);
    kiln_err err = KILN_EINVAL;
    const char *p = text;

    *out = NULL;
    if (!f) return KILN_ENOMEM;
    if (strlen(text) > FILTER_MAX_LEN) {
        kiln_diag_add(d, "filter", "longer than %d characters", FILTER_MAX_LEN);
        goto out;
    }
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p) break;
        if (f->n > 0) {
            if (strncmp(p, "AND ", 4) != 0) {
                kiln_diag_add(d, "filter", "terms must be joined with AND (at '%.20s')", p);
                goto out;
            }
            p += 4;
            while (*p == ' ')
                p++;
        }
        if (f->n == FILTER_MAX_TERMS) {
            kiln_diag_add(d, "filter", "more than %d terms", FILTER_MAX_TERMS);
            goto out;
        }
        if (!parse_term(&p, &f->t[f->n], d)) {
            f->n++; /* so its strings are freed */
            goto out;
        }
        f->n++;
    }
    err = KILN_OK;
out:
    if (err != KILN_OK) {
        kiln_job_filter_free(f);
        f = NULL;
    }
    *out = f;
    return err;
}

static bool match_value(const term *t, const char *have)
{
    bool eq;
    if (!have) have = "";
    if (t->prefix)
        eq = strncmp(have, t->value, strlen(t->value)) == 0;
    else
        eq = strcmp(have, t->value) == 0;
    return t->op == OP_NE ? !eq : eq;
}

bool kiln_job_filter_match(const kiln_job_filter *f, const kiln_job_record *r)
{
    for (size_t i = 0; i < f->n; i++) {
        const term *t = &f->t[i];
        const char *have = NULL;
        switch (t->field) {
        case F_JOB_ID:
            have = r->job->job_id;
            break;
        case F_STATE:
            have = kiln_job_state_name(r->job->state);
            break;
        case F_LABEL:
            have = kiln_map_get(&r->job->labels, t->key);
            break;
        }
        if (!match_value(t, have)) return false;
    }
    return true;
}

/* ---------- the SQL that narrows a list (store_int.h) ----------
 *
 * Term i binds parameters ?(3 + 2i) and ?(4 + 2i). A term becomes SQL only
 * when the SQL selects exactly what kiln_job_filter_match() would or more
 * (the match still runs on every row); the rest are left to the match. The
 * walk is driven by an index in seq order, so a page stops after `limit`
 * matches: its cost is the page divided by how selective the other terms
 * are, not the size of the store.
 *   - the first label equality drives the walk through job_labels
 *     (project, key, value, seq); CROSS JOIN makes SQLite keep that order;
 *   - otherwise state = X walks jobs (project, state, seq), and anything else
 *     jobs (project, seq);
 *   - further label equalities are a primary-key probe each. */

static bool label_eq(const term *t)
{
    return t->field == F_LABEL && t->op != OP_NE && !t->prefix;
}

/* The state a value names, only when the match would compare equal to it:
 * kiln_job_state_parse may accept spellings the match does not. */
static bool state_exact(const term *t, kiln_job_state *st)
{
    return !t->prefix && kiln_job_state_parse(t->value, st) &&
           strcmp(kiln_job_state_name(*st), t->value) == 0;
}

static const term *driver(const kiln_job_filter *f)
{
    for (size_t i = 0; f && i < f->n; i++)
        if (label_eq(&f->t[i])) return &f->t[i];
    return NULL;
}

char *kiln__filter_sql(const kiln_job_filter *f, const char *cols)
{
    size_t cap = 512 + strlen(cols) + (f ? f->n : 0) * 160 + KILN_STORE_STATES * 4, o = 0;
    char *q = malloc(cap);
    const term *drv = driver(f);
    if (!q) return NULL;
        /* cap is generous; a text that would not fit is refused, never cut */
#define PUT(...) (o += o < cap ? (size_t)snprintf(q + o, cap - o, __VA_ARGS__) : 0)
    if (drv)
        PUT("SELECT %s FROM job_labels l CROSS JOIN jobs j ON j.seq = l.seq"
            " WHERE l.project = ?1 AND l.key = ?%zu AND l.value = ?%zu AND l.seq > ?2"
            " AND j.project = ?1",
            cols, 3 + 2 * (size_t)(drv - f->t), 4 + 2 * (size_t)(drv - f->t));
    else
        PUT("SELECT %s FROM jobs j WHERE j.project = ?1 AND j.seq > ?2", cols);
    for (size_t i = 0; f && i < f->n; i++) {
        const term *t = &f->t[i];
        size_t a = 3 + 2 * i, b = a + 1;
        kiln_job_state st;
        if (t == drv) continue;
        switch (t->field) {
        case F_LABEL:
            if (label_eq(t))
                PUT(" AND EXISTS (SELECT 1 FROM job_labels x WHERE x.project = ?1"
                    " AND x.key = ?%zu AND x.value = ?%zu AND x.seq = j.seq)",
                    a, b);
            break;
        case F_STATE:
            if (t->op != OP_NE && t->prefix) { /* the states whose names start so */
                PUT(" AND j.state IN (-1");
                for (int s = 0; s < KILN_STORE_STATES; s++)
                    if (strncmp(kiln_job_state_name((kiln_job_state)s), t->value,
                                strlen(t->value)) == 0)
                        PUT(",%d", s);
                PUT(")");
            } else if (state_exact(t, &st)) {
                PUT(" AND j.state %s ?%zu", t->op == OP_NE ? "!=" : "=", a);
            }
            break;
        case F_JOB_ID:
            if (t->op != OP_NE && !t->prefix) PUT(" AND j.job_id = ?%zu", a);
            break;
        }
    }
    PUT(" ORDER BY %s", drv ? "l.seq" : "j.seq");
#undef PUT
    if (o >= cap) {
        free(q);
        return NULL;
    }
    return q;
}

void kiln__filter_bind(const kiln_job_filter *f, sqlite3_stmt *st)
{
    for (size_t i = 0; f && i < f->n; i++) {
        const term *t = &f->t[i];
        int a = 3 + 2 * (int)i;
        kiln_job_state s;
        switch (t->field) {
        case F_LABEL:
            sqlite3_bind_text(st, a, t->key, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, a + 1, t->value, -1, SQLITE_STATIC);
            break;
        case F_STATE:
            if (state_exact(t, &s)) sqlite3_bind_int(st, a, (int)s);
            break;
        case F_JOB_ID:
            sqlite3_bind_text(st, a, t->value, -1, SQLITE_STATIC);
            break;
        }
    }
}
