/* src/exec/slurm/slurm.c - the Slurm executor: a kiln job is one Slurm job.
 *
 * Submit: a QUEUED job becomes a heterogeneous batch job (one component per
 * replica type: `#SBATCH hetjob` between them) whose script runs one
 * `srun --het-group=K` step per component. Every task of a step is one
 * replica: kiln-slurm-task (src/exec/slurm/task) learns its node's address,
 * meets the other replicas' addresses in the job's directory (which must be
 * on a file system the nodes share), builds the environment of facts §6 and
 * runs the program under kiln-monitor, which writes the replica's log lines
 * into the job's log as on one machine.
 *
 * Follow: `squeue --json` every POLL_MS (one call for every job): Slurm's
 * PENDING -> QUEUED, CONFIGURING -> PREPARING, RUNNING -> RUNNING, and the
 * final states with Slurm's state and reason in errorMessage. A job Slurm
 * forgot (past MinJobAge while kilnd was down) ends by the exit file its
 * batch script writes.
 *
 * Cancel: `scancel --signal=TERM` (the steps), `scancel` after the grace
 * period. maxRunningTime is Slurm's --time. The runtime record holds the
 * Slurm job id: a new kilnd follows the same Slurm job and submits nothing
 * twice.
 *
 * Tuning jobs: each trial is a Slurm job of its own (its files under
 * DIR/slurm/trial-N), maxParallelTrials at once; what the trials are, what
 * they reported, early stopping and the job's end are decided by
 * src/exec/trials (trialbook.h) over src/tune, as for the local supervisor:
 * this file only submits, follows and stops the trials' Slurm jobs. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "exec/exec_int.h" /* kiln__child_default_signals, kiln__exec_allowed_env */
#include "exec/slurm/accounts.h"
#include "exec/slurm/alloc.h" /* kiln_slurm_last_line */
#include "exec/slurm/elastic.h"
#include "exec/slurm/slurm.h"
#include "exec/supervisor/trainmetrics.h" /* kiln-train's reports: a leaf parser */
#include "exec/trials/trialbook.h"
#include "kiln/catalog.h"
#include "kiln/exec.h"
#include "kiln/tune.h"
#include "util/atomic.h"

#define POLL_MS 500
/* After an sbatch, squeue is asked every FAST_POLL_MS for FAST_POLL_NS:
 * Slurm often starts a job on an idle cluster within 0.1-0.2 s of its
 * submit, and a 0.5 s poll alone made kiln's submit-to-RUNNING 4.6x that
 * of sbatch by hand (bench/slurm_latency.sh). The window ends on its own,
 * so a busy cluster sees the fast polls only for 2 s after each submit. */
#define FAST_POLL_MS 100
#define FAST_POLL_NS (2 * 1000000000LL)

extern char **environ;

/* `kiln nodes drain` (the API thread) -> the supervisor: nodes whose kiln
 * jobs must move. */
static pthread_mutex_t drain_mu = PTHREAD_MUTEX_INITIALIZER;
static char drain_pending[16][128];
static int drain_n;

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
static const char *gres_type(const kilnd *d, const char *t)
{
    size_t n = t ? strlen(t) : 0;
    for (size_t i = 0; n && i < d->slurm.gpu_type_n; i++)
        if (strncmp(d->slurm.gpu_types[i], t, n) == 0 && d->slurm.gpu_types[i][n] == '=')
            return d->slurm.gpu_types[i] + n + 1;
    return NULL;
}

/* The kiln accelerator type of GRES type `g` (the map read backwards), or NULL. */
static const char *kiln_type_of(const kilnd *d, const char *g);

const char *kiln_slurm_gres_type(const kilnd *d, const char *t)
{
    return gres_type(d, t);
}

const char *kiln_slurm_kiln_type(const kilnd *d, const char *g)
{
    return kiln_type_of(d, g);
}

static const char *kiln_type_of(const kilnd *d, const char *g)
{
    for (size_t i = 0; g && *g && i < d->slurm.gpu_type_n; i++) {
        const char *eq = strchr(d->slurm.gpu_types[i], '=');
        if (eq && strcmp(eq + 1, g) == 0) {
            static _Thread_local char buf[128];
            snprintf(buf, sizeof buf, "%.*s", (int)(eq - d->slurm.gpu_types[i]),
                     d->slurm.gpu_types[i]);
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

bool kiln_slurm_check_job(kilnd *d, const char *project, const kiln_job *job, char *field,
                          size_t flen, char *why, size_t whylen)
{
    const kiln_training_input *ti = &job->training_input;
    /* --slurm-launch batch (this file's supervisor) runs less than kiln's
     * own supervisor does over Slurm's allocations (steps) */
    bool batch = !d->slurm.steps;
    /* elastic PyTorchJobs: each worker a Slurm job of its own (el_*),
     * Worker 0 the rendezvous host */
    if (batch && ti->has_pytorch_job && ti->pytorch_job.has_elastic_policy &&
        !ti->pytorch_job.workers_only) {
        snprintf(field, flen, "trainingInput.pytorchJob.elasticPolicy");
        snprintf(why, whylen,
                 "an elastic PyTorchJob with a Master replica: under the Slurm executor each "
                 "elastic worker is a Slurm job of its own and Worker 0 hosts the rendezvous, so "
                 "the job must have Workers only (the Kubeflow form of elastic jobs)");
        return false;
    }
    /* under steps, Slurm's job accounting measures the workers' CPU and
     * memory (sstat); their GPUs' utilisation it does not gather here */
    const kiln_elastic_policy *ep = &ti->pytorch_job.elastic_policy;
    for (size_t m = 0;
         !batch && ti->has_pytorch_job && ti->pytorch_job.has_elastic_policy && m < ep->n_metrics;
         m++) {
        if (!ep->metrics[m].resource || strcmp(ep->metrics[m].resource, "nvidia.com/gpu") != 0)
            continue;
        snprintf(field, flen, "trainingInput.pytorchJob.elasticPolicy.metrics[%zu].resource", m);
        snprintf(why, whylen,
                 "nvidia.com/gpu: kilnd reads GPU utilisation through NVML on its own machine, "
                 "and the workers' GPUs are on Slurm's nodes; cpu and memory are measured by "
                 "Slurm's job accounting (sstat)");
        return false;
    }
    if (batch && ti->has_pytorch_job && ti->pytorch_job.has_elastic_policy &&
        ti->pytorch_job.elastic_policy.n_metrics > 0) {
        snprintf(field, flen, "trainingInput.pytorchJob.elasticPolicy.metrics");
        snprintf(why, whylen,
                 "autoscaling measures the workers' processes on kilnd's own machine, which "
                 "the Slurm executor's workers are not on: leave metrics out (the job then "
                 "runs between minReplicas and maxReplicas as Slurm grants workers)");
        return false;
    }
    /* Slurm's nodes have names, not labels (the placement asks --nodelist) */
    for (int r = 0; !batch && r < KILN_ROLE_COUNT; r++) {
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
    if (batch && ti->package_uris.n) {
        snprintf(field, flen, "trainingInput.packageUris");
        snprintf(why, whylen,
                 "packageUris are not staged by the Slurm executor yet: use a program on the "
                 "nodes (containerCommand or a kiln.* module)");
        return false;
    }
    if (batch && ti->runtime_version && *ti->runtime_version) {
        snprintf(field, flen, "trainingInput.runtimeVersion");
        snprintf(why, whylen,
                 "'%.32s' runs in the catalog's image for it, which is not run by the Slurm "
                 "executor yet: leave runtimeVersion out (the job then runs as a process) or "
                 "give its image as imageUri",
                 ti->runtime_version);
        return false;
    }
    /* container images run in podman on the node (container_argv): the
     * runtime kilnd found (--container-runtime, else podman on its PATH) is
     * the one at the same path on every node; as the project's user (sbatch
     * --uid) podman would be rootless, which kiln does not set up */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        if (!rc || !rc->image_uri || !*rc->image_uri) continue;
        role_field((kiln_role)r, "imageUri", field, flen);
        long uid = -1, gid = -1;
        char uwhy[16];
        if (!d->exec.container_runtime) {
            snprintf(why, whylen,
                     "container images (%s) need podman on the Slurm nodes, and kilnd found none "
                     "on its PATH (give --container-runtime PATH, the same path on every node)",
                     rc->image_uri);
            return false;
        }
        /* Slurm lets only an allocation's owner start steps in it (srun as
         * root into the user's allocation: "Access/permission denied"), so
         * the step's podman would run as the user */
        if (project && kilnd_project_user(d, project, &uid, &gid, uwhy, sizeof uwhy) == KILN_OK &&
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
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = kiln_catalog_plan(d->catalog, job, plans);
    for (size_t p = 0; p < np; p++) {
        const char *t = plans[p].accelerator_type;
        if (!t || plans[p].accelerators_per_replica <= 0) continue;
        const kiln_accelerator_type *a = kiln_catalog_accelerator(d->catalog, t);
        if (a && a->is_tpu) {
            role_field(plans[p].role, "acceleratorConfig.type", field, flen);
            snprintf(why, whylen, "the %s replicas ask for %s; the Slurm executor runs GPUs only",
                     kiln_role_name(plans[p].role), t);
            return false;
        }
        /* untyped GRES (no --slurm-gpu-type): any GPU type is "gpu"; GPUs by
         * count alone (nvidia.com/gpu) are untyped GRES too (gres_type has
         * no mapping for them: --gpus-per-task=N) */
        if (!d->slurm.gpu_type_n || gres_type(d, t) || strcmp(t, KILN_ACCEL_ANY_GPU) == 0) continue;
        char known[400] = "";
        size_t kl = 0;
        for (size_t i = 0; i < d->slurm.gpu_type_n && kl + 2 < sizeof known; i++)
            kl += (size_t)snprintf(known + kl, sizeof known - kl, "%s%s", i ? ", " : "",
                                   d->slurm.gpu_types[i]);
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
static json_t *sinfo_nodes(kilnd *d, char *why, size_t whylen)
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
            if (json_is_string(p) && strcmp(json_string_value(p), d->slurm.partition) == 0) {
                json_array_append(mine, n);
                break;
            }
        }
    }
    json_decref(doc);
    return mine;
}

static json_t *node_json(const kilnd *d, json_t *n)
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
    const char *kt = kiln_type_of(d, type);
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

json_t *kiln_slurm_nodes(kilnd *d, const char *only, char *why, size_t whylen)
{
    json_t *mine = sinfo_nodes(d, why, whylen), *n, *arr = json_array();
    size_t i;
    if (!mine) {
        json_decref(arr);
        return NULL;
    }
    json_array_foreach(mine, i, n)
    {
        const char *name = json_string_value(json_object_get(n, "name"));
        if (only && (!name || strcmp(name, only) != 0)) continue;
        json_array_append_new(arr, node_json(d, n));
    }
    json_decref(mine);
    return arr;
}

kiln_err kiln_slurm_drain(kilnd *d, const char *node, bool drain, char *why, size_t whylen)
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
    if (drain) { /* the supervisor moves the node's kiln jobs (drains()) */
        pthread_mutex_lock(&drain_mu);
        if (drain_n < (int)(sizeof drain_pending / sizeof *drain_pending))
            snprintf(drain_pending[drain_n++], sizeof *drain_pending, "%s", node);
        pthread_mutex_unlock(&drain_mu);
        kiln_doorbell_ring(&d->wake);
    }
    return KILN_OK;
}

/* ---------- the jobs kilnd follows in Slurm ---------- */

typedef struct srep {
    kiln_role role;
    int index;
    char task[48];
    int port;
    long moff; /* a trial's: how far its monitor's .metrics file was read */
} srep;

typedef struct sjob {
    char *project, *job_id;
    long id; /* the Slurm job id (the heterogeneous job's leader) */
    char dir[PATH_MAX];
    srep *reps;
    size_t n;
    char sstate[32]; /* Slurm's state, last seen */
    bool term_sent, killed;
    bool nodes_known; /* the runtime record names every replica's node */
    int64_t kill_at_ns;
    int missing; /* polls in a row that did not show it */
    /* being stopped to be queued again (its node drained): why; kept in the
     * runtime record ("slurmRequeue") so that a new kilnd finishes the move */
    char *requeue;
    bool restart; /* the requeue is restartPolicy Always's restart, not a move */
    /* being stopped to fail: runPolicy.activeDeadlineSeconds passed (the
     * message; a new kilnd decides it again from the job's start time) */
    char *deadline;
    long position; /* while PENDING: its place in Slurm's queue (1 = next), or 0 */
    /* a tuning job's trial (study != NULL): one Slurm job per trial run,
     * its files under DIR/slurm/trial-N, its own copy of the spec (jobDir/N) */
    struct sstudy *study;
    int trial;
    kiln_job *tjob;
    char *stop_why;           /* being stopped early (the study's rule): why */
    int64_t start_ns;         /* when Slurm ran it (activeDeadlineSeconds counts per trial) */
    int failures;             /* the trial's runs its restart policy started again so far */
    char sdir[PATH_MAX + 48]; /* DIR/slurm, or DIR/slurm/trial-N */
    /* an elastic job's worker (el != NULL): one Slurm job per worker, its
     * one replica PyTorch's Worker `worker`, its files under DIR/slurm/worker-K */
    struct sgroup *el;
    int worker;
    struct sjob *next;
} sjob;

/* A tuning job while it runs: its study (decided in src/exec/trials and
 * src/tune, as on one machine); the executor only submits and follows the
 * trials' Slurm jobs. */
typedef struct sstudy {
    char *project, *job_id;
    kiln_job *job; /* the spec the study points into */
    kiln_study *st;
    int running; /* trials with a Slurm job */
    bool cancelling;
    struct sstudy *next;
} sstudy;

typedef struct ssup {
    kilnd *d;
    sjob *jobs;
    sjob *fresh; /* submitted during this tick: joins `jobs` after the follow loop */
    bool *port_used;
    int port_next; /* where port_take looks first */
    /* the partition's nodes (sinfo --json) for never-fits, read once per
     * tick however many jobs it submits (nodes_read: asked, NULL when sinfo
     * failed, so a stuck slurmctld costs one timeout per tick, not one per job) */
    json_t *nodes;
    bool nodes_read;
    sstudy *studies;
    struct sgroup *groups; /* elastic jobs */
    int64_t fast_until_ns; /* poll squeue every FAST_POLL_MS until then */
} ssup;

/* A port of --port-range no running kiln job holds. The search goes on
 * from the last port handed out rather than from the lowest, as the local
 * executor's does: a port given back a moment ago may still be held on its
 * node (a listener's TIME_WAIT connections), and a PyTorch master's
 * TCPStore bind on it then fails. */
static int port_take(ssup *s)
{
    int n = s->d->port_count;
    for (int k = 0; k < n; k++) {
        int i = (s->port_next + k) % n;
        if (s->port_used[i]) continue;
        s->port_used[i] = true;
        s->port_next = (i + 1) % n;
        return s->d->port_base + i;
    }
    return -1;
}

/* Takes `port` when it is free; false when held. */
static bool port_claim(ssup *s, int port)
{
    int p = port - s->d->port_base;
    if (p < 0 || p >= s->d->port_count || s->port_used[p]) return false;
    s->port_used[p] = true;
    return true;
}

static void port_mark(ssup *s, int port)
{
    int p = port - s->d->port_base;
    if (p >= 0 && p < s->d->port_count) s->port_used[p] = true;
}

/* Gives back j's ports now (a resubmission takes new ones). */
static void ports_release(ssup *s, sjob *j)
{
    for (size_t i = 0; i < j->n; i++) {
        int p = j->reps[i].port - s->d->port_base;
        if (p >= 0 && p < s->d->port_count) s->port_used[p] = false;
    }
    j->n = 0;
}

static void sjob_free(ssup *s, sjob *j)
{
    if (!j) return;
    ports_release(s, j);
    free(j->project);
    free(j->job_id);
    free(j->reps);
    free(j->requeue);
    free(j->deadline);
    free(j->stop_why);
    kiln_job_free(j->tjob);
    free(j);
}

/* j's job directory and where its Slurm files go (a trial's their own). */
static void sjob_dirs(ssup *s, sjob *j)
{
    kilnd_job_dir(s->d, j->project, j->job_id, j->dir, sizeof j->dir);
    if (j->study)
        snprintf(j->sdir, sizeof j->sdir, "%s/slurm/trial-%d", j->dir, j->trial);
    else if (j->el)
        snprintf(j->sdir, sizeof j->sdir, "%s/slurm/worker-%d", j->dir, j->worker);
    else
        snprintf(j->sdir, sizeof j->sdir, "%s/slurm", j->dir);
}

/* The Slurm node replica i runs on, once its task has said (kiln-slurm-task
 * writes "ADDR NODE" to RUNDIR/hosts/TASK); "" before. */
static void rep_node(const sjob *j, size_t i, char *node, size_t len)
{
    char path[PATH_MAX + 160], addr[256];
    node[0] = '\0';
    snprintf(path, sizeof path, "%s/%ld/hosts/%s", j->sdir, j->id, j->reps[i].task);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char nb[128];
    if (fscanf(f, "%255s %127s", addr, nb) == 2) snprintf(node, len, "%s", nb);
    fclose(f);
}

/* The deterministic Slurm job name of a kiln job's attempt (ATTEMPT = its
 * restarts so far): before every sbatch kilnd looks for it in squeue, so a
 * kilnd that died between sbatch and its runtime record submits nothing twice. */
static void job_name(const char *project, const char *id, int attempt, char *buf, size_t len)
{
    snprintf(buf, len, "kiln.%s.%s.%d", project, id, attempt);
}

static kiln_role role_of(const char *name)
{
    for (int q = 0; q < KILN_ROLE_COUNT; q++)
        if (name && strcmp(kiln_role_name((kiln_role)q), name) == 0) return (kiln_role)q;
    return KILN_ROLE_MASTER;
}

/* j's replicas as spec.json or the runtime record lists them ("task",
 * "role", "index", "port" each), their ports marked as held. false on
 * ENOMEM. */
static bool reps_read(ssup *s, sjob *j, json_t *reps)
{
    size_t k, n = json_array_size(reps);
    json_t *rp;
    if (!(j->reps = calloc(n ? n : 1, sizeof *j->reps))) return false;
    json_array_foreach(reps, k, rp)
    {
        srep *x = &j->reps[j->n++];
        const char *task = json_string_value(json_object_get(rp, "task"));
        snprintf(x->task, sizeof x->task, "%s", task ? task : "");
        x->index = (int)json_integer_value(json_object_get(rp, "index"));
        x->port = (int)json_integer_value(json_object_get(rp, "port"));
        x->role = role_of(json_string_value(json_object_get(rp, "role")));
        x->moff = (long)json_integer_value(json_object_get(rp, "metricsOffset"));
        port_mark(s, x->port);
    }
    return true;
}

/* j's replicas for the runtime record (appended to `reps`). */
static void reps_json(const sjob *j, json_t *reps)
{
    for (size_t i = 0; reps && i < j->n; i++) {
        /* the node Slurm gave it, once its task has said (kiln-slurm-task) */
        char node[128];
        rep_node(j, i, node, sizeof node);
        json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:I}", "task", j->reps[i].task, "role",
                              kiln_role_name(j->reps[i].role), "index", j->reps[i].index, "port",
                              j->reps[i].port, "slurmJobId", (json_int_t)j->id);
        if (o && node[0]) json_object_set_new(o, "node", json_string(node));
        if (o && j->study) json_object_set_new(o, "trial", json_integer(j->trial));
        if (o && j->reps[i].moff > 0)
            json_object_set_new(o, "metricsOffset", json_integer((json_int_t)j->reps[i].moff));
        if (o) json_array_append_new(reps, o);
    }
}

static void study_save(ssup *s, sstudy *st);
static void el_save(ssup *s, struct sgroup *g);

static void save_runtime(ssup *s, sjob *j, int restarts, int failures)
{
    if (j->el) { /* an elastic worker: the job's record, with every worker's Slurm job */
        el_save(s, j->el);
        return;
    }
    if (j->study) { /* a trial: the study's record, with every trial's Slurm job */
        study_save(s, j->study);
        return;
    }
    json_t *reps = json_array();
    reps_json(j, reps);
    json_t *rt = json_pack("{s:s,s:I,s:s,s:s,s:o}", "executor", "slurm", "slurmJobId",
                           (json_int_t)j->id, "slurmPartition", s->d->slurm.partition, "slurmState",
                           j->sstate, "replicas", reps);
    if (rt && j->requeue) json_object_set_new(rt, "slurmRequeue", json_string(j->requeue));
    if (rt && j->requeue && j->restart) json_object_set_new(rt, "slurmRestart", json_true());
    if (rt && j->position > 0)
        json_object_set_new(rt, "slurmPosition", json_integer((json_int_t)j->position));
    char *txt = rt ? json_dumps(rt, JSON_COMPACT) : NULL;
    if (txt)
        kiln_store_job_set_runtime(s->d->store, j->project, j->job_id, restarts, failures, txt);
    free(txt);
    json_decref(rt);
}

/* A QUEUED job that will never be submitted: FAILED with `msg`. */
static void refuse(ssup *s, kiln_job_record *r, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* QUEUED, or RUNNING when a restart cannot be submitted */
    if (kiln_store_job_transition(s->d->store, r->project, r->job->job_id,
                                  KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING) |
                                      KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_FAILED, msg, kiln_now_ns(), NULL) != KILN_OK)
        return;
    s->d->failures_total[KILND_FAIL_UNSCHEDULABLE]++;
    kilnd_event(s->d, r->project, r->job->job_id, "ERROR", "Job FAILED: %s", msg);
}

