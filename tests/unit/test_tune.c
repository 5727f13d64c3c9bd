/* test_tune.c - the tuning spec's rules (through the validator, with field
 * paths), the scalings, grid order, random reproducibility, the model-based
 * search against random search, the median stopping rule, the hypertune
 * reader and a study's persisted form. Jobs are Job JSON so that each case
 * reads as a user writes it. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "kiln/tune.h"
#include "test.h"
#include "test_catalog_helpers.h"
#include "test_tune_helpers.h"
#include "test_tune_rules.h"
#include "tune/tune_int.h"

#define LR                                                                                         \
    "{\"parameterName\":\"lr\",\"type\":\"DOUBLE\",\"minValue\":0.0001,\"maxValue\":0.1,"          \
    "\"scaleType\":\"UNIT_LOG_SCALE\"}"

#define P "trainingInput.hyperparameters."

static void test_rules(const kiln_catalog *c, kiln_diag *d)
{
    good(c, d,
         "{\"goal\":\"MAXIMIZE\",\"maxTrials\":4,\"maxParallelTrials\":2,\"params\":[" LR "]}");
    good(c, d,
         "{\"goal\":\"MINIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"enableTrialEarlyStopping\":true,"
         "\"params\":[{\"parameterName\":\"opt\",\"type\":\"CATEGORICAL\",\"categoricalValues\":"
         "[\"sgd\",\"adam\"]},{\"parameterName\":\"units\",\"type\":\"INTEGER\",\"minValue\":1,"
         "\"maxValue\":3},{\"parameterName\":\"d\",\"type\":\"DISCRETE\",\"discreteValues\":[0.1,"
         "0.5],\"scaleType\":\"UNIT_LOG_SCALE\"}]}");
    /* ASHA, kiln's extension: its fields only with early stopping and ASHA */
    good(c, d,
         "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
         "\"ASHA\",\"ashaReductionFactor\":2,\"ashaMinSteps\":10,\"params\":[" LR "]}");
    good(c, d,
         "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
         "\"MEDIAN\",\"params\":[" LR "]}");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"earlyStoppingRule\":\"ASHA\",\"params\":[" LR "]}",
        P "earlyStoppingRule");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
        "\"MEDIAN\",\"ashaReductionFactor\":3,\"params\":[" LR "]}",
        P "ashaReductionFactor");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"ashaMinSteps\":5,\"params\":[" LR "]}", P "ashaMinSteps");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
        "\"ASHA\",\"ashaReductionFactor\":1,\"params\":[" LR "]}",
        P "ashaReductionFactor");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
        "\"ASHA\",\"ashaReductionFactor\":0,\"params\":[" LR "]}",
        P "ashaReductionFactor");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"enableTrialEarlyStopping\":true,\"earlyStoppingRule\":"
        "\"ASHA\",\"ashaMinSteps\":0,\"params\":[" LR "]}",
        P "ashaMinSteps");
    bad(c, d, "{\"params\":[" LR "]}", P "goal");
    bad(c, d, "{\"goal\":\"MAXIMIZE\"}", P "params");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"params\":[" LR "," LR "]}", P "params[1].parameterName");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a=b\",\"type\":\"DOUBLE\","
        "\"minValue\":0,\"maxValue\":1}]}",
        P "params[0].parameterName");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"minValue\":0,"
        "\"maxValue\":1}]}",
        P "params[0].type");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"DOUBLE\","
        "\"minValue\":2,\"maxValue\":1}]}",
        P "params[0].maxValue");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"INTEGER\","
        "\"minValue\":1,\"maxValue\":2.5}]}",
        P "params[0].maxValue");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"DOUBLE\","
        "\"minValue\":0,\"maxValue\":1,\"scaleType\":\"UNIT_LOG_SCALE\"}]}",
        P "params[0].minValue");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"DOUBLE\","
        "\"minValue\":0,\"maxValue\":1,\"categoricalValues\":[\"x\"]}]}",
        P "params[0].categoricalValues");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":"
        "\"CATEGORICAL\",\"categoricalValues\":[\"x\"],\"scaleType\":\"UNIT_LINEAR_SCALE\"}]}",
        P "params[0].scaleType");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":"
        "\"CATEGORICAL\",\"categoricalValues\":[\"x\",\"x\"]}]}",
        P "params[0].categoricalValues[1]");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":"
        "\"CATEGORICAL\"}]}",
        P "params[0].categoricalValues");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":"
        "\"CATEGORICAL\",\"categoricalValues\":[\"x\"],\"minValue\":1}]}",
        P "params[0].minValue");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"DISCRETE\","
        "\"discreteValues\":[1,3,2]}]}",
        P "params[0].discreteValues[2]");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"DISCRETE\","
        "\"discreteValues\":[0,1],\"scaleType\":\"UNIT_REVERSE_LOG_SCALE\"}]}",
        P "params[0].discreteValues[0]");
    bad(c, d,
        "{\"goal\":\"MAXIMIZE\",\"params\":[{\"parameterName\":\"a\",\"type\":\"INTEGER\","
        "\"minValue\":1,\"maxValue\":3,\"discreteValues\":[1]}]}",
        P "params[0].discreteValues");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"params\":[" LR "]}",
        P "params[0].type");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"maxTrials\":1001,\"params\":[" LR "]}", P "maxTrials");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"maxTrials\":-1,\"params\":[" LR "]}", P "maxTrials");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"maxTrials\":2,\"maxParallelTrials\":3,\"params\":[" LR "]}",
        P "maxParallelTrials");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"maxFailedTrials\":-2,\"params\":[" LR "]}",
        P "maxFailedTrials");
    /* resumePreviousJobId passes the spec's rules: kilnd checks the job it
     * names at create (test_resume) */
    good(c, d, "{\"goal\":\"MAXIMIZE\",\"resumePreviousJobId\":\"old\",\"params\":[" LR "]}");
    bad(c, d, "{\"goal\":\"MAXIMIZE\",\"hyperparameterMetricTag\":\"a\\nb\",\"params\":[" LR "]}",
        P "hyperparameterMetricTag");
    kiln_job *j =
        hpjob("{\"goal\":\"MAXIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"params\":[" LR "]}");
    run_validate(c, j, d);
    CHECK_SAYS(d, P "params[0].type", "GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE");
    kiln_job_free(j);
}

