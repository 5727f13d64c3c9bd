/* core/tensor.c - tensor allocation and the seeded RNG. */
#include "kiln/tensor.h"

#include <stdlib.h>
#include <string.h>

float *kiln_falloc(size_t n)
{
    if (n == 0) n = 1;
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void kiln_ffree(float *p)
{
    free(p);
}

kiln_tensor *kiln_tensor_new(int ndim, const int *shape)
{
    if (ndim < 1 || ndim > KILN_MAX_DIMS) return NULL;
    kiln_tensor *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            free(t);
            return NULL;
        }
        t->shape[i] = shape[i];
        t->size *= (size_t)shape[i];
    }
    t->data = kiln_falloc(t->size);
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

void kiln_tensor_free(kiln_tensor *t)
{
    if (!t) return;
    kiln_ffree(t->data);
    free(t);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void kiln_rng_seed(kiln_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t kiln_rng_next(kiln_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float kiln_rng_uniform(kiln_rng *r)
{
    return (float)(kiln_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

void kiln_rng_encode(const kiln_rng *r, uint8_t out[KILN_RNG_STATE_SIZE])
{
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++)
            out[i * 8 + b] = (uint8_t)(r->s[i] >> (8 * b));
}

void kiln_rng_decode(kiln_rng *r, const uint8_t in[KILN_RNG_STATE_SIZE])
{
    for (int i = 0; i < 4; i++) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
            v = (v << 8) | in[i * 8 + b];
        r->s[i] = v;
    }
}
