/* src/cli/catalog.c - `kiln catalog list machine-types|accelerators|regions|
 * runtime-versions`:
 * what the validator accepts, as an aligned table or as JSON, from the
 * built-in catalog plus an optional site catalog (--catalog FILE).
 *
 * Exit status (src/cli/cli.h): 0 listed; 1 bad command line or unreadable
 * catalog file; 2 the site catalog was read but is invalid. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/catalog.h"

static const char usage[] =
    "usage: kiln catalog list machine-types|accelerators|regions|runtime-versions\n"
    "                         [--format table|json] [--catalog FILE]\n"
    "\n"
    "Lists what jobs may use: machine types (with the accelerators and counts each\n"
    "takes), accelerator types (with their per-accelerator vCPU/memory shares),\n"
    "regions (with each zone's GPUs and the region's TPUs), or runtime versions\n"
    "(each runtimeVersion and pythonVersion with the images its replicas run in,\n"
    "without and with GPUs, and whether the built-in catalog or the site's set\n"
    "them). --catalog merges a site catalog file over the built-in one first, as\n"
    "kilnd does.\n"
    "\n"
    "Exit status: 0 listed, 1 bad command line or unreadable file, 2 invalid site catalog.\n";

typedef struct opts {
    const char *what;    /* machine-types | accelerators | regions | runtime-versions */
    bool json;           /* --format json */
    const char *catalog; /* --catalog FILE */
} opts;

/* ---------- a small aligned-table printer ---------- */

#define MAX_COLS 6

typedef struct table {
    size_t ncol, nrow, cap;
    char **cells; /* nrow * ncol, row-major, owned */
} table;

static bool table_row(table *t, const char *const *vals)
{
    if (t->nrow == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        char **p = realloc(t->cells, cap * t->ncol * sizeof *p);
        if (!p) return false;
        t->cells = p;
        t->cap = cap;
    }
    for (size_t i = 0; i < t->ncol; i++) {
        t->cells[t->nrow * t->ncol + i] = strdup(vals[i] ? vals[i] : "");
        if (!t->cells[t->nrow * t->ncol + i]) {
            for (size_t k = 0; k < i; k++)
                free(t->cells[t->nrow * t->ncol + k]);
            return false;
        }
    }
    t->nrow++;
    return true;
}

/* Row 0 is the header. Lines carry no trailing blanks. */
static void table_print(const table *t, FILE *f)
{
    size_t w[MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrow; r++)
        for (size_t c = 0; c < t->ncol; c++) {
            size_t len = strlen(t->cells[r * t->ncol + c]);
            if (len > w[c]) w[c] = len;
        }
    for (size_t r = 0; r < t->nrow; r++) {
        size_t last = t->ncol; /* print up to the last non-empty cell */
        while (last > 1 && !t->cells[r * t->ncol + last - 1][0])
            last--;
        for (size_t c = 0; c < last; c++) {
            const char *s = t->cells[r * t->ncol + c];
            if (c + 1 == last)
                fprintf(f, "%s\n", s);
            else
                fprintf(f, "%-*s  ", (int)w[c], s);
        }
    }
}

