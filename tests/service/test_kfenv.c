/* tests/service/test_kfenv.c - what a JAXJob's, PaddleJob's and XGBoostJob's
 * replicas see (src/exec/kfenv.c through kiln_exec_replica_env): each
 * operator's variables, variable for variable, against the list in
 * docs/job-model.md ("A JAXJob's, PaddleJob's and XGBoostJob's replicas"),
 * decoded from kiln's own files in tests/data/kubeflow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env_test.h"
#include "kiln/exec.h"
#include "kiln/job.h"
#include "kubeflow_test.h"
#include "test.h"

/* kiln's master and `workers` workers, each on a host and port of its own */
static size_t tasks_of(kiln_exec_task *t, int workers)
{
    static const char *const hosts[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"};
    t[0] = (kiln_exec_task){KILN_ROLE_MASTER, 0, hosts[0], 7000};
    for (int i = 0; i < workers; i++)
        t[1 + i] = (kiln_exec_task){KILN_ROLE_WORKER, i, hosts[1 + i], 7001 + i};
    return (size_t)workers + 1;
}

static void env_of(const kiln_job *job, const kiln_exec_task *t, size_t n, size_t self,
                   kiln_strv *env)
{
    CHECK(kiln_exec_replica_env(job, t, n, self, NULL, 0, false, env) == KILN_OK);
}

/* none of `names` is in `env` */
static void check_absent(const kiln_strv *env, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        CHECK_MSG(env_get(env, names[i]) == NULL, "%s is set", names[i]);
}

static void test_jax(void)
{
    kiln_job *job = kubeflow_example("jaxjob-cpu.yaml"); /* Worker x2: worker 0 is kiln's master */
    if (!job) return;
    kiln_exec_task t[4];
    size_t n = tasks_of(t, 1);
    kiln_strv env = {0};
    for (size_t self = 0; self < n; self++) {
        env_of(job, t, n, self, &env);
        CHECK_STR(env_get(&env, "PYTHONUNBUFFERED"), "1");
        CHECK_STR(env_get(&env, "COORDINATOR_ADDRESS"), "10.0.0.1");
        CHECK_STR(env_get(&env, "COORDINATOR_PORT"), "7000");
        CHECK_STR(env_get(&env, "NUM_PROCESSES"), "2");
        CHECK_STR(env_get(&env, "PROCESS_ID"), self == 0 ? "0" : "1");
        /* not the generic PyTorch-style variables other jobs get */
        check_absent(&env, (const char *const[]){"MASTER_ADDR", "WORLD_SIZE", "RANK", NULL});
        kiln_strv_clear(&env);
    }
    kiln_job_free(job);
}

static void test_paddle(void)
{
    kiln_job *job = kubeflow_example("paddlejob-collective.yaml"); /* Worker x3, collective */
    if (!job) return;
    kiln_exec_task t[4];
    size_t n = tasks_of(t, 2);
    kiln_strv env = {0};
    for (size_t self = 0; self < n; self++) {
        env_of(job, t, n, self, &env);
        CHECK_STR(env_get(&env, "PYTHONUNBUFFERED"), "1");
        CHECK_STR(env_get(&env, "PADDLE_JOB_ID"), "paddle_collective");
        CHECK_STR(env_get(&env, "PADDLE_NNODES"), "3");
        CHECK_STR(env_get(&env, "PADDLE_MASTER"), "10.0.0.1:7000");
        if (self == 0)
            CHECK_STR(env_get(&env, "POD_IP_DUMMY"), "10.0.0.1");
        else
            CHECK(env_get(&env, "POD_IP_DUMMY") == NULL);
        check_absent(&env, (const char *const[]){"PADDLE_SERVER_NUM", "PADDLE_TRAINER_NUM",
                                                 "MASTER_ADDR", "RANK", NULL});
        kiln_strv_clear(&env);
    }
    kiln_job_free(job);

    /* PS mode: a Master; servers and trainers say so */
    static const char ps[] = "apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: ps}\n"
                             "spec:\n  paddleReplicaSpecs:\n"
                             "    Master: {template: {spec: {containers: [{name: paddle, "
                             "image: p}]}}}\n"
                             "    Worker: {replicas: 2, template: {spec: {containers: [{name: "
                             "paddle, image: p}]}}}\n";
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_kubeflow(ps, strlen(ps), &job, &d) == KILN_OK);
    kiln_diag_free(&d);
    if (!job) return;
    n = tasks_of(t, 2);
    env_of(job, t, n, 0, &env);
    CHECK_STR(env_get(&env, "PADDLE_SERVER_NUM"), "1");
    CHECK(env_get(&env, "PADDLE_TRAINER_NUM") == NULL);
    CHECK_STR(env_get(&env, "POD_IP_DUMMY"), "10.0.0.1");
    kiln_strv_clear(&env);
    env_of(job, t, n, 2, &env);
    CHECK_STR(env_get(&env, "PADDLE_TRAINER_NUM"), "1");
    CHECK(env_get(&env, "PADDLE_SERVER_NUM") == NULL);
    CHECK_STR(env_get(&env, "PADDLE_MASTER"), "10.0.0.1:7000");
    kiln_strv_clear(&env);
    kiln_job_free(job);
}

