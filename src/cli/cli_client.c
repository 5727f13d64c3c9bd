/* src/cli/cli_client.c - kiln/client.h over libcurl. */
#include "kiln/client.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_client {
    CURL *curl;
    char *endpoint; /* without a trailing '/' */
    char *auth;     /* "Authorization: Bearer ..." or NULL */
    char *ca_file;  /* NULL: the system's CA store */
};

typedef struct buf {
    char *p;
    size_t n;
    bool too_big;
} buf;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    buf *b = ud;
    size_t len = size * nmemb;
    if (b->n + len > KILN_CLIENT_MAX_RESPONSE) {
        b->too_big = true;
        return 0; /* makes curl stop with CURLE_WRITE_ERROR */
    }
    char *np = realloc(b->p, b->n + len + 1);
    if (!np) return 0;
    memcpy(np + b->n, ptr, len);
    b->p = np;
    b->n += len;
    b->p[b->n] = '\0';
    return len;
}

kiln_err kiln_client_new(const char *endpoint, const char *token, kiln_client **out)
{
    static bool global_done;
    kiln_client *c = calloc(1, sizeof *c);

    *out = NULL;
    if (!c) return KILN_ENOMEM;
    if (!global_done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        global_done = true;
    }
    c->curl = curl_easy_init();
    c->endpoint = strdup(endpoint && *endpoint ? endpoint : KILN_DEFAULT_ENDPOINT);
    if (token && *token && asprintf(&c->auth, "Authorization: Bearer %s", token) < 0)
        c->auth = NULL;
    if (!c->curl || !c->endpoint || (token && *token && !c->auth)) {
        kiln_client_free(c);
        return KILN_ENOMEM;
    }
    size_t n = strlen(c->endpoint);
    while (n > 0 && c->endpoint[n - 1] == '/')
        c->endpoint[--n] = '\0';
    *out = c;
    return KILN_OK;
}

void kiln_client_free(kiln_client *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->endpoint);
    free(c->auth);
    free(c->ca_file);
    free(c);
}

kiln_err kiln_client_set_ca_file(kiln_client *c, const char *path)
{
    char *p = strdup(path);
    if (!p) return KILN_ENOMEM;
    free(c->ca_file);
    c->ca_file = p;
    return KILN_OK;
}

char *kiln_client_escape(kiln_client *c, const char *s)
{
    char *e = curl_easy_escape(c->curl, s, 0);
    char *out = e ? strdup(e) : NULL;
    curl_free(e);
    return out;
}

kiln_err kiln_client_do(kiln_client *c, const char *method, const char *path, const char *body,
                        long *status, char **resp, char *err, size_t errlen)
{
    struct curl_slist *hdrs = NULL;
    char *url = NULL;
    buf b = {0};
    kiln_err rc = KILN_ENOMEM;

    *resp = NULL;
    *status = 0;
    if (asprintf(&url, "%s%s", c->endpoint, path) < 0) {
        url = NULL;
        goto out;
    }
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
    if (c->auth) hdrs = curl_slist_append(hdrs, c->auth);
    if (!hdrs) goto out;
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* never another scheme (file://, ...); https verified, which is curl's
     * default, said here so that no one turns it off by accident */
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", c->endpoint,
                 b.too_big ? "the response is too large" : curl_easy_strerror(cc));
        rc = KILN_EIO;
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    *resp = b.p ? b.p : strdup("");
    b.p = NULL;
    rc = *resp ? KILN_OK : KILN_ENOMEM;
out:
    curl_slist_free_all(hdrs);
    free(url);
    free(b.p);
    return rc;
}
