/*
 * graph_pieces.c - a CUDA graph that names more than the budget, launched in pieces.
 *
 * Design
 *   A graph launch is one command: the engine can move memory before it, never inside it. A
 *   graph whose nodes together name more than the budget (XLA runs a whole training step as
 *   one graph, its command buffer) therefore ran with what did not fit on host chunks for the
 *   whole launch, its GEMMs reading their operands over PCIe again and again (jax_platform at
 *   half its footprint on an H100: 12.7x native, bench/results/gpu/compat-h100-20261207c/).
 *   Here such a graph runs as consecutive pieces, each gated on its own nodes' reach:
 *
 *   - At instantiation or update (hook_graph.c), when the engine's record of the exec names
 *     more than the budget (ms_engine_graph_oversized), the graph is cloned (cuGraphClone):
 *     the application may change or destroy its own graph, the clone stays. Its top-level
 *     nodes are paired with the application's (cuGraphNodeFindInClone), the node handles the
 *     record is tagged with and that later calls on the exec name.
 *   - Calls that change the exec's nodes (kernel, copy, memset, child graph, host, event and
 *     semaphore parameters, the generic setter, a node's enabled state) are made on the
 *     clone's node too and, when pieces are built, on the piece's exec (a disabled node is
 *     disabled again in a piece built later); a call that cannot be followed drops the clone
 *     (the launch is whole again, as before).
 *   - At the first launch the top-level nodes are put in a topological order (Kahn's, over
 *     cuGraphGetEdges_v2, ties by position) and cut into consecutive runs each naming at most
 *     half the budget (ms_engine_graph_cut). A run of a topological order is convex: every
 *     path between two of its nodes stays inside it, so a copy of the clone with every other
 *     node destroyed keeps all the ordering among the run's nodes. Each piece is such a copy,
 *     instantiated with the exec's flags.
 *   - A launch then launches the pieces in order on the launch's stream, each after its own
 *     gate: stream order puts all of piece k before piece k + 1, which is stricter than the
 *     graph's own edges and so correct, and loses only concurrency between the pieces. The
 *     driver orders the launches of one exec whatever their streams; pieces are execs of their
 *     own, so every launch of an exec that was ever split, in pieces or whole, waits for an
 *     event recorded after the launch before it (struct order), and one launch of such an exec
 *     is issued at a time.
 *
 *   Never split: graphs with memory nodes (an allocation and its free may not be split apart),
 *   with an event wait node on an event the graph itself records or an external semaphore wait
 *   beside a signal (two nodes the graph may run at once could need each other: in pieces, one
 *   after the other, they could wait forever), device-launch graphs, graphs of one top-level
 *   node, graphs whose record is unbounded, and launches into a stream capture (any mode). A
 *   failure anywhere (clone, edges, instantiation, a followed change) drops the clone and the
 *   launch is whole. MSCHED_GRAPH_PIECES=0 turns splitting off. A launch in pieces that fails
 *   at a later piece's gate has run the earlier pieces (a whole launch runs all or nothing).
 *
 * Invariants (under `lock`): a split's pieces, when built, partition its nodes in a
 * topological order; pnode[i] is node i in its piece's graph; a split whose pieces are stale
 * (built == false) has none; a split or an order is freed only when no launch is using it
 * (`launching`, `busy`; a drop meanwhile marks it `dead` and that launch frees it). Lock order:
 * `lock` is taken before the vmm and engine locks (shim/locks.h); a launch holds it to find,
 * build and mark its split, not across the gates (which may wait for a migration or for the
 * daemon's RUN while another thread of the process captures or sets up graphs).
 */
#include "shim/shim_int.h"

#include "shim/config.h"
#include "shim/engine.h"
#include "shim/locks.h"
#include "shim/shim_events.h"

#include <stdlib.h>
#include <string.h>

struct piece {
    CUgraph graph; /* a copy of the clone holding only this piece's nodes */
    CUgraphExec exec;
    size_t first, n;   /* positions in order[] */
    const void **tags; /* its nodes as the record tags them, sorted (the engine's filter) */
};

struct by_handle {
    CUgraphNode node;
    size_t i;
};

