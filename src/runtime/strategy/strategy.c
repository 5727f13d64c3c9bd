/* strategy/strategy.c - the strategies' names, the plan worked out from the
 * config and TF_CONFIG, and the public calls that dispatch to allreduce.c or
 * parameter_server.c (kiln/strategy.h, docs/distributed.md). */
#include "strategy/strategy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"auto", "one_device", "mirrored", "multi_worker_mirrored",
                                         "parameter_server"};
#define NKINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

kiln_err kiln_strategy_parse(const char *name, kiln_strategy_kind *out)
{
    for (int i = 0; name && i < NKINDS; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (kiln_strategy_kind)i;
            return KILN_OK;
        }
    return KILN_EINVAL;
}

const char *kiln_strategy_kind_name(kiln_strategy_kind k)
{
    return (int)k >= 0 && (int)k < NKINDS ? kind_names[k] : "unknown";
}

kiln_err kiln__strategy_fail(kiln_strategy *s, kiln_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return e;
}

/* The plan: kind, role, world and rank. Fills s->err and returns an error
 * for a combination that cannot run. */
static kiln_err plan(kiln_strategy *s)
{
    const kiln_strategy_config *c = &s->cfg;
    char err[400];
    const char *json = c->tf_config;
    if (!json) {
        json = getenv("TF_CONFIG");
        if (!json || !*json) json = getenv("CLUSTER_SPEC");
    }
    kiln_err e = kiln_tf_config_parse(json, &s->tf, err, sizeof err);
    if (e != KILN_OK && e != KILN_ENOTFOUND) return kiln__strategy_fail(s, e, "TF_CONFIG: %s", err);
    s->have_tf = e == KILN_OK;
    kiln_strategy_kind k = c->kind;
    if (k == KILN_STRATEGY_AUTO)
        k = s->have_tf && s->tf.num_ps > 0 ? KILN_STRATEGY_PARAMETER_SERVER
                                           : KILN_STRATEGY_MULTI_WORKER_MIRRORED;
    s->kind = k;
    s->world = 1;
    s->rank = 0;
    int is_ps_task = s->have_tf && strcmp(s->tf.task_type, "ps") == 0;
    if (k == KILN_STRATEGY_PARAMETER_SERVER || is_ps_task) {
        if (k != KILN_STRATEGY_PARAMETER_SERVER)
            return kiln__strategy_fail(s, KILN_EINVAL,
                                       "a TF_CONFIG task of type ps has a part only in the "
                                       "parameter_server strategy, not in %s",
                                       kiln_strategy_kind_name(k));
        if (!s->have_tf)
            return kiln__strategy_fail(s, KILN_EINVAL,
                                       "the parameter_server strategy needs TF_CONFIG: it is "
                                       "not set");
        if (s->tf.num_ps == 0)
            return kiln__strategy_fail(s, KILN_EINVAL,
                                       "the parameter_server strategy needs ps tasks: TF_CONFIG "
                                       "has no cluster.ps list");
        for (int i = 0; i < s->tf.num_ps; i++) {
            const char *a = s->tf.ps_hosts[i], *colon = strrchr(a, ':');
            if (!colon || colon == a || !colon[1] || strlen(a) > 255)
                return kiln__strategy_fail(s, KILN_EINVAL,
                                           "TF_CONFIG cluster.ps[%d]: expected \"host:port\" (at "
                                           "most 255 characters), got \"%.64s%s\"",
                                           i, a, strlen(a) > 64 ? "..." : "");
        }
        s->role = is_ps_task                                  ? KILN_ROLE_PS
                  : strcmp(s->tf.task_type, "evaluator") == 0 ? KILN_ROLE_EVALUATOR
                                                              : KILN_ROLE_REPLICA;
        if (is_ps_task && s->tf.task_index >= s->tf.num_ps)
            return kiln__strategy_fail(s, KILN_EINVAL, "task ps %d is not in cluster.ps (%d tasks)",
                                       s->tf.task_index, s->tf.num_ps);
        s->world = s->tf.world_size;
        s->rank = s->tf.rank;
        return KILN_OK;
    }
    if (s->have_tf && strcmp(s->tf.task_type, "evaluator") == 0) {
        s->role = KILN_ROLE_EVALUATOR;
        s->world = s->tf.world_size;
        s->rank = -1;
        return KILN_OK;
    }
    int tf_world = s->have_tf ? s->tf.world_size : 1;
    if (c->world_size > 1 && tf_world > 1)
        return kiln__strategy_fail(s, KILN_EINVAL,
                                   "a local group of %d replicas and a TF_CONFIG cluster of %d "
                                   "replicas: the cluster comes from one or the other",
                                   c->world_size, tf_world);
    if (k == KILN_STRATEGY_ONE_DEVICE || k == KILN_STRATEGY_MIRRORED) {
        /* both train on this machine's devices alone; two processes doing so
         * would write the same model dir and train twice */
        int w = c->world_size > 1 ? c->world_size : tf_world;
        if (w > 1)
            return kiln__strategy_fail(s, KILN_EINVAL,
                                       "%s trains on one machine, but %s asks for %d replicas; "
                                       "use multi_worker_mirrored",
                                       kiln_strategy_kind_name(k),
                                       c->world_size > 1 ? "the local group" : "TF_CONFIG", w);
        return KILN_OK;
    }
    if (tf_world > 1) {
        s->world = tf_world;
        s->rank = s->tf.rank;
    } else if (c->world_size > 1) {
        if (c->rank < 0 || c->rank >= c->world_size)
            return kiln__strategy_fail(s, KILN_EINVAL, "rank %d is not in a group of %d", c->rank,
                                       c->world_size);
        s->world = c->world_size;
        s->rank = c->rank;
        if (c->job_key) {
            if (strlen(c->job_key) >= sizeof s->key)
                return kiln__strategy_fail(s, KILN_EINVAL, "job key '%.40s...' is too long",
                                           c->job_key);
            snprintf(s->key, sizeof s->key, "%s", c->job_key);
            s->cfg.job_key = s->key;
        }
    }
    return KILN_OK;
}

