/*
 * hook_init.c - hooks for initialisation, entry-point resolution and lifetime events.
 *
 * Design
 *   cuInit starts the accuracy probe's CUPTI counters (shim/accuracy.h) before any context.
 *   cuGetProcAddress(_v2) is how cudart (and through it PyTorch) reaches every driver function:
 *   it asks for cuGetProcAddress itself first and uses what it gets for everything after
 *   (docs/h200-measurements.md). So both variants call the real one first (it validates the
 *   request and fills symbolStatus), then swap the returned pointer for the hook with the same
 *   ABI, if there is one (ms__shim_procaddr_wrap). Asked for "cuGetProcAddress", they therefore
 *   return themselves. Failed lookups pass through unchanged.
 *
 *   The host waiting for GPU work (cuCtxSynchronize(_v2), cuStreamSynchronize(_ptsz),
 *   cuEventSynchronize) is a "sync" event; the trace format records all three alike.
 *
 *   cuModuleUnload and cuLibraryUnload flush the kernel-facts cache: the driver may hand out the
 *   same CUfunction value again for another kernel.
 */
#include "shim/shim_int.h"

#include "shim/accuracy.h"
#include "shim/client.h"

#include "shim/shim_events.h"

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    CUresult rc = MS_REAL(cuInit)(Flags);
    if (rc == CUDA_SUCCESS) {
        ms_shim_on_init(Flags);
        ms_acc_early();
    }
    return rc;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult rc = MS_REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ms__shim_procaddr_wrap(symbol, cudaVersion, flags, *pfn);
    return rc;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult rc = MS_REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ms__shim_procaddr_wrap(symbol, cudaVersion, flags, *pfn);
    return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    ms_client_sync_begin();
    CUresult rc = MS_REAL(cuCtxSynchronize)();
    ms_client_sync_end();
    if (rc == CUDA_SUCCESS)
        ms_shim_on_sync();
    return rc;
}

/* CUDA 13's cuCtxSynchronize for cudaVersion >= 13000, with an explicit context. */
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    ms_client_sync_begin();
    CUresult rc = MS_REAL(cuCtxSynchronize_v2)(ctx);
    ms_client_sync_end();
    if (rc == CUDA_SUCCESS)
        ms_shim_on_sync();
    return rc;
}

/* Stream and event waits are "sync" records too (docs/trace-format.md, version 1). */
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    ms_client_sync_begin();
    CUresult rc = MS_REAL(cuStreamSynchronize)(hStream);
    ms_client_sync_end();
    if (rc == CUDA_SUCCESS)
        ms_shim_on_sync();
    return rc;
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    ms_client_sync_begin();
    CUresult rc = MS_REAL(cuStreamSynchronize_ptsz)(hStream);
    ms_client_sync_end();
    if (rc == CUDA_SUCCESS)
        ms_shim_on_sync();
    return rc;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    ms_client_sync_begin();
    CUresult rc = MS_REAL(cuEventSynchronize)(hEvent);
    ms_client_sync_end();
    if (rc == CUDA_SUCCESS)
        ms_shim_on_sync();
    return rc;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    CUresult rc = MS_REAL(cuModuleUnload)(hmod);
    if (rc == CUDA_SUCCESS)
        ms__shim_funcinfo_flush();
    return rc;
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
    CUresult rc = MS_REAL(cuLibraryUnload)(library);
    if (rc == CUDA_SUCCESS)
        ms__shim_funcinfo_flush();
    return rc;
}
