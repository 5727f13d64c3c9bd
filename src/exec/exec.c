/* src/exec/exec.c - the executor (kiln/exec.h): the backend table's
 * dispatch, and the monitor that the local and container backends share. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/envvar.h"
#include "exec/exec_int.h"

static const kiln__exec_backend *const backends[KILN_EXEC_KINDS] = {
    [KILN_EXEC_LOCAL] = &kiln__exec_local,
    [KILN_EXEC_CONTAINER] = &kiln__exec_container,
};

static const kiln__exec_backend *backend(kiln_exec_kind kind)
{
    return kind >= 0 && kind < KILN_EXEC_KINDS ? backends[kind] : backends[KILN_EXEC_LOCAL];
}

const char *kiln_exec_kind_name(kiln_exec_kind kind)
{
    return backend(kind)->name;
}

kiln_err kiln_exec_check(const kiln_exec_config *cfg, kiln_exec_kind kind, size_t n_gpus,
                         bool simulated, char *why, size_t whylen)
{
    return backend(kind)->check(cfg, n_gpus, simulated, why, whylen);
}

kiln_err kiln_exec_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                         kiln_exec_handle *h, char *why, size_t whylen)
{
    return backend(spec->kind)->start(cfg, spec, h, why, whylen);
}

void kiln_exec_signal(const kiln_exec_config *cfg, const kiln_exec_handle *h, int sig)
{
    backend(h->kind)->signal(cfg, h, sig);
}

kiln_exec_status kiln_exec_poll(const kiln_exec_config *cfg, kiln_exec_handle *h, int *code,
                                char *why, size_t whylen)
{
    return backend(h->kind)->poll(cfg, h, code, why, whylen);
}

void kiln_exec_adopt(kiln_exec_kind kind, const char *state, const char *name, pid_t monitor,
                     uint64_t monitor_start, kiln_exec_handle *h)
{
    memset(h, 0, sizeof *h);
    h->kind = kind;
    h->life_fd = -1;
    backend(kind)->adopt(state, name, monitor, monitor_start, h);
}

/* ---------- the monitor's files ---------- */

bool kiln__alive(pid_t pid, uint64_t start)
{
    char path[64], buf[512];
    if (pid <= 0) return false;
    uint64_t now = kiln_proc_start_time(pid);
    if (now == 0 || now != start) return false;
    /* a zombie (a monitor kilnd has not reaped yet) is not running */
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

void kiln_exec_forget(const char *state)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s.exit", state);
    unlink(path);
    snprintf(path, sizeof path, "%s.state", state);
    unlink(path);
    snprintf(path, sizeof path, "%s.metrics", state);
    unlink(path);
}

/* Reads STATE.SUFFIX into buf; false when it is not there. */
static bool read_file(const char *state, const char *suffix, char *buf, size_t len)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s.%s", state, suffix);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return true;
}

static void read_child(kiln_exec_handle *h)
{
    char buf[256];
    int pid = 0;
    unsigned long long st = 0;
    if (h->pid > 0 || !read_file(h->state, "state", buf, sizeof buf)) return;
    const char *c = strstr(buf, "child ");
    if (c && sscanf(c, "child %d %llu", &pid, &st) == 2 && pid > 0) {
        h->pid = pid;
        h->pid_start = st;
    }
}

/* The exit file: true when there, with *code and (for a start that failed)
 * the reason. */
static bool read_exit(const kiln_exec_handle *h, int *code, char *why, size_t whylen)
{
    char buf[1400];
    if (!read_file(h->state, "exit", buf, sizeof buf)) return false;
    *code = 255;
    sscanf(buf, "code %d", code);
    const char *r = strstr(buf, "\nreason ");
    if (why && whylen) {
        why[0] = '\0';
        if (r) {
            r += 8;
            size_t n = strcspn(r, "\n");
            snprintf(why, whylen, "%.*s", (int)n, r);
        }
    }
    return true;
}

