/*
 * client_gate.c - the daemon-mode launch gate: a command is admitted only while the daemon lets
 * this process run and its chunks are resident; otherwise DEMAND and wait (file layering:
 * client_int.h; design: client.h).
 */
#include "shim/client_int.h"

bool ms_client_capturing(struct ms_shim_stream s)
{
    CUstream h = (CUstream)s.handle;
    if (!h && !s.per_thread)
        return false; /* the legacy stream cannot capture */
    if (!h)
        h = CU_STREAM_PER_THREAD;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return MS_REAL(cuStreamIsCapturing)(h, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void ms__cl_timed_wait(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    ms_lock_timedwait(&C.cond, C.eng->lock, &ts);
}

/* Add s's chunks to the waiting threads' union. */
int ms__cl_want_add(const struct ms_chunk_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        int e = ms_chunk_set_add(&C.want, s->ids[i]);
        if (e)
            return e;
    }
    ms_chunk_set_normalize(&C.want);
    return MS_OK;
}

/* Drop chunks of regions freed meanwhile (a command using freed memory is the program's bug;
 * it must not wait forever for memory nobody will populate). */
void ms__cl_drop_dead(struct ms_chunk_set *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (ms_chunk_get(C.eng->rt, s->ids[i]))
            s->ids[k++] = s->ids[i];
    s->n = k;
}

/* DEMAND: next = need and what history predicts after it, up to half of what this task may
 * hold (exact: need alone); recent = the chunks used most recently, up to all of it. */
void ms__cl_send_demand_ex(const struct ms_chunk_set *need, bool whole, bool exact)
{
    size_t n = 0;
    int e = C.eng->predict(need, C.cap / 2, &C.nx, C.cap, &C.rc);
    if (!e && exact) {
        ms_chunk_set_clear(&C.nx);
        for (size_t i = 0; i < need->n && !e; i++)
            e = ms_chunk_set_add(&C.nx, need->ids[i]);
    }
    for (size_t i = 0; !e && C.reverse_demand && i < C.nx.n / 2; i++) {
        ms_chunk_id t = C.nx.ids[i];
        C.nx.ids[i] = C.nx.ids[C.nx.n - 1 - i];
        C.nx.ids[C.nx.n - 1 - i] = t;
        C.nx.asc = false;
    }
    if (!e)
        e = ms__cl_to_runs(&C.nx, &n);
    size_t nnext = n;
    if (!e)
        e = ms__cl_to_runs(&C.rc, &n);
    if (e) {
        ms__cl_conn_break("out of memory");
        return;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_DEMAND);
    m.demand.flags = whole ? MS_DEMAND_WHOLE : 0;
    m.demand.next = C.runs;
    m.demand.nnext = (uint32_t)nnext;
    m.demand.recent = C.runs + nnext;
    m.demand.nrecent = (uint32_t)(n - nnext);
    m.demand.misses = C.eng->misses ? C.eng->misses() : 0;
    m.demand.host_bytes = C.eng->host_bytes ? C.eng->host_bytes(&m.demand.host_pool) : 0;
    if (ms__cl_csend(&m, 0) == MS_OK) {
        C.misses_sent = m.demand.misses;
        C.host_sent = m.demand.host_bytes;
        C.pool_sent = m.demand.host_pool;
        C.dem_pending = true;
        C.dem_at = ms__cl_now_ns();
        C.idle_sent = false;
        C.st.demands++;
    }
}

void ms__cl_send_demand(const struct ms_chunk_set *need, bool whole)
{
    ms__cl_send_demand_ex(need, whole, false);
}

/* A running task whose commands keep missing may send no DEMAND or STOPPED for a long time:
 * its misses count and pinned host bytes go to the daemon in a REPORT when they changed, at most
 * every 100 ms (or at once with `now_anyway`: after an EVICT order, which makes host chunks). */
#define REPORT_NS 100000000ull
void ms__cl_report(bool now_anyway)
{
    uint64_t n = C.eng->misses ? C.eng->misses() : 0;
    uint64_t pool = 0, hb = C.eng->host_bytes ? C.eng->host_bytes(&pool) : 0;
    if (n == C.misses_sent && hb == C.host_sent && pool == C.pool_sent)
        return;
    uint64_t now = ms__cl_now_ns();
    if (!now_anyway && C.report_at && now - C.report_at < REPORT_NS)
        return;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_REPORT);
    m.report.misses = n;
    m.report.host_bytes = hb;
    m.report.host_pool = pool;
    if (ms__cl_csend(&m, 0) == MS_OK) {
        C.misses_sent = n;
        C.host_sent = hb;
        C.pool_sent = pool;
        C.report_at = now;
    }
}

