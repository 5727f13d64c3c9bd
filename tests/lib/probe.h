/* tests/lib/probe.h - the C side of tests/lib/probe.sh (header only).
 *
 *     kiln_test_need("tensorboard");
 *
 * returns when the probe passes; otherwise prints the same line as the shell
 * side ("SKIP [NAME]: why; to run it: remedy") and exits 77, CTest's skip.
 * The probe itself is the shell one (one definition of each probe), read from
 * $KILN_PROBE_DIR's cache when CTest's `probes` fixture filled it. Needs
 * KILN_SOURCE_DIR defined to the source tree. */
#ifndef KILN_TEST_PROBE_H
#define KILN_TEST_PROBE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#ifndef KILN_SOURCE_DIR
#error "probe.h needs KILN_SOURCE_DIR"
#endif

static inline void kiln_test_need(const char *probe)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh '%s/tests/lib/probe.sh' check '%s'", KILN_SOURCE_DIR, probe);
    fflush(stdout);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) {
        printf("FAIL: could not run the probe '%s' (%s)\n", probe, cmd);
        exit(1);
    }
    if (WEXITSTATUS(st) == 77) exit(77); /* the skip line is printed by probe.sh */
    if (WEXITSTATUS(st) != 0) {
        printf("FAIL: the probe '%s' exited %d\n", probe, WEXITSTATUS(st));
        exit(1);
    }
}

#endif
