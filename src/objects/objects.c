/* src/objects/objects.c - the staging store (include/kiln/objects.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/objects.h"
#include "util/base64.h"
#include "util/crc32c.h"
#include "util/utf8.h"

#define MAX_BUCKETS 64
#define WALK_MAX    1000000 /* names one list may look at: a bound, not a goal */
#define SIDECAR_MAX 65536

typedef struct held {
    char name[64];
    char *project; /* NULL: every project */
} held;

struct kiln_objects {
    char *root;
    uint64_t max_object;
    held buckets[MAX_BUCKETS];
    size_t n_buckets;
    pthread_mutex_t mu; /* commits and deletes: data and sidecar change together */
};

struct kiln_object_writer {
    kiln_objects *o;
    char tmp[PATH_MAX];
    int fd;
    uint64_t size;
    uint32_t crc;
    EVP_MD_CTX *md5;
    bool over;
};

void kiln_object_meta_clear(kiln_object_meta *m)
{
    free(m->name);
    free(m->content_type);
    memset(m, 0, sizeof *m);
}

/* ---------- helpers ---------- */

static int mkdirs(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static void fsync_dir_of(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void make_etag(kiln_object_meta *m)
{
    char raw[48];
    int n = snprintf(raw, sizeof raw, "%lld/%lld", (long long)m->generation,
                     (long long)m->metageneration);
    kiln_b64_encode((const unsigned char *)raw, (size_t)n, 0, m->etag);
}

static void set_hashes(kiln_object_meta *m, const unsigned char md5[16], uint32_t crc)
{
    unsigned char be[4] = {(unsigned char)(crc >> 24), (unsigned char)(crc >> 16),
                           (unsigned char)(crc >> 8), (unsigned char)crc};
    kiln_b64_encode(md5, 16, 0, m->md5);
    kiln_b64_encode(be, 4, 0, m->crc32c);
}

/* ---------- the store ---------- */

kiln_err kiln_objects_open(const char *root, uint64_t max_object, kiln_objects **out)
{
    char p[PATH_MAX];
    kiln_objects *o = calloc(1, sizeof *o);
    kiln_err err = KILN_ENOMEM;
    *out = NULL;
    if (!o || !(o->root = strdup(root))) goto out;
    o->max_object = max_object;
    pthread_mutex_init(&o->mu, NULL);
    err = KILN_EIO;
    snprintf(p, sizeof p, "%s/.tmp", root);
    if (mkdirs(p) < 0) goto out;
    snprintf(p, sizeof p, "%s/.meta", root);
    if (mkdirs(p) < 0) goto out;
    *out = o;
    o = NULL;
    err = KILN_OK;
out:
    kiln_objects_close(o);
    return err;
}

void kiln_objects_close(kiln_objects *o)
{
    if (!o) return;
    for (size_t i = 0; i < o->n_buckets; i++)
        free(o->buckets[i].project);
    if (o->root) pthread_mutex_destroy(&o->mu);
    free(o->root);
    free(o);
}

uint64_t kiln_objects_max_object(const kiln_objects *o)
{
    return o->max_object;
}

const char *kiln_objects_root(const kiln_objects *o)
{
    return o->root;
}

bool kiln_objects_valid_bucket(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 3 || n > 63) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !((c == '-' || c == '_' || c == '.') && i > 0 && i + 1 < n)) return false;
    }
    return strstr(s, "..") == NULL;
}

