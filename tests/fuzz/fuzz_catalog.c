/* libFuzzer target: site catalog files merged over the built-in catalog.
 * A merged catalog that is accepted must then be usable: validating and
 * planning an example job, and looking up its runtime version's images,
 * must not crash whatever the overlay said. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"

static const char *probe =
    "{\"jobId\":\"j\",\"trainingInput\":{\"scaleTier\":\"CUSTOM\",\"masterType\":\"n1-standard-8\","
    "\"masterConfig\":{\"acceleratorConfig\":{\"count\":\"2\",\"type\":\"NVIDIA_TESLA_V100\"}},"
    "\"workerType\":\"n1-standard-8\",\"workerCount\":\"2\",\"region\":\"us-central1\","
    "\"runtimeVersion\":\"2.11\",\"pythonVersion\":\"3.7\",\"pythonModule\":\"t.task\"}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kiln_job *job;
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;

    if (!job && kiln_job_from_json(probe, strlen(probe), &job, &d) != KILN_OK) abort();
    if (kiln_catalog_default(&c, &d) != KILN_OK) abort();
    if (kiln_catalog_merge_buf(c, (const char *)data, size, "fuzz.yaml", &d) == KILN_OK) {
        kiln_replica_plan plan[KILN_ROLE_COUNT];
        kiln_diag_clear(&d);
        if (kiln_catalog_validate(c, job, &d) == KILN_OK) (void)kiln_catalog_plan(c, job, plan);
        for (int r = 0; r < KILN_ROLE_COUNT; r++)
            (void)kiln_catalog_runtime_image(c, job, (kiln_role)r);
        for (size_t i = 0; i < kiln_catalog_runtime_count(c); i++)
            (void)kiln_catalog_runtime_at(c, i)->cpu_image[0];
    }
    kiln_catalog_free(c);
    kiln_diag_free(&d);
    return 0;
}
