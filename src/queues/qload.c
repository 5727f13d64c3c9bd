/* src/queues/qload.c - Kueue's YAML (kueue.x-k8s.io/v1beta2 and v1beta1) -> kiln_queues.
 *
 * Both versions are read into one model the way Kueue's own conversion
 * (the conversion files of apis/kueue/v1beta1, hub v1beta2) maps them: v1beta1's
 * spec.cohort is v1beta2's spec.cohortName, flavorFungibility's Borrow and
 * Preempt are MayStopSearch. A field of the other version is refused with
 * the name it has in this document's version.
 *
 * Read with the spec module's YAML loader (src/spec/tree.h: scalars arrive
 * as strings, aliases and oversize input refused). Each object's keys are
 * checked against the ones kiln acts on; any other key is refused at its
 * path, so that a field a platform team relies on is never silently
 * dropped. Cross-object rules (a ClusterQueue's flavors exist, a
 * LocalQueue's ClusterQueue exists) are checked once every document is
 * read. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/queues.h"
#include "spec/tree.h"

#define API_V1BETA1 "kueue.x-k8s.io/v1beta1"
#define API_V1BETA2 "kueue.x-k8s.io/v1beta2"
/* Topology and Cohort were v1alpha1 before v0.13/v0.14 (docs/queues.md) */
#define API_V1ALPHA1 "kueue.x-k8s.io/v1alpha1"

typedef struct ld {
    kiln_queues *q;
    kiln_diag *d;
    kiln_err err; /* ENOMEM; EINVAL is counted by bad */
    size_t bad;
    char where[512];          /* "ClusterQueue team-a", after "FILE: " when the source is named */
    const char *file;         /* the source being read (kiln_queues_src.name), or NULL */
    bool v1beta1;             /* the document being read is v1beta1 */
    const char *cohort_field; /* "spec.cohort" (v1beta1) or "spec.cohortName" (v1beta2) */
} ld;

static void bad(ld *l, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bad(ld *l, const char *field, const char *fmt, ...)
{
    char path[800];
    snprintf(path, sizeof path, "%s: %s", l->where, field);
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(l->d, path, fmt, ap);
    va_end(ap);
    l->bad++;
}

static void nomem(ld *l, kiln_err e)
{
    if (e != KILN_OK && l->err == KILN_OK) l->err = e;
}

static char *dup(ld *l, const char *s)
{
    char *c = strdup(s ? s : "");
    if (!c) nomem(l, KILN_ENOMEM);
    return c;
}

static const char *scalar(const json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Refuses every key of `obj` not in `keys` (NULL-terminated), at prefix.key. */
static void only_keys(ld *l, const json_t *obj, const char *prefix, const char *const *keys,
                      const char *kind_note)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        bool ok = false;
        for (size_t i = 0; keys[i] && !ok; i++)
            ok = strcmp(keys[i], k) == 0;
        if (ok) continue;
        char f[256];
        snprintf(f, sizeof f, "%s%s%s", prefix, *prefix ? "." : "", k);
        bad(l, f,
            "kiln does not act on this field%s; remove it (docs/queues.md lists what kiln reads)",
            kind_note ? kind_note : "");
    }
}

/* A Kubernetes object name: lower-case alphanumerics, '-' and '.', at most
 * 253 characters, alphanumeric at both ends. */
static bool valid_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 253) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(islower(c) || isdigit(c) || c == '-' || c == '.')) return false;
    }
    return isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]);
}

/* ---------- quantities ---------- */

/* A Kubernetes quantity ("2", "1.5", "500m", "16Gi", "100M") as a
 * thousandth of its unit; false when it is not one, negative, or too big. */
static bool quantity_milli(const char *s, int64_t *out)
{
    if (!s || !*s) return false;
    const char *p = s;
    if (*p == '+') p++;
    __int128 ip = 0, fp = 0, fscale = 1;
    bool digits = false;
    while (isdigit((unsigned char)*p)) {
        ip = ip * 10 + (*p++ - '0');
        digits = true;
        if (ip > (__int128)1 << 80) return false;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            if (fscale < 1000000000) {
                fp = fp * 10 + (*p - '0');
                fscale *= 10;
            }
            p++;
            digits = true;
        }
    }
    if (!digits) return false;
    static const struct {
        const char *suf;
        __int128 num, den; /* multiplier of the unit */
    } sufs[] = {{"", 1, 1},
                {"m", 1, 1000},
                {"k", 1000, 1},
                {"M", 1000000, 1},
                {"G", 1000000000, 1},
                {"T", 1000000000000, 1},
                {"P", 1000000000000000, 1},
                {"Ki", 1024, 1},
                {"Mi", 1048576, 1},
                {"Gi", 1073741824, 1},
                {"Ti", 1099511627776, 1},
                {"Pi", 1125899906842624, 1}};
    for (size_t i = 0; i < sizeof sufs / sizeof *sufs; i++) {
        if (strcmp(p, sufs[i].suf) != 0) continue;
        /* milli = (ip + fp / fscale) * num / den * 1000, rounded up (as Kubernetes) */
        __int128 numer = (ip * fscale + fp) * sufs[i].num * 1000;
        __int128 denom = fscale * sufs[i].den;
        __int128 v = (numer + denom - 1) / denom;
        if (v > INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    return false;
}

/* A quantity of resource r in the module's units (see kiln/queues.h). */
static bool read_amount(ld *l, const json_t *v, const char *field, kiln_qres r, int64_t *out)
{
    const char *s = scalar(v);
    int64_t m = 0;
    if (!quantity_milli(s, &m)) {
        bad(l, field, "'%s' is not a Kubernetes quantity (like 4, 500m, 16Gi)",
            s ? s : "(not a scalar)");
        return false;
    }
    if (r == KILN_QRES_CPU) {
        *out = m;
        return true;
    }
    if (m % 1000) {
        bad(l, field, "'%s': %s comes in whole %s", s, kiln_queues_res_name(r),
            r == KILN_QRES_GPU    ? "devices"
            : r == KILN_QRES_PODS ? "pods (replicas)"
                                  : "bytes");
        return false;
    }
    *out = m / 1000;
    return true;
}

static bool read_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s) return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int res_of(const char *name)
{
    if (!name) return -1;
    if (strcmp(name, "nvidia.com/gpu") == 0) return KILN_QRES_GPU;
    if (strcmp(name, "cpu") == 0) return KILN_QRES_CPU;
    if (strcmp(name, "memory") == 0) return KILN_QRES_MEMORY;
    if (strcmp(name, "pods") == 0) return KILN_QRES_PODS;
    return -1;
}

/* ---------- the objects ---------- */

static void *grow(ld *l, void *v, size_t n, size_t size)
{
    void *nv = realloc(v, (n + 1) * size);
    if (!nv) {
        nomem(l, KILN_ENOMEM);
        return NULL;
    }
    memset((char *)nv + n * size, 0, size);
    return nv;
}

#define FLAVOR_TAINTS_MAX 8 /* Kueue's MaxItems for nodeTaints and tolerations */

