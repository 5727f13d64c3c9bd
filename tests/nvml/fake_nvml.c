/* tests/nvml/fake_nvml.c - a stand-in for libnvidia-ml.so.1: the part of
 * NVML's C API that kilnd calls (src/devices/nvml_int.h), answering from a
 * state file the test writes, so that discovery, health and telemetry run
 * on machines without a GPU. kilnd loads it through KILN_NVML_LIBRARY (or
 * --nvml-library); it reads the file named by KILN_FAKE_NVML_STATE at every
 * call, so a test changes a GPU by rewriting the file (write a temporary
 * file and rename it over, so that no call reads half of it).
 *
 * The file: one "INDEX.KEY=VALUE" per line (a GPU exists when it has a
 * name), and "xid=INDEX:CODE" lines, each an Xid event delivered once, to
 * event sets registered before the line was written ('#' starts a comment):
 *   0.name=NVIDIA H100 80GB HBM3     nvmlDeviceGetName
 *   0.uuid=GPU-0f...                 nvmlDeviceGetUUID (default GPU-FAKE-<index>)
 *   0.fbtotal=81559                  MiB (default 81559); 0.fbused=MiB (default 0)
 *   0.util=87  0.memutil=40          percent (default 0)
 *   0.temp=35  0.power=312.5         degrees C, watts (defaults 30, 70)
 *   0.energy=123456                  mJ (default: grows 1000 a second, as a real counter)
 *   0.mig=1                          MIG mode on (nvmlDeviceGetMigMode)
 *   0.mig.devices=1g.10gb,1g.10gb,3g.40gb  the MIG instances the site made, in
 *                                    slots 0.. (nvmlDeviceGetMigDeviceHandleByIndex);
 *                                    a profile reads [<C>c.]<G>g.<M>gb[+me], and
 *                                    the instance has M GiB, G GPU slices, C (else G)
 *                                    compute slices, GPU instance id slot+1
 *   0.mig.1.uuid=MIG-...             its UUID (default MIG-FAKE-<gpu>-<slot>)
 *   0.mig.1.fbused=MiB               its memory in use (default 0)
 *   0.mig.1.empty=1                  the slot is empty (NVML_ERROR_NOT_FOUND)
 *   0.lost=1                         every call on it: NVML_ERROR_GPU_IS_LOST
 *   0.remap_failure=1  0.remap_pending=1  0.ecc=N (uncorrectable, volatile)
 *   topo.0.1=PIX                     the pair's common ancestor (PIX, PXB, PHB, NODE, SYS;
 *                                    nvmlDeviceGetTopologyCommonAncestor; default PHB)
 *   nvlink.0.1=4                     NVLinks between two GPUs (nvmlDeviceGetNvLinkState,
 *                                    ...RemotePciInfo_v2, ...RemoteDeviceType)
 *   0.nvswitch=18                    GPU 0's NVLinks to NVSwitches
 *   0.numa=1                         nvmlDeviceGetNumaNodeId (default: NOT_SUPPORTED)
 *   events=0                         nvmlDeviceRegisterEvents: NOT_SUPPORTED
 *   xid=0:79                         an Xid 79 on GPU 0
 *   xid=1/3:94                       an Xid 94 of GPU 1's MIG GPU instance 3
 * A missing file (or variable) is a machine whose driver is not loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS  64
#define MAX_MIG   7  /* nvmlDeviceGetMaxMigDeviceCount on H100/H200 */
#define MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS */

/* NVML's return codes, types and constants (nvml.h's values) */
enum {
    SUCCESS = 0,
    ERROR_UNINITIALIZED = 1,
    ERROR_INVALID_ARGUMENT = 2,
    ERROR_NOT_SUPPORTED = 3,
    ERROR_NOT_FOUND = 6,
    ERROR_INSUFFICIENT_SIZE = 7,
    ERROR_DRIVER_NOT_LOADED = 9,
    ERROR_TIMEOUT = 10,
    ERROR_GPU_IS_LOST = 15,
};
#define EVENT_XID 0x0000000000000008ULL

typedef struct memory {
    unsigned long long total, free, used;
} memory;
typedef struct util {
    unsigned int gpu, memory;
} util;
typedef struct event_data {
    void *device;
    unsigned long long type, data;
    unsigned int gpu_instance, compute_instance;
} event_data;

