/* runtime/ckpt/ckpt.c - checkpoint files: build, write durably, read and
 * validate, keep the newest K, fall back past torn files, inspect.
 * The byte layout is specified in docs/checkpoint-format.md. */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint float data is written in host order, which must be little-endian"
#endif

#define CKPT_MAGIC    "KILNCKPT"
#define CKPT_END      "KEND"
#define CKPT_HDR_SIZE 64
#define CKPT_TRAILER  16
#define CKPT_NAME_FMT "ckpt-%012llu.kiln"
#define CKPT_PREFIX   "ckpt-"
#define CKPT_SUFFIX   ".kiln"

/* ---- building ---- */

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 1 && n <= KILN_CKPT_MAX_NAME;
}

kiln_err kiln_ckpt_add_tensor(kiln_ckpt *ck, const char *name, kiln_ckpt_kind kind, uint32_t ndim,
                              const uint64_t *shape, const float *data, kiln_errmsg *err)
{
    if (!valid_name(name))
        return kiln_errmsg_set(err, KILN_EINVAL, "checkpoint tensor name must be 1..%d bytes",
                               KILN_CKPT_MAX_NAME);
    if (ndim > KILN_CKPT_MAX_DIMS)
        return kiln_errmsg_set(err, KILN_EINVAL, "tensor %s: %u dims (at most %d)", name, ndim,
                               KILN_CKPT_MAX_DIMS);
    if (kind != KILN_CKPT_PARAM && kind != KILN_CKPT_STATE)
        return kiln_errmsg_set(err, KILN_EINVAL, "tensor %s: unknown kind %d", name, (int)kind);
    if (kiln_ckpt_find_tensor(ck, name))
        return kiln_errmsg_set(err, KILN_EINVAL, "tensor %s added twice", name);
    if (ck->n_tensors + ck->n_blobs >= KILN_CKPT_MAX_ITEMS)
        return kiln_errmsg_set(err, KILN_ELIMIT, "more than %d checkpoint items",
                               KILN_CKPT_MAX_ITEMS);
    uint64_t numel = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] && numel > (KILN_CKPT_MAX_FILE / 4) / shape[i])
            return kiln_errmsg_set(err, KILN_ELIMIT, "tensor %s is too large", name);
        numel *= shape[i];
    }
    if (ck->n_tensors == ck->cap_tensors) {
        size_t cap = ck->cap_tensors ? 2 * ck->cap_tensors : 16;
        kiln_ckpt_tensor *t = realloc(ck->tensors, cap * sizeof *t);
        if (!t) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        ck->tensors = t;
        ck->cap_tensors = cap;
    }
    kiln_ckpt_tensor *t = &ck->tensors[ck->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    t->kind = kind;
    t->ndim = ndim;
    for (uint32_t i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->numel = numel;
    t->data = data;
    ck->n_tensors++;
    return KILN_OK;
}

kiln_err kiln_ckpt_add_blob(kiln_ckpt *ck, const char *name, const void *data, uint64_t size,
                            kiln_errmsg *err)
{
    if (!valid_name(name))
        return kiln_errmsg_set(err, KILN_EINVAL, "checkpoint blob name must be 1..%d bytes",
                               KILN_CKPT_MAX_NAME);
    if (kiln_ckpt_find_blob(ck, name))
        return kiln_errmsg_set(err, KILN_EINVAL, "blob %s added twice", name);
    if (ck->n_tensors + ck->n_blobs >= KILN_CKPT_MAX_ITEMS)
        return kiln_errmsg_set(err, KILN_ELIMIT, "more than %d checkpoint items",
                               KILN_CKPT_MAX_ITEMS);
    if (size > KILN_CKPT_MAX_FILE)
        return kiln_errmsg_set(err, KILN_ELIMIT, "blob %s is too large", name);
    if (ck->n_blobs == ck->cap_blobs) {
        size_t cap = ck->cap_blobs ? 2 * ck->cap_blobs : 8;
        kiln_ckpt_blob *b = realloc(ck->blobs, cap * sizeof *b);
        if (!b) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        ck->blobs = b;
        ck->cap_blobs = cap;
    }
    kiln_ckpt_blob *b = &ck->blobs[ck->n_blobs];
    b->name = strdup(name);
    if (!b->name) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    b->data = data;
    b->size = size;
    ck->n_blobs++;
    return KILN_OK;
}

const kiln_ckpt_tensor *kiln_ckpt_find_tensor(const kiln_ckpt *ck, const char *name)
{
    for (size_t i = 0; i < ck->n_tensors; i++)
        if (strcmp(ck->tensors[i].name, name) == 0) return &ck->tensors[i];
    return NULL;
}

const kiln_ckpt_blob *kiln_ckpt_find_blob(const kiln_ckpt *ck, const char *name)
{
    for (size_t i = 0; i < ck->n_blobs; i++)
        if (strcmp(ck->blobs[i].name, name) == 0) return &ck->blobs[i];
    return NULL;
}

void kiln_ckpt_free(kiln_ckpt *ck)
{
    if (!ck) return;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        free(ck->tensors[i].name);
        if (ck->owns_data) free((void *)ck->tensors[i].data);
    }
    for (size_t i = 0; i < ck->n_blobs; i++) {
        free(ck->blobs[i].name);
        if (ck->owns_data) free((void *)ck->blobs[i].data);
    }
    free(ck->tensors);
    free(ck->blobs);
    memset(ck, 0, sizeof *ck);
}

