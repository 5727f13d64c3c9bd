/* data/example.c - a tf.Example's image and label (data/example.h).
 *
 * The messages, with the field numbers read here:
 *   Example   { Features features = 1; }
 *   Features  { map<string, Feature> feature = 1; }: each entry a message
 *               { string key = 1; Feature value = 2; }
 *   Feature   { oneof: BytesList bytes_list = 1; FloatList float_list = 2;
 *               Int64List int64_list = 3; }
 *   BytesList { repeated bytes value = 1; }
 *   Int64List { repeated int64 value = 1; } (packed, or one varint each)
 * Other fields are skipped by wire type; a map key written twice takes its
 * last value, as protobuf's parsers do. */
#include "data/example.h"

#include <string.h>

#include "util/pbwire.h"

static int key_is(kiln_pb_span k, const char *want)
{
    size_t n = strlen(want);
    return k.n == n && memcmp(k.p, want, n) == 0;
}

/* The Feature message f's list of kind `kind` (1 bytes, 3 int64), or an
 * empty span when it holds another kind. */
static int feature_list(kiln_pb_span f, uint32_t kind, kiln_pb_span *list)
{
    kiln_pb_field x;
    int found = 0;
    while (f.n) {
        if (!kiln_pb_next(&f, &x)) return -1;
        if (x.wt == 2 && x.num == kind) *list = x.bytes, found = 1;
    }
    return found;
}

static int first_bytes(kiln_pb_span list, kiln_pb_span *out)
{
    kiln_pb_field x;
    while (list.n) {
        if (!kiln_pb_next(&list, &x)) return -1;
        if (x.num == 1 && x.wt == 2) {
            *out = x.bytes;
            return 1;
        }
    }
    return 0;
}

static int first_int64(kiln_pb_span list, int64_t *out)
{
    kiln_pb_field x;
    while (list.n) {
        if (!kiln_pb_next(&list, &x)) return -1;
        if (x.num != 1) continue;
        if (x.wt == 0) {
            *out = (int64_t)x.v;
            return 1;
        }
        if (x.wt == 2) { /* packed */
            uint64_t v;
            kiln_pb_span p = x.bytes;
            if (!p.n) continue;
            if (!kiln_pb_varint(&p, &v)) return -1;
            *out = (int64_t)v;
            return 1;
        }
    }
    return 0;
}

int kiln_example_image(const uint8_t *rec, size_t n, const uint8_t **img, size_t *img_n,
                       int64_t *label, const char **why)
{
    kiln_pb_span ex = {rec, n}, img_list = {0}, lab_list = {0};
    kiln_pb_field f, e, k;
    int have_img = 0, have_lab = 0;
    while (ex.n) {
        if (!kiln_pb_next(&ex, &f)) goto bad;
        if (f.num != 1 || f.wt != 2) continue;
        kiln_pb_span feats = f.bytes; /* Features */
        while (feats.n) {
            if (!kiln_pb_next(&feats, &e)) goto bad;
            if (e.num != 1 || e.wt != 2) continue;
            kiln_pb_span entry = e.bytes, key = {0}, val = {0};
            int has_key = 0, has_val = 0;
            while (entry.n) {
                if (!kiln_pb_next(&entry, &k)) goto bad;
                if (k.wt != 2) continue;
                if (k.num == 1) key = k.bytes, has_key = 1;
                if (k.num == 2) val = k.bytes, has_val = 1;
            }
            if (!has_key || !has_val) continue;
            if (key_is(key, KILN_EXAMPLE_IMAGE_KEY)) {
                int r = feature_list(val, 1, &img_list);
                if (r < 0) goto bad;
                if (r == 0) {
                    *why = "image/encoded is not a bytes feature";
                    return -1;
                }
                have_img = 1;
            } else if (key_is(key, KILN_EXAMPLE_LABEL_KEY)) {
                int r = feature_list(val, 3, &lab_list);
                if (r < 0) goto bad;
                if (r == 0) {
                    *why = "image/class/label is not an int64 feature";
                    return -1;
                }
                have_lab = 1;
            }
        }
    }
    if (!have_img || !have_lab) {
        *why = !have_img ? "no image/encoded feature" : "no image/class/label feature";
        return -1;
    }
    kiln_pb_span jpg;
    int r = first_bytes(img_list, &jpg);
    if (r <= 0) {
        *why = r < 0 ? "malformed image/encoded list" : "image/encoded holds no value";
        return -1;
    }
    r = first_int64(lab_list, label);
    if (r <= 0) {
        *why = r < 0 ? "malformed image/class/label list" : "image/class/label holds no value";
        return -1;
    }
    *img = jpg.p;
    *img_n = jpg.n;
    return 0;
bad:
    *why = "not a tf.Example: malformed protobuf";
    return -1;
}
