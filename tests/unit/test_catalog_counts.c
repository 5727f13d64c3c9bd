/* test_catalog_counts.c - every cell of the service's valid-GPU-count table
 * (platform facts §3), the per-GPU vCPU/memory limits, and the TPU counts.
 *
 * The table is transcribed here by hand from the facts, not read back from
 * the catalog, so a mistake in data/catalog/accelerators.yaml shows up as a
 * failing cell. Each machine type x GPU type is tried with every count from
 * 0 to 17 through the validator: a listed count must validate, any other must
 * be rejected at acceleratorConfig.count (the cell has counts) or .type (the
 * cell is "–"). */
#include "test.h"
#include "test_catalog_helpers.h"

#include <stdlib.h>

enum { A100, K80, P4, P100, T4, V100, N_GPU };
static const char *const gpu_names[N_GPU] = {"NVIDIA_TESLA_A100", "NVIDIA_TESLA_K80",
                                             "NVIDIA_TESLA_P4",   "NVIDIA_TESLA_P100",
                                             "NVIDIA_TESLA_T4",   "NVIDIA_TESLA_V100"};

/* facts §3, row by row: columns A100, K80, P4, P100, T4, V100 ("" = –). */
static const struct {
    const char *machines[6];
    const char *cells[N_GPU];
} table[] = {
    {{"n1-standard-4", "n1-standard-8", "n1-highmem-2", "n1-highmem-4", "n1-highmem-8"},
     {"", "1,2,4,8", "1,2,4", "1,2,4", "1,2,4", "1,2,4,8"}},
    {{"n1-standard-16", "n1-highmem-16", "n1-highcpu-16"},
     {"", "2,4,8", "1,2,4", "1,2,4", "1,2,4", "2,4,8"}},
    {{"n1-standard-32", "n1-highmem-32", "n1-highcpu-32"}, {"", "4,8", "2,4", "2,4", "2,4", "4,8"}},
    {{"n1-standard-64", "n1-standard-96", "n1-highmem-64", "n1-highmem-96", "n1-highcpu-96"},
     {"", "", "4", "", "4", "8"}},
    {{"n1-highcpu-64"}, {"", "8", "4", "4", "4", "8"}},
    {{"a2-highgpu-1g"}, {"1", "", "", "", "", ""}},
    {{"a2-highgpu-2g"}, {"2", "", "", "", "", ""}},
    {{"a2-highgpu-4g"}, {"4", "", "", "", "", ""}},
    {{"a2-highgpu-8g"}, {"8", "", "", "", "", ""}},
    {{"a2-megagpu-16g"}, {"16", "", "", "", "", ""}},
};

static bool in_cell(const char *cell, int64_t n)
{
    char *end;
    for (const char *p = cell; *p; p = *end ? end + 1 : end) {
        if (strtoll(p, &end, 10) == n) return true;
    }
    return false;
}

static size_t cell_counts(const char *cell, int64_t *out)
{
    size_t k = 0;
    char *end;
    for (const char *p = cell; *p; p = *end ? end + 1 : end)
        out[k++] = strtoll(p, &end, 10);
    return k;
}

/* One (machine, gpu) cell through the validator with counts 0..17. */
static void check_cell(const kiln_catalog *c, const char *machine, int g, const char *cell,
                       kiln_diag *d)
{
    char want[64] = "";
    int64_t counts[8], got[16];
    size_t n = cell_counts(cell, counts);
    size_t m = kiln_catalog_valid_counts(c, machine, gpu_names[g], got, 16);

    CHECK_MSG(m == n, "%s x %s: catalog has %zu counts, facts %zu", machine, gpu_names[g], m, n);
    for (size_t i = 0; i < n && i < m; i++)
        CHECK_MSG(got[i] == counts[i], "%s x %s: count %zu", machine, gpu_names[g], i);
    snprintf(want, sizeof want, "valid counts for %s on %s: ", gpu_names[g], machine);
    for (size_t i = 0; i < n; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "",
                 (long long)counts[i]);

    for (int64_t k = 0; k <= 17; k++) {
        kiln_job *j = mkcustom(machine, gpu_names[g], k);
        size_t nv = run_validate(c, j, d);
        if (k > 0 && in_cell(cell, k)) {
            CHECK_MSG(nv == 0, "%s x %lld %s should be valid", machine, (long long)k, gpu_names[g]);
            if (nv) kiln_diag_print(d, stderr);
        } else {
            const char *f = k == 0 || n ? "trainingInput.masterConfig.acceleratorConfig.count"
                                        : "trainingInput.masterConfig.acceleratorConfig.type";
            CHECK_MSG(nv == 1 && kiln_diag_has(d, f), "%s x %lld %s should fail at %s", machine,
                      (long long)k, gpu_names[g], f);
            if (nv != 1 || !kiln_diag_has(d, f)) kiln_diag_print(d, stderr);
            if (k > 0 && n) CHECK_SAYS(d, f, want);
        }
        kiln_job_free(j);
    }
}