static void test_scales(void)
{
    CHECK(fabs(kiln_tune_from_unit("UNIT_LINEAR_SCALE", 2, 4, 0.5) - 3) < 1e-12);
    CHECK(fabs(kiln_tune_from_unit("UNIT_LOG_SCALE", 1e-4, 1e-2, 0.5) - 1e-3) < 1e-15);
    CHECK(fabs(kiln_tune_from_unit("UNIT_REVERSE_LOG_SCALE", 1, 100, 0) - 1) < 1e-12);
    CHECK(fabs(kiln_tune_from_unit("UNIT_REVERSE_LOG_SCALE", 1, 100, 1) - 100) < 1e-12);
    /* reverse log: half of u covers only the top part of the range (fine near max) */
    CHECK(kiln_tune_from_unit("UNIT_REVERSE_LOG_SCALE", 1, 100, 0.5) > 80);
    CHECK(kiln_tune_from_unit("UNIT_LOG_SCALE", 1, 100, 0.5) < 20);
    static const char *const sc[] = {"UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE",
                                     "UNIT_REVERSE_LOG_SCALE"};
    for (int s = 0; s < 3; s++)
        for (double u = 0; u <= 1.0; u += 0.125) {
            double x = kiln_tune_from_unit(sc[s], 0.001, 0.999, u);
            CHECK(fabs(kiln_tune_to_unit(sc[s], 0.001, 0.999, x) - u) < 1e-9);
        }
}

static kiln_study *study_of(kiln_job *j, uint64_t seed)
{
    return kiln_study_new(&j->training_input.hyperparameters, seed);
}

static void test_grid(void)
{
    kiln_job *j = hpjob(
        "{\"goal\":\"MAXIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"maxTrials\":10,"
        "\"maxParallelTrials\""
        ":10,\"params\":[{\"parameterName\":\"opt\",\"type\":\"CATEGORICAL\",\"categoricalValues\":"
        "[\"sgd\",\"adam\"]},{\"parameterName\":\"units\",\"type\":\"INTEGER\",\"minValue\":1,"
        "\"maxValue\":3}]}");
    kiln_study *s = study_of(j, 1);
    static const char *const want[] = {"--opt=sgd --units=1",  "--opt=sgd --units=2",
                                       "--opt=sgd --units=3",  "--opt=adam --units=1",
                                       "--opt=adam --units=2", "--opt=adam --units=3"};
    for (int k = 0; k < 6; k++) {
        kiln_trial *t = kiln_study_next(s, 1);
        CHECK(t && t->id == k + 1);
        if (!t) break;
        kiln_strv a = {0};
        kiln_trial_args(s, t, &a);
        char got[64];
        snprintf(got, sizeof got, "%s %s", a.n > 0 ? a.v[0] : "", a.n > 1 ? a.v[1] : "");
        CHECK_MSG(strcmp(got, want[k]) == 0, "trial %d: %s, want %s", k + 1, got, want[k]);
        kiln_strv_clear(&a);
    }
    CHECK(kiln_study_next(s, 1) == NULL); /* 6 combinations, though maxTrials is 10 */
    CHECK(!kiln_study_finished(s));       /* 6 still run */
    for (size_t i = 0; i < kiln_study_trial_count(s); i++)
        kiln_study_end(s, kiln_study_trial(s, i), KILN_TRIAL_SUCCEEDED, 2);
    CHECK(kiln_study_finished(s));
    kiln_study_free(s);
    kiln_job_free(j);
    /* capped by maxTrials */
    j = hpjob("{\"goal\":\"MAXIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"maxTrials\":2,\"params\":["
              "{\"parameterName\":\"d\",\"type\":\"DISCRETE\",\"discreteValues\":[1,2.5,4]}]}");
    s = study_of(j, 1);
    kiln_trial *t = kiln_study_next(s, 1);
    kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    t = kiln_study_next(s, 1);
    CHECK(t && t->values[0] == 2.5);
    if (t) kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    CHECK(kiln_study_next(s, 1) == NULL && kiln_study_finished(s));
    kiln_study_free(s);
    kiln_job_free(j);
}

