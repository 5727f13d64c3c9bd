/* src/exec/cgroup.c - a container's CPU and memory use from its cgroup
 * (kiln/exec.h), for kilnd's autoscaler (elasticPolicy.metrics).
 *
 * A container replica's processes are children of conmon, not of its
 * `podman run`, so they are outside the replica's process group; their
 * cgroup holds them all. Its path comes from /proc/PID/cgroup of the
 * container's main process (whichever cgroup manager podman uses, cgroupfs
 * or systemd), under the mount points /proc/self/mountinfo names. cgroup v2
 * is read where it has the file (cpu.stat, memory.current); on a hybrid host
 * (v2 mounted at /sys/fs/cgroup/unified, controllers on v1) memory comes
 * from the v1 memory controller and, without cpu.stat, CPU from cpuacct. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/exec.h"
#include "exec/exec_int.h"

/* Whether comma-separated `list` holds `word`. */
static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        size_t l = strcspn(p, ",");
        if (l == n && strncmp(p, word, n) == 0) return true;
        p += l + (p[l] == ',');
    }
    return false;
}

/* The mount of cgroup v2 (`ctrl` NULL) or of the v1 hierarchy with
 * controller `ctrl`: its mount point and root within the hierarchy. */
static bool cg_mount(const char *ctrl, char *point, size_t plen, char *root, size_t rlen)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[2048];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        char r[512], mp[512], type[64], opts[512];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", r, mp) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", type, opts) != 2)
            continue;
        if (ctrl ? strcmp(type, "cgroup") == 0 && has_word(opts, ctrl)
                 : strcmp(type, "cgroup2") == 0) {
            snprintf(point, plen, "%s", mp);
            snprintf(root, rlen, "%s", r);
            found = true;
        }
    }
    if (f) fclose(f);
    return found;
}

/* DIR of `path` (a /proc/PID/cgroup path) under the mount of `ctrl`, when
 * DIR/probe exists. */
static bool cg_dir(const char *ctrl, const char *path, const char *probe, char *dir, size_t len)
{
    char mp[512], root[512], file[1100];
    if (!cg_mount(ctrl, mp, sizeof mp, root, sizeof root)) return false;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 && (!path[rl] || path[rl] == '/'))
        path += rl; /* a mount of a sub-tree (a cgroup namespace's view) */
    if (snprintf(dir, len, "%s%s", mp, path) >= (int)len) return false;
    snprintf(file, sizeof file, "%s/%s", dir, probe);
    return access(file, R_OK) == 0;
}

bool kiln_cgroup_of(pid_t pid, kiln_cgroup *cg)
{
    char file[64], line[1024], v2[512] = "", cpuacct[512] = "", memory[512] = "";
    memset(cg, 0, sizeof *cg);
    snprintf(file, sizeof file, "/proc/%ld/cgroup", (long)pid);
    FILE *f = fopen(file, "r");
    if (!f) return false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (strcmp(line, "0") == 0 && !*ctrls)
            snprintf(v2, sizeof v2, "%s", path);
        else if (has_word(ctrls, "cpuacct"))
            snprintf(cpuacct, sizeof cpuacct, "%s", path);
        else if (has_word(ctrls, "memory"))
            snprintf(memory, sizeof memory, "%s", path);
    }
    fclose(f);
    if (*v2 && cg_dir(NULL, v2, "cpu.stat", cg->cpu, sizeof cg->cpu))
        cg->cpu_v2 = true;
    else if (!*cpuacct || !cg_dir("cpuacct", cpuacct, "cpuacct.usage", cg->cpu, sizeof cg->cpu))
        cg->cpu[0] = '\0';
    if (*v2 && cg_dir(NULL, v2, "memory.current", cg->mem, sizeof cg->mem))
        cg->mem_v2 = true;
    else if (!*memory ||
             !cg_dir("memory", memory, "memory.usage_in_bytes", cg->mem, sizeof cg->mem))
        cg->mem[0] = '\0';
    return cg->cpu[0] && cg->mem[0];
}

