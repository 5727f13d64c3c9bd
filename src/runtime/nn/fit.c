/* nn/fit.c - the training loop (fit) and the dataset helpers of train.h.
 *
 * Batches: the order of epoch e is a pure function of (shuffle_seed, e), so
 * resuming at (epoch, step) replays exactly the batches an uninterrupted run
 * would have seen. Two ways to assemble them, the same batches either way
 * (tests/runtime/test_nn.c compares the parameters bit for bit):
 *  - a spare core (compute threads < online CPUs): the data module's
 *    prefetcher, a background thread that copies the shuffled examples of the
 *    next batches into a ring while the pool computes on the current one;
 *  - no spare core: the pool itself gathers each batch just before the step,
 *    every thread a slice of the rows (128 rows of 3 KiB at random places:
 *    ~50 us on 2 threads). A prefetch thread there has no core of its own:
 *    it runs by preempting a compute thread, whose partner then spins at the
 *    next hand-off, or while the step waits for it. Measured on the 2-core
 *    machine, MLP, 6 alternating rounds in the same run: 64.8k -> 67.2k
 *    samples/s (+3.7%, every round faster). */
#include "kiln/train.h"

#include "core/pool.h"
#include "data/data.h"
#include "nn/model_int.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int kiln_load_fashion_mnist(const char *dir, int train, kiln_data *out, char *err, size_t errlen)
{
    kiln_dataset ds = {0};
    kiln_errmsg em;
    memset(out, 0, sizeof(*out));
    if (kiln_fashion_mnist_load(dir, train ? KILN_SPLIT_TRAIN : KILN_SPLIT_TEST, &ds, &em) !=
        KILN_OK) {
        if (err && errlen) snprintf(err, errlen, "%s", em.msg);
        return -1;
    }
    /* take ownership of the arrays; the struct itself is on our stack */
    out->x = ds.images;
    out->y = ds.labels;
    out->n = ds.n;
    out->dim = ds.dim;
    return 0;
}

void kiln_data_free(kiln_data *d)
{
    if (!d) return;
    free((void *)d->x);
    free((void *)d->y);
    memset(d, 0, sizeof(*d));
}

/* Where fit's batches come from: the prefetch thread (pf), or a gather on the
 * pool into x/y (pf == NULL), walking (epoch, step) like the prefetcher. */
typedef struct batch_src {
    kiln_prefetch *pf;
    const kiln_data *data;
    size_t batch; /* global */
    uint32_t rank, world;
    uint64_t seed, epoch, step, end_epoch, spe;
    uint32_t *order; /* of order_epoch */
    uint64_t order_epoch;
    float *x;
    uint8_t *y;
} batch_src;

typedef struct gather_ctx {
    const kiln_data *data;
    const uint32_t *idx;
    size_t count;
    int parts;
    float *x;
    uint8_t *y;
} gather_ctx;

static void gather_task(void *p, int task, int tid)
{
    (void)tid;
    const gather_ctx *g = p;
    size_t b, e, dim = g->data->dim;
    kiln__split(g->count, g->parts, task, 1, &b, &e);
    for (size_t i = b; i < e; i++) {
        memcpy(g->x + i * dim, g->data->x + (size_t)g->idx[i] * dim, dim * sizeof(float));
        g->y[i] = g->data->y[g->idx[i]];
    }
}

static int src_next(batch_src *s, kiln_batch *b)
{
    if (s->pf) return kiln_prefetch_next(s->pf, b);
    if (s->epoch >= s->end_epoch) return 0;
    if (s->order_epoch != s->epoch) {
        kiln_epoch_order(s->seed, s->epoch, s->data->n, s->order);
        s->order_epoch = s->epoch;
    }
    size_t begin, count, gbegin = (size_t)s->step * s->batch;
    kiln_shard_range(s->data->n, s->batch, s->step, s->rank, s->world, &begin, &count);
    gather_ctx g = {.data = s->data, .idx = s->order + begin, .count = count, .x = s->x, .y = s->y};
    g.parts = kiln_get_threads() < (int)count ? kiln_get_threads() : (int)count;
    if (g.parts > 0) kiln__parallel_for(g.parts, gather_task, &g);
    size_t gsize = s->data->n - gbegin < s->batch ? s->data->n - gbegin : s->batch;
    *b = (kiln_batch){.images = s->x,
                      .labels = s->y,
                      .size = count,
                      .global_size = gsize,
                      .epoch = s->epoch,
                      .step = s->step,
                      .last_in_epoch = s->step + 1 == s->spe};
    if (++s->step == s->spe) {
        s->step = 0;
        s->epoch++;
    }
    return 1;
}

