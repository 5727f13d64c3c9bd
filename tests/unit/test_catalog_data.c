/* test_catalog_data.c - the built-in catalog says what the facts say (§2, §4,
 * §5: machine shapes, families, regions, TPU versions), and the loader
 * survives damaged site catalogs (mutated overlays under ASan). */
#include "test.h"
#include "test_catalog_helpers.h"

#include <stdint.h>

/* facts §2: n1-standard 3.75 GB per vCPU, n1-highmem 6.5, n1-highcpu 0.9;
 * a2: 12 vCPUs / 85 GB per A100. */
static void test_machine_shapes(const kiln_catalog *c)
{
    static const struct {
        const char *prefix;
        double gb_per_vcpu;
        int sizes[8];
    } families[] = {
        {"n1-standard-", 3.75, {4, 8, 16, 32, 64, 96}},
        {"n1-highmem-", 6.5, {2, 4, 8, 16, 32, 64, 96}},
        {"n1-highcpu-", 0.9, {16, 32, 64, 96}},
    };
    for (size_t f = 0; f < 3; f++) {
        for (size_t i = 0; i < 8 && families[f].sizes[i]; i++) {
            char name[32];
            snprintf(name, sizeof name, "%s%d", families[f].prefix, families[f].sizes[i]);
            const kiln_machine_type *m = kiln_catalog_machine(c, name);
            double want = families[f].sizes[i] * families[f].gb_per_vcpu;
            CHECK_MSG(m && m->family == KILN_FAMILY_COMPUTE_ENGINE &&
                          m->vcpus == families[f].sizes[i] && m->memory_gb > want - 0.01 &&
                          m->memory_gb < want + 0.01,
                      "%s", name);
        }
    }
    static const struct {
        const char *name;
        int gpus;
    } a2[] = {
        {"a2-highgpu-1g", 1}, {"a2-highgpu-2g", 2}, {"a2-highgpu-4g", 4}, {"a2-highgpu-8g", 8}};
    for (size_t i = 0; i < 4; i++) {
        const kiln_machine_type *m = kiln_catalog_machine(c, a2[i].name);
        CHECK_MSG(m && m->vcpus == 12 * a2[i].gpus && m->memory_gb == 85.0 * a2[i].gpus &&
                      m->accelerator_required,
                  "%s", a2[i].name);
    }
    CHECK(kiln_catalog_machine(c, "a2-megagpu-16g") != NULL);

    static const char *const legacy[] = {"standard",        "large_model",     "complex_model_s",
                                         "complex_model_m", "complex_model_l", "cloud_tpu"};
    for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++) {
        const kiln_machine_type *m = kiln_catalog_machine(c, legacy[i]);
        CHECK_MSG(m && m->family == KILN_FAMILY_LEGACY && !m->builtin_accelerator, "%s", legacy[i]);
    }
    CHECK(kiln_catalog_machine(c, "cloud_tpu")->is_tpu_worker);
    /* 22 n1 and a2, 19 Vertex GPU machines (a2-ultragpu, a3, a4, g2), 97 of the
     * CPU families (e2 14, n2 29, n2d 31, c2 5, c3 18), 5 + 9 legacy, cloud_tpu */
    CHECK(kiln_catalog_machine_count(c) == 22 + 19 + 97 + 5 + 9 + 1);

    static const char *const accels[] = {"NVIDIA_TESLA_K80",
                                         "NVIDIA_TESLA_P4",
                                         "NVIDIA_TESLA_P100",
                                         "NVIDIA_TESLA_T4",
                                         "NVIDIA_TESLA_V100",
                                         "NVIDIA_TESLA_A100",
                                         "TPU_V2",
                                         "TPU_V3",
                                         "TPU_V2_POD",
                                         "TPU_V3_POD"};
    for (size_t i = 0; i < 10; i++) {
        const kiln_accelerator_type *a = kiln_catalog_accelerator(c, accels[i]);
        CHECK_MSG(a && a->is_tpu == (i >= 6) && a->is_pod == (i >= 8), "%s", accels[i]);
    }
    CHECK(kiln_catalog_accelerator_count(c) == 10 + 6);
}

/* Vertex AI's GPU machines (Compute Engine's accelerator-optimized table):
 * shape, the one GPU type each takes and its count. */
