/* src/sched/sched.c - gang placement with exclusive devices (kiln/sched.h).
 *
 * Replicas are placed biggest accelerator demand first, each on the node
 * that fits it with the fewest matching devices to spare, the lowest node
 * index among equals (best fit keeps big nodes whole for big replicas).
 * Placement reserves as it goes and undoes everything when a replica finds
 * no home: all or none. Whether a job could ever fit is the same search on
 * an empty cluster with every node available.
 *
 * A scheduling pass asks this for every queued job (10,000 on 1,000 nodes
 * must take milliseconds), so the search never walks the nodes' devices:
 * every node keeps a free count per accelerator type, and for each type and
 * free count a bitset says which nodes have exactly that many free. The best
 * fit for k devices is the lowest set bit of the first non-empty bitset from
 * k up that passes the node's other tests (cordon, selector, CPUs, memory);
 * a job that cannot fit now is usually answered by empty bitsets alone. The
 * never-fits search (rare: only after a job did not fit now) is cached per
 * job shape, since the cluster's nodes do not change. */
#include "kiln/sched.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/gpu_pick.h"
#include "sched/topo.h"

typedef struct usage {
    bool *busy;   /* per device: held by a replica */
    bool *failed; /* per device: out of service (kiln_sched_set_device_failed) */
    int cpus;     /* used */
    double mem;   /* used */
    bool cordoned;
} usage;

#define VERDICTS 256 /* never-fits cache entries (direct-mapped) */

typedef struct verdict {
    unsigned char *shape; /* the job's shape (shape_of), NULL = empty */
    size_t len;
    kiln_err err;
    char why[256];
} verdict;

struct kiln_sched {
    const kiln_cluster *c;
    usage *u;
    /* the index: accelerator types, free counts, who-has-how-many bitsets */
    size_t n_types;
    const char **types; /* the cluster's names, by type id */
    int **dev_type;     /* [node][dev]: type id */
    int *free_n;        /* [node * n_types + t]: free devices of type t */
    int max_free;       /* most devices of one type on one node */
    size_t words;       /* 64-bit words per bitset */
    uint64_t *has;      /* [(t * (max_free + 1) + count) * words]: nodes with count free */
    verdict verdicts[VERDICTS];
    /* while a topology group is placed: how many more of its replicas each
     * node may take (topo.h's choice); NULL otherwise */
    int *budget;
};

static uint64_t *bits(const kiln_sched *s, size_t t, int count)
{
    return s->has + (t * (size_t)(s->max_free + 1) + (size_t)count) * s->words;
}

#define ANY_TYPE (-2) /* the type id of KILN_ACCEL_ANY_GPU: any one model */

static int type_id(const kiln_sched *s, const char *name)
{
    if (name && strcmp(name, KILN_ACCEL_ANY_GPU) == 0) return ANY_TYPE;
    for (size_t t = 0; name && t < s->n_types; t++)
        if (strcmp(s->types[t], name) == 0) return (int)t;
    return -1;
}

/* The cluster's name for a type a job asks for: a MIG instance may be asked
 * for by the NVIDIA device plugin's resource (nvidia.com/mig-1g.10gb) as
 * well as by kiln's type (NVIDIA_MIG_1G_10GB; kiln_devices_canonical_type).
 * Any other name is the job's own. */
static const char *known_type(const kiln_sched *s, const char *name)
{
    char buf[96];
    const char *canon = kiln_devices_canonical_type(name, buf, sizeof buf);
    for (size_t t = 0; canon && t < s->n_types; t++)
        if (strcmp(s->types[t], canon) == 0) return s->types[t];
    return name;
}

/* A MIG instance's type (kiln_devices_mig_type): never what a count
 * without a model (nvidia.com/gpu) means, which is whole GPUs, as under the
 * device plugin's mixed strategy. */
static bool is_mig_type(const char *type)
{
    /* nor an MPS share (kiln_devices_is_share_type): a fraction of a GPU */
    return strncmp(type, "NVIDIA_MIG_", 11) == 0 || kiln_devices_is_share_type(type);
}

/* A device may be handed out: nobody holds it, it is in service, and it
 * was not refused at discovery (MIG). */
static bool is_free(const kiln_sched *s, size_t node, size_t j)
{
    return !s->u[node].busy[j] && !s->u[node].failed[j] && !s->c->nodes[node].devs[j].refused;
}

/* Device j of `node` is taken or given back, fails or returns: when that
 * changes whether it is free, the counts and bitsets follow. */
static void set_state(kiln_sched *s, size_t node, size_t j, bool busy, bool failed)
{
    bool was = is_free(s, node, j);
    s->u[node].busy[j] = busy;
    s->u[node].failed[j] = failed;
    bool now = is_free(s, node, j);
    if (was == now) return;
    size_t t = (size_t)s->dev_type[node][j];
    int *f = &s->free_n[node * s->n_types + t];
    uint64_t bit = 1ull << (node % 64);
    bits(s, t, *f)[node / 64] &= ~bit;
    *f += now ? 1 : -1;
    bits(s, t, *f)[node / 64] |= bit;
}

static void set_busy(kiln_sched *s, size_t node, size_t j, bool busy)
{
    set_state(s, node, j, busy, s->u[node].failed[j]);
}

