/* cuda/query.c - what kiln/cuda.h answers when the backend is built: build
 * and runtime versions, the visible devices and their properties. Only the
 * CUDA runtime (linked statically) is needed, so programs that just list
 * devices (kiln-train) do not depend on cuBLAS, cuDNN or a shared libcudart,
 * and start as fast as before. */
#include "kiln/cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

int kiln_cuda_built(void)
{
    return 1;
}

const char *kiln_cuda_runtime_version(void)
{
    /* CUDART_VERSION is 13000 for 13.0: major*1000 + minor*10 */
    static char v[16];
    if (!v[0]) snprintf(v, sizeof v, "%d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    return v;
}

const char *kiln_cuda_driver_version(char *buf, size_t len)
{
    int v = 0;
    if (len) buf[0] = '\0';
    if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
        snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
    return buf;
}

kiln_err kiln_cuda_device_count(int *count, char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *count = 0;
    if (e != cudaSuccess) {
        int drv = 0;
        cudaDriverGetVersion(&drv);
        /* without libcuda the runtime says "driver version is insufficient" */
        snprintf(err, errlen, "cudaGetDeviceCount: %s%s", cudaGetErrorString(e),
                 drv == 0 ? " (no NVIDIA driver is loaded)" : "");
        cudaGetLastError(); /* the failure is not sticky; clear it for later calls */
        return KILN_ENOTFOUND;
    }
    if (n == 0) {
        snprintf(err, errlen, "cudaGetDeviceCount: 0 devices");
        return KILN_ENOTFOUND;
    }
    *count = n;
    return KILN_OK;
}

kiln_err kiln_cuda_device_info_get(int index, kiln_cuda_device_info *out, char *err, size_t errlen)
{
    int n = 0, clock_khz = 0;
    struct cudaDeviceProp p;
    kiln_err rc = kiln_cuda_device_count(&n, err, errlen);
    cudaError_t e;

    if (rc != KILN_OK) return rc;
    if (index < 0 || index >= n) {
        snprintf(err, errlen, "/gpu:%d does not exist: this process sees %d GPU%s", index, n,
                 n == 1 ? "" : "s");
        return KILN_EINVAL;
    }
    if ((e = cudaGetDeviceProperties(&p, index)) != cudaSuccess) {
        snprintf(err, errlen, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return KILN_EIO;
    }
    memset(out, 0, sizeof *out);
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->memory_bytes = p.totalGlobalMem;
    out->multiprocessors = p.multiProcessorCount;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    if ((e = cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, index)) !=
        cudaSuccess) {
        snprintf(err, errlen, "cudaDeviceGetPCIBusId: %s", cudaGetErrorString(e));
        return KILN_EIO;
    }
    /* cudaDeviceProp lost clockRate in CUDA 13; the attribute remains */
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index) == cudaSuccess)
        out->clock_ghz = clock_khz / 1e6;
    return KILN_OK;
}
