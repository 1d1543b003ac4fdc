/*
 * thread_race.c - many threads racing kernels, copies, allocations and frees through the
 * memory engine under a budget far below their footprint (issue: a command admitted by the
 * gate must not lose its memory to another thread's fault before the driver has it).
 *
 * Usage: thread_race THREADS ROUNDS   (MSCHED_BUDGET sets the budget; MS_FAKECUDA names the
 * fake driver, whose kernels are host functions and whose non-resident chunks are PROT_NONE:
 * a kernel on evicted memory dies of SIGSEGV, the oracle)
 * Each thread owns two 2 MiB buffers; each round it fills one with a kernel, copies it to the
 * other on the device, reads the second back and checks every word; every 8th round it frees
 * and reallocates its first buffer. Prints "THREAD_RACE threads=T rounds=R mismatches=M
 * errors=E" and exits 0 only when both are zero.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/fakecuda/fakecuda.h"

#define SZ (2u << 20)
#define WORDS (SZ / 4)

static CUresult (*p_init)(unsigned);
static CUresult (*p_devget)(CUdevice *, int);
static CUresult (*p_retain)(CUcontext *, CUdevice);
static CUresult (*p_setcur)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_d2h)(void *, CUdeviceptr, size_t);
static CUresult (*p_d2d)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*p_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **, void **);
static CUresult (*p_sync)(void);

static CUcontext ctx;
static CUfunction f_fill;
static int rounds;
static long mismatches, errors; /* atomic */

static uint32_t pattern(uint64_t i, uint32_t seed)
{
    return (uint32_t)(i * 2654435761u) ^ seed;
}

static void k_fill(const struct ms_fake_launch *l)
{
    uint32_t *p = (uint32_t *)(uintptr_t)(*(const CUdeviceptr *)l->args[0]);
    uint64_t n = *(const uint64_t *)l->args[1];
    uint32_t seed = *(const uint32_t *)l->args[2];
    for (uint64_t i = 0; i < n; i++)
        p[i] = pattern(i, seed);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint32_t *host = malloc(SZ);
    CUdeviceptr a = 0, b = 0;
    if (!host || p_setcur(ctx) || p_alloc(&a, SZ) || p_alloc(&b, SZ)) {
        __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        free(host);
        return NULL;
    }
    for (int r = 0; r < rounds; r++) {
        uint64_t n = WORDS;
        uint32_t seed = id * 100003u + (uint32_t)r;
        void *args[] = {&a, &n, &seed};
        if (p_launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) || p_d2d(b, a, SZ) ||
            p_d2h(host, b, SZ)) {
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        long bad = 0;
        for (uint64_t i = 0; i < WORDS; i++)
            bad += host[i] != pattern(i, seed);
        if (bad)
            __atomic_add_fetch(&mismatches, bad, __ATOMIC_RELAXED);
        if (r % 8 == 7) {
            if (p_free(a) || p_alloc(&a, SZ))
                __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        }
    }
    p_sync();
    p_free(a);
    p_free(b);
    free(host);
    return NULL;
}

#define LOAD(p, name)                                                                              \
    do {                                                                                           \
        *(void **)&p = dlsym(h, name);                                                             \
        if (!p) {                                                                                  \
            printf("FAIL: missing %s\n", name);                                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 32;
    rounds = argc > 2 ? atoi(argv[2]) : 50;
    if (nthreads < 1 || nthreads > 256 || rounds < 1)
        return 2;
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
    LOAD(p_setcur, "cuCtxSetCurrent");
    LOAD(p_alloc, "cuMemAlloc_v2");
    LOAD(p_free, "cuMemFree_v2");
    LOAD(p_d2h, "cuMemcpyDtoH_v2");
    LOAD(p_d2d, "cuMemcpyDtoD_v2");
    LOAD(p_launch, "cuLaunchKernel");
    LOAD(p_sync, "cuCtxSynchronize");
    CUresult (*reg)(const char *, ms_fake_kernel_fn, const size_t *, size_t, void *, CUfunction *);
    *(void **)&reg = dlsym(fh, "ms_fake_register_kernel");
    CUdevice dev;
    const size_t fill_p[] = {8, 8, 4};
    if (!reg || p_init(0) || p_devget(&dev, 0) || p_retain(&ctx, dev) || p_setcur(ctx) ||
        reg("fill", k_fill, fill_p, 3, NULL, &f_fill)) {
        printf("FAIL: setup\n");
        return 1;
    }
    pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
    if (!t)
        return 1;
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            return 1;
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    free(t);
    printf("THREAD_RACE threads=%d rounds=%d mismatches=%ld errors=%ld\n", nthreads, rounds,
           mismatches, errors);
    return mismatches == 0 && errors == 0 ? 0 : 1;
}
