/* test_tune_cond.c - conditional parameters (parentParameterName, what
 * Vertex's conditionalParameterSpecs become): the rules, the grid over the
 * conditional tree, random and model-based search never setting a child its
 * parent switched off, the flags and the trials shown, the persisted form
 * and a resumed study. Jobs are Job JSON, as a user writes them. */
#include <math.h>
#include <stdlib.h>

#include "kiln/tune.h"
#include "test.h"
#include "test_catalog_helpers.h"
#include "test_tune_helpers.h"
#include "test_tune_rules.h"
#include "tune/tune_int.h"

#define P "trainingInput.hyperparameters."

#define OPT                                                                                        \
    "{\"parameterName\":\"optimizer\",\"type\":\"CATEGORICAL\",\"categoricalValues\":[\"sgd\","    \
    "\"adam\"]}"
#define LRC                                                                                        \
    "{\"parameterName\":\"learning_rate\",\"type\":\"DISCRETE\",\"discreteValues\":[0.001,0.01,"   \
    "0.1],\"parentParameterName\":\"optimizer\",\"parentCategoricalValues\":[\"sgd\"]}"
#define B1                                                                                         \
    "{\"parameterName\":\"beta1\",\"type\":\"DISCRETE\",\"discreteValues\":[0.9,0.99],"            \
    "\"parentParameterName\":\"optimizer\",\"parentCategoricalValues\":[\"adam\"]}"
/* under learning_rate 0.01 only: a third level */
#define NEST                                                                                       \
    "{\"parameterName\":\"nesterov\",\"type\":\"CATEGORICAL\",\"categoricalValues\":[\"yes\","     \
    "\"no\"],\"parentParameterName\":\"learning_rate\",\"parentValues\":[0.01]}"
/* an INTEGER parent: width only with 2 or 3 layers */
#define LAYERS "{\"parameterName\":\"layers\",\"type\":\"INTEGER\",\"minValue\":1,\"maxValue\":3}"
#define WIDTH                                                                                      \
    "{\"parameterName\":\"width\",\"type\":\"DOUBLE\",\"minValue\":8,\"maxValue\":64,"             \
    "\"parentParameterName\":\"layers\",\"parentValues\":[2,3]}"
#define WIDTHI                                                                                     \
    "{\"parameterName\":\"width\",\"type\":\"INTEGER\",\"minValue\":8,\"maxValue\":9,"             \
    "\"parentParameterName\":\"layers\",\"parentValues\":[2,3]}"

#define HP(algo, params)                                                                           \
    "{\"goal\":\"MINIMIZE\",\"algorithm\":\"" algo "\",\"params\":[" params "]}"

