/* src/devices/devices.c - nodes from a node config or from this machine
 * (kiln/devices.h). NVML is reached only through dlopen (nvml.c) so that
 * kilnd runs, and builds, where the NVIDIA driver is absent. */
#include "kiln/devices.h"

#include <ctype.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
        free(v[j].mig_profile);
        free(v[j].links);
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
        for (size_t t = 0; t < n->n_taints; t++)
            kiln_taint_clear(&n->taints[t]);
        free(n->taints);
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
     * add_migs lists them and says so in the reason */
    unsigned cur = 0, pend = 0;
    if (nv->mig_mode && nv->mig_mode(h, &cur, &pend) == KILN__NVML_SUCCESS && cur == 1 &&
        !(dv->refused = strdup("MIG mode is enabled")))
        return false;
    return dv->type && dv->uuid && dv->model;
}

/* The profile of MIG handle h: from its name where the driver gives it
 * ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", R470 and later), else built from
 * its slices and memory as NVIDIA names it (kiln_devices_mig_type). False
 * when neither can be read. */
static bool mig_profile(kiln__nvml *nv, void *h, char *buf, size_t len)
{
    char nm[128] = "";
    const char *p;
    if (nv->name(h, nm, sizeof nm) == KILN__NVML_SUCCESS && (p = strstr(nm, " MIG ")) && p[5]) {
        snprintf(buf, len, "%s", p + 5);
        return true;
    }
    kiln__nvml_attributes a;
    if (!nv->attributes || nv->attributes(h, &a) != KILN__NVML_SUCCESS || !a.gpu_instance_slices)
        return false;
    unsigned gb = (unsigned)((a.memory_mb + 512) / 1024);
    if (a.compute_instance_slices && a.compute_instance_slices != a.gpu_instance_slices)
        snprintf(buf, len, "%uc.%ug.%ugb", a.compute_instance_slices, a.gpu_instance_slices, gb);
    else
        snprintf(buf, len, "%ug.%ugb", a.gpu_instance_slices, gb);
    return true;
}

/* The MIG instances of whole GPU devs[p] (in MIG mode), appended to v from
 * *k up to cap; the GPU itself is refused, with a reason naming what it
 * offers instead. False when out of memory. An instance whose UUID or
 * profile cannot be read is left out: CUDA could not be pointed at it. */
static bool add_migs(kiln__nvml *nv, kiln_device *v, size_t p, size_t *k, size_t cap)
{
    kiln_device *gpu = &v[p];
    void *h = NULL, *mh = NULL;
    unsigned max = 0, cur = 0, pend = 0;
    size_t first = *k;
    char prof[64], tb[96], eb[64];
    if (nv->by_index((unsigned)gpu->index, &h) != KILN__NVML_SUCCESS) return true;
    if (!nv->mig_mode || nv->mig_mode(h, &cur, &pend) != KILN__NVML_SUCCESS || cur != 1)
        return true;
    int rc =
        nv->mig_max && nv->mig_by_index ? nv->mig_max(h, &max) : KILN__NVML_ERROR_NOT_SUPPORTED;
    for (unsigned i = 0; rc == KILN__NVML_SUCCESS && i < max && *k < cap; i++) {
        if (nv->mig_by_index(h, i, &mh) != KILN__NVML_SUCCESS) continue; /* empty slot */
        char id[96] = "";
        if (nv->uuid(mh, id, sizeof id) != KILN__NVML_SUCCESS ||
            !mig_profile(nv, mh, prof, sizeof prof))
            continue;
        kiln_device *dv = &v[(*k)++];
        memset(dv, 0, sizeof *dv);
        dv->index = (int)(*k - 1);
        dv->parent = (int)p;
        dv->numa_node = gpu->numa_node;
        dv->uuid = strdup(id);
        dv->mig_profile = strdup(prof);
        dv->type = strdup(kiln_devices_mig_type(prof, tb, sizeof tb));
        if (gpu->model && asprintf(&dv->model, "%s MIG %s", gpu->model, prof) < 0) dv->model = NULL;
        kiln__nvml_memory m;
        if (nv->memory && nv->memory(mh, &m) == KILN__NVML_SUCCESS)
            dv->memory_gb = (double)m.total / (1024.0 * 1024.0 * 1024.0);
        if (nv->gpu_instance_id) nv->gpu_instance_id(mh, &dv->gpu_instance);
        if (nv->compute_instance_id) nv->compute_instance_id(mh, &dv->compute_instance);
        if (!dv->uuid || !dv->mig_profile || !dv->type || (gpu->model && !dv->model)) return false;
    }
    free(gpu->refused);
    gpu->refused = NULL;
    int n;
    if (*k > first)
        n = asprintf(&gpu->refused,
                     "MIG mode is enabled: its %zu MIG instances are handed out instead "
                     "(devices %zu to %zu); kiln never changes MIG settings",
                     *k - first, first, *k - 1);
    else
        n = asprintf(&gpu->refused,
                     "MIG mode is enabled and NVML lists no MIG instance on it (%s): a site "
                     "makes them (nvidia-smi mig -cgi PROFILES -C); kiln never changes MIG "
                     "settings",
                     rc == KILN__NVML_SUCCESS ? "every slot is empty"
                                              : kiln__nvml_error(nv, rc, eb, sizeof eb));
    if (n < 0) gpu->refused = NULL;
    return gpu->refused != NULL;
}

