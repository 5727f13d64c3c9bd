/* src/objects/crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78)
 * and base64, the two encodings GCS's object metadata uses. */
#include <pthread.h>
#include <stdint.h>

#include "kiln/objects.h"

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t kiln_crc32c(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    pthread_once(&table_once, table_init);
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

void kiln_base64(const unsigned char *p, size_t n, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[o++] = al[(v >> 18) & 63];
        out[o++] = al[(v >> 12) & 63];
        out[o++] = i + 1 < n ? al[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? al[v & 63] : '=';
    }
    out[o] = '\0';
}
