/* tools/ps_tool.h - kiln-train's parameter_server strategy (internal).
 *
 *   ps_main.c    the flags it takes, the model and its sharding; picks the role
 *   ps_serve.c   a ps task: restore its shard from the newest checkpoint, serve
 *   ps_worker.c  chief/master/worker: the data, the loop, the logs; the chief
 *                also checkpoints and ends the job
 *
 * The mechanics (sharding, push, pull, state, serving) are the library's
 * parameter_server strategy's (strategy/ps_core.h): one path for both. */
#ifndef KILN_PS_TOOL_H
#define KILN_PS_TOOL_H

#include "kiln/ps.h"
#include "kiln/train.h"
#include "strategy/ps_core.h"
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
    const kiln_tf_group *tf; /* cluster.ps: "host:port" each (checked by kiln_strategy_new) */
    kiln_model *m;
    kiln__ps *ps; /* m's variables, their shards; a replica's client */
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
