/*
 * client.c - libmsched's daemon client: connection, service thread, time slicing (contract and
 * design: client.h; the protocol: docs/protocol.md).
 *
 * State. Everything in C is protected by the engine's lock (C.eng->lock), except the
 * configuration (written once at initialisation) and two atomics: `inflight` (commands the gate
 * admitted whose hook has not returned yet) and `stopping` (a STOP waits for inflight to drain).
 * The hook's cleanup runs without the lock: it decrements inflight and, only when a STOP waits,
 * takes the lock to wake it (both sides use sequentially consistent atomics, so either the STOP
 * sees the count drop or the cleanup sees `stopping`).
 *
 * Wire ids. The engine's region slots are reused; the wire's region ids must strictly increase
 * and never be reused (protocol rule 2). C.w lists (wire id, slot, geometry, live) in increasing
 * wire id, append-only; C.slot_wid maps a live slot to its wire id. A freed region stays listed
 * (dead) so that an order that crossed its REGION free on the wire still counts its bytes
 * (protocol rule 5); the oldest dead entries are forgotten beyond MAX_DEAD.
 *
 * Orders. The service thread executes an EVICT in batches of runs (about BATCH_BYTES each), one
 * EVICTED after each batch; a POPULATE the same way, taking runs only while the cumulative bytes
 * of the runs taken (every run counted by its chunk sizes, dead regions and resident chunks
 * included) stay within the credit, one POPULATED per batch; CREDIT resumes it. At most one
 * POPULATE is active (rule 7); a new one replaces it.
 *
 * Demands. `dem_pending` is set when a DEMAND goes out and cleared by RUN, STOP and the end of a
 * POPULATE: a waiting thread sends a DEMAND only when none is pending (or, while not running,
 * when the union of the waiting threads' needs grew), so waking up never floods the daemon.
 * While running, a DEMAND that nothing answered for DEMAND_REPEAT_NS (no POPULATE came, no STOP)
 * is sent again: a DEMAND only restates what the task needs, so a repeat is harmless, and a
 * daemon that lost the first (or could not act on it then) does not leave the task waiting for
 * ever.
 *
 * Where running time goes (the daemon line of the exit summary, engine.c). `ran` (st.run_ns)
 * adds up each slice, from RUN to the STOPPED answer (the gpu_ns it reports), or to the
 * daemon's going away, or to the summary for a slice still open at exit. `waiting on demands`
 * (st.dwait_ns) is the wall time during which the process held RUN and at least one thread
 * waited in the gate for memory the daemon is to populate (running, not held by an eviction,
 * its chunks not resident): the union over threads, not a sum. `dwait` counts such threads;
 * an interval opens (dw_t0) when the count leaves 0 while running or RUN comes with it above 0,
 * and closes when the count returns to 0, at STOP or when the daemon goes (invariant: dw_t0 is
 * set exactly while running && dwait > 0). A thread enters or leaves that count only on the
 * gate's waiting path, so the launch fast path reads no clock. `orders under the lock`
 * (st.order_run_ns) is the service thread's time in the engine's executor (EVICT and POPULATE
 * batches, the engine's lock held throughout) while the process held RUN: the most that orders
 * can have kept the application's threads from the gate then. The figures overlap: a thread
 * waiting on a demand waits through the population that answers it.
 *
 * Invariants
 *   - C.up: the connection is open and the engine is in daemon mode; once false it never
 *     becomes true again in this process.
 *   - the shim's resident chunks are exactly those the daemon credited and did not evict (it
 *     maps only on POPULATE within credit, unmaps only on EVICT or when a region is freed).
 *   - admissions happen only while C.running && !C.hold, under the lock.
 */
#include "shim/client.h"
#include "shim/locks.h"
#include "shim/config.h"
#include "shim/hostmem.h"

#include "core/proto.h"
#include "core/timeline.h"
#include "ipc/ipc.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH_BYTES (64 * MS_MIB)      /* one EVICTED / POPULATED per this much, */
#define BATCH_RUNS 8u                  /* or per this many runs */
#define WAIT_NS 200000000ull           /* a waiting thread re-checks at least this often */
#define DEMAND_REPEAT_NS 1000000000ull /* running: an unanswered DEMAND is repeated after this */
#define CONNECT_MS 1000
#define WELCOME_MS 2000
#define JOIN_S 10      /* at exit, how long to wait for an order in progress */
#define MAX_DEAD 8192  /* freed regions remembered for orders in flight */
#define MAX_RUNS 32768 /* runs per DEMAND list */

struct wreg {
    uint32_t wid, slot;
    uint64_t span, cb; /* bytes rounded to 2 MiB, chunk bytes */
    bool live;
};

