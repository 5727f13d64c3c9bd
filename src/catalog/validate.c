/* validate.c - checks a kiln_job against the catalog: every rule of the
 * managed service (platform facts §1-§5) plus kiln's own (restartPolicy,
 * runPolicy, labels).
 *
 * The rules are code; what they compare against is data (machine types, the
 * valid-count table, zones, TPU versions, limits: data/catalog/NAME.yaml). Every
 * violation is reported, each at the JSON (camelCase) path of the field to
 * change, with the offending value and what is allowed. Checks that depend on
 * an earlier field (a count on an unknown machine type) are skipped once that
 * field is reported, so one mistake gives one violation. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "catalog/catalog_int.h"
#include "kiln/tune.h"
#include "util/suggest.h"

#define MSG_MAX 2048

typedef struct vctx {
    const kiln_catalog *c;
    const kiln_job *job;
    const kiln_training_input *ti;
    kiln_diag *d;
    int n; /* violations reported */
    const kiln__scale_tier *tier;
    bool custom; /* the job's own types and counts apply (CUSTOM, or an unknown tier) */
    const char *type[KILN_ROLE_COUNT];
    int64_t count[KILN_ROLE_COUNT];
    const kiln_machine_type *mt[KILN_ROLE_COUNT];
    bool tpu; /* the job has a cloud_tpu worker */
} vctx;

static void viol(vctx *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void viol(vctx *v, const char *field, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln_diag_add(v->d, field, "%s", msg);
    v->n++;
}

/* Appends to a fixed buffer; truncates (messages only) rather than fail. */
static void cat(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;
    if (len + 1 >= cap) return;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* "trainingInput.workerType", "trainingInput.workerConfig.acceleratorConfig.count", ... */
static const char *fld(char *buf, size_t cap, kiln_role r, const char *suffix)
{
    snprintf(buf, cap, "trainingInput.%s%s", kiln_role_field(r), suffix);
    return buf;
}

/* "NVIDIA_TESLA_V100" -> "V100": zone lists read better short. */
static const char *short_accel(const char *name)
{
    const char *p = strrchr(name, '_');
    return strncmp(name, "NVIDIA_TESLA_", 13) == 0 && p ? p + 1 : name;
}

static void join_counts(char *buf, size_t cap, const int64_t *v, size_t n)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        cat(buf, cap, "%s%lld", i ? ", " : "", (long long)v[i]);
}

static bool ascii_lower(char ch)
{
    return ch >= 'a' && ch <= 'z';
}
static bool ascii_alpha(char ch)
{
    return ascii_lower(ch) || (ch >= 'A' && ch <= 'Z');
}
static bool ascii_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool set(const char *s)
{
    return s && *s;
}

/* ---------- jobId, labels ---------- */

static void check_job_id(vctx *v)
{
    const char *id = v->job->job_id;
    size_t len = id ? strlen(id) : 0;
    bool ok = len > 0 && ascii_alpha(id[0]);
    for (size_t i = 0; ok && i < len; i++)
        ok = ascii_alpha(id[i]) || ascii_digit(id[i]) || id[i] == '_';
    if (!len)
        viol(v, "jobId", "required: letters, digits and underscores, starting with a letter");
    else if (!ok)
        viol(v, "jobId",
             "'%.128s' is not a valid job id: use letters, digits and underscores, "
             "starting with a letter",
             id);
    else if ((int64_t)len > v->c->job_id_max_length)
        viol(v, "jobId", "'%.32s...' is %zu characters long; at most %lld are allowed", id, len,
             (long long)v->c->job_id_max_length);
}

/* Label keys and values: lowercase letters, digits, '-' and '_'; keys start
 * with a letter; both are at most label_max_length characters. */
static bool label_ok(const char *s, bool key, int64_t max)
{
    size_t len = strlen(s);
    if ((int64_t)len > max || (key && (len == 0 || !ascii_lower(s[0])))) return false;
    for (size_t i = 0; i < len; i++)
        if (!ascii_lower(s[i]) && !ascii_digit(s[i]) && s[i] != '-' && s[i] != '_') return false;
    return true;
}

/* Kubernetes' rule for a label name or value: at most 63 characters,
 * alphanumerics at both ends, '-', '_' and '.' inside (a value may be empty). */
static bool k8s_name_ok(const char *s, bool empty_ok)
{
    size_t len = strlen(s);
    if (len == 0) return empty_ok;
    if (len > 63) return false;
    for (size_t i = 0; i < len; i++) {
        bool alnum = ascii_alpha(s[i]) || ascii_digit(s[i]);
        if (!alnum && ((i == 0 || i + 1 == len) || !strchr("-_.", s[i]))) return false;
    }
    return true;
}

/* A DNS subdomain: at most 253 characters of lowercase letters, digits, '-'
 * and '.', a letter or digit at both ends. */
static bool dns_prefix_ok(const char *s, size_t len)
{
    if (len == 0 || len > 253) return false;
    for (size_t i = 0; i < len; i++) {
        bool alnum = ascii_lower(s[i]) || ascii_digit(s[i]);
        if (!alnum && ((i == 0 || i + 1 == len) || !strchr("-.", s[i]))) return false;
    }
    return true;
}

/* Two kinds of label: AI Platform's (key and value of lowercase letters,
 * digits, '-' and '_') and, when the key has a prefix ("app.kubernetes.io/
 * name", as Kubeflow files carry), Kubernetes' rule for the key and its value.
 * Either way the label is kept verbatim and filterable as labels.KEY. */
static void check_labels(vctx *v)
{
    const kiln_map *m = &v->job->labels;
    long long max = (long long)v->c->label_max_length;
    char f[320];
    if ((int64_t)m->n > v->c->max_labels)
        viol(v, "labels", "%zu labels; at most %lld are allowed", m->n,
             (long long)v->c->max_labels);
    for (size_t i = 0; i < m->n; i++) {
        const char *key = m->keys[i], *val = m->vals[i] ? m->vals[i] : "";
        const char *slash = strchr(key, '/');
        snprintf(f, sizeof f, "labels.%.300s", key);
        if (slash) {
            if (!dns_prefix_ok(key, (size_t)(slash - key)) || !k8s_name_ok(slash + 1, false))
                viol(v, f,
                     "label key '%.80s' is invalid: a Kubernetes key is PREFIX/NAME, PREFIX a "
                     "DNS subdomain (lowercase letters, digits, '-', '.'), NAME up to 63 "
                     "letters, digits, '-', '_' or '.', starting and ending with a letter or "
                     "digit",
                     key);
            if (!k8s_name_ok(val, true))
                viol(v, f,
                     "label value '%.80s' is invalid: up to 63 letters, digits, '-', '_' or "
                     "'.', starting and ending with a letter or digit",
                     val);
            continue;
        }
        if (!label_ok(key, true, max))
            viol(v, f,
                 "label key '%.80s' is invalid: up to %lld lowercase letters, digits, '-' "
                 "or '_', starting with a letter (or a Kubernetes key PREFIX/NAME)",
                 key, max);
        if (!label_ok(val, false, max))
            viol(v, f,
                 "label value '%.80s' is invalid: up to %lld lowercase letters, digits, "
                 "'-' or '_'",
                 val, max);
    }
}

/* ---------- scale tier, region, roles ---------- */

static void list_tiers(const kiln_catalog *c, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < c->n_tiers; i++)
        cat(buf, cap, "%s%s", i ? ", " : "", c->tiers[i].name);
}

