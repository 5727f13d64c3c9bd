/* tests/runtime/test_summary_tb.c - the event files kiln writes, read by the
 * real TensorBoard (tests/runtime/tb_read.py, EventAccumulator).
 *
 * Interpreters tried in order: $KILN_PYTHON, python3 on PATH, /usr/bin/python3;
 * the first that can import tensorboard decides. Whether one can is the
 * `tensorboard` probe of tests/lib/probe.sh: where it fails the test prints
 * its SKIP line and exits 77 (tensorboard is a pip package that
 * scripts/bootstrap installs, not a Debian one, so it may be absent); where it
 * passes, no interpreter reading the files is a failure, not a skip. */
#include "summary/summary.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/probe.h"

int main(void)
{
    char dir[256], logdir[300], cmd[2048];
    kiln_errmsg e = {{0}};
    kiln_test_need("tensorboard");
    snprintf(dir, sizeof dir, "/tmp/kiln-test-tb-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(logdir, sizeof logdir, "%s/train", dir);
    kiln_summary_writer *w;
    CHECK(kiln_summary_open(logdir, &w, &e) == KILN_OK);
    if (w) {
        for (int s = 1; s <= 20; s++)
            CHECK(kiln_summary_scalar(w, "loss", s, 2.0f / (float)s) == KILN_OK);
        const char *tags[3] = {"accuracy", "samples_per_sec", "learning_rate"};
        float vals[3] = {0.8125f, 40000.0f, 0.001f};
        CHECK(kiln_summary_scalars(w, 20, 3, tags, vals) == KILN_OK);
        CHECK(kiln_summary_close(w) == KILN_OK);
    }

    const char *cands[3] = {getenv("KILN_PYTHON"), "python3", "/usr/bin/python3"};
    int ran = 0;
    for (int i = 0; i < 3 && !ran; i++) {
        if (!cands[i] || !*cands[i]) continue;
        snprintf(cmd, sizeof cmd,
                 "'%s' '%s/tests/runtime/tb_read.py' '%s' loss:1:2 loss:4:0.5 loss:20:0.1 "
                 "accuracy:20:0.8125 samples_per_sec:20:40000 learning_rate:20:0.001",
                 cands[i], KILN_SOURCE_DIR, logdir);
        fflush(stdout);
        int st = system(cmd);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (code == 77 || code == 127)
            continue; /* no tensorboard (or no such interpreter): try the next */
        ran = 1;
        CHECK_MSG(code == 0, "tb_read.py with %s exited %d", cands[i], code);
    }
    CHECK_MSG(ran, "the tensorboard probe passed, yet no interpreter could read the files");

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    TEST_DONE();
}
