/* src/exec/envvar.h - the one way src/exec appends a variable to an
 * environment under construction (internal to src/exec): env.c, kfenv.c,
 * mpienv.c and exec.c build replicas' and monitors' environments with it. */
#ifndef KILN_EXEC_ENVVAR_H
#define KILN_EXEC_ENVVAR_H

#include "kiln/job.h"

/* Appends "NAME=VALUE" (a copy; env grows as kiln_strv_push grows it).
 * KILN_ENOMEM is the only error, and leaves env as it was. */
kiln_err kiln__env_put(kiln_strv *env, const char *name, const char *value);
/* The same with VALUE the decimal of v. */
kiln_err kiln__env_put_int(kiln_strv *env, const char *name, long long v);

#endif
