/* src/cli/cli_notebooks.c - `kiln notebooks list|describe|exec` (docs/notebooks.md).
 *
 * list and describe read the Notebooks API kilnd serves (the one `gcloud
 * notebooks instances` speaks); exec runs a command in a running instance
 * through kiln's :exec, as the instance's user in its environment, and
 * exits with the command's status. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_service.h"

#define PROG "kiln notebooks"

static const char usage[] =
    "usage: kiln notebooks list [--location L]\n"
    "       kiln notebooks describe INSTANCE [--location L]\n"
    "       kiln notebooks exec INSTANCE [--location L] [--timeout SECONDS] -- COMMAND [ARGS...]\n"
    "\n"
    "Notebook instances (JupyterLab on GPUs behind kilnd; create them with `gcloud\n"
    "notebooks instances create`). exec runs COMMAND in the ACTIVE instance as its\n"
    "Jupyter runs (the project's user, its home, its environment and GPUs), prints\n"
    "its output and exits with its status (default timeout 60 s, at most 600).\n"
    "--location defaults to '-' (any). Common flags: --project P (KILN_PROJECT),\n"
    "--endpoint URL (KILN_ENDPOINT), --format json|yaml|table, --ca-file FILE;\n"
    "KILN_TOKEN.\n";

static void table(json_t *list)
{
    size_t i;
    json_t *n;
    printf("%-24s %-14s %-13s %-16s %-24s %s\n", "NAME", "LOCATION", "STATE", "MACHINE_TYPE",
           "GPUS", "PROXY_URI");
    json_array_foreach(list, i, n)
    {
        const char *full = json_string_value(json_object_get(n, "name"));
        const char *base = full && strrchr(full, '/') ? strrchr(full, '/') + 1 : full;
        const char *loc = full ? strstr(full, "/locations/") : NULL;
        char locb[64] = "-", gpus[128] = "-";
        if (loc) snprintf(locb, sizeof locb, "%.*s", (int)strcspn(loc + 11, "/"), loc + 11);
        json_t *acc = json_object_get(n, "acceleratorConfig");
        json_t *held = json_object_get(json_object_get(n, "kiln"), "gpus");
        if (json_object_get(acc, "coreCount"))
            snprintf(gpus, sizeof gpus, "%s x %s%s",
                     json_string_value(json_object_get(acc, "coreCount"))
                         ? json_string_value(json_object_get(acc, "coreCount"))
                         : "?",
                     json_string_value(json_object_get(acc, "type"))
                         ? json_string_value(json_object_get(acc, "type"))
                         : "?",
                     json_array_size(held) ? " (held)" : "");
        const char *st = json_string_value(json_object_get(n, "state"));
        const char *mt = json_string_value(json_object_get(n, "machineType"));
        const char *px = json_string_value(json_object_get(n, "proxyUri"));
        printf("%-24s %-14s %-13s %-16s %-24s %s\n", base ? base : "?", locb, st ? st : "?",
               mt ? mt : "?", gpus, px ? px : "-");
    }
}

int kiln_cli_notebooks(int argc, char **argv)
{
    kiln_cli_ctx ctx = {0};
    json_t *v = NULL, *body = NULL;
    char *path = NULL, *ne = NULL, *pe = NULL, *text = NULL;
    const char *loc = "-", *timeout = NULL;
    int rc = 1;

    argc--, argv++; /* past "notebooks" */
    if (argc < 1 || kiln_cli_wants_help(1, argv) || strcmp(argv[0], "help") == 0) {
        bool help = argc >= 1;
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 1;
    }
    const char *cmd = argv[0];
    argc--, argv++;
    if (kiln_cli_wants_help(argc, argv)) {
        char sub[64];
        snprintf(sub, sizeof sub, "kiln notebooks %.40s", cmd);
        kiln_cli_sub_usage(usage, sub, stdout);
        return 0;
    }
    if (kiln_cli_ctx_init(&ctx, &argc, argv, PROG) != 0) goto out;
    /* --location / --timeout, before a bare -- */
    int k = 0, dashdash = -1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            dashdash = k;
            for (; i < argc; i++)
                argv[k++] = argv[i];
            break;
        }
        if ((strcmp(argv[i], "--location") == 0 || strcmp(argv[i], "--timeout") == 0) &&
            i + 1 < argc) {
            *(argv[i][2] == 'l' ? &loc : &timeout) = argv[i + 1];
            i++;
            continue;
        }
        argv[k++] = argv[i];
    }
    argc = k;
    if (!(pe = kiln_client_escape(ctx.client, ctx.project))) goto out;
    if (strcmp(cmd, "list") == 0 && argc == 0) {
        if (asprintf(&path, "/v1/projects/%s/locations/%s/instances", pe, loc) < 0) goto oom;
        if ((rc = kiln_cli_call(&ctx, "GET", path, NULL, &v, PROG)) != 0) goto out;
        json_t *list = json_object_get(v, "instances");
        if (!ctx.format || strcmp(ctx.format, "table") == 0)
            table(list);
        else
            kiln_cli_print(stdout, list, ctx.format);
        goto out;
    }
    if (strcmp(cmd, "describe") == 0 && argc == 1) {
        if (!(ne = kiln_client_escape(ctx.client, argv[0]))) goto oom;
        if (asprintf(&path, "/v1/projects/%s/locations/%s/instances/%s", pe, loc, ne) < 0) goto oom;
        if ((rc = kiln_cli_call(&ctx, "GET", path, NULL, &v, PROG)) != 0) goto out;
        kiln_cli_print(stdout, v, ctx.format ? ctx.format : "yaml");
        goto out;
    }
    if (strcmp(cmd, "exec") == 0 && dashdash == 1 && argc > 2) {
        json_t *command = json_array();
        for (int i = 2; i < argc; i++)
            json_array_append_new(command, json_string(argv[i]));
        body = json_pack("{s:o}", "command", command);
        if (timeout) json_object_set_new(body, "timeoutSeconds", json_integer(atoll(timeout)));
        if (!body || !(text = json_dumps(body, JSON_COMPACT))) goto oom;
        if (!(ne = kiln_client_escape(ctx.client, argv[0]))) goto oom;
        if (asprintf(&path, "/v1/projects/%s/locations/%s/instances/%s:exec", pe, loc, ne) < 0)
            goto oom;
        if ((rc = kiln_cli_call(&ctx, "POST", path, text, &v, PROG)) != 0) goto out;
        fputs(json_string_value(json_object_get(v, "stdout")) ?: "", stdout);
        fputs(json_string_value(json_object_get(v, "stderr")) ?: "", stderr);
        if (json_is_true(json_object_get(v, "truncated")))
            fprintf(stderr, PROG ": output cut at 1 MiB per stream\n");
        if (json_is_true(json_object_get(v, "timedOut")))
            fprintf(stderr, PROG ": the command ran past its timeout and was killed\n");
        rc = (int)json_integer_value(json_object_get(v, "exitCode"));
        goto out;
    }
    fputs(usage, stderr);
    goto out;
oom:
    fprintf(stderr, PROG ": out of memory\n");
out:
    json_decref(v);
    json_decref(body);
    free(text);
    free(path);
    free(ne);
    free(pe);
    kiln_cli_ctx_free(&ctx);
    return rc;
}