typedef struct attributes { /* nvmlDeviceAttributes_t */
    unsigned int sm, shared_ce, shared_dec, shared_enc, shared_jpeg, shared_ofa;
    unsigned int gi_slices, ci_slices;
    unsigned long long memory_mb;
} attributes;

typedef struct mig { /* one MIG instance (a slot of its GPU) */
    char profile[32], uuid[96];
    unsigned gi_slices, ci_slices;
    unsigned long long fb_total_mib, fb_used_mib;
    int empty;
} mig;

typedef struct gpu {
    int index;
    mig m[MAX_MIG];
    int n_mig;          /* slots listed in INDEX.mig.devices */
    int nvswitch, numa; /* numa -1: not supported */
    char name[96], uuid[96];
    unsigned long long fb_total_mib, fb_used_mib, energy_mj, ecc;
    unsigned util, memutil, temp, mig, lost, remap_failure, remap_pending;
    double power_w;
    int has_energy;
} gpu;

typedef struct state {
    gpu g[MAX_GPUS];
    int n;                                          /* 1 + the highest index with a name */
    int events;                                     /* 0: registration not supported */
    unsigned char topo[MAX_GPUS][MAX_GPUS];         /* common ancestor, 0: the default */
    unsigned char nvlink[MAX_GPUS][MAX_GPUS];       /* links between two GPUs */
    int xid_gpu[256], xid_inst[256], xid_code[256]; /* xid_inst -1: the whole GPU */
    int n_xid;
} state;

static int inited;
/* What a handle points to: a GPU's index and, for a MIG device, its slot. */
typedef struct handle {
    int index, slot; /* slot -1: the whole GPU */
} handle;
static handle handles[MAX_GPUS];
static handle mig_handles[MAX_GPUS][MAX_MIG];

/* A profile name -> slices and memory: "1g.10gb", "1c.3g.40gb", "1g.10gb+me". */
static int parse_profile(mig *m, const char *p)
{
    unsigned c = 0, g = 0, mem = 0;
    char rest[16] = "";
    snprintf(m->profile, sizeof m->profile, "%s", p);
    if (sscanf(p, "%uc.%ug.%ugb%15s", &c, &g, &mem, rest) >= 3 ||
        (c = 0, sscanf(p, "%ug.%ugb%15s", &g, &mem, rest) >= 2)) {
        m->gi_slices = g;
        m->ci_slices = c ? c : g;
        m->fb_total_mib = (unsigned long long)mem * 1024;
        return rest[0] == '\0' || strcmp(rest, "+me") == 0;
    }
    return 0;
}

static void parse_migs(gpu *g, char *list)
{
    g->n_mig = 0;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && g->n_mig < MAX_MIG;
         tok = strtok_r(NULL, ",", &save)) {
        mig *m = &g->m[g->n_mig];
        if (!parse_profile(m, tok)) continue;
        g->n_mig++;
    }
}

typedef struct event_set {
    int registered[MAX_GPUS];
    int delivered; /* xid lines seen when registered, then delivered */
} event_set;

