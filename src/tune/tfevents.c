/* tfevents.c - TensorBoard scalar summaries as a trial's metric source: a
 * bounded, incremental reader of event files.
 *
 * An event file is a sequence of TFRecords:
 *   u64le length | u32le masked CRC-32C of the length | data | u32le masked
 *   CRC-32C of the data
 * each data a tensorflow.Event protobuf. The fields read here
 * (tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto):
 *   Event:      step = 2 (int64), summary = 5 (Summary)
 *   Summary:    value = 1 (repeated Value)
 *   Value:      tag = 1 (string), simple_value = 2 (float),
 *               tensor = 8 (TensorProto; TF2's tf.summary.scalar)
 *   TensorProto dtype = 1 (DT_FLOAT 1, DT_DOUBLE 2), tensor_shape = 2,
 *               tensor_content = 4 (bytes, little-endian), float_val = 5,
 *               double_val = 6 (packed or not)
 *   TensorShapeProto dim = 1 (Dim: size = 1)
 * Everything else is skipped by wire type. A scalar is a value with a
 * simple_value, or a DT_FLOAT/DT_DOUBLE tensor holding exactly one number.
 *
 * Bounds: a record longer than KILN_TFEVENTS_MAX_RECORD, or one whose length
 * or data CRC does not match, ends the reading of that file for good (a
 * writer never produces one; resynchronising on garbage is not worth it).
 * Protobuf nesting is fixed (no recursion on input), and every length is
 * checked against what is left. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tune/tune_int.h"
#include "util/pbwire.h"

/* protobuf's wire format and TFRecord's framing: util/pbwire.h */
typedef kiln_pb_span span;
typedef kiln_pb_field field;

