/*
 * hook_graph.c - hooks for CUDA graphs: what an instantiated graph reaches, and its launches.
 *
 * Design
 *   Stream capture is not hooked (captured work only records into a graph). At instantiation
 *   (cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams(_ptsz)) the graph is walked
 *   after the driver accepted it: each kernel node's launch is built as a launch hook builds it
 *   (parameters packed by their layout) and handed to the engine, which predicts the regions
 *   it names; copy and memset nodes give their device addresses; child graphs are walked (to a
 *   depth of 8); host, empty, event, semaphore and graph-memory nodes reach no region. Any
 *   other node (batch memory operations, conditional nodes), a kernel passed through `extra`,
 *   or a query that fails makes the graph unbounded. The engine keeps the union per
 *   executable graph (engine.h); cuGraphLaunch gates on it (hook_launch.c).
 *   What each top-level node reaches is tagged with it. Calls that change an executable graph
 *   after instantiation are followed where they can be: a kernel, copy or memset node's new
 *   parameters (cuGraphExec{Kernel,Memcpy,Memset}NodeSetParams, cuGraphExecNodeSetParams for
 *   a kernel node) and a child graph node's new graph (cuGraphExecChildGraphNodeSetParams,
 *   walked) replace that node's part of the record; a whole-graph update
 *   (cuGraphExecUpdate(_v2)) walks the new graph again. XLA's command buffers set their
 *   kernels' parameters before every run: before this, each such graph was unbounded and, under
 *   a budget below the footprint, ran with most of its memory on the host (jax_platform at half
 *   its footprint on an H100: 155 s, 18 s without command buffers). Other changes (batch
 *   memory operations, a refused update) make the engine forget the exec: it is
 *   then unbounded (its whole footprint resident at launch), never under-predicted.
 *   Executable graphs made by entry points not hooked here (the legacy cuGraphInstantiate) are
 *   unbounded the same way.
 *
 * Cost: one walk per instantiation (graphs are instantiated once and launched many times).
 */
#include "shim/shim_int.h"

#include "shim/engine.h"
#include "shim/shim_events.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 8

/* What a kernel node with parameters p reaches, tagged with node (the engine predicts it as it
 * would the same launch). */
static void add_kernel(const void *exec, const void *node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    uint8_t local[4096];
    uint8_t *heap;
    struct ms_shim_launch l;
    ms__shim_launch_build(&l, MS_SHIM_LAUNCH_KERNEL, f, grid, block, p->sharedMemBytes,
                          (struct ms_shim_stream){NULL, false}, p->kernelParams, NULL, local,
                          sizeof local, &heap);
    ms_engine_graph_add_launch(exec, node, &l);
    ms_free(heap);
}

/* Walk graph g of exec; `top` tags what a child graph's nodes reach with the top-level node
 * that holds it (NULL at the top: each node tags its own). */
