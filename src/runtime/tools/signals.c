/* tools/signals.c - SIGTERM and SIGINT for kiln-train, taken by one thread.
 *
 * Why not just a handler: a handler runs on whichever thread the kernel
 * picks, on that thread's stack, just below its stack pointer. oneDNN's JIT
 * SGEMM (Debian's libdnnl 2.6, which serves the training step's GEMMs) appears to keep
 * data below its stack pointer (valgrind reports its reads "on thread 1's
 * stack"), and a SIGTERM that arrived during one of its GEMMs corrupted the
 * heap: glibc aborted with "corrupted size vs. prev_size" in about one in ten
 * runs whose drain SIGTERM came during the final evaluation
 * (tests/runtime/test_train_resume.sh, once its kill times really varied).
 *
 * So the signals are blocked in the calling thread, which every thread kiln
 * starts afterwards (compute pool, prefetcher, communication thread, oneDNN's
 * OpenMP threads) inherits, and one small thread takes them with sigwait and
 * raises the flag. The handler is installed as well, for threads that
 * libraries started before main (OpenBLAS's idle servers), whose signal mask
 * is not ours; those threads never run a JIT kernel when the signal arrives
 * there, they sleep. Call it before kiln starts any thread, and after any
 * fork (a child has only the forking thread). */
#include "tools/tool.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t *g_flag;

static void on_signal(int sig)
{
    (void)sig;
    if (g_flag) *g_flag = 1;
}

static void *taker(void *arg)
{
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) == 0 && g_flag) *g_flag = 1;
    }
    return NULL;
}

int kt_signals_take(volatile sig_atomic_t *flag)
{
    static sigset_t set;
    static int started;
    g_flag = flag;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (started) return 0;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int e = pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    pthread_attr_t at;
    if (!e) e = pthread_attr_init(&at);
    if (!e) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        e = pthread_create(&t, &at, taker, &set);
        pthread_attr_destroy(&at);
    }
    if (e) {
        /* the handler alone still works, with the risk described above */
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        fprintf(stderr, "kiln-train: warning: no signal thread (%s); SIGTERM via a handler\n",
                strerror(e));
        return -1;
    }
    started = 1;
    return 0;
}
