/*
 * hook_init.c - hooks for initialisation, entry-point resolution and lifetime events.
 *
 * Design
 *   cuInit starts the accuracy probe's CUPTI counters (shim/accuracy.h) and the profiler's touch
 *   source (shim/profile.h) before any context.
 *   (cuGetProcAddress is hooked in shim.c, beside the hook table it hands out.)
 *
 *   The host waiting for GPU work (cuCtxSynchronize(_v2), cuStreamSynchronize(_ptsz),
 *   cuEventSynchronize) is a "sync" event; the trace format records all three alike.
 *
 *   cuModuleUnload and cuLibraryUnload flush the kernel-facts cache: the driver may hand out the
 *   same CUfunction value again for another kernel.
 */
#include "shim/shim_int.h"

#include "shim/accuracy.h"
#include "shim/profile.h"
#include "shim/client.h"

#include "shim/shim_events.h"

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    CUresult rc = MS_REAL(cuInit)(Flags);
    if (rc == CUDA_SUCCESS) {
        ms_shim_on_init(Flags);
        ms_acc_early();
        ms_prof_early();
    }
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