static void test_random(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MAXIMIZE\",\"algorithm\":\"RANDOM_SEARCH\",\"maxTrials\":20,"
                        "\"maxParallelTrials\":20,\"params\":[" LR
                        ",{\"parameterName\":\"n\",\"type\":\"INTEGER\",\"minValue\":1,"
                        "\"maxValue\":4}]}");
    kiln_study *a = study_of(j, 42), *b = study_of(j, 42), *c = study_of(j, 43);
    bool same = true, differ = false, in_range = true;
    int seen[5] = {0};
    for (int k = 0; k < 20; k++) {
        kiln_trial *x = kiln_study_next(a, 1), *y = kiln_study_next(b, 1),
                   *z = kiln_study_next(c, 1);
        same &= x->values[0] == y->values[0] && x->values[1] == y->values[1];
        differ |= x->values[0] != z->values[0];
        in_range &= x->values[0] >= 1e-4 && x->values[0] <= 0.1;
        seen[(int)x->values[1]]++;
    }
    CHECK(same);
    CHECK(differ);
    CHECK(in_range);
    CHECK(seen[0] == 0 && seen[1] && seen[2] && seen[3] && seen[4]);
    kiln_study_free(a);
    kiln_study_free(b);
    kiln_study_free(c);
    kiln_job_free(j);
}

/* Branin's minimum is 0.397887; the model-based search must get closer in 30
 * trials than random search does, in the median over seeds. */
static double branin(double x1, double x2)
{
    double a = x2 - 5.1 / (4 * M_PI * M_PI) * x1 * x1 + 5 / M_PI * x1 - 6;
    return a * a + 10 * (1 - 1 / (8 * M_PI)) * cos(x1) + 10;
}

static double run_branin(const char *algo, uint64_t seed, int n)
{
    char hp[512];
    snprintf(hp, sizeof hp,
             "{\"goal\":\"MINIMIZE\",\"algorithm\":\"%s\",\"maxTrials\":%d,\"params\":[{"
             "\"parameterName\":\"x1\",\"type\":\"DOUBLE\",\"minValue\":-5,\"maxValue\":10},{"
             "\"parameterName\":\"x2\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":15}]}",
             algo, n);
    kiln_job *j = hpjob(hp);
    kiln_study *s = study_of(j, seed);
    double best = INFINITY;
    kiln_trial *t;
    while ((t = kiln_study_next(s, 1))) {
        double y = branin(t->values[0], t->values[1]);
        kiln_study_report(s, t, 1, y);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
        best = fmin(best, y);
    }
    kiln_study_free(s);
    kiln_job_free(j);
    return best;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_model_beats_random(void)
{
    double tpe[9], rnd[9];
    for (int k = 0; k < 9; k++) {
        tpe[k] = run_branin("ALGORITHM_UNSPECIFIED", (uint64_t)k + 1, 30) - 0.397887;
        rnd[k] = run_branin("RANDOM_SEARCH", (uint64_t)k + 1, 30) - 0.397887;
    }
    qsort(tpe, 9, sizeof *tpe, cmpd);
    qsort(rnd, 9, sizeof *rnd, cmpd);
    CHECK_MSG(tpe[4] < rnd[4], "median regret model-based %g, random %g", tpe[4], rnd[4]);
}

/* gp.c's Cholesky factor and solves against a reference: Gaussian
 * elimination with partial pivoting on the same system, written out here
 * (it shares no code or ordering with a Cholesky solve). Matrices are the
 * GP's kind: a Matern-like kernel of random points plus a small noise on the
 * diagonal, so well enough conditioned that both answers agree to 1e-8
 * relative (condition numbers here stay below 1e5; double rounding gives
 * about 1e-16 times that). A known 3x3 factor is checked exactly, and a
 * matrix that is not positive definite is refused. */
static void gauss_solve(double *A, size_t n, double *b)
{
    for (size_t c = 0; c < n; c++) {
        size_t p = c;
        for (size_t r = c + 1; r < n; r++)
            if (fabs(A[r * n + c]) > fabs(A[p * n + c])) p = r;
        for (size_t k = 0; k < n && p != c; k++) {
            double t = A[c * n + k];
            A[c * n + k] = A[p * n + k], A[p * n + k] = t;
        }
        double t = b[c];
        b[c] = b[p], b[p] = t;
        for (size_t r = c + 1; r < n; r++) {
            double f = A[r * n + c] / A[c * n + c];
            for (size_t k = c; k < n; k++)
                A[r * n + k] -= f * A[c * n + k];
            b[r] -= f * b[c];
        }
    }
    for (size_t r = n; r-- > 0;) {
        for (size_t k = r + 1; k < n; k++)
            b[r] -= A[r * n + k] * b[k];
        b[r] /= A[r * n + r];
    }
}

