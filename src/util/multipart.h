/* src/util/multipart.h - the two-part multipart/related body of a Cloud
 * Storage "uploadType=multipart" upload: JSON metadata, then the media.
 *
 * The body can be far larger than memory should hold, so the parser sees only
 * its first bytes (`head`: the delimiter, the metadata part and the media
 * part's headers must lie there) and its last ones (`tail`: the closing
 * delimiter), and reports where the media lies within the whole body. Lines
 * may end in CRLF or, as Python's email package (gcloud's apitools) writes
 * them, in a bare LF. */
#ifndef KILN_UTIL_MULTIPART_H
#define KILN_UTIL_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"

typedef struct kiln_multipart {
    size_t meta_off, meta_len;   /* the first part's body, within head */
    char meta_type[128];         /* its Content-Type ("" when it has none) */
    char media_type[256];        /* the second part's Content-Type ("" when it has none) */
    uint64_t data_off, data_len; /* the second part's body, within the whole body */
} kiln_multipart;

/* Parses per the above; `content_type` is the request's Content-Type header.
 * head is the first hn bytes of a body of `total` bytes, tail its last tn.
 * KILN_OK, or KILN_EINVAL with a sentence in why. */
kiln_err kiln__multipart_related(const char *content_type, const char *head, size_t hn,
                                 const char *tail, size_t tn, uint64_t total, kiln_multipart *out,
                                 char *why, size_t whylen);

#endif
