/*
 * fakecuda_um.c - the fake driver's unified memory: where managed pages are, prefetches, and
 * the GPU page faults that bring them in.
 *
 * Design
 *   Each managed allocation (cuMemAllocManaged) is tracked in 2 MiB pages, each in one of three
 *   places: nowhere yet (never touched), on the device, on the host. Only pages on the device
 *   are accessible (read-write); the others are PROT_NONE. Touching one, from a kernel or from
 *   a copy, raises SIGSEGV; the fake's handler plays the GPU's fault path: the page moves to the
 *   device (mprotect read-write), the fault is counted, and the access is retried. So a program
 *   on managed memory always runs correctly, as on a GPU, and the counts say how much of it
 *   was demand paging. cuMemPrefetchAsync_v2 moves whole pages the range overlaps (to the
 *   device: accessible; to the host: PROT_NONE), synchronously like all the fake's work.
 *
 *   Counted (ms_fake_get_stats): faults (all), faults while a kernel ran, bytes prefetched each
 *   way, managed bytes on the device now and at most. A test of a memory engine checks the last
 *   against its budget, and the kernel faults against zero where the engine promises to
 *   prefetch everything a launch uses. Every page move is also logged with its time (a ring
 *   of UM_EVENTS; ms_fake_um_drain), what a stand-in for CUPTI turns into unified-memory
 *   reports, so the accuracy probe (shim/accuracy.h) can be tested against known touches.
 *
 * Invariants
 *   - The handler takes no lock: the table is a fixed array whose entries are published with
 *     release stores (base last) and retired by storing base 0 first; page places change by
 *     compare-and-swap, so each move is counted once.
 *   - A SIGSEGV at an address outside every managed page is not ours: the handler puts the
 *     previous disposition back (or calls the previous handler), so the oracle for VMM memory
 *     (a fault kills the program) is unchanged.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define UM_MAX 1024u
#define UM_PAGE MS_FK_GRAN
#define UM_EVENTS 65536u

enum { WHERE_NONE = 0, WHERE_DEVICE = 1, WHERE_HOST = 2 };

struct um_block {
    uint64_t base; /* 0: slot free (atomic) */
    uint64_t size; /* rounded up to whole pages of the fake's mapping */
    uint8_t *where;
};

static struct um_block um[UM_MAX];
static uint64_t um_faults, um_kernel_faults, um_in_bytes, um_out_bytes, um_dev_bytes, um_dev_max;
static _Thread_local int in_kernel;

/* The event ring: writers (any thread, the SIGSEGV handler included) claim a slot with an
 * atomic increment and publish it by storing its sequence number last; the reader (under
 * ms__fk_lock) takes published slots in order. Slots overwritten before they were read are
 * counted as dropped. */
static struct {
    uint64_t seq; /* index + 1 once written (atomic) */
    struct ms_fake_um_event e;
} ring[UM_EVENTS];
static uint64_t ring_w, ring_r, ring_dropped;

static void log_move(uint8_t kind, uint64_t addr, uint64_t bytes)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t i = __atomic_fetch_add(&ring_w, 1, __ATOMIC_ACQ_REL);
    ring[i % UM_EVENTS].e =
        (struct ms_fake_um_event){.ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                                  .addr = addr,
                                  .bytes = bytes,
                                  .kind = kind};
    __atomic_store_n(&ring[i % UM_EVENTS].seq, i + 1, __ATOMIC_RELEASE);
}

MS_FK_EXPORT size_t ms_fake_um_drain(struct ms_fake_um_event *out, size_t max)
{
    pthread_mutex_lock(&ms__fk_lock);
    uint64_t w = __atomic_load_n(&ring_w, __ATOMIC_ACQUIRE);
    if (w - ring_r > UM_EVENTS) {
        ring_dropped += w - ring_r - UM_EVENTS;
        ring_r = w - UM_EVENTS;
    }
    size_t n = 0;
    while (n < max && ring_r < w &&
           __atomic_load_n(&ring[ring_r % UM_EVENTS].seq, __ATOMIC_ACQUIRE) == ring_r + 1)
        out[n++] = ring[ring_r++ % UM_EVENTS].e;
    pthread_mutex_unlock(&ms__fk_lock);
    return n;
}

MS_FK_EXPORT uint64_t ms_fake_um_dropped(void)
{
    pthread_mutex_lock(&ms__fk_lock);
    uint64_t d = ring_dropped;
    pthread_mutex_unlock(&ms__fk_lock);
    return d;
}
static struct sigaction old_segv;
static bool handler_on; /* under ms__fk_lock */

