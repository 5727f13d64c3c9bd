/* tests/service/test_exec_env.c - what a replica sees (facts §6): TF_CONFIG
 * and CLUSTER_SPEC (cluster with master|chief, worker, ps; evaluators with a
 * task but outside the cluster; job = trainingInput; environment = cloud),
 * PyTorch's MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, CUDA_VISIBLE_DEVICES,
 * the program chosen for each kind of job, and a real spawned process. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env_test.h"
#include "kiln/exec.h"
#include "test.h"

static kiln_job *mkjob(bool chief)
{
    kiln_job *j = kiln_job_new();
    kiln_training_input *ti = &j->training_input;
    kiln_set_str(&j->job_id, "mnist_1");
    j->has_training_input = true;
    kiln_set_str(&ti->scale_tier, "CUSTOM");
    kiln_set_str(&ti->master_type, "n1-standard-4");
    kiln_set_str(&ti->worker_type, "n1-standard-4");
    ti->worker_count = 2;
    kiln_set_str(&ti->parameter_server_type, "n1-standard-4");
    ti->parameter_server_count = 1;
    kiln_set_str(&ti->evaluator_type, "n1-standard-4");
    ti->evaluator_count = 1;
    kiln_set_str(&ti->region, "us-central1");
    kiln_set_str(&ti->python_module, "trainer.task");
    kiln_set_str(&ti->job_dir, "/tmp/jobdir");
    kiln_strv_push(&ti->args, "--epochs");
    kiln_strv_push(&ti->args, "3");
    ti->use_chief_in_tf_config = chief;
    return j;
}

static const kiln_exec_task tasks[] = {
    {KILN_ROLE_MASTER, 0, "10.0.0.1", 30000},    {KILN_ROLE_WORKER, 0, "10.0.0.2", 30001},
    {KILN_ROLE_WORKER, 1, "10.0.0.3", 30002},    {KILN_ROLE_PARAMETER_SERVER, 0, "10.0.0.4", 30003},
    {KILN_ROLE_EVALUATOR, 0, "10.0.0.5", 30004},
};
#define NT (sizeof tasks / sizeof *tasks)

static void check_tf_config(const char *text, const char *master_key, const char *type, int index)
{
    json_error_t je;
    json_t *tf = json_loads(text ? text : "", 0, &je);
    CHECK_MSG(tf != NULL, "TF_CONFIG is not JSON: %s", text ? text : "(null)");
    if (!tf) return;
    json_t *cl = json_object_get(tf, "cluster");
    CHECK(json_object_size(cl) == 3); /* master|chief, worker, ps: no evaluator */
    CHECK(json_object_get(cl, "evaluator") == NULL);
    CHECK(json_object_get(cl, strcmp(master_key, "chief") == 0 ? "master" : "chief") == NULL);
    json_t *m = json_object_get(cl, master_key);
    CHECK(json_array_size(m) == 1);
    CHECK_STR(json_string_value(json_array_get(m, 0)), "10.0.0.1:30000");
    json_t *w = json_object_get(cl, "worker");
    CHECK(json_array_size(w) == 2);
    CHECK_STR(json_string_value(json_array_get(w, 1)), "10.0.0.3:30002");
    CHECK_STR(json_string_value(json_array_get(json_object_get(cl, "ps"), 0)), "10.0.0.4:30003");
    json_t *task = json_object_get(tf, "task");
    CHECK_STR(json_string_value(json_object_get(task, "type")), type);
    CHECK(json_integer_value(json_object_get(task, "index")) == index);
    json_t *job = json_object_get(tf, "job");
    CHECK_STR(json_string_value(json_object_get(job, "pythonModule")), "trainer.task");
    CHECK_STR(json_string_value(json_object_get(job, "workerCount")), "2");
    CHECK_STR(json_string_value(json_object_get(tf, "environment")), "cloud");
    /* the order of the document's keys as facts §6 shows it */
    const char *keys[] = {"cluster", "task", "job", "environment"};
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(tf, key, val)
    {
        CHECK(k < 4 && strcmp(key, keys[k]) == 0);
        k++;
    }
    json_decref(tf);
}

