/* nn/model_dev.c - the sequential model on a backend table (a GPU, or the
 * CPU table in tests): device buffers, the training step as a sequence of
 * table calls (captured as one graph once its shapes are steady), the
 * staged double-buffered input, evaluation, and the host copies of the
 * state that checkpoints read and write.
 *
 * The step. kiln__dev_stage copies a batch into one of two pinned host
 * slots and queues its upload on the device's copy stream;
 * kiln__dev_launch queues the step on the compute stream (the optimizer's
 * hyper-parameters uploaded first, the loss and the correct count
 * downloaded after); kiln__dev_finish waits for it. Fit stages batch k+1
 * between launching and finishing step k, so its upload overlaps step k's
 * compute and the step never waits for its input, while every callback
 * still runs after its own step and before the next one starts (the
 * learning rate it sets, the checkpoint it writes see the right step).
 *
 * Graphs. After KILN__EAGER_STEPS eager steps (which grow every workspace
 * to its final size) the step of each input slot is captured once and
 * replayed: one launch instead of dozens. A captured graph reads the
 * learning rate and Adam's constants from device memory (the `hyper`
 * buffer), so schedules need no re-capture; a batch of another size (an
 * epoch's short last one) runs eagerly, and a workspace the backend had to
 * replace (mem_epoch) makes the graphs be captured again.
 * KILN_CUDA_GRAPHS=0 turns them off (for comparisons).
 *
 * State. Every kiln_buffer of the model has a host copy (what compile
 * initialised) and a device copy. host_stale: a step changed the device
 * copy since the host one was refreshed; dev_stale: the host copies were
 * handed out (kiln_model_buffer) and may have been written, so the next
 * device step uploads them first.
 *
 * Mixed precision (bf16, fp16). The parameters, gradients and optimizer
 * slots stay fp32 (the masters; checkpoints are unchanged); the backend
 * rounds every GEMM's and convolution's inputs to the format and sums in
 * fp32 (backend.h, set_precision). fp16 adds dynamic loss scaling
 * (cuda/lossscale.h, PyTorch's GradScaler policy): the loss gradient is
 * multiplied by the scale, the weight gradients by 1/scale with an inf/NaN
 * check, and a step whose gradients are not finite is skipped (no
 * optimizer update: weights and slots keep their bits) and the scale
 * halved; after 2000 finite steps in a row it doubles. The host reads the
 * check before the update, once per step (as GradScaler's found_inf), so
 * fp16 steps run without graphs. bf16 has fp32's range: no scaling. */
#include "backend/backend.h"
#include "cuda/lossscale.h"
#include "nn/model_int.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define fail              kiln__model_fail
#define KILN__EAGER_STEPS 2

typedef struct dev_layer {
    float *w, *b, *dw, *db;              /* kernel/gamma, bias/beta and their gradients */
    float *s1w, *s2w, *s1b, *s2b;        /* optimizer slots (s2: Adam's v) */
    float *rmean, *rvar, *mean, *invstd; /* batch norm */
    float *kmean, *kvar;                 /* its running statistics before an fp16 step */
    float *out, *dout;                   /* [B, oh, ow, oc]; flatten aliases its input's */
    int need_dx;                         /* a layer below learns: compute the input gradient */
} dev_layer;

typedef struct mirror {
    float *host, *dev;
    size_t n;
} mirror;

struct kiln__devmodel {
    const kiln__backend *be;
    kiln__dev *d;
    int index;
    char name[160];
    dev_layer *L;
    mirror mir[MAX_BUFS];
    int nmir;
    float *tmp;            /* batch norm's input gradient where nothing below needs it */
    float *in[2], *hin[2]; /* input slots: device, pinned host */
    int32_t *lab[2], *hlab[2];
    int staged[2]; /* examples staged in the slot, 0 = free */
    int order[2];  /* staged slots, oldest first */
    int nstaged;
    int flight;                    /* slot of the launched step, -1 = none */
    float *hyper;                  /* device */
    float hhyper[KILN__HYPER_MAX]; /* plain host memory: upload_ordered copies it at once */
    /* [0] the loss; ints follow: [1] the correct count, [2] fp16's overflow flag */
    float *loss, *hloss;
    void *graph[2];
    int graph_n[2];
    unsigned long graph_epoch[2];
    long eager; /* full-size eager steps taken */
    int use_graphs;
    int host_stale, dev_stale;
    int scaling; /* fp16: the loss scaler below is in use */
    int bn_kept; /* fp16, data parallel: compute kept the running statistics aside */
    kiln_loss_scaler scaler;
};

