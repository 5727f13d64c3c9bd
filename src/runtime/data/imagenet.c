/* data/imagenet.c - TFRecord files of JPEGs into training batches
 * (data/imagenet.h).
 *
 * Threads. Each decoding thread reads its share of the files (file i of a
 * pass goes to thread i mod T), record by record, and puts each decoded
 * crop into a ring of RING batch slots: an image claims the next place
 * (batch b = k / batch, row k mod batch) in the order the threads finish
 * them, waits until slot b mod RING holds batch b (the consumer gave back
 * batch b - RING), and is copied in. So decoding runs ahead of training by
 * up to RING - 1 batches and never waits on one slow image; a batch's
 * images come from several files at once, as tf.data's parallel interleave
 * gives them (not reproducible run to run, which ImageNet training with
 * random crops is not either).
 *
 * Records. A record whose framing CRCs do not match, a truncated record, a
 * record that is not a tf.Example with image/encoded and image/class/label,
 * a label outside [0, classes) or a JPEG libjpeg cannot decode stops the
 * data with an error naming the file and the record's number: a dataset
 * that is not what it claims is better said than trained on. */
#include "data/imagenet.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

#include "data/example.h"
#include "util/pbwire.h"

#define RING        3
#define MAX_THREADS 16

/* ImageNet's per-channel statistics on the 0-255 scale (torchvision's) */
static const float MEAN[3] = {123.675f, 116.28f, 103.53f};
static const float STD[3] = {58.395f, 57.12f, 57.375f};

/* ---- one JPEG ---- */

typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jerr;

