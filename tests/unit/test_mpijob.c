/* test_mpijob.c - Kubeflow MPIJob, kubeflow.org/v1 and v2beta1 -> kiln_job
 * (src/spec/mpijob.c): Launcher and Worker, slotsPerWorker, the v2beta1
 * fields and their defaults, each refusal at its path; a Worker without a
 * command made `sleep 365d`, and so a Worker whose program is sshd (with
 * the readinessProbe that probes it, noted); and the catalog's check at
 * create (replicas as processes and in images both run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kubeflow_test.h"
#include "test.h"

static void test_v1(void)
{
    kiln_job *job = kubeflow_example("mpijob-v1.yaml");
    if (!job) return;
    const kiln_training_input *ti = &job->training_input;
    CHECK(ti->has_mpi_job && !ti->has_kubeflow_job && !ti->has_pytorch_job);
    CHECK_STR(ti->mpi_job.api_version, "kubeflow.org/v1");
    CHECK(ti->mpi_job.slots_per_worker == 2);
    CHECK_STR(ti->mpi_job.main_container, "mpi");
    CHECK(ti->mpi_job.implementation == NULL); /* v1 has no mpiImplementation */
    CHECK(ti->worker_count == 2);
    CHECK_STR(ti->master_config.container_command.v[0], "mpirun");
    CHECK_STR(ti->master_config.restart_policy, "Never"); /* v1's default */
    CHECK_STR(ti->worker_config.cpu_limit, "2");
    CHECK_STR(ti->run_policy.clean_pod_policy, "Running"); /* the older top-level place */
    char *json = kiln_job_to_json(job, KILN_ENC_COMPACT);
    CHECK(json && strstr(json, "\"mpiJob\":{\"apiVersion\":\"kubeflow.org/v1\","
                               "\"slotsPerWorker\":\"2\""));
    kiln_job *back = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(json && kiln_job_from_json(json, strlen(json), &back, &d) == KILN_OK);
    if (back) CHECK(back->training_input.mpi_job.slots_per_worker == 2);
    kiln_job_free(back);
    kiln_diag_free(&d);
    free(json);
    kiln_job_free(job);
}

static void test_v2beta1(void)
{
    kiln_job *job = kubeflow_example("mpijob-v2beta1.yaml");
    if (!job) return;
    const kiln_mpi_job *m = &job->training_input.mpi_job;
    CHECK_STR(m->api_version, "kubeflow.org/v2beta1");
    CHECK_STR(m->implementation, "OpenMPI");
    CHECK_STR(m->launcher_creation_policy, "WaitForWorkersReady");
    CHECK_STR(m->ssh_auth_mount_path, "/home/mpiuser/.ssh");
    CHECK(!m->run_launcher_as_worker && m->slots_per_worker == 2);
    /* the first container runs the program whatever its name */
    CHECK_STR(job->training_input.master_config.container_args.v[0], "mpirun");
    /* its Workers' sshd is not run (test_sshd_worker) */
    CHECK_STR(job->training_input.worker_config.container_command.v[0], "sleep");
    CHECK_STR(job->training_input.master_config.restart_policy, "OnFailure"); /* v2's default */
    kiln_job_free(job);

    /* defaults */
    kiln_diag d = KILN_DIAG_INIT;
    job = decode("apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
                 "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: l, "
                 "image: i}]}}}\n    Worker: {template: {spec: {containers: [{name: w, "
                 "image: i}]}}}\n",
                 &d, NULL);
    if (job) {
        const kiln_mpi_job *dm = &job->training_input.mpi_job;
        CHECK_STR(dm->implementation, "OpenMPI");
        CHECK_STR(dm->launcher_creation_policy, "AtStartup");
        CHECK_STR(dm->ssh_auth_mount_path, "/root/.ssh");
        CHECK(dm->slots_per_worker == 1);
        CHECK(job->training_input.worker_count == 0); /* Worker replicas default to 0 */
    }
    kiln_job_free(job);
    kiln_diag_free(&d);
}

static void test_rules(void)
{
#define V2(spec)                                                                                   \
    "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n" spec            \
    "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: l, image: i}]}}}\n"
    expect_bad(V2("  mpiImplementation: LAM\n"), "spec.mpiImplementation", "OpenMPI, Intel, MPICH");
    expect_bad(V2("  launcherCreationPolicy: Later\n"), "spec.launcherCreationPolicy",
               "AtStartup, WaitForWorkersReady");
    expect_bad(V2("  slotsPerWorker: 0\n"), "spec.slotsPerWorker", "at least 1");
    expect_bad(V2("  runLauncherAsWorker: perhaps\n"), "spec.runLauncherAsWorker", "true or false");
    expect_bad(V2("  sshAuthMountPath: .ssh\n"), "spec.sshAuthMountPath", "absolute path");
    /* v1 has no mpiImplementation; v2beta1 no mainContainer */
    expect_bad("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  mpiImplementation: OpenMPI\n  mpiReplicaSpecs:\n    Launcher: {template: "
               "{spec: {containers: [{name: mpi, image: i}]}}}\n",
               "spec.mpiImplementation", "not supported by kiln");
    expect_bad(V2("  mainContainer: mpi\n"), "spec.mainContainer", "not supported by kiln");
    expect_bad("apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  mpiReplicaSpecs:\n    Worker: {template: {spec: {containers: [{name: w, "
               "image: i}]}}}\n",
               "spec.mpiReplicaSpecs.Launcher", "required");
    expect_bad("apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  mpiReplicaSpecs:\n    Launcher: {replicas: 2, template: {spec: {containers: "
               "[{name: l, image: i}]}}}\n",
               "spec.mpiReplicaSpecs.Launcher.replicas", "exactly one Launcher");
    /* v2beta1 is MPIJob's only */
    expect_bad("apiVersion: kubeflow.org/v2beta1\nkind: TFJob\nmetadata: {name: t}\n", "apiVersion",
               "not supported");
#undef V2
}

