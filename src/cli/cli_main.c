/* src/cli/cli_main.c - the `kiln` command: dispatches to one function per verb
 * (src/cli/cli.h). A verb is one row in `verbs`; its function gets argv
 * starting at the verb's own name and returns the exit status. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_service.h"
#include "util/suggest.h"
#include "util/version.h"

typedef struct verb {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} verb;

static const verb verbs[] = {
    {"validate", kiln_cli_validate, "check a job (file, TFJob, flags) and print it normalised"},
    {"catalog", kiln_cli_catalog, "list machine types, accelerators and regions"},
    {"jobs", kiln_cli_jobs, "submit, describe, list, cancel jobs and stream their logs (kilnd)"},
    {"nodes", kiln_cli_nodes, "list, describe, drain and uncordon kilnd's nodes"},
    {"queues", kiln_cli_queues, "list and describe kilnd's ClusterQueues (kilnd --queues)"},
    {"notebooks", kiln_cli_notebooks, "list, describe notebook instances and exec in them"},
    {"tokens", kiln_cli_tokens, "tokens new: a fresh bearer token and its hashed tokens-file line"},
    {"admin", kiln_cli_admin,
     "admin backup, restore: a consistent copy of kilnd's store while it serves; put one back"},
    {"local", kiln_cli_local, "local train: run one job on this machine without a kilnd"},
};
#define NVERBS (sizeof verbs / sizeof *verbs)

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln COMMAND [ARGS...]\n"
               "       kiln --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\n`kiln COMMAND --help` describes a command; docs/cli.md has the details.\n");
}

static int unknown(const char *name)
{
    const char *names[NVERBS];
    for (size_t i = 0; i < NVERBS; i++)
        names[i] = verbs[i].name;
    const char *near = kiln__suggest(name, names, NVERBS);
    fprintf(stderr, "kiln: unknown command '%s'", name);
    if (near) fprintf(stderr, "; did you mean '%s'?", near);
    fprintf(stderr, "\n(`kiln --help` lists the commands)\n");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("kiln %s\n", kiln__version_string());
        return 0;
    }
    for (size_t i = 0; i < NVERBS; i++)
        if (strcmp(cmd, verbs[i].name) == 0) return verbs[i].run(argc - 1, argv + 1);
    return unknown(cmd);
}
