/* src/exec/proc.c - replica processes and log lines (kiln/exec.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "kiln/exec.h"
#include "kiln/store.h" /* kiln_format_time, kiln_now_ns */
#include "exec/exec_int.h"

void kiln__child_default_signals(void)
{
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

extern char **environ;

/* environ with every NAME of `env` replaced: a NULL-terminated array whose
 * strings are borrowed (from environ and env), so only the array is freed. */
static char **merged_env(const kiln_strv *env)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **out = calloc(n + env->n + 1, sizeof *out);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool replaced = false;
        for (size_t j = 0; j < env->n && !replaced; j++)
            replaced = strncmp(env->v[j], environ[i], nl) == 0 && env->v[j][nl] == '=';
        if (!replaced) out[k++] = environ[i];
    }
    for (size_t j = 0; j < env->n; j++)
        out[k++] = env->v[j];
    out[k] = NULL;
    return out;
}

pid_t kiln_proc_spawn(const kiln_strv *argv, const kiln_strv *env, const char *cwd, int *out_fd,
                      int *err_fd)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    char **envp = NULL, **av = NULL;
    pid_t pid = -1;
    int saved = 0;

    *out_fd = *err_fd = -1;
    if (argv->n == 0) {
        errno = EINVAL;
        return -1;
    }
    envp = merged_env(env);
    av = calloc(argv->n + 1, sizeof *av);
    if (!envp || !av) {
        saved = ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < argv->n; i++)
        av[i] = argv->v[i];
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        saved = errno;
        goto out;
    }
    pid_t parent = getpid();
    pid = fork();
    if (pid < 0) {
        saved = errno;
        goto out;
    }
    if (pid == 0) {
        /* child: only async-signal-safe calls until exec */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* kilnd died before prctl */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        kiln__child_default_signals();
        if (cwd && chdir(cwd) < 0) {
            static const char msg[] = "kiln: cannot enter the job's working directory\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            _exit(127);
        }
        execvpe(av[0], av, envp);
        static const char msg[] = "kiln: cannot execute the replica's program: ";
        ssize_t w = write(2, msg, sizeof msg - 1);
        const char *es = strerror(errno);
        w = write(2, es, strlen(es));
        w = write(2, "\n", 1);
        (void)w;
        _exit(127);
    }
    /* also in the parent, so that a signal sent at once finds the group */
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    *out_fd = po[0];
    *err_fd = pe[0];
    po[0] = pe[0] = -1;
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pe[i] >= 0) close(pe[i]);
    }
    free(envp);
    free(av);
    if (saved) errno = saved;
    return pid;
}

void kiln_proc_signal(pid_t pid, int sig)
{
    if (pid <= 0) return;
    if (kill(-pid, sig) < 0) kill(pid, sig);
}

uint64_t kiln_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name may hold spaces and ')': fields start after the last ')' */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* after ")" come fields 3, 4, ...: starttime (field 22) is the 20th token */
    char *save = NULL, *tok = strtok_r(p + 1, " ", &save);
    unsigned long long v = 0;
    for (int field = 3; tok; field++, tok = strtok_r(NULL, " ", &save))
        if (field == 22) {
            v = strtoull(tok, NULL, 10);
            break;
        }
    return v;
}

int kiln_log_write(int fd, const char *severity, const char *task, const char *msg, size_t len)
{
    char ts[32], *line = NULL;
    kiln_format_time(kiln_now_ns(), ts);
    if (len > 16384) len = 16384; /* a line longer than this is cut: logs are for people */
    int n = asprintf(&line, "%s\t%s\t%s\t%.*s\n", severity, ts, task, (int)len, msg);
    if (n < 0) return -1;
    for (int i = 0; i < n - 1; i++)
        if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
    /* a full disk loses log lines, never the job: the caller may count them */
    ssize_t w = write(fd, line, (size_t)n);
    int e = errno;
    free(line);
    errno = e;
    if (w == n) return 0;
    if (w <= 0) {
        if (w == 0) errno = ENOSPC;
        return -1;
    }
    errno = ENOSPC; /* a short regular-file write: the disk (or a quota) ran out */
    return 1;
}