kiln_err kiln_strategy_new(const kiln_strategy_config *cfg, kiln_strategy **out, char *err,
                           size_t errlen)
{
    kiln_err e = KILN_OK;
    kiln_strategy *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return KILN_ENOMEM;
    }
    if (cfg) s->cfg = *cfg;
    if ((e = plan(s)) != KILN_OK) {
        if (err && errlen) snprintf(err, errlen, "%s", s->err);
        kiln_strategy_free(s);
        goto out;
    }
    *out = s;
out:
    return e;
}

void kiln_strategy_free(kiln_strategy *s)
{
    if (!s) return;
    kiln__ar_free(s);
    kiln__ps_free(s);
    if (s->have_tf) kiln_tf_group_free(&s->tf);
    free(s);
}

kiln_strategy_kind kiln_strategy_kind_of(const kiln_strategy *s)
{
    return s->kind;
}

kiln_strategy_role kiln_strategy_role_of(const kiln_strategy *s)
{
    return s->role;
}

int kiln_strategy_world(const kiln_strategy *s)
{
    return s->world;
}

int kiln_strategy_rank(const kiln_strategy *s)
{
    return s->rank;
}

const char *kiln_strategy_task_type(const kiln_strategy *s)
{
    return s->have_tf ? s->tf.task_type : "";
}

int kiln_strategy_task_index(const kiln_strategy *s)
{
    return s->have_tf ? s->tf.task_index : 0;
}

const struct kiln_tf_group *kiln_strategy_tf_group(const kiln_strategy *s)
{
    return s->have_tf ? &s->tf : NULL;
}

const char *kiln_strategy_error(const kiln_strategy *s)
{
    return s->err;
}

