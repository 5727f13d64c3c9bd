/* kiln/ps.h - asynchronous parameter servers (the parameter_server strategy).
 *
 * The model's trainable variables are sharded over the ps tasks (whole
 * variables, assigned greedily by size: see kiln_ps_layout_init). Each ps task
 * runs a kiln_ps_server holding its shard's parameters and optimizer slots
 * and applies every gradient a worker pushes as soon as it arrives (SGD with
 * momentum or Adam, the runtime's own update arithmetic). Workers
 * (kiln_ps_client) push gradients and pull parameters without waiting for
 * each other. The shard's version counts the updates applied; a gradient
 * carries the version it was computed from, and one staler than
 * max_staleness versions is dropped (counted, reported) instead of applied.
 *
 * Transport: ZeroMQ (ROUTER on the ps, one DEALER per ps in each worker);
 * the messages' contents are defined in src/ps/wire.h. Every request is
 * checked for size, magic, version, op, model signature and shard before it
 * is used. All functions return 0 on success and -1 with one sentence in the
 * object's error (or err) on failure. */
#ifndef KILN_PS_H
#define KILN_PS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sharding ---- */
typedef struct kiln_ps_layout {
    int num_vars, num_ps;
    int *var_shard;     /* var -> ps task */
    size_t *var_offset; /* offset of the var in its shard's flat vector */
    size_t *var_size;   /* floats */
    size_t *shard_size; /* floats per shard */
    uint64_t sig;       /* signature of names, sizes, sharding and salt */
} kiln_ps_layout;

/* Variables (names and float counts, in model order) over num_ps shards:
 * largest first, each to the shard with the fewest floats so far (ties: the
 * lower index), so no variable is split and the shards stay within one
 * variable of balanced. Within a shard, variables keep model order. salt
 * (e.g. the optimizer) goes into the signature. */
int kiln_ps_layout_init(kiln_ps_layout *l, int num_vars, const char *const *names,
                        const size_t *sizes, int num_ps, const char *salt, char *err,
                        size_t errlen);
void kiln_ps_layout_free(kiln_ps_layout *l);
/* Per-variable buffers -> per-shard flat vectors, and back. */
void kiln_ps_layout_gather(const kiln_ps_layout *l, const float *const *vars, float *const *shards);
void kiln_ps_layout_scatter(const kiln_ps_layout *l, const float *const *shards,
                            float *const *vars);

/* ---- server ---- */
typedef struct kiln_ps_opt {
    int adam;                /* 0 = SGD with momentum, 1 = Adam */
    float lr, momentum;      /* SGD */
    float beta1, beta2, eps; /* Adam */
    int cosine;              /* lr decays to 0 over total_updates (kiln-train's schedule) */
    uint64_t total_updates;
} kiln_ps_opt;

#define KILN_PS_UNBOUNDED UINT32_MAX

typedef struct kiln_ps_server_config {
    const char *endpoint; /* ZeroMQ endpoint to bind, e.g. "tcp://0.0.0.0:2222" */
    uint32_t shard;
    uint64_t model_sig;
    size_t n;                   /* floats in this shard */
    const float *params;        /* n initial values (copied) */
    const float *slot1, *slot2; /* optimizer slots (momentum; Adam m, v) or NULL = zeros */
    uint64_t version;           /* updates already applied (restored checkpoint) */
    kiln_ps_opt opt;
    uint32_t max_staleness; /* KILN_PS_UNBOUNDED: apply every gradient */
    /* ZeroMQ CURVE (Z85 keys, 40 characters): with curve_secret the port
     * speaks CURVE only and admits only the client whose public key is
     * curve_client; every other client fails its handshake and is counted
     * in kiln_ps_stats.rejected. NULL: plain ZeroMQ, any client that can
     * reach the port. */
    const char *curve_secret, *curve_client;
    /* The dedup table restored with the parameters (a checkpoint's
     * "ps_dedup/<shard>" blob, kiln_ps_dedup_decode): which pushes of which
     * worker attempts are already in params. NULL: none. Copied. */
    const kiln_ps_dedup_entry *dedup;
    size_t n_dedup;
    /* TESTS ONLY (kiln-train reads KILN_PS_FAULT=drop_reply_after_apply:N):
     * the reply to the Nth push this server applies is not sent, as if lost
     * on the way; the client resends and must not get it applied twice. 0: off. */
    uint64_t fault_drop_reply_after_apply;
} kiln_ps_server_config;

