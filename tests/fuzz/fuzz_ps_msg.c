/* fuzz_ps_msg.c - libFuzzer target for the parameter-server message decoder
 * (src/ps/wire.c): any bytes must either decode into a header whose payload
 * lies exactly inside the input, or fail with a message; never crash or read
 * out of bounds. Replayed over tests/fuzz/corpus/fuzz_ps_msg in every build. */
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
    return 0;
}
