/* tree.c - YAML <-> jansson trees (see tree.h for the contract). */
#include "spec/tree.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "kiln/job.h"

/* ---------- loading ---------- */

typedef struct frame {
    json_t *node; /* object or array being filled */
    char *key;    /* pending mapping key (objects only), owned */
} frame;

typedef struct loader {
    yaml_parser_t parser;
    frame stack[KILN_SPEC_MAX_DEPTH + 1];
    int depth;
    json_t *root;
    kiln_diag *d;
    kiln_err err;
} loader;

static void fail(loader *l, const yaml_mark_t *m, kiln_err e, const char *msg)
{
    if (l->err != KILN_OK) return;
    l->err = e;
    if (m)
        kiln_diag_add(l->d, "", "line %zu, column %zu: %s", m->line + 1, m->column + 1, msg);
    else
        kiln_diag_add(l->d, "", "%s", msg);
}

static bool is_null_scalar(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    return v[0] == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

/* Adds `val` (reference stolen) to the container on top of the stack, or makes
 * it the root. A scalar in key position becomes the pending key instead. */
static void attach(loader *l, json_t *val, const yaml_mark_t *m)
{
    if (!val) {
        fail(l, m, KILN_ENOMEM, "out of memory");
        return;
    }
    if (l->depth == 0) {
        l->root = val;
        return;
    }
    frame *f = &l->stack[l->depth - 1];
    if (json_is_array(f->node)) {
        if (json_array_append_new(f->node, val) < 0) fail(l, m, KILN_ENOMEM, "out of memory");
        return;
    }
    if (!f->key) {
        /* key position: only scalars are meaningful keys in a job file */
        if (!json_is_string(val)) {
            json_decref(val);
            fail(l, m, KILN_EINVAL, "mapping keys must be plain strings");
            return;
        }
        /* a key is a C string from here on: one with a NUL in it would
         * be cut short at the NUL, a different key, so it is refused */
        if (memchr(json_string_value(val), 0, json_string_length(val))) {
            json_decref(val);
            fail(l, m, KILN_EINVAL,
                 "a mapping key holds a NUL character, which no field name or map key may hold");
            return;
        }
        f->key = strdup(json_string_value(val));
        json_decref(val);
        if (!f->key) fail(l, m, KILN_ENOMEM, "out of memory");
        return;
    }
    if (json_object_get(f->node, f->key)) {
        char msg[256];
        snprintf(msg, sizeof msg, "duplicate key \"%.200s\"", f->key);
        json_decref(val);
        fail(l, m, KILN_EINVAL, msg);
    } else if (json_object_set_new(f->node, f->key, val) < 0) {
        fail(l, m, KILN_ENOMEM, "out of memory");
    }
    free(f->key);
    f->key = NULL;
}

static void push(loader *l, json_t *node, const yaml_mark_t *m)
{
    if (!node) {
        fail(l, m, KILN_ENOMEM, "out of memory");
        return;
    }
    if (l->depth >= KILN_SPEC_MAX_DEPTH) {
        json_decref(node);
        fail(l, m, KILN_ELIMIT, "nesting is deeper than kiln accepts (64 levels)");
        return;
    }
    json_incref(node); /* one reference for the parent, one for the stack */
    attach(l, node, m);
    l->stack[l->depth].node = node;
    l->stack[l->depth].key = NULL;
    l->depth++;
}

static void pop(loader *l)
{
    frame *f = &l->stack[--l->depth];
    free(f->key);
    json_decref(f->node);
}

/* Ends one document: in `all` mode its tree joins l->docs (an empty document,
 * such as the one after a trailing "---", is skipped). */
static void end_document(loader *l, json_t *docs, const yaml_mark_t *m)
{
    if (!docs || !l->root) return;
    if (!json_is_null(l->root) && json_array_append(docs, l->root) < 0)
        fail(l, m, KILN_ENOMEM, "out of memory");
    json_decref(l->root);
    l->root = NULL;
}

/* The loader behind both entry points: with `docs` (an array), every document
 * is appended to it; without, a second document is an error. */
static json_t *load(const char *buf, size_t len, kiln_diag *d, kiln_err *errp, json_t *docs)
{
    loader l = {.d = d, .err = KILN_OK};
    yaml_event_t ev;
    bool done = false;
    int n_docs = 0;

    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(d, "", "input is %zu bytes; kiln accepts at most %u", len,
                      KILN_SPEC_MAX_BYTES);
        if (errp) *errp = KILN_ELIMIT;
        return NULL;
    }
    if (!yaml_parser_initialize(&l.parser)) {
        if (errp) *errp = KILN_ENOMEM;
        return NULL;
    }
    yaml_parser_set_input_string(&l.parser, (const unsigned char *)buf, len);
    while (!done && l.err == KILN_OK) {
        if (!yaml_parser_parse(&l.parser, &ev)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s%s%s", l.parser.problem ? l.parser.problem : "bad YAML",
                     l.parser.context ? " " : "", l.parser.context ? l.parser.context : "");
            fail(&l, &l.parser.problem_mark, KILN_EINVAL, msg);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++n_docs > 1 && !docs)
                fail(&l, &ev.start_mark, KILN_EINVAL,
                     "expected one YAML document, found several (---)");
            if (n_docs > KILN_SPEC_MAX_DOCS)
                fail(&l, &ev.start_mark, KILN_ELIMIT, "more YAML documents than kiln reads (64)");
            break;
        case YAML_DOCUMENT_END_EVENT:
            end_document(&l, docs, &ev.start_mark);
            break;
        case YAML_ALIAS_EVENT:
            fail(&l, &ev.start_mark, KILN_EINVAL,
                 "YAML aliases (*name) are not accepted in job files; write the value out");
            break;
        case YAML_SCALAR_EVENT:
            if (is_null_scalar(&ev))
                attach(&l, json_null(), &ev.start_mark);
            else
                attach(&l, json_stringn((const char *)ev.data.scalar.value, ev.data.scalar.length),
                       &ev.start_mark);
            break;
        case YAML_SEQUENCE_START_EVENT:
            push(&l, json_array(), &ev.start_mark);
            break;
        case YAML_MAPPING_START_EVENT:
            push(&l, json_object(), &ev.start_mark);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            pop(&l);
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    while (l.depth > 0)
        pop(&l);
    yaml_parser_delete(&l.parser);
    if (l.err != KILN_OK) {
        json_decref(l.root);
        if (errp) *errp = l.err;
        return NULL;
    }
    if (docs) {
        if (errp) *errp = KILN_OK;
        return docs;
    }
    if (!l.root || json_is_null(l.root)) {
        json_decref(l.root);
        l.root = json_object(); /* an empty file is an empty job */
    }
    if (errp) *errp = l.root ? KILN_OK : KILN_ENOMEM;
    return l.root;
}