/* Single-quotes `v` for the batch script. */
static void sh_quote(FILE *f, const char *v)
{
    fputc('\'', f);
    for (; *v; v++) {
        if (*v == '\'')
            fputs("'\\''", f);
        else
            fputc(*v, f);
    }
    fputc('\'', f);
}

/* Never-fits: a replica that no node of the partition could ever hold.
 * Returns false with the sentence in `why`. */
static bool fits(ssup *s, const kiln_replica_plan *plans, size_t np, char *why, size_t whylen)
{
    char err[300];
    if (!s->nodes_read) s->nodes = sinfo_nodes(s->d, err, sizeof err);
    s->nodes_read = true;
    json_t *nodes = s->nodes, *n;
    if (!nodes) return true; /* Slurm itself will say (sbatch) */
    size_t i;
    int max_gpus = 0;
    json_int_t max_cpus = 0, max_mem = 0;
    char list[400] = "";
    size_t ll = 0;
    json_array_foreach(nodes, i, n)
    {
        int g = gres_gpus(json_string_value(json_object_get(n, "gres")), NULL, 0);
        json_int_t c = json_integer_value(json_object_get(n, "cpus"));
        if (g > max_gpus) max_gpus = g;
        if (c > max_cpus) max_cpus = c;
        json_int_t m = json_integer_value(json_object_get(n, "real_memory"));
        if (m > max_mem) max_mem = m;
        if (ll < sizeof list - 40)
            ll += (size_t)snprintf(list + ll, sizeof list - ll, "%s%s: %d GPU%s", ll ? ", " : "",
                                   json_string_value(json_object_get(n, "name")), g,
                                   g == 1 ? "" : "s");
    }
    size_t nn = json_array_size(nodes);
    if (nn == 0) {
        snprintf(why, whylen, "the Slurm partition %s has no nodes", s->d->slurm.partition);
        return false;
    }
    for (size_t p = 0; p < np; p++) {
        const char *t = plans[p].accelerator_type;
        if (s->d->slurm.machine_resources && plans[p].vcpus > max_cpus) {
            snprintf(why, whylen,
                     "the %s replicas ask for %d CPUs (%s); no node of Slurm partition %s has "
                     "more than %lld",
                     kiln_role_name(plans[p].role), plans[p].vcpus,
                     plans[p].machine_type ? plans[p].machine_type : "?", s->d->slurm.partition,
                     (long long)max_cpus);
            return false;
        }
        if (s->d->slurm.machine_resources && plans[p].memory_gb * 1024 > (double)max_mem) {
            snprintf(why, whylen,
                     "the %s replicas ask for %.1f GB of memory (%s); no node of Slurm partition "
                     "%s has more than %.1f GB",
                     kiln_role_name(plans[p].role), plans[p].memory_gb,
                     plans[p].machine_type ? plans[p].machine_type : "?", s->d->slurm.partition,
                     (double)max_mem / 1024.0);
            return false;
        }
        if (t && plans[p].accelerators_per_replica > max_gpus) {
            snprintf(why, whylen,
                     "the %s replicas ask for %lld %s each; no node of Slurm partition %s has "
                     "more than %d GPU%s (%s)",
                     kiln_role_name(plans[p].role), (long long)plans[p].accelerators_per_replica, t,
                     s->d->slurm.partition, max_gpus, max_gpus == 1 ? "" : "s", list);
            return false;
        }
    }
    return true;
}

/* Whether a QUEUED job can be handed to Slurm at all: what create refuses
 * (kiln_slurm_check_job, for a job queued by a kilnd that ran with another
 * executor), a plan in this catalog, and a partition that could ever hold
 * it. Its plans' count, or 0 after the job was refused (FAILED, saying why). */
static size_t runnable(ssup *s, kiln_job_record *rec, kiln_replica_plan plans[KILN_ROLE_COUNT])
{
    char field[128], why[1024] = "";
    if (!kiln_slurm_check_job(s->d, rec->project, rec->job, field, sizeof field, why, sizeof why)) {
        refuse(s, rec, "%s: %s", field, why);
        return 0;
    }
    size_t np = kiln_catalog_plan(s->d->catalog, rec->job, plans);
    if (np == 0) {
        refuse(s, rec, "the job has no replicas to run in this catalog");
        return 0;
    }
    if (!fits(s, plans, np, why, sizeof why)) {
        refuse(s, rec, "This job can never run on this cluster: %s", why);
        return 0;
    }
    return np;
}

/* The replicas' working directory: DIR/work, a trial's DIR/N (as on one
 * machine: its event files are read there). */
static void work_dir(const sjob *j, char *buf, size_t len)
{
    if (j->study)
        kiln_trials_dir(j->dir, j->trial, buf, len);
    else
        snprintf(buf, len, "%s/work", j->dir);
}

static size_t el_tasks(const sjob *j, kiln_exec_task *tasks, size_t *self);

/* The environment of replica `self`, with "@KILN_HOST_i@" where replica i's
 * host goes (kiln-slurm-task puts in the Slurm node's address). */
static kiln_err replica_env(ssup *s, sjob *j, const kiln_job *job, size_t self, int attempt,
                            kiln_strv *env)
{
    kiln_exec_task *tasks = calloc(j->n + 1, sizeof *tasks);
    char(*hosts)[40] = calloc(j->n, sizeof *hosts);
    kiln_err err = KILN_ENOMEM;
    size_t nt = j->n;
    if (!tasks || !hosts) goto out;
    for (size_t i = 0; i < j->n; i++) {
        snprintf(hosts[i], sizeof hosts[i], "@KILN_HOST_%zu@", i);
        tasks[i] = (kiln_exec_task){.role = j->reps[i].role,
                                    .index = j->reps[i].index,
                                    .host = hosts[i],
                                    .port = j->reps[i].port};
    }
    /* el_tasks renumbers `self` into the job's whole worker list: the
     * replica's own role is read from j->reps first (an elastic worker's
     * sjob holds that one replica only) */
    kiln_role role = j->reps[self].role;
    if (j->el) nt = el_tasks(j, tasks, &self);
    err = kiln_exec_replica_env(job, tasks, nt, self, NULL, 0, false, env);
    if (err != KILN_OK) goto out;
    char key[64], kv[96];
    kiln_exec_coll_key(j->project, j->job_id, (long)getpid(), attempt, key);
    snprintf(kv, sizeof kv, "KILN_COLL_KEY=%s", key);
    err = kiln_strv_push(env, kv);
    /* the user's env after kiln's, as on one machine (it was dropped here) */
    if (err == KILN_OK) err = kiln_exec_user_env(job, role, env);
out:
    free(tasks);
    free(hosts);
    return err;
}

/* Replica i's container: `podman run ...` and the pull and image check
 * its monitor runs first, built by the local container backend's own code
 * (kiln__podman_argv) with the same name, hostname, mounts, --init and
 * environment. What only the node knows is left to kiln-slurm-task: the
 * replicas' addresses (@KILN_HOST_K@ in --add-host, this replica's own
 * name first, as on one machine) and the GPUs Slurm gave the task
 * (KILN_SLURM_DEVICES, where the --device arguments go). */
static kiln_err container_argv(ssup *s, sjob *j, const kiln_job *job, size_t i, const char *image,
                               const kiln_strv *env, kiln_strv *prog, kiln_strv *pull,
                               kiln_strv *exists)
{
    kiln_strv cmd = {0}, args = {0}, hosts = {0};
    char name[200], work[PATH_MAX + 16], jlog[PATH_MAX + 16];
    const srep *r = &j->reps[i];
    const kiln_replica_config *rc = kiln_job_role_config(job, r->role);
    kiln_err err = kiln_exec_container_program(job, r->role, &cmd, &args);
    kiln_trial *trial = j->study ? kiln_study_find(j->study->st, j->trial) : NULL;
    if (err == KILN_OK && trial) err = kiln_trial_args(j->study->st, trial, &args);
    for (size_t o = 0; err == KILN_OK && o < j->n; o++) {
        size_t k = o == 0 ? i : (o <= i ? o - 1 : o);
        char hn[200], *kv = NULL;
        kiln_exec_container_name(j->project, j->job_id, j->reps[k].task, hn, sizeof hn);
        err = asprintf(&kv, "%s:@KILN_HOST_%zu@", hn, k) < 0 ? KILN_ENOMEM
                                                             : kiln_strv_push(&hosts, kv);
        free(kv);
    }
    if (err != KILN_OK) goto out;
    kiln_exec_container_name(j->project, j->job_id, r->task, name, sizeof name);
    work_dir(j, work, sizeof work);
    snprintf(jlog, sizeof jlog, "%s/log.tsv", j->dir);
    const char *jd = job->training_input.job_dir;
    const char *mounts[2] = {j->dir, jd};
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = kiln_catalog_plan(s->d->catalog, job, plans);
    bool gpus = false;
    for (size_t p = 0; p < np; p++)
        gpus |= plans[p].role == r->role && plans[p].accelerators_per_replica > 0;
    kiln_exec_spec spec = {.kind = KILN_EXEC_CONTAINER,
                           .task = r->task,
                           .job_log = jlog,
                           .work_dir = work,
                           .argv = &cmd,
                           .args = &args,
                           .env = env,
                           .image = image,
                           .name = name,
                           .mounts = mounts,
                           .n_mounts = jd && jd[0] == '/' ? 2 : 1,
                           .binds = rc ? &rc->host_mounts : NULL,
                           .pull_policy = rc ? rc->image_pull_policy : NULL,
                           .hosts = (const char *const *)hosts.v,
                           .n_hosts = hosts.n,
                           .devices_arg = gpus ? "KILN_SLURM_DEVICES" : NULL,
                           .uid = -1,
                           .gid = -1};
    /* resources.limits (checked at create; container replicas only) */
    if (rc && rc->cpu_limit && !kiln_quantity_cpu_milli(rc->cpu_limit, &spec.cpu_milli))
        spec.cpu_milli = 0;
    if (rc && rc->memory_limit && !kiln_quantity_bytes(rc->memory_limit, &spec.memory_bytes))
        spec.memory_bytes = 0;
    err = kiln__podman_argv(&s->d->exec, &spec, prog, pull, exists);
out:
    kiln_strv_clear(&cmd);
    kiln_strv_clear(&args);
    kiln_strv_clear(&hosts);
    return err;
}

