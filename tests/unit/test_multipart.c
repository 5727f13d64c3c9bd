/* test_multipart.c - util/multipart: where the media part of a Cloud
 * Storage multipart upload begins and ends, under LF framing (apitools,
 * gsutil) and CRLF framing (RFC 2046). The media's own bytes are kept
 * whatever they are: a last byte of '\r' under LF framing once cost an
 * upload its last byte (1 in 256 random files). */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "util/multipart.h"

/* parse BODY (length n) whole, as both head and tail: the media part */
static kiln_err media(const char *ctype, const char *body, size_t n, const char **data, size_t *dn,
                      char *why, size_t whylen)
{
    kiln_multipart mp;
    kiln_err e = kiln__multipart_related(ctype, body, n, body, n, n, &mp, why, whylen);
    if (e == KILN_OK) {
        *data = body + mp.data_off;
        *dn = (size_t)mp.data_len;
    }
    return e;
}

/* BODY framed with LF or CRLF line ends around MEDIA (mn bytes) */
static size_t frame(char *out, size_t cap, const char *nl, const char *m, size_t mn)
{
    int k = snprintf(out, cap,
                     "--b1%sContent-Type: application/json%s%s{\"name\": \"x\"}%s--b1%s"
                     "Content-Type: application/octet-stream%s%s",
                     nl, nl, nl, nl, nl, nl, nl);
    size_t n = (size_t)k;
    memcpy(out + n, m, mn);
    n += mn;
    n += (size_t)snprintf(out + n, cap - n, "%s--b1--%s", nl, nl);
    return n;
}

int main(void)
{
    const char *ct = "multipart/related; boundary='b1'";
    char body[512], why[256];
    const char *d = NULL;
    size_t dn = 0, n;

    /* LF framing: the media as it was, a last CR included */
    static const char *cases[] = {"abc", "abc\r", "\r", "a\r\n", "\r\r"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t mn = strlen(cases[i]);
        n = frame(body, sizeof body, "\n", cases[i], mn);
        CHECK(media(ct, body, n, &d, &dn, why, sizeof why) == KILN_OK);
        CHECK(dn == mn && memcmp(d, cases[i], mn) == 0);
    }
    /* CRLF framing: the CR before the close delimiter is the framing's */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t mn = strlen(cases[i]);
        n = frame(body, sizeof body, "\r\n", cases[i], mn);
        CHECK(media(ct, body, n, &d, &dn, why, sizeof why) == KILN_OK);
        CHECK(dn == mn && memcmp(d, cases[i], mn) == 0);
    }
    /* an empty media part, both ways */
    n = frame(body, sizeof body, "\n", "", 0);
    CHECK(media(ct, body, n, &d, &dn, why, sizeof why) == KILN_OK && dn == 0);
    n = frame(body, sizeof body, "\r\n", "", 0);
    CHECK(media(ct, body, n, &d, &dn, why, sizeof why) == KILN_OK && dn == 0);
    /* refusals still refuse */
    n = frame(body, sizeof body, "\n", "abc", 3);
    CHECK(media("multipart/related; boundary=zz", body, n, &d, &dn, why, sizeof why) != KILN_OK);
    CHECK(media("application/json", body, n, &d, &dn, why, sizeof why) != KILN_OK);
    body[n - 3] = 'x'; /* "--b1--" becomes "--b1x-": no close delimiter */
    CHECK(media(ct, body, n, &d, &dn, why, sizeof why) != KILN_OK);
    TEST_DONE();
}