static void on_error(j_common_ptr c)
{
    jerr *e = (jerr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

static void on_message(j_common_ptr c, int level)
{
    (void)c, (void)level; /* warnings (a corrupt but decodable tail) are not errors */
}

/* The crop in the full image's pixels: x, y, width, height; and the flip */
static void choose_crop(int W, int H, int train, kiln_rng *g, double *c, int *flip)
{
    *flip = 0;
    if (train) {
        *flip = kiln_rng_uniform(g) < 0.5f;
        for (int t = 0; t < 10; t++) {
            double area = (0.08 + 0.92 * kiln_rng_uniform(g)) * W * H;
            double ar =
                exp(log(3.0 / 4.0) + (log(4.0 / 3.0) - log(3.0 / 4.0)) * kiln_rng_uniform(g));
            double w = sqrt(area * ar), h = sqrt(area / ar);
            if (w <= W && h <= H && w >= 1 && h >= 1) {
                c[0] = (W - w) * kiln_rng_uniform(g);
                c[1] = (H - h) * kiln_rng_uniform(g);
                c[2] = w, c[3] = h;
                return;
            }
        }
        c[0] = c[1] = 0, c[2] = W, c[3] = H; /* an odd shape: the whole image */
        return;
    }
    double s = 0.875 * (W < H ? W : H);
    c[0] = (W - s) / 2, c[1] = (H - s) / 2, c[2] = c[3] = s;
}

/* Output index i of size along an axis whose crop starts at c0 and spans cn
 * of lim source pixels: the two source pixels around its centre and the
 * weight of the second (edges clamped) */
static void taps(double c0, double cn, int i, int size, int lim, int *a, int *b, double *f)
{
    double s = c0 + (i + 0.5) * cn / size - 0.5;
    if (s < 0) s = 0;
    if (s > lim - 1) s = lim - 1;
    *a = (int)s;
    *b = *a + 1 < lim ? *a + 1 : *a;
    *f = s - *a;
}

/* Bilinear resize of the crop c (in pix's pixels) to size x size, RGB
 * normalised; nc 3 (RGB) or 4 (Adobe's inverted CMYK). */
static void resize(const uint8_t *pix, int w, int h, int nc, const double *c, int size, int flip,
                   float *out)
{
    for (int i = 0; i < size; i++) {
        int y0, y1;
        double fy;
        taps(c[1], c[3], i, size, h, &y0, &y1, &fy);
        for (int j = 0; j < size; j++) {
            int x0, x1;
            double fx;
            taps(c[0], c[2], j, size, w, &x0, &x1, &fx);
            const uint8_t *p00 = pix + ((size_t)y0 * w + x0) * nc,
                          *p01 = pix + ((size_t)y0 * w + x1) * nc;
            const uint8_t *p10 = pix + ((size_t)y1 * w + x0) * nc,
                          *p11 = pix + ((size_t)y1 * w + x1) * nc;
            float *o = out + ((size_t)i * size + (flip ? size - 1 - j : j)) * 3;
            for (int k = 0; k < 3; k++) {
                double v00 = p00[k], v01 = p01[k], v10 = p10[k], v11 = p11[k];
                if (nc == 4) { /* inverted CMYK: R = C*K/255 */
                    v00 = v00 * p00[3] / 255.0, v01 = v01 * p01[3] / 255.0;
                    v10 = v10 * p10[3] / 255.0, v11 = v11 * p11[3] / 255.0;
                }
                double v =
                    (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
                o[k] = ((float)v - MEAN[k]) / STD[k];
            }
        }
    }
}

int kiln_jpeg_crop(const uint8_t *jpg, size_t n, int size, int train, kiln_rng *g, float *out,
                   char *why, size_t whylen)
{
    struct jpeg_decompress_struct ci;
    jerr je;
    uint8_t *volatile pix = NULL;
    volatile int rc = -1;
    memset(&ci, 0, sizeof ci);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = on_error;
    je.pub.emit_message = on_message;
    if (setjmp(je.jb)) {
        snprintf(why, whylen, "JPEG: %s", je.msg);
        goto out;
    }
    jpeg_create_decompress(&ci);
    if (n == 0 || n > KILN_IMAGENET_MAX_RECORD) {
        snprintf(why, whylen, "JPEG of %zu bytes", n);
        goto out;
    }
    jpeg_mem_src(&ci, jpg, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    int W = (int)ci.image_width, H = (int)ci.image_height, flip;
    if (W < 1 || H < 1 || W > 1 << 15 || H > 1 << 15) {
        snprintf(why, whylen, "JPEG of %dx%d pixels", W, H);
        goto out;
    }
    double c[4];
    choose_crop(W, H, train, g, c, &flip);
    /* libjpeg scales by 1/2, 1/4, 1/8 in the DCT, far faster than decoding
     * whole and shrinking: the largest that keeps the crop >= size */
    unsigned denom = 1;
    while (denom < 8 && c[2] / (2 * denom) >= size && c[3] / (2 * denom) >= size)
        denom *= 2;
    ci.scale_num = 1;
    ci.scale_denom = denom;
    ci.out_color_space =
        ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&ci);
    int ow = (int)ci.output_width, oh = (int)ci.output_height, nc = ci.output_components;
    if (nc != 3 && nc != 4) {
        snprintf(why, whylen, "JPEG with %d components after conversion", nc);
        goto out;
    }
    if (!(pix = malloc((size_t)ow * oh * nc))) {
        snprintf(why, whylen, "out of memory for a %dx%d JPEG", ow, oh);
        goto out;
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = pix + (size_t)ci.output_scanline * ow * nc;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    double sx = (double)ow / W, sy = (double)oh / H;
    double cs[4] = {c[0] * sx, c[1] * sy, c[2] * sx, c[3] * sy};
    resize(pix, ow, oh, nc, cs, size, flip, out);
    rc = 0;
out:
    jpeg_destroy_decompress(&ci);
    free(pix);
    return rc;
}

/* ---- the threads and the ring ---- */

typedef struct slot {
    float *x;
    int32_t *y;
    int filled;
    uint64_t seq; /* the batch it holds or is filling */
} slot;

typedef struct worker {
    kiln_imagenet *d;
    int id;
    pthread_t th;
    int started;
} worker;

struct kiln_imagenet {
    kiln_imagenet_cfg c;
    char **files;
    int nfiles, nthreads;
    worker *w;
    size_t img; /* floats per image */
    pthread_mutex_t mu;
    pthread_cond_t can_put, can_take;
    slot ring[RING];
    uint64_t next_img, taken;
    uint64_t records; /* decoded so far, every thread */
    double busy_s;    /* the threads' seconds reading and decoding them (kiln_imagenet_rate) */
    int pass0_done;   /* threads through their first pass */
    int stop, failed;
    char err[768];
};

int kiln_imagenet_files(const kiln_imagenet *d)
{
    return d->nfiles;
}

int kiln_imagenet_threads(const kiln_imagenet *d)
{
    return d->nthreads;
}

static void fail(kiln_imagenet *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(kiln_imagenet *d, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&d->mu);
    if (!d->failed) {
        va_start(ap, fmt);
        vsnprintf(d->err, sizeof d->err, fmt, ap);
        va_end(ap);
        d->failed = 1;
    }
    d->stop = 1;
    pthread_cond_broadcast(&d->can_put);
    pthread_cond_broadcast(&d->can_take);
    pthread_mutex_unlock(&d->mu);
}

/* One decoded image into the ring, which took its thread busy_s seconds to
 * read and decode; -1 when the data is stopping. */
static int put(kiln_imagenet *d, const float *img, int32_t label, double busy_s)
{
    pthread_mutex_lock(&d->mu);
    d->busy_s += busy_s;
    uint64_t k = d->next_img++, b = k / (uint64_t)d->c.batch;
    size_t row = (size_t)(k % (uint64_t)d->c.batch);
    slot *s = &d->ring[b % RING];
    while (!d->stop && s->seq != b)
        pthread_cond_wait(&d->can_put, &d->mu);
    int stop = d->stop;
    d->records++;
    pthread_mutex_unlock(&d->mu);
    if (stop) return -1;
    memcpy(s->x + row * d->img, img, sizeof(float) * d->img);
    s->y[row] = label;
    pthread_mutex_lock(&d->mu);
    if (++s->filled == d->c.batch) pthread_cond_broadcast(&d->can_take);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* The order of the files in pass p: shuffled per pass when training (the
 * same order in every thread: it depends on the seed and p only) */
static void pass_order(const kiln_imagenet *d, uint64_t p, int *order)
{
    for (int i = 0; i < d->nfiles; i++)
        order[i] = i;
    if (!d->c.train) return;
    kiln_rng g;
    kiln_rng_seed(&g, d->c.seed ^ (0x9e3779b97f4a7c15ULL * (p + 1)));
    for (int i = d->nfiles - 1; i > 0; i--) {
        int j = (int)(kiln_rng_next(&g) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int stopping(kiln_imagenet *d)
{
    pthread_mutex_lock(&d->mu);
    int s = d->stop;
    pthread_mutex_unlock(&d->mu);
    return s;
}

/* Reads one file's records into the ring: 0 at its end, -1 to stop. */
static int read_file(kiln_imagenet *d, const char *path, kiln_rng *g, float *img, uint8_t **rec,
                     size_t *cap)
{
    char why[256];
    uint8_t hdr[12], tail[4];
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(d, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (uint64_t no = 0;; no++) {
        double t0 = mono_s();
        size_t got = fread(hdr, 1, sizeof hdr, f);
        if (got == 0 && feof(f)) break;
        if (got != sizeof hdr) {
            fail(d, "%s: record %llu: truncated (%zu bytes of its 12-byte header)", path,
                 (unsigned long long)no, got);
            rc = -1;
            break;
        }
        uint64_t len = kiln_le64(hdr);
        if (kiln_tfrecord_crc(hdr, 8) != kiln_le32(hdr + 8) || len > KILN_IMAGENET_MAX_RECORD) {
            fail(d, "%s: record %llu: %s (not a TFRecord file, or damaged)", path,
                 (unsigned long long)no,
                 len > KILN_IMAGENET_MAX_RECORD ? "longer than 64 MiB"
                                                : "its length's CRC does not match");
            rc = -1;
            break;
        }
        if (len > *cap) {
            uint8_t *p = realloc(*rec, (size_t)len);
            if (!p) {
                fail(d, "%s: record %llu: out of memory", path, (unsigned long long)no);
                rc = -1;
                break;
            }
            *rec = p, *cap = (size_t)len;
        }
        if (fread(*rec, 1, (size_t)len, f) != len || fread(tail, 1, 4, f) != 4) {
            fail(d, "%s: record %llu: truncated", path, (unsigned long long)no);
            rc = -1;
            break;
        }
        if (kiln_tfrecord_crc(*rec, (size_t)len) != kiln_le32(tail)) {
            fail(d, "%s: record %llu: its data's CRC does not match (damaged)", path,
                 (unsigned long long)no);
            rc = -1;
            break;
        }
        const uint8_t *jpg;
        size_t jn;
        int64_t label;
        const char *bad;
        if (kiln_example_image(*rec, (size_t)len, &jpg, &jn, &label, &bad)) {
            fail(d, "%s: record %llu: %s", path, (unsigned long long)no, bad);
            rc = -1;
            break;
        }
        if (label < 0 || label >= d->c.classes) {
            fail(d,
                 "%s: record %llu: label %lld is not in [0, %d) (TensorFlow's ImageNet files "
                 "number the classes 1 to 1000: --num_classes=1001, as tf_cnn_benchmarks uses)",
                 path, (unsigned long long)no, (long long)label, d->c.classes);
            rc = -1;
            break;
        }
        if (kiln_jpeg_crop(jpg, jn, d->c.size, d->c.train, g, img, why, sizeof why)) {
            fail(d, "%s: record %llu: %s", path, (unsigned long long)no, why);
            rc = -1;
            break;
        }
        if (put(d, img, (int32_t)label, mono_s() - t0)) {
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    kiln_imagenet *d = w->d;
    kiln_rng g;
    uint8_t *rec = NULL;
    size_t cap = 0;
    float *img = malloc(sizeof(float) * d->img);
    int *order = malloc(sizeof(int) * (size_t)d->nfiles);
    if (!img || !order) {
        fail(d, "out of memory for a decoding thread");
        goto out;
    }
    kiln_rng_seed(&g, d->c.seed * 1000003u + (uint64_t)w->id + 1);
    for (uint64_t pass = 0; !stopping(d); pass++) {
        pass_order(d, pass, order);
        for (int i = w->id; i < d->nfiles; i += d->nthreads)
            if (read_file(d, d->files[order[i]], &g, img, &rec, &cap)) goto out;
        if (pass == 0) {
            /* files without a single record would leave the trainer waiting */
            pthread_mutex_lock(&d->mu);
            int last = ++d->pass0_done == d->nthreads, none = d->records == 0;
            pthread_mutex_unlock(&d->mu);
            if (last && none) {
                fail(d, "%s: the %d %s-* files hold no records", d->c.dir, d->nfiles, d->c.split);
                goto out;
            }
        }
    }
out:
    free(img);
    free(order);
    free(rec);
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_files(kiln_imagenet *d, char *err, size_t errlen)
{
    DIR *dir = opendir(d->c.dir);
    size_t pl = strlen(d->c.split), cap = 0;
    if (!dir) {
        snprintf(err, errlen, "--data_dir=%s: %s", d->c.dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (strncmp(e->d_name, d->c.split, pl) != 0 || e->d_name[pl] != '-') continue;
        if ((size_t)d->nfiles == cap) {
            cap = cap ? 2 * cap : 64;
            char **f = realloc(d->files, cap * sizeof *f);
            if (!f) break;
            d->files = f;
        }
        size_t n = strlen(d->c.dir) + strlen(e->d_name) + 2;
        if (!(d->files[d->nfiles] = malloc(n))) break;
        snprintf(d->files[d->nfiles++], n, "%s/%s", d->c.dir, e->d_name);
    }
    closedir(dir);
    if (d->nfiles == 0) {
        snprintf(err, errlen,
                 "--data_dir=%s: no files named %s-* (TFRecord files of tf.Example records with "
                 "image/encoded and image/class/label, as TensorFlow's build_imagenet_data.py "
                 "writes them: %s-00000-of-01024, ...)",
                 d->c.dir, d->c.split, d->c.split);
        return -1;
    }
    qsort(d->files, (size_t)d->nfiles, sizeof *d->files, cmp_str);
    return 0;
}

kiln_imagenet *kiln_imagenet_open(const kiln_imagenet_cfg *c, char *err, size_t errlen)
{
    kiln_imagenet *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->c = *c;
    if (!d->c.split) d->c.split = "train";
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->can_put, NULL);
    pthread_cond_init(&d->can_take, NULL);
    if (c->batch < 1 || c->size < 1 || c->classes < 1) {
        snprintf(err, errlen, "batch %d, image size %d, %d classes", c->batch, c->size, c->classes);
        goto bad;
    }
    if (list_files(d, err, errlen)) goto bad;
    d->img = (size_t)c->size * c->size * 3;
    for (int r = 0; r < RING; r++) {
        d->ring[r].seq = (uint64_t)r;
        d->ring[r].x = kiln_falloc(d->img * (size_t)c->batch);
        d->ring[r].y = calloc((size_t)c->batch, sizeof(int32_t));
        if (!d->ring[r].x || !d->ring[r].y) {
            snprintf(err, errlen, "out of memory for %d batches of %d images", RING, c->batch);
            goto bad;
        }
    }
    int t = c->threads;
    if (t <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        t = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
    }
    d->nthreads = t < d->nfiles ? t : d->nfiles;
    if (!(d->w = calloc((size_t)d->nthreads, sizeof *d->w))) {
        snprintf(err, errlen, "out of memory");
        goto bad;
    }
    for (int i = 0; i < d->nthreads; i++) {
        d->w[i] = (worker){.d = d, .id = i};
        if (pthread_create(&d->w[i].th, NULL, run_worker, &d->w[i])) {
            snprintf(err, errlen, "starting a decoding thread: %s", strerror(errno));
            goto bad;
        }
        d->w[i].started = 1;
    }
    return d;
bad:
    kiln_imagenet_close(d);
    return NULL;
}

int kiln_imagenet_next(kiln_imagenet *d, const float **x, const int32_t **labels, char *err,
                       size_t errlen)
{
    pthread_mutex_lock(&d->mu);
    if (d->taken > 0) { /* the previous batch's slot takes batch taken - 1 + RING */
        slot *p = &d->ring[(d->taken - 1) % RING];
        p->filled = 0;
        p->seq += RING;
        pthread_cond_broadcast(&d->can_put);
    }
    slot *s = &d->ring[d->taken % RING];
    while (!d->failed && !(s->seq == d->taken && s->filled == d->c.batch))
        pthread_cond_wait(&d->can_take, &d->mu);
    int failed = d->failed;
    if (failed)
        snprintf(err, errlen, "%s", d->err);
    else
        d->taken++;
    pthread_mutex_unlock(&d->mu);
    if (failed) return -1;
    *x = s->x;
    *labels = s->y;
    return 0;
}

double kiln_imagenet_rate(kiln_imagenet *d, uint64_t *images)
{
    pthread_mutex_lock(&d->mu);
    uint64_t n = d->records;
    double busy = d->busy_s;
    pthread_mutex_unlock(&d->mu);
    if (images) *images = n;
    return busy > 0 ? (double)n * d->nthreads / busy : 0.0;
}

void kiln_imagenet_close(kiln_imagenet *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->can_put);
    pthread_cond_broadcast(&d->can_take);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; d->w && i < d->nthreads; i++)
        if (d->w[i].started) pthread_join(d->w[i].th, NULL);
    free(d->w);
    for (int r = 0; r < RING; r++) {
        kiln_ffree(d->ring[r].x);
        free(d->ring[r].y);
    }
    for (int i = 0; i < d->nfiles; i++)
        free(d->files[i]);
    free(d->files);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->can_put);
    pthread_cond_destroy(&d->can_take);
    free(d);
}
