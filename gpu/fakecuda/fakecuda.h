/*
 * fakecuda.h - the fake CUDA driver's own interface: what tests use besides the driver API.
 *
 * Design
 *   gpu/fakecuda builds a CPU-only libcuda.so.1 ($(BUILD)/lib/fakecuda/) that implements the
 *   subset of the driver API the tests use, so libmsched and everything above it run in CI
 *   without a GPU. Device memory is host memory: a CUdeviceptr is a host address, so a
 *   "kernel" is an ordinary host function that dereferences its pointer arguments. Kernels are
 *   registered with ms_fake_register_kernel instead of being loaded from modules; launches call
 *   them synchronously, in the launching thread, once per launch (not per thread block: the
 *   function sees the grid and block sizes and loops itself).
 *
 *   The fake is strict where the real driver is unforgiving, because later tests rely on it as
 *   an oracle:
 *     - virtual address ranges reserved with cuMemAddressReserve are PROT_NONE until a
 *       physical handle is mapped there *and* cuMemSetAccess grants access, and again after
 *       cuMemUnmap; a kernel touching such memory gets SIGSEGV, as a GPU would fault;
 *     - every cuMemAlloc block is followed by an inaccessible guard page;
 *     - copies and memsets check their device ranges: an unknown range is
 *       CUDA_ERROR_INVALID_VALUE, a reserved but inaccessible one CUDA_ERROR_ILLEGAL_ADDRESS;
 *     - calls before cuInit return CUDA_ERROR_NOT_INITIALIZED, and memory or launch calls
 *       without a current context CUDA_ERROR_INVALID_CONTEXT.
 *   Streams and events exist (handles are checked) but all work runs synchronously.
 *
 *   Host-located VMM handles (cuMemCreate with prop->location.type CU_MEM_LOCATION_TYPE_HOST,
 *   id ignored, or CU_MEM_LOCATION_TYPE_HOST_NUMA, any id) are memfds like device handles and
 *   map, take access and copy the same way; what differs is what they are: system memory, so
 *   they are counted apart (ms_fake_stats.host_*), not in used_bytes, not limited by the device
 *   size nor seen by cuMemGetInfo, and a pointer into one of their mappings answers
 *   CU_MEMORYTYPE_HOST to CU_POINTER_ATTRIBUTE_MEMORY_TYPE, as on the H200 with CUDA 13. A
 *   kernel may touch a mapping of one once cuMemSetAccess granted access (no fault, as over
 *   the bus); launches passing a pointer into one are counted (host_mapped_*).
 *
 *   Managed memory (cuMemAllocManaged) is tracked in 2 MiB pages that are accessible only while
 *   "on the device"; touching one that is not is a GPU page fault, served and counted
 *   (ms_fake_stats.um_*), never an error; cuMemPrefetchAsync_v2 moves pages either way.
 *
 *   Environment: MSCHED_FAKE_GPUS sets how many GPUs the fake has (default 1), each with its
 *   own fixed UUID, renumbered by CUDA_VISIBLE_DEVICES as the real driver does (fakecuda.c);
 *   MSCHED_FAKE_MEM_BYTES sets the device memory size (default 16 GiB, each GPU, one pool;
 *   reserved lazily, so only touched bytes cost host memory); MSCHED_FAKE_PIN_MS makes each
 *   cuMemHostAlloc or cuMemHostRegister of 64 MiB or more take that many milliseconds
 *   (pinning is slow on a GPU). Registrations are tracked as the driver tracks them: a range
 *   overlapping a registered one is refused (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), and so
 *   is unregistering a pointer that does not start one (CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED).
 *
 *   Memory-access instrumentation (fakecuda_touch.c): kernels are host functions, so what
 *   they touch is what they declare with ms_fake_touch (the test kernels of the profiler's
 *   tests do). The declarations are logged per launch (ms_fake_touch_drain), and a launch
 *   observer (ms_fake_set_launch_observer) is called just before and just after each kernel
 *   function runs, in the launching thread, as the real driver calls a Compute Sanitizer
 *   subscriber at LAUNCH_BEGIN and LAUNCH_END; tests/shim/fake_sanitizer.c builds on both.
 *
 * Getting at these functions: a test linked against the fake may call them directly. Under
 * libmsched (which does not export them) a test dlopens the fake by absolute path and uses
 * dlsym: the driver libmsched loaded and the one the test opens are then the same object.
 */
#ifndef MS_FAKECUDA_H
#define MS_FAKECUDA_H

#include <cuda.h>