struct split {
    CUgraphExec exec; /* the application's */
    CUgraph clone;
    size_t n;                 /* top-level nodes */
    CUgraphNode *orig, *copy; /* node i: the application's handle, the clone's */
    struct by_handle *index;  /* (orig[i], i) sorted by handle: the setters' lookup */
    CUgraphNode *pnode;       /* node i in its piece's graph (built) */
    uint32_t *piece_of;       /* node i's piece (built) */
    bool *off;                /* node i disabled on the exec (cuGraphNodeSetEnabled) */
    size_t *order;            /* a topological order (built) */
    unsigned long long flags; /* the exec's instantiation flags */
    struct piece *pieces;
    size_t npieces;
    bool built, whole; /* whole: cut once into one piece, launched whole */
    /* A launch issues the pieces with the lock released (its gates may wait on a migration or
     * the daemon): what would free the split or its pieces meanwhile is left to that launch
     * (`dead`, `stale`). */
    bool launching, dead, stale;
};

/*
 * The order of an exec's launches. The driver orders the launches of one exec whatever their
 * streams; pieces are execs of their own, so every launch of an exec that was ever split, in
 * pieces or whole, waits for `done`, recorded after the launch before it. `busy`: a launch is
 * between its wait and its record (the others wait for it: one launch of an exec at a time).
 * Made with the exec's first split, kept until cuGraphExecDestroy (`dead` when that comes
 * while a launch is busy: the launch frees it).
 */
struct order {
    CUgraphExec exec;
    CUevent done; /* NULL until the first launch */
    bool recorded, busy, dead;
};

static struct ms_lock lock = MS_LOCK_INIT(MS_LK_PIECES, "pieces");
static unsigned said; /* verbose lines on graphs launched whole after all (at most 8) */
static pthread_cond_t launched = PTHREAD_COND_INITIALIZER; /* an order stopped being busy */
static struct split **splits; /* pointers: a launch keeps its split across the unlocked part */
static size_t nsplits, capsplits;
static struct order **orders;
static size_t norders, caporders;

/* With MSCHED_VERBOSE: why a graph naming more than the budget is launched whole. */
static void whole(const char *why, int code)
{
    if (__atomic_fetch_add(&said, 1, __ATOMIC_RELAXED) < 8)
        ms__shim_log("a graph naming more than the budget is launched whole: %s (%d)", why, code);
}

static struct split *find(CUgraphExec x)
{
    for (size_t i = 0; i < nsplits; i++)
        if (splits[i]->exec == x)
            return splits[i];
    return NULL;
}

static struct order *order_find(CUgraphExec x)
{
    for (size_t i = 0; i < norders; i++)
        if (orders[i]->exec == x)
            return orders[i];
    return NULL;
}

/* x's order, made when missing (NULL: out of memory). */
static struct order *order_get(CUgraphExec x)
{
    struct order *o = order_find(x);
    if (o)
        return o;
    if (norders == caporders) {
        size_t cap = caporders ? caporders * 2 : 8;
        void *q = ms_realloc(orders, cap * sizeof(*orders));
        if (!q)
            return NULL;
        orders = q;
        caporders = cap;
    }
    if ((o = ms_calloc(1, sizeof(*o))) != NULL) {
        o->exec = x;
        orders[norders++] = o;
    }
    return o;
}

static void order_free(struct order *o)
{
    if (o->done)
        MS_REAL(cuEventDestroy_v2)(o->done);
    ms_free(o);
}

static int handle_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct by_handle *)a)->node,
              y = (uintptr_t)((const struct by_handle *)b)->node;
    return x < y ? -1 : x > y;
}

/* The position of the application's node `node` in p (p->n when it is not one of them). */
static size_t index_of(const struct split *p, CUgraphNode node)
{
    struct by_handle key = {node, 0};
    const struct by_handle *h = bsearch(&key, p->index, p->n, sizeof(key), handle_cmp);
    return h ? h->i : p->n;
}