kiln_err kiln_objects_add_bucket(kiln_objects *o, const char *bucket, const char *project)
{
    char p[PATH_MAX];
    if (!kiln_objects_valid_bucket(bucket)) return KILN_EINVAL;
    if (kiln_objects_holds(o, bucket, NULL)) return KILN_EEXIST;
    if (o->n_buckets == MAX_BUCKETS) return KILN_ELIMIT;
    held *h = &o->buckets[o->n_buckets];
    snprintf(h->name, sizeof h->name, "%s", bucket);
    h->project = project ? strdup(project) : NULL;
    if (project && !h->project) return KILN_ENOMEM;
    snprintf(p, sizeof p, "%s/.meta/%s", o->root, bucket);
    int rc = mkdirs(p);
    snprintf(p, sizeof p, "%s/%s", o->root, bucket);
    if (rc < 0 || mkdirs(p) < 0) {
        free(h->project);
        h->project = NULL;
        return KILN_EIO;
    }
    o->n_buckets++;
    return KILN_OK;
}

bool kiln_objects_holds(const kiln_objects *o, const char *bucket, const char **project)
{
    for (size_t i = 0; i < o->n_buckets; i++)
        if (strcmp(o->buckets[i].name, bucket) == 0) {
            if (project) *project = o->buckets[i].project;
            return true;
        }
    return false;
}

const char *kiln_objects_bucket_at(const kiln_objects *o, size_t i)
{
    return i < o->n_buckets ? o->buckets[i].name : NULL;
}

bool kiln_objects_valid_name(const char *name, size_t len, const char **why)
{
    static const char *w;
    if (!why) why = &w;
    if (len == 0 || len > KILN_OBJECT_NAME_MAX) {
        *why = "an object name is 1 to 1024 bytes long";
        return false;
    }
    if (memchr(name, '\0', len) || strlen(name) != len) {
        *why = "an object name cannot hold a NUL byte";
        return false;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
            *why = "an object name cannot hold control characters (CR, LF, ...)";
            return false;
        }
    if (!kiln__utf8_valid(name)) {
        *why = "an object name must be valid UTF-8";
        return false;
    }
    if (strncmp(name, ".well-known/acme-challenge/", 27) == 0) {
        *why = "an object name cannot start with .well-known/acme-challenge/";
        return false;
    }
    /* kiln keeps objects as files: every segment must be a file name */
    const char *seg = name, *end = name + len;
    while (seg <= end) {
        const char *sl = memchr(seg, '/', (size_t)(end - seg));
        size_t sn = (size_t)((sl ? sl : end) - seg);
        if (sn == 0) {
            *why = "kiln refuses object names with an empty segment (a leading, trailing or "
                   "doubled '/')";
            return false;
        }
        if ((sn == 1 && seg[0] == '.') || (sn == 2 && seg[0] == '.' && seg[1] == '.')) {
            *why = "an object name cannot hold a '.' or '..' segment";
            return false;
        }
        if (sn > 255) {
            *why = "kiln refuses object names with a segment over 255 bytes";
            return false;
        }
        if (!sl) break;
        seg = sl + 1;
    }
    return true;
}

static kiln_err paths(const kiln_objects *o, const char *bucket, const char *name, char *data,
                      char *meta)
{
    if (!kiln_objects_valid_bucket(bucket) || !kiln_objects_valid_name(name, strlen(name), NULL))
        return KILN_EINVAL;
    if (data && snprintf(data, PATH_MAX, "%s/%s/%s", o->root, bucket, name) >= PATH_MAX)
        return KILN_ELIMIT;
    if (meta && snprintf(meta, PATH_MAX, "%s/.meta/%s/%s", o->root, bucket, name) >= PATH_MAX)
        return KILN_ELIMIT;
    return KILN_OK;
}

kiln_err kiln_objects_path(const kiln_objects *o, const char *bucket, const char *name, char *buf,
                           size_t len)
{
    char data[PATH_MAX];
    kiln_err err = paths(o, bucket, name, data, NULL);
    if (err != KILN_OK) return err;
    if (strlen(data) >= len) return KILN_ELIMIT;
    memcpy(buf, data, strlen(data) + 1);
    return KILN_OK;
}

/* ---------- writing ---------- */

