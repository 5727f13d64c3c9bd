/* kiln/queues.h - Kueue's admission, read from Kueue's own YAML (docs/queues.md).
 *
 * kilnd --queues FILE reads kueue.x-k8s.io/v1beta1 ResourceFlavor,
 * ClusterQueue, LocalQueue, Cohort and WorkloadPriorityClass documents.
 * Every field kiln acts on is read with Kueue's meaning; every other field is
 * refused at load, at its path ("ClusterQueue team-a: spec.admissionChecks").
 *
 * The module is data and arithmetic only: it routes a job to its queue,
 * says how much a job's gang asks of each covered resource, and answers
 * whether a request fits a ClusterQueue's quota (borrowing from its cohort
 * within borrowingLimit and lendingLimit). The supervisor owns the order of
 * a pass and the usage it charges (kiln_queues_charge): nothing here calls
 * back into it.
 *
 * Units: nvidia.com/gpu in devices, cpu in millicores, memory in bytes.
 * Not thread safe: a loaded config is immutable except for its usage
 * counters, which only the supervisor's thread touches. */
#ifndef KILN_QUEUES_H
#define KILN_QUEUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/catalog.h"
#include "kiln/devices.h"
#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_QUEUES_MAX_BYTES (1u << 20)
/* The labels a job names its queue and its priority class by (Kueue's). */
#define KILN_QUEUE_LABEL          "kueue.x-k8s.io/queue-name"
#define KILN_PRIORITY_CLASS_LABEL "kueue.x-k8s.io/priority-class"
/* A project's default LocalQueue: the one named "default" in its namespace
 * (Kueue's LocalQueueDefaulting). */
#define KILN_DEFAULT_LOCAL_QUEUE "default"

typedef enum kiln_qres {
    KILN_QRES_GPU,
    KILN_QRES_CPU,
    KILN_QRES_MEMORY,
    KILN_QRES_COUNT
} kiln_qres;

typedef enum kiln_qstrategy { KILN_Q_BEST_EFFORT_FIFO, KILN_Q_STRICT_FIFO } kiln_qstrategy;

typedef enum kiln_qpolicy {
    KILN_QP_NEVER,
    KILN_QP_LOWER_PRIORITY,
    KILN_QP_LOWER_OR_NEWER_EQUAL_PRIORITY,
    KILN_QP_ANY
} kiln_qpolicy;

/* stopPolicy: Hold admits nothing new; HoldAndDrain also evicts the
 * admitted workloads (back to QUEUED) */
typedef enum kiln_qstop { KILN_QSTOP_NONE, KILN_QSTOP_HOLD, KILN_QSTOP_HOLD_AND_DRAIN } kiln_qstop;
/* "None", "Hold", "HoldAndDrain" */
const char *kiln_queues_stop_name(kiln_qstop s);

typedef struct kiln_qflavor {
    char *name;
    kiln_map node_labels; /* spec.nodeLabels: the nodes this flavor's quota is for */
} kiln_qflavor;

typedef struct kiln_qquota {
    int64_t nominal;
    bool has_borrowing_limit, has_lending_limit;
    int64_t borrowing_limit, lending_limit;
} kiln_qquota;

/* One flavor of a resource group: its quota for each covered resource. */
typedef struct kiln_qgflavor {
    size_t flavor; /* index into kiln_queues.flavors */
    kiln_qquota q[KILN_QRES_COUNT];
    int64_t usage[KILN_QRES_COUNT]; /* charged by the supervisor (kiln_queues_charge) */
} kiln_qgflavor;

typedef struct kiln_qgroup {
    bool covers[KILN_QRES_COUNT];
    kiln_qgflavor *flavors; /* in the order quota is tried */
    size_t n;
} kiln_qgroup;

