/* tools/ps_serve.c - the ps role: hold one shard of the model, restored from
 * the newest valid checkpoint in the model dir when there is one (a ps that
 * restarts picks up where the chief's last checkpoint left it; updates
 * applied after that checkpoint are lost, which asynchronous training
 * tolerates), then serve until the chief ends the job or SIGTERM. The
 * checkpoint's "ps_dedup/<shard>" table comes back too: a push the restored
 * parameters already hold is told apart from one they lost. */
#include "tools/ps_tool.h"
#include "tools/tool.h"

#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void warn_cb(void *ud, const char *path, const char *reason)
{
    (void)ud;
    fprintf(stderr, "kiln-train: skipping checkpoint %s: %s\n", path, reason);
}

/* The shard's dedup table from the checkpoint into dd and *ndd. A checkpoint
 * written before exactly-once pushes has none: an empty table (at most the
 * push each worker had in flight may then apply twice, as before). A table
 * that does not decode (another table version) is refused: -1. */
static int restore_dedup(const kiln_ckpt *ck, int shard, const char *path, kiln_ps_dedup_entry *dd,
                         size_t *ndd)
{
    char name[32], err[256];
    snprintf(name, sizeof(name), "ps_dedup/%d", shard);
    const kiln_ckpt_blob *b = kiln_ckpt_find_blob(ck, name);
    *ndd = 0;
    if (!b) return 0;
    if (kiln_ps_dedup_decode(b->data, (size_t)b->size, dd, ndd, err, sizeof(err)) != 0) {
        fprintf(stderr, "kiln-train: ps %d: checkpoint %s: %s: %s\n", shard, path, name, err);
        return -1;
    }
    return 0;
}

/* Fills this shard's variables (and slots) in the model, and its dedup
 * table, from the newest checkpoint. 1 restored, 0 none, -1 error (a
 * checkpoint of another model, or an unreadable dedup table). */
static int restore(ps_job *j, int shard, uint64_t *version, kiln_ps_dedup_entry *dd, size_t *ndd,
                   char **path)
{
    const kiln__ps *ps = j->ps;
    kiln_ckpt ck = KILN_CKPT_INIT;
    kiln_errmsg em = {{0}};
    int rc = -1;
    kiln_err e = kiln_ckpt_load_latest(j->o.model_dir, &ck, path, warn_cb, NULL, &em);
    if (e == KILN_ENOTFOUND) return 0;
    if (e != KILN_OK) {
        fprintf(stderr, "kiln-train: ps %d: restoring from %s: %s\n", shard, j->o.model_dir,
                em.msg);
        return -1;
    }
    int adam = ps->opt.adam;
    for (int v = 0; v < ps->v.n; v++) {
        if (ps->layout.var_shard[v] != shard) continue;
        const char *var = ps->v.names[v];
        size_t n = ps->v.sizes[v];
        char name[300];
        const kiln_ckpt_tensor *t = kiln_ckpt_find_tensor(&ck, var);
        snprintf(name, sizeof(name), "%s/%s", var, adam ? "adam_m" : "momentum");
        const kiln_ckpt_tensor *t1 = kiln_ckpt_find_tensor(&ck, name);
        snprintf(name, sizeof(name), "%s/adam_v", var);
        const kiln_ckpt_tensor *t2 = adam ? kiln_ckpt_find_tensor(&ck, name) : NULL;
        if (!t || t->numel != n || !t1 || t1->numel != n || (adam && (!t2 || t2->numel != n))) {
            fprintf(stderr,
                    "kiln-train: ps %d: checkpoint %s has no %s (with its %s state) of %zu "
                    "values: written for another model or optimizer\n",
                    shard, *path, var, j->o.optimizer, n);
            goto out;
        }
        /* into the model, which kiln__ps_serve_shard serves from */
        memcpy(ps->v.data[v], t->data, n * sizeof(float));
        if (ps->slot1[v]) memcpy(ps->slot1[v], t1->data, n * sizeof(float));
        if (t2 && ps->slot2[v]) memcpy(ps->slot2[v], t2->data, n * sizeof(float));
    }
    if (restore_dedup(&ck, shard, *path, dd, ndd) != 0) goto out;
    *version = ck.step;
    rc = 1;
out:
    kiln_ckpt_free(&ck);
    return rc;
}

typedef struct serving {
    ps_job *j;
    int shard, got, started;
    uint64_t version;
    size_t ndd;
    const char *path;
} serving;

