/* codec.c - generic table-driven decoding and encoding (see schema.h). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "spec/flags.h"
#include "spec/schema.h"
#include "util/suggest.h"

/* Caps on what one job may contain, so a hostile file cannot make every
 * later stage (store, scheduler, environment of a process) pay for it. */
#define MAX_STR_BYTES  (64 * 1024)
#define MAX_LIST_ITEMS 4096
#define MAX_PATH_BYTES 512

#define AT(base, off, type) ((type *)((char *)(base) + (off)))

/* Field paths are capped; a longer one (only hostile input nests that deep)
 * ends in "..." rather than being silently cut. */
static void mark_truncated(char *out, int n)
{
    if (n >= MAX_PATH_BYTES) memcpy(out + MAX_PATH_BYTES - 4, "...", 4);
}

static void join(char *out, const char *path, const char *name)
{
    int n = path && *path ? snprintf(out, MAX_PATH_BYTES, "%s.%s", path, name)
                          : snprintf(out, MAX_PATH_BYTES, "%s", name);
    mark_truncated(out, n);
}

static void join_index(char *out, const char *path, size_t i)
{
    mark_truncated(out, snprintf(out, MAX_PATH_BYTES, "%s[%zu]", path, i));
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "a list";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* --- scalars --- */

/* The text of a JSON string, or NULL after a violation when it holds a NUL
 * (\u0000, which JSON allows): a C string ends there, so "5\u0000x" would
 * be read as 5 and "--lr\u0000=9" would reach a program as "--lr", values
 * the sender never wrote. Every field that reads a string goes through it. */
static const char *text_of(const json_t *v, const char *path, kiln_diag *d)
{
    const char *s = json_string_value(v);
    const char *nul = s ? memchr(s, 0, json_string_length(v)) : NULL;
    if (nul) {
        kiln_diag_add(d, path,
                      "holds a NUL character (\\u0000) at byte %zu; no field may hold one (a "
                      "program's arguments, environment and paths end at the first NUL)",
                      (size_t)(nul - s));
        return NULL;
    }
    return s;
}

static bool dec_string(const json_t *v, char **slot, const char *path, kiln_diag *d)
{
    if (!json_is_string(v)) {
        kiln_diag_add(d, path, "expected a string, got %s", type_name(v));
        return false;
    }
    size_t len = json_string_length(v);
    if (len > MAX_STR_BYTES) {
        kiln_diag_add(d, path, "value is %zu bytes; at most %d are allowed", len, MAX_STR_BYTES);
        return false;
    }
    if (!text_of(v, path, d)) return false;
    if (kiln_set_str(slot, json_string_value(v)) != KILN_OK) {
        kiln_diag_add(d, path, "out of memory");
        return false;
    }
    return true;
}

static bool dec_int64(const json_t *v, int64_t *out, const char *path, kiln_diag *d)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    /* a whole number written as a double (1.0), as protobuf's parsers take it */
    if (json_is_real(v) && json_real_value(v) == trunc(json_real_value(v)) &&
        fabs(json_real_value(v)) < 9.2e18) {
        *out = (int64_t)json_real_value(v);
        return true;
    }
    if (json_is_string(v)) {
        const char *s = text_of(v, path, d);
        char *end;
        if (!s) return false;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (*s && *end == 0 && errno == 0 && s[0] != ' ' && s[0] != '+') {
            *out = x;
            return true;
        }
        kiln_diag_add(d, path, "\"%.64s\" is not a whole number (int64)", s);
        return false;
    }
    kiln_diag_add(d, path, "expected a whole number, got %s", type_name(v));
    return false;
}

static bool dec_bool(const json_t *v, bool *out, const char *path, int flags, kiln_diag *d)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return true;
    }
    if ((flags & KILN__DEC_YAML) && json_is_string(v)) {
        const char *s = text_of(v, path, d);
        if (!s) return false;
        if (kiln__parse_bool(s, out)) return true;
    }
    kiln_diag_add(d, path, "expected true or false, got %s", type_name(v));
    return false;
}

