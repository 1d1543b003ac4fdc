/*
 * region.c - the region table and the chunk state machine (contract and invariants: region.h).
 *
 * Slots live in one growable array; a dead slot is reused by the next ms_region_add. Lookups go
 * through a second array, the index, kept sorted by (task, base) so a lookup is one binary
 * search. Both arrays grow before anything is changed, so ms_region_add either fully succeeds or
 * leaves the table as it was.
 *
 * The state machine is one transition table: next[state][event], MS_CS_COUNT where refused.
 * Residency accounting (resident_bytes, count[]) is updated only in ms_chunk_apply, its inline
 * TOUCH ms_chunk_touch (region.h) and ms_region_add/remove, so I5 and I6 hold by construction;
 * ms_rtable_check recomputes them.
 */
#include "region.h"

#include <stdio.h>
#include <string.h>

#define BAD MS_CS_COUNT

/* next[state][event] */
static const uint8_t next_state[MS_CS_COUNT][MS_CE_COUNT] = {
    /*             MAP_FRESH    POP_START POP_DONE     POP_FAIL     TOUCH        EVICT_START
                   EVICT_DONE   EVICT_FAIL   DROP         DISCARD */
    [MS_CS_EMPTY] = {MS_CS_DIRTY, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, MS_CS_EMPTY},
    [MS_CS_HOST] = {BAD, MS_CS_IN, BAD, BAD, BAD, BAD, BAD, BAD, BAD, MS_CS_EMPTY},
    [MS_CS_IN] = {BAD, BAD, MS_CS_CLEAN, MS_CS_HOST, BAD, BAD, BAD, BAD, BAD, BAD},
    [MS_CS_CLEAN] = {BAD, BAD, BAD, BAD, MS_CS_DIRTY, BAD, BAD, BAD, MS_CS_HOST, MS_CS_EMPTY},
    [MS_CS_DIRTY] = {BAD, BAD, BAD, BAD, MS_CS_DIRTY, MS_CS_OUT, BAD, BAD, MS_CS_HOST, MS_CS_EMPTY},
    [MS_CS_OUT] = {BAD, BAD, BAD, BAD, BAD, BAD, MS_CS_HOST, MS_CS_DIRTY, BAD, BAD},
};

static const char *const state_names[MS_CS_COUNT] = {
    [MS_CS_EMPTY] = "empty", [MS_CS_HOST] = "host",   [MS_CS_IN] = "in",
    [MS_CS_CLEAN] = "clean", [MS_CS_DIRTY] = "dirty", [MS_CS_OUT] = "out",
};

const char *ms_chunk_state_name(enum ms_chunk_state s)
{
    return (unsigned)s < MS_CS_COUNT ? state_names[s] : "invalid";
}

uint64_t ms_chunk_bytes_with(uint64_t size, uint64_t chunk)
{
    uint64_t c = MS_ROUND_UP(MS_MIN(MS_MAX(chunk, MS_GRAN), MS_CHUNK_MAX), MS_GRAN);
    uint64_t r = MS_ROUND_UP(size, MS_GRAN);
    if (r <= 2 * c)
        return r ? r : MS_GRAN;
    return c;
}

uint64_t ms_chunk_bytes_for(uint64_t size)
{
    return ms_chunk_bytes_with(size, MS_CHUNK_DEFAULT);
}

void ms_rtable_init(struct ms_rtable *rt)
{
    memset(rt, 0, sizeof(*rt));
}

void ms_rtable_fini(struct ms_rtable *rt)
{
    for (size_t i = 0; i < rt->nslots; i++)
        ms_free(rt->regions[i].chunks);
    ms_free(rt->regions);
    ms_free(rt->index);
    memset(rt, 0, sizeof(*rt));
}

static int key_cmp(uint32_t ta, uint64_t ba, uint32_t tb, uint64_t bb)
{
    if (ta != tb)
        return ta < tb ? -1 : 1;
    if (ba != bb)
        return ba < bb ? -1 : 1;
    return 0;
}