static double f32(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

static double f64(uint64_t bits)
{
    double x;
    memcpy(&x, &bits, 8);
    return x;
}

/* A TensorProto holding one float or double: true with its value. */
static bool tensor_scalar(span s, double *out)
{
    enum { DT_FLOAT = 1, DT_DOUBLE = 2 };
    uint64_t dtype = 0, elems = 1;
    size_t nvals = 0;
    double val = NAN;
    span content = {NULL, 0};
    field f;
    while (s.n) {
        if (!kiln_pb_next(&s, &f)) return false;
        if (f.num == 1 && f.wt == 0) dtype = f.v;
        if (f.num == 2 && f.wt == 2) { /* shape: the product of the dims */
            span sh = f.bytes;
            field d;
            while (sh.n) {
                if (!kiln_pb_next(&sh, &d)) return false;
                if (d.num != 1 || d.wt != 2) continue;
                span dim = d.bytes;
                field sz;
                uint64_t size = 0;
                while (dim.n) {
                    if (!kiln_pb_next(&dim, &sz)) return false;
                    if (sz.num == 1 && sz.wt == 0) size = sz.v;
                }
                if (size != 1) elems = 0; /* not a single number */
            }
        }
        if (f.num == 4 && f.wt == 2) content = f.bytes;
        if (f.num == 5 && f.wt == 5) nvals++, val = f32((uint32_t)f.v);
        if (f.num == 6 && f.wt == 1) nvals++, val = f64(f.v);
        if (f.num == 5 && f.wt == 2) { /* packed floats */
            nvals += f.bytes.n / 4;
            if (f.bytes.n % 4) return false;
            if (f.bytes.n >= 4) val = f32(kiln_le32(f.bytes.p + f.bytes.n - 4));
        }
        if (f.num == 6 && f.wt == 2) { /* packed doubles */
            nvals += f.bytes.n / 8;
            if (f.bytes.n % 8) return false;
            if (f.bytes.n >= 8) val = f64(kiln_le64(f.bytes.p + f.bytes.n - 8));
        }
    }
    if (elems != 1) return false;
    if (dtype == DT_FLOAT && content.n == 4 && nvals == 0)
        val = f32(kiln_le32(content.p)), nvals = 1;
    if (dtype == DT_DOUBLE && content.n == 8 && nvals == 0)
        val = f64(kiln_le64(content.p)), nvals = 1;
    if ((dtype != DT_FLOAT && dtype != DT_DOUBLE) || nvals != 1) return false;
    *out = val;
    return true;
}

/* Summary.Value: the scalar when its tag is `tag`. */
static bool value_scalar(span s, const char *tag, double *out)
{
    size_t tl = strlen(tag);
    bool tag_ok = false, have = false;
    double v = NAN;
    field f;
    while (s.n) {
        if (!kiln_pb_next(&s, &f)) return false;
        if (f.num == 1 && f.wt == 2)
            tag_ok = f.bytes.n == tl && memcmp(f.bytes.p, tag, tl) == 0;
        else if (f.num == 2 && f.wt == 5)
            v = f32((uint32_t)f.v), have = true;
        else if (f.num == 8 && f.wt == 2 && !have)
            have = tensor_scalar(f.bytes, &v);
    }
    if (!tag_ok || !have) return false;
    *out = v;
    return true;
}

/* One Event: each of its values for `tag` goes to fn, at the Event's step. */
static void event(span s, const char *tag, kiln_tfevents_fn fn, void *ud)
{
    int64_t step = 0;
    span summary = {NULL, 0};
    field f;
    while (s.n) {
        if (!kiln_pb_next(&s, &f)) return; /* malformed: the record is skipped */
        if (f.num == 2 && f.wt == 0) step = (int64_t)f.v;
        if (f.num == 5 && f.wt == 2) summary = f.bytes;
    }
    while (summary.n) {
        double v;
        if (!kiln_pb_next(&summary, &f)) return;
        if (f.num == 1 && f.wt == 2 && value_scalar(f.bytes, tag, &v) && isfinite(v))
            fn(ud, step, v);
    }
}

size_t kiln_tfevents_scan(const uint8_t *buf, size_t len, const char *tag, kiln_tfevents_fn fn,
                          void *ud, bool *corrupt)
{
    size_t off = 0;
    *corrupt = false;
    while (len - off >= 12) {
        const uint8_t *r = buf + off;
        uint64_t n = kiln_le64(r);
        if (kiln_tfrecord_crc(r, 8) != kiln_le32(r + 8) || n > KILN_TFEVENTS_MAX_RECORD) {
            *corrupt = true;
            break;
        }
        if (len - off - 12 < n + 4) break; /* a record still being written */
        if (kiln_tfrecord_crc(r + 12, (size_t)n) != kiln_le32(r + 12 + n)) {
            *corrupt = true;
            break;
        }
        event((span){r + 12, (size_t)n}, tag, fn, ud);
        off += 12 + (size_t)n + 4;
    }
    return off;
}

/* ---------- files: read on from a saved offset ---------- */

/* The new whole records of one file; false when the file is to be given up
 * (corrupt). At most `budget` bytes per call, so that a tick stays short. */
static bool read_file(const char *path, long *offset, const char *tag, kiln_tfevents_fn fn,
                      void *ud)
{
    enum { CHUNK = KILN_TFEVENTS_MAX_RECORD + 16, BUDGET = 4 * CHUNK };
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return true;
    uint8_t *buf = malloc(CHUNK);
    bool ok = true;
    size_t total = 0;
    while (buf && total < BUDGET) {
        ssize_t got = pread(fd, buf, CHUNK, (off_t)*offset);
        if (got <= 0) break;
        bool corrupt;
        size_t used = kiln_tfevents_scan(buf, (size_t)got, tag, fn, ud, &corrupt);
        *offset += (long)used;
        total += used;
        if (corrupt) ok = false;
        if (corrupt || used == 0) break;
    }
    free(buf);
    close(fd);
    return ok;
}

typedef struct report_ctx {
    kiln_study *s;
    kiln_trial *t;
} report_ctx;

static void report(void *ud, int64_t step, double value)
{
    report_ctx *c = ud;
    kiln_study_report(c->s, c->t, step, value);
}

/* The trial's event file `path`: its offset, kept by name; a new file gets
 * one (up to KILN_TFEVENTS_MAX_FILES). NULL when full. */
static kiln_tb_file *file_slot(kiln_trial *t, const char *path)
{
    for (size_t i = 0; i < t->n_tb; i++)
        if (strcmp(t->tb[i].path, path) == 0) return &t->tb[i];
    if (t->n_tb >= KILN_TFEVENTS_MAX_FILES) return NULL;
    kiln_tb_file *v = realloc(t->tb, (t->n_tb + 1) * sizeof *v);
    if (!v) return NULL;
    t->tb = v;
    char *p = strdup(path);
    if (!p) return NULL;
    t->tb[t->n_tb] = (kiln_tb_file){.path = p};
    return &t->tb[t->n_tb++];
}

static bool is_event_file(const char *name)
{
    return strstr(name, "tfevents") != NULL && name[0] != '.';
}

/* `left`: directory entries still to look at in this call, so that a trial
 * directory holding a data set costs a bounded number of stats per tick. */
static void walk(kiln_study *s, kiln_trial *t, const char *dir, int depth, size_t *left)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while (*left > 0 && (e = readdir(d))) {
        --*left;
        char path[4096];
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < KILN_TFEVENTS_MAX_DEPTH) walk(s, t, path, depth + 1, left);
            continue;
        }
        if (!S_ISREG(st.st_mode) || !is_event_file(e->d_name)) continue;
        /* a file this run of the trial did not write (a run before a kilnd
         * restart): not this run's reports */
        int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        if (t->start_ns && mtime < t->start_ns - 20000000LL) continue;
        kiln_tb_file *f = file_slot(t, path);
        if (!f || f->dead || st.st_size <= f->offset) continue;
        report_ctx c = {s, t};
        if (!read_file(path, &f->offset, kiln_study_metric_tag(s), report, &c)) f->dead = true;
    }
    closedir(d);
}

void kiln_study_read_tfevents(kiln_study *s, kiln_trial *t, const char *dir)
{
    size_t left = KILN_TFEVENTS_MAX_ENTRIES;
    if (dir && *dir) walk(s, t, dir, 0, &left);
}

void kiln__tune_tb_clear(kiln_trial *t)
{
    for (size_t i = 0; i < t->n_tb; i++)
        free(t->tb[i].path);
    free(t->tb);
    t->tb = NULL;
    t->n_tb = 0;
}
