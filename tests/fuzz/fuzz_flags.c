/* libFuzzer target: gcloud-style flags. The input is split on NUL or newline
 * into argv. File-reading flags are dropped so the fuzzer cannot wander the
 * file system; everything else goes through parse + build, and a built job
 * must survive a JSON round trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/submit.h"

#define MAX_ARGS 64

static int reads_files(const char *a)
{
    static const char *const f[] = {"--config", "--tfjob", "--catalog", "--package-path"};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (strncmp(a, f[i], strlen(f[i])) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    for (char *p = buf, *end = buf + size; p <= end && argc < MAX_ARGS;) {
        char *q = p;
        while (q < end && *q != 0 && *q != '\n')
            q++;
        *q = 0;
        if (!reads_files(p)) argv[argc++] = p;
        p = q + 1;
    }
    argv[argc] = NULL;

    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    memset(&a, 0, sizeof a);
    if (kiln_submit_parse(argc, argv, &a, &d) == KILN_OK &&
        kiln_submit_build(&a, &job, &d) == KILN_OK) {
        char *js = kiln_job_to_json(job, KILN_ENC_COMPACT);
        kiln_job *back = NULL;
        if (!js || kiln_job_from_json(js, strlen(js), &back, &d) != KILN_OK ||
            !kiln_job_equal(job, back))
            abort();
        kiln_strv pa = {0};
        if (kiln_job_program_args(job, &pa) != KILN_OK) abort();
        kiln_strv_clear(&pa);
        kiln_job_free(back);
        free(js);
    }
    kiln_job_free(job);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
    free(buf);
    return 0;
}
