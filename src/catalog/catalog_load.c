/* catalog_load.c - reading catalog files (data/catalog/NAME.yaml and site overlays) into
 * a kiln_catalog, merging them, and checking the result as a whole.
 *
 * Every catalog file is a YAML mapping of sections (machineTypes, accelerators,
 * acceleratorCounts, regions, tpu, scaleTiers, runtimeVersions, runtimeMirrors,
 * defaults).
 * The built-in files and a site's overlay go through the same merge: named
 * entries replace an entry of the same name or are added; version lists merge
 * by value; `defaults` and `tpu` merge key by key. Cross references (a zone
 * naming an accelerator, a tier naming a machine type) are checked only once
 * all files are in, so the files may come in any order. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "catalog/catalog_int.h"
#include "spec/tree.h"
#include "util/suggest.h"

/* Generated at build time from data/catalog/NAME.yaml by cmake/embed.cmake. */
struct kiln__embedded {
    const char *name;
    const char *data;
    size_t len;
};
extern const struct kiln__embedded kiln__catalog_files[];

/* ---------- reporting ---------- */

typedef struct lctx {
    kiln_catalog *c;
    const char *file; /* prefixes every field path: "site.yaml:machineTypes[2].vcpus" */
    kiln_diag *d;
    int errors;
    bool nomem;
    bool site; /* a site's file (kiln_catalog_merge_*), not a built-in one */
} lctx;

/* Formats a field path. Paths only label messages, so truncation is fine;
 * going through vsnprintf keeps -Wformat-truncation (-O2) quiet about it. */
