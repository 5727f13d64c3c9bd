/* src/devices/watch.c - the GPU watch: health and telemetry of this
 * machine's GPUs, on a thread of its own (kiln/devices.h).
 *
 * The thread holds its own NVML session. It waits on NVML's Xid events
 * with a timeout (the rest of the period), and every period reads each
 * GPU's telemetry; where the driver cannot register Xid events (some
 * virtual machines and containers) it only polls. What it learns goes into
 * a table under `mu`; readers copy out of it and never call NVML.
 *
 * Health is sticky: a GPU that failed stays failed until
 * kiln_gpu_watch_clear, even if it answers again, because a GPU that fell
 * off the bus or lost rows is not trusted with the next job until someone
 * has looked (kiln nodes uncordon NODE --gpu N).
 *
 * A MIG instance is watched as a device of its own (NVML answers its memory
 * query; the board's telemetry stays with the parent GPU), and it fails with
 * its parent: an Xid on the parent GPU (NVML delivers MIG Xids on the
 * parent's handle, with the GPU instance's id when one instance caused it)
 * takes every instance out, or the one the event names. */
#include "kiln/devices.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/nvml_int.h"

#define LOST_ROUNDS 3   /* sample rounds whose memory query fails before "stopped answering" */
#define WAIT_MAX_MS 250 /* longest event wait: how soon a stop is noticed */

typedef struct gpu {
    char uuid[96];
    long parent;           /* a MIG instance: its GPU's position in g[]; -1: a whole GPU */
    unsigned gpu_instance; /* a MIG instance's GPU instance id */
    void *h;               /* NVML handle, NULL: not found */
    kiln_gpu_status st;
    unsigned long long ecc_base; /* uncorrectable ECC count when the watch started */
    bool have_ecc_base;
    int bad_rounds;       /* consecutive failed memory queries */
    kiln_gpu_point *hist; /* ring of KILN_GPU_HISTORY */
    size_t hist_n, hist_next;
    kiln_device dev; /* what a GPU check needs: uuid, index, mig_profile (borrowed) */
    bool share;      /* an MPS share: no NVML handle of its own, its GPU's health */
    bool check_queued;
} gpu;

