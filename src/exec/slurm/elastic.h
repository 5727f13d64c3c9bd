/* src/exec/slurm/elastic.h - what an elastic PyTorchJob does when one of its
 * workers ends, decided apart from how the workers are placed and launched.
 *
 * The Slurm executor runs each elastic worker as a Slurm job of its own
 * (docs/slurm.md, "Elastic PyTorchJobs"); it asks these functions what a
 * worker's end means for the job, when the job runs, and which workers to
 * submit. They hold no Slurm (or process) knowledge, so that the one
 * supervisor of issue 31 can take them over for both executors. */
#ifndef KILN_EXEC_SLURM_ELASTIC_H
#define KILN_EXEC_SLURM_ELASTIC_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln/job.h"

typedef enum {
    KILN_EW_WAIT,    /* no Slurm job now: to be submitted (first time, or again) */
    KILN_EW_PENDING, /* handed to the placement, waiting for room */
    KILN_EW_RUNNING, /* placed and running */
    KILN_EW_DONE,    /* its program ended with 0 */
    KILN_EW_LEFT,    /* out of restarts: it left the job */
} kiln_ew_state;

typedef struct kiln_ew {
    kiln_ew_state state;
    int restarts; /* times it was started again alone */
} kiln_ew;

typedef struct kiln_elastic_rules {
    int min, max;     /* minReplicas, maxReplicas (workers, worker 0 included) */
    int max_restarts; /* per worker: elasticPolicy.maxRestarts, else the backoff limit */
} kiln_elastic_rules;

typedef enum {
    KILN_EV_GO_ON,   /* the job carries on */
    KILN_EV_SUCCEED, /* worker 0 succeeded: the job ends SUCCEEDED, the others stop */
    KILN_EV_FAIL,    /* the job FAILS (the message says why), the others stop */
} kiln_elastic_verdict;

/* The rules of `job`'s elasticPolicy (min and max of at least 1). */
kiln_elastic_rules kiln_elastic_rules_of(const kiln_job *job);

/* "state" words for the runtime record, and back (KILN_EW_WAIT for garbage). */
const char *kiln_ew_state_name(kiln_ew_state s);
kiln_ew_state kiln_ew_state_parse(const char *s);

/* Worker k of w[0..n) ended with `code` (0: its program succeeded; a
 * placement that lost it without a status counts as 137). Updates w[k]
 * (WAIT: start it again alone, DONE, LEFT) and says what the job does;
 * `msg` gets a sentence without its full stop for the job's log (GO_ON)
 * or its errorMessage (FAIL). Worker 0 hosts the rendezvous: its success
 * ends the job, as kiln's master's does, and it cannot leave (out of
 * restarts, it fails the job). */
kiln_elastic_verdict kiln_elastic_worker_ended(const kiln_elastic_rules *r, kiln_ew *w, size_t n,
                                               size_t k, int code, char *msg, size_t len);

/* Workers running now. */
int kiln_elastic_running(const kiln_ew *w, size_t n);

/* Whether the job is RUNNING: minReplicas workers run. */
bool kiln_elastic_is_running(const kiln_elastic_rules *r, const kiln_ew *w, size_t n);

/* Whether worker k should be handed to the placement now: it waits, and
 * it is worker 0 or worker 0's address is known (`rdzv_known`: the
 * others are given it as their rendezvous endpoint). */
bool kiln_elastic_should_submit(const kiln_ew *w, size_t n, size_t k, bool rdzv_known);

#endif
