/* nn/model.c - layers and the sequential model: shapes, buffers, forward,
 * backward, optimizer step, and the named-state table for checkpoints.
 *
 * Memory: compile allocates every activation, gradient, parameter and
 * optimizer buffer once, for the compiled batch size; a training step
 * allocates nothing. Layer i reads layer i-1's output (or the caller's input
 * for i = 0) and writes the gradient w.r.t. that input into layer i-1's
 * `dout`. Flatten owns no buffers: its out/dout alias its input's. */
#include "kiln/train.h"

#include "backend/backend.h"
#include "core/pool.h"
#include "kiln/cuda.h"
#include "nn/model_int.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/optim.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define fail kiln__model_fail

int kiln__model_fail(kiln_model *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof(m->err), fmt, ap);
    va_end(ap);
    return -1;
}

static kiln_layer *layer_new(layer_kind kind)
{
    kiln_layer *l = calloc(1, sizeof(*l));
    if (l) l->kind = kind;
    return l;
}

kiln_layer *kiln_dense(int units, kiln_activation act)
{
    kiln_layer *l = layer_new(L_DENSE);
    if (l) {
        l->units = units;
        l->act = act;
    }
    return l;
}

kiln_layer *kiln_conv2d(int filters, int kernel, int stride, int padding, kiln_activation act)
{
    kiln_layer *l = layer_new(L_CONV);
    if (l) {
        l->units = filters;
        l->k = kernel;
        l->stride = stride;
        l->pad = padding == KILN_SAME ? (kernel - 1) / 2 : padding;
        l->act = act;
    }
    return l;
}

static kiln_layer *pool_new(layer_kind kind, int size, int stride)
{
    kiln_layer *l = layer_new(kind);
    if (l) {
        l->k = size;
        l->stride = stride;
    }
    return l;
}

kiln_layer *kiln_maxpool2d(int size, int stride)
{
    return pool_new(L_MAXPOOL, size, stride);
}

kiln_layer *kiln_avgpool2d(int size, int stride)
{
    return pool_new(L_AVGPOOL, size, stride);
}

kiln_layer *kiln_batchnorm(float momentum, float eps)
{
    kiln_layer *l = layer_new(L_BN);
    if (l) {
        l->bn_momentum = momentum;
        l->bn_eps = eps;
    }
    return l;
}

kiln_layer *kiln_relu(void)
{
    return layer_new(L_RELU);
}

kiln_layer *kiln_flatten(void)
{
    return layer_new(L_FLATTEN);
}

kiln_optimizer kiln_sgd(float lr, float momentum)
{
    return (kiln_optimizer){.kind = KILN_OPT_SGD, .lr = lr, .momentum = momentum};
}

