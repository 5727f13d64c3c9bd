/* models/resnet.h - ResNet-50 v1.5 (He et al. 2015, with the stride in the
 * 3x3 conv of each bottleneck: the "v1.5" of NVIDIA's and TensorFlow's
 * reference implementations) on the runtime's ops layer (internal).
 *
 * The runtime's public model API (kiln/train.h) is a sequential stack and
 * cannot express residual connections yet, so this module drives the ops
 * (ops/ops.h) itself: forward, backward and an SGD-momentum step, on the CPU.
 * It is the model `kiln-train resnet50` will run once the runtime has a
 * backend table; the CUDA ops (src/cuda) take the same shapes and layouts.
 *
 * Layout: NHWC input [N, H, W, 3] (H = W; 224 for ImageNet), conv weights
 * HWIO without bias, batch norm after every conv (PyTorch's momentum 0.1 and
 * eps 1e-5), ReLU, 3x3/2 max pool with padding 1, four stages of
 * {3, 4, 6, 3} bottlenecks (widths 64, 128, 256, 512; expansion 4; 1x1
 * stride-2 projections where the shape changes), global average pool, dense
 * [2048, classes] with bias. With width 64 and 1000 classes it has
 * 25,557,032 trainable parameters (PyTorch's count; running statistics are
 * not parameters). `width` scales every stage, so tests can train the same
 * topology at a fraction of the cost. */
#ifndef KILN_RT_RESNET_H
#define KILN_RT_RESNET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/diag.h"

typedef struct kiln_resnet_cfg {
    int width;   /* channels of the first stage's bottleneck: 64 for ResNet-50 */
    int classes; /* 1000 for ImageNet (training labels are uint8, so only the
                  * first 256 classes can be targets on the CPU path) */
    uint64_t seed;
    int use_ref; /* run the _ref ops instead of the fast ones (tests) */
} kiln_resnet_cfg;

typedef struct kiln_resnet kiln_resnet;

/* Builds the model and initialises it (He-uniform convs, BN gamma 1 beta 0,
 * the dense layer uniform in +-1/sqrt(fan_in)). NULL with err on failure. */
kiln_resnet *kiln_resnet_create(const kiln_resnet_cfg *cfg, char *err, size_t errlen);
void kiln_resnet_destroy(kiln_resnet *r);

size_t kiln_resnet_param_count(const kiln_resnet *r);
/* The trainable buffers in a fixed order (stem w, gamma, beta; each block's
 * units; fc w, b) and their gradients from the last train step: for
 * checkpoints, optimizers and gradient checks. Returns the count, or fills
 * buffer i (0 <= i < count) and returns 0; -1 for a bad index. */
int kiln_resnet_buffer(kiln_resnet *r, int i, float **p, const float **g, size_t *n);
/* Spatial size after the stem (conv + pool) and after each stage for an
 * image of `size` pixels square: out[0] = after the max pool, out[1..4] =
 * stages 1..4. Returns -1 when the image is too small (< 32 pixels). */
int kiln_resnet_spatial(int size, int out[5]);

/* Forward pass of n images x[n, size, size, 3] to logits[n, classes].
 * training: batch statistics (and running statistics updated), activations
 * kept for kiln_resnet_backward; otherwise running statistics. */
kiln_err kiln_resnet_forward(kiln_resnet *r, const float *x, int n, int size, float *logits,
                             int training, char *err, size_t errlen);
/* Softmax cross-entropy of the last training forward pass against labels,
 * gradients of every parameter, then SGD with momentum (PyTorch's form).
 * Returns the mean loss before the step in *loss. */
kiln_err kiln_resnet_train_step(kiln_resnet *r, const float *x, const uint8_t *labels, int n,
                                int size, float lr, float momentum, float *loss, char *err,
                                size_t errlen);

