/* fuzz_ps_msg.c - libFuzzer target for the parameter-server decoders
 * (src/ps/wire.c): any bytes must either decode into a header whose payload
 * lies exactly inside the input, or fail with a message; never crash or read
 * out of bounds. The same bytes go through the dedup-table decoder (a
 * PULL_STATE reply's tail, a checkpoint's "ps_dedup/<shard>" blob): a table
 * it accepts re-encodes to exactly those bytes. Replayed over
 * tests/fuzz/corpus/fuzz_ps_msg in every build. */
#include "ps/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln_ps_hdr h;
    const uint8_t *pl;
    char err[256];
    /* a caller's cap (a shard's size) and the largest one */
    const uint64_t caps[2] = {4096, KILN_PS_MAX_PAYLOAD};
    for (int k = 0; k < 2; k++) {
        err[0] = '\0';
        if (kiln_ps_msg_decode(data, size, caps[k], &h, &pl, err, sizeof err) == 0) {
            if (h.payload_len > caps[k] || pl != data + KILN_PS_HEADER_SIZE ||
                KILN_PS_HEADER_SIZE + h.payload_len != size || h.op < 1 || h.op > KILN_PS_OP_MAX)
                abort();
            volatile uint8_t sum = 0; /* touch every payload byte (ASan checks the bounds) */
            for (uint64_t i = 0; i < h.payload_len; i++)
                sum = (uint8_t)(sum + pl[i]);
            /* re-encoding gives the same header bytes */
            uint8_t again[KILN_PS_HEADER_SIZE];
            kiln_ps_hdr_encode(&h, again);
            if (memcmp(again, data, KILN_PS_HEADER_SIZE) != 0) abort();
        } else if (!err[0] || pl != NULL) {
            abort(); /* a failure always says why and hands out no payload */
        }
    }
    static kiln_ps_dedup_entry e[KILN_PS_MAX_WORKERS];
    static uint8_t again[KILN_PS_DEDUP_HEADER + KILN_PS_MAX_WORKERS * KILN_PS_DEDUP_ENTRY];
    size_t count = 0;
    err[0] = '\0';
    if (kiln_ps_dedup_decode(data, size, e, &count, err, sizeof err) == 0) {
        if (count > KILN_PS_MAX_WORKERS || kiln_ps_dedup_size(count) != size) abort();
        kiln_ps_dedup_encode(e, count, again);
        if (memcmp(again, data, size) != 0) abort();
    } else if (!err[0] || count != 0) {
        abort();
    }
    return 0;
}
