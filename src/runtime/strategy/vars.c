/* strategy/vars.c - a model's trainable variables, as parameter servers
 * shard them (moved from tools/ps_main.c and tools/ps_worker.c). */
#include "strategy/strategy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_err kiln__vars_of_model(kiln_model *m, kiln__vars *v, char *err, size_t errlen)
{
    size_t nb = kiln_model_num_buffers(m);
    kiln_err e = KILN_ENOMEM;
    memset(v, 0, sizeof *v);
    v->names = calloc(nb, sizeof(char *));
    v->sizes = calloc(nb, sizeof(size_t));
    v->data = calloc(nb, sizeof(float *));
    v->grad_off = calloc(nb, sizeof(size_t));
    int *layer = calloc(nb, sizeof(int));
    int nl = 0;
    if (!v->names || !v->sizes || !v->data || !v->grad_off || !layer) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nb; i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (b.is_param) {
            int k = v->n++;
            v->names[k] = b.name;
            v->sizes[k] = b.size;
            v->data[k] = b.data;
            const char *sl = strrchr(b.name, '/');
            size_t pl = sl ? (size_t)(sl - b.name) : strlen(b.name);
            const char *prev = k ? v->names[k - 1] : NULL;
            if (k == 0 || strncmp(prev, b.name, pl) != 0 || prev[pl] != '/') nl++;
            layer[k] = nl - 1;
        }
    }
    size_t off = 0;
    for (int l = nl - 1; l >= 0; l--)
        for (int k = 0; k < v->n; k++)
            if (layer[k] == l) {
                v->grad_off[k] = off;
                off += v->sizes[k];
            }
    if (off != kiln_model_grad_count(m)) {
        snprintf(err, errlen, "the model's %zu gradient floats do not match its %zu parameters",
                 kiln_model_grad_count(m), off);
        e = KILN_EINTERNAL;
        goto out;
    }
    e = KILN_OK;
out:
    free(layer);
    return e;
}

void kiln__vars_free(kiln__vars *v)
{
    free(v->names);
    free(v->sizes);
    free(v->data);
    free(v->grad_off);
    memset(v, 0, sizeof *v);
}

float *kiln__model_slot(kiln_model *m, const char *var, const char *slot)
{
    char name[300];
    snprintf(name, sizeof(name), "%s/%s", var, slot);
    for (size_t i = 0; i < kiln_model_num_buffers(m); i++) {
        kiln_buffer b = kiln_model_buffer(m, i);
        if (strcmp(b.name, name) == 0) return b.data;
    }
    return NULL;
}