/* spec.nodeTaints: [{key, value, effect, timeAdded}], as a node's taints. */
static void read_taints(ld *l, kiln_qflavor *f, const json_t *v)
{
    char p[256];
    if (!v || json_is_null(v)) return;
    if (!json_is_array(v) || json_array_size(v) > FLAVOR_TAINTS_MAX) {
        bad(l, "spec.nodeTaints", "must be a list of at most %d taints {key, value, effect}",
            FLAVOR_TAINTS_MAX);
        return;
    }
    if (!json_array_size(v)) return;
    f->node_taints = calloc(json_array_size(v), sizeof *f->node_taints);
    if (!f->node_taints) {
        nomem(l, KILN_ENOMEM);
        return;
    }
    static const char *const keys[] = {"key", "value", "effect", "timeAdded", NULL};
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)v, i, e)
    {
        snprintf(p, sizeof p, "spec.nodeTaints[%zu]", i);
        if (!json_is_object(e)) {
            bad(l, p, "must be a taint {key, value, effect}");
            continue;
        }
        only_keys(l, e, p, keys, NULL);
        const char *key = scalar(json_object_get(e, "key"));
        const char *val = scalar(json_object_get(e, "value"));
        const char *eff = scalar(json_object_get(e, "effect"));
        if (!key || !*key) {
            snprintf(p, sizeof p, "spec.nodeTaints[%zu].key", i);
            bad(l, p, "required: the taint's key");
            continue;
        }
        if (!kiln_taint_effect_valid(eff)) {
            snprintf(p, sizeof p, "spec.nodeTaints[%zu].effect", i);
            bad(l, p, "'%s' is not NoSchedule, PreferNoSchedule or NoExecute", eff ? eff : "");
            continue;
        }
        kiln_taint *t = &f->node_taints[f->n_node_taints++];
        t->key = dup(l, key);
        t->value = val && *val ? dup(l, val) : NULL;
        t->effect = dup(l, eff);
    }
}

/* spec.tolerations: [{key, operator, value, effect, tolerationSeconds}],
 * checked as Kubernetes checks a pod's. */
static void read_tolerations(ld *l, kiln_qflavor *f, const json_t *v)
{
    char p[256], why[256];
    if (!v || json_is_null(v)) return;
    if (!json_is_array(v) || json_array_size(v) > FLAVOR_TAINTS_MAX) {
        bad(l, "spec.tolerations", "must be a list of at most %d tolerations", FLAVOR_TAINTS_MAX);
        return;
    }
    if (!json_array_size(v)) return;
    f->tolerations = calloc(json_array_size(v), sizeof *f->tolerations);
    if (!f->tolerations) {
        nomem(l, KILN_ENOMEM);
        return;
    }
    static const char *const keys[] = {"key",    "operator",          "value",
                                       "effect", "tolerationSeconds", NULL};
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)v, i, e)
    {
        snprintf(p, sizeof p, "spec.tolerations[%zu]", i);
        if (!json_is_object(e)) {
            bad(l, p, "must be a toleration {key, operator, value, effect}");
            continue;
        }
        only_keys(l, e, p, keys, NULL);
        kiln_toleration t = {0};
        const char *secs = scalar(json_object_get(e, "tolerationSeconds"));
        if (json_object_get(e, "tolerationSeconds") &&
            !read_int(secs, INT64_MIN, INT64_MAX, &t.toleration_seconds)) {
            snprintf(p, sizeof p, "spec.tolerations[%zu].tolerationSeconds", i);
            bad(l, p, "must be a whole number of seconds");
            continue;
        }
        t.has_toleration_seconds = json_object_get(e, "tolerationSeconds") != NULL;
        t.key = (char *)scalar(json_object_get(e, "key"));
        t.op = (char *)scalar(json_object_get(e, "operator"));
        t.value = (char *)scalar(json_object_get(e, "value"));
        t.effect = (char *)scalar(json_object_get(e, "effect"));
        if (!kiln_toleration_check(&t, why, sizeof why)) {
            size_t n = strcspn(why, ":");
            snprintf(p, sizeof p, "spec.tolerations[%zu].%.*s", i, (int)n, why);
            bad(l, p, "%s", why[n] ? why + n + 2 : why);
            continue;
        }
        kiln_toleration *o = &f->tolerations[f->n_tolerations++];
        o->key = t.key && *t.key ? dup(l, t.key) : NULL;
        o->op = t.op && *t.op ? dup(l, t.op) : NULL;
        o->value = t.value && *t.value ? dup(l, t.value) : NULL;
        o->effect = t.effect && *t.effect ? dup(l, t.effect) : NULL;
        o->has_toleration_seconds = t.has_toleration_seconds;
        o->toleration_seconds = t.toleration_seconds;
    }
}

/* A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a
 * name of at most 63 alphanumerics, '-', '_' and '.', alphanumeric at both
 * ends (Kueue caps a level's nodeLabel at 316 characters in all). */
static bool valid_label_key(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 316) return false;
    const char *slash = strrchr(s, '/');
    const char *name = slash ? slash + 1 : s;
    if (slash) {
        size_t pl = (size_t)(slash - s);
        if (pl == 0 || pl > 253) return false;
        for (size_t i = 0; i < pl; i++) {
            unsigned char c = (unsigned char)s[i];
            if (!(islower(c) || isdigit(c) || c == '-' || c == '.')) return false;
        }
    }
    size_t nl = strlen(name);
    if (nl == 0 || nl > 63) return false;
    for (size_t i = 0; i < nl; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
    }
    return isalnum((unsigned char)name[0]) && isalnum((unsigned char)name[nl - 1]);
}

/* A Topology: spec.levels[].nodeLabel, with Kueue's rules (1 to 16 levels,
 * each a label key, none twice, kubernetes.io/hostname only the last). */
static void read_topology(ld *l, const char *name, const json_t *spec)
{
    kiln_queues *q = l->q;
    kiln_qtopology *nv = grow(l, q->topologies, q->ntopologies, sizeof *nv);
    if (!nv) return;
    q->topologies = nv;
    kiln_qtopology *t = &q->topologies[q->ntopologies++];
    t->name = dup(l, name);
    static const char *const keys[] = {"levels", NULL};
    if (spec) only_keys(l, spec, "spec", keys, NULL);
    const json_t *lv = spec ? json_object_get(spec, "levels") : NULL;
    size_t n = json_array_size(lv);
    if (!json_is_array(lv) || n == 0 || n > KILN_TOPOLOGY_MAX_LEVELS) {
        bad(l, "spec.levels", "required: 1 to %d levels, each {nodeLabel: KEY}, coarse to fine",
            KILN_TOPOLOGY_MAX_LEVELS);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(lv, i);
        char p[64];
        snprintf(p, sizeof p, "spec.levels[%zu]", i);
        static const char *const lkeys[] = {"nodeLabel", NULL};
        if (!json_is_object(e)) {
            bad(l, p, "must be {nodeLabel: KEY}");
            continue;
        }
        only_keys(l, e, p, lkeys, NULL);
        const char *k = scalar(json_object_get(e, "nodeLabel"));
        snprintf(p, sizeof p, "spec.levels[%zu].nodeLabel", i);
        if (!valid_label_key(k)) {
            bad(l, p, "required: a node label key (e.g. cloud.provider.com/topology-rack)");
            continue;
        }
        for (size_t j = 0; j < t->levels.n; j++)
            if (strcmp(t->levels.v[j], k) == 0) bad(l, p, "'%s' is a level twice", k);
        if (strcmp(k, "kubernetes.io/hostname") == 0 && i + 1 != n)
            bad(l, p, "kubernetes.io/hostname may only be the last (finest) level");
        nomem(l, kiln_strv_push(&t->levels, k));
    }
}

static void read_flavor(ld *l, const char *name, const json_t *spec, kiln_strv *topo_names)
{
    kiln_queues *q = l->q;
    kiln_qflavor *nv = grow(l, q->flavors, q->nflavors, sizeof *nv);
    if (!nv) return;
    q->flavors = nv;
    kiln_qflavor *f = &q->flavors[q->nflavors++];
    f->name = dup(l, name);
    f->topology = -1;
    if (!spec) return;
    static const char *const keys[] = {"nodeLabels", "nodeTaints", "tolerations", "topologyName",
                                       NULL};
    only_keys(l, spec, "spec", keys, NULL);
    read_taints(l, f, json_object_get(spec, "nodeTaints"));
    read_tolerations(l, f, json_object_get(spec, "tolerations"));
    const json_t *tn = json_object_get(spec, "topologyName");
    if (tn && !json_is_null(tn)) {
        if (!valid_name(scalar(tn)))
            bad(l, "spec.topologyName", "must name a Topology (a lower-case name)");
        else
            nomem(l, kiln_strv_push(topo_names, scalar(tn)));
        f->topology = (long)topo_names->n - 1; /* resolved to an index by resolve() */
    }
    const json_t *nl = json_object_get(spec, "nodeLabels");
    /* Kueue's CEL rule: a topology's flavor says which nodes are its own */
    if (f->topology >= 0 && (!json_is_object(nl) || json_object_size(nl) == 0))
        bad(l, "spec.topologyName",
            "needs spec.nodeLabels: a flavor with a topology names its nodes by at least one "
            "label (Kueue refuses it without)");
    if (!nl || json_is_null(nl)) return;
    if (!json_is_object(nl)) {
        bad(l, "spec.nodeLabels", "must be a map of label to value");
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)nl, k, v)
    {
        if (!scalar(v)) {
            char f2[256];
            snprintf(f2, sizeof f2, "spec.nodeLabels.%s", k);
            bad(l, f2, "must be a string");
            continue;
        }
        nomem(l, kiln_map_set(&f->node_labels, k, scalar(v)));
    }
}