static json_t *strv_json(const kiln_strv *v)
{
    json_t *a = json_array();
    for (size_t k = 0; a && k < v->n; k++)
        json_array_append_new(a, json_string(v->v[k]));
    return a;
}

/* Writes DIR/slurm/spec.json (what each replica runs, for kiln-slurm-task)
 * and DIR/slurm/job.sbatch; false with why. */
static bool write_files(ssup *s, sjob *j, const kiln_job *job, int attempt,
                        const kiln_replica_plan *plans, size_t np, const char *name, char *why,
                        size_t whylen)
{
    kilnd *d = s->d;
    char sdir[PATH_MAX + 64], work[PATH_MAX + 32], path[PATH_MAX + 96], jlog[PATH_MAX + 16];
    snprintf(sdir, sizeof sdir, "%s", j->sdir);
    work_dir(j, work, sizeof work);
    snprintf(jlog, sizeof jlog, "%s/log.tsv", j->dir);
    kilnd_mkdirs(sdir);
    kilnd_mkdirs(work);
    char metric[PATH_MAX + 48];
    kiln_trial *trial = j->study ? kiln_study_find(j->study->st, j->trial) : NULL;
    if (j->study && !trial) {
        snprintf(why, whylen, "trial %d is not in the study", j->trial);
        return false;
    }
    kiln_trials_metric_file(j->dir, j->trial, metric, sizeof metric);
    /* a trial run again from the start (a drain, a kilnd restart) reports
     * from the start: its previous run's hypertune lines must not count a
     * second time (as on one machine); its restart policy's run goes on
     * from where the file was read */
    if (trial && j->failures == 0) unlink(metric);
    char rdir[PATH_MAX + 16];
    snprintf(rdir, sizeof rdir, "%s/replicas", j->dir);
    kilnd_mkdirs(rdir);
    const char *jd = job->training_input.job_dir;
    if (jd && jd[0] == '/') kilnd_mkdirs(jd);
    kiln_exec_paths paths = {.kiln_train = d->kiln_train, .python = d->python, .staging = NULL};
    json_t *reps = json_array();
    for (size_t i = 0; i < j->n; i++) {
        kiln_strv argv = {0}, env = {0}, pull = {0}, exists = {0};
        const char *image = kiln_exec_image(job, j->reps[i].role);
        bool ok = replica_env(s, j, job, i, attempt, &env) == KILN_OK;
        /* a trial's replicas: CLOUD_ML_HP_METRIC_FILE, the trial in TF_CONFIG */
        if (ok && trial) ok = kiln_trial_env(j->study->st, trial, metric, &env) == KILN_OK;
        if (ok && image)
            ok = container_argv(s, j, job, i, image, &env, &argv, &pull, &exists) == KILN_OK;
        else if (ok)
            ok = kiln_exec_program(job, j->reps[i].role, &paths, &argv, why, whylen) == KILN_OK;
        /* a trial's --NAME=VALUE flags follow the program's own args */
        if (ok && trial && !image) ok = kiln_trial_args(j->study->st, trial, &argv) == KILN_OK;
        json_t *one =
            ok ? json_pack("{s:s,s:s,s:i,s:i,s:o,s:o}", "task", j->reps[i].task, "role",
                           kiln_role_name(j->reps[i].role), "index", j->reps[i].index, "port",
                           j->reps[i].port, "argv", strv_json(&argv), "env", strv_json(&env))
               : NULL;
        /* a container: its monitor pulls (unless pullPolicy Never) and
         * checks the image first, on the node, as on one machine */
        if (one && image) {
            const kiln_replica_config *rc = kiln_job_role_config(job, j->reps[i].role);
            json_object_set_new(one, "image", json_string(image));
            json_object_set_new(one, "pull", strv_json(&pull));
            json_object_set_new(one, "exists", strv_json(&exists));
            kiln_strv stop = {0};
            char cname[200];
            kiln_exec_container_name(j->project, j->job_id, j->reps[i].task, cname, sizeof cname);
            if (kiln__podman_stop_argv(&s->d->exec, cname, s->d->grace_ms, &stop) == KILN_OK)
                json_object_set_new(one, "stop", strv_json(&stop));
            kiln_strv_clear(&stop);
            if (rc && rc->image_pull_policy)
                json_object_set_new(one, "pullPolicy", json_string(rc->image_pull_policy));
        }
        kiln_strv_clear(&argv);
        kiln_strv_clear(&env);
        kiln_strv_clear(&pull);
        kiln_strv_clear(&exists);
        if (!one || json_array_append_new(reps, one) < 0) {
            if (!why[0]) snprintf(why, whylen, "cannot build the replicas' environment");
            json_decref(reps);
            return false;
        }
    }
    json_t *spec = json_pack("{s:s,s:s,s:s,s:I,s:o}", "monitor", d->exec.monitor, "jobLog", jlog,
                             "workDir", work, "logCap", (json_int_t)d->log_cap, "replicas", reps);
    snprintf(path, sizeof path, "%s/spec.json", sdir);
    if (!spec || json_dump_file(spec, path, JSON_INDENT(1)) != 0) {
        json_decref(spec);
        snprintf(why, whylen, "cannot write %.400s", path);
        return false;
    }
    json_decref(spec);

    /* --queues: its ClusterQueue's account and its priority class's QOS
     * (accounts.h), else --slurm-account. A job no LocalQueue takes now
     * (the file changed since its create) goes nowhere: without its account
     * it would run outside every quota */
    char acct[256] = "", qos[256] = "";
    if (d->queues_path &&
        !kiln_slurm_job_account(d, j->project, &job->labels, acct, sizeof acct, qos, sizeof qos)) {
        snprintf(why, whylen,
                 "no LocalQueue of the queues file takes project %s's job now (it changed "
                 "since the job was created), so it has no Slurm account",
                 j->project);
        return false;
    }
    if (!d->queues_path && d->slurm.account) snprintf(acct, sizeof acct, "%s", d->slurm.account);
    snprintf(path, sizeof path, "%s/job.sbatch", sdir);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(why, whylen, "cannot write %.400s: %s", path, strerror(errno));
        return false;
    }
    const kiln_training_input *ti = &job->training_input;
    char tlimit[48] = "";
    if (ti->has_scheduling && ti->scheduling.has_max_running_time) {
        long long sec = ti->scheduling.max_running_time.seconds;
        if (ti->scheduling.max_running_time.nanos > 0) sec++;
        if (sec < 60) sec = 60; /* Slurm's time limits are in minutes */
        snprintf(tlimit, sizeof tlimit, " --time=%lld", (sec + 59) / 60);
    }
    fprintf(f, "#!/bin/bash\n# kiln job projects/%s/jobs/%s (written by kilnd: docs/slurm.md)\n",
            j->project, j->job_id);
    bool het = np > 1;
    for (size_t p = 0; p < np; p++) {
        if (p) fprintf(f, "#SBATCH hetjob\n");
        /* CPU and memory: the machine type's where the site says so, else 1 CPU */
        int cpus = d->slurm.machine_resources && plans[p].vcpus > 0 ? plans[p].vcpus : 1;
        fprintf(f, "#SBATCH --partition=%s --ntasks=%lld --cpus-per-task=%d%s", d->slurm.partition,
                (long long)plans[p].count, cpus, tlimit);
        if (d->slurm.machine_resources && plans[p].memory_gb > 0) {
            long long mb = (long long)(plans[p].memory_gb * 1024.0 + 0.5);
            fprintf(f, " --mem-per-cpu=%lld", (mb + cpus - 1) / cpus);
        }
        if (plans[p].accelerator_type && plans[p].accelerators_per_replica > 0) {
            const char *g = gres_type(d, plans[p].accelerator_type);
            fprintf(f, " --gpus-per-task=%s%s%lld", g ? g : "", g ? ":" : "",
                    (long long)plans[p].accelerators_per_replica);
        }
        /* priority (0..max, higher first) -> --nice=1000-priority: never negative,
         * so no Slurm privilege is needed; kiln's jobs order among themselves */
        long long prio = ti->has_scheduling ? (long long)ti->scheduling.priority : 0;
        if (prio < 1000) fprintf(f, " --nice=%lld", 1000 - prio);
        if (acct[0]) fprintf(f, " --account=%s", acct);
        if (qos[0]) fprintf(f, " --qos=%s", qos);
        if (p == 0)
            fprintf(f, " --job-name=%s --output=%s/batch-%%j.log --chdir=%s", name, sdir, work);
        fprintf(f, "\n");
    }
    fprintf(f, "set -u\nR=");
    sh_quote(f, sdir);
    fprintf(f, "/$SLURM_JOB_ID\nmkdir -p \"$R/hosts\"\npids=()\n");
    for (size_t p = 0; p < np; p++) {
        fprintf(f, "srun --kill-on-bad-exit=1");
        if (het) fprintf(f, " --het-group=%zu", p);
        fprintf(f, " ");
        sh_quote(f, d->slurm.task);
        fprintf(f, " \"$R\" ");
        sh_quote(f, sdir);
        fprintf(f, "/spec.json %s", kiln_role_name(plans[p].role));
        if (j->el) fprintf(f, " %d", j->reps[0].index); /* its one replica: not SLURM_PROCID's */
        fprintf(f, " &\npids+=($!)\n");
        if (plans[p].role == KILN_ROLE_MASTER) fprintf(f, "master=$!\n");
    }
    /* As on one machine: the first failure stops the others and is the job's
     * status; the master's success ends the job (a parameter server never
     * exits, and workers still running are stopped); a worker or ps that
     * ends with 0 before the master just ends (kilnd restarts the job for
     * restartPolicy Always: always_exited). Which step ended is not asked
     * of `wait -n -p` (bash 5.1; RHEL 8's nodes have 4.4): the master has
     * ended once it is gone, and `wait PID` then gives its status, whether
     * or not `wait -n` has given it already. */
    fprintf(f,
            "code=0 live=${#pids[@]}\n"
            "while [ \"$live\" -gt 0 ]; do\n"
            "    wait -n; c=$?\n"
            "    live=$((live - 1))\n"
            "    if [ \"$c\" -ne 0 ]; then code=$c; break; fi\n"
            "    if [ -n \"${master-}\" ] && ! kill -0 \"$master\" 2>/dev/null; then\n"
            "        wait \"$master\"; code=$?; break\n"
            "    fi\n"
            "done\n"
            "if [ \"$live\" -gt 0 ]; then\n"
            "    kill -TERM \"${pids[@]}\" 2>/dev/null\n"
            "    (sleep %d; kill -KILL \"${pids[@]}\" 2>/dev/null) & killer=$!\n"
            "    for p in \"${pids[@]}\"; do wait \"$p\" 2>/dev/null; done\n"
            "    kill \"$killer\" 2>/dev/null\n"
            "fi\n"
            "wait\necho \"$code\" >\"$R/exit\"\nexit \"$code\"\n",
            d->grace_ms / 1000 + 1);
    if (fclose(f) != 0) {
        snprintf(why, whylen, "cannot write %.400s", path);
        return false;
    }
    return true;
}

/* Gives the job's files that its replicas write to the project's user:
 * the job dir, its log, work and replicas dirs (kilnd_chown_job), the
 * slurm/ dir (the batch script makes each attempt's run dir in it, Slurm
 * writes its output there) and a local jobDir. */
static void give_files(const sjob *j, const kiln_job *job, long uid, long gid)
{
    char path[PATH_MAX + 64];
    kilnd_chown_job(j->dir, uid, gid);
    snprintf(path, sizeof path, "%s/slurm", j->dir);
    if ((j->study || j->el) &&
        chown(path, (uid_t)uid, (gid_t)gid) < 0) /* the trial's, the worker's dir is in it */
        fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", path, uid, gid, strerror(errno));
    if (j->study) { /* the trial's directory: its working dir and hypertune file */
        char td[PATH_MAX + 48];
        kiln_trials_dir(j->dir, j->trial, td, sizeof td);
        if (chown(td, (uid_t)uid, (gid_t)gid) < 0)
            fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", td, uid, gid,
                    strerror(errno));
    }
    snprintf(path, sizeof path, "%s", j->sdir);
    if (chown(path, (uid_t)uid, (gid_t)gid) < 0)
        fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", path, uid, gid, strerror(errno));
    const char *jd = job->training_input.job_dir;
    if (jd && jd[0] == '/' && chown(jd, (uid_t)uid, (gid_t)gid) < 0)
        fprintf(stderr, "kilnd: cannot give %s to %ld:%ld: %s\n", jd, uid, gid, strerror(errno));
}

/* A Slurm job of this attempt's name exists already: a kilnd died between
 * its sbatch and the runtime record. It is followed (its replicas from the
 * spec.json written before that sbatch), not submitted again. */
static bool adopt(ssup *s, sjob *j, json_t *sj)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/spec.json", j->sdir);
    json_t *spec = json_load_file(path, 0, NULL);
    bool ok = reps_read(s, j, json_object_get(spec, "replicas")) && j->n > 0;
    json_decref(spec);
    if (!ok) return false;
    j->id = (long)json_integer_value(json_object_get(sj, "job_id"));
    const char *st = json_string_value(json_object_get(sj, "job_state"));
    snprintf(j->sstate, sizeof j->sstate, "%s", st ? st : "PENDING");
    return j->id > 0;
}

/* Writes j's files (its replicas as `job` describes them, attempt
 * `attempt`) and hands it to Slurm (sbatch) as `name`, as the project's
 * user; false with the sentence in `why` when nothing was submitted. */
static bool launch(ssup *s, sjob *j, const kiln_job *job, int attempt,
                   const kiln_replica_plan *plans, size_t np, const char *name, char *why,
                   size_t whylen)
{
    kilnd *d = s->d;
    /* the project's Unix user, as on one machine (src/daemon/users.c):
     * checked again here for a job a kilnd configured otherwise accepted */
    long uid = -1, gid = -1;
    if (kilnd_project_user(d, j->project, &uid, &gid, why, whylen) != KILN_OK) return false;
    if (!write_files(s, j, job, attempt, plans, np, name, why, whylen)) return false;
    char script[PATH_MAX + 64], *out = NULL, ua[32] = "", ga[32] = "";
    snprintf(script, sizeof script, "%s/job.sbatch", j->sdir);
    if (uid >= 0) {
        /* the batch script, its tasks and monitors run as the user (root
         * submits for it: sbatch --uid/--gid) and write the job's files */
        give_files(j, job, uid, gid);
        snprintf(ua, sizeof ua, "--uid=%ld", uid);
        snprintf(ga, sizeof ga, "--gid=%ld", gid);
    }
    char *sargv[] = {"sbatch", "--parsable", script, NULL, NULL, NULL};
    if (uid >= 0) {
        sargv[2] = ua;
        sargv[3] = ga;
        sargv[4] = script;
    }
    int rc = kiln_slurm_run(sargv, &out, 60);
    char l[600];
    kiln_slurm_last_line(out, l, sizeof l);
    j->id = rc == 0 && out ? strtol(out, NULL, 10) : 0;
    free(out);
    if (j->id <= 0) {
        snprintf(why, whylen, "Slurm refused the job (partition %s): %s", d->slurm.partition,
                 l[0] ? l : "sbatch failed");
        return false;
    }
    s->fast_until_ns = kiln_now_ns() + FAST_POLL_NS;
    /* test only (it_slurm.sh): a kilnd dying between sbatch and its record */
    const char *die = getenv("KILN_TEST_DIE_AFTER_SBATCH");
    if (die && strcmp(die, "1") == 0) _exit(70);
    return true;
}

/* Hands a job to Slurm (sbatch), as attempt rec->restarts: a QUEUED job, or
 * one restarted by its restart policy (`restart`: it stays RUNNING). The job
 * stays QUEUED while Slurm says PENDING. `byname`: squeue's jobs by name. */