static struct {
    const struct ms_client_engine *eng; /* the engine's operations (ms_client_attach) */
    /* configuration */
    bool allowed;
    int32_t prio;
    uint32_t weight;
    bool cond_ready;
    /* connection */
    bool up, broken, quit;
    struct ms_conn conn;
    int wakefd;
    pthread_t thread;
    bool thread_on;
    void *ctx;
    uint32_t task;
    uint64_t budget, slice_ns;
    uint64_t cap; /* what this task may hold: the budget, or its limit when lower */
    pthread_cond_t cond;
    /* scheduling */
    bool running, hold;
    bool idle_sent;    /* IDLE was the last word on our work (no DEMAND since): "Idle" */
    uint64_t hang_ns;  /* a probe unanswered this long: the daemon is hung; 0: never */
    uint64_t last_rx;  /* when the daemon last sent anything */
    uint64_t probe_at; /* when the unanswered liveness probe went out; 0: none */
    uint64_t idle_ns;  /* quiet this long means idle; 0: never */
    uint64_t quiet_t0; /* running: when the task was last seen busy */
    uint32_t run_epoch;
    uint64_t run_t0;
    uint32_t waiters;
    uint32_t dwait; /* threads waiting on a demand's population (Where running time goes) */
    uint64_t dw_t0; /* running && dwait > 0 since then; 0: not */
    bool dem_pending, want_whole;
    uint64_t dem_at;          /* when the last DEMAND went out */
    struct ms_chunk_set want; /* union of the needs of threads waiting for RUN */
    size_t want_sent;
    /* the POPULATE order */
    bool pop_active;
    uint32_t pop_epoch, pop_seq, pop_n, pop_done;
    struct ms_run *pop_runs;
    uint64_t pop_credit, pop_taken;
    uint64_t pop_work, pop_step;      /* the engine's time on it: total, longest batch */
    struct ms_exec_stats pop_longest; /* the longest batch's phases */
    struct timespec pop_started;      /* when the order came (CLOCK_REALTIME) */
    /* wire ids */
    struct wreg *w;
    size_t nw, capw, ndead;
    uint32_t last_wid;
    uint32_t *slot_wid; /* 0: no live region */
    size_t capslot;
    /* scratch */
    struct ms_chunk_set batch, nx, rc;
    struct ms_run *runs;
    size_t capruns;
    struct ms_client_stats st;
} C = {.wakefd = -1, .conn = {.fd = -1}};

static uint64_t inflight; /* atomic */
static int stopping;      /* atomic */
static int active;        /* atomic: a command was admitted or finished since the last look */
static uint32_t insync;   /* atomic: threads inside a synchronizing call */
static _Thread_local bool admitted;

static uint64_t now_ns(void)
{
    return ms_ipc_now_ns();
}

/* ---- where running time goes (lock held) --------------------------------------------------- */

/* Close the open interval of waiting on demands (STOP, the daemon gone, the last waiter out). */
static void dwait_close(uint64_t now)
{
    if (C.dw_t0) {
        C.st.dwait_ns += now - C.dw_t0;
        C.dw_t0 = 0;
    }
}

/* The calling thread's state: waiting (on) or not for a demand's population while running.
 * *mine is the thread's current state; the clock is read only when the union changes. */
static void dwait_set(bool *mine, bool on)
{
    if (*mine == on)
        return;
    *mine = on;
    if (on) {
        if (C.dwait++ == 0 && C.running)
            C.dw_t0 = now_ns();
    } else if (--C.dwait == 0) {
        dwait_close(now_ns());
    }
}

/* The slice in progress ends (STOPPED, the daemon gone) or is replaced: count its time. */
static void slice_end(uint64_t now)
{
    if (C.running)
        C.st.run_ns += now - C.run_t0;
}

/* ---- configuration ------------------------------------------------------------------------ */

/* Waits are timed on the monotonic clock (timed_wait). */
static void cond_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&C.cond, &a);
    pthread_condattr_destroy(&a);
    C.cond_ready = true;
}

void ms_client_attach(const struct ms_client_engine *eng)
{
    C.eng = eng;
}

void ms_client_configure(void)
{
    C.hang_ns = ms__shim_opt(MS_OPT_DAEMON_TIMEOUT_MS) * 1000000ull;
    C.idle_ns = ms__shim_opt(MS_OPT_IDLE_MS) * 1000000ull;
    C.allowed = ms__shim_opt(MS_OPT_DAEMON) != MS_DAEMON_OFF;
    C.prio = (int32_t)ms__shim_opt(MS_OPT_PRIORITY);
    C.weight = (uint32_t)ms__shim_opt(MS_OPT_WEIGHT);
    cond_init();
}

bool ms_client_allowed(void)
{
    return C.allowed;
}

