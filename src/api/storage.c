/* src/api/storage.c - the Cloud Storage JSON API subset that gcloud's uploads
 * (ai-platform --staging-bucket, gcloud storage cp/ls/cat) and a user's
 * look-ups need, over the staging store (include/kiln/objects.h):
 *
 *   GET    /storage/v1/b?project=P                 buckets.list (the held ones)
 *   GET    /storage/v1/b/B                         buckets.get
 *   GET    /storage/v1/b/B/o?prefix=&delimiter=&pageToken=&maxResults=   objects.list
 *   GET    /storage/v1/b/B/o/NAME[?alt=media]      objects.get (metadata or bytes)
 *   GET    /download/storage/v1/b/B/o/NAME?alt=media                    the bytes
 *   DELETE /storage/v1/b/B/o/NAME                  objects.delete
 *   POST   /upload/storage/v1/b/B/o?uploadType=media&name=N             objects.insert
 *   POST   /upload/storage/v1/b/B/o?uploadType=multipart                metadata + bytes
 *   POST   /upload/storage/v1/b/B/o?uploadType=resumable[&name=N]       starts a session
 *          (also under /resumable/upload/storage/v1/, where apitools posts)
 *   PUT    /upload/storage/v1/b/B/o?uploadType=resumable&upload_id=ID   its bytes
 *
 * Buckets are kilnd's --bucket NAME[:PROJECT]: a bucket with a project is seen
 * only by that project's tokens (and "*" ones); any other bucket is a 404
 * naming it. Query parameters outside the subset are refused with a 400 that
 * names them. Upload bodies arrive spooled to an unlinked temp file (api.c). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api_int.h"
#include "kiln/objects.h"
#include "util/base64.h"
#include "util/hex.h"
#include "util/multipart.h"

#define META_MAX     (1u << 20) /* the JSON metadata of an upload */
#define SPOOL_EXTRA  (1u << 20) /* multipart framing and metadata beyond the object */
#define HEAD_BYTES   (META_MAX + 65536)
#define TAIL_BYTES   4096
#define MAX_SESSIONS 64
#define SESSION_TTL  (24 * 3600) /* seconds an idle resumable session is kept */

/* A resumable upload between its POST and its last PUT (memory only: a
 * kilnd restart ends it, and the client starts again). */
typedef struct session {
    char id[33];
    char bucket[64];
    char *name, *content_type;
    int64_t total; /* -1: not yet known */
    int64_t if_generation;
    kiln_object_writer *w;
    time_t touched;
    bool busy; /* a PUT is writing to it */
} session;

static struct {
    pthread_mutex_t mu;
    session v[MAX_SESSIONS];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void session_clear(session *s)
{
    if (s->w) kiln_objects_writer_abort(s->w);
    free(s->name);
    free(s->content_type);
    memset(s, 0, sizeof *s);
}

void kiln__api_storage_free(kilnd *d)
{
    (void)d;
    pthread_mutex_lock(&S.mu);
    for (size_t i = 0; i < MAX_SESSIONS; i++)
        session_clear(&S.v[i]);
    pthread_mutex_unlock(&S.mu);
}

/* ---------- what api.c asks ---------- */

static bool has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

bool kiln__api_storage_owns(const char *url)
{
    return has_prefix(url, "/storage/v1/") || has_prefix(url, "/upload/storage/v1/") ||
           has_prefix(url, "/resumable/upload/storage/v1/") ||
           has_prefix(url, "/download/storage/v1/");
}

bool kiln__api_storage_spools(const char *url, const char *method)
{
    return (has_prefix(url, "/upload/storage/v1/") ||
            has_prefix(url, "/resumable/upload/storage/v1/")) &&
           (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0);
}

uint64_t kiln__api_storage_cap(const kilnd *d)
{
    return d->max_object + SPOOL_EXTRA;
}

int kiln__api_storage_spool_open(kilnd *d)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp/spool-XXXXXX", kiln_objects_root(d->objects));
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0) unlink(tmp); /* gone with the connection, whatever happens */
    return fd;
}

/* ---------- the resources ---------- */

static void rfc3339(int64_t ns, char *buf, size_t len)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)((ns / 1000000) % 1000));
}

static const char *host_of(kilnd *d, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    return h && *h && strlen(h) < 256 && !strpbrk(h, "/ \r\n") ? h : d->listen;
}

/* name percent-encoded for a URL path or query */
static void url_escape(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("-._~", ch))
            out[o++] = (char)ch;
        else
            o += (size_t)snprintf(out + o, len - o, "%%%02X", ch);
    }
    out[o] = '\0';
}

static json_t *object_json(kilnd *d, struct MHD_Connection *c, const kiln_object_meta *m)
{
    char created[40], updated[40], num[3][32], esc[3 * KILN_OBJECT_NAME_MAX + 1];
    char *id = NULL, *self = NULL, *media = NULL;
    const char *host = host_of(d, c);
    rfc3339(m->created_ns, created, sizeof created);
    rfc3339(m->updated_ns, updated, sizeof updated);
    snprintf(num[0], sizeof num[0], "%lld", (long long)m->generation);
    snprintf(num[1], sizeof num[1], "%lld", (long long)m->metageneration);
    snprintf(num[2], sizeof num[2], "%llu", (unsigned long long)m->size);
    url_escape(m->name, esc, sizeof esc);
    if (asprintf(&id, "%s/%s/%s", m->bucket, m->name, num[0]) < 0) id = NULL;
    if (asprintf(&self, "http://%s/storage/v1/b/%s/o/%s", host, m->bucket, esc) < 0) self = NULL;
    if (asprintf(&media, "http://%s/download/storage/v1/b/%s/o/%s?generation=%s&alt=media", host,
                 m->bucket, esc, num[0]) < 0)
        media = NULL;
    json_t *o = NULL;
    if (id && self && media)
        o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "kind",
                      "storage#object", "id", id, "selfLink", self, "mediaLink", media, "name",
                      m->name, "bucket", m->bucket, "generation", num[0], "metageneration", num[1],
                      "contentType", m->content_type, "storageClass", "STANDARD", "size", num[2],
                      "md5Hash", m->md5, "crc32c", m->crc32c, "etag", m->etag, "timeCreated",
                      created, "updated", updated);
    free(id);
    free(self);
    free(media);
    return o;
}

