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
 * exits with 143. */
#include "kiln/train.h"

#include "ckpt/ckpt.h"
#include "summary/summary.h"
#include "tools/tool.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *model, *data_dir, *model_dir, *optimizer, *log_format, *lr_schedule;
    int epochs, batch, threads, keep;
    long checkpoint_steps, max_steps, train_examples;
    double lr, momentum;
    uint64_t seed;
} opts;

typedef struct run {
    opts o;
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
} run;

static volatile sig_atomic_t g_term;

static void on_term(int sig)
{
    (void)sig;
    g_term = 1;
}

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
        "       kiln-train inspect FILE|DIR\n"
        "       kiln-train allreduce-bench --world_size=N [--backend=shm|mpi] [--bytes=B]"
        " [--iters=K]\n");
}

/* Accepts --name=value and --name value; '-' and '_' are interchangeable. */
static int flag_match(const char *arg, const char *name, const char **val, int *consumed,
                      const char *next)
{
    if (strncmp(arg, "--", 2) != 0) return 0;
    arg += 2;
    size_t i = 0;
    for (; name[i]; i++) {
        char a = arg[i] == '-' ? '_' : arg[i];
        if (a != name[i]) return 0;
    }
    if (arg[i] == '=') {
        *val = arg + i + 1;
        *consumed = 1;
        return 1;
    }
    if (arg[i] == '\0' && next) {
        *val = next;
        *consumed = 2;
        return 1;
    }
    return 0;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *v == '\0' || *end || x < lo || x > hi) {
        fprintf(stderr, "kiln-train: --%s=%s: expected an integer in [%ld, %ld]\n", flag, v, lo,
                hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.model = "mlp",
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
                .seed = 0};
    for (int i = 0; i < argc;) {
        const char *a = argv[i], *v = NULL, *next = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 0;
        long x;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (flag_match(a, "model", &v, &used, next)) {
            if (strcmp(v, "mlp") && strcmp(v, "cnn")) {
                fprintf(stderr, "kiln-train: --model=%s: expected mlp or cnn\n", v);
                return -1;
            }
            o->model = v;
        } else if (flag_match(a, "data_dir", &v, &used, next)) {
            o->data_dir = v;
        } else if (flag_match(a, "model_dir", &v, &used, next) ||
                   flag_match(a, "job_dir", &v, &used, next)) {
            o->model_dir = v;
        } else if (flag_match(a, "train_epochs", &v, &used, next)) {
            if (parse_int("train_epochs", v, 1, 1000000, &x)) return -1;
            o->epochs = (int)x;
        } else if (flag_match(a, "batch_size", &v, &used, next)) {
            if (parse_int("batch_size", v, 1, 65536, &x)) return -1;
            o->batch = (int)x;
        } else if (flag_match(a, "threads", &v, &used, next)) {
            if (parse_int("threads", v, 0, 64, &x)) return -1;
            o->threads = (int)x;
        } else if (flag_match(a, "keep_checkpoints", &v, &used, next)) {
            if (parse_int("keep_checkpoints", v, 0, 1000000, &x)) return -1;
            o->keep = (int)x;
        } else if (flag_match(a, "checkpoint_steps", &v, &used, next)) {
            if (parse_int("checkpoint_steps", v, 0, 1L << 40, &x)) return -1;
            o->checkpoint_steps = x;
        } else if (flag_match(a, "train_examples", &v, &used, next)) {
            if (parse_int("train_examples", v, 1, 1L << 40, &x)) return -1;
            o->train_examples = x;
        } else if (flag_match(a, "max_steps", &v, &used, next)) {
            if (parse_int("max_steps", v, 0, 1L << 40, &x)) return -1;
            o->max_steps = x;
        } else if (flag_match(a, "seed", &v, &used, next)) {
            if (parse_int("seed", v, 0, 1L << 62, &x)) return -1;
            o->seed = (uint64_t)x;
        } else if (flag_match(a, "learning_rate", &v, &used, next) ||
                   flag_match(a, "momentum", &v, &used, next)) {
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
        } else if (flag_match(a, "optimizer", &v, &used, next)) {
            if (strcmp(v, "sgd") && strcmp(v, "adam")) {
                fprintf(stderr, "kiln-train: --optimizer=%s: expected sgd or adam\n", v);
                return -1;
            }
            o->optimizer = v;
        } else if (flag_match(a, "lr_schedule", &v, &used, next)) {
            if (strcmp(v, "constant") && strcmp(v, "cosine")) {
                fprintf(stderr, "kiln-train: --lr_schedule=%s: expected constant or cosine\n", v);
                return -1;
            }
            o->lr_schedule = v;
        } else if (flag_match(a, "log_format", &v, &used, next)) {
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
    if (o->lr < 0) o->lr = strcmp(o->optimizer, "adam") == 0 ? 0.001 : 0.05;
    return 0;
}

/* Fashion-MNIST's pixel mean and standard deviation over the training set:
 * standardised inputs let SGD use one learning rate for every layer (the
 * PyTorch peer in bench/ applies the same transform). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD  0.3530f

static void standardise(kiln_data *d)
{
    float *x = (float *)d->x;
    for (size_t i = 0; i < d->n * d->dim; i++)
        x[i] = (x[i] - FMNIST_MEAN) / FMNIST_STD;
}

static kiln_model *build_model(const opts *o)
{
    kiln_model *m = kiln_model_new(28, 28, 1);
    if (!m) return NULL;
    int bad = 0;
    if (strcmp(o->model, "cnn") == 0) {
        /* TensorFlow's MNIST tutorial network */
        bad |= kiln_model_add(m, kiln_conv2d(32, 5, 1, KILN_SAME, KILN_RELU));
        bad |= kiln_model_add(m, kiln_maxpool2d(2, 2));
        bad |= kiln_model_add(m, kiln_conv2d(64, 5, 1, KILN_SAME, KILN_RELU));
        bad |= kiln_model_add(m, kiln_maxpool2d(2, 2));
        bad |= kiln_model_add(m, kiln_flatten());
        bad |= kiln_model_add(m, kiln_dense(1024, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    } else {
        bad |= kiln_model_add(m, kiln_flatten());
        bad |= kiln_model_add(m, kiln_dense(512, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(512, KILN_RELU));
        bad |= kiln_model_add(m, kiln_dense(10, KILN_LINEAR));
    }
    kiln_optimizer opt = strcmp(o->optimizer, "adam") == 0
                             ? kiln_adam((float)o->lr)
                             : kiln_sgd((float)o->lr, (float)o->momentum);
    if (bad || kiln_model_compile(m, opt, KILN_SOFTMAX_XENT, o->batch, o->seed)) {
        fprintf(stderr, "kiln-train: building the model: %s\n", kiln_model_error(m));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int save_ckpt(run *r, uint64_t epoch, uint64_t step_in_epoch)
{
    if (!r->o.model_dir) return 0;
    run_pos pos = {.epoch = epoch, .step_in_epoch = step_in_epoch, .shuffle_seed = r->shuffle_seed};
    char err[512], *path = NULL;
    if (ckpt_save_model(r->o.model_dir, (unsigned)r->o.keep, r->m, &pos, &r->cfg, &path, err,
                        sizeof(err))) {
        fprintf(stderr, "kiln-train: writing a checkpoint: %s\n", err);
        return -1;
    }
    if (r->json) {
        printf("{\"event\":\"checkpoint\",\"step\":%llu,\"epoch\":%llu,\"path\":",
               (unsigned long long)kiln_model_step(r->m), (unsigned long long)epoch);
        json_str(stdout, path);
        printf("}\n");
        fflush(stdout);
    }
    free(path);
    return 0;
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

/* The learning rate of optimizer step `step` (0-based). Cosine decay from
 * the base rate to 0 over the whole run; a pure function of the step, so a
 * resumed run needs no extra state for it. */
static float lr_at(const run *r, uint64_t step)
{
    if (strcmp(r->o.lr_schedule, "cosine") != 0 || r->total_steps == 0) return (float)r->o.lr;
    double f = (double)step / (double)r->total_steps;
    if (f > 1.0) f = 1.0;
    return (float)(r->o.lr * 0.5 * (1.0 + cos(3.14159265358979323846 * f)));
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

static int cb_step_end(void *ud, kiln_model *m, const kiln_fit_info *in)
{
    run *r = ud;
    r->samples += (size_t)in->batch;
    r->loss_sum += (double)in->loss * in->batch;
    r->correct += (size_t)in->correct;
    r->seen += (size_t)in->batch;
    if (r->tty && !in->last_in_epoch) progress(r, in, 0);
    kiln_model_set_lr(m, lr_at(r, in->global_step));
    uint64_t next_epoch = in->last_in_epoch ? in->epoch + 1 : in->epoch;
    uint64_t next_step = in->last_in_epoch ? 0 : in->step + 1;
    r->next_epoch = next_epoch;
    r->next_step = next_step;
    if (g_term) {
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
    if (save_ckpt(r, in->epoch + 1, 0)) {
        r->failed = 1;
        return 1;
    }
    float tl = 0, ta = 0;
    kiln_model_evaluate(m, r->test.x, r->test.y, r->test.n, &tl, &ta);
    double loss = r->seen ? r->loss_sum / (double)r->seen : 0.0;
    double acc = r->seen ? (double)r->correct / (double)r->seen : 0.0;
    double sps = secs > 0 ? (double)r->seen / secs : 0.0;
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
        printf("{\"event\":\"epoch\",\"epoch\":%llu,\"step\":%llu,\"loss\":%.6f,"
               "\"accuracy\":%.6f,\"test_loss\":%.6f,\"test_accuracy\":%.6f,"
               "\"samples_per_sec\":%.1f,\"seconds\":%.3f}\n",
               (unsigned long long)in->epoch + 1, (unsigned long long)in->global_step, loss, acc,
               tl, ta, sps, secs);
    else
        printf("epoch %llu/%d: loss %.4f accuracy %.4f test_loss %.4f test_accuracy %.4f "
               "%.0f samples/s (%.1fs)\n",
               (unsigned long long)in->epoch + 1, r->o.epochs, loss, acc, tl, ta, sps, secs);
    fflush(stdout);
    return g_term ? 1 : 0;
}

static int open_summaries(run *r)
{
    char path[4096];
    kiln_errmsg em;
    snprintf(path, sizeof(path), "%s/train", r->o.model_dir);
    if (kiln_summary_open(path, &r->sw_train, &em) != KILN_OK) goto fail;
    snprintf(path, sizeof(path), "%s/eval", r->o.model_dir);
    if (kiln_summary_open(path, &r->sw_eval, &em) != KILN_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "kiln-train: TensorBoard events: %s\n", em.msg);
    return -1;
}

static int cmd_mnist(int argc, char **argv)
{
    run r = {0};
    int rc = 1;
    if (parse_opts(argc, argv, &r.o)) return 2;
    r.json = r.o.log_format && strcmp(r.o.log_format, "json") == 0;
    r.tty = !r.json && isatty(STDERR_FILENO);
    int threads = kiln_set_threads(r.o.threads);
    r.cfg = (run_cfg){.model = r.o.model,
                      .optimizer = r.o.optimizer,
                      .batch_size = r.o.batch,
                      .threads = threads,
                      .seed = r.o.seed};
    /* the shuffle stream is separate from the init stream but fixed by --seed */
    r.shuffle_seed = r.o.seed ^ 0x5eed5eed5eed5eedULL;
    char err[512];
    if (kiln_load_fashion_mnist(r.o.data_dir, 1, &r.train, err, sizeof(err)) ||
        kiln_load_fashion_mnist(r.o.data_dir, 0, &r.test, err, sizeof(err))) {
        fprintf(stderr, "kiln-train: loading data: %s\n", err);
        goto out;
    }
    if (r.o.train_examples > 0 && (size_t)r.o.train_examples < r.train.n)
        r.train.n = (size_t)r.o.train_examples; /* a prefix, for tests */
    standardise(&r.train);
    standardise(&r.test);
    if (!(r.m = build_model(&r.o))) goto out;
    run_pos pos = {.shuffle_seed = r.shuffle_seed};
    if (r.o.model_dir) {
        char *path = NULL;
        int got = ckpt_restore_model(r.o.model_dir, r.m, &pos, &r.cfg, &path, err, sizeof(err));
        if (got < 0) {
            fprintf(stderr, "kiln-train: restoring from %s: %s\n", r.o.model_dir, err);
            goto out;
        }
        if (got > 0) {
            if (r.json) {
                printf("{\"event\":\"restored\",\"path\":");
                json_str(stdout, path);
                printf(",\"step\":%llu,\"epoch\":%llu,\"step_in_epoch\":%llu}\n",
                       (unsigned long long)kiln_model_step(r.m), (unsigned long long)pos.epoch,
                       (unsigned long long)pos.step_in_epoch);
            } else {
                printf("restored %s (step %llu, epoch %llu)\n", path,
                       (unsigned long long)kiln_model_step(r.m), (unsigned long long)pos.epoch + 1);
            }
        }
        free(path);
        if (open_summaries(&r)) goto out;
    }
    if (r.json) {
        printf("{\"event\":\"start\",\"model\":\"%s\",\"optimizer\":\"%s\",\"batch_size\":%d,"
               "\"learning_rate\":%g,\"train_epochs\":%d,\"threads\":%d,\"seed\":%llu,"
               "\"train_examples\":%zu,\"test_examples\":%zu,\"blas_core\":\"%s\"}\n",
               r.o.model, r.o.optimizer, r.o.batch, r.o.lr, r.o.epochs, threads,
               (unsigned long long)r.o.seed, r.train.n, r.test.n, kiln_blas_init());
    } else {
        printf("kiln-train mnist: model=%s optimizer=%s lr=%g batch=%d epochs=%d threads=%d\n",
               r.o.model, r.o.optimizer, r.o.lr, r.o.batch, r.o.epochs, threads);
    }
    fflush(stdout);
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    r.next_epoch = pos.epoch;
    r.next_step = pos.step_in_epoch;
    kiln_fit_opts fo = {.epochs = r.o.epochs,
                        .shuffle_seed = pos.shuffle_seed,
                        .initial_epoch = pos.epoch,
                        .initial_step = pos.step_in_epoch};
    kiln_callbacks cb = {.ud = &r,
                         .on_epoch_begin = cb_epoch_begin,
                         .on_step_end = cb_step_end,
                         .on_epoch_end = cb_epoch_end};
    int fr = g_term ? 1 : kiln_model_fit(r.m, &r.train, &fo, &cb);
    if (fr < 0 || r.failed || (fr == 1 && !g_term && !r.hit_max_steps)) {
        fprintf(stderr, "kiln-train: training failed: %s\n", kiln_model_error(r.m));
        goto out;
    }
    if (g_term) {
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
    if (r.json)
        printf("{\"event\":\"done\",\"test_accuracy\":%.6f,\"test_loss\":%.6f,"
               "\"samples_per_sec\":%.1f,\"steps\":%llu,\"train_seconds\":%.3f,"
               "\"train_gflops\":%.1f}\n",
               ta, tl, sps, (unsigned long long)kiln_model_step(r.m), r.train_secs,
               sps * kiln_model_train_flops(r.m) / 1e9);
    else
        printf("done: test_accuracy %.4f test_loss %.4f %.0f samples/s %llu steps\n", ta, tl, sps,
               (unsigned long long)kiln_model_step(r.m));
    rc = 0;
out:
    fflush(stdout);
    if (kiln_summary_close(r.sw_train) != KILN_OK || kiln_summary_close(r.sw_eval) != KILN_OK)
        fprintf(stderr, "kiln-train: warning: TensorBoard events could not all be written\n");
    kiln_model_free(r.m);
    kiln_data_free(&r.train);
    kiln_data_free(&r.test);
    return rc;
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
#ifdef KILN_HAVE_PS /* branch ps: stand-in until --distribution_strategy parsing routes here */
    if (strcmp(argv[1], "mnist") == 0 && kiln_train_ps_requested(argc - 2, argv + 2))
        return kiln_train_ps_main(NULL, argc - 2, argv + 2);
#endif
    if (strcmp(argv[1], "mnist") == 0) return cmd_mnist(argc - 2, argv + 2);
    if (strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
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
