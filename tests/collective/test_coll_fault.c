/* test_coll_fault.c - a peer that dies, hangs, leaves or never comes makes the
 * others fail within a bounded time, with the peer's rank and the operation
 * named; segments never stay behind in /dev/shm.
 *
 * A test hook (kiln__coll_test_step_hook) lets a rank die or stall at an exact
 * pipeline step, so "mid-collective" is deterministic: with 256-float chunks an
 * all-reduce of 10000 floats is 40 steps, and step 45 is inside the second. */
#include "collective/coll_int.h"
#include "coll_test.h"
#include "test.h"

#include <signal.h>

#define COUNT 10000 /* floats: 40 chunks of 256 */
#define STEP  45    /* inside allreduce #2 */

typedef struct scenario {
    const char *key;
    int victim; /* the rank that misbehaves */
    int mode;   /* what it does */
    double timeout_s;
    size_t chunk_bytes;  /* 0: 1 KiB */
    size_t victim_chunk; /* MISMATCH: the victim's chunk_bytes */
    ct_result *res;      /* [world], shared */
} scenario;

enum { DIE, HANG, LEAVE, ABSENT, MISMATCH, MIXED };

static int victim_rank = -1, victim_mode;
static void step_hook(int rank, uint64_t step)
{
    if (rank != victim_rank || step != STEP) return;
    if (victim_mode == DIE) raise(SIGKILL); /* a crash: no cleanup runs at all */
    if (victim_mode == HANG) {
        sleep(3); /* alive, holding its liveness lock, making no progress */
        _exit(0);
    }
}

static int rank_main(int rank, int world, void *arg)
{
    scenario *sc = arg;
    ct_result *me = &sc->res[rank];
    kiln_comm_config cfg = {.rank = rank,
                            .world_size = world,
                            .backend = KILN_COLL_SHM,
                            .job_key = sc->key,
                            .timeout_s = sc->timeout_s,
                            .chunk_bytes = sc->chunk_bytes ? sc->chunk_bytes : 1024};
    kiln_comm *c = NULL;
    float *buf = NULL;
    double t0;
    kiln_err e;

    if (rank == sc->victim && sc->mode == ABSENT) return 0; /* never joins */
    if (rank == sc->victim && sc->mode == MISMATCH) cfg.chunk_bytes = sc->victim_chunk;
    victim_rank = sc->victim;
    victim_mode = sc->mode;
    kiln__coll_test_step_hook = step_hook;
    t0 = ct_now();
    e = kiln_comm_init(&cfg, &c, me->msg, sizeof me->msg);
    if (e != KILN_OK) {
        me->err = e;
        me->failed_peer = -2; /* init failed: no communicator to ask */
        me->elapsed_s = ct_now() - t0;
        return 0;
    }
    buf = calloc(COUNT, sizeof(float));
    if (sc->mode == MIXED) {
        /* the victim passes plain memory, the others a registered buffer */
        float *reg = kiln_comm_alloc_f32(c, COUNT);
        t0 = ct_now();
        e = kiln_comm_allreduce_sum_f32(c, rank == sc->victim ? buf : reg, COUNT);
        me->elapsed_s = ct_now() - t0;
        me->err = e;
        me->failed_peer = kiln_comm_failed_peer(c);
        snprintf(me->msg, sizeof me->msg, "%s", kiln_comm_error(c));
        kiln_comm_free(c, reg);
        kiln_comm_destroy(c);
        free(buf);
        return 0;
    }
    e = kiln_comm_allreduce_sum_f32(c, buf, COUNT);
    if (e == KILN_OK && rank == sc->victim && sc->mode == LEAVE) {
        kiln_comm_destroy(c); /* leaves between operations */
        free(buf);
        return 0;
    }
    t0 = ct_now();
    kiln_comm_set_step(c, 1234); /* the training loop's label, in every message */
    if (e == KILN_OK) e = kiln_comm_allreduce_sum_f32(c, buf, COUNT);
    me->elapsed_s = ct_now() - t0;
    me->err = e;
    me->failed_peer = kiln_comm_failed_peer(c);
    snprintf(me->msg, sizeof me->msg, "%s", kiln_comm_error(c));
    /* a failed communicator stays failed, at once */
    if (e != KILN_OK && kiln_comm_barrier(c) != e) me->err = 1000;
    kiln_comm_destroy(c);
    free(buf);
    return 0;
}

