/* nn/fit.c - the training loop (fit) and the dataset helpers of train.h.
 *
 * Batches come from the data module's prefetcher: a background thread copies
 * the shuffled examples of the next batches into a ring while the pool
 * computes on the current one. The order of epoch e is a pure function of
 * (shuffle_seed, e), so resuming at (epoch, step) replays exactly the batches
 * an uninterrupted run would have seen. */
#include "kiln/train.h"

#include "data/data.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    /* a read-only view: the prefetcher reads images/labels, never frees them */
    kiln_dataset view = {.n = data->n,
                         .rows = 1,
                         .cols = (uint32_t)data->dim,
                         .dim = data->dim,
                         .num_classes = (uint32_t)kiln_model_num_classes(m),
                         .images = (float *)data->x,
                         .labels = (uint8_t *)data->y};
    uint64_t spe = kiln_steps_per_epoch(data->n, B, 0);
    if (opts->initial_epoch >= (uint64_t)opts->epochs) return 0;
    kiln_prefetch_opts po = {.batch_size = B,
                             .seed = opts->shuffle_seed,
                             .shuffle = 1,
                             .epoch = opts->initial_epoch,
                             .step = opts->initial_step,
                             .end_epoch = (uint64_t)opts->epochs,
                             .world = 1,
                             .depth = 4};
    kiln_prefetch *pf = NULL;
    kiln_errmsg em;
    if (kiln_prefetch_start(&view, &po, &pf, &em) != KILN_OK) {
        return kiln__model_fail(m, "%s", em.msg);
    }
    int rc = 0;
    kiln_batch b;
    uint64_t cur_epoch = UINT64_MAX;
    double t0 = now_s();
    size_t seen = 0;
    while (kiln_prefetch_next(pf, &b)) {
        if (b.epoch != cur_epoch) {
            cur_epoch = b.epoch;
            t0 = now_s();
            seen = 0;
            if (cb->on_epoch_begin && cb->on_epoch_begin(cb->ud, m, b.epoch, spe)) {
                kiln_prefetch_release(pf, &b);
                rc = 1;
                break;
            }
        }
        kiln_fit_info info = {.epoch = b.epoch,
                              .step = b.step,
                              .steps_per_epoch = spe,
                              .batch = (int)b.size,
                              .last_in_epoch = b.last_in_epoch};
        int r =
            kiln_model_train_step(m, b.images, b.labels, (int)b.size, &info.loss, &info.correct);
        kiln_prefetch_release(pf, &b);
        if (r) {
            rc = -1;
            break;
        }
        seen += (size_t)info.batch;
        double dt = now_s() - t0;
        info.samples_per_sec = dt > 0 ? (double)seen / dt : 0.0;
        info.global_step = kiln_model_step(m);
        if (cb->on_step_end && cb->on_step_end(cb->ud, m, &info)) {
            rc = 1;
            break;
        }
        if (info.last_in_epoch && cb->on_epoch_end && cb->on_epoch_end(cb->ud, m, &info)) {
            rc = 1;
            break;
        }
    }
    kiln_prefetch_stop(pf);
    return rc;
}
