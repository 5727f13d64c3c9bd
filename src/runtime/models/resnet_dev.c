/* models/resnet_dev.c - ResNet-50 v1.5 on a backend table (a GPU, or the
 * CPU table in tests): the network of models/resnet.c, its parameters
 * initialised by that file (the same seed gives the same network on every
 * device), trained with SGD momentum entirely in the device's memory.
 *
 * Memory. A step keeps what the backward pass reads: each unit's
 * convolution output (batch norm's input) and, for units followed by a
 * ReLU, the activated output (the mask and the next convolution's input);
 * a block's output y is written in place (batch norm of c, plus the
 * shortcut, ReLU). Gradients of activations live only while they are
 * needed, in four batch-sized buffers the blocks take in rotation, so the
 * memory of a step is about 2 activations per unit instead of 4: ResNet-50
 * at batch 256, 224x224, fits in about 25 GB (fp32).
 *
 * The step is queued without waiting: the learning rate goes to the device
 * in stream order (upload_ordered), the loss into a pinned host slot that
 * kiln_resnet_dev_wait reads.
 *
 * The input has two slots on the device (double buffering): a batch staged
 * (kiln_resnet_dev_stage) goes up on the copy stream into the slot the last
 * queued step does not read, after the step that read that slot before is
 * done with it (the event `used`), and the step that trains on it waits for
 * its copy (the event `copied`): batch N+1's upload runs while step N
 * computes, and the host never waits for a step to stage the next batch. */
#include "backend/backend.h"
#include "cuda/lossscale.h"
#include "kiln/train.h"
#include "models/resnet.h"
#include "models/resnet_variant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BN_MOMENTUM 0.1f
#define BN_EPS      1e-5f
#define N_BLOCKS    16
#define N_PARAMS    (3 * (1 + 4 * N_BLOCKS) + 2)

static const int stage_blocks[4] = {3, 4, 6, 3};

typedef struct dunit {
    int cin, cout, k, stride, pad, relu;
    kiln_conv_shape s;
    float *w, *gamma, *beta, *rmean, *rvar, *mean, *invstd; /* device */
    float *kmean, *kvar; /* the running statistics before an fp16 step */
    float *dw, *dgamma, *dbeta, *vw, *vgamma, *vbeta;
    float *conv, *out; /* [n, oh, ow, cout]; out only for ReLU units */
    size_t out_n;
} dunit;

typedef struct dblock {
    dunit a, b, c, down;
    int has_down;
    float *y; /* output: relu(bn(c) + shortcut) */
} dblock;

#define PROF_MAX 32
typedef struct prof {
    const char *what[PROF_MAX];
    double secs[PROF_MAX];
    long calls[PROF_MAX];
    int n;
} prof;

typedef struct pbuf {
    float *p, *g, *v;
    size_t n;
} pbuf;

struct kiln_resnet_dev {
    const kiln__backend *be;
    kiln__dev *d;
    char name[160];
    int width, classes, max_n, size, n, c4, s1, s2, s5;
    dunit stem;
    dblock blk[N_BLOCKS];
    float *fc_w, *fc_b, *dfc_w, *dfc_b, *vfc_w, *vfc_b;
    float *x;        /* [max_n, size, size, 3]: the slot the next step reads */
    int32_t *labels; /* [max_n]: its labels */
    float *xs[2];    /* the input's two slots (x is one of them) */
    int32_t *ls[2];
    float *hx[2]; /* pinned host staging of each slot (made by the first stage) */
    int32_t *hl[2];
    void *copied[2], *used[2]; /* events: slot s uploaded; the last step reading it done */
    int cur, staged, staged_n; /* the slot x is; the slot staged (-1: none) and its batch */
    float *padded, *dpadded, *pooled, *feat, *dfeat, *logits, *dlogits;
    float *g[4]; /* activation gradients, in rotation */
    size_t g_n;
    float *tmp;          /* the projection's batch-norm output in the forward pass */
    float *hyper;        /* device: {lr, momentum} */
    float *loss, *hloss; /* device [0] loss, [1] fp16's overflow flag (int); pinned host copy */
    int scaling;         /* fp16: dynamic loss scaling (nn/model_dev.c's rule) */
    unsigned variant;    /* KILN_RV_* (models/resnet_variant.h) */
    kiln_loss_scaler scaler;
    kiln_pool_shape pool, gap;
    pbuf params[N_PARAMS];
    int np;
    prof *prof; /* set during kiln_resnet_dev_profile */
    char err[512];
};

static kiln_err dfail(kiln_resnet_dev *r, const char *what)
{
    snprintf(r->err, sizeof r->err, "%s: %s", what, r->be->error(r->d));
    return KILN_EIO;
}

