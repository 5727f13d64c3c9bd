/* test_tfevents.c - the TensorBoard event file reader (src/tune/tfevents.c):
 * simple_value and one-element tensors (float_val, packed, tensor_content
 * double), other tags and non-scalars skipped, a record cut short left for
 * the next read, a bad CRC or an oversized length ending the file; then a
 * trial's directory read incrementally, including a subdirectory and a file
 * older than the trial's run. Records are built here byte by byte; the
 * files of the real writers are test_tfevents_real's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "kiln/tune.h"
#include "test.h"
#include "test_tune_helpers.h"

typedef struct buf {
    uint8_t p[4096];
    size_t n;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void byte(buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void varint(buf *b, uint64_t v)
{
    while (v >= 0x80) {
        byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    byte(b, (uint8_t)v);
}

static void lenfield(buf *b, int num, const buf *inner)
{
    varint(b, (uint64_t)num << 3 | 2);
    varint(b, inner->n);
    put(b, inner->p, inner->n);
}

static void strfield(buf *b, int num, const char *s)
{
    varint(b, (uint64_t)num << 3 | 2);
    varint(b, strlen(s));
    put(b, s, strlen(s));
}

static void f32field(buf *b, int num, float v)
{
    varint(b, (uint64_t)num << 3 | 5);
    put(b, &v, 4); /* little-endian host */
}

