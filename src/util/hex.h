/* src/util/hex.h - lowercase hex, one implementation for the digests and ids
 * kiln prints: checkpoint and package SHA-256s (src/runtime, the supervisor's
 * fetch), bearer token hashes (kiln tokens, kilnd's tokens file) and upload
 * ids (the storage API). */
#ifndef KILN_UTIL_HEX_H
#define KILN_UTIL_HEX_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Lowercase hex of n bytes into out (2n + 1 bytes, NUL-ended). */
void kiln_hex(const void *in, size_t n, char *out);
/* The n bytes that the 2n lowercase hex digits at `in` spell, into out;
 * false on any other character (upper case included). */
bool kiln_unhex(const char *in, size_t n, unsigned char *out);

#ifdef __cplusplus
}
#endif
#endif
