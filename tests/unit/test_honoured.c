/* test_honoured.c - kiln_catalog_check_honoured: what the Job model accepts
 * but kiln does not act on is refused at its field path (issue 16), and what
 * kiln acts on passes. Each case changes one field of a valid JSON Job. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/catalog.h"
#include "test.h"

#define BASE                                                                                       \
    "{\"jobId\": \"j\", \"trainingInput\": {\"scaleTier\": \"BASIC\", \"region\": "                \
    "\"us-central1\", "

/* Decodes `json`, checks it against the rules (must pass) and against what
 * kiln honours: `field` NULL means no refusal, else exactly one, at `field`. */
static void expect(const kiln_catalog *c, const char *json, const char *field, const char *needle)
{
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    CHECK_MSG(kiln_job_from_json(json, strlen(json), &job, &d) == KILN_OK, "decode: %s", json);
    if (job) CHECK_MSG(kiln_catalog_validate(c, job, &d) == KILN_OK, "rules: %s", json);
    kiln_err err = job ? kiln_catalog_check_honoured(c, job, &d) : KILN_EINVAL;
    if (field == NULL) {
        CHECK_MSG(err == KILN_OK && d.n == 0, "refused: %s", json);
    } else {
        CHECK_MSG(err == KILN_EINVAL && d.n == 1 && strcmp(d.v[0].field, field) == 0 &&
                      strstr(d.v[0].description, needle),
                  "wanted one refusal at %s with '%s': %s", field, needle, json);
    }
    if (d.n && (field == NULL || d.n != 1)) kiln_diag_print(&d, stderr);
    kiln_job_free(job);
    kiln_diag_free(&d);
}

/* One package URI, refused at packageUris[0] with `needle`. */
static void expect_uri(const kiln_catalog *c, const char *uri, const char *needle)
{
    char json[512];
    snprintf(json, sizeof json, BASE "\"packageUris\": [\"%s\"]}}", uri);
    expect(c, json, "trainingInput.packageUris[0]", needle);
}

