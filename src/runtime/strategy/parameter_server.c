/* strategy/parameter_server.c - the parameter_server strategy over kiln/ps.h
 * (docs/parameter-server.md). Built only with ZeroMQ (KILN_HAVE_PS).
 *
 * The mechanics (ps_core.h) serve both this library's strategy and
 * kiln-train's ps glue (tools/ps_*.c): a replica computes its gradient with
 * kiln_model_compute_grads (the optimizer step happens on the ps, never
 * here), pushes it to every shard and gets the shard's parameters after it
 * in the same round trip; nobody waits for anybody. A ps task serves its
 * shard from the model's values (what a restored checkpoint put there).
 * Exactly-once pushes are the client's and server's business (kiln/ps.h);
 * a ps task also takes KILN_PS_FAULT here, whichever program runs it. */
#include "strategy/ps_core.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

void kiln__ps_close(kiln__ps *p)
{
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
}

/* The CURVE keys of this job attempt ($KILN_PS_KEYS), when kilnd wrote them:
 * 1 loaded, 0 none, -1 error (in err). */
static int load_keys(kiln_ps_keys *k, char *err, size_t errlen)
{
    const char *kp = getenv("KILN_PS_KEYS");
    if (!kp || !*kp) return 0;
    return kiln_ps_keys_load(kp, k, err, errlen) == 0 ? 1 : -1;
}

static void scatter_params(kiln__ps *p)
{
    kiln_ps_layout_scatter(&p->layout, (const float *const *)p->sh_params, p->v.data);
}

kiln_err kiln__ps_connect(kiln__ps *p, kiln_model *m, const kiln_tf_group *tf, int rank,
                          double timeout_s, char *err, size_t errlen)
{
    char why[400];
    int np = p->layout.num_ps;
    p->grads = calloc(kiln_model_grad_count(m) + 1, sizeof(float));
    p->sh_params = calloc((size_t)np, sizeof(float *));
    p->sh_grads = calloc((size_t)np, sizeof(float *));
    p->gvars = calloc((size_t)p->v.n + 1, sizeof(float *));
    if (!p->grads || !p->sh_params || !p->sh_grads || !p->gvars) goto oom;
    for (int i = 0; i < np; i++) {
        p->sh_params[i] = malloc((p->layout.shard_size[i] + 1) * sizeof(float));
        p->sh_grads[i] = malloc((p->layout.shard_size[i] + 1) * sizeof(float));
        if (!p->sh_params[i] || !p->sh_grads[i]) goto oom;
    }
    for (int k = 0; k < p->v.n; k++)
        p->gvars[k] = p->grads + p->v.grad_off[k];
    double to = timeout_s > 0 ? timeout_s : 60.0;
    kiln_ps_client_config cc = {.num_ps = np,
                                .addrs = (const char *const *)tf->ps_hosts,
                                .shard_size = p->layout.shard_size,
                                .model_sig = p->layout.sig,
                                .worker = (uint32_t)rank,
                                .timeout_ms = (int)(to * 1000),
                                .retry_ms = 2000};
    kiln_ps_keys keys;
    int got = load_keys(&keys, err, errlen);
    if (got < 0) return KILN_EINVAL;
    if (got) {
        cc.curve_server = keys.server_public;
        cc.curve_public = keys.client_public;
        cc.curve_secret = keys.client_secret;
    }
    if (!(p->c = kiln_ps_client_new(&cc, why, sizeof why))) {
        snprintf(err, errlen, "connecting to the ps tasks: %s", why);
        return KILN_EIO;
    }
    return kiln__ps_pull_params(p, err, errlen);
oom:
    snprintf(err, errlen, "out of memory");
    return KILN_ENOMEM;
}

kiln_err kiln__ps_open(kiln_model *m, int num_ps, int cosine, uint64_t total_updates,
                       kiln__ps **out, char *err, size_t errlen)
{
    char why[400];
    kiln_err e = KILN_ENOMEM;
    kiln__ps *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return KILN_ENOMEM;
    }
    if ((e = kiln__vars_of_model(m, &p->v, err, errlen)) != KILN_OK) goto out;
    kiln_optimizer o = kiln_model_optimizer(m);
    p->opt = (kiln_ps_opt){.adam = o.kind == KILN_OPT_ADAM,
                           .lr = kiln_model_lr(m),
                           .momentum = o.momentum,
                           .beta1 = o.beta1,
                           .beta2 = o.beta2,
                           .eps = o.eps,
                           .cosine = cosine,
                           .total_updates = total_updates};
    p->slot1 = calloc((size_t)p->v.n + 1, sizeof(float *));
    p->slot2 = calloc((size_t)p->v.n + 1, sizeof(float *));
    if (!p->slot1 || !p->slot2) {
        snprintf(err, errlen, "out of memory");
        e = KILN_ENOMEM;
        goto out;
    }
    for (int k = 0; k < p->v.n; k++) {
        p->slot1[k] = kiln__model_slot(m, p->v.names[k], p->opt.adam ? "adam_m" : "momentum");
        p->slot2[k] = p->opt.adam ? kiln__model_slot(m, p->v.names[k], "adam_v") : NULL;
    }
    /* the salt is kiln-train's --optimizer value, so that both agree */
    if (kiln_ps_layout_init(&p->layout, p->v.n, p->v.names, p->v.sizes, num_ps,
                            p->opt.adam ? "adam" : "sgd", why, sizeof why)) {
        snprintf(err, errlen, "sharding the model: %s", why);
        e = KILN_EINVAL;
        goto out;
    }
    e = KILN_OK;