static void test_vertex_gpus(const kiln_catalog *c, kiln_diag *d)
{
    static const struct {
        const char *machine, *gpu;
        int vcpus;
        double gb;
        int64_t count;
    } t[] = {
        {"a2-ultragpu-1g", "NVIDIA_A100_80GB", 12, 170, 1},
        {"a2-ultragpu-2g", "NVIDIA_A100_80GB", 24, 340, 2},
        {"a2-ultragpu-4g", "NVIDIA_A100_80GB", 48, 680, 4},
        {"a2-ultragpu-8g", "NVIDIA_A100_80GB", 96, 1360, 8},
        {"a3-highgpu-1g", "NVIDIA_H100_80GB", 26, 234, 1},
        {"a3-highgpu-2g", "NVIDIA_H100_80GB", 52, 468, 2},
        {"a3-highgpu-4g", "NVIDIA_H100_80GB", 104, 936, 4},
        {"a3-highgpu-8g", "NVIDIA_H100_80GB", 208, 1872, 8},
        {"a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 208, 1872, 8},
        {"a3-ultragpu-8g", "NVIDIA_H200_141GB", 224, 2952, 8},
        {"a4-highgpu-8g", "NVIDIA_B200", 224, 3968, 8},
        {"g2-standard-4", "NVIDIA_L4", 4, 16, 1},
        {"g2-standard-8", "NVIDIA_L4", 8, 32, 1},
        {"g2-standard-12", "NVIDIA_L4", 12, 48, 1},
        {"g2-standard-16", "NVIDIA_L4", 16, 64, 1},
        {"g2-standard-24", "NVIDIA_L4", 24, 96, 2},
        {"g2-standard-32", "NVIDIA_L4", 32, 128, 1},
        {"g2-standard-48", "NVIDIA_L4", 48, 192, 4},
        {"g2-standard-96", "NVIDIA_L4", 96, 384, 8},
    };
    kiln_replica_plan p[KILN_ROLE_COUNT];
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        const kiln_machine_type *m = kiln_catalog_machine(c, t[i].machine);
        CHECK_MSG(m && m->vcpus == t[i].vcpus && m->memory_gb == t[i].gb &&
                      m->accelerator_required && m->family == KILN_FAMILY_COMPUTE_ENGINE,
                  "%s", t[i].machine);
        int64_t v[4];
        CHECK_MSG(kiln_catalog_valid_counts(c, t[i].machine, t[i].gpu, v, 4) == 1 &&
                      v[0] == t[i].count,
                  "%s takes %lld %s", t[i].machine, (long long)t[i].count, t[i].gpu);
        /* a count without a type is the machine's own GPU */
        kiln_job *j = mkcustom(t[i].machine, "", t[i].count);
        kiln_set_str(&j->training_input.region, "europe-west4");
        CHECK_MSG(run_validate(c, j, d) == 0 || !strcmp(t[i].gpu, "NVIDIA_H200_141GB"), "%s",
                  t[i].machine);
        CHECK_MSG(kiln_catalog_plan(c, j, p) == 1 && !strcmp(p[0].accelerator_type, t[i].gpu) &&
                      p[0].accelerators_per_replica == t[i].count,
                  "%s plans %s", t[i].machine, p[0].accelerator_type);
        kiln_job_free(j);
    }
    /* the count table is the authority: 1 H200 has no Vertex machine */
    kiln_job *j = mkcustom("a3-ultragpu-8g", "NVIDIA_H200_141GB", 1);
    kiln_set_str(&j->training_input.region, "us-central1");
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.count");
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig.count", "valid counts");
    kiln_job_free(j);
    /* H100 is offered in us-central1 but not in asia-east1 */
    j = mkcustom("a3-highgpu-1g", "NVIDIA_H100_80GB", 1);
    CHECK_VALID(c, j, d);
    kiln_set_str(&j->training_input.region, "asia-east1");
    CHECK_ONLY(c, j, d, "trainingInput.region");
    kiln_job_free(j);
    /* GPUs by count alone on a machine that takes GPUs by choice: any type
     * whose cell lists the count; 3 is no type's count on n1-standard-4 */
    j = mkcustom("n1-standard-4", "", 2);
    CHECK_VALID(c, j, d);
    CHECK(kiln_catalog_plan(c, j, p) == 1 && !strcmp(p[0].accelerator_type, KILN_ACCEL_ANY_GPU));
    set_accel(j, KILN_ROLE_MASTER, "", 3);
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.count");
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig.count", "no GPU type takes 3");
    kiln_job_free(j);
}

