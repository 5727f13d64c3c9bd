/* suggest.c - edit distance for "did you mean" hints. */
#include "util/suggest.h"

#include <ctype.h>
#include <string.h>

/* Levenshtein distance, capped: names are short (< 64 chars), longer input is
 * not a typo of any of them and is not worth the work. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[65];
    if (la > 64 || lb > 64) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *kiln__suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    size_t len = strlen(word);
    size_t limit = len / 3 > 2 ? len / 3 : 2;

    for (size_t i = 0; i < n; i++) {
        size_t d = distance(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best_d <= limit ? best : NULL;
}
