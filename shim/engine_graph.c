/*
 * engine_graph.c - what an instantiated CUDA graph reaches, and the gate of its launches
 * (file layering: engine_int.h; contract: engine.h, "CUDA graphs").
 */
#include "shim/engine_int.h"

#include "shim/accuracy.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/hostmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct graph_reach *graph_find(const void *exec)
{
    for (size_t i = 0; i < E.ngraphs; i++)
        if (E.graphs[i].exec == exec)
            return &E.graphs[i];
    return NULL;
}

/* g cannot be bounded: the first reason is kept for the exit summary (lock held). */
static void graph_unbound(struct graph_reach *g, const char *why, int code)
{
    if (!g->unbounded && !E.graph_why[0]) {
        if (code >= 0)
            snprintf(E.graph_why, sizeof(E.graph_why), "%s %d", why, code);
        else
            snprintf(E.graph_why, sizeof(E.graph_why), "%s", why);
    }
    g->unbounded = true;
}

/* Note region id in the graph's reach for `node`: whole, or (whole false) through the chunks
 * its template predicted, appended to g->chunks by the caller. A region a node names whole
 * stays whole. A node's entries are appended together (one walk step, or a node's new
 * parameters), so duplicates are looked for only among the last entries of that node. */
static void graph_add_region_as(struct graph_reach *g, const void *node, uint32_t id, bool whole)
{
    if (g->unbounded)
        return;
    const struct ms_region *r = ms_region_get(&E.rt, id);
    for (uint32_t i = g->n; i-- > 0 && g->reg[i].node == node;)
        if (g->reg[i].id == id) {
            g->reg[i].whole = g->reg[i].whole || whole;
            return;
        }
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 8;
        void *p = ms_realloc(g->reg, cap * sizeof(*g->reg));
        if (!p) {
            graph_unbound(g, "out of memory", -1); /* cannot remember: fall back to everything */
            return;
        }
        g->reg = p;
        g->cap = cap;
    }
    g->reg[g->n].node = node;
    g->reg[g->n].id = id;
    g->reg[g->n].base = r->base;
    g->reg[g->n].size = r->size;
    g->reg[g->n].whole = whole;
    g->n++;
}

/* The chunks of region id in the graph's partial list: a binary search (lock held). */
static int graph_add_chunks_of(const struct graph_reach *g, uint32_t id, struct ms_chunk_set *out)
{
    size_t lo = 0, hi = g->nchunks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (MS_CHUNK_REGION(g->chunks[mid]) < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < g->nchunks && MS_CHUNK_REGION(g->chunks[i]) == id; i++) {
        int e = ms_chunk_set_add(out, g->chunks[i]);
        if (e)
            return e;
    }
    return MS_OK;
}

static int chunk_cmp(const void *a, const void *b)
{
    ms_chunk_id x = *(const ms_chunk_id *)a, y = *(const ms_chunk_id *)b;
    return x < y ? -1 : x > y;
}

