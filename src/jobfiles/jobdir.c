/* src/jobfiles/jobdir.c - a job's directory and its service events: shared by
 * the API (a create, a cancel) and the supervisor, so neither calls into the
 * other for them. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobfiles/jobfiles_int.h"
#include "kiln/exec.h" /* kiln_log_write: the job log's line format, kiln-monitor's too */

kiln_jobfiles *kiln_jobfiles_new(const char *data_dir, kiln_store *store,
                                 const volatile sig_atomic_t *stop)
{
    kiln_jobfiles *jf = calloc(1, sizeof *jf);
    if (!jf) return NULL;
    if (!(jf->data_dir = strdup(data_dir)) || pthread_mutex_init(&jf->ttl_mu, NULL) != 0) {
        free(jf->data_dir);
        free(jf);
        return NULL;
    }
    jf->store = store;
    jf->stop = stop;
    return jf;
}

void kiln_jobfiles_free(kiln_jobfiles *jf)
{
    if (!jf) return;
    kiln__jobfiles_ttl_free(jf);
    pthread_mutex_destroy(&jf->ttl_mu);
    free(jf->data_dir);
    free(jf);
}

void kiln_jobfiles_dir(const kiln_jobfiles *jf, const char *project, const char *job_id, char *buf,
                       size_t len)
{
    snprintf(buf, len, "%s/jobs/%s/%s", jf->data_dir, project, job_id);
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

void kiln_jobfiles_event(const kiln_jobfiles *jf, const char *project, const char *job_id,
                         const char *severity, const char *fmt, ...)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    kiln_jobfiles_dir(jf, project, job_id, dir, sizeof dir);
    kilnd_mkdirs(dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        kiln_log_write(fd, severity, "service", msg, (size_t)n);
        close(fd);
    }
    free(msg);
}
