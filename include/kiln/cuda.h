/* kiln/cuda.h - what the CUDA backend of the training runtime can tell a
 * program: whether it was built, which GPUs this process sees, and how a
 * TensorFlow-style device string names one of them.
 *
 * Every build has these functions. Where CMake found no nvcc (or the build is
 * sanitized, see docs/gpu.md) a CPU-only stub answers them: kiln_cuda_built()
 * is 0 and kiln_cuda_device_count() fails with "CUDA backend not built".
 *
 * Device indices are those of the CUDA runtime, which applies
 * CUDA_VISIBLE_DEVICES itself: with CUDA_VISIBLE_DEVICES=2,3 the process sees
 * two GPUs and "/gpu:1" is physical GPU 3. kiln never renumbers devices.
 *
 * The numeric ops (cuBLAS, cuDNN, own kernels) and the NCCL wrapper are
 * internal to the runtime (src/cuda/cuda_ops.h, src/cuda/nccl.h). */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include <stddef.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the CUDA backend is compiled in, 0 for the CPU-only stub. */
int kiln_cuda_built(void);

/* The CUDA runtime kiln was built against, "13.0"; "" in the stub. */
const char *kiln_cuda_runtime_version(void);

/* The installed driver's CUDA version ("13.0"), or "" when no driver is
 * loaded (or the stub). Written into buf (at least 16 bytes); returns buf. */
const char *kiln_cuda_driver_version(char *buf, size_t len);

/* How many GPUs this process sees. On failure (no driver, no device, the
 * stub) *count is 0, the reason is in err ("cudaGetDeviceCount: no
 * CUDA-capable device is detected") and KILN_ENOTFOUND is returned. */
kiln_err kiln_cuda_device_count(int *count, char *err, size_t errlen);

typedef struct kiln_cuda_device_info {
    int index;              /* among the visible devices: "/gpu:<index>" */
    char name[256];         /* "NVIDIA H100 80GB HBM3" */
    size_t memory_bytes;    /* total global memory */
    int multiprocessors;    /* SM count */
    int cc_major, cc_minor; /* compute capability (9.0 for H100) */
    char pci_bus_id[32];    /* "0000:19:00.0" */
    double clock_ghz;       /* peak SM clock, for MFU estimates (0 if unknown) */
} kiln_cuda_device_info;

/* Properties of visible device `index`; KILN_EINVAL for an index out of range,
 * KILN_ENOTFOUND without a driver or in the stub (reason in err). */
kiln_err kiln_cuda_device_info_get(int index, kiln_cuda_device_info *out, char *err, size_t errlen);

/* ---- device strings (TensorFlow's spelling) ----
 * Accepted, case-insensitively for the type: "/gpu:N", "gpu:N",
 * "/device:GPU:N", "/cpu:0", "cpu:0", "/device:CPU:0" and also "cpu" and
 * "gpu" (index 0). N is a decimal index into the visible devices, 0..1023.
 * Only CPU 0 exists (kiln's CPU ops use every core through one pool). */
typedef enum kiln_device_kind { KILN_DEVICE_CPU = 0, KILN_DEVICE_GPU = 1 } kiln_device_kind;

typedef struct kiln_device_spec {
    kiln_device_kind kind;
    int index;
} kiln_device_spec;

/* Parses s; KILN_EINVAL with a sentence in err for anything else
 * ("device '/gpu:x': the index must be a decimal number"). Does not check
 * that the device exists (see kiln_cuda_device_count). */
kiln_err kiln_device_parse(const char *s, kiln_device_spec *out, char *err, size_t errlen);

/* Canonical form: "/gpu:1", "/cpu:0". Returns buf. */
const char *kiln_device_format(const kiln_device_spec *d, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
