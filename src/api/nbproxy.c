/* src/api/nbproxy.c - kilnd's door to notebook instances: /notebooks/P/NAME/...
 * is proxied to that instance's JupyterLab on loopback (docs/notebooks.md).
 *
 * Auth is kilnd's: the bearer token of the API, or the same token in the
 * kiln_token cookie (what a browser carries; the dashboard sets it). Another
 * project's token gets 404 and no byte of the notebook; Jupyter's own token
 * is off, so kilnd is the only door, and the kiln token never reaches
 * Jupyter (Authorization and Cookie are not forwarded).
 *
 * HTTP goes upstream as HTTP/1.0 (one request per connection, the body
 * delimited by the close), the answer streams back through a callback.
 * A WebSocket upgrade is made upstream first; on 101 the client is
 * upgraded too (libmicrohttpd's MHD_create_response_for_upgrade) and a
 * thread per connection copies bytes both ways, at most NB_MAX_WS at once. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/api_int.h"
#include "kiln/auth.h"
#include "notebooks/notebooks.h"

#define NB_MAX_WS   256           /* WebSocket connections spliced at once */
#define NB_MAX_HEAD (64 * 1024)   /* an upstream response head */
#define NB_MAX_BODY (64ull << 20) /* a request body (a notebook or file saved) */
#define NB_IO_S     120           /* upstream read/write timeout */

static atomic_int ws_live;
static atomic_bool ws_stop;

bool kiln__api_nbproxy_owns(const char *url)
{
    return strncmp(url, "/notebooks/", 11) == 0;
}

uint64_t kiln__api_nbproxy_cap(void)
{
    return NB_MAX_BODY;
}

/* ---------- upstream ---------- */

static int dial(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {.tv_sec = NB_IO_S};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, NB_IO_S * 1000) <= 0) return -1;
            continue;
        }
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The request head as text (grown by headers()). */
typedef struct head {
    char *s;
    size_t n, cap;
    bool ws;
} head;

static void put(head *h, const char *a, const char *b, const char *c)
{
    size_t need = strlen(a) + strlen(b) + strlen(c);
    if (!h->s || h->n + need + 1 > h->cap) {
        size_t nc = (h->cap + need + 1) * 2;
        char *ns = realloc(h->s, nc);
        if (!ns) return;
        h->s = ns;
        h->cap = nc;
    }
    h->n += (size_t)sprintf(h->s + h->n, "%s%s%s", a, b, c);
}

/* Hop-by-hop headers and kiln's credentials stay here. */
static enum MHD_Result header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    head *h = cls;
    static const char *const drop[] = {
        "authorization",     "cookie",         "connection", "keep-alive", "proxy-connection",
        "transfer-encoding", "content-length", "upgrade",    "te",         "trailer"};
    (void)kind;
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        if (strcasecmp(k, drop[i]) == 0) return MHD_YES;
    /* a WebSocket's own headers pass only on an upgrade */
    if (!h->ws && strncasecmp(k, "sec-websocket-", 14) == 0) return MHD_YES;
    if (strpbrk(k, "\r\n") || (v && strpbrk(v, "\r\n"))) return MHD_YES;
    put(h, k, ": ", "");
    put(h, v ? v : "", "\r\n", "");
    return MHD_YES;
}

/* Reads the response head (to the blank line) into buf; the bytes after it
 * stay in buf + *head_len .. *got. -1 when none came. */