static json_t *bucket_json(const char *b)
{
    char etag[16];
    kiln_b64_encode((const unsigned char *)"1", 1, 0, etag);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "kind", "storage#bucket", "id", b, "name",
                     b, "projectNumber", "0", "metageneration", "1", "location", "KILN-LOCAL",
                     "storageClass", "STANDARD", "etag", etag);
}

/* ---------- query parameters: the subset, and nothing else ---------- */

typedef struct qcheck {
    const char *const *allowed;
    char bad[80];
} qcheck;

static enum MHD_Result q_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value)
{
    qcheck *q = cls;
    (void)kind, (void)value;
    for (const char *const *a = q->allowed; *a; a++)
        if (strcmp(*a, key) == 0) return MHD_YES;
    if (!q->bad[0]) snprintf(q->bad, sizeof q->bad, "%s", key);
    return MHD_YES;
}

/* Refuses query parameters outside `allowed` and those every call takes:
 * alt (json or media, checked where it matters), prettyPrint, and fields and
 * projection, whose answer kilnd gives in full (a superset of what they ask:
 * kilnd has no ACLs to leave out). */
static bool query_ok(struct MHD_Connection *c, const char *const *allowed, char *bad, size_t blen)
{
    static const char *const common[] = {"alt", "prettyPrint", "fields", "projection", NULL};
    const char *all[24];
    size_t n = 0;
    for (const char *const *a = common; *a; a++)
        all[n++] = *a;
    for (const char *const *a = allowed; *a && n + 1 < sizeof all / sizeof *all; a++)
        all[n++] = *a;
    all[n] = NULL;
    qcheck q = {.allowed = all};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, q_iter, &q);
    if (!q.bad[0]) return true;
    snprintf(bad, blen, "%s", q.bad);
    return false;
}

static const char *arg(struct MHD_Connection *c, const char *k)
{
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

/* ifGenerationMatch / generation: -1 when absent; false when not a number */
static bool int_arg(struct MHD_Connection *c, const char *k, int64_t *v)
{
    const char *s = arg(c, k);
    char *end;
    *v = -1;
    if (!s) return true;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || !*s || *end || n < 0) return false;
    *v = n;
    return true;
}

/* ---------- buckets ---------- */

/* Whether the caller sees the bucket (held, and its project visible). */
static bool sees_bucket(kilnd *d, const kiln_api_auth *a, const char *b)
{
    const char *proj = NULL;
    if (!kiln_objects_holds(d->objects, b, &proj)) return false;
    return !proj || kiln__api_sees(a, proj);
}

static enum MHD_Result no_bucket(struct MHD_Connection *c, const char *b)
{
    return send_error(c, 404, NULL,
                      "The specified bucket does not exist: kilnd does not hold bucket '%.80s' "
                      "(kilnd --bucket NAME[:PROJECT] names the buckets it holds)",
                      b);
}

static enum MHD_Result bucket_list(kilnd *d, struct MHD_Connection *c, const kiln_api_auth *a)
{
    static const char *const ok[] = {"project", "maxResults", "pageToken", "prefix", NULL};
    char bad[80];
    if (!query_ok(c, ok, bad, sizeof bad))
        return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'", bad);
    const char *pt = arg(c, "pageToken");
    if (pt && *pt) return send_error(c, 400, NULL, "pageToken: not a page token this server gave");
    json_t *o = json_object(), *items = json_array();
    const char *prefix = arg(c, "prefix");
    kiln_objects *ob = d->objects;
    for (size_t i = 0;; i++) {
        const char *name = kiln_objects_bucket_at(ob, i);
        if (!name) break;
        if (!sees_bucket(d, a, name) || (prefix && !has_prefix(name, prefix))) continue;
        json_t *b = bucket_json(name);
        if (b) json_array_append_new(items, b);
    }
    json_object_set_new(o, "kind", json_string("storage#buckets"));
    if (json_array_size(items)) json_object_set(o, "items", items);
    json_decref(items);
    return send_json(c, 200, o);
}

/* ---------- objects ---------- */

