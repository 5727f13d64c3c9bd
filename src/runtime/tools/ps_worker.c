/* tools/ps_worker.c - the training roles of the parameter_server strategy.
 *
 * Every replica (chief/master = rank 0, worker i = rank i+1) loops over its
 * own slice of each epoch's global batches (kiln_shard_range with its rank
 * and the world size: the replicas' slices are disjoint and together cover
 * the data), computes its gradient with kiln_model_compute_grads (the
 * optimizer step happens on the ps, never here), pushes it to every shard and
 * gets the shard's parameters after it in the same round trip. Nobody waits
 * for anybody: a replica's next gradient is computed from whatever the ps
 * held when its push was answered.
 *
 * A replica that starts (or restarts after a crash) pulls, and begins at the
 * job's average position: shard 0's version / world steps. The chief also
 * checkpoints (pulling every shard's parameters and optimizer slots into its
 * model and writing the ordinary checkpoint format), and when its own epochs
 * are done it waits for the other replicas, writes the final checkpoint and
 * shuts the ps tasks down. */
#include "tools/ps_tool.h"

#include "data/data.h"
#include "summary/summary.h"
#include "tools/tool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_EVERY 20 /* steps between step log lines and TensorBoard scalars */

typedef struct wk {
    ps_job *j;
    int chief, threads;
    kiln_data train, test;
    kiln_ps_client *c; /* j->ps's, once connected */
    float *x;
    uint8_t *y;
    uint32_t *order;
    kiln_summary_writer *sw, *swe;
    uint64_t shuffle_seed;
    /* since the last log line / over the epoch / over the run */
    double loss_sum, ep_loss;
    size_t seen, ep_seen, ep_correct, samples;
    uint64_t st_sum, st_max, st_n, dropped, total_dropped, total_st_sum, total_st_max, pushes;
    double train_secs;
    uint64_t ckpt_version; /* shard 0's version in the last checkpoint */
} wk;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The chief's checkpoint: every shard's parameters and slots into the model,
 * then the ordinary format (tools/ckpt_glue.c), step = shard 0's version,
 * with each shard's dedup table as the blob "ps_dedup/<shard>" (taken in the
 * same snapshot as its parameters), so a ps restored from it still knows
 * which pushes its parameters hold. */
static int checkpoint(wk *w, uint64_t epoch, uint64_t step_in_epoch)
{
    ps_job *j = w->j;
    if (!j->o.model_dir) return 0;
    uint64_t v0 = 0;
    int rc = -1, np = j->num_ps;
    kt_blob *tables = calloc((size_t)np, sizeof(*tables));
    char(*names)[32] = calloc((size_t)np, sizeof(*names));
    uint8_t **dedup = calloc((size_t)np, sizeof(*dedup));
    size_t *lens = calloc((size_t)np, sizeof(*lens));
    char *path = NULL, err[512];
    if (!tables || !names || !dedup || !lens) {
        fprintf(stderr, "kiln-train: checkpoint: out of memory\n");
        goto out;
    }
    if (kiln__ps_pull_state(j->ps, j->m, dedup, lens, err, sizeof(err)) != KILN_OK) {
        fprintf(stderr, "kiln-train: checkpoint: %s\n", err);
        goto out;
    }
    for (int s = 0; s < np; s++) {
        snprintf(names[s], sizeof(names[s]), "ps_dedup/%d", s);
        tables[s] = (kt_blob){.name = names[s], .data = dedup[s], .size = lens[s]};
    }
    v0 = kiln_model_step(j->m);
    w->ckpt_version = v0;
    run_cfg cfg = {.model = j->o.model,
                   .optimizer = j->o.optimizer,
                   .batch_size = j->o.batch,
                   .threads = w->threads,
                   .seed = j->o.seed};
    run_pos pos = {.epoch = epoch,
                   .step_in_epoch = step_in_epoch,
                   .shuffle_seed = w->shuffle_seed,
                   .extra = tables,
                   .n_extra = np};
    if (kt_save_checkpoint(j->o.model_dir, (unsigned)j->o.keep, j->m, &pos, &cfg, j->json, &path))
        goto out;
    if (!j->json) printf("checkpoint %s (version %llu)\n", path, (unsigned long long)v0);
    fflush(stdout);
    rc = 0;
out:
    for (int s = 0; dedup && s < np; s++)
        free(dedup[s]);
    free(dedup);
    free(lens);
    free(tables);
    free(names);
    free(path);
    return rc;
}