/* ---- writing ---- */

/* A FILE* plus the running CRC of everything written through it. */
typedef struct crc_writer {
    FILE *f;
    uint32_t crc;
    uint64_t len;
    int failed;
} crc_writer;

static void cw_put(crc_writer *w, const void *p, size_t n)
{
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        return;
    }
    w->crc = kiln_crc32c_update(w->crc, p, n);
    w->len += n;
}

static void cw_u32(crc_writer *w, uint32_t v)
{
    uint8_t b[4];
    kiln_put_u32le(b, v);
    cw_put(w, b, 4);
}

static void cw_u64(crc_writer *w, uint64_t v)
{
    uint8_t b[8];
    kiln_put_u64le(b, v);
    cw_put(w, b, 8);
}

kiln_err kiln_ckpt_write_file(const char *path, const kiln_ckpt *ck, kiln_errmsg *err)
{
    kiln_atomic_file *a = NULL;
    FILE *f = NULL;
    kiln_err rc = kiln_atomic_open(path, &a, &f, err);
    if (rc != KILN_OK) return rc;
    crc_writer w = {.f = f};
    uint8_t hdr[CKPT_HDR_SIZE] = {0};
    memcpy(hdr, CKPT_MAGIC, 8);
    kiln_put_u32le(hdr + 8, KILN_CKPT_VERSION);
    kiln_put_u32le(hdr + 12, CKPT_HDR_SIZE);
    kiln_put_u64le(hdr + 16, ck->step);
    kiln_put_u64le(hdr + 24, ck->epoch);
    kiln_put_u64le(hdr + 32, ck->step_in_epoch);
    kiln_put_u32le(hdr + 40, (uint32_t)ck->n_blobs);
    kiln_put_u32le(hdr + 44, (uint32_t)ck->n_tensors);
    cw_put(&w, hdr, sizeof hdr);
    for (size_t i = 0; i < ck->n_blobs; i++) {
        const kiln_ckpt_blob *b = &ck->blobs[i];
        uint32_t nl = (uint32_t)strlen(b->name);
        cw_u32(&w, nl);
        cw_put(&w, b->name, nl);
        cw_u64(&w, b->size);
        cw_put(&w, b->data, b->size);
    }
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const kiln_ckpt_tensor *t = &ck->tensors[i];
        uint32_t nl = (uint32_t)strlen(t->name);
        cw_u32(&w, nl);
        cw_put(&w, t->name, nl);
        cw_u32(&w, (uint32_t)t->kind);
        cw_u32(&w, t->ndim);
        for (uint32_t d = 0; d < t->ndim; d++)
            cw_u64(&w, t->shape[d]);
        cw_put(&w, t->data, t->numel * sizeof(float));
    }
    /* Trailer: the total file length (so truncation is caught before the CRC
     * is even computed), the CRC-32C of every byte before the CRC field, and
     * an end tag. */
    cw_u64(&w, w.len + CKPT_TRAILER);
    uint8_t tail[8];
    kiln_put_u32le(tail, w.crc);
    memcpy(tail + 4, CKPT_END, 4);
    cw_put(&w, tail, 8);
    if (w.failed) {
        rc = kiln_errmsg_set(err, KILN_EIO, "%s: write failed: %s", path, strerror(errno));
        kiln_atomic_abort(a);
        return rc;
    }
    return kiln_atomic_commit(a, err);
}

