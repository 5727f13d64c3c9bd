/* tests/nvml/nvml_facts.c - kiln-nvml-facts [LIBRARY]: what an NVML library
 * answers to every call kilnd makes, through kilnd's own table
 * (src/devices/nvml_int.h), so that a run on a real driver shows whether
 * kiln's declarations of NVML's types and calls hold there: each GPU's name
 * and the type kiln gives it, UUID, memory, utilisation, temperature, power,
 * energy, uncorrectable ECC count, row remapping, MIG mode, and whether Xid
 * events can be registered and waited on. LIBRARY defaults to what kilnd
 * loads (KILN_NVML_LIBRARY, else libnvidia-ml.so.1). Exit 0 when NVML
 * opened and listed at least one GPU, 1 otherwise (scripts/gpu/kilnd-gpu-check). */
#include <stdio.h>
#include <string.h>

#include "devices/nvml_int.h"
#include "kiln/devices.h"

static char eb[96];

/* "Success" or NVML's words, for one call's return code. */
static const char *rcs(const kiln__nvml *nv, int rc)
{
    return kiln__nvml_error(nv, rc, eb, sizeof eb);
}

#define MISSING(fn) printf("  %-38s not in this library\n", fn)

/* A GPU in MIG mode: every instance NVML lists, as discovery reads it. */
static void migs(kiln__nvml *nv, void *h)
{
    unsigned max = 0;
    if (!nv->mig_max || !nv->mig_by_index) {
        MISSING("nvmlDeviceGetMaxMigDeviceCount");
        return;
    }
    int rc = nv->mig_max(h, &max);
    printf("  %-38s %s: %u\n", "nvmlDeviceGetMaxMigDeviceCount", rcs(nv, rc), max);
    for (unsigned i = 0; rc == KILN__NVML_SUCCESS && i < max; i++) {
        void *m = NULL;
        char name[128] = "", uuid[96] = "";
        unsigned gi = 0, ci = 0;
        int r = nv->mig_by_index(h, i, &m);
        if (r == KILN__NVML_ERROR_NOT_FOUND) continue; /* an empty slot */
        printf("  MIG %u: nvmlDeviceGetMigDeviceHandleByIndex: %s\n", i, rcs(nv, r));
        if (r != KILN__NVML_SUCCESS) continue;
        r = nv->name(m, name, sizeof name);
        printf("    %-36s %s: \"%s\"\n", "nvmlDeviceGetName", rcs(nv, r), name);
        r = nv->uuid(m, uuid, sizeof uuid);
        printf("    %-36s %s: %s\n", "nvmlDeviceGetUUID", rcs(nv, r), uuid);
        kiln__nvml_memory mem = {0};
        if (nv->memory) {
            r = nv->memory(m, &mem);
            printf("    %-36s %s: total %llu MiB\n", "nvmlDeviceGetMemoryInfo", rcs(nv, r),
                   mem.total >> 20);
        }
        if (nv->gpu_instance_id && nv->compute_instance_id) {
            r = nv->gpu_instance_id(m, &gi);
            int r2 = nv->compute_instance_id(m, &ci);
            printf("    %-36s %s / %s: GI %u, CI %u\n", "nvmlDeviceGet{Gpu,Compute}InstanceId",
                   rcs(nv, r), rcs(nv, r2), gi, ci);
        }
        kiln__nvml_attributes a = {0};
        if (nv->attributes) {
            r = nv->attributes(m, &a);
            printf("    %-36s %s: %u SMs, %u GPU slices, %u compute slices, %llu MB\n",
                   "nvmlDeviceGetAttributes_v2", rcs(nv, r), a.multiprocessor_count,
                   a.gpu_instance_slices, a.compute_instance_slices, a.memory_mb);
        } else
            MISSING("nvmlDeviceGetAttributes_v2");
    }
}

