/* src/exec/supervisor/qwait.h - kilnd's record of why QUEUED jobs wait
 * (kilnd->qwait: kilnStatus.queue, docs/queues.md), kept by whichever
 * admits: kiln's own admission (admit.c) or Slurm's accounting (place.c,
 * with src/exec/slurm/accounts.h's reasons). */
#ifndef KILND_QWAIT_H
#define KILND_QWAIT_H

#include <stddef.h>

#include "daemon/kilnd.h"

/* Frees one record's strings and zeroes it. */
void kilnd_qwait_clear(kilnd_qwait *x);
/* Frees n records and the array. */
void kilnd_qwait_free(kilnd_qwait *w, size_t n);
/* Puts w (n records, owned from here; NULL: none) in place of kilnd's
 * record, sorted by project and job id as the API looks them up, and frees
 * the old one. The caller holds d->queues_mu. */
void kilnd_qwait_publish(kilnd *d, kilnd_qwait *w, size_t n);
/* Sorts kilnd's record again after a change in place (queues_mu held). */
void kilnd_qwait_sort(kilnd *d);

/* Puts v (n positions, owned from here; NULL: none) in place of kilnd's
 * record of Slurm's queue positions (d->spos), and frees the old one.
 * Takes d->queues_mu. */
void kilnd_spos_publish(kilnd *d, kilnd_spos *v, size_t n);
/* The job's place in Slurm's pending queue (d->spos), 0 when it has none.
 * Takes d->queues_mu. */
long kilnd_spos_get(kilnd *d, const char *project, const char *job_id);

#endif
