/*
 * tensormap.c - the TMA tensor maps the program encodes, so a launch that passes one predicts
 * the tensor's extent instead of its whole allocation (contract: tensormap.h).
 *
 * Design
 *   Hopper's bulk tensor copies (TMA) reach global memory through a CUtensorMap: a 128-byte
 *   descriptor the host encodes with cuTensorMapEncodeTiled / Im2col / Im2colWide (and
 *   re-addresses with cuTensorMapReplaceAddress) and passes to the kernel by value, inside its
 *   parameters (cuBLAS's sm90 GEMMs carry theirs in one 1720-byte struct). The profiler cannot
 *   see that traffic (kernels that use it are opaque), but the hardware bounds it to the
 *   tensor: [globalAddress, globalAddress + extent), extent = dim0 x element size + the sum over
 *   the other dimensions of (dim - 1) x stride. So each successful encode is recorded here,
 *   keyed by the descriptor's 128 bytes, with that range; at a launch every 64-byte-aligned
 *   128-byte window of a parameter at least that long is looked up, and a match becomes a
 *   bound (core/template.h, ms_predict_launch_bounded): the engine names only the tensor's
 *   chunks for it. A descriptor copied, moved or passed to several kernels is found by its
 *   bytes wherever it lies.
 *
 *   The table is open addressing over a power-of-two array (TMAP_CAP entries, about 160 KiB
 *   once used); when it is 3/4 full it is emptied and starts again: a program that encodes
 *   tens of thousands of maps loses only the prediction of the older ones (they fall back to
 *   whole allocations, as before this table existed). The extent is cuabi/tmap.h's, the fake
 *   driver's too; a map it cannot bound (an unknown type or rank) is not recorded.
 *
 * Locking: one leaf lock (tmap, locks.h), held only over the table; the driver is called
 *   without it. Fork: the child resets it (ms__tmap_atfork_child).
 */
#include "shim/shim_int.h"
#include "shim/locks.h"

#include "shim/tensormap.h"

#include "cuabi/tmap.h"

#include <string.h>

#define TMAP_BYTES 128u
#define TMAP_CAP 1024u /* power of two */

struct entry {
    uint64_t hash; /* 0: free */
    uint8_t blob[TMAP_BYTES];
    uint64_t addr, bytes;
};

static struct {
    struct ms_lock lock;
    struct entry *e; /* TMAP_CAP entries, allocated at the first record */
    size_t n;
    uint64_t recorded; /* statistics: encodes recorded */
} T = {.lock = MS_LOCK_INIT(MS_LK_TMAP, "tmap")};

static size_t live; /* T.n, read without the lock as a hint (atomic access) */

static uint64_t hash128(const uint8_t *b)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over 8-byte words */
    for (size_t i = 0; i < TMAP_BYTES; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    return h ? h : 1;
}

/* Lock held. The slot of blob (hash h), or of the free slot where it would go. */
static struct entry *slot(uint64_t h, const uint8_t *blob)
{
    for (size_t i = h & (TMAP_CAP - 1);; i = (i + 1) & (TMAP_CAP - 1)) {
        struct entry *e = &T.e[i];
        if (!e->hash || (e->hash == h && memcmp(e->blob, blob, TMAP_BYTES) == 0))
            return e;
    }
}

static void record(const CUtensorMap *map, uint64_t addr, uint64_t bytes)
{
    if (!map || !addr || !bytes)
        return;
    const uint8_t *blob = (const uint8_t *)map;
    uint64_t h = hash128(blob);
    ms_lock(&T.lock);
    if (!T.e)
        T.e = ms_calloc(TMAP_CAP, sizeof(*T.e));
    if (T.e) {
        if (T.n >= TMAP_CAP / 4 * 3) {
            memset(T.e, 0, TMAP_CAP * sizeof(*T.e));
            T.n = 0;
        }
        struct entry *e = slot(h, blob);
        if (!e->hash)
            T.n++;
        e->hash = h;
        memcpy(e->blob, blob, TMAP_BYTES);
        e->addr = addr;
        e->bytes = bytes;
        T.recorded++;
        __atomic_store_n(&live, T.n, __ATOMIC_RELAXED);
    }
    ms_unlock(&T.lock);
}

