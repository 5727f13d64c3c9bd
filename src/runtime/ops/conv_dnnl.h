/* ops/conv_dnnl.h - conv2d through oneDNN's convolution primitives (internal).
 *
 * conv.c asks kiln__conv_dnnl_get for the primitives of one task's share of
 * a batch (s->n = that task's images); NULL means "take the im2col path"
 * (no oneDNN in this build, KILN_CONV=im2col, or oneDNN has no kernel of its
 * own for the shape on this CPU: see conv_dnnl.c). The returned object is
 * owned by a process-wide cache and stays valid for the life of the process
 * (kiln__conv_dnnl_set_policy aside). The run functions work on the calling
 * thread only (one OpenMP thread, scratch slots 0 and 1 of kiln__scratch(tid))
 * and return 0, or -1 if oneDNN failed (the caller then uses im2col). */
#ifndef KILN_RT_OPS_CONV_DNNL_H
#define KILN_RT_OPS_CONV_DNNL_H

#include "ops/ops.h"

typedef struct kiln__conv_dnnl kiln__conv_dnnl;

/* what the call needs: */
#define KILN__CONV_FWD   0 /* forward */
#define KILN__CONV_BWD_W 1 /* weight gradient only */
#define KILN__CONV_BWD   2 /* weight and input gradients */

const kiln__conv_dnnl *kiln__conv_dnnl_get(const kiln_conv_shape *s, int has_bias, int relu,
                                           int need);
/* y = act(conv(x, w) + b), x/y NHWC, w HWIO */
int kiln__conv_dnnl_fwd(const kiln__conv_dnnl *e, int tid, const float *x, const float *w,
                        const float *b, float *y);
/* dw (HWIO) = the weight gradient, OVERWRITTEN; dy is the pre-activation gradient */
int kiln__conv_dnnl_bwd_weights(const kiln__conv_dnnl *e, int tid, const float *x, const float *dy,
                                float *dw);
/* dx = the input gradient, OVERWRITTEN */
int kiln__conv_dnnl_bwd_data(const kiln__conv_dnnl *e, int tid, const float *w, const float *dy,
                             float *dx);

/* 0: im2col only; 1: oneDNN where it has a kernel of its own (the default);
 * 2: oneDNN wherever it accepts the shape. Overrides KILN_CONV. For tests and
 * benchmarks: call it while no convolution runs. */
void kiln__conv_dnnl_set_policy(int policy);

#endif