static void src_release(batch_src *s, kiln_batch *b)
{
    if (s->pf) kiln_prefetch_release(s->pf, b);
}

static void src_stop(batch_src *s)
{
    kiln_prefetch_stop(s->pf);
    free(s->order);
    kiln_ffree(s->x);
    free(s->y);
}

/* The bookkeeping both loops share: the epoch's clock and sample count,
 * a step's kiln_fit_info, and the callbacks around a step. */
typedef struct fit_clock {
    uint64_t epoch; /* UINT64_MAX before the first batch */
    double t0;
    size_t seen;
} fit_clock;

/* A new epoch starts its clock and calls on_epoch_begin; 1: stop. */
static int epoch_begin(kiln_model *m, const kiln_callbacks *cb, fit_clock *c, const kiln_batch *b,
                       uint64_t spe)
{
    if (b->epoch == c->epoch) return 0;
    c->epoch = b->epoch;
    c->t0 = now_s();
    c->seen = 0;
    return cb->on_epoch_begin && cb->on_epoch_begin(cb->ud, m, b->epoch, spe) ? 1 : 0;
}

static kiln_fit_info batch_info(const kiln_batch *b, uint64_t spe)
{
    return (kiln_fit_info){.epoch = b->epoch,
                           .step = b->step,
                           .steps_per_epoch = spe,
                           .batch = (int)b->size,
                           .last_in_epoch = b->last_in_epoch};
}

/* After a step: the rate, the step count, on_step_end and, at an epoch's
 * end, on_epoch_end; 1: a callback stops training. */
static int step_done(kiln_model *m, const kiln_callbacks *cb, fit_clock *c, kiln_fit_info *info)
{
    c->seen += (size_t)info->batch;
    double dt = now_s() - c->t0;
    info->samples_per_sec = dt > 0 ? (double)c->seen / dt : 0.0;
    info->global_step = kiln_model_step(m);
    if (cb->on_step_end && cb->on_step_end(cb->ud, m, info)) return 1;
    if (info->last_in_epoch && cb->on_epoch_end && cb->on_epoch_end(cb->ud, m, info)) return 1;
    return 0;
}

/* The loop on a device (nn/model_dev.c): batch k+1 is staged (its upload
 * queued on the copy stream) between launching step k and waiting for it,
 * so the upload overlaps the step; step k's callbacks still run after it
 * ends and before step k+1 starts. Returns as kiln_model_fit. */
static int fit_dev(kiln_model *m, batch_src *src, uint64_t spe, const kiln_callbacks *cb)
{
    kiln_batch b, nb;
    int rc = 0, have = src_next(src, &b);
    fit_clock clk = {.epoch = UINT64_MAX};
    if (have) {
        int r = kiln__dev_stage(m, b.images, b.labels, (int)b.size);
        src_release(src, &b); /* staged: copied into the device's own buffer */
        if (r) return -1;
    }
    while (have) {
        if (epoch_begin(m, cb, &clk, &b, spe)) {
            rc = 1;
            break;
        }
        kiln_fit_info info = batch_info(&b, spe);
        if (kiln__dev_launch(m)) {
            rc = -1;
            break;
        }
        if ((have = src_next(src, &nb))) {
            int r = kiln__dev_stage(m, nb.images, nb.labels, (int)nb.size);
            src_release(src, &nb);
            if (r) {
                kiln__dev_finish(m, NULL, NULL);
                rc = -1;
                break;
            }
        }
        if (kiln__dev_finish(m, &info.loss, &info.correct)) {
            rc = -1;
            break;
        }
        if (step_done(m, cb, &clk, &info)) {
            rc = 1;
            break;
        }
        b = nb;
    }
    kiln__dev_unstage(m); /* a batch staged for a step that will not come */
    return rc;
}

int kiln__fit_batches_on_pool = -1;

/* Batches from the prefetch thread: only when the pool leaves a core free. */
static int use_prefetch_thread(void)
{
    if (kiln__fit_batches_on_pool >= 0) return !kiln__fit_batches_on_pool;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c <= 0 || kiln_get_threads() < c;
}