static int load(state *s)
{
    const char *path = getenv("KILN_FAKE_NVML_STATE");
    memset(s, 0, sizeof *s);
    s->events = 1;
    for (int i = 0; i < MAX_GPUS; i++) {
        s->g[i].index = i;
        s->g[i].fb_total_mib = 81559;
        s->g[i].temp = 30;
        s->g[i].power_w = 70;
        s->g[i].numa = -1;
    }
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return ERROR_DRIVER_NOT_LOADED;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || !line[0]) continue;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *k = line, *v = eq + 1;
        if (strcmp(k, "events") == 0) {
            s->events = atoi(v);
            continue;
        }
        int a, b;
        if (sscanf(k, "topo.%d.%d", &a, &b) == 2 && a >= 0 && b >= 0 && a < MAX_GPUS &&
            b < MAX_GPUS) {
            static const char *const lv[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
            for (int q = 0; q < 5; q++)
                if (strcmp(v, lv[q]) == 0)
                    s->topo[a][b] = s->topo[b][a] = (unsigned char)(10 + 10 * q);
            continue;
        }
        if (sscanf(k, "nvlink.%d.%d", &a, &b) == 2 && a >= 0 && b >= 0 && a < MAX_GPUS &&
            b < MAX_GPUS) {
            s->nvlink[a][b] = s->nvlink[b][a] = (unsigned char)atoi(v);
            continue;
        }
        if (strcmp(k, "xid") == 0) {
            int gi, inst = -1, code;
            if ((sscanf(v, "%d/%d:%d", &gi, &inst, &code) == 3 ||
                 (inst = -1, sscanf(v, "%d:%d", &gi, &code) == 2)) &&
                s->n_xid < 256) {
                s->xid_gpu[s->n_xid] = gi;
                s->xid_inst[s->n_xid] = inst;
                s->xid_code[s->n_xid++] = code;
            }
            continue;
        }
        char *dot = strchr(k, '.');
        int i = atoi(k);
        if (!dot || i < 0 || i >= MAX_GPUS) continue;
        gpu *g = &s->g[i];
        const char *key = dot + 1;
        int slot;
        char sub[16];
        if (strcmp(key, "mig.devices") == 0) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            parse_migs(g, list);
            continue;
        }
        if (sscanf(key, "mig.%d.%15s", &slot, sub) == 2 && slot >= 0 && slot < MAX_MIG) {
            mig *m = &g->m[slot];
            if (strcmp(sub, "uuid") == 0)
                snprintf(m->uuid, sizeof m->uuid, "%s", v);
            else if (strcmp(sub, "fbused") == 0)
                m->fb_used_mib = strtoull(v, NULL, 10);
            else if (strcmp(sub, "empty") == 0)
                m->empty = atoi(v);
            continue;
        }
        if (strcmp(key, "name") == 0) {
            snprintf(g->name, sizeof g->name, "%s", v);
            if (i + 1 > s->n) s->n = i + 1;
        } else if (strcmp(key, "uuid") == 0)
            snprintf(g->uuid, sizeof g->uuid, "%s", v);
        else if (strcmp(key, "fbtotal") == 0)
            g->fb_total_mib = strtoull(v, NULL, 10);
        else if (strcmp(key, "fbused") == 0)
            g->fb_used_mib = strtoull(v, NULL, 10);
        else if (strcmp(key, "util") == 0)
            g->util = (unsigned)atoi(v);
        else if (strcmp(key, "memutil") == 0)
            g->memutil = (unsigned)atoi(v);
        else if (strcmp(key, "temp") == 0)
            g->temp = (unsigned)atoi(v);
        else if (strcmp(key, "power") == 0)
            g->power_w = atof(v);
        else if (strcmp(key, "energy") == 0) {
            g->energy_mj = strtoull(v, NULL, 10);
            g->has_energy = 1;
        } else if (strcmp(key, "nvswitch") == 0)
            g->nvswitch = atoi(v);
        else if (strcmp(key, "numa") == 0)
            g->numa = atoi(v);
        else if (strcmp(key, "mig") == 0)
            g->mig = (unsigned)atoi(v);
        else if (strcmp(key, "lost") == 0)
            g->lost = (unsigned)atoi(v);
        else if (strcmp(key, "remap_failure") == 0)
            g->remap_failure = (unsigned)atoi(v);
        else if (strcmp(key, "remap_pending") == 0)
            g->remap_pending = (unsigned)atoi(v);
        else if (strcmp(key, "ecc") == 0)
            g->ecc = strtoull(v, NULL, 10);
    }
    fclose(f);
    for (int i = 0; i < s->n; i++) {
        if (!s->g[i].uuid[0]) snprintf(s->g[i].uuid, sizeof s->g[i].uuid, "GPU-FAKE-%d", i);
        for (int k = 0; k < MAX_MIG; k++)
            if (!s->g[i].m[k].uuid[0])
                snprintf(s->g[i].m[k].uuid, sizeof s->g[i].m[k].uuid, "MIG-FAKE-%d-%d", i, k);
    }
    return SUCCESS;
}

/* The state, GPU and (for a MIG handle) instance of handle h: SUCCESS, or
 * what NVML would say. A MIG instance of a lost GPU is lost too. */
