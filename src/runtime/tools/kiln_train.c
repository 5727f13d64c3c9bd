/* tools/kiln_train.c - the kiln-train program.
 *
 *   kiln-train mnist [--model=mlp|cnn] [--data_dir=DIR] [--model_dir=DIR | --job-dir=DIR]
 *                    [--train_epochs=N] [--batch_size=N] [--learning_rate=F]
 *                    [--optimizer=sgd|adam] [--seed=N] [--checkpoint_steps=N]
 *                    [--keep_checkpoints=N] [--threads=N] [--log_format=text|json]
 *   kiln-train inspect FILE|DIR
 *
 * With a model dir, training resumes from its newest valid checkpoint, writes
 * checkpoints every --checkpoint_steps steps and at each epoch end, and
 * TensorBoard events under <model_dir>/train and <model_dir>/eval. SIGTERM
 * (what a drain sends) finishes the current step, writes a checkpoint and
 * exits with 143.
 *
 * Data parallelism (docs/distributed.md, kiln/strategy.h): --distribution_strategy
 * with TensorFlow's names; the replicas come from TF_CONFIG (chief/master and
 * workers train, an evaluator evaluates checkpoints, ps tasks go to
 * kiln_train_ps_main) or from --world_size=N, which forks N local replicas
 * (tools/launch.c).
 * --batch_size is the global batch; the chief restores, checkpoints and logs. */
#include "kiln/train.h"
#include "kiln/cuda.h"

#include "ckpt/ckpt.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "summary/summary.h"
#include "kiln/strategy.h"
#include "tools/launch.h"
#include "tools/tool.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A number for the JSON event lines: a diverged run's NaN or infinite loss
 * is written as null (printf's "nan" is not JSON, and kilnd's reader and
 * any other would drop the whole line). The array lives until the end of
 * the printf call that uses it (a temporary of a struct type). */
typedef struct jnum_str {
    char s[32];
} jnum_str;

static jnum_str jnum(double v)
{
    jnum_str o;
    if (isfinite(v))
        snprintf(o.s, sizeof o.s, "%.6f", v);
    else
        snprintf(o.s, sizeof o.s, "null");
    return o;
}

typedef struct run {
    kt_opts o;
    run_cfg cfg;
    int json, tty;
    kiln_model *m;
    kiln_data train, test;
    kiln_summary_writer *sw_train, *sw_eval;
    uint64_t shuffle_seed;
    double epoch_t0, train_secs, last_bar;
    size_t samples;
    double loss_sum;
    size_t correct, seen;
    uint64_t total_steps;
    int stopped_by_signal, failed, hit_max_steps;
    uint64_t next_epoch, next_step; /* position of the next step to take */
    kiln_strategy *s;
    int d; /* several replicas (or KILN_TRAIN_SYNC_PATH): the gradient-sync step,
            * else one replica and the fused single-replica step */
    int rank, world;
    /* tests: $KILN_TRAIN_TEST_DIVERGE="RANK:STEP" nudges one parameter of that
     * replica after that step, so that the identity check has something to find */
    int diverge_rank;
    uint64_t diverge_step;
} run;

static volatile sig_atomic_t g_term;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kiln-train mnist [--model=mlp|cnn] [--data_dir=DIR] [--model_dir=DIR]\n"
        "                        [--train_epochs=N] [--batch_size=N] [--learning_rate=F]\n"
        "                        [--optimizer=sgd|adam] [--seed=N] [--checkpoint_steps=N]\n"
        "                        [--keep_checkpoints=N] [--threads=N]"
        " [--log_format=text|json]\n"
        "                        [--momentum=F] [--lr_schedule=cosine|constant] [--max_steps=N]\n"
        "                        [--train_examples=N]\n"
        "                        [--distribution_strategy=one_device|mirrored|"
        "multi_worker_mirrored|parameter_server]\n"
        "                        [--world_size=N] [--check_replicas_identical[=STEPS]]\n"
        "                        [--bucket_bytes=N] [--allreduce=inline|thread]"
        " [--eval_timeout_s=S]\n"
        "                        [--shard_optimizer[=0|1]] [--device=/gpu:N|/cpu:0]\n"
        "                        [--precision=fp32|tf32|bf16|fp16]\n"
        "                        [--loss_scale_growth_interval=N (fp16; 2000)]\n"
        "       kiln-train inspect FILE|DIR\n"
        "       kiln-train devices [--format=text|json] [--device=/gpu:N|/cpu:0]\n"
        "       kiln-train resnet50 --synthetic [--batch_size=N] [--image_size=N]"
        " [--num_batches=N]\n"
        "       kiln-train allreduce-bench --world_size=N [--backend=shm|mpi] [--bytes=B]"
        " [--iters=K]\n");
}