size_t ms__tmap_bounds(const uint8_t *params, size_t len, const struct ms_param_layout *layout,
                       size_t nlayout, struct ms_param_bound *out, size_t max)
{
    if (!params || !layout || !max || !__atomic_load_n(&live, __ATOMIC_RELAXED))
        return 0;
    size_t n = 0;
    ms_lock(&T.lock);
    for (size_t i = 0; i < nlayout && T.e && n < max; i++) {
        size_t lo = layout[i].offset, hi = lo + layout[i].size;
        if (layout[i].size < TMAP_BYTES || hi > len)
            continue;
        for (size_t off = MS_ROUND_UP(lo, 64); off + TMAP_BYTES <= hi && n < max; off += 64) {
            const uint8_t *b = params + off;
            struct entry *e = slot(hash128(b), b);
            if (e->hash)
                out[n++] = (struct ms_param_bound){
                    .off = off, .len = TMAP_BYTES, .r = {.addr = e->addr, .bytes = e->bytes}};
        }
    }
    ms_unlock(&T.lock);
    return n;
}

uint64_t ms__tmap_recorded(void)
{
    ms_lock(&T.lock);
    uint64_t n = T.recorded;
    ms_unlock(&T.lock);
    return n;
}

void ms__tmap_atfork_child(void)
{
    ms_lock_reset(&T.lock);
}

/* ---- hooks ---------------------------------------------------------------------------------- */

CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = MS_REAL(cuTensorMapEncodeTiled)(
        tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim,
        elementStrides, interleave, swizzle, l2Promotion, oobFill);
    if (r == CUDA_SUCCESS)
        record(tensorMap, (uint64_t)(uintptr_t)globalAddress,
               ms_tmap_extent((int)tensorDataType, tensorRank, globalDim, globalStrides));
    return r;
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
    cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = MS_REAL(cuTensorMapEncodeIm2col)(
        tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
        pixelBoxLowerCorner, pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn, elementStrides,
        interleave, swizzle, l2Promotion, oobFill);
    if (r == CUDA_SUCCESS)
        record(tensorMap, (uint64_t)(uintptr_t)globalAddress,
               ms_tmap_extent((int)tensorDataType, tensorRank, globalDim, globalStrides));
    return r;
}

CUresult CUDAAPI cuTensorMapEncodeIm2colWide(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
    cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = MS_REAL(cuTensorMapEncodeIm2colWide)(
        tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
        pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel, pixelsPerColumn,
        elementStrides, interleave, mode, swizzle, l2Promotion, oobFill);
    if (r == CUDA_SUCCESS)
        record(tensorMap, (uint64_t)(uintptr_t)globalAddress,
               ms_tmap_extent((int)tensorDataType, tensorRank, globalDim, globalStrides));
    return r;
}

CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    /* The descriptor keeps its extent: look it up before the driver rewrites it. */
    uint64_t bytes = 0;
    if (tensorMap && __atomic_load_n(&live, __ATOMIC_RELAXED)) {
        const uint8_t *b = (const uint8_t *)tensorMap;
        uint64_t h = hash128(b);
        ms_lock(&T.lock);
        if (T.e) {
            struct entry *e = slot(h, b);
            bytes = e->hash ? e->bytes : 0;
        }
        ms_unlock(&T.lock);
    }
    CUresult r = MS_REAL(cuTensorMapReplaceAddress)(tensorMap, globalAddress);
    if (r == CUDA_SUCCESS && bytes)
        record(tensorMap, (uint64_t)(uintptr_t)globalAddress, bytes);
    return r;
}
