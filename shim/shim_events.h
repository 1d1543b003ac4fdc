/*
 * shim_events.h - what the hooks tell the rest of libmsched: one call per driver event.
 *
 * Design
 *   Hooks (shim/hook_*.c) are thin: they decode a driver call into one of the events below,
 *   call it, and forward to the real driver. Everything that decides or records sits behind
 *   this header (shim/events.c today: counters and the trace recorder; the core's region table,
 *   launch gate and daemon client later), so the hooks do not change when the policy does.
 *
 *   Order relative to the real call:
 *     before   launch, copy, memset: the call has not been submitted yet (the launch gate's
 *              place); the event does not know whether the driver will accept it.
 *     after    init, alloc, sync, meminfo: only calls the driver accepted are reported (an
 *              allocation needs its address).
 *     both     free: ms_shim_on_free_begin before the real call takes the allocation out of the
 *              shim's books (once the driver has freed it, another thread may get the same
 *              address back, and its allocation must not be confused with this one);
 *              ms_shim_on_free_end after it counts the free, or puts the allocation back when
 *              the driver refused to free it.
 *   The types carry no cuda.h: addresses are uint64_t, handles are opaque pointers.
 *
 * Locking
 *   Every function takes the shim's one mutex internally, briefly, and never calls the driver
 *   while holding it. Callable from any thread, never from a signal handler.
 *
 * Errors
 *   None reported: an event that cannot be recorded (out of memory, trace write failure) is
 *   counted and logged once when MSCHED_VERBOSE is set; the application's call is unaffected.
 */
#ifndef MS_SHIM_EVENTS_H
#define MS_SHIM_EVENTS_H

#include "core/predict.h"
#include "core/region.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A stream as a hook saw it: the handle, and whether the entry point was a _ptsz/_ptds one (so
 * that a NULL handle means the calling thread's per-thread default stream). */
struct ms_shim_stream {
    const void *handle;
    bool per_thread;
};

enum ms_shim_copy_kind {
    MS_SHIM_COPY_H2D = 0,
    MS_SHIM_COPY_D2H,
    MS_SHIM_COPY_D2D,
    MS_SHIM_COPY_H2H,
    MS_SHIM_COPY_UNIFIED, /* cuMemcpy & co: direction found from the known allocations */
};

enum ms_shim_launch_kind {
    MS_SHIM_LAUNCH_KERNEL = 0, /* cuLaunchKernel(_ptsz) */
    MS_SHIM_LAUNCH_EX,         /* cuLaunchKernelEx(_ptsz) */
    MS_SHIM_LAUNCH_COOP,       /* cuLaunchCooperativeKernel(_ptsz) */
    MS_SHIM_LAUNCH_KINDS
};

struct ms_shim_launch {
    const void *func; /* the CUfunction (or a CUkernel passed as one) */
    const char *name; /* from cuFuncGetName; "" when unknown, never NULL */
    uint32_t grid[3]; /* each >= 1 for a valid launch */
    uint32_t block[3];
    uint32_t smem_bytes;
    struct ms_shim_stream stream;
    enum ms_shim_launch_kind kind;
    /* The packed parameter buffer, as the device sees it. params_known is false when the bytes
     * could not be built (kernelParams given but no layout from the driver): then params_len
     * is 0. */
    const uint8_t *params;
    size_t params_len;
    bool params_known;
    /* Offsets and sizes of the parameters (cuFuncGetParamInfo), ascending; NULL when the
     * driver gave none ("unknown layout"). A known kernel without parameters has a non-NULL
     * layout and nlayout 0. */
    const struct ms_param_layout *layout;
    size_t nlayout;
};

