/* kiln/devices.h - the nodes kilnd places replicas on, their devices, and
 * the health and telemetry of this machine's GPUs.
 *
 * A node advertises capacity: CPUs, memory and accelerators by type (what
 * Kubernetes calls nvidia.com/gpu). Without a node config kilnd serves one
 * node, this machine, with its CPUs, memory and the GPUs NVML reports
 * (libnvidia-ml.so.1 is loaded with dlopen: no link-time dependency on the
 * driver; absent, the node simply has no GPUs). KILN_NVML_LIBRARY (kilnd
 * --nvml-library) names another library with NVML's entry points: the
 * tests' stand-in (tests/nvml/fake_nvml.c, docs/gpu.md).
 *
 * A discovered GPU's type is Vertex AI's accelerator name where Vertex has
 * the board (kiln_devices_type_of: "NVIDIA H100 80GB HBM3" ->
 * NVIDIA_H100_80GB), else a name of its own ("NVIDIA GeForce RTX 4090" ->
 * NVIDIA_RTX_4090). A GPU in MIG mode is never handed out whole: it is
 * listed with the reason (kiln_device.refused), and each MIG instance NVML
 * reports on it (a site makes them; kiln never changes MIG settings) is a
 * device of its own, after all the whole GPUs: its type is named after its
 * profile (1g.10gb -> NVIDIA_MIG_1G_10GB, which a job may also ask for by
 * the NVIDIA device plugin's name nvidia.com/mig-1g.10gb), its UUID is
 * NVML's MIG-... (what CUDA_VISIBLE_DEVICES names), and its health follows
 * its parent GPU's as well as its own.
 *
 * A node config (JSON) declares nodes instead:
 *   {"nodes": [{"name": "sim-a", "address": "127.0.0.1", "cpus": 8,
 *               "memoryGb": 32, "hardResources": false, "labels": {"zone": "a"},
 *               "taints": [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}],
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
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/job.h" /* kiln_map */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_device {
    char *type;       /* NVIDIA_TESLA_V100, ... (catalog accelerator names) */
    int index;        /* NVML's index on its node (PCI bus order) */
    char *uuid;       /* NVML UUID ("GPU-..."), or "SIMULATED-<node>-<index>" */
    bool simulated;   /* declared in a node config, not discovered */
    char *model;      /* NVML's name ("NVIDIA H100 80GB HBM3"); NULL when declared */
    double memory_gb; /* framebuffer, GiB (0: unknown) */
    char *refused;    /* why it is never handed out (MIG mode), NULL: it may be */
    /* a MIG instance (mig_profile set): its profile ("1g.10gb", "1g.10gb+me"),
     * the devs[] position of the GPU it is part of, and NVML's ids of its
     * GPU and compute instance; index is its own, after the whole GPUs' */
    char *mig_profile;
    int parent;
    unsigned gpu_instance, compute_instance;
    /* how it connects to each device of its node, by devs[] position
     * (kiln_devices_discover: whole GPUs only; NULL: unknown), and its NUMA
     * node (-1: unknown) */
    struct kiln_gpu_link *links;
    int numa_node;
    /* an MPS share (kiln_devices_add_shares): share k of n_shares of GPU
     * devs[parent] (k from 1; 0: not a share) */
    int share, n_shares;
} kiln_device;

/* How two GPUs connect, as `nvidia-smi topo -m` shows it: NVLinks between
 * them (through NVSwitches: the fewer of the two GPUs' switch links), and
 * NVML's common PCIe ancestor (KILN_TOPO_*; -1: unknown). */
typedef struct kiln_gpu_link {
    int nvlinks;
    int level;
} kiln_gpu_link;

#define KILN_TOPO_INTERNAL   0  /* one board */
#define KILN_TOPO_SINGLE     10 /* PIX: one PCIe switch */
#define KILN_TOPO_MULTIPLE   20 /* PXB: several switches, no host bridge */
#define KILN_TOPO_HOSTBRIDGE 30 /* PHB */
#define KILN_TOPO_NODE       40 /* NODE: host bridges of one NUMA node */
#define KILN_TOPO_SYSTEM     50 /* SYS: across NUMA nodes */

/* The cell `nvidia-smi topo -m` prints for a link: "NV18", "PIX", "PXB",
 * "PHB", "NODE", "SYS", or "N/A". Returns a constant or `buf`. */
