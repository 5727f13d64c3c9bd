/* src/exec/slurm/slurm.c - Slurm's commands as the one supervisor needs
 * them (slurm.h): running sbatch, squeue, scontrol and the rest with a
 * bound and a clean environment; the site's GPU type mapping
 * (--slurm-gpu-type); what a job may not ask of Slurm, said at create; the
 * partition's nodes for `kiln nodes`, and their drain.
 *
 * Jobs themselves are run by kiln's one supervisor (src/exec/supervisor):
 * Slurm places each gang as one allocation (alloc.h, place.c) and every
 * replica is a step in it. */
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

#include "exec/exec_int.h"    /* kiln__child_default_signals, kiln__exec_allowed_env */
#include "exec/slurm/alloc.h" /* kiln_slurm_last_line */
#include "exec/slurm/slurm.h"
#include "kiln/catalog.h"
#include "kiln/exec.h"
#include "kiln/store.h" /* kiln_now_ns */

/* ---------- running Slurm's commands ---------- */

/* What Slurm's clients get of kilnd's environment besides the replicas'
 * allow-list (kiln__exec_allowed_env): the user's identity and SLURM_CONF. */
static const char *const slurm_env[] = {"HOME", "USER", "LOGNAME", "SLURM_CONF", NULL};

int kiln_slurm_run(char *const argv[], char **out, int timeout_s)
{
    *out = NULL;
    /* the child's environment: what Slurm's clients need, nothing of kilnd's secrets */
    char *envp[32];
    size_t ne = 0;
    const char *const *lists[] = {kiln__exec_allowed_env, slurm_env};
    for (size_t l = 0; l < 2; l++)
        for (size_t i = 0; lists[l][i] && ne + 1 < sizeof envp / sizeof *envp; i++) {
            const char *v = getenv(lists[l][i]);
            if (v && asprintf(&envp[ne], "%s=%s", lists[l][i], v) >= 0) ne++;
        }
    envp[ne] = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) goto fail_env;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        goto fail_env;
    }
    if (pid == 0) {
        kiln__child_default_signals();
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(p[1], 1);
        dup2(p[1], 2);
        execvpe(argv[0], argv, envp);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    for (size_t i = 0; i < ne; i++)
        free(envp[i]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int64_t deadline = kiln_now_ns() + (int64_t)timeout_s * 1000000000LL;
    bool timed_out = false;
    for (;;) {
        int64_t left = (deadline - kiln_now_ns()) / 1000000;
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) <= 0) continue;
        if (buf && len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = buf ? read(p[0], buf + len, cap - len - 1) : -1;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(p[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (buf) buf[len] = '\0';
    *out = buf;
    if (timed_out) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
fail_env:
    for (size_t i = 0; i < ne; i++)
        free(envp[i]);
    return -1;
}

/* ---------- the site's mappings ---------- */

/* The GRES type of kiln accelerator type `t` (--slurm-gpu-type T=G), or NULL. */
static const char *gres_type(const kiln_slurm_cfg *sc, const char *t)
{
    size_t n = t ? strlen(t) : 0;
    for (size_t i = 0; n && i < sc->gpu_type_n; i++)
        if (strncmp(sc->gpu_types[i], t, n) == 0 && sc->gpu_types[i][n] == '=')
            return sc->gpu_types[i] + n + 1;
    return NULL;
}

/* The kiln accelerator type of GRES type `g` (the map read backwards), or NULL. */
static const char *kiln_type_of(const kiln_slurm_cfg *sc, const char *g);

const char *kiln_slurm_gres_type(const kiln_slurm_cfg *sc, const char *t)
{
    return gres_type(sc, t);
}

const char *kiln_slurm_kiln_type(const kiln_slurm_cfg *sc, const char *g)
{
    return kiln_type_of(sc, g);
}

static const char *kiln_type_of(const kiln_slurm_cfg *sc, const char *g)
{
    for (size_t i = 0; g && *g && i < sc->gpu_type_n; i++) {
        const char *eq = strchr(sc->gpu_types[i], '=');
        if (eq && strcmp(eq + 1, g) == 0) {
            static _Thread_local char buf[128];
            snprintf(buf, sizeof buf, "%.*s", (int)(eq - sc->gpu_types[i]), sc->gpu_types[i]);
            return buf;
        }
    }
    return NULL;
}

/* "trainingInput.workerConfig.SUFFIX" for a role's config field. */
static void role_field(kiln_role r, const char *suffix, char *field, size_t flen)
{
    snprintf(field, flen, "trainingInput.%sConfig.%s", kiln_role_field(r), suffix);
}

bool kiln_slurm_check_job(const kiln_slurm_cfg *sc, const char *project, const kiln_job *job,
                          char *field, size_t flen, char *why, size_t whylen)
{
    const kiln_training_input *ti = &job->training_input;
    /* an MPIJob's launcher starts its ranks through kiln-mpi-agent on the
     * hosts of kiln's own placer; as Slurm steps they are not done yet, and
     * the supervisor would fail the job at its start (spawn.c) */
    if (ti->has_mpi_job) {
        snprintf(field, flen, "trainingInput.mpiJob");
        snprintf(why, whylen,
                 "an MPIJob does not run under --executor slurm yet (its ranks as Slurm steps "
                 "are not done): run it on a kilnd with its own placer (--executor local)");
        return false;
    }
    /* Slurm's job accounting measures the elastic workers' CPU and memory
     * (sstat); their GPUs' utilisation it does not gather here */
    const kiln_elastic_policy *ep = &ti->pytorch_job.elastic_policy;
    for (size_t m = 0;
         ti->has_pytorch_job && ti->pytorch_job.has_elastic_policy && m < ep->n_metrics; m++) {
        if (!ep->metrics[m].resource || strcmp(ep->metrics[m].resource, "nvidia.com/gpu") != 0)
            continue;
        snprintf(field, flen, "trainingInput.pytorchJob.elasticPolicy.metrics[%zu].resource", m);
        snprintf(why, whylen,
                 "nvidia.com/gpu: kilnd reads GPU utilisation through NVML on its own machine, "
                 "and the workers' GPUs are on Slurm's nodes; cpu and memory are measured by "
                 "Slurm's job accounting (sstat)");
        return false;
    }
    /* Slurm's nodes have names, not labels (the placement asks --nodelist) */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        for (size_t i = 0; rc && i < rc->node_selector.n; i++) {
            const char *k = rc->node_selector.keys[i];
            if (strcmp(k, "kubernetes.io/hostname") == 0 || strcmp(k, "kiln.dev/node") == 0)
                continue;
            char sfx[200];
            snprintf(sfx, sizeof sfx, "nodeSelector.%.150s", k);
            role_field((kiln_role)r, sfx, field, flen);
            snprintf(why, whylen,
                     "Slurm's nodes have no labels: only kubernetes.io/hostname or "
                     "kiln.dev/node (a node's name) can be asked of Slurm");
            return false;
        }
    }
    /* allowPrivilegeEscalation: false on a process: kiln-monitor sets
     * no_new_privs on what it starts, here srun, whose step slurmstepd
     * starts on the node without it (a container's podman sets it there) */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        if (!rc || !rc->has_security_context || !rc->security_context.no_new_privileges ||
            kiln_exec_image(job, (kiln_role)r) ||
            kiln_catalog_runtime_image(sc->catalog, job, (kiln_role)r))
            continue;
        role_field((kiln_role)r, "securityContext.noNewPrivileges", field, flen);
        snprintf(why, whylen,
                 "a process replica under Slurm runs as a step that slurmstepd starts on the "
                 "node, which kiln cannot start with no_new_privs; give an image (podman sets "
                 "it in the container), or leave allowPrivilegeEscalation out");
        return false;
    }
    /* container images run in podman on the node, a step of the
     * allocation: the runtime kilnd found (--container-runtime, else podman
     * on its PATH) is the one at the same path on every node */
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = kiln_catalog_plan(sc->catalog, job, plans);
    for (size_t p = 0; p < np; p++) {
        kiln_role r = plans[p].role;
        const kiln_replica_config *rc = kiln_job_role_config(job, r);
        /* its own imageUri or the master's, else the catalog's image for
         * the job's runtimeVersion (as the supervisor runs it) */
        const char *image = kiln_exec_image(job, r);
        if (!image) image = kiln_catalog_runtime_image(sc->catalog, job, r);
        if (!image) continue;
        const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
        if (rc && rc->image_uri && *rc->image_uri)
            role_field(r, "imageUri", field, flen);
        else if (mc && mc->image_uri && *mc->image_uri) /* the master's, inherited */
            role_field(KILN_ROLE_MASTER, "imageUri", field, flen);
        else
            snprintf(field, flen, "trainingInput.runtimeVersion");
        long uid = -1, gid = -1;
        char uwhy[16];
        if (!sc->exec->container_runtime) {
            snprintf(why, whylen,
                     "container images (%s) need podman on the Slurm nodes, and kilnd found none "
                     "on its PATH (give --container-runtime PATH, the same path on every node)",
                     image);
            return false;
        }
        /* Slurm lets only an allocation's owner start steps in it (srun as
         * root into the user's allocation: "Access/permission denied"), so
         * the step's podman would run as the user */
        if (project &&
            kiln_users_job(sc->users, project, job->training_input.service_account, &uid, &gid,
                           uwhy, sizeof uwhy) == KILN_OK &&
            uid >= 0) {
            snprintf(why, whylen,
                     "project %s's jobs run as its own user under Slurm (sbatch --uid), and only "
                     "an allocation's owner may start steps in it, so podman would run as that "
                     "user: rootless podman, which kiln does not set up; run the image's program "
                     "as a containerCommand, or the project without a user",
                     project);
            return false;
        }
    }
    for (size_t p = 0; p < np; p++) {
        const char *t = plans[p].accelerator_type;
        if (!t || plans[p].accelerators_per_replica <= 0) continue;
        const kiln_accelerator_type *a = kiln_catalog_accelerator(sc->catalog, t);
        if (a && a->is_tpu) {
            role_field(plans[p].role, "acceleratorConfig.type", field, flen);
            snprintf(why, whylen, "the %s replicas ask for %s; the Slurm executor runs GPUs only",
                     kiln_role_name(plans[p].role), t);
            return false;
        }
        /* untyped GRES (no --slurm-gpu-type): any GPU type is "gpu"; GPUs by
         * count alone (nvidia.com/gpu) are untyped GRES too (gres_type has
         * no mapping for them: --gpus-per-task=N) */
        if (!sc->gpu_type_n || gres_type(sc, t) || strcmp(t, KILN_ACCEL_ANY_GPU) == 0) continue;
        char known[400] = "";
        size_t kl = 0;
        for (size_t i = 0; i < sc->gpu_type_n && kl + 2 < sizeof known; i++)
            kl += (size_t)snprintf(known + kl, sizeof known - kl, "%s%s", i ? ", " : "",
                                   sc->gpu_types[i]);
        role_field(plans[p].role, "acceleratorConfig.type", field, flen);
        snprintf(why, whylen,
                 "%s has no GPU type on this Slurm cluster (kilnd --slurm-gpu-type maps %s)", t,
                 known);
        return false;
    }
    return true;
}

/* ---------- nodes (sinfo --json) ---------- */

/* "gpu:2", "gpu:t4:2", "gpu:t4:2(S:0)", "gpu:1(IDX:0)": the count, the type into `type`. */
static int gres_gpus(const char *g, char *type, size_t tlen)
{
    int total = 0;
    if (type && tlen) type[0] = '\0';
    while (g && *g) {
        const char *end = strchr(g, ',');
        size_t n = end ? (size_t)(end - g) : strlen(g);
        char item[128];
        snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item ? n : sizeof item - 1), g);
        char *paren = strchr(item, '(');
        if (paren) *paren = '\0';
        if (strncmp(item, "gpu", 3) == 0 && (item[3] == ':' || item[3] == '\0')) {
            char *last = strrchr(item, ':');
            char *first = strchr(item, ':');
            if (last && first && last != first && type && tlen)
                snprintf(type, tlen, "%.*s", (int)(last - first - 1), first + 1);
            total += last ? atoi(last + 1) : 1;
        }
        g = end ? end + 1 : NULL;
    }
    return total;
}

