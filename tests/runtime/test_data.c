/* tests/runtime/test_data.c - IDX reader (good, gzip, and every kind of bad
 * file), Fashion-MNIST loader, epoch order, sharding, data state, prefetcher.
 * Fixtures are written into a fresh temp dir at run time. */
#include "data/data.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes bytes to a file, gzip-compressed if gz. Returns the path (static buffer per call site
 * is not needed: the caller passes out). */
static void write_file(const char *name, const uint8_t *buf, size_t n, int gz, char *out,
                       size_t cap)
{
    path_of(out, cap, name);
    if (gz) {
        gzFile g = gzopen(out, "wb");
        gzwrite(g, buf, (unsigned)n);
        gzclose(g);
    } else {
        FILE *f = fopen(out, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
    }
}

/* Builds an IDX image: magic 0x0000 08 ndim, dims, then payload (pattern i*7 mod 256,
 * or labels i mod 10 when label_mod). extra: bytes to add (>0) or cut (<0). */
static uint8_t *make_idx(int ndim, const uint32_t *dims, int extra, size_t *len)
{
    size_t payload = 1;
    for (int i = 0; i < ndim; i++)
        payload *= dims[i];
    size_t hdr = 4 + 4 * (size_t)ndim;
    size_t n = hdr + payload;
    uint8_t *b = calloc(n + 64, 1);
    put_be32(b, 0x00000800u | (uint32_t)ndim);
    for (int i = 0; i < ndim; i++)
        put_be32(b + 4 + 4 * i, dims[i]);
    for (size_t i = 0; i < payload; i++)
        b[hdr + i] = ndim == 1 ? (uint8_t)(i % 10) : (uint8_t)(i * 7);
    *len = (size_t)((long)n + extra);
    return b;
}

static int contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* Expects kiln_idx_read to fail with code and a message naming the file and containing what. */
static void expect_idx_error(const char *path, kiln_err code, const char *what)
{
    kiln_idx idx;
    kiln_errmsg e = {{0}};
    kiln_err rc = kiln_idx_read(path, 0, &idx, &e);
    CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", path, rc, code, e.msg);
    CHECK_MSG(contains(e.msg, path), "message does not name the file: %s", e.msg);
    CHECK_MSG(contains(e.msg, what), "message lacks '%s': %s", what, e.msg);
    CHECK(idx.data == NULL);
}

static void test_idx_good(void)
{
    uint32_t idims[3] = {5, 3, 4}, ldims[1] = {5};
    size_t il, ll;
    uint8_t *img = make_idx(3, idims, 0, &il), *lab = make_idx(1, ldims, 0, &ll);
    char ip[512], lp[512], igz[512], lgz[512];
    write_file("img.idx", img, il, 0, ip, sizeof ip);
    write_file("lab.idx", lab, ll, 0, lp, sizeof lp);
    write_file("img.idx.gz", img, il, 1, igz, sizeof igz);
    write_file("lab.idx.gz", lab, ll, 1, lgz, sizeof lgz);

    kiln_idx idx;
    kiln_errmsg e = {{0}};
    CHECK(kiln_idx_read(igz, 0, &idx, &e) == KILN_OK);
    CHECK(idx.ndim == 3 && idx.dims[0] == 5 && idx.dims[1] == 3 && idx.dims[2] == 4);
    CHECK(idx.nbytes == 60 && memcmp(idx.data, img + 16, 60) == 0);
    kiln_idx_free(&idx);

    for (int gz = 0; gz < 2; gz++) {
        kiln_dataset ds;
        kiln_err rc = kiln_dataset_load_idx(gz ? igz : ip, gz ? lgz : lp, &ds, &e);
        CHECK_MSG(rc == KILN_OK, "%s", e.msg);
        if (rc != KILN_OK) continue;
        CHECK(ds.n == 5 && ds.rows == 3 && ds.cols == 4 && ds.dim == 12 && ds.num_classes == 10);
        /* pixel (y,x) of example i = byte at i*12 + y*4 + x, scaled by 1/255 */
        int ok = 1;
        for (size_t i = 0; i < 60; i++)
            ok &= ds.images[i] == (float)(uint8_t)(i * 7) * (1.0f / 255.0f);
        CHECK(ok);
        CHECK(ds.labels[3] == 3);
        float mn = 1, mx = 0;
        for (size_t i = 0; i < 60; i++) {
            mn = ds.images[i] < mn ? ds.images[i] : mn;
            mx = ds.images[i] > mx ? ds.images[i] : mx;
        }
        CHECK(mn >= 0.0f && mx <= 1.0f);

        kiln_dataset sl;
        CHECK(kiln_dataset_slice(&ds, 3, 10, &sl, &e) == KILN_OK);
        CHECK(sl.n == 2 && sl.labels[0] == 3 && sl.images[0] == ds.images[36]);
        kiln_dataset_free(&sl);
        kiln_dataset_free(&ds);
        CHECK(ds.images == NULL && ds.n == 0);
    }
    free(img);
    free(lab);
}

static void test_idx_bad(void)
{
    char p[512], p2[512];
    size_t n;
    uint32_t idims[3] = {5, 3, 4}, ldims[1] = {5}, ldims6[1] = {6};
    uint8_t *img = make_idx(3, idims, 0, &n);
    size_t good = n;

    /* missing file */
    path_of(p, sizeof p, "nope.idx");
    expect_idx_error(p, KILN_ENOTFOUND, "cannot open");

    /* empty file */
    write_file("empty.idx", img, 0, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "truncated");

    /* bad magic (not starting with two zero bytes) */
    img[0] = 0x1f;
    write_file("magic.idx", img, good, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "not an IDX file");
    img[0] = 0;

    /* unsupported element type (0x0D = float) */
    img[2] = 0x0d;
    write_file("type.idx", img, good, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "element type");
    img[2] = 0x08;

    /* too many dimensions */
    img[3] = 9;
    write_file("ndim.idx", img, good, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "dimensions");
    img[3] = 3;

    /* a zero dimension */
    put_be32(img + 8, 0);
    write_file("zero.idx", img, good, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "is 0");
    put_be32(img + 8, 3);

    /* header claiming ~4e12 bytes: refused by the cap before any allocation */
    put_be32(img + 4, 4000000000u);
    put_be32(img + 8, 1000);
    write_file("huge.idx", img, good, 0, p, sizeof p);
    expect_idx_error(p, KILN_ELIMIT, "limit");
    put_be32(img + 4, 5);
    put_be32(img + 8, 3);

    /* truncated payload, raw and gzip; truncated header */
    write_file("short.idx", img, good - 1, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "truncated");
    write_file("short.idx.gz", img, good - 7, 1, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "truncated");
    write_file("shorthdr.idx", img, 9, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "truncated");

    /* trailing bytes */
    write_file("long.idx", img, good + 3, 0, p, sizeof p);
    expect_idx_error(p, KILN_EINVAL, "trailing");

    /* a gzip stream cut in the middle, and one with a flipped byte */
    {
        size_t big_n;
        uint32_t bd[3] = {50, 28, 28};
        uint8_t *big = make_idx(3, bd, 0, &big_n);
        char gz[512];
        write_file("big.idx.gz", big, big_n, 1, gz, sizeof gz);
        uint8_t *comp;
        size_t clen;
        kiln_errmsg e;
        CHECK(kiln_read_file(gz, 1 << 24, &comp, &clen, &e) == KILN_OK);
        write_file("cut.idx.gz", comp, clen / 2, 0, p, sizeof p);
        kiln_idx idx;
        CHECK(kiln_idx_read(p, 0, &idx, &e) == KILN_EINVAL);
        CHECK_MSG(contains(e.msg, p) && (contains(e.msg, "gzip") || contains(e.msg, "truncated")),
                  "%s", e.msg);
        comp[clen - 6] ^= 0x55; /* inside the gzip trailer CRC: only zlib's check catches it */
        write_file("flip.idx.gz", comp, clen, 0, p, sizeof p);
        expect_idx_error(p, KILN_EINVAL, "gzip");
        free(comp);
        free(big);
    }

    /* dataset-level: count mismatch, wrong kinds, label out of range */
    size_t ll;
    uint8_t *lab6 = make_idx(1, ldims6, 0, &ll);
    write_file("img5.idx", img, good, 0, p, sizeof p);
    write_file("lab6.idx", lab6, ll, 0, p2, sizeof p2);
    kiln_dataset ds;
    kiln_errmsg e = {{0}};
    CHECK(kiln_dataset_load_idx(p, p2, &ds, &e) == KILN_EINVAL);
    CHECK_MSG(contains(e.msg, "5 images") && contains(e.msg, "6 labels") && contains(e.msg, p2),
              "%s", e.msg);
    CHECK(ds.images == NULL && ds.labels == NULL);

    CHECK(kiln_dataset_load_idx(p2, p, &ds, &e) == KILN_EINVAL); /* swapped */
    CHECK_MSG(contains(e.msg, "0x00000803") && contains(e.msg, p2), "%s", e.msg);

    uint8_t *lab5 = make_idx(1, ldims, 0, &ll);
    lab5[8 + 2] = 10;
    write_file("lab5bad.idx", lab5, ll, 0, p2, sizeof p2);
    CHECK(kiln_dataset_load_idx(p, p2, &ds, &e) == KILN_EINVAL);
    CHECK_MSG(contains(e.msg, "label 2 is 10"), "%s", e.msg);

    /* Fashion-MNIST loader on a dir with wrong-sized images */
    char d[512];
    path_of(d, sizeof d, "fm");
    mkdir(d, 0755);
    lab5[8 + 2] = 2;
    write_file("fm/t10k-images-idx3-ubyte", img, good, 0, p, sizeof p);
    write_file("fm/t10k-labels-idx1-ubyte.gz", lab5, ll, 1, p2, sizeof p2);
    CHECK(kiln_fashion_mnist_load(d, KILN_SPLIT_TEST, &ds, &e) == KILN_EINVAL);
    CHECK_MSG(contains(e.msg, "28x28"), "%s", e.msg);
    CHECK(kiln_fashion_mnist_load(d, KILN_SPLIT_TRAIN, &ds, &e) == KILN_ENOTFOUND);
    CHECK_MSG(contains(e.msg, "train-images-idx3-ubyte.gz"), "%s", e.msg);

    free(lab5);
    free(lab6);
    free(img);
}

/* Random edits to the header and random lengths, raw and gzip: every result
 * is OK or a clean error naming the file, never a crash (ASan/UBSan). */
static void test_idx_mutations(void)
{
    uint32_t dims[3] = {4, 5, 6};
    size_t n;
    uint8_t *orig = make_idx(3, dims, 0, &n), *b = malloc(n + 64);
    char p[512];
    srand(11);
    int odd = 0, unnamed = 0;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(b, orig, n);
        for (int k = 0; k < 1 + trial % 3; k++)
            b[(size_t)rand() % 16] = (uint8_t)(rand() % 4 ? rand() : 0);
        size_t len = rand() % 3 ? n : (size_t)rand() % (n + 40);
        char name[64];
        snprintf(name, sizeof name, "mut%d.idx%s", trial, trial % 2 ? ".gz" : "");
        write_file(name, b, len, trial % 2, p, sizeof p);
        kiln_idx idx;
        kiln_errmsg e = {{0}};
        kiln_err rc = kiln_idx_read(p, 1 << 20, &idx, &e);
        if (rc == KILN_OK) {
            odd += idx.nbytes > (1 << 20);
            kiln_idx_free(&idx);
        } else {
            odd += rc != KILN_EINVAL && rc != KILN_ELIMIT;
            unnamed += strstr(e.msg, p) == NULL;
        }
        unlink(p);
    }
    CHECK(odd == 0 && unnamed == 0);
    free(b);
    free(orig);
}

