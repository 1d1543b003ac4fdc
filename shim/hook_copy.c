/*
 * hook_copy.c - hooks for copies and memsets: each names the byte ranges it touches.
 *
 * Design
 *   Copies and memsets are commands like launches: the event goes out *before* the call (the
 *   launch gate's place), then the call is forwarded unchanged. The families differ only in
 *   argument types and in what a NULL stream means, so each family is one macro that expands
 *   to the legacy hook and its _ptds (synchronous) or _ptsz (asynchronous) twin; every
 *   expansion still has the exact cuda.h prototype (the compiler checks it against cuda.h).
 *
 *   cuMemcpy / cuMemcpyAsync use unified addressing and name no direction: the event layer
 *   decides it from the allocations it knows. Peer copies are device to device. A 2D copy or
 *   memset is reported as one range per side: from its first byte to its last, pitch gaps
 *   included (an over-estimate, never an under-estimate); array operands report address 0.
 *
 * Invariants
 *   - The real function is resolved before the event is sent, so the shim is initialised
 *     (trace path read) before any event.
 */
#include "shim/shim_int.h"

#include "shim/engine.h"
#include "shim/shim_events.h"

static struct ms_shim_stream on(CUstream s, bool per_thread)
{
    return (struct ms_shim_stream){(const void *)s, per_thread};
}

/* Bytes from the first to the last byte of `height` rows of `width` bytes, `pitch` apart. */
static uint64_t extent(uint64_t width, uint64_t height, uint64_t pitch)
{
    if (width == 0 || height == 0)
        return 0;
    if (height - 1 > (UINT64_MAX - width) / (pitch ? pitch : 1))
        return UINT64_MAX;
    return (height - 1) * pitch + width;
}

/* ------------------------------------------------------------------------------------------ */
/* One-dimensional copies                                                                       */

#define COPY_HOOK(name, kind, dst_t, src_t, pt)                                                    \
    CUresult CUDAAPI name(dst_t dst, src_t src, size_t ByteCount)                                  \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_copy((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, ByteCount,    \
                                 kind, on(NULL, pt)));                                             \
        return real(dst, src, ByteCount);                                                          \
    }

#define COPY_ASYNC_HOOK(name, kind, dst_t, src_t, pt)                                              \
    CUresult CUDAAPI name(dst_t dst, src_t src, size_t ByteCount, CUstream hStream)                \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_copy((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, ByteCount,    \
                                 kind, on(hStream, pt)));                                          \
        return real(dst, src, ByteCount, hStream);                                                 \
    }

#define COPY_PAIR(name, ptname, kind, dst_t, src_t)                                                \
    COPY_HOOK(name, kind, dst_t, src_t, false)                                                     \
    COPY_HOOK(ptname, kind, dst_t, src_t, true)

#define COPY_ASYNC_PAIR(name, ptname, kind, dst_t, src_t)                                          \
    COPY_ASYNC_HOOK(name, kind, dst_t, src_t, false)                                               \
    COPY_ASYNC_HOOK(ptname, kind, dst_t, src_t, true)

COPY_PAIR(cuMemcpy, cuMemcpy_ptds, MS_SHIM_COPY_UNIFIED, CUdeviceptr, CUdeviceptr)
COPY_PAIR(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, MS_SHIM_COPY_H2D, CUdeviceptr, const void *)
COPY_PAIR(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, MS_SHIM_COPY_D2H, void *, CUdeviceptr)
COPY_PAIR(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, MS_SHIM_COPY_D2D, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_PAIR(cuMemcpyAsync, cuMemcpyAsync_ptsz, MS_SHIM_COPY_UNIFIED, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_PAIR(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, MS_SHIM_COPY_H2D, CUdeviceptr,
                const void *)
COPY_ASYNC_PAIR(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, MS_SHIM_COPY_D2H, void *,
                CUdeviceptr)
COPY_ASYNC_PAIR(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, MS_SHIM_COPY_D2D, CUdeviceptr,
                CUdeviceptr)

#define PEER_HOOK(name, pt)                                                                        \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,      \
                          CUcontext srcContext, size_t ByteCount)                                  \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(                                                                                  \
            ms_shim_on_copy(dstDevice, srcDevice, ByteCount, MS_SHIM_COPY_D2D, on(NULL, pt)));     \
        return real(dstDevice, dstContext, srcDevice, srcContext, ByteCount);                      \
    }

#define PEER_ASYNC_HOOK(name, pt)                                                                  \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,      \
                          CUcontext srcContext, size_t ByteCount, CUstream hStream)                \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(                                                                                  \
            ms_shim_on_copy(dstDevice, srcDevice, ByteCount, MS_SHIM_COPY_D2D, on(hStream, pt)));  \
        return real(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream);             \
    }