struct kiln_gpu_watch {
    kiln__nvml nv;
    void *events; /* nvmlEventSet_t, NULL: polling only */
    char events_note[256];
    int period_ms;
    gpu *g;
    size_t n;
    pthread_mutex_t mu; /* guards g[].st, g[].hist*, the generations, stop */
    pthread_cond_t cv;
    bool stop;
    uint64_t health_gen, sample_gen;
    pthread_t th;
    bool started;
    /* GPU checks (kiln_gpu_watch_set_check): their own thread, on cv */
    char *check_prog;
    int check_timeout_s;
    pthread_t check_th;
    bool check_started;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Takes device g out of service (under mu). The first reason stands. */
static void fail(kiln_gpu_watch *w, gpu *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(kiln_gpu_watch *w, gpu *g, const char *fmt, ...)
{
    if (g->st.failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->st.why, sizeof g->st.why, fmt, ap);
    va_end(ap);
    g->st.failed = true;
    w->health_gen++;
}

#define NO_INSTANCE 0xFFFFFFFFu /* an event's gpu_instance when no MIG instance is named */

/* MIG instances whose GPU is out of service leave with it (under mu). */
static void follow_parents(kiln_gpu_watch *w)
{
    for (size_t i = 0; i < w->n; i++) {
        gpu *g = &w->g[i];
        if (g->parent < 0 || g->st.failed || !w->g[g->parent].st.failed) continue;
        fail(w, g, "its GPU (%s) is out of service: %s", w->g[g->parent].uuid,
             w->g[g->parent].st.why);
    }
}

static void on_xid(kiln_gpu_watch *w, const kiln__nvml_event *ev)
{
    unsigned xid = (unsigned)ev->data;
    bool fatal = kiln_devices_xid_fatal(xid);
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n; i++) {
        gpu *g = &w->g[i];
        if (g->parent >= 0 || !g->h || g->h != ev->device) continue;
        if (ev->gpu_instance != NO_INSTANCE) {
            /* one MIG instance's Xid: that instance, not its neighbours */
            for (size_t k = 0; k < w->n; k++) {
                gpu *m = &w->g[k];
                if (m->parent != (long)i || m->gpu_instance != ev->gpu_instance) continue;
                m->st.last_xid = xid;
                m->st.xids++;
                if (fatal) fail(w, m, "Xid %u: %s", xid, kiln_devices_xid_meaning(xid));
            }
            continue;
        }
        g->st.last_xid = xid;
        g->st.xids++;
        if (fatal) fail(w, g, "Xid %u: %s", xid, kiln_devices_xid_meaning(xid));
    }
    follow_parents(w);
    pthread_mutex_unlock(&w->mu);
}

/* One device's telemetry and health checks; NVML is called without the
 * lock, the results are stored under it. */
static void sample(kiln_gpu_watch *w, gpu *g)
{
    kiln__nvml *nv = &w->nv;
    kiln__nvml_memory m = {0};
    kiln__nvml_util u = {0};
    unsigned temp = 0, mw = 0, corr = 0, unc = 0, pending = 0, failure = 0;
    unsigned long long mj = 0, ecc = 0;
    char eb[64];
    if (!g->h) return;
    int rm = nv->memory ? nv->memory(g->h, &m) : KILN__NVML_ERROR_NOT_SUPPORTED;
    int ru = nv->utilization ? nv->utilization(g->h, &u) : KILN__NVML_ERROR_NOT_SUPPORTED;
    int rt = nv->temperature ? nv->temperature(g->h, KILN__NVML_TEMPERATURE_GPU, &temp)
                             : KILN__NVML_ERROR_NOT_SUPPORTED;
    int rp = nv->power ? nv->power(g->h, &mw) : KILN__NVML_ERROR_NOT_SUPPORTED;
    int re = nv->energy ? nv->energy(g->h, &mj) : KILN__NVML_ERROR_NOT_SUPPORTED;
    int rr = nv->remapped_rows ? nv->remapped_rows(g->h, &corr, &unc, &pending, &failure)
                               : KILN__NVML_ERROR_NOT_SUPPORTED;
    int rc = nv->ecc_total
                 ? nv->ecc_total(g->h, KILN__NVML_ECC_UNCORRECTED, KILN__NVML_ECC_VOLATILE, &ecc)
                 : KILN__NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&w->mu);
    kiln_gpu_status *st = &g->st;
    st->at_ns = now_ns();
    st->have_memory = rm == KILN__NVML_SUCCESS;
    st->have_util = ru == KILN__NVML_SUCCESS;
    st->have_temp = rt == KILN__NVML_SUCCESS;
    st->have_power = rp == KILN__NVML_SUCCESS;
    st->have_energy = re == KILN__NVML_SUCCESS;
    if (st->have_memory) st->fb_total = m.total, st->fb_free = m.free, st->fb_used = m.used;
    if (st->have_util) st->util_gpu = u.gpu, st->util_memory = u.memory;
    if (st->have_temp) st->temp_c = temp;
    if (st->have_power) st->power_w = mw / 1000.0;
    if (st->have_energy) st->energy_mj = mj;
    /* a GPU that stops answering: NVML says so at once ("GPU is lost"),
     * other failures of the one query every GPU supports count rounds */
    if (rm == KILN__NVML_ERROR_GPU_IS_LOST)
        fail(w, g, "stopped answering (nvmlDeviceGetMemoryInfo: %s)",
             kiln__nvml_error(nv, rm, eb, sizeof eb));
    else if (rm != KILN__NVML_SUCCESS && nv->memory && ++g->bad_rounds >= LOST_ROUNDS)
        fail(w, g, "stopped answering (nvmlDeviceGetMemoryInfo failed %d times in a row: %s)",
             g->bad_rounds, kiln__nvml_error(nv, rm, eb, sizeof eb));
    else if (rm == KILN__NVML_SUCCESS)
        g->bad_rounds = 0;
    if (rr == KILN__NVML_SUCCESS) {
        st->remapped_rows_pending = pending;
        if (failure)
            fail(w, g, "row remapping failed (%u rows remapped for uncorrectable errors)", unc);
        else if (pending && !st->failed)
            snprintf(st->why, sizeof st->why,
                     "warning: a row remapping is pending; it takes effect at the next GPU reset");
    }
    if (rc == KILN__NVML_SUCCESS) {
        if (!g->have_ecc_base) {
            g->ecc_base = ecc;
            g->have_ecc_base = true;
        } else if (ecc > g->ecc_base) {
            fail(w, g, "%llu uncorrectable ECC error%s since kilnd started watching it",
                 ecc - g->ecc_base, ecc - g->ecc_base == 1 ? "" : "s");
        }
    }
    kiln_gpu_point *p = &g->hist[g->hist_next];
    p->at_ns = st->at_ns;
    p->util_gpu = st->have_util ? (float)st->util_gpu : -1.0f;
    p->fb_used_gb =
        st->have_memory ? (float)((double)st->fb_used / (1024.0 * 1024.0 * 1024.0)) : -1.0f;
    g->hist_next = (g->hist_next + 1) % KILN_GPU_HISTORY;
    if (g->hist_n < KILN_GPU_HISTORY) g->hist_n++;
    pthread_mutex_unlock(&w->mu);
}

