/* src/devices/devices.c - nodes from a node config or from this machine
 * (kiln/devices.h). NVML is reached only through dlopen (nvml.c) so that
 * kilnd runs, and builds, where the NVIDIA driver is absent. */
#include "kiln/devices.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/nvml_int.h"
#include "kiln/submit.h" /* kiln_read_input */

void kiln_devices_free(kiln_device *v, size_t n)
{
    for (size_t j = 0; v && j < n; j++) {
        free(v[j].type);
        free(v[j].uuid);
        free(v[j].model);
        free(v[j].refused);
    }
    free(v);
}

void kiln_cluster_free(kiln_cluster *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        kiln_node *n = &c->nodes[i];
        free(n->name);
        free(n->address);
        kiln_devices_free(n->devs, n->n_devs);
        kiln_map_clear(&n->labels);
    }
    free(c->nodes);
    c->nodes = NULL;
    c->n = 0;
}

long kiln_cluster_find(const kiln_cluster *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->nodes[i].name, name) == 0) return (long)i;
    return -1;
}

/* One GPU as NVML describes it; false when out of memory. A GPU whose
 * handle or name cannot be read is kept, typed as such, and refused: it is
 * there, and listing it says so better than leaving it out. */
static bool describe(kiln__nvml *nv, unsigned i, kiln_device *dv)
{
    void *h = NULL;
    char nm[96] = "", id[96] = "", tb[96], eb[64];
    int rc = nv->by_index(i, &h);
    if (rc == KILN__NVML_SUCCESS) rc = nv->name(h, nm, sizeof nm);
    if (rc == KILN__NVML_SUCCESS) rc = nv->uuid(h, id, sizeof id);
    dv->index = (int)i;
    if (rc != KILN__NVML_SUCCESS) {
        if (!id[0]) snprintf(id, sizeof id, "GPU-UNREADABLE-%u", i);
        dv->type = strdup("NVIDIA_GPU");
        if (asprintf(&dv->refused, "NVML cannot read it (%s)",
                     kiln__nvml_error(nv, rc, eb, sizeof eb)) < 0)
            dv->refused = NULL;
        dv->uuid = strdup(id);
        return dv->type && dv->uuid && dv->refused;
    }
    dv->type = strdup(kiln_devices_type_of(nm, tb, sizeof tb));
    dv->uuid = strdup(id);
    dv->model = strdup(nm);
    kiln__nvml_memory m;
    if (nv->memory && nv->memory(h, &m) == KILN__NVML_SUCCESS)
        dv->memory_gb = (double)m.total / (1024.0 * 1024.0 * 1024.0);
    /* MIG: the whole GPU is not usable as one while its instances exist;
     * kiln hands out whole GPUs only, so it refuses the GPU and says why */
    unsigned cur = 0, pend = 0;
    if (nv->mig_mode && nv->mig_mode(h, &cur, &pend) == KILN__NVML_SUCCESS && cur == 1 &&
        asprintf(&dv->refused,
                 "MIG mode is enabled: kiln hands out whole GPUs only and does not offer MIG "
                 "instances (turn MIG off with nvidia-smi -i %u -mig 0 and reset the GPU)",
                 i) < 0)
        return false;
    return dv->type && dv->uuid && dv->model;
}

kiln_err kiln_devices_discover(const char *lib, kiln_device **out, size_t *n, char *note,
                               size_t notelen)
{
    kiln__nvml nv;
    kiln_device *v = NULL;
    unsigned cnt = 0;
    size_t k = 0;
    kiln_err err = KILN_OK;
    char why[600], eb[64];

    *out = NULL;
    *n = 0;
    if (kiln__nvml_open(lib, &nv, why, sizeof why) != KILN_OK) {
        if (note) snprintf(note, notelen, "no GPUs: %s", why);
        return KILN_OK; /* no driver: no GPUs */
    }
    int rc = nv.count(&cnt);
    if (rc != KILN__NVML_SUCCESS || cnt == 0) {
        if (note)
            snprintf(note, notelen, "no GPUs: %s: nvmlDeviceGetCount_v2: %s", nv.path,
                     rc ? kiln__nvml_error(&nv, rc, eb, sizeof eb) : "0 devices");
        goto out;
    }
    if (cnt > KILN_MAX_NODE_DEVICES) cnt = KILN_MAX_NODE_DEVICES;
    v = calloc(cnt, sizeof *v);
    if (!v) {
        err = KILN_ENOMEM;
        goto out;
    }
    for (unsigned i = 0; i < cnt; i++) {
        if (!describe(&nv, i, &v[k++])) {
            err = KILN_ENOMEM;
            goto out;
        }
    }
    if (note) {
        size_t o =
            (size_t)snprintf(note, notelen, "%zu GPU%s through %s:", k, k == 1 ? "" : "s", nv.path);
        for (size_t i = 0; i < k && o < notelen; i++)
            o += (size_t)snprintf(note + o, notelen - o, "%s %d %s (%s)%s", i ? ";" : "",
                                  v[i].index, v[i].type, v[i].model ? v[i].model : "?",
                                  v[i].refused ? ", refused" : "");
    }
out:
    kiln__nvml_close(&nv);
    if (err != KILN_OK) {
        kiln_devices_free(v, k);
        v = NULL;
        k = 0;
    }
    *out = v;
    *n = k;
    return err;
}

