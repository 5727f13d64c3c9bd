/* ops/xent.c - softmax cross-entropy with integer labels, fused with its
 * gradient. Both paths subtract the row max before exp (no overflow). The
 * reference works in double; the fast path in float (expf), rows in order. */
#include "ops/ops.h"

#include <math.h>

float kiln_xent_ref(const float *logits, const uint8_t *labels, int B, int K, float *dlogits,
                    int *correct)
{
    double loss = 0.0;
    int ok = 0;
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * K;
        int am = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[am]) am = k;
        ok += am == labels[i];
        double s = 0.0;
        for (int k = 0; k < K; k++)
            s += exp((double)z[k] - z[am]);
        loss += log(s) - ((double)z[labels[i]] - z[am]);
        if (dlogits)
            for (int k = 0; k < K; k++)
                dlogits[(size_t)i * K + k] =
                    (float)((exp((double)z[k] - z[am]) / s - (k == labels[i])) / B);
    }
    if (correct) *correct = ok;
    return (float)(loss / B);
}

float kiln_xent(const float *logits, const uint8_t *labels, int B, int K, float *dlogits,
                int *correct)
{
    float loss = 0.0f, invb = 1.0f / (float)B;
    int ok = 0;
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * K;
        int am = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[am]) am = k;
        ok += am == labels[i];
        float mx = z[am], s = 0.0f;
        float *d = dlogits ? dlogits + (size_t)i * K : NULL;
        for (int k = 0; k < K; k++) {
            float e = expf(z[k] - mx);
            s += e;
            if (d) d[k] = e;
        }
        loss += logf(s) - (z[labels[i]] - mx);
        if (d) {
            float is = 1.0f / s;
            for (int k = 0; k < K; k++)
                d[k] = (d[k] * is - (k == labels[i] ? 1.0f : 0.0f)) * invb;
        }
    }
    if (correct) *correct = ok;
    return loss * invb;
}