static void table_free(table *t)
{
    for (size_t i = 0; i < t->nrow * t->ncol; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* ---------- formatting helpers ---------- */

static const char *short_accel(const char *name)
{
    const char *p = strrchr(name, '_');
    return strncmp(name, "NVIDIA_TESLA_", 13) == 0 && p ? p + 1 : name;
}

static void append(char *buf, size_t cap, const char *s)
{
    size_t len = strlen(buf);
    if (len + 1 < cap) snprintf(buf + len, cap - len, "%s", s);
}

/* "K80:1,2,4,8 P4:1,2,4 ..." - what a machine takes via acceleratorConfig. */
static void machine_accels(const kiln_catalog *c, const kiln_machine_type *m, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (m->builtin_accelerator) {
        snprintf(buf, cap, "%d x %s (built in)", m->builtin_accelerator_count,
                 m->builtin_accelerator);
        return;
    }
    for (size_t i = 0; i < kiln_catalog_accelerator_count(c); i++) {
        const kiln_accelerator_type *a = kiln_catalog_accelerator_at(c, i);
        int64_t v[64];
        size_t n = kiln_catalog_valid_counts(c, m->name, a->name, v, 64);
        char item[256];
        if (n == 0) continue;
        snprintf(item, sizeof item, "%s%s:", buf[0] ? " " : "", short_accel(a->name));
        for (size_t k = 0; k < n && k < 64; k++) {
            size_t len = strlen(item);
            snprintf(item + len, sizeof item - len, "%s%lld", k ? "," : "", (long long)v[k]);
        }
        append(buf, cap, item);
    }
    if (!buf[0]) snprintf(buf, cap, "-");
}

static void share(char *buf, size_t cap, int vcpus, double gb)
{
    if (!vcpus && gb <= 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%d vCPUs / %g GB", vcpus, gb);
}

/* ---------- tables ---------- */

static bool table_machines(const kiln_catalog *c, table *t)
{
    static const char *const head[] = {"NAME", "FAMILY", "VCPUS", "MEMORY_GB", "ACCELERATORS"};
    bool ok = table_row(t, head);
    for (size_t i = 0; ok && i < kiln_catalog_machine_count(c); i++) {
        const kiln_machine_type *m = kiln_catalog_machine_at(c, i);
        char vcpus[32], mem[32], acc[1024];
        snprintf(vcpus, sizeof vcpus, "%d", m->vcpus);
        snprintf(mem, sizeof mem, "%g", m->memory_gb);
        machine_accels(c, m, acc, sizeof acc);
        const char *fam = m->is_tpu_worker                  ? "tpu-worker"
                          : m->family == KILN_FAMILY_LEGACY ? "legacy"
                                                            : "compute-engine";
        const char *row[] = {m->name, fam, vcpus, mem, acc};
        ok = table_row(t, row);
    }
    return ok;
}

static bool table_accels(const kiln_catalog *c, table *t)
{
    static const char *const head[] = {"NAME", "KIND", "MAX_PER_ACCELERATOR", "MAX_PER_HOST"};
    bool ok = table_row(t, head);
    for (size_t i = 0; ok && i < kiln_catalog_accelerator_count(c); i++) {
        const kiln_accelerator_type *a = kiln_catalog_accelerator_at(c, i);
        char per[64], host[64];
        share(per, sizeof per, a->max_vcpus_per_accelerator, a->max_memory_gb_per_accelerator);
        share(host, sizeof host, a->max_vcpus, a->max_memory_gb);
        const char *row[] = {a->name, a->is_pod ? "tpu-pod" : a->is_tpu ? "tpu" : "gpu", per, host};
        ok = table_row(t, row);
    }
    return ok;
}

static bool table_regions(const kiln_catalog *c, table *t)
{
    static const char *const head[] = {"REGION", "ZONE", "GPUS", "TPUS"};
    bool ok = table_row(t, head);
    for (size_t i = 0; ok && i < kiln_catalog_region_count(c); i++) {
        const kiln_region *r = kiln_catalog_region_at(c, i);
        char tpus[512] = "";
        for (size_t k = 0; k < r->n_tpu_types; k++) {
            append(tpus, sizeof tpus, k ? ", " : "");
            append(tpus, sizeof tpus, r->tpu_types[k]);
        }
        for (size_t z = 0; ok && z < r->n_zones; z++) {
            char gpus[512] = "";
            for (size_t k = 0; k < r->zones[z].n_accelerators; k++) {
                append(gpus, sizeof gpus, k ? ", " : "");
                append(gpus, sizeof gpus, short_accel(r->zones[z].accelerators[k]));
            }
            /* TPUs are offered per region: every zone row repeats them */
            const char *row[] = {r->name, r->zones[z].name, gpus[0] ? gpus : "-",
                                 tpus[0] ? tpus : "-"};
            ok = table_row(t, row);
        }
    }
    return ok;
}

/* "default", "site", "default, mirrored" */
static const char *runtime_source(const kiln_runtime *r)
{
    if (r->site) return r->mirrored ? "site, mirrored" : "site";
    return r->mirrored ? "default, mirrored" : "default";
}

static bool table_runtimes(const kiln_catalog *c, table *t)
{
    static const char *const head[] = {"VERSION", "PYTHON", "CPU_IMAGE", "GPU_IMAGE", "SOURCE"};
    bool ok = table_row(t, head);
    for (size_t i = 0; ok && i < kiln_catalog_runtime_count(c); i++) {
        const kiln_runtime *r = kiln_catalog_runtime_at(c, i);
        char py[64];
        snprintf(py, sizeof py, "%s%s", r->python, r->python_default ? " (default)" : "");
        const char *row[] = {r->version, py, r->cpu_image, r->gpu_image, runtime_source(r)};
        ok = table_row(t, row);
    }
    return ok;
}

/* ---------- JSON ---------- */

static json_t *num(double v)
{
    return v == (double)(json_int_t)v ? json_integer((json_int_t)v) : json_real(v);
}

static json_t *strs(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *json_machines(const kiln_catalog *c)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < kiln_catalog_machine_count(c); i++) {
        const kiln_machine_type *m = kiln_catalog_machine_at(c, i);
        json_t *counts = json_object();
        for (size_t k = 0; counts && k < kiln_catalog_accelerator_count(c); k++) {
            const kiln_accelerator_type *a = kiln_catalog_accelerator_at(c, k);
            int64_t v[64];
            size_t n = kiln_catalog_valid_counts(c, m->name, a->name, v, 64);
            json_t *list = n ? json_array() : NULL;
            for (size_t x = 0; list && x < n && x < 64; x++)
                json_array_append_new(list, json_integer(v[x]));
            if (list) json_object_set_new(counts, a->name, list);
        }
        json_t *e = json_pack("{s:s, s:s, s:i, s:o, s:o}", "name", m->name, "family",
                              m->family == KILN_FAMILY_LEGACY ? "legacy" : "compute-engine",
                              "vcpus", m->vcpus, "memoryGb", num(m->memory_gb), "acceleratorCounts",
                              counts ? counts : json_object());
        if (e && m->builtin_accelerator)
            json_object_set_new(e, "accelerator",
                                json_pack("{s:s, s:i}", "type", m->builtin_accelerator, "count",
                                          m->builtin_accelerator_count));
        if (e && m->accelerator_required)
            json_object_set_new(e, "acceleratorRequired", json_true());
        if (e && m->is_tpu_worker) json_object_set_new(e, "tpuWorker", json_true());
        json_array_append_new(out, e);
    }
    return out;
}

static json_t *json_accels(const kiln_catalog *c)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < kiln_catalog_accelerator_count(c); i++) {
        const kiln_accelerator_type *a = kiln_catalog_accelerator_at(c, i);
        json_array_append_new(
            out, json_pack("{s:s, s:b, s:b, s:i, s:o, s:i, s:o}", "name", a->name, "tpu", a->is_tpu,
                           "pod", a->is_pod, "maxVcpusPerAccelerator", a->max_vcpus_per_accelerator,
                           "maxMemoryGbPerAccelerator", num(a->max_memory_gb_per_accelerator),
                           "maxVcpus", a->max_vcpus, "maxMemoryGb", num(a->max_memory_gb)));
    }
    return out;
}

