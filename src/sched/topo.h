/* src/sched/topo.h - Kueue's topology-aware choice of nodes for one group of
 * replicas (private to src/sched).
 *
 * The nodes form a tree by their labels at a Topology's levels (coarse to
 * fine: block, rack, hostname), with each node a leaf below the finest
 * level. Given how many of the group's replicas each node could take now,
 * kiln__topo_assign chooses the domains as Kueue's TAS does with its
 * default (BestFit) profile (pkg/cache/scheduler/tas_flavor_snapshot.go):
 *   - at the asked level, the domain with the least room that still holds
 *     them all (among equals the first in label order);
 *   - preferred: failing that, the same one level up, and so on; above the
 *     top, spread over the fewest top-level domains, fullest first, the last
 *     one the best fit for what is left;
 *   - unconstrained: the fewest nodes, fullest first, the last a best fit;
 *   - then down the tree to the nodes, at each level the fullest domains
 *     first and the last a best fit, so the group spans as few racks and
 *     nodes as it can.
 * Pure arithmetic over the cluster's labels: no state of the scheduler. */
#ifndef KILN_SCHED_TOPO_H
#define KILN_SCHED_TOPO_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln/devices.h"

typedef enum kiln__topo_mode {
    KILN__TOPO_REQUIRED,
    KILN__TOPO_PREFERRED,
    KILN__TOPO_UNCONSTRAINED,
} kiln__topo_mode;

typedef struct kiln__topo_in {
    const kiln_cluster *c;
    const char *const *levels; /* node label keys, coarse to fine */
    size_t n_levels;
    const int *cap; /* per node: replicas of the group it could take; < 0: not in the topology */
    int want;       /* replicas to place */
    size_t level;   /* the asked level (required, preferred); unused for unconstrained */
    kiln__topo_mode mode;
} kiln__topo_in;

/* Fills take[0..c->n) with how many replicas go to each node (summing to
 * want) and returns true; false when they do not fit as asked, with *most
 * the most replicas one domain of the asked level holds (required), or all
 * the nodes together (preferred, unconstrained). False with *most = -1 when
 * out of memory. */
bool kiln__topo_assign(const kiln__topo_in *in, int *take, int *most);

#endif