kiln_optimizer kiln_adam(float lr)
{
    return (kiln_optimizer){
        .kind = KILN_OPT_ADAM, .lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

kiln_model *kiln_model_new(int h, int w, int c)
{
    if (h < 1 || w < 1 || c < 1) return NULL;
    kiln_model *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->h = h;
    m->w = w;
    m->c = c;
    snprintf(m->device, sizeof m->device, "/cpu:0");
    return m;
}

static void layer_free(kiln_layer *l)
{
    if (!l) return;
    float *f[] = {l->w, l->b, l->dw, l->db, l->run_mean, l->run_var, l->mean, l->invstd};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        kiln_ffree(f[i]);
    if (l->owns_out) {
        kiln_ffree(l->out);
        kiln_ffree(l->dout);
    }
    free(l->idx);
    free(l);
}

void kiln_model_free(kiln_model *m)
{
    if (!m) return;
    kiln__dev_free(m);
    for (int i = 0; i < m->nl; i++)
        layer_free(m->layers[i]);
    free(m->layers);
    for (size_t i = 0; i < m->nbufs; i++)
        free(m->names[i]); /* the data is freed with its layer or optimizer slot */
    for (int i = 0; i < m->nobufs; i++) {
        kiln_ffree(m->obufs[i].s1);
        kiln_ffree(m->obufs[i].s2);
    }
    kiln_ffree(m->dlogits);
    free(m);
}

int kiln_model_add(kiln_model *m, kiln_layer *layer)
{
    if (!layer) return fail(m, "out of memory creating a layer");
    if (m->compiled) {
        layer_free(layer);
        return fail(m, "cannot add layers after compile");
    }
    if (m->nl == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        kiln_layer **nl = realloc(m->layers, sizeof(*nl) * (size_t)cap);
        if (!nl) {
            layer_free(layer);
            return fail(m, "out of memory adding a layer");
        }
        m->layers = nl;
        m->cap = cap;
    }
    m->layers[m->nl++] = layer;
    return 0;
}

const char *kiln_model_error(const kiln_model *m)
{
    return m->err;
}

static size_t out_size(const kiln_layer *l)
{
    return (size_t)l->oh * l->ow * l->oc;
}

static int add_buf(kiln_model *m, const char *lname, const char *suffix, int is_param, float *data,
                   int ndim, const int *shape)
{
    if (m->nbufs == MAX_BUFS) return fail(m, "too many state buffers");
    size_t len = strlen(lname) + strlen(suffix) + 2;
    char *name = malloc(len);
    if (!name) return fail(m, "out of memory");
    snprintf(name, len, "%s/%s", lname, suffix);
    kiln_buffer *b = &m->bufs[m->nbufs];
    m->names[m->nbufs++] = name;
    *b = (kiln_buffer){.name = name, .is_param = is_param, .ndim = ndim, .data = data, .size = 1};
    for (int i = 0; i < ndim; i++) {
        b->shape[i] = shape[i];
        b->size *= (size_t)shape[i];
    }
    return 0;
}

/* A parameter plus its gradient and optimizer slots. */
static int add_param(kiln_model *m, const char *lname, const char *pname, float *p, float *g,
                     int ndim, const int *shape, int fusable)
{
    if (add_buf(m, lname, pname, 1, p, ndim, shape)) return -1;
    size_t n = m->bufs[m->nbufs - 1].size;
    kiln_opt_buf *ob = &m->obufs[m->nobufs++];
    *ob = (kiln_opt_buf){.p = p, .g = g, .n = n};
    /* SGD on dense/conv weights: the backward GEMM accumulates straight into
     * the momentum buffer (ops.h, kiln_dense_bwd_acc) */
    ob->fused = m->opt.kind == KILN_OPT_SGD && fusable;
    ob->s1 = kiln_falloc(n);
    if (m->opt.kind == KILN_OPT_ADAM) ob->s2 = kiln_falloc(n);
    if (!ob->s1 || (m->opt.kind == KILN_OPT_ADAM && !ob->s2))
        return fail(m, "out of memory for optimizer state");
    char full[96];
    snprintf(full, sizeof(full), "%s/%s", lname, pname);
    if (m->opt.kind == KILN_OPT_SGD) return add_buf(m, full, "momentum", 0, ob->s1, ndim, shape);
    if (add_buf(m, full, "adam_m", 0, ob->s1, ndim, shape)) return -1;
    return add_buf(m, full, "adam_v", 0, ob->s2, ndim, shape);
}

static void init_uniform(kiln_rng *r, float *p, size_t n, float bound)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (2.0f * kiln_rng_uniform(r) - 1.0f) * bound;
}

int kiln_model_compile(kiln_model *m, kiln_optimizer opt, kiln_loss loss, int batch_size,
                       uint64_t seed)
{
    if (m->compiled) return fail(m, "model already compiled");
    if (m->nl == 0) return fail(m, "model has no layers");
    if (batch_size < 1) return fail(m, "batch size must be >= 1, got %d", batch_size);
    if (loss != KILN_SOFTMAX_XENT) return fail(m, "unknown loss %d", (int)loss);
    kiln_blas_init();
    m->opt = opt;
    m->batch = batch_size;
    kiln_rng_seed(&m->rng, seed);
    int h = m->h, w = m->w, c = m->c, B = batch_size;
    int counts[8] = {0};
    const char *kname[] = {"dense",      "conv2d", "max_pool", "avg_pool",
                           "batch_norm", "relu",   "flatten"};
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        l->ih = h;
        l->iw = w;
        l->ic = c;
        l->ob = -1;
        snprintf(l->name, sizeof(l->name), "%s_%d", kname[l->kind], i);
        (void)counts;
        switch (l->kind) {
        case L_DENSE:
            if (l->units < 1) return fail(m, "%s: units must be >= 1", l->name);
            l->oh = l->ow = 1;
            l->oc = l->units;
            break;
        case L_CONV: {
            kiln_conv_shape s;
            if (l->units < 1 ||
                kiln_conv_shape_init(&s, B, h, w, c, l->units, l->k, l->k, l->stride, l->pad))
                return fail(m, "%s: bad conv shape for input %dx%dx%d", l->name, h, w, c);
            l->oh = s.oh;
            l->ow = s.ow;
            l->oc = l->units;
            break;
        }
        case L_MAXPOOL:
        case L_AVGPOOL: {
            kiln_pool_shape s;
            if (kiln_pool_shape_init(&s, B, h, w, c, l->k, l->stride))
                return fail(m, "%s: window %d does not fit input %dx%d", l->name, l->k, h, w);
            l->oh = s.oh;
            l->ow = s.ow;
            l->oc = c;
            break;
        }
        case L_BN:
        case L_RELU:
            l->oh = h;
            l->ow = w;
            l->oc = c;
            break;
        case L_FLATTEN:
            l->oh = l->ow = 1;
            l->oc = h * w * c;
            break;
        }
        h = l->oh;
        w = l->ow;
        c = l->oc;
        /* buffers */
        if (l->kind == L_FLATTEN) {
            l->out = i ? m->layers[i - 1]->out : NULL; /* set per step for i == 0 */
            l->dout = i ? m->layers[i - 1]->dout : NULL;
        } else {
            l->out = kiln_falloc((size_t)B * out_size(l));
            l->dout = kiln_falloc((size_t)B * out_size(l));
            l->owns_out = 1;
            if (!l->out || !l->dout) return fail(m, "out of memory for activations");
        }
        if (l->kind == L_MAXPOOL && !(l->idx = malloc(sizeof(int32_t) * (size_t)B * out_size(l))))
            return fail(m, "out of memory");
        if (l->kind == L_DENSE || l->kind == L_CONV) {
            size_t fan_in =
                l->kind == L_DENSE ? (size_t)l->ih * l->iw * l->ic : (size_t)l->k * l->k * l->ic;
            l->nw = fan_in * l->oc;
            l->nb = l->oc;
            l->w = kiln_falloc(l->nw);
            l->b = kiln_falloc(l->nb);
            l->dw = kiln_falloc(l->nw);
            l->db = kiln_falloc(l->nb);
            if (!l->w || !l->b || !l->dw || !l->db) return fail(m, "out of memory for parameters");
            float bound = 1.0f / sqrtf((float)fan_in);
            init_uniform(&m->rng, l->w, l->nw, bound);
            init_uniform(&m->rng, l->b, l->nb, bound);
            int wshape[4] = {l->k, l->k, l->ic, l->oc}, dshape[2] = {(int)fan_in, l->oc};
            l->ob = m->nobufs;
            if (add_param(m, l->name, "kernel", l->w, l->dw, l->kind == L_CONV ? 4 : 2,
                          l->kind == L_CONV ? wshape : dshape, 1) ||
                add_param(m, l->name, "bias", l->b, l->db, 1, &l->oc, 1))
                return -1;
            if (m->opt.kind == KILN_OPT_SGD && l->kind == L_DENSE) /* step in backward */
                m->obufs[m->nobufs - 2].fused = m->obufs[m->nobufs - 1].fused = 2;
            if (m->opt.kind == KILN_OPT_SGD) { /* gradients land in the momentum slots */
                l->gw = m->obufs[m->nobufs - 2].s1;
                l->gb = m->obufs[m->nobufs - 1].s1;
                l->gbeta = m->opt.momentum;
            } else {
                l->gw = l->dw;
                l->gb = l->db;
            }
        }
        if (l->kind == L_BN) {
            l->nw = l->nb = (size_t)c;
            l->w = kiln_falloc(c);
            l->b = kiln_falloc(c);
            l->dw = kiln_falloc(c);
            l->db = kiln_falloc(c);
            l->run_mean = kiln_falloc(c);
            l->run_var = kiln_falloc(c);
            l->mean = kiln_falloc(c);
            l->invstd = kiln_falloc(c);
            if (!l->w || !l->b || !l->dw || !l->db || !l->run_mean || !l->run_var || !l->mean ||
                !l->invstd)
                return fail(m, "out of memory for batch norm");
            for (int j = 0; j < c; j++)
                l->w[j] = l->run_var[j] = 1.0f;
            l->ob = m->nobufs;
            if (add_param(m, l->name, "gamma", l->w, l->dw, 1, &c, 0) ||
                add_param(m, l->name, "beta", l->b, l->db, 1, &c, 0) ||
                add_buf(m, l->name, "moving_mean", 0, l->run_mean, 1, &c) ||
                add_buf(m, l->name, "moving_variance", 0, l->run_var, 1, &c))
                return -1;
        }
    }
    if (!(m->dlogits = kiln_falloc((size_t)B * c))) return fail(m, "out of memory");
    /* the flat gradient layout of kiln_grad_sync: reverse layer order */
    m->grad_count = 0;
    for (int i = m->nl - 1; i >= 0; i--) {
        kiln_layer *l = m->layers[i];
        if (l->ob < 0) continue;
        l->goff = m->grad_count;
        m->grad_count += l->nw + l->nb;
    }
    if (!m->dv && (m->precision == KILN_PRECISION_BF16 || m->precision == KILN_PRECISION_FP16))
        return fail(m, "precision %s: set the device before the precision",
                    kiln_precision_name(m->precision));
    if (m->dv && kiln__dev_compile(m)) return -1;
    m->compiled = 1;
    return 0;
}