static void test_cholesky(void)
{
    double A3[9] = {4, 12, -16, 12, 37, -43, -16, -43, 98};
    const double L3[9] = {2, 12, -16, 6, 1, -43, -8, 5, 3}; /* upper: left as it was */
    CHECK(kiln__tune_cholesky(A3, 3));
    for (int i = 0; i < 9; i++)
        CHECK_MSG(A3[i] == L3[i], "3x3 factor [%d]: %g, want %g", i, A3[i], L3[i]);
    double npd[4] = {1, 2, 2, 1}; /* eigenvalues 3 and -1 */
    CHECK(!kiln__tune_cholesky(npd, 2));

    static const size_t sizes[] = {1, 2, 7, 40, 200};
    uint64_t rng = 12345;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si], d = 3;
        double *X = malloc(n * d * sizeof *X), *A = malloc(n * n * sizeof *A);
        double *G = malloc(n * n * sizeof *G), *L = malloc(n * n * sizeof *L);
        double *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref);
        if (!X || !A || !G || !L || !x || !ref) abort();
        for (size_t i = 0; i < n * d; i++)
            X[i] = kiln__tune_uniform(&rng);
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < n; k++) {
                double r2 = 0;
                for (size_t c = 0; c < d; c++)
                    r2 += (X[i * d + c] - X[k * d + c]) * (X[i * d + c] - X[k * d + c]);
                double r = sqrt(5 * r2) / 0.5;
                A[i * n + k] = (1 + r + r * r / 3) * exp(-r) + (i == k ? 1e-3 : 0);
            }
        for (size_t i = 0; i < n; i++)
            x[i] = ref[i] = kiln__tune_uniform(&rng) - 0.5;
        memcpy(L, A, n * n * sizeof *A);
        memcpy(G, A, n * n * sizeof *A);
        CHECK_MSG(kiln__tune_cholesky(L, n), "n=%zu: refused a positive definite matrix", n);
        /* L L' gives A back (the lower triangle and the diagonal) */
        double err = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k <= i; k++) {
                double v = 0;
                for (size_t c = 0; c <= k; c++)
                    v += L[i * n + c] * L[k * n + c];
                err = fmax(err, fabs(v - A[i * n + k]));
            }
        CHECK_MSG(err < 1e-12, "n=%zu: |L L' - A| = %g", n, err);
        kiln__tune_lsolve(L, n, x);
        kiln__tune_ltsolve(L, n, x);
        gauss_solve(G, n, ref);
        double diff = 0, scale = 0;
        for (size_t i = 0; i < n; i++) {
            diff = fmax(diff, fabs(x[i] - ref[i]));
            scale = fmax(scale, fabs(ref[i]));
        }
        CHECK_MSG(diff <= 1e-8 * scale, "n=%zu: Cholesky solve vs Gauss: %g (scale %g)", n, diff,
                  scale);
        free(X), free(A), free(G), free(L), free(x), free(ref);
    }
}

static void test_median_stop(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MAXIMIZE\",\"maxTrials\":5,\"enableTrialEarlyStopping\":true,"
                        "\"params\":[" LR "]}");
    kiln_study *s = study_of(j, 7);
    for (int k = 0; k < 3; k++) { /* three good ones: 0.5, 0.6, 0.7 at steps 1..3 */
        kiln_trial *t = kiln_study_next(s, 1);
        for (int st = 1; st <= 3; st++)
            kiln_study_report(s, t, st, 0.4 + 0.1 * st);
        CHECK(!kiln_study_should_stop(s, t)); /* no 3 completed trials yet */
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    kiln_trial *t = kiln_study_next(s, 1);
    kiln_study_report(s, t, 1, 0.6);
    CHECK(!kiln_study_should_stop(s, t)); /* 0.6 beats the median of 0.5 at step 1 */
    kiln_study_report(s, t, 2, 0.5);
    CHECK(!kiln_study_should_stop(s, t)); /* best so far 0.6 >= 0.55 */
    t = kiln_study_next(s, 1);
    kiln_study_report(s, t, 1, 0.1);
    CHECK(kiln_study_should_stop(s, t));
    /* the persisted form keeps the curves and states (kilnd requeues running ones) */
    json_t *js = kiln_study_to_json(s);
    kiln_study *r = kiln_study_from_json(&j->training_input.hyperparameters, js);
    CHECK(r && kiln_study_trial_count(r) == 5);
    CHECK(r && kiln_study_count(r, KILN_TRIAL_SUCCEEDED) == 3);
    CHECK(r && kiln_study_count(r, KILN_TRIAL_RUNNING) == 2);
    CHECK(r && kiln_study_trial(r, 1)->n_curve == 3 &&
          kiln_study_trial(r, 1)->values[0] == kiln_study_trial(s, 1)->values[0]);
    json_decref(js);
    kiln_study_free(r);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* Rung k's trial ids, in the order recorded, as "1 2 3". */
static const char *rung_ids(const kiln_study *s, int k)
{
    static char buf[128];
    size_t n = kiln_study_rung(s, k, 0, NULL, NULL), o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 16 < sizeof buf; i++) {
        int id = 0;
        kiln_study_rung(s, k, i, &id, NULL);
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%d", i ? " " : "", id);
    }
    return buf;
}

/* ASHA by hand, eta = 2, first rung at step 1 (rungs at steps 1, 2, 4, 8),
 * MAXIMIZE: a trial goes on past a rung while it is among the best
 * max(1, floor(n / 2)) of the n recorded there so far. */
