/* strategy/ps_core.h - the parameter_server mechanics, one path for the
 * library's strategy (parameter_server.c) and kiln-train's ps glue
 * (tools/ps_*.c, which adds only its flags, data, logs and checkpoints).
 * ZeroMQ builds only (KILN_HAVE_PS).
 *
 * The model's trainable variables (vars.c) are sharded over TF_CONFIG's ps
 * tasks by kiln_ps_layout_init, salted with "adam" or "sgd" (kiln-train's
 * --optimizer value), so every replica and ps task agrees on the signature.
 * Errors: a kiln_err with one sentence in err; nothing prints. */
#ifndef KILN_STRATEGY_PS_CORE_H
#define KILN_STRATEGY_PS_CORE_H

#include "kiln/collective.h"
#include "kiln/ps.h"
#include "strategy/strategy_int.h"

struct kiln__ps {
    kiln__vars v;
    kiln_ps_layout layout;
    kiln_ps_opt opt;        /* from the model's optimizer (+ cosine, total_updates) */
    float **slot1, **slot2; /* per variable: the model's optimizer slots */
    /* a replica's */
    kiln_ps_client *c;
    float *grads;                  /* kiln_model_compute_grads' flat buffer */
    float **sh_params, **sh_grads; /* per shard */
    const float **gvars;           /* per variable: its gradient in grads */
    kiln_ps_push_info last;        /* the last push's staleness and drops */
};

/* Shards m's variables over num_ps tasks; the ps optimizer is m's, with a
 * cosine decay over total_updates when cosine is set (p->opt, which a ps
 * task may still change before serving). *out is NULL on failure. */
kiln_err kiln__ps_open(kiln_model *m, int num_ps, int cosine, uint64_t total_updates,
                       kiln__ps **out, char *err, size_t errlen);
/* A replica's side: its buffers, the client (worker `rank`; give up on a ps
 * after timeout_s, 0: 60 s; CURVE keys from $KILN_PS_KEYS), and the first
 * pull of the ps tasks' parameters into m. */
kiln_err kiln__ps_connect(kiln__ps *p, kiln_model *m, const kiln_tf_group *tf, int rank,
                          double timeout_s, char *err, size_t errlen);
void kiln__ps_close(kiln__ps *p);
/* One step: gradient of the n examples, pushed to every shard; m gets the
 * parameters after it. p->last tells the push's staleness. n > 0. */
kiln_err kiln__ps_push_step(kiln__ps *p, kiln_model *m, const float *x, const uint8_t *y, int n,
                            float *loss, int *correct, char *err, size_t errlen);
/* The ps tasks' current parameters into m. */
kiln_err kiln__ps_pull_params(kiln__ps *p, char *err, size_t errlen);
/* Every shard's parameters and optimizer slots into m, step = shard 0's
 * version. dedup (may be NULL): num_ps entries that get each shard's dedup
 * table (kiln_ps_dedup_encode bytes, malloc'd, caller frees; taken in the
 * same snapshot as its parameters), lens their sizes. */
kiln_err kiln__ps_pull_state(kiln__ps *p, kiln_model *m, uint8_t **dedup, size_t *lens, char *err,
                             size_t errlen);

/* KILN_PS_FAULT (tests only, docs/parameter-server.md): "" or unset: none (0);
 * "drop_reply_after_apply:N": the reply to the Nth applied push is lost.
 * Anything else is refused (KILN_EINVAL), so a misspelt fault never passes
 * silently. */
kiln_err kiln__ps_fault_from_env(uint64_t *drop_after, char *err, size_t errlen);

typedef struct kiln__ps_serve_cfg {
    int shard;
    uint64_t version;       /* the updates m's values hold (a restored step) */
    uint32_t max_staleness; /* KILN_PS_UNBOUNDED: never drop */
    const kiln_ps_dedup_entry *dedup;
    size_t n_dedup;
    uint64_t fault_drop_reply_after_apply;
    volatile sig_atomic_t *stop; /* may be NULL */
    /* called once the endpoint is bound, before serving (may be NULL) */
    void (*ready)(void *ud);
    void *ud;
} kiln__ps_serve_cfg;
/* Serves shard cfg->shard, from m's parameters and optimizer slots, on the
 * port cluster.ps gives it, until SHUTDOWN (0) or *stop (1); -1 with err on a
 * failure. st (may be NULL) gets the server's final statistics. */
int kiln__ps_serve_shard(kiln__ps *p, const kiln_tf_group *tf, const kiln__ps_serve_cfg *cfg,
                         kiln_ps_stats *st, char *err, size_t errlen);

#endif