static void pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static void bad(lctx *x, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bad(lctx *x, const char *path, const char *fmt, ...)
{
    char msg[512], field[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pathf(field, sizeof field, "%s:%s", x->file, path);
    kiln_diag_add(x->d, field, "%s", msg);
    x->errors++;
}

/* Joins a path and a key: "machineTypes[3]" + "vcpus". */
static const char *sub(char *buf, size_t cap, const char *path, const char *key)
{
    pathf(buf, cap, "%s%s%s", path, *path ? "." : "", key);
    return buf;
}

/* ---------- growable arrays and names ---------- */

static kiln_err grow_(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return KILN_OK;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, ncap * size);
    if (!p) return KILN_ENOMEM;
    *arr = p;
    *cap = ncap;
    return KILN_OK;
}
#define GROW(arr, n, cap) grow_((void **)&(arr), &(cap), (n), sizeof(*(arr)))

bool kiln__names_has(const kiln__names *l, const char *s)
{
    for (size_t i = 0; s && i < l->n; i++)
        if (strcmp(l->v[i], s) == 0) return true;
    return false;
}

static kiln_err names_add(kiln__names *l, const char *s)
{
    if (kiln__names_has(l, s)) return KILN_OK;
    if (GROW(l->v, l->n, l->cap)) return KILN_ENOMEM;
    if (!(l->v[l->n] = strdup(s))) return KILN_ENOMEM;
    l->n++;
    return KILN_OK;
}

static void names_free(kiln__names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static void strs_free(const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free((char *)v[i]);
    free((void *)v);
}

/* ---------- scalars (the YAML tree keeps every scalar as a string) ---------- */

static void check_keys(lctx *x, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    const json_t *val;
    size_t n = 0;
    while (allowed[n])
        n++;
    json_object_foreach((json_t *)obj, key, val)
    {
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (ok) continue;
        const char *hint = kiln__suggest(key, allowed, n);
        char p[320];
        bad(x, sub(p, sizeof p, path, key), "unknown key '%s'%s%s%s", key,
            hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
    }
}

static const char *text(const json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool get_int(lctx *x, const json_t *v, const char *path, int64_t min, int64_t max,
                    int64_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else {
        const char *s = text(v);
        char *end;
        errno = 0;
        long long n = s ? strtoll(s, &end, 10) : 0;
        if (!s || !*s || *end || errno) {
            bad(x, path, v ? "expected a whole number" : "required");
            return false;
        }
        *out = n;
    }
    if (*out < min || *out > max) {
        bad(x, path, "%lld is out of range %lld..%lld", (long long)*out, (long long)min,
            (long long)max);
        return false;
    }
    return true;
}

static bool get_num(lctx *x, const json_t *v, const char *path, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
    } else {
        const char *s = text(v);
        char *end;
        *out = s ? strtod(s, &end) : 0;
        if (!s || !*s || *end) {
            bad(x, path, v ? "expected a number" : "required");
            return false;
        }
    }
    if (!isfinite(*out) || *out < 0) {
        bad(x, path, "expected a number >= 0");
        return false;
    }
    return true;
}

static bool get_bool(lctx *x, const json_t *v, const char *path, bool *out)
{
    const char *s = text(v);
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return true;
    }
    if (s && (!strcmp(s, "true") || !strcmp(s, "yes"))) return (*out = true);
    if (s && (!strcmp(s, "false") || !strcmp(s, "no"))) return !(*out = false);
    bad(x, path, "expected true or false");
    return false;
}

/* A required, non-empty name; returns an owned copy or NULL (reported). */
static char *get_name(lctx *x, const json_t *v, const char *path)
{
    const char *s = text(v);
    if (!s || !*s) {
        bad(x, path, v ? "expected a non-empty string" : "required");
        return NULL;
    }
    char *copy = strdup(s);
    if (!copy) x->nomem = true;
    return copy;
}

/* A list of non-empty strings; an owned array (never NULL on success, even
 * when empty) or NULL (reported). */
static char **get_strs(lctx *x, const json_t *v, const char *path, size_t *n)
{
    size_t i;
    const json_t *e;
    char **out;
    *n = 0;
    if (!json_is_array(v)) {
        bad(x, path, "expected a list");
        return NULL;
    }
    if (!(out = calloc(json_array_size(v) + 1, sizeof *out))) {
        x->nomem = true;
        return NULL;
    }
    json_array_foreach((json_t *)v, i, e)
    {
        char p[320];
        pathf(p, sizeof p, "%s[%zu]", path, i);
        if (!(out[i] = get_name(x, e, p))) {
            strs_free((const char *const *)out, i);
            return NULL;
        }
    }
    *n = json_array_size(v);
    return out;
}

static kiln_err add_names(lctx *x, kiln__names *l, const json_t *v, const char *path)
{
    size_t n;
    char **s = get_strs(x, v, path, &n);
    kiln_err err = KILN_OK;
    if (!s) return KILN_EINVAL;
    for (size_t i = 0; i < n && !err; i++)
        err = names_add(l, s[i]);
    if (err) x->nomem = true;
    strs_free((const char *const *)s, n);
    return err;
}

/* ---------- machineTypes ---------- */

static void machine_free(kiln_machine_type *m)
{
    free((char *)m->name);
    free((char *)m->builtin_accelerator);
}

static kiln_err upsert_machine(kiln_catalog *c, kiln_machine_type *m)
{
    for (size_t i = 0; i < c->n_machines; i++) {
        if (strcmp(c->machines[i].name, m->name) == 0) {
            machine_free(&c->machines[i]);
            c->machines[i] = *m;
            return KILN_OK;
        }
    }
    if (GROW(c->machines, c->n_machines, c->cap_machines)) return KILN_ENOMEM;
    c->machines[c->n_machines++] = *m;
    return KILN_OK;
}

static void parse_builtin(lctx *x, const json_t *a, const char *path, kiln_machine_type *m)
{
    static const char *const keys[] = {"type", "count", NULL};
    char p[320];
    int64_t n = 0;
    if (!json_is_object(a)) {
        bad(x, path, "expected a mapping {type, count}");
        return;
    }
    check_keys(x, a, path, keys);
    m->builtin_accelerator =
        get_name(x, json_object_get(a, "type"), sub(p, sizeof p, path, "type"));
    if (get_int(x, json_object_get(a, "count"), sub(p, sizeof p, path, "count"), 1, 1024, &n))
        m->builtin_accelerator_count = (int)n;
}

static void parse_machine(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {"name",      "family",         "vcpus",
                                       "memoryGb",  "accelerator",    "acceleratorRequired",
                                       "tpuWorker", "noAccelerators", NULL};
    kiln_machine_type m = {0};
    int before = x->errors;
    const json_t *v;
    const char *fam;
    int64_t vcpus = 0;
    char p[320];

    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping");
        return;
    }
    check_keys(x, e, path, keys);
    m.name = get_name(x, json_object_get(e, "name"), sub(p, sizeof p, path, "name"));
    fam = text(json_object_get(e, "family"));
    if (fam && !strcmp(fam, "compute-engine"))
        m.family = KILN_FAMILY_COMPUTE_ENGINE;
    else if (fam && !strcmp(fam, "legacy"))
        m.family = KILN_FAMILY_LEGACY;
    else
        bad(x, sub(p, sizeof p, path, "family"), "expected compute-engine or legacy");
    if (get_int(x, json_object_get(e, "vcpus"), sub(p, sizeof p, path, "vcpus"), 0, 1 << 20,
                &vcpus))
        m.vcpus = (int)vcpus;
    get_num(x, json_object_get(e, "memoryGb"), sub(p, sizeof p, path, "memoryGb"), &m.memory_gb);
    if ((v = json_object_get(e, "accelerator")))
        parse_builtin(x, v, sub(p, sizeof p, path, "accelerator"), &m);
    if ((v = json_object_get(e, "acceleratorRequired")))
        get_bool(x, v, sub(p, sizeof p, path, "acceleratorRequired"), &m.accelerator_required);
    if ((v = json_object_get(e, "tpuWorker")))
        get_bool(x, v, sub(p, sizeof p, path, "tpuWorker"), &m.is_tpu_worker);
    if ((v = json_object_get(e, "noAccelerators")))
        get_bool(x, v, sub(p, sizeof p, path, "noAccelerators"), &m.no_accelerators);
    if (x->errors != before || x->nomem || upsert_machine(x->c, &m)) {
        if (!(x->errors != before)) x->nomem = true;
        machine_free(&m);
    }
}

/* ---------- accelerators ---------- */

#define KILN_CATALOG_SITE_COUNTS_MAX 64 /* a node's GPUs at most (KILN_MAX_NODE_DEVICES) */

static kiln_err upsert_accel(kiln_catalog *c, kiln_accelerator_type *a)
{
    for (size_t i = 0; i < c->n_accels; i++) {
        if (strcmp(c->accels[i].name, a->name) == 0) {
            free((char *)c->accels[i].name);
            c->accels[i] = *a;
            return KILN_OK;
        }
    }
    if (GROW(c->accels, c->n_accels, c->cap_accels)) return KILN_ENOMEM;
    c->accels[c->n_accels++] = *a;
    return KILN_OK;
}

static void parse_accel(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {
        "name",     "tpu",         "pod", "maxVcpusPerAccelerator", "maxMemoryGbPerAccelerator",
        "maxVcpus", "maxMemoryGb", NULL};
    kiln_accelerator_type a = {0};
    int before = x->errors;
    const json_t *v;
    int64_t n;
    char p[320];

    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping");
        return;
    }
    check_keys(x, e, path, keys);
    a.name = get_name(x, json_object_get(e, "name"), sub(p, sizeof p, path, "name"));
    if ((v = json_object_get(e, "tpu"))) get_bool(x, v, sub(p, sizeof p, path, "tpu"), &a.is_tpu);
    if ((v = json_object_get(e, "pod"))) get_bool(x, v, sub(p, sizeof p, path, "pod"), &a.is_pod);
    if ((v = json_object_get(e, "maxVcpusPerAccelerator")) &&
        get_int(x, v, sub(p, sizeof p, path, "maxVcpusPerAccelerator"), 0, 1 << 20, &n))
        a.max_vcpus_per_accelerator = (int)n;
    if ((v = json_object_get(e, "maxMemoryGbPerAccelerator")))
        get_num(x, v, sub(p, sizeof p, path, "maxMemoryGbPerAccelerator"),
                &a.max_memory_gb_per_accelerator);
    if ((v = json_object_get(e, "maxVcpus")) &&
        get_int(x, v, sub(p, sizeof p, path, "maxVcpus"), 0, 1 << 20, &n))
        a.max_vcpus = (int)n;
    if ((v = json_object_get(e, "maxMemoryGb")))
        get_num(x, v, sub(p, sizeof p, path, "maxMemoryGb"), &a.max_memory_gb);
    if (a.is_pod && !a.is_tpu) bad(x, sub(p, sizeof p, path, "pod"), "a pod must also be a tpu");
    if (x->errors != before || x->nomem || upsert_accel(x->c, &a)) {
        if (!(x->errors != before)) x->nomem = true;
        free((char *)a.name);
    }
}

