/* tests/service/test_auth.c - src/auth (kiln/auth.h) without kilnd: the
 * tokens file (modes, plain and hashed lines, matching), the table in force
 * and its swap, the project users' run-as rules, and the audit log's lines
 * and rotation. */
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/auth.h"
#include "test.h"

/* CHECK_STR for char arrays (whose address is never NULL) */
#define CHECK_ARR(a, b) CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

static char dir[] = "/tmp/kiln_test_auth_XXXXXX";

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* "sha256:" and the lowercase hex SHA-256 of s, as `kiln tokens new` prints it */
static void hashed(const char *s, char out[7 + 65])
{
    unsigned char h[32];
    unsigned int len = 32;
    EVP_Digest(s, strlen(s), h, &len, EVP_sha256(), NULL);
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", h[i]);
}

static const char *const plain = "plain-token-0123456789";
static const char *const secret = "hashed-token-abcdefghij";

static void test_tokens(void)
{
    char path[256], text[512], h[7 + 65], err[512];
    size_t n_plain = 99;
    kiln_token_match m;

    snprintf(path, sizeof path, "%s/tokens", dir);
    hashed(secret, h);
    snprintf(text, sizeof text, "# a comment\n\n%s p1 editor\n%s * viewer\nproject p1 user root\n",
             plain, h);

    /* readable by others: refused, naming the fix */
    write_file(path, text, 0644);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "chmod 600") != NULL, "%s", err);

    chmod(path, 0600);
    kiln_tokens *t = kiln_tokens_load(path, &n_plain, err, sizeof err);
    CHECK_MSG(t != NULL, "%s", err);
    if (!t) return;
    CHECK(kiln_tokens_count(t) == 2); /* the project line is not a token */
    CHECK(n_plain == 1);

    CHECK(kiln_tokens_match(t, plain, &m));
    CHECK_ARR(m.project, "p1");
    CHECK(m.role == KILN_AUTH_EDITOR);
    /* the id is the first hex digits of the token's SHA-256 */
    char want[KILN_TOKEN_ID_LEN + 1], hp[7 + 65];
    hashed(plain, hp);
    memcpy(want, hp + 7, KILN_TOKEN_ID_LEN);
    want[KILN_TOKEN_ID_LEN] = '\0';
    CHECK_ARR(m.id, want);
    char id[KILN_TOKEN_ID_LEN + 1];
    kiln_tokens_id(plain, id);
    CHECK_ARR(id, want);

    CHECK(kiln_tokens_match(t, secret, &m));
    CHECK_ARR(m.project, "*");
    CHECK(m.role == KILN_AUTH_VIEWER);

    /* a miss still names the presented token */
    memset(&m, 0, sizeof m);
    CHECK(!kiln_tokens_match(t, "not-a-token-of-this-file", &m));
    kiln_tokens_id("not-a-token-of-this-file", id);
    CHECK_ARR(m.id, id);
    /* the hash itself is not a token */
    CHECK(!kiln_tokens_match(t, h, &m));
    kiln_tokens_free(t);

    /* what the file may not hold */
    write_file(path, "short p1 editor\n", 0600);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "at least 16") != NULL, "%s", err);
    write_file(path, "plain-token-0123456789 p1 owner\n", 0600);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, ":1: expected") != NULL, "%s", err);
    write_file(path, "sha256:ABC p1 viewer\n", 0600);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "64 lowercase hex") != NULL, "%s", err);
    write_file(path, "project p1 user root\n", 0600);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "holds no token") != NULL, "%s", err);
    unlink(path);
    CHECK(kiln_tokens_load(path, &n_plain, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "cannot read") != NULL, "%s", err);
}

static kiln_tokens *load(const char *text)
{
    char path[256], err[512];
    size_t n_plain;
    snprintf(path, sizeof path, "%s/tokens", dir);
    write_file(path, text, 0600);
    kiln_tokens *t = kiln_tokens_load(path, &n_plain, err, sizeof err);
    CHECK_MSG(t != NULL, "%s", err);
    return t;
}

static void test_auth_swap(void)
{
    kiln_token_match m;
    kiln_auth *a = kiln_auth_new();
    CHECK(a != NULL);
    if (!a) return;

    /* no table: everyone, token or not */
    CHECK(!kiln_auth_required(a));
    CHECK(kiln_auth_check(a, NULL, &m) == KILN_AUTH_OPEN);
    CHECK(kiln_auth_check(a, "anything-at-all-here", &m) == KILN_AUTH_OPEN);

    kiln_auth_swap(a, load("plain-token-0123456789 p1 editor\n"));
    CHECK(kiln_auth_required(a));
    CHECK(kiln_auth_check(a, NULL, &m) == KILN_AUTH_DENIED);
    CHECK(kiln_auth_check(a, "other-token-0123456789", &m) == KILN_AUTH_DENIED);
    CHECK(kiln_auth_check(a, plain, &m) == KILN_AUTH_MATCH);
    CHECK_ARR(m.project, "p1");

    /* SIGHUP's swap: the old token stops working, the new one works (the
     * old table is freed: under ASan a use of it would fail here) */
    kiln_auth_swap(a, load("other-token-0123456789 p2 viewer\n"));
    CHECK(kiln_auth_check(a, plain, &m) == KILN_AUTH_DENIED);
    CHECK(kiln_auth_check(a, "other-token-0123456789", &m) == KILN_AUTH_MATCH);
    CHECK_ARR(m.project, "p2");
    CHECK(m.role == KILN_AUTH_VIEWER);
    kiln_auth_free(a);
}

