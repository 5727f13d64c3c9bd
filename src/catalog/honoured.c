/* honoured.c - refuses, at create, what the Job model accepts but kiln would
 * not act on (kiln/catalog.h: kiln_catalog_check_honoured).
 *
 * kiln_catalog_validate checks a job against the managed service's rules, so
 * a config written for AI Platform validates the same here. This file is the
 * other half: what this self-hosted kiln does. A field it would accept and
 * then ignore is refused with its field path and the reason, so a job is
 * never queued to do something other than what it says (issue 16).
 * docs/job-model.md ("Every field, and what kiln does with it") is the
 * user-facing list; test_field_docs keeps it complete. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog_int.h"
#include "util/caps.h"

/* runPolicy.ttlSecondsAfterFinished's upper bound: ten years */
#define KILN_TTL_MAX_SECONDS 315360000

/* packageUris kiln stages (src/exec/supervisor/spawn.c). */
#define SCHEMES                                                                                    \
    "an absolute path or file:///path on kilnd's machine, gs://BUCKET/NAME of a bucket "           \
    "kilnd's staging store holds, or http(s)://HOST/PATH of a .tar.gz, .tgz or .whl, fetched "     \
    "when the job starts"

typedef struct hctx {
    const kiln_job *job;
    kiln_diag *d;
    int n;
} hctx;

static void refuse(hctx *h, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(hctx *h, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(h->d, field, fmt, ap);
    va_end(ap);
    h->n++;
}

static bool set(const char *s)
{
    return s && *s;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t m = strlen(suffix);
    return n >= m && strncmp(s + n - m, suffix, m) == 0;
}

bool kiln_package_http_ok(const char *uri, const char **name, size_t *name_len, char *why,
                          size_t whylen)
{
    const char *p;
    if (strncmp(uri, "http://", 7) == 0)
        p = uri + 7;
    else if (strncmp(uri, "https://", 8) == 0)
        p = uri + 8;
    else {
        snprintf(why, whylen, "not an http:// or https:// URI");
        return false;
    }
    for (const char *q = uri; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f || *q == '\\') {
            snprintf(why, whylen, "a URI holds no spaces, control characters or backslashes");
            return false;
        }
    if (strchr(uri, '#')) {
        snprintf(why, whylen, "a fragment (#...) is not part of what is fetched: leave it out");
        return false;
    }
    /* the authority: up to the first '/' ('?' before it: no path) */
    size_t alen = strcspn(p, "/?");
    const char *at = memchr(p, '@', alen);
    if (at) {
        snprintf(why, whylen,
                 "user:password@ is not accepted: a job's record is readable by everyone in "
                 "its project; serve the package without credentials");
        return false;
    }
    const char *host_end = p + alen, *colon = NULL;
    if (alen && p[0] == '[') {
        const char *rb = memchr(p, ']', alen);
        if (!rb || rb == p + 1) {
            snprintf(why, whylen, "a bracketed IPv6 host is not closed ('[ADDR]')");
            return false;
        }
        for (const char *q = p + 1; q < rb; q++)
            if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') ||
                  (*q >= 'A' && *q <= 'F') || *q == ':' || *q == '.')) {
                snprintf(why, whylen, "'[...]' holds an IPv6 address only");
                return false;
            }
        if (rb + 1 < host_end && rb[1] != ':') {
            snprintf(why, whylen, "after the IPv6 host comes ':PORT' or the path");
            return false;
        }
        colon = rb + 1 < host_end ? rb + 1 : NULL;
    } else {
        colon = memchr(p, ':', alen);
        const char *he = colon ? colon : host_end;
        if (he == p) {
            snprintf(why, whylen, "no host: http(s)://HOST/PATH");
            return false;
        }
        for (const char *q = p; q < he; q++)
            if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') ||
                  (*q >= 'A' && *q <= 'Z') || *q == '-' || *q == '.')) {
                snprintf(why, whylen, "the host holds letters, digits, '-' and '.' only");
                return false;
            }
    }
    if (colon) {
        long port = 0;
        const char *q = colon + 1;
        for (; q < host_end && *q >= '0' && *q <= '9' && port <= 65535; q++)
            port = port * 10 + (*q - '0');
        if (q != host_end || q == colon + 1 || port < 1 || port > 65535) {
            snprintf(why, whylen, "the port is a number from 1 to 65535");
            return false;
        }
    }
    if (*host_end != '/') {
        snprintf(why, whylen, "no path: name the package file (http(s)://HOST/PATH/NAME.tar.gz)");
        return false;
    }
    size_t plen = strcspn(host_end, "?");
    const char *last = host_end + plen;
    while (last > host_end && last[-1] != '/')
        last--;
    size_t nlen = (size_t)(host_end + plen - last);
    if (!(ends_with(last, nlen, ".tar.gz") || ends_with(last, nlen, ".tgz") ||
          ends_with(last, nlen, ".whl")) ||
        nlen < 5) {
        snprintf(why, whylen,
                 "the path must end in .tar.gz, .tgz (an sdist, unpacked) or .whl (a pure "
                 "Python wheel, put on PYTHONPATH): a URL cannot name a directory");
        return false;
    }
    if (name) *name = last;
    if (name_len) *name_len = nlen;
    return true;
}

