/* ps/wire.c - encode/decode of the parameter-server message header. Explicit
 * little-endian byte order, so the format does not depend on the host. */
#include "ps/wire.h"

#include <stdio.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void kiln_ps_hdr_encode(const kiln_ps_hdr *h, uint8_t out[KILN_PS_HEADER_SIZE])
{
    put32(out + 0, KILN_PS_MAGIC);
    put16(out + 4, KILN_PS_WIRE_VERSION);
    put16(out + 6, h->op);
    put32(out + 8, h->shard);
    put32(out + 12, h->worker);
    put64(out + 16, h->model_sig);
    put64(out + 24, h->version_p);
    put64(out + 32, h->seq);
    put32(out + 40, h->status);
    put32(out + 44, h->aux);
    put64(out + 48, h->payload_len);
    put64(out + 56, h->attempt);
    put64(out + 64, h->step);
}

const char *kiln_ps_op_name(unsigned op)
{
    static const char *names[] = {"?",     "pull", "push",     "pull_state",
                                  "stats", "done", "shutdown", "error"};
    return op <= KILN_PS_OP_MAX ? names[op] : "?";
}

int kiln_ps_msg_decode(const void *buf, size_t len, uint64_t max_payload, kiln_ps_hdr *h,
                       const uint8_t **payload, char *err, size_t errlen)
{
    const uint8_t *p = buf;
    memset(h, 0, sizeof(*h));
    *payload = NULL;
    /* magic and version first: a peer speaking another wire version (whose
     * header may be shorter) is told that, not that its message is short */
    if (len < 6) {
        snprintf(err, errlen, "message of %zu bytes is shorter than the %d-byte header", len,
                 KILN_PS_HEADER_SIZE);
        return -1;
    }
    if (get32(p) != KILN_PS_MAGIC) {
        snprintf(err, errlen, "not a kiln parameter-server message (bad magic 0x%08x)", get32(p));
        return -1;
    }
    h->version = get16(p + 4);
    if (h->version != KILN_PS_WIRE_VERSION) {
        snprintf(err, errlen, "wire version %u, this build speaks %d", h->version,
                 KILN_PS_WIRE_VERSION);
        return -1;
    }
    if (len < KILN_PS_HEADER_SIZE) {
        snprintf(err, errlen, "message of %zu bytes is shorter than the %d-byte header", len,
                 KILN_PS_HEADER_SIZE);
        return -1;
    }
    h->op = get16(p + 6);
    if (h->op < 1 || h->op > KILN_PS_OP_MAX) {
        snprintf(err, errlen, "unknown op %u", h->op);
        return -1;
    }
    h->shard = get32(p + 8);
    h->worker = get32(p + 12);
    h->model_sig = get64(p + 16);
    h->version_p = get64(p + 24);
    h->seq = get64(p + 32);
    h->status = get32(p + 40);
    h->aux = get32(p + 44);
    h->payload_len = get64(p + 48);
    h->attempt = get64(p + 56);
    h->step = get64(p + 64);
    if (max_payload > KILN_PS_MAX_PAYLOAD) max_payload = KILN_PS_MAX_PAYLOAD;
    if (h->payload_len > max_payload) {
        snprintf(err, errlen, "%s message claims %llu payload bytes, more than the cap of %llu",
                 kiln_ps_op_name(h->op), (unsigned long long)h->payload_len,
                 (unsigned long long)max_payload);
        return -1;
    }
    if (h->payload_len != len - KILN_PS_HEADER_SIZE) {
        snprintf(err, errlen, "%s message claims %llu payload bytes but carries %zu",
                 kiln_ps_op_name(h->op), (unsigned long long)h->payload_len,
                 len - KILN_PS_HEADER_SIZE);
        return -1;
    }
    /* status != 0 payloads are text; every other payload is float32 or u64 */
    if (h->status == KILN_PS_OK && h->payload_len % 4 != 0) {
        snprintf(err, errlen, "%s payload of %llu bytes is not a whole number of floats",
                 kiln_ps_op_name(h->op), (unsigned long long)h->payload_len);
        return -1;
    }
    *payload = p + KILN_PS_HEADER_SIZE;
    return 0;
}

