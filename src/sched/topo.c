/* src/sched/topo.c - Kueue's topology-aware choice of nodes (topo.h).
 *
 * The nodes in the topology are sorted by their label values at every
 * level, coarse to fine, then by name: each domain of each level is then a
 * contiguous run of that order, and a domain's children are the runs of
 * the next level inside it. Level n_levels is the nodes themselves. */
#include "topo.h"

#include <stdlib.h>
#include <string.h>

typedef struct dom {
    size_t lo, hi; /* [lo, hi) of the sorted order */
    int cap;       /* replicas its nodes could take */
    int take;      /* replicas chosen for it */
} dom;

typedef struct topo {
    const kiln__topo_in *in;
    size_t *order; /* node indices in the topology, sorted */
    size_t n;
} topo;

static const char *value(const topo *t, size_t node, size_t level)
{
    const char *v = kiln_map_get(&t->in->c->nodes[node].labels, t->in->levels[level]);
    return v ? v : "";
}

static int by_labels(const void *a, const void *b, void *ctx)
{
    const topo *t = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    for (size_t l = 0; l < t->in->n_levels; l++) {
        int c = strcmp(value(t, x, l), value(t, y, l));
        if (c) return c;
    }
    int c = strcmp(t->in->c->nodes[x].name, t->in->c->nodes[y].name);
    return c ? c : (x > y) - (x < y);
}

/* Whether sorted positions i and j share their domain of `level`. */
static bool same(const topo *t, size_t i, size_t j, size_t level)
{
    if (level >= t->in->n_levels) return i == j;
    for (size_t l = 0; l <= level; l++)
        if (strcmp(value(t, t->order[i], l), value(t, t->order[j], l)) != 0) return false;
    return true;
}

/* The domains of `level` inside [lo, hi), appended to *v. */
static bool domains(const topo *t, size_t level, size_t lo, size_t hi, dom **v, size_t *n,
                    size_t *cap)
{
    for (size_t i = lo; i < hi;) {
        size_t j = i + 1;
        while (j < hi && same(t, i, j, level))
            j++;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            dom *nv = realloc(*v, nc * sizeof *nv);
            if (!nv) return false;
            *v = nv, *cap = nc;
        }
        dom d = {i, j, 0, 0};
        for (size_t k = i; k < j; k++)
            d.cap += t->in->cap[t->order[k]];
        (*v)[(*n)++] = d;
        i = j;
    }
    return true;
}

/* Kueue's order: the most room first; among equals the first in label order. */
static int by_room(const void *a, const void *b)
{
    const dom *x = a, *y = b;
    if (x->cap != y->cap) return y->cap - x->cap;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Of v[from..n) (sorted by room), the first with the least room that holds
 * `need`; `from` when none does. */
static size_t best_fit(const dom *v, size_t from, size_t n, int need)
{
    size_t best = from;
    int best_cap = -1;
    for (size_t i = from; i < n; i++)
        if (v[i].cap >= need && (best_cap < 0 || v[i].cap < best_cap))
            best = i, best_cap = v[i].cap;
    return best;
}

/* Takes from the sorted v[0..n) the fullest first, the last a best fit,
 * until `want` is covered: the chosen ones move to v[0..*k) with their take.
 * False when all of them hold less. */
static bool fewest(dom *v, size_t n, int want, size_t *k)
{
    int left = want;
    size_t m = 0;
    for (size_t i = 0; i < n && left > 0; i++) {
        if (v[i].cap <= 0) break;
        if (v[i].cap >= left) {
            size_t b = best_fit(v, i, n, left);
            dom d = v[b];
            v[b] = v[i];
            d.take = left;
            v[m++] = d;
            left = 0;
            break;
        }
        v[i].take = v[i].cap;
        left -= v[i].cap;
        v[m++] = v[i];
    }
    *k = m;
    return left == 0;
}

bool kiln__topo_assign(const kiln__topo_in *in, int *take, int *most)
{
    topo t = {in, NULL, 0};
    dom *v = NULL, *next = NULL;
    size_t n = 0, cap = 0, nn = 0, ncap = 0, k = 0;
    bool ok = false;

    *most = -1;
    memset(take, 0, in->c->n * sizeof *take);
    if (!(t.order = malloc((in->c->n ? in->c->n : 1) * sizeof *t.order))) goto out;
    for (size_t i = 0; i < in->c->n; i++)
        if (in->cap[i] >= 0) t.order[t.n++] = i;
    qsort_r(t.order, t.n, sizeof *t.order, by_labels, &t);

    /* the level the group goes into, and its domains there */
    size_t level = in->mode == KILN__TOPO_UNCONSTRAINED ? in->n_levels - 1 : in->level;
    int total = 0;
    for (size_t i = 0; i < t.n; i++)
        total += in->cap[t.order[i]];
    for (;;) {
        n = 0;
        if (!domains(&t, level, 0, t.n, &v, &n, &cap)) goto out;
        qsort(v, n, sizeof *v, by_room);
        if (n && v[0].cap >= in->want && in->mode != KILN__TOPO_UNCONSTRAINED) {
            size_t b = best_fit(v, 0, n, in->want);
            v[0] = v[b];
            v[0].take = in->want;
            k = 1;
            break;
        }
        if (in->mode == KILN__TOPO_REQUIRED) {
            *most = n ? v[0].cap : 0;
            goto out;
        }
        if (in->mode == KILN__TOPO_PREFERRED && level > 0) {
            level--;
            continue;
        }
        /* above the top (preferred), or unconstrained: the fewest domains */
        if (!fewest(v, n, in->want, &k)) {
            *most = total;
            goto out;
        }
        break;
    }
    /* down to the nodes: the chosen domains' children, fullest first */
    while (level < in->n_levels) {
        int want = 0;
        nn = 0;
        for (size_t i = 0; i < k; i++) {
            want += v[i].take;
            if (!domains(&t, level + 1, v[i].lo, v[i].hi, &next, &nn, &ncap)) goto out;
        }
        qsort(next, nn, sizeof *next, by_room);
        if (!fewest(next, nn, want, &k)) { /* the children hold what their parents did */
            *most = total;
            goto out;
        }
        dom *sw = v;
        size_t sc = cap;
        v = next, cap = ncap;
        next = sw, ncap = sc;
        level++;
    }
    for (size_t i = 0; i < k; i++)
        take[t.order[v[i].lo]] = v[i].take;
    ok = true;
out:
    free(t.order);
    free(v);
    free(next);
    return ok;
}
