/* src/spec/mpijob.c - Kubeflow MPIJob -> kiln_job, in both APIs:
 *   kubeflow.org/v1       the training operator's (v1.9; mpi_types.go)
 *   kubeflow.org/v2beta1  mpi-operator's (v0.8; v2beta1/types.go)
 * What is MPIJob's own (the rest is kubeflow.c's):
 *   spec.mpiReplicaSpecs.Launcher -> kiln's master (exactly 1 replica)
 *   spec.mpiReplicaSpecs.Worker   -> workers (default 0)
 *   spec.slotsPerWorker           -> mpiJob.slotsPerWorker (default 1)
 *   v1: spec.mainContainer (the container that runs the program; default
 *       the first), spec.cleanPodPolicy (the older place of runPolicy's)
 *   v2beta1: runLauncherAsWorker, launcherCreationPolicy (AtStartup |
 *       WaitForWorkersReady), mpiImplementation (OpenMPI | Intel | MPICH),
 *       sshAuthMountPath (default /root/.ssh)
 * Defaults are the operators': restartPolicy Never on both (v2beta1's
 * Launcher OnFailure). kilnd runs an MPIJob's replicas as processes or in
 * their images, the launcher's mpirun starting the ranks through
 * kiln-mpi-agent
 * (src/exec/mpienv.c, docs/job-model.md). scaleTier is CUSTOM. */
#include <stdio.h>
#include <string.h>

#include "spec/kubeflow.h"

#define MPI_SPECS "spec.mpiReplicaSpecs"
#define V2        "kubeflow.org/v2beta1"

const char *const kiln__mpi_v1_spec_keys[] = {"slotsPerWorker", "cleanPodPolicy", "mpiReplicaSpecs",
                                              "mainContainer",  "runPolicy",      NULL};
const char *const kiln__mpi_v2_spec_keys[] = {
    "slotsPerWorker",   "runLauncherAsWorker",    "runPolicy",         "mpiReplicaSpecs",
    "sshAuthMountPath", "launcherCreationPolicy", "mpiImplementation", NULL};

enum { MPI_LAUNCHER, MPI_WORKER, MPI_NTYPES };

/* `key` of spec, one of `ok` (n), into *out; absent keeps *out */
static void one_of(kiln__kf *c, const json_t *spec, const char *key, const char *const *ok,
                   size_t n, const char *list, char **out)
{
    const json_t *v = kiln__kf_get(spec, key);
    const char *s = kiln__kf_scalar(v);
    if (!kiln__kf_present(v)) return;
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, ok[i]) == 0) {
            kiln__kf_nomem(c, kiln_set_str(out, s));
            return;
        }
    char p[KILN__KF_PATH];
    snprintf(p, sizeof p, "spec.%s", key);
    kiln__kf_bad(c, p, "'%.32s' is not one of %s", s ? s : "value", list);
}

static void map_v2_fields(kiln__kf *c, const json_t *spec, kiln_mpi_job *m)
{
    static const char *const impls[] = {"OpenMPI", "Intel", "MPICH"};
    static const char *const policies[] = {"AtStartup", "WaitForWorkersReady"};
    kiln__kf_nomem(c, kiln_set_str(&m->implementation, "OpenMPI"));
    kiln__kf_nomem(c, kiln_set_str(&m->launcher_creation_policy, "AtStartup"));
    one_of(c, spec, "mpiImplementation", impls, 3, "OpenMPI, Intel, MPICH", &m->implementation);
    one_of(c, spec, "launcherCreationPolicy", policies, 2, "AtStartup, WaitForWorkersReady",
           &m->launcher_creation_policy);
    kiln__kf_opt_bool(c, spec, "runLauncherAsWorker", "spec.runLauncherAsWorker",
                      &m->run_launcher_as_worker);
    const json_t *v = kiln__kf_get(spec, "sshAuthMountPath");
    const char *s = kiln__kf_scalar(v);
    if (kiln__kf_present(v) && (!s || s[0] != '/'))
        kiln__kf_bad(c, "spec.sshAuthMountPath", "must be an absolute path in the container");
    kiln__kf_nomem(c, kiln_set_str(&m->ssh_auth_mount_path, s && *s ? s : "/root/.ssh"));
}

/* The operator's default restart policy where the file gives none. */
static void default_restart(kiln__kf *c, kiln_training_input *ti, kiln_role r, const char *p)
{
    kiln_role_fields f = kiln_job_role_fields(ti, r);
    if (*f.has_config && f.config->restart_policy == NULL)
        kiln__kf_nomem(c, kiln_set_str(&f.config->restart_policy, p));
}