/* First index position whose key is >= (task, base). */
static size_t index_lower(const struct ms_rtable *rt, uint32_t task, uint64_t base)
{
    size_t lo = 0, hi = rt->nindex;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(rt->index[mid].task, rt->index[mid].base, task, base) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t region_span(const struct ms_region *r)
{
    return MS_ROUND_UP(r->size, MS_GRAN);
}

int ms_region_add(struct ms_rtable *rt, uint32_t task, uint64_t base, uint64_t size,
                  enum ms_region_kind kind, uint64_t chunk_bytes, uint32_t *out_region)
{
    if (size == 0 || (unsigned)kind >= MS_RK_COUNT)
        return MS_E_INVAL;
    if (size > UINT64_MAX - MS_GRAN)
        return MS_E_INVAL;
    uint64_t span = MS_ROUND_UP(size, MS_GRAN);
    if (base > UINT64_MAX - span)
        return MS_E_INVAL;
    if (chunk_bytes == 0)
        chunk_bytes = ms_chunk_bytes_for(size);
    if (chunk_bytes % MS_GRAN != 0)
        return MS_E_INVAL;
    uint64_t nchunks64 = (span + chunk_bytes - 1) / chunk_bytes;
    if (nchunks64 > UINT32_MAX)
        return MS_E_INVAL;

    /* Overlap with the neighbours in the sorted index (same task only). */
    size_t pos = index_lower(rt, task, base);
    if (pos < rt->nindex && rt->index[pos].task == task) {
        const struct ms_region *nx = &rt->regions[rt->index[pos].region];
        if (nx->base < base + span)
            return MS_E_OVERLAP;
    }
    if (pos > 0 && rt->index[pos - 1].task == task) {
        const struct ms_region *pv = &rt->regions[rt->index[pos - 1].region];
        if (pv->base + region_span(pv) > base)
            return MS_E_OVERLAP;
    }

    /* Reserve everything before changing anything. */
    size_t slot = rt->nslots;
    for (size_t i = 0; i < rt->nslots; i++) {
        if (!rt->regions[i].live) {
            slot = i;
            break;
        }
    }
    if (slot == rt->nslots) {
        if (rt->nslots >= UINT32_MAX)
            return MS_E_NOMEM;
        int e = ms_grow((void **)&rt->regions, &rt->capslots, rt->nslots + 1, sizeof(*rt->regions));
        if (e)
            return e;
    }
    int e = ms_grow((void **)&rt->index, &rt->capindex, rt->nindex + 1, sizeof(*rt->index));
    if (e)
        return e;
    struct ms_chunk *chunks = ms_calloc((size_t)nchunks64, sizeof(*chunks));
    if (!chunks)
        return MS_E_NOMEM;

    for (uint64_t i = 0; i < nchunks64; i++) {
        uint64_t off = i * chunk_bytes;
        chunks[i].bytes = MS_MIN(chunk_bytes, span - off);
        chunks[i].state = MS_CS_EMPTY;
    }
    if (slot == rt->nslots) {
        rt->nslots++;
        rt->regions[slot].chunks = NULL;
    }
    struct ms_region *r = &rt->regions[slot];
    ms_free(r->chunks); /* a dead slot keeps no chunks, but be safe */
    r->base = base;
    r->size = size;
    r->host = NULL;
    r->amap = false;
    r->chunks = chunks;
    r->nchunks = (uint32_t)nchunks64;
    r->task = task;
    r->kind = (uint8_t)kind;
    r->live = true;
    r->nready = r->nclean = r->pins_all = 0;
    r->used_all = 0;

    memmove(&rt->index[pos + 1], &rt->index[pos], (rt->nindex - pos) * sizeof(*rt->index));
    rt->index[pos] = (struct ms_rindex){.task = task, .region = (uint32_t)slot, .base = base};
    rt->nindex++;
    rt->count[MS_CS_EMPTY] += nchunks64;
    rt->live_regions++;
    if (out_region)
        *out_region = (uint32_t)slot;
    return MS_OK;
}

int ms_region_mark_host(struct ms_rtable *rt, uint32_t region)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r || !r->live)
        return MS_E_NOTFOUND;
    for (uint32_t k = 0; k < r->nchunks; k++)
        if (r->chunks[k].state != MS_CS_EMPTY)
            return MS_E_STATE;
    for (uint32_t k = 0; k < r->nchunks; k++)
        r->chunks[k].state = MS_CS_HOST;
    rt->count[MS_CS_EMPTY] -= r->nchunks;
    rt->count[MS_CS_HOST] += r->nchunks;
    return MS_OK;
}

