/* test_ps_server.c - parameter servers on localhost with synthetic gradients:
 *
 *  - update math: a server fed gradients by one client ends with exactly the
 *    parameters of a plain loop applying the same gradients (SGD+momentum and
 *    Adam, cosine schedule; tolerance 0: the server runs the same per-element
 *    arithmetic in the same order, so the floats must be identical);
 *  - sharding: layout balance, gather/scatter round trip;
 *  - two workers pushing concurrently: every push counted, version = applied;
 *  - staleness: a gradient computed from an old version reports that
 *    staleness and is dropped when staler than max_staleness;
 *  - refusals: another model's signature, a wrong size, garbage, and an
 *    oversized message are refused and the server keeps serving;
 *  - a ps that is not there: the client's error names the task and address;
 *  - exactly once: with the reply to an applied push dropped (the fault a
 *    test can inject), the client's resend is answered without a second
 *    update: the parameters are bit-identical to the fault-free reference
 *    and the duplicate is counted; a ps rebuilt from that state (a restart
 *    from a checkpoint) still refuses to re-apply every one of those pushes,
 *    refuses an older attempt, and tells a new client the attempt to beat;
 *  - CURVE: a ps with keys serves the client holding the job's key pair, and
 *    refuses (and counts) a plain client, one with another client key and one
 *    that expects another server key. */
#include "kiln/ps.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define N 1000

static volatile sig_atomic_t g_stop;

typedef struct srv {
    kiln_ps_server *s;
    pthread_t th;
    int rc;
} srv;

static void *serve(void *p)
{
    srv *v = p;
    v->rc = kiln_ps_server_run(v->s, &g_stop);
    return NULL;
}

static int start(srv *v, const kiln_ps_server_config *cfg)
{
    char err[256];
    g_stop = 0;
    v->s = kiln_ps_server_new(cfg, err, sizeof(err));
    if (!v->s) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    return pthread_create(&v->th, NULL, serve, v);
}

static void stop(srv *v)
{
    g_stop = 1;
    pthread_join(v->th, NULL);
    kiln_ps_server_free(v->s);
}

/* "tcp://127.0.0.1:PORT" -> "127.0.0.1:PORT", the TF_CONFIG form */
static const char *hostport(const srv *v)
{
    return kiln_ps_server_endpoint(v->s) + strlen("tcp://");
}

static void grad(float *g, size_t n, int k)
{
    for (size_t i = 0; i < n; i++)
        g[i] = sinf((float)(i * 7 + (size_t)k * 13)) * 0.1f;
}

static kiln_ps_client *client(const srv *v, uint64_t sig, uint32_t worker, size_t n, int timeout)
{
    const char *addr = hostport(v);
    kiln_ps_client_config cc = {.num_ps = 1,
                                .addrs = &addr,
                                .shard_size = &n,
                                .model_sig = sig,
                                .worker = worker,
                                .timeout_ms = timeout,
                                .retry_ms = timeout};
    char err[256];
    kiln_ps_client *c = kiln_ps_client_new(&cc, err, sizeof(err));
    if (!c) fprintf(stderr, "client: %s\n", err);
    return c;
}

/* the plain reference: the textbook loops, written out here on purpose */
static void ref_run(int adam, const kiln_ps_opt *o, float *p, int steps)
{
    float *m = calloc(N, sizeof(float)), *v = calloc(N, sizeof(float)), *g = malloc(N * 4);
    for (int k = 0; k < steps; k++) {
        grad(g, N, k);
        float lr = kiln_ps_lr_at(o, (uint64_t)k);
        double bc1 = 1.0 - pow(o->beta1, k + 1), bc2 = 1.0 - pow(o->beta2, k + 1);
        float step = (float)(lr / bc1), sbc2 = (float)sqrt(bc2);
        for (int i = 0; i < N; i++) {
            if (adam) {
                m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * g[i];
                v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * g[i] * g[i];
                p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + o->eps);
            } else {
                m[i] = o->momentum * m[i] + g[i];
                p[i] -= lr * m[i];
            }
        }
    }
    free(m);
    free(v);
    free(g);
}