static void check_packages(hctx *h, const kiln_training_input *ti)
{
    char f[64], why[256];
    for (size_t i = 0; i < ti->package_uris.n; i++) {
        const char *u = ti->package_uris.v[i];
        snprintf(f, sizeof f, "trainingInput.packageUris[%zu]", i);
        if (u[0] == '/' || strncmp(u, "file:///", 8) == 0) continue;
        if (strncmp(u, "gs://", 5) == 0) continue; /* kilnd checks the store holds it */
        if (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) {
            if (!kiln_package_http_ok(u, NULL, NULL, why, sizeof why))
                refuse(h, f, "'%.200s': %s", u, why);
            continue;
        }
        refuse(h, f, "'%.200s': kiln stages %s; no other scheme is supported", u, SCHEMES);
    }
}

/* Variables kiln sets on every replica (docs/job-model.md, "What a replica
 * sees"): a user's value would silently lose to kiln's or break the cluster,
 * so naming one is an error. */
static const char *reserved_env(const char *name)
{
    static const char *const exact[] = {"TF_CONFIG",
                                        "CLUSTER_SPEC",
                                        "TPU_CONFIG",
                                        "CUDA_VISIBLE_DEVICES",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "WORLD_SIZE",
                                        "RANK",
                                        "PYTHONPATH",
                                        "PYTHONUNBUFFERED",
                                        "KILN_TASK_NAME",
                                        "KILN_JOB_ID",
                                        "KILN_COLL_KEY",
                                        "KILN_PS_KEYS",
                                        "KILN_SIMULATED_DEVICES"};
    /* the whole families: kiln adds members as the contracts grow */
    static const char *const prefix[] = {"CLOUD_ML_", "PET_"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(name, exact[i]) == 0) return exact[i];
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (strncmp(name, prefix[i], strlen(prefix[i])) == 0) return prefix[i];
    return NULL;
}

