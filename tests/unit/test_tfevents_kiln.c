/* test_tfevents_kiln.c - the event file reader (src/tune/tfevents.c) on the
 * files kiln-train itself writes (src/runtime/summary): a 2-epoch run's eval
 * events hold its test accuracy per epoch, and the reader must give exactly
 * the values of kiln-train's own JSON epoch lines, at the same steps. Run
 * from the build directory (CTest's default), where bin/kiln-train is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "kiln/tune.h"
#include "test.h"
#include "test_tune_helpers.h"

int main(void)
{
    const char *kt = getenv("KILN_TRAIN") ? getenv("KILN_TRAIN") : "bin/kiln-train";
    char dir[] = "/tmp/test_tfevents_kiln_XXXXXX", cmd[2048], line[1024];
    if (!mkdtemp(dir)) return 1;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    /* 2 epochs of 512 examples, batch 128: eval at steps 4 and 8 */
    snprintf(cmd, sizeof cmd,
             "'%s' mnist --model_dir='%s/m' --train_examples=512 --train_epochs=2 "
             "--batch_size=128 --threads=1 --log_format=json > '%s/log' 2>&1",
             kt, dir, dir);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", cmd);

    /* what kiln-train said: epoch lines' step and test_accuracy */
    long long steps[2] = {0, 0};
    double acc[2] = {0, 0};
    int n = 0;
    snprintf(cmd, sizeof cmd, "%s/log", dir);
    FILE *f = fopen(cmd, "r");
    CHECK(f != NULL);
    while (f && n < 2 && fgets(line, sizeof line, f)) {
        const char *e = strstr(line, "\"event\":\"epoch\""), *s = strstr(line, "\"step\":"),
                   *a = strstr(line, "\"test_accuracy\":");
        if (!e || !s || !a) continue;
        steps[n] = atoll(s + 7);
        acc[n] = atof(a + 16);
        n++;
    }
    if (f) fclose(f);
    CHECK_MSG(n == 2, "%d epoch lines with test_accuracy", n);

    kiln_job *j = hpjob_x("MAXIMIZE", "accuracy", 1);
    kiln_study *s = kiln_study_new(&j->training_input.hyperparameters, 1);
    kiln_trial *t = kiln_study_next(s, (int64_t)tv.tv_sec * 1000000000LL);
    /* eval/ holds "accuracy" (the test set's); train/ "epoch_accuracy" */
    snprintf(cmd, sizeof cmd, "%s/m", dir);
    kiln_study_read_tfevents(s, t, cmd);
    CHECK_MSG(t->n_curve == 2, "%zu scalars tagged accuracy", t->n_curve);
    for (size_t i = 0; i < t->n_curve && i < 2; i++) {
        /* the event holds a float32; the JSON line prints it with %.6f */
        double diff = t->curve_values[i] - acc[i];
        CHECK_MSG(t->curve_steps[i] == steps[i] && diff < 1e-6 && diff > -1e-6,
                  "scalar %zu: step %lld value %.7f; kiln-train said step %lld value %.6f", i,
                  (long long)t->curve_steps[i], t->curve_values[i], steps[i], acc[i]);
    }
    kiln_study_free(s);
    kiln_job_free(j);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
