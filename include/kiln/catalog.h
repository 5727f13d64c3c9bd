/* kiln/catalog.h - machine types, accelerators, regions/zones, TPU rules, and
 * the validation of a Job against them.
 *
 * The default catalog reproduces AI Platform Training's rules exactly (data in
 * data/catalog/NAME.yaml, embedded in the binary at build time). A site catalog
 * file (same format) can add or replace machine types, accelerators, zones and
 * runtime versions: a self-hosted cluster has its own hardware. */
#ifndef KILN_CATALOG_H
#define KILN_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_catalog kiln_catalog;

typedef enum kiln_machine_family {
    KILN_FAMILY_COMPUTE_ENGINE = 0, /* n1-*, a2-*: acceleratorConfig allowed */
    KILN_FAMILY_LEGACY,             /* standard, complex_model_m_gpu, cloud_tpu, ... */
} kiln_machine_family;

typedef struct kiln_machine_type {
    const char *name;
    kiln_machine_family family;
    int vcpus;
    double memory_gb;
    const char *builtin_accelerator; /* legacy GPU types: NVIDIA_TESLA_K80 ...; else NULL */
    int builtin_accelerator_count;
    bool is_tpu_worker;        /* cloud_tpu */
    bool accelerator_required; /* a2-*: unusable without acceleratorConfig */
    bool no_accelerators;      /* e2-, n2-, n2d-, c2-, c3-*: takes none, a site's GPUs either */
} kiln_machine_type;

typedef struct kiln_accelerator_type {
    const char *name; /* NVIDIA_TESLA_V100, TPU_V2, ... */
    bool is_tpu;
    bool is_pod;
    /* per-accelerator share of the host: 0 = no limit */
    int max_vcpus_per_accelerator;
    double max_memory_gb_per_accelerator;
    /* cap on the whole host however many are attached: 0 = none */
    int max_vcpus;
    double max_memory_gb;
    /* the site's own GPUs (kiln_catalog_add_site_gpu): offered in every zone */
    bool site;
} kiln_accelerator_type;

/* The accelerator type of a plan that asked for GPUs by count alone (a
 * TFJob's resources.limits["nvidia.com/gpu"], an acceleratorConfig without
 * a type): any GPUs of one model on one node, which the scheduler picks. */
#define KILN_ACCEL_ANY_GPU "nvidia.com/gpu"

/* A zone and the GPU types it offers; a job runs in one zone, so all of its
 * GPU types must be offered by one zone of its region. */
typedef struct kiln_zone {
    const char *name;
    const char *const *accelerators;
    size_t n_accelerators;
} kiln_zone;

typedef struct kiln_region {
    const char *name;
    const kiln_zone *zones;
    size_t n_zones;
    const char *const *tpu_types; /* TPU types offered here; none = not a TPU region */
    size_t n_tpu_types;
} kiln_region;

/* A runtime version (trainingInput.runtimeVersion) with one of its Python
 * versions, and the container images a replica runs in for them: by default
 * Vertex AI's prebuilt training containers (data/catalog/runtimes.yaml), a
 * site's own in its catalog (docs/catalog.md, "Runtime versions"). */
typedef struct kiln_runtime {
    const char *version;   /* "2.11" */
    const char *python;    /* "3.7" */
    const char *cpu_image; /* replicas without GPUs; the site's mirrors applied */
    const char *gpu_image; /* replicas with GPUs */
    bool python_default;   /* the Python a job without pythonVersion gets */
    bool site;             /* set by a site catalog, not the built-in one */
    bool mirrored;         /* an image was rewritten by the site's runtimeMirrors */
} kiln_runtime;

/* Loads the built-in catalog. */
kiln_err kiln_catalog_default(kiln_catalog **out, kiln_diag *d);
/* Merges a site catalog file over `c` (entries with the same name replace,
 * new ones are added; see data/catalog/NAME.yaml for the format). The merged
 * catalog is checked as a whole (every name it refers to must exist). On
 * KILN_EINVAL the catalog may hold part of the file: report and free it. */
kiln_err kiln_catalog_merge_file(kiln_catalog *c, const char *path, kiln_diag *d);
kiln_err kiln_catalog_merge_buf(kiln_catalog *c, const char *buf, size_t len, const char *name,
                                kiln_diag *d);
void kiln_catalog_free(kiln_catalog *c);

/* kilnd's own GPUs, as discovery named them (kiln/devices.h): `name`
 * becomes an accelerator of this catalog if it is not one already (a board
 * Vertex does not offer, NVIDIA_RTX_4090), marked `site` so that no zone
 * check refuses it, and valid at every count from 1 to max_per_node on each
 * Compute Engine machine type that takes accelerators and has no cell for it
 * yet (n1-standard-4 with 1 NVIDIA_H100_80GB; Vertex's own cells, such as
 * a3-highgpu-1g's, stay as they are). KILN_EINVAL when `name` is a TPU
 * type, KILN_ENOMEM. */
