/* src/exec/mpienv.c - what an MPIJob's replicas see (kiln/exec.h): the
 * hostfile and the environment each operator sets, with kiln-mpi-agent in
 * the place of v1's /etc/mpi/kubexec.sh and of v2beta1's ssh:
 *   v1       TO pkg/controller.v1/mpi/mpijob_controller.go (launcher env,
 *            the hostfile of the `<job>-config` ConfigMap)
 *   v2beta1  MO pkg/controller/mpi_job_controller.go (K_MPI_JOB_ROLE, the
 *            OMPI_MCA_* / I_MPI_* / HYDRA_* of each mpiImplementation)
 * The hostfile names each worker `<job>-worker-<i>` (v1's pod names; the
 * launcher `<job>-launcher` first with runLauncherAsWorker). Names that
 * resolve to no address are what keep OpenMPI from taking a replica on this
 * node for its own: it starts every host's daemon through the agent, which
 * knows the names (docs/job-model.md, "How an MPIJob's ranks start"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/envvar.h"
#include "kiln/exec.h"

#define CONNECT_ARGS "-o ConnectionAttempts=10" /* v2beta1's; the agent reads -o and ignores it */

/* The user's own env of `role` names `name` (the operator sets some only then). */
static bool user_sets(const kiln_job *job, kiln_role role, const char *name)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    for (size_t k = 0; rc && k < rc->env.n; k++)
        if (strcmp(rc->env.keys[k], name) == 0) return true;
    return false;
}

static bool is_v2(const kiln_job *job)
{
    const char *api = job->training_input.mpi_job.api_version;
    return api && strcmp(api, "kubeflow.org/v2beta1") == 0;
}

static const char *impl_of(const kiln_job *job)
{
    const char *impl = job->training_input.mpi_job.implementation;
    return is_v2(job) && impl ? impl : "OpenMPI";
}

/* A pod name's: the job id's '_' (kiln's for the metadata.name's '-') as
 * '-', lowercase: OpenMPI refuses a node name with any other character. */
void kiln_exec_mpi_host(const kiln_job *job, kiln_role role, int index, char *buf, size_t len)
{
    const char *id = job->job_id ? job->job_id : "job";
    if (role == KILN_ROLE_MASTER)
        snprintf(buf, len, "%s-launcher", id);
    else
        snprintf(buf, len, "%s-worker-%d", id, index);
    for (char *p = buf; *p; p++) {
        if (*p == '_') *p = '-';
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    }
}

char *kiln_exec_mpi_hostfile(const kiln_job *job, const kiln_exec_task *tasks, size_t n)
{
    const kiln_mpi_job *m = &job->training_input.mpi_job;
    /* v1 writes `slots=` whatever the MPI; v2beta1 `host:N` for Intel and MPICH */
    bool colon = is_v2(job) && strcmp(impl_of(job), "OpenMPI") != 0;
    size_t cap = 64 * (n + 1), len = 0;
    char *out = calloc(cap, 1), host[160];
    if (!out) return NULL;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            const kiln_exec_task *t = &tasks[i];
            bool launcher = t->role == KILN_ROLE_MASTER;
            if (pass == 0 ? !(launcher && m->run_launcher_as_worker && is_v2(job))
                          : t->role != KILN_ROLE_WORKER)
                continue;
            kiln_exec_mpi_host(job, t->role, t->index, host, sizeof host);
            if (cap - len < strlen(host) + 32) {
                char *grown = realloc(out, cap * 2 + strlen(host) + 32);
                if (!grown) {
                    free(out);
                    return NULL;
                }
                out = grown;
                cap = cap * 2 + strlen(host) + 32;
            }
            len += (size_t)snprintf(out + len, cap - len, colon ? "%s:%lld\n" : "%s slots=%lld\n",
                                    host, (long long)m->slots_per_worker);
        }
    return out;
}

