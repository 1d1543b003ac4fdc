/*
 * fakecuda_graph.c - the fake driver's CUDA graphs: kernel nodes, and the device-to-device
 * copies and 1D memsets a stream capture records, enough to test that an interposer gates
 * graph launches.
 *
 * Design
 *   A graph is a list of nodes: kernels whose parameters were copied at cuGraphAddKernelNode
 *   (as the driver does), copies and memsets (added by a capture, ms__fk_graph_add_copy /
 *   _fill); dependencies are accepted and ignored (the fake runs nodes in the order they were
 *   added, synchronously, which is one valid order for a graph built in that order).
 *   Child graph nodes (cuGraphAddChildGraphNode) hold their own copy of the child graph, a live
 *   graph whose nodes have handles (cuGraphChildGraphNodeGetGraph).
 *   cuGraphInstantiateWithFlags snapshots the nodes, children included
 *   (cuGraphExecKernelNodeSetParams_v2 replaces a kernel node's parameters in the snapshot,
 *   cuGraphExecChildGraphNodeSetParams a child's snapshot); cuGraphLaunch(_ptsz) runs the
 * snapshot's kernels through the ordinary launch path and its copies and memsets through the
 * ordinary copy and memset paths (so they count, and fault on non-resident memory, like any
 *   command). Handles are checked against live lists. Nodes can be listed (cuGraphGetNodes),
 *   typed (cuGraphNodeGetType) and read back (cuGraphKernelNodeGetParams_v2: kernelParams
 *   point into the graph's copy; cuGraphMemcpyNodeGetParams, cuGraphMemsetNodeGetParams), as
 *   an interposer walking a graph at instantiation does. A node handle is (graph slot + 1)
 *   << 32 | (index + 1).
 *   Graphs can be copied as an interposer that launches a graph in pieces does: cuGraphClone
 *   (a listed deep copy: node i of the clone is node i of the original, so
 *   cuGraphNodeFindInClone maps a handle by its index), cuGraphDestroyNode (the node becomes
 *   NODE_GONE: not listed, not run, its edges gone, and no other handle moves),
 *   cuGraphGetEdges(_v2) (the dependencies kernel and child graph nodes were added with; with
 *   MSCHED_FAKE_EDGE_DATA=1 every edge carries data, so the CUDA 10 form refuses to list them,
 *   CUDA_ERROR_LOSSY_QUERY, as the driver does for XLA's graphs), and a graph node's new
 *   parameters (cuGraphKernelNodeSetParams_v2; a child graph through cuGraphNodeSetParams).
 *
 * Invariants (under ms__fk_lock): every live graph and exec is in its list; an exec owns copies
 * of its nodes' parameter buffers, independent of the graph.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_GRAPHS 256u

enum node_kind { NODE_KERNEL, NODE_COPY, NODE_FILL, NODE_CHILD, NODE_GONE };

struct node {
    enum node_kind kind;
    uint64_t dst, src, n; /* copies: bytes; memsets: elements of `elem` bytes */
    uint32_t value;
    unsigned elem;
    CUfunction f;
    unsigned grid[3], block[3], smem;
    void *buf;
    size_t bytes;
    void **ptrs; /* kernelParams for cuGraphKernelNodeGetParams: into buf (graphs only) */
    size_t nptrs;
    struct fk_graph *child; /* NODE_CHILD: the node's own copy of the child graph (in a graph:
                               a live graph of its own, whose nodes have handles; in an exec:
                               a snapshot in no list) */
};

