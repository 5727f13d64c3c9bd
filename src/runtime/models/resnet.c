/* models/resnet.c - ResNet-50 v1.5 on the CPU ops (see resnet.h).
 *
 * The network is a stem unit, 16 bottleneck blocks and a head. A "unit" is
 * conv -> batch norm [-> ReLU]; a block is units a (1x1), b (3x3, carries
 * the stride: v1.5), c (1x1, no ReLU) and, where the shape changes, a
 * projection unit; its output is relu(c + shortcut). Activations a backward
 * pass needs are kept per unit; buffers that depend on the batch shape are
 * (re)made when the shape changes. */
#include "models/resnet.h"

#include "kiln/tensor.h"
#include "ops/ops.h"
#include "optim/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_MOMENTUM 0.1f
#define BN_EPS      1e-5f
#define N_BLOCKS    16
/* unit parameter buffers: w, gamma, beta; each with gradient and momentum */
#define MAX_BUFS (3 * (1 + 4 * N_BLOCKS) + 2)

static const int stage_blocks[4] = {3, 4, 6, 3};

typedef struct unit {
    int cin, cout, k, stride, pad, relu;
    kiln_conv_shape s; /* for the current batch */
    float *w, *gamma, *beta, *rmean, *rvar, *mean, *invstd;
    float *dw, *dgamma, *dbeta, *vw, *vgamma, *vbeta, *db_unused;
    const float *in; /* input activation (not owned) */
    float *conv, *out, *dconv, *dout;
    size_t in_n, out_n;
} unit;

typedef struct block {
    unit a, b, c, down;
    int has_down;
    float *y, *dy, *dx_short; /* output, its gradient, the projection's input gradient */
} block;

struct kiln_resnet {
    kiln_resnet_cfg cfg;
    int ref;
    unit stem;
    block blk[N_BLOCKS];
    int c4; /* channels out of the last stage */
    float *fc_w, *fc_b, *dfc_w, *dfc_b, *vfc_w, *vfc_b;
    /* batch buffers */
    int n, size, s1, s2, s5;
    const float *x;
    float *padded, *dpadded, *pooled, *dpooled, *feat, *dfeat, *logits, *dlogits;
    int32_t *idx;
    kiln_pool_shape pool, gap;
    kiln_opt_buf bufs[MAX_BUFS];
    int nbufs;
    size_t params;
};

/* ---- construction ---- */

static float *falloc_or(int *fail, size_t n)
{
    float *p = kiln_falloc(n);
    if (!p) *fail = 1;
    return p;
}

static void uniform(kiln_rng *g, float *p, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (2.0f * kiln_rng_uniform(g) - 1.0f) * a;
}

static void unit_init(kiln_resnet *r, unit *u, int cin, int cout, int k, int stride, int relu,
                      kiln_rng *g, int *fail)
{
    size_t nw = (size_t)k * k * cin * cout;
    *u = (unit){.cin = cin, .cout = cout, .k = k, .stride = stride, .pad = k / 2, .relu = relu};
    u->w = falloc_or(fail, nw);
    u->dw = falloc_or(fail, nw);
    u->vw = falloc_or(fail, nw);
    u->gamma = falloc_or(fail, cout);
    u->beta = falloc_or(fail, cout);
    u->rmean = falloc_or(fail, cout);
    u->rvar = falloc_or(fail, cout);
    u->mean = falloc_or(fail, cout);
    u->invstd = falloc_or(fail, cout);
    u->dgamma = falloc_or(fail, cout);
    u->dbeta = falloc_or(fail, cout);
    u->vgamma = falloc_or(fail, cout);
    u->vbeta = falloc_or(fail, cout);
    u->db_unused = falloc_or(fail, cout);
    if (*fail) return;
    uniform(g, u->w, nw, sqrtf(6.0f / (float)(k * k * cin))); /* He uniform */
    for (int c = 0; c < cout; c++) {
        u->gamma[c] = 1.0f;
        u->rvar[c] = 1.0f;
    }
    r->bufs[r->nbufs++] = (kiln_opt_buf){.p = u->w, .g = u->dw, .s1 = u->vw, .n = nw};
    r->bufs[r->nbufs++] = (kiln_opt_buf){.p = u->gamma, .g = u->dgamma, .s1 = u->vgamma, .n = cout};
    r->bufs[r->nbufs++] = (kiln_opt_buf){.p = u->beta, .g = u->dbeta, .s1 = u->vbeta, .n = cout};
    r->params += nw + 2 * (size_t)cout;
}