kiln_err kiln_objects_writer_new(kiln_objects *o, kiln_object_writer **out)
{
    kiln_object_writer *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return KILN_ENOMEM;
    w->o = o;
    w->fd = -1;
    snprintf(w->tmp, sizeof w->tmp, "%s/.tmp/up-XXXXXX", o->root);
    w->md5 = EVP_MD_CTX_new();
    if (!w->md5 || !EVP_DigestInit_ex(w->md5, EVP_md5(), NULL)) goto fail;
    w->fd = mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) goto fail;
    *out = w;
    return KILN_OK;
fail:
    w->tmp[0] = '\0';
    kiln_objects_writer_abort(w);
    return KILN_EIO;
}

kiln_err kiln_objects_writer_write(kiln_object_writer *w, const void *p, size_t n)
{
    const char *b = p;
    if (w->over || w->size + n > w->o->max_object) {
        w->over = true;
        return KILN_ELIMIT;
    }
    if (!EVP_DigestUpdate(w->md5, p, n)) return KILN_EINTERNAL;
    w->crc = kiln_crc32c_update(w->crc, p, n);
    for (size_t done = 0; done < n;) {
        ssize_t k = write(w->fd, b + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return KILN_EIO;
        done += (size_t)k;
    }
    w->size += n;
    return KILN_OK;
}

uint64_t kiln_objects_writer_size(const kiln_object_writer *w)
{
    return w->size;
}

void kiln_objects_writer_abort(kiln_object_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp[0] && strstr(w->tmp, "XXXXXX") == NULL) unlink(w->tmp);
    EVP_MD_CTX_free(w->md5);
    free(w);
}

static char *sidecar_text(const kiln_object_meta *m, int64_t file_mtime)
{
    json_t *j = json_pack(
        "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "contentType", m->content_type, "md5Hash", m->md5,
        "crc32c", m->crc32c, "size", (json_int_t)m->size, "generation", (json_int_t)m->generation,
        "metageneration", (json_int_t)m->metageneration, "createdNs", (json_int_t)m->created_ns,
        "updatedNs", (json_int_t)m->updated_ns, "mtimeNs", (json_int_t)file_mtime);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* temp + fsync + rename + dir fsync */
static kiln_err write_file_atomic(const kiln_objects *o, const char *path, const char *text)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp/meta-XXXXXX", o->root);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return KILN_EIO;
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) < 0) {
        unlink(tmp);
        return KILN_EIO;
    }
    fsync_dir_of(path);
    return KILN_OK;
}

/* The parent directories of `path` below `base`, none of them a file. */
static kiln_err make_parents(const char *base, const char *path)
{
    char buf[PATH_MAX];
    size_t bl = strlen(base);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + bl + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        struct stat st;
        if (mkdir(buf, 0755) < 0) {
            if (errno != EEXIST) return KILN_EIO;
            if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode)) return KILN_EEXIST;
        }
        *p = '/';
    }
    return KILN_OK;
}