static void test_rules(const kiln_catalog *c, kiln_diag *d)
{
    good(c, d, HP("GRID_SEARCH", OPT "," LRC "," B1 "," NEST "," LAYERS "," WIDTHI));
    good(c, d, HP("RANDOM_SEARCH", OPT "," LRC "," LAYERS "," WIDTH));
    /* the parent: named, listed before, not DOUBLE */
    bad(c, d,
        HP("RANDOM_SEARCH", OPT ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,"
                                "\"maxValue\":2,\"parentParameterName\":\"nope\","
                                "\"parentCategoricalValues\":[\"sgd\"]}"),
        P "params[1].parentParameterName");
    bad(c, d, HP("RANDOM_SEARCH", LRC "," OPT), P "params[0].parentParameterName");
    bad(c, d,
        HP("RANDOM_SEARCH",
           "{\"parameterName\":\"lr\",\"type\":\"DOUBLE\",\"minValue\":0.1,\"maxValue\":1},"
           "{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,\"maxValue\":2,"
           "\"parentParameterName\":\"lr\",\"parentValues\":[0.5]}"),
        P "params[1].parentParameterName");
    /* the values: the parent's own, in the list of its type */
    bad(c, d,
        HP("RANDOM_SEARCH",
           OPT ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,\"maxValue\":2,"
               "\"parentParameterName\":\"optimizer\",\"parentCategoricalValues\":[\"rmsprop\"]}"),
        P "params[1].parentCategoricalValues[0]");
    bad(c, d,
        HP("RANDOM_SEARCH", OPT ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,"
                                "\"maxValue\":2,\"parentParameterName\":\"optimizer\","
                                "\"parentCategoricalValues\":[\"sgd\"],\"parentValues\":[1]}"),
        P "params[1].parentValues");
    bad(c, d,
        HP("RANDOM_SEARCH",
           OPT ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,\"maxValue\":2,"
               "\"parentParameterName\":\"optimizer\"}"),
        P "params[1].parentCategoricalValues");
    bad(c, d,
        HP("RANDOM_SEARCH", LAYERS ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,"
                                   "\"maxValue\":2,\"parentParameterName\":\"layers\","
                                   "\"parentValues\":[2,5]}"),
        P "params[1].parentValues[1]");
    bad(c, d,
        HP("RANDOM_SEARCH",
           OPT "," LRC ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,"
               "\"maxValue\":2,\"parentParameterName\":\"learning_rate\",\"parentValues\":[0.02]}"),
        P "params[2].parentValues[0]");
    bad(c, d,
        HP("RANDOM_SEARCH", OPT ",{\"parameterName\":\"x\",\"type\":\"INTEGER\",\"minValue\":1,"
                                "\"maxValue\":2,\"parentValues\":[1]}"),
        P "params[1].parentValues");
    /* a child's name is unique across the whole study */
    bad(c, d,
        HP("RANDOM_SEARCH",
           OPT "," LRC ",{\"parameterName\":\"learning_rate\",\"type\":\"DISCRETE\","
               "\"discreteValues\":[1,2],\"parentParameterName\":\"optimizer\","
               "\"parentCategoricalValues\":[\"adam\"]}"),
        P "params[2].parameterName");
    /* a chain of 8 parents is one too deep; 7 is fine */
    for (int depth = 7; depth <= 8; depth++) {
        char buf[3000];
        size_t o = (size_t)snprintf(buf, sizeof buf, "{\"goal\":\"MINIMIZE\",\"params\":[");
        for (int k = 0; k <= depth; k++) {
            o += (size_t)snprintf(buf + o, sizeof buf - o,
                                  "%s{\"parameterName\":\"c%d\",\"type\":\"CATEGORICAL\","
                                  "\"categoricalValues\":[\"a\",\"b\"]",
                                  k ? "," : "", k);
            if (k)
                o += (size_t)snprintf(buf + o, sizeof buf - o,
                                      ",\"parentParameterName\":\"c%d\","
                                      "\"parentCategoricalValues\":[\"a\"]",
                                      k - 1);
            o += (size_t)snprintf(buf + o, sizeof buf - o, "}");
        }
        snprintf(buf + o, sizeof buf - o, "]}");
        if (depth == 7)
            good(c, d, buf);
        else
            bad(c, d, buf, P "params[8].parentParameterName");
    }
}

/* Whether a trial's parameter set honours the conditions: each parameter is
 * set exactly when it has no parent or its parent is set to a listed value. */
static bool honours(const kiln_hyperparameter_spec *hp, const double *v)
{
    for (size_t i = 0; i < hp->n_params; i++) {
        const kiln_parameter_spec *p = &hp->params[i];
        bool want = true;
        if (p->parent_parameter) {
            size_t k = 0;
            while (k < i && strcmp(hp->params[k].parameter_name, p->parent_parameter) != 0)
                k++;
            const kiln_parameter_spec *pp = &hp->params[k];
            want = false;
            if (!isnan(v[k]) && strcmp(pp->type, "CATEGORICAL") == 0) {
                for (size_t l = 0; l < p->parent_categorical_values.n; l++)
                    want |= strcmp(pp->categorical_values.v[(size_t)v[k]],
                                   p->parent_categorical_values.v[l]) == 0;
            } else if (!isnan(v[k])) {
                for (size_t l = 0; l < p->n_parent_values; l++)
                    want |= p->parent_values[l] == v[k];
            }
        }
        if (want == isnan(v[i])) return false;
    }
    return true;
}

/* The names of a trial's flags, "a,b,c". */
static void flag_names(kiln_study *s, kiln_trial *t, char *buf, size_t len)
{
    kiln_strv a = {0};
    size_t o = 0;
    buf[0] = '\0';
    CHECK(kiln_trial_args(s, t, &a) == KILN_OK);
    for (size_t i = 0; i < a.n && o < len; i++) {
        const char *eq = strchr(a.v[i], '=');
        int n = eq ? (int)(eq - a.v[i]) - 2 : 0;
        o += (size_t)snprintf(buf + o, len - o, "%s%.*s", i ? "," : "", n, a.v[i] + 2);
    }
    kiln_strv_clear(&a);
}

