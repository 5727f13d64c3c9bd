/* src/daemon/check.h - kilnd --check-config: reads everything a kilnd of
 * these options would read at start (tokens file and its project users,
 * catalog, queues, node config or Slurm partition, GPUs, TLS files, the
 * executor's programs, the data dir and what each project user needs of
 * it), prints one line per thing found and one per problem, and goes on
 * past every problem so that one run lists them all. Nothing is started,
 * bound or written: the data dir is not created, the store not opened for
 * writing (docs/install.md, "Checking a configuration"). */
#ifndef KILND_CHECK_H
#define KILND_CHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "daemon/kilnd.h"

/* The options main() keeps outside `struct kilnd` (NULL: not given). */
typedef struct kilnd_check_opts {
    const char *kiln_train; /* --kiln-train */
    const char *monitor;    /* --monitor */
    const char *runtime;    /* --container-runtime */
    bool insecure_plain;    /* --insecure-plain-http */
} kilnd_check_opts;

/* Runs every check on the parsed options in `d`, printing to `out`. What
 * it loads (tokens, users, catalog, queues, cluster) is left in `d` for
 * main's cleanup to free, as a start would leave it. Returns the exit
 * status: 0 when nothing is wrong, 1 when anything is. */
int kilnd_check_config(kilnd *d, const kilnd_check_opts *o, FILE *out);

#endif
