/* src/daemon/main.c - kilnd: wires store + catalog + nodes + scheduler +
 * supervisor + API, and runs until SIGTERM/SIGINT.
 *
 *   kilnd [--listen 127.0.0.1:8470] [--data-dir ./var] [--node-config FILE]
 *         [--catalog FILE] [--tokens FILE] [--grace-period SECONDS]
 *         [--port-range 30000-39999] [--threads N] [--max-body BYTES]
 *         [--kiln-train PATH] [--python PATH] [--log-cap BYTES]
 *         [--bucket NAME[:PROJECT]]... [--max-object BYTES] [--max-package-bytes N]
 *         [--container-runtime PATH] [--monitor PATH] [--allow-root-replicas yes]
 *         [--nvml-library PATH] [--hpa-sync-period S] [--hpa-downscale-stabilization S]
 *
 * The address actually bound (port 0 picks a free one) is printed and also
 * written to DATA/kilnd.addr (atomically), which is how tests find it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "daemon/check.h"
#include "daemon/kilnd.h"
#include "exec/supervisor/qwait.h"
#include "notebooks/notebooks.h"
#include "util/atomic.h"
#include "util/version.h"
#include "kiln/auth.h"
#include "kiln/objects.h"
#include "kiln/queues.h"
#include "exec/slurm/accounts.h"
#include "exec/slurm/alloc.h"
#include "exec/slurm/slurm.h"

/* seconds between malloc_trim calls of the idle main thread (see main) */
#define TRIM_EVERY_S 10

static const char usage[] =
    "usage: kilnd --version | --help | --check-config [OPTIONS...]\n"
    "       kilnd [--listen HOST:PORT] [--data-dir DIR] [--node-config FILE]\n"
    "             [--catalog FILE] [--runtimes-dir DIR] [--tokens FILE] [--grace-period SECONDS]\n"
    "             [--port-range LO-HI] [--threads N] [--max-body BYTES] [--kiln-train PATH]\n"
    "             [--python PATH] [--log-cap BYTES] [--bucket NAME[:PROJECT]]...\n"
    "             [--max-object BYTES] [--max-package-bytes N]\n"
    "             [--tls-cert FILE --tls-key FILE]\n"
    "             [--insecure-plain-http] [--audit-log FILE] [--audit-log-max-bytes N]\n"
    "             [--audit-log-keep N] [--max-inflight N] [--max-inflight-per-token N]\n"
    "             [--min-free-bytes N] [--container-runtime PATH] [--monitor PATH]\n"
    "             [--allow-root-replicas yes|no] [--nvml-library PATH]\n"
    "             [--gpu-check PROGRAM] [--gpu-check-every SECONDS] [--gpu-check-timeout S]\n"
    "             [--gpu-share INDEX=SHARES]...\n"
    "             [--executor local|slurm] [--slurm-partition P] [--slurm-account A]\n"
    "             [--slurm-gpu-type KILN_TYPE=GRES_TYPE]... [--slurm-machine-resources yes|no]\n"
    "             [--slurm-queues kiln|accounts]\n"
    "             [--queues FILE|DIR]... [--hpa-sync-period SECONDS]\n"
    "             [--hpa-downscale-stabilization SECONDS]\n"
    "             [--notebook-python PATH] [--notebook-env KEY=PYTHON]...\n"
    "\n"
    "Serves the projects.jobs REST API (docs/service.md). Defaults: --listen\n"
    "127.0.0.1:8470, --data-dir ./var (SQLite store, logs), this machine as the\n"
    "only node, --python $KILN_PYTHON or python3. Without --tokens only loopback\n"
    "addresses may be used. Each --bucket is a gs:// bucket kilnd holds under\n"
    "DATA/objects (for PROJECT only, or every project); --max-object caps one\n"
    "object (default 1 GiB), --max-package-bytes one http(s):// packageUri\n"
    "fetched when a job starts (default 1 GiB). A non-loopback --listen also needs --tls-cert and\n"
    "--tls-key (PEM), or --insecure-plain-http. SIGHUP reloads the tokens file and\n"
    "the certificate. Below --min-free-bytes free in the data dir's file system\n"
    "(default 64 MiB) creates answer 503. --executor slurm runs the jobs on the\n"
    "Slurm cluster of SLURM_CONF (partition --slurm-partition): docs/slurm.md;\n"
    "kiln's own supervisor runs them, Slurm places each gang as an allocation and\n"
    "every replica is a step in it.\n"
    "Without --node-config this machine's GPUs come from NVML: libnvidia-ml.so.1, or\n"
    "--nvml-library PATH (also $KILN_NVML_LIBRARY); docs/gpu.md. --gpu-check PROGRAM\n"
    "checks each idle GPU before work (at start, every --gpu-check-every seconds,\n"
    "on kiln nodes uncordon --gpu; each run within --gpu-check-timeout, default 60).\n"
    "--gpu-share INDEX=SHARES shares GPU INDEX through CUDA MPS, each share capped.\n"
    "--queues FILE|DIR admits jobs as Kueue does, from Kueue's own ClusterQueue,\n"
    "LocalQueue, ResourceFlavor, Cohort and WorkloadPriorityClass YAML (v1beta2 or\n"
    "v1beta1, docs/queues.md): a file, or a directory's *.yaml and *.yml; repeatable,\n"
    "all of them one set. SIGHUP reloads them all (one bad file leaves the whole old\n"
    "set in use). Under --executor slurm\n"
    "it stays kiln's admission, Slurm placing what kiln admitted (--slurm-queues\n"
    "kiln, the default), or becomes Slurm's accounts, Slurm admitting (--slurm-queues\n"
    "accounts).\n"
    "Notebook instances (docs/notebooks.md) run JupyterLab from --notebook-python\n"
    "(default $KILN_NOTEBOOK_PYTHON or ~/.cache/kiln/notebook-venv/bin/python);\n"
    "--notebook-env maps a vmImage family or image name to another Python.\n"
    "--check-config reads everything these options name, as a start would, prints\n"
    "what it found and every problem, and exits (1 on any problem; docs/install.md).\n";

/* Reads the tokens file into d->auth (the old table, if any, is freed
 * once no request reads it). Returns 0, or -1 after printing why. The
 * file's "project P user U" lines go into d->users once at start instead
 * (kiln_users_load): the supervisor reads d->users without a lock, so a
 * SIGHUP reloads the tokens but not the run-as users (docs/service.md). */
