/* src/exec/monitor/kiln-monitor.c - the per-replica monitor (like podman's
 * conmon or Slurm's slurmstepd).
 *
 * kilnd starts one monitor per replica, in a session of its own, and the
 * monitor starts the replica. The monitor, not kilnd, holds the replica's
 * stdout and stderr and writes its log lines, and it records the exit status
 * in a file, so that a kilnd that crashes, is killed with -9 or is upgraded
 * stops nothing: the next kilnd adopts the replica from the files below.
 * Being the only writer of the replica's lines is what makes the logs have
 * no gap and no duplicate line across a kilnd restart.
 *
 *   kiln-monitor STATE JOBLOG REPLOG TASK LOGCAP CWD UID GID POLICY
 *                NPULL [PULL...] NEXISTS [EXISTS...] [--no-new-privs] [--cap-drop CAP]...
 *                [--exec-socket SOCKET PEER_UID NEXEC EXEC...] -- PROGRAM [ARGS...]
 *
 * STATE is a path prefix: STATE.state gets "monitor PID START\nchild PID
 * START\n" once the program runs, STATE.exit "code N\nreason TEXT\n" when it
 * ended (both written atomically: temp file, fsync, rename). UID/GID -1 keep
 * the monitor's own. NEXISTS/NPULL count the argv of an optional image check
 * ("podman image exists IMG") and pull ("podman pull IMG"), run before the
 * program; the pull's output goes to the job's log. POLICY is the image pull
 * policy (Kubernetes' imagePullPolicy): "IfNotPresent" pulls when the check
 * fails; "Always" pulls first and, when the pull fails but the image is in
 * local storage, runs that copy with a WARNING (podman's --pull=newer does
 * the same); "Never" only checks. --no-new-privs: the program starts with
 * PR_SET_NO_NEW_PRIVS (securityContext allowPrivilegeEscalation: false), so
 * neither it nor what it runs gains privileges from a setuid or
 * file-capability program. --cap-drop CAP (ALL, NET_RAW, ...; securityContext
 * capabilities.drop): a monitor of root takes CAP off the bounding set
 * before it becomes the project's user, so that nothing the program runs,
 * setuid or file-capability programs included, ever holds it (a monitor
 * that is not root holds no capability to give, and cannot change the
 * bounding set: the drop is then what the user already has, said in
 * docs/job-model.md). The program gets the
 * monitor's environment, which kilnd built (nothing of kilnd's own).
 *
 * A full disk never stops the replica: the monitor keeps draining its pipes
 * (so it never blocks on a write), counts the bytes of each log it could not
 * write, and once a write succeeds again first writes the line
 * "[kiln] N bytes of output lost: disk full (...)" into that log, so the gap
 * is marked where it is.
 *
 * --exec-socket: while the program runs, the monitor serves execs on
 * SOCKET for kiln-mpi-agent (execsrv.h): each runs EXEC... /bin/sh -c LINE
 * (`podman exec -i NAME`, NAME the program's container), for peers of
 * PEER_UID and root; they are killed when the program ends.
 *
 * A program called srun (a replica under kilnd --executor slurm is
 * "srun ... -- PROGRAM", a step of its allocation) that said on its stderr
 * "srun: error: task N launch failed: WHY" never ran the replica: srun
 * exits 0 then (Slurm 22.05's launch plugin sets its exit status only from
 * tasks that ended, and a task that never started never ends), so the
 * monitor records the start as failed ("code -1") with srun's reason, and
 * the job fails rather than SUCCEEDS with nothing run.
 *
 * fd 3, when open, is the life pipe: "S PID START\n" is written to it once
 * the program runs, and it closes when the monitor exits (after the exit
 * file is written), which kilnd sees at once. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/monitor/execsrv.h"
#include "kiln/exec.h"
#include "util/atomic.h"
#include "util/caps.h"

#define LINE_MAX_BYTES 8192

/* What a log lost while its file system was full (or failed otherwise). */
typedef struct loss {
    unsigned long long bytes; /* of replica output not written since the last marker */
    int err;                  /* errno of the first failed write */
    bool torn;                /* the file ends mid-line (a short write) */
} loss;