static enum MHD_Result object_list(kilnd *d, struct MHD_Connection *c, const char *b)
{
    static const char *const ok[] = {"prefix",
                                     "delimiter",
                                     "pageToken",
                                     "maxResults",
                                     "versions",
                                     "userProject",
                                     "includeFoldersAsPrefixes",
                                     NULL};
    char bad[80], *end;
    kiln_object_list l = {0};
    size_t max = KILN_OBJECTS_LIST_MAX;
    if (!query_ok(c, ok, bad, sizeof bad))
        return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'", bad);
    const char *v = arg(c, "versions");
    if (v && strcmp(v, "false") != 0)
        return send_error(c, 400, NULL, "versions=true: kilnd keeps no object versions");
    /* kilnd has no managed folders: either value lists what GCS lists for a
     * bucket without them */
    const char *ifp = arg(c, "includeFoldersAsPrefixes");
    if (ifp && strcasecmp(ifp, "true") != 0 && strcasecmp(ifp, "false") != 0)
        return send_error(c, 400, NULL, "includeFoldersAsPrefixes is true or false");
    const char *up = arg(c, "userProject");
    if (up && *up) return send_error(c, 400, NULL, "userProject: kilnd has no requester pays");
    const char *ms = arg(c, "maxResults");
    if (ms && *ms) {
        errno = 0;
        long long n = strtoll(ms, &end, 10);
        if (errno || *end || n < 1)
            return send_error(c, 400, NULL, "maxResults: '%.32s' is not a positive number", ms);
        if (n < (long long)max) max = (size_t)n;
    }
    const char *pt = arg(c, "pageToken");
    if (pt && *pt && pt[0] != 'n' && pt[0] != 'p')
        return send_error(c, 400, NULL, "pageToken: not a page token this server gave");
    kiln_err err = kiln_objects_list(d->objects, b, arg(c, "prefix"), arg(c, "delimiter"),
                                     pt && *pt ? pt : NULL, max, &l);
    if (err == KILN_ELIMIT)
        return send_error(c, 400, NULL,
                          "the listing would walk more than a million names: "
                          "give a longer prefix");
    if (err != KILN_OK) return send_error(c, 500, NULL, "cannot list: %s", kiln_err_str(err));
    json_t *o = json_pack("{s:s}", "kind", "storage#objects");
    json_t *items = json_array(), *prefixes = json_array();
    for (size_t i = 0; i < l.n; i++) {
        json_t *j = object_json(d, c, &l.items[i]);
        if (j) json_array_append_new(items, j);
    }
    for (size_t i = 0; i < l.n_prefixes; i++)
        json_array_append_new(prefixes, json_string(l.prefixes[i]));
    if (o && json_array_size(prefixes)) json_object_set(o, "prefixes", prefixes);
    if (o && json_array_size(items)) json_object_set(o, "items", items);
    if (o && l.next_token) json_object_set_new(o, "nextPageToken", json_string(l.next_token));
    json_decref(items);
    json_decref(prefixes);
    kiln_object_list_free(&l);
    return send_json(c, 200, o);
}

static enum MHD_Result not_found(struct MHD_Connection *c, const char *b, const char *name)
{
    return send_error(c, 404, NULL, "No such object: %.80s/%.400s", b, name);
}

/* Range: bytes=A-B | bytes=A- | bytes=-N (one range only). */
static int parse_range(const char *h, uint64_t size, uint64_t *from, uint64_t *to)
{
    unsigned long long a = 0, b = 0;
    char extra;
    if (strncmp(h, "bytes=", 6) != 0 || strchr(h, ',')) return -1;
    h += 6;
    if (h[0] == '-') {
        if (sscanf(h + 1, "%llu%c", &b, &extra) != 1 || b == 0) return -1;
        *from = b >= size ? 0 : size - b;
        *to = size ? size - 1 : 0;
    } else if (sscanf(h, "%llu-%llu%c", &a, &b, &extra) == 2) {
        if (b < a) return -1;
        *from = a;
        *to = b >= size ? size - 1 : b;
    } else if (sscanf(h, "%llu-%c", &a, &extra) == 1 && h[strlen(h) - 1] == '-') {
        *from = a;
        *to = size ? size - 1 : 0;
    } else {
        return -1;
    }
    return *from < size ? 0 : 1; /* 1: not satisfiable */
}

static enum MHD_Result object_media(kilnd *d, struct MHD_Connection *c, const char *b,
                                    const char *name, const kiln_object_meta *m)
{
    char path[PATH_MAX], hash[96], gen[32];
    uint64_t from = 0, to = m->size ? m->size - 1 : 0;
    bool partial = false;
    const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    if (rh) {
        int r = parse_range(rh, m->size, &from, &to);
        if (r < 0)
            return send_error(c, 400, NULL,
                              "Range: kilnd serves one range 'bytes=A-B', 'bytes=A-' or "
                              "'bytes=-N' (got '%.60s')",
                              rh);
        if (r > 0) return send_error_st(c, 416, "OUT_OF_RANGE", NULL, "Range not satisfiable");
        partial = true;
    }
    if (kiln_objects_path(d->objects, b, name, path, sizeof path) != KILN_OK)
        return not_found(c, b, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return not_found(c, b, name);
    uint64_t n = m->size ? to - from + 1 : 0;
    struct MHD_Response *r = MHD_create_response_from_fd_at_offset64(n, fd, from);
    if (!r) {
        close(fd);
        return send_error(c, 500, NULL, "out of memory");
    }
    snprintf(hash, sizeof hash, "crc32c=%s,md5=%s", m->crc32c, m->md5);
    snprintf(gen, sizeof gen, "%lld", (long long)m->generation);
    MHD_add_response_header(r, "Content-Type", m->content_type);
    MHD_add_response_header(r, "x-goog-hash", hash);
    MHD_add_response_header(r, "x-goog-generation", gen);
    char len[32];
    snprintf(len, sizeof len, "%llu", (unsigned long long)m->size);
    MHD_add_response_header(r, "x-goog-stored-content-length", len);
    MHD_add_response_header(r, "ETag", m->etag);
    if (partial) {
        char cr[96];
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)from,
                 (unsigned long long)to, (unsigned long long)m->size);
        MHD_add_response_header(r, "Content-Range", cr);
    }
    enum MHD_Result rc = kiln__api_queue(c, partial ? 206 : 200, r);
    return rc;
}