static void log_step(wk *w, uint64_t t)
{
    ps_job *j = w->j;
    double mean = w->st_n ? (double)w->st_sum / (double)w->st_n : 0.0;
    double loss = w->seen ? w->loss_sum / (double)w->seen : 0.0;
    uint64_t v0 = kiln_ps_client_version(w->c, 0);
    if (j->json) {
        printf("{\"event\":\"step\",\"rank\":%d,\"step\":%llu,\"version\":%llu,\"loss\":%.6f,"
               "\"staleness_mean\":%.3f,\"staleness_max\":%llu,\"dropped\":%llu}\n",
               j->rank, (unsigned long long)t, (unsigned long long)v0, loss, mean,
               (unsigned long long)w->st_max, (unsigned long long)w->dropped);
        fflush(stdout);
    }
    if (w->sw) {
        const char *tags[] = {"loss", "staleness_mean", "staleness_max", "dropped_gradients"};
        float vals[] = {(float)loss, (float)mean, (float)w->st_max, (float)w->total_dropped};
        kiln_summary_scalars(w->sw, (int64_t)v0, 4, tags, vals);
    }
    w->loss_sum = 0;
    w->seen = 0;
    w->st_sum = w->st_max = w->st_n = w->dropped = 0;
}

static void log_epoch(wk *w, uint64_t epoch, double secs)
{
    ps_job *j = w->j;
    float tl = 0, ta = 0;
    uint64_t v0 = kiln_ps_client_version(w->c, 0);
    double loss = w->ep_seen ? w->ep_loss / (double)w->ep_seen : 0.0;
    double acc = w->ep_seen ? (double)w->ep_correct / (double)w->ep_seen : 0.0;
    /* only the chief evaluates: the others' time goes to training */
    if (w->chief) kiln_model_evaluate(j->m, w->test.x, w->test.y, w->test.n, &tl, &ta);
    if (j->json) {
        printf("{\"event\":\"epoch\",\"rank\":%d,\"epoch\":%llu,\"version\":%llu,\"loss\":%.6f,"
               "\"accuracy\":%.6f",
               j->rank, (unsigned long long)epoch + 1, (unsigned long long)v0, loss, acc);
        if (w->chief) printf(",\"test_loss\":%.6f,\"test_accuracy\":%.6f", tl, ta);
        printf(",\"seconds\":%.3f}\n", secs);
    } else {
        printf("rank %d epoch %llu: loss %.4f accuracy %.4f", j->rank,
               (unsigned long long)epoch + 1, loss, acc);
        if (w->chief) printf(" test_loss %.4f test_accuracy %.4f", tl, ta);
        printf(" (%.1fs)\n", secs);
    }
    fflush(stdout);
    if (w->swe) {
        const char *tags[] = {"loss", "accuracy"};
        float vals[] = {tl, ta};
        kiln_summary_scalars(w->swe, (int64_t)v0, 2, tags, vals);
        kiln_summary_flush(w->swe);
    }
    if (w->sw) kiln_summary_flush(w->sw);
    w->ep_loss = 0;
    w->ep_seen = w->ep_correct = 0;
}

static int open_summaries(wk *w)
{
    ps_job *j = w->j;
    if (!j->o.model_dir) return 0;
    /* the chief's under train/ and eval/ like a single run; the others apart */
    char sub[32] = "train";
    if (!w->chief) snprintf(sub, sizeof(sub), "train_rank%d", j->rank);
    return kt_open_summaries(j->o.model_dir, sub, &w->sw, w->chief ? &w->swe : NULL);
}

static int setup(wk *w)
{
    ps_job *j = w->j;
    char err[512];
    if (kiln_load_fashion_mnist(j->o.data_dir, 1, &w->train, err, sizeof(err)) ||
        (w->chief && kiln_load_fashion_mnist(j->o.data_dir, 0, &w->test, err, sizeof(err)))) {
        fprintf(stderr, "kiln-train: loading data: %s\n", err);
        return -1;
    }
    if (j->o.train_examples > 0 && (size_t)j->o.train_examples < w->train.n)
        w->train.n = (size_t)j->o.train_examples;
    kt_fmnist_standardise(&w->train);
    if (w->chief) kt_fmnist_standardise(&w->test);
    size_t dim = kiln_model_input_dim(j->m), B = (size_t)j->o.batch;
    w->x = malloc(B * dim * sizeof(float));
    w->y = malloc(B);
    w->order = malloc((w->train.n + 1) * sizeof(uint32_t));
    if (!w->x || !w->y || !w->order) {
        fprintf(stderr, "kiln-train: out of memory\n");
        return -1;
    }
    /* dials the ps tasks and pulls their parameters into the model */
    if (kiln__ps_connect(j->ps, j->m, j->tf, j->rank, (double)j->o.timeout_s, err, sizeof(err)) !=
        KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", err);
        return -1;
    }
    w->c = j->ps->c;
    return open_summaries(w);
}

