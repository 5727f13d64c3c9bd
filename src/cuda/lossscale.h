/* cuda/lossscale.h - dynamic loss scaling for fp16 mixed precision (host
 * side; the device side is kiln_cu_scale_check in cuda_ops.h).
 *
 * The policy is PyTorch's GradScaler: the loss is multiplied by `scale`
 * before backward; the gradients are multiplied by 1/scale and checked for
 * inf/NaN in the same kernel; a step with a non-finite gradient is skipped
 * and the scale halved; after `growth_interval` finite steps in a row the
 * scale doubles. The scale stays within [min_scale, max_scale] so it can
 * neither underflow to 0 nor overflow to inf. bf16 has fp32's exponent range
 * and needs no scaling (scale 1, never updated). Plain C: tested everywhere. */
#ifndef KILN_CUDA_LOSSSCALE_H
#define KILN_CUDA_LOSSSCALE_H

#include <stdint.h>

typedef struct kiln_loss_scaler {
    float scale;
    float growth_factor;  /* 2 */
    float backoff_factor; /* 0.5 */
    int growth_interval;  /* 2000 finite steps */
    int good_steps;       /* finite steps since the last change */
    float min_scale, max_scale;
    uint64_t skipped; /* steps skipped because of inf/NaN */
} kiln_loss_scaler;

/* PyTorch's defaults: scale 65536, x2 every 2000 finite steps, /2 on overflow. */
void kiln_loss_scaler_init(kiln_loss_scaler *s);

/* After a step's gradients were checked: found_nonfinite != 0 means the step
 * must be skipped. Returns 1 when the optimizer step should be applied, 0
 * when it must be skipped. */
int kiln_loss_scaler_update(kiln_loss_scaler *s, int found_nonfinite);

#endif
