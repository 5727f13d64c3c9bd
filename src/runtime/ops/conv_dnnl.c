/* ops/conv_dnnl.c - conv2d through oneDNN's convolution primitives (internal).
 *
 * The im2col path (conv.c) copies every input pixel KH*KW times into a
 * column matrix and then runs a GEMM over it; oneDNN's direct convolutions
 * (brgconv / jit:avx512_core / jit:avx2 ..., picked by oneDNN itself from the
 * CPU it runs on) read the input in place with register-blocked kernels. On
 * the reference CNN's convolutions they reach 1.3-2x the im2col path per
 * core (bench/README.md, conv table).
 *
 * Layouts: kiln's activations are NHWC and its kernels HWIO. Activations go
 * to oneDNN as they are (tag nhwc); the weights use the layout the primitive
 * asks for (format "any", usually blocked like OIhw16i16o), so each call
 * reorders the weights in and the weight gradient out (51k floats for the
 * CNN's second conv: microseconds).
 *
 * Threads: like conv.c, kiln's pool splits the batch by images and each task
 * runs the primitives for its images on its own thread, with one OpenMP
 * thread (core/gemm.c) and a user-managed scratchpad in that thread's kiln
 * scratch memory, so concurrent tasks share nothing but the (immutable)
 * primitives. Each task's weight gradient is summed by conv.c in task
 * order, so results are the same bits run after run for a thread count.
 *
 * Which path runs: kiln__conv_dnnl_get() answers NULL (use im2col) unless
 * oneDNN chose an implementation of its own for the primitive the call
 * needs: not a reference loop ("ref") and not its own im2col + GEMM ("gemm"),
 * which does what conv.c does. Also NULL for 1x1 stride-1 convolutions,
 * which conv.c runs as one GEMM on the activations with nothing to save,
 * and for calls of fewer than MIN_PIXELS output pixels, where the weight
 * reorders outweigh the gain. The choice depends on the shape and the CPU
 * only, never on timing, so a process and its resumed successor take the
 * same path. KILN_CONV=im2col forces the im2col path, KILN_CONV=onednn takes any
 * implementation oneDNN offers (tests use it to reach the code everywhere). */
#include "ops/conv_dnnl.h"

#include "core/gemm.h"
#include "core/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_DNNL
#include <dnnl.h>

/* scratch slots (core/pool.h) this file uses on the calling task's thread;
 * conv.c's im2col buffers (slots 0 and 1) are not used on this path, and
 * slot 2 holds conv.c's per-task weight-gradient partials */
#define SLOT_PAD 0 /* oneDNN scratchpad */
#define SLOT_W   1 /* weights or weight gradient in the primitive's layout */

struct kiln__conv_dnnl {
    kiln_conv_shape s; /* s.n = images per call */
    int has_bias, relu;
    int fwd_ok, bwd_ok; /* primitives usable under the current policy */
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    dnnl_primitive_t w_to_fwd, w_to_bwd_d, dw_to_user; /* reorders, NULL when none needed */
    dnnl_memory_desc_t x_md, y_md, w_md, b_md;         /* user layouts */
    dnnl_memory_desc_t fwd_w_md, bwd_d_w_md, bwd_w_dw_md, pad_md[3];
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
/* one entry per shape seen, kept for the process: a few dozen even for
 * ResNet-50 (its shapes times the batch splits of full and last batches).
 * Past CACHE_MAX, new shapes take the im2col path. */
#define CACHE_MAX 1024

/* Below this many output pixels per call, the weight reorders (in for the
 * forward and backward-data kernels, out for the weight gradient: memory
 * traffic proportional to the weights) cost more than a tenth of the
 * convolution (proportional to pixels x weights): at ~10 GB/s and
 * ~250 GFLOP/s per core, and scaling alike on other CPUs, equal near 100
 * pixels. ResNet-50's last stages at small batches fall below it (measured:
 * 5% slower end to end at batch 8, 128x128, without this rule). */
#define MIN_PIXELS 1024
static struct kiln__conv_dnnl *cache[CACHE_MAX];
static int cache_n;
static dnnl_engine_t engine;
static int policy = -1; /* 0 im2col only, 1 oneDNN's own kernels, 2 any oneDNN */
static _Thread_local dnnl_stream_t stream;

static int own_kernel(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return 0;
    if (policy == 2) return 1;
    return !strstr(impl, "ref") && !strstr(impl, "gemm");
}

/* a reorder from src to dst, or NULL (and *ok kept) when the layouts are equal */
static dnnl_primitive_t reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                                int *ok)
{
    if (dnnl_memory_desc_equal(src, dst)) return NULL;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    if (dnnl_reorder_primitive_desc_create(&pd, src, engine, dst, engine, NULL) != dnnl_success) {
        *ok = 0;
        return NULL;
    }
    if (dnnl_primitive_create(&p, pd) != dnnl_success) *ok = 0;
    dnnl_primitive_desc_destroy(pd);
    return p;
}

