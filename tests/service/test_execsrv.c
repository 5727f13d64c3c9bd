/* test_execsrv.c - the replica monitor's exec service (src/exec/monitor/
 * execsrv.h) as kiln-mpi-agent uses it, with `env` standing where `podman
 * exec -i NAME` stands: a request runs its line with the descriptors it
 * handed over and is answered with the exit status; a signal line reaches
 * the command; a closed connection kills it; and bad requests (no
 * descriptors, a wrong header, a line past the cap) are answered 255
 * without running anything. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "exec/monitor/execsrv.h"
#include "test.h"

static char g_dir[] = "/tmp/kiln-xsrv.XXXXXX";
static char g_sock[100];

static int dial(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, g_sock, strlen(g_sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Sends header `head` (its first byte carrying fds[0..nfds)) and `body`. */
static int send_req(int fd, const char *head, const int *fds, int nfds, const char *body)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(3 * sizeof(int))];
    } cb;
    memset(&cb, 0, sizeof cb);
    struct iovec iov = {(void *)head, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        m.msg_control = cb.b;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != 1) return -1;
    size_t hl = strlen(head + 1), bl = strlen(body);
    if (send(fd, head + 1, hl, MSG_NOSIGNAL) != (ssize_t)hl) return -1;
    if (bl && send(fd, body, bl, MSG_NOSIGNAL) != (ssize_t)bl) return -1;
    return 0;
}

/* Ticks the server until `fd` has a whole answer line (or 10 s): its code,
 * -1 without one. */
static int answer(kiln_xsrv *x, int fd)
{
    char buf[64];
    size_t n = 0;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    for (int i = 0; i < 1000; i++) {
        kiln_xsrv_tick(x);
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r > 0) n += (size_t)r;
        if (r == 0) break;
        buf[n] = '\0';
        if (strchr(buf, '\n')) break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    buf[n] = '\0';
    int code = -1;
    if (sscanf(buf, "exit %d", &code) != 1) return -1;
    return code;
}