struct fk_graph {
    struct node *nodes;
    size_t n, cap;
    uint32_t (*edges)[2]; /* (from, to) node positions, as the dependencies were given */
    size_t nedges;
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

/* Free g, its nodes' buffers and their child graphs (taken off the graph list if on it). */
static void graph_free(struct fk_graph *g)
{
    for (size_t i = 0; i < g->n; i++) {
        free(g->nodes[i].buf);
        free(g->nodes[i].ptrs);
        if (g->nodes[i].child) {
            for (unsigned k = 0; k < MAX_GRAPHS; k++)
                if (graphs[k] == g->nodes[i].child)
                    graphs[k] = NULL;
            graph_free(g->nodes[i].child);
        }
    }
    free(g->nodes);
    free(g->edges);
    free(g);
}

static void drop(struct fk_graph **list, struct fk_graph *g)
{
    for (unsigned i = 0; i < MAX_GRAPHS; i++)
        if (list[i] == g)
            list[i] = NULL;
    graph_free(g);
}

/*
 * A deep copy of graph g (ms__fk_lock held): buffers copied, children copied too. `listed`: the
 * copy and its children go on the graph list (a child graph node's own graph, walked through
 * node handles; kernel nodes get their kernelParams back); else a snapshot for an exec. NULL
 * when memory or list slots run out.
 */
static struct fk_graph *graph_copy(const struct fk_graph *g, bool listed)
{
    struct fk_graph *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->nodes = calloc(g->n ? g->n : 1, sizeof(*c->nodes));
    if (!c->nodes) {
        free(c);
        return NULL;
    }
    c->cap = g->n ? g->n : 1;
    bool ok = true;
    if (g->nedges) {
        c->edges = malloc(g->nedges * sizeof(*c->edges));
        ok = c->edges != NULL;
        if (ok) {
            memcpy(c->edges, g->edges, g->nedges * sizeof(*c->edges));
            c->nedges = g->nedges;
        }
    }
    for (size_t i = 0; ok && i < g->n; i++) {
        struct node *d = &c->nodes[i];
        *d = g->nodes[i];
        d->buf = NULL;
        d->ptrs = NULL;
        d->child = NULL;
        c->n = i + 1;
        if (g->nodes[i].buf && (d->buf = malloc(g->nodes[i].bytes)) == NULL)
            ok = false;
        else if (g->nodes[i].buf)
            memcpy(d->buf, g->nodes[i].buf, g->nodes[i].bytes);
        /* the parameters' offsets from the source's kernelParams (no kernel lookup: the
         * fake's lock is held) */
        const struct node *o = &g->nodes[i];
        if (ok && listed && o->ptrs && o->nptrs) {
            if ((d->ptrs = calloc(o->nptrs, sizeof(*d->ptrs))) == NULL)
                ok = false;
            for (size_t k = 0; ok && k < o->nptrs; k++)
                d->ptrs[k] = (char *)d->buf + ((char *)o->ptrs[k] - (char *)o->buf);
        }
        if (!d->ptrs)
            d->nptrs = 0;
        if (ok && g->nodes[i].child && (d->child = graph_copy(g->nodes[i].child, listed)) == NULL)
            ok = false;
    }
    if (ok && listed && !put(graphs, c))
        ok = false;
    if (!ok) {
        graph_free(c);
        return NULL;
    }
    return c;
}

static int slot_of(struct fk_graph *g)
{
    for (unsigned i = 0; i < MAX_GRAPHS; i++)
        if (graphs[i] == g)
            return (int)i;
    return -1;
}

/* The position a node handle names in its graph (or in an exec made from it). */
static uint64_t node_pos(CUgraphNode h)
{
    return ((uint64_t)(uintptr_t)h & 0xffffffffu) - 1;
}

/* The node a handle names (ms__fk_lock held), or NULL. */
static struct node *node_of(CUgraphNode h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    uint64_t slot = (v >> 32) - 1, idx = (v & 0xffffffffu) - 1;
    if ((v >> 32) == 0 || slot >= MAX_GRAPHS || !graphs[slot] || idx >= graphs[slot]->n ||
        graphs[slot]->nodes[idx].kind == NODE_GONE)
        return NULL;
    return &graphs[slot]->nodes[idx];
}

/* A kernel node's parameters packed as the launch path takes them (*buf, *bytes) and, for a
 * graph's node, kernelParams pointing into them (*ptrs, *nptrs: NULL, 0 when the kernel's
 * layout is unknown). */
static CUresult pack_kernel(const CUDA_KERNEL_NODE_PARAMS_v2 *p, void **buf, size_t *bytes,
                            void ***ptrs, size_t *nptrs)
{
    *ptrs = NULL;
    *nptrs = 0;
    CUresult rc = ms__fk_pack_params(p->func, p->kernelParams, buf, bytes);
    size_t np = 0;
    const size_t *off = NULL;
    if (rc != CUDA_SUCCESS || ms__fk_param_offsets(p->func, &np, &off) != CUDA_SUCCESS || !np)
        return rc;
    if ((*ptrs = calloc(np, sizeof(**ptrs))) == NULL) {
        free(*buf);
        *buf = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < np; i++)
        (*ptrs)[i] = (char *)*buf + off[i];
    *nptrs = np;
    return CUDA_SUCCESS;
}

/* Node nd takes kernel parameters p, packed in buf (bytes), its old buffer freed. */
static void take_kernel(struct node *nd, const CUDA_KERNEL_NODE_PARAMS_v2 *p, void *buf,
                        size_t bytes)
{
    free(nd->buf);
    nd->buf = buf;
    nd->bytes = bytes;
    nd->f = p->func;
    nd->grid[0] = p->gridDimX;
    nd->grid[1] = p->gridDimY;
    nd->grid[2] = p->gridDimZ;
    nd->block[0] = p->blockDimX;
    nd->block[1] = p->blockDimY;
    nd->block[2] = p->blockDimZ;
    nd->smem = p->sharedMemBytes;
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

/* Append a node to a live graph (its buffers become the graph's on success), with edges from
 * deps[0..ndeps) (nodes of the same graph). */
static CUresult append_deps(CUgraph hGraph, const struct node *nd, const CUgraphNode *deps,
                            size_t ndeps, CUgraphNode *out);

static CUresult append(CUgraph hGraph, const struct node *nd, CUgraphNode *out)
{
    return append_deps(hGraph, nd, NULL, 0, out);
}

static CUresult append_deps(CUgraph hGraph, const struct node *nd, const CUgraphNode *deps,
                            size_t ndeps, CUgraphNode *out)
{
    CUresult rc = CUDA_SUCCESS;
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
    uint64_t slot = (uint64_t)slot_of(g) + 1;
    for (size_t k = 0; rc == CUDA_SUCCESS && k < ndeps; k++) {
        uint64_t v = (uint64_t)(uintptr_t)deps[k];
        if ((v >> 32) != slot || (v & 0xffffffffu) == 0 || (v & 0xffffffffu) > g->n)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && ndeps) {
        void *q = realloc(g->edges, (g->nedges + ndeps) * sizeof(*g->edges));
        if (!q)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            g->edges = q;
    }
    for (size_t k = 0; rc == CUDA_SUCCESS && k < ndeps; k++) {
        g->edges[g->nedges][0] = (uint32_t)node_pos(deps[k]);
        g->edges[g->nedges][1] = (uint32_t)g->n;
        g->nedges++;
    }
    if (rc == CUDA_SUCCESS) {
        g->nodes[g->n] = *nd;
        *out = (CUgraphNode)(uintptr_t)(((uint64_t)slot_of(g) + 1) << 32 | (g->n + 1));
        g->n++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphNode || !p || !p->func || p->extra)
        return CUDA_ERROR_INVALID_VALUE;
    struct node nd = {.kind = NODE_KERNEL};
    void *buf = NULL;
    size_t bytes = 0;
    rc = pack_kernel(p, &buf, &bytes, &nd.ptrs, &nd.nptrs);
    if (rc != CUDA_SUCCESS)
        return rc;
    take_kernel(&nd, p, buf, bytes);
    rc = append_deps(hGraph, &nd, dependencies, numDependencies, phGraphNode);
    if (rc != CUDA_SUCCESS) {
        free(nd.buf);
        free(nd.ptrs);
    }
    return rc;
}

/* A child graph node: the node gets its own copy of childGraph, as the driver clones it. */
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUgraph childGraph)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphNode || childGraph == hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    const struct fk_graph *src = (const struct fk_graph *)childGraph;
    struct fk_graph *copy = live(graphs, src) ? graph_copy(src, true) : NULL;
    rc = live(graphs, src) ? (copy ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY)
                           : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct node nd = {.kind = NODE_CHILD, .child = copy};
    rc = append_deps(hGraph, &nd, dependencies, numDependencies, phGraphNode);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_lock(&ms__fk_lock);
        drop(graphs, copy);
        pthread_mutex_unlock(&ms__fk_lock);
    }
    return rc;
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = phGraph ? node_of(hNode) : NULL;
    bool ok = nd && nd->kind == NODE_CHILD;
    if (ok)
        *phGraph = (CUgraph)nd->child;
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult ms__fk_graph_add_copy(CUgraph g, uint64_t dst, uint64_t src, uint64_t bytes)
{
    struct node nd = {.kind = NODE_COPY, .dst = dst, .src = src, .n = bytes};
    CUgraphNode h;
    return append(g, &nd, &h);
}

