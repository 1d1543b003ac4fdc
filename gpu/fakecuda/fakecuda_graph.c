/*
 * fakecuda_graph.c - the fake driver's CUDA graphs: kernel nodes only, enough to test that an
 * interposer gates graph launches.
 *
 * Design
 *   A graph is a list of kernel nodes whose parameters were copied at cuGraphAddKernelNode
 *   (as the driver does); dependencies are accepted and ignored (the fake runs nodes in the
 *   order they were added, synchronously, which is one valid order for a graph built in that
 *   order). cuGraphInstantiateWithFlags snapshots the nodes; cuGraphLaunch(_ptsz) runs the
 *   snapshot's kernels through the ordinary launch path (so they count as launches and fault
 *   on non-resident memory, like any kernel). Handles are checked against live lists.
 *   Nodes can be listed (cuGraphGetNodes), typed (always kernel) and read back
 *   (cuGraphKernelNodeGetParams_v2: kernelParams point into the graph's copy), as an
 *   interposer walking a graph at instantiation does. A node handle is (graph slot + 1) << 32
 *   | (index + 1).
 *
 * Invariants (under ms__fk_lock): every live graph and exec is in its list; an exec owns copies
 * of its nodes' parameter buffers, independent of the graph.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_GRAPHS 256u

struct node {
    CUfunction f;
    unsigned grid[3], block[3], smem;
    void *buf;
    size_t bytes;
    void **ptrs; /* kernelParams for cuGraphKernelNodeGetParams: into buf (graphs only) */
};

struct fk_graph {
    struct node *nodes;
    size_t n, cap;
};

static struct fk_graph *graphs[MAX_GRAPHS], *execs[MAX_GRAPHS];

static bool live(struct fk_graph **list, const void *h)
{
    for (unsigned i = 0; h && i < MAX_GRAPHS; i++)
        if (list[i] == h)
            return true;
    return false;
}

static bool put(struct fk_graph **list, struct fk_graph *g)
{
    for (unsigned i = 0; i < MAX_GRAPHS; i++)
        if (!list[i]) {
            list[i] = g;
            return true;
        }
    return false;
}

static void drop(struct fk_graph **list, struct fk_graph *g)
{
    for (unsigned i = 0; i < MAX_GRAPHS; i++)
        if (list[i] == g)
            list[i] = NULL;
    for (size_t i = 0; i < g->n; i++) {
        free(g->nodes[i].buf);
        free(g->nodes[i].ptrs);
    }
    free(g->nodes);
    free(g);
}

static int slot_of(struct fk_graph *g)
{
    for (unsigned i = 0; i < MAX_GRAPHS; i++)
        if (graphs[i] == g)
            return (int)i;
    return -1;
}

/* The node a handle names (ms__fk_lock held), or NULL. */
static struct node *node_of(CUgraphNode h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    uint64_t slot = (v >> 32) - 1, idx = (v & 0xffffffffu) - 1;
    if ((v >> 32) == 0 || slot >= MAX_GRAPHS || !graphs[slot] || idx >= graphs[slot]->n)
        return NULL;
    return &graphs[slot]->nodes[idx];
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = put(graphs, g);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    (void)dependencies;
    (void)numDependencies;
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphNode || !p || !p->func || p->extra)
        return CUDA_ERROR_INVALID_VALUE;
    struct node nd = {p->func,
                      {p->gridDimX, p->gridDimY, p->gridDimZ},
                      {p->blockDimX, p->blockDimY, p->blockDimZ},
                      p->sharedMemBytes,
                      NULL,
                      0,
                      NULL};
    rc = ms__fk_pack_params(p->func, p->kernelParams, &nd.buf, &nd.bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t np = 0;
    const size_t *off = NULL;
    if (ms__fk_param_offsets(p->func, &np, &off) == CUDA_SUCCESS && np) {
        nd.ptrs = calloc(np, sizeof(*nd.ptrs));
        if (!nd.ptrs) {
            free(nd.buf);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < np; i++)
            nd.ptrs[i] = (char *)nd.buf + off[i];
    }
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)hGraph;
    if (!live(graphs, g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        struct node *q = realloc(g->nodes, cap * sizeof(*q));
        if (!q) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g->nodes = q;
            g->cap = cap;
        }
    }
    if (rc == CUDA_SUCCESS) {
        g->nodes[g->n] = nd;
        *phGraphNode = (CUgraphNode)(uintptr_t)(((uint64_t)slot_of(g) + 1) << 32 | (g->n + 1));
        g->n++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS) {
        free(nd.buf);
        free(nd.ptrs);
    }
    return rc;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)hGraph;
    if (!live(graphs, g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!nodes) {
        *numNodes = g->n;
    } else {
        size_t n = *numNodes < g->n ? *numNodes : g->n;
        uint64_t slot = (uint64_t)slot_of(g) + 1;
        for (size_t i = 0; i < n; i++)
            nodes[i] = (CUgraphNode)(uintptr_t)(slot << 32 | (i + 1));
        *numNodes = n;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = type && node_of(hNode);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *type = CU_GRAPH_NODE_TYPE_KERNEL;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    if (nd) {
        memset(p, 0, sizeof(*p));
        p->func = nd->f;
        p->gridDimX = nd->grid[0];
        p->gridDimY = nd->grid[1];
        p->gridDimZ = nd->grid[2];
        p->blockDimX = nd->block[0];
        p->blockDimY = nd->block[1];
        p->blockDimZ = nd->block[2];
        p->sharedMemBytes = nd->smem;
        p->kernelParams = nd->ptrs;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphExec || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_graph *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)hGraph;
    if (!live(graphs, g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        e->nodes = calloc(g->n ? g->n : 1, sizeof(*e->nodes));
        for (size_t i = 0; e->nodes && i < g->n; i++) {
            e->nodes[i] = g->nodes[i];
            e->nodes[i].buf = NULL;
            e->nodes[i].ptrs = NULL;
            if (g->nodes[i].buf && (e->nodes[i].buf = malloc(g->nodes[i].bytes)) != NULL)
                memcpy(e->nodes[i].buf, g->nodes[i].buf, g->nodes[i].bytes);
            else if (g->nodes[i].buf)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            e->n = i + 1;
        }
        if (!e->nodes || rc != CUDA_SUCCESS || !put(execs, e))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS) {
        for (size_t i = 0; i < e->n; i++)
            free(e->nodes[i].buf);
        free(e->nodes);
        free(e);
        return rc;
    }
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fk_graph *e = (struct fk_graph *)hGraphExec;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = live(execs, e);
    if (ok)
        ms__fk_stats.graph_launches++;
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    /* The exec is not destroyed while it runs (destroying a launched exec is the caller's
     * error with the real driver too). */
    for (size_t i = 0; i < e->n && rc == CUDA_SUCCESS; i++)
        rc = ms__fk_launch_packed(e->nodes[i].f, e->nodes[i].grid, e->nodes[i].block,
                                  e->nodes[i].smem, hStream, e->nodes[i].buf, e->nodes[i].bytes);
    return rc;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream);
}

static CUresult destroy(struct fk_graph **list, void *h)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = live(list, h);
    if (ok)
        drop(list, h);
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    return destroy(execs, hGraphExec);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    return destroy(graphs, hGraph);
}