static enum MHD_Result object_get(kilnd *d, struct MHD_Connection *c, const char *b,
                                  const char *name, bool download)
{
    static const char *const ok[] = {"generation", "ifGenerationMatch", NULL};
    char bad[80];
    kiln_object_meta m = {0};
    int64_t gen = -1, igm = -1;
    enum MHD_Result rc;
    if (!query_ok(c, ok, bad, sizeof bad))
        return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'", bad);
    if (!int_arg(c, "generation", &gen) || !int_arg(c, "ifGenerationMatch", &igm))
        return send_error(c, 400, NULL, "generation and ifGenerationMatch are numbers");
    const char *alt = arg(c, "alt");
    bool media = download || (alt && strcmp(alt, "media") == 0);
    if (alt && strcmp(alt, "media") != 0 && strcmp(alt, "json") != 0)
        return send_error(c, 400, NULL, "alt: kilnd serves 'json' and 'media' (got '%.20s')", alt);
    kiln_err err = kiln_objects_stat(d->objects, b, name, &m);
    if (err == KILN_ENOTFOUND || (err == KILN_OK && gen >= 0 && m.generation != gen)) {
        rc = not_found(c, b, name);
        goto out;
    }
    if (err != KILN_OK) {
        rc = send_error(c, 500, NULL, "cannot read the object: %s", kiln_err_str(err));
        goto out;
    }
    if (igm >= 0 && m.generation != igm) {
        rc = send_error_st(c, 412, "FAILED_PRECONDITION", NULL,
                           "At least one of the pre-conditions you specified did not hold.");
        goto out;
    }
    rc = media ? object_media(d, c, b, name, &m) : send_json(c, 200, object_json(d, c, &m));
out:
    kiln_object_meta_clear(&m);
    return rc;
}

static enum MHD_Result object_delete(kilnd *d, struct MHD_Connection *c, const char *b,
                                     const char *name)
{
    static const char *const ok[] = {NULL};
    char bad[80];
    if (!query_ok(c, ok, bad, sizeof bad))
        return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'", bad);
    kiln_err err = kiln_objects_delete(d->objects, b, name);
    if (err == KILN_ENOTFOUND) return not_found(c, b, name);
    if (err != KILN_OK) return send_error(c, 500, NULL, "cannot delete: %s", kiln_err_str(err));
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    enum MHD_Result rc = kiln__api_queue(c, 204, r);
    return rc;
}

/* ---------- uploads ---------- */

