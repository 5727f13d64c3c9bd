/* src/exec/mpi/kiln-mpi-agent.c - the remote-start agent of an MPIJob's
 * launcher: what `mpirun` (OpenMPI's rsh launcher, Intel MPI's and MPICH's
 * hydra) runs in the place of v1's /etc/mpi/kubexec.sh and v2beta1's ssh,
 * with ssh's arguments:
 *
 *     kiln-mpi-agent [-o OPTION]... [-FLAG]... HOST COMMAND...
 *
 * HOST is a name of the job's hostfile ("<job>-worker-<i>", "<job>-launcher";
 * src/exec/mpienv.c). kilnd writes a record for each replica it starts,
 * $KILN_MPI_DIR/hosts/HOST ("monitor PID" and "log PATH" lines); the agent
 * waits for it (up to KILN_MPI_AGENT_WAIT seconds, 60 by default: the
 * launcher may start before the workers, as ssh's ConnectionAttempts waits
 * for sshd), then runs COMMAND with /bin/sh -c, as sshd would, on the
 * replica's node (this one: kiln's own placer puts the job on one node's
 * processes), and:
 *   - notes the start in the replica's log;
 *   - kills COMMAND's process group when the replica ends (cancel, failure,
 *     a restart: kilnd ends the replica, its ranks go with it, as ranks
 *     exec'd into a pod go with the pod), and when the agent is killed
 *     (the launcher ending: PR_SET_PDEATHSIG);
 *   - passes SIGTERM, SIGINT and SIGHUP on to it;
 *   - gives each host its own OpenMPI shared-memory directory
 *     ($KILN_MPI_DIR/shm/HOST) and session directory (a fresh
 *     /tmp/kiln-mpi.XXXXXX, removed after: short, as the sockets in it
 *     must be): two "hosts" on one machine would otherwise share segment
 *     names (the machine's hostname and local rank), corrupting each
 *     other's, and race to make the same session directories.
 * A replica that runs an image has an "exec SOCKET" line in its record
 * too: there the agent (mounted into the launcher's container from the
 * host, which is why it is linked statically) hands COMMAND and its own
 * stdin, stdout and stderr to the replica's monitor, which runs it in the
 * replica's container with `podman exec` (src/exec/monitor/execsrv.h),
 * passes SIGTERM, SIGINT and SIGHUP on, and waits for its exit status; the
 * replica's end ends it, as above.
 * Its exit status is COMMAND's (128 + N for a signal N), 255 when the host
 * is unknown, as ssh's. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/monitor/execsrv.h"

#define AGENT "kiln-mpi-agent"

static volatile sig_atomic_t g_sig;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void on_signal(int sig)
{
    g_sig = sig;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A hostfile name: letters, digits, '-', '_', '.'; never a path. */
static int host_ok(const char *h)
{
    if (!*h || strlen(h) > 200 || h[0] == '.') return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

/* Reads the host's record: its monitor's pid, its log, and the socket of
 * its exec service (a container; else empty). 0, or -1. */
static int read_record(const char *path, long *monitor, char *log, size_t loglen, char *sock,
                       size_t socklen)
{
    char line[4200];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    *monitor = 0;
    log[0] = sock[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "monitor ", 8) == 0) *monitor = strtol(line + 8, NULL, 10);
        if (strncmp(line, "log ", 4) == 0) snprintf(log, loglen, "%.4000s", line + 4);
        if (strncmp(line, "exec ", 5) == 0) snprintf(sock, socklen, "%.4000s", line + 5);
    }
    fclose(f);
    return *monitor > 0 ? 0 : -1;
}

static void note(const char *log, const char *host, const char *what, long pid)
{
    if (!*log) return;
    FILE *f = fopen(log, "a");
    if (!f) return;
    fprintf(f, AGENT ": %s (pid %ld) on %s for the launcher's mpirun\n", what, pid, host);
    fclose(f);
}

/* COMMAND's words as one shell line, as ssh joins them. NULL on ENOMEM. */
static char *join(char **words, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(words[i]) + 1;
    char *s = calloc(len, 1);
    for (int i = 0; s && i < n; i++) {
        if (i) strcat(s, " ");
        strcat(s, words[i]);
    }
    return s;
}

/* A connection to the exec service at `path` (by its directory's
 * descriptor when the path is longer than a socket address holds). */
static int dial(const char *path)
{
    struct sockaddr_un sa;
    int dfd = -1, fd = -1;
    if (!kiln_xsrv_addr(path, &sa, &dfd)) return -1;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        fd = -1;
    }
    if (dfd >= 0) close(dfd);
    return fd;
}

/* COMMAND through the container replica's exec service: its exit status,
 * 255 when the service is not there or the replica ended. */
