/* kiln/train.h - build, train and evaluate models with the kiln runtime, in
 * the spirit of Keras: make a model for an input shape, add layers, compile
 * with an optimizer, loss and batch size, then fit and evaluate.
 *
 *     kiln_model *m = kiln_model_new(28, 28, 1);
 *     kiln_model_add(m, kiln_conv2d(32, 5, 1, KILN_SAME, KILN_RELU));
 *     kiln_model_add(m, kiln_maxpool2d(2, 2));
 *     kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
 *     kiln_model_compile(m, kiln_sgd(0.01f, 0.9f), KILN_SOFTMAX_XENT, 128, seed);
 *     kiln_model_fit(m, &train, &opts, &callbacks);
 *
 * Ownership: kiln_model_add takes the layer (also when it fails); the model
 * frees its layers in kiln_model_free. Every function that can fail returns 0
 * on success and -1 on failure, with a sentence in kiln_model_error(m).
 *
 * Signals: oneDNN's JIT GEMM, which serves the training step when libkiln is
 * built with it, keeps data below its stack pointer, so an asynchronous
 * signal handler that runs on a thread inside a kiln call can corrupt that
 * thread's work. A program with handlers should block its signals in the
 * threads that call kiln (before kiln starts its own threads, which inherit
 * the mask) and take them on a thread of its own with sigwait, as kiln-train
 * does (src/runtime/tools/signals.c).
 *
 * Determinism: weights are initialised from `seed` with kiln's own RNG
 * (kiln/tensor.h) and every kernel has a fixed reduction order for a given
 * thread count (kiln_set_threads), so two runs with the same seed, data
 * order and thread count produce bit-identical parameters. */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layers ---- */
typedef enum kiln_activation { KILN_LINEAR = 0, KILN_RELU = 1 } kiln_activation;
#define KILN_SAME  (-1) /* conv padding that keeps H and W (odd kernels, stride 1) */
#define KILN_VALID 0

typedef struct kiln_layer kiln_layer;
/* Dense on the flattened input (NHWC order), weights [in, units]. */
kiln_layer *kiln_dense(int units, kiln_activation act);
/* Square kernel, stride, padding in pixels or KILN_SAME; weights [k, k, C, filters]. */
kiln_layer *kiln_conv2d(int filters, int kernel, int stride, int padding, kiln_activation act);
kiln_layer *kiln_maxpool2d(int size, int stride);
kiln_layer *kiln_avgpool2d(int size, int stride);
kiln_layer *kiln_batchnorm(float momentum, float eps); /* per channel (last dim) */
kiln_layer *kiln_relu(void);
kiln_layer *kiln_flatten(void); /* a no-op in NHWC; kept for readable model code */

/* ---- model ---- */
typedef struct kiln_model kiln_model;

typedef enum kiln_opt_kind { KILN_OPT_SGD = 0, KILN_OPT_ADAM = 1 } kiln_opt_kind;
typedef struct kiln_optimizer {
    kiln_opt_kind kind;
    float lr;
    float momentum;          /* SGD */
    float beta1, beta2, eps; /* Adam */
} kiln_optimizer;
kiln_optimizer kiln_sgd(float lr, float momentum);
kiln_optimizer kiln_adam(float lr); /* betas 0.9, 0.999, eps 1e-8 (PyTorch defaults) */

typedef enum kiln_loss { KILN_SOFTMAX_XENT = 0 } kiln_loss;

/* Input shape of one example, NHWC without N (an MLP on 784 pixels may use
 * 28, 28, 1 or 1, 1, 784). NULL on allocation failure. */
kiln_model *kiln_model_new(int h, int w, int c);
void kiln_model_free(kiln_model *m);
int kiln_model_add(kiln_model *m, kiln_layer *layer);
/* Infers shapes, allocates every buffer for batches of up to batch_size,
 * and initialises weights from seed (PyTorch's default: U(-1/sqrt(fan_in),
 * +1/sqrt(fan_in)) for weights and biases). The last layer's outputs are
 * the class logits. */
int kiln_model_compile(kiln_model *m, kiln_optimizer opt, kiln_loss loss, int batch_size,
                       uint64_t seed);
const char *kiln_model_error(const kiln_model *m);
void kiln_model_summary(const kiln_model *m, FILE *f);
int kiln_model_batch_size(const kiln_model *m);
size_t kiln_model_input_dim(const kiln_model *m);
int kiln_model_num_classes(const kiln_model *m);
/* Multiply-adds of one example's forward pass (for FLOP accounting). */
double kiln_model_forward_macs(const kiln_model *m);
/* FLOPs of one example's training step in the GEMM-shaped layers: forward,
 * weight gradient and input gradient (none for the first such layer). */
