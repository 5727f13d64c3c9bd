/* test_coll_shm.c - the shm all-reduce, broadcast, barrier and checksum check
 * with 1..4 forked ranks.
 *
 * Every rank checks its all-reduce output against the reference sum (rank
 * order, kiln__sum_ref) of all ranks' inputs, bit for bit: the backend
 * promises exactly that order whatever the chunking. Every rank also
 * publishes a hash of each output, and the parent checks that all ranks
 * hold identical bits. Sizes cover 0, 1, odd counts, slice and chunk
 * boundaries, and several chunks (small chunk_bytes makes that cheap). */
#include "collective/coll_int.h"
#include "collective/shm/sum.h"
#include "coll_test.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define NSIZES_MAX 32

typedef struct plan {
    const char *key;
    size_t chunk_bytes;
    const size_t *sizes;
    int nsizes;
    uint64_t (*hashes)[NSIZES_MAX]; /* [rank][size index], shared */
} plan;

/* Input of `rank` at element i: varied magnitudes and signs so the order of
 * additions shows in the bits of the sum. */
static float gen(int rank, size_t i, size_t salt)
{
    uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull ^ salt;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    float m = (float)(x % 2000001) / 1000.0f - 1000.0f;
    return ldexpf(m, (int)((x >> 40) % 30) - 15);
}

