/*
 * engine_stress.c - random allocations, frees, kernels, copies and memsets under a memory
 * budget far below the footprint, checked against a host shadow of every buffer.
 *
 * Runs against whatever libcuda.so.1 the loader finds: on the fake driver behind libmsched
 * (CI), every chunk the engine did not make resident is mapped to its host chunk (a host-located
 * VMM handle, which the fake counts when a kernel's argument points into one) and any address
 * the engine left unmapped is PROT_NONE, so a kernel that touches one crashes the program (the
 * oracle); data mismatches are counted against the shadow. Kernels
 * are host functions registered with the fake (MS_FAKECUDA names it). One kernel follows a
 * pointer table stored in device memory (built on the host, copied over), the case the launch
 * arguments alone cannot show.
 *
 * Usage: engine_stress [ops] [seed] [cycle|graph]   (MSCHED_BUDGET sets the engine's budget)
 *   cycle: instead, fill all buffers in the same order, ops rounds (a looping program); then
 *          read every buffer back. Prints "ENGINE_CYCLE rounds=N buffers=B mismatches=M
 *          host_mapped_launches=H" (H: launches the fake saw reach a host chunk)
 *   graph: a CUDA graph (one add node) launched ops times on two 12 MiB buffers that a third,
 *          24 MiB one pushed out (under a 40 MiB budget), then once more while the third is
 *          allocated again (footprint 48 MiB: the graph reaches only 24 of them, so it runs),
 *          then, after cuGraphExecKernelNodeSetParams_v2 with the same parameters, once more
 *          (the reach still a and c); then a fourth buffer d, filled, the exec's node set to
 *          add d instead of c, and ops launches of it, each followed by a fill of the 24 MiB
 *          buffer that pushes a and d out (footprint 60 MiB: the graph reaches 24 of them).
 *          Prints "ENGINE_GRAPH launches=N refused=R after_update=U mismatches=M
 *          host_mapped_after_new_params=H" (H: launches after the new parameters that the fake
 *          saw pass a pointer into a host chunk: the graph's new reach was not made resident).
 *   graph-child: a graph of one child graph node whose graph adds c (12 MiB) to a, launched ops
 *          times, each launch followed by a fill of a 24 MiB buffer that pushes a and c out
 *          (under a 40 MiB budget); then the exec's child node given a graph that adds d
 *          instead (cuGraphExecChildGraphNodeSetParams, as XLA updates traced commands), ops
 *          times the same. Prints "ENGINE_GRAPH_CHILD launches=N mismatches=M host_mapped=H"
 *          (H: kernel launches with a pointer on a host chunk: 0 when the graph's reach,
 *          child included, was followed). STRESS_GRAPH_FORGET=1 adds one launch after a call
 *          the shim does not follow (the exit summary says which).
 *          With STRESS_EXIT_RELEASE_MS=N set, the cycle ends as a CUDA runtime program exits:
 *          the buffers stay allocated, the primary context is released, and the process
 *          lingers N ms before main returns. With STRESS_EXIT_LINGER_MS=M set, it lingers M ms
 *          in an exit handler registered before cuInit, which runs after the driver's own exit
 *          handler (the driver is shut down by then) and before libmsched's destructor.
 *   small: argv[4] (default 1500, at most 1500) allocations of 4 KiB each, filled, then ops
 *          rounds adding each odd one into the even one before it; checked. Prints
 *          "ENGINE_SMALL rounds=N buffers=B seconds=S mismatches=M" (S: the kernels' time).
 *   expand: an expandable segment (PyTorch's expandable_segments): 30 exportable handles of 4 MiB
 *          mapped side by side, twelve 9 MiB tensors in it 10 MiB apart (most span two or three
 *          handles), then ops rounds adding each tensor's successor into it. Prints
 *          "ENGINE_EXPAND rounds=N adds=A host_mapped_adds=H mismatches=M" (H: adds the fake
 *          saw pass a pointer into memory on a host chunk).
 *   onebuf: a decode loop over one 256 MiB weights buffer and a 32 MiB KV buffer, ops rounds
 *          (see onebuf()). Prints "ENGINE_ONEBUF rounds=N mismatches=M". STRESS_ONEBUF_SCRATCH=1:
 *          each round also allocates a 1 MiB scratch buffer, fills it, adds it into a third
 *          accumulator and frees it (a program allocating temporaries without a cache).
 *   arena: one 512 MiB allocation (eight 64 MiB chunks) holding two 16 MiB buffers 256 MiB
 *          apart, as an allocator's arena does; ops rounds of add(x, y) over them. Named whole,
 *          the allocation is more than a 150 MiB budget; with the kernels' templates (the fake
 *          kernels declare their touches, so `msched profile` learns them) two chunks are.
 *          Prints "ENGINE_ARENA rounds=N host_mapped_adds=H mismatches=M" (H: adds the fake saw
 *          pass a pointer into memory on a host chunk). After the arena's free a 2 MiB
 *          allocation takes its slot (STRESS_ARENA_REUSE=0: not), so the exit summary's
 *          most-missed regions are checked across a reused slot and a freed one.
 *   graph-pieces: a and b0..b4, 12 MiB each, under a 40 MiB budget; a CUDA graph of four
 *          nodes a += b0 .. a += b3 (60 MiB in all, 24 per node; node k after node k - 2),
 *          launched ops times; then the second node given b4 instead of b1 on the exec and the
 *          graph destroyed, ops times more (STRESS_PIECES_NODES and STRESS_PIECES_MIB change
 *          the four nodes and the 12 MiB; STRESS_PIECES_STREAMS=1 alternates the launches
 *          between two streams; STRESS_PIECES_THREADS=T makes the first ops launches T times
 *          ops, from T threads at once; STRESS_PIECES_FORGET=1 ends the split by a change the
 *          shim does not follow and launches twice more, whole). Prints
 *          "ENGINE_GRAPH_PIECES launches=N mismatches=M host_mapped=H event_waits=W" (W: the
 *          fake's cuStreamWaitEvent calls; H: kernels the fake saw
 *          pass a pointer into a host chunk: 0 when each piece's memory was made resident).
 *   arena-graph: the same, the adds launched as a CUDA graph of one add node
 * ("ENGINE_ARENA_GRAPH"). tma: a 512 MiB arena with a 16 MiB tensor at 256 MiB, read through a
 * TMA tensor map (cuTensorMapEncodeTiled) by ops launches of tma_add (one 128-byte map, an
 * output pointer into a separate 16 MiB buffer, a count), then ops launches with a copy of the
 * map the driver never encoded (its serial bytes changed: msched cannot bound it). Prints
 * "ENGINE_TMA rounds=N host_mapped_encoded=E host_mapped_forged=F mismatches=M" (E, F:
 * launches whose tensor lay on a host chunk when they ran). kcycle: the cycle, launching through
 * the fill kernel's CUkernel handle (passed where a CUfunction goes, as CUDA 12+ allows): its
 * layout must come from cuKernelGetParamInfo. launches: ops timed batches of 20000 launches
 * of add on two 4 KiB buffers (see launch_cost(); STRESS_LAUNCH_BIG_MIB, STRESS_LAUNCH_STRUCT).
 * timed: the cycle's loop for ops seconds; prints
 * one JSON line with rounds per second
 *          ("tasks_per_s"), as a benchmark program does.
 *   serve: a request-serving task for ops seconds (a request every 50 ms, or every argv[4]
 *          ms, open loop, two fills and a sync each); prints latency percentiles as
 *          bench/workloads/rtbe.py rt does.
 *   burst: a request-serving task: ops bursts of two fills of 4 MiB buffers and a sync, each
 *          followed by 60 ms without GPU work. Prints "ENGINE_BURST bursts=N".
 *   vmm:   the application's own VMM memory: one reservation, 24 handles of 4 MiB mapped into
 *          it with a 4 MiB hole after each, access set with one call over the whole range,
 *          then ops rounds filling every buffer in turn; then two more handles mapped side by
 *          side (one span, as an expandable segment grows) and one fill over both from a
 *          pointer to the first (its end is in the second); the data checked; a handle
 *          mapped, filled, unmapped and released right after (an allocator's free: nothing
 *          saved); one handle unmapped and mapped again elsewhere (its contents must travel
 *          with it); everything
 *          unmapped and released. The two side by side ask what PyTorch's expandable segments
 *          ask for (an exportable handle type, GPUDirect RDMA capability where the GPU has
 *          it): they are still virtualized, and exporting one must be refused. A 256 MiB
 *          handle is created first and released at the end, never mapped. Then every other
 *          handle moves into the hole after it (checked there, filled again, checked again),
 *          and an 8 MiB handle is mapped twice at once (the second mapping is the fallback;
 *          STRESS_VMM_FALLBACK=0 skips it), unmapped and mapped whole again. Prints the fake's host
 *          handle counts after (FAKE host_handles=...).
 *          Prints "ENGINE_VMM rounds=N ipc=I export=X mismatches=M".
 * STRESS_LEGACY_LAUNCH=1: kernels are launched through the legacy API (legacy_launch()).
 * STRESS_OOM_OK=1: an allocation refused with CUDA_ERROR_OUT_OF_MEMORY is skipped (counted in
 * ooms) instead of failing the run.
 * Prints "ENGINE_STRESS ops=N buffers=B launches=L ooms=O mismatches=M" and exits 0 only with
 * no mismatch.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "gpu/fakecuda/fakecuda.h"

#define NBUF 24
#define MIB (1024u * 1024u)

typedef CUresult (*reg_fn)(const char *, ms_fake_kernel_fn, const size_t *, size_t, void *,
                           CUfunction *);

static CUresult (*p_init)(unsigned);
static CUresult (*p_devget)(CUdevice *, int);
static CUresult (*p_retain)(CUcontext *, CUdevice);
static CUresult (*p_release)(CUdevice);
static CUresult (*p_setcur)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_h2d)(CUdeviceptr, const void *, size_t);
static CUresult (*p_d2h)(void *, CUdeviceptr, size_t);
static CUresult (*p_d2d)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*p_memset)(CUdeviceptr, unsigned char, size_t);
static CUresult (*p_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **, void **);
static CUresult (*p_sync)(void);

/*
 * STRESS_LEGACY_LAUNCH=1: every kernel goes through the legacy launch API instead of
 * cuLaunchKernel (cuFuncSetBlockShape, cuParamSetSize / cuParamSetv, cuLaunchGridAsync), whose
 * parameters an interposer never sees: the launch must still wait for its slice and find its
 * memory mapped. Single-threaded modes only (the parameters live on the function).
 */
