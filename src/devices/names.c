/* src/devices/names.c - what kiln calls a GPU that NVML names (kiln/devices.h).
 *
 * NVML's name is the marketing name nvidia-smi prints ("NVIDIA H100 80GB
 * HBM3", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-80GB"). A job names GPUs
 * by Vertex AI's accelerator enum (NVIDIA_H100_80GB), so discovery maps the
 * boards Vertex offers onto its names, and gives every other board a name of
 * its own built by one rule, so that two kilnds with the same board agree.
 *
 * The name is read as words (split at spaces and '-'); the model is the
 * first word that is not a brand ("NVIDIA", "Tesla", "GeForce"). Whole words
 * are compared, never substrings: "Tesla P40" is not a P4, "NVIDIA A10" is
 * not an A100. Where one chip comes with different memory, the memory word
 * decides (A100 40 GB vs 80 GB); where Vertex has one name for a chip and
 * memory size in several form factors (H100 SXM and PCIe, 80 GB each; H200
 * SXM and NVL, 141 GB each), they share it: a job asking for the name gets
 * either, as it would get any board of that name. */
#include "kiln/devices.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MAX_WORDS 12
#define WORD_MAX  32

typedef struct words {
    char w[MAX_WORDS][WORD_MAX]; /* upper case */
    size_t n;
} words;

static void split(const char *s, words *out)
{
    out->n = 0;
    while (s && *s && out->n < MAX_WORDS) {
        while (*s == ' ' || *s == '-' || *s == '_')
            s++;
        size_t k = 0;
        for (; *s && *s != ' ' && *s != '-' && *s != '_'; s++)
            if (k + 1 < WORD_MAX) out->w[out->n][k++] = (char)toupper((unsigned char)*s);
        out->w[out->n][k] = '\0';
        if (k) out->n++;
    }
}

static bool has_word(const words *w, size_t from, const char *word)
{
    for (size_t i = from; i < w->n; i++)
        if (strcmp(w->w[i], word) == 0) return true;
    return false;
}

/* Brand words: not part of a type's own name. "Tesla" stays in the Vertex
 * names of the boards that carried it (NVIDIA_TESLA_V100), through the table. */
static bool brand(const char *w)
{
    return strcmp(w, "NVIDIA") == 0 || strcmp(w, "TESLA") == 0 || strcmp(w, "GEFORCE") == 0;
}

/* Words of an own name that say nothing about the board ("RTX 6000 Ada
 * Generation" is the RTX 6000 Ada). */
static bool filler(const char *w)
{
    return strcmp(w, "NVIDIA") == 0 || strcmp(w, "GEFORCE") == 0 || strcmp(w, "GENERATION") == 0;
}

/* The boards Vertex AI names (aiplatform v1 AcceleratorType), by model word
 * and, where the model alone is not enough, a word that must (or must not)
 * be in the name as well. Rows are tried in order. */
static const struct {
    const char *model;
    const char *with;    /* NULL: any */
    const char *without; /* NULL: none */
    const char *type;
} vertex[] = {
    {"K80", NULL, NULL, "NVIDIA_TESLA_K80"},
    {"P4", NULL, NULL, "NVIDIA_TESLA_P4"},
    {"P100", NULL, NULL, "NVIDIA_TESLA_P100"},
    {"V100", NULL, NULL, "NVIDIA_TESLA_V100"},
    {"V100S", NULL, NULL, "NVIDIA_TESLA_V100"},
    {"T4", NULL, NULL, "NVIDIA_TESLA_T4"},
    {"A100", "80GB", NULL, "NVIDIA_A100_80GB"},
    {"A100", NULL, NULL, "NVIDIA_TESLA_A100"},
    {"L4", NULL, NULL, "NVIDIA_L4"},
    /* H100 SXM ("80GB HBM3") and PCIe (80 GB HBM2e); the NVL has 94 GB and
     * Vertex no name for it: it keeps its own (NVIDIA_H100_NVL) */
    {"H100", "80GB", "NVL", "NVIDIA_H100_80GB"},
    {"H100", "PCIE", "NVL", "NVIDIA_H100_80GB"},
    {"H200", NULL, NULL, "NVIDIA_H200_141GB"},
    {"B200", NULL, NULL, "NVIDIA_B200"},
    {"GB200", NULL, NULL, "NVIDIA_GB200"},
};

const char *kiln_devices_type_of(const char *nvml_name, char *buf, size_t len)
{
    words w;
    size_t m = 0;

    split(nvml_name, &w);
    while (m < w.n && brand(w.w[m]))
        m++;
    if (m < w.n) {
        for (size_t i = 0; i < sizeof vertex / sizeof *vertex; i++) {
            if (strcmp(w.w[m], vertex[i].model) != 0) continue;
            if (vertex[i].with && !has_word(&w, m + 1, vertex[i].with)) continue;
            if (vertex[i].without && has_word(&w, m + 1, vertex[i].without)) continue;
            return vertex[i].type;
        }
        /* RTX PRO 6000 Blackwell (server and workstation editions: one chip,
         * 96 GB): Vertex's NVIDIA_RTX_PRO_6000 */
        if (m + 2 < w.n && strcmp(w.w[m], "RTX") == 0 && strcmp(w.w[m + 1], "PRO") == 0 &&
            strcmp(w.w[m + 2], "6000") == 0)
            return "NVIDIA_RTX_PRO_6000";
    }
    /* any other board: NVIDIA_ and its words, fillers left out */
    size_t o = (size_t)snprintf(buf, len, "NVIDIA");
    for (size_t i = 0; i < w.n && o < len; i++)
        if (!filler(w.w[i])) o += (size_t)snprintf(buf + o, len - o, "_%s", w.w[i]);
    if (len && o >= len) buf[len - 1] = '\0';
    if (strcmp(buf, "NVIDIA") == 0) snprintf(buf, len, "NVIDIA_GPU"); /* a name of brands only */
    return buf;
}

