/* libFuzzer target: Logging filters (util/logfilter.h), the text of
 * entries:list's "filter". A filter that parses is matched against two
 * entries; a refusal must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/logfilter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kiln_diag d = KILN_DIAG_INIT;
    kiln_log_filter *f = NULL;
    kiln_err err = kiln_log_filter_parse(text, &f, &d);
    if (err == KILN_OK) {
        kiln_log_view e = {.resource_type = "ml_job",
                           .job_id = "j1",
                           .task_name = "master-replica-0",
                           .project_id = "p",
                           .insert_id = "00000000000000000001",
                           .severity = 400,
                           .ts_ns = 1764015360250000000LL};
        kiln_log_view empty = {0};
        (void)kiln_log_filter_match(f, &e);
        (void)kiln_log_filter_match(f, &empty);
        const char *job = kiln_log_filter_job(f);
        /* (unescaped quotes aside) the pinned job is text the filter holds */
        if (job && !strchr(text, '\\') && !strstr(text, job)) abort();
    } else if (f || (err != KILN_ENOMEM && d.n == 0)) {
        abort(); /* a refusal returns nothing and always says why */
    }
    kiln_log_filter_free(f);
    kiln_diag_free(&d);
    free(text);
    return 0;
}
