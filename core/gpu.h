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
 *            writes c[i].phys. A chunk with a host chunk (c[i].hchunk != 0) has that host chunk
 *            mapped at its address, unless c[i].bare (nothing is mapped there): map replaces
 *            it (the host chunk keeps its bytes).
 *            All-or-nothing: on failure every chunk is as it was (host chunks mapped back, bare
 *            ones left bare).
 *   unmap    unmap and release each chunk's physical memory (c[i].phys from map); a chunk with
 *            a host chunk then has the host chunk mapped at its address (always mapped), or,
 *            with c[i].bare, its address is left mapped to nothing (the caller maps the host
 *            chunk there later with host_map, before anything can touch it). On
 *            failure the chunks whose unmap failed stay mapped to device memory; the call
 *            reports the first failure.
 *   copy     queue copies of each chunk between its device range and its host side on stream
 *            `s` (OUT: device->host, IN: host->device). The host side is the host chunk when
 *            c[i].hchunk != 0, else the host bytes at c[i].host. Returns once queued.
 *   host_new create a host chunk (host memory the device reaches through a mapping, of
 *            c[i].bytes) for each chunk whose hchunk is 0; writes c[i].hchunk. Not mapped at the
 *            chunk's address. All-or-nothing. May take long (the host pins memory: on the
 *            H200 about 3.4 GB/s), so callers create host chunks ahead of need where they can.
 *   host_free  release each chunk's host chunk (c[i].hchunk), which is not mapped at the
 *            chunk's address. Never fails (a backend keeps or pools what it cannot release).
 *   host_map / host_unmap  map each chunk's host chunk at its (unmapped) address, and undo it.
 *            host_map is all-or-nothing; host_unmap reports the first failure.
 *            The four host calls are optional (NULL): backends without them keep host bytes
 *            at c[i].host and leave an evicted chunk unmapped.
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
 * frees what it is given. Thread safety: one caller at a time per impl, except where a backend's
 * header allows the four host calls from any thread (gpu_cuda does, for chunks no other call
 * uses: an allocation's host chunks are made outside the engine's lock).
 */
#ifndef MS_GPU_H
#define MS_GPU_H

#include "ms.h"

#include <stdbool.h>

enum ms_stream { MS_STREAM_OUT = 0, MS_STREAM_IN = 1 };

struct ms_gpu_chunk {
    uint64_t va;     /* device virtual address of the chunk's first byte */
    uint64_t bytes;  /* multiple of MS_GRAN */
    void *host;      /* host backing bytes for this chunk (may be NULL for map/unmap) */
    uint64_t phys;   /* physical handle token: out from map, in to unmap */
    uint64_t hchunk; /* host chunk token (0: none): see host_new */
    bool bare;       /* map: the host chunk is not mapped at va; unmap: do not map it there */
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
    int (*host_new)(void *impl, struct ms_gpu_chunk *c, size_t n);
    void (*host_free)(void *impl, const struct ms_gpu_chunk *c, size_t n);
    int (*host_map)(void *impl, const struct ms_gpu_chunk *c, size_t n);
    int (*host_unmap)(void *impl, const struct ms_gpu_chunk *c, size_t n);
    uint64_t (*now_ns)(void *impl);
    bool copy_to_evict;
};

#endif /* MS_GPU_H */
