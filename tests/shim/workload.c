/*
 * workload.c - the shim tests' driver workload (see workload.h).
 *
 * Design
 *   Written once against struct ms_api, so the same calls run linked, through dlsym and
 *   through cuGetProcAddress, directly on the fake driver and under libmsched; the tests
 *   compare the printed RESULT hash across all of them. Kernels are host functions registered
 *   with the fake driver; they dereference device pointers directly (fake device memory is
 *   host memory). Every step checks its own data, so a wrong forwarding (wrong ABI variant,
 *   lost argument) fails here even before the hashes are compared.
 *
 *   Counting: each driver call that the workload makes adds to the expectations of the three
 *   observers (fake, shim, trace; workload.h says what each counts). A call expected to fail
 *   is checked for its exact error code.
 */
#include "tests/shim/workload.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N 4096
#define THREADS 4
#define ITERS 25

static struct ms_expect ex;
static uint64_t hash = 1469598103934665603ull; /* FNV-1a over every byte read back */

static void hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        hash ^= b[i];
        hash *= 1099511628211ull;
    }
}

int ms_check_rc(const char *what, CUresult rc, CUresult want)
{
    if (rc == want)
        return 0;
    printf("FAIL: %s returned %d, expected %d\n", what, (int)rc, (int)want);
    return 1;
}

static int fail(const char *why)
{
    printf("FAIL: %s\n", why);
    return 1;
}

