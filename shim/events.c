/*
 * events.c - what libmsched does with driver events today: counters, the allocation list and
 * the trace recorder (MSCHED_TRACE).
 *
 * Design
 *   Everything here is protected by ms__events_lock, and no driver call is made under it, so each
 *   event costs a lock round trip plus a little bookkeeping (the trace's timing events, below,
 *   are the only driver calls here, made outside the lock).
 *
 *   Allocations are kept in an array sorted by base address: frees find their size, and
 *   cuMemcpy (unified addressing: no direction given) classifies each side as device memory
 *   when it falls inside a known allocation. (Allocations the memory engine takes are also
 *   regions of its own table, shim/engine.c.)
 *
 *   Streams get small trace ids in order of first use: 0 is the legacy default stream (NULL
 *   from a legacy entry point, or CU_STREAM_LEGACY); each thread's per-thread default stream
 *   (NULL from a _ptsz/_ptds entry point, or CU_STREAM_PER_THREAD) and every created stream
 *   get the next free id. A destroyed stream whose handle is reused keeps its id.
 *
 *   The trace (core/trace.h, docs/trace-format.md) is opened at the first event after
 *   initialisation: header, then one task record (id = pid, name = program name), then one
 *   record per event, formatted by ms_trace_format and buffered; the buffer is written when
 *   it fills, at each synchronisation and at exit. "%p" in the path becomes the pid, so
 *   several processes can trace side by side. Kernel durations are measured: while tracing,
 *   each launch (on a stream not being captured) is bracketed by two CUDA events recorded just
 *   before and just after the real call, and its record waits in an in-order queue (every
 *   later record queues behind it) until the end event has completed; the queue is drained
 *   without blocking at synchronisations and when it grows long, and completely at exit. The
 *   driver calls (events) are made without the lock. A launch whose parameter bytes exceed
 *   the format's 4096 is written without its bytes and layout; a name longer than the format's
 *   511 bytes is cut. Both count as trace_dropped.
 *
 *   The access profiler (MSCHED_PROFILE, shim/profile.h) gets the same alloc and free events
 *   (after the lock is released) and each admitted launch before and after the real call.
 *
 * Invariants
 *   - allocs[] is sorted by base with no two entries at the same base; counters.live_bytes is
 *     the sum of their sizes.
 *   - ms__rec_tr.fd >= 0 only in the process that opened the trace (a forked child never writes
 * it).
 */
#include "shim/shim_int.h"
#include "shim/recorder.h"
#include "shim/locks.h"

#include "core/trace.h"
#include "shim/shim_events.h"
#include "shim/engine.h"
#include "shim/phases.h"
#include "shim/profile.h"

#include <stddef.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct alloc {
    uint64_t base;
    uint64_t bytes;
    uint8_t kind; /* enum ms_region_kind */
};

static struct alloc *allocs;
static size_t nallocs, capallocs;

