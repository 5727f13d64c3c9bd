/* tools/ps_tool.h - kiln-train's parameter_server strategy (internal).
 *
 *   ps_main.c    the flags it takes, TF_CONFIG, the model and its sharding; picks the role
 *   ps_serve.c   a ps task: restore its shard from the newest checkpoint, serve
 *   ps_worker.c  chief/master/worker: compute gradients, push, pull; the chief
 *                also checkpoints and ends the job */
#ifndef KILN_PS_TOOL_H
#define KILN_PS_TOOL_H

#include "kiln/ps.h"
#include "kiln/train.h"
#include "tools/tool.h"

#include <signal.h>
#include <stdio.h>

typedef struct ps_job {
    kt_opts o; /* kiln-train mnist's flags (tools/tool.h) */
    int json;
    char role[16];   /* "ps", "chief", "master" or "worker" */
    int task_index;  /* TF_CONFIG task.index */
    int rank, world; /* training replicas: chief/master = 0 (TF1 between-graph) */
    int num_ps;
    char **ps_addrs; /* cluster.ps, "host:port" */
    kiln_model *m;
    int nvars;
    const char **var_names; /* the model's trainable parameters, model order */
    size_t *var_sizes;
    float **var_data;     /* the model's own buffers */
    size_t *var_grad_off; /* offset in kiln_model_compute_grads' flat buffer */
    kiln_ps_layout layout;
    kiln_ps_opt opt;
} ps_job;

extern volatile sig_atomic_t ps_g_term;

/* Steps per epoch of one replica: global batches of world * batch. */
uint64_t ps_steps_per_epoch(const ps_job *j, size_t n);
/* Training examples in the data dir (the labels file's count), capped by
 * --train_examples, without loading the images. -1 on error (printed). */
long ps_train_count(const ps_job *j);
int ps_serve(ps_job *j);
int ps_work(ps_job *j);

#endif
