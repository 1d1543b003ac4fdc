/*
 * engine_mem.c - the engine's state and its bookkeeping: regions, pointer tables, chunk sets,
 * plans and their execution (file layering: engine_int.h; contract: engine.h).
 *
 * Pointer tables. A small host-to-device copy into a region is scanned for addresses of other
 * regions (cuBLAS-style pointer arrays are built on the host and copied over); those regions
 * become the destination region's references and are made resident with it whenever a launch
 * names it. A copy to the region's first byte starts a new table (the old references go), except
 * in a slab of small allocations (core/slab.h), whose references accumulate.
 * Pointers that kernels write into device memory cannot be seen (docs/engine.md).
 */
#include "shim/engine_int.h"

#include "shim/accuracy.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/hostmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ms_engine_state ms__engine = {.lock = MS_LOCK_INIT(MS_LK_ENGINE, "engine"),
                                     .unpinned = PTHREAD_COND_INITIALIZER};
const char *const ms__eng_backing_name[] = {"vmm", "unified", "demand"};

/* active and broken are read without the lock (the hooks' fast paths): atomic accesses. */
bool ms__eng_is_active(void)
{
    return __atomic_load_n(&E.active, __ATOMIC_ACQUIRE);
}

void ms__eng_set_flag(bool *f, bool v)
{
    __atomic_store_n(f, v, __ATOMIC_RELEASE);
}

uint64_t ms_engine_chunk_bytes(uint64_t size)
{
    return ms_chunk_bytes_with(size, ms__shim_opt(MS_OPT_CHUNK));
}

/* A slot about to be reused: the misses of the region it held (freed) join E.freed_missed
 * when they are among the most (lock held). */
static void keep_freed_misses(const struct refs *old)
{
    if (!old->misses)
        return;
    size_t at = FREED_MISSES;
    while (at > 0 && E.freed_missed[at - 1].misses < old->misses)
        at--;
    if (at == FREED_MISSES)
        return;
    memmove(&E.freed_missed[at + 1], &E.freed_missed[at],
            (FREED_MISSES - 1 - at) * sizeof(E.freed_missed[0]));
    E.freed_missed[at] = (struct freed_misses){old->base, old->size, old->misses};
}

/* A new region at [va, va + bytes) with host backing `host` and chunks of chunk_bytes (0:
 * ms_engine_chunk_bytes(bytes)) (lock held): table, pointer-table slot, statistics, the daemon
 * told. */
int ms__eng_region_new(uint64_t va, uint64_t bytes, enum ms_region_kind kind, void *host,
                       uint64_t chunk_bytes, uint32_t *out)
{
    uint32_t id = 0;
    if (!chunk_bytes)
        chunk_bytes = ms_engine_chunk_bytes(bytes);
    ms__eng_settle_off(); /* its chunks are not on the device yet */
    int e = ms_region_add(&E.rt, 0, va, bytes, kind, chunk_bytes, &id);
    if (e == MS_OK && id >= E.nrefs) {
        size_t n = E.nrefs ? E.nrefs * 2 : 64;
        while (n <= id)
            n *= 2;
        struct refs *p = ms_realloc(E.refs, n * sizeof(*p));
        if (!p) {
            ms_region_remove(&E.rt, id);
            return MS_E_NOMEM;
        }
        memset(p + E.nrefs, 0, (n - E.nrefs) * sizeof(*p));
        E.refs = p;
        E.nrefs = n;
    }
    if (e != MS_OK)
        return e;
    ms_region_get(&E.rt, id)->host = host;
    keep_freed_misses(&E.refs[id]);
    E.refs[id].misses = 0;
    E.refs[id].base = va;
    E.refs[id].size = bytes;
    E.refs[id].n = 0;
    E.refs[id].buffer = ++E.next_buffer;
    E.refs[id].sync_memops = false;
    E.st.regions++;
    E.st.footprint += MS_ROUND_UP(bytes, MS_GRAN);
    if (E.mode == MODE_DAEMON)
        ms_client_region_add(id, va, bytes, chunk_bytes);
    *out = id;
    return MS_OK;
}

/* Release region id's device memory and forget it (lock held, device idle). The caller owns
 * the address range and the host backing. */