int ms_chunk_mark_host(struct ms_rtable *rt, ms_chunk_id id, uint64_t host)
{
    struct ms_region *r = ms_region_get(rt, MS_CHUNK_REGION(id));
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!r || !r->live || !c)
        return MS_E_NOTFOUND;
    if (!r->amap || host == 0)
        return MS_E_INVAL;
    if (c->state != MS_CS_EMPTY)
        return MS_E_STATE;
    c->host = host;
    c->state = MS_CS_HOST;
    rt->count[MS_CS_EMPTY]--;
    rt->count[MS_CS_HOST]++;
    return MS_OK;
}

int ms_region_remove(struct ms_rtable *rt, uint32_t region)
{
    struct ms_region *r = ms_region_get(rt, region);
    if (!r)
        return MS_E_NOTFOUND;
    for (uint32_t i = 0; i < r->nchunks; i++) {
        uint8_t s = r->chunks[i].state;
        if (s != MS_CS_EMPTY && s != MS_CS_HOST)
            return MS_E_BUSY;
    }
    size_t pos = index_lower(rt, r->task, r->base);
    if (pos >= rt->nindex || rt->index[pos].region != region)
        return MS_E_STATE; /* I3 broken: refuse rather than corrupt further */
    memmove(&rt->index[pos], &rt->index[pos + 1], (rt->nindex - pos - 1) * sizeof(*rt->index));
    rt->nindex--;
    for (uint32_t i = 0; i < r->nchunks; i++) {
        rt->count[r->chunks[i].state]--;
        rt->bare -= r->chunks[i].bare != 0; /* their addresses go with the region */
    }
    ms_free(r->chunks);
    memset(r, 0, sizeof(*r));
    rt->live_regions--;
    /* Trim trailing dead slots so nslots stays small. */
    while (rt->nslots > 0 && !rt->regions[rt->nslots - 1].live)
        rt->nslots--;
    return MS_OK;
}

int ms_rtable_lookup(const struct ms_rtable *rt, uint32_t task, uint64_t addr, uint32_t *out_region,
                     uint32_t *out_chunk)
{
    /* The candidate is the last region of `task` whose base is <= addr. */
    size_t pos = index_lower(rt, task, addr);
    if (pos < rt->nindex && rt->index[pos].task == task && rt->index[pos].base == addr) {
        /* exact hit on a base */
    } else if (pos > 0) {
        pos--;
    } else {
        return MS_E_NOTFOUND;
    }
    const struct ms_rindex *ix = &rt->index[pos];
    if (ix->task != task)
        return MS_E_NOTFOUND;
    const struct ms_region *r = &rt->regions[ix->region];
    if (addr < r->base || addr - r->base >= region_span(r))
        return MS_E_NOTFOUND;
    if (out_region)
        *out_region = ix->region;
    if (out_chunk)
        *out_chunk = ms_region_chunk_at(r, addr - r->base);
    return MS_OK;
}

