/* runtime/summary/summary.h - TensorBoard event files.
 *
 * A writer creates events.out.tfevents.<unix secs>.<hostname> in a directory
 * (created if missing; "<model_dir>/train" and "<model_dir>/eval" are the
 * caller's choice) and appends TFRecords (u64le length, masked CRC-32C of the
 * length, data, masked CRC-32C of the data), each holding a hand-encoded
 * tensorflow.Event protobuf. The first record is the file_version
 * "brain.Event:2" event; scalars follow as Event{wall_time, step,
 * summary{value{tag, simple_value}}}. Format notes: docs/tensorboard.md.
 *
 * Flushing: records go through stdio; the file is flushed by kiln_summary_flush,
 * whenever a write finds more than flush_secs elapsed since the last flush, and
 * on close. A writer is not thread-safe; use one per thread. */
#ifndef KILN_RT_SUMMARY_H
#define KILN_RT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_SUMMARY_FLUSH_SECS 2.0
#define KILN_SUMMARY_MAX_TAG    256

typedef struct kiln_summary_writer kiln_summary_writer;

/* Opens a new event file in dir and writes the file_version record. If a
 * file of that name exists (two writers in the same second), a ".<n>" suffix
 * is added rather than overwriting it. *out is owned by the caller and ended
 * with kiln_summary_close. */
kiln_err kiln_summary_open(const char *dir, kiln_summary_writer **out, kiln_errmsg *err);
/* Path of the file being written (owned by the writer). */
const char *kiln_summary_path(const kiln_summary_writer *w);
/* Sets the timed-flush interval (seconds; <= 0 flushes after every write). */
void kiln_summary_set_flush_secs(kiln_summary_writer *w, double secs);

/* One scalar as one Event at `step`, wall_time now. */
kiln_err kiln_summary_scalar(kiln_summary_writer *w, const char *tag, int64_t step, float value);
/* n scalars of the same step in a single Event (one Summary with n values). */
kiln_err kiln_summary_scalars(kiln_summary_writer *w, int64_t step, size_t n,
                              const char *const *tags, const float *values);
kiln_err kiln_summary_flush(kiln_summary_writer *w);
/* Flushes, fsyncs and closes; frees w (NULL is fine). Returns the first
 * write error seen over the writer's life, so a full disk is not silent. */
kiln_err kiln_summary_close(kiln_summary_writer *w);

/* ---- reading back (for tests and tools) ---- */

/* Encodes one TFRecord frame of `data` into out (len + 16 bytes). */
void kiln_tfrecord_frame(const void *data, size_t len, uint8_t *out);

typedef struct kiln_event_scalar {
    double wall_time;
    int64_t step;
    char tag[KILN_SUMMARY_MAX_TAG]; /* "" for the file_version record */
    float value;
    char file_version[32]; /* set only on the file_version record */
} kiln_event_scalar;

/* Called once per Event record in file order, and once per value for an Event
 * carrying several. Return nonzero to stop early. */
typedef int (*kiln_event_fn)(void *ud, const kiln_event_scalar *ev);

/* Reads an event file, checking every frame's two masked CRCs and decoding the
 * protobuf (unknown fields skipped). A bad CRC, a truncated frame or malformed
 * protobuf gives KILN_EINVAL with the record index and byte offset in err;
 * records before it have already been delivered. */
kiln_err kiln_summary_read(const char *path, kiln_event_fn fn, void *ud, kiln_errmsg *err);

#ifdef __cplusplus
}
#endif
#endif