/* A profiled step (kiln_resnet_dev_profile) waits for the device around
 * every call and adds the time to the call's name. */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void prof_add(prof *p, const char *what, double secs)
{
    int i = 0;
    while (i < p->n && strcmp(p->what[i], what) != 0)
        i++;
    if (i == p->n) {
        if (p->n == PROF_MAX) return;
        p->what[p->n++] = what;
    }
    p->secs[i] += secs;
    p->calls[i]++;
}

#define CK(call, what)                                                                             \
    do {                                                                                           \
        double t0_ = r->prof ? (r->be->sync(r->d), now_s()) : 0.0;                                 \
        if ((call) != 0) {                                                                         \
            rc = dfail(r, (what));                                                                 \
            goto out;                                                                              \
        }                                                                                          \
        if (r->prof) {                                                                             \
            r->be->sync(r->d);                                                                     \
            prof_add(r->prof, (what), now_s() - t0_);                                              \
        }                                                                                          \
    } while (0)

/* Every unit (conv + batch norm) into us, in the parameters' order;
 * returns the count. */
#define MAX_UNITS (1 + 4 * N_BLOCKS)
static int all_units(kiln_resnet_dev *r, dunit **us)
{
    int nu = 0;
    us[nu++] = &r->stem;
    for (int i = 0; i < N_BLOCKS; i++) {
        us[nu++] = &r->blk[i].a, us[nu++] = &r->blk[i].b, us[nu++] = &r->blk[i].c;
        if (r->blk[i].has_down) us[nu++] = &r->blk[i].down;
    }
    return nu;
}

static float *dalloc(kiln_resnet_dev *r, size_t n, int *bad)
{
    void *p = NULL;
    if (*bad) return NULL;
    if (r->be->alloc(r->d, n * sizeof(float), &p)) {
        snprintf(r->err, sizeof r->err, "allocating %zu MB of device memory: %s",
                 n * sizeof(float) >> 20, r->be->error(r->d));
        *bad = 1;
    }
    return p;
}

static void unit_set(dunit *u, int cin, int cout, int k, int stride, int relu)
{
    *u = (dunit){.cin = cin, .cout = cout, .k = k, .stride = stride, .pad = k / 2, .relu = relu};
}

/* parameters (from the host model's buffers p, in kiln_resnet_buffer's
 * order) and the unit's batch buffers for images of `size`; returns the
 * output size */
static int unit_make(kiln_resnet_dev *r, dunit *u, int n, int size, int *bad)
{
    size_t nw = (size_t)u->k * u->k * u->cin * u->cout, c = (size_t)u->cout;
    if (kiln_conv_shape_init(&u->s, n, size, size, u->cin, u->cout, u->k, u->k, u->stride,
                             u->pad)) {
        *bad = 1;
        return size;
    }
    u->w = dalloc(r, nw, bad), u->dw = dalloc(r, nw, bad), u->vw = dalloc(r, nw, bad);
    u->gamma = dalloc(r, c, bad), u->dgamma = dalloc(r, c, bad), u->vgamma = dalloc(r, c, bad);
    u->beta = dalloc(r, c, bad), u->dbeta = dalloc(r, c, bad), u->vbeta = dalloc(r, c, bad);
    u->rmean = dalloc(r, c, bad), u->rvar = dalloc(r, c, bad);
    u->mean = dalloc(r, c, bad), u->invstd = dalloc(r, c, bad);
    u->kmean = dalloc(r, c, bad), u->kvar = dalloc(r, c, bad);
    u->out_n = (size_t)n * u->s.oh * u->s.ow * u->cout;
    u->conv = dalloc(r, u->out_n, bad);
    if (u->relu) u->out = dalloc(r, u->out_n, bad);
    if (u->out_n > r->g_n) r->g_n = u->out_n;
    if (!*bad) {
        r->params[r->np++] = (pbuf){u->w, u->dw, u->vw, nw};
        r->params[r->np++] = (pbuf){u->gamma, u->dgamma, u->vgamma, c};
        r->params[r->np++] = (pbuf){u->beta, u->dbeta, u->vbeta, c};
    }
    return u->s.oh;
}

static void unit_free(kiln_resnet_dev *r, dunit *u)
{
    float *f[] = {u->w,      u->dw,    u->vw,    u->gamma, u->dgamma, u->vgamma,
                  u->beta,   u->dbeta, u->vbeta, u->rmean, u->rvar,   u->mean,
                  u->invstd, u->conv,  u->out,   u->kmean, u->kvar};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i]) r->be->free(r->d, f[i]);
}