int ms__eng_region_drop(uint32_t id)
{
    const struct ms_region *r = ms_region_get(&E.rt, id);
    uint64_t span = MS_ROUND_UP(r->size, MS_GRAN);
    bool fallback = r->kind == MS_RK_VMM && !r->amap;
    int e = ms_exec_free_region(&E.rt, E.ops, id);
    if (e != MS_OK)
        return e;
    if (fallback && E.vmm_fallbacks)
        E.vmm_fallbacks--;
    E.refs[id].n = 0;
    /* Drop references to the freed region from every pointer table. */
    for (size_t i = 0; i < E.nrefs; i++)
        for (uint32_t k = 0; k < E.refs[i].n;)
            if (E.refs[i].region[k] == id)
                E.refs[i].region[k] = E.refs[i].region[--E.refs[i].n];
            else
                k++;
    if (E.mode == MODE_DAEMON)
        ms_client_region_free(id); /* its device memory is released: the daemon may reuse it */
    E.st.regions--;
    E.st.footprint -= span;
    return MS_OK;
}

/* The settled state's end (engine_gate.c, "Settled"; engine_int.h). Here, below the region
 * table's and the plans' code that calls it. */
void ms__eng_settle_off(void)
{
    if (__atomic_load_n(&E.settled, __ATOMIC_RELAXED))
        __atomic_store_n(&E.settled, false, __ATOMIC_SEQ_CST);
}

/* Carry out E.plan, pipelined, inside the host-memory gate (hostmem.h): no pin call of this
 * process runs beside the migration's copies. Caller holds E.lock. */
int ms__eng_exec_plan(uint64_t budget, struct ms_exec_stats *x)
{
    /* verify_clean: always-mapped memory is reachable by commands that did not name it, so a
     * chunk that stayed CLEAN may still have been written (docs/engine.md). */
    struct ms_exec_opts o = {.pipelined = true,
                             .hash_clean = true,
                             .verify_clean = true,
                             .defer_host_map = E.defer_bare};
    ms__eng_settle_off();
    ms__host_gate_enter();
    int e = ms_exec_plan(&E.rt, E.ops, budget, &E.plan, &o, x);
    ms__host_gate_leave();
    return e;
}

bool ms_engine_owns(uint64_t va)
{
    if (!ms__eng_is_active())
        return false;
    ms_lock(&E.lock);
    uint32_t id;
    bool yes = ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK;
    ms_unlock(&E.lock);
    return yes;
}

bool ms_engine_vmm_owns(uint64_t va)
{
    if (!ms__eng_is_active())
        return false;
    ms_lock(&E.lock);
    uint32_t id;
    bool yes = ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK &&
               ms_region_get(&E.rt, id)->kind == MS_RK_VMM;
    ms_unlock(&E.lock);
    return yes;
}

int ms__eng_add_region_chunks(struct ms_chunk_set *s, uint32_t region)
{
    return ms_chunk_set_add_region(s, &E.rt, region);
}

/*
 * Application VMM mappings that touch each other form one span (an expandable segment): a
 * pointer into one of them says nothing about where its object ends, which may be in the next
 * mapping. Naming the whole span made every command name every tensor of the segment (PyTorch's
 * expandable segments: all of its memory), so under a budget below the footprint no prediction
 * was left and what stayed resident was whatever came first (tests/shim, engine/expand). A
 * pointer's object starts at or before it and extends forward, so the always-mapped mappings
 * after a named one are added while they lie within VMM_REACH bytes of its end (at most an
 * eighth of the budget): what lies further runs from its host chunk when it is not resident,
 * slower, never wrong. A mapping that is not always mapped (a fallback), or one with a chunk
 * still EMPTY (under the daemon, before its first population), must be resident to be touched
 * at all, so every such one in the span is added, whichever side. Normalized after.
 */
#define VMM_REACH (256 * MS_MIB)

static bool has_empty(const struct ms_region *r)
{
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (r->chunks[k].state == MS_CS_EMPTY)
            return true;
    return false;
}

/* End of the run of ids of one region that starts at s->ids[i] (s normalized up to n): one
 * binary search, so a set naming a large allocation is walked region by region, not id by id. */