int kiln_model_fit(kiln_model *m, const kiln_data *data, const kiln_fit_opts *opts,
                   const kiln_callbacks *cb)
{
    static const kiln_callbacks none = {0};
    if (!cb) cb = &none;
    if (data->dim != kiln_model_input_dim(m)) {
        return kiln__model_fail(m, "data has %zu features per example, the model takes %zu",
                                data->dim, kiln_model_input_dim(m));
    }
    size_t B = (size_t)kiln_model_batch_size(m);
    uint32_t world = opts->world > 1 ? opts->world : 1;
    if ((world > 1 && !opts->sync) || opts->rank >= world)
        return kiln__model_fail(m, "replica %u of %u: data parallelism needs a gradient sync",
                                opts->rank, world);
    size_t Bg = B * world; /* the global batch */
    /* a read-only view: the prefetcher reads images/labels, never frees them */
    kiln_dataset view = {.n = data->n,
                         .rows = 1,
                         .cols = (uint32_t)data->dim,
                         .dim = data->dim,
                         .num_classes = (uint32_t)kiln_model_num_classes(m),
                         .images = (float *)data->x,
                         .labels = (uint8_t *)data->y};
    uint64_t spe = kiln_steps_per_epoch(data->n, Bg, 0);
    if (opts->initial_epoch >= (uint64_t)opts->epochs) return 0;
    batch_src src = {.data = data,
                     .batch = Bg,
                     .rank = opts->rank,
                     .world = world,
                     .seed = opts->shuffle_seed,
                     .epoch = opts->initial_epoch,
                     .step = opts->initial_step,
                     .end_epoch = (uint64_t)opts->epochs,
                     .spe = spe,
                     .order_epoch = UINT64_MAX};
    if (use_prefetch_thread()) {
        kiln_prefetch_opts po = {.batch_size = Bg,
                                 .seed = opts->shuffle_seed,
                                 .shuffle = 1,
                                 .epoch = opts->initial_epoch,
                                 .step = opts->initial_step,
                                 .end_epoch = (uint64_t)opts->epochs,
                                 .rank = opts->rank,
                                 .world = world,
                                 .depth = 4};
        kiln_errmsg em;
        if (kiln_prefetch_start(&view, &po, &src.pf, &em) != KILN_OK) {
            return kiln__model_fail(m, "%s", em.msg);
        }
    } else {
        if (data->n == 0 || data->n > UINT32_MAX)
            return kiln__model_fail(m, "cannot train on %zu examples", data->n);
        /* a resume point at the very end of an epoch means the start of the next */
        src.epoch += src.step / spe;
        src.step %= spe;
        src.order = malloc(data->n * sizeof(*src.order));
        src.x = kiln_falloc(B * data->dim);
        src.y = malloc(B);
        if (!src.order || !src.x || !src.y) {
            src_stop(&src);
            return kiln__model_fail(m, "out of memory for batch buffers");
        }
    }
    int rc = 0;
    /* a device model's data-parallel steps take the loop below: each one
     * waits for the group's sum, so there is nothing to pipeline */
    if (m->dv && !opts->sync) {
        rc = fit_dev(m, &src, spe, cb);
        src_stop(&src);
        return rc;
    }
    kiln_batch b;
    fit_clock clk = {.epoch = UINT64_MAX};
    while (src_next(&src, &b)) {
        if (epoch_begin(m, cb, &clk, &b, spe)) {
            src_release(&src, &b);
            rc = 1;
            break;
        }
        kiln_fit_info info = batch_info(&b, spe);
        int r;
        if (opts->sync) {
            /* this slice's weight in the global batch's mean loss */
            float scale = b.global_size ? (float)b.size / (float)b.global_size : 0.0f;
            r = kiln_model_compute_grads(m, b.images, b.labels, (int)b.size, scale, opts->sync,
                                         &info.loss, &info.correct);
            if (!r) r = kiln_model_apply_grads(m, opts->sync);
        } else {
            r = kiln_model_train_step(m, b.images, b.labels, (int)b.size, &info.loss,
                                      &info.correct);
        }
        src_release(&src, &b);
        if (r) {
            rc = -1;
            break;
        }
        if (step_done(m, cb, &clk, &info)) {
            rc = 1;
            break;
        }
    }
    src_stop(&src);
    return rc;
}