static dnnl_primitive_t make(const_dnnl_op_desc_t d, const_dnnl_primitive_attr_t attr,
                             const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd_out,
                             int *ok)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    *pd_out = NULL;
    if (dnnl_primitive_desc_create(&pd, d, attr, engine, hint) != dnnl_success) {
        *ok = 0;
        return NULL;
    }
    if (!own_kernel(pd) || dnnl_primitive_create(&p, pd) != dnnl_success) *ok = 0;
    *pd_out = pd;
    return p;
}

static int build(struct kiln__conv_dnnl *e)
{
    const kiln_conv_shape *s = &e->s;
    dnnl_dims_t xd = {s->n, s->c, s->h, s->w}, yd = {s->n, s->oc, s->oh, s->ow},
                wd = {s->oc, s->c, s->kh, s->kw}, bd = {s->oc};
    dnnl_dims_t stride = {s->stride, s->stride}, pl = {s->pad, s->pad};
    /* right/bottom padding that gives kiln's output size exactly (the
     * floor in kiln_conv_shape_init may leave part of `pad` unused) */
    dnnl_dims_t pr = {(s->oh - 1) * s->stride + s->kh - s->h - s->pad,
                      (s->ow - 1) * s->stride + s->kw - s->w - s->pad};
    dnnl_memory_desc_t w_any;
    if (dnnl_memory_desc_init_by_tag(&e->x_md, 4, xd, dnnl_f32, dnnl_nhwc) ||
        dnnl_memory_desc_init_by_tag(&e->y_md, 4, yd, dnnl_f32, dnnl_nhwc) ||
        dnnl_memory_desc_init_by_tag(&e->w_md, 4, wd, dnnl_f32, dnnl_hwio) ||
        dnnl_memory_desc_init_by_tag(&e->b_md, 1, bd, dnnl_f32, dnnl_x) ||
        dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any))
        return -1;
    if (pr[0] < 0 || pr[1] < 0) return -1;

    dnnl_primitive_attr_t attr = NULL, attr_relu = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_convolution_desc_t fd, dd, wdsc;
    int ok = 1;
    if (dnnl_primitive_attr_create(&attr) || dnnl_primitive_attr_create(&attr_relu) ||
        dnnl_post_ops_create(&po))
        ok = 0;
    if (ok) {
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        dnnl_primitive_attr_set_scratchpad_mode(attr_relu, dnnl_scratchpad_mode_user);
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        dnnl_primitive_attr_set_post_ops(attr_relu, po);
    }
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    if (ok && dnnl_convolution_forward_desc_init(
                  &fd, dnnl_forward_training, dnnl_convolution_direct, &e->x_md, &w_any,
                  e->has_bias ? &e->b_md : NULL, &e->y_md, stride, pl, pr) != dnnl_success)
        ok = 0;
    if (ok) e->fwd = make(&fd, e->relu ? attr_relu : attr, NULL, &fpd, &ok);
    if (ok) {
        e->fwd_w_md = *dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
        e->pad_md[0] = *dnnl_primitive_desc_query_md(fpd, dnnl_query_scratchpad_md, 0);
        e->w_to_fwd = reorder(&e->w_md, &e->fwd_w_md, &ok);
        e->fwd_ok = ok;
    }
    /* backward: independent of the forward's success only through the hint */
    int bok = ok;
    if (bok &&
        (dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &e->x_md, &w_any,
                                                  &e->y_md, stride, pl, pr) != dnnl_success ||
         dnnl_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_direct, &e->x_md,
                                                     &w_any, NULL, &e->y_md, stride, pl,
                                                     pr) != dnnl_success))
        bok = 0;
    if (bok) e->bwd_w = make(&wdsc, attr, fpd, &wpd, &bok);
    if (bok) {
        e->bwd_w_dw_md = *dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0);
        e->pad_md[2] = *dnnl_primitive_desc_query_md(wpd, dnnl_query_scratchpad_md, 0);
        e->dw_to_user = reorder(&e->bwd_w_dw_md, &e->w_md, &bok);
    }
    /* the input gradient is optional (first layers): a missing bwd_d only
     * sends calls that need dx to im2col */
    int dok = bok;
    if (dok) e->bwd_d = make(&dd, attr, fpd, &dpd, &dok);
    if (dok) {
        e->bwd_d_w_md = *dnnl_primitive_desc_query_md(dpd, dnnl_query_weights_md, 0);
        e->pad_md[1] = *dnnl_primitive_desc_query_md(dpd, dnnl_query_scratchpad_md, 0);
        e->w_to_bwd_d = reorder(&e->w_md, &e->bwd_d_w_md, &dok);
    }
    e->bwd_ok = bok ? (dok ? 2 : 1) : 0;
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (attr_relu) dnnl_primitive_attr_destroy(attr_relu);
    return 0;
}

