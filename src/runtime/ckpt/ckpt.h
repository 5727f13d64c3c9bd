/* runtime/ckpt/ckpt.h - checkpoints: one self-checking file per save
 * (format in docs/checkpoint-format.md), written durably and atomically into
 * the model dir as ckpt-<step, 12 digits>.kiln, the newest K kept; loading
 * picks the newest file that validates and reports the ones it skipped.
 *
 * A kiln_ckpt is an in-memory checkpoint: counters, opaque named blobs (RNG
 * state, data-order state: see kiln_data_state_encode) and named float32
 * tensors (parameters and optimizer state). To save, fill one with
 * kiln_ckpt_add_* (which BORROW the data pointers: they must stay valid until
 * kiln_ckpt_save returns); a loaded checkpoint OWNS all its data. Either way
 * kiln_ckpt_free releases what the struct owns. */
#ifndef KILN_RT_CKPT_H
#define KILN_RT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CKPT_VERSION  1
#define KILN_CKPT_MAX_DIMS 8
/* Caps on what a file may claim, checked before allocating. */
#define KILN_CKPT_MAX_NAME  255
#define KILN_CKPT_MAX_ITEMS 65536             /* tensors + blobs */
#define KILN_CKPT_MAX_FILE  ((size_t)8 << 30) /* 8 GiB */

typedef enum kiln_ckpt_kind {
    KILN_CKPT_PARAM = 0, /* model parameter: part of the "sha256" of inspect */
    KILN_CKPT_STATE = 1, /* anything else (optimizer moments, batch-norm running stats...) */
} kiln_ckpt_kind;

typedef struct kiln_ckpt_tensor {
    char *name; /* owned copy; unique among tensors */
    kiln_ckpt_kind kind;
    uint32_t ndim; /* 0..KILN_CKPT_MAX_DIMS (0 = scalar, numel 1) */
    uint64_t shape[KILN_CKPT_MAX_DIMS];
    uint64_t numel;
    const float *data; /* borrowed when adding, owned after loading */
} kiln_ckpt_tensor;

typedef struct kiln_ckpt_blob {
    char *name; /* owned copy; unique among blobs */
    const uint8_t *data;
    uint64_t size;
} kiln_ckpt_blob;

typedef struct kiln_ckpt {
    uint64_t step;          /* global optimizer steps taken */
    uint64_t epoch;         /* epoch of the next step */
    uint64_t step_in_epoch; /* its step within that epoch */
    kiln_ckpt_tensor *tensors;
    size_t n_tensors, cap_tensors;
    kiln_ckpt_blob *blobs;
    size_t n_blobs, cap_blobs;
    int owns_data; /* 1 after loading */
} kiln_ckpt;

/* clang-format off */
#define KILN_CKPT_INIT {0}
/* clang-format on */

/* Adds a tensor (name copied, data borrowed). Fails with KILN_EINVAL on a
 * duplicate or over-long name or ndim > KILN_CKPT_MAX_DIMS. */
kiln_err kiln_ckpt_add_tensor(kiln_ckpt *ck, const char *name, kiln_ckpt_kind kind, uint32_t ndim,
                              const uint64_t *shape, const float *data, kiln_errmsg *err);
kiln_err kiln_ckpt_add_blob(kiln_ckpt *ck, const char *name, const void *data, uint64_t size,
                            kiln_errmsg *err);
const kiln_ckpt_tensor *kiln_ckpt_find_tensor(const kiln_ckpt *ck, const char *name);
const kiln_ckpt_blob *kiln_ckpt_find_blob(const kiln_ckpt *ck, const char *name);
void kiln_ckpt_free(kiln_ckpt *ck); /* then the struct is KILN_CKPT_INIT again */

/* Writes ck durably to exactly `path` (temp file + fsync + rename + dir fsync). */
kiln_err kiln_ckpt_write_file(const char *path, const kiln_ckpt *ck, kiln_errmsg *err);
/* Reads and fully validates one file (magic, version, length, CRC-32C, every
 * count and size against caps and the file size). On success *out owns its data. */
kiln_err kiln_ckpt_read_file(const char *path, kiln_ckpt *out, kiln_errmsg *err);
/* The same validation on an image already in memory (e.g. for fuzzing);
 * `name` is only used in messages. buf is not retained. */
kiln_err kiln_ckpt_parse(const char *name, const void *buf, size_t len, kiln_ckpt *out,
                         kiln_errmsg *err);

/* Saves into dir (created if missing) as ckpt-<ck->step>.kiln, then, once that
 * is durable, deletes all but the newest `keep` checkpoints (0 = keep all) and
 * stale temporary files. If path_out is non-NULL it gets a malloc'd copy of
 * the new file's path (caller frees). */
kiln_err kiln_ckpt_save(const char *dir, const kiln_ckpt *ck, unsigned keep, char **path_out,
                        kiln_errmsg *err);

/* Called for each checkpoint file that was skipped because it did not
 * validate (path, reason), so the caller can log it. */
typedef void (*kiln_ckpt_warn_fn)(void *ud, const char *path, const char *reason);

/* Restores the newest valid checkpoint in dir (newest = highest step in the
 * file name). Invalid newer files are reported through warn (may be NULL: then
 * a line goes to stderr) and skipped. Returns KILN_ENOTFOUND when the dir is
 * missing or holds no valid checkpoint (a fresh start). path_out as above. */
kiln_err kiln_ckpt_load_latest(const char *dir, kiln_ckpt *out, char **path_out,
                               kiln_ckpt_warn_fn warn, void *ud, kiln_errmsg *err);

/* SHA-256 over the KILN_CKPT_PARAM tensors in byte-wise order of name: for
 * each, u32le name length, name, u32le ndim, u64le dims, the float32 data
 * little-endian. Independent of the order the tensors were added in and of
 * any state tensors. hex gets 64 hex digits + NUL. */
kiln_err kiln_ckpt_params_sha256(const kiln_ckpt *ck, char hex[65]);

/* The logic of `kiln-train inspect FILE|DIR`: path is a checkpoint file, or a
 * dir (its newest valid checkpoint, skipped files reported through warn).
 * *json gets a malloc'd one-line object (caller frees):
 * {"path":"...","step":N,"epoch":N,"step_in_epoch":N,"sha256":"<hex>",
 *  "params":N,"tensors":[{"name":"...","kind":"param","shape":[..]},...]} */
kiln_err kiln_ckpt_inspect_json(const char *path, char **json, kiln_ckpt_warn_fn warn, void *ud,
                                kiln_errmsg *err);

#ifdef __cplusplus
}
#endif
#endif
