/* src/api/api_nodes.c - kiln's nodes: capacity, devices, cordon and drain. */
#include <ctype.h>
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

/* Who holds which device (api_int.h), from the runtime records the
 * supervisor writes: the scheduler itself only knows busy or free. */
json_t *kiln__api_gpu_holders(kilnd *d, const kiln_api_auth *a)
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
        char name[256], key[200], hpc[200];
        snprintf(name, sizeof name, "projects/%s/jobs/%s", v[k]->project, v[k]->job->job_id);
        snprintf(hpc, sizeof hpc, "%s/%s", v[k]->project, v[k]->job->job_id);
        json_array_foreach(json_object_get(rt, "replicas"), ri, rep)
        {
            const char *node = json_string_value(json_object_get(rep, "node"));
            const char *task = json_string_value(json_object_get(rep, "task"));
            json_array_foreach(json_object_get(rep, "gpus"), gi, g)
            {
                snprintf(key, sizeof key, "%.150s/%lld", node ? node : "",
                         (long long)json_integer_value(g));
                json_object_set_new(h, key,
                                    json_pack("{s:s,s:s,s:s}", "job", name, "hpcJob", hpc, "task",
                                              task ? task : ""));
            }
        }
        json_decref(rt);
    }
out:
    kiln_job_records_free(v, n);
    return h;
}

/* A device's model, health and telemetry (discovered GPUs): "model",
 * "memoryGb", "health" (OK | FAILED | REFUSED), "reason" (why it is out of
 * service, or a warning), "lastXid" and its "xidMeaning", and the newest
 * sample ("utilization" %, "memoryUsedGb", "temperatureC", "powerW").
 * Called under d->mu (the scheduler's state). */
static void device_health(kilnd *d, size_t node, size_t j, json_t *dj)
{
    const kiln_device *dv = &d->cluster.nodes[node].devs[j];
    kiln_gpu_status st;
    bool have = node == 0 && d->gpus && kiln_gpu_watch_get(d->gpus, j, &st);
    bool failed = kiln_sched_device_failed(d->sched, node, j);
    const char *health = dv->refused                     ? "REFUSED"
                         : failed && have && st.checking ? "CHECKING"
                         : failed                        ? "FAILED"
                                                         : "OK";
    if (dv->model) json_object_set_new(dj, "model", json_string(dv->model));
    if (dv->share) { /* an MPS share: of which GPU, and its part */
        const kiln_device *pg = &d->cluster.nodes[node].devs[dv->parent];
        json_object_set_new(dj, "share", json_integer(dv->share));
        json_object_set_new(dj, "shares", json_integer(dv->n_shares));
        json_object_set_new(dj, "parentIndex", json_integer(pg->index));
        json_object_set_new(dj, "parentUuid", json_string(pg->uuid));
        json_object_set_new(dj, "activeThreadPercentage", json_integer(100 / dv->n_shares));
    }
    if (dv->mig_profile) { /* a MIG instance: what it is cut from */
        const kiln_device *pg = &d->cluster.nodes[node].devs[dv->parent];
        char rb[96];
        json_object_set_new(dj, "migProfile", json_string(dv->mig_profile));
        json_object_set_new(dj, "resource",
                            json_string(kiln_devices_mig_resource(dv->mig_profile, rb, sizeof rb)));
        json_object_set_new(dj, "parentIndex", json_integer(pg->index));
        json_object_set_new(dj, "parentUuid", json_string(pg->uuid));
        json_object_set_new(dj, "gpuInstanceId", json_integer(dv->gpu_instance));
        json_object_set_new(dj, "computeInstanceId", json_integer(dv->compute_instance));
    }
    if (dv->memory_gb > 0) json_object_set_new(dj, "memoryGb", json_real(dv->memory_gb));
    json_object_set_new(dj, "health", json_string(health));
    if (dv->refused)
        json_object_set_new(dj, "reason", json_string(dv->refused));
    else if (have && st.why[0])
        json_object_set_new(dj, "reason", json_string(st.why));
    if (!have) return;
    if (st.check[0]) { /* the last GPU check before work (kilnd --gpu-check) */
        json_object_set_new(dj, "gpuCheck", json_string(st.check));
        json_object_set_new(dj, "gpuCheckMs", json_integer(st.check_ms));
    }
    if (st.last_xid) {
        json_object_set_new(dj, "lastXid", json_integer(st.last_xid));
        json_object_set_new(dj, "xidMeaning", json_string(kiln_devices_xid_meaning(st.last_xid)));
    }
    if (!st.at_ns) return;
    json_t *t = json_object();
    if (!t) return;
    if (st.have_util) json_object_set_new(t, "utilization", json_integer(st.util_gpu));
    if (st.have_memory)
        json_object_set_new(t, "memoryUsedGb", json_real((double)st.fb_used / 1073741824.0));
    if (st.have_temp) json_object_set_new(t, "temperatureC", json_integer(st.temp_c));
    if (st.have_power) json_object_set_new(t, "powerW", json_real(st.power_w));
    json_object_set_new(dj, "telemetry", t);
}

