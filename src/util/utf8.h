/* utf8.h - UTF-8 checks for user text. A Job travels as JSON and errors go
 * out in JSON envelopes, so every string kiln keeps or reports must be
 * well-formed UTF-8. */
#ifndef KILN_UTIL_UTF8_H
#define KILN_UTIL_UTF8_H
#include <stdbool.h>
#include <stddef.h>

/* Is `s` well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF)? */
bool kiln__utf8_valid(const char *s);

/* The length of the longest prefix of `s`, at most `max` bytes, that does not
 * end inside a multi-byte sequence: for cutting user text into messages. */
size_t kiln__utf8_cut(const char *s, size_t max);

/* Drops a multi-byte sequence left incomplete at the end of `s` (by a
 * truncating snprintf). */
void kiln__utf8_trim(char *s);

/* Replaces, in place, every byte that does not start a well-formed sequence
 * with '?', so the text can go into JSON whatever it held. */
void kiln__utf8_scrub(char *s);

#endif
