/* src/notebooks/notebooks_int.h - the notebooks handle's insides, shared by
 * notebooks.c and nbexec.c; nothing outside src/notebooks includes it. */
#ifndef KILN_NOTEBOOKS_INT_H
#define KILN_NOTEBOOKS_INT_H

#include <pthread.h>

#include "notebooks/notebooks.h"

/* What kiln_notebooks_config named (every pointer borrowed), and the lock
 * the instances' documents are changed under. */
struct kiln_notebooks {
    const char *data_dir;
    kiln_store *store;
    kiln_catalog *catalog;
    kiln_objects *objects;
    kiln_users *users;
    const kiln_jobfiles *jobfiles;
    const char *python;
    const char *const *env;
    size_t env_n;
    const volatile sig_atomic_t *stop;
    const kiln_doorbell *wake;
    pthread_mutex_t mu;
};

#endif
