/* src/exec/supervisor/fetch.c - an http(s):// package fetched into a job's
 * staging directory (stage_packages in spawn.c), with libcurl, on a thread
 * of its own (fetch.h). Every fetch is still bounded in time (fetch.h's
 * limits) and in size (kilnd --max-package-bytes): a cancelled job's fetch
 * stops at libcurl's next progress call. */
#include "exec/supervisor/fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/hex.h"

struct kilnd_fetch_op {
    pthread_t th;
    char *url, *dst;
    uint64_t max_bytes;
    int wake_fd;
    atomic_bool done, cancel;
    /* the outcome, written by the fetch thread before `done` */
    kiln_err err;
    uint64_t bytes;
    char hex[65], why[2 * PATH_MAX + 64]; /* paths in it: see fetch() */
};

typedef struct sink {
    int fd;
    uint64_t got, max;
    bool too_big, write_failed;
    int write_errno;
    EVP_MD_CTX *md;
    atomic_bool *cancel;
} sink;

/* libcurl's progress call (at least once a second, also while connecting):
 * non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    sink *s = arg;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return atomic_load(s->cancel) ? 1 : 0;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    sink *s = arg;
    size_t len = size * n, off = 0;
    /* servers need not send Content-Length: the cap holds here as well */
    if (len > s->max - s->got) {
        s->too_big = true;
        return 0; /* CURLE_WRITE_ERROR */
    }
    while (off < len) {
        ssize_t w = write(s->fd, p + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            s->write_failed = true;
            s->write_errno = w < 0 ? errno : ENOSPC;
            return 0;
        }
        off += (size_t)w;
    }
    EVP_DigestUpdate(s->md, p, len);
    s->got += len;
    return len;
}

/* The fetch itself, on the fetch thread: f->url into f->dst. */
static kiln_err fetch(kilnd_fetch_op *f, uint64_t *bytes, char hex[65], char *why, size_t whylen)
{
    const char *url = f->url, *dst = f->dst;
    uint64_t max_bytes = f->max_bytes;
    char part[PATH_MAX], err[CURL_ERROR_SIZE] = "";
    sink s = {.fd = -1, .max = max_bytes, .cancel = &f->cancel};
    CURL *c = NULL;
    kiln_err rc = KILN_EIO;

    if (snprintf(part, sizeof part, "%s.part", dst) >= (int)sizeof part) {
        snprintf(why, whylen, "the staging path is too long");
        return KILN_EIO;
    }
    unlink(part); /* a previous attempt's, cut off */
    s.fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (s.fd < 0) {
        snprintf(why, whylen, "cannot create %s: %s", part, strerror(errno));
        return KILN_EIO;
    }
    s.md = EVP_MD_CTX_new();
    c = curl_easy_init();
    if (!s.md || !c || EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) != 1) {
        snprintf(why, whylen, "out of memory");
        rc = KILN_ENOMEM;
        goto out;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)KILND_FETCH_REDIRECTS);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)KILND_FETCH_CONNECT_S);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)KILND_FETCH_TOTAL_S);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, (long)KILND_FETCH_LOW_SPEED);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)KILND_FETCH_LOW_SPEED_S);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* kilnd is threaded */
    curl_easy_setopt(c, CURLOPT_USERAGENT, "kilnd");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (s.too_big || cc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(why, whylen, "larger than kilnd's --max-package-bytes (%llu bytes)",
                 (unsigned long long)max_bytes);
        rc = KILN_ELIMIT;
        goto out;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(why, whylen, "cancelled");
        goto out;
    }
    if (s.write_failed) {
        snprintf(why, whylen, "cannot write %s: %s", part, strerror(s.write_errno));
        goto out;
    }
    if (cc == CURLE_HTTP_RETURNED_ERROR) {
        snprintf(why, whylen, "HTTP status %ld", status);
        goto out;
    }
    if (cc == CURLE_TOO_MANY_REDIRECTS) {
        snprintf(why, whylen, "more than %d redirects", KILND_FETCH_REDIRECTS);
        goto out;
    }
    if (cc == CURLE_UNSUPPORTED_PROTOCOL) {
        snprintf(why, whylen, "redirected to a scheme other than http or https (%s)",
                 err[0] ? err : curl_easy_strerror(cc));
        goto out;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(why, whylen,
                 "timed out (%s; kilnd allows %d s to connect, %d s in all, and no more than "
                 "%d s below %d bytes/s)",
                 err[0] ? err : curl_easy_strerror(cc), KILND_FETCH_CONNECT_S, KILND_FETCH_TOTAL_S,
                 KILND_FETCH_LOW_SPEED_S, KILND_FETCH_LOW_SPEED);
        goto out;
    }
    if (cc != CURLE_OK) {
        snprintf(why, whylen, "%s", err[0] ? err : curl_easy_strerror(cc));
        goto out;
    }
    if (status >= 400) { /* FAILONERROR covers this; kept for a server curl lets through */
        snprintf(why, whylen, "HTTP status %ld", status);
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_DigestFinal_ex(s.md, md, &mdlen) != 1 || mdlen != 32) {
        snprintf(why, whylen, "cannot compute the SHA-256");
        goto out;
    }
    kiln_hex(md, mdlen, hex);
    if (fsync(s.fd) != 0 || close(s.fd) != 0) {
        s.fd = -1;
        snprintf(why, whylen, "cannot write %s: %s", part, strerror(errno));
        goto out;
    }
    s.fd = -1;
    if (rename(part, dst) != 0) {
        snprintf(why, whylen, "cannot rename %s to %s: %s", part, dst, strerror(errno));
        goto out;
    }
    *bytes = s.got;
    rc = KILN_OK;