static bool env_name_ok(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* Digits with at most one '.', then an optional suffix from `suffixes`
 * (value and multiplier pairs); the product must be positive and fit. */
static bool quantity(const char *s, const char *const *names, const double *mult, size_t n,
                     double *out)
{
    char *end = NULL;
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.')) return false;
    double v = strtod(s, &end);
    if (end == s) return false;
    for (const char *p = s; p < end; p++) /* no exponents or hex: Kubernetes' forms only */
        if (!((*p >= '0' && *p <= '9') || *p == '.')) return false;
    double m = 0;
    for (size_t i = 0; i < n && m == 0; i++)
        if (strcmp(end, names[i]) == 0) m = mult[i];
    if (m == 0 || !(v > 0) || v * m > 9.0e18) return false;
    *out = v * m;
    return true;
}

bool kiln_quantity_cpu_milli(const char *s, int64_t *out)
{
    static const char *const names[] = {"", "m"};
    static const double mult[] = {1000, 1};
    double v;
    if (!quantity(s, names, mult, 2, &v) || v < 1) return false;
    *out = (int64_t)v;
    return true;
}

bool kiln_quantity_bytes(const char *s, int64_t *out)
{
    static const char *const names[] = {"", "k", "K", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"};
    static const double mult[] = {1,    1e3,    1e3,       1e6,          1e9,
                                  1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    double v;
    if (!quantity(s, names, mult, sizeof mult / sizeof *mult, &v) || v < 1) return false;
    *out = (int64_t)v;
    return true;
}

/* "/host:/container" or "/host:/container:ro", no other ':' */
static bool mount_ok(const char *m)
{
    const char *a = strchr(m, ':');
    if (m[0] != '/' || !a || a[1] != '/') return false;
    const char *b = strchr(a + 1, ':');
    return !b || strcmp(b, ":ro") == 0;
}

static bool cap_name_ok(const char *s)
{
    return kiln_cap_number(s) != -1;
}

/* securityContext: the settings that only a container can carry out */
static void check_security_context(hctx *h, const kiln_replica_config *rc, const char *role,
                                   const char *image)
{
    const kiln_security_context *sc = &rc->security_context;
    char f[256];
    if (!rc->has_security_context) return;
    for (size_t i = 0; i < sc->cap_drop.n; i++)
        if (!cap_name_ok(sc->cap_drop.v[i])) {
            snprintf(f, sizeof f, "trainingInput.%sConfig.securityContext.capDrop[%zu]", role, i);
            refuse(h, f, "'%.64s' is not a Linux capability (ALL, NET_RAW, SYS_ADMIN...)",
                   sc->cap_drop.v[i]);
        }
    if (image) return;
    if (sc->read_only_root_filesystem) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.securityContext.readOnlyRootFilesystem",
                 role);
        refuse(h, f,
               "applies to container replicas only: this replica runs as a process (no "
               "imageUri), which has no root filesystem of its own (it sees the node's)");
    }
    if (set(sc->seccomp_profile)) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.securityContext.seccompProfile", role);
        refuse(h, f,
               "applies to container replicas only (podman's default profile): this replica "
               "runs as a process (no imageUri), which kiln starts without a seccomp filter");
    }
}

