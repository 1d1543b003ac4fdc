/*
 * fake_host.c - the fake driver's host-located VMM handles (cmocka; linked to the fake driver).
 *
 * A host handle is what cuMemCreate makes with prop->location.type CU_MEM_LOCATION_TYPE_HOST
 * (or _HOST_NUMA): system memory the device maps into its address space. The fake keeps it in
 * a memfd like a device handle; these tests check what must differ and what must not:
 *   create      granularity 2 MiB; HOST (any id) and HOST_NUMA (any id) accepted,
 *               HOST_NUMA_CURRENT and an exportable HOST handle refused; the bytes counted in
 *               host_handles / host_handle_bytes / host_creates, not in used_bytes nor in
 *               cuMemGetInfo's free; a host handle larger than the device (64 MiB here) fits
 *   copy        mapped beside a device handle, with access granted as for device memory,
 *               copies run both ways (DtoD, DtoDAsync, cuMemcpy) and the host can read both
 *   two-maps    one host handle at two addresses at once: both see the same bytes
 *   memtype     CU_POINTER_ATTRIBUTE_MEMORY_TYPE (and cuPointerGetAttributes) is HOST inside
 *               the host mapping, DEVICE inside the device mapping, an error where nothing is
 *   kernel      a kernel may read and write host-mapped memory; each launch passing pointers
 *               into host mappings counts once in host_mapped_launches and once per such
 *               parameter in host_mapped_args, with kernelParams, with extra and as a graph's
 *               node; launches on device memory only count nothing
 *   fault       a kernel touching a reserved but unmapped address still dies of SIGSEGV there
 *               (the oracle), even with host handles mapped in the same reservation
 *   release     cuMemRelease while mapped (host and device handle): the memory stays, and
 *               stays counted, until the last of its mappings is unmapped; the released
 *               handle can no longer be mapped or released again
 *
 * Run: make test (tests/shim/run_shim_tests.sh runs it as fake/host-handles), or alone:
 *   LD_LIBRARY_PATH=build/lib/fakecuda build/tests/shim/fake_host
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/fakecuda/fakecuda.h"

#define MIB (1ull << 20)
#define GRAN (2 * MIB)
#define DEVICE_BYTES (64 * MIB) /* MSCHED_FAKE_MEM_BYTES for this program */

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)

static CUcontext ctx;

static CUmemAllocationProp prop_at(CUmemLocationType type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static CUmemGenericAllocationHandle create(CUmemLocationType type, int id, size_t bytes)
{
    CUmemAllocationProp p = prop_at(type, id);
    CUmemGenericAllocationHandle h = 0;
    OK(cuMemCreate(&h, bytes, &p, 0));
    return h;
}

/* Map h at va and grant device 0 read-write access, as a program does for either kind. */
static void map_rw(CUdeviceptr va, size_t bytes, CUmemGenericAllocationHandle h)
{
    OK(cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va, bytes, &a, 1));
}

static struct ms_fake_stats stats(void)
{
    struct ms_fake_stats s;
    ms_fake_get_stats(&s);
    return s;
}

static size_t free_bytes(void)
{
    size_t fr = 0, total = 0;
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(total, DEVICE_BYTES);
    return fr;
}

static void *hp(CUdeviceptr p)
{
    return (void *)(uintptr_t)p;
}