static void test_math(int adam)
{
    float p0[N], ref[N], g[N], out[N];
    for (int i = 0; i < N; i++)
        p0[i] = ref[i] = 0.01f * (float)(i % 17) - 0.05f;
    kiln_ps_opt o = {.adam = adam,
                     .lr = adam ? 0.01f : 0.1f,
                     .momentum = 0.9f,
                     .beta1 = 0.9f,
                     .beta2 = 0.999f,
                     .eps = 1e-8f,
                     .cosine = 1,
                     .total_updates = 30};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*",
                                .shard = 0,
                                .model_sig = 77,
                                .n = N,
                                .params = p0,
                                .opt = o,
                                .max_staleness = KILN_PS_UNBOUNDED};
    srv v;
    if (start(&v, &sc) != 0) {
        CHECK(0);
        return;
    }
    kiln_ps_client *c = client(&v, 77, 0, N, 10000);
    CHECK(c != NULL);
    float *pp = out;
    const float *gp = g;
    CHECK(kiln_ps_pull(c, &pp) == 0);
    CHECK(memcmp(out, p0, sizeof(out)) == 0 && kiln_ps_client_version(c, 0) == 0);
    int steps = 25;
    for (int k = 0; k < steps; k++) {
        grad(g, N, k);
        kiln_ps_push_info info;
        CHECK(kiln_ps_push(c, &gp, &pp, &info) == 0);
        CHECK(info.staleness_max == 0 && info.dropped == 0);
    }
    ref_run(adam, &o, ref, steps);
    CHECK_MSG(memcmp(out, ref, sizeof(out)) == 0, "%s: server params differ from the reference",
              adam ? "adam" : "sgd");
    CHECK(kiln_ps_client_version(c, 0) == (uint64_t)steps);
    /* the state holds params + slots */
    float *st = NULL;
    int nslots = 0;
    uint64_t ver = 0;
    uint8_t *dd = NULL;
    size_t ddlen = 0, ndd = 0;
    CHECK(kiln_ps_pull_state(c, 0, &st, &nslots, &ver, &dd, &ddlen) == 0);
    CHECK(nslots == (adam ? 2 : 1) && ver == (uint64_t)steps);
    CHECK(st && memcmp(st, ref, sizeof(ref)) == 0);
    /* ... and the dedup table: worker 0's last push, step 25 of its attempt */
    kiln_ps_dedup_entry e[KILN_PS_MAX_WORKERS];
    char err[256];
    CHECK(dd && kiln_ps_dedup_decode(dd, ddlen, e, &ndd, err, sizeof(err)) == 0);
    CHECK(ndd == 1 && e[0].worker == 0 && e[0].step == (uint64_t)steps &&
          e[0].attempt == kiln_ps_client_attempt(c) && e[0].attempt != 0);
    free(st);
    free(dd);
    kiln_ps_client_free(c);
    stop(&v);
}

