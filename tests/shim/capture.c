/*
 * capture.c - stream capture of kernels on memory the engine has evicted (torch.cuda.graph of
 * cuBLAS layers failed so under the engine on the H200: the gate's fault synchronized the
 * context during the capture, which invalidates it).
 *
 * Three 24 MiB buffers under a 64 MiB budget: the first is written, then pushed out by the
 * other two; a stream captures two kernels on the first (a fill, then an add of the second
 * buffer into it), then a memset of a fourth buffer that nothing touched before and a copy of
 * the first buffer's second half into it (the driver checks a captured copy's pointers at
 * capture time: on the H200, cu_graph's captured copy of memory the engine had not mapped
 * yet failed with "invalid argument"); the capture must end with a graph, the graph is
 * instantiated and launched twice, the first buffer read back must hold fill + 2 x second,
 * and the fourth the memset's value in its first half and the first buffer's second half in
 * its second. Prints "CAPTURE ok" or what failed; exit 0 only on ok. MS_FAKECUDA names the
 * fake driver (kernels are host functions registered with it). CAPTURE_HOLD_MS keeps the
 * capture open that long before its first command (under the daemon, beside a busy client, a
 * STOP or an EVICT then arrives while it is open: its drain must not synchronize).
 * CAPTURE_SIDE=1: while the capture is open, a second thread launches a kernel on its own
 * stream on the first buffer, evicted by then (alone, the engine's fault for it must not
 * synchronize the context: it runs on the host chunk instead).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpu/fakecuda/fakecuda.h"

#define SZ (24u << 20)
#define WORDS (SZ / 4)

static void k_fill(const struct ms_fake_launch *l)
{
    uint32_t *p = (uint32_t *)(uintptr_t)(*(const CUdeviceptr *)l->args[0]);
    uint32_t v = *(const uint32_t *)l->args[1];
    for (uint64_t i = 0; i < WORDS; i++)
        p[i] = v + (uint32_t)i;
}

static void k_add(const struct ms_fake_launch *l)
{
    uint32_t *d = (uint32_t *)(uintptr_t)(*(const CUdeviceptr *)l->args[0]);
    const uint32_t *s = (const uint32_t *)(uintptr_t)(*(const CUdeviceptr *)l->args[1]);
    for (uint64_t i = 0; i < WORDS; i++)
        d[i] += s[i];
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            printf("CAPTURE failed: %s = %d (line %d)\n", #x, (int)r_, __LINE__);                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define SYM(p, name)                                                                               \
    do {                                                                                           \
        *(void **)&p = dlsym(h, name);                                                             \
        if (!p) {                                                                                  \
            printf("CAPTURE failed: missing %s\n", name);                                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* The side thread's launch (CAPTURE_SIDE): fill the first buffer on a stream of its own. */
struct side {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*screate)(CUstream *, unsigned);
    CUresult (*setcur)(CUcontext);
    CUcontext ctx;
    CUfunction f;
    void **params;
    CUresult rc;
};

