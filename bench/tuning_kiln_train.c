/* bench/tuning_kiln_train.c - a small real study: kiln-train's MLP on
 * Fashion-MNIST, tuned over its learning rate (UNIT_LOG_SCALE, 1e-4 to 1) and
 * batch size (DISCRETE 32, 64, 128, 256), maximising test accuracy after
 * STEPS training steps. ALGORITHM_UNSPECIFIED (GP with expected improvement)
 * against RANDOM_SEARCH, each over SEEDS study seeds.
 *
 * The study is kiln's tune library driven as kilnd drives it
 * (kiln_study_next, kiln_trial_args, kiln_study_report, kiln_study_end, one
 * trial at a time); each trial is one kiln-train process with the trial's
 * flags appended (--learning_rate=... --batch_size=...), its objective the
 * test_accuracy of its JSON "done" line. kiln-train's own --seed is the same
 * for every trial, so a trial's accuracy depends only on its values: the
 * spread between study seeds is the search's alone.
 *
 * Printed: the median (over the seeds) best accuracy after k trials for
 * each algorithm, the ratio of the model-based search's remaining error
 * (1 - accuracy) to random search's after TRIALS trials, and how many trials
 * the model-based median needs to reach random search's TRIALS-trial median.
 *
 *   build/bin/tuning_kiln_train [SEEDS=3] [TRIALS=12] [STEPS=200]
 *   env KILN_TRAIN (default: kiln-train next to this program),
 *       DATA_DIR (Fashion-MNIST; default kiln-train's), THREADS (1)
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/job.h"
#include "kiln/tune.h"
#include "tuning_common.h"

static const char *const PARAMS =
    "[{\"parameterName\":\"learning_rate\",\"type\":\"DOUBLE\",\"minValue\":0.0001,"
    "\"maxValue\":1,\"scaleType\":\"UNIT_LOG_SCALE\"},"
    "{\"parameterName\":\"batch_size\",\"type\":\"DISCRETE\",\"discreteValues\":[32,64,128,"
    "256]}]";

static char train_bin[PATH_MAX];
static int steps = 200;
static int runs, failed_runs;

static kiln_job *job_of(const char *algorithm, int trials)
{
    char hp[1024];
    snprintf(hp, sizeof hp,
             "{\"goal\":\"MAXIMIZE\",\"hyperparameterMetricTag\":\"accuracy\",\"algorithm\":"
             "\"%s\",\"maxTrials\":%d,\"params\":%s}",
             algorithm, trials, PARAMS);
    return tuning_job(hp);
}

/* Runs kiln-train with the trial's flags; its test accuracy, or NAN when it
 * failed (the trial then FAILS, as in kilnd). */
static double train(const kiln_strv *flags)
{
    char tmpl[] = "/tmp/kiln-tune-bench-XXXXXX";
    if (!mkdtemp(tmpl)) return NAN;
    char steps_arg[32], dir_arg[64], data_arg[PATH_MAX + 16], threads_arg[32];
    const char *data = getenv("DATA_DIR"), *thr = getenv("THREADS");
    snprintf(steps_arg, sizeof steps_arg, "--max_steps=%d", steps);
    snprintf(dir_arg, sizeof dir_arg, "--model_dir=%s", tmpl);
    snprintf(threads_arg, sizeof threads_arg, "--threads=%s", thr && *thr ? thr : "1");
    const char *argv[32] = {train_bin,
                            "mnist",
                            "--model=mlp",
                            "--seed=1",
                            steps_arg,
                            "--log_format=json",
                            "--checkpoint_steps=0",
                            threads_arg,
                            dir_arg};
    size_t n = 9;
    if (data && *data) {
        snprintf(data_arg, sizeof data_arg, "--data_dir=%s", data);
        argv[n++] = data_arg;
    }
    for (size_t i = 0; i < flags->n && n + 1 < sizeof argv / sizeof *argv; i++)
        argv[n++] = flags->v[i];
    argv[n] = NULL;
    int pfd[2];
    double acc = NAN;
    if (pipe2(pfd, O_CLOEXEC) != 0) goto out;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], STDOUT_FILENO);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDERR_FILENO);
        execv(train_bin, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = pid > 0 ? fdopen(pfd[0], "r") : NULL;
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *ev = json_string_value(json_object_get(o, "event"));
        if (ev && strcmp(ev, "done") == 0 && json_is_number(json_object_get(o, "test_accuracy")))
            acc = json_number_value(json_object_get(o, "test_accuracy"));
        /* a diverged run's done line carries null for its NaN loss: its
         * accuracy (chance) is still the trial's objective */
        json_decref(o);
    }
    if (f)
        fclose(f);
    else
        close(pfd[0]);
    int st = 0;
    if (pid > 0) waitpid(pid, &st, 0);
    if (pid <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) acc = NAN;
