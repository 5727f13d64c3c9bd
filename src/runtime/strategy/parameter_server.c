/* strategy/parameter_server.c - the parameter_server strategy over kiln/ps.h
 * (docs/parameter-server.md). Built only with ZeroMQ (KILN_HAVE_PS).
 *
 * The model's trainable variables (vars.c) are sharded over TF_CONFIG's ps
 * tasks by kiln_ps_layout_init, with the optimizer's name as the salt, so a
 * replica built on this library and kiln-train's ps tasks agree on the
 * signature. A replica computes its gradient with kiln_model_compute_grads
 * (the optimizer step happens on the ps, never here), pushes it to every
 * shard and gets the shard's parameters after it in the same round trip;
 * nobody waits for anybody. A ps task serves its shard from the model's
 * values (what a restored checkpoint put there). */
#include "strategy/strategy_int.h"

#include "kiln/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct kiln__ps {
    kiln__vars v;
    kiln_ps_layout layout;
    kiln_ps_opt opt;
    kiln_ps_client *c;
    float *grads;                  /* kiln_model_compute_grads' flat buffer */
    float **sh_params, **sh_grads; /* per shard */
    const float **gvars;           /* per variable: its gradient in grads */
    float **slot1, **slot2;        /* per variable: the model's optimizer slots */
};

static int no_wait(void *ud, int b, float *data, size_t count)
{
    (void)ud, (void)b, (void)data, (void)count;
    return 0; /* the sum "across replicas" is the ps's business, after the step */
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void kiln__ps_free(kiln_strategy *s)
{
    kiln__ps *p = s->ps;
    if (!p) return;
    kiln_ps_client_free(p->c);
    for (int i = 0; i < p->layout.num_ps; i++) {
        if (p->sh_params) free(p->sh_params[i]);
        if (p->sh_grads) free(p->sh_grads[i]);
    }
    free(p->sh_params);
    free(p->sh_grads);
    free(p->gvars);
    free(p->slot1);
    free(p->slot2);
    free(p->grads);
    kiln_ps_layout_free(&p->layout);
    kiln__vars_free(&p->v);
    free(p);
    s->ps = NULL;
}

/* The CURVE keys of this job attempt ($KILN_PS_KEYS), when kilnd wrote them:
 * 1 loaded, 0 none, -1 error (in s->err). */
static int load_keys(kiln_strategy *s, kiln_ps_keys *k)
{
    char err[300];
    const char *kp = getenv("KILN_PS_KEYS");
    if (!kp || !*kp) return 0;
    if (kiln_ps_keys_load(kp, k, err, sizeof err) != 0) {
        kiln__strategy_fail(s, KILN_EINVAL, "%s", err);
        return -1;
    }
    return 1;
}

static void scatter_params(kiln__ps *p)
{
    kiln_ps_layout_scatter(&p->layout, (const float *const *)p->sh_params, p->v.data);
}

/* A replica's side: buffers, slots, the client, the first pull. */
static kiln_err attach_replica(kiln_strategy *s, kiln__ps *p, kiln_model *m)
{
    char err[400];
    int np = p->layout.num_ps;
    p->grads = calloc(kiln_model_grad_count(m) + 1, sizeof(float));
    p->sh_params = calloc((size_t)np, sizeof(float *));
    p->sh_grads = calloc((size_t)np, sizeof(float *));
    p->gvars = calloc((size_t)p->v.n, sizeof(float *));
    p->slot1 = calloc((size_t)p->v.n, sizeof(float *));
    p->slot2 = calloc((size_t)p->v.n, sizeof(float *));
    if (!p->grads || !p->sh_params || !p->sh_grads || !p->gvars || !p->slot1 || !p->slot2)
        return kiln__strategy_fail(s, KILN_ENOMEM, "out of memory");
    for (int i = 0; i < np; i++) {
        p->sh_params[i] = malloc((p->layout.shard_size[i] + 1) * sizeof(float));
        p->sh_grads[i] = malloc((p->layout.shard_size[i] + 1) * sizeof(float));
        if (!p->sh_params[i] || !p->sh_grads[i])
            return kiln__strategy_fail(s, KILN_ENOMEM, "out of memory");
    }
    for (int k = 0; k < p->v.n; k++) {
        p->gvars[k] = p->grads + p->v.grad_off[k];
        p->slot1[k] = kiln__model_slot(m, p->v.names[k], p->opt.adam ? "adam_m" : "momentum");
        p->slot2[k] = p->opt.adam ? kiln__model_slot(m, p->v.names[k], "adam_v") : NULL;
    }
    double to = s->cfg.ps_timeout_s > 0 ? s->cfg.ps_timeout_s : 60.0;
    kiln_ps_client_config cc = {.num_ps = np,
                                .addrs = (const char *const *)s->tf.ps_hosts,
                                .shard_size = p->layout.shard_size,
                                .model_sig = p->layout.sig,
                                .worker = (uint32_t)s->rank,
                                .timeout_ms = (int)(to * 1000),
                                .retry_ms = 2000};
    kiln_ps_keys keys;
    int got = load_keys(s, &keys);
    if (got < 0) return KILN_EINVAL;
    if (got) {
        cc.curve_server = keys.server_public;
        cc.curve_public = keys.client_public;
        cc.curve_secret = keys.client_secret;
    }
    if (!(p->c = kiln_ps_client_new(&cc, err, sizeof err)))
        return kiln__strategy_fail(s, KILN_EIO, "connecting to the ps tasks: %s", err);
    if (kiln_ps_pull(p->c, p->sh_params) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "%s", kiln_ps_client_error(p->c));
    scatter_params(p);
    return KILN_OK;
}

kiln_err kiln__ps_attach(kiln_strategy *s, kiln_model *m)
{
    char err[400];
    kiln_err e = KILN_ENOMEM;
    kiln__ps *p = calloc(1, sizeof *p);
    if (!p) return kiln__strategy_fail(s, KILN_ENOMEM, "out of memory");
    s->ps = p;
    if ((e = kiln__vars_of_model(m, &p->v, err, sizeof err)) != KILN_OK) {
        kiln__strategy_fail(s, e, "%s", err);
        goto out;
    }
    kiln_optimizer o = kiln_model_optimizer(m);
    p->opt = (kiln_ps_opt){.adam = o.kind == KILN_OPT_ADAM,
                           .lr = kiln_model_lr(m),
                           .momentum = o.momentum,
                           .beta1 = o.beta1,
                           .beta2 = o.beta2,
                           .eps = o.eps,
                           .cosine = s->cfg.ps_cosine,
                           .total_updates = s->cfg.ps_total_updates};
    /* the salt is kiln-train's --optimizer value, so that both agree */
    if (kiln_ps_layout_init(&p->layout, p->v.n, p->v.names, p->v.sizes, s->tf.num_ps,
                            p->opt.adam ? "adam" : "sgd", err, sizeof err)) {
        e = kiln__strategy_fail(s, KILN_EINVAL, "sharding the model: %s", err);
        goto out;
    }
    e = s->role == KILN_ROLE_REPLICA ? attach_replica(s, p, m) : KILN_OK;
out:
    if (e != KILN_OK) kiln__ps_free(s);
    return e;
}

kiln_err kiln__ps_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       float *loss, int *correct)
{
    kiln__ps *p = s->ps;
    kiln_grad_sync sync = {.grads = p->grads, .bucket_ready = no_wait};
    if (loss) *loss = 0;
    if (correct) *correct = 0;
    if (n == 0) return KILN_OK;
    if (kiln_model_compute_grads(m, x, y, n, 1.0f, &sync, loss, correct))
        return kiln__strategy_fail(s, KILN_EINVAL, "%s", kiln_model_error(m));
    kiln_ps_layout_gather(&p->layout, p->gvars, p->sh_grads);
    kiln_ps_push_info info;
    if (kiln_ps_push(p->c, (const float *const *)p->sh_grads, p->sh_params, &info) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "%s", kiln_ps_client_error(p->c));
    scatter_params(p);
    return KILN_OK;
}

