/* tools/resnet50.c - `kiln-train resnet50 --synthetic`: ResNet-50 v1.5
 * training throughput on synthetic data, printed the way tf_cnn_benchmarks
 * prints it (a line per step with images/sec, then "total images/sec").
 *
 * Runs on the CPU (models/resnet.h). --device=/gpu:N and mixed precision are
 * parsed and refused with a clear message: the CUDA ops exist (src/cuda) but
 * the model does not run on them yet (docs/gpu.md). */
#include "kiln/cuda.h"
#include "kiln/tensor.h"
#include "models/resnet.h"
#include "tools/tool.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct r50_opts {
    long batch, image, batches, warmup, width, classes, threads;
    const char *device, *precision;
    int synthetic;
} r50_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-train resnet50 --synthetic [--batch_size=32] [--image_size=224]\n"
               "                           [--num_batches=10] [--num_warmup_batches=2]\n"
               "                           [--device=/cpu:0] [--precision=fp32] [--threads=N]\n"
               "                           [--width=64] [--num_classes=1000]\n"
               "  --width scales every stage (64 is ResNet-50; smaller is for quick checks)\n");
}

static int num(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "kiln-train resnet50: --%s=%s: expected an integer in [%ld, %ld]\n", flag,
                v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, r50_opts *o)
{
    static const struct {
        const char *name;
        long lo, hi;
        size_t off;
    } ints[] = {
        {"batch_size", 1, 4096, offsetof(r50_opts, batch)},
        {"image_size", 32, 1024, offsetof(r50_opts, image)},
        {"num_batches", 1, 1000000, offsetof(r50_opts, batches)},
        {"num_warmup_batches", 0, 1000, offsetof(r50_opts, warmup)},
        {"width", 1, 256, offsetof(r50_opts, width)},
        {"num_classes", 1, 100000, offsetof(r50_opts, classes)},
        {"threads", 0, 1024, offsetof(r50_opts, threads)},
    };
    *o = (r50_opts){.batch = 32,
                    .image = 224,
                    .batches = 10,
                    .warmup = 2,
                    .width = 64,
                    .classes = 1000,
                    .device = "/cpu:0",
                    .precision = "fp32"};
    const char *a = "";
    for (int i = 1; i < argc; i++) {
        const char *eq, *v;
        char name[64];
        size_t len;
        int done = 0;
        a = argv[i];
        eq = strchr(a, '=');
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "--synthetic") == 0) {
            o->synthetic = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) goto bad;
        len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name) goto bad;
        for (size_t k = 0; k < len; k++)
            name[k] = a[2 + k] == '-' ? '_' : a[2 + k];
        name[len] = '\0';
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) goto bad;
        if (strcmp(name, "device") == 0) {
            o->device = v;
            continue;
        }
        if (strcmp(name, "precision") == 0) {
            o->precision = v;
            continue;
        }
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !done; k++)
            if (strcmp(name, ints[k].name) == 0) {
                if (num(name, v, ints[k].lo, ints[k].hi, (long *)((char *)o + ints[k].off)))
                    return 2;
                done = 1;
            }
        if (!done) goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "kiln-train resnet50: unknown or incomplete argument '%s'\n", a);
    usage(stderr);
    return 2;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kiln_train_resnet50_main(int argc, char **argv)
{
    r50_opts o;
    kiln_device_spec dev;
    char err[256];
    int rc = parse(argc, argv, &o);
    kiln_resnet *net = NULL;
    float *x = NULL;
    uint8_t *labels = NULL;
    double sum = 0, sum2 = 0, total_s = 0;
    long timed = 0;
    kiln_rng g;

    if (rc) return rc == 1 ? 0 : rc;
    if (!o.synthetic) {
        fprintf(stderr, "kiln-train resnet50: only --synthetic data is supported so far\n");
        return 2;
    }
    if (kiln_device_parse(o.device, &dev, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln-train resnet50: --device: %s\n", err);
        return 2;
    }
    if (dev.kind == KILN_DEVICE_GPU) {
        fprintf(stderr,
                "kiln-train resnet50: --device=%s: %s; training on GPUs is not wired into the "
                "runtime yet (docs/gpu.md)\n",
                o.device,
                kiln_cuda_built() ? "the CUDA backend is built" : "CUDA backend not built");
        return 2;
    }
    if (strcmp(o.precision, "fp32") != 0) {
        fprintf(stderr,
                "kiln-train resnet50: --precision=%s: the CPU path is fp32 only (bf16/fp16 "
                "mixed precision is for the GPU path, docs/gpu.md)\n",
                o.precision);
        return 2;
    }
    if (o.threads) kiln_set_threads((int)o.threads);

    kiln_resnet_cfg cfg = {.width = (int)o.width, .classes = (int)o.classes, .seed = 1};
    net = kiln_resnet_create(&cfg, err, sizeof err);
    size_t nx = (size_t)o.batch * o.image * o.image * 3;
    x = kiln_falloc(nx);
    labels = malloc((size_t)o.batch);
    if (!net || !x || !labels) {
        fprintf(stderr, "kiln-train resnet50: %s\n", net ? "out of memory" : err);
        rc = 1;
        goto out;
    }
    /* synthetic data, as tf_cnn_benchmarks: fixed random images and labels */
    kiln_rng_seed(&g, 42);
    for (size_t i = 0; i < nx; i++)
        x[i] = 2.0f * kiln_rng_uniform(&g) - 1.0f;
    for (long i = 0; i < o.batch; i++)
        labels[i] = (uint8_t)(kiln_rng_next(&g) % (uint64_t)(o.classes < 256 ? o.classes : 256));

    printf("Model:       resnet50 (v1.5, width %ld, %zu parameters)\n", o.width,
           kiln_resnet_param_count(net));
    printf("Device:      /cpu:0 (%d threads)\nData format: NHWC\nBatch size:  %ld\n"
           "Image size:  %ld\nPrecision:   fp32\nOptimizer:   sgd (momentum 0.9)\n",
           kiln_get_threads(), o.batch, o.image);
    printf("Step\tImg/sec\ttotal_loss\n");
    fflush(stdout);
    for (long step = -o.warmup; step < o.batches; step++) {
        float loss = 0;
        double t0 = now();
        if (kiln_resnet_train_step(net, x, labels, (int)o.batch, (int)o.image, 0.01f, 0.9f, &loss,
                                   err, sizeof err) != KILN_OK) {
            fprintf(stderr, "kiln-train resnet50: %s\n", err);
            rc = 1;
            goto out;
        }
        double dt = now() - t0, ips = (double)o.batch / dt;
        if (step < 0) continue; /* warm-up: not timed */
        total_s += dt;
        sum += ips;
        sum2 += ips * ips;
        timed++;
        double mean = sum / timed, sd = timed > 1 ? sqrt(fmax(0, sum2 / timed - mean * mean)) : 0;
        printf("%ld\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f\n", step + 1, mean, sd,
               fabs(ips - mean), loss);
        fflush(stdout);
    }
    printf("----------------------------------------------------------------\n"
           "total images/sec: %.2f\n"
           "----------------------------------------------------------------\n",
           (double)o.batch * (double)timed / total_s);
out:
    kiln_resnet_destroy(net);
    kiln_ffree(x);
    free(labels);
    return rc;
}