#include <stddef.h>
#include <stdint.h>

/* What a kernel function receives for one launch. */
struct ms_fake_launch {
    const char *name;      /* as registered */
    unsigned int grid[3];  /* each >= 1 */
    unsigned int block[3]; /* each >= 1 */
    unsigned int smem_bytes;
    CUstream stream; /* as given (NULL, CU_STREAM_LEGACY, ... or a created stream) */
    /* args[i] points at parameter i, for i < nargs. Launched with kernelParams: the caller's
     * array (nargs is the registered count, or 0 when the kernel was registered without sizes).
     * Launched with extra: pointers into buf (nargs 0 without registered sizes). */
    void **args;
    size_t nargs;
    const void *buf; /* the packed buffer when launched with extra, else NULL */
    size_t buf_bytes;
    void *user; /* ms_fake_register_kernel's user pointer */
};

typedef void (*ms_fake_kernel_fn)(const struct ms_fake_launch *l);

/*
 * Register a kernel. param_sizes gives the size of each of nparams parameters; offsets follow
 * the device's rule: each parameter aligned to the largest power of two <= 8 that divides its
 * size. param_sizes NULL registers a kernel without parameter information (cuFuncGetParamInfo
 * then returns CUDA_ERROR_NOT_SUPPORTED). name is copied. The handle lives until exit.
 * Errors: CUDA_ERROR_INVALID_VALUE (NULL name, fn or out, more than 1024 parameters, a size
 * of 0), CUDA_ERROR_OUT_OF_MEMORY.
 */
CUresult ms_fake_register_kernel(const char *name, ms_fake_kernel_fn fn, const size_t *param_sizes,
                                 size_t nparams, void *user, CUfunction *out);

/* The CUkernel handle of a registered kernel (what cuLibraryGetKernel would give): accepted by
 * the launch entry points and cuKernelGetParamInfo / cuKernelGetName, refused by the CUfunction
 * queries. Errors: CUDA_ERROR_INVALID_VALUE (not a registered CUfunction, NULL out). */
CUresult ms_fake_kernel_handle(CUfunction f, CUkernel *out);

/* What the fake driver has done since it was loaded (its own record, to check interposers). */
struct ms_fake_stats {
    uint64_t launches;      /* kernels run (graph nodes included) */
    uint64_t allocs, frees; /* cuMemAlloc family (not VMM) */
    uint64_t copies, copy_bytes;
    uint64_t memsets, memset_bytes;
    uint64_t vmm_creates, vmm_releases, vmm_maps, vmm_unmaps;
    uint64_t illegal;     /* copies/memsets refused with CUDA_ERROR_ILLEGAL_ADDRESS */
    uint64_t used_bytes;  /* device memory in use (allocations + physical handles) */
    uint64_t total_bytes; /* device memory size */
    /* Unified memory (cuMemAllocManaged), in 2 MiB pages: */
    uint64_t um_faults;        /* pages brought to the device by a fault (kernel or copy) */
    uint64_t um_kernel_faults; /* of those, faults while a kernel ran */
    uint64_t um_prefetch_in, um_prefetch_out; /* bytes moved by cuMemPrefetchAsync */
    uint64_t um_device_bytes, um_device_max;  /* managed bytes on the device: now, at most */
    uint64_t graph_launches;                  /* cuGraphLaunch calls */
    uint64_t event_waits;                     /* cuStreamWaitEvent(_ptsz) calls accepted */
    uint64_t host_registered;                 /* live cuMemHostRegister ranges */
    uint64_t pin_waits; /* copies that waited for a slow pin in flight (MSCHED_FAKE_PIN_MS) */
    /* Host-located VMM handles (cuMemCreate with location HOST or HOST_NUMA): system memory the
     * device reaches over the bus, not device memory, so neither in used_bytes nor limited by
     * total_bytes (vmm_creates, vmm_releases, vmm_maps and vmm_unmaps count them too). A
     * handle is live until it is released and its last mapping is gone. */
    uint64_t host_handles;           /* live host handles */
    uint64_t host_handle_bytes;      /* their bytes */
    uint64_t host_handle_peak_bytes; /* the most host_handle_bytes ever was */
    uint64_t host_creates;           /* host handles ever created */
    /* The oracle's record of kernels reaching host memory: at every launch that runs (direct,
     * or a graph's node), each parameter of pointer size (8 bytes, registered sizes only)
     * whose value lies inside a mapping of a host handle. Allowed (the real driver lets a
     * kernel read host memory over the bus), only counted: an interposer that moved device
     * memory to host-located handles shows here. */
    uint64_t host_mapped_launches; /* launches with at least one such parameter */
    uint64_t host_mapped_args;     /* such parameters, over all launches */
};

