/* src/api/nodes.c - kiln's nodes: capacity, devices, cordon and drain. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "exec/slurm/slurm.h"
#include "util/utf8.h"

/* ---------- nodes ---------- */

/* Who holds which device: {"NODE/INDEX": {"job": "projects/P/jobs/J", "task":
 * T}} from the runtime records of the active jobs this caller may see (the
 * supervisor writes them; the scheduler itself only knows busy or free). */
static json_t *holders(kilnd *d, const kiln_api_auth *a)
{
    kiln_job_record **v = NULL;
    size_t n = 0;
    json_t *h = json_object();
    unsigned mask =
        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING);
    if (!h || kiln_store_jobs_by_state(d->store, mask, &v, &n) != KILN_OK) goto out;
    for (size_t k = 0; k < n; k++) {
        if (!v[k]->runtime || !kiln__api_sees(a, v[k]->project)) continue;
        json_t *rt = json_loads(v[k]->runtime, 0, NULL), *rep, *g;
        size_t ri, gi;
        char name[256], key[200];
        snprintf(name, sizeof name, "projects/%s/jobs/%s", v[k]->project, v[k]->job->job_id);
        json_array_foreach(json_object_get(rt, "replicas"), ri, rep)
        {
            const char *node = json_string_value(json_object_get(rep, "node"));
            const char *task = json_string_value(json_object_get(rep, "task"));
            json_array_foreach(json_object_get(rep, "gpus"), gi, g)
            {
                snprintf(key, sizeof key, "%.150s/%lld", node ? node : "",
                         (long long)json_integer_value(g));
                json_object_set_new(h, key,
                                    json_pack("{s:s,s:s}", "job", name, "task", task ? task : ""));
            }
        }
        json_decref(rt);
    }
out:
    kiln_job_records_free(v, n);
    return h;
}

static json_t *node_json(kilnd *d, size_t i, json_t *held)
{
    const kiln_node *n = &d->cluster.nodes[i];
    json_t *cap = json_object(), *alloc = json_object(), *devs = json_array();
    bool any_sim = false;
    int used_cpus;
    double used_mem;
    /* CPUs and memory as Kubernetes shows them; allocatable counts what placed
     * replicas' machine types asked for (soft limits may overcommit it to 0) */
    kiln_sched_usage(d->sched, i, &used_cpus, &used_mem);
    json_object_set_new(cap, "cpu", json_integer(n->cpus));
    json_object_set_new(cap, "memoryGb", json_real(n->memory_gb));
    json_object_set_new(alloc, "cpu", json_integer(used_cpus < n->cpus ? n->cpus - used_cpus : 0));
    json_object_set_new(alloc, "memoryGb",
                        json_real(used_mem < n->memory_gb ? n->memory_gb - used_mem : 0.0));
    for (size_t j = 0; j < n->n_devs; j++) {
        const kiln_device *dv = &n->devs[j];
        bool busy = kiln_sched_device_busy(d->sched, i, j);
        json_int_t c = json_integer_value(json_object_get(cap, dv->type));
        json_object_set_new(cap, dv->type, json_integer(c + 1));
        json_int_t a = json_integer_value(json_object_get(alloc, dv->type));
        json_object_set_new(alloc, dv->type, json_integer(a + !busy));
        json_t *dj = json_pack("{s:i,s:s,s:s,s:b,s:b}", "index", dv->index, "type", dv->type,
                               "uuid", dv->uuid, "simulated", dv->simulated, "assigned", busy);
        char key[200];
        snprintf(key, sizeof key, "%.150s/%d", n->name, dv->index);
        json_t *who = busy ? json_object_get(held, key) : NULL;
        if (dj && who) json_object_update(dj, who); /* + job, task */
        if (dj) json_array_append_new(devs, dj);
        any_sim |= dv->simulated;
    }
    json_t *labels = json_object();
    for (size_t k = 0; labels && k < n->labels.n; k++)
        json_object_set_new(labels, n->labels.keys[k], json_string(n->labels.vals[k]));
    return json_pack("{s:s,s:s,s:i,s:f,s:b,s:b,s:b,s:o,s:o,s:o,s:o}", "name", n->name, "address",
                     n->address, "cpus", n->cpus, "memoryGb", n->memory_gb, "hardResources",
                     n->hard_resources, "cordoned", kiln_sched_cordoned(d->sched, i),
                     "simulatedAccelerators", any_sim, "labels", labels ? labels : json_object(),
                     "capacity", cap, "allocatable", alloc, "devices", devs);
}

