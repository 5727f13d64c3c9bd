/* src/devices/shares.c - enforced GPU shares through CUDA MPS
 * (kiln/devices.h): share devices of a whole GPU, and its MPS control
 * daemon. kiln changes no GPU setting: a site that wants no process
 * outside MPS on the GPU sets its compute mode (nvidia-smi -c
 * EXCLUSIVE_PROCESS) itself. */
#include "kiln/devices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/childenv.h"

bool kiln_devices_is_share_type(const char *type)
{
    size_t n = type ? strlen(type) : 0;
    return n > 6 && strcmp(type + n - 6, "_SHARE") == 0;
}

kiln_err kiln_devices_add_shares(kiln_node *n, int index, int shares, char *why, size_t len)
{
    long p = -1;
    for (size_t j = 0; j < n->n_devs && p < 0; j++)
        if (n->devs[j].index == index && !n->devs[j].mig_profile && !n->devs[j].share) p = (long)j;
    if (p < 0) {
        snprintf(why, len, "GPU %d: this machine has no such GPU", index);
        return KILN_EINVAL;
    }
    if (shares < 2 || shares > KILN_MAX_GPU_SHARES) {
        snprintf(why, len, "GPU %d: %d shares; a shared GPU has 2 to %d", index, shares,
                 KILN_MAX_GPU_SHARES);
        return KILN_EINVAL;
    }
    if (n->devs[p].refused) {
        snprintf(why, len, "GPU %d cannot be shared: %s%s", index, n->devs[p].refused,
                 strstr(n->devs[p].refused, "MIG") ? " (MPS does not run on MIG GPUs)" : "");
        return KILN_EINVAL;
    }
    if (n->n_devs + (size_t)shares > KILN_MAX_NODE_DEVICES) {
        snprintf(why, len, "GPU %d: %d shares pass the node's %d devices", index, shares,
                 KILN_MAX_NODE_DEVICES);
        return KILN_EINVAL;
    }
    kiln_device *v = realloc(n->devs, (n->n_devs + (size_t)shares) * sizeof *v);
    if (!v) return KILN_ENOMEM;
    n->devs = v;
    kiln_device *g = &n->devs[p];
    size_t first = n->n_devs;
    for (int k = 1; k <= shares; k++) {
        kiln_device *dv = &n->devs[n->n_devs++];
        memset(dv, 0, sizeof *dv);
        dv->index = (int)(n->n_devs - 1);
        dv->parent = (int)p;
        dv->share = k;
        dv->n_shares = shares;
        dv->numa_node = g->numa_node;
        dv->memory_gb = g->memory_gb / shares;
        if (asprintf(&dv->type, "%s_SHARE", g->type) < 0) dv->type = NULL;
        if (asprintf(&dv->uuid, "%s:share%d", g->uuid, k) < 0) dv->uuid = NULL;
        if (g->model && asprintf(&dv->model, "%s (share %d of %d)", g->model, k, shares) < 0)
            dv->model = NULL;
        if (!dv->type || !dv->uuid || (g->model && !dv->model)) return KILN_ENOMEM;
    }
    if (asprintf(&g->refused,
                 "shared through MPS: %d shares are handed out instead (devices %zu to %zu), "
                 "each with 1/%d of its memory and SMs",
                 shares, first, n->n_devs - 1, shares) < 0) {
        g->refused = NULL;
        return KILN_ENOMEM;
    }
    return KILN_OK;
}

const char *kiln_mps_control(const char *control)
{
    if (control && *control) return control;
    const char *env = getenv("KILN_MPS_CONTROL");
    return env && *env ? env : "nvidia-cuda-mps-control";
}

/* Runs the control program for gpu with its directories, `arg` as its
 * argument (NULL: none) and `input` on stdin (NULL: none); its exit status,
 * -1 when it could not run. */
static int control_run(const char *control, const char *dir, const kiln_device *gpu,
                       const char *arg, const char *input)
{
    char pipe_dir[600], log_dir[600], pbuf[4096];
    int fd[2] = {-1, -1};
    snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", dir);
    snprintf(log_dir, sizeof log_dir, "%s/log", dir);
    /* made before the fork: kilnd has threads (devices/childenv.h) */
    static const char *const names[] = {"CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                                        "CUDA_MPS_LOG_DIRECTORY"};
    const char *vals[] = {gpu->uuid, pipe_dir, log_dir};
    const char *prog = kiln_mps_control(control);
    const char *path = kiln__find_prog(prog, pbuf, sizeof pbuf);
    char *const argv[] = {(char *)prog, (char *)arg, NULL};
    kiln__childenv ce;
    if (!path || !kiln__childenv_make(&ce, names, vals, 3)) return -1;
    if (input && pipe(fd) != 0) {
        kiln__childenv_free(&ce);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        if (input) close(fd[0]), close(fd[1]);
        kiln__childenv_free(&ce);
        return -1;
    }
    if (pid == 0) {
        if (input) {
            dup2(fd[0], 0);
            close(fd[0]);
            close(fd[1]);
        }
        for (int f = 3; f < 1024; f++)
            close(f);
        execve(path, argv, ce.env);
        _exit(127);
    }
    kiln__childenv_free(&ce);
    if (input) {
        close(fd[0]);
        ssize_t w = write(fd[1], input, strlen(input));
        (void)w;
        close(fd[1]);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

bool kiln_mps_start(const char *control, const char *dir, const kiln_device *gpu, char *why,
                    size_t len)
{
    char sub[600];
    mkdir(dir, 0700);
    snprintf(sub, sizeof sub, "%s/pipe", dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/log", dir);
    mkdir(sub, 0700);
    int rc = control_run(control, dir, gpu, "-d", NULL);
    if (rc == 0) return true;
    snprintf(why, len, "%s -d for GPU %d (%s) %s", kiln_mps_control(control), gpu->index, gpu->uuid,
             rc == 127 || rc < 0 ? "could not be run" : "failed");
    return false;
}

void kiln_mps_stop(const char *control, const char *dir, const kiln_device *gpu)
{
    control_run(control, dir, gpu, NULL, "quit\n");
}
