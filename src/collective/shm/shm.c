/* shm.c - the same-host backend: all-reduce over a POSIX shared-memory segment.
 *
 * Layout of the segment "/kiln-coll-<job key>":
 *   header | one control block per rank | data: 2 slots per rank, chunk_bytes each
 *
 * All-reduce runs in pipeline steps of at most one slot (chunk) per rank, so the
 * segment stays bounded whatever the message size. A step for chunk x of
 * m floats, on rank r of N (slices: x cut into N 64-byte-aligned pieces):
 *
 *   1. copy x, except r's own slice, into r's slot        -> in[r]   = k
 *   2. wait in[p] for all p; sum slice r over all ranks in rank order (own
 *      slice read straight from x, the rest from peers' slots); write the
 *      sum into x and into r's slot                        -> red[r]  = k
 *   3. for each peer p: wait red[p]; copy p's summed slice into x
 *                                                          -> done[r] = k
 *
 * That is reduce-scatter (2) + all-gather (3). Slots are double-buffered by
 * step parity, so before writing its slot for step k a rank waits only for
 * done[p] >= k-2: the next chunk's copy overlaps the peers' gather.
 *
 * Determinism: each slice is summed once, by one rank, in rank order, and
 * copied everywhere, so every rank gets bit-identical output, equal to
 * sum_ref(rank 0, rank 1, ...) whatever the chunk size.
 *
 * Waiting: spin briefly (the peer is usually a few microseconds behind), then
 * yield the CPU for up to 200 us (on shared cores the peer may need ours), then
 * sleep on a futex in slices of 50 ms. Between slices the waiter checks that
 * the peer it waits for is alive (a robust process-shared mutex each rank holds
 * while attached: the kernel releases it with EOWNERDEAD when the process dies),
 * whether another rank has aborted the group, and its own deadline
 * (timeout_s without progress). So a dead peer is seen within ~50 ms and a
 * hung one within timeout_s, with the rank named.
 *
 * Cleanup: rank 0 creates the segment and unlinks its name as soon as every
 * rank has attached; from then on the memory lives only as long as the
 * mappings, so a crash leaves nothing in /dev/shm. A segment left by a job that
 * crashed during rendezvous is marked abandoned and replaced by the next rank 0
 * with the same key.
 *
 * Registered buffers (kiln_comm_alloc_f32) skip the slots altogether; see
 * allreduce_registered. */
#include "collective/coll_int.h"
#include "collective/shm/sum.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define SHM_MAGIC     0x316c6f636e6c696bull /* "kilncol1" */
#define SHM_VERSION   2u
#define DEFAULT_CHUNK (128u << 10) /* measured best here: 2 ranks x 2 slots stay in L2 */
#define YIELD_S       200e-6
#define MAX_WORLD     1024
#define SLICE_ALIGN   16 /* floats: slices start on 64-byte lines, no false sharing */
#define SLEEP_SLICE_S 0.05
#define MAX_KEY       64

enum { ST_EMPTY = 0, ST_ATTACHED = 1, ST_LEFT = 2 };
enum { PEER_ALIVE, PEER_DEAD, PEER_LEFT, PEER_ABSENT };

/* One per rank. Each counter sits on its own cache line: they are written by
 * one rank and polled by all the others. */
struct rank_ctl {
    _Alignas(64) _Atomic uint32_t in_seq;
    _Alignas(64) _Atomic uint32_t red_seq;
    _Alignas(64) _Atomic uint32_t done_seq;
    _Alignas(64) pthread_mutex_t alive; /* robust, process-shared; held while attached */
    _Atomic uint32_t state;
    _Atomic int32_t pid;
    _Atomic uint64_t op_seq; /* the operation this rank last started (for messages) */
    /* which memory this rank's current all-reduce works on, so that ranks
     * mixing registered and plain buffers (or offsets) are caught: 0 = plain,
     * else (registered buffer id + 1) << 40 | offset in floats */
    _Atomic uint64_t buf_tag;
    /* the same for the sharded steps, by the step's parity: those let a
     * rank run on into its next call as soon as everyone has arrived, so
     * its tag for the next call must not overwrite the one a slower peer
     * is about to check (a rank is never more than one call ahead) */
    _Atomic uint64_t buf_tag_par[2];
};

struct shm_hdr {
    _Atomic uint64_t magic; /* stored last by the creator: the segment is ready */
    uint32_t version, world;
    uint64_t slot_bytes, total_bytes;
    _Atomic uint32_t abandoned;   /* a newer segment with this name replaced this one */
    _Atomic uint32_t attached;    /* futex word: ranks attached so far */
    _Atomic uint32_t waiters;     /* ranks asleep on a futex; wakes are skipped when 0 */
    _Atomic int32_t abort_rank;   /* first rank that gave up, or -1 */
    _Atomic int32_t abort_peer;   /* the peer it blamed (died, hung, left), or -1 */
    _Atomic uint32_t abort_ready; /* abort_msg and abort_peer are written */
    char abort_msg[400];
};

typedef struct shm {
    char name[16 + MAX_KEY];
    /* registered buffers (kiln_comm_alloc_f32): one segment each, holding
     * every rank's buffer, stride bytes apart */
    struct reg {
        char *base;                    /* the whole mapping */
        size_t map_bytes, stride, cap; /* cap: floats per rank */
        uint32_t id;                   /* same on every rank: the allocation's number */
    } * regs;
    int nregs, capregs;
    uint32_t reg_seq;
    void *base;
    size_t size;
    struct shm_hdr *h;
    struct rank_ctl *ctl;
    char *data;
    size_t slot_bytes, slot_elems;
    uint64_t steps; /* pipeline steps run; the futex words hold it mod 2^32 */
    int locked;     /* own alive mutex held */
    int creator, unlinked;
    int spin;
    double yield_s; /* how long to yield the CPU before sleeping */
    kiln__sum_fn sum;
    const float **srcs; /* world entries, scratch for the sum */
    char pending[400];  /* rendezvous: a disagreement to report if nothing better comes */
    /* where we are, for messages */
    size_t chunk, nchunks;
} shm;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__)
    _mm_pause();