void kiln_resnet_dev_destroy(kiln_resnet_dev *r)
{
    if (!r) return;
    if (r->d) {
        dunit *us[MAX_UNITS];
        int nu = all_units(r, us);
        r->be->sync(r->d);
        for (int i = 0; i < nu; i++)
            unit_free(r, us[i]);
        for (int i = 0; i < N_BLOCKS; i++)
            if (r->blk[i].y) r->be->free(r->d, r->blk[i].y);
        float *f[] = {r->fc_w,   r->fc_b,    r->dfc_w,   r->dfc_b,  r->vfc_w, r->vfc_b,
                      r->xs[0],  r->padded,  r->dpadded, r->pooled, r->feat,  r->dfeat,
                      r->logits, r->dlogits, r->g[0],    r->g[1],   r->g[2],  r->g[3],
                      r->tmp,    r->hyper,   r->loss,    r->xs[1]};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i]) r->be->free(r->d, f[i]);
        for (int s = 0; s < 2; s++) {
            if (r->ls[s]) r->be->free(r->d, r->ls[s]);
            if (r->hx[s]) r->be->host_free(r->d, r->hx[s]);
            if (r->hl[s]) r->be->host_free(r->d, r->hl[s]);
            if (r->copied[s]) r->be->event_free(r->d, r->copied[s]);
            if (r->used[s]) r->be->event_free(r->d, r->used[s]);
        }
        if (r->hloss) r->be->host_free(r->d, r->hloss);
        r->be->close(r->d);
    }
    free(r);
}

/* The host model's initial values into the device buffers, in
 * kiln_resnet_buffer's order, and the running variances (1). */
static kiln_err upload_init(kiln_resnet_dev *r, const kiln_resnet_cfg *cfg)
{
    kiln_err rc = KILN_OK;
    char err[256];
    kiln_resnet *h = kiln_resnet_create(cfg, err, sizeof err);
    float *ones = NULL;
    if (!h) {
        snprintf(r->err, sizeof r->err, "%s", err);
        return KILN_ENOMEM;
    }
    int nb = kiln_resnet_buffer(h, -1, NULL, NULL, NULL);
    if (nb != r->np) {
        snprintf(r->err, sizeof r->err, "resnet: %d parameter buffers here, %d on the host", r->np,
                 nb);
        rc = KILN_EINVAL;
        goto out;
    }
    for (int i = 0; i < nb; i++) {
        float *p;
        const float *g;
        size_t n;
        kiln_resnet_buffer(h, i, &p, &g, &n);
        if (n != r->params[i].n) {
            snprintf(r->err, sizeof r->err, "resnet: buffer %d holds %zu values, %zu on the host",
                     i, r->params[i].n, n);
            rc = KILN_EINVAL;
            goto out;
        }
        CK(r->be->upload(r->d, r->params[i].p, p, n * sizeof(float)), "uploading parameters");
    }
    /* running variances start at 1, as on the host */
    size_t most = 4 * (size_t)r->width * 8;
    if (!(ones = malloc(most * sizeof(float)))) {
        rc = KILN_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < most; i++)
        ones[i] = 1.0f;
    dunit *us[MAX_UNITS];
    int nu = all_units(r, us);
    for (int i = 0; i < nu; i++)
        CK(r->be->upload(r->d, us[i]->rvar, ones, (size_t)us[i]->cout * sizeof(float)),
           "initialising batch norm");
out:
    free(ones);
    kiln_resnet_destroy(h);
    return rc;
}