/* Builds the type table and the index over an idle cluster. */
static bool index_init(kiln_sched *s)
{
    const kiln_cluster *c = s->c;
    size_t all = 0;
    for (size_t i = 0; i < c->n; i++)
        all += c->nodes[i].n_devs;
    s->types = calloc(all ? all : 1, sizeof *s->types);
    s->dev_type = calloc(c->n ? c->n : 1, sizeof *s->dev_type);
    if (!s->types || !s->dev_type) return false;
    for (size_t i = 0; i < c->n; i++) {
        s->dev_type[i] = calloc(c->nodes[i].n_devs ? c->nodes[i].n_devs : 1, sizeof(int));
        if (!s->dev_type[i]) return false;
        for (size_t j = 0; j < c->nodes[i].n_devs; j++) {
            int t = type_id(s, c->nodes[i].devs[j].type);
            if (t < 0) {
                t = (int)s->n_types++;
                s->types[t] = c->nodes[i].devs[j].type;
            }
            s->dev_type[i][j] = t;
        }
    }
    s->free_n = calloc(c->n * s->n_types + 1, sizeof *s->free_n);
    if (!s->free_n) return false;
    for (size_t i = 0; i < c->n; i++)
        for (size_t j = 0; j < c->nodes[i].n_devs; j++) {
            if (c->nodes[i].devs[j].refused) continue; /* never free */
            int *f = &s->free_n[i * s->n_types + (size_t)s->dev_type[i][j]];
            if (++*f > s->max_free) s->max_free = *f;
        }
    s->words = (c->n + 63) / 64;
    s->has = calloc(s->n_types * (size_t)(s->max_free + 1) * s->words + 1, sizeof *s->has);
    if (!s->has) return false;
    for (size_t i = 0; i < c->n; i++)
        for (size_t t = 0; t < s->n_types; t++)
            bits(s, t, s->free_n[i * s->n_types + t])[i / 64] |= 1ull << (i % 64);
    return true;
}

kiln_sched *kiln_sched_new(const kiln_cluster *c)
{
    kiln_sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->c = c;
    s->u = calloc(c->n ? c->n : 1, sizeof *s->u);
    if (!s->u) goto fail;
    for (size_t i = 0; i < c->n; i++) {
        s->u[i].busy = calloc(c->nodes[i].n_devs ? c->nodes[i].n_devs : 1, sizeof(bool));
        s->u[i].failed = calloc(c->nodes[i].n_devs ? c->nodes[i].n_devs : 1, sizeof(bool));
        if (!s->u[i].busy || !s->u[i].failed) goto fail;
    }
    if (!index_init(s)) goto fail;
    return s;
fail:
    kiln_sched_free(s);
    return NULL;
}

void kiln_sched_free(kiln_sched *s)
{
    if (!s) return;
    for (size_t i = 0; s->u && i < s->c->n; i++) {
        free(s->u[i].busy);
        free(s->u[i].failed);
    }
    for (size_t i = 0; s->dev_type && i < s->c->n; i++)
        free(s->dev_type[i]);
    for (size_t i = 0; i < VERDICTS; i++)
        free(s->verdicts[i].shape);
    free(s->u);
    free(s->types);
    free(s->dev_type);
    free(s->free_n);
    free(s->has);
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
    for (size_t t = 0; t < s->n_types; t++)
        k += (size_t)s->free_n[node * s->n_types + t];
    return k;
}

bool kiln_sched_device_busy(const kiln_sched *s, size_t node, size_t dev)
{
    return s->u[node].busy[dev];
}

void kiln_sched_set_device_failed(kiln_sched *s, size_t node, size_t dev, bool failed)
{
    if (node >= s->c->n || dev >= s->c->nodes[node].n_devs) return;
    if (s->u[node].failed[dev] != failed) set_state(s, node, dev, s->u[node].busy[dev], failed);
    /* a device back in service may make a job fit that could not before;
     * the never-fits answers do not change (they count failed devices) */
}

bool kiln_sched_device_failed(const kiln_sched *s, size_t node, size_t dev)
{
    return node < s->c->n && dev < s->c->nodes[node].n_devs && s->u[node].failed[dev];
}