/* ---------- acceleratorCounts ---------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Parses a list of positive counts into an owned, sorted, de-duplicated array. */
static int64_t *get_counts(lctx *x, const json_t *v, const char *path, size_t *n)
{
    size_t i, k = 0;
    const json_t *e;
    int64_t *out;
    *n = 0;
    if (!json_is_array(v)) {
        bad(x, path, "expected a list of counts");
        return NULL;
    }
    if (!(out = calloc(json_array_size(v) + 1, sizeof *out))) {
        x->nomem = true;
        return NULL;
    }
    json_array_foreach((json_t *)v, i, e)
    {
        char p[320];
        pathf(p, sizeof p, "%s[%zu]", path, i);
        if (!get_int(x, e, p, 1, 1 << 20, &out[i])) {
            free(out);
            return NULL;
        }
    }
    qsort(out, json_array_size(v), sizeof *out, cmp_i64);
    for (i = 0; i < json_array_size(v); i++)
        if (k == 0 || out[k - 1] != out[i]) out[k++] = out[i];
    *n = k;
    return out;
}

static kiln_err upsert_cell(kiln_catalog *c, const char *machine, const char *accel,
                            const int64_t *counts, size_t n)
{
    kiln__count_cell *cell = (kiln__count_cell *)kiln__catalog_cell(c, machine, accel);
    int64_t *copy = malloc((n + 1) * sizeof *copy);
    if (!copy) return KILN_ENOMEM;
    memcpy(copy, counts, n * sizeof *copy);
    if (!cell) {
        char *m = strdup(machine), *a = strdup(accel);
        if (!m || !a || GROW(c->cells, c->n_cells, c->cap_cells)) {
            free(m);
            free(a);
            free(copy);
            return KILN_ENOMEM;
        }
        cell = &c->cells[c->n_cells++];
        cell->machine = m;
        cell->accel = a;
        cell->counts = NULL;
    }
    free(cell->counts);
    cell->counts = copy;
    cell->n = n;
    return KILN_OK;
}

static void parse_count_row(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {"machineTypes", "counts", NULL};
    const json_t *counts, *list;
    const char *accel;
    size_t n_machines = 0;
    char **machines = NULL;
    char p[320], q[320];

    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping {machineTypes, counts}");
        return;
    }
    check_keys(x, e, path, keys);
    machines = get_strs(x, json_object_get(e, "machineTypes"),
                        sub(p, sizeof p, path, "machineTypes"), &n_machines);
    counts = json_object_get(e, "counts");
    if (!json_is_object(counts)) bad(x, sub(p, sizeof p, path, "counts"), "expected a mapping");
    if (!machines || !json_is_object(counts)) goto out;
    json_object_foreach((json_t *)counts, accel, list)
    {
        size_t n;
        sub(q, sizeof q, sub(p, sizeof p, path, "counts"), accel);
        int64_t *v = get_counts(x, list, q, &n);
        for (size_t i = 0; v && i < n_machines; i++)
            if (upsert_cell(x->c, machines[i], accel, v, n)) x->nomem = true;
        free(v);
    }
out:
    if (machines) strs_free((const char *const *)machines, n_machines);
}

/* ---------- regions ---------- */

static void zones_free(const kiln_zone *z, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)z[i].name);
        strs_free(z[i].accelerators, z[i].n_accelerators);
    }
    free((void *)z);
}

static void region_free(kiln_region *r)
{
    free((char *)r->name);
    zones_free(r->zones, r->n_zones);
    strs_free(r->tpu_types, r->n_tpu_types);
    memset(r, 0, sizeof *r);
}

