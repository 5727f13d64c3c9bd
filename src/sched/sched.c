/* src/sched/sched.c - gang placement with exclusive devices (kiln/sched.h).
 *
 * Replicas are placed biggest accelerator demand first, each on the node
 * that fits it with the fewest matching devices to spare (best fit keeps
 * big nodes whole for big replicas). Placement is tried on a scratch copy of
 * the usage and committed only when every replica found a home: all or none.
 * Whether a job could ever fit is the same search on an empty cluster with
 * every node available. */
#include "kiln/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct usage {
    bool *busy; /* per device */
    int cpus;   /* used */
    double mem; /* used */
    bool cordoned;
} usage;

struct kiln_sched {
    const kiln_cluster *c;
    usage *u;
};

kiln_sched *kiln_sched_new(const kiln_cluster *c)
{
    kiln_sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->c = c;
    s->u = calloc(c->n ? c->n : 1, sizeof *s->u);
    if (!s->u) goto fail;
    for (size_t i = 0; i < c->n; i++) {
        s->u[i].busy = calloc(c->nodes[i].n_devs ? c->nodes[i].n_devs : 1, sizeof(bool));
        if (!s->u[i].busy) goto fail;
    }
    return s;
fail:
    kiln_sched_free(s);
    return NULL;
}

void kiln_sched_free(kiln_sched *s)
{
    if (!s) return;
    for (size_t i = 0; s->u && i < s->c->n; i++)
        free(s->u[i].busy);
    free(s->u);
    free(s);
}

void kiln_sched_set_cordon(kiln_sched *s, size_t node, bool cordoned)
{
    if (node < s->c->n) s->u[node].cordoned = cordoned;
}

bool kiln_sched_cordoned(const kiln_sched *s, size_t node)
{
    return node < s->c->n && s->u[node].cordoned;
}

size_t kiln_sched_free_devices(const kiln_sched *s, size_t node)
{
    size_t k = 0;
    for (size_t j = 0; j < s->c->nodes[node].n_devs; j++)
        k += !s->u[node].busy[j];
    return k;
}

bool kiln_sched_device_busy(const kiln_sched *s, size_t node, size_t dev)
{
    return s->u[node].busy[dev];
}

void kiln_sched_usage(const kiln_sched *s, size_t node, int *vcpus, double *memory_gb)
{
    *vcpus = s->u[node].cpus;
    *memory_gb = s->u[node].mem;
}

void kiln_placement_free(kiln_placement *p)
{
    if (!p) return;
    free(p->slots);
    p->slots = NULL;
    p->n = 0;
}

static size_t free_of_type(const kiln_node *n, const bool *busy, const char *type)
{
    size_t k = 0;
    for (size_t j = 0; j < n->n_devs; j++)
        k += !busy[j] && strcmp(n->devs[j].type, type) == 0;
    return k;
}

/* Scratch state for one attempt: a copy of every node's usage. */
typedef struct scratch {
    bool **busy;
    int *cpus;
    double *mem;
} scratch;

static void scratch_free(scratch *w, size_t n)
{
    for (size_t i = 0; w->busy && i < n; i++)
        free(w->busy[i]);
    free(w->busy);
    free(w->cpus);
    free(w->mem);
}

/* `empty`: ignore current usage and cordons (the never-fits question). */
static kiln_err scratch_init(scratch *w, const kiln_sched *s, bool empty)
{
    size_t n = s->c->n;
    memset(w, 0, sizeof *w);
    w->busy = calloc(n, sizeof *w->busy);
    w->cpus = calloc(n, sizeof *w->cpus);
    w->mem = calloc(n, sizeof *w->mem);
    if (!w->busy || !w->cpus || !w->mem) return KILN_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t nd = s->c->nodes[i].n_devs;
        w->busy[i] = calloc(nd ? nd : 1, sizeof(bool));
        if (!w->busy[i]) return KILN_ENOMEM;
        if (!empty) {
            memcpy(w->busy[i], s->u[i].busy, nd * sizeof(bool));
            w->cpus[i] = s->u[i].cpus;
            w->mem[i] = s->u[i].mem;
        }
    }
    return KILN_OK;
}

static int by_demand(const void *a, const void *b)
{
    const kiln_slot *x = a, *y = b;
    if (x->n_devs != y->n_devs) return y->n_devs - x->n_devs;
    if (x->role != y->role) return (int)x->role - (int)y->role;
    return x->index - y->index;
}

static int by_order(const void *a, const void *b)
{
    const kiln_slot *x = a, *y = b;
    if (x->role != y->role) return (int)x->role - (int)y->role;
    return x->index - y->index;
}