/* mpi-operator's Workers start sshd (command, or args without a command)
 * for the launcher's ssh: kiln-mpi-agent takes its place, so the Worker
 * waits instead, said in a note, and the readinessProbe on sshd's port is
 * noted; on any other container a readinessProbe is still refused. */
static void test_sshd_worker(void)
{
    static const char *const shapes[] = {"command: [/usr/sbin/sshd], args: [-De]",
                                         "args: [/usr/sbin/sshd, -De, -f, /h/.sshd_config]"};
    for (size_t k = 0; k < 2; k++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
                 "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: l, "
                 "image: i, command: [mpirun]}]}}}\n    Worker: {replicas: 2, template: {spec: "
                 "{containers: [{name: w, image: i, %s, readinessProbe: {tcpSocket: {port: "
                 "2222}}}]}}}\n",
                 shapes[k]);
        kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
        kiln_job *job = NULL;
        CHECK(kiln_job_from_kubeflow_notes(yaml, strlen(yaml), &job, &d, &notes) == KILN_OK);
        if (job) {
            const kiln_replica_config *wc = &job->training_input.worker_config;
            CHECK(wc->container_command.n == 2 && strcmp(wc->container_command.v[0], "sleep") == 0);
            CHECK(wc->container_args.n == 0);
        }
        bool said_sshd = false, said_probe = false;
        for (size_t i = 0; i < notes.n; i++) {
            said_sshd |= strstr(notes.v[i].description, "/usr/sbin/sshd is not run") != NULL;
            said_probe |= strstr(notes.v[i].field, "readinessProbe") &&
                          strstr(notes.v[i].description, "which kiln does not run");
        }
        CHECK_MSG(said_sshd && said_probe, "shape %zu: the sshd and its probe are noted", k);
        kiln_job_free(job);
        kiln_diag_free(&d);
        kiln_diag_free(&notes);
    }
    expect_bad("apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: l, "
               "image: i, command: [mpirun]}]}}}\n    Worker: {replicas: 2, template: {spec: "
               "{containers: [{name: w, image: i, command: [python3, serve.py], readinessProbe: "
               "{tcpSocket: {port: 2222}}}]}}}\n",
               "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].readinessProbe",
               "not supported by kiln");
}

/* processes and images both run (kiln-mpi-agent reaches a worker's
 * container through its monitor) */
static void test_at_create(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT, dd = KILN_DIAG_INIT;
    CHECK(kiln_catalog_default(&c, &d) == KILN_OK);
    kiln_job *job = kubeflow_example("mpijob-v2beta1.yaml");
    kiln_job *proc =
        decode("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
               "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: mpi, "
               "command: [mpirun, -np, '2', /bin/true]}]}}}\n    Worker: {replicas: 2, template: "
               "{spec: {containers: [{name: mpi}]}}}\n",
               &dd, NULL);
    CHECK(proc != NULL);
    if (c && job) {
        CHECK(kiln_catalog_check_honoured(c, job, &d) == KILN_OK);
        CHECK_STR(job->training_input.worker_config.image_uri, "localhost/kiln-examples/mpi:0.1");
    }
    if (c && proc) {
        kiln_diag_free(&d);
        CHECK(kiln_catalog_check_honoured(c, proc, &d) == KILN_OK);
        /* the v1 operator's worker: `sleep 365d` where it has no command */
        const kiln_strv *wc = &proc->training_input.worker_config.container_command;
        CHECK(wc->n == 2 && strcmp(wc->v[0], "sleep") == 0 && strcmp(wc->v[1], "365d") == 0);
    }
    /* without an image the launcher needs its command */
    expect_bad(
        "apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec:\n"
        "  mpiReplicaSpecs:\n    Launcher: {template: {spec: {containers: [{name: mpi}]}}}\n",
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command",
        "required without an image");
    kiln_job_free(job);
    kiln_job_free(proc);
    kiln_catalog_free(c);
    kiln_diag_free(&d);
    kiln_diag_free(&dd);
}

int main(void)
{
    test_v1();
    test_v2beta1();
    test_rules();
    test_sshd_worker();
    test_at_create();
    TEST_DONE();
}