static void pieces_free(struct split *p)
{
    for (size_t k = 0; k < p->npieces; k++) {
        if (p->pieces[k].exec)
            MS_REAL(cuGraphExecDestroy)(p->pieces[k].exec);
        if (p->pieces[k].graph)
            MS_REAL(cuGraphDestroy)(p->pieces[k].graph);
        ms_free(p->pieces[k].tags);
    }
    ms_free(p->pieces);
    p->pieces = NULL;
    p->npieces = 0;
    p->built = false;
    p->whole = false;
}

/* Free split p, taken off the table (lock held, no launch using it). */
static void destroy(struct split *p)
{
    pieces_free(p);
    if (p->clone)
        MS_REAL(cuGraphDestroy)(p->clone);
    ms_free(p->orig);
    ms_free(p->index);
    ms_free(p->copy);
    ms_free(p->pnode);
    ms_free(p->piece_of);
    ms_free(p->off);
    ms_free(p->order);
    ms_free(p);
}

/* Take split p off the table and free it, or leave that to the launch using it (lock held). */
static void drop(struct split *p)
{
    for (size_t i = 0; i < nsplits; i++)
        if (splits[i] == p) {
            splits[i] = splits[--nsplits];
            break;
        }
    if (p->launching)
        p->dead = true;
    else
        destroy(p);
}

void ms__graph_pieces_atfork_child(void)
{
    ms_lock_reset(&lock);
    pthread_cond_init(&launched, NULL);
    nsplits = norders = 0; /* the parent's graphs are not the child's (their memory is left) */
}

void ms__graph_pieces_forget(CUgraphExec x)
{
    ms_lock(&lock);
    struct split *p = find(x);
    if (p)
        drop(p);
    ms_unlock(&lock);
}

void ms__graph_pieces_destroyed(CUgraphExec x)
{
    ms_lock(&lock);
    struct split *p = find(x);
    if (p)
        drop(p);
    struct order *o = order_find(x);
    for (size_t i = 0; o && i < norders; i++)
        if (orders[i] == o) {
            orders[i] = orders[--norders];
            break;
        }
    if (o && o->busy)
        o->dead = true;
    else if (o)
        order_free(o);
    ms_unlock(&lock);
}

/* Whether the graph's top-level nodes may be cut apart (*why: the reason when not). Pieces run
 * one after another, so two nodes the graph lets run at once must not need each other: an
 * allocation and its free belong together, an event wait node may wait for an event record
 * node of the same graph, an external semaphore wait for a signal the graph itself gives. */
#define MAX_RECORDS 64
static bool splittable(const CUgraphNode *nodes, size_t n, const char **why)
{
    CUevent rec[MAX_RECORDS];
    size_t nrec = 0;
    bool many = false, sem_wait = false, sem_signal = false, waits = false;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CUevent e;
        if (MS_REAL(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS) {
            *why = "cuGraphNodeGetType failed";
            return false;
        }
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC || t == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            *why = "memory allocation or free nodes";
            return false;
        }
        if (t == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
            if (nrec < MAX_RECORDS &&
                MS_REAL(cuGraphEventRecordNodeGetEvent)(nodes[i], &e) == CUDA_SUCCESS)
                rec[nrec++] = e;
            else
                many = true;
        }
        waits = waits || t == CU_GRAPH_NODE_TYPE_WAIT_EVENT;
        sem_wait = sem_wait || t == CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT;
        sem_signal = sem_signal || t == CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL;
    }
    if (sem_wait && sem_signal) {
        *why = "external semaphore wait and signal nodes";
        return false;
    }
    for (size_t i = 0; waits && (nrec || many) && i < n; i++) {
        CUgraphNodeType t;
        CUevent e;
        if (MS_REAL(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS ||
            t != CU_GRAPH_NODE_TYPE_WAIT_EVENT)
            continue;
        bool mine = many || MS_REAL(cuGraphEventWaitNodeGetEvent)(nodes[i], &e) != CUDA_SUCCESS;
        for (size_t k = 0; !mine && k < nrec; k++)
            mine = rec[k] == e;
        if (mine) {
            *why = "an event wait node on an event the graph records";
            return false;
        }
    }
    return true;
}

