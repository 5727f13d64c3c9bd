/* src/exec/supervisor/queue.c - the queue in memory between scheduling passes
 * (supervisor_int.h).
 *
 * A pass used to read and parse every QUEUED job from the store (about 50 ms
 * for 10,000). Now the supervisor keeps the queue here, in queue order
 * (priority desc, createTime, seq: the store's order), and the store tells it
 * of every job written (kiln_store_set_watch: creates from the API threads,
 * state changes, labels, runtime). The store stays the truth: a job written
 * since the last pass is read again from it, and kept only when it is QUEUED.
 * A job's spec is parsed and planned (kiln_catalog_plan) once, when it is
 * read; its shape (the plans, node selectors and elastic policy) is interned
 * to a number, so that a pass can skip a job whose shape did not fit earlier
 * in the same pass without asking the placement again. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/supervisor/supervisor_int.h"

typedef struct qev {
    int64_t seq;
    char *project, *job_id;
} qev;

struct squeue {
    pthread_mutex_t mu; /* guards the events only: the rest is the supervisor's */
    qev *ev;
    size_t nev, evcap;
    bool reload; /* an event was lost (out of memory): read the whole queue again */

    qent **v; /* queue order */
    size_t n, cap;
    qent **tab; /* seq -> entry, open addressing (NULL empty, &tomb deleted) */
    size_t tcap, tused;

    char **shapes; /* interned shape keys; id = index + 1 */
    size_t nshapes, scap;
    uint32_t *stab; /* key hash -> id, open addressing (0 empty) */
    size_t stcap;
    uint32_t *failed; /* per shape id: the pass it did not fit in */
    bool *fits;       /* per shape id: placement said OK or ECONFLICT once */
    uint32_t pass;
};