/* Copies [off, off+n) of the spool into a writer. */
static kiln_err spool_copy(int fd, uint64_t off, uint64_t n, kiln_object_writer *w)
{
    char *buf = malloc(1 << 16);
    kiln_err err = KILN_ENOMEM;
    if (!buf) goto out;
    while (n) {
        size_t want = n < (1 << 16) ? (size_t)n : (1 << 16);
        ssize_t k = pread(fd, buf, want, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            err = KILN_EIO;
            goto out;
        }
        if ((err = kiln_objects_writer_write(w, buf, (size_t)k)) != KILN_OK) goto out;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    err = KILN_OK;
out:
    free(buf);
    return err;
}

static ssize_t pread_all(int fd, char *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* The upload's metadata: {"name", "contentType", "size", ...}; members
 * outside these are refused. *name and *ctype point into *out. */
static bool parse_meta(const char *s, size_t n, json_t **out, const char **name, const char **ctype,
                       char *why, size_t wl)
{
    static const char *const ok[] = {"name",    "contentType", "size", "bucket",
                                     "md5Hash", "crc32c",      NULL};
    json_error_t je;
    *out = NULL;
    *name = *ctype = NULL;
    if (n == 0) return true;
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        snprintf(why, wl, "the upload's metadata is not a JSON object: %s", j ? "" : je.text);
        json_decref(j);
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        bool known = false;
        for (const char *const *a = ok; *a; a++)
            known |= strcmp(*a, k) == 0;
        if (!known) {
            snprintf(why, wl,
                     "the object field '%.60s' is not supported by kilnd (it takes name, "
                     "contentType, size, md5Hash, crc32c)",
                     k);
            json_decref(j);
            return false;
        }
    }
    *name = json_string_value(json_object_get(j, "name"));
    *ctype = json_string_value(json_object_get(j, "contentType"));
    *out = j;
    return true;
}

/* The metadata's size/md5Hash/crc32c, when given, must match what arrived. */
static bool meta_matches(json_t *meta, const kiln_object_meta *m, char *why, size_t wl)
{
    const char *sz = json_string_value(json_object_get(meta, "size"));
    json_t *szn = json_object_get(meta, "size");
    const char *md5 = json_string_value(json_object_get(meta, "md5Hash"));
    const char *crc = json_string_value(json_object_get(meta, "crc32c"));
    unsigned long long want = 0;
    bool has = false;
    if (sz) {
        want = strtoull(sz, NULL, 10);
        has = true;
    } else if (json_is_integer(szn)) {
        want = (unsigned long long)json_integer_value(szn);
        has = true;
    }
    if (has && want != m->size) {
        snprintf(why, wl, "the metadata says size %llu, the upload holds %llu bytes", want,
                 (unsigned long long)m->size);
        return false;
    }
    if (md5 && strcmp(md5, m->md5) != 0) {
        snprintf(why, wl, "md5Hash %s does not match the upload's %s", md5, m->md5);
        return false;
    }
    if (crc && strcmp(crc, m->crc32c) != 0) {
        snprintf(why, wl, "crc32c %s does not match the upload's %s", crc, m->crc32c);
        return false;
    }
    return true;
}

static enum MHD_Result commit_reply(kilnd *d, struct MHD_Connection *c, kiln_object_writer *w,
                                    const char *b, const char *name, const char *ctype, int64_t igm,
                                    json_t *meta)
{
    kiln_object_meta m = {0};
    char why[256];
    enum MHD_Result rc;
    kiln_err err = kiln_objects_writer_commit(w, b, name, ctype, igm, &m);
    if (err == KILN_ECONFLICT)
        return send_error_st(c, 412, "FAILED_PRECONDITION", NULL,
                             "At least one of the pre-conditions you specified did not hold.");
    if (err == KILN_EEXIST)
        return send_error_st(c, 409, "FAILED_PRECONDITION", NULL,
                             "object '%.400s' conflicts with a directory of the same name or a "
                             "file on its path (kilnd keeps objects as files)",
                             name);
    if (err == KILN_ELIMIT)
        return send_error(c, 413, NULL, "The object is larger than %llu bytes (kilnd --max-object)",
                          (unsigned long long)kiln_objects_max_object(d->objects));
    if (err != KILN_OK)
        return send_error(c, 500, NULL, "cannot store the object: %s", kiln_err_str(err));
    if (meta && !meta_matches(meta, &m, why, sizeof why)) {
        kiln_objects_delete(d->objects, b, name);
        rc = send_error(c, 400, NULL, "%s", why);
        goto out;
    }
    rc = send_json(c, 200, object_json(d, c, &m));
out:
    kiln_object_meta_clear(&m);
    return rc;
}

/* Checks a name for an upload; NULL when fine, else the reply was sent. */
static bool bad_name(struct MHD_Connection *c, const char *name, enum MHD_Result *rc)
{
    const char *why = NULL;
    if (!name || !*name) {
        *rc = send_error(c, 400, NULL, "the object needs a name (the 'name' parameter or field)");
        return true;
    }
    if (!kiln_objects_valid_name(name, strlen(name), &why)) {
        *rc = send_error(c, 400, NULL, "object name '%.200s' refused: %s", name, why);
        return true;
    }
    return false;
}

static enum MHD_Result upload_simple(kilnd *d, struct MHD_Connection *c, const char *b,
                                     const kiln_api_req *rq, bool multipart, int64_t igm)
{
    kiln_object_writer *w = NULL;
    json_t *meta = NULL;
    char *head = NULL, *tail = NULL, why[256];
    const char *name = arg(c, "name"), *mname = NULL, *ctype = NULL;
    uint64_t off = 0, n = rq->spool_len;
    enum MHD_Result rc;

    ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    kiln_multipart mp; /* ctype may point into it */
    if (multipart) {
        size_t hn = n < HEAD_BYTES ? (size_t)n : HEAD_BYTES,
               tn = n < TAIL_BYTES ? (size_t)n : TAIL_BYTES;
        head = malloc(hn + 1);
        tail = malloc(tn + 1);
        if (!head || !tail || pread_all(rq->spool_fd, head, hn, 0) < 0 ||
            pread_all(rq->spool_fd, tail, tn, n - tn) < 0) {
            rc = send_error(c, 500, NULL, "cannot read the upload back");
            goto out;
        }
        if (kiln__multipart_related(ctype, head, hn, tail, tn, n, &mp, why, sizeof why) !=
            KILN_OK) {
            rc = send_error(c, 400, NULL, "uploadType=multipart: %s", why);
            goto out;
        }
        if (!parse_meta(head + mp.meta_off, mp.meta_len, &meta, &mname, &ctype, why, sizeof why)) {
            rc = send_error(c, 400, NULL, "%s", why);
            goto out;
        }
        const char *mb = json_string_value(json_object_get(meta, "bucket"));
        if (mb && strcmp(mb, b) != 0) {
            rc = send_error(c, 400, NULL, "the metadata names bucket '%.80s', the URL '%s'", mb, b);
            goto out;
        }
        if (name && mname && strcmp(name, mname) != 0) {
            rc = send_error(c, 400, NULL, "the name parameter and the metadata's name differ");
            goto out;
        }
        if (!name) name = mname;
        if (!ctype || !*ctype) ctype = mp.media_type;
        off = mp.data_off;
        n = mp.data_len;
    }
    if (bad_name(c, name, &rc)) goto out;
    if (n > kiln_objects_max_object(d->objects)) {
        rc = send_error(c, 413, NULL, "The object is larger than %llu bytes (kilnd --max-object)",
                        (unsigned long long)kiln_objects_max_object(d->objects));
        goto out;
    }
    if (kiln_objects_writer_new(d->objects, &w) != KILN_OK ||
        spool_copy(rq->spool_fd, off, n, w) != KILN_OK) {
        rc = send_error(c, 500, NULL, "cannot store the upload");
        goto out;
    }
    rc = commit_reply(d, c, w, b, name, ctype, igm, meta);
    w = NULL; /* the commit frees it */
out:
    kiln_objects_writer_abort(w);
    json_decref(meta);
    free(head);
    free(tail);
    return rc;
}

static void new_id(char id[33])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)((ts.tv_nsec >> (i % 8)) ^ (uintptr_t)&ts ^ i);
    }
    kiln_hex(r, sizeof r, id);
}