#endif
}

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static size_t ctl_off(void)
{
    return align_up(sizeof(struct shm_hdr), 64);
}

static size_t data_off(int world)
{
    return align_up(ctl_off() + (size_t)world * sizeof(struct rank_ctl), 4096);
}

static float *slot(shm *s, int rank, unsigned b)
{
    return (float *)(s->data + ((size_t)rank * 2 + b) * s->slot_bytes);
}

/* Has counter value v reached target? Counters wrap at 2^32; peers are never
 * more than a couple of steps apart, so the signed difference is exact. */
static inline int reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t val, double secs)
{
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    /* not FUTEX_PRIVATE: the word is in memory shared between processes */
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Store then wake. seq_cst on both sides (here and in wait_ge) makes the
 * "waiters" check safe: a waiter either sees the new value or is counted. */
static void publish(shm *s, _Atomic uint32_t *w, uint32_t v)
{
    atomic_store(w, v);
    if (atomic_load(&s->h->waiters)) futex_wake(w);
}

static int peer_status(shm *s, int p)
{
    struct rank_ctl *pc = &s->ctl[p];
    uint32_t st = atomic_load(&pc->state);
    int rc;

    if (st == ST_LEFT) return PEER_LEFT;
    if (st == ST_EMPTY) return PEER_ABSENT;
    rc = pthread_mutex_trylock(&pc->alive);
    if (rc == EBUSY) return PEER_ALIVE;
    if (rc == EOWNERDEAD) {
        /* Unlock without pthread_mutex_consistent: the mutex becomes
         * ENOTRECOVERABLE, so every later check says "dead" too. */
        pthread_mutex_unlock(&pc->alive);
        return PEER_DEAD;
    }
    if (rc == ENOTRECOVERABLE) return PEER_DEAD;
    if (rc == 0) {
        /* it let go of the mutex: it left (state is set before the unlock) */
        pthread_mutex_unlock(&pc->alive);
        return atomic_load(&pc->state) == ST_LEFT ? PEER_LEFT : PEER_DEAD;
    }
    return PEER_ALIVE;
}

/* Fails the communicator and tells the other ranks, so that they stop
 * waiting for us at once instead of each running into its own timeout. */
static kiln_err give_up(kiln_comm *c, shm *s, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kiln_err give_up(kiln_comm *c, shm *s, int peer, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    int32_t none = -1;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->h && atomic_compare_exchange_strong(&s->h->abort_rank, &none, c->rank)) {
        memcpy(s->h->abort_msg, msg, sizeof msg);
        atomic_store(&s->h->abort_peer, peer);
        atomic_store(&s->h->abort_ready, 1); /* readers look at the message only now */
    }
    return kiln__comm_fail(c, KILN_EIO, peer, "%s", msg);
}

/* Waits until *w reaches target, where *w is written by `peer`. `what` says
 * what we wait for ("its data", ...), for the message. */
static kiln_err wait_ge(kiln_comm *c, shm *s, int peer, _Atomic uint32_t *w, uint32_t target,
                        const char *what)
{
    double deadline = 0;
    uint32_t v;

    for (int i = 0; i < s->spin; i++) {
        if (reached(atomic_load_explicit(w, memory_order_acquire), target)) return KILN_OK;
        cpu_relax();
    }
    double t0 = now_s();
    for (;;) {
        if (reached(atomic_load(w), target)) return KILN_OK;
        double t = now_s();
        if (t - t0 < s->yield_s) {
            /* Yield before sleeping: when the peer shares our core (other
             * jobs' load, more ranks than cores) this runs it at once; on an
             * idle machine it returns at once and acts as a polite spin. A
             * futex sleep costs a wake-up syscall on both sides. */
            sched_yield();
            continue;
        }
        if (deadline == 0) deadline = t0 + c->timeout_s;
        int32_t ab = atomic_load(&s->h->abort_ready) ? atomic_load(&s->h->abort_rank) : -1;
        if (ab >= 0 && ab != c->rank) {
            char msg[400];
            memcpy(msg, s->h->abort_msg, sizeof msg);
            msg[sizeof msg - 1] = '\0';
            int32_t culprit = atomic_load(&s->h->abort_peer);
            return kiln__comm_fail(c, KILN_EIO, culprit >= 0 ? culprit : ab,
                                   "%s #%llu: rank %d gave up on the group: %s", c->op_name,
                                   (unsigned long long)c->op_seq, (int)ab, msg);
        }
        int ps = peer_status(s, peer);
        if (ps == PEER_DEAD)
            return give_up(c, s, peer,
                           "%s #%llu (chunk %zu of %zu): rank %d (pid %d) died while rank %d "
                           "waited for %s",
                           c->op_name, (unsigned long long)c->op_seq, s->chunk + 1, s->nchunks,
                           peer, (int)atomic_load(&s->ctl[peer].pid), c->rank, what);
        if (ps == PEER_LEFT)
            return give_up(c, s, peer,
                           "%s #%llu (chunk %zu of %zu): rank %d left the group (destroyed its "
                           "communicator) while rank %d waited for %s",
                           c->op_name, (unsigned long long)c->op_seq, s->chunk + 1, s->nchunks,
                           peer, c->rank, what);
        if (t >= deadline)
            return give_up(c, s, peer,
                           "%s #%llu (chunk %zu of %zu): no progress from rank %d for %.1f s "
                           "while rank %d waited for %s; rank %d is alive but hung or not in "
                           "the same collective (it last started operation #%llu)",
                           c->op_name, (unsigned long long)c->op_seq, s->chunk + 1, s->nchunks,
                           peer, c->timeout_s, c->rank, what, peer,
                           (unsigned long long)atomic_load(&s->ctl[peer].op_seq));
        atomic_fetch_add(&s->h->waiters, 1);
        v = atomic_load(w);
        if (!reached(v, target)) {
            double left = deadline - t;
            futex_wait(w, v, left < SLEEP_SLICE_S ? left : SLEEP_SLICE_S);
        }
        atomic_fetch_sub(&s->h->waiters, 1);
    }
}

/* Waits until every peer's done counter reaches target. */
static kiln_err wait_all_done(kiln_comm *c, shm *s, uint32_t target, const char *what)
{
    kiln_err e;
    for (int p = 0; p < c->world; p++)
        if (p != c->rank && (e = wait_ge(c, s, p, &s->ctl[p].done_seq, target, what)) != KILN_OK)
            return e;
    return KILN_OK;
}

/* Before writing our slot of parity b for step k: every peer has finished
 * reading it in step k-2. */
static kiln_err wait_slot_free(kiln_comm *c, shm *s, uint64_t k)
{
    if (k < 3) return KILN_OK;
    return wait_all_done(c, s, (uint32_t)(k - 2), "it to finish reading the previous chunk");
}

/* Our part of step k is over: the steps without a gather phase of their own
 * (registered and sharded) say so on both counters, red then done. */
static void publish_done(shm *s, struct rank_ctl *me, uint32_t k32)
{
    publish(s, &me->red_seq, k32);
    publish(s, &me->done_seq, k32);
}

static uint64_t next_step(kiln_comm *c, shm *s)
{
    uint64_t k = ++s->steps;
    if (kiln__coll_test_step_hook) kiln__coll_test_step_hook(c->rank, k);
    return k;
}

static void slice_of(size_t m, int world, int p, size_t *lo, size_t *hi)
{
    size_t per = align_up((m + (size_t)world - 1) / (size_t)world, SLICE_ALIGN);
    size_t a = (size_t)p * per;
    *lo = a < m ? a : m;
    *hi = a + per < m ? a + per : m;
}

/* Both sides of a step must work on the same kind of memory. Read right
 * after in[p] was seen: p cannot change it before we publish red or done. */
static kiln_err check_tag(kiln_comm *c, shm *s, int p, uint64_t mine)
{
    uint64_t theirs = atomic_load(&s->ctl[p].buf_tag);
    if (theirs == mine) return KILN_OK;
    return give_up(c, s, p,
                   "%s #%llu: rank %d passed %s but rank %d passed %s: every rank must pass "
                   "plain memory, or the same range of a kiln_comm_alloc_f32 buffer",
                   c->op_name, (unsigned long long)c->op_seq, c->rank,
                   mine ? "a registered buffer" : "plain memory", p,
                   theirs == 0                      ? "plain memory"
                   : (theirs >> 40) == (mine >> 40) ? "another offset of it"
                                                    : "another registered buffer");
}

static kiln_err step_allreduce(kiln_comm *c, shm *s, float *x, size_t m)
{
    const int r = c->rank, n = c->world;
    const uint64_t k = next_step(c, s);
    const unsigned b = (unsigned)(k & 1);
    const uint32_t k32 = (uint32_t)k;
    struct rank_ctl *me = &s->ctl[r];
    float *mine = slot(s, r, b);
    size_t lo, hi;
    kiln_err e;

    slice_of(m, n, r, &lo, &hi);
    if ((e = wait_slot_free(c, s, k)) != KILN_OK) return e;
    if (s->chunk == 0) atomic_store(&me->buf_tag, 0);
    /* 1: share everything but our own slice (we read that one from x directly) */
    if (lo > 0) memcpy(mine, x, lo * sizeof(float));
    if (hi < m) memcpy(mine + hi, x + hi, (m - hi) * sizeof(float));
    publish(s, &me->in_seq, k32);

    /* 2: reduce-scatter: our slice, summed in rank order */
    for (int p = 0; p < n; p++) {
        if (p == r) continue;
        if ((e = wait_ge(c, s, p, &s->ctl[p].in_seq, k32, "its data")) != KILN_OK) return e;
        if (s->chunk == 0 && (e = check_tag(c, s, p, 0)) != KILN_OK) return e;
    }
    if (hi > lo) { /* x is NULL for a barrier (m == 0): no pointer arithmetic on it */
        for (int p = 0; p < n; p++)
            s->srcs[p] = p == r ? x + lo : slot(s, p, b) + lo;
        s->sum(x + lo, mine + lo, s->srcs, n, hi - lo);
    }
    publish(s, &me->red_seq, k32);

    /* 3: all-gather the other slices */
    for (int p = 0; p < n; p++) {
        size_t plo, phi;
        if (p == r) continue;
        if ((e = wait_ge(c, s, p, &s->ctl[p].red_seq, k32, "its reduced slice")) != KILN_OK)
            return e;
        slice_of(m, n, p, &plo, &phi);
        if (phi > plo) memcpy(x + plo, slot(s, p, b) + plo, (phi - plo) * sizeof(float));
    }
    publish(s, &me->done_seq, k32);
    return KILN_OK;
}

static float *reg_buf(const struct reg *g, int rank)
{
    return (float *)(g->base + (size_t)rank * g->stride);
}

/* The tag (rank_ctl.buf_tag) of the range of g that starts off floats in. */
static uint64_t reg_tag(const struct reg *g, size_t off)
{
    return ((uint64_t)g->id + 1) << 40 | off;
}

/* The registered buffer of this rank that holds buf[0..count), if any. */
static struct reg *find_reg(kiln_comm *c, shm *s, const float *buf, size_t count, size_t *off)
{
    for (int i = 0; i < s->nregs; i++) {
        struct reg *g = &s->regs[i];
        const float *mine = reg_buf(g, c->rank);
        if (buf >= mine && buf < mine + g->cap && count <= g->cap - (size_t)(buf - mine)) {
            *off = (size_t)(buf - mine);
            return g;
        }
    }
    return NULL;
}

/* All-reduce on a registered buffer: no copies through the segment. After
 * every rank has arrived, rank r sums slice r straight from every rank's
 * buffer (rank order, as in the copy path) and writes the result into every
 * rank's buffer; then all wait until every slice is written everywhere. Per
 * rank that is one read and one write of the buffer's size in all. Safe
 * because slice r of any buffer is read and written only by rank r, element
 * by element (each element read before it is written). */
static kiln_err allreduce_registered(kiln_comm *c, shm *s, struct reg *g, size_t off, size_t count)
{
    const int r = c->rank, n = c->world;
    const uint64_t tag = reg_tag(g, off);
    const uint64_t k = next_step(c, s);
    const uint32_t k32 = (uint32_t)k;
    struct rank_ctl *me = &s->ctl[r];
    size_t lo, hi;
    kiln_err e;

    atomic_store(&me->buf_tag, tag);
    publish(s, &me->in_seq, k32);
    for (int p = 0; p < n; p++) {
        if (p == r) continue;
        if ((e = wait_ge(c, s, p, &s->ctl[p].in_seq, k32, "its data")) != KILN_OK) return e;
        if ((e = check_tag(c, s, p, tag)) != KILN_OK) return e;
    }
    slice_of(count, n, r, &lo, &hi);
    if (hi > lo) {
        int next = (r + 1) % n;
        for (int p = 0; p < n; p++)
            s->srcs[p] = reg_buf(g, p) + off + lo;
        /* own buffer and the next rank's in one pass, the rest copied */
        s->sum(reg_buf(g, r) + off + lo, reg_buf(g, next) + off + lo, s->srcs, n, hi - lo);
        for (int p = 0; p < n; p++)
            if (p != r && p != next)
                memcpy(reg_buf(g, p) + off + lo, reg_buf(g, r) + off + lo,
                       (hi - lo) * sizeof(float));
    }
    publish_done(s, me, k32);
    /* our buffer is complete only when every rank has written its slice */
    return wait_all_done(c, s, k32, "its slice of the result");
}

static void begin_op(kiln_comm *c, shm *s, size_t nchunks);

/* ---- the sharded steps (kiln/collective.h): registered buffers only ---- */

static struct reg *reg_of(kiln_comm *c, shm *s, const float *buf, size_t count, size_t *off,
                          const char *what)
{
    struct reg *g = find_reg(c, s, buf, count ? count : 1, off);
    if (!g)
        kiln__comm_fail(c, KILN_EINVAL, -1,
                        "%s: the buffer must be (a range of) a kiln_comm_alloc_f32 buffer", what);
    return g;
}

/* The start of every sharded step: buf[0..count) must be registered (NULL
 * and c failed if not); one operation of one pipeline step, *k. */
static struct reg *enter_sharded(kiln_comm *c, shm *s, const float *buf, size_t count,
                                 const char *what, size_t *off, uint64_t *k)
{
    struct reg *g = reg_of(c, s, buf, count, off, what);
    if (!g) return NULL;
    begin_op(c, s, 1);
    *k = next_step(c, s);
    return g;
}

/* Peer p passed the range we did (tag) in step k: read once its in (or
 * done) counter for k is seen. */
static kiln_err check_tag_par(kiln_comm *c, shm *s, int p, uint64_t tag, uint64_t k)
{
    if (atomic_load(&s->ctl[p].buf_tag_par[k & 1]) == tag) return KILN_OK;
    return give_up(c, s, p,
                   "%s #%llu: rank %d and rank %d passed different buffers (or "
                   "offsets): every rank must pass the same range of a "
                   "kiln_comm_alloc_f32 buffer",
                   c->op_name, (unsigned long long)c->op_seq, c->rank, p);
}

/* Everyone has arrived with the same range of the same buffer. */
static kiln_err arrive(kiln_comm *c, shm *s, uint64_t tag, uint64_t k)
{
    kiln_err e;
    const uint32_t k32 = (uint32_t)k;
    atomic_store(&s->ctl[c->rank].buf_tag_par[k & 1], tag);
    publish(s, &s->ctl[c->rank].in_seq, k32);
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        if ((e = wait_ge(c, s, p, &s->ctl[p].in_seq, k32, "its data")) != KILN_OK) return e;
        if ((e = check_tag_par(c, s, p, tag, k)) != KILN_OK) return e;
    }
    return KILN_OK;
}