static void check_tier_region(vctx *v)
{
    const kiln_training_input *ti = v->ti;
    const kiln_catalog *c = v->c;
    char list[MSG_MAX];
    const char *names[256];
    size_t n = 0;

    list_tiers(c, list, sizeof list);
    if (!set(ti->scale_tier))
        viol(v, "trainingInput.scaleTier", "required: one of %s", list);
    else if (!v->tier)
        viol(v, "trainingInput.scaleTier", "unknown scale tier '%.64s': one of %s", ti->scale_tier,
             list);
    if (!set(ti->region)) {
        viol(v, "trainingInput.region", "required, e.g. %s", c->default_region);
        return;
    }
    if (kiln_catalog_region(c, ti->region)) return;
    list[0] = '\0';
    for (size_t i = 0; i < c->n_regions; i++) {
        cat(list, sizeof list, "%s%s", i ? ", " : "", c->regions[i].name);
        if (n < 256) names[n++] = c->regions[i].name;
    }
    const char *hint = kiln__suggest(ti->region, names, n);
    viol(v, "trainingInput.region", "unknown region '%.64s'%s%s%s; known regions: %s", ti->region,
         hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "", list);
}

/* Every role's machine type and count: the job's own, or the tier's expansion. */
static void resolve_roles(vctx *v)
{
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        if (v->custom) {
            v->type[r] = kiln_job_role_type(v->job, (kiln_role)r);
            v->count[r] = kiln_job_role_count(v->job, (kiln_role)r);
        } else {
            v->type[r] = v->tier->roles[r].type;
            v->count[r] = v->type[r] ? v->tier->roles[r].count : 0;
        }
        if (!set(v->type[r])) v->type[r] = NULL;
        v->mt[r] = kiln_catalog_machine(v->c, v->type[r]);
    }
    v->tpu = v->mt[KILN_ROLE_WORKER] && v->mt[KILN_ROLE_WORKER]->is_tpu_worker;
}

