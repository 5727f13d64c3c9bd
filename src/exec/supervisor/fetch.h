/* src/exec/supervisor/fetch.h - fetching an http(s):// package for staging,
 * on a thread of its own: a fetch may take minutes, and the supervisor
 * thread goes on placing, watching and cancelling the other jobs meanwhile
 * (it polls kilnd_fetch_done each tick; the job stays PREPARING). */
#ifndef KILN_SUPERVISOR_FETCH_H
#define KILN_SUPERVISOR_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h" /* kiln_err */

/* How long one fetch may take: the connection, the
 * whole transfer, and a transfer slower than FETCH_LOW_SPEED bytes/s for
 * FETCH_LOW_SPEED_S seconds (docs/job-model.md, packageUris). */
#define KILND_FETCH_CONNECT_S   10
#define KILND_FETCH_TOTAL_S     300
#define KILND_FETCH_LOW_SPEED   1024
#define KILND_FETCH_LOW_SPEED_S 30
#define KILND_FETCH_REDIRECTS   5

typedef struct kilnd_fetch_op kilnd_fetch_op;

/* Starts fetching `url` (http or https; redirects: at most
 * KILND_FETCH_REDIRECTS, to http or https only) into `dst` on a thread of
 * its own, atomically: the bytes go to DST.part, which is renamed to `dst`
 * once complete, and removed on any failure. At most `max_bytes` (checked on
 * Content-Length and again as bytes arrive); an HTTP status of 400 or more
 * fails. When it ends, one byte is written to `wake_fd` (the supervisor's
 * wake pipe). KILN_ENOMEM when the thread cannot start; else *out owns the
 * fetch until kilnd_fetch_end. */
kiln_err kilnd_fetch_start(const char *url, const char *dst, uint64_t max_bytes, int wake_fd,
                           kilnd_fetch_op **out);
/* True once the fetch has ended (kilnd_fetch_end will not wait). */
bool kilnd_fetch_done(const kilnd_fetch_op *f);
/* Asks the fetch to stop soon (libcurl checks at least once a second). */
void kilnd_fetch_cancel(kilnd_fetch_op *f);
/* Waits for the fetch's end and frees it. On success *bytes and `hex` (64
 * hex digits and a NUL) get the size and SHA-256 of what was fetched. On
 * failure `why` gets the reason (not the URL) and the result is KILN_EIO
 * (or KILN_ELIMIT past max_bytes, KILN_ENOMEM). Any argument but `f` may be
 * NULL/0 when the outcome does not matter (a cancelled fetch). */
kiln_err kilnd_fetch_end(kilnd_fetch_op *f, uint64_t *bytes, char hex[65], char *why,
                         size_t whylen);

#endif
