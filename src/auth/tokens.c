/* src/auth/tokens.c - the tokens file (kiln/auth.h): hashed at rest and in
 * memory, compared in constant time; and kiln_auth, the table in force. */
#include "kiln/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/hex.h"

typedef struct entry {
    unsigned char hash[32];
    char project[128];
    kiln_auth_role role;
} entry;

struct kiln_tokens {
    entry *v;
    size_t n;
};

static void sha256(const char *s, unsigned char out[32])
{
    unsigned int len = 32;
    if (!EVP_Digest(s, strlen(s), out, &len, EVP_sha256(), NULL)) memset(out, 0, 32);
}

/* "sha256:" and 64 lowercase hex digits */
static bool parse_hash(const char *s, unsigned char out[32])
{
    return strncmp(s, "sha256:", 7) == 0 && strlen(s + 7) == 64 && kiln_unhex(s + 7, 32, out);
}

void kiln_tokens_id(const char *token, char id[KILN_TOKEN_ID_LEN + 1])
{
    unsigned char h[32];
    char full[65];
    sha256(token, h);
    kiln_hex(h, 32, full);
    memcpy(id, full, KILN_TOKEN_ID_LEN);
    id[KILN_TOKEN_ID_LEN] = '\0';
}

kiln_tokens *kiln_tokens_load(const char *path, size_t *n_plain, char *err, size_t errlen)
{
    kiln_tokens *t = calloc(1, sizeof *t);
    FILE *f = fopen(path, "r");
    char line[1024];
    int lineno = 0;
    struct stat st;
    bool ok = false;

    *n_plain = 0;
    if (!t) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (!f) {
        snprintf(err, errlen, "cannot read the tokens file '%s': %s", path, strerror(errno));
        goto out;
    }
    /* as ssh with a private key: a file others can read has leaked already */
    if (fstat(fileno(f), &st) < 0 || (st.st_mode & 0077)) {
        snprintf(err, errlen,
                 "the tokens file '%s' is accessible by group or others (mode %03o): "
                 "run 'chmod 600 %s'",
                 path, (unsigned)(st.st_mode & 0777), path);
        goto out;
    }
    while (fgets(line, sizeof line, f)) {
        char tok[512], proj[128], role[32];
        entry e = {0};
        lineno++;
        if (line[0] == '#' || strspn(line, " \t\r\n") == strlen(line)) continue;
        /* "project P user U" and "serviceaccount SA project P user U" lines
         * are the run-as users (src/auth/users.c) */
        if (strncmp(line, "project ", 8) == 0 || strncmp(line, "serviceaccount ", 15) == 0)
            continue;
        if (sscanf(line, "%511s %127s %31s", tok, proj, role) != 3 ||
            (strcmp(role, "viewer") != 0 && strcmp(role, "editor") != 0)) {
            snprintf(err, errlen, "%s:%d: expected 'TOKEN PROJECT viewer|editor'", path, lineno);
            goto out;
        }
        if (strncmp(tok, "sha256:", 7) == 0) {
            if (!parse_hash(tok, e.hash)) {
                snprintf(
                    err, errlen,
                    "%s:%d: 'sha256:' wants the 64 lowercase hex digits of the token's SHA-256",
                    path, lineno);
                goto out;
            }
        } else if (strlen(tok) < 16) {
            snprintf(err, errlen, "%s:%d: a token of at least 16 characters", path, lineno);
            goto out;
        } else {
            sha256(tok, e.hash);
            (*n_plain)++;
        }
        OPENSSL_cleanse(tok, sizeof tok);
        snprintf(e.project, sizeof e.project, "%s", proj);
        e.role = strcmp(role, "editor") == 0 ? KILN_AUTH_EDITOR : KILN_AUTH_VIEWER;
        entry *nv = realloc(t->v, (t->n + 1) * sizeof *nv);
        if (!nv) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        t->v = nv;
        t->v[t->n++] = e;
    }
    if (t->n == 0) {
        snprintf(err, errlen, "the tokens file '%s' holds no token", path);
        goto out;
    }
    ok = true;
out:
    OPENSSL_cleanse(line, sizeof line);
    if (f) fclose(f);
    if (!ok) {
        kiln_tokens_free(t);
        t = NULL;
    }
    return t;
}

void kiln_tokens_free(kiln_tokens *t)
{
    if (!t) return;
    free(t->v);
    free(t);
}

size_t kiln_tokens_count(const kiln_tokens *t)
{
    return t ? t->n : 0;
}

bool kiln_tokens_match(const kiln_tokens *t, const char *token, kiln_token_match *m)
{
    unsigned char h[32];
    char full[65];
    size_t hit = (size_t)-1;

    sha256(token, h);
    kiln_hex(h, 32, full);
    memcpy(m->id, full, KILN_TOKEN_ID_LEN);
    m->id[KILN_TOKEN_ID_LEN] = '\0';
    /* every line compared in full, no early exit: the time taken says
     * nothing of which line (if any) matched */
    for (size_t i = 0; t && i < t->n; i++)
        if (CRYPTO_memcmp(t->v[i].hash, h, 32) == 0) hit = i;
    if (hit == (size_t)-1) return false;
    snprintf(m->project, sizeof m->project, "%s", t->v[hit].project);
    m->role = t->v[hit].role;
    return true;
}

/* ---------- the table in force ---------- */

/* SIGHUP's swap takes the write side of mu; a match holds the read side
 * for as long as it reads t, so the old table is freed only after the last
 * match on it has copied out what it found. */
struct kiln_auth {
    pthread_rwlock_t mu;
    kiln_tokens *t; /* NULL: no auth */
};

kiln_auth *kiln_auth_new(void)
{
    kiln_auth *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    if (pthread_rwlock_init(&a->mu, NULL) != 0) {
        free(a);
        return NULL;
    }
    return a;
}

void kiln_auth_free(kiln_auth *a)
{
    if (!a) return;
    kiln_tokens_free(a->t);
    pthread_rwlock_destroy(&a->mu);
    free(a);
}

void kiln_auth_swap(kiln_auth *a, kiln_tokens *t)
{
    pthread_rwlock_wrlock(&a->mu);
    kiln_tokens *old = a->t;
    a->t = t;
    pthread_rwlock_unlock(&a->mu);
    kiln_tokens_free(old);
}

bool kiln_auth_required(kiln_auth *a)
{
    pthread_rwlock_rdlock(&a->mu);
    bool on = a->t != NULL;
    pthread_rwlock_unlock(&a->mu);
    return on;
}

kiln_auth_result kiln_auth_check(kiln_auth *a, const char *token, kiln_token_match *m)
{
    kiln_auth_result r = KILN_AUTH_OPEN;
    pthread_rwlock_rdlock(&a->mu);
    if (a->t) r = token && kiln_tokens_match(a->t, token, m) ? KILN_AUTH_MATCH : KILN_AUTH_DENIED;
    pthread_rwlock_unlock(&a->mu);
    return r;
}