/* ---- devices (train.h) ---- */

int kiln_model_set_device(kiln_model *m, const char *device)
{
    kiln_device_spec spec;
    char err[256], name[48];
    const kiln__backend *be;
    if (m->compiled) return fail(m, "set the device before compile");
    if (kiln_device_parse(device, &spec, err, sizeof err) != KILN_OK) return fail(m, "%s", err);
    kiln_device_format(&spec, name, sizeof name);
    kiln__dev_free(m);
    m->dv_auto = 0;
    snprintf(m->device, sizeof m->device, "%s", name);
    if (spec.kind == KILN_DEVICE_CPU) {
        /* KILN_CPU_DEVICE_TABLE=1: the CPU through the backend table, the
         * code path a GPU runs (tests on machines without one); =ref: the
         * same on the reference ops (tests' high-accuracy reference) */
        const char *t = getenv("KILN_CPU_DEVICE_TABLE");
        if (t && strcmp(t, "ref") == 0) return kiln__dev_open(m, &kiln__backend_cpu_ref, 0);
        if (!(t && strcmp(t, "1") == 0)) return 0;
        return kiln__dev_open(m, &kiln__backend_cpu, 0);
    }
    if (!(be = kiln__backend_cuda(err, sizeof err))) return fail(m, "%s: %s", name, err);
    return kiln__dev_open(m, be, spec.index);
}

const char *kiln_model_device(const kiln_model *m)
{
    return m->device;
}

const char *kiln_model_device_name(const kiln_model *m)
{
    return kiln__dev_describe(m);
}

int kiln_precision_parse(const char *s)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", "fp16"};
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