typedef struct kiln_ps_server kiln_ps_server;
/* Binds the endpoint. NULL with the reason in err on failure. */
kiln_ps_server *kiln_ps_server_new(const kiln_ps_server_config *cfg, char *err, size_t errlen);
/* The endpoint actually bound (a "*" port resolved), for tests. */
const char *kiln_ps_server_endpoint(const kiln_ps_server *s);
/* Serves until a SHUTDOWN request (returns 0) or *stop becomes nonzero
 * (returns 1; checked every 100 ms). Malformed requests are answered with an
 * error and counted, never fatal. -1 on a ZeroMQ failure. */
int kiln_ps_server_run(kiln_ps_server *s, volatile sig_atomic_t *stop);
void kiln_ps_server_stats(const kiln_ps_server *s, kiln_ps_stats *st);
const float *kiln_ps_server_params(const kiln_ps_server *s);
void kiln_ps_server_free(kiln_ps_server *s);
/* The learning rate the server uses for the update that makes version v+1. */
float kiln_ps_lr_at(const kiln_ps_opt *o, uint64_t v);

/* ---- CURVE keys of a job attempt (kilnd writes them, KILN_PS_KEYS names
 *      the file; src/exec/supervisor/pskeys.h) ---- */
typedef struct kiln_ps_keys {
    char server_public[41], server_secret[41], client_public[41], client_secret[41];
} kiln_ps_keys;
/* Reads the file (refused when group or others may read it). 0, or -1 with
 * the reason in err. */
int kiln_ps_keys_load(const char *path, kiln_ps_keys *k, char *err, size_t errlen);

/* ---- client (one per worker) ---- */
typedef struct kiln_ps_client_config {
    int num_ps;
    const char *const *addrs; /* "host:port" of ps task i (TF_CONFIG cluster.ps) */
    const size_t *shard_size; /* floats per shard (kiln_ps_layout) */
    uint64_t model_sig;
    uint32_t worker;
    int timeout_ms; /* give up on a request after this long (a ps that stays away) */
    int retry_ms;   /* resend on a fresh socket after this long without a reply
                     * (a ps that restarted lost the request) */
    /* CURVE (Z85): the ps's public key and this client's pair; NULL: plain */
    const char *curve_server, *curve_public, *curve_secret;
    /* This client's attempt (exactly-once pushes): must grow with each life
     * of the replica. 0 (the usual): chosen at the first pull or push, the
     * wall clock in microseconds, raised above any attempt the ps tasks
     * report having seen from this worker (so a clock set back does not
     * make a new life's pushes look like repeats). */
    uint64_t attempt;
} kiln_ps_client_config;

typedef struct kiln_ps_push_info {
    uint64_t staleness_sum, staleness_max; /* over the shards of this push */
    int dropped;                           /* shards that dropped it as too stale */
} kiln_ps_push_info;

typedef struct kiln_ps_client kiln_ps_client;
kiln_ps_client *kiln_ps_client_new(const kiln_ps_client_config *cfg, char *err, size_t errlen);
void kiln_ps_client_free(kiln_ps_client *c);
const char *kiln_ps_client_error(const kiln_ps_client *c);
/* Pulls every shard's parameters into params[shard] (shard_size floats each). */
int kiln_ps_pull(kiln_ps_client *c, float *const *params);
/* Pushes grads[shard] (computed from the versions last pulled) to every
 * shard at once and receives each shard's parameters after it. */
int kiln_ps_push(kiln_ps_client *c, const float *const *grads, float *const *params,
                 kiln_ps_push_info *info);
/* Parameters then optimizer slots of one shard: *out (malloc'd, caller frees)
 * gets shard_size * (1 + *nslots) floats; *version the shard's version;
 * *dedup (malloc'd, caller frees; may be NULL to discard) the shard's dedup
 * table as kiln_ps_dedup_encode bytes, validated, *dedup_len bytes. */
int kiln_ps_pull_state(kiln_ps_client *c, int shard, float **out, int *nslots, uint64_t *version,
                       uint8_t **dedup, size_t *dedup_len);
int kiln_ps_get_stats(kiln_ps_client *c, int shard, kiln_ps_stats *st);
/* The attempt this client's pushes carry (0 before the first pull or push). */
uint64_t kiln_ps_client_attempt(const kiln_ps_client *c);
/* The version of shard i that the last pull or push returned. */
uint64_t kiln_ps_client_version(const kiln_ps_client *c, int shard);
int kiln_ps_done(kiln_ps_client *c);     /* tells every shard this worker is done */
int kiln_ps_shutdown(kiln_ps_client *c); /* asks every ps to exit */

#ifdef __cplusplus
}
#endif
#endif
