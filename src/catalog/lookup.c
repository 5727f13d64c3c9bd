/* lookup.c - reading a loaded catalog: lookups, valid counts, and the two
 * consumers of a validated job, normalise (defaults the service fills in) and
 * plan (what the scheduler must reserve per role). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog_int.h"

const kiln_machine_type *kiln_catalog_machine(const kiln_catalog *c, const char *name)
{
    for (size_t i = 0; c && name && i < c->n_machines; i++)
        if (strcmp(c->machines[i].name, name) == 0) return &c->machines[i];
    return NULL;
}

const kiln_accelerator_type *kiln_catalog_accelerator(const kiln_catalog *c, const char *name)
{
    for (size_t i = 0; c && name && i < c->n_accels; i++)
        if (strcmp(c->accels[i].name, name) == 0) return &c->accels[i];
    return NULL;
}

size_t kiln_catalog_machine_count(const kiln_catalog *c)
{
    return c ? c->n_machines : 0;
}

const kiln_machine_type *kiln_catalog_machine_at(const kiln_catalog *c, size_t i)
{
    return c && i < c->n_machines ? &c->machines[i] : NULL;
}

size_t kiln_catalog_accelerator_count(const kiln_catalog *c)
{
    return c ? c->n_accels : 0;
}

const kiln_accelerator_type *kiln_catalog_accelerator_at(const kiln_catalog *c, size_t i)
{
    return c && i < c->n_accels ? &c->accels[i] : NULL;
}

const kiln__count_cell *kiln__catalog_cell(const kiln_catalog *c, const char *machine,
                                           const char *accel)
{
    for (size_t i = 0; c && machine && accel && i < c->n_cells; i++)
        if (!strcmp(c->cells[i].machine, machine) && !strcmp(c->cells[i].accel, accel))
            return &c->cells[i];
    return NULL;
}

const char *kiln__catalog_only_gpu(const kiln_catalog *c, const char *machine)
{
    const char *only = NULL;
    for (size_t i = 0; c && machine && i < c->n_cells; i++) {
        const kiln__count_cell *cell = &c->cells[i];
        if (cell->n == 0 || strcmp(cell->machine, machine) != 0) continue;
        const kiln_accelerator_type *a = kiln_catalog_accelerator(c, cell->accel);
        if (!a || a->is_tpu) continue;
        if (only && strcmp(only, cell->accel) != 0) return NULL;
        only = cell->accel;
    }
    /* only where the machine is its GPUs (a2, a3, g2): an n1 with one GPU
     * type in a site's catalog still takes any model */
    const kiln_machine_type *m = kiln_catalog_machine(c, machine);
    return m && m->accelerator_required ? only : NULL;
}

/* Returns how many counts are valid (even when more than `cap`); copies at
 * most `cap` of them to `out`. */
size_t kiln_catalog_valid_counts(const kiln_catalog *c, const char *machine, const char *accel,
                                 int64_t *out, size_t cap)
{
    const kiln__count_cell *cell = kiln__catalog_cell(c, machine, accel);
    if (!cell) return 0;
    for (size_t i = 0; out && i < cell->n && i < cap; i++)
        out[i] = cell->counts[i];
    return cell->n;
}

size_t kiln_catalog_region_count(const kiln_catalog *c)
{
    return c ? c->n_regions : 0;
}

const kiln_region *kiln_catalog_region_at(const kiln_catalog *c, size_t i)
{
    return c && i < c->n_regions ? &c->regions[i] : NULL;
}

const kiln_region *kiln_catalog_region(const kiln_catalog *c, const char *name)
{
    for (size_t i = 0; c && name && i < c->n_regions; i++)
        if (strcmp(c->regions[i].name, name) == 0) return &c->regions[i];
    return NULL;
}

const char *kiln_catalog_default_region(const kiln_catalog *c)
{
    return c ? c->default_region : NULL;
}

const kiln__scale_tier *kiln__catalog_tier(const kiln_catalog *c, const char *name)
{
    for (size_t i = 0; c && name && i < c->n_tiers; i++)
        if (strcmp(c->tiers[i].name, name) == 0) return &c->tiers[i];
    return NULL;
}

bool kiln_catalog_has_scale_tier(const kiln_catalog *c, const char *name)
{
    return kiln__catalog_tier(c, name) != NULL;
}