static void test_layout(void)
{
    const char *names[] = {"d0/kernel", "d0/bias", "d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};
    size_t sizes[] = {401408, 512, 262144, 512, 5120, 10};
    kiln_ps_layout l, l3;
    char err[256];
    CHECK(kiln_ps_layout_init(&l, 6, names, sizes, 2, "sgd", err, sizeof(err)) == 0);
    CHECK(l.var_shard[0] == 0 && l.var_shard[2] == 1); /* the two big ones apart */
    CHECK(l.shard_size[0] + l.shard_size[1] == 401408 + 512 + 262144 + 512 + 5120 + 10);
    CHECK(kiln_ps_layout_init(&l3, 6, names, sizes, 3, "sgd", err, sizeof(err)) == 0);
    CHECK(l.sig != l3.sig); /* another ps list is another signature */
    kiln_ps_layout l4;
    CHECK(kiln_ps_layout_init(&l4, 6, names, sizes, 2, "adam", err, sizeof(err)) == 0);
    CHECK(l4.sig != l.sig);
    kiln_ps_layout_free(&l4);
    kiln_ps_layout_free(&l3);
    CHECK(kiln_ps_layout_init(&l3, 0, names, sizes, 2, "", err, sizeof(err)) != 0 && err[0]);
    /* gather/scatter round trip */
    float *vars[6], *back[6], *sh[2];
    for (int i = 0; i < 6; i++) {
        vars[i] = malloc(sizes[i] * 4);
        back[i] = calloc(sizes[i], 4);
        for (size_t k = 0; k < sizes[i]; k++)
            vars[i][k] = (float)(i * 1000003 + (int)k);
    }
    for (int s = 0; s < 2; s++)
        sh[s] = malloc(l.shard_size[s] * 4);
    kiln_ps_layout_gather(&l, (const float *const *)vars, sh);
    kiln_ps_layout_scatter(&l, (const float *const *)sh, back);
    int same = 1;
    for (int i = 0; i < 6; i++)
        same &= memcmp(vars[i], back[i], sizes[i] * 4) == 0;
    CHECK(same);
    for (int i = 0; i < 6; i++) {
        free(vars[i]);
        free(back[i]);
    }
    free(sh[0]);
    free(sh[1]);
    kiln_ps_layout_free(&l);
}

typedef struct worker_arg {
    const srv *v;
    int id, pushes, fails;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    kiln_ps_client *c = client(a->v, 5, (uint32_t)a->id, N, 10000);
    float g[N], out[N], *pp = out;
    const float *gp = g;
    if (!c || kiln_ps_pull(c, &pp) != 0) a->fails++;
    for (int k = 0; c && k < a->pushes; k++) {
        grad(g, N, k + a->id);
        if (kiln_ps_push(c, &gp, &pp, NULL) != 0) a->fails++;
    }
    if (c && kiln_ps_done(c) != 0) a->fails++;
    kiln_ps_client_free(c);
    return NULL;
}

static void test_async_and_staleness(void)
{
    float p0[N] = {0};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*",
                                .model_sig = 5,
                                .n = N,
                                .params = p0,
                                .opt = {.lr = 0.01f, .momentum = 0.9f},
                                .max_staleness = 2};
    srv v;
    if (start(&v, &sc) != 0) {
        CHECK(0);
        return;
    }
    /* two workers at once, never waiting for each other */
    worker_arg a[2] = {{&v, 1, 40, 0}, {&v, 2, 40, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, worker, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(a[0].fails == 0 && a[1].fails == 0);
    kiln_ps_stats st;
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.pushes == 80);
    CHECK(st.version == st.pushes - st.dropped);
    CHECK(st.workers_done == 2);

    /* deterministic staleness: A pulls at version V, B pushes 3 times, A's
     * gradient is then 3 versions stale (> 2: dropped, params unchanged) */
    kiln_ps_client *ca = client(&v, 5, 1, N, 10000), *cb = client(&v, 5, 2, N, 10000);
    float g[N], pa[N], pb[N], *ppa = pa, *ppb = pb;
    const float *gp = g;
    grad(g, N, 1);
    CHECK(kiln_ps_pull(ca, &ppa) == 0 && kiln_ps_pull(cb, &ppb) == 0);
    uint64_t v0 = kiln_ps_client_version(ca, 0);
    kiln_ps_push_info info;
    for (int k = 0; k < 3; k++)
        CHECK(kiln_ps_push(cb, &gp, &ppb, &info) == 0 && info.staleness_max == 0);
    CHECK(kiln_ps_push(ca, &gp, &ppa, &info) == 0);
    CHECK(info.staleness_max == 3 && info.dropped == 1);
    CHECK(kiln_ps_client_version(ca, 0) == v0 + 3);
    CHECK(memcmp(pa, pb, sizeof(pa)) == 0); /* the dropped gradient changed nothing */
    /* 2 stale: applied */
    CHECK(kiln_ps_push(cb, &gp, &ppb, &info) == 0 && kiln_ps_push(cb, &gp, &ppb, &info) == 0);
    CHECK(kiln_ps_push(ca, &gp, &ppa, &info) == 0);
    CHECK(info.staleness_max == 2 && info.dropped == 0);
    CHECK(kiln_ps_client_version(ca, 0) == v0 + 6);
    kiln_ps_stats s2;
    CHECK(kiln_ps_get_stats(ca, 0, &s2) == 0);
    CHECK(s2.pushes == st.pushes + 7 && s2.dropped == st.dropped + 1);
    CHECK(s2.staleness_max >= 3);

    /* refusals: another model */
    kiln_ps_client *cx = client(&v, 6, 3, N, 10000);
    CHECK(kiln_ps_pull(cx, &ppa) != 0);
    CHECK(strstr(kiln_ps_client_error(cx), "refused") &&
          strstr(kiln_ps_client_error(cx), "another model"));
    kiln_ps_client_free(cx);
    /* ... another shard size */
    cx = client(&v, 5, 3, N - 1, 10000);
    CHECK(kiln_ps_push(cx, &gp, &ppa, &info) != 0);
    CHECK(strstr(kiln_ps_client_error(cx), "expects"));
    kiln_ps_client_free(cx);

    /* raw garbage and an oversized message on a bare socket */
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, tmo = 5000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    zmq_connect(s, kiln_ps_server_endpoint(v.s));
    zmq_send(s, "hello", 5, 0);
    uint8_t rep[512];
    int r = zmq_recv(s, rep, sizeof(rep), 0);
    kiln_ps_hdr h;
    const uint8_t *pl;
    char err[256];
    CHECK(r > 0 && kiln_ps_msg_decode(rep, (size_t)r, 4096, &h, &pl, err, sizeof(err)) == 0 &&
          h.status == KILN_PS_EBADMSG);
    size_t big = KILN_PS_HEADER_SIZE + (N + 100) * 4;
    uint8_t *huge = calloc(1, big);
    zmq_send(s, huge, big, 0); /* over ZMQ_MAXMSGSIZE: the peer is cut off */
    free(huge);
    zmq_close(s);
    zmq_ctx_term(ctx);
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.rejected >= 3);
    /* and the server still serves */
    CHECK(kiln_ps_pull(ca, &ppa) == 0);
    /* shutdown */
    CHECK(kiln_ps_shutdown(ca) == 0);
    pthread_join(v.th, NULL);
    CHECK(v.rc == 0);
    kiln_ps_server_free(v.s);
    kiln_ps_client_free(ca);
    kiln_ps_client_free(cb);
}

