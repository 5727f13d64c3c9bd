/* src/exec/supervisor/pskeys.c - CURVE keys per job attempt (pskeys.h), made with
 * libcrypto's X25519: the same Curve25519 keys as libsodium's crypto_box,
 * which ZeroMQ's CURVE uses. */
#include "exec/supervisor/pskeys.h"
#include "util/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ZeroMQ's Z85 (RFC 32): 32 bytes -> 40 characters */
static void z85(const unsigned char in[32], char out[41])
{
    static const char enc[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              ".-:+=^!/*?&<>()[]{}@%$#";
    size_t o = 0;
    for (size_t i = 0; i < 32; i += 4) {
        uint32_t v = (uint32_t)in[i] << 24 | (uint32_t)in[i + 1] << 16 | (uint32_t)in[i + 2] << 8 |
                     in[i + 3];
        for (int k = 4; k >= 0; k--) {
            out[o + (size_t)k] = enc[v % 85];
            v /= 85;
        }
        o += 5;
    }
    out[40] = '\0';
}

/* A fresh pair: pub and sec in Z85. */
static int keypair(char pub[41], char sec[41])
{
    unsigned char p[32], s[32];
    size_t pl = sizeof p, sl = sizeof s;
    int rc = -1;
    EVP_PKEY *k = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
    if (!c || EVP_PKEY_keygen_init(c) <= 0 || EVP_PKEY_keygen(c, &k) <= 0) goto out;
    if (EVP_PKEY_get_raw_public_key(k, p, &pl) <= 0 ||
        EVP_PKEY_get_raw_private_key(k, s, &sl) <= 0 || pl != 32 || sl != 32)
        goto out;
    z85(p, pub);
    z85(s, sec);
    rc = 0;
out:
    OPENSSL_cleanse(s, sizeof s);
    EVP_PKEY_free(k);
    EVP_PKEY_CTX_free(c);
    return rc;
}

int kilnd_ps_keys_write(const char *dir, char *path, size_t len)
{
    char sp[41], ss[41], cp[41], cs[41], text[256];
    int rc = -1;
    if (keypair(sp, ss) < 0 || keypair(cp, cs) < 0) {
        errno = EIO;
        goto out;
    }
    int n = snprintf(text, sizeof text,
                     "server_public %s\nserver_secret %s\nclient_public %s\nclient_secret %s\n", sp,
                     ss, cp, cs);
    snprintf(path, len, "%s/ps.keys", dir);
    /* 0600 from the start: the secret is never readable by others, even
     * for a moment */
    if (kiln__write_atomic(path, text, (size_t)n, 0600) != 0) goto out;
    rc = 0;
out:
    OPENSSL_cleanse(text, sizeof text);
    OPENSSL_cleanse(ss, sizeof ss);
    OPENSSL_cleanse(cs, sizeof cs);
    return rc;
}
