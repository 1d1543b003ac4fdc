/*
 * cuda_test.c - the shim tests' driver program: one workload, reached through the driver in
 * several ways, plus focused checks of entry-point resolution and of the fake's oracle.
 *
 * Usage: cuda_test_{linked,dl} MODE   (tests/shim/run_shim_tests.sh runs every combination)
 *   link, link-pt     workload through the linked symbols (legacy / per-thread names);
 *                     cuda_test_linked only
 *   dlsym, dlsym-pt   workload through dlopen("libcuda.so.1") + dlsym of exported names
 *   gpa, gpa-pt       workload through cuGetProcAddress_v2 (legacy / per-thread flag)
 *   gpa-check         which functions cuGetProcAddress_v2 returns, per version and flag
 *   oracle            memory that is not resident faults (SIGSEGV in a forked child)
 *   fork              a forked child exits normally without touching its parent's trace
 *   pin-lock          under the engine, a slow host-backing pin in one thread does not hold
 *                     up another thread's command (MSCHED_FAKE_PIN_MS)
 *   pin-gate          nor a migration's copies, which the driver makes wait for a pin call
 *   pin-pieces        an allocation's host chunks (one pin call each), data intact, released
 *   tramp-float, tramp-stack   the first driver call is to a forwarded function taking floats
 *                     (or a stack argument): the trampolines' slow path must keep them
 *   nodriver          cuInit reports CUDA_ERROR_NO_DEVICE (run under libmsched with no driver)
 * $MS_FAKECUDA names the fake driver by absolute path: the fake-only functions (kernel
 * registration, its own counters) are found there, since libmsched does not export them.
 * Prints "OK <mode>" and exits 0 on success.
 */
#include "tests/shim/workload.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        printf("FAIL: dlopen(libcuda.so.1): %s\n", dlerror());
    return h;
}

static int fake_api(struct ms_fake_api *fk)
{
    const char *path = getenv("MS_FAKECUDA");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        printf("FAIL: cannot open the fake driver (MS_FAKECUDA=%s): %s\n", path ? path : "unset",
               path ? dlerror() : "");
        return 1;
    }
    *(void **)&fk->register_kernel = dlsym(h, "ms_fake_register_kernel");
    *(void **)&fk->get_stats = dlsym(h, "ms_fake_get_stats");
    if (!fk->register_kernel || !fk->get_stats) {
        printf("FAIL: %s lacks the fake-only functions\n", path);
        return 1;
    }
    return 0;
}

static int load_api(const char *mode, struct ms_api *a)
{
    bool pt = strstr(mode, "-pt") != NULL;
    if (strncmp(mode, "link", 4) == 0) {
#ifdef MS_TEST_LINKED
        return pt ? ms_api_link_pt(a) : ms_api_link_legacy(a);
#else
        printf("FAIL: mode %s needs cuda_test_linked\n", mode);
        return 1;
#endif
    }
    void *h = driver();
    if (!h)
        return 1;
    if (strncmp(mode, "dlsym", 5) == 0)
        return ms_api_dlsym(a, h, pt);
    PFN_cuGetProcAddress_v12000 gpa;
    *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("FAIL: no cuGetProcAddress_v2\n");
        return 1;
    }
    return ms_api_procaddr(a, gpa, pt);
}

/* ------------------------------------------------------------------------------------------ */
/* gpa-check                                                                                    */

struct gpa_case {
    const char *base;
    int version;
    bool per_thread;
    const char *want; /* exported name whose address must come back; NULL: not found */
    CUdriverProcAddressQueryResult status;
};

