/*
 * prof_patch.cu - the profiler's Compute Sanitizer device patch (host side: shim/profile_san.c;
 * the record it marks: shim/profile_patch.h).
 *
 * Design
 *   Compiled with nvcc --fatbin --compile-as-tools-patch at build time, only when the Sanitizer
 *   headers are found (shim/shim.mk), and embedded into libmsched. The host side patches every
 *   loaded module: each global memory access calls ms_prof_access, which ORs the access's
 *   read/write bits into the granule bitmap of the launch's record (the callback data; NULL for
 *   a launch that is not profiled: nothing to do); the bulk and tensor (TMA) copies call
 *   ms_prof_opaque, which only flags the launch: their bytes are not global loads and stores
 *   and are not resolved here (a tensor map would have to be decoded).
 *
 * Invariants: the patch never fails a warp (always SANITIZER_PATCH_SUCCESS) and writes only
 * the record's bitmap, flags and counter, with atomics.
 */
#include <sanitizer_patching.h>

#include "shim/profile_patch.h"

static __device__ __forceinline__ void mark(struct ms_prof_dev *d, uint64_t addr, uint32_t m)
{
    int64_t g = ms_prof_granule(d, addr);
    if (g < 0) {
        atomicAdd((unsigned long long *)&d->outside, 1ull);
        return;
    }
    atomicOr(ms_prof_word(d, (uint64_t)g), ms_prof_mask((uint64_t)g, m));
}

extern "C" __device__ __noinline__ SanitizerPatchResult ms_prof_access(void *userdata, uint64_t pc,
                                                                       void *ptr, uint32_t size,
                                                                       uint32_t flags,
                                                                       const void *pData)
{
    (void)pc;
    (void)pData;
    struct ms_prof_dev *d = (struct ms_prof_dev *)userdata;
    if (!d)
        return SANITIZER_PATCH_SUCCESS;
    uint32_t m = 0;
    if (flags & SANITIZER_MEMORY_DEVICE_FLAG_READ)
        m |= MS_PROF_READ;
    if (flags & SANITIZER_MEMORY_DEVICE_FLAG_WRITE)
        m |= MS_PROF_WRITE;
    if (!m)
        m = MS_PROF_READ | MS_PROF_WRITE; /* an atomic, or a kind the flags do not say */
    uint64_t a = (uint64_t)(uintptr_t)ptr, last = a + (size ? size - 1 : 0);
    int32_t i = ms_prof_find(d, a);
    if (i < 0) {
        atomicAdd((unsigned long long *)&d->outside, 1ull);
    } else {
        uint64_t g = ms_prof_granule_in(d, i, a);
        atomicOr(ms_prof_word(d, g), ms_prof_mask(g, m));
        if (last >= d->reg[i].end) { /* past its region: the last byte's own lookup */
            mark(d, last, m);
        } else if (ms_prof_granule_in(d, i, last) != g) {
            g = ms_prof_granule_in(d, i, last);
            atomicOr(ms_prof_word(d, g), ms_prof_mask(g, m));
        }
    }
    return SANITIZER_PATCH_SUCCESS;
}

static __device__ __forceinline__ SanitizerPatchResult opaque(void *userdata)
{
    struct ms_prof_dev *d = (struct ms_prof_dev *)userdata;
    if (d)
        atomicOr(&d->flags, MS_PROF_OPAQUE);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult
ms_prof_bulk_g2s(void *userdata, uint64_t pc, uint64_t src, uint32_t dst, uint32_t barrier,
                 uint32_t maskAndSize, uint32_t isMulticast)
{
    return opaque(userdata);
}

extern "C" __device__ __noinline__ SanitizerPatchResult
ms_prof_bulk_s2g(void *userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t maskAndSize,
                 uint32_t hasCpMask)
{
    return opaque(userdata);
}

extern "C" __device__ __noinline__ SanitizerPatchResult
ms_prof_bulk_red(void *userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks)
{
    return opaque(userdata);
}

extern "C" __device__ __noinline__ SanitizerPatchResult
ms_prof_tma_load(void *userdata, uint64_t pc, uint64_t pTensorMap, uint32_t dst, uint32_t barrier,
                 int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4, uint32_t dim,
                 uint32_t isMulticast, uint32_t maskAndIm2ColArgs, uint32_t loadMode)
{
    return opaque(userdata);
}