/* Waits up to ms for an Xid event (or, polling only, for a stop). */
static void wait_events(kiln_gpu_watch *w, int ms)
{
    if (w->events) {
        kiln__nvml_event ev;
        memset(&ev, 0, sizeof ev);
        int rc = w->nv.event_set_wait(w->events, &ev, (unsigned)ms);
        if (rc == KILN__NVML_SUCCESS && (ev.type & KILN__NVML_EVENT_XID)) on_xid(w, &ev);
        /* a failing wait (not a timeout) must not spin: sleep out the time */
        if (rc == KILN__NVML_SUCCESS || rc == KILN__NVML_ERROR_TIMEOUT) return;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&w->mu);
    if (!w->stop) pthread_cond_timedwait(&w->cv, &w->mu, &until);
    pthread_mutex_unlock(&w->mu);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *run(void *arg)
{
    kiln_gpu_watch *w = arg;
    int64_t next = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop) break;
        int64_t now = mono_ms();
        if (now >= next) {
            for (size_t i = 0; i < w->n; i++)
                sample(w, &w->g[i]);
            pthread_mutex_lock(&w->mu);
            follow_parents(w);
            w->sample_gen++;
            pthread_mutex_unlock(&w->mu);
            next = now + w->period_ms;
            continue;
        }
        int ms = (int)(next - now);
        wait_events(w, ms < WAIT_MAX_MS ? ms : WAIT_MAX_MS);
    }
    return NULL;
}

/* Finds each device's handle by its UUID (indices can change between
 * discovery and now; UUIDs cannot), and registers for Xid events. */
static void attach(kiln_gpu_watch *w)
{
    kiln__nvml *nv = &w->nv;
    unsigned cnt = 0;
    char eb[64];
    if (nv->count(&cnt) != KILN__NVML_SUCCESS) cnt = 0;
    for (unsigned i = 0; i < cnt; i++) {
        void *h = NULL;
        char id[96] = "";
        if (nv->by_index(i, &h) != KILN__NVML_SUCCESS || nv->uuid(h, id, sizeof id) != 0) continue;
        for (size_t k = 0; k < w->n; k++)
            if (strcmp(w->g[k].uuid, id) == 0) w->g[k].h = h;
    }
    /* MIG instances: among their parent's, by UUID (NVML may renumber slots) */
    for (size_t k = 0; k < w->n; k++) {
        gpu *g = &w->g[k];
        unsigned max = 0;
        void *ph = g->parent >= 0 ? w->g[g->parent].h : NULL;
        if (!ph || !nv->mig_max || !nv->mig_by_index || nv->mig_max(ph, &max) != 0) continue;
        for (unsigned i = 0; i < max && !g->h; i++) {
            void *h = NULL;
            char id[96] = "";
            if (nv->mig_by_index(ph, i, &h) == KILN__NVML_SUCCESS &&
                nv->uuid(h, id, sizeof id) == KILN__NVML_SUCCESS && strcmp(id, g->uuid) == 0)
                g->h = h;
        }
    }
    for (size_t k = 0; k < w->n; k++)
        if (!w->g[k].h && !w->g[k].share)
            fail(w, &w->g[k], "stopped answering (NVML no longer lists it)");
    if (!nv->event_set_create || !nv->register_events || !nv->event_set_wait) {
        snprintf(w->events_note, sizeof w->events_note,
                 "Xid events: not available (%.160s has no event calls); health is polled",
                 nv->path);
        return;
    }
    int rc = nv->event_set_create(&w->events);
    if (rc != KILN__NVML_SUCCESS) {
        w->events = NULL;
        snprintf(w->events_note, sizeof w->events_note,
                 "Xid events: not available (nvmlEventSetCreate: %s); health is polled",
                 kiln__nvml_error(nv, rc, eb, sizeof eb));
        return;
    }
    size_t ok = 0;
    int last = KILN__NVML_SUCCESS;
    size_t whole = 0;
    for (size_t k = 0; k < w->n; k++) {
        if (!w->g[k].h || w->g[k].parent >= 0) continue; /* a MIG Xid comes on its parent */
        whole++;
        rc = nv->register_events(w->g[k].h, KILN__NVML_EVENT_XID, w->events);
        if (rc == KILN__NVML_SUCCESS)
            ok++;
        else
            last = rc;
    }
    if (ok)
        snprintf(w->events_note, sizeof w->events_note,
                 "Xid events: registered on %zu of %zu GPU%s", ok, whole, whole == 1 ? "" : "s");
    else {
        snprintf(w->events_note, sizeof w->events_note,
                 "Xid events: not available (nvmlDeviceRegisterEvents: %s); health is polled",
                 kiln__nvml_error(nv, last, eb, sizeof eb));
        if (nv->event_set_free) nv->event_set_free(w->events);
        w->events = NULL;
    }
}

