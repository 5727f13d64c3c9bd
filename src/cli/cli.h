/* src/cli/cli.h - the verbs of the `kiln` command, one file per verb group.
 * Each returns the process exit status: 0 ok, 1 unreadable input or usage
 * error, 2 the input was read but is invalid. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

int kiln_cli_validate(int argc, char **argv); /* src/cli/validate.c */
int kiln_cli_catalog(int argc, char **argv);  /* src/cli/catalog.c */
int kiln_cli_tokens(int argc, char **argv);   /* src/cli/tokens.c */

#endif
