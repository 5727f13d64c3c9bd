/* src/exec/monitor/execsrv.c - a replica monitor's exec service (execsrv.h). */
#include "exec/monitor/execsrv.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SESSIONS 64 /* an MPIJob's launcher starts one daemon per host */

typedef struct session {
    int conn;     /* -1: free */
    pid_t pid;    /* the command's process (and group); 0: not started */
    char buf[64]; /* a partial "signal N" line */
    size_t len;
} session;

struct kiln_xsrv {
    int fd;
    char path[4096];
    char **argv;
    size_t argc;
    long uid;
    session s[MAX_SESSIONS];
};

bool kiln_xsrv_addr(const char *path, struct sockaddr_un *sa, int *dirfd)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    *dirfd = -1;
    if (strlen(path) < sizeof sa->sun_path) {
        memcpy(sa->sun_path, path, strlen(path) + 1);
        return true;
    }
    const char *slash = strrchr(path, '/');
    if (!slash || strlen(slash + 1) > 64) return false;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    *dirfd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*dirfd < 0) return false;
    snprintf(sa->sun_path, sizeof sa->sun_path, "/proc/self/fd/%d/%s", *dirfd, slash + 1);
    return true;
}

kiln_xsrv *kiln_xsrv_open(const char *path, char *const *argv, long uid, char *why, size_t whylen)
{
    kiln_xsrv *x = calloc(1, sizeof *x);
    struct sockaddr_un sa;
    int dfd = -1;
    if (!x) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    x->fd = -1;
    x->uid = uid;
    for (size_t i = 0; i < MAX_SESSIONS; i++)
        x->s[i].conn = -1;
    snprintf(x->path, sizeof x->path, "%s", path);
    while (argv[x->argc])
        x->argc++;
    x->argv = calloc(x->argc + 4, sizeof *x->argv);
    if (!x->argv) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    memcpy(x->argv, argv, x->argc * sizeof *x->argv);
    if (!kiln_xsrv_addr(path, &sa, &dfd)) {
        snprintf(why, whylen, "%s: a path no Unix socket can have", path);
        goto fail;
    }
    x->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    unlink(path); /* an earlier run's */
    if (x->fd < 0 || bind(x->fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(x->fd, 16) < 0) {
        snprintf(why, whylen, "cannot listen on %s: %s", path, strerror(errno));
        goto fail;
    }
    /* the container's user connects; SO_PEERCRED decides who is served */
    chmod(path, 0666);
    if (dfd >= 0) close(dfd);
    return x;
fail:
    if (dfd >= 0) close(dfd);
    if (x->fd >= 0) close(x->fd);
    free(x->argv);
    free(x);
    return NULL;
}

size_t kiln_xsrv_pollfds(const kiln_xsrv *x, struct pollfd *pf, size_t cap)
{
    size_t n = 0;
    if (!x) return 0;
    if (n < cap) pf[n++] = (struct pollfd){.fd = x->fd, .events = POLLIN};
    for (size_t i = 0; i < MAX_SESSIONS && n < cap; i++)
        if (x->s[i].conn >= 0) pf[n++] = (struct pollfd){.fd = x->s[i].conn, .events = POLLIN};
    return n;
}

static void reply(session *s, int code)
{
    char msg[32];
    int n = snprintf(msg, sizeof msg, "exit %d\n", code);
    if (send(s->conn, msg, (size_t)n, MSG_NOSIGNAL) != n) {
        /* the agent is gone: nobody to tell */
    }
    close(s->conn);
    s->conn = -1;
    s->pid = 0;
    s->len = 0;
}

static void end_session(session *s, int code)
{
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    reply(s, code);
}

/* The request on a new connection: its line and three descriptors. Returns
 * the line (malloc'd), or NULL when the request is bad. */
static char *read_request(int conn, int fds[3])
{
    char head[32], *line = NULL;
    size_t hl = 0;
    bool got_fds = false;
    fds[0] = fds[1] = fds[2] = -1;
    /* the header, byte by byte up to its newline: the fds come with the first */
    while (hl + 1 < sizeof head) {
        char c;
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(3 * sizeof(int))];
        } cb;
        struct iovec iov = {&c, 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        if (!got_fds) {
            m.msg_control = cb.b;
            m.msg_controllen = sizeof cb.b;
        }
        ssize_t r = recvmsg(conn, &m, MSG_CMSG_CLOEXEC);
        if (r != 1) goto bad;
        struct cmsghdr *h = got_fds ? NULL : CMSG_FIRSTHDR(&m);
        if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
            h->cmsg_len == CMSG_LEN(3 * sizeof(int))) {
            memcpy(fds, CMSG_DATA(h), 3 * sizeof(int));
            got_fds = true;
        } else if (h) {
            goto bad; /* something other than the three descriptors */
        }
        if (c == '\n') break;
        head[hl++] = c;
    }
    head[hl] = '\0';
    unsigned long len = 0;
    char magic[8];
    if (!got_fds || sscanf(head, "%7s %lu", magic, &len) != 2 ||
        strcmp(magic, KILN_XSRV_MAGIC) != 0 || len == 0 || len > KILN_XSRV_LINE_MAX)
        goto bad;
    if (!(line = malloc(len + 1))) goto bad;
    for (size_t got = 0; got < len;) {
        ssize_t r = read(conn, line + got, len - got);
        if (r <= 0) goto bad;
        got += (size_t)r;
    }
    line[len] = '\0';
    if (strlen(line) != len) goto bad; /* a NUL inside */
    return line;