const char *kiln_precision_name(kiln_precision p)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", "fp16"};
    return (unsigned)p < 4 ? names[p] : "unknown";
}

int kiln_model_set_precision(kiln_model *m, kiln_precision p)
{
    if (m->compiled) return fail(m, "set the precision before compile");
    /* back from bf16/fp16 on /cpu:0: the CPU's own path again */
    if (m->dv_auto && p != KILN_PRECISION_BF16 && p != KILN_PRECISION_FP16) {
        kiln__dev_free(m);
        m->dv_auto = 0;
    }
    switch (p) {
    case KILN_PRECISION_FP32:
        break;
    case KILN_PRECISION_TF32:
        if (!m->dv || strncmp(m->device, "/cpu", 4) == 0)
            return fail(m,
                        "precision tf32 needs a GPU (TF32 is a tensor-core format); %s "
                        "computes in fp32",
                        m->device);
        break;
    case KILN_PRECISION_BF16:
    case KILN_PRECISION_FP16:
        /* the CPU's fused path is fp32 only: mixed precision on /cpu:0 runs
         * through the CPU's backend table (the reference of the rounding) */
        if (!m->dv) {
            if (kiln__dev_open(m, &kiln__backend_cpu, 0)) return -1;
            m->dv_auto = 1;
        }
        break;
    default:
        return fail(m, "unknown precision %d", (int)p);
    }
    m->precision = p;
    return 0;
}

float kiln_model_loss_scale(const kiln_model *m, uint64_t *skipped)
{
    return kiln__dev_loss_scale(m, skipped);
}

int kiln_model_get_loss_scale_state(const kiln_model *m, kiln_loss_scale_state *st)
{
    if (kiln__dev_get_scaler(m, st) == 0) return 0;
    return fail((kiln_model *)m, "the loss scale: the model is not compiled in fp16");
}

int kiln_model_set_loss_scale_state(kiln_model *m, const kiln_loss_scale_state *st)
{
    /* the scaler's own bounds (cuda/lossscale.c): 2^-24 .. 2^24 */
    if (!(st->scale >= 1.0f / 16777216.0f && st->scale <= 16777216.0f))
        return fail(m, "loss scale %g is outside [2^-24, 2^24]", (double)st->scale);
    if (st->growth_interval < 1 || st->good_steps < 0 || st->good_steps >= st->growth_interval)
        return fail(m,
                    "loss scaler: growth interval %d, %d good steps: expected 0 <= good steps "
                    "< interval",
                    st->growth_interval, st->good_steps);
    if (kiln__dev_set_scaler(m, st) == 0) return 0;
    return fail(m, "the loss scale: the model is not compiled in fp16");
}

int kiln_model_sync_host(kiln_model *m)
{
    return kiln__dev_pull(m);
}

int kiln_model_batch_size(const kiln_model *m)
{
    return m->batch;
}

size_t kiln_model_input_dim(const kiln_model *m)
{
    return (size_t)m->h * m->w * m->c;
}

int kiln_model_num_classes(const kiln_model *m)
{
    return m->nl ? (int)out_size(m->layers[m->nl - 1]) : 0;
}

double kiln_model_forward_macs(const kiln_model *m)
{
    double macs = 0.0;
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        if (l->kind == L_DENSE || l->kind == L_CONV) macs += (double)l->nw * l->oh * l->ow;
    }
    return macs;
}

double kiln_model_train_flops(const kiln_model *m)
{
    double flops = 0.0;
    int first = 1;
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        if (l->kind != L_DENSE && l->kind != L_CONV) continue;
        double macs = (double)l->nw * l->oh * l->ow;
        flops += 2.0 * macs * (first ? 2.0 : 3.0);
        first = 0;
    }
    return flops;
}

void kiln_model_summary(const kiln_model *m, FILE *f)
{
    size_t total = 0;
    fprintf(f, "%-16s %-18s %10s\n", "layer", "output (NHWC)", "params");
    for (int i = 0; i < m->nl; i++) {
        const kiln_layer *l = m->layers[i];
        size_t np = l->nw + l->nb;
        total += np;
        char shp[48];
        snprintf(shp, sizeof(shp), "%dx%dx%d", l->oh, l->ow, l->oc);
        fprintf(f, "%-16s %-18s %10zu\n", l->name, shp, np);
    }
    fprintf(f, "total params: %zu\n", total);
}

static const float *layer_input(const kiln_model *m, int i)
{
    return i ? m->layers[i - 1]->out : m->in;
}

