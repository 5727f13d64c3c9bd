/* tests/runtime/test_imagenet.c - ImageNet-style records (data/example.c,
 * data/imagenet.c), on records and JPEGs made here (libjpeg's encoder, the
 * TFRecord framing and tf.Example's protobuf written by hand; the TensorFlow-
 * written files are test_train_resnet50_data.sh's):
 *  - a tf.Example's image and label: packed and unpacked int64 lists, other
 *    features skipped, each missing or mistyped key and a cut record refused
 *    with its reason;
 *  - one JPEG into a crop: a solid colour stays that colour (normalised by
 *    ImageNet's mean and std); the central crop of a left-to-right ramp rises
 *    left to right within the central 87.5%; random crops flip about half the
 *    time; a greyscale JPEG gives three equal channels; a cut JPEG is an error
 *    that says JPEG;
 *  - the reader over three files (one empty) on two threads, twelve batches
 *    (the files repeat): every image's colour is its label's, so images and
 *    labels travel together; another split's files are not read;
 *  - the reader's own rate (kiln_imagenet_rate) over 224x224 crops of
 *    320x240 JPEGs, printed: positive, counting every image handed out, and
 *    never below the images over the wall time (its threads' busy time
 *    excludes their waits, so it can only be higher);
 *  - its refusals: no train-* files, files with no records, a damaged CRC
 *    and a label out of range, each naming the file and the record. */
#include "data/example.h"
#include "data/imagenet.h"
#include "rt_test.h"
#include "test.h"
#include "util/util.h"

#include <jpeglib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const float MEAN[3] = {123.675f, 116.28f, 103.53f};
static const float STD[3] = {58.395f, 57.12f, 57.375f};
static const uint8_t COLOUR[4][3] = {{200, 30, 30}, {30, 200, 30}, {30, 30, 200}, {220, 220, 40}};

/* ---- writing protobuf and TFRecords ---- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void varint(buf *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        put(b, &c, 1);
    } while (v);
}

static void field_bytes(buf *b, uint32_t num, const void *d, size_t n)
{
    varint(b, (uint64_t)num << 3 | 2);
    varint(b, n);
    put(b, d, n);
}

/* a map entry of Features: key and the Feature holding kind (1 bytes, 2
 * floats, 3 int64) whose list message is `list` */
static void entry(buf *feats, const char *key, uint32_t kind, const buf *list)
{
    buf feature = {0}, e = {0};
    field_bytes(&feature, kind, list->p, list->n);
    field_bytes(&e, 1, key, strlen(key));
    field_bytes(&e, 2, feature.p, feature.n);
    field_bytes(feats, 1, e.p, e.n);
    free(feature.p);
    free(e.p);
}

enum { E_PACKED = 1, E_NO_IMAGE = 2, E_NO_LABEL = 4, E_LABEL_BYTES = 8, E_EXTRA = 16 };

static buf example(const uint8_t *img, size_t n, int64_t label, int flags)
{
    buf feats = {0}, ex = {0}, list = {0};
    if (flags & E_EXTRA) { /* a float feature and a string one, as the build script writes */
        float f = 1.5f;
        buf l = {0};
        varint(&l, 1 << 3 | 5);
        put(&l, &f, 4);
        entry(&feats, "image/class/weight", 2, &l);
        free(l.p);
        l = (buf){0};
        field_bytes(&l, 1, "JPEG", 4);
        entry(&feats, "image/format", 1, &l);
        free(l.p);
    }
    if (!(flags & E_NO_IMAGE)) {
        field_bytes(&list, 1, img, n);
        entry(&feats, KILN_EXAMPLE_IMAGE_KEY, 1, &list);
        list.n = 0;
    }
    if (!(flags & E_NO_LABEL)) {
        if (flags & E_LABEL_BYTES) {
            field_bytes(&list, 1, "7", 1);
            entry(&feats, KILN_EXAMPLE_LABEL_KEY, 1, &list);
        } else if (flags & E_PACKED) {
            buf p = {0};
            varint(&p, (uint64_t)label);
            varint(&p, 999); /* a second value: the first one counts */
            field_bytes(&list, 1, p.p, p.n);
            free(p.p);
            entry(&feats, KILN_EXAMPLE_LABEL_KEY, 3, &list);
        } else {
            varint(&list, 1 << 3 | 0);
            varint(&list, (uint64_t)label);
            entry(&feats, KILN_EXAMPLE_LABEL_KEY, 3, &list);
        }
    }
    field_bytes(&ex, 1, feats.p, feats.n);
    free(feats.p);
    free(list.p);
    return ex;
}

