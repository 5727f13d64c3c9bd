/* fuzz_trainmetrics.c - libFuzzer target for the training metrics protocol
 * (src/exec/supervisor/trainmetrics.c), which reads whatever a job prints on stdout:
 * any bytes either are no report or give an object with a known event and
 * only finite numbers (what /metrics and the job's JSON then print); never a
 * crash or a read past the line. Replayed over tests/fuzz/corpus/
 * fuzz_trainmetrics in every build. */
#include "exec/supervisor/trainmetrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly `size` bytes: ASan sees any read past the line */
    char *line = malloc(size ? size : 1);
    if (!line) return 0;
    if (size) memcpy(line, data, size);
    json_t *o = kilnd_train_metrics_parse(line, size);
    if (o) {
        const char *key;
        json_t *v;
        const char *ev = json_string_value(json_object_get(o, "event"));
        if (!ev ||
            (strcmp(ev, "epoch") != 0 && strcmp(ev, "done") != 0 && strcmp(ev, "metrics") != 0))
            abort();
        json_object_foreach(o, key, v)
        {
            if (strcmp(key, "event") == 0) continue;
            if (!json_is_number(v) || !isfinite(json_number_value(v))) abort();
        }
        if (json_object_size(o) < 2) abort();
        json_decref(o);
    }
    free(line);
    return 0;
}
