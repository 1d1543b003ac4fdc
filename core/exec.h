/*
 * exec.h - the executor: carries a migration plan out through the GPU seam.
 *
 * Design
 *   Walks the plan in order. An eviction of a chunk known clean (CLEAN, or DIRTY whose GPU hash
 *   still equals the hash recorded at population, when opts.hash_clean) is a drop: unmap, no copy.
 *   With opts.verify_clean a CLEAN chunk counts as known clean only when its hash matches too.
 *   Hashes are taken in batches, one seam call each: the victims' before any copy is issued (a
 *   hash that synchronizes in the middle of the eviction stream would serialize the directions),
 *   the populated chunks' reference hashes after all populations settled.
 *   Any other eviction queues a device->host copy on MS_STREAM_OUT and records an event; the chunk
 *   is OUT until the event completes, then it is unmapped (EVICT_DONE). A population of a HOST
 *   chunk maps it, queues a host->device copy on MS_STREAM_IN and records an event (IN until it
 *   completes, then CLEAN); an EMPTY chunk is only mapped (MAP_FRESH -> DIRTY).
 *
 *   Pipelined (opts.pipelined): all of the plan's evictions are issued first (in plan order)
 *   and stay in flight; then the populations run in plan order, and before one would exceed the
 *   budget the executor waits for the oldest evictions in flight and unmaps them. So the two
 *   directions overlap and device memory is reused as soon as its old contents are out. Not
 *   pipelined: steps in plan order, each copy waited for before the next step. Pipelined drops
 *   (clean victims) are deferred: a population needing room takes a pending drop first (no
 *   wait), then the oldest copy in flight; the rest are dropped at the end.
 *   At return every chunk the plan touched is settled (HOST, CLEAN or DIRTY).
 *
 *   The host backing pointer of a chunk is region->host + chunk offset (NULL host is allowed
 *   only for backends that keep their own, like the simulator). An always-mapped region
 *   (region.amap) has none: each chunk's host side is its host chunk (chunk.host), created
 *   for a victim that has none before the plan's first copy, and mapped at the chunk's
 *   address whenever the chunk is off the device (the seam's map and unmap swap them).
 *
 * Errors
 *   The first failing seam call stops the plan: the executor settles everything in flight
 *   (waits each pending copy; a failed eviction copy leaves its chunk DIRTY and mapped, a failed
 *   population unmaps and returns the chunk to HOST), returns the error, and leaves the table
 *   consistent (ms_rtable_check passes) with no mapping leaked. Steps already done stay done.
 *
 * Ownership: borrows everything; no allocation on the eviction path beyond a pending-list array
 * sized once per call. No locking: the caller serializes.
 */
#ifndef MS_EXEC_H
#define MS_EXEC_H

#include "gpu.h"
#include "plan.h"
#include "region.h"

struct ms_exec_opts {
    bool pipelined;
    bool hash_clean; /* use gpu->hash to drop unchanged DIRTY chunks instead of copying */
    /* A CLEAN chunk may have been written by a command that did not name it (a missed
     * prediction on always-mapped memory): drop it only when its GPU hash still equals the one
     * taken at population (needs hash_clean and a hash backend); otherwise copy it. */
    bool verify_clean;
    /* An eviction (or drop) of an always-mapped chunk leaves its address mapped to nothing: the
     * chunk is bare (region.h I10) until ms_exec_map_bare maps its host chunk there, which the
     * caller must do before any command may touch it. For a caller whose process runs no GPU
     * work meanwhile (a task stopped by its daemon): the host mappings then come after the
     * eviction has freed the device memory, off the switch's critical path, and a chunk that
     * is populated again before that is never host-mapped at all. */
    bool defer_host_map;
};