kiln_err kiln__ps_pull(kiln_strategy *s, kiln_model *m)
{
    (void)m;
    kiln__ps *p = s->ps;
    if (kiln_ps_pull(p->c, p->sh_params) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "%s", kiln_ps_client_error(p->c));
    scatter_params(p);
    return KILN_OK;
}

uint64_t kiln__ps_version(const kiln_strategy *s)
{
    return s->ps && s->ps->c ? kiln_ps_client_version(s->ps->c, 0) : 0;
}

/* Every shard's parameters and optimizer slots into m, step = shard 0's
 * version (what the chief checkpoints). */
static kiln_err pull_state(kiln_strategy *s, kiln_model *m)
{
    kiln__ps *p = s->ps;
    uint64_t v0 = 0;
    for (int sh = 0; sh < p->layout.num_ps; sh++) {
        float *st = NULL;
        int nslots = 0;
        uint64_t ver = 0;
        if (kiln_ps_pull_state(p->c, sh, &st, &nslots, &ver, NULL, NULL) != 0)
            return kiln__strategy_fail(s, KILN_EIO, "%s", kiln_ps_client_error(p->c));
        size_t n = p->layout.shard_size[sh];
        for (int k = 0; k < p->v.n; k++) {
            if (p->layout.var_shard[k] != sh) continue;
            size_t off = p->layout.var_offset[k], sz = p->v.sizes[k] * sizeof(float);
            memcpy(p->v.data[k], st + off, sz);
            if (p->slot1[k]) memcpy(p->slot1[k], st + n + off, sz);
            if (nslots > 1 && p->slot2[k]) memcpy(p->slot2[k], st + 2 * n + off, sz);
        }
        if (sh == 0) v0 = ver;
        free(st);
    }
    kiln_model_set_step(m, v0);
    return KILN_OK;
}