static void test_users(void)
{
    char why[1024], path[256];
    long uid, gid;
    bool root = geteuid() == 0;
    struct passwd *me = getpwuid(geteuid());
    CHECK(me != NULL);
    if (!me) return;
    char mine[64];
    snprintf(mine, sizeof mine, "%s", me->pw_name);

    kiln_users *u = kiln_users_new(false);
    CHECK(u != NULL);
    if (!u) return;
    CHECK(kiln_users_count(u) == 0);
    CHECK(kiln_users_at(u, 0) == NULL);

    /* malformed and unknown lines: refused, nothing added */
    CHECK(kiln_users_parse_line(u, "f", 1, "project p1 owner root\n") < 0);
    CHECK(kiln_users_parse_line(u, "f", 2, "project p1 user root team wheel\n") < 0);
    CHECK(kiln_users_parse_line(u, "f", 3, "project p1 user no-such-user-kiln-test\n") < 0);
    CHECK(kiln_users_parse_line(u, "f", 4, "project p1 user root group no-such-group-kt\n") < 0);
    CHECK(kiln_users_count(u) == 0);

    char line[160];
    snprintf(line, sizeof line, "project mine user %s\n", mine);
    CHECK(kiln_users_parse_line(u, "f", 5, line) == 0);
    CHECK(kiln_users_parse_line(u, "f", 6, "project rooted user root\n") == 0);
    CHECK(kiln_users_count(u) == 2);
    const kiln_user *x = kiln_users_at(u, 0);
    CHECK(x && strcmp(x->project, "mine") == 0 && strcmp(x->user, mine) == 0 &&
          x->uid == (long)me->pw_uid && x->gid == (long)me->pw_gid);
    x = kiln_users_at(u, 1);
    CHECK(x && x->uid == 0);

    /* a project that runs as root: refused unless allowed (as root), and
     * not a user kilnd can switch to (not root) */
    CHECK(kiln_users_project(u, "rooted", &uid, &gid, why, sizeof why) == KILN_EINVAL);
    CHECK_MSG(strstr(why, root ? "--allow-root-replicas" : "cannot switch") != NULL, "%s", why);
    /* a project with no line: kilnd's own user, which as root is root */
    kiln_err e = kiln_users_project(u, "nobody-named", &uid, &gid, why, sizeof why);
    CHECK(e == (root ? KILN_EINVAL : KILN_OK));
    if (!root) CHECK(uid == -1 && gid == -1);
    /* kilnd's own user: fine when not root (no switch, uid -1) */
    e = kiln_users_project(u, "mine", &uid, &gid, why, sizeof why);
    CHECK(e == (root ? KILN_EINVAL : KILN_OK));
    kiln_users_free(u);

    /* allowed: as root, root replicas run (uid 0); not as root nothing changes */
    u = kiln_users_new(true);
    CHECK(kiln_users_parse_line(u, "f", 1, "project rooted user root\n") == 0);
    e = kiln_users_project(u, "rooted", &uid, &gid, why, sizeof why);
    CHECK(e == (root ? KILN_OK : KILN_EINVAL));
    if (root) CHECK(uid == 0);
    kiln_users_free(u);

    /* the tokens file: its project lines only, "*" after a project's own
     * line does not shadow it, and a bad line stops the load */
    snprintf(path, sizeof path, "%s/tokens", dir);
    char text[512];
    snprintf(text, sizeof text,
             "plain-token-0123456789 p1 editor\nproject * user %s\nproject rooted user root\n",
             mine);
    write_file(path, text, 0600);
    u = kiln_users_new(false);
    CHECK(kiln_users_load(u, path) == 0);
    CHECK(kiln_users_count(u) == 2);
    /* "*" came first: every project, "rooted" too, runs as mine (as root,
     * mine is root: refused, naming the "*" line, not rooted's) */
    e = kiln_users_project(u, "rooted", &uid, &gid, why, sizeof why);
    if (root)
        CHECK_MSG(e == KILN_EINVAL && strstr(why, "('project * user root')"), "%s", why);
    else
        CHECK(e == KILN_OK && uid == -1);
    kiln_users_free(u);
    write_file(path, "project p1 user no-such-user-kiln-test\n", 0600);
    u = kiln_users_new(false);
    CHECK(kiln_users_load(u, path) < 0);
    kiln_users_free(u);
    unlink(path);
    u = kiln_users_new(false);
    CHECK(kiln_users_load(u, path) < 0);
    /* not root: the check of directories has nothing to do */
    if (!root) CHECK(kiln_users_check_dirs(u, dir, why, sizeof why) == KILN_OK);
    kiln_users_free(u);
}