kiln_err kiln_objects_writer_commit(kiln_object_writer *w, const char *bucket, const char *name,
                                    const char *content_type, int64_t if_generation,
                                    kiln_object_meta *out)
{
    kiln_objects *o = w->o;
    char data[PATH_MAX], meta[PATH_MAX], base[PATH_MAX], mbase[PATH_MAX];
    unsigned char md5[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    kiln_object_meta m = {0};
    char *side = NULL;
    struct stat st;
    bool locked = false;
    kiln_err err;

    memset(out, 0, sizeof *out);
    if ((err = paths(o, bucket, name, data, meta)) != KILN_OK) goto out;
    err = KILN_ELIMIT;
    if (w->over) goto out;
    err = KILN_EIO;
    if (!EVP_DigestFinal_ex(w->md5, md5, &mdlen) || mdlen != 16) goto out;
    if (fsync(w->fd) < 0 || fchmod(w->fd, 0644) < 0) goto out;
    snprintf(base, sizeof base, "%s/%s", o->root, bucket);
    snprintf(mbase, sizeof mbase, "%s/.meta/%s", o->root, bucket);
    pthread_mutex_lock(&o->mu);
    locked = true;
    if (if_generation >= 0) {
        kiln_object_meta cur = {0};
        pthread_mutex_unlock(&o->mu);
        kiln_err se = kiln_objects_stat(o, bucket, name, &cur);
        pthread_mutex_lock(&o->mu);
        bool match = (if_generation == 0 && se == KILN_ENOTFOUND) ||
                     (se == KILN_OK && cur.generation == if_generation);
        kiln_object_meta_clear(&cur);
        err = KILN_ECONFLICT;
        if (!match) goto out;
    }
    if ((err = make_parents(base, data)) != KILN_OK) goto out;
    if (stat(data, &st) == 0 && S_ISDIR(st.st_mode)) {
        err = KILN_EEXIST;
        goto out;
    }
    err = KILN_EIO;
    if (rename(w->tmp, data) < 0) goto out;
    w->tmp[0] = '\0';
    fsync_dir_of(data);
    if (stat(data, &st) < 0) goto out;
    m.size = w->size;
    m.created_ns = m.updated_ns = mtime_ns(&st);
    m.generation = m.created_ns / 1000;
    m.metageneration = 1;
    set_hashes(&m, md5, w->crc);
    make_etag(&m);
    snprintf(m.bucket, sizeof m.bucket, "%s", bucket);
    m.name = strdup(name);
    m.content_type =
        strdup(content_type && *content_type ? content_type : "application/octet-stream");
    err = KILN_ENOMEM;
    if (!m.name || !m.content_type || !(side = sidecar_text(&m, mtime_ns(&st)))) goto out;
    /* a sidecar that cannot be written leaves the object described from its
     * file (no contentType): the bytes are already safe */
    if (make_parents(mbase, meta) == KILN_OK) write_file_atomic(o, meta, side);
    *out = m;
    memset(&m, 0, sizeof m);
    err = KILN_OK;
out:
    if (locked) pthread_mutex_unlock(&o->mu);
    free(side);
    kiln_object_meta_clear(&m);
    kiln_objects_writer_abort(w);
    return err;
}

/* ---------- reading ---------- */

static kiln_err hash_file(const char *path, unsigned char md5[16], uint32_t *crc)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char *buf = malloc(1 << 16);
    unsigned int mdlen = 0;
    kiln_err err = KILN_EIO;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    *crc = 0;
    if (fd < 0 || !ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_md5(), NULL)) goto out;
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 16);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) goto out;
        if (n == 0) break;
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        *crc = kiln_crc32c_update(*crc, buf, (size_t)n);
    }
    if (EVP_DigestFinal_ex(ctx, md5, &mdlen) && mdlen == 16) err = KILN_OK;
out:
    if (fd >= 0) close(fd);
    EVP_MD_CTX_free(ctx);
    free(buf);
    return err;
}

/* The sidecar, when it still describes the file (same size and mtime). */
static bool read_sidecar(const char *path, const struct stat *st, kiln_object_meta *m)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    bool ok = false;
    const char *ct = NULL, *md5 = NULL, *crc = NULL;
    json_int_t size = -1, gen = 0, mgen = 0, cns = 0, uns = 0, mt = 0;
    if (!j) return false;
    if (json_unpack(j, "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "contentType", &ct, "md5Hash", &md5,
                    "crc32c", &crc, "size", &size, "generation", &gen, "metageneration", &mgen,
                    "createdNs", &cns, "updatedNs", &uns, "mtimeNs", &mt) == 0 &&
        size == (json_int_t)st->st_size && mt == mtime_ns(st) && strlen(md5) < sizeof m->md5 &&
        strlen(crc) < sizeof m->crc32c) {
        m->content_type = strdup(ct);
        snprintf(m->md5, sizeof m->md5, "%s", md5);
        snprintf(m->crc32c, sizeof m->crc32c, "%s", crc);
        m->generation = gen;
        m->metageneration = mgen;
        m->created_ns = cns;
        m->updated_ns = uns;
        ok = m->content_type != NULL;
    }
    json_decref(j);
    return ok;
}

