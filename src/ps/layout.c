/* ps/layout.c - which ps task holds which variable.
 *
 * Whole variables, greedily by size: a variable is the unit a checkpoint
 * stores and names, so a ps that restarts finds its shard in a checkpoint by
 * name, and no update has to be split across tasks. Greedy largest-first onto
 * the least-loaded shard is within one variable of the best balance. */
#include "kiln/ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void kiln_ps_layout_free(kiln_ps_layout *l)
{
    free(l->var_shard);
    free(l->var_offset);
    free(l->var_size);
    free(l->shard_size);
    memset(l, 0, sizeof(*l));
}

int kiln_ps_layout_init(kiln_ps_layout *l, int num_vars, const char *const *names,
                        const size_t *sizes, int num_ps, const char *salt, char *err, size_t errlen)
{
    memset(l, 0, sizeof(*l));
    int *order = NULL, rc = -1;
    if (num_vars < 1 || num_ps < 1 || num_ps > 4096) {
        snprintf(err, errlen, "sharding %d variables over %d ps tasks: need at least one of each",
                 num_vars, num_ps);
        return -1;
    }
    l->num_vars = num_vars;
    l->num_ps = num_ps;
    l->var_shard = calloc((size_t)num_vars, sizeof(int));
    l->var_offset = calloc((size_t)num_vars, sizeof(size_t));
    l->var_size = calloc((size_t)num_vars, sizeof(size_t));
    l->shard_size = calloc((size_t)num_ps, sizeof(size_t));
    order = calloc((size_t)num_vars, sizeof(int));
    if (!l->var_shard || !l->var_offset || !l->var_size || !l->shard_size || !order) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < num_vars; i++) {
        order[i] = i;
        l->var_size[i] = sizes[i];
    }
    /* insertion sort, largest first, stable: a model has tens of variables */
    for (int i = 1; i < num_vars; i++)
        for (int j = i; j > 0 && sizes[order[j]] > sizes[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < num_vars; k++) {
        int best = 0;
        for (int s = 1; s < num_ps; s++)
            if (l->shard_size[s] < l->shard_size[best]) best = s;
        l->var_shard[order[k]] = best;
        l->shard_size[best] += sizes[order[k]];
    }
    for (int s = 0; s < num_ps; s++)
        l->shard_size[s] = 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, salt ? salt : "", salt ? strlen(salt) + 1 : 1);
    h = fnv(h, &num_ps, sizeof(num_ps));
    for (int i = 0; i < num_vars; i++) {
        int s = l->var_shard[i];
        uint64_t sz = sizes[i];
        l->var_offset[i] = l->shard_size[s];
        l->shard_size[s] += sizes[i];
        h = fnv(h, names[i], strlen(names[i]) + 1);
        h = fnv(h, &sz, sizeof(sz));
        h = fnv(h, &s, sizeof(s));
    }
    l->sig = h;
    rc = 0;
out:
    free(order);
    if (rc) kiln_ps_layout_free(l);
    return rc;
}

void kiln_ps_layout_gather(const kiln_ps_layout *l, const float *const *vars, float *const *shards)
{
    for (int i = 0; i < l->num_vars; i++)
        memcpy(shards[l->var_shard[i]] + l->var_offset[i], vars[i], l->var_size[i] * sizeof(float));
}

void kiln_ps_layout_scatter(const kiln_ps_layout *l, const float *const *shards, float *const *vars)
{
    for (int i = 0; i < l->num_vars; i++)
        memcpy(vars[i], shards[l->var_shard[i]] + l->var_offset[i], l->var_size[i] * sizeof(float));
}
