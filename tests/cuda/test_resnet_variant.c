/* tests/cuda/test_resnet_variant.c - the ResNet step's variants
 * (models/resnet_variant.c, issue 45) on machines without a GPU:
 *
 *  - names: base, each built feature, canonical order; refusals naming the
 *    flag and the reason (unknown, named twice, not built yet, the wrong
 *    precision, fused with bn-cudnn);
 *  - the selection rule: --variant over KILN_RESNET_VARIANT over KILN_BN
 *    over the table, and base for a GPU the table has no row for; a table's
 *    rows read by GPU name and precision, one naming a variant not built
 *    passed over;
 *  - the fused pass on the CPU table gives the bits of the unfused step
 *    (its contract in backend.h), over two SGD steps;
 *  - the CPU table refuses cuDNN's batch norm by name;
 *  - the check passes the fused variant (fp32 and bf16, the reference table
 *    against the CPU table) and fails a mock table whose fused pass drops
 *    the residual: it can fail. */
#include "backend/backend.h"
#include "kiln/train.h"
#include "models/resnet.h"
#include "models/resnet_variant.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parses(const char *s, int prec, const char *name)
{
    kiln_resnet_variant v;
    char err[512];
    if (kiln_resnet_variant_parse("--variant", s, prec, &v, err, sizeof err)) {
        printf("  %s: refused: %s\n", s, err);
        return 0;
    }
    return strcmp(v.name, name) == 0;
}

/* refused, with each of the words in the error */
static int refused(const char *s, int prec, const char *w1, const char *w2)
{
    kiln_resnet_variant v;
    char err[512] = "";
    int rc = kiln_resnet_variant_parse("--variant", s, prec, &v, err, sizeof err);
    printf("  --variant=%s (%s): %s\n", s, kiln_precision_name((kiln_precision)prec), err);
    return rc == -1 && strstr(err, "--variant") && strstr(err, w1) && (!w2 || strstr(err, w2));
}

static void names(void)
{
    CHECK(parses("base", KILN_PRECISION_FP32, "base"));
    CHECK(parses("fused", KILN_PRECISION_BF16, "fused"));
    CHECK(parses("bn-cudnn", KILN_PRECISION_TF32, "bn-cudnn"));
    CHECK(refused("fuzed", KILN_PRECISION_FP32, "unknown feature 'fuzed'", "fused"));
    CHECK(refused("", KILN_PRECISION_FP32, "expected base", NULL));
    CHECK(refused("fused+fused", KILN_PRECISION_FP32, "named twice", NULL));
    CHECK(refused("fused+bn-cudnn", KILN_PRECISION_FP32, "does not combine", NULL));
    CHECK(refused("bn-cudnn+fused", KILN_PRECISION_FP32, "does not combine", NULL));
    CHECK(parses("nchw", KILN_PRECISION_TF32, "nchw"));
    CHECK(parses("nchw+fused", KILN_PRECISION_FP32, "fused+nchw"));
    CHECK(refused("cudnn-graph", KILN_PRECISION_BF16, "not built yet", NULL));
    CHECK(parses("cublaslt-fc+fused", KILN_PRECISION_BF16, "fused+cublaslt-fc"));
    CHECK(refused("bf16-storage", KILN_PRECISION_FP32, "bf16 only", "--precision=fp32"));
    CHECK(refused("nchw", KILN_PRECISION_BF16, "fp32, tf32 only", NULL));

    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    if (f) {
        kiln_resnet_variant_list(f);
        fclose(f);
    }
    CHECK_MSG(strstr(buf, "base\tbuilt") && strstr(buf, "fused\tbuilt") &&
                  strstr(buf, "bn-cudnn\tbuilt") && strstr(buf, "nchw\tbuilt") &&
                  strstr(buf, "cudnn-graph\tnot built") && strstr(buf, "bf16-storage\tnot built"),
              "list: %s", buf);
}