/* The GPU topology NVML reported (kiln nodes describe NODE --topology):
 * {"gpus": [index...], "matrix": [["X", "NV18", "SYS"...]...] (the cells of
 * nvidia-smi topo -m), "numaAffinity": ["0", "N/A"...]}; NULL when unknown. */
static json_t *topology_json(const kiln_node *n)
{
    json_t *gpus = json_array(), *rows = json_array(), *numa = json_array();
    char b[16];
    for (size_t a = 0; a < n->n_devs; a++) {
        if (!n->devs[a].links) continue;
        json_t *row = json_array();
        for (size_t c = 0; c < n->n_devs; c++) {
            if (!n->devs[c].links) continue;
            json_array_append_new(
                row, json_string(
                         a == c ? "X" : kiln_devices_link_name(&n->devs[a].links[c], b, sizeof b)));
        }
        snprintf(b, sizeof b, "%d", n->devs[a].numa_node);
        json_array_append_new(gpus, json_integer(n->devs[a].index));
        json_array_append_new(rows, row);
        json_array_append_new(numa, json_string(n->devs[a].numa_node >= 0 ? b : "N/A"));
    }
    if (!json_array_size(gpus)) {
        json_decref(gpus);
        json_decref(rows);
        json_decref(numa);
        return NULL;
    }
    return json_pack("{s:o,s:o,s:o}", "gpus", gpus, "matrix", rows, "numaAffinity", numa);
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
        json_object_set_new(alloc, dv->type,
                            json_integer(a + kiln_sched_device_free(d->sched, i, j)));
        if (dv->mig_profile) { /* and by the device plugin's name, as Kubernetes shows it */
            char rb[96];
            const char *r = kiln_devices_mig_resource(dv->mig_profile, rb, sizeof rb);
            json_object_set_new(cap, r, json_integer(c + 1));
            json_object_set_new(alloc, r, json_integer(a + kiln_sched_device_free(d->sched, i, j)));
        }
        json_t *dj = json_pack("{s:i,s:s,s:s,s:b,s:b}", "index", dv->index, "type", dv->type,
                               "uuid", dv->uuid, "simulated", dv->simulated, "assigned", busy);
        char key[200];
        snprintf(key, sizeof key, "%.150s/%d", n->name, dv->index);
        json_t *who = busy ? json_object_get(held, key) : NULL;
        if (dj && who) json_object_update(dj, who); /* + job, hpcJob, task */
        if (dj) device_health(d, i, j, dj);
        if (dj) json_array_append_new(devs, dj);
        any_sim |= dv->simulated;
    }
    json_t *labels = json_object();
    for (size_t k = 0; labels && k < n->labels.n; k++)
        json_object_set_new(labels, n->labels.keys[k], json_string(n->labels.vals[k]));
    json_t *o = json_pack(
        "{s:s,s:s,s:i,s:f,s:b,s:b,s:b,s:o,s:o,s:o,s:o}", "name", n->name, "address", n->address,
        "cpus", n->cpus, "memoryGb", n->memory_gb, "hardResources", n->hard_resources, "cordoned",
        kiln_sched_cordoned(d->sched, i), "simulatedAccelerators", any_sim, "labels",
        labels ? labels : json_object(), "capacity", cap, "allocatable", alloc, "devices", devs);
    /* the config's taints, as a Kubernetes Node's spec.taints (listed only
     * where there are any, so an untainted node reads as before) */
    json_t *taints = n->n_taints ? json_array() : NULL;
    for (size_t k = 0; taints && k < n->n_taints; k++) {
        const kiln_taint *t = &n->taints[k];
        json_t *tj = json_pack("{s:s,s:s}", "key", t->key, "effect", t->effect);
        if (tj && t->value) json_object_set_new(tj, "value", json_string(t->value));
        if (tj) json_array_append_new(taints, tj);
    }
    if (o && taints)
        json_object_set_new(o, "taints", taints);
    else
        json_decref(taints);
    json_t *topo = topology_json(n);
    if (o && topo) json_object_set_new(o, "topology", topo);
    return o;
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
        json_t *arr = kiln_slurm_nodes(&d->slurm_cfg, NULL, why, sizeof why);
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
    if (colon && a->project && (strcmp(a->project, "*") != 0 || a->role != KILN_AUTH_EDITOR))
        return send_error(c, 403, NULL, "draining nodes needs an editor token for project '*'");
    json_t *arr = kiln_slurm_nodes(&d->slurm_cfg, name, why, sizeof why);
    if (!arr) return send_error(c, 503, NULL, "%s", why);
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return send_error(c, 404, NULL, "Node %s not found", name);
    }
    if (colon) {
        json_decref(arr);
        if (kiln_slurm_drain(&d->slurm_cfg, name, drain, why, sizeof why) != KILN_OK)
            return send_error(c, 502, NULL, "%s", why);
        /* kiln's own supervisor moves the node's replicas, as on its own
         * nodes (Slurm places nothing new there) */
        long idx = kiln_cluster_find(&d->cluster, name);
        if (idx >= 0) {
            pthread_mutex_lock(&d->mu);
            kiln_sched_set_cordon(d->sched, (size_t)idx, drain);
            if (drain) d->drain_pending[idx] = true;
            pthread_mutex_unlock(&d->mu);
            kiln_doorbell_ring(&d->wake);
        }
        arr = kiln_slurm_nodes(&d->slurm_cfg, name, why, sizeof why);
        if (!arr || json_array_size(arr) == 0) {
            json_decref(arr);
            return send_error(c, 503, NULL, "%s", why);
        }
    }
    json_t *o = json_incref(json_array_get(arr, 0));
    json_decref(arr);
    return send_json(c, 200, o);
}