out : {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
}
    runs++;
    failed_runs += isnan(acc);
    return acc;
}

/* The trial's test accuracy: kiln-train run with its flags (NAN: it failed). */
static double objective(kiln_study *s, kiln_trial *t, void *ud)
{
    kiln_strv flags = {0};
    if (kiln_trial_args(s, t, &flags) != KILN_OK) exit(1);
    double acc = train(&flags);
    kiln_strv_clear(&flags);
    return acc;
}

/* best[k]: the best accuracy after k + 1 trials (0 while none succeeded). */
static void study(const char *algorithm, uint64_t seed, int trials, double *best)
{
    kiln_job *j = job_of(algorithm, trials);
    tuning_study(j, seed, trials, true, 0, steps, objective, NULL, best);
    kiln_job_free(j);
}

int main(int argc, char **argv)
{
    int seeds = argc > 1 ? atoi(argv[1]) : 3, trials = argc > 2 ? atoi(argv[2]) : 12;
    steps = argc > 3 ? atoi(argv[3]) : 200;
    if (seeds < 1 || trials < 2 || trials > 1000 || steps < 1) {
        fprintf(stderr, "usage: tuning_kiln_train [SEEDS>=1] [TRIALS 2..1000] [STEPS>=1]\n");
        return 2;
    }
    const char *kt = getenv("KILN_TRAIN");
    if (kt && *kt) {
        snprintf(train_bin, sizeof train_bin, "%s", kt);
    } else {
        char self[PATH_MAX - 16];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        snprintf(train_bin, sizeof train_bin, "%s/kiln-train", n > 0 ? self : ".");
    }
    if (access(train_bin, X_OK) != 0) {
        fprintf(stderr, "tuning_kiln_train: %s: %s (set KILN_TRAIN)\n", train_bin, strerror(errno));
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double *rnd = calloc((size_t)(seeds * trials), sizeof *rnd);
    double *mod = calloc((size_t)(seeds * trials), sizeof *mod);
    double *med_r = calloc((size_t)trials, sizeof *med_r);
    double *med_m = calloc((size_t)trials, sizeof *med_m);
    if (!rnd || !mod || !med_r || !med_m) return 1;
    for (int sd = 0; sd < seeds; sd++) {
        uint64_t seed = 0x5eedULL * (uint64_t)(sd + 1) + 17;
        study("RANDOM_SEARCH", seed, trials, rnd + sd * trials);
        study("ALGORITHM_UNSPECIFIED", seed, trials, mod + sd * trials);
        fprintf(stderr, "seed %d/%d: best random %.4f, model-based %.4f\n", sd + 1, seeds,
                rnd[sd * trials + trials - 1], mod[sd * trials + trials - 1]);
    }
    tuning_medians(rnd, seeds, trials, med_r);
    tuning_medians(mod, seeds, trials, med_m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("kiln-train mlp on Fashion-MNIST, %d steps per trial: learning_rate (log 1e-4..1) "
           "x batch_size {32,64,128,256}\n",
           steps);
    printf("median best test accuracy over %d seeds (%d kiln-train runs, %d failed, %.0f s)\n",
           seeds, runs, failed_runs,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    printf("  %6s  %13s  %19s\n", "trials", "RANDOM_SEARCH", "model-based (GP-EI)");
    for (int k = 1; k <= trials; k++) {
        if (k != trials && k != 1 && k % 2 != 0 && trials > 12) continue;
        printf("  %6d  %13.4f  %19.4f\n", k, med_r[k - 1], med_m[k - 1]);
    }
    double er = 1 - med_r[trials - 1], em = 1 - med_m[trials - 1];
    printf("  after %d trials: error (1 - accuracy) model-based / random = %.4f / %.4f = ratio "
           "%.2f\n",
           trials, em, er, er > 0 ? em / er : NAN);
    int reach = tuning_reach(med_m, trials, med_r[trials - 1], true);
    if (reach > 0)
        printf("  model-based reaches random's %d-trial median (%.4f) after %d trials: ratio "
               "%.2f\n",
               trials, med_r[trials - 1], reach, (double)reach / trials);
    else
        printf("  model-based does not reach random's %d-trial median (%.4f) in %d trials\n",
               trials, med_r[trials - 1], trials);
    free(rnd);
    free(mod);
    free(med_r);
    free(med_m);
    return 0;
}