int main(void)
{
    kiln_catalog *c = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_catalog_default(&c, &d) == KILN_OK);
    if (!c) return 1;

    /* packageUris: local paths, file://, gs:// and well-formed http(s) URLs
     * of a package file pass; other schemes are refused naming the supported */
    expect(c,
           BASE "\"packageUris\": [\"/srv/t.tar.gz\", \"file:///srv/u.whl\", "
                "\"gs://b/t.tar.gz\", \"https://example.com/t.tar.gz\", "
                "\"http://127.0.0.1:8000/a/b-0.1-py3-none-any.whl?x=1\", "
                "\"https://[::1]:443/t.tgz\"]}}",
           NULL, NULL);
    expect_uri(c, "trainer.tar.gz", "absolute path");
    expect_uri(c, "s3://b/t.tar.gz", "http(s)://HOST/PATH");
    expect(c, BASE "\"packageUris\": [\"/srv/t.tar.gz\", \"ftp://example.com/t.tar.gz\"]}}",
           "trainingInput.packageUris[1]", "gs://BUCKET/NAME");
    /* http(s): the form kilnd can fetch and stage */
    expect_uri(c, "https://example.com/trainer/", "must end in .tar.gz");
    expect_uri(c, "https://example.com/t.zip", "must end in .tar.gz");
    expect_uri(c, "https://example.com", "no path");
    expect_uri(c, "http:///t.tar.gz", "no host");
    expect_uri(c, "https://u:p@example.com/t.tar.gz", "user:password@");
    expect_uri(c, "https://example.com:99999/t.tar.gz", "port");
    expect_uri(c, "https://example.com/t.tar.gz#x", "fragment");
    expect_uri(c, "https://exa mple.com/t.tar.gz", "no spaces");

    /* fields kiln has no meaning for */
    /* a runtime version runs its image: a module to run in it, not kiln-train */
    expect(c, BASE "\"runtimeVersion\": \"2.11\"}}", "trainingInput.pythonModule",
           "required with runtimeVersion 2.11");
    expect(c,
           BASE "\"runtimeVersion\": \"2.11\", \"pythonVersion\": \"3.7\", "
                "\"pythonModule\": \"trainer.task\"}}",
           NULL, NULL);
    expect(c, BASE "\"runtimeVersion\": \"2.11\", \"pythonModule\": \"kiln.mnist\"}}",
           "trainingInput.pythonModule", "kilnd's kiln-train");
    /* its replicas are containers: container-only settings apply */
    expect(c,
           BASE "\"runtimeVersion\": \"2.11\", \"pythonModule\": \"t.task\", "
                "\"masterConfig\": {\"cpuLimit\": \"2\"}}}",
           NULL, NULL);
    expect(c, BASE "\"pythonModule\": \"t.task\", \"masterConfig\": {\"cpuLimit\": \"2\"}}}",
           "trainingInput.masterConfig.cpuLimit", "container replicas only");
    /* serviceAccount is kilnd's to map to a user (kiln_users_job), not the catalog's */
    expect(c, BASE "\"serviceAccount\": \"a@b.iam\"}}", NULL, NULL);
    expect(c, BASE "\"network\": \"projects/p/global/networks/n\"}}", "trainingInput.network",
           "not supported");
    expect(c, BASE "\"enableWebAccess\": true}}", "trainingInput.enableWebAccess", "shell");
    expect(c, BASE "\"enableWebAccess\": false}}", NULL, NULL);
    /* diskConfig: scratch space (its size checked at create, src/api/api_jobs.c);
     * a provisioned disk class kiln cannot promise is refused */
    expect(c, BASE "\"masterConfig\": {\"diskConfig\": {\"bootDiskSizeGb\": 200}}}}", NULL, NULL);
    expect(c,
           BASE "\"masterConfig\": {\"diskConfig\": {\"bootDiskType\": \"pd-standard\", "
                "\"bootDiskSizeGb\": 50}}}}",
           NULL, NULL);
    expect(c,
           BASE "\"masterConfig\": {\"diskConfig\": {\"bootDiskType\": \"hyperdisk-balanced\"}}}}",
           "trainingInput.masterConfig.diskConfig.bootDiskType", "local disk");
    /* a TTL is acted on (src/jobfiles/ttl.c), within ten years */
    expect(c, BASE "\"runPolicy\": {\"ttlSecondsAfterFinished\": \"60\"}}}", NULL, NULL);
    expect(c, BASE "\"runPolicy\": {\"ttlSecondsAfterFinished\": \"0\"}}}", NULL, NULL);
    expect(c, BASE "\"runPolicy\": {\"ttlSecondsAfterFinished\": \"400000000\"}}}",
           "trainingInput.runPolicy.ttlSecondsAfterFinished", "out of range");
    expect(c, BASE "\"runPolicy\": {\"cleanPodPolicy\": \"None\"}}}",
           "trainingInput.runPolicy.cleanPodPolicy", "use Running");
    expect(c, BASE "\"runPolicy\": {\"cleanPodPolicy\": \"Running\"}}}", NULL, NULL);
    expect(c, BASE "\"runPolicy\": {\"cleanPodPolicy\": \"All\"}}}", NULL, NULL);

    /* env: any name but kiln's own */
    expect(c, BASE "\"masterConfig\": {\"env\": {\"DATA\": \"/d\", \"KILN_VERBOSE\": \"1\"}}}}",
           NULL, NULL);
    expect(c, BASE "\"masterConfig\": {\"env\": {\"TF_CONFIG\": \"{}\"}}}}",
           "trainingInput.masterConfig.env.TF_CONFIG", "cannot be overridden");
    expect(c, BASE "\"masterConfig\": {\"env\": {\"CLOUD_ML_TRIAL_ID\": \"3\"}}}}",
           "trainingInput.masterConfig.env.CLOUD_ML_TRIAL_ID", "CLOUD_ML_*");
    expect(c, BASE "\"masterConfig\": {\"env\": {\"MASTER_ADDR\": \"h\"}}}}",
           "trainingInput.masterConfig.env.MASTER_ADDR", "cannot be overridden");
    expect(c, BASE "\"masterConfig\": {\"env\": {\"A=B\": \"h\"}}}}",
           "trainingInput.masterConfig.env.A=B", "not a variable name");

    /* limits and mounts: container replicas only, in Kubernetes' forms */