double kiln_model_train_flops(const kiln_model *m);

/* ---- devices and precision ----
 * A model computes on the CPU (the default) or on one GPU, named as
 * TensorFlow names devices: "/cpu:0", "/gpu:N" (also "gpu:N",
 * "/device:GPU:N"), N counting the GPUs this process sees, after
 * CUDA_VISIBLE_DEVICES. Choose before compile; a device that does not exist,
 * or a GPU this build or machine cannot drive, is an error naming it (never
 * a quiet CPU run).
 *
 * On a GPU the parameters, gradients, optimizer state and activations live
 * in the GPU's memory, and a training step runs there without a host round
 * trip per layer (a captured CUDA graph once the step's shapes are steady).
 * kiln_model_buffer's data are then host copies: brought up to date when
 * they are asked for (kiln_model_sync_host says whether that worked), and
 * written back to the device before the next step, so a checkpoint restored
 * into them takes effect. Checkpoints have the same format on every device. */
int kiln_model_set_device(kiln_model *m, const char *device);
/* The device as set ("/cpu:0" by default) */
const char *kiln_model_device(const kiln_model *m);
/* What the device is: "CPU", "NVIDIA H100 80GB HBM3" (after compile). */
const char *kiln_model_device_name(const kiln_model *m);

typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0, /* fp32 arithmetic throughout (TF32 off on GPUs) */
    KILN_PRECISION_TF32 = 1, /* fp32 storage; GEMMs and convolutions on TF32 tensor cores */
    KILN_PRECISION_BF16 = 2, /* mixed: bf16 compute, fp32 master weights */
    KILN_PRECISION_FP16 = 3, /* mixed: fp16 compute, fp32 master weights, loss scaling */
} kiln_precision;
/* "fp32", "tf32", "bf16", "fp16"; -1 for anything else */
int kiln_precision_parse(const char *s);
const char *kiln_precision_name(kiln_precision p);
/* Before compile, after kiln_model_set_device. TF32 needs a GPU (the CPU
 * has no TF32 arithmetic). bf16 and fp16 are mixed precision: fp32 master
 * weights and optimizer state (checkpoints unchanged), every GEMM and
 * convolution on inputs rounded to the format with fp32 sums, fp16 with
 * dynamic loss scaling. On a GPU they run on its tensor cores; on /cpu:0
 * the model goes through the CPU's backend table, which rounds exactly the
 * same way (the reference: slower than the CPU's fp32 path). See
 * docs/gpu-training.md. */
int kiln_model_set_precision(kiln_model *m, kiln_precision p);
/* fp16: the current loss scale (65536 at first, halved on each step with
 * an inf/NaN gradient, which is skipped; doubled after 2000 finite steps in
 * a row) and, in *skipped (may be NULL), how many steps were skipped. 0
 * for every other precision. */
float kiln_model_loss_scale(const kiln_model *m, uint64_t *skipped);
/* fp16's loss scaler whole, as a checkpoint keeps it: a run resumed with it
 * scales (and so rounds) as the uninterrupted one would have. */
typedef struct kiln_loss_scale_state {
    float scale;         /* the current loss scale */
    int growth_interval; /* finite steps in a row before it doubles (2000) */
    int good_steps;      /* finite steps since it last changed */
    uint64_t skipped;    /* steps skipped for an inf/NaN gradient */
} kiln_loss_scale_state;
/* 0, or -1 (kiln_model_error says why) when the model is not compiled in
 * fp16. set: scale finite and within [2^-24, 2^24], growth_interval >= 1,
 * 0 <= good_steps < growth_interval. */
int kiln_model_get_loss_scale_state(const kiln_model *m, kiln_loss_scale_state *st);
int kiln_model_set_loss_scale_state(kiln_model *m, const kiln_loss_scale_state *st);
/* Brings the host copies of the model's state (kiln_model_buffer) up to
 * date with the device; a no-op on the CPU. 0, or -1 with the device's
 * error in kiln_model_error. */
int kiln_model_sync_host(kiln_model *m);

/* One optimizer step on n <= batch_size examples (x: n * input_dim floats,
 * y: n labels). loss (mean over n) and correct may be NULL. */
int kiln_model_train_step(kiln_model *m, const float *x, const uint8_t *y, int n, float *loss,
                          int *correct);
/* Inference-mode loss and accuracy over n examples, in batches. */
int kiln_model_evaluate(kiln_model *m, const float *x, const uint8_t *y, size_t n, float *loss,
                        float *accuracy);
/* Logits of n <= batch_size examples (n * num_classes floats into out). */
int kiln_model_predict(kiln_model *m, const float *x, int n, float *out);