static size_t region_run_end(const struct ms_chunk_set *s, size_t i, size_t n)
{
    uint32_t reg = MS_CHUNK_REGION(s->ids[i]);
    size_t lo = i + 1, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (MS_CHUNK_REGION(s->ids[mid]) == reg)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ms__eng_add_vmm_neighbors(struct ms_chunk_set *s)
{
    size_t n = s->n;
    uint64_t reach = E.budget ? MS_MIN(VMM_REACH, E.budget / 8) : VMM_REACH;
    for (size_t i = 0; i < n; i = region_run_end(s, i, n)) {
        uint32_t reg = MS_CHUNK_REGION(s->ids[i]);
        const struct ms_region *r = ms_region_get(&E.rt, reg);
        if (!r || r->kind != MS_RK_VMM)
            continue;
        uint64_t end = r->base + MS_ROUND_UP(r->size, MS_GRAN);
        /* Running alone without fallback mappings (the common case) only the reach is walked: a
         * launch costs a few lookups, not one per mapping of a segment that may hold thousands.
         * With the daemon a mapping stays EMPTY (mapped nowhere) until its first population, so
         * such mappings must be named too, wherever they lie in the span. */
        bool whole = E.vmm_fallbacks || E.mode != MODE_ALONE;
        for (int dir = whole ? -1 : 1; dir <= 1; dir += 2) {
            const struct ms_region *cur = r;
            for (;;) {
                uint64_t probe =
                    dir < 0 ? cur->base - 1 : cur->base + MS_ROUND_UP(cur->size, MS_GRAN);
                uint32_t nb;
                if (ms_rtable_lookup(&E.rt, 0, probe, &nb, NULL) != MS_OK)
                    break;
                const struct ms_region *q = ms_region_get(&E.rt, nb);
                if (q->kind != MS_RK_VMM)
                    break;
                bool within = dir > 0 && q->base < end + reach;
                if (!within && !whole)
                    break;
                if (!q->amap || within || has_empty(q)) {
                    int e = ms__eng_add_region_chunks(s, nb);
                    if (e)
                        return e;
                }
                cur = q;
            }
        }
    }
    if (s->n > n)
        ms_chunk_set_normalize(s);
    return MS_OK;
}

/* Add the chunks of the regions that the pointer tables in `s` reference (one level). */
int ms__eng_add_refs(struct ms_chunk_set *s)
{
    size_t n = s->n;
    for (size_t i = 0; i < n; i = region_run_end(s, i, n)) {
        uint32_t reg = MS_CHUNK_REGION(s->ids[i]);
        if (reg >= E.nrefs)
            continue;
        for (uint32_t k = 0; k < E.refs[reg].n; k++) {
            int e = ms__eng_add_region_chunks(s, E.refs[reg].region[k]);
            if (e)
                return e;
        }
    }
    if (s->n > n)
        ms_chunk_set_normalize(s);
    return MS_OK;
}

bool ms__eng_all_ready(const struct ms_chunk_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        /* A run naming a whole region: its summary answers (region.h, I11). */
        const struct ms_region *w = ms_chunk_set_whole(&E.rt, s, i);
        if (w) {
            if (!ms_region_all_ready(w))
                return false;
            i += w->nchunks - 1;
            continue;
        }
        const struct ms_chunk *c = ms_chunk_get(&E.rt, s->ids[i]);
        if (!c || !ms_chunk_state_ready(c->state))
            return false;
    }
    return true;
}

void ms__eng_admitted(const struct ms_chunk_set *need)
{
    uint64_t missed = 0;
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; i < need->n; i++) {
        /* A whole region, all ready: touched at once. */
        struct ms_region *w = ms_chunk_set_whole(&E.rt, need, i);
        if (w && ms_region_touch_all(&E.rt, w) == MS_OK) {
            i += w->nchunks - 1;
            continue;
        }
        struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(need->ids[i]));
        struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        /* Ready: touched (inline, one pass). Otherwise always mapped (a chunk that must be
         * resident was made so): runs on the host, a miss; TOUCH does not apply. */
        if (c && ms_chunk_touch(&E.rt, r, c) != MS_OK) {
            missed++;
            uint32_t reg = MS_CHUNK_REGION(need->ids[i]);
            if (reg != last && reg < E.nrefs)
                E.refs[reg].misses++;
            last = reg;
        }
    }
    if (missed) {
        E.st.miss_cmds++;
        E.st.miss_chunks += missed;
    }
    E.last_missed = missed;
    ms_history_append(&E.hist, need);
}

uint64_t ms__eng_misses(void)
{
    return E.st.miss_cmds;
}

uint64_t ms__eng_host_bytes(uint64_t *pool)
{
    struct ms_host_stats h;
    ms__host_stats(&h);
    uint64_t b = h.live_bytes;
    *pool = 0;
    if (E.gpu && E.backing == BACK_VMM) {
        struct ms_gpu_cuda_host_stats hs;
        ms_gpu_cuda_host_stats(E.gpu, &hs);
        b += hs.live_bytes + hs.pooled_bytes;
        *pool = hs.pooled_bytes;
    }
    return b;
}

void ms__eng_kernel_missed(const char *name, uint64_t chunks)
{
    if (!name || !name[0])
        name = "(unnamed kernel)";
    struct kmiss *slot = NULL, *least = &E.kmiss[0];
    for (size_t i = 0; i < KMISS_MAX && !slot; i++) {
        struct kmiss *k = &E.kmiss[i];
        if (!k->name[0] || strncmp(k->name, name, KMISS_NAME - 1) == 0)
            slot = k;
        else if (k->launches < least->launches)
            least = k;
    }
    if (!slot) { /* full: the least-missed kernel makes room (its counts carry on) */
        slot = least;
        slot->name[0] = '\0';
    }
    if (!slot->name[0])
        snprintf(slot->name, sizeof(slot->name), "%s", name);
    slot->launches++;
    slot->chunks += chunks;
}

