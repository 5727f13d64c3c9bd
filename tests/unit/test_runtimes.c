/* test_runtimes.c - runtime versions choose an image (data/catalog/runtimes.yaml,
 * docs/catalog.md "Runtime versions"): the built-in map, the CPU or GPU
 * image by a role's accelerators, the refusals at create (a version or a
 * Python the site does not map, pythonVersion without runtimeVersion, an
 * image beside runtimeVersion), and a site's overrides (a mirror, a local
 * image, a pair removed, a version added) with the errors a bad site file
 * gets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/catalog.h"
#include "test.h"
#include "test_catalog_helpers.h"

#define VERTEX "us-docker.pkg.dev/vertex-ai/training/"

static void test_default_map(const kiln_catalog *c)
{
    static const char *const versions[] = {"1.15", "2.1", "2.2", "2.3", "2.4",  "2.5",
                                           "2.6",  "2.7", "2.8", "2.9", "2.10", "2.11"};
    size_t defaults = 0;
    for (size_t i = 0; i < kiln_catalog_runtime_count(c); i++) {
        const kiln_runtime *r = kiln_catalog_runtime_at(c, i);
        CHECK(!r->site && !r->mirrored);
        if (r->python_default) {
            defaults++;
            CHECK_STR(r->python, "3.7"); /* AI Platform's Python for every version */
        }
    }
    CHECK(defaults == sizeof versions / sizeof *versions);
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        const kiln_runtime *r = kiln_catalog_runtime(c, versions[i], NULL);
        CHECK_MSG(r && r->python_default, "runtime version %s is mapped", versions[i]);
        CHECK(kiln_catalog_runtime(c, versions[i], "3.7") == r);
    }
    const kiln_runtime *r = kiln_catalog_runtime(c, "2.11", "3.7");
    CHECK(r && !strcmp(r->cpu_image, VERTEX "tf-cpu.2-11:latest"));
    CHECK(r && !strcmp(r->gpu_image, VERTEX "tf-gpu.2-11:latest"));
    r = kiln_catalog_runtime(c, "2.11", "3.10");
    CHECK(r && !r->python_default && !strcmp(r->cpu_image, VERTEX "tf-cpu.2-11.py310:latest"));
    r = kiln_catalog_runtime(c, "1.15", NULL);
    CHECK(r && !strcmp(r->gpu_image, VERTEX "tf-gpu.1-15:latest"));
    CHECK(kiln_catalog_runtime(c, "1.15", "2.7") == NULL); /* no prebuilt image has it */
    CHECK(kiln_catalog_runtime(c, "2.12", NULL) == NULL);
    CHECK(kiln_catalog_runtime(c, NULL, NULL) == NULL);
}

/* The image each role runs: GPU flavour where the role's plan has GPUs. */
static void test_role_images(const kiln_catalog *c)
{
    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    CHECK(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER) == NULL); /* no runtimeVersion */
    kiln_set_str(&j->training_input.runtime_version, "2.11");
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER), VERTEX "tf-cpu.2-11:latest");
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 2);
    set_accel(j, KILN_ROLE_WORKER, "NVIDIA_TESLA_T4", 1);
    set_role(j, KILN_ROLE_PARAMETER_SERVER, "n1-standard-8", 1);
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_WORKER), VERTEX "tf-gpu.2-11:latest");
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_PARAMETER_SERVER),
              VERTEX "tf-cpu.2-11:latest");
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER), VERTEX "tf-cpu.2-11:latest");
    kiln_set_str(&j->training_input.python_version, "3.10");
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_WORKER),
              VERTEX "tf-gpu.2-11.py310:latest");
    kiln_set_str(&j->training_input.python_version, "3.5");
    CHECK(kiln_catalog_runtime_image(c, j, KILN_ROLE_WORKER) == NULL);
    kiln_job_free(j);

    /* a legacy type's built-in GPU (BASIC_GPU: standard_gpu, one K80) */
    j = mkjob("BASIC_GPU", "us-central1");
    kiln_set_str(&j->training_input.runtime_version, "2.5");
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER), VERTEX "tf-gpu.2-5:latest");
    kiln_job_free(j);
    /* GPUs by count alone (a TFJob's nvidia.com/gpu) */
    j = mkcustom("n1-standard-8", NULL, 0);
    set_accel(j, KILN_ROLE_MASTER, NULL, 1);
    kiln_set_str(&j->training_input.runtime_version, "2.10");
    CHECK(strstr(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER), "tf2-gpu.2-10.py37") != NULL);
    kiln_job_free(j);

    /* normalise writes the default Python down; an explicit one stays */
    j = mkcustom("n1-standard-8", NULL, 0);
    kiln_set_str(&j->training_input.runtime_version, "2.9");
    CHECK(kiln_catalog_normalise(c, j) == KILN_OK);
    CHECK_STR(j->training_input.python_version, "3.7");
    kiln_set_str(&j->training_input.python_version, "3.10");
    CHECK(kiln_catalog_normalise(c, j) == KILN_OK);
    CHECK_STR(j->training_input.python_version, "3.10");
    kiln_set_str(&j->training_input.runtime_version, NULL);
    kiln_set_str(&j->training_input.python_version, NULL);
    CHECK(kiln_catalog_normalise(c, j) == KILN_OK);
    CHECK(j->training_input.python_version == NULL);
    kiln_job_free(j);
}

