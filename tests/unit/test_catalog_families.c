/* test_catalog_families.c - Compute Engine's CPU families (e2, n2, n2d, c2,
 * c3) and Vertex's GPU machines (a2, a3, a4, g2) in the built-in catalog,
 * through a CustomJob as the SDK sends it: a CPU type takes no accelerator,
 * a GPU machine only its own GPU at its fixed count (data/catalog/machine-types.yaml,
 * accelerators.yaml). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"
#include "kiln/job.h"
#include "test.h"

/* A CustomJob whose chief is `type` with `n` of `accel` (NULL: none), run
 * through the catalog; returns the number of violations, `field` set when
 * one names it. */
static size_t try_pool(const kiln_catalog *c, const char *type, const char *accel, int n,
                       const char *field, bool *named)
{
    char buf[1024], ms[256];
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    size_t nv = 0;
    if (accel)
        snprintf(ms, sizeof ms,
                 "{\"machineType\":\"%s\",\"acceleratorType\":\"%s\",\"acceleratorCount\":%d}",
                 type, accel, n);
    else
        snprintf(ms, sizeof ms, "{\"machineType\":\"%s\"}", type);
    snprintf(buf, sizeof buf,
             "{\"displayName\":\"f\",\"jobSpec\":{\"workerPoolSpecs\":[{\"machineSpec\":%s,"
             "\"replicaCount\":\"1\",\"containerSpec\":{\"imageUri\":\"img\"}}]}}",
             ms);
    kiln_err e = kiln_job_from_custom_job(buf, strlen(buf), &job, &d);
    CHECK_MSG(e == KILN_OK, "%s decodes", buf);
    if (e == KILN_OK) {
        kiln_set_str(&job->job_id, "customjob_1");
        kiln_set_str(&job->training_input.region, "us-central1");
        kiln_catalog_validate(c, job, &d);
        nv = d.n;
    }
    if (named) *named = field && kiln_diag_has(&d, field);
    if (getenv("KILN_TEST_VERBOSE")) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
    return nv;
}

int main(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_catalog_default(&c, &d) == KILN_OK);
    kiln_diag_free(&d);
    if (!c) return 1;

    static const struct {
        const char *name;
        int vcpus;
        double gb;
    } cpu[] = {
        {"e2-standard-2", 2, 8},        {"e2-highmem-16", 16, 128},   {"e2-highcpu-32", 32, 32},
        {"n2-standard-128", 128, 512},  {"n2-highmem-128", 128, 864}, {"n2-highcpu-64", 64, 64},
        {"n2d-standard-224", 224, 896}, {"n2d-highmem-96", 96, 768},  {"n2d-highcpu-224", 224, 224},
        {"c2-standard-30", 30, 120},    {"c2-standard-60", 60, 240},  {"c3-standard-22", 22, 88},
        {"c3-highcpu-176", 176, 352},   {"c3-highmem-4", 4, 32},
    };
    const char *acc = "trainingInput.masterConfig.acceleratorConfig.type";
    for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++) {
        const kiln_machine_type *m = kiln_catalog_machine(c, cpu[i].name);
        CHECK_MSG(m && m->vcpus == cpu[i].vcpus && m->memory_gb == cpu[i].gb &&
                      m->family == KILN_FAMILY_COMPUTE_ENGINE && !m->accelerator_required,
                  "%s: %d vCPUs, %g GB", cpu[i].name, cpu[i].vcpus, cpu[i].gb);
        CHECK_MSG(try_pool(c, cpu[i].name, NULL, 0, NULL, NULL) == 0, "%s accepted", cpu[i].name);
        bool named = false;
        size_t nv = try_pool(c, cpu[i].name, "NVIDIA_TESLA_T4", 1, acc, &named);
        CHECK_MSG(nv > 0 && named, "%s with a T4: refused at %s", cpu[i].name, acc);
    }
    /* sizes Compute Engine does not have are unknown */
    CHECK(kiln_catalog_machine(c, "n2-highcpu-128") == NULL);
    CHECK(kiln_catalog_machine(c, "e2-highmem-32") == NULL);
    CHECK(kiln_catalog_machine(c, "c2-standard-2") == NULL);

    /* GPU machines: their own GPU at their own count, and nothing else */
    static const struct {
        const char *name, *gpu, *other;
        int count;
    } gpu[] = {
        {"a2-highgpu-4g", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", 4},
        {"a2-ultragpu-8g", "NVIDIA_A100_80GB", "NVIDIA_TESLA_A100", 8},
        {"a3-highgpu-8g", "NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB", 8},
        {"a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", "NVIDIA_H100_80GB", 8},
        {"a3-ultragpu-8g", "NVIDIA_H200_141GB", "NVIDIA_H100_80GB", 8},
        {"a4-highgpu-8g", "NVIDIA_B200", "NVIDIA_H200_141GB", 8},
        {"g2-standard-32", "NVIDIA_L4", "NVIDIA_TESLA_T4", 1},
        {"g2-standard-96", "NVIDIA_L4", "NVIDIA_TESLA_T4", 8},
    };
    for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++) {
        bool named = false;
        CHECK_MSG(try_pool(c, gpu[i].name, gpu[i].gpu, gpu[i].count, NULL, NULL) == 0,
                  "%s with %d %s accepted", gpu[i].name, gpu[i].count, gpu[i].gpu);
        CHECK_MSG(try_pool(c, gpu[i].name, gpu[i].gpu, gpu[i].count == 1 ? 2 : gpu[i].count / 2,
                           NULL, NULL) > 0,
                  "%s with another count of %s refused", gpu[i].name, gpu[i].gpu);
        CHECK_MSG(try_pool(c, gpu[i].name, gpu[i].other, gpu[i].count, acc, &named) > 0 && named,
                  "%s with %s refused at %s", gpu[i].name, gpu[i].other, acc);
        CHECK_MSG(try_pool(c, gpu[i].name, NULL, 0, NULL, NULL) > 0, "%s without its GPUs refused",
                  gpu[i].name);
    }
    /* a site's own GPU goes on n1 (as docs/catalog.md says), never on a CPU family */
    CHECK(kiln_catalog_add_site_gpu(c, "NVIDIA_RTX_4090", 2) == KILN_OK);
    int64_t counts[8];
    CHECK(kiln_catalog_valid_counts(c, "n1-standard-8", "NVIDIA_RTX_4090", counts, 8) == 2);
    CHECK(kiln_catalog_valid_counts(c, "n2-standard-8", "NVIDIA_RTX_4090", counts, 8) == 0);
    CHECK(kiln_catalog_valid_counts(c, "c3-highcpu-4", "NVIDIA_RTX_4090", counts, 8) == 0);
    kiln_catalog_free(c);
    TEST_DONE();
}