int ms__eng_evict_bare(const struct ms_chunk_set *evict, struct ms_exec_stats *st)
{
    E.defer_bare = ms__shim_opt(MS_OPT_DEFER_HOST_MAP) != 0;
    int e = ms__eng_exec_sets(evict, NULL, st);
    E.defer_bare = false;
    return e;
}

int ms__eng_map_bare(size_t max, bool before_command)
{
    if (!E.rt.bare)
        return 0;
    uint64_t before = E.rt.bare, t0 = now_ns();
    int e = ms_exec_map_bare(&E.rt, E.ops, max, NULL);
    uint64_t done = before - E.rt.bare;
    if (before_command)
        E.st.bare_gate += done;
    else
        E.st.bare_mapped += done;
    E.st.bare_ns += now_ns() - t0;
    return e;
}

void ms__eng_add_exec_stats(const struct ms_exec_stats *x)
{
    if (x->bytes_out || x->bytes_dropped)
        E.prep.want = 0; /* chunks got host chunks (or lost them): PREPARE plans anew */
    E.st.bare_left += x->bare;
    E.st.bytes_in += x->bytes_in;
    E.st.bytes_out += x->bytes_out;
    E.st.bytes_dropped += x->bytes_dropped;
    E.st.host_chunks += x->host_chunks;
    E.st.host_bytes += x->host_chunk_bytes;
}

/* A new allocation's host chunks that took this long to make are logged (as hostmem.c logs a
 * slow store): other processes' stalls can be matched to the time. */
#define SLOW_PIN_NS 300000000ull

bool ms__eng_fits(uint64_t span)
{
    return E.mode == MODE_ALONE && E.rt.resident_bytes + span <= E.budget;
}

int ms__eng_region_place_device(uint32_t id)
{
    struct ms_region *r = ms_region_get(&E.rt, id);
    if (!r)
        return MS_E_NOTFOUND;
    r->amap = true;
    ms_chunk_set_clear(&E.scratch);
    int e = ms__eng_add_region_chunks(&E.scratch, id);
    return e ? e : ms__eng_exec_sets(NULL, &E.scratch, NULL);
}

int ms__eng_host_make(uint64_t va, uint64_t bytes, struct ms_host_set *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t span = MS_ROUND_UP(bytes, MS_GRAN), cb = ms_engine_chunk_bytes(bytes);
    size_t n = (size_t)((span + cb - 1) / cb);
    struct ms_gpu_chunk *g = ms_calloc(n, sizeof(*g));
    if (!g)
        return MS_E_NOMEM;
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    uint64_t t0 = now_ns(), waited = 0;
    int e = MS_OK;
    size_t made = 0;
    for (; made < n && e == MS_OK; made++) {
        uint64_t off = (uint64_t)made * cb;
        g[made] = (struct ms_gpu_chunk){.va = va + off, .bytes = MS_MIN(cb, span - off)};
        /* One chunk per pin call: a migration waits for at most one at the gate. */
        waited += ms__host_pin_begin();
        e = E.ops->host_new(E.ops->impl, &g[made], 1);
        ms__host_pin_end();
    }
    if (e == MS_OK)
        e = E.ops->host_map(E.ops->impl, g, n);
    if (e != MS_OK) {
        E.ops->host_free(E.ops->impl, g, made);
        ms_free(g);
        return e;
    }
    uint64_t dt = now_ns() - t0;
    dt -= MS_MIN(dt, waited);
    *out = (struct ms_host_set){.c = g, .n = n, .ns = dt, .bytes = span};
    if (dt >= SLOW_PIN_NS) {
        char started[40];
        ms__shim_wallclock(&at, started, sizeof(started));
        ms__shim_log("slow pin: %.1f ms for %.2f GiB of host chunks (a new allocation's, %zu "
                     "pin calls), started %s",
                     (double)dt / 1e6, (double)span / (double)MS_GIB, n, started);
    }
    return MS_OK;
}

#define PREP_REPLAN 64 /* steps a PREPARE plan serves before it is made again */

struct prep_cand {
    uint64_t bytes, last_use;
};

/* Most recently used first: in a loop the chunks used last come back last, and they are the
 * ones the daemon's OPT (and LRU among a task's own chunks, by its next use) evicts first. */
