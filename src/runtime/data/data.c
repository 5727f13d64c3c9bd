/* runtime/data/data.c - IDX files, Fashion-MNIST, epoch order and sharding.
 * The prefetcher lives in prefetch.c. */
#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAGIC_IMAGES 0x00000803u
#define MNIST_CLASSES    10

static uint32_t get_u32be(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads exactly n bytes; returns the count actually read (short on EOF) or -1
 * on a zlib error (corrupt gzip stream), with the message in *zmsg. */
static long long gz_read_full(gzFile gz, uint8_t *buf, size_t n, const char **zmsg)
{
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(gz, buf + got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            *zmsg = gzerror(gz, &zerr);
            return -1;
        }
        if (r == 0) {
            /* EOF or a truncated gzip stream (zlib reports it as Z_BUF_ERROR). */
            int zerr;
            const char *m = gzerror(gz, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END) {
                *zmsg = m;
                return -1;
            }
            break;
        }
        got += (size_t)r;
    }
    return (long long)got;
}

kiln_err kiln_idx_read(const char *path, size_t max_bytes, kiln_idx *out, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    gzFile gz = NULL;
    uint8_t hdr[4 + 4 * KILN_IDX_MAX_DIMS];
    const char *zmsg = "";
    memset(out, 0, sizeof *out);
    if (max_bytes == 0) max_bytes = KILN_IDX_MAX_BYTES;

    /* gzopen reads gzip files and passes other files through unchanged, so one
     * path handles both ".gz" and raw IDX. */
    errno = 0;
    gz = gzopen(path, "rb");
    if (gz) gzbuffer(gz, 1u << 18); /* fewer, larger reads: the 8 KiB default is slow */
    if (!gz) {
        rc = kiln_errmsg_set(err, errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO,
                             "%s: cannot open: %s", path, errno ? strerror(errno) : "zlib error");
        goto out;
    }
    long long r = gz_read_full(gz, hdr, 4, &zmsg);
    if (r < 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: corrupt gzip data: %s", path, zmsg);
        goto out;
    }
    if (r < 4) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: truncated: %lld bytes, too short for an IDX header", path, r);
        goto out;
    }
    /* Magic: two zero bytes, the element type, the number of dimensions. */
    if (hdr[0] != 0 || hdr[1] != 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: not an IDX file (magic 0x%08x; expected 0x0000TTDD)", path,
                             get_u32be(hdr));
        goto out;
    }
    out->type = hdr[2];
    out->ndim = hdr[3];
    if (out->type != 0x08) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: unsupported IDX element type 0x%02x (only 0x08, unsigned byte)",
                             path, out->type);
        goto out;
    }
    if (out->ndim < 1 || out->ndim > KILN_IDX_MAX_DIMS) {
        rc =
            kiln_errmsg_set(err, KILN_EINVAL, "%s: IDX file declares %u dimensions (1..%d allowed)",
                            path, out->ndim, KILN_IDX_MAX_DIMS);
        goto out;
    }
    size_t dbytes = 4u * out->ndim;
    r = gz_read_full(gz, hdr + 4, dbytes, &zmsg);
    if (r < 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: corrupt gzip data: %s", path, zmsg);
        goto out;
    }
    if ((size_t)r < dbytes) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: truncated inside the header (%u dimensions)",
                             path, out->ndim);
        goto out;
    }
    size_t total = 1;
    for (unsigned i = 0; i < out->ndim; i++) {
        out->dims[i] = get_u32be(hdr + 4 + 4 * i);
        if (out->dims[i] == 0) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: dimension %u is 0", path, i);
            goto out;
        }
        /* overflow-safe product against the cap */
        if (out->dims[i] > max_bytes / total) {
            rc = kiln_errmsg_set(err, KILN_ELIMIT,
                                 "%s: declared size exceeds the limit of %zu bytes", path,
                                 max_bytes);
            goto out;
        }
        total *= out->dims[i];
    }
    out->nbytes = total;
    out->data = malloc(total);
    if (!out->data) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "%s: out of memory for %zu bytes", path, total);
        goto out;
    }
    r = gz_read_full(gz, out->data, total, &zmsg);
    if (r < 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: corrupt gzip data: %s", path, zmsg);
        goto out;
    }
    if ((size_t)r < total) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: truncated: header declares %zu data bytes, file has %lld", path,
                             total, r);
        goto out;
    }
    /* One more byte must hit the end; this also makes zlib check the gzip
     * trailer (CRC-32 and length of the uncompressed data). */
    uint8_t extra;
    r = gz_read_full(gz, &extra, 1, &zmsg);
    if (r < 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: corrupt gzip data: %s", path, zmsg);
        goto out;
    }
    if (r > 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: trailing bytes after the %zu data bytes the header declares",
                             path, total);
        goto out;
    }
