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

static void graph_add_region(struct graph_reach *g, uint32_t id)
{
    if (g->unbounded)
        return;
    const struct ms_region *r = ms_region_get(&E.rt, id);
    for (uint32_t i = 0; i < g->n; i++)
        if (g->reg[i].id == id)
            return;
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 8;
        void *p = ms_realloc(g->reg, cap * sizeof(*g->reg));
        if (!p) {
            g->unbounded = true; /* cannot remember: fall back to everything */
            return;
        }
        g->reg = p;
        g->cap = cap;
    }
    g->reg[g->n].id = id;
    g->reg[g->n].base = r->base;
    g->n++;
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
        g->unbounded = false;
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_launch(const void *exec, const struct ms_shim_launch *l)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g && (!l->params_known || !l->layout || l->kind == MS_SHIM_LAUNCH_COOP)) {
        g->unbounded = true;
    } else if (g) {
        struct ms_launch ml = {.task = 0,
                               .params = l->params,
                               .params_len = l->params_len,
                               .layout = l->layout,
                               .nlayout = l->nlayout};
        ms_chunk_set_clear(&E.scratch);
        if (ms_predict_launch(&E.rt, &ml, &E.scratch) < 0)
            g->unbounded = true;
        for (size_t i = 0; i < E.scratch.n; i++)
            if (i == 0 ||
                MS_CHUNK_REGION(E.scratch.ids[i]) != MS_CHUNK_REGION(E.scratch.ids[i - 1]))
                graph_add_region(g, MS_CHUNK_REGION(E.scratch.ids[i]));
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_addr(const void *exec, uint64_t addr)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    uint32_t id;
    if (g && ms_rtable_lookup(&E.rt, 0, addr, &id, NULL) == MS_OK)
        graph_add_region(g, id);
    ms_unlock(&E.lock);
}

void ms_engine_graph_unbounded(const void *exec)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g)
        g->unbounded = true;
    ms_unlock(&E.lock);
}

void ms_engine_graph_forget(const void *exec)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g) {
        ms_free(g->reg);
        *g = E.graphs[--E.ngraphs];
    }
    ms_unlock(&E.lock);
}

int ms_engine_gate_graph(const void *exec, struct ms_shim_stream s)
{
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    struct graph_reach *g = graph_find(exec);
    bool unbounded = !g || g->unbounded;
    for (uint32_t i = 0; g && !unbounded && i < g->n; i++) {
        const struct ms_region *r = ms_region_get(&E.rt, g->reg[i].id);
        if (!r || !r->live || r->base != g->reg[i].base)
            unbounded = true; /* freed since: the graph's reach is no longer known */
        else if (ms__eng_add_region_chunks(&E.need, g->reg[i].id) != MS_OK)
            unbounded = true;
    }
    int e = MS_OK;
    if (unbounded) {
        ms_chunk_set_clear(&E.need);
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