json_t *kiln__yaml_load_err(const char *buf, size_t len, kiln_diag *d, kiln_err *errp)
{
    return load(buf, len, d, errp, NULL);
}

json_t *kiln__yaml_load_all(const char *buf, size_t len, kiln_diag *d, kiln_err *errp)
{
    json_t *docs = json_array();
    if (!docs) {
        if (errp) *errp = KILN_ENOMEM;
        return NULL;
    }
    json_t *out = load(buf, len, d, errp, docs);
    if (!out) json_decref(docs);
    return out;
}

json_t *kiln__yaml_load(const char *buf, size_t len, kiln_diag *d)
{
    return kiln__yaml_load_err(buf, len, d, NULL);
}

/* Where in the document a JSON syntax error stands, as a field path
 * ("trainingInput.args[2]", "" at the top), so that even a body that does
 * not parse is refused naming its field. jansson stops at the first error
 * with `pos` just past the token it could not take; every token before it
 * was well formed, so a plain scan of those is enough: objects and arrays
 * on a stack, the pending key of each object, the index of each array.
 * Keys are shown as written (escapes and all). */
#define PATH_DEPTH 64
static bool json_delim(char c)
{
    return c && strchr("{}[],: \t\r\n", c);
}

static void json_error_path(const char *buf, size_t len, size_t pos, char *out, size_t cap)
{
    struct {
        bool array;
        size_t index;
        const char *key; /* NULL: no key read yet (objects) */
        int key_len;
    } st[PATH_DEPTH];
    int depth = 0, untracked = 0; /* untracked: levels deeper than PATH_DEPTH */
    size_t used = 0;

    if (pos > len) pos = len;
    for (size_t i = 0, end; i < pos; i = end) {
        char c = buf[i];
        end = i + 1;
        if (c == '"') {
            while (end < len && buf[end] != '"')
                end += buf[end] == '\\' ? 2 : 1;
            end++; /* past the closing quote */
        } else if (!json_delim(c)) {
            while (end < len && !json_delim(buf[end]) && buf[end] != '"')
                end++;
        }
        if (end >= pos) break; /* the token jansson stopped at (pos is just past it) */
        if (c == '{' || c == '[') {
            if (depth == PATH_DEPTH) {
                untracked++;
                continue;
            }
            st[depth].array = c == '[';
            st[depth].index = 0;
            st[depth].key = NULL;
            depth++;
        } else if (c == '}' || c == ']') {
            if (untracked)
                untracked--;
            else if (depth)
                depth--;
        } else if (c == ',' && depth && !untracked) {
            if (st[depth - 1].array)
                st[depth - 1].index++;
            else
                st[depth - 1].key = NULL;
        } else if (c == '"' && depth && !untracked && !st[depth - 1].array && !st[depth - 1].key) {
            st[depth - 1].key = buf + i + 1;
            st[depth - 1].key_len = (int)(end - i - 2 < 200 ? end - i - 2 : 200);
        }
    }
    out[0] = '\0';
    for (int k = 0; k < depth && used < cap; k++) {
        int n;
        if (st[k].array)
            n = snprintf(out + used, cap - used, "[%zu]", st[k].index);
        else if (st[k].key)
            n = snprintf(out + used, cap - used, "%s%.*s", used ? "." : "", st[k].key_len,
                         st[k].key);
        else
            break; /* an object before its key: the path ends at the object */
        used += n > 0 ? (size_t)n : 0;
    }
    if (untracked && used < cap) snprintf(out + used, cap - used, "...");
    if (used >= cap && cap > 4) memcpy(out + cap - 4, "...", 4);
}