static void check_role(hctx *h, kiln_role r, const char *image)
{
    const kiln_replica_config *rc = kiln_job_role_config(h->job, r);
    char f[256];
    const char *role = kiln_role_field(r);
    if (!rc) return;
    /* diskConfig: the replica's scratch space, its size checked at create
     * against the disk its working directory is on (src/api/api_jobs.c) */
    const char *dt = rc->has_disk_config ? rc->disk_config.boot_disk_type : NULL;
    if (dt && *dt && strcmp(dt, "pd-ssd") != 0 && strcmp(dt, "pd-standard") != 0) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.diskConfig.bootDiskType", role);
        refuse(h, f,
               "'%.32s' is refused: a replica's disk is its node's local disk, which kiln can "
               "promise to be pd-ssd or pd-standard, not a provisioned '%.32s'",
               dt, dt);
    }
    if (rc->has_disk_config &&
        (rc->disk_config.boot_disk_size_gb < 0 || rc->disk_config.boot_disk_size_gb > 65536)) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.diskConfig.bootDiskSizeGb", role);
        refuse(h, f, "%lld is out of range (1 to 65536 GB)",
               (long long)rc->disk_config.boot_disk_size_gb);
    }
    for (size_t i = 0; i < rc->env.n; i++) {
        const char *name = rc->env.keys[i], *kiln_own = reserved_env(name);
        snprintf(f, sizeof f, "trainingInput.%sConfig.env.%.128s", role, name);
        if (!env_name_ok(name))
            refuse(h, f,
                   "'%.64s' is not a variable name (letters, digits and '_', not starting "
                   "with a digit)",
                   name);
        else if (kiln_own)
            refuse(h, f,
                   "%s%s is set by kiln on every replica and cannot be overridden (kiln's "
                   "variables: TF_CONFIG, CLUSTER_SPEC, TPU_CONFIG, CUDA_VISIBLE_DEVICES, "
                   "MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, PYTHONPATH, PYTHONUNBUFFERED, "
                   "KILN_TASK_NAME, KILN_JOB_ID, KILN_COLL_KEY, KILN_PS_KEYS, "
                   "KILN_SIMULATED_DEVICES, CLOUD_ML_*, PET_*)",
                   kiln_own, kiln_own[strlen(kiln_own) - 1] == '_' ? "*" : "");
    }
    const char *limits[2] = {rc->cpu_limit, rc->memory_limit};
    const char *names[2] = {"cpuLimit", "memoryLimit"};
    for (int k = 0; k < 2; k++) {
        int64_t v;
        if (!set(limits[k])) continue;
        snprintf(f, sizeof f, "trainingInput.%sConfig.%s", role, names[k]);
        bool ok =
            k == 0 ? kiln_quantity_cpu_milli(limits[k], &v) : kiln_quantity_bytes(limits[k], &v);
        if (!ok)
            refuse(h, f, "'%.32s' is not a %s", limits[k],
                   k == 0 ? "CPU quantity (2, 0.5, 500m; at least 1m)"
                          : "memory quantity (4Gi, 512Mi, 1G or bytes)");
        else if (!image)
            refuse(h, f,
                   "limits apply to container replicas only: this replica runs as a process "
                   "(no imageUri)");
    }
    /* resources.requests: placement reserves them (process replicas too);
     * above its limit is refused as the Kubernetes API server refuses it */
    const char *reqs[2] = {rc->cpu_request, rc->memory_request};
    const char *rnames[2] = {"cpuRequest", "memoryRequest"};
    for (int k = 0; k < 2; k++) {
        int64_t rv = 0, lv = 0;
        if (!set(reqs[k])) continue;
        snprintf(f, sizeof f, "trainingInput.%sConfig.%s", role, rnames[k]);
        bool ok =
            k == 0 ? kiln_quantity_cpu_milli(reqs[k], &rv) : kiln_quantity_bytes(reqs[k], &rv);
        bool lok = set(limits[k]) && (k == 0 ? kiln_quantity_cpu_milli(limits[k], &lv)
                                             : kiln_quantity_bytes(limits[k], &lv));
        if (!ok)
            refuse(h, f, "'%.32s' is not a %s", reqs[k],
                   k == 0 ? "CPU quantity (2, 0.5, 500m; at least 1m)"
                          : "memory quantity (4Gi, 512Mi, 1G or bytes)");
        else if (lok && rv > lv)
            refuse(h, f,
                   "'%.32s' must be less than or equal to %s limit of '%.32s' (as Kubernetes "
                   "refuses a request above its limit)",
                   reqs[k], k == 0 ? "cpu" : "memory", limits[k]);
    }
    /* tolerations: placement matches them against the nodes' taints
     * (kiln/sched.h); checked as Kubernetes checks a pod's, whatever the
     * front end (a Job resource carries them as a kiln extension) */
    for (size_t i = 0; i < rc->n_tolerations; i++) {
        char tw[256];
        if (kiln_toleration_check(&rc->tolerations[i], tw, sizeof tw)) continue;
        size_t cut = strcspn(tw, ":");
        snprintf(f, sizeof f, "trainingInput.%sConfig.tolerations[%zu].%.*s", role, i, (int)cut,
                 tw);
        refuse(h, f, "%s", tw[cut] ? tw + cut + 2 : tw);
    }
    /* a topology request: one mode; which levels exist is the queues' to
     * say (kiln_queues_check_job), as they hold the Topology */
    if (rc->has_topology) {
        const kiln_topology_request *t = &rc->topology;
        int modes = set(t->required) + set(t->preferred) + t->unconstrained;
        snprintf(f, sizeof f, "trainingInput.%sConfig.topology", role);
        if (modes > 1)
            refuse(h, f,
                   "asks for more than one of required, preferred and unconstrained placement "
                   "(Kueue's podset-required-, podset-preferred- and "
                   "podset-unconstrained-topology): keep one");
        else if (modes == 0)
            refuse(h, f, "names no level: set required, preferred or unconstrained");
    }
    if (set(rc->working_dir) && rc->working_dir[0] != '/') {
        snprintf(f, sizeof f, "trainingInput.%sConfig.workingDir", role);
        refuse(h, f, "'%.128s' must be an absolute path", rc->working_dir);
    }
    if (set(rc->image_pull_policy) && !image) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.imagePullPolicy", role);
        refuse(h, f,
               "a pull policy applies to container replicas only: this replica runs as a "
               "process (no imageUri)");
    }
    for (size_t i = 0; i < rc->host_mounts.n; i++) {
        snprintf(f, sizeof f, "trainingInput.%sConfig.hostMounts[%zu]", role, i);
        if (!mount_ok(rc->host_mounts.v[i]))
            refuse(h, f, "'%.128s' is not /HOST/PATH:/CONTAINER/PATH[:ro]", rc->host_mounts.v[i]);
        else if (!image)
            refuse(h, f,
                   "host mounts apply to container replicas only: this replica runs as a "
                   "process (no imageUri) and already sees the node's files");
    }
    /* persistentVolumeClaim volumes: the claim table is kilnd's to check
     * (kiln/claims.h); here the form, and containers only */
    for (size_t i = 0; i < rc->claim_mounts.n; i++) {
        const char *m = rc->claim_mounts.v[i], *colon = strchr(m, ':');
        snprintf(f, sizeof f, "trainingInput.%sConfig.claimMounts[%zu]", role, i);
        const char *rest = colon ? strchr(colon + 1, ':') : NULL;
        if (!colon || colon == m || colon[1] != '/' || (rest && strcmp(rest, ":ro") != 0))
            refuse(h, f, "'%.128s' is not CLAIM:/CONTAINER/PATH[:ro]", m);
        else if (!image)
            refuse(h, f,
                   "claim mounts apply to container replicas only: this replica runs as a "
                   "process (no imageUri)");
    }
    check_security_context(h, rc, role, image);
    /* emptyDir volumes: a container's own volume or tmpfs (podman --mount) */
    for (size_t i = 0; i < rc->scratch_mounts.n; i++) {
        const char *m = rc->scratch_mounts.v[i], *colon = strchr(m, ':');
        int64_t v;
        snprintf(f, sizeof f, "trainingInput.%sConfig.scratchMounts[%zu]", role, i);
        bool ok = m[0] == '/' &&
                  (!colon || strcmp(colon, ":Memory") == 0 ||
                   (strncmp(colon, ":Memory:", 8) == 0 && kiln_quantity_bytes(colon + 8, &v)));
        if (!ok)
            refuse(h, f, "'%.128s' is not /PATH, /PATH:Memory or /PATH:Memory:SIZE (4Gi)", m);
        else if (!image)
            refuse(h, f,
                   "scratch volumes (emptyDir) apply to container replicas only: this replica "
                   "runs as a process (no imageUri)");
    }
}

