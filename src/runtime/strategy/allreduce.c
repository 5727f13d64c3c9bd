/* strategy/allreduce.c - one_device, mirrored and multi_worker_mirrored
 * (kiln/strategy.h, docs/distributed.md).
 *
 * One step of a replica: kiln_model_compute_grads writes this replica's
 * share of the gradient (scaled by its fraction of the global batch) into a
 * flat buffer registered with the communicator; every bucket that the
 * backward pass completes is summed over the replicas at once (inline, or
 * queued on the communication thread), the last bucket carrying one extra
 * float: this replica's stop flag. kiln_model_apply_grads then updates the
 * parameters bucket by bucket with the summed gradients, identical on every
 * replica (the shm sum is bit-identical everywhere), so the replicas stay
 * identical without ever exchanging parameters. With one replica (and no
 * always_sync) there is no group: the fused single-replica step.
 *
 * shard_optimizer (ZeRO-1, shm only): no sum during the backward pass. The
 * apply hook (kiln_grad_sync.apply) waits until every replica's gradient is
 * final (kiln_comm_reduce_scatter_begin), then this replica updates only its
 * slice of the flat layout (the slice the all-reduce would sum here),
 * summing the replicas' gradients in rank order inside the optimizer's pass
 * (optim.h: kiln_opt_shard) and storing the new parameters into a second
 * shared buffer, which the all-gather completes on every replica; the other
 * replicas' slices are then copied into the model. Same additions in the
 * same order as the all-reduce: the same bits, and replicas stay identical.
 * The stop flag is summed by the owner of the last slice and travels in the
 * parameter buffer. */
#include "strategy/strategy_int.h"

#include "nn/nn.h"
#include "optim/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BUCKETS 256

/* kiln_strategy_measuring's names, by the measure field below */
static const char *const measure_names[] = {NULL, "nocomm", "lockstep"};

