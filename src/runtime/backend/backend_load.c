/* backend/backend_load.c - finding and loading the CUDA backend plugin.
 *
 * Where it is looked for, first found wins:
 *   1. $KILN_CUDA_BACKEND, a path to the library (a site's own build);
 *   2. next to the running program (build/bin/ holds both), then
 *      ../lib/kiln/ from it (an installed tree);
 *   3. the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache).
 * The plugin needs CUDA's libraries (cuBLAS, cuDNN, NCCL); when one of them
 * is missing, dlopen's message names it, and that message is the error. */
#include "backend/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const kiln__backend *g_cuda;
static char g_err[1024];

typedef const kiln__backend *(*entry_fn)(void);

/* Tries one candidate; 1 when loaded, 0 when the file is not there, -1
 * when it is there and failed (g_err says why). */
static int try_load(const char *path, int must_exist)
{
    if (must_exist && access(path, F_OK) != 0) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        /* the linker's own search: "cannot open shared object file" for the
         * plugin itself means it is not installed, not that it is broken */
        if (!must_exist && why && strstr(why, KILN__CUDA_BACKEND_LIB ": cannot open")) return 0;
        snprintf(g_err, sizeof g_err, "loading %s: %s", path, why ? why : "unknown error");
        return -1;
    }
    entry_fn entry;
    *(void **)&entry = dlsym(h, KILN__CUDA_BACKEND_SYMBOL);
    const kiln__backend *b = entry ? entry() : NULL;
    if (!b || b->abi != KILN__BACKEND_ABI) {
        snprintf(g_err, sizeof g_err,
                 "%s is not a kiln CUDA backend of this version (table %d, this program "
                 "needs %d): rebuild it with this kiln",
                 path, b ? b->abi : -1, KILN__BACKEND_ABI);
        dlclose(h);
        return -1;
    }
    g_cuda = b; /* never unloaded: models keep pointers into it */
    return 1;
}

static void exe_dir(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    else
        buf[0] = '\0';
}

const kiln__backend *kiln__backend_cuda(char *err, size_t errlen)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    int r = 0;
    pthread_mutex_lock(&g_mu);
    if (g_cuda) goto out;
    const char *env = getenv("KILN_CUDA_BACKEND");
    if (env && *env) {
        r = try_load(env, 1);
        if (r == 0) snprintf(g_err, sizeof g_err, "KILN_CUDA_BACKEND=%s: no such file", env);
        goto out;
    }
    exe_dir(dir, sizeof dir);
    if (dir[0]) {
        snprintf(path, sizeof path, "%s/%s", dir, KILN__CUDA_BACKEND_LIB);
        if ((r = try_load(path, 1)) != 0) goto out;
        snprintf(path, sizeof path, "%s/../lib/kiln/%s", dir, KILN__CUDA_BACKEND_LIB);
        if ((r = try_load(path, 1)) != 0) goto out;
    }
    if ((r = try_load(KILN__CUDA_BACKEND_LIB, 0)) == 0)
        snprintf(g_err, sizeof g_err,
                 "the CUDA backend (%s) is not installed: this kiln was built without CUDA, "
                 "or the library is not next to the program, in ../lib/kiln/ or on the "
                 "library path (KILN_CUDA_BACKEND names it)",
                 KILN__CUDA_BACKEND_LIB);
out:
    if (!g_cuda && err) snprintf(err, errlen, "%s", g_err);
    const kiln__backend *b = g_cuda;
    pthread_mutex_unlock(&g_mu);
    return b;
}
