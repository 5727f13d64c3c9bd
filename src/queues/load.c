/* src/queues/load.c - Kueue's YAML (kueue.x-k8s.io/v1beta1) -> kiln_queues.
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

#define API_VERSION "kueue.x-k8s.io/v1beta1"

typedef struct ld {
    kiln_queues *q;
    kiln_diag *d;
    kiln_err err; /* ENOMEM; EINVAL is counted by bad */
    size_t bad;
    char where[192]; /* "ClusterQueue team-a" */
} ld;

static void bad(ld *l, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bad(ld *l, const char *field, const char *fmt, ...)
{
    char path[512];
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
            r == KILN_QRES_GPU ? "devices" : "bytes");
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

static void read_flavor(ld *l, const char *name, const json_t *spec)
{
    kiln_queues *q = l->q;
    kiln_qflavor *nv = grow(l, q->flavors, q->nflavors, sizeof *nv);
    if (!nv) return;
    q->flavors = nv;
    kiln_qflavor *f = &q->flavors[q->nflavors++];
    f->name = dup(l, name);
    if (!spec) return;
    static const char *const keys[] = {"nodeLabels", NULL};
    only_keys(l, spec, "spec", keys, " (kiln's nodes have no taints)");
    const json_t *nl = json_object_get(spec, "nodeLabels");
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
     * opens; and without a cohort there is nobody to preempt */
    if (cq->borrow_within != KILN_QP_NEVER && !cq->cohort)
        bad(l, "spec.preemption.borrowWithinCohort.policy",
            "needs spec.cohort: without a cohort there is nothing to borrow");
    else if (cq->borrow_within != KILN_QP_NEVER && cq->reclaim == KILN_QP_NEVER)
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
static void read_group(ld *l, kiln_qcq *cq, const json_t *g, size_t gi, kiln_strv *names)
{
    char f[256];
    snprintf(f, sizeof f, "spec.resourceGroups[%zu]", gi);
    if (!json_is_object(g)) {
        bad(l, f, "must be a map with coveredResources and flavors");
        return;
    }
    static const char *const keys[] = {"coveredResources", "flavors", NULL};
    only_keys(l, g, f, keys, NULL);
    kiln_qgroup *grp = &cq->groups[gi];
    const json_t *cr = json_object_get(g, "coveredResources");
    int order[KILN_QRES_COUNT];
    size_t ncr = 0;
    char fc[300];
    snprintf(fc, sizeof fc, "%s.coveredResources", f);
    if (!json_is_array(cr) || json_array_size(cr) == 0) {
        bad(l, fc, "required: a list of nvidia.com/gpu, cpu, memory");
        return;
    }
    for (size_t i = 0; i < json_array_size(cr); i++) {
        int r = res_of(scalar(json_array_get(cr, i)));
        snprintf(fc, sizeof fc, "%s.coveredResources[%zu]", f, i);
        if (r < 0) {
            bad(l, fc, "'%s': kiln's jobs ask for nvidia.com/gpu, cpu and memory only",
                scalar(json_array_get(cr, i)) ? scalar(json_array_get(cr, i)) : "(not a scalar)");
            continue;
        }
        bool seen = false;
        for (size_t g2 = 0; g2 <= gi; g2++)
            seen |= cq->groups[g2].covers[r];
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
                if (!cq->cohort)
                    bad(l, fx, "needs spec.cohort: without a cohort there is nothing to borrow");
            }
            const json_t *ll = json_object_get(rv, "lendingLimit");
            if (ll && !json_is_null(ll)) {
                snprintf(fx, sizeof fx, "%s.lendingLimit", fr);
                qq->has_lending_limit = read_amount(l, ll, fx, (kiln_qres)r, &qq->lending_limit);
                if (!cq->cohort) bad(l, fx, "needs spec.cohort: without a cohort nobody borrows");
                if (qq->has_lending_limit && qq->lending_limit > qq->nominal)
                    bad(l, fx, "must not be more than nominalQuota");
            }
        }
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
    if (!spec) {
        bad(l, "spec", "required: resourceGroups");
        return;
    }
    static const char *const keys[] = {
        "cohort",     "namespaceSelector", "queueingStrategy", "resourceGroups",
        "preemption", "fairSharing",       "stopPolicy",       NULL};
    only_keys(l, spec, "spec", keys, NULL);
    const json_t *c = json_object_get(spec, "cohort");
    if (c && !json_is_null(c)) {
        if (!valid_name(scalar(c)))
            bad(l, "spec.cohort", "must be a name (lower-case letters, digits, '-', '.')");
        else
            cq->cohort = dup(l, scalar(c));
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
    if (!json_is_array(rg) || json_array_size(rg) == 0) {
        bad(l, "spec.resourceGroups", "required: at least one resource group");
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
        read_group(l, cq, json_array_get(rg, g), g, names);
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
    lq->cq = cqnames->n;
    if (!spec || !json_is_object(spec)) {
        bad(l, "spec.clusterQueue", "required");
        nomem(l, kiln_strv_push(cqnames, ""));
        return;
    }
    static const char *const keys[] = {"clusterQueue", "stopPolicy", NULL};
    only_keys(l, spec, "spec", keys, NULL);
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

static void read_doc(ld *l, const json_t *doc, size_t i, kiln_strv *flnames, kiln_strv *cqnames)
{
    snprintf(l->where, sizeof l->where, "document %zu", i + 1);
    if (!json_is_object(doc)) {
        bad(l, "", "must be a Kubernetes object (apiVersion, kind, metadata, spec)");
        return;
    }
    const char *api = scalar(json_object_get(doc, "apiVersion"));
    const char *kind = scalar(json_object_get(doc, "kind"));
    const json_t *md = json_object_get(doc, "metadata");
    const char *name = json_is_object(md) ? scalar(json_object_get(md, "name")) : NULL;
    static const char *const kinds[] = {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort",
                                        "WorkloadPriorityClass"};
    int k = -1;
    for (int j = 0; kind && j < 5; j++)
        if (strcmp(kind, kinds[j]) == 0) k = j;
    if (k >= 0 && name) snprintf(l->where, sizeof l->where, "%s %s", kind, name);
    if (!api || strcmp(api, API_VERSION) != 0) {
        bad(l, "apiVersion", "'%s': kiln reads %s", api ? api : "", API_VERSION);
        return;
    }
    if (k < 0) {
        bad(l, "kind",
            "'%s' is not ResourceFlavor, ClusterQueue, LocalQueue, Cohort or "
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
    only_keys(l, md, "metadata", k == 2 ? mk_ns : mk,
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
    if (dupl) {
        bad(l, "metadata.name", "defined twice");
        return;
    }
    switch (k) {
    case 0:
        read_flavor(l, name, spec);
        break;
    case 1:
        read_cq(l, name, spec, flnames);
        break;
    case 2:
        if (!valid_name(ns)) {
            bad(l, "metadata.namespace", "required: the kiln project whose jobs use this queue");
            return;
        }
        read_lq(l, ns, name, spec, cqnames);
        break;
    case 3:
        /* a Cohort's own quota, parent and fair sharing are not kiln's yet */
        if (spec) {
            static const char *const none[] = {NULL};
            only_keys(l, spec, "spec", none, " (kiln reads a Cohort as a name only)");
        }
        nomem(l, kiln_strv_push(&q->cohorts, name));
        break;
    case 4:
        read_pc(l, name, doc);
        break;
    }
}

/* Turns flavor and ClusterQueue names into indices, now that every object is read. */
static void resolve(ld *l, const kiln_strv *flnames, const kiln_strv *cqnames)
{
    kiln_queues *q = l->q;
    for (size_t c = 0; c < q->ncqs; c++) {
        kiln_qcq *cq = &q->cqs[c];
        snprintf(l->where, sizeof l->where, "ClusterQueue %s", cq->name);
        for (size_t g = 0; g < cq->ngroups; g++)
            for (size_t i = 0; i < cq->groups[g].n; i++) {
                kiln_qgflavor *gf = &cq->groups[g].flavors[i];
                const char *fname = gf->flavor < flnames->n ? flnames->v[gf->flavor] : "";
                size_t f = q->nflavors;
                for (size_t j = 0; j < q->nflavors; j++)
                    if (strcmp(q->flavors[j].name, fname) == 0) f = j;
                char field[96];
                snprintf(field, sizeof field, "spec.resourceGroups[%zu].flavors[%zu].name", g, i);
                if (f == q->nflavors && *fname)
                    bad(l, field, "no ResourceFlavor named '%s' in the file", fname);
                for (size_t g2 = 0; f < q->nflavors && g2 <= g; g2++)
                    for (size_t i2 = 0; i2 < (g2 == g ? i : cq->groups[g2].n); i2++)
                        if (cq->groups[g2].flavors[i2].flavor == f)
                            bad(l, field, "flavor '%s' is named twice in this ClusterQueue", fname);
                gf->flavor = f < q->nflavors ? f : 0;
            }
    }
    for (size_t i = 0; i < q->nlqs; i++) {
        kiln_qlq *lq = &q->lqs[i];
        snprintf(l->where, sizeof l->where, "LocalQueue %s/%s", lq->namespace_, lq->name);
        const char *cname = lq->cq < cqnames->n ? cqnames->v[lq->cq] : "";
        size_t c = q->ncqs;
        for (size_t j = 0; j < q->ncqs; j++)
            if (strcmp(q->cqs[j].name, cname) == 0) c = j;
        if (c == q->ncqs && *cname)
            bad(l, "spec.clusterQueue", "no ClusterQueue named '%s' in the file", cname);
        lq->cq = c < q->ncqs ? c : 0;
    }
}

kiln_err kiln_queues_load(const char *buf, size_t len, kiln_queues **out, kiln_diag *d)
{
    *out = NULL;
    kiln_err err = KILN_OK;
    ld l = {.d = d};
    kiln_strv flnames = {0}, cqnames = {0};
    if (len > KILN_QUEUES_MAX_BYTES) {
        kiln_diag_add(d, "", "the queues file is over %u bytes", KILN_QUEUES_MAX_BYTES);
        return KILN_ELIMIT;
    }
    json_t *docs = kiln__yaml_load_all(buf, len, d, &err);
    if (!docs) return err != KILN_OK ? err : KILN_EINVAL;
    l.q = calloc(1, sizeof *l.q);
    if (!l.q) {
        err = KILN_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < json_array_size(docs) && l.err == KILN_OK; i++)
        read_doc(&l, json_array_get(docs, i), i, &flnames, &cqnames);
    if (l.err == KILN_OK && l.bad == 0) resolve(&l, &flnames, &cqnames);
    err = l.err != KILN_OK ? l.err : l.bad ? KILN_EINVAL : KILN_OK;
out:
    json_decref(docs);
    for (size_t i = 0; i < flnames.n; i++)
        free(flnames.v[i]);
    free(flnames.v);
    for (size_t i = 0; i < cqnames.n; i++)
        free(cqnames.v[i]);
    free(cqnames.v);
    if (err != KILN_OK) {
        kiln_queues_free(l.q);
        return err;
    }
    *out = l.q;
    return KILN_OK;
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
    }
    free(q->flavors);
    for (size_t i = 0; i < q->ncqs; i++) {
        kiln_qcq *cq = &q->cqs[i];
        free(cq->name);
        free(cq->cohort);
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
    for (size_t i = 0; i < q->npcs; i++) {
        free(q->pcs[i].name);
        free(q->pcs[i].description);
    }
    free(q->pcs);
    free(q);
}