bool kiln__zone_offers(const kiln_zone *z, const char *accel)
{
    for (size_t i = 0; i < z->n_accelerators; i++)
        if (strcmp(z->accelerators[i], accel) == 0) return true;
    return false;
}

bool kiln__region_offers(const kiln_region *r, const char *accel)
{
    for (size_t i = 0; i < r->n_zones; i++)
        if (kiln__zone_offers(&r->zones[i], accel)) return true;
    return false;
}

bool kiln__region_offers_tpu(const kiln_region *r, const char *accel)
{
    for (size_t i = 0; i < r->n_tpu_types; i++)
        if (strcmp(r->tpu_types[i], accel) == 0) return true;
    return false;
}

/* ---------- normalise ---------- */

/* Fills what the service fills: the default region (inputs without one, such
 * as a TFJob), scheduling.maxRunningTime, the master's imageUri on every
 * other role that runs and names no image of its own, and the runtime
 * version's default pythonVersion. */
kiln_err kiln_catalog_normalise(const kiln_catalog *c, kiln_job *job)
{
    kiln_training_input *ti = &job->training_input;
    const char *image = ti->has_master_config ? ti->master_config.image_uri : NULL;

    if (!job->has_training_input) return KILN_OK;
    if ((!ti->region || !*ti->region) && c->default_region &&
        kiln_set_str(&ti->region, c->default_region))
        return KILN_ENOMEM;
    if (!ti->has_scheduling || !ti->scheduling.has_max_running_time) {
        ti->has_scheduling = true;
        ti->scheduling.has_max_running_time = true;
        ti->scheduling.max_running_time.seconds = c->max_running_time_s;
        ti->scheduling.max_running_time.nanos = 0;
    }
    /* the runtime version's default Python, written down: the job runs in
     * the same image even if a later catalog orders its Pythons otherwise */
    if (ti->runtime_version && *ti->runtime_version &&
        (!ti->python_version || !*ti->python_version)) {
        const kiln_runtime *rt = kiln_catalog_runtime(c, ti->runtime_version, NULL);
        if (rt && kiln_set_str(&ti->python_version, rt->python)) return KILN_ENOMEM;
    }
    for (int r = KILN_ROLE_WORKER; image && *image && r < KILN_ROLE_COUNT; r++) {
        kiln_role_fields f = kiln_job_role_fields(ti, (kiln_role)r);
        if (*f.count <= 0 || (*f.has_config && f.config->image_uri)) continue;
        if (kiln_set_str(&f.config->image_uri, image)) return KILN_ENOMEM;
        *f.has_config = true;
    }
    return KILN_OK;
}

/* ---------- plan ---------- */

/* The machine type and count of a role: the job's own for CUSTOM, the tier's
 * expansion otherwise. */
static const char *role_type(const kiln__scale_tier *t, const kiln_job *job, kiln_role r,
                             int64_t *count)
{
    if (!t || t->custom) {
        *count = kiln_job_role_count(job, r);
        return kiln_job_role_type(job, r);
    }
    *count = t->roles[r].type ? t->roles[r].count : 0;
    return t->roles[r].type;
}

static void plan_accelerator(const kiln_catalog *c, const kiln_job *job, bool custom,
                             const kiln_machine_type *master, kiln_replica_plan *p)
{
    const kiln_machine_type *m = kiln_catalog_machine(c, p->machine_type);
    const kiln_replica_config *rc = kiln_job_role_config(job, p->role);

    if (m) {
        p->vcpus = m->vcpus;
        p->memory_gb = m->memory_gb;
    }
    if (custom && rc && rc->has_accelerator_config && rc->accelerator_config.type &&
        *rc->accelerator_config.type) {
        p->accelerator_type = rc->accelerator_config.type;
        p->accelerators_per_replica = rc->accelerator_config.count;
    } else if (custom && rc && rc->has_accelerator_config && rc->accelerator_config.count > 0) {
        /* GPUs by count alone: the machine's own type, else any model */
        const char *only = kiln__catalog_only_gpu(c, p->machine_type);
        p->accelerator_type = only ? only : KILN_ACCEL_ANY_GPU;
        p->accelerators_per_replica = rc->accelerator_config.count;
    } else if (m && m->builtin_accelerator) {
        p->accelerator_type = m->builtin_accelerator;
        p->accelerators_per_replica = m->builtin_accelerator_count;
    } else if (m && m->is_tpu_worker && (!master || master->family == KILN_FAMILY_LEGACY)) {
        /* a legacy master's cloud_tpu (BASIC_TPU too) is a TPU v2 of 8 cores */
        p->accelerator_type = c->tpu_legacy_accel;
        p->accelerators_per_replica = c->tpu_legacy_count;
    }
}