static int prep_cmp(const void *a, const void *b)
{
    const struct prep_cand *x = a, *y = b;
    return x->last_use < y->last_use ? 1 : x->last_use > y->last_use ? -1 : 0;
}

/* E.prep for `want` bytes: the ready chunks of always-mapped regions without a host chunk,
 * most recently used first, grouped by size until they reach `want` (lock held). */
static int prep_plan(uint64_t want)
{
    struct prep_plan *pl = &E.prep;
    pl->want = want;
    pl->steps = 0;
    pl->ng = 0;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < E.rt.nslots; i++)
        if (E.rt.regions[i].live && E.rt.regions[i].amap)
            cap += E.rt.regions[i].nchunks;
    struct prep_cand *cand = cap ? ms_malloc(cap * sizeof(*cand)) : NULL;
    if (cap && !cand) {
        pl->want = 0;
        return MS_E_NOMEM;
    }
    for (size_t i = 0; i < E.rt.nslots; i++) {
        const struct ms_region *r = &E.rt.regions[i];
        for (uint32_t k = 0; r->live && r->amap && k < r->nchunks; k++) {
            const struct ms_chunk *c = &r->chunks[k];
            if (!c->host && ms_chunk_state_ready((enum ms_chunk_state)c->state))
                cand[n++] = (struct prep_cand){c->bytes, ms_chunk_last_use(r, c)};
        }
    }
    if (n > 1)
        qsort(cand, n, sizeof(*cand), prep_cmp);
    uint64_t sum = 0;
    for (size_t i = 0; i < n && sum < want; i++) {
        size_t j = 0;
        while (j < pl->ng && pl->g[j].bytes != cand[i].bytes)
            j++;
        if (j == pl->ng) {
            if (pl->ng == PREP_SIZES)
                continue;
            pl->g[pl->ng].bytes = cand[i].bytes;
            pl->g[pl->ng++].n = 0;
        }
        pl->g[j].n++;
        sum += cand[i].bytes;
    }
    ms_free(cand);
    return MS_OK;
}

int ms__eng_host_prepare_step(uint64_t want)
{
    if (!E.gpu || E.backing != BACK_VMM || !want)
        return 0;
    if (E.prep.want != want || E.prep.steps >= PREP_REPLAN) {
        int pe = prep_plan(want);
        if (pe != MS_OK)
            return pe;
    }
    E.prep.steps++;
    if (E.prep.ng == 0)
        return 0;
    const struct prep_plan pl = E.prep; /* E.prep may be planned anew while unlocked */
    ms_unlock(&E.lock);                 /* pinning takes milliseconds */
    uint64_t t0 = now_ns(), waited = 0, bytes = 0;
    bool made = false;
    int e = MS_OK;
    for (size_t j = 0; j < pl.ng && !made && e == MS_OK; j++) {
        waited += ms__host_pin_begin();
        e = ms_gpu_cuda_host_reserve(E.gpu, pl.g[j].bytes, pl.g[j].n, &made);
        ms__host_pin_end();
        bytes = pl.g[j].bytes;
    }
    uint64_t dt = now_ns() - t0;
    ms_lock(&E.lock);
    if (!made)
        return e;
    E.st.prep_chunks++;
    E.st.prep_bytes += bytes;
    E.st.prep_ns += dt - MS_MIN(dt, waited);
    return 1;
}

int ms__eng_host_trim(void)
{
    uint64_t idle_ms = ms__shim_opt(MS_OPT_HOST_POOL_IDLE_MS);
    if (!E.gpu || E.backing != BACK_VMM || !idle_ms)
        return 0;
    struct ms_gpu_cuda_host_stats hs;
    ms_gpu_cuda_host_stats(E.gpu, &hs);
    if (!hs.pooled_bytes)
        return 0;       /* nothing pooled: neither the lock nor the host-memory gate is touched */
    ms_unlock(&E.lock); /* unpinning takes milliseconds */
    uint64_t freed = 0;
    ms__host_pin_begin();
    int e = ms_gpu_cuda_host_trim(E.gpu, idle_ms * 1000000ull, &freed);
    ms__host_pin_end();
    ms_lock(&E.lock);
    if (e != MS_OK || !freed)
        return 0;
    E.st.trim_chunks++;
    E.st.trim_bytes += freed;
    return 1;
}

void ms__eng_host_unmake(struct ms_host_set *h)
{
    if (!h->c)
        return;
    E.ops->host_unmap(E.ops->impl, h->c, h->n);
    E.ops->host_free(E.ops->impl, h->c, h->n);
    ms_free(h->c);
    memset(h, 0, sizeof(*h));
}

