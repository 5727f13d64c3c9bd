/* suggest.h - "did you mean" for mistyped names (field names, flags). */
#ifndef KILN_UTIL_SUGGEST_H
#define KILN_UTIL_SUGGEST_H
#include <stddef.h>

/* The candidate closest to `word` by edit distance, or NULL if none is close
 * enough to be a plausible typo (distance > max(2, len/3)). Case-insensitive. */
const char *kiln__suggest(const char *word, const char *const *cands, size_t n);

#endif