/* ---- reading ---- */

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static int cur_take(cursor *c, size_t n, const uint8_t **out)
{
    if (n > c->left) return -1;
    *out = c->p;
    c->p += n;
    c->left -= n;
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v)
{
    const uint8_t *p;
    if (cur_take(c, 4, &p)) return -1;
    *v = kiln_get_u32le(p);
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v)
{
    const uint8_t *p;
    if (cur_take(c, 8, &p)) return -1;
    *v = kiln_get_u64le(p);
    return 0;
}

/* Reads a u32-length-prefixed name into a fresh string. */
static kiln_err cur_name(cursor *c, const char *path, const char *what, size_t idx, char **out,
                         kiln_errmsg *err)
{
    uint32_t nl;
    const uint8_t *p;
    if (cur_u32(c, &nl))
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: %s %zu: truncated name length", path, what,
                               idx);
    if (nl == 0 || nl > KILN_CKPT_MAX_NAME)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: %s %zu: name length %u (1..%d allowed)", path,
                               what, idx, nl, KILN_CKPT_MAX_NAME);
    if (cur_take(c, nl, &p))
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: %s %zu: name runs past the end", path, what,
                               idx);
    if (memchr(p, 0, nl))
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: %s %zu: NUL byte in name", path, what, idx);
    *out = malloc(nl + 1);
    if (!*out) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    memcpy(*out, p, nl);
    (*out)[nl] = '\0';
    return KILN_OK;
}