/* sinfo --json's nodes of our partition (new reference), or NULL with why. */
static json_t *sinfo_nodes(const kiln_slurm_cfg *sc, char *why, size_t whylen)
{
    char *out = NULL;
    int rc = kiln_slurm_run((char *[]){"sinfo", "--json", NULL}, &out, 20);
    json_t *doc = rc == 0 && out ? json_loads(out, 0, NULL) : NULL;
    if (!doc) {
        char l[300];
        kiln_slurm_last_line(out, l, sizeof l);
        snprintf(why, whylen, "sinfo --json failed (%s)", l[0] ? l : "no output");
        free(out);
        return NULL;
    }
    free(out);
    json_t *all = json_object_get(doc, "nodes"), *mine = json_array(), *n, *p;
    size_t i, k;
    json_array_foreach(all, i, n)
    {
        json_array_foreach(json_object_get(n, "partitions"), k, p)
        {
            if (json_is_string(p) && strcmp(json_string_value(p), sc->partition) == 0) {
                json_array_append(mine, n);
                break;
            }
        }
    }
    json_decref(doc);
    return mine;
}

static json_t *node_json(const kiln_slurm_cfg *sc, json_t *n)
{
    const char *name = json_string_value(json_object_get(n, "name"));
    const char *addr = json_string_value(json_object_get(n, "address"));
    const char *state = json_string_value(json_object_get(n, "state"));
    const char *reason = json_string_value(json_object_get(n, "reason"));
    char type[64];
    int gpus = gres_gpus(json_string_value(json_object_get(n, "gres")), type, sizeof type);
    int used = gres_gpus(json_string_value(json_object_get(n, "gres_used")), NULL, 0);
    json_int_t cpus = json_integer_value(json_object_get(n, "cpus"));
    json_int_t acpus = json_integer_value(json_object_get(n, "alloc_cpus"));
    double mem = (double)json_integer_value(json_object_get(n, "real_memory")) / 1024.0;
    double amem = (double)json_integer_value(json_object_get(n, "alloc_memory")) / 1024.0;
    /* a typed GRES shows as kiln's accelerator type where the site maps it */
    const char *kt = kiln_type_of(sc, type);
    const char *gname = kt ? kt : type[0] ? type : "gpu";
    bool drained = false;
    json_t *f;
    size_t i;
    json_array_foreach(json_object_get(n, "state_flags"), i, f)
    {
        const char *s = json_string_value(f);
        drained |= s && (strcmp(s, "DRAIN") == 0 || strcmp(s, "DRAINING") == 0 ||
                         strcmp(s, "DRAINED") == 0);
    }
    drained |= state && strncmp(state, "drain", 5) == 0;
    /* "idle+drain", as sinfo's long states read */
    char full[160];
    size_t fl = (size_t)snprintf(full, sizeof full, "%s", state ? state : "");
    json_array_foreach(json_object_get(n, "state_flags"), i, f)
    {
        const char *s = json_string_value(f);
        for (size_t c = 0; s && fl + 2 < sizeof full && (c == 0 || s[c - 1]); c++) {
            if (c == 0) full[fl++] = '+';
            if (!s[c]) break;
            full[fl++] = (char)(s[c] >= 'A' && s[c] <= 'Z' ? s[c] - 'A' + 'a' : s[c]);
        }
        full[fl < sizeof full ? fl : sizeof full - 1] = '\0';
    }
    json_t *cap = json_pack("{s:I,s:f}", "cpu", cpus, "memoryGb", mem);
    json_t *alloc = json_pack("{s:I,s:f}", "cpu", cpus > acpus ? cpus - acpus : 0, "memoryGb",
                              mem > amem ? mem - amem : 0.0);
    json_t *devs = json_array();
    if (gpus > 0) {
        json_object_set_new(cap, gname, json_integer(gpus));
        json_object_set_new(alloc, gname, json_integer(gpus > used ? gpus - used : 0));
    }
    for (int g = 0; g < gpus; g++)
        json_array_append_new(devs, json_pack("{s:i,s:s,s:b,s:b}", "index", g, "type", gname,
                                              "simulated", false, "assigned", g < used));
    json_t *labels = json_object();
    json_t *parts = json_object_get(n, "partitions");
    json_array_foreach(parts, i, f) if (json_is_string(f))
        json_object_set_new(labels, "slurm.partition", json_string(json_string_value(f)));
    return json_pack("{s:s,s:s,s:I,s:f,s:b,s:b,s:b,s:o,s:o,s:o,s:o,s:s,s:s,s:s}", "name",
                     name ? name : "", "address", addr ? addr : "", "cpus", cpus, "memoryGb", mem,
                     "hardResources", true, "cordoned", drained, "simulatedAccelerators", false,
                     "labels", labels, "capacity", cap, "allocatable", alloc, "devices", devs,
                     "executor", "slurm", "slurmState", full, "slurmReason", reason ? reason : "");
}

