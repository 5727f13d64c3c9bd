/* tfconfig.c - the all-reduce group from TF_CONFIG (platform facts §6).
 *
 * {"cluster": {"chief"|"master": ["h:p"], "worker": [..], "ps": [..]},
 *  "task": {"type": "worker", "index": 1}, ...}
 *
 * The group is chief-or-master then workers in index order; ps tasks serve
 * variables and evaluators evaluate checkpoints, so neither is in it. Other
 * top-level keys ("job", "environment", "rpc_layer") are not ours to check. */
#include "collective/coll_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_err fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kiln_err fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return KILN_EINVAL;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return KILN_EINVAL;
}

static kiln_err oom(char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return KILN_ENOMEM;
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "something else";
}

/* cluster.<role> must be absent or an array of non-empty strings. */
static kiln_err check_role(const json_t *cluster, const char *role, size_t *n, char *err,
                           size_t errlen)
{
    const json_t *a = json_object_get(cluster, role);
    size_t i;
    const json_t *v;

    *n = 0;
    if (!a) return KILN_OK;
    if (!json_is_array(a))
        return fail(err, errlen,
                    "TF_CONFIG.cluster.%s: expected an array of \"host:port\" "
                    "strings, got %s",
                    role, jtype(a));
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return fail(err, errlen,
                        "TF_CONFIG.cluster.%s[%zu]: expected a non-empty \"host:port\" string, "
                        "got %s",
                        role, i, json_is_string(v) ? "an empty string" : jtype(v));
    }
    *n = json_array_size(a);
    return KILN_OK;
}

static void free_hosts(char **hosts, int n)
{
    for (int i = 0; hosts && i < n; i++)
        free(hosts[i]);
    free(hosts);
}

void kiln_tf_group_free(kiln_tf_group *g)
{
    if (!g) return;
    free_hosts(g->hosts, g->world_size);
    free_hosts(g->ps_hosts, g->num_ps);
    memset(g, 0, sizeof *g);
    g->rank = -1;
}

/* A copy of cluster.<role>[0..n) (checked by check_role) into out[at..at+n). */
static kiln_err copy_hosts(const json_t *cluster, const char *role, size_t n, char **out, size_t at,
                           char *err, size_t errlen)
{
    const json_t *a = json_object_get(cluster, role);
    for (size_t i = 0; i < n; i++)
        if (!(out[at + i] = strdup(json_string_value(json_array_get(a, i)))))
            return oom(err, errlen);
    return KILN_OK;
}

