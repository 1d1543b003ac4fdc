/*
 * fakecuda_mem.c - the fake driver's device memory: allocations, copies, memsets and the
 * virtual memory management API (cuMemAddressReserve / cuMemCreate / cuMemMap ...).
 *
 * Design
 *   Device memory is host memory, so device pointers can be dereferenced by registered
 *   kernels. cuMemAlloc-family blocks are anonymous read-write mappings with a PROT_NONE guard
 *   page behind them. The VMM API is emulated with the kernel's own VM: a reservation is a
 *   PROT_NONE anonymous mapping; a physical handle is a memfd of the requested size; cuMemMap
 *   maps the memfd MAP_SHARED|MAP_FIXED over part of the reservation, still PROT_NONE, and
 *   cuMemSetAccess mprotects it; cuMemUnmap puts a fresh PROT_NONE mapping back. So memory
 *   that is not resident faults exactly where a GPU would, and data survives an unmap/remap of
 *   the same handle (it lives in the memfd), as it does on a GPU.
 *
 *   The rules the real driver enforces and later msched code depends on are enforced here:
 *   granularity (2 MiB) for sizes and addresses, offset 0 into a handle, unmaps of whole
 *   mappings only, mappings inside one reservation, no overlap, and a memory budget
 *   (MSCHED_FAKE_MEM_BYTES) shared by allocations and physical handles.
 *
 *   A physical handle is device memory (location DEVICE 0) or host memory (location HOST, id
 *   ignored, or HOST_NUMA, any id: a "host handle"). Both are memfds and behave alike under
 *   cuMemMap / cuMemSetAccess / cuMemUnmap and copies; a host handle is outside the device
 *   budget (counted in ms_fake_stats.host_*), its mappings answer CU_MEMORYTYPE_HOST to
 *   pointer queries, and launches passing pointers into them are counted
 *   (ms__fk_host_mapped). A handle may be mapped at several addresses at once (MAP_SHARED:
 *   every mapping sees the same bytes); it holds one reference until cuMemRelease and one
 *   per mapping, so a handle released while mapped keeps its memory until the last unmap, as
 *   on the real driver.
 *
 * Invariants (under ms__fk_lock)
 *   - blocks[] and resvs[] are sorted by base and do not overlap.
 *   - ms__fk_stats.used_bytes == sum of block sizes + sum of sizes of device handles not yet
 *     destroyed; host_handles / host_handle_bytes == count / sum of sizes of host handles not
 *     yet destroyed; a handle is destroyed when it is released and no mapping uses it.
 *   - Every mapping lies inside its reservation; mappings of a reservation do not overlap.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096ull

enum block_kind { BK_DEVICE, BK_MANAGED, BK_ASYNC };

struct block {
    uint64_t base, size, map_len; /* map_len: mapped bytes, guard page included */
    uint8_t kind;
    bool sync_memops; /* cuPointerSetAttribute(SYNC_MEMOPS) */
};

struct phys {
    int fd;
    uint64_t size;
    int refs; /* 1 until released, plus one per mapping */
    bool released;
    bool host; /* a host handle (system memory), not device memory */
};

struct mapping {
    uint64_t va, size;
    struct phys *ph;
    int prot;
};

struct resv {
    uint64_t base, size;
    struct mapping *maps;
    size_t nmaps, capmaps;
};

static struct block *blocks;
static size_t nblocks, capblocks;
static struct resv *resvs;
static size_t nresvs, capresvs;
static struct phys **physs;
static size_t nphys, capphys;

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, ncap * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Lookups (ms__fk_lock held) */

/* Index of the block containing p, or -1. */
static long block_at(uint64_t p)
{
    size_t lo = 0, hi = nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (blocks[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || p - blocks[lo - 1].base >= blocks[lo - 1].size)
        return -1;
    return (long)lo - 1;
}

static struct resv *resv_at(uint64_t p)
{
    size_t lo = 0, hi = nresvs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (resvs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || p - resvs[lo - 1].base >= resvs[lo - 1].size)
        return NULL;
    return &resvs[lo - 1];
}

static struct mapping *mapping_at(struct resv *r, uint64_t p)
{
    for (size_t i = 0; i < r->nmaps; i++)
        if (p - r->maps[i].va < r->maps[i].size)
            return &r->maps[i];
    return NULL;
}

static struct phys *phys_of(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < nphys; i++)
        if ((CUmemGenericAllocationHandle)(uintptr_t)physs[i] == h)
            return physs[i];
    return NULL;
}

