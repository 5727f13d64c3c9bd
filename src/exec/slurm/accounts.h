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
 * removed from Slurm (a site's jobs may still use it).
 *
 * kilnd's queues are kilnd's, under its lock (queues_mu): the functions
 * here that read or write the queues in use are given them by a caller that
 * holds that lock, and return what they find for the caller to keep. None
 * takes a lock, and none that runs a Slurm command may be called with it
 * held (kiln_slurm_accounts_apply is given a set not yet in use). */
#ifndef KILN_EXEC_SLURM_ACCOUNTS_H
#define KILN_EXEC_SLURM_ACCOUNTS_H

#include <stdbool.h>
#include <stddef.h>

#include "exec/slurm/slurm.h"
#include "kiln/queues.h"

/* Makes q's accounts, QOS and associations in Slurm (each ClusterQueue's
 * account under sc->account, each LocalQueue's project's user from
 * sc->users). Each sacctmgr call is bounded (30 s): q is one the caller
 * alone holds (a file just loaded), never under the queues' lock. false with
 * a sentence naming the object and Slurm's words in `why` at the first that
 * fails (the ones before stay made: each call is create-or-modify, so
 * running it again is safe). */
bool kiln_slurm_accounts_apply(const kiln_slurm_cfg *sc, const kiln_queues *q, char *why,
                               size_t whylen);

/* The account and QOS a job of `project` with `labels` is submitted with
 * (its ClusterQueue's name in q; its priority class's name, "" for none).
 * The caller holds the queues' lock. false when q is NULL (no queues file)
 * or the job routes nowhere (the create-time check refused such jobs). */
bool kiln_slurm_job_account(const kiln_queues *q, const char *project, const kiln_map *labels,
                            char *account, size_t alen, char *qos, size_t qlen);

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

/* Why one such job waits, as kilnd records it (its kilnStatus.queue).
 * Every string is the holder's (malloc'd). */
typedef struct kiln_slurm_waiting {
    char *project, *job_id;
    char *cluster_queue; /* its account's ClusterQueue; NULL: none of q's */
    char *local_queue;   /* the project's LocalQueue of it; NULL: none */
    char *why;           /* kiln_slurm_wait_reason's words */
} kiln_slurm_waiting;

/* w[0..n) explained against q, in order: a new array (the caller's, as are
 * its strings) of *k records, a job left out where memory ran out; NULL
 * (*k = 0) when the array itself could not be had. The caller holds the
 * queues' lock, and puts the records in place of its own under it. */
kiln_slurm_waiting *kiln_slurm_waits(const kiln_queues *q, const kiln_slurm_wait *w, size_t n,
                                     size_t *k);
/* Frees k records' strings and the array. */
void kiln_slurm_waiting_free(kiln_slurm_waiting *v, size_t k);

/* Each ClusterQueue's usage, admitted and pending workloads as Slurm counts
 * them against its account (scontrol show assoc_mgr: the account's GrpTRES
 * in use, GrpJobs running, GrpSubmitJobs submitted), for GET /v1/queues and
 * /metrics: every job of the account, kiln's or not. In three steps, so
 * that scontrol never runs under the queues' lock:
 *   kiln_slurm_usage_accounts  the accounts to ask of, from q (lock held);
 *   kiln_slurm_usage_read      scontrol's answer (up to 10 s; lock not held);
 *   kiln_slurm_usage_store     that answer put in q, whichever q the lock
 *                              guards by then (lock held). */
typedef struct kiln_slurm_acct_usage {
    char *account;
    long long jobs, submitted;       /* GrpJobs, GrpSubmitJobs in use; -1: not said */
    long long used[KILN_QRES_COUNT]; /* GrpTRES in use, in kiln_queues' units; -1: not said */
} kiln_slurm_acct_usage;
typedef struct kiln_slurm_usage {
    kiln_slurm_acct_usage *v; /* one per account line of scontrol's, in its order */
    size_t n;
} kiln_slurm_usage;

/* scontrol's "accounts=A,B" of q's ClusterQueues into buf; false when q is
 * NULL or has none (nothing to ask). */
bool kiln_slurm_usage_accounts(const kiln_queues *q, char *buf, size_t len);
/* Asks scontrol of `accounts` (kiln_slurm_usage_accounts'); false, *u
 * empty, when scontrol does not answer (nothing is to change). */
bool kiln_slurm_usage_read(const char *accounts, kiln_slurm_usage *u);
/* Puts u in q: every usage and count of q cleared, then each ClusterQueue's
 * from its account's line (one flavor under Slurm: its first covering
 * resource group's first). */
void kiln_slurm_usage_store(kiln_queues *q, const kiln_slurm_usage *u);
void kiln_slurm_usage_free(kiln_slurm_usage *u);

#endif
