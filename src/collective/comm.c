/* comm.c - the generic communicator: argument checks, backend choice,
 * operation numbering, the sticky error, and the checksum check built on the
 * backend's broadcast + all-reduce. */
#include "collective/coll_int.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 30.0

void (*kiln__coll_test_step_hook)(int rank, uint64_t step);

uint64_t kiln__fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    size_t i = 0;
    /* a word at a time: this is a debug check over whole models, and the
     * byte-wise loop would run at about 1 byte per cycle */
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

kiln_err kiln__comm_fail(kiln_comm *c, kiln_err e, int peer, const char *fmt, ...)
{
    va_list ap;
    if (c->failed != KILN_OK) return c->failed; /* the first cause is the useful one */
    c->failed = e;
    c->failed_peer = peer;
    size_t n = 0;
    if (c->step >= 0) /* the caller's label: which training step */
        n = (size_t)snprintf(c->err, sizeof c->err, "step %lld: ", (long long)c->step);
    if (n >= sizeof c->err) n = 0;
    va_start(ap, fmt);
    vsnprintf(c->err + n, sizeof c->err - n, fmt, ap);
    va_end(ap);
    return e;
}

int kiln_comm_backend_available(kiln_coll_backend b)
{
    switch (b) {
    case KILN_COLL_AUTO:
    case KILN_COLL_SHM:
        return 1;
    case KILN_COLL_MPI:
#ifdef KILN_HAVE_MPI
        return 1;
#else
        return 0;
#endif
    }
    return 0;
}

kiln_comm_config kiln_comm_config_from_tf(const kiln_tf_group *g)
{
    kiln_comm_config cfg = {0};
    cfg.rank = g->rank;
    cfg.world_size = g->world_size;
    cfg.backend = KILN_COLL_AUTO;
    /* the executor may name the job (and attempt) itself; else the cluster hash */
    const char *env = getenv("KILN_COLL_KEY");
    cfg.job_key = env && *env ? env : g->key;
    cfg.hosts = g->hosts;
    return cfg;
}

/* Is `host` (the part before ":port") this machine? Loopback names, this
 * machine's hostname, and addresses of its interfaces count. */
