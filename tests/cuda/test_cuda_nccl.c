/* tests/cuda/test_cuda_nccl.c - NCCL all-reduce of device buffers.
 *
 *  - multi_worker_mirrored: world = min(GPUs, 4) forked ranks (1 with one
 *    GPU), each on its own GPU, form a kiln_comm (shm) and bootstrap NCCL
 *    from it (rank 0's ncclUniqueId through kiln_comm_broadcast); the sum is
 *    checked against the host's sum of every rank's input: bit for bit with
 *    1 or 2 ranks (a + b rounds the same in any order), 1e-6 relative beyond.
 *  - mirrored: with >= 2 GPUs, one process drives all of them
 *    (ncclCommInitAll, grouped all-reduce), same check.
 * Every CUDA call happens in forked children: the CUDA driver does not
 * survive fork(), so the parent never touches it. Without a GPU, a build
 * without the backend or without NCCL, it prints why and exits 77. */
#include <stdio.h>

#if KILN_CUDA_BUILT
#include "coll_test.h"
#include "test.h"

#include <math.h>

#include "cuda/cuda_ops.h"
#include "cuda/nccl.h"
#include "kiln/cuda.h"

#define COUNT 1000003 /* odd, and large enough for several NCCL chunks */

typedef struct shared {
    int ndev;
    char why[512];
    char key[64];
} shared;

static float gen(int rank, size_t i)
{
    return (float)((i * 2654435761u + (size_t)rank * 40503u) % 10007) / 1000.0f - 5.0f;
}

/* 0 when buf (host copy of the reduced buffer) is the sum over `world` ranks */
static int check_sum(const float *buf, int world, const char *who)
{
    double worst = 0;
    for (size_t i = 0; i < COUNT; i++) {
        float want = 0;
        for (int r = 0; r < world; r++)
            want += gen(r, i);
        double e = fabs((double)buf[i] - want) / fmax(1.0, fabs(want));
        if (world <= 2 && buf[i] != want) {
            fprintf(stderr, "%s: element %zu is %g, want %g\n", who, i, buf[i], want);
            return 1;
        }
        if (e > worst) worst = e;
    }
    if (worst > 1e-6) {
        fprintf(stderr, "%s: relative error %g > 1e-6\n", who, worst);
        return 1;
    }
    return 0;
}

static int probe(int rank, int world, void *arg)
{
    shared *s = arg;
    s->ndev = 0;
    if (kiln_cuda_device_count(&s->ndev, s->why, sizeof s->why) != KILN_OK) s->ndev = 0;
    return 0;
}

static int worker(int rank, int world, void *arg)
{
    shared *s = arg;
    kiln_comm_config cfg = {
        .rank = rank, .world_size = world, .backend = KILN_COLL_SHM, .job_key = s->key};
    kiln_comm *cpu = NULL;
    kiln_cuda_ctx *ctx = NULL;
    kiln_nccl *nc = NULL;
    float *h = malloc(COUNT * sizeof *h), *d = NULL;
    char err[512], who[32];
    int rc = 1;

    snprintf(who, sizeof who, "rank %d", rank);
    if (!h) goto out;
    if (kiln_comm_init(&cfg, &cpu, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "%s: kiln_comm_init: %s\n", who, err);
        goto out;
    }
    if (kiln_cu_ctx_create(rank, &ctx, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "%s: context: %s\n", who, err);
        goto out;
    }
    if (kiln_nccl_init_comm(cpu, ctx, &nc, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "%s: kiln_nccl_init_comm: %s\n", who, err);
        goto out;
    }
    if (kiln_nccl_rank(nc) != rank || kiln_nccl_world_size(nc) != world) {
        fprintf(stderr, "%s: NCCL says rank %d of %d\n", who, kiln_nccl_rank(nc),
                kiln_nccl_world_size(nc));
        goto out;
    }
    for (size_t i = 0; i < COUNT; i++)
        h[i] = gen(rank, i);
    if (kiln_cu_alloc(ctx, COUNT * sizeof *h, (void **)&d) != KILN_OK ||
        kiln_cu_upload(ctx, d, h, COUNT * sizeof *h) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", who, kiln_cu_error(ctx));
        goto out;
    }
    if (kiln_nccl_allreduce_sum_f32(nc, d, COUNT) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", who, kiln_nccl_error(nc));
        goto out;
    }
    if (kiln_cu_download(ctx, h, d, COUNT * sizeof *h) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", who, kiln_cu_error(ctx));
        goto out;
    }
    rc = check_sum(h, world, who);
out:
    kiln_nccl_destroy(nc);
    if (ctx) kiln_cu_free(ctx, d);
    kiln_cu_ctx_destroy(ctx);
    kiln_comm_destroy(cpu);
    free(h);
    return rc;
}

