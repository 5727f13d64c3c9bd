/* src/store/token.c - opaque page tokens (store_int.h).
 *
 * A token is base64url (no padding) of 21 bytes: a version byte (1), the seq
 * to continue after (8 bytes, big-endian) and the first 12 bytes of
 * HMAC-SHA256(store secret, version | seq | project | 0 | filter). The MAC
 * makes a token unforgeable: an edited seq, a token of another project, or
 * one reused with another filter fails the check, and the list answers 400
 * instead of a page that silently skips or repeats jobs. The secret lives in
 * the store, so tokens outlive a restart of kilnd. */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"
#include "util/base64.h"

#define TOKEN_VERSION 1
#define MAC_LEN       12
#define RAW_LEN       (1 + 8 + MAC_LEN)

static void mac(const unsigned char key[32], const unsigned char head[9], const char *project,
                const char *filter, unsigned char out[MAC_LEN])
{
    unsigned char full[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    size_t lp = strlen(project) + 1, lf = strlen(filter);
    unsigned char *msg = malloc(9 + lp + lf);
    bool ok = false;
    if (msg) {
        memcpy(msg, head, 9);
        memcpy(msg + 9, project, lp); /* with its NUL: "a"+"bc" differs from "ab"+"c" */
        memcpy(msg + 9 + lp, filter, lf);
        ok = HMAC(EVP_sha256(), key, 32, msg, 9 + lp + lf, full, &n) != NULL && n >= MAC_LEN;
    }
    free(msg);
    /* a failed HMAC (out of memory) yields a MAC no token matches: refused */
    if (!ok) memset(full, 0xff, MAC_LEN);
    memcpy(out, full, MAC_LEN);
}

static void head_of(int64_t seq, unsigned char head[9])
{
    head[0] = TOKEN_VERSION;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (unsigned char)((uint64_t)seq >> (56 - 8 * i));
}

void kiln__token_make(const unsigned char key[32], const char *project, const char *filter,
                      int64_t seq, char out[KILN__TOKEN_LEN])
{
    unsigned char raw[RAW_LEN];
    head_of(seq, raw);
    mac(key, raw, project, filter ? filter : "", raw + 9);
    /* 21 bytes = 7 groups of 3: 28 characters, no padding */
    kiln_b64_encode(raw, RAW_LEN, KILN_B64_URL | KILN_B64_NOPAD, out);
}

bool kiln__token_read(const unsigned char key[32], const char *project, const char *filter,
                      const char *token, int64_t *seq)
{
    unsigned char raw[RAW_LEN], want[MAC_LEN];
    size_t got = 0;
    *seq = 0;
    if (strlen(token) != RAW_LEN / 3 * 4 ||
        !kiln_b64_decode(token, RAW_LEN / 3 * 4, KILN_B64_URL | KILN_B64_NOPAD, raw, sizeof raw,
                         &got) ||
        got != RAW_LEN)
        return false;
    if (raw[0] != TOKEN_VERSION) return false;
    mac(key, raw, project, filter ? filter : "", want);
    if (CRYPTO_memcmp(want, raw + 9, MAC_LEN) != 0) return false;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | raw[1 + i];
    if (v == 0 || v > INT64_MAX) return false;
    *seq = (int64_t)v;
    return true;
}
