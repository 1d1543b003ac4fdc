/*
 * gpu_fake.h - the scripted GPU seam for unit tests.
 *
 * Design
 *   Device memory is real host memory: map allocates a buffer per chunk, copies move real bytes
 *   between it and the chunk's host backing, hash hashes the bytes. So tests can write data,
 *   evict, populate and compare. Every call is counted; "fail the Nth call" makes exactly that
 *   call (counted over all operations) return MS_E_GPU, and "fail_wait" makes a copy's
 *   completion fail asynchronously (reported by wait), as a real device fault would.
 *   Accessing device memory is only possible through ms_gpu_fake_access(), which fails for
 *   addresses that are not mapped: the oracle that catches use of unmapped memory. Host chunks
 *   (the seam's host_new) are heap buffers; one mapped at a chunk's address answers an access
 *   there too, counted as a host hit (slow on a GPU, correct).
 *
 * Invariants
 *   - live_maps() == maps succeeded - unmaps succeeded; live_events() == recorded - released.
 *   - used_bytes <= capacity; a map beyond capacity fails with MS_E_NOSPACE.
 *
 * Ownership: ms_gpu_fake_new returns an object freed by ms_gpu_fake_free, which also frees any
 * mapping still live. Not thread-safe.
 */
#ifndef MS_GPU_FAKE_H
#define MS_GPU_FAKE_H

#include "core/gpu.h"

struct ms_gpu_fake;

enum ms_fake_op {
    MS_FAKE_MAP = 0,
    MS_FAKE_UNMAP,
    MS_FAKE_COPY,
    MS_FAKE_RECORD,
    MS_FAKE_WAIT,
    MS_FAKE_HASH,
    MS_FAKE_HOST, /* host_new, host_map, host_unmap (host_free cannot fail) */
    MS_FAKE_OPS
};

struct ms_gpu_fake *ms_gpu_fake_new(uint64_t capacity);
void ms_gpu_fake_free(struct ms_gpu_fake *f);
/* The seam table bound to f (valid while f lives). */
const struct ms_gpu_ops *ms_gpu_fake_ops(struct ms_gpu_fake *f);

/* Make the nth call from now (1 = the next) fail; 0 disables. */
void ms_gpu_fake_fail_after(struct ms_gpu_fake *f, uint64_t n);
/* Make the nth wait from now report an asynchronous copy failure; 0 disables. */
void ms_gpu_fake_fail_wait_after(struct ms_gpu_fake *f, uint64_t n);

uint64_t ms_gpu_fake_calls(const struct ms_gpu_fake *f, enum ms_fake_op op);
uint64_t ms_gpu_fake_total_calls(const struct ms_gpu_fake *f);
uint64_t ms_gpu_fake_live_maps(const struct ms_gpu_fake *f);
uint64_t ms_gpu_fake_live_events(const struct ms_gpu_fake *f);
uint64_t ms_gpu_fake_used(const struct ms_gpu_fake *f);

/* Pointer to `len` bytes of the memory mapped at va (a device mapping, else a host chunk
 * mapped there, which counts a host hit), or NULL if any of it is not mapped. */
void *ms_gpu_fake_access(struct ms_gpu_fake *f, uint64_t va, uint64_t len);
/* Live host chunks, and accesses that landed in a host chunk (a miss of the prediction). */
uint64_t ms_gpu_fake_host_chunks(const struct ms_gpu_fake *f);
uint64_t ms_gpu_fake_host_hits(const struct ms_gpu_fake *f);

#endif /* MS_GPU_FAKE_H */