static void shm_slice(const kiln_comm *c, size_t count, int rank, size_t *lo, size_t *hi)
{
    slice_of(count, c->world, rank, lo, hi);
}

static kiln_err shm_rs_begin(kiln_comm *c, float *buf, size_t count, const float **srcs)
{
    shm *s = c->impl;
    size_t off = 0;
    uint64_t k;
    if (c->world == 1) {
        srcs[0] = buf;
        return KILN_OK;
    }
    struct reg *g = enter_sharded(c, s, buf, count, "reduce-scatter", &off, &k);
    if (!g) return c->failed;
    kiln_err e = arrive(c, s, reg_tag(g, off), k);
    if (e != KILN_OK) return e;
    for (int p = 0; p < c->world; p++)
        srcs[p] = reg_buf(g, p) + off;
    /* nothing else to wait for: the caller's next call on the group tells
     * the peers it has read their copies */
    publish_done(s, &s->ctl[c->rank], (uint32_t)k);
    return KILN_OK;
}

/* Push: this rank writes its slice into every peer's buffer (no one else
 * writes there, and after the arrival no one reads it until the end), then
 * waits until every peer has done the same. */
static kiln_err shm_allgather(kiln_comm *c, float *buf, size_t count)
{
    shm *s = c->impl;
    size_t off = 0, lo, hi;
    uint64_t k;
    kiln_err e;
    if (c->world == 1) return KILN_OK;
    struct reg *g = enter_sharded(c, s, buf, count, "all-gather", &off, &k);
    if (!g) return c->failed;
    if ((e = arrive(c, s, reg_tag(g, off), k)) != KILN_OK) return e;
    slice_of(count, c->world, c->rank, &lo, &hi);
    if (hi > lo)
        for (int p = 0; p < c->world; p++)
            if (p != c->rank)
                memcpy(reg_buf(g, p) + off + lo, reg_buf(g, c->rank) + off + lo,
                       (hi - lo) * sizeof(float));
    publish_done(s, &s->ctl[c->rank], (uint32_t)k);
    return wait_all_done(c, s, (uint32_t)k, "its slice");
}

