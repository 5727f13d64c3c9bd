/* optim/update.c - the update rules, one plain loop each (optim/update.h). */
#include "optim/update.h"

#include <math.h>

void kiln_sgd_update_ref(float *p, const float *g, float *v, size_t n, float lr, float momentum)
{
    for (size_t i = 0; i < n; i++) {
        v[i] = momentum * v[i] + g[i];
        p[i] -= lr * v[i];
    }
}

void kiln__adam_consts(float lr, float b1, float b2, uint64_t t, float *step, float *sqrt_bc2)
{
    double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
    *step = (float)(lr / bc1);
    *sqrt_bc2 = (float)sqrt(bc2);
}

void kiln_adam_update_ref(float *p, const float *g, float *m, float *v, size_t n, float lr,
                          float b1, float b2, float eps, uint64_t t)
{
    float step, sbc2;
    kiln__adam_consts(lr, b1, b2, t, &step, &sbc2);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
    }
}

float kiln_lr_cosine(double base, uint64_t step, uint64_t total)
{
    if (total == 0) return (float)base;
    double f = (double)step / (double)total;
    if (f > 1.0) f = 1.0;
    return (float)(base * 0.5 * (1.0 + cos(3.14159265358979323846 * f)));
}
