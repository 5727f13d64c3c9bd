/* cuda/conv_plan.h - where the nchw variant's copies live (dnn.c): the
 * scratch of one convolution cut into its parts, in floats. Plain C with no
 * CUDA in it, so that the cutting is unit-tested on machines without a GPU
 * (tests/cuda/test_conv_plan.c).
 *
 * Forward: wk (the weights KRSC), wc (KCRS), xc (the input NCHW), yc (the
 * output NCHW). Backward: wk, dwk (the weight gradient KRSC), wc, dwc
 * (KCRS), xc, dyc (the output's gradient NCHW), dxc (the input's gradient
 * NCHW). Every part starts 256 bytes after a multiple of 256 (cuDNN's
 * kernels read vectors) and none overlaps another. */
#ifndef KILN_CUDA_CONV_PLAN_H
#define KILN_CUDA_CONV_PLAN_H

#include "ops/ops.h" /* kiln_conv_shape */

#include <stddef.h>

enum {
    KILN_CU_NP_WK,
    KILN_CU_NP_DWK,
    KILN_CU_NP_WC,
    KILN_CU_NP_DWC,
    KILN_CU_NP_XC,
    KILN_CU_NP_YC,
    KILN_CU_NP_DYC,
    KILN_CU_NP_DXC,
    KILN_CU_NP_PARTS
};

typedef struct kiln_cu_nchw_plan {
    size_t off[KILN_CU_NP_PARTS]; /* floats from the scratch's start; used[] says which */
    size_t len[KILN_CU_NP_PARTS]; /* floats the part holds (0: not in this direction) */
    size_t total;                 /* floats of scratch the direction needs */
} kiln_cu_nchw_plan;

static inline size_t kiln_cu__al64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* bwd 0: the forward's parts, 1: the backward's */
static inline void kiln_cu__nchw_plan(const kiln_conv_shape *s, int bwd, kiln_cu_nchw_plan *p)
{
    size_t nw = (size_t)s->kh * s->kw * s->c * s->oc, nx = (size_t)s->n * s->h * s->w * s->c;
    size_t ny = (size_t)s->n * s->oh * s->ow * s->oc, at = 0;
    static const int fwd_parts[] = {KILN_CU_NP_WK, KILN_CU_NP_WC, KILN_CU_NP_XC, KILN_CU_NP_YC};
    static const int bwd_parts[] = {KILN_CU_NP_WK, KILN_CU_NP_DWK, KILN_CU_NP_WC, KILN_CU_NP_DWC,
                                    KILN_CU_NP_XC, KILN_CU_NP_DYC, KILN_CU_NP_DXC};
    const int *parts = bwd ? bwd_parts : fwd_parts;
    int np = bwd ? 7 : 4;
    for (int i = 0; i < KILN_CU_NP_PARTS; i++)
        p->off[i] = p->len[i] = 0;
    for (int i = 0; i < np; i++) {
        int k = parts[i];
        size_t n = k <= KILN_CU_NP_DWC ? nw : k == KILN_CU_NP_XC || k == KILN_CU_NP_DXC ? nx : ny;
        p->off[k] = at;
        p->len[k] = n;
        at += kiln_cu__al64(n);
    }
    p->total = at;
}

#endif