static CUresult (*p_param_info)(CUfunction, size_t, size_t *, size_t *);
static CUresult (*p_param_size)(CUfunction, unsigned int);
static CUresult (*p_param_v)(CUfunction, int, void *, unsigned int);
static CUresult (*p_block_shape)(CUfunction, int, int, int);
static CUresult (*p_grid_async)(CUfunction, int, int, CUstream);

static CUresult legacy_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                              void **extra)
{
    if (extra || gz != 1 || smem)
        return CUDA_ERROR_INVALID_VALUE; /* this program passes neither */
    size_t off, size, end = 0, n = 0;
    while (p_param_info(f, n, &off, &size) == CUDA_SUCCESS) {
        end = off + size > end ? off + size : end;
        n++;
    }
    CUresult rc = p_block_shape(f, (int)bx, (int)by, (int)bz);
    if (rc == CUDA_SUCCESS)
        rc = p_param_size(f, (unsigned int)end);
    for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        rc = p_param_info(f, i, &off, &size);
        if (rc == CUDA_SUCCESS)
            rc = p_param_v(f, (int)off, params[i], (unsigned int)size);
    }
    return rc == CUDA_SUCCESS ? p_grid_async(f, (int)gx, (int)gy, s) : rc;
}

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint32_t pattern(uint64_t i, uint32_t seed)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (uint32_t)(x * 0xbf58476d1ce4e5b9ull >> 32);
}

#define ARG(l, i, T) (*(const T *)(l)->args[i])

/* The fake's touch declarations (ms_fake_touch: what the profiler sees), when it has them. */
static ms_fake_touch_fn touch_fn;
static void touch(const void *p, size_t bytes, int mode)
{
    if (touch_fn)
        touch_fn(p, bytes, mode);
}

#define STRESS_STRUCT_MAX 4096 /* the launches mode's struct parameter, at most */

static void k_fill(const struct ms_fake_launch *l)
{
    uint32_t *p = (uint32_t *)(uintptr_t)ARG(l, 0, CUdeviceptr);
    uint64_t n = ARG(l, 1, uint64_t);
    uint32_t seed = ARG(l, 2, uint32_t);
    touch(p, n * 4, MS_FAKE_TOUCH_WRITE);
    for (uint64_t i = 0; i < n; i++)
        p[i] = pattern(i, seed);
}

static void k_add(const struct ms_fake_launch *l)
{
    uint32_t *d = (uint32_t *)(uintptr_t)ARG(l, 0, CUdeviceptr);
    const uint32_t *s = (const uint32_t *)(uintptr_t)ARG(l, 1, CUdeviceptr);
    uint64_t n = ARG(l, 2, uint64_t);
    touch(d, n * 4, MS_FAKE_TOUCH_READ | MS_FAKE_TOUCH_WRITE);
    touch(s, n * 4, MS_FAKE_TOUCH_READ);
    for (uint64_t i = 0; i < n; i++)
        d[i] += s[i];
}

/* tma_add: out[i] += in[i] for i < n, in read through a tensor map (the fake's encoding). */
static int (*tmap_decode)(const void *, uint64_t *, uint64_t *);
static int (*host_mapped)(const void *);
static uint64_t tma_host_mapped;
static void k_tma_add(const struct ms_fake_launch *l)
{
    uint64_t in = 0, bytes = 0;
    if (!tmap_decode || tmap_decode(l->args[0], &in, &bytes) != 0)
        return;
    uint32_t *out = (uint32_t *)(uintptr_t)ARG(l, 1, CUdeviceptr);
    uint64_t n = ARG(l, 2, uint64_t);
    const uint32_t *s = (const uint32_t *)(uintptr_t)in;
    touch(s, bytes, MS_FAKE_TOUCH_BULK);
    touch(out, n * 4, MS_FAKE_TOUCH_READ | MS_FAKE_TOUCH_WRITE);
    if (host_mapped && host_mapped(s))
        tma_host_mapped++;
    for (uint64_t i = 0; i < n && i * 4 < bytes; i++)
        out[i] += s[i];
}

/* tab: device array of ntab pointers; each pointed-to buffer gets its first n words bumped. */
static void k_ptrtab(const struct ms_fake_launch *l)
{
    const CUdeviceptr *tab = (const CUdeviceptr *)(uintptr_t)ARG(l, 0, CUdeviceptr);
    uint64_t ntab = ARG(l, 1, uint64_t), n = ARG(l, 2, uint64_t);
    for (uint64_t t = 0; t < ntab; t++) {
        uint32_t *p = (uint32_t *)(uintptr_t)tab[t];
        for (uint64_t i = 0; i < n; i++)
            p[i] += 7;
    }
}

struct buf {
    CUdeviceptr d;
    uint64_t words;
    uint32_t *shadow;
};

static CUresult (*p_3d)(const CUDA_MEMCPY3D *);
static CUresult (*p_write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static CUresult (*p_batch)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                           size_t *, size_t, CUstream);
static CUresult (*p_alloc_async)(CUdeviceptr *, size_t, CUstream);
static CUresult (*p_free_async)(CUdeviceptr, CUstream);
static CUresult (*p_alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);

/* Buffer i is allocated the i % 3 way: cuMemAlloc, cuMemAllocAsync (freed with cuMemFreeAsync)
 * or cuMemAllocPitch (one row), so every allocation family the engine takes is exercised. */
static CUresult buf_alloc(int i, CUdeviceptr *d, uint64_t bytes)
{
    size_t pitch = 0;
    switch (i % 3) {
    case 1: return p_alloc_async(d, bytes, NULL);
    case 2: return p_alloc_pitch(d, &pitch, bytes, 1, 4);
    default: return p_alloc(d, bytes);
    }
}

