/*
 * vmm_sync_probe.c - do the driver's VMM calls wait for copies in flight?
 *
 * Starts one long copy (2 GiB, D2H or H2D, on a non-blocking stream) and times cuMemCreate,
 * cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease of an unrelated 64 MiB handle while it
 * runs. A call that takes about as long as the copy waits for it, which would serialize a
 * migration pipeline that remaps memory between copies. Prints one JSON line per direction.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)
#define SYM(name) CUresult(*name)
static SYM(p_init)(unsigned);
static SYM(p_devget)(CUdevice *, int);
static SYM(p_retain)(CUcontext *, CUdevice);
static SYM(p_setcur)(CUcontext);
static SYM(p_hostalloc)(void **, size_t, unsigned);
static SYM(p_alloc)(CUdeviceptr *, size_t);
static SYM(p_stream)(CUstream *, unsigned);
static SYM(p_sync)(CUstream);
static SYM(p_d2h)(void *, CUdeviceptr, size_t, CUstream);
static SYM(p_h2d)(CUdeviceptr, const void *, size_t, CUstream);
static SYM(p_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
static SYM(p_release)(CUmemGenericAllocationHandle);
static SYM(p_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static SYM(p_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static SYM(p_unmap)(CUdeviceptr, size_t);
static SYM(p_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define LOAD(v, n)                                                                                 \
    do {                                                                                           \
        *(void **)&v = dlsym(h, n);                                                                \
        if (!v) {                                                                                  \
            fprintf(stderr, "missing %s\n", n);                                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    LOAD(p_init, "cuInit");
    LOAD(p_devget, "cuDeviceGet");
    LOAD(p_retain, "cuDevicePrimaryCtxRetain");
    LOAD(p_setcur, "cuCtxSetCurrent");
    LOAD(p_hostalloc, "cuMemHostAlloc");
    LOAD(p_alloc, "cuMemAlloc_v2");
    LOAD(p_stream, "cuStreamCreate");
    LOAD(p_sync, "cuStreamSynchronize");
    LOAD(p_d2h, "cuMemcpyDtoHAsync_v2");
    LOAD(p_h2d, "cuMemcpyHtoDAsync_v2");
    LOAD(p_create, "cuMemCreate");
    LOAD(p_release, "cuMemRelease");
    LOAD(p_reserve, "cuMemAddressReserve");
    LOAD(p_map, "cuMemMap");
    LOAD(p_unmap, "cuMemUnmap");
    LOAD(p_access, "cuMemSetAccess");
    CUdevice dev;
    CUcontext ctx;
    if (p_init(0) || p_devget(&dev, 0) || p_retain(&ctx, dev) || p_setcur(ctx))
        return 1;
    void *host;
    CUdeviceptr buf, va;
    CUstream s;
    if (p_hostalloc(&host, 2 * GIB, 0) || p_alloc(&buf, 2 * GIB) || p_stream(&s, 1) ||
        p_reserve(&va, 64 * MIB, 0, 0, 0))
        return 1;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int dir = 0; dir < 3; dir++) {
        double t0 = now();
        if (dir == 0)
            p_d2h(host, buf, 2 * GIB, s);
        else if (dir == 1)
            p_h2d(buf, host, 2 * GIB, s);
        CUmemGenericAllocationHandle mh;
        double a = now();
        p_create(&mh, 64 * MIB, &prop, 0);
        double b = now();
        p_map(va, 64 * MIB, 0, mh, 0);
        double c = now();
        p_access(va, 64 * MIB, &acc, 1);
        double d = now();
        p_unmap(va, 64 * MIB);
        double e = now();
        p_release(mh);
        double f = now();
        p_sync(s);
        double g = now();
        printf("{\"copy\": \"%s\", \"create_ms\": %.3f, \"map_ms\": %.3f, \"access_ms\": %.3f, "
               "\"unmap_ms\": %.3f, \"release_ms\": %.3f, \"copy_total_ms\": %.3f}\n",
               dir == 0   ? "d2h"
               : dir == 1 ? "h2d"
                          : "none",
               b - a, c - b, d - c, e - d, f - e, g - t0);
    }
    return 0;
}
