/* kiln/queues.h - Kueue's admission, read from Kueue's own YAML (docs/queues.md).
 *
 * kilnd --queues PATH reads kueue.x-k8s.io/v1beta2 and v1beta1 ResourceFlavor,
 * ClusterQueue, LocalQueue, Cohort, Topology and WorkloadPriorityClass documents into
 * one model (v1beta1 converted as Kueue converts it to v1beta2).
 * Every field kiln acts on is read with Kueue's meaning; every other field is
 * refused at load, at its path ("ClusterQueue team-a: spec.admissionChecks").
 *
 * The module is data and arithmetic only: it routes a job to its queue,
 * says how much a job's gang asks of each covered resource, answers
 * whether a request fits a ClusterQueue's quota (borrowing from its cohort
 * within borrowingLimit and lendingLimit), and decides Kueue's orders (of
 * a queue, of the heads) and whom a head preempts (kiln_q_preempt). The
 * supervisor runs a pass, charges the usage (kiln_queues_charge) and
 * carries the decisions out: nothing here calls back into it.
 *
 * Units: nvidia.com/gpu in devices, cpu in millicores, memory in bytes,
 * pods in replicas.
 * Not thread safe: a loaded config is immutable except for its usage
 * counters, which only the supervisor's thread touches. */
#ifndef KILN_QUEUES_H
#define KILN_QUEUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

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
/* The ClusterQueue label that declares it a Vertex persistent resource. */
#define KILN_PERSISTENT_RESOURCE_LABEL "kiln.dev/persistent-resource"
/* Kueue's limit on a Topology's levels */
#define KILN_TOPOLOGY_MAX_LEVELS 16

typedef enum kiln_qres {
    KILN_QRES_GPU,
    KILN_QRES_CPU,
    KILN_QRES_MEMORY,
    KILN_QRES_PODS, /* "pods": a job's replicas (each one pod in Kueue's terms) */
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
    /* spec.nodeTaints: a workload is admitted to this flavor only if its
     * pods' tolerations, with the flavor's own, tolerate each NoSchedule and
     * NoExecute one (PreferNoSchedule is ignored, as Kueue does) */
    kiln_taint *node_taints;
    size_t n_node_taints;
    /* spec.tolerations: added to an admitted workload's pods, so that they
     * may land on the flavor's tainted nodes */
    kiln_toleration *tolerations;
    size_t n_tolerations;
    /* spec.topologyName: index into kiln_queues.topologies, -1: none. A job
     * admitted to this flavor is placed by topology (kiln/sched.h) when its
     * pods ask for a level */
    long topology;
} kiln_qflavor;

/* A Topology (topology-aware scheduling): node labels naming nested
 * domains, coarse to fine ("cloud.provider.com/topology-block",
 * "cloud.provider.com/topology-rack", "kubernetes.io/hostname"). */
typedef struct kiln_qtopology {
    char *name;
    kiln_strv levels; /* spec.levels[].nodeLabel, 1 to KILN_TOPOLOGY_MAX_LEVELS */
} kiln_qtopology;

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
    /* metadata.labels[KILN_PERSISTENT_RESOURCE_LABEL]: the Vertex persistent
     * resource this queue is (a job's jobSpec.persistentResourceId), or NULL */
    char *persistent_resource;
    char *cohort;         /* spec.cohortName (v1beta1 spec.cohort); NULL: none */
    long cohort_i;        /* its node in kiln_queues.cnodes; -1: none */
    bool all_namespaces;  /* namespaceSelector: {} */
    kiln_strv namespaces; /* namespaceSelector.matchLabels kubernetes.io/metadata.name */
    kiln_qstrategy strategy;
    kiln_qpolicy within_cq, reclaim; /* preemption.withinClusterQueue / reclaimWithinCohort */
    kiln_qpolicy borrow_within;      /* preemption.borrowWithinCohort.policy */
    bool has_max_priority_threshold;
    int64_t max_priority_threshold;
    /* flavorFungibility.whenCanBorrow TryNextFlavor: a flavor that fits only
     * by borrowing is taken only when no later one fits without borrowing */
    bool borrow_try_next;
    /* admissionScope.admissionMode UsageBasedAdmissionFairSharing: its
     * workloads are ordered by their LocalQueue's decayed usage first */
    bool afs;
    bool fair_sharing; /* spec.fairSharing set */
    double weight;     /* fairSharing.weight (1 by default) */
    kiln_qstop stop;
    kiln_qgroup *groups;
    size_t ngroups;
    long pending, admitted; /* workloads, as the supervisor's last pass counted them */
} kiln_qcq;

