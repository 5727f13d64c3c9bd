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
 *   0.lost=1                         every call on it: NVML_ERROR_GPU_IS_LOST
 *   0.remap_failure=1  0.remap_pending=1  0.ecc=N (uncorrectable, volatile)
 *   events=0                         nvmlDeviceRegisterEvents: NOT_SUPPORTED
 *   xid=0:79                         an Xid 79 on GPU 0
 * A missing file (or variable) is a machine whose driver is not loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 64

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

typedef struct gpu {
    int index;
    char name[96], uuid[96];
    unsigned long long fb_total_mib, fb_used_mib, energy_mj, ecc;
    unsigned util, memutil, temp, mig, lost, remap_failure, remap_pending;
    double power_w;
    int has_energy;
} gpu;

typedef struct state {
    gpu g[MAX_GPUS];
    int n;      /* 1 + the highest index with a name */
    int events; /* 0: registration not supported */
    int xid_gpu[256], xid_code[256];
    int n_xid;
} state;

static int inited;
static gpu handles[MAX_GPUS]; /* what a handle points to: its index */

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
        if (strcmp(k, "xid") == 0) {
            int gi, code;
            if (sscanf(v, "%d:%d", &gi, &code) == 2 && s->n_xid < 256) {
                s->xid_gpu[s->n_xid] = gi;
                s->xid_code[s->n_xid++] = code;
            }
            continue;
        }
        char *dot = strchr(k, '.');
        int i = atoi(k);
        if (!dot || i < 0 || i >= MAX_GPUS) continue;
        gpu *g = &s->g[i];
        const char *key = dot + 1;
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
        } else if (strcmp(key, "mig") == 0)
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
    for (int i = 0; i < s->n; i++)
        if (!s->g[i].uuid[0]) snprintf(s->g[i].uuid, sizeof s->g[i].uuid, "GPU-FAKE-%d", i);
    return SUCCESS;
}

/* The state and device of handle h: SUCCESS, or what NVML would say. */
static int dev(void *h, state *s, gpu **g)
{
    if (!inited) return ERROR_UNINITIALIZED;
    if (!h) return ERROR_INVALID_ARGUMENT;
    int rc = load(s);
    if (rc != SUCCESS) return rc;
    int i = ((gpu *)h)->index;
    if (i < 0 || i >= s->n || !s->g[i].name[0]) return ERROR_GPU_IS_LOST;
    *g = &s->g[i];
    return (*g)->lost ? ERROR_GPU_IS_LOST : SUCCESS;
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
    *h = &handles[i];
    return s.g[i].lost ? ERROR_GPU_IS_LOST : SUCCESS;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned len)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    return rc == SUCCESS ? copy(buf, len, g->name) : rc;
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned len)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    return rc == SUCCESS ? copy(buf, len, g->uuid) : rc;
}

int nvmlDeviceGetMemoryInfo(void *h, memory *m)
{
    state s;
    gpu *g;
    int rc = dev(h, &s, &g);
    if (rc != SUCCESS) return rc;
    m->total = g->fb_total_mib << 20;
    m->used = g->fb_used_mib << 20;
    m->free = m->total > m->used ? m->total - m->used : 0;
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
                memset(d, 0, sizeof *d);
                d->device = &handles[gi];
                d->type = EVENT_XID;
                d->data = (unsigned long long)s.xid_code[k];
                d->gpu_instance = d->compute_instance = 0xFFFFFFFFu;
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