void ms_rtable_span(const struct ms_rtable *rt, uint32_t task, uint64_t *lo, uint64_t *hi)
{
    size_t n = rt->nindex;
    /* A table of one task (the shim's): its ends, without a search. */
    size_t a = n && rt->index[0].task == task ? 0 : index_lower(rt, task, 0);
    size_t b = n && rt->index[n - 1].task == task ? n
               : task == UINT32_MAX               ? n
                                                  : index_lower(rt, task + 1, 0);
    if (a >= b || rt->index[a].task != task) {
        *lo = *hi = 0;
        return;
    }
    /* Regions of a task do not overlap (I2): the last by base ends last. */
    const struct ms_rindex *last = &rt->index[b - 1];
    *lo = rt->index[a].base;
    uint64_t end = last->base + region_span(&rt->regions[last->region]);
    *hi = end < last->base ? UINT64_MAX : end; /* a region at the top of the address space */
}

int ms_rtable_lookup_next(const struct ms_rtable *rt, uint32_t task, uint64_t addr,
                          uint32_t *out_region)
{
    if (ms_rtable_lookup(rt, task, addr, out_region, NULL) == MS_OK)
        return MS_OK;
    size_t pos = index_lower(rt, task, addr);
    if (pos >= rt->nindex || rt->index[pos].task != task)
        return MS_E_NOTFOUND;
    *out_region = rt->index[pos].region;
    return MS_OK;
}

uint32_t ms_region_chunk_at(const struct ms_region *r, uint64_t offset)
{
    /* All chunks but the last have the first chunk's size. */
    uint64_t cb = r->chunks[0].bytes;
    uint64_t idx = offset / cb;
    return idx >= r->nchunks ? r->nchunks - 1 : (uint32_t)idx;
}

uint64_t ms_region_chunk_offset(const struct ms_region *r, uint32_t idx)
{
    return (uint64_t)idx * r->chunks[0].bytes;
}

int ms_chunk_apply(struct ms_rtable *rt, ms_chunk_id id, enum ms_chunk_event ev)
{
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!c || (unsigned)ev >= MS_CE_COUNT)
        return MS_E_INVAL;
    uint8_t from = c->state;
    if (from >= MS_CS_COUNT)
        return MS_E_STATE;
    uint8_t to = next_state[from][ev];
    if (to == BAD)
        return MS_E_STATE;
    struct ms_region *r = &rt->regions[MS_CHUNK_REGION(id)];
    if (ms_chunk_pins(r, c) > 0 &&
        (ev == MS_CE_EVICT_START || ev == MS_CE_DROP || ev == MS_CE_DISCARD))
        return MS_E_BUSY;
    bool was = ms_chunk_state_resident(from), is = ms_chunk_state_resident(to);
    if (was && !is)
        rt->resident_bytes -= c->bytes;
    else if (!was && is)
        rt->resident_bytes += c->bytes;
    rt->count[from]--;
    rt->count[to]++;
    r->nready += (uint32_t)ms_chunk_state_ready(to) - (uint32_t)ms_chunk_state_ready(from);
    r->nclean += (uint32_t)(to == MS_CS_CLEAN) - (uint32_t)(from == MS_CS_CLEAN);
    c->state = to;
    if (!is) {
        c->phys = 0;
        c->event = 0;
    }
    if (ev == MS_CE_POP_START || ev == MS_CE_MAP_FRESH || ev == MS_CE_TOUCH)
        c->last_use = ++rt->clock;
    /* The hash recorded at population survives TOUCH: the executor compares against it to find
     * chunks that were touched but not changed. No host copy, no reference hash. */
    if (ev == MS_CE_MAP_FRESH || ev == MS_CE_DISCARD || ev == MS_CE_POP_FAIL)
        c->hash = 0;
    if (ev == MS_CE_EVICT_DONE)
        c->hosted = 1;
    else if (ev == MS_CE_DISCARD)
        c->hosted = 0;
    return MS_OK;
}