static qent tomb;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t fnv(const char *p)
{
    uint64_t h = 1469598103934665603ull;
    for (; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* ---------- events (any thread, under the store's lock) ---------- */

static void on_write(void *arg, const char *project, const char *job_id, int64_t seq)
{
    squeue *q = arg;
    pthread_mutex_lock(&q->mu);
    if (q->nev == q->evcap) {
        size_t nc = q->evcap ? q->evcap * 2 : 64;
        qev *nv = realloc(q->ev, nc * sizeof *nv);
        if (!nv) {
            q->reload = true;
            goto out;
        }
        q->ev = nv;
        q->evcap = nc;
    }
    qev *e = &q->ev[q->nev];
    e->seq = seq;
    e->project = strdup(project);
    e->job_id = strdup(job_id);
    if (!e->project || !e->job_id) {
        free(e->project);
        free(e->job_id);
        q->reload = true;
        goto out;
    }
    q->nev++;
out:
    pthread_mutex_unlock(&q->mu);
}

/* ---------- the seq table ---------- */

static bool tab_grow(squeue *q)
{
    size_t live = 0, nc = 1024;
    for (size_t i = 0; i < q->tcap; i++)
        live += q->tab[i] && q->tab[i] != &tomb;
    while (nc < 4 * (live + 16)) /* tombstones are dropped: it may stay the same size */
        nc *= 2;
    qent **nt = calloc(nc, sizeof *nt);
    if (!nt) return false;
    for (size_t i = 0; i < q->tcap; i++) {
        qent *e = q->tab[i];
        if (!e || e == &tomb) continue;
        size_t k = mix((uint64_t)e->seq) & (nc - 1);
        while (nt[k])
            k = (k + 1) & (nc - 1);
        nt[k] = e;
    }
    free(q->tab);
    q->tab = nt;
    q->tcap = nc;
    q->tused = 0;
    for (size_t i = 0; i < nc; i++)
        q->tused += nt[i] != NULL;
    return true;
}

static qent **tab_slot(squeue *q, int64_t seq)
{
    size_t k = mix((uint64_t)seq) & (q->tcap - 1);
    for (;; k = (k + 1) & (q->tcap - 1)) {
        qent *e = q->tab[k];
        if (!e) return NULL;
        if (e != &tomb && e->seq == seq) return &q->tab[k];
    }
}

static qent *tab_get(squeue *q, int64_t seq)
{
    if (!q->tcap) return NULL;
    qent **p = tab_slot(q, seq);
    return p ? *p : NULL;
}

static bool tab_put(squeue *q, qent *e)
{
    if ((q->tused + 1) * 2 > q->tcap && !tab_grow(q)) return false;
    size_t k = mix((uint64_t)e->seq) & (q->tcap - 1);
    while (q->tab[k] && q->tab[k] != &tomb)
        k = (k + 1) & (q->tcap - 1);
    if (!q->tab[k]) q->tused++;
    q->tab[k] = e;
    return true;
}

static void tab_del(squeue *q, int64_t seq)
{
    if (!q->tcap) return;
    qent **p = tab_slot(q, seq);
    if (p) *p = &tomb;
}

/* ---------- shapes ---------- */

/* Appends to a growable string; false when out of memory. */
static bool cat(char **b, size_t *n, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool cat(char **b, size_t *n, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(*b ? *b + *n : NULL, *b ? *cap - *n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return false;
        if (*b && *n + (size_t)w < *cap) {
            *n += (size_t)w;
            return true;
        }
        size_t nc = (*cap + (size_t)w + 1) * 2;
        char *nb = realloc(*b, nc);
        if (!nb) return false;
        *b = nb;
        *cap = nc;
    }
}

/* Everything placement looks at: the plans, the node selectors and
 * tolerations, the elastic bounds. Two jobs with the same key get the same answer from the same
 * cluster. 0 when out of memory (the job is then never skipped). */
static uint32_t shape_id(squeue *q, const qent *e)
{
    char *b = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    const kiln_job *job = e->rec->job;
    for (size_t p = 0; p < e->np; p++) {
        const kiln_replica_plan *pl = &e->plans[p];
        ok &= cat(&b, &n, &cap, "%d|%s|%lld|%s|%lld|%d|%.17g;", (int)pl->role,
                  pl->machine_type ? pl->machine_type : "", (long long)pl->count,
                  pl->accelerator_type ? pl->accelerator_type : "",
                  (long long)pl->accelerators_per_replica, pl->vcpus, pl->memory_gb);
    }
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        for (size_t i = 0; rc && i < rc->node_selector.n; i++)
            ok &= cat(&b, &n, &cap, "s%d|%s=%s;", r, rc->node_selector.keys[i],
                      rc->node_selector.vals[i]);
        for (size_t i = 0; rc && i < rc->n_tolerations; i++) {
            const kiln_toleration *t = &rc->tolerations[i];
            ok &= cat(&b, &n, &cap, "t%d|%s|%s|%s|%s;", r, t->key ? t->key : "", t->op ? t->op : "",
                      t->value ? t->value : "", t->effect ? t->effect : "");
        }
    }
    const kiln_pytorch_job *pt = &job->training_input.pytorch_job;
    if (pt->has_elastic_policy)
        ok &= cat(&b, &n, &cap, "e%lld|%lld|%d", (long long)pt->elastic_policy.min_replicas,
                  (long long)pt->elastic_policy.max_replicas, pt->workers_only ? 1 : 0);
    if (!ok || !b) {
        free(b);
        return 0;
    }
    uint64_t h = fnv(b);
    if (q->stcap) {
        for (size_t k = h & (q->stcap - 1);; k = (k + 1) & (q->stcap - 1)) {
            uint32_t id = q->stab[k];
            if (!id) break;
            if (strcmp(q->shapes[id - 1], b) == 0) {
                free(b);
                return id;
            }
        }
    }
    if (q->nshapes == q->scap) {
        size_t nc = q->scap ? q->scap * 2 : 64;
        char **ns = realloc(q->shapes, nc * sizeof *ns);
        if (!ns) goto oom;
        q->shapes = ns;
        uint32_t *nf = realloc(q->failed, nc * sizeof *nf);
        if (!nf) goto oom;
        memset(nf + q->scap, 0, (nc - q->scap) * sizeof *nf);
        q->failed = nf;
        bool *nfit = realloc(q->fits, nc * sizeof *nfit);
        if (!nfit) goto oom;
        memset(nfit + q->scap, 0, (nc - q->scap) * sizeof *nfit);
        q->fits = nfit;
        q->scap = nc;
    }
    if ((q->nshapes + 1) * 2 > q->stcap) {
        size_t nc = q->stcap ? q->stcap * 2 : 128;
        uint32_t *nt = calloc(nc, sizeof *nt);
        if (!nt) goto oom;
        for (size_t i = 0; i < q->nshapes; i++) {
            size_t k = fnv(q->shapes[i]) & (nc - 1);
            while (nt[k])
                k = (k + 1) & (nc - 1);
            nt[k] = (uint32_t)(i + 1);
        }
        free(q->stab);
        q->stab = nt;
        q->stcap = nc;
    }
    q->shapes[q->nshapes++] = b;
    size_t k = h & (q->stcap - 1);
    while (q->stab[k])
        k = (k + 1) & (q->stcap - 1);
    q->stab[k] = (uint32_t)q->nshapes;
    return (uint32_t)q->nshapes;
oom:
    free(b);
    return 0;
}

/* ---------- entries ---------- */

static void ent_free(qent *e)
{
    if (!e) return;
    kiln_job_record_free(e->rec);
    free(e);
}

/* An entry for a QUEUED record (taken over); NULL when out of memory (the
 * record is freed). */
static qent *ent_new(sup *s, kiln_job_record *rec)
{
    qent *e = calloc(1, sizeof *e);
    if (!e) {
        kiln_job_record_free(rec);
        return NULL;
    }
    e->rec = rec;
    e->seq = rec->seq;
    e->priority = rec->priority;
    e->create_ns = rec->create_ns;
    const kiln_training_input *ti = &rec->job->training_input;
    e->max_wait_ns = ti->has_scheduling && ti->scheduling.has_max_wait_time
                         ? rec->create_ns + duration_ns(&ti->scheduling.max_wait_time)
                         : INT64_MAX;
    e->np = kiln_catalog_plan(s->d->catalog, rec->job, e->plans);
    for (size_t p = 0; p < e->np; p++) {
        const char *t = e->plans[p].accelerator_type;
        bool seen = false;
        for (size_t i = 0; t && i < e->nt; i++)
            seen |= strcmp(e->types[i], t) == 0;
        if (t && !seen) e->types[e->nt++] = t;
    }
    e->shape = e->np ? shape_id(s->q, e) : 0;
    return e;
}

/* Queue order: priority desc, then createTime, then seq (the store's). */
static int before(const qent *a, const qent *b)
{
    if (a->priority != b->priority) return a->priority > b->priority ? -1 : 1;
    if (a->create_ns != b->create_ns) return a->create_ns < b->create_ns ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int by_order(const void *a, const void *b)
{
    return before(*(qent *const *)a, *(qent *const *)b);
}

static int by_seq(const void *a, const void *b)
{
    int64_t x = ((const qev *)a)->seq, y = ((const qev *)b)->seq;
    return x < y ? -1 : x > y;
}

static void drop_all(squeue *q)
{
    for (size_t i = 0; i < q->n; i++)
        ent_free(q->v[i]);
    q->n = 0;
    free(q->tab);
    q->tab = NULL;
    q->tcap = q->tused = 0;
}

static void events_free(qev *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ev[i].project);
        free(ev[i].job_id);
    }
    free(ev);
}

/* Reads the whole queue from the store (at start, and after a lost event). */
static kiln_err reload(sup *s)
{
    squeue *q = s->q;
    kiln_job_record **v = NULL;
    size_t n = 0;
    drop_all(q);
    kiln_err err = kiln_store_jobs_by_state(s->d->store, KILN_STATE_MASK(QUEUED), &v, &n);
    if (err != KILN_OK) return err;
    if (n > q->cap) {
        qent **nv = realloc(q->v, n * sizeof *nv);
        if (!nv) {
            kiln_job_records_free(v, n);
            return KILN_ENOMEM;
        }
        q->v = nv;
        q->cap = n;
    }
    err = KILN_OK;
    for (size_t i = 0; i < n; i++) {
        qent *e = err == KILN_OK ? ent_new(s, v[i]) : NULL;
        if (err != KILN_OK) kiln_job_record_free(v[i]);
        v[i] = NULL;
        if (!e || !tab_put(q, e)) {
            ent_free(e);
            err = KILN_ENOMEM;
            continue;
        }
        q->v[q->n++] = e; /* already in queue order */
    }
    free(v);
    if (err != KILN_OK) drop_all(q);
    return err;
}

/* Applies the writes heard of since the last pass: each job written is read
 * again and kept when it is QUEUED. */
static kiln_err apply_events(sup *s)
{
    squeue *q = s->q;
    pthread_mutex_lock(&q->mu);
    qev *ev = q->ev;
    size_t nev = q->nev;
    bool again = q->reload;
    q->ev = NULL;
    q->nev = q->evcap = 0;
    q->reload = false;
    pthread_mutex_unlock(&q->mu);
    if (again) {
        events_free(ev, nev);
        return reload(s);
    }
    if (!nev) {
        free(ev);
        return KILN_OK;
    }
    kiln_err err = KILN_OK;
    qent **fresh = calloc(nev, sizeof *fresh);
    size_t nf = 0;
    if (!fresh) err = KILN_ENOMEM;
    /* one read per job, however often it was written: its state now decides */
    qsort(ev, nev, sizeof *ev, by_seq);
    for (size_t i = 0; err == KILN_OK && i < nev; i++) {
        if (i > 0 && ev[i].seq == ev[i - 1].seq) continue;
        qent *old = tab_get(q, ev[i].seq);
        if (old) {
            old->gone = true;
            tab_del(q, old->seq);
        }
        kiln_job_record *r = NULL;
        kiln_err ge = kiln_store_job_get(s->d->store, ev[i].project, ev[i].job_id, &r);
        if (ge == KILN_ENOTFOUND) continue;
        if (ge != KILN_OK) {
            err = ge;
            break;
        }
        if (r->job->state != KILN_STATE_QUEUED) {
            kiln_job_record_free(r);
            continue;
        }
        qent *e = ent_new(s, r);
        if (!e) {
            err = KILN_ENOMEM;
            break;
        }
        fresh[nf++] = e;
    }
    events_free(ev, nev);
    if (err != KILN_OK) {
        for (size_t k = 0; k < nf; k++)
            ent_free(fresh[k]);
        free(fresh);
        return reload(s);
    }
    /* the kept ones, in order, merged into the queue without the gone */
    size_t nk = nf;
    qsort(fresh, nk, sizeof *fresh, by_order);
    size_t live = 0;
    for (size_t i = 0; i < q->n; i++)
        live += !q->v[i]->gone;
    qent **out = malloc((live + nk ? live + nk : 1) * sizeof *out);
    if (!out) {
        for (size_t k = 0; k < nk; k++)
            ent_free(fresh[k]);
        free(fresh);
        return reload(s);
    }
    size_t o = 0, a = 0, b = 0;
    while (a < q->n || b < nk) {
        if (a < q->n && q->v[a]->gone) {
            ent_free(q->v[a++]);
            continue;
        }
        if (b < nk && (a == q->n || before(fresh[b], q->v[a]) < 0))
            out[o++] = fresh[b++];
        else
            out[o++] = q->v[a++];
    }
    free(q->v);
    free(fresh);
    q->v = out;
    q->n = o;
    q->cap = live + nk;
    for (size_t i = 0; i < q->n; i++)
        if (!tab_get(q, q->v[i]->seq) && !tab_put(q, q->v[i])) return reload(s);
    return KILN_OK;
}

/* ---------- the supervisor's calls ---------- */

kiln_err squeue_open(sup *s)
{
    squeue *q = calloc(1, sizeof *q);
    if (!q) return KILN_ENOMEM;
    pthread_mutex_init(&q->mu, NULL);
    s->q = q;
    /* watch first, then read: a write in between is heard of and read again */
    kiln_store_set_watch(s->d->store, on_write, q);
    kiln_err err = reload(s);
    if (err != KILN_OK) { /* the next pass tries again */
        pthread_mutex_lock(&q->mu);
        q->reload = true;
        pthread_mutex_unlock(&q->mu);
    }
    return KILN_OK;
}

void squeue_close(sup *s)
{
    squeue *q = s->q;
    if (!q) return;
    kiln_store_set_watch(s->d->store, NULL, NULL);
    drop_all(q);
    free(q->v);
    events_free(q->ev, q->nev);
    for (size_t i = 0; i < q->nshapes; i++)
        free(q->shapes[i]);
    free(q->shapes);
    free(q->stab);
    free(q->failed);
    free(q->fits);
    pthread_mutex_destroy(&q->mu);
    free(q);
    s->q = NULL;
}

qent **squeue_begin(sup *s, size_t *n)
{
    squeue *q = s->q;
    if (apply_events(s) != KILN_OK) {
        *n = 0;
        return NULL;
    }
    if (++q->pass == 0) { /* wrapped: forget every stamp */
        memset(q->failed, 0, q->scap * sizeof *q->failed);
        q->pass = 1;
    }
    *n = q->n;
    return q->v;
}

bool squeue_failed_now(sup *s, const qent *e)
{
    return e->shape && s->q->failed[e->shape - 1] == s->q->pass;
}

void squeue_fail_now(sup *s, const qent *e)
{
    if (e->shape) s->q->failed[e->shape - 1] = s->q->pass;
}

bool squeue_fits(sup *s, const qent *e)
{
    return e->fits || (e->shape && s->q->fits[e->shape - 1]);
}

void squeue_note_fits(sup *s, qent *e)
{
    e->fits = true;
    if (e->shape) s->q->fits[e->shape - 1] = true;
}

void squeue_gone(sup *s, qent *e)
{
    if (e->gone) return;
    e->gone = true;
    tab_del(s->q, e->seq);
}
