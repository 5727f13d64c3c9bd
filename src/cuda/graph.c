/* cuda/graph.c - capturing the compute stream's work as a CUDA graph and
 * replaying it (cuda/cuda_ops.h). Relaxed capture: the step's cuDNN calls
 * make host-side queries (descriptors, heuristics) while it records, which
 * the global mode would refuse. */
#include "cuda/ctx.h"

kiln_err kiln_cu_graph_begin(kiln_cuda_ctx *c)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
out:
    return rc;
}

kiln_err kiln_cu_graph_end(kiln_cuda_ctx *c, void **graph)
{
    kiln_err rc = KILN_OK;
    cudaGraph_t g = NULL;
    cudaGraphExec_t e = NULL;
    *graph = NULL;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaStreamEndCapture(c->stream, &g));
    CK_CUDA(c, cudaGraphInstantiate(&e, g, 0));
    *graph = e;
out:
    if (g) cudaGraphDestroy(g);
    if (rc != KILN_OK) cudaGetLastError(); /* a failed capture leaves its error behind */
    return rc;
}

kiln_err kiln_cu_graph_launch(kiln_cuda_ctx *c, void *graph)
{
    kiln_err rc = KILN_OK;
    CK_KILN(kiln_cu__enter(c));
    CK_CUDA(c, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream));
out:
    return rc;
}

void kiln_cu_graph_free(kiln_cuda_ctx *c, void *graph)
{
    if (graph && kiln_cu__enter(c) == KILN_OK) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