static CUresult buf_free(int i, CUdeviceptr d)
{
    return i % 3 == 1 ? p_free_async(d, NULL) : p_free(d);
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            printf("FAIL: %s = %d (op %d)\n", #x, (int)r_, op);                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define LOAD(v, name)                                                                              \
    do {                                                                                           \
        *(void **)&v = dlsym(h, name);                                                             \
        if (!v) {                                                                                  \
            printf("FAIL: no %s\n", name);                                                         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* The p-th percentile of n sorted latencies in seconds, in milliseconds (0 when n is 0). */
static double pct_ms(const double *lat, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)n);
    return 1000 * lat[i < n ? i : n - 1];
}

/*
 * The "launches" mode: what one launch costs the launching thread. `batches` batches of 20000
 * launches of add (two pointers and a count) over two 4 KiB buffers, each batch timed and
 * synchronized; prints "ENGINE_LAUNCH_NS median=M min=N batches=B" (nanoseconds per launch).
 * On the fake driver the kernel itself is a loop over 1024 words, so the difference between a
 * run straight on the fake and one behind libmsched is libmsched's own cost per launch.
 */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int launch_cost(int batches, CUfunction f_add, CUfunction f_add_struct)
{
    enum { PER_BATCH = 20000, WORDS = 1024 };
    int op = -1;
    if (batches < 1 || batches > 1000) {
        printf("FAIL: launches takes 1 to 1000 batches\n");
        return 1;
    }
    CUdeviceptr x, y;
    /* STRESS_LAUNCH_BIG_MIB=N: x is the start of an allocation of N MiB (a weights buffer)
     * the kernel's pointer names whole at allocation granularity. */
    const char *big = getenv("STRESS_LAUNCH_BIG_MIB");
    size_t xbytes = big ? (size_t)strtoull(big, NULL, 10) << 20 : 0;
    CK(p_alloc(&x, xbytes > WORDS * 4 ? xbytes : WORDS * 4));
    CK(p_alloc(&y, WORDS * 4));
    CK(p_memset(x, 1, WORDS * 4));
    CK(p_memset(y, 2, WORDS * 4));
    uint64_t n = WORDS;
    /* STRESS_LAUNCH_STRUCT=B: the kernel also takes a struct of B bytes by value, sizes and
     * strides as PyTorch's elementwise kernels pass them (int32 words, some zero): every 8-byte
     * word of it is scanned for an address and is none. */
    const char *st = getenv("STRESS_LAUNCH_STRUCT");
    size_t sbytes = st ? (size_t)strtoull(st, NULL, 10) : 0;
    uint32_t sv[STRESS_STRUCT_MAX / 4];
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++)
        sv[i] = i % 5 == 4 ? 0 : (uint32_t)(i * 37 % 4096 + 1);
    if (sbytes) {
        if (sbytes > STRESS_STRUCT_MAX || sbytes % 8) {
            printf("FAIL: STRESS_LAUNCH_STRUCT takes a multiple of 8 up to %d\n",
                   STRESS_STRUCT_MAX);
            return 1;
        }
        f_add = f_add_struct;
    }
    void *args[] = {&x, &y, &n, sv};
    double *ns = calloc((size_t)batches, sizeof *ns);
    if (!ns) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    for (op = 0; op < PER_BATCH; op++) /* warm-up: the first launches learn the kernel */
        CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CK(p_sync());
    for (int i = 0; i < batches; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (op = 0; op < PER_BATCH; op++)
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(p_sync());
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[i] =
            ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / PER_BATCH;
    }
    qsort(ns, (size_t)batches, sizeof *ns, cmp_double);
    printf("ENGINE_LAUNCH_NS median=%.1f min=%.1f batches=%d\n", ns[batches / 2], ns[0], batches);
    free(ns);
    CK(p_free(x));
    CK(p_free(y));
    return 0;
}

/* The "vmm" mode (see the header). */
static int vmm_mode(int rounds, void *h, void *fh, CUfunction f_fill)
{
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*afree)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    int op = -3;
    LOAD(reserve, "cuMemAddressReserve");
    LOAD(afree, "cuMemAddressFree");
    LOAD(create, "cuMemCreate");
    LOAD(release, "cuMemRelease");
    LOAD(map, "cuMemMap");
    LOAD(unmap, "cuMemUnmap");
    LOAD(access, "cuMemSetAccess");
    const uint64_t sz = 4u * MIB, words = sz / 4;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUdeviceptr base;
    CUmemGenericAllocationHandle hs[NBUF], pair[2];
    /* slot i at 2 * i * sz (a hole after each); the pair at 2 * NBUF * sz; a spare after it;
     * then room for the fallback mappings (fb, fb2: 2 * sz each) */
    const uint64_t span = (2u * NBUF + 7) * sz, pbase = 2u * NBUF * sz, spare = pbase + 2 * sz,
                   fb = spare + sz, fb2 = fb + 2 * sz;
    CK(reserve(&base, span, 0, 0, 0));
    /* A large handle never mapped: it must take no memory at all (no host store either). */
    CUmemGenericAllocationHandle idle;
    CK(create(&idle, 64 * sz, &prop, 0));
    for (int i = 0; i < NBUF; i++) {
        CK(create(&hs[i], sz, &prop, 0));
        CK(map(base + 2 * (uint64_t)i * sz, sz, 0, hs[i], 0));
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int i = 0; i < NBUF; i++)
        CK(access(base + 2 * (uint64_t)i * sz, sz, &acc, 1));
    for (op = 0; op < rounds; op++)
        for (int i = 0; i < NBUF; i++) {
            CUdeviceptr d = base + 2 * (uint64_t)i * sz;
            uint64_t n = words;
            uint32_t seed = (uint32_t)(op * 100 + i);
            void *args[] = {&d, &n, &seed};
            CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        }
    /* Two mappings side by side, one object over both: the pointer names only the first. They
     * ask for an exportable type, as PyTorch's expandable segments do: still virtualized, and
     * exporting one is refused (801; -1 where the driver lacks the call). */
    CUmemAllocationProp xprop = prop;
    xprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    xprop.allocFlags.gpuDirectRDMACapable = 1; /* PyTorch asks for it where the GPU has it */
    CK(create(&pair[0], sz, &xprop, 0));
    CK(create(&pair[1], sz, &xprop, 0));
    CUresult (*export_)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long);
    *(void **)&export_ = dlsym(h, "cuMemExportToShareableHandle");
    int fd = -1;
    int exported =
        export_ ? (int)export_(&fd, pair[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) : -1;
    CK(map(base + pbase, sz, 0, pair[0], 0));
    CK(map(base + pbase + sz, sz, 0, pair[1], 0));
    CK(access(base + pbase, 2 * sz, &acc, 1));
    /* Released at once, as CUDA's samples do: the mappings keep them; their unmap has nothing
     * to save (nobody can map them again). */
    CK(release(pair[0]));
    CK(release(pair[1]));
    /* Memory msched moves cannot be shared with another process: an IPC handle is refused
     * (where the driver has no IPC at all, as the fake, the call is skipped: -1). */
    CUresult (*ipc_get)(CUipcMemHandle *, CUdeviceptr);
    *(void **)&ipc_get = dlsym(h, "cuIpcGetMemHandle");
    CUipcMemHandle ih;
    int ipc = ipc_get ? (int)ipc_get(&ih, base + pbase) : -1;
    /* Nor a dma-buf of it for RDMA (the fake exports a mapping's memory: 0 without msched). */
    CUresult (*dmabuf)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
    *(void **)&dmabuf = dlsym(h, "cuMemGetHandleForAddressRange");
    int dfd = -1;
    int dma =
        dmabuf ? (int)dmabuf(&dfd, base + pbase, sz, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) : -1;
    if (dfd >= 0)
        close(dfd);
    printf("ENGINE_DMABUF %d\n", dma);
    {
        CUdeviceptr d = base + pbase;
        uint64_t n = 2 * words;
        uint32_t seed = 4242;
        void *args[] = {&d, &n, &seed};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    CK(p_sync());
    /* Host chunks exist only for what left the device (none when everything fits). */
    ms_fake_get_stats_fn stats;
    *(void **)&stats = dlsym(fh, "ms_fake_get_stats");
    if (stats) {
        struct ms_fake_stats st;
        stats(&st);
        printf("VMM_MID host_handles=%llu host_handle_bytes=%llu\n",
               (unsigned long long)st.host_handles, (unsigned long long)st.host_handle_bytes);
    }
    uint64_t mismatches = 0;
    uint32_t *v = malloc(2 * sz);
    for (int i = 0; i < NBUF; i++) {
        CK(p_d2h(v, base + 2 * (uint64_t)i * sz, sz));
        for (uint64_t k = 0; k < words; k++)
            mismatches += v[k] != pattern(k, (uint32_t)((rounds - 1) * 100 + i));
    }
    CK(p_d2h(v, base + pbase, 2 * sz));
    for (uint64_t k = 0; k < 2 * words; k++)
        mismatches += v[k] != pattern(k, 4242);
    /* An allocator's free, as XLA's VMM allocator does it (PyTorch's expandable segments do the
     * same without the first two steps): the handle retained from the address and released
     * again, then the mapping of the handle still held unmapped, then the handle released. Its
     * contents die with the release: nothing may be saved for it (no host chunk, nothing
     * copied out), and its range is mapped again below. */
    CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
    *(void **)&retain =
        dlsym(h, "cuMemRetainAllocationHandle"); /* libmsched's; the fake lacks it */
    CUmemGenericAllocationHandle hx, hr = 0;
    CK(create(&hx, sz, &xprop, 0));
    CK(map(base + spare, sz, 0, hx, 0));
    CK(access(base + spare, sz, &acc, 1));
    {
        CUdeviceptr d = base + spare;
        uint64_t n = words;
        uint32_t seed = 777;
        void *args[] = {&d, &n, &seed};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    CK(p_sync());
    if (retain && retain(&hr, (void *)(uintptr_t)(base + spare)) == CUDA_SUCCESS)
        CK(release(hr));
    CK(unmap(base + spare, sz));
    CK(release(hx));
    /* Move buffer 0's handle to the spare slot: its contents travel with it. */
    CK(unmap(base, sz));
    CK(map(base + spare, sz, 0, hs[0], 0));
    CK(access(base + spare, sz, &acc, 1));
    CK(p_d2h(v, base + spare, sz));
    for (uint64_t k = 0; k < words; k++)
        mismatches += v[k] != pattern(k, (uint32_t)((rounds - 1) * 100));
    /* Every other handle moves into the hole after it (its contents, on the device or in host
     * chunks, travel with it), is checked there, filled once more and checked again. */
    for (int i = 1; i < NBUF; i++) {
        CK(unmap(base + 2 * (uint64_t)i * sz, sz));
        CK(map(base + (2 * (uint64_t)i + 1) * sz, sz, 0, hs[i], 0));
        CK(access(base + (2 * (uint64_t)i + 1) * sz, sz, &acc, 1));
    }
    for (int i = 1; i < NBUF; i++) {
        CK(p_d2h(v, base + (2 * (uint64_t)i + 1) * sz, sz));
        for (uint64_t k = 0; k < words; k++)
            mismatches += v[k] != pattern(k, (uint32_t)((rounds - 1) * 100 + i));
    }
    for (int i = 1; i < NBUF; i++) {
        CUdeviceptr d = base + (2 * (uint64_t)i + 1) * sz;
        uint64_t n = words;
        uint32_t seed = (uint32_t)(rounds * 100 + i);
        void *args[] = {&d, &n, &seed};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    CK(p_sync());
    for (int i = 1; i < NBUF; i++) {
        CK(p_d2h(v, base + (2 * (uint64_t)i + 1) * sz, sz));
        for (uint64_t k = 0; k < words; k++)
            mismatches += v[k] != pattern(k, (uint32_t)(rounds * 100 + i));
    }
    /* The fallback (store-based) mapping: an 8 MiB handle mapped at fb and, at the same time,
     * at fb2 (a handle mapped twice; the driver maps whole handles, at offset 0). Each is filled
     * and checked before the other is written (the two do not alias under msched: a known
     * limit). Skipped with
     * STRESS_VMM_FALLBACK=0: such mappings are not always mapped, so a dropped prediction
     * (MSCHED_MISPREDICT) may reach one off the device. */
    const char *fbenv = getenv("STRESS_VMM_FALLBACK");
    if (!fbenv || strcmp(fbenv, "0") != 0) {
        CUmemGenericAllocationHandle hf;
        CK(create(&hf, 2 * sz, &prop, 0));
        CK(map(base + fb, 2 * sz, 0, hf, 0));
        CK(map(base + fb2, 2 * sz, 0, hf, 0));
        CK(access(base + fb, 2 * sz, &acc, 1));
        CK(access(base + fb2, 2 * sz, &acc, 1));
        CUdeviceptr d1 = base + fb, d2 = base + fb2;
        uint64_t n1 = 2 * words, n2 = 2 * words;
        uint32_t s1 = 777, s2 = 778;
        void *a1[] = {&d1, &n1, &s1}, *a2[] = {&d2, &n2, &s2};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, a1, NULL));
        CK(p_sync());
        CK(p_d2h(v, d1, 2 * sz));
        for (uint64_t k = 0; k < 2 * words; k++)
            mismatches += v[k] != pattern(k, 777);
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, a2, NULL));
        CK(p_sync());
        CK(p_d2h(v, d2, 2 * sz));
        for (uint64_t k = 0; k < 2 * words; k++)
            mismatches += v[k] != pattern(k, 778);
        CK(unmap(base + fb2, 2 * sz));
        CK(unmap(base + fb, 2 * sz));
        /* Mapped whole again (elsewhere): the first mapping's contents under msched (the
         * second's never shared its bytes), the second's on a driver that aliases them. */
        CK(map(base + fb2, 2 * sz, 0, hf, 0));
        CK(access(base + fb2, 2 * sz, &acc, 1));
        CK(p_d2h(v, d2, 2 * sz));
        uint64_t m777 = 0, m778 = 0;
        for (uint64_t k = 0; k < 2 * words; k++) {
            m777 += v[k] != pattern(k, 777);
            m778 += v[k] != pattern(k, 778);
        }
        mismatches += m777 < m778 ? m777 : m778;
        CK(unmap(base + fb2, 2 * sz));
        CK(release(hf));
    }
    free(v);
    for (int i = 1; i < NBUF; i++)
        CK(unmap(base + (2 * (uint64_t)i + 1) * sz, sz));
    CK(unmap(base + pbase, 2 * sz)); /* one call over both mappings */
    CK(unmap(base + spare, sz));
    for (int i = 0; i < NBUF; i++)
        CK(release(hs[i]));
    CK(release(idle));
    CK(afree(base, span));
    printf("ENGINE_VMM rounds=%d ipc=%d export=%d mismatches=%llu\n", rounds, ipc, exported,
           (unsigned long long)mismatches);
    if (stats) {
        struct ms_fake_stats st;
        stats(&st);
        printf("FAKE host_handles=%llu host_creates=%llu host_mapped_launches=%llu "
               "host_handle_peak_bytes=%llu\n",
               (unsigned long long)st.host_handles, (unsigned long long)st.host_creates,
               (unsigned long long)st.host_mapped_launches,
               (unsigned long long)st.host_handle_peak_bytes);
    }
    return mismatches == 0 ? 0 : 1;
}

