/* base64.c - base64 (util/base64.h). */
#include "util/base64.h"

#include <stdint.h>

static const char std_al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t kiln_b64_len(size_t n, int flags)
{
    if (!(flags & KILN_B64_NOPAD)) return (n + 2) / 3 * 4;
    return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

size_t kiln_b64_encode(const void *in, size_t n, int flags, char *out)
{
    const char *al = flags & KILN_B64_URL ? url_al : std_al;
    const unsigned char *p = in;
    bool pad = !(flags & KILN_B64_NOPAD);
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[o++] = al[(v >> 18) & 63];
        out[o++] = al[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = al[(v >> 6) & 63];
        else if (pad)
            out[o++] = '=';
        if (i + 2 < n)
            out[o++] = al[v & 63];
        else if (pad)
            out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int value_of(char c, const char *al)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == al[62]) return 62;
    if (c == al[63]) return 63;
    return -1;
}

bool kiln_b64_decode(const char *in, size_t len, int flags, unsigned char *out, size_t cap,
                     size_t *outlen)
{
    const char *al = flags & KILN_B64_URL ? url_al : std_al;
    *outlen = 0;
    if (!(flags & KILN_B64_NOPAD)) { /* whole groups, at most two '=' at the end */
        if (len % 4) return false;
        for (int k = 0; k < 2 && len && in[len - 1] == '='; k++)
            len--;
    }
    if (len % 4 == 1) return false; /* 6 bits cannot end a byte */
    size_t o = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = value_of(in[i], al);
        if (v < 0) return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap) return false;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    *outlen = o;
    return true;
}