static void dev_add(int64_t d)
{
    uint64_t now = __atomic_add_fetch(&um_dev_bytes, (uint64_t)d, __ATOMIC_RELAXED);
    uint64_t m = __atomic_load_n(&um_dev_max, __ATOMIC_RELAXED);
    while (d > 0 && now > m &&
           !__atomic_compare_exchange_n(&um_dev_max, &m, now, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

/* Move page p of block b to `to`; returns true when it moved (and adjusts the accounting). */
static bool move_page(struct um_block *b, uint64_t p, uint8_t to)
{
    uint64_t off = p * UM_PAGE, len = b->size - off < UM_PAGE ? b->size - off : UM_PAGE;
    uint8_t from = __atomic_load_n(&b->where[p], __ATOMIC_ACQUIRE);
    if (from == to)
        return false;
    int prot = to == WHERE_DEVICE ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (!__atomic_compare_exchange_n(&b->where[p], &from, to, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return false;
    mprotect((void *)(uintptr_t)(b->base + off), len, prot);
    if (to == WHERE_DEVICE)
        dev_add((int64_t)len);
    else if (from == WHERE_DEVICE)
        dev_add(-(int64_t)len);
    return true;
}

static struct um_block *find(uint64_t a)
{
    for (unsigned i = 0; i < UM_MAX; i++) {
        uint64_t base = __atomic_load_n(&um[i].base, __ATOMIC_ACQUIRE);
        if (base && a - base < um[i].size)
            return &um[i];
    }
    return NULL;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    struct um_block *b = find(a);
    if (b) {
        uint64_t p = (a - b->base) / UM_PAGE;
        if (move_page(b, p, WHERE_DEVICE)) {
            log_move(MS_FAKE_UM_FAULT, b->base + p * UM_PAGE,
                     b->size - p * UM_PAGE < UM_PAGE ? b->size - p * UM_PAGE : UM_PAGE);
            __atomic_add_fetch(&um_faults, 1, __ATOMIC_RELAXED);
            if (in_kernel)
                __atomic_add_fetch(&um_kernel_faults, 1, __ATOMIC_RELAXED);
        } else {
            /* Another thread moved it, or a prefetch raced: make sure it is accessible. */
            uint64_t off = p * UM_PAGE;
            uint64_t len = b->size - off < UM_PAGE ? b->size - off : UM_PAGE;
            if (__atomic_load_n(&b->where[p], __ATOMIC_ACQUIRE) == WHERE_DEVICE)
                mprotect((void *)(uintptr_t)(b->base + off), len, PROT_READ | PROT_WRITE);
        }
        return;
    }
    if ((old_segv.sa_flags & SA_SIGINFO) && old_segv.sa_sigaction) {
        old_segv.sa_sigaction(sig, si, uc);
        return;
    }
    if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
        old_segv.sa_handler(sig);
        return;
    }
    /* Not managed memory: the default action, when the access is retried. */
    sigaction(SIGSEGV, &old_segv, NULL);
}

void ms__fk_um_kernel(bool running)
{
    in_kernel = running;
}

CUresult ms__fk_um_add(uint64_t base, uint64_t bytes)
{
    uint64_t size = (bytes + 4095) / 4096 * 4096;
    uint64_t pages = (size + UM_PAGE - 1) / UM_PAGE;
    uint8_t *where = calloc(pages, 1);
    if (!where)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    unsigned i = 0;
    while (i < UM_MAX && um[i].base)
        i++;
    if (i == UM_MAX || mprotect((void *)(uintptr_t)base, size, PROT_NONE) != 0) {
        pthread_mutex_unlock(&ms__fk_lock);
        free(where);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!handler_on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &old_segv) == 0)
            handler_on = true;
    }
    um[i].size = size;
    um[i].where = where;
    __atomic_store_n(&um[i].base, base, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

void ms__fk_um_remove(uint64_t base)
{
    pthread_mutex_lock(&ms__fk_lock);
    for (unsigned i = 0; i < UM_MAX; i++) {
        if (um[i].base != base)
            continue;
        __atomic_store_n(&um[i].base, 0, __ATOMIC_RELEASE);
        uint64_t pages = (um[i].size + UM_PAGE - 1) / UM_PAGE;
        for (uint64_t p = 0; p < pages; p++)
            if (um[i].where[p] == WHERE_DEVICE) {
                uint64_t off = p * UM_PAGE;
                dev_add(-(int64_t)(um[i].size - off < UM_PAGE ? um[i].size - off : UM_PAGE));
            }
        free(um[i].where);
        um[i].where = NULL;
        break;
    }
    pthread_mutex_unlock(&ms__fk_lock);
}

void ms__fk_um_stats(struct ms_fake_stats *out)
{
    out->um_faults = __atomic_load_n(&um_faults, __ATOMIC_RELAXED);
    out->um_kernel_faults = __atomic_load_n(&um_kernel_faults, __ATOMIC_RELAXED);
    out->um_prefetch_in = __atomic_load_n(&um_in_bytes, __ATOMIC_RELAXED);
    out->um_prefetch_out = __atomic_load_n(&um_out_bytes, __ATOMIC_RELAXED);
    out->um_device_bytes = __atomic_load_n(&um_dev_bytes, __ATOMIC_RELAXED);
    out->um_device_max = __atomic_load_n(&um_dev_max, __ATOMIC_RELAXED);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                       unsigned int flags, CUstream hStream)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint8_t to;
    if (location.type == CU_MEM_LOCATION_TYPE_DEVICE && ms__fk_dev_ok(location.id))
        to = WHERE_DEVICE;
    else if (location.type == CU_MEM_LOCATION_TYPE_HOST ||
             location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
        to = WHERE_HOST;
    else
        return location.type == CU_MEM_LOCATION_TYPE_DEVICE ? CUDA_ERROR_INVALID_DEVICE
                                                            : CUDA_ERROR_INVALID_VALUE;
    if (flags != 0 || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    struct um_block *b = find(devPtr);
    if (!b || devPtr + count < devPtr || devPtr + count - b->base > b->size) {
        pthread_mutex_unlock(&ms__fk_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t first = (devPtr - b->base) / UM_PAGE, last = (devPtr + count - 1 - b->base) / UM_PAGE;
    for (uint64_t p = first; p <= last; p++) {
        uint64_t off = p * UM_PAGE, len = b->size - off < UM_PAGE ? b->size - off : UM_PAGE;
        if (move_page(b, p, to)) {
            __atomic_add_fetch(to == WHERE_DEVICE ? &um_in_bytes : &um_out_bytes, len,
                               __ATOMIC_RELAXED);
            log_move(to == WHERE_DEVICE ? MS_FAKE_UM_PREFETCH_IN : MS_FAKE_UM_PREFETCH_OUT,
                     b->base + off, len);
        }
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}