static void clear_locked(kiln_gpu_watch *w, size_t i);

/* The check thread: takes queued devices one at a time, runs the check
 * without the lock, and puts the device back in service or keeps it out. */
static void *check_run(void *arg)
{
    kiln_gpu_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        size_t i = w->n;
        for (size_t k = 0; k < w->n && i == w->n; k++)
            if (w->g[k].check_queued) i = k;
        if (w->stop) break;
        if (i == w->n) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        gpu *g = &w->g[i];
        snprintf(g->st.why, sizeof g->st.why, "GPU check: running %s", w->check_prog);
        kiln_device dv = g->dev;
        pthread_mutex_unlock(&w->mu);
        char why[256];
        int64_t ms = 0;
        bool ok = kiln_gpu_check_run(w->check_prog, &dv, w->check_timeout_s, why, sizeof why, &ms);
        pthread_mutex_lock(&w->mu);
        g->check_queued = false;
        g->st.checking = false;
        g->st.check_ms = ms;
        snprintf(g->st.check, sizeof g->st.check, "%s", why);
        if (ok) {
            clear_locked(w, i);
        } else {
            snprintf(g->st.why, sizeof g->st.why, "GPU check failed: %.200s", why);
        }
        w->health_gen++;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void kiln_gpu_watch_set_check(kiln_gpu_watch *w, const char *prog, int timeout_s)
{
    if (!w || !prog || w->check_prog) return;
    if (!(w->check_prog = strdup(prog))) return;
    w->check_timeout_s = timeout_s > 0 ? timeout_s : 60;
    w->check_started = pthread_create(&w->check_th, NULL, check_run, w) == 0;
    if (!w->check_started) {
        free(w->check_prog);
        w->check_prog = NULL;
    }
}

bool kiln_gpu_watch_has_check(kiln_gpu_watch *w)
{
    return w && w->check_prog;
}

bool kiln_gpu_watch_check(kiln_gpu_watch *w, size_t i)
{
    if (!w || !w->check_prog || i >= w->n) return false;
    pthread_mutex_lock(&w->mu);
    gpu *g = &w->g[i];
    bool queued = !g->check_queued;
    if (queued) {
        g->check_queued = true;
        g->st.checking = true;
        g->st.failed = true; /* out of service until it passes */
        snprintf(g->st.why, sizeof g->st.why, "GPU check: waiting for its turn");
        follow_parents(w); /* its shares or instances leave with it, now */
        w->health_gen++;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return queued;
}

kiln_gpu_watch *kiln_gpu_watch_start(const char *lib, const kiln_device *devs, size_t n,
                                     int period_ms, char *why, size_t whylen)
{
    kiln_gpu_watch *w = NULL;
    size_t real = 0;
    for (size_t i = 0; i < n; i++)
        real += !devs[i].simulated;
    if (real == 0 || real != n) {
        snprintf(why, whylen, "no GPUs of this machine to watch");
        return NULL;
    }
    w = calloc(1, sizeof *w);
    if (!w || !(w->g = calloc(n, sizeof *w->g))) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    w->n = n;
    w->period_ms = period_ms > 0 ? period_ms : 1000;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (size_t i = 0; i < n; i++) {
        snprintf(w->g[i].uuid, sizeof w->g[i].uuid, "%s", devs[i].uuid);
        w->g[i].dev = devs[i];
        w->g[i].dev.uuid = w->g[i].uuid;
        /* a MIG instance or an MPS share follows its GPU's health */
        w->g[i].parent = (devs[i].mig_profile || devs[i].share) && devs[i].parent >= 0 &&
                                 (size_t)devs[i].parent < n
                             ? devs[i].parent
                             : -1;
        w->g[i].share = devs[i].share > 0;
        w->g[i].gpu_instance = devs[i].gpu_instance;
        if (!(w->g[i].hist = calloc(KILN_GPU_HISTORY, sizeof *w->g[i].hist))) {
            snprintf(why, whylen, "out of memory");
            goto fail;
        }
    }
    if (kiln__nvml_open(lib, &w->nv, why, whylen) != KILN_OK) goto fail;
    attach(w);
    if (pthread_create(&w->th, NULL, run, w) != 0) {
        snprintf(why, whylen, "cannot start its thread");
        goto fail;
    }
    w->started = true;
    return w;
fail:
    kiln_gpu_watch_stop(w);
    return NULL;
}

void kiln_gpu_watch_stop(kiln_gpu_watch *w)
{
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    if (w->check_started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->check_th, NULL);
    }
    free(w->check_prog);
    if (w->events && w->nv.event_set_free) w->nv.event_set_free(w->events);
    if (w->nv.lib) kiln__nvml_close(&w->nv);
    for (size_t i = 0; w->g && i < w->n; i++)
        free(w->g[i].hist);
    if (w->g) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(w->g);
    free(w);
}

bool kiln_gpu_watch_get(kiln_gpu_watch *w, size_t i, kiln_gpu_status *out)
{
    if (!w || i >= w->n) return false;
    pthread_mutex_lock(&w->mu);
    *out = w->g[i].st;
    pthread_mutex_unlock(&w->mu);
    return true;
}

uint64_t kiln_gpu_watch_health_gen(kiln_gpu_watch *w)
{
    if (!w) return 0;
    pthread_mutex_lock(&w->mu);
    uint64_t g = w->health_gen;
    pthread_mutex_unlock(&w->mu);
    return g;
}

uint64_t kiln_gpu_watch_sample_gen(kiln_gpu_watch *w)
{
    if (!w) return 0;
    pthread_mutex_lock(&w->mu);
    uint64_t g = w->sample_gen;
    pthread_mutex_unlock(&w->mu);
    return g;
}

/* Device i back in service, and the MIG instances or shares its failure
 * took out (one failed on its own stays out); under mu. */
static void clear_locked(kiln_gpu_watch *w, size_t i)
{
    gpu *g = &w->g[i];
    if (g->st.failed) w->health_gen++;
    g->st.failed = false;
    g->st.why[0] = '\0';
    g->bad_rounds = 0;
    g->have_ecc_base = false; /* the count now is the new baseline */
    /* an instance of a GPU still out of service fails again at the next round */
    char pre[160];
    snprintf(pre, sizeof pre, "its GPU (%s) is out of service", g->uuid);
    for (size_t k = 0; k < w->n; k++) {
        gpu *m = &w->g[k];
        if (m->parent != (long)i || !m->st.failed || strncmp(m->st.why, pre, strlen(pre)) != 0)
            continue;
        m->st.failed = false;
        m->st.why[0] = '\0';
        m->bad_rounds = 0;
    }
}

void kiln_gpu_watch_clear(kiln_gpu_watch *w, size_t i)
{
    if (!w || i >= w->n) return;
    pthread_mutex_lock(&w->mu);
    clear_locked(w, i);
    pthread_mutex_unlock(&w->mu);
}

size_t kiln_gpu_watch_history(kiln_gpu_watch *w, size_t i, kiln_gpu_point *out, size_t cap)
{
    if (!w || i >= w->n) return 0;
    pthread_mutex_lock(&w->mu);
    const gpu *g = &w->g[i];
    size_t k = g->hist_n < cap ? g->hist_n : cap;
    /* the newest k, oldest first */
    size_t start = (g->hist_next + KILN_GPU_HISTORY - k) % KILN_GPU_HISTORY;
    for (size_t j = 0; j < k; j++)
        out[j] = g->hist[(start + j) % KILN_GPU_HISTORY];
    pthread_mutex_unlock(&w->mu);
    return k;
}

void kiln_gpu_watch_events(kiln_gpu_watch *w, char *buf, size_t len)
{
    snprintf(buf, len, "%s", w ? w->events_note : "no GPU watch");
}
