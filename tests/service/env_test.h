/* tests/service/env_test.h - env_get for the tests of what a replica sees
 * (test_exec_env.c, test_kfenv.c, test_mpienv.c), header only. */
#ifndef KILN_ENV_TEST_H
#define KILN_ENV_TEST_H

#include <string.h>

#include "kiln/job.h"

/* The value of NAME in an environment of "NAME=VALUE" strings; NULL when
 * it is not there. */
static inline const char *env_get(const kiln_strv *env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < env->n; i++)
        if (strncmp(env->v[i], name, n) == 0 && env->v[i][n] == '=') return env->v[i] + n + 1;
    return NULL;
}

#endif