/* The example of the issue: optimizer {sgd, adam}, learning_rate (3 values)
 * under sgd, beta1 (2) under adam: 5 trials, not 2 x 3 x 2; each with
 * exactly its own flags. */
static void test_grid_two_levels(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MINIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"maxTrials\":20,"
                        "\"maxParallelTrials\":20,\"params\":[" OPT "," LRC "," B1 "]}");
    const kiln_hyperparameter_spec *hp = &j->training_input.hyperparameters;
    kiln_study *s = kiln_study_new(hp, 1);
    static const char *const names[] = {"optimizer,learning_rate", "optimizer,learning_rate",
                                        "optimizer,learning_rate", "optimizer,beta1",
                                        "optimizer,beta1"};
    static const double lr[] = {0.001, 0.01, 0.1}, b1[] = {0.9, 0.99};
    for (int k = 0; k < 5; k++) {
        kiln_trial *t = kiln_study_next(s, 1);
        CHECK(t != NULL);
        if (!t) break;
        char got[128];
        flag_names(s, t, got, sizeof got);
        CHECK_MSG(strcmp(got, names[k]) == 0, "trial %d: %s, want %s", k + 1, got, names[k]);
        CHECK(t->values[0] == (k < 3 ? 0 : 1));
        CHECK(k < 3 ? t->values[1] == lr[k] && isnan(t->values[2])
                    : isnan(t->values[1]) && t->values[2] == b1[k - 3]);
    }
    CHECK(kiln_study_next(s, 1) == NULL); /* 5 settings, though maxTrials is 20 */
    for (size_t i = 0; i < kiln_study_trial_count(s); i++)
        kiln_study_end(s, kiln_study_trial(s, i), KILN_TRIAL_SUCCEEDED, 2);
    CHECK(kiln_study_trial_count(s) == 5 && kiln_study_finished(s));
    /* what trainingOutput shows: only the trial's own parameters */
    json_t *o = kiln_study_output_trials(s);
    for (size_t i = 0; i < json_array_size(o); i++) {
        json_t *h = json_object_get(json_array_get(o, i), "hyperparameters");
        int id = atoi(json_string_value(json_object_get(json_array_get(o, i), "trialId")));
        CHECK(json_object_size(h) == 2 && json_object_get(h, "optimizer"));
        CHECK(id <= 3 ? json_object_get(h, "learning_rate") != NULL
                      : json_object_get(h, "beta1") != NULL);
    }
    json_decref(o);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* Three levels beside a top-level INTEGER parent. sgd: learning_rate
 * 0.001, 0.01 (with nesterov yes or no) and 0.1, 4 settings; adam: beta1's
 * 2; so optimizer has 6. layers: 1 (no width), 2 and 3 (width 8 or 9): 5.
 * 30 in all, each distinct. */
static void test_grid_tree(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MINIMIZE\",\"algorithm\":\"GRID_SEARCH\",\"maxTrials\":40,"
                        "\"maxParallelTrials\":40,\"params\":[" OPT "," LRC "," B1 "," NEST
                        "," LAYERS "," WIDTHI "]}");
    const kiln_hyperparameter_spec *hp = &j->training_input.hyperparameters;
    kiln_study *s = kiln_study_new(hp, 1);
    char seen[30][160];
    int n = 0;
    bool ok = true, distinct = true;
    for (kiln_trial *t; (t = kiln_study_next(s, 1)) != NULL && n < 30; n++) {
        ok &= honours(hp, t->values);
        kiln_strv a = {0};
        kiln_trial_args(s, t, &a);
        size_t o = 0;
        seen[n][0] = '\0';
        for (size_t i = 0; i < a.n; i++)
            o += (size_t)snprintf(seen[n] + o, sizeof seen[n] - o, "%s ", a.v[i]);
        kiln_strv_clear(&a);
        for (int m = 0; m < n; m++)
            distinct &= strcmp(seen[m], seen[n]) != 0;
    }
    CHECK_MSG(n == 30, "%d grid points, want 30", n);
    CHECK(ok);
    CHECK(distinct);
    CHECK(kiln_study_next(s, 1) == NULL);
    /* the third level appears only under sgd with learning_rate 0.01 */
    int nest = 0;
    for (int m = 0; m < n; m++)
        if (strstr(seen[m], "--nesterov=")) {
            nest++;
            CHECK(strstr(seen[m], "--optimizer=sgd ") && strstr(seen[m], "--learning_rate=0.01 "));
        }
    CHECK(nest == 2 * 5); /* yes/no, times the 5 layer settings */
    kiln_study_free(s);
    kiln_job_free(j);
}

