/*
 * hook_ptr.c - hooks for pointer queries: cuPointerGetAttribute(s), cuMemGetAddressRange_v2, and
 *   cuPointerSetAttribute (SYNC_MEMOPS: the driver refuses it on VMM memory, so the engine
 *   answers it for its regions: shim/engine.h, ms_engine_ptr_set_sync).
 *
 * Design
 *   A library asks about a device pointer before it uses it (cuFFT at plan creation, Triton
 *   before a launch, cuBLAS for its workspace). An engine region is a reservation whose chunks
 *   are mapped to device memory while resident and to host memory otherwise, and a chunk may be
 *   bare (mapped to nothing) between its deferred eviction and the map that follows: the driver
 *   would answer "host" for the first and "not memory" (CUDA_ERROR_INVALID_VALUE) for the second;
 *   on the H200 the latter made cuFFT fail with CUFFT_INTERNAL_ERROR. So for an address inside an
 *   engine region the answer is the one for a cuMemAlloc pointer of the same size, whatever its
 *   chunks' state (shim/engine.h,
 *   ms_engine_ptr_info; the values: cuabi/ptrattr.h). An address in a slab of small
 *   allocations that no block holds is in no allocation: cuPointerGetAttribute says
 *   CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes zeroes every value, cuMemGetAddressRange
 *   says CUDA_ERROR_NOT_FOUND. Any other address, and any attribute not answered there, goes to
 *   the real driver unchanged.
 */
#include "shim/shim_int.h"

#include "cuabi/ptrattr.h"
#include "shim/engine.h"

#include <string.h>

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct ms_ptrattr_mem m;
    enum ms_ptr_kind k = data ? ms_engine_ptr_info((uint64_t)ptr, &m) : MS_PTR_NONE;
    if (k == MS_PTR_HOLE)
        return CUDA_ERROR_INVALID_VALUE; /* in no allocation: what the driver says */
    if (k == MS_PTR_ALLOC) {
        int rc = ms_ptrattr_get(attribute, (uint64_t)ptr, &m, data);
        if (rc != MS_PTRATTR_UNKNOWN)
            return (CUresult)rc;
    }
    return MS_REAL(cuPointerGetAttribute)(data, attribute, ptr);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    struct ms_ptrattr_mem m;
    enum ms_ptr_kind k = attributes && data ? ms_engine_ptr_info((uint64_t)ptr, &m) : MS_PTR_NONE;
    if (k == MS_PTR_NONE)
        return MS_REAL(cuPointerGetAttributes)(numAttributes, attributes, data, ptr);
    if (k == MS_PTR_HOLE) {
        /* Not a valid pointer: as the driver, every value reads as zero, and no error. */
        for (unsigned int i = 0; i < numAttributes; i++)
            if (data[i])
                memset(data[i], 0, ms_ptrattr_size(attributes[i]));
        return CUDA_SUCCESS;
    }
    /* As the driver does for this call: what cannot be answered reads as zero. */
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        int rc = ms_ptrattr_get(attributes[i], (uint64_t)ptr, &m, data[i]);
        if (rc == MS_PTRATTR_UNKNOWN)
            rc = MS_REAL(cuPointerGetAttribute)(data[i], attributes[i], ptr);
        if (rc != CUDA_SUCCESS)
            memset(data[i], 0, ms_ptrattr_size(attributes[i]));
    }
    return CUDA_SUCCESS;
}

/* SYNC_MEMOPS (the one settable attribute) on an engine region: the engine's answer for a
 * cuMemAlloc pointer (shim/engine.h, ms_engine_ptr_set_sync); anything else: the driver. */
CUresult CUDAAPI cuPointerSetAttribute(const void *value, CUpointer_attribute attribute,
                                       CUdeviceptr ptr)
{
    if (value && attribute == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
        int rc = ms_engine_ptr_set_sync((uint64_t)ptr, *(const unsigned int *)value != 0);
        if (rc != MS_PTRATTR_UNKNOWN)
            return (CUresult)rc;
    }
    return MS_REAL(cuPointerSetAttribute)(value, attribute, ptr);
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct ms_ptrattr_mem m;
    enum ms_ptr_kind k = ms_engine_ptr_info((uint64_t)dptr, &m);
    if (k == MS_PTR_NONE)
        return MS_REAL(cuMemGetAddressRange_v2)(pbase, psize, dptr);
    if (k == MS_PTR_HOLE)
        return CUDA_ERROR_NOT_FOUND; /* in no allocation */
    if (pbase)
        *pbase = (CUdeviceptr)m.base;
    if (psize)
        *psize = (size_t)m.size;
    return CUDA_SUCCESS;
}