/* The "graph" mode (see the header). h: the driver as the program sees it. */
/* The graph calls the graph modes use, from the driver libmsched loaded (h). */
struct graph_api {
    /* the exec's kernel node setter and the fake's statistics (NULL when missing) */
    CUresult (*setp)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
    ms_fake_get_stats_fn stats;
    CUresult (*create)(CUgraph *, unsigned);
    CUresult (*add)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                    const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*launch)(CUgraphExec, CUstream);
    CUresult (*xdestroy)(CUgraphExec);
    CUresult (*destroy)(CUgraph);
};

static int load_graph_api(void *h, void *fh, struct graph_api *g)
{
    *(void **)&g->setp = dlsym(h, "cuGraphExecKernelNodeSetParams_v2");
    *(void **)&g->stats = dlsym(fh, "ms_fake_get_stats");
    if (!g->setp || !g->stats) {
        printf("FAIL: no cuGraphExecKernelNodeSetParams_v2 or ms_fake_get_stats\n");
        return 1;
    }
    LOAD(g->create, "cuGraphCreate");
    LOAD(g->add, "cuGraphAddKernelNode_v2");
    LOAD(g->inst, "cuGraphInstantiateWithFlags");
    LOAD(g->launch, "cuGraphLaunch");
    LOAD(g->xdestroy, "cuGraphExecDestroy");
    LOAD(g->destroy, "cuGraphDestroy");
    return 0;
}

static int graph_mode(int rounds, void *h, void *fh, CUfunction f_fill, CUfunction f_add)
{
    struct graph_api ga;
    if (load_graph_api(h, fh, &ga))
        return 1;
    CUresult (*g_setp)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *) = ga.setp;
    ms_fake_get_stats_fn stats = ga.stats;
    int op = -2;
    uint64_t n = 3u * MIB, nb = 6u * MIB; /* words: 12 MiB and 24 MiB */
    CUdeviceptr a, c, d, big;
    uint32_t sa = 11, sc = 22, sb = 33, sd = 44;
    CK(p_alloc(&a, n * 4));
    CK(p_alloc(&c, n * 4));
    CK(p_alloc(&big, nb * 4));
    void *fa[] = {&a, &n, &sa}, *fc[] = {&c, &n, &sc}, *fb[] = {&big, &nb, &sb};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fc, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL)); /* pushes part of a, c out */
    CK(p_free(big));
    CUgraph g;
    CUgraphNode node;
    CUgraphExec x;
    void *addp[] = {&a, &c, &n};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof(kp));
    kp.func = f_add;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = addp;
    CK(ga.create(&g, 0));
    CK(ga.add(&node, g, NULL, 0, &kp));
    CK(ga.inst(&x, g, 0));
    uint32_t ran = 0, ran_d = 0;
    for (op = 0; op < rounds; op++, ran++)
        CK(ga.launch(x, NULL));
    CK(p_sync());
    /* Footprint above the budget, but the graph reaches only a and c. */
    CK(p_alloc(&big, nb * 4));
    CUresult refused = ga.launch(x, NULL);
    ran += refused == CUDA_SUCCESS;
    /* The same parameters set on the exec: its reach is still a and c. */
    CK(g_setp(x, node, &kp));
    CUresult after = ga.launch(x, NULL);
    ran += after == CUDA_SUCCESS;
    /* New parameters naming a new buffer d (footprint 60 MiB, the reach a and d: 24 MiB), as
     * XLA's command buffers do before every run: those launches find a and d resident. */
    CK(p_alloc(&d, n * 4));
    void *fd[] = {&d, &n, &sd};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fd, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL)); /* pushes a or d out */
    CK(p_sync());
    addp[1] = &d;
    CK(g_setp(x, node, &kp));
    struct ms_fake_stats s0, s1;
    stats(&s0);
    for (op = 0; op < rounds; op++, ran_d++) {
        CK(ga.launch(x, NULL));
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL)); /* and again */
    }
    CK(p_sync());
    stats(&s1);
    CK(p_free(big));
    CK(ga.launch(x, NULL));
    ran_d++;
    CK(p_sync());
    uint32_t *va = malloc(n * 4);
    CK(p_d2h(va, a, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t k = 0; k < n; k++)
        mismatches += va[k] != pattern(k, sa) + ran * pattern(k, sc) + ran_d * pattern(k, sd);
    free(va);
    CK(ga.xdestroy(x));
    CK(ga.destroy(g));
    CK(p_free(a));
    CK(p_free(c));
    CK(p_free(d));
    printf("ENGINE_GRAPH launches=%u refused=%d after_update=%d mismatches=%llu "
           "host_mapped_after_new_params=%llu\n",
           ran + ran_d, (int)refused, (int)after, (unsigned long long)mismatches,
           (unsigned long long)(s1.host_mapped_launches - s0.host_mapped_launches));
    return mismatches == 0 ? 0 : 1;
}

/* The "graph-child" mode (see the header). */
static int graph_child_mode(int rounds, void *h, void *fh, CUfunction f_fill, CUfunction f_add)
{
    struct graph_api ga;
    if (load_graph_api(h, fh, &ga))
        return 1;
    CUresult (*add_child)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph);
    CUresult (*set_child)(CUgraphExec, CUgraphNode, CUgraph);
    ms_fake_get_stats_fn stats = ga.stats;
    int op = -2;
    *(void **)&add_child = dlsym(h, "cuGraphAddChildGraphNode");
    *(void **)&set_child = dlsym(h, "cuGraphExecChildGraphNodeSetParams");
    if (!add_child || !set_child) {
        printf("FAIL: no child graph calls\n");
        return 1;
    }
    uint64_t n = 3u * MIB, nb = 6u * MIB; /* words: 12 MiB and 24 MiB */
    CUdeviceptr a, c, d, big;
    uint32_t sa = 11, sc = 22, sd = 44, sb = 33;
    CK(p_alloc(&a, n * 4));
    CK(p_alloc(&c, n * 4));
    CK(p_alloc(&d, n * 4));
    CK(p_alloc(&big, nb * 4));
    void *fa[] = {&a, &n, &sa}, *fc[] = {&c, &n, &sc}, *fd[] = {&d, &n, &sd},
         *fb[] = {&big, &nb, &sb};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fc, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fd, NULL));
    /* A child graph adding c to a, in a parent graph of that one node. */
    void *addc[] = {&a, &c, &n}, *addd[] = {&a, &d, &n};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof(kp));
    kp.func = f_add;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = addc;
    CUgraph child_c, child_d, parent;
    CUgraphNode kn, cn;
    CUgraphExec x;
    CK(ga.create(&child_c, 0));
    CK(ga.add(&kn, child_c, NULL, 0, &kp));
    kp.kernelParams = addd;
    CK(ga.create(&child_d, 0));
    CK(ga.add(&kn, child_d, NULL, 0, &kp));
    CK(ga.create(&parent, 0));
    CK(add_child(&cn, parent, NULL, 0, child_c));
    CK(ga.inst(&x, parent, 0));
    uint32_t ran_c = 0, ran_d = 0;
    struct ms_fake_stats s0, s1;
    stats(&s0);
    for (op = 0; op < rounds; op++, ran_c++) {
        CK(ga.launch(x, NULL));
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL)); /* pushes a, c out */
    }
    /* The exec's child node given the graph that adds d: its reach is a and d now. */
    CK(set_child(x, cn, child_d));
    for (op = 0; op < rounds; op++, ran_d++) {
        CK(ga.launch(x, NULL));
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL));
    }
    /* STRESS_GRAPH_FORGET=1: a call the shim does not follow (a batch memory operation node's
     * new parameters; the fake lacks it) drops the exec's record, and one more launch is of
     * unknown reach (the exit summary's "graphs" line names the call). */
    CUresult (*batch_set)(CUgraphExec, CUgraphNode, const void *);
    *(void **)&batch_set = dlsym(h, "cuGraphExecBatchMemOpNodeSetParams");
    const char *forget = getenv("STRESS_GRAPH_FORGET");
    if (forget && *forget == '1' && batch_set) {
        (void)batch_set(x, cn, NULL);
        CK(ga.launch(x, NULL));
        ran_d++;
    }
    CK(p_sync());
    stats(&s1);
    uint32_t *va = malloc(n * 4);
    CK(p_d2h(va, a, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t k = 0; k < n; k++)
        mismatches += va[k] != pattern(k, sa) + ran_c * pattern(k, sc) + ran_d * pattern(k, sd);
    free(va);
    CK(ga.xdestroy(x));
    CK(ga.destroy(parent));
    CK(ga.destroy(child_c));
    CK(ga.destroy(child_d));
    CK(p_free(a));
    CK(p_free(c));
    CK(p_free(d));
    CK(p_free(big));
    printf("ENGINE_GRAPH_CHILD launches=%u mismatches=%llu host_mapped=%llu\n", ran_c + ran_d,
           (unsigned long long)mismatches,
           (unsigned long long)(s1.host_mapped_launches - s0.host_mapped_launches));
    return mismatches == 0 ? 0 : 1;
}

/* A thread of the graph-pieces mode's first phase: `rounds` launches of x on a stream of its
 * own (err: the first failure). */
struct gp_thread {
    const struct graph_api *ga;
    CUresult (*screate)(CUstream *, unsigned);
    CUgraphExec x;
    CUcontext ctx;
    int rounds;
    CUresult err;
};

static void *gp_worker(void *arg)
{
    struct gp_thread *t = arg;
    CUstream st = NULL;
    if ((t->err = p_setcur(t->ctx)) != CUDA_SUCCESS ||
        (t->err = t->screate(&st, 0)) != CUDA_SUCCESS)
        return NULL;
    for (int r = 0; r < t->rounds && t->err == CUDA_SUCCESS; r++)
        t->err = t->ga->launch(t->x, st);
    return NULL;
}