static bool is_socket(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

bool ms_client_available(void)
{
    if (!C.allowed || !C.cond_ready)
        return false;
    char path[MS_IPC_PATH_MAX + 1];
    /* The device is not known yet (no driver call is made here): any GPU's socket will do;
     * ms_client_connect uses the context's. $MSCHED_SOCKET names one path for every GPU. */
    for (unsigned g = 0; g < 16; g++)
        if (ms_ipc_socket_path(g, path, sizeof(path)) == MS_OK && is_socket(path))
            return true;
    return false;
}

void ms_client_stats_get(struct ms_client_stats *out)
{
    ms_lock(C.eng->lock);
    *out = C.st;
    /* A slice (or a wait) still open counts up to now. */
    uint64_t now = now_ns();
    if (C.running)
        out->run_ns += now - C.run_t0;
    if (C.dw_t0)
        out->dwait_ns += now - C.dw_t0;
    ms_unlock(C.eng->lock);
}

/* ---- sending (lock held) ------------------------------------------------------------------- */

static void wake(void)
{
    if (C.wakefd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(C.wakefd, &one, sizeof(one));
        (void)w;
    }
}

static void broadcast(void)
{
    pthread_cond_broadcast(&C.cond);
}

/* The connection cannot go on: the service thread falls back at its next turn. */
static void conn_break(const char *why)
{
    if (!C.broken)
        ms__shim_log("daemon connection broken: %s", why);
    C.broken = true;
    wake();
}

/* Send m (seq: the request it answers, or 0 for a new number). */
static int csend(struct ms_msg *m, uint32_t seq)
{
    if (!C.up || C.broken)
        return MS_E_IO;
    m->seq = seq;
    int rc = ms_conn_send(&C.conn, m);
    if (rc) {
        conn_break(rc == MS_E_IO ? "a write failed" : "cannot encode a message");
        return rc;
    }
    if (ms_conn_out_pending(&C.conn))
        wake(); /* the service thread writes the rest */
    return MS_OK;
}

/* ---- wire ids (lock held) ------------------------------------------------------------------ */

static struct wreg *wreg_of(uint32_t wid)
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

static void prune_dead(void)
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

void ms_client_region_add(uint32_t slot, uint64_t base, uint64_t size, uint64_t chunk_bytes)
{
    if (!C.up)
        return;
    if (ms_grow((void **)&C.w, &C.capw, C.nw + 1, sizeof(C.w[0])) ||
        ms_grow((void **)&C.slot_wid, &C.capslot, (size_t)slot + 1, sizeof(C.slot_wid[0]))) {
        conn_break("out of memory");
        return;
    }
    uint32_t wid = ++C.last_wid;
    C.w[C.nw++] = (struct wreg){.wid = wid,
                                .slot = slot,
                                .span = MS_ROUND_UP(size, MS_GRAN),
                                .cb = chunk_bytes,
                                .live = true};
    C.slot_wid[slot] = wid;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_ADD;
    m.region.kind = MS_RK_DEVICE;
    m.region.region = wid;
    m.region.base = base;
    m.region.size = size;
    m.region.chunk_bytes = chunk_bytes;
    csend(&m, 0);
}

void ms_client_region_free(uint32_t slot)
{
    if (!C.up || slot >= C.capslot || !C.slot_wid[slot])
        return;
    uint32_t wid = C.slot_wid[slot];
    C.slot_wid[slot] = 0;
    struct wreg *r = wreg_of(wid);
    if (r && r->live) {
        r->live = false;
        C.ndead++;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_FREE;
    m.region.region = wid;
    csend(&m, 0);
    prune_dead();
}

/* Bytes a run names, by its region's chunk sizes (protocol rule 5), live or freed. */
static uint64_t run_bytes(const struct ms_run *run)
{
    const struct wreg *r = wreg_of(run->region);
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
static int run_chunks(const struct ms_run *run, struct ms_chunk_set *out)
{
    const struct wreg *r = wreg_of(run->region);
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
static int to_runs(const struct ms_chunk_set *s, size_t *n)
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

/* DEMAND: next = need and what history predicts after it, up to half of what this task may
 * hold (exact: need alone); recent = the chunks used most recently, up to all of it. */
static void send_demand_ex(const struct ms_chunk_set *need, bool whole, bool exact)
{
    size_t n = 0;
    int e = C.eng->predict(need, C.cap / 2, &C.nx, C.cap, &C.rc);
    if (!e && exact) {
        ms_chunk_set_clear(&C.nx);
        for (size_t i = 0; i < need->n && !e; i++)
            e = ms_chunk_set_add(&C.nx, need->ids[i]);
    }
    if (!e)
        e = to_runs(&C.nx, &n);
    size_t nnext = n;
    if (!e)
        e = to_runs(&C.rc, &n);
    if (e) {
        conn_break("out of memory");
        return;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_DEMAND);
    m.demand.flags = whole ? MS_DEMAND_WHOLE : 0;
    m.demand.next = C.runs;
    m.demand.nnext = (uint32_t)nnext;
    m.demand.recent = C.runs + nnext;
    m.demand.nrecent = (uint32_t)(n - nnext);
    if (csend(&m, 0) == MS_OK) {
        C.dem_pending = true;
        C.dem_at = now_ns();
        C.idle_sent = false;
        C.st.demands++;
    }
}

static void send_demand(const struct ms_chunk_set *need, bool whole)
{
    send_demand_ex(need, whole, false);
}

/* ---- the gate (lock held) ------------------------------------------------------------------ */

static bool capturing(struct ms_shim_stream s)
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

static void timed_wait(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    ms_lock_timedwait(&C.cond, C.eng->lock, &ts);
}

/* Add s's chunks to the waiting threads' union. */
static int want_add(const struct ms_chunk_set *s)
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
static void drop_dead(struct ms_chunk_set *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (ms_chunk_get(C.eng->rt, s->ids[i]))
            s->ids[k++] = s->ids[i];
    s->n = k;
}

int ms_client_gate(struct ms_chunk_set **needp, struct ms_chunk_set *own, bool unbounded,
                   struct ms_shim_stream stream, bool *alone)
{
    struct ms_chunk_set *need = *needp;
    struct ms_rtable *rt = C.eng->rt;
    bool counted = false;
    bool dwaiting = false; /* counted in C.dwait */
    int capt = -1;         /* capturing(stream), asked once and only when the command would wait */
    uint64_t t0 = 0;
    int rc = CUDA_SUCCESS;
    *alone = false;
    for (;;) {
        if (!C.up) {
            *alone = true;
            break;
        }
        if (C.running && !C.hold && C.eng->all_ready(need)) {
            if (C.idle_sent) {
                /* Busy again after an IDLE while still holding RUN: runnable once more. The
                 * DEMAND names only this command's chunks, all resident, so no POPULATE
                 * answers it and no DEMAND is pending because of it. */
                bool pending = C.dem_pending;
                send_demand_ex(need, unbounded, true);
                C.dem_pending = pending;
            }
            __atomic_store_n(&active, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
            admitted = true;
            C.eng->admitted(need);
            break;
        }
        if (capt < 0)
            capt = capturing(stream);
        if (capt)
            break; /* recorded into a graph, not run: nothing to hold */
        uint64_t bytes = ms_chunk_set_bytes(need, rt);
        if (bytes > C.cap) {
            ms__shim_say("%s needs %llu MiB resident, more than the %llu MiB this process may hold "
                         "(%s): refused",
                         unbounded ? "a launch msched cannot bound (whole footprint)" : "a command",
                         (unsigned long long)(bytes / MS_MIB), (unsigned long long)(C.cap / MS_MIB),
                         C.cap < C.budget ? "MSCHED_BUDGET" : "the daemon's budget");
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (C.running && !C.hold) {
            /* Running, chunks missing: the daemon populates them (no local faults). */
            if (!C.pop_active && C.dem_pending && now_ns() - C.dem_at >= DEMAND_REPEAT_NS) {
                C.st.demand_repeats++;
                C.dem_pending = false;
            }
            if (!C.pop_active && !C.dem_pending)
                send_demand(need, unbounded);
        } else if (!C.running) {
            if (want_add(need)) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            C.want_whole |= unbounded;
            if (!C.dem_pending || C.want.n != C.want_sent) {
                send_demand(&C.want, C.want_whole);
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
            t0 = now_ns();
            C.st.waits++;
        }
        /* Running, not held, chunks missing: waiting on the daemon to populate them. */
        dwait_set(&dwaiting, C.running && !C.hold);
        timed_wait(WAIT_NS);
        drop_dead(need);
    }
    if (counted)
        C.waiters--;
    dwait_set(&dwaiting, false);
    if (t0)
        C.st.wait_ns += now_ns() - t0;
    return rc;
}

void ms_client_gate_end(void)
{
    if (!admitted)
        return;
    admitted = false;
    __atomic_store_n(&active, 1, __ATOMIC_RELAXED);
    if (__atomic_sub_fetch(&inflight, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) {
        ms_lock(C.eng->lock);
        broadcast();
        ms_unlock(C.eng->lock);
    }
}

void ms_client_sync_begin(void)
{
    __atomic_add_fetch(&insync, 1, __ATOMIC_RELAXED);
}

void ms_client_sync_end(void)
{
    __atomic_store_n(&active, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&insync, 1, __ATOMIC_RELAXED);
}

/* ---- orders (service thread, lock held) ---------------------------------------------------- */

/* A drain this long is logged with its two parts (where a switch's stop time goes). */
#define SLOW_DRAIN_NS 50000000ull

/* Admitted commands reach the driver and finish: nothing in flight may use a victim. */
static void drain(const char *why)
{
    uint64_t t0 = now_ns();
    int n0 = __atomic_load_n(&inflight, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&inflight, __ATOMIC_SEQ_CST) > 0 && !C.quit)
        timed_wait(10000000ull);
    __atomic_store_n(&stopping, 0, __ATOMIC_SEQ_CST);
    uint64_t t1 = now_ns();
    MS_REAL(cuCtxSynchronize)();
    uint64_t t2 = now_ns();
    if (t2 - t0 >= SLOW_DRAIN_NS)
        ms__shim_log("slow %s: %.1f ms waiting for %d admitted command(s) to return "
                     "(%u thread(s) in a synchronizing call), %.1f ms for the GPU to finish",
                     why, (double)(t1 - t0) / 1e6, n0, __atomic_load_n(&insync, __ATOMIC_RELAXED),
                     (double)(t2 - t1) / 1e6);
}

static void on_run(const struct ms_msg *m)
{
    uint64_t now = now_ns();
    slice_end(now); /* a RUN while running: the slice so far counts, a new one starts */
    C.running = true;
    C.run_epoch = m->run.epoch;
    C.run_t0 = now;
    if (C.dwait && !C.dw_t0)
        C.dw_t0 = now;     /* threads were already waiting on a demand: that counts from now */
    C.quiet_t0 = C.run_t0; /* idle_sent stays: an IDLE may have crossed this RUN */
    C.dem_pending = false;
    ms_chunk_set_clear(&C.want);
    C.want_sent = 0;
    C.want_whole = false;
    C.st.slices++;
    broadcast();
}

static void on_stop(const struct ms_msg *m)
{
    C.st.stops++;
    bool was = C.running;
    dwait_close(now_ns());
    C.running = false; /* no admission from now on */
    drain("stop");
    struct ms_msg r;
    ms_msg_init(&r, MS_MSG_STOPPED);
    r.stopped.epoch = m->stop.epoch;
    r.stopped.gpu_ns = was ? now_ns() - C.run_t0 : 0;
    C.st.run_ns += r.stopped.gpu_ns; /* the slice ends with its STOPPED */
    r.stopped.bytes_moved = 0;
    csend(&r, m->seq);
    C.dem_pending = false;
    if (C.waiters == 0) {
        struct ms_msg idle;
        ms_msg_init(&idle, MS_MSG_IDLE);
        if (csend(&idle, 0) == MS_OK) {
            C.st.idles++;
            C.idle_sent = true;
        }
    }
    broadcast();
}

static uint64_t resident_bytes_of(const struct ms_chunk_set *s)
{
    uint64_t b = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(C.eng->rt, s->ids[i]);
        if (c && ms_chunk_state_resident((enum ms_chunk_state)c->state))
            b += c->bytes;
    }
    return b;
}

/* An order whose own work (the engine's copies and mappings, not waiting for credit or a
 * drain) took this long is logged with its size and longest step, and where that step's time
 * went by driver call (ms_exec_stats): a copy at the link's speed is about 20 ms per GiB, so
 * anything far slower is the driver or the host holding it up, and the phase names the call. */
#define SLOW_ORDER_NS 300000000ull

static void order_timed(const char *what, uint64_t work_ns, uint64_t step_ns, uint64_t bytes,
                        const struct ms_exec_stats *step, const struct timespec *at)
{
    if (work_ns < SLOW_ORDER_NS)
        return;
    char started[40];
    ms__shim_wallclock(at, started, sizeof(started));
    ms__shim_log("slow %s: %.1f ms of work for %.2f GiB (%.1f GB/s), the longest step "
                 "%.1f ms (hashing %.1f, queuing copies %.1f, waiting on copies %.1f, "
                 "mapping %.1f, unmapping %.1f ms), started %s",
                 what, (double)work_ns / 1e6, (double)bytes / (double)MS_GIB,
                 work_ns ? (double)bytes / (double)work_ns : 0.0, (double)step_ns / 1e6,
                 (double)step->hash_ns / 1e6, (double)step->issue_ns / 1e6,
                 (double)step->wait_ns / 1e6, (double)step->map_ns / 1e6,
                 (double)step->unmap_ns / 1e6, started);
}

static void on_evict(const struct ms_msg *m)
{
    const struct ms_msg_order *o = &m->order;
    C.st.evict_orders++;
    /* The daemon evicts from tasks that do not run; if this one runs, hold its admissions. */
    C.hold = true;
    drain("evict");
    struct timespec started;
    clock_gettime(CLOCK_REALTIME, &started);
    uint64_t freed = 0, batch = 0, work = 0, step = 0;
    struct ms_exec_stats longest;
    memset(&longest, 0, sizeof(longest));
    uint32_t nbatch = 0;
    ms_chunk_set_clear(&C.batch);
    /* One gate for the whole order, not per batch: between batches a pinning thread would
     * otherwise get a piece in each time (hostmem.h). */
    ms__host_gate_enter();
    for (uint32_t k = 0; k < o->nruns && C.up && !C.broken; k++) {
        if (run_chunks(&o->runs[k], &C.batch)) {
            conn_break("out of memory");
            break;
        }
        batch += run_bytes(&o->runs[k]);
        if (batch < BATCH_BYTES && ++nbatch < BATCH_RUNS && k + 1 < o->nruns)
            continue;
        uint64_t before = resident_bytes_of(&C.batch);
        struct ms_exec_stats xs;
        memset(&xs, 0, sizeof(xs));
        uint64_t t0 = now_ns();
        if (C.eng->exec(&C.batch, NULL, &xs) != MS_OK) {
            conn_break("an eviction failed");
            break;
        }
        uint64_t dt = now_ns() - t0;
        work += dt;
        if (dt > step) {
            step = dt;
            longest = xs;
        }
        if (C.running)
            C.st.order_run_ns += dt;
        freed += before - resident_bytes_of(&C.batch);
        ms_chunk_set_clear(&C.batch);
        batch = 0;
        nbatch = 0;
        struct ms_msg r;
        ms_msg_init(&r, MS_MSG_EVICTED);
        r.progress.epoch = o->epoch;
        r.progress.runs_done = k + 1;
        r.progress.bytes = freed;
        csend(&r, m->seq);
    }
    ms__host_gate_leave();
    order_timed("eviction", work, step, freed, &longest, &started);
    C.hold = false;
    broadcast();
}

static bool pop_pending(void)
{
    return C.pop_active && C.pop_done < C.pop_n && C.up && !C.broken;
}

/* The populations the credit allows, batch by batch, inside one gate (as on_evict). */
static void pop_batches(void)
{
    while (pop_pending()) {
        ms_chunk_set_clear(&C.batch);
        uint32_t j = C.pop_done;
        uint64_t taken = C.pop_taken, batch = 0;
        while (j < C.pop_n && batch < BATCH_BYTES && j - C.pop_done < BATCH_RUNS) {
            uint64_t rb = run_bytes(&C.pop_runs[j]);
            if (rb > C.pop_credit - MS_MIN(C.pop_credit, taken))
                break; /* wait for CREDIT */
            if (run_chunks(&C.pop_runs[j], &C.batch)) {
                conn_break("out of memory");
                return;
            }
            taken += rb;
            batch += rb;
            j++;
        }
        if (j == C.pop_done)
            return;
        struct ms_exec_stats xs;
        memset(&xs, 0, sizeof(xs));
        uint64_t t0 = now_ns();
        if (C.eng->exec(NULL, &C.batch, &xs) != MS_OK) {
            conn_break("a population failed");
            return;
        }
        uint64_t dt = now_ns() - t0;
        if (C.running)
            C.st.order_run_ns += dt;
        C.pop_work += dt;
        if (dt > C.pop_step) {
            C.pop_step = dt;
            C.pop_longest = xs;
        }
        C.pop_done = j;
        C.pop_taken = taken;
        struct ms_msg r;
        ms_msg_init(&r, MS_MSG_POPULATED);
        r.progress.epoch = C.pop_epoch;
        r.progress.runs_done = j;
        r.progress.bytes = taken;
        csend(&r, C.pop_seq);
        broadcast(); /* a waiting command may have what it needs now (early RUN) */
    }
    if (C.pop_active && C.pop_done == C.pop_n) {
        C.pop_active = false;
        C.dem_pending = false;
        order_timed("population", C.pop_work, C.pop_step, C.pop_taken, &C.pop_longest,
                    &C.pop_started);
        broadcast();
    }
}

static void pop_progress(void)
{
    bool gate = pop_pending(); /* none pending: pop_batches only completes the order */
    if (gate)
        ms__host_gate_enter();
    pop_batches();
    if (gate)
        ms__host_gate_leave();
}

static void on_populate(struct ms_msg *m)
{
    C.st.pop_orders++;
    free(C.pop_runs);
    C.pop_runs = NULL;
    C.pop_active = false;
    if (m->order.nruns) {
        C.pop_runs = malloc(m->order.nruns * sizeof(*C.pop_runs));
        if (!C.pop_runs) {
            conn_break("out of memory");
            return;
        }
        memcpy(C.pop_runs, m->order.runs, m->order.nruns * sizeof(*C.pop_runs));
    }
    C.pop_active = true;
    C.pop_epoch = m->order.epoch;
    C.pop_seq = m->seq;
    C.pop_n = m->order.nruns;
    C.pop_done = 0;
    C.pop_credit = m->order.credit;
    C.pop_taken = 0;
    C.pop_work = C.pop_step = 0;
    memset(&C.pop_longest, 0, sizeof(C.pop_longest));
    clock_gettime(CLOCK_REALTIME, &C.pop_started);
    pop_progress();
}

static void on_credit(const struct ms_msg *m)
{
    if (!C.pop_active || m->credit.epoch != C.pop_epoch || m->credit.credit < C.pop_credit)
        return; /* late, or a shrinking credit: ignore it */
    C.pop_credit = m->credit.credit;
    pop_progress();
}

/* The daemon is gone: close, let the engine run alone, wake every waiting thread. */
static void gone(const char *why)
{
    if (!C.up)
        return;
    C.up = false;
    uint64_t now = now_ns();
    slice_end(now);
    dwait_close(now);
    C.running = false;
    C.pop_active = false;
    C.dem_pending = false;
    ms_conn_fini(&C.conn);
    C.conn.fd = -1;
    C.eng->daemon_gone(why);
    broadcast();
}

static void handle(struct ms_msg *m)
{
    C.last_rx = now_ns();
    C.probe_at = 0;
    switch (m->type) {
    case MS_MSG_STATUS: break; /* the answer to a liveness probe */
    case MS_MSG_RUN: on_run(m); break;
    case MS_MSG_STOP: on_stop(m); break;
    case MS_MSG_EVICT: on_evict(m); break;
    case MS_MSG_POPULATE: on_populate(m); break;
    case MS_MSG_CREDIT: on_credit(m); break;
    case MS_MSG_ERROR: {
        char why[MS_PROTO_TEXT_MAX + 32];
        snprintf(why, sizeof(why), "it said: %s", m->error.text);
        gone(why);
        break;
    }
    case MS_MSG_BYE: gone("it said goodbye"); break;
    default: MS_LOG_ONCE("unexpected %s from the daemon; ignored", ms_msg_type_name(m->type));
    }
}

/* Read and handle everything available. */
static void serve(void)
{
    if (ms_conn_flush(&C.conn) < 0) {
        gone("a write to its socket failed");
        return;
    }
    for (;;) {
        int r = ms_conn_fill(&C.conn);
        if (r < 0) {
            gone("a read from its socket failed");
            return;
        }
        struct ms_msg m;
        int d = 0;
        while (C.up && !C.quit && !C.broken && (d = ms_conn_next(&C.conn, &m)) == 1) {
            handle(&m);
            ms_msg_free(&m);
        }
        if (!C.up || C.quit || C.broken)
            return;
        if (d < 0) {
            gone("it sent a malformed frame");
            return;
        }
        if (C.conn.eof) {
            gone("its socket closed");
            return;
        }
        if (r == 0)
            return;
    }
}

/* The connection broke on our side (a failed send): the daemon may have said why first. */
static void last_words(void)
{
    const char *why = "the connection failed";
    char text[MS_PROTO_TEXT_MAX + 32];
    if (ms_conn_fill(&C.conn) >= 0) {
        struct ms_msg m;
        while (ms_conn_next(&C.conn, &m) == 1) {
            if (m.type == MS_MSG_BYE) {
                why = "it said goodbye";
            } else if (m.type == MS_MSG_ERROR) {
                snprintf(text, sizeof(text), "it said: %s", m.error.text);
                why = text;
            }
            ms_msg_free(&m);
        }
    }
    gone(why);
}

/* Running and quiet for idle_ns: say IDLE ("Idle" in client.h). Returns how long the service
 * thread may sleep, in milliseconds, before it should look again. */
static int check_quiet(void)
{
    if (!C.up || C.broken || !C.running || C.idle_sent || !C.idle_ns)
        return 1000;
    uint64_t now = now_ns();
    bool busy = __atomic_exchange_n(&active, 0, __ATOMIC_RELAXED) ||
                __atomic_load_n(&inflight, __ATOMIC_SEQ_CST) > 0 ||
                __atomic_load_n(&insync, __ATOMIC_RELAXED) > 0 || C.waiters > 0 || C.pop_active;
    if (busy) {
        C.quiet_t0 = now;
    } else if (now - C.quiet_t0 >= C.idle_ns) {
        struct ms_msg idle;
        ms_msg_init(&idle, MS_MSG_IDLE);
        if (csend(&idle, 0) == MS_OK) {
            C.idle_sent = true;
            C.st.idles++;
            C.st.quiet_idles++;
        }
        return 1000;
    }
    int ms = (int)(C.idle_ns / 2000000ull);
    return ms > 0 ? ms : 1;
}

/* A thread waits on the daemon and it has said nothing for a while: probe it (STATUS_REQ, which
 * any session may send); a probe unanswered for hang_ns means the daemon is hung ("Hung" in
 * client.h). Lock held. */
static void check_hang(void)
{
    if (!C.up || C.broken || !C.hang_ns)
        return;
    if (C.waiters == 0 && !C.pop_active) {
        C.probe_at = 0;
        return;
    }
    uint64_t now = now_ns(), every = MS_MIN(C.hang_ns / 2, 5000000000ull);
    if (C.probe_at && now - C.probe_at >= C.hang_ns) {
        char why[96];
        snprintf(why, sizeof(why), "it has not answered for %llu s",
                 (unsigned long long)((now - C.probe_at) / 1000000000ull));
        gone(why);
    } else if (!C.probe_at && now - C.last_rx >= every) {
        struct ms_msg m;
        ms_msg_init(&m, MS_MSG_STATUS_REQ);
        if (csend(&m, 0) == MS_OK)
            C.probe_at = now;
    }
}

static void *service(void *arg)
{
    (void)arg;
    MS_REAL(cuCtxSetCurrent)((CUcontext)C.ctx);
    struct ms_lock *mu = C.eng->lock;
    ms_lock(mu);
    while (!C.quit && C.up) {
        if (C.broken) {
            last_words();
            break;
        }
        check_hang();
        if (!C.up)
            break;
        int tmo = check_quiet();
        struct pollfd p[2] = {
            {.fd = C.conn.fd, .events = POLLIN | (ms_conn_out_pending(&C.conn) ? POLLOUT : 0)},
            {.fd = C.wakefd, .events = POLLIN},
        };
        ms_unlock(mu);
        int n = poll(p, 2, tmo);
        int err = errno;
        uint64_t t0 = now_ns();
        ms_lock(mu);
        uint64_t waited = now_ns() - t0;
        if (waited >= SLOW_DRAIN_NS)
            ms__shim_log("slow service: the engine's lock was held %.1f ms by another thread",
                         (double)waited / 1e6);
        if (C.quit)
            break;
        if (n < 0 && err != EINTR) {
            gone("poll failed");
            break;
        }
        uint64_t v;
        if (p[1].revents & POLLIN) {
            ssize_t rd = read(C.wakefd, &v, sizeof(v));
            (void)rd;
        }
        if (!C.broken)
            serve();
    }
    ms_unlock(mu);
    return NULL;
}

/* ---- life ---------------------------------------------------------------------------------- */

int ms_client_connect(unsigned gpu, uint64_t limit, struct ms_client_welcome *out)
{
    char path[MS_IPC_PATH_MAX + 1];
    int rc = ms_ipc_socket_path(gpu, path, sizeof(path));
    int fd = -1;
    if (rc == MS_OK)
        rc = ms_ipc_connect(path, CONNECT_MS, &fd);
    if (rc)
        return rc;
    ms_conn_init(&C.conn, fd, 0);
    struct ms_msg hello, reply;
    ms_msg_init(&hello, MS_MSG_HELLO);
    hello.hello.version = MS_PROTO_VERSION;
    hello.hello.pid = (uint32_t)getpid();
    hello.hello.prio = C.prio;
    hello.hello.weight = C.weight;
    hello.hello.mem_limit = limit;
    snprintf(hello.hello.name, sizeof(hello.hello.name), "%s", program_invocation_short_name);
    for (char *q = hello.hello.name; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    rc = ms_conn_request(&C.conn, WELCOME_MS, &hello, &reply);
    if (rc == MS_OK && reply.type == MS_MSG_ERROR) {
        ms__shim_say("the daemon refused this process: %s", reply.error.text);
        rc = MS_E_STATE;
    } else if (rc == MS_OK && reply.type != MS_MSG_WELCOME) {
        rc = MS_E_PARSE;
    }
    if (rc) {
        ms_msg_free(&reply); /* zeroed by ms_conn_request when nothing came */
        ms_conn_fini(&C.conn);
        C.conn.fd = -1;
        return rc;
    }
    C.task = reply.welcome.task;
    C.last_rx = now_ns();
    C.probe_at = 0;
    C.budget = reply.welcome.budget;
    C.slice_ns = reply.welcome.slice_ns;
    C.cap = limit && limit < C.budget ? limit : C.budget;
    ms_msg_free(&reply);
    C.up = true;
    out->task = C.task;
    out->budget = C.budget;
    out->slice_ns = C.slice_ns;
    ms__shim_log("daemon: task %u, budget %llu MiB", C.task,
                 (unsigned long long)(C.budget / MS_MIB));
    return MS_OK;
}

void ms_client_close(void)
{
    if (!C.up)
        return;
    C.up = false;
    ms_conn_fini(&C.conn);
    C.conn.fd = -1;
}

int ms_client_start(void *ctx)
{
    C.ctx = ctx;
    C.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = C.wakefd >= 0 ? 0 : -1;
    if (rc == 0) {
        /* The service thread takes no signal: the application's handlers run on its threads. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&C.thread, NULL, service, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc != 0) {
        ms__shim_say("cannot start the daemon client's thread; running without the daemon");
        if (C.wakefd >= 0)
            close(C.wakefd);
        C.wakefd = -1;
        ms_client_close();
        return MS_E_IO;
    }
    C.thread_on = true;
    return MS_OK;
}

void ms_client_shutdown(void)
{
    struct ms_lock *mu = C.eng->lock;
    ms_lock(mu);
    bool on = C.thread_on;
    C.quit = true;
    wake();
    broadcast();
    ms_unlock(mu);
    if (!on)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += JOIN_S;
    if (pthread_timedjoin_np(C.thread, NULL, &ts) != 0) {
        ms__shim_log("the daemon client's thread did not stop; leaving it");
        return;
    }
    ms_lock(mu);
    C.thread_on = false;
    ms_client_close(); /* the daemon sees the close and releases this task's memory */
    ms_unlock(mu);
}

void ms_client_atfork_child(void)
{
    /* Only this thread exists; the socket belongs to the parent's session. */
    if (C.conn.fd >= 0)
        close(C.conn.fd);
    C.conn.fd = -1;
    if (C.wakefd >= 0)
        close(C.wakefd);
    C.wakefd = -1;
    C.up = false;
    C.thread_on = false;
    C.running = false;
    C.pop_active = false;
    C.waiters = 0;
    C.dwait = 0;
    C.dw_t0 = 0;
    __atomic_store_n(&inflight, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stopping, 0, __ATOMIC_SEQ_CST);
    if (C.cond_ready)
        cond_init();
}
