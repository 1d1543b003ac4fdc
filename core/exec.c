/*
 * exec.c - carries a migration plan out through the GPU seam (contract: exec.h).
 *
 * Two FIFOs of copies in flight: evictions (device->host on MS_STREAM_OUT) and populations
 * (host->device on MS_STREAM_IN). An eviction's device memory is reusable only once its copy has
 * completed and the chunk is unmapped ("settled"); a population needs device memory before it
 * maps. So before a population that would exceed the budget, the oldest evictions are settled
 * one by one until it fits. Pipelined, all evictions are queued before the first population, so
 * the device->host stream runs back to back while the host->device stream follows one chunk
 * behind: the two-direction pipeline. Not pipelined, every copy settles at once, in plan order.
 *
 * Always-mapped regions (region.amap, region.h I9): a chunk off the device is mapped to its
 * host chunk, so the seam's map and unmap swap the device and the host chunk at the chunk's
 * address (the descriptor carries the host chunk token). An eviction needs a host chunk: the
 * victims that have none get theirs in one host_new call before any copy is issued (creating
 * one pins host memory, which is slow: edges create them ahead of need where they can).
 *
 * A region's host chunks may outlive it (ms_exec_detach_host) and start another region
 * (ms_exec_attach_host): an application VMM handle keeps its contents between mappings.
 *
 * Failure rule: the first error is kept and stops new steps; everything in flight is still
 * settled so no chunk is left IN/OUT and no mapping is leaked.
 */
#include "exec.h"

#include <string.h>

struct pend {
    ms_chunk_id id;
    uint64_t event;
};

struct fifo {
    struct pend *v;
    size_t head, tail;
};

struct ctx {
    struct ms_rtable *rt;
    const struct ms_gpu_ops *gpu;
    const struct ms_exec_opts *opts;
    struct ms_exec_stats *st;
    struct fifo out, in, drops;
    /* scratch sized to the plan, allocated once per call */
    ms_chunk_id *ids, *filled;
    size_t nfilled;
    uint64_t *hashes;
    struct ms_gpu_chunk *gdesc;
};

static struct ms_gpu_chunk describe(struct ms_rtable *rt, ms_chunk_id id)
{
    struct ms_region *r = ms_region_get(rt, MS_CHUNK_REGION(id));
    struct ms_chunk *c = &r->chunks[MS_CHUNK_INDEX(id)];
    uint64_t off = ms_region_chunk_offset(r, MS_CHUNK_INDEX(id));
    struct ms_gpu_chunk g = {
        .va = r->base + off,
        .bytes = c->bytes,
        .host = r->host ? (char *)r->host + off : NULL,
        .phys = c->phys,
        .hchunk = r->amap ? c->host : 0,
        .bare = c->bare != 0,
    };
    return g;
}

static void set_bare(struct ms_rtable *rt, struct ms_chunk *c, bool on)
{
    if (c->bare == on)
        return;
    c->bare = on;
    if (on)
        rt->bare++;
    else
        rt->bare--;
}

/* Give every always-mapped victim of the plan that has no host chunk one, in one seam call. */
static int host_chunks_for_victims(struct ctx *x, const struct ms_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->steps[i].op != MS_STEP_EVICT)
            continue;
        ms_chunk_id id = p->steps[i].chunk;
        const struct ms_region *r = ms_region_get(x->rt, MS_CHUNK_REGION(id));
        const struct ms_chunk *c = ms_chunk_get(x->rt, id);
        if (!r->amap || c->host || !ms_chunk_state_ready((enum ms_chunk_state)c->state))
            continue;
        bool seen = false; /* a plan names a chunk once, but do not trust it */
        for (size_t k = 0; k < n && !seen; k++)
            seen = x->ids[k] == id;
        if (!seen) {
            x->ids[n] = id;
            x->gdesc[n] = describe(x->rt, id);
            n++;
        }
    }
    if (!n)
        return MS_OK;
    if (!x->gpu->host_new)
        return MS_E_INVAL; /* an always-mapped region on a backend without host chunks */
    int e = x->gpu->host_new(x->gpu->impl, x->gdesc, n);
    if (e)
        return e;
    for (size_t k = 0; k < n; k++) {
        ms_chunk_get(x->rt, x->ids[k])->host = x->gdesc[k].hchunk;
        x->st->host_chunks++;
        x->st->host_chunk_bytes += x->gdesc[k].bytes;
    }
    return MS_OK;
}

