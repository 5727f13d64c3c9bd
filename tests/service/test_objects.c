/* tests/service/test_objects.c - the staging store: CRC32C and base64 against
 * known vectors, name rules, atomic writes with GCS's md5Hash/crc32c, the
 * size cap, preconditions, files written by programs (no sidecar), list with
 * prefix/delimiter/pages, delete. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/objects.h"
#include "util/base64.h"
#include "test.h"
#include "util/crc32c.h"

static kiln_err put(kiln_objects *o, const char *bucket, const char *name, const char *text,
                    kiln_object_meta *m)
{
    kiln_object_writer *w = NULL;
    kiln_err err = kiln_objects_writer_new(o, &w);
    if (err != KILN_OK) return err;
    err = kiln_objects_writer_write(w, text, strlen(text));
    if (err != KILN_OK) {
        kiln_objects_writer_abort(w);
        return err;
    }
    return kiln_objects_writer_commit(w, bucket, name, "text/plain", -1, m);
}

static size_t count_tmp(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A '%s/objects/.tmp' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    size_t n = 999;
    if (p) {
        if (fscanf(p, "%zu", &n) != 1) n = 999;
        pclose(p);
    }
    return n;
}

int main(void)
{
    char dir[] = "/tmp/kiln-objects-XXXXXX", root[256], path[512];
    kiln_objects *o = NULL;
    kiln_object_meta m = {0};
    kiln_object_list l = {0};
    const char *why = NULL, *proj = NULL;
    char b64buf[64], *b64 = b64buf;

    /* CRC32C check value (RFC 3720 B.4 / the Castagnoli "check" vector) */
    CHECK(kiln_crc32c_update(0, "123456789", 9) == 0xE3069283u);
    unsigned char zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    CHECK(kiln_crc32c_update(0, zeros, 32) == 0x8A9136AAu);
    CHECK(kiln_crc32c_update(0, ones, 32) == 0x62A8AB43u);
    /* streaming gives the same value as one call */
    CHECK(kiln_crc32c_update(kiln_crc32c_update(0, "12345", 5), "6789", 4) == 0xE3069283u);
    kiln_b64_encode((const unsigned char *)"hello", 5, 0, b64);
    CHECK_STR(b64, "aGVsbG8=");
    kiln_b64_encode((const unsigned char *)"", 0, 0, b64);
    CHECK_STR(b64, "");

    /* names */
    CHECK(kiln_objects_valid_name("a/b/c.tar.gz", 12, &why));
    CHECK(!kiln_objects_valid_name("a/../b", 6, &why) && strstr(why, ".."));
    CHECK(!kiln_objects_valid_name("..", 2, &why));
    CHECK(!kiln_objects_valid_name("a//b", 4, &why) && strstr(why, "empty"));
    CHECK(!kiln_objects_valid_name("/a", 2, &why));
    CHECK(!kiln_objects_valid_name("a/", 2, &why));
    CHECK(!kiln_objects_valid_name("a\nb", 3, &why));
    CHECK(!kiln_objects_valid_name("a\0b", 3, &why) && strstr(why, "NUL"));
    CHECK(!kiln_objects_valid_name("\xff", 1, &why) && strstr(why, "UTF-8"));
    CHECK(!kiln_objects_valid_name("", 0, &why));
    char *longname = malloc(1100);
    memset(longname, 'a', 1025);
    for (int i = 100; i < 1025; i += 100)
        longname[i] = '/';
    longname[1025] = '\0';
    CHECK(!kiln_objects_valid_name(longname, 1025, &why) && strstr(why, "1024"));
    longname[1024] = '\0';
    CHECK(kiln_objects_valid_name(longname, 1024, &why));
    free(longname);
    CHECK(kiln_objects_valid_bucket("my-bucket_1"));
    CHECK(!kiln_objects_valid_bucket("My-Bucket"));
    CHECK(!kiln_objects_valid_bucket("-ab"));
    CHECK(!kiln_objects_valid_bucket("ab"));
    CHECK(!kiln_objects_valid_bucket("a..b"));

    if (!mkdtemp(dir)) return 1;
    snprintf(root, sizeof root, "%s/objects", dir);
    CHECK(kiln_objects_open(root, 64, &o) == KILN_OK && o);
    if (!o) TEST_DONE();
    CHECK(kiln_objects_add_bucket(o, "stage", NULL) == KILN_OK);
    CHECK(kiln_objects_add_bucket(o, "team", "p2") == KILN_OK);
    CHECK(kiln_objects_add_bucket(o, "stage", NULL) == KILN_EEXIST);
    CHECK(kiln_objects_add_bucket(o, "Bad", NULL) == KILN_EINVAL);
    CHECK(kiln_objects_holds(o, "team", &proj) && proj && strcmp(proj, "p2") == 0);
    CHECK(kiln_objects_holds(o, "stage", &proj) && proj == NULL);
    CHECK(!kiln_objects_holds(o, "other", NULL));

    /* a write: GCS's md5Hash and crc32c of "hello\n" */
    CHECK(put(o, "stage", "dir/hello.txt", "hello\n", &m) == KILN_OK);
    CHECK_STR(m.md5, "sZRqySSS0jR8YjW00mERhA==");
    CHECK_STR(m.crc32c, "NT3Yvg==");
    CHECK(m.size == 6 && m.generation > 0 && m.metageneration == 1);
    CHECK_STR(m.content_type, "text/plain");
    int64_t gen = m.generation;
    kiln_object_meta_clear(&m);
    CHECK(kiln_objects_stat(o, "stage", "dir/hello.txt", &m) == KILN_OK);
    CHECK_STR(m.content_type, "text/plain");
    CHECK_STR(m.md5, "sZRqySSS0jR8YjW00mERhA==");
    CHECK(m.generation == gen);
    kiln_object_meta_clear(&m);
    snprintf(path, sizeof path, "%s/stage/dir/hello.txt", root);
    CHECK(access(path, R_OK) == 0);
    CHECK(count_tmp(dir) == 0);

    /* preconditions: ifGenerationMatch=0 on an existing object fails */
    kiln_object_writer *w = NULL;
    CHECK(kiln_objects_writer_new(o, &w) == KILN_OK);
    CHECK(kiln_objects_writer_write(w, "x", 1) == KILN_OK);
    CHECK(kiln_objects_writer_commit(w, "stage", "dir/hello.txt", NULL, 0, &m) == KILN_ECONFLICT);
    CHECK(kiln_objects_writer_new(o, &w) == KILN_OK);
    CHECK(kiln_objects_writer_write(w, "x", 1) == KILN_OK);
    CHECK(kiln_objects_writer_commit(w, "stage", "dir/hello.txt", NULL, gen, &m) == KILN_OK);
    CHECK_STR(m.content_type, "application/octet-stream");
    kiln_object_meta_clear(&m);
    CHECK(count_tmp(dir) == 0);

    /* the cap (64 bytes here): refused, and nothing is left behind */
    char big[65];
    memset(big, 'b', 64);
    big[64] = '\0';
    CHECK(put(o, "stage", "big", big, &m) == KILN_OK);
    kiln_object_meta_clear(&m);
    CHECK(kiln_objects_writer_new(o, &w) == KILN_OK);
    CHECK(kiln_objects_writer_write(w, big, 60) == KILN_OK);
    CHECK(kiln_objects_writer_write(w, big, 5) == KILN_ELIMIT);
    CHECK(kiln_objects_writer_commit(w, "stage", "big2", NULL, -1, &m) == KILN_ELIMIT);
    CHECK(kiln_objects_stat(o, "stage", "big2", &m) == KILN_ENOTFOUND);
    CHECK(count_tmp(dir) == 0);

    /* conflicts: "dir" is a directory, "big/x" needs "big" to be one */
    CHECK(put(o, "stage", "dir", "d", &m) == KILN_EEXIST);
    CHECK(put(o, "stage", "big/x", "d", &m) == KILN_EEXIST);
    CHECK(put(o, "stage", "../escape", "d", &m) == KILN_EINVAL);

    /* a file a program wrote (no sidecar) is an object too */
    snprintf(path, sizeof path, "%s/stage/dir/sub", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/stage/dir/sub/model.txt", root);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("hello\n", f);
        fclose(f);
    }
    CHECK(kiln_objects_stat(o, "stage", "dir/sub/model.txt", &m) == KILN_OK);
    CHECK_STR(m.md5, "sZRqySSS0jR8YjW00mERhA==");
    CHECK_STR(m.crc32c, "NT3Yvg==");
    CHECK(m.size == 6);
    kiln_object_meta_clear(&m);
    CHECK(kiln_objects_stat(o, "stage", "dir/sub", &m) == KILN_ENOTFOUND);
    /* a symlink is not an object */
    snprintf(path, sizeof path, "%s/stage/dir/sub/link", root);
    CHECK(symlink("/etc/passwd", path) == 0);
    CHECK(kiln_objects_stat(o, "stage", "dir/sub/link", &m) == KILN_ENOTFOUND);
    CHECK(kiln_objects_stat(o, "stage", "nope", &m) == KILN_ENOTFOUND);

    /* list: all, with a prefix, with a delimiter, in pages */
    CHECK(put(o, "stage", "dir/a", "1", &m) == KILN_OK);
    kiln_object_meta_clear(&m);
    CHECK(put(o, "stage", "dira", "1", &m) == KILN_OK);
    kiln_object_meta_clear(&m);
    CHECK(kiln_objects_list(o, "stage", NULL, NULL, NULL, 0, &l) == KILN_OK);
    CHECK(l.n == 5 && l.n_prefixes == 0 && !l.next_token);
    if (l.n == 5) {
        CHECK_STR(l.items[0].name, "big");
        CHECK_STR(l.items[1].name, "dir/a");
        CHECK_STR(l.items[2].name, "dir/hello.txt");
        CHECK_STR(l.items[3].name, "dir/sub/model.txt");
        CHECK_STR(l.items[4].name, "dira");
    }
    kiln_object_list_free(&l);
    CHECK(kiln_objects_list(o, "stage", "dir/", "/", NULL, 0, &l) == KILN_OK);
    CHECK(l.n == 2 && l.n_prefixes == 1);
    if (l.n_prefixes == 1) CHECK_STR(l.prefixes[0], "dir/sub/");
    kiln_object_list_free(&l);
    CHECK(kiln_objects_list(o, "stage", NULL, "/", NULL, 0, &l) == KILN_OK);
    CHECK(l.n == 2 && l.n_prefixes == 1); /* big, dira; dir/ */
    kiln_object_list_free(&l);
    /* pages of 2 over "", delimiter "/": big, dir/ | dira */
    CHECK(kiln_objects_list(o, "stage", NULL, "/", NULL, 2, &l) == KILN_OK);
    CHECK(l.n == 1 && l.n_prefixes == 1 && l.next_token);
    char *tok = l.next_token ? strdup(l.next_token) : NULL;
    kiln_object_list_free(&l);
    CHECK(kiln_objects_list(o, "stage", NULL, "/", tok, 2, &l) == KILN_OK);
    CHECK(l.n == 1 && l.n_prefixes == 0 && !l.next_token);
    if (l.n == 1) CHECK_STR(l.items[0].name, "dira");
    kiln_object_list_free(&l);
    free(tok);
    /* pages of 1 without a delimiter visit every object once */
    size_t seen = 0;
    tok = NULL;
    for (int i = 0; i < 10; i++) {
        CHECK(kiln_objects_list(o, "stage", "dir", NULL, tok, 1, &l) == KILN_OK);
        seen += l.n;
        free(tok);
        tok = l.next_token ? strdup(l.next_token) : NULL;
        kiln_object_list_free(&l);
        if (!tok) break;
    }
    CHECK_MSG(seen == 4, "seen %zu", seen);
    free(tok);

    /* nothing matches: an empty list, not an error */
    CHECK(kiln_objects_list(o, "team", NULL, NULL, NULL, 0, &l) == KILN_OK && l.n == 0);
    kiln_object_list_free(&l);
    CHECK(kiln_objects_list(o, "stage", "zzz", "/", NULL, 0, &l) == KILN_OK && l.n == 0);
    kiln_object_list_free(&l);

    /* delete */
    CHECK(kiln_objects_delete(o, "stage", "dir/a") == KILN_OK);
    CHECK(kiln_objects_stat(o, "stage", "dir/a", &m) == KILN_ENOTFOUND);
    CHECK(kiln_objects_delete(o, "stage", "dir/a") == KILN_ENOTFOUND);
    CHECK(kiln_objects_delete(o, "stage", "dir/sub") == KILN_ENOTFOUND);

    /* reopened, the sidecars still describe the objects */
    kiln_objects_close(o);
    CHECK(kiln_objects_open(root, 64, &o) == KILN_OK);
    CHECK(o && kiln_objects_stat(o, "stage", "dira", &m) == KILN_OK);
    CHECK_STR(m.content_type, "text/plain");
    kiln_object_meta_clear(&m);

    kiln_objects_close(o);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
