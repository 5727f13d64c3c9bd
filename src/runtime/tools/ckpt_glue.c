/* tools/ckpt_glue.c - maps a kiln_model to and from checkpoint files.
 *
 * A checkpoint holds every named buffer of the model (parameters as PARAM,
 * optimizer slots and batch-norm statistics as STATE), the optimizer step in
 * the header, an fp16 run's "loss_scale" blob (scale, good steps, skipped
 * steps, as text), and three blobs: "rng" (the model RNG), "data_state" (seed,
 * epoch, step: the data order is recomputed from it) and "config", the
 * settings that must match for a bit-exact continuation. The thread count is
 * one of them: kiln's reductions are fixed-order per thread count, so a
 * different count would give a different (equally valid) rounding. */
#include "tools/tool.h"

#include "ckpt/ckpt.h"
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cfg_string(const run_cfg *c, char *out, size_t n)
{
    int k = snprintf(out, n, "model=%s optimizer=%s batch_size=%d threads=%d seed=%llu", c->model,
                     c->optimizer, c->batch_size, c->threads, (unsigned long long)c->seed);
    /* another replica count sums gradients in another order: a bit-exact
     * resume needs the same one (one replica keeps the older string) */
    if (c->replicas > 1 && k > 0 && (size_t)k < n)
        k += snprintf(out + k, n - (size_t)k, " replicas=%d", c->replicas);
    /* a CPU run keeps the older string too */
    if (c->gpu && k > 0 && (size_t)k < n) k += snprintf(out + k, n - (size_t)k, " device=gpu");
    /* and an fp32 run: other precisions round otherwise */
    if (c->precision && strcmp(c->precision, "fp32") != 0 && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " precision=%s", c->precision);
}

/* Copies a config string without its device-dependent words (threads=,
 * device=, precision=): what must match for any resume. *gpu: it names
 * device=gpu; prec: its precision ("fp32" when it names none). */
static void cfg_core(const char *s, size_t len, char *out, size_t n, int *gpu, char prec[16])
{
    size_t o = 0;
    *gpu = 0;
    snprintf(prec, 16, "fp32");
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ' ')
            j++;
        int skip = (j - i >= 8 && memcmp(s + i, "threads=", 8) == 0) ||
                   (j - i >= 7 && memcmp(s + i, "device=", 7) == 0) ||
                   (j - i >= 10 && memcmp(s + i, "precision=", 10) == 0);
        if (j - i == 10 && memcmp(s + i, "device=gpu", 10) == 0) *gpu = 1;
        if (j - i > 10 && j - i < 26 && memcmp(s + i, "precision=", 10) == 0)
            snprintf(prec, 16, "%.*s", (int)(j - i - 10), s + i + 10);
        if (!skip && o + (j - i) + 2 < n) {
            if (o) out[o++] = ' ';
            memcpy(out + o, s + i, j - i);
            o += j - i;
        }
        i = j < len ? j + 1 : j;
    }
    out[o < n ? o : n - 1] = '\0';
}

int ckpt_save_model(const char *dir, unsigned keep, kiln_model *m, const run_pos *pos,
                    const run_cfg *cfg, char **path_out, char *err, size_t errlen)
{
    kiln_ckpt ck = KILN_CKPT_INIT;
    kiln_errmsg em = {{0}};
    int rc = -1;
    uint8_t rng[KILN_RNG_STATE_SIZE], ds[KILN_DATA_STATE_SIZE];
    char cs[256];
    if (kiln_model_sync_host(m)) { /* a GPU model's state, brought to the host */
        snprintf(err, errlen, "%s", kiln_model_error(m));
        return -1;
    }
    ck.step = kiln_model_step(m);
    ck.epoch = pos->epoch;
    ck.step_in_epoch = pos->step_in_epoch;
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        uint64_t shape[KILN_MAX_DIMS];
        for (int d = 0; d < b.ndim; d++)
            shape[d] = (uint64_t)b.shape[d];
        if (kiln_ckpt_add_tensor(&ck, b.name, b.is_param ? KILN_CKPT_PARAM : KILN_CKPT_STATE,
                                 (uint32_t)b.ndim, shape, b.data, &em) != KILN_OK)
            goto out;
    }
    kiln_rng_encode(kiln_model_rng(m), rng);
    kiln_data_state dst = {
        .seed = pos->shuffle_seed, .epoch = pos->epoch, .step = pos->step_in_epoch};
    kiln_data_state_encode(&dst, ds);
    cfg_string(cfg, cs, sizeof(cs));
    if (kiln_ckpt_add_blob(&ck, "rng", rng, sizeof(rng), &em) != KILN_OK ||
        kiln_ckpt_add_blob(&ck, "data_state", ds, sizeof(ds), &em) != KILN_OK ||
        kiln_ckpt_add_blob(&ck, "config", cs, strlen(cs), &em) != KILN_OK)
        goto out;
    /* fp16: the loss scaler, so that a resumed run scales (and rounds) as
     * the uninterrupted one; its growth interval is the run's flag */
    kiln_loss_scale_state ls;
    char lsb[128];
    if (kiln_model_loss_scale(m, NULL) > 0.0f && kiln_model_get_loss_scale_state(m, &ls) == 0) {
        int n = snprintf(lsb, sizeof lsb, "scale=%.9g good_steps=%d skipped=%llu", (double)ls.scale,
                         ls.good_steps, (unsigned long long)ls.skipped);
        if (kiln_ckpt_add_blob(&ck, "loss_scale", lsb, (size_t)n, &em) != KILN_OK) goto out;
    }
    for (int i = 0; i < pos->n_extra; i++)
        if (kiln_ckpt_add_blob(&ck, pos->extra[i].name, pos->extra[i].data, pos->extra[i].size,
                               &em) != KILN_OK)
            goto out;
    if (kiln_ckpt_save(dir, &ck, keep, path_out, &em) != KILN_OK) goto out;
    rc = 0;
