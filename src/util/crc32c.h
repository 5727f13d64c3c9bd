/* crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one
 * implementation for every module that checks one: the runtime's checkpoints
 * and TensorBoard summaries (src/runtime) and the tuning service's event file
 * reader (src/tune). */
#ifndef KILN_UTIL_CRC32C_H
#define KILN_UTIL_CRC32C_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kiln_crc32c_update(0, buf, n) is the CRC of buf; to continue over more bytes,
 * pass the previous result back in: crc(a||b) = update(update(0, a), b).
 * Uses the SSE4.2 crc32 instruction when the CPU has it (checked at run time),
 * a table otherwise; both give identical results. */
uint32_t kiln_crc32c_update(uint32_t crc, const void *buf, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t kiln_crc32c_mask(uint32_t crc);

#ifdef __cplusplus
}
#endif
#endif
