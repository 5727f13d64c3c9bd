/* tools/launch.c - kiln-train's --world_size launcher (see launch.h and
 * docs/distributed.md): it forks the local replicas of one all-reduce group,
 * which then train with the library's multi_worker_mirrored strategy
 * (kiln/strategy.h, src/runtime/strategy/). */
#include "tools/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void kt_launch_key(char *key, size_t n)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(key, n, "kiln-train-%ld-%llx", (long)getpid(),
             (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec);
}

/* ---- the --world_size launcher ---- */

static volatile sig_atomic_t g_parent_term;

static void parent_on_term(int sig)
{
    (void)sig;
    g_parent_term = 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

int kt_launch(int n, const char *key, int *rank)
{
    int rc = 1;
    pid_t parent = getpid(), *pids = calloc((size_t)n, sizeof *pids);
    int *status = calloc((size_t)n, sizeof *status);
    if (!pids || !status) {
        fprintf(stderr, "kiln-train: out of memory\n");
        goto out;
    }
    struct sigaction sa = {0}, old_term, old_int;
    sa.sa_handler = parent_on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    fflush(stdout);
    fflush(stderr);
    int started = 0;
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "kiln-train: starting replica %d: %s\n", r, strerror(errno));
            break;
        }
        if (pid == 0) {
            /* the child: a replica; it dies with the launcher, whatever kills it */
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGINT, &old_int, NULL);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(1);
            if (r > 0) {
                int fd = open("/dev/null", O_WRONLY);
                if (fd >= 0) {
                    dup2(fd, STDOUT_FILENO);
                    close(fd);
                }
            }
            free(pids);
            free(status);
            *rank = r;
            return -1;
        }
        pids[r] = pid;
        started++;
    }
    /* wait for all; the first replica to fail on its own stops the others */
    int live = started, cause = -1, forwarded = 0, killed = 0, stopping = started < n;
    double stop_t0 = 0;
    struct timespec t;
    while (live > 0) {
        if (g_parent_term && !forwarded) {
            for (int r = 0; r < started; r++)
                if (pids[r] > 0) kill(pids[r], SIGTERM);
            forwarded = 1;
        }
        if (stopping && !killed) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            double now = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
            if (stop_t0 == 0) {
                stop_t0 = now;
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) kill(pids[r], SIGTERM);
            } else if (now - stop_t0 > 10.0) { /* a replica that ignores SIGTERM */
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
                killed = 1;
            }
        }
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == EINTR)) {
            sleep_ms(20);
            continue;
        }
        if (pid < 0) break;
        int r = 0;
        while (r < started && pids[r] != pid)
            r++;
        if (r == started) continue;
        pids[r] = -1;
        status[r] = st;
        live--;
        int ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 143);
        if (!ok && cause < 0) {
            cause = r;
            stopping = 1;
        }
    }
    /* a replica killed by a signal that we did not send is the likelier
     * cause than one that exited with an error because its peer died */
    for (int r = 0; r < started && !killed; r++)
        if (WIFSIGNALED(status[r]) && r != cause) {
            if (cause < 0 || !WIFSIGNALED(status[cause])) cause = r;
            break;
        }
    if (started < n) {
        rc = 1;
    } else if (cause >= 0) {
        int st = status[cause];
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "kiln-train: replica %d of %d was killed by signal %d (%s)%s\n", cause,
                    n, WTERMSIG(st), strsignal(WTERMSIG(st)), n > 1 ? "; stopped the others" : "");
            rc = 128 + WTERMSIG(st);
        } else {
            fprintf(stderr, "kiln-train: replica %d of %d failed (exit status %d)%s\n", cause, n,
                    WEXITSTATUS(st), n > 1 ? "; stopped the others" : "");
            rc = WEXITSTATUS(st);
        }
    } else {
        rc = 0;
        for (int r = 0; r < n; r++)
            if (WEXITSTATUS(status[r]) == 143) rc = 143;
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    /* the shm backend unlinks its segments once every rank has mapped them;
     * replicas killed before that (SIGKILL while joining) leave them in
     * /dev/shm. Every replica is gone now and the key was this launcher's
     * alone, so remove what may be left (names: src/collective/shm/shm.c) */
    char seg[128];
    snprintf(seg, sizeof seg, "/kiln-coll-%s", key);
    shm_unlink(seg);
    for (int i = 0; i < 8; i++) {
        snprintf(seg, sizeof seg, "/kiln-coll-%s-r%d", key, i);
        shm_unlink(seg);
    }
out:
    free(pids);
    free(status);
    return rc;
}

/* ---- the parameter_server hook's default ---- */

__attribute__((weak)) int kiln_train_ps_main(const struct kiln_tf_group *tf, const kt_opts *o)
{
    (void)tf;
    (void)o;
    fprintf(stderr, "kiln-train: the parameter_server strategy is not built in\n");
    return 2;
}