int ms__eng_map_empty_host(const struct ms_chunk_set *need)
{
    size_t n = 0;
    for (size_t i = 0; i < need->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        const struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(need->ids[i]));
        if (c && r && r->amap && c->state == MS_CS_EMPTY)
            n++;
    }
    if (n == 0)
        return MS_OK;
    struct ms_gpu_chunk *g = ms_calloc(n, sizeof(*g));
    ms_chunk_id *ids = ms_calloc(n, sizeof(*ids));
    if (!g || !ids) {
        ms_free(g);
        ms_free(ids);
        return MS_E_NOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < need->n && k < n; i++) {
        const struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        const struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(need->ids[i]));
        if (!c || !r || !r->amap || c->state != MS_CS_EMPTY)
            continue;
        ids[k] = need->ids[i];
        g[k++] = (struct ms_gpu_chunk){
            .va = r->base + ms_region_chunk_offset(r, MS_CHUNK_INDEX(need->ids[i])),
            .bytes = c->bytes};
    }
    /* Pinning takes milliseconds per chunk: not under the lock. */
    ms_unlock(&E.lock);
    int e = MS_OK;
    size_t made = 0;
    for (; made < n && e == MS_OK; made++) {
        ms__host_pin_begin();
        e = E.ops->host_new(E.ops->impl, &g[made], 1);
        ms__host_pin_end();
    }
    if (e != MS_OK)
        made--; /* the failed one holds nothing */
    ms_lock(&E.lock);
    size_t used = 0;
    for (size_t j = 0; j < made; j++) {
        const struct ms_chunk *c = ms_chunk_get(&E.rt, ids[j]);
        const struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(ids[j]));
        /* Still the same EMPTY chunk (a freed region's slot may hold another by now). */
        bool same = c && r && r->live && r->amap && c->state == MS_CS_EMPTY &&
                    c->bytes == g[j].bytes &&
                    r->base + ms_region_chunk_offset(r, MS_CHUNK_INDEX(ids[j])) == g[j].va;
        int m = same && e == MS_OK ? E.ops->host_map(E.ops->impl, &g[j], 1) : MS_E_STATE;
        if (m == MS_OK && (m = ms_chunk_mark_host(&E.rt, ids[j], g[j].hchunk)) != MS_OK)
            E.ops->host_unmap(E.ops->impl, &g[j], 1);
        if (m == MS_OK) {
            used++;
            E.st.host_chunks++;
            E.st.host_bytes += g[j].bytes;
            g[j].hchunk = 0;
        } else if (same && m != MS_E_STATE && e == MS_OK) {
            e = m;
        }
    }
    for (size_t j = 0; j < made; j++)
        if (g[j].hchunk)
            E.ops->host_free(E.ops->impl, &g[j], 1);
    ms_free(g);
    ms_free(ids);
    return e;
}

int ms__eng_region_adopt_host(uint32_t id, struct ms_host_set *h)
{
    struct ms_region *r = ms_region_get(&E.rt, id);
    if (!r || r->nchunks != h->n)
        return MS_E_INVAL;
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (r->chunks[k].bytes != h->c[k].bytes || r->chunks[k].state != MS_CS_EMPTY)
            return MS_E_INVAL;
    r->amap = true;
    for (uint32_t k = 0; k < r->nchunks; k++)
        r->chunks[k].host = h->c[k].hchunk;
    int e = ms_region_mark_host(&E.rt, id);
    if (e != MS_OK) {
        for (uint32_t k = 0; k < r->nchunks; k++)
            r->chunks[k].host = 0;
        r->amap = false;
        return e;
    }
    E.st.host_chunks += h->n;
    E.st.host_bytes += h->bytes;
    E.st.host_ns += h->ns;
    E.st.host_placed++;
    ms_free(h->c); /* the tokens live in the region now */
    memset(h, 0, sizeof(*h));
    return MS_OK;
}

int ms__eng_plan_step(enum ms_step_op op, ms_chunk_id id)
{
    int e = ms_grow((void **)&E.plan.steps, &E.plan.cap, E.plan.n + 1, sizeof(E.plan.steps[0]));
    if (e)
        return e;
    E.plan.steps[E.plan.n++] = (struct ms_plan_step){.op = (uint8_t)op, .chunk = id};
    return MS_OK;
}