static int read_head(int fd, char *buf, size_t cap, size_t *got, size_t *head_len)
{
    *got = 0;
    while (*got < cap - 1) {
        ssize_t k = recv(fd, buf + *got, cap - 1 - *got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        *got += (size_t)k;
        buf[*got] = '\0';
        char *e = strstr(buf, "\r\n\r\n");
        if (e) {
            *head_len = (size_t)(e - buf) + 4;
            return 0;
        }
    }
    return -1;
}

/* Copies the upstream's headers (but hop-by-hop ones) onto r. */
static void copy_headers(struct MHD_Response *r, char *buf, size_t head_len, bool ws)
{
    char *line = strstr(buf, "\r\n");
    while (line && line + 2 < buf + head_len - 2) {
        line += 2;
        char *end = strstr(line, "\r\n"), *colon = strchr(line, ':');
        if (!end) break;
        *end = '\0';
        if (colon && colon < end) {
            *colon = '\0';
            const char *v = colon + 1;
            while (*v == ' ')
                v++;
            if (strcasecmp(line, "content-length") != 0 && strcasecmp(line, "connection") != 0 &&
                strcasecmp(line, "transfer-encoding") != 0 && strcasecmp(line, "keep-alive") != 0 &&
                (ws || strcasecmp(line, "upgrade") != 0))
                MHD_add_response_header(r, line, v);
            *colon = ':';
        }
        *end = '\r';
        line = end;
    }
}

/* ---------- HTTP ---------- */

typedef struct stream {
    int fd;
    char *left; /* body bytes read with the head */
    size_t left_n, left_off;
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *s = cls;
    (void)pos;
    if (s->left_off < s->left_n) {
        size_t n = s->left_n - s->left_off < max ? s->left_n - s->left_off : max;
        memcpy(buf, s->left + s->left_off, n);
        s->left_off += n;
        return (ssize_t)n;
    }
    for (;;) {
        ssize_t k = recv(s->fd, buf, max, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (k < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        return k;
    }
}

static void stream_free(void *cls)
{
    stream *s = cls;
    close(s->fd);
    free(s->left);
    free(s);
}

/* ---------- WebSocket ---------- */

typedef struct splice {
    kilnd *d;
    int up;
    MHD_socket down;
    struct MHD_UpgradeResponseHandle *urh;
    char *pending; /* upstream bytes after its 101 head */
    size_t pending_n;
    char *extra; /* client bytes MHD read after the request head */
    size_t extra_n;
} splice;

/* The request ended before libmicrohttpd handed over the upgraded socket
 * (the client went away before the 101): nobody splices, free it here. */
static void splice_abandon(void *arg)
{
    splice *s = arg;
    close(s->up);
    free(s->pending);
    free(s);
    atomic_fetch_sub(&ws_live, 1);
}

static void *splice_run(void *arg)
{
    splice *s = arg;
    char buf[16384];
    if ((s->pending_n && write_all(s->down, s->pending, s->pending_n) < 0) ||
        (s->extra_n && write_all(s->up, s->extra, s->extra_n) < 0))
        goto out;
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->up, .events = POLLIN}, {.fd = s->down, .events = POLLIN}};
        int n = poll(pf, 2, 250);
        if (atomic_load(&ws_stop)) break;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        bool done = false;
        for (int i = 0; i < 2 && !done; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t k = recv(pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            if (k <= 0 || write_all(i == 0 ? s->down : s->up, buf, (size_t)k) < 0) done = true;
        }
        if (done) break;
    }
out:
    close(s->up);
    MHD_upgrade_action(s->urh, MHD_UPGRADE_ACTION_CLOSE);
    free(s->pending);
    free(s->extra);
    free(s);
    atomic_fetch_sub(&ws_live, 1);
    return NULL;
}

/* Called by libmicrohttpd once the client has the 101: must not block. */
static void upgraded(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in,
                     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    splice *s = cls;
    pthread_t t;
    pthread_attr_t at;
    (void)c;
    /* no longer a request in flight: its places go back (the API's
     * limits would otherwise count every open kernel channel); the splice
     * is the thread's now, not the request's end hook's */
    if (con_cls) {
        kiln_api_req *rq = con_cls;
        rq->on_done = NULL;
        rq->on_done_arg = NULL;
        kiln__api_release(s->d, rq);
    }
    s->down = sock;
    s->urh = urh;
    if (extra_in_size && (s->extra = malloc(extra_in_size))) {
        memcpy(s->extra, extra_in, extra_in_size);
        s->extra_n = extra_in_size;
    }
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, splice_run, s) != 0) {
        close(s->up);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        free(s->pending);
        free(s->extra);
        free(s);
        atomic_fetch_sub(&ws_live, 1);
    }
    pthread_attr_destroy(&at);
}

