/*
 * exit_signal.c - a program that calls exit() from a signal handler while paging heavily: the
 * handler may interrupt the thread inside the shim, holding the engine's lock, and libmsched's
 * exit paths (its exit handler, its destructor) must not wait for a lock that same thread holds.
 *
 * Usage: exit_signal SEED. Eight 16 MiB buffers under MSCHED_BUDGET (32 MiB in the test): host
 * copies into them in a loop, so most copies fault; SIGALRM after 1-40 ms (from SEED) calls
 * exit(0). A hang is the failure (the test runs it under a timeout, many times).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define NBUF 8
#define SZ (16u << 20)

static void on_alarm(int sig)
{
    (void)sig;
    exit(0); /* not async-signal-safe: exactly what the programs this test stands for do */
}

int main(int argc, char **argv)
{
    unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 2;
    CUresult (*init)(unsigned), (*devget)(CUdevice *, int), (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext), (*alloc)(CUdeviceptr *, size_t);
    CUresult (*h2d)(CUdeviceptr, const void *, size_t);
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&devget = dlsym(h, "cuDeviceGet");
    *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&setcur = dlsym(h, "cuCtxSetCurrent");
    *(void **)&alloc = dlsym(h, "cuMemAlloc_v2");
    *(void **)&h2d = dlsym(h, "cuMemcpyHtoD_v2");
    CUdevice dev;
    CUcontext ctx;
    if (!init || !devget || !retain || !setcur || !alloc || !h2d || init(0) || devget(&dev, 0) ||
        retain(&ctx, dev) || setcur(ctx))
        return 2;
    CUdeviceptr d[NBUF];
    for (int i = 0; i < NBUF; i++)
        if (alloc(&d[i], SZ))
            return 2;
    char *host = malloc(SZ);
    if (!host)
        return 2;
    memset(host, 1, SZ);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval t = {{0, 0}, {0, (long)(1000 + (seed * 7919u) % 39000u)}};
    setitimer(ITIMER_REAL, &t, NULL);
    for (unsigned k = 0;; k++)
        if (h2d(d[(k * 5 + seed) % NBUF], host, SZ) != CUDA_SUCCESS)
            return 3;
}