void ms_engine_graph_begin(const void *exec)
{
    if (!ms__eng_is_active() || !exec)
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (!g && E.ngraphs == E.capgraphs) {
        size_t cap = E.capgraphs ? E.capgraphs * 2 : 16;
        void *p = ms_realloc(E.graphs, cap * sizeof(*E.graphs));
        if (p) {
            E.graphs = p;
            E.capgraphs = cap;
        }
    }
    if (!g && E.ngraphs < E.capgraphs) {
        g = &E.graphs[E.ngraphs++];
        memset(g, 0, sizeof(*g));
        g->exec = exec;
    }
    if (g) {
        g->n = 0;
        g->nchunks = 0;
        g->unbounded = false;
        E.graph_walks++;
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_launch(const void *exec, const void *node, const struct ms_shim_launch *l)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g && (!l->params_known || !l->layout || l->kind == MS_SHIM_LAUNCH_COOP)) {
        graph_unbound(g,
                      l->kind == MS_SHIM_LAUNCH_COOP ? "a cooperative kernel node"
                                                     : "a kernel node of unknown parameters",
                      -1);
    } else if (g) {
        struct ms_launch ml = {.task = 0,
                               .params = l->params,
                               .params_len = l->params_len,
                               .layout = l->layout,
                               .nlayout = l->nlayout};
        ms_chunk_set_clear(&E.scratch);
        const struct ms_tmpl_kernel *tk = E.tmpl ? ms_tmpl_find_name(E.tmpl, l->name) : NULL;
        int n = tk ? ms_predict_launch_tmpl(&E.rt, &ml, tk, &E.scratch)
                   : ms_predict_launch(&E.rt, &ml, &E.scratch);
        if (n < 0)
            graph_unbound(g, "a kernel node's prediction failed", -1);
        /* per region in the (sorted) set: whole when every chunk is named, else its chunks */
        for (size_t i = 0, j; !g->unbounded && i < E.scratch.n; i = j) {
            uint32_t id = MS_CHUNK_REGION(E.scratch.ids[i]);
            for (j = i; j < E.scratch.n && MS_CHUNK_REGION(E.scratch.ids[j]) == id; j++)
                ;
            const struct ms_region *r = ms_region_get(&E.rt, id);
            bool whole = !tk || !r || j - i == r->nchunks;
            if (!whole && ms_grow((void **)&g->chunks, &g->capchunks, g->nchunks + (j - i),
                                  sizeof(*g->chunks)) != MS_OK) {
                whole = true; /* cannot remember the chunks: the region whole */
            } else if (!whole) {
                memcpy(g->chunks + g->nchunks, E.scratch.ids + i, (j - i) * sizeof(*g->chunks));
                g->nchunks += j - i;
            }
            graph_add_region_as(g, node, id, whole);
        }
        if (tk && n >= 0 && g->nchunks > 1)
            qsort(g->chunks, g->nchunks, sizeof(*g->chunks), chunk_cmp);
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_addr(const void *exec, const void *node, uint64_t addr)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    uint32_t id;
    if (g && ms_rtable_lookup(&E.rt, 0, addr, &id, NULL) == MS_OK)
        graph_add_region_as(g, node, id, true);
    ms_unlock(&E.lock);
}

void ms_engine_graph_node_reset(const void *exec, const void *node)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    uint32_t w = 0;
    for (uint32_t i = 0; g && i < g->n; i++)
        if (g->reg[i].node != node)
            g->reg[w++] = g->reg[i];
    if (g)
        g->n = w;
    /* A template's chunks of the node stay in g->chunks: only taken for regions an entry still
     * names (more than the node needs, never less). */
    ms_unlock(&E.lock);
}

void ms_engine_graph_unbounded(const void *exec, const char *why, int code)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g)
        graph_unbound(g, why, code);
    ms_unlock(&E.lock);
}

void ms_engine_graph_forget(const void *exec, const char *why)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g && why)
        E.forget_why = why;
    if (g) {
        ms_free(g->reg);
        ms_free(g->chunks);
        *g = E.graphs[--E.ngraphs];
    }
    ms_unlock(&E.lock);
}

/* Add the chunks of every live region that overlaps [base, base + size) to out, whole (lock
 * held). Returns how many regions, or a negative MS_E_*. */
static int add_overlapping(uint64_t base, uint64_t size, struct ms_chunk_set *out)
{
    int found = 0;
    uint64_t end = base + MS_ROUND_UP(size ? size : 1, MS_GRAN);
    uint32_t id;
    for (uint64_t at = base; at < end && ms_rtable_lookup_next(&E.rt, 0, at, &id) == MS_OK;) {
        const struct ms_region *q = ms_region_get(&E.rt, id);
        if (!q || q->base >= end)
            break;
        int e = ms__eng_add_region_chunks(out, id);
        if (e)
            return e;
        found++;
        at = q->base + MS_ROUND_UP(q->size ? q->size : 1, MS_GRAN);
    }
    return found;
}

/* Nodes are looked up by pointer in a sorted list (graph_need's filter). */
static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

