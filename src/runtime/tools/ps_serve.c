/* tools/ps_serve.c - the ps role: hold one shard of the model, restored from
 * the newest valid checkpoint in the model dir when there is one (a ps that
 * restarts picks up where the chief's last checkpoint left it; updates
 * applied after that checkpoint are lost, which asynchronous training
 * tolerates), then serve until the chief ends the job or SIGTERM. */
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

/* Fills params (and slots) of this shard from the newest checkpoint.
 * 1 restored, 0 none, -1 error (a checkpoint of another model). */
static int restore(ps_job *j, int shard, float *p, float *s1, float *s2, uint64_t *version,
                   char **path)
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
    *version = ck.step;
    rc = 1;
out:
    kiln_ckpt_free(&ck);
    return rc;
}

int ps_serve(ps_job *j)
{
    int shard = j->task_index, rc = 1;
    size_t n = j->layout.shard_size[shard];
    float *p = calloc(n + 1, sizeof(float)), *s1 = calloc(n + 1, sizeof(float));
    float *s2 = calloc(n + 1, sizeof(float));
    char *path = NULL, ep[300], err[512];
    kiln_ps_server *s = NULL;
    uint64_t version = 0;
    if (!p || !s1 || !s2) {
        fprintf(stderr, "kiln-train: ps %d: out of memory\n", shard);
        goto out;
    }
    /* the model's initial values for this shard (same seed: a single run's init) */
    for (int v = 0; v < j->nvars; v++)
        if (j->layout.var_shard[v] == shard)
            memcpy(p + j->layout.var_offset[v], j->var_data[v], j->var_sizes[v] * sizeof(float));
    int got = j->o.model_dir ? restore(j, shard, p, s1, s2, &version, &path) : 0;
    if (got < 0) goto out;
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
        .max_staleness = j->o.max_staleness < 0 ? KILN_PS_UNBOUNDED : (uint32_t)j->o.max_staleness};
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
        printf(",\"total_updates\":%llu}\n", (unsigned long long)j->opt.total_updates);
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
               "\"rejected\":%llu,\"reason\":\"%s\"}\n",
               shard, (unsigned long long)st.version, (unsigned long long)st.pushes,
               (unsigned long long)st.dropped, mean, (unsigned long long)st.staleness_max,
               (unsigned long long)st.rejected,
               r == 0   ? "shutdown"
               : r == 1 ? "signal"
                        : "error");
    else
        printf("ps %d done: version %llu, %llu pushes, %llu dropped, staleness mean %.2f max "
               "%llu\n",
               shard, (unsigned long long)st.version, (unsigned long long)st.pushes,
               (unsigned long long)st.dropped, mean, (unsigned long long)st.staleness_max);
    rc = r == 0 ? 0 : r == 1 ? 143 : 1;
out:
    fflush(stdout);
    kiln_ps_server_free(s);
    free(path);
    free(p);
    free(s1);
    free(s2);
    return rc;
}