/* The seam's calls, each timed into its phase of ms_exec_stats (exec.h). */
static uint64_t clock_ns(const struct ctx *x)
{
    return x->gpu->now_ns(x->gpu->impl);
}

static int g_map(struct ctx *x, struct ms_gpu_chunk *g)
{
    uint64_t t = clock_ns(x);
    int e = x->gpu->map(x->gpu->impl, g, 1);
    x->st->map_ns += clock_ns(x) - t;
    return e;
}

static int g_unmap(struct ctx *x, struct ms_gpu_chunk *g)
{
    uint64_t t = clock_ns(x);
    int e = x->gpu->unmap(x->gpu->impl, g, 1);
    x->st->unmap_ns += clock_ns(x) - t;
    return e;
}

static int g_wait(struct ctx *x, uint64_t event)
{
    uint64_t t = clock_ns(x);
    int e = x->gpu->wait(x->gpu->impl, event);
    x->st->wait_ns += clock_ns(x) - t;
    return e;
}

/* Queue one copy on stream s and record the event that marks its end in *ev. */
static int g_issue(struct ctx *x, enum ms_stream s, const struct ms_gpu_chunk *g, uint64_t *ev)
{
    uint64_t t = clock_ns(x);
    int e = x->gpu->copy(x->gpu->impl, s, g, 1);
    if (e == MS_OK) {
        x->st->copies++;
        e = x->gpu->record(x->gpu->impl, s, ev);
    }
    x->st->issue_ns += clock_ns(x) - t;
    return e;
}

static int unmap_one(struct ctx *x, ms_chunk_id id)
{
    struct ms_gpu_chunk g = describe(x->rt, id);
    int e = g_unmap(x, &g);
    if (e == MS_OK)
        x->st->unmaps++;
    return e;
}

/* The unmap that ends an eviction or a drop: with defer_host_map an always-mapped chunk is
 * left bare (its host chunk mapped later by ms_exec_map_bare). */
static int unmap_out(struct ctx *x, ms_chunk_id id)
{
    struct ms_gpu_chunk g = describe(x->rt, id);
    g.bare = x->opts->defer_host_map && g.hchunk;
    int e = g_unmap(x, &g);
    if (e == MS_OK) {
        x->st->unmaps++;
        if (g.bare) {
            set_bare(x->rt, ms_chunk_get(x->rt, id), true);
            x->st->bare++;
        }
    }
    return e;
}

/* Settle the oldest eviction in flight. */
static int settle_out(struct ctx *x)
{
    struct pend pd = x->out.v[x->out.head++];
    struct ms_chunk *c = ms_chunk_get(x->rt, pd.id);
    int e = g_wait(x, pd.event);
    x->gpu->release_event(x->gpu->impl, pd.event);
    if (e == MS_OK)
        e = unmap_out(x, pd.id);
    if (e != MS_OK) {
        /* Still mapped and holding the data: back to DIRTY, resident. */
        ms_chunk_apply(x->rt, pd.id, MS_CE_EVICT_FAIL);
        return e;
    }
    x->st->bytes_out += c->bytes;
    return ms_chunk_apply(x->rt, pd.id, MS_CE_EVICT_DONE);
}