static int parse_opts(int argc, char **argv, kt_opts *o)
{
    *o = (kt_opts){.model = "mlp",
                   .data_dir = NULL,
                   .model_dir = NULL,
                   .optimizer = "sgd",
                   .log_format = NULL,
                   .lr_schedule = "cosine",
                   .epochs = 5,
                   .batch = 128,
                   .threads = 0,
                   .keep = 5,
                   .checkpoint_steps = 0,
                   .lr = -1,
                   .momentum = 0.9,
                   .seed = 0,
                   .allreduce_inline = 0,
                   .bucket_bytes = 1 << 20,
                   .shard_optimizer = -1,
                   .eval_timeout_s = 3600,
                   .max_staleness = -1,
                   .timeout_s = 60};
    for (int i = 0; i < argc;) {
        const char *a = argv[i], *v = NULL, *next = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 0;
        long x;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--check_replicas_identical") == 0 ||
                   strcmp(a, "--check-replicas-identical") == 0) {
            o->check_identical = 1; /* bare: after every step */
            o->non_ps_flag = a;
            used = 1;
        } else if (kt_flag(a, "check_replicas_identical", &v, &used, NULL)) {
            if (kt_parse_int("check_replicas_identical", v, 0, 1L << 40, &x)) return -1;
            o->check_identical = x;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "distribution_strategy", &v, &used, next)) {
            kiln_strategy_kind st;
            if (kiln_strategy_parse(v, &st) != KILN_OK || st == KILN_STRATEGY_AUTO) {
                fprintf(stderr,
                        "kiln-train: --distribution_strategy=%s: expected one_device, mirrored, "
                        "multi_worker_mirrored or parameter_server\n",
                        v);
                return -1;
            }
            o->strategy = (int)st;
            o->strategy_arg = v;
        } else if (kt_flag(a, "world_size", &v, &used, next)) {
            if (kt_parse_int("world_size", v, 1, 64, &x)) return -1;
            o->world_size = (int)x;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "bucket_bytes", &v, &used, next)) {
            if (kt_parse_int("bucket_bytes", v, 0, 1L << 34, &x)) return -1;
            o->bucket_bytes = x;
            o->non_ps_flag = o->ar_flag = a;
        } else if (strcmp(a, "--shard_optimizer") == 0) {
            o->shard_optimizer = 1;
            o->non_ps_flag = a;
            used = 1;
        } else if (strncmp(a, "--shard_optimizer=", 18) == 0) {
            if (strcmp(a + 18, "0") && strcmp(a + 18, "1")) {
                fprintf(stderr, "kiln-train: %s: expected 0 or 1\n", a);
                return -1;
            }
            o->shard_optimizer = a[18] == '1';
            o->non_ps_flag = a;
            used = 1;
        } else if (kt_flag(a, "allreduce", &v, &used, next)) {
            if (strcmp(v, "inline") && strcmp(v, "thread")) {
                fprintf(stderr, "kiln-train: --allreduce=%s: expected inline or thread\n", v);
                return -1;
            }
            o->allreduce_inline = strcmp(v, "inline") == 0;
            o->non_ps_flag = o->ar_flag = a;
        } else if (kt_flag(a, "max_staleness", &v, &used, next)) {
            if (kt_parse_int("max_staleness", v, -1, 1L << 30, &o->max_staleness)) return -1;
            o->ps_flag = a;
        } else if (kt_flag(a, "ps_timeout", &v, &used, next)) {
            if (kt_parse_int("ps_timeout", v, 1, 86400, &o->timeout_s)) return -1;
            o->ps_flag = a;
        } else if (kt_flag(a, "eval_timeout_s", &v, &used, next)) {
            if (kt_parse_int("eval_timeout_s", v, 1, 1L << 30, &x)) return -1;
            o->eval_timeout_s = (double)x;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "device", &v, &used, next)) {
            kiln_device_spec ds;
            char derr[256];
            if (kiln_device_parse(v, &ds, derr, sizeof derr) != KILN_OK) {
                fprintf(stderr, "kiln-train: --device=%s: %s\n", v, derr);
                return -1;
            }
            o->device = v;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "loss_scale_growth_interval", &v, &used, next)) {
            if (kt_parse_int("loss_scale_growth_interval", v, 1, 1L << 30, &o->loss_scale_growth))
                return -1;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "precision", &v, &used, next)) {
            int p = kiln_precision_parse(v);
            if (p < 0) {
                fprintf(stderr, "kiln-train: --precision=%s: expected fp32, tf32, bf16 or fp16\n",
                        v);
                return -1;
            }
            o->precision = p;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "model", &v, &used, next)) {
            if (strcmp(v, "mlp") && strcmp(v, "cnn")) {
                fprintf(stderr, "kiln-train: --model=%s: expected mlp or cnn\n", v);
                return -1;
            }
            o->model = v;
        } else if (kt_flag(a, "data_dir", &v, &used, next)) {
            o->data_dir = v;
        } else if (kt_flag(a, "model_dir", &v, &used, next) ||
                   kt_flag(a, "job_dir", &v, &used, next)) {
            o->model_dir = v;
        } else if (kt_flag(a, "train_epochs", &v, &used, next)) {
            if (kt_parse_int("train_epochs", v, 1, 1000000, &x)) return -1;
            o->epochs = (int)x;
        } else if (kt_flag(a, "batch_size", &v, &used, next)) {
            if (kt_parse_int("batch_size", v, 1, 65536, &x)) return -1;
            o->batch = (int)x;
        } else if (kt_flag(a, "threads", &v, &used, next)) {
            if (kt_parse_int("threads", v, 0, 64, &x)) return -1;
            o->threads = (int)x;
        } else if (kt_flag(a, "keep_checkpoints", &v, &used, next)) {
            if (kt_parse_int("keep_checkpoints", v, 0, 1000000, &x)) return -1;
            o->keep = (int)x;
        } else if (kt_flag(a, "checkpoint_steps", &v, &used, next)) {
            if (kt_parse_int("checkpoint_steps", v, 0, 1L << 40, &x)) return -1;
            o->checkpoint_steps = x;
        } else if (kt_flag(a, "train_examples", &v, &used, next)) {
            if (kt_parse_int("train_examples", v, 1, 1L << 40, &x)) return -1;
            o->train_examples = x;
        } else if (kt_flag(a, "max_steps", &v, &used, next)) {
            if (kt_parse_int("max_steps", v, 0, 1L << 40, &x)) return -1;
            o->max_steps = x;
            o->non_ps_flag = a;
        } else if (kt_flag(a, "seed", &v, &used, next)) {
            if (kt_parse_int("seed", v, 0, 1L << 62, &x)) return -1;
            o->seed = (uint64_t)x;
        } else if (kt_flag(a, "learning_rate", &v, &used, next) ||
                   kt_flag(a, "momentum", &v, &used, next)) {
            char *end;
            double d = strtod(v, &end);
            if (*v == '\0' || *end || !(d >= 0.0) || d > 1e6) {
                fprintf(stderr, "kiln-train: %s: expected a non-negative number\n", a);
                return -1;
            }
            if (strstr(a, "momentum"))
                o->momentum = d;
            else
                o->lr = d;
        } else if (kt_flag(a, "optimizer", &v, &used, next)) {
            if (strcmp(v, "sgd") && strcmp(v, "adam")) {
                fprintf(stderr, "kiln-train: --optimizer=%s: expected sgd or adam\n", v);
                return -1;
            }
            o->optimizer = v;
        } else if (kt_flag(a, "lr_schedule", &v, &used, next)) {
            if (strcmp(v, "constant") && strcmp(v, "cosine")) {
                fprintf(stderr, "kiln-train: --lr_schedule=%s: expected constant or cosine\n", v);
                return -1;
            }
            o->lr_schedule = v;
        } else if (kt_flag(a, "log_format", &v, &used, next)) {
            if (strcmp(v, "text") && strcmp(v, "json")) {
                fprintf(stderr, "kiln-train: --log_format=%s: expected text or json\n", v);
                return -1;
            }
            o->log_format = v;
        } else {
            fprintf(stderr, "kiln-train: unknown argument '%s'\n", a);
            usage(stderr);
            return -1;
        }
        i += used;
    }
    /* The bucket size and the all-reduce's thread tune the unsharded step
     * only (a sharded one sums nothing during backward): named, they choose
     * it, and naming them next to --shard_optimizer=1 is a contradiction. */
    if (o->ar_flag && o->shard_optimizer == 1) {
        fprintf(stderr,
                "kiln-train: %s tunes the all-reduce of the unsharded optimizer, which "
                "--shard_optimizer does not use; drop one of the two\n",
                o->ar_flag);
        return -1;
    }
    if (o->ar_flag) o->shard_optimizer = 0;
    if (o->lr < 0) o->lr = strcmp(o->optimizer, "adam") == 0 ? 0.001 : 0.05;
    return 0;
}

