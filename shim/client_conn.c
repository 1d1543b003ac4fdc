/*
 * client_conn.c - the daemon client's state and plumbing: sending, wire ids, running time,
 * wake-ups (file layering: client_int.h; design: client.c; contract: client.h).
 */
#include "shim/client_int.h"

struct ms_client_state ms__client = {.wakefd = -1, .conn = {.fd = -1}};
uint64_t ms__cl_inflight;
int ms__cl_stopping;
int ms__cl_active;
uint32_t ms__cl_insync;
_Thread_local bool ms__cl_admitted;

uint64_t ms__cl_now_ns(void)
{
    return ms_ipc_now_ns();
}

/* Close the open interval of waiting on demands (STOP, the daemon ms__cl_gone, the last waiter
 * out). */
void ms__cl_dwait_close(uint64_t now)
{
    if (C.dw_t0) {
        C.st.dwait_ns += now - C.dw_t0;
        C.dw_t0 = 0;
    }
}

/* The calling thread's state: waiting (on) or not for a demand's population while running.
 * *mine is the thread's current state; the clock is read only when the union changes. */
void ms__cl_dwait_set(bool *mine, bool on)
{
    if (*mine == on)
        return;
    *mine = on;
    if (on) {
        if (C.dwait++ == 0 && C.running)
            C.dw_t0 = ms__cl_now_ns();
    } else if (--C.dwait == 0) {
        ms__cl_dwait_close(ms__cl_now_ns());
    }
}

/* The slice in progress ends (STOPPED, the daemon ms__cl_gone) or is replaced: count its time. */
void ms__cl_slice_end(uint64_t now)
{
    if (C.running)
        C.st.run_ns += now - C.run_t0;
}

/* Waits are timed on the monotonic clock (ms__cl_timed_wait). */
void ms__cl_cond_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&C.cond, &a);
    pthread_condattr_destroy(&a);
    C.cond_ready = true;
}

void ms__cl_wake(void)
{
    if (C.wakefd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(C.wakefd, &one, sizeof(one));
        (void)w;
    }
}

void ms__cl_broadcast(void)
{
    pthread_cond_broadcast(&C.cond);
}

/* The connection cannot go on: the service thread falls back at its next turn. */
void ms__cl_conn_break(const char *why)
{
    if (!C.broken)
        ms__shim_log("daemon connection broken: %s", why);
    C.broken = true;
    ms__cl_wake();
}

/* Send m (seq: the request it answers, or 0 for a new number). */
int ms__cl_csend(struct ms_msg *m, uint32_t seq)
{
    if (!C.up || C.broken)
        return MS_E_IO;
    m->seq = seq;
    int rc = ms_conn_send(&C.conn, m);
    if (rc) {
        ms__cl_conn_break(rc == MS_E_IO ? "a write failed" : "cannot encode a message");
        return rc;
    }
    if (ms_conn_out_pending(&C.conn))
        ms__cl_wake(); /* the service thread writes the rest */
    return MS_OK;
}

struct wreg *ms__cl_wreg_of(uint32_t wid)
{
    size_t lo = 0, hi = C.nw;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (C.w[mid].wid < wid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < C.nw && C.w[lo].wid == wid ? &C.w[lo] : NULL;
}

void ms__cl_prune_dead(void)
{
    if (C.ndead <= MAX_DEAD)
        return;
    size_t drop = C.ndead - MAX_DEAD / 2, k = 0;
    for (size_t i = 0; i < C.nw; i++) {
        if (!C.w[i].live && drop) {
            drop--;
            C.ndead--;
            continue;
        }
        C.w[k++] = C.w[i];
    }
    C.nw = k;
}

/* Bytes a run names, by its region's chunk sizes (protocol rule 5), live or freed. */
uint64_t ms__cl_run_bytes(const struct ms_run *run)
{
    const struct wreg *r = ms__cl_wreg_of(run->region);
    if (!r) {
        MS_LOG_ONCE("an order names region %u, which this process does not remember", run->region);
        return (uint64_t)run->count * MS_GRAN;
    }
    uint64_t n = (r->span + r->cb - 1) / r->cb;
    uint64_t first = run->first, end = MS_MIN((uint64_t)run->first + run->count, n);
    if (first >= end)
        return 0;
    uint64_t bytes = (end - first) * r->cb;
    if (end == n)
        bytes -= n * r->cb - r->span; /* the last chunk is shorter */
    return bytes;
}

/* The chunks of a run whose region is still live, appended to out. */
int ms__cl_run_chunks(const struct ms_run *run, struct ms_chunk_set *out)
{
    const struct wreg *r = ms__cl_wreg_of(run->region);
    if (!r || !r->live)
        return MS_OK;
    struct ms_region *reg = ms_region_get(C.eng->rt, r->slot);
    if (!reg)
        return MS_OK;
    uint64_t end = MS_MIN((uint64_t)run->first + run->count, reg->nchunks);
    for (uint64_t i = run->first; i < end; i++) {
        int e = ms_chunk_set_add(out, MS_CHUNK_ID(r->slot, (uint32_t)i));
        if (e)
            return e;
    }
    return MS_OK;
}

/* Chunk ids (in order) -> runs of wire ids, appended to C.runs from *n. */
int ms__cl_to_runs(const struct ms_chunk_set *s, size_t *n)
{
    size_t start = *n;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t slot = MS_CHUNK_REGION(s->ids[i]), idx = MS_CHUNK_INDEX(s->ids[i]);
        if (slot >= C.capslot || !C.slot_wid[slot])
            continue;
        uint32_t wid = C.slot_wid[slot];
        if (*n > start && C.runs[*n - 1].region == wid &&
            C.runs[*n - 1].first + C.runs[*n - 1].count == idx) {
            C.runs[*n - 1].count++;
            continue;
        }
        if (*n - start >= MAX_RUNS)
            break;
        int e = ms_grow((void **)&C.runs, &C.capruns, *n + 1, sizeof(C.runs[0]));
        if (e)
            return e;
        C.runs[(*n)++] = (struct ms_run){.region = wid, .first = idx, .count = 1};
    }
    return MS_OK;
}