static int mirrored(int rank, int world, void *arg)
{
    shared *s = arg;
    int n = s->ndev > 4 ? 4 : s->ndev, rc = 1;
    kiln_cuda_ctx *ctx[4] = {0};
    kiln_nccl *nc[4] = {0};
    float *d[4] = {0}, *h = malloc(COUNT * sizeof *h);
    char err[512];

    if (!h) goto out;
    for (int i = 0; i < n; i++)
        if (kiln_cu_ctx_create(i, &ctx[i], err, sizeof err) != KILN_OK) {
            fprintf(stderr, "mirrored: context %d: %s\n", i, err);
            goto out;
        }
    if (kiln_nccl_init_local(ctx, n, nc, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "mirrored: kiln_nccl_init_local: %s\n", err);
        goto out;
    }
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < COUNT; i++)
            h[i] = gen(r, i);
        if (kiln_cu_alloc(ctx[r], COUNT * sizeof *h, (void **)&d[r]) != KILN_OK ||
            kiln_cu_upload(ctx[r], d[r], h, COUNT * sizeof *h) != KILN_OK) {
            fprintf(stderr, "mirrored: %s\n", kiln_cu_error(ctx[r]));
            goto out;
        }
    }
    if (kiln_nccl_allreduce_group(nc, d, COUNT, n) != KILN_OK) {
        fprintf(stderr, "mirrored: %s\n", kiln_nccl_error(nc[0]));
        goto out;
    }
    rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        if (kiln_cu_download(ctx[r], h, d[r], COUNT * sizeof *h) != KILN_OK) {
            fprintf(stderr, "mirrored: %s\n", kiln_cu_error(ctx[r]));
            rc = 1;
            break;
        }
        rc = check_sum(h, n, "mirrored");
    }
out:
    for (int i = 0; i < n; i++) {
        kiln_nccl_destroy(nc[i]);
        if (ctx[i]) kiln_cu_free(ctx[i], d[i]);
        kiln_cu_ctx_destroy(ctx[i]);
    }
    free(h);
    return rc;
}

int main(void)
{
    shared *s = ct_shared(sizeof *s);
    int st[CT_MAX_RANKS], world;

    if (!kiln_nccl_available()) {
        printf("SKIP [gpu]: kiln was built without NCCL (libnccl not found at configure time)\n");
        return 77;
    }
    ct_run(1, probe, s, 60, st);
    if (!ct_exited_ok(st[0])) {
        fprintf(stderr, "device probe failed\n");
        return 1;
    }
    if (s->ndev < 1) {
        printf("SKIP [gpu]: no CUDA device: %s\n", s->why);
        return 77;
    }
    world = s->ndev > 4 ? 4 : s->ndev;
    ct_key(s->key, sizeof s->key, "nccl");
    printf("multi_worker_mirrored: %d rank%s over kiln_comm + NCCL\n", world, world > 1 ? "s" : "");
    ct_run(world, worker, s, 120, st);
    for (int r = 0; r < world; r++)
        CHECK_MSG(ct_exited_ok(st[r]), "rank %d failed (status %d)", r, st[r]);
    if (world >= 2) {
        printf("mirrored: %d GPUs in one process\n", world);
        ct_run(1, mirrored, s, 120, st);
        CHECK(ct_exited_ok(st[0]));
    } else {
        printf("mirrored: needs 2 GPUs, this machine has 1: not run\n");
    }
    TEST_DONE();
}

#else

int main(void)
{
    printf("SKIP [gpu]: no CUDA device: the CUDA backend is not built in this configuration "
           "(nvcc not found, KILN_CUDA=OFF or a sanitized build)\n");
    return 77;
}
#endif