static void map_replica_specs(kiln__kf *c, const json_t *spec, kiln_training_input *ti, bool v2)
{
    static const char *const names[MPI_NTYPES] = {"Launcher", "Worker"};
    const json_t *specs = kiln__kf_get(spec, "mpiReplicaSpecs");
    const json_t *found[MPI_NTYPES] = {0};
    if (!json_is_object(specs) || json_object_size(specs) == 0) {
        kiln__kf_bad(c, MPI_SPECS, "required: the replica specs (Launcher, Worker)");
        return;
    }
    kiln__kf_find_specs(c, specs, MPI_SPECS, "MPIJob", names, MPI_NTYPES, found);
    kiln__kf_nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    if (!found[MPI_LAUNCHER]) {
        kiln__kf_bad(c, MPI_SPECS ".Launcher", "required: the launcher runs mpirun");
        return;
    }
    /* kiln__kf_replicas says "exactly one Master": the Launcher is kiln's master */
    const json_t *lr = kiln__kf_get(found[MPI_LAUNCHER], "replicas");
    int64_t n = 1;
    if (kiln__kf_present(lr) && (!kiln__kf_get_int(lr, &n) || n != 1))
        kiln__kf_bad(c, MPI_SPECS ".Launcher.replicas", "an MPIJob has exactly one Launcher");
    kiln__kf_fill_role(c, found[MPI_LAUNCHER], MPI_SPECS ".Launcher", ti, KILN_ROLE_MASTER, 1);
    const kiln_replica_config *lc = ti->has_master_config ? &ti->master_config : NULL;
    if (lc && (!lc->image_uri || !*lc->image_uri) && lc->container_command.n == 0 &&
        lc->container_args.n == 0)
        kiln__kf_bad(c, MPI_SPECS ".Launcher.template.spec.containers[0].command",
                     "required without an image: the launcher's program (mpirun ...)");
    if (found[MPI_WORKER]) {
        /* the operators default Worker replicas to 0; kiln__kf_replicas to 1 */
        const json_t *wr = kiln__kf_get(found[MPI_WORKER], "replicas");
        int64_t w = kiln__kf_present(wr)
                        ? kiln__kf_replicas(c, found[MPI_WORKER], MPI_SPECS ".Worker", false)
                        : 0;
        if (w > 0)
            kiln__kf_fill_role(c, found[MPI_WORKER], MPI_SPECS ".Worker", ti, KILN_ROLE_WORKER, w);
        /* a Worker without a command only hosts the ranks the launcher
         * starts: v1's operator makes it `sleep 365d`; kiln does so for
         * v2beta1's too, whose ssh (and the workers' sshd) kiln-mpi-agent
         * stands in for */
        kiln_replica_config *wc = ti->has_worker_config ? &ti->worker_config : NULL;
        /* mpi-operator's examples start the Workers' sshd (on a port of the
         * image's sshd_config, with the key pair the operator mounts at
         * sshAuthMountPath) only for the launcher's ssh, whose place
         * kiln-mpi-agent takes: kiln runs no sshd (two workers on a node's
         * network would fight over its port), and says so */
        const char *prog = wc && wc->container_command.n ? wc->container_command.v[0]
                           : wc && wc->container_args.n  ? wc->container_args.v[0]
                                                         : NULL;
        const char *base = prog && strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
        if (w > 0 && base && strcmp(base, "sshd") == 0) {
            kiln__kf_note(c, MPI_SPECS ".Worker.template.spec.containers[0].command",
                          "%s is not run: kiln-mpi-agent takes ssh's place (the launcher's "
                          "mpirun reaches the workers through kiln), and the Workers wait with "
                          "`sleep 365d` as the v1 operator's do",
                          prog);
            kiln_strv_clear(&wc->container_command);
            kiln_strv_clear(&wc->container_args);
        }
        if (w > 0 && wc && wc->container_command.n == 0 && wc->container_args.n == 0) {
            kiln__kf_nomem(c, kiln_strv_push(&wc->container_command, "sleep"));
            kiln__kf_nomem(c, kiln_strv_push(&wc->container_command, "365d"));
        }
    }
    default_restart(c, ti, KILN_ROLE_MASTER, v2 ? "OnFailure" : "Never");
    default_restart(c, ti, KILN_ROLE_WORKER, "Never");
}

kiln_err kiln__mpijob_decode(kiln__kf *c, const json_t *root, kiln_job *job)
{
    const char *api = kiln__kf_scalar(kiln__kf_get(root, "apiVersion"));
    bool v2 = api && strcmp(api, V2) == 0;
    kiln_training_input *ti = &job->training_input;
    kiln_mpi_job *m = &ti->mpi_job;
    const json_t *spec = kiln__kf_get(root, "spec");
    c->kind = "MPIJob";
    c->port = "mpi-port";
    c->container_required = false;
    /* an MPIJob's container without an image runs its command as a process
     * on the node (with one, in the image; docs/job-model.md) */
    c->image_optional = true;
    c->sshd_probe_ok = true; /* a Worker's sshd is not run (below) */
    /* v1: mainContainer names the program's container; v2beta1: the first */
    const char *main = v2 ? NULL : kiln__kf_scalar(kiln__kf_get(spec, "mainContainer"));
    c->container = main && *main ? main : "mpi";
    kiln__kf_metadata(c, root, job);
    job->has_training_input = true;
    if (!json_is_object(spec)) {
        kiln__kf_bad(c, "spec", "required: the MPIJob spec with mpiReplicaSpecs");
        return KILN_EINVAL;
    }
    ti->has_mpi_job = true;
    kiln__kf_nomem(c, kiln_set_str(&m->api_version, v2 ? V2 : KILN__KF_API_VERSION));
    if (main && *main) kiln__kf_nomem(c, kiln_set_str(&m->main_container, main));
    kiln__kf_check_keys(c, spec, "spec", v2 ? kiln__mpi_v2_spec_keys : kiln__mpi_v1_spec_keys);
    m->slots_per_worker = 1;
    bool has = false;
    int64_t slots = 1;
    if (kiln__kf_opt_count(c, spec, "slotsPerWorker", "spec.slotsPerWorker", &has, &slots) && has) {
        if (slots < 1)
            kiln__kf_bad(c, "spec.slotsPerWorker", "must be at least 1");
        else
            m->slots_per_worker = slots;
    }
    if (v2) map_v2_fields(c, spec, m);
    map_replica_specs(c, spec, ti, v2);
    kiln__kf_run_policy(c, spec, ti);
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}
