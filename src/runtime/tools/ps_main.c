/* tools/ps_main.c - `kiln-train mnist --distribution_strategy=parameter_server`.
 *
 * The cluster comes from TF_CONFIG (or CLUSTER_SPEC) as the platform writes it
 * (docs/parameter-server.md), as kiln_strategy_new parsed and checked it:
 * cluster.ps lists the ps tasks' host:port, and
 * chief/master + workers are the training replicas (chief/master is rank 0
 * and trains too, as in TF1 between-graph replication). The task type decides
 * the role of this process. Every role builds the same model from the same
 * flags: the ps tasks take their initial values and the variable list from
 * it, so a fresh job starts exactly where a single-process run would. */
#include "tools/ps_tool.h"
#include "tools/tool.h"

#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile sig_atomic_t ps_g_term;

/* kiln-train's parser (tools/kiln_train.c) has read and checked every flag;
 * what is left here is to refuse those that this strategy has no use for. */
static int check_flags(const kt_opts *o)
{
    if (o->strategy_arg && strcmp(o->strategy_arg, "parameter_server") != 0) {
        fprintf(stderr, "kiln-train: --distribution_strategy=%s: not parameter_server\n",
                o->strategy_arg);
        return -1;
    }
    if (o->non_ps_flag) {
        fprintf(stderr,
                "kiln-train: unknown argument '%s' (parameter_server strategy: --model "
                "--data_dir --model_dir --train_epochs --batch_size --learning_rate "
                "--momentum --optimizer --lr_schedule --seed --threads --log_format "
                "--checkpoint_steps --keep_checkpoints --train_examples --max_staleness "
                "--ps_timeout)\n",
                o->non_ps_flag);
        return -1;
    }
    return 0;
}

uint64_t ps_steps_per_epoch(const ps_job *j, size_t n)
{
    return kiln_steps_per_epoch(n, (size_t)j->o.batch * (size_t)j->world, 0);
}

long ps_train_count(const ps_job *j)
{
    const char *dir = j->o.data_dir && *j->o.data_dir ? j->o.data_dir : KILN_FASHION_MNIST_DIR;
    const char *names[] = {"train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte"};
    kiln_errmsg em = {{0}};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        kiln_idx idx;
        snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
        if (kiln_idx_read(path, 0, &idx, &em) != KILN_OK) continue;
        long n = (long)idx.dims[0];
        kiln_idx_free(&idx);
        if (j->o.train_examples > 0 && j->o.train_examples < n) n = j->o.train_examples;
        return n;
    }
    fprintf(stderr, "kiln-train: counting the training examples in %s: %s\n", dir, em.msg);
    return -1;
}

int kiln_train_ps_main(const struct kiln_tf_group *tfg, const kt_opts *o)
{
    ps_job j = {.o = *o, .tf = tfg};
    char err[512];
    int rc = 2;
    if (check_flags(o)) return 2;
    kt_signals_take(&ps_g_term); /* before any thread: see tools/signals.c */
    j.json = j.o.log_format && strcmp(j.o.log_format, "json") == 0;
    /* kiln_strategy_new parsed TF_CONFIG and checked cluster.ps and the task */
    snprintf(j.role, sizeof(j.role), "%s", tfg->task_type);
    j.task_index = tfg->task_index;
    j.world = tfg->world_size;
    j.rank = tfg->rank;
    j.num_ps = tfg->num_ps;
    if (strcmp(j.role, "evaluator") == 0) {
        fprintf(stderr, "kiln-train: an evaluator task has no part in parameter_server "
                        "training\n");
        goto out;
    }
    kiln_set_threads(j.o.threads);
    if (!(j.m =
              kt_mnist_model(j.o.model, j.o.optimizer, j.o.lr, j.o.momentum, j.o.batch, j.o.seed)))
        goto out;
    /* a ps task sets total_updates (the cosine schedule's length) itself */
    if (kiln__ps_open(j.m, j.num_ps, strcmp(j.o.lr_schedule, "cosine") == 0, 0, &j.ps, err,
                      sizeof(err)) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", err);
        goto out;
    }
    rc = strcmp(j.role, "ps") == 0 ? ps_serve(&j) : ps_work(&j);
out:
    fflush(stdout);
    kiln__ps_close(j.ps);
    kiln_model_free(j.m);
    return rc;
}