typedef struct kiln_qcq {
    char *name;
    char *cohort;         /* NULL: none (no borrowing, no lending) */
    bool all_namespaces;  /* namespaceSelector: {} */
    kiln_strv namespaces; /* namespaceSelector.matchLabels kubernetes.io/metadata.name */
    kiln_qstrategy strategy;
    kiln_qpolicy within_cq, reclaim; /* preemption.withinClusterQueue / reclaimWithinCohort */
    kiln_qpolicy borrow_within;      /* preemption.borrowWithinCohort.policy */
    bool has_max_priority_threshold;
    int64_t max_priority_threshold;
    bool fair_sharing; /* spec.fairSharing set */
    double weight;     /* fairSharing.weight (1 by default) */
    kiln_qstop stop;
    kiln_qgroup *groups;
    size_t ngroups;
    long pending, admitted; /* workloads, as the supervisor's last pass counted them */
} kiln_qcq;

typedef struct kiln_qlq {
    char *namespace_; /* a kiln project */
    char *name;
    size_t cq;
    kiln_qstop stop;
} kiln_qlq;

typedef struct kiln_qpc {
    char *name;
    int64_t value;
    char *description;
} kiln_qpc;

typedef struct kiln_queues {
    kiln_qflavor *flavors;
    size_t nflavors;
    kiln_qcq *cqs;
    size_t ncqs;
    kiln_qlq *lqs;
    size_t nlqs;
    kiln_strv
        cohorts; /* Cohort objects (declarations: a ClusterQueue's cohort need not have one) */
    kiln_qpc *pcs;
    size_t npcs;
} kiln_queues;

/* Parses and validates a YAML stream of Kueue objects. Every problem is in
 * `d`, each at "KIND NAME: field.path" (document N where the object has no
 * name). KILN_EINVAL, KILN_ELIMIT (size, depth, documents), KILN_ENOMEM. */
kiln_err kiln_queues_load(const char *buf, size_t len, kiln_queues **out, kiln_diag *d);
kiln_err kiln_queues_load_file(const char *path, kiln_queues **out, kiln_diag *d);
void kiln_queues_free(kiln_queues *q);

/* The LocalQueue a job of `project` goes to: the one its label
 * kueue.x-k8s.io/queue-name names, else the project's "default". -1 with the
 * reason in `why` when there is none, or when its ClusterQueue's
 * namespaceSelector leaves the project out. */
long kiln_queues_route(const kiln_queues *q, const char *project, const kiln_map *labels, char *why,
                       size_t whylen);
/* The job's priority: its kueue.x-k8s.io/priority-class's value, else
 * `fallback` (the job's own scheduling.priority). False with `why` when the
 * label names no WorkloadPriorityClass. */
bool kiln_queues_priority(const kiln_queues *q, const kiln_map *labels, int64_t fallback,
                          int64_t *out, char *why, size_t whylen);
/* Whether a job can be submitted: it routes (above), its priority class
 * exists, and its gang asks only resources its ClusterQueue covers (a
 * GPU job in a queue without nvidia.com/gpu could never be admitted). For a
 * tuning job `plans` are one trial's gang: each trial is admitted on its own. */
bool kiln_queues_check_job(const kiln_queues *q, const char *project, const kiln_job *job,
                           const kiln_replica_plan *plans, size_t np, char *why, size_t whylen);

/* What a gang asks (sum over every replica), in this module's units. A TPU
 * is no nvidia.com/gpu: it is not counted. */
void kiln_queues_request(const kiln_replica_plan *plans, size_t np, int64_t req[KILN_QRES_COUNT]);

/* Flavor assignment and quota: for each resource group of ClusterQueue
 * `cq` that covers a resource the request asks for, the first flavor (in
 * the group's order) that `usable[flavor]` allows and whose quota fits the
 * request, borrowing from the cohort where the ClusterQueue's own nominal
 * quota is short. */
typedef struct kiln_qassign {
    long flavor[8]; /* per resource group: index into kiln_queues.flavors, -1 = not asked */
    bool borrows;   /* some of it comes from the cohort */
} kiln_qassign;
/* True with *a filled when it fits now. False with `why` saying which
 * resource and flavor is short, by how much. */