/* one TFRecord; damage: a bit of the data flipped after its CRC was taken */
static void record(FILE *f, const buf *data, int damage)
{
    uint8_t hdr[12], tail[4];
    kiln_put_u64le(hdr, data->n);
    kiln_put_u32le(hdr + 8, kiln_crc32c_mask(kiln_crc32c(hdr, 8)));
    kiln_put_u32le(tail, kiln_crc32c_mask(kiln_crc32c(data->p, data->n)));
    if (damage) data->p[data->n / 2] ^= 0x40;
    fwrite(hdr, 1, 12, f);
    fwrite(data->p, 1, data->n, f);
    fwrite(tail, 1, 4, f);
}

/* ---- JPEGs ---- */

enum { SOLID, RAMP };

/* w x h, comps 3 or 1: SOLID in colour c, RAMP red rising left to right */
static uint8_t *make_jpeg(int w, int h, int comps, int kind, const uint8_t *c, size_t *n)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    unsigned char *out = NULL;
    unsigned long len = 0;
    uint8_t *row = malloc((size_t)w * comps);
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &out, &len);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++)
            for (int k = 0; k < comps; k++)
                row[x * comps + k] = kind == SOLID ? c[k]
                                     : k == 0      ? (uint8_t)(x * 255 / (w - 1))
                                                   : 0;
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    *n = len;
    return out;
}

/* the 0-255 value of channel k of pixel i of a crop */
static float raw(const float *x, size_t i, int k)
{
    return x[i * 3 + k] * STD[k] + MEAN[k];
}

static void parsing(void)
{
    const uint8_t img[] = {0xff, 0xd8, 1, 2, 3};
    const uint8_t *p;
    size_t n;
    int64_t label = -1;
    const char *why = "";
    for (int packed = 0; packed < 2; packed++) {
        buf e = example(img, sizeof img, 417, (packed ? E_PACKED : 0) | E_EXTRA);
        CHECK_MSG(kiln_example_image(e.p, e.n, &p, &n, &label, &why) == 0, "%s", why);
        CHECK(n == sizeof img && memcmp(p, img, n) == 0 && p >= e.p && p + n <= e.p + e.n);
        CHECK_MSG(label == 417, "packed %d: label %lld", packed, (long long)label);
        /* every cut of the record is refused or parses within it */
        for (size_t cut = 0; cut < e.n; cut++) {
            int r = kiln_example_image(e.p, cut, &p, &n, &label, &why);
            CHECK(r == -1 || (p >= e.p && p + n <= e.p + cut));
        }
        free(e.p);
    }
    static const struct {
        int flags;
        const char *why;
    } bad[] = {{E_NO_IMAGE, "no image/encoded"},
               {E_NO_LABEL, "no image/class/label"},
               {E_LABEL_BYTES, "image/class/label is not an int64 feature"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        buf e = example(img, sizeof img, 3, bad[i].flags);
        why = "";
        CHECK(kiln_example_image(e.p, e.n, &p, &n, &label, &why) == -1);
        CHECK_MSG(strstr(why, bad[i].why) != NULL, "flags %d: %s", bad[i].flags, why);
        free(e.p);
    }
    const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff};
    CHECK(kiln_example_image(junk, sizeof junk, &p, &n, &label, &why) == -1);
    CHECK_MSG(strstr(why, "malformed") != NULL, "junk: %s", why);
}