static void walk(CUgraph g, const void *exec, int depth, const void *top)
{
    size_t n = 0;
    if (depth > MAX_DEPTH || MS_REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS) {
        ms_engine_graph_unbounded(exec,
                                  depth > MAX_DEPTH ? "child graphs nested deeper than"
                                                    : "cuGraphGetNodes failed at depth",
                                  depth);
        return;
    }
    CUgraphNode *nodes = n ? ms_calloc(n, sizeof(*nodes)) : NULL;
    if (n && (!nodes || MS_REAL(cuGraphGetNodes)(g, nodes, &n) != CUDA_SUCCESS)) {
        ms_free(nodes);
        ms_engine_graph_unbounded(exec, "cuGraphGetNodes failed at depth", depth);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const void *tag = top ? top : (const void *)nodes[i];
        CUgraphNodeType t;
        if (MS_REAL(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS) {
            ms_engine_graph_unbounded(exec, "cuGraphNodeGetType failed", -1);
            break;
        }
        switch (t) {
        case CU_GRAPH_NODE_TYPE_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS p;
            memset(&p, 0, sizeof(p));
            if (MS_REAL(cuGraphKernelNodeGetParams_v2)(nodes[i], &p) != CUDA_SUCCESS || p.extra ||
                (!p.func && !p.kern)) {
                ms_engine_graph_unbounded(exec, "a kernel node without readable parameters", -1);
                break;
            }
            add_kernel(exec, tag, &p);
            break;
        }
        case CU_GRAPH_NODE_TYPE_MEMCPY: {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof(c));
            if (MS_REAL(cuGraphMemcpyNodeGetParams)(nodes[i], &c) != CUDA_SUCCESS) {
                ms_engine_graph_unbounded(exec, "cuGraphMemcpyNodeGetParams failed", -1);
                break;
            }
            if (c.srcMemoryType == CU_MEMORYTYPE_DEVICE || c.srcMemoryType == CU_MEMORYTYPE_UNIFIED)
                ms_engine_graph_add_addr(exec, tag, c.srcDevice);
            if (c.dstMemoryType == CU_MEMORYTYPE_DEVICE || c.dstMemoryType == CU_MEMORYTYPE_UNIFIED)
                ms_engine_graph_add_addr(exec, tag, c.dstDevice);
            break;
        }
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            CUDA_MEMSET_NODE_PARAMS m;
            memset(&m, 0, sizeof(m));
            if (MS_REAL(cuGraphMemsetNodeGetParams)(nodes[i], &m) != CUDA_SUCCESS)
                ms_engine_graph_unbounded(exec, "cuGraphMemsetNodeGetParams failed", -1);
            else
                ms_engine_graph_add_addr(exec, tag, m.dst);
            break;
        }
        case CU_GRAPH_NODE_TYPE_GRAPH: {
            CUgraph child;
            if (MS_REAL(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) != CUDA_SUCCESS)
                ms_engine_graph_unbounded(exec, "cuGraphChildGraphNodeGetGraph failed", -1);
            else
                walk(child, exec, depth + 1, tag);
            break;
        }
        case CU_GRAPH_NODE_TYPE_HOST:
        case CU_GRAPH_NODE_TYPE_EMPTY:
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        case CU_GRAPH_NODE_TYPE_MEM_FREE: break;
        default: ms_engine_graph_unbounded(exec, "a node of type", (int)t); break;
        }
    }
    ms_free(nodes);
}

static void instantiated(CUresult rc, const CUgraphExec *exec, CUgraph g)
{
    if (rc != CUDA_SUCCESS || !exec || !*exec || !ms_engine_active())
        return;
    ms_engine_graph_begin(*exec);
    walk(g, *exec, 0, NULL);
    ms__graph_pieces_track(*exec, g);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    CUresult rc = MS_REAL(cuGraphInstantiateWithFlags)(phGraphExec, hGraph, flags);
    instantiated(rc, phGraphExec, hGraph);
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CUresult rc = MS_REAL(cuGraphInstantiateWithParams)(phGraphExec, hGraph, params);
    instantiated(rc, phGraphExec, hGraph);
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CUresult rc = MS_REAL(cuGraphInstantiateWithParams_ptsz)(phGraphExec, hGraph, params);
    instantiated(rc, phGraphExec, hGraph);
    return rc;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    ms_engine_graph_forget(hGraphExec, NULL);
    ms__graph_pieces_destroyed(hGraphExec);
    return MS_REAL(cuGraphExecDestroy)(hGraphExec);
}

/* Calls that change an executable graph in ways not followed: forget what it reached (it
 * becomes unbounded). */