static ct_result *run(int world, scenario *sc, int *st)
{
    static char key[64];
    ct_key(key, sizeof key, "fault");
    sc->key = key;
    sc->res = ct_shared(sizeof(ct_result) * CT_MAX_RANKS);
    ct_run(world, rank_main, sc, 30, st);
    CHECK_MSG(!ct_segment_exists(key), "segment for %s left in /dev/shm", key);
    return sc->res;
}

static void expect_failure(const char *what, int world, scenario *sc, const ct_result *res,
                           const int *st, double min_s, double max_s, const char *needle)
{
    for (int r = 0; r < world; r++) {
        if (r == sc->victim) continue;
        CHECK_MSG(ct_exited_ok(st[r]), "%s: rank %d exited with status 0x%x", what, r, st[r]);
        CHECK_MSG(res[r].err == KILN_EIO, "%s: rank %d returned %d (%s)", what, r, res[r].err,
                  res[r].msg);
        if (res[r].failed_peer != -2)
            CHECK_MSG(res[r].failed_peer == sc->victim, "%s: rank %d blamed rank %d: %s", what, r,
                      res[r].failed_peer, res[r].msg);
        char victim[32];
        snprintf(victim, sizeof victim, "rank %d", sc->victim);
        CHECK_MSG(strstr(res[r].msg, victim) && strstr(res[r].msg, needle),
                  "%s: rank %d's message lacks \"%s\" / \"%s\": %s", what, r, victim, needle,
                  res[r].msg);
        CHECK_MSG(res[r].elapsed_s >= min_s && res[r].elapsed_s <= max_s,
                  "%s: rank %d failed after %.2f s, expected %.1f..%.1f s", what, r,
                  res[r].elapsed_s, min_s, max_s);
        printf("%s, rank %d after %.2f s: %s\n", what, r, res[r].elapsed_s, res[r].msg);
    }
}