static enum MHD_Result resumable_start(kilnd *d, struct MHD_Connection *c, const char *b,
                                       const kiln_api_req *rq, int64_t igm)
{
    json_t *meta = NULL;
    char why[256], *body = NULL, *loc = NULL;
    const char *mname = NULL, *ctype = NULL, *name = arg(c, "name");
    enum MHD_Result rc;
    session *s = NULL;

    if (rq->spool_len > META_MAX) {
        rc = send_error(c, 413, NULL, "the metadata of a resumable upload is over %u bytes",
                        META_MAX);
        goto out;
    }
    body = malloc(rq->spool_len + 1);
    if (!body || pread_all(rq->spool_fd, body, (size_t)rq->spool_len, 0) < 0) {
        rc = send_error(c, 500, NULL, "cannot read the request back");
        goto out;
    }
    if (!parse_meta(body, (size_t)rq->spool_len, &meta, &mname, &ctype, why, sizeof why)) {
        rc = send_error(c, 400, NULL, "%s", why);
        goto out;
    }
    if (name && mname && strcmp(name, mname) != 0) {
        rc = send_error(c, 400, NULL, "the name parameter and the metadata's name differ");
        goto out;
    }
    if (!name) name = mname;
    if (bad_name(c, name, &rc)) goto out;
    if (!ctype) ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Upload-Content-Type");
    const char *tl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Upload-Content-Length");
    int64_t total = tl && *tl ? strtoll(tl, NULL, 10) : -1;
    if (total > (int64_t)kiln_objects_max_object(d->objects)) {
        rc = send_error(c, 413, NULL, "The object is larger than %llu bytes (kilnd --max-object)",
                        (unsigned long long)kiln_objects_max_object(d->objects));
        goto out;
    }
    pthread_mutex_lock(&S.mu);
    time_t now = time(NULL);
    for (size_t i = 0; i < MAX_SESSIONS; i++) {
        if (S.v[i].id[0] && !S.v[i].busy && now - S.v[i].touched > SESSION_TTL)
            session_clear(&S.v[i]);
        if (!s && !S.v[i].id[0]) s = &S.v[i];
    }
    if (s) {
        new_id(s->id);
        snprintf(s->bucket, sizeof s->bucket, "%s", b);
        s->name = strdup(name);
        s->content_type = ctype ? strdup(ctype) : NULL;
        s->total = total;
        s->if_generation = igm;
        s->touched = now;
        if (!s->name || kiln_objects_writer_new(d->objects, &s->w) != KILN_OK) {
            session_clear(s);
            s = NULL;
        } else if (asprintf(&loc,
                            "http://%s/upload/storage/v1/b/%s/o?uploadType=resumable&upload_id=%s",
                            host_of(d, c), b, s->id) < 0) {
            loc = NULL;
        }
    }
    pthread_mutex_unlock(&S.mu);
    if (!s || !loc) {
        rc = send_error_st(c, 429, "RESOURCE_EXHAUSTED", NULL,
                           "kilnd holds %d resumable uploads at most; finish one first",
                           MAX_SESSIONS);
        goto out;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        rc = MHD_NO;
        goto out;
    }
    MHD_add_response_header(r, "Location", loc);
    MHD_add_response_header(r, "X-GUploader-UploadID", s->id);
    rc = kiln__api_queue(c, 200, r);
out:
    free(loc);
    free(body);
    json_decref(meta);
    return rc;
}

static enum MHD_Result send_308(struct MHD_Connection *c, uint64_t have)
{
    char range[64];
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (have) {
        snprintf(range, sizeof range, "bytes=0-%llu", (unsigned long long)have - 1);
        MHD_add_response_header(r, "Range", range);
    }
    enum MHD_Result rc = kiln__api_queue(c, 308, r);
    return rc;
}

/* PUT to a session. Content-Range is "bytes A-B/T" (T may be a star: the
 * total not known yet), "bytes STAR/T" (a status query, or the end of an
 * upload whose bytes all came), or absent (the whole object at once). */
static enum MHD_Result resumable_put(kilnd *d, struct MHD_Connection *c, const char *b,
                                     const kiln_api_req *rq)
{
    const char *id = arg(c, "upload_id");
    const char *cr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Range");
    session *s = NULL;
    unsigned long long a = 0, e = 0, t = 0;
    long long total = -1;
    bool query = false;
    enum MHD_Result rc;
    char star;

    if (cr) {
        if (sscanf(cr, "bytes */%llu", &t) == 1) {
            query = true;
            total = (long long)t;
        } else if (sscanf(cr, "bytes */%c", &star) == 1 && star == '*') {
            query = true;
        } else if (sscanf(cr, "bytes %llu-%llu/%llu", &a, &e, &t) == 3) {
            total = (long long)t;
        } else if (!(sscanf(cr, "bytes %llu-%llu/%c", &a, &e, &star) == 3 && star == '*')) {
            return send_error(c, 400, NULL, "Content-Range '%.60s' is not 'bytes A-B/T'", cr);
        }
        if (!query && (e < a || e - a + 1 != rq->spool_len))
            return send_error(c, 400, NULL,
                              "Content-Range '%.60s' does not match the %llu bytes "
                              "sent",
                              cr, (unsigned long long)rq->spool_len);
    } else {
        total = (long long)rq->spool_len;
    }
    pthread_mutex_lock(&S.mu);
    for (size_t i = 0; id && i < MAX_SESSIONS; i++)
        if (S.v[i].id[0] && strcmp(S.v[i].id, id) == 0 && strcmp(S.v[i].bucket, b) == 0)
            s = &S.v[i];
    if (s && s->busy) {
        pthread_mutex_unlock(&S.mu);
        return send_error_st(c, 409, "ABORTED", NULL, "another request is writing this upload");
    }
    if (s) s->busy = true;
    pthread_mutex_unlock(&S.mu);
    if (!s)
        return send_error(c, 404, NULL,
                          "no resumable upload '%.40s' in bucket %s (kilnd keeps sessions in "
                          "memory: start again after a restart)",
                          id ? id : "", b);
    uint64_t have = kiln_objects_writer_size(s->w);
    if (total >= 0 && s->total >= 0 && total != s->total) {
        rc = send_error(c, 400, NULL, "the upload's total size changed from %lld to %lld",
                        (long long)s->total, total);
        goto release;
    }
    if (total >= 0) s->total = total;
    if (!query) {
        if (a != have) {
            /* GCS answers a gap or an overlap with where it stands */
            rc = send_308(c, have);
            goto release;
        }
        kiln_err err = spool_copy(rq->spool_fd, 0, rq->spool_len, s->w);
        if (err == KILN_ELIMIT) {
            pthread_mutex_lock(&S.mu);
            session_clear(s);
            pthread_mutex_unlock(&S.mu);
            return send_error(c, 413, NULL,
                              "The object is larger than %llu bytes (kilnd --max-object)",
                              (unsigned long long)kiln_objects_max_object(d->objects));
        }
        if (err != KILN_OK) {
            rc = send_error(c, 500, NULL, "cannot store the bytes: %s", kiln_err_str(err));
            goto release;
        }
        have = kiln_objects_writer_size(s->w);
    }
    if (s->total >= 0 && have > (uint64_t)s->total) {
        rc = send_error(c, 400, NULL, "the upload holds more than its total of %lld bytes",
                        (long long)s->total);
        goto release;
    }
    if (s->total < 0 || have < (uint64_t)s->total) {
        rc = send_308(c, have);
        goto release;
    }
    /* complete: commit outside the sessions lock (it fsyncs) */
    pthread_mutex_lock(&S.mu);
    kiln_object_writer *w = s->w;
    char *name = s->name, *ctype = s->content_type;
    int64_t igm = s->if_generation;
    s->w = NULL;
    s->name = s->content_type = NULL;
    session_clear(s);
    pthread_mutex_unlock(&S.mu);
    rc = commit_reply(d, c, w, b, name, ctype, igm, NULL);
    free(name);
    free(ctype);
    return rc;
release:
    pthread_mutex_lock(&S.mu);
    s->busy = false;
    s->touched = time(NULL);
    pthread_mutex_unlock(&S.mu);
    return rc;
}

