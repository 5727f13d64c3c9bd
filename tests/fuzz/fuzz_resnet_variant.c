/* fuzz_resnet_variant.c - libFuzzer target for the names of kiln-train
 * resnet50's step variants (src/runtime/models/resnet_variant.c: --variant
 * and KILN_RESNET_VARIANT): any bytes either parse, in every precision, to
 * a variant whose canonical name parses back to the same features, or fail
 * with a sentence naming the flag; never a crash or a read out of bounds.
 * Replayed over tests/fuzz/corpus/fuzz_resnet_variant in every build. */
#include "models/resnet_variant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), err[512];
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0'; /* a NUL inside ends the name, as argv would */
    for (int p = -1; p < 4; p++) {
        kiln_resnet_variant v, w;
        err[0] = '\0';
        if (kiln_resnet_variant_parse("--variant", s, p, &v, err, sizeof err) == 0) {
            if (kiln_resnet_variant_parse("--variant", v.name, p, &w, err, sizeof err) != 0 ||
                w.features != v.features || strcmp(w.name, v.name) != 0)
                abort(); /* the canonical name is a name */
        } else if (strncmp(err, "--variant", 9) != 0) {
            abort(); /* a refusal names the flag */
        }
    }
    free(s);
    return 0;
}
