/* include/kiln/objects.h - the staging store behind kilnd's Cloud Storage
 * subset: the gs:// URIs kilnd holds.
 *
 * An object gs://BUCKET/NAME is the plain file ROOT/BUCKET/NAME (ROOT is
 * DATA/objects), so that a program given a local directory (a job's
 * --job-dir) writes objects simply by writing files, and staging a package
 * is a copy. What GCS reports beside the bytes (contentType, md5Hash,
 * crc32c, generation, times) is kept in a sidecar, ROOT/.meta/BUCKET/NAME;
 * a file with no sidecar, or one that changed since its sidecar was written
 * (size or mtime differ), is described from the file itself.
 *
 * Names follow GCS's rules (1-1024 bytes of UTF-8, no CR or LF, not "." or
 * "..") plus those a path needs: no empty, "." or ".." segment, no segment
 * over 255 bytes, no control characters. An object cannot be both a file
 * and a directory ("a" and "a/b"): the second is refused as a conflict.
 *
 * Writes are atomic: bytes stream into ROOT/.tmp, are fsynced, renamed into
 * place and the directory fsynced; the sidecar follows the same way.
 * Thread safe: commits and deletes take the store's lock. */
#ifndef KILN_OBJECTS_H
#define KILN_OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_OBJECT_NAME_MAX  1024
#define KILN_OBJECTS_LIST_MAX 1000 /* GCS's maxResults ceiling */

typedef struct kiln_objects kiln_objects;

typedef struct kiln_object_meta {
    char bucket[64];
    char *name;
    char *content_type;
    char md5[32];    /* base64 of the 16-byte MD5, as GCS's md5Hash */
    char crc32c[16]; /* base64 of the big-endian CRC32C, as GCS's crc32c */
    char etag[48];
    uint64_t size;
    int64_t generation; /* microseconds since the epoch of the write */
    int64_t metageneration;
    int64_t created_ns, updated_ns;
} kiln_object_meta;

void kiln_object_meta_clear(kiln_object_meta *m);

/* Opens (creating) the store under `root`. `max_object` caps each object's
 * size in bytes. */
kiln_err kiln_objects_open(const char *root, uint64_t max_object, kiln_objects **out);
void kiln_objects_close(kiln_objects *o);
uint64_t kiln_objects_max_object(const kiln_objects *o);
const char *kiln_objects_root(const kiln_objects *o);

/* GCS bucket names: 3-63 of [a-z0-9._-], starting and ending with a letter or
 * digit (kiln does not take the dotted 222-byte form). */
bool kiln_objects_valid_bucket(const char *name);
/* Holds `bucket` for `project` (NULL: every project). KILN_EINVAL for a bad
 * name, KILN_EEXIST when already held. */
kiln_err kiln_objects_add_bucket(kiln_objects *o, const char *bucket, const char *project);
/* Whether the bucket is held; *project (may be NULL) gets its project or NULL. */
bool kiln_objects_holds(const kiln_objects *o, const char *bucket, const char **project);

/* The i-th held bucket's name, or NULL past the last. */
const char *kiln_objects_bucket_at(const kiln_objects *o, size_t i);

/* Checks an object name; on false, *why (a static sentence) says which rule. */
bool kiln_objects_valid_name(const char *name, size_t len, const char **why);

/* ---- writing: stream the bytes, then commit them under a name ---- */

typedef struct kiln_object_writer kiln_object_writer;

kiln_err kiln_objects_writer_new(kiln_objects *o, kiln_object_writer **out);
/* KILN_ELIMIT once the object would pass the store's cap (the writer then
 * only accepts kiln_objects_writer_abort). */
kiln_err kiln_objects_writer_write(kiln_object_writer *w, const void *p, size_t n);
uint64_t kiln_objects_writer_size(const kiln_object_writer *w);
/* Makes the bytes gs://bucket/name (replacing any object there) and fills
 * *out. `if_generation` >= 0 is a precondition (0: the object must not
 * exist): KILN_ECONFLICT when it fails. KILN_EEXIST when the name conflicts
 * with a directory or a file on its path. Frees the writer in every case. */
kiln_err kiln_objects_writer_commit(kiln_object_writer *w, const char *bucket, const char *name,
                                    const char *content_type, int64_t if_generation,
                                    kiln_object_meta *out);
void kiln_objects_writer_abort(kiln_object_writer *w);

/* ---- reading ---- */

/* KILN_ENOTFOUND when there is no such object (bucket held or not). */
kiln_err kiln_objects_stat(kiln_objects *o, const char *bucket, const char *name,
                           kiln_object_meta *out);
/* The file behind an object (for reading it or staging it). */
kiln_err kiln_objects_path(const kiln_objects *o, const char *bucket, const char *name, char *buf,
                           size_t len);
kiln_err kiln_objects_delete(kiln_objects *o, const char *bucket, const char *name);

typedef struct kiln_object_list {
    kiln_object_meta *items;
    size_t n;
    char **prefixes;
    size_t n_prefixes;
    char *next_token; /* NULL: the last page */
} kiln_object_list;

/* Objects of `bucket` in name order whose names start with `prefix` (may be
 * NULL); with a `delimiter`, names that hold it after the prefix collapse
 * into `prefixes`. `token` continues after a page; at most `max` entries
 * (items and prefixes together, 1 to KILN_OBJECTS_LIST_MAX). */
kiln_err kiln_objects_list(kiln_objects *o, const char *bucket, const char *prefix,
                           const char *delimiter, const char *token, size_t max,
                           kiln_object_list *out);
void kiln_object_list_free(kiln_object_list *l);

#ifdef __cplusplus
}
#endif
#endif
