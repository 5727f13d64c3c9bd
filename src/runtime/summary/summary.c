/* runtime/summary/summary.c - TensorBoard event files: TFRecord framing and a
 * hand-written encoder/decoder for the few protobuf fields we use.
 *
 * Field numbers (tensorflow/core/util/event.proto, framework/summary.proto):
 *   Event:   wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
 *            summary = 5 (Summary)
 *   Summary: value = 1 (repeated Value)
 *   Value:   tag = 1 (string), simple_value = 2 (float)
 * Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
#include "summary/summary.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_VERSION "brain.Event:2"
/* The largest record the reader accepts: ours are a few hundred bytes, and
 * this bounds what a corrupt length field can make us allocate. */
#define MAX_RECORD (16u << 20)

struct kiln_summary_writer {
    FILE *f;
    char *path;
    double flush_secs;
    struct timespec last_flush;
    kiln_err first_err;
};

/* ---- protobuf encoding into a caller-sized buffer ---- */

typedef struct pb {
    uint8_t *p;
    size_t n, cap;
} pb;

static void pb_byte(pb *b, uint8_t v)
{
    if (b->n < b->cap) b->p[b->n] = v;
    b->n++; /* counts even past cap, so a too-small buffer is detected */
}

static void pb_varint(pb *b, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(b, (uint8_t)v);
}

static void pb_bytes(pb *b, const void *src, size_t n)
{
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++)
        pb_byte(b, s[i]);
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t value_len(const char *tag)
{
    size_t tl = strlen(tag);
    return 1 + varint_len(tl) + tl + 1 + 4;
}

/* Encodes Event{wall_time, step, file_version?, summary{value{tag, simple_value}...}}. */
static size_t encode_event(uint8_t *out, size_t cap, double wall, int64_t step,
                           const char *file_version, size_t n, const char *const *tags,
                           const float *values)
{
    pb b = {out, 0, cap};
    uint8_t w[8];
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    kiln_put_u64le(w, bits);
    pb_byte(&b, (1 << 3) | 1);
    pb_bytes(&b, w, 8);
    pb_byte(&b, (2 << 3) | 0);
    pb_varint(&b, (uint64_t)step); /* int64: negative values take 10 bytes */
    if (file_version) {
        size_t l = strlen(file_version);
        pb_byte(&b, (3 << 3) | 2);
        pb_varint(&b, l);
        pb_bytes(&b, file_version, l);
    }
    if (n) {
        size_t sl = 0;
        for (size_t i = 0; i < n; i++)
            sl += 1 + varint_len(value_len(tags[i])) + value_len(tags[i]);
        pb_byte(&b, (5 << 3) | 2);
        pb_varint(&b, sl);
        for (size_t i = 0; i < n; i++) {
            size_t tl = strlen(tags[i]);
            pb_byte(&b, (1 << 3) | 2); /* Summary.value */
            pb_varint(&b, value_len(tags[i]));
            pb_byte(&b, (1 << 3) | 2); /* Value.tag */
            pb_varint(&b, tl);
            pb_bytes(&b, tags[i], tl);
            uint32_t fb;
            memcpy(&fb, &values[i], 4);
            kiln_put_u32le(w, fb);
            pb_byte(&b, (2 << 3) | 5); /* Value.simple_value */
            pb_bytes(&b, w, 4);
        }
    }
    return b.n;
}

/* ---- TFRecord ---- */

void kiln_tfrecord_frame(const void *data, size_t len, uint8_t *out)
{
    kiln_put_u64le(out, (uint64_t)len);
    kiln_put_u32le(out + 8, kiln_crc32c_mask(kiln_crc32c(out, 8)));
    memcpy(out + 12, data, len);
    kiln_put_u32le(out + 12 + len, kiln_crc32c_mask(kiln_crc32c(data, len)));
}

/* ---- writer ---- */

static double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double secs_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static kiln_err write_event(kiln_summary_writer *w, int64_t step, const char *file_version,
                            size_t n, const char *const *tags, const float *values)
{
    kiln_err rc = KILN_OK;
    size_t len = encode_event(NULL, 0, now_wall(), step, file_version, n, tags, values);
    uint8_t *buf = malloc(len + 16);
    if (!buf) return KILN_ENOMEM;
    /* wall time is read again: the first call only measured the size */
    encode_event(buf + 12, len, now_wall(), step, file_version, n, tags, values);
    /* frame in place: header before, data CRC after */
    kiln_put_u64le(buf, (uint64_t)len);
    kiln_put_u32le(buf + 8, kiln_crc32c_mask(kiln_crc32c(buf, 8)));
    kiln_put_u32le(buf + 12 + len, kiln_crc32c_mask(kiln_crc32c(buf + 12, len)));
    if (fwrite(buf, 1, len + 16, w->f) != len + 16) rc = KILN_EIO;
    free(buf);
    if (rc == KILN_OK && (w->flush_secs <= 0 || secs_since(&w->last_flush) >= w->flush_secs))
        rc = kiln_summary_flush(w);
    if (rc != KILN_OK && w->first_err == KILN_OK) w->first_err = rc;
    return rc;
}

