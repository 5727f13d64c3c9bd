/* src/devices/childenv.h - what a child of kilnd needs, made before the
 * fork (internal to src/devices).
 *
 * kilnd has threads, and a child forked from a threaded process may only
 * make async-signal-safe calls until it execs: a setenv or a PATH search
 * there, which allocate, can hang for good when another thread held the
 * allocator's lock at the fork (the GPU check hung so under ASan). So the
 * environment and the program's path are made first, and the child only
 * dup2s, closes and execve()s. */
#ifndef KILN_DEVICES_CHILDENV_H
#define KILN_DEVICES_CHILDENV_H

#include <stdbool.h>
#include <stddef.h>

#define KILN__CHILDENV_MAX 8

typedef struct kiln__childenv {
    char **env;                    /* for execve: environ's strings but for own[] */
    char *own[KILN__CHILDENV_MAX]; /* the NAME=VALUE strings set here (malloc'd) */
    size_t n_own;
} kiln__childenv;

/* environ with names[i]=vals[i] set (n at most KILN__CHILDENV_MAX). false
 * when out of memory (nothing to free then). */
bool kiln__childenv_make(kiln__childenv *ce, const char *const *names, const char *const *vals,
                         size_t n);
void kiln__childenv_free(kiln__childenv *ce);
/* `prog` itself when it names a path, else the first executable of that
 * name on PATH, in buf; NULL when there is none. */
const char *kiln__find_prog(const char *prog, char *buf, size_t len);

#endif