struct ms_exec_stats {
    uint64_t bytes_in;      /* host->device copied */
    uint64_t bytes_out;     /* device->host copied */
    uint64_t bytes_dropped; /* evicted without a copy */
    uint64_t bytes_fresh;   /* mapped without a copy (never written) */
    uint64_t bare;          /* evicted chunks left bare (defer_host_map) */
    uint64_t maps, unmaps, copies, hashes;
    uint64_t host_chunks, host_chunk_bytes; /* host chunks created (always-mapped regions) */
    uint64_t elapsed_ns;                    /* gpu->now_ns() at return minus at entry */
    /* Where elapsed_ns went, by the seam call it was spent in (gpu->now_ns() around each call):
     * hash (the GPU hash, which waits for its kernel), issue (copy and record: queuing the
     * copies), wait (waiting for copies to complete), map, unmap. What is left of elapsed_ns
     * is the executor's own bookkeeping. A step that stalls shows here in the call that
     * stalled. */
    uint64_t hash_ns, issue_ns, wait_ns, map_ns, unmap_ns;
};

/* Execute plan p against rt with at most `budget` bytes resident. Stats are added to *st. */
int ms_exec_plan(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint64_t budget,
                 const struct ms_plan *p, const struct ms_exec_opts *opts,
                 struct ms_exec_stats *st);

/*
 * Release every resident chunk of a region without saving data (the region is being freed):
 * unmaps, DISCARDs each chunk, then removes the region. Pinned or moving chunks: MS_E_BUSY.
 */
int ms_exec_free_region(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region);

/*
 * Map the host chunks of up to `max` bare chunks (0: all) at their addresses (defer_host_map
 * above), in table order; each one mapped stops being bare. Returns how many are still bare
 * (rt->bare), or the seam's first error (the chunks done stay done; the failed one stays bare).
 * Time goes to st->map_ns when st is not NULL.
 */
int ms_exec_map_bare(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, size_t max,
                     struct ms_exec_stats *st);

/*
 * Map every chunk of a new always-mapped region (all EMPTY) to a new host chunk: the region
 * starts off the device, its bytes in host memory (each chunk HOST). All-or-nothing: on error
 * the region is as it was. Errors: MS_E_NOTFOUND, MS_E_INVAL (not amap, or a backend without
 * host chunks), MS_E_STATE (a chunk not EMPTY), MS_E_NOMEM, the seam's error.
 */
int ms_exec_map_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                     struct ms_exec_stats *st);

/*
 * Take the host chunks off an always-mapped region so that they outlive it (an application VMM
 * mapping being unmapped: its handle keeps its contents for a later mapping). Every chunk must
 * be EMPTY or HOST and unpinned (the caller evicted the resident ones), else MS_E_BUSY and
 * nothing changes. Each HOST chunk's host chunk is unmapped from its address and its token
 * stored in tokens[k] (0 for an EMPTY chunk); the chunk goes HOST -> EMPTY (DISCARD) holding no
 * host chunk, so the region can then be freed (ms_exec_free_region) without releasing them.
 * All-or-nothing: on a seam failure the host chunks unmapped so far are mapped back and the
 * region is as it was. Errors: MS_E_NOTFOUND, MS_E_INVAL (not amap, or a backend without host
 * chunks), MS_E_BUSY, the seam's error.
 */
int ms_exec_detach_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                        uint64_t *tokens);

/*
 * The reverse, for a new always-mapped region: every chunk k with tokens[k] != 0 gets that host
 * chunk (detached from an earlier region, its bytes the chunk's: the caller matches sizes)
 * mapped at its address and goes EMPTY -> HOST holding it (I9); chunks with a 0 token stay as
 * they are. All-or-nothing: on error nothing is mapped and the tokens are still the caller's.
 * Errors: MS_E_NOTFOUND, MS_E_INVAL (not amap, a backend without host chunks), MS_E_STATE (a
 * chunk to take a token is not EMPTY), the seam's error.
 */
int ms_exec_attach_host(struct ms_rtable *rt, const struct ms_gpu_ops *gpu, uint32_t region,
                        const uint64_t *tokens);

#endif /* MS_EXEC_H */
