/* fuzz_example.c - libFuzzer target for the tf.Example reader of ImageNet's
 * records (src/runtime/data/example.c): any bytes either give an image that
 * lies inside the input and a label, or fail with a reason; never a crash
 * or a read out of bounds. Replayed over tests/fuzz/corpus/fuzz_example in
 * every build. */
#include "data/example.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *img = NULL;
    size_t n = 0;
    int64_t label = 0;
    const char *why = NULL;
    if (kiln_example_image(data, size, &img, &n, &label, &why) == 0) {
        if (!img || img < data || n > size || img + n > data + size) abort();
        volatile uint8_t sum = 0; /* touch every image byte (ASan checks the bounds) */
        for (size_t i = 0; i < n; i++)
            sum = (uint8_t)(sum + img[i]);
    } else if (!why || !*why) {
        abort(); /* a failure always says why */
    }
    return 0;
}