static bool dec_double(const json_t *v, double *out, const char *path, kiln_diag *d)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    if (json_is_string(v)) {
        const char *s = text_of(v, path, d);
        char *end;
        if (!s) return false;
        errno = 0;
        double x = strtod(s, &end);
        if (*s && *end == 0 && errno == 0 && isfinite(x)) {
            *out = x;
            return true;
        }
        kiln_diag_add(d, path, "\"%.64s\" is not a number", s);
        return false;
    }
    kiln_diag_add(d, path, "expected a number, got %s", type_name(v));
    return false;
}

/* google.protobuf.Duration in JSON: decimal seconds with an "s" suffix, e.g.
 * "3600s" or "1.5s", at most 9 fractional digits. */
static bool dec_duration(const json_t *v, kiln_duration *out, const char *path, kiln_diag *d)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    const char *p = s;
    int64_t secs = 0;
    int32_t nanos = 0;
    int digits = 0;

    if (s && !text_of(v, path, d)) return false;
    if (!s) goto bad;
    if (*p == '-') goto bad; /* negative durations mean nothing here */
    while (*p >= '0' && *p <= '9') {
        if (secs > (INT64_MAX - 9) / 10) goto bad;
        secs = secs * 10 + (*p++ - '0');
        digits++;
    }
    if (!digits) goto bad;
    if (*p == '.') {
        int scale = 100000000, fd = 0;
        p++;
        while (*p >= '0' && *p <= '9') {
            if (++fd > 9) goto bad;
            nanos += (*p++ - '0') * scale;
            scale /= 10;
        }
        if (!fd) goto bad;
    }
    if (strcmp(p, "s") != 0) goto bad;
    out->seconds = secs;
    out->nanos = nanos;
    return true;
bad:
    kiln_diag_add(d, path, "expected a duration such as \"3600s\", got %s%.64s%s", s ? "\"" : "",
                  s ? s : type_name(v), s ? "\"" : "");
    return false;
}

static bool dec_enum(const json_t *v, const char *const *enums, const int *nums, char **slot,
                     const char *path, kiln_diag *d)
{
    if (nums && json_is_integer(v)) { /* proto3 JSON: the enum's number */
        for (size_t i = 0; enums[i]; i++)
            if (nums[i] == json_integer_value(v)) return kiln_set_str(slot, enums[i]) == KILN_OK;
        kiln_diag_add(d, path, "%" JSON_INTEGER_FORMAT " is not a number of this enum",
                      json_integer_value(v));
        return false;
    }
    if (!json_is_string(v)) {
        kiln_diag_add(d, path, "expected a string, got %s", type_name(v));
        return false;
    }
    const char *s = text_of(v, path, d);
    size_t n = 0;
    if (!s) return false;
    for (; enums[n]; n++)
        if (strcmp(enums[n], s) == 0) return dec_string(v, slot, path, d);
    char allowed[512] = "";
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(allowed);
        snprintf(allowed + used, sizeof allowed - used, "%s%s", i ? ", " : "", enums[i]);
    }
    kiln_diag_add(d, path, "\"%.64s\" is not one of: %s", s, allowed);
    return false;
}

/* --- containers --- */

static bool dec_list_header(const json_t *v, const char *path, kiln_diag *d)
{
    if (!json_is_array(v)) {
        kiln_diag_add(d, path, "expected a list, got %s", type_name(v));
        return false;
    }
    if (json_array_size(v) > MAX_LIST_ITEMS) {
        kiln_diag_add(d, path, "%zu items; at most %d are allowed", json_array_size(v),
                      MAX_LIST_ITEMS);
        return false;
    }
    return true;
}

static bool dec_strv(const json_t *v, kiln_strv *out, const char *path, kiln_diag *d)
{
    bool ok = true;
    size_t i;
    json_t *item;
    char p[MAX_PATH_BYTES];

    if (!dec_list_header(v, path, d)) return false;
    kiln_strv_clear(out);
    json_array_foreach(v, i, item)
    {
        char *s = NULL;
        join_index(p, path, i);
        if (!dec_string(item, &s, p, d)) {
            ok = false;
            continue;
        }
        if (kiln_strv_push(out, s) != KILN_OK) ok = false;
        free(s);
    }
    return ok;
}