out:
    if (gz) gzclose(gz);
    if (rc != KILN_OK) kiln_idx_free(out);
    return rc;
}

void kiln_idx_free(kiln_idx *idx)
{
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

kiln_err kiln_dataset_load_idx(const char *images_path, const char *labels_path, kiln_dataset *out,
                               kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    kiln_idx img = {0}, lab = {0};
    memset(out, 0, sizeof *out);

    if ((rc = kiln_idx_read(images_path, 0, &img, err)) != KILN_OK) goto out;
    if ((rc = kiln_idx_read(labels_path, 0, &lab, err)) != KILN_OK) goto out;
    if (img.ndim != 3) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: images file has magic 0x%08x; expected 0x%08x (3 dimensions)",
                             images_path, 0x0800u | img.ndim, IDX_MAGIC_IMAGES);
        goto out;
    }
    if (lab.ndim != 1) {
        rc = kiln_errmsg_set(err, KILN_EINVAL,
                             "%s: labels file has magic 0x%08x; expected 0x%08x (1 dimension)",
                             labels_path, 0x0800u | lab.ndim, IDX_MAGIC_LABELS);
        goto out;
    }
    if (img.dims[0] != lab.dims[0]) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s has %u images but %s has %u labels", images_path,
                             img.dims[0], labels_path, lab.dims[0]);
        goto out;
    }
    for (size_t i = 0; i < lab.nbytes; i++) {
        if (lab.data[i] >= MNIST_CLASSES) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: label %zu is %u; expected 0..%d",
                                 labels_path, i, lab.data[i], MNIST_CLASSES - 1);
            goto out;
        }
    }
    out->n = img.dims[0];
    out->rows = img.dims[1];
    out->cols = img.dims[2];
    out->dim = (size_t)img.dims[1] * img.dims[2];
    out->num_classes = MNIST_CLASSES;
    out->images = malloc(img.nbytes * sizeof(float));
    if (!out->images) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "%s: out of memory", images_path);
        goto out;
    }
    /* [0,1] by /255: the scaling TensorFlow's MNIST tutorial uses. */
    for (size_t i = 0; i < img.nbytes; i++)
        out->images[i] = (float)img.data[i] * (1.0f / 255.0f);
    out->labels = lab.data; /* take ownership */
    lab.data = NULL;
out:
    kiln_idx_free(&img);
    kiln_idx_free(&lab);
    if (rc != KILN_OK) kiln_dataset_free(out);
    return rc;
}

/* Prefers "<dir>/<base>.gz", falls back to "<dir>/<base>". */
static void pick_file(const char *dir, const char *base, char *out, size_t outsz)
{
    struct stat st;
    snprintf(out, outsz, "%s/%s.gz", dir, base);
    if (stat(out, &st) == 0) return;
    snprintf(out, outsz, "%s/%s", dir, base);
    if (stat(out, &st) == 0) return;
    snprintf(out, outsz, "%s/%s.gz", dir, base); /* neither: report the usual name */
}

kiln_err kiln_fashion_mnist_load(const char *dir, kiln_split split, kiln_dataset *out,
                                 kiln_errmsg *err)
{
    char ip[PATH_MAX], lp[PATH_MAX];
    const char *prefix = split == KILN_SPLIT_TEST ? "t10k" : "train";
    char ib[64], lb[64];
    if (!dir || !*dir) dir = KILN_FASHION_MNIST_DIR;
    snprintf(ib, sizeof ib, "%s-images-idx3-ubyte", prefix);
    snprintf(lb, sizeof lb, "%s-labels-idx1-ubyte", prefix);
    pick_file(dir, ib, ip, sizeof ip);
    pick_file(dir, lb, lp, sizeof lp);
    kiln_err rc = kiln_dataset_load_idx(ip, lp, out, err);
    if (rc == KILN_OK && (out->rows != 28 || out->cols != 28)) {
        /* the built-in models are sized for 28x28; anything else is the wrong file */
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: images are %ux%u; Fashion-MNIST has 28x28", ip,
                             out->rows, out->cols);
        kiln_dataset_free(out);
    }
    return rc;
}