static void test_every_cell(const kiln_catalog *c, kiln_diag *d)
{
    size_t machines = 0;
    for (size_t r = 0; r < sizeof table / sizeof table[0]; r++) {
        for (size_t i = 0; i < 6 && table[r].machines[i]; i++) {
            machines++;
            for (int g = 0; g < N_GPU; g++)
                check_cell(c, table[r].machines[i], g, table[r].cells[g], d);
        }
    }
    CHECK(machines == 22); /* every Compute Engine type of facts §2 */
}

/* The example the facts give: 3 K80s are never valid. */
static void test_three_k80(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-16", "NVIDIA_TESLA_K80", 3);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.count");
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig.count",
               "valid counts for NVIDIA_TESLA_K80 on n1-standard-16: 2, 4, 8");
    kiln_job_free(j);
}

/* V100: 12 vCPUs / 76 GB each, so an n1-standard-32 needs at least 4. */
static void test_per_gpu_limits(const kiln_catalog *c, kiln_diag *d)
{
    const char *f = "trainingInput.masterConfig.acceleratorConfig.count";
    const kiln_accelerator_type *v100 = kiln_catalog_accelerator(c, "NVIDIA_TESLA_V100");
    CHECK(v100 && v100->max_vcpus_per_accelerator == 12);
    CHECK(v100 && v100->max_memory_gb_per_accelerator == 76);

    kiln_job *j = mkcustom("n1-standard-32", "NVIDIA_TESLA_V100", 2);
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "n1-standard-32 (32 vCPUs, 120 GB) needs at least 4 NVIDIA_TESLA_V100");
    kiln_job_free(j);

    j = mkcustom("n1-standard-16", "NVIDIA_TESLA_V100", 1); /* 16 vCPUs > 12 */
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "needs at least 2 NVIDIA_TESLA_V100");
    kiln_job_free(j);

    j = mkcustom("n1-standard-16", "NVIDIA_TESLA_K80", 1); /* K80: 8 vCPUs each */
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "needs at least 2 NVIDIA_TESLA_K80");
    kiln_job_free(j);

    j = mkcustom("n1-standard-32", "NVIDIA_TESLA_V100", 4);
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
}

/* 8 K80s give at most 208 GB; 4 P100s at most 64 vCPUs and 208 GB. */
static void test_host_caps(const kiln_catalog *c, kiln_diag *d)
{
    const char *f = "trainingInput.masterConfig.acceleratorConfig.type";
    kiln_job *j = mkcustom("n1-highmem-64", "NVIDIA_TESLA_K80", 8); /* 416 GB */
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "at most 64 vCPUs and 208 GB");
    kiln_job_free(j);

    j = mkcustom("n1-standard-64", "NVIDIA_TESLA_P100", 4); /* 240 GB */
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "at most 64 vCPUs and 208 GB");
    kiln_job_free(j);

    j = mkcustom("n1-highcpu-96", "NVIDIA_TESLA_P100", 4); /* 96 vCPUs */
    CHECK_ONLY(c, j, d, f);
    CHECK_SAYS(d, f, "n1-highcpu-96 has 96 vCPUs");
    kiln_job_free(j);

    j = mkcustom("n1-highmem-32", "NVIDIA_TESLA_K80", 8); /* 208 GB: exactly the cap */
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
    j = mkcustom("n1-highcpu-64", "NVIDIA_TESLA_P100", 4); /* 64 vCPUs: exactly the cap */
    CHECK_VALID(c, j, d);
    kiln_job_free(j);

    const kiln_accelerator_type *k80 = kiln_catalog_accelerator(c, "NVIDIA_TESLA_K80");
    const kiln_accelerator_type *p100 = kiln_catalog_accelerator(c, "NVIDIA_TESLA_P100");
    CHECK(k80 && k80->max_memory_gb == 208);
    CHECK(p100 && p100->max_vcpus == 64 && p100->max_memory_gb == 208);
}

