/*
 * hostmem.c - pinned host backing stores, in pieces when configured (contract: hostmem.h).
 *
 * A pieced store is an anonymous mapping registered piece by piece; a whole one is a single
 * cuMemHostAlloc. ms__host_unpin must know which and how big (the live bytes are reported), so
 * every store is listed (base, size, piece; piece 0 for a whole one) in a small array under
 * `lock`: one entry per live store, found by a linear scan (stores are freed rarely). The lock
 * guards the list and the statistics only; no driver call runs under it.
 *
 * The migration gate is a second mutex and condition variable over two counts: `pinning`
 * (driver pin and unpin calls in flight) and `migrating` (migrations between enter and leave). A
 * pin call starts only while no migration is in progress and a migration starts its copies only
 * once no pin call is in flight, so a migration waits for at most the pin calls already running
 * (one piece per pinning thread when pieced) and a pinning thread waits between pieces for the
 * migration. Neither mutex is held across a driver call.
 */
#include "shim/hostmem.h"
#include "shim/locks.h"

#include "ipc/ipc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define SLOW_PIN_NS 300000000ull

struct pieced {
    void *base;
    size_t bytes, piece;
};

static struct ms_lock lock = MS_LOCK_INIT(MS_LK_HOST, "host");
static struct pieced *list;
static size_t nlist, caplist;
static struct ms_host_stats st;
static uint64_t piece_bytes;

static struct ms_lock gate = MS_LOCK_INIT(MS_LK_HOST_GATE, "host_gate");
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static unsigned pinning, migrating; /* under gate */

/* Around every driver pin or unpin call: wait out migrations, count the call in flight.
 * Returns the nanoseconds waited. */
static uint64_t pin_begin(void)
{
    ms_lock(&gate);
    uint64_t t0 = migrating ? ms_ipc_now_ns() : 0;
    while (migrating)
        ms_lock_wait(&gate_cv, &gate);
    pinning++;
    ms_unlock(&gate);
    return t0 ? ms_ipc_now_ns() - t0 : 0;
}

static void pin_end(void)
{
    ms_lock(&gate);
    if (--pinning == 0)
        pthread_cond_broadcast(&gate_cv);
    ms_unlock(&gate);
}

uint64_t ms__host_pin_begin(void)
{
    return pin_begin();
}

void ms__host_pin_end(void)
{
    pin_end();
}

void ms__host_gate_enter(void)
{
    ms_lock(&gate);
    migrating++;
    uint64_t t0 = pinning ? ms_ipc_now_ns() : 0;
    while (pinning)
        ms_lock_wait(&gate_cv, &gate);
    ms_unlock(&gate);
    if (t0) {
        uint64_t dt = ms_ipc_now_ns() - t0;
        ms_lock(&lock);
        st.gate_waits++;
        st.gate_wait_ns += dt;
        st.gate_longest_ns = MS_MAX(st.gate_longest_ns, dt);
        ms_unlock(&lock);
    }
}

void ms__host_gate_leave(void)
{
    ms_lock(&gate);
    if (--migrating == 0)
        pthread_cond_broadcast(&gate_cv);
    ms_unlock(&gate);
}

void ms__host_configure(uint64_t piece)
{
    ms_lock(&lock);
    piece_bytes = MS_ROUND_UP(piece, MS_GRAN);
    st.piece = piece_bytes;
    ms_unlock(&lock);
}

/* Release the first `done` bytes' registrations and the mapping of a pieced store. */
static CUresult drop_pieces(void *base, size_t bytes, size_t done, size_t piece)
{
    CUresult first = CUDA_SUCCESS;
    for (size_t off = 0; off < done; off += piece) {
        pin_begin();
        CUresult r = MS_REAL(cuMemHostUnregister)((char *)base + off);
        pin_end();
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = r;
    }
    munmap(base, bytes);
    return first;
}

/* List a live store (lock held). MS_E_NOMEM when the list cannot grow. */
static int list_add(void *base, size_t bytes, size_t piece)
{
    if (nlist == caplist) {
        size_t cap = caplist ? caplist * 2 : 64;
        struct pieced *p = ms_realloc(list, cap * sizeof(*list));
        if (!p)
            return MS_E_NOMEM;
        list = p;
        caplist = cap;
    }
    list[nlist++] = (struct pieced){base, bytes, piece};
    st.live_bytes += bytes;
    return MS_OK;
}

/* A pieced store: *out on success; on failure nothing is held. *waited grows by the time spent
 * waiting for migrations at the gate. */