/* The lines of a file, each parsed; NULL when the file is missing. */
static json_t *lines_of(const char *path)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    json_t *a = json_array();
    while (fgets(buf, sizeof buf, f)) {
        json_error_t je;
        json_t *v = json_loads(buf, 0, &je);
        CHECK_MSG(v != NULL, "not one JSON line: %s", buf);
        if (v) json_array_append_new(a, v);
    }
    fclose(f);
    return a;
}

static void test_audit(void)
{
    char path[256], p1[300], p2[300], p3[300];
    struct stat st;
    snprintf(path, sizeof path, "%s/audit.log", dir);
    snprintf(p1, sizeof p1, "%s.1", path);
    snprintf(p2, sizeof p2, "%s.2", path);
    snprintf(p3, sizeof p3, "%s.3", path);

    kiln_audit *a = kiln_audit_open(path, 1000, 2);
    CHECK(a != NULL);
    if (!a) return;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);

    kiln_audit_event e = {.token_id = "0123456789ab",
                          .project = "p1",
                          .verb = "POST",
                          .resource = "/v1/projects/p1/jobs\n?x=\"y\"",
                          .code = 403,
                          .source = "127.0.0.1",
                          .denied = true,
                          .object_project = "p1",
                          .object_job = "j1"};
    CHECK(kiln_audit_write(a, &e) == 0);
    json_t *l = lines_of(path);
    CHECK(l && json_array_size(l) == 1);
    json_t *v = json_array_get(l, 0);
    CHECK_STR(json_string_value(json_object_get(v, "verb")), "POST");
    /* a newline in the path stays inside the one line */
    CHECK_STR(json_string_value(json_object_get(v, "requestURI")),
              "/v1/projects/p1/jobs\n?x=\"y\"");
    CHECK_STR(json_string_value(json_object_get(v, "tokenId")), "0123456789ab");
    CHECK_STR(json_string_value(json_object_get(v, "decision")), "deny");
    CHECK(json_integer_value(json_object_get(v, "code")) == 403);
    json_t *ref = json_object_get(v, "objectRef");
    CHECK_STR(json_string_value(json_object_get(ref, "namespace")), "p1");
    CHECK_STR(json_string_value(json_object_get(ref, "name")), "j1");
    CHECK(json_object_get(v, "reason") == NULL);
    json_decref(l);

    /* no token, no auth, an act of kilnd's own */
    kiln_audit_event k = {.verb = "PREEMPT", .resource = "/v1/projects/p2/jobs/j2", .reason = "r"};
    CHECK(kiln_audit_write(a, &k) == 0);
    l = lines_of(path);
    v = json_array_get(l, 1);
    CHECK(v && json_is_null(json_object_get(v, "tokenId")) &&
          json_is_null(json_object_get(v, "project")));
    CHECK_STR(json_string_value(json_object_get(v, "decision")), "allow");
    CHECK_STR(json_string_value(json_object_get(v, "reason")), "r");
    json_decref(l);

    /* past 1000 bytes the file rotates; two old files are kept, never a third */
    for (int i = 0; i < 40; i++)
        CHECK(kiln_audit_write(a, &e) == 0);
    CHECK(stat(path, &st) == 0 && st.st_size <= 1000);
    CHECK(access(p1, F_OK) == 0);
    CHECK(access(p2, F_OK) == 0);
    CHECK(access(p3, F_OK) != 0);
    json_t *l1 = lines_of(p1);
    CHECK(l1 && json_array_size(l1) > 0);
    json_decref(l1);
    kiln_audit_close(a);

    /* reopened: appends to what is there */
    a = kiln_audit_open(path, 1000, 2);
    l = lines_of(path);
    size_t before = json_array_size(l);
    json_decref(l);
    CHECK(a && kiln_audit_write(a, &k) == 0);
    l = lines_of(path);
    CHECK(json_array_size(l) == before + 1 || json_array_size(l) == 1); /* 1: it rotated */
    json_decref(l);
    kiln_audit_close(a);
    unlink(path);
    unlink(p1);
    unlink(p2);

    /* a directory that is not there: NULL, errno set */
    snprintf(path, sizeof path, "%s/no/such/dir/audit.log", dir);
    errno = 0;
    CHECK(kiln_audit_open(path, 1000, 2) == NULL && errno == ENOENT);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_tokens();
    test_auth_swap();
    test_users();
    test_audit();
    rmdir(dir);
    TEST_DONE();
}
