/*
 * profile_prog.c - a program for the profiler's tests (tests/shim/run_shim_tests.sh, under
 * `msched profile`): fake kernels that declare known touches (ms_fake_touch) over a few
 * buffers, so the profile's kernel and touch records can be checked exactly.
 *
 * Usage: profile_prog EXIT_STATUS. Runs on libcuda.so.1 from the library path (libmsched over
 * the fake driver, whose path is MS_FAKECUDA); returns EXIT_STATUS when every call succeeded,
 * 2 or 3 otherwise. Prints one line per buffer, "name 0xADDR bytes", so the test knows where
 * they are. The launches, in order:
 *   scale(A, n)         reads and writes A[0 .. n) (floats), n = 1, 16384, 16385, 100000
 *   copy(S, D, n)       reads S[0 .. n), writes D[0 .. n), n = 20000
 *   submat(M, ld, r0, c0, rows, cols)  reads rows 2..5, columns 8..23 of a 65536-float-wide
 *                       matrix: four 64-byte pieces 256 KiB apart
 *   chase(T)            reads T[0] (a pointer into C, which no argument names) and 4 bytes
 *                       at C + 128 KiB
 *   two(E, E + 1 MiB)   reads the first 4 bytes of its first argument, writes 4 at its second
 *   nop()               touches nothing
 *   cluster_k(A)        reads A, launched "with clusters" (the stand-in says so): opaque
 *   tma_k(A)            a bulk copy from A: opaque
 *   tick(B, i) x 40     writes the 64 KiB granule i of B (i = 0..39), so which ones were
 *                       profiled shows
 *   pstruct({n, S, D})  one 24-byte struct parameter holding two pointers (as PyTorch's
 *                       TensorIterator kernels pass theirs): reads S[0 .. n), writes
 *                       D[0 .. n), n = 3000; its touches belong to the words at 8 and 16
 * and C is freed at the end.
 */
#include "gpu/fakecuda/fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ms_fake_touch_fn touch;

#define ARG(l, i, t) (*(t *)(l)->args[i])

static void k_scale(const struct ms_fake_launch *l)
{
    float *a = ARG(l, 0, float *);
    int n = ARG(l, 1, int);
    touch(a, (size_t)n * 4, MS_FAKE_TOUCH_READ | MS_FAKE_TOUCH_WRITE);
}

static void k_copy(const struct ms_fake_launch *l)
{
    int n = ARG(l, 2, int);
    touch(ARG(l, 0, float *), (size_t)n * 4, MS_FAKE_TOUCH_READ);
    touch(ARG(l, 1, float *), (size_t)n * 4, MS_FAKE_TOUCH_WRITE);
}

static void k_submat(const struct ms_fake_launch *l)
{
    float *m = ARG(l, 0, float *);
    int ld = ARG(l, 1, int), r0 = ARG(l, 2, int), c0 = ARG(l, 3, int);
    int rows = ARG(l, 4, int), cols = ARG(l, 5, int);
    for (int r = r0; r < r0 + rows; r++)
        touch(m + (size_t)r * (size_t)ld + c0, (size_t)cols * 4, MS_FAKE_TOUCH_READ);
}

static void k_chase(const struct ms_fake_launch *l)
{
    char **t = ARG(l, 0, char **);
    touch(t, 8, MS_FAKE_TOUCH_READ);
    touch(t[0], 4, MS_FAKE_TOUCH_READ);
}

static void k_two(const struct ms_fake_launch *l)
{
    touch(ARG(l, 0, float *), 4, MS_FAKE_TOUCH_READ);
    touch(ARG(l, 1, float *), 4, MS_FAKE_TOUCH_WRITE);
}

static void k_nop(const struct ms_fake_launch *l)
{
    (void)l;
}

static void k_cluster(const struct ms_fake_launch *l)
{
    touch(ARG(l, 0, float *), 4096, MS_FAKE_TOUCH_READ);
}

static void k_tma(const struct ms_fake_launch *l)
{
    touch(ARG(l, 0, float *), 4096, MS_FAKE_TOUCH_BULK);
    touch(ARG(l, 0, float *) + 65536, 4096, MS_FAKE_TOUCH_READ);
}

static void k_tick(const struct ms_fake_launch *l)
{
    float *b = ARG(l, 0, float *);
    int i = ARG(l, 1, int);
    touch(b + (size_t)i * 16384, 4, MS_FAKE_TOUCH_WRITE);
}

struct pargs {
    int n, pad;
    float *src, *dst;
};

static void k_pstruct(const struct ms_fake_launch *l)
{
    const struct pargs *a = (const struct pargs *)l->args[0];
    touch(a->src, (size_t)a->n * 4, MS_FAKE_TOUCH_READ);
    touch(a->dst, (size_t)a->n * 4, MS_FAKE_TOUCH_WRITE);
}

static CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void **, void **);

static int go(CUfunction f, void **args)
{
    return launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS ? 0 : 3;
}

