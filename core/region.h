/*
 * region.h - the region table: every task's virtual allocations, cut into chunks, and the chunk
 * state machine.
 *
 * Design
 *   A region is one allocation of one task: a reserved virtual address range [base, base+size)
 *   that keeps its addresses for its whole life. It is cut into chunks; a chunk is backed by one
 *   physical handle while resident, so the chunk is the unit of eviction. Chunks are multiples of
 *   MS_GRAN (2 MiB). ms_chunk_bytes_for() picks the chunk size: regions up to 128 MiB are one
 *   chunk; larger regions use 64 MiB chunks (the last one shorter, still a multiple of 2 MiB),
 *   because 64-128 MiB runs reach the link's two-way limit (docs/h200-measurements.md).
 *   ms_chunk_bytes_with() is the same rule around another chunk size (the shim's MSCHED_CHUNK):
 *   smaller chunks let a prediction below the allocation (kernel templates) move less of a big
 *   region, at more mapping work per byte. The size of each region's chunks is fixed when it is
 *   added, and travels with it (the daemon's ADD carries it).
 *
 *   Virtual addresses belong to a process, so lookups are by (task, address). The table is one
 *   per shim (one task) or one per daemon/simulator (all tasks). Region slots are stable for the
 *   region's life; a freed slot may be reused by a later region.
 *
 * Chunk states (see docs/state-machine.md for the diagram)
 *     EMPTY  never written; no device memory, no host copy
 *     HOST   evicted; data lives in the host backing store only
 *     IN     moving in: device memory mapped, host->device copy in flight
 *     CLEAN  resident, equal to the host copy
 *     DIRTY  resident, may differ from the host copy (or there is none)
 *     OUT    moving out: device->host copy in flight, device memory still mapped
 *   Resident states (holding device memory): IN, CLEAN, DIRTY, OUT.
 *
 *   event        from -> to
 *   MAP_FRESH    EMPTY -> DIRTY    map without copy (contents undefined until written)
 *   POP_START    HOST  -> IN       map, copy host->device issued
 *   POP_DONE     IN    -> CLEAN
 *   POP_FAIL     IN    -> HOST     copy failed; caller unmapped
 *   TOUCH        CLEAN -> DIRTY    a command that may write it was submitted (DIRTY stays DIRTY)
 *   EVICT_START  DIRTY -> OUT      copy device->host issued
 *   EVICT_DONE   OUT   -> HOST     copy finished; caller unmapped
 *   EVICT_FAIL   OUT   -> DIRTY    copy failed; chunk stays resident
 *   DROP         CLEAN -> HOST     unmap without copy: the host copy is current
 *                DIRTY -> HOST     likewise, when the caller proved it unchanged (GPU hash)
 *   DISCARD      EMPTY|HOST|CLEAN|DIRTY -> EMPTY   contents are dead (region freed); caller
 *                unmapped any device memory first
 *   Any other (state, event) pair is refused with MS_E_STATE and changes nothing.
 *   A pinned chunk (ms_chunk_pins > 0: queued or in-flight GPU work uses it) refuses
 *   EVICT_START, DROP and DISCARD with MS_E_BUSY.
 *
 * Invariants (ms_rtable_check() verifies all of them; tests call it after every step)
 *   I1  every live region has size > 0, base % MS_GRAN == 0 is NOT required, but
 *       sum(chunk bytes) == round_up(size, MS_GRAN) and every chunk's bytes % MS_GRAN == 0
 *   I2  regions of one task do not overlap
 *   I3  the sorted lookup index lists exactly the live regions, ordered by (task, base)
 *   I4  every chunk's state is a valid ms_chunk_state
 *   I5  rt->resident_bytes == sum of bytes of chunks in resident states
 *   I6  rt->count[s] == number of chunks in state s, for every s
 *   I7  pins > 0 only on resident chunks
 *   I8  rt->live_regions == number of live regions
 *   I9  in an always-mapped region (amap) every chunk in HOST, IN or OUT has a host chunk
 *       (host != 0): its bytes live there, and while it is not resident its address is mapped
 *       to it. EMPTY chunks of such a region are mapped nowhere; the edge maps every chunk
 *       (device or host) before a command can touch the region (docs/engine.md).
 *   I10 a bare chunk is HOST, in an always-mapped region, with a host chunk; rt->bare == the
 *       number of bare chunks. Bare chunks are the one exception to I9's "mapped to it": the
 *       edge lets no command run while rt->bare > 0 (exec.h, defer_host_map).
 *   I11 every region's nready and nclean count its chunks in CLEAN or DIRTY and in CLEAN;
 *       pins_all > 0 only while every chunk of the region is resident (with I7: a pinned
 *       chunk, by its own pins or its region's, is resident)
 *
 * Ownership and locking
 *   The table owns its regions' chunk arrays. region->host (the pinned backing store),
 *   chunk->phys (the physical handle token) and chunk->host (the host chunk token) belong to
 *   the edge that set them; the table never dereferences them. No locking inside: the caller
 * serializes.
 */