static int host_is_local(const char *hostport)
{
    char host[256], me[256];
    const char *colon;
    struct ifaddrs *ifs = NULL;
    int local = 0;

    /* [v6]:port, v4:port, name:port, or a bare host */
    if (hostport[0] == '[') {
        const char *end = strchr(hostport, ']');
        size_t n = end ? (size_t)(end - hostport - 1) : strlen(hostport + 1);
        snprintf(host, sizeof host, "%.*s", (int)n, hostport + 1);
    } else {
        colon = strrchr(hostport, ':');
        size_t n = colon ? (size_t)(colon - hostport) : strlen(hostport);
        snprintf(host, sizeof host, "%.*s", (int)n, hostport);
    }
    if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0)
        return 1;
    if (gethostname(me, sizeof me) == 0) {
        me[sizeof me - 1] = '\0';
        if (strcmp(host, me) == 0) return 1;
        size_t dot = strcspn(me, ".");
        if (strlen(host) == dot && strncmp(host, me, dot) == 0) return 1;
    }
    /* an address literal: compare with this machine's interfaces (no DNS: a
     * name lookup here could hang on a broken resolver) */
    if (getifaddrs(&ifs) != 0) return 0;
    for (struct ifaddrs *a = ifs; a && !local; a = a->ifa_next) {
        char buf[NI_MAXHOST];
        if (!a->ifa_addr) continue;
        int fam = a->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        socklen_t len = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        if (getnameinfo(a->ifa_addr, len, buf, sizeof buf, NULL, 0, NI_NUMERICHOST) != 0) continue;
        char *pct = strchr(buf, '%'); /* fe80::1%eth0 */
        if (pct) *pct = '\0';
        local = strcmp(buf, host) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

static const kiln__coll_ops *choose(const kiln_comm_config *cfg, char *err, size_t errlen)
{
    kiln_coll_backend b = cfg->backend;

    if (b == KILN_COLL_AUTO) {
        b = KILN_COLL_SHM;
        /* one replica never needs a network, whatever its address */
        if (cfg->hosts && cfg->world_size > 1)
            for (int i = 0; i < cfg->world_size; i++)
                if (!cfg->hosts[i] || !host_is_local(cfg->hosts[i])) {
                    b = KILN_COLL_MPI;
                    break;
                }
    }
    if (b == KILN_COLL_SHM) return &kiln__coll_shm;
    if (b == KILN_COLL_MPI) {
#ifdef KILN_HAVE_MPI
        return &kiln__coll_mpi;
#else
        snprintf(err, errlen,
                 "the replicas are on several hosts (or backend mpi was asked for), but kiln "
                 "was built without MPI (install libopenmpi-dev and rebuild)");
        return NULL;
#endif
    }
    snprintf(err, errlen, "unknown collective backend %d", (int)cfg->backend);
    return NULL;
}

kiln_err kiln_comm_init(const kiln_comm_config *cfg, kiln_comm **out, char *err, size_t errlen)
{
    kiln_comm *c = NULL;
    const kiln__coll_ops *ops;
    kiln_err e = KILN_OK;
    char dummy[8];

    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    *out = NULL;
    if (!(ops = choose(cfg, err, errlen))) return KILN_ENOTFOUND;
    if (ops == &kiln__coll_shm) {
        if (cfg->world_size < 1) {
            snprintf(err, errlen, "world size %d: need at least 1 replica", cfg->world_size);
            return KILN_EINVAL;
        }
        if (cfg->rank < 0) {
            snprintf(err, errlen,
                     "rank %d: this task is not in the all-reduce group (a ps or evaluator "
                     "task, or no rank was set)",
                     cfg->rank);
            return KILN_EINVAL;
        }
        if (cfg->rank >= cfg->world_size) {
            snprintf(err, errlen, "rank %d is outside the group of %d replicas (0..%d)", cfg->rank,
                     cfg->world_size, cfg->world_size - 1);
            return KILN_EINVAL;
        }
    }
    if (!(c = calloc(1, sizeof *c))) {
        snprintf(err, errlen, "out of memory");
        return KILN_ENOMEM;
    }
    c->ops = ops;
    c->rank = cfg->rank;
    c->world = cfg->world_size;
    c->failed_peer = -1;
    c->step = c->user_step = -1;
    c->op_name = "init";
    c->timeout_s = cfg->timeout_s;
    if (c->timeout_s <= 0) {
        const char *env = getenv("KILN_COLL_TIMEOUT_S");
        c->timeout_s = env ? strtod(env, NULL) : 0;
        if (!(c->timeout_s > 0)) c->timeout_s = DEFAULT_TIMEOUT_S;
    }
    if ((e = ops->init(c, cfg)) != KILN_OK) {
        snprintf(err, errlen, "%s: %s", ops->name, c->err[0] ? c->err : kiln_err_str(e));
        goto out;
    }
    *out = c;
    c = NULL;
out:
    if (c) {
        ops->destroy(c);
        free(c);
    }
    return e;
}

/* ---- non-blocking all-reduce: a communication thread per communicator ----
 *
 * kiln_comm_iallreduce_sum_f32 queues the call; one thread, started on first
 * use, runs queued calls in order with the same code as the blocking call. A
 * blocking call (or alloc, or destroy) first waits for the queue to drain, so
 * the order of operations is the order of the calls, as every rank needs. The
 * thread is the only one touching the backend while the queue is not empty;
 * the mutex hands c's state (op numbers, sticky error) between the two. */
typedef struct async_req {
    float *buf;
    size_t count;
    int64_t step; /* the step label when the call was queued */
} async_req;

struct kiln__async {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    async_req *q; /* pending requests, q[head..tail) */
    size_t head, tail, cap;
    uint64_t submitted, completed; /* tickets: the n-th request is ticket n */
    int stop;
};

static kiln_err run_allreduce(kiln_comm *c, float *buf, size_t count);

static void *async_main(void *arg)
{
    kiln_comm *c = arg;
    struct kiln__async *a = c->async;

    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && a->head == a->tail)
            pthread_cond_wait(&a->work, &a->mu);
        if (a->head == a->tail) break; /* stop, and nothing left */
        async_req r = a->q[a->head];
        pthread_mutex_unlock(&a->mu);
        c->step = r.step;
        run_allreduce(c, r.buf, r.count); /* a failure is sticky in c */
        pthread_mutex_lock(&a->mu);
        a->head++;
        a->completed++;
        if (a->head == a->tail) a->head = a->tail = 0;
        pthread_cond_broadcast(&a->done);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Waits until request `ticket` (and so every earlier one) has run. */
static void async_wait(kiln_comm *c, uint64_t ticket)
{
    struct kiln__async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (a->completed < ticket)
        pthread_cond_wait(&a->done, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

static void drain(kiln_comm *c)
{
    if (c->async) async_wait(c, c->async->submitted);
}

kiln_err kiln_comm_iallreduce_sum_f32(kiln_comm *c, float *buf, size_t count,
                                      kiln_comm_ticket *ticket)
{
    struct kiln__async *a = c->async;
    kiln_err e = KILN_OK;

    *ticket = 0;
    if (!a) {
        if (!(a = calloc(1, sizeof *a)))
            return kiln__comm_fail(c, KILN_ENOMEM, -1, "iallreduce: out of memory");
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->work, NULL);
        pthread_cond_init(&a->done, NULL);
        c->async = a;
        if (pthread_create(&a->thread, NULL, async_main, c) != 0) {
            c->async = NULL;
            pthread_cond_destroy(&a->done);
            pthread_cond_destroy(&a->work);
            pthread_mutex_destroy(&a->mu);
            free(a);
            return kiln__comm_fail(c, KILN_EIO, -1,
                                   "iallreduce: cannot start the communication thread");
        }
    }
    pthread_mutex_lock(&a->mu);
    /* a failed communicator is not checked here: c->failed belongs to the
     * thread while calls are queued, and it fails queued calls at once */
    if (a->tail == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        async_req *nq = realloc(a->q, cap * sizeof *nq);
        if (!nq) {
            e = kiln__comm_fail(c, KILN_ENOMEM, -1, "iallreduce: out of memory");
            goto out;
        }
        a->q = nq;
        a->cap = cap;
    }
    a->q[a->tail++] = (async_req){buf, count, c->user_step};
    *ticket = ++a->submitted;
    pthread_cond_signal(&a->work);
out:
    pthread_mutex_unlock(&a->mu);
    return e;
}

kiln_err kiln_comm_wait(kiln_comm *c, kiln_comm_ticket ticket)
{
    async_wait(c, ticket);
    return c->failed;
}

kiln_err kiln_comm_wait_all(kiln_comm *c)
{
    drain(c);
    return c->failed;
}

static void async_stop(kiln_comm *c)
{
    struct kiln__async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1; /* the thread runs what is queued (fast once failed), then ends */
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->done);
    pthread_cond_destroy(&a->work);
    pthread_mutex_destroy(&a->mu);
    free(a->q);
    free(a);
    c->async = NULL;
}

void kiln_comm_destroy(kiln_comm *c)
{
    if (!c) return;
    async_stop(c);
    c->ops->destroy(c);
    free(c);
}

/* Every operation starts here: a failed communicator stays failed. Called
 * on the caller's thread after drain(), or on the communication thread. */
static kiln_err begin_nodrain(kiln_comm *c, const char *name)
{
    if (c->failed != KILN_OK) return c->failed;
    c->op_seq++;
    c->op_name = name;
    return KILN_OK;
}

static kiln_err begin(kiln_comm *c, const char *name)
{
    drain(c);
    c->step = c->user_step; /* the thread may have left a queued call's label */
    return begin_nodrain(c, name);
}

void kiln_comm_set_step(kiln_comm *c, int64_t step)
{
    c->user_step = step < 0 ? -1 : step;
}

static kiln_err run_allreduce(kiln_comm *c, float *buf, size_t count)
{
    kiln_err e;
    if ((e = begin_nodrain(c, "allreduce")) != KILN_OK) return e;
    if (count && !buf) return kiln__comm_fail(c, KILN_EINVAL, -1, "allreduce: NULL buffer");
    return c->ops->allreduce_sum_f32(c, buf, count);
}

kiln_err kiln_comm_allreduce_sum_f32(kiln_comm *c, float *buf, size_t count)
{
    drain(c);
    c->step = c->user_step;
    return run_allreduce(c, buf, count);
}

int kiln_comm_sharding(const kiln_comm *c)
{
    return c->ops->rs_begin && c->ops->allgather_f32 && c->ops->slice && c->ops->views &&
           c->ops->allgather_written;
}

kiln_err kiln_comm_shared_views(kiln_comm *c, float *buf, size_t count, float **views)
{
    if (c->failed != KILN_OK) return c->failed;
    if (!kiln_comm_sharding(c))
        return kiln__comm_fail(c, KILN_EINVAL, -1, "shared views: the %s backend has none",
                               c->ops->name);
    if (!buf || !views) return kiln__comm_fail(c, KILN_EINVAL, -1, "shared views: NULL buffer");
    return c->ops->views(c, buf, count, views);
}

/* begin() for the sharded steps: the backend must have them, and the
 * buffers be given (have_bufs). */
static kiln_err begin_sharded(kiln_comm *c, const char *what, int have_bufs)
{
    kiln_err e;
    if ((e = begin(c, what)) != KILN_OK) return e;
    if (!kiln_comm_sharding(c))
        return kiln__comm_fail(c, KILN_EINVAL, -1, "%s: the %s backend has none", what,
                               c->ops->name);
    if (!have_bufs) return kiln__comm_fail(c, KILN_EINVAL, -1, "%s: NULL buffer", what);
    return KILN_OK;
}

kiln_err kiln_comm_allgather_written(kiln_comm *c, float *buf, size_t count)
{
    kiln_err e = begin_sharded(c, "all-gather", buf != NULL);
    return e != KILN_OK ? e : c->ops->allgather_written(c, buf, count);
}

void kiln_comm_slice(const kiln_comm *c, size_t count, int rank, size_t *lo, size_t *hi)
{
    if (c->ops->slice) {
        c->ops->slice(c, count, rank, lo, hi);
        return;
    }
    size_t per = (count + (size_t)c->world - 1) / (size_t)c->world;
    size_t a = (size_t)rank * per;
    *lo = a < count ? a : count;
    *hi = a + per < count ? a + per : count;
}

kiln_err kiln_comm_reduce_scatter_begin(kiln_comm *c, float *buf, size_t count, const float **srcs)
{
    kiln_err e = begin_sharded(c, "reduce-scatter", buf && srcs);
    return e != KILN_OK ? e : c->ops->rs_begin(c, buf, count, srcs);
}

kiln_err kiln_comm_allgather_f32(kiln_comm *c, float *buf, size_t count)
{
    kiln_err e = begin_sharded(c, "all-gather", buf != NULL);
    return e != KILN_OK ? e : c->ops->allgather_f32(c, buf, count);
}

kiln_err kiln_comm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root)
{
    kiln_err e;
    if ((e = begin(c, "broadcast")) != KILN_OK) return e;
    if (root < 0 || root >= c->world)
        return kiln__comm_fail(c, KILN_EINVAL, -1, "broadcast: root %d outside 0..%d", root,
                               c->world - 1);
    if (bytes && !buf) return kiln__comm_fail(c, KILN_EINVAL, -1, "broadcast: NULL buffer");
    return c->ops->broadcast(c, buf, bytes, root);
}