static kiln_err upsert_region(kiln_catalog *c, kiln_region *r)
{
    for (size_t i = 0; i < c->n_regions; i++) {
        if (strcmp(c->regions[i].name, r->name) == 0) {
            region_free(&c->regions[i]);
            c->regions[i] = *r;
            return KILN_OK;
        }
    }
    if (GROW(c->regions, c->n_regions, c->cap_regions)) return KILN_ENOMEM;
    c->regions[c->n_regions++] = *r;
    return KILN_OK;
}

static void parse_zones(lctx *x, const json_t *zones, const char *path, kiln_region *r)
{
    const char *zname;
    const json_t *list;
    kiln_zone *z;
    char p[320];

    if (!json_is_object(zones)) {
        bad(x, path, "expected a mapping zone -> [accelerators]");
        return;
    }
    if (!(z = calloc(json_object_size(zones) + 1, sizeof *z))) {
        x->nomem = true;
        return;
    }
    r->zones = z;
    json_object_foreach((json_t *)zones, zname, list)
    {
        size_t n = 0;
        const char *const *acc =
            (const char *const *)get_strs(x, list, sub(p, sizeof p, path, zname), &n);
        char *name = strdup(zname);
        if (!acc || !name) {
            if (!name) x->nomem = true;
            free(name);
            if (acc) strs_free(acc, n);
            continue;
        }
        z[r->n_zones].name = name;
        z[r->n_zones].accelerators = acc;
        z[r->n_zones].n_accelerators = n;
        r->n_zones++;
    }
}

static void parse_region(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {"name", "zones", "tpus", NULL};
    kiln_region r = {0};
    int before = x->errors;
    const json_t *v;
    char p[320];

    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping");
        return;
    }
    check_keys(x, e, path, keys);
    r.name = get_name(x, json_object_get(e, "name"), sub(p, sizeof p, path, "name"));
    parse_zones(x, json_object_get(e, "zones"), sub(p, sizeof p, path, "zones"), &r);
    if ((v = json_object_get(e, "tpus")))
        r.tpu_types =
            (const char *const *)get_strs(x, v, sub(p, sizeof p, path, "tpus"), &r.n_tpu_types);
    if (x->errors != before || x->nomem || upsert_region(x->c, &r)) {
        if (!(x->errors != before)) x->nomem = true;
        region_free(&r);
    }
}

/* ---------- scaleTiers ---------- */

static void tier_free(kiln__scale_tier *t)
{
    free(t->name);
    for (int r = 0; r < KILN_ROLE_COUNT; r++)
        free(t->roles[r].type);
    memset(t, 0, sizeof *t);
}

static kiln_err upsert_tier(kiln_catalog *c, kiln__scale_tier *t)
{
    for (size_t i = 0; i < c->n_tiers; i++) {
        if (strcmp(c->tiers[i].name, t->name) == 0) {
            tier_free(&c->tiers[i]);
            c->tiers[i] = *t;
            return KILN_OK;
        }
    }
    if (GROW(c->tiers, c->n_tiers, c->cap_tiers)) return KILN_ENOMEM;
    c->tiers[c->n_tiers++] = *t;
    return KILN_OK;
}

static void parse_tier_role(lctx *x, const json_t *e, const char *path, kiln_role role,
                            kiln__tier_role *out)
{
    static const char *const keys[] = {"type", "count", NULL};
    const json_t *v;
    char p[320];
    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping {type, count}");
        return;
    }
    check_keys(x, e, path, keys);
    out->type = get_name(x, json_object_get(e, "type"), sub(p, sizeof p, path, "type"));
    out->count = 1;
    if ((v = json_object_get(e, "count")))
        get_int(x, v, sub(p, sizeof p, path, "count"), role == KILN_ROLE_MASTER ? 1 : 0,
                role == KILN_ROLE_MASTER ? 1 : 100000, &out->count);
}

static void parse_tier(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {"name",      "custom", "master", "worker", "parameterServer",
                                       "evaluator", NULL};
    kiln__scale_tier t = {0};
    int before = x->errors;
    const json_t *v;
    char p[320];

    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping");
        return;
    }
    check_keys(x, e, path, keys);
    t.name = get_name(x, json_object_get(e, "name"), sub(p, sizeof p, path, "name"));
    if ((v = json_object_get(e, "custom")))
        get_bool(x, v, sub(p, sizeof p, path, "custom"), &t.custom);
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const char *field = kiln_role_field((kiln_role)r);
        if ((v = json_object_get(e, field)))
            parse_tier_role(x, v, sub(p, sizeof p, path, field), (kiln_role)r, &t.roles[r]);
    }
    if (!t.custom && !t.roles[KILN_ROLE_MASTER].type && x->errors == before)
        bad(x, path, "a scale tier needs a master (or custom: true)");
    if (x->errors != before || x->nomem || upsert_tier(x->c, &t)) {
        if (!(x->errors != before)) x->nomem = true;
        tier_free(&t);
    }
}

/* ---------- sections ---------- */

typedef void (*entry_fn)(lctx *, const json_t *, const char *);

static void each_entry(lctx *x, const json_t *list, const char *section, entry_fn fn)
{
    size_t i;
    const json_t *e;
    if (!json_is_array(list)) {
        bad(x, section, "expected a list");
        return;
    }
    json_array_foreach((json_t *)list, i, e)
    {
        char p[320];
        pathf(p, sizeof p, "%s[%zu]", section, i);
        fn(x, e, p);
    }
}