struct kiln__allreduce {
    kiln_strategy *s;
    kiln_comm *c;
    kiln_model *m;
    kiln_grad_sync sync;
    size_t ngrad;
    int inline_ar, nbuckets;
    kiln_comm_ticket tickets[MAX_BUCKETS];
    /* $KILN_DIST_PROFILE: seconds spent in the sync callbacks, printed at free */
    int profile;
    /* $KILN_DIST_PROFILE's measuring modes (docs/distributed.md), in which
     * nothing is exchanged: nocomm, the gradient-sync step with nothing
     * summed (the replicas train apart); lockstep, the fused single-replica
     * step on all the data (what each process of the bound runs) and one
     * barrier per step */
    enum { MEASURE_OFF, MEASURE_NOCOMM, MEASURE_LOCKSTEP } measure;
    double t_ready, t_wait;
    uint64_t steps;
    /* shard_optimizer */
    int sharded;
    float *pflat;                   /* ngrad + 1 floats, registered: the all-gather's buffer */
    float *views[KILN_OPT_MAX_SRC]; /* every replica's pflat (kiln_comm_shared_views) */
    size_t lo, hi;                  /* this replica's slice of ngrad + 1 */
    double t_apply;
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int on_bucket_ready(void *ud, int b, float *data, size_t count)
{
    kiln__allreduce *d = ud;
    double t0 = d->profile ? mono_s() : 0;
    if (b == 0) { /* failures name the step being computed (1-based, as logged) */
        kiln_comm_set_step(d->c, (int64_t)kiln_model_step(d->m) + 1);
        d->steps++;
    }
    if (b == d->nbuckets - 1) /* the stop flag rides in the last bucket */
        d->sync.grads[d->ngrad] = d->s->cfg.stop && *d->s->cfg.stop ? 1.0f : 0.0f;
    kiln_err e = d->measure     ? KILN_OK
                 : d->inline_ar ? kiln_comm_allreduce_sum_f32(d->c, data, count)
                                : kiln_comm_iallreduce_sum_f32(d->c, data, count, &d->tickets[b]);
    if (d->profile) d->t_ready += mono_s() - t0;
    return e != KILN_OK;
}

/* sharded: nothing to sum during the backward pass; the stop flag only */
static int on_bucket_ready_sharded(void *ud, int b, float *data, size_t count)
{
    kiln__allreduce *d = ud;
    (void)data;
    (void)count;
    if (b == 0) {
        kiln_comm_set_step(d->c, (int64_t)kiln_model_step(d->m) + 1);
        d->steps++;
    }
    if (b == d->nbuckets - 1)
        d->sync.grads[d->ngrad] = d->s->cfg.stop && *d->s->cfg.stop ? 1.0f : 0.0f;
    return 0;
}

/* Copies every other replica's slice of pflat into the model (which: the
 * parameters or an optimizer slot). */
static void take_peers(kiln__allreduce *d, int which)
{
    int w = kiln_comm_world_size(d->c), r = kiln_comm_rank(d->c);
    for (int p = 0; p < w; p++) {
        size_t lo, hi;
        if (p == r) continue;
        kiln_comm_slice(d->c, d->ngrad + 1, p, &lo, &hi);
        kiln__model_flat_copy(d->m, which, d->pflat, lo, hi, 0);
    }
}

/* kiln_model_apply_grads, sharded (see the top of the file). */
static int apply_sharded(void *ud, kiln_model *m)
{
    kiln__allreduce *d = ud;
    const float *srcs[KILN_OPT_MAX_SRC];
    int w = kiln_comm_world_size(d->c);
    double t0 = d->profile ? mono_s() : 0;
    if (kiln_comm_reduce_scatter_begin(d->c, d->sync.grads, d->ngrad + 1, srcs) != KILN_OK)
        return -1;
    if (d->profile) d->t_wait += mono_s() - t0;
    /* the new parameters go straight into the next replica's copy, and from
     * there to the others' (one replica more: nothing to copy) */
    int r = kiln_comm_rank(d->c), next = (r + 1) % w;
    if (kiln__model_apply_shard(m, srcs, w, d->lo, d->hi, d->views[next], 0)) return -1;
    size_t top = d->hi < d->ngrad ? d->hi : d->ngrad;
    for (int p = 0; p < w; p++)
        if (p != r && p != next && top > d->lo)
            memcpy(d->views[p] + d->lo, d->views[next] + d->lo, (top - d->lo) * sizeof(float));
    if (d->hi > d->ngrad) { /* the last slice: the stop flag, summed in rank order */
        float acc = srcs[0][d->ngrad];
        for (int p = 1; p < w; p++)
            acc += srcs[p][d->ngrad];
        for (int p = 0; p < w; p++)
            d->views[p][d->ngrad] = acc;
    }
    double t1 = d->profile ? mono_s() : 0;
    if (d->profile) d->t_apply += t1 - t0;
    if (kiln_comm_allgather_written(d->c, d->pflat, d->ngrad + 1) != KILN_OK) return -1;
    take_peers(d, 0);
    /* every replica has left the reduce-scatter: our gradient buffer is ours */
    d->sync.grads[d->ngrad] = d->pflat[d->ngrad];
    if (d->profile) d->t_ready += mono_s() - t1;
    return 0;
}

static int on_bucket_wait(void *ud, int b)
{
    kiln__allreduce *d = ud;
    if (d->inline_ar || d->measure) return 0;
    double t0 = d->profile ? mono_s() : 0;
    kiln_err e = kiln_comm_wait(d->c, d->tickets[b]);
    if (d->profile) d->t_wait += mono_s() - t0;
    return e != KILN_OK;
}

kiln_err kiln__ar_attach(kiln_strategy *s, kiln_model *m)
{
    char err[400];
    kiln_err e = KILN_OK;
    if (s->world <= 1 && !s->cfg.always_sync) return KILN_OK; /* the fused step */
    kiln__allreduce *d = calloc(1, sizeof *d);
    if (!d) return kiln__strategy_fail(s, KILN_ENOMEM, "out of memory");
    d->s = s;
    d->m = m;
    const char *pe = getenv("KILN_DIST_PROFILE");
    d->profile = pe && *pe && strcmp(pe, "0") != 0;
    for (int i = MEASURE_NOCOMM; pe && i <= MEASURE_LOCKSTEP; i++)
        if (strcmp(pe, measure_names[i]) == 0) d->measure = i;
    d->inline_ar = s->cfg.inline_allreduce;
    size_t bucket_bytes = s->cfg.bucket_bytes;
    kiln_comm_config cfg;
    if (s->have_tf && s->tf.world_size > 1) {
        cfg = kiln_comm_config_from_tf(&s->tf);
    } else {
        cfg = (kiln_comm_config){.rank = s->rank,
                                 .world_size = s->world,
                                 .backend = KILN_COLL_SHM,
                                 .job_key = s->cfg.job_key};
    }
    if (kiln_comm_init(&cfg, &d->c, err, sizeof err) != KILN_OK) {
        e = kiln__strategy_fail(s, KILN_EIO, "replica %d of %d: joining the all-reduce group: %s",
                                s->rank, s->world, err);
        goto out;
    }
    d->ngrad = kiln_model_grad_count(m);
    d->nbuckets = kiln_model_grad_buckets(m, bucket_bytes, 1, NULL, NULL, 0);
    if (d->nbuckets > MAX_BUCKETS) {
        e = kiln__strategy_fail(s, KILN_EINVAL, "bucket_bytes=%zu makes %d buckets (at most %d)",
                                bucket_bytes, d->nbuckets, MAX_BUCKETS);
        goto out;
    }
    float *g = kiln_comm_alloc_f32(d->c, d->ngrad + 1);
    if (!g) {
        e = kiln__strategy_fail(s, KILN_EIO, "gradient buffer: %s", kiln_comm_error(d->c));
        goto out;
    }
    d->sync = (kiln_grad_sync){.grads = g,
                               .extra = 1,
                               .bucket_bytes = bucket_bytes,
                               .ud = d,
                               .bucket_ready = on_bucket_ready,
                               .bucket_wait = on_bucket_wait};
    /* the measuring modes skip the exchange, which the sharded step cannot */
    /* (and the sharded step updates host parameters: the CPU's path only) */
    if (s->cfg.shard_optimizer && !d->measure && kiln_comm_world_size(d->c) > 1 &&
        !kiln__model_on_device(m) && kiln_comm_sharding(d->c) &&
        kiln_comm_world_size(d->c) <= KILN_OPT_MAX_SRC) {
        if (!(d->pflat = kiln_comm_alloc_f32(d->c, d->ngrad + 1))) {
            e = kiln__strategy_fail(s, KILN_EIO, "parameter buffer: %s", kiln_comm_error(d->c));
            kiln_comm_free(d->c, g);
            goto out;
        }
        if (kiln_comm_shared_views(d->c, d->pflat, d->ngrad + 1, d->views) != KILN_OK) {
            e = kiln__strategy_fail(s, KILN_EIO, "parameter buffer: %s", kiln_comm_error(d->c));
            kiln_comm_free(d->c, d->pflat);
            kiln_comm_free(d->c, g);
            goto out;
        }
        d->sharded = 1;
        kiln_comm_slice(d->c, d->ngrad + 1, kiln_comm_rank(d->c), &d->lo, &d->hi);
        d->sync.bucket_ready = on_bucket_ready_sharded;
        d->sync.bucket_wait = NULL;
        d->sync.apply = apply_sharded;
    }
    s->ar = d;
    d = NULL;
out:
    if (d) {
        kiln_comm_destroy(d->c);
        free(d);
    }
    return e;
}

void kiln__ar_free(kiln_strategy *s)
{
    kiln__allreduce *d = s->ar;
    if (!d) return;
    if (d->c) kiln_comm_wait_all(d->c); /* nothing may still read the buffer */
    if (d->profile && d->steps && d->sharded)
        fprintf(stderr,
                "kiln: replica %d: %llu steps, sharded optimizer: %.3f ms/step waiting for "
                "the replicas' gradients, %.3f ms/step in the update of this slice (sum "
                "fused), %.3f ms/step in the all-gather and copies\n",
                kiln_comm_rank(d->c), (unsigned long long)d->steps,
                1e3 * d->t_wait / (double)d->steps, 1e3 * d->t_apply / (double)d->steps,
                1e3 * d->t_ready / (double)d->steps);
    else if (d->profile && d->steps && d->measure)
        fprintf(stderr, "kiln: replica %d: %llu steps, %s: %.3f ms/step %s\n", kiln_comm_rank(d->c),
                (unsigned long long)d->steps,
                d->measure == MEASURE_LOCKSTEP
                    ? "lockstep (measuring only: the single-replica step on all the data, "
                      "nothing exchanged)"
                    : "no communication (measuring only: the replicas train apart)",
                1e3 * d->t_ready / (double)d->steps,
                d->measure == MEASURE_LOCKSTEP ? "in the barrier" : "in the sync callbacks");
    else if (d->profile && d->steps)
        fprintf(stderr,
                "kiln: replica %d: %llu steps, %d bucket(s): %.3f ms/step in all-reduce "
                "calls (%s), %.3f ms/step waiting before the update\n",
                kiln_comm_rank(d->c), (unsigned long long)d->steps, d->nbuckets,
                1e3 * d->t_ready / (double)d->steps, d->inline_ar ? "inline" : "queued",
                1e3 * d->t_wait / (double)d->steps);
    kiln_comm_free(d->c, d->pflat);
    kiln_comm_free(d->c, d->sync.grads);
    kiln_comm_destroy(d->c);
    free(d);
    s->ar = NULL;
}

/* The communicator's failure as the strategy's error. */
static kiln_err comm_failed(kiln_strategy *s, const char *what)
{
    return kiln__strategy_fail(s, KILN_EIO, "replica %d of %d: %s: %s", s->rank, s->world, what,
                               kiln_comm_error(s->ar->c));
}

/* $KILN_DIST_PROFILE=lockstep: the barrier that follows each fused step. */
static kiln_err lockstep_barrier(kiln__allreduce *d)
{
    double t0 = mono_s();
    kiln_comm_set_step(d->c, (int64_t)kiln_model_step(d->m));
    kiln_err e = kiln_comm_barrier(d->c);
    d->t_ready += mono_s() - t0;
    d->steps++;
    return e;
}

/* Calls that need a group: none (one replica) is fine for most, a no-op. */
static int grouped(const kiln_strategy *s)
{
    return s->ar != NULL;
}

kiln_err kiln__ar_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       int global_n, float *loss, int *correct)
{
    if (!grouped(s)) {
        if (kiln_model_train_step(m, x, y, n, loss, correct))
            return kiln__strategy_fail(s, KILN_EINVAL, "%s", kiln_model_error(m));
        return KILN_OK;
    }
    if (s->ar->measure == MEASURE_LOCKSTEP) {
        if (kiln_model_train_step(m, x, y, n, loss, correct))
            return kiln__strategy_fail(s, KILN_EINVAL, "%s", kiln_model_error(m));
        return lockstep_barrier(s->ar) == KILN_OK ? KILN_OK : comm_failed(s, "lockstep barrier");
    }
    int N = global_n > 0 ? global_n : n * s->world;
    float scale = N > 0 ? (float)n / (float)N : 0.0f;
    if (kiln_model_compute_grads(m, x, y, n, scale, &s->ar->sync, loss, correct) ||
        kiln_model_apply_grads(m, &s->ar->sync)) {
        if (*kiln_comm_error(s->ar->c)) return comm_failed(s, "training step");
        return kiln__strategy_fail(s, KILN_EINVAL, "%s", kiln_model_error(m));
    }
    return KILN_OK;
}