void ms_fake_get_stats(struct ms_fake_stats *out);

/* Unified memory's page moves, as they happened (the fake's own log; a CUPTI stand-in turns
 * them into reports). A move from the host to the device by a fault is MS_FAKE_UM_FAULT. */
enum { MS_FAKE_UM_FAULT = 0, MS_FAKE_UM_PREFETCH_IN = 1, MS_FAKE_UM_PREFETCH_OUT = 2 };
struct ms_fake_um_event {
    uint64_t ns;    /* CLOCK_MONOTONIC */
    uint64_t addr;  /* the page's first byte */
    uint64_t bytes; /* the page's size (2 MiB, less at an allocation's end) */
    uint8_t kind;
};
/* Move up to max logged events, oldest first, into out; returns how many. The log keeps the
 * last 65536; older unread ones are dropped and counted (ms_fake_um_dropped). Thread-safe. */
size_t ms_fake_um_drain(struct ms_fake_um_event *out, size_t max);
uint64_t ms_fake_um_dropped(void);

/* What a kernel touched, as it declared it (ms_fake_touch). mode: MS_FAKE_TOUCH_READ and/or
 * MS_FAKE_TOUCH_WRITE, or MS_FAKE_TOUCH_BULK: an asynchronous bulk / tensor (TMA) copy, which a
 * per-access instrumentation does not see as global loads and stores. */
enum { MS_FAKE_TOUCH_READ = 1, MS_FAKE_TOUCH_WRITE = 2, MS_FAKE_TOUCH_BULK = 4 };
struct ms_fake_touch {
    uint64_t launch; /* the launch's sequence number (the observer's), 0 outside a launch */
    uint64_t addr, bytes;
    int mode;
};
/* Called from a kernel function: it touches [p, p + bytes) (mode as above). Logged; the log
 * keeps the last 65536 unread entries (older ones are dropped and counted). Thread-safe. */
void ms_fake_touch(const void *p, size_t bytes, int mode);
/* Move up to max logged touches, oldest first, into out; returns how many. Thread-safe. */
size_t ms_fake_touch_drain(struct ms_fake_touch *out, size_t max);
uint64_t ms_fake_touch_dropped(void);

/* A tensor map the fake encoded (cuTensorMapEncodeTiled, fakecuda_tmap.c): its global address
 * and the extent TMA traffic through it is bounded to. 0, or -1 for anything else. */
int ms_fake_tmap_decode(const void *tensorMap, uint64_t *addr, uint64_t *bytes);
/* Whether p lies in a mapping of a host handle (memory the engine keeps off the device). */
int ms_fake_host_mapped(const void *p);

/* The launch observer: called with MS_FAKE_LAUNCH_BEGIN just before a kernel function runs and
 * MS_FAKE_LAUNCH_END just after it returned (launches captured into a graph are observed when
 * the graph runs them), in the launching thread, with no lock of the fake held. seq numbers
 * the launch (1, 2, ...: the `launch` of its touches); f is the handle it was launched with.
 * One observer at a time; NULL removes it. */
enum { MS_FAKE_LAUNCH_BEGIN = 0, MS_FAKE_LAUNCH_END = 1 };
typedef void (*ms_fake_launch_observer_fn)(void *user, int phase, uint64_t seq, CUfunction f,
                                           const struct ms_fake_launch *l);
void ms_fake_set_launch_observer(ms_fake_launch_observer_fn fn, void *user);

typedef CUresult (*ms_fake_register_kernel_fn)(const char *, ms_fake_kernel_fn, const size_t *,
                                               size_t, void *, CUfunction *);
typedef void (*ms_fake_get_stats_fn)(struct ms_fake_stats *);
typedef CUresult (*ms_fake_kernel_handle_fn)(CUfunction, CUkernel *);
typedef size_t (*ms_fake_um_drain_fn)(struct ms_fake_um_event *, size_t);
typedef uint64_t (*ms_fake_um_dropped_fn)(void);
typedef void (*ms_fake_touch_fn)(const void *, size_t, int);
typedef size_t (*ms_fake_touch_drain_fn)(struct ms_fake_touch *, size_t);
typedef void (*ms_fake_set_launch_observer_fn)(ms_fake_launch_observer_fn, void *);

#endif /* MS_FAKECUDA_H */