static void read_policy(void)
{
    const char *v = getenv("KILN_CONV");
    if (v && strcmp(v, "im2col") == 0)
        policy = 0;
    else if (v && strcmp(v, "onednn") == 0)
        policy = 2;
    else
        policy = 1;
}

static void destroy(struct kiln__conv_dnnl *e)
{
    dnnl_primitive_t ps[] = {e->fwd, e->bwd_d, e->bwd_w, e->w_to_fwd, e->w_to_bwd_d, e->dw_to_user};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        if (ps[i]) dnnl_primitive_destroy(ps[i]);
    free(e);
}

void kiln__conv_dnnl_set_policy(int p)
{
    pthread_mutex_lock(&cache_mu);
    if (policy < 0) read_policy();
    if (p != policy) { /* entries were built under the old policy: drop them */
        for (int i = 0; i < cache_n; i++)
            destroy(cache[i]);
        cache_n = 0;
        policy = p;
    }
    pthread_mutex_unlock(&cache_mu);
}

const kiln__conv_dnnl *kiln__conv_dnnl_get(const kiln_conv_shape *s, int has_bias, int relu,
                                           int need)
{
    struct kiln__conv_dnnl *e = NULL;
    pthread_mutex_lock(&cache_mu);
    if (policy < 0) read_policy();
    if (policy == 0) goto out;
    if (policy == 1 && ((size_t)s->n * s->oh * s->ow < MIN_PIXELS ||
                        (s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0)))
        goto out;
    if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        goto out;
    }
    for (int i = 0; i < cache_n; i++) {
        struct kiln__conv_dnnl *c = cache[i];
        if (c->has_bias == has_bias && c->relu == relu && c->s.n == s->n && c->s.h == s->h &&
            c->s.w == s->w && c->s.c == s->c && c->s.oc == s->oc && c->s.kh == s->kh &&
            c->s.kw == s->kw && c->s.stride == s->stride && c->s.pad == s->pad) {
            e = c;
            break;
        }
    }
    if (!e && cache_n < CACHE_MAX && (e = calloc(1, sizeof(*e)))) {
        e->s = *s;
        e->has_bias = has_bias;
        e->relu = relu;
        kiln__dnnl_one_thread();
        if (build(e) == 0) {
            cache[cache_n++] = e;
        } else {
            destroy(e);
            e = NULL;
        }
    }
out:
    pthread_mutex_unlock(&cache_mu);
    if (!e) return NULL;
    if (need == KILN__CONV_FWD) return e->fwd_ok ? e : NULL;
    return e->bwd_ok >= need ? e : NULL;
}

/* every thread's stream, also kept here so that they stay reachable (for
 * leak checkers) after a pool thread ends; they live as long as the process */
static dnnl_stream_t streams[KILN__MAX_THREADS + 8];
static int streams_n;

static dnnl_stream_t my_stream(void)
{
    if (!stream) {
        kiln__dnnl_one_thread();
        if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
            return stream = NULL;
        pthread_mutex_lock(&cache_mu);
        if (streams_n < (int)(sizeof(streams) / sizeof(streams[0]))) streams[streams_n++] = stream;
        pthread_mutex_unlock(&cache_mu);
    }
    return stream;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, const void *p)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_create(&m, md, engine, (void *)p) != dnnl_success) return NULL;
    return m;
}

/* runs primitive p with args; the memory objects are released afterwards */
static int exec(dnnl_primitive_t p, int nargs, dnnl_exec_arg_t *args)
{
    int ok = 1;
    for (int i = 0; i < nargs; i++)
        ok &= args[i].memory != NULL;
    dnnl_stream_t st = my_stream();
    if (ok && st)
        ok = dnnl_primitive_execute(p, st, nargs, args) == dnnl_success &&
             dnnl_stream_wait(st) == dnnl_success;
    else
        ok = 0;
    for (int i = 0; i < nargs; i++)
        if (args[i].memory) dnnl_memory_destroy(args[i].memory);
    return ok ? 0 : -1;
}

static int do_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *smd, const float *src,
                      const dnnl_memory_desc_t *dmd, float *dst)
{
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, mem(smd, src)}, {DNNL_ARG_TO, mem(dmd, dst)}};
    return exec(r, 2, a);
}