/* The ps_start line, once the endpoint is bound (tests wait for it). */
static void announce(void *ud)
{
    serving *sv = ud;
    ps_job *j = sv->j;
    int shard = sv->shard, vars = 0;
    const char *addr = j->tf->ps_hosts[shard];
    size_t n = j->ps->layout.shard_size[shard];
    sv->started = 1;
    for (int v = 0; v < j->ps->v.n; v++)
        vars += j->ps->layout.var_shard[v] == shard;
    if (j->json) {
        printf("{\"event\":\"ps_start\",\"shard\":%d,\"address\":\"%s\",\"variables\":%d,"
               "\"floats\":%zu,\"version\":%llu,\"restored\":%s",
               shard, addr, vars, n, (unsigned long long)sv->version,
               sv->got > 0 ? "true" : "false");
        if (sv->got > 0) {
            printf(",\"path\":");
            kt_json_str(stdout, sv->path);
        }
        printf(",\"dedup_workers\":%zu,\"total_updates\":%llu}\n", sv->ndd,
               (unsigned long long)j->ps->opt.total_updates);
    } else {
        printf("ps %d serving %d variables (%zu floats) on %s from version %llu%s%s\n", shard, vars,
               n, addr, (unsigned long long)sv->version, sv->got > 0 ? ", restored from " : "",
               sv->got > 0 ? sv->path : "");
    }
    fflush(stdout);
}

int ps_serve(ps_job *j)
{
    int shard = j->task_index, rc = 1;
    char *path = NULL, err[512];
    uint64_t version = 0, drop_after = 0;
    kiln_ps_dedup_entry *dd = calloc(KILN_PS_MAX_WORKERS, sizeof(*dd));
    size_t ndd = 0;
    if (!dd) {
        fprintf(stderr, "kiln-train: ps %d: out of memory\n", shard);
        goto out;
    }
    /* the model holds its initial values (same seed: a single run's init),
     * or, restored, the chief's last checkpoint */
    int got = j->o.model_dir ? restore(j, shard, &version, dd, &ndd, &path) : 0;
    if (got < 0) goto out;
    if (kiln__ps_fault_from_env(&drop_after, err, sizeof(err)) != KILN_OK) {
        fprintf(stderr, "kiln-train: ps %d: %s\n", shard, err);
        goto out;
    }
    if (drop_after)
        fprintf(stderr,
                "kiln-train: ps %d: KILN_PS_FAULT: the reply to applied push %llu "
                "will be dropped (a test fault)\n",
                shard, (unsigned long long)drop_after);
    long ntrain = ps_train_count(j);
    if (ntrain < 0) goto out;
    j->ps->opt.total_updates =
        ps_steps_per_epoch(j, (size_t)ntrain) * (uint64_t)j->o.epochs * (uint64_t)j->world;
    serving sv = {.j = j, .shard = shard, .got = got, .version = version, .ndd = ndd, .path = path};
    kiln__ps_serve_cfg sc = {.shard = shard,
                             .version = version,
                             .max_staleness = j->o.max_staleness < 0 ? KILN_PS_UNBOUNDED
                                                                     : (uint32_t)j->o.max_staleness,
                             .dedup = dd,
                             .n_dedup = ndd,
                             .fault_drop_reply_after_apply = drop_after,
                             .stop = &ps_g_term,
                             .ready = announce,
                             .ud = &sv};
    kiln_ps_stats st = {0};
    int r = kiln__ps_serve_shard(j->ps, j->tf, &sc, &st, err, sizeof(err));
    if (!sv.started) { /* not bound: no ps_done line */
        fprintf(stderr, "kiln-train: %s\n", err);
        goto out;
    }
    double mean = st.pushes ? (double)st.staleness_sum / (double)st.pushes : 0.0;
    if (j->json)
        printf("{\"event\":\"ps_done\",\"shard\":%d,\"version\":%llu,\"pushes\":%llu,"
               "\"dropped\":%llu,\"staleness_mean\":%.3f,\"staleness_max\":%llu,"
               "\"rejected\":%llu,\"duplicates\":%llu,\"reason\":\"%s\"}\n",
               shard, (unsigned long long)st.version, (unsigned long long)st.pushes,
               (unsigned long long)st.dropped, mean, (unsigned long long)st.staleness_max,
               (unsigned long long)st.rejected, (unsigned long long)st.duplicates,
               r == 0   ? "shutdown"
               : r == 1 ? "signal"
                        : "error");
    else
        printf("ps %d done: version %llu, %llu pushes, %llu dropped, %llu duplicates, staleness "
               "mean %.2f max %llu\n",
               shard, (unsigned long long)st.version, (unsigned long long)st.pushes,
               (unsigned long long)st.dropped, (unsigned long long)st.duplicates, mean,
               (unsigned long long)st.staleness_max);
    rc = r == 0 ? 0 : r == 1 ? 143 : 1;
out:
    fflush(stdout);
    free(path);
    free(dd);
    return rc;
}