/* Tries to place every slot (n_devs = wanted count, devs filled here). */
static bool selects(const kiln_map *sel, const kiln_node *nd)
{
    for (size_t i = 0; sel && i < sel->n; i++) {
        const char *have = kiln_map_get(&nd->labels, sel->keys[i]);
        if (!have || strcmp(have, sel->vals[i]) != 0) return false;
    }
    return true;
}

static bool try_place(const kiln_sched *s, scratch *w, bool ignore_cordon, kiln_slot *slots,
                      const char **types, const kiln_map *const *sels, size_t n, size_t *failed)
{
    for (size_t k = 0; k < n; k++) {
        kiln_slot *sl = &slots[k];
        const char *type = types[k];
        long best = -1;
        size_t best_spare = SIZE_MAX;
        for (size_t i = 0; i < s->c->n; i++) {
            const kiln_node *nd = &s->c->nodes[i];
            if (!ignore_cordon && s->u[i].cordoned) continue;
            if (!selects(sels[sl->role], nd)) continue;
            if (nd->hard_resources && (w->cpus[i] + sl->vcpus > nd->cpus ||
                                       w->mem[i] + sl->memory_gb > nd->memory_gb + 1e-9))
                continue;
            size_t avail = sl->n_devs ? free_of_type(nd, w->busy[i], type) : 0;
            if (avail < (size_t)sl->n_devs) continue;
            size_t spare = avail - (size_t)sl->n_devs;
            if (spare < best_spare) best = (long)i, best_spare = spare;
        }
        if (best < 0) {
            *failed = k;
            return false;
        }
        const kiln_node *nd = &s->c->nodes[best];
        sl->node = (size_t)best;
        int got = 0;
        for (size_t j = 0; j < nd->n_devs && got < sl->n_devs; j++)
            if (!w->busy[best][j] && strcmp(nd->devs[j].type, type) == 0) {
                w->busy[best][j] = true;
                sl->devs[got++] = (int)j;
            }
        w->cpus[best] += sl->vcpus;
        w->mem[best] += sl->memory_gb;
    }
    return true;
}

/* Why a replica can never be placed, in words naming what is missing. */
static void explain(const kiln_sched *s, const kiln_slot *sl, const char *type, size_t total_want,
                    char *why, size_t len)
{
    size_t most = 0, all = 0;
    const char *most_node = NULL;
    for (size_t i = 0; i < s->c->n; i++) {
        size_t k = 0;
        for (size_t j = 0; j < s->c->nodes[i].n_devs; j++)
            k += strcmp(s->c->nodes[i].devs[j].type, type ? type : "") == 0;
        all += k;
        if (k > most) most = k, most_node = s->c->nodes[i].name;
    }
    const char *role = kiln_role_name(sl->role);
    if (sl->n_devs > 0 && all == 0)
        snprintf(why, len, "no node of this cluster has %s accelerators (the %s replica needs %d)",
                 type, role, sl->n_devs);
    else if (sl->n_devs > 0 && most < (size_t)sl->n_devs)
        snprintf(why, len,
                 "the %s replica needs %d x %s on one node; the most any node has is %zu (%s)",
                 role, sl->n_devs, type, most, most_node);
    else if (sl->n_devs > 0 && all < total_want)
        snprintf(why, len, "the job needs %zu x %s in all; the cluster has %zu", total_want, type,
                 all);
    else if (sl->n_devs > 0)
        snprintf(why, len,
                 "the %s replica's %d x %s do not fit beside the job's other replicas: the "
                 "cluster has %zu in all, at most %zu on one node",
                 role, sl->n_devs, type, all, most);
    else
        snprintf(why, len,
                 "no node has room for the %s replica (%d vCPUs, %.1f GB) and the job's other "
                 "replicas: the nodes' CPUs and memory are hard limits",
                 role, sl->vcpus, sl->memory_gb);
}

kiln_err kiln_sched_place(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                          kiln_placement *out, char *why, size_t whylen)
{
    const kiln_map *none[KILN_ROLE_COUNT] = {0};
    return kiln_sched_place_sel(s, plans, n_plans, none, out, why, whylen);
}