json_t *kiln__json_load(const char *buf, size_t len, kiln_diag *d, kiln_err *errp)
{
    json_error_t je;
    json_t *root;
    char path[512];

    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(d, "", "input is %zu bytes; kiln accepts at most %u", len,
                      KILN_SPEC_MAX_BYTES);
        if (errp) *errp = KILN_ELIMIT;
        return NULL;
    }
    /* jansson checks UTF-8 and caps the depth. NUL (\u0000) is let into
     * string values so that the decoder refuses it at the field that holds
     * it (codec.c), naming the rule; jansson still refuses it in keys. */
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        json_error_path(buf, len, je.position > 0 ? (size_t)je.position : 0, path, sizeof path);
        /* jansson says "not supported" of a NUL in a key: say the rule */
        const char *near = strstr(je.text, " near ");
        if (strncmp(je.text, "NUL byte in object key", 22) == 0)
            kiln_diag_add(d, path,
                          "line %d, column %d: a key holds a NUL character (\\u0000), which no "
                          "field name or map key may hold%s",
                          je.line, je.column, near ? near : "");
        else
            kiln_diag_add(d, path, "line %d, column %d: %s", je.line, je.column, je.text);
        if (errp) *errp = KILN_EINVAL;
        return NULL;
    }
    if (errp) *errp = KILN_OK;
    return root;
}

/* ---------- emitting ---------- */