static int any_dev(void *h, state *s, gpu **g, mig **m)
{
    if (!inited) return ERROR_UNINITIALIZED;
    if (!h) return ERROR_INVALID_ARGUMENT;
    int rc = load(s);
    if (rc != SUCCESS) return rc;
    const handle *hd = h;
    int i = hd->index;
    if (i < 0 || i >= s->n || !s->g[i].name[0]) return ERROR_GPU_IS_LOST;
    *g = &s->g[i];
    *m = NULL;
    if (hd->slot >= 0) {
        if (!(*g)->mig || hd->slot >= (*g)->n_mig || (*g)->m[hd->slot].empty)
            return ERROR_INVALID_ARGUMENT; /* the instance is gone: a stale handle */
        *m = &(*g)->m[hd->slot];
    }
    return (*g)->lost ? ERROR_GPU_IS_LOST : SUCCESS;
}

/* A whole GPU's calls: on a MIG handle NVML answers NOT_SUPPORTED for the
 * telemetry that exists only for the whole board. */
static int dev(void *h, state *s, gpu **g)
{
    mig *m;
    int rc = any_dev(h, s, g, &m);
    return rc == SUCCESS && m ? ERROR_NOT_SUPPORTED : rc;
}

/* A MIG instance's calls (its GPU instance id, its parent): on a whole
 * GPU's handle NVML answers INVALID_ARGUMENT. */
static int mig_dev(void *h, state *s, gpu **g, mig **m)
{
    int rc = any_dev(h, s, g, m);
    return rc == SUCCESS && !*m ? ERROR_INVALID_ARGUMENT : rc;
}

static int copy(char *dst, unsigned len, const char *src)
{
    if (strlen(src) + 1 > len) return ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return SUCCESS;
}

int nvmlInit_v2(void)
{
    state s;
    int rc = load(&s);
    if (rc == SUCCESS) inited++;
    return rc;
}

int nvmlShutdown(void)
{
    if (!inited) return ERROR_UNINITIALIZED;
    inited--;
    return SUCCESS;
}

const char *nvmlErrorString(int rc)
{
    switch (rc) {
    case SUCCESS:
        return "Success";
    case ERROR_UNINITIALIZED:
        return "Uninitialized";
    case ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case ERROR_NOT_FOUND:
        return "Not Found";
    case ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case ERROR_TIMEOUT:
        return "Timeout";
    case ERROR_GPU_IS_LOST:
        return "GPU is lost";
    default:
        return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    return copy(buf, len, "580.0-fake");
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
    state s;
    if (!inited) return ERROR_UNINITIALIZED;
    int rc = load(&s);
    if (rc == SUCCESS) *n = (unsigned)s.n;
    return rc;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
    state s;
    if (!inited) return ERROR_UNINITIALIZED;
    int rc = load(&s);
    if (rc != SUCCESS) return rc;
    if (i >= (unsigned)s.n || !s.g[i].name[0]) return ERROR_INVALID_ARGUMENT;
    handles[i].index = (int)i;
    handles[i].slot = -1;
    *h = &handles[i];
    return s.g[i].lost ? ERROR_GPU_IS_LOST : SUCCESS;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned len)
{
    state s;
    gpu *g;
    mig *m;
    char nm[160];
    int rc = any_dev(h, &s, &g, &m);
    if (rc != SUCCESS) return rc;
    /* a MIG device's name, as drivers since R470 give it */
    if (m) snprintf(nm, sizeof nm, "%s MIG %s", g->name, m->profile);
    return copy(buf, len, m ? nm : g->name);
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned len)
{
    state s;
    gpu *g;
    mig *m;
    int rc = any_dev(h, &s, &g, &m);
    return rc == SUCCESS ? copy(buf, len, m ? m->uuid : g->uuid) : rc;
}

int nvmlDeviceGetMemoryInfo(void *h, memory *mem)
{
    state s;
    gpu *g;
    mig *m;
    int rc = any_dev(h, &s, &g, &m);
    if (rc != SUCCESS) return rc;
    mem->total = (m ? m->fb_total_mib : g->fb_total_mib) << 20;
    mem->used = (m ? m->fb_used_mib : g->fb_used_mib) << 20;
    mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
    return SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    *count = g->mig ? MAX_MIG : 0;
    return SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned i, void **out)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    if (!g->mig || i >= MAX_MIG) return ERROR_INVALID_ARGUMENT;
    if ((int)i >= g->n_mig || g->m[i].empty) return ERROR_NOT_FOUND;
    mig_handles[g->index][i].index = g->index;
    mig_handles[g->index][i].slot = (int)i;
    *out = &mig_handles[g->index][i];
    return SUCCESS;
}