static void submit(ssup *s, kiln_job_record *rec, json_t *byname, bool restart)
{
    kilnd *d = s->d;
    char name[300];
    job_name(rec->project, rec->job->job_id, rec->restarts, name, sizeof name);
    json_t *prev = byname ? json_object_get(byname, name) : NULL;
    if (prev) {
        sjob *j = calloc(1, sizeof *j);
        if (!j || !(j->project = strdup(rec->project)) || !(j->job_id = strdup(rec->job->job_id))) {
            sjob_free(s, j);
            return;
        }
        sjob_dirs(s, j);
        if (!adopt(s, j, prev)) {
            sjob_free(s, j);
            refuse(s, rec, "Slurm job %s exists but its replicas' spec is unreadable", name);
            return;
        }
        save_runtime(s, j, rec->restarts, rec->failures);
        kilnd_event(d, j->project, j->job_id, "WARNING",
                    "Slurm job %ld (%s, %s) was submitted by a kilnd that stopped before "
                    "recording it: following it, not submitting again",
                    j->id, name, j->sstate);
        j->next = s->fresh;
        s->fresh = j;
        return;
    }
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    char why[1024] = "";
    size_t np = runnable(s, rec, plans);
    if (np == 0) return;
    sjob *j = calloc(1, sizeof *j);
    size_t n = 0;
    for (size_t p = 0; p < np; p++)
        n += (size_t)plans[p].count;
    if (!j || !(j->reps = calloc(n ? n : 1, sizeof *j->reps)) ||
        !(j->project = strdup(rec->project)) || !(j->job_id = strdup(rec->job->job_id))) {
        sjob_free(s, j);
        return;
    }
    sjob_dirs(s, j);
    for (size_t p = 0; p < np; p++)
        for (int64_t k = 0; k < plans[p].count; k++) {
            srep *r = &j->reps[j->n++];
            r->role = plans[p].role;
            r->index = (int)k;
            kiln_exec_task_name(r->role, r->index, r->task);
            r->port = port_take(s);
            if (r->port < 0) {
                sjob_free(s, j);
                if (restart) refuse(s, rec, "no free port in --port-range for the job's restart");
                return; /* stays QUEUED until ports free up */
            }
        }
    if (!launch(s, j, rec->job, rec->restarts, plans, np, name, why, sizeof why)) {
        refuse(s, rec, "%s", why);
        sjob_free(s, j);
        return;
    }
    snprintf(j->sstate, sizeof j->sstate, "PENDING");
    save_runtime(s, j, rec->restarts, rec->failures);
    kilnd_event(d, j->project, j->job_id, "INFO",
                "Submitted to Slurm as job %ld (%s, partition %s): %zu replica%s in %zu "
                "component%s",
                j->id, name, d->slurm.partition, j->n, j->n == 1 ? "" : "s", np,
                np == 1 ? "" : "s");
    j->next = s->fresh;
    s->fresh = j;
}

/* ---------- following the jobs ---------- */

/* Replica i's status from its monitor's exit file under DIR/slurm/ID/, and
 * when the file was written; false while it has none. */
static bool rep_exit(const sjob *j, size_t i, int *code, struct timespec *at)
{
    char path[PATH_MAX + 160], text[256];
    snprintf(path, sizeof path, "%s/%ld/%s.exit", j->sdir, j->id, j->reps[i].task);
    struct stat sb;
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(text, 1, sizeof text - 1, f);
    bool have = fstat(fileno(f), &sb) == 0;
    fclose(f);
    text[n] = '\0';
    if (!have || sscanf(text, "code %d", code) != 1) return false;
    *at = sb.st_mtim;
    return true;
}

static bool earlier(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

/* The replica that failed first (the earliest non-zero exit file: the
 * others were then stopped): its index, its code in *code; -1 when none did. */
static int first_failure(const sjob *j, int *code)
{
    int best = -1;
    struct timespec at = {0}, t;
    for (size_t i = 0; i < j->n; i++) {
        int c = 0;
        if (!rep_exit(j, i, &c, &t) || c == 0) continue;
        if (best < 0 || earlier(t, at)) {
            best = (int)i;
            at = t;
            *code = c;
        }
    }
    return best;
}

/* restartPolicy Always, as on one machine: a worker, ps or evaluator whose
 * program ended with 0 before the master did restarts the job's replicas.
 * Its index, or -1. (The batch script lets such a replica just end.) */
static int always_exited(const sjob *j, const kiln_job *job)
{
    bool any = false; /* most jobs have no such replica: no file is read for them */
    for (size_t i = 0; i < j->n && !any; i++)
        any = j->reps[i].role != KILN_ROLE_MASTER &&
              strcmp(kiln_job_restart_policy(job, j->reps[i].role), "Always") == 0;
    if (!any) return -1;
    int best = -1;
    struct timespec at = {0}, t, master = {0};
    bool master_ended = false;
    for (size_t i = 0; i < j->n; i++) {
        int c = 0;
        if (!rep_exit(j, i, &c, &t)) continue;
        if (j->reps[i].role == KILN_ROLE_MASTER) {
            master_ended = true;
            master = t;
        } else if (c == 0 && strcmp(kiln_job_restart_policy(job, j->reps[i].role), "Always") == 0 &&
                   (best < 0 || earlier(t, at))) {
            best = (int)i;
            at = t;
        }
    }
    return best >= 0 && master_ended && !earlier(at, master) ? -1 : best;
}

/* The batch script's own exit file (a job Slurm has forgotten): 0, the
 * code, or -1 when there is none. */
static int batch_exit(const sjob *j)
{
    char path[PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/%ld/exit", j->sdir, j->id);
    FILE *f = fopen(path, "r");
    int code = -1;
    if (f) {
        if (fscanf(f, "%d", &code) != 1) code = -1;
        fclose(f);
    }
    return code;
}

static const unsigned ACTIVE = KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING) |
                               KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);

static void ended_as(ssup *s, sjob *j, kiln_job_record *r, const char *state, const char *reason,
                     long max_rt, json_t *byname);

/* The job ended in Slurm with `state` (COMPLETED, FAILED, ...): its kiln end,
 * or its next attempt (restart policy, drain). */
static void ended(ssup *s, sjob *j, const char *state, const char *reason, long max_rt,
                  json_t *byname)
{
    kiln_job_record *r = NULL;
    if (kiln_store_job_get(s->d->store, j->project, j->job_id, &r) != KILN_OK) return;
    ended_as(s, j, r, state, reason, max_rt, byname);
    kiln_job_record_free(r);
}

/* The restart policy's word on an attempt that ended (`what`: how, a
 * sentence without its full stop). Where the policy `pol` retries it
 * (`retry`) and the backoff limit allows, the job is submitted again as
 * attempt restarts+1, counted as a failure, while the kiln job stays
 * RUNNING; else it FAILS, counted under `fail` (or the backoff limit). */
static void retry_or_fail(ssup *s, sjob *j, kiln_job_record *r, const char *what, const char *pol,
                          bool retry, kilnd_fail_reason fail, json_t *byname)
{
    kilnd *d = s->d;
    int limit = kiln_job_backoff_limit(r->job);
    if (retry && r->failures < limit) {
        kilnd_event(d, j->project, j->job_id, "WARNING",
                    "%s; submitting the job again (restart policy %s, restart %d of at most %d)",
                    what, pol, r->failures + 1, limit);
        r->failures++;
        r->restarts++;
        d->restarts_total[KILND_RESTART_FAILURE]++;
        ports_release(s, j);
        submit(s, r, byname, true);
        return;
    }
    char msg[1400];
    if (retry)
        snprintf(msg, sizeof msg, "%s; the backoff limit (%d restarts) is reached.", what, limit);
    else
        snprintf(msg, sizeof msg, "%s.", what);
    if (kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_FAILED, msg,
                                  kiln_now_ns(), NULL) == KILN_OK)
        d->failures_total[retry ? KILND_FAIL_BACKOFF_LIMIT : fail]++;
    kilnd_event(d, j->project, j->job_id, "ERROR", "Job FAILED: %s", msg);
}

static void ended_as(ssup *s, sjob *j, kiln_job_record *r, const char *state, const char *reason,
                     long max_rt, json_t *byname)
{
    kilnd *d = s->d;
    int64_t now = kiln_now_ns();
    char msg[1024], rf[300] = "";
    kiln_job_state was = r->job->state;
    bool has_reason = reason && *reason && strcmp(reason, "None") != 0;
    if (was == KILN_STATE_CANCELLING) {
        kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_CANCELLED,
                                  NULL, now, NULL);
        kilnd_event(d, j->project, j->job_id, "INFO", "Job CANCELLED (Slurm job %ld: %s)", j->id,
                    state);
        return;
    }
    if (j->deadline) { /* stopped for runPolicy.activeDeadlineSeconds */
        if (kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_FAILED,
                                      j->deadline, now, NULL) == KILN_OK)
            d->failures_total[KILND_FAIL_DEADLINE]++;
        kilnd_event(d, j->project, j->job_id, "ERROR", "Job FAILED: %s (Slurm job %ld: %s)",
                    j->deadline, j->id, state);
        return;
    }
    if (j->requeue && j->restart) {
        /* restartPolicy Always: a replica ended with 0 before the master */
        retry_or_fail(s, j, r, j->requeue, "Always", true, KILND_FAIL_BACKOFF_LIMIT, byname);
        return;
    }
    if (j->requeue) {
        /* stopped for a drain: queued again as a new Slurm job, which Slurm
         * places off the drained node; it resumes from its checkpoint */
        r->restarts++;
        d->restarts_total[KILND_RESTART_DRAIN]++;
        kilnd_event(d, j->project, j->job_id, "WARNING", "%s (Slurm job %ld ended %s)", j->requeue,
                    j->id, state);
        kiln_store_job_transition(d->store, j->project, j->job_id,
                                  KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(PREPARING),
                                  KILN_STATE_QUEUED, NULL, now, NULL);
        r->job->state = KILN_STATE_QUEUED;
        ports_release(s, j);
        submit(s, r, byname, false);
        return;
    }
    if (strcmp(state, "COMPLETED") == 0) {
        kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_SUCCEEDED,
                                  NULL, now, NULL);
        kilnd_event(d, j->project, j->job_id, "INFO", "Job SUCCEEDED (Slurm job %ld COMPLETED)",
                    j->id);
        return;
    }
    if (strcmp(state, "TIMEOUT") == 0) {
        snprintf(msg, sizeof msg,
                 "The job ran longer than maxRunningTime (%lds); cancelled (Slurm job %ld: "
                 "TIMEOUT)",
                 max_rt, j->id);
        kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_CANCELLED,
                                  msg, now, NULL);
        kilnd_event(d, j->project, j->job_id, "WARNING", "Job CANCELLED: %s", msg);
        return;
    }
    if (strcmp(state, "CANCELLED") == 0) {
        snprintf(msg, sizeof msg, "Slurm job %ld was cancelled outside kiln (scancel)%s%s", j->id,
                 reason && *reason && strcmp(reason, "None") ? ": " : "",
                 reason && *reason && strcmp(reason, "None") ? reason : "");
        kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_CANCELLED,
                                  msg, now, NULL);
        kilnd_event(d, j->project, j->job_id, "WARNING", "Job CANCELLED: %s", msg);
        return;
    }
    /* a failure: the restart policy of the replica that failed first; a
     * Slurm failure without one (NODE_FAIL, PREEMPTED, ...) counts as the
     * batch script's status, or as killed (137) */
    int code = 0, fi = first_failure(j, &code);
    kiln_role role = fi >= 0 ? j->reps[fi].role : KILN_ROLE_MASTER;
    if (fi >= 0)
        snprintf(rf, sizeof rf, "The replica %s exited with a non-zero status of %d. ",
                 j->reps[fi].task, code);
    else if ((code = batch_exit(j)) <= 0)
        code = 137;
    const char *pol = kiln_job_restart_policy(r->job, role);
    bool retry = kiln_restart_policy_retries(pol, code);
    snprintf(msg, sizeof msg, "%sSlurm job %ld ended %s%s%s", rf, j->id, state,
             has_reason ? ": " : "", has_reason ? reason : "");
    retry_or_fail(s, j, r, msg, pol, retry, rf[0] ? KILND_FAIL_REPLICA_EXIT : KILND_FAIL_START,
                  byname);
}

static bool is_final(const char *st)
{
    static const char *const fin[] = {"COMPLETED",     "FAILED",       "CANCELLED", "TIMEOUT",
                                      "NODE_FAIL",     "BOOT_FAIL",    "DEADLINE",  "PREEMPTED",
                                      "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",   NULL};
    for (size_t i = 0; fin[i]; i++)
        if (strcmp(st, fin[i]) == 0) return true;
    return false;
}

static void scancel(long id, bool term)
{
    char ids[32], *out = NULL;
    snprintf(ids, sizeof ids, "%ld", id);
    if (term)
        kiln_slurm_run((char *[]){"scancel", "--signal=TERM", ids, NULL}, &out, 20);
    else
        kiln_slurm_run((char *[]){"scancel", ids, NULL}, &out, 20);
    free(out);
}

/* One job against what squeue said (`sj`: its leader's entry, NULL when
 * squeue did not show it). Returns true when the job is done with. */