static int rank_main(int rank, int world, void *arg)
{
    const plan *p = arg;
    kiln_comm_config cfg = {.rank = rank,
                            .world_size = world,
                            .backend = KILN_COLL_SHM,
                            .job_key = p->key,
                            .timeout_s = 10,
                            .chunk_bytes = p->chunk_bytes};
    kiln_comm *c = NULL;
    char err[512];
    int rc = 1;
    size_t maxn = 1;
    float *buf = NULL, *want = NULL, *in[CT_MAX_RANKS] = {0};
    const float *cin[CT_MAX_RANKS];

    for (int i = 0; i < p->nsizes; i++)
        if (p->sizes[i] > maxn) maxn = p->sizes[i];
    if (kiln_comm_init(&cfg, &c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, err);
        goto out;
    }
    buf = malloc(maxn * sizeof(float));
    want = malloc(maxn * sizeof(float));
    for (int r = 0; r < world; r++)
        in[r] = malloc(maxn * sizeof(float));
    for (int si = 0; si < p->nsizes; si++) {
        size_t n = p->sizes[si];
        for (int r = 0; r < world; r++) {
            for (size_t i = 0; i < n; i++)
                in[r][i] = gen(r, i, n);
            cin[r] = in[r];
        }
        kiln__sum_ref(want, NULL, cin, world, n);
        if (n) memcpy(buf, in[rank], n * sizeof(float));
        if (kiln_comm_allreduce_sum_f32(c, buf, n) != KILN_OK) {
            fprintf(stderr, "rank %d: allreduce %zu: %s\n", rank, n, kiln_comm_error(c));
            goto out;
        }
        if (n && memcmp(buf, want, n * sizeof(float)) != 0) {
            size_t i = 0;
            while (memcmp(&buf[i], &want[i], sizeof(float)) == 0)
                i++;
            fprintf(stderr,
                    "rank %d world %d: allreduce of %zu floats: element %zu is %a, "
                    "reference %a\n",
                    rank, world, n, i, buf[i], want[i]);
            goto out;
        }
        p->hashes[rank][si] = kiln__fnv1a64(buf, n * sizeof(float), KILN__FNV_OFFSET);
    }
    /* broadcast from every root, sizes across the chunk boundary */
    for (int root = 0; root < world; root++) {
        static const size_t bsz[] = {0, 1, 3, 1000, 5000};
        for (size_t bi = 0; bi < sizeof bsz / sizeof *bsz; bi++) {
            size_t bytes = bsz[bi];
            unsigned char *b = malloc(bytes + 1);
            for (size_t i = 0; i < bytes; i++)
                b[i] = (unsigned char)(rank == root ? (i * 7 + (size_t)root) : 0xee);
            kiln_err e = kiln_comm_broadcast(c, b, bytes, root);
            int ok = e == KILN_OK;
            for (size_t i = 0; ok && i < bytes; i++)
                ok = b[i] == (unsigned char)(i * 7 + (size_t)root);
            free(b);
            if (!ok) {
                fprintf(stderr, "rank %d: broadcast root %d %zu bytes: %s\n", rank, root, bytes,
                        e ? kiln_comm_error(c) : "wrong bytes");
                goto out;
            }
        }
    }
    if (kiln_comm_barrier(c) != KILN_OK) {
        fprintf(stderr, "rank %d: barrier: %s\n", rank, kiln_comm_error(c));
        goto out;
    }
    /* checksum check: identical, then one rank diverges */
    {
        float params[333];
        int n = -1, first = -2;
        for (int i = 0; i < 333; i++)
            params[i] = (float)i * 0.5f;
        if (kiln_comm_check_identical(c, params, sizeof params, &n, &first) != KILN_OK || n != 0 ||
            first != -1) {
            fprintf(stderr, "rank %d: identical params reported %d diverged (first %d)\n", rank, n,
                    first);
            goto out;
        }
        if (rank == world - 1 && world > 1) params[100] = nextafterf(params[100], 1e9f);
        if (kiln_comm_check_identical(c, params, sizeof params, &n, &first) != KILN_OK ||
            n != (world > 1) || first != (world > 1 ? world - 1 : -1)) {
            fprintf(stderr, "rank %d: one ulp on rank %d: reported %d diverged (first %d)\n", rank,
                    world - 1, n, first);
            goto out;
        }
    }
    /* registered buffers: the zero-copy path, whole and at an offset, with
     * the same bit-exact reference; two allocations live at once */
    {
        static const size_t rsz[] = {1, 2, 17, 1000, 70001};
        float *spare = kiln_comm_alloc_f32(c, 5);
        float *rb = kiln_comm_alloc_f32(c, 70001 + 13);
        if (!rb || !spare || ((uintptr_t)rb & 63)) {
            fprintf(stderr, "rank %d: alloc: %s\n", rank, kiln_comm_error(c));
            goto out;
        }
        for (size_t i = 0; i < 70001 + 13; i++)
            if (rb[i] != 0.0f) {
                fprintf(stderr, "rank %d: alloc: not zero-filled\n", rank);
                goto out;
            }
        for (int off = 0; off <= 13; off += 13)
            for (size_t si = 0; si < sizeof rsz / sizeof *rsz; si++) {
                size_t n = rsz[si];
                for (int r = 0; r < world; r++) {
                    for (size_t i = 0; i < n; i++)
                        in[r][i] = gen(r, i, n + 7);
                    cin[r] = in[r];
                }
                kiln__sum_ref(want, NULL, cin, world, n);
                memcpy(rb + off, in[rank], n * sizeof(float));
                if (kiln_comm_allreduce_sum_f32(c, rb + off, n) != KILN_OK ||
                    memcmp(rb + off, want, n * sizeof(float)) != 0) {
                    fprintf(stderr, "rank %d world %d: registered all-reduce of %zu at %d: %s\n",
                            rank, world, n, off,
                            kiln_comm_error(c)[0] ? kiln_comm_error(c) : "wrong sum");
                    goto out;
                }
            }
        /* and plain memory again afterwards */
        float one = 1.0f;
        if (kiln_comm_allreduce_sum_f32(c, &one, 1) != KILN_OK || one != (float)world) {
            fprintf(stderr, "rank %d: plain after registered: %s\n", rank, kiln_comm_error(c));
            goto out;
        }
        kiln_comm_free(c, rb);
        kiln_comm_free(c, spare);
    }
    rc = 0;
out:
    kiln_comm_destroy(c);
    free(buf);
    free(want);
    for (int r = 0; r < world; r++)
        free(in[r]);
    return rc;
}

/* AUTO with every host on this machine (loopback, this hostname, an address
 * of a local interface) picks shm */
static int auto_rank(int rank, int world, void *arg)
{
    char me[256], host1[300];
    gethostname(me, sizeof me);
    me[sizeof me - 1] = '\0';
    snprintf(host1, sizeof host1, "%s:2223", me);
    char *hosts[3] = {"localhost:2222", host1, "127.0.0.1:2224"};
    kiln_comm_config cfg = {.rank = rank,
                            .world_size = world,
                            .backend = KILN_COLL_AUTO,
                            .job_key = arg,
                            .hosts = hosts,
                            .timeout_s = 10};
    kiln_comm *c = NULL;
    char err[256];
    float x = 1.0f;
    int ok = kiln_comm_init(&cfg, &c, err, sizeof err) == KILN_OK &&
             strcmp(kiln_comm_backend_name(c), "shm") == 0 &&
             kiln_comm_allreduce_sum_f32(c, &x, 1) == KILN_OK && x == (float)world;
    if (!ok) fprintf(stderr, "auto rank %d: %s\n", rank, c ? kiln_comm_error(c) : err);
    kiln_comm_destroy(c);
    return !ok;
}

