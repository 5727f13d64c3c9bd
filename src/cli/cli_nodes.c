/* src/cli/cli_nodes.c - `kiln nodes list|describe|drain|uncordon`.
 *
 * Drain is the maintenance event of facts §6: the node takes no new
 * replicas, and replicas on it get SIGTERM, a grace period, SIGKILL; their
 * jobs are queued again and resume from their newest checkpoint. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_service.h"

#define PROG "kiln nodes"

#define COMMON_FLAGS                                                                               \
    "\n"                                                                                           \
    "Common flags: --endpoint URL, --format json|yaml|table, --ca-file FILE\n"                     \
    "(KILN_ENDPOINT, KILN_TOKEN, KILN_CA_FILE).\n"

static const char usage[] =
    "usage: kiln nodes list\n"
    "       kiln nodes describe NODE [--topology]\n"
    "       kiln nodes drain NODE      (cordon + stop its replicas; their jobs are requeued)\n"
    "       kiln nodes uncordon NODE [--gpu N]\n"
    "\n"
    "`kiln nodes COMMAND --help` describes one.\n" COMMON_FLAGS;

/* Each sub-command's own usage (`kiln nodes CMD --help`), and the suffix of
 * its request: NULL for list, "" for a GET of the node, ":verb" for a POST. */
static const struct nodes_cmd {
    const char *name, *suffix, *usage;
} nodes_cmds[] = {
    {"list", NULL,
     "usage: kiln nodes list\n\nLists kilnd's nodes: CPUs, memory, whether cordoned, and each "
     "accelerator\ntype's allocatable and total count (Slurm's state under --executor "
     "slurm).\n" COMMON_FLAGS},
    {"describe", "",
     "usage: kiln nodes describe NODE [--topology]\n\nPrints one node: its devices, which job "
     "holds each, and its state.\nWith --topology, the GPU topology NVML reports, as nvidia-smi "
     "topo -m prints it.\n" COMMON_FLAGS},
    {"drain", ":drain",
     "usage: kiln nodes drain NODE\n\nCordons the node (it takes no new replicas) and stops "
     "the replicas on it:\nSIGTERM, the grace period, SIGKILL. Their jobs are queued again and "
     "resume from\ntheir newest checkpoint elsewhere.\n" COMMON_FLAGS},
    {"uncordon", ":uncordon",
     "usage: kiln nodes uncordon NODE [--gpu N]\n\nLets a drained node take replicas again; "
     "with --gpu N, puts that GPU back in\nservice after a failure (an Xid, say) was looked "
     "at.\n" COMMON_FLAGS},
};

/* The node's "topology" (GET /v1/nodes/NODE) as `nvidia-smi topo -m` prints
 * it: a matrix of GPUn columns, NUMA affinity, the legend. 1 when the node
 * has none (kilnd read no topology: a declared node, or no NVML topology). */
static int print_topology(const json_t *node)
{
    const json_t *t = json_object_get(node, "topology");
    const json_t *gpus = json_object_get(t, "gpus"), *rows = json_object_get(t, "matrix");
    const json_t *numa = json_object_get(t, "numaAffinity");
    size_t n = json_array_size(gpus);
    if (!n || json_array_size(rows) != n) {
        fprintf(stderr, PROG ": node %s: no GPU topology (none of its GPUs is known to NVML)\n",
                json_string_value(json_object_get(node, "name")));
        return 1;
    }
    printf("\t");
    for (size_t c = 0; c < n; c++)
        printf("GPU%lld\t", (long long)json_integer_value(json_array_get(gpus, c)));
    printf("NUMA Affinity\n");
    for (size_t r = 0; r < n; r++) {
        const json_t *row = json_array_get(rows, r);
        printf("GPU%lld\t", (long long)json_integer_value(json_array_get(gpus, r)));
        for (size_t c = 0; c < n; c++) {
            const char *cell = json_string_value(json_array_get(row, c));
            printf(cell && strcmp(cell, "X") == 0 ? " X \t" : "%s\t", cell ? cell : "?");
        }
        const char *nn = json_string_value(json_array_get(numa, r));
        printf("%s\n", nn ? nn : "N/A");
    }
    printf("\nLegend:\n\n"
           "  X    = Self\n"
           "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
           "nodes (e.g., QPI/UPI)\n"
           "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
           "Bridges within a NUMA node\n"
           "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the "
           "CPU)\n"
           "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
           "Host Bridge)\n"
           "  PIX  = Connection traversing at most a single PCIe bridge\n"
           "  NV#  = Connection traversing a bonded set of # NVLinks\n");
    return 0;
}

/* "NVIDIA_TESLA_V100=4,..." from a {type: count} object */
static void counts(json_t *o, char *buf, size_t len)
{
    const char *k;
    json_t *v;
    size_t n = 0;
    buf[0] = '\0';
    json_object_foreach(o, k, v)
    {
        if (!json_is_integer(v) || strcmp(k, "cpu") == 0) continue; /* accelerators only */
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s=%lld", n ? "," : "", k,
                              (long long)json_integer_value(v));
        if (n >= len) break;
    }
    if (!buf[0]) snprintf(buf, len, "-");
}

