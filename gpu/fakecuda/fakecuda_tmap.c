/*
 * fakecuda_tmap.c - the fake driver's TMA tensor maps: cuTensorMapEncodeTiled and
 * cuTensorMapReplaceAddress, and what a test kernel needs to use one.
 *
 * Design
 *   A real CUtensorMap is 128 opaque bytes the GPU's copy engine reads. The fake's holds its
 *   global address at byte 0 (as a pointer word, so a scan of the kernel's parameters finds it
 *   the way it finds one in a real descriptor), the extent in bytes the hardware bounds TMA
 *   traffic to at byte 8 (cuabi/tmap.h), the data type
 *   and rank at 16, a magic number at 24 and a per-process serial number at 32, so two
 *   descriptors never share their bytes. ms_fake_tmap_decode hands a test kernel the address
 *   and extent back; its touches through it are declared with MS_FAKE_TOUCH_BULK (the profiler
 *   cannot see them, as on the GPU).
 *
 * Invariants
 *   - An encode that fails writes nothing. A tensor cuabi/tmap.h cannot bound (an unknown
 *     type, a rank outside 1..5, a zero dimension) is refused with CUDA_ERROR_INVALID_VALUE.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include "cuabi/tmap.h"

#include <string.h>

#define TMAP_MAGIC 0x70616d74u /* "tmap" */

static uint64_t serial; /* atomic */

CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    (void)boxDim, (void)elementStrides, (void)interleave, (void)swizzle, (void)l2Promotion,
        (void)oobFill;
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t x = ms_tmap_extent((int)tensorDataType, tensorRank, globalDim, globalStrides);
    if (!tensorMap || !globalAddress || !x)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t b[sizeof(CUtensorMap)];
    memset(b, 0, sizeof b);
    uint64_t addr = (uint64_t)(uintptr_t)globalAddress;
    uint32_t meta[2] = {(uint32_t)tensorDataType, tensorRank}, magic = TMAP_MAGIC;
    uint64_t n = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
    memcpy(b, &addr, 8);
    memcpy(b + 8, &x, 8);
    memcpy(b + 16, meta, 8);
    memcpy(b + 24, &magic, 4);
    memcpy(b + 32, &n, 8);
    memcpy(tensorMap, b, sizeof b);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    uint32_t magic = 0;
    if (tensorMap)
        memcpy(&magic, (uint8_t *)tensorMap + 24, 4);
    if (!tensorMap || !globalAddress || magic != TMAP_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr = (uint64_t)(uintptr_t)globalAddress;
    memcpy(tensorMap, &addr, 8);
    return CUDA_SUCCESS;
}

MS_FK_EXPORT int ms_fake_tmap_decode(const void *tensorMap, uint64_t *addr, uint64_t *bytes)
{
    uint32_t magic = 0;
    if (!tensorMap || !addr || !bytes)
        return -1;
    memcpy(&magic, (const uint8_t *)tensorMap + 24, 4);
    if (magic != TMAP_MAGIC)
        return -1;
    memcpy(addr, tensorMap, 8);
    memcpy(bytes, (const uint8_t *)tensorMap + 8, 8);
    return 0;
}

MS_FK_EXPORT int ms_fake_host_mapped(const void *p)
{
    return ms__fk_host_mapped((uint64_t)(uintptr_t)p);
}
