/*
 * gpu_cuda.h - the real GPU behind the seam, through the CUDA driver API.
 *
 * Design
 *   The seam's functions call the driver through a table of function pointers (struct
 *   ms_cuda_api) loaded from a libcuda handle, never through symbols linked by name: inside the
 *   shim the names resolve to the shim's own hooks, and the engine must reach the real driver.
 *   ms_cuda_api_load() fills the table from any dlopen handle (the shim passes the real driver's).
 *
 *   Chunks are backed by physical handles from cuMemCreate (pinned device memory on one device),
 *   mapped whole at offset 0 and made read-write for that device (docs/h200-measurements.md: a
 *   handle is the unit of eviction). Unmapped handles go to a pool keyed by size (up to
 *   pool_limit bytes) and are reused by the next map of the same size: remapping a pooled handle
 *   skips cuMemCreate/cuMemRelease (89 vs 80 GB/s for swaps in 128 MiB runs). Copies run on two
 *   private non-blocking streams, one per direction. Events come from a free list.
 *
 *   Host chunks (always-mapped regions): a VMM handle of pinned host memory
 *   (CU_MEM_LOCATION_TYPE_HOST), mapped for good at a private "shadow" reservation of its own
 *   and, while its chunk is off the device, also at the chunk's address. Copies between a
 *   chunk and its host chunk are device-to-device copies between the two addresses (55 GB/s
 *   host->device on the H200). map unmaps the host chunk from the chunk's address and maps a
 *   device handle there; unmap does the reverse, and maps the device handle back if the host
 *   chunk cannot be mapped (the chunk is never left unmapped). Released host chunks go to a
 *   second pool (up to ms_gpu_cuda_set_host_pool's bytes) with their shadow mappings, for the
 *   next host_new of the same size: creating one pins memory at about 3.4 GB/s; a pooled chunk
 *   that no host_new takes is released by ms_gpu_cuda_host_trim once idle long enough. All the
 * pinned memory host chunks hold (live, pooled, being created) stays within a host memory limit
 *   (ms_gpu_cuda_set_host_limit): beyond it host_new fails (MS_E_NOSPACE), never the host.
 *
 *   hash: a GPU kernel (gpu/cuda/hash.ptx, loaded when ms_gpu_cuda_new gets its text) reduces
 *   each chunk to a 64-bit value; a batch of chunks is one zeroing, one launch per chunk, one
 *   copy of the results to pinned memory and one synchronization, all on a third private
 *   stream. Without PTX, or when the PTX cannot be loaded, the seam reports no hash
 *   (ops->hash == NULL).
 *
 *   A second constructor builds the unified-memory variant of the seam (below).
 *
 * Errors: driver failures become MS_E_GPU (MS_E_NOSPACE for CUDA_ERROR_OUT_OF_MEMORY); the last
 * driver error code and the call that failed are kept for messages (ms_gpu_cuda_last_error).
 *
 * Ownership and threads: one object per CUDA context, used by one thread at a time, except the
 * host chunk calls (host_new, host_free, host_map, host_unmap), which any thread may make beside
 * the others on chunks no other call uses; the caller makes the context current before calling
 * in. ms_gpu_cuda_free releases the pool, streams and
 * events (not mappings still live: the caller unmaps first).
 */
#ifndef MS_GPU_CUDA_H
#define MS_GPU_CUDA_H

#include <cuda.h>

#include "core/gpu.h"

struct ms_cuda_api {
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*cuMemFreeHost)(void *);
    /* Optional (NULL when the driver lacks them): only the unified seam needs them. */
    CUresult (*cuMemPrefetchAsync)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
};

/* Fill api from a dlopen handle of the real driver (dlsym of each versioned name).
 * Returns MS_OK or MS_E_NOTFOUND naming the first missing symbol in *missing. */
int ms_cuda_api_load(struct ms_cuda_api *api, void *dl_handle, const char **missing);

struct ms_gpu_cuda;

/* Create the seam for the current context's device. hash_ptx may be NULL (no GPU hash).
 * pool_limit: bytes of unmapped physical handles kept for reuse. */