/* GET /v1/nodes/NODE:gpuHistory: each GPU's newest samples (the GPU watch
 * keeps KILN_GPU_HISTORY), for the dashboard's charts:
 * {"gpus": [{"index", "uuid", "model", "points": [[unix seconds, util %,
 * memory used GiB], ...]}]}; -1 marks a value NVML did not give. */
static json_t *gpu_history(kilnd *d, size_t node)
{
    const kiln_node *n = &d->cluster.nodes[node];
    json_t *gpus = json_array();
    kiln_gpu_point *pts = malloc(KILN_GPU_HISTORY * sizeof *pts);
    for (size_t j = 0; gpus && pts && j < n->n_devs; j++) {
        size_t k = node == 0 ? kiln_gpu_watch_history(d->gpus, j, pts, KILN_GPU_HISTORY) : 0;
        json_t *arr = json_array();
        for (size_t q = 0; arr && q < k; q++)
            json_array_append_new(arr,
                                  json_pack("[f,f,f]", (double)pts[q].at_ns / 1e9,
                                            (double)pts[q].util_gpu, (double)pts[q].fb_used_gb));
        json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:o}", "index", n->devs[j].index,
                                              "uuid", n->devs[j].uuid, "model",
                                              n->devs[j].model ? n->devs[j].model : n->devs[j].type,
                                              "points", arr ? arr : json_array()));
    }
    free(pts);
    return json_pack("{s:o}", "gpus", gpus ? gpus : json_array());
}