static int load_tokens(kilnd *d, const char *path)
{
    char err[PATH_MAX + 256];
    size_t n_plain = 0;
    kiln_tokens *t = kiln_tokens_load(path, &n_plain, err, sizeof err);
    if (!t) {
        fprintf(stderr, "kilnd: %s\n", err);
        return -1;
    }
    if (n_plain)
        fprintf(stderr,
                "kilnd: warning: %zu line%s of '%s' hold%s a token in clear; 'sha256:HEX' "
                "lines keep a copy of the file from being a key (docs/service.md)\n",
                n_plain, n_plain == 1 ? "" : "s", path, n_plain == 1 ? "s" : "");
    kiln_auth_swap(d->auth, t);
    return 0;
}

static bool is_loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0 || strncmp(host, "127.", 4) == 0;
}

/* Binds HOST:PORT; returns the socket or -1. *bound gets "HOST:PORT". */
static int bind_listen(const char *spec, char *bound, size_t blen)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) return -1;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    struct addrinfo hints = {
        .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res) return -1;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    char ip[64];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    snprintf(bound, blen, "%s:%d", ip, ntohs(a.sin_port));
    return fd;
}

/* The runtime defaults that work on Debian 12 machines like the project's
 * (docs/service.md, "Containers"): crun refuses hybrid cgroups, and the
 * default container rlimits are above what root may raise here. */
static const char *const default_runtime_args[] = {"--runtime", "runc", NULL};
static const char *const default_run_args[] = {
    "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "--network", "host", NULL};

static int strv_from(kiln_strv *v, const char *const *src)
{
    kiln_strv_clear(v);
    for (size_t i = 0; src[i]; i++)
        if (kiln_strv_push(v, src[i]) != KILN_OK) return -1;
    return 0;
}

static int strv_from_json(kiln_strv *v, json_t *a)
{
    size_t i;
    json_t *x;
    kiln_strv_clear(v);
    json_array_foreach(a, i, x)
    {
        if (!json_is_string(x) || kiln_strv_push(v, json_string_value(x)) != KILN_OK) return -1;
    }
    return 0;
}

/* The node config's "containerRuntime": {"path", "globalArgs", "runArgs",
 * "cdiDirs"}; anything else in it is an error, not ignored. Returns -1 with
 * a message. *path_out gets a malloc'd path when the file names one. */
static int load_container_config(kilnd *d, char **path_out)
{
    json_error_t je;
    json_t *root = json_load_file(d->node_config, 0, &je), *cr, *v;
    const char *k;
    int rc = -1;
    if (!root) return 0; /* kiln_cluster_load reports a broken file */
    cr = json_object_get(root, "containerRuntime");
    if (!cr) {
        rc = 0;
        goto out;
    }
    if (!json_is_object(cr)) goto bad;
    json_object_foreach(cr, k, v)
    {
        if (strcmp(k, "path") == 0 && json_is_string(v)) {
            free(*path_out);
            *path_out = strdup(json_string_value(v));
        } else if (strcmp(k, "globalArgs") == 0 && json_is_array(v)) {
            if (strv_from_json(&d->exec.runtime_args, v) < 0) goto bad;
        } else if (strcmp(k, "runArgs") == 0 && json_is_array(v)) {
            if (strv_from_json(&d->exec.run_args, v) < 0) goto bad;
        } else if (strcmp(k, "cdiDirs") == 0 && json_is_string(v)) {
            d->exec.cdi_dirs = strdup(json_string_value(v));
        } else {
            fprintf(stderr, "kilnd: %s: containerRuntime.%s: unknown, or not of its type\n",
                    d->node_config, k);
            goto out;
        }
    }
    rc = 0;
    goto out;
bad:
    fprintf(stderr,
            "kilnd: %s: containerRuntime wants {\"path\": STRING, \"globalArgs\": [STRING], "
            "\"runArgs\": [STRING], \"cdiDirs\": STRING}\n",
            d->node_config);
out:
    json_decref(root);
    return rc;
}

/* The node config's "persistentVolumeClaims" (kiln/claims.h): -1 after
 * printing what is wrong with it. */
static int load_claims(kilnd *d)
{
    json_t *root = json_load_file(d->node_config, 0, NULL);
    kiln_diag dg = KILN_DIAG_INIT;
    int rc = 0;
    if (!root) return 0; /* kiln_cluster_load reports a broken file */
    if (kiln_claims_from_json(root, &d->claims, &dg) != KILN_OK) {
        for (size_t i = 0; i < dg.n; i++)
            fprintf(stderr, "kilnd: %s: %s: %s\n", d->node_config, dg.v[i].field,
                    dg.v[i].description);
        if (!dg.n) fprintf(stderr, "kilnd: out of memory\n");
        rc = -1;
    }
    kiln_diag_free(&dg);
    json_decref(root);
    return rc;
}

/* PATH lookup of an executable name (a name with a slash is taken as is). */
/* A Slurm node's GRES type as kiln's accelerator type (--slurm-gpu-type). */
static const char *slurm_type_of(void *ctx, const char *gres)
{
    return kiln_slurm_kiln_type(ctx, gres);
}

static char *which(const char *name)
{
    if (strchr(name, '/')) return access(name, X_OK) == 0 ? strdup(name) : NULL;
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    char *dirs = strdup(path ? path : "/usr/local/bin:/usr/bin:/bin"), *save = NULL;
    char *found = NULL;
    for (char *dir = dirs ? strtok_r(dirs, ":", &save) : NULL; dir && !found;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, sizeof buf, "%s/%s", dir, name);
        if (access(buf, X_OK) == 0) found = strdup(buf);
    }
    free(dirs);
    return found;
}

static char *find_next_to_self(const char *name)
{
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return NULL;
    *slash = '\0';
    snprintf(path, sizeof path, "%s/%s", self, name);
    return access(path, X_OK) == 0 ? strdup(path) : NULL;
}