static void crops(void)
{
    enum { S = 16 };
    float out[S * S * 3];
    char why[256] = "";
    size_t n;
    kiln_rng g;
    kiln_rng_seed(&g, 3);
    const uint8_t c[3] = {200, 100, 50};
    uint8_t *j = make_jpeg(64, 48, 3, SOLID, c, &n);
    for (int train = 0; train < 2; train++) {
        CHECK_MSG(kiln_jpeg_crop(j, n, S, train, &g, out, why, sizeof why) == 0, "%s", why);
        double worst = 0;
        for (size_t i = 0; i < S * S; i++)
            for (int k = 0; k < 3; k++)
                worst = fmax(worst, fabs(raw(out, i, k) - c[k]));
        CHECK_MSG(worst <= 4, "solid colour, train %d: off by %g", train, worst);
    }
    free(j);
    /* the ramp: red = x * 255 / 79 over 80 columns; the central square is
     * 52.5 pixels of the 60 rows' side, from x = 13.75 to 66.25 */
    j = make_jpeg(80, 60, 3, RAMP, NULL, &n);
    CHECK(kiln_jpeg_crop(j, n, S, 0, &g, out, why, sizeof why) == 0);
    int rising = 1;
    for (int y = 0; y < S; y++)
        for (int x = 1; x < S; x++)
            rising &= raw(out, (size_t)y * S + x, 0) >= raw(out, (size_t)y * S + x - 1, 0) - 2;
    float lo = raw(out, 0, 0), hi = raw(out, S - 1, 0);
    CHECK_MSG(rising && lo > 13.0 * 255 / 79 - 6 && hi < 67.0 * 255 / 79 + 6 && hi - lo > 100,
              "central crop of the ramp: rising %d, %g .. %g", rising, lo, hi);
    int up = 0, down = 0;
    for (int t = 0; t < 40; t++) {
        CHECK(kiln_jpeg_crop(j, n, S, 1, &g, out, why, sizeof why) == 0);
        float a = raw(out, 0, 0), b = raw(out, S - 1, 0);
        up += b > a, down += a > b;
    }
    CHECK_MSG(up >= 8 && down >= 8, "40 random crops: %d left-to-right, %d flipped", up, down);
    free(j);
    /* greyscale: three equal channels */
    const uint8_t grey = 90;
    j = make_jpeg(40, 40, 1, SOLID, &grey, &n);
    CHECK(kiln_jpeg_crop(j, n, S, 0, &g, out, why, sizeof why) == 0);
    CHECK_MSG(fabs(raw(out, 5, 0) - raw(out, 5, 1)) < 1e-3 &&
                  fabs(raw(out, 5, 1) - raw(out, 5, 2)) < 1e-3 && fabs(raw(out, 5, 0) - grey) <= 3,
              "greyscale: %g %g %g", raw(out, 5, 0), raw(out, 5, 1), raw(out, 5, 2));
    /* a cut JPEG */
    why[0] = '\0';
    CHECK(kiln_jpeg_crop(j, 30, S, 0, &g, out, why, sizeof why) == -1);
    CHECK_MSG(strncmp(why, "JPEG", 4) == 0, "cut JPEG: %s", why);
    free(j);
}

static char tmpdir[64];

static void write_file(const char *dir, const char *name, int records, int first_label, int bad)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (int i = 0; f && i < records; i++) {
        int c = (first_label + i) % 4;
        size_t n;
        uint8_t *j = make_jpeg(24 + 8 * (i % 3), 32, 3, SOLID, COLOUR[c], &n);
        buf e = example(j, n, bad == 2 && i == 1 ? 9 : c, i % 2 ? E_PACKED : 0);
        record(f, &e, bad == 1 && i == 2);
        free(e.p);
        free(j);
    }
    if (f) fclose(f);
}

/* the colour class nearest to image i's mean */
static int colour_of(const float *x, size_t i, int S)
{
    double m[3] = {0, 0, 0};
    for (int p = 0; p < S * S; p++)
        for (int k = 0; k < 3; k++)
            m[k] += raw(x + i * (size_t)S * S * 3, (size_t)p, k) / (S * S);
    int best = -1;
    double bd = 1e9;
    for (int c = 0; c < 4; c++) {
        double d = 0;
        for (int k = 0; k < 3; k++)
            d += (m[k] - COLOUR[c][k]) * (m[k] - COLOUR[c][k]);
        if (d < bd) bd = d, best = c;
    }
    return bd < 15 * 15 ? best : -1;
}

static kiln_imagenet *open_dir(const char *dir, int classes, char *err, size_t errlen)
{
    kiln_imagenet_cfg c = {.dir = dir,
                           .split = "train",
                           .batch = 4,
                           .size = 8,
                           .classes = classes,
                           .threads = 2,
                           .train = 1,
                           .seed = 5};
    return kiln_imagenet_open(&c, err, errlen);
}

