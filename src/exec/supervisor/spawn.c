/* src/exec/supervisor/spawn.c - staging a job's packages and starting its replicas. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "daemon/kilnd.h"
#include "exec/supervisor/fetch.h"
#include "exec/supervisor/pskeys.h"
#include "exec/supervisor/trainmetrics.h"
#include "kiln/catalog.h" /* kiln_quantity_* */
#include "kiln/exec.h"
#include "kiln/objects.h"
#include "kiln/tune.h"
#include "kiln/submit.h" /* kiln_job_program_args */
#include "util/atomic.h"

#include "exec/supervisor/supervisor_int.h"

/* Runs a helper (cp, tar) to completion; true when it exited 0. */
static bool run_helper(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void path_add(char *pp, size_t len, const char *dir)
{
    size_t n = strlen(pp);
    snprintf(pp + n, len - n, "%s%s", n ? ":" : "", dir);
}

/* The file behind gs://BUCKET/NAME in kilnd's staging store (the API
 * refused, at create, any gs:// URI the store does not hold). */
static bool gs_path(kilnd *d, const char *uri, char *buf, size_t len)
{
    char bucket[64];
    const char *p = uri + 5, *sl = strchr(p, '/');
    if (strncmp(uri, "gs://", 5) != 0 || !sl || (size_t)(sl - p) >= sizeof bucket) return false;
    memcpy(bucket, p, (size_t)(sl - p));
    bucket[sl - p] = '\0';
    return kiln_objects_holds(d->objects, bucket, NULL) &&
           kiln_objects_path(d->objects, bucket, sl + 1, buf, len) == KILN_OK;
}

/* --job-dir gs://BUCKET/PATH on a held bucket: the replicas get the local
 * directory DATA/objects/BUCKET/PATH (made here), so that what they write
 * there is readable back as objects BUCKET/PATH/... */
static kiln_err map_job_dir(kilnd *d, rjob *j, char *why, size_t whylen)
{
    char *jd = j->job->training_input.job_dir, local[PATH_MAX], name[PATH_MAX];
    if (!jd || strncmp(jd, "gs://", 5) != 0) return KILN_OK;
    snprintf(name, sizeof name, "%s", jd);
    size_t n = strlen(name);
    while (n > 5 && name[n - 1] == '/')
        name[--n] = '\0';
    if (!gs_path(d, name, local, sizeof local) || kilnd_mkdirs(local) < 0) {
        snprintf(why, whylen, "jobDir '%s': cannot make its directory in kilnd's staging store",
                 jd);
        return KILN_EIO;
    }
    return kiln_set_str(&j->job->training_input.job_dir, local);
}

static bool is_http(const char *u)
{
    return strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0;
}

/* STAGING/fetchedI-NAME: where packageUris[i], an http(s):// URI (its form
 * checked at create: kiln_package_http_ok), is fetched to. */
static kiln_err fetched_path(const char *u, size_t i, const char *staging, char *out, size_t outlen,
                             char *why, size_t whylen)
{
    const char *name = NULL;
    size_t nlen = 0;
    char reason[512];
    if (!kiln_package_http_ok(u, &name, &nlen, reason, sizeof reason)) {
        snprintf(why, whylen, "packageUris[%zu] '%s': %s", i, u, reason);
        return KILN_EINVAL;
    }
    int n = snprintf(out, outlen, "%s/fetched%zu-%.*s", staging, i, (int)nlen, name);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(why, whylen, "packageUris[%zu] '%s': the staging path is too long", i, u);
        return KILN_EINVAL;
    }
    /* the name as a file name: no '%' escapes or odd characters on disk */
    for (char *p = out + strlen(staging) + 1; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_' || *p == '+'))
            *p = '_';
    return KILN_OK;
}

/* Fetches the http(s):// packageUris into DIR/staging, one after the other,
 * each on a thread of its own (fetch.h): KILN_OK with j->fetch set while
 * one is in flight (called again once it is done), KILN_OK with j->fetch
 * NULL once every one is here. Each one's size and SHA-256 go in the job's
 * events. */
static kiln_err fetch_packages(kilnd *d, rjob *j, char *why, size_t whylen)
{
    const kiln_strv *uris = &j->job->training_input.package_uris;
    char staging[PATH_MAX + 16], dst[PATH_MAX + 64], reason[512], hex[65];
    kiln_err err;

    snprintf(staging, sizeof staging, "%s/staging", j->dir);
    if (j->fetch) {
        if (!kilnd_fetch_done(j->fetch)) return KILN_OK;
        const char *u = uris->v[j->fetch_next];
        uint64_t bytes = 0;
        err = kilnd_fetch_end(j->fetch, &bytes, hex, reason, sizeof reason);
        j->fetch = NULL;
        if (err != KILN_OK) {
            snprintf(why, whylen, "packageUris[%zu] '%s': cannot fetch it: %s", j->fetch_next, u,
                     reason);
            return err;
        }
        kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "INFO",
                            "fetched %s: %llu bytes, sha256 %s", u, (unsigned long long)bytes, hex);
        j->fetch_next++;
    }
    for (; j->fetch_next < uris->n; j->fetch_next++) {
        const char *u = uris->v[j->fetch_next];
        if (!is_http(u)) continue;
        err = fetched_path(u, j->fetch_next, staging, dst, sizeof dst, why, whylen);
        if (err != KILN_OK) return err;
        kilnd_mkdirs(staging);
        kiln_jobfiles_event(d->jobfiles, j->project, j->job_id, "INFO",
                            "fetching %s (at most %llu bytes)", u,
                            (unsigned long long)d->max_package_bytes);
        err = kilnd_fetch_start(u, dst, d->max_package_bytes, kiln_doorbell_ring_fd(&d->wake),
                                &j->fetch);
        if (err != KILN_OK)
            snprintf(why, whylen, "packageUris[%zu] '%s': cannot start fetching it: %s",
                     j->fetch_next, u, kiln_err_str(err));
        return err;
    }
    return KILN_OK;
}