/* The "graph-pieces" mode (see the header). */
static int graph_pieces_mode(int rounds, void *h, void *fh, CUfunction f_fill, CUfunction f_add)
{
    struct graph_api ga;
    if (load_graph_api(h, fh, &ga))
        return 1;
    CUresult (*g_setp)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *) = ga.setp;
    ms_fake_get_stats_fn stats = ga.stats;
    int op = -2;
    /* STRESS_PIECES_NODES adds (2..16, default 4) of STRESS_PIECES_MIB each (default 12) */
    const char *en = getenv("STRESS_PIECES_NODES"), *em = getenv("STRESS_PIECES_MIB");
    int nn = en ? atoi(en) : 4, mib = em ? atoi(em) : 12;
    if (nn < 2 || nn > 16 || mib < 1 || mib > 64) {
        printf("FAIL: STRESS_PIECES_NODES 2..16, STRESS_PIECES_MIB 1..64\n");
        return 1;
    }
    uint64_t n = (uint64_t)mib * MIB / 4; /* words */
    CUdeviceptr a, b[17];
    uint32_t sa = 11, sb[17];
    CK(p_alloc(&a, n * 4));
    void *fa[] = {&a, &n, &sa};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL));
    for (int k = 0; k <= nn; k++) {
        sb[k] = 21u + (uint32_t)k;
        CK(p_alloc(&b[k], n * 4));
        void *fb[] = {&b[k], &n, &sb[k]};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fb, NULL));
    }
    /* node k: a += b[k], after node k - 2 (two interleaved chains: two roots, and positions
     * that are one topological order among several) */
    void *addp[16][3];
    CUDA_KERNEL_NODE_PARAMS kp[16];
    CUgraph g;
    CUgraphNode node[16];
    CUgraphExec x;
    CK(ga.create(&g, 0));
    for (int k = 0; k < nn; k++) {
        addp[k][0] = &a;
        addp[k][1] = &b[k];
        addp[k][2] = &n;
        memset(&kp[k], 0, sizeof(kp[k]));
        kp[k].func = f_add;
        kp[k].gridDimX = kp[k].gridDimY = kp[k].gridDimZ = 1;
        kp[k].blockDimX = kp[k].blockDimY = kp[k].blockDimZ = 1;
        kp[k].kernelParams = addp[k];
        CK(ga.add(&node[k], g, k >= 2 ? &node[k - 2] : NULL, k >= 2 ? 1 : 0, &kp[k]));
    }
    CK(ga.inst(&x, g, 0));
    /* STRESS_PIECES_STREAMS=1: launches alternate between the default stream and another one
     * (launches of one exec stay ordered: each in pieces waits for the one before) */
    const char *es = getenv("STRESS_PIECES_STREAMS");
    CUstream st[2] = {NULL, NULL};
    if (es && *es == '1') {
        CUresult (*screate)(CUstream *, unsigned);
        *(void **)&screate = dlsym(h, "cuStreamCreate");
        if (!screate)
            return printf("FAIL: no cuStreamCreate\n"), 1;
        CK(screate(&st[1], 0));
    }
    uint32_t ran = 0, ran2 = 0;
    struct ms_fake_stats s0, s1;
    CK(p_sync());
    stats(&s0);
    /* STRESS_PIECES_THREADS=T (2..16): the first phase's launches come from T threads at once,
     * each on its own stream */
    const char *et = getenv("STRESS_PIECES_THREADS");
    int nt = et ? atoi(et) : 1;
    if (nt > 1 && nt <= 16) {
        CUcontext ctx;
        CUresult (*getcur)(CUcontext *);
        struct gp_thread t[16];
        pthread_t tid[16];
        *(void **)&getcur = dlsym(h, "cuCtxGetCurrent");
        *(void **)&t[0].screate = dlsym(h, "cuStreamCreate");
        if (!getcur || !t[0].screate)
            return printf("FAIL: no cuCtxGetCurrent or cuStreamCreate\n"), 1;
        CK(getcur(&ctx));
        for (int i = 0; i < nt; i++) {
            t[i] = (struct gp_thread){&ga, t[0].screate, x, ctx, rounds, CUDA_SUCCESS};
            if (pthread_create(&tid[i], NULL, gp_worker, &t[i]) != 0)
                return printf("FAIL: pthread_create\n"), 1;
        }
        for (int i = 0; i < nt; i++) {
            pthread_join(tid[i], NULL);
            if (t[i].err != CUDA_SUCCESS)
                return printf("FAIL: a launch thread got %d\n", (int)t[i].err), 1;
        }
        ran = (uint32_t)(nt * rounds);
    } else {
        for (op = 0; op < rounds; op++, ran++)
            CK(ga.launch(x, st[op & 1]));
    }
    /* The second node given new parameters on the exec: a += b[nn] instead of b[1]. */
    addp[1][1] = &b[nn];
    CK(g_setp(x, node[1], &kp[1]));
    CK(ga.destroy(g)); /* the exec outlives the application's graph */
    for (op = 0; op < rounds; op++, ran2++)
        CK(ga.launch(x, st[op & 1]));
    /* STRESS_PIECES_FORGET=1: a change the shim does not follow (a batch memory operation
     * node's new parameters; the fake lacks the call) ends the split: two more launches,
     * whole, still in order after the last one in pieces */
    const char *ef = getenv("STRESS_PIECES_FORGET");
    CUresult (*batch_set)(CUgraphExec, CUgraphNode, const void *);
    *(void **)&batch_set = dlsym(h, "cuGraphExecBatchMemOpNodeSetParams");
    if (ef && *ef == '1' && batch_set) {
        (void)batch_set(x, node[0], NULL);
        for (op = 0; op < 2; op++, ran2++)
            CK(ga.launch(x, st[op & 1]));
    }
    CK(p_sync());
    stats(&s1);
    uint32_t *va = malloc(n * 4);
    if (!va)
        return printf("FAIL: malloc\n"), 1;
    CK(p_d2h(va, a, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t want = pattern(i, sa) + ran * pattern(i, sb[1]) + ran2 * pattern(i, sb[nn]);
        for (int k = 0; k < nn; k++)
            want += k == 1 ? 0 : (ran + ran2) * pattern(i, sb[k]);
        mismatches += va[i] != want;
    }
    free(va);
    CK(ga.xdestroy(x));
    CK(p_free(a));
    for (int k = 0; k <= nn; k++)
        CK(p_free(b[k]));
    printf("ENGINE_GRAPH_PIECES launches=%u mismatches=%llu host_mapped=%llu event_waits=%llu\n",
           ran + ran2, (unsigned long long)mismatches,
           (unsigned long long)(s1.host_mapped_launches - s0.host_mapped_launches),
           (unsigned long long)(s1.event_waits - s0.event_waits));
    return mismatches == 0 ? 0 : 1;
}

static long release_linger_ms = -1; /* STRESS_EXIT_RELEASE_MS */
static long exit_linger_ms;         /* STRESS_EXIT_LINGER_MS */

static void linger(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void linger_at_exit(void)
{
    linger(exit_linger_ms);
}

/*
 * onebuf: a decode loop over one big weights buffer (256 MiB: four 64 MiB chunks, a "layer"
 * each) and a small KV buffer (32 MiB), under a budget (150 MiB) that holds the KV buffer and
 * part of the weights. Per layer: act += W[layer] (the launch names the whole buffer: its
 * prediction is the whole region, more than the budget), then act2 += kv. What fits of the
 * weights should stay put and the rest be read where it is; moving weights in for every layer
 * and the KV buffer back for every attention is churn (on the H200 it made a one-buffer Llama
 * decode 10x slower). The data is checked against a host computation.
 */
static int onebuf(int rounds, CUfunction f_fill, CUfunction f_add)
{
    const uint64_t layer_words = 16 * MIB, n = 256 * 1024; /* 64 MiB layers, 1 MiB touched */
    int op = -1;                                           /* CK's message */
    CUdeviceptr w, kv, act, act2, act3;
    const char *se = getenv("STRESS_ONEBUF_SCRATCH");
    bool scratch = se && atoi(se) > 0;
    CK(p_alloc(&w, 4 * layer_words * 4));
    CK(p_alloc(&kv, 8 * MIB * 4));
    CK(p_alloc(&act, n * 4));
    CK(p_alloc(&act2, n * 4));
    CK(p_alloc(&act3, n * 4));
    uint64_t wn = 4 * layer_words, kn = 8 * MIB, an = n;
    uint32_t s_w = 11, s_kv = 12, s_s = 13;
    void *fw[] = {&w, &wn, &s_w}, *fk[] = {&kv, &kn, &s_kv};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fw, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fk, NULL));
    CK(p_memset(act, 0, n * 4));
    CK(p_memset(act2, 0, n * 4));
    CK(p_memset(act3, 0, n * 4));
    for (op = 0; op < rounds; op++) {
        for (uint64_t l = 0; l < 4; l++) {
            CUdeviceptr wl = w + l * layer_words * 4;
            void *g[] = {&act, &wl, (void *)&n}, *a[] = {&act2, &kv, (void *)&n};
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, g, NULL));
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, a, NULL));
        }
        if (scratch) {
            CUdeviceptr sc;
            CK(p_alloc(&sc, an * 4));
            void *fs[] = {&sc, &an, &s_s}, *a3[] = {&act3, &sc, (void *)&n};
            CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fs, NULL));
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, a3, NULL));
            CK(p_free(sc));
        }
    }
    CK(p_sync());
    uint32_t *h = malloc(n * 4), *h2 = malloc(n * 4), *h3 = malloc(n * 4);
    if (!h || !h2 || !h3)
        return printf("FAIL: malloc\n"), 1;
    CK(p_d2h(h, act, n * 4));
    CK(p_d2h(h2, act2, n * 4));
    CK(p_d2h(h3, act3, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t want = 0, want2 = 0;
        for (uint64_t l = 0; l < 4; l++)
            want += pattern(l * layer_words + i, s_w);
        want *= (uint32_t)rounds;
        want2 = pattern(i, s_kv) * (uint32_t)rounds * 4;
        uint32_t want3 = scratch ? pattern(i, s_s) * (uint32_t)rounds : 0;
        mismatches += (h[i] != want) + (h2[i] != want2) + (h3[i] != want3);
    }
    free(h);
    free(h2);
    free(h3);
    CK(p_free(w));
    CK(p_free(kv));
    CK(p_free(act));
    CK(p_free(act2));
    CK(p_free(act3));
    printf("ENGINE_ONEBUF rounds=%d mismatches=%llu\n", rounds, (unsigned long long)mismatches);
    return mismatches == 0 ? 0 : 1;
}