bad:
    free(line);
    for (int k = 0; k < 3; k++)
        if (fds[k] >= 0) close(fds[k]);
    fds[0] = fds[1] = fds[2] = -1;
    return NULL;
}

static void start(kiln_xsrv *x, session *s, int fds[3], char *line)
{
    x->argv[x->argc] = "/bin/sh";
    x->argv[x->argc + 1] = "-c";
    x->argv[x->argc + 2] = line;
    x->argv[x->argc + 3] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        for (int k = 0; k < 3; k++)
            dup2(fds[k], k);
        signal(SIGPIPE, SIG_DFL);
        execvp(x->argv[0], x->argv);
        fprintf(stderr, "kiln-monitor: cannot run %s: %s\n", x->argv[0], strerror(errno));
        _exit(127);
    }
    if (pid > 0) setpgid(pid, pid);
    for (int k = 0; k < 3; k++)
        close(fds[k]);
    if (pid < 0) {
        reply(s, 255);
        return;
    }
    s->pid = pid;
}

static void accept_one(kiln_xsrv *x)
{
    int conn = accept4(x->fd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) return;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    session *s = NULL;
    for (size_t i = 0; i < MAX_SESSIONS && !s; i++)
        if (x->s[i].conn < 0) s = &x->s[i];
    if (!s || getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
        (cr.uid != 0 && (x->uid < 0 || cr.uid != (uid_t)x->uid))) {
        close(conn);
        return;
    }
    /* the agent sends its request at once: a bounded wait for it */
    struct timeval tv = {2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int fds[3];
    char *line = read_request(conn, fds);
    s->conn = conn;
    s->len = 0;
    if (!line) {
        reply(s, 255);
        return;
    }
    fcntl(conn, F_SETFL, fcntl(conn, F_GETFL) | O_NONBLOCK);
    start(x, s, fds, line);
    free(line);
}

/* "signal N" lines from the agent; its close ends the command. */
static void read_agent(session *s)
{
    for (;;) {
        ssize_t r = read(s->conn, s->buf + s->len, sizeof s->buf - 1 - s->len);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (r <= 0) {
            end_session(s, 255);
            return;
        }
        s->len += (size_t)r;
        s->buf[s->len] = '\0';
        char *nl;
        while ((nl = strchr(s->buf, '\n'))) {
            int sig = 0;
            *nl = '\0';
            if (sscanf(s->buf, "signal %d", &sig) == 1 && sig > 0 && sig < 65 && s->pid > 0)
                kill(-s->pid, sig);
            size_t used = (size_t)(nl + 1 - s->buf);
            memmove(s->buf, nl + 1, s->len - used);
            s->len -= used;
        }
        if (s->len == sizeof s->buf - 1) s->len = 0; /* a line too long: not ours */
    }
}

void kiln_xsrv_tick(kiln_xsrv *x)
{
    if (!x) return;
    for (int k = 0; k < 8; k++) /* a few connections a tick */
        accept_one(x);
    for (size_t i = 0; i < MAX_SESSIONS; i++) {
        session *s = &x->s[i];
        if (s->conn < 0 || s->pid <= 0) continue;
        int st = 0;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            reply(s, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            continue;
        }
        read_agent(s);
    }
}

void kiln_xsrv_close(kiln_xsrv *x)
{
    if (!x) return;
    for (size_t i = 0; i < MAX_SESSIONS; i++)
        if (x->s[i].conn >= 0) end_session(&x->s[i], 255);
    close(x->fd);
    unlink(x->path);
    free(x->argv);
    free(x);
}
