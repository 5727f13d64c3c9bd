/* tests/service/test_mpienv.c - what an MPIJob's replicas see
 * (src/exec/mpienv.c): the hostfile of each API and mpiImplementation, and
 * each operator's variables on the launcher and the workers, with
 * kiln-mpi-agent where the operators put kubexec.sh or ssh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env_test.h"
#include "kiln/exec.h"
#include "kiln/job.h"
#include "kubeflow_test.h"
#include "test.h"

#define AGENT "/usr/lib/kiln/kiln-mpi-agent"
#define DIR   "/var/lib/kiln/jobs/p/m/mpi"

/* an MPIJob of `api` named My_Job (its id), 2 Workers of 2 slots, `extra` spec lines */
static kiln_job *job_of(const char *api, const char *extra, const char *launcher_env)
{
    char yaml[2048];
    kiln_diag d = KILN_DIAG_INIT;
    snprintf(yaml, sizeof yaml,
             "apiVersion: kubeflow.org/%s\nkind: MPIJob\nmetadata: {name: my-job}\nspec:\n"
             "  slotsPerWorker: 2\n%s  mpiReplicaSpecs:\n    Launcher: {template: {spec: "
             "{containers: [{name: mpi, command: [mpirun], env: [%s]}]}}}\n"
             "    Worker: {replicas: 2, template: {spec: {containers: [{name: mpi}]}}}\n",
             api, extra, launcher_env);
    kiln_job *job = decode(yaml, &d, NULL);
    CHECK_MSG(job != NULL, "%s does not decode", yaml);
    if (!job) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

static const kiln_exec_task tasks[] = {{KILN_ROLE_MASTER, 0, "127.0.0.1", 7000},
                                       {KILN_ROLE_WORKER, 0, "127.0.0.1", 7001},
                                       {KILN_ROLE_WORKER, 1, "127.0.0.1", 7002}};

static void env_of(const kiln_job *job, size_t self, kiln_strv *env)
{
    kiln_strv_clear(env);
    CHECK(kiln_exec_mpi_env(job, tasks, 3, self, DIR, AGENT, env) == KILN_OK);
}

static void check_hostfile(const kiln_job *job, const char *want)
{
    char *hf = kiln_exec_mpi_hostfile(job, tasks, 3);
    CHECK_STR(hf, want);
    free(hf);
}

static void test_v1(void)
{
    kiln_strv env = {0};
    kiln_job *job = job_of("v1", "", "");
    if (!job) return;
    /* the pod names, '_' of the job id back to '-' */
    check_hostfile(job, "my-job-worker-0 slots=2\nmy-job-worker-1 slots=2\n");
    env_of(job, 0, &env);
    CHECK_STR(env_get(&env, "OMPI_MCA_plm_rsh_agent"), AGENT);
    CHECK_STR(env_get(&env, "OMPI_MCA_orte_default_hostfile"), DIR "/hostfile");
    CHECK_STR(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP"), "rsh");
    CHECK_STR(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP_EXEC"), AGENT);
    CHECK_STR(env_get(&env, "KILN_MPI_DIR"), DIR);
    CHECK(env_get(&env, "K_MPI_JOB_ROLE") == NULL); /* not in the v1 controller */
    env_of(job, 1, &env);
    CHECK(env.n == 1 && env_get(&env, "KILN_MPI_DIR") != NULL);
    kiln_job_free(job);
    /* the user's own I_MPI_HYDRA_BOOTSTRAP wins, as the operator leaves it */
    job = job_of("v1", "", "{name: I_MPI_HYDRA_BOOTSTRAP, value: ssh}");
    if (job) {
        env_of(job, 0, &env);
        CHECK(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP") == NULL);
        CHECK_STR(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP_EXEC"), AGENT);
    }
    kiln_job_free(job);
    kiln_strv_clear(&env);
}

static void test_v2beta1(void)
{
    kiln_strv env = {0};
    kiln_job *job = job_of("v2beta1", "", "");
    if (!job) return;
    check_hostfile(job, "my-job-worker-0 slots=2\nmy-job-worker-1 slots=2\n");
    env_of(job, 0, &env);
    CHECK_STR(env_get(&env, "K_MPI_JOB_ROLE"), "launcher");
    CHECK_STR(env_get(&env, "OMPI_MCA_orte_keep_fqdn_hostnames"), "true");
    CHECK_STR(env_get(&env, "OMPI_MCA_orte_default_hostfile"), DIR "/hostfile");
    CHECK_STR(env_get(&env, "OMPI_MCA_plm_rsh_args"), "-o ConnectionAttempts=10");
    CHECK_STR(env_get(&env, "OMPI_MCA_orte_set_default_slots"), "2");
    CHECK_STR(env_get(&env, "OMPI_MCA_plm_rsh_agent"), AGENT);
    env_of(job, 2, &env);
    CHECK_STR(env_get(&env, "K_MPI_JOB_ROLE"), "worker");
    CHECK(env_get(&env, "OMPI_MCA_plm_rsh_agent") == NULL);
    kiln_job_free(job);

    job = job_of("v2beta1", "  runLauncherAsWorker: true\n", "");
    if (job)
        check_hostfile(
            job, "my-job-launcher slots=2\nmy-job-worker-0 slots=2\nmy-job-worker-1 slots=2\n");
    kiln_job_free(job);

    job = job_of("v2beta1", "  mpiImplementation: Intel\n", "");
    if (job) {
        check_hostfile(job, "my-job-worker-0:2\nmy-job-worker-1:2\n");
        env_of(job, 0, &env);
        CHECK_STR(env_get(&env, "I_MPI_HYDRA_HOST_FILE"), DIR "/hostfile");
        CHECK_STR(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"),
                  "-o ConnectionAttempts=10");
        CHECK_STR(env_get(&env, "I_MPI_PERHOST"), "2");
        CHECK_STR(env_get(&env, "I_MPI_HYDRA_BOOTSTRAP_EXEC"), AGENT);
        CHECK(env_get(&env, "OMPI_MCA_orte_default_hostfile") == NULL);
    }
    kiln_job_free(job);

    job = job_of("v2beta1", "  mpiImplementation: MPICH\n", "");
    if (job) {
        check_hostfile(job, "my-job-worker-0:2\nmy-job-worker-1:2\n");
        env_of(job, 0, &env);
        CHECK_STR(env_get(&env, "HYDRA_HOST_FILE"), DIR "/hostfile");
        CHECK_STR(env_get(&env, "HYDRA_LAUNCH_EXTRA_ARGS"), "-o ConnectionAttempts=10");
        CHECK_STR(env_get(&env, "HYDRA_LAUNCHER_EXEC"), AGENT);
    }
    kiln_job_free(job);
    kiln_strv_clear(&env);
}

/* the file's own problems are the decoder's (test_mpijob); one here keeps
 * kubeflow_test.h's helper in use */
static void test_bad_slots(void)
{
    expect_bad("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  slotsPerWorker: 0\n  mpiReplicaSpecs:\n    Launcher: {template: {spec: "
               "{containers: [{name: mpi, command: [mpirun]}]}}}\n",
               "spec.slotsPerWorker", "at least 1");
}

/* a job of another kind gets none of it */
static void test_other_kinds(void)
{
    kiln_strv env = {0};
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = decode("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n"
                           "  tfReplicaSpecs:\n    Worker: {replicas: 1, template: {spec: "
                           "{containers: [{name: tensorflow, image: i}]}}}\n",
                           &d, NULL);
    CHECK(job != NULL);
    if (job) CHECK(kiln_exec_mpi_env(job, tasks, 3, 0, DIR, AGENT, &env) == KILN_OK && env.n == 0);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

int main(void)
{
    test_v1();
    test_v2beta1();
    test_other_kinds();
    test_bad_slots();
    TEST_DONE();
}
