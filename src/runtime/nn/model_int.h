/* nn/model_int.h - the sequential model's insides, shared by its CPU path
 * (nn/model.c) and its device path (nn/model_dev.c). Internal. */
#ifndef KILN_RT_MODEL_INT_H
#define KILN_RT_MODEL_INT_H

#include "kiln/train.h"

#include "optim/optim.h"

#include <stdint.h>

typedef struct kiln__devmodel kiln__devmodel; /* nn/model_dev.c */
struct kiln__backend;

typedef enum { L_DENSE, L_CONV, L_MAXPOOL, L_AVGPOOL, L_BN, L_RELU, L_FLATTEN } layer_kind;

struct kiln_layer {
    layer_kind kind;
    int units, k, stride, pad, act;
    float bn_momentum, bn_eps;
    int ih, iw, ic, oh, ow, oc; /* per-example shapes (dense: 1 x 1 x features) */
    float *w, *b, *dw, *db;     /* dense/conv: kernel+bias; bn: gamma+beta */
    float *gw, *gb, gbeta;      /* where backward puts dense/conv gradients: dw/db,
                                   or SGD's momentum slots with beta = momentum */
    size_t nw, nb;
    float *run_mean, *run_var, *mean, *invstd; /* bn */
    int32_t *idx;                              /* maxpool arg-max */
    float *out, *dout;                         /* [B, oh, ow, oc] */
    int owns_out;
    int ob;      /* first of this layer's two entries in the model's obufs, or -1 */
    size_t goff; /* its kernel's (gamma's) offset in the flat gradient buffer */
    int close_b; /* gradient sync: bucket completed by this layer's backward, or -1 */
    char name[32];
};

#define MAX_BUFS 256

struct kiln_model {
    int h, w, c;
    kiln_layer **layers;
    int nl, cap;
    int batch, compiled;
    kiln_optimizer opt;
    uint64_t step;
    kiln_rng rng;
    float *dlogits;
    const float *in; /* input of the current step (borrowed) */
    kiln_buffer bufs[MAX_BUFS];
    char *names[MAX_BUFS];
    size_t nbufs;
    kiln_opt_buf obufs[MAX_BUFS];
    int nobufs;
    kiln_opt_buf sbufs[MAX_BUFS]; /* apply_grads: one bucket's slots, g in the flat buffer */
    size_t grad_count;
    /* the device: NULL = the CPU's fused path (nn/model.c); otherwise every
     * step runs through a backend table (nn/model_dev.c) */
    struct kiln__devmodel *dv;
    int dv_auto;     /* dv is the CPU table, opened by kiln_model_set_precision for bf16/fp16 */
    char device[48]; /* as set: "/cpu:0", "/gpu:1" */
    kiln_precision precision;
    char err[256];
};

/* ---- the device path (nn/model_dev.c) ----
 * Every function returns 0, or -1 with the model's error set. */
/* Opens device `index` of backend `be` for m (before compile). */
int kiln__dev_open(kiln_model *m, const struct kiln__backend *be, int index);
/* After the host compile: device buffers, the initial state uploaded. */
int kiln__dev_compile(kiln_model *m);
void kiln__dev_free(kiln_model *m);
const char *kiln__dev_describe(const kiln_model *m);
/* The pipelined step: stage a batch (its upload queued), launch the oldest
 * staged one, finish the launched one (wait; its loss and correct count).
 * Two batches may be staged at a time, one step launched. */
int kiln__dev_stage(kiln_model *m, const float *x, const uint8_t *y, int n);
int kiln__dev_launch(kiln_model *m);
int kiln__dev_finish(kiln_model *m, float *loss, int *correct);
void kiln__dev_unstage(kiln_model *m);
int kiln__dev_train_step(kiln_model *m, const float *x, const uint8_t *y, int n, float *loss,
                         int *correct);
/* Data parallel: the gradient of n examples (the loss scaled by `scale`)
 * into the host buffer grads (the flat layout); apply: one update with the
 * summed gradients in grads (nn/model.c announces and waits for buckets). */
int kiln__dev_compute_grads(kiln_model *m, const float *x, const uint8_t *y, int n, float scale,
                            float *grads, float *loss, int *correct);
int kiln__dev_apply_grads(kiln_model *m, const float *grads);
int kiln__dev_eval_sums(kiln_model *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                        size_t *correct);
int kiln__dev_predict(kiln_model *m, const float *x, int n, float *out);
/* Host copies of the state: refresh them from the device when a step
 * changed it; mark them handed out (the next step uploads them first). */
int kiln__dev_pull(kiln_model *m);
/* fp16's loss scale and the steps it skipped; 0 where nothing is scaled */
float kiln__dev_loss_scale(const kiln_model *m, uint64_t *skipped);
/* the scaler whole (fp16 only): 0, or -1 when the model does not scale */
int kiln__dev_get_scaler(const kiln_model *m, kiln_loss_scale_state *st);
int kiln__dev_set_scaler(kiln_model *m, const kiln_loss_scale_state *st);
void kiln__dev_exposed(kiln_model *m);

#endif