static enum MHD_Result upload(kilnd *d, struct MHD_Connection *c, const char *method, const char *b,
                              const kiln_api_req *rq)
{
    static const char *const ok[] = {"uploadType", "name", "upload_id", "ifGenerationMatch", NULL};
    char bad[80];
    int64_t igm = -1;
    if (!query_ok(c, ok, bad, sizeof bad))
        return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'", bad);
    if (!int_arg(c, "ifGenerationMatch", &igm))
        return send_error(c, 400, NULL, "ifGenerationMatch is a number");
    const char *ut = arg(c, "uploadType");
    if (rq->spool_fd < 0) return send_error(c, 500, NULL, "the upload was not spooled");
    if (!ut)
        return send_error(c, 400, NULL, "uploadType is required (media, multipart, resumable)");
    if (strcmp(method, "PUT") == 0) {
        if (strcmp(ut, "resumable") != 0 || !arg(c, "upload_id"))
            return send_error(c, 400, NULL, "PUT is for a resumable session's upload_id");
        return resumable_put(d, c, b, rq);
    }
    if (strcmp(ut, "media") == 0) return upload_simple(d, c, b, rq, false, igm);
    if (strcmp(ut, "multipart") == 0) return upload_simple(d, c, b, rq, true, igm);
    if (strcmp(ut, "resumable") == 0) {
        if (arg(c, "upload_id")) return resumable_put(d, c, b, rq);
        return resumable_start(d, c, b, rq, igm);
    }
    return send_error(c, 400, NULL, "uploadType '%.20s': kilnd takes media, multipart, resumable",
                      ut);
}

/* ---------- dispatch ---------- */

enum MHD_Result kiln__api_storage(kilnd *d, struct MHD_Connection *c, const char *method,
                                  const char *url, const kiln_api_req *rq, const kiln_api_auth *a)
{
    char bucket[64];
    /* apitools starts resumable uploads at /resumable/upload/... */
    if (has_prefix(url, "/resumable/upload/")) url += 10;
    bool up = has_prefix(url, "/upload/"), down = has_prefix(url, "/download/");
    const char *p = url + (up ? 19 : down ? 21 : 12); /* past ".../storage/v1/" */
    bool read = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (!read && a->role != KILN_AUTH_EDITOR)
        return send_error(c, 403, NULL, "Permission denied: a viewer token cannot change objects");
    if (strcmp(p, "b") == 0 && !up && !down && read) return bucket_list(d, c, a);
    if (strncmp(p, "b/", 2) != 0) return send_error(c, 404, NULL, "no such resource: %.200s", url);
    p += 2;
    size_t bl = strcspn(p, "/");
    if (bl == 0 || bl >= sizeof bucket)
        return send_error(c, 404, NULL, "The specified bucket does not exist: '%.*s'",
                          (int)(bl > 80 ? 80 : bl), p);
    memcpy(bucket, p, bl);
    bucket[bl] = '\0';
    if (!sees_bucket(d, a, bucket)) {
        const char *owner = NULL;
        /* held for another project: the 404 hides it, audited as denied */
        if (kiln_objects_holds(d->objects, bucket, &owner)) kiln__api_note_hidden();
        return no_bucket(c, bucket);
    }
    p += bl;
    if (!*p && !up && !down) {
        static const char *const ok[] = {NULL};
        char bad[80];
        if (!read) return send_error(c, 405, NULL, "kilnd's buckets are set by kilnd --bucket");
        if (!query_ok(c, ok, bad, sizeof bad))
            return send_error(c, 400, NULL, "kilnd does not implement the query parameter '%s'",
                              bad);
        return send_json(c, 200, bucket_json(bucket));
    }
    if (strcmp(p, "/o") == 0 || strcmp(p, "/o/") == 0) {
        if (up) return upload(d, c, method, bucket, rq);
        if (read && !down) return object_list(d, c, bucket);
        return send_error(c, 405, NULL, "use GET to list objects, POST /upload/... to add one");
    }
    if (strncmp(p, "/o/", 3) != 0 || up)
        return send_error(c, 404, NULL, "no such resource: %.200s", url);
    /* MHD has already percent-decoded the path: %2F in a name is a '/' here */
    const char *name = p + 3;
    if (strchr(name, '/') && strstr(name, "/compose"))
        return send_error(c, 400, NULL, "objects.compose is not implemented by kilnd");
    if (read) return object_get(d, c, bucket, name, down);
    if (strcmp(method, "DELETE") == 0 && !down) return object_delete(d, c, bucket, name);
    return send_error(c, 405, NULL, "kilnd implements GET and DELETE on an object (%s refused)",
                      method);
}