out:
    if (e != KILN_OK)
        kiln__ps_close(p);
    else
        *out = p;
    return e;
}

kiln_err kiln__ps_push_step(kiln__ps *p, kiln_model *m, const float *x, const uint8_t *y, int n,
                            float *loss, int *correct, char *err, size_t errlen)
{
    kiln_grad_sync sync = {.grads = p->grads, .bucket_ready = no_wait};
    if (kiln_model_compute_grads(m, x, y, n, 1.0f, &sync, loss, correct)) {
        snprintf(err, errlen, "%s", kiln_model_error(m));
        return KILN_EINVAL;
    }
    kiln_ps_layout_gather(&p->layout, p->gvars, p->sh_grads);
    if (kiln_ps_push(p->c, (const float *const *)p->sh_grads, p->sh_params, &p->last) != 0) {
        snprintf(err, errlen, "%s", kiln_ps_client_error(p->c));
        return KILN_EIO;
    }
    scatter_params(p);
    return KILN_OK;
}

kiln_err kiln__ps_pull_params(kiln__ps *p, char *err, size_t errlen)
{
    if (kiln_ps_pull(p->c, p->sh_params) != 0) {
        snprintf(err, errlen, "%s", kiln_ps_client_error(p->c));
        return KILN_EIO;
    }
    scatter_params(p);
    return KILN_OK;
}