int main(void)
{
    int st[CT_MAX_RANKS];
    ct_result *res;

    /* 1. a rank is killed mid-collective: the others notice through its
     * liveness lock, well before the 10 s timeout */
    {
        scenario sc = {.victim = 2, .mode = DIE, .timeout_s = 10};
        res = run(3, &sc, st);
        CHECK(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
        expect_failure("peer death", 3, &sc, res, st, 0, 2.0, "allreduce #2");
        int saw_died = 0;
        for (int r = 0; r < 2; r++) {
            saw_died |= strstr(res[r].msg, "died") != NULL;
            CHECK_MSG(strncmp(res[r].msg, "step 1234: ", 11) == 0, "no step label: %s", res[r].msg);
        }
        CHECK(saw_died);
    }
    /* 2. a rank hangs (alive, no progress): the others give up after the 1 s
     * timeout, not before, and not much later */
    {
        scenario sc = {.victim = 1, .mode = HANG, .timeout_s = 1};
        res = run(3, &sc, st);
        expect_failure("hang", 3, &sc, res, st, 0.9, 2.5, "allreduce #2");
        CHECK(strstr(res[0].msg, "no progress from rank 1") != NULL);
    }
    /* 3. a rank leaves (destroys its communicator) while the others still
     * expect it: "left", quickly */
    {
        scenario sc = {.victim = 0, .mode = LEAVE, .timeout_s = 10};
        res = run(2, &sc, st);
        expect_failure("peer left", 2, &sc, res, st, 0, 2.0, "left");
    }
    /* 4. a rank never joins: init fails within the timeout naming it */
    {
        scenario sc = {.victim = 3, .mode = ABSENT, .timeout_s = 1};
        res = run(4, &sc, st);
        expect_failure("never joined", 4, &sc, res, st, 0.9, 2.5, "did not join");
        CHECK(strstr(res[0].msg, "rank 3 did not join") != NULL);
    }
    /* 4b. rank 0 never comes: the others say so */
    {
        scenario sc = {.victim = 0, .mode = ABSENT, .timeout_s = 1};
        res = run(2, &sc, st);
        expect_failure("no rank 0", 2, &sc, res, st, 0.9, 2.5, "did not create");
    }
    /* 5. replicas that disagree on the configuration are told so */
    {
        scenario sc = {.victim = 1, .mode = MISMATCH, .timeout_s = 2, .victim_chunk = 4096};
        res = run(2, &sc, st);
        CHECK(res[1].err == KILN_EINVAL && strstr(res[1].msg, "disagree"));
        CHECK(res[0].err == KILN_EIO); /* rank 0 times out waiting for rank 1 */
    }
    /* 5b. one rank passes plain memory where the others pass a registered
     * buffer: everyone is told, at once */
    {
        scenario sc = {.victim = 1, .mode = MIXED, .timeout_s = 10};
        res = run(3, &sc, st);
        for (int r = 0; r < 3; r++) {
            CHECK_MSG(ct_exited_ok(st[r]) && res[r].err == KILN_EIO &&
                          strstr(res[r].msg, "every rank must pass") && res[r].elapsed_s < 2.0,
                      "mixed buffers, rank %d: %d %s", r, res[r].err, res[r].msg);
        }
        printf("mixed buffers, rank 0: %s\n", res[0].msg);
    }
    /* 6. a segment left by a crashed run (rank 0 killed during rendezvous) is
     * replaced by the next run with the same key, and nothing is left after */
    {
        char key[64];
        ct_key(key, sizeof key, "stale");
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            kiln_comm_config cfg = {.rank = 0,
                                    .world_size = 2,
                                    .job_key = key,
                                    .timeout_s = 30,
                                    .backend = KILN_COLL_SHM};
            kiln_comm *c;
            kiln_comm_init(&cfg, &c, NULL, 0); /* waits for rank 1, which never comes */
            _exit(1);
        }
        for (int i = 0; i < 500 && !ct_segment_exists(key); i++)
            usleep(2000);
        usleep(20000);
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        CHECK_MSG(ct_segment_exists(key), "the crashed rendezvous should leave %s behind", key);
        scenario sc = {.victim = -1, .mode = DIE, .timeout_s = 5, .key = key};
        sc.res = ct_shared(sizeof(ct_result) * CT_MAX_RANKS);
        ct_run(2, rank_main, &sc, 30, st);
        for (int r = 0; r < 2; r++)
            CHECK_MSG(ct_exited_ok(st[r]) && sc.res[r].err == KILN_OK,
                      "after a stale segment, rank %d: %d %s", r, sc.res[r].err, sc.res[r].msg);
        CHECK_MSG(!ct_segment_exists(key), "stale segment %s still there", key);
    }
    /* nothing of ours anywhere in /dev/shm */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "kiln-coll-t-");
    int left = 0;
    char mine[64];
    snprintf(mine, sizeof mine, "-%d-", (int)getpid());
    {
        DIR *d = opendir("/dev/shm");
        struct dirent *ent;
        while (d && (ent = readdir(d)))
            if (strncmp(ent->d_name, prefix, strlen(prefix)) == 0 && strstr(ent->d_name, mine))
                left++, fprintf(stderr, "left behind: /dev/shm/%s\n", ent->d_name);
        if (d) closedir(d);
    }
    CHECK(left == 0);
    TEST_DONE();
}
