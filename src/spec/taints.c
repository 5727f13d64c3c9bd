/* src/spec/taints.c - taints and tolerations as Kubernetes matches them
 * (kiln/job.h). The rules are k8s.io/api core/v1 Toleration.ToleratesTaint
 * and ValidateTolerations (pkg/apis/core/validation), without the
 * comparison operators Lt and Gt (alpha there; refused here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"

static bool set(const char *s)
{
    return s && *s;
}

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

bool kiln_toleration_tolerates(const kiln_toleration *t, const kiln_taint *taint)
{
    if (set(t->effect) && !same(t->effect, taint->effect)) return false;
    if (set(t->key) && !same(t->key, taint->key)) return false;
    if (!set(t->op) || strcmp(t->op, "Equal") == 0) return same(t->value, taint->value);
    return strcmp(t->op, "Exists") == 0;
}

bool kiln_tolerations_tolerate(const kiln_toleration *v, size_t n, const kiln_toleration *extra,
                               size_t n_extra, const kiln_taint *taint)
{
    for (size_t i = 0; v && i < n; i++)
        if (kiln_toleration_tolerates(&v[i], taint)) return true;
    for (size_t i = 0; extra && i < n_extra; i++)
        if (kiln_toleration_tolerates(&extra[i], taint)) return true;
    return false;
}

/* The first of v, then extra, that tolerates taint (NULL: none), as
 * k8s.io/component-helpers' GetMatchingTolerations picks it. */
static const kiln_toleration *first_match(const kiln_toleration *v, size_t n,
                                          const kiln_toleration *extra, size_t n_extra,
                                          const kiln_taint *taint)
{
    for (size_t i = 0; v && i < n; i++)
        if (kiln_toleration_tolerates(&v[i], taint)) return &v[i];
    for (size_t i = 0; extra && i < n_extra; i++)
        if (kiln_toleration_tolerates(&extra[i], taint)) return &extra[i];
    return NULL;
}

int64_t kiln_noexecute_stay(const kiln_toleration *v, size_t n, const kiln_toleration *extra,
                            size_t n_extra, const kiln_taint *t, size_t nt,
                            const kiln_taint **which)
{
    int64_t stay = -1; /* the taint manager's getMinTolerationTime */
    for (size_t i = 0; t && i < nt; i++) {
        if (!same(t[i].effect, "NoExecute")) continue;
        const kiln_toleration *m = first_match(v, n, extra, n_extra, &t[i]);
        if (!m || (m->has_toleration_seconds && m->toleration_seconds <= 0)) {
            if (which) *which = &t[i];
            return 0;
        }
        if (m->has_toleration_seconds && (stay < 0 || m->toleration_seconds < stay)) {
            stay = m->toleration_seconds;
            if (which) *which = &t[i];
        }
    }
    return stay;
}

bool kiln_taint_effect_valid(const char *effect)
{
    return effect && (strcmp(effect, "NoSchedule") == 0 ||
                      strcmp(effect, "PreferNoSchedule") == 0 || strcmp(effect, "NoExecute") == 0);
}

bool kiln_toleration_check(const kiln_toleration *t, char *why, size_t len)
{
    bool exists = t->op && strcmp(t->op, "Exists") == 0;
    if (set(t->op) && !exists && strcmp(t->op, "Equal") != 0) {
        snprintf(why, len, "operator: '%.64s' is not Equal or Exists", t->op);
        return false;
    }
    if (!set(t->key) && !exists) {
        snprintf(why, len,
                 "operator: must be Exists when key is empty (which means: match all keys and "
                 "values)");
        return false;
    }
    if (exists && set(t->value)) {
        snprintf(why, len, "value: must be empty when operator is Exists");
        return false;
    }
    if (set(t->effect) && !kiln_taint_effect_valid(t->effect)) {
        snprintf(why, len, "effect: '%.64s' is not NoSchedule, PreferNoSchedule or NoExecute",
                 t->effect);
        return false;
    }
    if (t->has_toleration_seconds && !same(t->effect, "NoExecute")) {
        snprintf(why, len, "effect: must be NoExecute when tolerationSeconds is set");
        return false;
    }
    return true;
}

const char *kiln_taint_str(const kiln_taint *t, char *buf, size_t len)
{
    if (set(t->value))
        snprintf(buf, len, "%s=%s:%s", t->key ? t->key : "", t->value, t->effect ? t->effect : "");
    else
        snprintf(buf, len, "%s:%s", t->key ? t->key : "", t->effect ? t->effect : "");
    return buf;
}

void kiln_taint_clear(kiln_taint *t)
{
    free(t->key);
    free(t->value);
    free(t->effect);
    memset(t, 0, sizeof *t);
}

void kiln_toleration_clear(kiln_toleration *t)
{
    free(t->key);
    free(t->op);
    free(t->value);
    free(t->effect);
    memset(t, 0, sizeof *t);
}
