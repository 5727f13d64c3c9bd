/* strategy/strategy_int.h - the strategies' internals (kiln/strategy.h).
 *
 *   strategy.c          names, the plan (kind, role, world, rank from the
 *                       config and TF_CONFIG), the public calls' dispatch
 *   allreduce.c         one_device, mirrored, multi_worker_mirrored: the
 *                       communicator, the bucketed gradient sync, broadcasts
 *   vars.c              a model's trainable variables and their place in the
 *                       flat gradient buffer (what parameter servers shard)
 *   parameter_server.c  parameter_server over kiln/ps.h: replica step, pull,
 *                       finish, and the ps task's serve loop (ZeroMQ builds
 *                       only; without it the calls say it is not built in),
 *                       over the mechanics in ps_core.h that kiln-train's
 *                       ps glue (tools/ps_*.c) calls too */
#ifndef KILN_STRATEGY_INT_H
#define KILN_STRATEGY_INT_H

#include "kiln/collective.h"
#include "kiln/strategy.h"

#include <stdarg.h>

typedef struct kiln__allreduce kiln__allreduce;
typedef struct kiln__ps kiln__ps;

struct kiln_strategy {
    kiln_strategy_config cfg;
    kiln_strategy_kind kind; /* resolved: never AUTO */
    kiln_strategy_role role;
    int world, rank;
    int have_tf;
    kiln_tf_group tf; /* valid when have_tf */
    char key[72];     /* the local group's shm key (cfg.job_key, copied) */
    kiln_model *m;    /* set by attach */
    kiln__allreduce *ar;
    kiln__ps *ps;
    char err[512];
};

/* Writes the sentence into s->err and returns e (for `return kiln__fail(...)`). */
kiln_err kiln__strategy_fail(kiln_strategy *s, kiln_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- allreduce.c ---- */
/* Joins the group of s->world replicas and allocates the gradient buffer. */
kiln_err kiln__ar_attach(kiln_strategy *s, kiln_model *m);
/* Waits for queued calls, frees the buffer, leaves the group. */
void kiln__ar_free(kiln_strategy *s);
kiln_err kiln__ar_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       int global_n, float *loss, int *correct);

/* ---- vars.c ---- */
/* The trainable parameters of m, layer by layer in model order, named
 * "<layer>/<param>", and where each one's gradient lies in the flat buffer of
 * kiln_model_compute_grads (layers in reverse order, kernel then bias). The
 * names and data point into m. Free with kiln__vars_free (also after a failure). */
typedef struct kiln__vars {
    int n;
    const char **names;
    size_t *sizes;
    float **data;
    size_t *grad_off;
} kiln__vars;
kiln_err kiln__vars_of_model(kiln_model *m, kiln__vars *v, char *err, size_t errlen);
void kiln__vars_free(kiln__vars *v);
/* The model's buffer "<var>/<slot>" (momentum, adam_m, adam_v), or NULL. */
float *kiln__model_slot(kiln_model *m, const char *var, const char *slot);

/* ---- parameter_server.c (ZeroMQ builds: KILN_HAVE_PS) ---- */
kiln_err kiln__ps_attach(kiln_strategy *s, kiln_model *m);
void kiln__ps_free(kiln_strategy *s);
kiln_err kiln__ps_step(kiln_strategy *s, kiln_model *m, const float *x, const uint8_t *y, int n,
                       float *loss, int *correct);
kiln_err kiln__ps_finish(kiln_strategy *s, kiln_model *m);
kiln_err kiln__ps_serve(kiln_strategy *s, kiln_model *m, volatile sig_atomic_t *stop, int *stopped);
kiln_err kiln__ps_pull(kiln_strategy *s, kiln_model *m);
uint64_t kiln__ps_version(const kiln_strategy *s);

#endif
