/* test_pool.c - the compute pool's fork-join contract, under stress:
 * every task of every job runs exactly once, with that job's function and
 * context, and none is still running when kiln__parallel_for returns.
 *
 * Jobs follow each other as in training (a gather of 16 tasks, a small op
 * of 2 or 3, ...), each with its context on the caller's stack, as fit.c's
 * gather has. The H100 machine's 16 cores found the race this guards: a
 * worker still in the previous job read the next job's task count before
 * that job was published, claimed a task past the old job's end with the
 * old generation, and ran it with the next job's context; the caller then
 * counted one task too many and returned while a task still ran (a segfault
 * in fit.c's gather_task, and MNIST accuracies off by a few tenths). */
#include "core/pool.h"
#include "test.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_TASKS 64

typedef struct job {
    uint32_t magic; /* this job's number: a task given another job's context sees it */
    atomic_int ran[MAX_TASKS];
    atomic_int running;
} job;

static atomic_long wrong_ctx, late, twice;

static void task(void *ctx, int t, int tid)
{
    (void)tid;
    job *j = ctx;
    atomic_fetch_add(&j->running, 1);
    /* a little work, so that tasks overlap the caller's bookkeeping */
    volatile uint32_t x = j->magic;
    for (int i = 0; i < 50 + (t % 7) * 20; i++)
        x = x * 1664525u + 1013904223u;
    if (t < 0 || t >= MAX_TASKS)
        atomic_fetch_add(&wrong_ctx, 1);
    else if (atomic_fetch_add(&j->ran[t], 1) != 0)
        atomic_fetch_add(&twice, 1);
    atomic_fetch_sub(&j->running, 1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One job on this frame's stack: returns the problems seen. */
static long one_job(uint32_t n, int ntasks)
{
    job j;
    memset(&j, 0, sizeof j);
    j.magic = n;
    kiln__parallel_for(ntasks, task, &j);
    long bad = 0;
    /* returned: every task ran once, and none is running */
    if (atomic_load(&j.running) != 0) bad++, atomic_fetch_add(&late, 1);
    for (int t = 0; t < ntasks; t++)
        if (atomic_load(&j.ran[t]) != 1) bad++;
    for (int t = ntasks; t < MAX_TASKS; t++)
        if (atomic_load(&j.ran[t]) != 0) bad++, atomic_fetch_add(&wrong_ctx, 1);
    /* scribble the frame, as the caller's next call would */
    memset(&j, 0xA5, sizeof j);
    return bad;
}

static void stress(int threads, double secs)
{
    CHECK(kiln_set_threads(threads) == threads);
    static const int shapes[] = {16, 2, 3, 16, 1, 64, 4, 16, 2, 33};
    long jobs = 0, bad = 0;
    atomic_store(&wrong_ctx, 0), atomic_store(&late, 0), atomic_store(&twice, 0);
    double t0 = now_s();
    for (uint32_t n = 1; now_s() - t0 < secs; n++) {
        for (int k = 0; k < 1000; k++, jobs++)
            bad += one_job(n * 1000 + (uint32_t)k, shapes[(n + (uint32_t)k) % 10]);
    }
    printf("%2d threads: %ld jobs in %.1f s; %ld wrong (%ld still running at return, %ld run "
           "twice, %ld with another job's context)\n",
           threads, jobs, secs, bad, atomic_load(&late), atomic_load(&twice),
           atomic_load(&wrong_ctx));
    CHECK_MSG(bad == 0 && atomic_load(&twice) == 0,
              "%d threads: %ld of %ld jobs broke the fork-join contract", threads, bad, jobs);
}

int main(void)
{
    /* more threads than cores (CI has 2) makes a worker lose its core at
     * any point, which is how the race shows on a small machine */
    stress(3, 2.0);
    stress(16, 3.0);
    stress(64, 2.0);
    TEST_DONE();
}