PEER_HOOK(cuMemcpyPeer, false)
PEER_HOOK(cuMemcpyPeer_ptds, true)
PEER_ASYNC_HOOK(cuMemcpyPeerAsync, false)
PEER_ASYNC_HOOK(cuMemcpyPeerAsync_ptsz, true)

/* ------------------------------------------------------------------------------------------ */
/* Two-dimensional copies                                                                       */

/* Side of a 2D copy: 'h' host, 'd' device or array, 'u' unified (look it up). */
static char side(CUmemorytype t)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST: return 'h';
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_ARRAY: return 'd';
    default: return 'u';
    }
}

static uint64_t side_addr(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y,
                          size_t pitch)
{
    uint64_t base;
    switch (t) {
    case CU_MEMORYTYPE_HOST: base = (uint64_t)(uintptr_t)host; break;
    case CU_MEMORYTYPE_ARRAY: return 0;
    default: base = dev; break;
    }
    return base + (uint64_t)y * pitch + x;
}

static int report_2d(const CUDA_MEMCPY2D *p, struct ms_shim_stream s)
{
    if (!p)
        return 0; /* the driver rejects it */
    char a = side(p->srcMemoryType), b = side(p->dstMemoryType);
    enum ms_shim_copy_kind kind = MS_SHIM_COPY_UNIFIED;
    if (a != 'u' && b != 'u')
        kind = a == 'h' ? (b == 'h' ? MS_SHIM_COPY_H2H : MS_SHIM_COPY_H2D)
                        : (b == 'h' ? MS_SHIM_COPY_D2H : MS_SHIM_COPY_D2D);
    uint64_t src =
        side_addr(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch);
    uint64_t dst =
        side_addr(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch);
    uint64_t bytes = MS_MAX(extent(p->WidthInBytes, p->Height, p->srcPitch),
                            extent(p->WidthInBytes, p->Height, p->dstPitch));
    return ms_shim_on_copy_ex(dst, src, bytes, kind, s, false);
}

#define COPY2D_HOOK(name, pt)                                                                      \
    CUresult CUDAAPI name(const CUDA_MEMCPY2D *pCopy)                                              \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(report_2d(pCopy, on(NULL, pt)));                                                  \
        return real(pCopy);                                                                        \
    }

#define COPY2D_ASYNC_HOOK(name, pt)                                                                \
    CUresult CUDAAPI name(const CUDA_MEMCPY2D *pCopy, CUstream hStream)                            \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(report_2d(pCopy, on(hStream, pt)));                                               \
        return real(pCopy, hStream);                                                               \
    }

COPY2D_HOOK(cuMemcpy2D_v2, false)
COPY2D_HOOK(cuMemcpy2D_v2_ptds, true)
COPY2D_HOOK(cuMemcpy2DUnaligned_v2, false)
COPY2D_HOOK(cuMemcpy2DUnaligned_v2_ptds, true)
COPY2D_ASYNC_HOOK(cuMemcpy2DAsync_v2, false)
COPY2D_ASYNC_HOOK(cuMemcpy2DAsync_v2_ptsz, true)

/* ------------------------------------------------------------------------------------------ */
/* Three-dimensional, array and batched copies                                                  */

/* A side of a 3D copy: Depth slices of height rows of pitch bytes; arrays are not linear
 * memory (address 0: no region). */
static uint64_t side_addr3(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y,
                           size_t z, size_t pitch, size_t height)
{
    uint64_t a = side_addr(t, host, dev, x, y, pitch);
    return a ? a + (uint64_t)z * height * pitch : 0;
}

static uint64_t extent3(size_t w, size_t h, size_t d, size_t pitch, size_t height)
{
    if (!w || !h || !d)
        return 0;
    return ((uint64_t)(d - 1) * height + (h - 1)) * pitch + w;
}

/* CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER name their fields alike. */
#define REPORT_3D(p, s)                                                                            \
    do {                                                                                           \
        if (!(p))                                                                                  \
            return 0;                                                                              \
        char a_ = side((p)->srcMemoryType), b_ = side((p)->dstMemoryType);                         \
        enum ms_shim_copy_kind k_ = MS_SHIM_COPY_UNIFIED;                                          \
        if (a_ != 'u' && b_ != 'u')                                                                \
            k_ = a_ == 'h' ? (b_ == 'h' ? MS_SHIM_COPY_H2H : MS_SHIM_COPY_H2D)                     \
                           : (b_ == 'h' ? MS_SHIM_COPY_D2H : MS_SHIM_COPY_D2D);                    \
        uint64_t src_ =                                                                            \
            side_addr3((p)->srcMemoryType, (p)->srcHost, (p)->srcDevice, (p)->srcXInBytes,         \
                       (p)->srcY, (p)->srcZ, (p)->srcPitch, (p)->srcHeight);                       \
        uint64_t dst_ =                                                                            \
            side_addr3((p)->dstMemoryType, (p)->dstHost, (p)->dstDevice, (p)->dstXInBytes,         \
                       (p)->dstY, (p)->dstZ, (p)->dstPitch, (p)->dstHeight);                       \
        uint64_t n_ = MS_MAX(                                                                      \
            extent3((p)->WidthInBytes, (p)->Height, (p)->Depth, (p)->srcPitch, (p)->srcHeight),    \
            extent3((p)->WidthInBytes, (p)->Height, (p)->Depth, (p)->dstPitch, (p)->dstHeight));   \
        return ms_shim_on_copy_ex(dst_, src_, n_, k_, (s), false);                                 \
    } while (0)

