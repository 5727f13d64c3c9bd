/* tests/runtime/test_zero.c - the sharded optimizer step (ZeRO-1,
 * kiln_strategy_config.shard_optimizer) against the unsharded one, without
 * processes: the replicas are models in this process and the collectives are
 * done by hand, the way strategy/allreduce.c does them over shared memory.
 *
 *  - the kernels: kiln_sgd_shard / kiln_adam_shard (the thread pool's slices,
 *    the gradient summed in the update's pass) are bit-identical to their
 *    plain references kiln_*_shard_ref, and those to "sum first in rank
 *    order, then kiln_*_update_ref" (same additions, same order), for 2, 3
 *    and KILN_OPT_MAX_SRC sources (the two-source loops and the tiled one),
 *    with and without the parameter copy-out, at odd sizes;
 *  - the model step: two replicas on halves of each batch, each updating only
 *    its slice of the flat layout (the all-reduce's slices: [0, mid) and
 *    [mid, n + 1), the stop flag's float last) and then taking the other's
 *    updated parameters, hold after STEPS steps parameters bit-identical to
 *    each other and to two replicas that all-reduce (summed in rank order)
 *    and update everything: the summation order is the same, so no
 *    tolerance is needed; the same through the reference loops (ref = 1);
 *  - the optimizer state, gathered slice by slice (kiln__model_flat_copy),
 *    is bit-identical to the unsharded replicas' state (what a checkpoint
 *    holds, so resume is unchanged);
 *  - the comparison can fail: a step on one side only shows. */
#include "kiln/train.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "rt_test.h"
#include "small_models.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#define STEPS 5
#define B     32

static kiln_data train;

/* ---- kernels ---- */

static void kernels(int adam, int nsrc, int copy_out)
{
    kiln_rng r;
    kiln_rng_seed(&r, 11u + (unsigned)nsrc);
    const size_t sizes[3] = {1, 37, 4099};
    kiln_opt_shard fast[3], ref[3];
    float *src[3][KILN_OPT_MAX_SRC], *sum[3];
    float *pf[3], *pr[3], *mf[3], *mr[3], *vf[3], *vr[3], *of[3], *orf[3], *ps[3], *ms[3], *vs[3];
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        for (int s = 0; s < nsrc; s++)
            src[k][s] = rand_buf(&r, n, -1.0f, 1.0f);
        sum[k] = kiln_falloc(n);
        for (size_t i = 0; i < n; i++) { /* the all-reduce's order: rank 0 first */
            float acc = src[k][0][i];
            for (int s = 1; s < nsrc; s++)
                acc += src[k][s][i];
            sum[k][i] = acc;
        }
        pf[k] = rand_buf(&r, n, -1.0f, 1.0f);
        mf[k] = rand_buf(&r, n, -0.1f, 0.1f);
        vf[k] = rand_buf(&r, n, 0.0f, 0.1f);
        pr[k] = copy_buf(pf[k], n), mr[k] = copy_buf(mf[k], n), vr[k] = copy_buf(vf[k], n);
        ps[k] = copy_buf(pf[k], n), ms[k] = copy_buf(mf[k], n), vs[k] = copy_buf(vf[k], n);
        of[k] = kiln_falloc(n), orf[k] = kiln_falloc(n);
        fast[k] = (kiln_opt_shard){.p = pf[k],
                                   .s1 = mf[k],
                                   .s2 = adam ? vf[k] : NULL,
                                   .nsrc = nsrc,
                                   .pout = copy_out ? of[k] : NULL,
                                   .n = n};
        ref[k] = fast[k];
        ref[k].p = pr[k], ref[k].s1 = mr[k], ref[k].s2 = adam ? vr[k] : NULL;
        ref[k].pout = copy_out ? orf[k] : NULL;
        for (int s = 0; s < nsrc; s++)
            fast[k].src[s] = ref[k].src[s] = src[k][s];
    }
    for (int t = 1; t <= 3; t++) {
        if (adam)
            kiln_adam_shard(fast, 3, 0.01f, 0.9f, 0.999f, 1e-7f, (uint64_t)t);
        else
            kiln_sgd_shard(fast, 3, 0.05f, 0.9f);
        for (int k = 0; k < 3; k++) {
            if (adam) {
                kiln_adam_shard_ref(&ref[k], 0.01f, 0.9f, 0.999f, 1e-7f, (uint64_t)t);
                kiln_adam_update_ref(ps[k], sum[k], ms[k], vs[k], sizes[k], 0.01f, 0.9f, 0.999f,
                                     1e-7f, (uint64_t)t);
            } else {
                kiln_sgd_shard_ref(&ref[k], 0.05f, 0.9f);
                kiln_sgd_update_ref(ps[k], sum[k], ms[k], sizes[k], 0.05f, 0.9f);
            }
        }
    }
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        CHECK_MSG(bits_equal(pf[k], pr[k], n) && bits_equal(mf[k], mr[k], n) &&
                      (!adam || bits_equal(vf[k], vr[k], n)),
                  "%s shard, %d sources, n=%zu: fast differs from the reference",
                  adam ? "adam" : "sgd", nsrc, n);
        CHECK_MSG(bits_equal(pr[k], ps[k], n) && bits_equal(mr[k], ms[k], n) &&
                      (!adam || bits_equal(vr[k], vs[k], n)),
                  "%s shard, %d sources, n=%zu: fused sum differs from sum-then-update",
                  adam ? "adam" : "sgd", nsrc, n);
        if (copy_out)
            CHECK_MSG(bits_equal(of[k], pf[k], n) && bits_equal(orf[k], pr[k], n),
                      "%s shard: the copied-out parameters are not the parameters",
                      adam ? "adam" : "sgd");
        for (int s = 0; s < nsrc; s++)
            kiln_ffree(src[k][s]);
        kiln_ffree(sum[k]);
        kiln_ffree(pf[k]), kiln_ffree(pr[k]), kiln_ffree(ps[k]);
        kiln_ffree(mf[k]), kiln_ffree(mr[k]), kiln_ffree(ms[k]);
        kiln_ffree(vf[k]), kiln_ffree(vr[k]), kiln_ffree(vs[k]);
        kiln_ffree(of[k]), kiln_ffree(orf[k]);
    }
}