static json_t *json_regions(const kiln_catalog *c)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < kiln_catalog_region_count(c); i++) {
        const kiln_region *r = kiln_catalog_region_at(c, i);
        json_t *zones = json_array();
        for (size_t z = 0; zones && z < r->n_zones; z++)
            json_array_append_new(
                zones, json_pack("{s:s, s:o}", "name", r->zones[z].name, "accelerators",
                                 strs(r->zones[z].accelerators, r->zones[z].n_accelerators)));
        json_array_append_new(out, json_pack("{s:s, s:o, s:o}", "name", r->name, "tpus",
                                             strs(r->tpu_types, r->n_tpu_types), "zones",
                                             zones ? zones : json_array()));
    }
    return out;
}

static json_t *json_runtimes(const kiln_catalog *c)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < kiln_catalog_runtime_count(c); i++) {
        const kiln_runtime *r = kiln_catalog_runtime_at(c, i);
        json_array_append_new(
            out, json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:b}", "runtimeVersion", r->version,
                           "pythonVersion", r->python, "default", r->python_default, "cpuImage",
                           r->cpu_image, "gpuImage", r->gpu_image, "source",
                           r->site ? "site" : "default", "mirrored", r->mirrored));
    }
    return out;
}

/* ---------- command line ---------- */

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "kiln catalog: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage);
    return 1;
}

