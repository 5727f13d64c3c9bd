/* fuzz_slurm_answers.c - libFuzzer target for what kilnd reads of Slurm
 * under --executor slurm (src/exec/slurm/alloc.c): squeue's rows, a
 * step's usage as sstat gives it, and an allocation's layout file (written by a batch script on a
 * node, so by the job's user). Any bytes: never a crash or a read past them; a layout accepted
 * names a node for every task, and no row is kept twice or without its name's prefix. Replayed over
 * tests/fuzz/corpus/ fuzz_slurm_answers in every build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/slurm/alloc.h"

static char *answer;

/* Slurm's commands, answered with the fuzzer's bytes */
int kiln_slurm_run(char *const argv[], char **out, int timeout_s)
{
    (void)argv, (void)timeout_s;
    *out = strdup(answer);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    /* the first byte picks the components' task counts */
    int shape = size ? data[0] : 0;
    kiln_slurm_comp comps[3] = {
        {.tasks = 1 + shape % 3}, {.tasks = 1 + shape / 3 % 4}, {.tasks = 2}};
    size_t n = 1 + (size_t)(shape / 12 % 3);
    kiln_slurm_node_name a[3], b[4], c[2];
    kiln_slurm_node_name *const rows[3] = {a, b, c};
    memset(a, 0, sizeof a), memset(b, 0, sizeof b), memset(c, 0, sizeof c);
    if (kiln_slurm_alloc_layout_parse(size ? text + 1 : text, comps, n, rows) == KILN_OK)
        for (size_t k = 0; k < n; k++)
            for (int t = 0; t < comps[k].tasks; t++)
                if (!rows[k][t][0]) abort();
    answer = text;
    kiln_slurm_alloc_list l;
    kiln_slurm_alloc_list_read("kiln-", &l);
    for (size_t i = 0; i < l.n; i++) {
        if (strncmp(l.rows[i].name, "kiln-", 5) != 0 || l.rows[i].id <= 0) abort();
        for (size_t k = 0; k < i; k++)
            if (l.rows[k].id == l.rows[i].id) abort();
    }
    kiln_slurm_alloc_list_free(&l);
    /* squeue's steps and sstat's usage ("1.0|w\ncpu=00:00:03,mem=4K"):
     * the same bytes answer both */
    unsigned long long us = 0;
    long long mem = 0;
    if (kiln_slurm_step_usage(1, "w", &us, &mem) && mem < 0) abort();
    free(text);
    return 0;
}