#define CHANGES_EXEC(name, params, args)                                                           \
    CUresult CUDAAPI name params                                                                   \
    {                                                                                              \
        ms_engine_graph_forget(hGraphExec, #name);                                                 \
        ms__graph_pieces_forget(hGraphExec);                                                       \
        return MS_REAL(name) args;                                                                 \
    }

/* A kernel node's new parameters on the exec: that node's part of the record is replaced (once
 * the driver accepted them; a refused call changed nothing). */
static void kernel_params_set(CUresult rc, CUgraphExec x, CUgraphNode node,
                              const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (rc != CUDA_SUCCESS || !ms_engine_active())
        return;
    ms_engine_graph_node_reset(x, node);
    if (!p || p->extra || (!p->func && !p->kern))
        ms_engine_graph_unbounded(x, "new kernel node parameters without a function or with extra",
                                  -1);
    else
        add_kernel(x, node, p);
    struct ms_graph_update u = {.kind = MS_GRAPH_UPD_KERNEL, .p = p};
    if (p)
        ms__graph_pieces_update(x, node, &u);
    else
        ms__graph_pieces_forget(x);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = MS_REAL(cuGraphExecKernelNodeSetParams)(hGraphExec, hNode, p);
    CUDA_KERNEL_NODE_PARAMS q;
    memset(&q, 0, sizeof(q));
    if (p) { /* v1 is v2 without the kernel handle and context */
        q.func = p->func;
        q.gridDimX = p->gridDimX;
        q.gridDimY = p->gridDimY;
        q.gridDimZ = p->gridDimZ;
        q.blockDimX = p->blockDimX;
        q.blockDimY = p->blockDimY;
        q.blockDimZ = p->blockDimZ;
        q.sharedMemBytes = p->sharedMemBytes;
        q.kernelParams = p->kernelParams;
        q.extra = p->extra;
    }
    kernel_params_set(rc, hGraphExec, hNode, p ? &q : NULL);
    return rc;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult rc = MS_REAL(cuGraphExecKernelNodeSetParams_v2)(hGraphExec, hNode, p);
    kernel_params_set(rc, hGraphExec, hNode, p);
    return rc;
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    CUresult rc = MS_REAL(cuGraphExecMemcpyNodeSetParams)(hGraphExec, hNode, p, ctx);
    if (rc == CUDA_SUCCESS && ms_engine_active()) {
        ms_engine_graph_node_reset(hGraphExec, hNode);
        if (p &&
            (p->srcMemoryType == CU_MEMORYTYPE_DEVICE || p->srcMemoryType == CU_MEMORYTYPE_UNIFIED))
            ms_engine_graph_add_addr(hGraphExec, hNode, p->srcDevice);
        if (p &&
            (p->dstMemoryType == CU_MEMORYTYPE_DEVICE || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED))
            ms_engine_graph_add_addr(hGraphExec, hNode, p->dstDevice);
        struct ms_graph_update u = {.kind = MS_GRAPH_UPD_COPY, .p = p, .ctx = ctx};
        ms__graph_pieces_update(hGraphExec, hNode, &u);
    }
    return rc;
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    CUresult rc = MS_REAL(cuGraphExecMemsetNodeSetParams)(hGraphExec, hNode, p, ctx);
    if (rc == CUDA_SUCCESS && ms_engine_active()) {
        ms_engine_graph_node_reset(hGraphExec, hNode);
        if (p)
            ms_engine_graph_add_addr(hGraphExec, hNode, p->dst);
        struct ms_graph_update u = {.kind = MS_GRAPH_UPD_SET, .p = p, .ctx = ctx};
        ms__graph_pieces_update(hGraphExec, hNode, &u);
    }
    return rc;
}

/* The generic form: kernel nodes are followed, any other node type is forgotten. */
CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                          CUgraphNodeParams *p)
{
    CUresult rc = MS_REAL(cuGraphExecNodeSetParams)(hGraphExec, hNode, p);
    if (p && p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel; /* v2's fields, in v2's order */
        CUDA_KERNEL_NODE_PARAMS q = {.func = k->func,
                                     .gridDimX = k->gridDimX,
                                     .gridDimY = k->gridDimY,
                                     .gridDimZ = k->gridDimZ,
                                     .blockDimX = k->blockDimX,
                                     .blockDimY = k->blockDimY,
                                     .blockDimZ = k->blockDimZ,
                                     .sharedMemBytes = k->sharedMemBytes,
                                     .kernelParams = k->kernelParams,
                                     .extra = k->extra,
                                     .kern = k->kern,
                                     .ctx = k->ctx};
        kernel_params_set(rc, hGraphExec, hNode, &q);
    } else {
        ms_engine_graph_forget(hGraphExec, "cuGraphExecNodeSetParams of a node not a kernel");
        ms__graph_pieces_forget(hGraphExec);
    }
    return rc;
}

