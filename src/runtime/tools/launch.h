/* tools/launch.h - kiln-train's --world_size launcher: forks N local
 * replicas of one all-reduce group, each of which then makes its strategy
 * (kiln/strategy.h) with world_size N, its rank and the launcher's key.
 * Tied to the program: rank 0's stdout is the program's output, the others'
 * goes to /dev/null, and failures are named on stderr as kiln-train's. */
#ifndef KILN_TOOL_LAUNCH_H
#define KILN_TOOL_LAUNCH_H

#include "tools/tool.h"

#include <stddef.h>

/* A key for the group's shared memory, unique to this launcher (pid, time). */
void kt_launch_key(char *key, size_t n);

/* Forks n replicas. Returns -1 in each child, with *rank set (rank > 0
 * children have stdout on /dev/null); in the parent, waits for them all and
 * returns the program's exit code: 0, 143 when they stopped on SIGTERM (the
 * parent's SIGTERM/SIGINT is forwarded), else non-zero after naming the
 * replica that failed on stderr (the others are stopped). Afterwards removes
 * whatever shared memory of `key` the replicas left. Call it before any
 * thread exists. */
int kt_launch(int n, const char *key, int *rank);

/* kiln_train_ps_main, the parameter_server hook, is declared in tools/tool.h;
 * launch.c holds its weak default. */

#endif