static int save_ckpt(run *r, uint64_t epoch, uint64_t step_in_epoch)
{
    if (!r->o.model_dir) return 0;
    /* a sharded optimizer: every replica hands its slice of the state over
     * first (collective: every replica saves at the same steps) */
    if (r->d && kiln_strategy_gather_state(r->s, r->m) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r->s));
        return -1;
    }
    if (r->rank != 0) return 0; /* the chief writes checkpoints */
    run_pos pos = {.epoch = epoch, .step_in_epoch = step_in_epoch, .shuffle_seed = r->shuffle_seed};
    return kt_save_checkpoint(r->o.model_dir, (unsigned)r->o.keep, r->m, &pos, &r->cfg, r->json,
                              NULL);
}

static void fmt_rate(double v, char *out, size_t n)
{
    if (v >= 1e3)
        snprintf(out, n, "%.1fk", v / 1e3);
    else
        snprintf(out, n, "%.0f", v);
}

static void progress(run *r, const kiln_fit_info *in, int final)
{
    double t = now_s();
    if (!final && t - r->last_bar < 0.1) return;
    r->last_bar = t;
    int width = 30, done = (int)((double)(in->step + 1) / (double)in->steps_per_epoch * width);
    char bar[64], rate[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '=' : (i == done ? '>' : ' ');
    bar[width] = '\0';
    fmt_rate(in->samples_per_sec, rate, sizeof(rate));
    double left = in->samples_per_sec > 0 ? (double)(in->steps_per_epoch - in->step - 1) *
                                                r->o.batch / in->samples_per_sec
                                          : 0.0;
    fprintf(stderr, "\repoch %llu/%d [%s] %llu/%llu loss %.4f %s samples/s ETA %.0fs   ",
            (unsigned long long)in->epoch + 1, r->o.epochs, bar, (unsigned long long)in->step + 1,
            (unsigned long long)in->steps_per_epoch, r->seen ? r->loss_sum / (double)r->seen : 0.0,
            rate, left);
    if (final) fputc('\n', stderr);
}

/* The learning rate of optimizer step `step` (0-based): cosine decay from
 * the base rate to 0 over the whole run (optim/optim.h). */
static float lr_at(const run *r, uint64_t step)
{
    if (strcmp(r->o.lr_schedule, "cosine") != 0) return (float)r->o.lr;
    return kiln_lr_cosine(r->o.lr, step, r->total_steps);
}

static int cb_epoch_begin(void *ud, kiln_model *m, uint64_t epoch, uint64_t spe)
{
    run *r = ud;
    r->total_steps = spe * (uint64_t)r->o.epochs;
    kiln_model_set_lr(m, lr_at(r, kiln_model_step(m)));
    (void)epoch;
    r->epoch_t0 = now_s();
    r->loss_sum = 0.0;
    r->correct = r->seen = 0;
    return 0;
}

/* ---- the strategy's collectives, with kiln-train's messages ---- */

/* Debug: are all replicas' parameters bit-identical? 0 yes, 1 diverged
 * (printed: the first diverged rank and buffer), -1 comm failure. */
static int check_identical(run *r, kiln_model *m)
{
    int first = -1;
    const char *name = NULL;
    if (kiln_strategy_check_replicas(r->s, m, &first, &name) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r->s));
        return -1;
    }
    if (first < 0) return 0;
    fprintf(stderr,
            "kiln-train: replicas diverged after step %llu: rank %d's %s differs from rank 0's\n",
            (unsigned long long)kiln_model_step(m), first, name);
    return 1;
}

/* Sums n doubles over the replicas in place (epoch statistics). 0 or -1 (printed). */
static int sum_over_replicas(run *r, double *v, int n)
{
    if (kiln_strategy_sum(r->s, v, n) == KILN_OK) return 0;
    fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r->s));
    return -1;
}

/* Start of training: the flags that shape the run (cfg, as a string) are
 * compared, then rank 0's `status` (1 restored, 0 fresh, -1 failed),
 * position and whole model state are copied to every replica. 0, or -1 with
 * a printed message (on every rank when the chief failed to restore). */
static int share_state(run *r, int *status, run_pos *pos, const char *cfg)
{
    int first = -1;
    if (kiln_strategy_compare(r->s, cfg, strlen(cfg), &first) != KILN_OK) goto comm;
    if (first >= 0) {
        fprintf(stderr,
                "kiln-train: replica %d runs with other flags than the chief (rank 0); "
                "this one has: %s\n",
                first, cfg);
        return -1;
    }
    int64_t hdr[4] = {*status, (int64_t)pos->epoch, (int64_t)pos->step_in_epoch,
                      (int64_t)pos->shuffle_seed};
    if (kiln_strategy_broadcast(r->s, hdr, sizeof hdr) != KILN_OK) goto comm;
    *status = (int)hdr[0];
    if (*status < 0) {
        if (r->rank != 0)
            fprintf(stderr, "kiln-train: the chief (rank 0) could not restore its checkpoint\n");
        return -1;
    }
    pos->epoch = (uint64_t)hdr[1];
    pos->step_in_epoch = (uint64_t)hdr[2];
    pos->shuffle_seed = (uint64_t)hdr[3];
    if (kiln_strategy_broadcast_model(r->s, r->m) != KILN_OK) goto comm;
    return 0;
comm:
    fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r->s));
    return -1;
}

/* Examples in global batch `step` of an epoch (all replicas together). */
static size_t global_batch(const run *r, uint64_t step)
{
    size_t B = (size_t)r->o.batch, begin = (size_t)step * B;
    return r->train.n - begin < B ? r->train.n - begin : B;
}