const kiln_grad_sync *kiln_strategy_grad_sync(const kiln_strategy *s)
{
    return s->ar ? &s->ar->sync : NULL;
}

int kiln_strategy_stop_requested(const kiln_strategy *s)
{
    if (!s->ar || s->ar->measure == MEASURE_LOCKSTEP) return s->cfg.stop && *s->cfg.stop;
    return s->ar->sync.grads[s->ar->ngrad] > 0.5f;
}

int kiln_strategy_one_host(const kiln_strategy *s)
{
    return !s->ar || strcmp(kiln_comm_backend_name(s->ar->c), "shm") == 0;
}

kiln_err kiln_strategy_broadcast(kiln_strategy *s, void *buf, size_t bytes)
{
    if (!grouped(s)) return KILN_OK;
    if (kiln_comm_broadcast(s->ar->c, buf, bytes, 0) != KILN_OK)
        return comm_failed(s, "receiving the chief's state");
    return KILN_OK;
}

kiln_err kiln_strategy_compare(kiln_strategy *s, const void *buf, size_t bytes, int *first_differs)
{
    int nd = 0, first = -1;
    *first_differs = -1;
    if (!grouped(s)) return KILN_OK;
    if (kiln_comm_check_identical(s->ar->c, buf, bytes, &nd, &first) != KILN_OK)
        return comm_failed(s, "comparing with the chief");
    *first_differs = nd > 0 ? first : -1;
    return KILN_OK;
}