/* kilnd's own GPUs (kiln_catalog_add_site_gpu): a board Vertex lacks, and
 * a Vertex board in a count Vertex has no machine for, are valid on the
 * general-purpose machine types, in any region; Vertex's cells stay. */
static void test_site_gpus(kiln_diag *d)
{
    kiln_catalog *c = load_default();
    kiln_job *j = mkcustom("n1-standard-8", "NVIDIA_RTX_4090", 2);
    CHECK(run_validate(c, j, d) == 1);
    CHECK_SAYS(d, "trainingInput.masterConfig.acceleratorConfig.type", "unknown accelerator");
    CHECK(kiln_catalog_add_site_gpu(c, "NVIDIA_RTX_4090", 4) == KILN_OK);
    CHECK(kiln_catalog_add_site_gpu(c, "NVIDIA_H200_141GB", 1) == KILN_OK);
    CHECK(kiln_catalog_add_site_gpu(c, "TPU_V2", 8) == KILN_EINVAL);
    CHECK(kiln_catalog_accelerator(c, "NVIDIA_RTX_4090")->site);
    kiln_set_str(&j->training_input.region, "asia-east2"); /* a region without GPUs */
    CHECK_VALID(c, j, d);
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_RTX_4090", 5); /* more than the node has */
    CHECK_ONLY(c, j, d, "trainingInput.masterConfig.acceleratorConfig.count");
    set_accel(j, KILN_ROLE_MASTER, "NVIDIA_H200_141GB", 1);
    CHECK_VALID(c, j, d);
    kiln_job_free(j);
    /* Vertex's own cells are kept: a3-ultragpu-8g still takes 8 H200 only,
     * V100 on n1-standard-4 still 1, 2, 4 or 8 */
    int64_t v[8];
    CHECK(kiln_catalog_valid_counts(c, "a3-ultragpu-8g", "NVIDIA_H200_141GB", v, 8) == 1);
    CHECK(kiln_catalog_add_site_gpu(c, "NVIDIA_TESLA_V100", 3) == KILN_OK);
    CHECK(kiln_catalog_valid_counts(c, "n1-standard-4", "NVIDIA_TESLA_V100", v, 8) == 4);
    CHECK(kiln_catalog_valid_counts(c, "a2-highgpu-1g", "NVIDIA_RTX_4090", v, 8) == 0);
    kiln_catalog_free(c);
}

/* facts §4: us-central1 offers V100, K80 and P100, no zone all three; TPU
 * regions are us-central1 and europe-west4. */
static void test_regions(const kiln_catalog *c)
{
    const kiln_region *r = kiln_catalog_region(c, "us-central1");
    CHECK(r != NULL);
    if (r) {
        bool v100 = false, k80 = false, p100 = false, all = false;
        for (size_t z = 0; z < r->n_zones; z++) {
            bool zv = false, zk = false, zp = false;
            for (size_t k = 0; k < r->zones[z].n_accelerators; k++) {
                const char *a = r->zones[z].accelerators[k];
                zv = zv || !strcmp(a, "NVIDIA_TESLA_V100");
                zk = zk || !strcmp(a, "NVIDIA_TESLA_K80");
                zp = zp || !strcmp(a, "NVIDIA_TESLA_P100");
            }
            v100 |= zv, k80 |= zk, p100 |= zp, all |= zv && zk && zp;
        }
        CHECK(v100 && k80 && p100 && !all);
    }
    size_t tpu_regions = 0;
    for (size_t i = 0; i < kiln_catalog_region_count(c); i++) {
        const kiln_region *x = kiln_catalog_region_at(c, i);
        if (!x->n_tpu_types) continue;
        tpu_regions++;
        CHECK_MSG(!strcmp(x->name, "us-central1") || !strcmp(x->name, "europe-west4"), "%s",
                  x->name);
    }
    CHECK(tpu_regions == 2);
    CHECK_STR(kiln_catalog_default_region(c), "us-central1");
    CHECK(kiln_catalog_has_scale_tier(c, "BASIC_TPU") && !kiln_catalog_has_scale_tier(c, "GPU"));
}

