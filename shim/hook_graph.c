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
 *   Every call that changes an executable graph after instantiation (node parameters, child
 *   graphs, whole-graph updates) makes the engine forget it: it is then unbounded (its whole
 *   footprint resident at launch), never under-predicted. Executable graphs made by entry
 *   points not hooked here (the legacy cuGraphInstantiate) are unbounded the same way.
 *
 * Cost: one walk per instantiation (graphs are instantiated once and launched many times).
 */
#include "shim/shim_int.h"

#include "shim/engine.h"
#include "shim/shim_events.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 8

static void walk(CUgraph g, const void *exec, int depth)
{
    size_t n = 0;
    if (depth > MAX_DEPTH || MS_REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS) {
        ms_engine_graph_unbounded(exec);
        return;
    }
    CUgraphNode *nodes = n ? ms_calloc(n, sizeof(*nodes)) : NULL;
    if (n && (!nodes || MS_REAL(cuGraphGetNodes)(g, nodes, &n) != CUDA_SUCCESS)) {
        ms_free(nodes);
        ms_engine_graph_unbounded(exec);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        if (MS_REAL(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS) {
            ms_engine_graph_unbounded(exec);
            break;
        }
        switch (t) {
        case CU_GRAPH_NODE_TYPE_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS p;
            memset(&p, 0, sizeof(p));
            if (MS_REAL(cuGraphKernelNodeGetParams_v2)(nodes[i], &p) != CUDA_SUCCESS || p.extra ||
                (!p.func && !p.kern)) {
                ms_engine_graph_unbounded(exec);
                break;
            }
            CUfunction f = p.func ? p.func : (CUfunction)p.kern;
            const unsigned grid[3] = {p.gridDimX, p.gridDimY, p.gridDimZ};
            const unsigned block[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
            uint8_t local[4096];
            uint8_t *heap;
            struct ms_shim_launch l;
            ms__shim_launch_build(&l, MS_SHIM_LAUNCH_KERNEL, f, grid, block, p.sharedMemBytes,
                                  (struct ms_shim_stream){NULL, false}, p.kernelParams, NULL, local,
                                  sizeof local, &heap);
            ms_engine_graph_add_launch(exec, &l);
            ms_free(heap);
            break;
        }
        case CU_GRAPH_NODE_TYPE_MEMCPY: {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof(c));
            if (MS_REAL(cuGraphMemcpyNodeGetParams)(nodes[i], &c) != CUDA_SUCCESS) {
                ms_engine_graph_unbounded(exec);
                break;
            }
            if (c.srcMemoryType == CU_MEMORYTYPE_DEVICE || c.srcMemoryType == CU_MEMORYTYPE_UNIFIED)
                ms_engine_graph_add_addr(exec, c.srcDevice);
            if (c.dstMemoryType == CU_MEMORYTYPE_DEVICE || c.dstMemoryType == CU_MEMORYTYPE_UNIFIED)
                ms_engine_graph_add_addr(exec, c.dstDevice);
            break;
        }
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            CUDA_MEMSET_NODE_PARAMS m;
            memset(&m, 0, sizeof(m));
            if (MS_REAL(cuGraphMemsetNodeGetParams)(nodes[i], &m) != CUDA_SUCCESS)
                ms_engine_graph_unbounded(exec);
            else
                ms_engine_graph_add_addr(exec, m.dst);
            break;
        }
        case CU_GRAPH_NODE_TYPE_GRAPH: {
            CUgraph child;
            if (MS_REAL(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) != CUDA_SUCCESS)
                ms_engine_graph_unbounded(exec);
            else
                walk(child, exec, depth + 1);
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
        default: ms_engine_graph_unbounded(exec); break;
        }
    }
    ms_free(nodes);
}

static void instantiated(CUresult rc, const CUgraphExec *exec, CUgraph g)
{
    if (rc != CUDA_SUCCESS || !exec || !*exec || !ms_engine_active())
        return;
    ms_engine_graph_begin(*exec);
    walk(g, *exec, 0);
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
    ms_engine_graph_forget(hGraphExec);
    return MS_REAL(cuGraphExecDestroy)(hGraphExec);
}

/* Calls that change an executable graph: forget what it reached (it becomes unbounded). */
#define CHANGES_EXEC(name, params, args)                                                           \
    CUresult CUDAAPI name params                                                                   \
    {                                                                                              \
        ms_engine_graph_forget(hGraphExec);                                                        \
        return MS_REAL(name) args;                                                                 \
    }

CHANGES_EXEC(cuGraphExecKernelNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p),
             (hGraphExec, hNode, p))
CHANGES_EXEC(cuGraphExecKernelNodeSetParams_v2,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p),
             (hGraphExec, hNode, p))
CHANGES_EXEC(cuGraphExecMemcpyNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *p, CUcontext ctx),
             (hGraphExec, hNode, p, ctx))
CHANGES_EXEC(cuGraphExecMemsetNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *p,
              CUcontext ctx),
             (hGraphExec, hNode, p, ctx))
CHANGES_EXEC(cuGraphExecChildGraphNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph child), (hGraphExec, hNode, child))
CHANGES_EXEC(cuGraphExecNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *p),
             (hGraphExec, hNode, p))
CHANGES_EXEC(cuGraphExecBatchMemOpNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p),
             (hGraphExec, hNode, p))
CHANGES_EXEC(cuGraphExecUpdate,
             (CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *errNode,
              CUgraphExecUpdateResult *result),
             (hGraphExec, hGraph, errNode, result))
CHANGES_EXEC(cuGraphExecUpdate_v2,
             (CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *info),
             (hGraphExec, hGraph, info))