static void reader(void)
{
    char dir[128], err[1024] = "";
    const float *x;
    const int32_t *y;
    snprintf(dir, sizeof dir, "%s/good", tmpdir);
    mkdir(dir, 0700);
    write_file(dir, "train-00000-of-00003", 10, 0, 0);
    write_file(dir, "train-00001-of-00003", 0, 0, 0);
    write_file(dir, "train-00002-of-00003", 7, 1, 0);
    char junk[200];
    snprintf(junk, sizeof junk, "%s/validation-00000-of-00001", dir);
    FILE *f = fopen(junk, "wb");
    if (f) fputs("not a TFRecord file", f), fclose(f);
    kiln_imagenet *d = open_dir(dir, 4, err, sizeof err);
    CHECK_MSG(d != NULL, "open: %s", err);
    if (!d) return;
    CHECK(kiln_imagenet_files(d) == 3 && kiln_imagenet_threads(d) == 2);
    int seen[4] = {0}, mismatched = 0, total = 0;
    for (int b = 0; b < 12; b++) {
        if (kiln_imagenet_next(d, &x, &y, err, sizeof err)) {
            CHECK_MSG(0, "batch %d: %s", b, err);
            break;
        }
        for (int i = 0; i < 4; i++, total++) {
            CHECK(y[i] >= 0 && y[i] < 4);
            if (y[i] < 0 || y[i] >= 4) continue;
            seen[y[i]]++;
            if (colour_of(x, (size_t)i, 8) != y[i]) mismatched++;
        }
    }
    printf("reader: %d images in 12 batches, labels %d %d %d %d, %d with another label's colour\n",
           total, seen[0], seen[1], seen[2], seen[3], mismatched);
    CHECK_MSG(mismatched == 0 && seen[0] && seen[1] && seen[2] && seen[3],
              "%d images carry another label's colour", mismatched);
    uint64_t decoded = 0;
    CHECK(kiln_imagenet_rate(d, &decoded) > 0 && decoded >= 48);
    kiln_imagenet_close(d);

    /* refusals */
    snprintf(dir, sizeof dir, "%s/none", tmpdir);
    mkdir(dir, 0700);
    CHECK(open_dir(dir, 4, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "no files named train-*") != NULL, "no files: %s", err);
    write_file(dir, "train-00000-of-00001", 0, 0, 0);
    d = open_dir(dir, 4, err, sizeof err);
    CHECK(d != NULL);
    if (d) {
        CHECK(kiln_imagenet_next(d, &x, &y, err, sizeof err) == -1);
        CHECK_MSG(strstr(err, "hold no records") != NULL, "empty files: %s", err);
        kiln_imagenet_close(d);
    }
    static const struct {
        const char *name;
        int bad;
        const char *want;
    } cases[] = {{"crc", 1, "train-00000-of-00001: record 2: its data's CRC does not match"},
                 {"label", 2, "train-00000-of-00001: record 1: label 9 is not in [0, 4)"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, "%s/%s", tmpdir, cases[i].name);
        mkdir(dir, 0700);
        write_file(dir, "train-00000-of-00001", 4, 0, cases[i].bad);
        d = open_dir(dir, 4, err, sizeof err);
        CHECK(d != NULL);
        if (!d) continue;
        int r = 0;
        for (int b = 0; b < 4 && r == 0; b++)
            r = kiln_imagenet_next(d, &x, &y, err, sizeof err);
        CHECK_MSG(r == -1 && strstr(err, cases[i].want), "%s: %d %s", cases[i].name, r, err);
        /* after a failure every call fails */
        CHECK(kiln_imagenet_next(d, &x, &y, err, sizeof err) == -1);
        kiln_imagenet_close(d);
    }
}

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The reader's rate on ImageNet-like work: 224x224 training crops of
 * 320x240 JPEGs, 2 threads, 16 batches of 8 */
static void rate(void)
{
    enum { RECORDS = 32, BATCH = 8, BATCHES = 16 };
    char dir[128], path[256], err[1024] = "";
    const float *x;
    const int32_t *y;
    snprintf(dir, sizeof dir, "%s/rate", tmpdir);
    mkdir(dir, 0700);
    for (int k = 0; k < 2; k++) { /* two files: one per thread */
        snprintf(path, sizeof path, "%s/train-%05d-of-00002", dir, k);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        for (int i = 0; f && i < RECORDS / 2; i++) {
            size_t n;
            uint8_t *j = make_jpeg(320, 240, 3, RAMP, COLOUR[i % 4], &n);
            buf e = example(j, n, i % 4, 0);
            record(f, &e, 0);
            free(e.p);
            free(j);
        }
        if (f) fclose(f);
    }
    kiln_imagenet_cfg c = {.dir = dir,
                           .split = "train",
                           .batch = BATCH,
                           .size = 224,
                           .classes = 4,
                           .threads = 2,
                           .train = 1,
                           .seed = 9};
    double t0 = mono();
    kiln_imagenet *d = kiln_imagenet_open(&c, err, sizeof err);
    CHECK_MSG(d != NULL, "open: %s", err);
    if (!d) return;
    int b = 0;
    for (; b < BATCHES; b++)
        if (kiln_imagenet_next(d, &x, &y, err, sizeof err)) {
            CHECK_MSG(0, "batch %d: %s", b, err);
            break;
        }
    uint64_t n = 0;
    double r = kiln_imagenet_rate(d, &n), wall = mono() - t0;
    CHECK(kiln_imagenet_threads(d) == 2);
    printf("reader images/sec: %.1f (%llu images of 224x224 from 320x240 JPEGs on %d threads; "
           "%.1f images/sec over the wall time)\n",
           r, (unsigned long long)n, kiln_imagenet_threads(d), (double)n / wall);
    CHECK_MSG(b == BATCHES && n >= (uint64_t)BATCH * BATCHES, "%llu images decoded",
              (unsigned long long)n);
    CHECK_MSG(r > 0 && r >= 0.99 * (double)n / wall, "rate %.1f below %.1f over the wall time", r,
              (double)n / wall);
    kiln_imagenet_close(d);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-imagenet-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    parsing();
    crops();
    reader();
    rate();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_DONE();
}