const char *kiln_devices_product_label(const char *nvml_name, char *buf, size_t len)
{
    /* NVIDIA's GPU feature discovery: the name with spaces as '-' */
    size_t k = 0;
    for (const char *p = nvml_name; p && *p && k + 1 < len; p++)
        buf[k++] = *p == ' ' ? '-' : *p;
    if (len) buf[k] = '\0';
    return buf;
}

/* Xid codes (NVIDIA's "Xid Errors" table) that mean the GPU itself failed
 * and needs a reset or service; the others (13, 31, 43, ...) are usually the
 * program's own faults and leave the GPU in service. */
static const struct {
    unsigned xid;
    const char *meaning;
} xids[] = {
    {48, "double-bit ECC error"},
    {63, "ECC page retirement or row remapping recorded"},
    {64, "ECC page retirement or row remapping failed"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {94, "contained uncorrectable ECC error"},
    {95, "uncontained uncorrectable ECC error"},
};

const char *kiln_devices_xid_meaning(unsigned xid)
{
    for (size_t i = 0; i < sizeof xids / sizeof *xids; i++)
        if (xids[i].xid == xid) return xids[i].meaning;
    switch (xid) {
    case 13:
        return "graphics engine exception (usually the program's fault)";
    case 31:
        return "GPU memory page fault (usually the program's fault)";
    case 43:
        return "GPU stopped processing (the program was stopped)";
    case 45:
        return "preemptive cleanup after a stopped program";
    case 92:
        return "high single-bit ECC error rate (corrected)";
    case 119:
    case 120:
        return "GSP firmware error";
    default:
        return "see NVIDIA's Xid table";
    }
}

bool kiln_devices_xid_fatal(unsigned xid)
{
    for (size_t i = 0; i < sizeof xids / sizeof *xids; i++)
        if (xids[i].xid == xid) return true;
    return false;
}

/* ---------- MIG profiles ----------
 *
 * NVIDIA names a MIG device by its profile, "<G>g.<M>gb" (G GPU slices of
 * 7, M GB of memory), "<C>c.<G>g.<M>gb" when its compute instance holds C
 * of the G slices, and "+me" for the instance that owns the media engines.
 * kiln's type writes the profile in upper case with '.' and '+' as '_' after
 * NVIDIA_MIG_; the device plugin's resource writes "+" as "." after
 * nvidia.com/mig-. Both are one-to-one with the profile, so either names
 * the same devices: whatever GPU model they are cut from, as under the
 * device plugin's mixed strategy. */

const char *kiln_devices_mig_type(const char *profile, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "NVIDIA_MIG_");
    for (const char *p = profile; *p && k + 1 < len; p++)
        buf[k++] = *p == '.' || *p == '+' ? '_' : (char)toupper((unsigned char)*p);
    if (k < len) buf[k] = '\0';
    return buf;
}

const char *kiln_devices_mig_resource(const char *profile, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "nvidia.com/mig-");
    for (const char *p = profile; *p && k + 1 < len; p++)
        buf[k++] = *p == '+' ? '.' : *p;
    if (k < len) buf[k] = '\0';
    return buf;
}

const char *kiln_devices_canonical_type(const char *requested, char *buf, size_t len)
{
    static const char prefix[] = "nvidia.com/mig-";
    if (!requested || strncmp(requested, prefix, sizeof prefix - 1) != 0) return NULL;
    const char *p = requested + sizeof prefix - 1;
    /* "1g.10gb.me": the trailing ".me" is the profile's "+me" */
    char prof[64];
    size_t n = strlen(p);
    if (n == 0 || n >= sizeof prof) return NULL;
    memcpy(prof, p, n + 1);
    if (n > 3 && strcmp(prof + n - 3, ".me") == 0) prof[n - 3] = '+';
    for (const char *q = prof; *q; q++)
        if (!isalnum((unsigned char)*q) && *q != '.' && *q != '+') return NULL;
    return kiln_devices_mig_type(prof, buf, len);
}

/* ---------- topology ---------- */

const char *kiln_devices_link_name(const kiln_gpu_link *l, char *buf, size_t len)
{
    if (l->nvlinks > 0) {
        snprintf(buf, len, "NV%d", l->nvlinks);
        return buf;
    }
    switch (l->level) {
    case KILN_TOPO_INTERNAL:
    case KILN_TOPO_SINGLE:
        return "PIX";
    case KILN_TOPO_MULTIPLE:
        return "PXB";
    case KILN_TOPO_HOSTBRIDGE:
        return "PHB";
    case KILN_TOPO_NODE:
        return "NODE";
    case KILN_TOPO_SYSTEM:
        return "SYS";
    default:
        return "N/A";
    }
}

int kiln_devices_link_cost(const kiln_gpu_link *l)
{
    if (l->nvlinks > 0) return 64 - (l->nvlinks < 63 ? l->nvlinks : 63);
    return 100 + (l->level >= 0 && l->level <= KILN_TOPO_SYSTEM ? l->level : 60);
}
