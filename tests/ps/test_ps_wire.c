/* test_ps_wire.c - the parameter-server message codec: round trip, and every
 * kind of malformed message refused with a sentence (never a crash). */
#include "ps/wire.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static size_t make(uint8_t *buf, const kiln_ps_hdr *h, const void *pl)
{
    kiln_ps_hdr_encode(h, buf);
    if (h->payload_len) memcpy(buf + KILN_PS_HEADER_SIZE, pl, (size_t)h->payload_len);
    return KILN_PS_HEADER_SIZE + (size_t)h->payload_len;
}

int main(void)
{
    uint8_t buf[512];
    char err[256];
    kiln_ps_hdr h, d;
    const uint8_t *pl;
    float g[4] = {1.5f, -2.0f, 0.25f, 3.0f};

    h = (kiln_ps_hdr){.op = KILN_PS_OP_PUSH,
                      .shard = 3,
                      .worker = 7,
                      .model_sig = 0x0123456789abcdefULL,
                      .version_p = 42,
                      .seq = 99,
                      .status = 0,
                      .aux = 5,
                      .payload_len = sizeof(g),
                      .attempt = 0x1122334455667788ULL,
                      .step = 12};
    size_t n = make(buf, &h, g);
    CHECK(n == KILN_PS_HEADER_SIZE + 16);
    /* little-endian, fixed offsets (docs/parameter-server.md) */
    CHECK(memcmp(buf, "KPS1", 4) == 0);
    CHECK(buf[4] == KILN_PS_WIRE_VERSION && buf[5] == 0);
    CHECK(buf[8] == 3 && buf[12] == 7 && buf[16] == 0xef && buf[24] == 42 && buf[48] == 16);
    CHECK(buf[56] == 0x88 && buf[63] == 0x11 && buf[64] == 12 && KILN_PS_HEADER_SIZE == 72);
    CHECK(kiln_ps_msg_decode(buf, n, 1024, &d, &pl, err, sizeof(err)) == 0);
    CHECK(d.op == h.op && d.shard == 3 && d.worker == 7 && d.model_sig == h.model_sig &&
          d.version_p == 42 && d.seq == 99 && d.aux == 5 && d.payload_len == 16 &&
          d.attempt == h.attempt && d.step == 12);
    CHECK(pl == buf + KILN_PS_HEADER_SIZE && memcmp(pl, g, 16) == 0);

    /* truncated: every prefix fails */
    int all_fail = 1;
    for (size_t k = 0; k < n; k++)
        if (kiln_ps_msg_decode(buf, k, 1024, &d, &pl, err, sizeof(err)) == 0) all_fail = 0;
    CHECK(all_fail);
    CHECK(kiln_ps_msg_decode(buf, 10, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "shorter than"));
    CHECK(pl == NULL);
    /* trailing bytes */
    CHECK(kiln_ps_msg_decode(buf, n + 4, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "carries"));
    /* the cap */
    CHECK(kiln_ps_msg_decode(buf, n, 8, &d, &pl, err, sizeof(err)) != 0 && strstr(err, "cap"));
    /* bad magic, version, op */
    uint8_t bad[512];
    memcpy(bad, buf, n);
    bad[0] = 'X';
    CHECK(kiln_ps_msg_decode(bad, n, 1024, &d, &pl, err, sizeof(err)) != 0 && strstr(err, "magic"));
    memcpy(bad, buf, n);
    bad[4] = 9;
    CHECK(kiln_ps_msg_decode(bad, n, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "version"));
    /* a wire-1 peer (56-byte header) is told the version, not "too short" */
    bad[4] = 1;
    CHECK(kiln_ps_msg_decode(bad, 56, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "wire version 1, this build speaks 2"));
    memcpy(bad, buf, n);
    bad[6] = 0;
    CHECK(kiln_ps_msg_decode(bad, n, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "unknown op"));
    bad[6] = KILN_PS_OP_MAX + 1;
    CHECK(kiln_ps_msg_decode(bad, n, 1024, &d, &pl, err, sizeof(err)) != 0);
    /* a payload length that would overflow (claims 2^64-1 bytes) */
    memcpy(bad, buf, n);
    memset(bad + 48, 0xff, 8);
    CHECK(kiln_ps_msg_decode(bad, n, UINT64_MAX, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "cap"));
    /* a float payload of 3 bytes */
    h.payload_len = 3;
    n = make(buf, &h, g);
    CHECK(kiln_ps_msg_decode(buf, n, 1024, &d, &pl, err, sizeof(err)) != 0 &&
          strstr(err, "whole number of floats"));
    /* ... but an error reply's text may have any length */
    h.status = KILN_PS_EMODEL;
    n = make(buf, &h, "abc");
    CHECK(kiln_ps_msg_decode(buf, n, 1024, &d, &pl, err, sizeof(err)) == 0 &&
          d.status == KILN_PS_EMODEL && memcmp(pl, "abc", 3) == 0);

    /* stats round trip */
    kiln_ps_stats s = {1, 2, 3, 4, 5, 6, 7, 8}, s2;
    uint8_t w[KILN_PS_STATS_WORDS * 8];
    kiln_ps_stats_encode(&s, w);
    kiln_ps_stats_decode(w, &s2);
    CHECK(memcmp(&s, &s2, sizeof(s)) == 0);
    CHECK(s2.duplicates == 8);

    /* the dedup table: round trip, then every kind of damage refused */
    static kiln_ps_dedup_entry e[KILN_PS_MAX_WORKERS], e2[KILN_PS_MAX_WORKERS];
    e[0] = (kiln_ps_dedup_entry){.worker = 0, .aux = 3, .attempt = 1700000000000000ULL, .step = 9};
    e[1] = (kiln_ps_dedup_entry){
        .worker = 5, .aux = KILN_PS_AUX_DROPPED | 20, .attempt = 2, .step = UINT64_MAX};
    uint8_t tb[KILN_PS_DEDUP_HEADER + 3 * KILN_PS_DEDUP_ENTRY], tb2[sizeof(tb)];
    size_t tn = kiln_ps_dedup_size(2), cnt = 99;
    CHECK(tn == 16 + 48);
    kiln_ps_dedup_encode(e, 2, tb);
    CHECK(memcmp(tb, "KPSD", 4) == 0 && tb[4] == KILN_PS_DEDUP_VERSION && tb[8] == 2);
    CHECK(kiln_ps_dedup_decode(tb, tn, e2, &cnt, err, sizeof(err)) == 0 && cnt == 2 &&
          memcmp(e, e2, 2 * sizeof(e[0])) == 0);
    all_fail = 1;
    for (size_t k = 0; k < tn; k++)
        if (kiln_ps_dedup_decode(tb, k, e2, &cnt, err, sizeof(err)) == 0) all_fail = 0;
    CHECK(all_fail && cnt == 0);
    memcpy(tb2, tb, tn);
    tb2[4] = 2;
    CHECK(kiln_ps_dedup_decode(tb2, tn, e2, &cnt, err, sizeof(err)) != 0 &&
          strstr(err, "table version 2, this build reads 1"));
    memcpy(tb2, tb, tn);
    tb2[0] = 'X';
    CHECK(kiln_ps_dedup_decode(tb2, tn, e2, &cnt, err, sizeof(err)) != 0 && strstr(err, "magic"));
    memcpy(tb2, tb, tn);
    tb2[16 + 24] = 0; /* the second entry's worker 5 -> 0: not ascending */
    CHECK(kiln_ps_dedup_decode(tb2, tn, e2, &cnt, err, sizeof(err)) != 0 &&
          strstr(err, "out of order"));
    e[1].worker = KILN_PS_MAX_WORKERS; /* above the cap */
    kiln_ps_dedup_encode(e, 2, tb2);
    CHECK(kiln_ps_dedup_decode(tb2, tn, e2, &cnt, err, sizeof(err)) != 0);
    memcpy(tb2, tb, tn);
    memset(tb2 + 8, 0xff, 4); /* a count far past the bytes (and the cap) */
    CHECK(kiln_ps_dedup_decode(tb2, tn, e2, &cnt, err, sizeof(err)) != 0 && strstr(err, "claims"));
    CHECK(strcmp(kiln_ps_op_name(KILN_PS_OP_PUSH), "push") == 0);
    CHECK(strcmp(kiln_ps_op_name(77), "?") == 0);
    TEST_DONE();
}