static void unit_free_batch(unit *u)
{
    kiln_ffree(u->conv), kiln_ffree(u->out), kiln_ffree(u->dconv), kiln_ffree(u->dout);
    u->conv = u->out = u->dconv = u->dout = NULL;
}

static void unit_free(unit *u)
{
    float *f[] = {u->w,    u->dw,     u->vw,     u->gamma, u->beta,   u->rmean, u->rvar,
                  u->mean, u->invstd, u->dgamma, u->dbeta, u->vgamma, u->vbeta, u->db_unused};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
    unit_free_batch(u);
}

kiln_resnet *kiln_resnet_create(const kiln_resnet_cfg *cfg, char *err, size_t errlen)
{
    kiln_resnet *r;
    kiln_rng g;
    int fail = 0, cin, w = cfg->width;

    if (w < 1 || w > 1024 || cfg->classes < 1) {
        snprintf(err, errlen, "resnet: width must be 1..1024 and classes >= 1");
        return NULL;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "resnet: out of memory");
        return NULL;
    }
    r->cfg = *cfg;
    r->ref = cfg->use_ref;
    kiln_rng_seed(&g, cfg->seed);
    unit_init(r, &r->stem, 3, w, 7, 2, 1, &g, &fail);
    r->stem.pad = 3;
    cin = w;
    for (int st = 0, bi = 0; st < 4; st++) {
        int width = w << st, cout = 4 * width;
        for (int i = 0; i < stage_blocks[st]; i++, bi++) {
            block *b = &r->blk[bi];
            int stride = i == 0 && st > 0 ? 2 : 1;
            unit_init(r, &b->a, cin, width, 1, 1, 1, &g, &fail);
            unit_init(r, &b->b, width, width, 3, stride, 1, &g, &fail);
            unit_init(r, &b->c, width, cout, 1, 1, 0, &g, &fail);
            b->has_down = i == 0;
            if (b->has_down) unit_init(r, &b->down, cin, cout, 1, stride, 0, &g, &fail);
            cin = cout;
        }
    }
    r->c4 = cin;
    size_t nfc = (size_t)cin * cfg->classes;
    r->fc_w = falloc_or(&fail, nfc);
    r->dfc_w = falloc_or(&fail, nfc);
    r->vfc_w = falloc_or(&fail, nfc);
    r->fc_b = falloc_or(&fail, cfg->classes);
    r->dfc_b = falloc_or(&fail, cfg->classes);
    r->vfc_b = falloc_or(&fail, cfg->classes);
    if (fail) {
        snprintf(err, errlen, "resnet: out of memory");
        kiln_resnet_destroy(r);
        return NULL;
    }
    uniform(&g, r->fc_w, nfc, 1.0f / sqrtf((float)cin));
    uniform(&g, r->fc_b, cfg->classes, 1.0f / sqrtf((float)cin));
    r->bufs[r->nbufs++] = (kiln_opt_buf){.p = r->fc_w, .g = r->dfc_w, .s1 = r->vfc_w, .n = nfc};
    r->bufs[r->nbufs++] =
        (kiln_opt_buf){.p = r->fc_b, .g = r->dfc_b, .s1 = r->vfc_b, .n = cfg->classes};
    r->params += nfc + cfg->classes;
    return r;
}

static void free_batch(kiln_resnet *r)
{
    unit_free_batch(&r->stem);
    for (int i = 0; i < N_BLOCKS; i++) {
        block *b = &r->blk[i];
        unit_free_batch(&b->a), unit_free_batch(&b->b), unit_free_batch(&b->c);
        if (b->has_down) unit_free_batch(&b->down);
        kiln_ffree(b->y), kiln_ffree(b->dy), kiln_ffree(b->dx_short);
        b->y = b->dy = b->dx_short = NULL;
    }
    float *f[] = {r->padded, r->dpadded, r->pooled, r->dpooled,
                  r->feat,   r->dfeat,   r->logits, r->dlogits};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
    r->padded = r->dpadded = r->pooled = r->dpooled = NULL;
    r->feat = r->dfeat = r->logits = r->dlogits = NULL;
    free(r->idx);
    r->idx = NULL;
    r->n = r->size = 0;
}

