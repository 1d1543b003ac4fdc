/*
 * recorder.c - the trace recorder (MSCHED_TRACE): stream ids, records in order, kernel timing
 * (design: events.c; shared state: recorder.h).
 */
#include "shim/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ms_shim_counters ms__rec_ctr;
struct stream_id *ms__rec_sids;
size_t ms__rec_nsids, ms__rec_capsids;
uint32_t ms__rec_next_sid = 1;
_Thread_local uint32_t ms__rec_ptds_sid;
struct ms_rec_trace ms__rec_tr = {.fd = -1};
struct ms_rec_queue ms__rec_pq = {.next_seq = 1};
bool ms__rec_timing_on;
_Thread_local struct ms_rec_thread ms__rec_tl;

/* The stream handle a launch's events go on. */
static CUstream event_stream(struct ms_shim_stream s)
{
    if (!s.handle && s.per_thread)
        return CU_STREAM_PER_THREAD;
    return (CUstream)s.handle;
}

size_t ms__rec_sid_hash(const void *h, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

uint32_t ms__rec_stream_id(struct ms_shim_stream s)
{
    const void *h = s.handle;
    if ((!h && !s.per_thread) || h == (const void *)CU_STREAM_LEGACY)
        return 0;
    if (!h || h == (const void *)CU_STREAM_PER_THREAD) {
        if (!ms__rec_ptds_sid)
            ms__rec_ptds_sid = ms__rec_next_sid++;
        return ms__rec_ptds_sid;
    }
    if (ms__rec_nsids + 1 > ms__rec_capsids / 2) {
        size_t ncap = ms__rec_capsids ? ms__rec_capsids * 2 : 64;
        struct stream_id *n = ms_calloc(ncap, sizeof *n);
        if (!n) {
            MS_LOG_ONCE("out of memory numbering streams; using id 0");
            return 0;
        }
        for (size_t i = 0; i < ms__rec_capsids; i++) {
            if (!ms__rec_sids[i].handle)
                continue;
            size_t j = ms__rec_sid_hash(ms__rec_sids[i].handle, ncap);
            while (n[j].handle)
                j = (j + 1) & (ncap - 1);
            n[j] = ms__rec_sids[i];
        }
        ms_free(ms__rec_sids);
        ms__rec_sids = n;
        ms__rec_capsids = ncap;
    }
    size_t j = ms__rec_sid_hash(h, ms__rec_capsids);
    while (ms__rec_sids[j].handle && ms__rec_sids[j].handle != h)
        j = (j + 1) & (ms__rec_capsids - 1);
    if (!ms__rec_sids[j].handle) {
        ms__rec_sids[j].handle = h;
        ms__rec_sids[j].id = ms__rec_next_sid++;
        ms__rec_nsids++;
    }
    return ms__rec_sids[j].id;
}

void ms__rec_trace_fail(const char *what)
{
    ms__shim_log("trace %s: %s %s; tracing stops", ms__rec_tr.path, what, strerror(errno));
    if (ms__rec_tr.fd >= 0)
        close(ms__rec_tr.fd);
    ms__rec_tr.fd = -1;
    ms__rec_tr.len = 0;
}

void ms__rec_trace_flush(void)
{
    size_t off = 0;
    while (ms__rec_tr.fd >= 0 && off < ms__rec_tr.len) {
        ssize_t w = write(ms__rec_tr.fd, ms__rec_tr.buf + off, ms__rec_tr.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            ms__rec_trace_fail("write failed:");
            return;
        }
        off += (size_t)w;
    }
    ms__rec_tr.len = 0;
}

struct pend *ms__rec_pq_find(uint64_t seq)
{
    if (!ms__rec_pq.n || seq < ms__rec_pq.v[ms__rec_pq.head].seq ||
        seq - ms__rec_pq.v[ms__rec_pq.head].seq >= ms__rec_pq.n)
        return NULL;
    return &ms__rec_pq.v[ms__rec_pq.head + (seq - ms__rec_pq.v[ms__rec_pq.head].seq)];
}

/* Queue a deep copy of rec; NULL when out of memory (the record is then written now). */
struct pend *ms__rec_pq_push(const struct ms_trace_rec *rec)
{
    if (ms__rec_pq.head && ms__rec_pq.head + ms__rec_pq.n == ms__rec_pq.cap) {
        memmove(ms__rec_pq.v, ms__rec_pq.v + ms__rec_pq.head, ms__rec_pq.n * sizeof(*ms__rec_pq.v));
        ms__rec_pq.head = 0;
    }
    if (ms__rec_pq.head + ms__rec_pq.n == ms__rec_pq.cap) {
        size_t cap = ms__rec_pq.cap ? ms__rec_pq.cap * 2 : 256;
        struct pend *v = ms_realloc(ms__rec_pq.v, cap * sizeof(*v));
        if (!v)
            return NULL;
        ms__rec_pq.v = v;
        ms__rec_pq.cap = cap;
    }
    struct pend *p = &ms__rec_pq.v[ms__rec_pq.head + ms__rec_pq.n];
    memset(p, 0, sizeof(*p));
    p->rec = *rec;
    p->rec.name = rec->name ? ms_strdup(rec->name) : NULL;
    p->rec.params = NULL;
    p->rec.layout = NULL;
    uint8_t *params = rec->params_len ? ms_malloc(rec->params_len) : NULL;
    struct ms_param_layout *lay = rec->nlayout ? ms_malloc(rec->nlayout * sizeof(*lay)) : NULL;
    if ((rec->name && !p->rec.name) || (rec->params_len && !params) || (rec->nlayout && !lay)) {
        ms_free((void *)p->rec.name);
        ms_free(params);
        ms_free(lay);
        return NULL;
    }
    if (params)
        memcpy(params, rec->params, rec->params_len);
    if (lay)
        memcpy(lay, rec->layout, rec->nlayout * sizeof(*lay));
    p->rec.params = params;
    p->rec.layout = lay;
    p->seq = ms__rec_pq.next_seq++;
    p->ended = true;
    ms__rec_pq.n++;
    return p;
}

void ms__rec_pend_free(struct pend *p)
{
    ms_free((void *)p->rec.name);
    ms_free((void *)p->rec.params);
    ms_free((void *)p->rec.layout);
}

void ms__rec_pool_put(CUevent e)
{
    if (!e)
        return;
    if (ms_grow((void **)&ms__rec_pq.pool, &ms__rec_pq.cappool, ms__rec_pq.npool + 1,
                sizeof(*ms__rec_pq.pool)) == MS_OK)
        ms__rec_pq.pool[ms__rec_pq.npool++] = e;
    /* else the event leaks: a handful at most, only when memory is short */
}

/* A record: behind the queue when records are waiting, else straight to the buffer. */
void ms__rec_trace_put(const struct ms_trace_rec *rec)
{
    if (ms__rec_pq.n && ms__rec_pq_push(rec))
        return;
    ms__rec_trace_put_now(rec);
}

/*
 * Write the queued records whose kernels have finished, in order (called without the lock).
 * wait: block for each kernel (exit); else stop at the first one still running.
 */
void ms__rec_trace_drain(bool wait)
{
    ms_lock(&ms__events_lock);
    if (ms__rec_pq.draining || !ms__rec_pq.n) {
        ms_unlock(&ms__events_lock);
        return;
    }
    ms__rec_pq.draining = true;
    size_t n = 0;
    while (n < ms__rec_pq.n && ms__rec_pq.v[ms__rec_pq.head + n].ended)
        n++;
    struct pend *batch = n ? ms_malloc(n * sizeof(*batch)) : NULL;
    if (batch)
        memcpy(batch, ms__rec_pq.v + ms__rec_pq.head, n * sizeof(*batch));
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
        ms__rec_trace_put_now(&batch[i].rec);
        ms__rec_pend_free(&batch[i]);
        ms__rec_pool_put(batch[i].ev0);
        ms__rec_pool_put(batch[i].ev1);
    }
    ms__rec_pq.head += done;
    ms__rec_pq.n -= done;
    if (!ms__rec_pq.n)
        ms__rec_pq.head = 0;
    ms__rec_pq.draining = false;
    if (wait)
        ms__rec_trace_flush();
    ms_unlock(&ms__events_lock);
    ms_free(batch);
}

