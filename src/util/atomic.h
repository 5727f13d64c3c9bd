/* src/util/atomic.h - small files written so that a crash leaves the old
 * content or the whole new one (internal to kiln's programs). */
#ifndef KILN_UTIL_ATOMIC_H
#define KILN_UTIL_ATOMIC_H

#include <stddef.h>
#include <sys/types.h>

/* Writes `n` bytes to PATH.tmp (created with `mode`, never following a
 * symlink), fsyncs it, renames it over PATH and fsyncs the directory.
 * Returns 0, or -1 with errno set; the temp file is gone either way. */
int kiln__write_atomic(const char *path, const void *data, size_t n, mode_t mode);

#endif