static kiln_qpolicy read_policy(ld *l, const json_t *obj, const char *key, const char *field,
                                const char *const *allowed, const kiln_qpolicy *vals, size_t n)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return KILN_QP_NEVER;
    const char *s = scalar(v);
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, allowed[i]) == 0) return vals[i];
    char list[128] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 allowed[i]);
    bad(l, field, "'%s' is not one of %s", s ? s : "(not a scalar)", list);
    return KILN_QP_NEVER;
}

static void read_preemption(ld *l, kiln_qcq *cq, const json_t *p)
{
    if (!json_is_object(p)) {
        bad(l, "spec.preemption", "must be a map");
        return;
    }
    static const char *const keys[] = {"withinClusterQueue", "reclaimWithinCohort",
                                       "borrowWithinCohort", NULL};
    only_keys(l, p, "spec.preemption", keys, NULL);
    static const char *const wn[] = {"Never", "LowerPriority", "LowerOrNewerEqualPriority"};
    static const kiln_qpolicy wv[] = {KILN_QP_NEVER, KILN_QP_LOWER_PRIORITY,
                                      KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY};
    cq->within_cq =
        read_policy(l, p, "withinClusterQueue", "spec.preemption.withinClusterQueue", wn, wv, 3);
    static const char *const rn[] = {"Never", "LowerPriority", "Any"};
    static const kiln_qpolicy rv[] = {KILN_QP_NEVER, KILN_QP_LOWER_PRIORITY, KILN_QP_ANY};
    cq->reclaim =
        read_policy(l, p, "reclaimWithinCohort", "spec.preemption.reclaimWithinCohort", rn, rv, 3);
    const json_t *b = json_object_get(p, "borrowWithinCohort");
    if (b && !json_is_null(b)) {
        if (!json_is_object(b)) {
            bad(l, "spec.preemption.borrowWithinCohort", "must be a map");
        } else {
            static const char *const bk[] = {"policy", "maxPriorityThreshold", NULL};
            only_keys(l, b, "spec.preemption.borrowWithinCohort", bk, NULL);
            cq->borrow_within =
                read_policy(l, b, "policy", "spec.preemption.borrowWithinCohort.policy", rn, rv, 2);
            const json_t *t = json_object_get(b, "maxPriorityThreshold");
            if (t && !json_is_null(t)) {
                cq->has_max_priority_threshold = true;
                if (!read_int(scalar(t), INT32_MIN, INT32_MAX, &cq->max_priority_threshold))
                    bad(l, "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
                        "must be a whole number (int32)");
            }
        }
    }
    /* Kueue's own validation: preempting while borrowing takes victims
     * only from the cohort's borrowing ClusterQueues, which reclaimWithinCohort
     * opens */
    /* without a cohort (Kueue accepts it) the policy never comes into play:
     * such a queue never borrows */
    if (cq->borrow_within != KILN_QP_NEVER && cq->reclaim == KILN_QP_NEVER)
        bad(l, "spec.preemption.borrowWithinCohort.policy",
            "LowerPriority needs reclaimWithinCohort LowerPriority or Any (Kueue's rule: "
            "reclaimWithinCohort=Never and borrowWithinCohort.policy!=Never)");
    if (cq->has_max_priority_threshold && cq->borrow_within == KILN_QP_NEVER)
        bad(l, "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
            "has no meaning with policy Never");
}

const char *kiln_queues_stop_name(kiln_qstop s)
{
    return s == KILN_QSTOP_HOLD_AND_DRAIN ? "HoldAndDrain" : s == KILN_QSTOP_HOLD ? "Hold" : "None";
}

static kiln_qstop read_stop(ld *l, const json_t *spec)
{
    const json_t *v = json_object_get(spec, "stopPolicy");
    if (!v || json_is_null(v)) return KILN_QSTOP_NONE;
    const char *s = scalar(v);
    if (s && strcmp(s, "None") == 0) return KILN_QSTOP_NONE;
    if (s && strcmp(s, "Hold") == 0) return KILN_QSTOP_HOLD;
    if (s && strcmp(s, "HoldAndDrain") == 0) return KILN_QSTOP_HOLD_AND_DRAIN;
    bad(l, "spec.stopPolicy", "'%s' is not one of None, Hold, HoldAndDrain",
        s ? s : "(not a scalar)");
    return KILN_QSTOP_NONE;
}

/* spec.resourceGroups[g]: flavors are named here and resolved later (the
 * ResourceFlavor may come after the ClusterQueue in the file): until then
 * `flavor` holds an index into `names`. */
/* spec.resourceGroups[gi] of a ClusterQueue or a Cohort: `groups` is the
 * object's array (groups before gi already read); `parent` its cohort (a
 * ClusterQueue's) or parent (a Cohort's), NULL for none: limits need one. */
