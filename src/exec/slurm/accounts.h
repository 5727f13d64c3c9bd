/* src/exec/slurm/accounts.h - a Kueue queues file carried out with Slurm's
 * accounting (internal to kilnd; docs/slurm.md, "Queues").
 *
 * Under --executor slurm --queues FILE, kilnd makes (or updates) with
 * sacctmgr, at start and at each SIGHUP reload:
 *   ClusterQueue C          -> account C under the parent (--slurm-account,
 *                              else root), GrpTRES = its nominal quota,
 *                              Fairshare = its fairSharing.weight;
 *   WorkloadPriorityClass P -> QOS P with Priority = its value;
 *   LocalQueue NS/L of C    -> an association of project NS's Unix user (the
 *                              one its jobs run as) to account C, allowed
 *                              every such QOS.
 * Each job is then submitted with --account=C (and --qos=P for its
 * kueue.x-k8s.io/priority-class): Slurm's limits admit it. Nothing is ever
 * removed from Slurm (a site's jobs may still use it). */
#ifndef KILN_EXEC_SLURM_ACCOUNTS_H
#define KILN_EXEC_SLURM_ACCOUNTS_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/kilnd.h"
#include "kiln/queues.h"

/* Makes q's accounts, QOS and associations in Slurm. Each sacctmgr call is
 * bounded (30 s). false with a sentence naming the object and Slurm's
 * words in `why` at the first that fails (the ones before stay made: each
 * call is create-or-modify, so running it again is safe). */
bool kiln_slurm_accounts_apply(const kilnd *d, const kiln_queues *q, char *why, size_t whylen);

/* The account and QOS a job of `project` with `labels` is submitted with
 * (its ClusterQueue's name; its priority class's name, "" for none), under
 * d->queues_mu. false when kilnd has no queues file or the job routes
 * nowhere (the create-time check refused such jobs). */
bool kiln_slurm_job_account(kilnd *d, const char *project, const kiln_map *labels, char *account,
                            size_t alen, char *qos, size_t qlen);

/* Why a job Slurm holds PENDING waits, in kiln's words: Slurm's reason
 * (squeue's Reason) and, for a limit of its account or QOS, which
 * ClusterQueue's quota or priority class it is. */
void kiln_slurm_wait_reason(const kiln_queues *q, const char *account, const char *qos,
                            const char *reason, char *buf, size_t len);

/* A kiln job Slurm holds PENDING, as squeue --json says (borrowed strings). */
typedef struct kiln_slurm_wait {
    const char *project, *job_id;
    const char *account, *qos, *reason; /* squeue's; NULL: not said */
} kiln_slurm_wait;

/* Replaces kilnd's record of why jobs wait (d->qwait, the API's
 * kilnStatus.queue) with these, in kiln_slurm_wait_reason's words, each
 * with its ClusterQueue (its account's) and the project's LocalQueue of it.
 * Takes d->queues_mu. */
void kiln_slurm_publish_waits(kilnd *d, const kiln_slurm_wait *w, size_t n);

/* Each ClusterQueue's usage, admitted and pending workloads as Slurm counts
 * them against its account (scontrol show assoc_mgr: the account's GrpTRES
 * in use, GrpJobs running, GrpSubmitJobs submitted), for GET /v1/queues and
 * /metrics: every job of the account, kiln's or not. Nothing changes when
 * scontrol does not answer. Takes d->queues_mu (not while scontrol runs). */
void kiln_slurm_queue_usage(kilnd *d);

#endif