/* Non-CUSTOM tiers fix the cluster: no types, counts or accelerators. */
static void check_preset_tier(vctx *v)
{
    const char *tier = v->tier->name;
    char f[160];
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        kiln_role role = (kiln_role)r;
        const kiln_replica_config *rc = kiln_job_role_config(v->job, role);
        const char *own = kiln_job_role_type(v->job, role);
        if (set(own))
            viol(v, fld(f, sizeof f, role, "Type"),
                 "'%.64s': machine types are only allowed with scaleTier CUSTOM (scaleTier %s "
                 "decides the machines)",
                 own, tier);
        if (r != KILN_ROLE_MASTER && kiln_job_role_count(v->job, role) != 0)
            viol(v, fld(f, sizeof f, role, "Count"),
                 "%lld: counts are only allowed with scaleTier CUSTOM (scaleTier %s decides them)",
                 (long long)kiln_job_role_count(v->job, role), tier);
        if (!rc) continue;
        if (r != KILN_ROLE_MASTER && !v->tier->roles[r].type)
            viol(v, fld(f, sizeof f, role, "Config"), "scaleTier %s has no %s replicas", tier,
                 kiln_role_name(role));
        else if (rc->has_accelerator_config)
            viol(v, fld(f, sizeof f, role, "Config.acceleratorConfig"),
                 "acceleratorConfig is only allowed with scaleTier CUSTOM (scaleTier %s decides "
                 "the accelerators)",
                 tier);
    }
}