/* Legacy types carry their GPUs; acceleratorConfig is refused on them. */
static void test_legacy_gpu_types(const kiln_catalog *c, kiln_diag *d)
{
    static const struct {
        const char *name, *gpu;
        int count;
    } legacy[] = {
        {"standard_gpu", "NVIDIA_TESLA_K80", 1},
        {"complex_model_m_gpu", "NVIDIA_TESLA_K80", 4},
        {"complex_model_l_gpu", "NVIDIA_TESLA_K80", 8},
        {"standard_p100", "NVIDIA_TESLA_P100", 1},
        {"complex_model_m_p100", "NVIDIA_TESLA_P100", 4},
        {"standard_v100", "NVIDIA_TESLA_V100", 1},
        {"large_model_v100", "NVIDIA_TESLA_V100", 1},
        {"complex_model_m_v100", "NVIDIA_TESLA_V100", 4},
        {"complex_model_l_v100", "NVIDIA_TESLA_V100", 8},
    };
    for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++) {
        const kiln_machine_type *m = kiln_catalog_machine(c, legacy[i].name);
        CHECK_MSG(m && m->family == KILN_FAMILY_LEGACY && m->builtin_accelerator &&
                      !strcmp(m->builtin_accelerator, legacy[i].gpu) &&
                      m->builtin_accelerator_count == legacy[i].count,
                  "%s", legacy[i].name);
        /* europe-west4-b offers P100 and V100; us-east1-c offers K80 and V100 */
        kiln_job *j = mkcustom(legacy[i].name, NULL, 0);
        kiln_set_str(&j->training_input.region,
                     strcmp(legacy[i].gpu, "NVIDIA_TESLA_K80") ? "europe-west4" : "us-east1");
        CHECK_VALID(c, j, d);
        set_accel(j, KILN_ROLE_MASTER, legacy[i].gpu, legacy[i].count);
        CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig");
        CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig",
                   "only allowed with Compute Engine machine types");
        kiln_job_free(j);
    }
}

/* a2 types are their A100s: acceleratorConfig is required. */
static void test_a2_requires_accelerator(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("a2-highgpu-4g", NULL, 0);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig");
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig", "NVIDIA_TESLA_A100 (4)");
    kiln_job_free(j);
}

/* A TPU worker under a Compute Engine master: TPU_V2/TPU_V3 x 8, pods by cores. */
static void test_tpu_counts(const kiln_catalog *c, kiln_diag *d)
{
    static const struct {
        const char *type;
        const char *valid;
    } tpus[] = {{"TPU_V2", "8"},
                {"TPU_V3", "8"},
                {"TPU_V2_POD", "32,128,256,512"},
                {"TPU_V3_POD", "32,128,256"}};
    static const int64_t tries[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    for (size_t t = 0; t < sizeof tpus / sizeof tpus[0]; t++) {
        for (size_t k = 0; k < sizeof tries / sizeof tries[0]; k++) {
            kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
            set_role(j, KILN_ROLE_WORKER, "cloud_tpu", 1);
            set_accel(j, KILN_ROLE_WORKER, tpus[t].type, tries[k]);
            if (in_cell(tpus[t].valid, tries[k]))
                CHECK_VALID(c, j, d);
            else
                CHECK_ONLY(c, j, d, "trainingInput.workerConfig.acceleratorConfig.count");
            kiln_job_free(j);
        }
    }
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_every_cell(c, &d);
    test_three_k80(c, &d);
    test_per_gpu_limits(c, &d);
    test_host_caps(c, &d);
    test_legacy_gpu_types(c, &d);
    test_a2_requires_accelerator(c, &d);
    test_tpu_counts(c, &d);
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