kiln_resnet_dev *kiln_resnet_dev_create(const kiln_resnet_cfg *cfg, const kiln__backend *be,
                                        int index, int precision, int max_n, int size, char *err,
                                        size_t errlen)
{
    kiln_resnet_dev *r = calloc(1, sizeof *r);
    int sp[5], bad = 0, w = cfg->width, s, cin;
    if (!r) {
        snprintf(err, errlen, "resnet: out of memory");
        return NULL;
    }
    r->be = be;
    if (w < 1 || w > 1024 || cfg->classes < 1 || max_n < 1 || kiln_resnet_spatial(size, sp)) {
        snprintf(r->err, sizeof r->err,
                 "resnet: need width 1..1024, classes >= 1, a batch >= 1 and images of at least "
                 "32x32 (got width %d, %d classes, batch %d, %dx%d)",
                 w, cfg->classes, max_n, size, size);
        goto fail;
    }
    if (be->open(index, &r->d, r->err, sizeof r->err)) goto fail;
    be->describe(r->d, r->name, sizeof r->name);
    if (precision == KILN_PRECISION_TF32 && be->set_tf32(r->d, 1)) {
        dfail(r, "turning TF32 on");
        goto fail;
    }
    /* bf16, fp16: the convolutions and the classifier on rounded inputs
     * with fp32 sums (backend.h); batch norm, its statistics, the loss and
     * SGD stay fp32; fp16 scales the loss (kiln_resnet_dev_step) */
    if ((precision == KILN_PRECISION_BF16 || precision == KILN_PRECISION_FP16) &&
        be->set_precision(r->d,
                          precision == KILN_PRECISION_BF16 ? KILN__LOWP_BF16 : KILN__LOWP_FP16)) {
        dfail(r, "setting mixed precision");
        goto fail;
    }
    if (precision == KILN_PRECISION_FP16) {
        kiln_loss_scaler_init(&r->scaler);
        r->scaling = 1;
    }
    r->width = w;
    r->classes = cfg->classes;
    r->max_n = max_n;
    r->size = size;
    /* the network, in kiln_resnet_create's order of parameters */
    unit_set(&r->stem, 3, w, 7, 2, 1);
    r->stem.pad = 3;
    r->s1 = unit_make(r, &r->stem, max_n, size, &bad);
    if (kiln_pool_shape_init(&r->pool, max_n, r->s1 + 2, r->s1 + 2, w, 3, 2)) bad = 1;
    r->s2 = r->pool.oh;
    cin = w;
    s = r->s2;
    for (int st = 0, bi = 0; st < 4; st++) {
        int width = w << st, cout = 4 * width;
        for (int i = 0; i < stage_blocks[st]; i++, bi++) {
            dblock *b = &r->blk[bi];
            int stride = i == 0 && st > 0 ? 2 : 1, s_in = s;
            unit_set(&b->a, cin, width, 1, 1, 1);
            unit_set(&b->b, width, width, 3, stride, 1);
            unit_set(&b->c, width, cout, 1, 1, 0);
            s = unit_make(r, &b->a, max_n, s_in, &bad);
            s = unit_make(r, &b->b, max_n, s, &bad);
            s = unit_make(r, &b->c, max_n, s, &bad);
            b->has_down = i == 0;
            if (b->has_down) {
                unit_set(&b->down, cin, cout, 1, stride, 0);
                unit_make(r, &b->down, max_n, s_in, &bad);
            }
            b->y = dalloc(r, b->c.out_n, &bad);
            cin = cout;
        }
    }
    r->c4 = cin;
    r->s5 = s;
    if (kiln_pool_shape_init(&r->gap, max_n, s, s, r->c4, s, 1)) bad = 1;
    size_t nfc = (size_t)r->c4 * cfg->classes, px = (size_t)max_n * (r->s1 + 2) * (r->s1 + 2) * w;
    r->fc_w = dalloc(r, nfc, &bad), r->dfc_w = dalloc(r, nfc, &bad),
    r->vfc_w = dalloc(r, nfc, &bad);
    r->fc_b = dalloc(r, cfg->classes, &bad), r->dfc_b = dalloc(r, cfg->classes, &bad);
    r->vfc_b = dalloc(r, cfg->classes, &bad);
    if (!bad) {
        r->params[r->np++] = (pbuf){r->fc_w, r->dfc_w, r->vfc_w, nfc};
        r->params[r->np++] = (pbuf){r->fc_b, r->dfc_b, r->vfc_b, (size_t)cfg->classes};
    }
    for (int sl = 0; sl < 2; sl++)
        r->xs[sl] = dalloc(r, (size_t)max_n * size * size * 3, &bad);
    r->x = r->xs[0];
    r->staged = -1;
    r->padded = dalloc(r, px, &bad), r->dpadded = dalloc(r, px, &bad);
    r->pooled = dalloc(r, (size_t)max_n * r->s2 * r->s2 * w, &bad);
    r->feat = dalloc(r, (size_t)max_n * r->c4, &bad);
    r->dfeat = dalloc(r, (size_t)max_n * r->c4, &bad);
    r->logits = dalloc(r, (size_t)max_n * cfg->classes, &bad);
    r->dlogits = dalloc(r, (size_t)max_n * cfg->classes, &bad);
    for (int i = 0; i < 4; i++)
        r->g[i] = dalloc(r, r->g_n, &bad);
    r->tmp = dalloc(r, r->g_n, &bad);
    r->hyper = dalloc(r, KILN__HYPER_MAX, &bad);
    r->loss = dalloc(r, 2, &bad);
    if (!bad && (be->alloc(r->d, sizeof(int32_t) * (size_t)max_n, (void **)&r->ls[0]) ||
                 be->alloc(r->d, sizeof(int32_t) * (size_t)max_n, (void **)&r->ls[1]) ||
                 be->host_alloc(r->d, 2 * sizeof(float), (void **)&r->hloss))) {
        dfail(r, "allocating");
        bad = 1;
    }
    r->labels = r->ls[0];
    for (int sl = 0; !bad && sl < 2; sl++)
        if (be->event_create(r->d, &r->copied[sl]) || be->event_create(r->d, &r->used[sl])) {
            dfail(r, "creating the input's events");
            bad = 1;
        }
    if (bad || upload_init(r, cfg) != KILN_OK || be->sync(r->d)) {
        if (!bad && !r->err[0]) dfail(r, "initialising");
        goto fail;
    }
    r->n = max_n;
    return r;
fail:
    snprintf(err, errlen, "%s", r->err[0] ? r->err : "resnet: out of memory");
    kiln_resnet_dev_destroy(r);
    return NULL;
}

const char *kiln_resnet_dev_name(const kiln_resnet_dev *r)
{
    return r->name;
}

const char *kiln_resnet_dev_error(const kiln_resnet_dev *r)
{
    return r->err;
}

