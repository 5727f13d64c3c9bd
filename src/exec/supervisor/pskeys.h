/* src/exec/supervisor/pskeys.h - the ZeroMQ CURVE keys of one job attempt's
 * parameter servers and workers.
 *
 * At each (re)start of a job's replicas kilnd writes DIR/ps.keys: a fresh
 * Curve25519 pair for the ps tasks and one for the workers, in Z85, one
 * `NAME KEY` per line (server_public, server_secret, client_public,
 * client_secret), mode 0600, by temp file and rename. The replicas find it
 * through KILN_PS_KEYS (never in argv); kiln_ps_keys_load (kiln/ps.h) reads
 * it. A new attempt gets new keys, so a replica of an earlier attempt that
 * lingers cannot talk to the new ps. */
#ifndef KILND_PSKEYS_H
#define KILND_PSKEYS_H

#include <stddef.h>

/* Returns 0 with the file's path in path, or -1 (errno). */
int kilnd_ps_keys_write(const char *dir, char *path, size_t len);

#endif