kiln_err kiln_catalog_add_site_gpu(kiln_catalog *c, const char *name, int max_per_node);

/* Checks every rule (facts §1-§5) and appends each violation to `d`, with its
 * field path, the offending value and what is allowed. KILN_OK or KILN_EINVAL.
 * Every violation is reported, not just the first; a check that depends on a
 * field already reported (a count on an unknown machine type) is skipped.
 *
 * Where the service's rules leave a choice, kiln decides:
 * - the count table is the authority: a count it lists is valid even where a
 *   per-GPU share is slightly exceeded (8 V100s on n1-highmem-96 = 78 GB each
 *   against the documented 76 GB); the shares explain rejected counts
 *   ("n1-standard-32 ... needs at least 4 NVIDIA_TESLA_V100");
 * - GPU types no single zone offers are reported at trainingInput.region, as is
 *   a TPU (or GPU) the region does not offer;
 * - masterConfig.imageUri together with runtimeVersion (or pythonVersion)
 *   is reported at trainingInput.runtimeVersion (pythonVersion), another
 *   role's imageUri with runtimeVersion at that imageUri; a runtimeVersion
 *   or pythonVersion the catalog maps to no image is refused with the list
 *   of what it maps, pythonVersion without runtimeVersion too, and a
 *   runtimeVersion job needs a pythonModule (or a containerCommand);
 * - preset tiers (BASIC, ...) take images and commands but no machine types,
 *   counts, acceleratorConfig, or config for a role the tier does not have;
 * - self-hosted extension: containerCommand without any imageUri runs as a
 *   plain process on the node; containerArgs then need a containerCommand;
 *   neither mixes with trainingInput.args;
 * - a cloud_tpu worker under a Compute Engine master must name its TPU in
 *   workerConfig.acceleratorConfig; under a legacy master it must not;
 * - tpuTfVersion is allowed only on the cloud_tpu worker, and required when
 *   it runs a custom image (its own imageUri or the master's);
 * - kiln's own fields: restartPolicy (Always|OnFailure|Never|ExitCode),
 *   runPolicy (non-negative limits, cleanPodPolicy All|Running|None), labels
 *   (at most 64; keys [a-z][a-z0-9_-]*, values [a-z0-9_-]*, 63 chars each),
 *   jobId at most 128 characters, jobDir an absolute path or scheme:// URI
 *   without a ".." segment. The numbers are in data/catalog/service.yaml. */
kiln_err kiln_catalog_validate(const kiln_catalog *c, const kiln_job *job, kiln_diag *d);

/* What this kiln acts on, beyond the managed service's rules: a field the
 * Job model accepts but kiln would not honour is refused here, at its field
 * path (docs/job-model.md's field table says which and why): packageUris
 * schemes, serviceAccount, network, diskConfig, enableWebAccess,
 * pythonModule kiln.NAME with a runtimeVersion, runPolicy.ttlSecondsAfterFinished and
 * cleanPodPolicy None; and the replica settings kiln does act on are checked
 * for form: env (no name kiln sets itself), cpuLimit/memoryLimit and
 * hostMounts (container replicas only), securityContext (capDrop's names;
 * readOnlyRootFilesystem and seccompProfile container replicas only; who
 * the replicas run as is kiln_catalog_check_run_as's). kilnd calls it at create, `kiln
 * validate` after kiln_catalog_validate, so both refuse the same.
 * KILN_OK, or KILN_EINVAL with the violations appended to d. */
kiln_err kiln_catalog_check_honoured(const kiln_catalog *c, const kiln_job *job, kiln_diag *d);
/* At create, where kilnd knows who runs the job's replicas: each replica's
 * securityContext runAsUser and runAsGroup must be that user and group
 * (uid, gid), runAsNonRoot true only when it is not root, and a process of
 * root cannot drop capabilities (kiln drops none from a process). ctr_user:
 * containers run as uid:gid too (podman --user); false: as their image's
 * user, which kiln does not know, so those three are refused on them. `who`
 * names the user in the refusals ("user alice (uid 1000, gid 1000)...").
 * KILN_OK, or KILN_EINVAL with the violations appended to d. */
kiln_err kiln_catalog_check_run_as(const kiln_catalog *c, const kiln_job *job, long uid, long gid,
                                   bool ctr_user, const char *who, kiln_diag *d);

/* Parses a Kubernetes CPU quantity ("2", "0.5", "500m") into millicores, a
 * memory quantity ("4Gi", "512M", "1000000") into bytes; false when malformed
 * or not positive. */
bool kiln_quantity_cpu_milli(const char *s, int64_t *out);
bool kiln_quantity_bytes(const char *s, int64_t *out);

