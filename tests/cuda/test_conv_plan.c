/* tests/cuda/test_conv_plan.c - the host-side plans of the GPU variants, on
 * every machine: the cublaslt-fc variant's layouts and epilogues
 * (src/cuda/lt_plan.h), and the nchw variant's scratch plan
 * (src/cuda/conv_plan.h): for ResNet-50's convolution
 * shapes at batches 1 and 256 and odd ones, forward and backward, every
 * part the direction uses is there, holds its tensor (weights KH*KW*C*OC,
 * input N*H*W*C, output N*OH*OW*OC), starts on a 64-float boundary, lies
 * inside the total, and overlaps no other part; the parts a direction does
 * not use are empty; and the cudnn-graph variant's operation graph
 * (src/cuda/graph_plan.h), walked as a mock of cuDNN's backend API would
 * take it: unique non-zero uids, every operand a tensor of the graph,
 * each virtual tensor made by one operation and read by one later one,
 * inputs never written, outputs written once, memory tensors packed
 * channels-last, the convolution's operands of matching channels and its
 * output of the shape's size; the prologue only where asked; shapes the
 * fusion does not take (3 or 4 channels) refused. */
#include "cuda/conv_plan.h"
#include "cuda/graph_plan.h"
#include "cuda/lt_plan.h"
#include "test.h"

#include <stdio.h>

static void check(int n, int h, int c, int oc, int k, int stride, int pad)
{
    kiln_conv_shape s;
    if (kiln_conv_shape_init(&s, n, h, h, c, oc, k, k, stride, pad)) {
        CHECK(!"bad shape in test");
        return;
    }
    size_t nw = (size_t)k * k * c * oc, nx = (size_t)n * h * h * c;
    size_t ny = (size_t)n * s.oh * s.ow * oc;
    for (int bwd = 0; bwd < 2; bwd++) {
        kiln_cu_nchw_plan p;
        kiln_cu__nchw_plan(&s, bwd, &p);
        static const int fwd_use[] = {1, 0, 1, 0, 1, 1, 0, 0}, bwd_use[] = {1, 1, 1, 1, 1, 0, 1, 1};
        const int *use = bwd ? bwd_use : fwd_use;
        for (int i = 0; i < KILN_CU_NP_PARTS; i++) {
            size_t want = i <= KILN_CU_NP_DWC                         ? nw
                          : i == KILN_CU_NP_XC || i == KILN_CU_NP_DXC ? nx
                                                                      : ny;
            if (!use[i]) {
                CHECK_MSG(p.len[i] == 0, "part %d used in direction %d", i, bwd);
                continue;
            }
            CHECK_MSG(p.len[i] == want, "part %d holds %zu, want %zu", i, p.len[i], want);
            CHECK_MSG(p.off[i] % 64 == 0, "part %d at %zu", i, p.off[i]);
            CHECK_MSG(p.off[i] + p.len[i] <= p.total, "part %d past the total", i);
            for (int j = 0; j < KILN_CU_NP_PARTS; j++)
                if (j != i && use[j])
                    CHECK_MSG(p.off[i] + p.len[i] <= p.off[j] || p.off[j] + p.len[j] <= p.off[i],
                              "parts %d and %d overlap", i, j);
        }
    }
}

/* the cublaslt-fc variant's layouts: cuda_blas.c's column-major view of
 * y[B,out] = x[B,in] w[in,out], and the epilogue for bias and ReLU */
static void lt(void)
{
    kiln_cu_lt_plan p;
    CHECK(kiln_cu__lt_plan(256, 2048, 1000, 1, 0, &p) == 0);
    CHECK(p.m == 1000 && p.n == 256 && p.k == 2048);
    CHECK(p.lda == 1000 && p.ldb == 2048 && p.ldd == 1000);
    CHECK(p.epilogue == KILN_CU_LT_BIAS);
    CHECK(kiln_cu__lt_plan(3, 5, 7, 1, 1, &p) == 0 && p.epilogue == KILN_CU_LT_RELU_BIAS);
    CHECK(kiln_cu__lt_plan(3, 5, 7, 0, 1, &p) == 0 && p.epilogue == KILN_CU_LT_RELU);
    CHECK(kiln_cu__lt_plan(3, 5, 7, 0, 0, &p) == 0 && p.epilogue == KILN_CU_LT_NONE);
    CHECK(kiln_cu__lt_plan(0, 5, 7, 0, 0, &p) == -1);
    CHECK(kiln_cu__lt_plan(3, 5, -1, 0, 0, &p) == -1);
}

