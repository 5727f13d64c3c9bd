/* src/daemon/tokens.h - kilnd's tokens file: bearer tokens at rest.
 *
 * One line per token, `TOKEN PROJECT ROLE` or `sha256:HEX PROJECT ROLE`
 * (HEX: the lowercase hex SHA-256 of the token, as `kiln tokens new` prints
 * it). Only hashes are kept in memory: a plain line is hashed when read.
 * Matching hashes the presented token and compares it with every line in
 * constant time, so that neither the answer's timing nor a memory dump
 * gives a token away. A file that group or others may read is refused, as
 * ssh refuses such a key. */
#ifndef KILND_TOKENS_H
#define KILND_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/kilnd.h"

/* The hex digits of a token id: a prefix of its SHA-256, what the audit log
 * and the logs name a token by (never the token). */
#define KILND_TOKEN_ID_LEN 12

typedef struct kilnd_tokens kilnd_tokens;

/* Who a token is: its project copied out (a reload may free the table while
 * a request still runs). */
typedef struct kilnd_token_match {
    char project[128]; /* "*" = every project */
    kilnd_role role;
    char id[KILND_TOKEN_ID_LEN + 1];
} kilnd_token_match;

/* Reads the file. Returns NULL after writing the reason to err (a
 * permission problem names the fix). *n_plain gets the number of lines that
 * hold a token in clear. */
kilnd_tokens *kilnd_tokens_load(const char *path, size_t *n_plain, char *err, size_t errlen);
void kilnd_tokens_free(kilnd_tokens *t);
size_t kilnd_tokens_count(const kilnd_tokens *t);
/* Whether token is in the table; m gets who it is. m->id is set either way. */
bool kilnd_tokens_match(const kilnd_tokens *t, const char *token, kilnd_token_match *m);
/* The id of a token (KILND_TOKEN_ID_LEN hex digits of its SHA-256). */
void kilnd_token_id(const char *token, char id[KILND_TOKEN_ID_LEN + 1]);

#endif