static void selection(void)
{
    kiln_resnet_variant v;
    const char *src = NULL, *log = (const char *)1;
    char err[512];
    unsetenv("KILN_RESNET_VARIANT");
    unsetenv("KILN_BN");
    CHECK(kiln_resnet_variant_select(NULL, "NVIDIA Nothing 1GB", KILN_PRECISION_FP32, &v, &src, err,
                                     sizeof err) == 0);
    CHECK_MSG(strcmp(v.name, "base") == 0 && strcmp(src, "default") == 0, "%s from %s", v.name,
              src);
    CHECK(kiln_resnet_variant_default("NVIDIA Nothing 1GB", KILN_PRECISION_BF16, &v, &log) == 0);
    CHECK(log == NULL && v.features == 0);
    setenv("KILN_BN", "cudnn", 1);
    CHECK(kiln_resnet_variant_select(NULL, NULL, KILN_PRECISION_FP32, &v, &src, err, sizeof err) ==
          0);
    CHECK_MSG(v.features == KILN_RV_BN_CUDNN && strcmp(src, "KILN_BN") == 0, "%s from %s", v.name,
              src);
    setenv("KILN_RESNET_VARIANT", "fused", 1);
    CHECK(kiln_resnet_variant_select(NULL, NULL, KILN_PRECISION_FP32, &v, &src, err, sizeof err) ==
          0);
    CHECK(v.features == KILN_RV_FUSED && strcmp(src, "KILN_RESNET_VARIANT") == 0);
    CHECK(kiln_resnet_variant_select("bn-cudnn", NULL, KILN_PRECISION_FP32, &v, &src, err,
                                     sizeof err) == 0);
    CHECK(v.features == KILN_RV_BN_CUDNN && strcmp(src, "--variant") == 0);
    setenv("KILN_RESNET_VARIANT", "nope", 1);
    CHECK(kiln_resnet_variant_select(NULL, NULL, KILN_PRECISION_FP32, &v, &src, err, sizeof err) ==
          -1);
    CHECK_MSG(strstr(err, "KILN_RESNET_VARIANT=nope") != NULL, "%s", err);
    unsetenv("KILN_RESNET_VARIANT");
    unsetenv("KILN_BN");
}

/* the dispatch's reading of a defaults table (the committed one is empty
 * until measured: a table of the same form here) */
static void table(void)
{
    static const kiln_resnet_variant_row rows[] = {
        {"H100", KILN_PRECISION_BF16, "cudnn-graph", "a.txt"}, /* not built: passed over */
        {"H100", KILN_PRECISION_BF16, "fused", "b.txt"},
        {"H200", KILN_PRECISION_TF32, "bn-cudnn", "c.txt"},
        {NULL, 0, NULL, NULL},
    };
    kiln_resnet_variant v;
    const char *log = NULL;
    CHECK(kiln_resnet_variant_lookup(rows, "NVIDIA H100 80GB HBM3", KILN_PRECISION_BF16, &v,
                                     &log) == 1);
    CHECK(v.features == KILN_RV_FUSED && log && strcmp(log, "b.txt") == 0);
    CHECK(kiln_resnet_variant_lookup(rows, "NVIDIA H200", KILN_PRECISION_TF32, &v, &log) == 1);
    CHECK(v.features == KILN_RV_BN_CUDNN && strcmp(log, "c.txt") == 0);
    CHECK(kiln_resnet_variant_lookup(rows, "NVIDIA H200", KILN_PRECISION_BF16, &v, &log) == 0);
    CHECK(v.features == 0 && strcmp(v.name, "base") == 0 && log == NULL);
    CHECK(kiln_resnet_variant_lookup(rows, NULL, KILN_PRECISION_BF16, &v, &log) == 0);
}