json_t *kiln_slurm_nodes(const kiln_slurm_cfg *sc, const char *only, char *why, size_t whylen)
{
    json_t *mine = sinfo_nodes(sc, why, whylen), *n, *arr = json_array();
    size_t i;
    if (!mine) {
        json_decref(arr);
        return NULL;
    }
    json_array_foreach(mine, i, n)
    {
        const char *name = json_string_value(json_object_get(n, "name"));
        if (only && (!name || strcmp(name, only) != 0)) continue;
        json_array_append_new(arr, node_json(sc, n));
    }
    json_decref(mine);
    return arr;
}

kiln_err kiln_slurm_drain(const kiln_slurm_cfg *sc, const char *node, bool drain, char *why,
                          size_t whylen)
{
    char nn[160], *out = NULL;
    snprintf(nn, sizeof nn, "nodename=%s", node);
    char *argv[] = {"scontrol",
                    "update",
                    nn,
                    drain ? "state=drain" : "state=resume",
                    drain ? "reason=kiln nodes drain" : NULL,
                    NULL};
    int rc = kiln_slurm_run(argv, &out, 20);
    if (rc != 0) {
        char l[300];
        kiln_slurm_last_line(out, l, sizeof l);
        snprintf(why, whylen, "scontrol update %s failed: %s", nn, l[0] ? l : "no output");
        free(out);
        return KILN_EIO;
    }
    free(out);
    return KILN_OK;
}