/* Event{step, summary{value}} around one Summary.Value. */
static void event(buf *out, int64_t step, const buf *value)
{
    buf sum = {0}, ev = {0};
    lenfield(&sum, 1, value);
    double wall = 1.7e9;
    varint(&ev, 1 << 3 | 1);
    put(&ev, &wall, 8);
    varint(&ev, 2 << 3 | 0);
    varint(&ev, (uint64_t)step);
    lenfield(&ev, 5, &sum);
    *out = ev;
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static uint32_t masked(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void frame(buf *file, const buf *data)
{
    uint64_t n = data->n;
    uint32_t c1, c2;
    put(file, &n, 8);
    c1 = masked(crc32c(file->p + file->n - 8, 8));
    put(file, &c1, 4);
    put(file, data->p, data->n);
    c2 = masked(crc32c(data->p, data->n));
    put(file, &c2, 4);
}

static void simple(buf *file, const char *tag, int64_t step, float v)
{
    buf val = {0}, ev;
    strfield(&val, 1, tag);
    f32field(&val, 2, v);
    event(&ev, step, &val);
    frame(file, &ev);
}

/* Value{tag, tensor{dtype, shape{dims...}, ...}} with `body` after the shape. */
static void tensor(buf *file, const char *tag, int64_t step, int dtype, int ndims, const buf *body)
{
    buf val = {0}, t = {0}, shape = {0}, ev;
    for (int i = 0; i < ndims; i++) {
        buf dim = {0};
        varint(&dim, 1 << 3 | 0);
        varint(&dim, 1);
        lenfield(&shape, 1, &dim);
    }
    varint(&t, 1 << 3 | 0);
    varint(&t, (uint64_t)dtype);
    lenfield(&t, 2, &shape);
    put(&t, body->p, body->n);
    strfield(&val, 1, tag);
    lenfield(&val, 8, &t);
    event(&ev, step, &val);
    frame(file, &ev);
}

typedef struct got {
    int n;
    int64_t steps[16];
    double vals[16];
} got;

static void collect(void *ud, int64_t step, double v)
{
    got *g = ud;
    if (g->n < 16) g->steps[g->n] = step, g->vals[g->n] = v;
    g->n++;
}

static void test_scan(void)
{
    buf f = {0}, body;
    simple(&f, "loss", 1, 0.5f);
    simple(&f, "accuracy", 1, 0.9f); /* another tag */
    body = (buf){0};                 /* TF2: float_val, one element, shape [] */
    f32field(&body, 5, 0.25f);
    tensor(&f, "loss", 2, 1, 0, &body);
    body = (buf){0}; /* tensor_content, a double, shape [1] */
    double d = 0.125;
    varint(&body, 4 << 3 | 2);
    varint(&body, 8);
    put(&body, &d, 8);
    tensor(&f, "loss", 3, 2, 1, &body);
    body = (buf){0}; /* packed float_val of two: not a scalar */
    float two[2] = {1, 2};
    varint(&body, 5 << 3 | 2);
    varint(&body, 8);
    put(&body, two, 8);
    tensor(&f, "loss", 4, 1, 0, &body);
    body = (buf){0}; /* an int64 tensor: not a float scalar */
    varint(&body, 10 << 3 | 0);
    varint(&body, 7);
    tensor(&f, "loss", 5, 9, 0, &body);
    buf junk = {0}; /* a record whose data is not a protobuf: skipped */
    byte(&junk, 0xff);
    byte(&junk, 0xff);
    frame(&f, &junk);
    simple(&f, "loss", 6, 0.0625f);

    got g = {0};
    bool bad = true;
    size_t used = kiln_tfevents_scan(f.p, f.n, "loss", collect, &g, &bad);
    CHECK(used == f.n && !bad);
    CHECK_MSG(g.n == 4, "%d scalars", g.n);
    CHECK(g.steps[0] == 1 && g.vals[0] == 0.5);
    CHECK(g.steps[1] == 2 && g.vals[1] == 0.25);
    CHECK(g.steps[2] == 3 && g.vals[2] == 0.125);
    CHECK(g.steps[3] == 6 && g.vals[3] == 0.0625);

    /* cut short anywhere: whole records only, the rest left for later */
    for (size_t cut = 0; cut < f.n; cut++) {
        got h = {0};
        size_t u = kiln_tfevents_scan(f.p, cut, "loss", collect, &h, &bad);
        CHECK(u <= cut && !bad);
        got rest = {0};
        size_t u2 = kiln_tfevents_scan(f.p + u, f.n - u, "loss", collect, &rest, &bad);
        CHECK(u + u2 == f.n && h.n + rest.n == 4);
    }

    /* a flipped data byte: the CRC stops the reading there */
    buf c = f;
    c.p[30] ^= 1;
    got h = {0};
    used = kiln_tfevents_scan(c.p, c.n, "loss", collect, &h, &bad);
    CHECK(bad && used == 0 && h.n == 0);
    /* a length over the cap, with a good length CRC: corrupt, not allocated */
    buf big = {0};
    uint64_t n = (uint64_t)KILN_TFEVENTS_MAX_RECORD + 1;
    put(&big, &n, 8);
    uint32_t c1 = masked(crc32c(big.p, 8));
    put(&big, &c1, 4);
    used = kiln_tfevents_scan(big.p, big.n, "loss", collect, &h, &bad);
    CHECK(bad && used == 0);
}

static void write_file(const char *path, const buf *b, size_t from, size_t to, const char *mode)
{
    FILE *f = fopen(path, mode);
    CHECK(f != NULL);
    if (!f) return;
    fwrite(b->p + from, 1, to - from, f);
    fclose(f);
}

static void test_dir(void)
{
    kiln_job *j = hpjob_x("MINIMIZE", "loss", 2);
    kiln_study *s = kiln_study_new(&j->training_input.hyperparameters, 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t now = (int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000;
    char dir[] = "/tmp/test_tfevents_XXXXXX", path[512], sub[300], old[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(sub, sizeof sub, "%s/runs/eval", dir);
    snprintf(path, sizeof path, "%s/runs", dir);
    mkdir(path, 0755);
    mkdir(sub, 0755);
    /* a file from a run before this one (mtime an hour ago): not read */
    buf o = {0};
    simple(&o, "loss", 1, 9.0f);
    snprintf(old, sizeof old, "%s/events.out.tfevents.1.old", dir);
    write_file(old, &o, 0, o.n, "w");
    struct timeval times[2] = {{tv.tv_sec - 3600, 0}, {tv.tv_sec - 3600, 0}};
    utimes(old, times);

    kiln_trial *t = kiln_study_next(s, now);
    buf f = {0};
    simple(&f, "loss", 10, 0.5f);
    size_t first = f.n;
    simple(&f, "loss", 20, 0.25f);
    snprintf(path, sizeof path, "%s/events.out.tfevents.2.host", sub);
    write_file(path, &f, 0, first + 5, "w"); /* the second record half written */
    kiln_study_read_tfevents(s, t, dir);
    CHECK(t->has_metric && t->objective == 0.5 && t->step == 10 && t->n_curve == 1);
    write_file(path, &f, first + 5, f.n, "a");
    kiln_study_read_tfevents(s, t, dir);
    CHECK(t->objective == 0.25 && t->step == 20 && t->n_curve == 2);
    kiln_study_read_tfevents(s, t, dir); /* nothing new: nothing twice */
    CHECK(t->n_curve == 2);
    /* a corrupt record: that file is given up; a later good append is not read */
    buf bad = {0};
    simple(&bad, "loss", 30, 7.0f);
    bad.p[bad.n - 1] ^= 0x55;
    write_file(path, &bad, 0, bad.n, "a");
    kiln_study_read_tfevents(s, t, dir);
    buf more = {0};
    simple(&more, "loss", 40, 8.0f);
    write_file(path, &more, 0, more.n, "a");
    kiln_study_read_tfevents(s, t, dir);
    CHECK(t->n_curve == 2 && t->objective == 0.25);
    /* a trial run again forgets its files' offsets */
    kiln_study_end(s, t, KILN_TRIAL_QUEUED, 0);
    CHECK(kiln_study_next(s, now) == t && t->n_tb == 0);
    kiln_study_free(s);
    kiln_job_free(j);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_scan();
    test_dir();
    TEST_DONE();
}