/* ---------- the gs:// URIs of a job ---------- */

/* gs://BUCKET/NAME -> bucket, name (pointing into uri). */
static bool split_uri(const char *uri, char bucket[64], const char **name)
{
    if (strncmp(uri, "gs://", 5) != 0) return false;
    const char *p = uri + 5, *sl = strchr(p, '/');
    size_t bl = sl ? (size_t)(sl - p) : strlen(p);
    if (bl == 0 || bl >= 64) return false;
    memcpy(bucket, p, bl);
    bucket[bl] = '\0';
    *name = sl ? sl + 1 : "";
    return true;
}

/* A directory URI (jobDir, a CustomJob's baseOutputDirectory): a gs:// one
 * must name a bucket this kilnd holds for the project, and a path in it. */
static void dir_uri_check(kilnd *d, const char *project, const char *jd, const char *field,
                          kiln_diag *dg)
{
    char bucket[64];
    const char *name, *proj, *why;
    if (!jd || strncmp(jd, "gs://", 5) != 0) return;
    char nm[KILN_OBJECT_NAME_MAX + 1];
    if (!split_uri(jd, bucket, &name) || !kiln_objects_holds(d->objects, bucket, &proj) ||
        (proj && strcmp(proj, project) != 0)) {
        kiln_diag_add(dg, field,
                      "'%s': kilnd does not hold that bucket for project %s (kilnd --bucket "
                      "NAME[:PROJECT])",
                      jd, project);
        return;
    }
    /* a trailing '/' is usual in a directory URI */
    snprintf(nm, sizeof nm, "%s", name);
    size_t n = strlen(nm);
    while (n && nm[n - 1] == '/')
        nm[--n] = '\0';
    if (!kiln_objects_valid_name(nm, n, &why))
        kiln_diag_add(dg, field, "'%s': a path in the bucket is needed: %s", jd, why);
}

/* A Model's artifactUri: a bucket this kilnd holds for the project, and a
 * directory in it (the URI with a '/' after it) with at least one object
 * under it; the bucket's root is not a Model's directory. */
void kiln__api_storage_check_prefix(kilnd *d, const char *project, const char *uri,
                                    const char *field, kiln_diag *dg)
{
    char bucket[64];
    const char *name, *proj;
    kiln_object_list l = {0};
    if (!split_uri(uri, bucket, &name) || !kiln_objects_holds(d->objects, bucket, &proj) ||
        (proj && strcmp(proj, project) != 0)) {
        kiln_diag_add(dg, field,
                      "'%s': kilnd does not hold that bucket for project %s (kilnd --bucket "
                      "NAME[:PROJECT])",
                      uri, project);
        return;
    }
    if (!*name) {
        kiln_diag_add(dg, field, "'%s': a path in the bucket is needed", uri);
        return;
    }
    /* a directory: gs://b/m names m/..., never m2/... */
    char pfx[KILN_OBJECT_NAME_MAX + 2];
    size_t n = strlen(name);
    if (n > KILN_OBJECT_NAME_MAX) {
        kiln_diag_add(dg, field, "'%.160s...': the path is too long", uri);
        return;
    }
    snprintf(pfx, sizeof pfx, "%s%s", name, name[n - 1] == '/' ? "" : "/");
    kiln_err err = kiln_objects_list(d->objects, bucket, pfx, NULL, NULL, 1, &l);
    if (err != KILN_OK)
        kiln_diag_add(dg, field, "'%s': cannot list it: %s", uri, kiln_err_str(err));
    else if (!l.n)
        kiln_diag_add(dg, field, "'%s': no object under it in kilnd's staging store", uri);
    kiln_object_list_free(&l);
}

void kiln__api_storage_check_job(kilnd *d, const char *project, const kiln_job *job, kiln_diag *dg)
{
    const kiln_training_input *ti = &job->training_input;
    char bucket[64];
    const char *name, *proj;
    if (!job->has_training_input) return;
    for (size_t i = 0; i < ti->package_uris.n; i++) {
        const char *u = ti->package_uris.v[i];
        char field[64];
        kiln_object_meta m = {0};
        snprintf(field, sizeof field, "trainingInput.packageUris[%zu]", i);
        if (strncmp(u, "gs://", 5) != 0) continue;
        if (!split_uri(u, bucket, &name) || !kiln_objects_holds(d->objects, bucket, &proj) ||
            (proj && strcmp(proj, project) != 0)) {
            kiln_diag_add(dg, field,
                          "'%s': kilnd does not hold that bucket for project %s (kilnd --bucket "
                          "NAME[:PROJECT])",
                          u, project);
            continue;
        }
        if (kiln_objects_stat(d->objects, bucket, name, &m) != KILN_OK)
            kiln_diag_add(dg, field, "'%s': no such object in kilnd's staging store", u);
        kiln_object_meta_clear(&m);
    }
    dir_uri_check(d, project, ti->job_dir, "trainingInput.jobDir", dg);
    /* a CustomJob's baseOutputDirectory: its replicas write under it */
    if (ti->has_vertex)
        dir_uri_check(d, project, ti->vertex.base_output_directory,
                      "trainingInput.vertex.baseOutputDirectory", dg);
}