static void sec_machines(lctx *x, const json_t *v)
{
    each_entry(x, v, "machineTypes", parse_machine);
}
static void sec_accels(lctx *x, const json_t *v)
{
    each_entry(x, v, "accelerators", parse_accel);
}
static void sec_counts(lctx *x, const json_t *v)
{
    each_entry(x, v, "acceleratorCounts", parse_count_row);
}
static void sec_regions(lctx *x, const json_t *v)
{
    each_entry(x, v, "regions", parse_region);
}
static void sec_tiers(lctx *x, const json_t *v)
{
    each_entry(x, v, "scaleTiers", parse_tier);
}
/* ---------- runtimeVersions, runtimeMirrors ---------- */

static void runtime_free(kiln__runtime *r)
{
    free((char *)r->pub.version);
    free((char *)r->pub.python);
    free((char *)r->pub.cpu_image);
    free((char *)r->pub.gpu_image);
    free(r->cpu_raw);
    free(r->gpu_raw);
    memset(r, 0, sizeof *r);
}

static kiln__runtime *runtime_find(const kiln_catalog *c, const char *version, const char *python)
{
    for (size_t i = 0; i < c->n_runtimes; i++)
        if (!strcmp(c->runtimes[i].pub.version, version) &&
            !strcmp(c->runtimes[i].pub.python, python))
            return &c->runtimes[i];
    return NULL;
}

/* A pair replaces the pair it names in place (so a version's default Python
 * stays first), or is added at the end; `remove` drops it. */
static kiln_err upsert_runtime(kiln_catalog *c, kiln__runtime *r, bool remove)
{
    kiln__runtime *have = runtime_find(c, r->pub.version, r->pub.python);
    if (remove) {
        if (have) {
            runtime_free(have);
            size_t i = (size_t)(have - c->runtimes);
            memmove(have, have + 1, (c->n_runtimes - i - 1) * sizeof *have);
            c->n_runtimes--;
        }
        runtime_free(r);
        return KILN_OK;
    }
    if (have) {
        runtime_free(have);
        *have = *r;
        return KILN_OK;
    }
    if (GROW(c->runtimes, c->n_runtimes, c->cap_runtimes)) return KILN_ENOMEM;
    c->runtimes[c->n_runtimes++] = *r;
    return KILN_OK;
}

/* An image reference as podman takes it: no blanks or control characters,
 * not an option. */
static bool image_ok(const char *s)
{
    if (!s[0] || s[0] == '-') return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return false;
    return true;
}

static char *get_image(lctx *x, const json_t *v, const char *path)
{
    char *s = get_name(x, v, path);
    if (s && !image_ok(s)) {
        bad(x, path, "'%.128s' is not an image reference (no blanks, not starting with '-')", s);
        free(s);
        return NULL;
    }
    return s;
}

static void parse_runtime(lctx *x, const json_t *e, const char *path)
{
    static const char *const keys[] = {"version", "python", "cpu", "gpu", "image", "remove", NULL};
    kiln__runtime r = {0};
    int before = x->errors;
    bool remove = false;
    const json_t *v;
    char p[320];

    if (json_is_string(e)) { /* the list of names this section used to be */
        bad(x, path,
            "'%.32s': a runtime version names its images now: {version: \"%.32s\", python: "
            "\"3.7\", image: IMAGE} (docs/catalog.md, \"Runtime versions\")",
            json_string_value(e), json_string_value(e));
        return;
    }
    if (!json_is_object(e)) {
        bad(x, path, "expected a mapping {version, python, cpu, gpu} or {version, python, image}");
        return;
    }
    check_keys(x, e, path, keys);
    r.pub.version = get_name(x, json_object_get(e, "version"), sub(p, sizeof p, path, "version"));
    r.pub.python = get_name(x, json_object_get(e, "python"), sub(p, sizeof p, path, "python"));
    if ((v = json_object_get(e, "remove")))
        get_bool(x, v, sub(p, sizeof p, path, "remove"), &remove);
    const json_t *img = json_object_get(e, "image"), *cpu = json_object_get(e, "cpu"),
                 *gpu = json_object_get(e, "gpu");
    if (remove && (img || cpu || gpu))
        bad(x, sub(p, sizeof p, path, "remove"), "a pair that is removed names no images");
    else if (!remove && img && (cpu || gpu))
        bad(x, sub(p, sizeof p, path, "image"),
            "give either image (for every replica) or cpu and gpu, not both");
    else if (!remove && img) {
        r.cpu_raw = get_image(x, img, sub(p, sizeof p, path, "image"));
        r.gpu_raw = r.cpu_raw ? strdup(r.cpu_raw) : NULL;
        if (r.cpu_raw && !r.gpu_raw) x->nomem = true;
    } else if (!remove) {
        r.cpu_raw = get_image(x, cpu, sub(p, sizeof p, path, "cpu"));
        r.gpu_raw = get_image(x, gpu, sub(p, sizeof p, path, "gpu"));
    }
    r.pub.site = x->site;
    if (x->errors != before || x->nomem || upsert_runtime(x->c, &r, remove)) {
        if (!(x->errors != before)) x->nomem = true;
        runtime_free(&r);
    }
}

static void sec_runtimes(lctx *x, const json_t *v)
{
    each_entry(x, v, "runtimeVersions", parse_runtime);
}

/* runtimeMirrors: {REGISTRY/PATH: MIRROR/PATH, ...}; a key replaces the
 * same key's mirror. */