static int settle_in(struct ctx *x)
{
    struct pend pd = x->in.v[x->in.head++];
    struct ms_chunk *c = ms_chunk_get(x->rt, pd.id);
    int e = g_wait(x, pd.event);
    x->gpu->release_event(x->gpu->impl, pd.event);
    if (e != MS_OK) {
        int u = unmap_one(x, pd.id);
        if (u == MS_OK) {
            ms_chunk_apply(x->rt, pd.id, MS_CE_POP_FAIL);
        } else {
            /* Cannot unmap: keep it resident, contents unknown, marked DIRTY. */
            ms_chunk_apply(x->rt, pd.id, MS_CE_POP_DONE);
            ms_chunk_apply(x->rt, pd.id, MS_CE_TOUCH);
        }
        return e;
    }
    x->st->bytes_in += c->bytes;
    e = ms_chunk_apply(x->rt, pd.id, MS_CE_POP_DONE);
    if (e == MS_OK)
        x->filled[x->nfilled++] = pd.id;
    return e;
}

/*
 * Hash a batch of chunks in one seam call (one synchronization, not one per chunk: a hash that
 * waits inside the eviction pass would serialize the two copy directions). Returns the number
 * of hashes written to out, 0 when hashing is off or failed (failure only costs copies).
 */
static size_t hash_batch(struct ctx *x, const ms_chunk_id *ids, size_t n, uint64_t *out)
{
    if (!n || !x->opts->hash_clean || !x->gpu->hash)
        return 0;
    for (size_t i = 0; i < n; i++)
        x->gdesc[i] = describe(x->rt, ids[i]);
    uint64_t t = clock_ns(x);
    int e = x->gpu->hash(x->gpu->impl, x->gdesc, n, out);
    x->st->hash_ns += clock_ns(x) - t;
    if (e != MS_OK)
        return 0;
    x->st->hashes += n;
    return n;
}

/* Before any eviction is issued: mark (chunk.mark = 1) the DIRTY victims (and, verifying, the
 * CLEAN ones) whose GPU hash still equals the one taken at population, so eviction drops them
 * instead of copying. */
static void find_unchanged(struct ctx *x, const struct ms_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        struct ms_chunk *c = ms_chunk_get(x->rt, p->steps[i].chunk);
        c->mark = 0;
        bool suspect =
            c->state == MS_CS_DIRTY || (x->opts->verify_clean && c->state == MS_CS_CLEAN);
        if (p->steps[i].op == MS_STEP_EVICT && suspect && c->hash != 0 &&
            !ms_chunk_pins(&x->rt->regions[MS_CHUNK_REGION(p->steps[i].chunk)], c))
            x->ids[n++] = p->steps[i].chunk;
    }
    if (hash_batch(x, x->ids, n, x->hashes) != n)
        return;
    for (size_t i = 0; i < n; i++) {
        struct ms_chunk *c = ms_chunk_get(x->rt, x->ids[i]);
        c->mark = x->hashes[i] == c->hash;
    }
}

/* After all populations settled: record each new CLEAN chunk's reference hash. */
static void hash_filled(struct ctx *x)
{
    if (hash_batch(x, x->filled, x->nfilled, x->hashes) != x->nfilled)
        return;
    for (size_t i = 0; i < x->nfilled; i++) {
        struct ms_chunk *c = ms_chunk_get(x->rt, x->filled[i]);
        if (c->state == MS_CS_CLEAN)
            c->hash = x->hashes[i];
    }
}

static int drop(struct ctx *x, ms_chunk_id id)
{
    struct ms_chunk *c = ms_chunk_get(x->rt, id);
    int e = unmap_out(x, id);
    if (e)
        return e;
    x->st->bytes_dropped += c->bytes;
    return ms_chunk_apply(x->rt, id, MS_CE_DROP);
}

#define MARK_DROP 2 /* chunk.mark of a chunk whose drop is pending */

/* Carry out the oldest pending drop that was not cancelled; MS_OK if none is left. */
static int next_drop(struct ctx *x)
{
    while (x->drops.head < x->drops.tail) {
        ms_chunk_id id = x->drops.v[x->drops.head++].id;
        struct ms_chunk *c = ms_chunk_get(x->rt, id);
        if (c->mark == MARK_DROP) {
            c->mark = 0;
            return drop(x, id);
        }
    }
    return MS_OK;
}