void ms__rec_trace_put_now(const struct ms_trace_rec *rec)
{
    int n = ms_trace_format(rec, ms__rec_tr.line, TRACE_LINE_BYTES);
    if (n < 0) {
        ms__rec_ctr.trace_dropped++;
        MS_LOG_ONCE("trace: cannot format a record of kind %d: %s", (int)rec->kind, ms_strerror(n));
        return;
    }
    if (ms__rec_tr.len + (size_t)n > TRACE_BUF_BYTES)
        ms__rec_trace_flush();
    if (ms__rec_tr.fd < 0)
        return;
    memcpy(ms__rec_tr.buf + ms__rec_tr.len, ms__rec_tr.line, (size_t)n);
    ms__rec_tr.len += (size_t)n;
    ms__rec_ctr.trace_records++;
}

/* Copy path into out, replacing each "%p" with the pid. */
bool ms__rec_expand_path(const char *path, char *out, size_t cap)
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
bool ms__rec_trace_ready(void)
{
    if (ms__rec_tr.opened)
        return ms__rec_tr.fd >= 0;
    if (!ms__rec_tr.configured)
        return false; /* an event before initialisation finished: not yet */
    ms__rec_tr.opened = true;
    if (!ms__rec_tr.path[0])
        return false;
    char path[sizeof ms__rec_tr.path];
    if (!ms__rec_expand_path(ms__rec_tr.path, path, sizeof path)) {
        ms__shim_log("trace path %s is too long; not tracing", ms__rec_tr.path);
        return false;
    }
    ms__rec_tr.buf = ms_malloc(TRACE_BUF_BYTES);
    ms__rec_tr.line = ms_malloc(TRACE_LINE_BYTES);
    if (!ms__rec_tr.buf || !ms__rec_tr.line) {
        ms__shim_log("out of memory for the trace buffers; not tracing");
        return false;
    }
    ms__rec_tr.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (ms__rec_tr.fd < 0) {
        ms__shim_log("cannot open trace %s: %s; not tracing", path, strerror(errno));
        return false;
    }
    ms__rec_tr.task = (uint32_t)getpid();
    struct ms_trace_rec rec = {.kind = MS_TR_HEADER, .version = MS_TRACE_VERSION};
    ms__rec_trace_put(&rec);
    char name[MS_TRACE_MAX_NAME];
    snprintf(name, sizeof name, "%s", program_invocation_short_name);
    rec = (struct ms_trace_rec){.kind = MS_TR_TASK, .task = ms__rec_tr.task, .name = name};
    ms__rec_trace_put(&rec);
    __atomic_store_n(&ms__rec_timing_on, ms__rec_tr.fd >= 0, __ATOMIC_RELEASE);
    return ms__rec_tr.fd >= 0;
}

