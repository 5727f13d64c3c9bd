/* crc32c.c - CRC-32C (util/crc32c.h): slicing-by-8 tables, or the SSE4.2
 * crc32 instruction where the CPU has it. */
#include "util/crc32c.h"

#include <string.h>

static uint32_t crc32c_table[8][256];
static int crc32c_hw; /* 1 if SSE4.2 is available */

/* Built once; the constructor runs before main so no locking is needed. */
__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] =
                (crc32c_table[t - 1][i] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n)
{
    /* slicing-by-8: 8 table look-ups per 8 bytes */
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
            crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^ crc32c_table[3][p[4]] ^
            crc32c_table[2][p[5]] ^ crc32c_table[1][p[6]] ^ crc32c_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_run(uint32_t c, const uint8_t *p,
                                                                size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* unaligned-safe */
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t kiln_crc32c_update(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc32c_hw) return ~crc32c_hw_run(c, p, n);
#endif
    return ~crc32c_sw(c, p, n);
}

uint32_t kiln_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
