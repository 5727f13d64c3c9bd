/* src/exec/local/local.c - the local backend: the replica's program runs as
 * a process (and process group) on this machine, under its monitor. */
#include <signal.h>
#include <stdio.h>

#include "exec/exec_int.h"

static kiln_err local_check(const kiln_exec_config *cfg, size_t n_gpus, bool simulated, char *why,
                            size_t whylen)
{
    /* a process sees its GPUs through CUDA_VISIBLE_DEVICES alone */
    (void)cfg, (void)n_gpus, (void)simulated, (void)why, (void)whylen;
    return KILN_OK;
}

static kiln_err local_start(const kiln_exec_config *cfg, const kiln_exec_spec *spec,
                            kiln_exec_handle *h, char *why, size_t whylen)
{
    return kiln__mon_start(cfg, spec, spec->argv, NULL, NULL, NULL, -1, h, why, whylen);
}

/* The program leads a process group of its own (the monitor made it so): a
 * signal reaches what it started too. The start time guards against a pid
 * that was reused after the group ended. */
static void local_signal(const kiln_exec_config *cfg, const kiln_exec_handle *h, int sig)
{
    (void)cfg;
    if (h->pid > 0 && kiln__alive(h->pid, h->pid_start)) {
        if (kill(-h->pid, sig) < 0) kill(h->pid, sig);
    } else if (h->pid <= 0 && kiln__alive(h->monitor, h->monitor_start)) {
        kill(h->monitor, sig); /* not started yet: the monitor itself */
    }
}

const kiln__exec_backend kiln__exec_local = {
    .name = "local",
    .check = local_check,
    .start = local_start,
    .signal = local_signal,
    .poll = kiln__mon_poll,
    .adopt = kiln__mon_adopt,
};