static int report_3d(const CUDA_MEMCPY3D *p, struct ms_shim_stream s)
{
    REPORT_3D(p, s);
}

static int report_3d_peer(const CUDA_MEMCPY3D_PEER *p, struct ms_shim_stream s)
{
    REPORT_3D(p, s);
}

#define COPY3D_HOOK(name, T, report, pt)                                                           \
    CUresult CUDAAPI name(const T *pCopy)                                                          \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(report(pCopy, on(NULL, pt)));                                                     \
        return real(pCopy);                                                                        \
    }

#define COPY3D_ASYNC_HOOK(name, T, report, pt)                                                     \
    CUresult CUDAAPI name(const T *pCopy, CUstream hStream)                                        \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(report(pCopy, on(hStream, pt)));                                                  \
        return real(pCopy, hStream);                                                               \
    }

COPY3D_HOOK(cuMemcpy3D_v2, CUDA_MEMCPY3D, report_3d, false)
COPY3D_HOOK(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D, report_3d, true)
COPY3D_ASYNC_HOOK(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, report_3d, false)
COPY3D_ASYNC_HOOK(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D, report_3d, true)
COPY3D_HOOK(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, report_3d_peer, false)
COPY3D_HOOK(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER, report_3d_peer, true)
COPY3D_ASYNC_HOOK(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, report_3d_peer, false)
COPY3D_ASYNC_HOOK(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER, report_3d_peer, true)

/* Array <-> linear device memory: the linear side is gated; the array side has no address. */
CUresult CUDAAPI cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                 size_t ByteCount)
{
    MS_GATED(ms_shim_on_copy_ex(dstDevice, 0, ByteCount, MS_SHIM_COPY_D2D, on(NULL, false), false));
    return MS_REAL(cuMemcpyAtoD_v2)(dstDevice, srcArray, srcOffset, ByteCount);
}

CUresult CUDAAPI cuMemcpyAtoD_v2_ptds(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                      size_t ByteCount)
{
    MS_GATED(ms_shim_on_copy_ex(dstDevice, 0, ByteCount, MS_SHIM_COPY_D2D, on(NULL, true), false));
    return MS_REAL(cuMemcpyAtoD_v2_ptds)(dstDevice, srcArray, srcOffset, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                 size_t ByteCount)
{
    MS_GATED(ms_shim_on_copy_ex(0, srcDevice, ByteCount, MS_SHIM_COPY_D2D, on(NULL, false), false));
    return MS_REAL(cuMemcpyDtoA_v2)(dstArray, dstOffset, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{
    MS_GATED(ms_shim_on_copy_ex(0, srcDevice, ByteCount, MS_SHIM_COPY_D2D, on(NULL, true), false));
    return MS_REAL(cuMemcpyDtoA_v2_ptds)(dstArray, dstOffset, srcDevice, ByteCount);
}

/* Batches of 1D copies: every pair gated at once. */
#define BATCH_HOOK(name, pt)                                                                       \
    CUresult CUDAAPI name(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,       \
                          CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,           \
                          CUstream hStream)                                                        \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_copy_batch(dsts, srcs, sizes, count, on(hStream, pt)));                \
        return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream);                \
    }

#define BATCH_FAIL_HOOK(name, pt)                                                                  \
    CUresult CUDAAPI name(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,       \
                          CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,           \
                          size_t *failIdx, CUstream hStream)                                       \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_copy_batch(dsts, srcs, sizes, count, on(hStream, pt)));                \
        return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);       \
    }

BATCH_HOOK(cuMemcpyBatchAsync_v2, false)
BATCH_HOOK(cuMemcpyBatchAsync_v2_ptsz, true)
BATCH_FAIL_HOOK(cuMemcpyBatchAsync, false)
BATCH_FAIL_HOOK(cuMemcpyBatchAsync_ptsz, true)