#define IMG "\"imageUri\": \"localhost/x:1\", "
    expect(c,
           BASE "\"masterConfig\": {" IMG "\"cpuLimit\": \"500m\", \"memoryLimit\": \"4Gi\", "
                "\"hostMounts\": [\"/srv/data:/data:ro\", \"/tmp/o:/out\"]}}}",
           NULL, NULL);
    expect(c, BASE "\"masterConfig\": {\"cpuLimit\": \"2\"}}}",
           "trainingInput.masterConfig.cpuLimit", "container replicas only");
    expect(c, BASE "\"masterConfig\": {" IMG "\"cpuLimit\": \"two\"}}}",
           "trainingInput.masterConfig.cpuLimit", "CPU quantity");
    expect(c, BASE "\"masterConfig\": {" IMG "\"memoryLimit\": \"4GB\"}}}",
           "trainingInput.masterConfig.memoryLimit", "memory quantity");
    expect(c, BASE "\"masterConfig\": {\"hostMounts\": [\"/a:/b\"]}}}",
           "trainingInput.masterConfig.hostMounts[0]", "container replicas only");
    expect(c, BASE "\"masterConfig\": {" IMG "\"hostMounts\": [\"/a:/b:rw,z\"]}}}",
           "trainingInput.masterConfig.hostMounts[0]", "/HOST/PATH");

    /* the quantities themselves */
    int64_t v = 0;
    CHECK(kiln_quantity_cpu_milli("500m", &v) && v == 500);
    CHECK(kiln_quantity_cpu_milli("2", &v) && v == 2000);
    CHECK(kiln_quantity_cpu_milli("0.25", &v) && v == 250);
    CHECK(!kiln_quantity_cpu_milli("0", &v) && !kiln_quantity_cpu_milli("1e3", &v) &&
          !kiln_quantity_cpu_milli("-1", &v) && !kiln_quantity_cpu_milli("", &v));
    CHECK(kiln_quantity_bytes("4Gi", &v) && v == 4LL << 30);
    CHECK(kiln_quantity_bytes("256Mi", &v) && v == 256LL << 20);
    CHECK(kiln_quantity_bytes("1G", &v) && v == 1000000000LL);
    CHECK(kiln_quantity_bytes("1048576", &v) && v == 1048576);
    CHECK(!kiln_quantity_bytes("4GB", &v) && !kiln_quantity_bytes("Gi", &v));

    /* elasticPolicy.metrics: container workers are measured from their
     * cgroups (accepted); nvidia.com/gpu is a Utilization of the workers'
     * GPUs: refused as an AverageValue, and on workers without GPUs */
#define EL(cfg, metric)                                                                            \
    "{\"jobId\": \"j\", \"trainingInput\": {\"scaleTier\": \"CUSTOM\", \"region\": "               \
    "\"us-central1\", \"masterType\": \"n1-standard-4\", \"masterConfig\": {" cfg "}, "            \
    "\"pytorchJob\": {\"workersOnly\": true, \"elasticPolicy\": {\"minReplicas\": \"1\", "         \
    "\"maxReplicas\": \"3\", \"metrics\": [" metric "]}}}}"
#define CPU75 "{\"resource\": \"cpu\", \"targetType\": \"Utilization\", \"averageUtilization\": 75}"
#define GPU50                                                                                      \
    "{\"resource\": \"nvidia.com/gpu\", \"targetType\": \"Utilization\", "                         \
    "\"averageUtilization\": 50}"
#define ONE_GPU "\"acceleratorConfig\": {\"count\": \"1\", \"type\": \"NVIDIA_TESLA_T4\"}"
    expect(c, EL("\"imageUri\": \"localhost/w:1\"", CPU75), NULL, NULL);
    expect(c, EL("\"containerCommand\": [\"true\"]", CPU75), NULL, NULL);
    expect(c, EL(ONE_GPU, GPU50), NULL, NULL);
    expect(c, EL(ONE_GPU ", \"imageUri\": \"localhost/w:1\"", GPU50), NULL, NULL);
    expect(c, EL("\"containerCommand\": [\"true\"]", GPU50),
           "trainingInput.pytorchJob.elasticPolicy.metrics[0].resource", "hold no GPUs");
    expect(c,
           EL(ONE_GPU, "{\"resource\": \"nvidia.com/gpu\", \"targetType\": \"AverageValue\", "
                       "\"averageValue\": \"1\"}"),
           "trainingInput.pytorchJob.elasticPolicy.metrics[0].targetType", "use Utilization");
#undef EL

    kiln_catalog_free(c);
    kiln_diag_free(&d);
    TEST_DONE();
}