kiln_err kiln_tf_config_parse(const char *text, kiln_tf_group *g, char *err, size_t errlen)
{
    json_t *root = NULL;
    json_error_t je;
    const json_t *cluster, *task, *type, *index;
    const char *lead = NULL, *t;
    size_t n_chief, n_master, n_worker, n_ps, n_lead;
    char *canon = NULL;
    kiln_err e = KILN_OK;
    json_int_t idx = 0;

    memset(g, 0, sizeof *g);
    g->rank = -1;
    if (err && errlen) err[0] = '\0';
    if (!text || !*text) {
        if (err && errlen) snprintf(err, errlen, "TF_CONFIG is not set: running as one replica");
        return KILN_ENOTFOUND;
    }
    if (!(root = json_loads(text, JSON_REJECT_DUPLICATES, &je))) {
        e = fail(err, errlen, "TF_CONFIG is not valid JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        goto out;
    }
    if (!json_is_object(root)) {
        e = fail(err, errlen, "TF_CONFIG: expected a JSON object, got %s", jtype(root));
        goto out;
    }
    cluster = json_object_get(root, "cluster");
    if (!cluster || !json_is_object(cluster)) {
        e = fail(err, errlen, "TF_CONFIG.cluster: %s", cluster ? "expected an object" : "missing");
        goto out;
    }
    if ((e = check_role(cluster, "chief", &n_chief, err, errlen)) ||
        (e = check_role(cluster, "master", &n_master, err, errlen)) ||
        (e = check_role(cluster, "worker", &n_worker, err, errlen)) ||
        (e = check_role(cluster, "ps", &n_ps, err, errlen)))
        goto out;
    if (n_chief && n_master) {
        e = fail(err, errlen,
                 "TF_CONFIG.cluster: has both \"chief\" and \"master\"; the "
                 "platform writes one or the other (useChiefInTfConfig picks chief)");
        goto out;
    }
    lead = n_chief ? "chief" : n_master ? "master" : NULL;
    n_lead = n_chief + n_master;
    if (n_lead > 1) {
        e = fail(err, errlen, "TF_CONFIG.cluster.%s: has %zu tasks; there is exactly one", lead,
                 n_lead);
        goto out;
    }
    if (n_lead + n_worker == 0) {
        e = fail(err, errlen,
                 "TF_CONFIG.cluster: no chief, master or worker tasks, so there is "
                 "no all-reduce group");
        goto out;
    }
    if (n_lead + n_worker > 65536) {
        e = fail(err, errlen, "TF_CONFIG.cluster: %zu replicas is more than kiln supports (65536)",
                 n_lead + n_worker);
        goto out;
    }

    task = json_object_get(root, "task");
    if (!task || !json_is_object(task)) {
        e = fail(err, errlen, "TF_CONFIG.task: %s", task ? "expected an object" : "missing");
        goto out;
    }
    type = json_object_get(task, "type");
    if (!type || !json_is_string(type)) {
        e = fail(err, errlen, "TF_CONFIG.task.type: %s", type ? "expected a string" : "missing");
        goto out;
    }
    t = json_string_value(type);
    index = json_object_get(task, "index");
    if (index && !json_is_integer(index)) {
        e = fail(err, errlen, "TF_CONFIG.task.index: expected an integer, got %s", jtype(index));
        goto out;
    }
    if (index) idx = json_integer_value(index); /* TensorFlow's default is 0 */
    if (idx < 0 || idx > 65535) {
        e = fail(err, errlen, "TF_CONFIG.task.index: %lld is out of range", (long long)idx);
        goto out;
    }

    if (strcmp(t, "chief") == 0 || strcmp(t, "master") == 0) {
        if (!lead || strcmp(t, lead) != 0) {
            e = fail(err, errlen, "TF_CONFIG.task.type: \"%s\" but the cluster has %s%s%s", t,
                     lead ? "a \"" : "no chief or master", lead ? lead : "", lead ? "\"" : "");
            goto out;
        }
        if (idx != 0) {
            e = fail(err, errlen, "TF_CONFIG.task.index: %lld, but there is one %s (index 0)",
                     (long long)idx, t);
            goto out;
        }
        g->rank = 0;
    } else if (strcmp(t, "worker") == 0) {
        if ((size_t)idx >= n_worker) {
            e = fail(err, errlen,
                     "TF_CONFIG.task.index: worker %lld, but the cluster has %zu "
                     "worker(s)",
                     (long long)idx, n_worker);
            goto out;
        }
        g->rank = (int)(n_lead + (size_t)idx);
    } else if (strcmp(t, "ps") == 0) {
        if ((size_t)idx >= n_ps) {
            e = fail(err, errlen,
                     "TF_CONFIG.task.index: ps %lld, but the cluster has %zu ps "
                     "task(s)",
                     (long long)idx, n_ps);
            goto out;
        }
    } else if (strcmp(t, "evaluator") != 0) {
        e = fail(err, errlen,
                 "TF_CONFIG.task.type: \"%s\" is not one of chief, master, worker, "
                 "ps, evaluator",
                 t);
        goto out;
    }
    snprintf(g->task_type, sizeof g->task_type, "%s", t);
    g->task_index = (int)idx;
    if (!(g->hosts = calloc(n_lead + n_worker, sizeof *g->hosts)) ||
        (n_ps && !(g->ps_hosts = calloc(n_ps, sizeof *g->ps_hosts)))) {
        e = oom(err, errlen);
        goto out;
    }
    g->world_size = (int)(n_lead + n_worker);
    g->num_ps = (int)n_ps;
    if ((lead && (e = copy_hosts(cluster, lead, n_lead, g->hosts, 0, err, errlen))) ||
        (e = copy_hosts(cluster, "worker", n_worker, g->hosts, n_lead, err, errlen)) ||
        (e = copy_hosts(cluster, "ps", n_ps, g->ps_hosts, 0, err, errlen)))
        goto out;
    /* Every replica of a job sees the same cluster, and the platform gives
     * each job its own addresses: a hash of the canonical cluster text is a
     * rendezvous key all replicas agree on without talking. */
    if (!(canon = json_dumps(cluster, JSON_SORT_KEYS | JSON_COMPACT))) {
        e = oom(err, errlen);
        goto out;
    }
    snprintf(g->key, sizeof g->key, "tf%016llx",
             (unsigned long long)kiln__fnv1a64(canon, strlen(canon), KILN__FNV_OFFSET));
out:
    free(canon);
    json_decref(root);
    if (e != KILN_OK) kiln_tf_group_free(g);
    return e;
}
