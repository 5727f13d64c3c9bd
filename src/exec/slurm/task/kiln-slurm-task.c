/* src/exec/slurm/task/kiln-slurm-task.c - a container replica's GPUs under
 * Slurm.
 *
 *   kiln-slurm-task --devices PROG [ARGS...]
 *
 * kilnd (--executor slurm) launches a container replica as a step of its
 * gang's allocation: `srun --jobid ... -- kiln-slurm-task --devices podman
 * run ... KILN_SLURM_DEVICES ...`. Only the step knows which GPUs Slurm
 * gave it (its CUDA_VISIBLE_DEVICES, on its node); this puts them in
 * podman's command line and then becomes podman. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/exec.h"

static void die(const char *task, const char *fmt, const char *a)
{
    fprintf(stderr, "kiln-slurm-task %s: ", task ? task : "");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(127);
}

/* "0,1,...,n-1": the GPUs as CUDA counts them inside the container */
static char *renumbered(size_t n)
{
    char *out = calloc(n * 12 + 1, 1);
    size_t len = 0;
    for (size_t i = 0; out && i < n; i++)
        len += (size_t)sprintf(out + len, "%s%zu", i ? "," : "", i);
    return out;
}

/* kiln-slurm-task --devices PROG ARGS...: a container replica launched as a
 * step of its gang's allocation (kilnd --executor slurm). The GPUs are
 * the ones Slurm gave the step (its CUDA_VISIBLE_DEVICES): each goes in
 * through CDI (--device nvidia.com/gpu=N) where PROG's KILN_SLURM_DEVICES
 * argument stands, and inside the container CUDA counts them from 0. */
static int exec_devices(int argc, char **argv)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    kiln_strv av = {0}, devs = {0};
    char *copy = cvd ? strdup(cvd) : NULL, *save = NULL;
    for (char *g = copy ? strtok_r(copy, ",", &save) : NULL; g; g = strtok_r(NULL, ",", &save)) {
        char dev[64];
        snprintf(dev, sizeof dev, "nvidia.com/gpu=%s", g);
        if (kiln_strv_push(&devs, "--device") != KILN_OK || kiln_strv_push(&devs, dev) != KILN_OK)
            die("kiln-slurm-task", "%s", "out of memory");
    }
    free(copy);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "KILN_SLURM_DEVICES") == 0) {
            for (size_t q = 0; q < devs.n; q++)
                if (kiln_strv_push(&av, devs.v[q]) != KILN_OK)
                    die("kiln-slurm-task", "%s", "out of memory");
            continue;
        }
        if (kiln_strv_push(&av, argv[i]) != KILN_OK) die("kiln-slurm-task", "%s", "out of memory");
    }
    if (av.n == 0) die("kiln-slurm-task", "%s", "--devices: nothing to run");
    if (devs.n) {
        char *num = renumbered(devs.n / 2);
        if (!num || setenv("CUDA_VISIBLE_DEVICES", num, 1) != 0)
            die("kiln-slurm-task", "%s", "out of memory");
        free(num);
    }
    char **v = calloc(av.n + 1, sizeof *v);
    if (!v) die("kiln-slurm-task", "%s", "out of memory");
    memcpy(v, av.v, av.n * sizeof *v);
    execvp(v[0], v);
    fprintf(stderr, "kiln-slurm-task: cannot run %s: %s\n", v[0], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--devices") == 0) return exec_devices(argc, argv);
    fprintf(stderr, "usage: kiln-slurm-task --devices PROG [ARGS...]\n");
    return 2;
}