struct ms_region *ms_region_whole_ends(struct ms_rtable *rt, const ms_chunk_id *ids, size_t n)
{
    if (!n || MS_CHUNK_INDEX(ids[0]) != 0)
        return NULL;
    uint32_t reg = MS_CHUNK_REGION(ids[0]);
    struct ms_region *r = ms_region_get(rt, reg);
    if (!r || n < r->nchunks || ids[r->nchunks - 1] != MS_CHUNK_ID(reg, r->nchunks - 1))
        return NULL;
    return r;
}

struct ms_region *ms_region_whole(struct ms_rtable *rt, const ms_chunk_id *ids, size_t n)
{
    struct ms_region *r = ms_region_whole_ends(rt, ids, n);
    if (!r)
        return NULL;
    uint32_t reg = MS_CHUNK_REGION(ids[0]);
    /* Both ends match: the middle, without an early exit (the compiler may vectorize it). */
    uint64_t diff = 0;
    for (uint32_t k = 1; k + 1 < r->nchunks; k++)
        diff |= ids[k] ^ MS_CHUNK_ID(reg, k);
    return diff ? NULL : r;
}

int ms_region_touch_all(struct ms_rtable *rt, struct ms_region *r)
{
    if (!ms_region_all_ready(r))
        return MS_E_STATE;
    for (uint32_t k = 0; r->nclean && k < r->nchunks; k++)
        if (r->chunks[k].state == MS_CS_CLEAN)
            (void)ms_chunk_touch(rt, r, &r->chunks[k]);
    r->used_all = ++rt->clock;
    return MS_OK;
}

int ms_region_pin_all(struct ms_region *r)
{
    /* Resident: ready, or moving (IN, OUT). Pinning comes after admission, when all are ready;
     * a moving chunk could not be admitted, so readiness is the check. */
    if (!ms_region_all_ready(r))
        return MS_E_STATE;
    r->pins_all++;
    return MS_OK;
}

int ms_region_unpin_all(struct ms_region *r)
{
    if (!r->pins_all)
        return MS_E_STATE;
    r->pins_all--;
    return MS_OK;
}

uint64_t ms_rtable_tick(struct ms_rtable *rt)
{
    return ++rt->clock;
}

uint64_t ms_rtable_footprint(const struct ms_rtable *rt, uint32_t task)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < rt->nslots; i++) {
        const struct ms_region *r = &rt->regions[i];
        if (r->live && (task == UINT32_MAX || r->task == task))
            sum += region_span(r);
    }
    return sum;
}

#define FAIL(n, ...)                                                                               \
    do {                                                                                           \
        if (why)                                                                                   \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        return (n);                                                                                \
    } while (0)

