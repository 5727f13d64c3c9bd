/* tests/service/cli_driver.c - `kiln-svc-cli jobs|nodes ...`: the service
 * verbs of `kiln` without the shared dispatcher (src/cli/cli_main.c), so that
 * the integration tests run even where `kiln` does not dispatch them yet. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_service.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "jobs") == 0) return kiln_cli_jobs(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "nodes") == 0) return kiln_cli_nodes(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "queues") == 0) return kiln_cli_queues(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "notebooks") == 0)
        return kiln_cli_notebooks(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "local") == 0) return kiln_cli_local(argc - 1, argv + 1);
    fprintf(stderr, "usage: kiln-svc-cli jobs|nodes|local ...\n");
    return 1;
}