static bool dec_doublev(const json_t *v, double **arr, size_t *count, const char *path,
                        kiln_diag *d)
{
    bool ok = true;
    size_t i;
    json_t *item;
    char p[MAX_PATH_BYTES];

    if (!dec_list_header(v, path, d)) return false;
    free(*arr);
    *count = 0;
    *arr = calloc(json_array_size(v) ? json_array_size(v) : 1, sizeof(double));
    if (!*arr) return false;
    json_array_foreach(v, i, item)
    {
        join_index(p, path, i);
        if (!dec_double(item, &(*arr)[i], p, d)) ok = false;
    }
    *count = json_array_size(v);
    return ok;
}

static bool dec_map(const json_t *v, kiln_map *out, const char *path, kiln_diag *d)
{
    bool ok = true;
    const char *k;
    json_t *item;
    char p[MAX_PATH_BYTES];

    if (!json_is_object(v)) {
        kiln_diag_add(d, path, "expected a map of strings, got %s", type_name(v));
        return false;
    }
    if (json_object_size(v) > MAX_LIST_ITEMS) {
        kiln_diag_add(d, path, "%zu entries; at most %d are allowed", json_object_size(v),
                      MAX_LIST_ITEMS);
        return false;
    }
    json_object_foreach((json_t *)v, k, item)
    {
        char *s = NULL;
        join(p, path, k);
        if (json_is_null(item)) continue;
        if (!dec_string(item, &s, p, d)) {
            ok = false;
            continue;
        }
        if (kiln_map_set(out, k, s) != KILN_OK) ok = false;
        free(s);
    }
    return ok;
}

/* name is a field's JSON name (lowerCamelCase) or, as proto3 JSON's parsers
 * take it, the proto's snake_case name: "master_type" is "masterType". */
static bool same_name(const char *json, const char *key)
{
    for (; *json; json++, key++) {
        if (*key == '_' && key[1] && isupper((unsigned char)*json) &&
            tolower((unsigned char)*json) == key[1])
            key++;
        else if (*key != *json)
            return false;
    }
    return *key == '\0';
}

static const kiln__field *find_field(const kiln__msg *m, const char *name)
{
    for (size_t i = 0; i < m->nfields; i++)
        if (strcmp(m->fields[i].name, name) == 0) return &m->fields[i];
    for (size_t i = 0; i < m->nfields; i++)
        if (same_name(m->fields[i].name, name)) return &m->fields[i];
    return NULL;
}

static void unknown_field(const kiln__msg *m, const char *key, const char *path, kiln_diag *d)
{
    const char *names[64];
    size_t n = 0;
    for (size_t i = 0; i < m->nfields && n < 64; i++)
        names[n++] = m->fields[i].name;
    const char *hint = kiln__suggest(key, names, n);
    if (hint)
        kiln_diag_add(d, path, "unknown field \"%.64s\" in %s; did you mean \"%s\"?", key, m->name,
                      hint);
    else
        kiln_diag_add(d, path, "unknown field \"%.64s\" in %s", key, m->name);
}

static bool dec_field(const kiln__field *f, const json_t *v, void *base, const char *path,
                      int flags, kiln_diag *d);

bool kiln__decode(const kiln__msg *m, const json_t *obj, void *base, const char *path, int flags,
                  kiln_diag *d)
{
    bool ok = true;
    const char *k;
    json_t *v;
    char p[MAX_PATH_BYTES];

    if (!json_is_object(obj)) {
        kiln_diag_add(d, path, "expected an object (%s), got %s", m->name, type_name(obj));
        return false;
    }
    json_object_foreach((json_t *)obj, k, v)
    {
        const kiln__field *f = find_field(m, k);
        join(p, path, k);
        if (!f) {
            unknown_field(m, k, p, d);
            ok = false;
            continue;
        }
        if (json_is_null(v)) continue; /* null = not set, as in proto3 JSON */
        if (!dec_field(f, v, base, p, flags, d)) ok = false;
    }
    return ok;
}

