/* src/jobfiles/jobfiles_int.h - the jobfiles handle's insides, shared by
 * jobdir.c (the directory, events, the handle's life) and ttl.c (the TTL's
 * lists); nothing outside src/jobfiles includes it. */
#ifndef KILN_JOBFILES_INT_H
#define KILN_JOBFILES_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "jobfiles/jobfiles.h"

typedef struct kiln__tjob {
    char *project, *job_id;
    int64_t due_ns; /* heap entries */
} kiln__tjob;

typedef struct kiln__tvec {
    kiln__tjob *v;
    size_t n, cap;
} kiln__tvec;

struct kiln_jobfiles {
    char *data_dir;
    kiln_store *store;                 /* borrowed */
    const volatile sig_atomic_t *stop; /* borrowed; NULL: never stops early */
    /* the TTL (ttl.c) */
    pthread_mutex_t ttl_mu;
    kiln__tvec ttl_new;   /* created by the API, not yet seen by the supervisor (ttl_mu) */
    kiln__tvec ttl_watch; /* not finished yet (supervisor thread only) */
    kiln__tvec ttl_heap;  /* finished, by due time (supervisor thread only) */
    bool ttl_loaded;      /* the markers were read (supervisor thread only) */
    int64_t ttl_next;     /* next look (supervisor thread only) */
};

/* Frees the TTL's lists (ttl.c; kiln_jobfiles_free calls it). */
void kiln__jobfiles_ttl_free(kiln_jobfiles *jf);

#endif