static void one(kiln__nvml *nv, unsigned i)
{
    void *h = NULL;
    char name[96] = "", uuid[96] = "", tb[96];
    int rc = nv->by_index(i, &h);
    printf("GPU %u: nvmlDeviceGetHandleByIndex_v2: %s\n", i, rcs(nv, rc));
    if (rc != KILN__NVML_SUCCESS) return;
    rc = nv->name(h, name, sizeof name);
    printf("  %-38s %s: \"%s\" -> kiln type %s\n", "nvmlDeviceGetName", rcs(nv, rc), name,
           kiln_devices_type_of(name, tb, sizeof tb));
    rc = nv->uuid(h, uuid, sizeof uuid);
    printf("  %-38s %s: %s\n", "nvmlDeviceGetUUID", rcs(nv, rc), uuid);
    kiln__nvml_memory m = {0};
    if (nv->memory) {
        rc = nv->memory(h, &m);
        printf("  %-38s %s: total %llu MiB, used %llu MiB, free %llu MiB\n",
               "nvmlDeviceGetMemoryInfo", rcs(nv, rc), m.total >> 20, m.used >> 20, m.free >> 20);
    } else
        MISSING("nvmlDeviceGetMemoryInfo");
    kiln__nvml_util u = {0};
    if (nv->utilization) {
        rc = nv->utilization(h, &u);
        printf("  %-38s %s: gpu %u%%, memory %u%%\n", "nvmlDeviceGetUtilizationRates", rcs(nv, rc),
               u.gpu, u.memory);
    } else
        MISSING("nvmlDeviceGetUtilizationRates");
    unsigned t = 0, mw = 0, cur = 0, pend = 0, corr = 0, unc = 0, rp = 0, rf = 0;
    unsigned long long mj = 0, ecc = 0;
    if (nv->temperature) {
        rc = nv->temperature(h, KILN__NVML_TEMPERATURE_GPU, &t);
        printf("  %-38s %s: %u C\n", "nvmlDeviceGetTemperature(GPU)", rcs(nv, rc), t);
    } else
        MISSING("nvmlDeviceGetTemperature");
    if (nv->power) {
        rc = nv->power(h, &mw);
        printf("  %-38s %s: %u mW\n", "nvmlDeviceGetPowerUsage", rcs(nv, rc), mw);
    } else
        MISSING("nvmlDeviceGetPowerUsage");
    if (nv->energy) {
        rc = nv->energy(h, &mj);
        printf("  %-38s %s: %llu mJ\n", "nvmlDeviceGetTotalEnergyConsumption", rcs(nv, rc), mj);
    } else
        MISSING("nvmlDeviceGetTotalEnergyConsumption");
    if (nv->ecc_total) {
        rc = nv->ecc_total(h, KILN__NVML_ECC_UNCORRECTED, KILN__NVML_ECC_VOLATILE, &ecc);
        printf("  %-38s %s: %llu uncorrectable (volatile)\n", "nvmlDeviceGetTotalEccErrors",
               rcs(nv, rc), ecc);
    } else
        MISSING("nvmlDeviceGetTotalEccErrors");
    if (nv->remapped_rows) {
        rc = nv->remapped_rows(h, &corr, &unc, &rp, &rf);
        printf("  %-38s %s: correctable %u, uncorrectable %u, pending %u, failure %u\n",
               "nvmlDeviceGetRemappedRows", rcs(nv, rc), corr, unc, rp, rf);
    } else
        MISSING("nvmlDeviceGetRemappedRows");
    if (nv->mig_mode) {
        rc = nv->mig_mode(h, &cur, &pend);
        printf("  %-38s %s: current %u, pending %u\n", "nvmlDeviceGetMigMode", rcs(nv, rc), cur,
               pend);
    } else
        MISSING("nvmlDeviceGetMigMode");
    if (rc == KILN__NVML_SUCCESS && cur == 1) migs(nv, h);
}

int main(int argc, char **argv)
{
    kiln__nvml nv;
    char why[512], ver[96] = "";
    unsigned n = 0;
    int rc;

    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: kiln-nvml-facts [LIBRARY]\n");
        return 2;
    }
    if (kiln__nvml_open(argc == 2 ? argv[1] : NULL, &nv, why, sizeof why) != KILN_OK) {
        printf("NVML: cannot open: %s\n", why);
        return 1;
    }
    if (nv.driver_version && nv.driver_version(ver, sizeof ver) == KILN__NVML_SUCCESS)
        printf("NVML: %s, driver %s\n", nv.path, ver);
    else
        printf("NVML: %s\n", nv.path);
    rc = nv.count(&n);
    printf("nvmlDeviceGetCount_v2: %s: %u\n", rcs(&nv, rc), n);
    for (unsigned i = 0; rc == KILN__NVML_SUCCESS && i < n; i++)
        one(&nv, i);
    /* Xid events: what the GPU watch registers and waits on */
    void *set = NULL;
    if (!nv.event_set_create || !nv.register_events || !nv.event_set_wait) {
        printf("Xid events: this library has no event calls\n");
    } else if ((rc = nv.event_set_create(&set)) != KILN__NVML_SUCCESS) {
        printf("Xid events: nvmlEventSetCreate: %s\n", rcs(&nv, rc));
    } else {
        for (unsigned i = 0; i < n; i++) {
            void *h = NULL;
            if (nv.by_index(i, &h) != KILN__NVML_SUCCESS) continue;
            rc = nv.register_events(h, KILN__NVML_EVENT_XID, set);
            printf("Xid events: GPU %u: nvmlDeviceRegisterEvents(XidCriticalError): %s\n", i,
                   rcs(&nv, rc));
        }
        kiln__nvml_event ev;
        memset(&ev, 0, sizeof ev);
        rc = nv.event_set_wait(set, &ev, 200);
        printf("Xid events: nvmlEventSetWait_v2(200 ms): %s%s\n", rcs(&nv, rc),
               rc == KILN__NVML_ERROR_TIMEOUT ? " (no event: as it should be)" : "");
        if (rc == KILN__NVML_SUCCESS)
            printf("Xid events: an event now: type 0x%llx, data %llu\n", ev.type, ev.data);
        if (nv.event_set_free) nv.event_set_free(set);
    }
    kiln__nvml_close(&nv);
    return n > 0 ? 0 : 1;
}