static void check_unknown_type(vctx *v, kiln_role r)
{
    const char *names[512];
    size_t n = 0;
    char f[160];
    for (size_t i = 0; i < v->c->n_machines && n < 512; i++)
        names[n++] = v->c->machines[i].name;
    const char *hint = kiln__suggest(v->type[r], names, n);
    viol(v, fld(f, sizeof f, r, "Type"),
         "unknown machine type '%.64s'%s%s%s (`kiln catalog list machine-types` lists them)",
         v->type[r], hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
}

static const char *family_name(kiln_machine_family f)
{
    return f == KILN_FAMILY_LEGACY ? "legacy" : "Compute Engine";
}

/* CUSTOM: masterType required; counts non-negative and with a type; types
 * known, of the master's family, cloud_tpu only as the worker. */
static void check_custom_roles(vctx *v)
{
    const kiln_machine_type *master = v->mt[KILN_ROLE_MASTER];
    char f[160];
    if (v->tier && v->tier->custom && !v->type[KILN_ROLE_MASTER])
        viol(v, "trainingInput.masterType", "required with scaleTier CUSTOM, e.g. n1-standard-8");
    for (int i = 0; i < KILN_ROLE_COUNT; i++) {
        kiln_role r = (kiln_role)i;
        const kiln_machine_type *mt = v->mt[r];
        if (r != KILN_ROLE_MASTER && v->count[r] < 0)
            viol(v, fld(f, sizeof f, r, "Count"), "%lld: a count must not be negative",
                 (long long)v->count[r]);
        if (r != KILN_ROLE_MASTER && v->count[r] > 0 && !v->type[r])
            viol(v, fld(f, sizeof f, r, "Type"), "required when %sCount is %lld",
                 kiln_role_field(r), (long long)v->count[r]);
        if (!v->type[r]) continue;
        if (!mt) {
            check_unknown_type(v, r);
        } else if (mt->is_tpu_worker && r != KILN_ROLE_WORKER) {
            viol(v, fld(f, sizeof f, r, "Type"), "%s is a TPU worker: only workerType may be %s",
                 mt->name, mt->name);
        } else if (r != KILN_ROLE_MASTER && master && !mt->is_tpu_worker &&
                   !master->is_tpu_worker && mt->family != master->family) {
            viol(v, fld(f, sizeof f, r, "Type"),
                 "%s is a %s machine type but masterType %s is a %s type: worker, parameter "
                 "server and evaluator types must be of the master's family",
                 mt->name, family_name(mt->family), master->name, family_name(master->family));
        }
    }
}

/* ---------- accelerators ---------- */

/* What `machine` takes: "NVIDIA_TESLA_P4 (4), NVIDIA_TESLA_T4 (4), ...". */
static void machine_takes(const kiln_catalog *c, const char *machine, char *buf, size_t cap)
{
    char counts[256];
    buf[0] = '\0';
    for (size_t i = 0; i < c->n_cells; i++) {
        const kiln__count_cell *cell = &c->cells[i];
        if (cell->n == 0 || strcmp(cell->machine, machine) != 0) continue;
        join_counts(counts, sizeof counts, cell->counts, cell->n);
        cat(buf, cap, "%s%s (%s)", buf[0] ? ", " : "", cell->accel, counts);
    }
}

/* ceil() without libm, which the catalog library does not link. */
static int64_t ceil_i64(double x)
{
    int64_t i = (int64_t)x;
    return i + (x > (double)i);
}

/* Why `count` accelerators of type `a` do not suit machine `m`, from the
 * per-accelerator limits ("" when the limits do not explain it). */
static void explain_limits(const kiln_machine_type *m, const kiln_accelerator_type *a,
                           int64_t count, const int64_t *valid, size_t n_valid, char *buf,
                           size_t cap)
{
    int64_t need = 0;
    buf[0] = '\0';
    if ((a->max_vcpus && m->vcpus > a->max_vcpus) ||
        (a->max_memory_gb > 0 && m->memory_gb > a->max_memory_gb + 1e-9)) {
        snprintf(buf, cap,
                 "; %s GPUs serve at most %d vCPUs and %g GB of memory per machine however many "
                 "are attached, and %s has %d vCPUs and %g GB",
                 a->name, a->max_vcpus, a->max_memory_gb, m->name, m->vcpus, m->memory_gb);
        return;
    }
    if (a->max_vcpus_per_accelerator > 0)
        need = (m->vcpus + a->max_vcpus_per_accelerator - 1) / a->max_vcpus_per_accelerator;
    if (a->max_memory_gb_per_accelerator > 0) {
        int64_t by_mem = ceil_i64(m->memory_gb / a->max_memory_gb_per_accelerator - 1e-9);
        if (by_mem > need) need = by_mem;
    }
    if (need <= 0 || count >= need) return;
    for (size_t i = 0; i < n_valid; i++) {
        if (valid[i] >= need) {
            need = valid[i]; /* the smallest count that is both enough and valid */
            break;
        }
    }
    snprintf(buf, cap,
             "; %s (%d vCPUs, %g GB) needs at least %lld %s: each serves at most %d vCPUs and "
             "%g GB",
             m->name, m->vcpus, m->memory_gb, (long long)need, a->name,
             a->max_vcpus_per_accelerator, a->max_memory_gb_per_accelerator);
}

static void check_accel_on_machine(vctx *v, const char *base, const kiln_machine_type *m,
                                   const kiln_accelerator_type *a, int64_t count)
{
    int64_t valid[64];
    char f[200], why[512], list[MSG_MAX];
    size_t n = kiln_catalog_valid_counts(v->c, m->name, a->name, valid, 64);

    if (n > 64) n = 64;
    for (size_t i = 0; i < n; i++)
        if (valid[i] == count) return;
    explain_limits(m, a, count, valid, n, why, sizeof why);
    if (n == 0) {
        machine_takes(v->c, m->name, list, sizeof list);
        snprintf(f, sizeof f, "%s.type", base);
        if (a->is_tpu && !m->is_tpu_worker)
            viol(v, f, "%s is a TPU: it is attached to a cloud_tpu worker, not to %s", a->name,
                 m->name);
        else if (!list[0]) /* a CPU machine (e2, n2, c3, ...): its limits say nothing */
            viol(v, f, "%s cannot be attached to %s: %s takes no accelerators", a->name, m->name,
                 m->name);
        else
            viol(v, f, "%s cannot be attached to %s%s; %s takes %s", a->name, m->name, why, m->name,
                 list);
        return;
    }
    join_counts(list, sizeof list, valid, n);
    snprintf(f, sizeof f, "%s.count", base);
    viol(v, f, "%lld is not a valid count: valid counts for %s on %s: %s%s", (long long)count,
         a->name, m->name, list, why);
}

/* acceleratorConfig with a count and no type: the GPU type the machine
 * comes with (a3-highgpu-1g), else any GPU type whose cell on this machine
 * lists the count; the scheduler then picks the model. */
static void check_any_gpu(vctx *v, const char *base, const kiln_machine_type *m, int64_t count)
{
    char f[200], list[MSG_MAX], counts[256];
    const char *only = kiln__catalog_only_gpu(v->c, m->name);
    if (only) {
        check_accel_on_machine(v, base, m, kiln_catalog_accelerator(v->c, only), count);
        return;
    }
    list[0] = '\0';
    for (size_t i = 0; i < v->c->n_cells; i++) {
        const kiln__count_cell *cell = &v->c->cells[i];
        const kiln_accelerator_type *a = kiln_catalog_accelerator(v->c, cell->accel);
        if (cell->n == 0 || strcmp(cell->machine, m->name) != 0 || !a || a->is_tpu) continue;
        for (size_t k = 0; k < cell->n; k++)
            if (cell->counts[k] == count) return;
        join_counts(counts, sizeof counts, cell->counts, cell->n);
        cat(list, sizeof list, "%s%s (%s)", list[0] ? ", " : "", cell->accel, counts);
    }
    snprintf(f, sizeof f, "%s.count", base);
    if (!list[0])
        viol(v, f, "%lld GPUs of any type: %s takes no GPUs", (long long)count, m->name);
    else
        viol(v, f,
             "%lld GPUs of any type: no GPU type takes %lld on %s; it takes %s (give a type to "
             "choose one)",
             (long long)count, (long long)count, m->name, list);
}

/* A role without acceleratorConfig: fine unless its machine needs one. */
static void check_missing_accel(vctx *v, kiln_role r, const char *base)
{
    const kiln_machine_type *mt = v->mt[r];
    const kiln_machine_type *master = v->mt[KILN_ROLE_MASTER];
    char list[MSG_MAX];
    bool runs = r == KILN_ROLE_MASTER || v->count[r] > 0;
    if (!mt || !runs) return;
    if (mt->accelerator_required) {
        machine_takes(v->c, mt->name, list, sizeof list);
        viol(v, base, "required: %s comes with its accelerators; set acceleratorConfig to %s",
             mt->name, list);
    } else if (mt->is_tpu_worker && master && master->family == KILN_FAMILY_COMPUTE_ENGINE) {
        machine_takes(v->c, mt->name, list, sizeof list);
        viol(v, base, "required: with a Compute Engine master (%s) the %s worker names its TPU: %s",
             master->name, mt->name, list);
    }
}

static void check_accel(vctx *v, kiln_role r)
{
    const kiln_replica_config *rc = kiln_job_role_config(v->job, r);
    const kiln_machine_type *mt = v->mt[r], *master = v->mt[KILN_ROLE_MASTER];
    const kiln_accelerator_type *a = NULL;
    char base[160], f[200];

    fld(base, sizeof base, r, "Config.acceleratorConfig");
    if (!rc || !rc->has_accelerator_config) {
        check_missing_accel(v, r, base);
        return;
    }
    const kiln_accelerator_config *ac = &rc->accelerator_config;
    if (mt && mt->family == KILN_FAMILY_LEGACY && !mt->is_tpu_worker) {
        char builtin[128] = "";
        if (mt->builtin_accelerator)
            snprintf(builtin, sizeof builtin, " with %d %s built in", mt->builtin_accelerator_count,
                     mt->builtin_accelerator);
        viol(v, base,
             "acceleratorConfig is only allowed with Compute Engine machine types; %s is a "
             "legacy type%s",
             mt->name, builtin);
        return;
    }
    if (mt && mt->is_tpu_worker && master && master->family == KILN_FAMILY_LEGACY) {
        viol(v, base,
             "with a legacy master type (%s) %s is a %s of %lld cores and takes no "
             "acceleratorConfig; use a Compute Engine master to choose the TPU",
             master->name, mt->name, v->c->tpu_legacy_accel, (long long)v->c->tpu_legacy_count);
        return;
    }
    snprintf(f, sizeof f, "%s.type", base);
    if (!set(ac->type)) {
        /* GPUs by count alone (nvidia.com/gpu): the machine's own GPU type,
         * else any model the count is valid for on this machine */
        snprintf(f, sizeof f, "%s.count", base);
        if (ac->count <= 0)
            viol(v, f, "%lld: the count must be positive", (long long)ac->count);
        else if (mt)
            check_any_gpu(v, base, mt, ac->count);
        return;
    } else if (!(a = kiln_catalog_accelerator(v->c, ac->type))) {
        const char *names[256];
        size_t n = 0;
        for (size_t i = 0; i < v->c->n_accels && n < 256; i++)
            names[n++] = v->c->accels[i].name;
        const char *hint = kiln__suggest(ac->type, names, n);
        viol(v, f, "unknown accelerator type '%.64s'%s%s%s (`kiln catalog list accelerators`)",
             ac->type, hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
    }
    snprintf(f, sizeof f, "%s.count", base);
    if (ac->count <= 0) {
        viol(v, f, "%lld: the count must be positive", (long long)ac->count);
        return;
    }
    if (a && mt) check_accel_on_machine(v, base, mt, a, ac->count);
}

/* ---------- zones: all GPU types of a job in one zone ---------- */

static size_t job_gpus(vctx *v, const char **gpus, size_t cap)
{
    size_t n = 0;
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_machine_type *mt = v->mt[r];
        const kiln_replica_config *rc = kiln_job_role_config(v->job, (kiln_role)r);
        const char *g = NULL;
        if (!mt || (r != KILN_ROLE_MASTER && v->count[r] <= 0)) continue;
        if (v->custom && rc && rc->has_accelerator_config &&
            mt->family == KILN_FAMILY_COMPUTE_ENGINE) {
            const kiln_accelerator_type *a =
                kiln_catalog_accelerator(v->c, rc->accelerator_config.type);
            /* the site's own GPUs are wherever the site is: no zone to check */
            g = a && !a->is_tpu && !a->site ? a->name : NULL;
        } else if (mt->builtin_accelerator) {
            g = mt->builtin_accelerator;
        }
        bool dup = false;
        for (size_t i = 0; g && i < n; i++)
            dup = dup || strcmp(gpus[i], g) == 0;
        if (g && !dup && n < cap) gpus[n++] = g;
    }
    return n;
}

static bool zone_has_all(const kiln_zone *z, const char **gpus, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!kiln__zone_offers(z, gpus[i])) return false;
    return true;
}

