/* src/devices/nvml_int.h - the part of NVML kiln calls, as a table of
 * function pointers filled from a dlopen'd library (internal to src/devices).
 *
 * kiln never links libnvidia-ml: a machine without the driver builds and
 * runs kilnd, which then simply has no GPUs. The library is the driver's
 * libnvidia-ml.so.1, or the one KILN_NVML_LIBRARY (kilnd --nvml-library)
 * names: the tests' stand-in (tests/nvml/fake_nvml.c) has the same entry
 * points. The types below are NVML's (nvml.h), declared here by their
 * documented layout so that no NVIDIA header is needed to build. */
#ifndef KILN_DEVICES_NVML_INT_H
#define KILN_DEVICES_NVML_INT_H

#include <stddef.h>

#include "kiln/diag.h"

/* nvmlReturn_t values kiln tells apart */
#define KILN__NVML_SUCCESS             0
#define KILN__NVML_ERROR_NOT_SUPPORTED 3
#define KILN__NVML_ERROR_NOT_FOUND     6
#define KILN__NVML_ERROR_TIMEOUT       10
#define KILN__NVML_ERROR_GPU_IS_LOST   15

#define KILN__NVML_EVENT_XID       0x0000000000000008ULL /* nvmlEventTypeXidCriticalError */
#define KILN__NVML_TEMPERATURE_GPU 0                     /* NVML_TEMPERATURE_GPU */
#define KILN__NVML_ECC_UNCORRECTED 1                     /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED */
#define KILN__NVML_ECC_VOLATILE    0                     /* NVML_VOLATILE_ECC */

typedef struct kiln__nvml_memory { /* nvmlMemory_t: bytes */
    unsigned long long total, free, used;
} kiln__nvml_memory;

typedef struct kiln__nvml_util { /* nvmlUtilization_t: percent over the last sample period */
    unsigned int gpu, memory;
} kiln__nvml_util;

typedef struct kiln__nvml_attributes { /* nvmlDeviceAttributes_t */
    unsigned int multiprocessor_count;
    unsigned int shared_copy_engines, shared_decoders, shared_encoders, shared_jpegs, shared_ofas;
    unsigned int gpu_instance_slices, compute_instance_slices;
    unsigned long long memory_mb;
} kiln__nvml_attributes;

typedef struct kiln__nvml_pci { /* nvmlPciInfo_t */
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} kiln__nvml_pci;

#define KILN__NVML_NVLINK_MAX_LINKS 36 /* the walk stops earlier, at NVML's first error */
#define KILN__NVML_NVLINK_GPU       0  /* nvmlIntNvLinkDeviceType_t */
#define KILN__NVML_NVLINK_SWITCH    2

typedef struct kiln__nvml_event { /* nvmlEventData_t */
    void *device;
    unsigned long long type;
    unsigned long long data; /* the Xid for KILN__NVML_EVENT_XID */
    unsigned int gpu_instance, compute_instance;
} kiln__nvml_event;

typedef struct kiln__nvml {
    void *lib;
    /* required: without these the library is not taken for NVML */
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned int *);
    int (*by_index)(unsigned int, void **);
    int (*name)(void *, char *, unsigned int);
    int (*uuid)(void *, char *, unsigned int);
    /* optional (NULL where the library lacks them: older drivers) */
    const char *(*error_string)(int);
    int (*memory)(void *, kiln__nvml_memory *);
    int (*utilization)(void *, kiln__nvml_util *);
    int (*temperature)(void *, int, unsigned int *);
    int (*power)(void *, unsigned int *);        /* milliwatts */
    int (*energy)(void *, unsigned long long *); /* millijoules since the driver loaded */
    int (*ecc_total)(void *, int, int, unsigned long long *);
    int (*remapped_rows)(void *, unsigned int *, unsigned int *, unsigned int *, unsigned int *);
    int (*mig_mode)(void *, unsigned int *, unsigned int *);
    int (*mig_max)(void *, unsigned int *);             /* nvmlDeviceGetMaxMigDeviceCount */
    int (*mig_by_index)(void *, unsigned int, void **); /* ...GetMigDeviceHandleByIndex */
    int (*gpu_instance_id)(void *, unsigned int *);     /* of a MIG handle */
    int (*compute_instance_id)(void *, unsigned int *); /* of a MIG handle */
    int (*attributes)(void *, kiln__nvml_attributes *); /* nvmlDeviceGetAttributes_v2 */
    int (*topo_ancestor)(void *, void *, int *);        /* ...CommonAncestor */
    int (*nvlink_state)(void *, unsigned int, int *);   /* ...GetNvLinkState */
    int (*nvlink_remote_pci)(void *, unsigned int, kiln__nvml_pci *); /* ...RemotePciInfo_v2 */
    int (*nvlink_remote_type)(void *, unsigned int, int *);           /* ...RemoteDeviceType */
    int (*pci_info)(void *, kiln__nvml_pci *);                        /* ...GetPciInfo_v3 */
    int (*numa_node)(void *, unsigned int *);                         /* ...GetNumaNodeId */
    int (*event_set_create)(void **);
    int (*register_events)(void *, unsigned long long, void *);
    int (*event_set_wait)(void *, kiln__nvml_event *, unsigned int);
    int (*event_set_free)(void *);
    int (*driver_version)(char *, unsigned int);
    char path[512]; /* what was opened, for messages */
} kiln__nvml;

/* Opens the library at `path` (NULL: KILN_NVML_LIBRARY, else
 * libnvidia-ml.so.1) and calls nvmlInit_v2. KILN_OK, or KILN_ENOTFOUND with
 * a sentence in `why` (no library, not NVML, init failed). */
kiln_err kiln__nvml_open(const char *path, kiln__nvml *n, char *why, size_t whylen);
/* nvmlShutdown and dlclose; a zeroed table is left. */
void kiln__nvml_close(kiln__nvml *n);
/* NVML's words for rc ("GPU is lost"), or "error N". */
const char *kiln__nvml_error(const kiln__nvml *n, int rc, char *buf, size_t len);

#endif
