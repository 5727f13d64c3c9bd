/* ps/client.c - a worker's side: one DEALER socket per ps task, requests to
 * all shards sent at once and their replies gathered as they come.
 *
 * A request without a reply after retry_ms is sent again on a fresh socket
 * (the ps may have restarted and lost it; a fresh socket also discards any
 * late reply to the old one), until timeout_ms is spent. A resent push keeps
 * its header, so its (worker, attempt, step): a ps that had applied it
 * answers without applying it again (exactly once, see server.c). */
#include "kiln/ps.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

typedef struct ps_conn {
    void *sock;
    char addr[256], endpoint[300];
    uint64_t version; /* of the params last received */
    uint64_t seq;     /* of the request in flight */
    int pending;
    double sent_at;
    /* the request, kept for resending */
    uint8_t hdr[KILN_PS_HEADER_SIZE];
    const void *payload;
    size_t payload_len;
} ps_conn;

struct kiln_ps_client {
    void *ctx;
    kiln_ps_client_config cfg;
    ps_conn *conn;
    size_t *shard_size;
    uint64_t next_seq;
    uint64_t attempt, step; /* of the pushes: this life, and the last push's number */
    char curve[3][41];      /* server, public, secret (Z85), when cfg.curve_server */
    char err[512];
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void set_err(kiln_ps_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

const char *kiln_ps_client_error(const kiln_ps_client *c)
{
    return c->err;
}

/* The biggest reply: PULL_STATE with Adam (params + two slots) and the
 * dedup table of every worker id a ps accepts. */
static size_t max_reply(size_t shard_floats)
{
    return 3 * shard_floats * sizeof(float) + kiln_ps_dedup_size(KILN_PS_MAX_WORKERS) + 4096;
}

static int conn_open(kiln_ps_client *c, ps_conn *p, size_t shard_floats)
{
    if (p->sock) zmq_close(p->sock);
    p->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!p->sock) return -1;
    int linger = 0;
    int64_t maxmsg = (int64_t)(KILN_PS_HEADER_SIZE + max_reply(shard_floats));
    zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (c->curve[0][0] && (zmq_setsockopt(p->sock, ZMQ_CURVE_SERVERKEY, c->curve[0], 41) != 0 ||
                           zmq_setsockopt(p->sock, ZMQ_CURVE_PUBLICKEY, c->curve[1], 41) != 0 ||
                           zmq_setsockopt(p->sock, ZMQ_CURVE_SECRETKEY, c->curve[2], 41) != 0))
        return -1;
    return zmq_connect(p->sock, p->endpoint);
}

void kiln_ps_client_free(kiln_ps_client *c)
{
    if (!c) return;
    for (int i = 0; c->conn && i < c->cfg.num_ps; i++)
        if (c->conn[i].sock) zmq_close(c->conn[i].sock);
    if (c->ctx) zmq_ctx_term(c->ctx);
    free(c->conn);
    free(c->shard_size);
    free(c);
}

kiln_ps_client *kiln_ps_client_new(const kiln_ps_client_config *cfg, char *err, size_t errlen)
{
    kiln_ps_client *c = calloc(1, sizeof(*c));
    if (!c || cfg->num_ps < 1) {
        snprintf(err, errlen, c ? "no ps tasks" : "out of memory");
        free(c);
        return NULL;
    }
    c->cfg = *cfg;
    c->attempt = cfg->attempt;
    c->conn = calloc((size_t)cfg->num_ps, sizeof(ps_conn));
    c->shard_size = calloc((size_t)cfg->num_ps, sizeof(size_t));
    c->ctx = zmq_ctx_new();
    if (!c->conn || !c->shard_size || !c->ctx) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->cfg.addrs = NULL;
    c->cfg.shard_size = c->shard_size;
    if (cfg->curve_server) {
        /* kept, since a retry opens a fresh socket */
        const char *k[3] = {cfg->curve_server, cfg->curve_public, cfg->curve_secret};
        for (int i = 0; i < 3; i++) {
            if (!k[i] || strlen(k[i]) != 40) {
                snprintf(err, errlen, "CURVE keys are 40 Z85 characters each");
                goto fail;
            }
            memcpy(c->curve[i], k[i], 41);
        }
        c->cfg.curve_public = c->cfg.curve_secret = c->cfg.curve_server = NULL;
    }
    if (c->cfg.timeout_ms <= 0) c->cfg.timeout_ms = 60000;
    if (c->cfg.retry_ms <= 0) c->cfg.retry_ms = 2000;
    /* a random start, so a restarted worker's ids differ from its last life's */
    c->next_seq = ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock();
    for (int i = 0; i < cfg->num_ps; i++) {
        ps_conn *p = &c->conn[i];
        c->shard_size[i] = cfg->shard_size[i];
        snprintf(p->addr, sizeof(p->addr), "%s", cfg->addrs[i]);
        snprintf(p->endpoint, sizeof(p->endpoint), "%s%s",
                 strstr(cfg->addrs[i], "://") ? "" : "tcp://", cfg->addrs[i]);
        if (conn_open(c, p, c->shard_size[i]) != 0) {
            snprintf(err, errlen, "ps task %d (%s): %s", i, p->addr, zmq_strerror(zmq_errno()));
            goto fail;
        }
    }
    return c;
fail:
    kiln_ps_client_free(c);
    return NULL;
}

uint64_t kiln_ps_client_attempt(const kiln_ps_client *c)
{
    return c->attempt;
}

uint64_t kiln_ps_client_version(const kiln_ps_client *c, int shard)
{
    return c->conn[shard].version;
}

static int conn_send(kiln_ps_client *c, int i)
{
    ps_conn *p = &c->conn[i];
    /* header and payload as one frame: ZeroMQ has no gather-send, so copy
     * through a zmq message */
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, KILN_PS_HEADER_SIZE + p->payload_len) != 0) return -1;
    memcpy(zmq_msg_data(&m), p->hdr, KILN_PS_HEADER_SIZE);
    if (p->payload_len)
        memcpy((uint8_t *)zmq_msg_data(&m) + KILN_PS_HEADER_SIZE, p->payload, p->payload_len);
    if (zmq_msg_send(&m, p->sock, 0) < 0) {
        zmq_msg_close(&m);
        set_err(c, "ps task %d (%s): sending: %s", i, p->addr, zmq_strerror(zmq_errno()));
        return -1;
    }
    p->sent_at = now_ms();
    return 0;
}