typedef struct mon {
    const char *state, *job_log_path, *task;
    int job_log, rep_log;
    loss job_loss, rep_loss;
    int metrics;                     /* STATE.metrics: stdout lines that may be reports */
    unsigned long long metrics_size; /* bytes written there (capped as the log is) */
    bool metrics_torn;               /* a full disk cut the last report there short */
    unsigned long long cap;
    bool capped;
    char *last; /* when set, gets each line written (the pull's last words) */
    size_t lastlen;
    bool srun;               /* the program is srun: its launch failures are watched */
    char launch_failed[400]; /* srun's first "task N launch failed: WHY", when it said one */
} mon;

typedef struct stream {
    int fd;
    const char *sev;
    char buf[LINE_MAX_BYTES];
    size_t len;
} stream;

/* Writes the marker of what fd lost, after ending a torn line. Clears the
 * count once the marker is in the file; leaves it when it is not (the disk
 * is still full). */
static void mark_loss(mon *m, int fd, loss *l)
{
    char msg[256];
    if (l->bytes == 0) return;
    if (l->torn) {
        if (write(fd, "\n", 1) != 1) return;
        l->torn = false;
    }
    bool full = l->err == ENOSPC || l->err == EDQUOT;
    int n = snprintf(msg, sizeof msg, "[kiln] %llu bytes of output lost: %s%s%s%s", l->bytes,
                     full ? "disk full" : "the log could not be written", full ? " (" : ": ",
                     strerror(l->err), full ? ")" : "");
    int r = kiln_log_write(fd, "WARNING", m->task, msg, (size_t)n);
    if (r == 0) {
        l->bytes = 0;
        l->err = 0;
    } else if (r == 1) {
        l->torn = true;
    }
}

/* One replica line into one log: the marker of an earlier loss first, and
 * while that cannot be written, this line is counted as lost too. */
static void log_to(mon *m, int fd, loss *l, const char *sev, const char *msg, size_t n)
{
    mark_loss(m, fd, l);
    if (l->bytes == 0) {
        int r = kiln_log_write(fd, sev, m->task, msg, n);
        if (r == 0) return;
        l->err = errno;
        l->torn = r == 1;
    }
    l->bytes += n + 1; /* with its newline */
}

/* Past the job's log cap (kilnd --log-cap) replica lines are dropped. The
 * cap is on the job's log file as a whole, which every monitor of the job
 * appends to; the first monitor to cross it creates "log.capped" next to it
 * and writes the one warning. */
static void line(mon *m, const char *sev, const char *msg, size_t n)
{
    struct stat st;
    if (m->capped) return;
    if (fstat(m->job_log, &st) == 0 && S_ISREG(st.st_mode) &&
        (unsigned long long)st.st_size >= m->cap) {
        char marker[PATH_MAX + 16], w[160];
        m->capped = true;
        snprintf(marker, sizeof marker, "%s.capped", m->job_log_path);
        int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            close(fd);
            int wn = snprintf(w, sizeof w,
                              "log cap of %llu bytes reached: further replica output is dropped",
                              m->cap);
            kiln_log_write(m->job_log, "WARNING", "service", w, (size_t)wn);
        }
        return;
    }
    if (m->last && n) snprintf(m->last, m->lastlen, "%.*s", (int)n, msg);
    log_to(m, m->job_log, &m->job_loss, sev, msg, n);
    log_to(m, m->rep_log, &m->rep_loss, sev, msg, n);
}

/* A stdout line that may be a training metrics report (one JSON object with
 * an "event": kilnd's trainmetrics.h decides) also goes, whole, to
 * STATE.metrics, which kilnd reads each tick: kilnd no longer sees replica
 * output, and a report must count even past the job's log cap. */
