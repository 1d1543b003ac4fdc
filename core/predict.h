/*
 * predict.h - from a command (kernel launch, copy, memset) to the memory it can touch.
 *
 * Design
 *   Kernels: the launch's raw parameter buffer is scanned for addresses inside the task's known
 *   regions. With a parameter layout (offset and size of each parameter, from
 *   cuFuncGetParamInfo), every 8-byte-aligned word inside a parameter of at least 8 bytes is a
 *   candidate: this covers plain pointers and pointers inside by-value structs. Without a layout,
 *   every 8-byte-aligned word of the buffer is a candidate. A candidate that falls inside a region
 *   references the whole region (allocation-granularity prediction: over-predicts, never
 *   under-predicts what the arguments name). Pointers stored in device memory cannot be seen:
 *   the caller marks such launches unbounded (see ms_pred.unbounded).
 *   Copies and memsets name their exact byte ranges; those map to the chunks they overlap.
 *
 *   Results are chunk lists in ascending (region, chunk) order with no duplicates, appended to a
 *   caller-owned ms_chunk_set.
 *
 * Ownership: ms_chunk_set owns its array; ms_chunk_set_fini frees it. No locking.
 */
#ifndef MS_PREDICT_H
#define MS_PREDICT_H

#include "region.h"

struct ms_param_layout {
    uint32_t offset;
    uint32_t size;
};

struct ms_launch {
    uint32_t task;
    const uint8_t *params; /* raw parameter bytes, packed as the driver lays them out */
    size_t params_len;
    const struct ms_param_layout *layout; /* may be NULL: scan the whole buffer */
    size_t nlayout;
};

struct ms_range {
    uint64_t addr;
    uint64_t bytes;
};

/*
 * A set of chunk ids. `asc` is a promise, never a guess: true only while ids[0..n) is strictly
 * ascending. The set's functions keep it (init, clear and normalize set it; an append keeps it
 * only when the id is above the last); code that writes ids[] or n directly must clear it unless
 * it only drops ids (a filter keeps the order). False says nothing, so a set built by hand
 * ({.ids = p, .n = k}) is safe. With it, whether ids[i..] starts with a whole region is two
 * comparisons (ms_chunk_set_whole) and normalizing an ordered set is free.
 */
struct ms_chunk_set {
    ms_chunk_id *ids;
    size_t n, cap;
    bool asc;
};

void ms_chunk_set_init(struct ms_chunk_set *s);
void ms_chunk_set_fini(struct ms_chunk_set *s);
void ms_chunk_set_clear(struct ms_chunk_set *s);
/* Append one id (duplicates allowed until ms_chunk_set_normalize). */
int ms_chunk_set_add(struct ms_chunk_set *s, ms_chunk_id id);
/* Append every chunk of region `region` (of rt), in order. MS_E_NOMEM leaves s as it was. */
int ms_chunk_set_add_region(struct ms_chunk_set *s, const struct ms_rtable *rt, uint32_t region);
/* Sort ascending and drop duplicates (free when s->asc). */
void ms_chunk_set_normalize(struct ms_chunk_set *s);
/* The region whose chunks, all of them, are ids[i..i + nchunks) of s, or NULL: what
 * ms_region_whole answers for s->ids + i, in two comparisons when s->asc (builds with
 * MS_CHECK_SETS, the sanitizer builds, check the middle too and abort on a broken promise). */
struct ms_region *ms_chunk_set_whole(struct ms_rtable *rt, const struct ms_chunk_set *s, size_t i);
/* Grow an array of chunk sets (*sets, *cap of them) to hold at least n; new sets are empty.
 * MS_E_NOMEM leaves it as it was. */
int ms_chunk_sets_reserve(struct ms_chunk_set **sets, size_t *cap, size_t n);
/* Binary search; the set must be normalized. */
bool ms_chunk_set_has(const struct ms_chunk_set *s, ms_chunk_id id);
/* Sum of the chunks' bytes. */
uint64_t ms_chunk_set_bytes(const struct ms_chunk_set *s, struct ms_rtable *rt);

/*
 * Chunks of every region a launch's parameters reference, appended to out and normalized.
 * Returns the number of distinct regions referenced (>= 0) or MS_E_NOMEM / MS_E_INVAL
 * (a layout entry outside the buffer).
 */
int ms_predict_launch(const struct ms_rtable *rt, const struct ms_launch *l,
                      struct ms_chunk_set *out);

/*
 * Chunks overlapping [r.addr, r.addr + r.bytes) of `task`, appended to out and normalized.
 * Bytes outside every region are ignored (host memory, other allocators). Returns the number of
 * bytes that fell inside known regions, or MS_E_NOMEM. A zero-length range adds nothing.
 */
int64_t ms_predict_range(const struct ms_rtable *rt, uint32_t task, struct ms_range r,
                         struct ms_chunk_set *out);

/*
 * The part of `need` a command can have resident under `cap` bytes, into *out (cleared first,
 * normalized): every chunk of a region that is not always mapped, and every EMPTY chunk (mapped
 * nowhere yet), since those must be resident; then
 * the always-mapped chunks already resident in regions smaller than cap / 2 (kept: nothing
 * moves for them); then region by region, smallest first (activations and small buffers before
 * a big one whose rest runs from the host), a big region's resident chunks before its others,
 * while the total fits cap; a big region's non-resident chunks only into memory nothing else
 * holds (rt->resident_bytes), since evicting other regions for it pushes out what the next
 * commands need. So a command naming more than cap finds the same set resident at its next
 * launch instead of churning it (on the H200 a first-fit set made a one-buffer Llama decode move
 * 16 TB in 29222 faults). Errors: MS_E_INVAL (NULL, or need == out), MS_E_NOMEM.
 */
int ms_chunk_set_fit(struct ms_rtable *rt, const struct ms_chunk_set *need, uint64_t cap,
                     struct ms_chunk_set *out);

#endif /* MS_PREDICT_H */