/* A container's resources.limits (cpuLimit, memoryLimit): what it will be
 * held to, so the placement asks for at least that much, and a node smaller
 * than one replica can never run it (podman refuses --cpus past the node's
 * CPUs). Limits are only accepted on container replicas (honoured.c). */
static void plan_limits(const kiln_job *job, kiln_replica_plan *p)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, p->role);
    int64_t v;
    if (!rc) return;
    /* resources.requests is what Kubernetes reserves; without one, the
     * limit (the API server's default): the placement asks for that */
    const char *cpu = rc->cpu_request && *rc->cpu_request ? rc->cpu_request : rc->cpu_limit;
    const char *mem =
        rc->memory_request && *rc->memory_request ? rc->memory_request : rc->memory_limit;
    if (cpu && kiln_quantity_cpu_milli(cpu, &v)) {
        int64_t cpus = (v + 999) / 1000;
        p->limit_vcpus = cpus > INT_MAX ? INT_MAX : (int)cpus;
        if (p->limit_vcpus > p->vcpus) p->vcpus = p->limit_vcpus;
    }
    if (mem && kiln_quantity_bytes(mem, &v)) {
        p->limit_memory_gb = (double)v / 1073741824.0;
        if (p->limit_memory_gb > p->memory_gb) p->memory_gb = p->limit_memory_gb;
    }
}

size_t kiln_catalog_plan(const kiln_catalog *c, const kiln_job *job,
                         kiln_replica_plan out[KILN_ROLE_COUNT])
{
    const kiln_training_input *ti = &job->training_input;
    const kiln__scale_tier *t = kiln__catalog_tier(c, ti->scale_tier);
    bool custom = !t || t->custom;
    int64_t n;
    const kiln_machine_type *master = kiln_catalog_machine(c, role_type(t, job, 0, &n));
    size_t k = 0;

    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        int64_t count;
        const char *type = role_type(t, job, (kiln_role)r, &count);
        if (!type || !*type || count <= 0) continue;
        kiln_replica_plan *p = &out[k++];
        memset(p, 0, sizeof *p);
        p->role = (kiln_role)r;
        p->machine_type = type;
        p->count = count;
        plan_accelerator(c, job, custom, master, p);
        plan_limits(job, p);
    }
    return k;
}

/* ---------- runtime versions ---------- */

size_t kiln_catalog_runtime_count(const kiln_catalog *c)
{
    return c->n_runtimes;
}

const kiln_runtime *kiln_catalog_runtime_at(const kiln_catalog *c, size_t i)
{
    return i < c->n_runtimes ? &c->runtimes[i].pub : NULL;
}

const kiln_runtime *kiln_catalog_runtime(const kiln_catalog *c, const char *version,
                                         const char *python)
{
    for (size_t i = 0; version && i < c->n_runtimes; i++) {
        const kiln_runtime *r = &c->runtimes[i].pub;
        if (strcmp(r->version, version)) continue;
        if (python && *python ? !strcmp(r->python, python) : r->python_default) return r;
    }
    return NULL;
}

const char *kiln_catalog_runtime_image(const kiln_catalog *c, const kiln_job *job, kiln_role role)
{
    const kiln_training_input *ti = &job->training_input;
    if (!job->has_training_input || !ti->runtime_version || !*ti->runtime_version) return NULL;
    const kiln_runtime *r = kiln_catalog_runtime(c, ti->runtime_version, ti->python_version);
    if (!r) return NULL;
    /* GPUs as the scheduler reserves them: acceleratorConfig, or a legacy
     * type's built-in GPUs (BASIC_GPU, complex_model_m_gpu); TPUs are not */
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t n = kiln_catalog_plan(c, job, plans);
    for (size_t i = 0; i < n; i++) {
        if (plans[i].role != role) continue;
        const kiln_accelerator_type *a =
            plans[i].accelerator_type ? kiln_catalog_accelerator(c, plans[i].accelerator_type)
                                      : NULL;
        bool gpu =
            plans[i].accelerators_per_replica > 0 && plans[i].accelerator_type && !(a && a->is_tpu);
        return gpu ? r->gpu_image : r->cpu_image;
    }
    return r->cpu_image;
}
