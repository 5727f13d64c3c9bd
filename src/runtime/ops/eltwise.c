/* ops/eltwise.c - ReLU and add. Elementwise ops have no rounding choices, so
 * the fast paths (threaded, branch-free loops the compiler vectorises) must
 * match the references exactly. */
#include "ops/ops.h"

#include "core/pool.h"

#include <stddef.h>

void kiln_relu_fwd_ref(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void kiln_relu_bwd_ref(const float *y, const float *dy, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void kiln_add_fwd_ref(const float *a, const float *b, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void kiln_add_bwd_ref(const float *dy, float *da, float *db, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (da) da[i] = dy[i];
        if (db) db[i] = dy[i];
    }
}

typedef struct ew_ctx {
    int op, parts;
    const float *a, *b;
    float *y, *y2;
    size_t n;
} ew_ctx;

enum { RELU_F, RELU_B, ADD_F, ADD_B };

static void ew_task(void *p, int task, int tid)
{
    ew_ctx *c = p;
    size_t b, e;
    kiln__split(c->n, c->parts, task, 16, &b, &e);
    const float *restrict a = c->a, *restrict bb = c->b;
    float *restrict y = c->y;
    switch (c->op) {
    case RELU_F:
        for (size_t i = b; i < e; i++)
            y[i] = a[i] > 0.0f ? a[i] : 0.0f;
        break;
    case RELU_B: /* a = y, b = dy; y may alias b, so no restrict on this one */
        for (size_t i = b; i < e; i++)
            c->y[i] = c->a[i] > 0.0f ? c->b[i] : 0.0f;
        break;
    case ADD_F:
        for (size_t i = b; i < e; i++)
            y[i] = a[i] + bb[i];
        break;
    case ADD_B:
        for (size_t i = b; i < e; i++) {
            if (c->y) c->y[i] = a[i];
            if (c->y2) c->y2[i] = a[i];
        }
        break;
    }
}

static void run(ew_ctx *c)
{
    /* below ~32k floats one core finishes before a hand-off pays off */
    c->parts = c->n < 32768 ? 1 : kiln_get_threads();
    kiln__parallel_for(c->parts, ew_task, c);
}

void kiln_relu_fwd(const float *x, float *y, size_t n)
{
    ew_ctx c = {.op = RELU_F, .a = x, .y = y, .n = n};
    run(&c);
}

void kiln_relu_bwd(const float *y, const float *dy, float *dx, size_t n)
{
    ew_ctx c = {.op = RELU_B, .a = y, .b = dy, .y = dx, .n = n};
    run(&c);
}

void kiln_add_fwd(const float *a, const float *b, float *y, size_t n)
{
    ew_ctx c = {.op = ADD_F, .a = a, .b = b, .y = y, .n = n};
    run(&c);
}

void kiln_add_bwd(const float *dy, float *da, float *db, size_t n)
{
    ew_ctx c = {.op = ADD_B, .a = dy, .y = da, .y2 = db, .n = n};
    run(&c);
}