int ms__eng_exec_sets(const struct ms_chunk_set *evict, const struct ms_chunk_set *pop,
                      struct ms_exec_stats *st)
{
    uint64_t t0 = now_ns();
    E.plan.n = 0;
    E.plan.evict_bytes = E.plan.populate_bytes = 0;
    ms_rtable_clear_marks(&E.rt);
    int e = MS_OK;
    for (size_t i = 0; evict && i < evict->n && e == MS_OK; i++) {
        struct ms_chunk *c = ms_chunk_get(&E.rt, evict->ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state) &&
            !ms_chunk_pins(&E.rt.regions[MS_CHUNK_REGION(evict->ids[i])], c) && !c->mark) {
            c->mark = 1;
            E.plan.evict_bytes += c->bytes;
            e = ms__eng_plan_step(MS_STEP_EVICT, evict->ids[i]);
        }
    }
    for (size_t i = 0; pop && i < pop->n && e == MS_OK; i++) {
        struct ms_chunk *c = ms_chunk_get(&E.rt, pop->ids[i]);
        if (c && !ms_chunk_state_resident((enum ms_chunk_state)c->state) && !c->mark) {
            c->mark = 1;
            E.plan.populate_bytes += c->bytes;
            e = ms__eng_plan_step(MS_STEP_POPULATE, pop->ids[i]);
        }
    }
    if (e != MS_OK || E.plan.n == 0)
        return e;
    struct ms_exec_stats x;
    memset(&x, 0, sizeof(x));
    e = ms__eng_exec_plan(UINT64_MAX, &x);
    ms__eng_add_exec_stats(&x);
    E.st.migrate_ns += now_ns() - t0;
    if (st) {
        st->bytes_in += x.bytes_in;
        st->bytes_out += x.bytes_out;
        st->bytes_dropped += x.bytes_dropped;
        st->bytes_fresh += x.bytes_fresh;
        st->elapsed_ns += x.elapsed_ns;
        st->hash_ns += x.hash_ns;
        st->issue_ns += x.issue_ns;
        st->wait_ns += x.wait_ns;
        st->map_ns += x.map_ns;
        st->unmap_ns += x.unmap_ns;
    }
    if (e != MS_OK)
        say("migration failed: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
    return e;
}

int ms__eng_predict(const struct ms_chunk_set *need, uint64_t next_cap,
                    struct ms_chunk_set *out_next, uint64_t recent_cap,
                    struct ms_chunk_set *out_recent)
{
    return ms_history_predict(&E.hist, &E.rt, need, next_cap, out_next, recent_cap, out_recent);
}

/* E.need = what a command of unknown reach needs (lock held; E.need cleared by the caller):
 * every chunk of every region that is not always mapped, and every EMPTY chunk (mapped nowhere
 * yet: a daemon task's new allocation). Always-mapped chunks are reachable wherever they are,
 * so an unbounded command runs on what is resident. */
int ms__eng_need_everything(void)
{
    E.st.unbounded++;
    int e = MS_OK;
    for (size_t i = 0; i < E.rt.nslots && e == MS_OK; i++) {
        const struct ms_region *r = &E.rt.regions[i];
        for (uint32_t k = 0; r->live && k < r->nchunks && e == MS_OK; k++)
            if (!r->amap || r->chunks[k].state == MS_CS_EMPTY) /* EMPTY: mapped nowhere yet */
                e = ms_chunk_set_add(&E.need, MS_CHUNK_ID((uint32_t)i, k));
    }
    ms_chunk_set_normalize(&E.need);
    return e;
}

/* A host-to-device copy of a small buffer: remember which regions it points into. */
void ms_engine_note_h2d(uint64_t dst, const void *src, uint64_t bytes)
{
    if (!ms__eng_is_active() || !src || bytes < 8 || bytes > SCAN_LIMIT)
        return;
    ms_lock(&E.lock);
    uint32_t to;
    if (ms_rtable_lookup(&E.rt, 0, dst, &to, NULL) == MS_OK && to < E.nrefs) {
        /* A copy to the start of the region writes a new table: forget the old one's. A slab's
         * blocks are allocations of their own, each maybe a table: its references accumulate
         * (the oldest go when there are too many; those of a freed region go with it). */
        bool slab = ms_slabs_find(&E.slabs, dst) >= 0;
        if (!slab && ms_region_get(&E.rt, to)->base == dst)
            E.refs[to].n = 0;
        const unsigned char *p = src;
        for (uint64_t off = 0; off + 8 <= bytes; off += 8) {
            uint64_t v;
            memcpy(&v, p + off, 8);
            uint32_t reg;
            if (v == 0 || ms_rtable_lookup(&E.rt, 0, v, &reg, NULL) != MS_OK || reg == to)
                continue;
            struct refs *rf = &E.refs[to];
            bool seen = false;
            for (uint32_t k = 0; k < rf->n && !seen; k++)
                seen = rf->region[k] == reg;
            if (!seen && slab && rf->n == MAX_REFS)
                memmove(&rf->region[0], &rf->region[1], --rf->n * sizeof(rf->region[0]));
            if (!seen && rf->n < MAX_REFS)
                rf->region[rf->n++] = reg;
        }
    }
    ms_unlock(&E.lock);
}

