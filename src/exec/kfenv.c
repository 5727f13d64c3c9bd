/* src/exec/kfenv.c - what the training operator (v1.9) puts in the
 * environment of a JAXJob's, PaddleJob's and XGBoostJob's replicas
 * (kfenv.h), variable for variable:
 *   JAXJob     TO pkg/controller.v1/jax/envvar.go setPodEnv
 *   PaddleJob  TO pkg/controller.v1/paddlepaddle/envvar.go setPodEnv
 *   XGBoostJob TO pkg/controller.v1/xgboost/xgboost.go SetPodEnv
 * The operator names replica `<job>-<type>-<i>`'s Service where an address
 * goes; kiln writes that replica's address (the one TF_CONFIG has), and the
 * port kiln gave it where the operator writes the container's port. Ranks
 * follow the operator's: kiln's master is rank 0 (the Master, or worker 0
 * of a job without one), worker i is rank i + 1. */
#include "exec/kfenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/envvar.h"

static kiln_err put_addr(kiln_strv *env, const char *name, const kiln_exec_task *t)
{
    char buf[320];
    snprintf(buf, sizeof buf, "%s:%d", t->host, t->port);
    return kiln__env_put(env, name, buf);
}

/* Master + Worker tasks of the job, and rank of tasks[self] (-1: another role). */
typedef struct kf_world {
    const kiln_exec_task *master, *worker0;
    long long total;
    int rank;
} kf_world;

static kf_world world_of(const kiln_exec_task *tasks, size_t n, size_t self)
{
    kf_world w = {.rank = -1};
    for (size_t i = 0; i < n; i++) {
        const kiln_exec_task *t = &tasks[i];
        if (t->role == KILN_ROLE_MASTER && t->index == 0) w.master = t;
        if (t->role == KILN_ROLE_WORKER && t->index == 0) w.worker0 = t;
        if (t->role == KILN_ROLE_MASTER || t->role == KILN_ROLE_WORKER) w.total++;
    }
    const kiln_exec_task *me = &tasks[self];
    if (me->role == KILN_ROLE_MASTER) w.rank = me->index;
    if (me->role == KILN_ROLE_WORKER) w.rank = me->index + 1;
    return w;
}

static kiln_err jax_env(const kf_world *w, kiln_strv *env)
{
    kiln_err err;
    if ((err = kiln__env_put(env, "PYTHONUNBUFFERED", "1")) != KILN_OK ||
        (err = kiln__env_put_int(env, "COORDINATOR_PORT", w->master->port)) != KILN_OK ||
        (err = kiln__env_put(env, "COORDINATOR_ADDRESS", w->master->host)) != KILN_OK ||
        (err = kiln__env_put_int(env, "NUM_PROCESSES", w->total)) != KILN_OK)
        return err;
    return kiln__env_put_int(env, "PROCESS_ID", w->rank);
}

/* Rank 0 (worker 0 in collective mode, master 0 in PS mode) is the
 * rendezvous: the operator gives it $(POD_IP_DUMMY):PORT with POD_IP_DUMMY
 * its pod's IP, the others the Service name of rank 0; kiln gives all of
 * them rank 0's address, and rank 0 its own address as POD_IP_DUMMY. */
static kiln_err paddle_env(const kiln_job *job, const kf_world *w, const kiln_exec_task *me,
                           kiln_strv *env)
{
    bool ps = !job->training_input.kubeflow_job.workers_only;
    kiln_err err;
    if ((err = kiln__env_put(env, "PYTHONUNBUFFERED", "1")) != KILN_OK ||
        (err = kiln__env_put(env, "PADDLE_JOB_ID", job->job_id ? job->job_id : "")) != KILN_OK ||
        (err = kiln__env_put_int(env, "PADDLE_NNODES", w->total)) != KILN_OK)
        return err;
    if (me == w->master && (err = kiln__env_put(env, "POD_IP_DUMMY", me->host)) != KILN_OK)
        return err;
    if ((err = put_addr(env, "PADDLE_MASTER", w->master)) != KILN_OK) return err;
    if (!ps) return KILN_OK;
    /* PS mode: each pod is one server (Master) or one trainer (Worker) */
    return kiln__env_put(
        env, me->role == KILN_ROLE_MASTER ? "PADDLE_SERVER_NUM" : "PADDLE_TRAINER_NUM", "1");
}