/* Whether the workers (role `r`) hold GPUs: an acceleratorConfig with a
 * count of a GPU type (or none: a GPU), or a legacy machine type's own. */
static bool role_has_gpus(const kiln_catalog *c, const kiln_job *job, kiln_role r)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, r);
    const kiln_training_input *ti = &job->training_input;
    const char *type = r == KILN_ROLE_MASTER ? ti->master_type : ti->worker_type;
    const kiln_machine_type *mt = set(type) ? kiln_catalog_machine(c, type) : NULL;
    if (rc && rc->has_accelerator_config && rc->accelerator_config.count > 0)
        return !set(rc->accelerator_config.type) ||
               strncmp(rc->accelerator_config.type, "TPU", 3) != 0;
    return mt && mt->builtin_accelerator_count > 0;
}

/* elasticPolicy.metrics (kilnd's HPA, src/exec/supervisor/hpa.c): each
 * target complete and measurable. The workers' use is read from their
 * process groups in /proc, or from a container worker's cgroup; GPU
 * utilisation from the GPU watch, so the workers must hold GPUs. */
static void check_metrics(hctx *h, const kiln_training_input *ti, bool worker_gpus)
{
    if (!ti->has_pytorch_job || !ti->pytorch_job.has_elastic_policy) return;
    const kiln_elastic_policy *ep = &ti->pytorch_job.elastic_policy;
    for (size_t i = 0; i < ep->n_metrics; i++) {
        const kiln_elastic_metric *m = &ep->metrics[i];
        char f[160];
        int64_t v = 0;
        bool cpu = set(m->resource) && strcmp(m->resource, "cpu") == 0;
        bool gpu = set(m->resource) && strcmp(m->resource, "nvidia.com/gpu") == 0;
        bool util = set(m->target_type) && strcmp(m->target_type, "Utilization") == 0;
#define MF(suffix)                                                                                 \
    (snprintf(f, sizeof f, "trainingInput.pytorchJob.elasticPolicy.metrics[%zu]" suffix, i), f)
        if (!set(m->resource))
            refuse(h, MF(".resource"), "required: cpu, memory or nvidia.com/gpu");
        else if (!set(m->target_type))
            refuse(h, MF(".targetType"), "required: Utilization or AverageValue");
        else if (util && (m->average_utilization < 1 || set(m->average_value)))
            refuse(h, MF(".averageUtilization"),
                   "required with targetType Utilization (a whole percent, 1 or more), and "
                   "averageValue not with it");
        else if (gpu && !util)
            refuse(h, MF(".targetType"),
                   "'%.32s': nvidia.com/gpu is measured as utilisation (percent of the time "
                   "the workers' GPUs are busy), not as a quantity: use Utilization",
                   m->target_type);
        else if (gpu && !worker_gpus)
            refuse(h, MF(".resource"),
                   "nvidia.com/gpu: the workers hold no GPUs to measure (give them an "
                   "acceleratorConfig)");
        else if (!util && (m->average_utilization != 0 || !set(m->average_value) ||
                           !(cpu ? kiln_quantity_cpu_milli(m->average_value, &v)
                                 : kiln_quantity_bytes(m->average_value, &v)) ||
                           v <= 0))
            refuse(h, MF(".averageValue"),
                   "required with targetType AverageValue: a %s quantity above 0 (and "
                   "averageUtilization not with it)",
                   cpu ? "CPU (500m, 2)" : "memory (512Mi, 1Gi)");
#undef MF
    }
}