static void forward(kiln_model *m, int n, int training)
{
    for (int i = 0; i < m->nl; i++) {
        kiln_layer *l = m->layers[i];
        const float *x = layer_input(m, i);
        switch (l->kind) {
        case L_DENSE:
            kiln_dense_fwd(x, l->w, l->b, l->out, n, l->ih * l->iw * l->ic, l->oc, l->act);
            break;
        case L_CONV: {
            kiln_conv_shape s;
            kiln_conv_shape_init(&s, n, l->ih, l->iw, l->ic, l->oc, l->k, l->k, l->stride, l->pad);
            kiln_conv2d_fwd(&s, x, l->w, l->b, l->out, l->act);
            break;
        }
        case L_MAXPOOL:
        case L_AVGPOOL: {
            kiln_pool_shape s;
            kiln_pool_shape_init(&s, n, l->ih, l->iw, l->ic, l->k, l->stride);
            if (l->kind == L_MAXPOOL)
                kiln_maxpool_fwd(&s, x, l->out, l->idx);
            else
                kiln_avgpool_fwd(&s, x, l->out);
            break;
        }
        case L_BN: {
            int M = n * l->ih * l->iw;
            if (training)
                kiln_bn_fwd_train(x, l->w, l->b, l->out, l->mean, l->invstd, l->run_mean,
                                  l->run_var, l->bn_momentum, l->bn_eps, M, l->ic);
            else
                kiln_bn_fwd_infer(x, l->w, l->b, l->run_mean, l->run_var, l->bn_eps, l->out, M,
                                  l->ic);
            break;
        }
        case L_RELU:
            kiln_relu_fwd(x, l->out, (size_t)n * out_size(l));
            break;
        case L_FLATTEN:
            if (i == 0) l->out = (float *)m->in; /* never written through: next layer only reads */
            break;
        }
    }
}

/* Where backward writes gradients. NULL: the single-replica step (gradients
 * into dw/db or fused into the optimizer slots). Otherwise: plain gradients
 * (beta 0) into the flat buffer, and each completed bucket is announced. */
typedef struct grad_dst {
    const kiln_grad_sync *s;
    size_t *offsets, *counts;
    int failed;
} grad_dst;

static void bucket_done(const grad_dst *g, int b)
{
    if (b < 0 || !g->s->bucket_ready) return;
    grad_dst *gm = (grad_dst *)g;
    if (!gm->failed && g->s->bucket_ready(g->s->ud, b, g->s->grads + g->offsets[b], g->counts[b]))
        gm->failed = 1;
}

static void backward(kiln_model *m, int n, const grad_dst *g)
{
    float *G = g ? g->s->grads : NULL;
    for (int i = m->nl - 1; i >= 0; i--) {
        kiln_layer *l = m->layers[i];
        const float *x = layer_input(m, i);
        /* no input gradient below the first layer with parameters */
        float *dx = i ? m->layers[i - 1]->dout : NULL;
        int need_dx = 0;
        for (int j = 0; j < i; j++)
            need_dx |= m->layers[j]->nw > 0;
        if (!need_dx) dx = NULL;
        switch (l->kind) {
        case L_DENSE:
            if (G)
                kiln_dense_bwd_acc(x, l->w, l->out, l->dout, dx, G + l->goff, G + l->goff + l->nw,
                                   n, l->ih * l->iw * l->ic, l->oc, l->act, 0.0f);
            else if (m->opt.kind == KILN_OPT_SGD) /* the step happens inside (fused == 2) */
                kiln_dense_bwd_sgd(x, l->w, l->b, l->out, l->dout, dx, l->gw, l->gb, n,
                                   l->ih * l->iw * l->ic, l->oc, l->act, l->gbeta, m->opt.lr);
            else
                kiln_dense_bwd_acc(x, l->w, l->out, l->dout, dx, l->gw, l->gb, n,
                                   l->ih * l->iw * l->ic, l->oc, l->act, l->gbeta);
            break;
        case L_CONV: {
            kiln_conv_shape s;
            kiln_conv_shape_init(&s, n, l->ih, l->iw, l->ic, l->oc, l->k, l->k, l->stride, l->pad);
            if (G)
                kiln_conv2d_bwd_acc(&s, x, l->w, l->out, l->dout, dx, G + l->goff,
                                    G + l->goff + l->nw, l->act, 0.0f);
            else
                kiln_conv2d_bwd_acc(&s, x, l->w, l->out, l->dout, dx, l->gw, l->gb, l->act,
                                    l->gbeta);
            break;
        }
        case L_MAXPOOL:
        case L_AVGPOOL: {
            if (!dx) break;
            kiln_pool_shape s;
            kiln_pool_shape_init(&s, n, l->ih, l->iw, l->ic, l->k, l->stride);
            if (l->kind == L_MAXPOOL)
                kiln_maxpool_bwd(&s, l->dout, l->idx, dx);
            else
                kiln_avgpool_bwd(&s, l->dout, dx);
            break;
        }
        case L_BN: {
            /* BN always needs its own dgamma/dbeta; dx only if something below learns */
            float *tmp = dx ? dx : kiln__scratch(0, 3, (size_t)n * out_size(l));
            kiln_bn_bwd(x, l->w, l->mean, l->invstd, l->dout, tmp, G ? G + l->goff : l->dw,
                        G ? G + l->goff + l->nw : l->db, n * l->ih * l->iw, l->ic);
            break;
        }
        case L_RELU:
            if (dx) kiln_relu_bwd(l->out, l->dout, dx, (size_t)n * out_size(l));
            break;
        case L_FLATTEN:
            break; /* dout aliases the input's dout */
        }
        if (g) bucket_done(g, l->close_b);
    }
}