out:
    if (rc) snprintf(err, errlen, "%s", em.msg);
    kiln_ckpt_free(&ck);
    return rc;
}

int kt_save_checkpoint(const char *dir, unsigned keep, kiln_model *m, const run_pos *pos,
                       const run_cfg *cfg, int json, char **path_out)
{
    char err[512], *path = NULL;
    if (ckpt_save_model(dir, keep, m, pos, cfg, &path, err, sizeof(err))) {
        fprintf(stderr, "kiln-train: writing a checkpoint: %s\n", err);
        return -1;
    }
    if (json) {
        printf("{\"event\":\"checkpoint\",\"step\":%llu,\"epoch\":%llu,\"path\":",
               (unsigned long long)kiln_model_step(m), (unsigned long long)pos->epoch);
        kt_json_str(stdout, path);
        printf("}\n");
        fflush(stdout);
    }
    if (path_out)
        *path_out = path;
    else
        free(path);
    return 0;
}

static void warn_cb(void *ud, const char *path, const char *reason)
{
    (void)ud;
    fprintf(stderr, "kiln-train: skipping checkpoint %s: %s\n", path, reason);
}

/* fp16: the loss scaler from the checkpoint's "loss_scale" blob (the run's
 * growth interval kept); one without it (an older kiln's, or another
 * precision's) starts the scale over, said once. 0, or -1 with err. */
static int restore_scaler(const kiln_ckpt *ck, kiln_model *m, char *err, size_t errlen)
{
    const kiln_ckpt_blob *lb = kiln_ckpt_find_blob(ck, "loss_scale");
    kiln_loss_scale_state ls;
    char text[128];
    float scale = 0;
    int good = -1, used = 0;
    unsigned long long skipped = 0;
    if (kiln_model_get_loss_scale_state(m, &ls)) return 0;
    if (!lb) {
        fprintf(stderr,
                "kiln-train: the checkpoint has no loss scale (an older kiln wrote it, or "
                "another precision): fp16's starts again at %g\n",
                (double)ls.scale);
        return 0;
    }
    snprintf(text, sizeof text, "%.*s", (int)(lb->size < 127 ? lb->size : 127),
             (const char *)lb->data);
    if (lb->size >= sizeof text ||
        sscanf(text, "scale=%f good_steps=%d skipped=%llu%n", &scale, &good, &skipped, &used) !=
            3 ||
        (size_t)used != lb->size) {
        snprintf(err, errlen, "checkpoint's loss_scale record \"%.60s\" is not one kiln writes",
                 text);
        return -1;
    }
    ls.scale = scale;
    ls.skipped = skipped;
    /* another --loss_scale_growth_interval: the count goes on below it */
    ls.good_steps = good < ls.growth_interval ? good : ls.growth_interval - 1;
    if (good < 0 || kiln_model_set_loss_scale_state(m, &ls)) {
        snprintf(err, errlen, "checkpoint's loss_scale record \"%.60s\": %s", text,
                 good < 0 ? "a negative step count" : kiln_model_error(m));
        return -1;
    }
    return 0;
}