CUresult ms__fk_check_range(uint64_t p, uint64_t n, bool unified, bool write)
{
    if (n == 0)
        return CUDA_SUCCESS;
    if (p + n < p)
        return CUDA_ERROR_INVALID_VALUE;
    long b = block_at(p);
    if (b >= 0)
        return p + n - blocks[b].base <= blocks[b].size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    struct resv *r = resv_at(p);
    if (!r)
        return unified ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p + n - r->base > r->size)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    int need = PROT_READ | (write ? PROT_WRITE : 0);
    for (uint64_t cur = p; cur < p + n;) {
        struct mapping *m = mapping_at(r, cur);
        if (!m || (m->prot & need) != need)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        cur = m->va + m->size;
    }
    return CUDA_SUCCESS;
}

/*
 * What a pointer query sees at p (ms__fk_lock held): the allocation or the VMM mapping holding
 * it, as the real driver answers: a reserved range with nothing mapped at p is not memory
 * (CUDA_ERROR_INVALID_VALUE), nor is an address outside everything.
 */
CUresult ms__fk_ptr_info(uint64_t p, struct ms__fk_ptr *out)
{
    long b = block_at(p);
    if (b >= 0) {
        out->base = blocks[b].base;
        out->size = blocks[b].size;
        out->kind = blocks[b].kind == BK_MANAGED ? MS__FK_PTR_MANAGED
                    : blocks[b].kind == BK_ASYNC ? MS__FK_PTR_ASYNC
                                                 : MS__FK_PTR_DEVICE;
        out->host = false;
        out->sync_memops = blocks[b].sync_memops;
        return CUDA_SUCCESS;
    }
    struct resv *r = resv_at(p);
    struct mapping *m = r ? mapping_at(r, p) : NULL;
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    out->base = m->va;
    out->size = m->size;
    out->kind = MS__FK_PTR_VMM;
    out->host = m->ph->host;
    out->sync_memops = false;
    return CUDA_SUCCESS;
}

/* A dma-buf of the memory at [p, p + size): the fake exports a VMM mapping's physical
 * memory (a dup of its handle's file), as the driver exports device memory for RDMA; the range
 * must lie in one mapping. cuMemAlloc-family blocks are not exported (CUDA_ERROR_NOT_SUPPORTED). */
