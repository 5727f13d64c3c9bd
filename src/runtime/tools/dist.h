/* tools/dist.h - kiln-train's distribution strategies (docs/distributed.md):
 * which replicas exist (TF_CONFIG, --world_size), the local launcher that
 * forks --world_size replicas, and the gradient sync of one replica: the
 * communicator, the registered flat gradient buffer, bucket all-reduces, the
 * stop flag, the state broadcast at start and the debug identity check.
 *
 * This is the only part of kiln-train that knows libkiln_collective; the
 * runtime sees a kiln_grad_sync (kiln/train.h) and nothing else. */
#ifndef KILN_TOOL_DIST_H
#define KILN_TOOL_DIST_H

#include "kiln/collective.h"
#include "kiln/train.h"
#include "tools/tool.h"

#include <signal.h>

/* TensorFlow's names (tf.distribute) */
typedef enum dist_strategy {
    DIST_AUTO = 0, /* no flag: from TF_CONFIG (ps tasks: parameter_server,
                      else multi_worker_mirrored), or one replica */
    DIST_ONE_DEVICE,
    DIST_MIRRORED, /* one machine's devices; on this CPU-only build one: the CPU */
    DIST_MULTI_WORKER_MIRRORED,
    DIST_PARAMETER_SERVER,
} dist_strategy;

/* Parses a --distribution_strategy value; -1 when unknown. */
int dist_strategy_parse(const char *s);
const char *dist_strategy_name(dist_strategy s);

typedef struct dist_plan {
    dist_strategy strategy; /* resolved (never DIST_AUTO after dist_plan_make) */
    int world, rank;        /* the all-reduce group and this replica's place in it */
    int evaluator;          /* TF_CONFIG task "evaluator": evaluate checkpoints */
    int ps;                 /* hand over to kiln_train_ps_main */
    int local;              /* world > 1 from --world_size: the launcher forks */
    int have_tf;
    kiln_tf_group tf; /* valid when have_tf */
    char key[64];     /* shm segment name of a --world_size group */
} dist_plan;

/* Works out the plan from the flag (DIST_AUTO when not given), --world_size
 * (0 = not given) and $TF_CONFIG. On a bad combination or a bad TF_CONFIG
 * prints one sentence to stderr and returns 2 (the usage exit code); else 0.
 * Free with dist_plan_free. */
int dist_plan_make(dist_strategy strategy, int world_size, dist_plan *p);
void dist_plan_free(dist_plan *p);

/* --world_size mode: forks p->world replicas. Returns -1 in each child, with
 * p->rank set (rank > 0 children have stdout on /dev/null: rank 0's output
 * is the program's output); in the parent, waits for them all and returns
 * the program's exit code: 0, 143 when they stopped on SIGTERM (the
 * parent's SIGTERM/SIGINT is forwarded), else non-zero after naming the
 * replica that failed on stderr (the others are stopped). */
int dist_launch(dist_plan *p);

typedef struct dist_ctx dist_ctx;

/* Joins the group and allocates the gradient buffer (collective). `term` is
 * the program's SIGTERM flag: each step carries it to every replica in the
 * last bucket, so they all stop after the same step. inline_ar: all-reduce
 * each bucket on this thread as it completes (1) or queue it on the
 * communication thread and wait before the update (0). NULL on failure
 * (message printed). */
dist_ctx *dist_open(const dist_plan *p, kiln_model *m, size_t bucket_bytes, int inline_ar,
                    volatile sig_atomic_t *term);
void dist_close(dist_ctx *d);
const kiln_grad_sync *dist_sync(dist_ctx *d);
/* After a step: did any replica ask to stop (SIGTERM) in it? */
int dist_stop_requested(const dist_ctx *d);
/* Do all replicas run on this machine (the shm backend)? */
int dist_one_host(const dist_ctx *d);
/* The reason the last collective failed ("step 12: allreduce #40: rank 1 died ..."). */
const char *dist_error(const dist_ctx *d);

/* Start of training: rank 0's `status` (1 restored, 0 fresh, -1 failed),
 * position and whole model state (parameters, optimizer slots, step, RNG)
 * are copied to every replica, and the flags that shape the run (cfg, as a
 * string) are compared. Returns 0, or -1 with a printed message (on every
 * rank when the chief failed to restore). */
int dist_share_state(dist_ctx *d, kiln_model *m, int *status, run_pos *pos, const char *cfg);
/* Debug: are all replicas' parameters bit-identical? 0 yes, 1 diverged
 * (message names the first diverged rank and buffer), -1 comm failure. */
int dist_check_identical(dist_ctx *d, kiln_model *m);
/* Sums `n` doubles over the replicas in place (epoch statistics). */
int dist_sum(dist_ctx *d, double *v, int n);

/* kiln_train_ps_main, the parameter_server hook, is declared in tools/tool.h. */

#endif
