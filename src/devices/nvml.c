/* src/devices/nvml.c - NVML through dlopen (nvml_int.h). */
#include "devices/nvml_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/devices.h"

const char *kiln_devices_nvml_library(const char *configured)
{
    if (configured && *configured) return configured;
    const char *env = getenv("KILN_NVML_LIBRARY");
    return env && *env ? env : "libnvidia-ml.so.1";
}

/* dlsym into a function pointer without the object/function cast warning */
#define SYM(field, name) (*(void **)&n->field = dlsym(n->lib, name))

kiln_err kiln__nvml_open(const char *path, kiln__nvml *n, char *why, size_t whylen)
{
    kiln_err err = KILN_ENOTFOUND;
    char eb[96];

    memset(n, 0, sizeof *n);
    path = kiln_devices_nvml_library(path);
    snprintf(n->path, sizeof n->path, "%s", path);
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s", e ? e : path);
        goto out;
    }
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(count, "nvmlDeviceGetCount_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(name, "nvmlDeviceGetName");
    SYM(uuid, "nvmlDeviceGetUUID");
    SYM(error_string, "nvmlErrorString");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    SYM(temperature, "nvmlDeviceGetTemperature");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
    SYM(ecc_total, "nvmlDeviceGetTotalEccErrors");
    SYM(remapped_rows, "nvmlDeviceGetRemappedRows");
    SYM(mig_mode, "nvmlDeviceGetMigMode");
    SYM(mig_max, "nvmlDeviceGetMaxMigDeviceCount");
    SYM(mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
    SYM(gpu_instance_id, "nvmlDeviceGetGpuInstanceId");
    SYM(compute_instance_id, "nvmlDeviceGetComputeInstanceId");
    SYM(attributes, "nvmlDeviceGetAttributes_v2");
    SYM(topo_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    SYM(nvlink_state, "nvmlDeviceGetNvLinkState");
    SYM(nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    SYM(nvlink_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    SYM(pci_info, "nvmlDeviceGetPciInfo_v3");
    SYM(numa_node, "nvmlDeviceGetNumaNodeId");
    SYM(event_set_create, "nvmlEventSetCreate");
    SYM(register_events, "nvmlDeviceRegisterEvents");
    SYM(event_set_wait, "nvmlEventSetWait_v2");
    SYM(event_set_free, "nvmlEventSetFree");
    SYM(driver_version, "nvmlSystemGetDriverVersion");
    if (!n->init || !n->shutdown || !n->count || !n->by_index || !n->name || !n->uuid) {
        snprintf(why, whylen,
                 "%s lacks NVML's device calls (nvmlInit_v2, nvmlDeviceGetCount_v2 ...)", path);
        goto out;
    }
    int rc = n->init();
    if (rc != KILN__NVML_SUCCESS) {
        snprintf(why, whylen, "%s: nvmlInit_v2: %s", path, kiln__nvml_error(n, rc, eb, sizeof eb));
        n->shutdown = NULL; /* nothing to shut down */
        goto out;
    }
    err = KILN_OK;
out:
    if (err != KILN_OK) kiln__nvml_close(n);
    return err;
}

void kiln__nvml_close(kiln__nvml *n)
{
    if (n->lib && n->shutdown) n->shutdown();
    if (n->lib) dlclose(n->lib);
    char path[sizeof n->path];
    memcpy(path, n->path, sizeof path);
    memset(n, 0, sizeof *n);
    memcpy(n->path, path, sizeof path); /* for messages after a failed open */
}

const char *kiln__nvml_error(const kiln__nvml *n, int rc, char *buf, size_t len)
{
    const char *s = n->error_string ? n->error_string(rc) : NULL;
    if (s && *s) return s;
    snprintf(buf, len, "error %d", rc);
    return buf;
}