/* ---- the model step ---- */

/* cnn: 0 = MLP, 1 = CNN with batch norm */
static kiln_model *make(int cnn, kiln_optimizer opt, int batch)
{
    return small_model(cnn ? SMALL_CNN | SMALL_BN : SMALL_MLP, opt, batch);
}

/* The all-reduce's slice of rank p of 2 over count floats (shm.c's slice_of:
 * 16-float aligned). */
static void slice2(size_t count, int p, size_t *lo, size_t *hi)
{
    size_t per = (count + 1) / 2;
    per = (per + 15) / 16 * 16;
    size_t a = (size_t)p * per;
    *lo = a < count ? a : count;
    *hi = a + per < count ? a + per : count;
}

static void model_step(int cnn, kiln_optimizer opt, int ref, const char *what)
{
    kiln_model *u0 = make(cnn, opt, B / 2), *u1 = make(cnn, opt, B / 2);
    kiln_model *z0 = make(cnn, opt, B / 2), *z1 = make(cnn, opt, B / 2);
    CHECK(u0 && u1 && z0 && z1);
    if (!u0 || !u1 || !z0 || !z1) goto out;
    size_t n = kiln_model_grad_count(u0), count = n + 1; /* + the stop flag */
    float *ug0 = kiln_falloc(count), *ug1 = kiln_falloc(count);
    float *zg0 = kiln_falloc(count), *zg1 = kiln_falloc(count);
    float *pflat = kiln_falloc(count), *f0 = kiln_falloc(count), *f1 = kiln_falloc(count);
    kiln_grad_sync us0 = {.grads = ug0, .extra = 1, .bucket_bytes = 1024}, us1 = us0;
    kiln_grad_sync zs0 = us0, zs1 = us0;
    us1.grads = ug1, zs0.grads = zg0, zs1.grads = zg1;
    size_t lo0, hi0, lo1, hi1;
    slice2(count, 0, &lo0, &hi0);
    slice2(count, 1, &lo1, &hi1);
    int ok = 1;
    for (int st = 0; st < STEPS; st++) {
        const float *x = train.x + (size_t)st * B * train.dim, *x1 = x + (size_t)B / 2 * train.dim;
        const uint8_t *y = train.y + (size_t)st * B, *y1 = y + B / 2;
        ok &= kiln_model_compute_grads(u0, x, y, B / 2, 0.5f, &us0, NULL, NULL) == 0;
        ok &= kiln_model_compute_grads(u1, x1, y1, B / 2, 0.5f, &us1, NULL, NULL) == 0;
        ok &= kiln_model_compute_grads(z0, x, y, B / 2, 0.5f, &zs0, NULL, NULL) == 0;
        ok &= kiln_model_compute_grads(z1, x1, y1, B / 2, 0.5f, &zs1, NULL, NULL) == 0;
        for (size_t i = 0; i < n; i++) /* the all-reduce, rank 0 first */
            ug0[i] = ug1[i] = ug0[i] + ug1[i];
        ok &= kiln_model_apply_grads(u0, &us0) == 0;
        ok &= kiln_model_apply_grads(u1, &us1) == 0;
        /* sharded: each its slice, summed in the update, then the all-gather */
        const float *srcs[2] = {zg0, zg1};
        ok &= kiln__model_apply_shard(z0, srcs, 2, lo0, hi0, pflat, ref) == 0;
        ok &= kiln__model_apply_shard(z1, srcs, 2, lo1, hi1, pflat, ref) == 0;
        kiln__model_flat_copy(z0, 0, pflat, lo1, hi1, 0);
        kiln__model_flat_copy(z1, 0, pflat, lo0, hi0, 0);
    }
    CHECK_MSG(ok, "%s: %s", what, kiln_model_error(z0));
    CHECK(kiln_model_step(z0) == STEPS && kiln_model_step(z1) == STEPS);
    CHECK_MSG(params_identical(z0, z1), "%s: the sharded replicas diverged", what);
    CHECK_MSG(params_identical(z0, u0), "%s: sharded parameters differ from unsharded", what);
    /* the optimizer state, gathered as for a checkpoint */
    for (int which = 1; which <= kiln__model_slots(z0); which++) {
        kiln__model_flat_copy(z0, which, f0, lo0, hi0, 1); /* rank 0's slice */
        kiln__model_flat_copy(z1, which, f0, lo1, hi1, 1); /* rank 1's */
        kiln__model_flat_copy(u0, which, f1, 0, count, 1);
        CHECK_MSG(bits_equal(f0, f1, n), "%s: gathered optimizer slot %d differs", what, which);
    }
    printf("%s%s: %d steps, %zu parameters, slices [0,%zu) [%zu,%zu): bit-identical\n", what,
           ref ? " (reference loops)" : "", STEPS, n, hi0, lo1, hi1);
    /* the comparison can fail */
    ok = kiln_model_compute_grads(u0, train.x, train.y, B / 2, 0.5f, &us0, NULL, NULL) == 0 &&
         kiln_model_apply_grads(u0, &us0) == 0;
    CHECK_MSG(ok && !params_identical(z0, u0), "%s: one more step left no trace", what);
    kiln_ffree(ug0), kiln_ffree(ug1), kiln_ffree(zg0), kiln_ffree(zg1);
    kiln_ffree(pflat), kiln_ffree(f0), kiln_ffree(f1);
out:
    kiln_model_free(u0), kiln_model_free(u1), kiln_model_free(z0), kiln_model_free(z1);
}

int main(void)
{
    kiln_set_threads(2);
    const int nsrcs[] = {2, 3, KILN_OPT_MAX_SRC};
    for (int adam = 0; adam < 2; adam++)
        for (int k = 0; k < 3; k++)
            for (int copy = 0; copy < 2; copy++)
                kernels(adam, nsrcs[k], copy);
    kiln_data full = {0};
    char err[512];
    if (kiln_load_fashion_mnist(NULL, 1, &full, err, sizeof(err))) {
        fprintf(stderr, "Fashion-MNIST not available: %s\n", err);
        CHECK(0);
        TEST_DONE();
    }
    train = (kiln_data){.x = full.x, .y = full.y, .n = (STEPS + 1) * B, .dim = full.dim};
    model_step(0, kiln_sgd(0.05f, 0.9f), 0, "mlp sgd");
    model_step(0, kiln_adam(0.001f), 0, "mlp adam");
    model_step(0, kiln_sgd(0.05f, 0.9f), 1, "mlp sgd");
    model_step(1, kiln_sgd(0.05f, 0.9f), 0, "cnn+bn sgd");
    model_step(1, kiln_adam(0.001f), 1, "cnn+bn adam");
    kiln_data_free(&full);
    TEST_DONE();
}