static bool follow(ssup *s, sjob *j, json_t *sj, json_t *byname, int64_t now)
{
    kilnd *d = s->d;
    kiln_job_record *r = NULL;
    if (kiln_store_job_get(d->store, j->project, j->job_id, &r) != KILN_OK) return true;
    kiln_job_state st = r->job->state;
    const kiln_training_input *ti = &r->job->training_input;
    long max_rt = ti->has_scheduling && ti->scheduling.has_max_running_time
                      ? (long)ti->scheduling.max_running_time.seconds
                      : 0;
    bool done = false;
    const char *sstate = sj ? json_string_value(json_object_get(sj, "job_state")) : NULL;
    const char *reason = sj ? json_string_value(json_object_get(sj, "state_reason")) : NULL;
    if (!sstate) sstate = "";
    if ((1u << st) & KILN_STATES_TERMINAL) {
        /* ended in kiln (a QUEUED job cancelled by the API): Slurm lets go too */
        if (!is_final(sstate) && sj) scancel(j->id, false);
        done = true;
        goto out;
    }
    if (st == KILN_STATE_QUEUED && ti->has_scheduling && ti->scheduling.has_max_wait_time &&
        strcmp(sstate, "PENDING") == 0 &&
        now - r->create_ns > ti->scheduling.max_wait_time.seconds * 1000000000LL) {
        char msg[200];
        snprintf(msg, sizeof msg, "still queued after maxWaitTime (%llds); cancelled",
                 (long long)ti->scheduling.max_wait_time.seconds);
        scancel(j->id, false);
        kiln_store_job_transition(d->store, j->project, j->job_id, ACTIVE, KILN_STATE_CANCELLED,
                                  msg, now, NULL);
        kilnd_event(d, j->project, j->job_id, "WARNING", "Job CANCELLED: %s", msg);
        done = true;
        goto out;
    }
    /* activeDeadlineSeconds as on one machine (kiln_exec_limit_passed);
     * maxRunningTime is Slurm's own --time */
    char lwhy[256];
    if (st == KILN_STATE_RUNNING && !j->deadline && !j->requeue && !j->term_sent &&
        kiln_exec_limit_passed(r->job, r->start_ns, now, KILN_LIMIT_ACTIVE_DEADLINE, lwhy,
                               sizeof lwhy) == KILN_LIMIT_ACTIVE_DEADLINE)
        j->deadline = strdup(lwhy);
    if ((st == KILN_STATE_CANCELLING || j->requeue || j->deadline) && !j->term_sent && sj) {
        bool started = strcmp(sstate, "RUNNING") == 0 || strcmp(sstate, "COMPLETING") == 0;
        scancel(j->id, started); /* SIGTERM to the replicas first when they run */
        j->term_sent = true;
        j->killed = !started;
        j->kill_at_ns = now + (int64_t)d->grace_ms * 1000000;
        kilnd_event(d, j->project, j->job_id, "INFO",
                    started ? "%s: scancel --signal=TERM %ld, scancel after %d ms"
                            : "%s: scancel %ld (%d ms grace not needed: not started)",
                    j->requeue && st != KILN_STATE_CANCELLING
                        ? (j->restart ? "Restarting" : "Stopping for the drain")
                    : j->deadline && st != KILN_STATE_CANCELLING ? j->deadline
                                                                 : "Cancelling",
                    j->id, d->grace_ms);
    } else if ((st == KILN_STATE_CANCELLING || j->requeue || j->deadline) && j->term_sent &&
               !j->killed && now >= j->kill_at_ns) {
        scancel(j->id, false);
        j->killed = true;
    }
    if (!sj) { /* Slurm forgot it (MinJobAge) or it is not visible yet */
        if (++j->missing < 3) goto out;
        int code = batch_exit(j);
        ended(s, j, code == 0 ? "COMPLETED" : "FAILED",
              code < 0 ? "Slurm no longer knows the job and its batch script left no exit status"
                       : NULL,
              max_rt, byname);
        done = true;
        goto out;
    }
    j->missing = 0;
    if (strcmp(sstate, j->sstate) != 0) {
        snprintf(j->sstate, sizeof j->sstate, "%s", sstate);
        save_runtime(s, j, r->restarts, r->failures);
        if (!is_final(sstate))
            kilnd_event(d, j->project, j->job_id, "INFO", "Slurm job %ld: %s%s%s%s", j->id, sstate,
                        reason && strcmp(reason, "None") ? " (" : "",
                        reason && strcmp(reason, "None") ? reason : "",
                        reason && strcmp(reason, "None") ? ")" : "");
    }
    if (strcmp(sstate, "CONFIGURING") == 0) {
        kiln_store_job_transition(d->store, j->project, j->job_id, KILN_STATE_MASK(QUEUED),
                                  KILN_STATE_PREPARING, NULL, now, NULL);
    } else if (strcmp(sstate, "RUNNING") == 0 || strcmp(sstate, "COMPLETING") == 0) {
        if (kiln_store_job_transition(d->store, j->project, j->job_id,
                                      KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING),
                                      KILN_STATE_RUNNING, NULL, now, NULL) == KILN_OK) {
            const char *nodes = json_string_value(json_object_get(sj, "nodes"));
            kilnd_event(d, j->project, j->job_id, "INFO", "Job RUNNING (Slurm job %ld on %s)",
                        j->id, nodes ? nodes : "?");
        }
        if (!j->nodes_known) { /* the replicas' nodes, once every task has said */
            char path[PATH_MAX + 160];
            size_t have = 0;
            for (size_t i = 0; i < j->n; i++) {
                snprintf(path, sizeof path, "%s/%ld/hosts/%s", j->sdir, j->id, j->reps[i].task);
                have += access(path, F_OK) == 0;
            }
            if (have == j->n) {
                j->nodes_known = true;
                save_runtime(s, j, r->restarts, r->failures);
            }
        }
        int wi = st == KILN_STATE_RUNNING && !j->requeue && !j->term_sent ? always_exited(j, r->job)
                                                                          : -1;
        if (wi >= 0 && asprintf(&j->requeue,
                                "The replica %s exited with status 0 before the master "
                                "(restart policy Always)",
                                j->reps[wi].task) >= 0) {
            j->restart = true;
            kilnd_event(d, j->project, j->job_id, "WARNING",
                        "%s: stopping Slurm job %ld's replicas to restart them", j->requeue, j->id);
            save_runtime(s, j, r->restarts, r->failures); /* the restart survives kilnd */
        } else if (wi >= 0) {
            j->requeue = NULL;
        }
    } else if (is_final(sstate)) {
        ended(s, j, sstate, reason, max_rt, byname);
        done = true;
    }
out:
    kiln_job_record_free(r);
    return done;
}

/* ---------- tuning jobs: each trial a Slurm job of its own ---------- */

/* The study's runtime record: the study (trainingOutput.trials comes from
 * it) and every trial's Slurm job, so that a new kilnd follows them again. */
static void study_save(ssup *s, sstudy *st)
{
    json_t *reps = json_array(), *runs = json_array();
    for (int pass = 0; pass < 2; pass++)
        for (sjob *j = pass ? s->fresh : s->jobs; reps && runs && j; j = j->next) {
            if (j->study != st) continue;
            reps_json(j, reps);
            json_t *one = json_array();
            reps_json(j, one);
            json_t *run = json_pack("{s:i,s:I,s:s,s:I,s:i,s:o}", "trial", j->trial, "slurmJobId",
                                    (json_int_t)j->id, "slurmState", j->sstate, "start",
                                    (json_int_t)j->start_ns, "failures", j->failures, "replicas",
                                    one ? one : json_array());
            if (run && j->requeue)
                json_object_set_new(run, "slurmRequeue", json_string(j->requeue));
            if (run && j->requeue && j->restart)
                json_object_set_new(run, "slurmRestart", json_true());
            if (run) json_array_append_new(runs, run);
        }
    json_t *rt =
        json_pack("{s:s,s:s,s:o,s:o,s:o}", "executor", "slurm", "slurmPartition",
                  s->d->slurm.partition, "replicas", reps ? reps : json_array(), "slurmTrials",
                  runs ? runs : json_array(), "study", kiln_study_to_json(st->st));
    char *txt = rt ? json_dumps(rt, JSON_COMPACT) : NULL;
    if (txt) kiln_store_job_set_runtime(s->d->store, st->project, st->job_id, 0, 0, txt);
    free(txt);
    json_decref(rt);
}

static void study_free(ssup *s, sstudy *st)
{
    if (!st) return;
    for (sstudy **l = &s->studies; *l; l = &(*l)->next)
        if (*l == st) {
            *l = st->next;
            break;
        }
    kiln_study_free(st->st);
    kiln_job_free(st->job);
    free(st->project);
    free(st->job_id);
    free(st);
}

static sstudy *study_new(ssup *s, const kiln_job_record *rec)
{
    sstudy *st = calloc(1, sizeof *st);
    if (!st || !(st->project = strdup(rec->project)) || !(st->job_id = strdup(rec->job->job_id)) ||
        !(st->job = kiln_job_clone(rec->job))) {
        study_free(s, st);
        return NULL;
    }
    st->next = s->studies;
    s->studies = st;
    return st;
}

/* The job is over when its study is (kiln_trials_outcome decides how). */
static void study_end(ssup *s, sstudy *st)
{
    kilnd *d = s->d;
    char msg[200];
    kiln_job_state end = kiln_trials_outcome(st->st, st->cancelling, msg, sizeof msg);
    study_save(s, st);
    if (kiln_store_job_transition(d->store, st->project, st->job_id, ACTIVE, end,
                                  end == KILN_STATE_FAILED ? msg : NULL, kiln_now_ns(),
                                  NULL) == KILN_OK)
        kilnd_event(d, st->project, st->job_id, end == KILN_STATE_FAILED ? "ERROR" : "INFO",
                    end == KILN_STATE_FAILED ? "Job FAILED: %s" : "%s", msg);
    study_free(s, st);
}

/* A QUEUED tuning job starts: its study is made (or resumed) and the job
 * is RUNNING; start_trials submits the trials. */
static void study_begin(ssup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    char why[1024] = "";
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = runnable(s, rec, plans);
    if (np == 0) return;
    sstudy *st = study_new(s, rec);
    if (!st) return;
    st->st = kiln_trials_open(d->store, rec->project, rec->job->job_id, st->job, rec->runtime, true,
                              why, sizeof why);
    if (!st->st) {
        if (why[0]) refuse(s, rec, "%s", why);
        study_free(s, st);
        return;
    }
    const kiln_hyperparameter_spec *hp = &st->job->training_input.hyperparameters;
    study_save(s, st);
    kiln_store_job_transition(d->store, rec->project, rec->job->job_id, KILN_STATE_MASK(QUEUED),
                              KILN_STATE_RUNNING, NULL, kiln_now_ns(), NULL);
    kilnd_event(d, rec->project, rec->job->job_id, "INFO",
                "Job RUNNING: a hyperparameter tuning study of %lld trials, %d at once, each "
                "trial a Slurm job of its own (%zu trials kept from before)",
                (long long)(hp->max_trials > 0 ? hp->max_trials : 1), kiln_trials_parallel(hp),
                kiln_study_trial_count(st->st));
}

/* Submits trial `t` of `st` as a Slurm job (kiln.P.J.trial-N.RUN); false
 * when it could not be (the trial then FAILED, with why in the job's log). */
static bool submit_trial(ssup *s, sstudy *st, kiln_trial *t, int failures)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    char name[300], why[1024] = "";
    sjob *j = calloc(1, sizeof *j);
    if (!j || !(j->project = strdup(st->project)) || !(j->job_id = strdup(st->job_id)) ||
        !(j->tjob = kiln_trials_job(st->job, t->id, NULL))) {
        snprintf(why, sizeof why, "out of memory");
        goto fail;
    }
    j->study = st;
    j->trial = t->id;
    j->failures = failures;
    sjob_dirs(s, j);
    size_t np = kiln_catalog_plan(d->catalog, j->tjob, plans), n = 0;
    for (size_t p = 0; p < np; p++)
        n += (size_t)plans[p].count;
    if (!(j->reps = calloc(n ? n : 1, sizeof *j->reps))) goto fail;
    for (size_t p = 0; p < np; p++)
        for (int64_t k = 0; k < plans[p].count; k++) {
            srep *r = &j->reps[j->n++];
            char base[48];
            r->role = plans[p].role;
            r->index = (int)k;
            kiln_exec_task_name(r->role, r->index, base);
            snprintf(r->task, sizeof r->task, "trial-%d-%.30s", t->id, base);
            if ((r->port = port_take(s)) < 0) {
                /* not a failure: it waits for ports, as on one machine */
                kiln_study_end(st->st, t, KILN_TRIAL_QUEUED, 0);
                sjob_free(s, j);
                return false;
            }
        }
    /* trials are not adopted by name (a trial whose kilnd died before
     * recording its Slurm job runs again): the name only tells them apart */
    snprintf(name, sizeof name, "kiln.%s.%s.trial-%d", st->project, st->job_id, t->id);
    if (!launch(s, j, j->tjob, 0, plans, np, name, why, sizeof why)) goto fail;
    snprintf(j->sstate, sizeof j->sstate, "PENDING");
    st->running++;
    j->next = s->fresh;
    s->fresh = j;
    study_save(s, st);
    kilnd_event(d, j->project, j->job_id, "INFO",
                "Trial %d: submitted to Slurm as job %ld (%s): %zu replica%s", t->id, j->id, name,
                j->n, j->n == 1 ? "" : "s");
    return true;
fail:
    sjob_free(s, j);
    kiln_study_end(st->st, t, KILN_TRIAL_FAILED, kiln_now_ns());
    kilnd_event(d, st->project, st->job_id, "ERROR", "Trial %d ended FAILED: %s", t->id,
                why[0] ? why : "out of memory");
    study_save(s, st);
    return true;
}

/* Submits trials up to maxParallelTrials for every running study; a study
 * whose job is being cancelled submits none, and ends once none runs. */
static void start_trials(ssup *s)
{
    for (sstudy *st = s->studies, *next; st; st = next) {
        next = st->next;
        const kiln_hyperparameter_spec *hp = &st->job->training_input.hyperparameters;
        kiln_job_record *r = NULL;
        if (kiln_store_job_get(s->d->store, st->project, st->job_id, &r) == KILN_OK &&
            (r->job->state == KILN_STATE_CANCELLING ||
             ((1u << r->job->state) & KILN_STATES_TERMINAL)))
            st->cancelling = true;
        kiln_job_record_free(r);
        while (!st->cancelling && st->running < kiln_trials_parallel(hp) &&
               !kiln_study_finished(st->st)) {
            kiln_trial *t = kiln_study_next(st->st, kiln_now_ns());
            if (!t || !submit_trial(s, st, t, 0)) break;
        }
        if (st->running == 0 && (st->cancelling || kiln_study_finished(st->st))) study_end(s, st);
    }
}

/* kiln-train's training metrics reports, as on one machine: the monitor
 * of each replica writes its stdout lines that may be reports to
 * RUNDIR/TASK.metrics (on the shared file system); the new whole lines are
 * measured for the trial (kiln_trials_report). True when any was read. */
static bool trial_reports(sjob *j, kiln_trial *t)
{
    bool any = false;
    for (size_t i = 0; i < j->n; i++) {
        char path[PATH_MAX + 160], *line = NULL;
        size_t cap = 0;
        snprintf(path, sizeof path, "%s/%ld/%s.metrics", j->sdir, j->id, j->reps[i].task);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        ssize_t n;
        if (fseek(f, j->reps[i].moff, SEEK_SET) == 0)
            while ((n = getline(&line, &cap, f)) > 0 && line[n - 1] == '\n') {
                json_t *p = kilnd_train_metrics_parse(line, (size_t)n - 1);
                if (p) kiln_trials_report(j->study->st, t, p);
                json_decref(p);
                j->reps[i].moff += (long)n; /* a line cut short waits for its end */
                any = true;
            }
        free(line);
        fclose(f);
    }
    return any;
}

/* A trial's Slurm job ended (`state`): the trial ends in its study (read
 * to its last report first), and the job ends when the study does. */
static void trial_ended(ssup *s, sjob *j, const char *state, const char *reason)
{
    sstudy *st = j->study;
    kiln_trial *t = kiln_study_find(st->st, j->trial);
    kiln_trial_state end = KILN_TRIAL_FAILED;
    char msg[1024] = "";
    const char *pol = NULL; /* a failure's restart policy, when it retries */
    if (st->cancelling) {
        end = KILN_TRIAL_CANCELLED;
    } else if (j->requeue && j->restart) {
        /* restartPolicy Always: a replica ended with 0 before the master */
        snprintf(msg, sizeof msg, "%s", j->requeue);
        pol = "Always";
    } else if (j->requeue) {
        end = KILN_TRIAL_QUEUED; /* a drain: it runs again later, same values */
        snprintf(msg, sizeof msg, "%s", j->requeue);
    } else if (j->deadline) {
        snprintf(msg, sizeof msg, "%s", j->deadline);
    } else if (j->stop_why) {
        end = KILN_TRIAL_SUCCEEDED; /* stopped early: a finished trial */
        snprintf(msg, sizeof msg, "%s", j->stop_why);
    } else if (strcmp(state, "COMPLETED") == 0) {
        end = KILN_TRIAL_SUCCEEDED;
    } else if (strcmp(state, "TIMEOUT") == 0) {
        /* maxRunningTime (each trial's --time): as on one machine, a trial
         * past it cancels the job, and the other trials stop */
        end = KILN_TRIAL_CANCELLED;
        st->cancelling = true;
        snprintf(msg, sizeof msg, "the trial ran longer than maxRunningTime; the job is cancelled");
        kiln_store_job_transition(s->d->store, st->project, st->job_id, KILN_STATE_MASK(RUNNING),
                                  KILN_STATE_CANCELLING, NULL, kiln_now_ns(), NULL);
    } else {
        int code = 0, fi = first_failure(j, &code);
        bool has_reason = reason && *reason && strcmp(reason, "None") != 0;
        char rf[300] = "";
        if (fi >= 0)
            snprintf(rf, sizeof rf, "The replica %s exited with a non-zero status of %d. ",
                     j->reps[fi].task, code);
        snprintf(msg, sizeof msg, "%sSlurm job %ld ended %s%s%s", rf, j->id, state,
                 has_reason ? ": " : "", has_reason ? reason : "");
        /* the restart policy of the replica that failed first, as on one
         * machine: its replicas run again (a new Slurm job), same trial */
        if (fi < 0 && (code = batch_exit(j)) <= 0) code = 137;
        const char *p =
            kiln_job_restart_policy(j->tjob, fi >= 0 ? j->reps[fi].role : KILN_ROLE_MASTER);
        if (kiln_restart_policy_retries(p, code)) pol = p;
    }
    int limit = kiln_job_backoff_limit(j->tjob);
    if (pol && t && j->failures < limit) {
        trial_reports(j, t);
        kilnd_event(s->d, j->project, j->job_id, "WARNING",
                    "Trial %d: %s; submitting it again (restart policy %s, restart %d of at most "
                    "%d)",
                    j->trial, msg, pol, j->failures + 1, limit);
        st->running--;
        j->study = NULL; /* the new run is the trial's record from here */
        submit_trial(s, st, t, j->failures + 1);
        if (st->running == 0 && (st->cancelling || kiln_study_finished(st->st))) study_end(s, st);
        return;
    }
    if (pol && strlen(msg) + 80 < sizeof msg)
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                 "; the backoff limit (%d restarts) is reached", limit);
    if (t) kiln_trials_read(st->st, t, j->dir, j->tjob->training_input.job_dir);
    if (t) trial_reports(j, t);
    if (t) kiln_study_end(st->st, t, end, kiln_now_ns());
    st->running--;
    kilnd_event(s->d, j->project, j->job_id, end == KILN_TRIAL_FAILED ? "ERROR" : "INFO",
                "Trial %d ended %s (Slurm job %ld: %s)%s%s", j->trial, kiln_trials_end_word(end),
                j->id, state, msg[0] ? ": " : "", msg);
    j->study = NULL; /* its record is the study's from here */
    study_save(s, st);
    if (st->running == 0 && (st->cancelling || kiln_study_finished(st->st))) study_end(s, st);
}