void ms__graph_pieces_track(CUgraphExec x, CUgraph g)
{
    ms__graph_pieces_forget(x);
    if (!ms__shim_opt(MS_OPT_GRAPH_PIECES) || !ms_engine_graph_oversized(x))
        return;
    unsigned long long flags = 0;
    cuuint64_t f64 = 0;
    if (MS_REAL(cuGraphExecGetFlags)(x, &f64) == CUDA_SUCCESS)
        flags = f64;
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
        whole("instantiated for device launch", -1);
        return;
    }
    flags &= CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY; /* the rest: memory nodes, upload */
    size_t n = 0;
    CUresult e = MS_REAL(cuGraphGetNodes)(g, NULL, &n);
    if (e != CUDA_SUCCESS || n < 2) {
        whole(e ? "cuGraphGetNodes failed" : "one top-level node", e ? (int)e : (int)n);
        return;
    }
    struct split s = {.exec = x, .n = n, .flags = flags};
    struct split *heap = ms_calloc(1, sizeof(*heap));
    s.orig = ms_calloc(n, sizeof(*s.orig));
    s.copy = ms_calloc(n, sizeof(*s.copy));
    s.pnode = ms_calloc(n, sizeof(*s.pnode));
    s.piece_of = ms_calloc(n, sizeof(*s.piece_of));
    s.order = ms_calloc(n, sizeof(*s.order));
    s.index = ms_calloc(n, sizeof(*s.index));
    s.off = ms_calloc(n, sizeof(*s.off));
    bool ok = heap && s.orig && s.copy && s.pnode && s.piece_of && s.order && s.index && s.off &&
              MS_REAL(cuGraphGetNodes)(g, s.orig, &n) == CUDA_SUCCESS && n == s.n;
    for (size_t i = 0; ok && i < n; i++)
        s.index[i] = (struct by_handle){s.orig[i], i};
    if (ok)
        qsort(s.index, n, sizeof(*s.index), handle_cmp);
    const char *why = NULL;
    if (ok && !splittable(s.orig, n, &why)) {
        whole(why, -1);
        ok = false;
    }
    if (ok && (e = MS_REAL(cuGraphClone)(&s.clone, g)) != CUDA_SUCCESS) {
        whole("cuGraphClone failed", (int)e);
        ok = false;
    }
    for (size_t i = 0; ok && i < n; i++)
        ok = MS_REAL(cuGraphNodeFindInClone)(&s.copy[i], s.orig[i], s.clone) == CUDA_SUCCESS;
    ms_lock(&lock);
    if (ok && nsplits == capsplits) {
        size_t cap = capsplits ? capsplits * 2 : 8;
        void *q = ms_realloc(splits, cap * sizeof(*splits));
        ok = q != NULL;
        if (ok) {
            splits = q;
            capsplits = cap;
        }
    }
    if (ok && !order_get(x))
        ok = false;
    if (ok) {
        struct split *old = find(x); /* a concurrent track of the same exec */
        if (old)
            drop(old);
        *heap = s;
        splits[nsplits++] = heap;
    } else {
        ms_free(heap);
        if (s.clone)
            MS_REAL(cuGraphDestroy)(s.clone);
        ms_free(s.orig);
        ms_free(s.index);
        ms_free(s.copy);
        ms_free(s.pnode);
        ms_free(s.piece_of);
        ms_free(s.off);
        ms_free(s.order);
    }
    ms_unlock(&lock);
}

