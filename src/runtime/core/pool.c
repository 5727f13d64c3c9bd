/* core/pool.c - a tiny fork-join pool: the calling thread plus n-1 workers.
 *
 * Why our own pool rather than OpenBLAS's threads: the batch sizes of small
 * models make each GEMM short (tens of microseconds), and splitting work at
 * the layer level lets bias, ReLU and pooling run on the same core right after
 * the GEMM that produced the data, while it is still in cache. Workers spin
 * for a short while after each job (the next one usually comes within
 * microseconds) and then sleep on a condition variable, so an idle pool does
 * not steal the core the data prefetch thread needs. */
#include "core/pool.h"

#include "kiln/tensor.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nthreads; /* including the caller */
    int started;  /* workers running */
    pthread_t tid[KILN__MAX_THREADS];
    /* (job generation << 32) | next unclaimed task: one word, so a claim
     * (compare-and-swap) can only succeed for the job it was meant for. */
    _Atomic uint64_t work;
    atomic_int done;     /* tasks of the current job finished */
    atomic_int sleepers; /* workers blocked on cv */
    atomic_int quit;
    uint32_t gen;
    kiln__task_fn fn;
    void *ctx;
    atomic_int ntasks; /* written only while `work` is closed (see kiln__parallel_for) */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

/* Claims and runs tasks of job g until none is left. Tasks are claimed
 * dynamically, so on a loaded machine a descheduled worker does not hold the
 * step up: whoever runs takes the work. Results do not depend on who runs a
 * task: kernels index outputs and partial sums by task, never by thread. */
static void run_tasks(uint32_t g, int tid)
{
    for (;;) {
        uint64_t w = atomic_load(&P.work);
        if ((uint32_t)(w >> 32) != g) return;
        uint32_t t = (uint32_t)w;
        /* A newer job's count can be read here (a worker still in job g
         * while the caller prepares g+1), but only after the caller closed
         * g's word (acquire pairs with its release), so the CAS below then
         * fails: a task past g's end is never claimed under g's number. */
        if (t >= (uint32_t)atomic_load_explicit(&P.ntasks, memory_order_acquire)) return;
        if (!atomic_compare_exchange_weak(&P.work, &w, w + 1)) continue;
        /* job g cannot finish before this task does, so fn/ctx are still g's */
        P.fn(P.ctx, (int)t, tid);
        atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
    }
}

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    /* jobs posted before we existed are not ours */
    uint32_t seen = (uint32_t)(atomic_load(&P.work) >> 32);
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = (uint32_t)(atomic_load(&P.work) >> 32)) == seen && !atomic_load(&P.quit)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&P.mu);
            atomic_fetch_add(&P.sleepers, 1);
            while ((uint32_t)(atomic_load(&P.work) >> 32) == seen && !atomic_load(&P.quit))
                pthread_cond_wait(&P.cv, &P.mu);
            atomic_fetch_sub(&P.sleepers, 1);
            pthread_mutex_unlock(&P.mu);
            spins = 0;
        }
        if (atomic_load(&P.quit)) return NULL;
        seen = g;
        run_tasks(g, me);
    }
}

static void stop_workers(void)
{
    if (!P.started) return;
    pthread_mutex_lock(&P.mu);
    atomic_store(&P.quit, 1);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    for (int i = 1; i < P.nthreads; i++)
        pthread_join(P.tid[i], NULL);
    P.started = 0;
    atomic_store(&P.quit, 0);
}

static void start_workers(int n)
{
    P.nthreads = n;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&P.tid[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            /* Fewer threads is slower, never wrong. */
            P.nthreads = i;
            break;
        }
    }
    P.started = P.nthreads > 1;
}

int kiln_set_threads(int n)
{
    kiln_blas_init();
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    if (n > KILN__MAX_THREADS) n = KILN__MAX_THREADS;
    pthread_mutex_lock(&init_mu);
    if (n != P.nthreads) {
        stop_workers();
        start_workers(n);
    }
    pthread_mutex_unlock(&init_mu);
    return P.nthreads;
}

int kiln_get_threads(void)
{
    if (P.nthreads == 0) kiln_set_threads(0);
    return P.nthreads;
}

void kiln__parallel_for(int ntasks, kiln__task_fn fn, void *ctx)
{
    int n = kiln_get_threads();
    if (ntasks <= 0) return;
    if (n == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++)
            fn(ctx, t, 0);
        return;
    }
    /* Close the previous job's word first: a worker that read it before
     * (all its tasks claimed) must not claim "task ntasks" of it with the
     * count written below, then run the new job's function and count it
     * done twice (the caller would return while a task still ran: the
     * H100's 16 cores saw it; tests/runtime/test_pool.c). */
    atomic_store(&P.work, ((uint64_t)P.gen << 32) | UINT32_MAX);
    P.fn = fn;
    P.ctx = ctx;
    atomic_store_explicit(&P.ntasks, ntasks, memory_order_release);
    atomic_store(&P.done, 0);
    uint32_t g = ++P.gen;
    /* seq_cst: the sleepers load below must not move before this store (a
     * worker going to sleep re-checks `work` after bumping sleepers). */
    atomic_store(&P.work, (uint64_t)g << 32);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.cv);
        pthread_mutex_unlock(&P.mu);
    }
    run_tasks(g, 0);
    /* Spin, then yield: on a loaded machine the worker we wait for may be
     * descheduled mid-task, and burning our time slice would only delay it. */
    for (int spins = 0; atomic_load_explicit(&P.done, memory_order_acquire) < ntasks; spins++) {
        if (spins < SPIN_ITERS)
            CPU_RELAX();
        else
            sched_yield();
    }
}

static struct {
    float *p;
    size_t n;
} scratch[KILN__MAX_THREADS][KILN__SCRATCH_SLOTS];

float *kiln__scratch(int tid, int slot, size_t nfloats)
{
    if (scratch[tid][slot].n < nfloats) {
        kiln_ffree(scratch[tid][slot].p);
        scratch[tid][slot].p = kiln_falloc(nfloats);
        scratch[tid][slot].n = scratch[tid][slot].p ? nfloats : 0;
    }
    return scratch[tid][slot].p;
}

void kiln__split(size_t n, int parts, int i, size_t align, size_t *b, size_t *e)
{
    size_t units = (n + align - 1) / align;
    size_t ub = units * (size_t)i / (size_t)parts, ue = units * (size_t)(i + 1) / (size_t)parts;
    *b = ub * align < n ? ub * align : n;
    *e = ue * align < n ? ue * align : n;
}