/* One trial's Slurm job against what squeue said: its reports, early
 * stopping, per-trial deadline, cancel and drain; true when it is done. */
static bool follow_trial(ssup *s, sjob *j, json_t *sj, int64_t now)
{
    kilnd *d = s->d;
    sstudy *st = j->study;
    const char *sstate = sj ? json_string_value(json_object_get(sj, "job_state")) : NULL;
    const char *reason = sj ? json_string_value(json_object_get(sj, "state_reason")) : NULL;
    if (!sstate) sstate = "";
    kiln_trial *t = kiln_study_find(st->st, j->trial);
    bool running = strcmp(sstate, "RUNNING") == 0 || strcmp(sstate, "COMPLETING") == 0;
    if (running && !j->start_ns) j->start_ns = now;
    if (t && running &&
        (kiln_trials_read(st->st, t, j->dir, j->tjob->training_input.job_dir) |
         trial_reports(j, t)))
        study_save(s, st); /* reports are recorded at once, with their offsets */
    char why[256];
    if (t && running && !j->stop_why && !j->term_sent &&
        kiln_trials_stop_early(st->st, t, &st->job->training_input.hyperparameters, why,
                               sizeof why)) {
        j->stop_why = strdup(why);
        kilnd_event(d, j->project, j->job_id, "INFO", "Trial %d is stopped early: %s", j->trial,
                    why);
    }
    if (running && !j->deadline && !j->term_sent &&
        kiln_exec_limit_passed(j->tjob, j->start_ns, now, KILN_LIMIT_ACTIVE_DEADLINE, why,
                               sizeof why) == KILN_LIMIT_ACTIVE_DEADLINE)
        j->deadline = strdup(why);
    /* restartPolicy Always, as on one machine and for plain jobs */
    int wi = running && !j->requeue && !j->term_sent ? always_exited(j, j->tjob) : -1;
    if (wi >= 0 && asprintf(&j->requeue,
                            "The replica %s exited with status 0 before the master (restart "
                            "policy Always)",
                            j->reps[wi].task) >= 0) {
        j->restart = true;
        study_save(s, st);
    } else if (wi >= 0) {
        j->requeue = NULL;
    }
    bool stop = st->cancelling || j->requeue || j->deadline || j->stop_why;
    if (stop && !j->term_sent && sj && !is_final(sstate)) {
        scancel(j->id, running); /* SIGTERM to the replicas first when they run */
        j->term_sent = true;
        j->killed = !running;
        j->kill_at_ns = now + (int64_t)d->grace_ms * 1000000;
    } else if (stop && j->term_sent && !j->killed && now >= j->kill_at_ns) {
        scancel(j->id, false);
        j->killed = true;
    }
    if (!sj) { /* Slurm forgot it, or does not show it yet */
        if (++j->missing < 3) return false;
        int code = batch_exit(j);
        trial_ended(s, j, code == 0 ? "COMPLETED" : "FAILED",
                    code < 0 ? "Slurm no longer knows the job and its batch script left no exit "
                               "status"
                             : NULL);
        return true;
    }
    j->missing = 0;
    if (strcmp(sstate, j->sstate) != 0) {
        snprintf(j->sstate, sizeof j->sstate, "%s", sstate);
        study_save(s, st);
        if (!is_final(sstate))
            kilnd_event(d, j->project, j->job_id, "INFO", "Trial %d: Slurm job %ld %s", j->trial,
                        j->id, sstate);
    }
    if (is_final(sstate)) {
        trial_ended(s, j, sstate, reason);
        return true;
    }
    return false;
}

/* A previous kilnd's tuning job: its study from the runtime record, its
 * trials' Slurm jobs followed again; trials that were running without a
 * recorded Slurm job run again with the same values. */
static void study_reconcile(ssup *s, kiln_job_record *r, json_t *rt)
{
    char why[300];
    sstudy *st = study_new(s, r);
    if (!st) return;
    st->st = kiln_trials_open(s->d->store, r->project, r->job->job_id, st->job, r->runtime, false,
                              why, sizeof why);
    if (!st->st) {
        study_free(s, st);
        return;
    }
    st->cancelling = r->job->state == KILN_STATE_CANCELLING;
    size_t k;
    json_t *run;
    json_array_foreach(json_object_get(rt, "slurmTrials"), k, run)
    {
        int id = (int)json_integer_value(json_object_get(run, "trial"));
        json_int_t sid = json_integer_value(json_object_get(run, "slurmJobId"));
        kiln_trial *t = kiln_study_find(st->st, id);
        if (!t || t->state != KILN_TRIAL_RUNNING || sid <= 0) continue;
        sjob *j = calloc(1, sizeof *j);
        if (!j || !(j->project = strdup(r->project)) || !(j->job_id = strdup(r->job->job_id)) ||
            !(j->tjob = kiln_trials_job(st->job, id, NULL)) ||
            !reps_read(s, j, json_object_get(run, "replicas"))) {
            sjob_free(s, j);
            continue;
        }
        j->study = st;
        j->trial = id;
        j->id = (long)sid;
        j->start_ns = json_integer_value(json_object_get(run, "start"));
        const char *ss = json_string_value(json_object_get(run, "slurmState"));
        snprintf(j->sstate, sizeof j->sstate, "%s", ss ? ss : "");
        const char *rq = json_string_value(json_object_get(run, "slurmRequeue"));
        if (rq) j->requeue = strdup(rq);
        j->restart = json_is_true(json_object_get(run, "slurmRestart"));
        j->failures = (int)json_integer_value(json_object_get(run, "failures"));
        sjob_dirs(s, j);
        st->running++;
        j->next = s->jobs;
        s->jobs = j;
        kilnd_event(s->d, r->project, r->job->job_id, "INFO",
                    "kilnd restarted: following trial %d's Slurm job %ld again", id, j->id);
    }
    for (size_t i = 0; i < kiln_study_trial_count(st->st); i++) {
        kiln_trial *t = kiln_study_trial(st->st, i);
        bool followed = false;
        for (sjob *j = s->jobs; j && !followed; j = j->next)
            followed = j->study == st && j->trial == t->id;
        if (t->state == KILN_TRIAL_RUNNING && !followed)
            kiln_study_end(st->st, t, KILN_TRIAL_QUEUED, 0);
    }
    study_save(s, st);
}

/* ---------- elastic PyTorchJobs: each worker a Slurm job of its own ---------- */

/* An elastic PyTorchJob (Workers only) while it runs. Each worker is a
 * Slurm job of its own (kiln.P.J.worker-K.N, N = its Slurm jobs so far), so
 * that Slurm grants each when it has room: Worker 0 first (it hosts the
 * c10d rendezvous on its node), the others once its node is known, with
 * that endpoint; workers past minReplicas wait in Slurm's queue and join
 * when granted (torchrun's agents re-form the group). What a worker's end
 * means is decided by src/exec/slurm/elastic.c; this section only submits,
 * follows and stops the Slurm jobs. */
typedef struct sgroup {
    char *project, *job_id;
    kiln_job *job;
    kiln_elastic_rules rules;
    kiln_ew *w;             /* rules.max workers: w[K] is PyTorch's Worker K */
    char rdzv[256];         /* Worker 0's node address, once its task has said */
    char rdzv_was[256];     /* Worker 0's address before it was started again: the
                             * running workers' endpoint, until the new one is known */
    int *runs;              /* per worker: its Slurm jobs so far (kiln.P.J.worker-K.RUNS) */
    int rdzv_port;          /* Worker 0's port: the rendezvous (c10d store) port */
    int restarts, failures; /* the job record's, kept */
    bool cancelling;
    kiln_job_state end; /* ending (SUCCEEDED, FAILED, CANCELLED) once no worker runs; 0: not */
    char *end_msg;
    kilnd_fail_reason fail;
    struct sgroup *next;
} sgroup;

static bool el_tracked(ssup *s, const char *project, const char *id)
{
    for (sgroup *g = s->groups; g; g = g->next)
        if (strcmp(g->project, project) == 0 && strcmp(g->job_id, id) == 0) return true;
    return false;
}

static void el_free(ssup *s, sgroup *g)
{
    if (!g) return;
    for (sgroup **l = &s->groups; *l; l = &(*l)->next)
        if (*l == g) {
            *l = g->next;
            break;
        }
    for (int pass = 0; pass < 2; pass++) /* no worker points at it any more */
        for (sjob *j = pass ? s->fresh : s->jobs; j; j = j->next)
            if (j->el == g) j->el = NULL;
    kiln_job_free(g->job);
    free(g->project);
    free(g->job_id);
    free(g->w);
    free(g->runs);
    free(g->end_msg);
    free(g);
}

static sgroup *el_new(ssup *s, const kiln_job_record *rec)
{
    sgroup *g = calloc(1, sizeof *g);
    if (!g || !(g->project = strdup(rec->project)) || !(g->job_id = strdup(rec->job->job_id)) ||
        !(g->job = kiln_job_clone(rec->job))) {
        el_free(s, g);
        return NULL;
    }
    g->rules = kiln_elastic_rules_of(g->job);
    g->restarts = rec->restarts;
    g->failures = rec->failures;
    if (!(g->w = calloc((size_t)g->rules.max, sizeof *g->w)) ||
        !(g->runs = calloc((size_t)g->rules.max, sizeof *g->runs))) {
        el_free(s, g);
        return NULL;
    }
    g->next = s->groups;
    s->groups = g;
    return g;
}

/* Worker K's Slurm job being followed, or NULL. */
static sjob *el_job(ssup *s, sgroup *g, int k)
{
    for (int pass = 0; pass < 2; pass++)
        for (sjob *j = pass ? s->fresh : s->jobs; j; j = j->next)
            if (j->el == g && j->worker == k) return j;
    return NULL;
}

/* Worker K's replica: Worker 0 is kiln's master (workersOnly), Worker K
 * kiln's worker K-1, as on one machine. */
static void el_rep(int k, srep *r)
{
    r->role = k == 0 ? KILN_ROLE_MASTER : KILN_ROLE_WORKER;
    r->index = k == 0 ? 0 : k - 1;
    kiln_exec_task_name(r->role, r->index, r->task);
}

/* The tasks whose environment a worker's replica gets: Worker 0 (the
 * rendezvous host) and itself; the others join through the rendezvous,
 * not through an address list. Returns their count, *self its place. */
static size_t el_tasks(const sjob *j, kiln_exec_task *tasks, size_t *self)
{
    const srep *me = &j->reps[0];
    kiln_exec_task mine = {
        .role = me->role, .index = me->index, .host = "@KILN_HOST_0@", .port = me->port};
    tasks[0] = mine;
    *self = 0;
    if (j->worker == 0) return 1;
    tasks[0] = (kiln_exec_task){
        .role = KILN_ROLE_MASTER, .index = 0, .host = j->el->rdzv, .port = j->el->rdzv_port};
    tasks[1] = mine;
    *self = 1;
    return 2;
}

/* The runtime record: every worker (its state, restarts and Slurm job),
 * Worker 0's address, and kilnStatus.elasticWorkers as on one machine. */
static void el_save(ssup *s, sgroup *g)
{
    json_t *reps = json_array(), *ws = json_array();
    for (int k = 0; reps && ws && k < g->rules.max; k++) {
        json_t *o =
            json_pack("{s:i,s:s,s:i,s:i}", "worker", k, "state", kiln_ew_state_name(g->w[k].state),
                      "restarts", g->w[k].restarts, "runs", g->runs[k]);
        sjob *j = el_job(s, g, k);
        if (o && j) {
            json_t *one = json_array();
            reps_json(j, one);
            reps_json(j, reps);
            json_object_set_new(o, "slurmJobId", json_integer((json_int_t)j->id));
            json_object_set_new(o, "slurmState", json_string(j->sstate));
            json_object_set_new(o, "replicas", one ? one : json_array());
            if (j->requeue) json_object_set_new(o, "slurmRequeue", json_string(j->requeue));
        }
        if (o) json_array_append_new(ws, o);
    }
    json_t *el = json_pack("{s:s,s:s,s:i,s:o}", "rdzvHost", g->rdzv, "rdzvHostWas", g->rdzv_was,
                           "rdzvPort", g->rdzv_port, "workers", ws ? ws : json_array());
    json_t *rt =
        json_pack("{s:s,s:s,s:o,s:o,s:{s:i,s:i,s:i}}", "executor", "slurm", "slurmPartition",
                  s->d->slurm.partition, "replicas", reps ? reps : json_array(), "slurmElastic",
                  el ? el : json_object(), "elasticWorkers", "current",
                  kiln_elastic_running(g->w, (size_t)g->rules.max), "wanted", g->rules.max, "min",
                  g->rules.min);
    char *txt = rt ? json_dumps(rt, JSON_COMPACT) : NULL;
    if (txt)
        kiln_store_job_set_runtime(s->d->store, g->project, g->job_id, g->restarts, g->failures,
                                   txt);
    free(txt);
    json_decref(rt);
}

/* The job ends as `end` once no worker has a Slurm job (el_steps): the
 * others are stopped first (follow_worker). The first word stands. */
static void el_end(sgroup *g, kiln_job_state end, kilnd_fail_reason fail, const char *msg)
{
    if (g->end) return;
    g->end = end;
    g->fail = fail;
    free(g->end_msg);
    g->end_msg = msg ? strdup(msg) : NULL;
}

/* Worker K's plan: its role's (Workers past 0 have Worker 0's shape when
 * the job has one Worker replica only), one task. false: none. */
static bool el_plan(ssup *s, sgroup *g, int k, kiln_replica_plan *plan)
{
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = kiln_catalog_plan(s->d->catalog, g->job, plans), m = np, w = np;
    for (size_t p = 0; p < np; p++) {
        if (plans[p].role == KILN_ROLE_MASTER) m = p;
        if (plans[p].role == KILN_ROLE_WORKER) w = p;
    }
    size_t use = k > 0 && w < np ? w : m;
    if (use >= np) return false;
    *plan = plans[use];
    plan->role = k == 0 ? KILN_ROLE_MASTER : KILN_ROLE_WORKER;
    plan->count = 1;
    return true;
}

/* Submits Worker K as a Slurm job of its own, or adopts one of its name
 * (a kilnd that died between its sbatch and the runtime record). */
