/* src/exec/slurm/elastic.c - an elastic PyTorchJob's rules for its workers'
 * ends, as on one machine (src/exec/supervisor/supervisor.c, elastic_exit):
 * a worker that fails is started again alone up to maxRestarts (else the
 * backoff limit) while the others carry on; one out of restarts leaves the
 * job, which goes on while minReplicas workers can still run; worker 0's
 * success ends the job. See elastic.h. */
#include "exec/slurm/elastic.h"

#include <stdio.h>
#include <string.h>

static const char *const names[] = {"waiting", "pending", "running", "done", "left"};

const char *kiln_ew_state_name(kiln_ew_state s)
{
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "waiting";
}

kiln_ew_state kiln_ew_state_parse(const char *s)
{
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i]) == 0) return (kiln_ew_state)i;
    return KILN_EW_WAIT;
}

kiln_elastic_rules kiln_elastic_rules_of(const kiln_job *job)
{
    const kiln_elastic_policy *ep = &job->training_input.pytorch_job.elastic_policy;
    kiln_elastic_rules r = {.min = (int)ep->min_replicas, .max = (int)ep->max_replicas};
    if (r.min < 1) r.min = 1;
    if (r.max < r.min) r.max = r.min;
    r.max_restarts = ep->has_max_restarts ? (int)ep->max_restarts : kiln_job_backoff_limit(job);
    return r;
}

int kiln_elastic_running(const kiln_ew *w, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += w[i].state == KILN_EW_RUNNING;
    return c;
}

bool kiln_elastic_is_running(const kiln_elastic_rules *r, const kiln_ew *w, size_t n)
{
    return kiln_elastic_running(w, n) >= r->min;
}

bool kiln_elastic_should_submit(const kiln_ew *w, size_t n, size_t k, bool rdzv_known)
{
    return k < n && w[k].state == KILN_EW_WAIT && (k == 0 || rdzv_known);
}

kiln_elastic_verdict kiln_elastic_worker_ended(const kiln_elastic_rules *r, kiln_ew *w, size_t n,
                                               size_t k, int code, char *msg, size_t len)
{
    if (k >= n) return KILN_EV_GO_ON;
    if (code == 0) {
        w[k].state = KILN_EW_DONE;
        if (k == 0) {
            snprintf(msg, len, "worker 0 (the rendezvous host) succeeded");
            return KILN_EV_SUCCEED;
        }
        snprintf(msg, len, "worker %zu finished with status 0", k);
        return KILN_EV_GO_ON;
    }
    if (w[k].restarts < r->max_restarts) {
        w[k].restarts++;
        w[k].state = KILN_EW_WAIT;
        snprintf(msg, len,
                 "worker %zu exited with status %d: starting it again alone (restart %d of at "
                 "most %d, elasticPolicy.maxRestarts); the other workers carry on%s",
                 k, code, w[k].restarts, r->max_restarts,
                 k == 0 ? " (it hosts the rendezvous: a worker given another endpoint than its "
                          "new one is started again with it)"
                        : "");
        return KILN_EV_GO_ON;
    }
    w[k].state = KILN_EW_LEFT;
    if (k == 0) { /* as on one machine: the rendezvous host cannot leave */
        snprintf(msg, len,
                 "worker 0, the rendezvous host of the other workers, exited with a non-zero "
                 "status of %d after %d restarts (elasticPolicy.maxRestarts)",
                 code, w[k].restarts);
        return KILN_EV_FAIL;
    }
    int can = 0; /* workers that run, or still may */
    for (size_t i = 0; i < n; i++)
        can += w[i].state == KILN_EW_WAIT || w[i].state == KILN_EW_PENDING ||
               w[i].state == KILN_EW_RUNNING;
    if (can < r->min) {
        snprintf(msg, len,
                 "worker %zu exited with status %d after %d restarts (elasticPolicy.maxRestarts); "
                 "%d worker%s can still run, fewer than minReplicas (%d)",
                 k, code, w[k].restarts, can, can == 1 ? "" : "s", r->min);
        return KILN_EV_FAIL;
    }
    snprintf(msg, len,
             "worker %zu exited with status %d and left the job (out of restarts: %d); %d "
             "workers carry on (minReplicas %d, maxReplicas %d)",
             k, code, w[k].restarts, can, r->min, r->max);
    return KILN_EV_GO_ON;
}
