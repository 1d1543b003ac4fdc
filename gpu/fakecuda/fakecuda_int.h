/*
 * fakecuda_int.h - the fake driver's internals shared by its files.
 *
 * Glossary
 *   ms__fk_lock     the fake's one mutex: every table below is read and written under it. Work
 *               (kernels, memcpy) runs without it.
 *   block       one cuMemAlloc-family allocation: an anonymous mapping, read-write, followed
 *               by a PROT_NONE guard page.
 *   reservation a cuMemAddressReserve range: PROT_NONE except where mappings are.
 *   mapping     a physical handle (memfd) mapped MAP_SHARED|MAP_FIXED into a reservation;
 *               accessible only after cuMemSetAccess. One handle may be mapped at several
 *               addresses at once (all see the same bytes); a released handle lives on until
 *               its last mapping is unmapped.
 *   host handle a physical handle created with a host location (CU_MEM_LOCATION_TYPE_HOST or
 *               _HOST_NUMA) rather than device 0: the same memfd, mapped and given access the
 *               same way, but system memory: counted in ms_fake_stats.host_* instead of
 *               used_bytes, CU_MEMORYTYPE_HOST to pointer queries, and a kernel launch passing
 *               a pointer into one of its mappings is counted (touching it with access granted
 *               is allowed, as over the bus on a GPU).
 *
 * Every exported cu* function checks its arguments and returns an error instead of crashing
 * on anything the real driver would reject; the only crashes are the ones a GPU would fault
 * on (a kernel touching inaccessible memory).
 */
#ifndef MS_FAKECUDA_INT_H
#define MS_FAKECUDA_INT_H

#include "cuabi/cuda_api.h"

#include "gpu/fakecuda/fakecuda.h"

#include <pthread.h>
#include <stdbool.h>

#define MS_FK_EXPORT __attribute__((visibility("default")))
#define MS_FK_GRAN (2ull * 1024 * 1024) /* VMM granularity, as on the H200 */
#define MS_FK_VERSION 13000             /* cuDriverGetVersion */

extern pthread_mutex_t ms__fk_lock;

/* Whether dev is a visible device's ordinal (MSCHED_FAKE_GPUS, CUDA_VISIBLE_DEVICES). */
bool ms__fk_dev_ok(int dev);
extern struct ms_fake_stats ms__fk_stats; /* under ms__fk_lock */

/* CUDA_SUCCESS after cuInit, else CUDA_ERROR_NOT_INITIALIZED. */
CUresult ms__fk_inited(void);
/* ms__fk_inited(), then CUDA_ERROR_INVALID_CONTEXT without a current context. */
CUresult ms__fk_ready(void);
/* CUDA_SUCCESS for NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD and live streams. */
CUresult ms__fk_stream_ok(CUstream s);

/* Device memory size in bytes (fixed at cuInit). */
uint64_t ms__fk_total_bytes(void);

/*
 * Check [p, p + n) for a copy or memset (ms__fk_lock held). `unified`: a range outside every
 * device allocation is host memory (CUDA_SUCCESS); otherwise it is CUDA_ERROR_INVALID_VALUE.
 * Inside a reservation but not fully mapped with read (and, for `write`, write) access:
 * CUDA_ERROR_ILLEGAL_ADDRESS.
 */
CUresult ms__fk_check_range(uint64_t p, uint64_t n, bool unified, bool write);

/* Stream capture (fakecuda_capture.c). A synchronization (of stream s, or with `context` of
 * the whole context): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when it breaks an active capture
 * (which is then invalidated), else CUDA_SUCCESS. A launch on s: *captured when s captures
 * (the launch was recorded, or failed as the returned code says). A device-to-device copy or
 * a 1D memset on s (capture_copy, capture_fill): *captured when s captures; recorded as a node,
 * a copy only when every device address it names is memory (mapped), else
 * CUDA_ERROR_INVALID_VALUE and the capture invalidated, as the real driver checks a captured copy's
 * pointers at capture time (cu_graph failed so on the H200). Any other copy or memset on s
 * (capture_other): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the capture invalidated) when s
 * captures. */