/* Free device memory for a population: a pending drop first (no wait), else the oldest copy. */
static int free_one(struct ctx *x)
{
    uint64_t before = x->rt->resident_bytes;
    int e = next_drop(x);
    if (e || x->rt->resident_bytes < before)
        return e;
    if (x->out.head < x->out.tail)
        return settle_out(x);
    return MS_OK;
}

static int evict(struct ctx *x, ms_chunk_id id)
{
    struct ms_chunk *c = ms_chunk_get(x->rt, id);
    if (!c)
        return MS_E_INVAL;
    if (c->state == MS_CS_HOST || c->state == MS_CS_EMPTY)
        return MS_OK; /* already out */
    if (c->state != MS_CS_CLEAN && c->state != MS_CS_DIRTY)
        return MS_E_BUSY;
    if (ms_chunk_pins(&x->rt->regions[MS_CHUNK_REGION(id)], c))
        return MS_E_BUSY;

    /* mark: find_unchanged. A backend whose eviction is the move itself never drops. */
    bool clean = !x->gpu->copy_to_evict &&
                 ((c->state == MS_CS_CLEAN && !x->opts->verify_clean) || c->mark == 1);
    if (clean) {
        if (x->opts->pipelined) {
            /* Dropped when a population needs the room (or at the end): the unmaps then
             * overlap the copies instead of delaying the first population. */
            c->mark = MARK_DROP;
            x->drops.v[x->drops.tail++] = (struct pend){.id = id, .event = 0};
            return MS_OK;
        }
        return drop(x, id);
    }

    /* Moving a clean chunk: from the state machine's side it is a dirty one (TOUCH is legal
     * from CLEAN and the only way to OUT is from DIRTY). */
    if (c->state == MS_CS_CLEAN) {
        int e = ms_chunk_apply(x->rt, id, MS_CE_TOUCH);
        if (e)
            return e;
    }
    struct ms_gpu_chunk g = describe(x->rt, id);
    uint64_t ev = 0;
    int e = g_issue(x, MS_STREAM_OUT, &g, &ev);
    if (e)
        return e; /* a copy may still run; the chunk stays mapped and DIRTY: harmless */
    e = ms_chunk_apply(x->rt, id, MS_CE_EVICT_START);
    if (e) {
        g_wait(x, ev);
        x->gpu->release_event(x->gpu->impl, ev);
        return e;
    }
    c->event = ev;
    x->out.v[x->out.tail++] = (struct pend){.id = id, .event = ev};
    if (!x->opts->pipelined)
        return settle_out(x);
    return MS_OK;
}

static int populate(struct ctx *x, ms_chunk_id id, uint64_t budget)
{
    struct ms_chunk *c = ms_chunk_get(x->rt, id);
    if (!c)
        return MS_E_INVAL;
    /* Chosen for a drop that has not happened yet: keep it, it is still resident. */
    if (c->mark == MARK_DROP)
        c->mark = 0;
    /* Evicted earlier in this plan and still on its way out: let it finish, then bring it back. */
    while (c->state == MS_CS_OUT && x->out.head < x->out.tail) {
        int e = settle_out(x);
        if (e)
            return e;
    }
    if (ms_chunk_state_resident(c->state))
        return c->state == MS_CS_OUT ? MS_E_STATE : MS_OK;
    while (x->rt->resident_bytes + c->bytes > budget &&
           (x->out.head < x->out.tail || x->drops.head < x->drops.tail)) {
        int e = free_one(x);
        if (e)
            return e;
    }
    if (x->rt->resident_bytes + c->bytes > budget)
        return MS_E_NOSPACE;

    struct ms_gpu_chunk g = describe(x->rt, id);
    int e = g_map(x, &g);
    if (e)
        return e;
    x->st->maps++;
    set_bare(x->rt, c, false); /* device memory is mapped there now */
    g.bare = false;            /* so an unmap below maps the host chunk back */
    c->phys = g.phys;
    if (c->state == MS_CS_EMPTY) {
        x->st->bytes_fresh += c->bytes;
        e = ms_chunk_apply(x->rt, id, MS_CE_MAP_FRESH);
        c->phys = g.phys;
        return e;
    }
    uint64_t ev = 0;
    e = g_issue(x, MS_STREAM_IN, &g, &ev);
    if (e) {
        /* No event to wait on: release the mapping (a real backend's unmap synchronizes with
         * any copy still in flight on that memory). The chunk stays HOST. */
        g_unmap(x, &g);
        c->phys = 0;
        return e;
    }
    e = ms_chunk_apply(x->rt, id, MS_CE_POP_START);
    c->phys = g.phys;
    c->event = ev;
    if (e) {
        g_wait(x, ev);
        x->gpu->release_event(x->gpu->impl, ev);
        g_unmap(x, &g);
        return e;
    }
    x->in.v[x->in.tail++] = (struct pend){.id = id, .event = ev};
    if (!x->opts->pipelined)
        return settle_in(x);
    return MS_OK;
}

