/* src/store/filter.c - the list filter of projects.jobs.list (kiln/store.h).
 *
 * Grammar (a subset of Google's list filters, enough for gcloud's uses):
 *   filter := term { "AND" term }
 *   term   := field op value      op := ":" | "=" | "!="
 *   field  := "jobId" | "state" | "labels." KEY
 * A value may be double-quoted; with ":" a trailing '*' matches a prefix. */
#include "kiln/store.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

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
