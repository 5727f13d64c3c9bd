/* src/exec/container/podman.c - the container backend: the replica runs an
 * image through podman, with AI Platform's and Kubernetes' semantics:
 *   containerCommand replaces the image's ENTRYPOINT, containerArgs (and the
 *   user args after them) its CMD; the replica's environment is passed in
 *   (-e NAME: podman takes the value from its own environment, so TF_CONFIG
 *   never shows on a command line); host networking, so the cluster's
 *   addresses work unchanged; the job's directories at the same paths;
 *   --init (catatonit) as PID 1, so SIGTERM reaches the program and grace
 *   periods behave as for processes; exit codes pass through (podman run
 *   exits with the container's code); a hostname of its own (the container's
 *   name, made a DNS label: kiln_exec_container_hostname), as a pod has: with host networking and
 * --init every replica's program would otherwise be PID 2 on one hostname, and torchrun's
 *   rendezvous, which names nodes by hostname and pid, would take two
 *   replicas for one node.
 * `podman run` runs under the replica's monitor like any program; the image
 * is checked (and pulled when missing) by the monitor before it. */
#include <dirent.h>
#include <jansson.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec_int.h"

/* An NVIDIA CDI spec (nvidia-ctk cdi generate) in one of cfg->cdi_dirs. */
static bool have_nvidia_cdi(const kiln_exec_config *cfg)
{
    char dirs[1024];
    snprintf(dirs, sizeof dirs, "%s", cfg->cdi_dirs ? cfg->cdi_dirs : "/etc/cdi:/var/run/cdi");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        DIR *dd = opendir(d);
        struct dirent *e;
        bool found = false;
        while (dd && !found && (e = readdir(dd)))
            found = strncmp(e->d_name, "nvidia", 6) == 0;
        if (dd) closedir(dd);
        if (found) return true;
    }
    return false;
}

static kiln_err podman_check(const kiln_exec_config *cfg, size_t n_gpus, bool simulated, char *why,
                             size_t whylen)
{
    if (!cfg->container_runtime) {
        snprintf(why, whylen,
                 "this node has no container runtime (kilnd found no podman on its PATH; give "
                 "--container-runtime PATH)");
        return KILN_EINVAL;
    }
    if (n_gpus && !simulated && !have_nvidia_cdi(cfg)) {
        /* the one step that makes it work, or what to install first */
        bool ctk = access("/usr/bin/nvidia-ctk", X_OK) == 0 ||
                   access("/usr/local/bin/nvidia-ctk", X_OK) == 0;
        snprintf(why, whylen,
                 "a container with GPUs needs an NVIDIA CDI spec on the node (none in %s): %s",
                 cfg->cdi_dirs ? cfg->cdi_dirs : "/etc/cdi:/var/run/cdi",
                 ctk ? "generate it with nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
                     : "install NVIDIA's container toolkit (nvidia-container-toolkit), then run "
                       "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (docs/gpu.md)");
        return KILN_EINVAL;
    }
    return KILN_OK;
}

static kiln_err push2(kiln_strv *v, const char *a, const char *b)
{
    kiln_err err = kiln_strv_push(v, a);
    return err == KILN_OK ? kiln_strv_push(v, b) : err;
}

static kiln_err runtime_prefix(const kiln_exec_config *cfg, kiln_strv *v)
{
    kiln_err err = kiln_strv_push(v, cfg->container_runtime);
    for (size_t i = 0; err == KILN_OK && i < cfg->runtime_args.n; i++)
        err = kiln_strv_push(v, cfg->runtime_args.v[i]);
    return err;
}

/* The JSON array form of --entrypoint, which keeps arguments with spaces
 * and newlines whole (the plain form would be split by podman). */