kiln_err kiln__ps_finish(kiln_strategy *s, kiln_model *m)
{
    kiln__ps *p = s->ps;
    if (s->role != KILN_ROLE_REPLICA)
        return kiln__strategy_fail(s, KILN_EINVAL, "finish: this task does not train");
    if (kiln_ps_done(p->c) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "%s", kiln_ps_client_error(p->c));
    if (s->rank != 0) return KILN_OK;
    /* the chief: every replica done (or the timeout), the final state, SHUTDOWN */
    double t0 = now_s(), to = s->cfg.ps_timeout_s > 0 ? s->cfg.ps_timeout_s : 60.0;
    for (;;) {
        uint64_t done = 0;
        for (int sh = 0; sh < p->layout.num_ps; sh++) {
            kiln_ps_stats st;
            if (kiln_ps_get_stats(p->c, sh, &st) == 0 && st.workers_done > done)
                done = st.workers_done;
        }
        if (done >= (uint64_t)s->world) break;
        if (s->cfg.stop && *s->cfg.stop)
            return kiln__strategy_fail(s, KILN_EIO, "stopped while waiting for the replicas");
        if (now_s() - t0 > to) break; /* end the job without the others */
        usleep(100 * 1000);
    }
    kiln_err e = pull_state(s, m);
    if (e != KILN_OK) return e;
    if (kiln_ps_shutdown(p->c) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "shutting the ps tasks down: %s",
                                   kiln_ps_client_error(p->c));
    return KILN_OK;
}

kiln_err kiln__ps_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop, int *stopped)
{
    kiln__ps *p = s->ps;
    int shard = s->tf.task_index;
    size_t n = p->layout.shard_size[shard];
    kiln_err e = KILN_ENOMEM;
    float *pv = calloc(n + 1, sizeof(float)), *s1 = calloc(n + 1, sizeof(float));
    float *s2 = calloc(n + 1, sizeof(float));
    kiln_ps_server *srv = NULL;
    char ep[300], err[400];
    if (stopped) *stopped = 0;
    if (!pv || !s1 || !s2) {
        kiln__strategy_fail(s, e, "out of memory");
        goto out;
    }
    /* this shard's values and slots from the model */
    for (int k = 0; k < p->v.n; k++) {
        if (p->layout.var_shard[k] != shard) continue;
        size_t off = p->layout.var_offset[k], sz = p->v.sizes[k] * sizeof(float);
        const float *a = kiln__model_slot(m, p->v.names[k], p->opt.adam ? "adam_m" : "momentum");
        const float *b = p->opt.adam ? kiln__model_slot(m, p->v.names[k], "adam_v") : NULL;
        memcpy(pv + off, p->v.data[k], sz);
        if (a) memcpy(s1 + off, a, sz);
        if (b) memcpy(s2 + off, b, sz);
    }
    /* every interface, on the port the cluster gives this task */
    snprintf(ep, sizeof ep, "tcp://*:%s", strrchr(s->tf.ps_hosts[shard], ':') + 1);
    kiln_ps_server_config sc = {.endpoint = ep,
                                .shard = (uint32_t)shard,
                                .model_sig = p->layout.sig,
                                .n = n,
                                .params = pv,
                                .slot1 = s1,
                                .slot2 = s2,
                                .version = kiln_model_step(m),
                                .opt = p->opt,
                                .max_staleness = s->cfg.max_staleness <= 0
                                                     ? KILN_PS_UNBOUNDED
                                                     : (uint32_t)s->cfg.max_staleness};
    kiln_ps_keys keys;
    int got = load_keys(s, &keys);
    if (got < 0) {
        e = KILN_EINVAL;
        goto out;
    }
    if (got) {
        sc.curve_secret = keys.server_secret;
        sc.curve_client = keys.client_public;
    }
    if (!(srv = kiln_ps_server_new(&sc, err, sizeof err))) {
        e = kiln__strategy_fail(s, KILN_EIO, "ps %d (%s): %s", shard, s->tf.ps_hosts[shard], err);
        goto out;
    }
    static volatile sig_atomic_t never;
    int r = kiln_ps_server_run(srv, stop ? stop : &never);
    if (r < 0) {
        e = kiln__strategy_fail(s, KILN_EIO, "ps %d: serving failed", shard);
        goto out;
    }
    if (stopped) *stopped = r == 1;
    e = KILN_OK;
out:
    kiln_ps_server_free(srv);
    free(pv);
    free(s1);
    free(s2);
    return e;
}
