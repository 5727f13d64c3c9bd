/* tools/tool.h - internal pieces of the kiln-train program. */
#ifndef KILN_TOOL_H
#define KILN_TOOL_H

#include "kiln/train.h"

#include <stdint.h>

/* Where a run is: what a checkpoint records besides the model's buffers. */
typedef struct run_pos {
    uint64_t epoch;         /* epoch of the next step */
    uint64_t step_in_epoch; /* its step within that epoch */
    uint64_t shuffle_seed;
} run_pos;

/* The configuration a checkpoint must match to be resumed bit-exactly. */
typedef struct run_cfg {
    const char *model, *optimizer;
    int batch_size, threads;
    uint64_t seed;
} run_cfg;

/* Saves the model state + pos into dir (keep newest `keep`). 0 or -1 (msg in err). */
int ckpt_save_model(const char *dir, unsigned keep, kiln_model *m, const run_pos *pos,
                    const run_cfg *cfg, char **path_out, char *err, size_t errlen);
/* Restores the newest valid checkpoint of dir. Returns 1 when one was
 * restored, 0 when there is none (fresh start), -1 on error (incompatible
 * checkpoint: different model, optimizer, batch size, seed or thread count).
 * *path_out (the file restored) is set, for the caller to free, only on 1. */
int ckpt_restore_model(const char *dir, kiln_model *m, run_pos *pos, const run_cfg *cfg,
                       char **path_out, char *err, size_t errlen);

/* The parameter_server strategy (tools/ps_*.c; built when ZeroMQ is found,
 * then KILN_HAVE_PS is defined). kiln_train_ps_main gets the parsed TF_CONFIG
 * (NULL: it reads TF_CONFIG / CLUSTER_SPEC itself) and the arguments after
 * "mnist"; the same signature as the hook of branch dist. */
struct kiln_tf_group;
int kiln_train_ps_requested(int argc, char **argv);
int kiln_train_ps_main(const struct kiln_tf_group *tf, int argc, char **argv);

#endif
