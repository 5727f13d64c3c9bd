/* cuda/graph_plan.h - the operation graph the cudnn-graph variant is to
 * hand cuDNN's backend API for one ResNet unit: the previous batch norm's
 * apply and ReLU fused into this convolution's input (a prologue), and the
 * statistics of its output for this unit's batch norm (an epilogue):
 *
 *   A1 = X * SCALE, A2 = A1 + BIAS, A3 = relu(A2)   (pointwise, virtual)
 *   Y = conv(A3, W)                                 (convolution forward)
 *   SUM, SQSUM = genstats(Y)                        (per output channel)
 *
 * which is the training-time form of "convolution + scale/bias + ReLU":
 * batch norm's scale and bias (gamma * invstd, beta - mean * scale) are
 * known only once the previous convolution's statistics are, so they
 * enter as the next convolution's prologue. A unit whose input is not a
 * batch norm's output (the stem, a block's first units, which read the
 * block's input) has no prologue (A3 is X).
 *
 * Plain C with no CUDA in it: the tensors (uids, logical dims in cuDNN's
 * NCHW order, strides that make the data NHWC, virtual or not) and the
 * operations with their operands, so that the construction is checked
 * without a GPU against this plan (tests/cuda/test_conv_plan.c). The
 * descriptors built from it, and the variant itself, are not built yet
 * (issue 45): kiln_resnet_variant_parse refuses cudnn-graph by name. */
#ifndef KILN_CUDA_GRAPH_PLAN_H
#define KILN_CUDA_GRAPH_PLAN_H

#include "ops/ops.h" /* kiln_conv_shape */

#include <stdint.h>

enum {
    KILN_CU_GT_X,     /* the input [n, c, h, w], NHWC in memory */
    KILN_CU_GT_SCALE, /* [1, c, 1, 1]: the previous batch norm's gamma * invstd */
    KILN_CU_GT_BIAS,  /* [1, c, 1, 1]: beta - mean * scale */
    KILN_CU_GT_A1,    /* virtual: X * SCALE */
    KILN_CU_GT_A2,    /* virtual: A1 + BIAS */
    KILN_CU_GT_A3,    /* virtual: relu(A2), the convolution's input */
    KILN_CU_GT_W,     /* [k, c, r, s], KRSC in memory (dnn.c's copy of HWIO) */
    KILN_CU_GT_Y,     /* [n, k, oh, ow], NHWC in memory */
    KILN_CU_GT_SUM,   /* [1, k, 1, 1] fp32: sum of Y per channel */
    KILN_CU_GT_SQSUM, /* [1, k, 1, 1] fp32: sum of Y^2 per channel */
    KILN_CU_GT_N
};

enum { KILN_CU_GO_MUL, KILN_CU_GO_ADD, KILN_CU_GO_RELU, KILN_CU_GO_CONV, KILN_CU_GO_GENSTATS };

typedef struct kiln_cu_gtensor {
    int used;
    int64_t uid; /* unique, non-zero: cuDNN's variant pack names data by it */
    int64_t dim[4], stride[4];
    int is_virtual; /* never in memory: passed between fused operations */
} kiln_cu_gtensor;

typedef struct kiln_cu_gop {
    int kind;   /* KILN_CU_GO_* */
    int in[2];  /* tensors (KILN_CU_GT_*); -1: none */
    int out[2]; /* tensors; -1: none */
} kiln_cu_gop;

typedef struct kiln_cu_graph_plan {
    kiln_cu_gtensor t[KILN_CU_GT_N];
    kiln_cu_gop op[5];
    int nop;
    int prologue; /* the scale/bias/ReLU operations are there */
    int64_t pad[2], stride[2], dilation[2];
} kiln_cu_graph_plan;

/* dims [a, b, c, d] (NCHW order) with channels-last strides */
static inline void kiln_cu__gt_nhwc(kiln_cu_gtensor *t, int64_t uid, int64_t n, int64_t c,
                                    int64_t h, int64_t w, int is_virtual)
{
    *t = (kiln_cu_gtensor){.used = 1,
                           .uid = uid,
                           .dim = {n, c, h, w},
                           .stride = {h * w * c, 1, w * c, c},
                           .is_virtual = is_virtual};
}

/* Where cuDNN's runtime-fusion engines are asked for (kiln's rule,
 * provisional until a lent GPU's sweep says which shapes they take): both
 * channel counts multiples of 8, as its fused kernels' vector loads want;
 * another unit runs the unfused path. */
static inline int kiln_cu__graph_applies(const kiln_conv_shape *s)
{
    return s->c % 8 == 0 && s->oc % 8 == 0;
}

/* s's unit, with the prologue when prologue is 1. 0, or -1 for a shape the
 * fusion does not take (kiln_cu__graph_applies). */
static inline int kiln_cu__graph_plan(const kiln_conv_shape *s, int prologue, kiln_cu_graph_plan *p)
{
    int64_t n = s->n, c = s->c, h = s->h, w = s->w, k = s->oc;
    *p = (kiln_cu_graph_plan){.prologue = prologue != 0,
                              .pad = {s->pad, s->pad},
                              .stride = {s->stride, s->stride},
                              .dilation = {1, 1}};
    if (!kiln_cu__graph_applies(s)) return -1;
    kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_X], 1 + KILN_CU_GT_X, n, c, h, w, 0);
    kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_Y], 1 + KILN_CU_GT_Y, n, k, s->oh, s->ow, 0);
    kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_SUM], 1 + KILN_CU_GT_SUM, 1, k, 1, 1, 0);
    kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_SQSUM], 1 + KILN_CU_GT_SQSUM, 1, k, 1, 1, 0);
    p->t[KILN_CU_GT_W] = (kiln_cu_gtensor){.used = 1,
                                           .uid = 1 + KILN_CU_GT_W,
                                           .dim = {k, c, s->kh, s->kw},
                                           .stride = {s->kh * s->kw * c, 1, s->kw * c, c}};
    int conv_in = KILN_CU_GT_X;
    if (prologue) {
        kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_SCALE], 1 + KILN_CU_GT_SCALE, 1, c, 1, 1, 0);
        kiln_cu__gt_nhwc(&p->t[KILN_CU_GT_BIAS], 1 + KILN_CU_GT_BIAS, 1, c, 1, 1, 0);
        for (int v = KILN_CU_GT_A1; v <= KILN_CU_GT_A3; v++)
            kiln_cu__gt_nhwc(&p->t[v], 1 + v, n, c, h, w, 1);
        p->op[p->nop++] =
            (kiln_cu_gop){KILN_CU_GO_MUL, {KILN_CU_GT_X, KILN_CU_GT_SCALE}, {KILN_CU_GT_A1, -1}};
        p->op[p->nop++] =
            (kiln_cu_gop){KILN_CU_GO_ADD, {KILN_CU_GT_A1, KILN_CU_GT_BIAS}, {KILN_CU_GT_A2, -1}};
        p->op[p->nop++] = (kiln_cu_gop){KILN_CU_GO_RELU, {KILN_CU_GT_A2, -1}, {KILN_CU_GT_A3, -1}};
        conv_in = KILN_CU_GT_A3;
    }
    p->op[p->nop++] = (kiln_cu_gop){KILN_CU_GO_CONV, {conv_in, KILN_CU_GT_W}, {KILN_CU_GT_Y, -1}};
    p->op[p->nop++] =
        (kiln_cu_gop){KILN_CU_GO_GENSTATS, {KILN_CU_GT_Y, -1}, {KILN_CU_GT_SUM, KILN_CU_GT_SQSUM}};
    return 0;
}

#endif