kiln_err kiln_objects_stat(kiln_objects *o, const char *bucket, const char *name,
                           kiln_object_meta *out)
{
    char data[PATH_MAX], meta[PATH_MAX];
    kiln_object_meta m = {0};
    struct stat st;
    kiln_err err;

    memset(out, 0, sizeof *out);
    if ((err = paths(o, bucket, name, data, meta)) != KILN_OK)
        return err == KILN_EINVAL ? KILN_ENOTFOUND : err;
    /* lstat: a symlink a program left in a job dir is not an object (it
     * could point anywhere kilnd can read) */
    if (lstat(data, &st) < 0 || !S_ISREG(st.st_mode)) return KILN_ENOTFOUND;
    snprintf(m.bucket, sizeof m.bucket, "%s", bucket);
    m.name = strdup(name);
    m.size = (uint64_t)st.st_size;
    err = KILN_ENOMEM;
    if (!m.name) goto out;
    if (!read_sidecar(meta, &st, &m)) {
        /* written by a program (a job dir) or changed since: describe the file */
        unsigned char md5[16];
        uint32_t crc = 0;
        free(m.content_type);
        m.content_type = strdup("application/octet-stream");
        if (!m.content_type) goto out;
        if ((err = hash_file(data, md5, &crc)) != KILN_OK) goto out;
        set_hashes(&m, md5, crc);
        m.created_ns = m.updated_ns = mtime_ns(&st);
        m.generation = m.created_ns / 1000;
        m.metageneration = 1;
    }
    make_etag(&m);
    *out = m;
    memset(&m, 0, sizeof m);
    err = KILN_OK;
out:
    kiln_object_meta_clear(&m);
    return err;
}

kiln_err kiln_objects_delete(kiln_objects *o, const char *bucket, const char *name)
{
    char data[PATH_MAX], meta[PATH_MAX];
    struct stat st;
    kiln_err err = paths(o, bucket, name, data, meta);
    if (err != KILN_OK) return err == KILN_EINVAL ? KILN_ENOTFOUND : err;
    pthread_mutex_lock(&o->mu);
    if (lstat(data, &st) < 0 || !S_ISREG(st.st_mode))
        err = KILN_ENOTFOUND;
    else if (unlink(data) < 0)
        err = KILN_EIO;
    else {
        unlink(meta);
        fsync_dir_of(data);
    }
    pthread_mutex_unlock(&o->mu);
    return err;
}

/* ---------- listing ---------- */

typedef struct names {
    char **v;
    size_t n, cap;
    bool over;
} names;

static int push_name(names *ns, const char *s)
{
    if (ns->n == WALK_MAX) {
        ns->over = true;
        return -1;
    }
    if (ns->n == ns->cap) {
        size_t nc = ns->cap ? ns->cap * 2 : 64;
        char **nv = realloc(ns->v, nc * sizeof *nv);
        if (!nv) return -1;
        ns->v = nv;
        ns->cap = nc;
    }
    if (!(ns->v[ns->n] = strdup(s))) return -1;
    ns->n++;
    return 0;
}

