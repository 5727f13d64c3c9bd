/* src/objects/base64.c - base64, the encoding of GCS's object metadata
 * checksums (their CRC32C is util/crc32c.h's, shared with the runtime). */
#include <stdint.h>

#include "kiln/objects.h"

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