static int dev_fail(kiln_model *m, const char *what)
{
    kiln__devmodel *v = m->dv;
    return fail(m, "%s: %s: %s", m->device, what, v->be->error(v->d));
}

#define CK(m, call, what)                                                                          \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            rc = dev_fail((m), (what));                                                            \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static size_t out_size(const kiln_layer *l)
{
    return (size_t)l->oh * l->ow * l->oc;
}

int kiln__dev_open(kiln_model *m, const kiln__backend *be, int index)
{
    kiln__devmodel *v = calloc(1, sizeof *v);
    char err[512];
    if (!v) return fail(m, "out of memory");
    v->be = be;
    v->index = index;
    v->flight = -1;
    if (be->open(index, &v->d, err, sizeof err)) {
        free(v);
        /* the CUDA context names the device itself ("/gpu:3 does not exist") */
        return fail(m, strncmp(err, m->device, strlen(m->device)) == 0 ? "%s%s" : "%s: %s",
                    strncmp(err, m->device, strlen(m->device)) == 0 ? "" : m->device, err);
    }
    be->describe(v->d, v->name, sizeof v->name);
    const char *g = getenv("KILN_CUDA_GRAPHS");
    v->use_graphs = be->graph_begin && !(g && strcmp(g, "0") == 0);
    m->dv = v;
    return 0;
}

const char *kiln__dev_describe(const kiln_model *m)
{
    return m->dv ? m->dv->name : "CPU";
}

static void *dalloc(kiln_model *m, size_t bytes, int *bad)
{
    void *p = NULL;
    if (*bad) return NULL;
    if (m->dv->be->alloc(m->dv->d, bytes ? bytes : sizeof(float), &p)) {
        dev_fail(m, "allocating device memory");
        *bad = 1;
    }
    return p;
}

static void add_mirror(kiln__devmodel *v, float *host, float *dev, size_t n)
{
    if (host && dev && v->nmir < MAX_BUFS) v->mir[v->nmir++] = (mirror){host, dev, n};
}

void kiln__dev_free(kiln_model *m)
{
    kiln__devmodel *v = m->dv;
    if (!v) return;
    const kiln__backend *be = v->be;
    if (v->d) be->sync(v->d);
    for (int i = 0; i < 2; i++)
        if (v->graph[i]) be->graph_free(v->d, v->graph[i]);
    for (int i = 0; v->L && i < m->nl; i++) {
        dev_layer *D = &v->L[i];
        if (m->layers[i]->kind == L_FLATTEN) continue; /* aliases */
        float *f[] = {D->w,     D->b,    D->dw,   D->db,     D->s1w, D->s2w,  D->s1b,   D->s2b,
                      D->rmean, D->rvar, D->mean, D->invstd, D->out, D->dout, D->kmean, D->kvar};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            if (f[k]) be->free(v->d, f[k]);
    }
    for (int i = 0; i < 2; i++) {
        if (v->in[i]) be->free(v->d, v->in[i]);
        if (v->lab[i]) be->free(v->d, v->lab[i]);
        if (v->hin[i]) be->host_free(v->d, v->hin[i]);
        if (v->hlab[i]) be->host_free(v->d, v->hlab[i]);
    }
    if (v->tmp) be->free(v->d, v->tmp);
    if (v->hyper) be->free(v->d, v->hyper);
    if (v->loss) be->free(v->d, v->loss);
    if (v->hloss) be->host_free(v->d, v->hloss);
    free(v->L);
    be->close(v->d);
    free(v);
    m->dv = NULL;
}

/* Copies every buffer's state between its host copy and its device copy
 * (to_dev: host -> device), clearing the flag that asked for it. */
static int sync_state(kiln_model *m, int to_dev)
{
    kiln__devmodel *v = m->dv;
    int rc = 0;
    for (int i = 0; i < v->nmir; i++) {
        const mirror *r = &v->mir[i];
        size_t bytes = sizeof(float) * r->n;
        CK(m,
           to_dev ? v->be->upload(v->d, r->dev, r->host, bytes)
                  : v->be->download(v->d, r->host, r->dev, bytes),
           to_dev ? "uploading the model's state" : "downloading the model's state");
    }
    if (to_dev)
        v->dev_stale = 0;
    else
        v->host_stale = 0;
out:
    return rc;
}

static int push(kiln_model *m)
{
    return sync_state(m, 1);
}

int kiln__dev_pull(kiln_model *m)
{
    return m->dv && m->dv->host_stale ? sync_state(m, 0) : 0;
}

void kiln__dev_exposed(kiln_model *m)
{
    if (m->dv) m->dv->dev_stale = 1;
}

/* After the host compile: the device copies of everything, and the buffers
 * of a step. */
