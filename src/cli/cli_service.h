/* src/cli/cli_service.h - the service verbs of `kiln` (talk to kilnd) and the
 * helpers they share. Exit status: 0 ok, 1 usage error or kilnd unreachable,
 * 2 the request was refused as invalid (400), 3 not found (404), 4 denied
 * (401/403), 5 the job ended in FAILED or CANCELLED (stream-logs, submit
 * --stream-logs). */
#ifndef KILN_CLI_SERVICE_H
#define KILN_CLI_SERVICE_H

#include <jansson.h>
#include <stdio.h>

#include "kiln/client.h"

int kiln_cli_jobs(int argc, char **argv);      /* src/cli/cli_jobs.c */
int kiln_cli_nodes(int argc, char **argv);     /* src/cli/cli_nodes.c */
int kiln_cli_notebooks(int argc, char **argv); /* src/cli/cli_notebooks.c */
int kiln_cli_queues(int argc, char **argv);    /* src/cli/cli_queues.c */
int kiln_cli_local(int argc, char **argv);     /* src/cli/cli_jobs.c: `kiln local train` */

/* What every service verb takes: --project, --endpoint, --format (and the
 * KILN_PROJECT, KILN_ENDPOINT, KILN_TOKEN environment variables). */
typedef struct kiln_cli_ctx {
    kiln_client *client;
    const char *project; /* default "default" */
    const char *format;  /* json | yaml | table; NULL = the verb's default */
} kiln_cli_ctx;

/* Removes the common flags from argv (only before a bare `--`), compacting
 * it; makes the client. Returns 0, or 1 after printing the problem. */
int kiln_cli_ctx_init(kiln_cli_ctx *ctx, int *argc, char **argv, const char *prog);
void kiln_cli_ctx_free(kiln_cli_ctx *ctx);

/* METHOD path [body]: on 2xx returns 0 and *out (caller decrefs); else prints
 * kilnd's error (the envelope's message and every fieldViolation as FIELD:
 * DESCRIPTION) and returns the exit status. */
int kiln_cli_call(kiln_cli_ctx *ctx, const char *method, const char *path, const char *body,
                  json_t **out, const char *prog);

/* Prints a value as JSON or YAML (block style). */
void kiln_cli_print(FILE *f, json_t *v, const char *format);

/* Prints one object a describe-like verb fetched: `table` prints it as a
 * one-row table through the verb's own `table` (which takes an array),
 * anything else as kiln_cli_print does, YAML by default. */
void kiln_cli_print_one(json_t *v, const char *format, void (*table)(json_t *rows));

#endif