/* Stages packageUris (local: file:// or absolute paths; gs:// URIs of
 * kilnd's staging store, which are files under DATA/objects; http(s)://
 * URIs, fetched first into DIR/staging: fetch_packages) under DIR/staging and builds the
 * PYTHONPATH that finds them:
 *   a directory (--package-path)  copied; staging/ goes on the path;
 *   NAME.whl (pure Python)        copied; the wheel itself goes on the path;
 *   NAME.tar.gz / .tgz (an sdist) unpacked into staging/sdistN; its top-level
 *                                 directories go on the path. */
static kiln_err stage_packages(kilnd *d, rjob *j, char *why, size_t whylen, char *pypath,
                               size_t plen)
{
    const kiln_strv *uris = &j->job->training_input.package_uris;
    char staging[PATH_MAX + 16], dst[PATH_MAX + 64];
    bool dirs = false;

    pypath[0] = '\0';
    if (uris->n == 0) return KILN_OK;
    snprintf(staging, sizeof staging, "%s/staging", j->dir);
    kilnd_mkdirs(staging);
    for (size_t i = 0; i < uris->n; i++) {
        const char *u = uris->v[i];
        const char *path = strncmp(u, "file://", 7) == 0 ? u + 7 : (u[0] == '/' ? u : NULL);
        char gs[PATH_MAX], fetched[PATH_MAX + 64];
        bool is_fetched = is_http(u);
        if (gs_path(d, u, gs, sizeof gs)) path = gs;
        if (is_fetched) {
            kiln_err ferr = fetched_path(u, i, staging, fetched, sizeof fetched, why, whylen);
            if (ferr != KILN_OK) return ferr;
            path = fetched;
        }
        struct stat st;
        if (!path || stat(path, &st) < 0) {
            snprintf(why, whylen,
                     "packageUris[%zu] '%s': kilnd stages local packages (a directory, .whl "
                     "or .tar.gz on this machine), the gs:// objects it holds and http(s):// "
                     "files it fetches",
                     i, u);
            return KILN_EINVAL;
        }
        bool ok;
        if (S_ISDIR(st.st_mode)) {
            ok = run_helper((char *[]){"cp", "-R", (char *)path, staging, NULL});
            dirs = true;
        } else if (ends_with(path, ".whl")) {
            const char *base = strrchr(path, '/');
            ok = snprintf(dst, sizeof dst, "%s/%s", staging, base ? base + 1 : path) <
                 (int)sizeof dst;
            /* a fetched wheel is in staging/ already */
            ok = ok && (is_fetched || run_helper((char *[]){"cp", (char *)path, dst, NULL}));
            if (is_fetched) snprintf(dst, sizeof dst, "%s", path);
            if (ok) path_add(pypath, plen, dst);
        } else if (ends_with(path, ".tar.gz") || ends_with(path, ".tgz")) {
            snprintf(dst, sizeof dst, "%s/sdist%zu", staging, i);
            kilnd_mkdirs(dst);
            ok = run_helper((char *[]){"tar", "-xzf", (char *)path, "-C", dst, NULL});
            DIR *dd = ok ? opendir(dst) : NULL;
            struct dirent *e;
            while (dd && (e = readdir(dd))) {
                char sub[PATH_MAX + 320];
                struct stat ss;
                if (e->d_name[0] == '.') continue;
                snprintf(sub, sizeof sub, "%s/%s", dst, e->d_name);
                if (stat(sub, &ss) == 0 && S_ISDIR(ss.st_mode)) path_add(pypath, plen, sub);
            }
            if (dd) closedir(dd);
        } else {
            snprintf(why, whylen, "packageUris[%zu] '%s': not a directory, .whl or .tar.gz", i, u);
            return KILN_EINVAL;
        }
        if (!ok) {
            snprintf(why, whylen, "cannot stage package '%s' into the job's directory", path);
            return KILN_EIO;
        }
    }
    if (dirs) path_add(pypath, plen, staging);
    return KILN_OK;
}