kiln_err kiln_strategy_broadcast_model(kiln_strategy *s, kiln_model *m)
{
    kiln_err e = KILN_OK;
    if (!grouped(s)) goto out;
    uint64_t step = kiln_model_step(m);
    if ((e = kiln_strategy_broadcast(s, &step, sizeof step)) != KILN_OK) goto out;
    kiln_model_set_step(m, step);
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if ((e = kiln_strategy_broadcast(s, b.data, b.size * sizeof(float))) != KILN_OK) goto out;
    }
    uint8_t rng[KILN_RNG_STATE_SIZE];
    kiln_rng_encode(kiln_model_rng(m), rng);
    if ((e = kiln_strategy_broadcast(s, rng, sizeof rng)) != KILN_OK) goto out;
    kiln_rng_decode(kiln_model_rng(m), rng);
out:
    return e;
}

kiln_err kiln_strategy_check_replicas(kiln_strategy *s, kiln_model *m, int *first_differs,
                                      const char **buffer)
{
    *first_differs = -1;
    if (buffer) *buffer = NULL;
    for (size_t i = 0; grouped(s) && i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (!b.is_param) continue;
        int first = -1;
        kiln_err e = kiln_strategy_compare(s, b.data, b.size * sizeof(float), &first);
        if (e != KILN_OK) return e;
        if (first >= 0) {
            *first_differs = first;
            if (buffer) *buffer = b.name;
            break;
        }
    }
    return KILN_OK;
}