static void test_absent(void)
{
    /* bind and free a server to find a port that nobody serves now */
    float p0[4] = {0};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*", .n = 4, .params = p0};
    char err[256], addr[64];
    kiln_ps_server *s = kiln_ps_server_new(&sc, err, sizeof(err));
    CHECK(s != NULL);
    if (!s) return;
    snprintf(addr, sizeof(addr), "%s", kiln_ps_server_endpoint(s) + 6);
    kiln_ps_server_free(s);
    const char *ap = addr;
    size_t n = 4;
    kiln_ps_client_config cc = {
        .num_ps = 1, .addrs = &ap, .shard_size = &n, .timeout_ms = 600, .retry_ms = 200};
    kiln_ps_client *c = kiln_ps_client_new(&cc, err, sizeof(err));
    float out[4], *pp = out;
    CHECK(c && kiln_ps_pull(c, &pp) != 0);
    if (c) {
        const char *e = kiln_ps_client_error(c);
        CHECK_MSG(strstr(e, "ps task 0") && strstr(e, addr) && strstr(e, "no reply"), "%s", e);
        /* the timeout as given, not rounded down to whole seconds */
        CHECK_MSG(strstr(e, "within 0.6 s") != NULL, "%s", e);
    }
    kiln_ps_client_free(c);
}

/* a client of srv v with these CURVE keys (NULL: plain) and a short timeout */
static int curve_pull(const srv *v, const char *server_pub, const char *pub, const char *sec)
{
    const char *addr = hostport(v);
    size_t n = 4;
    kiln_ps_client_config cc = {.num_ps = 1,
                                .addrs = &addr,
                                .shard_size = &n,
                                .timeout_ms = 500,
                                .retry_ms = 250,
                                .curve_server = server_pub,
                                .curve_public = pub,
                                .curve_secret = sec};
    char err[256];
    float out[4] = {0}, *pp = out;
    kiln_ps_client *c = kiln_ps_client_new(&cc, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "client: %s\n", err);
        return -2;
    }
    int rc = kiln_ps_pull(c, &pp);
    if (rc == 0) rc = out[2] == 3.0f ? 0 : -3;
    kiln_ps_client_free(c);
    return rc;
}