static bool region_has_all(const kiln_region *r, const char **gpus, size_t n)
{
    for (size_t z = 0; z < r->n_zones; z++)
        if (zone_has_all(&r->zones[z], gpus, n)) return true;
    return false;
}

static void check_zones(vctx *v)
{
    const char *gpus[16];
    size_t n = job_gpus(v, gpus, 16);
    const kiln_region *reg = kiln_catalog_region(v->c, v->ti->region);
    char want[256] = "", zones[MSG_MAX] = "", others[MSG_MAX] = "";
    bool any = false;

    if (n == 0 || !reg || region_has_all(reg, gpus, n)) return;
    for (size_t i = 0; i < n; i++)
        cat(want, sizeof want, "%s%s", i ? ", " : "", gpus[i]);
    for (size_t z = 0; z < reg->n_zones; z++) {
        const kiln_zone *zn = &reg->zones[z];
        any = any || zn->n_accelerators > 0;
        cat(zones, sizeof zones, "%s%s offers ", z ? "; " : "", zn->name);
        for (size_t k = 0; k < zn->n_accelerators; k++)
            cat(zones, sizeof zones, "%s%s", k ? ", " : "", short_accel(zn->accelerators[k]));
        if (!zn->n_accelerators) cat(zones, sizeof zones, "no GPUs");
    }
    for (size_t i = 0; i < v->c->n_regions; i++)
        if (region_has_all(&v->c->regions[i], gpus, n))
            cat(others, sizeof others, "%s%s", others[0] ? ", " : "", v->c->regions[i].name);
    if (!any)
        viol(v, "trainingInput.region", "region %s offers no GPUs (the job uses %s); %s: %s",
             reg->name, want,
             n > 1 ? "regions with one zone offering them all" : "regions offering it",
             others[0] ? others : "none");
    else
        viol(v, "trainingInput.region",
             "no zone of %s offers %s%s (a job runs in one zone): %s; %s: %s", reg->name,
             n > 1 ? "all of " : "", want, zones,
             n > 1 ? "regions with one zone offering them all" : "regions offering it",
             others[0] ? others : "none");
}

