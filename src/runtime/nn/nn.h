/* nn/nn.h - internal hooks between the parts of the nn module. */
#ifndef KILN_RT_NN_H
#define KILN_RT_NN_H

#include "kiln/train.h"

/* Sets the model's error sentence (for kiln_model_error); returns -1. */
int kiln__model_fail(kiln_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How kiln_model_fit assembles batches: -1 (default) picks by cores, 0 the
 * prefetch thread, 1 a gather on the pool (nn/fit.c). For tests. */
extern int kiln__fit_batches_on_pool;

/* The sharded optimizer (ZeRO-1, strategy/allreduce.c), on the flat
 * gradient layout of kiln_grad_sync:
 * one optimizer step (the step counted) on [lo, hi) of the layout only,
 * the gradient summed on the fly from srcs[0..nsrc) (every replica's flat
 * buffer, in rank order: optim.h's kiln_opt_shard), the updated parameters
 * also stored to pflat[lo..hi) when pflat is not NULL. ref: the plain
 * reference loops instead of the thread pool's (tests). */
int kiln__model_apply_shard(kiln_model *m, const float *const *srcs, int nsrc, size_t lo, size_t hi,
                            float *pflat, int ref);
/* Copies [lo, hi) of the layout between the model and flat (to_flat 1:
 * model to flat): which 0 = the parameters, 1 = the first optimizer slot
 * (SGD's momentum, Adam's m), 2 = the second (Adam's v; nothing for SGD). */
void kiln__model_flat_copy(kiln_model *m, int which, float *flat, size_t lo, size_t hi,
                           int to_flat);
/* 1 when m's steps run through a backend table (nn/model_dev.c: a GPU, or
 * the CPU table that bf16 and fp16 train on), not the CPU's fused path. */
int kiln__model_on_device(const kiln_model *m);
/* Optimizer slots per parameter: 1 (SGD) or 2 (Adam). */
int kiln__model_slots(const kiln_model *m);
/* kiln_model_evaluate's sums over x[0..n): the loss summed over the examples
 * (each batch's mean times its size) and the count of correct arg-maxes, for
 * replicas that each evaluate a part of one set and add the parts. */
int kiln__model_evaluate_sums(kiln_model *m, const float *x, const uint8_t *y, size_t n,
                              double *loss_sum, size_t *correct);
/* 1 when the model keeps state outside its parameters that differs between
 * data-parallel replicas (batch norm's moving statistics, from each replica's
 * own batches): then one replica's evaluation is not another's. */
int kiln__model_replica_state(const kiln_model *m);

#endif