static void el_submit(ssup *s, sgroup *g, int k, json_t *byname)
{
    kilnd *d = s->d;
    char name[300], why[1024] = "";
    kiln_replica_plan plan;
    snprintf(name, sizeof name, "kiln.%s.%s.worker-%d.%d", g->project, g->job_id, k, g->runs[k]);
    json_t *prev = byname ? json_object_get(byname, name) : NULL;
    sjob *j = calloc(1, sizeof *j);
    if (!j || !(j->project = strdup(g->project)) || !(j->job_id = strdup(g->job_id))) {
        sjob_free(s, j);
        return;
    }
    j->el = g;
    j->worker = k;
    sjob_dirs(s, j);
    if (prev) {
        if (!adopt(s, j, prev)) {
            sjob_free(s, j);
            el_end(g, KILN_STATE_FAILED, KILND_FAIL_START,
                   "an elastic worker's Slurm job exists but its spec is unreadable");
            return;
        }
        kilnd_event(d, g->project, g->job_id, "WARNING",
                    "Slurm job %ld (%s, %s) was submitted by a kilnd that stopped before "
                    "recording it: following it, not submitting again",
                    j->id, name, j->sstate);
    } else {
        if (!(j->reps = calloc(1, sizeof *j->reps))) {
            sjob_free(s, j);
            return;
        }
        srep *r = &j->reps[j->n++];
        el_rep(k, r);
        /* Worker 0 started again keeps its port: on the same node its
         * endpoint is the one the running workers were given */
        r->port =
            k == 0 && g->rdzv_port > 0 && port_claim(s, g->rdzv_port) ? g->rdzv_port : port_take(s);
        if (r->port < 0) { /* waits for a port, as a plain job does */
            sjob_free(s, j);
            return;
        }
        if (!el_plan(s, g, k, &plan)) {
            sjob_free(s, j);
            el_end(g, KILN_STATE_FAILED, KILND_FAIL_START,
                   "the job has no replicas to run in this catalog");
            return;
        }
        if (k == 0) g->rdzv_port = r->port;
        if (!launch(s, j, g->job, g->w[k].restarts, &plan, 1, name, why, sizeof why)) {
            kilnd_event(d, g->project, g->job_id, "ERROR", "Worker %d: %s", k, why);
            sjob_free(s, j);
            el_end(g, KILN_STATE_FAILED, KILND_FAIL_START, why);
            return;
        }
        snprintf(j->sstate, sizeof j->sstate, "PENDING");
        kilnd_event(d, g->project, g->job_id, "INFO",
                    "Worker %d (%s): submitted to Slurm as job %ld (%s)%s", k, j->reps[0].task,
                    j->id, name,
                    k == 0 ? "; it hosts the rendezvous, the other workers follow once its node "
                             "is known"
                           : "");
    }
    if (k == 0 && j->n) g->rdzv_port = j->reps[0].port;
    g->w[k].state = strcmp(j->sstate, "RUNNING") == 0 ? KILN_EW_RUNNING : KILN_EW_PENDING;
    j->next = s->fresh;
    s->fresh = j;
    el_save(s, g);
}

/* A QUEUED elastic job starts: its workers are submitted by el_steps; the
 * job stays QUEUED until minReplicas of them run. */
static void el_begin(ssup *s, kiln_job_record *rec)
{
    kilnd *d = s->d;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t np = runnable(s, rec, plans);
    if (np == 0) return;
    sgroup *g = el_new(s, rec);
    if (!g) return;
    el_save(s, g);
    kilnd_event(d, rec->project, rec->job->job_id, "INFO",
                "Elastic job: each of its %d to %d workers is a Slurm job of its own, granted "
                "as Slurm has room; the job runs once %d run%s",
                g->rules.min, g->rules.max, g->rules.min, g->rules.min == 1 ? "s" : "");
}

/* Worker j's Slurm job ended (`state`, Slurm's word): what it means for
 * the job (elastic.c decides). */
static void el_worker_ended(ssup *s, sjob *j, const char *state, const char *reason)
{
    sgroup *g = j->el;
    int k = j->worker;
    char msg[600], line[900];
    j->el = NULL; /* no longer the worker's Slurm job in the record */
    g->runs[k]++; /* its next Slurm job has a name of its own */
    if (j->requeue && !g->end && !g->cancelling) { /* stopped for Worker 0's new endpoint */
        g->w[k].state = KILN_EW_WAIT;
        kilnd_event(s->d, g->project, g->job_id, "INFO",
                    "Worker %d (%s): Slurm job %ld ended %s; %s", k, j->n ? j->reps[0].task : "?",
                    j->id, state, j->requeue);
        el_save(s, g);
        return;
    }
    if (g->end || g->cancelling) { /* stopped with the job */
        if (g->w[k].state == KILN_EW_PENDING || g->w[k].state == KILN_EW_RUNNING)
            g->w[k].state = KILN_EW_WAIT;
        kilnd_event(s->d, g->project, g->job_id, "INFO", "Worker %d (%s): Slurm job %ld ended %s",
                    k, j->n ? j->reps[0].task : "?", j->id, state);
        el_save(s, g);
        return;
    }
    if (strcmp(state, "TIMEOUT") == 0) { /* maxRunningTime, each worker's --time */
        g->w[k].state = KILN_EW_LEFT;
        el_end(g, KILN_STATE_CANCELLED, KILND_FAIL_START,
               "The job ran longer than maxRunningTime; cancelled (a worker's Slurm job: "
               "TIMEOUT)");
        el_save(s, g);
        return;
    }
    int code = 0;
    struct timespec at;
    if (!j->n || !rep_exit(j, 0, &code, &at)) {
        code = batch_exit(j);
        if (code < 0) code = strcmp(state, "COMPLETED") == 0 ? 0 : 137;
    }
    /* Slurm took it (scancel outside kiln, a node failure, preemption):
     * lost, counted as killed, whatever its program said to the signal */
    if (strcmp(state, "COMPLETED") != 0 && code == 0) code = 137;
    kiln_elastic_verdict v = kiln_elastic_worker_ended(&g->rules, g->w, (size_t)g->rules.max,
                                                       (size_t)k, code, msg, sizeof msg);
    bool has_reason = reason && *reason && strcmp(reason, "None") != 0;
    snprintf(line, sizeof line, "Worker %d (%s, Slurm job %ld ended %s%s%s): %s", k,
             j->n ? j->reps[0].task : "?", j->id, state, has_reason ? ": " : "",
             has_reason ? reason : "", msg);
    kilnd_event(s->d, g->project, g->job_id, code ? "WARNING" : "INFO", "%s", line);
    if (k == 0 && g->w[0].state == KILN_EW_WAIT && g->rdzv[0]) {
        /* started again, maybe elsewhere: the others wait for its address */
        snprintf(g->rdzv_was, sizeof g->rdzv_was, "%s", g->rdzv);
        g->rdzv[0] = '\0';
    }
    if (v == KILN_EV_SUCCEED) el_end(g, KILN_STATE_SUCCEEDED, KILND_FAIL_START, NULL);
    if (v == KILN_EV_FAIL) el_end(g, KILN_STATE_FAILED, KILND_FAIL_REPLICA_EXIT, line);
    el_save(s, g);
}

/* Worker 0, started again, runs on `g->rdzv`: the workers given its old
 * address (another node, or another port) are stopped and submitted
 * again with the new one (not counted as restarts). */
static void el_moved(ssup *s, sgroup *g, int64_t now)
{
    if (!g->rdzv_was[0]) return;
    bool moved = strcmp(g->rdzv_was, g->rdzv) != 0;
    g->rdzv_was[0] = '\0';
    if (!moved) return;
    for (int k = 1; k < g->rules.max; k++) {
        sjob *j = el_job(s, g, k);
        if (!j || j->requeue || j->term_sent) continue;
        if (asprintf(&j->requeue,
                     "submitting it again with Worker 0's new rendezvous endpoint %s:%d", g->rdzv,
                     g->rdzv_port) < 0) {
            j->requeue = NULL;
            continue;
        }
        j->kill_at_ns = now;
        kilnd_event(s->d, g->project, g->job_id, "WARNING",
                    "Worker %d (%s): Worker 0 moved to %s; stopping Slurm job %ld (SIGTERM, "
                    "scancel after %d ms)",
                    k, j->n ? j->reps[0].task : "?", g->rdzv, j->id, s->d->grace_ms);
    }
}

/* One worker's Slurm job against what squeue said: its state, Worker 0's
 * address, the stop when the job ends; true when it is done with. */
static bool follow_worker(ssup *s, sjob *j, json_t *sj, int64_t now)
{
    kilnd *d = s->d;
    sgroup *g = j->el;
    int k = j->worker;
    const char *sstate = sj ? json_string_value(json_object_get(sj, "job_state")) : NULL;
    const char *reason = sj ? json_string_value(json_object_get(sj, "state_reason")) : NULL;
    if (!sstate) sstate = "";
    bool stop = g->cancelling || g->end || j->requeue;
    bool running = strcmp(sstate, "RUNNING") == 0 || strcmp(sstate, "COMPLETING") == 0;
    if (stop && !j->term_sent && sj && !is_final(sstate)) {
        scancel(j->id, running); /* SIGTERM to its replica first when it runs */
        j->term_sent = true;
        j->killed = !running;
        j->kill_at_ns = now + (int64_t)d->grace_ms * 1000000;
    } else if (stop && j->term_sent && !j->killed && now >= j->kill_at_ns) {
        scancel(j->id, false);
        j->killed = true;
    }
    if (!sj) { /* Slurm forgot it, or does not show it yet */
        if (++j->missing < 3) return false;
        el_worker_ended(s, j, batch_exit(j) == 0 ? "COMPLETED" : "FAILED",
                        "Slurm no longer knows the job");
        return true;
    }
    j->missing = 0;
    if (strcmp(sstate, j->sstate) != 0) {
        bool was_running =
            strcmp(j->sstate, "RUNNING") == 0 || strcmp(j->sstate, "COMPLETING") == 0;
        snprintf(j->sstate, sizeof j->sstate, "%s", sstate);
        if (!is_final(sstate)) g->w[k].state = running ? KILN_EW_RUNNING : KILN_EW_PENDING;
        if (was_running && !running && !is_final(sstate) && !stop &&
            asprintf(&j->requeue,
                     "Slurm requeued its job (preemption, scontrol requeue): submitting it again "
                     "as a new Slurm job of its own, not counted as a restart") >= 0) {
            /* Slurm would run the same job again, in the same run directory
             * as the run it stopped: kilnd cancels it and submits the
             * worker anew instead, as for a moved endpoint; Worker 0's
             * new address is then compared with the one the others have */
            kilnd_event(d, g->project, g->job_id, "WARNING", "Worker %d (%s): Slurm job %ld: %s", k,
                        j->n ? j->reps[0].task : "?", j->id, j->requeue);
            if (k == 0 && g->rdzv[0]) {
                snprintf(g->rdzv_was, sizeof g->rdzv_was, "%s", g->rdzv);
                g->rdzv[0] = '\0';
            }
        } else if (was_running && !running && !is_final(sstate) && !stop) {
            j->requeue = NULL;
        }
        if (!is_final(sstate))
            kilnd_event(d, g->project, g->job_id, "INFO", "Worker %d (%s): Slurm job %ld %s%s%s%s",
                        k, j->n ? j->reps[0].task : "?", j->id, sstate,
                        reason && strcmp(reason, "None") ? " (" : "",
                        reason && strcmp(reason, "None") ? reason : "",
                        reason && strcmp(reason, "None") ? ")" : "");
        el_save(s, g);
    }
    if (k == 0 && running && !g->rdzv[0] && j->n) { /* its task wrote "ADDR NODE" */
        char path[PATH_MAX + 160], addr[256];
        snprintf(path, sizeof path, "%s/%ld/hosts/%s", j->sdir, j->id, j->reps[0].task);
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%255s", addr) == 1) {
            snprintf(g->rdzv, sizeof g->rdzv, "%s", addr);
            kilnd_event(d, g->project, g->job_id, "INFO",
                        "Worker 0 runs on %s: the rendezvous endpoint is %s:%d, which the other "
                        "workers are given",
                        addr, addr, g->rdzv_port);
            el_moved(s, g, now);
            el_save(s, g);
        }
        if (f) fclose(f);
    }
    if (is_final(sstate)) {
        el_worker_ended(s, j, sstate, reason);
        return true;
    }
    return false;
}

/* Every elastic job once per tick, after its workers were followed: the
 * workers to submit, the job's RUNNING, its limits, and its end once no
 * worker has a Slurm job left. `byname`: squeue's jobs by name. */
static void el_steps(ssup *s, json_t *byname, int64_t now)
{
    kilnd *d = s->d;
    for (sgroup *g = s->groups, *next; g; g = next) {
        next = g->next;
        kiln_job_record *r = NULL;
        if (kiln_store_job_get(d->store, g->project, g->job_id, &r) != KILN_OK) {
            el_free(s, g);
            continue;
        }
        kiln_job_state st = r->job->state;
        const kiln_training_input *ti = &r->job->training_input;
        char why[256];
        if (st == KILN_STATE_CANCELLING || ((1u << st) & KILN_STATES_TERMINAL))
            g->cancelling = true;
        if (!g->cancelling && !g->end && st == KILN_STATE_QUEUED && ti->has_scheduling &&
            ti->scheduling.has_max_wait_time &&
            now - r->create_ns > ti->scheduling.max_wait_time.seconds * 1000000000LL) {
            snprintf(why, sizeof why, "still queued after maxWaitTime (%llds); cancelled",
                     (long long)ti->scheduling.max_wait_time.seconds);
            el_end(g, KILN_STATE_CANCELLED, KILND_FAIL_START, why);
        }
        if (!g->cancelling && !g->end && st == KILN_STATE_RUNNING &&
            kiln_exec_limit_passed(r->job, r->start_ns, now, KILN_LIMIT_ACTIVE_DEADLINE, why,
                                   sizeof why) == KILN_LIMIT_ACTIVE_DEADLINE)
            el_end(g, KILN_STATE_FAILED, KILND_FAIL_DEADLINE, why);
        for (int k = 0; !g->cancelling && !g->end && byname && k < g->rules.max; k++)
            if (kiln_elastic_should_submit(g->w, (size_t)g->rules.max, (size_t)k, g->rdzv[0]))
                el_submit(s, g, k, byname);
        int run = kiln_elastic_running(g->w, (size_t)g->rules.max);
        if (!g->cancelling && !g->end &&
            kiln_elastic_is_running(&g->rules, g->w, (size_t)g->rules.max) &&
            kiln_store_job_transition(d->store, g->project, g->job_id,
                                      KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING),
                                      KILN_STATE_RUNNING, NULL, now, NULL) == KILN_OK)
            kilnd_event(d, g->project, g->job_id, "INFO",
                        "Job RUNNING: %d of at most %d workers run (minReplicas %d)", run,
                        g->rules.max, g->rules.min);
        bool live = false;
        for (int k = 0; k < g->rules.max && !live; k++)
            live = el_job(s, g, k) != NULL;
        if ((g->cancelling || g->end) && !live) { /* every worker's Slurm job is gone */
            kiln_job_state end = g->cancelling ? KILN_STATE_CANCELLED : g->end;
            const char *msg = g->cancelling ? NULL : g->end_msg;
            if (end == KILN_STATE_SUCCEEDED)
                kiln_store_job_transition(d->store, g->project, g->job_id,
                                          KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING),
                                          KILN_STATE_RUNNING, NULL, now, NULL);
            if (kiln_store_job_transition(d->store, g->project, g->job_id, ACTIVE, end, msg, now,
                                          NULL) == KILN_OK) {
                if (end == KILN_STATE_FAILED) d->failures_total[g->fail]++;
                kilnd_event(d, g->project, g->job_id, end == KILN_STATE_FAILED ? "ERROR" : "INFO",
                            "Job %s%s%s", kiln_job_state_name(end), msg ? ": " : "",
                            msg ? msg : "");
            }
            el_save(s, g);
            el_free(s, g);
        }
        kiln_job_record_free(r);
    }
}

/* A previous kilnd's elastic job: its workers' Slurm jobs followed again
 * from the runtime record; workers it had not submitted are submitted by
 * el_steps (a Slurm job of their name is adopted, not submitted twice). */