static void test_asha(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MAXIMIZE\",\"maxTrials\":5,\"enableTrialEarlyStopping\":"
                        "true,\"earlyStoppingRule\":\"ASHA\",\"ashaReductionFactor\":2,"
                        "\"params\":[" LR "]}");
    char *txt = kiln_job_to_json(j, 0); /* the fields come back on GET */
    CHECK_MSG(txt && strstr(txt, "\"earlyStoppingRule\": \"ASHA\"") &&
                  strstr(txt, "\"ashaReductionFactor\": \"2\""),
              "%s", txt ? txt : "(null)");
    free(txt);
    kiln_study *s = study_of(j, 7);
    CHECK(kiln_study_asha(s));
    kiln_trial *t[5];
    for (int i = 1; i <= 4; i++)
        t[i] = kiln_study_next(s, 1);
    /* rung 0 (step 1) */
    kiln_study_report(s, t[1], 1, 0.5); /* n=1, keep 1: the best so far goes on */
    CHECK(!kiln_study_should_stop(s, t[1]));
    kiln_study_report(s, t[2], 1, 0.3); /* n=2, keep 1: 0.5 is better: stopped */
    CHECK(kiln_study_should_stop(s, t[2]));
    kiln_study_report(s, t[3], 1, 0.7); /* n=3, keep 1: best */
    CHECK(!kiln_study_should_stop(s, t[3]));
    kiln_study_report(s, t[4], 1, 0.6); /* n=4, keep 2: second */
    CHECK(!kiln_study_should_stop(s, t[4]));
    CHECK_STR(rung_ids(s, 0), "1 2 3 4");
    /* rung 1 (step 2) */
    kiln_study_report(s, t[1], 2, 0.55); /* n=1 */
    CHECK(!kiln_study_should_stop(s, t[1]));
    kiln_study_report(s, t[3], 2, 0.8); /* n=2, keep 1: best */
    CHECK(!kiln_study_should_stop(s, t[3]));
    kiln_study_report(s, t[4], 2, 0.65); /* n=3, keep 1: 0.8 is better: stopped */
    CHECK(kiln_study_should_stop(s, t[4]));
    kiln_study_report(s, t[2], 2, 0.99); /* a stopped trial records no further */
    CHECK(kiln_study_should_stop(s, t[2]) && t[2]->asha_rungs == 1);
    CHECK_STR(rung_ids(s, 1), "1 3 4");
    /* rung 2 (step 4) and a report past two rungs */
    kiln_study_report(s, t[1], 3, 0.6); /* between rungs: nothing recorded */
    CHECK(t[1]->asha_rungs == 2);
    kiln_study_report(s, t[1], 4, 0.6); /* rung 2, n=1 */
    CHECK(!kiln_study_should_stop(s, t[1]));
    kiln_study_report(s, t[3], 8, 0.9); /* rungs 2 (n=2, best) and 3 (n=1) */
    CHECK(!kiln_study_should_stop(s, t[3]) && t[3]->asha_rungs == 4);
    CHECK_STR(rung_ids(s, 2), "1 3");
    /* rung 3 (step 8) */
    kiln_study_report(s, t[1], 9, 0.58); /* n=2, keep 1: 0.9 is better: stopped */
    CHECK(kiln_study_should_stop(s, t[1]) && t[1]->asha_rungs == 4);
    CHECK_STR(rung_ids(s, 3), "3 1");
    double v = 0;
    int id = 0;
    CHECK(kiln_study_rung(s, 3, 1, &id, &v) == 2 && id == 1 && v == 0.58);
    char why[256];
    kiln_study_stop_reason(s, t[4], why, sizeof why);
    CHECK_MSG(strstr(why, "rung 1 (step 2)") != NULL, "%s", why);
    /* trials 2 and 4 end stopped early, 3 succeeds; 1 is still running */
    t[2]->stopped_early = t[4]->stopped_early = true;
    kiln_study_end(s, t[2], KILN_TRIAL_SUCCEEDED, 2);
    kiln_study_end(s, t[4], KILN_TRIAL_SUCCEEDED, 2);
    kiln_study_end(s, t[3], KILN_TRIAL_SUCCEEDED, 2);
    CHECK(!kiln_study_should_stop(s, t[2])); /* ended: nothing to stop */

    /* the rungs survive the persisted form (a kilnd restart) */
    json_t *js = kiln_study_to_json(s);
    kiln_study *r = kiln_study_from_json(&j->training_input.hyperparameters, js);
    json_t *js2 = r ? kiln_study_to_json(r) : NULL;
    CHECK(js2 && json_equal(js, js2));
    CHECK(r && kiln_study_rung(r, 0, 0, NULL, NULL) == 4 && kiln_study_find(r, 3)->asha_rungs == 4);
    CHECK(r && kiln_study_should_stop(r, kiln_study_find(r, 1))); /* still running, still cut */
    /* kilnd queues the running trial 1 again: it reruns and loses its records */
    if (r) kiln_study_end(r, kiln_study_find(r, 1), KILN_TRIAL_QUEUED, 0);
    CHECK(r && strcmp(rung_ids(r, 0), "2 3 4") == 0 && strcmp(rung_ids(r, 3), "3") == 0);
    CHECK(r && !kiln_study_should_stop(r, kiln_study_find(r, 1)));
    kiln_trial *again = r ? kiln_study_next(r, 3) : NULL;
    CHECK(again && again->id == 1);
    if (again) kiln_study_report(r, again, 1, 0.65); /* rung 0: n=4, keep 2: second */
    CHECK(again && !kiln_study_should_stop(r, again));
    if (again) kiln_study_report(r, again, 2, 0.7); /* rung 1: n=3, keep 1: 0.8 better */
    CHECK(again && kiln_study_should_stop(r, again));
    json_decref(js);
    json_decref(js2);
    kiln_study_free(r);

    /* a record made with another eta is rebuilt from the trials' reports */
    kiln_job *j3 = hpjob("{\"goal\":\"MAXIMIZE\",\"maxTrials\":5,\"enableTrialEarlyStopping\":"
                         "true,\"earlyStoppingRule\":\"ASHA\",\"params\":[" LR "]}");
    js = kiln_study_to_json(s);
    r = kiln_study_from_json(&j3->training_input.hyperparameters, js);
    /* eta 3: rungs at 1, 3, 9; ended trials 2, 3, 4 and running 1 in id order */
    CHECK(r && strcmp(rung_ids(r, 0), "1 2 3 4") == 0);
    CHECK(r && strcmp(rung_ids(r, 1), "1 3") == 0 && strcmp(rung_ids(r, 2), "1") == 0);
    json_decref(js);
    kiln_study_free(r);
    kiln_job_free(j3);
    kiln_study_free(s);
    kiln_job_free(j);
}

