/* cuda/lossscale.c - the dynamic loss scale policy (see lossscale.h). */
#include "cuda/lossscale.h"

void kiln_loss_scaler_init(kiln_loss_scaler *s)
{
    *s = (kiln_loss_scaler){.scale = 65536.0f,
                            .growth_factor = 2.0f,
                            .backoff_factor = 0.5f,
                            .growth_interval = 2000,
                            .min_scale = 1.0f / 16777216.0f, /* 2^-24 */
                            .max_scale = 16777216.0f};       /* 2^24 */
}

int kiln_loss_scaler_update(kiln_loss_scaler *s, int found_nonfinite)
{
    if (found_nonfinite) {
        float v = s->scale * s->backoff_factor;
        s->scale = v < s->min_scale ? s->min_scale : v;
        s->good_steps = 0;
        s->skipped++;
        return 0;
    }
    if (++s->good_steps >= s->growth_interval) {
        float v = s->scale * s->growth_factor;
        s->scale = v > s->max_scale ? s->max_scale : v;
        s->good_steps = 0;
    }
    return 1;
}