/* ---------- TPU ---------- */

static void join_names(const kiln__names *l, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++)
        cat(buf, cap, "%s%s", i ? ", " : "", l->v[i]);
}

static const char *tpu_type(vctx *v)
{
    const kiln_machine_type *master = v->mt[KILN_ROLE_MASTER];
    const kiln_replica_config *rc = kiln_job_role_config(v->job, KILN_ROLE_WORKER);
    if (!master || master->family == KILN_FAMILY_LEGACY) return v->c->tpu_legacy_accel;
    if (!v->custom || !rc || !rc->has_accelerator_config) return NULL;
    const kiln_accelerator_type *a = kiln_catalog_accelerator(v->c, rc->accelerator_config.type);
    return a && a->is_tpu ? a->name : NULL;
}

static void check_tpu_region(vctx *v)
{
    const kiln_region *reg = kiln_catalog_region(v->c, v->ti->region);
    const char *type = tpu_type(v);
    char list[MSG_MAX] = "";
    if (!reg || (type ? kiln__region_offers_tpu(reg, type) : reg->n_tpu_types > 0)) return;
    for (size_t i = 0; i < v->c->n_regions; i++) {
        const kiln_region *r = &v->c->regions[i];
        if (type ? kiln__region_offers_tpu(r, type) : r->n_tpu_types > 0)
            cat(list, sizeof list, "%s%s", list[0] ? ", " : "", r->name);
    }
    viol(v, "trainingInput.region", "region %s offers no %s; TPU regions%s%s: %s", reg->name,
         type ? type : "TPUs", type ? " for " : "", type ? type : "", list[0] ? list : "none");
}

static void check_tpu_versions(vctx *v)
{
    const kiln_training_input *ti = v->ti;
    const kiln_replica_config *w = kiln_job_role_config(v->job, KILN_ROLE_WORKER);
    const char *image = w && set(w->image_uri) ? w->image_uri
                        : ti->has_master_config && set(ti->master_config.image_uri)
                            ? ti->master_config.image_uri
                            : NULL;
    const char *tf = w && set(w->tpu_tf_version) ? w->tpu_tf_version : NULL;
    const char *f = "trainingInput.workerConfig.tpuTfVersion";
    char list[MSG_MAX];

    if (set(ti->runtime_version) &&
        !kiln__names_has(&v->c->tpu_runtime_versions, ti->runtime_version)) {
        join_names(&v->c->tpu_runtime_versions, list, sizeof list);
        viol(v, "trainingInput.runtimeVersion", "'%.32s' is not a TPU runtime version: one of %s",
             ti->runtime_version, list);
    }
    join_names(&v->c->tpu_tf_versions, list, sizeof list);
    if (image && !tf)
        viol(v, f, "required when the TPU worker runs a custom image (%.128s): one of %s", image,
             list);
    else if (tf && !kiln__names_has(&v->c->tpu_tf_versions, tf))
        viol(v, f, "unknown TPU version '%.32s': one of %s", tf, list);
}

/* tpuTfVersion belongs to the cloud_tpu worker only. */
static void check_tf_version_roles(vctx *v)
{
    char f[160];
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(v->job, (kiln_role)r);
        if (!rc || !set(rc->tpu_tf_version) || (v->tpu && r == KILN_ROLE_WORKER)) continue;
        viol(v, fld(f, sizeof f, (kiln_role)r, "Config.tpuTfVersion"),
             "'%.32s': tpuTfVersion is only for a cloud_tpu worker", rc->tpu_tf_version);
    }
}

static void check_tpu(vctx *v)
{
    check_tf_version_roles(v);
    if (!v->tpu) return;
    if (v->custom && v->count[KILN_ROLE_WORKER] != v->c->tpu_worker_count)
        viol(v, "trainingInput.workerCount", "%lld: a TPU job has exactly %lld cloud_tpu worker%s",
             (long long)v->count[KILN_ROLE_WORKER], (long long)v->c->tpu_worker_count,
             v->c->tpu_worker_count == 1 ? "" : "s");
    if (v->count[KILN_ROLE_PARAMETER_SERVER] > 0)
        viol(v, "trainingInput.parameterServerCount",
             "%lld: a job with a TPU takes no parameter servers",
             (long long)v->count[KILN_ROLE_PARAMETER_SERVER]);
    check_tpu_region(v);
    check_tpu_versions(v);
}

