/* src/util/logfilter.c - Cloud Logging filters (see logfilter.h). A
 * recursive-descent parser into a node array; the depth, the node count and
 * the text length are capped because the text comes from the network. */
#include "util/logfilter.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum kind { N_AND, N_OR, N_NOT, N_CMP };
enum op { OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_HAS };
enum fld {
    F_RTYPE,
    F_JOB,
    F_TASK,
    F_PROJECT,
    F_LABEL_TASK,
    F_LABEL_OTHER,
    F_SEV,
    F_TS,
    F_INSERT,
    F_LOGNAME
};

typedef struct node {
    enum kind kind;
    int a, b; /* children (AND, OR: both; NOT: a) */
    enum fld field;
    enum op op;
    char *value;
    int64_t num; /* severity level or timestamp ns */
} node;

struct kiln_log_filter {
    node n[KILN_LOGFILTER_MAX_NODES];
    int count, root; /* root -1: match everything */
};

typedef struct parser {
    const char *p;
    kiln_log_filter *f;
    kiln_diag *d;
    int depth;
    bool failed;
} parser;

void kiln_log_filter_free(kiln_log_filter *f)
{
    if (!f) return;
    for (int i = 0; i < f->count; i++)
        free(f->n[i].value);
    free(f);
}

int kiln_log_severity(const char *name)
{
    static const char *const names[] = {"DEFAULT", "DEBUG",    "INFO",  "NOTICE",   "WARNING",
                                        "ERROR",   "CRITICAL", "ALERT", "EMERGENCY"};
    for (int i = 0; i < 9; i++)
        if (strcasecmp(name, names[i]) == 0) return i * 100;
    if (!*name || strlen(name) > 4) return -1;
    for (const char *q = name; *q; q++)
        if (!isdigit((unsigned char)*q)) return -1;
    return atoi(name);
}

static bool digits(const char *s, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        *v = *v * 10 + (s[i] - '0');
    }
    return true;
}

bool kiln_rfc3339_parse(const char *s, int64_t *ns)
{
    int y, mo, da, h, mi, se;
    if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
        s[7] != '-' || !digits(s + 8, 2, &da) || (s[10] != 'T' && s[10] != 't') ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &se))
        return false;
    if (mo < 1 || mo > 12 || da < 1 || da > 31 || h > 23 || mi > 59 || se > 60) return false;
    const char *q = s + 19;
    int64_t frac = 0;
    if (*q == '.') {
        int nd = 0;
        for (q++; isdigit((unsigned char)*q); q++, nd++)
            if (nd < 9) frac = frac * 10 + (*q - '0');
        if (nd == 0) return false;
        for (; nd < 9; nd++)
            frac *= 10;
    }
    int64_t off = 0;
    if (*q == 'Z' || *q == 'z') {
        q++;
    } else if (*q == '+' || *q == '-') {
        int oh, om;
        if (!digits(q + 1, 2, &oh) || q[3] != ':' || !digits(q + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        off = (oh * 3600 + om * 60) * (*q == '-' ? -1 : 1);
        q += 6;
    } else {
        return false;
    }
    if (*q) return false;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = da,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = se};
    int64_t t = (int64_t)timegm(&tm) - off;
    /* int64 nanoseconds end in 1677 and 2262: a time beyond compares as the
     * end (a filter may well say "until 9999-12-31") */
    if (t >= INT64_MAX / 1000000000LL)
        *ns = INT64_MAX;
    else if (t <= INT64_MIN / 1000000000LL)
        *ns = INT64_MIN;
    else
        *ns = t * 1000000000LL + frac;
    return true;
}

/* ---------- lexing ---------- */

