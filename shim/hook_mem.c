/*
 * hook_mem.c - hooks for device allocation and memory information.
 *
 * Design
 *   Allocation hooks forward first and report only what the driver accepted: an allocation
 *   needs its address, and out-parameters of a failed call are never read (HAMi-core #313).
 *   Free hooks report on both sides of the real call (shim_events.h says why). Sizes
 *   are what the application owns: a pitched allocation is pitch * height bytes.
 *   The _ptsz variants differ from the legacy ones only in what a NULL stream means; the
 *   allocation itself is the same.
 *
 *   With the memory engine active (engine.h), cuMemAlloc, cuMemAllocPitch and cuMemAllocAsync
 *   (the stream's default pool) become engine regions. A pitched allocation gets the pitch the
 *   width rounded up to 512 bytes (a valid pitch for any element size; the driver's own choice
 *   is not asked). A stream-ordered allocation is usable at once, which is more than stream
 *   order promises; its cuMemFreeAsync waits for the device before releasing it (the engine's
 *   free synchronizes the context), so no queued work can still use it. Allocations from
 *   explicit pools (cuMemAllocFromPoolAsync) keep the pool's semantics (export, access,
 *   thresholds) and go to the driver: neither evicted nor counted against the budget.
 *
 *   Page-locked host memory (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister) is reported as
 *   allocations of kind host, counted apart from device memory (host_allocs, host_live_bytes).
 */
#include "shim/shim_int.h"

#include "shim/shim_events.h"
#include "shim/client.h"
#include "shim/engine.h"

static void report_alloc(CUresult rc, const CUdeviceptr *dptr, uint64_t bytes,
                         enum ms_region_kind kind)
{
    if (rc == CUDA_SUCCESS && dptr)
        ms_shim_on_alloc(*dptr, bytes, kind);
}

/* The engine takes the allocation: true with *rc its result (reported), false to forward. */
static bool engine_take(CUdeviceptr *dptr, uint64_t bytes, enum ms_region_kind kind, CUresult *rc)
{
    if (!dptr || !ms_engine_active())
        return false;
    bool handled = false;
    uint64_t p = 0;
    *rc = (CUresult)ms_engine_alloc(&p, bytes, &handled);
    if (!handled)
        return false;
    if (*rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    report_alloc(*rc, dptr, bytes, kind);
    return true;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc;
    if (engine_take(dptr, bytesize, MS_RK_DEVICE, &rc))
        return rc;
    rc = MS_REAL(cuMemAlloc_v2)(dptr, bytesize);
    report_alloc(rc, dptr, bytesize, MS_RK_DEVICE);
    return rc;
}

#define PITCH_ALIGN 512u

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    CUresult rc;
    /* Arguments the driver would refuse go to the driver, to be refused there. */
    bool valid = pPitch && WidthInBytes > 0 && Height > 0 && WidthInBytes <= (1ull << 40) &&
                 Height <= (1ull << 40) / WidthInBytes &&
                 (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16);
    size_t pitch = valid ? (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN : 0;
    if (valid && engine_take(dptr, (uint64_t)pitch * Height, MS_RK_DEVICE, &rc)) {
        if (rc == CUDA_SUCCESS)
            *pPitch = pitch;
        return rc;
    }
    rc = MS_REAL(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc == CUDA_SUCCESS && pPitch)
        report_alloc(rc, dptr, (uint64_t)*pPitch * Height, MS_RK_DEVICE);
    return rc;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult rc = MS_REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    report_alloc(rc, dptr, bytesize, MS_RK_MANAGED);
    return rc;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult rc;
    if (engine_take(dptr, bytesize, MS_RK_ASYNC, &rc))
        return rc;
    rc = MS_REAL(cuMemAllocAsync)(dptr, bytesize, hStream);
    report_alloc(rc, dptr, bytesize, MS_RK_ASYNC);
    return rc;
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult rc;
    if (engine_take(dptr, bytesize, MS_RK_ASYNC, &rc))
        return rc;
    rc = MS_REAL(cuMemAllocAsync_ptsz)(dptr, bytesize, hStream);
    report_alloc(rc, dptr, bytesize, MS_RK_ASYNC);
    return rc;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    CUresult rc = MS_REAL(cuMemAllocFromPoolAsync)(dptr, bytesize, pool, hStream);
    report_alloc(rc, dptr, bytesize, MS_RK_ASYNC);
    return rc;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream)
{
    CUresult rc = MS_REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, bytesize, pool, hStream);
    report_alloc(rc, dptr, bytesize, MS_RK_ASYNC);
    return rc;
}

/*
 * A free of dptr: reported on both sides of the call; the engine releases its own regions
 * (waiting for the device), anything else goes to the driver's `real` (stream for the async
 * variants, NULL for cuMemFree).
 */