/* Reply handler: fills out for shard i from a validated reply. */
typedef int (*reply_fn)(kiln_ps_client *c, int i, const kiln_ps_hdr *h, const uint8_t *pl,
                        void *ud);

/* Sends op to every shard in [lo, hi) (payload[i] or none) and waits for all
 * replies, calling fn for each. A push carries the version of the parameters
 * its gradient was computed from: the one last received from that shard. */
static int request(kiln_ps_client *c, int lo, int hi, unsigned op, const void *const *payloads,
                   reply_fn fn, void *ud)
{
    int n = hi - lo, left = n, rc = -1;
    double t0 = now_ms();
    zmq_pollitem_t *items = calloc((size_t)n, sizeof(*items));
    if (!items) {
        set_err(c, "out of memory");
        return -1;
    }
    for (int i = lo; i < hi; i++) {
        ps_conn *p = &c->conn[i];
        p->seq = ++c->next_seq;
        p->payload = payloads ? payloads[i] : NULL;
        p->payload_len = payloads ? c->shard_size[i] * sizeof(float) : 0;
        kiln_ps_hdr h = {.op = (uint16_t)op,
                         .shard = (uint32_t)i,
                         .worker = c->cfg.worker,
                         .model_sig = c->cfg.model_sig,
                         .version_p = op == KILN_PS_OP_PUSH ? p->version : 0,
                         .seq = p->seq,
                         .payload_len = p->payload_len,
                         .attempt = op == KILN_PS_OP_PUSH ? c->attempt : 0,
                         .step = op == KILN_PS_OP_PUSH ? c->step : 0};
        kiln_ps_hdr_encode(&h, p->hdr);
        p->pending = 1;
        if (conn_send(c, i) != 0) goto out;
    }
    while (left > 0) {
        double t = now_ms();
        if (t - t0 > c->cfg.timeout_ms) {
            for (int i = lo; i < hi; i++)
                if (c->conn[i].pending) {
                    set_err(c,
                            "ps task %d (%s): no reply to %s within %g s (is that ps task "
                            "running, and is the address in cluster.ps reachable from here?)",
                            i, c->conn[i].addr, kiln_ps_op_name(op), c->cfg.timeout_ms / 1000.0);
                    break;
                }
            goto out;
        }
        for (int i = lo; i < hi; i++) {
            ps_conn *p = &c->conn[i];
            if (p->pending && t - p->sent_at > c->cfg.retry_ms) {
                if (conn_open(c, p, c->shard_size[i]) != 0 || conn_send(c, i) != 0) {
                    set_err(c, "ps task %d (%s): reconnecting: %s", i, p->addr,
                            zmq_strerror(zmq_errno()));
                    goto out;
                }
            }
            items[i - lo] = (zmq_pollitem_t){.socket = p->sock, .events = ZMQ_POLLIN};
        }
        if (zmq_poll(items, n, 50) < 0) continue; /* EINTR: the caller checks its signals */
        for (int i = lo; i < hi; i++) {
            ps_conn *p = &c->conn[i];
            if (!(items[i - lo].revents & ZMQ_POLLIN)) continue;
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                continue;
            }
            kiln_ps_hdr h;
            const uint8_t *pl;
            char derr[256];
            int bad = kiln_ps_msg_decode(zmq_msg_data(&m), zmq_msg_size(&m),
                                         max_reply(c->shard_size[i]), &h, &pl, derr, sizeof(derr));
            if (bad) {
                set_err(c, "ps task %d (%s): bad reply: %s", i, p->addr, derr);
            } else if (!p->pending || h.seq != p->seq) {
                zmq_msg_close(&m); /* a late reply to an earlier request */
                continue;
            } else if (h.status != KILN_PS_OK) {
                set_err(c, "ps task %d (%s) refused %s: %.*s", i, p->addr, kiln_ps_op_name(op),
                        (int)(h.payload_len < 300 ? h.payload_len : 300), (const char *)pl);
                bad = 1;
            } else if (h.shard != (uint32_t)i) {
                set_err(c, "ps task %d (%s) answered for shard %u: the ps list differs", i, p->addr,
                        h.shard);
                bad = 1;
            } else {
                bad = fn ? fn(c, i, &h, pl, ud) : 0;
            }
            zmq_msg_close(&m);
            if (bad) goto out;
            p->pending = 0;
            left--;
        }
    }
    rc = 0;