int kiln__dev_compile(kiln_model *m)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    int bad = 0, B = m->batch, rc = 0;
    size_t tmp_n = 0, dim = (size_t)m->h * m->w * m->c;
    if (m->precision == KILN_PRECISION_TF32 && be->set_tf32(v->d, 1))
        return dev_fail(m, "turning TF32 on");
    if (m->precision == KILN_PRECISION_BF16 || m->precision == KILN_PRECISION_FP16) {
        int fp16 = m->precision == KILN_PRECISION_FP16;
        if (be->set_precision(v->d, fp16 ? KILN__LOWP_FP16 : KILN__LOWP_BF16))
            return dev_fail(m, "setting mixed precision");
        if (fp16) {
            kiln_loss_scaler_init(&v->scaler);
            v->scaling = 1;
            v->use_graphs = 0; /* the host decides each step whether to update */
        }
    }
    if (!(v->L = calloc((size_t)m->nl, sizeof *v->L))) return fail(m, "out of memory");
    int learns_below = 0;
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        D->need_dx = learns_below;
        learns_below |= l->nw > 0;
        size_t act = (size_t)B * out_size(l);
        if (l->kind == L_FLATTEN) {
            /* the previous layer's buffers; the input's for layer 0 (per step) */
            D->out = i ? v->L[i - 1].out : NULL;
            D->dout = i ? v->L[i - 1].dout : NULL;
        } else {
            D->out = dalloc(m, sizeof(float) * act, &bad);
            D->dout = dalloc(m, sizeof(float) * act, &bad);
        }
        if (l->ob >= 0) {
            kiln_opt_buf *k = &m->obufs[l->ob], *bb = &m->obufs[l->ob + 1];
            D->w = dalloc(m, sizeof(float) * l->nw, &bad);
            D->b = dalloc(m, sizeof(float) * l->nb, &bad);
            D->dw = dalloc(m, sizeof(float) * l->nw, &bad);
            D->db = dalloc(m, sizeof(float) * l->nb, &bad);
            D->s1w = dalloc(m, sizeof(float) * l->nw, &bad);
            D->s1b = dalloc(m, sizeof(float) * l->nb, &bad);
            if (m->opt.kind == KILN_OPT_ADAM) {
                D->s2w = dalloc(m, sizeof(float) * l->nw, &bad);
                D->s2b = dalloc(m, sizeof(float) * l->nb, &bad);
            }
            if (bad) break;
            add_mirror(v, l->w, D->w, l->nw);
            add_mirror(v, l->b, D->b, l->nb);
            add_mirror(v, k->s1, D->s1w, l->nw);
            add_mirror(v, k->s2, D->s2w, l->nw);
            add_mirror(v, bb->s1, D->s1b, l->nb);
            add_mirror(v, bb->s2, D->s2b, l->nb);
        }
        if (l->kind == L_BN) {
            size_t c = (size_t)l->ic;
            D->rmean = dalloc(m, sizeof(float) * c, &bad);
            D->rvar = dalloc(m, sizeof(float) * c, &bad);
            D->mean = dalloc(m, sizeof(float) * c, &bad);
            D->invstd = dalloc(m, sizeof(float) * c, &bad);
            D->kmean = dalloc(m, sizeof(float) * c, &bad);
            D->kvar = dalloc(m, sizeof(float) * c, &bad);
            if (bad) break;
            add_mirror(v, l->run_mean, D->rmean, c);
            add_mirror(v, l->run_var, D->rvar, c);
            if (!D->need_dx && act > tmp_n) tmp_n = act;
        }
        if (bad) break;
    }
    for (int i = 0; i < 2 && !bad; i++) {
        v->in[i] = dalloc(m, sizeof(float) * (size_t)B * dim, &bad);
        v->lab[i] = dalloc(m, sizeof(int32_t) * (size_t)B, &bad);
        if (!bad && (be->host_alloc(v->d, sizeof(float) * (size_t)B * dim, (void **)&v->hin[i]) ||
                     be->host_alloc(v->d, sizeof(int32_t) * (size_t)B, (void **)&v->hlab[i]))) {
            dev_fail(m, "allocating pinned host memory");
            bad = 1;
        }
    }
    if (tmp_n) v->tmp = dalloc(m, sizeof(float) * tmp_n, &bad);
    v->hyper = dalloc(m, sizeof(float) * KILN__HYPER_MAX, &bad);
    v->loss = dalloc(m, 3 * sizeof(float), &bad);
    if (!bad && be->host_alloc(v->d, 3 * sizeof(float), (void **)&v->hloss)) {
        dev_fail(m, "allocating pinned host memory");
        bad = 1;
    }
    if (bad) return -1;
    if ((size_t)v->nmir != m->nbufs)
        return fail(m, "%s: internal error: %d of %zu state buffers have a device copy", m->device,
                    v->nmir, m->nbufs);
    rc = push(m);
    if (!rc) CK(m, be->sync(v->d), "initialising the model");