static void test_fashion_mnist(void)
{
    struct stat st;
    if (stat(KILN_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", &st) != 0) {
        printf("SKIP: %s not installed (Debian package dataset-fashion-mnist)\n",
               KILN_FASHION_MNIST_DIR);
        return;
    }
    kiln_dataset ds;
    kiln_errmsg e = {{0}};
    kiln_err rc = kiln_fashion_mnist_load(NULL, KILN_SPLIT_TEST, &ds, &e);
    CHECK_MSG(rc == KILN_OK, "%s", e.msg);
    if (rc != KILN_OK) return;
    CHECK(ds.n == 10000 && ds.rows == 28 && ds.cols == 28 && ds.dim == 784);
    size_t counts[10] = {0};
    for (size_t i = 0; i < ds.n; i++)
        counts[ds.labels[i] < 10 ? ds.labels[i] : 0]++;
    int balanced = 1;
    for (int c = 0; c < 10; c++)
        balanced &= counts[c] == 1000; /* the test split has 1000 of each class */
    CHECK(balanced);
    CHECK(ds.labels[0] == 9); /* first test image is an ankle boot */
    kiln_dataset_free(&ds);
}

static uint64_t order_hash(const uint32_t *o, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ o[i]) * 1099511628211ull;
    return h;
}