/* A cohort: a node of Kueue's cohort tree. Either a Cohort object or a name
 * a ClusterQueue's cohortName (or a Cohort's parentName) gives without one
 * (an implicit cohort: no quota, no limits, a root). */
typedef struct kiln_qcohort {
    char *name;
    long parent;         /* index into kiln_queues.cnodes; -1: a root */
    bool declared;       /* a Cohort object */
    kiln_qgroup *groups; /* spec.resourceGroups: quota of the subtree's own, on top of its
                          * members'; limits are what it borrows from / lends to its parent */
    size_t ngroups;
} kiln_qcohort;

typedef struct kiln_qlq {
    char *namespace_; /* a kiln project */
    char *name;
    size_t cq;
    kiln_qstop stop;
    bool fair_sharing; /* spec.fairSharing set (refused unless its ClusterQueue has afs) */
    double weight;     /* spec.fairSharing.weight (1 by default): admission fair sharing */
    /* admission fair sharing (its ClusterQueue's admissionScope): what its
     * running jobs use now (charged by the supervisor each pass, as the
     * ClusterQueues' usage), and Kueue's decayed consumedResources */
    int64_t running[KILN_QRES_COUNT];
    double consumed[KILN_QRES_COUNT];
    int64_t sampled_ns; /* when consumed was last decayed; 0: never */
} kiln_qlq;

typedef struct kiln_qpc {
    char *name;
    int64_t value;
    char *description;
} kiln_qpc;

typedef struct kiln_queues {
    kiln_qflavor *flavors;
    size_t nflavors;
    kiln_qtopology *topologies;
    size_t ntopologies;
    kiln_qcq *cqs;
    size_t ncqs;
    kiln_qlq *lqs;
    size_t nlqs;
    kiln_strv
        cohorts; /* Cohort objects (declarations: a ClusterQueue's cohort need not have one) */
    kiln_qpc *pcs;
    size_t npcs;
    kiln_qcohort *cnodes; /* every cohort, declared or implicit: the cohort tree */
    size_t ncnodes;
} kiln_queues;

/* Parses and validates a YAML stream of Kueue objects. Every problem is in
 * `d`, each at "KIND NAME: field.path" (document N where the object has no
 * name). KILN_EINVAL, KILN_ELIMIT (size, depth, documents), KILN_ENOMEM. */
kiln_err kiln_queues_load(const char *buf, size_t len, kiln_queues **out, kiln_diag *d);
kiln_err kiln_queues_load_file(const char *path, kiln_queues **out, kiln_diag *d);
/* Several YAML streams read as one set of objects (cross-object references
 * and "defined twice" span them). `name` (may be NULL) starts each of a
 * source's messages: "FILE: ClusterQueue x: spec.cohortName". Each is
 * capped at KILN_QUEUES_MAX_BYTES. */
typedef struct kiln_queues_src {
    const char *name;
    const char *buf;
    size_t len;
} kiln_queues_src;
kiln_err kiln_queues_load_srcs(const kiln_queues_src *src, size_t n, kiln_queues **out,
                               kiln_diag *d);