static char *find_kiln_train(void)
{
    char self[PATH_MAX], path[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return NULL;
    *slash = '\0';
    snprintf(path, sizeof path, "%s/kiln-train", self);
    return access(path, X_OK) == 0 ? strdup(path) : NULL;
}

/* This machine's GPUs (node 0 without --node-config): their types become
 * catalog accelerators valid on this node (kiln_catalog_add_site_gpu), and
 * the watch starts. Prints what discovery found. Returns 0, or -1 after
 * printing why. */
static int start_gpus(kilnd *d, const char *note)
{
    const kiln_node *n = d->cluster.n ? &d->cluster.nodes[0] : NULL;
    char why[512];
    fprintf(stderr, "kilnd: GPUs: %s\n", note);
    if (d->n_gpu_share && (!n || !n->n_devs)) {
        fprintf(stderr, "kilnd: --gpu-share: this machine has no GPU to share\n");
        return -1;
    }
    if (!n || !n->n_devs) return 0;
    /* --gpu-share INDEX=N: N share devices of GPU INDEX, under its MPS daemon */
    for (size_t k = 0; k < d->n_gpu_share; k++) {
        char *end = NULL;
        const char *v = d->gpu_share[k];
        long gi = strtol(v, &end, 10);
        long ns = end && *end == '=' && end != v ? strtol(end + 1, &end, 10) : -1;
        if (!end || *end || ns < 0) {
            fprintf(stderr, "kilnd: --gpu-share is INDEX=SHARES (0=4), not '%s'\n", v);
            return -1;
        }
        kiln_err e = kiln_devices_add_shares((kiln_node *)n, (int)gi, (int)ns, why, sizeof why);
        if (e != KILN_OK) {
            fprintf(stderr, "kilnd: --gpu-share %s: %s\n", v,
                    e == KILN_ENOMEM ? "out of memory" : why);
            return -1;
        }
    }
    for (size_t j = 0; j < n->n_devs; j++) {
        const kiln_device *g = &n->devs[j];
        if (!g->refused || !strstr(g->refused, "shared through MPS")) continue;
        char dir[600];
        snprintf(dir, sizeof dir, "%s/mps", d->data_dir);
        mkdir(dir, 0700);
        snprintf(dir, sizeof dir, "%s/mps/%d", d->data_dir, g->index);
        if (!kiln_mps_start(NULL, dir, g, why, sizeof why)) {
            fprintf(stderr, "kilnd: --gpu-share: %s\n", why);
            return -1;
        }
        d->mps_started[j] = true;
        fprintf(stderr, "kilnd: GPU %d (%s): MPS control daemon started (%s)\n", g->index, g->uuid,
                dir);
    }
    for (size_t j = 0; j < n->n_devs; j++) {
        bool first = true;
        int count = 0;
        for (size_t p = 0; p < n->n_devs; p++) {
            first &= p >= j || strcmp(n->devs[p].type, n->devs[j].type) != 0;
            count += strcmp(n->devs[p].type, n->devs[j].type) == 0;
        }
        if (!first) continue;
        kiln_err e = kiln_catalog_add_site_gpu(d->catalog, n->devs[j].type, count);
        /* a MIG instance's type may also be asked for by the device plugin's name */
        char rb[96];
        if (e == KILN_OK && n->devs[j].mig_profile)
            e = kiln_catalog_add_site_gpu(
                d->catalog, kiln_devices_mig_resource(n->devs[j].mig_profile, rb, sizeof rb),
                count);
        if (e != KILN_OK) {
            fprintf(stderr, "kilnd: GPU type %s: %s\n", n->devs[j].type,
                    e == KILN_EINVAL ? "the catalog has it as a TPU" : "out of memory");
            return -1;
        }
    }
    for (size_t j = 0; j < n->n_devs; j++)
        if (n->devs[j].refused)
            fprintf(stderr, "kilnd: GPU %d (%s) is not handed out: %s\n", n->devs[j].index,
                    n->devs[j].uuid, n->devs[j].refused);
    d->gpus = kiln_gpu_watch_start(d->nvml_library, n->devs, n->n_devs, 1000, why, sizeof why);
    if (!d->gpus) {
        /* the GPUs were there a moment ago: run, but say that nothing watches them */
        fprintf(stderr, "kilnd: warning: GPU health and telemetry are off: %s\n", why);
        return 0;
    }
    kiln_gpu_watch_events(d->gpus, why, sizeof why);
    fprintf(stderr, "kilnd: GPU watch: telemetry every 1 s; %s\n", why);
    if (d->gpu_check) {
        kiln_gpu_watch_set_check(d->gpus, d->gpu_check, d->gpu_check_timeout);
        if (!kiln_gpu_watch_has_check(d->gpus)) {
            fprintf(stderr, "kilnd: --gpu-check: cannot start the check thread\n");
            return -1;
        }
        fprintf(stderr, "kilnd: GPU check: %s on every idle GPU at start%s\n", d->gpu_check,
                d->gpu_check_every ? ", then on a schedule" : "");
    }
    return 0;
}

/* What a queues file may not say under --executor slurm: as Slurm's
 * accounts (--slurm-queues accounts), whatever they cannot carry; as kiln's
 * own admission (Slurm places), a flavor's labels other than a node's name. */
static size_t queues_slurm_refusals(const kilnd *d, const kiln_queues *q, kiln_diag *dg)
{
    return d->slurm.accounts ? kiln_queues_slurm_refusals(q, d->slurm.machine_resources, dg)
                             : kiln_queues_steps_refusals(q, dg);
}

/* SIGHUP: every --queues path again, as one set. One file that does not
 * load leaves the old set in use, and the log says why. The supervisor's next pass charges
 * the running jobs to the new queues (it recounts usage every pass). */
static void reload_queues(kilnd *d)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_queues *nq = NULL;
    char why[1024];
    if (kiln_queues_load_paths((const char *const *)d->queues_paths, d->n_queues_paths, &nq, &dg) !=
            KILN_OK ||
        (d->slurm.on && queues_slurm_refusals(d, nq, &dg) > 0)) {
        fprintf(stderr, "kilnd: SIGHUP: the queues files (--queues) do not load; still "
                        "admitting with the old set, every file of it:\n");
        kiln_diag_print(&dg, stderr);
        kiln_diag_free(&dg);
        kiln_queues_free(nq);
        return;
    }
    /* under Slurm its accounts first: jobs submitted after the swap name them */
    if (d->slurm.on && d->slurm.accounts &&
        !kiln_slurm_accounts_apply(&d->slurm_cfg, nq, why, sizeof why)) {
        fprintf(stderr, "kilnd: SIGHUP: %s; still submitting with the old queues file\n", why);
        kiln_diag_free(&dg);
        kiln_queues_free(nq);
        return;
    }
    pthread_mutex_lock(&d->queues_mu);
    kiln_queues *old = d->queues;
    kiln_queues_afs_carry(nq, old); /* the LocalQueues' consumed usage goes on */
    d->queues = nq;
    d->queues_gen++;
    pthread_mutex_unlock(&d->queues_mu);
    kiln_queues_free(old);
    kiln_diag_free(&dg);
    fprintf(stderr,
            "kilnd: SIGHUP: reloaded the queues files (%zu --queues; %zu ClusterQueues, %zu "
            "LocalQueues)\n",
            d->n_queues_paths, nq->ncqs, nq->nlqs);
    kiln_doorbell_ring(&d->wake);
}