kiln_err kiln_ckpt_parse(const char *path, const void *image, size_t len, kiln_ckpt *out,
                         kiln_errmsg *err)
{
    const uint8_t *buf = image;
    kiln_err rc = KILN_OK;
    char *name = NULL;
    memset(out, 0, sizeof *out);
    out->owns_data = 1;

    if (len < 8 || memcmp(buf, CKPT_MAGIC, 8) != 0)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: not a kiln checkpoint (bad magic)", path);
    if (len < CKPT_HDR_SIZE + CKPT_TRAILER)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: truncated: %zu bytes", path, len);
    const uint8_t *tr = buf + len - CKPT_TRAILER;
    if (memcmp(tr + 12, CKPT_END, 4) != 0)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: torn or truncated: no end tag (%zu bytes)",
                               path, len);
    uint64_t declared = kiln_get_u64le(tr);
    if (declared != len)
        return kiln_errmsg_set(err, KILN_EINVAL,
                               "%s: length mismatch: trailer says %llu bytes, file has %zu", path,
                               (unsigned long long)declared, len);
    uint32_t want = kiln_get_u32le(tr + 8);
    uint32_t got = kiln_crc32c(buf, len - 8);
    if (want != got)
        return kiln_errmsg_set(err, KILN_EINVAL,
                               "%s: CRC-32C mismatch (stored %08x, computed %08x): corrupt", path,
                               want, got);
    uint32_t version = kiln_get_u32le(buf + 8);
    if (version != KILN_CKPT_VERSION)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: version %u; this build reads version %d",
                               path, version, KILN_CKPT_VERSION);
    uint32_t hsize = kiln_get_u32le(buf + 12);
    if (hsize < CKPT_HDR_SIZE || hsize > len - CKPT_TRAILER)
        return kiln_errmsg_set(err, KILN_EINVAL, "%s: bad header size %u", path, hsize);
    out->step = kiln_get_u64le(buf + 16);
    out->epoch = kiln_get_u64le(buf + 24);
    out->step_in_epoch = kiln_get_u64le(buf + 32);
    uint32_t nb = kiln_get_u32le(buf + 40), nt = kiln_get_u32le(buf + 44);
    if ((uint64_t)nb + nt > KILN_CKPT_MAX_ITEMS)
        return kiln_errmsg_set(err, KILN_ELIMIT, "%s: %u blobs + %u tensors exceeds %d", path, nb,
                               nt, KILN_CKPT_MAX_ITEMS);
    cursor c = {buf + hsize, len - CKPT_TRAILER - hsize};
    /* Counts are checked against the bytes left before anything is allocated:
     * every entry takes at least 13 bytes, so a lying count fails fast. */
    if (((uint64_t)nb + nt) * 13 > c.left)
        return kiln_errmsg_set(err, KILN_EINVAL,
                               "%s: %u blobs + %u tensors cannot fit in %zu bytes", path, nb, nt,
                               c.left);
    out->blobs = calloc(nb ? nb : 1, sizeof *out->blobs);
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    if (!out->blobs || !out->tensors) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        goto out;
    }
    out->cap_blobs = nb ? nb : 1;
    out->cap_tensors = nt ? nt : 1;
    for (size_t i = 0; i < nb; i++) {
        uint64_t size;
        const uint8_t *p;
        if ((rc = cur_name(&c, path, "blob", i, &name, err)) != KILN_OK) goto out;
        if (cur_u64(&c, &size) || size > c.left || cur_take(&c, (size_t)size, &p)) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: blob %s: size runs past the end", path,
                                 name);
            goto out;
        }
        if (kiln_ckpt_find_blob(out, name)) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: duplicate blob %s", path, name);
            goto out;
        }
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
            goto out;
        }
        if (size) memcpy(copy, p, size);
        out->blobs[out->n_blobs++] = (kiln_ckpt_blob){name, copy, size};
        name = NULL;
    }
    for (size_t i = 0; i < nt; i++) {
        uint32_t kind, ndim;
        kiln_ckpt_tensor t = {0};
        const uint8_t *p;
        if ((rc = cur_name(&c, path, "tensor", i, &name, err)) != KILN_OK) goto out;
        if (cur_u32(&c, &kind) || cur_u32(&c, &ndim)) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: tensor %s: truncated header", path, name);
            goto out;
        }
        if (kind > KILN_CKPT_STATE || ndim > KILN_CKPT_MAX_DIMS) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: tensor %s: kind %u / %u dims not allowed",
                                 path, name, kind, ndim);
            goto out;
        }
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (cur_u64(&c, &t.shape[d])) {
                rc =
                    kiln_errmsg_set(err, KILN_EINVAL, "%s: tensor %s: truncated shape", path, name);
                goto out;
            }
            /* overflow-safe product under the file-size cap; whether the data
             * really fits in what is left is checked once numel is known */
            if (t.shape[d] && numel > (KILN_CKPT_MAX_FILE / 4) / t.shape[d]) {
                rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: tensor %s: shape larger than the file",
                                     path, name);
                goto out;
            }
            numel *= t.shape[d];
        }
        if (numel > c.left / 4 || cur_take(&c, (size_t)numel * 4, &p)) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: tensor %s: data runs past the end", path,
                                 name);
            goto out;
        }
        if (kiln_ckpt_find_tensor(out, name)) {
            rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: duplicate tensor %s", path, name);
            goto out;
        }
        float *data = malloc(numel ? numel * 4 : 1);
        if (!data) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
            goto out;
        }
        if (numel) memcpy(data, p, numel * 4); /* copy: file data need not be aligned */
        t.name = name;
        name = NULL;
        t.kind = (kiln_ckpt_kind)kind;
        t.ndim = ndim;
        t.numel = numel;
        t.data = data;
        out->tensors[out->n_tensors++] = t;
    }
    if (c.left != 0) {
        rc = kiln_errmsg_set(err, KILN_EINVAL, "%s: %zu unexplained bytes before the trailer", path,
                             c.left);
        goto out;
    }
out:
    free(name);
    if (rc != KILN_OK) kiln_ckpt_free(out);
    return rc;
}