void kiln_resnet_destroy(kiln_resnet *r)
{
    if (!r) return;
    free_batch(r);
    unit_free(&r->stem);
    for (int i = 0; i < N_BLOCKS; i++) {
        unit_free(&r->blk[i].a), unit_free(&r->blk[i].b), unit_free(&r->blk[i].c);
        if (r->blk[i].has_down) unit_free(&r->blk[i].down);
    }
    float *f[] = {r->fc_w, r->fc_b, r->dfc_w, r->dfc_b, r->vfc_w, r->vfc_b};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        kiln_ffree(f[i]);
    free(r);
}

size_t kiln_resnet_param_count(const kiln_resnet *r)
{
    return r->params;
}

int kiln_resnet_buffer(kiln_resnet *r, int i, float **p, const float **g, size_t *n)
{
    if (i < 0) return r->nbufs;
    if (i >= r->nbufs) return -1;
    *p = r->bufs[i].p;
    *g = r->bufs[i].g;
    *n = r->bufs[i].n;
    return 0;
}

/* conv output size, the formula of kiln_conv_shape_init */
static int conv_out(int size, int k, int stride, int pad)
{
    return (size + 2 * pad - k) / stride + 1;
}

int kiln_resnet_spatial(int size, int out[5])
{
    if (size < 32) return -1;
    int s = conv_out(size, 7, 2, 3);
    out[0] = (s + 2 - 3) / 2 + 1; /* 3x3/2 max pool, padding 1 */
    out[1] = out[0];
    for (int st = 1; st < 4; st++)
        out[st + 1] = conv_out(out[st], 3, 2, 1);
    return 0;
}

/* ---- batch buffers ---- */

static int unit_prepare(unit *u, const float *in, int n, int size, int *fail)
{
    if (kiln_conv_shape_init(&u->s, n, size, size, u->cin, u->cout, u->k, u->k, u->stride,
                             u->pad)) {
        *fail = 1;
        return size;
    }
    u->in = in;
    u->in_n = (size_t)n * size * size * u->cin;
    u->out_n = (size_t)n * u->s.oh * u->s.ow * u->cout;
    u->conv = falloc_or(fail, u->out_n);
    u->out = falloc_or(fail, u->out_n);
    u->dconv = falloc_or(fail, u->out_n);
    u->dout = falloc_or(fail, u->out_n);
    return u->s.oh;
}