static void read_group(ld *l, kiln_qgroup *groups, const char *parent, const json_t *g, size_t gi,
                       kiln_strv *names)
{
    char f[256];
    snprintf(f, sizeof f, "spec.resourceGroups[%zu]", gi);
    if (!json_is_object(g)) {
        bad(l, f, "must be a map with coveredResources and flavors");
        return;
    }
    static const char *const keys[] = {"coveredResources", "flavors", NULL};
    only_keys(l, g, f, keys, NULL);
    kiln_qgroup *grp = &groups[gi];
    const json_t *cr = json_object_get(g, "coveredResources");
    int order[KILN_QRES_COUNT];
    size_t ncr = 0;
    char fc[300];
    snprintf(fc, sizeof fc, "%s.coveredResources", f);
    if (!json_is_array(cr) || json_array_size(cr) == 0) {
        bad(l, fc, "required: a list of nvidia.com/gpu, cpu, memory, pods");
        return;
    }
    for (size_t i = 0; i < json_array_size(cr); i++) {
        int r = res_of(scalar(json_array_get(cr, i)));
        snprintf(fc, sizeof fc, "%s.coveredResources[%zu]", f, i);
        if (r < 0) {
            bad(l, fc, "'%s': kiln's jobs ask for nvidia.com/gpu, cpu, memory and pods only",
                scalar(json_array_get(cr, i)) ? scalar(json_array_get(cr, i)) : "(not a scalar)");
            continue;
        }
        bool seen = false;
        for (size_t g2 = 0; g2 <= gi; g2++)
            seen |= groups[g2].covers[r];
        if (seen) {
            bad(l, fc, "%s is covered twice (a resource belongs to one resource group)",
                kiln_queues_res_name((kiln_qres)r));
            continue;
        }
        grp->covers[r] = true;
        order[ncr++] = r;
    }
    const json_t *fl = json_object_get(g, "flavors");
    snprintf(fc, sizeof fc, "%s.flavors", f);
    if (!json_is_array(fl) || json_array_size(fl) == 0) {
        bad(l, fc, "required: at least one flavor with its quotas");
        return;
    }
    if (json_array_size(fl) > 16) {
        bad(l, fc, "at most 16 flavors per resource group (Kueue's limit)");
        return;
    }
    grp->flavors = calloc(json_array_size(fl), sizeof *grp->flavors);
    if (!grp->flavors) {
        nomem(l, KILN_ENOMEM);
        return;
    }
    for (size_t i = 0; i < json_array_size(fl); i++) {
        const json_t *fv = json_array_get(fl, i);
        char ff[320];
        snprintf(ff, sizeof ff, "%s.flavors[%zu]", f, i);
        if (!json_is_object(fv)) {
            bad(l, ff, "must be a map with name and resources");
            continue;
        }
        static const char *const fk[] = {"name", "resources", NULL};
        only_keys(l, fv, ff, fk, NULL);
        kiln_qgflavor *gf = &grp->flavors[grp->n++];
        const char *fname = scalar(json_object_get(fv, "name"));
        char fn[360];
        snprintf(fn, sizeof fn, "%s.name", ff);
        if (!valid_name(fname)) bad(l, fn, "required: the name of a ResourceFlavor");
        /* the flavor's name, resolved in resolve() */
        gf->flavor = names->n;
        nomem(l, kiln_strv_push(names, fname ? fname : ""));
        const json_t *rs = json_object_get(fv, "resources");
        snprintf(fn, sizeof fn, "%s.resources", ff);
        if (!json_is_array(rs) || json_array_size(rs) != ncr) {
            bad(l, fn,
                "must list the coveredResources, in their order, each with its nominalQuota");
            continue;
        }
        for (size_t k = 0; k < ncr; k++) {
            const json_t *rv = json_array_get(rs, k);
            char fr[400];
            snprintf(fr, sizeof fr, "%s.resources[%zu]", ff, k);
            if (!json_is_object(rv)) {
                bad(l, fr, "must be a map with name and nominalQuota");
                continue;
            }
            static const char *const rk[] = {"name", "nominalQuota", "borrowingLimit",
                                             "lendingLimit", NULL};
            only_keys(l, rv, fr, rk, NULL);
            int r = res_of(scalar(json_object_get(rv, "name")));
            char fx[440];
            snprintf(fx, sizeof fx, "%s.name", fr);
            if (r != order[k]) {
                bad(l, fx, "must be %s (the coveredResources' order)",
                    kiln_queues_res_name((kiln_qres)order[k]));
                continue;
            }
            kiln_qquota *qq = &gf->q[r];
            snprintf(fx, sizeof fx, "%s.nominalQuota", fr);
            const json_t *nq = json_object_get(rv, "nominalQuota");
            if (!nq)
                bad(l, fx, "required");
            else
                read_amount(l, nq, fx, (kiln_qres)r, &qq->nominal);
            const json_t *bl = json_object_get(rv, "borrowingLimit");
            if (bl && !json_is_null(bl)) {
                snprintf(fx, sizeof fx, "%s.borrowingLimit", fr);
                qq->has_borrowing_limit =
                    read_amount(l, bl, fx, (kiln_qres)r, &qq->borrowing_limit);
                if (!parent)
                    bad(l, fx, "needs %s: without a %s there is nothing to borrow", l->cohort_field,
                        l->cohort_field[5] == 'p' ? "parent" : "cohort");
            }
            const json_t *ll = json_object_get(rv, "lendingLimit");
            if (ll && !json_is_null(ll)) {
                snprintf(fx, sizeof fx, "%s.lendingLimit", fr);
                qq->has_lending_limit = read_amount(l, ll, fx, (kiln_qres)r, &qq->lending_limit);
                if (!parent)
                    bad(l, fx, "needs %s: without a %s nobody borrows", l->cohort_field,
                        l->cohort_field[5] == 'p' ? "parent" : "cohort");
                if (qq->has_lending_limit && qq->lending_limit > qq->nominal)
                    bad(l, fx, "must not be more than nominalQuota");
            }
        }
    }
}

/* Fields Kueue accepts whose meaning needs a controller kiln's nodes do not
 * have, and the other version's name of the cohort: each refused with its
 * reason rather than as merely unknown. */
static bool unsupported_cq_key(const char *k)
{
    return strcmp(k, "admissionChecks") == 0 || strcmp(k, "admissionChecksStrategy") == 0;
}

static void refuse_unsupported_cq(ld *l, const json_t *spec)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)spec, k, v)
    {
        char f[256];
        snprintf(f, sizeof f, "spec.%s", k);
        if (unsupported_cq_key(k))
            bad(l, f,
                "admission checks (MultiKueue, ProvisioningRequest) wait on a controller "
                "that provisions or dispatches elsewhere; kiln admits onto its own nodes, "
                "which have neither: remove it");
        else if (!l->v1beta1 && strcmp(k, "concurrentAdmissionPolicy") == 0)
            bad(l, f,
                "kiln admits a job once, on one flavor, and never migrates an admitted job "
                "to another flavor: remove it");
        else if (l->v1beta1 && strcmp(k, "cohortName") == 0)
            bad(l, f, "is v1beta2's name; in kueue.x-k8s.io/v1beta1 it is spec.cohort");
        else if (!l->v1beta1 && strcmp(k, "cohort") == 0)
            bad(l, f,
                "was renamed spec.cohortName in kueue.x-k8s.io/v1beta2 (spec.cohort is v1beta1's)");
    }
}

/* spec.flavorFungibility. whenCanBorrow is acted on in kiln_queues_fit.
 * kiln's preemption runs only once no flavor fits without it, and borrowing
 * is tried before preemption: that is whenCanPreempt TryNextFlavor and
 * preference BorrowingOverPreemption (Kueue's defaults); the other values
 * are refused rather than read and not honoured. v1beta1's Borrow and
 * Preempt convert to MayStopSearch, as Kueue's conversion does. */
static void read_fungibility(ld *l, kiln_qcq *cq, const json_t *ff)
{
    if (!json_is_object(ff)) {
        bad(l, "spec.flavorFungibility", "must be a map (whenCanBorrow, whenCanPreempt)");
        return;
    }
    static const char *const keys[] = {"whenCanBorrow", "whenCanPreempt", "preference", NULL};
    only_keys(l, ff, "spec.flavorFungibility", keys, NULL);
    const char *stop_b = l->v1beta1 ? "Borrow" : "MayStopSearch";
    const char *stop_p = l->v1beta1 ? "Preempt" : "MayStopSearch";
    const json_t *v = json_object_get(ff, "whenCanBorrow");
    const char *s = scalar(v);
    if (v && !json_is_null(v)) {
        if (s && strcmp(s, stop_b) == 0)
            cq->borrow_try_next = false;
        else if (s && strcmp(s, "TryNextFlavor") == 0)
            cq->borrow_try_next = true;
        else
            bad(l, "spec.flavorFungibility.whenCanBorrow", "'%s' is not %s or TryNextFlavor",
                s ? s : "(not a scalar)", stop_b);
    }
    v = json_object_get(ff, "whenCanPreempt");
    s = scalar(v);
    if (v && !json_is_null(v)) {
        if (s && strcmp(s, stop_p) == 0)
            bad(l, "spec.flavorFungibility.whenCanPreempt",
                "'%s': kiln preempts only once no flavor of the group fits without it "
                "(TryNextFlavor, Kueue's default); remove it or say TryNextFlavor",
                s);
        else if (!s || strcmp(s, "TryNextFlavor") != 0)
            bad(l, "spec.flavorFungibility.whenCanPreempt", "'%s' is not %s or TryNextFlavor",
                s ? s : "(not a scalar)", stop_p);
    }
    v = json_object_get(ff, "preference");
    s = scalar(v);
    if (v && !json_is_null(v)) {
        if (s && strcmp(s, "PreemptionOverBorrowing") == 0)
            bad(l, "spec.flavorFungibility.preference",
                "'PreemptionOverBorrowing': kiln tries borrowing before preemption "
                "(BorrowingOverPreemption, Kueue's default); remove it");
        else if (!s || strcmp(s, "BorrowingOverPreemption") != 0)
            bad(l, "spec.flavorFungibility.preference",
                "'%s' is not BorrowingOverPreemption or PreemptionOverBorrowing",
                s ? s : "(not a scalar)");
        else if (!cq->borrow_try_next)
            bad(l, "spec.flavorFungibility.preference",
                "Kueue allows it only when whenCanBorrow and whenCanPreempt are both "
                "TryNextFlavor");
    }
}