static void test_refusals(const kiln_catalog *c, kiln_diag *d)
{
    /* the seeds' command line: --runtime-version 2.11 --python-version 3.7 */
    kiln_job *j = mkcustom("n1-standard-8", "NVIDIA_TESLA_V100", 1);
    kiln_set_str(&j->training_input.runtime_version, "2.11");
    kiln_set_str(&j->training_input.python_version, "3.7");
    CHECK_VALID(c, j, d);
    /* a Python the version does not offer here: the ones it does */
    kiln_set_str(&j->training_input.python_version, "3.5");
    CHECK_ONLY(c, j, d, "trainingInput.pythonVersion");
    CHECK_SAYS(d, "trainingInput.pythonVersion", "not offered with runtimeVersion 2.11");
    CHECK_SAYS(d, "trainingInput.pythonVersion", "Python 3.7, 3.10");
    /* a version the site does not map: the ones it does */
    kiln_set_str(&j->training_input.python_version, NULL);
    kiln_set_str(&j->training_input.runtime_version, "2.12");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    CHECK_SAYS(d, "trainingInput.runtimeVersion", "unknown runtime version '2.12'");
    CHECK_SAYS(d, "trainingInput.runtimeVersion",
               "1.15, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, "
               "2.8, 2.9, 2.10, 2.11");
    /* pythonVersion alone: it is one of a runtime version's */
    kiln_set_str(&j->training_input.runtime_version, NULL);
    kiln_set_str(&j->training_input.python_version, "3.7");
    CHECK_ONLY(c, j, d, "trainingInput.pythonVersion");
    CHECK_SAYS(d, "trainingInput.pythonVersion", "needs a runtimeVersion");
    /* AI Platform: either pythonVersion or masterConfig.imageUri */
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, "localhost/t:1");
    CHECK_ONLY(c, j, d, "trainingInput.pythonVersion");
    CHECK_SAYS(d, "trainingInput.pythonVersion", "at most one of masterConfig.imageUri");
    /* and either runtimeVersion or masterConfig.imageUri */
    kiln_set_str(&j->training_input.python_version, NULL);
    kiln_set_str(&j->training_input.runtime_version, "2.11");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    CHECK_SAYS(d, "trainingInput.runtimeVersion", "at most one of masterConfig.imageUri");
    /* a worker's own image beside the runtime version's */
    kiln_set_str(&role_cfg(j, KILN_ROLE_MASTER)->image_uri, NULL);
    set_role(j, KILN_ROLE_WORKER, "n1-standard-8", 1);
    kiln_set_str(&role_cfg(j, KILN_ROLE_WORKER)->image_uri, "localhost/w:1");
    CHECK_ONLY(c, j, d, "trainingInput.workerConfig.imageUri");
    CHECK_SAYS(d, "trainingInput.workerConfig.imageUri", "runtimeVersion (2.11)");
    kiln_job_free(j);
}

static const char site[] =
    "runtimeMirrors:\n"
    "  us-docker.pkg.dev/vertex-ai/training: registry.example.com:5000/vertex/\n"
    "runtimeVersions:\n"
    "  - {version: \"2.11\", python: \"3.7\", image: localhost/kiln-tf:2.11}\n"
    "  - {version: \"1.15\", python: \"3.7\", remove: true}\n"
    "  - {version: \"2.12\", python: \"3.10\", cpu: localhost/a:1, gpu: localhost/b:1}\n";

