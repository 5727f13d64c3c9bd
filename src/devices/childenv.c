/* src/devices/childenv.c - what a child of kilnd needs, made before the
 * fork (childenv.h). */
#include "devices/childenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

bool kiln__childenv_make(kiln__childenv *ce, const char *const *names, const char *const *vals,
                         size_t n)
{
    size_t ne = 0, k = 0;
    *ce = (kiln__childenv){0};
    if (n > KILN__CHILDENV_MAX) return false;
    while (environ[ne])
        ne++;
    for (size_t j = 0; j < n; j++) {
        if (asprintf(&ce->own[j], "%s=%s", names[j], vals[j]) < 0) {
            ce->own[j] = NULL;
            kiln__childenv_free(ce);
            return false;
        }
        ce->n_own = j + 1;
    }
    if (!(ce->env = calloc(ne + n + 1, sizeof *ce->env))) {
        kiln__childenv_free(ce);
        return false;
    }
    for (size_t i = 0; i < ne; i++) {
        bool set_here = false;
        for (size_t j = 0; j < n && !set_here; j++) {
            size_t l = strlen(names[j]);
            set_here = strncmp(environ[i], names[j], l) == 0 && environ[i][l] == '=';
        }
        if (!set_here) ce->env[k++] = environ[i];
    }
    for (size_t j = 0; j < n; j++)
        ce->env[k++] = ce->own[j];
    return true;
}

void kiln__childenv_free(kiln__childenv *ce)
{
    for (size_t j = 0; j < ce->n_own; j++)
        free(ce->own[j]);
    free(ce->env);
    *ce = (kiln__childenv){0};
}

const char *kiln__find_prog(const char *prog, char *buf, size_t len)
{
    if (!prog || !*prog) return NULL;
    if (strchr(prog, '/')) return prog;
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t k = strcspn(path, ":");
        snprintf(buf, len, "%.*s/%s", (int)k, path, prog);
        if (k && access(buf, X_OK) == 0) return buf;
        path += k + (path[k] == ':');
    }
    return NULL;
}
