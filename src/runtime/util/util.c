/* runtime/util/util.c - error messages, SHA-256 wrapper, durable files (CRC-32C:
 * src/util/crc32c.c; hex: src/util/hex.c). */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

kiln_err kiln_errmsg_set(kiln_errmsg *e, kiln_err code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- SHA-256 ---- */

struct kiln_sha256 {
    EVP_MD_CTX *ctx;
};

kiln_sha256 *kiln_sha256_new(void)
{
    kiln_sha256 *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void kiln_sha256_update(kiln_sha256 *h, const void *buf, size_t n)
{
    if (n) EVP_DigestUpdate(h->ctx, buf, n);
}

void kiln_sha256_final(kiln_sha256 *h, uint8_t out[32])
{
    unsigned int len = 32;
    EVP_DigestFinal_ex(h->ctx, out, &len);
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

int kiln_sha256_buf(const void *buf, size_t n, uint8_t out[32])
{
    kiln_sha256 *h = kiln_sha256_new();
    if (!h) return -1;
    kiln_sha256_update(h, buf, n);
    kiln_sha256_final(h, out);
    return 0;
}

/* ---- files ---- */

kiln_err kiln_mkdir_p(const char *path, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    char *p = strdup(path);
    if (!p) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    size_t len = strlen(p);
    /* Create each prefix in turn; EEXIST for a directory is fine. */
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = kiln_errmsg_set(err, KILN_EIO, "%s: cannot create directory: %s", p,
                                 strerror(errno));
            goto out;
        }
        p[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: not a directory", path);
        goto out;
    }
out:
    free(p);
    return rc;
}

static _Atomic int durable = 1;

void kiln_durable_set(int on)
{
    durable = on;
}

kiln_err kiln_fsync_dir(const char *dir, kiln_errmsg *err)
{
    if (!durable) return KILN_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return kiln_errmsg_set(err, KILN_EIO, "%s: cannot open directory: %s", dir,
                               strerror(errno));
    kiln_err rc = KILN_OK;
    /* Some filesystems refuse fsync on directories (EINVAL); durability there is
     * whatever the filesystem gives, and failing the save would help nobody. */
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: fsync: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

void kiln_dirname(const char *path, char *out, size_t outsz)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, outsz, ".");
    } else if (slash == path) {
        snprintf(out, outsz, "/");
    } else {
        snprintf(out, outsz, "%.*s", (int)(slash - path), path);
    }
}

kiln_err kiln_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *len,
                        kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    uint8_t *buf = NULL;
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return kiln_errmsg_set(err, errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO,
                               "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        rc = kiln_errmsg_set(err, KILN_ELIMIT, "%s: %lld bytes exceeds the limit of %zu", path,
                             (long long)st.st_size, max_bytes);
        goto out;
    }
    size_t n = (size_t)st.st_size;
    buf = malloc(n + 1);
    if (!buf) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "%s: out of memory for %zu bytes", path, n);
        goto out;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = kiln_errmsg_set(err, KILN_EIO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0) break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

struct kiln_atomic_file {
    FILE *f;
    char *path, *tmp;
};

kiln_err kiln_atomic_open(const char *path, kiln_atomic_file **out, FILE **f, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    kiln_atomic_file *a = calloc(1, sizeof *a);
    *out = NULL;
    *f = NULL;
    if (!a) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    size_t n = strlen(path) + 64;
    a->path = strdup(path);
    a->tmp = malloc(n);
    if (!a->path || !a->tmp) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        goto out;
    }
    /* Same directory as the target, so rename() is atomic (no cross-device move). */
    /* pid + a per-process counter: two threads saving the same path never
     * share a temporary */
    static _Atomic unsigned long seq;
    snprintf(a->tmp, n, "%s" KILN_TMP_MARKER "%ld.%lu", path, (long)getpid(), seq++);
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: cannot create: %s", a->tmp, strerror(errno));
        goto out;
    }
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        close(fd);
        unlink(a->tmp);
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: fdopen: %s", a->tmp, strerror(errno));
        goto out;
    }
    *out = a;
    *f = a->f;
    a = NULL;
out:
    if (a) {
        free(a->path);
        free(a->tmp);
        free(a);
    }
    return rc;
}

void kiln_atomic_abort(kiln_atomic_file *a)
{
    if (!a) return;
    if (a->f) fclose(a->f);
    unlink(a->tmp);
    free(a->path);
    free(a->tmp);
    free(a);
}

kiln_err kiln_atomic_commit(kiln_atomic_file *a, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    char dir[4096];
    /* ferror catches earlier fwrite failures the caller did not check. */
    if (ferror(a->f) || fflush(a->f) != 0 || (durable && fsync(fileno(a->f)) != 0)) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: write failed: %s", a->tmp, strerror(errno));
        goto out;
    }
    int crc = fclose(a->f);
    a->f = NULL;
    if (crc != 0) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: close failed: %s", a->tmp, strerror(errno));
        goto out;
    }
    if (rename(a->tmp, a->path) != 0) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: rename to %s failed: %s", a->tmp, a->path,
                             strerror(errno));
        goto out;
    }
    kiln_dirname(a->path, dir, sizeof dir);
    rc = kiln_fsync_dir(dir, err);
out:
    kiln_atomic_abort(a); /* after a successful rename the unlink finds nothing */
    return rc;
}

kiln_err kiln_atomic_write(const char *path, const void *data, size_t n, kiln_errmsg *err)
{
    kiln_atomic_file *a;
    FILE *f;
    kiln_err rc = kiln_atomic_open(path, &a, &f, err);
    if (rc != KILN_OK) return rc;
    if (n && fwrite(data, 1, n, f) != n) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: write failed: %s", path, strerror(errno));
        kiln_atomic_abort(a);
        return rc;
    }
    return kiln_atomic_commit(a, err);
}
