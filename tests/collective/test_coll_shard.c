/* test_coll_shard.c - the shm backend's sharded steps (kiln/collective.h:
 * ZeRO-1) with 1..4 forked ranks, several rounds in a row on the same
 * buffers (as training steps do):
 *
 *  - kiln_comm_slice tiles [0, count) with one slice per rank, in rank order;
 *  - kiln_comm_reduce_scatter_begin hands out every rank's copy of the
 *    gradient buffer, and each rank's slice summed in rank order from them is
 *    bit for bit what kiln_comm_allreduce_sum_f32 gives there (a control
 *    all-reduce of the same inputs, kiln__sum_ref as the reference);
 *  - kiln_comm_allgather_f32 (push) and kiln_comm_shared_views +
 *    kiln_comm_allgather_written (the caller writes) both leave every rank
 *    with every rank's slice;
 *  - a rank passing another buffer to the all-gather is refused, naming it;
 *  - the backend without shared memory (one rank) still works. */
#include "collective/coll_int.h"
#include "collective/shm/sum.h"
#include "coll_test.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define ROUNDS 4

static float gen(int rank, size_t i, int round)
{
    uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull ^
                 (uint64_t)round * 0x94d049bb133111ebull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    float m = (float)(x % 2000001) / 1000.0f - 1000.0f;
    return ldexpf(m, (int)((x >> 40) % 30) - 15);
}

typedef struct plan {
    const char *key;
    size_t count;
    int mismatch; /* rank 1 passes another buffer to the all-gather */
} plan;

static int rank_main(int rank, int world, void *arg)
{
    const plan *pl = arg;
    kiln_comm_config cfg = {.rank = rank,
                            .world_size = world,
                            .backend = KILN_COLL_SHM,
                            .job_key = pl->key,
                            .timeout_s = 10};
    kiln_comm *c = NULL;
    char err[512];
    int bad = 0;
    size_t n = pl->count;
    if (kiln_comm_init(&cfg, &c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, err);
        return 1;
    }
    float *g = kiln_comm_alloc_f32(c, n), *p = kiln_comm_alloc_f32(c, n);
    float *other = kiln_comm_alloc_f32(c, n);
    float *ctl = malloc((n ? n : 1) * sizeof *ctl), *want = malloc((n ? n : 1) * sizeof *want);
    if (!g || !p || !other || !ctl || !want) return 1;
    if (!kiln_comm_sharding(c) && world > 1) return 1;
    size_t end = 0;
    for (int r = 0; r < world; r++) { /* the slices tile [0, n) in rank order */
        size_t lo, hi;
        kiln_comm_slice(c, n, r, &lo, &hi);
        bad |= lo != end || hi < lo;
        end = hi;
    }
    bad |= end != n;
    size_t lo, hi;
    kiln_comm_slice(c, n, rank, &lo, &hi);
    float *views[CT_MAX_RANKS];
    if (kiln_comm_shared_views(c, p, n, views) != KILN_OK) return 1;
    for (int round = 0; round < ROUNDS && !bad; round++) {
        for (size_t i = 0; i < n; i++)
            g[i] = ctl[i] = gen(rank, i, round);
        /* the control: a plain all-reduce of the same inputs */
        if (kiln_comm_allreduce_sum_f32(c, ctl, n) != KILN_OK) return 1;
        const float *srcs[CT_MAX_RANKS];
        if (kiln_comm_reduce_scatter_begin(c, g, n, srcs) != KILN_OK) return 1;
        const float *at[CT_MAX_RANKS];
        for (int q = 0; q < world; q++)
            at[q] = srcs[q] + lo;
        if (hi > lo) kiln__sum_ref(want + lo, NULL, at, world, hi - lo);
        for (size_t i = lo; i < hi; i++)
            if (memcmp(&want[i], &ctl[i], sizeof(float)) != 0) {
                if (!bad)
                    fprintf(stderr, "rank %d: slice sum [%zu] %g vs all-reduce %g\n", rank, i,
                            want[i], ctl[i]);
                bad = 1;
            }
        /* all-gather the slice sums: push, then written by hand */
        for (size_t i = lo; i < hi; i++)
            p[i] = want[i];
        if (round % 2 == 0) {
            if (kiln_comm_allgather_f32(c, p, n) != KILN_OK) return 1;
        } else {
            for (int q = 0; q < world; q++)
                if (q != rank && hi > lo)
                    memcpy(views[q] + lo, want + lo, (hi - lo) * sizeof(float));
            if (kiln_comm_allgather_written(c, p, n) != KILN_OK) return 1;
        }
        bad |= n && memcmp(p, ctl, n * sizeof(float)) != 0;
        if (bad)
            fprintf(stderr, "rank %d of %d, %zu floats, round %d: wrong result\n", rank, world, n,
                    round);
    }
    if (pl->mismatch) {
        kiln_err e = kiln_comm_allgather_f32(c, rank == 1 ? other : p, n);
        int caught = e != KILN_OK && strstr(kiln_comm_error(c), "different buffers");
        if (!caught) bad = 1;
        if (bad) fprintf(stderr, "rank %d: mismatch not caught: %s\n", rank, kiln_comm_error(c));
    }
    free(ctl);
    free(want);
    kiln_comm_free(c, g);
    kiln_comm_free(c, p);
    kiln_comm_free(c, other);
    kiln_comm_destroy(c);
    return bad;
}

static void run(int world, size_t count, int mismatch)
{
    char key[64];
    int st[CT_MAX_RANKS];
    ct_key(key, sizeof key, "shard");
    plan p = {.key = key, .count = count, .mismatch = mismatch};
    ct_run(world, rank_main, &p, 60, st);
    for (int r = 0; r < world; r++)
        CHECK_MSG(ct_exited_ok(st[r]), "world %d, %zu floats%s: rank %d failed (status 0x%x)",
                  world, count, mismatch ? ", mismatched buffers" : "", r, st[r]);
}

int main(void)
{
    static const size_t sizes[] = {1, 17, 33, 1000, 70001};
    for (int world = 1; world <= 4; world++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            run(world, sizes[i], 0);
    run(2, 1000, 1);
    run(3, 70001, 1);
    TEST_DONE();
}