void ms__rec_trace_launch(const struct ms_shim_launch *l, bool timed)
{
    struct ms_trace_rec rec = {.kind = MS_TR_KERNEL, .task = ms__rec_tr.task};
    rec.stream = ms__rec_stream_id(l->stream);
    for (int i = 0; i < 3; i++) {
        rec.grid[i] = l->grid[i];
        rec.block[i] = l->block[i];
        if (!rec.grid[i] || !rec.block[i])
            return; /* the driver refuses such a launch; nothing ran */
    }
    char name[MS_TRACE_MAX_NAME];
    size_t nlen = strlen(l->name);
    if (nlen >= sizeof name) {
        ms__rec_ctr.trace_dropped++;
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
        ms__rec_ctr.trace_dropped++;
        MS_LOG_ONCE("trace: %zu parameter bytes of %s exceed the format's %u; written without",
                    l->params_len, l->name, MS_TRACE_MAX_PARAMS);
    }
    struct pend *p = timed ? ms__rec_pq_push(&rec) : NULL;
    if (!p) {
        ms__rec_trace_put(&rec);
        return;
    }
    p->timed = true;
    p->ended = false; /* its events are recorded around the real call */
    p->ev0 = ms__rec_tl.ev0;
    p->ev1 = ms__rec_tl.ev1;
    ms__rec_tl.seq = p->seq;
    ms__rec_tl.ev0 = ms__rec_tl.ev1 = NULL;
}

