/* tests/runtime/test_summary.c - CRC-32C test vectors, TFRecord framing and
 * the Event protobuf bytes checked independently of the library's reader,
 * then a write/read-back round trip and corruption detection. */
#include "summary/summary.h"
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* Bit-at-a-time CRC-32C straight from the definition, to check the fast paths. */
static uint32_t crc_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static void test_crc32c(void)
{
    uint8_t buf[64];
    CHECK(kiln_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(kiln_crc32c("", 0) == 0);
    /* RFC 3720 (iSCSI) B.4 vectors */
    memset(buf, 0, 32);
    CHECK(kiln_crc32c(buf, 32) == 0x8A9136AAu);
    memset(buf, 0xff, 32);
    CHECK(kiln_crc32c(buf, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CHECK(kiln_crc32c(buf, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CHECK(kiln_crc32c(buf, 32) == 0x113FDB5Cu);
    /* every length and alignment against the reference, and incremental = one shot */
    uint8_t big[300];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 131 + 7);
    int ok = 1;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= sizeof big; n += 7)
            ok &= kiln_crc32c(big + off, n) == crc_ref(big + off, n);
    CHECK(ok);
    ok = 1;
    for (size_t split = 0; split <= sizeof big; split += 13)
        ok &= kiln_crc32c_update(kiln_crc32c(big, split), big + split, sizeof big - split) ==
              kiln_crc32c(big, sizeof big);
    CHECK(ok);
    /* mask definition, and it is a bijection's worth of different from the CRC */
    uint32_t c = 0xE3069283u;
    CHECK(kiln_crc32c_mask(c) == ((c >> 15 | c << 17) + 0xa282ead8u));
    CHECK(kiln_crc32c_mask(0) == 0xa282ead8u);
}

static char *find_event_file(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char *found = NULL;
    if (!d) return NULL;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            size_t n = strlen(dir) + strlen(de->d_name) + 2;
            free(found);
            found = malloc(n);
            snprintf(found, n, "%s/%s", dir, de->d_name);
        }
    closedir(d);
    return found;
}

typedef struct collected {
    int n;
    kiln_event_scalar ev[16];
} collected;

static int collect(void *ud, const kiln_event_scalar *ev)
{
    collected *c = ud;
    if (c->n < 16) c->ev[c->n] = *ev;
    c->n++;
    return 0;
}

/* Parses frames by hand (not with the library) and checks both masked CRCs. */
static int parse_frames(const uint8_t *b, size_t n, size_t *offs, size_t *lens, int max)
{
    size_t pos = 0;
    int k = 0;
    while (pos < n) {
        if (n - pos < 16 || k == max) return -1;
        uint64_t len = kiln_get_u64le(b + pos);
        if (kiln_get_u32le(b + pos + 8) != kiln_crc32c_mask(crc_ref(b + pos, 8))) return -1;
        if (len > n - pos - 16) return -1;
        if (kiln_get_u32le(b + pos + 12 + len) != kiln_crc32c_mask(crc_ref(b + pos + 12, len)))
            return -1;
        offs[k] = pos + 12;
        lens[k] = (size_t)len;
        k++;
        pos += 16 + len;
    }
    return k;
}

static void test_write_read(void)
{
    char dir[512], host[256] = "";
    kiln_errmsg e = {{0}};
    snprintf(dir, sizeof dir, "%s/model/train", tmpdir); /* created by open */
    gethostname(host, sizeof host - 1);
    kiln_summary_writer *w;
    time_t t0 = time(NULL);
    CHECK(kiln_summary_open(dir, &w, &e) == KILN_OK);
    if (!w) return;
    const char *path = kiln_summary_path(w);
    char want[600];
    snprintf(want, sizeof want, "%s/events.out.tfevents.", dir);
    CHECK(strncmp(path, want, strlen(want)) == 0);
    long long secs = atoll(path + strlen(want));
    CHECK(secs >= (long long)t0 && secs <= (long long)t0 + 5);
    const char *dot = strchr(path + strlen(want), '.');
    CHECK(dot && strcmp(dot + 1, host) == 0);

    CHECK(kiln_summary_scalar(w, "loss", 3, 1.5f) == KILN_OK);
    CHECK(kiln_summary_scalar(w, "loss", 4, 0.25f) == KILN_OK);
    const char *tags[3] = {"accuracy", "samples_per_sec", "learning_rate"};
    float vals[3] = {0.875f, 41234.5f, 1e-3f};
    CHECK(kiln_summary_scalars(w, 100, 3, tags, vals) == KILN_OK);
    CHECK(kiln_summary_scalar(w, "neg", -2, -7.0f) == KILN_OK);
    char longtag[KILN_SUMMARY_MAX_TAG + 5];
    memset(longtag, 't', sizeof longtag - 1);
    longtag[sizeof longtag - 1] = 0;
    CHECK(kiln_summary_scalar(w, longtag, 1, 1.0f) == KILN_EINVAL);
    CHECK(kiln_summary_flush(w) == KILN_OK);

    /* flushed: the file is complete on disk while the writer is still open */
    uint8_t *b;
    size_t n;
    CHECK(kiln_read_file(path, 1 << 20, &b, &n, &e) == KILN_OK);
    size_t offs[8], lens[8];
    int k = parse_frames(b, n, offs, lens, 8);
    CHECK_MSG(k == 5, "frames: %d", k);
    if (k == 5) {
        /* record 0: Event{wall_time(1, fixed64), step(2)=0, file_version(3)="brain.Event:2"} */
        static const uint8_t v0[] = {0x10, 0x00, 0x1a, 13,  'b', 'r', 'a', 'i', 'n',
                                     '.',  'E',  'v',  'e', 'n', 't', ':', '2'};
        CHECK(lens[0] == 9 + sizeof v0 && b[offs[0]] == 0x09);
        CHECK(memcmp(b + offs[0] + 9, v0, sizeof v0) == 0);
        double wt;
        memcpy(&wt, b + offs[0] + 1, 8);
        CHECK(wt >= (double)t0 - 1 && wt <= (double)t0 + 5);
        /* record 1: step 3, summary(5){value(1){tag(1)="loss", simple_value(2, fixed32)=1.5}} */
        static const uint8_t v1[] = {0x10, 0x03, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l',
                                     'o',  's',  's',  0x15, 0x00, 0x00, 0xc0, 0x3f};
        CHECK(lens[1] == 9 + sizeof v1 && b[offs[1]] == 0x09);
        CHECK(memcmp(b + offs[1] + 9, v1, sizeof v1) == 0);
        /* record 4: a negative step is a 10-byte varint (int64 two's complement) */
        CHECK(b[offs[4] + 9] == 0x10 && b[offs[4] + 10] == 0xfe && b[offs[4] + 18] == 0xff &&
              b[offs[4] + 19] == 0x01);
    }
    free(b);
    CHECK(kiln_summary_close(w) == KILN_OK);
    CHECK(kiln_summary_close(NULL) == KILN_OK);

    char *fp = find_event_file(dir);
    collected c = {0};
    CHECK(fp && kiln_summary_read(fp, collect, &c, &e) == KILN_OK);
    CHECK(c.n == 7);
    if (c.n == 7) {
        CHECK(strcmp(c.ev[0].file_version, "brain.Event:2") == 0 && c.ev[0].step == 0 &&
              c.ev[0].tag[0] == 0);
        CHECK(strcmp(c.ev[1].tag, "loss") == 0 && c.ev[1].step == 3 && c.ev[1].value == 1.5f);
        CHECK(strcmp(c.ev[2].tag, "loss") == 0 && c.ev[2].step == 4 && c.ev[2].value == 0.25f);
        int ok = 1;
        for (int i = 0; i < 3; i++)
            ok &= strcmp(c.ev[3 + i].tag, tags[i]) == 0 && c.ev[3 + i].step == 100 &&
                  c.ev[3 + i].value == vals[i];
        CHECK(ok);
        CHECK(c.ev[6].step == -2 && c.ev[6].value == -7.0f);
        CHECK(c.ev[1].wall_time >= (double)t0 - 1 && c.ev[1].wall_time <= (double)t0 + 5);
    }

    /* corruption is detected with the record index */
    CHECK(kiln_read_file(fp, 1 << 20, &b, &n, &e) == KILN_OK);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/corrupt.tfevents", tmpdir);
    b[n - 6] ^= 0x40; /* inside the last record's data */
    FILE *f = fopen(bad, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    c.n = 0;
    CHECK(kiln_summary_read(bad, collect, &c, &e) == KILN_EINVAL);
    CHECK_MSG(strstr(e.msg, "record 4") && strstr(e.msg, "CRC"), "%s", e.msg);
    CHECK(c.n == 6); /* everything before it was delivered */
    b[n - 6] ^= 0x40;
    f = fopen(bad, "wb");
    fwrite(b, 1, n - 3, f); /* truncated */
    fclose(f);
    CHECK(kiln_summary_read(bad, collect, &c, &e) == KILN_EINVAL && strstr(e.msg, "truncated"));
    b[0] ^= 1; /* length field: its own CRC catches it */
    f = fopen(bad, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    CHECK(kiln_summary_read(bad, collect, &c, &e) == KILN_EINVAL && strstr(e.msg, "length CRC"));
    free(b);
    free(fp);

    /* two writers in the same dir and second never share a file */
    kiln_summary_writer *w1, *w2;
    char dir2[512];
    snprintf(dir2, sizeof dir2, "%s/two", tmpdir);
    CHECK(kiln_summary_open(dir2, &w1, &e) == KILN_OK);
    CHECK(kiln_summary_open(dir2, &w2, &e) == KILN_OK);
    CHECK(strcmp(kiln_summary_path(w1), kiln_summary_path(w2)) != 0);
    kiln_summary_close(w1);
    kiln_summary_close(w2);

    /* timed flush: with flush_secs 0, each write reaches the file at once */
    CHECK(kiln_summary_open(dir2, &w1, &e) == KILN_OK);
    kiln_summary_set_flush_secs(w1, 0);
    CHECK(kiln_summary_scalar(w1, "x", 1, 2.0f) == KILN_OK);
    c.n = 0;
    CHECK(kiln_summary_read(kiln_summary_path(w1), collect, &c, &e) == KILN_OK && c.n == 2);
    kiln_summary_close(w1);

    /* a dir that cannot be created */
    CHECK(kiln_summary_open("/proc/kiln-no/such", &w1, &e) != KILN_OK);
}

/* Malformed protobuf inside valid frames: random edits to an Event, framed
 * with correct CRCs, must give KILN_OK or KILN_EINVAL, never a crash (ASan). */
static void test_reader_mutations(void)
{
    /* Event{wall_time, step 7, summary{value{tag "acc", 0.5}, value{tag "lr", 0.1}}} */
    static const uint8_t ev[] = {0x09, 0,    0,    0,    0,    0,    0,    0xf0, 0x3f,
                                 0x10, 0x07, 0x2a, 0x17, 0x0a, 0x0a, 0x0a, 0x03, 'a',
                                 'c',  'c',  0x15, 0x00, 0x00, 0x00, 0x3f, 0x0a, 0x09,
                                 0x0a, 0x02, 'l',  'r',  0x15, 0xcd, 0xcc, 0xcc, 0x3d};
    uint8_t m[sizeof ev], frame[sizeof ev + 16];
    char path[512];
    kiln_errmsg e;
    snprintf(path, sizeof path, "%s/mut.tfevents", tmpdir);
    kiln_tfrecord_frame(ev, sizeof ev, frame);
    FILE *f = fopen(path, "wb");
    fwrite(frame, 1, sizeof frame, f);
    fclose(f);
    collected c = {0};
    CHECK(kiln_summary_read(path, collect, &c, &e) == KILN_OK && c.n == 2);
    CHECK(c.n == 2 && strcmp(c.ev[0].tag, "acc") == 0 && c.ev[0].value == 0.5f &&
          c.ev[0].step == 7 && c.ev[0].wall_time == 1.0 && strcmp(c.ev[1].tag, "lr") == 0 &&
          c.ev[1].value == 0.1f);
    srand(3);
    int odd = 0, rejected = 0;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(m, ev, sizeof ev);
        for (int k = 0; k < 2; k++)
            m[(size_t)rand() % sizeof m] = (uint8_t)rand();
        size_t len = (size_t)rand() % 4 ? sizeof m : (size_t)rand() % sizeof m;
        kiln_tfrecord_frame(m, len, frame);
        unlink(path);
        f = fopen(path, "wb");
        fwrite(frame, 1, len + 16, f);
        fclose(f);
        c.n = 0;
        kiln_err rc = kiln_summary_read(path, collect, &c, &e);
        odd += rc != KILN_OK && rc != KILN_EINVAL;
        rejected += rc == KILN_EINVAL;
    }
    CHECK(odd == 0);
    CHECK(rejected > 0); /* malformed varints/lengths were noticed */
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-summary-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_crc32c();
    test_write_read();
    test_reader_mutations();
    rm_rf(tmpdir);
    TEST_DONE();
}