static kiln_err launcher_env(const kiln_job *job, const char *hostfile, const char *agent,
                             kiln_strv *env)
{
    const kiln_mpi_job *m = &job->training_input.mpi_job;
    const char *impl = impl_of(job);
    kiln_err err = KILN_OK;
    if (!is_v2(job)) {
        /* v1: the rsh agent (kubexec.sh there) and the hostfile, for OpenMPI
         * and, where the user has not set them, Intel MPI's hydra */
        if ((err = kiln__env_put(env, "OMPI_MCA_plm_rsh_agent", agent)) != KILN_OK ||
            (err = kiln__env_put(env, "OMPI_MCA_orte_default_hostfile", hostfile)) != KILN_OK)
            return err;
        if (!user_sets(job, KILN_ROLE_MASTER, "I_MPI_HYDRA_BOOTSTRAP") &&
            (err = kiln__env_put(env, "I_MPI_HYDRA_BOOTSTRAP", "rsh")) != KILN_OK)
            return err;
        if (!user_sets(job, KILN_ROLE_MASTER, "I_MPI_HYDRA_BOOTSTRAP_EXEC"))
            err = kiln__env_put(env, "I_MPI_HYDRA_BOOTSTRAP_EXEC", agent);
        return err;
    }
    if ((err = kiln__env_put(env, "K_MPI_JOB_ROLE", "launcher")) != KILN_OK) return err;
    if (strcmp(impl, "OpenMPI") == 0) {
        if ((err = kiln__env_put(env, "OMPI_MCA_orte_keep_fqdn_hostnames", "true")) != KILN_OK ||
            (err = kiln__env_put(env, "OMPI_MCA_orte_default_hostfile", hostfile)) != KILN_OK ||
            (err = kiln__env_put(env, "OMPI_MCA_plm_rsh_args", CONNECT_ARGS)) != KILN_OK ||
            (err = kiln__env_put_int(env, "OMPI_MCA_orte_set_default_slots",
                                     m->slots_per_worker)) != KILN_OK)
            return err;
        /* ssh's place: the rsh launcher's agent */
        return kiln__env_put(env, "OMPI_MCA_plm_rsh_agent", agent);
    }
    if (strcmp(impl, "Intel") == 0) {
        if ((err = kiln__env_put(env, "I_MPI_HYDRA_HOST_FILE", hostfile)) != KILN_OK ||
            (err = kiln__env_put(env, "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", CONNECT_ARGS)) !=
                KILN_OK ||
            (err = kiln__env_put_int(env, "I_MPI_PERHOST", m->slots_per_worker)) != KILN_OK ||
            (err = kiln__env_put(env, "I_MPI_HYDRA_BOOTSTRAP", "rsh")) != KILN_OK)
            return err;
        return kiln__env_put(env, "I_MPI_HYDRA_BOOTSTRAP_EXEC", agent);
    }
    /* MPICH's hydra */
    if ((err = kiln__env_put(env, "HYDRA_HOST_FILE", hostfile)) != KILN_OK ||
        (err = kiln__env_put(env, "HYDRA_LAUNCH_EXTRA_ARGS", CONNECT_ARGS)) != KILN_OK ||
        (err = kiln__env_put(env, "HYDRA_LAUNCHER", "rsh")) != KILN_OK)
        return err;
    return kiln__env_put(env, "HYDRA_LAUNCHER_EXEC", agent);
}

kiln_err kiln_exec_mpi_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self,
                           const char *mpi_dir, const char *agent, kiln_strv *env)
{
    char hostfile[4200];
    kiln_err err;
    (void)n;
    if (!job->has_training_input || !job->training_input.has_mpi_job) return KILN_OK;
    snprintf(hostfile, sizeof hostfile, "%s/hostfile", mpi_dir);
    /* the agent finds the job's host records there, on every replica */
    if ((err = kiln__env_put(env, "KILN_MPI_DIR", mpi_dir)) != KILN_OK) return err;
    if (tasks[self].role == KILN_ROLE_MASTER) return launcher_env(job, hostfile, agent, env);
    if (tasks[self].role == KILN_ROLE_WORKER && is_v2(job))
        return kiln__env_put(env, "K_MPI_JOB_ROLE", "worker");
    return KILN_OK;
}
