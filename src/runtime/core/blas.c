/* core/blas.c - making Debian's OpenBLAS use the right kernels.
 *
 * Debian builds OpenBLAS with DYNAMIC_ARCH: at load time a constructor inside
 * libopenblas picks a kernel table ("core") from cpuid, or from
 * OPENBLAS_CORETYPE. 0.3.21 does not know some newer Xeons and picks a
 * generic table that is ~4-5x slower. Setting the variable from our own code
 * is too late (the library's constructor has run before any of ours), and
 * re-exec'ing is invasive for a library. But the selection can be redone:
 * `gotoblas` (the table pointer) and gotoblas_dynamic_init() are exported, and
 * dynamic_init returns early only when the pointer is set. So when the core
 * is wrong we set the variable, clear the pointer and call it again; it
 * re-reads the variable and runs the new table's init (block sizes). Measured
 * here with OPENBLAS_CORETYPE=Prescott forced: 44 -> 160 GFLOPS single-core
 * SGEMM. This runs once, before any BLAS call of ours. */
#include "kiln/tensor.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern void gotoblas_dynamic_init(void);
extern void *gotoblas;
extern char *openblas_get_corename(void);

static pthread_once_t once = PTHREAD_ONCE_INIT;

static int cpu_has_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

static int core_is_avx512(const char *c)
{
    static const char *const ok[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (c && strcasecmp(c, ok[i]) == 0) return 1;
    return 0;
}

static void do_init(void)
{
    const char *user = getenv("OPENBLAS_CORETYPE");
    if ((!user || !*user) && cpu_has_avx512() && !core_is_avx512(openblas_get_corename())) {
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        gotoblas = NULL;
        gotoblas_dynamic_init();
    }
    /* kiln splits work across its own threads; each calls BLAS serially. */
    openblas_set_num_threads(1);
}

const char *kiln_blas_init(void)
{
    pthread_once(&once, do_init);
    return openblas_get_corename();
}