static bool dec_field(const kiln__field *f, const json_t *v, void *base, const char *path,
                      int flags, kiln_diag *d)
{
    bool ok = false;
    switch (f->kind) {
    case FK_STR:
        ok = dec_string(v, AT(base, f->off, char *), path, d);
        break;
    case FK_ENUM:
        ok = dec_enum(v, f->enums, f->enum_nums, AT(base, f->off, char *), path, d);
        break;
    case FK_INT64:
        ok = dec_int64(v, AT(base, f->off, int64_t), path, d);
        break;
    case FK_INT32:
        ok = dec_int64(v, AT(base, f->off, int64_t), path, d);
        if (ok &&
            (*AT(base, f->off, int64_t) > INT32_MAX || *AT(base, f->off, int64_t) < INT32_MIN)) {
            kiln_diag_add(d, path, "%" PRId64 " is out of range: an int32 holds %d to %d",
                          *AT(base, f->off, int64_t), INT32_MIN, INT32_MAX);
            ok = false;
        }
        break;
    case FK_BOOL:
        ok = dec_bool(v, AT(base, f->off, bool), path, flags, d);
        break;
    case FK_DOUBLE:
        ok = dec_double(v, AT(base, f->off, double), path, d);
        break;
    case FK_DURATION:
        ok = dec_duration(v, AT(base, f->off, kiln_duration), path, d);
        break;
    case FK_STRV:
        ok = dec_strv(v, AT(base, f->off, kiln_strv), path, d);
        break;
    case FK_DOUBLEV:
        ok = dec_doublev(v, AT(base, f->off, double *), AT(base, f->count_off, size_t), path, d);
        break;
    case FK_MAP:
        ok = dec_map(v, AT(base, f->off, kiln_map), path, d);
        break;
    case FK_MSG:
        ok = kiln__decode(f->msg, v, AT(base, f->off, void), path, flags, d);
        break;
    case FK_MSGV: {
        size_t i;
        json_t *item;
        char p[MAX_PATH_BYTES];
        void **arr = AT(base, f->off, void *);
        size_t *count = AT(base, f->count_off, size_t);
        if (!dec_list_header(v, path, d)) break;
        /* free an earlier value of the same field before replacing it */
        for (size_t j = 0; j < *count; j++)
            kiln__free_fields(f->msg, (char *)*arr + j * f->msg->size);
        free(*arr);
        *count = 0;
        *arr = calloc(json_array_size(v) ? json_array_size(v) : 1, f->msg->size);
        if (!*arr) break;
        ok = true;
        json_array_foreach(v, i, item)
        {
            join_index(p, path, i);
            if (!kiln__decode(f->msg, item, (char *)*arr + i * f->msg->size, p, flags, d))
                ok = false;
        }
        *count = json_array_size(v);
        break;
    }
    case FK_STATE: {
        const char *s = json_is_string(v) ? text_of(v, path, d) : NULL;
        json_int_t n = json_is_integer(v) ? json_integer_value(v) : -1;
        if (n >= 0 && n <= 7) { /* proto3 JSON: State's number (UNSPECIFIED 0 .. CANCELLED 7) */
            *AT(base, f->off, kiln_job_state) = (kiln_job_state)n;
            ok = true;
        } else if (s && kiln_job_state_parse(s, AT(base, f->off, kiln_job_state))) {
            ok = true;
        } else if (!json_is_string(v) || s) {
            kiln_diag_add(d, path,
                          "expected one of STATE_UNSPECIFIED, QUEUED, PREPARING, RUNNING, "
                          "SUCCEEDED, FAILED, CANCELLING, CANCELLED");
        }
        break;
    }
    }
    if (ok && f->has_off >= 0) *AT(base, (size_t)f->has_off, bool) = true;
    return ok;
}

/* --- encoding --- */

static int put(json_t *obj, const char *k, json_t *v)
{
    return v ? json_object_set_new(obj, k, v) : -1;
}

