/* src/util/multipart.c - see multipart.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/multipart.h"

#define MAX_HEADERS 32

static const char *find(const char *h, size_t hn, const char *needle, size_t nn)
{
    if (nn == 0 || hn < nn) return NULL;
    return memmem(h, hn, needle, nn);
}

/* After a delimiter: optional blanks, then a line end. Returns the bytes
 * used, or 0. */
static size_t line_end(const char *p, const char *end)
{
    const char *q = p;
    while (q < end && (*q == ' ' || *q == '\t'))
        q++;
    if (q < end && *q == '\n') return (size_t)(q + 1 - p);
    if (q + 1 < end && q[0] == '\r' && q[1] == '\n') return (size_t)(q + 2 - p);
    return 0;
}

/* Reads a part's headers from p; *ctype gets Content-Type. Returns the
 * offset of the body from p, or 0 on an error (why set). */
static size_t part_headers(const char *p, const char *end, char *ctype, size_t clen, char *why,
                           size_t whylen)
{
    const char *q = p;
    ctype[0] = '\0';
    for (int n = 0; n <= MAX_HEADERS; n++) {
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        if (!nl) {
            snprintf(why, whylen, "a part's headers do not end (or lie past the first bytes)");
            return 0;
        }
        size_t ll = (size_t)(nl - q);
        if (ll && q[ll - 1] == '\r') ll--;
        if (ll == 0) return (size_t)(nl + 1 - p);
        const char *colon = memchr(q, ':', ll);
        if (!colon) {
            snprintf(why, whylen, "a part header is not 'Name: value'");
            return 0;
        }
        size_t nlen = (size_t)(colon - q);
        const char *v = colon + 1, *ve = q + ll;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t vl = (size_t)(ve - v);
        if (nlen == 12 && strncasecmp(q, "Content-Type", 12) == 0) {
            if (vl >= clen) {
                snprintf(why, whylen, "a part's Content-Type is longer than %zu bytes", clen - 1);
                return 0;
            }
            memcpy(ctype, v, vl);
            ctype[vl] = '\0';
        } else if (nlen == 25 && strncasecmp(q, "Content-Transfer-Encoding", 25) == 0) {
            if (!((vl == 6 && strncasecmp(v, "binary", 6) == 0) ||
                  (vl == 4 && strncasecmp(v, "8bit", 4) == 0) ||
                  (vl == 4 && strncasecmp(v, "7bit", 4) == 0))) {
                snprintf(why, whylen,
                         "Content-Transfer-Encoding '%.*s' is not supported (only binary, 8bit, "
                         "7bit)",
                         (int)(vl > 40 ? 40 : vl), v);
                return 0;
            }
        }
        q = nl + 1;
    }
    snprintf(why, whylen, "a part has more than %d headers", MAX_HEADERS);
    return 0;
}

kiln_err kiln__multipart_related(const char *content_type, const char *head, size_t hn,
                                 const char *tail, size_t tn, uint64_t total, kiln_multipart *out,
                                 char *why, size_t whylen)
{
    char delim[80 + 4];
    memset(out, 0, sizeof *out);
    if (!content_type || strncasecmp(content_type, "multipart/related", 17) != 0) {
        snprintf(why, whylen, "uploadType=multipart wants Content-Type multipart/related");
        return KILN_EINVAL;
    }
    /* the boundary parameter: bare, "quoted" or, as apitools writes it, 'quoted' */
    const char *b = strcasestr(content_type, "boundary=");
    if (!b) {
        snprintf(why, whylen, "the multipart/related Content-Type has no boundary");
        return KILN_EINVAL;
    }
    b += 9;
    size_t bl;
    if (*b == '"' || *b == '\'') {
        const char *e = strchr(b + 1, *b);
        if (!e) {
            snprintf(why, whylen, "the boundary's quotes do not close");
            return KILN_EINVAL;
        }
        bl = (size_t)(e - b - 1);
        b++;
    } else {
        bl = strcspn(b, "; \t");
    }
    if (bl == 0 || bl > 70) {
        snprintf(why, whylen, "a boundary is 1 to 70 characters (RFC 2046)");
        return KILN_EINVAL;
    }
    delim[0] = delim[1] = '-';
    memcpy(delim + 2, b, bl);
    size_t dl = bl + 2;
    const char *end = head + hn;

    /* the first delimiter: at the start or after a line end (a preamble) */
    const char *p = head;
    if (!(hn >= dl && memcmp(head, delim, dl) == 0)) {
        delim[dl] = '\0';
        const char *q = head;
        p = NULL;
        while ((q = find(q, (size_t)(end - q), delim, dl))) {
            if (q[-1] == '\n') {
                p = q;
                break;
            }
            q++;
        }
        if (!p) {
            snprintf(why, whylen, "the body does not start with the boundary delimiter");
            return KILN_EINVAL;
        }
    }
    p += dl;
    size_t le = line_end(p, end);
    if (!le) {
        snprintf(why, whylen, "the first boundary delimiter is not followed by a line end");
        return KILN_EINVAL;
    }
    /* the framing's line ends, as its first delimiter line has them: a CR
     * before the close delimiter is the framing's only under CRLF. With LF
     * framing (apitools) it is the media's last byte, which must be kept */
    bool crlf = le >= 2 && p[le - 2] == '\r';
    p += le;
    size_t ho = part_headers(p, end, out->meta_type, sizeof out->meta_type, why, whylen);
    if (!ho) return KILN_EINVAL;
    p += ho;
    out->meta_off = (size_t)(p - head);

    /* the metadata ends at "\n--BOUNDARY" (its CRLF or LF belongs to the delimiter) */
    char nd[84];
    nd[0] = '\n';
    memcpy(nd + 1, delim, dl);
    const char *q = find(p, (size_t)(end - p), nd, dl + 1);
    if (!q) {
        snprintf(why, whylen, "the metadata part does not end in the first bytes of the body");
        return KILN_EINVAL;
    }
    out->meta_len = (size_t)(q - p);
    if (out->meta_len && p[out->meta_len - 1] == '\r') out->meta_len--;
    p = q + 1 + dl;
    if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
        snprintf(why, whylen, "a multipart upload has two parts (metadata, media); this has one");
        return KILN_EINVAL;
    }
    if (!(le = line_end(p, end))) {
        snprintf(why, whylen, "the second boundary delimiter is not followed by a line end");
        return KILN_EINVAL;
    }
    p += le;
    ho = part_headers(p, end, out->media_type, sizeof out->media_type, why, whylen);
    if (!ho) return KILN_EINVAL;
    p += ho;
    out->data_off = (uint64_t)(p - head);

    /* the close delimiter "\n--BOUNDARY--": its last occurrence in the tail */
    char cd[88];
    memcpy(cd, nd, dl + 1);
    cd[dl + 1] = cd[dl + 2] = '-';
    size_t cl = dl + 3;
    const char *last = NULL;
    for (const char *s = tail; (s = find(s, (size_t)(tail + tn - s), cd, cl)); s++)
        last = s;
    if (!last) {
        snprintf(why, whylen, "the body does not end with the close delimiter '--BOUNDARY--'");
        return KILN_EINVAL;
    }
    uint64_t close_at = total - tn + (uint64_t)(last - tail);
    if (crlf && close_at > out->data_off && last > tail && last[-1] == '\r') close_at--;
    if (close_at < out->data_off) {
        snprintf(why, whylen, "the close delimiter comes before the media part's body");
        return KILN_EINVAL;
    }
    out->data_len = close_at - out->data_off;
    return KILN_OK;
}
