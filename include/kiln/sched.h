/* kiln/sched.h - gang placement of a job's replicas on the cluster's nodes.
 *
 * kiln_sched tracks which devices (and, on nodes with hard resources, how
 * many CPUs and how much memory) are taken. kiln_sched_place() places ALL
 * replicas of a job or none: each replica lands on one node, gets exactly
 * the accelerators it asks for, and each device goes to one replica only.
 * A replica planned with KILN_ACCEL_ANY_GPU (GPUs by count alone) gets that
 * many GPUs of one model, whichever model leaves the fewest to spare; its
 * slot's devices say which (the node's devs[].type).
 *
 * Not thread safe: kilnd's supervisor thread is its only user.
 * Ownership: a kiln_placement owns its slots; the cluster must outlive the
 * kiln_sched built over it. */
#ifndef KILN_SCHED_H
#define KILN_SCHED_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln/catalog.h"
#include "kiln/devices.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_sched kiln_sched;

#define KILN_MAX_REPLICA_DEVICES 16
#define KILN_MAX_REPLICAS        256 /* per job */

typedef struct kiln_slot {
    kiln_role role;
    int index;                          /* the replica's index within its role */
    size_t node;                        /* index into the cluster's nodes */
    int devs[KILN_MAX_REPLICA_DEVICES]; /* indices into the node's devs */
    int n_devs;
    int vcpus;
    double memory_gb;
    int limit_vcpus; /* the plan's: no node smaller than these takes it, hard or not */
    double limit_memory_gb;
    /* held by another placement backend: the Slurm allocation (job id) and
     * its component that hold this slot; 0: kiln's own book alone */
    long alloc;
    int alloc_part;
} kiln_slot;

typedef struct kiln_placement {
    kiln_slot *slots; /* master, workers 0.., ps 0.., evaluators 0.. */
    size_t n;
} kiln_placement;

kiln_sched *kiln_sched_new(const kiln_cluster *c);
void kiln_sched_free(kiln_sched *s);
/* A cordoned node takes no new replicas. */
void kiln_sched_set_cordon(kiln_sched *s, size_t node, bool cordoned);
bool kiln_sched_cordoned(const kiln_sched *s, size_t node);

/* Places every replica of `plans` (from kiln_catalog_plan). Returns
 *   KILN_OK        placed and reserved: *out filled (free with kiln_placement_free);
 *   KILN_ECONFLICT fits this cluster but not now (devices busy, nodes cordoned);
 *   KILN_EINVAL    can never fit this cluster: `why` names what is missing;
 *   KILN_ELIMIT    more replicas or devices per replica than kiln supports. */
kiln_err kiln_sched_place(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                          kiln_placement *out, char *why, size_t whylen);
/* The same, where a replica of role r may only land on a node whose labels
 * include every key=value of selectors[r] (Kubernetes nodeSelector; NULL or
 * empty = any node). A selector no node satisfies is a never-fits reason. */
kiln_err kiln_sched_place_sel(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                              const kiln_map *const selectors[KILN_ROLE_COUNT], kiln_placement *out,
                              char *why, size_t whylen);
/* What a job's pods say about the nodes they may use, per role: the
 * nodeSelector (NULL or empty: any node) and the tolerations, plus
 * tolerations every role has besides its own (a Kueue flavor's, added at
 * admission). A node with a NoSchedule or NoExecute taint a role does not
 * tolerate never takes its replicas; one with such a PreferNoSchedule taint
 * does only when no other node fits the replica now (Kubernetes scores such
 * nodes lower: here they come last). A replica that only nodes with such
 * a NoSchedule or NoExecute taint could hold (its selector's, or those with
 * its devices) can never fit: `why` names one of the taints. */
typedef struct kiln_sched_rules {
    const kiln_map *selector[KILN_ROLE_COUNT];
    const kiln_toleration *tolerations[KILN_ROLE_COUNT];
    size_t n_tolerations[KILN_ROLE_COUNT];
    const kiln_toleration *extra;
    size_t n_extra;
    /* Topology-aware placement (Kueue's TAS, docs/queues.md): each role's
     * request (kiln_job_topology), and the Topology of the flavor the job
     * was admitted to, which the caller sets. Without levels no request is
     * looked at: kilnd refuses a request at submit where no queue has a
     * Topology with its level. The roles of one group (a request's group,
     * else the role alone) are placed first, one group after another, on
     * the nodes src/sched/topo.h chooses: a required level's domain, or the
     * job waits (KILN_ECONFLICT) or never fits (KILN_EINVAL), `why` naming
     * the level and how much room its best domain has. */
    bool has_topo[KILN_ROLE_COUNT];
    kiln_topology_request topo[KILN_ROLE_COUNT];
    const char *topology; /* its name, for messages */
    const char *const *levels;
    size_t n_levels;
} kiln_sched_rules;
/* The rules of `job`'s pods (its roles' nodeSelector, tolerations and
 * topology requests; the job must outlive them); NULL job: none. */
void kiln_sched_rules_of(const kiln_job *job, kiln_sched_rules *out);
/* kiln_sched_place_sel under `rules` (NULL: none). */
kiln_err kiln_sched_place_rules(kiln_sched *s, const kiln_replica_plan *plans, size_t n_plans,
                                const kiln_sched_rules *rules, kiln_placement *out, char *why,
                                size_t whylen);
/* Whether node `nd` may take a replica of role r under `rules` now or ever,
 * taints alone: 0 yes, 1 only last (an untolerated PreferNoSchedule
 * taint), 2 never (an untolerated NoSchedule or NoExecute taint, which
 * *which gets when not NULL). */
int kiln_sched_taint_verdict(const kiln_sched_rules *rules, kiln_role r, const kiln_node *nd,
                             const kiln_taint **which);
/* Reserves exactly the slots of `p`: a placement a previous kilnd made,
 * whose replicas this kilnd adopts. Slots whose node is out of range (a
 * replica that left the job) are skipped. */
void kiln_sched_claim(kiln_sched *s, const kiln_placement *p);
/* Gives a placement's devices and resources back. */
void kiln_sched_release(kiln_sched *s, const kiln_placement *p);
void kiln_placement_free(kiln_placement *p);

/* How many devices of a node are free (for node listings). */
size_t kiln_sched_free_devices(const kiln_sched *s, size_t node);
bool kiln_sched_device_busy(const kiln_sched *s, size_t node, size_t dev);
/* A device out of service (a GPU's health: kiln/devices.h's watch) is not
 * handed out; the replica holding it keeps it until released. A job that
 * only such devices would fit waits, as behind a cordon (they may come
 * back); devices refused at discovery (kiln_device.refused) never come
 * back, and a job that needs them can never fit. */
void kiln_sched_set_device_failed(kiln_sched *s, size_t node, size_t dev, bool failed);
bool kiln_sched_device_failed(const kiln_sched *s, size_t node, size_t dev);
/* Free: not held, not failed, not refused. */
bool kiln_sched_device_free(const kiln_sched *s, size_t node, size_t dev);
/* vCPUs and memory (GB) the placed replicas of a node asked for (machine-type sizes). */
void kiln_sched_usage(const kiln_sched *s, size_t node, int *vcpus, double *memory_gb);

#ifdef __cplusplus
}
#endif
#endif