int ms_exec_plan(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint64_t budget,
                 const struct ms_plan *p, const struct ms_exec_opts *opts, struct ms_exec_stats *st)
{
    if (!rt || !gpu || !p || !opts || !st)
        return MS_E_INVAL;
    uint64_t t0 = gpu->now_ns(gpu->impl);
    struct ctx x = {.rt = rt, .gpu = gpu, .opts = opts, .st = st};
    int err = MS_OK;
    if (p->n) {
        x.out.v = ms_malloc(p->n * sizeof(*x.out.v));
        x.in.v = ms_malloc(p->n * sizeof(*x.in.v));
        x.drops.v = ms_malloc(p->n * sizeof(*x.drops.v));
        x.ids = ms_malloc(p->n * sizeof(*x.ids));
        x.filled = ms_malloc(p->n * sizeof(*x.filled));
        x.hashes = ms_malloc(p->n * sizeof(*x.hashes));
        x.gdesc = ms_malloc(p->n * sizeof(*x.gdesc));
        if (!x.out.v || !x.in.v || !x.drops.v || !x.ids || !x.filled || !x.hashes || !x.gdesc)
            err = MS_E_NOMEM;
    }
    for (size_t i = 0; i < p->n && err == MS_OK; i++)
        if (!ms_chunk_get(rt, p->steps[i].chunk) || p->steps[i].op > MS_STEP_POPULATE)
            err = MS_E_INVAL;
    if (err == MS_OK)
        err = host_chunks_for_victims(&x, p);
    if (err == MS_OK)
        find_unchanged(&x, p);
    /* Pipelined: every eviction is issued first, in plan order, so the device->host stream
     * never idles while the host thread maps; populations follow in plan order, each waiting
     * only for the oldest evictions it needs. Serial: steps in plan order, one at a time. */
    int first = opts->pipelined ? 0 : 2, last = opts->pipelined ? 1 : 2;
    for (int pass = first; pass <= last && err == MS_OK; pass++) {
        for (size_t i = 0; i < p->n && err == MS_OK; i++) {
            const struct ms_plan_step *s = &p->steps[i];
            if (s->op == MS_STEP_EVICT && pass != 1)
                err = evict(&x, s->chunk);
            else if (s->op == MS_STEP_POPULATE && pass != 0)
                err = populate(&x, s->chunk, budget);
        }
    }
    /* Settle everything in flight, evictions first (they free memory), keeping the first error.
     * Pending drops are carried out even after an error: the plan chose them and they lose
     * nothing (the host copy is current). */
    while (x.drops.head < x.drops.tail) {
        int e = next_drop(&x);
        if (err == MS_OK)
            err = e;
    }
    while (x.out.head < x.out.tail) {
        int e = settle_out(&x);
        if (err == MS_OK)
            err = e;
    }
    while (x.in.head < x.in.tail) {
        int e = settle_in(&x);
        if (err == MS_OK)
            err = e;
    }
    hash_filled(&x);
    ms_free(x.out.v);
    ms_free(x.in.v);
    ms_free(x.drops.v);
    ms_free(x.ids);
    ms_free(x.filled);
    ms_free(x.hashes);
    ms_free(x.gdesc);
    st->elapsed_ns += gpu->now_ns(gpu->impl) - t0;
    return err;
}