/* ---------- images, commands, runtime ---------- */

/* The runtime versions the catalog maps ("1.15, 2.1, ..."), or the Python
 * versions it maps for `version`. */
static void join_runtimes(const kiln_catalog *c, const char *version, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < kiln_catalog_runtime_count(c); i++) {
        const kiln_runtime *r = kiln_catalog_runtime_at(c, i);
        if (version ? strcmp(r->version, version) != 0 : !r->python_default) continue;
        cat(buf, cap, "%s%s", buf[0] ? ", " : "", version ? r->python : r->version);
    }
    if (!buf[0]) cat(buf, cap, "none");
}

/* runtimeVersion and pythonVersion choose an image (runtimes.yaml): AI
 * Platform's rule is "either this field or masterConfig.imageUri", and the
 * version must be one this site maps. */
static void check_runtime(vctx *v)
{
    const kiln_training_input *ti = v->ti;
    const char *master_image = ti->has_master_config ? ti->master_config.image_uri : NULL;
    const char *rv = ti->runtime_version, *pv = ti->python_version;
    char f[160], list[MSG_MAX];

    if (set(master_image) && set(rv))
        viol(v, "trainingInput.runtimeVersion",
             "'%.32s': set at most one of masterConfig.imageUri (%.128s) and runtimeVersion: a "
             "custom image brings its own runtime",
             rv, master_image);
    if (set(master_image) && set(pv))
        viol(v, "trainingInput.pythonVersion",
             "'%.32s': set at most one of masterConfig.imageUri (%.128s) and pythonVersion: a "
             "custom image brings its own Python",
             pv, master_image);
    else if (set(pv) && !set(rv)) {
        join_runtimes(v->c, NULL, list, sizeof list);
        viol(v, "trainingInput.pythonVersion",
             "'%.32s' needs a runtimeVersion: a Python version is one of a runtime version's "
             "(runtime versions here: %s; see kiln catalog list runtime-versions)",
             pv, list);
    }
    if (!set(rv) || set(master_image)) return;
    for (int r = KILN_ROLE_WORKER; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(v->job, (kiln_role)r);
        if (rc && set(rc->image_uri))
            viol(v, fld(f, sizeof f, (kiln_role)r, "Config.imageUri"),
                 "'%.128s': set at most one of an imageUri and runtimeVersion (%.32s): the "
                 "runtime version's image runs every replica",
                 rc->image_uri, rv);
    }
    /* a TPU job's version outside the TPU list is reported by check_tpu */
    if (v->tpu && !kiln__names_has(&v->c->tpu_runtime_versions, rv)) return;
    if (!kiln_catalog_runtime(v->c, rv, NULL)) {
        join_runtimes(v->c, NULL, list, sizeof list);
        viol(v, "trainingInput.runtimeVersion",
             "unknown runtime version '%.32s': this site maps %s to images (kiln catalog list "
             "runtime-versions)",
             rv, list);
    } else if (set(pv) && !kiln_catalog_runtime(v->c, rv, pv)) {
        join_runtimes(v->c, rv, list, sizeof list);
        viol(v, "trainingInput.pythonVersion",
             "'%.32s' is not offered with runtimeVersion %.32s at this site: Python %s (kiln "
             "catalog list runtime-versions)",
             pv, rv, list);
    }
}

static void check_images(vctx *v)
{
    const kiln_training_input *ti = v->ti;
    const char *master_image = ti->has_master_config ? ti->master_config.image_uri : NULL;
    const char *cmd_field = NULL;
    char f[160];

    check_runtime(v);
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(v->job, (kiln_role)r);
        if (!rc) continue;
        bool cmd = rc->container_command.n > 0, args = rc->container_args.n > 0;
        bool image = set(rc->image_uri) || set(master_image) || set(ti->runtime_version);
        /* kiln extension: with no image, containerCommand runs as a plain
         * process on the node; bare containerArgs would have nothing to run. */
        if (args && !cmd && !image)
            viol(v, fld(f, sizeof f, (kiln_role)r, "Config.containerArgs"),
                 "containerArgs need an image (imageUri) or a containerCommand to pass them to");
        if ((cmd || args) && !cmd_field) cmd_field = kiln_role_field((kiln_role)r);
    }
    if (cmd_field && ti->args.n > 0)
        viol(v, "trainingInput.args",
             "trainingInput.args do not mix with containerCommand/containerArgs (set in "
             "%sConfig): put the program's arguments in containerArgs",
             cmd_field);
}

/* ---------- scheduling, jobDir, policies ---------- */