/* The labels every node carries (see kiln/devices.h). */
static kiln_err implicit_labels(kiln_node *n)
{
    if (kiln_map_set(&n->labels, "kubernetes.io/hostname", n->name) != KILN_OK ||
        kiln_map_set(&n->labels, "kiln.dev/node", n->name) != KILN_OK)
        return KILN_ENOMEM;
    /* the GPUs it hands out: a refused one (MIG) does not make a node mixed */
    const char *type = NULL, *model = NULL;
    bool mixed = false, mixed_model = false;
    for (size_t j = 0; j < n->n_devs; j++) {
        const kiln_device *dv = &n->devs[j];
        if (dv->refused) continue;
        if (type && strcmp(dv->type, type) != 0) mixed = true;
        if (!type) type = dv->type;
        if (model && (!dv->model || strcmp(dv->model, model) != 0)) mixed_model = true;
        if (!model) model = dv->model;
    }
    if (mixed) type = NULL;
    if (mixed_model) model = NULL;
    char pl[128];
    if (model && !kiln_map_get(&n->labels, "nvidia.com/gpu.product") &&
        kiln_map_set(&n->labels, "nvidia.com/gpu.product",
                     kiln_devices_product_label(model, pl, sizeof pl)) != KILN_OK)
        return KILN_ENOMEM;
    if (!type || kiln_map_get(&n->labels, "cloud.google.com/gke-accelerator")) return KILN_OK;
    /* NVIDIA_TESLA_V100 -> nvidia-tesla-v100 */
    char v[96];
    size_t k = 0;
    for (; type[k] && k < sizeof v - 1; k++)
        v[k] = type[k] == '_' ? '-' : (char)tolower((unsigned char)type[k]);
    v[k] = '\0';
    return kiln_map_set(&n->labels, "cloud.google.com/gke-accelerator", v);
}

static void host_resources(int *cpus, double *mem_gb)
{
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *cpus = nc > 0 ? (int)nc : 1;
    /* GB to one decimal, as machine types are described */
    *mem_gb =
        (pages > 0 && psz > 0) ? (double)(long)((double)pages * (double)psz / 1e8) / 10.0 : 1.0;
}

static kiln_err this_machine(const char *nvml_library, kiln_cluster *out, char *note,
                             size_t notelen)
{
    kiln_node *n = calloc(1, sizeof *n);
    char host[256] = "localhost";

    if (!n) return KILN_ENOMEM;
    gethostname(host, sizeof host - 1);
    n->name = strdup(host);
    n->address = strdup("127.0.0.1");
    host_resources(&n->cpus, &n->memory_gb);
    kiln_err err = kiln_devices_discover(nvml_library, &n->devs, &n->n_devs, note, notelen);
    out->nodes = n;
    out->n = 1;
    if (err == KILN_OK && (!n->name || !n->address)) err = KILN_ENOMEM;
    if (err == KILN_OK) err = implicit_labels(n);
    if (err != KILN_OK) kiln_cluster_free(out);
    return err;
}