out:
    for (int i = lo; i < hi; i++)
        if (c->conn[i].pending) {
            /* a fresh socket, so the late reply cannot be taken for the next one */
            conn_open(c, &c->conn[i], c->shard_size[i]);
            c->conn[i].pending = 0;
        }
    free(items);
    return rc;
}

typedef struct params_ud {
    float *const *params;
    kiln_ps_push_info *info;
    uint64_t seen_attempt; /* PULL: the highest attempt a ps has seen from us */
} params_ud;

static int on_params(kiln_ps_client *c, int i, const kiln_ps_hdr *h, const uint8_t *pl, void *ud)
{
    params_ud *u = ud;
    size_t want = c->shard_size[i] * sizeof(float);
    if (h->payload_len != want) {
        set_err(c, "ps task %d (%s) sent %llu bytes of parameters, expected %zu", i,
                c->conn[i].addr, (unsigned long long)h->payload_len, want);
        return -1;
    }
    memcpy(u->params[i], pl, want);
    c->conn[i].version = h->version_p;
    if (h->attempt > u->seen_attempt) u->seen_attempt = h->attempt;
    if (u->info) {
        uint64_t st = h->aux & ~KILN_PS_AUX_DROPPED;
        u->info->staleness_sum += st;
        if (st > u->info->staleness_max) u->info->staleness_max = st;
        if (h->aux & KILN_PS_AUX_DROPPED) u->info->dropped++;
    }
    return 0;
}

static uint64_t wall_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

int kiln_ps_pull(kiln_ps_client *c, float *const *params)
{
    params_ud u = {.params = params};
    if (request(c, 0, c->cfg.num_ps, KILN_PS_OP_PULL, NULL, on_params, &u) != 0) return -1;
    /* this life's attempt: the clock, but above any earlier life the ps
     * tasks remember, whatever the clock says */
    if (c->attempt == 0) {
        c->attempt = wall_us();
        if (c->attempt <= u.seen_attempt) c->attempt = u.seen_attempt + 1;
    }
    return 0;
}