const char *kiln_strategy_measuring(const kiln_strategy *s)
{
    return s->ar ? measure_names[s->ar->measure] : NULL;
}

int kiln_strategy_sharded(const kiln_strategy *s)
{
    return s->ar && s->ar->sharded;
}

kiln_err kiln_strategy_gather_state(kiln_strategy *s, kiln_model *m)
{
    kiln__allreduce *d = s->ar;
    if (!d || !d->sharded) return KILN_OK;
    if (m != d->m)
        return kiln__strategy_fail(s, KILN_EINVAL, "gather_state: not the attached model");
    for (int which = 1; which <= kiln__model_slots(m); which++) {
        kiln__model_flat_copy(m, which, d->pflat, d->lo, d->hi, 1);
        if (kiln_comm_allgather_f32(d->c, d->pflat, d->ngrad + 1) != KILN_OK)
            return comm_failed(s, "gathering the optimizer state");
        take_peers(d, which);
    }
    return KILN_OK;
}

kiln_err kiln_strategy_sum(kiln_strategy *s, double *v, int n)
{
    float f[8];
    if (n < 0 || n > 8) return kiln__strategy_fail(s, KILN_EINVAL, "sum: n=%d (at most 8)", n);
    if (!grouped(s)) return KILN_OK;
    /* float is plenty for logged statistics */
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    if (kiln_comm_allreduce_sum_f32(s->ar->c, f, (size_t)n) != KILN_OK)
        return comm_failed(s, "summing statistics");
    for (int i = 0; i < n; i++)
        v[i] = f[i];
    return KILN_OK;
}