int ms_exec_map_bare(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, size_t max,
                     struct ms_exec_stats *st)
{
    if (!rt->bare)
        return 0;
    if (!gpu->host_map)
        return MS_E_INVAL;
    uint64_t t = gpu->now_ns(gpu->impl);
    int e = MS_OK;
    size_t done = 0, ns = rt->nslots;
    /* From where the last call stopped, once around the table: slot `from` from its chunk
     * `k0` on, the other slots whole, then slot `from` again up to `k0`. */
    size_t from = rt->bare_slot < ns ? rt->bare_slot : 0;
    uint32_t k0 = rt->bare_slot < ns ? rt->bare_chunk : 0;
    for (size_t n = 0; ns && n <= ns && rt->bare && e == MS_OK && (!max || done < max); n++) {
        size_t i = (from + n) % ns;
        struct ms_region *r = &rt->regions[i];
        uint32_t kb = n == 0 ? k0 : 0, ke = n == ns ? MS_MIN(k0, r->nchunks) : r->nchunks;
        uint32_t k = kb;
        for (; r->live && k < ke && e == MS_OK && (!max || done < max); k++) {
            struct ms_chunk *c = &r->chunks[k];
            if (!c->bare)
                continue;
            struct ms_gpu_chunk g = describe(rt, MS_CHUNK_ID((uint32_t)i, k));
            e = gpu->host_map(gpu->impl, &g, 1);
            if (e == MS_OK) {
                set_bare(rt, c, false);
                done++;
            }
        }
        rt->bare_slot = i;
        rt->bare_chunk = e == MS_OK ? k : k - 1; /* a failed chunk is tried first next time */
    }
    if (st)
        st->map_ns += gpu->now_ns(gpu->impl) - t;
    return e ? e : (int)MS_MIN(rt->bare, (uint64_t)INT32_MAX);
}

int ms_exec_free_region(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r)
        return MS_E_NOTFOUND;
    for (uint32_t k = 0; k < r->nchunks; k++) {
        const struct ms_chunk *c = &r->chunks[k];
        if (ms_chunk_pins(r, c) || c->state == MS_CS_IN || c->state == MS_CS_OUT)
            return MS_E_BUSY;
    }
    struct ms_exec_stats st;
    memset(&st, 0, sizeof(st));
    struct ms_exec_opts opts = {.pipelined = false, .hash_clean = false};
    struct ctx x = {.rt = rt, .gpu = gpu, .opts = &opts, .st = &st};
    for (uint32_t k = 0; k < r->nchunks; k++) {
        ms_chunk_id id = MS_CHUNK_ID(region, k);
        struct ms_chunk *c = &r->chunks[k];
        struct ms_gpu_chunk g = describe(rt, id);
        int e = MS_OK;
        if (ms_chunk_state_resident(c->state)) {
            g.hchunk = 0; /* the range goes: nothing is mapped back */
            e = g_unmap(&x, &g);
        } else if (g.hchunk && !g.bare && gpu->host_unmap) {
            e = gpu->host_unmap(gpu->impl, &g, 1);
        }
        if (e)
            return e;
        set_bare(rt, c, false); /* the range goes */
        if (c->host && gpu->host_free) {
            g.hchunk = c->host;
            gpu->host_free(gpu->impl, &g, 1);
        }
        c->host = 0; /* the contents are dead: DISCARD below */
        e = ms_chunk_apply(rt, id, MS_CE_DISCARD);
        if (e)
            return e;
    }
    return ms_region_remove(rt, region);
}

