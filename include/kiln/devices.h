/* kiln/devices.h - the nodes kilnd places replicas on and their devices.
 *
 * A node advertises capacity: CPUs, memory and accelerators by type (what
 * Kubernetes calls nvidia.com/gpu). Without a node config kilnd serves one
 * node, this machine, with its CPUs, memory and the GPUs NVML reports
 * (libnvidia-ml.so.1 is loaded with dlopen: no link-time dependency on the
 * driver; absent, the node simply has no GPUs).
 *
 * A node config (JSON) declares nodes instead:
 *   {"nodes": [{"name": "sim-a", "address": "127.0.0.1", "cpus": 8,
 *               "memoryGb": 32, "hardResources": false, "labels": {"zone": "a"},
 *               "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 4}]}]}
 * Declared accelerators are SIMULATED: nothing checks that they exist. They
 * are marked simulated everywhere they appear (node listings, the replica's
 * KILN_SIMULATED_DEVICES) and exist so that GPU scheduling can be exercised
 * on a machine without GPUs. "hardResources": true makes CPUs and memory hard
 * limits; by default they are soft (a 2-core box runs multi-replica jobs).
 *
 * Ownership: a kiln_cluster owns all its strings and arrays. */
#ifndef KILN_DEVICES_H
#define KILN_DEVICES_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln/diag.h"
#include "kiln/job.h" /* kiln_map */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_device {
    char *type;     /* NVIDIA_TESLA_V100, ... (catalog accelerator names) */
    int index;      /* the CUDA index on its node: what CUDA_VISIBLE_DEVICES lists */
    char *uuid;     /* NVML UUID, or "SIMULATED-<node>-<index>" */
    bool simulated; /* declared in a node config, not discovered */
} kiln_device;

typedef struct kiln_node {
    char *name;
    char *address; /* where replicas on this node listen: 127.0.0.1 by default */
    int cpus;
    double memory_gb;
    bool hard_resources; /* CPUs and memory are hard limits for placement */
    kiln_map labels;     /* for nodeSelector: the config's, plus kubernetes.io/hostname
                          * and kiln.dev/node (the name) and, on a node with one GPU
                          * type, cloud.google.com/gke-accelerator (nvidia-tesla-v100) */
    kiln_device *devs;
    size_t n_devs;
} kiln_node;

typedef struct kiln_cluster {
    kiln_node *nodes;
    size_t n;
} kiln_cluster;

#define KILN_NODE_CONFIG_MAX_BYTES (1u << 20)
#define KILN_MAX_NODES             4096
#define KILN_MAX_NODE_DEVICES      64

/* Loads the node config at `path`, or (path NULL) describes this machine. */
kiln_err kiln_cluster_load(const char *path, kiln_cluster *out, kiln_diag *d);
kiln_err kiln_cluster_from_json(const char *buf, size_t len, kiln_cluster *out, kiln_diag *d);
void kiln_cluster_free(kiln_cluster *c);
/* Index of the node called `name`, or -1. */
long kiln_cluster_find(const kiln_cluster *c, const char *name);

/* GPUs of this machine through NVML (dlopen). *n = 0 where NVML is absent. */
kiln_err kiln_devices_discover(kiln_device **out, size_t *n);
/* NVML's device name ("Tesla V100-SXM2-16GB") -> catalog type (NVIDIA_TESLA_V100). */
const char *kiln_devices_type_of(const char *nvml_name, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