kiln_err kiln_sched_place_sel(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                              const kiln_map *const selectors[KILN_ROLE_COUNT], kiln_placement *out,
                              char *why, size_t whylen)
{
    kiln_slot *slots = NULL;
    const char **types = NULL;
    scratch w = {0};
    size_t n = 0, failed = 0;
    kiln_err err = KILN_ELIMIT;

    memset(out, 0, sizeof *out);
    if (whylen) why[0] = '\0';
    for (size_t p = 0; p < n_plans; p++) {
        if (plans[p].count < 0 || plans[p].count > KILN_MAX_REPLICAS ||
            plans[p].accelerators_per_replica > KILN_MAX_REPLICA_DEVICES) {
            snprintf(why, whylen,
                     "the %s role asks for more than kiln supports (%d replicas, %d "
                     "accelerators each)",
                     kiln_role_name(plans[p].role), KILN_MAX_REPLICAS, KILN_MAX_REPLICA_DEVICES);
            goto out;
        }
        n += (size_t)plans[p].count;
    }
    if (n > KILN_MAX_REPLICAS) {
        snprintf(why, whylen, "the job has %zu replicas; kiln supports %d", n, KILN_MAX_REPLICAS);
        goto out;
    }
    err = KILN_ENOMEM;
    slots = calloc(n ? n : 1, sizeof *slots);
    types = calloc(n ? n : 1, sizeof *types);
    if (!slots || !types) goto out;
    size_t k = 0;
    for (size_t p = 0; p < n_plans; p++)
        for (int64_t i = 0; i < plans[p].count; i++) {
            slots[k].role = plans[p].role;
            slots[k].index = (int)i;
            slots[k].n_devs =
                plans[p].accelerator_type ? (int)plans[p].accelerators_per_replica : 0;
            slots[k].vcpus = plans[p].vcpus;
            slots[k].memory_gb = plans[p].memory_gb;
            k++;
        }
    qsort(slots, n, sizeof *slots, by_demand);
    /* types follow the sorted slots */
    for (size_t i = 0; i < n; i++)
        for (size_t p = 0; p < n_plans; p++)
            if (plans[p].role == slots[i].role) types[i] = plans[p].accelerator_type;

    /* First: could it ever fit? */
    if (scratch_init(&w, s, true) != KILN_OK) goto out;
    for (size_t i = 0; i < n; i++) {
        const kiln_map *sel = selectors[slots[i].role];
        bool any = false;
        for (size_t nd = 0; nd < s->c->n && !any; nd++)
            any = selects(sel, &s->c->nodes[nd]);
        if (!any) {
            snprintf(why, whylen,
                     "no node has the labels the %s replica's nodeSelector asks for "
                     "(%s=%s%s)",
                     kiln_role_name(slots[i].role), sel->keys[0], sel->vals[0],
                     sel->n > 1 ? ", ..." : "");
            err = KILN_EINVAL;
            goto out;
        }
    }
    if (!try_place(s, &w, true, slots, types, selectors, n, &failed)) {
        size_t want = 0;
        for (size_t i = 0; i < n; i++)
            if (types[i] && types[failed] && strcmp(types[i], types[failed]) == 0)
                want += (size_t)slots[i].n_devs;
        explain(s, &slots[failed], types[failed], want, why, whylen);
        err = KILN_EINVAL;
        goto out;
    }
    scratch_free(&w, s->c->n);
    if (scratch_init(&w, s, false) != KILN_OK) goto out;
    if (!try_place(s, &w, false, slots, types, selectors, n, &failed)) {
        snprintf(why, whylen, "waiting for %s: the %s replica needs %d x %s",
                 slots[failed].n_devs ? "free accelerators" : "a node",
                 kiln_role_name(slots[failed].role), slots[failed].n_devs,
                 types[failed] ? types[failed] : "(none)");
        err = KILN_ECONFLICT;
        goto out;
    }
    /* commit */
    for (size_t i = 0; i < n; i++) {
        usage *u = &s->u[slots[i].node];
        for (int j = 0; j < slots[i].n_devs; j++)
            u->busy[slots[i].devs[j]] = true;
        u->cpus += slots[i].vcpus;
        u->mem += slots[i].memory_gb;
    }
    qsort(slots, n, sizeof *slots, by_order);
    out->slots = slots;
    out->n = n;
    slots = NULL;
    err = KILN_OK;
out:
    scratch_free(&w, s->c->n);
    free(slots);
    free(types);
    return err;
}

void kiln_sched_claim(kiln_sched *s, const kiln_placement *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const kiln_slot *sl = &p->slots[i];
        if (sl->node >= s->c->n) continue;
        usage *u = &s->u[sl->node];
        for (int j = 0; j < sl->n_devs; j++)
            if (sl->devs[j] >= 0 && (size_t)sl->devs[j] < s->c->nodes[sl->node].n_devs)
                u->busy[sl->devs[j]] = true;
        u->cpus += sl->vcpus;
        u->mem += sl->memory_gb;
    }
}

void kiln_sched_release(kiln_sched *s, const kiln_placement *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const kiln_slot *sl = &p->slots[i];
        if (sl->node >= s->c->n) continue;
        usage *u = &s->u[sl->node];
        for (int j = 0; j < sl->n_devs; j++)
            u->busy[sl->devs[j]] = false;
        u->cpus -= sl->vcpus;
        u->mem -= sl->memory_gb;
    }
}
