/* src/exec/supervisor/qwait.c - kilnd's record of why QUEUED jobs wait
 * (qwait.h). */
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
