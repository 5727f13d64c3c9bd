/* models/resnet_variant.h - the ResNet-50 device step's variants (issue 45):
 * named sets of implementation choices that `kiln-train resnet50
 * --variant=NAME` (or KILN_RESNET_VARIANT) selects at run time, the table of
 * measured defaults per GPU model and precision, and the check of a variant
 * against the CPU table's reference on a small batch.
 *
 * A variant's name is "base" or features joined by '+' ("fused+bn-cudnn").
 * Every feature kiln knows is named here; those not built yet are refused
 * by name (never run as something else), as are combinations and
 * precisions a feature does not apply to. */
#ifndef KILN_RT_RESNET_VARIANT_H
#define KILN_RT_RESNET_VARIANT_H

#include "kiln/train.h"

#include <stddef.h>
#include <stdio.h>

struct kiln__backend;

enum {
    /* batch norm on cuDNN's NHWC kernels instead of kiln's (kernels.cu) */
    KILN_RV_BN_CUDNN = 1u << 0,
    /* one pass for batch norm's apply, the residual add and the ReLU
     * (training forward; every unit and every block output) */
    KILN_RV_FUSED = 1u << 1,
    /* fp32/tf32 convolutions on cuDNN's NCHW kernels (NCHW copies of the
     * NHWC operands around each convolution) */
    KILN_RV_NCHW = 1u << 2,
    /* the classifier's forward on cuBLASLt, its bias in the epilogue */
    KILN_RV_CUBLASLT_FC = 1u << 4,
    /* named, not built yet: refused by kiln_resnet_variant_parse */
    KILN_RV_BF16_STORAGE = 1u << 3, /* NHWC bf16 activations and weights, fp32 masters */
    KILN_RV_CUDNN_GRAPH = 1u << 5,  /* cuDNN graph API: conv + scale/bias + ReLU fused */
};

typedef struct kiln_resnet_variant {
    unsigned features; /* KILN_RV_* */
    char name[96];     /* canonical: "base" or the features in the table's order */
} kiln_resnet_variant;

/* s -> *out. 0, or -1 with a sentence in err naming `flag` (the flag or
 * variable the name came from) and the reason: an unknown feature (with
 * the known ones), one not built, a combination that does not apply, or a
 * feature that does not apply to `precision` (a kiln_precision). */
int kiln_resnet_variant_parse(const char *flag, const char *s, int precision,
                              kiln_resnet_variant *out, char *err, size_t errlen);

/* The built variants, one per line ("base", "fused", ...), then the
 * named ones not built, each with "not built: WHAT": the sweep's list. */
void kiln_resnet_variant_list(FILE *f);

/* A row of the measured defaults: gpu a substring of the device's name
 * ("H100" matches "NVIDIA H100 80GB HBM3"); a NULL gpu ends a table. */
typedef struct kiln_resnet_variant_row {
    const char *gpu;
    int precision;       /* a kiln_precision */
    const char *variant; /* a name kiln_resnet_variant_parse takes */
    const char *log;     /* the docs/gpu-runs/ log it was measured in */
} kiln_resnet_variant_row;

/* rows' first row for gpu and precision whose variant parses (a row naming
 * a variant this build lacks is passed over): 1 and *out, *log (may be
 * NULL); else 0 and *out = base */
int kiln_resnet_variant_lookup(const kiln_resnet_variant_row *rows, const char *gpu, int precision,
                               kiln_resnet_variant *out, const char **log);

/* The measured default for a GPU (its name as the backend describes it:
 * "NVIDIA H100 80GB HBM3") and precision: 1 and *out (and *log, the device
 * log it was measured in) when the table has a row whose model name occurs
 * in gpu, else 0 and *out = base. The table is empty until a lent GPU's
 * sweep has measured it (resnet_variant.c says so). */
int kiln_resnet_variant_default(const char *gpu, int precision, kiln_resnet_variant *out,
                                const char **log);

/* The selection rule of kiln-train resnet50: the flag's value (flag_value,
 * may be NULL), else $KILN_RESNET_VARIANT, else KILN_BN=cudnn as the
 * bn-cudnn variant (the older switch), else the table's default for gpu
 * (NULL: no device name, base). *source says which ("--variant",
 * "KILN_RESNET_VARIANT", "KILN_BN", "table", "default"). 0 or -1 (err). */
int kiln_resnet_variant_select(const char *flag_value, const char *gpu, int precision,
                               kiln_resnet_variant *out, const char **source, char *err,
                               size_t errlen);

/* The correctness check a variant passes before it is timed: a ResNet of
 * width 8 on 16 images of 64x64 (10 classes, seed 3), one SGD step on
 * backend `be` (device index) with the variant, against the same step on
 * the CPU reference table (backend.h's kiln__backend_cpu_ref, base, the
 * same precision: tf32 is fp32 there), from the same initial parameters:
 * the loss and every parameter's update, within 3x the distance of the
 * CPU table's own step from the reference (or the precision's floor). One
 * line "CHECK ..." with the figures to f. Returns 0 when within, 1 when
 * not, -1 (err) when a side could not run. */
int kiln_resnet_variant_check(const struct kiln__backend *be, int index,
                              const kiln_resnet_variant *v, int precision, FILE *f, char *err,
                              size_t errlen);

#endif
