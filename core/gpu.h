/*
 * gpu.h - THE SEAM: every operation msched performs on a GPU, as one function table.
 *
 * Design
 *   Three implementations: gpu/cuda (the real GPU through the CUDA driver API, inside the
 *   application's context), gpu/sim (a virtual clock and the cost model), gpu/fake (scripted, for
 *   unit tests: records calls, fails the Nth call, keeps real bytes so data can be checked).
 *   The executor (exec.h) is the only caller in core/.
 *
 *   Two private streams: MS_STREAM_OUT (device->host) and MS_STREAM_IN (host->device), so both
 *   link directions work at once. Events are opaque 64-bit tokens (never 0) recorded on a
 *   stream; waiting on one blocks the caller until the work before it finished.
 *
 * Contracts (all functions return MS_OK or MS_E_* and never abort)
 *   map      back each chunk with physical memory at its virtual address and make it accessible;
 *            writes c[i].phys. All-or-nothing: on failure nothing stays mapped.
 *   unmap    unmap and release each chunk's physical memory (c[i].phys from map). On failure
 *            the chunks whose unmap failed stay mapped; the call reports the first failure.
 *   copy     queue copies of each chunk between its device range and its host range on stream
 *            `s` (OUT: device->host, IN: host->device). Returns once queued.
 *   record   record an event on stream s, after everything queued on it so far.
 *   wait     block until the event has completed; reports an asynchronous copy failure.
 *   release_event  forget an event (after wait, or to abandon it).
 *   hash     content hash of each chunk's device bytes into out[i] (computed on the GPU; the
 *            same bytes give the same hash). Optional: NULL when the backend has none.
 *   info     total and free device memory.
 *   now_ns   a monotonic clock (the sim's virtual clock).
 *   copy_to_evict  (a flag, not a function) the backend keeps one copy of the data and moves
 *            it (unified memory: prefetching a range to the host is what frees the device's
 *            pages), so there is no drop: every eviction copies, clean or not.
 *
 * Ownership: the ops table and its impl pointer belong to whoever created them; the seam never
 * frees what it is given. Thread safety: one caller at a time per impl.
 */
#ifndef MS_GPU_H
#define MS_GPU_H

#include "ms.h"

#include <stdbool.h>

enum ms_stream { MS_STREAM_OUT = 0, MS_STREAM_IN = 1 };

struct ms_gpu_chunk {
    uint64_t va;    /* device virtual address of the chunk's first byte */
    uint64_t bytes; /* multiple of MS_GRAN */
    void *host;     /* host backing bytes for this chunk (may be NULL for map/unmap) */
    uint64_t phys;  /* physical handle token: out from map, in to unmap */
};

struct ms_gpu_info {
    uint64_t total_bytes;
    uint64_t free_bytes;
};

struct ms_gpu_ops {
    const char *name;
    void *impl;
    int (*map)(void *impl, struct ms_gpu_chunk *c, size_t n);
    int (*unmap)(void *impl, struct ms_gpu_chunk *c, size_t n);
    int (*copy)(void *impl, enum ms_stream s, const struct ms_gpu_chunk *c, size_t n);
    int (*record)(void *impl, enum ms_stream s, uint64_t *out_event);
    int (*wait)(void *impl, uint64_t event);
    void (*release_event)(void *impl, uint64_t event);
    int (*hash)(void *impl, const struct ms_gpu_chunk *c, size_t n, uint64_t *out);
    int (*info)(void *impl, struct ms_gpu_info *out);
    uint64_t (*now_ns)(void *impl);
    bool copy_to_evict;
};

#endif /* MS_GPU_H */
