/* tests/runtime/test_resnet_stage.c - the ResNet's input double buffering
 * (kiln_resnet_dev_stage, models/resnet_dev.c), on the CPU table:
 *
 *  - staged batches train exactly as loaded ones: three steps on three
 *    batches (the last one smaller) give bit-identical losses and
 *    parameters either way;
 *  - the order of the device calls, from a CPU table that logs them: each
 *    stage waits (host) for its slot's previous copy, makes the copy stream
 *    wait for the last step that read the slot, uploads images and labels
 *    on the copy stream into that slot and marks the copy; the step waits
 *    for that mark on the compute stream before its first convolution,
 *    and marks its slot free after its last update; the slots alternate
 *    and are distinct;
 *  - refusals: a second stage before the step, a load while a batch is
 *    staged, a label out of range, each with its reason. */
#include "backend/backend.h"
#include "models/resnet.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W       4
#define CLASSES 10
#define SIZE    32
#define N       3

enum { L_SYNC, L_WAIT, L_RECORD, L_UPLOAD, L_CONV, L_SGD };
typedef struct entry {
    int op, stream;
    const void *p; /* the event, or an upload's destination */
} entry;
static entry logv[8192];
static int nlog, logging;

static void add(int op, int stream, const void *p)
{
    if (logging && nlog < (int)(sizeof logv / sizeof logv[0]))
        logv[nlog++] = (entry){op, stream, p};
}

static int l_sync(kiln__dev *d, void *ev)
{
    add(L_SYNC, -1, ev);
    return kiln__backend_cpu.event_sync(d, ev);
}
static int l_wait(kiln__dev *d, void *ev, int stream)
{
    add(L_WAIT, stream, ev);
    return kiln__backend_cpu.event_wait(d, ev, stream);
}
static int l_record(kiln__dev *d, void *ev, int stream)
{
    add(L_RECORD, stream, ev);
    return kiln__backend_cpu.event_record(d, ev, stream);
}
static int l_upload(kiln__dev *d, void *dst, const void *src, size_t bytes)
{
    add(L_UPLOAD, KILN__STREAM_COPY, dst);
    return kiln__backend_cpu.upload_staged(d, dst, src, bytes);
}
static int l_conv(kiln__dev *d, const kiln_conv_shape *s, const float *x, const float *w,
                  const float *b, float *y, int relu)
{
    add(L_CONV, KILN__STREAM_COMPUTE, x);
    return kiln__backend_cpu.conv_fwd(d, s, x, w, b, y, relu);
}
static int l_sgd(kiln__dev *d, float *p, const float *g, float *v, size_t n, const float *hyper)
{
    add(L_SGD, KILN__STREAM_COMPUTE, p);
    return kiln__backend_cpu.sgd(d, p, g, v, n, hyper);
}

static void batch(int b, float *x, int32_t *y)
{
    uint32_t s = 777u + (uint32_t)b * 31u;
    for (size_t i = 0; i < (size_t)N * SIZE * SIZE * 3; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < N; i++)
        y[i] = (b * 3 + i * 7) % CLASSES;
}

/* three steps, loaded (stage 0) or staged (1); the losses into loss[] */
static kiln_resnet_dev *train(const kiln__backend *be, int stage, float *loss)
{
    kiln_resnet_cfg cfg = {.width = W, .classes = CLASSES, .seed = 2};
    char err[256];
    float x[N * SIZE * SIZE * 3];
    int32_t y[N];
    kiln_resnet_dev *r = kiln_resnet_dev_create(&cfg, be, 0, 0, N, SIZE, err, sizeof err);
    CHECK_MSG(r != NULL, "create: %s", err);
    if (!r) return NULL;
    for (int b = 0; b < 3; b++) {
        int n = b == 2 ? N - 1 : N;
        batch(b, x, y);
        kiln_err rc = stage ? kiln_resnet_dev_stage(r, x, y, n) : kiln_resnet_dev_load(r, x, y, n);
        /* the host's copy is reusable at once: spoil it */
        memset(x, 0x7f, sizeof x);
        CHECK_MSG(rc == KILN_OK, "batch %d: %s", b, kiln_resnet_dev_error(r));
        CHECK_MSG(kiln_resnet_dev_step(r, 0.05f, 0.9f) == KILN_OK, "step %d: %s", b,
                  kiln_resnet_dev_error(r));
        CHECK(kiln_resnet_dev_wait(r, &loss[b]) == KILN_OK);
    }
    return r;
}

static void same_training(void)
{
    float la[3], lb[3];
    kiln_resnet_dev *a = train(&kiln__backend_cpu, 0, la), *b = train(&kiln__backend_cpu, 1, lb);
    if (!a || !b) goto out;
    for (int i = 0; i < 3; i++)
        CHECK_MSG(memcmp(&la[i], &lb[i], sizeof la[i]) == 0,
                  "step %d: loss %.9g loaded, %.9g "
                  "staged",
                  i, la[i], lb[i]);
    int differ = 0, np = kiln_resnet_dev_param_buffers(a);
    for (int i = 0; i < np; i++) {
        size_t n = kiln_resnet_dev_param_size(a, i);
        float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
        if (pa && pb && kiln_resnet_dev_param(a, i, pa, n) == KILN_OK &&
            kiln_resnet_dev_param(b, i, pb, n) == KILN_OK)
            differ += memcmp(pa, pb, n * sizeof *pa) != 0;
        else
            CHECK(!"reading parameters");
        free(pa);
        free(pb);
    }
    printf("stage: losses %.6f %.6f %.6f loaded and staged; %d of %d buffers differ\n", la[0],
           la[1], la[2], differ, np);
    CHECK_MSG(differ == 0, "%d parameter buffers differ", differ);
out:
    kiln_resnet_dev_destroy(a);
    kiln_resnet_dev_destroy(b);
}