const char *kiln_devices_link_name(const kiln_gpu_link *l, char *buf, size_t len);
/* What a link costs a collective, for choosing GPUs (lower is better):
 * any NVLink beats PCIe, more NVLinks beat fewer, then PIX < PXB < PHB <
 * NODE < SYS < unknown. */
int kiln_devices_link_cost(const kiln_gpu_link *l);

typedef struct kiln_node {
    char *name;
    char *address; /* where replicas on this node listen: 127.0.0.1 by default */
    int cpus;
    double memory_gb;
    bool hard_resources; /* CPUs and memory are hard limits for placement */
    kiln_map labels;     /* for nodeSelector: the config's, plus kubernetes.io/hostname
                          * and kiln.dev/node (the name) and, on a node with one GPU
                          * type (of the GPUs it hands out: a refused one does not count),
                          * cloud.google.com/gke-accelerator (nvidia-tesla-v100)
                          * and, discovered, nvidia.com/gpu.product
                          * (NVIDIA-H100-80GB-HBM3, as NVIDIA's feature discovery) */
    kiln_device *devs;
    size_t n_devs;
    /* the config's "taints": [{key, value, effect}], Kubernetes' node taints.
     * A replica lands on a node with a NoSchedule or NoExecute taint only
     * if its pod's tolerations tolerate it (kiln/sched.h); a node with a
     * PreferNoSchedule taint it does not tolerate is used last */
    kiln_taint *taints;
    size_t n_taints;
} kiln_node;

typedef struct kiln_cluster {
    kiln_node *nodes;
    size_t n;
} kiln_cluster;

#define KILN_NODE_CONFIG_MAX_BYTES (1u << 20)
#define KILN_MAX_NODES             4096
#define KILN_MAX_NODE_DEVICES      64
#define KILN_MAX_NODE_TAINTS       64

/* Loads the node config at `path`, or (path NULL) describes this machine,
 * its GPUs through the NVML library `nvml_library` (NULL: the default, see
 * kiln_devices_nvml_library). `note` (may be NULL) gets a line saying what
 * discovery found or why it found nothing, for kilnd's log. */
kiln_err kiln_cluster_load(const char *path, const char *nvml_library, kiln_cluster *out,
                           kiln_diag *d, char *note, size_t notelen);
kiln_err kiln_cluster_from_json(const char *buf, size_t len, kiln_cluster *out, kiln_diag *d);
void kiln_cluster_free(kiln_cluster *c);
/* A node's address as replicas are given it (podman --add-host, TF_CONFIG,
 * CLUSTER_SPEC, MASTER_ADDR, host files want an address, not a name):
 * `host` (a name or an address literal) resolved once, where kilnd learns
 * it, to a numeric address in `out` (IPv4 preferred, as one is printed
 * "host:port" unbracketed); "localhost" and names under ".localhost" are
 * 127.0.0.1 even where the resolver knows nothing of them (RFC 6761; a
 * chroot without /etc/hosts). false with the reason in `why` when it does
 * not resolve. */
bool kiln_node_resolve(const char *host, char *out, size_t len, char *why, size_t whylen);
/* Index of the node called `name`, or -1. */
long kiln_cluster_find(const kiln_cluster *c, const char *name);

/* The NVML library kiln loads: `configured` when given, else
 * $KILN_NVML_LIBRARY, else "libnvidia-ml.so.1". */
const char *kiln_devices_nvml_library(const char *configured);
/* GPUs of this machine through the NVML library `lib` (NULL: the default).
 * *n = 0 where NVML is absent or fails; `note` says which, or what was
 * found. KILN_ENOMEM is the only error. Free with kiln_devices_free. */
kiln_err kiln_devices_discover(const char *lib, kiln_device **out, size_t *n, char *note,
                               size_t notelen);
void kiln_devices_free(kiln_device *v, size_t n);
/* NVML's device name -> kiln's type: Vertex AI's name where Vertex has the
 * board ("Tesla V100-SXM2-16GB" -> NVIDIA_TESLA_V100, "NVIDIA H200" ->
 * NVIDIA_H200_141GB), else NVIDIA_ and the name's words without brand
 * words ("NVIDIA GeForce RTX 4090" -> NVIDIA_RTX_4090). Returns a constant
 * or `buf`. */
