/* src/auth/audit.c - the audit log (kiln/auth.h). */
#include "kiln/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct kiln_audit {
    pthread_mutex_t mu;
    char *path;
    uint64_t max_bytes;
    int keep;
    int fd;
    uint64_t size;
};

static int open_log(kiln_audit *a)
{
    struct stat st;
    a->fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (a->fd < 0) return -1;
    a->size = fstat(a->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    return 0;
}

kiln_audit *kiln_audit_open(const char *path, uint64_t max_bytes, int keep)
{
    kiln_audit *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->path = strdup(path);
    a->max_bytes = max_bytes;
    a->keep = keep;
    a->fd = -1;
    if (!a->path || open_log(a) < 0) {
        int e = errno;
        free(a->path);
        free(a);
        errno = e;
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void kiln_audit_close(kiln_audit *a)
{
    if (!a) return;
    if (a->fd >= 0) close(a->fd);
    pthread_mutex_destroy(&a->mu);
    free(a->path);
    free(a);
}

/* path.(k) -> path.(k+1) from the oldest down, then path -> path.1: each
 * rename is atomic, so a reader sees every line in exactly one file */
static void rotate(kiln_audit *a)
{
    char from[PATH_MAX + 16], to[PATH_MAX + 16];
    fsync(a->fd);
    close(a->fd);
    a->fd = -1;
    if (a->keep <= 0) {
        unlink(a->path);
    } else {
        for (int k = a->keep - 1; k >= 1; k--) {
            snprintf(from, sizeof from, "%s.%d", a->path, k);
            snprintf(to, sizeof to, "%s.%d", a->path, k + 1);
            rename(from, to); /* ENOENT: fewer files so far */
        }
        snprintf(to, sizeof to, "%s.1", a->path);
        rename(a->path, to);
    }
    open_log(a);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

int kiln_audit_write(kiln_audit *a, const kiln_audit_event *e)
{
    char when[40];
    struct timespec ts;
    struct tm tm;
    int rc = -1;
    char *line = NULL;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%06ldZ", ts.tv_nsec / 1000);
    /* jansson escapes whatever the path holds, so a line is always one line */
    json_t *v = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:i, s:o}", "requestReceivedTimestamp",
                          when, "verb", e->verb ? e->verb : "", "requestURI",
                          str_or_null(e->resource), "tokenId", str_or_null(e->token_id), "project",
                          str_or_null(e->project), "sourceIP", str_or_null(e->source), "code",
                          (int)e->code, "decision", json_string(e->denied ? "deny" : "allow"));
    /* Kubernetes' objectRef: the project (namespace) and, for a job, its id */
    if (v && e->object_project && e->object_job)
        json_object_set_new(v, "objectRef",
                            json_pack("{s:s, s:s, s:s}", "resource", "jobs", "namespace",
                                      e->object_project, "name", e->object_job));
    else if (v && e->object_project)
        json_object_set_new(v, "objectRef", json_pack("{s:s}", "namespace", e->object_project));
    if (v && e->reason) json_object_set_new(v, "reason", json_string(e->reason));
    if (v) line = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(v);
    if (!line) {
        errno = ENOMEM;
        return -1;
    }
    size_t len = strlen(line);
    line[len++] = '\n'; /* over the NUL: written with its length */
    pthread_mutex_lock(&a->mu);
    if (a->fd >= 0 && a->max_bytes && a->size > 0 && a->size + len > a->max_bytes) rotate(a);
    if (a->fd >= 0 && write(a->fd, line, len) == (ssize_t)len) {
        a->size += len;
        rc = 0;
    }
    pthread_mutex_unlock(&a->mu);
    free(line);
    return rc;
}