int nvmlDeviceIsMigDeviceHandle(void *h, unsigned *is_mig)
{
    if (!inited) return ERROR_UNINITIALIZED;
    if (!h) return ERROR_INVALID_ARGUMENT;
    *is_mig = ((handle *)h)->slot >= 0;
    return SUCCESS;
}

int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **parent)
{
    state s;
    gpu *g;
    mig *m;
    int rc = mig_dev(h, &s, &g, &m);
    if (rc != SUCCESS) return rc;
    handles[g->index].index = g->index;
    handles[g->index].slot = -1;
    *parent = &handles[g->index];
    return SUCCESS;
}

/* A MIG handle's ids, what both getters below answer: its GPU instance's
 * (slot + 1, as in the file's comment) and its compute instance's (0: one
 * compute instance a GPU instance). gi or ci may be NULL. */
static int mig_ids(void *h, unsigned *gi, unsigned *ci)
{
    state s;
    gpu *g;
    mig *m;
    int rc = mig_dev(h, &s, &g, &m);
    if (rc != SUCCESS) return rc;
    if (gi) *gi = (unsigned)(m - g->m) + 1;
    if (ci) *ci = 0;
    return SUCCESS;
}

int nvmlDeviceGetGpuInstanceId(void *h, unsigned *id)
{
    return mig_ids(h, id, NULL);
}

int nvmlDeviceGetComputeInstanceId(void *h, unsigned *id)
{
    return mig_ids(h, NULL, id);
}

int nvmlDeviceGetAttributes_v2(void *h, attributes *a)
{
    state s;
    gpu *g;
    mig *m;
    int rc = any_dev(h, &s, &g, &m);
    if (rc != SUCCESS) return rc;
    memset(a, 0, sizeof *a);
    if (!m) { /* the whole GPU: 7 slices' worth, its own memory */
        a->sm = 132, a->gi_slices = a->ci_slices = 7, a->memory_mb = g->fb_total_mib;
        return SUCCESS;
    }
    a->sm = 16 * m->ci_slices; /* illustrative, as NVIDIA's own mock */
    a->gi_slices = m->gi_slices;
    a->ci_slices = m->ci_slices;
    a->memory_mb = m->fb_total_mib;
    a->shared_ce = a->gi_slices;
    return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *h, util *u)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    u->gpu = g->util;
    u->memory = g->memutil;
    return SUCCESS;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    if (sensor != 0) return ERROR_INVALID_ARGUMENT;
    *t = g->temp;
    return SUCCESS;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    *mw = (unsigned)(g->power_w * 1000.0);
    return SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    /* unless the test fixes it, energy grows with time like a real counter */
    *mj = g->has_energy ? g->energy_mj : (unsigned long long)time(NULL) % 100000000ULL * 1000ULL;
    return SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    *n = type == 1 && counter == 0 ? g->ecc : 0;
    return SUCCESS;
}

int nvmlDeviceGetRemappedRows(void *h, unsigned *corr, unsigned *unc, unsigned *pending,
                              unsigned *failure)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    *corr = 0;
    *unc = g->remap_failure ? 1 : 0;
    *pending = g->remap_pending;
    *failure = g->remap_failure;
    return SUCCESS;
}

int nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    *current = *pending = g->mig;
    return SUCCESS;
}

/* ---------- topology ---------- */

typedef struct pci_info { /* nvmlPciInfo_t */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_info;

/* GPU i's bus id, or an NVSwitch's (i -1) */
static void bus_id(int i, pci_info *p)
{
    memset(p, 0, sizeof *p);
    p->bus = i >= 0 ? 0x10u + (unsigned)i : 0xC0u;
    snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
    snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "0000:%02X:00.0", p->bus);
}