static kiln_job *from_kubeflow(const char *yaml)
{
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_job_from_kubeflow(yaml, strlen(yaml), &job, &d) == KILN_OK);
    if (!job) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

#define PT_HEAD "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pt-1}\nspec:\n"
#define PT_ROLE(role, n)                                                                           \
    "    " role ":\n      replicas: " n "\n"                                                       \
    "      template: {spec: {containers: [{name: pytorch, image: i, command: [x]}]}}\n"

/* A PyTorchJob's replicas get the operator's environment (docs/job-model.md). */
static void test_pytorch_env(void)
{
    kiln_strv env = {0};
    kiln_job *job = from_kubeflow(PT_HEAD "  nprocPerNode: '2'\n  pytorchReplicaSpecs:\n" PT_ROLE(
        "Master", "1") PT_ROLE("Worker", "2"));
    if (!job) return;
    /* tasks 0..2: master, worker 0, worker 1 */
    const char *want[3][2] = {{"0", "0"}, {"1", "1"}, {"2", "2"}};
    for (size_t i = 0; i < 3; i++) {
        CHECK(kiln_exec_replica_env(job, tasks, 3, i, NULL, 0, false, &env) == KILN_OK);
        CHECK_STR(env_get(&env, "PYTHONUNBUFFERED"), "1");
        CHECK_STR(env_get(&env, "MASTER_ADDR"), "10.0.0.1");
        CHECK_STR(env_get(&env, "PET_MASTER_ADDR"), "10.0.0.1");
        CHECK_STR(env_get(&env, "MASTER_PORT"), "30000");
        CHECK_STR(env_get(&env, "PET_MASTER_PORT"), "30000");
        CHECK_STR(env_get(&env, "WORLD_SIZE"), "6"); /* 3 replicas x 2 processes */
        CHECK_STR(env_get(&env, "RANK"), want[i][0]);
        CHECK_STR(env_get(&env, "PET_NODE_RANK"), want[i][1]);
        CHECK_STR(env_get(&env, "PET_NPROC_PER_NODE"), "2");
        CHECK_STR(env_get(&env, "PET_NNODES"), "3");
        CHECK(env_get(&env, "PET_RDZV_ENDPOINT") == NULL);
        CHECK(env_get(&env, "TF_CONFIG") != NULL); /* kiln's own, as for every job */
    }
    kiln_job_free(job);

    /* nprocPerNode auto counts as 1; without it no PET_NPROC_PER_NODE */
    job = from_kubeflow(PT_HEAD "  nprocPerNode: auto\n  pytorchReplicaSpecs:\n" PT_ROLE(
        "Master", "1") PT_ROLE("Worker", "1"));
    CHECK(job && kiln_exec_replica_env(job, tasks, 2, 1, NULL, 0, false, &env) == KILN_OK);
    CHECK_STR(env_get(&env, "WORLD_SIZE"), "2");
    CHECK_STR(env_get(&env, "PET_NPROC_PER_NODE"), "auto");
    kiln_job_free(job);
    job = from_kubeflow(PT_HEAD "  pytorchReplicaSpecs:\n" PT_ROLE("Master", "1"));
    CHECK(job && kiln_exec_replica_env(job, tasks, 1, 0, NULL, 0, false, &env) == KILN_OK);
    CHECK(env_get(&env, "PET_NPROC_PER_NODE") == NULL);
    CHECK_STR(env_get(&env, "WORLD_SIZE"), "1");
    kiln_job_free(job);

    /* elastic, Workers only: kiln's master is Worker 0, the rendezvous host */
    job = from_kubeflow(PT_HEAD "  elasticPolicy: {minReplicas: 1, maxReplicas: 3, maxRestarts: "
                                "5,\n    rdzvConf: [{key: timeout, value: '90'}]}\n"
                                "  pytorchReplicaSpecs:\n" PT_ROLE("Worker", "2"));
    const kiln_exec_task et[] = {{KILN_ROLE_MASTER, 0, "10.0.0.1", 30000},
                                 {KILN_ROLE_WORKER, 0, "10.0.0.2", 30001}};
    for (size_t i = 0; job && i < 2; i++) {
        CHECK(kiln_exec_replica_env(job, et, 2, i, NULL, 0, false, &env) == KILN_OK);
        CHECK_STR(env_get(&env, "PYTHONUNBUFFERED"), "1");
        CHECK(env_get(&env, "MASTER_ADDR") == NULL && env_get(&env, "RANK") == NULL);
        CHECK_STR(env_get(&env, "PET_NNODES"), "1:3");
        CHECK_STR(env_get(&env, "PET_RDZV_ENDPOINT"), "10.0.0.1:30000");
        CHECK_STR(env_get(&env, "PET_RDZV_BACKEND"), "c10d");
        CHECK_STR(env_get(&env, "PET_RDZV_ID"), "pt_1");
        CHECK_STR(env_get(&env, "PET_MAX_RESTARTS"), "5");
        CHECK_STR(env_get(&env, "PET_RDZV_CONF"),
                  i == 0 ? "timeout=90,is_host=true" : "timeout=90,is_host=false");
    }
    kiln_job_free(job);
    /* rdzvHost/rdzvPort given: the endpoint is theirs, is_host left to torchrun */
    job = from_kubeflow(PT_HEAD "  elasticPolicy: {rdzvHost: etcd-1, rdzvPort: 2379, "
                                "rdzvBackend: etcd, rdzvId: r9, nProcPerNode: 4}\n"
                                "  pytorchReplicaSpecs:\n" PT_ROLE("Worker", "2"));
    CHECK(job && kiln_exec_replica_env(job, et, 2, 1, NULL, 0, false, &env) == KILN_OK);
    CHECK_STR(env_get(&env, "PET_RDZV_ENDPOINT"), "etcd-1:2379");
    CHECK_STR(env_get(&env, "PET_RDZV_BACKEND"), "etcd");
    CHECK_STR(env_get(&env, "PET_RDZV_ID"), "r9");
    CHECK_STR(env_get(&env, "PET_NNODES"), "2:2");
    CHECK_STR(env_get(&env, "PET_NPROC_PER_NODE"), "4");
    CHECK(env_get(&env, "PET_RDZV_CONF") == NULL && env_get(&env, "PET_MAX_RESTARTS") == NULL);
    kiln_job_free(job);
    kiln_strv_clear(&env);
}