/* Batches of 3D copies: their reach is not worked out; the whole footprint is made resident. */
CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                         unsigned long long flags, CUstream hStream)
{
    MS_GATED(ms_engine_gate_unbounded(on(hStream, false)));
    return MS_REAL(cuMemcpy3DBatchAsync_v2)(numOps, opList, flags, hStream);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                              unsigned long long flags, CUstream hStream)
{
    MS_GATED(ms_engine_gate_unbounded(on(hStream, true)));
    return MS_REAL(cuMemcpy3DBatchAsync_v2_ptsz)(numOps, opList, flags, hStream);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                      size_t *failIdx, unsigned long long flags, CUstream hStream)
{
    MS_GATED(ms_engine_gate_unbounded(on(hStream, false)));
    return MS_REAL(cuMemcpy3DBatchAsync)(numOps, opList, failIdx, flags, hStream);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                           size_t *failIdx, unsigned long long flags,
                                           CUstream hStream)
{
    MS_GATED(ms_engine_gate_unbounded(on(hStream, true)));
    return MS_REAL(cuMemcpy3DBatchAsync_ptsz)(numOps, opList, failIdx, flags, hStream);
}

/* ------------------------------------------------------------------------------------------ */
/* Memsets                                                                                      */

#define MEMSET_HOOK(name, val_t, elem, pt)                                                         \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, val_t value, size_t N)                            \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_memset(dstDevice, extent((uint64_t)N *(elem), 1, 0), on(NULL, pt)));   \
        return real(dstDevice, value, N);                                                          \
    }

#define MEMSET_ASYNC_HOOK(name, val_t, elem, pt)                                                   \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, val_t value, size_t N, CUstream hStream)          \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(                                                                                  \
            ms_shim_on_memset(dstDevice, extent((uint64_t)N *(elem), 1, 0), on(hStream, pt)));     \
        return real(dstDevice, value, N, hStream);                                                 \
    }

#define MEMSET2D_HOOK(name, val_t, elem, pt)                                                       \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, size_t dstPitch, val_t value, size_t Width,       \
                          size_t Height)                                                           \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_memset(dstDevice, extent((uint64_t)Width *(elem), Height, dstPitch),   \
                                   on(NULL, pt)));                                                 \
        return real(dstDevice, dstPitch, value, Width, Height);                                    \
    }

#define MEMSET2D_ASYNC_HOOK(name, val_t, elem, pt)                                                 \
    CUresult CUDAAPI name(CUdeviceptr dstDevice, size_t dstPitch, val_t value, size_t Width,       \
                          size_t Height, CUstream hStream)                                         \
    {                                                                                              \
        __typeof__(&name) real = MS_REAL(name);                                                    \
        MS_GATED(ms_shim_on_memset(dstDevice, extent((uint64_t)Width *(elem), Height, dstPitch),   \
                                   on(hStream, pt)));                                              \
        return real(dstDevice, dstPitch, value, Width, Height, hStream);                           \
    }

MEMSET_HOOK(cuMemsetD8_v2, unsigned char, 1, false)
MEMSET_HOOK(cuMemsetD8_v2_ptds, unsigned char, 1, true)
MEMSET_HOOK(cuMemsetD16_v2, unsigned short, 2, false)
MEMSET_HOOK(cuMemsetD16_v2_ptds, unsigned short, 2, true)
MEMSET_HOOK(cuMemsetD32_v2, unsigned int, 4, false)
MEMSET_HOOK(cuMemsetD32_v2_ptds, unsigned int, 4, true)
MEMSET_ASYNC_HOOK(cuMemsetD8Async, unsigned char, 1, false)
MEMSET_ASYNC_HOOK(cuMemsetD8Async_ptsz, unsigned char, 1, true)
MEMSET_ASYNC_HOOK(cuMemsetD16Async, unsigned short, 2, false)
MEMSET_ASYNC_HOOK(cuMemsetD16Async_ptsz, unsigned short, 2, true)
MEMSET_ASYNC_HOOK(cuMemsetD32Async, unsigned int, 4, false)
MEMSET_ASYNC_HOOK(cuMemsetD32Async_ptsz, unsigned int, 4, true)
MEMSET2D_HOOK(cuMemsetD2D8_v2, unsigned char, 1, false)
MEMSET2D_HOOK(cuMemsetD2D8_v2_ptds, unsigned char, 1, true)
MEMSET2D_HOOK(cuMemsetD2D16_v2, unsigned short, 2, false)
MEMSET2D_HOOK(cuMemsetD2D16_v2_ptds, unsigned short, 2, true)
MEMSET2D_HOOK(cuMemsetD2D32_v2, unsigned int, 4, false)
MEMSET2D_HOOK(cuMemsetD2D32_v2_ptds, unsigned int, 4, true)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D8Async, unsigned char, 1, false)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D8Async_ptsz, unsigned char, 1, true)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D16Async, unsigned short, 2, false)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D16Async_ptsz, unsigned short, 2, true)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D32Async, unsigned int, 4, false)
MEMSET2D_ASYNC_HOOK(cuMemsetD2D32Async_ptsz, unsigned int, 4, true)