/* Parses argv (argv[0] = "catalog"). Returns -1 to go on, else an exit status. */
static int parse(int argc, char **argv, opts *o)
{
    int pos = 0;
    /* help wins wherever it is, even after a flag this parser would refuse */
    if (kiln_cli_wants_help(argc - 1, argv + 1) || (argc > 1 && !strcmp(argv[1], "help"))) {
        fputs(usage, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strncmp(a, "--format", 8) || !strncmp(a, "--catalog", 9)) {
            const char *eq = strchr(a, '=');
            size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
            bool is_format = name_len == 8 && !strncmp(a, "--format", 8);
            if (!is_format && !(name_len == 9 && !strncmp(a, "--catalog", 9)))
                return bad_usage("unknown option '%s'", a);
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return bad_usage("%s needs a value", a);
            if (!is_format) {
                o->catalog = val;
            } else if (!strcmp(val, "json") || !strcmp(val, "table")) {
                o->json = !strcmp(val, "json");
            } else {
                return bad_usage("unknown format '%s' (table or json)", val);
            }
        } else if (a[0] == '-') {
            return bad_usage("unknown option '%s'", a);
        } else if (pos == 0 && !strcmp(a, "list")) {
            pos++;
        } else if (pos == 1) {
            o->what = a;
            pos++;
        } else {
            return bad_usage(pos == 0 ? "unknown subcommand '%s' (try `kiln catalog list`)"
                                      : "unexpected argument '%s'",
                             a);
        }
    }
    if (pos < 1) return bad_usage("%s", "missing subcommand: list");
    if (!o->what)
        return bad_usage("%s",
                         "list what? machine-types, accelerators, regions or runtime-versions");
    if (strcmp(o->what, "machine-types") && strcmp(o->what, "accelerators") &&
        strcmp(o->what, "regions") && strcmp(o->what, "runtime-versions"))
        return bad_usage(
            "cannot list '%s' (machine-types, accelerators, regions or runtime-versions)", o->what);
    return -1;
}

static int load(const opts *o, kiln_catalog **c)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_err err = kiln_catalog_default(c, &d);
    if (!err && o->catalog) err = kiln_catalog_merge_file(*c, o->catalog, &d);
    if (err) {
        kiln_diag_print(&d, stderr);
        fprintf(stderr, "kiln catalog: %s: %s\n", o->catalog ? o->catalog : "built-in catalog",
                kiln_err_str(err));
        kiln_catalog_free(*c);
        *c = NULL;
    }
    kiln_diag_free(&d);
    return err == KILN_OK ? -1 : err == KILN_EINVAL ? 2 : 1;
}

static int print_json(const kiln_catalog *c, const char *what)
{
    json_t *v = !strcmp(what, "machine-types")  ? json_machines(c)
                : !strcmp(what, "accelerators") ? json_accels(c)
                : !strcmp(what, "regions")      ? json_regions(c)
                                                : json_runtimes(c);
    char *s = v ? json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s) {
        fprintf(stderr, "kiln catalog: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

static int print_table(const kiln_catalog *c, const char *what)
{
    table t = {0};
    bool ok;
    if (!strcmp(what, "machine-types")) {
        t.ncol = 5;
        ok = table_machines(c, &t);
    } else if (!strcmp(what, "accelerators")) {
        t.ncol = 4;
        ok = table_accels(c, &t);
    } else if (!strcmp(what, "regions")) {
        t.ncol = 4;
        ok = table_regions(c, &t);
    } else {
        t.ncol = 5;
        ok = table_runtimes(c, &t);
    }
    if (ok) table_print(&t, stdout);
    table_free(&t);
    if (!ok) fprintf(stderr, "kiln catalog: out of memory\n");
    return ok ? 0 : 1;
}

int kiln_cli_catalog(int argc, char **argv)
{
    opts o = {0};
    kiln_catalog *c = NULL;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if ((rc = load(&o, &c)) >= 0) return rc;
    rc = o.json ? print_json(c, o.what) : print_table(c, o.what);
    if (fflush(stdout) != 0) rc = 1;
    kiln_catalog_free(c);
    return rc;
}