/* the mock: what building the plan's descriptors would need of it */
static void graph(int n, int h, int c, int oc, int k, int stride, int pad, int prologue)
{
    kiln_conv_shape s;
    kiln_cu_graph_plan p;
    if (kiln_conv_shape_init(&s, n, h, h, c, oc, k, k, stride, pad)) {
        CHECK(!"bad shape in test");
        return;
    }
    if (!kiln_cu__graph_applies(&s)) {
        CHECK_MSG(kiln_cu__graph_plan(&s, prologue, &p) == -1, "%d -> %d channels taken", c, oc);
        return;
    }
    CHECK(kiln_cu__graph_plan(&s, prologue, &p) == 0);
    CHECK(p.nop == (prologue ? 5 : 2) && p.prologue == prologue);
    int made[KILN_CU_GT_N] = {0}, read[KILN_CU_GT_N] = {0}, first_read[KILN_CU_GT_N];
    for (int i = 0; i < KILN_CU_GT_N; i++) {
        const kiln_cu_gtensor *t = &p.t[i];
        first_read[i] = -1;
        if (!t->used) continue;
        CHECK_MSG(t->uid != 0, "tensor %d has uid 0", i);
        for (int j = 0; j < i; j++)
            CHECK_MSG(!p.t[j].used || p.t[j].uid != t->uid, "tensors %d and %d share uid", i, j);
        if (t->is_virtual) continue;
        /* packed channels-last: channel stride 1, the last element at count - 1 */
        int64_t count = 1, last = 0;
        for (int d = 0; d < 4; d++)
            count *= t->dim[d], last += (t->dim[d] - 1) * t->stride[d];
        CHECK_MSG(t->stride[1] == 1 && last == count - 1, "tensor %d not packed NHWC", i);
    }
    for (int o = 0; o < p.nop; o++) {
        const kiln_cu_gop *op = &p.op[o];
        for (int j = 0; j < 2; j++) {
            if (op->in[j] >= 0) {
                CHECK_MSG(p.t[op->in[j]].used, "op %d reads tensor %d, not in the graph", o,
                          op->in[j]);
                CHECK_MSG(!p.t[op->in[j]].is_virtual || made[op->in[j]],
                          "op %d reads virtual %d before it is made", o, op->in[j]);
                if (first_read[op->in[j]] < 0) first_read[op->in[j]] = o;
                read[op->in[j]]++;
            }
            if (op->out[j] >= 0) {
                CHECK_MSG(p.t[op->out[j]].used, "op %d writes tensor %d, not in the graph", o,
                          op->out[j]);
                made[op->out[j]]++;
            }
        }
    }
    for (int i = 0; i < KILN_CU_GT_N; i++) {
        if (!p.t[i].used) continue;
        int input =
            i == KILN_CU_GT_X || i == KILN_CU_GT_W || i == KILN_CU_GT_SCALE || i == KILN_CU_GT_BIAS;
        if (p.t[i].is_virtual)
            CHECK_MSG(made[i] == 1 && read[i] == 1, "virtual %d made %d, read %d", i, made[i],
                      read[i]);
        else if (input)
            CHECK_MSG(made[i] == 0 && read[i] == 1, "input %d made %d, read %d", i, made[i],
                      read[i]);
        else
            CHECK_MSG(made[i] == 1, "output %d made %d times", i, made[i]);
    }
    /* the prologue: scale/bias/ReLU present only when asked, conv reads A3 then */
    CHECK(p.t[KILN_CU_GT_SCALE].used == prologue && p.t[KILN_CU_GT_A3].used == prologue);
    const kiln_cu_gop *cv = &p.op[p.nop - 2];
    CHECK(cv->kind == KILN_CU_GO_CONV && cv->in[1] == KILN_CU_GT_W && cv->out[0] == KILN_CU_GT_Y);
    CHECK(cv->in[0] == (prologue ? KILN_CU_GT_A3 : KILN_CU_GT_X));
    CHECK(p.op[p.nop - 1].kind == KILN_CU_GO_GENSTATS);
    const kiln_cu_gtensor *x = &p.t[cv->in[0]], *w = &p.t[KILN_CU_GT_W], *y = &p.t[KILN_CU_GT_Y];
    CHECK(x->dim[1] == c && w->dim[1] == c && w->dim[0] == oc && y->dim[1] == oc);
    CHECK(w->dim[2] == k && w->dim[3] == k && y->dim[0] == n);
    CHECK(y->dim[2] == s.oh && y->dim[3] == s.ow);
    CHECK(p.t[KILN_CU_GT_SUM].dim[1] == oc && p.t[KILN_CU_GT_SQSUM].dim[1] == oc);
    CHECK(p.pad[0] == pad && p.stride[1] == stride && p.dilation[0] == 1);
}

int main(void)
{
    lt();
    for (int pro = 0; pro < 2; pro++) {
        graph(256, 224, 3, 64, 7, 2, 3, pro); /* the stem: 3 channels, refused */
        graph(256, 56, 64, 64, 1, 1, 0, pro);
        graph(256, 56, 64, 64, 3, 1, 1, pro);
        graph(256, 56, 64, 256, 1, 1, 0, pro);
        graph(256, 56, 128, 128, 3, 2, 1, pro);
        graph(1, 7, 512, 2048, 1, 1, 0, pro);
        graph(3, 32, 4, 4, 3, 1, 1, pro); /* width 4: refused */
    }
    {
        kiln_conv_shape s;
        kiln_cu_graph_plan p;
        CHECK(kiln_conv_shape_init(&s, 2, 9, 9, 3, 64, 7, 7, 2, 3) == 0);
        CHECK(kiln_cu__graph_plan(&s, 0, &p) == -1 && !kiln_cu__graph_applies(&s));
    }
    /* ResNet-50's shapes (stem, 1x1, 3x3, strided, projections) */
    int batches[] = {1, 256};
    for (int b = 0; b < 2; b++) {
        int n = batches[b];
        check(n, 224, 3, 64, 7, 2, 3);
        check(n, 56, 64, 64, 1, 1, 0);
        check(n, 56, 64, 64, 3, 1, 1);
        check(n, 56, 64, 256, 1, 1, 0);
        check(n, 56, 128, 128, 3, 2, 1);
        check(n, 56, 256, 512, 1, 2, 0);
        check(n, 7, 512, 2048, 1, 1, 0);
    }
    check(3, 9, 5, 7, 3, 2, 1); /* odd sizes: nothing a multiple of 64 */
    check(1, 1, 1, 1, 1, 1, 0);
    TEST_DONE();
}