/* A ClusterQueue's metadata.labels: only KILN_PERSISTENT_RESOURCE_LABEL,
 * which declares it a Vertex persistent resource (its value the id). */
static void read_cq_labels(ld *l, kiln_qcq *cq, const json_t *labels)
{
    if (!labels || json_is_null(labels)) return;
    if (!json_is_object(labels)) {
        bad(l, "metadata.labels", "must be a map of label to value");
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)labels, k, v)
    {
        char f[300];
        snprintf(f, sizeof f, "metadata.labels.%s", k);
        if (strcmp(k, KILN_PERSISTENT_RESOURCE_LABEL) != 0) {
            bad(l, f,
                "kiln reads only " KILN_PERSISTENT_RESOURCE_LABEL
                " here (a Vertex persistent resource); other labels have no meaning to kiln");
            continue;
        }
        const char *id = scalar(v);
        /* Vertex's persistent resource ids: 1 to 63 of a-z, 0-9 and '-',
         * a letter first */
        bool ok = id && *id && strlen(id) <= 63 && islower((unsigned char)id[0]);
        for (const char *p = id; ok && *p; p++)
            ok = islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-';
        if (!ok) {
            bad(l, f,
                "must be a persistent resource id: 1 to 63 of a-z, 0-9 and '-', a letter first");
            continue;
        }
        cq->persistent_resource = dup(l, id);
    }
}

static void read_cq(ld *l, const char *name, const json_t *spec, kiln_strv *names)
{
    kiln_queues *q = l->q;
    kiln_qcq *nv = grow(l, q->cqs, q->ncqs, sizeof *nv);
    if (!nv) return;
    q->cqs = nv;
    kiln_qcq *cq = &q->cqs[q->ncqs++];
    cq->name = dup(l, name);
    cq->weight = 1;
    cq->cohort_i = -1;
    /* Kueue accepts a ClusterQueue with no spec or no resourceGroups: it
     * covers nothing (a GPU job routed to it is refused at submit) */
    if (!spec) return;
    /* the cohort's key is the version's; the other version's, and the
     * admission checks, are refused with their reason by
     * refuse_unsupported_cq, so only_keys passes over them */
    const char *cohort_key = l->v1beta1 ? "cohort" : "cohortName";
    const char *const keys[] = {cohort_key,
                                "namespaceSelector",
                                "queueingStrategy",
                                "resourceGroups",
                                "preemption",
                                "fairSharing",
                                "stopPolicy",
                                "flavorFungibility",
                                "admissionScope",
                                "admissionChecks",
                                "admissionChecksStrategy",
                                l->v1beta1 ? "cohortName" : "cohort",
                                l->v1beta1 ? "admissionChecks" : "concurrentAdmissionPolicy",
                                NULL};
    refuse_unsupported_cq(l, spec);
    only_keys(l, spec, "spec", keys, NULL);
    const json_t *c = json_object_get(spec, cohort_key);
    if (c && !json_is_null(c)) {
        if (!valid_name(scalar(c)))
            bad(l, l->cohort_field, "must be a name (lower-case letters, digits, '-', '.')");
        else
            cq->cohort = dup(l, scalar(c));
    }
    const json_t *ff = json_object_get(spec, "flavorFungibility");
    if (ff && !json_is_null(ff)) read_fungibility(l, cq, ff);
    const json_t *as = json_object_get(spec, "admissionScope");
    if (as && !json_is_null(as)) {
        if (!json_is_object(as)) {
            bad(l, "spec.admissionScope", "must be a map with admissionMode");
        } else {
            static const char *const ak[] = {"admissionMode", NULL};
            only_keys(l, as, "spec.admissionScope", ak, NULL);
            const char *m = scalar(json_object_get(as, "admissionMode"));
            if (m && strcmp(m, "UsageBasedAdmissionFairSharing") == 0)
                cq->afs = true;
            else if (!m || strcmp(m, "NoAdmissionFairSharing") != 0)
                bad(l, "spec.admissionScope.admissionMode",
                    "'%s' is not UsageBasedAdmissionFairSharing or NoAdmissionFairSharing",
                    m ? m : "(required)");
        }
    }
    const json_t *ns = json_object_get(spec, "namespaceSelector");
    if (ns && !json_is_null(ns)) {
        if (!json_is_object(ns)) {
            bad(l, "spec.namespaceSelector", "must be a label selector");
        } else if (json_object_size(ns) == 0) {
            cq->all_namespaces = true;
        } else {
            static const char *const nk[] = {"matchLabels", NULL};
            only_keys(l, ns, "spec.namespaceSelector", nk,
                      " (kiln projects carry one label: "
                      "kubernetes.io/metadata.name)");
            const json_t *ml = json_object_get(ns, "matchLabels");
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)ml, k, v)
            {
                if (strcmp(k, "kubernetes.io/metadata.name") != 0 || !scalar(v)) {
                    char f[256];
                    snprintf(f, sizeof f, "spec.namespaceSelector.matchLabels.%s", k);
                    bad(l, f,
                        "a kiln project has only the label kubernetes.io/metadata.name (its name)");
                    continue;
                }
                nomem(l, kiln_strv_push(&cq->namespaces, scalar(v)));
            }
        }
    }
    const json_t *qs = json_object_get(spec, "queueingStrategy");
    if (qs && !json_is_null(qs)) {
        const char *s = scalar(qs);
        if (s && strcmp(s, "StrictFIFO") == 0)
            cq->strategy = KILN_Q_STRICT_FIFO;
        else if (s && strcmp(s, "BestEffortFIFO") == 0)
            cq->strategy = KILN_Q_BEST_EFFORT_FIFO;
        else
            bad(l, "spec.queueingStrategy", "'%s' is not StrictFIFO or BestEffortFIFO",
                s ? s : "(not a scalar)");
    }
    const json_t *p = json_object_get(spec, "preemption");
    if (p && !json_is_null(p)) read_preemption(l, cq, p);
    const json_t *fs = json_object_get(spec, "fairSharing");
    if (fs && !json_is_null(fs)) {
        cq->fair_sharing = true;
        if (!json_is_object(fs)) {
            bad(l, "spec.fairSharing", "must be a map with weight");
        } else {
            static const char *const fk[] = {"weight", NULL};
            only_keys(l, fs, "spec.fairSharing", fk, NULL);
            const json_t *w = json_object_get(fs, "weight");
            int64_t m = 1000;
            if (w && !json_is_null(w) && !quantity_milli(scalar(w), &m))
                bad(l, "spec.fairSharing.weight", "must be a quantity >= 0 (like 1, 2, 0.5)");
            cq->weight = (double)m / 1000.0;
        }
    }
    cq->stop = read_stop(l, spec);
    const json_t *rg = json_object_get(spec, "resourceGroups");
    if (!rg || json_is_null(rg) || (json_is_array(rg) && json_array_size(rg) == 0)) return;
    if (!json_is_array(rg)) {
        bad(l, "spec.resourceGroups", "must be a list of resource groups");
        return;
    }
    if (json_array_size(rg) > 8) {
        bad(l, "spec.resourceGroups", "at most 8 resource groups");
        return;
    }
    cq->groups = calloc(json_array_size(rg), sizeof *cq->groups);
    if (!cq->groups) {
        nomem(l, KILN_ENOMEM);
        return;
    }
    cq->ngroups = json_array_size(rg);
    for (size_t g = 0; g < cq->ngroups; g++)
        read_group(l, cq->groups, cq->cohort, json_array_get(rg, g), g, names);
}

/* A Cohort: spec.parentName, spec.resourceGroups (the subtree's own quota). Kueue's webhook refuses
 * limits on a root Cohort, as read_group does here (they need a parent). */
