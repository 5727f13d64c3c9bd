/* cuda/nccl.c - NCCL communicators bootstrapped from kiln's CPU
 * communicator, and all-reduce of device buffers (see nccl.h). */
#include "cuda/nccl.h"

#include "cuda/ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_NCCL
#include <nccl.h>

struct kiln_nccl {
    ncclComm_t comm;
    kiln_cuda_ctx *ctx; /* borrowed: stream and device */
    int rank, world;
    char err[512];
};

/* "/gpu:<device>: <call>: <reason>" (call cut at its '('); device < 0 for
 * calls that span several GPUs. Like the CUDA backend's kiln_cu__fail: with
 * several GPUs in one process the user must learn which one failed. */
static void nccl_msg(char *buf, size_t len, int device, const char *call, ncclResult_t r)
{
    int n = (int)strcspn(call, "(");
    if (device >= 0)
        snprintf(buf, len, "/gpu:%d: %.*s: %s", device, n, call, ncclGetErrorString(r));
    else
        snprintf(buf, len, "%.*s: %s", n, call, ncclGetErrorString(r));
}

#define CK_NCCL(errbuf, errlen, device, call)                                                      \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            nccl_msg((errbuf), (errlen), (device), #call, r_);                                     \
            rc = KILN_EIO;                                                                         \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

int kiln_nccl_available(void)
{
    return 1;
}

/* What rank 0 broadcasts: the id, or that it could not make one (so the
 * others fail at once instead of waiting for a communicator never made). */
typedef struct id_msg {
    int ok;
    ncclUniqueId id;
} id_msg;

kiln_err kiln_nccl_init_comm(kiln_comm *cpu, kiln_cuda_ctx *ctx, kiln_nccl **out, char *err,
                             size_t errlen)
{
    kiln_err rc = KILN_OK;
    kiln_nccl *c = calloc(1, sizeof *c);
    id_msg m;
    cudaError_t e;

    *out = NULL;
    memset(&m, 0, sizeof m);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return KILN_ENOMEM;
    }
    c->ctx = ctx;
    c->rank = kiln_comm_rank(cpu);
    c->world = kiln_comm_world_size(cpu);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&m.id);
        m.ok = r == ncclSuccess;
        if (!m.ok) snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (kiln_comm_broadcast(cpu, &m, sizeof m, 0) != KILN_OK) {
        snprintf(err, errlen, "broadcast of the NCCL id: %s", kiln_comm_error(cpu));
        rc = KILN_EIO;
        goto out;
    }
    if (!m.ok) {
        if (c->rank != 0) snprintf(err, errlen, "rank 0 could not create the NCCL id");
        rc = KILN_EIO;
        goto out;
    }
    if ((e = cudaSetDevice(kiln_cu_device(ctx))) != cudaSuccess) {
        snprintf(err, errlen, "/gpu:%d: cudaSetDevice: %s", kiln_cu_device(ctx),
                 cudaGetErrorString(e));
        rc = KILN_EIO;
        goto out;
    }
    CK_NCCL(err, errlen, kiln_cu_device(ctx), ncclCommInitRank(&c->comm, c->world, m.id, c->rank));
out:
    if (rc != KILN_OK) {
        kiln_nccl_destroy(c);
        return rc;
    }
    *out = c;
    return KILN_OK;
}

kiln_err kiln_nccl_init_local(kiln_cuda_ctx *const *ctxs, int n, kiln_nccl **out, char *err,
                              size_t errlen)
{
    kiln_err rc = KILN_OK;
    ncclComm_t *comms = calloc((size_t)(n > 0 ? n : 1), sizeof *comms);
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    int made = 0;

    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (!comms || !devs) {
        snprintf(err, errlen, "out of memory");
        rc = KILN_ENOMEM;
        goto out;
    }
    if (n < 1) {
        snprintf(err, errlen, "mirrored: no devices given");
        rc = KILN_EINVAL;
        goto out;
    }
    for (int i = 0; i < n; i++)
        devs[i] = kiln_cu_device(ctxs[i]);
    CK_NCCL(err, errlen, -1, ncclCommInitAll(comms, n, devs));
    made = 1;
    for (int i = 0; i < n; i++) {
        out[i] = calloc(1, sizeof *out[i]);
        if (!out[i]) {
            snprintf(err, errlen, "out of memory");
            rc = KILN_ENOMEM;
            goto out;
        }
        *out[i] = (kiln_nccl){.comm = comms[i], .ctx = ctxs[i], .rank = i, .world = n};
    }
out:
    if (rc != KILN_OK) {
        for (int i = 0; i < n; i++) {
            if (out[i]) out[i]->comm = NULL;
            kiln_nccl_destroy(out[i]);
            out[i] = NULL;
            if (made) ncclCommDestroy(comms[i]);
        }
    }
    free(comms);
    free(devs);
    return rc;
}