/* The first command since RUN was admitted: STARTED, so the daemon can split its switch
 * time (`msched status`); its wait is also this process's own record. */
static void send_started(void)
{
    uint64_t wait = ms__cl_now_ns() - C.run_t0;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_STARTED);
    m.started.epoch = C.run_epoch;
    m.started.wait_ns = wait;
    C.started_sent = true; /* also when the send fails: the connection is then broken */
    (void)ms__cl_csend(&m, 0);
    C.st.first_runs++;
    C.st.first_ns += wait;
    C.st.first_ns_max = MS_MAX(C.st.first_ns_max, wait);
}

/* dst = src (dst != src). MS_E_NOMEM. */
static int copy_set(struct ms_chunk_set *dst, const struct ms_chunk_set *src)
{
    ms_chunk_set_clear(dst);
    for (size_t i = 0; i < src->n; i++)
        if (ms_chunk_set_add(dst, src->ids[i]))
            return MS_E_NOMEM;
    return MS_OK;
}

/* Does `need` name a chunk never populated (EMPTY) of an always-mapped region? */
static bool has_empty(const struct ms_chunk_set *need)
{
    for (size_t i = 0; i < need->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(C.eng->rt, need->ids[i]);
        const struct ms_region *r = ms_region_get(C.eng->rt, MS_CHUNK_REGION(need->ids[i]));
        if (c && r && r->amap && c->state == MS_CS_EMPTY)
            return true;
    }
    return false;
}

/* A command that names more than this process may hold: keep what core/predict.h's
 * ms_chunk_set_fit keeps (the rest runs on its host chunks: a counted miss). */
static int fit_to_cap(const struct ms_chunk_set *need, struct ms_chunk_set *own, uint64_t cap)
{
    return ms_chunk_set_fit(C.eng->rt, need, cap, own);
}