/* ------------------------------------------------------------------------------------------ */
/* Allocations and streams (ms__events_lock held)                                                 */
/* Index of the first allocation with base >= addr. */
static size_t lower_bound(uint64_t addr)
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (allocs[mid].base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool is_device(uint64_t addr)
{
    size_t i = lower_bound(addr + 1); /* first with base > addr */
    if (i == 0)
        return false;
    const struct alloc *a = &allocs[i - 1];
    return addr - a->base < a->bytes && a->kind != MS_RK_HOST;
}

/* Device bytes and host bytes are kept apart: live_bytes is what the GPU holds. */
static uint64_t *live_of(uint8_t kind)
{
    return kind == MS_RK_HOST ? &ms__rec_ctr.host_live_bytes : &ms__rec_ctr.live_bytes;
}

static void alloc_insert(uint64_t base, uint64_t bytes, enum ms_region_kind kind)
{
    size_t i = lower_bound(base);
    if (i < nallocs && allocs[i].base == base) {
        MS_LOG_ONCE("allocation at %#llx reported twice without a free in between",
                    (unsigned long long)base);
        *live_of(allocs[i].kind) -= allocs[i].bytes;
    } else {
        if (nallocs == capallocs) {
            size_t ncap = capallocs ? capallocs * 2 : 64;
            struct alloc *p = ms_realloc(allocs, ncap * sizeof *p);
            if (!p) {
                MS_LOG_ONCE("out of memory tracking allocations");
                return;
            }
            allocs = p;
            capallocs = ncap;
        }
        memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
        nallocs++;
    }
    allocs[i] = (struct alloc){base, bytes, (uint8_t)kind};
    *live_of((uint8_t)kind) += bytes;
    if (ms__rec_ctr.live_bytes > ms__rec_ctr.peak_bytes)
        ms__rec_ctr.peak_bytes = ms__rec_ctr.live_bytes;
}

static bool alloc_remove(uint64_t base)
{
    size_t i = lower_bound(base);
    if (i == nallocs || allocs[i].base != base)
        return false;
    *live_of(allocs[i].kind) -= allocs[i].bytes;
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
    return true;
}

void ms__shim_events_init(const char *trace_path)
{
    ms_lock(&ms__events_lock);
    ms__rec_tr.configured = true;
    if (trace_path && strlen(trace_path) < sizeof ms__rec_tr.path)
        strcpy(ms__rec_tr.path, trace_path);
    else if (trace_path)
        ms__shim_log("MSCHED_TRACE is too long; not tracing");
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_init(unsigned int flags)
{
    (void)flags;
    ms_lock(&ms__events_lock);
    ms__rec_ctr.inits++;
    ms__rec_trace_ready();
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_alloc(uint64_t ptr, uint64_t bytes, enum ms_region_kind kind)
{
    ms_lock(&ms__events_lock);
    if (kind == MS_RK_HOST) {
        ms__rec_ctr.host_allocs++;
    } else {
        ms__rec_ctr.allocs++;
        ms__rec_ctr.alloc_bytes += bytes;
    }
    alloc_insert(ptr, bytes, kind);
    if (ms__rec_trace_ready() && ptr != 0 && bytes != 0) {
        struct ms_trace_rec rec = {.kind = MS_TR_ALLOC,
                                   .task = ms__rec_tr.task,
                                   .addr = ptr,
                                   .size = bytes,
                                   .rkind = kind};
        ms__rec_trace_put(&rec);
    }
    ms_unlock(&ms__events_lock);
    ms_prof_alloc(ptr, bytes, kind);
}

bool ms_shim_on_free_begin(uint64_t ptr, struct ms_shim_alloc *out)
{
    if (ptr == 0)
        return false; /* cuMemFree(0) frees nothing */
    ms_lock(&ms__events_lock);
    size_t i = lower_bound(ptr);
    bool known = i < nallocs && allocs[i].base == ptr;
    if (known) {
        *out = (struct ms_shim_alloc){ptr, allocs[i].bytes, (enum ms_region_kind)allocs[i].kind};
        alloc_remove(ptr);
        /* Written now, before the driver can hand the address to another thread's allocation,
         * so the trace never shows that allocation before this free. */
        if (ms__rec_trace_ready()) {
            struct ms_trace_rec rec = {.kind = MS_TR_FREE, .task = ms__rec_tr.task, .addr = ptr};
            ms__rec_trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
    if (known)
        ms_prof_free(ptr);
    return known;
}

void ms_shim_on_free_end(uint64_t ptr, const struct ms_shim_alloc *was, bool freed)
{
    if (ptr == 0)
        return;
    ms_lock(&ms__events_lock);
    if (freed && was) {
        if (was->kind != MS_RK_HOST)
            ms__rec_ctr.frees++; /* host frees show in host_live_bytes */
    } else if (freed) {
        ms__rec_ctr.frees_unknown++;
        MS_LOG_ONCE("free of %#llx, which the shim never saw allocated", (unsigned long long)ptr);
    } else if (was) {
        /* The driver kept it: back into the books, and into the trace after its free record. */
        alloc_insert(was->ptr, was->bytes, was->kind);
        if (ms__rec_trace_ready()) {
            struct ms_trace_rec rec = {.kind = MS_TR_ALLOC,
                                       .task = ms__rec_tr.task,
                                       .addr = was->ptr,
                                       .size = was->bytes,
                                       .rkind = was->kind};
            ms__rec_trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
    if (!freed && was)
        ms_prof_alloc(was->ptr, was->bytes, was->kind);
}

int ms_shim_on_launch(const struct ms_shim_launch *l)
{
    uint64_t t = ms__ph_start();
    bool timed = ms__rec_timing_prepare(l->stream);
    ms_lock(&ms__events_lock);
    ms__rec_ctr.launches++;
    if ((unsigned)l->kind < MS_SHIM_LAUNCH_KINDS)
        ms__rec_ctr.launches_kind[l->kind]++;
    if (!l->layout)
        ms__rec_ctr.launches_unknown++;
    if (ms__rec_trace_ready())
        ms__rec_trace_launch(l, timed);
    if (ms__rec_tl.ev0 || ms__rec_tl.ev1) { /* not queued: the events go back */
        ms__rec_pool_put(ms__rec_tl.ev0);
        ms__rec_pool_put(ms__rec_tl.ev1);
        ms__rec_tl.ev0 = ms__rec_tl.ev1 = NULL;
    }
    ms_unlock(&ms__events_lock);
    ms__ph_stop(MS_PH_RECORD, t);
    t = ms__ph_start();
    int gate = ms_engine_gate_launch(l);
    ms__ph_stop(MS_PH_ENGINE, t);
    if (gate == 0)
        ms_prof_launch_begin(l); /* MSCHED_PROFILE (engine off): may run this launch alone */
    ms__rec_timing_start(gate);
    return gate;
}

int ms_shim_on_graph_launch(const void *exec, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.graph_launches++;
    ms_unlock(&ms__events_lock);
    return ms_engine_gate_graph(exec, s);
}

int ms_shim_on_graph_piece(const void *exec, const void *const *nodes, size_t n, bool first,
                           struct ms_shim_stream s)
{
    if (first) {
        ms_lock(&ms__events_lock);
        ms__rec_ctr.graph_launches++;
        ms_unlock(&ms__events_lock);
    }
    return ms_engine_gate_graph_part(exec, nodes, n, first, s);
}

int ms_shim_on_copy(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                    struct ms_shim_stream s)
{
    return ms_shim_on_copy_ex(dst, src, bytes, kind, s, true);
}

int ms_shim_on_copy_ex(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                       struct ms_shim_stream s, bool contiguous)
{
    uint64_t t = ms__ph_start();
    ms_lock(&ms__events_lock);
    ms__rec_ctr.copies++;
    ms__rec_ctr.copy_bytes += bytes;
    if (ms__rec_trace_ready()) {
        enum ms_copy_dir dir = (enum ms_copy_dir)kind;
        if (kind == MS_SHIM_COPY_UNIFIED) {
            bool d = is_device(dst), sdev = is_device(src);
            dir = d ? (sdev ? MS_COPY_D2D : MS_COPY_H2D) : (sdev ? MS_COPY_D2H : MS_COPY_H2H);
        }
        struct ms_trace_rec rec = {.kind = MS_TR_COPY,
                                   .task = ms__rec_tr.task,
                                   .stream = ms__rec_stream_id(s),
                                   .dir = dir,
                                   .dst = dst,
                                   .src = src,
                                   .size = bytes};
        ms__rec_trace_put(&rec);
    }
    ms_unlock(&ms__events_lock);
    /* The launch gate for copies: the device side(s) must be resident (host addresses fall
     * outside every region and are ignored). */
    int rc = 0;
    bool dev_dst = kind != MS_SHIM_COPY_H2H && kind != MS_SHIM_COPY_D2H;
    bool dev_src = kind != MS_SHIM_COPY_H2H && kind != MS_SHIM_COPY_H2D;
    if (dev_dst || dev_src)
        rc = ms_engine_gate_ranges(dev_dst ? dst : 0, dev_dst ? bytes : 0, dev_src ? src : 0,
                                   dev_src ? bytes : 0, s);
    if (rc == 0 && kind == MS_SHIM_COPY_H2D && contiguous)
        ms_engine_note_h2d(dst, (const void *)(uintptr_t)src, bytes);
    ms__ph_stop(MS_PH_COPY, t);
    return rc;
}

int ms_shim_on_copy_batch(const unsigned long long *dst, const unsigned long long *src,
                          const size_t *bytes, size_t n, struct ms_shim_stream s)
{
    if (!dst || !src || !bytes || n == 0 || n > (SIZE_MAX / 2) / sizeof(uint64_t))
        return 0; /* the driver rejects it */
    ms_lock(&ms__events_lock);
    for (size_t i = 0; i < n; i++) {
        ms__rec_ctr.copies++;
        ms__rec_ctr.copy_bytes += bytes[i];
        if (ms__rec_trace_ready()) {
            bool d = is_device(dst[i]), sdev = is_device(src[i]);
            struct ms_trace_rec rec = {.kind = MS_TR_COPY,
                                       .task = ms__rec_tr.task,
                                       .stream = ms__rec_stream_id(s),
                                       .dir = d ? (sdev ? MS_COPY_D2D : MS_COPY_H2D)
                                                : (sdev ? MS_COPY_D2H : MS_COPY_H2H),
                                       .dst = dst[i],
                                       .src = src[i],
                                       .size = bytes[i]};
            ms__rec_trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
    /* Both sides of every pair at once (host addresses fall outside every region). */
    uint64_t *a = ms_malloc(2 * n * sizeof(*a)), *b = ms_malloc(2 * n * sizeof(*b));
    int rc = 0;
    if (a && b) {
        for (size_t i = 0; i < n; i++) {
            a[2 * i] = dst[i];
            a[2 * i + 1] = src[i];
            b[2 * i] = b[2 * i + 1] = bytes[i];
        }
        rc = ms_engine_gate_rangev(a, b, 2 * n, s);
    } else {
        rc = ms_engine_gate_unbounded(s); /* cannot list them: everything resident */
    }
    ms_free(a);
    ms_free(b);
    return rc;
}

int ms_shim_on_memop(uint64_t addr, uint64_t bytes, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.stream_memops++;
    ms_unlock(&ms__events_lock);
    return bytes ? ms_engine_gate_range(addr, bytes, s) : ms_engine_gate_unbounded(s);
}

void ms_shim_on_ipc_open(void)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.ipc_opens++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_host_func(void)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.host_funcs++;
    ms_unlock(&ms__events_lock);
}

int ms_shim_on_memset(uint64_t dst, uint64_t bytes, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.memsets++;
    ms__rec_ctr.memset_bytes += bytes;
    if (ms__rec_trace_ready()) {
        struct ms_trace_rec rec = {.kind = MS_TR_MEMSET,
                                   .task = ms__rec_tr.task,
                                   .stream = ms__rec_stream_id(s),
                                   .addr = dst,
                                   .size = bytes};
        ms__rec_trace_put(&rec);
    }
    ms_unlock(&ms__events_lock);
    return ms_engine_gate_range(dst, bytes, s);
}

/* MS_GATED's cleanup: the hook's forwarded call (if any) has returned. */
void ms__shim_gate_end(int *gate)
{
    (void)gate;
    uint64_t t = ms__ph_start();
    ms_prof_launch_end();
    ms__rec_timing_end();
    ms_engine_gate_end();
    ms__ph_stop(MS_PH_END, t);
}

void ms_shim_on_sync(void)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.syncs++;
    bool tracing = ms__rec_trace_ready();
    if (tracing) {
        struct ms_trace_rec rec = {.kind = MS_TR_SYNC, .task = ms__rec_tr.task};
        ms__rec_trace_put(&rec);
        ms__rec_trace_flush();
    }
    ms_unlock(&ms__events_lock);
    if (tracing)
        ms__rec_trace_drain(false); /* after a synchronisation most queued kernels have finished */
}

void ms_shim_on_meminfo(uint64_t free_bytes, uint64_t total_bytes)
{
    (void)free_bytes;
    (void)total_bytes;
    ms_lock(&ms__events_lock);
    ms__rec_ctr.meminfo++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_procaddr(bool hooked)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.procaddr++;
    ms__rec_ctr.procaddr_hooked += hooked;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_dlsym_hooked(void)
{
    ms_lock(&ms__events_lock);
    ms__rec_ctr.dlsym_hooked++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_counters_get(struct ms_shim_counters *out)
{
    ms_lock(&ms__events_lock);
    *out = ms__rec_ctr;
    ms_unlock(&ms__events_lock);
}

/*
 * ms_shim_counter: one counter by name, for tools inside the process (the identity checks read
 * launch counts around a region with ctypes). Exported; unknown names give UINT64_MAX.
 */
__attribute__((visibility("default"))) uint64_t ms_shim_counter(const char *name);
uint64_t ms_shim_counter(const char *name)
{
    struct ms_shim_counters c;
    ms_shim_counters_get(&c);
    static const struct {
        const char *name;
        size_t off;
    } names[] = {
        {"launches", offsetof(struct ms_shim_counters, launches)},
        {"launches_unknown", offsetof(struct ms_shim_counters, launches_unknown)},
        {"graph_launches", offsetof(struct ms_shim_counters, graph_launches)},
        {"allocs", offsetof(struct ms_shim_counters, allocs)},
        {"frees", offsetof(struct ms_shim_counters, frees)},
        {"live_bytes", offsetof(struct ms_shim_counters, live_bytes)},
        {"host_allocs", offsetof(struct ms_shim_counters, host_allocs)},
        {"stream_memops", offsetof(struct ms_shim_counters, stream_memops)},
        {"host_funcs", offsetof(struct ms_shim_counters, host_funcs)},
        {"ipc_opens", offsetof(struct ms_shim_counters, ipc_opens)},
        {"host_live_bytes", offsetof(struct ms_shim_counters, host_live_bytes)},
        {"peak_bytes", offsetof(struct ms_shim_counters, peak_bytes)},
        {"copies", offsetof(struct ms_shim_counters, copies)},
        {"memsets", offsetof(struct ms_shim_counters, memsets)},
    };
    for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].name) == 0)
            return *(const uint64_t *)((const char *)&c + names[i].off);
    return UINT64_MAX;
}

void ms__shim_events_exit(bool verbose)
{
    struct ms_shim_counters c;
    ms__rec_trace_drain(true);
    ms_lock(&ms__events_lock);
    ms__rec_trace_flush();
    c = ms__rec_ctr;
    ms_unlock(&ms__events_lock);
    if (!verbose)
        return;
    const struct {
        const char *key;
        uint64_t v;
    } f[] = {
        {"inits", c.inits},
        {"launches", c.launches},
        {"launch_kernel", c.launches_kind[MS_SHIM_LAUNCH_KERNEL]},
        {"launch_ex", c.launches_kind[MS_SHIM_LAUNCH_EX]},
        {"launch_coop", c.launches_kind[MS_SHIM_LAUNCH_COOP]},
        {"unknown_layout", c.launches_unknown},
        {"graph_launches", c.graph_launches},
        {"allocs", c.allocs},
        {"alloc_bytes", c.alloc_bytes},
        {"frees", c.frees},
        {"frees_unknown", c.frees_unknown},
        {"live_bytes", c.live_bytes},
        {"host_allocs", c.host_allocs},
        {"stream_memops", c.stream_memops},
        {"host_funcs", c.host_funcs},
        {"ipc_opens", c.ipc_opens},
        {"host_live_bytes", c.host_live_bytes},
        {"peak_bytes", c.peak_bytes},
        {"copies", c.copies},
        {"copy_bytes", c.copy_bytes},
        {"memsets", c.memsets},
        {"memset_bytes", c.memset_bytes},
        {"syncs", c.syncs},
        {"meminfo", c.meminfo},
        {"procaddr", c.procaddr},
        {"procaddr_hooked", c.procaddr_hooked},
        {"dlsym_hooked", c.dlsym_hooked},
        {"trace_records", c.trace_records},
        {"trace_dropped", c.trace_dropped},
    };
    char line[1024];
    size_t n = 0;
    for (size_t i = 0; i < MS_ARRAY_LEN(f) && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, " %s=%llu", f[i].key,
                              (unsigned long long)f[i].v);
    ms__shim_log("summary%s", line);
}

void ms__shim_events_atfork_child(void)
{
    /* Called with a fresh, unlocked ms__events_lock and no other thread alive. */
    memset(&ms__rec_ctr, 0, sizeof ms__rec_ctr);
    nallocs = 0;
    if (ms__rec_tr.fd >= 0)
        close(ms__rec_tr.fd);
    ms__rec_tr.fd = -1;
    ms__rec_tr.opened = true; /* the child does not trace: the file belongs to the parent */
    ms__rec_tr.len = 0;
    ms__rec_timing_on = false;
    ms__rec_pq.head = ms__rec_pq.n =
        0; /* the parent's queued records and events are not the child's */
    ms__rec_pq.npool = 0;
    ms__rec_pq.draining = false;
    ms__rec_tl.seq = 0;
    ms__rec_tl.ev0 = ms__rec_tl.ev1 = NULL;
}