#ifndef MS_REGION_H
#define MS_REGION_H

#include "ms.h"

#include <stdbool.h>

enum ms_region_kind {
    MS_RK_DEVICE = 0, /* cuMemAlloc family */
    MS_RK_ASYNC,      /* cuMemAllocAsync / pools */
    MS_RK_VMM,        /* the application's own cuMemCreate/cuMemMap */
    MS_RK_MANAGED,    /* cuMemAllocManaged */
    MS_RK_HOST,       /* host memory the device can reach (never evicted) */
    MS_RK_COUNT
};

enum ms_chunk_state {
    MS_CS_EMPTY = 0,
    MS_CS_HOST,
    MS_CS_IN,
    MS_CS_CLEAN,
    MS_CS_DIRTY,
    MS_CS_OUT,
    MS_CS_COUNT
};

enum ms_chunk_event {
    MS_CE_MAP_FRESH = 0,
    MS_CE_POP_START,
    MS_CE_POP_DONE,
    MS_CE_POP_FAIL,
    MS_CE_TOUCH,
    MS_CE_EVICT_START,
    MS_CE_EVICT_DONE,
    MS_CE_EVICT_FAIL,
    MS_CE_DROP,
    MS_CE_DISCARD,
    MS_CE_COUNT
};

struct ms_chunk {
    uint64_t bytes;    /* multiple of MS_GRAN */
    uint64_t phys;     /* physical handle token of the GPU seam; valid while resident */
    uint64_t host;     /* host chunk token of the GPU seam (0: none); always-mapped regions */
    uint64_t hash;     /* device content hash recorded at population (0: none); kept across
                        * TOUCH so an unchanged chunk can be dropped instead of copied */
    uint64_t event;    /* seam event of the copy in flight (IN, OUT) */
    uint64_t last_use; /* table clock at the last touch or population (LRU) */
    uint64_t mark;     /* scratch of the planner and the executor; meaningless between calls */
    uint32_t pins;     /* queued or in-flight GPU work using this chunk */
    uint8_t state;     /* enum ms_chunk_state */
    uint8_t hosted;    /* it was evicted since the region began (EVICT_DONE; DISCARD clears):
                        * the shim keeps a chunk's host copy for the region's life, so only a
                        * chunk that was never hosted costs new host memory when evicted */
    uint8_t bare;      /* HOST in an always-mapped region with its address mapped to nothing:
                        * evicted with ms_exec_opts.defer_host_map and not yet through
                        * ms_exec_map_bare (exec.h; I10). Set and cleared by the executor only */
};

struct ms_region {
    uint64_t base; /* first virtual address */
    uint64_t size; /* bytes the application asked for */
    void *host;    /* host backing store (edge-owned), may be NULL */
    struct ms_chunk *chunks;
    uint32_t nchunks;
    uint32_t task;
    uint8_t kind; /* enum ms_region_kind */
    bool amap;    /* always mapped: a chunk off the device is mapped to its host chunk */
    bool live;
    /* Summaries, so that a command naming every chunk of a big region (a weights buffer at
     * allocation granularity) is checked, touched and pinned once, not once per chunk (I11): */
    uint32_t nready;   /* chunks in CLEAN or DIRTY */
    uint32_t nclean;   /* chunks in CLEAN */
    uint32_t pins_all; /* pins held on every chunk at once: a chunk's pins are
                        * c->pins + pins_all (ms_chunk_pins) */
    uint64_t used_all; /* table clock at the last touch of every chunk at once: a chunk's last
                        * use is the later of c->last_use and this (ms_chunk_last_use) */
};

struct ms_rindex {
    uint32_t task;
    uint32_t region;
    uint64_t base;
};

struct ms_rtable {
    struct ms_region *regions; /* slots; !live ones are free */
    size_t nslots, capslots;
    struct ms_rindex *index; /* live regions sorted by (task, base) */
    size_t nindex, capindex;
    uint64_t resident_bytes;
    uint64_t count[MS_CS_COUNT];
    uint64_t live_regions;
    uint64_t clock; /* logical clock for last_use; advanced by ms_rtable_tick */
    uint64_t bare;  /* chunks with bare set (I10) */
    /* Where ms_exec_map_bare stopped (slot, chunk): the next call goes on from there, so that
     * mapping them a few at a time costs the table once, not once per call. A hint only. */
    size_t bare_slot;
    uint32_t bare_chunk;
};