int ms_client_gate(struct ms_chunk_set **needp, struct ms_chunk_set *own, bool unbounded,
                   struct ms_shim_stream stream, bool *alone)
{
    struct ms_chunk_set *need = *needp;
    struct ms_rtable *rt = C.eng->rt;
    bool counted = false;
    bool fitted = false, empty_mapped = false;
    struct ms_chunk_set named; /* fitted: everything the command names (misses are counted on it) */
    ms_chunk_set_init(&named);
    bool dwaiting = false; /* counted in C.dwait */
    int capt =
        -1; /* ms_client_capturing(stream), asked once and only when the command would wait */
    uint64_t t0 = 0;
    int rc = CUDA_SUCCESS;
    *alone = false;
    for (;;) {
        if (!C.up) {
            *alone = true;
            break;
        }
        if (C.running && !C.hold && C.eng->all_ready(need)) {
            /* Nothing may run while an eviction left an address mapped to nothing. */
            int left = C.eng->map_bare ? C.eng->map_bare(0, true) : 0;
            if (left != 0) {
                ms__shim_say("cannot map evicted memory to its host copy (%s): the command is "
                             "refused",
                             left < 0 ? ms_strerror(left) : "some stayed unmapped");
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            if (C.idle_sent) {
                /* Busy again after an IDLE while still holding RUN: runnable once more. The
                 * DEMAND names only this command's chunks, all resident, so no POPULATE
                 * answers it and no DEMAND is pending because of it. */
                bool pending = C.dem_pending;
                ms__cl_send_demand_ex(need, unbounded, true);
                C.dem_pending = pending;
            }
            __atomic_store_n(&ms__cl_active, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&ms__cl_inflight, 1, __ATOMIC_SEQ_CST);
            ms__cl_admitted = true;
            /* What it names, also what it runs on host chunks: admitted counts those as misses. */
            C.eng->admitted(fitted ? &named : need);
            ms__cl_report(false);
            if (!C.started_sent)
                send_started();
            break;
        }
        if (capt < 0)
            capt = ms_client_capturing(stream);
        if (capt)
            break; /* recorded into a graph, not run: nothing to hold */
        uint64_t bytes = ms_chunk_set_bytes(need, rt);
        if (bytes > C.cap && !empty_mapped && C.eng->map_empty && has_empty(need)) {
            /* Never-populated chunks must be populated before any command touches them, and
             * past the cap they never could be: they go to host chunks first (the lock is
             * released meanwhile, so `need` is copied into own first). */
            empty_mapped = true;
            if (need != own && copy_set(own, need)) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            need = own;
            *needp = own;
            if (C.eng->map_empty(need)) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            continue; /* the state may have changed while the lock was released */
        }
        if (bytes > C.cap && !fitted) {
            fitted = true;
            struct ms_chunk_set fit;
            ms_chunk_set_init(&fit);
            int fe = copy_set(&named, need);
            if (!fe)
                fe = fit_to_cap(need, &fit, C.cap);
            if (!fe)
                fe = copy_set(own, &fit);
            ms_chunk_set_fini(&fit);
            if (fe) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            need = own;
            *needp = own;
            continue; /* what fits may be resident already: admit it without waiting */
        }
        if (bytes > C.cap) {
            ms__shim_say("%s needs %llu MiB resident, more than the %llu MiB this process may hold "
                         "(%s): refused",
                         unbounded
                             ? "a launch msched cannot bound (fallback application VMM mappings)"
                             : "a command's fallback application VMM mappings",
                         (unsigned long long)(bytes / MS_MIB), (unsigned long long)(C.cap / MS_MIB),
                         C.cap_is_limit ? "MSCHED_BUDGET" : "the daemon's budget");
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (C.running && !C.hold) {
            /* Running, chunks missing: the daemon populates them (no local faults). */
            if (!C.pop_active && C.dem_pending && ms__cl_now_ns() - C.dem_at >= DEMAND_REPEAT_NS) {
                C.st.demand_repeats++;
                C.dem_pending = false;
            }
            if (!C.pop_active && !C.dem_pending)
                ms__cl_send_demand(need, unbounded);
        } else if (!C.running) {
            if (ms__cl_want_add(need)) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            C.want_whole |= unbounded;
            if (!C.dem_pending || C.want.n != C.want_sent) {
                ms__cl_send_demand(&C.want, C.want_whole);
                C.want_sent = C.want.n;
            }
        }
        if (!counted) {
            C.waiters++; /* STOP sends IDLE only when nobody waits */
            counted = true;
        }
        if (need != own) {
            /* The lock is released while waiting: E.need may be reused by another thread. */
            ms_chunk_set_clear(own);
            for (size_t i = 0; i < need->n; i++)
                if (ms_chunk_set_add(own, need->ids[i])) {
                    rc = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
            if (rc)
                break;
            need = own;
            *needp = own;
        }
        if (!t0) {
            t0 = ms__cl_now_ns();
            C.st.waits++;
        }
        /* Running, not held, chunks missing: waiting on the daemon to populate them. */
        ms__cl_dwait_set(&dwaiting, C.running && !C.hold);
        ms__cl_timed_wait(WAIT_NS);
        ms__cl_drop_dead(need);
    }
    ms_chunk_set_fini(&named);
    if (counted)
        C.waiters--;
    ms__cl_dwait_set(&dwaiting, false);
    if (t0)
        C.st.wait_ns += ms__cl_now_ns() - t0;
    return rc;
}

void ms_client_gate_end(void)
{
    if (!ms__cl_admitted)
        return;
    ms__cl_admitted = false;
    __atomic_store_n(&ms__cl_active, 1, __ATOMIC_RELAXED);
    if (__atomic_sub_fetch(&ms__cl_inflight, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&ms__cl_stopping, __ATOMIC_SEQ_CST)) {
        ms_lock(C.eng->lock);
        ms__cl_broadcast();
        ms_unlock(C.eng->lock);
    }
}

void ms_client_sync_begin(void)
{
    __atomic_add_fetch(&ms__cl_insync, 1, __ATOMIC_RELAXED);
}

void ms_client_sync_end(void)
{
    __atomic_store_n(&ms__cl_active, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&ms__cl_insync, 1, __ATOMIC_RELAXED);
}