static void check_scheduling(vctx *v)
{
    const kiln_scheduling *s = &v->ti->scheduling;
    if (!v->ti->has_scheduling) return;
    if (s->has_max_wait_time && s->max_wait_time.seconds < v->c->min_max_wait_time_s)
        viol(v, "trainingInput.scheduling.maxWaitTime", "%llds is too short: at least %llds",
             (long long)s->max_wait_time.seconds, (long long)v->c->min_max_wait_time_s);
    if (s->has_max_running_time &&
        (s->max_running_time.seconds < 0 ||
         (s->max_running_time.seconds == 0 && s->max_running_time.nanos <= 0)))
        viol(v, "trainingInput.scheduling.maxRunningTime", "%llds: must be positive",
             (long long)s->max_running_time.seconds);
    if (s->priority < 0 || s->priority > v->c->max_priority)
        viol(v, "trainingInput.scheduling.priority", "%lld is outside 0..%lld",
             (long long)s->priority, (long long)v->c->max_priority);
}

/* An absolute path or a URI (scheme://rest), with no ".." segment: the job
 * dir is shared by every replica and must not climb out of where it points. */
static void check_job_dir(vctx *v)
{
    const char *dir = v->ti->job_dir, *p;
    const char *f = "trainingInput.jobDir";
    size_t i = 0;
    if (!set(dir)) return;
    for (p = dir; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            viol(v, f, "the job dir contains control characters");
            return;
        }
    }
    if (ascii_alpha(dir[0])) /* a URI scheme: letter *( letter / digit / "+" / "-" / "." ) */
        for (i = 1;
             dir[i] && (ascii_alpha(dir[i]) || ascii_digit(dir[i]) || strchr("+.-", dir[i]));)
            i++;
    bool uri = i > 0 && strncmp(dir + i, "://", 3) == 0 && dir[i + 3];
    if (dir[0] != '/' && !uri) {
        viol(v, f, "'%.128s' is neither an absolute path nor a URI (gs://bucket/dir, /data/jobs)",
             dir);
        return;
    }
    for (p = dir; p; p = strchr(p, '/')) {
        p += *p == '/';
        if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0')) {
            viol(v, f, "'%.128s' has a '..' segment: give the directory itself", dir);
            return;
        }
    }
}

static bool one_of(const char *s, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(s, *allowed) == 0) return true;
    return false;
}

static void check_policies(vctx *v)
{
    static const char *const restart[] = {"Always", "OnFailure", "Never", "ExitCode", NULL};
    static const char *const clean[] = {"All", "Running", "None", NULL};
    const kiln_run_policy *rp = &v->ti->run_policy;
    char f[160];
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(v->job, (kiln_role)r);
        if (rc && set(rc->restart_policy) && !one_of(rc->restart_policy, restart))
            viol(v, fld(f, sizeof f, (kiln_role)r, "Config.restartPolicy"),
                 "'%.32s': one of Always, OnFailure, Never, ExitCode", rc->restart_policy);
    }
    if (!v->ti->has_run_policy) return;
    if (rp->has_backoff_limit && rp->backoff_limit < 0)
        viol(v, "trainingInput.runPolicy.backoffLimit", "%lld: must not be negative",
             (long long)rp->backoff_limit);
    if (rp->has_active_deadline_seconds && rp->active_deadline_seconds <= 0)
        viol(v, "trainingInput.runPolicy.activeDeadlineSeconds", "%lld: must be positive",
             (long long)rp->active_deadline_seconds);
    if (rp->has_ttl_seconds_after_finished && rp->ttl_seconds_after_finished < 0)
        viol(v, "trainingInput.runPolicy.ttlSecondsAfterFinished", "%lld: must not be negative",
             (long long)rp->ttl_seconds_after_finished);
    if (set(rp->clean_pod_policy) && !one_of(rp->clean_pod_policy, clean))
        viol(v, "trainingInput.runPolicy.cleanPodPolicy", "'%.32s': one of All, Running, None",
             rp->clean_pod_policy);
}

/* ---------- entry point ---------- */

kiln_err kiln_catalog_validate(const kiln_catalog *c, const kiln_job *job, kiln_diag *d)
{
    vctx v = {.c = c, .job = job, .ti = &job->training_input, .d = d};

    check_job_id(&v);
    check_labels(&v);
    if (!job->has_training_input) {
        viol(&v, "trainingInput", "required: scaleTier, region and the program to run");
        return KILN_EINVAL;
    }
    v.tier = kiln__catalog_tier(c, v.ti->scale_tier);
    v.custom = !v.tier || v.tier->custom;
    check_tier_region(&v);
    resolve_roles(&v);
    if (v.custom) {
        check_custom_roles(&v);
        for (int r = 0; r < KILN_ROLE_COUNT; r++)
            check_accel(&v, (kiln_role)r);
    } else {
        check_preset_tier(&v);
    }
    check_zones(&v);
    check_tpu(&v);
    check_images(&v);
    check_scheduling(&v);
    check_job_dir(&v);
    check_policies(&v);
    if (v.ti->has_hyperparameters) v.n += kiln_tune_check(&v.ti->hyperparameters, d);
    return v.n ? KILN_EINVAL : KILN_OK;
}
