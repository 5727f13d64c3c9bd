/* src/exec/supervisor/trainmetrics.c - see trainmetrics.h. */
#include "exec/supervisor/trainmetrics.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *in, *out;
} fields[] = {
    {"step", "step"},
    {"steps", "step"}, /* kiln-train's "done" line */
    {"epoch", "epoch"},
    {"loss", "loss"},
    {"accuracy", "accuracy"},
    {"test_loss", "testLoss"},
    {"test_accuracy", "testAccuracy"},
    {"samples_per_sec", "samplesPerSecond"},
};

json_t *kilnd_train_metrics_parse(const char *line, size_t n)
{
    json_t *in = NULL, *out = NULL;

    /* cheap test first: every log line passes through here */
    if (n < 2 || line[0] != '{' || !memmem(line, n, "\"event\"", 7)) return NULL;
    in = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(in)) goto out;
    const char *ev = json_string_value(json_object_get(in, "event"));
    if (!ev || (strcmp(ev, "epoch") != 0 && strcmp(ev, "done") != 0 && strcmp(ev, "metrics") != 0))
        goto out;
    json_t *rank = json_object_get(in, "rank");
    if (json_is_number(rank) && json_number_value(rank) > 0) goto out;
    out = json_pack("{s:s}", "event", ev);
    for (size_t i = 0; out && i < sizeof fields / sizeof fields[0]; i++) {
        json_t *v = json_object_get(in, fields[i].in);
        /* NaN and infinities have no JSON form: a diverged loss is left out */
        if (json_is_number(v) && isfinite(json_number_value(v)))
            json_object_set_new(out, fields[i].out,
                                json_is_integer(v) ? json_integer(json_integer_value(v))
                                                   : json_real(json_number_value(v)));
    }
    if (out && json_object_size(out) == 1) { /* an event with no numbers we know */
        json_decref(out);
        out = NULL;
    }
out:
    json_decref(in);
    return out;
}