/* tma: see the usage above. */
struct tma_params {
    _Alignas(64) uint8_t map[128];
    CUdeviceptr out;
    uint64_t n;
};

static int tma(int rounds, void *h, void *fh, CUfunction f_fill)
{
    CUresult (*encode)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                       CUtensorMapFloatOOBfill);
    reg_fn reg;
    *(void **)&encode = dlsym(h, "cuTensorMapEncodeTiled");
    *(void **)&reg = dlsym(fh, "ms_fake_register_kernel");
    *(void **)&tmap_decode = dlsym(fh, "ms_fake_tmap_decode");
    *(void **)&host_mapped = dlsym(fh, "ms_fake_host_mapped");
    if (!encode || !reg || !tmap_decode || !host_mapped)
        return printf("FAIL: no tensor maps in this driver\n"), 1;
    int op = -1;
    const size_t tp[] = {128, 8, 8};
    CUfunction f_tma;
    CK(reg("tma_add", k_tma_add, tp, 3, NULL, &f_tma));
    const uint64_t n = 4 * MIB; /* 16 MiB of uint32 */
    CUdeviceptr a, out;
    CK(p_alloc(&a, 512 * MIB));
    CK(p_alloc(&out, n * 4));
    CUdeviceptr in = a + 256 * MIB;
    uint64_t nn = n;
    uint32_t seed = 31;
    void *fa[] = {&in, &nn, &seed};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL));
    CK(p_memset(out, 0, n * 4));
    struct tma_params tpar;
    memset(&tpar, 0, sizeof tpar);
    cuuint64_t dim[2] = {4096, n / 4096}, stride[1] = {4096 * 4};
    cuuint32_t box[2] = {64, 64}, es[2] = {1, 1};
    CK(encode((CUtensorMap *)tpar.map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, (void *)(uintptr_t)in,
              dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    tpar.out = out;
    tpar.n = n;
    void *args[] = {tpar.map, &tpar.out, &tpar.n};
    CK(p_sync());
    tma_host_mapped = 0;
    for (op = 0; op < rounds; op++)
        CK(p_launch(f_tma, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CK(p_sync());
    uint64_t encoded = tma_host_mapped;
    tpar.map[32] ^= 0x5a; /* the serial: a map the driver never handed out, msched cannot bound */
    tma_host_mapped = 0;
    for (op = 0; op < rounds; op++)
        CK(p_launch(f_tma, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CK(p_sync());
    uint64_t forged = tma_host_mapped;
    uint32_t *ho = malloc(n * 4);
    if (!ho)
        return printf("FAIL: malloc\n"), 1;
    CK(p_d2h(ho, out, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < n; i++)
        mismatches += ho[i] != (uint32_t)(2 * rounds) * pattern(i, seed);
    free(ho);
    CK(p_free(out));
    CK(p_free(a));
    printf("ENGINE_TMA rounds=%d host_mapped_encoded=%llu host_mapped_forged=%llu "
           "mismatches=%llu\n",
           rounds, (unsigned long long)encoded, (unsigned long long)forged,
           (unsigned long long)mismatches);
    return mismatches == 0 ? 0 : 1;
}

/* arena: see the usage above. */
static int arena(int rounds, void *h, void *fh, CUfunction f_fill, CUfunction f_add, bool graph)
{
    ms_fake_get_stats_fn stats;
    *(void **)&stats = dlsym(fh, "ms_fake_get_stats");
    struct ms_fake_stats st0 = {0}, st1 = {0};
    const uint64_t n = 4 * MIB; /* 16 MiB buffers */
    int op = -1;                /* CK's message */
    CUdeviceptr a;
    CK(p_alloc(&a, 512 * MIB));
    CUdeviceptr x = a, y = a + 256 * MIB;
    uint64_t nn = n;
    uint32_t sx = 21, sy = 22;
    void *fx[] = {&x, &nn, &sx}, *fy[] = {&y, &nn, &sy}, *ad[] = {&x, &y, &nn};
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fx, NULL));
    CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, fy, NULL));
    CK(p_sync());
    if (stats)
        stats(&st0);
    if (!graph) {
        for (op = 0; op < rounds; op++)
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, ad, NULL));
    } else {
        /* the adds as launches of a graph of one add node */
        struct graph_api ga;
        if (load_graph_api(h, fh, &ga))
            return 1;
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof(kp));
        kp.func = f_add;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = ad;
        CUgraph g;
        CUgraphNode node;
        CUgraphExec gx;
        CK(ga.create(&g, 0));
        CK(ga.add(&node, g, NULL, 0, &kp));
        CK(ga.inst(&gx, g, 0));
        for (op = 0; op < rounds; op++)
            CK(ga.launch(gx, NULL));
        CK(p_sync());
        CK(ga.xdestroy(gx));
        CK(ga.destroy(g));
    }
    CK(p_sync());
    if (stats)
        stats(&st1);
    uint32_t *hx = malloc(n * 4);
    if (!hx)
        return printf("FAIL: malloc\n"), 1;
    CK(p_d2h(hx, x, n * 4));
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < n; i++)
        mismatches += hx[i] != pattern(i, sx) + (uint32_t)rounds * pattern(i, sy);
    free(hx);
    CK(p_free(a));
    /* A small allocation after the arena's free takes its slot in the engine's tables: the
     * exit summary must still name the arena (its size and base) as the region missed most. */
    const char *reuse = getenv("STRESS_ARENA_REUSE"); /* 0: leave the slot free */
    if (!reuse || strcmp(reuse, "0") != 0) {
        CUdeviceptr b;
        CK(p_alloc(&b, 2 * MIB));
        CK(p_free(b));
    }
    /* the adds that passed a pointer into a chunk on its host chunk (the fake counts them) */
    printf("ENGINE_ARENA%s rounds=%d host_mapped_adds=%llu mismatches=%llu\n",
           graph ? "_GRAPH" : "", rounds,
           (unsigned long long)(st1.host_mapped_launches - st0.host_mapped_launches),
           (unsigned long long)mismatches);
    return mismatches == 0 ? 0 : 1;
}

/* small: see the usage above. */
static int small_mode(int rounds, int NS, CUfunction f_fill, CUfunction f_add)
{
    const uint64_t words = 1024; /* 4 KiB each */
    static CUdeviceptr d[1500];
    if (NS < 2 || NS > 1500)
        return printf("FAIL: small: 2 to 1500 buffers\n"), 1;
    int op = -1;
    for (int i = 0; i < NS; i++)
        CK(p_alloc(&d[i], words * 4));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < NS; i++) {
        uint32_t seed = (uint32_t)i;
        void *args[] = {&d[i], (void *)&words, &seed};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    for (op = 0; op < rounds; op++)
        for (int i = 0; i + 1 < NS; i += 2) {
            void *args[] = {&d[i], &d[i + 1], (void *)&words};
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        }
    CK(p_sync());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t mismatches = 0;
    uint32_t back[1024];
    for (int i = 0; i < NS; i++) {
        CK(p_d2h(back, d[i], words * 4));
        for (uint64_t k = 0; k < words; k++) {
            uint32_t want = pattern(k, (uint32_t)i);
            if (i % 2 == 0 && i + 1 < NS)
                want += (uint32_t)rounds * pattern(k, (uint32_t)(i + 1));
            mismatches += back[k] != want;
        }
    }
    for (int i = 0; i < NS; i++)
        CK(p_free(d[i]));
    printf("ENGINE_SMALL rounds=%d buffers=%d seconds=%.3f mismatches=%llu\n", rounds, NS,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
           (unsigned long long)mismatches);
    return mismatches == 0 ? 0 : 1;
}