static kiln_err shm_views(kiln_comm *c, float *buf, size_t count, float **views)
{
    shm *s = c->impl;
    size_t off = 0;
    if (c->world == 1) {
        views[0] = buf;
        return KILN_OK;
    }
    struct reg *g = reg_of(c, s, buf, count, &off, "shared views");
    if (!g) return c->failed;
    for (int p = 0; p < c->world; p++)
        views[p] = reg_buf(g, p) + off;
    return KILN_OK;
}

/* Every rank has written its slice into every copy (shm_views) when it
 * arrives here: done = k says so, and once every peer's is seen, buf is
 * whole. A peer can be one call ahead (its next reduce-scatter) but no
 * further, so the tag of this call's parity stays readable. */
static kiln_err shm_allgather_written(kiln_comm *c, float *buf, size_t count)
{
    shm *s = c->impl;
    size_t off = 0;
    uint64_t k;
    kiln_err e;
    if (c->world == 1) return KILN_OK;
    struct reg *g = enter_sharded(c, s, buf, count, "all-gather", &off, &k);
    if (!g) return c->failed;
    const uint64_t tag = reg_tag(g, off);
    const uint32_t k32 = (uint32_t)k;
    struct rank_ctl *me = &s->ctl[c->rank];
    atomic_store(&me->buf_tag_par[k & 1], tag);
    publish(s, &me->in_seq, k32);
    publish_done(s, me, k32);
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        if ((e = wait_ge(c, s, p, &s->ctl[p].done_seq, k32, "its slice")) != KILN_OK) return e;
        if ((e = check_tag_par(c, s, p, tag, k)) != KILN_OK) return e;
    }
    return KILN_OK;
}