kiln_err kiln_ckpt_read_file(const char *path, kiln_ckpt *out, kiln_errmsg *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    kiln_err rc = kiln_read_file(path, KILN_CKPT_MAX_FILE, &buf, &len, err);
    if (rc != KILN_OK) return rc;
    rc = kiln_ckpt_parse(path, buf, len, out, err);
    free(buf);
    return rc;
}

/* ---- directories ---- */

typedef struct ckpt_entry {
    unsigned long long step;
    char *name;
} ckpt_entry;

/* Is name "ckpt-<digits>.kiln"? Sets *step. Temporary files never match
 * because they carry a ".tmp.<pid>" suffix after ".kiln". */
static int parse_ckpt_name(const char *name, unsigned long long *step)
{
    size_t n = strlen(name), pl = strlen(CKPT_PREFIX), sl = strlen(CKPT_SUFFIX);
    if (n <= pl + sl || strncmp(name, CKPT_PREFIX, pl) != 0 ||
        strcmp(name + n - sl, CKPT_SUFFIX) != 0)
        return 0;
    unsigned long long v = 0;
    for (size_t i = pl; i < n - sl; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (ULLONG_MAX - 9) / 10) return 0;
        v = v * 10 + (unsigned)(name[i] - '0');
    }
    *step = v;
    return 1;
}

static int entry_cmp_desc(const void *a, const void *b)
{
    const ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return strcmp(x->name, y->name);
}

