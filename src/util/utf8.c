/* utf8.c - UTF-8 checks (see utf8.h). */
#include "util/utf8.h"

#include <stdint.h>
#include <string.h>

/* Length of the well-formed sequence starting at p, or 0 if there is none
 * (bad lead byte, bad or missing continuation, overlong form, surrogate,
 * beyond U+10FFFF). Stops at the NUL, which is never a continuation byte. */
static size_t seq_len(const unsigned char *p)
{
    static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    unsigned c = *p;
    size_t n = c < 0x80             ? 0
               : (c & 0xE0) == 0xC0 ? 1
               : (c & 0xF0) == 0xE0 ? 2
               : (c & 0xF8) == 0xF0 ? 3
                                    : 9;
    if (n == 9) return 0;
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n + 1;
}

bool kiln__utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = seq_len(p);
        if (!n) return false;
        p += n;
    }
    return true;
}

void kiln__utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = seq_len(p);
        if (n) {
            p += n;
        } else {
            *p++ = '?';
        }
    }
}

size_t kiln__utf8_cut(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (s[n] == '\0') return n; /* the whole string fits */
    /* s[n] is the first byte left out: if it continues a sequence, the cut
     * is inside that sequence, so back up to before its lead byte */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

void kiln__utf8_trim(char *s)
{
    size_t i = strlen(s), k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        k++;
    }
    if (i == 0) return;
    unsigned c = (unsigned char)s[i - 1];
    size_t need = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
    if (k < need) s[i - 1] = '\0'; /* a sequence cut short by a buffer's end */
}
