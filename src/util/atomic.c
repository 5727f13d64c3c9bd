/* src/util/atomic.c - see atomic.h. */
#include "util/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int kiln__write_atomic(const char *path, const void *data, size_t n, mode_t mode)
{
    char tmp[PATH_MAX + 8], dir[PATH_MAX];
    int fd = -1, rc = -1, saved;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) return -1;
    if (write(fd, data, n) != (ssize_t)n || fsync(fd) != 0) goto out;
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0 || rename(tmp, path) != 0) goto out;
    rc = 0;
    /* the rename itself must survive a power cut too */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    saved = errno;
    if (fd >= 0) close(fd);
    if (rc != 0) unlink(tmp);
    errno = saved;
    return rc;
}