CUresult CUDAAPI cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                               CUmemRangeHandleType handleType,
                                               unsigned long long flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !size || handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct resv *r = resv_at((uint64_t)dptr);
    struct mapping *m = r ? mapping_at(r, (uint64_t)dptr) : NULL;
    if (!m)
        rc = block_at((uint64_t)dptr) >= 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    else if ((uint64_t)dptr - m->va + size > m->size)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)handle = dup(m->ph->fd)) < 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult ms__fk_ptr_set_sync(uint64_t p, bool on)
{
    long b = block_at(p);
    if (b >= 0) {
        blocks[b].sync_memops = on;
        return CUDA_SUCCESS;
    }
    struct resv *r = resv_at(p);
    return r && mapping_at(r, p) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

bool ms__fk_host_mapped(uint64_t p)
{
    struct resv *r = resv_at(p);
    struct mapping *m = r ? mapping_at(r, p) : NULL;
    return m && m->ph->host;
}

/* ------------------------------------------------------------------------------------------ */
/* Allocations                                                                                  */

static CUresult alloc_block(CUdeviceptr *dptr, uint64_t bytes, enum block_kind kind)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytes == 0 || bytes > (1ull << 46))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t len = (bytes + PAGE - 1) / PAGE * PAGE + PAGE;
    pthread_mutex_lock(&ms__fk_lock);
    bool fits = ms__fk_stats.used_bytes + bytes <= ms__fk_total_bytes() &&
                grow((void **)&blocks, &capblocks, nblocks + 1, sizeof *blocks);
    if (fits)
        ms__fk_stats.used_bytes += bytes; /* reserved while mapping, without the lock */
    pthread_mutex_unlock(&ms__fk_lock);
    if (!fits)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED && mprotect((char *)p + len - PAGE, PAGE, PROT_NONE) != 0) {
        munmap(p, len);
        p = MAP_FAILED;
    }
    pthread_mutex_lock(&ms__fk_lock);
    if (p == MAP_FAILED) {
        ms__fk_stats.used_bytes -= bytes;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!grow((void **)&blocks, &capblocks, nblocks + 1, sizeof *blocks)) {
        ms__fk_stats.used_bytes -= bytes;
        munmap(p, len);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        uint64_t base = (uint64_t)(uintptr_t)p;
        size_t i = nblocks;
        while (i > 0 && blocks[i - 1].base > base)
            i--;
        memmove(&blocks[i + 1], &blocks[i], (nblocks - i) * sizeof *blocks);
        blocks[i] = (struct block){base, bytes, len, (uint8_t)kind, false};
        nblocks++;
        ms__fk_stats.allocs++;
        *dptr = base;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

static CUresult free_block(CUdeviceptr p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS || p == 0)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    long b = block_at(p);
    struct block blk = {0};
    if (b < 0 || blocks[b].base != p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        blk = blocks[b];
        memmove(&blocks[b], &blocks[b + 1], (nblocks - (size_t)b - 1) * sizeof *blocks);
        nblocks--;
        ms__fk_stats.used_bytes -= blk.size;
        ms__fk_stats.frees++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc == CUDA_SUCCESS && blk.kind == BK_MANAGED)
        ms__fk_um_remove(blk.base);
    if (rc == CUDA_SUCCESS)
        munmap((void *)(uintptr_t)blk.base, blk.map_len);
    return rc;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_block(dptr, bytesize, BK_DEVICE);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return ms__fk_inited() != CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED
                                               : CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) / 512 * 512;
    if (Height > (1ull << 46) / pitch)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = alloc_block(dptr, (uint64_t)pitch * Height, BK_DEVICE);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return ms__fk_inited() != CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED
                                               : CUDA_ERROR_INVALID_VALUE;
    CUresult rc = alloc_block(dptr, bytesize, BK_MANAGED);
    if (rc == CUDA_SUCCESS && (rc = ms__fk_um_add(*dptr, bytesize)) != CUDA_SUCCESS) {
        free_block(*dptr);
        *dptr = 0;
    }
    return rc;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    return free_block(dptr);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    return rc != CUDA_SUCCESS ? rc : alloc_block(dptr, bytesize, BK_ASYNC);
}

static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    return rc != CUDA_SUCCESS ? rc : free_block(dptr);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

/* Device memory only: host handles take nothing from it. */
CUresult CUDAAPI cuMemGetInfo_v2(size_t *pfree, size_t *ptotal)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pfree || !ptotal)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    *ptotal = ms__fk_total_bytes();
    *pfree = ms__fk_total_bytes() - ms__fk_stats.used_bytes;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Copies and memsets                                                                           */

static void pin_wait(void);
static void pin_delay(size_t bytesize);

/* Which sides of a copy are device memory: 'd' device, 'h' host, 'u' unified (either). */
static CUresult copy(uint64_t dst, char dk, uint64_t src, char sk, size_t n, CUstream s)
{
    pin_wait();
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n > 0 && (dst == 0 || src == 0))
        return CUDA_ERROR_INVALID_VALUE;
    bool captured = false;
    if (dk != 'h' && sk != 'h')
        rc = ms__fk_capture_copy(s, dst, src, n, &captured); /* recorded as a graph node */
    else
        rc = ms__fk_capture_other(s); /* not recorded by the fake: breaks a capture */
    if (rc != CUDA_SUCCESS || captured)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    if (dk != 'h')
        rc = ms__fk_check_range(dst, n, dk == 'u', true);
    if (rc == CUDA_SUCCESS && sk != 'h')
        rc = ms__fk_check_range(src, n, sk == 'u', false);
    if (rc == CUDA_ERROR_ILLEGAL_ADDRESS)
        ms__fk_stats.illegal++;
    if (rc == CUDA_SUCCESS) {
        ms__fk_stats.copies++;
        ms__fk_stats.copy_bytes += n;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc == CUDA_SUCCESS && n > 0)
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return rc;
}

