/* src/devices/devices_check.c - the GPU check before work (kiln/devices.h): a
 * site's check program on one idle GPU, then DCGM's quick diagnostic where
 * DCGM is installed. Each runs as a child process with a deadline; what it
 * printed last is the reason a failing GPU stays out of service. */
#include "kiln/devices.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devices/childenv.h"

#define OUT_CAP 4096 /* what is kept of a check's output: its end */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The last non-empty line of buf[0..n). */
static void last_line(const char *buf, size_t n, char *out, size_t len)
{
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    size_t b = n;
    while (b && buf[b - 1] != '\n')
        b--;
    snprintf(out, len, "%.*s", (int)(n - b), buf + b);
}

/* Runs argv with the device named in its environment, for at most
 * timeout_s; its exit status (-1: could not start, -2: timed out) and the
 * last line it printed (stdout and stderr together). Everything the child
 * needs is made before the fork: kilnd has threads, and a child of a
 * threaded process may only make async-signal-safe calls before its exec
 * (a setenv there, which allocates, hung the check under ASan whenever
 * another thread held the allocator's lock at the fork). */
static int run(char *const argv[], const kiln_device *dv, int timeout_s, char *line, size_t len)
{
    int fd[2];
    char buf[OUT_CAP], pbuf[4096];
    size_t n = 0;
    int status = -1;
    line[0] = '\0';
    static const char *const names[] = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                                        "KILN_GPU_CHECK_UUID", "KILN_GPU_CHECK_INDEX"};
    char idx[16];
    snprintf(idx, sizeof idx, "%d", dv->index);
    const char *vals[] = {dv->uuid, dv->uuid, dv->uuid, idx};
    kiln__childenv ce;
    const char *path = kiln__find_prog(argv[0], pbuf, sizeof pbuf);
    if (!path || !kiln__childenv_make(&ce, names, vals, 4)) return -1;
    pid_t pid = -1;
    if (pipe(fd) == 0 && (pid = fork()) < 0) {
        close(fd[0]);
        close(fd[1]);
    }
    if (pid < 0) {
        kiln__childenv_free(&ce);
        return -1;
    }
    if (pid == 0) {
        static const char msg[] = "cannot run the GPU check program\n";
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        for (int f = 3; f < 1024; f++) /* none of kilnd's sockets and files */
            close(f);
        setpgid(0, 0);
        execve(path, argv, ce.env);
        if (write(2, msg, sizeof msg - 1) < 0) {
            /* nowhere to say it */
        }
        _exit(127);
    }
    kiln__childenv_free(&ce);
    close(fd[1]);
    int64_t until = mono_ms() + (int64_t)timeout_s * 1000;
    bool timed_out = false;
    for (;;) {
        int64_t left = until - mono_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {fd[0], POLLIN, 0};
        int r = poll(&p, 1, (int)(left < 1000 ? left : 1000));
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        if (n == sizeof buf) { /* keep the end: slide the second half down */
            memmove(buf, buf + sizeof buf / 2, sizeof buf / 2);
            n = sizeof buf / 2;
        }
        ssize_t k = read(fd[0], buf + n, sizeof buf - n);
        if (k <= 0) break; /* EOF: it exited (or closed its output) */
        n += (size_t)k;
    }
    if (timed_out) kill(-pid, SIGKILL);
    close(fd[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    last_line(buf, n, line, len);
    if (timed_out)
        status = -2;
    else
        status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    return status;
}

/* dcgmi on PATH, unless KILN_GPU_CHECK_DCGMI names another (or "no") */
static const char *dcgmi_path(char *buf, size_t len)
{
    const char *env = getenv("KILN_GPU_CHECK_DCGMI");
    if (env && *env) return strcmp(env, "no") == 0 ? NULL : env;
    return kiln__find_prog("dcgmi", buf, len);
}

bool kiln_gpu_check_run(const char *prog, const kiln_device *dv, int timeout_s, char *why,
                        size_t len, int64_t *ms)
{
    char line[256], dp[512], idx[16];
    int64_t t0 = mono_ms();
    bool ok = false;
    char *argv[] = {(char *)prog, dv->uuid, NULL};
    int rc = run(argv, dv, timeout_s, line, sizeof line);
    if (rc != 0) {
        if (rc == -2)
            snprintf(why, len, "%s did not finish in %d s%s%s", prog, timeout_s,
                     line[0] ? ": " : "", line);
        else if (rc == -1)
            snprintf(why, len, "%s could not be started", prog);
        else
            snprintf(why, len, "%s exited %d%s%s", prog, rc, line[0] ? ": " : "", line);
        goto out;
    }
    /* DCGM's quick diagnostic where DCGM is installed (a MIG instance is
     * not a GPU DCGM's diag takes) */
    const char *dcgmi = dv->mig_profile ? NULL : dcgmi_path(dp, sizeof dp);
    if (dcgmi) {
        snprintf(idx, sizeof idx, "%d", dv->index);
        char *dargv[] = {(char *)dcgmi, "diag", "-r", "1", "-i", idx, NULL};
        rc = run(dargv, dv, timeout_s, line, sizeof line);
        if (rc != 0) {
            snprintf(why, len, "dcgmi diag -r 1 -i %s %s%s%s", idx,
                     rc == -2 ? "did not finish in time" : "failed", line[0] ? ": " : "", line);
            goto out;
        }
    }
    ok = true;
    snprintf(why, len, "passed (%s%s)%s%s", prog, dcgmi ? ", dcgmi diag -r 1" : "",
             line[0] ? ": " : "", line);
out:
    *ms = mono_ms() - t0;
    return ok;
}