/* The image replica role `r` runs (NULL: a process), as spawn.c picks it. */
static const char *role_image(const kiln_catalog *c, const kiln_job *job, kiln_role r)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, r);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    if (rc && set(rc->image_uri)) return rc->image_uri;
    if (mc && set(mc->image_uri)) return mc->image_uri; /* AI Platform's default, and spawn.c's */
    return kiln_catalog_runtime_image(c, job, r);       /* runtimeVersion's */
}

kiln_err kiln_catalog_check_run_as(const kiln_catalog *c, const kiln_job *job, long uid, long gid,
                                   bool ctr_user, const char *who, kiln_diag *d)
{
    hctx h = {.job = job, .d = d};
    char f[256];
    if (!job->has_training_input) return KILN_OK;
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        const char *role = kiln_role_field((kiln_role)r);
        if (!rc || !rc->has_security_context) continue;
        const kiln_security_context *sc = &rc->security_context;
        bool image = role_image(c, job, (kiln_role)r) != NULL;
        /* a container without --user runs as its image's USER, which kiln
         * does not know: nothing about its user can be promised */
        bool known = !image || ctr_user;
        static const char *const names[3] = {"runAsUser", "runAsGroup", "runAsNonRoot"};
        const bool given[3] = {sc->has_run_as_user, sc->has_run_as_group, sc->run_as_non_root};
        const int64_t want[2] = {sc->run_as_user, sc->run_as_group};
        const long have[2] = {uid, gid};
        for (int k = 0; k < 3; k++) {
            if (!given[k]) continue;
            snprintf(f, sizeof f, "trainingInput.%sConfig.securityContext.%s", role, names[k]);
            if (!known)
                refuse(&h, f,
                       "cannot be promised: kilnd runs this project's containers as their "
                       "image's user (no project user to give podman --user: %s), which kiln "
                       "does not know; leave it out",
                       who);
            else if (k < 2 && want[k] != have[k])
                refuse(&h, f,
                       "%lld is refused: kiln runs this project's replicas as %s, and a job "
                       "cannot choose another %s (its replicas would read and write that "
                       "%s's files on the node); give %ld or leave it out",
                       (long long)want[k], who, k == 0 ? "user" : "group",
                       k == 0 ? "user" : "group", have[k]);
            else if (k == 2 && uid == 0)
                refuse(&h, f,
                       "true is refused: kiln runs this project's replicas as %s, which is root",
                       who);
        }
        /* a process of root holds every capability, and kiln drops none */
        if (!image && uid == 0 && sc->cap_drop.n) {
            snprintf(f, sizeof f, "trainingInput.%sConfig.securityContext.capDrop", role);
            refuse(&h, f,
                   "refused on a process of root: kiln runs this project's replicas as %s, "
                   "with every capability, and drops none from a process (a container's are "
                   "dropped: give an image)",
                   who);
        }
    }
    return h.n ? KILN_EINVAL : KILN_OK;
}

