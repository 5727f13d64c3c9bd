/* src/exec/supervisor/evict.c - NoExecute taints under running replicas, as
 * Kubernetes' taint manager treats them: a replica on a node with a
 * NoExecute taint it does not tolerate is evicted at once; one that
 * tolerates it with tolerationSeconds after that many seconds; one that
 * tolerates it without them stays (kiln_noexecute_stay).
 *
 * Node taints come from the node config, read when kilnd starts, so a
 * NoExecute taint appears under running replicas when kilnd restarts with a
 * config that adds one: the replicas it adopts are checked at its first
 * pass, and the tolerationSeconds clock starts then (Kubernetes starts it
 * at the taint's timeAdded, which the node config does not record).
 *
 * An eviction stops the whole job (the replicas on the node and, as a
 * gang, the rest) and queues it again, as a drain does, to be placed on
 * nodes it may use; it counts against runPolicy.backoffLimit, as a batch
 * Job counts a pod the taint manager evicted, so that a job tolerating a
 * taint for a while and placed on that node again does not cycle forever.
 * Past the limit, and for a tuning trial (which is never requeued), the job
 * FAILS, naming the node and the taint.
 *
 * The tolerations of the Kueue flavors that admitted a job count with its
 * own (Kueue adds them to the workload's pods): they are kept in the job's
 * runtime record, so that a restarted kilnd reads them back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/supervisor/supervisor_int.h"

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

void tolerations_free(kiln_toleration **v, size_t *n)
{
    for (size_t i = 0; *v && i < *n; i++)
        kiln_toleration_clear(&(*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

bool tolerations_copy(kiln_toleration **out, size_t *n_out, const kiln_toleration *v, size_t n)
{
    tolerations_free(out, n_out);
    if (!n) return true;
    *out = calloc(n, sizeof **out);
    if (!*out) return false;
    *n_out = n;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        kiln_toleration *t = &(*out)[i];
        t->key = dup_or_null(v[i].key);
        t->op = dup_or_null(v[i].op);
        t->value = dup_or_null(v[i].value);
        t->effect = dup_or_null(v[i].effect);
        t->has_toleration_seconds = v[i].has_toleration_seconds;
        t->toleration_seconds = v[i].toleration_seconds;
        ok &= (!v[i].key || t->key) && (!v[i].op || t->op) && (!v[i].value || t->value) &&
              (!v[i].effect || t->effect);
    }
    if (!ok) tolerations_free(out, n_out);
    return ok;
}

json_t *xtol_json(const rjob *j)
{
    if (!j->n_xtol) return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < j->n_xtol; i++) {
        const kiln_toleration *t = &j->xtol[i];
        json_t *o = json_object();
        if (!o) break;
        if (t->key) json_object_set_new(o, "key", json_string(t->key));
        if (t->op) json_object_set_new(o, "operator", json_string(t->op));
        if (t->value) json_object_set_new(o, "value", json_string(t->value));
        if (t->effect) json_object_set_new(o, "effect", json_string(t->effect));
        if (t->has_toleration_seconds)
            json_object_set_new(o, "tolerationSeconds", json_integer(t->toleration_seconds));
        json_array_append_new(a, o);
    }
    return a;
}

static const char *str_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

void xtol_load(rjob *j, const char *runtime)
{
    json_t *rt = runtime ? json_loads(runtime, 0, NULL) : NULL;
    const json_t *a = json_object_get(rt, "flavorTolerations");
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    kiln_toleration *v = n ? calloc(n, sizeof *v) : NULL;
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++) {
        const json_t *o = json_array_get(a, i);
        if (!json_is_object(o)) continue;
        const json_t *secs = json_object_get(o, "tolerationSeconds");
        v[k++] = (kiln_toleration){.key = (char *)str_of(o, "key"),
                                   .op = (char *)str_of(o, "operator"),
                                   .value = (char *)str_of(o, "value"),
                                   .effect = (char *)str_of(o, "effect"),
                                   .has_toleration_seconds = json_is_integer(secs),
                                   .toleration_seconds = json_integer_value(secs)};
    }
    /* out of memory: none, and a flavor's toleration is missed until the
     * job is admitted again (the eviction errs towards stopping it) */
    if (v) tolerations_copy(&j->xtol, &j->n_xtol, v, k);
    free(v);
    json_decref(rt);
}

/* Stops job j for taint t of node nd under replica r (stay: the seconds it
 * tolerated it for; 0: not at all). */
static void evict(sup *s, rjob *j, const replica *r, const kiln_node *nd, const kiln_taint *t,
                  int64_t stay)
{
    char ts[400], what[800];
    kiln_taint_str(t, ts, sizeof ts);
    if (stay > 0)
        snprintf(what, sizeof what,
                 "The %s replica was evicted from node %s: its taint %s is tolerated for "
                 "%llds (tolerationSeconds), and that time is up",
                 r->task, nd->name, ts, (long long)stay);
    else
        snprintf(what, sizeof what,
                 "The %s replica was evicted from node %s: the node has the taint %s, which "
                 "the replica does not tolerate",
                 r->task, nd->name, ts);
    int limit = kiln_job_backoff_limit(j->job);
    kiln_jobfiles_event(s->d->jobfiles, j->project, j->job_id, "WARNING", "%s", what);
    fprintf(stderr, "kilnd: %s/%s: %s\n", j->project, j->job_id, what);
    if (!j->study && j->failures < limit) {
        j->evicted = true;
        begin_stop(s, j, AS_REQUEUE,
                   "%s; the job is queued again to run on nodes it may use (restart %d of at "
                   "most %d, runPolicy.backoffLimit)",
                   what, j->failures + 1, limit);
    } else {
        j->fail_reason = KILND_FAIL_EVICTED;
        begin_stop(s, j, AS_FAIL, "%s%s", what,
                   j->study ? "" : " (runPolicy.backoffLimit reached)");
    }
}

void evict_tick(sup *s, int64_t now)
{
    const kiln_cluster *c = &s->d->cluster;
    for (rjob *j = s->jobs; j; j = j->next) {
        if (j->after != AS_NONE || j->fetch || !j->job) continue;
        for (size_t i = 0; i < j->n; i++) {
            replica *r = &j->reps[i];
            if (r->dropped || !r->alive || r->node >= c->n) continue;
            const kiln_node *nd = &c->nodes[r->node];
            if (!nd->n_taints) continue;
            const kiln_replica_config *rc = kiln_job_role_config(j->job, r->role);
            const kiln_taint *t = NULL;
            int64_t stay =
                kiln_noexecute_stay(rc ? rc->tolerations : NULL, rc ? rc->n_tolerations : 0,
                                    j->xtol, j->n_xtol, nd->taints, nd->n_taints, &t);
            if (stay < 0 || !t) continue;
            if (!r->taint_seen_ns) {
                r->taint_seen_ns = now;
                if (stay > 0) {
                    char ts[400];
                    kiln_jobfiles_event(
                        s->d->jobfiles, j->project, j->job_id, "WARNING",
                        "Node %s has the taint %s: the %s replica tolerates it for %llds "
                        "(tolerationSeconds), then the job is evicted",
                        nd->name, kiln_taint_str(t, ts, sizeof ts), r->task, (long long)stay);
                }
            }
            if ((now - r->taint_seen_ns) / 1000000000LL < stay) continue;
            evict(s, j, r, nd, t, stay);
            break;
        }
    }
}