static void teardown(wk *w)
{
    if (kiln_summary_close(w->sw) != KILN_OK || kiln_summary_close(w->swe) != KILN_OK)
        fprintf(stderr, "kiln-train: warning: TensorBoard events could not all be written\n");
    free(w->x);
    free(w->y);
    free(w->order);
    kiln_data_free(&w->train);
    kiln_data_free(&w->test);
}

/* The chief's end: every replica done (or the timeout), then the final
 * checkpoint and SHUTDOWN. */
static int finish_job(wk *w, uint64_t epochs)
{
    ps_job *j = w->j;
    double t0 = now_s();
    for (;;) {
        uint64_t done = 0;
        for (int s = 0; s < j->num_ps; s++) {
            kiln_ps_stats st;
            if (kiln_ps_get_stats(w->c, s, &st) == 0 && st.workers_done > done)
                done = st.workers_done;
        }
        if (done >= (uint64_t)j->world) break;
        if (ps_g_term) return -1;
        if (now_s() - t0 > (double)j->o.timeout_s) {
            fprintf(stderr,
                    "kiln-train: warning: %llu of %d replicas reported done within %ld s; "
                    "ending the job without the others\n",
                    (unsigned long long)done, j->world, j->o.timeout_s);
            break;
        }
        usleep(100 * 1000);
    }
    /* the final parameters, for the evaluation (and without a model dir) */
    char err[512];
    if (kiln__ps_pull_params(j->ps, err, sizeof(err)) != KILN_OK) {
        fprintf(stderr, "kiln-train: %s\n", err);
        return -1;
    }
    if (checkpoint(w, epochs, 0) != 0) return -1;
    if (kiln_ps_shutdown(w->c) != 0)
        fprintf(stderr, "kiln-train: warning: shutting the ps tasks down: %s\n",
                kiln_ps_client_error(w->c));
    return 0;
}