/* facts §5: TPU runtime versions 1.15, 2.1-2.9, 2.11; tpuTfVersion pytorch-1.6..1.11. */
static void test_tpu_versions(const kiln_catalog *c, kiln_diag *d)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    set_role(j, KILN_ROLE_WORKER, "cloud_tpu", 1);
    set_accel(j, KILN_ROLE_WORKER, "TPU_V2", 8);
    for (int minor = 0; minor <= 12; minor++) {
        char v[16];
        snprintf(v, sizeof v, "2.%d", minor);
        kiln_set_str(&j->training_input.runtime_version, v);
        bool want = minor >= 1 && minor != 10 && minor <= 11;
        CHECK_MSG((run_validate(c, j, d) == 0) == want, "runtimeVersion %s", v);
    }
    kiln_set_str(&j->training_input.runtime_version, "1.15");
    CHECK_VALID(c, j, d);
    kiln_set_str(&j->training_input.runtime_version, NULL);
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->image_uri, "gcr.io/p/xla:1");
    for (int minor = 5; minor <= 12; minor++) {
        char v[32];
        snprintf(v, sizeof v, "pytorch-1.%d", minor);
        kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->tpu_tf_version, v);
        bool want = minor >= 6 && minor <= 11;
        CHECK_MSG((run_validate(c, j, d) == 0) == want, "tpuTfVersion %s", v);
    }
    kiln_job_free(j);
}

/* A site catalog is input too: flip, drop and duplicate bytes of a valid
 * overlay and merge it; every outcome must be a clean OK or error (ASan and
 * LeakSanitizer watch), and an error must come with a violation. */
static const char overlay[] =
    "machineTypes:\n"
    "  - {name: box, family: compute-engine, vcpus: 8, memoryGb: 64}\n"
    "  - name: old\n    family: legacy\n    vcpus: 4\n    memoryGb: 15\n"
    "    accelerator: {type: NVIDIA_TESLA_K80, count: 1}\n"
    "accelerators:\n  - {name: X1, maxVcpusPerAccelerator: 8, maxMemoryGb: 100}\n"
    "acceleratorCounts:\n  - machineTypes: [box]\n    counts: {X1: [1, 2], NVIDIA_TESLA_T4: [1]}\n"
    "regions:\n  - name: lab\n    tpus: [TPU_V2]\n    zones: {lab-a: [X1], lab-b: []}\n"
    "tpu: {workerCount: 1, runtimeVersions: [\"2.12\"], tfVersions: [pytorch-2.0]}\n"
    "scaleTiers:\n  - {name: LAB, master: {type: box}, worker: {type: box, count: 2}}\n"
    "runtimeVersions: [{version: \"2.12\", python: \"3.7\", image: localhost/tf:2.12}]\n"
    "defaults: {region: lab, maxPriority: 10}\n";

static void test_mutated_overlays(void)
{
    uint32_t seed = 12345;
    char buf[sizeof overlay * 2];
    kiln_diag d = KILN_DIAG_INIT;
    size_t ok = 0, failed = 0;
    for (int iter = 0; iter < 1500; iter++) {
        size_t len = sizeof overlay - 1;
        memcpy(buf, overlay, len);
        for (int m = 0; m < 1 + iter % 4; m++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % len;
            switch ((seed >> 4) % 3) {
            case 0:
                buf[pos] = (char)(seed >> 16);
                break; /* flip */
            case 1:
                memmove(buf + pos, buf + pos + 1, len - pos - 1), len--;
                break; /* drop */
            default:   /* duplicate */
                if (len + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    len++;
                }
            }
        }
        kiln_catalog *c = load_default();
        kiln_diag_clear(&d);
        kiln_err e = kiln_catalog_merge_buf(c, buf, len, "site.yaml", &d);
        if (e == KILN_OK) {
            ok++;
        } else {
            failed++;
            CHECK_MSG(d.n > 0, "iteration %d failed (%d) without a violation", iter, (int)e);
        }
        kiln_catalog_free(c);
    }
    CHECK(ok > 0 && failed > 0);
    kiln_diag_free(&d);

    kiln_catalog *c = load_default();
    CHECK(kiln_catalog_merge_buf(c, overlay, sizeof overlay - 1, "site.yaml", &d) == KILN_OK);
    kiln_diag_print(&d, stderr);
    CHECK(kiln_catalog_has_scale_tier(c, "LAB"));
    kiln_job *j = mkjob("LAB", "lab");
    kiln_replica_plan p[KILN_ROLE_COUNT];
    CHECK(kiln_catalog_plan(c, j, p) == 2 && p[1].count == 2 && !strcmp(p[1].machine_type, "box"));
    kiln_job_free(j);
    kiln_diag_free(&d);
    kiln_catalog_free(c);
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_machine_shapes(c);
    test_regions(c);
    test_tpu_versions(c, &d);
    test_vertex_gpus(c, &d);
    test_site_gpus(&d);
    test_mutated_overlays();
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