/* A child graph node given another graph (XLA's traced commands, such as cuBLAS calls captured
 * into a graph, are updated this way): that node's part is the new child graph, walked. */
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph child)
{
    CUresult rc = MS_REAL(cuGraphExecChildGraphNodeSetParams)(hGraphExec, hNode, child);
    if (rc == CUDA_SUCCESS && ms_engine_active()) {
        ms_engine_graph_node_reset(hGraphExec, hNode);
        walk(child, hGraphExec, 1, hNode);
        struct ms_graph_update u = {.kind = MS_GRAPH_UPD_CHILD, .p = child};
        ms__graph_pieces_update(hGraphExec, hNode, &u);
    }
    return rc;
}

/* Calls that change an executable graph's node without changing what it reaches: made on the
 * pieces of a graph launched in pieces too. */
#define PIECES_FOLLOW(name, ptype, pname, kind_, field)                                            \
    CUresult CUDAAPI name(CUgraphExec hGraphExec, CUgraphNode hNode, ptype pname)                  \
    {                                                                                              \
        CUresult rc = MS_REAL(name)(hGraphExec, hNode, pname);                                     \
        if (rc == CUDA_SUCCESS && ms_engine_active()) {                                            \
            struct ms_graph_update u = {.kind = kind_, field = pname};                             \
            ms__graph_pieces_update(hGraphExec, hNode, &u);                                        \
        }                                                                                          \
        return rc;                                                                                 \
    }

PIECES_FOLLOW(cuGraphExecHostNodeSetParams, const CUDA_HOST_NODE_PARAMS *, p, MS_GRAPH_UPD_HOST, .p)
PIECES_FOLLOW(cuGraphExecEventRecordNodeSetEvent, CUevent, e, MS_GRAPH_UPD_RECORD, .p)
PIECES_FOLLOW(cuGraphExecEventWaitNodeSetEvent, CUevent, e, MS_GRAPH_UPD_WAIT, .p)
PIECES_FOLLOW(cuGraphExecExternalSemaphoresSignalNodeSetParams,
              const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *, p, MS_GRAPH_UPD_SIGNAL, .p)
PIECES_FOLLOW(cuGraphExecExternalSemaphoresWaitNodeSetParams, const CUDA_EXT_SEM_WAIT_NODE_PARAMS *,
              p, MS_GRAPH_UPD_SEMWAIT, .p)
PIECES_FOLLOW(cuGraphNodeSetEnabled, unsigned int, on, MS_GRAPH_UPD_ENABLED, .on)

CHANGES_EXEC(cuGraphExecBatchMemOpNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p),
             (hGraphExec, hNode, p))

/* A whole-graph update makes the exec what hGraph is: walked again, as at instantiation (a
 * refused update: forgotten, as the driver does not say what it left). */
static void updated(CUresult rc, CUgraphExec x, CUgraph g)
{
    if (!ms_engine_active())
        return;
    if (rc != CUDA_SUCCESS || !g) {
        ms_engine_graph_forget(x, "a refused cuGraphExecUpdate");
        ms__graph_pieces_forget(x);
        return;
    }
    ms_engine_graph_begin(x);
    walk(g, x, 0, NULL);
    ms__graph_pieces_track(x, g);
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *errNode,
                                   CUgraphExecUpdateResult *result)
{
    CUresult rc = MS_REAL(cuGraphExecUpdate)(hGraphExec, hGraph, errNode, result);
    updated(rc, hGraphExec, hGraph);
    return rc;
}

CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                      CUgraphExecUpdateResultInfo *info)
{
    CUresult rc = MS_REAL(cuGraphExecUpdate_v2)(hGraphExec, hGraph, info);
    updated(rc, hGraphExec, hGraph);
    return rc;
}
