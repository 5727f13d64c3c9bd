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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* Reads the host's record: its monitor's pid and its log. 0, or -1. */
static int read_record(const char *path, long *monitor, char *log, size_t loglen)
{
    char line[4200];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    *monitor = 0;
    log[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "monitor ", 8) == 0) *monitor = strtol(line + 8, NULL, 10);
        if (strncmp(line, "log ", 4) == 0) snprintf(log, loglen, "%.4000s", line + 4);
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
    char rec[4096], log[4096], shm[4096];
    snprintf(rec, sizeof rec, "%s/hosts/%s", dir, host);
    const char *w = getenv("KILN_MPI_AGENT_WAIT");
    long wait_ms = (w && atol(w) > 0 ? atol(w) : 60) * 1000, monitor = 0;
    for (long t = 0; read_record(rec, &monitor, log, sizeof log) != 0; t += 100) {
        if (t >= wait_ms) {
            fprintf(stderr,
                    AGENT ": %s: no replica of this job runs under that name (no %s after %ld s)\n",
                    host, rec, wait_ms / 1000);
            return 255;
        }
        nap_ms(100);
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