/* Sets every shape to a batch of n (<= max_n): the conv shapes' n. */
static void set_batch(kiln_resnet_dev *r, int n)
{
    dunit *us[MAX_UNITS];
    if (n == r->n) return;
    int nu = all_units(r, us);
    for (int i = 0; i < nu; i++) {
        dunit *u = us[i];
        u->s.n = n;
        u->out_n = (size_t)n * u->s.oh * u->s.ow * u->cout;
    }
    r->pool.n = r->gap.n = n;
    r->n = n;
}

static kiln_err check_batch(kiln_resnet_dev *r, const int32_t *labels, int n)
{
    if (n < 1 || n > r->max_n) {
        snprintf(r->err, sizeof r->err, "resnet: a batch of %d, built for 1..%d", n, r->max_n);
        return KILN_EINVAL;
    }
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= r->classes) {
            snprintf(r->err, sizeof r->err, "resnet: label %d of row %d is not below %d classes",
                     labels[i], i, r->classes);
            return KILN_EINVAL;
        }
    return KILN_OK;
}

kiln_err kiln_resnet_dev_load(kiln_resnet_dev *r, const float *x, const int32_t *labels, int n)
{
    kiln_err rc = check_batch(r, labels, n);
    if (rc) return rc;
    if (r->staged >= 0) {
        snprintf(r->err, sizeof r->err, "resnet: a staged batch waits for its step; load after it");
        return KILN_EINVAL;
    }
    set_batch(r, n);
    CK(r->be->upload(r->d, r->x, x, sizeof(float) * (size_t)n * r->size * r->size * 3),
       "uploading images");
    CK(r->be->upload(r->d, r->labels, labels, sizeof(int32_t) * (size_t)n), "uploading labels");
out:
    return rc;
}

kiln_err kiln_resnet_dev_stage(kiln_resnet_dev *r, const float *x, const int32_t *labels, int n)
{
    kiln_err rc = check_batch(r, labels, n);
    const kiln__backend *be = r->be;
    int s = 1 - r->cur;
    size_t xb = sizeof(float) * (size_t)n * r->size * r->size * 3, lb = sizeof(int32_t) * (size_t)n;
    if (rc) return rc;
    if (r->staged >= 0) {
        snprintf(r->err, sizeof r->err, "resnet: a batch is staged already; step before the next");
        return KILN_EINVAL;
    }
    if (!r->hx[s] && (be->host_alloc(r->d, sizeof(float) * (size_t)r->max_n * r->size * r->size * 3,
                                     (void **)&r->hx[s]) ||
                      be->host_alloc(r->d, sizeof(int32_t) * (size_t)r->max_n, (void **)&r->hl[s])))
        return dfail(r, "allocating the input's staging");
    /* the slot's last upload has left its pinned copy (the host waits for
     * a copy two batches back, so it runs at most two steps ahead) */
    CK(be->event_sync(r->d, r->copied[s]), "waiting for the input's copy");
    memcpy(r->hx[s], x, xb);
    memcpy(r->hl[s], labels, lb);
    /* on the device: after the last step that read slot s, before the step
     * that will */
    CK(be->event_wait(r->d, r->used[s], KILN__STREAM_COPY), "staging a batch");
    CK(be->upload_staged(r->d, r->xs[s], r->hx[s], xb), "uploading images");
    CK(be->upload_staged(r->d, r->ls[s], r->hl[s], lb), "uploading labels");
    CK(be->event_record(r->d, r->copied[s], KILN__STREAM_COPY), "staging a batch");
    r->staged = s, r->staged_n = n;
out:
    return rc;
}

/* ---- forward ---- */

/* conv -> batch norm (into `into`, default the unit's out) [-> ReLU] */
static kiln_err unit_fwd(kiln_resnet_dev *r, dunit *u, const float *in, float *into, int training)
{
    kiln_err rc = KILN_OK;
    const kiln__backend *be = r->be;
    int M = u->s.n * u->s.oh * u->s.ow;
    float *y = into ? into : u->out;
    CK(be->conv_fwd(r->d, &u->s, in, u->w, NULL, u->conv, 0), "conv");
    if (training && u->relu && (r->variant & KILN_RV_FUSED)) {
        CK(be->bn_fwd_train_add_relu(r->d, u->conv, u->gamma, u->beta, NULL, y, u->mean, u->invstd,
                                     u->rmean, u->rvar, BN_MOMENTUM, BN_EPS, M, u->cout),
           "batch norm + ReLU");
        goto out;
    }
    if (training)
        CK(be->bn_fwd_train(r->d, u->conv, u->gamma, u->beta, y, u->mean, u->invstd, u->rmean,
                            u->rvar, BN_MOMENTUM, BN_EPS, M, u->cout),
           "batch norm");
    else
        CK(be->bn_fwd_infer(r->d, u->conv, u->gamma, u->beta, u->rmean, u->rvar, BN_EPS, y, M,
                            u->cout),
           "batch norm");
    if (u->relu) CK(be->relu_fwd(r->d, y, y, u->out_n), "relu");
out:
    return rc;
}