out:
    return rc;
}

/* ---- the step ---- */

static const float *layer_in(kiln__devmodel *v, int i, const float *x)
{
    return i ? v->L[i - 1].out : x;
}

static int forward(kiln_model *m, const float *x, int n, int training)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    kiln__dev *d = v->d;
    int rc = 0;
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        const float *in = layer_in(v, i, x);
        switch (l->kind) {
        case L_DENSE:
            CK(m, be->dense_fwd(d, in, D->w, D->b, D->out, n, l->ih * l->iw * l->ic, l->oc, l->act),
               l->name);
            break;
        case L_CONV: {
            kiln_conv_shape s;
            kiln_conv_shape_init(&s, n, l->ih, l->iw, l->ic, l->oc, l->k, l->k, l->stride, l->pad);
            CK(m, be->conv_fwd(d, &s, in, D->w, D->b, D->out, l->act), l->name);
            break;
        }
        case L_MAXPOOL:
        case L_AVGPOOL: {
            kiln_pool_shape s;
            kiln_pool_shape_init(&s, n, l->ih, l->iw, l->ic, l->k, l->stride);
            if (l->kind == L_MAXPOOL)
                CK(m, be->maxpool_fwd(d, &s, in, D->out), l->name);
            else
                CK(m, be->avgpool_fwd(d, &s, in, D->out), l->name);
            break;
        }
        case L_BN: {
            int M = n * l->ih * l->iw;
            if (training)
                CK(m,
                   be->bn_fwd_train(d, in, D->w, D->b, D->out, D->mean, D->invstd, D->rmean,
                                    D->rvar, l->bn_momentum, l->bn_eps, M, l->ic),
                   l->name);
            else
                CK(m,
                   be->bn_fwd_infer(d, in, D->w, D->b, D->rmean, D->rvar, l->bn_eps, D->out, M,
                                    l->ic),
                   l->name);
            break;
        }
        case L_RELU:
            CK(m, be->relu_fwd(d, in, D->out, (size_t)n * out_size(l)), l->name);
            break;
        case L_FLATTEN:
            if (i == 0) D->out = (float *)x; /* read only, by the next layer */
            break;
        }
    }
out:
    return rc;
}

static int backward(kiln_model *m, const float *x, int n)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    kiln__dev *d = v->d;
    int rc = 0;
    for (int i = m->nl - 1; i >= 0; i--) {
        kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        const float *in = layer_in(v, i, x);
        float *dx = D->need_dx ? v->L[i - 1].dout : NULL;
        switch (l->kind) {
        case L_DENSE:
            CK(m,
               be->dense_bwd(d, in, D->w, D->out, D->dout, dx, D->dw, D->db, n,
                             l->ih * l->iw * l->ic, l->oc, l->act, 0.0f),
               l->name);
            break;
        case L_CONV: {
            kiln_conv_shape s;
            kiln_conv_shape_init(&s, n, l->ih, l->iw, l->ic, l->oc, l->k, l->k, l->stride, l->pad);
            CK(m, be->conv_bwd(d, &s, in, D->w, D->out, D->dout, dx, D->dw, D->db, l->act, 0.0f),
               l->name);
            break;
        }
        case L_MAXPOOL:
        case L_AVGPOOL: {
            if (!dx) break;
            kiln_pool_shape s;
            kiln_pool_shape_init(&s, n, l->ih, l->iw, l->ic, l->k, l->stride);
            if (l->kind == L_MAXPOOL)
                CK(m, be->maxpool_bwd(d, &s, in, D->out, D->dout, dx), l->name);
            else
                CK(m, be->avgpool_bwd(d, &s, in, D->out, D->dout, dx), l->name);
            break;
        }
        case L_BN:
            CK(m,
               be->bn_bwd(d, in, D->w, D->mean, D->invstd, D->dout, dx ? dx : v->tmp, D->dw, D->db,
                          l->bn_eps, n * l->ih * l->iw, l->ic),
               l->name);
            break;
        case L_RELU:
            if (dx) CK(m, be->relu_bwd(d, D->out, D->dout, dx, (size_t)n * out_size(l)), l->name);
            break;
        case L_FLATTEN:
            break; /* dout aliases the input's */
        }
    }
out:
    return rc;
}