static void skip_ws(parser *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

static int fail(parser *ps, const char *fmt, const char *what)
{
    if (!ps->failed) kiln_diag_add(ps->d, "filter", fmt, what);
    ps->failed = true;
    return -1;
}

/* A keyword (AND, OR, NOT) followed by a space or '(' at the cursor. */
static bool keyword(parser *ps, const char *kw)
{
    size_t n = strlen(kw);
    if (strncmp(ps->p, kw, n) != 0) return false;
    char c = ps->p[n];
    if (c && !isspace((unsigned char)c) && c != '(') return false;
    ps->p += n;
    return true;
}

static bool is_word_char(char c)
{
    return c && !isspace((unsigned char)c) && !strchr("()=!<>:\"", c);
}

/* A quoted or bare value, malloc'd; NULL on error. */
static char *value(parser *ps)
{
    skip_ws(ps);
    const char *s = ps->p;
    if (*s == '"') {
        size_t cap = strlen(s), n = 0;
        char *v = malloc(cap + 1);
        if (!v) return NULL;
        for (s++; *s && *s != '"'; s++) {
            if (*s == '\\' && s[1]) s++;
            v[n++] = *s;
        }
        if (*s != '"') {
            free(v);
            fail(ps, "unterminated quoted value at '%.40s'", ps->p);
            return NULL;
        }
        v[n] = '\0';
        ps->p = s + 1;
        return v;
    }
    /* a bare value may hold ':' (an unquoted timestamp) */
    while (*s && !isspace((unsigned char)*s) && !strchr("()\"", *s))
        s++;
    if (s == ps->p) {
        fail(ps, "expected a value at '%.40s'", ps->p);
        return NULL;
    }
    char *v = strndup(ps->p, (size_t)(s - ps->p));
    ps->p = s;
    return v;
}

static int new_node(parser *ps, enum kind k, int a, int b)
{
    if (ps->f->count >= KILN_LOGFILTER_MAX_NODES)
        return fail(ps, "the filter has more than %s terms", "512");
    int i = ps->f->count++;
    ps->f->n[i] = (node){.kind = k, .a = a, .b = b};
    return i;
}

/* ---------- parsing ---------- */

static int expr(parser *ps);

static bool field_of(const char *s, size_t n, enum fld *f)
{
    static const struct {
        const char *name;
        enum fld f;
    } t[] = {{"resource.type", F_RTYPE},
             {"resource.labels.job_id", F_JOB},
             {"resource.labels.task_name", F_TASK},
             {"resource.labels.project_id", F_PROJECT},
             {"labels.task_name", F_LABEL_TASK},
             {"severity", F_SEV},
             {"timestamp", F_TS},
             {"receiveTimestamp", F_TS},
             {"insertId", F_INSERT},
             {"logName", F_LOGNAME}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (strlen(t[i].name) == n && strncmp(s, t[i].name, n) == 0) {
            *f = t[i].f;
            return true;
        }
    /* other labels: kiln's entries carry none, so such a term matches nothing */
    if (n > 7 && strncmp(s, "labels.", 7) == 0) {
        *f = F_LABEL_OTHER;
        return true;
    }
    return false;
}

static int comparison(parser *ps)
{
    const char *start = ps->p, *s = ps->p;
    while (is_word_char(*s))
        s++;
    size_t fl = (size_t)(s - start);
    ps->p = s;
    skip_ws(ps);
    static const struct {
        const char *t;
        enum op op;
    } ops[] = {{">=", OP_GE}, {"<=", OP_LE}, {"!=", OP_NE}, {"=", OP_EQ},
               {">", OP_GT},  {"<", OP_LT},  {":", OP_HAS}};
    int oi = -1;
    for (int i = 0; i < 7 && oi < 0; i++)
        if (strncmp(ps->p, ops[i].t, strlen(ops[i].t)) == 0) oi = i;
    if (fl == 0) return fail(ps, "expected a field name at '%.40s'", start);
    if (oi < 0)
        return fail(ps, "unsupported term '%.40s': only FIELD OP VALUE comparisons are served",
                    start);
    enum fld f;
    if (!field_of(start, fl, &f))
        return fail(ps,
                    "unsupported field in '%.40s' (kiln serves resource.type, "
                    "resource.labels.*, labels.*, severity, timestamp, insertId, logName)",
                    start);
    ps->p += strlen(ops[oi].t);
    char *v = value(ps);
    if (!v) return ps->failed ? -1 : fail(ps, "out of memory at '%.40s'", start);
    int i = new_node(ps, N_CMP, -1, -1);
    if (i < 0) {
        free(v);
        return -1;
    }
    node *n = &ps->f->n[i];
    n->field = f;
    n->op = ops[oi].op;
    n->value = v;
    if (f == F_SEV && (n->num = kiln_log_severity(v)) < 0)
        return fail(ps, "'%.40s' is not a severity (DEFAULT, DEBUG, INFO, ... EMERGENCY)", v);
    if (f == F_TS && n->op == OP_HAS)
        return fail(ps, "timestamp takes =, !=, <, <=, >, >= (not ':') in '%.40s'", start);
    if (f == F_TS && !kiln_rfc3339_parse(v, &n->num))
        return fail(ps, "'%.40s' is not an RFC 3339 timestamp", v);
    return i;
}

static int unary(parser *ps)
{
    skip_ws(ps);
    if (++ps->depth > KILN_LOGFILTER_MAX_DEPTH)
        return fail(ps, "the filter nests deeper than %s levels", "32");
    int r;
    if (keyword(ps, "NOT") || (*ps->p == '-' && ps->p++)) {
        int a = unary(ps);
        r = a < 0 ? -1 : new_node(ps, N_NOT, a, -1);
    } else if (*ps->p == '(') {
        ps->p++;
        r = expr(ps);
        skip_ws(ps);
        if (r >= 0 && *ps->p != ')') r = fail(ps, "expected ')' at '%.40s'", ps->p);
        if (r >= 0) ps->p++;
    } else {
        r = comparison(ps);
    }
    ps->depth--;
    return r;
}

static bool at_end_of_and(parser *ps)
{
    skip_ws(ps);
    return !*ps->p || *ps->p == ')' ||
           (strncmp(ps->p, "OR", 2) == 0 &&
            (!ps->p[2] || isspace((unsigned char)ps->p[2]) || ps->p[2] == '('));
}

static int and_expr(parser *ps)
{
    int l = unary(ps);
    while (l >= 0 && !at_end_of_and(ps)) {
        keyword(ps, "AND");
        int r = unary(ps);
        l = r < 0 ? -1 : new_node(ps, N_AND, l, r);
    }
    return l;
}

static int expr(parser *ps)
{
    if (++ps->depth > KILN_LOGFILTER_MAX_DEPTH)
        return fail(ps, "the filter nests deeper than %s levels", "32");
    int l = and_expr(ps);
    for (;;) {
        skip_ws(ps);
        if (l < 0 || !keyword(ps, "OR")) break;
        int r = and_expr(ps);
        l = r < 0 ? -1 : new_node(ps, N_OR, l, r);
    }
    ps->depth--;
    return l;
}

kiln_err kiln_log_filter_parse(const char *text, kiln_log_filter **out, kiln_diag *d)
{
    kiln_err err = KILN_EINVAL;
    parser ps = {.p = text, .d = d};

    *out = NULL;
    if (strlen(text) > KILN_LOGFILTER_MAX_LEN) {
        kiln_diag_add(d, "filter", "the filter is longer than %d bytes", KILN_LOGFILTER_MAX_LEN);
        return KILN_ELIMIT;
    }
    ps.f = calloc(1, sizeof *ps.f);
    if (!ps.f) return KILN_ENOMEM;
    ps.f->root = -1;
    skip_ws(&ps);
    if (!*ps.p) goto done;
    ps.f->root = expr(&ps);
    skip_ws(&ps);
    if (ps.f->root >= 0 && *ps.p) fail(&ps, "unexpected '%.40s'", ps.p);
    if (ps.failed || ps.f->root < 0) goto out;
done:
    *out = ps.f;
    ps.f = NULL;
    err = KILN_OK;
out:
    kiln_log_filter_free(ps.f);
    return err;
}

/* ---------- matching ---------- */

static bool cmp_num(enum op op, int64_t a, int64_t b)
{
    switch (op) {
    case OP_EQ:
    case OP_HAS:
        return a == b;
    case OP_NE:
        return a != b;
    case OP_GT:
        return a > b;
    case OP_GE:
        return a >= b;
    case OP_LT:
        return a < b;
    case OP_LE:
        return a <= b;
    }
    return false;
}

static bool cmp_str(enum op op, const char *a, const char *b)
{
    if (!a) return false;
    if (op == OP_HAS) return strstr(a, b) != NULL;
    int c = strcmp(a, b);
    return cmp_num(op, c, 0);
}

static bool eval(const kiln_log_filter *f, int i, const kiln_log_view *e)
{
    const node *n = &f->n[i];
    switch (n->kind) {
    case N_AND:
        return eval(f, n->a, e) && eval(f, n->b, e);
    case N_OR:
        return eval(f, n->a, e) || eval(f, n->b, e);
    case N_NOT:
        return !eval(f, n->a, e);
    case N_CMP:
        break;
    }
    switch (n->field) {
    case F_RTYPE:
        return cmp_str(n->op, e->resource_type, n->value);
    case F_JOB:
        return cmp_str(n->op, e->job_id, n->value);
    case F_TASK:
        return cmp_str(n->op, e->task_name, n->value);
    case F_PROJECT:
        return cmp_str(n->op, e->project_id, n->value);
    case F_LABEL_TASK:
        return cmp_str(n->op, e->label_task_name, n->value);
    case F_LABEL_OTHER:
        return false;
    case F_SEV:
        return cmp_num(n->op, e->severity, n->num);
    case F_TS:
        return cmp_num(n->op, e->ts_ns, n->num);
    case F_INSERT:
        return cmp_str(n->op, e->insert_id, n->value);
    case F_LOGNAME:
        return cmp_str(n->op, e->log_name, n->value);
    }
    return false;
}

bool kiln_log_filter_match(const kiln_log_filter *f, const kiln_log_view *e)
{
    return !f || f->root < 0 || eval(f, f->root, e);
}

static const char *job_of(const kiln_log_filter *f, int i)
{
    const node *n = &f->n[i];
    if (n->kind == N_CMP && n->field == F_JOB && n->op == OP_EQ) return n->value;
    if (n->kind != N_AND) return NULL;
    const char *a = job_of(f, n->a);
    return a ? a : job_of(f, n->b);
}

const char *kiln_log_filter_job(const kiln_log_filter *f)
{
    return (!f || f->root < 0) ? NULL : job_of(f, f->root);
}