/* WORKER_PORT is one port for all workers (theirs is the same in every pod
 * on Kubernetes): kiln's worker 0's, which is every worker's where each
 * worker has a node of its own. WORKER_ADDRS lists WORLD_SIZE - 1 worker
 * addresses, as the operator does. */
static kiln_err xgboost_env(const kiln_exec_task *tasks, size_t n, const kf_world *w,
                            kiln_strv *env)
{
    kiln_err err;
    if ((err = kiln__env_put_int(env, "MASTER_PORT", w->master->port)) != KILN_OK ||
        (err = kiln__env_put(env, "MASTER_ADDR", w->master->host)) != KILN_OK ||
        (err = kiln__env_put_int(env, "WORLD_SIZE", w->total)) != KILN_OK ||
        (err = kiln__env_put_int(env, "RANK", w->rank)) != KILN_OK ||
        (err = kiln__env_put(env, "PYTHONUNBUFFERED", "1")) != KILN_OK)
        return err;
    if (w->total <= 1 || !w->worker0) return KILN_OK;
    size_t need = 1;
    for (size_t i = 0; i < n; i++)
        if (tasks[i].role == KILN_ROLE_WORKER) need += strlen(tasks[i].host) + 1;
    char *addrs = calloc(need, 1);
    if (!addrs) return KILN_ENOMEM;
    size_t len = 0;
    for (long long k = 0; k < w->total - 1; k++)
        for (size_t i = 0; i < n; i++)
            if (tasks[i].role == KILN_ROLE_WORKER && tasks[i].index == k)
                len +=
                    (size_t)snprintf(addrs + len, need - len, "%s%s", k ? "," : "", tasks[i].host);
    err = kiln__env_put_int(env, "WORKER_PORT", w->worker0->port);
    if (err == KILN_OK) err = kiln__env_put(env, "WORKER_ADDRS", addrs);
    free(addrs);
    return err;
}

/* Trainer v2's torch policy (TR plugins/torch/torch.go; constants.go
 * TorchEnv*): what torchrun reads. PET_NODE_RANK is the node's
 * job-completion index there (node 0 first); PET_MASTER_ADDR and _PORT are
 * node 0's (Trainer: <trainjob>-node-0-0.<trainjob>:29500), here kiln's
 * address and port for it. PET_NPROC_PER_NODE was worked out at submit
 * (src/spec/trainjob.c). */
static kiln_err trainjob_env(const kiln_job *job, const kf_world *w, kiln_strv *env)
{
    const char *nproc = job->training_input.kubeflow_job.nproc_per_node;
    kiln_err err;
    if ((err = kiln__env_put_int(env, "PET_NNODES", w->total)) != KILN_OK ||
        (err = kiln__env_put(env, "PET_NPROC_PER_NODE", nproc ? nproc : "auto")) != KILN_OK ||
        (err = kiln__env_put_int(env, "PET_NODE_RANK", w->rank)) != KILN_OK ||
        (err = kiln__env_put(env, "PET_MASTER_ADDR", w->master->host)) != KILN_OK)
        return err;
    return kiln__env_put_int(env, "PET_MASTER_PORT", w->master->port);
}

kiln_err kiln__exec_kubeflow_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                                 size_t self, kiln_strv *env)
{
    const char *kind = job->training_input.kubeflow_job.kind;
    kf_world w = world_of(tasks, n, self);
    if (!job->training_input.has_kubeflow_job || !kind || !w.master || w.rank < 0) return KILN_OK;
    if (strcmp(kind, "JAXJob") == 0) return jax_env(&w, env);
    if (strcmp(kind, "PaddleJob") == 0) return paddle_env(job, &w, &tasks[self], env);
    if (strcmp(kind, "XGBoostJob") == 0) return xgboost_env(tasks, n, &w, env);
    if (strcmp(kind, "TrainJob") == 0) return trainjob_env(job, &w, env);
    return KILN_OK;
}