#define H(p) ((uint64_t)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 'u', src, 'u', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, 'u', src, 'u', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(dst, 'u', src, 'u', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                    CUstream hStream)
{
    return copy(dst, 'u', src, 'u', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 'd', H(srcHost), 'h', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, 'd', H(srcHost), 'h', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 'h', srcDevice, 'd', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(H(dstHost), 'h', srcDevice, 'd', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstDevice, 'd', srcDevice, 'd', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{
    return copy(dstDevice, 'd', srcDevice, 'd', ByteCount, NULL);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(dstDevice, 'd', H(srcHost), 'h', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 'd', H(srcHost), 'h', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    return copy(H(dstHost), 'h', srcDevice, 'd', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{
    return copy(H(dstHost), 'h', srcDevice, 'd', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 'd', srcDevice, 'd', ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    return copy(dstDevice, 'd', srcDevice, 'd', ByteCount, hStream);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return p ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (p->WidthInBytes == 0 || p->Height == 0)
        return CUDA_SUCCESS;
    if (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t s = p->srcMemoryType == CU_MEMORYTYPE_HOST ? H(p->srcHost) : p->srcDevice;
    uint64_t d = p->dstMemoryType == CU_MEMORYTYPE_HOST ? H(p->dstHost) : p->dstDevice;
    s += p->srcY * p->srcPitch + p->srcXInBytes;
    d += p->dstY * p->dstPitch + p->dstXInBytes;
    uint64_t s_ext = (p->Height - 1) * p->srcPitch + p->WidthInBytes;
    uint64_t d_ext = (p->Height - 1) * p->dstPitch + p->WidthInBytes;
    pthread_mutex_lock(&ms__fk_lock);
    if (p->dstMemoryType != CU_MEMORYTYPE_HOST)
        rc = ms__fk_check_range(d, d_ext, p->dstMemoryType == CU_MEMORYTYPE_UNIFIED, true);
    if (rc == CUDA_SUCCESS && p->srcMemoryType != CU_MEMORYTYPE_HOST)
        rc = ms__fk_check_range(s, s_ext, p->srcMemoryType == CU_MEMORYTYPE_UNIFIED, false);
    if (rc == CUDA_ERROR_ILLEGAL_ADDRESS)
        ms__fk_stats.illegal++;
    if (rc == CUDA_SUCCESS) {
        ms__fk_stats.copies++;
        ms__fk_stats.copy_bytes += (uint64_t)p->WidthInBytes * p->Height;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    for (size_t y = 0; rc == CUDA_SUCCESS && y < p->Height; y++)
        memmove((void *)(uintptr_t)(d + y * p->dstPitch),
                (const void *)(uintptr_t)(s + y * p->srcPitch), p->WidthInBytes);
    return rc;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy_2d(pCopy);
}

CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return copy_2d(pCopy);
}

/* A 3D copy between linear memories (arrays are not supported): Depth slices of Height rows. */
static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream st)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(st);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return p ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return CUDA_SUCCESS;
    if (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes ||
        (p->Depth > 1 && (p->srcHeight < p->Height || p->dstHeight < p->Height)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t s = p->srcMemoryType == CU_MEMORYTYPE_HOST ? H(p->srcHost) : p->srcDevice;
    uint64_t d = p->dstMemoryType == CU_MEMORYTYPE_HOST ? H(p->dstHost) : p->dstDevice;
    uint64_t s_slice = (uint64_t)p->srcHeight * p->srcPitch,
             d_slice = (uint64_t)p->dstHeight * p->dstPitch;
    s += p->srcZ * s_slice + p->srcY * p->srcPitch + p->srcXInBytes;
    d += p->dstZ * d_slice + p->dstY * p->dstPitch + p->dstXInBytes;
    uint64_t s_ext = (p->Depth - 1) * s_slice + (p->Height - 1) * p->srcPitch + p->WidthInBytes;
    uint64_t d_ext = (p->Depth - 1) * d_slice + (p->Height - 1) * p->dstPitch + p->WidthInBytes;
    pthread_mutex_lock(&ms__fk_lock);
    if (p->dstMemoryType != CU_MEMORYTYPE_HOST)
        rc = ms__fk_check_range(d, d_ext, p->dstMemoryType == CU_MEMORYTYPE_UNIFIED, true);
    if (rc == CUDA_SUCCESS && p->srcMemoryType != CU_MEMORYTYPE_HOST)
        rc = ms__fk_check_range(s, s_ext, p->srcMemoryType == CU_MEMORYTYPE_UNIFIED, false);
    if (rc == CUDA_ERROR_ILLEGAL_ADDRESS)
        ms__fk_stats.illegal++;
    if (rc == CUDA_SUCCESS) {
        ms__fk_stats.copies++;
        ms__fk_stats.copy_bytes += (uint64_t)p->WidthInBytes * p->Height * p->Depth;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    for (size_t z = 0; rc == CUDA_SUCCESS && z < p->Depth; z++)
        for (size_t y = 0; y < p->Height; y++)
            memmove((void *)(uintptr_t)(d + z * d_slice + y * p->dstPitch),
                    (const void *)(uintptr_t)(s + z * s_slice + y * p->srcPitch), p->WidthInBytes);
    return rc;
}

CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
    return copy_3d(pCopy, NULL);
}

CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{
    return copy_3d(pCopy, NULL);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy_3d(pCopy, hStream);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy_3d(pCopy, hStream);
}

/* A batch of 1D copies, each between any two memories (attributes are not checked). */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                           CUstream st)
{
    if (count == 0 || !dsts || !srcs || !sizes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < count && rc == CUDA_SUCCESS; i++)
        rc = copy(dsts[i], 'u', srcs[i], 'u', sizes[i], st);
    return rc;
}

CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                       size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                       size_t numAttrs, CUstream hStream)
{
    (void)attrs;
    (void)attrsIdxs;
    (void)numAttrs;
    return copy_batch(dsts, srcs, sizes, count, hStream);
}

CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                            size_t count, CUmemcpyAttributes *attrs,
                                            size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
{
    (void)attrs;
    (void)attrsIdxs;
    (void)numAttrs;
    return copy_batch(dsts, srcs, sizes, count, hStream);
}

/* Stream memory operations: a 32-bit write (checked like a memset); a wait returns at once
 * when the word already holds the value (everything here is synchronous), else it is an error. */
static CUresult write_value32(CUstream st, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    (void)flags;
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(st);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (addr % 4)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    rc = ms__fk_check_range(addr, 4, false, true);
    if (rc == CUDA_ERROR_ILLEGAL_ADDRESS)
        ms__fk_stats.illegal++;
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc == CUDA_SUCCESS)
        memcpy((void *)(uintptr_t)addr, &value, 4);
    return rc;
}

CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags)
{
    return write_value32(stream, addr, value, flags);
}

CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags)
{
    return write_value32(stream, addr, value, flags);
}

/* Fill `rows` rows of n elements of `elem` bytes, `pitch` apart, with value v. */
static CUresult fill(CUdeviceptr dst, uint32_t v, unsigned elem, size_t n, size_t rows,
                     size_t pitch, CUstream s)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dst % elem != 0 || (rows > 1 && (pitch < n * elem || pitch % elem != 0)))
        return CUDA_ERROR_INVALID_VALUE;
    if (n == 0 || rows == 0)
        return CUDA_SUCCESS;
    bool captured = false;
    if (rows == 1)
        rc = ms__fk_capture_fill(s, dst, v, elem, n, &captured); /* recorded as a graph node */
    else
        rc = ms__fk_capture_other(s); /* not recorded by the fake: breaks a capture */
    if (rc != CUDA_SUCCESS || captured)
        return rc;
    uint64_t ext = (rows - 1) * (uint64_t)pitch + n * elem;
    pthread_mutex_lock(&ms__fk_lock);
    rc = ms__fk_check_range(dst, ext, false, true);
    if (rc == CUDA_ERROR_ILLEGAL_ADDRESS)
        ms__fk_stats.illegal++;
    if (rc == CUDA_SUCCESS) {
        ms__fk_stats.memsets++;
        ms__fk_stats.memset_bytes += (uint64_t)n * elem * rows;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    for (size_t r = 0; rc == CUDA_SUCCESS && r < rows; r++) {
        unsigned char *row = (unsigned char *)(uintptr_t)(dst + r * pitch);
        if (elem == 1) {
            memset(row, (int)(v & 0xff), n);
        } else {
            for (size_t i = 0; i < n; i++)
                memcpy(row + i * elem, &v, elem); /* little-endian: the low bytes */
        }
    }
    return rc;
}

#define MEMSET_FNS(sfx, val_t, elem)                                                               \
    CUresult CUDAAPI cuMemsetD##sfx##_v2(CUdeviceptr dstDevice, val_t v, size_t N)                 \
    {                                                                                              \
        return fill(dstDevice, v, elem, N, 1, 0, NULL);                                            \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##sfx##_v2_ptds(CUdeviceptr dstDevice, val_t v, size_t N)            \
    {                                                                                              \
        return fill(dstDevice, v, elem, N, 1, 0, NULL);                                            \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##sfx##Async(CUdeviceptr dstDevice, val_t v, size_t N,               \
                                           CUstream hStream)                                       \
    {                                                                                              \
        return fill(dstDevice, v, elem, N, 1, 0, hStream);                                         \
    }                                                                                              \
    CUresult CUDAAPI cuMemsetD##sfx##Async_ptsz(CUdeviceptr dstDevice, val_t v, size_t N,          \
                                                CUstream hStream)                                  \
    {                                                                                              \
        return fill(dstDevice, v, elem, N, 1, 0, hStream);                                         \
    }

MEMSET_FNS(8, unsigned char, 1)
MEMSET_FNS(16, unsigned short, 2)
MEMSET_FNS(32, unsigned int, 4)

CUresult CUDAAPI cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                  size_t Width, size_t Height)
{
    return fill(dstDevice, ui, 4, Width, Height, dstPitch, NULL);
}

CUresult CUDAAPI cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                       size_t Width, size_t Height)
{
    return fill(dstDevice, ui, 4, Width, Height, dstPitch, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Virtual memory management                                                                    */

static bool gran_ok(uint64_t v)
{
    return v % MS_FK_GRAN == 0;
}

/* 2 MiB (minimum and recommended) for every location, device or host, as on the H200. */
CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    (void)option;
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = MS_FK_GRAN;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0 || !gran_ok(size) || flags != 0 || size > (1ull << 44))
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0)
        alignment = MS_FK_GRAN;
    if ((alignment & (alignment - 1)) != 0 || alignment > (1ull << 40))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t len = size + alignment;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t lo = (uint64_t)(uintptr_t)p, base = (lo + alignment - 1) & ~(uint64_t)(alignment - 1);
    if (base > lo)
        munmap(p, base - lo);
    if (lo + len > base + size)
        munmap((void *)(uintptr_t)(base + size), lo + len - (base + size));
    pthread_mutex_lock(&ms__fk_lock);
    if (!grow((void **)&resvs, &capresvs, nresvs + 1, sizeof *resvs)) {
        pthread_mutex_unlock(&ms__fk_lock);
        munmap((void *)(uintptr_t)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t i = nresvs;
    while (i > 0 && resvs[i - 1].base > base)
        i--;
    memmove(&resvs[i + 1], &resvs[i], (nresvs - i) * sizeof *resvs);
    resvs[i] = (struct resv){.base = base, .size = size};
    nresvs++;
    pthread_mutex_unlock(&ms__fk_lock);
    *ptr = base;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct resv *r = resv_at(ptr);
    if (!r || r->base != ptr || r->size != size || r->nmaps != 0) {
        rc = CUDA_ERROR_INVALID_VALUE; /* unknown, partial, or still mapped */
    } else {
        free(r->maps);
        size_t i = (size_t)(r - resvs);
        memmove(&resvs[i], &resvs[i + 1], (nresvs - i - 1) * sizeof *resvs);
        nresvs--;
        munmap((void *)(uintptr_t)ptr, size);
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

/*
 * Location DEVICE (a visible ordinal): device memory, within the device budget (one pool for
 * every device). Location HOST (id ignored) or
 * HOST_NUMA: a host handle, outside it. Refused with CUDA_ERROR_INVALID_VALUE, as by the H200's
 * CUDA 13.0 driver: HOST_NUMA_CURRENT, and HOST with requested handle types (not shareable).
 * HOST_NUMA takes any id here (the fake has no NUMA nodes; that driver refuses an id naming
 * no node). Any other location is CUDA_ERROR_INVALID_DEVICE.
 */
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !prop || flags != 0 || size == 0 || !gran_ok(size) ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
                prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
        (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && prop->requestedHandleTypes != 0))
        return CUDA_ERROR_INVALID_VALUE;
    if (!host &&
        (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ms__fk_dev_ok(prop->location.id)))
        return CUDA_ERROR_INVALID_DEVICE;
    if (host)
        pin_delay(size); /* a host handle is pinned host memory: as slow as a pin */
    struct phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->fd = memfd_create("fakecuda-phys", MFD_CLOEXEC);
    if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) != 0) {
        if (ph->fd >= 0)
            close(ph->fd);
        free(ph);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ph->size = size;
    ph->refs = 1;
    ph->host = host;
    pthread_mutex_lock(&ms__fk_lock);
    if ((!host && ms__fk_stats.used_bytes + size > ms__fk_total_bytes()) ||
        !grow((void **)&physs, &capphys, nphys + 1, sizeof *physs)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        physs[nphys++] = ph;
        if (host) {
            ms__fk_stats.host_handles++;
            ms__fk_stats.host_handle_bytes += size;
            if (ms__fk_stats.host_handle_bytes > ms__fk_stats.host_handle_peak_bytes)
                ms__fk_stats.host_handle_peak_bytes = ms__fk_stats.host_handle_bytes;
            ms__fk_stats.host_creates++;
        } else {
            ms__fk_stats.used_bytes += size;
        }
        ms__fk_stats.vmm_creates++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS) {
        close(ph->fd);
        free(ph);
        return rc;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

/* Drop one reference (ms__fk_lock held); destroys the handle at zero. A released handle is
 * gone for cuMemMap and cuMemRelease even while mapped (CUDA_ERROR_INVALID_VALUE: the driver
 * documents its use as undefined; the H200's driver was seen to map it again). */
static void phys_unref(struct phys *ph)
{
    if (--ph->refs > 0)
        return;
    for (size_t i = 0; i < nphys; i++) {
        if (physs[i] == ph) {
            physs[i] = physs[--nphys];
            break;
        }
    }
    if (ph->host) {
        ms__fk_stats.host_handles--;
        ms__fk_stats.host_handle_bytes -= ph->size;
    } else {
        ms__fk_stats.used_bytes -= ph->size;
    }
    close(ph->fd);
    free(ph);
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct phys *ph = phys_of(handle);
    if (!ph || ph->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        ph->released = true;
        ms__fk_stats.vmm_releases++;
        phys_unref(ph);
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

/* MSCHED_FAKE_MAP_MS makes every cuMemMap of a device handle take that long (outside the fake's
 * lock): a slow migration, for tests of what reports one. Host handles map at full speed. */
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !gran_ok(size) || !gran_ok(ptr) || offset != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    const char *slow = getenv("MSCHED_FAKE_MAP_MS");
    long ms = slow ? strtol(slow, NULL, 10) : 0;
    if (ms > 0) {
        pthread_mutex_lock(&ms__fk_lock);
        struct phys *sp = phys_of(handle);
        if (sp && sp->host)
            ms = 0;
        pthread_mutex_unlock(&ms__fk_lock);
    }
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&ms__fk_lock);
    struct phys *ph = phys_of(handle);
    struct resv *r = resv_at(ptr);
    if (!ph || ph->released || size > ph->size || !r || ptr + size - r->base > r->size) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (size_t i = 0; i < r->nmaps && rc == CUDA_SUCCESS; i++)
            if (ptr < r->maps[i].va + r->maps[i].size && r->maps[i].va < ptr + size)
                rc = CUDA_ERROR_INVALID_VALUE; /* overlaps a mapping */
    }
    if (rc == CUDA_SUCCESS && !grow((void **)&r->maps, &r->capmaps, r->nmaps + 1, sizeof *r->maps))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                                   ph->fd, 0) == MAP_FAILED)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        r->maps[r->nmaps++] = (struct mapping){ptr, size, ph, PROT_NONE};
        ph->refs++;
        ms__fk_stats.vmm_maps++;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