static int setup(void **state)
{
    (void)state;
    setenv("MSCHED_FAKE_MEM_BYTES", "64M", 1);
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

/* ---- create -------------------------------------------------------------------------------- */

static void host_create(void **state)
{
    (void)state;
    size_t g = 0;
    CUmemAllocationProp hprop = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    OK(cuMemGetAllocationGranularity(&g, &hprop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    assert_int_equal(g, GRAN);
    OK(cuMemGetAllocationGranularity(&g, &hprop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(g, GRAN);

    struct ms_fake_stats s0 = stats();
    size_t free0 = free_bytes();
    CUmemGenericAllocationHandle h = create(CU_MEM_LOCATION_TYPE_HOST, 0, 4 * MIB);
    CUmemGenericAllocationHandle h2 = create(CU_MEM_LOCATION_TYPE_HOST, 7, GRAN); /* id ignored */
    CUmemGenericAllocationHandle n = create(CU_MEM_LOCATION_TYPE_HOST_NUMA, 3, GRAN);
    /* Larger than the whole device: host memory is not limited by it. */
    CUmemGenericAllocationHandle big = create(CU_MEM_LOCATION_TYPE_HOST, 0, 2 * DEVICE_BYTES);
    struct ms_fake_stats s1 = stats();
    assert_int_equal(s1.used_bytes, s0.used_bytes);
    assert_int_equal(free_bytes(), free0);
    assert_int_equal(s1.host_handles, s0.host_handles + 4);
    assert_int_equal(s1.host_handle_bytes, s0.host_handle_bytes + 8 * MIB + 2 * DEVICE_BYTES);
    assert_int_equal(s1.host_creates, s0.host_creates + 4);
    assert_int_equal(s1.vmm_creates, s0.vmm_creates + 4);

    /* A device handle is device memory, and the device budget still holds for it. */
    CUmemGenericAllocationHandle d = create(CU_MEM_LOCATION_TYPE_DEVICE, 0, 4 * MIB);
    struct ms_fake_stats s2 = stats();
    assert_int_equal(s2.used_bytes, s1.used_bytes + 4 * MIB);
    assert_int_equal(free_bytes(), free0 - 4 * MIB);
    assert_int_equal(s2.host_handles, s1.host_handles);
    assert_int_equal(s2.host_creates, s1.host_creates);
    CUmemAllocationProp dp = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle x = 0;
    assert_int_equal(cuMemCreate(&x, 2 * DEVICE_BYTES, &dp, 0), CUDA_ERROR_OUT_OF_MEMORY);

    /* Refused as the driver refuses them. */
    CUmemAllocationProp bad = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
    assert_int_equal(cuMemCreate(&x, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    assert_int_equal(cuMemCreate(&x, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    assert_int_equal(cuMemCreate(&x, GRAN + 4096, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 1);
    assert_int_equal(cuMemCreate(&x, GRAN, &bad, 0), CUDA_ERROR_INVALID_DEVICE);

    OK(cuMemRelease(h));
    OK(cuMemRelease(h2));
    OK(cuMemRelease(n));
    OK(cuMemRelease(big));
    OK(cuMemRelease(d));
    struct ms_fake_stats s3 = stats();
    assert_int_equal(s3.host_handles, s0.host_handles);
    assert_int_equal(s3.host_handle_bytes, s0.host_handle_bytes);
    assert_int_equal(s3.host_creates, s0.host_creates + 4);
    assert_int_equal(s3.used_bytes, s0.used_bytes);
    assert_int_equal(free_bytes(), free0);
}

/* ---- copy, two-maps, memtype --------------------------------------------------------------- */

static void host_copy_and_two_maps(void **state)
{
    (void)state;
    const size_t sz = 4 * MIB;
    CUdeviceptr r = 0;
    OK(cuMemAddressReserve(&r, 4 * sz, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(CU_MEM_LOCATION_TYPE_HOST, 0, sz);
    CUmemGenericAllocationHandle d = create(CU_MEM_LOCATION_TYPE_DEVICE, 0, sz);
    CUdeviceptr hv = r, dv = r + sz, hv2 = r + 3 * sz; /* r + 2 sz stays unmapped */
    size_t free0 = free_bytes();
    map_rw(hv, sz, h);
    map_rw(dv, sz, d);
    map_rw(hv2, sz, h); /* the same host handle, a second time */
    assert_int_equal(free_bytes(), free0);

    /* Device -> host mapping. */
    OK(cuMemsetD32(dv, 0xd00dfeedu, sz / 4));
    OK(cuMemcpyDtoD(hv, dv, sz));
    const uint32_t *hw = hp(hv), *hw2 = hp(hv2);
    assert_int_equal(hw[0], 0xd00dfeedu);
    assert_int_equal(hw[sz / 4 - 1], 0xd00dfeedu);
    /* Both mappings of the host handle are the same bytes. */
    assert_memory_equal(hw, hw2, sz);
    ((uint32_t *)hp(hv2))[5] = 12345;
    assert_int_equal(hw[5], 12345);
    uint32_t word = 0;
    OK(cuMemcpyDtoH(&word, hv + 5 * 4, 4));
    assert_int_equal(word, 12345);

    /* Host mapping -> device, asynchronously and through cuMemcpy, from the second mapping. */
    uint32_t *pattern = malloc(sz);
    assert_non_null(pattern);
    for (size_t i = 0; i < sz / 4; i++)
        pattern[i] = (uint32_t)i * 2654435761u;
    OK(cuMemcpyHtoD(hv, pattern, sz));
    assert_memory_equal(hp(hv2), pattern, sz);
    OK(cuMemsetD8(dv, 0, sz));
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemcpyDtoDAsync(dv, hv2, sz, s));
    OK(cuStreamSynchronize(s));
    assert_memory_equal(hp(dv), pattern, sz);
    OK(cuMemsetD8(dv, 0, sz));
    OK(cuMemcpy(dv, hv, sz));
    uint32_t *back = malloc(sz);
    assert_non_null(back);
    OK(cuMemcpyDtoH(back, dv, sz));
    assert_memory_equal(back, pattern, sz);
    OK(cuStreamDestroy(s));
    /* A copy reaching the unmapped gap is still an illegal address. */
    assert_int_equal(cuMemcpyDtoD(r + 2 * sz, hv, sz), CUDA_ERROR_ILLEGAL_ADDRESS);

    /* Pointer queries: host inside the host mappings, device inside the device one. */
    unsigned int mt = 0;
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hv + 4096));
    assert_int_equal(mt, CU_MEMORYTYPE_HOST);
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hv2 + sz - 1));
    assert_int_equal(mt, CU_MEMORYTYPE_HOST);
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dv + 4096));
    assert_int_equal(mt, CU_MEMORYTYPE_DEVICE);
    assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r + 2 * sz),
                     CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned int mt2 = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *vals[] = {&mt2, &start, &size};
    OK(cuPointerGetAttributes(3, as, vals, hv2 + 100));
    assert_int_equal(mt2, CU_MEMORYTYPE_HOST);
    assert_int_equal(start, hv2);
    assert_int_equal(size, sz);
    OK(cuPointerGetAttributes(3, as, vals, dv + 100));
    assert_int_equal(mt2, CU_MEMORYTYPE_DEVICE);
    assert_int_equal(start, dv);

    OK(cuMemUnmap(hv, sz));
    OK(cuMemUnmap(dv, sz));
    OK(cuMemUnmap(hv2, sz));
    OK(cuMemRelease(h));
    OK(cuMemRelease(d));
    OK(cuMemAddressFree(r, 4 * sz));
    free(pattern);
    free(back);
}

/* ---- kernel -------------------------------------------------------------------------------- */

/* add(dst, src, n): dst[i] += src[i] for n words. */
static void k_add(const struct ms_fake_launch *l)
{
    uint32_t *d = hp(*(const CUdeviceptr *)l->args[0]);
    const uint32_t *s = hp(*(const CUdeviceptr *)l->args[1]);
    uint32_t n = *(const uint32_t *)l->args[2];
    for (uint32_t i = 0; i < n; i++)
        d[i] += s[i];
}

static CUfunction add_fn(void)
{
    static CUfunction f;
    if (!f) {
        const size_t sizes[] = {sizeof(CUdeviceptr), sizeof(CUdeviceptr), sizeof(uint32_t)};
        OK(ms_fake_register_kernel("fake_host_add", k_add, sizes, 3, NULL, &f));
    }
    return f;
}

static void launch_add(CUdeviceptr dst, CUdeviceptr src, uint32_t n)
{
    void *params[] = {&dst, &src, &n};
    OK(cuLaunchKernel(add_fn(), 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
}

/* The deltas of the host counters and of launches since s0. */
static void expect_counts(const struct ms_fake_stats *s0, uint64_t launches, uint64_t hl,
                          uint64_t ha)
{
    struct ms_fake_stats s = stats();
    assert_int_equal(s.launches - s0->launches, launches);
    assert_int_equal(s.host_mapped_launches - s0->host_mapped_launches, hl);
    assert_int_equal(s.host_mapped_args - s0->host_mapped_args, ha);
}

static void host_kernel(void **state)
{
    (void)state;
    const size_t sz = 2 * MIB;
    const uint32_t n = (uint32_t)(sz / 4);
    CUdeviceptr r = 0;
    OK(cuMemAddressReserve(&r, 3 * sz, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, sz);
    CUmemGenericAllocationHandle d = create(CU_MEM_LOCATION_TYPE_DEVICE, 0, sz);
    CUdeviceptr hv = r, dv = r + sz, hv2 = r + 2 * sz;
    map_rw(hv, sz, h);
    map_rw(dv, sz, d);
    map_rw(hv2, sz, h);
    OK(cuMemsetD32(hv, 3, n));
    OK(cuMemsetD32(dv, 10, n));

    struct ms_fake_stats s0 = stats();
    launch_add(dv, hv + 4096, n - 1024); /* reads host memory: one parameter */
    expect_counts(&s0, 1, 1, 1);
    assert_int_equal(((uint32_t *)hp(dv))[0], 13);
    launch_add(hv, dv, n); /* writes host memory */
    expect_counts(&s0, 2, 2, 2);
    assert_int_equal(((uint32_t *)hp(hv2))[0], 16); /* seen through the other mapping */
    launch_add(hv2, hv, n); /* both parameters, through two mappings of one handle */
    expect_counts(&s0, 3, 3, 4);
    assert_int_equal(((uint32_t *)hp(hv))[0], 32);
    launch_add(dv, dv, n); /* device memory only */
    expect_counts(&s0, 4, 3, 4);
    assert_int_equal(((uint32_t *)hp(dv))[0], 26);

    /* With extra (a packed buffer: the pointers at offsets 0 and 8). */
    struct {
        CUdeviceptr dst, src;
        uint32_t n;
    } buf = {dv, hv, 16};
    size_t bytes = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes,
                     CU_LAUNCH_PARAM_END};
    OK(cuLaunchKernel(add_fn(), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    expect_counts(&s0, 5, 4, 5);
    assert_int_equal(((uint32_t *)hp(dv))[0], 58);

    /* As a graph's node, launched twice: counted at each launch, not when added. */
    CUgraph g;
    OK(cuGraphCreate(&g, 0));
    CUDA_KERNEL_NODE_PARAMS np;
    memset(&np, 0, sizeof np);
    CUdeviceptr gd = hv, gs = hv2;
    uint32_t gn = 1;
    void *gparams[] = {&gd, &gs, &gn};
    np.func = add_fn();
    np.gridDimX = np.gridDimY = np.gridDimZ = 1;
    np.blockDimX = np.blockDimY = np.blockDimZ = 1;
    np.kernelParams = gparams;
    CUgraphNode node;
    OK(cuGraphAddKernelNode(&node, g, NULL, 0, &np));
    CUgraphExec e;
    OK(cuGraphInstantiateWithFlags(&e, g, 0));
    expect_counts(&s0, 5, 4, 5);
    OK(cuGraphLaunch(e, NULL));
    OK(cuGraphLaunch(e, NULL));
    expect_counts(&s0, 7, 6, 9);
    assert_int_equal(((uint32_t *)hp(hv))[0], 128); /* 32, 64, 128: doubled twice */
    OK(cuGraphExecDestroy(e));
    OK(cuGraphDestroy(g));

    /* A pointer just past the host mapping (into the device one) is not host memory; a
     * pointer into an unmapped range is not either (and is not touched here: n = 0). */
    launch_add(dv, hv + sz, 0);
    expect_counts(&s0, 8, 6, 9);

    OK(cuMemUnmap(r, 3 * sz)); /* all three mappings at once */
    launch_add(hv, hv2, 0);    /* the reservation has nothing mapped any more */
    expect_counts(&s0, 9, 6, 9);
    OK(cuMemRelease(h));
    OK(cuMemRelease(d));
    OK(cuMemAddressFree(r, 3 * sz));
}

/* ---- fault --------------------------------------------------------------------------------- */

static uintptr_t fault_lo, fault_hi;

static void on_segv(int sig, siginfo_t *si, void *uctx)
{
    (void)sig;
    (void)uctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    _exit(a >= fault_lo && a < fault_hi ? 42 : 43);
}

/* Run one add(dst, src, n) launch in a child; its exit status (42: faulted inside [lo, hi)). */
static int launch_in_child(CUdeviceptr dst, CUdeviceptr src, uint32_t n, uintptr_t lo, uintptr_t hi)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fault_lo = lo;
        fault_hi = hi;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        void *params[] = {&dst, &src, &n};
        CUresult rc = cuLaunchKernel(add_fn(), 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
        _exit(rc == CUDA_SUCCESS ? 0 : 44);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void unmapped_still_faults(void **state)
{
    (void)state;
    const size_t sz = 2 * MIB;
    CUdeviceptr r = 0;
    OK(cuMemAddressReserve(&r, 3 * sz, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(CU_MEM_LOCATION_TYPE_HOST, 0, sz);
    CUmemGenericAllocationHandle d = create(CU_MEM_LOCATION_TYPE_DEVICE, 0, sz);
    map_rw(r, sz, h);
    map_rw(r + 2 * sz, sz, d);
    CUdeviceptr gap = r + sz;
    /* Reading the unmapped gap between a host and a device mapping faults there. */
    assert_int_equal(launch_in_child(r, gap, 4, gap, gap + sz), 42);
    assert_int_equal(launch_in_child(r + 2 * sz, gap + 64, 4, gap, gap + sz), 42);
    /* A host mapping without access granted faults too, as on a GPU. */
    CUmemGenericAllocationHandle h2 = create(CU_MEM_LOCATION_TYPE_HOST, 0, sz);
    OK(cuMemMap(gap, sz, 0, h2, 0));
    assert_int_equal(launch_in_child(r, gap, 4, gap, gap + sz), 42);
    /* With access: no fault, the same launch runs. */
    assert_int_equal(launch_in_child(r, r + 2 * sz, 4, 0, 0), 0);
    OK(cuMemUnmap(r, 3 * sz));
    OK(cuMemRelease(h));
    OK(cuMemRelease(h2));
    OK(cuMemRelease(d));
    OK(cuMemAddressFree(r, 3 * sz));
}

/* ---- release ------------------------------------------------------------------------------- */

/* Release a handle of the given location while it is mapped twice; check it lives until the
 * second unmap. `host` says which counters must hold it. */
static void release_while_mapped(CUmemLocationType type, bool host)
{
    const size_t sz = 2 * MIB;
    CUdeviceptr r = 0;
    OK(cuMemAddressReserve(&r, 2 * sz, 0, 0, 0));
    struct ms_fake_stats s0 = stats();
    CUmemGenericAllocationHandle h = create(type, 0, sz);
    map_rw(r, sz, h);
    map_rw(r + sz, sz, h);
    OK(cuMemsetD32(r, 0x5a5a5a5au, sz / 4));
    OK(cuMemRelease(h));
    struct ms_fake_stats s1 = stats();
    assert_int_equal(s1.vmm_releases, s0.vmm_releases + 1);
    assert_int_equal(s1.host_handles, s0.host_handles + (host ? 1 : 0));
    assert_int_equal(s1.host_handle_bytes, s0.host_handle_bytes + (host ? sz : 0));
    assert_int_equal(s1.used_bytes, s0.used_bytes + (host ? 0 : sz));
    /* The memory is still there, through both mappings, and still what it was. */
    assert_int_equal(((uint32_t *)hp(r + sz))[sz / 4 - 1], 0x5a5a5a5au);
    uint32_t word = 0;
    OK(cuMemcpyDtoH(&word, r + 8, 4));
    assert_int_equal(word, 0x5a5a5a5au);
    unsigned int mt = 0;
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r));
    assert_int_equal(mt, host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
    /* The handle itself is gone (the fake is strict here: undefined by the documentation, and
     * the H200's CUDA 13.0 driver was seen to accept a second mapping). */
    assert_int_equal(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(r, sz));
    assert_int_equal(cuMemMap(r, sz, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    /* One mapping left: still alive and counted. */
    struct ms_fake_stats s2 = stats();
    assert_int_equal(s2.host_handles, s1.host_handles);
    assert_int_equal(s2.used_bytes, s1.used_bytes);
    assert_int_equal(((uint32_t *)hp(r + sz))[0], 0x5a5a5a5au);
    ((uint32_t *)hp(r + sz))[0] = 7;
    OK(cuMemcpyDtoH(&word, r + sz, 4));
    assert_int_equal(word, 7);
    OK(cuMemUnmap(r + sz, sz));
    /* The last mapping is gone: so is the memory. */
    struct ms_fake_stats s3 = stats();
    assert_int_equal(s3.host_handles, s0.host_handles);
    assert_int_equal(s3.host_handle_bytes, s0.host_handle_bytes);
    assert_int_equal(s3.used_bytes, s0.used_bytes);
    assert_int_equal(s3.vmm_unmaps, s0.vmm_unmaps + 2);
    OK(cuMemAddressFree(r, 2 * sz));
}

static void host_release_while_mapped(void **state)
{
    (void)state;
    release_while_mapped(CU_MEM_LOCATION_TYPE_HOST, true);
}

static void device_release_while_mapped(void **state)
{
    (void)state;
    release_while_mapped(CU_MEM_LOCATION_TYPE_DEVICE, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_create),
        cmocka_unit_test(host_copy_and_two_maps),
        cmocka_unit_test(host_kernel),
        cmocka_unit_test(unmapped_still_faults),
        cmocka_unit_test(host_release_while_mapped),
        cmocka_unit_test(device_release_while_mapped),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
