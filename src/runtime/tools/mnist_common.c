/* tools/mnist_common.c - what every `kiln-train mnist` role shares: the
 * flag syntax, the built-in networks, the input standardisation and JSON
 * string output. One copy, so that a parameter-server replica, a
 * multi_worker_mirrored replica and a single run build the same model from
 * the same flags (the ps tasks take their initial values from it), and
 * writes TensorBoard events to the same places. */
#include "tools/tool.h"

#include "summary/summary.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kt_flag(const char *arg, const char *name, const char **val, int *used, const char *next)
{
    if (strncmp(arg, "--", 2) != 0) return 0;
    arg += 2;
    size_t i = 0;
    for (; name[i]; i++)
        if ((arg[i] == '-' ? '_' : arg[i]) != name[i]) return 0;
    if (arg[i] == '=') {
        *val = arg + i + 1;
        *used = 1;
        return 1;
    }
    if (arg[i] == '\0' && next) {
        *val = next;
        *used = 2;
        return 1;
    }
    return 0;
}

int kt_parse_int(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *v == '\0' || *end || x < lo || x > hi) {
        fprintf(stderr, "kiln-train: --%s=%s: expected an integer in [%ld, %ld]\n", flag, v, lo,
                hi);
        return -1;
    }
    *out = x;
    return 0;
}

void kt_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Fashion-MNIST's pixel mean and standard deviation over the training set:
 * standardised inputs let SGD use one learning rate for every layer (the
 * PyTorch peer in bench/ applies the same transform). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD  0.3530f

void kt_fmnist_standardise(kiln_data *d)
{
    float *x = (float *)d->x;
    for (size_t i = 0; i < d->n * d->dim; i++)
        x[i] = (x[i] - FMNIST_MEAN) / FMNIST_STD;
}

kiln_model *kt_mnist_model(const char *model, const char *optimizer, double lr, double momentum,
                           int batch, uint64_t seed)
{
    return kt_mnist_model_on(model, optimizer, lr, momentum, batch, seed, NULL, 0, 0, NULL, 0);
}

kiln_model *kt_mnist_model_on(const char *model, const char *optimizer, double lr, double momentum,
                              int batch, uint64_t seed, const char *device, int precision,
                              int quiet, char *why, size_t whylen)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    if (!m) return NULL;
    int bad = 0;
    if ((device && kiln_model_set_device(m, device)) ||
        kiln_model_set_precision(m, (kiln_precision)precision)) {
        if (quiet && why)
            snprintf(why, whylen, "%s", kiln_model_error(m));
        else
            fprintf(stderr, "kiln-train: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    if (strcmp(model, "cnn") == 0) {
        /* TensorFlow's MNIST tutorial network */
        bad |= kiln_model_add(m, kiln_conv2d(32, 5, 1, KILN_SAME, KILN_RELU));
        bad |= kiln_model_add(m, kiln_maxpool2d(2, 2));
        bad |= kiln_model_add(m, kiln_conv2d(64, 5, 1, KILN_SAME, KILN_RELU));
        bad |= kiln_model_add(m, kiln_maxpool2d(2, 2));
        bad |= kiln_model_add(m, kiln_flatten());
        bad |= kiln_model_add(m, kiln_dense(1024, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    } else {
        bad |= kiln_model_add(m, kiln_flatten());
        bad |= kiln_model_add(m, kiln_dense(512, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(512, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    }
    kiln_optimizer opt = strcmp(optimizer, "adam") == 0 ? kiln_adam((float)lr)
                                                        : kiln_sgd((float)lr, (float)momentum);
    if (bad || kiln_model_compile(m, opt, KILN_SOFTMAX_XENT, batch, seed)) {
        if (quiet && why)
            snprintf(why, whylen, "building the model: %s", kiln_model_error(m));
        else
            fprintf(stderr, "kiln-train: building the model: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

int kt_open_summaries(const char *model_dir, const char *train_sub, struct kiln_summary_writer **sw,
                      struct kiln_summary_writer **swe)
{
    char path[4096];
    kiln_errmsg em;
    snprintf(path, sizeof(path), "%s/%s", model_dir, train_sub);
    if (kiln_summary_open(path, sw, &em) != KILN_OK) goto fail;
    if (swe) {
        snprintf(path, sizeof(path), "%s/eval", model_dir);
        if (kiln_summary_open(path, swe, &em) != KILN_OK) goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "kiln-train: TensorBoard events: %s\n", em.msg);
    return -1;
}
