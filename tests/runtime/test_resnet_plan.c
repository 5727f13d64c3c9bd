/* tests/runtime/test_resnet_plan.c - the ResNet step's memory plan
 * (models/resnet_plan.h), on every machine:
 *
 *  - the fp32 plan is what kiln_resnet_dev_create allocates: the model made
 *    on the CPU table with a counting alloc holds exactly the plan's bytes
 *    (for several widths, batches and image sizes), its parameters are the
 *    plan's, and its spatial sizes kiln_resnet_spatial's;
 *  - the bf16-storage plan keeps every fp32 class (masters, batch norm's
 *    statistics, the head) as fp32's, halves the activations and their
 *    gradients, adds a bf16 copy of the convolution and classifier weights,
 *    and so needs less memory: ResNet-50 at batch 256, 224x224, is printed
 *    and must fall by more than 40%;
 *  - sizes the network does not take are refused. */
#include "backend/backend.h"
#include "models/resnet.h"
#include "models/resnet_plan.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

/* the CPU table with an alloc that counts what is live */
#define MAXP 4096
static struct {
    void *p[MAXP];
    size_t n[MAXP];
    size_t live, peak;
    int np;
} cnt;

static int count_alloc(kiln__dev *d, size_t bytes, void **out)
{
    if (kiln__backend_cpu.alloc(d, bytes, out)) return -1;
    if (cnt.np < MAXP) cnt.p[cnt.np] = *out, cnt.n[cnt.np++] = bytes;
    cnt.live += bytes;
    if (cnt.live > cnt.peak) cnt.peak = cnt.live;
    return 0;
}

static void count_free(kiln__dev *d, void *p)
{
    for (int i = 0; i < cnt.np; i++)
        if (cnt.p[i] == p) {
            cnt.live -= cnt.n[i];
            cnt.p[i] = cnt.p[--cnt.np], cnt.n[i] = cnt.n[cnt.np];
            break;
        }
    kiln__backend_cpu.free(d, p);
}

static void against_dev(int width, int classes, int n, int size)
{
    kiln__backend be = kiln__backend_cpu;
    be.alloc = count_alloc, be.free = count_free;
    kiln_resnet_cfg cfg = {.width = width, .classes = classes, .seed = 1};
    kiln_resnet_plan p;
    char err[256];
    cnt.live = cnt.peak = 0, cnt.np = 0;
    CHECK(kiln_resnet__plan(width, classes, n, size, 0, &p) == 0);
    kiln_resnet_dev *r = kiln_resnet_dev_create(&cfg, &be, 0, 0, n, size, err, sizeof err);
    CHECK_MSG(r != NULL, "create: %s", err);
    if (!r) return;
    CHECK_MSG(cnt.live == p.bytes, "width %d, %d classes, batch %d, %dx%d: %zu bytes, plan %zu",
              width, classes, n, size, size, cnt.live, p.bytes);
    CHECK_MSG(kiln_resnet_dev_param_count(r) * 3 == p.master, "parameters %zu, plan %zu / 3",
              kiln_resnet_dev_param_count(r), p.master);
    CHECK(p.units == 53);
    kiln_resnet_dev_destroy(r);
    CHECK_MSG(cnt.live == 0, "%zu bytes left after destroy", cnt.live);
}

static void bf16_vs_fp32(int width, int classes, int n, int size, int print)
{
    kiln_resnet_plan f, b;
    CHECK(kiln_resnet__plan(width, classes, n, size, 0, &f) == 0);
    CHECK(kiln_resnet__plan(width, classes, n, size, 1, &b) == 0);
    CHECK(f.act_bytes == 4 && b.act_bytes == 2 && f.wcopy == 0);
    CHECK(b.master == f.master && b.bn == f.bn && b.head == f.head && b.misc == f.misc);
    CHECK(b.act == f.act && b.grad == f.grad);
    /* the copy: the convolutions' and the classifier's weights; what the
     * masters hold beyond them x3 is gamma, beta (6 per channel) and the
     * classifier's bias (3 per class) */
    CHECK(b.wcopy > 0 && 3 * b.wcopy < f.master);
    CHECK((f.master - 3 * b.wcopy - 3 * (size_t)classes) % 6 == 0);
    CHECK(b.bytes == f.bytes - 2 * (f.act + f.grad) + 2 * b.wcopy);
    CHECK_MSG(b.bytes < f.bytes, "bf16 %zu >= fp32 %zu", b.bytes, f.bytes);
    if (print) {
        printf("resnet50 width %d batch %d %dx%d: fp32 storage %.0f MiB, bf16 storage %.0f MiB "
               "(%.1f%% less; activations %.0f -> %.0f MiB, weight copy %.0f MiB)\n",
               width, n, size, size, f.bytes / 1048576.0, b.bytes / 1048576.0,
               100.0 * (1.0 - (double)b.bytes / (double)f.bytes),
               4.0 * (f.act + f.grad) / 1048576.0, 2.0 * (b.act + b.grad) / 1048576.0,
               2.0 * b.wcopy / 1048576.0);
        CHECK_MSG(b.bytes < 0.6 * f.bytes, "bf16 storage saves only %.1f%%",
                  100.0 * (1.0 - (double)b.bytes / (double)f.bytes));
    }
}

int main(void)
{
    int sp[5];
    kiln_resnet_plan p;
    /* the plan's spatial arithmetic is kiln_resnet_spatial's */
    for (int size = 32; size <= 256; size += 7) {
        CHECK(kiln_resnet_spatial(size, sp) == 0);
        int s1 = kiln_resnet__out(size, 7, 2, 3), s = kiln_resnet__out(s1 + 2, 3, 2, 0);
        CHECK_MSG(s == sp[0], "size %d: pool %d, spatial %d", size, s, sp[0]);
        for (int st = 1; st < 4; st++)
            s = kiln_resnet__out(s, 3, 2, 1);
        CHECK_MSG(s == sp[4], "size %d: stage 4 %d, spatial %d", size, s, sp[4]);
    }
    against_dev(4, 10, 3, 32);
    against_dev(8, 10, 16, 64);
    against_dev(2, 7, 5, 45);
    bf16_vs_fp32(8, 10, 16, 64, 0);
    bf16_vs_fp32(64, 1000, 256, 224, 1);
    bf16_vs_fp32(64, 1000, 1, 224, 0);
    CHECK(kiln_resnet__plan(64, 1000, 256, 31, 1, &p) == -1);
    CHECK(kiln_resnet__plan(0, 1000, 256, 224, 0, &p) == -1);
    CHECK(kiln_resnet__plan(64, 0, 256, 224, 0, &p) == -1);
    CHECK(kiln_resnet__plan(64, 1000, 0, 224, 0, &p) == -1);
    TEST_DONE();
}
