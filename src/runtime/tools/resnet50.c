/* tools/resnet50.c - `kiln-train resnet50 --synthetic|--data_dir=DIR`:
 * ResNet-50 v1.5 training throughput on synthetic data or on ImageNet's
 * TFRecord files (data/imagenet.h), printed the way tf_cnn_benchmarks
 * prints it (a line per step with images/sec, then "total images/sec").
 *
 * On a GPU (the first one by default, --device=/gpu:N) it runs
 * models/resnet_dev.c on the CUDA backend, fp32, tf32, bf16 or fp16 (mixed:
 * fp32 parameters and batch norm; fp16 with loss scaling); on the CPU,
 * models/resnet.h in fp32 (docs/gpu-training.md). */
#include "backend/backend.h"
#include "data/imagenet.h"
#include "kiln/cuda.h"
#include "kiln/tensor.h"
#include "kiln/train.h"
#include "models/resnet.h"
#include "models/resnet_variant.h"
#include "tools/tool.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct r50_opts {
    long batch, image, batches, warmup, width, classes, threads, display, data_threads;
    const char *device, *precision, *data_dir, *variant;
    int synthetic, check, list_variants;
} r50_opts;

static void usage(FILE *f)
{
    fprintf(
        f, "usage: kiln-train resnet50 --synthetic|--data_dir=DIR [--batch_size=32] "
           "[--image_size=224]\n"
           "                           [--num_batches=10] [--num_warmup_batches=2]\n"
           "                           [--device=/gpu:N|/cpu:0] [--precision=fp32|tf32|bf16|fp16]\n"
           "                           [--threads=N] [--width=64] [--num_classes=1000]\n"
           "                           [--display_every=10] [--data_threads=0]\n"
           "                           [--variant=base|FEATURE+...] [--check] [--list_variants]\n"
           "  --data_dir: TFRecord files DIR/train-* of tf.Example records (image/encoded JPEG,\n"
           "              image/class/label), as TensorFlow's build_imagenet_data.py writes\n"
           "              them; random crops and flips (ImageNet's labels 1-1000 need\n"
           "              --num_classes=1001, as in tf_cnn_benchmarks)\n"
           "  --data_threads: JPEG decoding threads (0: the machine's cores, at most 16)\n"
           "  --device: by default the first GPU this process sees, else the CPU\n"
           "  --width scales every stage (64 is ResNet-50; smaller is for quick checks)\n"
           "  --display_every: steps between printed lines (on a GPU also between waits;\n"
           "                   default 10 there, 1 on the CPU)\n"
           "  --threads: the CPU path's compute threads (refused on a GPU, which has none)\n"
           "  --variant: the GPU step's implementation (--list_variants names them; default\n"
           "             $KILN_RESNET_VARIANT, else the measured table's, else base)\n"
           "  --check: first trains the variant 2 steps on a small batch against the CPU\n"
           "           table's reference, and times it only if it agrees (exit 1 if not)\n");
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
        {"display_every", 1, 1000000, offsetof(r50_opts, display)},
        {"data_threads", 0, 256, offsetof(r50_opts, data_threads)},
    };
    *o = (r50_opts){.batch = 32,
                    .image = 224,
                    .batches = 10,
                    .warmup = 2,
                    .width = 64,
                    .classes = 1000,
                    .device = NULL,
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
        if (strcmp(a, "--check") == 0) {
            o->check = 1;
            continue;
        }
        if (strcmp(a, "--list_variants") == 0 || strcmp(a, "--list-variants") == 0) {
            o->list_variants = 1;
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
        if (strcmp(name, "variant") == 0) {
            o->variant = v;
            continue;
        }
        if (strcmp(name, "data_dir") == 0) {
            o->data_dir = v;
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

/* 3 x 2 x multiply-adds of one image's forward pass: the peer's count
 * (bench/pytorch_resnet50.py), for TFLOP/s and MFU */
static double train_flops_per_image(long width, long image, long classes)
{
    int sp[5];
    if (kiln_resnet_spatial((int)image, sp)) return 0;
    double s1 = (double)((image + 6 - 7) / 2 + 1), macs = s1 * s1 * 49 * 3 * width;
    static const int blocks[4] = {3, 4, 6, 3};
    double cin = (double)width;
    for (int st = 0; st < 4; st++) {
        double w = (double)(width << st), cout = 4 * w, si = sp[st], so = sp[st + 1];
        for (int i = 0; i < blocks[st]; i++) {
            double in_s = i == 0 ? si : so;
            macs += in_s * in_s * cin * w;            /* a: 1x1 at the input size */
            macs += so * so * 9 * w * w;              /* b: 3x3, carries the stride */
            macs += so * so * w * cout;               /* c: 1x1 */
            if (i == 0) macs += so * so * cin * cout; /* projection */
            cin = cout;
        }
    }
    macs += cin * (double)classes;
    return 6.0 * macs;
}

static void print_data(const r50_opts *o, const kiln_imagenet *data)
{
    if (data)
        printf("Data:        %s (%d %s, %d decoding thread%s)\n", o->data_dir,
               kiln_imagenet_files(data), kiln_imagenet_files(data) == 1 ? "file" : "files",
               kiln_imagenet_threads(data), kiln_imagenet_threads(data) == 1 ? "" : "s");
    else
        printf("Data:        synthetic\n");
}

/* A step line's rate, with real data the reader's own rate beside it
 * (kiln_imagenet_rate: what the decoding threads sustain when never kept
 * waiting; near the step's, the reader is the limit). The loss stays the
 * line's last field, as tf_cnn_benchmarks prints it. */
static void print_reader(kiln_imagenet *data)
{
    if (data) printf(" (reader: %.1f)", kiln_imagenet_rate(data, NULL));
}

/* after the total: the reader's rate over the run, and whether it was the
 * limit of the step's (ips) */
static void print_reader_total(kiln_imagenet *data, double ips)
{
    uint64_t n = 0;
    if (!data) return;
    double rate = kiln_imagenet_rate(data, &n);
    /* the step's rate includes its waits for the reader, so a reader that
     * limits it shows as a ratio near 1 (its rate is never far below) */
    printf("reader images/sec: %.2f (%llu images decoded on %d thread%s; %.2fx the step's%s)\n",
           rate, (unsigned long long)n, kiln_imagenet_threads(data),
           kiln_imagenet_threads(data) == 1 ? "" : "s", ips > 0 ? rate / ips : 0.0,
           ips > 0 && rate < 1.1 * ips ? ": the reader is the limit" : "");
}

/* The GPU path: models/resnet_dev.c on the CUDA backend. Steps are queued
 * without waiting, as the PyTorch peer runs them; the host waits every
 * --display_every steps (a line then, with that interval's rate) and the
 * total rate is over the whole timed run. */
/* One queued GPU step; with real data its batch first: the next one from
 * the decoding threads (which ran while the previous step computed),
 * staged into the device's other input slot (kiln_resnet_dev_stage: its
 * upload runs on the copy stream while the previous step computes, and
 * this step waits for it on the device, not on the host). */
static kiln_err gpu_step(kiln_resnet_dev *r, kiln_imagenet *data, long batch, char *err,
                         size_t errlen)
{
    const float *bx;
    const int32_t *by;
    err[0] = '\0';
    if (data) {
        if (kiln_imagenet_next(data, &bx, &by, err, errlen)) return KILN_EIO;
        if (kiln_resnet_dev_stage(r, bx, by, (int)batch) != KILN_OK) return KILN_EIO;
    }
    return kiln_resnet_dev_step(r, 0.01f, 0.9f);
}

static int run_gpu(const r50_opts *o, const kiln_device_spec *dev, int precision,
                   kiln_imagenet *data)
{
    char err[512];
    int rc = 1;
    kiln_resnet_dev *r = NULL;
    float *x = NULL;
    int32_t *labels = NULL;
    kiln_rng g;
    const kiln__backend *be = kiln__backend_cuda(err, sizeof err);
    if (!be) {
        fprintf(stderr, "kiln-train resnet50: /gpu:%d: %s\n", dev->index, err);
        return 1;
    }
    kiln_resnet_cfg cfg = {.width = (int)o->width, .classes = (int)o->classes, .seed = 1};
    r = kiln_resnet_dev_create(&cfg, be, dev->index, precision, (int)o->batch, (int)o->image, err,
                               sizeof err);
    size_t nx = (size_t)o->batch * o->image * o->image * 3;
    x = kiln_falloc(nx);
    labels = malloc(sizeof(int32_t) * (size_t)o->batch);
    if (!r || !x || !labels) {
        fprintf(stderr, "kiln-train resnet50: /gpu:%d: %s\n", dev->index,
                r ? "out of memory" : err);
        goto out;
    }
    kiln_rng_seed(&g, 42);
    for (size_t i = 0; !data && i < nx; i++) /* synthetic: fixed random images */
        x[i] = 2.0f * kiln_rng_uniform(&g) - 1.0f;
    for (long i = 0; i < o->batch; i++)
        labels[i] = (int32_t)(kiln_rng_next(&g) % (uint64_t)o->classes);
    kiln_resnet_variant v;
    const char *source = "default";
    if (kiln_resnet_variant_select(o->variant, kiln_resnet_dev_name(r), precision, &v, &source, err,
                                   sizeof err)) {
        fprintf(stderr, "kiln-train resnet50: %s\n", err);
        rc = 2;
        goto out;
    }
    if (o->check) {
        /* before the timed run, on its own small model: a variant that
         * disagrees with the CPU table is not timed */
        int c = kiln_resnet_variant_check(be, dev->index, &v, precision, stdout, err, sizeof err);
        fflush(stdout);
        if (c) {
            fprintf(stderr, "kiln-train resnet50: --check: %s\n",
                    c < 0 ? err : "the variant disagrees with the CPU reference; not timed");
            goto out;
        }
    }
    err[0] = '\0';
    if (kiln_resnet_dev_set_variant(r, v.features) != KILN_OK) goto dev_err;
    if (!data && kiln_resnet_dev_load(r, x, labels, (int)o->batch) != KILN_OK) goto dev_err;
    double flops = train_flops_per_image(o->width, o->image, o->classes);
    printf("Model:       resnet50 (v1.5, width %ld, %zu parameters)\n", o->width,
           kiln_resnet_dev_param_count(r));
    print_data(o, data);
    printf("Device:      /gpu:%d (%s)\nData format: NHWC\nBatch size:  %ld\n"
           "Image size:  %ld\nPrecision:   %s\nVariant:     %s (from %s)\n"
           "Optimizer:   sgd (momentum 0.9)\n",
           dev->index, kiln_resnet_dev_name(r), o->batch, o->image,
           kiln_precision_name((kiln_precision)precision), v.name, source);
    printf("Step\tImg/sec\ttotal_loss\n");
    fflush(stdout);
    for (long i = 0; i < o->warmup; i++)
        if (gpu_step(r, data, o->batch, err, sizeof err) != KILN_OK) goto dev_err;
    float loss = 0;
    if (kiln_resnet_dev_wait(r, &loss) != KILN_OK) goto dev_err;
    double t0 = now(), t_last = t0;
    long every = o->display > 0 ? o->display : 10;
    for (long step = 0; step < o->batches; step++) {
        if (gpu_step(r, data, o->batch, err, sizeof err) != KILN_OK) goto dev_err;
        if ((step + 1) % every && step + 1 != o->batches) continue;
        if (kiln_resnet_dev_wait(r, &loss) != KILN_OK) goto dev_err;
        double t = now(), n = (double)((step % every) + 1);
        printf("%ld\timages/sec: %.1f", step + 1, n * (double)o->batch / (t - t_last));
        print_reader(data);
        printf("\t%.3f\n", loss);
        fflush(stdout);
        t_last = t;
    }
    double secs = now() - t0, ips = (double)o->batch * (double)o->batches / secs;
    const char *pr = getenv("KILN_RESNET_PROFILE"); /* where the time goes (docs/gpu.md) */
    if (pr && strcmp(pr, "1") == 0 && kiln_resnet_dev_profile(r, 0.01f, 0.9f, stdout) != KILN_OK)
        goto dev_err;
    if (!(loss == loss)) {
        fprintf(stderr, "kiln-train resnet50: the loss is not finite\n");
        goto out;
    }
    printf("----------------------------------------------------------------\n"
           "total images/sec: %.2f\n"
           "achieved TFLOP/s: %.1f (%.3f GFLOP per training image)\n"
           "----------------------------------------------------------------\n",
           ips, ips * flops / 1e12, flops / 1e9);
    print_reader_total(data, ips);
    uint64_t skipped = 0;
    float scale = kiln_resnet_dev_loss_scale(r, &skipped);
    if (scale > 0)
        printf("loss scale: %g (%llu steps skipped)\n", scale, (unsigned long long)skipped);
    /* everything is allocated by the first steps (workspaces grow then):
     * the memory in use after the run is its peak */
    size_t used = 0;
    if (kiln_resnet_dev_mem_used(r, &used) == KILN_OK)
        printf("device memory in use: %.0f MiB (variant %s)\n", (double)used / 1048576.0, v.name);
    rc = 0;
    goto out;
dev_err:
    if (err[0]) /* the data's error */
        fprintf(stderr, "kiln-train resnet50: --data_dir: %s\n", err);
    else
        fprintf(stderr, "kiln-train resnet50: /gpu:%d: %s\n", dev->index, kiln_resnet_dev_error(r));
out:
    kiln_resnet_dev_destroy(r);
    kiln_ffree(x);
    free(labels);
    return rc;
}

static kiln_imagenet *open_data(const r50_opts *o)
{
    char err[1024];
    kiln_imagenet_cfg c = {.dir = o->data_dir,
                           .split = "train",
                           .batch = (int)o->batch,
                           .size = (int)o->image,
                           .classes = (int)o->classes,
                           .threads = (int)o->data_threads,
                           .train = 1,
                           .seed = 1};
    kiln_imagenet *d = kiln_imagenet_open(&c, err, sizeof err);
    if (!d) fprintf(stderr, "kiln-train resnet50: %s\n", err);
    return d;
}

int kiln_train_resnet50_main(int argc, char **argv)
{
    r50_opts o;
    kiln_device_spec dev = {.kind = KILN_DEVICE_CPU};
    char err[256];
    int rc = parse(argc, argv, &o), n = 0;
    kiln_resnet *net = NULL;
    float *x = NULL;
    uint8_t *labels = NULL;
    double sum = 0, sum2 = 0, total_s = 0;
    long timed = 0;
    kiln_rng g;

    kiln_imagenet *data = NULL;
    if (rc) return rc == 1 ? 0 : rc;
    if (o.list_variants) {
        kiln_resnet_variant_list(stdout);
        return 0;
    }
    if (o.synthetic == !!o.data_dir) {
        fprintf(stderr, "kiln-train resnet50: %s\n",
                o.synthetic ? "--synthetic and --data_dir: give one of them"
                            : "give --synthetic (random images) or --data_dir=DIR (ImageNet's "
                              "TFRecord files)");
        return 2;
    }
    if (o.data_threads && !o.data_dir) {
        fprintf(stderr, "kiln-train resnet50: --data_threads: synthetic data decodes nothing; "
                        "it goes with --data_dir\n");
        return 2;
    }
    int precision = kiln_precision_parse(o.precision);
    if (precision < 0) {
        fprintf(stderr, "kiln-train resnet50: --precision=%s: expected fp32, tf32, bf16 or fp16\n",
                o.precision);
        return 2;
    }
    if (o.device && kiln_device_parse(o.device, &dev, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln-train resnet50: --device: %s\n", err);
        return 2;
    }
    /* TensorFlow's rule: the first GPU this process sees, when there is one */
    if (!o.device && kiln_cuda_device_count(&n, err, sizeof err) == KILN_OK && n > 0)
        dev = (kiln_device_spec){.kind = KILN_DEVICE_GPU, .index = 0};
    if (dev.kind == KILN_DEVICE_GPU) {
        if (o.threads) {
            /* accepted and not acted on would be worse than refused */
            fprintf(stderr,
                    "kiln-train resnet50: --threads=%ld: the GPU path computes on /gpu:%d and has "
                    "no CPU compute threads to set; drop the flag, or add --device=/cpu:0\n",
                    o.threads, dev.index);
            return 2;
        }
        if (o.data_dir && !(data = open_data(&o))) return 1;
        rc = run_gpu(&o, &dev, precision, data);
        kiln_imagenet_close(data);
        return rc;
    }
    {
        /* the variants are the GPU step's: only base names the CPU path */
        kiln_resnet_variant v;
        const char *source;
        if (kiln_resnet_variant_select(o.variant, NULL, precision, &v, &source, err, sizeof err)) {
            fprintf(stderr, "kiln-train resnet50: %s\n", err);
            return 2;
        }
        if (v.features) {
            fprintf(stderr,
                    "kiln-train resnet50: %s=%s: variants are the GPU step's; the CPU path "
                    "(/cpu:0) has one implementation (base)\n",
                    source, v.name);
            return 2;
        }
        if (o.check) {
            fprintf(stderr, "kiln-train resnet50: --check compares a GPU's step with the CPU "
                            "table's; it has nothing to compare on /cpu:0\n");
            return 2;
        }
    }
    if (precision != KILN_PRECISION_FP32) {
        fprintf(stderr,
                "kiln-train resnet50: --precision=%s: the CPU path is fp32 only (tf32, bf16 and "
                "fp16 run on a GPU, docs/gpu-training.md)\n",
                o.precision);
        return 2;
    }
    if (o.data_dir && o.classes > 256) {
        /* the CPU ops' labels are bytes (ops/ops.h: kiln_xent) */
        fprintf(stderr,
                "kiln-train resnet50: --num_classes=%ld with --data_dir: the CPU path trains at "
                "most 256 classes; ImageNet's 1000 train on a GPU\n",
                o.classes);
        return 2;
    }
    if (o.threads) kiln_set_threads((int)o.threads);
    if (o.data_dir && !(data = open_data(&o))) return 1;

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
    for (size_t i = 0; !data && i < nx; i++)
        x[i] = 2.0f * kiln_rng_uniform(&g) - 1.0f;
    for (long i = 0; i < o.batch; i++)
        labels[i] = (uint8_t)(kiln_rng_next(&g) % (uint64_t)(o.classes < 256 ? o.classes : 256));

    printf("Model:       resnet50 (v1.5, width %ld, %zu parameters)\n", o.width,
           kiln_resnet_param_count(net));
    print_data(&o, data);
    printf("Device:      /cpu:0 (%d threads)\nData format: NHWC\nBatch size:  %ld\n"
           "Image size:  %ld\nPrecision:   fp32\nOptimizer:   sgd (momentum 0.9)\n",
           kiln_get_threads(), o.batch, o.image);
    printf("Step\tImg/sec\ttotal_loss\n");
    fflush(stdout);
    for (long step = -o.warmup; step < o.batches; step++) {
        float loss = 0;
        double t0 = now();
        const float *bx = x;
        if (data) { /* the next decoded batch (the threads decode ahead) */
            const int32_t *by;
            if (kiln_imagenet_next(data, &bx, &by, err, sizeof err)) {
                fprintf(stderr, "kiln-train resnet50: --data_dir: %s\n", err);
                rc = 1;
                goto out;
            }
            for (long i = 0; i < o.batch; i++)
                labels[i] = (uint8_t)by[i]; /* < classes <= 256, checked by the reader */
        }
        if (kiln_resnet_train_step(net, bx, labels, (int)o.batch, (int)o.image, 0.01f, 0.9f, &loss,
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
        if ((step + 1) % (o.display > 0 ? o.display : 1) && step + 1 != o.batches) continue;
        printf("%ld\timages/sec: %.1f +/- %.1f (jitter = %.1f)", step + 1, mean, sd,
               fabs(ips - mean));
        print_reader(data);
        printf("\t%.3f\n", loss);
        fflush(stdout);
    }
    printf("----------------------------------------------------------------\n"
           "total images/sec: %.2f\n"
           "----------------------------------------------------------------\n",
           (double)o.batch * (double)timed / total_s);
    print_reader_total(data, (double)o.batch * (double)timed / total_s);
out:
    kiln_imagenet_close(data);
    kiln_resnet_destroy(net);
    kiln_ffree(x);
    free(labels);
    return rc;
}
