/* src/jobfiles/jobdir.c - a job's directory and its service events: shared by
 * the API (a create, a cancel) and the supervisor, so neither calls into the
 * other for them. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "kiln/exec.h"

void kilnd_job_dir(const kilnd *d, const char *project, const char *job_id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/jobs/%s/%s", d->data_dir, project, job_id);
}

int kilnd_mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return (mkdir(tmp, 0755) < 0 && errno != EEXIST) ? -1 : 0;
}

void kilnd_event(kilnd *d, const char *project, const char *job_id, const char *severity,
                 const char *fmt, ...)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    kilnd_job_dir(d, project, job_id, dir, sizeof dir);
    kilnd_mkdirs(dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        kiln_log_write(fd, severity, "service", msg, (size_t)n);
        close(fd);
    }
    free(msg);
}
