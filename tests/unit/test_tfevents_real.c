/* test_tfevents_real.c - the event file reader (src/tune/tfevents.c) on
 * files that the real writers wrote (tests/unit/tfevents_write.py):
 * torch.utils.tensorboard.SummaryWriter's scalars old and new style, and
 * tensorboard's EventFileWriter with TF2-style scalar tensors. Needs the
 * `torch` and `tensorboard` probes (Debian's /usr/bin/python3 has both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "kiln/tune.h"
#include "test.h"
#include "test_tune_helpers.h"

#include "../lib/probe.h"

static kiln_trial *sorted_by_step(kiln_trial *t)
{
    for (size_t i = 1; i < t->n_curve; i++)
        for (size_t k = i; k > 0 && t->curve_steps[k - 1] > t->curve_steps[k]; k--) {
            int64_t s = t->curve_steps[k];
            double v = t->curve_values[k];
            t->curve_steps[k] = t->curve_steps[k - 1];
            t->curve_values[k] = t->curve_values[k - 1];
            t->curve_steps[k - 1] = s;
            t->curve_values[k - 1] = v;
        }
    return t;
}

int main(void)
{
    kiln_test_need("torch");
    kiln_test_need("tensorboard");
    char dir[] = "/tmp/test_tfevents_real_XXXXXX", cmd[1024];
    if (!mkdtemp(dir)) return 1;
    const char *py =
        getenv("KILN_TEST_TORCH_PYTHON") ? getenv("KILN_TEST_TORCH_PYTHON") : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/unit/tfevents_write.py' '%s'", py, KILN_SOURCE_DIR,
             dir);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", cmd);

    kiln_job *j = hpjob_x("MINIMIZE", "loss", 1);
    kiln_study *s = kiln_study_new(&j->training_input.hyperparameters, 1);
    kiln_trial *t = kiln_study_next(s, (int64_t)tv.tv_sec * 1000000000LL);
    kiln_study_read_tfevents(s, t, dir);
    sorted_by_step(t); /* the two files are read in directory order */
    const double want[6] = {0.5, 0.25, 0.125, 0.0625, 0.75, 0.375};
    CHECK_MSG(t->n_curve == 6, "%zu scalars tagged loss", t->n_curve);
    for (size_t i = 0; i < t->n_curve && i < 6; i++)
        CHECK_MSG(t->curve_steps[i] == (int64_t)i + 1 && t->curve_values[i] == want[i],
                  "scalar %zu: step %lld value %g", i, (long long)t->curve_steps[i],
                  t->curve_values[i]);
    CHECK(t->n_tb == 2);
    kiln_study_free(s);
    kiln_job_free(j);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