/* Two events for timing a launch on s (outside the lock); false: do not time it. */
bool ms__rec_timing_prepare(struct ms_shim_stream s)
{
    if (!__atomic_load_n(&ms__rec_timing_on, __ATOMIC_ACQUIRE))
        return false;
    CUstream st = event_stream(s);
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = MS_REAL(cuStreamIsCapturing)(st, &cap);
    if ((r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND) || cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return false; /* events would become graph nodes */
    CUevent e[2] = {NULL, NULL};
    ms_lock(&ms__events_lock);
    for (int i = 0; i < 2 && ms__rec_pq.npool; i++)
        e[i] = ms__rec_pq.pool[--ms__rec_pq.npool];
    ms_unlock(&ms__events_lock);
    for (int i = 0; i < 2; i++)
        if (!e[i] && MS_REAL(cuEventCreate)(&e[i], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            e[i] = NULL;
    if (!e[0] || !e[1]) {
        ms_lock(&ms__events_lock);
        ms__rec_pool_put(e[0]);
        ms__rec_pool_put(e[1]);
        ms_unlock(&ms__events_lock);
        return false;
    }
    ms__rec_tl.ev0 = e[0];
    ms__rec_tl.ev1 = e[1];
    ms__rec_tl.stream = st;
    return true;
}

/* The launch is about to be forwarded (gate 0) or refused: record its start, or give up. */
void ms__rec_timing_start(int gate)
{
    if (!ms__rec_tl.seq)
        return;
    struct pend *p;
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (gate == 0) {
        ms_lock(&ms__events_lock);
        p = ms__rec_pq_find(ms__rec_tl.seq);
        CUevent e0 = p ? p->ev0 : NULL;
        ms_unlock(&ms__events_lock);
        r = e0 ? MS_REAL(cuEventRecord)(e0, ms__rec_tl.stream) : CUDA_ERROR_UNKNOWN;
    }
    if (r != CUDA_SUCCESS) {
        ms_lock(&ms__events_lock);
        if ((p = ms__rec_pq_find(ms__rec_tl.seq)) != NULL) {
            p->timed = false;
            p->ended = true;
        }
        ms_unlock(&ms__events_lock);
        ms__rec_tl.seq = 0;
    }
}

/* The real call returned: record the end (outside the lock); the record may now be written. */
void ms__rec_timing_end(void)
{
    if (!ms__rec_tl.seq)
        return;
    ms_lock(&ms__events_lock);
    struct pend *p = ms__rec_pq_find(ms__rec_tl.seq);
    CUevent e1 = p ? p->ev1 : NULL;
    ms_unlock(&ms__events_lock);
    CUresult r = e1 ? MS_REAL(cuEventRecord)(e1, ms__rec_tl.stream) : CUDA_ERROR_UNKNOWN;
    ms_lock(&ms__events_lock);
    if ((p = ms__rec_pq_find(ms__rec_tl.seq)) != NULL) {
        p->timed = r == CUDA_SUCCESS;
        p->ended = true;
    }
    size_t queued = ms__rec_pq.n;
    ms_unlock(&ms__events_lock);
    ms__rec_tl.seq = 0;
    if (queued >= PQ_DRAIN)
        ms__rec_trace_drain(queued >= PQ_MAX);
}