int ms_rtable_check(const struct ms_rtable *rt, char *why, size_t whylen)
{
    uint64_t resident = 0, counts[MS_CS_COUNT] = {0}, live = 0, bare = 0;
    for (size_t i = 0; i < rt->nslots; i++) {
        const struct ms_region *r = &rt->regions[i];
        if (!r->live)
            continue;
        live++;
        if (r->size == 0 || r->nchunks == 0 || !r->chunks)
            FAIL(1, "I1: region %zu is empty", i);
        uint64_t sum = 0;
        uint32_t nready = 0, nclean = 0, nres = 0;
        for (uint32_t k = 0; k < r->nchunks; k++) {
            const struct ms_chunk *c = &r->chunks[k];
            if (c->bytes == 0 || c->bytes % MS_GRAN != 0)
                FAIL(1, "I1: region %zu chunk %u has %llu bytes", i, k,
                     (unsigned long long)c->bytes);
            if (k + 1 < r->nchunks && c->bytes != r->chunks[0].bytes)
                FAIL(1, "I1: region %zu chunk %u is not full size", i, k);
            sum += c->bytes;
            if (c->state >= MS_CS_COUNT)
                FAIL(4, "I4: region %zu chunk %u has state %u", i, k, c->state);
            counts[c->state]++;
            nready += ms_chunk_state_ready(c->state);
            nclean += c->state == MS_CS_CLEAN;
            nres += ms_chunk_state_resident(c->state);
            if (ms_chunk_state_resident(c->state))
                resident += c->bytes;
            else if (c->pins)
                FAIL(7, "I7: region %zu chunk %u is pinned but %s", i, k,
                     ms_chunk_state_name(c->state));
            if (r->amap && !c->host &&
                (c->state == MS_CS_HOST || c->state == MS_CS_IN || c->state == MS_CS_OUT))
                FAIL(9, "I9: always-mapped region %zu chunk %u is %s without a host chunk", i, k,
                     ms_chunk_state_name(c->state));
            if (c->bare && (!r->amap || !c->host || c->state != MS_CS_HOST))
                FAIL(10, "I10: region %zu chunk %u is bare but %s%s", i, k,
                     ms_chunk_state_name(c->state), r->amap ? "" : " (not always mapped)");
            bare += c->bare != 0;
        }
        if (nready != r->nready || nclean != r->nclean)
            FAIL(11, "I11: region %zu counts %u ready and %u clean, chunks say %u and %u", i,
                 r->nready, r->nclean, nready, nclean);
        if (r->pins_all && nres != r->nchunks)
            FAIL(11, "I11: region %zu is pinned whole with %u of %u chunks resident", i, nres,
                 r->nchunks);
        if (sum != region_span(r))
            FAIL(1, "I1: region %zu chunks cover %llu of %llu bytes", i, (unsigned long long)sum,
                 (unsigned long long)region_span(r));
    }
    if (rt->nindex != live)
        FAIL(3, "I3: index has %zu entries for %llu live regions", rt->nindex,
             (unsigned long long)live);
    for (size_t p = 0; p < rt->nindex; p++) {
        const struct ms_rindex *ix = &rt->index[p];
        if (ix->region >= rt->nslots || !rt->regions[ix->region].live)
            FAIL(3, "I3: index entry %zu names dead slot %u", p, ix->region);
        const struct ms_region *r = &rt->regions[ix->region];
        if (r->task != ix->task || r->base != ix->base)
            FAIL(3, "I3: index entry %zu disagrees with its region", p);
        if (p > 0) {
            const struct ms_rindex *pv = &rt->index[p - 1];
            if (key_cmp(pv->task, pv->base, ix->task, ix->base) >= 0)
                FAIL(3, "I3: index not sorted at %zu", p);
            const struct ms_region *pr = &rt->regions[pv->region];
            if (pv->task == ix->task && pr->base + region_span(pr) > r->base)
                FAIL(2, "I2: regions %u and %u of task %u overlap", pv->region, ix->region,
                     ix->task);
        }
    }
    if (resident != rt->resident_bytes)
        FAIL(5, "I5: resident_bytes %llu, chunks say %llu", (unsigned long long)rt->resident_bytes,
             (unsigned long long)resident);
    for (int s = 0; s < MS_CS_COUNT; s++)
        if (counts[s] != rt->count[s])
            FAIL(6, "I6: count[%s] %llu, chunks say %llu", state_names[s],
                 (unsigned long long)rt->count[s], (unsigned long long)counts[s]);
    if (live != rt->live_regions)
        FAIL(8, "I8: live_regions %llu, slots say %llu", (unsigned long long)rt->live_regions,
             (unsigned long long)live);
    if (bare != rt->bare)
        FAIL(10, "I10: bare count %llu, chunks say %llu", (unsigned long long)rt->bare,
             (unsigned long long)bare);
    return 0;
}

void ms_region_clear_marks(struct ms_rtable *rt, uint32_t region)
{
    struct ms_region *r = ms_region_get(rt, region);
    for (uint32_t k = 0; r && k < r->nchunks; k++)
        r->chunks[k].mark = 0;
}

void ms_rtable_clear_marks(struct ms_rtable *rt)
{
    for (size_t i = 0; i < rt->nslots; i++)
        if (rt->regions[i].live)
            ms_region_clear_marks(rt, (uint32_t)i);
}
