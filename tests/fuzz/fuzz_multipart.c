/* fuzz_multipart.c - libFuzzer target for the multipart/related parser of
 * Cloud Storage uploads (src/util/multipart.c). The input's first line is the
 * Content-Type header, the rest the body. The parser sees the whole body, then
 * only short head and tail windows (as kilnd does for a large upload); the
 * parts it reports must lie inside what it was given. Replayed over
 * tests/fuzz/corpus/fuzz_multipart in every build. */
#include "util/multipart.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void one(const char *ct, const char *body, size_t n, size_t window)
{
    kiln_multipart mp;
    char why[256];
    size_t hn = n < window ? n : window, tn = hn;
    /* exact-size copies, so that ASan sees any read past a window */
    char *head = malloc(hn ? hn : 1), *tail = malloc(tn ? tn : 1);
    if (!head || !tail) abort();
    memcpy(head, body, hn);
    memcpy(tail, body + n - tn, tn);
    if (kiln__multipart_related(ct, head, hn, tail, tn, n, &mp, why, sizeof why) == KILN_OK) {
        if (mp.meta_off + mp.meta_len > hn || mp.data_off > n || mp.data_len > n - mp.data_off)
            abort();
        volatile char sum = 0;
        for (size_t i = 0; i < mp.meta_len; i++)
            sum = (char)(sum + head[mp.meta_off + i]);
    } else if (!why[0] || !memchr(why, '\0', sizeof why)) {
        abort();
    }
    free(head);
    free(tail);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *nl = memchr(data, '\n', size);
    if (!nl) return 0;
    size_t cl = (size_t)(nl - (const char *)data);
    char *ct = malloc(cl + 1);
    if (!ct) abort();
    memcpy(ct, data, cl);
    ct[cl] = '\0';
    const char *body = nl + 1;
    size_t n = size - cl - 1;
    one(ct, body, n, n);
    one(ct, body, n, 64);
    free(ct);
    return 0;
}