static kiln_err prepare(kiln_resnet *r, const float *x, int n, int size, char *err, size_t errlen)
{
    int sp[5], fail = 0, s, w = r->cfg.width;
    const float *in;

    r->x = x;
    r->stem.in = x;
    if (n == r->n && size == r->size) return KILN_OK;
    free_batch(r);
    if (n < 1 || kiln_resnet_spatial(size, sp)) {
        snprintf(err, errlen, "resnet: need n >= 1 and images of at least 32x32, got %d of %dx%d",
                 n, size, size);
        return KILN_EINVAL;
    }
    r->s1 = unit_prepare(&r->stem, x, n, size, &fail);
    if (fail) goto out;
    /* the max pool's padding, done by hand: its input is post-ReLU (>= 0),
     * so zero padding gives the same maxima as -inf padding */
    r->padded = falloc_or(&fail, (size_t)n * (r->s1 + 2) * (r->s1 + 2) * w);
    r->dpadded = falloc_or(&fail, (size_t)n * (r->s1 + 2) * (r->s1 + 2) * w);
    if (kiln_pool_shape_init(&r->pool, n, r->s1 + 2, r->s1 + 2, w, 3, 2)) fail = 1;
    if (fail) goto out;
    r->s2 = r->pool.oh;
    r->pooled = falloc_or(&fail, (size_t)n * r->s2 * r->s2 * w);
    r->dpooled = falloc_or(&fail, (size_t)n * r->s2 * r->s2 * w);
    r->idx = malloc(sizeof(int32_t) * (size_t)n * r->s2 * r->s2 * w);
    if (!r->idx) fail = 1;
    in = r->pooled;
    s = r->s2;
    for (int i = 0; i < N_BLOCKS && !fail; i++) {
        block *b = &r->blk[i];
        int s_in = s;
        s = unit_prepare(&b->a, in, n, s_in, &fail);
        s = unit_prepare(&b->b, b->a.out, n, s, &fail);
        s = unit_prepare(&b->c, b->b.out, n, s, &fail);
        if (b->has_down) {
            unit_prepare(&b->down, in, n, s_in, &fail);
            b->dx_short = falloc_or(&fail, b->a.in_n);
        }
        b->y = falloc_or(&fail, b->c.out_n);
        b->dy = falloc_or(&fail, b->c.out_n);
        in = b->y;
    }
    if (fail) goto out;
    r->s5 = s;
    if (kiln_pool_shape_init(&r->gap, n, s, s, r->c4, s, 1)) fail = 1;
    r->feat = falloc_or(&fail, (size_t)n * r->c4);
    r->dfeat = falloc_or(&fail, (size_t)n * r->c4);
    r->logits = falloc_or(&fail, (size_t)n * r->cfg.classes);
    r->dlogits = falloc_or(&fail, (size_t)n * r->cfg.classes);
out:
    if (fail) {
        free_batch(r);
        snprintf(err, errlen, "resnet: out of memory for a batch of %d at %dx%d", n, size, size);
        return KILN_ENOMEM;
    }
    r->n = n;
    r->size = size;
    return KILN_OK;
}

/* ---- forward ---- */

#define OP(r, name, ...) ((r)->ref ? name##_ref(__VA_ARGS__) : name(__VA_ARGS__))

/* In place: the fast elementwise ops take restrict pointers, so in-place
 * calls would break their contract. Same arithmetic as the ops. */
static void relu_inplace(float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

static void add_into(float *d, const float *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

static void unit_fwd(kiln_resnet *r, unit *u, int training)
{
    int M = u->s.n * u->s.oh * u->s.ow;
    OP(r, kiln_conv2d_fwd, &u->s, u->in, u->w, NULL, u->conv, 0);
    if (training)
        OP(r, kiln_bn_fwd_train, u->conv, u->gamma, u->beta, u->out, u->mean, u->invstd, u->rmean,
           u->rvar, BN_MOMENTUM, BN_EPS, M, u->cout);
    else
        kiln_bn_fwd_infer(u->conv, u->gamma, u->beta, u->rmean, u->rvar, BN_EPS, u->out, M,
                          u->cout);
    if (u->relu) relu_inplace(u->out, u->out_n);
}

static void pad_copy(const float *src, float *dst, int n, int s, int c)
{
    int sp = s + 2;
    memset(dst, 0, sizeof(float) * (size_t)n * sp * sp * c);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < s; y++)
            memcpy(dst + (((size_t)i * sp + y + 1) * sp + 1) * c,
                   src + (((size_t)i * s + y) * s) * c, sizeof(float) * (size_t)s * c);
}

static void crop_copy(const float *src, float *dst, int n, int s, int c)
{
    int sp = s + 2;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < s; y++)
            memcpy(dst + (((size_t)i * s + y) * s) * c,
                   src + (((size_t)i * sp + y + 1) * sp + 1) * c, sizeof(float) * (size_t)s * c);
}