static bool node_in(const void *node, const void *const *nodes, size_t nn)
{
    return bsearch(&node, nodes, nn, sizeof(*nodes), ptr_cmp) != NULL;
}

/*
 * E.need = what record g (NULL: none) reaches through the top-level nodes `nodes` (nn of them,
 * ascending by address; NULL: every node), before the vmm neighbours and the pointer tables.
 * count: the launch's counters move (an entry taken as the regions now at its old range, one
 * reaching freed memory). Lock held. Returns false when the reach is unknown (E.need empty).
 */
static bool graph_need(struct graph_reach *g, const void *const *nodes, size_t nn, bool count)
{
    ms_chunk_set_clear(&E.need);
    bool unbounded = !g || g->unbounded;
    for (uint32_t i = 0; !unbounded && i < g->n; i++) {
        if (nodes && !node_in(g->reg[i].node, nodes, nn))
            continue;
        const struct ms_region *r = ms_region_get(&E.rt, g->reg[i].id);
        if (!r || !r->live || r->base != g->reg[i].base) {
            /* Freed since. The same address given back by the allocator, at least as large:
             * the node's pointers lie in the new region, which takes the entry's place. Else,
             * when the old range is now allocated again (an allocator that reuses addresses
             * hands them out in other sizes; a program that kept the graph keeps using them),
             * every live region overlapping it, whole: what the node can reach through its old
             * pointers. Nothing there at all: the reach is no longer known. */
            uint32_t id;
            r = ms_rtable_lookup(&E.rt, 0, g->reg[i].base, &id, NULL) == MS_OK
                    ? ms_region_get(&E.rt, id)
                    : NULL;
            if (r && r->base == g->reg[i].base && r->size >= g->reg[i].size) {
                g->reg[i].id = id;
                g->reg[i].whole = true; /* the template's chunks were the old region's */
            } else if (add_overlapping(g->reg[i].base, g->reg[i].size, &E.need) > 0) {
                E.graph_overlap += count;
                continue;
            } else {
                E.graph_freed += count;
                unbounded = true;
                break;
            }
        }
        if (g->reg[i].whole || !r->amap) {
            if (ms__eng_add_region_chunks(&E.need, g->reg[i].id) != MS_OK)
                unbounded = true;
        } else {
            /* the templates' chunks, and the EMPTY ones (mapped nowhere: never left out) */
            if (graph_add_chunks_of(g, g->reg[i].id, &E.need) != MS_OK)
                unbounded = true;
            for (uint32_t k = 0; !unbounded && k < r->nchunks; k++)
                if (r->chunks[k].state == MS_CS_EMPTY &&
                    ms_chunk_set_add(&E.need, MS_CHUNK_ID(g->reg[i].id, k)) != MS_OK)
                    unbounded = true;
        }
    }
    if (unbounded)
        ms_chunk_set_clear(&E.need);
    return !unbounded;
}