static CUresult pin_pieces(size_t bytes, size_t piece, void **out, uint64_t *waited)
{
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Not inherited by a fork (as the driver's own pinned memory is not): a child would
     * otherwise get a copy of every pinned store (PyTorch's data-loader workers fork). */
    if (madvise(base, bytes, MADV_DONTFORK) != 0) {
        munmap(base, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t off = 0;
    CUresult r = CUDA_SUCCESS;
    for (; off < bytes && r == CUDA_SUCCESS; off += piece) {
        *waited += pin_begin();
        r = MS_REAL(cuMemHostRegister_v2)((char *)base + off, MS_MIN(piece, bytes - off), 0);
        pin_end();
    }
    if (r != CUDA_SUCCESS) {
        drop_pieces(base, bytes, off - piece, piece);
        return r;
    }
    ms_lock(&lock);
    int e = list_add(base, bytes, piece);
    ms_unlock(&lock);
    if (e != MS_OK) {
        drop_pieces(base, bytes, bytes, piece);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = base;
    return CUDA_SUCCESS;
}

CUresult ms__host_pin(size_t bytes, size_t align, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    ms_lock(&lock);
    uint64_t piece = piece_bytes;
    ms_unlock(&lock);
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    uint64_t t0 = ms_ipc_now_ns();
    CUresult r = CUDA_ERROR_UNKNOWN;
    uint64_t waited = 0; /* at the gate, not pinning: left out of the timings */
    bool pieced = false, fell_back = false;
    if (piece) {
        if (align > piece)
            piece = align;
        else if (align)
            piece = MS_ROUND_UP(piece, align);
        r = pin_pieces(bytes, piece, out, &waited);
        pieced = r == CUDA_SUCCESS;
        fell_back = !pieced;
        if (fell_back)
            MS_LOG_ONCE("host backing: registering %.2f GiB in pieces failed (CUresult %d); "
                        "such stores are pinned in one call instead",
                        (double)bytes / (double)MS_GIB, (int)r);
    }
    if (!pieced) {
        waited += pin_begin();
        r = MS_REAL(cuMemHostAlloc)(out, bytes, 0);
        pin_end();
        if (r == CUDA_SUCCESS) {
            ms_lock(&lock);
            int e = list_add(*out, bytes, 0);
            ms_unlock(&lock);
            if (e != MS_OK) {
                pin_begin();
                MS_REAL(cuMemFreeHost)(*out);
                pin_end();
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    uint64_t dt = ms_ipc_now_ns() - t0;
    dt -= MS_MIN(dt, waited);
    if (r != CUDA_SUCCESS) {
        *out = NULL;
        return r;
    }
    ms_lock(&lock);
    st.stores++;
    st.bytes += bytes;
    st.pin_ns += dt;
    st.longest_ns = MS_MAX(st.longest_ns, dt);
    st.pieced += pieced;
    st.fallbacks += fell_back;
    ms_unlock(&lock);
    if (dt >= SLOW_PIN_NS) {
        char started[40];
        ms__shim_wallclock(&at, started, sizeof(started));
        ms__shim_log("slow pin: %.1f ms for %.2f GiB of host backing (%s), started %s",
                     (double)dt / 1e6, (double)bytes / (double)MS_GIB,
                     pieced ? "in pieces" : "one call", started);
    }
    return CUDA_SUCCESS;
}

CUresult ms__host_unpin(void *p)
{
    if (!p)
        return CUDA_SUCCESS;
    struct pieced found = {0};
    ms_lock(&lock);
    for (size_t i = 0; i < nlist; i++)
        if (list[i].base == p) {
            found = list[i];
            list[i] = list[--nlist];
            st.live_bytes -= found.bytes;
            break;
        }
    ms_unlock(&lock);
    CUresult r;
    if (found.base && found.piece) {
        r = drop_pieces(found.base, found.bytes, found.bytes, found.piece);
    } else {
        pin_begin();
        r = MS_REAL(cuMemFreeHost)(p);
        pin_end();
    }
    if (r != CUDA_SUCCESS) {
        ms_lock(&lock);
        st.unpin_errors++;
        ms_unlock(&lock);
    }
    return r;
}

void ms__host_atfork_child(void)
{
    ms_lock_reset(&lock);
    ms_lock_reset(&gate);
    pthread_cond_init(&gate_cv, NULL);
    pinning = migrating = 0;
    st.live_bytes = 0;
    nlist = 0; /* the stores were not inherited (MADV_DONTFORK; the driver's are not either) */
}

void ms__host_stats(struct ms_host_stats *out)
{
    ms_lock(&lock);
    *out = st;
    ms_unlock(&lock);
}
