/* src/exec/supervisor/qwait.c - kilnd's record of why QUEUED jobs wait
 * (qwait.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/supervisor/qwait.h"

void kilnd_qwait_clear(kilnd_qwait *x)
{
    free(x->project);
    free(x->job_id);
    free(x->local_queue);
    free(x->cluster_queue);
    free(x->why);
    *x = (kilnd_qwait){0};
}

void kilnd_qwait_free(kilnd_qwait *w, size_t n)
{
    for (size_t i = 0; w && i < n; i++)
        kilnd_qwait_clear(&w[i]);
    free(w);
}

static int by_key(const void *pa, const void *pb)
{
    const kilnd_qwait *a = pa, *b = pb;
    int c = strcmp(a->project, b->project);
    return c ? c : strcmp(a->job_id, b->job_id);
}

void kilnd_qwait_publish(kilnd *d, kilnd_qwait *w, size_t n)
{
    if (w && n) qsort(w, n, sizeof *w, by_key);
    kilnd_qwait_free(d->qwait, d->n_qwait);
    d->qwait = w;
    d->n_qwait = w ? n : 0;
}

void kilnd_qwait_sort(kilnd *d)
{
    if (d->n_qwait) qsort(d->qwait, d->n_qwait, sizeof *d->qwait, by_key);
}

static int spos_by_key(const void *pa, const void *pb)
{
    const kilnd_spos *a = pa, *b = pb;
    int c = strcmp(a->project, b->project);
    return c ? c : strcmp(a->job_id, b->job_id);
}

static void spos_free(kilnd_spos *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].project);
        free(v[i].job_id);
    }
    free(v);
}

void kilnd_spos_publish(kilnd *d, kilnd_spos *v, size_t n)
{
    if (v && n) qsort(v, n, sizeof *v, spos_by_key);
    pthread_mutex_lock(&d->queues_mu);
    kilnd_spos *old = d->spos;
    size_t on = d->n_spos;
    d->spos = v;
    d->n_spos = v ? n : 0;
    pthread_mutex_unlock(&d->queues_mu);
    spos_free(old, on);
}

long kilnd_spos_get(kilnd *d, const char *project, const char *job_id)
{
    kilnd_spos key = {.project = (char *)project, .job_id = (char *)job_id};
    long pos = 0;
    pthread_mutex_lock(&d->queues_mu);
    const kilnd_spos *e =
        d->n_spos ? bsearch(&key, d->spos, d->n_spos, sizeof *d->spos, spos_by_key) : NULL;
    if (e) pos = e->position;
    pthread_mutex_unlock(&d->queues_mu);
    return pos;
}