kiln_err kiln_resnet_forward(kiln_resnet *r, const float *x, int n, int size, float *logits,
                             int training, char *err, size_t errlen)
{
    kiln_err e = prepare(r, x, n, size, err, errlen);
    if (e != KILN_OK) return e;
    unit_fwd(r, &r->stem, training);
    pad_copy(r->stem.out, r->padded, n, r->s1, r->cfg.width);
    OP(r, kiln_maxpool_fwd, &r->pool, r->padded, r->pooled, r->idx);
    for (int i = 0; i < N_BLOCKS; i++) {
        block *b = &r->blk[i];
        unit_fwd(r, &b->a, training);
        unit_fwd(r, &b->b, training);
        unit_fwd(r, &b->c, training);
        if (b->has_down) unit_fwd(r, &b->down, training);
        OP(r, kiln_add_fwd, b->c.out, b->has_down ? b->down.out : b->a.in, b->y, b->c.out_n);
        relu_inplace(b->y, b->c.out_n);
    }
    OP(r, kiln_avgpool_fwd, &r->gap, r->blk[N_BLOCKS - 1].y, r->feat);
    OP(r, kiln_dense_fwd, r->feat, r->fc_w, r->fc_b, r->logits, n, r->c4, r->cfg.classes, 0);
    if (logits) memcpy(logits, r->logits, sizeof(float) * (size_t)n * r->cfg.classes);
    return KILN_OK;
}

/* ---- backward ---- */

/* u->dout holds d(loss)/d(unit output); writes d(loss)/d(unit input) to dx
 * (NULL: not needed) and the parameter gradients. */
static void unit_bwd(kiln_resnet *r, unit *u, float *dx)
{
    int M = u->s.n * u->s.oh * u->s.ow;
    if (u->relu) OP(r, kiln_relu_bwd, u->out, u->dout, u->dout, u->out_n);
    OP(r, kiln_bn_bwd, u->conv, u->gamma, u->mean, u->invstd, u->dout, u->dconv, u->dgamma,
       u->dbeta, M, u->cout);
    OP(r, kiln_conv2d_bwd, &u->s, u->in, u->w, u->conv, u->dconv, dx, u->dw, u->db_unused, 0);
}

static void backward(kiln_resnet *r)
{
    int n = r->n;
    block *last = &r->blk[N_BLOCKS - 1];
    OP(r, kiln_dense_bwd, r->feat, r->fc_w, r->logits, r->dlogits, r->dfeat, r->dfc_w, r->dfc_b, n,
       r->c4, r->cfg.classes, 0);
    OP(r, kiln_avgpool_bwd, &r->gap, r->dfeat, last->dy);
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        block *b = &r->blk[i];
        float *dx = i > 0 ? r->blk[i - 1].dy : r->dpooled;
        /* through the final ReLU: the gradient of c + shortcut */
        OP(r, kiln_relu_bwd, b->y, b->dy, b->c.dout, b->c.out_n);
        if (b->has_down) memcpy(b->down.dout, b->c.dout, sizeof(float) * b->c.out_n);
        unit_bwd(r, &b->c, b->b.dout);
        unit_bwd(r, &b->b, b->a.dout);
        unit_bwd(r, &b->a, dx);
        if (b->has_down) {
            unit_bwd(r, &b->down, b->dx_short);
            add_into(dx, b->dx_short, b->a.in_n);
        } else {
            add_into(dx, b->c.dout, b->a.in_n);
        }
    }
    OP(r, kiln_maxpool_bwd, &r->pool, r->dpooled, r->idx, r->dpadded);
    crop_copy(r->dpadded, r->stem.dout, n, r->s1, r->cfg.width);
    unit_bwd(r, &r->stem, NULL);
}

kiln_err kiln_resnet_train_step(kiln_resnet *r, const float *x, const uint8_t *labels, int n,
                                int size, float lr, float momentum, float *loss, char *err,
                                size_t errlen)
{
    kiln_err e;
    for (int i = 0; i < n; i++)
        if (labels[i] >= r->cfg.classes) {
            snprintf(err, errlen, "resnet: label %d of row %d is not below %d classes", labels[i],
                     i, r->cfg.classes);
            return KILN_EINVAL;
        }
    e = kiln_resnet_forward(r, x, n, size, NULL, 1, err, errlen);
    if (e != KILN_OK) return e;
    *loss = OP(r, kiln_xent, r->logits, labels, n, r->cfg.classes, r->dlogits, NULL);
    backward(r);
    if (r->ref)
        for (int i = 0; i < r->nbufs; i++)
            kiln_sgd_update_ref(r->bufs[i].p, r->bufs[i].g, r->bufs[i].s1, r->bufs[i].n, lr,
                                momentum);
    else
        kiln_sgd_update(r->bufs, r->nbufs, lr, momentum);
    return KILN_OK;
}