static void test_order_and_shards(void)
{
    enum { N = 1000 };
    uint32_t *a = malloc(N * 4), *b = malloc(N * 4), *seen = calloc(N, 4);
    kiln_epoch_order(42, 3, N, a);
    for (size_t i = 0; i < N; i++)
        seen[a[i]]++;
    int perm = 1;
    for (size_t i = 0; i < N; i++)
        perm &= seen[i] == 1;
    CHECK(perm);
    kiln_epoch_order(42, 3, N, b);
    CHECK(memcmp(a, b, N * 4) == 0); /* pure function of (seed, epoch) */
    kiln_epoch_order(42, 4, N, b);
    CHECK(memcmp(a, b, N * 4) != 0);
    kiln_epoch_order(43, 3, N, b);
    CHECK(memcmp(a, b, N * 4) != 0);
    size_t fixed = 0;
    for (size_t i = 0; i < N; i++)
        fixed += a[i] == i;
    CHECK(fixed < 20); /* actually shuffled (expected ~1 fixed point) */
    /* Pinned: the order must never change between versions, or a run resumed
     * by a newer binary would see different batches. */
    kiln_epoch_order(1, 0, 10, b);
    static const uint32_t pinned[10] = {6, 4, 7, 2, 9, 1, 5, 0, 8, 3};
    CHECK(memcmp(b, pinned, sizeof pinned) == 0);
    kiln_epoch_order(42, 3, N, b);
    CHECK_MSG(order_hash(b, N) == order_hash(a, N), "order hash %016llx",
              (unsigned long long)order_hash(b, N));

    CHECK(kiln_steps_per_epoch(1000, 128, 0) == 8);
    CHECK(kiln_steps_per_epoch(1000, 128, 1) == 7);
    CHECK(kiln_steps_per_epoch(1024, 128, 0) == 8);
    CHECK(kiln_steps_per_epoch(10, 0, 0) == 0);

    /* shards: disjoint, union = global batch, for several replica counts */
    size_t ns[] = {1000, 1001, 7};
    for (int t = 0; t < 3; t++) {
        size_t n = ns[t], B = 128;
        uint64_t steps = kiln_steps_per_epoch(n, B, 0);
        for (uint32_t R = 1; R <= 5; R++) {
            int ok = 1;
            for (uint64_t s = 0; s < steps; s++) {
                size_t next = s * B, total = 0;
                for (uint32_t r = 0; r < R; r++) {
                    size_t beg, cnt;
                    kiln_shard_range(n, B, s, r, R, &beg, &cnt);
                    ok &= beg == next; /* contiguous, in rank order, no overlap */
                    next = beg + cnt;
                    total += cnt;
                    ok &= cnt + 1 >= (n - s * B < B ? n - s * B : B) / R; /* balanced */
                }
                ok &= total == (n - s * B < B ? n - s * B : B);
            }
            CHECK_MSG(ok, "shards n=%zu R=%u", n, R);
        }
    }

    kiln_data_state st = {7, 3, 99}, st2;
    uint8_t buf[KILN_DATA_STATE_SIZE];
    kiln_data_state_encode(&st, buf);
    kiln_errmsg e;
    CHECK(kiln_data_state_decode(buf, sizeof buf, &st2, &e) == KILN_OK);
    CHECK(st2.seed == 7 && st2.epoch == 3 && st2.step == 99);
    CHECK(kiln_data_state_decode(buf, sizeof buf - 1, &st2, &e) == KILN_EINVAL);
    buf[0] = 'X';
    CHECK(kiln_data_state_decode(buf, sizeof buf, &st2, &e) == KILN_EINVAL);
    free(a);
    free(b);
    free(seen);
}

