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

#include <ctype.h>
#include <errno.h>
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

/* Fills params (and slots) of this shard, and its dedup table, from the
 * newest checkpoint. 1 restored, 0 none, -1 error (a checkpoint of another
 * model, or an unreadable dedup table). */
static int restore(ps_job *j, int shard, float *p, float *s1, float *s2, uint64_t *version,
                   kiln_ps_dedup_entry *dd, size_t *ndd, char **path)
{
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
    const char *slot1 = j->opt.adam ? "adam_m" : "momentum";
    for (int v = 0; v < j->nvars; v++) {
        if (j->layout.var_shard[v] != shard) continue;
        size_t off = j->layout.var_offset[v], n = j->var_sizes[v];
        char name[300];
        const kiln_ckpt_tensor *t = kiln_ckpt_find_tensor(&ck, j->var_names[v]);
        snprintf(name, sizeof(name), "%s/%s", j->var_names[v], slot1);
        const kiln_ckpt_tensor *t1 = kiln_ckpt_find_tensor(&ck, name);
        snprintf(name, sizeof(name), "%s/adam_v", j->var_names[v]);
        const kiln_ckpt_tensor *t2 = j->opt.adam ? kiln_ckpt_find_tensor(&ck, name) : NULL;
        if (!t || t->numel != n || !t1 || t1->numel != n ||
            (j->opt.adam && (!t2 || t2->numel != n))) {
            fprintf(stderr,
                    "kiln-train: ps %d: checkpoint %s has no %s (with its %s state) of %zu "
                    "values: written for another model or optimizer\n",
                    shard, *path, j->var_names[v], j->o.optimizer, n);
            goto out;
        }
        memcpy(p + off, t->data, n * sizeof(float));
        memcpy(s1 + off, t1->data, n * sizeof(float));
        if (t2) memcpy(s2 + off, t2->data, n * sizeof(float));
    }
    if (restore_dedup(&ck, shard, *path, dd, ndd) != 0) goto out;
    *version = ck.step;
    rc = 1;
out:
    kiln_ckpt_free(&ck);
    return rc;
}

/* KILN_PS_FAULT (tests only, docs/parameter-server.md): "" or unset: none;
 * "drop_reply_after_apply:N": the reply to the Nth applied push is lost.
 * Anything else is refused, so a misspelt fault never passes silently. */
static int parse_fault(int shard, uint64_t *drop_after)
{
    const char *f = getenv("KILN_PS_FAULT");
    const char *key = "drop_reply_after_apply:";
    char *end = NULL;
    *drop_after = 0;
    if (!f || !*f) return 0;
    if (strncmp(f, key, strlen(key)) == 0 && isdigit((unsigned char)f[strlen(key)])) {
        /* digits only: strtoull would take "-1" (and an overflow) as a push
         * number no run reaches, a fault accepted and never fired */
        errno = 0;
        unsigned long long n = strtoull(f + strlen(key), &end, 10);
        if (errno == 0 && *end == '\0' && n > 0) {
            *drop_after = n;
            fprintf(stderr,
                    "kiln-train: ps %d: KILN_PS_FAULT: the reply to applied push %llu "
                    "will be dropped (a test fault)\n",
                    shard, n);
            return 0;
        }
    }
    fprintf(stderr,
            "kiln-train: ps %d: KILN_PS_FAULT=%s is not a fault this build knows "
            "(drop_reply_after_apply:N, N >= 1)\n",
            shard, f);
    return -1;
}

int ps_serve(ps_job *j)
{
    int shard = j->task_index, rc = 1;
    size_t n = j->layout.shard_size[shard];
    float *p = calloc(n + 1, sizeof(float)), *s1 = calloc(n + 1, sizeof(float));
    float *s2 = calloc(n + 1, sizeof(float));
    char *path = NULL, ep[300], err[512];
    kiln_ps_server *s = NULL;
    uint64_t version = 0, drop_after = 0;
    kiln_ps_dedup_entry *dd = calloc(KILN_PS_MAX_WORKERS, sizeof(*dd));
    size_t ndd = 0;
    if (!p || !s1 || !s2 || !dd) {
        fprintf(stderr, "kiln-train: ps %d: out of memory\n", shard);
        goto out;
    }
    /* the model's initial values for this shard (same seed: a single run's init) */
    for (int v = 0; v < j->nvars; v++)
        if (j->layout.var_shard[v] == shard)
            memcpy(p + j->layout.var_offset[v], j->var_data[v], j->var_sizes[v] * sizeof(float));
    int got = j->o.model_dir ? restore(j, shard, p, s1, s2, &version, dd, &ndd, &path) : 0;
    if (got < 0 || parse_fault(shard, &drop_after) != 0) goto out;
    long ntrain = ps_train_count(j);
    if (ntrain < 0) goto out;
    j->opt.total_updates =
        ps_steps_per_epoch(j, (size_t)ntrain) * (uint64_t)j->o.epochs * (uint64_t)j->world;
    /* every interface, on the port the cluster gives this task */
    snprintf(ep, sizeof(ep), "tcp://*:%s", strrchr(j->ps_addrs[shard], ':') + 1);
    kiln_ps_server_config sc = {
        .endpoint = ep,
        .shard = (uint32_t)shard,
        .model_sig = j->layout.sig,
        .n = n,
        .params = p,
        .slot1 = s1,
        .slot2 = s2,
        .version = version,
        .opt = j->opt,
        .max_staleness = j->o.max_staleness < 0 ? KILN_PS_UNBOUNDED : (uint32_t)j->o.max_staleness,
        .dedup = dd,
        .n_dedup = ndd,
        .fault_drop_reply_after_apply = drop_after};
    /* kilnd's keys for this attempt: CURVE, and only the job's workers */
    kiln_ps_keys keys;
    const char *kp = getenv("KILN_PS_KEYS");
    if (kp && *kp) {
        if (kiln_ps_keys_load(kp, &keys, err, sizeof(err)) != 0) {
            fprintf(stderr, "kiln-train: ps %d: %s\n", shard, err);
            goto out;
        }
        sc.curve_secret = keys.server_secret;
        sc.curve_client = keys.client_public;
    }
    if (!(s = kiln_ps_server_new(&sc, err, sizeof(err)))) {
        fprintf(stderr, "kiln-train: ps %d (%s): %s\n", shard, j->ps_addrs[shard], err);
        goto out;
    }
    int vars = 0;
    for (int v = 0; v < j->nvars; v++)
        vars += j->layout.var_shard[v] == shard;
    if (j->json) {
        printf("{\"event\":\"ps_start\",\"shard\":%d,\"address\":\"%s\",\"variables\":%d,"
               "\"floats\":%zu,\"version\":%llu,\"restored\":%s",
               shard, j->ps_addrs[shard], vars, n, (unsigned long long)version,
               got > 0 ? "true" : "false");
        if (got > 0) {
            printf(",\"path\":");
            kt_json_str(stdout, path);
        }
        printf(",\"dedup_workers\":%zu,\"total_updates\":%llu}\n", ndd,
               (unsigned long long)j->opt.total_updates);
    } else {
        printf("ps %d serving %d variables (%zu floats) on %s from version %llu%s%s\n", shard, vars,
               n, j->ps_addrs[shard], (unsigned long long)version,
               got > 0 ? ", restored from " : "", got > 0 ? path : "");
    }
    fflush(stdout);
    int r = kiln_ps_server_run(s, &ps_g_term);
    kiln_ps_stats st;
    kiln_ps_server_stats(s, &st);
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
    kiln_ps_server_free(s);
    free(path);
    free(p);
    free(s1);
    free(s2);
    free(dd);
    return rc;
}