static void test_curve(void)
{
    char spub[41], ssec[41], cpub[41], csec[41], xpub[41], xsec[41];
    if (!zmq_has("curve")) {
        printf("SKIP curve: this libzmq has no CURVE\n");
        return;
    }
    CHECK(zmq_curve_keypair(spub, ssec) == 0 && zmq_curve_keypair(cpub, csec) == 0 &&
          zmq_curve_keypair(xpub, xsec) == 0);
    float p0[4] = {1, 2, 3, 4};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*",
                                .n = 4,
                                .params = p0,
                                .max_staleness = KILN_PS_UNBOUNDED,
                                .curve_secret = ssec,
                                .curve_client = cpub};
    srv v;
    CHECK(start(&v, &sc) == 0);
    CHECK_MSG(curve_pull(&v, spub, cpub, csec) == 0, "the job's client is served");
    kiln_ps_stats st;
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.rejected == 0);
    CHECK_MSG(curve_pull(&v, NULL, NULL, NULL) != 0, "a plain client is refused");
    CHECK_MSG(curve_pull(&v, spub, xpub, xsec) != 0, "another client key is refused");
    CHECK_MSG(curve_pull(&v, xpub, cpub, csec) != 0, "another server key is refused");
    kiln_ps_server_stats(v.s, &st);
    CHECK_MSG(st.rejected >= 3, "every refused handshake is counted (%llu)",
              (unsigned long long)st.rejected);
    CHECK_MSG(curve_pull(&v, spub, cpub, csec) == 0, "and the job's client is still served");
    stop(&v);
    /* a bad key is refused at start */
    sc.curve_client = "short";
    char err[256];
    kiln_ps_server *bad = kiln_ps_server_new(&sc, err, sizeof(err));
    CHECK(bad == NULL && strstr(err, "Z85") != NULL);
    kiln_ps_server_free(bad);
}