void stop_all(sup *s, rjob *j, int sig)
{
    for (size_t i = 0; i < j->n; i++)
        if (j->reps[i].alive) rep_signal(s, j, &j->reps[i], sig);
}

void begin_stop(sup *s, rjob *j, after_stop after, const char *fmt, ...)
{
    va_list ap;
    if (j->after != AS_NONE) return; /* already stopping: the first reason stands */
    j->after = after;
    free(j->after_msg);
    j->after_msg = NULL;
    va_start(ap, fmt);
    if (vasprintf(&j->after_msg, fmt, ap) < 0) j->after_msg = NULL;
    va_end(ap);
    j->killed = false;
    stop_all(s, j, SIGTERM);
    /* the grace period runs from the signal: a Slurm step's takes an
     * squeue and an scancel to send, which a loaded machine can make last
     * a good part of a short grace period */
    j->kill_at_ns = kiln_now_ns() + (int64_t)s->d->grace_ms * 1000000;
    if (j->fetch) kilnd_fetch_cancel(j->fetch); /* collected by spawn_attempt, then finished */
}

/* The cluster as the replicas see it; NULL on ENOMEM. Dropped replicas are
 * out of it. */
static kiln_exec_task *job_tasks(sup *s, rjob *j, size_t *n)
{
    kiln_exec_task *tasks = calloc(j->n ? j->n : 1, sizeof *tasks);
    *n = 0;
    for (size_t i = 0; tasks && i < j->n; i++) {
        if (j->reps[i].dropped) continue;
        tasks[*n].role = j->reps[i].role;
        tasks[*n].index = j->reps[i].index;
        tasks[*n].host = s->d->cluster.nodes[j->reps[i].node].address;
        tasks[*n].port = j->reps[i].port;
        ++*n;
    }
    return tasks;
}

/* The image a replica of `role` runs: its own or the master's imageUri
 * (kiln_exec_image), else the image the catalog maps the job's
 * runtimeVersion to, or NULL: it runs as a process. A runtimeVersion the
 * catalog no longer maps gives NULL too: placement fails such a job first
 * (supervisor.c). */
const char *image_of(const kiln_catalog *c, const kiln_job *job, kiln_role role)
{
    const char *image = kiln_exec_image(job, role);
    return image ? image : kiln_catalog_runtime_image(c, job, role);
}

static void container_name(const rjob *j, const replica *r, char *buf, size_t len)
{
    kiln_exec_container_name(j->project, j->job_id, r->task, buf, len);
}

/* A Vertex AI job's containers see Cloud Storage at /gcs/BUCKET (Vertex's
 * Cloud Storage FUSE mount): here every bucket kilnd's staging store holds
 * for the job's project, read-write, so that what a replica writes under
 * /gcs/BUCKET/PATH is the object gs://BUCKET/PATH. */
static kiln_err gcs_binds(kilnd *d, const rjob *j, kiln_strv *binds)
{
    const char *b, *proj;
    if (!j->job->training_input.has_vertex || !d->objects) return KILN_OK;
    for (size_t i = 0; (b = kiln_objects_bucket_at(d->objects, i)) != NULL; i++) {
        char m[PATH_MAX + 160];
        if (!kiln_objects_holds(d->objects, b, &proj) || (proj && strcmp(proj, j->project) != 0))
            continue;
        snprintf(m, sizeof m, "%s/%s", kiln_objects_root(d->objects), b);
        kilnd_mkdirs(m);
        snprintf(m, sizeof m, "%s/%s:/gcs/%s", kiln_objects_root(d->objects), b, b);
        kiln_err err = kiln_strv_push(binds, m);
        if (err != KILN_OK) return err;
    }
    return KILN_OK;
}

/* An MPS share's environment (kiln/devices.h): its GPU's MPS daemon and the
 * share's limits, its memory / N on CUDA's device 0 (the GPU is the only one
 * it sees) and 100 / N of the SMs. */