int kiln_ps_push(kiln_ps_client *c, const float *const *grads, float *const *params,
                 kiln_ps_push_info *info)
{
    if (info) memset(info, 0, sizeof(*info));
    params_ud u = {.params = params, .info = info};
    if (c->attempt == 0) c->attempt = wall_us(); /* pushed without a pull first */
    c->step++;                                   /* a new push; request() resends keep it */
    return request(c, 0, c->cfg.num_ps, KILN_PS_OP_PUSH, (const void *const *)grads, on_params, &u);
}

typedef struct state_ud {
    float *out;
    int nslots;
    uint64_t version;
    uint8_t *dedup; /* the dedup table's bytes */
    size_t dedup_len;
} state_ud;

static int on_state(kiln_ps_client *c, int i, const kiln_ps_hdr *h, const uint8_t *pl, void *ud)
{
    state_ud *u = ud;
    size_t one = c->shard_size[i] * sizeof(float), count;
    char derr[256];
    if (h->aux < 1 || h->aux > 2 || h->payload_len < one * (1 + h->aux)) {
        set_err(c, "ps task %d (%s) sent a state of %llu bytes with %u slots", i, c->conn[i].addr,
                (unsigned long long)h->payload_len, h->aux);
        return -1;
    }
    /* after the params and slots: the dedup table, checked here so a bad one
     * never reaches a checkpoint */
    size_t floats = one * (1 + h->aux), tlen = (size_t)h->payload_len - floats;
    kiln_ps_dedup_entry *e = malloc(KILN_PS_MAX_WORKERS * sizeof(*e));
    snprintf(derr, sizeof(derr), "out of memory");
    int bad = !e || kiln_ps_dedup_decode(pl + floats, tlen, e, &count, derr, sizeof(derr)) != 0;
    free(e);
    if (bad) {
        set_err(c, "ps task %d (%s) sent a state with a bad dedup table: %s", i, c->conn[i].addr,
                derr);
        return -1;
    }
    u->out = malloc(floats + 1);
    u->dedup = malloc(tlen + 1);
    if (!u->out || !u->dedup) {
        set_err(c, "out of memory");
        return -1;
    }
    memcpy(u->out, pl, floats);
    memcpy(u->dedup, pl + floats, tlen);
    u->dedup_len = tlen;
    u->nslots = (int)h->aux;
    u->version = h->version_p;
    return 0;
}

int kiln_ps_pull_state(kiln_ps_client *c, int shard, float **out, int *nslots, uint64_t *version,
                       uint8_t **dedup, size_t *dedup_len)
{
    state_ud u = {0};
    if (request(c, shard, shard + 1, KILN_PS_OP_PULL_STATE, NULL, on_state, &u) != 0) {
        free(u.out);
        free(u.dedup);
        return -1;
    }
    *out = u.out;
    *nslots = u.nslots;
    *version = u.version;
    if (dedup) {
        *dedup = u.dedup;
        *dedup_len = u.dedup_len;
    } else {
        free(u.dedup);
    }
    return 0;
}

static int on_stats(kiln_ps_client *c, int i, const kiln_ps_hdr *h, const uint8_t *pl, void *ud)
{
    if (h->payload_len != KILN_PS_STATS_WORDS * 8) {
        set_err(c, "ps task %d (%s) sent stats of %llu bytes", i, c->conn[i].addr,
                (unsigned long long)h->payload_len);
        return -1;
    }
    kiln_ps_stats_decode(pl, ud);
    return 0;
}

int kiln_ps_get_stats(kiln_ps_client *c, int shard, kiln_ps_stats *st)
{
    return request(c, shard, shard + 1, KILN_PS_OP_STATS, NULL, on_stats, st);
}

int kiln_ps_done(kiln_ps_client *c)
{
    return request(c, 0, c->cfg.num_ps, KILN_PS_OP_DONE, NULL, NULL, NULL);
}

int kiln_ps_shutdown(kiln_ps_client *c)
{
    return request(c, 0, c->cfg.num_ps, KILN_PS_OP_SHUTDOWN, NULL, NULL, NULL);
}