static void begin_op(kiln_comm *c, shm *s, size_t nchunks)
{
    atomic_store_explicit(&s->ctl[c->rank].op_seq, c->op_seq, memory_order_relaxed);
    s->chunk = 0;
    s->nchunks = nchunks;
}

static kiln_err shm_allreduce(kiln_comm *c, float *buf, size_t count)
{
    shm *s = c->impl;
    kiln_err e = KILN_OK;

    if (c->world == 1) return KILN_OK;
    size_t roff;
    struct reg *g = count ? find_reg(c, s, buf, count, &roff) : NULL;
    if (g) {
        begin_op(c, s, 1);
        return allreduce_registered(c, s, g, roff, count);
    }
    begin_op(c, s, count ? (count + s->slot_elems - 1) / s->slot_elems : 1);
    if (count == 0) return step_allreduce(c, s, NULL, 0);
    for (size_t off = 0; off < count && e == KILN_OK; off += s->slot_elems, s->chunk++) {
        size_t m = count - off < s->slot_elems ? count - off : s->slot_elems;
        e = step_allreduce(c, s, buf + off, m);
    }
    return e;
}

static kiln_err shm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root)
{
    shm *s = c->impl;
    char *p = buf;
    kiln_err e = KILN_OK;

    if (c->world == 1) return KILN_OK;
    begin_op(c, s, bytes ? (bytes + s->slot_bytes - 1) / s->slot_bytes : 1);
    size_t off = 0;
    do {
        size_t len = bytes - off < s->slot_bytes ? bytes - off : s->slot_bytes;
        uint64_t k = next_step(c, s);
        unsigned b = (unsigned)(k & 1);
        if (c->rank == root) {
            if ((e = wait_slot_free(c, s, k)) != KILN_OK) break;
            if (len) memcpy(slot(s, root, b), p + off, len);
            publish(s, &s->ctl[root].in_seq, (uint32_t)k);
        } else {
            if ((e = wait_ge(c, s, root, &s->ctl[root].in_seq, (uint32_t)k, "its data")) != KILN_OK)
                break;
            if (len) memcpy(p + off, slot(s, root, b), len);
        }
        publish(s, &s->ctl[c->rank].done_seq, (uint32_t)k);
        off += len;
        s->chunk++;
    } while (off < bytes);
    return e;
}

static kiln_err shm_barrier(kiln_comm *c)
{
    shm *s = c->impl;
    if (c->world == 1) return KILN_OK;
    begin_op(c, s, 1);
    return step_allreduce(c, s, NULL, 0);
}

/* ---- registered buffers ---- */

