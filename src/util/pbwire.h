/* util/pbwire.h - reading protobuf's wire format and TFRecord framing, for
 * the hand-written parsers of TensorFlow's files: event files
 * (tune/tfevents.c) and tf.Example records (runtime/data/example.c).
 * Header-only. Bounded: every length is checked against what is left, and
 * nothing here recurses; a parser walks nested messages one span at a time.
 *
 * TFRecord framing (each record of a file):
 *   u64le length | u32le masked CRC-32C of the 8 length bytes |
 *   length bytes of data | u32le masked CRC-32C of the data */
#ifndef KILN_UTIL_PBWIRE_H
#define KILN_UTIL_PBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/crc32c.h"

typedef struct kiln_pb_span {
    const uint8_t *p;
    size_t n;
} kiln_pb_span;

/* One field: its number and wire type, and for length-delimited fields the
 * bytes, for fixed ones the bits, for varints the value. */
typedef struct kiln_pb_field {
    uint32_t num;
    int wt;
    uint64_t v;
    kiln_pb_span bytes;
} kiln_pb_field;

static inline uint32_t kiln_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t kiln_le64(const uint8_t *p)
{
    return (uint64_t)kiln_le32(p) | (uint64_t)kiln_le32(p + 4) << 32;
}

/* TFRecord's checksum of n bytes: CRC-32C, masked */
static inline uint32_t kiln_tfrecord_crc(const uint8_t *p, size_t n)
{
    return kiln_crc32c_mask(kiln_crc32c_update(0, p, n));
}

static inline bool kiln_pb_varint(kiln_pb_span *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (s->n == 0) return false;
        uint8_t b = *s->p++;
        s->n--;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false; /* more than 10 bytes */
}

/* The next field of s into f; false at the end of s or on a malformed field
 * (s is then left where it stopped). */
static inline bool kiln_pb_next(kiln_pb_span *s, kiln_pb_field *f)
{
    uint64_t key;
    f->bytes = (kiln_pb_span){0};
    f->v = 0;
    if (!kiln_pb_varint(s, &key)) return false;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    switch (f->wt) {
    case 0:
        return kiln_pb_varint(s, &f->v);
    case 1:
        if (s->n < 8) return false;
        f->v = kiln_le64(s->p);
        s->p += 8, s->n -= 8;
        return true;
    case 5:
        if (s->n < 4) return false;
        f->v = kiln_le32(s->p);
        s->p += 4, s->n -= 4;
        return true;
    case 2:
        if (!kiln_pb_varint(s, &f->v) || f->v > s->n) return false;
        f->bytes = (kiln_pb_span){s->p, (size_t)f->v};
        s->p += f->v, s->n -= (size_t)f->v;
        return true;
    default:
        return false; /* groups (3, 4) and 6, 7: in none of TensorFlow's messages read here */
    }
}

#endif