int main(int argc, char **argv)
{
    int status = argc > 1 ? atoi(argv[1]) : 0;
    const char *fake = getenv("MS_FAKECUDA");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *fk = fake ? dlopen(fake, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h || !fk)
        return 2;
    ms_fake_register_kernel_fn reg;
    CUresult (*init)(unsigned), (*devget)(CUdevice *, int), (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext), (*alloc)(CUdeviceptr *, size_t), (*mfree)(CUdeviceptr);
    CUresult (*sync)(void);
    *(void **)&reg = dlsym(fk, "ms_fake_register_kernel");
    *(void **)&touch = dlsym(fk, "ms_fake_touch");
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&devget = dlsym(h, "cuDeviceGet");
    *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&setcur = dlsym(h, "cuCtxSetCurrent");
    *(void **)&alloc = dlsym(h, "cuMemAlloc_v2");
    *(void **)&mfree = dlsym(h, "cuMemFree_v2");
    *(void **)&sync = dlsym(h, "cuCtxSynchronize");
    *(void **)&launch = dlsym(h, "cuLaunchKernel");
    CUdevice dev;
    CUcontext ctx;
    if (!reg || !touch || !init || !devget || !retain || !setcur || !alloc || !mfree || !sync ||
        !launch || init(0) || devget(&dev, 0) || retain(&ctx, dev) || setcur(ctx))
        return 2;

    static const size_t p1[] = {8}, p2[] = {8, 4}, p3[] = {8, 8, 4}, p6[] = {8, 4, 4, 4, 4, 4},
                        p22[] = {8, 8}, ps[] = {sizeof(struct pargs)};
    CUfunction f_scale, f_copy, f_submat, f_chase, f_two, f_nop, f_cluster, f_tma, f_tick,
        f_pstruct;
    if (reg("scale", k_scale, p2, 2, NULL, &f_scale) || reg("copy", k_copy, p3, 3, NULL, &f_copy) ||
        reg("submat", k_submat, p6, 6, NULL, &f_submat) ||
        reg("chase", k_chase, p1, 1, NULL, &f_chase) || reg("two", k_two, p22, 2, NULL, &f_two) ||
        reg("nop", k_nop, NULL, 0, NULL, &f_nop) ||
        reg("cluster_k", k_cluster, p1, 1, NULL, &f_cluster) ||
        reg("tma_k", k_tma, p1, 1, NULL, &f_tma) || reg("tick", k_tick, p2, 2, NULL, &f_tick) ||
        reg("pstruct", k_pstruct, ps, 1, NULL, &f_pstruct))
        return 2;

    struct {
        const char *name;
        size_t bytes;
        CUdeviceptr p;
    } b[] = {{"A", 4u << 20, 0}, {"S", 1u << 20, 0},   {"D", 1u << 20, 0}, {"M", 2u << 20, 0},
             {"T", 4096, 0},     {"C", 256u << 10, 0}, {"E", 4u << 20, 0}, {"B", 4u << 20, 0}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        if (alloc(&b[i].p, b[i].bytes))
            return 2;
        printf("%s 0x%llx %zu\n", b[i].name, (unsigned long long)b[i].p, b[i].bytes);
    }
    float *A = (float *)(uintptr_t)b[0].p, *S = (float *)(uintptr_t)b[1].p;
    float *D = (float *)(uintptr_t)b[2].p, *M = (float *)(uintptr_t)b[3].p;
    char **T = (char **)(uintptr_t)b[4].p;
    char *C = (char *)(uintptr_t)b[5].p;
    float *E = (float *)(uintptr_t)b[6].p, *B = (float *)(uintptr_t)b[7].p;
    T[0] = C + (128u << 10); /* device memory is host memory in the fake */

    int rc = 0;
    static const int ns[] = {1, 16384, 16385, 100000};
    for (int i = 0; i < 4 && !rc; i++) {
        int n = ns[i];
        void *a[] = {&A, &n};
        rc = go(f_scale, a);
    }
    int n = 20000, ld = 65536, r0 = 2, c0 = 8, rows = 4, cols = 16;
    void *ac[] = {&S, &D, &n};
    void *am[] = {&M, &ld, &r0, &c0, &rows, &cols};
    void *at[] = {&T};
    float *E2 = E + (1u << 18);
    void *ae[] = {&E, &E2};
    void *aa[] = {&A};
    rc = rc ? rc : go(f_copy, ac);
    rc = rc ? rc : go(f_submat, am);
    rc = rc ? rc : go(f_chase, at);
    rc = rc ? rc : go(f_two, ae);
    rc = rc ? rc : go(f_nop, NULL);
    rc = rc ? rc : go(f_cluster, aa);
    rc = rc ? rc : go(f_tma, aa);
    for (int i = 0; i < 40 && !rc; i++) {
        void *a[] = {&B, &i};
        rc = go(f_tick, a);
    }
    struct pargs pa = {3000, 0, S, D};
    void *ap[] = {&pa};
    rc = rc ? rc : go(f_pstruct, ap);
    if (rc || sync() || mfree(b[5].p))
        return 3;
    fflush(stdout);
    return status;
}
