/* models/resnet_plan.h - the device memory of a ResNet-50 training step
 * (models/resnet_dev.c), counted buffer class by buffer class, in fp32
 * storage and in the bf16-storage variant's (models/resnet_variant.h). Plain
 * C with no CUDA and no runtime calls in it, so that the plan is unit-tested
 * on machines without a GPU (tests/runtime/test_resnet_plan.c checks the
 * fp32 plan against what kiln_resnet_dev_create allocates on the CPU table).
 *
 * bf16 storage keeps in bf16 (2 bytes) what is batch-sized: the activations
 * the backward pass reads (each unit's convolution output, the ReLU units'
 * outputs, the blocks' outputs, the input's two slots, the padded and
 * pooled stem) and
 * the activations' gradients; and it adds a bf16 copy of the convolution
 * and classifier weights, refreshed after each update. What stays fp32: the
 * master weights, their gradients and momenta, batch norm's statistics
 * (accumulated in fp32), the classifier's features and logits, the loss. */
#ifndef KILN_RT_RESNET_PLAN_H
#define KILN_RT_RESNET_PLAN_H

#include <stddef.h>

typedef struct kiln_resnet_plan {
    size_t master;      /* fp32 values: every parameter, its gradient and momentum */
    size_t bn;          /* fp32 values: batch norm's running, batch and saved statistics */
    size_t act;         /* activation values the step keeps (act_bytes each) */
    size_t grad;        /* activation-gradient values (act_bytes each) */
    size_t head;        /* fp32 values: pooled features, logits, their gradients */
    size_t wcopy;       /* bf16 values: the weights' copy (0 in fp32 storage) */
    size_t misc;        /* bytes: labels (int32), hyper-parameters, the loss */
    size_t units, gmax; /* convolution units; the largest unit output (values) */
    int act_bytes;      /* 4 (fp32 storage) or 2 (bf16 storage) */
    size_t bytes;       /* the whole step's device memory */
} kiln_resnet_plan;

/* the spatial size out of a k x k convolution or pool */
static inline int kiln_resnet__out(int s, int k, int stride, int pad)
{
    return (s + 2 * pad - k) / stride + 1;
}

/* one unit (conv + batch norm) of cin -> cout channels at n x s x s in */
static inline int kiln_resnet__plan_unit(kiln_resnet_plan *p, int n, int s, int cin, int cout,
                                         int k, int stride, int pad, int relu)
{
    int o = kiln_resnet__out(s, k, stride, pad);
    size_t nw = (size_t)k * k * cin * cout, out = (size_t)n * o * o * cout;
    p->master += 3 * nw + 6 * (size_t)cout; /* w, gamma, beta: value, gradient, momentum */
    p->bn += 6 * (size_t)cout;
    p->act += relu ? 2 * out : out; /* the convolution's output, the ReLU's */
    p->wcopy += nw;
    p->units++;
    if (out > p->gmax) p->gmax = out;
    return o;
}

/* ResNet-50 v1.5 of `width` (64: the real one), `classes`, a batch of n
 * images of size x size; bf16: the bf16-storage variant's plan. 0, or -1
 * for sizes the network does not take (as kiln_resnet_dev_create). */
static inline int kiln_resnet__plan(int width, int classes, int n, int size, int bf16,
                                    kiln_resnet_plan *p)
{
    static const int blocks[4] = {3, 4, 6, 3};
    *p = (kiln_resnet_plan){.act_bytes = bf16 ? 2 : 4};
    if (width < 1 || width > 1024 || classes < 1 || n < 1 || size < 32) return -1;
    int s1 = kiln_resnet__plan_unit(p, n, size, 3, width, 7, 2, 3, 1);
    int s = kiln_resnet__out(s1 + 2, 3, 2, 0), cin = width;
    size_t padded = (size_t)n * (s1 + 2) * (s1 + 2) * width;
    /* the input's two slots (double buffering), the padded and pooled stem */
    p->act += 2 * (size_t)n * size * size * 3 + padded + (size_t)n * s * s * width;
    p->grad += padded; /* dpadded */
    for (int st = 0; st < 4; st++) {
        int w = width << st, cout = 4 * w;
        for (int i = 0; i < blocks[st]; i++) {
            int stride = i == 0 && st > 0 ? 2 : 1, s_in = s;
            s = kiln_resnet__plan_unit(p, n, s, cin, w, 1, 1, 0, 1);
            s = kiln_resnet__plan_unit(p, n, s, w, w, 3, stride, 1, 1);
            s = kiln_resnet__plan_unit(p, n, s, w, cout, 1, 1, 0, 0);
            if (i == 0) kiln_resnet__plan_unit(p, n, s_in, cin, cout, 1, stride, 0, 0);
            p->act += (size_t)n * s * s * cout; /* the block's output */
            cin = cout;
        }
    }
    size_t nfc = (size_t)cin * classes;
    p->master += 3 * nfc + 3 * (size_t)classes;
    p->wcopy += nfc;
    p->head = 2 * (size_t)n * cin + 2 * (size_t)n * classes; /* feat, dfeat, logits, dlogits */
    p->act += p->gmax;                                       /* the projection's bn output */
    p->grad += 4 * p->gmax;                                  /* the gradients' rotation */
    p->misc = 2 * 4 * (size_t)n + 4 * (8 + 2);               /* 2 slots' labels; hyper, loss */
    if (!bf16) p->wcopy = 0;
    p->bytes = 4 * (p->master + p->bn + p->head) + (size_t)p->act_bytes * (p->act + p->grad) +
               2 * p->wcopy + p->misc;
    return 0;
}

#endif