static kiln_err shm_alloc(kiln_comm *c, size_t count, float **out)
{
    shm *s = c->impl;
    struct reg g = {0};
    char name[sizeof s->name + 16];
    size_t bytes = count * sizeof(float);
    kiln_err e = KILN_OK;
    int fd = -1;

    g.stride = align_up(bytes ? bytes : 1, 4096); /* whole pages: no false sharing */
    g.cap = count;
    g.id = s->reg_seq++;
    if (c->world > 1 && g.stride > (SIZE_MAX >> 1) / (size_t)c->world)
        return kiln__comm_fail(c, KILN_EINVAL, -1, "alloc: %zu floats is too many", count);
    g.map_bytes = g.stride * (size_t)c->world;
    if (s->nregs == s->capregs) {
        int cap = s->capregs ? s->capregs * 2 : 4;
        struct reg *nr = realloc(s->regs, (size_t)cap * sizeof *nr);
        if (!nr) return kiln__comm_fail(c, KILN_ENOMEM, -1, "alloc: out of memory");
        s->regs = nr;
        s->capregs = cap;
    }
    if (c->world == 1) {
        /* nobody to share with: anonymous memory, same rules */
        g.base =
            mmap(NULL, g.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g.base == MAP_FAILED)
            return kiln__comm_fail(c, KILN_ENOMEM, -1, "alloc: cannot map %zu bytes", g.map_bytes);
        goto done;
    }
    snprintf(name, sizeof name, "%s-r%u", s->name, g.id);
    begin_op(c, s, 1);
    if (c->rank == 0) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST) { /* left by a crashed run with this key */
            shm_unlink(name);
            fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        }
        if (fd < 0 || ftruncate(fd, (off_t)g.map_bytes) != 0) {
            e = give_up(c, s, -1, "alloc: cannot create %s (%zu bytes): %s", name, g.map_bytes,
                        strerror(errno));
            goto out;
        }
    } else {
        /* rank 0 creates it; wait for it at its full size */
        double deadline = now_s() + c->timeout_s;
        struct stat st;
        for (;;) {
            fd = shm_open(name, O_RDWR, 0);
            if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == g.map_bytes) break;
            if (fd >= 0) close(fd);
            fd = -1;
            if (peer_status(s, 0) != PEER_ALIVE || now_s() >= deadline) {
                e = give_up(c, s, 0, "alloc: rank 0 did not create %s within %.1f s", name,
                            c->timeout_s);
                goto out;
            }
            sleep_s(0.0005);
        }
    }
    g.base = mmap(NULL, g.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (g.base == MAP_FAILED) {
        g.base = NULL;
        e = give_up(c, s, -1, "alloc: cannot map %s (%zu bytes): %s", name, g.map_bytes,
                    strerror(errno));
        goto out;
    }
    /* everyone has it mapped: then the name can go (as for the main segment) */
    e = step_allreduce(c, s, NULL, 0);
    if (c->rank == 0) shm_unlink(name);
    if (e != KILN_OK) goto out;
done:
    s->regs[s->nregs++] = g;
    g.base = NULL;
    *out = reg_buf(&s->regs[s->nregs - 1], c->rank);
out:
    if (g.base) munmap(g.base, g.map_bytes);
    if (fd >= 0) close(fd);
    if (e != KILN_OK && c->rank == 0 && c->world > 1) shm_unlink(name);
    return e;
}

static void shm_free(kiln_comm *c, float *buf)
{
    shm *s = c->impl;
    for (int i = 0; i < s->nregs; i++)
        if (reg_buf(&s->regs[i], c->rank) == buf) {
            munmap(s->regs[i].base, s->regs[i].map_bytes);
            s->regs[i] = s->regs[--s->nregs];
            return;
        }
}

/* ---- rendezvous ---- */

static int valid_key(const char *k)
{
    size_t n = 0;
    if (!k) return 0;
    for (; k[n]; n++)
        if (!((k[n] >= 'a' && k[n] <= 'z') || (k[n] >= 'A' && k[n] <= 'Z') ||
              (k[n] >= '0' && k[n] <= '9') || k[n] == '.' || k[n] == '_' || k[n] == '-'))
            return 0;
    return n > 0 && n <= MAX_KEY;
}

/* Marks a leftover segment of the same name abandoned (so any rank still
 * attached to it lets go) and unlinks the name. */
static void retire_stale(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0);
    struct stat st;
    if (fd >= 0) {
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct shm_hdr)) {
            struct shm_hdr *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (h != MAP_FAILED) {
                atomic_store(&h->abandoned, 1);
                futex_wake(&h->attached);
                munmap(h, sizeof *h);
            }
        }
        close(fd);
    }
    shm_unlink(name);
}

static kiln_err map_fd(kiln_comm *c, shm *s, int fd)
{
    void *p = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return kiln__comm_fail(c, KILN_EIO, -1, "mmap %s (%zu bytes): %s", s->name, s->size,
                               strerror(errno));
    s->base = p;
    s->h = p;
    s->ctl = (struct rank_ctl *)((char *)p + ctl_off());
    s->data = (char *)p + data_off(c->world);
    return KILN_OK;
}

static void unmap(shm *s)
{
    if (s->base) munmap(s->base, s->size);
    s->base = NULL;
    s->h = NULL;
    s->ctl = NULL;
}

