/* tools/ps_main.c - `kiln-train mnist --distribution_strategy=parameter_server`.
 *
 * The cluster comes from TF_CONFIG (or CLUSTER_SPEC) as the platform writes it
 * (docs/parameter-server.md): cluster.ps lists the ps tasks' host:port, and
 * chief/master + workers are the training replicas (chief/master is rank 0
 * and trains too, as in TF1 between-graph replication). The task type decides
 * the role of this process. Every role builds the same model from the same
 * flags: the ps tasks take their initial values and the variable list from
 * it, so a fresh job starts exactly where a single-process run would. */
#include "tools/ps_tool.h"
#include "tools/tool.h"

#include "data/data.h"
#include "strategy/strategy_int.h"
#include "kiln/collective.h"

#include <errno.h>
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

/* cluster.ps's addresses (kiln_tf_config_parse checked they are non-empty
 * strings), copied and checked for the "host:port" the client dials */
static int ps_addresses(const kiln_tf_group *g, ps_job *j)
{
    if (g->num_ps == 0) {
        fprintf(stderr, "kiln-train: the parameter_server strategy needs ps tasks: TF_CONFIG "
                        "has no cluster.ps list\n");
        return -1;
    }
    j->num_ps = g->num_ps;
    if (!(j->ps_addrs = calloc((size_t)j->num_ps, sizeof(char *)))) return -1;
    for (int i = 0; i < j->num_ps; i++) {
        const char *s = g->ps_hosts[i], *colon = strrchr(s, ':');
        if (!colon || colon == s || !colon[1] || strlen(s) > 255) {
            fprintf(stderr,
                    "kiln-train: TF_CONFIG cluster.ps[%d]: expected \"host:port\" (at most 255 "
                    "characters), got \"%.64s%s\"\n",
                    i, s, strlen(s) > 64 ? "..." : "");
            return -1;
        }
        if (!(j->ps_addrs[i] = strdup(s))) return -1;
    }
    return 0;
}

/* The trainable parameters, and where each one's gradient lies in the flat
 * buffer of kiln_model_compute_grads: layers in reverse order, kernel then
 * bias within a layer (kiln/train.h). Parameters are listed layer by layer
 * in model order, named "<layer>/<param>". */
static int model_vars(ps_job *j)
{
    /* the library's (src/runtime/strategy/vars.c); the arrays become j's */
    char err[300];
    kiln__vars v;
    kiln_err e = kiln__vars_of_model(j->m, &v, err, sizeof(err));
    j->nvars = v.n;
    j->var_names = v.names;
    j->var_sizes = v.sizes;
    j->var_data = v.data;
    j->var_grad_off = v.grad_off;
    if (e != KILN_OK) fprintf(stderr, "kiln-train: %s\n", err);
    return e == KILN_OK ? 0 : -1;
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
    ps_job j = {.o = *o};
    kiln_tf_group g = {0};
    char err[512];
    int rc = 2;
    if (check_flags(o)) return 2;
    kt_signals_take(&ps_g_term); /* before any thread: see tools/signals.c */
    j.json = j.o.log_format && strcmp(j.o.log_format, "json") == 0;
    if (!tfg) { /* not parsed by the caller: TF_CONFIG, or its other name CLUSTER_SPEC */
        const char *tf = getenv("TF_CONFIG");
        if (!tf || !*tf) tf = getenv("CLUSTER_SPEC");
        kiln_err e = kiln_tf_config_parse(tf, &g, err, sizeof(err));
        if (e != KILN_OK) {
            fprintf(stderr, "kiln-train: the parameter_server strategy needs TF_CONFIG: %s\n",
                    e == KILN_ENOTFOUND ? "it is not set" : err);
            goto out;
        }
        tfg = &g;
    }
    snprintf(j.role, sizeof(j.role), "%s", tfg->task_type);
    j.task_index = tfg->task_index;
    j.world = tfg->world_size;
    j.rank = tfg->rank;
    if (strcmp(j.role, "evaluator") == 0) {
        fprintf(stderr, "kiln-train: an evaluator task has no part in parameter_server "
                        "training\n");
        goto out;
    }
    if (ps_addresses(tfg, &j)) goto out;
    if (strcmp(j.role, "ps") == 0 && (j.task_index < 0 || j.task_index >= j.num_ps)) {
        fprintf(stderr, "kiln-train: task ps %d is not in cluster.ps (%d tasks)\n", j.task_index,
                j.num_ps);
        goto out;
    }
    kiln_set_threads(j.o.threads);
    if (!(j.m = kt_mnist_model(j.o.model, j.o.optimizer, j.o.lr, j.o.momentum, j.o.batch,
                               j.o.seed)) ||
        model_vars(&j))
        goto out;
    if (kiln_ps_layout_init(&j.layout, j.nvars, j.var_names, j.var_sizes, j.num_ps, j.o.optimizer,
                            err, sizeof(err))) {
        fprintf(stderr, "kiln-train: sharding the model: %s\n", err);
        goto out;
    }
    j.opt = (kiln_ps_opt){.adam = strcmp(j.o.optimizer, "adam") == 0,
                          .lr = (float)j.o.lr,
                          .momentum = (float)j.o.momentum,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .eps = 1e-8f,
                          .cosine = strcmp(j.o.lr_schedule, "cosine") == 0};
    rc = strcmp(j.role, "ps") == 0 ? ps_serve(&j) : ps_work(&j);
out:
    fflush(stdout);
    kiln_ps_layout_free(&j.layout);
    for (int i = 0; j.ps_addrs && i < j.num_ps; i++)
        free(j.ps_addrs[i]);
    free(j.ps_addrs);
    free(j.var_names);
    free(j.var_sizes);
    free(j.var_data);
    free(j.var_grad_off);
    kiln_model_free(j.m);
    kiln_tf_group_free(&g);
    return rc;
}
