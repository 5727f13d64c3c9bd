/* src/jobfiles/jobfiles.h - what kilnd keeps of a job on disk besides the
 * store: its directory (DATA/jobs/PROJECT/JOB), the service events in its
 * log, and the runPolicy.ttlSecondsAfterFinished markers and cleaning.
 * A module below the API (a create marks the TTL and writes the QUEUED
 * event) and the supervisors (events, the TTL's tick), behind a handle of
 * its own that kilnd's main builds: it knows nothing of `struct kilnd` and
 * never calls back up into kilnd's main module (issues 31, 43). */
#ifndef KILN_JOBFILES_H
#define KILN_JOBFILES_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kiln_store kiln_store;
typedef struct kiln_jobfiles kiln_jobfiles;

/* A handle over DATA (data_dir, copied) and the store (borrowed: it must
 * outlive the handle). stop (borrowed, may be NULL) is the flag kilnd sets
 * when it stops: the TTL tick stops cleaning once it is set. NULL when out
 * of memory. */
kiln_jobfiles *kiln_jobfiles_new(const char *data_dir, kiln_store *store,
                                 const volatile sig_atomic_t *stop);
/* Frees the handle and the TTL's lists (the markers on disk stay). */
void kiln_jobfiles_free(kiln_jobfiles *jf);

/* jobdir.c: DATA/jobs/PROJECT/JOB (project and job id are
 * checked by the API first). */
void kiln_jobfiles_dir(const kiln_jobfiles *jf, const char *project, const char *job_id, char *buf,
                       size_t len);
/* Appends a service event to the job's log (task "service"). */
void kiln_jobfiles_event(const kiln_jobfiles *jf, const char *project, const char *job_id,
                         const char *severity, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* mkdir -p */
int kilnd_mkdirs(const char *path);
/* runPolicy.ttlSecondsAfterFinished (ttl.c): the API notes a
 * created job that has one (a marker under DATA/ttl, so a restart keeps
 * it); the supervisor's tick cleans the job's files once endTime + TTL has
 * passed, looking only at such jobs, once a second. */
/* Before the job is stored: its marker, fsynced. 1: made by this call
 * (kiln_jobfiles_ttl_unmark it if the store then refuses the job), 0:
 * there already, -1: not written (errno). */
int kiln_jobfiles_ttl_mark(const kiln_jobfiles *jf, const char *project, const char *job_id);
void kiln_jobfiles_ttl_unmark(const kiln_jobfiles *jf, const char *project, const char *job_id);
/* After it is stored: the supervisor starts watching it (any thread). */
void kiln_jobfiles_ttl_created(kiln_jobfiles *jf, const char *project, const char *job_id);
/* The supervisor thread only (one thread ticks a handle). */
void kiln_jobfiles_ttl_tick(kiln_jobfiles *jf, int64_t now_ns);

#endif