float *kiln_comm_alloc_f32(kiln_comm *c, size_t count)
{
    float *p = NULL;
    size_t bytes;

    if (begin(c, "alloc") != KILN_OK) return NULL;
    if (count > (SIZE_MAX - 63) / sizeof(float)) {
        kiln__comm_fail(c, KILN_EINVAL, -1, "alloc: %zu floats is too many", count);
        return NULL;
    }
    if (c->ops->alloc_f32) return c->ops->alloc_f32(c, count, &p) == KILN_OK ? p : NULL;
    bytes = (count * sizeof(float) + 63) / 64 * 64;
    if (!(p = aligned_alloc(64, bytes ? bytes : 64))) {
        kiln__comm_fail(c, KILN_ENOMEM, -1, "alloc: out of memory for %zu floats", count);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

void kiln_comm_free(kiln_comm *c, float *buf)
{
    if (!buf) return;
    if (c->ops->free_f32)
        c->ops->free_f32(c, buf);
    else
        free(buf);
}

kiln_err kiln_comm_barrier(kiln_comm *c)
{
    kiln_err e;
    if ((e = begin(c, "barrier")) != KILN_OK) return e;
    return c->ops->barrier(c);
}

kiln_err kiln_comm_check_identical(kiln_comm *c, const void *buf, size_t bytes, int *n_diverged,
                                   int *first_diverged)
{
    uint64_t mine, root;
    float *flags = NULL;
    kiln_err e;
    int n = 0, first = -1;

    drain(c);
    if (c->failed != KILN_OK) return c->failed;
    mine = kiln__fnv1a64(buf, bytes, KILN__FNV_OFFSET);
    /* the length takes part too: replicas with different model sizes differ */
    mine = kiln__fnv1a64(&bytes, sizeof bytes, mine);
    root = mine;
    if ((e = kiln_comm_broadcast(c, &root, sizeof root, 0)) != KILN_OK) goto out;
    /* one flag per rank, summed: every rank learns who diverged. Sums of 0/1
     * are exact in float far beyond any world size. */
    if (!(flags = calloc((size_t)c->world, sizeof *flags))) {
        e = kiln__comm_fail(c, KILN_ENOMEM, -1, "checksum: out of memory");
        goto out;
    }
    flags[c->rank] = mine != root ? 1.0f : 0.0f;
    if ((e = kiln_comm_allreduce_sum_f32(c, flags, (size_t)c->world)) != KILN_OK) goto out;
    for (int r = 0; r < c->world; r++)
        if (flags[r] != 0.0f) {
            n++;
            if (first < 0) first = r;
        }
out:
    free(flags);
    if (n_diverged) *n_diverged = n;
    if (first_diverged) *first_diverged = first;
    return e;
}

int kiln_comm_rank(const kiln_comm *c)
{
    return c->rank;
}

int kiln_comm_world_size(const kiln_comm *c)
{
    return c->world;
}

const char *kiln_comm_backend_name(const kiln_comm *c)
{
    return c->ops->name;
}

const char *kiln_comm_error(const kiln_comm *c)
{
    return c->err;
}

int kiln_comm_pending(kiln_comm *c)
{
    struct kiln__async *a = c->async;
    int n;
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    n = (int)(a->submitted - a->completed);
    pthread_mutex_unlock(&a->mu);
    return n;
}

int kiln_comm_failed_peer(const kiln_comm *c)
{
    return c->failed_peer;
}