bool kiln_sched_device_free(const kiln_sched *s, size_t node, size_t dev)
{
    return node < s->c->n && dev < s->c->nodes[node].n_devs && is_free(s, node, dev);
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

static bool is_any(const char *type)
{
    return type && strcmp(type, KILN_ACCEL_ANY_GPU) == 0;
}

/* For a replica wanting `want` devices of `type` (or, KILN_ACCEL_ANY_GPU,
 * of any one model) on node n: the type that leaves the fewest to spare,
 * and how many of it are free; NULL when none has enough. */
static const char *fit_type(const kiln_node *n, const bool *busy, const char *type, size_t want,
                            size_t *avail)
{
    if (!is_any(type)) {
        *avail = free_of_type(n, busy, type);
        return *avail >= want ? type : NULL;
    }
    const char *best = NULL;
    for (size_t j = 0; j < n->n_devs; j++) {
        bool seen = is_mig_type(n->devs[j].type);
        for (size_t p = 0; p < j; p++)
            seen |= strcmp(n->devs[p].type, n->devs[j].type) == 0;
        size_t k = seen ? 0 : free_of_type(n, busy, n->devs[j].type);
        if (k >= want && (!best || k < *avail)) best = n->devs[j].type, *avail = k;
    }
    return best;
}

/* Scratch usage for the never-fits search: an idle cluster. */
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

static kiln_err scratch_init(scratch *w, const kiln_sched *s)
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
        /* a refused device (MIG) never frees up; a failed one may come back */
        for (size_t j = 0; j < nd; j++)
            w->busy[i][j] = s->c->nodes[i].devs[j].refused != NULL;
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

static bool selects(const kiln_map *sel, const kiln_node *nd)
{
    for (size_t i = 0; sel && i < sel->n; i++) {
        const char *have = kiln_map_get(&nd->labels, sel->keys[i]);
        if (!have || strcmp(have, sel->vals[i]) != 0) return false;
    }
    return true;
}

void kiln_sched_rules_of(const kiln_job *job, kiln_sched_rules *out)
{
    memset(out, 0, sizeof *out);
    for (int r = 0; job && r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        if (!rc) continue;
        out->selector[r] = rc->node_selector.n ? &rc->node_selector : NULL;
        out->tolerations[r] = rc->tolerations;
        out->n_tolerations[r] = rc->n_tolerations;
    }
    for (int r = 0; job && r < KILN_ROLE_COUNT; r++)
        out->has_topo[r] = kiln_job_topology(job, (kiln_role)r, &out->topo[r]);
}

int kiln_sched_taint_verdict(const kiln_sched_rules *ru, kiln_role r, const kiln_node *nd,
                             const kiln_taint **which)
{
    int v = 0;
    for (size_t i = 0; i < nd->n_taints; i++) {
        const kiln_taint *t = &nd->taints[i];
        if (ru && kiln_tolerations_tolerate(ru->tolerations[r], ru->n_tolerations[r], ru->extra,
                                            ru->n_extra, t))
            continue;
        if (strcmp(t->effect, "PreferNoSchedule") != 0) {
            if (which) *which = t;
            return 2;
        }
        v = 1;
    }
    return v;
}

/* Whether a replica of role r may use node nd: its selector, and its
 * taints; in pass 0 not a node it may use only last. */
static bool allowed(const kiln_sched_rules *ru, kiln_role r, const kiln_node *nd, int pass)
{
    if (!selects(ru ? ru->selector[r] : NULL, nd)) return false;
    int v = nd->n_taints ? kiln_sched_taint_verdict(ru, r, nd, NULL) : 0;
    return v == 0 || (v == 1 && pass > 0);
}

/* A replica held to container limits larger than the whole node: never
 * there, whether the node's resources are hard or not. */
static bool too_small(const kiln_node *nd, const kiln_slot *sl)
{
    return sl->limit_vcpus > nd->cpus || sl->limit_memory_gb > nd->memory_gb + 1e-9;
}

/* The never-fits search: places every slot on the scratch (idle) usage by
 * scanning every node, cordons ignored. The live search (best_node) must
 * choose as this one does; test_sched compares the two. */
static bool try_place(const kiln_sched *s, scratch *w, kiln_slot *slots, const char **types,
                      const kiln_sched_rules *ru, size_t n, size_t *failed)
{
    for (size_t k = 0; k < n; k++) {
        kiln_slot *sl = &slots[k];
        const char *type = types[k], *best_type = NULL;
        long best = -1;
        size_t best_spare = SIZE_MAX;
        /* pass 1: the nodes it may use only last (an untolerated PreferNoSchedule) */
        for (int pass = 0; pass < 2 && best < 0; pass++)
            for (size_t i = 0; i < s->c->n; i++) {
                const kiln_node *nd = &s->c->nodes[i];
                if (!allowed(ru, sl->role, nd, pass)) continue;
                if (nd->hard_resources && (w->cpus[i] + sl->vcpus > nd->cpus ||
                                           w->mem[i] + sl->memory_gb > nd->memory_gb + 1e-9))
                    continue;
                if (too_small(nd, sl)) continue;
                size_t avail = 0;
                const char *t =
                    sl->n_devs ? fit_type(nd, w->busy[i], type, (size_t)sl->n_devs, &avail) : type;
                if (sl->n_devs && !t) continue;
                size_t spare = avail - (size_t)sl->n_devs;
                if (spare < best_spare) best = (long)i, best_spare = spare, best_type = t;
            }
        if (best < 0) {
            *failed = k;
            return false;
        }
        const kiln_node *nd = &s->c->nodes[best];
        sl->node = (size_t)best;
        int got = 0;
        for (size_t j = 0; j < nd->n_devs && got < sl->n_devs; j++)
            if (!w->busy[best][j] && strcmp(nd->devs[j].type, best_type) == 0) {
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
    size_t most = 0, all = 0, refused = 0;
    const char *most_node = NULL, *refusal = NULL;
    for (size_t i = 0; i < s->c->n; i++) {
        size_t k = 0;
        for (size_t j = 0; j < s->c->nodes[i].n_devs; j++) {
            const kiln_device *dv = &s->c->nodes[i].devs[j];
            if (strcmp(dv->type, type ? type : "") != 0) continue;
            if (dv->refused) {
                refused++, refusal = dv->refused;
                continue;
            }
            k++;
        }
        all += k;
        if (k > most) most = k, most_node = s->c->nodes[i].name;
    }
    const char *role = kiln_role_name(sl->role);
    const kiln_node *big = NULL; /* the node with the most CPUs */
    bool room = false;
    for (size_t i = 0; i < s->c->n; i++) {
        if (!big || s->c->nodes[i].cpus > big->cpus) big = &s->c->nodes[i];
        room |= !too_small(&s->c->nodes[i], sl);
    }
    if (is_any(type) && room) {
        size_t most_one = 0; /* the most devices of one model on one node */
        const char *mn = NULL;
        for (size_t i = 0; i < s->c->n; i++) {
            const kiln_node *nd = &s->c->nodes[i];
            for (size_t j = 0; j < nd->n_devs; j++) {
                size_t k = 0;
                for (size_t q = 0; q < nd->n_devs && !is_mig_type(nd->devs[j].type); q++)
                    k += !nd->devs[q].refused && strcmp(nd->devs[q].type, nd->devs[j].type) == 0;
                if (k > most_one) most_one = k, mn = nd->name;
            }
        }
        if (most_one == 0)
            snprintf(why, len,
                     "the %s replica needs %d GPUs (nvidia.com/gpu) and no node of this cluster "
                     "has a GPU it may hand out",
                     role, sl->n_devs);
        else if (most_one < (size_t)sl->n_devs)
            snprintf(why, len,
                     "the %s replica needs %d GPUs of one model on one node (nvidia.com/gpu); the "
                     "most any node has is %zu (%s)",
                     role, sl->n_devs, most_one, mn);
        else
            snprintf(why, len,
                     "the %s replica's %d GPUs (nvidia.com/gpu) do not fit beside the job's other "
                     "replicas, or not on the nodes its selector allows",
                     role, sl->n_devs);
        return;
    }
    if (!room && big)
        snprintf(why, len,
                 "the %s replica's resources.limits (cpuLimit/memoryLimit) hold it to %d vCPUs "
                 "and %.1f GiB, more than any node has: the largest, %s, has %d vCPUs and %.1f "
                 "GiB",
                 role, sl->limit_vcpus, sl->limit_memory_gb, big->name, big->cpus, big->memory_gb);
    else if (sl->n_devs > 0 && all == 0 && refused)
        snprintf(why, len, "the %s replica needs %d x %s, and this cluster's %zu are refused: %s",
                 role, sl->n_devs, type, refused, refusal);
    else if (sl->n_devs > 0 && all == 0)
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
    return kiln_sched_place_rules(s, plans, n_plans, NULL, out, why, whylen);
}

/* Whether node i may take sl now, devices aside: cordon, CPUs, memory,
 * selector, taints (pass 0: not a node it may use only last). */
static bool node_ok(const kiln_sched *s, size_t i, const kiln_slot *sl, const kiln_sched_rules *ru,
                    int pass)
{
    const kiln_node *nd = &s->c->nodes[i];
    const usage *u = &s->u[i];
    if (u->cordoned) return false;
    if (s->budget && s->budget[i] <= 0) return false;
    if (nd->hard_resources &&
        (u->cpus + sl->vcpus > nd->cpus || u->mem + sl->memory_gb > nd->memory_gb + 1e-9))
        return false;
    if (too_small(nd, sl)) return false;
    return allowed(ru, sl->role, nd, pass);
}

/* The best node for sl now (fewest devices of its type to spare, then the
 * lowest index), or -1. */
static long best_node(const kiln_sched *s, const kiln_slot *sl, int t, const kiln_sched_rules *ru,
                      int pass)
{
    if (sl->n_devs == 0) {
        for (size_t i = 0; i < s->c->n; i++)
            if (node_ok(s, i, sl, ru, pass)) return (long)i;
        return -1;
    }
    if (t < 0) return -1;
    for (int count = sl->n_devs; count <= s->max_free; count++) {
        const uint64_t *b = bits(s, (size_t)t, count);
        for (size_t w = 0; w < s->words; w++)
            for (uint64_t m = b[w]; m; m &= m - 1) {
                size_t i = w * 64 + (size_t)__builtin_ctzll(m);
                if (node_ok(s, i, sl, ru, pass)) return (long)i;
            }
    }
    return -1;
}

/* best_node for any one model (KILN_ACCEL_ANY_GPU): the best node of each
 * type, then the one with the fewest to spare, the lower node, the type
 * seen first. *t gets the type chosen. */
static long best_node_any(const kiln_sched *s, const kiln_slot *sl, const kiln_sched_rules *ru,
                          int pass, int *t)
{
    long best = -1;
    int best_spare = 0;
    for (size_t ty = 0; ty < s->n_types; ty++) {
        if (is_mig_type(s->types[ty])) continue;
        long i = best_node(s, sl, (int)ty, ru, pass);
        if (i < 0) continue;
        int spare = s->free_n[(size_t)i * s->n_types + ty] - sl->n_devs;
        if (best < 0 || spare < best_spare || (spare == best_spare && i < best))
            best = i, best_spare = spare, *t = (int)ty;
    }
    return best;
}

/* Takes (or gives back) what slot sl holds on its node. */
static void hold(kiln_sched *s, const kiln_slot *sl, bool take)
{
    usage *u = &s->u[sl->node];
    for (int j = 0; j < sl->n_devs; j++)
        set_busy(s, sl->node, (size_t)sl->devs[j], take);
    u->cpus += take ? sl->vcpus : -sl->vcpus;
    u->mem += take ? sl->memory_gb : -sl->memory_gb;
}

/* Places every slot on the live usage, reserving as it goes; on a slot with
 * no home, gives back what the earlier ones took and says which failed. */
static bool place_live(kiln_sched *s, kiln_slot *slots, const int *tids, const kiln_sched_rules *ru,
                       size_t n, size_t *failed)
{
    for (size_t k = 0; k < n; k++) {
        kiln_slot *sl = &slots[k];
        int t = tids[k];
        long best = -1;
        for (int pass = 0; pass < 2 && best < 0; pass++)
            best = t == ANY_TYPE && sl->n_devs ? best_node_any(s, sl, ru, pass, &t)
                                               : best_node(s, sl, t, ru, pass);
        if (best < 0) {
            for (size_t i = 0; i < k; i++)
                hold(s, &slots[i], false);
            *failed = k;
            return false;
        }
        const kiln_node *nd = &s->c->nodes[best];
        sl->node = (size_t)best;
        if (s->budget) s->budget[best]--;
        /* of the free devices of its type (best_node saw enough), the
         * best-connected set (gpu_pick.c) */
        int cand[KILN_MAX_NODE_DEVICES];
        size_t m = 0;
        for (size_t j = 0; j < nd->n_devs && m < KILN_MAX_NODE_DEVICES; j++)
            if (is_free(s, (size_t)best, j) && s->dev_type[best][j] == t) cand[m++] = (int)j;
        if (sl->n_devs) kiln__sched_pick_gpus(nd, cand, m, sl->n_devs, sl->devs);
        hold(s, sl, true);
    }
    return true;
}

/* A growable byte string (the shape key). */
typedef struct bytes {
    unsigned char *b;
    size_t n, cap;
    bool oom;
} bytes;

static void put(bytes *k, const void *p, size_t n)
{
    if (k->oom) return;
    if (k->n + n > k->cap) {
        size_t nc = (k->n + n) * 2;
        unsigned char *nb = realloc(k->b, nc);
        if (!nb) {
            k->oom = true;
            return;
        }
        k->b = nb;
        k->cap = nc;
    }
    memcpy(k->b + k->n, p, n);
    k->n += n;
}

/* The job's shape: what the never-fits answer depends on (the slots in
 * placement order and the selectors), as bytes; k->oom when out of memory.
 * Binary, not text: it is built for every job that waits, every pass. */
static void put_str(bytes *k, const char *s)
{
    put(k, s ? s : "", strlen(s ? s : "") + 1);
}

static void put_tolerations(bytes *k, const kiln_toleration *v, size_t n)
{
    put(k, &n, sizeof n);
    for (size_t i = 0; v && i < n; i++) {
        put_str(k, v[i].key);
        put_str(k, v[i].op);
        put_str(k, v[i].value);
        put_str(k, v[i].effect);
    }
}

static void shape_of(bytes *k, const kiln_slot *slots, const char *const *types, size_t n,
                     const kiln_sched_rules *ru)
{
    static const kiln_map *const none[KILN_ROLE_COUNT] = {0};
    const kiln_map *const *sels = ru ? ru->selector : none;
    for (size_t i = 0; i < n; i++) {
        put(k, &slots[i].role, sizeof slots[i].role);
        put(k, &slots[i].n_devs, sizeof slots[i].n_devs);
        put(k, &slots[i].vcpus, sizeof slots[i].vcpus);
        put(k, &slots[i].memory_gb, sizeof slots[i].memory_gb);
        put(k, &slots[i].limit_vcpus, sizeof slots[i].limit_vcpus);
        put(k, &slots[i].limit_memory_gb, sizeof slots[i].limit_memory_gb);
        put(k, types[i] ? types[i] : "", strlen(types[i] ? types[i] : "") + 1);
    }
    for (int r = 0; r < KILN_ROLE_COUNT; r++)
        for (size_t i = 0; sels[r] && i < sels[r]->n; i++) {
            put(k, &r, sizeof r);
            put(k, sels[r]->keys[i], strlen(sels[r]->keys[i]) + 1);
            put(k, sels[r]->vals[i], strlen(sels[r]->vals[i]) + 1);
        }
    /* tolerations matter only where some node has a taint, but are cheap */
    for (int r = 0; ru && r < KILN_ROLE_COUNT; r++)
        put_tolerations(k, ru->tolerations[r], ru->n_tolerations[r]);
    if (ru) put_tolerations(k, ru->extra, ru->n_extra);
}

/* Whether only a taint keeps sl off every node that could hold it alone
 * (its devices, its limits): then `why` names the taint. */
static bool taint_keeps_out(const kiln_sched *s, const kiln_slot *sl, const char *type,
                            const kiln_sched_rules *ru, char *why, size_t whylen)
{
    const kiln_taint *taint = NULL;
    const char *tnode = NULL;
    for (size_t i = 0; i < s->c->n; i++) {
        const kiln_node *nd = &s->c->nodes[i];
        if (!selects(ru ? ru->selector[sl->role] : NULL, nd) || too_small(nd, sl)) continue;
        bool idle[KILN_MAX_NODE_DEVICES]; /* refused devices never free up */
        size_t avail = 0;
        if (nd->n_devs > KILN_MAX_NODE_DEVICES) continue;
        for (size_t j = 0; j < nd->n_devs; j++)
            idle[j] = nd->devs[j].refused != NULL;
        if (sl->n_devs && !fit_type(nd, idle, type, (size_t)sl->n_devs, &avail)) continue;
        const kiln_taint *t = NULL;
        if (kiln_sched_taint_verdict(ru, sl->role, nd, &t) < 2) return false;
        if (!taint) taint = t, tnode = nd->name;
    }
    if (!taint) return false;
    char ts[400];
    snprintf(why, whylen,
             "the nodes that could hold the %s replica have a taint it does not tolerate (node "
             "%s: %s): give its pod template a matching toleration",
             kiln_role_name(sl->role), tnode, kiln_taint_str(taint, ts, sizeof ts));
    return true;
}

/* Whether the job could ever fit (an empty cluster, cordons ignored):
 * KILN_OK, or KILN_EINVAL with `why`. */
static kiln_err ever_fits(const kiln_sched *s, kiln_slot *slots, const char **types, size_t n,
                          const kiln_sched_rules *ru, char *why, size_t whylen)
{
    scratch w = {0};
    size_t failed = 0;
    kiln_err err = KILN_EINVAL;

    for (size_t i = 0; i < n; i++) {
        const kiln_map *sel = ru ? ru->selector[slots[i].role] : NULL;
        bool any = false, untainted = false;
        const kiln_taint *taint = NULL;
        const char *tnode = NULL;
        for (size_t nd = 0; nd < s->c->n && !untainted; nd++) {
            const kiln_node *node = &s->c->nodes[nd];
            if (!selects(sel, node)) continue;
            any = true;
            const kiln_taint *t = NULL;
            untainted = kiln_sched_taint_verdict(ru, slots[i].role, node, &t) < 2;
            if (!untainted && !taint) taint = t, tnode = node->name;
        }
        if (any && !untainted) {
            char ts[400];
            snprintf(why, whylen,
                     "every node the %s replica may use has a taint it does not tolerate "
                     "(node %s: %s): give its pod template a matching toleration",
                     kiln_role_name(slots[i].role), tnode, kiln_taint_str(taint, ts, sizeof ts));
            goto out;
        }
        if (!any) {
            snprintf(why, whylen,
                     "no node has the labels the %s replica's nodeSelector asks for "
                     "(%s=%s%s)",
                     kiln_role_name(slots[i].role), sel->keys[0], sel->vals[0],
                     sel->n > 1 ? ", ..." : "");
            goto out;
        }
    }
    if (scratch_init(&w, s) != KILN_OK) {
        err = KILN_ENOMEM;
        goto out;
    }
    if (!try_place(s, &w, slots, types, ru, n, &failed)) {
        if (taint_keeps_out(s, &slots[failed], types[failed], ru, why, whylen)) goto out;
        size_t want = 0;
        for (size_t i = 0; i < n; i++)
            if (types[i] && types[failed] && strcmp(types[i], types[failed]) == 0)
                want += (size_t)slots[i].n_devs;
        explain(s, &slots[failed], types[failed], want, why, whylen);
        goto out;
    }
    err = KILN_OK;
out:
    scratch_free(&w, s->c->n);
    return err;
}

/* ever_fits through the cache: the answer depends only on the shape. */
static kiln_err ever_fits_cached(kiln_sched *s, kiln_slot *slots, const char **types, size_t n,
                                 const kiln_sched_rules *ru, char *why, size_t whylen)
{
    bytes k = {0};
    kiln_slot *copy = NULL;
    kiln_err err = KILN_ENOMEM;

    shape_of(&k, slots, types, n, ru);
    if (k.oom) goto out;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < k.n; i++)
        h = (h ^ k.b[i]) * 1099511628211ull;
    verdict *v = &s->verdicts[h % VERDICTS];
    if (v->shape && v->len == k.n && memcmp(v->shape, k.b, k.n) == 0) {
        snprintf(why, whylen, "%s", v->why);
        err = v->err;
        goto out;
    }
    if (!(copy = malloc((n ? n : 1) * sizeof *copy))) goto out;
    memcpy(copy, slots, n * sizeof *copy); /* the search writes nodes into its slots */
    err = ever_fits(s, copy, types, n, ru, why, whylen);
    if (err == KILN_ENOMEM) goto out;
    free(v->shape);
    v->shape = k.b;
    v->len = k.n;
    k.b = NULL;
    v->err = err;
    snprintf(v->why, sizeof v->why, "%s", whylen ? why : "");
out:
    free(k.b);
    free(copy);
    return err;
}

/* ---------- topology-aware placement (topo.h) ---------- */

/* The topology group of role r: the first role of its group, or -1 when it
 * asks for none (or no Topology is in force). */
static int group_of(const kiln_sched_rules *ru, int r)
{
    if (!ru || !ru->n_levels || !ru->has_topo[r]) return -1;
    for (int q = 0; q < r && ru->topo[r].group; q++)
        if (ru->has_topo[q] && ru->topo[q].group &&
            strcmp(ru->topo[q].group, ru->topo[r].group) == 0)
            return q;
    return r;
}

/* How many of the group's slots sl[0..k) node i could take, one after
 * another: now (live), or on the idle cluster, cordons ignored; -1 when the
 * node is not in the topology (it lacks a level's label). fr: scratch of
 * n_types ints. */
static int node_room(const kiln_sched *s, size_t i, const kiln_slot *sl, const int *tids, size_t k,
                     const kiln_sched_rules *ru, bool live, int *fr)
{
    const kiln_node *nd = &s->c->nodes[i];
    for (size_t l = 0; l < ru->n_levels; l++)
        if (!kiln_map_get(&nd->labels, ru->levels[l])) return -1;
    if (live && s->u[i].cordoned) return 0;
    for (size_t t = 0; t < s->n_types; t++)
        fr[t] = 0;
    for (size_t j = 0; j < nd->n_devs; j++)
        if (live ? is_free(s, i, j) : !nd->devs[j].refused) fr[s->dev_type[i][j]]++;
    int cpus = live ? s->u[i].cpus : 0, room = 0;
    double mem = live ? s->u[i].mem : 0;
    for (size_t q = 0; q < k; q++) {
        if (!allowed(ru, sl[q].role, nd, 1) || too_small(nd, &sl[q])) continue;
        if (nd->hard_resources &&
            (cpus + sl[q].vcpus > nd->cpus || mem + sl[q].memory_gb > nd->memory_gb + 1e-9))
            continue;
        int t = tids[q];
        if (sl[q].n_devs && t == ANY_TYPE) { /* the model with the most free */
            t = -1;
            for (size_t ty = 0; ty < s->n_types; ty++)
                if (!is_mig_type(s->types[ty]) && (t < 0 || fr[ty] > fr[t])) t = (int)ty;
        }
        if (sl[q].n_devs && (t < 0 || fr[t] < sl[q].n_devs)) continue;
        if (sl[q].n_devs) fr[t] -= sl[q].n_devs;
        cpus += sl[q].vcpus;
        mem += sl[q].memory_gb;
        room++;
    }
    return room;
}

/* "the worker replicas", "the master and worker replicas" */
static void group_words(const kiln_slot *sl, size_t k, char *buf, size_t len)
{
    bool seen[KILN_ROLE_COUNT] = {0};
    size_t nr = 0, at = 0;
    for (size_t q = 0; q < k; q++)
        if (!seen[sl[q].role]) seen[sl[q].role] = true, nr++;
    at += (size_t)snprintf(buf, len, "the ");
    size_t done = 0;
    for (int r = 0; r < KILN_ROLE_COUNT && at < len; r++) {
        if (!seen[r]) continue;
        done++;
        at += (size_t)snprintf(buf + at, len - at, "%s%s",
                               done == 1    ? ""
                               : done == nr ? " and "
                                            : ", ",
                               kiln_role_name((kiln_role)r));
    }
    if (at < len) snprintf(buf + at, len - at, " replica%s", k == 1 ? "" : "s");
}

/* Chooses the nodes for the group's slots sl[0..k) (live or idle) into
 * take[]: KILN_OK, KILN_ECONFLICT/KILN_EINVAL with `why` (the caller says
 * which: a failure on the idle cluster is never fitting), KILN_ENOMEM. */
static kiln_err group_choice(const kiln_sched *s, const kiln_slot *sl, const int *tids, size_t k,
                             const kiln_sched_rules *ru, const kiln_topology_request *req,
                             bool live, int *take, char *why, size_t whylen)
{
    size_t n = s->c->n;
    int *cap = calloc(n ? n : 1, sizeof *cap), *fr = calloc(s->n_types + 1, sizeof *fr);
    kiln_err err = KILN_ENOMEM;
    char who[160];
    if (!cap || !fr) goto out;
    const char *lvname = req->required ? req->required : req->preferred;
    long lv = req->unconstrained ? 0 : kiln_topology_level(ru->levels, ru->n_levels, lvname);
    group_words(sl, k, who, sizeof who);
    if (lv < 0) {
        snprintf(why, whylen, "%s ask for topology level '%s', which Topology %s does not have",
                 who, lvname ? lvname : "", ru->topology ? ru->topology : "");
        err = KILN_EINVAL;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        cap[i] = node_room(s, i, sl, tids, k, ru, live, fr);
    kiln__topo_in in = {s->c,
                        ru->levels,
                        ru->n_levels,
                        cap,
                        (int)k,
                        (size_t)lv,
                        req->required    ? KILN__TOPO_REQUIRED
                        : req->preferred ? KILN__TOPO_PREFERRED
                                         : KILN__TOPO_UNCONSTRAINED};
    int most = 0;
    if (kiln__topo_assign(&in, take, &most)) {
        err = KILN_OK;
        goto out;
    }
    if (most < 0) goto out;
    err = live ? KILN_ECONFLICT : KILN_EINVAL;
    if (in.mode == KILN__TOPO_REQUIRED)
        snprintf(why, whylen, "%s require one %s domain of Topology %s: %s holds %d of their %zu%s",
                 who, ru->levels[lv], ru->topology ? ru->topology : "",
                 live ? "the freest one now" : "the largest one", most, k,
                 live ? " (waiting for room at that level)" : ", even with the cluster idle");
    else
        snprintf(why, whylen, "%s: the nodes of Topology %s hold %d of their %zu%s", who,
                 ru->topology ? ru->topology : "", most, k,
                 live ? " now" : ", even with the cluster idle");
out:
    free(cap);
    free(fr);
    return err;
}

/* Places the topology groups' slots, which the caller moved to the front of
 * slots[] group by group (bounds[g]..bounds[g+1]), each on the nodes
 * group_choice picks. KILN_OK with them held; else nothing is held. */
static kiln_err place_groups(kiln_sched *s, kiln_slot *slots, const int *tids, const size_t *bounds,
                             size_t ng, const int *gfirst, const kiln_sched_rules *ru, char *why,
                             size_t whylen)
{
    size_t n = s->c->n, held = 0;
    int *take = calloc(n ? n : 1, sizeof *take);
    kiln_err err = KILN_ENOMEM;
    if (!take) goto out;
    for (size_t g = 0; g < ng; g++) {
        kiln_slot *sl = slots + bounds[g];
        const int *ti = tids + bounds[g];
        size_t k = bounds[g + 1] - bounds[g], failed = 0;
        const kiln_topology_request *req = &ru->topo[gfirst[g]];
        err = group_choice(s, sl, ti, k, ru, req, true, take, why, whylen);
        if (err == KILN_ECONFLICT) {
            /* not now: never, or later? */
            char w2[400];
            kiln_err e2 = group_choice(s, sl, ti, k, ru, req, false, take, w2, sizeof w2);
            if (e2 != KILN_OK) snprintf(why, whylen, "%s", w2), err = e2;
        }
        if (err != KILN_OK) goto out;
        /* on the chosen nodes, as many on each as chosen; mixed roles may
         * not share out as the count did: then anywhere among those nodes */
        s->budget = take;
        bool ok = place_live(s, sl, ti, ru, k, &failed);
        if (!ok) {
            for (size_t i = 0; i < n; i++)
                take[i] = take[i] > 0 ? (int)k : 0;
            ok = place_live(s, sl, ti, ru, k, &failed);
        }
        s->budget = NULL;
        if (!ok) {
            char who[160];
            group_words(sl, k, who, sizeof who);
            snprintf(why, whylen, "waiting for room for %s in one domain of Topology %s", who,
                     ru->topology ? ru->topology : "");
            err = KILN_ECONFLICT;
            goto out;
        }
        held = bounds[g + 1];
    }
    err = KILN_OK;
out:
    if (err != KILN_OK)
        for (size_t i = 0; i < held; i++)
            hold(s, &slots[i], false);
    free(take);
    return err;
}

kiln_err kiln_sched_place_sel(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                              const kiln_map *const selectors[KILN_ROLE_COUNT], kiln_placement *out,
                              char *why, size_t whylen)
{
    kiln_sched_rules ru = {0};
    for (int r = 0; selectors && r < KILN_ROLE_COUNT; r++)
        ru.selector[r] = selectors[r];
    return kiln_sched_place_rules(s, plans, n_plans, &ru, out, why, whylen);
}

kiln_err kiln_sched_place_rules(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                                const kiln_sched_rules *ru, kiln_placement *out, char *why,
                                size_t whylen)
{
    kiln_slot *slots = NULL;
    const char **types = NULL;
    int *tids = NULL;
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
        /* a replica holds one share: its limits are one share's */
        if (plans[p].accelerators_per_replica > 1 &&
            kiln_devices_is_share_type(plans[p].accelerator_type)) {
            snprintf(why, whylen,
                     "the %s role asks for %lld x %s per replica; a replica holds one GPU share "
                     "(its memory and SM limits are one share's)",
                     kiln_role_name(plans[p].role), (long long)plans[p].accelerators_per_replica,
                     plans[p].accelerator_type);
            err = KILN_EINVAL;
            goto out;
        }
    }
    if (n > KILN_MAX_REPLICAS) {
        snprintf(why, whylen, "the job has %zu replicas; kiln supports %d", n, KILN_MAX_REPLICAS);
        goto out;
    }
    err = KILN_ENOMEM;
    slots = calloc(n ? n : 1, sizeof *slots);
    types = calloc(n ? n : 1, sizeof *types);
    tids = calloc(n ? n : 1, sizeof *tids);
    if (!slots || !types || !tids) goto out;
    size_t k = 0;
    for (size_t p = 0; p < n_plans; p++)
        for (int64_t i = 0; i < plans[p].count; i++) {
            slots[k].role = plans[p].role;
            slots[k].index = (int)i;
            slots[k].n_devs =
                plans[p].accelerator_type ? (int)plans[p].accelerators_per_replica : 0;
            slots[k].vcpus = plans[p].vcpus;
            slots[k].memory_gb = plans[p].memory_gb;
            slots[k].limit_vcpus = plans[p].limit_vcpus;
            slots[k].limit_memory_gb = plans[p].limit_memory_gb;
            k++;
        }
    qsort(slots, n, sizeof *slots, by_demand);
    /* types follow the sorted slots */
    for (size_t i = 0; i < n; i++) {
        for (size_t p = 0; p < n_plans; p++)
            if (plans[p].role == slots[i].role) types[i] = known_type(s, plans[p].accelerator_type);
        tids[i] = type_id(s, types[i]);
    }

    /* Topology groups first, group by group (stable: each in demand order),
     * then the rest as always */
    size_t bounds[KILN_ROLE_COUNT + 1] = {0}, ng = 0, ntopo = 0;
    int gfirst[KILN_ROLE_COUNT];
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        if (group_of(ru, r) != r) continue;
        gfirst[ng] = r;
        for (size_t i = ntopo; i < n; i++) {
            if (group_of(ru, slots[i].role) != r) continue;
            for (size_t j = i; j > ntopo; j--) { /* move slot i to ntopo, keeping order */
                kiln_slot ts = slots[j];
                slots[j] = slots[j - 1], slots[j - 1] = ts;
                const char *tt = types[j];
                types[j] = types[j - 1], types[j - 1] = tt;
                int tn = tids[j];
                tids[j] = tids[j - 1], tids[j - 1] = tn;
            }
            ntopo++;
        }
        if (ntopo > bounds[ng]) bounds[++ng] = ntopo;
    }
    if (ng) {
        err = place_groups(s, slots, tids, bounds, ng, gfirst, ru, why, whylen);
        if (err != KILN_OK) goto out;
    }
    /* Fits now: placed and reserved. A job that fits now could ever fit. */
    if (place_live(s, slots + ntopo, tids + ntopo, ru, n - ntopo, &failed)) {
        qsort(slots, n, sizeof *slots, by_order);
        out->slots = slots;
        out->n = n;
        slots = NULL;
        err = KILN_OK;
        goto out;
    }
    for (size_t i = 0; i < ntopo; i++) /* the groups' slots go back */
        hold(s, &slots[i], false);
    failed += ntopo;
    /* Not now: never, or later? */
    err = ever_fits_cached(s, slots, types, n, ru, why, whylen);
    if (err != KILN_OK) goto out;
    snprintf(why, whylen, "waiting for %s: the %s replica needs %d x %s",
             slots[failed].n_devs ? "free accelerators" : "a node",
             kiln_role_name(slots[failed].role), slots[failed].n_devs,
             types[failed] ? types[failed] : "(none)");
    err = KILN_ECONFLICT;
out:
    free(slots);
    free(types);
    free(tids);
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
                set_busy(s, sl->node, (size_t)sl->devs[j], true);
        u->cpus += sl->vcpus;
        u->mem += sl->memory_gb;
    }
}

void kiln_sched_release(kiln_sched *s, const kiln_placement *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const kiln_slot *sl = &p->slots[i];
        if (sl->node >= s->c->n) continue;
        hold(s, sl, false);
    }
}