/* Update u made on graph node n (of the clone) or, with x, on node n of exec x. */
static CUresult apply(const struct ms_graph_update *u, CUgraphExec x, CUgraphNode n)
{
    switch (u->kind) {
    case MS_GRAPH_UPD_KERNEL:
        return x ? MS_REAL(cuGraphExecKernelNodeSetParams_v2)(x, n, u->p)
                 : MS_REAL(cuGraphKernelNodeSetParams_v2)(n, u->p);
    case MS_GRAPH_UPD_COPY:
        return x ? MS_REAL(cuGraphExecMemcpyNodeSetParams)(x, n, u->p, u->ctx)
                 : MS_REAL(cuGraphMemcpyNodeSetParams)(n, u->p);
    case MS_GRAPH_UPD_SET:
        return x ? MS_REAL(cuGraphExecMemsetNodeSetParams)(x, n, u->p, u->ctx)
                 : MS_REAL(cuGraphMemsetNodeSetParams)(n, u->p);
    case MS_GRAPH_UPD_CHILD: {
        /* no graph-level setter of its own: the generic one (a refusal drops the split) */
        CUgraphNodeParams np;
        memset(&np, 0, sizeof(np));
        np.type = CU_GRAPH_NODE_TYPE_GRAPH;
        np.graph.graph = (CUgraph)u->p;
        return x ? MS_REAL(cuGraphExecChildGraphNodeSetParams)(x, n, (CUgraph)u->p)
                 : MS_REAL(cuGraphNodeSetParams)(n, &np);
    }
    case MS_GRAPH_UPD_GENERIC:
        return x ? MS_REAL(cuGraphExecNodeSetParams)(x, n, (CUgraphNodeParams *)u->p)
                 : MS_REAL(cuGraphNodeSetParams)(n, (CUgraphNodeParams *)u->p);
    case MS_GRAPH_UPD_HOST:
        return x ? MS_REAL(cuGraphExecHostNodeSetParams)(x, n, u->p)
                 : MS_REAL(cuGraphHostNodeSetParams)(n, u->p);
    case MS_GRAPH_UPD_RECORD:
        return x ? MS_REAL(cuGraphExecEventRecordNodeSetEvent)(x, n, (CUevent)u->p)
                 : MS_REAL(cuGraphEventRecordNodeSetEvent)(n, (CUevent)u->p);
    case MS_GRAPH_UPD_WAIT:
        return x ? MS_REAL(cuGraphExecEventWaitNodeSetEvent)(x, n, (CUevent)u->p)
                 : MS_REAL(cuGraphEventWaitNodeSetEvent)(n, (CUevent)u->p);
    case MS_GRAPH_UPD_SIGNAL:
        return x ? MS_REAL(cuGraphExecExternalSemaphoresSignalNodeSetParams)(x, n, u->p)
                 : MS_REAL(cuGraphExternalSemaphoresSignalNodeSetParams)(n, u->p);
    case MS_GRAPH_UPD_SEMWAIT:
        return x ? MS_REAL(cuGraphExecExternalSemaphoresWaitNodeSetParams)(x, n, u->p)
                 : MS_REAL(cuGraphExternalSemaphoresWaitNodeSetParams)(n, u->p);
    case MS_GRAPH_UPD_ENABLED:
        /* an exec's state only: kept in `off` for the pieces built later */
        return x ? MS_REAL(cuGraphNodeSetEnabled)(x, n, u->on) : CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

void ms__graph_pieces_update(CUgraphExec x, CUgraphNode node, const struct ms_graph_update *u)
{
    ms_lock(&lock);
    struct split *p = find(x);
    size_t i = p ? index_of(p, node) : 0;
    CUresult e = CUDA_SUCCESS;
    if (p && i < p->n && u->kind == MS_GRAPH_UPD_ENABLED)
        p->off[i] = !u->on;
    if (p && (i == p->n || (e = apply(u, NULL, p->copy[i])) != CUDA_SUCCESS)) {
        whole(i == p->n ? "new parameters for a node not in the clone"
                        : "new node parameters not taken by the clone",
              (int)e);
        drop(p);
    } else if (p && p->built && !p->whole &&
               apply(u, p->pieces[p->piece_of[i]].exec, p->pnode[i]) != CUDA_SUCCESS) {
        if (p->launching)
            p->stale = true; /* freed when that launch ends */
        else
            pieces_free(p); /* built again at the next launch, from the clone */
    }
    ms_unlock(&lock);
}

/* The graph's edges (CUDA 12.3's call, with their data: without it the driver refuses to list
 * edges that carry any, CUDA_ERROR_LOSSY_QUERY; the data itself is not needed, as a piece
 * keeps its edges and pieces run in stream order). */
static CUresult edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data,
                      size_t *n)
{
    PFN_cuGraphGetEdges_v12030 v2 =
        (PFN_cuGraphGetEdges_v12030)ms__shim_real(MS_SYM_cuGraphGetEdges_v2);
    CUresult e = v2(g, from, to, data, n);
    if (e == CUDA_ERROR_NOT_FOUND || e == CUDA_ERROR_NOT_SUPPORTED)
        e = MS_REAL(cuGraphGetEdges)(g, from, to, n); /* a driver older than 12.3 */
    return e;
}

/* p->order = a topological order of the clone's nodes (ties by position). Returns a
 * CUresult (CUDA_ERROR_INVALID_VALUE for an edge or a cycle it cannot place). */
static CUresult topo(struct split *p)
{
    size_t ne = 0;
    CUresult e = edges(p->clone, NULL, NULL, NULL, &ne);
    if (e != CUDA_SUCCESS)
        return e;
    CUgraphNode *from = ne ? ms_calloc(ne, sizeof(*from)) : NULL;
    CUgraphNode *to = ne ? ms_calloc(ne, sizeof(*to)) : NULL;
    CUgraphEdgeData *data = ne ? ms_calloc(ne, sizeof(*data)) : NULL;
    uint32_t *indeg = ms_calloc(p->n, sizeof(*indeg));
    size_t *fi = ne ? ms_calloc(ne, sizeof(*fi)) : NULL,
           *ti = ne ? ms_calloc(ne, sizeof(*ti)) : NULL;
    bool ok = indeg && (!ne || (from && to && data && fi && ti));
    size_t got = ne;
    if (!ok)
        e = CUDA_ERROR_OUT_OF_MEMORY;
    if (ok && ne) {
        e = edges(p->clone, from, to, data, &got);
        ok = e == CUDA_SUCCESS && got == ne;
    }
    struct by_handle *cix = ok ? ms_calloc(p->n, sizeof(*cix)) : NULL; /* the clone's nodes */
    ok = ok && cix;
    for (size_t i = 0; ok && i < p->n; i++)
        cix[i] = (struct by_handle){p->copy[i], i};
    if (ok)
        qsort(cix, p->n, sizeof(*cix), handle_cmp);
    for (size_t k = 0; ok && k < ne; k++) {
        struct by_handle kf = {from[k], 0}, kt = {to[k], 0};
        const struct by_handle *hf = bsearch(&kf, cix, p->n, sizeof(kf), handle_cmp),
                               *ht = bsearch(&kt, cix, p->n, sizeof(kt), handle_cmp);
        ok = hf && ht;
        if (ok) {
            fi[k] = hf->i;
            ti[k] = ht->i;
            indeg[ti[k]]++;
        }
    }
    ms_free(cix);
    if (!ok && e == CUDA_SUCCESS)
        e = CUDA_ERROR_INVALID_VALUE;
    /* Kahn's with a min-heap of ready positions (the smallest first: nodes stay near the order
     * they were recorded in, which is the order they touch memory in) over the edges sorted
     * by their source (first[i]..first[i + 1] are node i's). */
    size_t *first = ok ? ms_calloc(p->n + 1, sizeof(*first)) : NULL;
    size_t *succ = ok && ne ? ms_calloc(ne, sizeof(*succ)) : NULL;
    size_t *heap = ok ? ms_calloc(p->n, sizeof(*heap)) : NULL;
    ok = ok && first && heap && (!ne || succ);
    for (size_t k = 0; ok && k < ne; k++)
        first[fi[k] + 1]++;
    for (size_t i = 0; ok && i < p->n; i++)
        first[i + 1] += first[i];
    for (size_t k = 0; ok && k < ne; k++)
        succ[first[fi[k]]++] = ti[k]; /* first[i] ends as i's end: shifted back below */
    for (size_t i = p->n; ok && i > 0; i--)
        first[i] = first[i - 1];
    if (ok)
        first[0] = 0;
    size_t nh = 0, done = 0;
    for (size_t i = 0; ok && i < p->n; i++)
        if (!indeg[i])
            heap[nh++] = i; /* ascending: already a heap */
    while (ok && nh) {
        size_t i = heap[0];
        heap[0] = heap[--nh];
        for (size_t c = 0, m; (m = 2 * c + 1) < nh; c = m) { /* sift down */
            if (m + 1 < nh && heap[m + 1] < heap[m])
                m++;
            if (heap[c] <= heap[m])
                break;
            size_t t = heap[c];
            heap[c] = heap[m];
            heap[m] = t;
        }
        p->order[done++] = i;
        for (size_t k = first[i]; k < first[i + 1]; k++)
            if (--indeg[succ[k]] == 0) {
                size_t c = nh++;
                heap[c] = succ[k];
                while (c && heap[(c - 1) / 2] > heap[c]) { /* sift up */
                    size_t t = heap[c];
                    heap[c] = heap[(c - 1) / 2];
                    heap[(c - 1) / 2] = t;
                    c = (c - 1) / 2;
                }
            }
    }
    if (ok && done < p->n) {
        ok = false; /* a cycle: not a graph the driver accepts */
        e = CUDA_ERROR_INVALID_VALUE;
    }
    ms_free(first);
    ms_free(succ);
    ms_free(heap);
    ms_free(from);
    ms_free(to);
    ms_free(data);
    ms_free(indeg);
    ms_free(fi);
    ms_free(ti);
    return ok ? CUDA_SUCCESS : (e != CUDA_SUCCESS ? e : CUDA_ERROR_OUT_OF_MEMORY);
}

static int tag_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Build p's pieces (lock held). false: the split cannot be made (drop it). */
static bool build(struct split *p)
{
    CUresult e = topo(p);
    if (e != CUDA_SUCCESS) {
        whole("no topological order of its nodes", (int)e);
        return false;
    }
    const void **tags = ms_calloc(p->n, sizeof(*tags));
    size_t *starts = ms_calloc(p->n, sizeof(*starts));
    size_t np = 0;
    bool ok = tags && starts;
    for (size_t k = 0; ok && k < p->n; k++)
        tags[k] = p->orig[p->order[k]];
    ok = ok && ms_engine_graph_cut(p->exec, tags, p->n, starts, &np) == MS_OK;
    if (ok && np == 0) {
        whole("its reach is unknown now", -1);
        ok = false;
    }
    if (ok && np == 1) {
        p->whole = p->built = true; /* fits now: launched whole */
        ms_free(tags);
        ms_free(starts);
        return true;
    }
    p->pieces = ok ? ms_calloc(np, sizeof(*p->pieces)) : NULL;
    ok = ok && p->pieces;
    if (ok)
        p->npieces = np;
    for (size_t k = 0; ok && k < np; k++) {
        struct piece *q = &p->pieces[k];
        q->first = starts[k];
        q->n = (k + 1 < np ? starts[k + 1] : p->n) - q->first;
        q->tags = ms_calloc(q->n, sizeof(*q->tags));
        ok = q->tags && MS_REAL(cuGraphClone)(&q->graph, p->clone) == CUDA_SUCCESS;
        for (size_t j = 0; ok && j < p->n; j++) {
            size_t i = p->order[j];
            bool in = j >= q->first && j < q->first + q->n;
            CUgraphNode c;
            ok = MS_REAL(cuGraphNodeFindInClone)(&c, p->copy[i], q->graph) == CUDA_SUCCESS;
            if (ok && in) {
                p->pnode[i] = c;
                p->piece_of[i] = (uint32_t)k;
                q->tags[j - q->first] = p->orig[i];
            } else if (ok) {
                ok = MS_REAL(cuGraphDestroyNode)(c) == CUDA_SUCCESS;
            }
        }
        if (ok)
            qsort(q->tags, q->n, sizeof(*q->tags), tag_cmp);
        e = ok ? MS_REAL(cuGraphInstantiateWithFlags)(&q->exec, q->graph, p->flags) : CUDA_SUCCESS;
        if (e != CUDA_SUCCESS) {
            whole("a piece's instantiation failed", (int)e);
            ok = false;
        }
        /* nodes the application disabled on its exec stay disabled in the piece */
        for (size_t j = q->first; ok && j < q->first + q->n; j++)
            if (p->off[p->order[j]] && (e = MS_REAL(cuGraphNodeSetEnabled)(
                                            q->exec, p->pnode[p->order[j]], 0)) != CUDA_SUCCESS) {
                whole("a disabled node could not be disabled in its piece", (int)e);
                ok = false;
            }
    }
    ms_free(tags);
    ms_free(starts);
    if (!ok) {
        pieces_free(p);
        return false;
    }
    p->built = true;
    return true;
}

/* Stream s waits for event e, or e is recorded on s (the launch's flavour of stream). */
static CUresult wait_on(struct ms_shim_stream s, CUevent e)
{
    return s.per_thread ? MS_REAL(cuStreamWaitEvent_ptsz)((CUstream)s.handle, e, 0)
                        : MS_REAL(cuStreamWaitEvent)((CUstream)s.handle, e, 0);
}

static CUresult record_on(struct ms_shim_stream s, CUevent e)
{
    return s.per_thread ? MS_REAL(cuEventRecord_ptsz)(e, (CUstream)s.handle)
                        : MS_REAL(cuEventRecord)(e, (CUstream)s.handle);
}

/* s captures (any mode; the shim's table holds only the modes that forbid synchronizing). */
static bool capturing(struct ms_shim_stream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult e = s.per_thread ? MS_REAL(cuStreamIsCapturing_ptsz)((CUstream)s.handle, &st)
                              : MS_REAL(cuStreamIsCapturing)((CUstream)s.handle, &st);
    return e != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool ms__graph_pieces_launch(CUgraphExec x, struct ms_shim_stream s,
                             CUresult (*real)(CUgraphExec, CUstream), CUresult *rc,
                             struct ms_graph_whole *w)
{
    w->order = NULL;
    /* A capture records the launch, it does not run it: the whole graph goes in, neither
     * split nor ordered (a wait on an event recorded outside the capture would break it). */
    if (!ms_engine_active() || ms__shim_capture_open())
        return false;
    ms_lock(&lock);
    struct order *o;
    while ((o = order_find(x)) != NULL && o->busy)
        ms_lock_wait(&launched, &lock); /* one launch of an exec at a time */
    if (!o || capturing(s) ||
        (!o->done && MS_REAL(cuEventCreate)(&o->done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)) {
        ms_unlock(&lock); /* never split (the usual case), captured, or no event: whole */
        return false;
    }
    o->busy = true;
    bool wait = o->recorded;
    struct split *p = find(x);
    if (p && !p->built && !build(p)) {
        drop(p);
        p = NULL;
    }
    if (!p || p->whole) {
        /* whole, after the launch before it; its record comes at ms__graph_pieces_whole_end */
        w->order = o;
        w->stream = s.handle;
        w->per_thread = s.per_thread;
        ms_unlock(&lock);
        if (wait)
            (void)wait_on(s, o->done);
        return false;
    }
    p->launching = true;
    ms_unlock(&lock);
    /* The pieces and their gates without the lock (a gate may wait for the daemon's RUN while
     * this process's other threads capture or set up graphs). */
    *rc = wait ? wait_on(s, o->done) : CUDA_SUCCESS;
    for (size_t k = 0; k < p->npieces && *rc == CUDA_SUCCESS; k++) {
        struct piece *q = &p->pieces[k];
        int gate = ms_shim_on_graph_piece(x, q->tags, q->n, k == 0, s);
        *rc = gate ? (CUresult)gate : real(q->exec, (CUstream)s.handle);
        ms__shim_gate_end(&gate);
    }
    bool recorded = record_on(s, o->done) == CUDA_SUCCESS;
    ms_lock(&lock);
    o->recorded = recorded; /* not recorded: the next launch does not wait on an old record */
    o->busy = false;
    if (o->dead)
        order_free(o);
    p->launching = false;
    if (p->dead) {
        destroy(p);
    } else if (p->stale) {
        pieces_free(p);
        p->stale = false;
    }
    pthread_cond_broadcast(&launched);
    ms_unlock(&lock);
    return true;
}

void ms__graph_pieces_whole_end(struct ms_graph_whole *w)
{
    struct order *o = w->order;
    if (!o)
        return;
    ms_lock(&lock);
    o->recorded =
        record_on((struct ms_shim_stream){w->stream, w->per_thread}, o->done) == CUDA_SUCCESS;
    o->busy = false;
    if (o->dead)
        order_free(o);
    pthread_cond_broadcast(&launched);
    ms_unlock(&lock);
}