/* Counters since process start (or since fork, in a child). */
struct ms_shim_counters {
    uint64_t inits;    /* successful cuInit calls */
    uint64_t launches; /* launches submitted, every kind */
    uint64_t launches_kind[MS_SHIM_LAUNCH_KINDS];
    uint64_t launches_unknown; /* launches whose parameter layout was unknown */
    uint64_t graph_launches;   /* cuGraphLaunch calls (not counted in launches) */
    uint64_t allocs;           /* successful allocations, every kind */
    uint64_t alloc_bytes;      /* sum of their sizes */
    uint64_t frees;            /* successful frees of a known allocation */
    uint64_t frees_unknown;    /* successful frees of an address the shim never saw (not 0) */
    uint64_t live_bytes;       /* bytes allocated and not freed (device memory) */
    uint64_t host_allocs;      /* page-locked host allocations and registrations (not in allocs) */
    uint64_t stream_memops;    /* cuStreamWrite/WaitValue*, cuStreamBatchMemOp */
    uint64_t host_funcs;       /* cuLaunchHostFunc */
    uint64_t ipc_opens;        /* cuIpcOpenMemHandle successes (another process's memory) */
    uint64_t host_live_bytes;  /* their bytes not freed or unregistered */
    uint64_t peak_bytes;       /* maximum of live_bytes */
    uint64_t copies, copy_bytes;
    uint64_t memsets, memset_bytes;
    uint64_t syncs;           /* cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize */
    uint64_t meminfo;         /* cuMemGetInfo_v2 */
    uint64_t procaddr;        /* cuGetProcAddress(_v2) calls that returned a function */
    uint64_t procaddr_hooked; /* ... of which the shim replaced with a hook */
    uint64_t dlsym_hooked;    /* dlsym(libcuda handle, "cu...") answered with a hook */
    uint64_t trace_records;   /* records written to MSCHED_TRACE */
    uint64_t trace_dropped;   /* records (or parts of records) the trace could not hold */
};

void ms_shim_on_init(unsigned int flags);
void ms_shim_on_alloc(uint64_t ptr, uint64_t bytes, enum ms_region_kind kind);
/* An allocation the shim knows (handed from ms_shim_on_free_begin to ms_shim_on_free_end). */
struct ms_shim_alloc {
    uint64_t ptr;
    uint64_t bytes;
    enum ms_region_kind kind;
};

/* Before freeing ptr: true (and *out filled) when ptr is a known allocation, now forgotten. */
bool ms_shim_on_free_begin(uint64_t ptr, struct ms_shim_alloc *out);
/* After: `was` is what begin returned (NULL when it returned false); `freed`: the driver
 * succeeded. */
void ms_shim_on_free_end(uint64_t ptr, const struct ms_shim_alloc *was, bool freed);
/* Launch, copy and memset return 0 to let the call go ahead, or a CUresult the hook returns
 * instead of forwarding (the memory engine could not make the memory resident). */
int ms_shim_on_launch(const struct ms_shim_launch *l);
/* A batch of n 1D copies between any memories (direction looked up per pair); all gated at
 * once. */
int ms_shim_on_copy_batch(const unsigned long long *dst, const unsigned long long *src,
                          const size_t *bytes, size_t n, struct ms_shim_stream s);
/* A stream memory operation on [addr, addr + bytes) (bytes 0: a batch, everything gated), and a
 * host function launched into a stream (counted only). */
int ms_shim_on_memop(uint64_t addr, uint64_t bytes, struct ms_shim_stream s);
void ms_shim_on_host_func(void);
void ms_shim_on_ipc_open(void);
/* A graph launch: gated on what the graph reaches (engine.h), everything when unknown. */
int ms_shim_on_graph_launch(const void *exec, struct ms_shim_stream s);
/* One piece of a graph launched in pieces (shim/graph_pieces.c): the nodes' reach (nodes
 * sorted by address); `first` for a launch's first piece (counted as the graph launch). */
int ms_shim_on_graph_piece(const void *exec, const void *const *nodes, size_t n, bool first,
                           struct ms_shim_stream s);
int ms_shim_on_copy(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                    struct ms_shim_stream s);
/* The same for a copy whose host side may be smaller than `bytes` (2D: pitches differ): the
 * host bytes are not read (no pointer-table scan) unless `contiguous`. */
int ms_shim_on_copy_ex(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                       struct ms_shim_stream s, bool contiguous);
int ms_shim_on_memset(uint64_t dst, uint64_t bytes, struct ms_shim_stream s);
void ms_shim_on_sync(void);
void ms_shim_on_meminfo(uint64_t free_bytes, uint64_t total_bytes);
/* Entry-point resolution: `hooked` when the shim handed out its own function. */
void ms_shim_on_procaddr(bool hooked);
void ms_shim_on_dlsym_hooked(void);

/* A consistent snapshot of the counters. */
void ms_shim_counters_get(struct ms_shim_counters *out);

/* Called by shim.c: once at initialisation (configuration read from the environment), at exit
 * (flush the trace, print the summary when verbose), and in a forked child (the child neither
 * writes its parent's trace nor inherits its counters). */
void ms__shim_events_init(const char *trace_path);
void ms__shim_events_exit(bool verbose);
void ms__shim_events_atfork_child(void);

#endif /* MS_SHIM_EVENTS_H */