static kiln_err create_segment(kiln_comm *c, shm *s)
{
    pthread_mutexattr_t ma;
    kiln_err e = KILN_OK;
    int fd = -1, tries = 0, ma_init = 0;

    for (;;) {
        fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) break;
        if (errno != EEXIST || ++tries > 3) {
            e = kiln__comm_fail(c, KILN_EIO, -1, "cannot create %s: %s", s->name, strerror(errno));
            goto out;
        }
        retire_stale(s->name); /* a crashed earlier run with this key */
    }
    s->creator = 1;
    if (ftruncate(fd, (off_t)s->size) != 0) {
        e = kiln__comm_fail(c, KILN_EIO, -1, "cannot size %s to %zu bytes: %s", s->name, s->size,
                            strerror(errno));
        goto out;
    }
    if ((e = map_fd(c, s, fd)) != KILN_OK) goto out;
    /* ftruncate zero-filled everything: counters 0, states ST_EMPTY */
    s->h->version = SHM_VERSION;
    s->h->world = (uint32_t)c->world;
    s->h->slot_bytes = s->slot_bytes;
    s->h->total_bytes = s->size;
    atomic_store(&s->h->abort_rank, -1);
    atomic_store(&s->h->abort_peer, -1);
    if (pthread_mutexattr_init(&ma) != 0) {
        e = kiln__comm_fail(c, KILN_EIO, -1, "pthread_mutexattr_init failed");
        goto out;
    }
    ma_init = 1;
    if (pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) != 0 ||
        pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST) != 0) {
        e = kiln__comm_fail(c, KILN_EIO, -1, "robust process-shared mutexes are not supported");
        goto out;
    }
    for (int r = 0; r < c->world; r++)
        if (pthread_mutex_init(&s->ctl[r].alive, &ma) != 0) {
            e = kiln__comm_fail(c, KILN_EIO, -1, "pthread_mutex_init failed");
            goto out;
        }
out:
    if (ma_init) pthread_mutexattr_destroy(&ma);
    if (fd >= 0) close(fd);
    return e;
}

/* Opens the segment rank 0 created. KILN_OK: attached-to and checked;
 * KILN_ENOTFOUND: not there (yet), or stale: try again. */
static kiln_err open_segment(kiln_comm *c, shm *s)
{
    struct stat st;
    struct shm_hdr *h = MAP_FAILED;
    kiln_err e = KILN_ENOTFOUND;
    int fd = shm_open(s->name, O_RDWR, 0);

    if (fd < 0) {
        if (errno == ENOENT) return KILN_ENOTFOUND;
        return kiln__comm_fail(c, KILN_EIO, -1, "cannot open %s: %s", s->name, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof *h) goto out; /* being sized */
    /* the header first: it says what rank 0 was configured for */
    h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) goto out;
    for (int i = 0; i < 100 && atomic_load(&h->magic) != SHM_MAGIC; i++)
        sleep_s(0.0005);
    if (atomic_load(&h->magic) != SHM_MAGIC || atomic_load(&h->abandoned)) goto out;
    if (h->version != SHM_VERSION || h->world != (uint32_t)c->world ||
        h->slot_bytes != s->slot_bytes || (size_t)st.st_size != s->size) {
        /* rank 0 is alive (EBUSY on its lock) only in a segment of this job */
        struct rank_ctl *ctl0 = NULL;
        void *whole = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int live = 0;
        if (whole != MAP_FAILED && (size_t)st.st_size >= ctl_off() + sizeof *ctl0) {
            ctl0 = (struct rank_ctl *)((char *)whole + ctl_off());
            int rc = pthread_mutex_trylock(&ctl0->alive);
            int32_t pid = atomic_load(&ctl0->pid);
            /* the lock and, as a second opinion, the process itself */
            live = rc == EBUSY && pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
            if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&ctl0->alive);
        }
        if (whole != MAP_FAILED) munmap(whole, (size_t)st.st_size);
        /* Either a leftover (rank 0 of this job will replace it) or a real
         * disagreement. Keep trying until the deadline and report the
         * disagreement only then: a replacement may be on its way. */
        if (live)
            snprintf(s->pending, sizeof s->pending,
                     "segment %s was made by rank 0 for %u ranks and %llu-byte chunks, but rank "
                     "%d was configured for %d ranks and %zu-byte chunks: the replicas disagree "
                     "on the cluster (or two jobs share a key)",
                     s->name, h->world, (unsigned long long)h->slot_bytes, c->rank, c->world,
                     s->slot_bytes);
        goto out;
    }
    if ((e = map_fd(c, s, fd)) != KILN_OK) goto out;
    e = KILN_ENOTFOUND;
    /* rank 0 attaches before it marks the segment ready; if it is gone, the
     * segment is a leftover of an earlier run with this key */
    if (peer_status(s, 0) != PEER_ALIVE) goto out;
    if (atomic_load(&s->ctl[c->rank].state) != ST_EMPTY) {
        snprintf(s->pending, sizeof s->pending,
                 "rank %d already joined segment %s: two replicas were given the same rank (or "
                 "two jobs share a key)",
                 c->rank, s->name);
        goto out;
    }
    e = KILN_OK;
out:
    if (h != MAP_FAILED) munmap(h, sizeof *h);
    if (e != KILN_OK) unmap(s);
    close(fd);
    return e;
}

static kiln_err attach_self(kiln_comm *c, shm *s)
{
    struct rank_ctl *me = &s->ctl[c->rank];
    int rc = pthread_mutex_lock(&me->alive);
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(&me->alive);
    if (rc != 0)
        return kiln__comm_fail(c, KILN_EIO, -1, "cannot take the liveness lock: %s", strerror(rc));
    s->locked = 1;
    atomic_store(&me->pid, (int32_t)getpid());
    atomic_store(&me->state, ST_ATTACHED);
    atomic_fetch_add(&s->h->attached, 1);
    futex_wake(&s->h->attached);
    return KILN_OK;
}