static kiln_err forward(kiln_resnet_dev *r, int training)
{
    kiln_err rc = KILN_OK;
    const kiln__backend *be = r->be;
    int n = r->n;
    const float *in;
    if ((rc = unit_fwd(r, &r->stem, r->x, NULL, training))) goto out;
    /* the max pool's padding: its input is post-ReLU (>= 0), so zero
     * padding gives the maxima -inf padding would */
    CK(be->pad2d(r->d, r->stem.out, r->padded, n, r->s1, r->width, 1), "pad");
    CK(be->maxpool_fwd(r->d, &r->pool, r->padded, r->pooled), "max pool");
    in = r->pooled;
    for (int i = 0; i < N_BLOCKS; i++) {
        dblock *b = &r->blk[i];
        if ((rc = unit_fwd(r, &b->a, in, NULL, training)) ||
            (rc = unit_fwd(r, &b->b, b->a.out, NULL, training)))
            goto out;
        if (training && (r->variant & KILN_RV_FUSED)) {
            /* the projection first, then c's batch norm, the add and the
             * ReLU in one pass over y */
            const float *res = in;
            if (b->has_down) {
                if ((rc = unit_fwd(r, &b->down, in, r->tmp, training))) goto out;
                res = r->tmp;
            }
            dunit *c = &b->c;
            CK(be->conv_fwd(r->d, &c->s, b->b.out, c->w, NULL, c->conv, 0), "conv");
            CK(be->bn_fwd_train_add_relu(r->d, c->conv, c->gamma, c->beta, res, b->y, c->mean,
                                         c->invstd, c->rmean, c->rvar, BN_MOMENTUM, BN_EPS,
                                         c->s.n * c->s.oh * c->s.ow, c->cout),
               "batch norm + add + ReLU");
            in = b->y;
            continue;
        }
        if ((rc = unit_fwd(r, &b->c, b->b.out, b->y, training))) goto out;
        if (b->has_down) {
            if ((rc = unit_fwd(r, &b->down, in, r->tmp, training))) goto out;
            CK(be->add(r->d, b->y, r->tmp, b->y, b->c.out_n), "add");
        } else {
            CK(be->add(r->d, b->y, in, b->y, b->c.out_n), "add");
        }
        CK(be->relu_fwd(r->d, b->y, b->y, b->c.out_n), "relu");
        in = b->y;
    }
    CK(be->avgpool_fwd(r->d, &r->gap, in, r->feat), "average pool");
    CK(be->dense_fwd(r->d, r->feat, r->fc_w, r->fc_b, r->logits, n, r->c4, r->classes, 0), "dense");
out:
    return rc;
}

/* ---- backward ---- */

/* dout: d(loss)/d(unit output), modified in place by the ReLU mask; dconv:
 * scratch for d/d(conv output); dx: d/d(unit input) (NULL: not needed). */
static kiln_err unit_bwd(kiln_resnet_dev *r, dunit *u, const float *in, float *dout, float *dconv,
                         float *dx)
{
    kiln_err rc = KILN_OK;
    const kiln__backend *be = r->be;
    int M = u->s.n * u->s.oh * u->s.ow;
    if (u->relu && (r->variant & KILN_RV_FUSED)) {
        /* the fused variant: the mask read inside batch norm's passes */
        CK(be->bn_bwd_relu(r->d, u->conv, u->gamma, u->mean, u->invstd, u->out, dout, dconv,
                           u->dgamma, u->dbeta, BN_EPS, M, u->cout),
           "batch norm + ReLU backward");
    } else {
        if (u->relu) CK(be->relu_bwd(r->d, u->out, dout, dout, u->out_n), "relu backward");
        CK(be->bn_bwd(r->d, u->conv, u->gamma, u->mean, u->invstd, dout, dconv, u->dgamma, u->dbeta,
                      BN_EPS, M, u->cout),
           "batch norm backward");
    }
    CK(be->conv_bwd(r->d, &u->s, in, u->w, u->conv, dconv, dx, u->dw, NULL, 0, 0.0f),
       "conv backward");
out:
    return rc;
}

