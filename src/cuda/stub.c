/* cuda/stub.c - the CUDA backend's public functions in a build without it
 * (no nvcc, KILN_CUDA=OFF, or a sanitized build): programs link and answer
 * "not built" instead of failing to link. */
#include "kiln/cuda.h"

#include <stdio.h>

#define NOT_BUILT                                                                                  \
    "CUDA backend not built (nvcc not found, KILN_CUDA=OFF or a sanitized build; see docs/gpu.md)"

int kiln_cuda_built(void)
{
    return 0;
}

const char *kiln_cuda_runtime_version(void)
{
    return "";
}

const char *kiln_cuda_driver_version(char *buf, size_t len)
{
    if (len) buf[0] = '\0';
    return buf;
}

kiln_err kiln_cuda_device_count(int *count, char *err, size_t errlen)
{
    *count = 0;
    snprintf(err, errlen, "%s", NOT_BUILT);
    return KILN_ENOTFOUND;
}

kiln_err kiln_cuda_device_info_get(int index, kiln_cuda_device_info *out, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", NOT_BUILT);
    return KILN_ENOTFOUND;
}
