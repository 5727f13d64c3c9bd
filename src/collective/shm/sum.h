/* sum.h - the element-wise sum at the heart of the shm all-reduce.
 *
 *     out[i] = (((src[0][i] + src[1][i]) + src[2][i]) + ...)    for i < n
 *
 * and, when out2 is not NULL, out2[i] = out[i] too (the reducing rank writes
 * its slice both to its own buffer and to the segment for its peers, in one
 * pass). The order of additions is fixed (source 0 first), so the vector
 * paths give results bit-identical to the reference: vectorising runs across
 * elements and never reassociates one element's sum.
 *
 * Aliasing: out and out2 may each be one of the sources, at the same index
 * (the all-reduce sums in place, into its own buffer and a peer's): every
 * path reads all sources of an element before writing it. Otherwise out and
 * out2 must not overlap anything. */
#ifndef KILN_COLL_SUM_H
#define KILN_COLL_SUM_H

#include <stddef.h>

typedef void (*kiln__sum_fn)(float *out, float *out2, const float *const *src, int nsrc, size_t n);

void kiln__sum_ref(float *out, float *out2, const float *const *src, int nsrc, size_t n);
/* NULL when the CPU lacks the instructions (checked at run time). */
kiln__sum_fn kiln__sum_avx2(void);
kiln__sum_fn kiln__sum_avx512(void);
/* The fastest the CPU supports; $KILN_COLL_SUM=ref|avx2|avx512 forces one. */
kiln__sum_fn kiln__sum_best(void);
const char *kiln__sum_best_name(void);

#endif