/* A synthetic dataset whose example i has pixels (i, i+0.5) and label i % 10,
 * so a batch shows exactly which examples it holds. */
static void make_synth(kiln_dataset *ds, size_t n)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->rows = 1;
    ds->cols = 2;
    ds->dim = 2;
    ds->num_classes = 10;
    ds->images = malloc(n * 2 * sizeof(float));
    ds->labels = malloc(n);
    for (size_t i = 0; i < n; i++) {
        ds->images[2 * i] = (float)i;
        ds->images[2 * i + 1] = (float)i + 0.5f;
        ds->labels[i] = (uint8_t)(i % 10);
    }
}

/* Runs a prefetcher to its end and records each example index it delivers
 * (with the batch's epoch/step) into out; returns the number recorded. */
typedef struct rec {
    uint32_t ex;
    uint32_t epoch, step;
} rec;

static size_t drain(const kiln_dataset *ds, const kiln_prefetch_opts *o, rec *out, size_t cap,
                    int slow, size_t *nbatches)
{
    kiln_prefetch *p;
    kiln_errmsg e;
    size_t k = 0;
    *nbatches = 0;
    if (kiln_prefetch_start(ds, o, &p, &e) != KILN_OK) {
        fprintf(stderr, "prefetch_start: %s\n", e.msg);
        return 0;
    }
    kiln_batch b;
    while (kiln_prefetch_next(p, &b)) {
        (*nbatches)++;
        for (size_t i = 0; i < b.size && k < cap; i++) {
            uint32_t ex = (uint32_t)b.images[2 * i];
            if (b.images[2 * i + 1] != (float)ex + 0.5f || b.labels[i] != ex % 10)
                ex = UINT32_MAX; /* torn batch */
            out[k++] = (rec){ex, (uint32_t)b.epoch, (uint32_t)b.step};
        }
        if (slow) usleep(200);
        kiln_prefetch_release(p, &b);
    }
    kiln_prefetch_stop(p);
    return k;
}

