/* src/notebooks/notebooks.h - notebook instances (docs/notebooks.md).
 *
 * An instance is a document in the store (kind "notebook": the Instance as
 * the Notebooks API shows it, plus kiln's own "kiln" object) and, while it
 * runs, a kiln job of its project: one master replica whose command runs
 * JupyterLab, placed by the scheduler on the instance's GPUs, run as the
 * project's user by a kiln-monitor, adopted by a restarted kilnd like any
 * replica. Stopping an instance cancels its job (its GPUs go back to the
 * scheduler); starting it creates the next one. The API asks for a state
 * (kiln_nb_want); one thread (kiln_notebooks_run) moves every instance
 * towards what was asked, renders its state from its job and Jupyter's
 * answers, stops idle ones, and finishes the long-running operations.
 *
 * The instance's documents are changed under one lock, the handle's;
 * callers get copies. The handle (kiln_notebooks) names what the module
 * uses, built by kilnd's main: it knows nothing of `struct kilnd` and never
 * calls back up into kilnd's main module (issue 43). */
#ifndef KILN_NOTEBOOKS_H
#define KILN_NOTEBOOKS_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>

#include "jobfiles/jobfiles.h"
#include "kiln/diag.h"
#include "util/doorbell.h"

typedef struct kiln_catalog kiln_catalog;
typedef struct kiln_objects kiln_objects;
typedef struct kiln_users kiln_users;
typedef struct kiln_notebooks kiln_notebooks;

/* What the module uses; every pointer is borrowed and must outlive the
 * handle (kilnd's main owns them all). */
typedef struct kiln_notebooks_config {
    const char *data_dir; /* instances' homes go under DATA/notebooks */
    kiln_store *store;    /* the instances, their operations and jobs */
    kiln_catalog *catalog;
    kiln_objects *objects;         /* postStartupScript gs:// URIs */
    kiln_users *users;             /* the project's run-as user */
    const kiln_jobfiles *jobfiles; /* the instance jobs' service events */
    const char *python;            /* --notebook-python (NULL: none) */
    const char *const *env;        /* --notebook-env KEY=PYTHON overrides */
    size_t env_n;
    const volatile sig_atomic_t *stop; /* set when kilnd stops: kiln_notebooks_run ends */
    const kiln_doorbell *wake;         /* rung after an instance's job is created or cancelled */
} kiln_notebooks_config;

/* NULL when out of memory. */
kiln_notebooks *kiln_notebooks_new(const kiln_notebooks_config *cfg);
/* After kiln_notebooks_run has ended (or never started). */
void kiln_notebooks_free(kiln_notebooks *nb);

/* The instance's home (its data disk): DATA/notebooks/PROJECT/NAME. */
void kiln_nb_home(const kiln_notebooks *nb, const char *project, const char *name, char *buf,
                  size_t len);

/* The Python of the notebook environment a vmImage family or image name
 * maps to (--notebook-env KEY=PYTHON, else --notebook-python for the
 * families kiln knows), or NULL with a sentence in why. */
const char *kiln_nb_python(const kiln_notebooks *nb, const char *family, const char *image,
                           char *why, size_t whylen);

/* Whether the instance's job would be accepted (machine type, GPUs,
 * location, environment): KILN_EINVAL with the instance's field and why. */
kiln_err kiln_nb_check_job(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                           char *field, size_t flen, char *why, size_t whylen);

/* The file behind a postStartupScript gs://BUCKET/OBJECT of kilnd's
 * staging store held for the project; KILN_EINVAL/KILN_ENOTFOUND with why. */
kiln_err kiln_nb_script(kiln_notebooks *nb, const char *project, const char *uri, char *path,
                        size_t len, char *why, size_t whylen);

/* Stores a new instance (doc: the validated Instance; kiln's part is added
 * here) and makes its home. KILN_EEXIST when the name is taken. */
kiln_err kiln_nb_create(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                        char *why, size_t whylen);
/* A copy of the instance's document (NULL: none). */
json_t *kiln_nb_get(kiln_notebooks *nb, const char *project, const char *name);
/* Copies of a project's instances (NULL project: all). */
json_t *kiln_nb_list(kiln_notebooks *nb, const char *project);

/* Asks for a state: "ACTIVE" (start), "STOPPED" (stop), "RESET" (stop then
 * start), "DELETED" (stop, then remove it and, unless noRemoveDataDisk, its
 * home). KILN_ENOTFOUND; KILN_ECONFLICT with why when the instance cannot
 * go there from where it is. */
kiln_err kiln_nb_want(kiln_notebooks *nb, const char *project, const char *name, const char *want,
                      char *why, size_t whylen);
/* Replaces the fields of `set` (acceleratorConfig, machineType, labels) in
 * the instance; those but labels only while it is STOPPED (KILN_ECONFLICT). */
kiln_err kiln_nb_update(kiln_notebooks *nb, const char *project, const char *name, json_t *set,
                        char *why, size_t whylen);

/* A long-running operation on an instance: it is done once the instance
 * is in state `until` ("ACTIVE", "STOPPED", "GONE" for a delete, NULL: done
 * now); "ACTIVE" counts only from a run after after_gen (the instance's
 * kiln.gen: its runs so far), so a reset waits for the new run. Returns
 * the Operation (new reference), NULL on failure. */
json_t *kiln_nb_op_new(kiln_notebooks *nb, const char *project, const char *location,
                       const char *name, const char *verb, const char *until, int after_gen);
json_t *kiln_nb_op_get(kiln_notebooks *nb, const char *project, const char *op_id);

/* Where the instance's Jupyter listens (127.0.0.1:*port) while it is
 * ACTIVE; KILN_ENOTFOUND, or KILN_ECONFLICT with its state in why. */
kiln_err kiln_nb_upstream(kiln_notebooks *nb, const char *project, const char *name, int *port,
                          char *why, size_t whylen);

/* Runs command (a JSON array of strings) in the ACTIVE instance, as its
 * Jupyter runs (user, home, environment: nbexec.c), for at most timeout_s:
 * {exitCode, stdout, stderr, truncated, timedOut} (each output capped at
 * 1 MiB), or NULL with why. Blocks the caller for the command's time. */
json_t *kiln_nb_exec(kiln_notebooks *nb, const char *project, const char *name, json_t *command,
                     int timeout_s, char *why, size_t whylen);

/* The thread that moves instances along (started by main after the
 * supervisor; ends when nb->stop is set). */
void *kiln_notebooks_run(void *arg);

#endif