static int find(int from, int op, int stream)
{
    for (int i = from; i < nlog; i++)
        if (logv[i].op == op && (stream < 0 || logv[i].stream == stream)) return i;
    return -1;
}

static void order(void)
{
    kiln__backend be = kiln__backend_cpu;
    be.event_sync = l_sync, be.event_wait = l_wait, be.event_record = l_record;
    be.upload_staged = l_upload, be.conv_fwd = l_conv, be.sgd = l_sgd;
    float loss[3];
    nlog = 0, logging = 1;
    kiln_resnet_dev *r = train(&be, 1, loss);
    logging = 0;
    if (!r) return;
    const void *slot[3] = {NULL, NULL, NULL}, *copied[3] = {NULL, NULL, NULL};
    const void *freed[3] = {NULL, NULL, NULL}, *copy_waits[3] = {NULL, NULL, NULL};
    int at = 0;
    for (int b = 0; b < 3 && at >= 0; b++) {
        /* the stage */
        int sy = find(at, L_SYNC, -1), wc = find(at, L_WAIT, KILN__STREAM_COPY);
        int u1 = find(at, L_UPLOAD, -1), u2 = u1 >= 0 ? find(u1 + 1, L_UPLOAD, -1) : -1;
        int rc = u2 >= 0 ? find(u2 + 1, L_RECORD, KILN__STREAM_COPY) : -1;
        CHECK_MSG(sy >= 0 && wc > sy && u1 > wc && u2 > u1 && rc > u2,
                  "batch %d: stage's order sync %d, copy wait %d, uploads %d %d, record %d", b, sy,
                  wc, u1, u2, rc);
        if (rc < 0) break;
        CHECK_MSG(logv[sy].p == logv[rc].p, "batch %d: the host waits on another event", b);
        slot[b] = logv[u1].p, copied[b] = logv[rc].p;
        /* the step */
        int wk = find(rc, L_WAIT, KILN__STREAM_COMPUTE), cv = find(rc, L_CONV, -1);
        CHECK_MSG(wk >= 0 && cv > wk && logv[wk].p == copied[b],
                  "batch %d: the step's first convolution (%d) before its wait (%d)", b, cv, wk);
        CHECK_MSG(cv >= 0 && logv[cv].p == slot[b], "batch %d: the stem reads another slot", b);
        int last_sgd = -1, fr = -1;
        for (int i = cv; i >= 0 && i < nlog; i++) {
            if (logv[i].op == L_SYNC) break; /* the next stage */
            if (logv[i].op == L_SGD) last_sgd = i;
            if (logv[i].op == L_RECORD && logv[i].stream == KILN__STREAM_COMPUTE) fr = i;
        }
        CHECK_MSG(last_sgd >= 0 && fr > last_sgd,
                  "batch %d: slot marked free at %d, last update "
                  "%d",
                  b, fr, last_sgd);
        freed[b] = fr >= 0 ? logv[fr].p : NULL, copy_waits[b] = logv[wc].p;
        at = fr + 1;
    }
    CHECK_MSG(slot[0] && slot[1] && slot[0] != slot[1] && slot[2] == slot[0],
              "the slots do not alternate: %p %p %p", slot[0], slot[1], slot[2]);
    CHECK_MSG(copied[0] != copied[1] && copied[2] == copied[0], "one copy event per slot");
    /* batch 2's copy into batch 0's slot waits for step 0's mark */
    CHECK_MSG(freed[0] && copy_waits[2] == freed[0] && freed[0] != freed[1],
              "the third copy does not wait for the first step's mark");
    kiln_resnet_dev_destroy(r);
}

static void refusals(void)
{
    kiln_resnet_cfg cfg = {.width = W, .classes = CLASSES, .seed = 2};
    char err[256];
    float x[N * SIZE * SIZE * 3];
    int32_t y[N];
    kiln_resnet_dev *r =
        kiln_resnet_dev_create(&cfg, &kiln__backend_cpu, 0, 0, N, SIZE, err, sizeof err);
    CHECK_MSG(r != NULL, "create: %s", err);
    if (!r) return;
    batch(0, x, y);
    CHECK(kiln_resnet_dev_stage(r, x, y, N) == KILN_OK);
    CHECK(kiln_resnet_dev_stage(r, x, y, N) == KILN_EINVAL);
    CHECK_MSG(strstr(kiln_resnet_dev_error(r), "staged already"), "twice: %s",
              kiln_resnet_dev_error(r));
    CHECK(kiln_resnet_dev_load(r, x, y, N) == KILN_EINVAL);
    CHECK_MSG(strstr(kiln_resnet_dev_error(r), "staged batch waits"), "load: %s",
              kiln_resnet_dev_error(r));
    CHECK(kiln_resnet_dev_step(r, 0.05f, 0.9f) == KILN_OK);
    y[1] = CLASSES;
    CHECK(kiln_resnet_dev_stage(r, x, y, N) == KILN_EINVAL);
    CHECK_MSG(strstr(kiln_resnet_dev_error(r), "label 10 of row 1"), "label: %s",
              kiln_resnet_dev_error(r));
    y[1] = 0;
    CHECK(kiln_resnet_dev_stage(r, x, y, N + 1) == KILN_EINVAL);
    CHECK(kiln_resnet_dev_stage(r, x, y, N) == KILN_OK &&
          kiln_resnet_dev_step(r, 0.05f, 0.9f) == KILN_OK);
    CHECK(kiln_resnet_dev_wait(r, NULL) == KILN_OK);
    kiln_resnet_dev_destroy(r);
}

int main(void)
{
    same_training();
    order();
    refusals();
    TEST_DONE();
}
