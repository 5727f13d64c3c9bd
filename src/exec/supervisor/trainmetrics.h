/* src/exec/supervisor/trainmetrics.h - training metrics read from a replica's output.
 *
 * The protocol (docs/service.md, "Training metrics"): a replica reports by
 * printing one JSON object on one line of its stdout, with "event" one of
 * "epoch", "done" or "metrics" and any of the numbers step, epoch, loss,
 * accuracy, test_loss, test_accuracy, samples_per_sec. kiln-train prints
 * exactly these lines under kilnd. Lines from a replica that says "rank" > 0
 * are a worker's partial view and are ignored: the chief speaks for the job.
 * Anything else on stdout is just a log line. */
#ifndef KILND_TRAINMETRICS_H
#define KILND_TRAINMETRICS_H

#include <jansson.h>
#include <stddef.h>

/* When `line` (n bytes, not NUL-terminated) is a metrics report, returns a
 * new object with the numbers under kiln's camelCase names (step, epoch, loss,
 * accuracy, testLoss, testAccuracy, samplesPerSecond) plus "event"; NULL
 * otherwise. The caller owns the result. */
json_t *kilnd_train_metrics_parse(const char *line, size_t n);

#endif