static void test_site(kiln_diag *d)
{
    kiln_catalog *c = load_default();
    size_t n = kiln_catalog_runtime_count(c);
    kiln_diag_clear(d);
    CHECK(kiln_catalog_merge_buf(c, site, sizeof site - 1, "site.yaml", d) == KILN_OK);
    kiln_diag_print(d, stderr);
    CHECK(kiln_catalog_runtime_count(c) == n); /* one replaced, one removed, one added */
    const kiln_runtime *r = kiln_catalog_runtime(c, "2.11", NULL);
    CHECK(r && r->site && !r->mirrored && r->python_default);
    CHECK(r && !strcmp(r->cpu_image, "localhost/kiln-tf:2.11") &&
          !strcmp(r->gpu_image, "localhost/kiln-tf:2.11"));
    r = kiln_catalog_runtime(c, "2.11", "3.10"); /* the built-in pair, mirrored */
    CHECK(r && !r->site && r->mirrored && !r->python_default);
    CHECK(r && !strcmp(r->gpu_image, "registry.example.com:5000/vertex/tf-gpu.2-11.py310:latest"));
    r = kiln_catalog_runtime(c, "2.10", NULL); /* not under the mirrored prefix */
    CHECK(r && !r->mirrored && strstr(r->cpu_image, "deeplearning-platform-release"));
    CHECK(kiln_catalog_runtime(c, "1.15", NULL) == NULL);
    r = kiln_catalog_runtime(c, "2.12", NULL);
    CHECK(r && r->site && r->python_default && !strcmp(r->python, "3.10"));

    kiln_job *j = mkcustom("n1-standard-8", NULL, 0);
    kiln_set_str(&j->training_input.runtime_version, "2.12");
    CHECK_VALID(c, j, d);
    CHECK_STR(kiln_catalog_runtime_image(c, j, KILN_ROLE_MASTER), "localhost/a:1");
    kiln_set_str(&j->training_input.runtime_version, "1.15");
    CHECK_ONLY(c, j, d, "trainingInput.runtimeVersion");
    CHECK_SAYS(d, "trainingInput.runtimeVersion", "this site maps 2.1, ");
    kiln_job_free(j);
    kiln_catalog_free(c);
}

/* A bad site file: every problem named at its entry. */
static void expect_bad(const char *yaml, const char *field, const char *needle)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    CHECK_MSG(kiln_catalog_merge_buf(c, yaml, strlen(yaml), "site.yaml", &d) == KILN_EINVAL,
              "accepted: %s", yaml);
    const char *s = diag_desc(&d, field);
    CHECK_MSG(s && strstr(s, needle), "at %s expected '%s': %s", field, needle, yaml);
    if (!s || !strstr(s, needle)) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    kiln_catalog_free(c);
}

static void test_site_errors(void)
{
    expect_bad("runtimeVersions: [\"2.12\"]\n", "site.yaml:runtimeVersions[0]",
               "names its images now");
    expect_bad("runtimeVersions:\n  - {version: \"2.12\", python: \"3.7\"}\n",
               "site.yaml:runtimeVersions[0].cpu", "required");
    expect_bad("runtimeVersions:\n  - {version: \"2.12\", python: \"3.7\", image: a, cpu: b}\n",
               "site.yaml:runtimeVersions[0].image", "not both");
    expect_bad("runtimeVersions:\n  - {version: \"2.12\", python: \"3.7\", image: \"a b\"}\n",
               "site.yaml:runtimeVersions[0].image", "not an image reference");
    expect_bad("runtimeVersions:\n  - {version: \"2.12\", python: \"3.7\", image: --privileged}\n",
               "site.yaml:runtimeVersions[0].image", "not an image reference");
    expect_bad("runtimeVersions:\n  - {version: \"2.12\", python: \"3.7\", imag: a}\n",
               "site.yaml:runtimeVersions[0].imag", "did you mean 'image'");
    expect_bad("runtimeVersions:\n  - {version: \"2.11\", python: \"3.7\", remove: true, "
               "image: a}\n",
               "site.yaml:runtimeVersions[0].remove", "names no images");
    expect_bad("runtimeMirrors: [a]\n", "site.yaml:runtimeMirrors", "expected a mapping");
    expect_bad("runtimeMirrors: {\"a/\": b}\n", "site.yaml:runtimeMirrors.a/",
               "not a registry prefix");
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_default_map(c);
    test_role_images(c);
    test_refusals(c, &d);
    test_site(&d);
    test_site_errors();
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
