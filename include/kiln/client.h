/* kiln/client.h - the HTTP client of the `kiln` command (libcurl).
 *
 * One kiln_client per command run: an endpoint ("http://127.0.0.1:8470",
 * KILN_ENDPOINT, http or https) and an optional bearer token (KILN_TOKEN).
 * An https server is always verified (name and chain): against the system's
 * CA store, or the file kiln_client_set_ca_file names. Responses are
 * capped at KILN_CLIENT_MAX_RESPONSE bytes.
 *
 * Ownership: *resp from kiln_client_do is the caller's to free. */
#ifndef KILN_CLIENT_H
#define KILN_CLIENT_H

#include <stddef.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CLIENT_MAX_RESPONSE (64u << 20)
#define KILN_DEFAULT_ENDPOINT    "http://127.0.0.1:8470"

typedef struct kiln_client kiln_client;

/* endpoint NULL = KILN_DEFAULT_ENDPOINT; token NULL or "" = none. */
kiln_err kiln_client_new(const char *endpoint, const char *token, kiln_client **out);
void kiln_client_free(kiln_client *c);
/* An https endpoint is verified against the CA certificates in this PEM
 * file (--ca-file, KILN_CA_FILE) instead of the system's store. */
kiln_err kiln_client_set_ca_file(kiln_client *c, const char *path);

/* METHOD endpoint+path with `body` (NULL = none) as JSON. On KILN_OK
 * *status is the HTTP status and *resp the body (NUL-terminated). On
 * KILN_EIO (no connection, timeout, response too big) `err` says why. */
kiln_err kiln_client_do(kiln_client *c, const char *method, const char *path, const char *body,
                        long *status, char **resp, char *err, size_t errlen);

/* Percent-encodes `s` for a query string (caller frees). */
char *kiln_client_escape(kiln_client *c, const char *s);

#ifdef __cplusplus
}
#endif
#endif