int ms__eng_cuerr(int e)
{
    switch (e) {
    case MS_OK: return CUDA_SUCCESS;
    case MS_E_NOMEM:
    case MS_E_NOSPACE: return CUDA_ERROR_OUT_OF_MEMORY;
    case MS_E_INVAL:
    case MS_E_OVERLAP: return CUDA_ERROR_INVALID_VALUE;
    case MS_E_NOTFOUND: return CUDA_ERROR_NOT_FOUND;
    default: return CUDA_ERROR_UNKNOWN;
    }
}

enum ms_ptr_kind ms_engine_ptr_info(uint64_t p, struct ms_ptrattr_mem *out)
{
    if (!ms__eng_is_active() || E.backing != BACK_VMM)
        return MS_PTR_NONE;
    ms_lock(&E.lock);
    uint32_t id;
    enum ms_ptr_kind k = ms_rtable_lookup(&E.rt, 0, p, &id, NULL) == MS_OK && id < E.nrefs
                             ? MS_PTR_ALLOC
                             : MS_PTR_NONE;
    if (k == MS_PTR_ALLOC) {
        const struct ms_region *r = ms_region_get(&E.rt, id);
        *out = (struct ms_ptrattr_mem){.base = r->base,
                                       .size = r->size,
                                       .buffer = E.refs[id].buffer,
                                       .ctx = r->kind == MS_RK_VMM ? NULL : E.ctx,
                                       .device = (int)E.dev,
                                       .managed = false,
                                       .ipc_capable = false,
                                       .sync_memops = E.refs[id].sync_memops};
        long slab = ms_slabs_find(&E.slabs, p);
        if (slab >= 0) {
            /* A slab of small allocations: the block holding p answers, as its own allocation
             * (an address in no block is in no allocation). */
            const struct ms_slab_block *b = ms_slabs_block_at(&E.slabs, (size_t)slab, p);
            if (!b) {
                k = MS_PTR_HOLE;
            } else {
                out->base = r->base + b->off;
                out->size = b->size;
                out->buffer = b->buffer;
                out->sync_memops = b->sync_memops;
            }
        }
    }
    ms_unlock(&E.lock);
    return k;
}

/* The engine region of a cuMemAlloc-family allocation holding p, or false (lock held); *blk the
 * slab block holding it when p is in a slab (a slab address in no block is in no allocation). */
static bool alloc_region_at(uint64_t p, uint32_t *id, struct ms_slab_block **blk)
{
    *blk = NULL;
    if (ms_rtable_lookup(&E.rt, 0, p, id, NULL) != MS_OK || *id >= E.nrefs ||
        ms_region_get(&E.rt, *id)->kind == MS_RK_VMM)
        return false;
    long slab = ms_slabs_find(&E.slabs, p);
    if (slab < 0)
        return true;
    *blk = ms_slabs_block_at(&E.slabs, (size_t)slab, p);
    return *blk != NULL;
}

int ms_engine_ptr_set_sync(uint64_t p, bool on)
{
    if (!ms__eng_is_active() || E.backing != BACK_VMM)
        return MS_PTRATTR_UNKNOWN;
    uint32_t id;
    struct ms_slab_block *blk;
    ms_lock(&E.lock);
    bool yes = alloc_region_at(p, &id, &blk);
    bool hole = !yes && ms_slabs_find(&E.slabs, p) >= 0;
    ms_unlock(&E.lock);
    if (hole)
        return CUDA_ERROR_INVALID_VALUE; /* in no allocation */
    if (!yes)
        return MS_PTRATTR_UNKNOWN;
    if (on) {
        unsigned int flags = 0;
        if (MS_REAL(cuCtxGetFlags)(&flags) != CUDA_SUCCESS ||
            ((flags & CU_CTX_SYNC_MEMOPS) == 0 &&
             MS_REAL(cuCtxSetFlags)(flags | CU_CTX_SYNC_MEMOPS) != CUDA_SUCCESS))
            return CUDA_ERROR_NOT_SUPPORTED; /* what the driver says for VMM memory */
    }
    ms_lock(&E.lock);
    if (alloc_region_at(p, &id, &blk)) { /* still there: not freed meanwhile */
        if (blk)
            blk->sync_memops = on;
        else
            E.refs[id].sync_memops = on;
    }
    ms_unlock(&E.lock);
    return CUDA_SUCCESS;
}