/* ---- state, for checkpoints ----
 * Everything that a bit-exact resume needs is enumerable by name: parameters
 * ("conv2d_0/kernel", "dense_3/bias", ...), optimizer slots
 * ("<param>/momentum", "<param>/adam_m", "<param>/adam_v"), batch-norm
 * running statistics, plus the optimizer step count and the RNG. */
typedef struct kiln_buffer {
    const char *name;
    int is_param; /* 1 = trainable parameter, 0 = other state */
    int ndim;
    int shape[KILN_MAX_DIMS];
    size_t size;
    float *data; /* owned by the model; restore by writing into it */
} kiln_buffer;
size_t kiln_model_num_buffers(const kiln_model *m);
kiln_buffer kiln_model_buffer(const kiln_model *m, size_t i);
/* Changes the learning rate from the next step on (for schedules). */
void kiln_model_set_lr(kiln_model *m, float lr);
float kiln_model_lr(const kiln_model *m);
/* The optimizer the model was compiled with (lr: the current one). */
kiln_optimizer kiln_model_optimizer(const kiln_model *m);
/* Optimizer steps taken so far (Adam's t); set it when restoring. */
uint64_t kiln_model_step(const kiln_model *m);
void kiln_model_set_step(kiln_model *m, uint64_t step);
/* The model's RNG (seeded by compile; used for initialisation). */
kiln_rng *kiln_model_rng(kiln_model *m);

/* ---- gradient sync, for data-parallel training ----
 * The single-replica kiln_model_train_step fuses the optimizer into the
 * backward pass (SGD's momentum update happens inside the weight-gradient
 * GEMM), so a gradient never exists on its own there. Data parallelism needs
 * the gradient itself, summed over replicas before the update, so it takes
 * two calls instead:
 *
 *   kiln_model_compute_grads  forward + loss + backward, writing this
 *                             replica's gradient (times `scale`) into ONE flat
 *                             caller-owned buffer; bucket_ready(b) is called
 *                             as soon as bucket b is final, during the backward
 *                             pass, so the caller can start summing it across
 *                             replicas (kiln_comm_iallreduce_sum_f32) while
 *                             the layers below are still being differentiated;
 *   kiln_model_apply_grads    for each bucket in order: bucket_wait(b), then
 *                             the optimizer step (SGD momentum or Adam, the
 *                             same per-element math as train_step) on the
 *                             parameters of that bucket with the gradients now
 *                             in the buffer.
 *
 * Flat layout: every trainable parameter's gradient, layers in REVERSE order
 * (the order the backward pass finishes them), and within a layer kernel then
 * bias (batch norm: gamma then beta). kiln_model_grad_count floats, followed
 * by `extra` floats that belong to the caller (a stop flag, loss sums: they
 * travel in the last bucket, so they cost no extra all-reduce; the model never
 * reads or writes them).
 *
 * Buckets: layer-granular, in that same order. A bucket closes once it holds
 * at least bucket_bytes of gradients (0: one bucket for the whole model), and
 * the last one also covers the extra floats. Bucket b is
 * grads[off_b, off_b + count_b), with off_0 = 0 and contiguous buckets.
 *
 * Averaging: with n_r examples on replica r and N = sum n_r in the global
 * batch, pass scale = n_r / N; the SUM over replicas of the scaled gradients
 * is then the gradient of the global batch's mean loss, what one process
 * training on the whole batch would compute (up to the summation order of
 * floats). A replica with n = 0 (an epoch's last, short batch) contributes
 * zeros and still calls every bucket_ready.
 *
 * Equivalence: with 1 replica, scale 1 and a sum that is the identity, the
 * parameters after compute + apply equal those of kiln_model_train_step:
 * bit-identical for Adam; for SGD within rounding of the fused update (the
 * fused GEMM adds momentum*v inside the kernel; tests/runtime/test_gradsync.c
 * states the tolerance). Batch-norm moving statistics are per replica (they
 * are state, not parameters, and only the chief's are checkpointed).
 * This API does not depend on kiln's collectives: the caller brings them. */
typedef struct kiln_grad_sync {
    float *grads;        /* kiln_model_grad_count(m) + extra floats, caller-owned
                          * (e.g. kiln_comm_alloc_f32), must stay valid across
                          * compute and apply */
    size_t extra;        /* caller floats after the gradients (in the last bucket) */
    size_t bucket_bytes; /* bucket size target; 0 = a single bucket */
    void *ud;
    /* Bucket b (0-based; nbuckets from kiln_model_grad_buckets) is final:
     * data = grads + offset, count floats. Nonzero return fails the step. */
    int (*bucket_ready)(void *ud, int b, float *data, size_t count);
    /* Called by apply before bucket b's gradients are read (may be NULL:
     * nothing to wait for). Nonzero return fails the step. */
    int (*bucket_wait)(void *ud, int b);
    /* Optional: when set, kiln_model_apply_grads calls it in place of its
     * own update (a sharded optimizer: the strategy's ZeRO-1 step); nonzero
     * return fails the step. */
    int (*apply)(void *ud, kiln_model *m);
} kiln_grad_sync;