static void test_prefetch(void)
{
    enum { N = 1003, B = 64, EPOCHS = 3 };
    kiln_dataset ds;
    make_synth(&ds, N);
    uint32_t *order = malloc(N * 4);
    rec *r1 = malloc(sizeof(rec) * N * EPOCHS), *r2 = malloc(sizeof(rec) * N * EPOCHS);
    size_t nb;

    kiln_prefetch_opts o = {
        .batch_size = B, .seed = 5, .shuffle = 1, .end_epoch = EPOCHS, .world = 1, .depth = 3};
    size_t k = drain(&ds, &o, r1, N * EPOCHS, 0, &nb);
    CHECK(k == (size_t)N * EPOCHS);
    CHECK(nb == EPOCHS * kiln_steps_per_epoch(N, B, 0));
    /* content = the epoch orders, in sequence */
    int ok = 1;
    for (int ep = 0; ep < EPOCHS; ep++) {
        kiln_epoch_order(5, (uint64_t)ep, N, order);
        for (size_t i = 0; i < N; i++) {
            rec x = r1[(size_t)ep * N + i];
            ok &= x.ex == order[i] && x.epoch == (uint32_t)ep && x.step == i / B;
        }
    }
    CHECK(ok);

    /* a slow consumer and a ring of 2 see the same thing */
    o.depth = 2;
    k = drain(&ds, &o, r2, N * EPOCHS, 1, &nb);
    CHECK(k == (size_t)N * EPOCHS && memcmp(r1, r2, k * sizeof(rec)) == 0);

    /* resume at (epoch 1, step 5) = the tail of the full run */
    o.epoch = 1;
    o.step = 5;
    k = drain(&ds, &o, r2, N * EPOCHS, 0, &nb);
    size_t skip = N + 5 * B;
    CHECK(k == (size_t)N * EPOCHS - skip && memcmp(r1 + skip, r2, k * sizeof(rec)) == 0);

    /* a resume point at the end of an epoch rolls over to the next */
    o.epoch = 0;
    o.step = kiln_steps_per_epoch(N, B, 0);
    k = drain(&ds, &o, r2, N * EPOCHS, 0, &nb);
    CHECK(k == (size_t)N * (EPOCHS - 1) && memcmp(r1 + N, r2, k * sizeof(rec)) == 0);

    /* three replicas: disjoint, together the global batches in order */
    o.epoch = 0;
    o.step = 0;
    o.world = 3;
    rec *parts[3];
    size_t pk[3];
    for (uint32_t rnk = 0; rnk < 3; rnk++) {
        o.rank = rnk;
        parts[rnk] = malloc(sizeof(rec) * N * EPOCHS);
        pk[rnk] = drain(&ds, &o, parts[rnk], N * EPOCHS, rnk == 1, &nb);
        CHECK(nb == EPOCHS * kiln_steps_per_epoch(N, B, 0)); /* same step count everywhere */
    }
    CHECK(pk[0] + pk[1] + pk[2] == (size_t)N * EPOCHS);
    size_t pos[3] = {0, 0, 0}, g = 0;
    ok = 1;
    /* merge: for each global step, rank 0's part, then 1's, then 2's */
    while (g < (size_t)N * EPOCHS && ok) {
        uint32_t ep = r1[g].epoch, st = r1[g].step;
        for (int rnk = 0; rnk < 3; rnk++)
            while (pos[rnk] < pk[rnk] && parts[rnk][pos[rnk]].epoch == ep &&
                   parts[rnk][pos[rnk]].step == st) {
                ok &= g < (size_t)N * EPOCHS && parts[rnk][pos[rnk]].ex == r1[g].ex;
                pos[rnk]++;
                g++;
            }
        if (g < (size_t)N * EPOCHS && r1[g].epoch == ep && r1[g].step == st)
            ok = 0; /* something of this step was missing */
    }
    CHECK(ok && g == (size_t)N * EPOCHS);
    for (int rnk = 0; rnk < 3; rnk++)
        free(parts[rnk]);

    /* a replica can get an empty batch at an epoch's end, and still gets the step */
    {
        kiln_dataset tiny;
        make_synth(&tiny, 5);
        kiln_prefetch_opts to = {.batch_size = 4, .shuffle = 0, .end_epoch = 1, .world = 3};
        kiln_prefetch *tp;
        kiln_errmsg te;
        kiln_batch tb;
        CHECK(kiln_prefetch_start(&tiny, &to, &tp, &te) == KILN_OK);
        CHECK(kiln_prefetch_next(tp, &tb) == 1 && tb.size == 1 && tb.global_size == 4 &&
              tb.images[0] == 0.0f && !tb.last_in_epoch);
        kiln_prefetch_release(tp, &tb);
        CHECK(kiln_prefetch_next(tp, &tb) == 1 && tb.size == 0 && tb.global_size == 1 &&
              tb.step == 1 && tb.last_in_epoch);
        kiln_prefetch_release(tp, &tb);
        CHECK(kiln_prefetch_next(tp, &tb) == 0);
        CHECK(kiln_prefetch_next(tp, &tb) == 0); /* stays ended */
        kiln_prefetch_stop(tp);
        kiln_dataset_free(&tiny);
    }

    /* evaluation order (no shuffle) and drop_last */
    kiln_prefetch_opts ev = {.batch_size = 100, .shuffle = 0, .drop_last = 1, .end_epoch = 1};
    k = drain(&ds, &ev, r2, N, 0, &nb);
    ok = k == 1000 && nb == 10;
    for (size_t i = 0; i < k; i++)
        ok &= r2[i].ex == i;
    CHECK(ok);

    /* stopping early, with batches held, never hangs or leaks; also no end epoch */
    kiln_prefetch_opts forever = {.batch_size = 10, .seed = 1, .shuffle = 1, .depth = 4};
    kiln_prefetch *p;
    kiln_errmsg e;
    CHECK(kiln_prefetch_start(&ds, &forever, &p, &e) == KILN_OK);
    kiln_batch hb[3];
    for (int i = 0; i < 3; i++)
        CHECK(kiln_prefetch_next(p, &hb[i]) == 1 && hb[i].size == 10);
    CHECK(hb[2].step == 2);
    usleep(1000);
    kiln_prefetch_stop(p);
    kiln_prefetch_stop(NULL);

    /* bad options */
    kiln_prefetch_opts bad = {.batch_size = 0};
    CHECK(kiln_prefetch_start(&ds, &bad, &p, &e) == KILN_EINVAL);
    bad = (kiln_prefetch_opts){.batch_size = 10, .rank = 3, .world = 3};
    CHECK(kiln_prefetch_start(&ds, &bad, &p, &e) == KILN_EINVAL);
    bad = (kiln_prefetch_opts){.batch_size = 2000, .drop_last = 1};
    CHECK(kiln_prefetch_start(&ds, &bad, &p, &e) == KILN_EINVAL);

    free(order);
    free(r1);
    free(r2);
    kiln_dataset_free(&ds);
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_idx_good();
    test_idx_bad();
    test_idx_mutations();
    test_fashion_mnist();
    test_order_and_shards();
    test_prefetch();
    rm_rf(tmpdir);
    TEST_DONE();
}
