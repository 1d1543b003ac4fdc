/*
 * slab.h - small allocations packed into shared 2 MiB regions.
 *
 * Design
 *   Every region costs at least MS_GRAN (2 MiB) of device memory and of the budget, and moves as
 *   one chunk at least. A program that makes thousands of small allocations (XLA's platform
 *   allocator, CuPy's pool, CUDA C programs) would otherwise hold 2 MiB per 4-byte scalar: its
 *   footprint under msched many times its real one, and a budget below that footprint moving
 *   2 MiB for every small buffer a kernel names. The engine therefore places allocations of up
 *   to MS_SLAB_MAX bytes in slabs: ordinary one-chunk regions of MS_GRAN bytes, cut into blocks
 *   of whole granules (MS_SLAB_ALIGN bytes, the alignment cuMemAlloc gives), first fit. The
 *   driver packs small allocations into shared pages the same way.
 *
 *   This file is the slabs' bookkeeping only: which blocks are live in which slab, with the size
 *   and buffer id each block's pointer queries report. Making, mapping and dropping the regions
 *   is the engine's (shim/engine.c). A slab whose last block is freed is reported empty; the
 *   engine then drops it, as it would a region of its own.
 *
 * Invariants
 *   - Slabs are sorted by base and never overlap; each spans [base, base + MS_GRAN).
 *   - In a slab, the blocks are sorted by offset and never overlap; bit g of `used` is set
 *     exactly when granule g lies in a live block; free_granules counts the clear bits.
 *   - A block's size is the size asked for (what cuMemGetAddressRange reports); it occupies
 *     MS_ROUND_UP(size, MS_SLAB_ALIGN) bytes.
 *
 * Ownership and errors: a struct ms_slabs owns its arrays (ms_slabs_fini frees them). Functions
 * return MS_OK or MS_E_*: MS_E_NOSPACE (no slab has room: the caller adds one), MS_E_NOTFOUND (no
 * live block there), MS_E_INVAL, MS_E_OVERLAP, MS_E_NOMEM (nothing changed). Not thread-safe:
 * the engine's lock serializes.
 */
#ifndef MS_SLAB_H
#define MS_SLAB_H

#include "core/ms.h"

#include <stdbool.h>
#include <stdint.h>

#define MS_SLAB_ALIGN 512u                         /* bytes per granule: cuMemAlloc's alignment */
#define MS_SLAB_MAX (MS_GRAN / 2)                  /* largest allocation placed in a slab */
#define MS_SLAB_GRANULES (MS_GRAN / MS_SLAB_ALIGN) /* 4096 */

struct ms_slab_block {
    uint32_t off, size;        /* bytes from the slab's base; bytes asked for */
    unsigned long long buffer; /* the buffer id pointer queries report */
    bool sync_memops;          /* cuPointerSetAttribute(SYNC_MEMOPS) set it (the engine's) */
};

struct ms_slab {
    uint64_t base;
    uint32_t region; /* the engine's region slot holding it */
    uint32_t free_granules;
    uint64_t used[MS_SLAB_GRANULES / 64];
    struct ms_slab_block *blk;
    size_t nblk, capblk;
};

struct ms_slabs {
    struct ms_slab *s;
    size_t n, cap;
};

/* A slab at [base, base + MS_GRAN) held by region slot `region`, all free. base must be
 * MS_SLAB_ALIGN-aligned (a reservation is MS_GRAN-aligned). */
int ms_slabs_add(struct ms_slabs *t, uint64_t base, uint32_t region);
/* Place a block of `bytes` (1..MS_SLAB_MAX) with buffer id `buffer` in the first slab with
 * room: *out its address, *region its slab's region slot. MS_E_NOSPACE when none has room. */
int ms_slabs_alloc(struct ms_slabs *t, uint64_t bytes, unsigned long long buffer, uint64_t *out,
                   uint32_t *region);
/* The slab holding address p (its index in t->s), or -1. */
long ms_slabs_find(const struct ms_slabs *t, uint64_t p);
/* The live block of slab index `slab` whose [start, start + size) contains p, or NULL (the
 * rounding after a block's size is in no block, as in no allocation). */
struct ms_slab_block *ms_slabs_block_at(const struct ms_slabs *t, size_t slab, uint64_t p);
/* Free the block that starts exactly at p: *region its slab's region slot, *empty whether the
 * slab holds no block now. MS_E_NOTFOUND when no live block starts at p. */
int ms_slabs_free(struct ms_slabs *t, uint64_t p, uint32_t *region, bool *empty);
/* Forget the slab of region slot `region` (it must be empty: MS_E_STATE otherwise). */
int ms_slabs_remove(struct ms_slabs *t, uint32_t region);
void ms_slabs_fini(struct ms_slabs *t);

#endif
