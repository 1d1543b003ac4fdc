/*
 * profile_patch.h - the per-launch record the profiler's device patch marks, shared by the host
 * side (shim/profile_san.c), the patch (shim/prof_patch.cu) and the CI stand-in for
 * libsanitizer (tests/shim/fake_sanitizer.c). C and CUDA C; no functions of anything else.
 *
 * Design
 *   One block of device memory per profiled launch, handed to the patch as its callback data:
 *   a header, the live regions (allocations) sorted by base, then the bitmap. Each region is cut
 *   into 64 KiB granules from its base (granule k of region r covers [r.base + k * 64 KiB,
 *   min(r.end, r.base + (k + 1) * 64 KiB)): a granule never straddles two allocations, and a
 *   buffer at a fixed offset in its allocation gets the same granules whatever the allocation's
 *   alignment); region i owns the bitmap's granules bit0 .. bit0 + (its granule count) - 1, two
 *   bits each:
 *   bit 2k is "read", bit 2k + 1 "written" (granule k counted over all regions). A global
 *   access is looked up by binary search over the regions; the granules of its first and of
 *   its last byte are marked (an access is at most 128 bytes: it spans at most two). An
 *   access in no region counts in `outside`; a bulk or tensor (TMA) copy, whose bytes the
 *   patch does not see, sets MS_PROF_OPAQUE in `flags`.
 *
 * Invariants
 *   - regions[] sorted by base, not overlapping, each end > base; bitmap words follow the
 *     regions (at byte offset MS_PROF_BITS_OFF(nreg)) and number MS_PROF_WORDS(total).
 *   - The host writes the block before the launch and reads it after the launch finished;
 *     the device only ORs bits and adds to counters.
 */
#ifndef MS_SHIM_PROFILE_PATCH_H
#define MS_SHIM_PROFILE_PATCH_H

#include <stdint.h>

#ifdef __CUDACC__
#define MS_PROF_FN static __device__ __forceinline__
#else
#define MS_PROF_FN static inline
#endif

#define MS_PROF_GRANULE_SHIFT 16u
#define MS_PROF_GRANULE (1ull << MS_PROF_GRANULE_SHIFT) /* 64 KiB */
#define MS_PROF_OPAQUE 1u /* flags: a bulk / tensor copy ran, the bitmap is not the whole story */
#define MS_PROF_READ 1u
#define MS_PROF_WRITE 2u

struct ms_prof_region {
    uint64_t base, end; /* [base, end) */
    uint64_t bit0;      /* the bitmap index of the region's first granule */
};

struct ms_prof_dev {
    uint32_t nreg;
    uint32_t flags;   /* MS_PROF_OPAQUE (set by the device) */
    uint64_t outside; /* accesses in no region (counted by the device) */
    uint64_t total;   /* granules in the bitmap */
    uint64_t pad;
    struct ms_prof_region reg[]; /* nreg entries, then the bitmap */
};

#define MS_PROF_BITS_OFF(nreg)                                                                     \
    (sizeof(struct ms_prof_dev) + (uint64_t)(nreg) * sizeof(struct ms_prof_region))
#define MS_PROF_WORDS(total) (((total)*2u + 31u) / 32u)
#define MS_PROF_BYTES(nreg, total) (MS_PROF_BITS_OFF(nreg) + MS_PROF_WORDS(total) * 4u)

/* The granules of region r: ceil((end - base) / 64 KiB). */
#define MS_PROF_REGION_GRANULES(base, end)                                                         \
    ((((end) - (base)) + MS_PROF_GRANULE - 1u) >> MS_PROF_GRANULE_SHIFT)

/* The index of the region holding addr, or -1. */
MS_PROF_FN int32_t ms_prof_find(const struct ms_prof_dev *d, uint64_t addr)
{
    uint32_t lo = 0, hi = d->nreg;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (d->reg[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == d->nreg || addr < d->reg[lo].base ? -1 : (int32_t)lo;
}

/* The bitmap index of the granule holding addr in region i (which holds it). */
MS_PROF_FN uint64_t ms_prof_granule_in(const struct ms_prof_dev *d, int32_t i, uint64_t addr)
{
    return d->reg[i].bit0 + ((addr - d->reg[i].base) >> MS_PROF_GRANULE_SHIFT);
}

/* The bitmap index of the granule holding addr, or -1 when no region holds it. */
MS_PROF_FN int64_t ms_prof_granule(const struct ms_prof_dev *d, uint64_t addr)
{
    int32_t i = ms_prof_find(d, addr);
    return i < 0 ? -1 : (int64_t)ms_prof_granule_in(d, i, addr);
}

/* The bitmap word and mask for granule g with mode (MS_PROF_READ | MS_PROF_WRITE). */
MS_PROF_FN uint32_t *ms_prof_word(struct ms_prof_dev *d, uint64_t g)
{
    return (uint32_t *)((char *)d + MS_PROF_BITS_OFF(d->nreg)) + (2u * g) / 32u;
}
MS_PROF_FN uint32_t ms_prof_mask(uint64_t g, uint32_t mode)
{
    return (mode & 3u) << ((2u * g) % 32u);
}

#endif /* MS_SHIM_PROFILE_PATCH_H */
