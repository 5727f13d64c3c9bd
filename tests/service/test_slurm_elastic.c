/* tests/service/test_slurm_elastic.c - an elastic PyTorchJob's rules for its
 * workers' ends (src/exec/slurm/elastic.h): the bounds and maxRestarts from
 * the job, a failed worker started again alone until it is out of restarts
 * and leaves, the job failing once fewer than minReplicas can run, worker
 * 0's success ending it and its last failure failing it, which workers
 * are submitted before worker 0's address is known. */
#include <stdlib.h>
#include <string.h>

#include "exec/slurm/elastic.h"
#include "kiln/diag.h"
#include "test.h"

static kiln_job *job_of(const char *s)
{
    kiln_job *job = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    if (kiln_job_from_json(s, strlen(s), &job, &d) != KILN_OK) kiln_diag_print(&d, stderr);
    kiln_diag_free(&d);
    return job;
}

int main(void)
{
    char msg[400];
    kiln_job *job = job_of("{\"jobId\":\"e\",\"trainingInput\":{\"scaleTier\":\"BASIC\","
                           "\"region\":\"us-central1\",\"masterConfig\":{\"containerCommand\":"
                           "[\"true\"]},\"pytorchJob\":{\"workersOnly\":true,\"elasticPolicy\":{"
                           "\"minReplicas\":\"2\",\"maxReplicas\":\"3\",\"maxRestarts\":\"1\"}}}}");
    CHECK(job != NULL);
    if (!job) return 1;
    kiln_elastic_rules r = kiln_elastic_rules_of(job);
    CHECK(r.min == 2 && r.max == 3 && r.max_restarts == 1);

    /* no maxRestarts: the backoff limit (3 by default) */
    job->training_input.pytorch_job.elastic_policy.has_max_restarts = false;
    CHECK(kiln_elastic_rules_of(job).max_restarts == 3);

    /* only worker 0 before its address is known */
    kiln_ew w[3] = {{0}};
    CHECK(kiln_elastic_should_submit(w, 3, 0, false));
    CHECK(!kiln_elastic_should_submit(w, 3, 1, false));
    CHECK(kiln_elastic_should_submit(w, 3, 2, true));
    w[0].state = KILN_EW_RUNNING;
    CHECK(!kiln_elastic_should_submit(w, 3, 0, true));
    CHECK(!kiln_elastic_is_running(&r, w, 3)); /* 1 of min 2 */
    w[1].state = KILN_EW_RUNNING;
    w[2].state = KILN_EW_PENDING; /* waits in the queue: the job runs all the same */
    CHECK(kiln_elastic_is_running(&r, w, 3));
    CHECK(kiln_elastic_running(w, 3) == 2);

    /* worker 1 fails: started again alone (restart 1 of 1) */
    CHECK(kiln_elastic_worker_ended(&r, w, 3, 1, 137, msg, sizeof msg) == KILN_EV_GO_ON);
    CHECK(w[1].state == KILN_EW_WAIT && w[1].restarts == 1);
    CHECK(strstr(msg, "starting it again alone (restart 1 of at most 1") != NULL);
    CHECK(kiln_elastic_should_submit(w, 3, 1, true));
    w[1].state = KILN_EW_RUNNING;

    /* again: out of restarts, it leaves; workers 0 and 2 still make min 2 */
    CHECK(kiln_elastic_worker_ended(&r, w, 3, 1, 1, msg, sizeof msg) == KILN_EV_GO_ON);
    CHECK(w[1].state == KILN_EW_LEFT);
    CHECK(strstr(msg, "left the job") != NULL);
    CHECK(!kiln_elastic_should_submit(w, 3, 1, true));

    /* worker 2 out of restarts too: one can run, fewer than min: FAIL */
    w[2].restarts = 1;
    CHECK(kiln_elastic_worker_ended(&r, w, 3, 2, 143, msg, sizeof msg) == KILN_EV_FAIL);
    CHECK(strstr(msg, "fewer than minReplicas (2)") != NULL);

    /* a worker past 0 that ends with 0 just ends */
    kiln_ew v[3] = {{KILN_EW_RUNNING, 0}, {KILN_EW_RUNNING, 0}, {KILN_EW_RUNNING, 0}};
    CHECK(kiln_elastic_worker_ended(&r, v, 3, 2, 0, msg, sizeof msg) == KILN_EV_GO_ON);
    CHECK(v[2].state == KILN_EW_DONE);
    /* worker 0 fails: started again alone while it has restarts, then FAIL */
    CHECK(kiln_elastic_worker_ended(&r, v, 3, 0, 137, msg, sizeof msg) == KILN_EV_GO_ON);
    CHECK(v[0].state == KILN_EW_WAIT && v[0].restarts == 1);
    CHECK(strstr(msg, "it hosts the rendezvous") != NULL);
    v[0].state = KILN_EW_RUNNING;
    CHECK(kiln_elastic_worker_ended(&r, v, 3, 0, 137, msg, sizeof msg) == KILN_EV_FAIL);
    CHECK(strstr(msg, "rendezvous host") != NULL);
    /* worker 0's success ends the job */
    kiln_ew u[2] = {{KILN_EW_RUNNING, 0}, {KILN_EW_RUNNING, 0}};
    CHECK(kiln_elastic_worker_ended(&r, u, 2, 0, 0, msg, sizeof msg) == KILN_EV_SUCCEED);

    /* the record's words */
    for (int s = KILN_EW_WAIT; s <= KILN_EW_LEFT; s++)
        CHECK(kiln_ew_state_parse(kiln_ew_state_name((kiln_ew_state)s)) == (kiln_ew_state)s);
    CHECK(kiln_ew_state_parse("garbage") == KILN_EW_WAIT);
    CHECK(kiln_ew_state_parse(NULL) == KILN_EW_WAIT);
    kiln_job_free(job);
    TEST_DONE();
}