CUresult ms__fk_capture_sync(CUstream s, bool context);
CUresult ms__fk_capture_launch(CUstream s, CUfunction f, const unsigned grid[3],
                               const unsigned block[3], unsigned smem, void **args, bool *captured);
CUresult ms__fk_capture_copy(CUstream s, uint64_t dst, uint64_t src, uint64_t bytes,
                             bool *captured);
CUresult ms__fk_capture_fill(CUstream s, uint64_t dst, uint32_t value, unsigned elem, uint64_t n,
                             bool *captured);
CUresult ms__fk_capture_other(CUstream s);
/* Graph nodes a capture records (fakecuda_graph.c); g live. */
CUresult ms__fk_graph_add_copy(CUgraph g, uint64_t dst, uint64_t src, uint64_t bytes);
CUresult ms__fk_graph_add_fill(CUgraph g, uint64_t dst, uint32_t value, unsigned elem, uint64_t n);

/* Pointer queries (fakecuda_ptr.c): the allocation or VMM mapping holding p (ms__fk_lock held);
 * CUDA_ERROR_INVALID_VALUE where nothing is mapped, as on the real driver. */
enum { MS__FK_PTR_DEVICE, MS__FK_PTR_MANAGED, MS__FK_PTR_ASYNC, MS__FK_PTR_VMM };
struct ms__fk_ptr {
    uint64_t base, size;
    int kind;
    bool host;        /* a mapping of a host handle (kind MS__FK_PTR_VMM): system memory */
    bool sync_memops; /* set by cuPointerSetAttribute (never for a VMM mapping) */
};
CUresult ms__fk_ptr_info(uint64_t p, struct ms__fk_ptr *out);
/* cuPointerSetAttribute(SYNC_MEMOPS) on p: recorded for a cuMemAlloc-family block;
 * CUDA_ERROR_NOT_SUPPORTED for a VMM mapping (the real driver's answer); INVALID_VALUE for no
 * memory (ms__fk_lock held). */
CUresult ms__fk_ptr_set_sync(uint64_t p, bool on);

/* Whether p lies inside a mapping of a host handle, whatever its access (ms__fk_lock held). */
bool ms__fk_host_mapped(uint64_t p);

/* Unified memory (fakecuda_um.c): track a managed block (made inaccessible until touched),
 * forget it (before it is unmapped), mark the calling thread as running a kernel, and copy the
 * counters into a stats record. */
CUresult ms__fk_um_add(uint64_t base, uint64_t bytes);
void ms__fk_um_remove(uint64_t base);
void ms__fk_um_kernel(bool running);
void ms__fk_um_stats(struct ms_fake_stats *out);

/* Kernels for the fake's graphs (fakecuda_graph.c): pack kernelParams into one malloc'd buffer
 * (*out NULL for a kernel without parameters; the caller frees it), and launch from such a
 * buffer (through the launch path's checks). */
CUresult ms__fk_pack_params(CUfunction f, void **params, void **out, size_t *out_bytes);
CUresult ms__fk_param_offsets(CUfunction f, size_t *n, const size_t **offsets);
CUresult ms__fk_launch_packed(CUfunction f, const unsigned grid[3], const unsigned block[3],
                              unsigned smem, CUstream stream, void *buf, size_t bytes);

/* Name -> function of every exported driver function the fake implements (for GPA). */
void *ms__fk_lookup_function(const char *name);

/* Launch observation (fakecuda_touch.c): call the observer for a launch about to run (phase
 * MS_FAKE_LAUNCH_BEGIN: returns the launch's new sequence number, seq ignored) or that ran
 * (MS_FAKE_LAUNCH_END, with the number BEGIN gave). No lock held by the caller. */
uint64_t ms__fk_observe(int phase, const struct ms_fake_launch *l, CUfunction f, uint64_t seq);

#endif /* MS_FAKECUDA_INT_H */