/* Exactly-once pushes (see the file comment). */
static void test_exactly_once(void)
{
    enum { STEPS = 6 };
    float p0[N], ref[N], g[N], out[N];
    for (int i = 0; i < N; i++)
        p0[i] = ref[i] = 0.01f * (float)(i % 13) - 0.04f;
    kiln_ps_opt o = {.lr = 0.1f, .momentum = 0.9f, .cosine = 1, .total_updates = 10};
    kiln_ps_server_config sc = {.endpoint = "tcp://127.0.0.1:*",
                                .model_sig = 78,
                                .n = N,
                                .params = p0,
                                .opt = o,
                                .max_staleness = KILN_PS_UNBOUNDED,
                                .fault_drop_reply_after_apply = 3};
    srv v;
    if (start(&v, &sc) != 0) {
        CHECK(0);
        return;
    }
    /* resend after 300 ms without a reply (the dropped one) */
    const char *addr = hostport(&v);
    size_t n = N;
    kiln_ps_client_config cc = {.num_ps = 1,
                                .addrs = &addr,
                                .shard_size = &n,
                                .model_sig = 78,
                                .timeout_ms = 10000,
                                .retry_ms = 300};
    char err[256];
    kiln_ps_client *c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c != NULL);
    if (!c) return;
    float *pp = out;
    const float *gp = g;
    for (int k = 0; k < STEPS; k++) {
        grad(g, N, k);
        CHECK(kiln_ps_push(c, &gp, &pp, NULL) == 0);
    }
    ref_run(0, &o, ref, STEPS);
    kiln_ps_stats st;
    kiln_ps_server_stats(v.s, &st);
    CHECK_MSG(memcmp(out, ref, sizeof(out)) == 0,
              "a dropped reply's resend changed the parameters (applied twice?)");
    CHECK_MSG(st.version == STEPS && st.pushes == STEPS && st.duplicates >= 1,
              "version %llu pushes %llu duplicates %llu", (unsigned long long)st.version,
              (unsigned long long)st.pushes, (unsigned long long)st.duplicates);
    uint64_t attempt = kiln_ps_client_attempt(c);

    /* the state a checkpoint takes, and a ps restarted from it */
    float *state = NULL;
    int nslots = 0;
    uint64_t ver = 0;
    uint8_t *dd = NULL;
    size_t ddlen = 0, ndd = 0;
    CHECK(kiln_ps_pull_state(c, 0, &state, &nslots, &ver, &dd, &ddlen) == 0);
    kiln_ps_client_free(c);
    stop(&v);
    if (!state || !dd) {
        CHECK(0);
        free(state);
        free(dd);
        return;
    }
    kiln_ps_dedup_entry e[KILN_PS_MAX_WORKERS];
    CHECK(kiln_ps_dedup_decode(dd, ddlen, e, &ndd, err, sizeof(err)) == 0 && ndd == 1);
    /* a restored table naming no push is refused */
    kiln_ps_dedup_entry bogus = {.worker = 1, .attempt = 0, .step = 3};
    kiln_ps_server_config bc = sc;
    bc.dedup = &bogus;
    bc.n_dedup = 1;
    kiln_ps_server *bs = kiln_ps_server_new(&bc, err, sizeof(err));
    CHECK(bs == NULL && strstr(err, "is not a push") != NULL);
    kiln_ps_server_free(bs);
    kiln_ps_server_config rc = sc;
    rc.params = state;
    rc.slot1 = state + N;
    rc.version = ver;
    rc.dedup = e;
    rc.n_dedup = ndd;
    rc.fault_drop_reply_after_apply = 0;
    if (start(&v, &rc) != 0) {
        CHECK(0);
        free(state);
        free(dd);
        return;
    }
    /* the same attempt pushing steps 1..STEPS again: all repeats, no update */
    addr = hostport(&v);
    cc.attempt = attempt;
    c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c != NULL);
    for (int k = 0; c && k < STEPS; k++) {
        grad(g, N, k);
        CHECK(kiln_ps_push(c, &gp, &pp, NULL) == 0);
    }
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.version == STEPS && st.duplicates == STEPS && st.pushes == 0);
    CHECK(memcmp(out, ref, sizeof(out)) == 0);
    /* its next step is new: applied */
    CHECK(c && kiln_ps_push(c, &gp, &pp, NULL) == 0);
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.version == STEPS + 1 && st.pushes == 1);
    kiln_ps_client_free(c);
    /* an older attempt of that worker is refused, not applied */
    cc.attempt = attempt - 1;
    c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c && kiln_ps_push(c, &gp, &pp, NULL) != 0 &&
          strstr(kiln_ps_client_error(c), "already pushed") != NULL);
    kiln_ps_client_free(c);
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.version == STEPS + 1 && st.rejected == 1);
    /* a worker id past the table is refused, not applied */
    cc.attempt = 0;
    cc.worker = KILN_PS_MAX_WORKERS;
    c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c && kiln_ps_push(c, &gp, &pp, NULL) != 0 &&
          strstr(kiln_ps_client_error(c), "worker ids stop below") != NULL);
    kiln_ps_client_free(c);
    cc.worker = 0;
    kiln_ps_server_stats(v.s, &st);
    CHECK(st.version == STEPS + 1 && st.rejected == 2);
    /* a new life pulls first: its attempt beats the one the ps remembers,
     * even one from a clock far ahead of this one */
    cc.attempt = UINT64_MAX / 2;
    c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c && kiln_ps_push(c, &gp, &pp, NULL) == 0);
    kiln_ps_client_free(c);
    cc.attempt = 0;
    c = kiln_ps_client_new(&cc, err, sizeof(err));
    CHECK(c && kiln_ps_pull(c, &pp) == 0 && kiln_ps_client_attempt(c) == UINT64_MAX / 2 + 1);
    kiln_ps_client_free(c);
    stop(&v);
    free(state);
    free(dd);
}

int main(void)
{
    test_curve();
    test_layout();
    test_math(0);
    test_math(1);
    test_async_and_staleness();
    test_exactly_once();
    test_absent();
    TEST_DONE();
}