kiln_err kiln_nccl_allreduce_sum_f32(kiln_nccl *c, float *buf, size_t count)
{
    kiln_err rc = KILN_OK;
    CK_NCCL(c->err, sizeof c->err, kiln_cu_device(c->ctx),
            ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->comm, c->ctx->stream));
out:
    return rc;
}

kiln_err kiln_nccl_allreduce_group(kiln_nccl *const *cs, float *const *bufs, size_t count, int n)
{
    kiln_err rc = KILN_OK;
    int failed = -1;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
        snprintf(cs[0]->err, sizeof cs[0]->err, "ncclGroupStart: %s", ncclGetErrorString(r));
        return KILN_EIO;
    }
    for (int i = 0; i < n && failed < 0; i++) {
        r = ncclAllReduce(bufs[i], bufs[i], count, ncclFloat, ncclSum, cs[i]->comm,
                          cs[i]->ctx->stream);
        if (r != ncclSuccess) {
            nccl_msg(cs[i]->err, sizeof cs[i]->err, kiln_cu_device(cs[i]->ctx), "ncclAllReduce", r);
            failed = i;
        }
    }
    /* the group must be closed even after a failed call */
    r = ncclGroupEnd();
    if (failed >= 0) return KILN_EIO;
    if (r != ncclSuccess) {
        snprintf(cs[0]->err, sizeof cs[0]->err, "ncclGroupEnd: %s", ncclGetErrorString(r));
        rc = KILN_EIO;
    }
    return rc;
}

const char *kiln_nccl_error(const kiln_nccl *c)
{
    return c->err;
}

int kiln_nccl_rank(const kiln_nccl *c)
{
    return c->rank;
}

int kiln_nccl_world_size(const kiln_nccl *c)
{
    return c->world;
}

void kiln_nccl_destroy(kiln_nccl *c)
{
    if (!c) return;
    if (c->comm) ncclCommDestroy(c->comm);
    free(c);
}

#else /* built without NCCL */

#define NO_NCCL "NCCL was not found when kiln was built (see docs/gpu.md)"

struct kiln_nccl {
    char err[1];
};

int kiln_nccl_available(void)
{
    return 0;
}

kiln_err kiln_nccl_init_comm(kiln_comm *cpu, kiln_cuda_ctx *ctx, kiln_nccl **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    snprintf(err, errlen, "%s", NO_NCCL);
    return KILN_ENOTFOUND;
}

kiln_err kiln_nccl_init_local(kiln_cuda_ctx *const *ctxs, int n, kiln_nccl **out, char *err,
                              size_t errlen)
{
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    snprintf(err, errlen, "%s", NO_NCCL);
    return KILN_ENOTFOUND;
}

kiln_err kiln_nccl_allreduce_sum_f32(kiln_nccl *c, float *buf, size_t count)
{
    return KILN_ENOTFOUND;
}

kiln_err kiln_nccl_allreduce_group(kiln_nccl *const *cs, float *const *bufs, size_t count, int n)
{
    return KILN_ENOTFOUND;
}

const char *kiln_nccl_error(const kiln_nccl *c)
{
    return NO_NCCL;
}

int kiln_nccl_rank(const kiln_nccl *c)
{
    return 0;
}

int kiln_nccl_world_size(const kiln_nccl *c)
{
    return 0;
}

void kiln_nccl_destroy(kiln_nccl *c) {}
#endif