static void read_cohort(ld *l, const char *name, const json_t *spec, kiln_strv *names,
                        kiln_strv *parents)
{
    kiln_queues *q = l->q;
    nomem(l, kiln_strv_push(&q->cohorts, name));
    kiln_qcohort *nv = grow(l, q->cnodes, q->ncnodes, sizeof *nv);
    if (!nv) return;
    q->cnodes = nv;
    kiln_qcohort *c = &q->cnodes[q->ncnodes++];
    c->name = dup(l, name);
    c->declared = true;
    c->parent = -1;
    const char *parent = NULL;
    if (spec) {
        static const char *const keys[] = {"parentName", "resourceGroups", "fairSharing", NULL};
        only_keys(l, spec, "spec", keys, NULL);
        const json_t *p = json_object_get(spec, "parentName");
        if (p && !json_is_null(p)) {
            parent = scalar(p);
            if (!valid_name(parent)) {
                bad(l, "spec.parentName", "must be a name (lower-case letters, digits, '-', '.')");
                parent = NULL;
            } else if (strcmp(parent, name) == 0) {
                bad(l, "spec.parentName", "a Cohort cannot be its own parent");
            }
        }
    }
    /* the parent's name, resolved in resolve() */
    nomem(l, kiln_strv_push(parents, parent ? parent : ""));
    if (!spec) return;
    /* kiln's fair sharing compares ClusterQueues of a cohort, not cohorts:
     * a weight it would not use is refused rather than ignored */
    if (json_object_get(spec, "fairSharing"))
        bad(l, "spec.fairSharing",
            "fair sharing between cohorts is not kiln's yet (it shares between the "
            "ClusterQueues of a cohort by their own fairSharing.weight): remove it");
    const json_t *rg = json_object_get(spec, "resourceGroups");
    if (!rg || json_is_null(rg) || (json_is_array(rg) && json_array_size(rg) == 0)) return;
    if (!json_is_array(rg) || json_array_size(rg) > 8) {
        bad(l, "spec.resourceGroups", "must be a list of at most 8 resource groups");
        return;
    }
    c->groups = calloc(json_array_size(rg), sizeof *c->groups);
    if (!c->groups) {
        nomem(l, KILN_ENOMEM);
        return;
    }
    c->ngroups = json_array_size(rg);
    const char *saved = l->cohort_field;
    l->cohort_field = "spec.parentName";
    for (size_t g = 0; g < c->ngroups; g++)
        read_group(l, c->groups, parent, json_array_get(rg, g), g, names);
    l->cohort_field = saved;
}

static void read_lq(ld *l, const char *ns, const char *name, const json_t *spec, kiln_strv *cqnames)
{
    kiln_queues *q = l->q;
    kiln_qlq *nv = grow(l, q->lqs, q->nlqs, sizeof *nv);
    if (!nv) return;
    q->lqs = nv;
    kiln_qlq *lq = &q->lqs[q->nlqs++];
    lq->name = dup(l, name);
    lq->namespace_ = dup(l, ns);
    lq->weight = 1;
    lq->cq = cqnames->n;
    if (!spec || !json_is_object(spec)) {
        bad(l, "spec.clusterQueue", "required");
        nomem(l, kiln_strv_push(cqnames, ""));
        return;
    }
    static const char *const keys[] = {"clusterQueue", "stopPolicy", "fairSharing", NULL};
    only_keys(l, spec, "spec", keys, NULL);
    const json_t *fs = json_object_get(spec, "fairSharing");
    if (fs && !json_is_null(fs)) {
        lq->fair_sharing = true;
        int64_t m = 1000;
        if (!json_is_object(fs)) {
            bad(l, "spec.fairSharing", "must be a map with weight");
        } else {
            static const char *const fk[] = {"weight", NULL};
            only_keys(l, fs, "spec.fairSharing", fk, NULL);
            const json_t *w = json_object_get(fs, "weight");
            if (w && !json_is_null(w) && !quantity_milli(scalar(w), &m))
                bad(l, "spec.fairSharing.weight", "must be a quantity >= 0 (like 1, 2, 0.5)");
        }
        lq->weight = (double)m / 1000.0;
    }
    const char *cq = scalar(json_object_get(spec, "clusterQueue"));
    if (!valid_name(cq)) bad(l, "spec.clusterQueue", "required: the name of a ClusterQueue");
    nomem(l, kiln_strv_push(cqnames, cq ? cq : ""));
    lq->stop = read_stop(l, spec);
}

static void read_pc(ld *l, const char *name, const json_t *doc)
{
    kiln_queues *q = l->q;
    kiln_qpc *nv = grow(l, q->pcs, q->npcs, sizeof *nv);
    if (!nv) return;
    q->pcs = nv;
    kiln_qpc *pc = &q->pcs[q->npcs++];
    pc->name = dup(l, name);
    const json_t *v = json_object_get(doc, "value");
    if (!read_int(scalar(v), INT32_MIN, INT32_MAX, &pc->value))
        bad(l, "value", "required: the priority, a whole number (int32)");
    const json_t *ds = json_object_get(doc, "description");
    if (ds && !json_is_null(ds)) {
        if (!scalar(ds))
            bad(l, "description", "must be a string");
        else
            pc->description = dup(l, scalar(ds));
    }
}

/* Kinds Kueue has that kiln refuses with the reason, rather than as unknown. */
static const char *refused_kind(const char *kind)
{
    if (strcmp(kind, "AdmissionCheck") == 0 || strcmp(kind, "MultiKueueConfig") == 0 ||
        strcmp(kind, "MultiKueueCluster") == 0)
        return "MultiKueue and admission checks dispatch or gate workloads through a "
               "controller and other clusters; kiln admits onto its own nodes, which have "
               "neither: remove it";
    if (strcmp(kind, "ProvisioningRequestConfig") == 0)
        return "ProvisioningRequest asks a cluster autoscaler for new nodes; kiln's nodes are "
               "the ones its node config declares: remove it";
    if (strcmp(kind, "Workload") == 0)
        return "a Workload is what Kueue makes of a job; kiln makes its own from each submitted "
               "job: remove it";
    return NULL;
}