static int gpa_check(void)
{
    /* Hooked symbols only: for them, every way of asking gives the same function (under
     * libmsched: the hook). Forwarded ones differ between dlsym (trampoline) and
     * cuGetProcAddress (the real function), by design. */
    static const struct gpa_case cases[] = {
        {"cuLaunchKernel", 13000, false, "cuLaunchKernel", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 13000, true, "cuLaunchKernel_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 4000, true, "cuLaunchKernel", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernelEx", 12000, true, "cuLaunchKernelEx_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemcpyHtoD", 13000, false, "cuMemcpyHtoD_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemcpyHtoD", 13000, true, "cuMemcpyHtoD_v2_ptds", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemsetD8Async", 12000, true, "cuMemsetD8Async_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemsetD8Async", 12000, false, "cuMemsetD8Async", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 13000, true, "cuMemAlloc_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocAsync", 13000, true, "cuMemAllocAsync_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 12000, false, "cuGetProcAddress_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 11030, false, "cuGetProcAddress", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxSynchronize", 12080, false, "cuCtxSynchronize", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxSynchronize", 13000, false, "cuCtxSynchronize_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocAsync", 11000, false, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuNoSuchFunction", 13000, false, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
    };
    void *h = driver();
    if (!h)
        return 1;
    PFN_cuGetProcAddress_v12000 gpa;
    *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
        return printf("FAIL: no cuGetProcAddress_v2\n"), 1;
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct gpa_case *c = &cases[i];
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CUresult rc = gpa(c->base, &fn, c->version,
                          c->per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                        : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                          &st);
        void *want = c->want ? dlsym(h, c->want) : NULL;
        bool ok = st == c->status && fn == want && (c->want ? rc == CUDA_SUCCESS && fn : true);
        if (!ok) {
            printf("FAIL: cuGetProcAddress_v2(%s, %d, %s) = %d, %p, status %d; want %s = %p, "
                   "status %d\n",
                   c->base, c->version, c->per_thread ? "per-thread" : "legacy", (int)rc, fn,
                   (int)st, c->want ? c->want : "nothing", want, (int)c->status);
            bad++;
        }
    }
    /* The function returned for cuGetProcAddress answers like the one we asked. */
    PFN_cuGetProcAddress_v12000 again;
    void *fn = NULL;
    if (gpa("cuGetProcAddress", (void **)&again, 12000, 0, NULL) != CUDA_SUCCESS ||
        again("cuMemAlloc", &fn, 13000, 0, NULL) != CUDA_SUCCESS || fn != dlsym(h, "cuMemAlloc_v2"))
        printf("FAIL: cuGetProcAddress obtained through itself answers differently\n"), bad++;
    /* A forwarded (unhooked) symbol comes back as the driver's own function, and works. */
    void *fake = dlopen(getenv("MS_FAKECUDA"), RTLD_NOW | RTLD_LOCAL);
    PFN_cuDeviceGetCount_v2000 count_fn;
    int count = 0;
    if (!fake || gpa("cuDeviceGetCount", (void **)&count_fn, 13000, 0, NULL) != CUDA_SUCCESS ||
        (void *)count_fn != dlsym(fake, "cuDeviceGetCount") ||
        gpa("cuInit", &fn, 13000, 0, NULL) != CUDA_SUCCESS ||
        ((PFN_cuInit_v2000)fn)(0) != CUDA_SUCCESS || count_fn(&count) != CUDA_SUCCESS || count != 1)
        printf("FAIL: cuDeviceGetCount through cuGetProcAddress\n"), bad++;
    /* cuGetExportTable reaches the driver untouched: the same private table comes back. */
    PFN_cuGetExportTable_v3000 tab_via, tab_real;
    *(void **)&tab_via = dlsym(h, "cuGetExportTable");
    *(void **)&tab_real = fake ? dlsym(fake, "cuGetExportTable") : NULL;
    const void *t1 = NULL, *t2 = NULL;
    CUuuid id = {{1, 2, 3, 4}};
    if (!tab_via || !tab_real || tab_via(&t1, &id) != CUDA_SUCCESS ||
        tab_real(&t2, &id) != CUDA_SUCCESS || !t1 || t1 != t2)
        printf("FAIL: cuGetExportTable did not pass through (%p vs %p)\n", t1, t2), bad++;
    return bad != 0;
}