kiln_err kiln_strategy_attach(kiln_strategy *s, kiln_model *m)
{
    if (s->m)
        return kiln__strategy_fail(s, KILN_EINVAL, "the strategy is already attached to a model");
    if (s->role == KILN_ROLE_EVALUATOR)
        return kiln__strategy_fail(s, KILN_EINVAL,
                                   "an evaluator task is in no group: it only evaluates");
    kiln_err e =
        s->kind == KILN_STRATEGY_PARAMETER_SERVER ? kiln__ps_attach(s, m) : kiln__ar_attach(s, m);
    if (e == KILN_OK) s->m = m;
    return e;
}

kiln_err kiln_strategy_train_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y,
                                  int n, int global_n, float *loss, int *correct)
{
    if (!s->m || s->m != m)
        return kiln__strategy_fail(s, KILN_EINVAL, "train_step: attach the model first");
    if (s->role != KILN_ROLE_REPLICA)
        return kiln__strategy_fail(s, KILN_EINVAL, "train_step: this task does not train");
    if (s->kind == KILN_STRATEGY_PARAMETER_SERVER)
        return kiln__ps_step(s, m, x, y, n, loss, correct);
    return kiln__ar_step(s, m, x, y, n, global_n, loss, correct);
}

kiln_err kiln_strategy_finish(kiln_strategy *s, kiln_model *m)
{
    if (!s->m || s->m != m)
        return kiln__strategy_fail(s, KILN_EINVAL, "finish: attach the model first");
    if (s->kind == KILN_STRATEGY_PARAMETER_SERVER) return kiln__ps_finish(s, m);
    kiln_err e = kiln_strategy_gather_state(s, m); /* sharded: the state whole again */
    if (e != KILN_OK) return e;
    double z = 0;
    return s->world > 1 ? kiln_strategy_sum(s, &z, 1) : KILN_OK; /* a barrier */
}

kiln_err kiln_strategy_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop,
                             int *stopped)
{
    if (s->role != KILN_ROLE_PS)
        return kiln__strategy_fail(s, KILN_EINVAL, "serve: this task is not a ps task");
    if (!s->m || s->m != m)
        return kiln__strategy_fail(s, KILN_EINVAL, "serve: attach the model first");
    return kiln__ps_serve(s, m, stop, stopped);
}

kiln_err kiln_strategy_pull(kiln_strategy *s, kiln_model *m)
{
    if (s->kind != KILN_STRATEGY_PARAMETER_SERVER || s->role != KILN_ROLE_REPLICA || !s->m ||
        s->m != m)
        return kiln__strategy_fail(s, KILN_EINVAL,
                                   "pull: only a parameter_server replica attached to m pulls");
    return kiln__ps_pull(s, m);
}

uint64_t kiln_strategy_ps_version(const kiln_strategy *s)
{
    return s->kind == KILN_STRATEGY_PARAMETER_SERVER ? kiln__ps_version(s) : 0;
}

#ifndef KILN_HAVE_PS
/* A build without ZeroMQ: the parameter_server strategy is planned (so a
 * program can tell its user which strategy TF_CONFIG asks for) but does not run. */
static kiln_err no_ps(kiln_strategy *s)
{
    return kiln__strategy_fail(s, KILN_ENOTFOUND,
                               "the parameter_server strategy is not built in (kiln was built "
                               "without ZeroMQ)");
}
kiln_err kiln__ps_attach(kiln_strategy *s, kiln_model *m)
{
    (void)m;
    return no_ps(s);
}
void kiln__ps_free(kiln_strategy *s)
{
    (void)s;
}
kiln_err kiln__ps_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       float *loss, int *correct)
{
    (void)m, (void)x, (void)y, (void)n, (void)loss, (void)correct;
    return no_ps(s);
}
kiln_err kiln__ps_finish(kiln_strategy *s, kiln_model *m)
{
    (void)m;
    return no_ps(s);
}
kiln_err kiln__ps_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop, int *stopped)
{
    (void)m, (void)stop, (void)stopped;
    return no_ps(s);
}
kiln_err kiln__ps_pull(kiln_strategy *s, kiln_model *m)
{
    (void)m;
    return no_ps(s);
}
uint64_t kiln__ps_version(const kiln_strategy *s)
{
    (void)s;
    return 0;
}
#endif
