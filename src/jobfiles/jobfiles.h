/* src/jobfiles/jobfiles.h - what kilnd keeps of a job on disk besides the
 * store: its directory (DATA/jobs/PROJECT/JOB), the service events in its
 * log, and the runPolicy.ttlSecondsAfterFinished markers and cleaning.
 * A module below the API (a create marks the TTL and writes the QUEUED
 * event) and the supervisors (events, the TTL's tick); daemon/ only wires
 * it in (issue 31: no call climbs back up into daemon/). */
#ifndef KILN_JOBFILES_H
#define KILN_JOBFILES_H

#include <stddef.h>
#include <stdint.h>

typedef struct kilnd kilnd;

/* jobdir.c: DATA/jobs/PROJECT/JOB (project and job id are
 * checked by the API first). */
void kilnd_job_dir(const kilnd *d, const char *project, const char *job_id, char *buf, size_t len);
/* Appends a service event to the job's log (task "service"). */
void kilnd_event(kilnd *d, const char *project, const char *job_id, const char *severity,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* mkdir -p */
int kilnd_mkdirs(const char *path);
/* runPolicy.ttlSecondsAfterFinished (ttl.c): the API notes a
 * created job that has one (a marker under DATA/ttl, so a restart keeps
 * it); the supervisor's tick cleans the job's files once endTime + TTL has
 * passed, looking only at such jobs, once a second. */
/* Before the job is stored: its marker, fsynced. 1: made by this call
 * (kilnd_ttl_unmark it if the store then refuses the job), 0: there
 * already, -1: not written (errno). */
int kilnd_ttl_mark(kilnd *d, const char *project, const char *job_id);
void kilnd_ttl_unmark(kilnd *d, const char *project, const char *job_id);
/* After it is stored: the supervisor starts watching it. */
void kilnd_ttl_created(kilnd *d, const char *project, const char *job_id);
void kilnd_ttl_tick(kilnd *d, int64_t now_ns);

#endif