static int cb_step_end(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    run *r = ud;
    r->samples += r->d ? global_batch(r, in->step) : (size_t)in->batch;
    r->loss_sum += (double)in->loss * in->batch;
    r->correct += (size_t)in->correct;
    r->seen += (size_t)in->batch;
    if (r->tty && !in->last_in_epoch) progress(r, in, 0);
    kiln_model_set_lr(m, lr_at(r, in->global_step));
    uint64_t next_epoch = in->last_in_epoch ? in->epoch + 1 : in->epoch;
    uint64_t next_step = in->last_in_epoch ? 0 : in->step + 1;
    r->next_epoch = next_epoch;
    r->next_step = next_step;
    if (r->d && r->diverge_step == in->global_step && r->diverge_rank == r->rank) {
        kiln_buffer b = kiln_model_buffer(m, 0);
        b.data[0] = nextafterf(b.data[0], INFINITY);
    }
    if (r->d && r->o.check_identical > 0 && in->global_step % (uint64_t)r->o.check_identical == 0 &&
        check_identical(r, m)) {
        r->failed = 1;
        return 1;
    }
    /* several replicas: any one's SIGTERM reached all of them in this step's
     * all-reduce, so they all stop here, after the same step */
    if (kiln_strategy_stop_requested(r->s)) {
        r->train_secs += now_s() - r->epoch_t0;
        if (r->tty) fputc('\n', stderr);
        if (save_ckpt(r, next_epoch, next_step)) r->failed = 1;
        r->stopped_by_signal = 1;
        return 1;
    }
    if (r->o.max_steps > 0 && in->global_step == 10 && (uint64_t)r->o.max_steps > 20) {
        /* benchmark mode: like the PyTorch peer, leave the first 10 steps
         * (first touch of every buffer, thread start-up) out of the timing */
        r->epoch_t0 = now_s();
        r->samples = 0;
        r->train_secs = 0.0;
    }
    if (r->o.max_steps > 0 && in->global_step >= (uint64_t)r->o.max_steps) {
        /* benchmarks: stop early, time counted like a finished epoch */
        r->train_secs += now_s() - r->epoch_t0;
        r->hit_max_steps = 1;
        return 1;
    }
    if (r->sw_train && in->global_step % 50 == 0) {
        const char *tags[] = {"loss", "learning_rate"};
        float vals[] = {in->loss, lr_at(r, in->global_step - 1)};
        kiln_summary_scalars(r->sw_train, (int64_t)in->global_step, 2, tags, vals);
    }
    if (r->o.checkpoint_steps > 0 && in->global_step % (uint64_t)r->o.checkpoint_steps == 0 &&
        !in->last_in_epoch && save_ckpt(r, next_epoch, next_step)) {
        r->failed = 1;
        return 1;
    }
    return 0;
}

static int cb_epoch_end(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    run *r = ud;
    double secs = now_s() - r->epoch_t0;
    r->train_secs += secs;
    if (r->tty) progress(r, in, 1);
    double sums[3] = {r->loss_sum, (double)r->correct, (double)r->seen};
    if (r->d && sum_over_replicas(r, sums, 3)) { /* the epoch over all replicas' slices */
        r->failed = 1;
        return 1;
    }
    if (save_ckpt(r, in->epoch + 1, 0)) {
        r->failed = 1;
        return 1;
    }
    double loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    double acc = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
    float tl = 0, ta = 0;
    /* The test set is split over the replicas, each evaluating a contiguous
     * part and the sums added, when their models are the same function: the
     * parameters always are; batch norm's moving statistics are each
     * replica's own, and then the chief evaluates the whole set alone, as
     * before (the others wait for it in the next step). */
    int split = r->d && r->world > 1 && !kiln__model_replica_state(m);
    if (split) {
        size_t n = r->test.n, lo, cnt, ok = 0;
        double ev[2] = {0.0, 0.0};
        /* the whole set as one global batch: the training's slicing */
        kiln_shard_range(n, n, 0, (uint32_t)r->rank, (uint32_t)r->world, &lo, &cnt);
        kiln__model_evaluate_sums(m, r->test.x + lo * r->test.dim, r->test.y + lo, cnt, &ev[0],
                                  &ok);
        ev[1] = (double)ok;
        if (sum_over_replicas(r, ev, 2)) {
            r->failed = 1;
            return 1;
        }
        tl = n ? (float)(ev[0] / (double)n) : 0.0f;
        ta = n ? (float)(ev[1] / (double)n) : 0.0f;
    }
    /* workers: the chief writes the checkpoints and TensorBoard; a worker's
     * line has the test metrics where it took part in the evaluation */
    if (r->rank != 0) {
        char test[96] = "";
        if (split && r->json)
            snprintf(test, sizeof test, ",\"test_loss\":%s,\"test_accuracy\":%s", jnum(tl).s,
                     jnum(ta).s);
        else if (split)
            snprintf(test, sizeof test, " test_loss %.4f test_accuracy %.4f", tl, ta);
        if (r->json)
            printf("{\"event\":\"epoch\",\"epoch\":%llu,\"step\":%llu,\"loss\":%s,"
                   "\"accuracy\":%s%s,\"rank\":%d}\n",
                   (unsigned long long)in->epoch + 1, (unsigned long long)in->global_step,
                   jnum(loss).s, jnum(acc).s, test, r->rank);
        else
            printf("epoch %llu/%d: loss %.4f accuracy %.4f%s (replica %d of %d)\n",
                   (unsigned long long)in->epoch + 1, r->o.epochs, loss, acc, test, r->rank,
                   r->world);
        fflush(stdout);
        return 0;
    }
    if (!split) kiln_model_evaluate(m, r->test.x, r->test.y, r->test.n, &tl, &ta);
    double sps = secs > 0 ? sums[2] / secs : 0.0;
    if (r->sw_train) {
        const char *tags[] = {"epoch_loss", "epoch_accuracy", "samples_per_sec"};
        float vals[] = {(float)loss, (float)acc, (float)sps};
        kiln_summary_scalars(r->sw_train, (int64_t)in->global_step, 3, tags, vals);
        kiln_summary_flush(r->sw_train);
    }
    if (r->sw_eval) {
        const char *tags[] = {"loss", "accuracy"};
        float vals[] = {tl, ta};
        kiln_summary_scalars(r->sw_eval, (int64_t)in->global_step, 2, tags, vals);
        kiln_summary_flush(r->sw_eval);
    }
    if (r->json)
        printf("{\"event\":\"epoch\",\"epoch\":%llu,\"step\":%llu,\"loss\":%s,"
               "\"accuracy\":%s,\"test_loss\":%s,\"test_accuracy\":%s,"
               "\"samples_per_sec\":%.1f,\"seconds\":%.3f}\n",
               (unsigned long long)in->epoch + 1, (unsigned long long)in->global_step, jnum(loss).s,
               jnum(acc).s, jnum(tl).s, jnum(ta).s, sps, secs);
    else
        printf("epoch %llu/%d: loss %.4f accuracy %.4f test_loss %.4f test_accuracy %.4f "
               "%.0f samples/s (%.1fs)\n",
               (unsigned long long)in->epoch + 1, r->o.epochs, loss, acc, tl, ta, sps, secs);
    fflush(stdout);
    /* several replicas stop together through the next step's all-reduce */
    return g_term && !r->d ? 1 : 0;
}