static kiln_err share_env(kilnd *d, const kiln_node *node, const kiln_device *sh, kiln_strv *env)
{
    const kiln_device *g = &node->devs[sh->parent];
    double mib = g->memory_gb * 1024.0 / sh->n_shares;
    char *kv[4] = {NULL, NULL, NULL, NULL};
    kiln_err err = KILN_ENOMEM;
    if (asprintf(&kv[0], "CUDA_MPS_PIPE_DIRECTORY=%s/mps/%d/pipe", d->data_dir, g->index) < 0 ||
        asprintf(&kv[1], "CUDA_MPS_LOG_DIRECTORY=%s/mps/%d/log", d->data_dir, g->index) < 0 ||
        asprintf(&kv[2], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%lldM", (long long)mib) < 0 ||
        asprintf(&kv[3], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", 100 / sh->n_shares) < 0)
        goto out;
    err = KILN_OK;
    for (int k = 0; k < 4 && err == KILN_OK; k++)
        err = kiln_strv_push(env, kv[k]);
out:
    for (int k = 0; k < 4; k++)
        free(kv[k]);
    return err;
}

static bool is_mpijob(const rjob *j)
{
    return j->job->has_training_input && j->job->training_input.has_mpi_job;
}

/* The socket on which the monitor of an MPIJob's replica that runs an
 * image runs kiln-mpi-agent's commands in its container:
 * J/mpi/hosts/HOST.sock (src/exec/monitor/execsrv.h). */
static void mpi_socket(const rjob *j, const replica *r, char *buf, size_t len)
{
    char host[160];
    kiln_exec_mpi_host(j->job, r->role, r->index, host, sizeof host);
    snprintf(buf, len, "%s/mpi/hosts/%s.sock", j->dir, host);
}

/* The record kiln-mpi-agent finds an MPIJob replica by: J/mpi/hosts/HOST
 * with its monitor's pid (the agent ends the replica's ranks with it), its
 * log and, for one that runs an image, its exec socket (`sock`, else NULL). */
static kiln_err mpi_record(const rjob *j, const replica *r, const char *rlog, const char *sock,
                           char *why, size_t whylen)
{
    char host[160], path[PATH_MAX + 200], text[2 * PATH_MAX + 256];
    kiln_exec_mpi_host(j->job, r->role, r->index, host, sizeof host);
    snprintf(path, sizeof path, "%s/mpi/hosts/%s", j->dir, host);
    int n = snprintf(text, sizeof text, "monitor %ld\nlog %s\n%s%s%s", (long)r->h.monitor, rlog,
                     sock ? "exec " : "", sock ? sock : "", sock ? "\n" : "");
    if (kiln__write_atomic(path, text, (size_t)n, 0644) != 0) {
        snprintf(why, whylen, "cannot write %.900s: %s", path, strerror(errno));
        return KILN_EIO;
    }
    return KILN_OK;
}

/* An MPIJob attempt's J/mpi: the hostfile of its replicas, and no host
 * records of an earlier attempt (the agent waits for this attempt's). */
static kiln_err mpi_prepare(sup *s, rjob *j, char *why, size_t whylen)
{
    char path[PATH_MAX + 200], host[160];
    size_t nt = 0;
    kiln_err err = KILN_ENOMEM;
    char *text = NULL;
    kiln_exec_task *tasks = NULL;
    if (place_slurm(s)) { /* refused at create (kiln_slurm_check_job): one stored before */
        snprintf(why, whylen,
                 "an MPIJob's ranks under --executor slurm (as Slurm steps) are not done yet: "
                 "kiln runs MPIJobs with its own placer");
        return KILN_EINVAL;
    }
    if (!s->d->mpi_agent) {
        snprintf(why, whylen,
                 "kiln-mpi-agent, the MPIJob launcher's rsh agent, is not next to "
                 "kilnd (install it with kilnd)");
        return KILN_EINVAL;
    }
    snprintf(path, sizeof path, "%s/mpi/hosts", j->dir);
    kilnd_mkdirs(path);
    for (size_t i = 0; i < j->n; i++) {
        kiln_exec_mpi_host(j->job, j->reps[i].role, j->reps[i].index, host, sizeof host);
        snprintf(path, sizeof path, "%s/mpi/hosts/%s", j->dir, host);
        unlink(path);
    }
    if (!(tasks = job_tasks(s, j, &nt)) || !(text = kiln_exec_mpi_hostfile(j->job, tasks, nt)))
        goto out;
    snprintf(path, sizeof path, "%s/mpi/hostfile", j->dir);
    if (kiln__write_atomic(path, text, strlen(text), 0444) != 0) {
        snprintf(why, whylen, "cannot write %.900s: %s", path, strerror(errno));
        err = KILN_EIO;
        goto out;
    }
    const char *pol = j->job->training_input.mpi_job.launcher_creation_policy;
    j->mpi_wait_launcher = pol && strcmp(pol, "WaitForWorkersReady") == 0;
    err = KILN_OK;
out:
    free(text);
    free(tasks);
    return err;
}

void mpijob_adopted(rjob *j)
{
    const char *pol = is_mpijob(j) ? j->job->training_input.mpi_job.launcher_creation_policy : NULL;
    if (!pol || strcmp(pol, "WaitForWorkersReady") != 0) return;
    for (size_t i = 0; i < j->n; i++)
        if (j->reps[i].role == KILN_ROLE_MASTER && !j->reps[i].spawned && !j->reps[i].dropped)
            j->mpi_wait_launcher = true;
}

void mpijob_tick(sup *s, rjob *j, char *why, size_t whylen)
{
    size_t launcher = j->n;
    if (!j->mpi_wait_launcher || j->after != AS_NONE) return;
    for (size_t i = 0; i < j->n; i++) {
        const replica *r = &j->reps[i];
        if (r->dropped) continue;
        if (r->role == KILN_ROLE_MASTER)
            launcher = i;
        else if (!r->alive || !r->started)
            return; /* a worker not running yet */
    }
    if (launcher == j->n) return;
    j->mpi_wait_launcher = false;
    kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "INFO",
                        "Every worker runs: starting the launcher (launcherCreationPolicy "
                        "WaitForWorkersReady)");
    if (spawn_one(s, j, launcher, why, whylen) != KILN_OK) begin_stop(s, j, AS_FAIL, "%s", why);
}

/* Starts replica `i` of a running job (every replica at first; one alone
 * when an elastic worker is restarted or added). */
/* A container's emptyDir volumes (<role>Config.scratchMounts, checked at
 * create) as the exec spec's scratch list: "PATH" stays a volume; a Memory
 * one becomes a tmpfs of sizeLimit bytes, else of the container's memory
 * limit (as Kubernetes sizes a memory-backed emptyDir), else podman's
 * default (half the node's memory). */
static kiln_err scratch_mounts(const kiln_replica_config *rc, kiln_strv *out)
{
    for (size_t k = 0; k < rc->scratch_mounts.n; k++) {
        const char *v = rc->scratch_mounts.v[k], *mem = strstr(v, ":Memory");
        char *m = NULL;
        int64_t bytes = 0;
        const char *size = mem && mem[7] == ':' ? mem + 8 : rc->memory_limit;
        if (mem && size && !kiln_quantity_bytes(size, &bytes)) bytes = 0;
        int n = !mem    ? asprintf(&m, "%s", v)
                : bytes ? asprintf(&m, "%.*s:tmpfs:%lld", (int)(mem - v), v, (long long)bytes)
                        : asprintf(&m, "%.*s:tmpfs", (int)(mem - v), v);
        kiln_err err = n < 0 ? KILN_ENOMEM : kiln_strv_push(out, m);
        free(m);
        if (err != KILN_OK) return err;
    }
    return KILN_OK;
}

kiln_err spawn_one(sup *s, rjob *j, size_t i, char *why, size_t whylen)
{
    kiln_strv argv = {0}, env = {0}, cargs = {0}, hosts = {0}, binds = {0}, via = {0};
    kiln_strv scratch = {0};
    char state[PATH_MAX + 64], rlog[PATH_MAX + 64], jlog[PATH_MAX + 16], work[PATH_MAX + 16];
    char name[160] = "";
    size_t nt = 0, self = 0;
    kiln_exec_task *tasks = job_tasks(s, j, &nt);
    replica *r = &j->reps[i];
    const char *image = image_of(s->d->catalog, j->job, r->role);
    kiln_err err = KILN_ENOMEM;

    if (!tasks) goto out;
    for (size_t k = 0; k < nt; k++)
        if (tasks[k].role == r->role && tasks[k].index == r->index) self = k;
    if (j->study)
        snprintf(work, sizeof work, "%s/%d", j->dir, j->trial); /* the trial's own directory */
    else
        snprintf(work, sizeof work, "%s/work", j->dir);
    kilnd_mkdirs(work);
    kiln_exec_paths paths = {.kiln_train = s->d->kiln_train,
                             .python = s->d->python,
                             .staging = j->pypath[0] ? j->pypath : NULL};
    r->kind = image ? KILN_EXEC_CONTAINER : KILN_EXEC_LOCAL;
    if (image)
        err = kiln_exec_container_program(j->job, r->role, &argv, &cargs);
    else
        err = kiln_exec_program(j->job, r->role, &paths, &argv, why, whylen);
    /* a trial's --NAME=VALUE flags follow the program's own args */
    if (err == KILN_OK && j->study) err = trial_args(j, image ? &cargs : &argv);
    if (err != KILN_OK) goto out;
    /* CUDA_VISIBLE_DEVICES: real GPUs by UUID, simulated ones by index */
    const kiln_node *node = &s->d->cluster.nodes[r->node];
    const char *ids[KILN_MAX_REPLICA_DEVICES];
    char idx[KILN_MAX_REPLICA_DEVICES][16];
    const kiln_device *share = NULL; /* an MPS share (one per replica: sched.c) */
    for (int k = 0; k < r->n_gpus; k++) {
        const kiln_device *dv = &node->devs[j->pl.slots[i].devs[k]];
        snprintf(idx[k], sizeof idx[k], "%d", dv->index);
        if (dv->share) share = dv, dv = &node->devs[dv->parent]; /* CUDA sees the GPU */
        ids[k] = dv->simulated ? idx[k] : dv->uuid;
    }
    err =
        kiln_exec_replica_env(j->job, tasks, nt, self, ids, (size_t)r->n_gpus, r->simulated, &env);
    if (err == KILN_OK && share) err = share_env(s->d, node, share, &env);
    if (err == KILN_OK && j->study) err = trial_env(j, &env);
    /* a CustomJob's AIP_*_DIR (a trial's under its own number) */
    if (err == KILN_OK) err = kiln_exec_vertex_dirs(j->job, j->study ? j->trial : 0, &env);
    if (err == KILN_OK && is_mpijob(j)) {
        char mdir[PATH_MAX + 8];
        snprintf(mdir, sizeof mdir, "%s/mpi", j->dir);
        err = kiln_exec_mpi_env(j->job, tasks, nt, self, mdir, s->d->mpi_agent, &env);
    }
    if (err != KILN_OK) goto out;
    char key[64], *kkv = NULL;
    kiln_exec_coll_key(j->project, j->job_id, (long)getpid(), j->restarts, key);
    if (asprintf(&kkv, "KILN_COLL_KEY=%s", key) < 0) kkv = NULL;
    err = kkv ? kiln_strv_push(&env, kkv) : KILN_ENOMEM;
    free(kkv);
    if (err != KILN_OK) goto out;
    if (j->ps_keys[0]) { /* a path, never the keys themselves: argv and env are visible */
        char *kv = NULL;
        if (asprintf(&kv, "KILN_PS_KEYS=%s", j->ps_keys) < 0) kv = NULL;
        err = kv ? kiln_strv_push(&env, kv) : KILN_ENOMEM;
        free(kv);
        if (err != KILN_OK) goto out;
    }
    /* the user's env (TFJob container env, <role>Config.env) after kiln's own */
    const kiln_replica_config *rc = kiln_job_role_config(j->job, r->role);
    /* its hostPath mounts, and a CustomJob's buckets at /gcs/BUCKET */
    for (size_t k = 0; rc && k < rc->host_mounts.n; k++)
        if ((err = kiln_strv_push(&binds, rc->host_mounts.v[k])) != KILN_OK) goto out;
    if (image && (err = gcs_binds(s->d, j, &binds)) != KILN_OK) goto out;
    if (image && rc && (err = scratch_mounts(rc, &scratch)) != KILN_OK) goto out;
    /* an MPIJob's container: kiln-mpi-agent (static) at its host path, for
     * the launcher's mpirun (OMPI_MCA_plm_rsh_agent names that path) */
    if (image && is_mpijob(j) && s->d->mpi_agent) {
        char *b = NULL;
        if (asprintf(&b, "%s:%s:ro", s->d->mpi_agent, s->d->mpi_agent) < 0) b = NULL;
        err = b ? kiln_strv_push(&binds, b) : KILN_ENOMEM;
        free(b);
        if (err != KILN_OK) goto out;
    }
    /* persistentVolumeClaims: the directories the node config's table names
     * (checked at create; a claim removed from the table since fails here) */
    for (size_t k = 0; image && rc && k < rc->claim_mounts.n; k++) {
        char *b = kiln_claims_bind(&s->d->claims, rc->claim_mounts.v[k]);
        if (!b) {
            snprintf(why, whylen, "claim mount %.128s: the claim is not in the node config",
                     rc->claim_mounts.v[k]);
            err = KILN_EINVAL;
            goto out;
        }
        err = kiln_strv_push(&binds, b);
        free(b);
        if (err != KILN_OK) goto out;
    }
    if ((err = kiln_exec_user_env(j->job, r->role, &env)) != KILN_OK) goto out;
    if (paths.staging) {
        /* only the staged packages: kilnd's own PYTHONPATH is not the replica's */
        char *kv = NULL;
        if (asprintf(&kv, "PYTHONPATH=%s", paths.staging) < 0) kv = NULL;
        err = kv ? kiln_strv_push(&env, kv) : KILN_ENOMEM;
        free(kv);
        if (err != KILN_OK) goto out;
    }
    snprintf(state, sizeof state, "%s/replicas/%s", j->dir, r->task);
    snprintf(rlog, sizeof rlog, "%s/replicas/%s.log", j->dir, r->task);
    snprintf(jlog, sizeof jlog, "%s/log.tsv", j->dir);
    if (image) container_name(j, r, name, sizeof name);
    /* a container sees the job's directories at the same paths: kiln's
     * (working dir, staged packages) and the user's jobDir */
    const char *jd = j->job->training_input.job_dir;
    const char *mounts[2] = {j->dir, jd};
    size_t n_mounts = jd && jd[0] == '/' ? 2 : 1;
    if (n_mounts == 2) kilnd_mkdirs(jd);
    /* every replica's hostname (its container's name) resolves to its node,
     * as pod names do: torchrun hands its peers the host agent's hostname.
     * The replica's own name comes first: podman writes the entries in this
     * order, and a reverse lookup of an address (socket.getfqdn(), which
     * torchrun's rendezvous names its node by) gives the first name on it;
     * with every replica on one address, every container would otherwise
     * take the first replica's name, and the rendezvous, seeing one node
     * twice (same name, same pid under --init), forms a group per replica. */
    for (size_t o = 0; image && o < j->n; o++) {
        size_t k = o == 0 ? i : (o <= i ? o - 1 : o);
        char hn[160], host[64], *kv = NULL;
        if (j->reps[k].dropped) continue;
        container_name(j, &j->reps[k], hn, sizeof hn);
        kiln_exec_container_hostname(hn, host); /* the name its container has */
        if (asprintf(&kv, "%s:%s", host, s->d->cluster.nodes[j->reps[k].node].address) < 0 ||
            kiln_strv_push(&hosts, kv) != KILN_OK) {
            free(kv);
            err = KILN_ENOMEM;
            goto out;
        }
        free(kv);
    }
    long uid = -1, gid = -1;
    if (kiln_users_job(s->d->users, j->project, j->job->training_input.service_account, &uid, &gid,
                       why, whylen) != KILN_OK) {
        err = KILN_EINVAL;
        goto out;
    }
    /* securityContext's runAsUser...: checked at create, and again here
     * for a job that a kilnd with another tokens file accepted */
    {
        char who[256];
        kiln_diag sd = KILN_DIAG_INIT;
        kiln_users_who(uid, gid, who, sizeof who);
        if (kiln_catalog_check_run_as(s->d->catalog, j->job, uid >= 0 ? uid : (long)geteuid(),
                                      gid >= 0 ? gid : (long)getegid(), uid >= 0, who,
                                      &sd) != KILN_OK) {
            snprintf(why, whylen, "%s: %s", sd.n ? sd.v[0].field : "securityContext",
                     sd.n ? sd.v[0].description : "refused");
            kiln_diag_free(&sd);
            err = KILN_EINVAL;
            goto out;
        }
        kiln_diag_free(&sd);
    }
    if (uid >= 0) {
        /* the replica's files are its user's: the job dir, its log, work dir */
        int fd = open(rlog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
        kiln_users_chown_job(j->dir, uid, gid);
        if (chown(rlog, (uid_t)uid, (gid_t)gid) < 0) { /* reported by the monitor's writes */
        }
        if (n_mounts == 2 && chown(jd, (uid_t)uid, (gid_t)gid) < 0) {
        }
    }
    /* placed by Slurm: a step of its allocation, run from here by srun,
     * which needs to find the cluster's configuration. A container's GPUs
     * are the ones Slurm gives the step: kiln-slurm-task puts them in its
     * place on the node (--device nvidia.com/gpu=N for each) */
    if ((err = place_via(s, j, i, &via)) != KILN_OK) goto out;
    bool slurm_gpus = via.n && image && r->n_gpus > 0;
    if (slurm_gpus && ((err = kiln_strv_push(&via, s->d->slurm.task)) != KILN_OK ||
                       (err = kiln_strv_push(&via, "--devices")) != KILN_OK))
        goto out;
    const char *sconf = getenv("SLURM_CONF");
    if (via.n && sconf) {
        char *kv = NULL;
        if (asprintf(&kv, "SLURM_CONF=%s", sconf) < 0) kv = NULL;
        err = kv ? kiln_strv_push(&env, kv) : KILN_ENOMEM;
        free(kv);
        if (err != KILN_OK) goto out;
    }
    kiln_exec_spec spec = {.kind = r->kind,
                           .via = &via,
                           .task = r->task,
                           .state = state,
                           .job_log = jlog,
                           .rep_log = rlog,
                           /* workingDir: in the image for a container; on the
                              node for a process, which runs there */
                           .work_dir = !image && rc && rc->working_dir ? rc->working_dir : work,
                           .ctr_work_dir = image && rc ? rc->working_dir : NULL,
                           .argv = &argv,
                           .args = &cargs,
                           .env = &env,
                           .image = image,
                           .name = name,
                           .mounts = mounts,
                           .n_mounts = n_mounts,
                           .binds = &binds,
                           .scratch = &scratch,
                           .pull_policy = rc ? rc->image_pull_policy : NULL,
                           .hosts = (const char *const *)hosts.v,
                           .n_hosts = hosts.n,
                           .gpus = r->gpus,
                           .n_gpus = (size_t)r->n_gpus,
                           .simulated = r->simulated,
                           .uid = uid,
                           .gid = gid};
    /* securityContext (checked at create: what a process cannot carry out
     * is refused there, honoured.c) */
    if (rc && rc->has_security_context) {
        spec.no_new_privs = rc->security_context.no_new_privileges;
        spec.read_only_root = image && rc->security_context.read_only_root_filesystem;
        /* a container: podman's --cap-drop; a process: the monitor drops
         * them from its bounding set before it becomes the project's user */
        spec.cap_drop = &rc->security_context.cap_drop;
    }
    if (slurm_gpus) {
        spec.n_gpus = 0;
        spec.devices_arg = "KILN_SLURM_DEVICES";
    }
    char xsock[PATH_MAX + 200];
    if (image && is_mpijob(j)) {
        mpi_socket(j, r, xsock, sizeof xsock);
        spec.exec_socket = xsock;
    }
    /* resources.limits (checked at create; container replicas only) */
    if (rc && image && rc->cpu_limit && !kiln_quantity_cpu_milli(rc->cpu_limit, &spec.cpu_milli))
        spec.cpu_milli = 0;
    /* with a request below it, a limit may exceed the node (Kubernetes allows
     * that: the cap is never reached); some podman versions refuse --cpus
     * past the machine's CPUs (lookup.c), so the cap is the node's, which
     * holds the container to the same */
    if (spec.cpu_milli > 0 && node->cpus > 0 && spec.cpu_milli > (int64_t)node->cpus * 1000)
        spec.cpu_milli = (int64_t)node->cpus * 1000;
    if (rc && image && rc->memory_limit &&
        !kiln_quantity_bytes(rc->memory_limit, &spec.memory_bytes))
        spec.memory_bytes = 0;
    close_replica(s, j, r);
    r->moff = 0; /* kiln_exec_start forgets the previous run's metrics file */
    err = kiln_exec_start(&s->d->exec, &spec, &r->h, why, whylen);
    if (err != KILN_OK) goto out;
    if (is_mpijob(j) && (err = mpi_record(j, r, rlog, spec.exec_socket, why, whylen)) != KILN_OK) {
        rep_signal(s, j, r, SIGKILL);
        goto out;
    }
    r->alive = true;
    r->spawned = true;
    r->started = false;
    r->handled = false;
    r->lost = r->failed = r->alloc_gone = false;
    r->code = 0;
    r->why[0] = '\0';
    char gl[128] = "";
    size_t gn = 0;
    for (int k = 0; k < r->n_gpus && gn < sizeof gl - 8; k++)
        gn += (size_t)snprintf(gl + gn, sizeof gl - gn, "%s%d", k ? "," : "", r->gpus[k]);
    char *m = NULL;
    int n =
        image ? asprintf(&m,
                         "Started %s on node %s (container %s of image %s, monitor %d, port "
                         "%d, GPUs [%s]%s)",
                         r->task, s->d->cluster.nodes[r->node].name, name, image, (int)r->h.monitor,
                         r->port, gl, r->simulated && r->n_gpus ? ", SIMULATED" : "")
              : asprintf(&m, "Started %s on node %s (monitor %d, port %d, GPUs [%s]%s): %s",
                         r->task, s->d->cluster.nodes[r->node].name, (int)r->h.monitor, r->port, gl,
                         r->simulated && r->n_gpus ? ", SIMULATED" : "", argv.v[0]);
    if (n >= 0) kiln_log_write(j->log_fd, "INFO", "service", m, (size_t)n);
    free(m);
    err = KILN_OK;
out:
    free(tasks);
    kiln_strv_clear(&argv);
    kiln_strv_clear(&cargs);
    kiln_strv_clear(&hosts);
    kiln_strv_clear(&binds);
    kiln_strv_clear(&scratch);
    kiln_strv_clear(&env);
    kiln_strv_clear(&via);
    return err;
}

/* Stages packages, maps the job dir, writes this attempt's ps keys and
 * starts every replica of a placed job; on failure kills what started. */
static kiln_err spawn_all(sup *s, rjob *j, char *why, size_t whylen)
{
    kiln_err err = stage_packages(s->d, j, why, whylen, j->pypath, sizeof j->pypath);
    if (err == KILN_OK) err = map_job_dir(s->d, j, why, whylen);
    /* new parameter-server keys for every attempt */
    if (err == KILN_OK && kilnd_ps_keys_write(j->dir, j->ps_keys, sizeof j->ps_keys) != 0) {
        snprintf(why, whylen, "cannot write the job's ps keys: %s", strerror(errno));
        j->ps_keys[0] = '\0';
        err = KILN_EIO;
    }
    if (err == KILN_OK && is_mpijob(j)) err = mpi_prepare(s, j, why, whylen);
    for (size_t i = 0; err == KILN_OK && i < j->n; i++)
        if (!j->reps[i].dropped && !(j->mpi_wait_launcher && j->reps[i].role == KILN_ROLE_MASTER))
            err = spawn_one(s, j, i, why, whylen);
    if (err != KILN_OK) stop_all(s, j, SIGKILL);
    return err;
}

void spawn_attempt(sup *s, rjob *j)
{
    char why[1024];
    if (j->after != AS_NONE) { /* stopped while fetching: what it fetched is not used */
        if (j->fetch) kilnd_fetch_end(j->fetch, NULL, NULL, NULL, 0);
        j->fetch = NULL;
        return;
    }
    kiln_err err = fetch_packages(s->d, j, why, sizeof why);
    if (err == KILN_OK && j->fetch) return; /* the tick calls again when it is done */
    if (err == KILN_OK) err = spawn_all(s, j, why, sizeof why);
    if (err != KILN_OK) {
        begin_stop(s, j, AS_FAIL, "%s", why);
        return;
    }
    /* RUNNING once every replica's program runs (an image may be pulled first) */
    save_runtime(s, j);
}