static int optimize(kiln_model *m)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    int rc = 0;
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        if (l->ob < 0) continue;
        if (m->opt.kind == KILN_OPT_SGD) {
            CK(m, be->sgd(v->d, D->w, D->dw, D->s1w, l->nw, v->hyper), "SGD step");
            CK(m, be->sgd(v->d, D->b, D->db, D->s1b, l->nb, v->hyper), "SGD step");
        } else {
            CK(m, be->adam(v->d, D->w, D->dw, D->s1w, D->s2w, l->nw, v->hyper), "Adam step");
            CK(m, be->adam(v->d, D->b, D->db, D->s1b, D->s2b, l->nb, v->hyper), "Adam step");
        }
    }
out:
    return rc;
}

/* fp16: unscales every weight gradient, checking for inf/NaN, waits for
 * the check and updates the scaler; *apply says whether the step's update
 * may run. */
static int unscale(kiln_model *m, float scale, int *apply)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    int *found = (int *)(v->loss + 2), zero = 0, rc = 0, bad = 0;
    CK(m, be->upload_ordered(v->d, found, &zero, sizeof zero), "loss scaling");
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        if (l->ob < 0) continue;
        CK(m, be->scale_check(v->d, D->dw, l->nw, 1.0f / scale, found), "loss scaling");
        CK(m, be->scale_check(v->d, D->db, l->nb, 1.0f / scale, found), "loss scaling");
    }
    CK(m, be->download_async(v->d, v->hloss + 2, found, sizeof(int)), "loss scaling");
    CK(m, be->sync(v->d), "training step");
    memcpy(&bad, v->hloss + 2, sizeof bad);
    *apply = kiln_loss_scaler_update(&v->scaler, bad);
out:
    return rc;
}

/* fp16: batch norm's running statistics are kept aside before the forward
 * (back = 0) and put back when the step is skipped (back = 1). A skipped
 * step leaves every buffer as it was: an overflowing batch would otherwise
 * leave inf or NaN in the statistics that evaluation uses, for good (the
 * step's update is skipped, its forward already ran). */
static int keep_bn_stats(kiln_model *m, int back)
{
    kiln__devmodel *v = m->dv;
    int rc = 0;
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        dev_layer *D = &v->L[i];
        size_t bytes = sizeof(float) * (size_t)l->ic;
        if (l->kind != L_BN) continue;
        CK(m, v->be->copy(v->d, back ? D->rmean : D->kmean, back ? D->kmean : D->rmean, bytes),
           l->name);
        CK(m, v->be->copy(v->d, back ? D->rvar : D->kvar, back ? D->kvar : D->rvar, bytes),
           l->name);
    }
out:
    return rc;
}

/* Forward, loss, backward and update on slot s's n examples: what a graph
 * captures. */
static int step_ops(kiln_model *m, int s, int n)
{
    kiln__devmodel *v = m->dv;
    kiln_layer *last = m->layers[m->nl - 1];
    dev_layer *DL = &v->L[m->nl - 1];
    float scale = v->scaling ? v->scaler.scale : 1.0f;
    int rc = v->scaling ? keep_bn_stats(m, 0) : 0, apply = 1;
    if (rc || (rc = forward(m, v->in[s], n, 1))) return rc;
    CK(m,
       v->be->xent(v->d, DL->out, v->lab[s], n, (int)out_size(last), DL->dout, scale, v->loss,
                   (int *)(v->loss + 1)),
       "cross-entropy");
    if ((rc = backward(m, v->in[s], n))) return rc;
    if (v->scaling && (rc = unscale(m, scale, &apply))) return rc;
    rc = apply ? optimize(m) : keep_bn_stats(m, 1);
out:
    return rc;
}

float kiln__dev_loss_scale(const kiln_model *m, uint64_t *skipped)
{
    const kiln__devmodel *v = m->dv;
    int on = v && v->scaling;
    if (skipped) *skipped = on ? v->scaler.skipped : 0;
    return on ? v->scaler.scale : 0.0f;
}

int kiln__dev_get_scaler(const kiln_model *m, kiln_loss_scale_state *st)
{
    const kiln__devmodel *v = m->dv;
    if (!v || !v->scaling) return -1;
    *st = (kiln_loss_scale_state){.scale = v->scaler.scale,
                                  .growth_interval = v->scaler.growth_interval,
                                  .good_steps = v->scaler.good_steps,
                                  .skipped = v->scaler.skipped};
    return 0;
}

int kiln__dev_set_scaler(kiln_model *m, const kiln_loss_scale_state *st)
{
    kiln__devmodel *v = m->dv;
    if (!v || !v->scaling) return -1;
    v->scaler.scale = st->scale;
    v->scaler.growth_interval = st->growth_interval;
    v->scaler.good_steps = st->good_steps;
    v->scaler.skipped = st->skipped;
    return 0;
}