kiln_err kiln_cluster_from_json(const char *buf, size_t len, kiln_cluster *out, kiln_diag *d)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    kiln_err err = KILN_EINVAL;
    char f[96];

    memset(out, 0, sizeof *out);
    if (!root) {
        kiln_diag_add(d, "", "line %d: %s", je.line, je.text);
        goto out;
    }
    json_t *nodes = json_object_get(root, "nodes");
    if (!json_is_array(nodes) || json_array_size(nodes) == 0 ||
        json_array_size(nodes) > KILN_MAX_NODES) {
        kiln_diag_add(d, "nodes", "must be a list of 1 to %d nodes", KILN_MAX_NODES);
        goto out;
    }
    out->nodes = calloc(json_array_size(nodes), sizeof *out->nodes);
    if (!out->nodes) {
        err = KILN_ENOMEM;
        goto out;
    }
    int hcpus;
    double hmem;
    host_resources(&hcpus, &hmem);
    size_t i;
    json_t *jn;
    json_array_foreach(nodes, i, jn)
    {
        kiln_node *n = &out->nodes[out->n++];
        const char *name = json_string_value(json_object_get(jn, "name"));
        const char *addr = json_string_value(json_object_get(jn, "address"));
        json_t *cpus = json_object_get(jn, "cpus"), *mem = json_object_get(jn, "memoryGb");
        snprintf(f, sizeof f, "nodes[%zu].name", i);
        if (!name || !*name || strlen(name) > 63) {
            kiln_diag_add(d, f, "required: a name of 1 to 63 characters");
            continue;
        }
        if (kiln_cluster_find(&(kiln_cluster){out->nodes, out->n - 1}, name) >= 0)
            kiln_diag_add(d, f, "node '%s' is declared twice", name);
        n->name = strdup(name);
        n->address = strdup(addr ? addr : "127.0.0.1");
        n->cpus = json_is_integer(cpus) ? (int)json_integer_value(cpus) : hcpus;
        n->memory_gb = json_is_number(mem) ? json_number_value(mem) : hmem;
        n->hard_resources = json_is_true(json_object_get(jn, "hardResources"));
        if (!n->name || !n->address) {
            err = KILN_ENOMEM;
            goto out;
        }
        if (n->cpus <= 0 || n->memory_gb <= 0) {
            snprintf(f, sizeof f, "nodes[%zu]", i);
            kiln_diag_add(d, f, "cpus and memoryGb must be positive");
        }
        json_t *labels = json_object_get(jn, "labels"), *lv;
        const char *lk;
        if (labels && !json_is_object(labels)) {
            snprintf(f, sizeof f, "nodes[%zu].labels", i);
            kiln_diag_add(d, f, "must be a map of strings");
        }
        json_object_foreach(labels, lk, lv)
        {
            if (!json_is_string(lv)) {
                snprintf(f, sizeof f, "nodes[%zu].labels.%.40s", i, lk);
                kiln_diag_add(d, f, "must be a string");
                continue;
            }
            if (kiln_map_set(&n->labels, lk, json_string_value(lv)) != KILN_OK) {
                err = KILN_ENOMEM;
                goto out;
            }
        }
        json_t *accs = json_object_get(jn, "accelerators"), *ja;
        size_t j;
        if (accs && !json_is_array(accs)) {
            snprintf(f, sizeof f, "nodes[%zu].accelerators", i);
            kiln_diag_add(d, f, "must be a list of {type, count}");
            continue;
        }
        json_array_foreach(accs, j, ja)
        {
            const char *type = json_string_value(json_object_get(ja, "type"));
            json_int_t cnt = json_integer_value(json_object_get(ja, "count"));
            snprintf(f, sizeof f, "nodes[%zu].accelerators[%zu]", i, j);
            if (!type || !*type || cnt <= 0 || n->n_devs + (size_t)cnt > KILN_MAX_NODE_DEVICES) {
                kiln_diag_add(d, f, "needs a type and a count from 1 to %d per node",
                              KILN_MAX_NODE_DEVICES);
                continue;
            }
            kiln_device *nd = realloc(n->devs, (n->n_devs + (size_t)cnt) * sizeof *nd);
            if (!nd) {
                err = KILN_ENOMEM;
                goto out;
            }
            n->devs = nd;
            for (json_int_t c = 0; c < cnt; c++) {
                kiln_device *dev = &n->devs[n->n_devs];
                memset(dev, 0, sizeof *dev);
                dev->index = (int)n->n_devs;
                dev->simulated = true;
                dev->type = strdup(type);
                if (asprintf(&dev->uuid, "SIMULATED-%s-%d", name, dev->index) < 0) dev->uuid = NULL;
                n->n_devs++;
                if (!dev->type || !dev->uuid) {
                    err = KILN_ENOMEM;
                    goto out;
                }
            }
        }
    }
    for (size_t k = 0; !d->n && k < out->n; k++)
        if (implicit_labels(&out->nodes[k]) != KILN_OK) {
            err = KILN_ENOMEM;
            goto out;
        }
    err = d->n ? KILN_EINVAL : KILN_OK;
out:
    json_decref(root);
    if (err != KILN_OK) kiln_cluster_free(out);
    return err;
}

kiln_err kiln_cluster_load(const char *path, const char *nvml_library, kiln_cluster *out,
                           kiln_diag *d, char *note, size_t notelen)
{
    char *buf = NULL;
    size_t len = 0;

    memset(out, 0, sizeof *out);
    if (note && notelen) note[0] = '\0';
    if (!path) return this_machine(nvml_library, out, note, notelen);
    if (note) snprintf(note, notelen, "declared in %s (simulated)", path);
    kiln_err err = kiln_read_input(path, "--node-config", &buf, &len, d);
    if (err != KILN_OK) return err;
    err = kiln_cluster_from_json(buf, len, out, d);
    free(buf);
    return err;
}
