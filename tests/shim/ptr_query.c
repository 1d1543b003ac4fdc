/*
 * ptr_query.c - what a library asks about a device pointer before it launches anything (cuFFT's
 * plan creation, Triton's "cannot be accessed from Triton", cuBLAS's workspace checks): the
 * answers must be those for a cuMemAlloc pointer, whether or not the memory engine has mapped
 * (or evicted) the allocation.
 *
 * Checks: MEMORY_TYPE device, DEVICE_POINTER, RANGE_START_ADDR / RANGE_SIZE, CONTEXT (the
 * current one), DEVICE_ORDINAL, IS_MANAGED 0, distinct BUFFER_IDs, cuPointerGetAttributes and
 * cuMemGetAddressRange_v2 agreeing, right after allocation and again after the allocation was
 * written and pushed out by others (under MSCHED_BUDGET below the footprint); SYNC_MEMOPS set
 * with cuPointerSetAttribute and read back; a host pointer is not device memory; small
 * allocations (packed into shared slabs under the engine) answer each as its own allocation
 * (SYNC_MEMOPS included), a freed one whose neighbours live answers as no allocation, and a free
 * inside one, or a second free, is refused. Prints "PTR_QUERY
 * checks=N failed=F" and exits 0 only when F is 0.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUF 4
#define SZ (48ull << 20)
#define NSMALL 4

static CUresult (*p_init)(unsigned);
static CUresult (*p_devget)(CUdevice *, int);
static CUresult (*p_retain)(CUcontext *, CUdevice);
static CUresult (*p_setcur)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_memset)(CUdeviceptr, unsigned char, size_t);
static CUresult (*p_sync)(void);
static CUresult (*p_attr)(void *, CUpointer_attribute, CUdeviceptr);
static CUresult (*p_attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
static CUresult (*p_range)(CUdeviceptr *, size_t *, CUdeviceptr);
static CUresult (*p_set)(const void *, CUpointer_attribute, CUdeviceptr);

static int checks, failed;
static CUcontext ctx;

static void check(int ok, const char *what, int buf)
{
    checks++;
    if (!ok) {
        failed++;
        printf("FAIL %s (buffer %d)\n", what, buf);
    }
}

static void query(int b, CUdeviceptr d, size_t sz, unsigned long long *id)
{
    unsigned int mt = 0, managed = 7;
    CUdeviceptr dp = 0, start = 0;
    size_t size = 0;
    CUcontext c = NULL;
    int ord = -1;
    CUdeviceptr p = d + (sz > 12345 ? 12345 : sz - 1);
    check(p_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS &&
              mt == CU_MEMORYTYPE_DEVICE,
          "MEMORY_TYPE is device", b);
    check(p_attr(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p) == CUDA_SUCCESS && dp == p,
          "DEVICE_POINTER", b);
    check(p_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) == CUDA_SUCCESS && start == d,
          "RANGE_START_ADDR", b);
    check(p_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS && size == sz,
          "RANGE_SIZE", b);
    check(p_attr(&c, CU_POINTER_ATTRIBUTE_CONTEXT, p) == CUDA_SUCCESS && c == ctx, "CONTEXT", b);
    check(p_attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS && ord == 0,
          "DEVICE_ORDINAL", b);
    check(p_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS && managed == 0,
          "IS_MANAGED", b);
    check(p_attr(id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) == CUDA_SUCCESS && *id != 0, "BUFFER_ID",
          b);
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    unsigned int mt2 = 0, managed2 = 7;
    CUdeviceptr start2 = 0;
    void *vals[] = {&mt2, &managed2, &start2};
    check(p_attrs(3, as, vals, p) == CUDA_SUCCESS && mt2 == CU_MEMORYTYPE_DEVICE && managed2 == 0 &&
              start2 == d,
          "cuPointerGetAttributes", b);
    CUdeviceptr base = 0;
    size_t rsize = 0;
    check(p_range(&base, &rsize, p) == CUDA_SUCCESS && base == d && rsize == sz,
          "cuMemGetAddressRange", b);
}

#define LOAD(p, name)                                                                              \
    do {                                                                                           \
        *(void **)&p = dlsym(h, name);                                                             \
        if (!p) {                                                                                  \
            printf("FAIL: missing %s\n", name);                                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL: no libcuda.so.1\n");
        return 1;
    }
    LOAD(p_init, "cuInit");
    LOAD(p_devget, "cuDeviceGet");
    LOAD(p_retain, "cuDevicePrimaryCtxRetain");
    LOAD(p_setcur, "cuCtxSetCurrent");
    LOAD(p_alloc, "cuMemAlloc_v2");
    LOAD(p_free, "cuMemFree_v2");
    LOAD(p_memset, "cuMemsetD8_v2");
    LOAD(p_sync, "cuCtxSynchronize");
    LOAD(p_attr, "cuPointerGetAttribute");
    LOAD(p_attrs, "cuPointerGetAttributes");
    LOAD(p_range, "cuMemGetAddressRange_v2");
    LOAD(p_set, "cuPointerSetAttribute");
    CUdevice dev;
    if (p_init(0) || p_devget(&dev, 0) || p_retain(&ctx, dev) || p_setcur(ctx)) {
        printf("FAIL: no context\n");
        return 1;
    }
    CUdeviceptr d[NBUF];
    unsigned long long id[NBUF];
    for (int b = 0; b < NBUF; b++) {
        if (p_alloc(&d[b], SZ) != CUDA_SUCCESS) {
            printf("FAIL: allocation\n");
            return 1;
        }
        query(b, d[b], SZ, &id[b]); /* fresh: nothing written, nothing mapped by the engine yet */
    }
    for (int b = 0; b < NBUF; b++)
        for (int k = 0; k < b; k++)
            check(id[b] != id[k], "distinct BUFFER_IDs", b);
    for (int b = 0; b < NBUF; b++)
        check(p_memset(d[b], (unsigned char)b, SZ) == CUDA_SUCCESS, "memset", b);
    p_sync();
    for (int b = 0; b < NBUF; b++)
        query(b, d[b], SZ, &id[b]); /* written; under a small budget most were evicted since */
    /* SYNC_MEMOPS, the one settable attribute (NCCL, UCX and libfabric set it on buffers they
     * register): set and read back on cuMemAlloc memory; the driver refuses it on VMM memory. */
    for (int b = 0; b < NBUF; b++) {
        unsigned int one = 1, got = 0;
        check(p_set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d[b] + 7) == CUDA_SUCCESS,
              "cuPointerSetAttribute(SYNC_MEMOPS)", b);
        check(p_attr(&got, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d[b]) == CUDA_SUCCESS && got == 1,
              "SYNC_MEMOPS reads back 1", b);
    }
    static char host[4096];
    unsigned int mt = 0;
    check(p_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host) !=
              CUDA_SUCCESS,
          "a host pointer is not device memory", -1);
    /* Small allocations (the engine packs them into shared slabs): each answers as its own
     * allocation, with its own start, size and buffer id; a free must name its start. */
    const size_t ssz[NSMALL] = {100, 4096, 300 << 10, 1};
    CUdeviceptr sd[NSMALL];
    unsigned long long sid[NSMALL];
    for (int k = 0; k < NSMALL; k++) {
        if (p_alloc(&sd[k], ssz[k]) != CUDA_SUCCESS) {
            printf("FAIL: small allocation\n");
            return 1;
        }
        check(sd[k] % 256 == 0, "a small allocation is aligned", NBUF + k);
        check(p_memset(sd[k], 0x5a, ssz[k]) == CUDA_SUCCESS, "memset", NBUF + k);
        query(NBUF + k, sd[k], ssz[k], &sid[k]);
        for (int j = 0; j < NBUF; j++)
            check(sid[k] != id[j], "distinct BUFFER_IDs", NBUF + k);
        for (int j = 0; j < k; j++)
            check(sid[k] != sid[j] && (sd[k] >= sd[j] + ssz[j] || sd[j] >= sd[k] + ssz[k]),
                  "distinct BUFFER_IDs and ranges", NBUF + k);
    }
    p_sync();
    /* SYNC_MEMOPS is each allocation's own, small ones sharing a slab included */
    unsigned int one = 1, got = 7;
    check(p_set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, sd[0]) == CUDA_SUCCESS &&
              p_attr(&got, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, sd[0]) == CUDA_SUCCESS && got == 1,
          "SYNC_MEMOPS set on a small allocation", NBUF);
    check(p_attr(&got, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, sd[1]) == CUDA_SUCCESS && got == 0,
          "SYNC_MEMOPS of its neighbour unchanged", NBUF + 1);
    check(p_free(sd[1] + 512) != CUDA_SUCCESS, "a free inside an allocation is refused", NBUF + 1);
    check(p_free(sd[1]) == CUDA_SUCCESS, "free", NBUF + 1);
    /* freed while its neighbours live: in no allocation any more */
    CUdeviceptr fb = 0;
    size_t fsz = 0;
    unsigned int fmt = 0;
    check(p_range(&fb, &fsz, sd[1]) != CUDA_SUCCESS,
          "cuMemGetAddressRange of a freed pointer fails", NBUF + 1);
    check(p_attr(&fmt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, sd[1]) != CUDA_SUCCESS,
          "MEMORY_TYPE of a freed pointer fails", NBUF + 1);
    for (int k = 0; k < NSMALL; k++)
        if (k != 1)
            check(p_free(sd[k]) == CUDA_SUCCESS, "free", NBUF + k);
    check(p_free(sd[2]) != CUDA_SUCCESS, "a second free is refused", NBUF + 2);
    for (int b = 0; b < NBUF; b++)
        p_free(d[b]);
    printf("PTR_QUERY checks=%d failed=%d\n", checks, failed);
    return failed ? 1 : 0;
}