/* A slot nothing is staged in or running on, or -1. */
static int free_slot(const kiln__devmodel *v)
{
    for (int s = 0; s < 2; s++)
        if (!v->staged[s] && v->flight != s) return s;
    return -1;
}

/* Slot s's pinned labels from y[0..n), each checked against the classes. */
static int put_labels(kiln_model *m, int s, const uint8_t *y, int n)
{
    int K = (int)out_size(m->layers[m->nl - 1]);
    for (int i = 0; i < n; i++) {
        if (y[i] >= K) return fail(m, "label %d out of range for %d classes", y[i], K);
        m->dv->hlab[s][i] = y[i];
    }
    return 0;
}

int kiln__dev_stage(kiln_model *m, const float *x, const uint8_t *y, int n)
{
    kiln__devmodel *v = m->dv;
    int s = free_slot(v), rc = 0;
    size_t dim = (size_t)m->h * m->w * m->c;
    if (n < 1 || n > m->batch)
        return fail(m, "batch of %d examples, compiled for 1..%d", n, m->batch);
    if (s < 0) return fail(m, "%s: both input slots are in use", m->device);
    if (put_labels(m, s, y, n)) return -1;
    memcpy(v->hin[s], x, sizeof(float) * (size_t)n * dim);
    CK(m, v->be->upload_async(v->d, v->in[s], v->hin[s], sizeof(float) * (size_t)n * dim),
       "uploading a batch");
    CK(m, v->be->upload_async(v->d, v->lab[s], v->hlab[s], sizeof(int32_t) * (size_t)n),
       "uploading a batch");
    v->staged[s] = n;
    v->order[v->nstaged++] = s;
out:
    return rc;
}

static void set_hyper(kiln_model *m)
{
    float *h = m->dv->hhyper;
    if (m->opt.kind == KILN_OPT_SGD) {
        h[KILN__H_LR] = m->opt.lr;
        h[KILN__H_MOMENTUM] = m->opt.momentum;
    } else {
        kiln__adam_consts(m->opt.lr, m->opt.beta1, m->opt.beta2, m->step, &h[KILN__H_ASTEP],
                          &h[KILN__H_ASBC2]);
        h[KILN__H_B1] = m->opt.beta1;
        h[KILN__H_B2] = m->opt.beta2;
        h[KILN__H_EPS] = m->opt.eps;
    }
}

/* Runs slot s's step from its graph, capturing the graph first when the
 * step is steady; eagerly otherwise. */
static int run_step(kiln_model *m, int s, int n)
{
    kiln__devmodel *v = m->dv;
    const kiln__backend *be = v->be;
    int rc = 0;
    int full = n == m->batch;
    if (!v->use_graphs || !full || v->eager < KILN__EAGER_STEPS) {
        rc = step_ops(m, s, n);
        if (!rc && full) v->eager++;
        return rc;
    }
    unsigned long ep = be->mem_epoch(v->d);
    if (v->graph[s] && (v->graph_n[s] != n || v->graph_epoch[s] != ep)) {
        be->graph_free(v->d, v->graph[s]);
        v->graph[s] = NULL;
    }
    if (!v->graph[s]) {
        void *g = NULL;
        CK(m, be->graph_begin(v->d), "capturing the training step");
        rc = step_ops(m, s, n);
        /* end the capture whatever happened, so the stream is usable again */
        if (be->graph_end(v->d, &g) && !rc) rc = dev_fail(m, "capturing the training step");
        if (rc) {
            /* nothing ran while capturing, so the step can still run eagerly;
             * say so once: the run goes on, slower than it could */
            if (g) be->graph_free(v->d, g);
            fprintf(stderr,
                    "kiln: %s: the training step cannot be captured as a CUDA graph "
                    "(%s); running it without graphs\n",
                    m->device, m->err);
            v->use_graphs = 0;
            return step_ops(m, s, n);
        }
        if (be->mem_epoch(v->d) != ep) {
            /* a workspace moved during capture: this graph is stale at birth;
             * run eagerly and capture another time */
            be->graph_free(v->d, g);
            return step_ops(m, s, n);
        }
        v->graph[s] = g;
        v->graph_n[s] = n;
        v->graph_epoch[s] = ep;
    }
    CK(m, be->graph_launch(v->d, v->graph[s]), "launching the training step");
out:
    return rc;
}