kiln_err kiln_summary_open(const char *dir, kiln_summary_writer **out, kiln_errmsg *err)
{
    kiln_err rc;
    kiln_summary_writer *w = NULL;
    char host[256] = "localhost";
    int fd = -1;
    *out = NULL;
    if ((rc = kiln_mkdir_p(dir, err)) != KILN_OK) return rc;
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    /* a '/' in a host name would change the directory */
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    w = calloc(1, sizeof *w);
    size_t plen = strlen(dir) + strlen(host) + 64;
    if (!w || !(w->path = malloc(plen))) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        goto out;
    }
    long long secs = (long long)time(NULL);
    for (int k = 0; k < 1000; k++) {
        if (k == 0)
            snprintf(w->path, plen, "%s/events.out.tfevents.%lld.%s", dir, secs, host);
        else
            snprintf(w->path, plen, "%s/events.out.tfevents.%lld.%s.%d", dir, secs, host, k);
        /* O_EXCL: two writers in one second must not share (or truncate) a file */
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) break;
    }
    if (fd < 0) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: cannot create: %s", w->path, strerror(errno));
        goto out;
    }
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: fdopen: %s", w->path, strerror(errno));
        goto out;
    }
    w->flush_secs = KILN_SUMMARY_FLUSH_SECS;
    clock_gettime(CLOCK_MONOTONIC, &w->last_flush);
    if ((rc = write_event(w, 0, FILE_VERSION, 0, NULL, NULL)) != KILN_OK ||
        (rc = kiln_summary_flush(w)) != KILN_OK) {
        kiln_errmsg_set(err, rc, "%s: cannot write: %s", w->path, strerror(errno));
        goto out;
    }
    *out = w;
    w = NULL;
out:
    if (w) {
        if (w->f) fclose(w->f);
        free(w->path);
        free(w);
    }
    return rc;
}

const char *kiln_summary_path(const kiln_summary_writer *w)
{
    return w->path;
}

void kiln_summary_set_flush_secs(kiln_summary_writer *w, double secs)
{
    w->flush_secs = secs;
}

kiln_err kiln_summary_scalars(kiln_summary_writer *w, int64_t step, size_t n,
                              const char *const *tags, const float *values)
{
    for (size_t i = 0; i < n; i++)
        if (!tags[i] || strlen(tags[i]) >= KILN_SUMMARY_MAX_TAG) return KILN_EINVAL;
    return write_event(w, step, NULL, n, tags, values);
}

kiln_err kiln_summary_scalar(kiln_summary_writer *w, const char *tag, int64_t step, float value)
{
    return kiln_summary_scalars(w, step, 1, &tag, &value);
}

kiln_err kiln_summary_flush(kiln_summary_writer *w)
{
    kiln_err rc = fflush(w->f) == 0 ? KILN_OK : KILN_EIO;
    clock_gettime(CLOCK_MONOTONIC, &w->last_flush);
    if (rc != KILN_OK && w->first_err == KILN_OK) w->first_err = rc;
    return rc;
}

kiln_err kiln_summary_close(kiln_summary_writer *w)
{
    if (!w) return KILN_OK;
    kiln_err rc = w->first_err;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) {
        /* fsync may be unsupported (EINVAL, e.g. a pipe); that loses nothing */
        if (errno != EINVAL && rc == KILN_OK) rc = KILN_EIO;
    }
    if (fclose(w->f) != 0 && rc == KILN_OK) rc = KILN_EIO;
    free(w->path);
    free(w);
    return rc;
}

/* ---- reader ---- */

typedef struct rd {
    const uint8_t *p, *end;
} rd;

static int rd_varint(rd *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1; /* more than 10 bytes */
}

/* Reads one field header and positions past fixed-size payloads; for wire
 * type 2 returns the sub-range in *sub. Unknown wire types are errors. */