static void free_entries(ckpt_entry *e, size_t n)
{
    if (!e) return;
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

/* Lists checkpoint files in dir, newest first. Missing dir -> KILN_ENOTFOUND.
 * If tmp_names is non-NULL, temporary checkpoint files are listed there. */
static kiln_err list_ckpts(const char *dir, ckpt_entry **out, size_t *n, ckpt_entry **tmps,
                           size_t *ntmp, kiln_errmsg *err)
{
    kiln_err rc = KILN_OK;
    ckpt_entry *e = NULL, *t = NULL;
    size_t ne = 0, cap = 0, nt = 0, capt = 0;
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return kiln_errmsg_set(err, errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO,
                               "%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned long long step = 0;
        int is_ckpt = parse_ckpt_name(de->d_name, &step);
        int is_tmp = !is_ckpt && strncmp(de->d_name, CKPT_PREFIX, strlen(CKPT_PREFIX)) == 0 &&
                     strstr(de->d_name, CKPT_SUFFIX KILN_TMP_MARKER) != NULL;
        if (is_tmp && !tmps) continue;
        if (!is_ckpt && !is_tmp) continue;
        ckpt_entry **arr = is_ckpt ? &e : &t;
        size_t *cnt = is_ckpt ? &ne : &nt, *cp = is_ckpt ? &cap : &capt;
        if (*cnt == *cp) {
            size_t nc = *cp ? 2 * *cp : 16;
            ckpt_entry *g = realloc(*arr, nc * sizeof *g);
            if (!g) {
                rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
                goto out;
            }
            *arr = g;
            *cp = nc;
        }
        (*arr)[*cnt].step = step;
        (*arr)[*cnt].name = strdup(de->d_name);
        if (!(*arr)[*cnt].name) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
            goto out;
        }
        (*cnt)++;
    }
    if (ne) qsort(e, ne, sizeof *e, entry_cmp_desc);
    *out = e;
    *n = ne;
    e = NULL;
    ne = 0;
    if (tmps) {
        *tmps = t;
        *ntmp = nt;
        t = NULL;
        nt = 0;
    }
out:
    closedir(d);
    free_entries(e, ne);
    free_entries(t, nt);
    return rc;
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

kiln_err kiln_ckpt_save(const char *dir, const kiln_ckpt *ck, unsigned keep, char **path_out,
                        kiln_errmsg *err)
{
    kiln_err rc;
    char name[64];
    char *path = NULL;
    ckpt_entry *e = NULL, *t = NULL;
    size_t ne = 0, nt = 0;
    if (path_out) *path_out = NULL;
    if ((rc = kiln_mkdir_p(dir, err)) != KILN_OK) return rc;
    snprintf(name, sizeof name, CKPT_NAME_FMT, (unsigned long long)ck->step);
    path = join_path(dir, name);
    if (!path) return kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    if ((rc = kiln_ckpt_write_file(path, ck, err)) != KILN_OK) goto out;
    /* The new file is durable; only now may older ones go. Failing to prune
     * is not a failed save, so errors below are ignored. */
    if (list_ckpts(dir, &e, &ne, &t, &nt, NULL) == KILN_OK) {
        int removed = 0;
        for (size_t i = keep ? keep : ne; i < ne; i++) {
            if (strcmp(e[i].name, name) == 0)
                continue; /* never the one just written, whatever its rank */
            char *p = join_path(dir, e[i].name);
            if (p && unlink(p) == 0) removed = 1;
            free(p);
        }
        /* Temporaries left by a process that died mid-write. Only one process
         * (the chief) writes checkpoints into a model dir, and ours is
         * committed, so any left now are stale. */
        for (size_t i = 0; i < nt; i++) {
            char *p = join_path(dir, t[i].name);
            if (p && unlink(p) == 0) removed = 1;
            free(p);
        }
        if (removed) kiln_fsync_dir(dir, NULL);
    }
    if (path_out) {
        *path_out = path;
        path = NULL;
    }
out:
    free_entries(e, ne);
    free_entries(t, nt);
    free(path);
    return rc;
}

kiln_err kiln_ckpt_load_latest(const char *dir, kiln_ckpt *out, char **path_out,
                               kiln_ckpt_warn_fn warn, void *ud, kiln_errmsg *err)
{
    ckpt_entry *e = NULL;
    size_t ne = 0;
    memset(out, 0, sizeof *out);
    if (path_out) *path_out = NULL;
    kiln_err rc = list_ckpts(dir, &e, &ne, NULL, NULL, err);
    if (rc != KILN_OK) return rc;
    rc = KILN_ENOTFOUND;
    size_t skipped = 0;
    for (size_t i = 0; i < ne; i++) {
        char *p = join_path(dir, e[i].name);
        kiln_errmsg why = {{0}};
        if (!p) {
            rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
            break;
        }
        kiln_err r = kiln_ckpt_read_file(p, out, &why);
        if (r == KILN_OK) {
            if (path_out)
                *path_out = p;
            else
                free(p);
            rc = KILN_OK;
            break;
        }
        skipped++;
        if (warn)
            warn(ud, p, why.msg);
        else
            fprintf(stderr, "kiln: skipping checkpoint %s\n", why.msg);
        free(p);
        if (r == KILN_ENOMEM) {
            rc = kiln_errmsg_set(err, r, "%s", why.msg);
            break;
        }
    }
    if (rc == KILN_ENOTFOUND && skipped == 0)
        kiln_errmsg_set(err, rc, "%s: no checkpoint files (ckpt-*.kiln) in this directory", dir);
    else if (rc == KILN_ENOTFOUND)
        kiln_errmsg_set(err, rc, "%s: no valid checkpoint (%zu found, all invalid)", dir, skipped);
    free_entries(e, ne);
    return rc;
}

/* ---- hashing, inspect ---- */

/* Sorting pointers to tensors needs no context, unlike sorting indices. */
static int tensor_ptr_cmp(const void *a, const void *b)
{
    const kiln_ckpt_tensor *x = *(const kiln_ckpt_tensor *const *)a;
    const kiln_ckpt_tensor *y = *(const kiln_ckpt_tensor *const *)b;
    return strcmp(x->name, y->name);
}

kiln_err kiln_ckpt_params_sha256(const kiln_ckpt *ck, char hex[65])
{
    const kiln_ckpt_tensor **ts = malloc((ck->n_tensors ? ck->n_tensors : 1) * sizeof *ts);
    kiln_sha256 *h = kiln_sha256_new();
    size_t np = 0;
    if (!ts || !h) {
        free(ts);
        if (h) {
            uint8_t d[32];
            kiln_sha256_final(h, d);
        }
        return KILN_ENOMEM;
    }
    for (size_t i = 0; i < ck->n_tensors; i++)
        if (ck->tensors[i].kind == KILN_CKPT_PARAM) ts[np++] = &ck->tensors[i];
    /* strcmp order is byte-wise order: the canonical order of the format doc */
    qsort(ts, np, sizeof *ts, tensor_ptr_cmp);
    for (size_t k = 0; k < np; k++) {
        const kiln_ckpt_tensor *t = ts[k];
        uint8_t b[8];
        uint32_t nl = (uint32_t)strlen(t->name);
        kiln_put_u32le(b, nl);
        kiln_sha256_update(h, b, 4);
        kiln_sha256_update(h, t->name, nl);
        kiln_put_u32le(b, t->ndim);
        kiln_sha256_update(h, b, 4);
        for (uint32_t d = 0; d < t->ndim; d++) {
            kiln_put_u64le(b, t->shape[d]);
            kiln_sha256_update(h, b, 8);
        }
        kiln_sha256_update(h, t->data, t->numel * sizeof(float));
    }
    uint8_t digest[32];
    kiln_sha256_final(h, digest);
    kiln_hex(digest, 32, hex);
    free(ts);
    return KILN_OK;
}

/* A growable string for the JSON text. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 256) + (size_t)k;
        char *g = realloc(b->s, nc);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->s = g;
        b->cap = nc;
    }
}

static void sb_json_str(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sb_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_printf(b, "%c", *p);
    }
    sb_printf(b, "\"");
}

kiln_err kiln_ckpt_inspect_json(const char *path, char **json, kiln_ckpt_warn_fn warn, void *ud,
                                kiln_errmsg *err)
{
    kiln_err rc;
    kiln_ckpt ck = KILN_CKPT_INIT;
    char *file = NULL;
    sbuf b = {0};
    char hex[65];
    *json = NULL;
    DIR *d = opendir(path);
    if (d) {
        closedir(d);
        rc = kiln_ckpt_load_latest(path, &ck, &file, warn, ud, err);
    } else {
        rc = kiln_ckpt_read_file(path, &ck, err);
        file = strdup(path);
        if (rc == KILN_OK && !file) rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
    }
    if (rc != KILN_OK) goto out;
    if ((rc = kiln_ckpt_params_sha256(&ck, hex)) != KILN_OK) {
        kiln_errmsg_set(err, rc, "out of memory");
        goto out;
    }
    uint64_t nparams = 0;
    for (size_t i = 0; i < ck.n_tensors; i++)
        if (ck.tensors[i].kind == KILN_CKPT_PARAM) nparams += ck.tensors[i].numel;
    sb_printf(&b, "{\"path\":");
    sb_json_str(&b, file);
    sb_printf(&b, ",\"version\":%d,\"step\":%llu,\"epoch\":%llu,\"step_in_epoch\":%llu",
              KILN_CKPT_VERSION, (unsigned long long)ck.step, (unsigned long long)ck.epoch,
              (unsigned long long)ck.step_in_epoch);
    sb_printf(&b, ",\"sha256\":\"%s\",\"params\":%llu,\"tensors\":[", hex,
              (unsigned long long)nparams);
    for (size_t i = 0; i < ck.n_tensors; i++) {
        const kiln_ckpt_tensor *t = &ck.tensors[i];
        sb_printf(&b, "%s{\"name\":", i ? "," : "");
        sb_json_str(&b, t->name);
        sb_printf(&b, ",\"kind\":\"%s\",\"shape\":[",
                  t->kind == KILN_CKPT_PARAM ? "param" : "state");
        for (uint32_t k = 0; k < t->ndim; k++)
            sb_printf(&b, "%s%llu", k ? "," : "", (unsigned long long)t->shape[k]);
        sb_printf(&b, "]}");
    }
    sb_printf(&b, "],\"blobs\":[");
    for (size_t i = 0; i < ck.n_blobs; i++) {
        sb_printf(&b, "%s{\"name\":", i ? "," : "");
        sb_json_str(&b, ck.blobs[i].name);
        sb_printf(&b, ",\"size\":%llu}", (unsigned long long)ck.blobs[i].size);
    }
    sb_printf(&b, "]}");
    if (b.oom) {
        rc = kiln_errmsg_set(err, KILN_ENOMEM, "out of memory");
        goto out;
    }
    *json = b.s;
    b.s = NULL;
out:
    free(b.s);
    free(file);
    kiln_ckpt_free(&ck);
    return rc;
}