static void test_xgboost(void)
{
    kiln_job *job = kubeflow_example("xgboostjob-rabit.yaml"); /* Master + Worker x2 */
    if (!job) return;
    kiln_exec_task t[4];
    size_t n = tasks_of(t, 2);
    kiln_strv env = {0};
    for (size_t self = 0; self < n; self++) {
        env_of(job, t, n, self, &env);
        CHECK_STR(env_get(&env, "MASTER_ADDR"), "10.0.0.1");
        CHECK_STR(env_get(&env, "MASTER_PORT"), "7000");
        CHECK_STR(env_get(&env, "WORLD_SIZE"), "3");
        static const char *const ranks[] = {"0", "1", "2"};
        CHECK_STR(env_get(&env, "RANK"), ranks[self]);
        CHECK_STR(env_get(&env, "PYTHONUNBUFFERED"), "1");
        CHECK_STR(env_get(&env, "WORKER_PORT"), "7001");
        CHECK_STR(env_get(&env, "WORKER_ADDRS"), "10.0.0.2,10.0.0.3");
        kiln_strv_clear(&env);
    }
    /* one replica: no WORKER_* (the operator sets them only for more) */
    n = tasks_of(t, 0);
    env_of(job, t, n, 0, &env);
    CHECK_STR(env_get(&env, "WORLD_SIZE"), "1");
    check_absent(&env, (const char *const[]){"WORKER_PORT", "WORKER_ADDRS", NULL});
    kiln_strv_clear(&env);
    kiln_job_free(job);
}

/* Trainer v2's torch policy: torchrun's PET_* variables on every node
 * (TR plugins/torch/torch.go), node 0 (kiln's master) the rendezvous */
static void test_trainjob(void)
{
    kiln_job *job = kubeflow_example("trainjob-torch.yaml"); /* 3 nodes, cpu request 1500m */
    if (!job) return;
    kiln_exec_task t[4];
    size_t n = tasks_of(t, 2);
    kiln_strv env = {0};
    for (size_t self = 0; self < n; self++) {
        env_of(job, t, n, self, &env);
        CHECK_STR(env_get(&env, "PET_NNODES"), "3");
        CHECK_STR(env_get(&env, "PET_NPROC_PER_NODE"), "2");
        static const char *const ranks[] = {"0", "1", "2"};
        CHECK_STR(env_get(&env, "PET_NODE_RANK"), ranks[self]);
        CHECK_STR(env_get(&env, "PET_MASTER_ADDR"), "10.0.0.1");
        CHECK_STR(env_get(&env, "PET_MASTER_PORT"), "7000");
        /* Trainer sets no other kind's variables (torchrun sets RANK itself) */
        check_absent(&env, (const char *const[]){"COORDINATOR_ADDRESS", "WORLD_SIZE", "RANK",
                                                 "MASTER_ADDR", NULL});
        kiln_strv_clear(&env);
    }
    kiln_job_free(job);
}

int main(void)
{
    test_trainjob();
    test_jax();
    test_paddle();
    test_xgboost();
    TEST_DONE();
}
