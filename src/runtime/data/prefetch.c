/* runtime/data/prefetch.c - a producer thread that gathers batches into a ring
 * of buffers ahead of the consumer.
 *
 * Batches are numbered by a sequence counter; batch k always goes in slot
 * k % depth and is delivered k-th, so the content and order are fixed by the
 * options alone, whatever the thread timing. A slot cycles FREE -> (filled by
 * the producer) READY -> (handed out) HELD -> (released) FREE. */
#include "data/data.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT_FREE, SLOT_READY, SLOT_HELD };

typedef struct slot {
    int state;
    float *images;
    uint8_t *labels;
    kiln_batch b; /* metadata filled by the producer */
} slot;

struct kiln_prefetch {
    const kiln_dataset *ds;
    kiln_prefetch_opts o;
    size_t local_cap; /* the most examples one replica's batch can hold */
    uint64_t steps;   /* per epoch */
    slot *slots;
    uint32_t *order;    /* order of order_epoch, owned by the producer thread */
    uint64_t next_take; /* sequence number of the next batch to hand out */
    int producer_done;  /* no batches after those already READY */
    int stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* one condition for both sides: traffic is tiny */
    pthread_t thread;
    int thread_started;
};

static void *producer(void *arg)
{
    kiln_prefetch *p = arg;
    const kiln_dataset *ds = p->ds;
    uint64_t epoch = p->o.epoch, step = p->o.step;
    uint64_t order_epoch = UINT64_MAX;

    for (uint64_t seq = 0;; seq++) {
        if (p->o.end_epoch && epoch >= p->o.end_epoch) break;
        slot *s = &p->slots[seq % p->o.depth];
        pthread_mutex_lock(&p->mu);
        while (s->state != SLOT_FREE && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;

        /* The slot is ours until we mark it READY: fill it without the lock. */
        if (p->o.shuffle && order_epoch != epoch) {
            kiln_epoch_order(p->o.seed, epoch, ds->n, p->order);
            order_epoch = epoch;
        }
        size_t begin, count;
        kiln_shard_range(ds->n, p->o.batch_size, step, p->o.rank, p->o.world, &begin, &count);
        for (size_t i = 0; i < count; i++) {
            size_t ex = p->o.shuffle ? p->order[begin + i] : begin + i;
            memcpy(s->images + i * ds->dim, ds->images + ex * ds->dim, ds->dim * sizeof(float));
            s->labels[i] = ds->labels[ex];
        }
        size_t gb = (size_t)step * p->o.batch_size;
        s->b.images = s->images;
        s->b.labels = s->labels;
        s->b.size = count;
        s->b.global_size = ds->n - gb < p->o.batch_size ? ds->n - gb : p->o.batch_size;
        s->b.epoch = epoch;
        s->b.step = step;
        s->b.last_in_epoch = step + 1 == p->steps;
        s->b.slot_ = s;

        pthread_mutex_lock(&p->mu);
        s->state = SLOT_READY;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);

        if (++step == p->steps) {
            step = 0;
            epoch++;
        }
    }
    pthread_mutex_lock(&p->mu);
    p->producer_done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void prefetch_free(kiln_prefetch *p)
{
    if (p->slots) {
        for (unsigned i = 0; i < p->o.depth; i++) {
            free(p->slots[i].images);
            free(p->slots[i].labels);
        }
    }
    free(p->slots);
    free(p->order);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

kiln_err kiln_prefetch_start(const kiln_dataset *ds, const kiln_prefetch_opts *opts,
                             kiln_prefetch **out, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    *out = NULL;
    if (!ds || ds->n == 0 || !opts || opts->batch_size == 0)
        return kiln_errmsg_set(err, KILN_EINVAL, "prefetch: empty dataset or batch size 0");
    if (ds->n > UINT32_MAX)
        return kiln_errmsg_set(err, KILN_ELIMIT, "prefetch: more than 2^32 examples");
    kiln_prefetch *p = calloc(1, sizeof *p);
    if (!p) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->ds = ds;
    p->o = *opts;
    if (p->o.world == 0) p->o.world = 1;
    if (p->o.rank >= p->o.world) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "prefetch: rank %u is not below world %u", p->o.rank,
                             p->o.world);
        goto out;
    }
    if (p->o.depth == 0) p->o.depth = 4;
    p->steps = kiln_steps_per_epoch(ds->n, p->o.batch_size, p->o.drop_last);
    if (p->steps == 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "prefetch: batch size %zu with drop_last leaves no step in %zu "
                             "examples",
                             p->o.batch_size, ds->n);
        goto out;
    }
    /* A resume point at the very end of an epoch means the start of the next. */
    p->o.epoch += p->o.step / p->steps;
    p->o.step %= p->steps;
    p->local_cap = (p->o.batch_size + p->o.world - 1) / p->o.world;
    p->order = malloc(ds->n * sizeof *p->order);
    p->slots = calloc(p->o.depth, sizeof *p->slots);
    if (!p->order || !p->slots) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        goto out;
    }
    for (unsigned i = 0; i < p->o.depth; i++) {
        p->slots[i].images = malloc(p->local_cap * ds->dim * sizeof(float));
        p->slots[i].labels = malloc(p->local_cap);
        if (!p->slots[i].images || !p->slots[i].labels) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory for batch buffers");
            goto out;
        }
    }
    if (pthread_create(&p->thread, NULL, producer, p) != 0) {
        rc = kiln_errmsg_set(err, KILN_EIO, "prefetch: cannot start a thread");
        goto out;
    }
    p->thread_started = 1;
    *out = p;
    p = NULL;
out:
    if (p) prefetch_free(p);
    return rc;
}

int kiln_prefetch_next(kiln_prefetch *p, kiln_batch *b)
{
    slot *s = &p->slots[p->next_take % p->o.depth];
    int got = 0;
    pthread_mutex_lock(&p->mu);
    while (s->state != SLOT_READY && !p->producer_done)
        pthread_cond_wait(&p->cv, &p->mu);
    /* producer_done with the slot READY still counts: it was filled first. */
    if (s->state == SLOT_READY) {
        s->state = SLOT_HELD;
        *b = s->b;
        p->next_take++;
        got = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (!got) memset(b, 0, sizeof *b);
    return got;
}

void kiln_prefetch_release(kiln_prefetch *p, kiln_batch *b)
{
    if (!p || !b || !b->slot_) return;
    slot *s = b->slot_;
    pthread_mutex_lock(&p->mu);
    s->state = SLOT_FREE;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    b->slot_ = NULL;
    b->images = NULL;
    b->labels = NULL;
}

void kiln_prefetch_stop(kiln_prefetch *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->thread_started) pthread_join(p->thread, NULL);
    prefetch_free(p);
}