static void table(json_t *nodes)
{
    size_t i;
    json_t *n;
    printf("%-20s %-5s %-9s %-8s %-36s %s\n", "NAME", "CPUS", "MEMORY_GB", "CORDONED",
           "ACCELERATORS (allocatable/capacity)", "");
    json_array_foreach(nodes, i, n)
    {
        char cap[256], alloc[256];
        counts(json_object_get(n, "capacity"), cap, sizeof cap);
        counts(json_object_get(n, "allocatable"), alloc, sizeof alloc);
        /* a Slurm node (kilnd --executor slurm): Slurm's state and reason */
        const char *sst = json_string_value(json_object_get(n, "slurmState"));
        const char *srs = json_string_value(json_object_get(n, "slurmReason"));
        printf("%-20s %-5lld %-9.1f %-8s %s / %s%s%s%s%s%s\n",
               json_string_value(json_object_get(n, "name")),
               (long long)json_integer_value(json_object_get(n, "cpus")),
               json_number_value(json_object_get(n, "memoryGb")),
               json_is_true(json_object_get(n, "cordoned")) ? "yes" : "no", alloc, cap,
               json_is_true(json_object_get(n, "simulatedAccelerators")) ? " (SIMULATED)" : "",
               sst ? "  slurm: " : "", sst ? sst : "", srs && *srs ? ": " : "",
               srs && *srs ? srs : "");
    }
}

int kiln_cli_nodes(int argc, char **argv)
{
    const struct nodes_cmd *cmd = NULL;
    kiln_cli_ctx ctx = {0};
    json_t *v = NULL;
    char *path = NULL, *ne = NULL;
    int rc = 1;

    argc--, argv++; /* past "nodes" */
    if (argc < 1) {
        fputs(usage, stderr);
        return 1;
    }
    for (size_t i = 0; i < sizeof nodes_cmds / sizeof *nodes_cmds && !cmd; i++)
        if (strcmp(argv[0], nodes_cmds[i].name) == 0) cmd = &nodes_cmds[i];
    if (!cmd) {
        bool help = kiln_cli_wants_help(1, argv) || strcmp(argv[0], "help") == 0;
        if (!help) fprintf(stderr, PROG ": unknown command '%s'\n", argv[0]);
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 1;
    }
    argc--, argv++;
    if (kiln_cli_wants_help(argc, argv)) { /* before kilnd is asked anything */
        fputs(cmd->usage, stdout);
        return 0;
    }
    if (kiln_cli_ctx_init(&ctx, &argc, argv, PROG) != 0) goto out;
    if (!cmd->suffix) {
        if (argc != 0) {
            fprintf(stderr, "%s", cmd->usage);
            goto out;
        }
        rc = kiln_cli_call(&ctx, "GET", "/v1/nodes", NULL, &v, PROG);
        if (rc != 0) goto out;
        json_t *nodes = json_object_get(v, "nodes");
        if (!ctx.format || strcmp(ctx.format, "table") == 0)
            table(nodes);
        else
            kiln_cli_print(stdout, nodes, ctx.format);
        goto out;
    }
    const char *suffix = cmd->suffix;
    /* uncordon NODE --gpu N: one GPU, not the node */
    long gpu = -1;
    if (strcmp(cmd->name, "uncordon") == 0 && argc == 3 && strcmp(argv[1], "--gpu") == 0) {
        char *end = NULL;
        gpu = strtol(argv[2], &end, 10);
        if (!end || *end || gpu < 0 || end == argv[2]) {
            fprintf(stderr, "%s: --gpu wants a GPU index (kiln nodes describe lists them)\n", PROG);
            goto out;
        }
        argc = 1;
    }
    /* describe NODE --topology: the GPU matrix instead of the node */
    bool topology = false;
    if (strcmp(cmd->name, "describe") == 0 && argc == 2 && strcmp(argv[1], "--topology") == 0) {
        topology = true;
        argc = 1;
    }
    if (argc != 1) {
        fprintf(stderr, "%s", cmd->usage);
        goto out;
    }
    if (!(ne = kiln_client_escape(ctx.client, argv[0]))) goto out;
    int pn = gpu >= 0 ? asprintf(&path, "/v1/nodes/%s/gpus/%ld%s", ne, gpu, suffix)
                      : asprintf(&path, "/v1/nodes/%s%s", ne, suffix);
    if (pn < 0) {
        path = NULL;
        goto out;
    }
    rc = kiln_cli_call(&ctx, *suffix ? "POST" : "GET", path, *suffix ? "{}" : NULL, &v, PROG);
    if (rc != 0) goto out;
    if (topology) {
        rc = print_topology(v);
        goto out;
    }
    if (gpu >= 0 && json_object_get(v, "gpuCheckQueued"))
        fprintf(stderr,
                "GPU %ld of node [%s]: a GPU check runs; it is back in service when the check "
                "passes (kiln nodes describe %s shows its result).\n",
                gpu, argv[0], argv[0]);
    else if (gpu >= 0)
        fprintf(stderr, "GPU %ld of node [%s] back in service.\n", gpu, argv[0]);
    else if (*suffix)
        fprintf(stderr, "Node [%s] %s.\n", argv[0],
                strcmp(suffix, ":drain") == 0 ? "cordoned and draining" : "uncordoned");
    kiln_cli_print_one(v, ctx.format, table);
out:
    json_decref(v);
    free(path);
    free(ne);
    kiln_cli_ctx_free(&ctx);
    return rc;
}