/* --executor slurm: the partition's Slurm nodes (sinfo --json); drain and
 * uncordon are Slurm's (scontrol update state=drain|resume); on a drain
 * the supervisor then moves the node's kiln jobs (docs/slurm.md). */
static enum MHD_Result slurm_nodes(kilnd *d, struct MHD_Connection *c, const char *method,
                                   const char *rest, const kiln_api_auth *a)
{
    char why[512], name[128];
    if (!*rest) {
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
        json_t *arr = kiln_slurm_nodes(d, NULL, why, sizeof why);
        if (!arr) return send_error(c, 503, NULL, "%s", why);
        return send_json(c, 200, json_pack("{s:o}", "nodes", arr));
    }
    const char *colon = strchr(rest, ':');
    size_t nl = colon ? (size_t)(colon - rest) : strlen(rest);
    if (nl >= sizeof name) nl = sizeof name - 1;
    memcpy(name, rest, nl);
    name[nl] = '\0';
    bool drain = colon && strcmp(colon, ":drain") == 0;
    bool uncordon = colon && strcmp(colon, ":uncordon") == 0;
    if (colon && ((!drain && !uncordon) || strcmp(method, "POST") != 0))
        return send_error(c, 404, NULL, "unknown node method '%s'", colon);
    if (colon && a->project && (strcmp(a->project, "*") != 0 || a->role != KILND_EDITOR))
        return send_error(c, 403, NULL, "draining nodes needs an editor token for project '*'");
    json_t *arr = kiln_slurm_nodes(d, name, why, sizeof why);
    if (!arr) return send_error(c, 503, NULL, "%s", why);
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return send_error(c, 404, NULL, "Node %s not found", name);
    }
    if (colon) {
        json_decref(arr);
        if (kiln_slurm_drain(d, name, drain, why, sizeof why) != KILN_OK)
            return send_error(c, 502, NULL, "%s", why);
        arr = kiln_slurm_nodes(d, name, why, sizeof why);
        if (!arr || json_array_size(arr) == 0) {
            json_decref(arr);
            return send_error(c, 503, NULL, "%s", why);
        }
    }
    json_t *o = json_incref(json_array_get(arr, 0));
    json_decref(arr);
    return send_json(c, 200, o);
}

enum MHD_Result kiln__api_nodes(kilnd *d, struct MHD_Connection *c, const char *method,
                                const char *rest, const kiln_api_auth *a)
{
    if (d->slurm.on) return slurm_nodes(d, c, method, rest, a);
    if (!*rest) {
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
        json_t *arr = json_array(), *held = holders(d, a);
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < d->cluster.n; i++)
            json_array_append_new(arr, node_json(d, i, held));
        pthread_mutex_unlock(&d->mu);
        json_decref(held);
        return send_json(c, 200, json_pack("{s:o}", "nodes", arr));
    }
    char name[128];
    const char *colon = strchr(rest, ':');
    size_t nl = colon ? (size_t)(colon - rest) : strlen(rest);
    if (nl >= sizeof name) nl = sizeof name - 1;
    memcpy(name, rest, nl);
    name[nl] = '\0';
    long idx = kiln_cluster_find(&d->cluster, name);
    if (idx < 0) return send_error(c, 404, NULL, "Node %s not found", name);
    if (!colon) {
        json_t *held = holders(d, a);
        pthread_mutex_lock(&d->mu);
        json_t *o = node_json(d, (size_t)idx, held);
        pthread_mutex_unlock(&d->mu);
        json_decref(held);
        return send_json(c, 200, o);
    }
    bool drain = strcmp(colon, ":drain") == 0, uncordon = strcmp(colon, ":uncordon") == 0;
    if ((!drain && !uncordon) || strcmp(method, "POST") != 0)
        return send_error(c, 404, NULL, "unknown node method '%s'", colon);
    if (a->project && (strcmp(a->project, "*") != 0 || a->role != KILND_EDITOR))
        return send_error(c, 403, NULL, "draining nodes needs an editor token for project '*'");
    if (kiln_store_node_set_cordon(d->store, name, drain) != KILN_OK)
        return send_error(c, 500, NULL, "cannot record the cordon");
    pthread_mutex_lock(&d->mu);
    kiln_sched_set_cordon(d->sched, (size_t)idx, drain);
    if (drain) d->drain_pending[idx] = true;
    json_t *o = node_json(d, (size_t)idx, NULL);
    pthread_mutex_unlock(&d->mu);
    kilnd_wake(d);
    return send_json(c, 200, o);
}