out:
    if (s.fd >= 0) close(s.fd);
    if (rc != KILN_OK) unlink(part);
    if (c) curl_easy_cleanup(c);
    EVP_MD_CTX_free(s.md);
    return rc;
}

static void *fetch_thread(void *arg)
{
    kilnd_fetch_op *f = arg;
    f->err = fetch(f, &f->bytes, f->hex, f->why, sizeof f->why);
    atomic_store(&f->done, true);
    char b = 'f';
    ssize_t w = write(f->wake_fd, &b, 1); /* a full pipe has its wake-up already */
    (void)w;
    return NULL;
}

kiln_err kilnd_fetch_start(const char *url, const char *dst, uint64_t max_bytes, int wake_fd,
                           kilnd_fetch_op **out)
{
    kilnd_fetch_op *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f) return KILN_ENOMEM;
    f->url = strdup(url);
    f->dst = strdup(dst);
    f->max_bytes = max_bytes;
    f->wake_fd = wake_fd;
    atomic_init(&f->done, false);
    atomic_init(&f->cancel, false);
    if (!f->url || !f->dst || pthread_create(&f->th, NULL, fetch_thread, f) != 0) {
        free(f->url);
        free(f->dst);
        free(f);
        return KILN_ENOMEM;
    }
    *out = f;
    return KILN_OK;
}

bool kilnd_fetch_done(const kilnd_fetch_op *f)
{
    return atomic_load(&f->done);
}

void kilnd_fetch_cancel(kilnd_fetch_op *f)
{
    atomic_store(&f->cancel, true);
}

kiln_err kilnd_fetch_end(kilnd_fetch_op *f, uint64_t *bytes, char hex[65], char *why, size_t whylen)
{
    pthread_join(f->th, NULL);
    kiln_err err = f->err;
    if (bytes) *bytes = f->bytes;
    if (hex) memcpy(hex, f->hex, sizeof f->hex);
    if (why && whylen) snprintf(why, whylen, "%s", f->why);
    free(f->url);
    free(f->dst);
    free(f);
    return err;
}