/* ------------------------------------------------------------------------------------------ */
/* oracle                                                                                       */

static uintptr_t fault_lo, fault_hi;

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    _exit(a >= fault_lo && a < fault_hi ? 42 : 43);
}

/* Run f(arg) in a child; true when it dies of a fault inside [lo, hi). */
static bool faults_in(void (*f)(void *), void *arg, uintptr_t lo, uintptr_t hi)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fault_lo = lo;
        fault_hi = hi;
        struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        f(arg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 42;
}

/* cuInit, then the primary context, current on this thread. */
static int ctx_up(const struct ms_api *a, CUcontext *ctx)
{
    MS_CK(a->Init(0));
    MS_CK(a->PrimaryCtxRetain(ctx, 0));
    MS_CK(a->CtxSetCurrent(*ctx));
    return 0;
}

static const struct ms_api *oapi;
static CUfunction otouch;

struct touch_args {
    CUdeviceptr p;
    size_t bytes;
};

static void touch_kernel(const struct ms_fake_launch *l)
{
    memset((void *)(uintptr_t)(*(CUdeviceptr *)l->args[0]), 0x77, *(size_t *)l->args[1]);
}

static void run_touch(void *arg)
{
    struct touch_args *t = arg;
    void *args[] = {&t->p, &t->bytes};
    oapi->LaunchKernel(otouch, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
}

static int oracle(const struct ms_api *a, const struct ms_fake_api *fk)
{
    static const size_t sizes[] = {8, 8};
    oapi = a;
    CUcontext ctx;
    if (ctx_up(a, &ctx))
        return 1;
    MS_CK(fk->register_kernel("oracle_touch", touch_kernel, sizes, 2, NULL, &otouch));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t g = 0;
    MS_CK(a->MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr base;
    CUmemGenericAllocationHandle h;
    MS_CK(a->MemAddressReserve(&base, 3 * g, 0, 0, 0));
    MS_CK(a->MemCreate(&h, g, &prop, 0));
    MS_CK(a->MemMap(base, g, 0, h, 0));
    int bad = 0;

    /* mapped, but no access granted yet */
    struct touch_args t = {base, g};
    if (!faults_in(run_touch, &t, base, base + g))
        printf("FAIL: a kernel touching mapped memory without access did not fault\n"), bad++;
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    MS_CK(a->MemSetAccess(base, g, &acc, 1));
    /* resident: works, in this process */
    run_touch(&t);
    unsigned char v = 0;
    MS_CK(a->MemcpyDtoH(&v, base + g - 1, 1));
    if (v != 0x77)
        printf("FAIL: the kernel's writes are not visible\n"), bad++;
    /* running past the mapped granule into the reserved, never-mapped one */
    t.bytes = 2 * g;
    if (!faults_in(run_touch, &t, base + g, base + 2 * g))
        printf("FAIL: a kernel touching never-mapped memory did not fault there\n"), bad++;
    /* copies into it are refused, not performed */
    if (ms_check_rc("copy into never-mapped memory", a->MemcpyHtoD(base + g, &v, 1),
                    CUDA_ERROR_ILLEGAL_ADDRESS))
        bad++;
    /* unmapped again (evicted): faults again */
    MS_CK(a->MemUnmap(base, g));
    t.bytes = g;
    if (!faults_in(run_touch, &t, base, base + g))
        printf("FAIL: a kernel touching unmapped memory did not fault\n"), bad++;
    /* the guard page behind an allocation */
    CUdeviceptr d;
    MS_CK(a->MemAlloc(&d, 4096));
    struct touch_args past = {d, 4096 + 64};
    if (!faults_in(run_touch, &past, d + 4096, d + 8192))
        printf("FAIL: writing past an allocation did not hit its guard page\n"), bad++;
    MS_CK(a->MemFree(d));
    MS_CK(a->MemRelease(h));
    MS_CK(a->MemAddressFree(base, 3 * g));
    MS_CK(a->PrimaryCtxRelease(0));
    return bad != 0;
}

/* ------------------------------------------------------------------------------------------ */
/* tramp-float, tramp-stack                                                                     */

/* The process's first driver call goes to a forwarded (unhooked) function, so under libmsched
 * it takes the trampolines' slow path (resolve the driver, then jump); then the same call
 * again takes the fast path. The fake checks the arguments (floats, a stack argument). */
static int tramp(bool stack)
{
    void *h = driver();
    if (!h)
        return 1;
    for (int i = 0; i < 2; i++) {
        if (stack) {
            PFN_cuOccupancyMaxPotentialBlockSizeWithFlags_v7000 f;
            *(void **)&f = dlsym(h, "cuOccupancyMaxPotentialBlockSizeWithFlags");
            int grid = 0, block = 0;
            if (!f || f(&grid, &block, (CUfunction)0xf00, NULL, 123, 456, 789) != CUDA_SUCCESS ||
                grid != 7 || block != 8)
                return printf("FAIL: seven arguments through a trampoline (call %d)\n", i), 1;
        } else {
            PFN_cuTexRefSetMipmapLevelClamp_v5000 f;
            *(void **)&f = dlsym(h, "cuTexRefSetMipmapLevelClamp");
            if (!f || f((CUtexref)0x7e7, 1.5f, 2.5f) != CUDA_SUCCESS)
                return printf("FAIL: float arguments through a trampoline (call %d)\n", i), 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* fork                                                                                         */

/* Work, fork a child that exits normally (running exit handlers), work again. The trace must
 * hold the parent's records once: the child neither writes nor flushes the parent's trace. */
static int fork_mode(const struct ms_api *a)
{
    CUcontext ctx;
    CUdeviceptr d;
    if (ctx_up(a, &ctx))
        return 1;
    MS_CK(a->MemAlloc(&d, 4096));
    MS_CK(a->MemsetD8(d, 1, 4096));
    MS_CK(a->MemFree(d));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        exit(0);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return printf("FAIL: the forked child did not exit cleanly\n"), 1;
    MS_CK(a->MemAlloc(&d, 4096));
    MS_CK(a->MemFree(d));
    MS_CK(a->PrimaryCtxRelease(0));
    printf("EXPECT trace kernel=0 alloc=2 free=2 copy=0 memset=1 sync=0\n");
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* pin-lock                                                                                     */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct pin_arg {
    const struct ms_api *a;
    CUcontext ctx;
    size_t bytes; /* to allocate; 0: 128 MiB */
    CUresult rc;
    CUdeviceptr d;
    double done; /* now_s() when the allocation returned */
};

static void *pin_alloc(void *p)
{
    struct pin_arg *x = p;
    x->rc = x->a->CtxSetCurrent(x->ctx);
    if (x->rc == CUDA_SUCCESS)
        x->rc = x->a->MemAlloc(&x->d, x->bytes ? x->bytes : 128u << 20);
    x->done = now_s();
    return NULL;
}

/* Under the engine (VMM backing) with MSCHED_BUDGET=64MiB and MSCHED_FAKE_PIN_MS=1500: while one
 * thread allocates 128 MiB (more than the budget: it starts on host chunks, two 64 MiB host
 * handles of 1.5 s each, 3 s to pin), a memset on another buffer must not wait for it: the
 * engine's lock is not held across the pinning. */
static int pin_lock(const struct ms_api *a)
{
    CUcontext ctx;
    CUdeviceptr d;
    if (ctx_up(a, &ctx))
        return 1;
    MS_CK(a->MemAlloc(&d, 1u << 20));
    MS_CK(a->MemsetD8(d, 1, 1u << 20));
    struct pin_arg x = {.a = a, .ctx = ctx};
    pthread_t t;
    double t0 = now_s();
    if (pthread_create(&t, NULL, pin_alloc, &x))
        return printf("FAIL: pthread_create\n"), 1;
    struct timespec settle = {0, 200000000L};
    nanosleep(&settle, NULL);
    double m0 = now_s();
    MS_CK(a->MemsetD8(d, 2, 1u << 20));
    double waited = now_s() - m0;
    pthread_join(t, NULL);
    double alloc = now_s() - t0;
    MS_CK(x.rc);
    MS_CK(a->MemsetD8(x.d, 3, 128u << 20));
    MS_CK(a->MemFree(x.d));
    MS_CK(a->MemFree(d));
    MS_CK(a->PrimaryCtxRelease(0));
    printf("pin-lock: allocation %.2f s, memset during it %.3f s\n", alloc, waited);
    if (alloc < 1.2)
        return printf("FAIL: the allocation took %.2f s: the slow pinning did not happen\n", alloc),
               1;
    if (waited > 0.6)
        return printf("FAIL: a memset waited %.2f s for another thread's allocation\n", waited), 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* pin-gate: a migration does not wait behind this process's pinning                            */

#define GATE_SMALL 32u        /* buffers of 4 MiB: one chunk and one copy each to evict */
#define GATE_F (192ull << 20) /* the budget */

/* Memset `f` (the whole budget): the engine evicts every small buffer first (32 chunks, each a
 * copy) and brings f's evicted chunks back. Returns the seconds it took, or -1. */
static double gate_migrate(const struct ms_api *a, CUdeviceptr f, unsigned char v)
{
    double t0 = now_s();
    if (a->MemsetD8(f, v, GATE_F) != CUDA_SUCCESS)
        return -1;
    return now_s() - t0;
}

/* Make every small buffer resident again (evicting f), each with its own byte of this round:
 * new contents, so that evicting them again copies (unchanged chunks would be dropped). */
static CUresult gate_refill(const struct ms_api *a, const CUdeviceptr *b, unsigned round)
{
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < GATE_SMALL && r == CUDA_SUCCESS; i++)
        r = a->MemsetD8(b[i], (unsigned char)(0x40 + i + 64 * round), 4u << 20);
    return r;
}

/* Under the engine with MSCHED_BUDGET=192MiB, MSCHED_PIN_PIECE=64MiB and MSCHED_FAKE_PIN_MS=200
 * (the fake's copies wait for a pin in flight, as the driver's do, and count it): 128 MiB of
 * small buffers and a 192 MiB buffer f take turns in the budget. A migration (f in, the small
 * buffers out) is timed alone and then, its like, while another thread pins 1 GiB in 16 pieces
 * of 200 ms. With the migration gate no copy of it waits for a pin (the fake's count), and it
 * takes at most the piece in flight longer; without the gate its copies wait for piece after
 * piece (0.7 s or more here). The alone run also maps f fresh, so it is the slower of the two
 * kinds of work: the time check is loose, the count is exact. The small buffers' bytes
 * survive. */
static int pin_gate(const struct ms_api *a, const struct ms_fake_api *fk)
{
    CUcontext ctx;
    CUdeviceptr b[GATE_SMALL], f;
    if (ctx_up(a, &ctx))
        return 1;
    for (unsigned i = 0; i < GATE_SMALL; i++)
        MS_CK(a->MemAlloc(&b[i], 4u << 20));
    MS_CK(a->MemAlloc(&f, GATE_F));
    MS_CK(gate_refill(a, b, 0));
    double alone = gate_migrate(a, f, 1);
    MS_CK(gate_refill(a, b, 1));
    struct pin_arg x = {.a = a, .ctx = ctx, .bytes = 1u << 30};
    pthread_t t;
    double t0 = now_s();
    if (pthread_create(&t, NULL, pin_alloc, &x))
        return printf("FAIL: pthread_create\n"), 1;
    struct timespec settle = {0, 250000000L};
    nanosleep(&settle, NULL);
    struct ms_fake_stats s0, s1;
    fk->get_stats(&s0);
    double during = gate_migrate(a, f, 2);
    fk->get_stats(&s1);
    double m_end = now_s();
    pthread_join(t, NULL);
    MS_CK(x.rc);
    printf("pin-gate: migration alone %.3f s, during pinning %.3f s; the 1 GiB allocation took "
           "%.2f s and ended %.2f s after the migration\n",
           alone, during, x.done - t0, x.done - m_end);
    if (alone < 0 || during < 0)
        return printf("FAIL: a memset failed\n"), 1;
    if (x.done - m_end < 0.3)
        return printf("FAIL: the pinning ended before the migration did: no overlap tested\n"), 1;
    if (s1.pin_waits != s0.pin_waits)
        return printf("FAIL: %llu of the migration's copies waited for a pin in flight\n",
                      (unsigned long long)(s1.pin_waits - s0.pin_waits)),
               1;
    if (during - alone > 0.35)
        return printf("FAIL: the migration took %.3f s longer beside the pinning\n",
                      during - alone),
               1;
    unsigned char *h = malloc(4u << 20);
    if (!h)
        return printf("FAIL: malloc\n"), 1;
    for (unsigned i = 0; i < GATE_SMALL; i++) {
        if (a->MemcpyDtoH(h, b[i], 4u << 20) != CUDA_SUCCESS) {
            free(h);
            return printf("FAIL: reading buffer %u back\n", i), 1;
        }
        for (size_t k = 0; k < (4u << 20); k += 4099)
            if (h[k] != (unsigned char)(0x40 + i + 64)) {
                unsigned got = h[k];
                free(h);
                return printf("FAIL: buffer %u byte %zu is 0x%02x\n", i, k, got), 1;
            }
    }
    free(h);
    for (unsigned i = 0; i < GATE_SMALL; i++)
        MS_CK(a->MemFree(b[i]));
    MS_CK(a->MemFree(f));
    MS_CK(a->MemFree(x.d));
    MS_CK(a->PrimaryCtxRelease(0));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* pin-pieces: an allocation's host chunks, one pin call each                                  */

/* Under the engine with MSCHED_BUDGET=256MiB: a 320 MiB buffer (five 64 MiB chunks) does not fit
 * and starts on five host chunks (host-located VMM handles, one pin call each); a 128 MiB one
 * (a single chunk) fits and has none. Filling both evicts part of the first and, lazily, gives
 * the second its host chunk; every byte reads back; freeing them releases every host chunk. */
static int pin_pieces(const struct ms_api *a, const struct ms_fake_api *fk)
{
    const size_t chunk = 64u << 20, big = 5 * chunk, small = 128u << 20;
    CUcontext ctx;
    CUdeviceptr d, e;
    struct ms_fake_stats st;
    if (ctx_up(a, &ctx))
        return 1;
    fk->get_stats(&st);
    uint64_t base = st.host_creates, live = st.host_handles;
    MS_CK(a->MemAlloc(&d, big));
    MS_CK(a->MemAlloc(&e, small));
    fk->get_stats(&st);
    if (st.host_creates - base != 5)
        return printf("FAIL: %llu host chunks for the two allocations, want 5\n",
                      (unsigned long long)(st.host_creates - base)),
               1;
    for (size_t k = 0; k < 5; k++)
        MS_CK(a->MemsetD8(d + k * chunk, (unsigned char)(0x21 + k), chunk));
    MS_CK(a->MemsetD8(e, 0x77, small));
    unsigned char *h = malloc(chunk);
    if (!h)
        return printf("FAIL: malloc\n"), 1;
    for (size_t k = 0; k < 5; k++) {
        MS_CK(a->MemcpyDtoH(h, d + k * chunk, chunk));
        for (size_t i = 0; i < chunk; i += 4093)
            if (h[i] != (unsigned char)(0x21 + k)) {
                unsigned got = h[i];
                free(h);
                return printf("FAIL: chunk %zu byte %zu is 0x%02x\n", k, i, got), 1;
            }
    }
    MS_CK(a->MemcpyDtoH(h, e, chunk));
    for (size_t i = 0; i < chunk; i += 4093)
        if (h[i] != 0x77) {
            unsigned got = h[i];
            free(h);
            return printf("FAIL: the small buffer's byte %zu is 0x%02x\n", i, got), 1;
        }
    free(h);
    fk->get_stats(&st);
    uint64_t made = st.host_creates - base;
    MS_CK(a->MemFree(d));
    MS_CK(a->MemFree(e));
    fk->get_stats(&st);
    if (st.host_handles != live)
        return printf("FAIL: %llu host chunks left after the frees\n",
                      (unsigned long long)(st.host_handles - live)),
               1;
    MS_CK(a->PrimaryCtxRelease(0));
    printf("pin-pieces: %llu host chunks, data intact, none left\n", (unsigned long long)made);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* strict: a kernel that follows a pointer another kernel stored in device memory              */

static CUfunction sfill, splant, schase;

static void fill_kernel(const struct ms_fake_launch *l)
{
    memset((void *)(uintptr_t)(*(CUdeviceptr *)l->args[0]), 0x11, 4096);
}

static void plant_kernel(const struct ms_fake_launch *l)
{
    *(uint64_t *)(uintptr_t)(*(CUdeviceptr *)l->args[0]) = *(uint64_t *)l->args[1];
}

static void chase_kernel(const struct ms_fake_launch *l)
{
    uint64_t to = *(uint64_t *)(uintptr_t)(*(CUdeviceptr *)l->args[0]);
    memset((void *)(uintptr_t)to, 0x22, 4096);
}

/* fill(B); plant(A, B): A[0] = B; chase(A): *A[0] = 0x22. chase names only A, so under
 * MSCHED_STRICT=1 B is unmapped when it runs and the process dies of the fault (the caller
 * checks); otherwise B ends up holding 0x22. */
static int strict_mode(const struct ms_api *a, const struct ms_fake_api *fk)
{
    static const size_t one[] = {8}, two[] = {8, 8};
    CUcontext ctx;
    if (ctx_up(a, &ctx))
        return 1;
    MS_CK(fk->register_kernel("strict_fill", fill_kernel, one, 1, NULL, &sfill));
    MS_CK(fk->register_kernel("strict_plant", plant_kernel, two, 2, NULL, &splant));
    MS_CK(fk->register_kernel("strict_chase", chase_kernel, one, 1, NULL, &schase));
    CUdeviceptr pa, pb;
    MS_CK(a->MemAlloc(&pa, 2u << 20));
    MS_CK(a->MemAlloc(&pb, 2u << 20));
    uint64_t b = pb;
    void *fargs[] = {&pb}, *pargs[] = {&pa, &b}, *cargs[] = {&pa};
    MS_CK(a->LaunchKernel(sfill, 1, 1, 1, 1, 1, 1, 0, NULL, fargs, NULL));
    MS_CK(a->LaunchKernel(splant, 1, 1, 1, 1, 1, 1, 0, NULL, pargs, NULL));
    printf("strict: chasing the stored pointer\n");
    fflush(stdout);
    MS_CK(a->LaunchKernel(schase, 1, 1, 1, 1, 1, 1, 0, NULL, cargs, NULL));
    MS_CK(a->CtxSynchronize());
    unsigned char v = 0;
    MS_CK(a->MemcpyDtoH(&v, pb, 1));
    printf("strict: the stored pointer's target holds 0x%02x\n", v);
    MS_CK(a->MemFree(pa));
    MS_CK(a->MemFree(pb));
    MS_CK(a->PrimaryCtxRelease(0));
    return v == 0x22 ? 0 : (printf("FAIL: want 0x22\n"), 1);
}

/* acc: launches whose touches are known, for the accuracy probe on the fake CUPTI
 * (run_shim_tests.sh checks the probe's lines): touch(A, 4 MiB) twice (each must be seen whole:
 * the probe sends A back between them), plant(C, B) (B named by a scalar), chase(C) (reaches B
 * through the stored pointer: a miss of B's first page). */
static int acc_mode(const struct ms_api *a, const struct ms_fake_api *fk)
{
    static const size_t one[] = {8}, two[] = {8, 8};
    CUcontext ctx;
    if (ctx_up(a, &ctx))
        return 1;
    CUfunction touch;
    MS_CK(fk->register_kernel("acc_touch", touch_kernel, two, 2, NULL, &touch));
    MS_CK(fk->register_kernel("acc_plant", plant_kernel, two, 2, NULL, &splant));
    MS_CK(fk->register_kernel("acc_chase", chase_kernel, one, 1, NULL, &schase));
    CUdeviceptr pa, pb, pc;
    MS_CK(a->MemAlloc(&pa, 4u << 20));
    MS_CK(a->MemAlloc(&pb, 4u << 20));
    MS_CK(a->MemAlloc(&pc, 2u << 20));
    size_t n = 4u << 20;
    uint64_t b = pb;
    void *targs[] = {&pa, &n}, *pargs[] = {&pc, &b}, *cargs[] = {&pc};
    for (int i = 0; i < 2; i++)
        MS_CK(a->LaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, targs, NULL));
    MS_CK(a->LaunchKernel(splant, 1, 1, 1, 1, 1, 1, 0, NULL, pargs, NULL));
    MS_CK(a->LaunchKernel(schase, 1, 1, 1, 1, 1, 1, 0, NULL, cargs, NULL));
    MS_CK(a->CtxSynchronize());
    unsigned char v = 0;
    MS_CK(a->MemcpyDtoH(&v, pb, 1));
    MS_CK(a->MemFree(pa));
    MS_CK(a->MemFree(pb));
    MS_CK(a->MemFree(pc));
    MS_CK(a->PrimaryCtxRelease(0));
    return v == 0x22 ? 0 : (printf("FAIL: the chase's write is lost\n"), 1);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "link";
    int rc;
    if (strcmp(mode, "gpa-check") == 0) {
        rc = gpa_check();
    } else if (strncmp(mode, "tramp-", 6) == 0) {
        rc = tramp(strcmp(mode, "tramp-stack") == 0);
    } else if (strcmp(mode, "nodriver") == 0) {
        void *h = driver();
        PFN_cuInit_v2000 init = NULL;
        if (h)
            *(void **)&init = dlsym(h, "cuInit");
        rc = !init || ms_check_rc("cuInit without a driver", init(0), CUDA_ERROR_NO_DEVICE);
    } else {
        struct ms_api a;
        struct ms_fake_api fk;
        memset(&a, 0, sizeof a);
        /* The driver first: once the fake is loaded by absolute path, glibc would answer
         * dlopen("libcuda.so.1") with it (same SONAME) and bypass libmsched. */
        if (load_api(mode, &a) || fake_api(&fk))
            return 1;
        if (strcmp(mode, "oracle") == 0)
            rc = oracle(&a, &fk);
        else if (strcmp(mode, "fork") == 0)
            rc = fork_mode(&a);
        else if (strcmp(mode, "pin-lock") == 0)
            rc = pin_lock(&a);
        else if (strcmp(mode, "pin-gate") == 0)
            rc = pin_gate(&a, &fk);
        else if (strcmp(mode, "pin-pieces") == 0)
            rc = pin_pieces(&a, &fk);
        else if (strcmp(mode, "strict") == 0)
            rc = strict_mode(&a, &fk);
        else if (strcmp(mode, "acc") == 0)
            rc = acc_mode(&a, &fk);
        else
            rc = ms_workload_run(&a, &fk);
    }
    if (rc == 0)
        printf("OK %s\n", mode);
    return rc;
}