static int rd_field(rd *r, uint32_t *field, int *wt, uint64_t *v, rd *sub)
{
    uint64_t key;
    if (rd_varint(r, &key)) return -1;
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return rd_varint(r, v);
    case 1:
        if (r->end - r->p < 8) return -1;
        *v = kiln_get_u64le(r->p);
        r->p += 8;
        return 0;
    case 5:
        if (r->end - r->p < 4) return -1;
        *v = kiln_get_u32le(r->p);
        r->p += 4;
        return 0;
    case 2: {
        uint64_t l;
        if (rd_varint(r, &l) || l > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p;
        sub->end = r->p + l;
        r->p += l;
        return 0;
    }
    default:
        return -1;
    }
}

static void copy_str(char *dst, size_t cap, const rd *s)
{
    size_t l = (size_t)(s->end - s->p);
    if (l >= cap) l = cap - 1;
    memcpy(dst, s->p, l);
    dst[l] = '\0';
}

static int decode_value(rd v, kiln_event_scalar *ev)
{
    uint32_t f;
    int wt;
    uint64_t x = 0;
    rd sub = {0};
    while (v.p < v.end) {
        if (rd_field(&v, &f, &wt, &x, &sub)) return -1;
        if (f == 1 && wt == 2)
            copy_str(ev->tag, sizeof ev->tag, &sub);
        else if (f == 2 && wt == 5) {
            uint32_t b = (uint32_t)x;
            memcpy(&ev->value, &b, 4);
        }
    }
    return 0;
}

/* Decodes one Event and calls fn once (no values) or once per value.
 * Returns -1 on malformed input, 1 if fn asked to stop, 0 otherwise. */
static int decode_event(const uint8_t *data, size_t len, kiln_event_fn fn, void *ud)
{
    kiln_event_scalar base;
    memset(&base, 0, sizeof base);
    rd r = {data, data + len}, summary = {NULL, NULL};
    uint32_t f;
    int wt;
    uint64_t x = 0;
    rd sub = {0};
    while (r.p < r.end) {
        if (rd_field(&r, &f, &wt, &x, &sub)) return -1;
        if (f == 1 && wt == 1)
            memcpy(&base.wall_time, &x, 8);
        else if (f == 2 && wt == 0)
            base.step = (int64_t)x;
        else if (f == 3 && wt == 2)
            copy_str(base.file_version, sizeof base.file_version, &sub);
        else if (f == 5 && wt == 2)
            summary = sub;
    }
    int delivered = 0;
    while (summary.p && summary.p < summary.end) {
        if (rd_field(&summary, &f, &wt, &x, &sub)) return -1;
        if (f != 1 || wt != 2) continue;
        kiln_event_scalar ev = base;
        if (decode_value(sub, &ev)) return -1;
        delivered = 1;
        if (fn(ud, &ev)) return 1;
    }
    if (!delivered && fn(ud, &base)) return 1;
    return 0;
}

kiln_err kiln_summary_read(const char *path, kiln_event_fn fn, void *ud, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    uint8_t *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kiln_errmsg_set(err, errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO,
                               "%s: cannot open: %s", path, strerror(errno));
    for (size_t rec = 0;; rec++) {
        uint8_t hdr[12], tail[4];
        long off = ftell(f);
        size_t got = fread(hdr, 1, 12, f);
        if (got == 0) break; /* clean end */
        if (got < 12) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: record %zu at byte %ld: truncated header",
                                 path, rec, off);
            goto out;
        }
        if (kiln_get_u32le(hdr + 8) != kiln_crc32c_mask(kiln_crc32c(hdr, 8))) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: record %zu at byte %ld: bad length CRC",
                                 path, rec, off);
            goto out;
        }
        uint64_t len = kiln_get_u64le(hdr);
        if (len > MAX_RECORD) {
            rc = kiln_errmsg_set(err, KILN_ELIMIT, "%s: record %zu at byte %ld: %llu bytes", path,
                                 rec, off, (unsigned long long)len);
            goto out;
        }
        free(data);
        data = malloc(len ? len : 1);
        if (!data) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
            goto out;
        }
        if (fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: record %zu at byte %ld: truncated data",
                                 path, rec, off);
            goto out;
        }
        if (kiln_get_u32le(tail) != kiln_crc32c_mask(kiln_crc32c(data, len))) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: record %zu at byte %ld: bad data CRC", path,
                                 rec, off);
            goto out;
        }
        int r = decode_event(data, len, fn, ud);
        if (r < 0) {
            rc = kiln_errmsg_set(err, KILN_EINVAL,
                                 "%s: record %zu at byte %ld: malformed Event protobuf", path, rec,
                                 off);
            goto out;
        }
        if (r > 0) break;
    }
out:
    free(data);
    fclose(f);
    return rc;
}