static int run_in_container(const char *host, const char *sock, const char *line, long wait_ms)
{
    int fd = -1;
    for (long t = 0; (fd = dial(sock)) < 0; t += 100) {
        if (t >= wait_ms) {
            fprintf(stderr, AGENT ": %s: its container does not take commands (%s: %s)\n", host,
                    sock, strerror(errno));
            return 255;
        }
        nap_ms(100);
    }
    char head[64];
    int hl = snprintf(head, sizeof head, KILN_XSRV_MAGIC " %zu\n", strlen(line));
    int fds[3] = {0, 1, 2};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof fds)];
    } cb;
    memset(&cb, 0, sizeof cb);
    struct iovec iov = {head, 1};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    size_t len = strlen(line);
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != 1 ||
        send(fd, head + 1, (size_t)hl - 1, MSG_NOSIGNAL) != hl - 1) {
        fprintf(stderr, AGENT ": %s: %s\n", host, strerror(errno));
        close(fd);
        return 255;
    }
    for (size_t sent = 0; sent < len;) {
        ssize_t w = send(fd, line + sent, len - sent, MSG_NOSIGNAL);
        if (w <= 0) {
            fprintf(stderr, AGENT ": %s: %s\n", host, strerror(errno));
            close(fd);
            return 255;
        }
        sent += (size_t)w;
    }
    /* the answer, with the signals the launcher gets passed on meanwhile */
    char ans[64];
    size_t al = 0;
    int rc = 255;
    for (;;) {
        if (g_sig) {
            char s[32];
            int n = snprintf(s, sizeof s, "signal %d\n", (int)g_sig);
            g_sig = 0;
            if (send(fd, s, (size_t)n, MSG_NOSIGNAL) != n) break;
        }
        ssize_t r = read(fd, ans + al, sizeof ans - 1 - al);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        al += (size_t)r;
        ans[al] = '\0';
        if (strchr(ans, '\n')) {
            if (sscanf(ans, "exit %d", &rc) != 1) rc = 255;
            break;
        }
        if (al == sizeof ans - 1) break;
    }
    if (rc == 255 && !strchr(ans, '\n'))
        fprintf(stderr, AGENT ": %s ended; its ranks are killed\n", host);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    int i = 1, rc = 255;
    char *line = NULL;
    /* ssh's options: -o OPTION (ConnectionAttempts...) and single flags */
    while (i < argc && argv[i][0] == '-') {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            i += 2;
        else
            i++;
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: " AGENT " [-o OPTION]... HOST COMMAND...\n");
        return 255;
    }
    const char *host = argv[i], *dir = getenv("KILN_MPI_DIR");
    if (!dir || dir[0] != '/') {
        fprintf(stderr, AGENT ": KILN_MPI_DIR is not set: run by an MPIJob's launcher only\n");
        return 255;
    }
    if (!host_ok(host)) {
        fprintf(stderr, AGENT ": %.200s: not a host of this job's hostfile\n", host);
        return 255;
    }
    char rec[4096], log[4096], shm[4096], sock[4096];
    snprintf(rec, sizeof rec, "%s/hosts/%s", dir, host);
    const char *w = getenv("KILN_MPI_AGENT_WAIT");
    long wait_ms = (w && atol(w) > 0 ? atol(w) : 60) * 1000, monitor = 0;
    for (long t = 0; read_record(rec, &monitor, log, sizeof log, sock, sizeof sock) != 0;
         t += 100) {
        if (t >= wait_ms) {
            fprintf(stderr,
                    AGENT ": %s: no replica of this job runs under that name (no %s after %ld s)\n",
                    host, rec, wait_ms / 1000);
            return 255;
        }
        nap_ms(100);
    }
    if (sock[0]) { /* the replica runs an image: its monitor runs COMMAND there */
        /* KILN_MPI_HOST, as below (the host is a plain name: host_ok) */
        char *words = join(argv + i + 1, argc - i - 1);
        if (words && asprintf(&line, "export KILN_MPI_HOST=%s; %s", host, words) < 0) line = NULL;
        free(words);
        if (!line) {
            fprintf(stderr, AGENT ": out of memory\n");
            return 255;
        }
        struct sigaction sa = {0}; /* no SA_RESTART: a signal ends the wait's read */
        sa.sa_handler = on_signal;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        note(log, host, "starts the launcher's command in the replica's container", (long)getpid());
        rc = run_in_container(host, sock, line, wait_ms);
        note(log, host, rc == 0 ? "the launcher's command ended" : "the launcher's command failed",
             (long)getpid());
        free(line);
        return rc;
    }
    snprintf(shm, sizeof shm, "%s/shm", dir);
    mkdir(shm, 0700);
    snprintf(shm, sizeof shm, "%s/shm/%s", dir, host);
    if (mkdir(shm, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, AGENT ": %s: %s\n", shm, strerror(errno));
        return 255;
    }
    char tmp[] = "/tmp/kiln-mpi.XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, AGENT ": mkdtemp %s: %s\n", tmp, strerror(errno));
        return 255;
    }
    if (!(line = join(argv + i + 1, argc - i - 1))) {
        fprintf(stderr, AGENT ": out of memory\n");
        goto out;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t me = getpid(), child = fork();
    if (child < 0) {
        fprintf(stderr, AGENT ": fork: %s\n", strerror(errno));
        goto out;
    }
    if (child == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me) _exit(255); /* the agent died before prctl */
        setenv("OMPI_MCA_btl_vader_backing_directory", shm, 1);
        setenv("OMPI_MCA_orte_tmpdir_base", tmp, 1);
        setenv("KILN_MPI_HOST", host, 1);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        fprintf(stderr, AGENT ": /bin/sh: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(child, child);
    note(log, host, "started the launcher's command", (long)child);
    for (;;) {
        int st = 0;
        pid_t got = waitpid(child, &st, WNOHANG);
        if (got == child) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        if (g_sig) {
            kill(-child, g_sig);
            g_sig = 0;
        }
        if (kill((pid_t)monitor, 0) != 0 && errno == ESRCH) {
            /* the replica ended: its ranks go with it */
            fprintf(stderr, AGENT ": %s ended; its ranks are killed\n", host);
            kill(-child, SIGKILL);
            waitpid(child, &st, 0);
            rc = 255;
            break;
        }
        nap_ms(100);
    }
    note(log, host, rc == 0 ? "the launcher's command ended" : "the launcher's command failed",
         (long)child);
out:
    nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(line);
    return rc;
}