/* POST /v1/nodes/NODE/gpus/N:uncordon (kiln nodes uncordon NODE --gpu N):
 * a GPU its health took out of service is handed out again. One refused at
 * discovery stays refused: 409 with the reason; a GPU in MIG mode with
 * instances stays refused whole, and its instances come back. */
static enum MHD_Result gpu_method(kilnd *d, struct MHD_Connection *c, const char *method,
                                  size_t node, const char *rest, const kiln_api_auth *a)
{
    const kiln_node *n = &d->cluster.nodes[node];
    char *end = NULL;
    if (strncmp(rest, "/gpus/", 6) != 0 || !isdigit((unsigned char)rest[6]))
        return send_error(c, 404, NULL, "unknown node resource '%s'", rest);
    long gi = strtol(rest + 6, &end, 10);
    if (!end || strcmp(end, ":uncordon") != 0)
        return send_error(c, 404, NULL, "unknown GPU method '%s' (POST .../gpus/N:uncordon)",
                          end ? end : "");
    if (strcmp(method, "POST") != 0) return send_error(c, 405, NULL, "use POST");
    if (a->project && (strcmp(a->project, "*") != 0 || a->role != KILN_AUTH_EDITOR))
        return send_error(c, 403, NULL, "uncordoning GPUs needs an editor token for project '*'");
    long j = -1;
    for (size_t k = 0; k < n->n_devs && j < 0; k++)
        if (n->devs[k].index == gi) j = (long)k;
    if (j < 0) return send_error(c, 404, NULL, "node %s has no GPU %ld", n->name, gi);
    /* a GPU in MIG mode is refused whole, but its health still decides its
     * instances': uncordoning it brings back the instances it took out */
    bool migs = false, shares = false;
    for (size_t k = 0; k < n->n_devs; k++) {
        migs |= n->devs[k].mig_profile && n->devs[k].parent == (int)j;
        shares |= n->devs[k].share && n->devs[k].parent == (int)j;
    }
    if (n->devs[j].share)
        return send_error(c, 409, NULL,
                          "device %ld of node %s is a share of GPU %d: uncordon that GPU", gi,
                          n->name, n->devs[n->devs[j].parent].index);
    if (n->devs[j].refused && !migs && !shares)
        return send_error(c, 409, NULL, "GPU %ld of node %s is refused: %s", gi, n->name,
                          n->devs[j].refused);
    /* with a GPU check (kilnd --gpu-check) it is back when the check passes,
     * never run on a GPU a replica still holds */
    if (node == 0 && (!n->devs[j].refused || shares) && kiln_gpu_watch_has_check(d->gpus)) {
        pthread_mutex_lock(&d->mu);
        bool busy = kiln_sched_device_busy(d->sched, node, (size_t)j);
        for (size_t k = 0; k < n->n_devs; k++) /* a shared GPU: any share held */
            busy |= n->devs[k].share && n->devs[k].parent == (int)j &&
                    kiln_sched_device_busy(d->sched, node, k);
        if (busy) {
            pthread_mutex_unlock(&d->mu);
            return send_error(c, 409, NULL,
                              "GPU %ld of node %s is still held by a replica; uncordon it once "
                              "the replica has stopped (a GPU check never runs beside one)",
                              gi, n->name);
        }
        /* queued and out of the free devices under one lock: no replica is
         * placed on it (or its shares) before the check has run */
        if (kiln_gpu_watch_check(d->gpus, (size_t)j)) {
            kiln_sched_set_device_failed(d->sched, node, (size_t)j, true);
            for (size_t k = 0; k < n->n_devs; k++)
                if (n->devs[k].share && n->devs[k].parent == (int)j)
                    kiln_sched_set_device_failed(d->sched, node, k, true);
        }
        json_t *o = node_json(d, node, NULL);
        pthread_mutex_unlock(&d->mu);
        if (o) json_object_set_new(o, "gpuCheckQueued", json_integer(gi));
        kiln_doorbell_ring(&d->wake);
        return send_json(c, 202, o);
    }
    if (node == 0) kiln_gpu_watch_clear(d->gpus, (size_t)j);
    pthread_mutex_lock(&d->mu);
    kiln_sched_set_device_failed(d->sched, node, (size_t)j, false);
    json_t *o = node_json(d, node, NULL);
    pthread_mutex_unlock(&d->mu);
    kiln_doorbell_ring(&d->wake);
    return send_json(c, 200, o);
}