static void sec_mirrors(lctx *x, const json_t *v)
{
    const char *from;
    const json_t *to;
    char p[320];
    if (!json_is_object(v)) {
        bad(x, "runtimeMirrors", "expected a mapping REGISTRY/PATH: MIRROR/PATH");
        return;
    }
    json_object_foreach((json_t *)v, from, to)
    {
        kiln_catalog *c = x->c;
        sub(p, sizeof p, "runtimeMirrors", from);
        char *t = get_image(x, to, p), *f = NULL;
        if (!t) continue;
        if (!image_ok(from) || from[strlen(from) - 1] == '/') {
            bad(x, p, "'%.128s' is not a registry prefix (REGISTRY[/PATH], no trailing '/')", from);
            free(t);
            continue;
        }
        while (strlen(t) > 1 && t[strlen(t) - 1] == '/')
            t[strlen(t) - 1] = '\0';
        size_t i;
        for (i = 0; i < c->n_mirrors && strcmp(c->mirrors[i].from, from); i++)
            ;
        if (i == c->n_mirrors &&
            (GROW(c->mirrors, c->n_mirrors, c->cap_mirrors) || !(f = strdup(from)))) {
            x->nomem = true;
            free(t);
            continue;
        }
        if (i == c->n_mirrors) {
            c->mirrors[i].from = f;
            c->n_mirrors++;
        } else {
            free(c->mirrors[i].to);
        }
        c->mirrors[i].to = t;
        c->mirrors[i].site = x->site;
    }
}

/* The image with the longest mirror prefix that matches (FROM/...)
 * rewritten to its mirror; NULL on ENOMEM. */
static char *mirrored(const kiln_catalog *c, const char *image, bool *hit)
{
    const kiln__mirror *best = NULL;
    for (size_t i = 0; i < c->n_mirrors; i++) {
        size_t n = strlen(c->mirrors[i].from);
        if (!strncmp(image, c->mirrors[i].from, n) && image[n] == '/' &&
            (!best || n > strlen(best->from)))
            best = &c->mirrors[i];
    }
    *hit = best != NULL;
    if (!best) return strdup(image);
    char *out = NULL;
    if (asprintf(&out, "%s%s", best->to, image + strlen(best->from)) < 0) return NULL;
    return out;
}

/* Applies the mirrors to every pair and marks each version's default Python
 * (its first pair). */
static kiln_err resolve_runtimes(kiln_catalog *c)
{
    for (size_t i = 0; i < c->n_runtimes; i++) {
        kiln__runtime *r = &c->runtimes[i];
        bool h1, h2;
        char *cpu = mirrored(c, r->cpu_raw, &h1), *gpu = mirrored(c, r->gpu_raw, &h2);
        if (!cpu || !gpu) {
            free(cpu);
            free(gpu);
            return KILN_ENOMEM;
        }
        free((char *)r->pub.cpu_image);
        free((char *)r->pub.gpu_image);
        r->pub.cpu_image = cpu;
        r->pub.gpu_image = gpu;
        r->pub.mirrored = h1 || h2;
        r->pub.python_default = true;
        for (size_t k = 0; k < i && r->pub.python_default; k++)
            if (!strcmp(c->runtimes[k].pub.version, r->pub.version)) r->pub.python_default = false;
    }
    return KILN_OK;
}

static void sec_tpu(lctx *x, const json_t *v)
{
    static const char *const keys[] = {"legacyMasterAccelerator", "workerCount", "runtimeVersions",
                                       "tfVersions", NULL};
    static const char *const akeys[] = {"type", "count", NULL};
    kiln_catalog *c = x->c;
    const json_t *e;
    if (!json_is_object(v)) {
        bad(x, "tpu", "expected a mapping");
        return;
    }
    check_keys(x, v, "tpu", keys);
    if ((e = json_object_get(v, "legacyMasterAccelerator"))) {
        const char *p = "tpu.legacyMasterAccelerator";
        char *type;
        if (!json_is_object(e)) {
            bad(x, p, "expected a mapping {type, count}");
            return;
        }
        check_keys(x, e, p, akeys);
        if ((type = get_name(x, json_object_get(e, "type"), "tpu.legacyMasterAccelerator.type"))) {
            free(c->tpu_legacy_accel);
            c->tpu_legacy_accel = type;
        }
        get_int(x, json_object_get(e, "count"), "tpu.legacyMasterAccelerator.count", 1, 1 << 20,
                &c->tpu_legacy_count);
    }
    if ((e = json_object_get(v, "workerCount")))
        get_int(x, e, "tpu.workerCount", 1, 1024, &c->tpu_worker_count);
    if ((e = json_object_get(v, "runtimeVersions")))
        add_names(x, &c->tpu_runtime_versions, e, "tpu.runtimeVersions");
    if ((e = json_object_get(v, "tfVersions")))
        add_names(x, &c->tpu_tf_versions, e, "tpu.tfVersions");
}

static void sec_defaults(lctx *x, const json_t *v)
{
    static const char *const keys[] = {"region",
                                       "maxRunningTimeSeconds",
                                       "minMaxWaitTimeSeconds",
                                       "maxPriority",
                                       "jobIdMaxLength",
                                       "maxLabels",
                                       "labelMaxLength",
                                       NULL};
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
        {"maxRunningTimeSeconds", offsetof(kiln_catalog, max_running_time_s)},
        {"minMaxWaitTimeSeconds", offsetof(kiln_catalog, min_max_wait_time_s)},
        {"maxPriority", offsetof(kiln_catalog, max_priority)},
        {"jobIdMaxLength", offsetof(kiln_catalog, job_id_max_length)},
        {"maxLabels", offsetof(kiln_catalog, max_labels)},
        {"labelMaxLength", offsetof(kiln_catalog, label_max_length)},
    };
    const json_t *e;
    char p[320];
    if (!json_is_object(v)) {
        bad(x, "defaults", "expected a mapping");
        return;
    }
    check_keys(x, v, "defaults", keys);
    if ((e = json_object_get(v, "region"))) {
        char *r = get_name(x, e, "defaults.region");
        if (r) {
            free(x->c->default_region);
            x->c->default_region = r;
        }
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if ((e = json_object_get(v, ints[i].key)))
            get_int(x, e, sub(p, sizeof p, "defaults", ints[i].key), 1, INT64_C(1) << 40,
                    (int64_t *)((char *)x->c + ints[i].off));
}