/*
 * Mappings of the reservation holding [ptr, ptr + size) that tile the range exactly: all of
 * them inside it, no byte of it unmapped. Returns the reservation or NULL (ms__fk_lock held).
 */
static struct resv *whole_mappings(uint64_t ptr, uint64_t size)
{
    struct resv *r = resv_at(ptr);
    if (!r || size == 0 || ptr + size < ptr || ptr + size - r->base > r->size)
        return NULL;
    for (uint64_t cur = ptr; cur < ptr + size;) {
        struct mapping *m = mapping_at(r, cur);
        if (!m || m->va != cur || m->va + m->size > ptr + size)
            return NULL;
        cur = m->va + m->size;
    }
    return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    struct resv *r = whole_mappings(ptr, size);
    if (!r)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r && i < r->nmaps;) {
        struct mapping *m = &r->maps[i];
        if (m->va < ptr || m->va >= ptr + size) {
            i++;
            continue;
        }
        mmap((void *)(uintptr_t)m->va, m->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        phys_unref(m->ph);
        ms__fk_stats.vmm_unmaps++;
        *m = r->maps[--r->nmaps];
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = -1;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !ms__fk_dev_ok(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        switch (desc[i].flags) {
        case CU_MEM_ACCESS_FLAGS_PROT_NONE: prot = PROT_NONE; break;
        case CU_MEM_ACCESS_FLAGS_PROT_READ: prot = PROT_READ; break;
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot = PROT_READ | PROT_WRITE; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_lock(&ms__fk_lock);
    struct resv *r = whole_mappings(ptr, size);
    if (!r)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r && i < r->nmaps; i++) {
        struct mapping *m = &r->maps[i];
        if (m->va < ptr || m->va >= ptr + size)
            continue;
        if (mprotect((void *)(uintptr_t)m->va, m->size, prot) == 0)
            m->prot = prot;
        else
            rc = CUDA_ERROR_UNKNOWN;
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Pinned host memory: plain page-aligned host memory here (nothing to pin). Pinning a real
 * driver's GiBs takes seconds; MSCHED_FAKE_PIN_MS makes every allocation or registration of
 * 64 MiB or more, and every host handle (cuMemCreate, location HOST) of 64 MiB or more, take
 * that long (outside the fake's lock), so tests can see who waits for it.
 * As in the real driver (on the H200 an eviction's copy submissions waited 603 ms behind a
 * 746 ms pin in the same process), a copy waits for a slow pin in flight: the pin holds
 * pin_mu while it sleeps, and a copy passes through pin_mu before it starts.
 * Registered ranges are kept (under ms__fk_lock) to refuse overlaps and unknown pointers.    */

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;

static long pin_ms(void)
{
    const char *slow = getenv("MSCHED_FAKE_PIN_MS");
    return slow ? strtol(slow, NULL, 10) : 0;
}

static void pin_delay(size_t bytesize)
{
    long ms = pin_ms();
    if (ms > 0 && bytesize >= (64u << 20)) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        pthread_mutex_lock(&pin_mu);
        nanosleep(&ts, NULL);
        pthread_mutex_unlock(&pin_mu);
    }
}

static void pin_wait(void)
{
    if (pin_ms() > 0) {
        if (pthread_mutex_trylock(&pin_mu) != 0) {
            pthread_mutex_lock(&ms__fk_lock);
            ms__fk_stats.pin_waits++;
            pthread_mutex_unlock(&ms__fk_lock);
            pthread_mutex_lock(&pin_mu);
        }
        pthread_mutex_unlock(&pin_mu);
    }
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pin_delay(bytesize);
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

struct hostreg {
    uintptr_t lo, hi; /* [lo, hi) */
};
static struct hostreg *regs; /* under ms__fk_lock */
static size_t nregs, capregs;

/* Registration pins nothing here; it checks its arguments and keeps the range. */
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    pin_delay(bytesize);
    uintptr_t lo = (uintptr_t)p, hi = lo + bytesize;
    pthread_mutex_lock(&ms__fk_lock);
    for (size_t i = 0; i < nregs; i++)
        if (lo < regs[i].hi && regs[i].lo < hi) {
            pthread_mutex_unlock(&ms__fk_lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    if (nregs == capregs) {
        size_t cap = capregs ? capregs * 2 : 64;
        void *q = realloc(regs, cap * sizeof(*regs));
        if (!q) {
            pthread_mutex_unlock(&ms__fk_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        regs = q;
        capregs = cap;
    }
    regs[nregs++] = (struct hostreg){lo, hi};
    ms__fk_stats.host_registered = nregs;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    pthread_mutex_lock(&ms__fk_lock);
    for (size_t i = 0; i < nregs; i++)
        if (regs[i].lo == (uintptr_t)p) {
            regs[i] = regs[--nregs];
            rc = CUDA_SUCCESS;
            break;
        }
    ms__fk_stats.host_registered = nregs;
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    free(p);
    return CUDA_SUCCESS;
}
