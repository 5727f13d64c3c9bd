/* runtime/util/util.h - small helpers shared by the runtime's I/O parts:
 * error messages, CRC-32C, SHA-256 (OpenSSL's libcrypto), durable files.
 *
 * Errors: functions return a kiln_err (include/kiln/diag.h) and, when given a
 * non-NULL kiln_errmsg, fill it with one human-readable sentence that names the
 * file and what is wrong. The message buffer is fixed-size so that reporting an
 * error can never itself fail. */
#ifndef KILN_RT_UTIL_H
#define KILN_RT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/diag.h"
#include "util/crc32c.h"
#include "util/hex.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ERRMSG_MAX 512

typedef struct kiln_errmsg {
    char msg[KILN_ERRMSG_MAX];
} kiln_errmsg;

/* Formats into e->msg (truncating if needed). e may be NULL (then a no-op).
 * Returns `code` so a caller can write `return kiln_errmsg_set(err, KILN_EIO, ...)`. */
kiln_err kiln_errmsg_set(kiln_errmsg *e, kiln_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- CRC-32C: kiln_crc32c_update and kiln_crc32c_mask (util/crc32c.h, in
 * kiln_util, shared with src/tune's event file reader) ---- */
static inline uint32_t kiln_crc32c(const void *buf, size_t n)
{
    return kiln_crc32c_update(0, buf, n);
}

/* ---- SHA-256 (a thin wrapper over OpenSSL EVP, so callers need no OpenSSL headers) ---- */
typedef struct kiln_sha256 kiln_sha256; /* opaque */
kiln_sha256 *kiln_sha256_new(void);     /* NULL on allocation failure */
void kiln_sha256_update(kiln_sha256 *h, const void *buf, size_t n);
/* Writes the 32-byte digest and frees h (h must not be used afterwards). */
void kiln_sha256_final(kiln_sha256 *h, uint8_t out[32]);
/* One-shot helper. Returns 0, or -1 on allocation failure. */
int kiln_sha256_buf(const void *buf, size_t n, uint8_t out[32]);
/* Lower-case hex: kiln_hex (util/hex.h, in kiln_util). */

/* ---- little-endian encoding (all kiln binary formats are little-endian) ---- */
static inline void kiln_put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kiln_put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t kiln_get_u32le(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t kiln_get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- files ---- */

/* mkdir -p with mode 0777 (& umask). Existing directories are fine. */
kiln_err kiln_mkdir_p(const char *path, kiln_errmsg *err);
/* fsync a directory so that a rename/unlink inside it is durable. */
kiln_err kiln_fsync_dir(const char *dir, kiln_errmsg *err);
/* Directory part of path into out (size outsz): "a/b/c" -> "a/b", "c" -> ".". */
void kiln_dirname(const char *path, char *out, size_t outsz);

/* Reads a whole file into a malloc'd buffer (*data, caller frees; NUL-terminated
 * for convenience, the NUL is not counted in *len). Files larger than max_bytes
 * are refused with KILN_ELIMIT before anything is allocated. */
kiln_err kiln_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *len,
                        kiln_errmsg *err);

/* Durable replacement of `path`: writes to "<path>.tmp.<pid>.<n>" in the same
 * directory, fflush + fsync, rename over path, fsync the directory. A reader
 * sees either the old file or the complete new one, never a torn mix.
 * The streaming form: kiln_atomic_open gives a FILE* to write to, then exactly
 * one of kiln_atomic_commit (durable rename; closes the file) or
 * kiln_atomic_abort (removes the temporary). Both free `a`. */
typedef struct kiln_atomic_file kiln_atomic_file;
kiln_err kiln_atomic_open(const char *path, kiln_atomic_file **a, FILE **f, kiln_errmsg *err);
kiln_err kiln_atomic_commit(kiln_atomic_file *a, kiln_errmsg *err);
void kiln_atomic_abort(kiln_atomic_file *a);
kiln_err kiln_atomic_write(const char *path, const void *data, size_t n, kiln_errmsg *err);

/* Turns the fsync calls of kiln_atomic_commit and kiln_fsync_dir off (0) or
 * on (1, the default). For tests that save many files and would otherwise
 * wait on the disk; the write/rename sequence is unchanged. Never turned off
 * by the product. */
void kiln_durable_set(int on);

/* The marker in temporary file names; directory scanners skip (and may delete)
 * files whose name contains it. */
#define KILN_TMP_MARKER ".tmp."

#ifdef __cplusplus
}
#endif
#endif