CUresult ms__fk_graph_add_fill(CUgraph g, uint64_t dst, uint32_t value, unsigned elem, uint64_t n)
{
    struct node nd = {.kind = NODE_FILL, .dst = dst, .n = n, .value = value, .elem = elem};
    CUgraphNode h;
    return append(g, &nd, &h);
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
    } else {
        size_t k = 0;
        uint64_t slot = (uint64_t)slot_of(g) + 1;
        for (size_t i = 0; i < g->n; i++) {
            if (g->nodes[i].kind == NODE_GONE)
                continue;
            if (nodes && k < *numNodes)
                nodes[k] = (CUgraphNode)(uintptr_t)(slot << 32 | (i + 1));
            k++;
        }
        *numNodes = nodes && k > *numNodes ? *numNodes : k;
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
    struct node *nd = type ? node_of(hNode) : NULL;
    if (nd)
        *type = nd->kind == NODE_COPY    ? CU_GRAPH_NODE_TYPE_MEMCPY
                : nd->kind == NODE_FILL  ? CU_GRAPH_NODE_TYPE_MEMSET
                : nd->kind == NODE_CHILD ? CU_GRAPH_NODE_TYPE_GRAPH
                                         : CU_GRAPH_NODE_TYPE_KERNEL;
    pthread_mutex_unlock(&ms__fk_lock);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    bool ok = nd && nd->kind == NODE_COPY;
    if (ok) {
        memset(p, 0, sizeof(*p));
        p->srcMemoryType = CU_MEMORYTYPE_DEVICE;
        p->srcDevice = (CUdeviceptr)nd->src;
        p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
        p->dstDevice = (CUdeviceptr)nd->dst;
        p->WidthInBytes = (size_t)nd->n;
        p->Height = 1;
        p->Depth = 1;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    bool ok = nd && nd->kind == NODE_FILL;
    if (ok) {
        memset(p, 0, sizeof(*p));
        p->dst = (CUdeviceptr)nd->dst;
        p->value = nd->value;
        p->elementSize = nd->elem;
        p->width = (size_t)nd->n;
        p->height = 1;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
    if (nd && nd->kind != NODE_KERNEL)
        nd = NULL;
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
    struct fk_graph *e = NULL;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)hGraph;
    if (!live(graphs, g))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((e = graph_copy(g, false)) == NULL || !put(execs, e))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS && e)
        graph_free(e);
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

/*
 * A kernel node's new parameters on an executable graph, as the driver takes them: the node is
 * named by its handle in the graph the exec came from (same index in the exec's snapshot), must
 * be a kernel node, and gets a copy of the new parameters; the graph itself is unchanged.
 */
CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || !p->func || p->extra)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf = NULL;
    size_t bytes = 0;
    rc = ms__fk_pack_params(p->func, p->kernelParams, &buf, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *e = (struct fk_graph *)hGraphExec;
    uint64_t idx = node_pos(hNode);
    if (!live(execs, e) || !node_of(hNode) || idx >= e->n || e->nodes[idx].kind != NODE_KERNEL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        take_kernel(&e->nodes[idx], p, buf, bytes);
        buf = NULL;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    free(buf);
    return rc;
}

/* A child graph node of an executable graph given another graph: its snapshot replaced. */
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph childGraph)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *e = (struct fk_graph *)hGraphExec;
    uint64_t idx = node_pos(hNode);
    if (!live(execs, e) || !node_of(hNode) || idx >= e->n || e->nodes[idx].kind != NODE_CHILD ||
        !live(graphs, childGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct fk_graph *snap = graph_copy((const struct fk_graph *)childGraph, false);
        if (!snap) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            graph_free(e->nodes[idx].child);
            e->nodes[idx].child = snap;
        }
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

/* Run a snapshot's nodes in order (children within). */
static CUresult run_nodes(const struct fk_graph *e, CUstream hStream)
{
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < e->n && rc == CUDA_SUCCESS; i++) {
        const struct node *nd = &e->nodes[i];
        if (nd->kind == NODE_GONE)
            continue;
        if (nd->kind == NODE_CHILD)
            rc = run_nodes(nd->child, hStream);
        else if (nd->kind == NODE_COPY)
            rc = cuMemcpyDtoDAsync_v2(nd->dst, nd->src, nd->n, hStream);
        else if (nd->kind == NODE_FILL && nd->elem == 1)
            rc = cuMemsetD8Async(nd->dst, (unsigned char)nd->value, nd->n, hStream);
        else if (nd->kind == NODE_FILL && nd->elem == 2)
            rc = cuMemsetD16Async(nd->dst, (unsigned short)nd->value, nd->n, hStream);
        else if (nd->kind == NODE_FILL)
            rc = cuMemsetD32Async(nd->dst, nd->value, nd->n, hStream);
        else
            rc = ms__fk_launch_packed(nd->f, nd->grid, nd->block, nd->smem, hStream, nd->buf,
                                      nd->bytes);
    }
    return rc;
}

CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphClone)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)originalGraph, *c = NULL;
    if (!live(graphs, g))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((c = graph_copy(g, true)) == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc == CUDA_SUCCESS)
        *phGraphClone = (CUgraph)c;
    return rc;
}

/* Node i of a clone is node i of its original (graph_copy keeps positions). */
CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                        CUgraph hClonedGraph)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *c = (struct fk_graph *)hClonedGraph;
    uint64_t idx = node_pos(hOriginalNode);
    bool ok = phNode && node_of(hOriginalNode) && live(graphs, c) && idx < c->n &&
              c->nodes[idx].kind != NODE_GONE;
    if (ok)
        *phNode = (CUgraphNode)(uintptr_t)(((uint64_t)slot_of(c) + 1) << 32 | (idx + 1));
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    if (nd) {
        free(nd->buf);
        free(nd->ptrs);
        if (nd->child)
            drop(graphs, nd->child);
        memset(nd, 0, sizeof(*nd));
        nd->kind = NODE_GONE;
        struct fk_graph *g = graphs[((uint64_t)(uintptr_t)hNode >> 32) - 1];
        uint32_t idx = (uint32_t)node_pos(hNode);
        size_t w = 0;
        for (size_t k = 0; k < g->nedges; k++)
            if (g->edges[k][0] != idx && g->edges[k][1] != idx) {
                g->edges[w][0] = g->edges[k][0];
                g->edges[w][1] = g->edges[k][1];
                w++;
            }
        g->nedges = w;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The graph's edges (the fake runs nodes in the order they were added, which the edges, all
 * from an earlier node to a later one, allow). `lossy`: the CUDA 10 form, which cannot list
 * edges that carry data. */
