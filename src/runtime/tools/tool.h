/* tools/tool.h - internal pieces of the kiln-train program. */
#ifndef KILN_TOOL_H
#define KILN_TOOL_H

#include "kiln/train.h"

#include <stdint.h>

/* The flags of `kiln-train mnist`, parsed once (tools/kiln_train.c) for
 * every role, so that a flag added for one is there for the others too. */
typedef struct kt_opts {
    const char *model, *data_dir, *model_dir, *optimizer, *log_format, *lr_schedule;
    int epochs, batch, threads, keep;
    long checkpoint_steps, max_steps, train_examples;
    double lr, momentum;
    uint64_t seed;
    /* distribution (kiln/strategy.h, tools/launch.h) */
    int strategy, world_size, allreduce_inline;
    int shard_optimizer;      /* --shard_optimizer: ZeRO-1 (kiln/strategy.h); -1 = where possible */
    const char *strategy_arg; /* --distribution_strategy's value as given */
    long check_identical, bucket_bytes;
    double eval_timeout_s;
    /* the parameter_server strategy's own */
    long max_staleness, timeout_s;
    const char *ps_flag;     /* a parameter_server-only flag that was given */
    const char *non_ps_flag; /* a flag the parameter_server strategy does not take */
    const char *ar_flag;     /* --bucket_bytes or --allreduce: the unsharded all-reduce's */
    const char *device; /* --device as given, or NULL: the first GPU if any (TensorFlow's rule) */
    int precision;      /* --precision (kiln_precision) */
    long loss_scale_growth; /* --loss_scale_growth_interval (fp16), 0: the scaler's 2000 */
} kt_opts;

/* The parameter_server strategy (--distribution_strategy=parameter_server,
 * or a TF_CONFIG task of type "ps", or no flag and ps tasks in TF_CONFIG's
 * cluster) is built elsewhere: kiln-train mnist calls this hook with the
 * parsed TF_CONFIG (NULL when there is none) and its parsed flags, and exits
 * with the return value. tools/launch.c holds a weak default that says the
 * strategy is not built in and returns 2. A source file in tools/ (say
 * tools/ps_main.c) that defines it replaces the default at link time: the .c
 * files of tools/ are compiled into kiln-train itself, not archived, so the
 * strong definition wins. TF_CONFIG evaluator tasks never come here. */
struct kiln_tf_group;
int kiln_train_ps_main(const struct kiln_tf_group *tf, const kt_opts *o);

/* Where a run is: what a checkpoint records besides the model's buffers. */
/* A named blob a checkpoint carries besides the model's (borrowed). */
typedef struct kt_blob {
    const char *name;
    const void *data;
    size_t size;
} kt_blob;

typedef struct run_pos {
    uint64_t epoch;         /* epoch of the next step */
    uint64_t step_in_epoch; /* its step within that epoch */
    uint64_t shuffle_seed;
    /* more blobs to save (the parameter-server chief's "ps_dedup/<shard>"
     * tables); ignored when restoring */
    const kt_blob *extra;
    int n_extra;
} run_pos;

/* The configuration a checkpoint must match to be resumed bit-exactly. */
typedef struct run_cfg {
    const char *model, *optimizer;
    int gpu; /* trained on a GPU: a resume on another device is allowed, not bit-exact */
    const char *precision; /* "bf16", ...: likewise; NULL or "fp32" for fp32 */
    int batch_size, threads;
    uint64_t seed;
    int replicas; /* data-parallel replicas; 0 or 1 = one (older checkpoints) */
} run_cfg;

/* Saves the model state + pos into dir (keep newest `keep`). 0 or -1 (msg in err). */
int ckpt_save_model(const char *dir, unsigned keep, kiln_model *m, const run_pos *pos,
                    const run_cfg *cfg, char **path_out, char *err, size_t errlen);
/* ckpt_save_model for kiln-train's roles: a failure is printed, and with
 * json the {"event":"checkpoint",...} line is. The path goes to *path_out
 * (the caller frees it) when path_out is set. 0 or -1. */
int kt_save_checkpoint(const char *dir, unsigned keep, kiln_model *m, const run_pos *pos,
                       const run_cfg *cfg, int json, char **path_out);
/* Restores the newest valid checkpoint of dir. Returns 1 when one was
 * restored, 0 when there is none (fresh start), -1 on error (incompatible
 * checkpoint: different model, optimizer, batch size, seed or thread count).
 * *path_out (the file restored) is set, for the caller to free, only on 1. */
int ckpt_restore_model(const char *dir, kiln_model *m, run_pos *pos, const run_cfg *cfg,
                       char **path_out, char *err, size_t errlen);

/* Shared by every `kiln-train mnist` role (tools/mnist_common.c). */
/* --name=value or --name value ('-' and '_' alike): 1 and *val, *used (1 or 2
 * arguments) when arg is that flag. */
int kt_flag(const char *arg, const char *name, const char **val, int *used, const char *next);
/* v as an integer in [lo, hi] into *out: 0, or -1 with a message naming --flag. */
int kt_parse_int(const char *flag, const char *v, long lo, long hi, long *out);
/* s as a JSON string, quoted and escaped. */
void kt_json_str(FILE *f, const char *s);
/* Pixels to (x - mean) / std with Fashion-MNIST's training-set statistics. */
void kt_fmnist_standardise(kiln_data *d);
/* The built-in networks (mlp or cnn), compiled for `batch` examples per step;
 * NULL after printing why. */
kiln_model *kt_mnist_model(const char *model, const char *optimizer, double lr, double momentum,
                           int batch, uint64_t seed);
/* The same on a device (kiln_model_set_device: "/gpu:0") in a precision
 * (kiln_precision); NULL after printing why, unless quiet (then *why says
 * it, for a caller that falls back to the CPU). */
kiln_model *kt_mnist_model_on(const char *model, const char *optimizer, double lr, double momentum,
                              int batch, uint64_t seed, const char *device, int precision,
                              int quiet, char *why, size_t whylen);

/* TensorBoard writers: *sw under model_dir/train_sub and, when swe is set,
 * *swe under model_dir/eval. 0, or -1 after printing why. */
struct kiln_summary_writer;
int kt_open_summaries(const char *model_dir, const char *train_sub, struct kiln_summary_writer **sw,
                      struct kiln_summary_writer **swe);

/* SIGTERM and SIGINT raise *flag, taken by a thread of their own with the
 * signals blocked everywhere else (tools/signals.c says why). Call before
 * kiln starts any thread; again later only to change the flag. 0, or -1 when
 * only a plain handler could be installed (a warning is printed). */
#include <signal.h>
int kt_signals_take(volatile sig_atomic_t *flag);

/* `kiln-train devices` (tools/train_devices.c); argv[0] is the subcommand's name. */
int kiln_train_devices_main(int argc, char **argv);
/* `kiln-train resnet50 --synthetic` (tools/resnet50.c); argv[0] as above. */
int kiln_train_resnet50_main(int argc, char **argv);
/* Loads the trainable parameters (by name) and the step of one checkpoint
 * file into m, whatever flags wrote it: for the evaluator, which only
 * evaluates. 0 or -1 (msg in err). */
int ckpt_load_params(const char *path, kiln_model *m, uint64_t *step, char *err, size_t errlen);

#endif