static int run_evaluator(run *r);

/* The model on its device: --device as given (an error when it cannot be
 * used), or TensorFlow's rule: the first GPU this process sees, when there
 * is one, and the CPU when there is none, or when that GPU cannot be used
 * (said on stderr: never a quiet change of device the user asked for).
 * Replicas: one of a TF_CONFIG cluster is a process of its own (under
 * kilnd, with its own GPUs), and takes the same rule. The replicas of a
 * local group (--world_size) share this machine: with --device=/gpu:K
 * replica r trains on /gpu:K+r (the launcher checked they exist), and
 * without --device they stay on the CPU. */
static kiln_model *make_model(run *r, int local)
{
    const kt_opts *o = &r->o;
    int batch = o->batch / r->world, n = 0;
    char why[512] = "", dev[32];
    kiln_device_spec spec;
    if (o->device && local && kiln_device_parse(o->device, &spec, why, sizeof why) == KILN_OK &&
        spec.kind == KILN_DEVICE_GPU) {
        snprintf(dev, sizeof dev, "/gpu:%d", spec.index + r->rank);
        return kt_mnist_model_on(o->model, o->optimizer, o->lr, o->momentum, batch, o->seed, dev,
                                 o->precision, 0, NULL, 0);
    }
    if (o->device)
        return kt_mnist_model_on(o->model, o->optimizer, o->lr, o->momentum, batch, o->seed,
                                 o->device, o->precision, 0, NULL, 0);
    if (!local && kiln_cuda_device_count(&n, why, sizeof why) == KILN_OK && n > 0) {
        kiln_model *m = kt_mnist_model_on(o->model, o->optimizer, o->lr, o->momentum, batch,
                                          o->seed, "/gpu:0", o->precision, 1, why, sizeof why);
        if (m) return m;
        fprintf(stderr,
                "kiln-train: warning: /gpu:0 is there but cannot be used (%s); training "
                "on the CPU (--device=/gpu:0 makes this an error)\n",
                why);
    }
    return kt_mnist_model_on(o->model, o->optimizer, o->lr, o->momentum, batch, o->seed, "/cpu:0",
                             o->precision, 0, NULL, 0);
}