static void test_hypertune_and_output(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\",\"maxTrials\":"
                        "2,\"params\":[" LR "]}");
    kiln_study *s = study_of(j, 7);
    kiln_trial *t1 = kiln_study_next(s, 1000000000LL);
    char path[] = "/tmp/test_tune_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("{\"timestamp\": 1.7e9, \"trial\": \"1\", \"loss\": 0.9, \"global_step\": \"10\"}\n", f);
    fputs("{\"timestamp\": 1.7e9, \"trial\": \"1\", \"other\": 5, \"global_step\": \"15\"}\n", f);
    fputs("{\"timestamp\": 1.7e9, \"trial\": \"1\", \"loss\": \"0.5\", \"global_step\": 20}\n{\"lo",
          f);
    fflush(f);
    kiln_study_read_hypertune(s, t1, path);
    CHECK(t1->has_metric && t1->objective == 0.5 && t1->step == 20 && t1->n_curve == 2);
    fputs("ss\": 0.25, \"global_step\": \"30\"}\n", f); /* the half line, finished */
    fclose(f);
    kiln_study_read_hypertune(s, t1, path);
    CHECK(t1->objective == 0.25 && t1->step == 30 && t1->n_curve == 3);
    unlink(path);
    kiln_study_end(s, t1, KILN_TRIAL_SUCCEEDED, 2000000000LL);
    kiln_trial *t2 = kiln_study_next(s, 1);
    kiln_study_report(s, t2, 5, 0.1);
    kiln_study_end(s, t2, KILN_TRIAL_SUCCEEDED, 2000000000LL);
    json_t *o = kiln_study_output_trials(s);
    CHECK(json_array_size(o) == 2);
    json_t *first = json_array_get(o, 0);
    CHECK_STR(json_string_value(json_object_get(first, "trialId")), "2"); /* minimise: 0.1 first */
    CHECK_STR(
        json_string_value(json_object_get(json_object_get(first, "finalMetric"), "trainingStep")),
        "5");
    CHECK_STR(json_string_value(json_object_get(first, "state")), "SUCCEEDED");
    CHECK(json_is_string(json_object_get(json_object_get(first, "hyperparameters"), "lr")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(o, 1), "startTime")),
              "1970-01-01T00:00:01.000Z");
    json_decref(o);
    /* what the replicas see */
    kiln_strv env = {0};
    kiln_strv_push(&env, "TF_CONFIG={\"cluster\":{},\"task\":{\"type\":\"master\",\"index\":0}}");
    CHECK(kiln_trial_env(s, t2, "/d/2/hypertune.metrics", &env) == KILN_OK);
    CHECK(env.n == 4 && strstr(env.v[0], "\"trial\":\"2\""));
    CHECK(env.n == 4 && strcmp(env.v[1], "CLOUD_ML_TRIAL_ID=2") == 0);
    CHECK(env.n == 4 && strcmp(env.v[2], "CLOUD_ML_HP_METRIC_TAG=loss") == 0);
    CHECK(env.n == 4 && strcmp(env.v[3], "CLOUD_ML_HP_METRIC_FILE=/d/2/hypertune.metrics") == 0);
    kiln_strv_clear(&env);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* A running trial's read offsets go with the study's persisted form (what
 * an adopting kilnd reads on from): the hypertune file's and each event
 * file's; a finished trial's are not kept. The reports read before stay,
 * and reading on adds only the new lines. */
static void test_running_offsets(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\",\"maxTrials\":"
                        "2,\"params\":[" LR "]}");
    kiln_study *s = study_of(j, 7);
    kiln_trial *t1 = kiln_study_next(s, 1000000000LL);
    char path[] = "/tmp/test_tune_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("{\"loss\": 0.9, \"global_step\": 1}\n{\"loss\": 0.8, \"global_step\": 2}\n", f);
    fflush(f);
    kiln_study_read_hypertune(s, t1, path);
    CHECK(t1->n_curve == 2 && t1->file_offset > 0);
    t1->tb = calloc(1, sizeof *t1->tb);
    t1->tb[0] = (kiln_tb_file){.path = strdup("/x/events.out.tfevents.1"), .offset = 1234};
    t1->n_tb = 1;
    json_t *js = kiln_study_to_json(s);
    kiln_study *r = kiln_study_from_json(&j->training_input.hyperparameters, js);
    json_decref(js);
    kiln_trial *u = r ? kiln_study_find(r, 1) : NULL;
    CHECK(u && u->state == KILN_TRIAL_RUNNING && u->file_offset == t1->file_offset);
    CHECK(u && u->n_tb == 1 && u->tb[0].offset == 1234 && !u->tb[0].dead &&
          strcmp(u->tb[0].path, "/x/events.out.tfevents.1") == 0);
    fputs("{\"loss\": 0.7, \"global_step\": 3}\n", f);
    fclose(f);
    if (u) kiln_study_read_hypertune(r, u, path);
    CHECK(u && u->n_curve == 3 && u->objective == 0.7 && u->step == 3); /* no line twice */
    unlink(path);
    /* an ended trial keeps no offsets in the persisted form */
    if (u) kiln_study_end(r, u, KILN_TRIAL_SUCCEEDED, 2000000000LL);
    js = r ? kiln_study_to_json(r) : NULL;
    json_t *t0 = json_array_get(json_object_get(js, "trials"), 0);
    CHECK(t0 && !json_object_get(t0, "fileOffset") && !json_object_get(t0, "tb"));
    json_decref(js);
    kiln_study_free(r);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* resumePreviousJobId: the previous job must be a finished tuning job with
 * the same params, goal and tag; the resumed study keeps its trials, which
 * count toward maxTrials, and new trial ids follow theirs. */
