/* tests/runtime/small_models.h - the small Fashion-MNIST models of the
 * data-parallel tests (test_gradsync, test_zero), and the comparison of two
 * such models' trainable parameters. */
#ifndef KILN_SMALL_MODELS_H
#define KILN_SMALL_MODELS_H

#include "kiln/train.h"
#include "rt_test.h"

#include <stdio.h>

/* What small_model builds on 28x28x1 inputs, by its shape's flags:
 *  SMALL_MLP: flatten, dense 64 relu, dense 32 relu, dense 10;
 *  SMALL_CNN: conv 4 3x3 same relu, [SMALL_BN: batch norm], max pool 2,
 *  [SMALL_CONV2: conv 8 3x3 valid, relu, average pool 2], flatten, dense 10. */
enum { SMALL_MLP = 0, SMALL_CNN = 1, SMALL_BN = 2, SMALL_CONV2 = 4 };

/* The layers of `shape`, not compiled yet (a device may still be set). */
static inline kiln_model *small_model_layers(int shape)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    if (shape & SMALL_CNN) {
        kiln_model_add(m, kiln_conv2d(4, 3, 1, KILN_SAME, KILN_RELU));
        if (shape & SMALL_BN) kiln_model_add(m, kiln_batchnorm(0.9f, 1e-5f));
        kiln_model_add(m, kiln_maxpool2d(2, 2));
        if (shape & SMALL_CONV2) {
            kiln_model_add(m, kiln_conv2d(8, 3, 1, KILN_VALID, KILN_LINEAR));
            kiln_model_add(m, kiln_relu());
            kiln_model_add(m, kiln_avgpool2d(2, 2));
        }
        kiln_model_add(m, kiln_flatten());
        kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    } else {
        kiln_model_add(m, kiln_flatten());
        kiln_model_add(m, kiln_dense(64, KILN_RELU));
        kiln_model_add(m, kiln_dense(32, KILN_RELU));
        kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    }
    return m;
}

/* The model compiled with opt, softmax cross-entropy, batch and seed 7; NULL
 * (the reason on stderr) where compile fails. */
static inline kiln_model *small_model(int shape, kiln_optimizer opt, int batch)
{
    kiln_model *m = small_model_layers(shape);
    if (kiln_model_compile(m, opt, KILN_SOFTMAX_XENT, batch, 7)) {
        fprintf(stderr, "compile: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* the largest relative difference over all trainable parameters; *identical:
 * whether they are bit-identical */
static inline double param_diff(kiln_model *a, kiln_model *b, int *identical)
{
    double worst = 0.0;
    *identical = 1;
    for (size_t i = 0; i < kiln_model_num_buffers(a); i++) {
        kiln_buffer x = kiln_model_buffer(a, i), y = kiln_model_buffer(b, i);
        if (!x.is_param) continue;
        if (!bits_equal(x.data, y.data, x.size)) *identical = 0;
        double e = rel_err(x.data, y.data, x.size);
        if (e > worst) worst = e;
    }
    return worst;
}

static inline int params_identical(kiln_model *a, kiln_model *b)
{
    int identical;
    param_diff(a, b, &identical);
    return identical;
}

#endif