void kiln__api_nbproxy_stop(void)
{
    atomic_store(&ws_stop, true);
    for (int i = 0; i < 40 && atomic_load(&ws_live) > 0; i++) {
        struct timespec ts = {.tv_nsec = 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* ---------- the door ---------- */

/* Who is calling: the bearer token the API already read, else the cookie. */
static bool allowed(kilnd *d, struct MHD_Connection *c, const kiln_api_req *rq, const char *project,
                    unsigned *code)
{
    kiln_api_auth a = rq->auth;
    char proj[128] = "";
    if (!a.ok) {
        const char *ck = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "kiln_token");
        kiln_token_match m;
        /* a.ok is false only when a table is in force: OPEN cannot come */
        if (ck && kiln_auth_check(d->auth, ck, &m) == KILN_AUTH_MATCH) {
            a.ok = true;
            snprintf(proj, sizeof proj, "%s", m.project);
            a.project = proj;
            a.role = m.role;
        }
    }
    if (!a.ok) {
        *code = 401;
        return false;
    }
    if (!kiln__api_sees(&a, project)) {
        kiln__api_note_hidden();
        *code = 404;
        return false;
    }
    /* a notebook runs code: a viewer token may not */
    if (a.role < KILN_AUTH_EDITOR) {
        *code = 403;
        return false;
    }
    return true;
}

enum MHD_Result kiln__api_nbproxy(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *url, kiln_api_req *rq)
{
    char project[64], name[64], why[256];
    const char *p = url + 11, *s1 = strchr(p, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    size_t pl = s1 ? (size_t)(s1 - p) : 0;
    size_t nl = s1 ? (s2 ? (size_t)(s2 - s1 - 1) : strlen(s1 + 1)) : 0;
    unsigned code = 0;
    if (!s1 || !kiln__api_valid_name(p, pl) || nl == 0 || nl >= sizeof name ||
        !kiln__api_valid_name(s1 + 1, nl))
        return send_error(c, 404, NULL, "no such notebook: %.200s", url);
    memcpy(project, p, pl);
    project[pl] = '\0';
    memcpy(name, s1 + 1, nl);
    name[nl] = '\0';
    if (!allowed(d, c, rq, project, &code)) {
        if (code == 401)
            return send_error(c, 401, NULL,
                              "Request had invalid authentication credentials: expected "
                              "'Authorization: Bearer TOKEN' or the kiln_token cookie");
        if (code == 403) return send_error(c, 403, NULL, "a viewer token cannot use notebooks");
        return send_error(c, 404, NULL, "Notebook instance %s/%s not found", project, name);
    }
    int port = 0;
    kiln_err err = kiln_nb_upstream(d->notebooks, project, name, &port, why, sizeof why);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Notebook instance %s/%s not found", project, name);
    if (err != KILN_OK)
        return send_error(c, 503, NULL, "Notebook instance %s/%s: %s", project, name, why);
    if (!s2) { /* Jupyter lives under the prefix with its slash */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        char loc[200];
        snprintf(loc, sizeof loc, "/notebooks/%s/%s/", project, name);
        MHD_add_response_header(r, "Location", loc);
        return kiln__api_queue(c, 302, r);
    }
    const char *up_h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
    bool ws = up_h && strcasecmp(up_h, "websocket") == 0;
    if (ws && atomic_fetch_add(&ws_live, 1) >= NB_MAX_WS) {
        atomic_fetch_sub(&ws_live, 1);
        return send_error(c, 503, NULL, "too many notebook WebSocket connections (%d)", NB_MAX_WS);
    }
    head h = {.ws = ws};
    int fd = dial(port);
    char *buf = NULL;
    enum MHD_Result rc;
    if (fd < 0) {
        rc = send_error(c, 502, NULL, "Notebook instance %s/%s does not answer: %s", project, name,
                        strerror(errno));
        goto fail;
    }
    /* the raw request target (path and query as sent), else the path */
    const char *target = rq->uri ? rq->uri : url;
    if (strpbrk(target, " \r\n")) {
        rc = send_error(c, 400, NULL, "bad request target");
        goto fail;
    }
    put(&h, method, " ", target);
    put(&h, ws ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n", "", "");
    MHD_get_connection_values(c, MHD_HEADER_KIND, header, &h);
    if (ws) {
        put(&h, "Connection: Upgrade\r\nUpgrade: websocket\r\n", "", "");
    } else {
        char cl[64];
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", rq->len);
        if (rq->len || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
            strcmp(method, "PATCH") == 0)
            put(&h, cl, "", "");
    }
    put(&h, "\r\n", "", "");
    if (!h.s || write_all(fd, h.s, h.n) < 0 ||
        (!ws && rq->len && write_all(fd, rq->body, rq->len) < 0)) {
        rc = send_error(c, 502, NULL, "cannot send to notebook instance %s/%s", project, name);
        goto fail;
    }
    size_t got = 0, hl = 0;
    buf = malloc(NB_MAX_HEAD);
    if (!buf || read_head(fd, buf, NB_MAX_HEAD, &got, &hl) < 0) {
        rc = send_error(c, 502, NULL, "notebook instance %s/%s sent no answer", project, name);
        goto fail;
    }
    unsigned status = 0;
    if (sscanf(buf, "HTTP/1.%*d %u", &status) != 1 || status < 100 || status > 599) {
        rc = send_error(c, 502, NULL, "notebook instance %s/%s sent a malformed answer", project,
                        name);
        goto fail;
    }
    if (ws && status == 101) {
        splice *sp = calloc(1, sizeof *sp);
        struct MHD_Response *r = sp ? MHD_create_response_for_upgrade(upgraded, sp) : NULL;
        if (!r) {
            free(sp);
            rc = send_error(c, 500, NULL, "out of memory");
            goto fail;
        }
        sp->up = fd;
        sp->d = d;
        if (got > hl && (sp->pending = malloc(got - hl))) {
            memcpy(sp->pending, buf + hl, got - hl);
            sp->pending_n = got - hl;
        }
        copy_headers(r, buf, hl, true);
        free(buf);
        free(h.s);
        rq->on_done = splice_abandon; /* until upgraded() takes it */
        rq->on_done_arg = sp;
        return kiln__api_queue(c, 101, r);
    }
    if (ws) { /* refused upstream: its answer goes back as a plain one */
        atomic_fetch_sub(&ws_live, 1);
        ws = false;
    }
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto fail;
    }
    st->fd = fd;
    st->left_n = got - hl;
    if (st->left_n && (st->left = malloc(st->left_n))) memcpy(st->left, buf + hl, st->left_n);
    if (!st->left) st->left_n = 0;
    /* the body streams as it comes (chunked to an HTTP/1.1 client) */
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        fd = -1;
        rc = send_error(c, 500, NULL, "out of memory");
        goto fail;
    }
    copy_headers(r, buf, hl, false);
    free(buf);
    free(h.s);
    return kiln__api_queue(c, status, r);
fail:
    if (ws) atomic_fetch_sub(&ws_live, 1);
    if (fd >= 0) close(fd);
    free(buf);
    free(h.s);
    return rc;
}