kiln_exec_status kiln__mon_poll(const kiln_exec_config *cfg, kiln_exec_handle *h, int *code,
                                char *why, size_t whylen)
{
    (void)cfg;
    bool gone = false;
    if (h->life_fd >= 0) {
        for (;;) {
            ssize_t n = read(h->life_fd, h->lbuf + h->llen, sizeof h->lbuf - 1 - h->llen);
            if (n > 0) {
                h->llen += (size_t)n;
                h->lbuf[h->llen] = '\0';
                char *nl = strchr(h->lbuf, '\n');
                int pid = 0;
                unsigned long long st = 0;
                if (nl && sscanf(h->lbuf, "S %d %llu", &pid, &st) == 2) {
                    h->pid = pid;
                    h->pid_start = st;
                }
                if (nl || h->llen == sizeof h->lbuf - 1) h->llen = 0;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) break;
            close(h->life_fd); /* EOF: the monitor has exited */
            h->life_fd = -1;
            gone = true;
            break;
        }
    } else {
        read_child(h);
        gone = !kiln__alive(h->monitor, h->monitor_start);
    }
    if (!gone) return h->pid > 0 ? KILN_EXEC_RUNNING : KILN_EXEC_STARTING;
    /* the monitor writes the exit file before it exits */
    if (read_exit(h, code, why, whylen)) return *code < 0 ? KILN_EXEC_FAILED : KILN_EXEC_EXITED;
    read_child(h);
    return KILN_EXEC_LOST;
}

void kiln__mon_adopt(const char *state, const char *name, pid_t monitor, uint64_t monitor_start,
                     kiln_exec_handle *h)
{
    snprintf(h->state, sizeof h->state, "%s", state);
    snprintf(h->name, sizeof h->name, "%s", name ? name : "");
    h->monitor = monitor;
    h->monitor_start = monitor_start;
    read_child(h);
}

kiln_err kiln_exec_list(const char *replicas_dir, kiln_strv *tasks)
{
    kiln_strv_clear(tasks);
    DIR *d = opendir(replicas_dir);
    if (!d) return errno == ENOENT ? KILN_OK : KILN_EIO;
    struct dirent *e;
    kiln_err err = KILN_OK;
    while (err == KILN_OK && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 7 || strcmp(e->d_name + n - 6, ".state") != 0) continue;
        char state[PATH_MAX], buf[256];
        int pid = 0;
        unsigned long long st = 0;
        snprintf(state, sizeof state, "%s/%.*s", replicas_dir, (int)(n - 6), e->d_name);
        if (!read_file(state, "state", buf, sizeof buf) ||
            sscanf(buf, "monitor %d %llu", &pid, &st) != 2 || !kiln__alive(pid, st))
            continue;
        char *task = strndup(e->d_name, n - 6);
        err = task ? kiln_strv_push(tasks, task) : KILN_ENOMEM;
        free(task);
    }
    closedir(d);
    return err;
}

/* ---------- starting a monitor ---------- */

/* What a replica may keep of kilnd's own environment (docs/service.md):
 * nothing else, so that no secret of kilnd's reaches a replica. */
const char *const kiln__exec_allowed_env[] = {"PATH", "LANG",   "LC_ALL",          "LC_CTYPE",
                                              "TZ",   "TMPDIR", "LD_LIBRARY_PATH", NULL};

static bool has_name(const kiln_strv *env, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; env && i < env->n; i++)
        if (strncmp(env->v[i], name, nl) == 0 && env->v[i][nl] == '=') return true;
    return false;
}

/* The monitor's environment: the allow-list of kilnd's, HOME/USER/LOGNAME of
 * the user the replica runs as, then spec->env (which wins). */
static kiln_err monitor_env(const kiln_exec_spec *spec, kiln_strv *out)
{
    kiln_err err = KILN_OK;
    for (size_t i = 0; err == KILN_OK && kiln__exec_allowed_env[i]; i++) {
        const char *v = getenv(kiln__exec_allowed_env[i]);
        if (v && !has_name(spec->env, kiln__exec_allowed_env[i]))
            err = kiln__env_put(out, kiln__exec_allowed_env[i], v);
    }
    if (err == KILN_OK && !getenv("PATH") && !has_name(spec->env, "PATH"))
        err = kiln__env_put(out, "PATH", "/usr/local/bin:/usr/bin:/bin");
    struct passwd pw, *pp = NULL;
    char pbuf[4096];
    if (getpwuid_r(spec->uid >= 0 ? (uid_t)spec->uid : geteuid(), &pw, pbuf, sizeof pbuf, &pp) ==
            0 &&
        pp) {
        if (err == KILN_OK && !has_name(spec->env, "HOME"))
            err = kiln__env_put(out, "HOME", pw.pw_dir);
        if (err == KILN_OK) err = kiln__env_put(out, "USER", pw.pw_name);
        if (err == KILN_OK) err = kiln__env_put(out, "LOGNAME", pw.pw_name);
    }
    for (size_t i = 0; err == KILN_OK && spec->env && i < spec->env->n; i++)
        err = kiln_strv_push(out, spec->env->v[i]);
    return err;
}