static CUresult get_edges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data,
                          size_t *numEdges, bool lossy)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    const char *ed = getenv("MSCHED_FAKE_EDGE_DATA");
    bool with_data = ed && *ed == '1';
    pthread_mutex_lock(&ms__fk_lock);
    struct fk_graph *g = (struct fk_graph *)hGraph;
    if (!numEdges || !live(graphs, g) || (!from) != (!to)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!from) {
        *numEdges = g->nedges;
    } else if (lossy && with_data && g->nedges) {
        rc = CUDA_ERROR_LOSSY_QUERY;
    } else {
        uint64_t slot = (uint64_t)slot_of(g) + 1;
        size_t n = *numEdges < g->nedges ? *numEdges : g->nedges;
        for (size_t k = 0; k < n; k++) {
            from[k] = (CUgraphNode)(uintptr_t)(slot << 32 | (g->edges[k][0] + 1));
            to[k] = (CUgraphNode)(uintptr_t)(slot << 32 | (g->edges[k][1] + 1));
            if (data) {
                memset(&data[k], 0, sizeof(data[k]));
                data[k].type = CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
                data[k].from_port = with_data ? 1 : 0; /* any port but the default is data */
            }
        }
        *numEdges = n;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                 size_t *numEdges)
{
    return get_edges(hGraph, from, to, NULL, numEdges, true);
}

/* CUDA 12.3's form, with edge data (none). */
CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                    CUgraphEdgeData *edgeData, size_t *numEdges);
CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                    CUgraphEdgeData *edgeData, size_t *numEdges)
{
    return get_edges(hGraph, from, to, edgeData, numEdges, false);
}

/* A kernel node of a graph given new parameters (copied, as at cuGraphAddKernelNode). */
CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                               const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || !p->func || p->extra)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf = NULL;
    void **ptrs = NULL;
    size_t bytes = 0, np = 0;
    rc = pack_kernel(p, &buf, &bytes, &ptrs, &np);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    if (!nd || nd->kind != NODE_KERNEL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        take_kernel(nd, p, buf, bytes);
        free(nd->ptrs);
        nd->ptrs = ptrs;
        nd->nptrs = np;
        buf = NULL;
        ptrs = NULL;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    free(buf);
    free(ptrs);
    return rc;
}

/* The generic setter, for child graph nodes only (their own copy of the new graph). */
CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || p->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&ms__fk_lock);
    struct node *nd = node_of(hNode);
    struct fk_graph *copy = NULL;
    if (!nd || nd->kind != NODE_CHILD || !live(graphs, p->graph.graph))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((copy = graph_copy((const struct fk_graph *)p->graph.graph, true)) == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        drop(graphs, nd->child);
        nd->child = copy;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
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
    return run_nodes(e, hStream);
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