static void run_plan(int world, size_t chunk, const size_t *sizes, int nsizes)
{
    char key[64];
    int st[CT_MAX_RANKS];
    plan p = {.chunk_bytes = chunk, .sizes = sizes, .nsizes = nsizes};
    p.hashes = ct_shared(sizeof(uint64_t) * NSIZES_MAX * CT_MAX_RANKS);
    ct_key(key, sizeof key, "shm");
    p.key = key;
    ct_run(world, rank_main, &p, 60, st);
    for (int r = 0; r < world; r++)
        CHECK_MSG(ct_exited_ok(st[r]), "world %d chunk %zu: rank %d failed (status 0x%x)", world,
                  chunk, r, st[r]);
    for (int si = 0; si < nsizes; si++)
        for (int r = 1; r < world; r++)
            CHECK_MSG(p.hashes[r][si] == p.hashes[0][si],
                      "world %d: rank %d's output of %zu floats differs from rank 0's", world, r,
                      sizes[si]);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "kiln-coll-%s", key);
    CHECK_MSG(ct_segments_with_prefix(prefix) == 0, "segments for %s left in /dev/shm", key);
    munmap(p.hashes, sizeof(uint64_t) * NSIZES_MAX * CT_MAX_RANKS);
}

int main(void)
{
    /* chunk of 1 KiB = 256 floats: slices and chunks split everywhere */
    static const size_t small_chunk_sizes[] = {0,  1,   2,   3,   15,  16,  17,   33,  63,   64,
                                               65, 255, 256, 257, 511, 513, 1000, 769, 4097, 70001};
    /* default chunk (1 MiB): one large buffer spanning several chunks */
    static const size_t default_chunk_sizes[] = {1, 1000, 262144 + 3, 600000};

    for (int world = 1; world <= 4; world++) {
        run_plan(world, 1024, small_chunk_sizes,
                 (int)(sizeof small_chunk_sizes / sizeof *small_chunk_sizes));
        run_plan(world, 0, default_chunk_sizes,
                 (int)(sizeof default_chunk_sizes / sizeof *default_chunk_sizes));
    }
    {
        char key[64];
        int st[CT_MAX_RANKS];
        ct_key(key, sizeof key, "auto");
        ct_run(3, auto_rank, key, 30, st);
        for (int r = 0; r < 3; r++)
            CHECK_MSG(ct_exited_ok(st[r]), "backend auto with local hosts: rank %d failed", r);
    }
    /* argument errors */
    {
        kiln_comm *c = NULL;
        char err[256];
        kiln_comm_config cfg = {.rank = 2, .world_size = 2, .job_key = "x"};
        CHECK(kiln_comm_init(&cfg, &c, err, sizeof err) == KILN_EINVAL && c == NULL);
        CHECK(strstr(err, "rank 2") != NULL);
        cfg.rank = -1;
        CHECK(kiln_comm_init(&cfg, &c, err, sizeof err) == KILN_EINVAL && c == NULL);
        CHECK(strstr(err, "not in the all-reduce group") != NULL);
        cfg.rank = 0;
        cfg.job_key = "bad/key";
        CHECK(kiln_comm_init(&cfg, &c, err, sizeof err) == KILN_EINVAL && c == NULL);
        CHECK(strstr(err, "job key") != NULL);
        /* one replica needs no segment and no key */
        cfg.world_size = 1;
        cfg.job_key = NULL;
        CHECK(kiln_comm_init(&cfg, &c, err, sizeof err) == KILN_OK && c != NULL);
        float x[3] = {1, 2, 3};
        CHECK(kiln_comm_allreduce_sum_f32(c, x, 3) == KILN_OK && x[2] == 3.0f);
        CHECK(kiln_comm_broadcast(c, x, sizeof x, 1) == KILN_EINVAL);
        CHECK(strstr(kiln_comm_error(c), "root 1") != NULL);
        /* sticky: a failed communicator stays failed */
        CHECK(kiln_comm_barrier(c) == KILN_EINVAL);
        CHECK_STR(kiln_comm_backend_name(c), "shm");
        kiln_comm_destroy(c);
    }
    CHECK(kiln_comm_backend_available(KILN_COLL_SHM));
    TEST_DONE();
}
