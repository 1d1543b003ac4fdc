/*
 * fakecuda_ptr.c - the fake driver's pointer queries: cuPointerGetAttribute(s) and
 * cuMemGetAddressRange_v2, answered from the fake's own allocation and VMM tables, and
 * cuPointerSetAttribute (SYNC_MEMOPS: kept for a cuMemAlloc block, refused for a VMM mapping
 * with CUDA_ERROR_NOT_SUPPORTED, as the real driver refuses it).
 *
 * Design
 *   They behave like the real driver where libraries depend on it: an address inside a
 *   cuMemAlloc-family block or a mapped VMM range is device memory of the current context; an
 *   address in a reservation where nothing is mapped, or outside everything, is not
 *   (CUDA_ERROR_INVALID_VALUE from cuPointerGetAttribute and cuMemGetAddressRange; for
 *   cuPointerGetAttributes, MEMORY_TYPE 0 and zeroed values with CUDA_SUCCESS). cuFFT's plan
 *   creation failed on the H200 because an engine allocation, reserved but not yet mapped, was
 *   answered that way. Buffer ids are the allocation's base address (unique among live
 *   allocations, which is all the fake promises).
 *   A mapping of a host handle (cuMemCreate with a host location) is system memory: its
 *   MEMORY_TYPE is CU_MEMORYTYPE_HOST, in cuPointerGetAttribute and cuPointerGetAttributes
 *   alike (the real driver's answer); every other attribute is answered as for a device
 *   handle's mapping.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include "cuabi/ptrattr.h"

#include <string.h>

/* The facts of the fake's memory at m, for cuabi/ptrattr.h. */
static void describe(const struct ms__fk_ptr *m, struct ms_ptrattr_mem *out)
{
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        ctx = NULL;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        dev = 0;
    *out = (struct ms_ptrattr_mem){.base = m->base,
                                   .size = m->size,
                                   .buffer = m->base,
                                   .ctx = m->kind == MS__FK_PTR_VMM ? NULL : ctx,
                                   .device = (int)dev,
                                   .managed = m->kind == MS__FK_PTR_MANAGED,
                                   .ipc_capable = m->kind == MS__FK_PTR_DEVICE,
                                   .sync_memops = m->sync_memops};
}

static CUresult attribute(CUpointer_attribute a, uint64_t p, const struct ms__fk_ptr *m, void *data)
{
    if (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE && m->host) {
        *(unsigned int *)data = CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    }
    struct ms_ptrattr_mem d;
    describe(m, &d);
    int rc = ms_ptrattr_get(a, p, &d, data);
    return rc == MS_PTRATTR_UNKNOWN ? CUDA_ERROR_INVALID_VALUE : (CUresult)rc;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct ms__fk_ptr m;
    pthread_mutex_lock(&ms__fk_lock);
    rc = ms__fk_ptr_info((uint64_t)ptr, &m);
    pthread_mutex_unlock(&ms__fk_lock);
    return rc == CUDA_SUCCESS ? attribute(attribute_, (uint64_t)ptr, &m, data) : rc;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (numAttributes && (!attributes || !data))
        return CUDA_ERROR_INVALID_VALUE;
    struct ms__fk_ptr m;
    pthread_mutex_lock(&ms__fk_lock);
    CUresult found = ms__fk_ptr_info((uint64_t)ptr, &m);
    pthread_mutex_unlock(&ms__fk_lock);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (found != CUDA_SUCCESS ||
            attribute(attributes[i], (uint64_t)ptr, &m, data[i]) != CUDA_SUCCESS)
            memset(data[i], 0, ms_ptrattr_size(attributes[i]));
    }
    return CUDA_SUCCESS;
}

/* Only SYNC_MEMOPS is settable; on a VMM mapping the real driver refuses it
 * (CUDA_ERROR_NOT_SUPPORTED: UCX and libfabric report it for cuMemCreate memory), which is what
 * an interposer that backs cuMemAlloc with VMM must not let a program see. */
CUresult CUDAAPI cuPointerSetAttribute(const void *value, CUpointer_attribute attribute_,
                                       CUdeviceptr ptr)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value || attribute_ != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    rc = ms__fk_ptr_set_sync((uint64_t)ptr, *(const unsigned int *)value != 0);
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct ms__fk_ptr m;
    pthread_mutex_lock(&ms__fk_lock);
    rc = ms__fk_ptr_info((uint64_t)dptr, &m);
    pthread_mutex_unlock(&ms__fk_lock);
    if (rc != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)m.base;
    if (psize)
        *psize = (size_t)m.size;
    return CUDA_SUCCESS;
}
