/* src/sched/gpu_pick.h - which of a node's free GPUs a replica gets: the
 * best-connected set (internal to src/sched). */
#ifndef KILN_SCHED_GPU_PICK_H
#define KILN_SCHED_GPU_PICK_H

#include <stddef.h>

#include "kiln/devices.h"

/* Picks `want` of the candidate devices cand[0..m) (positions in nd->devs,
 * ascending) into out[0..want): the set whose worst link is best, then
 * whose links cost least in all (kiln_devices_link_cost), then the first
 * such set in index order, so that without topology (or with every pair
 * alike) it is the lowest `want` candidates. m >= want. */
void kiln__sched_pick_gpus(const kiln_node *nd, const int *cand, size_t m, int want, int *out);

#endif