/* Print the packed bytes of a launch as the trace writes them (hex, then "off:size,..."). */
static void expect_kernel(const char *name, const void *buf, size_t len, const char *layout)
{
    printf("EXPECT_KERNEL %s params=", name);
    for (size_t i = 0; i < len; i++)
        printf("%02x", ((const unsigned char *)buf)[i]);
    printf(" layout=%s\n", layout);
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                      */

#define ARG(l, i, type) (*(type *)(l)->args[i])
#define DEV(p) ((void *)(uintptr_t)(p))

static void k_vadd(const struct ms_fake_launch *l)
{
    const float *x = DEV(ARG(l, 0, CUdeviceptr)), *y = DEV(ARG(l, 1, CUdeviceptr));
    float *z = DEV(ARG(l, 2, CUdeviceptr));
    for (int i = 0; i < ARG(l, 3, int); i++)
        z[i] = x[i] + y[i];
}

static void k_scale(const struct ms_fake_launch *l)
{
    float *z = DEV(ARG(l, 0, CUdeviceptr));
    for (int i = 0; i < ARG(l, 2, int); i++)
        z[i] *= ARG(l, 1, float);
}

/* Registered without parameter sizes: reads its (CUdeviceptr, int) from kernelParams. */
static void k_iota(const struct ms_fake_launch *l)
{
    int *p = DEV(*(CUdeviceptr *)l->args[0]);
    for (int i = 0; i < *(int *)l->args[1]; i++)
        p[i] = i;
}

static void k_add_one(const struct ms_fake_launch *l)
{
    int *p = DEV(ARG(l, 0, CUdeviceptr));
    for (int i = 0; i < ARG(l, 1, int); i++)
        p[i] += 1;
}

static void k_sum(const struct ms_fake_launch *l)
{
    const float *x = DEV(ARG(l, 0, CUdeviceptr));
    float s = 0;
    for (int i = 0; i < ARG(l, 1, int); i++)
        s += x[i];
    *(float *)DEV(ARG(l, 2, CUdeviceptr)) = s;
}

static void k_touch(const struct ms_fake_launch *l)
{
    memset(DEV(ARG(l, 0, CUdeviceptr)), ARG(l, 2, unsigned char), ARG(l, 1, size_t));
}

struct pair_arg {
    CUdeviceptr src;
    int n;
    CUdeviceptr dst;
};

static void k_struct_copy(const struct ms_fake_launch *l)
{
    struct pair_arg pa = ARG(l, 0, struct pair_arg);
    memcpy(DEV(pa.dst), DEV(pa.src), (size_t)pa.n * sizeof(int));
}

static void k_noparams(const struct ms_fake_launch *l)
{
    (*(int *)l->user)++;
}

/* Registered as parameterless, yet launched with (CUdeviceptr, int): a kernel whose parameter
 * information the driver does not give. Checks what it received against *user. */
struct opaque_want {
    CUdeviceptr p;
    int n, runs, bad;
};

static void k_opaque(const struct ms_fake_launch *l)
{
    struct opaque_want *w = l->user;
    CUdeviceptr p = 0;
    int n = 0;
    if (l->args) {
        p = *(CUdeviceptr *)l->args[0];
        n = *(int *)l->args[1];
    } else if (l->buf && l->buf_bytes >= 12) {
        memcpy(&p, l->buf, 8);
        memcpy(&n, (const char *)l->buf + 8, 4);
    }
    w->runs++;
    w->bad += p != w->p || n != w->n;
}

static struct {
    CUfunction vadd, scale, iota, add_one, sum, touch, struct_copy, noparams, opaque;
} k;
static int noparams_runs;
static struct opaque_want opaque_want;

static int register_kernels(const struct ms_fake_api *fk)
{
    static const size_t vadd_p[] = {8, 8, 8, 4}, scale_p[] = {8, 4, 4}, add_p[] = {8, 4},
                        sum_p[] = {8, 4, 8}, touch_p[] = {8, 8, 1},
                        struct_p[] = {sizeof(struct pair_arg)}, none[1] = {0};
    MS_CK(fk->register_kernel("vadd", k_vadd, vadd_p, 4, NULL, &k.vadd));
    MS_CK(fk->register_kernel("scale", k_scale, scale_p, 3, NULL, &k.scale));
    MS_CK(fk->register_kernel("iota_unknown", k_iota, NULL, 0, NULL, &k.iota));
    MS_CK(fk->register_kernel("add_one", k_add_one, add_p, 2, NULL, &k.add_one));
    MS_CK(fk->register_kernel("sum", k_sum, sum_p, 3, NULL, &k.sum));
    MS_CK(fk->register_kernel("touch", k_touch, touch_p, 3, NULL, &k.touch));
    MS_CK(fk->register_kernel("struct_copy", k_struct_copy, struct_p, 1, NULL, &k.struct_copy));
    MS_CK(fk->register_kernel("noparams", k_noparams, none, 0, &noparams_runs, &k.noparams));
    MS_CK(fk->register_kernel("opaque", k_opaque, none, 0, &opaque_want, &k.opaque));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Steps                                                                                        */

static const struct ms_api *api;

static CUresult launch(CUfunction f, unsigned grid, CUstream s, void **params, void **extra)
{
    return api->LaunchKernel(f, grid, 1, 1, 128, 1, 1, 0, s, params, extra);
}

static int step_device(void)
{
    int v = 0, count = 0, attr = 0;
    char name[64];
    size_t total = 0;
    CUdevice dev;
    MS_CK(api->DriverGetVersion(&v));
    MS_CK(api->DeviceGetCount(&count));
    MS_CK(api->DeviceGet(&dev, 0));
    MS_CK(api->DeviceGetName(name, sizeof name, dev));
    MS_CK(api->DeviceTotalMem(&total, dev));
    MS_CK(api->DeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    if (v != 13000 || count != 1 || attr != 132 || total == 0 || strlen(name) == 0)
        return fail("device queries returned unexpected values");
    hash_bytes(name, strlen(name));
    /* A context of our own, created and destroyed; the primary context stays current. */
    CUcontext mine = NULL, cur = NULL;
    MS_CK(api->CtxCreate(&mine, NULL, 0, dev));
    MS_CK(api->CtxGetCurrent(&cur));
    if (cur != mine)
        return fail("cuCtxCreate did not make the new context current");
    MS_CK(api->CtxDestroy(mine));
    CUcontext primary;
    MS_CK(api->PrimaryCtxRetain(&primary, dev));
    MS_CK(api->CtxSetCurrent(primary));
    size_t fr = 0, to = 0;
    MS_CK(api->MemGetInfo(&fr, &to));
    if (to != total || fr > to)
        return fail("cuMemGetInfo disagrees with cuDeviceTotalMem");
    return 0;
}

static int step_compute(CUstream s)
{
    static float ha[N], hb[N], hc[N];
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(2 * i + 1);
    }
    CUdeviceptr a, b, c, sumv;
    MS_CK(api->MemAlloc(&a, sizeof ha));
    MS_CK(api->MemAlloc(&b, sizeof hb));
    MS_CK(api->MemAlloc(&c, sizeof hc));
    MS_CK(api->MemAllocManaged(&sumv, 64, CU_MEM_ATTACH_GLOBAL));
    ex.allocs += 4;
    MS_CK(api->MemcpyHtoD(a, ha, sizeof ha));
    MS_CK(api->MemcpyHtoDAsync(b, hb, sizeof hb, s));
    MS_CK(api->MemsetD32(c, 0xdeadbeef, N));
    MS_CK(api->MemsetD8Async(sumv, 0, 64, s));
    ex.copies += 2;
    ex.memsets += 2;

    /* kernelParams */
    int n = N;
    void *vadd_args[] = {&a, &b, &c, &n};
    MS_CK(launch(k.vadd, 32, NULL, vadd_args, NULL));
    unsigned char packed[28] = {0};
    memcpy(packed, &a, 8);
    memcpy(packed + 8, &b, 8);
    memcpy(packed + 16, &c, 8);
    memcpy(packed + 24, &n, 4);
    expect_kernel("vadd", packed, sizeof packed, "0:8,8:8,16:8,24:4");

    /* extra: the caller packs (CUdeviceptr, float, int) itself */
    unsigned char buf[16];
    float factor = 0.5f;
    memcpy(buf, &c, 8);
    memcpy(buf + 8, &factor, 4);
    memcpy(buf + 12, &n, 4);
    size_t bufsize = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize,
                     CU_LAUNCH_PARAM_END};
    MS_CK(launch(k.scale, 32, s, NULL, extra));
    expect_kernel("scale", buf, sizeof buf, "0:8,8:4,12:4");

    /* cooperative */
    void *sum_args[] = {&c, &n, &sumv};
    MS_CK(api->LaunchCooperativeKernel(k.sum, 4, 1, 1, 64, 1, 1, 0, s, sum_args));
    ex.launches += 3;

    MS_CK(api->StreamSynchronize(s));
    ex.s_syncs++;
    MS_CK(api->MemcpyDtoH(hc, c, sizeof hc));
    float total = 0;
    MS_CK(api->MemcpyDtoHAsync(&total, sumv, sizeof total, s));
    ex.copies += 2;
    double want = 0;
    for (int i = 0; i < N; i++) {
        if (hc[i] != (ha[i] + hb[i]) * 0.5f)
            return fail("vadd/scale produced wrong values");
        want += hc[i];
    }
    if (total != (float)want && (total - want) / want > 1e-4)
        return fail("cooperative sum is wrong");
    hash_bytes(hc, sizeof hc);

    /* D2D, then unified cuMemcpy from managed memory to the host */
    MS_CK(api->MemcpyDtoD(a, c, sizeof hc));
    MS_CK(api->MemcpyDtoDAsync(b, a, sizeof hc, s));
    float back = 0;
    MS_CK(api->Memcpy((CUdeviceptr)(uintptr_t)&back, b + 8, sizeof back));
    MS_CK(api->MemcpyAsync((CUdeviceptr)(uintptr_t)&total, sumv, sizeof total, s));
    ex.copies += 4;
    if (back != hc[2])
        return fail("cuMemcpy (unified) read the wrong value");
    hash_bytes(&back, sizeof back);

    MS_CK(api->MemFree(a));
    MS_CK(api->MemFree(b));
    MS_CK(api->MemFree(c));
    MS_CK(api->MemFree(sumv));
    ex.frees += 4;
    return 0;
}

static int step_misc_launches(CUstream s)
{
    CUdeviceptr p, q;
    int n = 1000;
    MS_CK(api->MemAllocAsync(&p, n * sizeof(int), s));
    MS_CK(api->MemAlloc(&q, n * sizeof(int)));
    ex.allocs += 2;

    /* the driver says "no parameters", the launch passes some: unknown, both ways */
    opaque_want = (struct opaque_want){.p = p, .n = n};
    void *opaque_args[] = {&p, &n};
    MS_CK(launch(k.opaque, 1, NULL, opaque_args, NULL));
    expect_kernel("opaque", "", 0, "-");
    unsigned char obuf[12];
    memcpy(obuf, &p, 8);
    memcpy(obuf + 8, &n, 4);
    size_t obytes = sizeof obuf;
    void *oextra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, obuf, CU_LAUNCH_PARAM_BUFFER_SIZE, &obytes,
                      CU_LAUNCH_PARAM_END};
    MS_CK(launch(k.opaque, 1, s, NULL, oextra));
    expect_kernel("opaque", obuf, sizeof obuf, "-");
    ex.launches += 2;
    ex.s_unknown += 2;
    if (opaque_want.runs != 2 || opaque_want.bad)
        return fail("a kernel without parameter information got the wrong arguments");

    /* no parameter information: the shim records an unknown layout */
    void *iota_args[] = {&p, &n};
    MS_CK(launch(k.iota, 8, NULL, iota_args, NULL));
    expect_kernel("iota_unknown", "", 0, "-");
    ex.s_unknown++;

    /* cuLaunchKernelEx on a stream */
    CUlaunchConfig cfg = {.gridDimX = 8,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 128,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = s};
    void *add_args[] = {&p, &n};
    MS_CK(api->LaunchKernelEx(&cfg, k.add_one, add_args, NULL));

    /* a by-value struct holding two pointers */
    struct pair_arg pa;
    memset(&pa, 0, sizeof pa); /* the padding is passed too: make it defined */
    pa.src = p;
    pa.n = n;
    pa.dst = q;
    void *struct_args[] = {&pa};
    MS_CK(launch(k.struct_copy, 1, s, struct_args, NULL));
    unsigned char packed[sizeof pa];
    memcpy(packed, &pa, sizeof pa); /* padding included: the shim copies the whole struct */
    expect_kernel("struct_copy", packed, sizeof packed, "0:24");

    /* a kernel without parameters, launched with neither kernelParams nor extra */
    MS_CK(launch(k.noparams, 1, NULL, NULL, NULL));
    expect_kernel("noparams", "", 0, "-"); /* no entries: written without layout */
    ex.launches += 4;
    if (noparams_runs != 1)
        return fail("the parameterless kernel did not run exactly once");

    int host[1000];
    MS_CK(api->MemcpyDtoH(host, q, sizeof host));
    ex.copies++;
    for (int i = 0; i < n; i++)
        if (host[i] != i + 1)
            return fail("iota/add_one/struct_copy produced wrong values");
    hash_bytes(host, sizeof host);

    /* rejected calls: a launch with a zero grid, a copy to a bogus address */
    int rc = ms_check_rc("launch with grid 0", launch(k.add_one, 0, NULL, add_args, NULL),
                         CUDA_ERROR_INVALID_VALUE);
    rc |= ms_check_rc("copy to a bogus device address",
                      api->MemcpyHtoD((CUdeviceptr)0x1000, host, 4), CUDA_ERROR_INVALID_VALUE);
    rc |= ms_check_rc("free of a bogus address", api->MemFree((CUdeviceptr)0x2000),
                      CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr huge;
    rc |= ms_check_rc("allocation beyond device memory", api->MemAlloc(&huge, 1ull << 45),
                      CUDA_ERROR_OUT_OF_MEMORY);
    if (rc)
        return 1;
    ex.s_launches++; /* submitted (shim) but neither run (fake) nor traced */
    ex.s_copies++;

    MS_CK(api->MemFreeAsync(p, s));
    MS_CK(api->MemFree(q));
    ex.frees += 2;
    return 0;
}

static int step_2d(void)
{
    enum { W = 100, H = 8 };
    unsigned char host[H][W], back[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = (unsigned char)(y * 31 + x);
    CUdeviceptr d;
    size_t pitch = 0;
    MS_CK(api->MemAllocPitch(&d, &pitch, W, H, 4));
    ex.allocs++;
    if (pitch < W)
        return fail("pitch smaller than the width");
    MS_CK(api->MemsetD2D32(d, pitch, 0x01010101u, W / 4, H));
    MS_CK(api->MemsetD16(d, 0x0202, 2));
    ex.memsets += 2;
    CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                        .srcHost = host,
                        .srcPitch = W,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = d,
                        .dstPitch = pitch,
                        .WidthInBytes = W - 10,
                        .Height = H};
    MS_CK(api->Memcpy2D(&up));
    CUDA_MEMCPY2D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                          .srcDevice = d,
                          .srcPitch = pitch,
                          .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = back,
                          .dstPitch = W,
                          .WidthInBytes = W,
                          .Height = H};
    MS_CK(api->Memcpy2D(&down));
    ex.copies += 2;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            if (back[y][x] != (x < W - 10 ? host[y][x] : 1))
                return fail("2D copy or 2D memset produced wrong values");
    hash_bytes(back, sizeof back);
    MS_CK(api->MemFree(d));
    ex.frees++;
    return 0;
}