static void metrics_line(mon *m, const stream *s, const char *msg, size_t n)
{
    size_t k = 0;
    if (m->metrics < 0 || strcmp(s->sev, "INFO") != 0) return;
    while (k < n && (msg[k] == ' ' || msg[k] == '\t'))
        k++;
    if (k >= n || msg[k] != '{' || !memmem(msg, n, "\"event\"", 7)) return;
    if (m->metrics_size + n + 1 > m->cap) return;
    char buf[LINE_MAX_BYTES + 1];
    memcpy(buf, msg, n);
    buf[n] = '\n';
    /* a report cut short by a full disk is ended first, so it cannot run
     * into this one and spoil both: kilnd skips the torn line */
    if (m->metrics_torn) {
        if (write(m->metrics, "\n", 1) != 1) return;
        m->metrics_torn = false;
        m->metrics_size++;
    }
    ssize_t w = write(m->metrics, buf, n + 1);
    if (w > 0) m->metrics_size += (unsigned long long)w;
    if (w > 0 && w < (ssize_t)(n + 1)) m->metrics_torn = true;
}

/* srun's own words when a task of its step did not start (Slurm's
 * src/api/step_launch.c: error("task %u launch failed: %s", ...), which
 * srun's log prints with "srun: error: " before it). The first is kept. */
static void launch_line(mon *m, const stream *s, const char *msg, size_t n)
{
    static const char pre[] = "srun: error: task ";
    static const char mid[] = " launch failed: ";
    if (!m->srun || m->launch_failed[0] || strcmp(s->sev, "ERROR") != 0) return;
    if (n <= sizeof pre - 1 || memcmp(msg, pre, sizeof pre - 1) != 0) return;
    size_t k = sizeof pre - 1;
    while (k < n && msg[k] >= '0' && msg[k] <= '9')
        k++;
    if (k == sizeof pre - 1 || n - k < sizeof mid - 1 || memcmp(msg + k, mid, sizeof mid - 1) != 0)
        return;
    /* from "task": what srun said, without its "srun: error: " */
    snprintf(m->launch_failed, sizeof m->launch_failed, "%.*s", (int)(n - 13), msg + 13);
}