static void test_resume(void)
{
    kiln_job *prev = hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\","
                           "\"maxTrials\":3,\"params\":[" LR "]}");
    kiln_study *s = study_of(prev, 5);
    for (int i = 0; i < 3; i++) {
        kiln_trial *t = kiln_study_next(s, 1);
        kiln_study_report(s, t, 1, 0.5 + i);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    json_t *rt = json_pack("{s:o}", "study", kiln_study_to_json(s));
    char *runtime = json_dumps(rt, JSON_COMPACT);
    json_decref(rt);
    kiln_study_free(s);
    prev->state = KILN_STATE_SUCCEEDED;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *next = hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\","
                           "\"maxTrials\":5,\"resumePreviousJobId\":\"p\",\"params\":[" LR "]}");
    const kiln_hyperparameter_spec *hp = &next->training_input.hyperparameters;
    CHECK(kiln_tune_check_resume(hp, "p", prev, runtime, &d) == 0 && d.n == 0);
    CHECK(kiln_tune_check_resume(hp, "p", NULL, NULL, &d) == 1 &&
          strstr(d.v[0].description, "not found"));
    kiln_diag_free(&d);
    prev->state = KILN_STATE_RUNNING;
    CHECK(kiln_tune_check_resume(hp, "p", prev, runtime, &d) == 1 &&
          strstr(d.v[0].description, "RUNNING"));
    kiln_diag_free(&d);
    prev->state = KILN_STATE_SUCCEEDED;
    CHECK(kiln_tune_check_resume(hp, "p", prev, NULL, &d) == 1 &&
          strstr(d.v[0].description, "no study"));
    kiln_diag_free(&d);
    kiln_job *other =
        hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\","
              "\"params\":[{\"parameterName\":\"lr\",\"type\":\"DOUBLE\","
              "\"minValue\":0.0001,\"maxValue\":0.5,\"scaleType\":\"UNIT_LOG_SCALE\"}]}");
    CHECK(kiln_tune_check_resume(&other->training_input.hyperparameters, "p", prev, runtime, &d) ==
              1 &&
          strstr(d.v[0].description, "minValue/maxValue"));
    CHECK_STR(d.n ? d.v[0].field : "", P "resumePreviousJobId");
    kiln_diag_free(&d);
    kiln_job *tag = hpjob("{\"goal\":\"MINIMIZE\",\"params\":[" LR "]}");
    /* no tag: the default, what the API shows and the study reads */
    CHECK_STR(kiln_tune_metric_tag(&tag->training_input.hyperparameters), KILN_TUNE_DEFAULT_TAG);
    CHECK_STR(kiln_tune_metric_tag(hp), "loss");
    CHECK(kiln_tune_check_resume(&tag->training_input.hyperparameters, "p", prev, runtime, &d) ==
              1 &&
          strstr(d.v[0].description, "hyperparameterMetricTag"));
    kiln_diag_free(&d);
    kiln_job *best =
        hpjob("{\"goal\":\"MINIMIZE\",\"hyperparameterMetricTag\":\"loss\","
              "\"measurementSelectionType\":\"BEST_MEASUREMENT\",\"params\":[" LR "]}");
    CHECK(kiln_tune_check_resume(&best->training_input.hyperparameters, "p", prev, runtime, &d) ==
              1 &&
          strstr(d.v[0].description, "measurementSelectionType"));
    kiln_diag_free(&d);
    kiln_job_free(best);
    kiln_study *r = kiln_study_resume(hp, runtime);
    CHECK(r && kiln_study_trial_count(r) == 3 && kiln_study_count(r, KILN_TRIAL_SUCCEEDED) == 3);
    kiln_trial *t4 = r ? kiln_study_next(r, 3) : NULL;
    CHECK(t4 && t4->id == 4);
    if (t4) kiln_study_end(r, t4, KILN_TRIAL_SUCCEEDED, 4);
    kiln_trial *t5 = r ? kiln_study_next(r, 3) : NULL;
    CHECK(t5 && t5->id == 5);
    if (t5) kiln_study_end(r, t5, KILN_TRIAL_SUCCEEDED, 4);
    CHECK(r && kiln_study_next(r, 5) == NULL && kiln_study_finished(r)); /* 5 = maxTrials */
    kiln_study_free(r);
    free(runtime);
    kiln_job_free(prev);
    kiln_job_free(next);
    kiln_job_free(other);
    kiln_job_free(tag);
}

/* The decay-curve rule (earlyStoppingRule DECAY_CURVE), MAXIMIZE: three
 * completed trials 0.5/0.6/0.7 at steps 1..3 gain 0.2 after step 1 and 0.1
 * after step 2 (best final 0.7); a running trial is stopped only when its
 * best so far plus that gain is below 0.7. */
