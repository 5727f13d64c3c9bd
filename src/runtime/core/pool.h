/* core/pool.h - the runtime's compute threads (internal).
 *
 * kiln__parallel_for runs fn(ctx, task, tid) for task = 0..ntasks-1 on the
 * pool and returns when all are done. Threads claim tasks dynamically, so
 * which thread (tid) runs a task varies: use tid only to pick scratch memory.
 * Kernels that need a cross-thread reduction give each TASK its own partial
 * buffer and add the partials in task order afterwards, so results depend on
 * the task split (fixed for a thread count), never on timing.
 * Not reentrant: fn must not call kiln__parallel_for. */
#ifndef KILN_RT_CORE_POOL_H
#define KILN_RT_CORE_POOL_H

#include <stddef.h>

#include "kiln/tensor.h" /* kiln_get_threads */

typedef void (*kiln__task_fn)(void *ctx, int task, int tid);

void kiln__parallel_for(int ntasks, kiln__task_fn fn, void *ctx);

/* Per-thread scratch memory that grows on demand and is kept for the life of
 * the process, so the training step loop does not allocate. The pointer is
 * valid until the next kiln__scratch call with the same (tid, slot). NULL on
 * allocation failure. slot < KILN__SCRATCH_SLOTS. */
#define KILN__SCRATCH_SLOTS 4
#define KILN__MAX_THREADS   64
float *kiln__scratch(int tid, int slot, size_t nfloats);

/* Hot loops are compiled twice, for AVX-512 and for baseline x86-64, and
 * the loader picks one by CPU (GCC function multi-versioning): the library
 * needs no -march flag and still uses the vector units where they exist.
 * The arithmetic is elementwise or sums in a fixed order, and -ffp-contract
 * is off, so both clones round identically. Off under sanitizers, whose
 * instrumentation does not mix with ifunc resolvers everywhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define KILN_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_HOT
#endif

/* Splits [0, n) into `parts` ranges whose boundaries are multiples of
 * `align` (except the end): range i is [*b, *e). */
void kiln__split(size_t n, int parts, int i, size_t align, size_t *b, size_t *e);

#endif
