/* catalog_int.h - the catalog's private representation, shared by its loader
 * (catalog_load.c), lookups (lookup.c) and validator (validate.c).
 *
 * Every string and array below is owned by the kiln_catalog and freed by
 * kiln_catalog_free(); the public structs (kiln_machine_type, ...) are stored
 * as they are so that lookups can hand out pointers into the arrays. Arrays
 * are small (tens of entries), so lookups are linear scans. */
#ifndef KILN_CATALOG_INT_H
#define KILN_CATALOG_INT_H

#include "kiln/catalog.h"

/* One cell of the valid-count table: the counts of `accel` allowed on `machine`,
 * ascending. n == 0 means "not allowed" (a site may blank a cell). */
typedef struct kiln__count_cell {
    char *machine;
    char *accel;
    int64_t *counts;
    size_t n;
} kiln__count_cell;

/* What a scale tier expands to, per role (type NULL: the tier has no such role). */
typedef struct kiln__tier_role {
    char *type;
    int64_t count;
} kiln__tier_role;

typedef struct kiln__scale_tier {
    char *name;
    bool custom; /* the job names its own types and counts */
    kiln__tier_role roles[KILN_ROLE_COUNT];
} kiln__scale_tier;

/* A list of owned strings (versions), merged by value. */
typedef struct kiln__names {
    char **v;
    size_t n, cap;
} kiln__names;

/* One (runtimeVersion, pythonVersion) pair and its images (runtimes.yaml,
 * a site's runtimeVersions). `pub` comes first so that lookups can hand out
 * a pointer to it; its images are the raw ones with the mirrors applied
 * (kiln__runtimes_resolve, after every merge). */
typedef struct kiln__runtime {
    kiln_runtime pub;
    char *cpu_raw, *gpu_raw; /* as the file gives them */
} kiln__runtime;

/* runtimeMirrors: images under `from`/ are pulled from `to`/ instead. */
typedef struct kiln__mirror {
    char *from, *to;
    bool site;
} kiln__mirror;

struct kiln_catalog {
    kiln_machine_type *machines;
    size_t n_machines, cap_machines;
    kiln_accelerator_type *accels;
    size_t n_accels, cap_accels;
    kiln__count_cell *cells;
    size_t n_cells, cap_cells;
    kiln_region *regions;
    size_t n_regions, cap_regions;
    kiln__scale_tier *tiers;
    size_t n_tiers, cap_tiers;
    kiln__runtime *runtimes; /* in file order: a version's first pair is its default Python */
    size_t n_runtimes, cap_runtimes;
    kiln__mirror *mirrors;
    size_t n_mirrors, cap_mirrors;

    /* TPU rules (tpu.yaml) */
    kiln__names tpu_runtime_versions;
    kiln__names tpu_tf_versions;
    char *tpu_legacy_accel; /* what cloud_tpu is under a legacy master */
    int64_t tpu_legacy_count;
    int64_t tpu_worker_count; /* cloud_tpu workers per TPU job */

    /* defaults and limits (service.yaml) */
    char *default_region;
    int64_t max_running_time_s;
    int64_t min_max_wait_time_s;
    int64_t max_priority;
    int64_t job_id_max_length;
    int64_t max_labels;
    int64_t label_max_length;
};

const kiln__count_cell *kiln__catalog_cell(const kiln_catalog *c, const char *machine,
                                           const char *accel);
/* The one GPU type a machine that comes with its GPUs (acceleratorRequired)
 * takes, or NULL (none, several, or a machine that takes GPUs by choice). */
const char *kiln__catalog_only_gpu(const kiln_catalog *c, const char *machine);
const kiln__scale_tier *kiln__catalog_tier(const kiln_catalog *c, const char *name);
bool kiln__names_has(const kiln__names *l, const char *s);
bool kiln__region_offers(const kiln_region *r, const char *accel);
bool kiln__zone_offers(const kiln_zone *z, const char *accel);
bool kiln__region_offers_tpu(const kiln_region *r, const char *accel);

#endif
