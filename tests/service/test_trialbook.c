/* tests/service/test_trialbook.c - the trial decisions both executors call
 * (src/exec/trials/trialbook.h): a new study's trials, a trial's spec,
 * its reports (hypertune file, kiln-train's report objects), early
 * stopping off unless asked, and how the job ends. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/trials/trialbook.h"
#include "test.h"
#include "test_tune_helpers.h"

int main(void)
{
    char why[300], msg[200], path[512];
    kiln_job *job = hpjob("{\"goal\":\"MAXIMIZE\",\"hyperparameterMetricTag\":\"test_accuracy\","
                          "\"maxTrials\":2,\"maxParallelTrials\":3,\"params\":[{\"parameterName\":"
                          "\"x\",\"type\":\"DOUBLE\",\"minValue\":0,\"maxValue\":1}]}");
    const kiln_hyperparameter_spec *hp = &job->training_input.hyperparameters;
    CHECK(kiln_trials_parallel(hp) == 3);

    /* a new study (no record, no resume: the store is not asked) */
    kiln_study *st = kiln_trials_open(NULL, "p", "t1", job, NULL, true, why, sizeof why);
    CHECK(st != NULL);
    kiln_trial *t = kiln_study_next(st, 1);
    CHECK(t && t->id == 1);

    /* a trial's spec: jobDir/N */
    CHECK(kiln_set_str(&job->training_input.job_dir, "/out/") == KILN_OK);
    kiln_job *tj = kiln_trials_job(job, 7, NULL);
    CHECK(tj && strcmp(tj->training_input.job_dir, "/out/7") == 0);
    kiln_job_free(tj);

    /* kiln-train's report objects: the tag in camelCase, at "step" */
    json_t *rep = json_pack("{s:s,s:i,s:f}", "event", "epoch", "step", 5, "testAccuracy", 0.25);
    kiln_trials_report(st, t, rep);
    json_decref(rep);
    CHECK(t->has_metric && t->objective == 0.25 && t->step == 5);

    /* the hypertune file under DIR/N: read once, not twice */
    char dir[] = "/tmp/kiln-trialbook-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    kiln_trials_dir(dir, 1, path, sizeof path);
    CHECK(mkdir(path, 0755) == 0);
    kiln_trials_metric_file(dir, 1, path, sizeof path);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{\"test_accuracy\": 0.5, \"global_step\": 9}\n", f);
        fclose(f);
    }
    CHECK(kiln_trials_read(st, t, dir, NULL));
    CHECK(t->objective == 0.5 && t->step == 9);
    CHECK(!kiln_trials_read(st, t, dir, NULL));

    /* a worse report is read (the objective stays the last report) */
    f = fopen(path, "a");
    CHECK(f != NULL);
    if (f) {
        fputs("{\"test_accuracy\": 0.375, \"global_step\": 10}\n", f);
        fclose(f);
    }
    CHECK(kiln_trials_read(st, t, dir, NULL));
    CHECK(t->objective == 0.375 && t->step == 10);

    /* enableTrialEarlyStopping unset: never stopped */
    CHECK(!kiln_trials_stop_early(st, t, hp, why, sizeof why));
    CHECK(!t->stopped_early);

    /* the end: a record of the study opens again, running trials queued */
    json_t *rec = json_pack("{s:o}", "study", kiln_study_to_json(st));
    char *txt = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    kiln_study *again = kiln_trials_open(NULL, "p", "t1", job, txt, true, why, sizeof why);
    free(txt);
    CHECK(again && kiln_study_find(again, 1)->state == KILN_TRIAL_QUEUED);
    kiln_study_free(again);

    kiln_study_end(st, t, KILN_TRIAL_SUCCEEDED, 2);
    CHECK(kiln_trials_outcome(st, false, msg, sizeof msg) == KILN_STATE_SUCCEEDED);
    CHECK(strstr(msg, "1 trials succeeded") != NULL);
    CHECK(kiln_trials_outcome(st, true, msg, sizeof msg) == KILN_STATE_CANCELLED);
    kiln_trial *t2 = kiln_study_next(st, 3);
    CHECK(t2 && t2->id == 2);
    kiln_study_end(st, t2, KILN_TRIAL_FAILED, 4);
    CHECK(kiln_study_finished(st));
    CHECK_STR(kiln_trials_end_word(KILN_TRIAL_QUEUED), "and is queued again");

    kiln_study *none = kiln_study_new(hp, 1);
    kiln_trial *t3 = kiln_study_next(none, 1);
    kiln_study_end(none, t3, KILN_TRIAL_FAILED, 2);
    CHECK(kiln_trials_outcome(none, false, msg, sizeof msg) == KILN_STATE_FAILED);
    CHECK(strstr(msg, "1 trials failed and none succeeded") != NULL);
    kiln_study_free(none);

    /* measurementSelectionType BEST_MEASUREMENT: a worse report is still
     * read (it changes the curve), the objective stays the best by the goal */
    kiln_job *bj = hpjob("{\"goal\":\"MAXIMIZE\",\"hyperparameterMetricTag\":\"test_accuracy\","
                         "\"measurementSelectionType\":\"BEST_MEASUREMENT\",\"maxTrials\":1,"
                         "\"params\":[{\"parameterName\":\"x\",\"type\":\"DOUBLE\","
                         "\"minValue\":0,\"maxValue\":1}]}");
    kiln_study *bs = kiln_trials_open(NULL, "p", "t2", bj, NULL, true, why, sizeof why);
    kiln_trial *bt = bs ? kiln_study_next(bs, 1) : NULL;
    CHECK(bt && bt->id == 1);
    if (bt) {
        CHECK(kiln_trials_read(bs, bt, dir, NULL)); /* 0.5@9 then 0.375@10 */
        CHECK(bt->objective == 0.5 && bt->step == 9 && bt->n_curve == 2);
        f = fopen(path, "a");
        if (f) {
            fputs("{\"test_accuracy\": 0.25, \"global_step\": 11}\n", f);
            fclose(f);
        }
        CHECK(kiln_trials_read(bs, bt, dir, NULL));
        CHECK(bt->objective == 0.5 && bt->step == 9 && bt->n_curve == 3);
        CHECK(!kiln_trials_read(bs, bt, dir, NULL));
    }
    kiln_study_free(bs);
    kiln_job_free(bj);

    unlink(path);
    kiln_trials_dir(dir, 1, path, sizeof path);
    rmdir(path);
    rmdir(dir);
    kiln_study_free(st);
    kiln_job_free(job);
    TEST_DONE();
}