kiln_err kiln_dataset_slice(const kiln_dataset *src, size_t start, size_t count, kiln_dataset *out,
                            kiln_errmsg *err)
{
    memset(out, 0, sizeof *out);
    if (start > src->n) start = src->n;
    if (count > src->n - start) count = src->n - start;
    *out = *src;
    out->n = count;
    out->images = malloc((count ? count : 1) * src->dim * sizeof(float));
    out->labels = malloc(count ? count : 1);
    if (!out->images || !out->labels) {
        kiln_dataset_free(out);
        return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory slicing a dataset");
    }
    if (count) {
        memcpy(out->images, src->images + start * src->dim, count * src->dim * sizeof(float));
        memcpy(out->labels, src->labels + start, count);
    }
    return KILN_OK;
}

void kiln_dataset_free(kiln_dataset *ds)
{
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* ---- order ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Unbiased integer in [0, bound) (Lemire's multiply-and-reject). */
static uint64_t uniform_below(uint64_t *st, uint64_t bound)
{
    uint64_t x = splitmix64(st);
    __uint128_t m = (__uint128_t)x * bound;
    uint64_t lo = (uint64_t)m;
    if (lo < bound) {
        uint64_t t = (0 - bound) % bound;
        while (lo < t) {
            x = splitmix64(st);
            m = (__uint128_t)x * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

void kiln_epoch_order(uint64_t seed, uint64_t epoch, size_t n, uint32_t *order)
{
    /* The generator state depends on (seed, epoch) only: mixing both through
     * SplitMix64 keeps nearby seeds and epochs from giving related streams. */
    uint64_t st = seed;
    uint64_t k = splitmix64(&st) ^ (epoch * 0xD1B54A32D192ED03ull);
    st = k;
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)uniform_below(&st, i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

uint64_t kiln_steps_per_epoch(size_t n, size_t batch, int drop_last)
{
    if (batch == 0) return 0;
    return drop_last ? n / batch : (n + batch - 1) / batch;
}

void kiln_shard_range(size_t n, size_t batch, uint64_t step, uint32_t rank, uint32_t world,
                      size_t *begin, size_t *count)
{
    if (world == 0) world = 1;
    size_t gb = (size_t)step * batch;
    size_t m = 0;
    if (gb < n) m = n - gb < batch ? n - gb : batch;
    size_t lo = (size_t)(((__uint128_t)rank * m) / world);
    size_t hi = (size_t)(((__uint128_t)(rank + 1) * m) / world);
    if (rank >= world) lo = hi = m; /* no such replica: empty */
    *begin = gb + lo;
    *count = hi - lo;
}

void kiln_data_state_encode(const kiln_data_state *s, uint8_t out[KILN_DATA_STATE_SIZE])
{
    memcpy(out, "KDS1", 4);
    kiln_put_u32le(out + 4, 0);
    kiln_put_u64le(out + 8, s->seed);
    kiln_put_u64le(out + 16, s->epoch);
    kiln_put_u64le(out + 24, s->step);
}

kiln_err kiln_data_state_decode(const uint8_t *buf, size_t len, kiln_data_state *s,
                                kiln_errmsg *err)
{
    if (len != KILN_DATA_STATE_SIZE)
        return kiln_errmsg_set(err, KILN_EINVAL, "data state: %zu bytes, expected %d", len,
                               KILN_DATA_STATE_SIZE);
    if (memcmp(buf, "KDS1", 4) != 0)
        return kiln_errmsg_set(err, KILN_EINVAL, "data state: unknown tag (expected KDS1)");
    s->seed = kiln_get_u64le(buf + 8);
    s->epoch = kiln_get_u64le(buf + 16);
    s->step = kiln_get_u64le(buf + 24);
    return KILN_OK;
}
