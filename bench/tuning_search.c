/* bench/tuning_search.c - the model-based search (ALGORITHM_UNSPECIFIED)
 * against RANDOM_SEARCH, through kiln's tune library (src/tune) exactly as
 * kilnd drives it: kiln_study_next, kiln_study_report, kiln_study_end, one
 * trial at a time. The objective is a standard test function, minimised:
 *   Branin      2 params on [-5, 10] x [0, 15], minimum 0.397887
 *   Hartmann-6  6 params on [0, 1]^6,           minimum -3.32237
 * For each of SEEDS seeds and both algorithms, the best value after each
 * trial; printed: the medians over the seeds after N trials, and how many
 * trials the model-based search needs for its median to reach random
 * search's 50-trial median (the target: at most 25).
 *
 *   build/bin/tuning_search [SEEDS=20] [TRIALS=100]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "kiln/tune.h"
#include "tuning_common.h"

static double branin(const double *x)
{
    const double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10,
                 t = 1 / (8 * M_PI);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - r;
    return a * u * u + s * (1 - t) * cos(x[0]) + s;
}

static double hartmann6(const double *x)
{
    static const double al[4] = {1.0, 1.2, 3.0, 3.2};
    static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                   {0.05, 10, 17, 0.1, 8, 14},
                                   {3, 3.5, 1.7, 10, 17, 8},
                                   {17, 8, 0.05, 10, 0.1, 14}};
    static const double P[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                   {2329, 4135, 8307, 3736, 1004, 9991},
                                   {2348, 1451, 3522, 2883, 3047, 6650},
                                   {4047, 8828, 8732, 5743, 1091, 381}};
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        double e = 0;
        for (int j = 0; j < 6; j++)
            e += A[i][j] * (x[j] - P[i][j] * 1e-4) * (x[j] - P[i][j] * 1e-4);
        sum += al[i] * exp(-e);
    }
    return -sum;
}

typedef struct problem {
    const char *name;
    const char *params; /* the params[] JSON */
    double (*f)(const double *);
    double minimum;
} problem;

static const problem problems[] = {
    {"branin",
     "[{\"parameterName\":\"x1\",\"type\":\"DOUBLE\",\"minValue\":-5,\"maxValue\":10},"
     "{\"parameterName\":\"x2\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":15}]",
     branin, 0.397887},
    {"hartmann6",
     "[{\"parameterName\":\"x1\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1},"
     "{\"parameterName\":\"x2\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1},"
     "{\"parameterName\":\"x3\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1},"
     "{\"parameterName\":\"x4\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1},"
     "{\"parameterName\":\"x5\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1},"
     "{\"parameterName\":\"x6\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1}]",
     hartmann6, -3.32237},
};

static kiln_job *job_of(const problem *p, const char *algorithm, int trials)
{
    char hp[2048];
    snprintf(hp, sizeof hp,
             "{\"goal\":\"MINIMIZE\",\"algorithm\":\"%s\",\"maxTrials\":%d,\"params\":%s}",
             algorithm, trials, p->params);
    return tuning_job(hp);
}

static double objective(kiln_study *s, kiln_trial *t, void *ud)
{
    const problem *p = ud;
    return p->f(t->values);
}

/* best[k]: the best (smallest) value after k + 1 trials. */
static void run(const problem *p, const char *algorithm, uint64_t seed, int trials, double *best)
{
    kiln_job *j = job_of(p, algorithm, trials);
    tuning_study(j, seed, trials, false, INFINITY, 1, objective, (void *)p, best);
    kiln_job_free(j);
}

int main(int argc, char **argv)
{
    int seeds = argc > 1 ? atoi(argv[1]) : 20, trials = argc > 2 ? atoi(argv[2]) : 100;
    if (seeds < 1 || trials < 50) {
        fprintf(stderr, "usage: tuning_search [SEEDS>=1] [TRIALS>=50]\n");
        return 2;
    }
    static const int at[] = {10, 15, 20, 25, 30, 40, 50, 75, 100};
    int fails = 0;
    for (size_t pi = 0; pi < sizeof problems / sizeof *problems; pi++) {
        const problem *p = &problems[pi];
        double *rnd = calloc((size_t)(seeds * trials), sizeof *rnd);
        double *mod = calloc((size_t)(seeds * trials), sizeof *mod);
        double *med_r = calloc((size_t)trials, sizeof *med_r);
        double *med_m = calloc((size_t)trials, sizeof *med_m);
        if (!rnd || !mod || !med_r || !med_m) return 1;
        for (int sd = 0; sd < seeds; sd++) {
            uint64_t seed = 0x5eedULL * (uint64_t)(sd + 1) + 17;
            run(p, "RANDOM_SEARCH", seed, trials, rnd + sd * trials);
            run(p, "ALGORITHM_UNSPECIFIED", seed, trials, mod + sd * trials);
        }
        tuning_medians(rnd, seeds, trials, med_r);
        tuning_medians(mod, seeds, trials, med_m);
        printf("%s (minimum %g): median best over %d seeds (gap to the minimum)\n", p->name,
               p->minimum, seeds);
        printf("  %6s  %-22s  %-22s\n", "trials", "RANDOM_SEARCH", "model-based (GP-EI)");
        for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
            int k = at[i];
            if (k > trials) break;
            printf("  %6d  %10.5f (%9.5f)  %10.5f (%9.5f)\n", k, med_r[k - 1],
                   med_r[k - 1] - p->minimum, med_m[k - 1], med_m[k - 1] - p->minimum);
        }
        double target = med_r[49];
        int reach = tuning_reach(med_m, trials, target, false);
        if (reach > 0)
            printf("  model-based reaches random's 50-trial median (%.5f) after %d trials: "
                   "ratio %.2f (target <= 0.50) %s\n",
                   target, reach, reach / 50.0, reach <= 25 ? "MET" : "NOT MET");
        else
            printf("  model-based does not reach random's 50-trial median (%.5f) in %d trials: "
                   "NOT MET\n",
                   target, trials);
        fails += !(reach > 0 && reach <= 25);
        free(rnd);
        free(mod);
        free(med_r);
        free(med_m);
    }
    return fails ? 1 : 0;
}
