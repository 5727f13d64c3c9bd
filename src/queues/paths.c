/* src/queues/paths.c - kilnd --queues PATH [--queues PATH ...]: files and
 * directories of Kueue YAML read as one set.
 *
 * A directory contributes each *.yaml and *.yml directly in it (not its
 * subdirectories, as `kubectl apply -f DIR` does), in name order so that
 * messages come out the same every time; hidden files are skipped (editors'
 * swap files, ".#x.yaml"). The set is loaded as one stream (load.c): one
 * bad file refuses the whole set, and an object defined in two files is
 * "defined twice". */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/queues.h"
#include "spec/tree.h"

static bool yaml_name(const char *n)
{
    size_t len = strlen(n);
    if (n[0] == '.') return false;
    return (len > 5 && strcmp(n + len - 5, ".yaml") == 0) ||
           (len > 4 && strcmp(n + len - 4, ".yml") == 0);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends PATH's files to `files` (owned strings); false with the reason in d. */
static kiln_err expand(const char *path, kiln_strv *files, kiln_diag *d)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        kiln_diag_add(d, path, "%s", strerror(errno));
        return KILN_EINVAL;
    }
    if (!S_ISDIR(st.st_mode)) return kiln_strv_push(files, path);
    DIR *dir = opendir(path);
    if (!dir) {
        kiln_diag_add(d, path, "%s", strerror(errno));
        return KILN_EINVAL;
    }
    kiln_err err = KILN_OK;
    size_t first = files->n;
    struct dirent *e;
    while (err == KILN_OK && (e = readdir(dir))) {
        if (!yaml_name(e->d_name)) continue;
        if (files->n >= KILN_QUEUES_MAX_FILES) {
            kiln_diag_add(d, path, "more than %u queues files", KILN_QUEUES_MAX_FILES);
            err = KILN_ELIMIT;
            break;
        }
        char *f = NULL;
        if (asprintf(&f, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", e->d_name) < 0) {
            err = KILN_ENOMEM;
            break;
        }
        err = kiln_strv_push(files, f);
        free(f);
    }
    closedir(dir);
    if (err == KILN_OK && files->n == first) {
        kiln_diag_add(d, path, "a directory with no *.yaml or *.yml file");
        err = KILN_EINVAL;
    }
    if (err == KILN_OK) qsort(files->v + first, files->n - first, sizeof *files->v, by_name);
    return err;
}

kiln_err kiln_queues_load_paths(const char *const *paths, size_t n, kiln_queues **out, kiln_diag *d)
{
    *out = NULL;
    kiln_strv files = {0};
    kiln_queues_src *src = NULL;
    kiln_err err = KILN_OK;
    size_t total = 0;
    for (size_t i = 0; i < n && err == KILN_OK; i++)
        err = expand(paths[i], &files, d);
    if (err == KILN_OK && files.n > KILN_QUEUES_MAX_FILES) {
        kiln_diag_add(d, "", "more than %u queues files", KILN_QUEUES_MAX_FILES);
        err = KILN_ELIMIT;
    }
    if (err != KILN_OK) goto out;
    src = calloc(files.n ? files.n : 1, sizeof *src);
    if (!src) {
        err = KILN_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < files.n; i++) {
        char *buf = NULL;
        size_t len = 0;
        src[i].name = files.v[i];
        kiln_err e = kiln__read_file(files.v[i], KILN_QUEUES_MAX_BYTES, &buf, &len);
        if (e == KILN_OK && (total += len) > KILN_QUEUES_MAX_TOTAL) e = KILN_ELIMIT;
        if (e != KILN_OK) {
            kiln_diag_add(d, files.v[i], "%s",
                          e == KILN_ELIMIT ? "over the size cap" : strerror(errno));
            free(buf);
            err = e;
            goto out;
        }
        src[i].buf = buf;
        src[i].len = len;
    }
    err = kiln_queues_load_srcs(src, files.n, out, d);
out:
    for (size_t i = 0; src && i < files.n; i++)
        free((char *)src[i].buf);
    free(src);
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    return err;
}