static void emit(mon *m, stream *s, bool flush)
{
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++)
        if (s->buf[i] == '\n') {
            metrics_line(m, s, s->buf + start, i - start);
            launch_line(m, s, s->buf + start, i - start);
            line(m, s->sev, s->buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && s->len == LINE_MAX_BYTES) flush = true; /* a line too long: cut it */
    if (flush && start < s->len) {
        metrics_line(m, s, s->buf + start, s->len - start);
        line(m, s->sev, s->buf + start, s->len - start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

/* Reads what is there; closes the fd at EOF. */
static void pump(mon *m, stream *s)
{
    while (s->fd >= 0) {
        ssize_t n = read(s->fd, s->buf + s->len, LINE_MAX_BYTES - s->len);
        if (n > 0) {
            s->len += (size_t)n;
            emit(m, s, false);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        emit(m, s, true);
        close(s->fd);
        s->fd = -1;
    }
}

static void write_exit(const mon *m, int code, const char *reason)
{
    char path[PATH_MAX + 16], text[1200];
    snprintf(path, sizeof path, "%s.exit", m->state);
    snprintf(text, sizeof text, "code %d\nreason %s\n", code, reason ? reason : "");
    kiln__write_atomic(path, text, strlen(text), 0644);
}

static int pipe_nb(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Runs argv with its output as lines of task "service" in the job's log (the
 * image pull); `last` keeps its last stderr line for the failure reason.
 * Returns the exit code (127 when it cannot start). */
static int run_logged(mon *m, char **argv, char *last, size_t lastlen)
{
    int p[2];
    if (pipe_nb(p) < 0) return 127;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    mon sm = *m;
    sm.task = "service";
    sm.last = last; /* the last line is podman's "Error: ..." */
    sm.lastlen = lastlen;
    stream s = {.fd = p[0], .sev = "INFO"};
    last[0] = '\0';
    while (s.fd >= 0) {
        struct pollfd pf = {.fd = s.fd, .events = POLLIN};
        poll(&pf, 1, 1000);
        pump(&sm, &s);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Makes sure the image is there before the program starts, by `policy`
 * (the header says how). Returns 0, or -1 after writing the exit file with
 * the reason. `pull` may be NULL (Never); its last word is the image. */
static int pull_image(mon *m, const char *policy, char **pull, char **exists)
{
    char last[1024], msg[PATH_MAX];
    const char *image = "";
    for (char **a = exists; *a; a++)
        image = *a; /* "podman image exists IMG": the last word */
    bool always = strcmp(policy, "Always") == 0, never = strcmp(policy, "Never") == 0;
    int rc = 0, n;
    if (always && pull) {
        rc = run_logged(m, pull, last, sizeof last);
        if (rc == 0) return 0;
        if (run_logged(m, exists, msg, sizeof msg) == 0) {
            n = snprintf(msg, sizeof msg,
                         "%s: imagePullPolicy Always: cannot pull %s (podman pull exit %d: %s); "
                         "running the copy in local storage",
                         m->task, image, rc, last[0] ? last : "no output");
            kiln_log_write(m->job_log, "WARNING", "service", msg, (size_t)n);
            return 0;
        }
        snprintf(msg, sizeof msg, "cannot pull the image %s of %s (podman pull exit %d): %s", image,
                 m->task, rc, last[0] ? last : "no output");
        write_exit(m, -1, msg);
        return -1;
    }
    if (run_logged(m, exists, last, sizeof last) == 0) return 0;
    if (never || !pull) {
        snprintf(msg, sizeof msg,
                 "the image %s of %s is not in local storage and its imagePullPolicy is Never",
                 image, m->task);
        write_exit(m, -1, msg);
        return -1;
    }
    n = snprintf(msg, sizeof msg, "%s: the image %s is not in local storage: pulling it", m->task,
                 image);
    kiln_log_write(m->job_log, "INFO", "service", msg, (size_t)n);
    rc = run_logged(m, pull, last, sizeof last);
    if (rc == 0) return 0;
    snprintf(msg, sizeof msg, "cannot pull the image %s of %s (podman pull exit %d): %s", image,
             m->task, rc, last[0] ? last : "no output");
    write_exit(m, -1, msg);
    return -1;
}

/* The highest capability this kernel has (/proc/sys/kernel/cap_last_cap;
 * 40 where it cannot be read, Linux 5.9's). */
static int cap_last(void)
{
    int last = 40;
    FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "r");
    if (f && fscanf(f, "%d", &last) != 1) last = 40;
    if (f) fclose(f);
    return last;
}

/* Takes each of names[0..n) (pairs "--cap-drop CAP" in argv: every other
 * one) off the bounding set; -1 after saying why. A capability this kernel
 * does not have is nothing to drop. */
static int drop_caps(char **pairs, int n)
{
    int last = cap_last();
    for (int k = 0; k < n; k++) {
        int cap = kiln_cap_number(pairs[2 * k + 1]);
        for (int c = cap == KILN_CAP_ALL ? 0 : cap; c <= (cap == KILN_CAP_ALL ? last : cap); c++) {
            if (c > last) break;
            if (prctl(PR_CAPBSET_DROP, (unsigned long)c, 0, 0, 0) < 0) {
                fprintf(stderr, "kiln: cannot drop capability %d (%s): %s\n", c, pairs[2 * k + 1],
                        strerror(errno));
                return -1;
            }
        }
    }
    return 0;
}

static int take_argv(int argc, char **argv, int *i, char ***out)
{
    if (*i >= argc) return -1;
    int n = atoi(argv[(*i)++]);
    if (n < 0 || *i + n > argc) return -1;
    *out = n ? &argv[*i] : NULL;
    *i += n;
    return n;
}

int main(int argc, char **argv)
{
    mon m = {.job_log = -1, .rep_log = -1, .metrics = -1};
    char **pull = NULL, **exists = NULL;
    int i = 1;
    if (argc < 14) {
        fprintf(stderr, "kiln-monitor: started by kilnd only (see the source's header)\n");
        return 2;
    }
    m.state = argv[i++];
    m.job_log_path = argv[i++];
    const char *rep_log = argv[i++];
    m.task = argv[i++];
    m.cap = strtoull(argv[i++], NULL, 10);
    const char *cwd = argv[i++];
    long uid = strtol(argv[i++], NULL, 10), gid = strtol(argv[i++], NULL, 10);
    const char *policy = argv[i++];
    int npull = take_argv(argc, argv, &i, &pull);
    int nexists = npull < 0 ? -1 : take_argv(argc, argv, &i, &exists);
    /* securityContext allowPrivilegeEscalation: false (optional: a kilnd
     * of before it started monitors without it) */
    bool no_new_privs = nexists >= 0 && i < argc && strcmp(argv[i], "--no-new-privs") == 0;
    if (no_new_privs) i++;
    /* --cap-drop CAP...: checked now, dropped in the child */
    char **cap_drop = &argv[i];
    int n_cap_drop = 0;
    while (nexists >= 0 && i + 1 < argc && strcmp(argv[i], "--cap-drop") == 0) {
        if (kiln_cap_number(argv[i + 1]) == -1) {
            fprintf(stderr, "kiln-monitor: --cap-drop %s: not a Linux capability\n", argv[i + 1]);
            return 2;
        }
        i += 2;
        n_cap_drop++;
    }
    /* --exec-socket SOCKET PEER_UID NEXEC EXEC...: opened once the program runs */
    const char *xsock = NULL;
    long xuid = -1;
    char **xargv = NULL;
    int nx = 0;
    if (nexists >= 0 && i + 2 < argc && strcmp(argv[i], "--exec-socket") == 0) {
        xsock = argv[i + 1];
        xuid = strtol(argv[i + 2], NULL, 10);
        i += 3;
        nx = take_argv(argc, argv, &i, &xargv);
        if (nx <= 0) nexists = -1; /* bad arguments, below */
    }
    if (nexists < 0 || i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) {
        fprintf(stderr, "kiln-monitor: bad arguments\n");
        return 2;
    }
    char **prog = &argv[i + 1];
    const char *base = strrchr(prog[0], '/');
    m.srun = strcmp(base ? base + 1 : prog[0], "srun") == 0;
    /* terminate the argv groups in place: "--" and the counts follow them */
    char **pull_v = NULL, **exists_v = NULL;
    if (npull) {
        pull_v = calloc((size_t)npull + 1, sizeof *pull_v);
        if (pull_v) memcpy(pull_v, pull, (size_t)npull * sizeof *pull_v);
    }
    if (nexists) {
        exists_v = calloc((size_t)nexists + 1, sizeof *exists_v);
        if (exists_v) memcpy(exists_v, exists, (size_t)nexists * sizeof *exists_v);
    }
    char **xargv_v = NULL;
    if (nx) {
        xargv_v = calloc((size_t)nx + 1, sizeof *xargv_v);
        if (xargv_v) memcpy(xargv_v, xargv, (size_t)nx * sizeof *xargv_v);
    }

    signal(SIGPIPE, SIG_IGN);
    int life = fcntl(3, F_GETFD) >= 0 ? 3 : -1;
    if (life >= 0) fcntl(life, F_SETFD, FD_CLOEXEC);
    m.job_log = open(m.job_log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    m.rep_log = open(rep_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    {
        char mpath[PATH_MAX + 16];
        snprintf(mpath, sizeof mpath, "%s.metrics", m.state);
        m.metrics = open(mpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    }

    /* the image, by its pull policy (progress in the log) */
    if (exists_v && pull_image(&m, policy, pull_v, exists_v) != 0) return 1;

    stream out = {.fd = -1, .sev = "INFO"}, err = {.fd = -1, .sev = "ERROR"};
    int po[2], pe[2];
    if (pipe_nb(po) < 0 || pipe_nb(pe) < 0) {
        write_exit(&m, -1, "the monitor cannot make pipes");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        write_exit(&m, -1, "the monitor cannot fork");
        return 1;
    }
    if (child == 0) {
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        signal(SIGPIPE, SIG_DFL);
        /* off the bounding set while still root (CAP_SETPCAP), for good */
        if (n_cap_drop && geteuid() == 0 && drop_caps(cap_drop, n_cap_drop) < 0) _exit(127);
        /* the project's user: groups first, while still allowed to set them */
        if (gid >= 0 && (setgroups(1, &(gid_t){(gid_t)gid}) < 0 || setgid((gid_t)gid) < 0)) {
            fprintf(stderr, "kiln: cannot become group %ld: %s\n", gid, strerror(errno));
            _exit(127);
        }
        if (uid >= 0 && setuid((uid_t)uid) < 0) {
            fprintf(stderr, "kiln: cannot become user %ld: %s\n", uid, strerror(errno));
            _exit(127);
        }
        if (chdir(cwd) < 0) {
            fprintf(stderr, "kiln: cannot enter the job's working directory %s: %s\n", cwd,
                    strerror(errno));
            _exit(127);
        }
        /* after the switch, which no_new_privs would not stop (setuid is
         * not an exec), and inherited by all the program runs */
        if (no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
            fprintf(stderr, "kiln: cannot set no_new_privs: %s\n", strerror(errno));
            _exit(127);
        }
        execvp(prog[0], prog);
        fprintf(stderr, "kiln: cannot execute the replica's program: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(child, child);
    close(po[1]);
    close(pe[1]);
    out.fd = po[0];
    err.fd = pe[0];
    uint64_t mst = kiln_proc_start_time(getpid()), cst = kiln_proc_start_time(child);
    char text[256], path[PATH_MAX + 16];
    snprintf(text, sizeof text, "monitor %d %llu\nchild %d %llu\n", (int)getpid(),
             (unsigned long long)mst, (int)child, (unsigned long long)cst);
    snprintf(path, sizeof path, "%s.state", m.state);
    kiln__write_atomic(path, text, strlen(text), 0644);
    if (life >= 0) {
        int n = snprintf(text, sizeof text, "S %d %llu\n", (int)child, (unsigned long long)cst);
        if (write(life, text, (size_t)n) != n) {
            /* kilnd is gone already: it adopts from the state file */
        }
    }

    /* the exec service, once the container is being started (the agent
     * waits for the socket, as ssh waits for sshd) */
    kiln_xsrv *xs = NULL;
    if (xsock && xargv_v) {
        char xwhy[512], xmsg[600];
        if (!(xs = kiln_xsrv_open(xsock, xargv_v, xuid, xwhy, sizeof xwhy))) {
            int n = snprintf(xmsg, sizeof xmsg, "[kiln] the MPIJob exec service is not there: %s",
                             xwhy);
            line(&m, "WARNING", xmsg, n < (int)sizeof xmsg ? (size_t)n : sizeof xmsg - 1);
        }
    }

    int status = 0;
    bool exited = false;
    int64_t give_up = 0;
    for (;;) {
        struct pollfd pf[2 + 65] = {{.fd = out.fd, .events = POLLIN},
                                    {.fd = err.fd, .events = POLLIN}};
        size_t npf = 2 + kiln_xsrv_pollfds(xs, pf + 2, 65);
        poll(pf, (nfds_t)npf, exited ? 50 : 200);
        pump(&m, &out);
        pump(&m, &err);
        kiln_xsrv_tick(xs);
        if (!exited && waitpid(child, &status, WNOHANG) == child) {
            exited = true;
            /* the replica's ranks go with it, as a pod's exec'd processes */
            kiln_xsrv_close(xs);
            xs = NULL;
            /* what the program left of its group goes with it, as the pipes'
             * other holders; their last output is still read below */
            kill(-child, SIGKILL);
            give_up = 20; /* at most a second more of reading */
        }
        if (exited && ((out.fd < 0 && err.fd < 0) || --give_up <= 0)) break;
    }
    emit(&m, &out, true);
    emit(&m, &err, true);
    /* a loss not marked yet (no line came after the space returned) */
    mark_loss(&m, m.job_log, &m.job_loss);
    mark_loss(&m, m.rep_log, &m.rep_loss);
    int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                 : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255);
    if (m.launch_failed[0]) {
        /* the reason as kilnd shows it; srun's own words end it */
        char why[600];
        snprintf(why, sizeof why,
                 "Slurm could not start the replica's step on its node (srun exited %d): %s", code,
                 m.launch_failed);
        write_exit(&m, -1, why);
    } else {
        write_exit(&m, code, NULL);
    }
    kiln_xsrv_close(xs);
    free(pull_v);
    free(exists_v);
    free(xargv_v);
    return 0;
}