const char *kiln_devices_type_of(const char *nvml_name, char *buf, size_t len);
/* A MIG profile -> kiln's type: "1g.10gb" -> NVIDIA_MIG_1G_10GB,
 * "1g.10gb+me" -> NVIDIA_MIG_1G_10GB_ME, "1c.3g.40gb" -> NVIDIA_MIG_1C_3G_40GB.
 * Returns `buf`. */
const char *kiln_devices_mig_type(const char *profile, char *buf, size_t len);
/* A name a job may ask for -> the type kiln lists: the NVIDIA device
 * plugin's MIG resource (nvidia.com/mig-1g.10gb, "+" written ".":
 * nvidia.com/mig-1g.10gb.me) -> NVIDIA_MIG_1G_10GB(_ME); NULL for any other
 * name (it is kiln's own). Returns `buf` or NULL. */
const char *kiln_devices_canonical_type(const char *requested, char *buf, size_t len);
/* The device plugin's resource name of a MIG profile: nvidia.com/mig-1g.10gb.me. */
const char *kiln_devices_mig_resource(const char *profile, char *buf, size_t len);
/* The nvidia.com/gpu.product label of a board: its name, spaces as '-'. */
const char *kiln_devices_product_label(const char *nvml_name, char *buf, size_t len);
/* What an Xid means, in a few words; whether it takes the GPU out of
 * service (48, 63, 64, 74, 79, 94, 95). */
const char *kiln_devices_xid_meaning(unsigned xid);
bool kiln_devices_xid_fatal(unsigned xid);

/* ---------- the GPU watch: health and telemetry of this machine's GPUs ----------
 *
 * A thread of its own reads every GPU's utilisation, memory, temperature,
 * power and energy each period, and waits on NVML's Xid events in between.
 * A GPU fails - and stays failed until kiln_gpu_watch_clear - on a fatal
 * Xid, a failed row remapping, an uncorrectable ECC error counted after the
 * watch started, or when it stops answering (NVML's "GPU is lost", or three
 * sample rounds in a row whose memory query fails). Readers (the API, the
 * supervisor) take copies under the watch's own lock. */
typedef struct kiln_gpu_watch kiln_gpu_watch;

typedef struct kiln_gpu_status {
    int64_t at_ns; /* when telemetry was last read (0: never) */
    bool have_util, have_memory, have_temp, have_power, have_energy;
    unsigned util_gpu, util_memory;      /* percent */
    uint64_t fb_used, fb_free, fb_total; /* bytes */
    unsigned temp_c;
    double power_w;
    uint64_t energy_mj; /* since the driver loaded */
    unsigned last_xid;  /* 0: none since the watch started */
    uint64_t xids;      /* how many */
    bool failed;
    char why[256];                  /* what took it out of service; a warning while not failed */
    uint64_t remapped_rows_pending; /* 1 while a row remapping waits for a reset */
    bool checking;                  /* a GPU check is waiting or running: out of service */
    char check[256];                /* the last GPU check's result ("" : none yet) */
    int64_t check_ms;               /* how long it took */
} kiln_gpu_status;

typedef struct kiln_gpu_point { /* one sample of the history */
    int64_t at_ns;
    float util_gpu;   /* percent, -1: unknown */
    float fb_used_gb; /* GiB, -1: unknown */
} kiln_gpu_point;

#define KILN_GPU_HISTORY 900 /* samples kept per GPU */

/* Starts watching devs[0..n) (this machine's, as discovered) through the
 * NVML library `lib`, reading telemetry every period_ms. NULL when nothing
 * can be watched (no NVML): `why` says so. */
kiln_gpu_watch *kiln_gpu_watch_start(const char *lib, const kiln_device *devs, size_t n,
                                     int period_ms, char *why, size_t whylen);