static int cmd_mnist(int argc, char **argv)
{
    run r = {0};
    int rc = 1;
    char key[64] = "", err[512];
    if (parse_opts(argc, argv, &r.o)) return 2;
    /* cuDNN's timed convolution algorithms are kept beside the checkpoints
     * (cuda/dnn.c): a resumed run uses the ones its first start chose, and
     * ends bit-identical. A model_dir that cannot be made is said by the
     * checkpoint writer, when it first runs. */
    if (r.o.model_dir && !getenv("KILN_CUDNN_ALGO_FILE")) {
        char ap[4096];
        kiln_errmsg merr;
        if (kiln_mkdir_p(r.o.model_dir, &merr) == KILN_OK &&
            (size_t)snprintf(ap, sizeof ap, "%s/cudnn_algorithms.txt", r.o.model_dir) < sizeof ap)
            setenv("KILN_CUDNN_ALGO_FILE", ap, 1);
    }
    /* the strategy: the kind, the role and the group, from the flags and
     * TF_CONFIG; --world_size replicas get the launcher's key */
    if (r.o.world_size > 1) kt_launch_key(key, sizeof key);
    const char *sp = getenv("KILN_TRAIN_SYNC_PATH");
    kiln_strategy_config sc = {.kind = (kiln_strategy_kind)r.o.strategy,
                               .world_size = r.o.world_size,
                               .job_key = key,
                               .bucket_bytes = (size_t)r.o.bucket_bytes,
                               .inline_allreduce = r.o.allreduce_inline,
                               .shard_optimizer = r.o.shard_optimizer != 0,
                               .stop = &g_term,
                               .always_sync = sp && *sp};
    if (kiln_strategy_new(&sc, &r.s, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", err);
        return 2;
    }
    kiln_strategy_role role = kiln_strategy_role_of(r.s);
    if (kiln_strategy_kind_of(r.s) == KILN_STRATEGY_PARAMETER_SERVER) {
        rc = kiln_train_ps_main(kiln_strategy_tf_group(r.s), &r.o);
        kiln_strategy_free(r.s);
        return rc;
    }
    if (r.o.ps_flag) {
        fprintf(stderr, "kiln-train: %s applies to the parameter_server strategy only\n",
                r.o.ps_flag);
        kiln_strategy_free(r.s);
        return 2;
    }
    /* an evaluator is in no group: it builds the model for the whole batch */
    r.world = role == KILN_ROLE_EVALUATOR ? 1 : kiln_strategy_world(r.s);
    if (r.o.batch % r.world != 0) {
        fprintf(stderr,
                "kiln-train: --batch_size=%d is the global batch and must split evenly over the "
                "%d replicas (try %d)\n",
                r.o.batch, r.world, (r.o.batch / r.world + 1) * r.world);
        kiln_strategy_free(r.s);
        return 2;
    }
    /* before any replica is forked: one refusal, not one per replica
     * ("/device:CPU:0" is the CPU too, so the parsed kind decides). A local
     * group on GPUs takes one GPU per replica, from --device's on. */
    kiln_device_spec spec;
    int ngpu = 0;
    char gerr[256] = "";
    if (r.o.world_size > 1 && r.o.device &&
        kiln_device_parse(r.o.device, &spec, err, sizeof err) == KILN_OK &&
        spec.kind == KILN_DEVICE_GPU &&
        (kiln_cuda_device_count(&ngpu, gerr, sizeof gerr) != KILN_OK ||
         spec.index + r.o.world_size > ngpu)) {
        fprintf(stderr,
                "kiln-train: --device=%s with --world_size=%d: replica r trains on /gpu:%d+r, "
                "up to /gpu:%d, and this process sees %d GPU%s%s%s\n",
                r.o.device, r.o.world_size, spec.index, spec.index + r.o.world_size - 1, ngpu,
                ngpu == 1 ? "" : "s", *gerr ? ": " : "", gerr);
        kiln_strategy_free(r.s);
        return 2;
    }
    /* mixed precision and GPUs train through the device path, whose update
     * is not sharded (a TF_CONFIG replica that finds a GPU by itself is
     * told after its model is made, below) */
    int gpu_dev = r.o.device && kiln_device_parse(r.o.device, &spec, err, sizeof err) == KILN_OK &&
                  spec.kind == KILN_DEVICE_GPU;
    if (r.world > 1 && r.o.shard_optimizer == 1 &&
        (gpu_dev || r.o.precision == KILN_PRECISION_BF16 || r.o.precision == KILN_PRECISION_FP16)) {
        fprintf(stderr,
                "kiln-train: --shard_optimizer: the optimizer is sharded on the CPU's own fp32 "
                "path only, and %s%s trains through the device path (--shard_optimizer=0 runs "
                "it unsharded)\n",
                gpu_dev ? "--device=" : "--precision=",
                gpu_dev ? r.o.device : kiln_precision_name((kiln_precision)r.o.precision));
        kiln_strategy_free(r.s);
        return 2;
    }
    if (r.o.loss_scale_growth && r.o.precision != KILN_PRECISION_FP16) {
        fprintf(stderr,
                "kiln-train: --loss_scale_growth_interval: only --precision=fp16 scales "
                "its loss (this run is %s)\n",
                kiln_precision_name((kiln_precision)r.o.precision));
        kiln_strategy_free(r.s);
        return 2;
    }
    int local = role == KILN_ROLE_REPLICA && r.o.world_size > 1;
    if (local) {
        /* before any thread exists: the launcher forks the replicas, and
         * returns here in each of them with its rank */
        rc = kt_launch(r.world, key, &sc.rank);
        kiln_strategy_free(r.s);
        r.s = NULL;
        if (rc >= 0) return rc;
        rc = 1;
        if (kiln_strategy_new(&sc, &r.s, err, sizeof err) != KILN_OK) {
            fprintf(stderr, "kiln-train: %s\n", err);
            return 1;
        }
        /* replicas of one machine share its cores */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (r.o.threads == 0) r.o.threads = ncpu > r.world ? (int)(ncpu / r.world) : 1;
        /* and no core is spare for a prefetch thread when their compute
         * threads take them all (nn/fit.c); $KILN_TRAIN_PREFETCH=1|0 forces */
        const char *pf = getenv("KILN_TRAIN_PREFETCH");
        if (pf && *pf)
            kiln__fit_batches_on_pool = strcmp(pf, "0") == 0;
        else if ((long)r.o.threads * r.world >= ncpu)
            kiln__fit_batches_on_pool = 1;
    }
    /* a drain's SIGTERM: from here on it only raises g_term (before any
     * thread exists, so that every thread inherits the blocked mask) */
    kt_signals_take(&g_term);
    r.rank = kiln_strategy_rank(r.s);
    const char *dv = getenv("KILN_TRAIN_TEST_DIVERGE");
    unsigned long long dstep = 0;
    if (dv && sscanf(dv, "%d:%llu", &r.diverge_rank, &dstep) == 2) r.diverge_step = dstep;
    /* under kilnd (KILN_JOB_ID set) stdout is read by a machine: JSON lines are
     * the default there, and kilnd takes its training metrics from them */
    r.json = r.o.log_format ? strcmp(r.o.log_format, "json") == 0 : getenv("KILN_JOB_ID") != NULL;
    r.tty = !r.json && r.rank == 0 && isatty(STDERR_FILENO);
    int threads = kiln_set_threads(r.o.threads);
    r.cfg = (run_cfg){.model = r.o.model,
                      .optimizer = r.o.optimizer,
                      .batch_size = r.o.batch,
                      .threads = threads,
                      .seed = r.o.seed,
                      .replicas = r.world};
    /* the shuffle stream is separate from the init stream but fixed by --seed */
    r.shuffle_seed = r.o.seed ^ 0x5eed5eed5eed5eedULL;
    if (kiln_load_fashion_mnist(r.o.data_dir, 1, &r.train, err, sizeof(err)) ||
        kiln_load_fashion_mnist(r.o.data_dir, 0, &r.test, err, sizeof(err))) {
        fprintf(stderr, "kiln-train: loading data: %s\n", err);
        goto out;
    }
    if (r.o.train_examples > 0 && (size_t)r.o.train_examples < r.train.n)
        r.train.n = (size_t)r.o.train_examples; /* a prefix, for tests */
    kt_fmnist_standardise(&r.train);
    kt_fmnist_standardise(&r.test);
    if (!(r.m = make_model(&r, local))) goto out;
    if (r.o.loss_scale_growth) { /* fp16 (refused otherwise, above) */
        kiln_loss_scale_state ls;
        int bad = kiln_model_get_loss_scale_state(r.m, &ls);
        if (!bad) {
            ls.growth_interval = (int)r.o.loss_scale_growth;
            ls.good_steps = 0;
            bad = kiln_model_set_loss_scale_state(r.m, &ls);
        }
        if (bad) {
            fprintf(stderr, "kiln-train: --loss_scale_growth_interval: %s\n",
                    kiln_model_error(r.m));
            goto out;
        }
    }
    r.cfg.gpu = strncmp(kiln_model_device(r.m), "/gpu", 4) == 0;
    r.cfg.precision = kiln_precision_name((kiln_precision)r.o.precision);
    if (role == KILN_ROLE_EVALUATOR) {
        rc = run_evaluator(&r);
        goto out;
    }
    if (kiln_strategy_attach(r.s, r.m) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r.s));
        goto out;
    }
    r.d = kiln_strategy_grad_sync(r.s) != NULL;
    /* the measuring modes exchange nothing: a flag that tunes the exchange
     * would be accepted and not acted on */
    const char *meas = kiln_strategy_measuring(r.s);
    const char *idle = r.o.shard_optimizer == 1 ? "--shard_optimizer" : r.o.ar_flag;
    if (meas && idle) {
        fprintf(stderr,
                "kiln-train: %s: KILN_DIST_PROFILE=%s measures a step that exchanges nothing, "
                "so the flag has nothing to act on; drop it, or unset KILN_DIST_PROFILE to "
                "train\n",
                idle, meas);
        goto out;
    }
    if (r.o.shard_optimizer == 1 && r.d && !kiln_strategy_sharded(r.s) &&
        kiln__model_on_device(r.m)) {
        fprintf(stderr,
                "kiln-train: --shard_optimizer: the optimizer is sharded on the CPU's own path "
                "only, and this model trains on %s (%s) through the device path "
                "(--shard_optimizer=0 runs it unsharded)\n",
                kiln_model_device(r.m), kiln_precision_name((kiln_precision)r.o.precision));
        goto out;
    }
    if (r.o.shard_optimizer == 1 && r.d && !kiln_strategy_sharded(r.s)) {
        /* asked for by name: not honoured is an error, not a quiet fallback */
        fprintf(stderr,
                "kiln-train: --shard_optimizer: the optimizer can be sharded only between "
                "replicas on one host (the shm all-reduce) and at most 8 of them; this group "
                "has %d replicas%s (--shard_optimizer=0 runs it unsharded)\n",
                r.world, kiln_strategy_one_host(r.s) ? "" : " on more than one host");
        goto out;
    }
    if (r.d && !local && kiln_strategy_one_host(r.s) && r.o.threads == 0) {
        /* TF_CONFIG replicas that all run on this machine share its cores,
         * as --world_size replicas do */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = kiln_set_threads(ncpu > r.world ? (int)(ncpu / r.world) : 1);
        r.cfg.threads = threads;
        if ((long)threads * r.world >= ncpu) kiln__fit_batches_on_pool = 1;
    }
    run_pos pos = {.shuffle_seed = r.shuffle_seed};
    int got = 0;
    if (r.o.model_dir && r.rank == 0) { /* the chief restores; the others get its state */
        char *path = NULL;
        got = ckpt_restore_model(r.o.model_dir, r.m, &pos, &r.cfg, &path, err, sizeof(err));
        if (got < 0) {
            fprintf(stderr, "kiln-train: restoring from %s: %s\n", r.o.model_dir, err);
            if (!r.d) goto out; /* else the replicas hear of it below */
        }
        if (got > 0) {
            if (r.json) {
                printf("{\"event\":\"restored\",\"path\":");
                kt_json_str(stdout, path);
                printf(",\"step\":%llu,\"epoch\":%llu,\"step_in_epoch\":%llu}\n",
                       (unsigned long long)kiln_model_step(r.m), (unsigned long long)pos.epoch,
                       (unsigned long long)pos.step_in_epoch);
            } else {
                printf("restored %s (step %llu, epoch %llu)\n", path,
                       (unsigned long long)kiln_model_step(r.m), (unsigned long long)pos.epoch + 1);
            }
        }
        free(path);
    }
    if (r.d) {
        /* the flags every replica must share, then the chief's state */
        char cs[512];
        snprintf(cs, sizeof cs,
                 "model=%s optimizer=%s batch_size=%d seed=%llu lr=%g momentum=%g epochs=%d "
                 "examples=%zu schedule=%s max_steps=%ld",
                 r.o.model, r.o.optimizer, r.o.batch, (unsigned long long)r.o.seed, r.o.lr,
                 r.o.momentum, r.o.epochs, r.train.n, r.o.lr_schedule, r.o.max_steps);
        if (share_state(&r, &got, &pos, cs)) goto out;
    }
    if (r.o.model_dir && r.rank == 0 &&
        kt_open_summaries(r.o.model_dir, "train", &r.sw_train, &r.sw_eval))
        goto out;
    if (r.json) {
        printf("{\"event\":\"start\",\"model\":\"%s\",\"optimizer\":\"%s\",\"batch_size\":%d,"
               "\"learning_rate\":%g,\"train_epochs\":%d,\"threads\":%d,\"seed\":%llu,"
               "\"train_examples\":%zu,\"test_examples\":%zu,\"blas_core\":\"%s\","
               "\"strategy\":\"%s\",\"replicas\":%d,\"rank\":%d,\"device\":\"%s\","
               "\"device_name\":",
               r.o.model, r.o.optimizer, r.o.batch, r.o.lr, r.o.epochs, threads,
               (unsigned long long)r.o.seed, r.train.n, r.test.n, kiln_blas_init(),
               kiln_strategy_kind_name(kiln_strategy_kind_of(r.s)), r.world, r.rank,
               kiln_model_device(r.m));
        kt_json_str(stdout, kiln_model_device_name(r.m));
        printf(",\"precision\":\"%s\"}\n", kiln_precision_name((kiln_precision)r.o.precision));
    } else {
        printf("kiln-train mnist: model=%s optimizer=%s lr=%g batch=%d epochs=%d threads=%d "
               "device=%s (%s)",
               r.o.model, r.o.optimizer, r.o.lr, r.o.batch, r.o.epochs, threads,
               kiln_model_device(r.m), kiln_model_device_name(r.m));
        if (r.o.precision) printf(" precision=%s", kiln_precision_name(r.o.precision));
        if (r.world > 1)
            printf(" strategy=%s replicas=%d rank=%d (per-replica batch %d)",
                   kiln_strategy_kind_name(kiln_strategy_kind_of(r.s)), r.world, r.rank,
                   r.o.batch / r.world);
        printf("\n");
    }
    fflush(stdout);

    r.next_epoch = pos.epoch;
    r.next_step = pos.step_in_epoch;
    kiln_fit_opts fo = {.epochs = r.o.epochs,
                        .shuffle_seed = pos.shuffle_seed,
                        .initial_epoch = pos.epoch,
                        .initial_step = pos.step_in_epoch,
                        /* rank, world and sync: kiln_strategy_fit */};
    kiln_callbacks cb = {.ud = &r,
                         .on_epoch_begin = cb_epoch_begin,
                         .on_step_end = cb_step_end,
                         .on_epoch_end = cb_epoch_end};
    /* one replica may stop before the first step; several decide in a step */
    int fr = g_term && !r.d ? 1 : kiln_strategy_fit(r.s, r.m, &r.train, &fo, &cb);
    if (fr < 0 || r.failed || (fr == 1 && !g_term && !r.hit_max_steps && !r.stopped_by_signal)) {
        if (fr < 0)
            fprintf(stderr, "kiln-train: %s\n", kiln_strategy_error(r.s));
        else if (!r.failed)
            fprintf(stderr, "kiln-train: training failed: %s\n", kiln_model_error(r.m));
        goto out;
    }
    int terminated = g_term;
    if (r.d && !r.stopped_by_signal) {
        /* training ended on every replica after the same step: a SIGTERM
         * that came in the meantime (epoch-end evaluation) stops them all */
        double t = g_term ? 1.0 : 0.0;
        if (sum_over_replicas(&r, &t, 1)) goto out;
        terminated = t > 0.5;
    } else if (r.d) {
        terminated = 1;
    }
    if (terminated) {
        /* stopped between steps (e.g. during the epoch-end evaluation): save
         * the state after the last step taken, at the position that follows it */
        if (!r.stopped_by_signal && save_ckpt(&r, r.next_epoch, r.next_step)) goto out;
        if (r.json)
            printf("{\"event\":\"terminated\",\"step\":%llu}\n",
                   (unsigned long long)kiln_model_step(r.m));
        rc = 143;
        goto out;
    }
    float tl = 0, ta = 0;
    kiln_model_evaluate(r.m, r.test.x, r.test.y, r.test.n, &tl, &ta);
    double sps = r.train_secs > 0 ? (double)r.samples / r.train_secs : 0.0;
    /* fp16: the loss scale it ended with and the steps an overflow skipped
     * (this process's: a resumed run's scaler starts again at 65536) */
    uint64_t skipped = 0;
    float scale = kiln_model_loss_scale(r.m, &skipped);
    char ls[96] = "";
    if (scale > 0)
        snprintf(ls, sizeof ls,
                 r.json ? ",\"loss_scale\":%g,\"skipped_steps\":%llu"
                        : " loss_scale %g skipped_steps %llu",
                 scale, (unsigned long long)skipped);
    if (r.json)
        printf("{\"event\":\"done\",\"test_accuracy\":%s,\"test_loss\":%s,"
               "\"samples_per_sec\":%.1f,\"steps\":%llu,\"train_seconds\":%.3f,"
               "\"train_gflops\":%.1f,\"replicas\":%d%s}\n",
               jnum(ta).s, jnum(tl).s, sps, (unsigned long long)kiln_model_step(r.m), r.train_secs,
               sps * kiln_model_train_flops(r.m) / 1e9, r.world, ls);
    else
        printf("done: test_accuracy %.4f test_loss %.4f %.0f samples/s %llu steps%s\n", ta, tl, sps,
               (unsigned long long)kiln_model_step(r.m), ls);
    rc = 0;