/* The number after `key ` in a flat-keyed file (cpu.stat, memory.stat). */
static bool keyed(const char *dir, const char *name, const char *key, unsigned long long *v)
{
    char file[700], line[256];
    size_t kl = strlen(key);
    snprintf(file, sizeof file, "%s/%s", dir, name);
    FILE *f = fopen(file, "r");
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found =
            strncmp(line, key, kl) == 0 && line[kl] == ' ' && sscanf(line + kl + 1, "%llu", v) == 1;
    if (f) fclose(f);
    return found;
}

static bool single(const char *dir, const char *name, unsigned long long *v)
{
    char file[700];
    snprintf(file, sizeof file, "%s/%s", dir, name);
    FILE *f = fopen(file, "r");
    bool ok = f && fscanf(f, "%llu", v) == 1;
    if (f) fclose(f);
    return ok;
}

bool kiln_cgroup_read(const kiln_cgroup *cg, unsigned long long *cpu_us, long long *mem_bytes)
{
    unsigned long long cpu = 0, use = 0, inactive = 0;
    bool ok = cg->cpu_v2 ? keyed(cg->cpu, "cpu.stat", "usage_usec", &cpu)
                         : single(cg->cpu, "cpuacct.usage", &cpu);
    if (!cg->cpu_v2) cpu /= 1000; /* nanoseconds */
    ok = ok && single(cg->mem, cg->mem_v2 ? "memory.current" : "memory.usage_in_bytes", &use);
    /* the working set: what the kubelet reports to metrics-server, so what
     * Kubernetes' HPA scales on; page cache the kernel can drop at once
     * (inactive files) is not the program's memory */
    if (ok && !keyed(cg->mem, "memory.stat", cg->mem_v2 ? "inactive_file" : "total_inactive_file",
                     &inactive))
        inactive = 0;
    if (!ok) return false;
    *cpu_us = cpu;
    *mem_bytes = use > inactive ? (long long)(use - inactive) : 0;
    return true;
}

/* ---- the containers' main processes: podman ps, bounded ---- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

size_t kiln_exec_container_pids(const kiln_exec_config *cfg, const char *const *names, size_t n,
                                pid_t *pids, int timeout_ms)
{
    size_t found = 0, len = 0, cap = 65536;
    char *out = NULL, **av = NULL;
    int fds[2] = {-1, -1};
    pid_t pid = -1;
    for (size_t i = 0; i < n; i++)
        pids[i] = 0;
    if (!cfg->container_runtime || n == 0) return 0;
    size_t na = cfg->runtime_args.n + 5;
    if (!(av = calloc(na, sizeof *av)) || !(out = malloc(cap)) || pipe2(fds, O_CLOEXEC) < 0)
        goto out;
    size_t k = 0;
    av[k++] = (char *)cfg->container_runtime;
    for (size_t i = 0; i < cfg->runtime_args.n; i++)
        av[k++] = cfg->runtime_args.v[i];
    av[k++] = "ps";
    av[k++] = "--format";
    av[k++] = "{{.Names}} {{.Pid}}";
    pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        kiln__child_default_signals();
        dup2(fds[1], 1);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 2);
        }
        execvp(av[0], av);
        _exit(127);
    }
    close(fds[1]);
    fds[1] = -1;
    if (pid < 0) goto out;
    /* read until EOF or the deadline: the supervisor's thread waits here */
    int64_t end = mono_ms() + timeout_ms;
    bool eof = false;
    while (!eof && len < cap - 1) {
        int left = (int)(end - mono_ms());
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t r = read(fds[0], out + len, cap - 1 - len);
        if (r <= 0)
            eof = true;
        else
            len += (size_t)r;
    }
    if (!eof) kill(pid, SIGKILL); /* too slow: nothing is believed */
    waitpid(pid, NULL, 0);
    if (!eof) goto out;
    out[len] = '\0';
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strrchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        long p = strtol(sp + 1, NULL, 10);
        for (size_t i = 0; i < n && p > 0; i++)
            if (!pids[i] && strcmp(names[i], line) == 0) {
                pids[i] = (pid_t)p;
                found++;
            }
    }
out:
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    free(out);
    free(av);
    return found;
}