static float *scratch_for(int tid, int slot, const dnnl_memory_desc_t *md)
{
    size_t b = dnnl_memory_desc_get_size(md);
    return kiln__scratch(tid, slot, (b + sizeof(float) - 1) / sizeof(float) + 16);
}

/* *wk: the weights w in the layout md a primitive wants: w itself when r
 * (the reorder from kiln's layout) is NULL, else reordered into the calling
 * thread's SLOT_W scratch. -1 when that fails. */
static int weights_as(const kiln__conv_dnnl *e, int tid, dnnl_primitive_t r,
                      const dnnl_memory_desc_t *md, const float *w, const float **wk)
{
    *wk = w;
    if (!r) return 0;
    float *t = scratch_for(tid, SLOT_W, md);
    if (!t || do_reorder(r, &e->w_md, w, md, t)) return -1;
    *wk = t;
    return 0;
}

int kiln__conv_dnnl_fwd(const kiln__conv_dnnl *e, int tid, const float *x, const float *w,
                        const float *b, float *y)
{
    const float *wk;
    if (weights_as(e, tid, e->w_to_fwd, &e->fwd_w_md, w, &wk)) return -1;
    float *pad = scratch_for(tid, SLOT_PAD, &e->pad_md[0]);
    if (!pad) return -1;
    dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, mem(&e->x_md, x)},
                            {DNNL_ARG_WEIGHTS, mem(&e->fwd_w_md, wk)},
                            {DNNL_ARG_DST, mem(&e->y_md, y)},
                            {DNNL_ARG_SCRATCHPAD, mem(&e->pad_md[0], pad)},
                            {DNNL_ARG_BIAS, e->has_bias ? mem(&e->b_md, b) : NULL}};
    return exec(e->fwd, e->has_bias ? 5 : 4, a);
}

int kiln__conv_dnnl_bwd_weights(const kiln__conv_dnnl *e, int tid, const float *x, const float *dy,
                                float *dw)
{
    float *t = dw;
    if (e->dw_to_user && !(t = scratch_for(tid, SLOT_W, &e->bwd_w_dw_md))) return -1;
    float *pad = scratch_for(tid, SLOT_PAD, &e->pad_md[2]);
    if (!pad) return -1;
    dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, mem(&e->x_md, x)},
                           {DNNL_ARG_DIFF_DST, mem(&e->y_md, dy)},
                           {DNNL_ARG_DIFF_WEIGHTS, mem(&e->bwd_w_dw_md, t)},
                           {DNNL_ARG_SCRATCHPAD, mem(&e->pad_md[2], pad)}};
    if (exec(e->bwd_w, 4, a)) return -1;
    return e->dw_to_user ? do_reorder(e->dw_to_user, &e->bwd_w_dw_md, t, &e->w_md, dw) : 0;
}

int kiln__conv_dnnl_bwd_data(const kiln__conv_dnnl *e, int tid, const float *w, const float *dy,
                             float *dx)
{
    const float *wk;
    if (weights_as(e, tid, e->w_to_bwd_d, &e->bwd_d_w_md, w, &wk)) return -1;
    float *pad = scratch_for(tid, SLOT_PAD, &e->pad_md[1]);
    if (!pad) return -1;
    dnnl_exec_arg_t a[] = {{DNNL_ARG_DIFF_DST, mem(&e->y_md, dy)},
                           {DNNL_ARG_WEIGHTS, mem(&e->bwd_d_w_md, wk)},
                           {DNNL_ARG_DIFF_SRC, mem(&e->x_md, dx)},
                           {DNNL_ARG_SCRATCHPAD, mem(&e->pad_md[1], pad)}};
    return exec(e->bwd_d, 4, a);
}

#else /* no oneDNN: everything takes the im2col path */

void kiln__conv_dnnl_set_policy(int p)
{
    (void)p;
}

const kiln__conv_dnnl *kiln__conv_dnnl_get(const kiln_conv_shape *s, int has_bias, int relu,
                                           int need)
{
    (void)s, (void)has_bias, (void)relu, (void)need;
    return NULL;
}

int kiln__conv_dnnl_fwd(const kiln__conv_dnnl *e, int tid, const float *x, const float *w,
                        const float *b, float *y)
{
    (void)e, (void)tid, (void)x, (void)w, (void)b, (void)y;
    return -1;
}

int kiln__conv_dnnl_bwd_weights(const kiln__conv_dnnl *e, int tid, const float *x, const float *dy,
                                float *dw)
{
    (void)e, (void)tid, (void)x, (void)dy, (void)dw;
    return -1;
}

int kiln__conv_dnnl_bwd_data(const kiln__conv_dnnl *e, int tid, const float *w, const float *dy,
                             float *dx)
{
    (void)e, (void)tid, (void)w, (void)dy, (void)dx;
    return -1;
}
#endif
