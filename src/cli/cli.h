/* src/cli/cli.h - the verbs of the `kiln` command, one file per verb group.
 * Each returns the process exit status: 0 ok, 1 unreadable input or usage
 * error, 2 the input was read but is invalid. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int kiln_cli_validate(int argc, char **argv); /* src/cli/cli_validate.c */
int kiln_cli_catalog(int argc, char **argv);  /* src/cli/catalog.c */
int kiln_cli_tokens(int argc, char **argv);   /* src/cli/cli_tokens.c */
int kiln_cli_admin(int argc, char **argv);    /* src/cli/admin.c */

/* Whether a command line asks for help: --help or -h anywhere before a
 * bare `--` (after it, they are the program's own arguments). Every command
 * and sub-command answers it with its usage on stdout and exit 0, before it
 * reads a file or talks to kilnd. Inline: kiln-svc-cli (tests/service)
 * links the service verbs without this directory's other files. */
static inline bool kiln_cli_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
    return false;
}

/* A sub-command's usage (`kiln X SUB --help`) cut from its command's usage
 * text: the line that names `cmdline` ("kiln X SUB") as "usage: ...", then
 * the text after the usage lines. The whole text when no line names it. */
static inline void kiln_cli_sub_usage(const char *usage, const char *cmdline, FILE *out)
{
    const char *p = strstr(usage, cmdline), *rest = strstr(usage, "\n\n");
    if (!p) {
        fputs(usage, out);
        return;
    }
    fprintf(out, "usage: %.*s\n%s", (int)strcspn(p, "\n"), p, rest ? rest : "\n");
}

#endif