static kiln_err backward(kiln_resnet_dev *r)
{
    kiln_err rc = KILN_OK;
    const kiln__backend *be = r->be;
    int n = r->n, p = 0;
    float **g = r->g;
    CK(be->dense_bwd(r->d, r->feat, r->fc_w, r->logits, r->dlogits, r->dfeat, r->dfc_w, r->dfc_b, n,
                     r->c4, r->classes, 0, 0.0f),
       "dense backward");
    CK(be->avgpool_bwd(r->d, &r->gap, r->blk[N_BLOCKS - 1].y, r->feat, r->dfeat, g[p]),
       "average pool backward");
    for (int i = N_BLOCKS - 1; i >= 0; i--) {
        dblock *b = &r->blk[i];
        const float *in = i > 0 ? r->blk[i - 1].y : r->pooled;
        /* g[p]: d/dy. s: b's output gradient, then the block input's; t: a's */
        int s = (p + 1) % 4, t = (p + 2) % 4, q = (p + 3) % 4;
        /* through the final ReLU, in place: the gradient of c + shortcut */
        CK(be->relu_bwd(r->d, b->y, g[p], g[p], b->c.out_n), "relu backward");
        if ((rc = unit_bwd(r, &b->c, b->b.out, g[p], g[q], g[s])) ||
            (rc = unit_bwd(r, &b->b, b->a.out, g[s], g[q], g[t])) ||
            (rc = unit_bwd(r, &b->a, in, g[t], g[q], g[s])))
            goto out;
        if (b->has_down) {
            if ((rc = unit_bwd(r, &b->down, in, g[p], g[q], g[t]))) goto out;
            CK(be->add(r->d, g[s], g[t], g[s], b->a.s.n * (size_t)b->a.s.h * b->a.s.w * b->a.cin),
               "add");
        } else {
            CK(be->add(r->d, g[s], g[p], g[s], b->a.s.n * (size_t)b->a.s.h * b->a.s.w * b->a.cin),
               "add");
        }
        p = s;
    }
    CK(be->maxpool_bwd(r->d, &r->pool, r->padded, r->pooled, g[p], r->dpadded),
       "max pool backward");
    {
        float *dstem = g[(p + 1) % 4];
        CK(be->crop2d(r->d, r->dpadded, dstem, n, r->s1, r->width, 1), "crop");
        rc = unit_bwd(r, &r->stem, r->x, dstem, g[(p + 2) % 4], NULL);
    }
out:
    return rc;
}

/* fp16: batch norm's running statistics kept aside before the forward
 * (back = 0) and put back when the step is skipped (back = 1), as
 * nn/model_dev.c does: a skipped step changes no buffer. */
static kiln_err keep_bn_stats(kiln_resnet_dev *r, int back)
{
    kiln_err rc = KILN_OK;
    dunit *us[MAX_UNITS];
    int nu = all_units(r, us);
    for (int i = 0; i < nu; i++) {
        dunit *u = us[i];
        size_t bytes = sizeof(float) * (size_t)u->cout;
        CK(r->be->copy(r->d, back ? u->rmean : u->kmean, back ? u->kmean : u->rmean, bytes),
           "batch norm statistics");
        CK(r->be->copy(r->d, back ? u->rvar : u->kvar, back ? u->kvar : u->rvar, bytes),
           "batch norm statistics");
    }
out:
    return rc;
}

kiln_err kiln_resnet_dev_step(kiln_resnet_dev *r, float lr, float momentum)
{
    kiln_err rc;
    const kiln__backend *be = r->be;
    float h[KILN__HYPER_MAX] = {0};
    h[KILN__H_LR] = lr;
    h[KILN__H_MOMENTUM] = momentum;
    float scale = r->scaling ? r->scaler.scale : 1.0f;
    int apply = 1;
    if (r->staged >= 0) { /* the staged batch: its slot once its copy is done */
        CK(be->event_wait(r->d, r->copied[r->staged], KILN__STREAM_COMPUTE), "the staged batch");
        r->cur = r->staged, r->staged = -1;
        r->x = r->xs[r->cur], r->labels = r->ls[r->cur];
        set_batch(r, r->staged_n);
    }
    if (r->scaling && (rc = keep_bn_stats(r, 0))) return rc;
    if ((rc = forward(r, 1))) return rc;
    CK(be->xent(r->d, r->logits, r->labels, r->n, r->classes, r->dlogits, scale, r->loss, NULL),
       "cross-entropy");
    if ((rc = backward(r))) return rc;
    if (r->scaling) {
        /* fp16: unscale with an inf/NaN check, wait for it, skip the update
         * of a step that overflowed (so this step waits) */
        int *found = (int *)(r->loss + 1), zero = 0, bad = 0;
        CK(be->upload_ordered(r->d, found, &zero, sizeof zero), "loss scaling");
        for (int i = 0; i < r->np; i++)
            CK(be->scale_check(r->d, r->params[i].g, r->params[i].n, 1.0f / scale, found),
               "loss scaling");
        CK(be->download_async(r->d, r->hloss + 1, found, sizeof(int)), "loss scaling");
        CK(be->sync(r->d), "training step");
        memcpy(&bad, r->hloss + 1, sizeof bad);
        apply = kiln_loss_scaler_update(&r->scaler, bad);
        if (!apply && (rc = keep_bn_stats(r, 1))) return rc;
    }
    /* in stream order: steps queued before still read the previous rate */
    CK(be->upload_ordered(r->d, r->hyper, h, sizeof h), "uploading the learning rate");
    for (int i = 0; apply && i < r->np; i++)
        CK(be->sgd(r->d, r->params[i].p, r->params[i].g, r->params[i].v, r->params[i].n, r->hyper),
           "SGD step");
    CK(be->download_async(r->d, r->hloss, r->loss, sizeof(float)), "reading the loss");
    /* the step no longer reads its input slot: the next stage may refill it */
    CK(be->event_record(r->d, r->used[r->cur], KILN__STREAM_COMPUTE), "marking the input free");
out:
    return rc;
}