static CUresult free_common(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr, CUstream),
                            CUstream stream)
{
    struct ms_shim_alloc was;
    bool known = ms_shim_on_free_begin(dptr, &was);
    bool handled = false;
    CUresult rc = (CUresult)ms_engine_free(dptr, &handled);
    if (!handled)
        rc = real(dptr, stream);
    ms_shim_on_free_end(dptr, known ? &was : NULL, rc == CUDA_SUCCESS);
    return rc;
}

static CUresult real_free(CUdeviceptr dptr, CUstream unused)
{
    (void)unused;
    return MS_REAL(cuMemFree_v2)(dptr);
}

static CUresult real_free_async(CUdeviceptr dptr, CUstream s)
{
    return MS_REAL(cuMemFreeAsync)(dptr, s);
}

static CUresult real_free_async_ptsz(CUdeviceptr dptr, CUstream s)
{
    return MS_REAL(cuMemFreeAsync_ptsz)(dptr, s);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    return free_common(dptr, real_free, NULL);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_common(dptr, real_free_async, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_common(dptr, real_free_async_ptsz, hStream);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *pfree, size_t *ptotal)
{
    CUresult rc = MS_REAL(cuMemGetInfo_v2)(pfree, ptotal);
    if (rc == CUDA_SUCCESS && pfree && ptotal)
        ms_shim_on_meminfo(*pfree, *ptotal);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Page-locked host memory: counted apart (host_allocs, host_live_bytes) and traced as regions
 * of kind host, never evicted; the engine's own backing stores use the driver directly.       */

static void report_host(CUresult rc, void *const *pp, uint64_t bytes)
{
    if (rc == CUDA_SUCCESS && pp && *pp)
        ms_shim_on_alloc((uint64_t)(uintptr_t)*pp, bytes, MS_RK_HOST);
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    CUresult rc = MS_REAL(cuMemAllocHost_v2)(pp, bytesize);
    report_host(rc, pp, bytesize);
    return rc;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUresult rc = MS_REAL(cuMemHostAlloc)(pp, bytesize, Flags);
    report_host(rc, pp, bytesize);
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    struct ms_shim_alloc was;
    bool known = ms_shim_on_free_begin((uint64_t)(uintptr_t)p, &was);
    CUresult rc = MS_REAL(cuMemFreeHost)(p);
    ms_shim_on_free_end((uint64_t)(uintptr_t)p, known ? &was : NULL, rc == CUDA_SUCCESS);
    return rc;
}

CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    CUresult rc = MS_REAL(cuMemHostRegister_v2)(p, bytesize, Flags);
    report_host(rc, &p, bytesize);
    return rc;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    struct ms_shim_alloc was;
    bool known = ms_shim_on_free_begin((uint64_t)(uintptr_t)p, &was);
    CUresult rc = MS_REAL(cuMemHostUnregister)(p);
    ms_shim_on_free_end((uint64_t)(uintptr_t)p, known ? &was : NULL, rc == CUDA_SUCCESS);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* IPC: memory the engine virtualizes moves between device and host, so it cannot be shared
 * with another process; asking for a handle to it is refused in one line (the driver would
 * refuse a VMM range too, less clearly). Memory opened from another process is not this
 * process's to move: it is counted (ipc_opens) and left alone.                                 */

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (ms_engine_owns(dptr)) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            ms__shim_say("cuIpcGetMemHandle refused (CUDA_ERROR_NOT_SUPPORTED): msched moves "
                         "this memory, so another process could not hold it; run the program "
                         "with --engine off (MSCHED_ENGINE=off) to share device memory (for the "
                         "application's exportable VMM handles, MSCHED_VMM_EXPORTABLE=0 gives "
                         "them to the driver instead)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return MS_REAL(cuIpcGetMemHandle)(pHandle, dptr);
}

/* A dma-buf of a range (GPUDirect RDMA: NCCL and UCX register device buffers this way) would
 * let a NIC write into memory the engine moves away at its next eviction: refused like an IPC
 * handle. */
CUresult CUDAAPI cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                               CUmemRangeHandleType handleType,
                                               unsigned long long flags)
{
    if (ms_engine_owns(dptr) || (size && ms_engine_owns(dptr + size - 1))) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            ms__shim_say("cuMemGetHandleForAddressRange refused (CUDA_ERROR_NOT_SUPPORTED): "
                         "msched moves this memory, so a device given a handle to it (RDMA) "
                         "could not keep reaching it; run the program with --engine off "
                         "(MSCHED_ENGINE=off) to export device memory");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return MS_REAL(cuMemGetHandleForAddressRange)(handle, dptr, size, handleType, flags);
}

#define IPC_OPEN_HOOK(name)                                                                        \
    CUresult CUDAAPI name(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)           \
    {                                                                                              \
        CUresult rc = MS_REAL(name)(pdptr, handle, Flags);                                         \
        if (rc == CUDA_SUCCESS)                                                                    \
            ms_shim_on_ipc_open();                                                                 \
        return rc;                                                                                 \
    }

IPC_OPEN_HOOK(cuIpcOpenMemHandle_v2)
IPC_OPEN_HOOK(cuIpcOpenMemHandle)