/* ---- the same network on a backend table (models/resnet_dev.c) ----
 * Parameters, gradients, momentum and activations in the device's memory;
 * the initial parameters are kiln_resnet_create's for cfg, so a seed gives
 * the same network on every device. Buffers are made for batches of up to
 * max_n images of size x size. Functions that fail return a kiln_err and
 * leave a sentence in kiln_resnet_dev_error. */
struct kiln__backend;
typedef struct kiln_resnet_dev kiln_resnet_dev;

/* precision: a kiln_precision (kiln/train.h): fp32, tf32, bf16 or fp16
 * (mixed: fp32 parameters and batch norm, GEMM/convolution inputs rounded
 * to the format; fp16 with dynamic loss scaling, whose steps wait for
 * their overflow check) */
kiln_resnet_dev *kiln_resnet_dev_create(const kiln_resnet_cfg *cfg, const struct kiln__backend *be,
                                        int index, int precision, int max_n, int size, char *err,
                                        size_t errlen);
void kiln_resnet_dev_destroy(kiln_resnet_dev *r);
const char *kiln_resnet_dev_name(const kiln_resnet_dev *r);
const char *kiln_resnet_dev_error(const kiln_resnet_dev *r);
size_t kiln_resnet_dev_param_count(const kiln_resnet_dev *r);
/* the parameter buffers (kiln_resnet_buffer's order) and buffer i's values */
int kiln_resnet_dev_param_buffers(const kiln_resnet_dev *r);
size_t kiln_resnet_dev_param_size(const kiln_resnet_dev *r, int i);
/* The step's variant (KILN_RV_* of models/resnet_variant.h, parsed there):
 * set before the first step (a captured graph would keep the old one);
 * refused when the backend lacks a choice (the CPU table has no cuDNN). */
kiln_err kiln_resnet_dev_set_variant(kiln_resnet_dev *r, unsigned features);
/* the device's memory in use (every process's), where the backend can say */
kiln_err kiln_resnet_dev_mem_used(kiln_resnet_dev *r, size_t *bytes);
/* n images [n, size, size, 3] and their labels (< classes) become the batch
 * the next steps train on (synchronous upload). */
kiln_err kiln_resnet_dev_load(kiln_resnet_dev *r, const float *x, const int32_t *labels, int n);
/* The same batch checks as load, then n images and labels staged for the
 * next step without waiting for the steps queued before: copied into
 * pinned memory and uploaded on the device's copy stream into the input
 * slot the last queued step does not read, while that step computes; the
 * next kiln_resnet_dev_step waits for the copy (an event) and trains on
 * it. One batch staged at a time (a second before the step is refused, as
 * is a load while one is staged). x and labels are reusable on return. */
kiln_err kiln_resnet_dev_stage(kiln_resnet_dev *r, const float *x, const int32_t *labels, int n);
/* Queues one training step on the loaded (or staged) batch (forward, softmax
 * cross-entropy, backward, SGD momentum in PyTorch's form); does not wait. */
kiln_err kiln_resnet_dev_step(kiln_resnet_dev *r, float lr, float momentum);
/* fp16: the loss scale and the steps skipped for an overflow; 0 otherwise */
float kiln_resnet_dev_loss_scale(const kiln_resnet_dev *r, uint64_t *skipped);
/* Waits for every queued step; *loss (may be NULL): the last one's mean loss. */
kiln_err kiln_resnet_dev_wait(kiln_resnet_dev *r, float *loss);
/* The loaded batch's logits [n, classes] into host memory (training: batch
 * statistics, running statistics updated, as kiln_resnet_forward). */
kiln_err kiln_resnet_dev_forward(kiln_resnet_dev *r, float *logits, int training);
/* One step that waits for the device around every call, then the time per
 * kind of call on f: where a step's time goes. */
kiln_err kiln_resnet_dev_profile(kiln_resnet_dev *r, float lr, float momentum, FILE *f);
/* Parameter buffer i (kiln_resnet_buffer's order, n values) into host memory. */
kiln_err kiln_resnet_dev_param(kiln_resnet_dev *r, int i, float *host, size_t n);

#endif