kiln_err kiln_catalog_check_honoured(const kiln_catalog *c, const kiln_job *job, kiln_diag *d)
{
    hctx h = {.job = job, .d = d};
    const kiln_training_input *ti = &job->training_input;
    if (!job->has_training_input) return KILN_OK;
    check_packages(&h, ti);
    /* kiln.NAME is kilnd's kiln-train, a process on the node: a runtime
     * version's image (runtimes.yaml) does not have it */
    if (set(ti->runtime_version) && set(ti->python_module) &&
        strncmp(ti->python_module, "kiln.", 5) == 0)
        refuse(&h, "trainingInput.pythonModule",
               "'%.128s' runs kilnd's kiln-train as a process on the node, not in runtime version "
               "%.32s's image: leave runtimeVersion (and pythonVersion) out",
               ti->python_module, ti->runtime_version);
    /* what runs in a runtime version's image: the module, or a command */
    bool cmd = false;
    for (int r = 0; r < KILN_ROLE_COUNT && !cmd; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        cmd = rc && rc->container_command.n > 0;
    }
    if (set(ti->runtime_version) && !set(ti->python_module) && !cmd)
        refuse(&h, "trainingInput.pythonModule",
               "required with runtimeVersion %.32s: the module that runs in the runtime "
               "version's image (python3 -m MODULE), or give a containerCommand",
               ti->runtime_version);
    if (set(ti->network))
        refuse(&h, "trainingInput.network",
               "not supported: replicas use the nodes' own network (no VPC peering)");
    if (ti->enable_web_access)
        refuse(&h, "trainingInput.enableWebAccess",
               "not supported: kiln has no interactive shell into replicas (read their logs "
               "with kiln jobs stream-logs)");
    /* acted on by kilnd (src/jobfiles/ttl.c): in range, so endTime + TTL fits */
    if (ti->has_run_policy && ti->run_policy.has_ttl_seconds_after_finished &&
        (ti->run_policy.ttl_seconds_after_finished < 0 ||
         ti->run_policy.ttl_seconds_after_finished > KILN_TTL_MAX_SECONDS))
        refuse(&h, "trainingInput.runPolicy.ttlSecondsAfterFinished",
               "%lld is out of range: 0 to %d seconds (ten years)",
               (long long)ti->run_policy.ttl_seconds_after_finished, KILN_TTL_MAX_SECONDS);
    if (ti->has_run_policy && set(ti->run_policy.clean_pod_policy) &&
        strcmp(ti->run_policy.clean_pod_policy, "None") == 0)
        refuse(&h, "trainingInput.runPolicy.cleanPodPolicy",
               "'None' is not supported: replicas left running after the job ends would keep "
               "their node's devices and ports with no job to cancel them (a parameter server "
               "never exits on its own), so kiln stops every replica still running when the "
               "job ends; use Running (the default) or All, which kiln treats the same");
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        check_role(&h, (kiln_role)r, role_image(c, job, (kiln_role)r));
        if (r == (ti->pytorch_job.workers_only ? KILN_ROLE_MASTER : KILN_ROLE_WORKER))
            check_metrics(&h, ti, role_has_gpus(c, job, (kiln_role)r));
    }
    return h.n ? KILN_EINVAL : KILN_OK;
}