static void test_decay_curve(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MAXIMIZE\",\"maxTrials\":6,\"enableTrialEarlyStopping\":true,"
                        "\"earlyStoppingRule\":\"DECAY_CURVE\",\"params\":[" LR "]}");
    kiln_study *s = study_of(j, 7);
    for (int k = 0; k < 3; k++) {
        kiln_trial *t = kiln_study_next(s, 1);
        for (int st = 1; st <= 3; st++)
            kiln_study_report(s, t, st, 0.4 + 0.1 * st);
        CHECK(!kiln_study_should_stop(s, t)); /* nothing completed to project from */
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    kiln_trial *t = kiln_study_next(s, 1);
    kiln_study_report(s, t, 1, 0.55);
    CHECK(!kiln_study_should_stop(s, t)); /* 0.55 + 0.2 = 0.75 >= 0.7 */
    kiln_study_report(s, t, 2, 0.58);
    CHECK(kiln_study_should_stop(s, t)); /* 0.58 + 0.1 = 0.68 < 0.7 */
    char why[300];
    kiln_study_stop_reason(s, t, why, sizeof why);
    CHECK_MSG(strstr(why, "decay curve") && strstr(why, "0.68") && strstr(why, "0.7"), "%s", why);
    /* the median rule would let it run: 0.58 beats the median average 0.55 */
    kiln_job *mj = hpjob("{\"goal\":\"MAXIMIZE\",\"maxTrials\":6,\"enableTrialEarlyStopping\":"
                         "true,\"params\":[" LR "]}");
    json_t *js = kiln_study_to_json(s);
    kiln_study *m = kiln_study_from_json(&mj->training_input.hyperparameters, js);
    CHECK(m && !kiln_study_should_stop(m, kiln_study_find(m, 4)));
    kiln_study_free(m);
    /* past every completed trial's last step: no basis, it runs on */
    kiln_trial *u = kiln_study_next(s, 1);
    kiln_study_report(s, u, 3, 0.1);
    CHECK(!kiln_study_should_stop(s, u));
    /* the persisted form decides the same */
    kiln_study *r = kiln_study_from_json(&j->training_input.hyperparameters, js);
    CHECK(r && kiln_study_should_stop(r, kiln_study_find(r, 4)));
    kiln_study_free(r);
    json_decref(js);
    kiln_job_free(mj);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* measurementSelectionType (kiln extension; Vertex's studySpec): unset and
 * LAST_MEASUREMENT take a trial's last report, BEST_MEASUREMENT its best by
 * the goal, with that report's step; the persisted form keeps it; the
 * ranking and trainingOutput follow the objective. */
static void test_measurement_selection(void)
{
    static const char *const spec[] = {
        "{\"goal\":\"MAXIMIZE\",\"maxTrials\":2,\"params\":[" LR "]}",
        "{\"goal\":\"MAXIMIZE\",\"measurementSelectionType\":\"LAST_MEASUREMENT\","
        "\"maxTrials\":2,\"params\":[" LR "]}",
        "{\"goal\":\"MAXIMIZE\",\"measurementSelectionType\":\"BEST_MEASUREMENT\","
        "\"maxTrials\":2,\"params\":[" LR "]}",
        "{\"goal\":\"MINIMIZE\",\"measurementSelectionType\":\"BEST_MEASUREMENT\","
        "\"maxTrials\":2,\"params\":[" LR "]}"};
    /* curve 0.3@1, 0.9@2, 0.5@3: last 0.5@3; best max 0.9@2; best min 0.3@1 */
    static const double want[] = {0.5, 0.5, 0.9, 0.3};
    static const int64_t want_step[] = {3, 3, 2, 1};
    for (int k = 0; k < 4; k++) {
        kiln_job *j = hpjob(spec[k]);
        kiln_study *s = study_of(j, 7);
        kiln_trial *t = s ? kiln_study_next(s, 1) : NULL;
        CHECK(t != NULL);
        if (!t) continue;
        kiln_study_report(s, t, 1, 0.3);
        kiln_study_report(s, t, 2, 0.9);
        kiln_study_report(s, t, 3, 0.5);
        CHECK_MSG(t->objective == want[k] && t->step == want_step[k], "spec %d: %g at %lld", k,
                  t->objective, (long long)t->step);
        CHECK(t->n_curve == 3 && t->n_reports == 3);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
        /* a second trial with 0.6 last and 0.7 best: ranked by the objective */
        kiln_trial *u = kiln_study_next(s, 1);
        kiln_study_report(s, u, 1, 0.7);
        kiln_study_report(s, u, 2, 0.6);
        kiln_study_end(s, u, KILN_TRIAL_SUCCEEDED, 2);
        json_t *o = kiln_study_output_trials(s);
        const char *first = json_string_value(json_object_get(json_array_get(o, 0), "trialId"));
        /* MAXIMIZE last: 0.6 > 0.5 (2 first); best: 0.9 > 0.7 (1 first);
         * MINIMIZE best: 0.3 < 0.6 (1 first) */
        CHECK_STR(first, k < 2 ? "2" : "1");
        double fv = json_number_value(json_object_get(
            json_object_get(json_array_get(o, 0), "finalMetric"), "objectiveValue"));
        CHECK(fv == (k < 2 ? 0.6 : want[k]));
        json_decref(o);
        /* the persisted form comes back with the same objective */
        json_t *js = kiln_study_to_json(s);
        kiln_study *r = kiln_study_from_json(&j->training_input.hyperparameters, js);
        CHECK(r && kiln_study_find(r, 1)->objective == want[k] &&
              kiln_study_find(r, 1)->step == want_step[k]);
        json_decref(js);
        kiln_study_free(r);
        kiln_study_free(s);
        kiln_job_free(j);
    }
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_rules(c, &d);
    test_scales();
    test_grid();
    test_random();
    test_cholesky();
    test_model_beats_random();
    test_median_stop();
    test_asha();
    test_hypertune_and_output();
    test_measurement_selection();
    test_decay_curve();
    test_running_offsets();
    test_resume();
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