static void read_doc(ld *l, const json_t *doc, size_t i, kiln_strv *flnames, kiln_strv *cqnames,
                     kiln_strv *parents, kiln_strv *topo_names)
{
    const char *fp = l->file ? l->file : "", *fs = l->file ? ": " : "";
    snprintf(l->where, sizeof l->where, "%s%sdocument %zu", fp, fs, i + 1);
    if (!json_is_object(doc)) {
        bad(l, "", "must be a Kubernetes object (apiVersion, kind, metadata, spec)");
        return;
    }
    const char *api = scalar(json_object_get(doc, "apiVersion"));
    const char *kind = scalar(json_object_get(doc, "kind"));
    const json_t *md = json_object_get(doc, "metadata");
    const char *name = json_is_object(md) ? scalar(json_object_get(md, "name")) : NULL;
    static const char *const kinds[] = {"ResourceFlavor", "ClusterQueue",          "LocalQueue",
                                        "Cohort",         "WorkloadPriorityClass", "Topology"};
    int k = -1;
    for (int j = 0; kind && j < 6; j++)
        if (strcmp(kind, kinds[j]) == 0) k = j;
    if (kind && name) snprintf(l->where, sizeof l->where, "%s%s%s %s", fp, fs, kind, name);
    /* Cohort and Topology were v1alpha1 (Kueue up to v0.12 and v0.13), with
     * the same fields */
    if (api && strcmp(api, API_V1ALPHA1) == 0 && (k == 3 || k == 5)) api = API_V1BETA1;
    if (!api || (strcmp(api, API_V1BETA2) != 0 && strcmp(api, API_V1BETA1) != 0)) {
        bad(l, "apiVersion", "'%s': kiln reads %s and %s", api ? api : "", API_V1BETA2,
            API_V1BETA1);
        return;
    }
    l->v1beta1 = strcmp(api, API_V1BETA1) == 0;
    l->cohort_field = l->v1beta1 ? "spec.cohort" : "spec.cohortName";
    if (k < 0 && kind && refused_kind(kind)) {
        bad(l, "kind", "%s", refused_kind(kind));
        return;
    }
    if (k < 0) {
        bad(l, "kind",
            "'%s' is not ResourceFlavor, ClusterQueue, LocalQueue, Cohort, Topology or "
            "WorkloadPriorityClass",
            kind ? kind : "");
        return;
    }
    static const char *const top_spec[] = {"apiVersion", "kind", "metadata", "spec", NULL};
    static const char *const top_pc[] = {"apiVersion", "kind",        "metadata",
                                         "value",      "description", NULL};
    only_keys(l, doc, "", k == 4 ? top_pc : top_spec, NULL);
    if (!json_is_object(md) || !valid_name(name)) {
        bad(l, "metadata.name", "required: lower-case letters, digits, '-' and '.'");
        return;
    }
    static const char *const mk_ns[] = {"name", "namespace", NULL};
    static const char *const mk[] = {"name", NULL};
    static const char *const mk_cq[] = {"name", "labels", NULL};
    only_keys(l, md, "metadata",
              k == 2   ? mk_ns
              : k == 1 ? mk_cq
                       : mk,
              k == 2 ? NULL
                     : " (a cluster-scoped object has no namespace; labels and annotations "
                       "have no meaning to kiln)");
    const json_t *spec = json_object_get(doc, "spec");
    if (spec && json_is_null(spec)) spec = NULL;
    if (spec && !json_is_object(spec)) {
        bad(l, "spec", "must be a map");
        return;
    }
    /* one object per kind and name (per namespace for a LocalQueue) */
    const char *ns = k == 2 ? scalar(json_object_get(md, "namespace")) : NULL;
    bool dupl = false;
    kiln_queues *q = l->q;
    if (k == 0)
        for (size_t j = 0; j < q->nflavors; j++)
            dupl |= strcmp(q->flavors[j].name, name) == 0;
    if (k == 1)
        for (size_t j = 0; j < q->ncqs; j++)
            dupl |= strcmp(q->cqs[j].name, name) == 0;
    if (k == 2)
        for (size_t j = 0; ns && j < q->nlqs; j++)
            dupl |= strcmp(q->lqs[j].name, name) == 0 && strcmp(q->lqs[j].namespace_, ns) == 0;
    if (k == 3)
        for (size_t j = 0; j < q->cohorts.n; j++)
            dupl |= strcmp(q->cohorts.v[j], name) == 0;
    if (k == 4)
        for (size_t j = 0; j < q->npcs; j++)
            dupl |= strcmp(q->pcs[j].name, name) == 0;
    if (k == 5)
        for (size_t j = 0; j < q->ntopologies; j++)
            dupl |= strcmp(q->topologies[j].name, name) == 0;
    if (dupl) {
        bad(l, "metadata.name", "defined twice");
        return;
    }
    switch (k) {
    case 0:
        read_flavor(l, name, spec, topo_names);
        break;
    case 1:
        read_cq(l, name, spec, flnames);
        read_cq_labels(l, &q->cqs[q->ncqs - 1], json_object_get(md, "labels"));
        break;
    case 2:
        if (!valid_name(ns)) {
            bad(l, "metadata.namespace", "required: the kiln project whose jobs use this queue");
            return;
        }
        read_lq(l, ns, name, spec, cqnames);
        break;
    case 3:
        read_cohort(l, name, spec, flnames, parents);
        break;
    case 4:
        read_pc(l, name, doc);
        break;
    case 5:
        read_topology(l, name, spec);
        break;
    }
}

/* Flavor names of one object's resource groups into indices. */
static void resolve_groups(ld *l, kiln_qgroup *groups, size_t ngroups, const kiln_strv *flnames,
                           const char *what)
{
    kiln_queues *q = l->q;
    for (size_t g = 0; g < ngroups; g++)
        for (size_t i = 0; i < groups[g].n; i++) {
            kiln_qgflavor *gf = &groups[g].flavors[i];
            const char *fname = gf->flavor < flnames->n ? flnames->v[gf->flavor] : "";
            size_t f = q->nflavors;
            for (size_t j = 0; j < q->nflavors; j++)
                if (strcmp(q->flavors[j].name, fname) == 0) f = j;
            char field[96];
            snprintf(field, sizeof field, "spec.resourceGroups[%zu].flavors[%zu].name", g, i);
            if (f == q->nflavors && *fname)
                bad(l, field, "no ResourceFlavor named '%s' in the file", fname);
            for (size_t g2 = 0; f < q->nflavors && g2 <= g; g2++)
                for (size_t i2 = 0; i2 < (g2 == g ? i : groups[g2].n); i2++)
                    if (groups[g2].flavors[i2].flavor == f)
                        bad(l, field, "flavor '%s' is named twice in this %s", fname, what);
            gf->flavor = f < q->nflavors ? f : 0;
        }
}

/* The cohort node named `name`, added as an implicit one (a root with no
 * quota, as Kueue treats a name with no Cohort object) when absent. */
static long cohort_node(ld *l, const char *name)
{
    kiln_queues *q = l->q;
    for (size_t k = 0; k < q->ncnodes; k++)
        if (strcmp(q->cnodes[k].name, name) == 0) return (long)k;
    kiln_qcohort *nv = grow(l, q->cnodes, q->ncnodes, sizeof *nv);
    if (!nv) return -1;
    q->cnodes = nv;
    kiln_qcohort *c = &q->cnodes[q->ncnodes];
    c->name = dup(l, name);
    c->parent = -1;
    return (long)q->ncnodes++;
}

/* The cohort tree: every declared Cohort's parent and every ClusterQueue's
 * cohort as a node index. A cycle is refused (Kueue disables every member
 * of one until it is broken; kiln says so at load instead). */
static void resolve_cohorts(ld *l, const kiln_strv *parents)
{
    kiln_queues *q = l->q;
    size_t declared = q->ncnodes;
    for (size_t k = 0; k < declared && l->err == KILN_OK; k++) {
        const char *p = k < parents->n ? parents->v[k] : "";
        if (*p) {
            long pi = cohort_node(l, p);
            q->cnodes[k].parent = pi;
        }
    }
    for (size_t c = 0; c < q->ncqs && l->err == KILN_OK; c++)
        q->cqs[c].cohort_i = q->cqs[c].cohort ? cohort_node(l, q->cqs[c].cohort) : -1;
    for (size_t k = 0; k < declared && l->err == KILN_OK; k++) {
        long at = q->cnodes[k].parent;
        size_t steps = 0;
        while (at >= 0 && at != (long)k && steps++ <= q->ncnodes)
            at = q->cnodes[at].parent;
        if (at == (long)k) {
            snprintf(l->where, sizeof l->where, "Cohort %s", q->cnodes[k].name);
            bad(l, "spec.parentName",
                "'%s' leads back to this Cohort: a cycle (Kueue stops admitting to every "
                "member of one until it is broken)",
                q->cnodes[q->cnodes[k].parent].name);
        }
    }
    /* a Cohort's limits need a parent (Kueue's webhook): checked at read
     * with its parentName; an implicit parent is still a parent */
}