static kiln_err wait_all_attached(kiln_comm *c, shm *s, double deadline)
{
    for (;;) {
        uint32_t n = atomic_load(&s->h->attached);
        if (n >= (uint32_t)c->world) return KILN_OK;
        if (atomic_load(&s->h->abandoned))
            return kiln__comm_fail(c, KILN_EIO, -1,
                                   "segment %s was replaced during rendezvous (a restarted "
                                   "replica with the same job key?)",
                                   s->name);
        for (int p = 0; p < c->world; p++)
            if (p != c->rank && peer_status(s, p) == PEER_DEAD)
                return kiln__comm_fail(c, KILN_EIO, p, "rank %d died during rendezvous on %s", p,
                                       s->name);
        double t = now_s();
        if (t >= deadline) {
            char missing[256] = "";
            size_t len = 0;
            int first = -1, nmiss = 0;
            for (int p = 0; p < c->world && len + 16 < sizeof missing; p++)
                if (atomic_load(&s->ctl[p].state) == ST_EMPTY) {
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                            first < 0 ? "" : ", ", p);
                    if (first < 0) first = p;
                    nmiss++;
                }
            return kiln__comm_fail(
                c, KILN_EIO, first, "rank%s %s did not join %s within %.1f s (%u of %d joined)",
                nmiss > 1 ? "s" : "", missing, s->name, c->timeout_s, n, c->world);
        }
        double left = deadline - t;
        futex_wait(&s->h->attached, n, left < SLEEP_SLICE_S ? left : SLEEP_SLICE_S);
    }
}

static void shm_destroy(kiln_comm *c);

static kiln_err shm_init(kiln_comm *c, const kiln_comm_config *cfg)
{
    shm *s;
    const char *key = cfg->job_key ? cfg->job_key : getenv("KILN_COLL_KEY");
    size_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes : DEFAULT_CHUNK;
    kiln_err e = KILN_OK;

    if (c->world > MAX_WORLD)
        return kiln__comm_fail(c, KILN_EINVAL, -1,
                               "world size %d: the shm backend takes at most %d", c->world,
                               MAX_WORLD);
    if (!(s = calloc(1, sizeof *s))) return kiln__comm_fail(c, KILN_ENOMEM, -1, "out of memory");
    c->impl = s;
    s->sum = kiln__sum_best();
    if (c->world == 1) return KILN_OK; /* nothing to share */
    if (!valid_key(key))
        return kiln__comm_fail(c, KILN_EINVAL, -1,
                               "job key %s%s%s: need 1..%d characters of [A-Za-z0-9._-], equal "
                               "on every replica and unique per job",
                               key ? "'" : "", key ? key : "(none: set job_key or KILN_COLL_KEY)",
                               key ? "'" : "", MAX_KEY);
    snprintf(s->name, sizeof s->name, "/kiln-coll-%s", key);
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    s->slot_bytes = align_up(chunk, 256);
    s->slot_elems = s->slot_bytes / sizeof(float);
    s->size = data_off(c->world) + 2 * (size_t)c->world * s->slot_bytes;
    if (!(s->srcs = calloc((size_t)c->world, sizeof *s->srcs)))
        return kiln__comm_fail(c, KILN_ENOMEM, -1, "out of memory");
    {
        /* Spinning only pays when every rank has a core of its own, and
         * only briefly: on a shared machine a long spin burns the time slice
         * the peer needs (measured: 4 KiB all-reduce 36 us with a 360 us spin
         * vs 2.3 us with none, on 2 busy cores). */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        const char *env = getenv("KILN_COLL_SPIN");
        s->spin = c->world <= cpus ? 100 : 0;
        if (env) s->spin = atoi(env);
        env = getenv("KILN_COLL_YIELD_US");
        s->yield_s = env ? atof(env) * 1e-6 : YIELD_S;
    }

    double deadline = now_s() + c->timeout_s;
    if (c->rank == 0) {
        if ((e = create_segment(c, s)) != KILN_OK) return e;
        if ((e = attach_self(c, s)) != KILN_OK) return e;
        atomic_store(&s->h->magic, SHM_MAGIC);
    } else {
        double nap = 0.0005;
        while ((e = open_segment(c, s)) == KILN_ENOTFOUND) {
            if (now_s() >= deadline && s->pending[0])
                return kiln__comm_fail(c, KILN_EINVAL, 0, "%s", s->pending);
            if (now_s() >= deadline)
                return kiln__comm_fail(c, KILN_EIO, 0,
                                       "rank 0 did not create %s within %.1f s (is rank 0 "
                                       "running, with the same job key?)",
                                       s->name, c->timeout_s);
            sleep_s(nap);
            if (nap < 0.01) nap *= 2;
        }
        if (e != KILN_OK) return e;
        if ((e = attach_self(c, s)) != KILN_OK) return e;
    }
    if ((e = wait_all_attached(c, s, deadline)) != KILN_OK) return e;
    if (c->rank == 0) {
        /* everyone has it mapped: the name is no longer needed, and without it
         * nothing can leak into /dev/shm whatever happens next */
        shm_unlink(s->name);
        s->unlinked = 1;
    }
    return KILN_OK;
}

static void shm_destroy(kiln_comm *c)
{
    shm *s = c->impl;
    if (!s) return;
    if (s->h) {
        if (s->locked) {
            atomic_store(&s->ctl[c->rank].state, ST_LEFT);
            pthread_mutex_unlock(&s->ctl[c->rank].alive);
        }
        /* wake anyone asleep on our counters so they notice at once */
        futex_wake(&s->ctl[c->rank].in_seq);
        futex_wake(&s->ctl[c->rank].red_seq);
        futex_wake(&s->ctl[c->rank].done_seq);
    }
    if (s->creator && !s->unlinked) shm_unlink(s->name);
    unmap(s);
    for (int i = 0; i < s->nregs; i++)
        munmap(s->regs[i].base, s->regs[i].map_bytes);
    free(s->regs);
    free(s->srcs);
    free(s);
    c->impl = NULL;
}

const kiln__coll_ops kiln__coll_shm = {
    .name = "shm",
    .init = shm_init,
    .allreduce_sum_f32 = shm_allreduce,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .alloc_f32 = shm_alloc,
    .free_f32 = shm_free,
    .rs_begin = shm_rs_begin,
    .allgather_f32 = shm_allgather,
    .slice = shm_slice,
    .views = shm_views,
    .allgather_written = shm_allgather_written,
    .destroy = shm_destroy,
};
