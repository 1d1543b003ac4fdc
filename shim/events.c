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
 * Invariants
 *   - allocs[] is sorted by base with no two entries at the same base; counters.live_bytes is
 *     the sum of their sizes.
 *   - tr.fd >= 0 only in the process that opened the trace (a forked child never writes it).
 */
#include "shim/shim_int.h"
#include "shim/locks.h"

#include "core/trace.h"
#include "shim/shim_events.h"
#include "shim/engine.h"

#include <stddef.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACE_BUF_BYTES (256u * 1024u) /* written out when this much is pending */
#define TRACE_LINE_BYTES (48u * 1024u) /* longest record the shim writes is about 32 KiB */

struct alloc {
    uint64_t base;
    uint64_t bytes;
    uint8_t kind; /* enum ms_region_kind */
};

struct stream_id {
    const void *handle; /* NULL: free slot */
    uint32_t id;
};

static struct ms_shim_counters ctr;
static struct alloc *allocs;
static size_t nallocs, capallocs;
static struct stream_id *sids;
static size_t nsids, capsids; /* capsids: 0 or a power of two */
static uint32_t next_sid = 1;
static _Thread_local uint32_t ptds_sid; /* this thread's per-thread stream id, 0 until used */

static struct {
    char path[4096]; /* empty: no trace */
    bool configured; /* ms__shim_events_init ran (path is final) */
    int fd;          /* -1 until opened, or after a failure */
    bool opened;     /* an open was attempted (success or not) */
    char *buf;       /* pending output */
    size_t len;
    char *line; /* one formatted record */
    uint32_t task;
} tr = {.fd = -1};

/* Records waiting for their kernel's end event, in order (ms__events_lock held). */
struct pend {
    struct ms_trace_rec rec; /* name, params, layout: owned copies */
    CUevent ev0, ev1;        /* timed: recorded around the real launch */
    uint64_t seq;
    bool timed, ended; /* ended: nothing more will be recorded for it */
};
static struct {
    struct pend *v;
    size_t head, n, cap;
    uint64_t next_seq;
    bool draining;
    CUevent *pool; /* idle timing events */
    size_t npool, cappool;
} pq = {.next_seq = 1};
static bool timing_on; /* the trace is open: time kernels (atomic) */
static _Thread_local struct {
    uint64_t seq; /* this thread's launch awaiting its events (0: none) */
    CUevent ev0, ev1;
    CUstream stream;
} tl;

#define PQ_DRAIN 4096 /* queued records that start a non-blocking drain */
#define PQ_MAX 65536  /* ... and a blocking one */

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
    return kind == MS_RK_HOST ? &ctr.host_live_bytes : &ctr.live_bytes;
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
            struct alloc *p = realloc(allocs, ncap * sizeof *p);
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
    if (ctr.live_bytes > ctr.peak_bytes)
        ctr.peak_bytes = ctr.live_bytes;
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