/* Floats of gradient in the flat buffer (all trainable parameters). */
size_t kiln_model_grad_count(const kiln_model *m);
/* The bucket plan for bucket_bytes and extra: returns the number of buckets
 * and, when offsets/counts are not NULL, fills up to max entries of each. */
int kiln_model_grad_buckets(const kiln_model *m, size_t bucket_bytes, size_t extra, size_t *offsets,
                            size_t *counts, int max);
/* Forward, loss and backward on n (0 <= n <= batch_size) examples; writes
 * scale * gradient into s->grads and calls s->bucket_ready for every bucket,
 * in order. loss (local mean) and correct may be NULL. Does not change the
 * parameters or the step count. */
int kiln_model_compute_grads(kiln_model *m, const float *x, const uint8_t *y, int n, float scale,
                             const kiln_grad_sync *s, float *loss, int *correct);
/* One optimizer step with the gradients in s->grads (after the caller's sum),
 * bucket by bucket, each after s->bucket_wait(b). Counts the step. */
int kiln_model_apply_grads(kiln_model *m, const kiln_grad_sync *s);

/* ---- data and fit ---- */
typedef struct kiln_data {
    const float *x;   /* n * dim floats */
    const uint8_t *y; /* n labels */
    size_t n, dim;
} kiln_data;

/* Fashion-MNIST (or MNIST) split from dir (NULL = Debian's
 * /usr/share/datasets/fashion-mnist), train = 1 or the 10k test set.
 * Pixels scaled to [0, 1]. Free with kiln_data_free. On failure returns -1
 * and writes a sentence into err (errlen bytes). */
int kiln_load_fashion_mnist(const char *dir, int train, kiln_data *out, char *err, size_t errlen);
void kiln_data_free(kiln_data *d);

typedef struct kiln_fit_info {
    uint64_t epoch; /* 0-based */
    uint64_t step;  /* step within the epoch just finished (0-based) */
    uint64_t steps_per_epoch;
    uint64_t global_step;   /* optimizer steps so far, this one included */
    float loss;             /* this batch's mean loss */
    int batch;              /* examples in this batch */
    int correct;            /* of them classified right */
    double samples_per_sec; /* over the epoch so far */
    int last_in_epoch;
} kiln_fit_info;

/* Callbacks return 0 to go on, nonzero to stop training (fit returns 1). */
typedef struct kiln_callbacks {
    void *ud;
    int (*on_epoch_begin)(void *ud, kiln_model *m, uint64_t epoch, uint64_t steps_per_epoch);
    int (*on_step_end)(void *ud, kiln_model *m, const kiln_fit_info *info);
    int (*on_epoch_end)(void *ud, kiln_model *m, const kiln_fit_info *info);
} kiln_callbacks;

typedef struct kiln_fit_opts {
    int epochs;             /* train until this many epochs are complete */
    uint64_t shuffle_seed;  /* the order of epoch e is a function of (seed, e) */
    uint64_t initial_epoch; /* resume point: first epoch ... */
    uint64_t initial_step;  /* ... and first step within it */
    /* Data parallelism: replica `rank` of `world` (0 or 1: one replica). The
     * compiled batch size is then the per-replica batch, the global batch is
     * world * batch_size, and each replica trains on its slice of every
     * global batch (same seeded order everywhere; see kiln_shard_range).
     * Steps go through kiln_model_compute_grads / apply_grads with `sync`
     * (required when world > 1; scale = local / global examples), and the
     * kiln_fit_info of a step describes this replica's slice (loss, batch,
     * correct); steps_per_epoch counts global batches. sync NULL and world
     * <= 1: the single-replica fused step. */
    uint32_t rank, world;
    const kiln_grad_sync *sync;
} kiln_fit_opts;

/* Trains on `data` in batches of the compiled batch size, shuffled per epoch.
 * Batches are assembled on a background thread when a core is spare, else on
 * kiln's own thread pool between steps (a prefetch thread with no core of its
 * own only steals time from the compute threads); both give the same batches.
 * Returns 0 when all epochs are done, 1 when a callback stopped it, -1 on error. */
int kiln_model_fit(kiln_model *m, const kiln_data *data, const kiln_fit_opts *opts,
                   const kiln_callbacks *cb);

#ifdef __cplusplus
}
#endif
#endif
