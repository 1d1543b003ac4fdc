/*
 * alloc_fail.c - libmsched under allocation failures: every heap allocation of the shim goes
 * through the project's wrappers (core/ms.h), so the Nth can be made to fail
 * (ms_shim_test_alloc_fail_after, exported by libmsched for tests).
 *
 * Six 4 MiB buffers under an 8 MiB budget (the engine faults on almost every copy); for
 * k = 1..ROUNDS the k-th allocation from now fails while one buffer is allocated or freed and
 * two are written and read back. Each call must return CUDA_SUCCESS or a CUDA error (never
 * crash or hang); a read that succeeds must return what the last successful write put there
 * (a host shadow). At the end, with no failure injected, every buffer is read back and
 * checked. Prints "ALLOC_FAIL rounds=N failed_calls=F mismatches=M" and exits 0 only with no
 * mismatch and at least one failed call (the injection must reach the shim).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUF 6
#define SZ (4u << 20)
#define WORDS (SZ / 4)
#define ROUNDS 400

static CUresult (*p_init)(unsigned);
static CUresult (*p_devget)(CUdevice *, int);
static CUresult (*p_retain)(CUcontext *, CUdevice);
static CUresult (*p_setcur)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_h2d)(CUdeviceptr, const void *, size_t);
static CUresult (*p_d2h)(void *, CUdeviceptr, size_t);
static void (*p_fail_after)(uint64_t);

static CUdeviceptr dev[NBUF];
static uint32_t *shadow[NBUF]; /* NULL: no successful write since allocation */
static uint32_t host[WORDS];
static long failed, mismatches;

static void fill(uint32_t v)
{
    for (uint32_t i = 0; i < WORDS; i++)
        host[i] = v * 2654435761u + i;
}

static void write_buf(int b, uint32_t v)
{
    if (!dev[b])
        return;
    fill(v);
    CUresult r = p_h2d(dev[b], host, SZ);
    if (r != CUDA_SUCCESS) {
        failed++;
        free(shadow[b]); /* the buffer's contents are unknown now */
        shadow[b] = NULL;
        return;
    }
    if (!shadow[b])
        shadow[b] = malloc(SZ);
    if (shadow[b])
        memcpy(shadow[b], host, SZ);
}

static void check_buf(int b)
{
    if (!dev[b] || !shadow[b])
        return;
    memset(host, 0, SZ);
    CUresult r = p_d2h(host, dev[b], SZ);
    if (r != CUDA_SUCCESS) {
        failed++;
        return;
    }
    if (memcmp(host, shadow[b], SZ) != 0) {
        mismatches++;
        fprintf(stderr, "buffer %d: mismatch\n", b);
    }
}

static void toggle(int b)
{
    CUresult r;
    if (dev[b]) {
        r = p_free(dev[b]);
        if (r == CUDA_SUCCESS) {
            dev[b] = 0;
            free(shadow[b]);
            shadow[b] = NULL;
        } else {
            failed++;
        }
    } else {
        r = p_alloc(&dev[b], SZ);
        if (r != CUDA_SUCCESS) {
            dev[b] = 0;
            failed++;
        }
    }
}

#define SYM(p, name)                                                                               \
    do {                                                                                           \
        *(void **)&p = dlsym(h, name);                                                             \
        if (!p) {                                                                                  \
            fprintf(stderr, "missing %s\n", name);                                                 \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    SYM(p_init, "cuInit");
    SYM(p_devget, "cuDeviceGet");
    SYM(p_retain, "cuDevicePrimaryCtxRetain");
    SYM(p_setcur, "cuCtxSetCurrent");
    SYM(p_alloc, "cuMemAlloc_v2");
    SYM(p_free, "cuMemFree_v2");
    SYM(p_h2d, "cuMemcpyHtoD_v2");
    SYM(p_d2h, "cuMemcpyDtoH_v2");
    SYM(p_fail_after, "ms_shim_test_alloc_fail_after");
    CUdevice d;
    CUcontext ctx;
    if (p_init(0) || p_devget(&d, 0) || p_retain(&ctx, d) || p_setcur(ctx)) {
        fprintf(stderr, "no context\n");
        return 2;
    }
    for (int b = 0; b < NBUF; b++) {
        if (p_alloc(&dev[b], SZ) != CUDA_SUCCESS) {
            fprintf(stderr, "setup allocation failed\n");
            return 2;
        }
        write_buf(b, (uint32_t)b);
    }
    for (int k = 1; k <= ROUNDS; k++) {
        int a = k % NBUF, b = (k * 7 + 3) % NBUF;
        p_fail_after((uint64_t)(k % 40) + 1);
        if (k % 5 == 0)
            toggle((k / 5) % NBUF);
        write_buf(a, (uint32_t)k);
        check_buf(b);
        check_buf(a);
        p_fail_after(0);
    }
    for (int b = 0; b < NBUF; b++)
        check_buf(b);
    printf("ALLOC_FAIL rounds=%d failed_calls=%ld mismatches=%ld\n", ROUNDS, failed, mismatches);
    return mismatches == 0 && failed > 0 ? 0 : 1;
}
