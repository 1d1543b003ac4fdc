/*
 * ptrattr.h - answering the driver's pointer queries (cuPointerGetAttribute(s),
 * cuMemGetAddressRange) for a piece of device memory described in a few facts.
 *
 * Design
 *   Both the fake driver (for its own allocations) and libmsched (for the engine's virtual
 *   regions, which must look exactly like cuMemAlloc memory whether or not a chunk is mapped or
 *   resident) answer from the same table here, so the two cannot disagree. An attribute not
 *   answered here (P2P tokens, anything newer) returns MS_PTRATTR_UNKNOWN and the caller decides
 *   (the shim asks the real driver).
 *
 * Pure functions; no locking, no allocation.
 */
#ifndef MS_CUABI_PTRATTR_H
#define MS_CUABI_PTRATTR_H

#include "cuabi/cuda_api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ms_ptrattr_mem {
    uint64_t base, size;       /* the allocation (or mapping) holding the pointer */
    unsigned long long buffer; /* its buffer id (unique among live allocations) */
    CUcontext ctx;             /* the context it belongs to (NULL for VMM mappings) */
    int device;                /* device ordinal */
    bool managed;              /* managed memory (also has a host pointer) */
    bool ipc_capable;          /* legacy CUDA IPC may export it */
    bool sync_memops;          /* cuPointerSetAttribute(SYNC_MEMOPS) set it */
};

#define MS_PTRATTR_UNKNOWN (-1)

/* The value of attribute a for pointer p inside m, written to data: CUDA_SUCCESS,
 * CUDA_ERROR_INVALID_VALUE (the attribute does not apply, e.g. HOST_POINTER of device memory),
 * or MS_PTRATTR_UNKNOWN (not answered here; data untouched). */
int ms_ptrattr_get(CUpointer_attribute a, uint64_t p, const struct ms_ptrattr_mem *m, void *data);

/* The size of attribute a's value (cuPointerGetAttributes zeroes what it cannot answer). */
size_t ms_ptrattr_size(CUpointer_attribute a);

#endif /* MS_CUABI_PTRATTR_H */