bool kiln_queues_fit(const kiln_queues *q, size_t cq, const int64_t req[KILN_QRES_COUNT],
                     const bool *usable, kiln_qassign *a, char *why, size_t whylen);
/* Adds (sign 1) or gives back (sign -1) a request under an assignment. */
void kiln_queues_charge(kiln_queues *q, size_t cq, const kiln_qassign *a,
                        const int64_t req[KILN_QRES_COUNT], int sign);
void kiln_queues_reset_usage(kiln_queues *q);
/* The ClusterQueue's usage beyond its nominal quota, per resource summed
 * over flavors (what it borrows now). */
void kiln_queues_borrowed(const kiln_queues *q, size_t cq, int64_t out[KILN_QRES_COUNT]);
/* Kueue's weighted share: the largest over resources of (usage above
 * nominal) / (the cohort's lendable total), times 1000, divided by the
 * weight; 0 for a queue that borrows nothing. A weight of 0 gives INT64_MAX
 * when it borrows. */
int64_t kiln_queues_share(const kiln_queues *q, size_t cq, const int64_t extra[KILN_QRES_COUNT]);
/* Whether a flavor's nodeLabels all match a node's labels. */
bool kiln_queues_flavor_matches(const kiln_qflavor *f, const kiln_map *node_labels);
/* The flavor of group g of `cq` that a node belongs to (the first whose
 * nodeLabels it has), or -1. */
long kiln_queues_node_flavor(const kiln_queues *q, size_t cq, size_t g,
                             const kiln_map *node_labels);

const char *kiln_queues_res_name(kiln_qres r);
/* "2", "1500m", "16Gi": a resource amount in this module's units. */
void kiln_queues_format(kiln_qres r, int64_t v, char *buf, size_t len);

/* Under --executor slurm Slurm admits every job, and the file is carried
 * out with Slurm's accounting (docs/queues.md, "Under --executor slurm"):
 * a ClusterQueue is an account, its LocalQueues associations of their
 * projects' users to it, a WorkloadPriorityClass a QOS. One violation per
 * field (at its path) that Slurm gives no meaning (cohort lending, flavors'
 * nodeLabels, more than one flavor, StrictFIFO, preemption) or that kiln
 * does not carry into Slurm (a LocalQueue's stopPolicy: Hold), or whose
 * value Slurm cannot
 * hold (fractions of a CPU or MiB, a fractional weight, a negative
 * priority), and cpu or memory quotas unless `machine_resources`
 * (--slurm-machine-resources yes: only then does Slurm count a replica's
 * machine type as kiln does). Returns how many were added. */
size_t kiln_queues_slurm_refusals(const kiln_queues *q, bool machine_resources, kiln_diag *d);
/* Under --executor slurm (--slurm-queues kiln) kiln admits (as on one machine) and Slurm
 * places what was admitted: all of Kueue's fields keep their meaning but a
 * ResourceFlavor's nodeLabels other than a node's name (kubernetes.io/
 * hostname, kiln.dev/node: those pin the admitted job's replicas to that
 * node), which no node of a Slurm partition carries. Adds a diagnostic for
 * each such label; returns how many. */
size_t kiln_queues_steps_refusals(const kiln_queues *q, kiln_diag *d);
/* ClusterQueue cq's account's GrpTRES, "gres/gpu=2,cpu=8,mem=16384": its
 * nominal quota (summed over flavors) in Slurm's units (devices, CPUs, MiB),
 * -1 for a resource it does not cover (which clears an earlier limit). */
void kiln_queues_slurm_tres(const kiln_queues *q, size_t cq, char *buf, size_t len);
/* ClusterQueue cq's account's Fairshare: fairSharing.weight, 1 without it. */
long kiln_queues_slurm_fairshare(const kiln_queues *q, size_t cq);

#ifdef __cplusplus
}
#endif
#endif