/* Every regular file under dir, as names relative to the bucket (rel). */
static int walk(const char *dir, const char *rel, const char *prefix, names *ns)
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    int rc = 0;
    if (!dd) return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
    while (rc == 0 && (e = readdir(dd))) {
        char path[PATH_MAX], name[PATH_MAX];
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (snprintf(name, sizeof name, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >
            KILN_OBJECT_NAME_MAX)
            continue;
        if (lstat(path, &st) < 0) continue;
        /* prune subtrees that cannot hold the prefix */
        size_t nl = strlen(name), pl = strlen(prefix);
        if (strncmp(name, prefix, nl < pl ? nl : pl) != 0) continue;
        if (S_ISDIR(st.st_mode))
            rc = walk(path, name, prefix, ns);
        else if (S_ISREG(st.st_mode) && nl >= pl && strstr(e->d_name, "\n") == NULL)
            rc = push_name(ns, name);
    }
    closedir(dd);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void kiln_object_list_free(kiln_object_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        kiln_object_meta_clear(&l->items[i]);
    for (size_t i = 0; i < l->n_prefixes; i++)
        free(l->prefixes[i]);
    free(l->items);
    free(l->prefixes);
    free(l->next_token);
    memset(l, 0, sizeof *l);
}

kiln_err kiln_objects_list(kiln_objects *o, const char *bucket, const char *prefix,
                           const char *delimiter, const char *token, size_t max,
                           kiln_object_list *out)
{
    char dir[PATH_MAX];
    names ns = {0};
    kiln_err err = KILN_ENOMEM;
    const char *last = NULL;
    bool last_is_prefix = false;

    memset(out, 0, sizeof *out);
    if (!prefix) prefix = "";
    if (delimiter && !*delimiter) delimiter = NULL;
    if (max == 0 || max > KILN_OBJECTS_LIST_MAX) max = KILN_OBJECTS_LIST_MAX;
    if (!kiln_objects_valid_bucket(bucket)) return KILN_ENOTFOUND;
    snprintf(dir, sizeof dir, "%s/%s", o->root, bucket);
    if (walk(dir, "", prefix, &ns) < 0) {
        err = ns.over ? KILN_ELIMIT : KILN_EIO;
        goto out;
    }
    if (ns.n) qsort(ns.v, ns.n, sizeof *ns.v, cmp_names); /* NULL with none: UB for qsort */
    out->items = calloc(max, sizeof *out->items);
    out->prefixes = calloc(max, sizeof *out->prefixes);
    if (!out->items || !out->prefixes) goto out;
    /* the page token is the last name ("n" + name) or prefix ("p" + prefix)
     * returned: the next page starts after it, and after all a prefix covers */
    const char *tk = token && (token[0] == 'n' || token[0] == 'p') ? token + 1 : NULL;
    bool tk_prefix = tk && token[0] == 'p';
    size_t tl = tk ? strlen(tk) : 0;
    for (size_t i = 0; i < ns.n; i++) {
        const char *n = ns.v[i];
        if (tk && (strcmp(n, tk) <= 0 || (tk_prefix && strncmp(n, tk, tl) == 0))) continue;
        const char *rest = n + strlen(prefix);
        const char *dl = delimiter ? strstr(rest, delimiter) : NULL;
        if (dl) {
            size_t pl = (size_t)(dl - n) + strlen(delimiter);
            if (last_is_prefix && strlen(last) == pl && strncmp(last, n, pl) == 0) continue;
            if (out->n + out->n_prefixes == max) {
                if (asprintf(&out->next_token, "%c%s", last_is_prefix ? 'p' : 'n', last) < 0)
                    goto out;
                break;
            }
            char *p = strndup(n, pl);
            if (!p) goto out;
            out->prefixes[out->n_prefixes++] = p;
            last = p;
            last_is_prefix = true;
            continue;
        }
        if (out->n + out->n_prefixes == max) {
            if (asprintf(&out->next_token, "%c%s", last_is_prefix ? 'p' : 'n', last) < 0) goto out;
            break;
        }
        kiln_err se = kiln_objects_stat(o, bucket, n, &out->items[out->n]);
        if (se == KILN_ENOTFOUND) continue; /* deleted meanwhile, or not a valid name */
        if (se != KILN_OK) {
            err = se;
            goto out;
        }
        last = out->items[out->n++].name;
        last_is_prefix = false;
    }
    err = KILN_OK;
out:
    for (size_t i = 0; i < ns.n; i++)
        free(ns.v[i]);
    free(ns.v);
    if (err != KILN_OK) kiln_object_list_free(out);
    return err;
}