/* Random and model-based search over 200 samples each: a child is set
 * exactly when its parent's value is listed, and every branch is reached. */
static void test_random_and_gp(void)
{
    kiln_job *j = hpjob("{\"goal\":\"MINIMIZE\",\"algorithm\":\"RANDOM_SEARCH\",\"maxTrials\":200,"
                        "\"maxParallelTrials\":200,\"params\":[" OPT "," LRC "," B1 "," NEST
                        "," LAYERS "," WIDTH "]}");
    kiln_hyperparameter_spec *hp = &j->training_input.hyperparameters;
    kiln_study *s = kiln_study_new(hp, 9);
    bool ok = true;
    int with[6] = {0};
    for (int k = 0; k < 200; k++) {
        kiln_trial *t = kiln_study_next(s, 1);
        CHECK(t != NULL);
        if (!t) break;
        ok &= honours(hp, t->values);
        for (int i = 0; i < 6; i++)
            with[i] += !isnan(t->values[i]);
        /* a loss that favours adam with a large beta1, for the GP below */
        kiln_study_report(s, t, 1, t->values[0] == 1 ? 1 - t->values[2] : 1 + t->values[1]);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    CHECK(ok);
    CHECK(with[0] == 200 && with[4] == 200);
    CHECK(with[1] > 50 && with[2] > 50 && with[1] + with[2] == 200);
    CHECK(with[3] > 5 && with[3] < with[1]);
    CHECK(with[5] > 70 && with[5] < 200);
    /* the Gaussian process on the first 20 trials, 200 draws */
    const kiln_trial *done[20];
    for (size_t i = 0; i < 20; i++)
        done[i] = kiln_study_trial(s, i);
    int gp_ok = 0, gp_with[6] = {0};
    ok = true;
    for (uint64_t r = 0; r < 200; r++) {
        double v[6];
        uint64_t rng = 0x1234 + r * 0x9e3779b97f4a7c15ULL;
        if (!kiln__tune_gp(hp, done, 20, false, &rng, v)) continue;
        gp_ok++;
        ok &= honours(hp, v);
        for (int i = 0; i < 6; i++)
            gp_with[i] += !isnan(v[i]);
    }
    CHECK(gp_ok == 200);
    CHECK(ok);
    CHECK(gp_with[0] == 200 && gp_with[1] + gp_with[2] == 200);
    kiln_study_free(s);
    /* through the study: ALGORITHM_UNSPECIFIED past its random start */
    free(hp->algorithm);
    hp->algorithm = NULL;
    s = kiln_study_new(hp, 3);
    ok = true;
    for (int k = 0; k < 25; k++) {
        kiln_trial *t = kiln_study_next(s, 1);
        CHECK(t != NULL);
        if (!t) break;
        ok &= honours(hp, t->values);
        kiln_study_report(s, t, 1, t->values[0] == 1 ? 1 - t->values[2] : 1 + t->values[1]);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    CHECK(ok);
    kiln_study_free(s);
    kiln_job_free(j);
}

/* The persisted form keeps which parameters a trial lacks (null); a record
 * whose trials do not fit the conditions is refused; a resumed study keeps
 * its conditions and its new trials honour them. */
static void test_persist_and_resume(void)
{
    const char *spec = "{\"goal\":\"MINIMIZE\",\"algorithm\":\"RANDOM_SEARCH\",\"maxTrials\":%d,"
                       "%s\"params\":[" OPT "," LRC "," B1 "]}";
    char buf[2048];
    snprintf(buf, sizeof buf, spec, 6, "");
    kiln_job *prev = hpjob(buf);
    const kiln_hyperparameter_spec *php = &prev->training_input.hyperparameters;
    kiln_study *s = kiln_study_new(php, 5);
    for (int i = 0; i < 6; i++) {
        kiln_trial *t = kiln_study_next(s, 1);
        kiln_study_report(s, t, 1, 0.5 + i);
        kiln_study_end(s, t, KILN_TRIAL_SUCCEEDED, 2);
    }
    json_t *js = kiln_study_to_json(s);
    kiln_study *back = kiln_study_from_json(php, js);
    CHECK(back && kiln_study_trial_count(back) == 6);
    for (size_t i = 0; back && i < 6; i++) {
        kiln_trial *a = kiln_study_trial(s, i), *b = kiln_study_trial(back, i);
        char fa[128], fb[128];
        flag_names(s, a, fa, sizeof fa);
        flag_names(back, b, fb, sizeof fb);
        CHECK_MSG(strcmp(fa, fb) == 0, "trial %zu: %s, then %s", i + 1, fa, fb);
        CHECK(honours(php, b->values));
    }
    kiln_study_free(back);
    /* a trial with a value for the parameter its optimizer leaves out */
    json_t *vals = json_object_get(json_array_get(json_object_get(js, "trials"), 0), "values");
    bool sgd = json_number_value(json_array_get(vals, 0)) == 0;
    json_t *copy = json_deep_copy(js);
    json_t *cv = json_object_get(json_array_get(json_object_get(copy, "trials"), 0), "values");
    json_array_set_new(cv, sgd ? 2 : 1, json_real(0.9));
    CHECK(kiln_study_from_json(php, copy) == NULL);
    json_decref(copy);
    copy = json_deep_copy(js); /* and one without the parameter it has */
    cv = json_object_get(json_array_get(json_object_get(copy, "trials"), 0), "values");
    json_array_set_new(cv, sgd ? 1 : 2, json_null());
    CHECK(kiln_study_from_json(php, copy) == NULL);
    json_decref(copy);

    json_t *rt = json_pack("{s:o}", "study", js);
    char *runtime = json_dumps(rt, JSON_COMPACT);
    json_decref(rt);
    kiln_study_free(s);
    prev->state = KILN_STATE_SUCCEEDED;
    snprintf(buf, sizeof buf, spec, 10, "\"resumePreviousJobId\":\"p\",");
    kiln_job *next = hpjob(buf);
    const kiln_hyperparameter_spec *hp = &next->training_input.hyperparameters;
    kiln_diag d = KILN_DIAG_INIT;
    CHECK(kiln_tune_check_resume(hp, "p", prev, runtime, &d) == 0 && d.n == 0);
    kiln_diag_free(&d);
    /* the same parameters under another condition: refused */
    kiln_job *other = hpjob(
        "{\"goal\":\"MINIMIZE\",\"algorithm\":\"RANDOM_SEARCH\",\"params\":[" OPT
        ",{\"parameterName\":\"learning_rate\",\"type\":\"DISCRETE\",\"discreteValues\":[0.001,"
        "0.01,0.1],\"parentParameterName\":\"optimizer\",\"parentCategoricalValues\":[\"adam\"]},"
        "{\"parameterName\":\"beta1\",\"type\":\"DISCRETE\",\"discreteValues\":[0.9,0.99],"
        "\"parentParameterName\":\"optimizer\",\"parentCategoricalValues\":[\"adam\"]}]}");
    CHECK(kiln_tune_check_resume(&other->training_input.hyperparameters, "p", prev, runtime, &d) ==
              1 &&
          strstr(d.v[0].description, "parentCategoricalValues"));
    kiln_diag_free(&d);
    kiln_study *r = kiln_study_resume(hp, runtime);
    CHECK(r && kiln_study_trial_count(r) == 6);
    bool ok = true;
    for (int k = 0; r && k < 4; k++) {
        kiln_trial *t = kiln_study_next(r, 3);
        CHECK(t && t->id == 7 + k);
        if (!t) break;
        ok &= honours(hp, t->values);
        kiln_study_end(r, t, KILN_TRIAL_SUCCEEDED, 4);
    }
    CHECK(ok);
    CHECK(r && kiln_study_next(r, 5) == NULL && kiln_study_finished(r));
    kiln_study_free(r);
    free(runtime);
    kiln_job_free(prev);
    kiln_job_free(next);
    kiln_job_free(other);
}

int main(void)
{
    kiln_catalog *c = load_default();
    kiln_diag d = KILN_DIAG_INIT;
    test_rules(c, &d);
    test_grid_two_levels();
    test_grid_tree();
    test_random_and_gp();
    test_persist_and_resume();
    kiln_diag_free(&d);
    kiln_catalog_free(c);
    TEST_DONE();
}