float kiln_resnet_dev_loss_scale(const kiln_resnet_dev *r, uint64_t *skipped)
{
    if (skipped) *skipped = r->scaling ? r->scaler.skipped : 0;
    return r->scaling ? r->scaler.scale : 0.0f;
}

kiln_err kiln_resnet_dev_wait(kiln_resnet_dev *r, float *loss)
{
    kiln_err rc = KILN_OK;
    CK(r->be->sync(r->d), "training step");
    if (loss) *loss = r->hloss[0];
out:
    return rc;
}

kiln_err kiln_resnet_dev_forward(kiln_resnet_dev *r, float *logits, int training)
{
    kiln_err rc = forward(r, training);
    if (rc) return rc;
    CK(r->be->download(r->d, logits, r->logits, sizeof(float) * (size_t)r->n * r->classes),
       "reading logits");
out:
    return rc;
}

kiln_err kiln_resnet_dev_param(kiln_resnet_dev *r, int i, float *host, size_t n)
{
    kiln_err rc = KILN_OK;
    if (i < 0 || i >= r->np || n != r->params[i].n) {
        snprintf(r->err, sizeof r->err, "resnet: no parameter buffer %d of %zu values", i, n);
        return KILN_EINVAL;
    }
    CK(r->be->download(r->d, host, r->params[i].p, n * sizeof(float)), "reading parameters");
out:
    return rc;
}

kiln_err kiln_resnet_dev_mem_used(kiln_resnet_dev *r, size_t *bytes)
{
    kiln_err rc = KILN_OK;
    if (!r->be->mem_used) {
        snprintf(r->err, sizeof r->err, "resnet: %s has no device memory to measure", r->be->name);
        return KILN_EINVAL;
    }
    CK(r->be->mem_used(r->d, bytes), "reading the device's memory");
out:
    return rc;
}

int kiln_resnet_dev_param_buffers(const kiln_resnet_dev *r)
{
    return r->np;
}

size_t kiln_resnet_dev_param_size(const kiln_resnet_dev *r, int i)
{
    return i >= 0 && i < r->np ? r->params[i].n : 0;
}

kiln_err kiln_resnet_dev_set_variant(kiln_resnet_dev *r, unsigned features)
{
    kiln_err rc = KILN_OK;
    unsigned known = KILN_RV_BN_CUDNN | KILN_RV_FUSED | KILN_RV_NCHW | KILN_RV_CUBLASLT_FC;
    if (features & ~known) {
        snprintf(r->err, sizeof r->err, "resnet: variant features 0x%x are not built here",
                 features & ~known);
        return KILN_EINVAL;
    }
    /* always set, so that a variant without it runs kiln's batch norm
     * whatever KILN_BN said when the device was opened */
    CK(r->be->set_option(r->d, KILN__OPT_BN_CUDNN, (features & KILN_RV_BN_CUDNN) != 0),
       "choosing the batch norm");
    CK(r->be->set_option(r->d, KILN__OPT_CONV_NCHW, (features & KILN_RV_NCHW) != 0),
       "choosing the convolutions' layout");
    CK(r->be->set_option(r->d, KILN__OPT_DENSE_LT, (features & KILN_RV_CUBLASLT_FC) != 0),
       "choosing the classifier's GEMM");
    r->variant = features;
out:
    return rc;
}

size_t kiln_resnet_dev_param_count(const kiln_resnet_dev *r)
{
    size_t t = 0;
    for (int i = 0; i < r->np; i++)
        t += r->params[i].n;
    return t;
}

kiln_err kiln_resnet_dev_profile(kiln_resnet_dev *r, float lr, float momentum, FILE *f)
{
    prof p = {0};
    double total = 0;
    kiln_err rc = kiln_resnet_dev_wait(r, NULL);
    if (rc) return rc;
    r->prof = &p;
    double t0 = now_s();
    rc = kiln_resnet_dev_step(r, lr, momentum);
    if (!rc) rc = kiln_resnet_dev_wait(r, NULL);
    double wall = now_s() - t0;
    r->prof = NULL;
    if (rc) return rc;
    for (int i = 0; i < p.n; i++)
        total += p.secs[i];
    fprintf(f, "profile of one step (batch %d, waiting after every call): %.1f ms\n", r->n,
            wall * 1e3);
    for (int i = 0; i < p.n; i++)
        fprintf(f, "  %-24s %5ld calls %9.2f ms %5.1f%%\n", p.what[i], p.calls[i], p.secs[i] * 1e3,
                total > 0 ? 100.0 * p.secs[i] / total : 0.0);
    return KILN_OK;
}