/* The topology of the whole GPUs v[0..nw) among all k devices: NVML's
 * common PCIe ancestor of every pair, and NVLinks counted by walking each
 * GPU's links: a link to a GPU counts for that pair (matched by PCI bus
 * id), a link to an NVSwitch counts for every pair as the fewer of the two
 * GPUs' switch links (HGX boards: all GPUs equidistant). NUMA nodes too.
 * Left NULL where NVML has no topology calls. False when out of memory. */
static bool read_topology(kiln__nvml *nv, kiln_device *v, size_t nw, size_t k)
{
    void *h[KILN_MAX_NODE_DEVICES] = {0};
    kiln__nvml_pci pci[KILN_MAX_NODE_DEVICES];
    int sw[KILN_MAX_NODE_DEVICES] = {0};
    if (!nv->topo_ancestor) return true;
    memset(pci, 0, sizeof pci);
    for (size_t i = 0; i < nw; i++) {
        if (nv->by_index((unsigned)v[i].index, &h[i]) != KILN__NVML_SUCCESS) h[i] = NULL;
        if (h[i] && nv->pci_info && nv->pci_info(h[i], &pci[i]) != KILN__NVML_SUCCESS)
            pci[i].bus_id[0] = '\0';
        unsigned numa = 0;
        if (h[i] && nv->numa_node && nv->numa_node(h[i], &numa) == KILN__NVML_SUCCESS)
            v[i].numa_node = (int)numa;
        if (!(v[i].links = calloc(k, sizeof *v[i].links))) return false;
        for (size_t j = 0; j < k; j++)
            v[i].links[j].level = -1;
    }
    for (size_t i = 0; i < nw; i++) {
        for (size_t j = 0; h[i] && j < nw; j++) {
            int level = -1;
            if (i == j)
                v[i].links[j].level = KILN_TOPO_INTERNAL;
            else if (h[j] && nv->topo_ancestor(h[i], h[j], &level) == KILN__NVML_SUCCESS)
                v[i].links[j].level = level;
        }
        for (unsigned l = 0; h[i] && nv->nvlink_state && l < KILN__NVML_NVLINK_MAX_LINKS; l++) {
            int active = 0, type = KILN__NVML_NVLINK_GPU;
            if (nv->nvlink_state(h[i], l, &active) != KILN__NVML_SUCCESS) break; /* no such link */
            if (active != 1) continue;
            if (nv->nvlink_remote_type && nv->nvlink_remote_type(h[i], l, &type) != 0) continue;
            if (type == KILN__NVML_NVLINK_SWITCH) {
                sw[i]++;
                continue;
            }
            kiln__nvml_pci r;
            if (type != KILN__NVML_NVLINK_GPU || !nv->nvlink_remote_pci ||
                nv->nvlink_remote_pci(h[i], l, &r) != KILN__NVML_SUCCESS)
                continue;
            for (size_t j = 0; j < nw; j++)
                if (j != i && pci[j].bus_id[0] && strcasecmp(pci[j].bus_id, r.bus_id) == 0)
                    v[i].links[j].nvlinks++;
        }
    }
    for (size_t i = 0; i < nw; i++)
        for (size_t j = 0; j < nw; j++)
            if (i != j && v[i].links) v[i].links[j].nvlinks += sw[i] < sw[j] ? sw[i] : sw[j];
    return true;
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
    /* room for MIG instances after the whole GPUs, up to the node's cap */
    v = calloc(KILN_MAX_NODE_DEVICES, sizeof *v);
    if (!v) {
        err = KILN_ENOMEM;
        goto out;
    }
    for (unsigned i = 0; i < cnt; i++) {
        v[k].parent = -1;
        v[k].numa_node = -1;
        if (!describe(&nv, i, &v[k++])) {
            err = KILN_ENOMEM;
            goto out;
        }
    }
    for (size_t p = 0; p < cnt; p++)
        if (v[p].refused && !add_migs(&nv, v, p, &k, KILN_MAX_NODE_DEVICES)) {
            err = KILN_ENOMEM;
            goto out;
        }
    if (!read_topology(&nv, v, cnt, k)) {
        err = KILN_ENOMEM;
        goto out;
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

/* nodes[i].taints: Kubernetes' node taints, each {key, value, effect}, a
 * key and effect pair at most once (as the API server requires). */
static kiln_err read_taints(const json_t *jt, size_t i, kiln_node *n, kiln_diag *d)
{
    char f[128];
    if (!jt || json_is_null(jt)) return KILN_OK;
    if (!json_is_array(jt) || json_array_size(jt) > KILN_MAX_NODE_TAINTS) {
        snprintf(f, sizeof f, "nodes[%zu].taints", i);
        kiln_diag_add(d, f, "must be a list of at most %d {key, value, effect}",
                      KILN_MAX_NODE_TAINTS);
        return KILN_OK;
    }
    if (json_array_size(jt) == 0) return KILN_OK;
    n->taints = calloc(json_array_size(jt), sizeof *n->taints);
    if (!n->taints) return KILN_ENOMEM;
    size_t j;
    json_t *e;
    json_array_foreach(jt, j, e)
    {
        snprintf(f, sizeof f, "nodes[%zu].taints[%zu]", i, j);
        if (!json_is_object(e)) {
            kiln_diag_add(d, f, "must be {key, value, effect}");
            continue;
        }
        const char *k;
        json_t *v;
        bool ok = true;
        json_object_foreach(e, k, v)
        {
            if (strcmp(k, "key") != 0 && strcmp(k, "value") != 0 && strcmp(k, "effect") != 0) {
                snprintf(f, sizeof f, "nodes[%zu].taints[%zu].%.40s", i, j, k);
                kiln_diag_add(d, f, "unknown field: a taint has key, value and effect");
                ok = false;
            } else if (!json_is_string(v)) {
                snprintf(f, sizeof f, "nodes[%zu].taints[%zu].%s", i, j, k);
                kiln_diag_add(d, f, "must be a string");
                ok = false;
            }
        }
        if (!ok) continue;
        const char *key = json_string_value(json_object_get(e, "key"));
        const char *val = json_string_value(json_object_get(e, "value"));
        const char *eff = json_string_value(json_object_get(e, "effect"));
        if (!key || !*key || strlen(key) > 316) {
            snprintf(f, sizeof f, "nodes[%zu].taints[%zu].key", i, j);
            kiln_diag_add(d, f, "required: a label key (1 to 316 characters)");
            continue;
        }
        if (!kiln_taint_effect_valid(eff)) {
            snprintf(f, sizeof f, "nodes[%zu].taints[%zu].effect", i, j);
            kiln_diag_add(d, f, "'%.64s' is not NoSchedule, PreferNoSchedule or NoExecute",
                          eff ? eff : "");
            continue;
        }
        bool twice = false;
        for (size_t t = 0; t < n->n_taints && !twice; t++)
            twice = strcmp(n->taints[t].key, key) == 0 && strcmp(n->taints[t].effect, eff) == 0;
        if (twice) {
            snprintf(f, sizeof f, "nodes[%zu].taints[%zu]", i, j);
            kiln_diag_add(d, f, "taint %s:%s is given twice (a key and effect pair at most once)",
                          key, eff);
            continue;
        }
        kiln_taint *t = &n->taints[n->n_taints++];
        t->key = strdup(key);
        t->value = val && *val ? strdup(val) : NULL;
        t->effect = strdup(eff);
        if (!t->key || !t->effect || (val && *val && !t->value)) return KILN_ENOMEM;
    }
    return KILN_OK;
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

bool kiln_node_resolve(const char *host, char *out, size_t len, char *why, size_t whylen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *pick = NULL;
    bool ok = false;
    int rc = host && *host ? getaddrinfo(host, NULL, &hints, &res) : EAI_NONAME;
    /* "localhost" and "*.localhost" are the loopback whatever the resolver
     * says (RFC 6761 6.3): a chroot without /etc/hosts resolves neither */
    size_t hl = host ? strlen(host) : 0;
    if (rc != 0 && hl &&
        (strcasecmp(host, "localhost") == 0 ||
         (hl > 10 && strcasecmp(host + hl - 10, ".localhost") == 0))) {
        snprintf(out, len, "127.0.0.1");
        return true;
    }
    if (rc != 0) {
        snprintf(why, whylen, "'%.200s' does not resolve (%s)", host ? host : "",
                 rc == EAI_SYSTEM ? "system error" : gai_strerror(rc));
        goto out;
    }
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET || (!pick && a->ai_family == AF_INET6))
            if (!pick || pick->ai_family != AF_INET) pick = a;
    if (!pick || getnameinfo(pick->ai_addr, pick->ai_addrlen, out, (socklen_t)len, NULL, 0,
                             NI_NUMERICHOST) != 0) {
        snprintf(why, whylen, "'%.200s' resolves to no IPv4 or IPv6 address", host);
        goto out;
    }
    ok = true;
out:
    if (res) freeaddrinfo(res);
    return ok;
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
        /* the address resolved here, once: every replica's peers get it */
        char ip[64], rwhy[320]; /* 64: an IPv6 literal is at most 45 */
        if (!kiln_node_resolve(addr ? addr : "127.0.0.1", ip, sizeof ip, rwhy, sizeof rwhy)) {
            snprintf(f, sizeof f, "nodes[%zu].address", i);
            kiln_diag_add(d, f, "%s: give an IP address or a name this machine resolves", rwhy);
            ip[0] = '\0';
        }
        n->name = strdup(name);
        n->address = strdup(ip);
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
        if (read_taints(json_object_get(jn, "taints"), i, n, d) != KILN_OK) {
            err = KILN_ENOMEM;
            goto out;
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
                dev->parent = -1;
                dev->numa_node = -1;
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