int kiln_model_train_step(kiln_model *m, const float *x, const uint8_t *y, int n, float *loss,
                          int *correct)
{
    if (!m->compiled) return fail(m, "model is not compiled");
    if (n < 1 || n > m->batch)
        return fail(m, "batch of %d examples, compiled for 1..%d", n, m->batch);
    if (m->dv) return kiln__dev_train_step(m, x, y, n, loss, correct);
    m->in = x;
    forward(m, n, 1);
    kiln_layer *last = m->layers[m->nl - 1];
    int K = (int)out_size(last);
    for (int i = 0; i < n; i++)
        if (y[i] >= K) return fail(m, "label %d out of range for %d classes", y[i], K);
    float l = kiln_xent(last->out, y, n, K, last->dout, correct);
    if (loss) *loss = l;
    backward(m, n, NULL);
    m->step++;
    if (m->opt.kind == KILN_OPT_SGD)
        kiln_sgd_update(m->obufs, m->nobufs, m->opt.lr, m->opt.momentum);
    else
        kiln_adam_update(m->obufs, m->nobufs, m->opt.lr, m->opt.beta1, m->opt.beta2, m->opt.eps,
                         m->step);
    return 0;
}

/* ---- gradient sync (train.h) ---- */

size_t kiln_model_grad_count(const kiln_model *m)
{
    return m->grad_count;
}

/* Layer-granular buckets in reverse layer order: a bucket closes after the
 * layer that brings it to bucket_bytes, and the first layer with parameters
 * (the last one differentiated) always closes the final bucket, which also
 * carries the caller's extra floats. Sets every layer's close_b when `set`. */
static int plan_buckets(kiln_model *m, size_t bucket_bytes, size_t extra, size_t *offsets,
                        size_t *counts, int max, int set)
{
    int first = -1; /* lowest layer index with parameters */
    for (int i = 0; i < m->nl && first < 0; i++)
        if (m->layers[i]->ob >= 0) first = i;
    int nb = 0;
    size_t off = 0, cur = 0;
    for (int i = m->nl - 1; i >= 0; i--) {
        kiln_layer *l = m->layers[i];
        if (set) l->close_b = -1;
        if (l->ob < 0) continue;
        cur += l->nw + l->nb;
        int close = i == first || (bucket_bytes > 0 && cur * sizeof(float) >= bucket_bytes);
        if (!close) continue;
        if (i == first) cur += extra;
        if (nb < max && offsets) offsets[nb] = off;
        if (nb < max && counts) counts[nb] = cur;
        if (set) l->close_b = nb;
        nb++;
        off += cur;
        cur = 0;
    }
    if (first < 0) { /* no parameters: one bucket of just the extra floats */
        if (max > 0 && offsets) offsets[0] = 0;
        if (max > 0 && counts) counts[0] = extra;
        nb = 1;
    }
    return nb;
}

int kiln_model_grad_buckets(const kiln_model *m, size_t bucket_bytes, size_t extra, size_t *offsets,
                            size_t *counts, int max)
{
    return plan_buckets((kiln_model *)m, bucket_bytes, extra, offsets, counts, max, 0);
}

#define MAX_BUCKETS 256

int kiln_model_compute_grads(kiln_model *m, const float *x, const uint8_t *y, int n, float scale,
                             const kiln_grad_sync *s, float *loss, int *correct)
{
    if (!m->compiled) return fail(m, "model is not compiled");
    if (!s || !s->grads) return fail(m, "gradient sync without a gradient buffer");
    if (n < 0 || n > m->batch)
        return fail(m, "batch of %d examples, compiled for 0..%d", n, m->batch);
    size_t offsets[MAX_BUCKETS], counts[MAX_BUCKETS];
    int nb = plan_buckets(m, s->bucket_bytes, s->extra, offsets, counts, MAX_BUCKETS, 1);
    if (nb > MAX_BUCKETS)
        return fail(m, "%d gradient buckets, at most %d: use a larger bucket size", nb,
                    MAX_BUCKETS);
    grad_dst g = {.s = s, .offsets = offsets, .counts = counts};
    if (loss) *loss = 0.0f;
    if (correct) *correct = 0;
    if (n == 0) {
        /* nothing of the global batch landed here: contribute zeros, but
         * take part in every bucket's sum like the others */
        memset(s->grads, 0, sizeof(float) * m->grad_count);
        for (int b = 0; b < nb; b++)
            bucket_done(&g, b);
        return g.failed ? fail(m, "gradient sync failed") : 0;
    }
    if (m->dv) {
        /* the device's gradient, staged in the host buffer, then announced
         * bucket by bucket (model_dev.c says why through the host) */
        if (kiln__dev_compute_grads(m, x, y, n, scale, s->grads, loss, correct)) return -1;
        for (int b = 0; b < nb; b++)
            bucket_done(&g, b);
        return g.failed ? fail(m, "gradient sync failed") : 0;
    }
    m->in = x;
    forward(m, n, 1);
    kiln_layer *last = m->layers[m->nl - 1];
    int K = (int)out_size(last);
    for (int i = 0; i < n; i++)
        if (y[i] >= K) return fail(m, "label %d out of range for %d classes", y[i], K);
    float l = kiln_xent(last->out, y, n, K, last->dout, correct);
    if (loss) *loss = l;
    if (scale != 1.0f) { /* the weight of this replica's slice in the global mean */
        size_t nd = (size_t)n * (size_t)K;
        for (size_t i = 0; i < nd; i++)
            last->dout[i] *= scale;
    }
    backward(m, n, &g);
    return g.failed ? fail(m, "gradient sync failed") : 0;
}

