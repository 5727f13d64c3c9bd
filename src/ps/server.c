/* ps/server.c - one ps task: a shard of the parameters, its optimizer slots,
 * and a ZeroMQ ROUTER socket answering workers one request at a time.
 *
 * One thread, one request at a time: each gradient is applied whole before
 * the next request is read, so a pull never sees half an update and the
 * version is exactly the number of updates applied (no locks needed).
 *
 * Exactly once: a push names (worker, attempt, step). Per worker the server
 * keeps the last push it processed and the aux of its reply; a push of the
 * same attempt with a step not above that one is a repeat (the client resent
 * it after losing the reply): it gets the same aux and the current
 * parameters, and is not applied again. A push of a newer attempt (the
 * replica restarted) starts that worker afresh; one of an older attempt is
 * refused, since applying it could repeat an update. */
#include "kiln/ps.h"

#include "optim/update.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MAX_WORKERS KILN_PS_MAX_WORKERS /* DONE and dedup state per worker id below this */

struct kiln_ps_server {
    void *ctx, *sock;
    void *zap, *mon;        /* with CURVE: the ZAP handler, the handshake monitor */
    uint8_t client_key[32]; /* the one client public key admitted */
    kiln_ps_server_config cfg;
    char endpoint[256];
    float *p, *s1, *s2;
    int nslots;
    kiln_ps_stats st;
    uint8_t *done;           /* MAX_WORKERS flags */
    kiln_ps_dedup_entry *dd; /* MAX_WORKERS: the last push processed; attempt 0 = none */
    float *scratch;          /* n floats, for a misaligned gradient */
    uint64_t applied;        /* pushes applied by this process (for the fault) */
};

float kiln_ps_lr_at(const kiln_ps_opt *o, uint64_t v)
{
    /* the same schedule as a single replica's (kiln-train's lr_at) */
    return o->cosine ? kiln_lr_cosine(o->lr, v, o->total_updates) : o->lr;
}

void kiln_ps_server_free(kiln_ps_server *s)
{
    if (!s) return;
    if (s->mon) zmq_close(s->mon);
    if (s->zap) zmq_close(s->zap);
    if (s->sock) zmq_close(s->sock);
    if (s->ctx) zmq_ctx_term(s->ctx);
    free(s->p);
    free(s->s1);
    free(s->s2);
    free(s->done);
    free(s->dd);
    free(s->scratch);
    free(s);
}

/* CURVE on the ROUTER, a ZAP handler (ZeroMQ asks it about each client that
 * completes the CURVE handshake: only the job's client key passes) and a
 * monitor that counts every failed handshake (no CURVE, another server key,
 * another client key) in st.rejected. Both are served by kiln_ps_server_run
 * on the server's own thread. */