static char *entrypoint_json(const kiln_strv *cmd)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < cmd->n; i++)
        if (json_array_append_new(a, json_string(cmd->v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

static bool is_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

void kiln_exec_container_hostname(const char *name, char out[64])
{
    /* the readable part: 63 less "-" and the 8 hex digits */
    enum { PREFIX = 63 - 9 };
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, over the whole name */
    size_t n = 0;
    if (is_dns_label(name)) {
        snprintf(out, 64, "%s", name);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    for (const char *p = name; *p && n < PREFIX; p++) {
        char ch = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))) ch = '-';
        if (ch == '-' && (n == 0 || out[n - 1] == '-')) continue; /* no leading or double '-' */
        out[n++] = ch;
    }
    if (n == 0) n = (size_t)snprintf(out, 64, "kiln"); /* a name with nothing readable */
    if (out[n - 1] == '-') n--;
    snprintf(out + n, 64 - n, "-%08x", (unsigned)(h ^ (h >> 32)));
}

kiln_err kiln__podman_argv(const kiln_exec_config *cfg, const kiln_exec_spec *spec, kiln_strv *prog,
                           kiln_strv *pull, kiln_strv *exists)
{
    char *ep = NULL, buf[64], host[64];
    kiln_err err = KILN_ENOMEM;
    kiln_exec_container_hostname(spec->name, host);
    if (runtime_prefix(cfg, prog) || kiln_strv_push(prog, "run") || kiln_strv_push(prog, "--rm") ||
        kiln_strv_push(prog, "--replace") || push2(prog, "--name", spec->name) ||
        push2(prog, "--hostname", host) || kiln_strv_push(prog, "--init") ||
        push2(prog, "--pull", "never") ||
        push2(prog, "-w", spec->ctr_work_dir ? spec->ctr_work_dir : spec->work_dir))
        goto out;
    for (size_t i = 0; i < cfg->run_args.n; i++)
        if (kiln_strv_push(prog, cfg->run_args.v[i]) != KILN_OK) goto out;
    for (size_t i = 0; i < spec->n_mounts; i++) {
        char *m = NULL;
        if (asprintf(&m, "%s:%s", spec->mounts[i], spec->mounts[i]) < 0) goto out;
        kiln_err e = push2(prog, "-v", m);
        free(m);
        if (e != KILN_OK) goto out;
    }
    for (size_t i = 0; spec->binds && i < spec->binds->n; i++)
        if (push2(prog, "-v", spec->binds->v[i]) != KILN_OK) goto out;
    /* emptyDir: an anonymous volume (--rm removes it with the container) or a tmpfs */
    for (size_t i = 0; spec->scratch && i < spec->scratch->n; i++) {
        const char *v = spec->scratch->v[i], *t = strstr(v, ":tmpfs");
        char *m = NULL;
        int n = t ? asprintf(&m, "type=tmpfs,destination=%.*s%s%s", (int)(t - v), v,
                             t[6] == ':' ? ",tmpfs-size=" : "", t[6] == ':' ? t + 7 : "")
                  : asprintf(&m, "type=volume,destination=%s", v);
        if (n < 0) goto out;
        kiln_err e = push2(prog, "--mount", m);
        free(m);
        if (e != KILN_OK) goto out;
    }
    if (spec->cpu_milli > 0) { /* resources.limits.cpu: --cpus takes a decimal count */
        snprintf(buf, sizeof buf, "%lld.%03lld", (long long)(spec->cpu_milli / 1000),
                 (long long)(spec->cpu_milli % 1000));
        if (push2(prog, "--cpus", buf) != KILN_OK) goto out;
    }
    if (spec->memory_bytes > 0) {
        snprintf(buf, sizeof buf, "%lldb", (long long)spec->memory_bytes);
        if (push2(prog, "--memory", buf) != KILN_OK) goto out;
    }
    for (size_t i = 0; i < spec->n_hosts; i++)
        if (push2(prog, "--add-host", spec->hosts[i]) != KILN_OK) goto out;
    for (size_t i = 0; spec->env && i < spec->env->n; i++) {
        size_t nl = strcspn(spec->env->v[i], "=");
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)nl, spec->env->v[i]);
        if (push2(prog, "-e", name) != KILN_OK) goto out;
    }
    /* simulated GPUs are only CUDA_VISIBLE_DEVICES; real ones come through CDI */
    for (size_t i = 0; !spec->simulated && i < spec->n_gpus; i++) {
        snprintf(buf, sizeof buf, "nvidia.com/gpu=%d", spec->gpus[i]);
        if (push2(prog, "--device", buf) != KILN_OK) goto out;
    }
    if (spec->devices_arg && kiln_strv_push(prog, spec->devices_arg) != KILN_OK) goto out;
    if (spec->uid >= 0) {
        snprintf(buf, sizeof buf, "%ld:%ld", spec->uid, spec->gid >= 0 ? spec->gid : spec->uid);
        if (push2(prog, "--user", buf) != KILN_OK) goto out;
    }
    /* securityContext. readOnlyRootFilesystem as Kubernetes means it: only
     * the volumes are writable, so not podman's default tmpfs on /tmp,
     * /var/tmp and /run (--read-only-tmpfs); /dev and /dev/shm stay */
    if (spec->no_new_privs && push2(prog, "--security-opt", "no-new-privileges") != KILN_OK)
        goto out;
    if (spec->read_only_root && (kiln_strv_push(prog, "--read-only") != KILN_OK ||
                                 kiln_strv_push(prog, "--read-only-tmpfs=false") != KILN_OK))
        goto out;
    for (size_t i = 0; spec->cap_drop && i < spec->cap_drop->n; i++)
        if (push2(prog, "--cap-drop", spec->cap_drop->v[i]) != KILN_OK) goto out;
    if (spec->argv && spec->argv->n) {
        if (!(ep = entrypoint_json(spec->argv))) goto out;
        if (push2(prog, "--entrypoint", ep) != KILN_OK) goto out;
    }
    if (kiln_strv_push(prog, spec->image) != KILN_OK) goto out;
    for (size_t i = 0; spec->args && i < spec->args->n; i++)
        if (kiln_strv_push(prog, spec->args->v[i]) != KILN_OK) goto out;
    bool never = spec->pull_policy && strcmp(spec->pull_policy, "Never") == 0;
    if ((!never && (runtime_prefix(cfg, pull) || push2(pull, "pull", spec->image))) ||
        runtime_prefix(cfg, exists) || kiln_strv_push(exists, "image") ||
        push2(exists, "exists", spec->image))
        goto out;
    err = KILN_OK;
