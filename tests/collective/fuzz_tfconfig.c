/* fuzz_tfconfig.c - libFuzzer target for the TF_CONFIG parser: any bytes must
 * either parse into a consistent group or fail with a message, never crash or
 * leak. Replayed over tests/collective/corpus/fuzz_tfconfig in every build. */
#include "kiln/collective.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[256];
    kiln_tf_group g;

    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* TF_CONFIG comes from the environment: a C string */
    kiln_err e = kiln_tf_config_parse(text, &g, err, sizeof err);
    if (e == KILN_OK) {
        if (g.world_size < 1 || g.rank < -1 || g.rank >= g.world_size || !g.hosts ||
            strlen(g.key) != 18)
            abort();
        for (int i = 0; i < g.world_size; i++)
            if (!g.hosts[i] || !g.hosts[i][0]) abort();
    } else if (!err[0] || g.hosts || g.world_size != 0) {
        abort(); /* a failure always says why and leaves nothing behind */
    }
    kiln_tf_group_free(&g);
    free(text);
    return 0;
}