/* kilnd --queues PATH ...: each path a file or a directory (its *.yaml and
 * *.yml, not recursive, in name order, hidden files skipped); all of them one
 * set, as kiln_queues_load_srcs. At most KILN_QUEUES_MAX_FILES files and
 * KILN_QUEUES_MAX_TOTAL bytes in all. Any problem refuses the whole set. */
#define KILN_QUEUES_MAX_FILES 256u
#define KILN_QUEUES_MAX_TOTAL (16u << 20)
kiln_err kiln_queues_load_paths(const char *const *paths, size_t n, kiln_queues **out,
                                kiln_diag *d);
void kiln_queues_free(kiln_queues *q);

/* The LocalQueue a job of `project` goes to: the one its label
 * kueue.x-k8s.io/queue-name names, else the project's "default". -1 with the
 * reason in `why` when there is none, or when its ClusterQueue's
 * namespaceSelector leaves the project out. */
long kiln_queues_route(const kiln_queues *q, const char *project, const kiln_map *labels, char *why,
                       size_t whylen);
/* The LocalQueue of `project` whose ClusterQueue is the persistent resource
 * `id` (the first in the files' order); -1 with `why` when no ClusterQueue
 * is declared as it, or the project has no LocalQueue for it. */
long kiln_queues_persistent_lq(const kiln_queues *q, const char *project, const char *id, char *why,
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
/* The Topology (index into topologies) of ClusterQueue cq's first flavor
 * that has one with `level` among its levels (kiln_topology_level; NULL:
 * any Topology); -1: none. */
long kiln_queues_topology_for(const kiln_queues *q, size_t cq, const char *level);
/* Whether flavor f can hold the job's topology requests: a job that asks
 * for one is admitted only to a flavor whose Topology has its level (Kueue
 * assigns a TAS podset only TAS flavors). True for a job that asks none. */
bool kiln_queues_flavor_topology_ok(const kiln_queues *q, size_t f, const kiln_job *job);

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
/* Kueue's cohort-tree arithmetic for one flavor f and resource r (Kueue's
 * resource nodes): a node is a ClusterQueue or a cohort.
 *   subtree quota  = own nominal + sum over children of (subtree - guaranteed)
 *   guaranteed     = subtree - lendingLimit (0 without one): kept from the parent
 *   usage (cohort) = sum over children of max(0, usage - guaranteed)
 *   available      = root: subtree - usage; else max(0, guaranteed - usage) +
 *                    the parent's available, capped by borrowingLimit as
 *                    subtree - guaranteed - max(0, usage - guaranteed) + borrowingLimit
 * A ClusterQueue's request of r fits when it is at most its available.
 * `empty`: as if nothing were in use (the most it could ever get). */
int64_t kiln_queues_available(const kiln_queues *q, size_t cq, size_t f, kiln_qres r, bool empty);
/* The same for a cohort node k (index into cnodes): its subtree quota and usage. */
int64_t kiln_queues_cohort_quota(const kiln_queues *q, size_t k, size_t f, kiln_qres r);
int64_t kiln_queues_cohort_usage(const kiln_queues *q, size_t k, size_t f, kiln_qres r);
/* Whether ClusterQueues a and b are in one cohort tree (the same root):
 * only then may one reclaim from the other. */
bool kiln_queues_same_tree(const kiln_queues *q, size_t a, size_t b);

/* Admission fair sharing (Kueue's, docs/queues.md): each LocalQueue's
 * consumed usage decays toward what its running jobs use with half-life
 * KILN_AFS_HALF_LIFE_S; each admission adds an entry penalty of alpha times
 * its request, alpha = 1 - 0.5^(KILN_AFS_SAMPLING_S / KILN_AFS_HALF_LIFE_S)
 * (Kueue's example configuration: 168h and 5m). */
#define KILN_AFS_HALF_LIFE_S (168.0 * 3600.0)
#define KILN_AFS_SAMPLING_S  300.0
/* Adds (sign 1) or gives back a running job's request to LocalQueue lq. */
void kiln_queues_lq_charge(kiln_queues *q, size_t lq, const int64_t req[KILN_QRES_COUNT], int sign);
/* Decays every LocalQueue's consumed usage to now (EMA toward its running usage). */
void kiln_queues_afs_sample(kiln_queues *q, int64_t now_ns);
/* The entry penalty of an admission from lq. */
void kiln_queues_afs_penalty(kiln_queues *q, size_t lq, const int64_t req[KILN_QRES_COUNT]);
/* Kueue's weighted share of a LocalQueue: the sum over resources of its
 * consumed usage (GPUs, CPU cores, bytes, pods: resource weights 1) over its
 * weight; lower is admitted first. Weight 0: DBL_MAX once it used anything. */
double kiln_queues_afs_share(const kiln_queues *q, size_t lq);
/* A reload keeps what the LocalQueues consumed: each LocalQueue of `to`
 * takes the consumed usage of the one of the same namespace and name in
 * `from` (Kueue keeps it in the LocalQueue's status across edits). */
void kiln_queues_afs_carry(kiln_queues *to, const kiln_queues *from);

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
/* ---------- Kueue's decisions (src/queues/qpreempt.c) ----------
 * Which head goes first and whom a head preempts, as pure functions of the
 * model's usage and plain descriptions of the workloads: the supervisor
 * builds these from its jobs and carries out the answer (stops the
 * victims, writes the audit log, publishes why jobs wait). */

/* A workload that asks to be admitted (a ClusterQueue's head). */
typedef struct kiln_qcand {
    bool routed; /* false: it routes to no LocalQueue now (ordered last) */
    size_t cq;
    int64_t req[KILN_QRES_COUNT];
    const bool *usable; /* per flavor: some node of it can hold it; NULL: every flavor */
    int64_t prio;       /* the WorkloadPriorityClass's value, else the job's priority */
    int64_t create_ns;  /* its creation time (0: unknown) */
    int64_t seq;        /* the queue's arrival order: the last tie-break */
    double afs;         /* its LocalQueue's admission fair share (0 without one) */
} kiln_qcand;

/* The order of a ClusterQueue's workloads (a qsort comparator over
 * kiln_qcand): routed ones first, grouped by ClusterQueue; within one, the
 * lower admission fair share, the higher priority, the older, the earlier
 * arrival first. */
int kiln_q_queue_order(const void *a, const void *b);
/* Whether head x goes before head y, each with whether it borrows (xb, yb)
 * and its weighted share after admission (xs, ys: kiln_queues_share): one
 * that need not borrow first; between two ClusterQueues with fairSharing,
 * the lower share; then the higher priority, the older, the earlier. */
bool kiln_q_goes_first(const kiln_queues *q, const kiln_qcand *x, bool xb, int64_t xs,
                       const kiln_qcand *y, bool yb, int64_t ys);
/* Whether x's request fits its ClusterQueue's own nominal quota at the
 * usage now (a usable flavor in each group it asks of), borrowing nothing:
 * only such a workload reclaims what its queue lent (reclaimWithinCohort). */
bool kiln_q_fits_nominal(const kiln_queues *q, const kiln_qcand *x);
/* Whether ClusterQueue cq uses more than its nominal quota of anything now. */
bool kiln_q_borrows_now(const kiln_queues *q, size_t cq);

/* Why a victim is preempted: Kueue's condition reasons. */
typedef enum kiln_qpreason {
    KILN_QPR_NONE,                    /* not preempted */
    KILN_QPR_IN_CLUSTER_QUEUE,        /* "InClusterQueue": withinClusterQueue */
    KILN_QPR_RECLAIM,                 /* "InCohortReclamation": reclaimWithinCohort */
    KILN_QPR_RECLAIM_WHILE_BORROWING, /* "InCohortReclaimWhileBorrowing": borrowWithinCohort */
} kiln_qpreason;
/* "InClusterQueue", ...; "" for KILN_QPR_NONE */
const char *kiln_q_preason_name(kiln_qpreason r);

/* An admitted workload, charged to its ClusterQueue's usage under `a`. */
typedef struct kiln_qvictim {
    size_t ref; /* the caller's own: which workload this is (kept as given) */
    size_t cq;
    int64_t req[KILN_QRES_COUNT];
    kiln_qassign a;
    int64_t prio;
    int64_t create_ns; /* 0: unknown (never "newer") */
    int64_t admit_ns;  /* when it was admitted */
    /* set by kiln_q_may_preempt / kiln_q_preempt: */
    bool other;           /* of another ClusterQueue of x's cohort tree */
    kiln_qpreason reason; /* kiln_q_preempt's answer */
} kiln_qvictim;

/* Whether x's ClusterQueue's policies let x preempt v: within the
 * ClusterQueue (withinClusterQueue: LowerPriority, or
 * LowerOrNewerEqualPriority), or (setting v->other) from a ClusterQueue of
 * the same cohort tree that borrows now (reclaimWithinCohort: Any, or
 * LowerPriority). */
bool kiln_q_may_preempt(const kiln_queues *q, const kiln_qcand *x, kiln_qvictim *v);
/* Kueue's order of candidate victims (a qsort comparator over
 * kiln_qvictim): other ClusterQueues' first, then the lowest priority,
 * then the most recently admitted. */
int kiln_q_victim_order(const void *a, const void *b);

typedef struct kiln_qpreempt {
    bool fits;           /* x fits once the victims vs[i].reason != KILN_QPR_NONE are gone */
    size_t n;            /* vs[0..n): the workloads x may preempt, in victim order */
    long over_threshold; /* lower-priority borrowers left alone: above maxPriorityThreshold */
} kiln_qpreempt;
/* Kueue's preemption for head x, which does not fit now: the fewest of
 * the admitted workloads vs[0..nv) (all of them charged to q's usage) that
 * x may preempt, taken in victim order until x fits, then those x does not
 * need given back, the last taken first. Another ClusterQueue's workload
 * is taken only while its queue still borrows, and only for an x within
 * its own nominal quota (reclaimWithinCohort) or, under borrowWithinCohort,
 * when its priority is below x's and at most maxPriorityThreshold.
 * vs is reordered: vs[0..n) are the ones x may preempt, in victim order;
 * each vs[i].reason says whether it is to be preempted and why (all
 * KILN_QPR_NONE unless `fits`). q's usage is changed while it simulates
 * and is as on entry when it returns. */
kiln_qpreempt kiln_q_preempt(kiln_queues *q, const kiln_qcand *x, kiln_qvictim *vs, size_t nv);

/* The first of flavor f's nodeTaints (NoSchedule or NoExecute) that the
 * tolerations tol[0..n) and f's own do not tolerate, or NULL: Kueue's
 * admission check (flavorassigner's FindMatchingUntoleratedTaint). */
const kiln_taint *kiln_queues_flavor_untolerated(const kiln_qflavor *f, const kiln_toleration *tol,
                                                 size_t n);
/* Whether a flavor's nodeLabels all match a node's labels. */
bool kiln_queues_flavor_matches(const kiln_qflavor *f, const kiln_map *node_labels);
/* The flavor of group g of `cq` that a node belongs to (the first whose
 * nodeLabels it has), or -1. */
long kiln_queues_node_flavor(const kiln_queues *q, size_t cq, size_t g,
                             const kiln_map *node_labels);

/* ClusterQueue k as a kueue.x-k8s.io/v1beta2 object (its defaults spelt
 * out), with Kueue's status fields from the last pass when `with_status`.
 * The caller owns the result; NULL when out of memory. Its spec loads back
 * into the same model. */
json_t *kiln_queues_cq_v1beta2(const kiln_queues *q, size_t k, bool with_status);

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