/* Chunk size for a region of `size` bytes (see the Design note). */
uint64_t ms_chunk_bytes_for(uint64_t size);
/* The same rule with chunks of `chunk` bytes (rounded up to a multiple of MS_GRAN, at most
 * MS_CHUNK_MAX) in place of 64 MiB: a region up to twice that is one chunk.
 * ms_chunk_bytes_for(size) == ms_chunk_bytes_with(size, MS_CHUNK_DEFAULT). */
uint64_t ms_chunk_bytes_with(uint64_t size, uint64_t chunk);

void ms_rtable_init(struct ms_rtable *rt);
/* Frees everything the table owns; edge-owned pointers are not touched. */
void ms_rtable_fini(struct ms_rtable *rt);

/*
 * Add a region of `task`. chunk_bytes 0 picks ms_chunk_bytes_for(size); otherwise it must be a
 * non-zero multiple of MS_GRAN. All chunks start EMPTY. Errors: MS_E_INVAL (size 0, bad chunk
 * size, address overflow), MS_E_OVERLAP, MS_E_NOMEM. On error the table is unchanged.
 */
int ms_region_add(struct ms_rtable *rt, uint32_t task, uint64_t base, uint64_t size,
                  enum ms_region_kind kind, uint64_t chunk_bytes, uint32_t *out_region);

/*
 * Declare that a new region's contents already exist in its host backing (an application
 * mapping of memory that held data before): every chunk goes EMPTY -> HOST, so populating
 * copies it in. Only for a region whose chunks are all EMPTY (else MS_E_STATE, nothing
 * changes); MS_E_NOTFOUND for a dead or unknown slot. Not an event of the state machine: it
 * happens once, before the region is used.
 */
int ms_region_mark_host(struct ms_rtable *rt, uint32_t region);

/*
 * One EMPTY chunk of an always-mapped region was mapped to the host chunk `host` (a seam token,
 * not 0) by the caller: it goes EMPTY -> HOST holding that token (I9). MS_E_NOTFOUND for an
 * unknown chunk or dead region, MS_E_INVAL for a region that is not amap or a 0 token,
 * MS_E_STATE for a chunk that is not EMPTY; nothing changes on error. Like
 * ms_region_mark_host, not an event of the state machine: the chunk was never populated.
 */
int ms_chunk_mark_host(struct ms_rtable *rt, ms_chunk_id id, uint64_t host);

/*
 * Remove a region. Every chunk must be EMPTY or HOST (the caller unmapped resident ones):
 * otherwise MS_E_BUSY and nothing changes. MS_E_NOTFOUND for a dead or unknown slot.
 */
int ms_region_remove(struct ms_rtable *rt, uint32_t region);

/* NULL for a dead or unknown slot (inline: the launch gate looks up every chunk a command
 * names, several times). */
static inline struct ms_region *ms_region_get(struct ms_rtable *rt, uint32_t region)
{
    if (region >= rt->nslots || !rt->regions[region].live)
        return NULL;
    return &rt->regions[region];
}
static inline struct ms_chunk *ms_chunk_get(struct ms_rtable *rt, ms_chunk_id id)
{
    struct ms_region *r = ms_region_get(rt, MS_CHUNK_REGION(id));
    if (!r || MS_CHUNK_INDEX(id) >= r->nchunks)
        return NULL;
    return &r->chunks[MS_CHUNK_INDEX(id)];
}
/* Zero the marks (scratch) of one region's chunks, or of every live region's. */
void ms_region_clear_marks(struct ms_rtable *rt, uint32_t region);
void ms_rtable_clear_marks(struct ms_rtable *rt);

/* Region of `task` containing addr; MS_E_NOTFOUND if none. out_chunk may be NULL. */
int ms_rtable_lookup(const struct ms_rtable *rt, uint32_t task, uint64_t addr, uint32_t *out_region,
                     uint32_t *out_chunk);

/* [*lo, *hi): from the lowest base of task's regions to the end of its highest (both 0 when it
 * has none). An address outside it is in none of them: a launch scan refuses most words with
 * two comparisons, without a search. O(1) when the table holds only `task`, else O(log n). */
void ms_rtable_span(const struct ms_rtable *rt, uint32_t task, uint64_t *lo, uint64_t *hi);
/* The region of `task` containing addr, else the first of `task` starting above addr
 * (walking the regions that overlap a range: from its start, then from each one's end);
 * MS_E_NOTFOUND if none. */
int ms_rtable_lookup_next(const struct ms_rtable *rt, uint32_t task, uint64_t addr,
                          uint32_t *out_region);