static int step_vmm(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    MS_CK(api->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr base;
    CUmemGenericAllocationHandle h1, h2;
    MS_CK(api->MemAddressReserve(&base, 3 * gran, 0, 0, 0));
    MS_CK(api->MemCreate(&h1, gran, &prop, 0));
    MS_CK(api->MemCreate(&h2, gran, &prop, 0));
    MS_CK(api->MemMap(base, gran, 0, h1, 0));
    MS_CK(api->MemMap(base + gran, gran, 0, h2, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    MS_CK(api->MemSetAccess(base, 2 * gran, &acc, 1));

    size_t bytes = 2 * gran;
    unsigned char val = 0x5a;
    void *touch_args[] = {&base, &bytes, &val};
    MS_CK(launch(k.touch, 1, NULL, touch_args, NULL));
    ex.launches++;

    unsigned char got[2] = {0, 0};
    MS_CK(api->MemcpyDtoH(&got[0], base + gran + 100, 1));
    /* move h2's mapping: its contents travel with it */
    MS_CK(api->MemUnmap(base + gran, gran));
    MS_CK(api->MemMap(base + 2 * gran, gran, 0, h2, 0));
    MS_CK(api->MemSetAccess(base + 2 * gran, gran, &acc, 1));
    MS_CK(api->MemcpyDtoH(&got[1], base + 2 * gran + 100, 1));
    ex.copies += 2;
    if (got[0] != 0x5a || got[1] != 0x5a)
        return fail("VMM memory lost its contents across unmap and remap");
    hash_bytes(got, sizeof got);
    /* the hole left behind is not resident: the driver refuses to copy into it */
    if (ms_check_rc("copy into unmapped VMM range", api->MemcpyHtoD(base + gran, got, 1),
                    CUDA_ERROR_ILLEGAL_ADDRESS))
        return 1;
    ex.s_copies++;

    MS_CK(api->MemUnmap(base, gran));
    MS_CK(api->MemUnmap(base + 2 * gran, gran));
    ex.s_maps += 3; /* the shim counts mappings as allocations, unmaps as frees */
    MS_CK(api->MemRelease(h1));
    MS_CK(api->MemRelease(h2));
    MS_CK(api->MemAddressFree(base, 3 * gran));
    return 0;
}

/* Page-locked host memory: allocated, registered, used for copies, freed. */
static int step_host(void)
{
    void *a = NULL, *b = NULL;
    static unsigned char reg[8192];
    CUdeviceptr d;
    MS_CK(api->MemAllocHost(&a, 4096));
    MS_CK(api->MemHostAlloc(&b, 4096, 0));
    MS_CK(api->MemHostRegister(reg, sizeof reg, 0));
    ex.s_host += 3;
    memset(a, 0x3c, 4096);
    MS_CK(api->MemAlloc(&d, 4096));
    ex.allocs++;
    MS_CK(api->MemcpyHtoD(d, a, 4096));
    MS_CK(api->MemcpyDtoH(b, d, 4096));
    MS_CK(api->MemcpyDtoH(reg, d, 4096));
    ex.copies += 3;
    if (memcmp(a, b, 4096) != 0 || memcmp(a, reg, 4096) != 0)
        return fail("copies through page-locked host memory lost data");
    hash_bytes(b, 64);
    MS_CK(api->MemFree(d));
    ex.frees++;
    MS_CK(api->MemHostUnregister(reg));
    MS_CK(api->MemFreeHost(b));
    MS_CK(api->MemFreeHost(a));
    return 0;
}

static int step_events(CUstream s)
{
    CUevent e0, e1;
    float ms = -1;
    MS_CK(api->EventCreate(&e0, 0));
    MS_CK(api->EventCreate(&e1, 0));
    MS_CK(api->EventRecord(e0, s));
    MS_CK(api->EventRecord(e1, s));
    MS_CK(api->EventSynchronize(e1));
    ex.s_syncs++;
    MS_CK(api->EventElapsedTime(&ms, e0, e1));
    if (ms < 0)
        return fail("negative elapsed time");
    MS_CK(api->EventDestroy(e0));
    MS_CK(api->EventDestroy(e1));
    MS_CK(api->CtxSynchronize());
    ex.s_syncs++;
    return 0;
}

struct thread_arg {
    int id, rc;
};

static void *thread_main(void *p)
{
    struct thread_arg *t = p;
    CUcontext primary;
    t->rc = 1;
    if (api->PrimaryCtxRetain(&primary, 0) != CUDA_SUCCESS ||
        api->CtxSetCurrent(primary) != CUDA_SUCCESS)
        return NULL;
    int n = 1024, host[1024];
    for (int it = 0; it < ITERS; it++) {
        CUdeviceptr d;
        void *args[] = {&d, &n};
        if (api->MemAlloc(&d, sizeof host) != CUDA_SUCCESS ||
            api->MemsetD32(d, (unsigned)(t->id * 1000 + it), (size_t)n) != CUDA_SUCCESS ||
            launch(k.add_one, 4, NULL, args, NULL) != CUDA_SUCCESS ||
            api->MemcpyDtoH(host, d, sizeof host) != CUDA_SUCCESS ||
            api->MemFree(d) != CUDA_SUCCESS)
            return NULL;
        for (int i = 0; i < n; i++)
            if (host[i] != t->id * 1000 + it + 1)
                return NULL;
    }
    t->rc = api->PrimaryCtxRelease(0) == CUDA_SUCCESS ? 0 : 1;
    return NULL;
}

static int step_threads(void)
{
    pthread_t th[THREADS];
    struct thread_arg ta[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ta[i] = (struct thread_arg){i + 1, 1};
        if (pthread_create(&th[i], NULL, thread_main, &ta[i]) != 0)
            return fail("pthread_create");
    }
    int rc = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        rc |= ta[i].rc;
    }
    if (rc)
        return fail("a worker thread saw a driver error or wrong data");
    ex.allocs += THREADS * ITERS;
    ex.frees += THREADS * ITERS;
    ex.memsets += THREADS * ITERS;
    ex.launches += THREADS * ITERS;
    ex.copies += THREADS * ITERS;
    return 0;
}

int ms_workload_run(const struct ms_api *a, const struct ms_fake_api *fk)
{
    api = a;
    struct ms_fake_stats before, after;
    MS_CK(a->Init(0));
    fk->get_stats(&before);
    if (register_kernels(fk) || step_device())
        return 1;
    CUstream s;
    MS_CK(a->StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (step_compute(s) || step_misc_launches(s) || step_2d() || step_vmm() || step_host() ||
        step_events(s) || step_threads())
        return 1;
    MS_CK(a->StreamDestroy(s));
    MS_CK(a->PrimaryCtxRelease(0));
    fk->get_stats(&after);

    ex.s_launches += ex.launches;
    ex.s_copies += ex.copies;
    ex.s_memsets += ex.memsets;
    ex.t_kernels = ex.s_launches - 1; /* the zero-grid launch leaves no record */
    printf("RESULT %016llx\n", (unsigned long long)hash);
    printf("EXPECT fake launches=%d allocs=%d frees=%d copies=%d memsets=%d\n", ex.launches,
           ex.allocs, ex.frees, ex.copies, ex.memsets);
    printf("FAKE fake launches=%llu allocs=%llu frees=%llu copies=%llu memsets=%llu\n",
           (unsigned long long)(after.launches - before.launches),
           (unsigned long long)(after.allocs - before.allocs),
           (unsigned long long)(after.frees - before.frees),
           (unsigned long long)(after.copies - before.copies),
           (unsigned long long)(after.memsets - before.memsets));
    printf("EXPECT shim launches=%d allocs=%d frees=%d copies=%d memsets=%d unknown_layout=%d "
           "syncs=%d live_bytes=0 host_allocs=%d host_live_bytes=0\n",
           ex.s_launches, ex.allocs + ex.s_maps, ex.frees + ex.s_maps, ex.s_copies, ex.s_memsets,
           ex.s_unknown, ex.s_syncs, ex.s_host);
    printf("EXPECT trace kernel=%d alloc=%d free=%d copy=%d memset=%d sync=%d\n", ex.t_kernels,
           ex.allocs + ex.s_maps + ex.s_host, ex.frees + ex.s_maps + ex.s_host, ex.s_copies,
           ex.s_memsets, ex.s_syncs);
    return 0;
}