/* expand: see the usage above. */
static int expand_mode(int rounds, void *h, void *fh, CUfunction f_fill, CUfunction f_add)
{
    enum { NH = 30, NT = 12 };
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    int op = -3;
    LOAD(reserve, "cuMemAddressReserve");
    LOAD(create, "cuMemCreate");
    LOAD(map, "cuMemMap");
    LOAD(access, "cuMemSetAccess");
    const uint64_t page = 4 * MIB, stride = 10 * MIB, n = 9 * MIB / 4; /* 9 MiB tensors */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUdeviceptr base;
    CK(reserve(&base, NH * page, 0, 0, 0));
    for (int i = 0; i < NH; i++) { /* the segment grows a page at a time */
        CUmemGenericAllocationHandle hd;
        CK(create(&hd, page, &prop, 0));
        CK(map(base + (uint64_t)i * page, page, 0, hd, 0));
        CK(access(base + (uint64_t)i * page, page, &acc, 1));
    }
    CUdeviceptr t[NT];
    for (int i = 0; i < NT; i++) {
        t[i] = base + (uint64_t)i * stride;
        uint32_t seed = (uint32_t)(7 + i);
        void *args[] = {&t[i], (void *)&n, &seed};
        CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    ms_fake_get_stats_fn stats;
    *(void **)&stats = dlsym(fh, "ms_fake_get_stats");
    struct ms_fake_stats st0, st1;
    memset(&st0, 0, sizeof st0);
    memset(&st1, 0, sizeof st1);
    if (stats)
        stats(&st0);
    for (op = 0; op < rounds; op++)
        for (int i = 0; i < NT; i++) {
            void *args[] = {&t[i], &t[(i + 1) % NT], (void *)&n};
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        }
    CK(p_sync());
    if (stats)
        stats(&st1);
    /* Elements evolve independently: a few indices, computed on the host, checked. */
    const uint64_t ks[] = {0, 1, n / 2, n - 1};
    uint64_t mismatches = 0;
    for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
        uint32_t v[NT], got;
        for (int i = 0; i < NT; i++)
            v[i] = pattern(ks[j], (uint32_t)(7 + i));
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < NT; i++)
                v[i] += v[(i + 1) % NT];
        for (int i = 0; i < NT; i++) {
            CK(p_d2h(&got, t[i] + ks[j] * 4, 4));
            mismatches += got != v[i];
        }
    }
    printf("ENGINE_EXPAND rounds=%d adds=%d host_mapped_adds=%llu mismatches=%llu\n", rounds,
           rounds * NT, (unsigned long long)(st1.host_mapped_launches - st0.host_mapped_launches),
           (unsigned long long)mismatches);
    return mismatches == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *rel = getenv("STRESS_EXIT_RELEASE_MS"), *ex = getenv("STRESS_EXIT_LINGER_MS");
    release_linger_ms = rel ? strtol(rel, NULL, 10) : -1;
    exit_linger_ms = ex ? strtol(ex, NULL, 10) : 0;
    if ((rel && release_linger_ms < 0) || exit_linger_ms < 0 ||
        (exit_linger_ms > 0 && atexit(linger_at_exit) != 0)) {
        printf("FAIL: STRESS_EXIT_RELEASE_MS or STRESS_EXIT_LINGER_MS\n");
        return 1;
    }
    int ops = argc > 1 ? atoi(argv[1]) : 2000;
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 42;
    rng = rng ? rng : 1;
    int op = -1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *fpath = getenv("MS_FAKECUDA");
    void *fh = fpath ? dlopen(fpath, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h || !fh) {
        printf("FAIL: cannot open libcuda.so.1 or MS_FAKECUDA\n");
        return 1;
    }
    LOAD(p_init, "cuInit");
    LOAD(p_devget, "cuDeviceGet");
    LOAD(p_retain, "cuDevicePrimaryCtxRetain");
    LOAD(p_release, "cuDevicePrimaryCtxRelease_v2");
    LOAD(p_setcur, "cuCtxSetCurrent");
    LOAD(p_alloc, "cuMemAlloc_v2");
    LOAD(p_free, "cuMemFree_v2");
    LOAD(p_alloc_async, "cuMemAllocAsync");
    LOAD(p_3d, "cuMemcpy3D_v2");
    LOAD(p_write32, "cuStreamWriteValue32_v2");
    LOAD(p_batch, "cuMemcpyBatchAsync_v2");
    LOAD(p_free_async, "cuMemFreeAsync");
    LOAD(p_alloc_pitch, "cuMemAllocPitch_v2");
    LOAD(p_h2d, "cuMemcpyHtoD_v2");
    LOAD(p_d2h, "cuMemcpyDtoH_v2");
    LOAD(p_d2d, "cuMemcpyDtoD_v2");
    LOAD(p_memset, "cuMemsetD8_v2");
    LOAD(p_launch, "cuLaunchKernel");
    const char *legacy = getenv("STRESS_LEGACY_LAUNCH");
    if (legacy && strcmp(legacy, "1") == 0) {
        LOAD(p_param_info, "cuFuncGetParamInfo");
        LOAD(p_param_size, "cuParamSetSize");
        LOAD(p_param_v, "cuParamSetv");
        LOAD(p_block_shape, "cuFuncSetBlockShape");
        LOAD(p_grid_async, "cuLaunchGridAsync");
        p_launch = legacy_launch;
    }
    LOAD(p_sync, "cuCtxSynchronize");
    reg_fn reg;
    *(void **)&reg = dlsym(fh, "ms_fake_register_kernel");
    if (!reg) {
        printf("FAIL: the fake lacks ms_fake_register_kernel\n");
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    CK(p_init(0));
    CK(p_devget(&dev, 0));
    CK(p_retain(&ctx, dev));
    CK(p_setcur(ctx));
    CUfunction f_fill, f_add, f_tab;
    const size_t fill_p[] = {8, 8, 4}, add_p[] = {8, 8, 8}, tab_p[] = {8, 8, 8};
    CK(reg("fill", k_fill, fill_p, 3, NULL, &f_fill));
    CK(reg("add", k_add, add_p, 3, NULL, &f_add));
    CK(reg("ptrtab", k_ptrtab, tab_p, 3, NULL, &f_tab));

    struct buf b[NBUF];
    memset(b, 0, sizeof(b));
    if (argc > 3 && strcmp(argv[3], "kcycle") == 0) {
        /* The cycle with the fill kernel launched through its CUkernel handle. */
        ms_fake_kernel_handle_fn kh;
        *(void **)&kh = dlsym(fh, "ms_fake_kernel_handle");
        CUkernel k;
        if (!kh || kh(f_fill, &k) != CUDA_SUCCESS) {
            printf("FAIL: the fake has no CUkernel handles\n");
            return 1;
        }
        f_fill = (CUfunction)k;
    }
    *(void **)&touch_fn = dlsym(fh, "ms_fake_touch");
    if (argc > 3 && (strcmp(argv[3], "arena") == 0 || strcmp(argv[3], "arena-graph") == 0))
        return arena(ops, h, fh, f_fill, f_add, strcmp(argv[3], "arena-graph") == 0);
    if (argc > 3 && strcmp(argv[3], "tma") == 0)
        return tma(ops, h, fh, f_fill);
    if (argc > 3 && strcmp(argv[3], "onebuf") == 0)
        return onebuf(ops, f_fill, f_add);
    if (argc > 3 && strcmp(argv[3], "expand") == 0)
        return expand_mode(ops, h, fh, f_fill, f_add);
    if (argc > 3 && strcmp(argv[3], "small") == 0)
        return small_mode(ops, argc > 4 ? atoi(argv[4]) : 1500, f_fill, f_add);
    if (argc > 3 && (strcmp(argv[3], "cycle") == 0 || strcmp(argv[3], "kcycle") == 0)) {
        /* A loop over every buffer in the same order, ops times: the access pattern of decode
         * steps and training iterations, where OPT keeps a fixed part resident. */
        for (int i = 0; i < NBUF; i++) {
            b[i].words = MIB; /* 4 MiB */
            CK(p_alloc(&b[i].d, b[i].words * 4));
        }
        for (op = 0; op < ops; op++)
            for (int i = 0; i < NBUF; i++) {
                uint32_t seed = (uint32_t)op;
                void *args[] = {&b[i].d, &b[i].words, &seed};
                CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            }
        CK(p_sync());
        /* Every buffer holds the last round's fill; the fake counts fills that reached a host
         * chunk (a command admitted before its memory was resident). */
        uint64_t bad = 0;
        uint32_t *back = malloc(MIB * 4);
        for (int i = 0; ops > 0 && back && i < NBUF; i++) {
            CK(p_d2h(back, b[i].d, b[i].words * 4));
            for (uint64_t k = 0; k < b[i].words; k++)
                bad += back[k] != pattern(k, (uint32_t)(ops - 1));
        }
        free(back);
        ms_fake_get_stats_fn stats;
        *(void **)&stats = dlsym(fh, "ms_fake_get_stats");
        struct ms_fake_stats st;
        memset(&st, 0, sizeof st);
        if (stats)
            stats(&st);
        char cyc[160];
        snprintf(cyc, sizeof cyc,
                 "ENGINE_CYCLE rounds=%d buffers=%d mismatches=%llu host_mapped_launches=%llu", ops,
                 NBUF, (unsigned long long)bad, (unsigned long long)st.host_mapped_launches);
        if (bad) {
            printf("%s\n", cyc);
            return 1;
        }
        if (release_linger_ms >= 0) {
            /* What the CUDA runtime does at exit: it releases the primary context it retained,
             * with the memory still allocated; then the process takes a while to end (and
             * with STRESS_EXIT_LINGER_MS, part of that after the driver has shut down). */
            printf("%s\n", cyc);
            fflush(stdout);
            CK(p_release(dev));
            linger(release_linger_ms);
            return 0;
        }
        for (int i = 0; i < NBUF; i++)
            CK(p_free(b[i].d));
        printf("%s\n", cyc);
        return 0;
    }
    if (argc > 3 && strcmp(argv[3], "launches") == 0) {
        const char *st = getenv("STRESS_LAUNCH_STRUCT");
        const size_t adds_p[] = {8, 8, 8, st ? (size_t)strtoull(st, NULL, 10) : 8};
        CUfunction f_adds = NULL;
        if (adds_p[3] && adds_p[3] <= STRESS_STRUCT_MAX)
            CK(reg("add_struct", k_add, adds_p, 4, NULL, &f_adds));
        return launch_cost(ops, f_add, f_adds);
    }
    if (argc > 3 && strcmp(argv[3], "timed") == 0) {
        /* The cycle for `ops` seconds; one JSON line with rounds per second (the output of a
         * benchmark program, for bench/micro/run_sweep.sh on the fake driver). */
        for (int i = 0; i < NBUF; i++) {
            b[i].words = MIB;
            CK(p_alloc(&b[i].d, b[i].words * 4));
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double el = 0;
        long rounds = 0;
        do {
            for (int i = 0; i < NBUF; i++) {
                uint32_t seed = (uint32_t)rounds;
                void *args[] = {&b[i].d, &b[i].words, &seed};
                CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            }
            CK(p_sync());
            rounds++;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        } while (el < ops);
        for (int i = 0; i < NBUF; i++)
            CK(p_free(b[i].d));
        printf("{\"program\": \"engine_stress\", \"tasks\": %ld, \"seconds\": %.3f, "
               "\"tasks_per_s\": %.3f}\n",
               rounds, el, (double)rounds / el);
        return 0;
    }
    if (argc > 3 && strcmp(argv[3], "serve") == 0) {
        /* A request-serving task for ops seconds: a request every 50 ms or argv[4] ms (open
         * loop: its latency runs from when it was due), each filling two 4 MiB buffers and
         * waiting; one JSON line with latency percentiles, as bench/workloads/rtbe.py rt
         * prints. */
        int interval_ms = argc > 4 ? atoi(argv[4]) : 50;
        if (interval_ms <= 0 || interval_ms > 60000) {
            fprintf(stderr, "engine_stress serve: bad interval '%s' (1-60000 ms)\n", argv[4]);
            return 2;
        }
        for (int i = 0; i < 2; i++) {
            b[i].words = MIB;
            CK(p_alloc(&b[i].d, b[i].words * 4));
        }
        static double lat[100000];
        size_t nl = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            double due = (double)interval_ms / 1000.0 * (double)nl;
            if (due >= ops || nl == sizeof(lat) / sizeof(lat[0]))
                break;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double now = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            if (now < due) {
                double w = due - now;
                struct timespec ws = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
                nanosleep(&ws, NULL);
            }
            for (int i = 0; i < 2; i++) {
                uint32_t seed = (uint32_t)nl;
                void *args[] = {&b[i].d, &b[i].words, &seed};
                CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            }
            CK(p_sync());
            clock_gettime(CLOCK_MONOTONIC, &t1);
            now = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            lat[nl++] = now - due;
        }
        for (int i = 0; i < 2; i++)
            CK(p_free(b[i].d));
        for (size_t i = 1; i < nl; i++) /* insertion sort: a few hundred entries */
            for (size_t j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
                double t = lat[j];
                lat[j] = lat[j - 1];
                lat[j - 1] = t;
            }
        printf("{\"program\": \"engine_stress\", \"role\": \"rt\", \"requests\": %zu, "
               "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, "
               "\"interval_ms\": %d, \"tasks_per_s\": %.3f, \"mismatches\": 0}\n",
               nl, pct_ms(lat, nl, 50), pct_ms(lat, nl, 90), pct_ms(lat, nl, 99),
               nl ? 1000 * lat[nl - 1] : 0, interval_ms, (double)nl / ops);
        return 0;
    }
    if (argc > 3 && strcmp(argv[3], "burst") == 0) {
        /* A request-serving task: ops bursts, each filling two 4 MiB buffers and waiting for
         * them, then 60 ms without GPU work (between requests). */
        for (int i = 0; i < 2; i++) {
            b[i].words = MIB;
            CK(p_alloc(&b[i].d, b[i].words * 4));
        }
        for (op = 0; op < ops; op++) {
            for (int i = 0; i < 2; i++) {
                uint32_t seed = (uint32_t)op;
                void *args[] = {&b[i].d, &b[i].words, &seed};
                CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            }
            CK(p_sync());
            struct timespec pause = {0, 60000000};
            nanosleep(&pause, NULL);
        }
        for (int i = 0; i < 2; i++)
            CK(p_free(b[i].d));
        printf("ENGINE_BURST bursts=%d\n", ops);
        return 0;
    }
    if (argc > 3 && strcmp(argv[3], "graph") == 0)
        return graph_mode(ops, h, fh, f_fill, f_add);
    if (argc > 3 && strcmp(argv[3], "graph-child") == 0)
        return graph_child_mode(ops, h, fh, f_fill, f_add);
    if (argc > 3 && strcmp(argv[3], "graph-pieces") == 0)
        return graph_pieces_mode(ops, h, fh, f_fill, f_add);
    if (argc > 3 && strcmp(argv[3], "vmm") == 0)
        return vmm_mode(ops, h, fh, f_fill);
    uint64_t mismatches = 0, launches = 0, ooms = 0;
    const char *oe = getenv("STRESS_OOM_OK");
    bool oom_ok = oe && strcmp(oe, "1") == 0;
    uint32_t *tmp = malloc(16u * MIB), *tmp2 = malloc(16u * MIB);
    for (op = 0; op < ops; op++) {
        int i = (int)(rnd() % NBUF), j = (int)(rnd() % NBUF);
        int kind = (int)(rnd() % 11);
        if (!b[i].d || kind == 0) {
            /* (re)allocate i: free it first if it exists */
            if (b[i].d) {
                CK(buf_free(i, b[i].d));
                free(b[i].shadow);
            }
            b[i].words = 1 + rnd() % (4u * MIB / 4);
            CUresult ar = buf_alloc(i, &b[i].d, b[i].words * 4);
            if (ar == CUDA_ERROR_OUT_OF_MEMORY && oom_ok) {
                b[i].d = 0; /* refused as a full device would refuse it: go on without it */
                ooms++;
                continue;
            }
            CK(ar);
            b[i].shadow = malloc(b[i].words * 4);
            uint32_t seed = (uint32_t)rnd();
            void *args[] = {&b[i].d, &b[i].words, &seed};
            CK(p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            launches++;
            for (uint64_t k = 0; k < b[i].words; k++)
                b[i].shadow[k] = pattern(k, seed);
            continue;
        }
        switch (kind) {
        case 1:
        case 2: { /* add j into i */
            if (!b[j].d || j == i)
                break;
            uint64_t n = b[i].words < b[j].words ? b[i].words : b[j].words;
            void *args[] = {&b[i].d, &b[j].d, &n};
            CK(p_launch(f_add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            launches++;
            for (uint64_t k = 0; k < n; k++)
                b[i].shadow[k] += b[j].shadow[k];
            break;
        }
        case 3: { /* host writes a slice */
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            for (uint64_t k = 0; k < n; k++)
                tmp[k] = (uint32_t)rnd();
            CK(p_h2d(b[i].d + off * 4, tmp, n * 4));
            memcpy(b[i].shadow + off, tmp, n * 4);
            break;
        }
        case 4: { /* read a slice back and compare */
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            CK(p_d2h(tmp, b[i].d + off * 4, n * 4));
            for (uint64_t k = 0; k < n; k++)
                mismatches += tmp[k] != b[i].shadow[off + k];
            break;
        }
        case 5: { /* memset a slice */
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            unsigned char v = (unsigned char)rnd();
            CK(p_memset(b[i].d + off * 4, v, n * 4));
            memset(b[i].shadow + off, v, n * 4);
            break;
        }
        case 6: { /* device-to-device copy */
            if (!b[j].d || j == i)
                break;
            uint64_t n = b[i].words < b[j].words ? b[i].words : b[j].words;
            CK(p_d2d(b[i].d, b[j].d, n * 4));
            memcpy(b[i].shadow, b[j].shadow, n * 4);
            break;
        }
        case 7: { /* a pointer table in i naming up to 3 other buffers */
            CUdeviceptr tab[3];
            uint64_t ntab = 0, n = UINT64_MAX;
            for (int t = 0; t < 3; t++) {
                int k = (int)(rnd() % NBUF);
                bool dup = false;
                for (uint64_t u = 0; u < ntab; u++)
                    dup |= tab[u] == b[k].d;
                if (!b[k].d || k == i || dup)
                    continue;
                tab[ntab++] = b[k].d;
                n = b[k].words < n ? b[k].words : n;
            }
            if (!ntab || b[i].words < ntab * 2)
                break;
            CK(p_h2d(b[i].d, tab, ntab * 8));
            memcpy(b[i].shadow, tab, ntab * 8);
            n = n < 1024 ? n : 1024;
            void *args[] = {&b[i].d, &ntab, &n};
            CK(p_launch(f_tab, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            launches++;
            for (uint64_t t = 0; t < ntab; t++)
                for (int k = 0; k < NBUF; k++)
                    if (b[k].d == tab[t])
                        for (uint64_t w = 0; w < n; w++)
                            b[k].shadow[w] += 7;
            break;
        }
        case 8: { /* a 3D device-to-device copy of a box: 2 slices of 4 rows of 16 words */
            const uint64_t pitch = 256, rows = 4, depth = 2, w = 64;
            uint64_t need = ((depth - 1) * rows + rows - 1) * pitch + w;
            if (!b[j].d || j == i || b[i].words * 4 < need || b[j].words * 4 < need)
                break;
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof(c));
            c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = b[j].d;
            c.dstDevice = b[i].d;
            c.srcPitch = c.dstPitch = pitch;
            c.srcHeight = c.dstHeight = rows;
            c.WidthInBytes = w;
            c.Height = rows;
            c.Depth = depth;
            CK(p_3d(&c));
            for (uint64_t z = 0; z < depth; z++)
                for (uint64_t y = 0; y < rows; y++) {
                    uint64_t at = ((z * rows + y) * pitch) / 4;
                    memcpy(b[i].shadow + at, b[j].shadow + at, w);
                }
            break;
        }
        case 9: { /* one batch: a host slice into i and a slice of j out to the host */
            if (!b[j].d || j == i)
                break;
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            uint64_t offj = rnd() % b[j].words, m = 1 + rnd() % (b[j].words - offj);
            for (uint64_t k = 0; k < n; k++)
                tmp[k] = (uint32_t)rnd();
            CUdeviceptr dsts[2] = {b[i].d + off * 4, (CUdeviceptr)(uintptr_t)tmp2};
            CUdeviceptr srcs[2] = {(CUdeviceptr)(uintptr_t)tmp, b[j].d + offj * 4};
            size_t sizes[2] = {n * 4, m * 4};
            CUmemcpyAttributes attr;
            memset(&attr, 0, sizeof(attr));
            attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
            size_t idx = 0;
            CK(p_batch(dsts, srcs, sizes, 2, &attr, &idx, 1, NULL));
            CK(p_sync());
            memcpy(b[i].shadow + off, tmp, n * 4);
            for (uint64_t k = 0; k < m; k++)
                mismatches += tmp2[k] != b[j].shadow[offj + k];
            break;
        }
        case 10: { /* a stream memory operation writes one word */
            uint64_t off = rnd() % b[i].words;
            uint32_t v = (uint32_t)rnd();
            CK(p_write32(NULL, b[i].d + off * 4, v, 0));
            b[i].shadow[off] = v;
            break;
        }
        default: break;
        }
    }
    CK(p_sync());
    int nbuf = 0;
    for (int i = 0; i < NBUF; i++) {
        if (!b[i].d)
            continue;
        nbuf++;
        uint32_t *all = malloc(b[i].words * 4);
        CK(p_d2h(all, b[i].d, b[i].words * 4));
        for (uint64_t k = 0; k < b[i].words; k++)
            mismatches += all[k] != b[i].shadow[k];
        free(all);
        CK(buf_free(i, b[i].d));
        free(b[i].shadow);
    }
    free(tmp);
    free(tmp2);
    printf("ENGINE_STRESS ops=%d buffers=%d launches=%llu ooms=%llu mismatches=%llu\n", ops, nbuf,
           (unsigned long long)launches, (unsigned long long)ooms, (unsigned long long)mismatches);
    /* The fake's unified-memory record (what a unified or demand engine did to managed memory). */
    ms_fake_get_stats_fn stats;
    *(void **)&stats = dlsym(fh, "ms_fake_get_stats");
    if (stats) {
        struct ms_fake_stats st;
        stats(&st);
        printf("FAKE allocs=%llu host_registered=%llu host_handles=%llu host_creates=%llu "
               "host_mapped_launches=%llu host_handle_peak_bytes=%llu\n",
               (unsigned long long)st.allocs, (unsigned long long)st.host_registered,
               (unsigned long long)st.host_handles, (unsigned long long)st.host_creates,
               (unsigned long long)st.host_mapped_launches,
               (unsigned long long)st.host_handle_peak_bytes);
        printf("UM faults=%llu kernel_faults=%llu prefetch_in_mib=%llu prefetch_out_mib=%llu "
               "device_max_mib=%llu\n",
               (unsigned long long)st.um_faults, (unsigned long long)st.um_kernel_faults,
               (unsigned long long)(st.um_prefetch_in / MIB),
               (unsigned long long)(st.um_prefetch_out / MIB),
               (unsigned long long)(st.um_device_max / MIB));
    }
    return mismatches == 0 ? 0 : 1;
}