static void cleanup(kilnd *d)
{
    kiln_gpu_watch_stop(d->gpus);
    for (size_t j = 0; d->cluster.n && j < d->cluster.nodes[0].n_devs; j++)
        if (d->mps_started[j]) {
            char dir[600];
            snprintf(dir, sizeof dir, "%s/mps/%d", d->data_dir, d->cluster.nodes[0].devs[j].index);
            kiln_mps_stop(NULL, dir, &d->cluster.nodes[0].devs[j]);
        }
    /* the threads that use them have ended (main joined them) */
    kiln_notebooks_free(d->notebooks);
    kiln_jobfiles_free(d->jobfiles);
    kiln_sched_free(d->sched);
    kiln_cluster_free(&d->cluster);
    kiln_claims_free(&d->claims);
    kiln_catalog_free(d->catalog);
    kiln_store_close(d->store);
    kiln_objects_close(d->objects);
    kiln_auth_free(d->auth);
    kiln_audit_close(d->audit);
    free(d->drain_pending);
    free(d->kiln_train);
    free(d->mpi_agent);
    free((char *)d->exec.monitor);
    free(d->slurm.partition);
    free(d->slurm.account);
    free(d->slurm.task);
    for (size_t i = 0; i < d->slurm.gpu_type_n; i++)
        free(d->slurm.gpu_types[i]);
    free(d->slurm.gpu_types);
    free((char *)d->exec.container_runtime);
    free((char *)d->exec.cdi_dirs);
    kiln_strv_clear(&d->exec.runtime_args);
    kiln_strv_clear(&d->exec.run_args);
    kiln_users_free(d->users);
    kiln_doorbell_close(&d->wake);
    free(d->nb_python);
    free(d->nb_env);
    pthread_mutex_destroy(&d->mu);
    kiln_queues_free(d->queues);
    free(d->queues_paths);
    kilnd_qwait_free(d->qwait, d->n_qwait);
    kilnd_spos_publish(d, NULL, 0);
    pthread_mutex_destroy(&d->queues_mu);
}