out:
    free(ep);
    return err;
}

static kiln_err podman_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                             kiln_exec_handle *h, char *why, size_t whylen)
{
    kiln_strv prog = {0}, pull = {0}, exists = {0}, xargv = {0};
    char user[64];
    /* on another node (spec->via) the GPUs' CDI spec is that node's */
    bool remote = spec->via && spec->via->n;
    kiln_err err = podman_check(cfg, remote ? 0 : spec->n_gpus, spec->simulated, why, whylen);
    if (err != KILN_OK) return err;
    err = kiln__podman_argv(cfg, spec, &prog, &pull, &exists);
    if (err != KILN_OK) goto out;
    /* the monitor runs as root and podman drops to the user (--user): the
     * monitor itself must not */
    kiln_exec_spec s = *spec;
    s.uid = s.gid = -1;
    s.cap_drop = NULL;      /* podman's --cap-drop, above: podman itself needs its own */
    s.no_new_privs = false; /* podman sets it in the container (--security-opt) */
    /* an MPIJob's replica: the monitor runs kiln-mpi-agent's commands in
     * the container, as the container's user */
    if (spec->exec_socket) {
        snprintf(user, sizeof user, "%ld:%ld", spec->uid, spec->gid >= 0 ? spec->gid : spec->uid);
        if (runtime_prefix(cfg, &xargv) || kiln_strv_push(&xargv, "exec") ||
            kiln_strv_push(&xargv, "-i") || (spec->uid >= 0 && push2(&xargv, "--user", user)) ||
            kiln_strv_push(&xargv, spec->name)) {
            err = KILN_ENOMEM;
            goto out;
        }
    }
    err = kiln__mon_start(cfg, &s, &prog, pull.n ? &pull : NULL, &exists,
                          spec->exec_socket ? &xargv : NULL, spec->uid, h, why, whylen);
    h->kind = KILN_EXEC_CONTAINER;
out:
    if (err == KILN_ENOMEM) snprintf(why, whylen, "out of memory starting %s", spec->task);
    kiln_strv_clear(&prog);
    kiln_strv_clear(&pull);
    kiln_strv_clear(&exists);
    kiln_strv_clear(&xargv);
    return err;
}

kiln_err kiln__podman_kill_argv(const kiln_exec_config *cfg, const char *name, kiln_strv *av)
{
    kiln_err err = runtime_prefix(cfg, av);
    if (err == KILN_OK) err = kiln_strv_push(av, "kill");
    if (err == KILN_OK) err = push2(av, "--signal", "KILL");
    return err == KILN_OK ? kiln_strv_push(av, name) : err;
}

/* SIGTERM goes to `podman run`, which passes it on to the container (its
 * --sig-proxy default), where catatonit hands it to the program. SIGKILL
 * cannot be passed on: `podman kill` kills the container itself, started
 * without waiting (the supervisor must not block; kilnd reaps it). */
static void podman_signal(const kiln_exec_config *cfg, const kiln_exec_handle *h, int sig)
{
    if (h->pid > 0 && kiln__alive(h->pid, h->pid_start)) kill(h->pid, sig);
    if (h->pid <= 0 && kiln__alive(h->monitor, h->monitor_start)) kill(h->monitor, sig);
    if (sig != SIGKILL || !cfg->container_runtime || !h->name[0]) return;
    kiln_strv av = {0};
    char **avp = NULL;
    if (kiln__podman_kill_argv(cfg, h->name, &av) == KILN_OK &&
        (avp = calloc(av.n + 1, sizeof *avp))) {
        memcpy(avp, av.v, av.n * sizeof *avp);
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open("/dev/null", 2);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execvp(avp[0], avp);
            _exit(127);
        }
        if (pid > 0) kiln__exec_child(pid);
    }
    free(avp);
    kiln_strv_clear(&av);
}

const kiln__exec_backend kiln__exec_container = {
    .name = "container",
    .check = podman_check,
    .start = podman_start,
    .signal = podman_signal,
    .poll = kiln__mon_poll,
    .adopt = kiln__mon_adopt,
};