out:
    fflush(stdout);
    if (kiln_summary_close(r.sw_train) != KILN_OK || kiln_summary_close(r.sw_eval) != KILN_OK)
        fprintf(stderr, "kiln-train: warning: TensorBoard events could not all be written\n");
    kiln_strategy_free(r.s);
    kiln_model_free(r.m);
    kiln_data_free(&r.train);
    kiln_data_free(&r.test);
    return rc;
}

/* The newest checkpoint file in dir by its name (ckpt-<step>.kiln); 0 when
 * there is none. The writer renames finished files into place, so a name
 * that is there is a whole file (it may be deleted by --keep_checkpoints
 * before we read it: then the next poll finds a newer one). */
static int newest_ckpt(const char *dir, uint64_t *step, char *path, size_t n)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long st;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%llu.%7s", &st, tail) != 2 || strcmp(tail, "kiln")) continue;
        if (!found || st > *step) {
            *step = st;
            snprintf(path, n, "%s/%s", dir, e->d_name);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

/* TF_CONFIG task "evaluator": not in the all-reduce group; evaluates each
 * new checkpoint of the model dir on the test set (TensorBoard under
 * <model_dir>/eval), and exits 0 after the final one (the step the flags
 * say training ends at), 143 on SIGTERM, 1 when no new checkpoint came
 * for --eval_timeout_s. */
static int run_evaluator(run *r)
{
    if (!r->o.model_dir) {
        fprintf(stderr, "kiln-train: the evaluator task needs --model_dir (or --job-dir)\n");
        return 2;
    }
    char path[4096], err[512];
    if (kt_open_summaries(r->o.model_dir, "eval", &r->sw_eval, NULL)) return 1;
    uint64_t spe = ((uint64_t)r->train.n + (uint64_t)r->o.batch - 1) / (uint64_t)r->o.batch;
    uint64_t final = spe * (uint64_t)r->o.epochs;
    if (r->o.max_steps > 0 && (uint64_t)r->o.max_steps < final) final = (uint64_t)r->o.max_steps;
    if (r->json)
        printf("{\"event\":\"evaluator\",\"model_dir\":\"%s\",\"final_step\":%llu}\n",
               r->o.model_dir, (unsigned long long) final);
    else
        printf("kiln-train evaluator: watching %s until step %llu\n", r->o.model_dir,
               (unsigned long long) final);
    fflush(stdout);
    int have = 0;
    uint64_t last = 0;
    double t_new = now_s();
    for (;;) {
        uint64_t st = 0;
        if (newest_ckpt(r->o.model_dir, &st, path, sizeof path) && (!have || st > last)) {
            uint64_t step = 0;
            if (ckpt_load_params(path, r->m, &step, err, sizeof err) == 0) {
                float tl = 0, ta = 0;
                kiln_model_evaluate(r->m, r->test.x, r->test.y, r->test.n, &tl, &ta);
                const char *tags[] = {"loss", "accuracy"};
                float vals[] = {tl, ta};
                kiln_summary_scalars(r->sw_eval, (int64_t)step, 2, tags, vals);
                kiln_summary_flush(r->sw_eval);
                if (r->json) {
                    printf("{\"event\":\"eval\",\"step\":%llu,\"test_loss\":%s,"
                           "\"test_accuracy\":%s,\"path\":",
                           (unsigned long long)step, jnum(tl).s, jnum(ta).s);
                    kt_json_str(stdout, path);
                    printf("}\n");
                } else {
                    printf("eval step %llu: test_loss %.4f test_accuracy %.4f\n",
                           (unsigned long long)step, tl, ta);
                }
                fflush(stdout);
                have = 1;
                last = step;
                t_new = now_s();
                if (step >= final) return 0;
            } else {
                fprintf(stderr, "kiln-train: evaluator: %s (trying again)\n", err);
            }
        }
        if (g_term) return 143;
        if (now_s() - t_new > r->o.eval_timeout_s) {
            fprintf(stderr,
                    "kiln-train: evaluator: no new checkpoint in %s for %.0f s (last: step %llu "
                    "of %llu); giving up\n",
                    r->o.model_dir, r->o.eval_timeout_s, (unsigned long long)last,
                    (unsigned long long) final);
            return 1;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000000L};
        nanosleep(&ts, NULL);
    }
}

static void inspect_warn(void *ud, const char *path, const char *reason)
{
    (void)ud;
    fprintf(stderr, "kiln-train: skipping checkpoint %s: %s\n", path, reason);
}

static int cmd_inspect(int argc, char **argv)
{
    if (argc != 1) {
        usage(stderr);
        return 2;
    }
    char *json = NULL;
    kiln_errmsg em = {{0}};
    if (kiln_ckpt_inspect_json(argv[0], &json, inspect_warn, NULL, &em) != KILN_OK) {
        fprintf(stderr, "kiln-train inspect: %s\n", em.msg); /* em names the file */
        return 1;
    }
    printf("%s\n", json);
    free(json);
    return 0;
}

#ifdef KILN_HAVE_ALLREDUCE_BENCH
/* bench/allreduce_bench.c: argv[0] is the subcommand's name */
int kiln_allreduce_bench_main(int argc, char **argv);
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "mnist") == 0) return cmd_mnist(argc - 2, argv + 2);
    if (strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(argv[1], "devices") == 0) return kiln_train_devices_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "resnet50") == 0) return kiln_train_resnet50_main(argc - 1, argv + 1);
#ifdef KILN_HAVE_ALLREDUCE_BENCH
    if (strcmp(argv[1], "allreduce-bench") == 0)
        return kiln_allreduce_bench_main(argc - 1, argv + 1);
#endif
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "kiln-train: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