/* $KILN_DIST_PROFILE=lockstep: the caller's callbacks, after the barrier */
typedef struct lockstep_cb {
    kiln__allreduce *d;
    const kiln_callbacks *user;
    int failed;
} lockstep_cb;

static int ls_epoch_begin(void *ud, kiln_model *m, uint64_t epoch, uint64_t spe)
{
    const kiln_callbacks *u = ((lockstep_cb *)ud)->user;
    return u->on_epoch_begin ? u->on_epoch_begin(u->ud, m, epoch, spe) : 0;
}

static int ls_step_end(void *ud, kiln_model *m, const kiln_fit_info *info)
{
    lockstep_cb *l = ud;
    if (lockstep_barrier(l->d) != KILN_OK) {
        l->failed = 1;
        return 1;
    }
    return l->user->on_step_end ? l->user->on_step_end(l->user->ud, m, info) : 0;
}

static int ls_epoch_end(void *ud, kiln_model *m, const kiln_fit_info *info)
{
    const kiln_callbacks *u = ((lockstep_cb *)ud)->user;
    return u->on_epoch_end ? u->on_epoch_end(u->ud, m, info) : 0;
}

int kiln_strategy_fit(kiln_strategy *s, kiln_model *m, const kiln_data *data,
                      const kiln_fit_opts *opts, const kiln_callbacks *cb)
{
    static const kiln_callbacks none = {0};
    if (s->kind == KILN_STRATEGY_PARAMETER_SERVER || s->role != KILN_ROLE_REPLICA || s->m != m) {
        kiln__strategy_fail(s, KILN_EINVAL,
                            "fit: an all-reduce replica attached to this model only");
        return -1;
    }
    kiln_fit_opts fo = *opts;
    fo.rank = (uint32_t)s->rank;
    fo.world = (uint32_t)s->world;
    fo.sync = kiln_strategy_grad_sync(s);
    /* Every replica: one process of the bound, on all the data. Its steps
     * count local batches, so a caller that counts examples by the global
     * batch's position in its epoch (kiln-train) miscounts the one step that
     * falls on the global epoch's short last batch: 0.2% of a 300-step run. */
    if (s->ar && s->ar->measure == MEASURE_LOCKSTEP) {
        lockstep_cb l = {.d = s->ar, .user = cb ? cb : &none};
        kiln_callbacks w = {.ud = &l,
                            .on_epoch_begin = ls_epoch_begin,
                            .on_step_end = ls_step_end,
                            .on_epoch_end = ls_epoch_end};
        fo.rank = 0;
        fo.world = 1;
        fo.sync = NULL;
        int r = kiln_model_fit(m, data, &fo, &w);
        if (l.failed) {
            comm_failed(s, "lockstep barrier");
            return -1;
        }
        if (r < 0) kiln__strategy_fail(s, KILN_EINVAL, "training failed: %s", kiln_model_error(m));
        return r;
    }
    int r = kiln_model_fit(m, data, &fo, cb);
    if (r < 0) {
        if (s->ar && *kiln_comm_error(s->ar->c))
            comm_failed(s, "training failed");
        else
            kiln__strategy_fail(s, KILN_EINVAL, "training failed: %s", kiln_model_error(m));
    }
    return r;
}