typedef struct outbuf {
    char *p;
    size_t n, cap;
    bool oom;
} outbuf;

static int write_handler(void *data, unsigned char *buffer, size_t size)
{
    outbuf *o = data;
    if (o->n + size + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->n + size + 1)
            cap *= 2;
        char *np = realloc(o->p, cap);
        if (!np) {
            o->oom = true;
            return 0;
        }
        o->p = np;
        o->cap = cap;
    }
    memcpy(o->p + o->n, buffer, size);
    o->n += size;
    o->p[o->n] = 0;
    return 1;
}

/* Would a YAML 1.1/1.2 reader take this plain scalar for something other than
 * a string? Then it must be quoted to survive a round trip through other tools. */
static bool needs_quotes(const char *s)
{
    static const char *const words[] = {"null", "~",   "true", "false", "yes",  "no",
                                        "on",   "off", "y",    "n",     ".inf", ".nan"};
    if (!*s) return true;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strcasecmp(s, words[i]) == 0) return true;
    char *end;
    errno = 0;
    (void)strtod(s, &end);
    if (end != s && *end == 0) return true;
    return false;
}

static int emit_node(yaml_emitter_t *e, const json_t *n)
{
    yaml_event_t ev;
    char num[64];
    const char *s = NULL;
    yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;

    switch (json_typeof(n)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
            !yaml_emitter_emit(e, &ev))
            return 0;
        json_object_foreach((json_t *)n, k, v)
        {
            yaml_scalar_style_t ks =
                needs_quotes(k) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE;
            if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)k, (int)strlen(k), 1,
                                              1, ks) ||
                !yaml_emitter_emit(e, &ev) || !emit_node(e, v))
                return 0;
        }
        return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *v;
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE) ||
            !yaml_emitter_emit(e, &ev))
            return 0;
        json_array_foreach(n, i, v)
        {
            if (!emit_node(e, v)) return 0;
        }
        return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
    }
    case JSON_STRING:
        s = json_string_value(n);
        if (needs_quotes(s)) style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(n));
        s = num;
        break;
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(n));
        s = num;
        break;
    case JSON_TRUE:
        s = "true";
        break;
    case JSON_FALSE:
        s = "false";
        break;
    case JSON_NULL:
        s = "null";
        break;
    }
    return yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                        style) &&
           yaml_emitter_emit(e, &ev);
}

char *kiln__yaml_dump(const json_t *root)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    outbuf o = {0};
    int ok;

    if (!yaml_emitter_initialize(&e)) return NULL;
    yaml_emitter_set_output(&e, write_handler, &o);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, 120);
    ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
         yaml_emitter_emit(&e, &ev) &&
         yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
         yaml_emitter_emit(&e, &ev) && emit_node(&e, root) &&
         yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&e, &ev) &&
         yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev);
    yaml_emitter_delete(&e);
    if (!ok || o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}

kiln_err kiln__read_file(const char *path, size_t cap, char **bufp, size_t *lenp)
{
    kiln_err rc = KILN_EIO;
    char *buf = NULL;
    size_t n = 0, alloc = 0;
    FILE *f = fopen(path, "rb");

    if (!f) return KILN_EIO;
    for (;;) {
        if (n == alloc) {
            if (alloc > cap) {
                rc = KILN_ELIMIT;
                goto out;
            }
            size_t na = alloc ? alloc * 2 : 8192;
            char *nb = realloc(buf, na + 1);
            if (!nb) {
                rc = KILN_ENOMEM;
                goto out;
            }
            buf = nb;
            alloc = na;
        }
        size_t got = fread(buf + n, 1, alloc - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) goto out;
    if (n > cap) {
        rc = KILN_ELIMIT;
        goto out;
    }
    buf[n] = 0;
    *bufp = buf;
    *lenp = n;
    buf = NULL;
    rc = KILN_OK;
out:
    free(buf);
    int saved = errno;
    fclose(f);
    errno = saved;
    return rc;
}