/* Turns flavor, ClusterQueue and cohort names into indices, now that every object is read. */
static void resolve(ld *l, const kiln_strv *flnames, const kiln_strv *cqnames,
                    const kiln_strv *parents, const kiln_strv *topo_names)
{
    kiln_queues *q = l->q;
    for (size_t f = 0; f < q->nflavors; f++) {
        kiln_qflavor *fl = &q->flavors[f];
        if (fl->topology < 0) continue;
        const char *tn = (size_t)fl->topology < topo_names->n ? topo_names->v[fl->topology] : "";
        fl->topology = -1;
        for (size_t t = 0; t < q->ntopologies; t++)
            if (strcmp(q->topologies[t].name, tn) == 0) fl->topology = (long)t;
        snprintf(l->where, sizeof l->where, "ResourceFlavor %s", fl->name);
        /* Kueue keeps such a flavor's ClusterQueues inactive until the
         * Topology exists; kiln reads the whole set at once, so it is a typo */
        if (fl->topology < 0) bad(l, "spec.topologyName", "no Topology named '%s' in the set", tn);
    }
    for (size_t c = 0; c < q->ncqs; c++) {
        kiln_qcq *cq = &q->cqs[c];
        snprintf(l->where, sizeof l->where, "ClusterQueue %s", cq->name);
        resolve_groups(l, cq->groups, cq->ngroups, flnames, "ClusterQueue");
    }
    for (size_t k = 0; k < q->ncnodes; k++) {
        kiln_qcohort *c = &q->cnodes[k];
        snprintf(l->where, sizeof l->where, "Cohort %s", c->name);
        resolve_groups(l, c->groups, c->ngroups, flnames, "Cohort");
    }
    resolve_cohorts(l, parents);
    for (size_t i = 0; i < q->nlqs; i++) {
        kiln_qlq *lq = &q->lqs[i];
        snprintf(l->where, sizeof l->where, "LocalQueue %s/%s", lq->namespace_, lq->name);
        const char *cname = lq->cq < cqnames->n ? cqnames->v[lq->cq] : "";
        size_t c = q->ncqs;
        for (size_t j = 0; j < q->ncqs; j++)
            if (strcmp(q->cqs[j].name, cname) == 0) c = j;
        if (c == q->ncqs && *cname)
            bad(l, "spec.clusterQueue", "no ClusterQueue named '%s' in the file", cname);
        else if (c < q->ncqs && lq->fair_sharing && !q->cqs[c].afs)
            bad(l, "spec.fairSharing",
                "has no effect: ClusterQueue %s has no admissionScope admissionMode "
                "UsageBasedAdmissionFairSharing (add it there, or remove this)",
                cname);
        lq->cq = c < q->ncqs ? c : 0;
    }
}

kiln_err kiln_queues_load_srcs(const kiln_queues_src *src, size_t n, kiln_queues **out,
                               kiln_diag *d)
{
    *out = NULL;
    kiln_err err = KILN_OK;
    ld l = {.d = d};
    kiln_strv flnames = {0}, cqnames = {0}, parents = {0}, topo_names = {0};
    json_t **docs = calloc(n ? n : 1, sizeof *docs);
    if (!docs) return KILN_ENOMEM;
    /* every source parsed first: a syntax error anywhere refuses the set */
    for (size_t s = 0; s < n; s++) {
        kiln_err e = KILN_OK;
        char path[600];
        snprintf(path, sizeof path, "%s", src[s].name ? src[s].name : "");
        if (src[s].len > KILN_QUEUES_MAX_BYTES) {
            kiln_diag_add(d, path, "the queues file is over %u bytes", KILN_QUEUES_MAX_BYTES);
            if (err == KILN_OK) err = KILN_ELIMIT;
            continue;
        }
        size_t before = d->n;
        docs[s] = kiln__yaml_load_all(src[s].buf, src[s].len, d, &e);
        if (!docs[s] && err == KILN_OK) err = e != KILN_OK ? e : KILN_EINVAL;
        /* the YAML loader names no file: say which one its words are about */
        for (size_t i = before; src[s].name && i < d->n; i++) {
            char *f = NULL;
            if (asprintf(&f, "%s%s%s", path, *d->v[i].field ? ": " : "", d->v[i].field) < 0)
                continue;
            free(d->v[i].field);
            d->v[i].field = f;
        }
    }
    if (err != KILN_OK) goto out;
    l.q = calloc(1, sizeof *l.q);
    if (!l.q) {
        err = KILN_ENOMEM;
        goto out;
    }
    for (size_t s = 0; s < n && l.err == KILN_OK; s++) {
        l.file = src[s].name;
        for (size_t i = 0; i < json_array_size(docs[s]) && l.err == KILN_OK; i++)
            read_doc(&l, json_array_get(docs[s], i), i, &flnames, &cqnames, &parents, &topo_names);
    }
    l.file = NULL;
    if (l.err == KILN_OK && l.bad == 0) resolve(&l, &flnames, &cqnames, &parents, &topo_names);
    err = l.err != KILN_OK ? l.err : l.bad ? KILN_EINVAL : KILN_OK;
out:
    for (size_t s = 0; s < n; s++)
        json_decref(docs[s]);
    free(docs);
    for (size_t i = 0; i < flnames.n; i++)
        free(flnames.v[i]);
    free(flnames.v);
    for (size_t i = 0; i < cqnames.n; i++)
        free(cqnames.v[i]);
    free(cqnames.v);
    for (size_t i = 0; i < parents.n; i++)
        free(parents.v[i]);
    free(parents.v);
    for (size_t i = 0; i < topo_names.n; i++)
        free(topo_names.v[i]);
    free(topo_names.v);
    if (err != KILN_OK) {
        kiln_queues_free(l.q);
        return err;
    }
    *out = l.q;
    return KILN_OK;
}

kiln_err kiln_queues_load(const char *buf, size_t len, kiln_queues **out, kiln_diag *d)
{
    kiln_queues_src s = {.name = NULL, .buf = buf, .len = len};
    return kiln_queues_load_srcs(&s, 1, out, d);
}

kiln_err kiln_queues_load_file(const char *path, kiln_queues **out, kiln_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    kiln_err err = kiln__read_file(path, KILN_QUEUES_MAX_BYTES, &buf, &len);
    if (err != KILN_OK) {
        kiln_diag_add(d, "", "%s: %s", path,
                      err == KILN_ELIMIT ? "over the size cap" : strerror(errno));
        return err;
    }
    err = kiln_queues_load(buf, len, out, d);
    free(buf);
    return err;
}

void kiln_queues_free(kiln_queues *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->nflavors; i++) {
        free(q->flavors[i].name);
        kiln_map_clear(&q->flavors[i].node_labels);
        for (size_t t = 0; t < q->flavors[i].n_node_taints; t++)
            kiln_taint_clear(&q->flavors[i].node_taints[t]);
        free(q->flavors[i].node_taints);
        for (size_t t = 0; t < q->flavors[i].n_tolerations; t++)
            kiln_toleration_clear(&q->flavors[i].tolerations[t]);
        free(q->flavors[i].tolerations);
    }
    free(q->flavors);
    for (size_t i = 0; i < q->ntopologies; i++) {
        free(q->topologies[i].name);
        for (size_t j = 0; j < q->topologies[i].levels.n; j++)
            free(q->topologies[i].levels.v[j]);
        free(q->topologies[i].levels.v);
    }
    free(q->topologies);
    for (size_t i = 0; i < q->ncqs; i++) {
        kiln_qcq *cq = &q->cqs[i];
        free(cq->name);
        free(cq->cohort);
        free(cq->persistent_resource);
        for (size_t j = 0; j < cq->namespaces.n; j++)
            free(cq->namespaces.v[j]);
        free(cq->namespaces.v);
        for (size_t g = 0; g < cq->ngroups; g++)
            free(cq->groups[g].flavors);
        free(cq->groups);
    }
    free(q->cqs);
    for (size_t i = 0; i < q->nlqs; i++) {
        free(q->lqs[i].name);
        free(q->lqs[i].namespace_);
    }
    free(q->lqs);
    for (size_t i = 0; i < q->cohorts.n; i++)
        free(q->cohorts.v[i]);
    free(q->cohorts.v);
    for (size_t k = 0; k < q->ncnodes; k++) {
        free(q->cnodes[k].name);
        for (size_t g = 0; g < q->cnodes[k].ngroups; g++)
            free(q->cnodes[k].groups[g].flavors);
        free(q->cnodes[k].groups);
    }
    free(q->cnodes);
    for (size_t i = 0; i < q->npcs; i++) {
        free(q->pcs[i].name);
        free(q->pcs[i].description);
    }
    free(q->pcs);
    free(q);
}