static int curve_setup(kiln_ps_server *s, const kiln_ps_server_config *cfg, char *err,
                       size_t errlen)
{
    int one = 1;
    char sec[41];
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    char mon_ep[64];
    if (!zmq_has("curve")) {
        snprintf(err, errlen, "this libzmq has no CURVE");
        return -1;
    }
    if (strlen(cfg->curve_secret) != 40 || !cfg->curve_client || strlen(cfg->curve_client) != 40 ||
        !zmq_z85_decode(s->client_key, cfg->curve_client)) {
        snprintf(err, errlen, "CURVE keys are 40 Z85 characters each");
        return -1;
    }
    memcpy(sec, cfg->curve_secret, 41);
    snprintf(mon_ep, sizeof(mon_ep), "inproc://kiln-ps-monitor-%p", (void *)s);
    s->zap = zmq_socket(s->ctx, ZMQ_REP);
    if (!s->zap || zmq_bind(s->zap, "inproc://zeromq.zap.01") != 0 ||
        zmq_socket_monitor(s->sock, mon_ep, events) != 0 ||
        !(s->mon = zmq_socket(s->ctx, ZMQ_PAIR)) || zmq_connect(s->mon, mon_ep) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, sec, 41) != 0) {
        snprintf(err, errlen, "ZeroMQ CURVE: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* One ZAP request (RFC 27): version, request id, domain, address, routing
 * id, mechanism, then the client's 32-byte public key for CURVE. */
static void zap_answer(kiln_ps_server *s)
{
    zmq_msg_t f[7];
    int n = 0, more = 1;
    bool extra = false;
    size_t ml = sizeof(more);
    while (more && n < 7) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], s->zap, n ? 0 : ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f[n]);
            break;
        }
        n++;
        zmq_getsockopt(s->zap, ZMQ_RCVMORE, &more, &ml);
    }
    if (n == 0) return; /* nothing to answer */
    while (more) {      /* more frames than RFC 27 has: drop them, refuse */
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, s->zap, 0) < 0)
            more = 0;
        else
            zmq_getsockopt(s->zap, ZMQ_RCVMORE, &more, &ml);
        zmq_msg_close(&x);
        extra = true;
    }
    bool ok = !extra && n == 7 && zmq_msg_size(&f[6]) == 32 &&
              memcmp(zmq_msg_data(&f[6]), s->client_key, 32) == 0;
    /* the failed handshake that follows a refusal is counted by the monitor */
    const char *req_id = n >= 2 ? zmq_msg_data(&f[1]) : "";
    size_t req_len = n >= 2 ? zmq_msg_size(&f[1]) : 0;
    zmq_send(s->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(s->zap, req_id, req_len, ZMQ_SNDMORE);
    zmq_send(s->zap, ok ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(s->zap, ok ? "OK" : "not this job's key", ok ? 2 : 18, ZMQ_SNDMORE);
    zmq_send(s->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(s->zap, "", 0, 0);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

/* A monitor event (two frames): a failed handshake, counted. */
static void monitor_event(kiln_ps_server *s)
{
    int more = 1;
    size_t ml = sizeof(more);
    bool first = true;
    while (more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, s->mon, first ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&x);
            return;
        }
        first = false;
        zmq_getsockopt(s->mon, ZMQ_RCVMORE, &more, &ml);
        zmq_msg_close(&x);
    }
    s->st.rejected++;
}

kiln_ps_server *kiln_ps_server_new(const kiln_ps_server_config *cfg, char *err, size_t errlen)
{
    kiln_ps_server *s = calloc(1, sizeof(*s));
    size_t n = cfg->n;
    if (!s) goto oom;
    s->cfg = *cfg;
    s->nslots = cfg->opt.adam ? 2 : 1;
    s->p = malloc(n * sizeof(float) + 1);
    s->s1 = calloc(n + 1, sizeof(float));
    s->s2 = cfg->opt.adam ? calloc(n + 1, sizeof(float)) : NULL;
    s->done = calloc(MAX_WORKERS, 1);
    s->dd = calloc(MAX_WORKERS, sizeof(*s->dd));
    s->scratch = malloc(n * sizeof(float) + 1);
    if (!s->p || !s->s1 || (cfg->opt.adam && !s->s2) || !s->done || !s->dd || !s->scratch) goto oom;
    for (size_t i = 0; i < cfg->n_dedup; i++) {
        const kiln_ps_dedup_entry *e = &cfg->dedup[i];
        if (e->worker >= MAX_WORKERS || e->attempt == 0) {
            snprintf(err, errlen, "dedup entry %zu: worker %u, attempt %llu is not a push", i,
                     e->worker, (unsigned long long)e->attempt);
            goto fail;
        }
        s->dd[e->worker] = *e;
    }
    memcpy(s->p, cfg->params, n * sizeof(float));
    if (cfg->slot1) memcpy(s->s1, cfg->slot1, n * sizeof(float));
    if (cfg->slot2 && s->s2) memcpy(s->s2, cfg->slot2, n * sizeof(float));
    s->st.version = cfg->version;
    s->cfg.params = s->cfg.slot1 = s->cfg.slot2 = NULL; /* not ours to keep */
    s->cfg.dedup = NULL;
    s->cfg.n_dedup = 0;

    s->ctx = zmq_ctx_new();
    s->sock = s->ctx ? zmq_socket(s->ctx, ZMQ_ROUTER) : NULL;
    if (!s->sock) {
        snprintf(err, errlen, "ZeroMQ: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    /* ZeroMQ refuses (and disconnects) a peer whose message exceeds this, so
     * no request can make the ps allocate more than a gradient's worth */
    int64_t maxmsg = (int64_t)(KILN_PS_HEADER_SIZE + n * sizeof(float));
    /* CURVE: its handshake commands (INITIATE carries the client's metadata)
     * and each message's box (nonce, MAC) count against the cap too */
    if (cfg->curve_secret) maxmsg += 1024;
    int linger = 0;
    zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger));
    s->cfg.curve_secret = s->cfg.curve_client = NULL; /* not ours to keep */
    if (cfg->curve_secret && curve_setup(s, cfg, err, errlen) < 0) goto fail;
    if (zmq_bind(s->sock, cfg->endpoint) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", cfg->endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    size_t len = sizeof(s->endpoint);
    if (zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, s->endpoint, &len) != 0)
        snprintf(s->endpoint, sizeof(s->endpoint), "%s", cfg->endpoint);
    s->cfg.endpoint = s->endpoint;
    return s;
oom:
    snprintf(err, errlen, "out of memory for a shard of %zu floats", n);
fail:
    kiln_ps_server_free(s);
    return NULL;
}

const char *kiln_ps_server_endpoint(const kiln_ps_server *s)
{
    return s->endpoint;
}

void kiln_ps_server_stats(const kiln_ps_server *s, kiln_ps_stats *st)
{
    *st = s->st;
}

const float *kiln_ps_server_params(const kiln_ps_server *s)
{
    return s->p;
}

/* Sends [identity][reply] back to the peer that asked. The reply is built
 * straight in a ZeroMQ message (no second copy of a shard per step). */
typedef struct part {
    const void *p;
    size_t n;
} part;

/* A reply: the header, then the parts back to back, as one message. */
static int send_parts(kiln_ps_server *s, zmq_msg_t *id, const kiln_ps_hdr *h, const part *parts,
                      size_t np)
{
    kiln_ps_hdr r = *h;
    zmq_msg_t m;
    r.payload_len = 0;
    for (size_t i = 0; i < np; i++)
        r.payload_len += parts[i].n;
    if (zmq_msg_init_size(&m, KILN_PS_HEADER_SIZE + (size_t)r.payload_len) != 0) return -1;
    uint8_t *q = zmq_msg_data(&m);
    kiln_ps_hdr_encode(&r, q);
    q += KILN_PS_HEADER_SIZE;
    for (size_t i = 0; i < np; i++)
        if (parts[i].n) {
            memcpy(q, parts[i].p, parts[i].n);
            q += parts[i].n;
        }
    /* a peer that went away is not our error: ROUTER drops silently */
    if (zmq_msg_send(id, s->sock, ZMQ_SNDMORE) < 0 || zmq_msg_send(&m, s->sock, 0) < 0) {
        zmq_msg_close(&m);
        return -1;
    }
    return 0;
}

/* A reply of one part (n may be 0); PULL_STATE alone sends several. */
static int send_reply(kiln_ps_server *s, zmq_msg_t *id, const kiln_ps_hdr *h, const void *p,
                      size_t n)
{
    const part one = {p, n};
    return send_parts(s, id, h, &one, 1);
}

static int send_error(kiln_ps_server *s, zmq_msg_t *id, const kiln_ps_hdr *req, uint32_t status,
                      const char *text)
{
    kiln_ps_hdr r = {.op = req->op,
                     .shard = s->cfg.shard,
                     .worker = req->worker,
                     .model_sig = s->cfg.model_sig,
                     .version_p = s->st.version,
                     .seq = req->seq,
                     .status = status};
    s->st.rejected++;
    return send_reply(s, id, &r, text, strlen(text));
}

static void apply(kiln_ps_server *s, const float *g)
{
    const kiln_ps_opt *o = &s->cfg.opt;
    float lr = kiln_ps_lr_at(o, s->st.version);
    if (o->adam)
        kiln_adam_update_ref(s->p, g, s->s1, s->s2, s->cfg.n, lr, o->beta1, o->beta2, o->eps,
                             s->st.version + 1);
    else
        kiln_sgd_update_ref(s->p, g, s->s1, s->cfg.n, lr, o->momentum);
    s->st.version++;
}

/* After the Nth update applied, its reply is dropped on purpose
 * (KILN_PS_FAULT, tests only): the client hears nothing and resends. */
static bool fault_drops_reply(kiln_ps_server *s, const kiln_ps_hdr *h)
{
    if (s->cfg.fault_drop_reply_after_apply == 0 ||
        s->applied != s->cfg.fault_drop_reply_after_apply)
        return false;
    fprintf(stderr,
            "kiln ps %u: fault injection: dropping the reply to push %llu of worker %u "
            "(attempt %llu) after applying it\n",
            s->cfg.shard, (unsigned long long)h->step, h->worker, (unsigned long long)h->attempt);
    return true;
}

/* PUSH: apply the gradient at most once per (worker, attempt, step), or drop
 * it as too stale; either way the reply carries the parameters after it. */
static int push(kiln_ps_server *s, zmq_msg_t *id, const kiln_ps_hdr *h, kiln_ps_hdr *r,
                const uint8_t *pl)
{
    size_t nbytes = s->cfg.n * sizeof(float);
    char err[256];
    bool applied = false;
    if (h->worker >= MAX_WORKERS || h->attempt == 0 || h->step == 0) {
        snprintf(err, sizeof(err),
                 "push of worker %u, attempt %llu, step %llu: worker ids stop below %d and "
                 "attempt and step start at 1",
                 h->worker, (unsigned long long)h->attempt, (unsigned long long)h->step,
                 MAX_WORKERS);
        fprintf(stderr, "kiln ps %u: refused a push: %s\n", s->cfg.shard, err);
        return send_error(s, id, h, KILN_PS_EBADMSG, err);
    }
    kiln_ps_dedup_entry *d = &s->dd[h->worker];
    if (h->attempt < d->attempt) {
        snprintf(err, sizeof(err),
                 "push from attempt %llu of worker %u, but attempt %llu of that worker already "
                 "pushed (an older life of the replica is still running, or its clock went "
                 "back)",
                 (unsigned long long)h->attempt, h->worker, (unsigned long long)d->attempt);
        fprintf(stderr, "kiln ps %u: refused a push: %s\n", s->cfg.shard, err);
        return send_error(s, id, h, KILN_PS_EATTEMPT, err);
    }
    if (h->attempt == d->attempt && h->step <= d->step) {
        /* a resend of a push already processed: the same answer, no update */
        s->st.duplicates++;
        r->aux = d->aux;
        r->version_p = s->st.version;
        return send_reply(s, id, r, s->p, nbytes);
    }
    uint64_t stale = s->st.version > h->version_p ? s->st.version - h->version_p : 0;
    s->st.pushes++;
    s->st.staleness_sum += stale;
    if (stale > s->st.staleness_max) s->st.staleness_max = stale;
    r->aux = stale > 0x7fffffff ? 0x7fffffff : (uint32_t)stale;
    if (s->cfg.max_staleness != KILN_PS_UNBOUNDED && stale > s->cfg.max_staleness) {
        s->st.dropped++;
        r->aux |= KILN_PS_AUX_DROPPED;
    } else {
        /* ZeroMQ's buffers are malloc'd, so the payload at offset 72 is
         * float-aligned; should it ever not be, go through a copy */
        const float *g = (const float *)(const void *)pl;
        if ((uintptr_t)pl % _Alignof(float) != 0) {
            memcpy(s->scratch, pl, nbytes);
            g = s->scratch;
        }
        apply(s, g);
        s->applied++;
        applied = true;
    }
    *d = (kiln_ps_dedup_entry){
        .worker = h->worker, .aux = r->aux, .attempt = h->attempt, .step = h->step};
    r->version_p = s->st.version;
    if (applied && fault_drops_reply(s, h)) return 0;
    return send_reply(s, id, r, s->p, nbytes);
}

/* PULL_STATE: parameters, optimizer slots and the dedup table, one snapshot
 * (one thread: no push in between), so a checkpoint of it is consistent. */
static int pull_state(kiln_ps_server *s, zmq_msg_t *id, kiln_ps_hdr *r)
{
    size_t nbytes = s->cfg.n * sizeof(float), count = 0;
    for (uint32_t w = 0; w < MAX_WORKERS; w++)
        count += s->dd[w].attempt != 0;
    kiln_ps_dedup_entry *e = malloc(count * sizeof(*e) + 1);
    uint8_t *table = malloc(kiln_ps_dedup_size(count));
    int rc = -1;
    if (!e || !table) {
        rc = send_error(s, id, r, KILN_PS_EBADMSG, "out of memory for the dedup table");
        goto out;
    }
    count = 0;
    for (uint32_t w = 0; w < MAX_WORKERS; w++)
        if (s->dd[w].attempt != 0) e[count++] = s->dd[w];
    kiln_ps_dedup_encode(e, count, table);
    r->version_p = s->st.version;
    r->aux = (uint32_t)s->nslots;
    const part parts[] = {{s->p, nbytes},
                          {s->s1, nbytes},
                          {s->s2, s->s2 ? nbytes : 0},
                          {table, kiln_ps_dedup_size(count)}};
    rc = send_parts(s, id, r, parts, sizeof parts / sizeof *parts);
out:
    free(e);
    free(table);
    return rc;
}

/* Returns 1 when the request was SHUTDOWN, 0 otherwise, -1 on send failure. */
static int handle(kiln_ps_server *s, zmq_msg_t *id, const uint8_t *buf, size_t len)
{
    kiln_ps_hdr h;
    const uint8_t *pl;
    char err[256];
    size_t nbytes = s->cfg.n * sizeof(float);
    if (kiln_ps_msg_decode(buf, len, nbytes, &h, &pl, err, sizeof(err)) != 0) {
        fprintf(stderr, "kiln ps %u: refused a request: %s\n", s->cfg.shard, err);
        h.op = KILN_PS_OP_ERROR;
        return send_error(s, id, &h, KILN_PS_EBADMSG, err);
    }
    if (h.model_sig != s->cfg.model_sig || h.shard != s->cfg.shard) {
        snprintf(err, sizeof(err),
                 "request for shard %u of model %016llx, but this ps serves shard %u of model "
                 "%016llx (another model, or another ps list or optimizer)",
                 h.shard, (unsigned long long)h.model_sig, s->cfg.shard,
                 (unsigned long long)s->cfg.model_sig);
        fprintf(stderr, "kiln ps %u: refused worker %u: %s\n", s->cfg.shard, h.worker, err);
        return send_error(s, id, &h, KILN_PS_EMODEL, err);
    }
    size_t want = h.op == KILN_PS_OP_PUSH ? nbytes : 0;
    if (h.payload_len != want) {
        snprintf(err, sizeof(err), "%s request with %llu payload bytes; this shard expects %zu",
                 kiln_ps_op_name(h.op), (unsigned long long)h.payload_len, want);
        fprintf(stderr, "kiln ps %u: refused worker %u: %s\n", s->cfg.shard, h.worker, err);
        return send_error(s, id, &h, KILN_PS_ESIZE, err);
    }
    kiln_ps_hdr r = {.op = h.op,
                     .shard = s->cfg.shard,
                     .worker = h.worker,
                     .model_sig = s->cfg.model_sig,
                     .seq = h.seq};
    switch (h.op) {
    case KILN_PS_OP_PUSH:
        return push(s, id, &h, &r, pl);
    case KILN_PS_OP_PULL:
        r.version_p = s->st.version;
        /* a (re)starting client picks an attempt above any seen from it */
        r.attempt = h.worker < MAX_WORKERS ? s->dd[h.worker].attempt : 0;
        return send_reply(s, id, &r, s->p, nbytes);
    case KILN_PS_OP_PULL_STATE:
        return pull_state(s, id, &r);
    case KILN_PS_OP_STATS: {
        uint8_t w[KILN_PS_STATS_WORDS * 8];
        kiln_ps_stats_encode(&s->st, w);
        r.version_p = s->st.version;
        return send_reply(s, id, &r, w, sizeof(w));
    }
    case KILN_PS_OP_DONE:
        if (h.worker < MAX_WORKERS && !s->done[h.worker]) {
            s->done[h.worker] = 1;
            s->st.workers_done++;
        }
        r.version_p = s->st.version;
        return send_reply(s, id, &r, NULL, 0);
    case KILN_PS_OP_SHUTDOWN:
        r.version_p = s->st.version;
        return send_reply(s, id, &r, NULL, 0) < 0 ? -1 : 1;
    default:
        return send_error(s, id, &h, KILN_PS_EBADMSG, "unknown op");
    }
}

int kiln_ps_server_run(kiln_ps_server *s, volatile sig_atomic_t *stop)
{
    for (;;) {
        if (stop && *stop) return 1;
        zmq_pollitem_t its[3] = {{.socket = s->sock, .events = ZMQ_POLLIN},
                                 {.socket = s->zap, .events = ZMQ_POLLIN},
                                 {.socket = s->mon, .events = ZMQ_POLLIN}};
        int pr = zmq_poll(its, s->zap ? 3 : 1, 100);
        if (pr < 0) {
            if (zmq_errno() == EINTR) continue;
            fprintf(stderr, "kiln ps %u: poll: %s\n", s->cfg.shard, zmq_strerror(zmq_errno()));
            return -1;
        }
        if (pr == 0) continue;
        if (s->zap && (its[1].revents & ZMQ_POLLIN)) zap_answer(s);
        if (s->mon && (its[2].revents & ZMQ_POLLIN)) monitor_event(s);
        if (!(its[0].revents & ZMQ_POLLIN)) continue;
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        int more = 0, extra = 0, hr = 0;
        size_t ml = sizeof(more);
        if (zmq_msg_recv(&id, s->sock, ZMQ_DONTWAIT) < 0) goto next;
        if (zmq_msg_recv(&body, s->sock, 0) < 0) goto next;
        /* one frame per request: drain and refuse anything longer */
        while (zmq_getsockopt(s->sock, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
            zmq_msg_t x;
            zmq_msg_init(&x);
            zmq_msg_recv(&x, s->sock, 0);
            zmq_msg_close(&x);
            extra = 1;
        }
        if (extra) {
            kiln_ps_hdr h = {.op = KILN_PS_OP_ERROR};
            hr = send_error(s, &id, &h, KILN_PS_EBADMSG, "a request is one ZeroMQ frame");
        } else {
            hr = handle(s, &id, zmq_msg_data(&body), zmq_msg_size(&body));
        }
    next:
        zmq_msg_close(&id);
        zmq_msg_close(&body);
        if (hr == 1) return 0;
    }
}