static void *side_main(void *arg)
{
    struct side *sd = arg;
    CUstream s2;
    sd->rc = sd->setcur(sd->ctx);
    if (sd->rc == CUDA_SUCCESS)
        sd->rc = sd->screate(&s2, CU_STREAM_NON_BLOCKING);
    if (sd->rc == CUDA_SUCCESS)
        sd->rc = sd->launch(sd->f, 1, 1, 1, 1, 1, 1, 0, s2, sd->params, NULL);
    return NULL;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *fpath = getenv("MS_FAKECUDA");
    void *fh = fpath ? dlopen(fpath, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h || !fh) {
        printf("CAPTURE failed: no libcuda.so.1 or MS_FAKECUDA\n");
        return 1;
    }
    CUresult (*init)(unsigned), (*devget)(CUdevice *, int), (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext), (*alloc)(CUdeviceptr *, size_t), (*sync)(void);
    CUresult (*screate)(CUstream *, unsigned), (*begin)(CUstream, CUstreamCaptureMode);
    CUresult (*end)(CUstream, CUgraph *), (*inst)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*glaunch)(CUgraphExec, CUstream), (*ssync)(CUstream);
    CUresult (*d2h)(void *, CUdeviceptr, size_t);
    CUresult (*memset32)(CUdeviceptr, unsigned, size_t, CUstream);
    CUresult (*d2d)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*reg)(const char *, ms_fake_kernel_fn, const size_t *, size_t, void *, CUfunction *);
    SYM(init, "cuInit");
    SYM(devget, "cuDeviceGet");
    SYM(retain, "cuDevicePrimaryCtxRetain");
    SYM(setcur, "cuCtxSetCurrent");
    SYM(alloc, "cuMemAlloc_v2");
    SYM(sync, "cuCtxSynchronize");
    SYM(screate, "cuStreamCreate");
    SYM(begin, "cuStreamBeginCapture_v2");
    SYM(end, "cuStreamEndCapture");
    SYM(inst, "cuGraphInstantiateWithFlags");
    SYM(glaunch, "cuGraphLaunch");
    SYM(ssync, "cuStreamSynchronize");
    SYM(d2h, "cuMemcpyDtoH_v2");
    SYM(memset32, "cuMemsetD32Async");
    SYM(d2d, "cuMemcpyDtoDAsync_v2");
    SYM(launch, "cuLaunchKernel");
    *(void **)&reg = dlsym(fh, "ms_fake_register_kernel");
    if (!reg) {
        printf("CAPTURE failed: the fake lacks ms_fake_register_kernel\n");
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    CK(init(0));
    CK(devget(&dev, 0));
    CK(retain(&ctx, dev));
    CK(setcur(ctx));
    CUfunction f_fill, f_add;
    const size_t fill_p[] = {8, 4}, add_p[] = {8, 8};
    CK(reg("fill", k_fill, fill_p, 2, NULL, &f_fill));
    CK(reg("add", k_add, add_p, 2, NULL, &f_add));
    CUdeviceptr a, b, c, d;
    CK(alloc(&a, SZ));
    CK(alloc(&b, SZ));
    CK(alloc(&c, SZ));
    CK(alloc(&d, SZ)); /* not touched before the capture */
    uint32_t va = 1000, vb = 7, vc = 3;
    void *pa[] = {&a, &va}, *pb[] = {&b, &vb}, *pc[] = {&c, &vc};
    CK(launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, pa, NULL));
    CK(launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, pb, NULL));
    CK(launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, pc, NULL)); /* a is evicted by now */
    CK(sync());
    CUstream s;
    CK(screate(&s, CU_STREAM_NON_BLOCKING));
    CK(begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    const char *hold = getenv("CAPTURE_HOLD_MS");
    if (hold) {
        long ms = strtol(hold, NULL, 10);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    const char *side = getenv("CAPTURE_SIDE");
    if (side && *side == '1') {
        struct side sd = {launch, screate, setcur, ctx, f_fill, pa, CUDA_SUCCESS};
        pthread_t th;
        if (pthread_create(&th, NULL, side_main, &sd) != 0) {
            printf("CAPTURE failed: pthread_create\n");
            return 1;
        }
        pthread_join(th, NULL);
        CK(sd.rc);
    }
    void *add[] = {&a, &b};
    CK(launch(f_fill, 1, 1, 1, 1, 1, 1, 0, s, pa, NULL));
    CK(launch(f_add, 1, 1, 1, 1, 1, 1, 0, s, add, NULL));
    CK(memset32(d, 0xdecaf, WORDS, s));
    CK(d2d(d + SZ / 2, a + SZ / 2, SZ / 2, s));
    CUgraph g;
    CK(end(s, &g));
    CUgraphExec e;
    CK(inst(&e, g, 0));
    CK(launch(f_fill, 1, 1, 1, 1, 1, 1, 0, NULL, pc, NULL)); /* push a and b out again */
    CK(glaunch(e, s));
    CK(glaunch(e, s));
    CK(ssync(s));
    uint32_t *host = malloc(SZ);
    if (!host)
        return 1;
    CK(d2h(host, a, SZ));
    for (uint64_t i = 0; i < WORDS; i++)
        if (host[i] != (va + (uint32_t)i) + (vb + (uint32_t)i)) {
            printf("CAPTURE failed: word %llu is %u\n", (unsigned long long)i, host[i]);
            return 1;
        }
    CK(d2h(host, d, SZ));
    for (uint64_t i = 0; i < WORDS; i++) {
        uint32_t want = i < WORDS / 2 ? 0xdecafu : (va + (uint32_t)i) + (vb + (uint32_t)i);
        if (host[i] != want) {
            printf("CAPTURE failed: word %llu of the fourth buffer is %u, not %u\n",
                   (unsigned long long)i, host[i], want);
            return 1;
        }
    }
    free(host);
    printf("CAPTURE ok\n");
    return 0;
}