int ckpt_restore_model(const char *dir, kiln_model *m, run_pos *pos, const run_cfg *cfg,
                       char **path_out, char *err, size_t errlen)
{
    kiln_ckpt ck = KILN_CKPT_INIT;
    kiln_errmsg em = {{0}};
    int rc = -1;
    char cs[256];
    kiln_err e = kiln_ckpt_load_latest(dir, &ck, path_out, warn_cb, NULL, &em);
    if (e == KILN_ENOTFOUND) return 0;
    if (e != KILN_OK) {
        snprintf(err, errlen, "%s", em.msg);
        return -1;
    }
    const kiln_ckpt_blob *cb = kiln_ckpt_find_blob(&ck, "config");
    const kiln_ckpt_blob *rb = kiln_ckpt_find_blob(&ck, "rng");
    const kiln_ckpt_blob *db = kiln_ckpt_find_blob(&ck, "data_state");
    cfg_string(cfg, cs, sizeof(cs));
    if (!cb || !rb || !db || rb->size != KILN_RNG_STATE_SIZE) {
        snprintf(err, errlen, "checkpoint lacks the rng, data_state or config record");
        goto out;
    }
    if (cb->size != strlen(cs) || memcmp(cb->data, cs, cb->size) != 0) {
        /* another device computes in another order: a resume across CPU and
         * GPU is allowed (the state is the same format), bit-exact it is not;
         * threads only matter on the CPU. Everything else must match. */
        char a[256], b[256], ap[16], bp[16];
        int agpu, bgpu;
        cfg_core((const char *)cb->data, cb->size, a, sizeof a, &agpu, ap);
        cfg_core(cs, strlen(cs), b, sizeof b, &bgpu, bp);
        int same_prec = strcmp(ap, bp) == 0;
        if ((agpu == bgpu && same_prec) || strcmp(a, b) != 0) {
            snprintf(err, errlen,
                     "checkpoint was written with \"%.*s\" but this run is \"%s\"; "
                     "use the same flags or another --model_dir",
                     (int)(cb->size < 200 ? cb->size : 200), (const char *)cb->data, cs);
            goto out;
        }
        if (agpu != bgpu)
            fprintf(stderr,
                    "kiln-train: resuming on the %s a checkpoint trained on the %s: it goes on "
                    "from the same state, but not bit-identical to a run that stayed there\n",
                    bgpu ? "GPU" : "CPU", agpu ? "GPU" : "CPU");
        /* the masters are fp32 in every precision: the state is the same */
        if (!same_prec)
            fprintf(stderr,
                    "kiln-train: resuming in %s a checkpoint trained in %s: it goes on from the "
                    "same (fp32) state, but not bit-identical to a run that stayed in %s\n",
                    bp, ap, ap);
    }
    kiln_data_state ds;
    if (kiln_data_state_decode(db->data, db->size, &ds, &em) != KILN_OK) {
        snprintf(err, errlen, "%s", em.msg);
        goto out;
    }
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        const kiln_ckpt_tensor *t = kiln_ckpt_find_tensor(&ck, b.name);
        if (!t || t->numel != b.size) {
            snprintf(err, errlen, "checkpoint has no tensor %s of %zu values", b.name, b.size);
            goto out;
        }
        memcpy(b.data, t->data, sizeof(float) * b.size);
    }
    if (kiln_model_loss_scale(m, NULL) > 0.0f && restore_scaler(&ck, m, err, errlen)) goto out;
    kiln_rng_decode(kiln_model_rng(m), rb->data);
    kiln_model_set_step(m, ck.step);
    pos->epoch = ck.epoch;
    pos->step_in_epoch = ck.step_in_epoch;
    pos->shuffle_seed = ds.seed;
    rc = 1;
out:
    if (rc < 0) { /* *path_out is the caller's only on success */
        free(*path_out);
        *path_out = NULL;
    }
    kiln_ckpt_free(&ck);
    return rc;
}

int ckpt_load_params(const char *path, kiln_model *m, uint64_t *step, char *err, size_t errlen)
{
    kiln_ckpt ck = KILN_CKPT_INIT;
    kiln_errmsg em = {{0}};
    int rc = -1;
    if (kiln_ckpt_read_file(path, &ck, &em) != KILN_OK) {
        snprintf(err, errlen, "%s", em.msg);
        return -1;
    }
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (!b.is_param && strstr(b.name, "moving_") == NULL) continue; /* optimizer slots */
        const kiln_ckpt_tensor *t = kiln_ckpt_find_tensor(&ck, b.name);
        if (!t || t->numel != b.size) {
            snprintf(err, errlen, "%s has no tensor %s of %zu values (another model?)", path,
                     b.name, b.size);
            goto out;
        }
        memcpy(b.data, t->data, sizeof(float) * b.size);
    }
    *step = ck.step;
    rc = 0;
out:
    kiln_ckpt_free(&ck);
    return rc;
}