int kiln__dev_launch(kiln_model *m)
{
    kiln__devmodel *v = m->dv;
    int rc = 0;
    if (v->flight >= 0) return fail(m, "%s: a step is already running", m->device);
    if (v->nstaged == 0) return fail(m, "%s: no batch staged", m->device);
    int s = v->order[0], n = v->staged[s];
    if (v->dev_stale && (rc = push(m))) return rc;
    m->step++;
    set_hyper(m);
    CK(m, v->be->upload_ordered(v->d, v->hyper, v->hhyper, sizeof(float) * KILN__HYPER_MAX),
       "uploading the learning rate");
    if ((rc = run_step(m, s, n))) goto out;
    CK(m, v->be->download_async(v->d, v->hloss, v->loss, 2 * sizeof(float)), "reading the loss");
    v->order[0] = v->order[1];
    v->nstaged--;
    v->staged[s] = 0;
    v->flight = s;
    v->host_stale = 1;
out:
    if (rc) m->step--; /* the step was not taken */
    return rc;
}

int kiln__dev_finish(kiln_model *m, float *loss, int *correct)
{
    kiln__devmodel *v = m->dv;
    int rc = 0;
    if (v->flight < 0) return fail(m, "%s: no step is running", m->device);
    v->flight = -1;
    CK(m, v->be->sync(v->d), "training step");
    if (loss) *loss = v->hloss[0];
    if (correct) memcpy(correct, v->hloss + 1, sizeof(int));
out:
    return rc;
}

int kiln__dev_train_step(kiln_model *m, const float *x, const uint8_t *y, int n, float *loss,
                         int *correct)
{
    if (kiln__dev_stage(m, x, y, n) || kiln__dev_launch(m)) return -1;
    return kiln__dev_finish(m, loss, correct);
}

/* ---- data parallel (kiln_model_compute_grads, kiln_model_apply_grads) ----
 *
 * The replica's gradient leaves the device for the caller's host buffer
 * (the flat layout of nn/model.c: each layer's kernel at l->goff, its bias
 * after), the caller sums it over the replicas, and apply uploads the sum
 * and updates on the device. Staged through the host, the sum runs on
 * kiln's communicator like the CPU path's, on every backend, and a replica
 * on a GPU, one on the CPU table and one on the CPU's fused path can be in
 * one group; the gradient crosses PCIe twice a step (for the MNIST models
 * well under a millisecond; an NCCL sum of device buffers would not).
 *
 * fp16: compute scales the loss by this replica's scaler, apply unscales
 * the sum and checks it. Every replica holds the same sum, so every
 * replica's scaler takes the same decision and skips the same steps. */
int kiln__dev_compute_grads(kiln_model *m, const float *x, const uint8_t *y, int n, float scale,
                            float *grads, float *loss, int *correct)
{
    kiln__devmodel *v = m->dv;
    kiln_layer *last = m->layers[m->nl - 1];
    dev_layer *DL = &v->L[m->nl - 1];
    size_t dim = (size_t)m->h * m->w * m->c;
    int rc = 0;
    if (v->flight >= 0 || v->nstaged)
        return fail(m, "%s: a pipelined step is running or staged", m->device);
    if (n < 1 || n > m->batch)
        return fail(m, "batch of %d examples, compiled for 1..%d", n, m->batch);
    if (v->dev_stale && (rc = push(m))) return rc;
    if (put_labels(m, 0, y, n)) return -1;
    CK(m, v->be->upload(v->d, v->lab[0], v->hlab[0], sizeof(int32_t) * (size_t)n),
       "uploading a batch");
    CK(m, v->be->upload(v->d, v->in[0], x, sizeof(float) * (size_t)n * dim), "uploading a batch");
    v->bn_kept = v->scaling;
    if (v->scaling && (rc = keep_bn_stats(m, 0))) goto out;
    if ((rc = forward(m, v->in[0], n, 1))) goto out;
    CK(m,
       v->be->xent(v->d, DL->out, v->lab[0], n, (int)out_size(last), DL->dout,
                   scale * (v->scaling ? v->scaler.scale : 1.0f), v->loss, (int *)(v->loss + 1)),
       "cross-entropy");
    if ((rc = backward(m, v->in[0], n))) goto out;
    v->host_stale = 1; /* batch norm's running statistics moved */
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        const dev_layer *D = &v->L[i];
        if (l->ob < 0) continue;
        CK(m, v->be->download(v->d, grads + l->goff, D->dw, sizeof(float) * l->nw),
           "reading the gradients");
        CK(m, v->be->download(v->d, grads + l->goff + l->nw, D->db, sizeof(float) * l->nb),
           "reading the gradients");
    }
    CK(m, v->be->download(v->d, v->hloss, v->loss, 2 * sizeof(float)), "reading the loss");
    if (loss) *loss = v->hloss[0];
    if (correct) memcpy(correct, v->hloss + 1, sizeof(int));