kiln_err kiln__ps_pull_state(kiln__ps *p, kiln_model *m, uint8_t **dedup, size_t *lens, char *err,
                             size_t errlen)
{
    uint64_t v0 = 0;
    for (int sh = 0; sh < p->layout.num_ps; sh++) {
        float *st = NULL;
        int nslots = 0;
        uint64_t ver = 0;
        if (kiln_ps_pull_state(p->c, sh, &st, &nslots, &ver, dedup ? &dedup[sh] : NULL,
                               lens ? &lens[sh] : NULL) != 0) {
            snprintf(err, errlen, "%s", kiln_ps_client_error(p->c));
            return KILN_EIO;
        }
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

kiln_err kiln__ps_fault_from_env(uint64_t *drop_after, char *err, size_t errlen)
{
    const char *f = getenv("KILN_PS_FAULT");
    const char *key = "drop_reply_after_apply:";
    char *end = NULL;
    *drop_after = 0;
    if (!f || !*f) return KILN_OK;
    /* digits only: strtoull takes "-1" as 2^64-1, a push number no run
     * reaches, which would be a fault accepted and never fired */
    if (strncmp(f, key, strlen(key)) == 0 && isdigit((unsigned char)f[strlen(key)])) {
        errno = 0;
        unsigned long long n = strtoull(f + strlen(key), &end, 10);
        if (end != f + strlen(key) && *end == '\0' && n > 0 && errno == 0) {
            *drop_after = n;
            return KILN_OK;
        }
    }
    snprintf(err, errlen,
             "KILN_PS_FAULT=%s is not a fault this build knows (drop_reply_after_apply:N, N >= 1)",
             f);
    return KILN_EINVAL;
}

int kiln__ps_serve_shard(kiln__ps *p, const kiln_tf_group *tf, const kiln__ps_serve_cfg *cfg,
                         kiln_ps_stats *st, char *err, size_t errlen)
{
    int shard = cfg->shard, rc = -1;
    size_t n = p->layout.shard_size[shard];
    float *pv = calloc(n + 1, sizeof(float)), *s1 = calloc(n + 1, sizeof(float));
    float *s2 = calloc(n + 1, sizeof(float));
    kiln_ps_server *srv = NULL;
    char ep[300], why[400];
    if (!pv || !s1 || !s2) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    /* this shard's values and slots from the model */
    for (int k = 0; k < p->v.n; k++) {
        if (p->layout.var_shard[k] != shard) continue;
        size_t off = p->layout.var_offset[k], sz = p->v.sizes[k] * sizeof(float);
        memcpy(pv + off, p->v.data[k], sz);
        if (p->slot1[k]) memcpy(s1 + off, p->slot1[k], sz);
        if (p->slot2[k]) memcpy(s2 + off, p->slot2[k], sz);
    }
    /* every interface, on the port the cluster gives this task */
    snprintf(ep, sizeof ep, "tcp://*:%s", strrchr(tf->ps_hosts[shard], ':') + 1);
    kiln_ps_server_config sc = {.endpoint = ep,
                                .shard = (uint32_t)shard,
                                .model_sig = p->layout.sig,
                                .n = n,
                                .params = pv,
                                .slot1 = s1,
                                .slot2 = s2,
                                .version = cfg->version,
                                .opt = p->opt,
                                .max_staleness = cfg->max_staleness,
                                .dedup = cfg->dedup,
                                .n_dedup = cfg->n_dedup,
                                .fault_drop_reply_after_apply = cfg->fault_drop_reply_after_apply};
    /* kilnd's keys for this attempt: CURVE, and only the job's workers */
    kiln_ps_keys keys;
    int got = load_keys(&keys, why, sizeof why);
    if (got < 0) {
        snprintf(err, errlen, "ps %d: %s", shard, why);
        goto out;
    }
    if (got) {
        sc.curve_secret = keys.server_secret;
        sc.curve_client = keys.client_public;
    }
    if (!(srv = kiln_ps_server_new(&sc, why, sizeof why))) {
        snprintf(err, errlen, "ps %d (%s): %s", shard, tf->ps_hosts[shard], why);
        goto out;
    }
    if (cfg->ready) cfg->ready(cfg->ud);
    static volatile sig_atomic_t never;
    rc = kiln_ps_server_run(srv, cfg->stop ? cfg->stop : &never);
    if (rc < 0) snprintf(err, errlen, "ps %d: serving failed", shard);
    if (st) kiln_ps_server_stats(srv, st);
out:
    kiln_ps_server_free(srv);
    free(pv);
    free(s1);
    free(s2);
    return rc;
}

/* ---- the strategy (kiln/strategy.h) ---- */

void kiln__ps_free(kiln_strategy *s)
{
    kiln__ps_close(s->ps);
    s->ps = NULL;
}

kiln_err kiln__ps_attach(kiln_strategy *s, kiln_model *m)
{
    kiln_err e = kiln__ps_open(m, s->tf.num_ps, s->cfg.ps_cosine, s->cfg.ps_total_updates, &s->ps,
                               s->err, sizeof s->err);
    if (e != KILN_OK || s->role != KILN_ROLE_REPLICA) return e;
    e = kiln__ps_connect(s->ps, m, &s->tf, s->rank, s->cfg.ps_timeout_s, s->err, sizeof s->err);
    if (e != KILN_OK) kiln__ps_free(s);
    return e;
}

kiln_err kiln__ps_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       float *loss, int *correct)
{
    if (loss) *loss = 0;
    if (correct) *correct = 0;
    if (n == 0) return KILN_OK;
    return kiln__ps_push_step(s->ps, m, x, y, n, loss, correct, s->err, sizeof s->err);
}

kiln_err kiln__ps_pull(kiln_strategy *s, kiln_model *m)
{
    (void)m;
    return kiln__ps_pull_params(s->ps, s->err, sizeof s->err);
}

uint64_t kiln__ps_version(const kiln_strategy *s)
{
    return s->ps && s->ps->c ? kiln_ps_client_version(s->ps->c, 0) : 0;
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
    kiln_err e = kiln__ps_pull_state(p, m, NULL, NULL, s->err, sizeof s->err);
    if (e != KILN_OK) return e;
    if (kiln_ps_shutdown(p->c) != 0)
        return kiln__strategy_fail(s, KILN_EIO, "shutting the ps tasks down: %s",
                                   kiln_ps_client_error(p->c));
    return KILN_OK;
}

kiln_err kiln__ps_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop, int *stopped)
{
    kiln__ps_serve_cfg sc = {.shard = s->tf.task_index,
                             .version = kiln_model_step(m),
                             .max_staleness = s->cfg.max_staleness <= 0
                                                  ? KILN_PS_UNBOUNDED
                                                  : (uint32_t)s->cfg.max_staleness,
                             .stop = stop};
    if (stopped) *stopped = 0;
    kiln_err e = kiln__ps_fault_from_env(&sc.fault_drop_reply_after_apply, s->err, sizeof s->err);
    if (e != KILN_OK) return e;
    int r = kiln__ps_serve_shard(s->ps, &s->tf, &sc, NULL, s->err, sizeof s->err);
    if (r < 0) return KILN_EIO;
    if (stopped) *stopped = r == 1;
    return KILN_OK;
}
