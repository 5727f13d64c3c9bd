/* test_coll_async.c - non-blocking all-reduce (gradient buckets): queued
 * calls run in order on kiln's communication thread, give the same bits as
 * the blocking call, interleave correctly with blocking calls, and a peer's
 * death reaches kiln_comm_wait with the peer named. */
#include "collective/coll_int.h"
#include "collective/shm/sum.h"
#include "coll_test.h"
#include "test.h"

#include <signal.h>

#define NB 8 /* buckets */

static size_t bucket_len(int b)
{
    return (size_t)(b * 3001 + 17); /* different sizes, some past a chunk */
}

static float val(int rank, int b, size_t i)
{
    return (float)((i * 31 + (size_t)b * 7) % 1000) * 0.001f * (float)(rank + 1) + 1e-7f * (float)i;
}

typedef struct arg {
    const char *key;
    int die; /* rank 1 dies at step `die` (0: nobody dies) */
    ct_result *res;
} arg;

static int die_step;
static void hook(int rank, uint64_t step)
{
    if (rank == 1 && die_step && step == (uint64_t)die_step) raise(SIGKILL);
}

static int rank_main(int rank, int world, void *p)
{
    arg *a = p;
    kiln_comm_config cfg = {.rank = rank,
                            .world_size = world,
                            .backend = KILN_COLL_SHM,
                            .job_key = a->key,
                            .timeout_s = 10,
                            .chunk_bytes = 8192};
    kiln_comm *c = NULL;
    char err[256];
    float *bk[NB] = {0}, *want = NULL, *in[CT_MAX_RANKS] = {0};
    const float *cin[CT_MAX_RANKS];
    kiln_comm_ticket t[NB];
    int rc = 1;

    die_step = a->die;
    kiln__coll_test_step_hook = hook;
    if (kiln_comm_init(&cfg, &c, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        goto out;
    }
    for (int b = 0; b < NB; b++) {
        /* half the buckets registered, half plain */
        bk[b] = b % 2 ? kiln_comm_alloc_f32(c, bucket_len(b)) : malloc(bucket_len(b) * 4);
        if (!bk[b]) goto out;
    }
    for (int round = 0; round < 3; round++) {
        kiln_comm_set_step(c, 100 + round); /* queued calls keep this label */
        /* "backward pass": buckets become ready last layer first and are
         * queued at once; the caller keeps computing meanwhile */
        for (int b = NB - 1; b >= 0; b--) {
            for (size_t i = 0; i < bucket_len(b); i++)
                bk[b][i] = val(rank, b, i);
            if (kiln_comm_iallreduce_sum_f32(c, bk[b], bucket_len(b), &t[b]) != KILN_OK) break;
        }
        if (round == 1) {
            /* a blocking call in between runs after everything queued */
            int x = rank == 0 ? 42 : 0;
            if (kiln_comm_broadcast(c, &x, sizeof x, 0) != KILN_OK || x != 42 ||
                kiln_comm_pending(c) != 0) {
                if (!a->die) fprintf(stderr, "rank %d: broadcast after queued calls\n", rank);
                goto report;
            }
        }
        for (int b = 0; b < NB; b++)
            if (kiln_comm_wait(c, t[b]) != KILN_OK) goto report;
        for (int b = 0; b < NB; b++) {
            size_t n = bucket_len(b);
            want = realloc(want, n * sizeof(float));
            for (int r = 0; r < world; r++) {
                in[r] = realloc(in[r], n * sizeof(float));
                for (size_t i = 0; i < n; i++)
                    in[r][i] = val(r, b, i);
                cin[r] = in[r];
            }
            kiln__sum_ref(want, NULL, cin, world, n);
            if (memcmp(want, bk[b], n * sizeof(float)) != 0) {
                fprintf(stderr, "rank %d: bucket %d differs from the reference\n", rank, b);
                goto out;
            }
        }
    }
    rc = 0;
report:
    if (a->res) {
        a->res[rank].err = kiln_comm_wait_all(c);
        a->res[rank].failed_peer = kiln_comm_failed_peer(c);
        snprintf(a->res[rank].msg, sizeof a->res[rank].msg, "%s", kiln_comm_error(c));
        rc = 0;
    }
out:
    for (int b = 0; b < NB; b++) {
        if (b % 2)
            kiln_comm_free(c, bk[b]);
        else
            free(bk[b]);
    }
    kiln_comm_destroy(c);
    free(want);
    for (int r = 0; r < world; r++)
        free(in[r]);
    return rc;
}

int main(void)
{
    int st[CT_MAX_RANKS];
    char key[64];

    for (int world = 1; world <= 3; world++) {
        arg a = {0};
        ct_key(key, sizeof key, "async");
        a.key = key;
        ct_run(world, rank_main, &a, 60, st);
        for (int r = 0; r < world; r++)
            CHECK_MSG(ct_exited_ok(st[r]), "world %d: rank %d failed", world, r);
        char prefix[96];
        snprintf(prefix, sizeof prefix, "kiln-coll-%s", key);
        CHECK(ct_segments_with_prefix(prefix) == 0);
    }
    /* rank 1 dies in the middle of the queued buckets: the others' wait
     * returns the failure, naming rank 1 */
    {
        arg a = {0};
        ct_key(key, sizeof key, "async-death");
        a.key = key;
        a.die = 30;
        a.res = ct_shared(sizeof(ct_result) * CT_MAX_RANKS);
        ct_run(3, rank_main, &a, 60, st);
        CHECK(WIFSIGNALED(st[1]));
        for (int r = 0; r < 3; r += 2) {
            CHECK_MSG(
                ct_exited_ok(st[r]) && a.res[r].err == KILN_EIO && a.res[r].failed_peer == 1 &&
                    strstr(a.res[r].msg, "rank 1") && strncmp(a.res[r].msg, "step 10", 7) == 0,
                "rank %d: %d peer %d: %s", r, a.res[r].err, a.res[r].failed_peer, a.res[r].msg);
            printf("queued buckets, rank 1 killed; rank %d: %s\n", r, a.res[r].msg);
        }
        char prefix[96];
        snprintf(prefix, sizeof prefix, "kiln-coll-%s", key);
        CHECK(ct_segments_with_prefix(prefix) == 0);
    }
    TEST_DONE();
}