int main(void)
{
    kiln_strv env = {0}, argv = {0};
    char why[256], name[48];
    kiln_job *job = mkjob(false);

    kiln_exec_task_name(KILN_ROLE_PARAMETER_SERVER, 0, name);
    CHECK(strcmp(name, "ps-replica-0") == 0);
    kiln_exec_task_name(KILN_ROLE_MASTER, 0, name);
    CHECK(strcmp(name, "master-replica-0") == 0);

    /* master: task master/0, RANK 0, world = master + 2 workers, its two GPUs */
    const char *gpus[] = {"2", "3"};
    CHECK(kiln_exec_replica_env(job, tasks, NT, 0, gpus, 2, true, &env) == KILN_OK);
    check_tf_config(env_get(&env, "TF_CONFIG"), "master", "master", 0);
    CHECK_STR(env_get(&env, "CLUSTER_SPEC"), env_get(&env, "TF_CONFIG"));
    CHECK_STR(env_get(&env, "MASTER_ADDR"), "10.0.0.1");
    CHECK_STR(env_get(&env, "MASTER_PORT"), "30000");
    CHECK_STR(env_get(&env, "WORLD_SIZE"), "3");
    CHECK_STR(env_get(&env, "RANK"), "0");
    CHECK_STR(env_get(&env, "CUDA_VISIBLE_DEVICES"), "2,3");
    CHECK_STR(env_get(&env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    CHECK_STR(env_get(&env, "KILN_SIMULATED_DEVICES"), "1");
    /* simulated GPUs are no container's real ones */
    CHECK_STR(env_get(&env, "NVIDIA_VISIBLE_DEVICES"), "void");
    CHECK_STR(env_get(&env, "KILN_TASK_NAME"), "master-replica-0");

    /* real GPUs: by UUID, for CUDA and NVIDIA's container runtime alike */
    const char *uuids[] = {"GPU-11111111-2222-3333-4444-555555555555",
                           "GPU-66666666-7777-8888-9999-000000000000"};
    CHECK(kiln_exec_replica_env(job, tasks, NT, 0, uuids, 2, false, &env) == KILN_OK);
    CHECK_STR(env_get(&env, "CUDA_VISIBLE_DEVICES"),
              "GPU-11111111-2222-3333-4444-555555555555,GPU-66666666-7777-8888-9999-000000000000");
    CHECK_STR(env_get(&env, "NVIDIA_VISIBLE_DEVICES"), env_get(&env, "CUDA_VISIBLE_DEVICES"));
    CHECK(env_get(&env, "KILN_SIMULATED_DEVICES") == NULL);

    /* worker 1: RANK 2, no GPU -> CUDA_VISIBLE_DEVICES present and empty */
    CHECK(kiln_exec_replica_env(job, tasks, NT, 2, NULL, 0, false, &env) == KILN_OK);
    check_tf_config(env_get(&env, "TF_CONFIG"), "master", "worker", 1);
    CHECK_STR(env_get(&env, "RANK"), "2");
    CHECK_STR(env_get(&env, "CUDA_VISIBLE_DEVICES"), "");
    CHECK_STR(env_get(&env, "NVIDIA_VISIBLE_DEVICES"), "void");
    CHECK(env_get(&env, "KILN_SIMULATED_DEVICES") == NULL);

    /* ps and evaluator: in TF's world only */
    CHECK(kiln_exec_replica_env(job, tasks, NT, 3, NULL, 0, false, &env) == KILN_OK);
    check_tf_config(env_get(&env, "TF_CONFIG"), "master", "ps", 0);
    CHECK(env_get(&env, "RANK") == NULL);
    CHECK(kiln_exec_replica_env(job, tasks, NT, 4, NULL, 0, false, &env) == KILN_OK);
    check_tf_config(env_get(&env, "TF_CONFIG"), "master", "evaluator", 0);

    /* the collectives' key: one per job and attempt, a valid shm name */
    char k1[64], k2[64], k3[64], k4[64];
    kiln_exec_coll_key("p", "job_1", 77, 0, k1);
    kiln_exec_coll_key("p", "job_1", 77, 0, k2);
    kiln_exec_coll_key("p", "job_1", 77, 1, k3);
    kiln_exec_coll_key("q", "job_1", 77, 0, k4);
    CHECK(strcmp(k1, k2) == 0);
    CHECK(strcmp(k1, k3) != 0 && strcmp(k1, k4) != 0);
    CHECK(strspn(k1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") ==
          strlen(k1));
    CHECK(strlen(k1) > 8 && strlen(k1) <= 64);

    /* useChiefInTfConfig */
    kiln_job *cj = mkjob(true);
    CHECK(kiln_exec_replica_env(cj, tasks, NT, 0, NULL, 0, false, &env) == KILN_OK);
    check_tf_config(env_get(&env, "TF_CONFIG"), "chief", "chief", 0);
    kiln_job_free(cj);

    /* programs: python module with args and --job-dir */
    kiln_exec_paths paths = {.kiln_train = "/opt/kiln/bin/kiln-train", .python = "python3"};
    CHECK(kiln_exec_program(job, KILN_ROLE_WORKER, &paths, &argv, why, sizeof why) == KILN_OK);
    CHECK(argv.n == 7);
    if (argv.n == 7) {
        CHECK_STR(argv.v[0], "python3");
        CHECK_STR(argv.v[1], "-m");
        CHECK_STR(argv.v[2], "trainer.task");
        CHECK_STR(argv.v[3], "--epochs");
        CHECK_STR(argv.v[5], "--job-dir");
        CHECK_STR(argv.v[6], "/tmp/jobdir");
    }
    /* kiln.mnist -> kiln-train mnist ... */
    kiln_set_str(&job->training_input.python_module, "kiln.mnist");
    CHECK(kiln_exec_program(job, KILN_ROLE_MASTER, &paths, &argv, why, sizeof why) == KILN_OK);
    CHECK(argv.n >= 2 && strcmp(argv.v[0], "/opt/kiln/bin/kiln-train") == 0 &&
          strcmp(argv.v[1], "mnist") == 0);
    paths.kiln_train = NULL;
    CHECK(kiln_exec_program(job, KILN_ROLE_MASTER, &paths, &argv, why, sizeof why) == KILN_EINVAL);
    CHECK(strstr(why, "kiln-train") != NULL && argv.n == 0);
    /* containerCommand: the master's is used by workers without their own */
    job->training_input.has_master_config = true;
    kiln_strv_push(&job->training_input.master_config.container_command, "sh");
    kiln_strv_push(&job->training_input.master_config.container_args, "-c");
    kiln_strv_push(&job->training_input.master_config.container_args, "exit 0");
    CHECK(kiln_exec_program(job, KILN_ROLE_WORKER, &paths, &argv, why, sizeof why) == KILN_OK);
    CHECK(argv.n == 3 && strcmp(argv.v[0], "sh") == 0 && strcmp(argv.v[2], "exit 0") == 0);
    /* nothing to run */
    kiln_job *empty = kiln_job_new();
    CHECK(kiln_exec_program(empty, KILN_ROLE_MASTER, &paths, &argv, why, sizeof why) ==
          KILN_EINVAL);
    kiln_job_free(empty);

    /* a real process: env overlay, own process group, output on the pipes */
    kiln_strv_clear(&argv);
    kiln_strv_push(&argv, "sh");
    kiln_strv_push(&argv, "-c");
    kiln_strv_push(&argv, "echo \"$KILN_TASK_NAME:$CUDA_VISIBLE_DEVICES:$(pwd)\"; echo err >&2; "
                          "test \"$(ps -o pgid= $$ | tr -d ' ')\" = $$ && exit 7");
    CHECK(kiln_exec_replica_env(job, tasks, NT, 0, gpus, 2, false, &env) == KILN_OK);
    int ofd = -1, efd = -1, status = 0;
    pid_t pid = kiln_proc_spawn(&argv, &env, "/tmp", &ofd, &efd);
    CHECK(pid > 0 && ofd >= 0 && efd >= 0);
    if (pid > 0) {
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 7, "status %d", status);
        char out[256] = "", err[64] = "";
        struct pollfd pf = {.fd = ofd, .events = POLLIN};
        poll(&pf, 1, 2000);
        ssize_t n = read(ofd, out, sizeof out - 1);
        CHECK(n > 0);
        CHECK_MSG(strcmp(out, "master-replica-0:2,3:/tmp\n") == 0, "%s", out);
        pf.fd = efd;
        poll(&pf, 1, 2000);
        n = read(efd, err, sizeof err - 1);
        CHECK(n == 4 && strcmp(err, "err\n") == 0);
        close(ofd);
        close(efd);
    }
    CHECK(kiln_proc_start_time(getpid()) > 0);

    /* log lines: one line, tab separated, newlines in the message flattened */
    char tmpl[] = "/tmp/kiln-log-XXXXXX";
    int fd = mkstemp(tmpl);
    CHECK(kiln_log_write(fd, "INFO", "worker-replica-0", "a\nb", 3) == 0);
    char line[256] = "";
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    CHECK(n > 0 && strncmp(line, "INFO\t20", 7) == 0);
    CHECK(strstr(line, "\tworker-replica-0\ta b\n") != NULL);
    close(fd);
    unlink(tmpl);
    /* a full disk (/dev/full answers ENOSPC): says so, so kiln-monitor can count the loss */
    int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (full >= 0) {
        errno = 0;
        CHECK(kiln_log_write(full, "INFO", "worker-replica-0", "lost", 4) == -1 && errno == ENOSPC);
        close(full);
    }

    kiln_strv_clear(&env);
    kiln_strv_clear(&argv);
    kiln_job_free(job);
    test_pytorch_env();
    TEST_DONE();
}