static const struct {
    const char *name;
    void (*fn)(lctx *, const json_t *);
} sections[] = {
    {"machineTypes", sec_machines},
    {"accelerators", sec_accels},
    {"acceleratorCounts", sec_counts},
    {"regions", sec_regions},
    {"tpu", sec_tpu},
    {"scaleTiers", sec_tiers},
    {"runtimeVersions", sec_runtimes},
    {"runtimeMirrors", sec_mirrors},
    {"defaults", sec_defaults},
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

static kiln_err merge_tree(lctx *x, const json_t *root)
{
    const char *key;
    const json_t *val;
    if (json_is_null(root)) return KILN_OK; /* an empty file */
    if (!json_is_object(root)) {
        bad(x, "", "a catalog file is a mapping of sections");
        return KILN_EINVAL;
    }
    json_object_foreach((json_t *)root, key, val)
    {
        size_t i;
        for (i = 0; i < N_SECTIONS && strcmp(key, sections[i].name); i++)
            ;
        if (i < N_SECTIONS) {
            sections[i].fn(x, val);
        } else {
            const char *names[N_SECTIONS];
            for (size_t k = 0; k < N_SECTIONS; k++)
                names[k] = sections[k].name;
            const char *hint = kiln__suggest(key, names, N_SECTIONS);
            bad(x, key, "unknown section '%s'%s%s%s", key, hint ? " (did you mean '" : "",
                hint ? hint : "", hint ? "'?)" : "");
        }
    }
    if (x->nomem) return KILN_ENOMEM;
    return x->errors ? KILN_EINVAL : KILN_OK;
}

static kiln_err merge_one(kiln_catalog *c, const char *buf, size_t len, const char *name, bool site,
                          kiln_diag *d)
{
    lctx x = {c, name ? name : "catalog", d, 0, false, site};
    kiln_err err = KILN_OK;
    kiln_diag inner = KILN_DIAG_INIT;
    json_t *root = kiln__yaml_load_err(buf, len, &inner, &err);

    /* The YAML loader's violations have field ""; give them the file's name. */
    for (size_t i = 0; i < inner.n; i++)
        kiln_diag_add(d, x.file, "%s", inner.v[i].description);
    kiln_diag_free(&inner);
    if (!root) return err ? err : KILN_EINVAL;
    err = merge_tree(&x, root);
    json_decref(root);
    return err;
}

/* ---------- the merged catalog must hang together ---------- */

static void need_accel(lctx *x, const char *path, const char *name, int want_tpu)
{
    const kiln_accelerator_type *a = kiln_catalog_accelerator(x->c, name);
    if (!a)
        bad(x, path, "unknown accelerator type '%s'", name);
    else if (want_tpu >= 0 && a->is_tpu != (want_tpu != 0))
        bad(x, path, "'%s' is %s", name, a->is_tpu ? "a TPU, not a GPU" : "a GPU, not a TPU");
}

static void check_machines_cells(lctx *x)
{
    const kiln_catalog *c = x->c;
    char p[320];
    for (size_t i = 0; i < c->n_machines; i++) {
        const kiln_machine_type *m = &c->machines[i];
        pathf(p, sizeof p, "machineTypes.%s.accelerator.type", m->name);
        if (m->builtin_accelerator) need_accel(x, p, m->builtin_accelerator, 0);
    }
    for (size_t i = 0; i < c->n_cells; i++) {
        pathf(p, sizeof p, "acceleratorCounts.%s.%s", c->cells[i].machine, c->cells[i].accel);
        if (!kiln_catalog_machine(c, c->cells[i].machine))
            bad(x, p, "unknown machine type '%s'", c->cells[i].machine);
        need_accel(x, p, c->cells[i].accel, -1);
    }
}

static void check_regions(lctx *x)
{
    const kiln_catalog *c = x->c;
    char p[320];
    for (size_t i = 0; i < c->n_regions; i++) {
        const kiln_region *r = &c->regions[i];
        for (size_t z = 0; z < r->n_zones; z++) {
            pathf(p, sizeof p, "regions.%s.zones.%s", r->name, r->zones[z].name);
            for (size_t k = 0; k < r->zones[z].n_accelerators; k++)
                need_accel(x, p, r->zones[z].accelerators[k], 0);
        }
        pathf(p, sizeof p, "regions.%s.tpus", r->name);
        for (size_t k = 0; k < r->n_tpu_types; k++)
            need_accel(x, p, r->tpu_types[k], 1);
    }
}

static void check_rest(lctx *x)
{
    const kiln_catalog *c = x->c;
    char p[320];
    for (size_t i = 0; i < c->n_tiers; i++) {
        for (int r = 0; r < KILN_ROLE_COUNT; r++) {
            const char *t = c->tiers[i].roles[r].type;
            pathf(p, sizeof p, "scaleTiers.%s.%s.type", c->tiers[i].name,
                  kiln_role_field((kiln_role)r));
            if (t && !kiln_catalog_machine(c, t)) bad(x, p, "unknown machine type '%s'", t);
        }
    }
    if (!c->tpu_legacy_accel)
        bad(x, "tpu.legacyMasterAccelerator", "required");
    else
        need_accel(x, "tpu.legacyMasterAccelerator.type", c->tpu_legacy_accel, 1);
    if (!c->default_region)
        bad(x, "defaults.region", "required");
    else if (!kiln_catalog_region(c, c->default_region))
        bad(x, "defaults.region", "unknown region '%s'", c->default_region);
    if (c->max_running_time_s <= 0 || c->min_max_wait_time_s <= 0 || c->max_priority <= 0 ||
        c->job_id_max_length <= 0 || c->max_labels <= 0 || c->label_max_length <= 0)
        bad(x, "defaults", "every limit of defaults must be set (see data/catalog/service.yaml)");
}

static kiln_err check_catalog(kiln_catalog *c, const char *name, kiln_diag *d)
{
    lctx x = {c, name ? name : "catalog", d, 0, false, false};
    check_machines_cells(&x);
    check_regions(&x);
    check_rest(&x);
    if (!x.errors && resolve_runtimes(c) != KILN_OK) return KILN_ENOMEM;
    return x.errors ? KILN_EINVAL : KILN_OK;
}

/* ---------- public ---------- */

static kiln_catalog *catalog_new(void)
{
    kiln_catalog *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    /* Limits come from service.yaml; 0 marks "not set" for check_rest(). */
    return c;
}

void kiln_catalog_free(kiln_catalog *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n_machines; i++)
        machine_free(&c->machines[i]);
    free(c->machines);
    for (size_t i = 0; i < c->n_accels; i++)
        free((char *)c->accels[i].name);
    free(c->accels);
    for (size_t i = 0; i < c->n_cells; i++) {
        free(c->cells[i].machine);
        free(c->cells[i].accel);
        free(c->cells[i].counts);
    }
    free(c->cells);
    for (size_t i = 0; i < c->n_regions; i++)
        region_free(&c->regions[i]);
    free(c->regions);
    for (size_t i = 0; i < c->n_tiers; i++)
        tier_free(&c->tiers[i]);
    free(c->tiers);
    for (size_t i = 0; i < c->n_runtimes; i++)
        runtime_free(&c->runtimes[i]);
    free(c->runtimes);
    for (size_t i = 0; i < c->n_mirrors; i++) {
        free(c->mirrors[i].from);
        free(c->mirrors[i].to);
    }
    free(c->mirrors);
    names_free(&c->tpu_runtime_versions);
    names_free(&c->tpu_tf_versions);
    free(c->tpu_legacy_accel);
    free(c->default_region);
    free(c);
}