int kiln_model_apply_grads(kiln_model *m, const kiln_grad_sync *s)
{
    if (!m->compiled) return fail(m, "model is not compiled");
    if (!s || !s->grads) return fail(m, "gradient sync without a gradient buffer");
    if (s->apply && m->dv)
        return fail(m, "%s: the sharded optimizer runs on the CPU only", m->device);
    if (s->apply) /* the caller's own update (a sharded optimizer) */
        return s->apply(s->ud, m) ? fail(m, "gradient sync failed") : 0;
    size_t offsets[MAX_BUCKETS], counts[MAX_BUCKETS];
    int nb = plan_buckets(m, s->bucket_bytes, s->extra, offsets, counts, MAX_BUCKETS, 1);
    if (nb > MAX_BUCKETS) return fail(m, "too many gradient buckets");
    if (m->dv) { /* every bucket summed, then one update on the device */
        for (int b = 0; b < nb; b++)
            if (s->bucket_wait && s->bucket_wait(s->ud, b)) return fail(m, "gradient sync failed");
        return kiln__dev_apply_grads(m, s->grads);
    }
    m->step++;
    /* walk the layers in the buffer's (reverse) order, one bucket at a time,
     * so the update of an early bucket overlaps the sums still running */
    int i = m->nl - 1;
    for (int b = 0; b < nb; b++) {
        if (s->bucket_wait && s->bucket_wait(s->ud, b)) {
            m->step--;
            return fail(m, "gradient sync failed");
        }
        int cnt = 0;
        for (; i >= 0; i--) {
            kiln_layer *l = m->layers[i];
            if (l->ob < 0) continue;
            for (int k = 0; k < 2; k++) {
                kiln_opt_buf ob = m->obufs[l->ob + k];
                ob.g = s->grads + l->goff + (k ? l->nw : 0);
                ob.fused = 0;
                m->sbufs[cnt++] = ob;
            }
            if (l->close_b == b) {
                i--;
                break;
            }
        }
        if (cnt == 0) continue;
        if (m->opt.kind == KILN_OPT_SGD)
            kiln_sgd_update(m->sbufs, cnt, m->opt.lr, m->opt.momentum);
        else
            kiln_adam_update(m->sbufs, cnt, m->opt.lr, m->opt.beta1, m->opt.beta2, m->opt.eps,
                             m->step);
    }
    return 0;
}

/* ---- the flat layout, a slice at a time (nn.h: the sharded optimizer) ---- */

/* Calls fn for every piece of [lo, hi) of the flat layout: the optimizer
 * buffer it lies in, the piece's start within that buffer and in the flat
 * layout, and its length. */
typedef void (*piece_fn)(void *ctx, const kiln_opt_buf *ob, size_t at, size_t flat, size_t n);
static void for_pieces(kiln_model *m, size_t lo, size_t hi, piece_fn fn, void *ctx)
{
    for (int i = m->nl - 1; i >= 0; i--) {
        kiln_layer *l = m->layers[i];
        if (l->ob < 0) continue;
        for (int k = 0; k < 2; k++) {
            const kiln_opt_buf *ob = &m->obufs[l->ob + k];
            size_t a = l->goff + (k ? l->nw : 0), b = a + ob->n;
            size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
            if (x < y) fn(ctx, ob, x - a, x, y - x);
        }
    }
}

typedef struct shard_pieces {
    kiln_opt_shard *v;
    int n, max;
    const float *const *srcs;
    int nsrc;
    float *pflat;
} shard_pieces;

static void add_shard(void *ctx, const kiln_opt_buf *ob, size_t at, size_t flat, size_t n)
{
    shard_pieces *c = ctx;
    if (c->n >= c->max) return;
    kiln_opt_shard *d = &c->v[c->n++];
    *d = (kiln_opt_shard){.p = ob->p + at,
                          .s1 = ob->s1 + at,
                          .s2 = ob->s2 ? ob->s2 + at : NULL,
                          .nsrc = c->nsrc,
                          .pout = c->pflat ? c->pflat + flat : NULL,
                          .n = n};
    for (int s = 0; s < c->nsrc; s++)
        d->src[s] = c->srcs[s] + flat;
}

int kiln__model_apply_shard(kiln_model *m, const float *const *srcs, int nsrc, size_t lo, size_t hi,
                            float *pflat, int ref)
{
    static _Thread_local kiln_opt_shard v[MAX_BUFS];
    if (!m->compiled) return fail(m, "model is not compiled");
    if (m->dv) return fail(m, "%s: the sharded optimizer runs on the CPU only", m->device);
    if (nsrc < 1 || nsrc > KILN_OPT_MAX_SRC)
        return fail(m, "sharded step over %d replicas: 1..%d", nsrc, KILN_OPT_MAX_SRC);
    if (hi > m->grad_count) hi = m->grad_count;
    shard_pieces c = {.v = v, .max = MAX_BUFS, .srcs = srcs, .nsrc = nsrc, .pflat = pflat};
    if (lo < hi) for_pieces(m, lo, hi, add_shard, &c);
    m->step++;
    for (int i = 0; ref && i < c.n; i++)
        if (m->opt.kind == KILN_OPT_SGD)
            kiln_sgd_shard_ref(&v[i], m->opt.lr, m->opt.momentum);
        else
            kiln_adam_shard_ref(&v[i], m->opt.lr, m->opt.beta1, m->opt.beta2, m->opt.eps, m->step);
    if (!ref && c.n > 0) {
        if (m->opt.kind == KILN_OPT_SGD)
            kiln_sgd_shard(v, c.n, m->opt.lr, m->opt.momentum);
        else
            kiln_adam_shard(v, c.n, m->opt.lr, m->opt.beta1, m->opt.beta2, m->opt.eps, m->step);
    }
    return 0;
}