int main(int argc, char **argv)
{
    kilnd d = {.listen = "127.0.0.1:8470",
               .data_dir = "./var",
               .grace_ms = 10000,
               .hpa_sync_ms = 15000,
               .hpa_down_window_ms = 300000,
               .port_base = 30000,
               .port_count = 10000,
               .max_body = 1u << 20,
               .max_object = (uint64_t)1 << 30,
               .max_package_bytes = (uint64_t)1 << 30,
               .log_cap = (size_t)1 << 30,
               .threads = 4,
               .python = "python3",
               .audit_max_bytes = (uint64_t)100 << 20,
               .audit_keep = 5,
               .max_inflight = 512,
               .max_inflight_token = 64,
               .min_free = (uint64_t)64 << 20,
               .wake = {{-1, -1}}};
    kiln_diag dg = KILN_DIAG_INIT;
    char path[PATH_MAX + 32], bound[128];
    const char *kiln_train = NULL, *monitor = NULL, *runtime = NULL;
    const char *slurm_flag = NULL; /* the first --slurm-* flag given: needs --executor slurm */
    bool queues_mode_set = false;  /* --slurm-queues given */
    char *cfg_runtime = NULL;
    struct MHD_Daemon *api = NULL;
    pthread_t sup, nb;
    bool sup_started = false, nb_started = false;
    int lfd = -1, rc = 1, store_hold = -1;
    char *data_abs = NULL, *audit_default = NULL;
    bool insecure_plain = false, check_config = false;
    const char *buckets[64];
    size_t n_buckets = 0;

    pthread_mutex_init(&d.mu, NULL);
    pthread_mutex_init(&d.queues_mu, NULL);
    /* before any thread: the supervisor fetches http(s) packageUris (fetch.c) */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (getenv("KILN_PYTHON") && *getenv("KILN_PYTHON")) d.python = getenv("KILN_PYTHON");
    if (getenv("KILN_NOTEBOOK_PYTHON") && *getenv("KILN_NOTEBOOK_PYTHON"))
        d.nb_python = strdup(getenv("KILN_NOTEBOOK_PYTHON"));
    else if (getenv("HOME") &&
             asprintf(&d.nb_python, "%s/.cache/kiln/notebook-venv/bin/python", getenv("HOME")) < 0)
        d.nb_python = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            rc = 0;
            goto out;
        }
        if (strcmp(a, "--version") == 0) {
            printf("kilnd %s\n", kiln__version_string());
            rc = 0;
            goto out;
        }
        if (strcmp(a, "--insecure-plain-http") == 0) {
            insecure_plain = true;
            continue;
        }
        if (strcmp(a, "--check-config") == 0) {
            check_config = true;
            continue;
        }
        if (strncmp(a, "--slurm-", 8) == 0 && !slurm_flag) slurm_flag = a;
        if (!v) {
            fprintf(stderr, "kilnd: unknown option or missing value: %s\n%s", a, usage);
            goto out;
        }
        i++;
        if (strcmp(a, "--listen") == 0)
            d.listen = (char *)v;
        else if (strcmp(a, "--data-dir") == 0)
            d.data_dir = (char *)v;
        else if (strcmp(a, "--node-config") == 0)
            d.node_config = (char *)v;
        else if (strcmp(a, "--catalog") == 0)
            d.catalog_path = (char *)v;
        else if (strcmp(a, "--runtimes-dir") == 0)
            d.runtimes_dir = (char *)v; /* a Kubeflow body's TrainJob runtimes (api/api_jobs.c) */
        else if (strcmp(a, "--tokens") == 0)
            d.tokens_path = (char *)v;
        else if (strcmp(a, "--queues") == 0) {
            /* repeatable: every one is read, as one set */
            char **np = realloc(d.queues_paths, (d.n_queues_paths + 1) * sizeof *np);
            if (!np) goto out;
            d.queues_paths = np;
            d.queues_paths[d.n_queues_paths++] = (char *)v;
            if (!d.queues_path) d.queues_path = (char *)v;
        } else if (strcmp(a, "--python") == 0)
            d.python = v;
        else if (strcmp(a, "--notebook-python") == 0) {
            free(d.nb_python);
            d.nb_python = strdup(v);
        } else if (strcmp(a, "--notebook-env") == 0) {
            const char **nv = realloc(d.nb_env, (d.nb_env_n + 1) * sizeof *nv);
            if (!nv || !strchr(v, '=')) {
                fprintf(stderr, "kilnd: --notebook-env is KEY=PYTHON, not '%s'\n", v);
                goto out;
            }
            d.nb_env = nv;
            d.nb_env[d.nb_env_n++] = v;
        } else if (strcmp(a, "--tls-cert") == 0)
            d.tls_cert = v;
        else if (strcmp(a, "--tls-key") == 0)
            d.tls_key = v;
        else if (strcmp(a, "--audit-log") == 0)
            d.audit_path = (char *)v;
        else if (strcmp(a, "--audit-log-max-bytes") == 0)
            d.audit_max_bytes = (uint64_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--audit-log-keep") == 0)
            d.audit_keep = atoi(v);
        else if (strcmp(a, "--max-inflight") == 0)
            d.max_inflight = atoi(v);
        else if (strcmp(a, "--max-inflight-per-token") == 0)
            d.max_inflight_token = atoi(v);
        else if (strcmp(a, "--min-free-bytes") == 0)
            d.min_free = (uint64_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--kiln-train") == 0)
            kiln_train = v;
        else if (strcmp(a, "--monitor") == 0)
            monitor = v;
        else if (strcmp(a, "--nvml-library") == 0)
            d.nvml_library = v;
        else if (strcmp(a, "--gpu-check") == 0)
            d.gpu_check = v;
        else if (strcmp(a, "--gpu-share") == 0) {
            if (d.n_gpu_share == KILN_MAX_NODE_DEVICES) {
                fprintf(stderr, "kilnd: --gpu-share: at most %d\n", KILN_MAX_NODE_DEVICES);
                goto out;
            }
            d.gpu_share[d.n_gpu_share++] = v;
        } else if (strcmp(a, "--gpu-check-every") == 0 || strcmp(a, "--gpu-check-timeout") == 0) {
            char *end = NULL;
            long x = strtol(v, &end, 10);
            if (!end || *end || end == v || x < 0 || x > 86400 * 365) {
                fprintf(stderr, "kilnd: %s wants seconds, not '%s'\n", a, v);
                goto out;
            }
            *(strcmp(a, "--gpu-check-every") == 0 ? &d.gpu_check_every : &d.gpu_check_timeout) =
                (int)x;
        } else if (strcmp(a, "--executor") == 0) {
            if (strcmp(v, "slurm") != 0 && strcmp(v, "local") != 0) {
                fprintf(stderr, "kilnd: --executor is local or slurm, not '%s'\n", v);
                goto out;
            }
            d.slurm.on = strcmp(v, "slurm") == 0;
        } else if (strcmp(a, "--slurm-partition") == 0) {
            free(d.slurm.partition);
            d.slurm.partition = strdup(v);
        } else if (strcmp(a, "--slurm-account") == 0) {
            free(d.slurm.account);
            d.slurm.account = strdup(v);
        } else if (strcmp(a, "--slurm-launch") == 0) {
            /* kiln's one supervisor over Slurm's allocations is the only
             * way left: "steps" is still accepted, as scripts name it */
            if (strcmp(v, "steps") != 0) {
                fprintf(stderr,
                        "kilnd: --slurm-launch %s: %s; every job runs under kiln's one "
                        "supervisor, each gang a Slurm allocation (docs/slurm.md): remove the "
                        "flag\n",
                        v,
                        strcmp(v, "batch") == 0
                            ? "the batch executor was removed (its queues as Slurm accounts "
                              "are --slurm-queues accounts)"
                            : "the only launch is steps");
                goto out;
            }
        } else if (strcmp(a, "--slurm-queues") == 0) {
            if (strcmp(v, "kiln") != 0 && strcmp(v, "accounts") != 0) {
                fprintf(stderr, "kilnd: --slurm-queues is kiln or accounts, not '%s'\n", v);
                goto out;
            }
            d.slurm.accounts = strcmp(v, "accounts") == 0;
            queues_mode_set = true;
        } else if (strcmp(a, "--slurm-machine-resources") == 0) {
            if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
                fprintf(stderr, "kilnd: --slurm-machine-resources wants yes or no\n");
                goto out;
            }
            d.slurm.machine_resources = strcmp(v, "yes") == 0;
        } else if (strcmp(a, "--slurm-gpu-type") == 0) {
            const char *eq = strchr(v, '=');
            char **nv = realloc(d.slurm.gpu_types, (d.slurm.gpu_type_n + 1) * sizeof *nv);
            if (nv) d.slurm.gpu_types = nv;
            if (!eq || eq == v || !eq[1] || strchr(eq + 1, ':') || !nv) {
                fprintf(stderr, "kilnd: --slurm-gpu-type wants KILN_TYPE=GRES_TYPE, not '%s'\n", v);
                goto out;
            }
            d.slurm.gpu_types[d.slurm.gpu_type_n++] = strdup(v);
        } else if (strcmp(a, "--container-runtime") == 0)
            runtime = v;
        else if (strcmp(a, "--allow-root-replicas") == 0) {
            if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
                fprintf(stderr, "kilnd: --allow-root-replicas wants yes or no\n");
                goto out;
            }
            d.allow_root_replicas = strcmp(v, "yes") == 0;
        } else if (strcmp(a, "--grace-period") == 0)
            d.grace_ms = (int)(atof(v) * 1000);
        else if (strcmp(a, "--hpa-sync-period") == 0)
            d.hpa_sync_ms = (int)(atof(v) * 1000);
        else if (strcmp(a, "--hpa-downscale-stabilization") == 0)
            d.hpa_down_window_ms = (int)(atof(v) * 1000);
        else if (strcmp(a, "--threads") == 0)
            d.threads = atoi(v);
        else if (strcmp(a, "--log-cap") == 0)
            d.log_cap = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--max-object") == 0)
            d.max_object = (uint64_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--max-package-bytes") == 0)
            d.max_package_bytes = (uint64_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--bucket") == 0) {
            if (n_buckets == sizeof buckets / sizeof *buckets) {
                fprintf(stderr, "kilnd: at most 64 --bucket flags\n");
                goto out;
            }
            buckets[n_buckets++] = v;
        } else if (strcmp(a, "--max-body") == 0)
            d.max_body = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--port-range") == 0) {
            int lo, hi;
            if (sscanf(v, "%d-%d", &lo, &hi) != 2 || lo < 1024 || hi > 65535 || hi < lo) {
                fprintf(stderr, "kilnd: --port-range wants LO-HI within 1024-65535\n");
                goto out;
            }
            d.port_base = lo;
            d.port_count = hi - lo + 1;
        } else {
            fprintf(stderr, "kilnd: unknown option %s\n%s", a, usage);
            goto out;
        }
    }
    if (d.hpa_sync_ms < 100 || d.hpa_sync_ms > 3600000 || d.hpa_down_window_ms < 0 ||
        d.hpa_down_window_ms > 3600000) {
        fprintf(stderr, "kilnd: --hpa-sync-period (0.1 to 3600 seconds) or "
                        "--hpa-downscale-stabilization (0 to 3600 seconds) out of range\n");
        goto out;
    }
    if (d.grace_ms < 0 || d.threads < 1 || d.threads > 64 || d.max_body < 1024 ||
        d.log_cap < 1024 || d.max_object < 1 || d.max_object > ((uint64_t)1 << 40) ||
        d.max_package_bytes < 1 || d.max_package_bytes > ((uint64_t)1 << 40) ||
        d.audit_max_bytes < 4096 || d.audit_keep < 0 || d.audit_keep > 100 || d.max_inflight < 1 ||
        d.max_inflight_token < 1) {
        fprintf(stderr, "kilnd: --grace-period, --threads (1-64), --max-body or --log-cap "
                        "(>= 1024), --max-object or --max-package-bytes (1 to 2^40), "
                        "--audit-log-max-bytes (>= 4096), "
                        "--audit-log-keep (0-100), --max-inflight or --max-inflight-per-token "
                        "(>= 1) out of range\n");
        goto out;
    }
    if (!d.tls_cert != !d.tls_key) {
        fprintf(stderr, "kilnd: --tls-cert and --tls-key go together\n");
        goto out;
    }
    /* before --check-config, which loads the tokens file into them as a
     * start would */
    if (!(d.auth = kiln_auth_new()) || !(d.users = kiln_users_new(d.allow_root_replicas))) {
        fprintf(stderr, "kilnd: out of memory\n");
        goto out;
    }
    if (check_config) {
        const kilnd_check_opts co = {kiln_train, monitor, runtime, insecure_plain};
        rc = kilnd_check_config(&d, &co, stdout);
        goto out;
    }
    if (d.tokens_path &&
        (load_tokens(&d, d.tokens_path) < 0 || kiln_users_load(d.users, d.tokens_path) < 0))
        goto out;
    /* what one executor cannot act on, before anything is made or loaded */
    if (d.slurm.on) {
        if (d.node_config) {
            fprintf(stderr, "kilnd: --node-config is the local executor's (this machine's "
                            "nodes); under --executor slurm the nodes are Slurm's: remove it\n");
            goto out;
        }
        if (!d.slurm.partition || !*d.slurm.partition) {
            fprintf(stderr, "kilnd: --executor slurm needs --slurm-partition P\n");
            goto out;
        }
        if (queues_mode_set && !d.queues_path) {
            fprintf(stderr, "kilnd: --slurm-queues says how a --queues file is carried out: "
                            "give --queues FILE, or remove it\n");
            goto out;
        }
        /* A project's Slurm jobs run as its user (root submits them with
         * sbatch --uid/--gid), with the run-as rules of the local executor
         * (src/auth/users.c); as root with no project user at all, every
         * job would run as root */
        if (geteuid() == 0 && !kiln_users_count(d.users) && !d.allow_root_replicas) {
            fprintf(stderr, "kilnd: --executor slurm as root would run every replica as root: "
                            "run kilnd as another user, name the projects' users in the tokens "
                            "file ('project P user U'), or allow that with "
                            "--allow-root-replicas yes\n");
            goto out;
        }
    } else if (slurm_flag) {
        fprintf(stderr, "kilnd: %s needs --executor slurm\n", slurm_flag);
        goto out;
    }
    {
        char host[256];
        const char *colon = strrchr(d.listen, ':');
        size_t hl = colon ? (size_t)(colon - d.listen) : 0;
        if (!colon || hl >= sizeof host) {
            fprintf(stderr, "kilnd: --listen wants HOST:PORT\n");
            goto out;
        }
        memcpy(host, d.listen, hl);
        host[hl] = '\0';
        if (!d.tokens_path && !is_loopback(host)) {
            fprintf(stderr,
                    "kilnd: refusing to listen on %s without --tokens: anyone who can "
                    "reach it could run programs on this machine. Give a tokens file "
                    "or listen on 127.0.0.1.\n",
                    d.listen);
            goto out;
        }
        if (!d.tls_cert && !insecure_plain && !is_loopback(host)) {
            fprintf(stderr,
                    "kilnd: refusing to listen on %s over plain HTTP: every bearer token "
                    "would cross the network in clear. Give --tls-cert FILE --tls-key FILE "
                    "(docs/service.md, HTTPS), or --insecure-plain-http on a network you "
                    "trust.\n",
                    d.listen);
            goto out;
        }
    }
    if (kilnd_mkdirs(d.data_dir) < 0) {
        fprintf(stderr, "kilnd: cannot create the data dir '%s': %s\n", d.data_dir,
                strerror(errno));
        goto out;
    }
    /* absolute, because replicas run in their own work dirs: a relative data
     * dir (the default ./var) would leave them a PYTHONPATH that finds nothing */
    if ((data_abs = realpath(d.data_dir, NULL))) d.data_dir = data_abs;
    if (kiln_users_check_dirs(d.users, d.data_dir, path, sizeof path) != KILN_OK) {
        fprintf(stderr, "kilnd: %s\n", path);
        goto out;
    }
    if (!d.audit_path && asprintf(&audit_default, "%s/audit.log", d.data_dir) > 0)
        d.audit_path = audit_default;
    if (!d.audit_path ||
        !(d.audit = kiln_audit_open(d.audit_path, d.audit_max_bytes, d.audit_keep))) {
        fprintf(stderr, "kilnd: cannot open the audit log '%s': %s\n",
                d.audit_path ? d.audit_path : "", strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "%s/kilnd.db", d.data_dir);
    /* held shared until exit: `kiln admin restore` refuses while it is */
    if (kiln_store_hold(path, &store_hold, &dg) != KILN_OK) goto diag;
    if (kiln_store_open(path, &d.store, &dg) != KILN_OK) goto diag;
    if (!(d.jobfiles = kiln_jobfiles_new(d.data_dir, d.store, &d.stop))) {
        fprintf(stderr, "kilnd: out of memory\n");
        goto out;
    }
    snprintf(path, sizeof path, "%s/objects", d.data_dir);
    if (kiln_objects_open(path, d.max_object, &d.objects) != KILN_OK) {
        fprintf(stderr, "kilnd: cannot open the staging store '%s': %s\n", path, strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < n_buckets; i++) {
        /* NAME or NAME:PROJECT */
        char name[128];
        const char *colon = strchr(buckets[i], ':'), *proj = colon ? colon + 1 : NULL;
        size_t nl = colon ? (size_t)(colon - buckets[i]) : strlen(buckets[i]);
        snprintf(name, sizeof name, "%.*s", (int)(nl < sizeof name ? nl : sizeof name - 1),
                 buckets[i]);
        if (proj && !*proj) proj = NULL;
        kiln_err be = kiln_objects_add_bucket(d.objects, name, proj);
        if (be != KILN_OK) {
            fprintf(stderr, "kilnd: --bucket %s: %s\n", buckets[i],
                    be == KILN_EINVAL   ? "not a bucket name (3-63 of a-z 0-9 . _ -)"
                    : be == KILN_EEXIST ? "given twice"
                                        : "cannot create its directory");
            goto out;
        }
    }
    if (kiln_catalog_default(&d.catalog, &dg) != KILN_OK) goto diag;
    if (d.catalog_path && kiln_catalog_merge_file(d.catalog, d.catalog_path, &dg) != KILN_OK)
        goto diag;
    /* the Slurm code's view of kilnd: its settings are final by now, the
     * container runtime is found later (d.exec is lent, not copied) */
    d.slurm_cfg = (kiln_slurm_cfg){.partition = d.slurm.partition,
                                   .account = d.slurm.account,
                                   .gpu_types = d.slurm.gpu_types,
                                   .gpu_type_n = d.slurm.gpu_type_n,
                                   .catalog = d.catalog,
                                   .users = d.users,
                                   .exec = &d.exec};
    if (d.queues_path && kiln_queues_load_paths((const char *const *)d.queues_paths,
                                                d.n_queues_paths, &d.queues, &dg) != KILN_OK) {
        fprintf(stderr, "kilnd: --queues:\n");
        goto diag;
    }
    /* --slurm-queues accounts: Slurm admits every job itself, the file
     * becomes Slurm's accounts, QOS and associations
     * (src/exec/slurm/accounts.h); what Slurm gives no meaning is refused.
     * kiln: kiln's own admission (src/exec/supervisor/admit.c), Slurm
     * places what it admitted */
    if (d.queues_path && d.slurm.on && queues_slurm_refusals(&d, d.queues, &dg) > 0) {
        fprintf(stderr,
                "kilnd: --queues %s with --executor slurm: these fields are refused "
                "(docs/queues.md, \"Under --executor slurm%s\"):\n",
                d.queues_path,
                d.slurm.accounts ? " --slurm-queues accounts" : " --slurm-queues kiln");
        goto diag;
    }
    if (d.queues_path && d.slurm.on && d.slurm.accounts &&
        !kiln_slurm_accounts_apply(&d.slurm_cfg, d.queues, path, sizeof path)) {
        fprintf(stderr, "kilnd: --queues %s with --executor slurm: %s\n", d.queues_path, path);
        goto out;
    }
    char gpu_note[1024];
    if (d.slurm.on) {
        /* the one supervisor over Slurm: the partition's nodes are the
         * cluster kiln's book keeps (Slurm places; src/exec/supervisor/place.c) */
        if (kiln_slurm_cluster(d.slurm.partition, d.slurm.machine_resources, slurm_type_of,
                               &d.slurm_cfg, &d.cluster, gpu_note, sizeof gpu_note, path,
                               sizeof path) != KILN_OK) {
            fprintf(stderr, "kilnd: --executor slurm: %s\n", path);
            goto out;
        }
        if (gpu_note[0]) fprintf(stderr, "kilnd: --executor slurm: %s\n", gpu_note);
    } else if (kiln_cluster_load(d.node_config, d.nvml_library, &d.cluster, &dg, gpu_note,
                                 sizeof gpu_note) != KILN_OK)
        goto diag;
    if (d.node_config && d.nvml_library) {
        fprintf(stderr, "kilnd: --nvml-library is for this machine's GPUs; with --node-config "
                        "the nodes and their devices are declared: remove one\n");
        goto out;
    }
    if (!d.gpu_check && (d.gpu_check_every || d.gpu_check_timeout)) {
        fprintf(stderr, "kilnd: --gpu-check-every and --gpu-check-timeout need --gpu-check\n");
        goto out;
    }
    if (d.n_gpu_share && (d.node_config || d.slurm.on)) {
        fprintf(stderr,
                "kilnd: --gpu-share shares this machine's GPUs (NVML, MPS); with %s there "
                "are none of them: remove one\n",
                d.node_config ? "--node-config" : "--executor slurm");
        goto out;
    }
    if (d.gpu_check && (d.node_config || d.slurm.on)) {
        fprintf(stderr,
                "kilnd: --gpu-check checks this machine's GPUs (NVML); with %s there are "
                "none of them to check: remove one\n",
                d.node_config ? "--node-config" : "--executor slurm");
        goto out;
    }
    if (!d.node_config && !d.slurm.on && start_gpus(&d, gpu_note) < 0) goto out;
    if (d.gpu_check && !kiln_gpu_watch_has_check(d.gpus)) {
        fprintf(stderr, "kilnd: --gpu-check: no watched GPU to check on this machine (%s)\n",
                gpu_note);
        goto out;
    }
    d.sched = kiln_sched_new(&d.cluster);
    d.drain_pending = calloc(d.cluster.n ? d.cluster.n : 1, sizeof(bool));
    if (!d.sched || !d.drain_pending || kiln_doorbell_open(&d.wake) < 0) {
        fprintf(stderr, "kilnd: out of resources\n");
        goto out;
    }
    d.notebooks = kiln_notebooks_new(&(kiln_notebooks_config){.data_dir = d.data_dir,
                                                              .store = d.store,
                                                              .catalog = d.catalog,
                                                              .objects = d.objects,
                                                              .users = d.users,
                                                              .jobfiles = d.jobfiles,
                                                              .python = d.nb_python,
                                                              .env = d.nb_env,
                                                              .env_n = d.nb_env_n,
                                                              .stop = &d.stop,
                                                              .wake = &d.wake});
    if (!d.notebooks) {
        fprintf(stderr, "kilnd: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < d.cluster.n; i++) {
        bool cordoned = false;
        kiln_store_node_cordoned(d.store, d.cluster.nodes[i].name, &cordoned);
        kiln_sched_set_cordon(d.sched, i, cordoned);
    }
    d.kiln_train = kiln_train ? strdup(kiln_train) : find_kiln_train();
    d.mpi_agent = find_next_to_self("kiln-mpi-agent"); /* an MPIJob's fails without it */
    d.exec.log_cap = d.log_cap;
    d.exec.monitor = monitor ? strdup(monitor) : find_next_to_self("kiln-monitor");
    if (!d.exec.monitor) {
        fprintf(stderr, "kilnd: cannot find kiln-monitor next to kilnd (give --monitor PATH)\n");
        goto out;
    }
    if (strv_from(&d.exec.runtime_args, default_runtime_args) < 0 ||
        strv_from(&d.exec.run_args, default_run_args) < 0)
        goto out;
    if (d.node_config && load_container_config(&d, &cfg_runtime) < 0) goto out;
    if (d.node_config && load_claims(&d) < 0) goto out;
    /* --container-runtime, else the node config's, else podman on PATH */
    d.exec.container_runtime = which(runtime ? runtime : cfg_runtime ? cfg_runtime : "podman");
    if ((runtime || cfg_runtime) && !d.exec.container_runtime) {
        fprintf(stderr, "kilnd: the container runtime '%s' is not an executable\n",
                runtime ? runtime : cfg_runtime);
        goto out;
    }

    if (d.slurm.on) {
        /* a container replica's GPUs go in through it (Slurm's step knows them) */
        d.slurm.task = find_next_to_self("kiln-slurm-task");
        if (!d.slurm.task) {
            fprintf(stderr, "kilnd: cannot find kiln-slurm-task next to kilnd\n");
            goto out;
        }
    }
    kilnd_reconcile(&d);

    lfd = bind_listen(d.listen, bound, sizeof bound);
    if (lfd < 0) {
        fprintf(stderr, "kilnd: cannot listen on %s: %s\n", d.listen, strerror(errno));
        goto out;
    }
    /* signals go to the main thread only (sigwait below); replicas get a clean mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (pthread_create(&sup, NULL, kilnd_supervisor, &d) != 0) goto out;
    sup_started = true;
    /* notebook instances: their jobs go through the supervisor (not with Slurm) */
    if (!d.slurm.on && pthread_create(&nb, NULL, kiln_notebooks_run, d.notebooks) == 0)
        nb_started = true;
    api = kiln_api_start(&d, lfd);
    if (!api) {
        fprintf(stderr, "kilnd: cannot start the HTTP server\n");
        goto out;
    }
    snprintf(path, sizeof path, "%s/kilnd.addr", d.data_dir);
    char line[160];
    snprintf(line, sizeof line, "%s\n", bound);
    kiln__write_atomic(path, line, strlen(line), 0644);
    fprintf(stderr, "kilnd: listening on %s://%s (data %s, %zu node%s%s%s)\n",
            d.tls ? "https" : "http", bound, d.data_dir, d.cluster.n, d.cluster.n == 1 ? "" : "s",
            kiln_auth_required(d.auth) ? ", tokens required" : "",
            d.kiln_train ? "" : ", no kiln-train");
    fprintf(stderr, "kilnd: containers: %s\n",
            d.exec.container_runtime ? d.exec.container_runtime : "none (no podman on PATH)");
    /* real GPUs and podman: say now, not at the first GPU container, when
     * containers cannot have them yet */
    if (d.gpus && d.exec.container_runtime) {
        char why[512];
        if (kiln_exec_check(&d.exec, KILN_EXEC_CONTAINER, 1, false, why, sizeof why) != KILN_OK)
            fprintf(stderr, "kilnd: containers with GPUs: %s\n", why);
    }
    /* what this configuration will refuse at every create (run-as users) */
    kiln_users_report(d.users);
    for (;;) {
        /* every TRIM_EVERY_S without a signal: hand the allocator's free
         * memory back (bench/service_load.sh: after a burst of creates glibc
         * kept ~25 MiB of freed job records and request buffers in its
         * arenas, RSS 44 MiB 20 s after the load, 20 MiB once trimmed) */
        const struct timespec every = {.tv_sec = TRIM_EVERY_S};
        int sig = sigtimedwait(&set, NULL, &every);
        if (sig < 0) {
            if (errno == EAGAIN) malloc_trim(0);
            continue;
        }
        if (sig != SIGHUP) break;
        /* SIGHUP: the tokens file and the certificate again; what fails to
         * load leaves the old one in use, and says so */
        bool reloaded =
            (!d.tokens_path || load_tokens(&d, d.tokens_path) == 0) && kiln_api_tls_reload(&d) == 0;
        fprintf(stderr, "kilnd: SIGHUP: %s\n",
                reloaded ? "reloaded the tokens file and the certificate"
                         : "reload failed (above); still serving with the old ones");
        if (d.queues_path) reload_queues(&d);
    }
    fprintf(stderr, "kilnd: stopping\n");
    rc = 0;
    goto out;
diag:
    kiln_diag_print(&dg, stderr);
out:
    kiln_api_stop(&d, api);
    if (lfd >= 0) close(lfd);
    if (sup_started) {
        d.stop = 1;
        kiln_doorbell_ring(&d.wake);
        pthread_join(sup, NULL);
    }
    if (nb_started) pthread_join(nb, NULL);
    cleanup(&d);
    if (store_hold >= 0) close(store_hold); /* after the store is closed */
    kiln_diag_free(&dg);
    curl_global_cleanup();
    free(data_abs);
    free(audit_default);
    free(cfg_runtime);
    return rc;
}