enum MHD_Result kiln__api_nodes(kilnd *d, struct MHD_Connection *c, const char *method,
                                const char *rest, const kiln_api_auth *a)
{
    if (d->slurm.on) return slurm_nodes(d, c, method, rest, a);
    if (!*rest) {
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
        json_t *arr = json_array(), *held = kiln__api_gpu_holders(d, a);
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < d->cluster.n; i++)
            json_array_append_new(arr, node_json(d, i, held));
        pthread_mutex_unlock(&d->mu);
        json_decref(held);
        return send_json(c, 200, json_pack("{s:o}", "nodes", arr));
    }
    char name[128];
    const char *colon = strchr(rest, ':'), *slash = strchr(rest, '/');
    size_t nl = slash && (!colon || slash < colon) ? (size_t)(slash - rest)
                : colon                            ? (size_t)(colon - rest)
                                                   : strlen(rest);
    if (nl >= sizeof name) nl = sizeof name - 1;
    memcpy(name, rest, nl);
    name[nl] = '\0';
    long idx = kiln_cluster_find(&d->cluster, name);
    if (idx < 0) return send_error(c, 404, NULL, "Node %s not found", name);
    if (slash && (!colon || slash < colon))
        return gpu_method(d, c, method, (size_t)idx, rest + nl, a);
    if (colon && strcmp(colon, ":gpuHistory") == 0) {
        if (strcmp(method, "GET") != 0) return send_error(c, 405, NULL, "use GET");
        return send_json(c, 200, gpu_history(d, (size_t)idx));
    }
    if (!colon) {
        json_t *held = kiln__api_gpu_holders(d, a);
        pthread_mutex_lock(&d->mu);
        json_t *o = node_json(d, (size_t)idx, held);
        pthread_mutex_unlock(&d->mu);
        json_decref(held);
        return send_json(c, 200, o);
    }
    bool drain = strcmp(colon, ":drain") == 0, uncordon = strcmp(colon, ":uncordon") == 0;
    if ((!drain && !uncordon) || strcmp(method, "POST") != 0)
        return send_error(c, 404, NULL, "unknown node method '%s'", colon);
    if (a->project && (strcmp(a->project, "*") != 0 || a->role != KILN_AUTH_EDITOR))
        return send_error(c, 403, NULL, "draining nodes needs an editor token for project '*'");
    if (kiln_store_node_set_cordon(d->store, name, drain) != KILN_OK)
        return send_error(c, 500, NULL, "cannot record the cordon");
    pthread_mutex_lock(&d->mu);
    kiln_sched_set_cordon(d->sched, (size_t)idx, drain);
    if (drain) d->drain_pending[idx] = true;
    json_t *o = node_json(d, (size_t)idx, NULL);
    pthread_mutex_unlock(&d->mu);
    kiln_doorbell_ring(&d->wake);
    return send_json(c, 200, o);
}