static void el_reconcile(ssup *s, kiln_job_record *r, json_t *rt)
{
    sgroup *g = el_new(s, r);
    if (!g) return;
    json_t *el = json_object_get(rt, "slurmElastic"), *o;
    const char *rh = json_string_value(json_object_get(el, "rdzvHost"));
    snprintf(g->rdzv, sizeof g->rdzv, "%s", rh ? rh : "");
    rh = json_string_value(json_object_get(el, "rdzvHostWas"));
    snprintf(g->rdzv_was, sizeof g->rdzv_was, "%s", rh ? rh : "");
    g->rdzv_port = (int)json_integer_value(json_object_get(el, "rdzvPort"));
    /* (its port is marked held by worker 0's Slurm job, when it has one;
     * else el_submit claims it again for worker 0) */
    g->cancelling = r->job->state == KILN_STATE_CANCELLING;
    size_t i;
    json_array_foreach(json_object_get(el, "workers"), i, o)
    {
        int k = (int)json_integer_value(json_object_get(o, "worker"));
        if (k < 0 || k >= g->rules.max) continue;
        g->w[k].state = kiln_ew_state_parse(json_string_value(json_object_get(o, "state")));
        g->w[k].restarts = (int)json_integer_value(json_object_get(o, "restarts"));
        g->runs[k] = (int)json_integer_value(json_object_get(o, "runs"));
        json_int_t sid = json_integer_value(json_object_get(o, "slurmJobId"));
        if (g->w[k].state != KILN_EW_PENDING && g->w[k].state != KILN_EW_RUNNING) continue;
        sjob *j = calloc(1, sizeof *j);
        if (sid <= 0 || !j || !(j->project = strdup(r->project)) ||
            !(j->job_id = strdup(r->job->job_id)) ||
            !reps_read(s, j, json_object_get(o, "replicas")) || j->n == 0) {
            sjob_free(s, j);
            g->w[k].state = KILN_EW_WAIT; /* submitted again, or adopted by name */
            continue;
        }
        j->el = g;
        j->worker = k;
        j->id = (long)sid;
        const char *ss = json_string_value(json_object_get(o, "slurmState"));
        snprintf(j->sstate, sizeof j->sstate, "%s", ss ? ss : "");
        const char *rq = json_string_value(json_object_get(o, "slurmRequeue"));
        if (rq) j->requeue = strdup(rq); /* being stopped for Worker 0's new endpoint */
        sjob_dirs(s, j);
        j->next = s->jobs;
        s->jobs = j;
        kilnd_event(s->d, r->project, r->job->job_id, "INFO",
                    "kilnd restarted: following worker %d's Slurm job %ld again (last seen %s)", k,
                    j->id, j->sstate[0] ? j->sstate : "?");
    }
    el_save(s, g);
}

/* squeue --json: the leaders of the heterogeneous jobs (and plain jobs) by
 * id, or NULL when squeue could not answer (then nothing is decided). */
static json_t *squeue_all(json_t **byname)
{
    char *out = NULL;
    int rc = kiln_slurm_run((char *[]){"squeue", "--json", NULL}, &out, 20);
    json_t *doc = rc == 0 && out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    if (!doc) return NULL;
    json_t *byid = json_object(), *names = json_object(), *jj;
    size_t i;
    json_array_foreach(json_object_get(doc, "jobs"), i, jj)
    {
        json_int_t id = json_integer_value(json_object_get(jj, "job_id"));
        json_int_t het = json_integer_value(json_object_get(jj, "het_job_id"));
        if (het && het != id) continue; /* a later component: the leader speaks for the job */
        char k[32];
        snprintf(k, sizeof k, "%lld", (long long)id);
        json_object_set(byid, k, jj);
        const char *nm = json_string_value(json_object_get(jj, "name"));
        if (nm && strncmp(nm, "kiln.", 5) == 0) json_object_set(names, nm, jj);
    }
    json_decref(doc);
    *byname = names;
    return byid;
}

/* What a previous kilnd handed to Slurm: followed again, never resubmitted. */
static void reconcile(ssup *s)
{
    kilnd *d = s->d;
    kiln_job_record **v = NULL;
    size_t n = 0;
    if (kiln_store_jobs_by_state(d->store, ACTIVE, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++) {
        kiln_job_record *r = v[i];
        json_t *rt = r->runtime ? json_loads(r->runtime, 0, NULL) : NULL;
        json_int_t id = json_integer_value(json_object_get(rt, "slurmJobId"));
        const char *ex = json_string_value(json_object_get(rt, "executor"));
        if (r->job->state != KILN_STATE_QUEUED && json_is_object(json_object_get(rt, "study")) &&
            ex && strcmp(ex, "slurm") == 0) { /* a tuning job: its trials' Slurm jobs */
            study_reconcile(s, r, rt);
            json_decref(rt);
            continue;
        }
        if (json_is_object(json_object_get(rt, "slurmElastic")) && ex &&
            strcmp(ex, "slurm") == 0) { /* an elastic job: its workers' Slurm jobs */
            el_reconcile(s, r, rt);
            json_decref(rt);
            continue;
        }
        if (id <= 0) {
            if (r->job->state != KILN_STATE_QUEUED) {
                const char *m = "kilnd restarted with --executor slurm; this job's replicas "
                                "were not started through Slurm and are not followed";
                kiln_store_job_transition(d->store, r->project, r->job->job_id, ACTIVE,
                                          KILN_STATE_FAILED, m, kiln_now_ns(), NULL);
                kilnd_event(d, r->project, r->job->job_id, "ERROR", "Job FAILED: %s", m);
            }
            json_decref(rt);
            continue;
        }
        sjob *j = calloc(1, sizeof *j);
        if (!j || !(j->project = strdup(r->project)) || !(j->job_id = strdup(r->job->job_id)) ||
            !reps_read(s, j, json_object_get(rt, "replicas"))) {
            sjob_free(s, j);
            json_decref(rt);
            continue;
        }
        j->id = (long)id;
        sjob_dirs(s, j);
        const char *ss = json_string_value(json_object_get(rt, "slurmState"));
        snprintf(j->sstate, sizeof j->sstate, "%s", ss ? ss : "");
        const char *rq = json_string_value(json_object_get(rt, "slurmRequeue"));
        if (rq) j->requeue = strdup(rq); /* a drain's move, finished by this kilnd */
        j->restart = json_is_true(json_object_get(rt, "slurmRestart"));
        j->next = s->jobs;
        s->jobs = j;
        kilnd_event(d, r->project, r->job->job_id, "INFO",
                    "kilnd restarted: following Slurm job %ld again (last seen %s)", j->id,
                    j->sstate[0] ? j->sstate : "?");
        json_decref(rt);
    }
    kiln_job_records_free(v, n);
}

static bool el_tracked(ssup *s, const char *project, const char *id);

static bool tracked(ssup *s, const char *project, const char *id)
{
    for (sjob *j = s->jobs; j; j = j->next)
        if (strcmp(j->project, project) == 0 && strcmp(j->job_id, id) == 0) return true;
    for (sstudy *st = s->studies; st; st = st->next)
        if (strcmp(st->project, project) == 0 && strcmp(st->job_id, id) == 0) return true;
    return el_tracked(s, project, id);
}

/* `kiln nodes drain N`: the jobs with a replica on N stop (SIGTERM, the
 * grace period) and go to the queue again as a new Slurm job, which Slurm
 * keeps off the drained node, as the local executor's drains() does. */
static void drains(ssup *s)
{
    kilnd *d = s->d;
    char nodes[16][128];
    pthread_mutex_lock(&drain_mu);
    int nn = drain_n;
    memcpy(nodes, drain_pending, sizeof nodes);
    drain_n = 0;
    pthread_mutex_unlock(&drain_mu);
    for (int k = 0; k < nn; k++)
        for (sjob *j = s->jobs; j; j = j->next) {
            if (j->requeue || j->term_sent || j->el) continue; /* elastic: docs/slurm.md */
            bool on = false;
            for (size_t i = 0; i < j->n && !on; i++) {
                char node[128];
                rep_node(j, i, node, sizeof node);
                on = strcmp(node, nodes[k]) == 0;
            }
            kiln_job_record *r = NULL;
            if (!on || kiln_store_job_get(d->store, j->project, j->job_id, &r) != KILN_OK) continue;
            char *why = NULL;
            if (r->job->state == KILN_STATE_RUNNING &&
                asprintf(&why,
                         "Replicas stopped for the drain of node %s; the job is queued again and "
                         "resumes from its newest checkpoint",
                         nodes[k]) >= 0) {
                j->requeue = why;
                kilnd_event(d, j->project, j->job_id, "WARNING",
                            "Node %s is being drained (maintenance): stopping Slurm job %ld's "
                            "replicas with SIGTERM, scancel after %d ms",
                            nodes[k], j->id, d->grace_ms);
                save_runtime(s, j, r->restarts, r->failures); /* the move survives kilnd */
            }
            kiln_job_record_free(r);
        }
}

/* A pending Slurm job: how Slurm orders its queue within a partition
 * (priority, higher first; then job id, older first). */
typedef struct {
    json_int_t prio, id;
} pend;

static int pend_cmp(const void *a, const void *b)
{
    const pend *x = a, *y = b;
    if (x->prio != y->prio) return x->prio > y->prio ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* jobPosition where Slurm tells it: each pending kiln job's place among all
 * of the partition's pending jobs, kiln's or not, in Slurm's order. Written
 * to the runtime record when it changes (the API shows it). `q`: squeue's
 * leaders by id. */
static void positions(ssup *s, json_t *q)
{
    size_t cap = json_object_size(q), n = 0;
    pend *v = cap ? malloc(cap * sizeof *v) : NULL;
    const char *k;
    json_t *e;
    if (cap && !v) return;
    json_object_foreach(q, k, e)
    {
        const char *st = json_string_value(json_object_get(e, "job_state"));
        const char *part = json_string_value(json_object_get(e, "partition"));
        if (!st || strcmp(st, "PENDING") != 0 || !part || strcmp(part, s->d->slurm.partition) != 0)
            continue;
        v[n].prio = json_integer_value(json_object_get(e, "priority"));
        v[n].id = json_integer_value(json_object_get(e, "job_id"));
        n++;
    }
    if (n) qsort(v, n, sizeof *v, pend_cmp); /* v is NULL when squeue listed nothing */
    for (sjob *j = s->jobs; j; j = j->next) {
        char key[32];
        if (j->study || j->el) continue; /* a trial, a worker: not the job's place */
        snprintf(key, sizeof key, "%ld", j->id);
        json_t *me = json_object_get(q, key);
        const char *st = json_string_value(json_object_get(me, "job_state"));
        long pos = 0;
        if (me && st && strcmp(st, "PENDING") == 0) {
            pend m = {json_integer_value(json_object_get(me, "priority")), j->id};
            size_t lo = 0, hi = n; /* the first entry not before m */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (pend_cmp(&v[mid], &m) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            pos = (long)lo + 1;
        }
        if (pos == j->position) continue;
        j->position = pos;
        kiln_job_record *r = NULL;
        if (kiln_store_job_get(s->d->store, j->project, j->job_id, &r) == KILN_OK)
            save_runtime(s, j, r->restarts, r->failures);
        kiln_job_record_free(r);
    }
    free(v);
}

/* --queues: why each kiln job Slurm holds PENDING waits, in the API's
 * kilnStatus.queue (accounts.h): squeue's reason, and its ClusterQueue's
 * account. `q`: squeue's leaders by id. */
static void waits(ssup *s, json_t *q)
{
    size_t n = 0, cap = 0;
    for (sjob *j = s->jobs; j; j = j->next)
        cap++;
    kiln_slurm_wait *w = calloc(cap ? cap : 1, sizeof *w);
    if (!w) return;
    for (sjob *j = s->jobs; j; j = j->next) {
        char key[32];
        if (j->study) continue;
        snprintf(key, sizeof key, "%ld", j->id);
        json_t *me = json_object_get(q, key);
        const char *st = json_string_value(json_object_get(me, "job_state"));
        if (!st || strcmp(st, "PENDING") != 0) continue;
        w[n++] = (kiln_slurm_wait){j->project, j->job_id,
                                   json_string_value(json_object_get(me, "account")),
                                   json_string_value(json_object_get(me, "qos")),
                                   json_string_value(json_object_get(me, "state_reason"))};
    }
    kiln_slurm_publish_waits(s->d, w, n);
    free(w);
}

static void tick(ssup *s)
{
    kilnd *d = s->d;
    kiln_job_record **v = NULL;
    size_t n = 0;
    json_t *byname = NULL, *q = NULL;
    drains(s);
    if (kiln_store_jobs_by_state(d->store, KILN_STATE_MASK(QUEUED), &v, &n) == KILN_OK) {
        for (size_t i = 0; i < n && !d->stop; i++) {
            if (tracked(s, v[i]->project, v[i]->job->job_id)) continue;
            if (v[i]->job->training_input.has_hyperparameters) {
                study_begin(s, v[i]); /* its trials are submitted by start_trials */
                continue;
            }
            if (v[i]->job->training_input.has_pytorch_job &&
                v[i]->job->training_input.pytorch_job.has_elastic_policy) {
                el_begin(s, v[i]); /* its workers are submitted by el_steps */
                continue;
            }
            /* squeue first: a Slurm job of this attempt's name is adopted */
            if (!q && !(q = squeue_all(&byname))) break; /* slurmctld does not answer */
            submit(s, v[i], byname, false);
        }
        kiln_job_records_free(v, n);
    }
    if (!d->stop) start_trials(s);
    if (s->fresh) { /* just submitted: squeue again, so that they are seen */
        json_decref(q);
        json_decref(byname);
        q = byname = NULL;
    }
    while (s->fresh) {
        sjob *j = s->fresh;
        s->fresh = j->next;
        j->next = s->jobs;
        s->jobs = j;
    }
    if (!s->jobs && !s->groups) goto out;
    if (!q && !(q = squeue_all(&byname))) goto out; /* slurmctld does not answer: decide nothing */
    int64_t now = kiln_now_ns();
    for (sjob **link = &s->jobs; *link;) {
        sjob *j = *link;
        char k[32];
        snprintf(k, sizeof k, "%ld", j->id);
        json_t *sj = json_object_get(q, k);
        if (j->el      ? follow_worker(s, j, sj, now)
            : j->study ? follow_trial(s, j, sj, now)
                       : follow(s, j, sj, byname, now)) {
            *link = j->next;
            sjob_free(s, j);
            continue;
        }
        link = &j->next;
    }
    positions(s, q);
    if (d->queues_path) waits(s, q);
    el_steps(s, byname, now); /* elastic jobs: workers submitted, the job's state */
    while (s->fresh) {        /* restarts and moves submitted while following */
        sjob *j = s->fresh;
        s->fresh = j->next;
        j->next = s->jobs;
        s->jobs = j;
    }
out:
    if (d->queues_path && !d->stop) kiln_slurm_queue_usage(d); /* GET /v1/queues: Slurm's */
    json_decref(q);
    json_decref(byname);
    json_decref(s->nodes); /* the next tick's submits see the nodes anew */
    s->nodes = NULL;
    s->nodes_read = false;
}

void *kiln_slurm_supervisor(kilnd *d)
{
    ssup s = {.d = d};
    s.port_used = calloc((size_t)d->port_count, sizeof(bool));
    if (!s.port_used) {
        d->stop = 1;
        return NULL;
    }
    reconcile(&s);
    while (!d->stop) {
        tick(&s);
        /* runPolicy.ttlSecondsAfterFinished: the same cleaning as on one
         * machine (src/jobfiles/ttl.c); the job's files are on the shared
         * file system kilnd sees */
        if (!d->stop) kilnd_ttl_tick(d, kiln_now_ns());
        struct pollfd pf = {.fd = kiln_doorbell_fd(&d->wake), .events = POLLIN};
        int ms = kiln_now_ns() < s.fast_until_ns ? FAST_POLL_MS : POLL_MS;
        if (poll(&pf, 1, ms) > 0 && (pf.revents & POLLIN)) kiln_doorbell_drain(&d->wake);
    }
    /* the Slurm jobs run on; the next kilnd follows them */
    while (s.jobs) {
        sjob *j = s.jobs;
        s.jobs = j->next;
        sjob_free(&s, j);
    }
    while (s.studies) /* their records stay: the next kilnd goes on with them */
        study_free(&s, s.studies);
    while (s.groups)
        el_free(&s, s.groups);
    free(s.port_used);
    return NULL;
}