static kiln_err push_int(kiln_strv *v, long long x)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", x);
    return kiln_strv_push(v, b);
}

static kiln_err push_group(kiln_strv *v, const kiln_strv *g)
{
    kiln_err err = push_int(v, g ? (long long)g->n : 0);
    for (size_t i = 0; err == KILN_OK && g && i < g->n; i++)
        err = kiln_strv_push(v, g->v[i]);
    return err;
}

/* The children kilnd starts and does not wait for (monitors, `podman kill`):
 * kiln_exec_reap collects them, and only them. A waitpid(-1) there took the
 * exit status of children other threads wait for themselves: a notebook's
 * exec answered exit code 0 for a command that exited 3 (it_notebooks), and
 * a Slurm command's failure could read as success. */
static pthread_mutex_t g_kids_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t *g_kids;
static size_t g_n_kids, g_cap_kids;

void kiln__exec_child(pid_t pid)
{
    pthread_mutex_lock(&g_kids_mu);
    if (g_n_kids == g_cap_kids) {
        size_t cap = g_cap_kids ? 2 * g_cap_kids : 64;
        pid_t *k = realloc(g_kids, cap * sizeof *k);
        if (k) {
            g_kids = k;
            g_cap_kids = cap;
        }
    }
    /* out of memory: it stays a zombie until kilnd exits, nothing worse */
    if (g_n_kids < g_cap_kids) g_kids[g_n_kids++] = pid;
    pthread_mutex_unlock(&g_kids_mu);
}

void kiln_exec_reap(void)
{
    pthread_mutex_lock(&g_kids_mu);
    for (size_t i = 0; i < g_n_kids;) {
        pid_t r = waitpid(g_kids[i], NULL, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) {
            i++;
            continue;
        }
        g_kids[i] = g_kids[--g_n_kids]; /* reaped, or not ours any more (ECHILD) */
    }
    pthread_mutex_unlock(&g_kids_mu);
}

kiln_err kiln__mon_argv(const kiln__mon_args *a, const char *const *prog, size_t nprog,
                        kiln_strv *av)
{
    if (kiln_strv_push(av, a->monitor) != KILN_OK || kiln_strv_push(av, a->state) ||
        kiln_strv_push(av, a->job_log) || kiln_strv_push(av, a->rep_log) ||
        kiln_strv_push(av, a->task) || push_int(av, a->log_cap) ||
        kiln_strv_push(av, a->work_dir) || push_int(av, a->uid) || push_int(av, a->gid) ||
        kiln_strv_push(av, a->pull_policy ? a->pull_policy : "IfNotPresent") ||
        push_group(av, a->pull) || push_group(av, a->exists) ||
        (a->no_new_privs && kiln_strv_push(av, "--no-new-privs")))
        return KILN_ENOMEM;
    for (size_t i = 0; a->cap_drop && i < a->cap_drop->n; i++)
        if (kiln_strv_push(av, "--cap-drop") || kiln_strv_push(av, a->cap_drop->v[i]))
            return KILN_ENOMEM;
    if (a->exec_socket && a->exec_argv &&
        (kiln_strv_push(av, "--exec-socket") || kiln_strv_push(av, a->exec_socket) ||
         push_int(av, a->exec_uid) || push_group(av, a->exec_argv)))
        return KILN_ENOMEM;
    if (kiln_strv_push(av, "--") != KILN_OK) return KILN_ENOMEM;
    for (size_t i = 0; i < nprog; i++)
        if (kiln_strv_push(av, prog[i]) != KILN_OK) return KILN_ENOMEM;
    return KILN_OK;
}

/* *out = via then v (an empty v stays empty: no pull is no pull). */
static kiln_err via_prefix(const kiln_strv *via, const kiln_strv *v, kiln_strv *out)
{
    kiln_err err = KILN_OK;
    for (size_t i = 0; v->n && err == KILN_OK && i < via->n; i++)
        err = kiln_strv_push(out, via->v[i]);
    for (size_t i = 0; err == KILN_OK && i < v->n; i++)
        err = kiln_strv_push(out, v->v[i]);
    return err;
}