static json_t *enc_strv(const kiln_strv *sv)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < sv->n; i++)
        if (json_array_append_new(a, json_string(sv->v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *enc_int64(int64_t x, int flags)
{
    char buf[32];
    if (flags & KILN__ENC_INT64_NUMBERS) return json_integer(x);
    snprintf(buf, sizeof buf, "%" PRId64, x);
    return json_string(buf);
}

static json_t *enc_duration(const kiln_duration *dur)
{
    char buf[48];
    if (dur->nanos) {
        int len = snprintf(buf, sizeof buf, "%" PRId64 ".%09d", dur->seconds, (int)dur->nanos);
        while (len > 0 && buf[len - 1] == '0')
            buf[--len] = 0; /* "1.500000000" -> "1.5" */
        snprintf(buf + len, sizeof buf - (size_t)len, "s");
    } else {
        snprintf(buf, sizeof buf, "%" PRId64 "s", dur->seconds);
    }
    return json_string(buf);
}

/* Encodes one field into obj, or nothing when it is unset. Returns -1 on ENOMEM. */
static int enc_field(const kiln__field *f, const void *base, json_t *obj, int flags)
{
    if (f->has_off >= 0 && !*AT(base, (size_t)f->has_off, bool)) return 0;
    switch (f->kind) {
    case FK_STR:
    case FK_ENUM: {
        const char *s = *AT(base, f->off, char *);
        return s && *s ? put(obj, f->name, json_string(s)) : 0;
    }
    case FK_INT64: {
        int64_t x = *AT(base, f->off, int64_t);
        return x || f->has_off >= 0 ? put(obj, f->name, enc_int64(x, flags)) : 0;
    }
    case FK_INT32: {
        int64_t x = *AT(base, f->off, int64_t);
        return x || f->has_off >= 0 ? put(obj, f->name, json_integer(x)) : 0;
    }
    case FK_BOOL:
        return *AT(base, f->off, bool) ? put(obj, f->name, json_true()) : 0;
    case FK_DOUBLE: {
        double x = *AT(base, f->off, double);
        return x != 0 ? put(obj, f->name, json_real(x)) : 0;
    }
    case FK_DURATION:
        return put(obj, f->name, enc_duration(AT(base, f->off, kiln_duration)));
    case FK_STRV: {
        const kiln_strv *sv = AT(base, f->off, kiln_strv);
        return sv->n ? put(obj, f->name, enc_strv(sv)) : 0;
    }
    case FK_DOUBLEV: {
        double *arr = *AT(base, f->off, double *);
        size_t n = *AT(base, f->count_off, size_t);
        if (!n) return 0;
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
            if (json_array_append_new(a, json_real(arr[i])) < 0) {
                json_decref(a);
                a = NULL;
            }
        return put(obj, f->name, a);
    }
    case FK_MAP: {
        const kiln_map *m = AT(base, f->off, kiln_map);
        if (!m->n) return 0;
        json_t *o = json_object();
        for (size_t i = 0; o && i < m->n; i++)
            if (json_object_set_new(o, m->keys[i], json_string(m->vals[i])) < 0) {
                json_decref(o);
                o = NULL;
            }
        return put(obj, f->name, o);
    }
    case FK_MSG:
        return put(obj, f->name, kiln__encode(f->msg, AT(base, f->off, void), flags));
    case FK_MSGV: {
        char *arr = *AT(base, f->off, char *);
        size_t n = *AT(base, f->count_off, size_t);
        if (!n) return 0;
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
            if (json_array_append_new(a, kiln__encode(f->msg, arr + i * f->msg->size, flags)) < 0) {
                json_decref(a);
                a = NULL;
            }
        return put(obj, f->name, a);
    }
    case FK_STATE: {
        kiln_job_state s = *AT(base, f->off, kiln_job_state);
        return s ? put(obj, f->name, json_string(kiln_job_state_name(s))) : 0;
    }
    }
    return 0;
}

json_t *kiln__encode(const kiln__msg *m, const void *base, int flags)
{
    json_t *obj = json_object();
    for (size_t i = 0; obj && i < m->nfields; i++)
        if (enc_field(&m->fields[i], base, obj, flags) < 0) {
            json_decref(obj);
            obj = NULL;
        }
    return obj;
}

void kiln__free_fields(const kiln__msg *m, void *base)
{
    for (size_t i = 0; i < m->nfields; i++) {
        const kiln__field *f = &m->fields[i];
        switch (f->kind) {
        case FK_STR:
        case FK_ENUM:
            free(*AT(base, f->off, char *));
            break;
        case FK_STRV:
            kiln_strv_clear(AT(base, f->off, kiln_strv));
            break;
        case FK_DOUBLEV:
            free(*AT(base, f->off, double *));
            break;
        case FK_MAP:
            kiln_map_clear(AT(base, f->off, kiln_map));
            break;
        case FK_MSG:
            kiln__free_fields(f->msg, AT(base, f->off, void));
            break;
        case FK_MSGV: {
            char *arr = *AT(base, f->off, char *);
            size_t n = *AT(base, f->count_off, size_t);
            for (size_t j = 0; j < n; j++)
                kiln__free_fields(f->msg, arr + j * f->msg->size);
            free(arr);
            break;
        }
        default:
            break;
        }
    }
    memset(base, 0, m->size);
}
