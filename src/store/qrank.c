/* src/store/qrank.c - the queue's order in memory (store_int.h).
 *
 * jobPosition is "how many QUEUED jobs come before this one" in queue order
 * (priority desc, createTime, seq). A COUNT(*) over an index walks every
 * entry before the job, so a page of queued jobs cost O(page x queue). This
 * is an order-statistic treap: a binary search tree on the key, balanced by
 * random heap priorities, where every node knows its subtree's size, so
 * insert, remove and rank are O(log n) expected. The store keeps it in step
 * with every state change under its lock. */
#include <stdlib.h>

#include "store/store_int.h"

typedef struct node {
    kiln__qkey k;
    uint32_t heap; /* random: the treap's balance */
    size_t size;   /* nodes in this subtree */
    struct node *l, *r;
} node;

struct kiln__qrank {
    node *root;
    uint64_t rng; /* xorshift state for the heap priorities */
};

static int cmp(kiln__qkey a, kiln__qkey b)
{
    if (a.priority != b.priority) return a.priority > b.priority ? -1 : 1;
    if (a.create_ns != b.create_ns) return a.create_ns < b.create_ns ? -1 : 1;
    if (a.seq != b.seq) return a.seq < b.seq ? -1 : 1;
    return 0;
}

static size_t sz(const node *n)
{
    return n ? n->size : 0;
}

static void fix(node *n)
{
    n->size = 1 + sz(n->l) + sz(n->r);
}

/* Splits t into keys < k (*a) and keys >= k (*b). */
static void split(node *t, kiln__qkey k, node **a, node **b)
{
    if (!t) {
        *a = *b = NULL;
    } else if (cmp(t->k, k) < 0) {
        split(t->r, k, &t->r, b);
        fix(t);
        *a = t;
    } else {
        split(t->l, k, a, &t->l);
        fix(t);
        *b = t;
    }
}

/* Joins a and b, every key of a below every key of b. */
static node *join(node *a, node *b)
{
    if (!a) return b;
    if (!b) return a;
    if (a->heap > b->heap) {
        a->r = join(a->r, b);
        fix(a);
        return a;
    }
    b->l = join(a, b->l);
    fix(b);
    return b;
}

static void free_all(node *n)
{
    if (!n) return;
    free_all(n->l);
    free_all(n->r);
    free(n);
}

kiln__qrank *kiln__qrank_new(void)
{
    kiln__qrank *q = calloc(1, sizeof *q);
    if (q) q->rng = 0x9e3779b97f4a7c15ull;
    return q;
}

void kiln__qrank_free(kiln__qrank *q)
{
    if (!q) return;
    free_all(q->root);
    free(q);
}

size_t kiln__qrank_size(const kiln__qrank *q)
{
    return sz(q->root);
}

size_t kiln__qrank_before(const kiln__qrank *q, kiln__qkey k)
{
    size_t n = 0;
    for (const node *t = q->root; t;) {
        if (cmp(t->k, k) < 0) {
            n += sz(t->l) + 1;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return n;
}

static bool contains(const kiln__qrank *q, kiln__qkey k)
{
    for (const node *t = q->root; t;) {
        int c = cmp(k, t->k);
        if (c == 0) return true;
        t = c < 0 ? t->l : t->r;
    }
    return false;
}

kiln_err kiln__qrank_add(kiln__qrank *q, kiln__qkey k)
{
    if (contains(q, k)) return KILN_OK;
    node *n = calloc(1, sizeof *n), *a, *b;
    if (!n) return KILN_ENOMEM;
    q->rng ^= q->rng << 13;
    q->rng ^= q->rng >> 7;
    q->rng ^= q->rng << 17;
    n->k = k;
    n->heap = (uint32_t)(q->rng >> 32);
    n->size = 1;
    split(q->root, k, &a, &b);
    q->root = join(join(a, n), b);
    return KILN_OK;
}

/* Removes k from the subtree at *p; whether it was there. Sizes are fixed
 * on the way back up. */
static bool remove_at(node **p, kiln__qkey k)
{
    node *t = *p;
    if (!t) return false;
    int c = cmp(k, t->k);
    if (c == 0) {
        *p = join(t->l, t->r);
        free(t);
        return true;
    }
    bool gone = remove_at(c < 0 ? &t->l : &t->r, k);
    if (gone) fix(t);
    return gone;
}

void kiln__qrank_remove(kiln__qrank *q, kiln__qkey k)
{
    remove_at(&q->root, k);
}