kiln_err kiln__mon_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                         const kiln_strv *prog, const kiln_strv *pull, const kiln_strv *exists,
                         const kiln_strv *exec_argv, long exec_uid, kiln_exec_handle *h, char *why,
                         size_t whylen)
{
    kiln_strv av = {0}, env = {0}, vprog = {0}, vpull = {0}, vexists = {0};
    char **avp = NULL, **envp = NULL;
    int life[2] = {-1, -1};
    kiln_err err = KILN_ENOMEM;

    memset(h, 0, sizeof *h);
    h->kind = spec->kind;
    h->life_fd = -1;
    snprintf(h->state, sizeof h->state, "%s", spec->state);
    snprintf(h->name, sizeof h->name, "%s", spec->name ? spec->name : "");
    if (!cfg->monitor) {
        snprintf(why, whylen, "kilnd cannot find kiln-monitor (give --monitor PATH)");
        return KILN_EINVAL;
    }
    kiln_exec_forget(spec->state);
    if (spec->via && spec->via->n) { /* each command runs on the replica's node */
        if (via_prefix(spec->via, prog, &vprog) != KILN_OK ||
            (pull && via_prefix(spec->via, pull, &vpull) != KILN_OK) ||
            (exists && via_prefix(spec->via, exists, &vexists) != KILN_OK))
            goto out;
        prog = &vprog;
        pull = pull ? &vpull : NULL;
        exists = exists ? &vexists : NULL;
    }
    kiln__mon_args ma = {.monitor = cfg->monitor,
                         .state = spec->state,
                         .job_log = spec->job_log,
                         .rep_log = spec->rep_log,
                         .task = spec->task,
                         .work_dir = spec->work_dir,
                         .pull_policy = spec->pull_policy,
                         .log_cap = (long long)cfg->log_cap,
                         .uid = spec->uid,
                         .gid = spec->gid,
                         .no_new_privs = spec->no_new_privs,
                         .cap_drop = spec->cap_drop,
                         .pull = pull,
                         .exists = exists,
                         .exec_socket = spec->exec_socket,
                         .exec_argv = exec_argv,
                         .exec_uid = exec_uid};
    if (kiln__mon_argv(&ma, (const char *const *)prog->v, prog->n, &av) != KILN_OK) goto out;
    if (monitor_env(spec, &env) != KILN_OK) goto out;
    avp = calloc(av.n + 1, sizeof *avp);
    envp = calloc(env.n + 1, sizeof *envp);
    if (!avp || !envp) goto out;
    memcpy(avp, av.v, av.n * sizeof *avp);
    memcpy(envp, env.v, env.n * sizeof *envp);
    if (pipe2(life, O_CLOEXEC) < 0) {
        snprintf(why, whylen, "cannot start %s: %s", spec->task, strerror(errno));
        err = KILN_EIO;
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "cannot start %s: %s", spec->task, strerror(errno));
        err = KILN_EIO;
        goto out;
    }
    if (pid == 0) {
        /* child: only async-signal-safe calls until exec. A session of its
         * own: nothing aimed at kilnd's group or terminal reaches it. */
        setsid();
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        dup2(life[1], 3);
        /* no descriptor of kilnd's (the store, client sockets) survives */
        syscall(SYS_close_range, 4U, ~0U, 0U);
        kiln__child_default_signals();
        execve(avp[0], avp, envp);
        _exit(127);
    }
    close(life[1]);
    life[1] = -1;
    fcntl(life[0], F_SETFL, O_NONBLOCK);
    h->life_fd = life[0];
    life[0] = -1;
    h->monitor = pid;
    h->monitor_start = kiln_proc_start_time(pid);
    kiln__exec_child(pid);
    err = KILN_OK;
out:
    if (err == KILN_ENOMEM) snprintf(why, whylen, "out of memory starting %s", spec->task);
    for (int i = 0; i < 2; i++)
        if (life[i] >= 0) close(life[i]);
    free(avp);
    free(envp);
    kiln_strv_clear(&av);
    kiln_strv_clear(&env);
    kiln_strv_clear(&vprog);
    kiln_strv_clear(&vpull);
    kiln_strv_clear(&vexists);
    return err;
}