int main(void)
{
    CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_sock, sizeof g_sock, "%s/h.sock", g_dir);
    char *const argv[] = {"env", NULL};
    char why[256] = "";
    kiln_xsrv *x = kiln_xsrv_open(g_sock, argv, (long)getuid(), why, sizeof why);
    CHECK_MSG(x != NULL, "open: %s", why);
    if (!x) TEST_DONE();

    /* a command with the caller's descriptors: its output in our pipe, its status back */
    int p[2], devnull = open("/dev/null", O_RDWR);
    CHECK(pipe(p) == 0);
    int fd = dial();
    CHECK(fd >= 0);
    const char *line = "echo ran-in-exec; exit 7";
    char head[64];
    snprintf(head, sizeof head, KILN_XSRV_MAGIC " %zu\n", strlen(line));
    int fds[3] = {devnull, p[1], p[1]};
    CHECK(send_req(fd, head, fds, 3, line) == 0);
    CHECK(answer(x, fd) == 7);
    close(p[1]);
    char out[128] = "";
    ssize_t r = read(p[0], out, sizeof out - 1);
    out[r > 0 ? r : 0] = '\0';
    CHECK(strcmp(out, "ran-in-exec\n") == 0);
    close(p[0]);
    close(fd);

    /* "signal 15" reaches the command (its shell's trap says so) */
    CHECK(pipe(p) == 0);
    fd = dial();
    line = "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
    snprintf(head, sizeof head, KILN_XSRV_MAGIC " %zu\n", strlen(line));
    fds[1] = fds[2] = p[1];
    CHECK(send_req(fd, head, fds, 3, line) == 0);
    close(p[1]);
    char rb[64] = "";
    size_t rn = 0;
    for (int i = 0; i < 500 && !strstr(rb, "ready"); i++) {
        kiln_xsrv_tick(x);
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        ssize_t k = read(p[0], rb + rn, sizeof rb - 1 - rn);
        if (k > 0) rn += (size_t)k;
        rb[rn] = '\0';
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK(strstr(rb, "ready") != NULL);
    CHECK(send(fd, "signal 15\n", 10, MSG_NOSIGNAL) == 10);
    CHECK(answer(x, fd) == 3);
    close(fd);
    close(p[0]);

    /* the agent gone: the command is killed (the server's tick finds the close) */
    char mark[700];
    snprintf(mark, sizeof mark, "%s/still-running", g_dir);
    fd = dial();
    char longrun[800];
    snprintf(longrun, sizeof longrun, "sleep 2; touch %s", mark);
    snprintf(head, sizeof head, KILN_XSRV_MAGIC " %zu\n", strlen(longrun));
    fds[1] = fds[2] = devnull;
    CHECK(send_req(fd, head, fds, 3, longrun) == 0);
    for (int i = 0; i < 20; i++) {
        kiln_xsrv_tick(x);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    close(fd);
    for (int i = 0; i < 20; i++) {
        kiln_xsrv_tick(x);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    sleep(3);
    CHECK_MSG(access(mark, F_OK) != 0, "the command of a closed connection was killed");

    /* bad requests: answered 255, nothing run */
    fd = dial();
    CHECK(send_req(fd, "KILNX1 5\n", NULL, 0, "true\n") == 0); /* no descriptors */
    CHECK(answer(x, fd) == 255);
    close(fd);
    fd = dial();
    CHECK(send_req(fd, "SSH-2.0 5\n", fds, 3, "true\n") == 0); /* not the header */
    CHECK(answer(x, fd) == 255);
    close(fd);
    fd = dial();
    snprintf(head, sizeof head, KILN_XSRV_MAGIC " %d\n", KILN_XSRV_LINE_MAX + 1);
    CHECK(send_req(fd, head, fds, 3, "") == 0); /* past the cap */
    CHECK(answer(x, fd) == 255);
    close(fd);

    kiln_xsrv_close(x);
    CHECK_MSG(access(g_sock, F_OK) != 0, "the socket is removed at close");

    /* a path longer than a socket address holds (a job directory deep in
     * the data dir): served and reached by its directory's descriptor */
    char deep[400], dsock[460];
    snprintf(deep, sizeof deep, "%s/%s", g_dir,
             "a-directory-name-of-sixty-characters-to-make-the-path-long-x");
    CHECK(mkdir(deep, 0700) == 0);
    snprintf(deep + strlen(deep), sizeof deep - strlen(deep), "/%s",
             "another-directory-name-of-sixty-characters-for-the-path-yy");
    CHECK(mkdir(deep, 0700) == 0);
    snprintf(dsock, sizeof dsock, "%s/h.sock", deep);
    CHECK(strlen(dsock) > sizeof(((struct sockaddr_un *)0)->sun_path));
    x = kiln_xsrv_open(dsock, argv, (long)getuid(), why, sizeof why);
    CHECK_MSG(x != NULL, "open %s: %s", dsock, why);
    struct sockaddr_un sa;
    int dfd = -1;
    fd = -1;
    if (x && kiln_xsrv_addr(dsock, &sa, &dfd)) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            close(fd);
            fd = -1;
        }
        if (dfd >= 0) close(dfd);
    }
    CHECK(fd >= 0);
    if (fd >= 0) {
        line = "exit 5";
        snprintf(head, sizeof head, KILN_XSRV_MAGIC " %zu\n", strlen(line));
        CHECK(send_req(fd, head, fds, 3, line) == 0);
        CHECK(answer(x, fd) == 5);
        close(fd);
    }
    kiln_xsrv_close(x);
    char *slash = strrchr(deep, '/');
    rmdir(deep);
    if (slash) *slash = '\0';
    rmdir(deep);
    close(devnull);
    rmdir(g_dir);
    TEST_DONE();
}