int ps_work(ps_job *j)
{
    wk w = {.j = j};
    int rc = 1;
    w.chief = j->rank == 0;
    w.threads = kiln_set_threads(j->o.threads);
    w.shuffle_seed = j->o.seed ^ 0x5eed5eed5eed5eedULL; /* kiln_train.c's data order */
    char err[512];
    if (setup(&w)) goto out;
    size_t n = w.train.n, B = (size_t)j->o.batch, dim = w.train.dim;
    uint64_t spe = ps_steps_per_epoch(j, n), total = spe * (uint64_t)j->o.epochs;
    uint64_t start = kiln_ps_client_version(w.c, 0) / (uint64_t)j->world;
    if (start > total) start = total;
    if (j->json)
        printf("{\"event\":\"start\",\"strategy\":\"parameter_server\",\"role\":\"%s\",\"rank\":%d,"
               "\"world\":%d,\"num_ps\":%d,\"model\":\"%s\",\"optimizer\":\"%s\","
               "\"batch_size\":%d,\"steps_per_epoch\":%llu,\"start_step\":%llu,"
               "\"version\":%llu,\"max_staleness\":%ld,\"threads\":%d}\n",
               j->role, j->rank, j->world, j->num_ps, j->o.model, j->o.optimizer, j->o.batch,
               (unsigned long long)spe, (unsigned long long)start,
               (unsigned long long)kiln_ps_client_version(w.c, 0), j->o.max_staleness, w.threads);
    else
        printf("kiln-train mnist (parameter_server): %s, rank %d of %d, %d ps, step %llu of "
               "%llu\n",
               j->role, j->rank, j->world, j->num_ps, (unsigned long long)start,
               (unsigned long long)total);
    fflush(stdout);
    uint64_t order_epoch = UINT64_MAX, t = start;
    double t0 = now_s(), ep_t0 = t0;
    for (; t < total && !ps_g_term; t++) {
        uint64_t e = t / spe, s = t % spe;
        if (e != order_epoch) {
            kiln_epoch_order(w.shuffle_seed, e, n, w.order);
            order_epoch = e;
        }
        size_t b0, cnt;
        kiln_shard_range(n, B * (size_t)j->world, s, (uint32_t)j->rank, (uint32_t)j->world, &b0,
                         &cnt);
        if (cnt > 0) {
            for (size_t i = 0; i < cnt; i++) {
                uint32_t k = w.order[b0 + i];
                memcpy(w.x + i * dim, w.train.x + (size_t)k * dim, dim * sizeof(float));
                w.y[i] = w.train.y[k];
            }
            float loss = 0;
            int correct = 0;
            if (kiln__ps_push_step(j->ps, j->m, w.x, w.y, (int)cnt, &loss, &correct, err,
                                   sizeof(err)) != KILN_OK) {
                fprintf(stderr, "kiln-train: step %llu: %s\n", (unsigned long long)t, err);
                goto out;
            }
            const kiln_ps_push_info info = j->ps->last;
            w.loss_sum += (double)loss * (double)cnt;
            w.ep_loss += (double)loss * (double)cnt;
            w.seen += cnt;
            w.ep_seen += cnt;
            w.ep_correct += (size_t)correct;
            w.samples += cnt;
            /* staleness per push: the worst shard's (the shards see the same push) */
            w.st_sum += info.staleness_max;
            w.total_st_sum += info.staleness_max;
            w.st_n++;
            w.pushes++;
            if (info.staleness_max > w.st_max) w.st_max = info.staleness_max;
            if (info.staleness_max > w.total_st_max) w.total_st_max = info.staleness_max;
            w.dropped += info.dropped > 0;
            w.total_dropped += info.dropped > 0;
        }
        if ((t + 1) % LOG_EVERY == 0) log_step(&w, t + 1);
        if (s + 1 == spe) {
            double now = now_s();
            log_epoch(&w, e, now - ep_t0);
            ep_t0 = now_s(); /* the chief's evaluation is not training time */
            w.train_secs += now - t0 - (ep_t0 - now);
            t0 = ep_t0;
        }
        if (w.chief && j->o.checkpoint_steps > 0 &&
            (t + 1) % (uint64_t)j->o.checkpoint_steps == 0 && s + 1 != spe &&
            checkpoint(&w, (t + 1) / spe, (t + 1) % spe) != 0)
            goto out;
    }
    if (t % spe != 0) w.train_secs += now_s() - t0;
    if (ps_g_term) {
        if (w.chief && checkpoint(&w, t / spe, t % spe) != 0) goto out;
        if (j->json)
            printf("{\"event\":\"terminated\",\"rank\":%d,\"step\":%llu}\n", j->rank,
                   (unsigned long long)t);
        rc = 143;
        goto out;
    }
    if (kiln_ps_done(w.c) != 0) {
        fprintf(stderr, "kiln-train: %s\n", kiln_ps_client_error(w.c));
        goto out;
    }
    if (w.chief && finish_job(&w, (uint64_t)j->o.epochs) != 0) goto out;
    double sps = w.train_secs > 0 ? (double)w.samples / w.train_secs : 0.0;
    double smean = w.pushes ? (double)w.total_st_sum / (double)w.pushes : 0.0;
    /* the chief's final state is its final checkpoint's (pulled after every
     * replica was done); the others report the version of their last push */
    uint64_t final_version =
        w.chief && j->o.model_dir ? w.ckpt_version : kiln_ps_client_version(w.c, 0);
    float tl = 0, ta = 0;
    if (w.chief) kiln_model_evaluate(j->m, w.test.x, w.test.y, w.test.n, &tl, &ta);
    if (j->json) {
        printf("{\"event\":\"done\",\"rank\":%d,\"steps\":%llu,\"pushes\":%llu,\"version\":%llu,"
               "\"samples_per_sec\":%.1f,\"train_seconds\":%.3f,\"staleness_mean\":%.3f,"
               "\"staleness_max\":%llu,\"dropped\":%llu",
               j->rank, (unsigned long long)(t - start), (unsigned long long)w.pushes,
               (unsigned long long)final_version, sps, w.train_secs, smean,
               (unsigned long long)w.total_st_max, (unsigned long long)w.total_dropped);
        if (w.chief) printf(",\"test_accuracy\":%.6f,\"test_loss\":%.6f", ta, tl);
        printf("}\n");
    } else {
        printf("done: rank %d, %llu pushes, %.0f samples/s, staleness mean %.2f max %llu, %llu "
               "dropped",
               j->rank, (unsigned long long)w.pushes, sps, smean,
               (unsigned long long)w.total_st_max, (unsigned long long)w.total_dropped);
        if (w.chief) printf(", test_accuracy %.4f test_loss %.4f", ta, tl);
        printf("\n");
    }
    rc = 0;
out:
    fflush(stdout);
    teardown(&w);
    return rc;
}
