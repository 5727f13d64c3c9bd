/* src/exec/supervisor/fetch.h - fetching an http(s):// package for staging. */
#ifndef KILN_SUPERVISOR_FETCH_H
#define KILN_SUPERVISOR_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h" /* kiln_err */

/* How long one fetch may hold the supervisor thread: the connection, the
 * whole transfer, and a transfer slower than FETCH_LOW_SPEED bytes/s for
 * FETCH_LOW_SPEED_S seconds (docs/job-model.md, packageUris). */
#define KILND_FETCH_CONNECT_S   10
#define KILND_FETCH_TOTAL_S     300
#define KILND_FETCH_LOW_SPEED   1024
#define KILND_FETCH_LOW_SPEED_S 30
#define KILND_FETCH_REDIRECTS   5

/* Fetches `url` (http or https; redirects: at most KILND_FETCH_REDIRECTS, to
 * http or https only) into `dst`, atomically: the bytes go to DST.part,
 * which is renamed to `dst` once complete, and removed on any failure. At
 * most `max_bytes` (checked on Content-Length and again as bytes arrive); an
 * HTTP status of 400 or more fails. On success *bytes and `hex` (64 hex
 * digits and a NUL) get the size and SHA-256 of what was fetched. On failure
 * `why` gets the reason (not the URL) and the result is KILN_EIO (or
 * KILN_ELIMIT past max_bytes, KILN_ENOMEM). */
kiln_err kilnd_fetch(const char *url, const char *dst, uint64_t max_bytes, uint64_t *bytes,
                     char hex[65], char *why, size_t whylen);

#endif
