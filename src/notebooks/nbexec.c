/* src/notebooks/nbexec.c - `kiln notebooks exec`: a command in a running
 * instance (notebooks.h, docs/notebooks.md).
 *
 * The command runs as the instance's Jupyter runs: the project's user, the
 * instance's home as its working directory, and Jupyter's own environment,
 * read from /proc/PID/environ of the replica (so CUDA_VISIBLE_DEVICES, HOME,
 * PATH of the notebook environment are exactly the notebook's). It is a
 * child of kilnd, not of the replica's monitor: it ends with its timeout,
 * and a long script is better started with nohup or in a Jupyter terminal. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "notebooks/notebooks_int.h"
#include "kiln/auth.h"
#include "kiln/store.h"
#include "util/utf8.h"

#define OUT_CAP (1u << 20) /* bytes kept of each of stdout and stderr */

typedef struct sink {
    char *buf;
    size_t n;
    bool cut;
} sink;

static void take(sink *s, const char *p, size_t n)
{
    if (s->n + n > OUT_CAP) {
        n = OUT_CAP - s->n;
        s->cut = true;
    }
    if (!n) return;
    char *nb = realloc(s->buf, s->n + n + 1);
    if (!nb) return;
    s->buf = nb;
    memcpy(s->buf + s->n, p, n);
    s->n += n;
    s->buf[s->n] = '\0';
}

/* The NUL-separated environment of pid as an envp (one allocation each). */
static char **environ_of(long pid, char **blob)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    FILE *f = fopen(path, "rb");
    size_t n = 0, cap = 1 << 16, k = 0;
    char *b = malloc(cap + 1), **env = NULL;
    if (!f || !b) goto fail;
    for (size_t r; (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            if (cap >= (1u << 20)) goto fail;
            char *nb = realloc(b, (cap *= 2) + 1);
            if (!nb) goto fail;
            b = nb;
        }
    }
    b[n] = '\0';
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += b[i] == '\0';
    if (!(env = calloc(count + 2, sizeof *env))) goto fail;
    for (size_t i = 0; i < n; i += strlen(b + i) + 1)
        if (b[i]) env[k++] = b + i;
    fclose(f);
    *blob = b;
    return env;
fail:
    if (f) fclose(f);
    free(b);
    free(env);
    return NULL;
}

json_t *kiln_nb_exec(kiln_notebooks *nb, const char *project, const char *name, json_t *command,
                     int timeout_s, char *why, size_t whylen)
{
    json_t *doc = kiln_nb_get(nb, project, name), *out = NULL;
    kiln_job_record *r = NULL;
    char **env = NULL, *blob = NULL, home[4096];
    const char **argv = NULL;
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    long uid = -1, gid = -1;
    sink so = {0}, se = {0};
    pid_t pid = -1;

    if (!doc) {
        snprintf(why, whylen, "no such instance");
        goto out;
    }
    const char *state = json_string_value(json_object_get(doc, "state"));
    const char *job = json_string_value(json_object_get(json_object_get(doc, "kiln"), "job"));
    if (!state || strcmp(state, "ACTIVE") != 0 || !job) {
        snprintf(why, whylen, "the instance is %s, not ACTIVE: start it first",
                 state ? state : "unknown");
        goto out;
    }
    if (kiln_store_job_get(nb->store, project, job, &r) != KILN_OK || !r->runtime) {
        snprintf(why, whylen, "the instance's run %s has no runtime record", job);
        goto out;
    }
    json_t *rt = json_loads(r->runtime, 0, NULL);
    long rpid = (long)json_integer_value(
        json_object_get(json_array_get(json_object_get(rt, "replicas"), 0), "pid"));
    json_decref(rt);
    if (rpid <= 0 || !(env = environ_of(rpid, &blob))) {
        snprintf(why, whylen, "cannot read the environment of the instance's Jupyter (pid %ld)",
                 rpid);
        goto out;
    }
    if (kiln_users_project(nb->users, project, &uid, &gid, why, whylen) != KILN_OK) goto out;
    kiln_nb_home(nb, project, name, home, sizeof home);
    size_t n = json_array_size(command);
    if (!(argv = calloc(n + 3, sizeof *argv))) goto oom;
    argv[0] = "env"; /* finds the command on the notebook's PATH (envp's) */
    argv[1] = "--";  /* a command starting with '-' is no option of env's */
    for (size_t i = 0; i < n; i++)
        argv[i + 2] = json_string_value(json_array_get(command, i));
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) goto oom;
    pid = fork();
    if (pid < 0) goto oom;
    if (pid == 0) { /* async-signal-safe calls only, up to execve */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0) _exit(126);
        if (uid >= 0 &&
            (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0 || setuid((uid_t)uid) < 0))
            _exit(126);
        if (chdir(home) < 0) _exit(126);
        execve("/usr/bin/env", (char *const *)argv, env);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool timed_out = false;
    char buf[8192];
    while (po[0] >= 0 || pe[0] >= 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (long)timeout_s * 1000 -
                    ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) {
            timed_out = true;
            kill(-pid, SIGKILL);
            break;
        }
        struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
        if (poll(pf, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            int *fd = i ? &pe[0] : &po[0];
            if (*fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t k = read(*fd, buf, sizeof buf);
            if (k > 0) {
                take(i ? &se : &so, buf, (size_t)k);
            } else if (k == 0 || errno != EINTR) {
                close(*fd);
                *fd = -1;
            }
        }
    }
    int st = 0;
    if (timed_out) kill(-pid, SIGKILL);
    waitpid(pid, &st, 0);
    if (so.buf) kiln__utf8_scrub(so.buf);
    if (se.buf) kiln__utf8_scrub(se.buf);
    out = json_pack("{s:i,s:s,s:s,s:b,s:b}", "exitCode",
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), "stdout",
                    so.buf ? so.buf : "", "stderr", se.buf ? se.buf : "", "truncated",
                    so.cut || se.cut, "timedOut", timed_out);
    goto out;
oom:
    snprintf(why, whylen, "cannot start the command: %s", strerror(errno));
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pe[i] >= 0) close(pe[i]);
    }
    free(so.buf);
    free(se.buf);
    free(argv);
    free(env);
    free(blob);
    kiln_job_record_free(r);
    json_decref(doc);
    return out;
}