kiln_err kiln_catalog_default(kiln_catalog **out, kiln_diag *d)
{
    kiln_err err = KILN_OK;
    kiln_catalog *c = catalog_new();
    *out = NULL;
    if (!c) return KILN_ENOMEM;
    for (const struct kiln__embedded *f = kiln__catalog_files; f->name && !err; f++)
        err = merge_one(c, f->data, f->len, f->name, false, d);
    if (!err) err = check_catalog(c, "catalog", d);
    if (err) goto out;
    *out = c;
    c = NULL;
out:
    kiln_catalog_free(c);
    return err;
}

kiln_err kiln_catalog_merge_buf(kiln_catalog *c, const char *buf, size_t len, const char *name,
                                kiln_diag *d)
{
    kiln_err err = merge_one(c, buf, len, name, true, d);
    return err ? err : check_catalog(c, name, d);
}

kiln_err kiln_catalog_merge_file(kiln_catalog *c, const char *path, kiln_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    kiln_err err = kiln__read_file(path, KILN_SPEC_MAX_BYTES, &buf, &len);
    if (err) {
        kiln_diag_add(d, path, "cannot read the catalog file: %s",
                      err == KILN_ELIMIT ? "it is too large" : strerror(errno));
        goto out;
    }
    err = kiln_catalog_merge_buf(c, buf, len, path, d);
out:
    free(buf);
    return err;
}

/* ---------- the site's own GPUs ---------- */

kiln_err kiln_catalog_add_site_gpu(kiln_catalog *c, const char *name, int max_per_node)
{
    kiln_accelerator_type *have = (kiln_accelerator_type *)kiln_catalog_accelerator(c, name);
    int64_t counts[KILN_CATALOG_SITE_COUNTS_MAX];
    size_t n = 0;

    if (have && have->is_tpu) return KILN_EINVAL;
    if (!have) {
        kiln_accelerator_type a = {.name = strdup(name)};
        if (!a.name) return KILN_ENOMEM;
        if (upsert_accel(c, &a) != KILN_OK) {
            free((char *)a.name);
            return KILN_ENOMEM;
        }
        have = (kiln_accelerator_type *)kiln_catalog_accelerator(c, name);
    }
    have->site = true;
    for (int k = 1; k <= max_per_node && n < KILN_CATALOG_SITE_COUNTS_MAX; k++)
        counts[n++] = k;
    for (size_t i = 0; n && i < c->n_machines; i++) {
        const kiln_machine_type *m = &c->machines[i];
        if (m->family != KILN_FAMILY_COMPUTE_ENGINE || m->accelerator_required ||
            m->no_accelerators || m->is_tpu_worker || kiln__catalog_cell(c, m->name, name))
            continue;
        if (upsert_cell(c, m->name, name, counts, n) != KILN_OK) return KILN_ENOMEM;
    }
    return KILN_OK;
}
