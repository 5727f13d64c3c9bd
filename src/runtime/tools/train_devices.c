/* tools/train_devices.c - `kiln-train devices [--format=text|json] [--device=D]`:
 * what this process can train on. Lists /cpu:0 and every GPU the CUDA
 * runtime shows it (after CUDA_VISIBLE_DEVICES), with "cuda_built" telling
 * whether the backend was compiled in at all, and why no GPU is listed when
 * none is. --device checks one TensorFlow-style device string against that
 * list (exit 1 when it does not exist, 2 when it does not parse). */
#include "kiln/cuda.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/tool.h"

typedef struct cpu_info {
    char model[256];
    long cores;
    unsigned long long memory_bytes;
} cpu_info;

static void cpu_probe(cpu_info *c)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

    snprintf(c->model, sizeof c->model, "unknown");
    c->cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->memory_bytes = pages > 0 && psize > 0 ? (unsigned long long)pages * psize : 0;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + strspn(colon + 1, " \t");
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(c->model, sizeof c->model, "%s", colon);
        break;
    }
    fclose(f);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-train devices [--format=text|json] [--device=/gpu:N|/cpu:0]\n"
               "  /gpu:N indexes the GPUs this process sees (after CUDA_VISIBLE_DEVICES)\n");
}

static json_t *gpu_json(const kiln_cuda_device_info *d)
{
    char name[32], cc[16];
    snprintf(name, sizeof name, "/gpu:%d", d->index);
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    return json_pack("{s:s, s:i, s:s, s:I, s:i, s:s, s:s, s:f}", "name", name, "index", d->index,
                     "device_name", d->name, "memory_bytes", (json_int_t)d->memory_bytes,
                     "multiprocessors", d->multiprocessors, "compute_capability", cc, "pci_bus_id",
                     d->pci_bus_id, "clock_ghz", d->clock_ghz);
}

static void gpu_text(const kiln_cuda_device_info *d)
{
    printf("/gpu:%d  %s, %.1f GiB, %d SMs, compute capability %d.%d, PCI %s\n", d->index, d->name,
           (double)d->memory_bytes / (1024.0 * 1024 * 1024), d->multiprocessors, d->cc_major,
           d->cc_minor, d->pci_bus_id);
}

int kiln_train_devices_main(int argc, char **argv)
{
    const char *format = "text", *want = NULL;
    char err[512] = "", drv[16];
    int n = 0, rc = 0;
    kiln_cuda_device_info *infos = NULL;
    kiln_device_spec spec = {KILN_DEVICE_CPU, 0};
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    cpu_info cpu;
    json_t *root = NULL, *devs = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--format=", 9) == 0)
            format = a + 9;
        else if (strcmp(a, "--format") == 0 && i + 1 < argc)
            format = argv[++i];
        else if (strncmp(a, "--device=", 9) == 0)
            want = a + 9;
        else if (strcmp(a, "--device") == 0 && i + 1 < argc)
            want = argv[++i];
        else {
            fprintf(stderr, "kiln-train devices: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(format, "text") && strcmp(format, "json")) {
        fprintf(stderr, "kiln-train devices: --format=%s: expected text or json\n", format);
        return 2;
    }
    if (want && kiln_device_parse(want, &spec, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "kiln-train devices: --device: %s\n", err);
        return 2;
    }

    cpu_probe(&cpu);
    err[0] = '\0';
    if (kiln_cuda_device_count(&n, err, sizeof err) == KILN_OK) {
        infos = calloc((size_t)n, sizeof *infos);
        if (!infos) {
            fprintf(stderr, "kiln-train devices: out of memory\n");
            return 1;
        }
        for (int i = 0; i < n; i++)
            if (kiln_cuda_device_info_get(i, &infos[i], err, sizeof err) != KILN_OK) {
                fprintf(stderr, "kiln-train devices: /gpu:%d: %s\n", i, err);
                rc = 1;
                goto out;
            }
    }
    if (want && spec.kind == KILN_DEVICE_GPU && spec.index >= n) {
        if (n)
            fprintf(stderr, "kiln-train devices: %s does not exist: this process sees %d GPU%s\n",
                    want, n, n == 1 ? "" : "s");
        else
            fprintf(stderr, "kiln-train devices: %s does not exist: no GPU (%s)\n", want, err);
        rc = 1;
        goto out;
    }
    kiln_cuda_driver_version(drv, sizeof drv);

    if (strcmp(format, "json") == 0) {
        int only = want ? spec.index : -1, cpu_only = want && spec.kind == KILN_DEVICE_CPU;
        devs = json_array();
        for (int i = 0; i < n && !cpu_only; i++)
            if (only < 0 || i == only) json_array_append_new(devs, gpu_json(&infos[i]));
        root = json_pack("{s:b, s:o, s:o, s:o, s:o, s:{s:s, s:s, s:I, s:I}}", "cuda_built",
                         kiln_cuda_built(), "cuda_runtime",
                         kiln_cuda_built() ? json_string(kiln_cuda_runtime_version()) : json_null(),
                         "cuda_driver", drv[0] ? json_string(drv) : json_null(),
                         "cuda_visible_devices", cvd ? json_string(cvd) : json_null(), "devices",
                         devs, "cpu", "name", "/cpu:0", "model", cpu.model, "cores",
                         (json_int_t)cpu.cores, "memory_bytes", (json_int_t)cpu.memory_bytes);
        devs = NULL; /* owned by root now (or freed by json_pack on failure) */
        if (!root) {
            fprintf(stderr, "kiln-train devices: could not build the JSON document\n");
            rc = 1;
            goto out;
        }
        if (n == 0) json_object_set_new(root, "gpu_error", json_string(err));
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!s) {
            rc = 1;
            goto out;
        }
        puts(s);
        free(s);
    } else {
        printf("CUDA backend: %s", kiln_cuda_built() ? "built" : "not built");
        if (kiln_cuda_built())
            printf(" (runtime %s, driver %s)", kiln_cuda_runtime_version(), drv[0] ? drv : "none");
        printf("\nCUDA_VISIBLE_DEVICES: %s\n", cvd ? cvd : "(unset)");
        if (!want || spec.kind == KILN_DEVICE_CPU)
            printf("/cpu:0  %s, %ld cores, %.1f GiB\n", cpu.model, cpu.cores,
                   (double)cpu.memory_bytes / (1024.0 * 1024 * 1024));
        if (n == 0 && !want) printf("no GPU: %s\n", err);
        for (int i = 0; i < n; i++)
            if (!want || (spec.kind == KILN_DEVICE_GPU && spec.index == i)) gpu_text(&infos[i]);
    }
out:
    json_decref(root);
    json_decref(devs);
    free(infos);
    return rc;
}