/* two steps of base and of fused on the CPU table: the same bits */
static void fused_bits(void)
{
    enum { N = 4, SIZE = 32, CL = 10 };
    kiln_resnet_cfg cfg = {.width = 4, .classes = CL, .seed = 5};
    char err[512] = "";
    size_t nx = (size_t)N * SIZE * SIZE * 3;
    float *x = malloc(nx * sizeof *x), la[2] = {0}, lb[2] = {0};
    int32_t lab[N] = {1, 7, 3, 3};
    kiln_resnet_dev *a =
        kiln_resnet_dev_create(&cfg, &kiln__backend_cpu, 0, 0, N, SIZE, err, sizeof err);
    kiln_resnet_dev *b =
        kiln_resnet_dev_create(&cfg, &kiln__backend_cpu, 0, 0, N, SIZE, err, sizeof err);
    CHECK_MSG(a && b && x, "%s", err);
    if (!a || !b || !x) goto out;
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    CHECK(kiln_resnet_dev_set_variant(b, KILN_RV_FUSED) == KILN_OK);
    CHECK(kiln_resnet_dev_load(a, x, lab, N) == KILN_OK && kiln_resnet_dev_load(b, x, lab, N) == 0);
    for (int s = 0; s < 2; s++)
        CHECK(kiln_resnet_dev_step(a, 0.05f, 0.9f) == 0 && kiln_resnet_dev_wait(a, &la[s]) == 0 &&
              kiln_resnet_dev_step(b, 0.05f, 0.9f) == 0 && kiln_resnet_dev_wait(b, &lb[s]) == 0);
    printf("fused vs base on the CPU table: losses %.7f %.7f / %.7f %.7f\n", la[0], la[1], lb[0],
           lb[1]);
    CHECK(memcmp(la, lb, sizeof la) == 0);
    int np = kiln_resnet_dev_param_buffers(a), same = 1;
    CHECK(np == kiln_resnet_dev_param_buffers(b) && np > 100);
    for (int i = 0; i < np; i++) {
        size_t n = kiln_resnet_dev_param_size(a, i);
        float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
        CHECK(pa && pb && kiln_resnet_dev_param(a, i, pa, n) == 0 &&
              kiln_resnet_dev_param(b, i, pb, n) == 0);
        if (pa && pb) same &= memcmp(pa, pb, n * sizeof *pa) == 0;
        free(pa);
        free(pb);
    }
    CHECK_MSG(same, "fused and base parameters differ after two steps");
    /* the CPU has one batch norm: cuDNN's is refused, named */
    CHECK(kiln_resnet_dev_set_variant(a, KILN_RV_BN_CUDNN) == KILN_EIO);
    CHECK_MSG(strstr(kiln_resnet_dev_error(a), "cuDNN") != NULL, "%s", kiln_resnet_dev_error(a));
    CHECK(kiln_resnet_dev_set_variant(a, KILN_RV_NCHW) == KILN_EIO);
    CHECK_MSG(strstr(kiln_resnet_dev_error(a), "NCHW") != NULL, "%s", kiln_resnet_dev_error(a));
    CHECK(kiln_resnet_dev_set_variant(a, KILN_RV_CUDNN_GRAPH) == KILN_EINVAL);
out:
    kiln_resnet_dev_destroy(a);
    kiln_resnet_dev_destroy(b);
    free(x);
}

/* a mock device whose fused pass forgets the residual */
static int broken_fused(kiln__dev *d, const float *x, const float *gamma, const float *beta,
                        const float *res, float *y, float *mean, float *invstd, float *run_mean,
                        float *run_var, float momentum, float eps, int M, int C)
{
    (void)res;
    return kiln__backend_cpu_ref.bn_fwd_train_add_relu(d, x, gamma, beta, NULL, y, mean, invstd,
                                                       run_mean, run_var, momentum, eps, M, C);
}

static void check(void)
{
    kiln_resnet_variant v;
    char err[512] = "";
    CHECK(kiln_resnet_variant_parse("--variant", "fused", -1, &v, err, sizeof err) == 0);
    int rc = kiln_resnet_variant_check(&kiln__backend_cpu_ref, 0, &v, KILN_PRECISION_FP32, stdout,
                                       err, sizeof err);
    CHECK_MSG(rc == 0, "fp32 check: %d %s", rc, err);
    rc = kiln_resnet_variant_check(&kiln__backend_cpu_ref, 0, &v, KILN_PRECISION_BF16, stdout, err,
                                   sizeof err);
    CHECK_MSG(rc == 0, "bf16 check: %d %s", rc, err);
    kiln__backend bad = kiln__backend_cpu_ref;
    bad.bn_fwd_train_add_relu = broken_fused;
    rc = kiln_resnet_variant_check(&bad, 0, &v, KILN_PRECISION_FP32, stdout, err, sizeof err);
    CHECK_MSG(rc == 1, "a fused pass without its residual passed the check (%d %s)", rc, err);
    /* a side that cannot run is an error, not a verdict */
    CHECK(kiln_resnet_variant_parse("--variant", "bn-cudnn", -1, &v, err, sizeof err) == 0);
    rc = kiln_resnet_variant_check(&kiln__backend_cpu_ref, 0, &v, KILN_PRECISION_FP32, stdout, err,
                                   sizeof err);
    CHECK_MSG(rc == -1 && strstr(err, "cuDNN"), "bn-cudnn on the CPU: %d %s", rc, err);
}

int main(void)
{
    names();
    selection();
    table();
    fused_bits();
    check();
    TEST_DONE();
}