typedef struct copy_ctx {
    int which, to_flat;
    float *flat;
} copy_ctx;

static void copy_piece(void *ctx, const kiln_opt_buf *ob, size_t at, size_t flat, size_t n)
{
    copy_ctx *c = ctx;
    float *t = c->which == 0 ? ob->p : c->which == 1 ? ob->s1 : ob->s2;
    if (!t) return;
    if (c->to_flat)
        memcpy(c->flat + flat, t + at, n * sizeof(float));
    else
        memcpy(t + at, c->flat + flat, n * sizeof(float));
}

void kiln__model_flat_copy(kiln_model *m, int which, float *flat, size_t lo, size_t hi, int to_flat)
{
    copy_ctx c = {.which = which, .to_flat = to_flat, .flat = flat};
    if (hi > m->grad_count) hi = m->grad_count;
    if (lo < hi) for_pieces(m, lo, hi, copy_piece, &c);
}

int kiln__model_slots(const kiln_model *m)
{
    return m->opt.kind == KILN_OPT_ADAM ? 2 : 1;
}

int kiln_model_predict(kiln_model *m, const float *x, int n, float *out)
{
    if (!m->compiled) return fail(m, "model is not compiled");
    if (n < 1 || n > m->batch)
        return fail(m, "batch of %d examples, compiled for 1..%d", n, m->batch);
    if (m->dv) return kiln__dev_predict(m, x, n, out);
    m->in = x;
    forward(m, n, 0);
    kiln_layer *last = m->layers[m->nl - 1];
    memcpy(out, last->out, sizeof(float) * (size_t)n * out_size(last));
    return 0;
}

int kiln__model_evaluate_sums(kiln_model *m, const float *x, const uint8_t *y, size_t n,
                              double *loss_sum, size_t *correct)
{
    if (!m->compiled) return fail(m, "model is not compiled");
    if (m->dv) return kiln__dev_eval_sums(m, x, y, n, loss_sum, correct);
    double tl = 0.0;
    size_t ok = 0, dim = kiln_model_input_dim(m);
    kiln_layer *last = m->layers[m->nl - 1];
    int K = (int)out_size(last);
    for (size_t i = 0; i < n; i += (size_t)m->batch) {
        int b = n - i < (size_t)m->batch ? (int)(n - i) : m->batch;
        m->in = x + i * dim;
        forward(m, b, 0);
        int c = 0;
        tl += (double)kiln_xent(last->out, y + i, b, K, NULL, &c) * b;
        ok += (size_t)c;
    }
    *loss_sum = tl;
    *correct = ok;
    return 0;
}

int kiln_model_evaluate(kiln_model *m, const float *x, const uint8_t *y, size_t n, float *loss,
                        float *accuracy)
{
    double tl = 0.0;
    size_t ok = 0;
    if (kiln__model_evaluate_sums(m, x, y, n, &tl, &ok)) return -1;
    if (loss) *loss = n ? (float)(tl / (double)n) : 0.0f;
    if (accuracy) *accuracy = n ? (float)((double)ok / (double)n) : 0.0f;
    return 0;
}

int kiln__model_replica_state(const kiln_model *m)
{
    for (int i = 0; i < m->nl; i++)
        if (m->layers[i]->kind == L_BN) return 1;
    return 0;
}

int kiln__model_on_device(const kiln_model *m)
{
    return m->dv != NULL;
}

size_t kiln_model_num_buffers(const kiln_model *m)
{
    return m->nbufs;
}

kiln_buffer kiln_model_buffer(const kiln_model *m, size_t i)
{
    if (m->dv) {
        /* the host copies: current first, and whatever the caller writes
         * into them goes to the device before the next step. The model is
         * const to the caller; its device bookkeeping is not. */
        kiln_model *mm = (kiln_model *)m;
        kiln__dev_pull(mm);
        kiln__dev_exposed(mm);
    }
    return i < m->nbufs ? m->bufs[i] : (kiln_buffer){0};
}

void kiln_model_set_lr(kiln_model *m, float lr)
{
    m->opt.lr = lr;
}

float kiln_model_lr(const kiln_model *m)
{
    return m->opt.lr;
}

kiln_optimizer kiln_model_optimizer(const kiln_model *m)
{
    return m->opt;
}

uint64_t kiln_model_step(const kiln_model *m)
{
    return m->step;
}

void kiln_model_set_step(kiln_model *m, uint64_t step)
{
    m->step = step;
}

kiln_rng *kiln_model_rng(kiln_model *m)
{
    return &m->rng;
}