void kiln_ps_stats_encode(const kiln_ps_stats *s, uint8_t out[KILN_PS_STATS_WORDS * 8])
{
    const uint64_t w[KILN_PS_STATS_WORDS] = {s->version,       s->pushes,        s->dropped,
                                             s->staleness_sum, s->staleness_max, s->workers_done,
                                             s->rejected,      s->duplicates};
    for (int i = 0; i < KILN_PS_STATS_WORDS; i++)
        put64(out + 8 * i, w[i]);
}

void kiln_ps_stats_decode(const uint8_t in[KILN_PS_STATS_WORDS * 8], kiln_ps_stats *s)
{
    s->version = get64(in);
    s->pushes = get64(in + 8);
    s->dropped = get64(in + 16);
    s->staleness_sum = get64(in + 24);
    s->staleness_max = get64(in + 32);
    s->workers_done = get64(in + 40);
    s->rejected = get64(in + 48);
    s->duplicates = get64(in + 56);
}

size_t kiln_ps_dedup_size(size_t count)
{
    return KILN_PS_DEDUP_HEADER + count * KILN_PS_DEDUP_ENTRY;
}

void kiln_ps_dedup_encode(const kiln_ps_dedup_entry *e, size_t count, uint8_t *out)
{
    put32(out, KILN_PS_DEDUP_MAGIC);
    put32(out + 4, KILN_PS_DEDUP_VERSION);
    put32(out + 8, (uint32_t)count);
    put32(out + 12, 0);
    for (size_t i = 0; i < count; i++) {
        uint8_t *q = out + KILN_PS_DEDUP_HEADER + i * KILN_PS_DEDUP_ENTRY;
        put32(q, e[i].worker);
        put32(q + 4, e[i].aux);
        put64(q + 8, e[i].attempt);
        put64(q + 16, e[i].step);
    }
}

int kiln_ps_dedup_decode(const void *buf, size_t len, kiln_ps_dedup_entry *e, size_t *count,
                         char *err, size_t errlen)
{
    const uint8_t *p = buf;
    *count = 0;
    if (len < KILN_PS_DEDUP_HEADER || get32(p) != KILN_PS_DEDUP_MAGIC) {
        snprintf(err, errlen, "not a ps dedup table (%zu bytes, no KPSD magic)", len);
        return -1;
    }
    uint32_t ver = get32(p + 4), n = get32(p + 8);
    if (ver != KILN_PS_DEDUP_VERSION) {
        snprintf(err, errlen, "ps dedup table version %u, this build reads %d", ver,
                 KILN_PS_DEDUP_VERSION);
        return -1;
    }
    if (n > KILN_PS_MAX_WORKERS || get32(p + 12) != 0 ||
        len != KILN_PS_DEDUP_HEADER + (size_t)n * KILN_PS_DEDUP_ENTRY) {
        snprintf(err, errlen, "ps dedup table of %zu bytes claims %u entries", len, n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *q = p + KILN_PS_DEDUP_HEADER + (size_t)i * KILN_PS_DEDUP_ENTRY;
        e[i] = (kiln_ps_dedup_entry){.worker = get32(q),
                                     .aux = get32(q + 4),
                                     .attempt = get64(q + 8),
                                     .step = get64(q + 16)};
        if (e[i].worker >= KILN_PS_MAX_WORKERS || (i > 0 && e[i].worker <= e[i - 1].worker)) {
            snprintf(err, errlen,
                     "ps dedup table entry %u: worker %u out of order or above the cap of %d", i,
                     e[i].worker, KILN_PS_MAX_WORKERS);
            return -1;
        }
    }
    *count = n;
    return 0;
}