static int gate_graph_nodes(const void *exec, const void *const *nodes, size_t nn, bool first,
                            struct ms_shim_stream s)
{
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    E.graph_gates += first;
    E.graph_norec += first && !g;
    E.graph_unb += first && g && g->unbounded;
    E.graph_pieces += nodes != NULL;
    E.graph_split += nodes && first;
    bool unbounded = !graph_need(g, nodes, nn, true);
    if (!unbounded && g->nchunks)
        E.st.tmpl_launches++;
    int e = MS_OK;
    if (unbounded) {
        e = ms__eng_need_everything();
    } else {
        ms_chunk_set_normalize(&E.need);
        e = ms__eng_add_vmm_neighbors(&E.need);
        if (e == MS_OK)
            e = ms__eng_add_refs(&E.need);
    }
    int rc = e == MS_OK ? ms__eng_gate(&E.need, unbounded, s) : ms__eng_cuerr(e);
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_graph(const void *exec, struct ms_shim_stream s)
{
    return gate_graph_nodes(exec, NULL, 0, true, s);
}

int ms_engine_gate_graph_part(const void *exec, const void *const *nodes, size_t nn, bool first,
                              struct ms_shim_stream s)
{
    return gate_graph_nodes(exec, nodes, nn, first, s);
}

bool ms_engine_graph_oversized(const void *exec)
{
    if (!ms__eng_is_active())
        return false;
    ms_lock(&E.lock);
    bool over = graph_need(graph_find(exec), NULL, 0, false);
    ms_chunk_set_normalize(&E.need); /* nodes naming the same region name it once */
    over = over && ms_chunk_set_bytes(&E.need, &E.rt) > E.budget;
    ms_chunk_set_clear(&E.need);
    ms_unlock(&E.lock);
    return over;
}

/* An entry of a record, by node (ms_engine_graph_cut's index). */
struct by_node {
    const void *node;
    uint32_t i;
};

static int by_node_cmp(const void *a, const void *b)
{
    const struct by_node *x = a, *y = b;
    if (x->node != y->node)
        return (uintptr_t)x->node < (uintptr_t)y->node ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int ms_engine_graph_cut(const void *exec, const void *const *order, size_t n, size_t *starts,
                        size_t *npieces)
{
    *npieces = 0;
    if (!ms__eng_is_active() || !n)
        return MS_OK;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (!g || g->unbounded) {
        ms_unlock(&E.lock);
        return MS_OK;
    }
    uint64_t limit = MS_MAX(E.budget / 2, (uint64_t)MS_GRAN);
    struct by_node *idx = g->n ? ms_calloc(g->n, sizeof(*idx)) : NULL;
    uint32_t *ids = g->n ? ms_calloc(g->n, sizeof(*ids)) : NULL;   /* the piece's regions */
    uint32_t *mine = g->n ? ms_calloc(g->n, sizeof(*mine)) : NULL; /* one node's */
    if (g->n && (!idx || !ids || !mine)) {
        ms_free(idx);
        ms_free(ids);
        ms_free(mine);
        ms_unlock(&E.lock);
        return MS_E_NOMEM;
    }
    for (uint32_t i = 0; i < g->n; i++)
        idx[i] = (struct by_node){g->reg[i].node, i};
    qsort(idx, g->n, sizeof(*idx), by_node_cmp);
    size_t nids = 0, np = 0;
    uint64_t bytes = 0;
    for (size_t k = 0; k < n; k++) {
        /* this node's entries: a binary search for its first */
        size_t lo = 0, hi = g->n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if ((uintptr_t)idx[mid].node < (uintptr_t)order[k])
                lo = mid + 1;
            else
                hi = mid;
        }
        /* this node's regions (each once: mine[0..nmine)), its bytes, and the bytes of those
         * the piece does not hold yet */
        uint64_t own = 0, add = 0;
        size_t nmine = 0;
        for (size_t j = lo; j < g->n && idx[j].node == order[k]; j++) {
            uint32_t id = g->reg[idx[j].i].id;
            bool dup = false;
            for (size_t q = 0; q < nmine && !dup; q++)
                dup = mine[q] == id;
            if (dup)
                continue;
            mine[nmine++] = id;
            const struct ms_region *r = ms_region_get(&E.rt, id);
            uint64_t b = r && r->live ? r->size : g->reg[idx[j].i].size;
            own += b;
            bool held = false;
            for (size_t q = 0; q < nids && !held; q++)
                held = ids[q] == id;
            add += held ? 0 : b;
        }
        if (k == 0 || (nids && bytes + add > limit)) {
            /* a new piece, of this node's regions */
            memcpy(ids, mine, nmine * sizeof(*ids));
            nids = nmine;
            bytes = own;
            starts[np++] = k;
            continue;
        }
        for (size_t q = 0; q < nmine; q++) {
            bool held = false;
            for (size_t w = 0; w < nids && !held; w++)
                held = ids[w] == mine[q];
            if (!held)
                ids[nids++] = mine[q];
        }
        bytes += add;
    }
    ms_free(idx);
    ms_free(ids);
    ms_free(mine);
    *npieces = np;
    ms_unlock(&E.lock);
    return MS_OK;
}
