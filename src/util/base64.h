/* src/util/base64.h - base64 (RFC 4648), one implementation for kiln's
 * encodings: GCS's object checksums (standard alphabet, padded), the API's
 * etags (URL-safe, padded), page tokens and bearer tokens (URL-safe, no
 * padding). */
#ifndef KILN_UTIL_BASE64_H
#define KILN_UTIL_BASE64_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    KILN_B64_URL = 1,   /* '-' and '_' for '+' and '/' */
    KILN_B64_NOPAD = 2, /* no trailing '=' */
};

/* The length kiln_b64_encode writes for n bytes, without the NUL. */
size_t kiln_b64_len(size_t n, int flags);
/* Encodes n bytes into out (kiln_b64_len(n, flags) + 1 bytes), NUL-ended;
 * returns the length written. */
size_t kiln_b64_encode(const void *in, size_t n, int flags, char *out);
/* Decodes the `len` characters at `in` (padding accepted only without
 * KILN_B64_NOPAD) into out, at most `cap` bytes; *outlen gets the count.
 * False on a character outside the alphabet, a bad length or padding, or
 * when out is too small. */
bool kiln_b64_decode(const char *in, size_t len, int flags, unsigned char *out, size_t cap,
                     size_t *outlen);

#ifdef __cplusplus
}
#endif
#endif