void kiln_gpu_watch_stop(kiln_gpu_watch *w);
/* Device i's status (i indexes the devs the watch was started with). */
bool kiln_gpu_watch_get(kiln_gpu_watch *w, size_t i, kiln_gpu_status *out);
/* Changes whenever a device fails or is cleared. */
uint64_t kiln_gpu_watch_health_gen(kiln_gpu_watch *w);
/* Changes after every sample round. */
uint64_t kiln_gpu_watch_sample_gen(kiln_gpu_watch *w);
/* Puts device i back in service (kiln nodes uncordon NODE --gpu N). */
void kiln_gpu_watch_clear(kiln_gpu_watch *w, size_t i);
/* Up to `cap` of device i's newest samples, oldest first; returns how many. */
size_t kiln_gpu_watch_history(kiln_gpu_watch *w, size_t i, kiln_gpu_point *out, size_t cap);
/* ---------- enforced GPU shares (CUDA MPS) ----------
 *
 * kilnd --gpu-share INDEX=N makes this machine's GPU INDEX shareable: it is
 * refused whole, and N share devices follow the node's devices, type
 * <its type>_SHARE (NVIDIA_H100_80GB_SHARE), UUID <its UUID>:share<k>. A
 * replica holding a share runs under the GPU's MPS daemon
 * (kiln_mps_start) with CUDA_VISIBLE_DEVICES the GPU's UUID,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT its memory / N and
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 100 / N: a share that allocates past
 * its memory fails in its own process. Its health is its GPU's. */

/* Adds `shares` (2..KILN_MAX_GPU_SHARES) shares of the whole GPU whose NVML
 * index is `index` to node n. KILN_EINVAL with `why` when there is no such
 * GPU, it is refused (MIG mode: MPS does not run on MIG GPUs), already
 * shared, or the node would pass KILN_MAX_NODE_DEVICES. */
#define KILN_MAX_GPU_SHARES 48
kiln_err kiln_devices_add_shares(kiln_node *n, int index, int shares, char *why, size_t len);
/* Whether a type names shares (…_SHARE): never what a count without a
 * model means, and one per replica. */
bool kiln_devices_is_share_type(const char *type);

/* The MPS control daemon of a shared GPU: `control` (NULL:
 * $KILN_MPS_CONTROL, else nvidia-cuda-mps-control on PATH) started with -d,
 * CUDA_VISIBLE_DEVICES the GPU's UUID, and its pipe and log directories
 * DIR/pipe, DIR/log (made). kiln_mps_stop sends it quit. False with `why`. */
const char *kiln_mps_control(const char *control);
bool kiln_mps_start(const char *control, const char *dir, const kiln_device *gpu, char *why,
                    size_t len);
void kiln_mps_stop(const char *control, const char *dir, const kiln_device *gpu);

/* ---------- the GPU check before work ----------
 *
 * A site's check program (kilnd --gpu-check PROGRAM: scripts/gpu/kiln-gpu-check,
 * a GEMM against a CPU reference and a memory pattern, or its own) runs as
 * `PROGRAM UUID` with CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to
 * the device's UUID, KILN_GPU_CHECK_UUID and KILN_GPU_CHECK_INDEX; exit 0 is
 * a pass. Then, where DCGM is installed (dcgmi on PATH, or
 * $KILN_GPU_CHECK_DCGMI; "no": never), `dcgmi diag -r 1 -i INDEX` on a
 * whole GPU. */

/* Runs the check on device dv, each program within timeout_s. True when it
 * passed; `why` says what failed (the program's last line) or what passed;
 * *ms how long it all took. */
bool kiln_gpu_check_run(const char *prog, const kiln_device *dv, int timeout_s, char *why,
                        size_t len, int64_t *ms);
/* Gives the watch a check program: from now on kiln_gpu_watch_check queues
 * checks, run one at a time on a thread of the watch's own. */
void kiln_gpu_watch_set_check(kiln_gpu_watch *w, const char *prog, int timeout_s);
bool kiln_gpu_watch_has_check(kiln_gpu_watch *w);
/* Queues a check of device i, which the caller knows holds no replica: the
 * device is out of service (status.checking, why "GPU check ...") until it
 * passes; one that fails stays out ("GPU check failed: ...") until the next
 * kiln_gpu_watch_check or kiln_gpu_watch_clear. False without a check
 * program, or when a check of it is already queued. */
bool kiln_gpu_watch_check(kiln_gpu_watch *w, size_t i);

/* What Xid event registration said ("registered for Xid events on 2 GPUs",
 * or why not), for logs and node listings. */
void kiln_gpu_watch_events(kiln_gpu_watch *w, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
