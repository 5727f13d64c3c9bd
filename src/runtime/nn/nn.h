/* nn/nn.h - internal hooks between the parts of the nn module. */
#ifndef KILN_RT_NN_H
#define KILN_RT_NN_H

#include "kiln/train.h"

/* Sets the model's error sentence (for kiln_model_error); returns -1. */
int kiln__model_fail(kiln_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How kiln_model_fit assembles batches: -1 (default) picks by cores, 0 the
 * prefetch thread, 1 a gather on the pool (nn/fit.c). For tests. */
extern int kiln__fit_batches_on_pool;

#endif