/* The packageUris kilnd fetches when a job starts: http:// or https://, a
 * host (a name, an IPv4 address or a [bracketed] IPv6 address, an optional
 * :PORT), no user:password@ (a job's record is readable by its project), and
 * a path whose last segment ends in .tar.gz, .tgz or .whl - the files
 * stage_packages unpacks or puts on PYTHONPATH (a URL cannot name a
 * directory). A query (?...) is allowed, a fragment (#...) not. false with
 * the reason in `why` (without the URI) otherwise; for any other scheme too.
 * On success *name gets the last path segment (a pointer into `uri`) and
 * *name_len its length, when they are not NULL. */
bool kiln_package_http_ok(const char *uri, const char **name, size_t *name_len, char *why,
                          size_t whylen);

/* Fills defaults the service would apply: scheduling.maxRunningTime (604800s)
 * when unset, the master's imageUri on every other role that runs (count > 0)
 * without one, the catalog's default region when the job names none (a
 * TFJob), and with a runtimeVersion but no pythonVersion the version's
 * default Python (so a later catalog cannot change the job's image). Call after a successful
 * validate (or, for the region, before). KILN_OK or KILN_ENOMEM (the job may then be partly
 * filled). */
kiln_err kiln_catalog_normalise(const kiln_catalog *c, kiln_job *job);

/* ---- lookups (pointers stay valid while `c` lives) ---- */
const kiln_machine_type *kiln_catalog_machine(const kiln_catalog *c, const char *name);
const kiln_accelerator_type *kiln_catalog_accelerator(const kiln_catalog *c, const char *name);
size_t kiln_catalog_machine_count(const kiln_catalog *c);
const kiln_machine_type *kiln_catalog_machine_at(const kiln_catalog *c, size_t i);
size_t kiln_catalog_accelerator_count(const kiln_catalog *c);
const kiln_accelerator_type *kiln_catalog_accelerator_at(const kiln_catalog *c, size_t i);
/* Valid counts of `accel` on `machine` (ascending); 0 when not allowed at all. */
size_t kiln_catalog_valid_counts(const kiln_catalog *c, const char *machine, const char *accel,
                                 int64_t *out, size_t cap);
size_t kiln_catalog_region_count(const kiln_catalog *c);
const kiln_region *kiln_catalog_region_at(const kiln_catalog *c, size_t i);
const kiln_region *kiln_catalog_region(const kiln_catalog *c, const char *name);
/* The region used where the input names none (a Kubeflow TFJob has no region):
 * callers set trainingInput.region to it before validating. */
const char *kiln_catalog_default_region(const kiln_catalog *c);
/* Is `name` a scale tier of the catalog? */
bool kiln_catalog_has_scale_tier(const kiln_catalog *c, const char *name);

/* The runtime versions and Python versions the catalog maps to images, in
 * catalog order (each version's default Python first). */
size_t kiln_catalog_runtime_count(const kiln_catalog *c);
const kiln_runtime *kiln_catalog_runtime_at(const kiln_catalog *c, size_t i);
/* The pair for `version` and `python` (NULL python: the version's default),
 * or NULL when the catalog maps no such pair. */
const kiln_runtime *kiln_catalog_runtime(const kiln_catalog *c, const char *version,
                                         const char *python);
/* The image a replica of `role` runs in because the job names a
 * runtimeVersion (and pythonVersion): the pair's GPU image when the role's
 * plan has GPUs, its CPU image otherwise. NULL when the job names no
 * runtimeVersion or the catalog does not map it (kiln_catalog_validate
 * refuses that at create; a catalog changed since then is the caller's to
 * report). The string belongs to `c`. */
const char *kiln_catalog_runtime_image(const kiln_catalog *c, const kiln_job *job, kiln_role role);

/* The concrete placement request of one role after scale tiers and legacy
 * built-in GPUs are resolved: what the scheduler needs. */
typedef struct kiln_replica_plan {
    kiln_role role;
    const char *machine_type;
    int64_t count;
    const char *accelerator_type; /* NULL = none */
    int64_t accelerators_per_replica;
    int vcpus; /* the machine type's, or the container's resources.limits when larger */
    double memory_gb;
    /* a container's resources.limits (0 = none): a node with fewer CPUs or
     * less memory than these never takes the replica */
    int limit_vcpus;
    double limit_memory_gb;
} kiln_replica_plan;

/* Fills up to KILN_ROLE_COUNT plans, in role order (roles with count 0 are
 * skipped); returns how many. The job must have validated. The accelerator is
 * the role's acceleratorConfig (CUSTOM), else the machine's built-in GPUs,
 * else for cloud_tpu under a legacy master (BASIC_TPU too) TPU_V2 x 8 cores.
 * An acceleratorConfig with a count and no type is the one GPU type the
 * machine takes (a3-highgpu-1g: NVIDIA_H100_80GB), else KILN_ACCEL_ANY_GPU.
 * The strings point into `c` or `job`: valid while both live, unchanged. */
size_t kiln_catalog_plan(const kiln_catalog *c, const kiln_job *job,
                         kiln_replica_plan out[KILN_ROLE_COUNT]);

#ifdef __cplusplus
}
#endif
#endif