/* Chunk index holding byte `offset` of region r (offset < round_up(size, MS_GRAN)). */
uint32_t ms_region_chunk_at(const struct ms_region *r, uint64_t offset);
/* Offset of chunk idx's first byte in region r. */
uint64_t ms_region_chunk_offset(const struct ms_region *r, uint32_t idx);

/* Apply a state-machine event (see the table above). MS_E_STATE / MS_E_BUSY on refusal. */
int ms_chunk_apply(struct ms_rtable *rt, ms_chunk_id id, enum ms_chunk_event ev);

/* True for IN, CLEAN, DIRTY, OUT. */
static inline bool ms_chunk_state_resident(enum ms_chunk_state s)
{
    return s == MS_CS_IN || s == MS_CS_CLEAN || s == MS_CS_DIRTY || s == MS_CS_OUT;
}
/* True for CLEAN and DIRTY: usable by GPU work now. */
static inline bool ms_chunk_state_ready(enum ms_chunk_state s)
{
    return s == MS_CS_CLEAN || s == MS_CS_DIRTY;
}
const char *ms_chunk_state_name(enum ms_chunk_state s);

/* TOUCH of a CLEAN or DIRTY chunk c of region r (every admitted command's, per chunk it
 * names), inline: exactly what ms_chunk_apply(rt, id, MS_CE_TOUCH) does for those states;
 * MS_E_STATE and no change for any other state. */
static inline int ms_chunk_touch(struct ms_rtable *rt, struct ms_region *r, struct ms_chunk *c)
{
    if (c->state == MS_CS_CLEAN) {
        rt->count[MS_CS_CLEAN]--;
        rt->count[MS_CS_DIRTY]++;
        r->nclean--;
        c->state = MS_CS_DIRTY;
    } else if (c->state != MS_CS_DIRTY) {
        return MS_E_STATE;
    }
    c->last_use = ++rt->clock;
    return MS_OK;
}

/* A chunk's pins: its own and those held on its whole region. */
static inline uint32_t ms_chunk_pins(const struct ms_region *r, const struct ms_chunk *c)
{
    return c->pins + r->pins_all;
}
/* A chunk's last use: its own touch or its whole region's, whichever came later. */
static inline uint64_t ms_chunk_last_use(const struct ms_region *r, const struct ms_chunk *c)
{
    return c->last_use > r->used_all ? c->last_use : r->used_all;
}

/*
 * Whole-region runs of a chunk set. ms_region_whole(rt, ids, n): the region whose chunks are
 * exactly ids[0 .. r->nchunks), in order (index 0 first), when n holds that many; NULL
 * otherwise (a partial run, another order, a dead region). O(nchunks) over the ids only, never
 * the chunks: what lets the operations below stand for a pass over them.
 */
struct ms_region *ms_region_whole(struct ms_rtable *rt, const ms_chunk_id *ids, size_t n);
/* Its first half: the region whose first and last chunk are ids[0] and ids[r->nchunks - 1],
 * the ids between not looked at (O(1)). The whole answer when ids is known strictly ascending
 * (core/predict.h, ms_chunk_set_whole). */
struct ms_region *ms_region_whole_ends(struct ms_rtable *rt, const ms_chunk_id *ids, size_t n);
/* Every chunk of r is CLEAN or DIRTY. */
static inline bool ms_region_all_ready(const struct ms_region *r)
{
    return r->nready == r->nchunks;
}
/* TOUCH every chunk of r at once (each CLEAN one goes DIRTY; the region's last use is now).
 * MS_E_STATE and no change unless every chunk is ready. */
int ms_region_touch_all(struct ms_rtable *rt, struct ms_region *r);
/* Pin every chunk of r with one count (pins_all) / drop one such pin. MS_E_STATE and no change
 * unless every chunk is ready (pin: what an admitted command's chunks are; a pinned chunk
 * cannot leave the device, so I11 holds while the pin does) or a whole-region pin is held
 * (unpin). */
int ms_region_pin_all(struct ms_region *r);
int ms_region_unpin_all(struct ms_region *r);

/* Advance the logical clock and return its new value. */
uint64_t ms_rtable_tick(struct ms_rtable *rt);

/* Total bytes (rounded to chunks) of all live regions of `task` (UINT32_MAX: all tasks). */
uint64_t ms_rtable_footprint(const struct ms_rtable *rt, uint32_t task);

/*
 * Check invariants I1-I10. Returns 0 when all hold, else the number of the first violated one;
 * a description is written to why (may be NULL).
 */
int ms_rtable_check(const struct ms_rtable *rt, char *why, size_t whylen);

#endif /* MS_REGION_H */