int ms_exec_map_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                     struct ms_exec_stats *st)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r)
        return MS_E_NOTFOUND;
    if (!r->amap || !gpu->host_new || !gpu->host_map || !gpu->host_free)
        return MS_E_INVAL;
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (r->chunks[k].state != MS_CS_EMPTY)
            return MS_E_STATE;
    struct ms_gpu_chunk *g = ms_malloc(r->nchunks * sizeof(*g));
    if (!g)
        return MS_E_NOMEM;
    for (uint32_t k = 0; k < r->nchunks; k++)
        g[k] = describe(rt, MS_CHUNK_ID(region, k));
    uint64_t t = gpu->now_ns(gpu->impl);
    int e = gpu->host_new(gpu->impl, g, r->nchunks);
    if (e == MS_OK) {
        e = gpu->host_map(gpu->impl, g, r->nchunks);
        if (e)
            gpu->host_free(gpu->impl, g, r->nchunks);
    }
    if (e == MS_OK) {
        for (uint32_t k = 0; k < r->nchunks; k++) {
            r->chunks[k].host = g[k].hchunk;
            st->host_chunks++;
            st->host_chunk_bytes += g[k].bytes;
        }
        e = ms_region_mark_host(rt, region);
    }
    st->map_ns += gpu->now_ns(gpu->impl) - t;
    ms_free(g);
    return e;
}

int ms_exec_detach_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                        uint64_t *tokens)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r)
        return MS_E_NOTFOUND;
    if (!r->amap || !gpu->host_map || !gpu->host_unmap)
        return MS_E_INVAL;
    for (uint32_t k = 0; k < r->nchunks; k++) {
        const struct ms_chunk *c = &r->chunks[k];
        if (ms_chunk_pins(r, c) || (c->state != MS_CS_EMPTY && c->state != MS_CS_HOST))
            return MS_E_BUSY;
    }
    for (uint32_t k = 0; k < r->nchunks; k++) {
        if (r->chunks[k].state != MS_CS_HOST || r->chunks[k].bare)
            continue; /* a bare chunk's host chunk is mapped nowhere already */
        struct ms_gpu_chunk g = describe(rt, MS_CHUNK_ID(region, k));
        int e = gpu->host_unmap(gpu->impl, &g, 1);
        if (e) { /* put back the ones done */
            for (uint32_t j = 0; j < k; j++)
                if (r->chunks[j].state == MS_CS_HOST && !r->chunks[j].bare) {
                    struct ms_gpu_chunk b = describe(rt, MS_CHUNK_ID(region, j));
                    gpu->host_map(gpu->impl, &b, 1);
                }
            return e;
        }
    }
    for (uint32_t k = 0; k < r->nchunks; k++) {
        struct ms_chunk *c = &r->chunks[k];
        tokens[k] = c->state == MS_CS_HOST ? c->host : 0;
        if (c->state == MS_CS_HOST) {
            set_bare(rt, c, false);
            c->host = 0;
            ms_chunk_apply(rt, MS_CHUNK_ID(region, k), MS_CE_DISCARD); /* HOST -> EMPTY */
        }
    }
    return MS_OK;
}

int ms_exec_attach_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                        const uint64_t *tokens)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r)
        return MS_E_NOTFOUND;
    if (!r->amap || !gpu->host_map || !gpu->host_unmap)
        return MS_E_INVAL;
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (tokens[k] && r->chunks[k].state != MS_CS_EMPTY)
            return MS_E_STATE;
    for (uint32_t k = 0; k < r->nchunks; k++) {
        if (!tokens[k])
            continue;
        struct ms_gpu_chunk g = describe(rt, MS_CHUNK_ID(region, k));
        g.hchunk = tokens[k];
        int e = gpu->host_map(gpu->impl, &g, 1);
        if (e) { /* undo the ones done */
            for (uint32_t j = 0; j < k; j++)
                if (tokens[j]) {
                    struct ms_gpu_chunk b = describe(rt, MS_CHUNK_ID(region, j));
                    b.hchunk = tokens[j];
                    gpu->host_unmap(gpu->impl, &b, 1);
                }
            return e;
        }
    }
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (tokens[k])
            ms_chunk_mark_host(rt, MS_CHUNK_ID(region, k), tokens[k]); /* checked above */
    return MS_OK;
}