out:
    return rc;
}

int kiln__dev_apply_grads(kiln_model *m, const float *grads)
{
    kiln__devmodel *v = m->dv;
    int rc = 0, apply = 1;
    if (v->flight >= 0 || v->nstaged)
        return fail(m, "%s: a pipelined step is running or staged", m->device);
    if (v->dev_stale && (rc = push(m))) return rc;
    m->step++;
    set_hyper(m);
    CK(m, v->be->upload_ordered(v->d, v->hyper, v->hhyper, sizeof(float) * KILN__HYPER_MAX),
       "uploading the learning rate");
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        const dev_layer *D = &v->L[i];
        if (l->ob < 0) continue;
        CK(m, v->be->upload(v->d, D->dw, grads + l->goff, sizeof(float) * l->nw),
           "uploading the gradients");
        CK(m, v->be->upload(v->d, D->db, grads + l->goff + l->nw, sizeof(float) * l->nb),
           "uploading the gradients");
    }
    if (v->scaling && (rc = unscale(m, v->scaler.scale, &apply))) goto out;
    /* a skipped step leaves batch norm's statistics as they were before
     * this replica's forward (a replica with no examples ran none) */
    if (apply)
        rc = optimize(m);
    else if (v->bn_kept)
        rc = keep_bn_stats(m, 1);
    v->bn_kept = 0;
    if (!rc) CK(m, v->be->sync(v->d), "training step");
    v->host_stale = 1;
out:
    if (rc) m->step--;
    return rc;
}

/* Drops whatever is staged (fit stopping early). */
void kiln__dev_unstage(kiln_model *m)
{
    kiln__devmodel *v = m->dv;
    if (!v) return;
    v->be->sync(v->d);
    v->staged[0] = v->staged[1] = 0;
    v->nstaged = 0;
}

/* ---- inference ---- */

/* Uploads n examples into a free slot and runs the inference forward pass
 * on them; the logits are in the last layer's out. */
static int infer(kiln_model *m, const float *x, const uint8_t *y, int n, int *slot)
{
    kiln__devmodel *v = m->dv;
    int s = free_slot(v), rc = 0;
    size_t dim = (size_t)m->h * m->w * m->c;
    if (s < 0) return fail(m, "%s: both input slots are in use", m->device);
    if (v->dev_stale && (rc = push(m))) return rc;
    if (y) {
        if (put_labels(m, s, y, n)) return -1;
        CK(m, v->be->upload(v->d, v->lab[s], v->hlab[s], sizeof(int32_t) * (size_t)n),
           "uploading labels");
    }
    CK(m, v->be->upload(v->d, v->in[s], x, sizeof(float) * (size_t)n * dim), "uploading a batch");
    rc = forward(m, v->in[s], n, 0);
    *slot = s;
out:
    return rc;
}

int kiln__dev_eval_sums(kiln_model *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                        size_t *correct)
{
    kiln__devmodel *v = m->dv;
    kiln_layer *last = m->layers[m->nl - 1];
    dev_layer *DL = &v->L[m->nl - 1];
    size_t dim = (size_t)m->h * m->w * m->c, ok = 0;
    double tl = 0.0;
    int rc = 0, s = 0;
    for (size_t i = 0; i < n; i += (size_t)m->batch) {
        int b = n - i < (size_t)m->batch ? (int)(n - i) : m->batch;
        if ((rc = infer(m, x + i * dim, y + i, b, &s))) return rc;
        CK(m,
           v->be->xent(v->d, DL->out, v->lab[s], b, (int)out_size(last), NULL, 1.0f, v->loss,
                       (int *)(v->loss + 1)),
           "cross-entropy");
        CK(m, v->be->download(v->d, v->hloss, v->loss, 2 * sizeof(float)), "reading the loss");
        int c;
        memcpy(&c, v->hloss + 1, sizeof c);
        tl += (double)v->hloss[0] * b;
        ok += (size_t)c;
    }
    *loss_sum = tl;
    *correct = ok;
out:
    return rc;
}

int kiln__dev_predict(kiln_model *m, const float *x, int n, float *out)
{
    kiln__devmodel *v = m->dv;
    kiln_layer *last = m->layers[m->nl - 1];
    int rc, s = 0;
    if ((rc = infer(m, x, NULL, n, &s))) return rc;
    CK(m,
       v->be->download(v->d, out, v->L[m->nl - 1].out, sizeof(float) * (size_t)n * out_size(last)),
       "reading the logits");
out:
    return rc;
}