int nvmlDeviceGetPciInfo_v3(void *h, pci_info *p)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc == SUCCESS) bus_id(g->index, p);
    return rc;
}

int nvmlDeviceGetNumaNodeId(void *h, unsigned *node)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    if (g->numa < 0) return ERROR_NOT_SUPPORTED;
    *node = (unsigned)g->numa;
    return SUCCESS;
}

int nvmlDeviceGetTopologyCommonAncestor(void *h1, void *h2, int *level)
{
    state s;
    gpu *a, *b;
    int rc = dev(h1, &s, &a);
    if (rc != SUCCESS) return rc;
    state s2;
    rc = dev(h2, &s2, &b);
    if (rc != SUCCESS) return rc;
    *level = a->index == b->index         ? 0
             : s.topo[a->index][b->index] ? s.topo[a->index][b->index]
                                          : 30;
    return SUCCESS;
}

/* GPU g's link l: the peer GPU it goes to (>= 0), -1 an NVSwitch, -2 none.
 * Links go to peers in index order, then to switches. */
static int link_peer(const state *s, const gpu *g, unsigned l)
{
    unsigned k = 0;
    for (int j = 0; j < s->n; j++)
        for (int q = 0; q < s->nvlink[g->index][j]; q++)
            if (k++ == l) return j;
    return l < k + (unsigned)g->nvswitch ? -1 : -2;
}

int nvmlDeviceGetNvLinkState(void *h, unsigned l, int *active)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    if (l >= MAX_LINKS) return ERROR_INVALID_ARGUMENT;
    *active = link_peer(&s, g, l) != -2; /* NVML_FEATURE_ENABLED */
    return SUCCESS;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned l, int *type)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    int p = l < MAX_LINKS ? link_peer(&s, g, l) : -2;
    if (p == -2) return ERROR_INVALID_ARGUMENT;
    *type = p >= 0 ? 0 : 2; /* NVML_NVLINK_DEVICE_TYPE_GPU, _SWITCH */
    return SUCCESS;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned l, pci_info *p)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    int peer = l < MAX_LINKS ? link_peer(&s, g, l) : -2;
    if (peer == -2) return ERROR_INVALID_ARGUMENT;
    bus_id(peer, p);
    return SUCCESS;
}

int nvmlEventSetCreate(void **set)
{
    if (!inited) return ERROR_UNINITIALIZED;
    event_set *e = calloc(1, sizeof *e);
    if (!e) return ERROR_UNINITIALIZED;
    state s;
    load(&s);
    e->delivered = s.n_xid; /* only what happens from now on */
    *set = e;
    return SUCCESS;
}

int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    if (!s.events || !(types & EVENT_XID)) return ERROR_NOT_SUPPORTED;
    ((event_set *)set)->registered[g->index] = 1;
    return SUCCESS;
}

int nvmlEventSetWait_v2(void *set, event_data *d, unsigned timeout_ms)
{
    event_set *e = set;
    struct timespec step = {0, 20 * 1000000L};
    unsigned waited = 0;
    if (!inited) return ERROR_UNINITIALIZED;
    for (;;) {
        state s;
        if (load(&s) == SUCCESS) {
            while (e->delivered < s.n_xid) {
                int k = e->delivered++;
                int gi = s.xid_gpu[k];
                if (gi < 0 || gi >= MAX_GPUS || !e->registered[gi]) continue;
                handles[gi].index = gi;
                handles[gi].slot = -1;
                memset(d, 0, sizeof *d);
                d->device = &handles[gi];
                d->type = EVENT_XID;
                d->data = (unsigned long long)s.xid_code[k];
                /* an Xid of one MIG instance names its GPU instance, on the
                 * parent's handle, as NVML delivers it */
                d->gpu_instance = d->compute_instance = 0xFFFFFFFFu;
                if (s.xid_inst[k] >= 0)
                    d->gpu_instance = (unsigned)s.xid_inst[k], d->compute_instance = 0;
                return SUCCESS;
            }
        }
        if (waited >= timeout_ms) return ERROR_TIMEOUT;
        nanosleep(&step, NULL);
        waited += 20;
    }
}

int nvmlEventSetFree(void *set)
{
    free(set);
    return SUCCESS;
}