int ms_gpu_cuda_new(const struct ms_cuda_api *api, const char *hash_ptx, uint64_t pool_limit,
                    struct ms_gpu_cuda **out);
/*
 * The unified-memory seam, for regions allocated with cuMemAllocManaged (always mapped): map
 * is cuMemPrefetchAsync to the device on the IN stream (fresh chunks included, so a first
 * touch does not fault), or nothing when `demand` (the GPU's page faults bring the pages in:
 * the demand-paging baseline); unmap and the IN copy do nothing; an eviction is
 * cuMemPrefetchAsync to the host on the OUT stream (ops->copy_to_evict: no drops, the data
 * moves). No hash. Needs the optional cuMemPrefetchAsync (MS_E_NOTFOUND without it).
 */
int ms_gpu_cuda_new_unified(const struct ms_cuda_api *api, bool demand, struct ms_gpu_cuda **out);
void ms_gpu_cuda_free(struct ms_gpu_cuda *g);
const struct ms_gpu_ops *ms_gpu_cuda_ops(struct ms_gpu_cuda *g);
/* The last driver error as "cuXxx: CUDA_ERROR_YYY", or "" if none. */
const char *ms_gpu_cuda_last_error(const struct ms_gpu_cuda *g);
/* Bytes held in the pool of unmapped handles. */
uint64_t ms_gpu_cuda_pooled(const struct ms_gpu_cuda *g);

struct ms_gpu_cuda_host_stats {
    uint64_t live, live_bytes;                  /* host chunks handed out and not freed */
    uint64_t created, created_bytes, create_ns; /* made by cuMemCreate, and the time it took */
    uint64_t reused;                            /* taken from the pool */
    uint64_t reserved, reserved_bytes;          /* made into the pool ahead of need */
    uint64_t trimmed, trimmed_bytes;            /* released from the pool after idling */
    uint64_t pooled_bytes;
    uint64_t limit;      /* the host memory limit (0: none) */
    uint64_t limit_hits; /* host chunks refused at the limit */
};
void ms_gpu_cuda_host_stats(struct ms_gpu_cuda *g, struct ms_gpu_cuda_host_stats *out);
/* Bound the pinned host memory host chunks hold (handed out, pooled, and being created) to
 * `bytes` (0: no bound). At the bound host_new drains the pool, then fails with MS_E_NOSPACE
 * and ms_gpu_cuda_host_error says "the host memory limit: ...". Thread-safe. */
void ms_gpu_cuda_set_host_limit(struct ms_gpu_cuda *g, uint64_t bytes);
/* Bound the pool of released host chunks to `bytes` (0, the default: a released host chunk is
 * unpinned at once). Thread-safe. */
void ms_gpu_cuda_set_host_pool(struct ms_gpu_cuda *g, uint64_t bytes);
/* Release the host chunk that has been in the pool longest, if that is `idle_ns` or more
 * (*freed: its bytes, 0 when none was). Unpinning takes milliseconds; thread-safe like the host
 * chunk calls; the caller makes the context current. */
int ms_gpu_cuda_host_trim(struct ms_gpu_cuda *g, uint64_t idle_ns, uint64_t *freed);
/* Host chunks ahead of need: when the pool holds fewer than `want` host chunks of exactly
 * `bytes`, make one into it (*made = true; pinning: milliseconds). A later host_new of that size
 * takes it without pinning. Within the host memory limit (MS_E_NOSPACE beyond it, the pool left
 * as it is); the pool's own bound (ms_gpu_cuda_set_host_pool) is for released chunks and does not
 * apply. Thread-safe like the host chunk calls; the caller makes the context current. */
int ms_gpu_cuda_host_reserve(struct ms_gpu_cuda *g, uint64_t bytes, uint32_t want, bool *made);
/* The host chunk calls' last error as "cuXxx: CUDA_ERROR_YYY" (a copy owned by g: valid until
 * the next call of this function), or "". Thread-safe like those calls. */
const char *ms_gpu_cuda_host_error(struct ms_gpu_cuda *g);

#endif /* MS_GPU_CUDA_H */
