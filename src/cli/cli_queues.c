/* src/cli/cli_queues.c - `kiln queues list|describe` (kilnd --queues,
 * docs/queues.md): each ClusterQueue's quota, usage, borrowing, pending and
 * admitted jobs and weighted share, from GET /v1/queues. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_service.h"

#define PROG "kiln queues"

static const char usage[] =
    "usage: kiln queues list\n"
    "       kiln queues describe CLUSTER_QUEUE\n"
    "\n"
    "Lists kilnd's ClusterQueues (kilnd --queues): cohort, pending and admitted jobs,\n"
    "GPUs in use of the nominal quota, GPUs borrowed, and the weighted share; describe\n"
    "prints one as a kueue.x-k8s.io/v1beta2 ClusterQueue (--format yaml, the default, or\n"
    "json: every default spelt out, status with each flavor's usage), or its row\n"
    "(--format table).\n"
    "\n"
    "Common flags: --endpoint URL, --format json|yaml|table, --ca-file FILE\n"
    "(KILN_ENDPOINT, KILN_TOKEN, KILN_CA_FILE).\n";

/* "usage/nominal" of nvidia.com/gpu over every flavor ("-" when not covered) */
static void gpus(json_t *cq, char *buf, size_t len)
{
    long long use = 0, nom = 0;
    bool any = false;
    size_t g, f, r;
    json_t *grp, *fl, *res;
    json_array_foreach(json_object_get(cq, "resourceGroups"), g, grp)
    {
        json_array_foreach(json_object_get(grp, "flavors"), f, fl)
        {
            json_array_foreach(json_object_get(fl, "resources"), r, res)
            {
                if (strcmp(json_string_value(json_object_get(res, "name")), "nvidia.com/gpu"))
                    continue;
                any = true;
                use += atoll(json_string_value(json_object_get(res, "usage")));
                nom += atoll(json_string_value(json_object_get(res, "nominalQuota")));
            }
        }
    }
    if (any)
        snprintf(buf, len, "%lld/%lld", use, nom);
    else
        snprintf(buf, len, "-");
}

static void table(json_t *cqs)
{
    size_t i;
    json_t *cq;
    printf("%-24s %-12s %-8s %-9s %-10s %-9s %s\n", "CLUSTER_QUEUE", "COHORT", "PENDING",
           "ADMITTED", "GPUS", "BORROWED", "WEIGHTED_SHARE");
    json_array_foreach(cqs, i, cq)
    {
        char g[64];
        gpus(cq, g, sizeof g);
        const char *cohort = json_string_value(json_object_get(cq, "cohort"));
        printf(
            "%-24s %-12s %-8lld %-9lld %-10s %-9s %lld\n",
            json_string_value(json_object_get(cq, "name")), cohort ? cohort : "-",
            (long long)json_integer_value(json_object_get(cq, "pendingWorkloads")),
            (long long)json_integer_value(json_object_get(cq, "admittedWorkloads")), g,
            json_string_value(json_object_get(json_object_get(cq, "borrowed"), "nvidia.com/gpu")),
            (long long)json_integer_value(json_object_get(cq, "weightedShare")));
    }
}

int kiln_cli_queues(int argc, char **argv)
{
    kiln_cli_ctx ctx = {0};
    json_t *v = NULL;
    char *path = NULL, *ne = NULL;
    int rc = 1;

    argc--, argv++; /* past "queues" */
    if (argc < 1 || kiln_cli_wants_help(1, argv) || strcmp(argv[0], "help") == 0) {
        bool help = argc >= 1;
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 1;
    }
    bool list = strcmp(argv[0], "list") == 0, describe = strcmp(argv[0], "describe") == 0;
    if (!list && !describe) {
        fprintf(stderr, PROG ": unknown command '%s'\n%s", argv[0], usage);
        return 1;
    }
    argc--, argv++;
    if (kiln_cli_wants_help(argc, argv)) { /* before kilnd is asked anything */
        kiln_cli_sub_usage(usage, list ? "kiln queues list" : "kiln queues describe", stdout);
        return 0;
    }
    if (kiln_cli_ctx_init(&ctx, &argc, argv, PROG) != 0) goto out;
    if (argc != (list ? 0 : 1)) {
        fputs(usage, stderr);
        goto out;
    }
    if (list) {
        rc = kiln_cli_call(&ctx, "GET", "/v1/queues", NULL, &v, PROG);
        if (rc != 0) goto out;
        json_t *cqs = json_object_get(v, "clusterQueues");
        if (!ctx.format || strcmp(ctx.format, "table") == 0)
            table(cqs);
        else
            kiln_cli_print(stdout, cqs, ctx.format);
        goto out;
    }
    if (!(ne = kiln_client_escape(ctx.client, argv[0]))) goto out;
    /* yaml and json: the ClusterQueue as Kueue v1beta2 writes it; table: kiln's row */
    bool kueue = !ctx.format || strcmp(ctx.format, "table") != 0;
    if (asprintf(&path, "/v1/queues/%s%s", ne, kueue ? "?view=kueue" : "") < 0) {
        path = NULL;
        goto out;
    }
    rc = kiln_cli_call(&ctx, "GET", path, NULL, &v, PROG);
    if (rc != 0) goto out;
    kiln_cli_print_one(v, ctx.format, table);
out:
    json_decref(v);
    free(path);
    free(ne);
    kiln_cli_ctx_free(&ctx);
    return rc;
}