static size_t sid_hash(const void *h, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static uint32_t stream_id(struct ms_shim_stream s)
{
    const void *h = s.handle;
    if ((!h && !s.per_thread) || h == (const void *)CU_STREAM_LEGACY)
        return 0;
    if (!h || h == (const void *)CU_STREAM_PER_THREAD) {
        if (!ptds_sid)
            ptds_sid = next_sid++;
        return ptds_sid;
    }
    if (nsids + 1 > capsids / 2) {
        size_t ncap = capsids ? capsids * 2 : 64;
        struct stream_id *n = calloc(ncap, sizeof *n);
        if (!n) {
            MS_LOG_ONCE("out of memory numbering streams; using id 0");
            return 0;
        }
        for (size_t i = 0; i < capsids; i++) {
            if (!sids[i].handle)
                continue;
            size_t j = sid_hash(sids[i].handle, ncap);
            while (n[j].handle)
                j = (j + 1) & (ncap - 1);
            n[j] = sids[i];
        }
        free(sids);
        sids = n;
        capsids = ncap;
    }
    size_t j = sid_hash(h, capsids);
    while (sids[j].handle && sids[j].handle != h)
        j = (j + 1) & (capsids - 1);
    if (!sids[j].handle) {
        sids[j].handle = h;
        sids[j].id = next_sid++;
        nsids++;
    }
    return sids[j].id;
}

/* ------------------------------------------------------------------------------------------ */
/* Trace (ms__events_lock held)                                                                   */

static void trace_fail(const char *what)
{
    ms__shim_log("trace %s: %s %s; tracing stops", tr.path, what, strerror(errno));
    if (tr.fd >= 0)
        close(tr.fd);
    tr.fd = -1;
    tr.len = 0;
}

static void trace_flush(void)
{
    size_t off = 0;
    while (tr.fd >= 0 && off < tr.len) {
        ssize_t w = write(tr.fd, tr.buf + off, tr.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            trace_fail("write failed:");
            return;
        }
        off += (size_t)w;
    }
    tr.len = 0;
}

static void trace_put_now(const struct ms_trace_rec *rec);

static struct pend *pq_find(uint64_t seq)
{
    if (!pq.n || seq < pq.v[pq.head].seq || seq - pq.v[pq.head].seq >= pq.n)
        return NULL;
    return &pq.v[pq.head + (seq - pq.v[pq.head].seq)];
}

/* Queue a deep copy of rec; NULL when out of memory (the record is then written now). */
static struct pend *pq_push(const struct ms_trace_rec *rec)
{
    if (pq.head && pq.head + pq.n == pq.cap) {
        memmove(pq.v, pq.v + pq.head, pq.n * sizeof(*pq.v));
        pq.head = 0;
    }
    if (pq.head + pq.n == pq.cap) {
        size_t cap = pq.cap ? pq.cap * 2 : 256;
        struct pend *v = realloc(pq.v, cap * sizeof(*v));
        if (!v)
            return NULL;
        pq.v = v;
        pq.cap = cap;
    }
    struct pend *p = &pq.v[pq.head + pq.n];
    memset(p, 0, sizeof(*p));
    p->rec = *rec;
    p->rec.name = rec->name ? strdup(rec->name) : NULL;
    p->rec.params = NULL;
    p->rec.layout = NULL;
    uint8_t *params = rec->params_len ? malloc(rec->params_len) : NULL;
    struct ms_param_layout *lay = rec->nlayout ? malloc(rec->nlayout * sizeof(*lay)) : NULL;
    if ((rec->name && !p->rec.name) || (rec->params_len && !params) || (rec->nlayout && !lay)) {
        free((void *)p->rec.name);
        free(params);
        free(lay);
        return NULL;
    }
    if (params)
        memcpy(params, rec->params, rec->params_len);
    if (lay)
        memcpy(lay, rec->layout, rec->nlayout * sizeof(*lay));
    p->rec.params = params;
    p->rec.layout = lay;
    p->seq = pq.next_seq++;
    p->ended = true;
    pq.n++;
    return p;
}

static void pend_free(struct pend *p)
{
    free((void *)p->rec.name);
    free((void *)p->rec.params);
    free((void *)p->rec.layout);
}

static void pool_put(CUevent e)
{
    if (!e)
        return;
    if (ms_grow((void **)&pq.pool, &pq.cappool, pq.npool + 1, sizeof(*pq.pool)) == MS_OK)
        pq.pool[pq.npool++] = e;
    /* else the event leaks: a handful at most, only when memory is short */
}

/* A record: behind the queue when records are waiting, else straight to the buffer. */
static void trace_put(const struct ms_trace_rec *rec)
{
    if (pq.n && pq_push(rec))
        return;
    trace_put_now(rec);
}

/*
 * Write the queued records whose kernels have finished, in order (called without the lock).
 * wait: block for each kernel (exit); else stop at the first one still running.
 */
static void trace_drain(bool wait)
{
    ms_lock(&ms__events_lock);
    if (pq.draining || !pq.n) {
        ms_unlock(&ms__events_lock);
        return;
    }
    pq.draining = true;
    size_t n = 0;
    while (n < pq.n && pq.v[pq.head + n].ended)
        n++;
    struct pend *batch = n ? malloc(n * sizeof(*batch)) : NULL;
    if (batch)
        memcpy(batch, pq.v + pq.head, n * sizeof(*batch));
    else
        n = 0;
    ms_unlock(&ms__events_lock);
    size_t done = 0;
    for (; done < n; done++) {
        struct pend *p = &batch[done];
        if (!p->timed)
            continue;
        CUresult r = wait ? MS_REAL(cuEventSynchronize)(p->ev1) : MS_REAL(cuEventQuery)(p->ev1);
        if (r == CUDA_ERROR_NOT_READY)
            break;
        float ms = 0;
        if (r == CUDA_SUCCESS &&
            MS_REAL(cuEventElapsedTime_v2)(&ms, p->ev0, p->ev1) == CUDA_SUCCESS && ms > 0)
            p->rec.dur_ns = (uint64_t)((double)ms * 1e6);
    }
    ms_lock(&ms__events_lock);
    for (size_t i = 0; i < done; i++) {
        trace_put_now(&batch[i].rec);
        pend_free(&batch[i]);
        pool_put(batch[i].ev0);
        pool_put(batch[i].ev1);
    }
    pq.head += done;
    pq.n -= done;
    if (!pq.n)
        pq.head = 0;
    pq.draining = false;
    if (wait)
        trace_flush();
    ms_unlock(&ms__events_lock);
    free(batch);
}

static void trace_put_now(const struct ms_trace_rec *rec)
{
    int n = ms_trace_format(rec, tr.line, TRACE_LINE_BYTES);
    if (n < 0) {
        ctr.trace_dropped++;
        MS_LOG_ONCE("trace: cannot format a record of kind %d: %s", (int)rec->kind, ms_strerror(n));
        return;
    }
    if (tr.len + (size_t)n > TRACE_BUF_BYTES)
        trace_flush();
    if (tr.fd < 0)
        return;
    memcpy(tr.buf + tr.len, tr.line, (size_t)n);
    tr.len += (size_t)n;
    ctr.trace_records++;
}

/* Copy path into out, replacing each "%p" with the pid. */
static bool expand_path(const char *path, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = path; *p; p++) {
        char pid[24];
        const char *piece = p;
        size_t len = 1;
        if (p[0] == '%' && p[1] == 'p') {
            len = (size_t)snprintf(pid, sizeof pid, "%d", (int)getpid());
            piece = pid;
            p++;
        }
        if (n + len >= cap)
            return false;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return true;
}

/* True when records can be written; opens the trace at the first call. */
static bool trace_ready(void)
{
    if (tr.opened)
        return tr.fd >= 0;
    if (!tr.configured)
        return false; /* an event before initialisation finished: not yet */
    tr.opened = true;
    if (!tr.path[0])
        return false;
    char path[sizeof tr.path];
    if (!expand_path(tr.path, path, sizeof path)) {
        ms__shim_log("trace path %s is too long; not tracing", tr.path);
        return false;
    }
    tr.buf = malloc(TRACE_BUF_BYTES);
    tr.line = malloc(TRACE_LINE_BYTES);
    if (!tr.buf || !tr.line) {
        ms__shim_log("out of memory for the trace buffers; not tracing");
        return false;
    }
    tr.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tr.fd < 0) {
        ms__shim_log("cannot open trace %s: %s; not tracing", path, strerror(errno));
        return false;
    }
    tr.task = (uint32_t)getpid();
    struct ms_trace_rec rec = {.kind = MS_TR_HEADER, .version = MS_TRACE_VERSION};
    trace_put(&rec);
    char name[MS_TRACE_MAX_NAME];
    snprintf(name, sizeof name, "%s", program_invocation_short_name);
    rec = (struct ms_trace_rec){.kind = MS_TR_TASK, .task = tr.task, .name = name};
    trace_put(&rec);
    __atomic_store_n(&timing_on, tr.fd >= 0, __ATOMIC_RELEASE);
    return tr.fd >= 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Events                                                                                       */

void ms__shim_events_init(const char *trace_path)
{
    ms_lock(&ms__events_lock);
    tr.configured = true;
    if (trace_path && strlen(trace_path) < sizeof tr.path)
        strcpy(tr.path, trace_path);
    else if (trace_path)
        ms__shim_log("MSCHED_TRACE is too long; not tracing");
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_init(unsigned int flags)
{
    (void)flags;
    ms_lock(&ms__events_lock);
    ctr.inits++;
    trace_ready();
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_alloc(uint64_t ptr, uint64_t bytes, enum ms_region_kind kind)
{
    ms_lock(&ms__events_lock);
    if (kind == MS_RK_HOST) {
        ctr.host_allocs++;
    } else {
        ctr.allocs++;
        ctr.alloc_bytes += bytes;
    }
    alloc_insert(ptr, bytes, kind);
    if (trace_ready() && ptr != 0 && bytes != 0) {
        struct ms_trace_rec rec = {
            .kind = MS_TR_ALLOC, .task = tr.task, .addr = ptr, .size = bytes, .rkind = kind};
        trace_put(&rec);
    }
    ms_unlock(&ms__events_lock);
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
        if (trace_ready()) {
            struct ms_trace_rec rec = {.kind = MS_TR_FREE, .task = tr.task, .addr = ptr};
            trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
    return known;
}

void ms_shim_on_free_end(uint64_t ptr, const struct ms_shim_alloc *was, bool freed)
{
    if (ptr == 0)
        return;
    ms_lock(&ms__events_lock);
    if (freed && was) {
        if (was->kind != MS_RK_HOST)
            ctr.frees++; /* host frees show in host_live_bytes */
    } else if (freed) {
        ctr.frees_unknown++;
        MS_LOG_ONCE("free of %#llx, which the shim never saw allocated", (unsigned long long)ptr);
    } else if (was) {
        /* The driver kept it: back into the books, and into the trace after its free record. */
        alloc_insert(was->ptr, was->bytes, was->kind);
        if (trace_ready()) {
            struct ms_trace_rec rec = {.kind = MS_TR_ALLOC,
                                       .task = tr.task,
                                       .addr = was->ptr,
                                       .size = was->bytes,
                                       .rkind = was->kind};
            trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
}

static void trace_launch(const struct ms_shim_launch *l, bool timed)
{
    struct ms_trace_rec rec = {.kind = MS_TR_KERNEL, .task = tr.task};
    rec.stream = stream_id(l->stream);
    for (int i = 0; i < 3; i++) {
        rec.grid[i] = l->grid[i];
        rec.block[i] = l->block[i];
        if (!rec.grid[i] || !rec.block[i])
            return; /* the driver refuses such a launch; nothing ran */
    }
    char name[MS_TRACE_MAX_NAME];
    size_t nlen = strlen(l->name);
    if (nlen >= sizeof name) {
        ctr.trace_dropped++;
        nlen = sizeof name - 1;
    }
    memcpy(name, l->name, nlen);
    name[nlen] = '\0';
    rec.name = name;
    if (l->params_known && l->params_len <= MS_TRACE_MAX_PARAMS) {
        rec.params = l->params;
        rec.params_len = l->params_len;
        bool fits = l->layout && l->nlayout <= MS_TRACE_MAX_LAYOUT;
        for (size_t i = 0; fits && i < l->nlayout; i++)
            fits = (uint64_t)l->layout[i].offset + l->layout[i].size <= l->params_len;
        if (fits) {
            rec.layout = l->layout;
            rec.nlayout = l->nlayout;
        }
    } else if (l->params_known) {
        ctr.trace_dropped++;
        MS_LOG_ONCE("trace: %zu parameter bytes of %s exceed the format's %u; written without",
                    l->params_len, l->name, MS_TRACE_MAX_PARAMS);
    }
    struct pend *p = timed ? pq_push(&rec) : NULL;
    if (!p) {
        trace_put(&rec);
        return;
    }
    p->timed = true;
    p->ended = false; /* its events are recorded around the real call */
    p->ev0 = tl.ev0;
    p->ev1 = tl.ev1;
    tl.seq = p->seq;
    tl.ev0 = tl.ev1 = NULL;
}

/* The stream handle a launch's events go on. */
static CUstream event_stream(struct ms_shim_stream s)
{
    if (!s.handle && s.per_thread)
        return CU_STREAM_PER_THREAD;
    return (CUstream)s.handle;
}

/* Two events for timing a launch on s (outside the lock); false: do not time it. */
static bool timing_prepare(struct ms_shim_stream s)
{
    if (!__atomic_load_n(&timing_on, __ATOMIC_ACQUIRE))
        return false;
    CUstream st = event_stream(s);
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = MS_REAL(cuStreamIsCapturing)(st, &cap);
    if ((r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND) || cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return false; /* events would become graph nodes */
    CUevent e[2] = {NULL, NULL};
    ms_lock(&ms__events_lock);
    for (int i = 0; i < 2 && pq.npool; i++)
        e[i] = pq.pool[--pq.npool];
    ms_unlock(&ms__events_lock);
    for (int i = 0; i < 2; i++)
        if (!e[i] && MS_REAL(cuEventCreate)(&e[i], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            e[i] = NULL;
    if (!e[0] || !e[1]) {
        ms_lock(&ms__events_lock);
        pool_put(e[0]);
        pool_put(e[1]);
        ms_unlock(&ms__events_lock);
        return false;
    }
    tl.ev0 = e[0];
    tl.ev1 = e[1];
    tl.stream = st;
    return true;
}

/* The launch is about to be forwarded (gate 0) or refused: record its start, or give up. */
static void timing_start(int gate)
{
    if (!tl.seq)
        return;
    struct pend *p;
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (gate == 0) {
        ms_lock(&ms__events_lock);
        p = pq_find(tl.seq);
        CUevent e0 = p ? p->ev0 : NULL;
        ms_unlock(&ms__events_lock);
        r = e0 ? MS_REAL(cuEventRecord)(e0, tl.stream) : CUDA_ERROR_UNKNOWN;
    }
    if (r != CUDA_SUCCESS) {
        ms_lock(&ms__events_lock);
        if ((p = pq_find(tl.seq)) != NULL) {
            p->timed = false;
            p->ended = true;
        }
        ms_unlock(&ms__events_lock);
        tl.seq = 0;
    }
}

/* The real call returned: record the end (outside the lock); the record may now be written. */
static void timing_end(void)
{
    if (!tl.seq)
        return;
    ms_lock(&ms__events_lock);
    struct pend *p = pq_find(tl.seq);
    CUevent e1 = p ? p->ev1 : NULL;
    ms_unlock(&ms__events_lock);
    CUresult r = e1 ? MS_REAL(cuEventRecord)(e1, tl.stream) : CUDA_ERROR_UNKNOWN;
    ms_lock(&ms__events_lock);
    if ((p = pq_find(tl.seq)) != NULL) {
        p->timed = r == CUDA_SUCCESS;
        p->ended = true;
    }
    size_t queued = pq.n;
    ms_unlock(&ms__events_lock);
    tl.seq = 0;
    if (queued >= PQ_DRAIN)
        trace_drain(queued >= PQ_MAX);
}

int ms_shim_on_launch(const struct ms_shim_launch *l)
{
    bool timed = timing_prepare(l->stream);
    ms_lock(&ms__events_lock);
    ctr.launches++;
    if ((unsigned)l->kind < MS_SHIM_LAUNCH_KINDS)
        ctr.launches_kind[l->kind]++;
    if (!l->layout)
        ctr.launches_unknown++;
    if (trace_ready())
        trace_launch(l, timed);
    if (tl.ev0 || tl.ev1) { /* not queued: the events go back */
        pool_put(tl.ev0);
        pool_put(tl.ev1);
        tl.ev0 = tl.ev1 = NULL;
    }
    ms_unlock(&ms__events_lock);
    int gate = ms_engine_gate_launch(l);
    timing_start(gate);
    return gate;
}

int ms_shim_on_graph_launch(const void *exec, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ctr.graph_launches++;
    ms_unlock(&ms__events_lock);
    return ms_engine_gate_graph(exec, s);
}

int ms_shim_on_copy(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                    struct ms_shim_stream s)
{
    return ms_shim_on_copy_ex(dst, src, bytes, kind, s, true);
}

int ms_shim_on_copy_ex(uint64_t dst, uint64_t src, uint64_t bytes, enum ms_shim_copy_kind kind,
                       struct ms_shim_stream s, bool contiguous)
{
    ms_lock(&ms__events_lock);
    ctr.copies++;
    ctr.copy_bytes += bytes;
    if (trace_ready()) {
        enum ms_copy_dir dir = (enum ms_copy_dir)kind;
        if (kind == MS_SHIM_COPY_UNIFIED) {
            bool d = is_device(dst), sdev = is_device(src);
            dir = d ? (sdev ? MS_COPY_D2D : MS_COPY_H2D) : (sdev ? MS_COPY_D2H : MS_COPY_H2H);
        }
        struct ms_trace_rec rec = {.kind = MS_TR_COPY,
                                   .task = tr.task,
                                   .stream = stream_id(s),
                                   .dir = dir,
                                   .dst = dst,
                                   .src = src,
                                   .size = bytes};
        trace_put(&rec);
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
    return rc;
}

int ms_shim_on_copy_batch(const unsigned long long *dst, const unsigned long long *src,
                          const size_t *bytes, size_t n, struct ms_shim_stream s)
{
    if (!dst || !src || !bytes || n == 0 || n > (SIZE_MAX / 2) / sizeof(uint64_t))
        return 0; /* the driver rejects it */
    ms_lock(&ms__events_lock);
    for (size_t i = 0; i < n; i++) {
        ctr.copies++;
        ctr.copy_bytes += bytes[i];
        if (trace_ready()) {
            bool d = is_device(dst[i]), sdev = is_device(src[i]);
            struct ms_trace_rec rec = {.kind = MS_TR_COPY,
                                       .task = tr.task,
                                       .stream = stream_id(s),
                                       .dir = d ? (sdev ? MS_COPY_D2D : MS_COPY_H2D)
                                                : (sdev ? MS_COPY_D2H : MS_COPY_H2H),
                                       .dst = dst[i],
                                       .src = src[i],
                                       .size = bytes[i]};
            trace_put(&rec);
        }
    }
    ms_unlock(&ms__events_lock);
    /* Both sides of every pair at once (host addresses fall outside every region). */
    uint64_t *a = malloc(2 * n * sizeof(*a)), *b = malloc(2 * n * sizeof(*b));
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
    free(a);
    free(b);
    return rc;
}

int ms_shim_on_memop(uint64_t addr, uint64_t bytes, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ctr.stream_memops++;
    ms_unlock(&ms__events_lock);
    return bytes ? ms_engine_gate_range(addr, bytes, s) : ms_engine_gate_unbounded(s);
}

void ms_shim_on_ipc_open(void)
{
    ms_lock(&ms__events_lock);
    ctr.ipc_opens++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_host_func(void)
{
    ms_lock(&ms__events_lock);
    ctr.host_funcs++;
    ms_unlock(&ms__events_lock);
}

int ms_shim_on_memset(uint64_t dst, uint64_t bytes, struct ms_shim_stream s)
{
    ms_lock(&ms__events_lock);
    ctr.memsets++;
    ctr.memset_bytes += bytes;
    if (trace_ready()) {
        struct ms_trace_rec rec = {.kind = MS_TR_MEMSET,
                                   .task = tr.task,
                                   .stream = stream_id(s),
                                   .addr = dst,
                                   .size = bytes};
        trace_put(&rec);
    }
    ms_unlock(&ms__events_lock);
    return ms_engine_gate_range(dst, bytes, s);
}

/* MS_GATED's cleanup: the hook's forwarded call (if any) has returned. */
void ms__shim_gate_end(int *gate)
{
    (void)gate;
    timing_end();
    ms_engine_gate_end();
}

void ms_shim_on_sync(void)
{
    ms_lock(&ms__events_lock);
    ctr.syncs++;
    bool tracing = trace_ready();
    if (tracing) {
        struct ms_trace_rec rec = {.kind = MS_TR_SYNC, .task = tr.task};
        trace_put(&rec);
        trace_flush();
    }
    ms_unlock(&ms__events_lock);
    if (tracing)
        trace_drain(false); /* after a synchronisation most queued kernels have finished */
}

void ms_shim_on_meminfo(uint64_t free_bytes, uint64_t total_bytes)
{
    (void)free_bytes;
    (void)total_bytes;
    ms_lock(&ms__events_lock);
    ctr.meminfo++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_procaddr(bool hooked)
{
    ms_lock(&ms__events_lock);
    ctr.procaddr++;
    ctr.procaddr_hooked += hooked;
    ms_unlock(&ms__events_lock);
}

void ms_shim_on_dlsym_hooked(void)
{
    ms_lock(&ms__events_lock);
    ctr.dlsym_hooked++;
    ms_unlock(&ms__events_lock);
}

void ms_shim_counters_get(struct ms_shim_counters *out)
{
    ms_lock(&ms__events_lock);
    *out = ctr;
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

/* ------------------------------------------------------------------------------------------ */
/* Process life                                                                                 */

void ms__shim_events_exit(bool verbose)
{
    struct ms_shim_counters c;
    trace_drain(true);
    ms_lock(&ms__events_lock);
    trace_flush();
    c = ctr;
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
    memset(&ctr, 0, sizeof ctr);
    nallocs = 0;
    if (tr.fd >= 0)
        close(tr.fd);
    tr.fd = -1;
    tr.opened = true; /* the child does not trace: the file belongs to the parent */
    tr.len = 0;
    timing_on = false;
    pq.head = pq.n = 0; /* the parent's queued records and events are not the child's */
    pq.npool = 0;
    pq.draining = false;
    tl.seq = 0;
    tl.ev0 = tl.ev1 = NULL;
}
