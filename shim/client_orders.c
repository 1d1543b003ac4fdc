/*
 * client_orders.c - the service thread: it owns the socket's reading side and carries out the
 * daemon's orders in the engine's context; it also notices idleness and a hung daemon (file
 * layering: client_int.h; design: client.h).
 */
#include "shim/client_int.h"
#include "shim/shim_int.h"

/* A drain this long is logged with its two parts (where a switch's stop time goes). */
#define SLOW_DRAIN_NS 50000000ull

/* An order whose own work (the engine's copies and mappings, not waiting for credit or a
 * drain) took this long is logged with its size and longest step, and where that step's time
 * went by driver call (ms_exec_stats): a copy at the link's speed is about 20 ms per GiB, so
 * anything far slower is the driver or the host holding it up, and the phase names the call. */
#define SLOW_ORDER_NS 300000000ull

/* A capture in global or thread-local mode is open (shim/hook_capture.c): a drain's
 * cuCtxSynchronize would invalidate it, so a STOP or an EVICT waits for it to end, the task
 * running on meanwhile (its commands, captured or not, keep being admitted: the capturing
 * thread may need them). A capture that outlasts the daemon's stop_timeout makes the task
 * "stalled" there until its STOPPED. Logged once per order when the wait is long. */
#define CAPTURE_LOG_NS 1000000000ull

static void capture_wait(const char *why)
{
    uint64_t t0 = 0;
    bool said = false;
    while (!C.quit && ms__shim_capture_open()) {
        uint64_t now = ms__cl_now_ns();
        if (!t0)
            t0 = now;
        if (!said && now - t0 >= CAPTURE_LOG_NS) {
            ms__shim_log("%s waits for a stream capture to end (a synchronization now would "
                         "invalidate it)",
                         why);
            said = true;
        }
        ms__cl_timed_wait(2000000ull);
    }
    if (t0)
        C.st.capture_waits++;
}

/*
 * Admitted commands reach the driver and finish: nothing in flight may use a victim.
 *
 * A stream capture that begins after capture_wait() looked (the capturing thread's last
 * command before it was still in flight) would be invalidated by the synchronization below
 * (tests/cli/shim_daemon.sh's capture beside a busy client failed so, now and then). So the
 * drain holds the capture-begin gate (shim/hook_capture.c) and waits until no capture is
 * beginning or open before it synchronizes: that thread's captured commands are never held, so
 * an open capture ends; a capture that would begin meanwhile waits for the release. The wait is
 * bounded (DRAIN_CAPTURE_NS): a capturing thread that also issues an uncaptured command, held
 * now that the task is stopping, would never end its capture; after the bound the drain
 * synchronizes as it did before the gate, which invalidates that capture, and says so.
 */
#define DRAIN_CAPTURE_NS 5000000000ull
void ms__cl_drain(const char *why)
{
    uint64_t t0 = ms__cl_now_ns();
    int n0 = __atomic_load_n(&ms__cl_inflight, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ms__cl_stopping, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&ms__cl_inflight, __ATOMIC_SEQ_CST) > 0 && !C.quit)
        ms__cl_timed_wait(10000000ull);
    __atomic_store_n(&ms__cl_stopping, 0, __ATOMIC_SEQ_CST);
    ms__shim_capture_hold();
    uint64_t w0 = ms__cl_now_ns();
    bool waited = false;
    while (!C.quit && !ms__shim_capture_quiet()) {
        if (ms__cl_now_ns() - w0 >= DRAIN_CAPTURE_NS) {
            ms__shim_log("%s: a stream capture begun during the drain is still open after %.0f s; "
                         "synchronizing anyway (the capture will be invalidated)",
                         why, (double)DRAIN_CAPTURE_NS / 1e9);
            break;
        }
        waited = true;
        ms__cl_timed_wait(2000000ull);
    }
    if (waited)
        C.st.capture_waits++;
    uint64_t t1 = ms__cl_now_ns();
    MS_REAL(cuCtxSynchronize)();
    ms__shim_capture_release();
    uint64_t t2 = ms__cl_now_ns();
    if (t2 - t0 >= SLOW_DRAIN_NS)
        ms__shim_log("slow %s: %.1f ms waiting for %d admitted command(s) to return "
                     "(%u thread(s) in a synchronizing call), %.1f ms for the GPU to finish",
                     why, (double)(t1 - t0) / 1e6, n0,
                     __atomic_load_n(&ms__cl_insync, __ATOMIC_RELAXED), (double)(t2 - t1) / 1e6);
}

void ms__cl_on_run(const struct ms_msg *m)
{
    uint64_t now = ms__cl_now_ns();
    ms__cl_slice_end(now); /* a RUN while running: the slice so far counts, a new one starts */
    C.running = true;
    C.run_epoch = m->run.epoch;
    C.run_t0 = now;
    C.started_sent = false;
    if (C.dwait && !C.dw_t0)
        C.dw_t0 = now;     /* threads were already waiting on a demand: that counts from now */
    C.quiet_t0 = C.run_t0; /* idle_sent stays: an IDLE may have crossed this RUN */
    C.dem_pending = false;
    C.prep_want = 0; /* a PREPARE names its RUN */
    ms_chunk_set_clear(&C.want);
    C.want_sent = 0;
    C.want_whole = false;
    C.st.slices++;
    ms__cl_broadcast();
}

/* PREPARE: a hint for this RUN (a stale epoch is ignored); the service loop acts on it. */
static void on_prepare(const struct ms_msg *m)
{
    if (!C.running || m->prepare.epoch != C.run_epoch)
        return;
    C.st.prepares++;
    C.prep_want = m->prepare.bytes;
}

/* Between messages, with no population in progress: map a few chunks an eviction left bare
 * (BARE_STEP at a time, so messages are looked at in between), then one step of a PREPARE
 * while running (the lock is released while it pins). Returns true when another step is due. */
#define BARE_STEP 4
/* Pooled host memory is looked at for giving back once a second, and chunk after chunk while
 * there is some to give back (ms__eng_host_trim: only what sat unused long enough). */
#define TRIM_EVERY_NS 1000000000ull

static bool trim_step(void)
{
    if (!C.eng->host_trim)
        return false;
    uint64_t now = ms__cl_now_ns();
    if (!C.trim_more && now - C.trim_at < TRIM_EVERY_NS)
        return false;
    C.trim_at = now;
    C.trim_more = C.eng->host_trim() == 1;
    return C.trim_more;
}

bool ms__cl_prepare_step(void)
{
    if (C.pop_active)
        return false;
    if (C.eng->map_bare && !C.bare_late) {
        int left = C.eng->map_bare(BARE_STEP, false);
        if (left > 0)
            return true;
        if (left < 0) {
            ms__cl_conn_break("cannot map evicted memory to its host copy");
            return false;
        }
    }
    if (!C.prep_want || !C.running || !C.eng->prepare)
        return trim_step();
    int r = C.eng->prepare(C.prep_want);
    if (r == 1) {
        C.st.prep_steps++;
        return C.prep_want != 0; /* a STOP or RUN may have come meanwhile */
    }
    if (r < 0)
        C.st.prep_failed++;
    C.prep_want = 0;
    return false;
}

void ms__cl_on_stop(const struct ms_msg *m)
{
    C.st.stops++;
    C.prep_want = 0; /* the eviction it prepared for is next */
    capture_wait("a STOP");
    bool was = C.running;
    ms__cl_dwait_close(ms__cl_now_ns());
    C.running = false; /* no admission from now on */
    ms__cl_drain("stop");
    struct ms_msg r;
    ms_msg_init(&r, MS_MSG_STOPPED);
    r.stopped.epoch = m->stop.epoch;
    r.stopped.gpu_ns = was ? ms__cl_now_ns() - C.run_t0 : 0;
    C.st.run_ns += r.stopped.gpu_ns; /* the slice ends with its STOPPED */
    r.stopped.bytes_moved = 0;
    r.stopped.misses = C.eng->misses ? C.eng->misses() : 0;
    r.stopped.host_bytes = C.eng->host_bytes ? C.eng->host_bytes(&r.stopped.host_pool) : 0;
    C.misses_sent = r.stopped.misses;
    C.host_sent = r.stopped.host_bytes;
    C.pool_sent = r.stopped.host_pool;
    ms__cl_csend(&r, m->seq);
    C.dem_pending = false;
    if (C.waiters == 0) {
        struct ms_msg idle;
        ms_msg_init(&idle, MS_MSG_IDLE);
        if (ms__cl_csend(&idle, 0) == MS_OK) {
            C.st.idles++;
            C.idle_sent = true;
        }
    }
    ms__cl_broadcast();
}

uint64_t ms__cl_resident_bytes_of(const struct ms_chunk_set *s)
{
    uint64_t b = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(C.eng->rt, s->ids[i]);
        if (c && ms_chunk_state_resident((enum ms_chunk_state)c->state))
            b += c->bytes;
    }
    return b;
}

void ms__cl_order_timed(const char *what, uint64_t work_ns, uint64_t step_ns, uint64_t bytes,
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

void ms__cl_on_evict(const struct ms_msg *m)
{
    const struct ms_msg_order *o = &m->order;
    C.st.evict_orders++;
    capture_wait("an EVICT");
    /* The daemon evicts from tasks that do not run; if this one runs, hold its admissions. */
    bool stopped = !C.running;
    C.hold = true;
    ms__cl_drain("evict");
    /* Stopped and drained: nothing of this process can touch the chunks until a command is
     * admitted, and the gate maps bare chunks first; so their host chunks are mapped after the
     * order (ms__cl_prepare_step) instead of within it, off the switch's critical path. */
    bool bare = stopped && C.eng->evict_bare && C.eng->map_bare;
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
        if (ms__cl_run_chunks(&o->runs[k], &C.batch)) {
            ms__cl_conn_break("out of memory");
            break;
        }
        batch += ms__cl_run_bytes(&o->runs[k]);
        if (batch < BATCH_BYTES && ++nbatch < BATCH_RUNS && k + 1 < o->nruns)
            continue;
        uint64_t before = ms__cl_resident_bytes_of(&C.batch);
        struct ms_exec_stats xs;
        memset(&xs, 0, sizeof(xs));
        uint64_t t0 = ms__cl_now_ns();
        int ee = bare ? C.eng->evict_bare(&C.batch, &xs) : C.eng->exec(&C.batch, NULL, &xs);
        if (ee != MS_OK) {
            ms__cl_conn_break("an eviction failed");
            break;
        }
        uint64_t dt = ms__cl_now_ns() - t0;
        work += dt;
        if (dt > step) {
            step = dt;
            longest = xs;
        }
        if (C.running)
            C.st.order_run_ns += dt;
        freed += before - ms__cl_resident_bytes_of(&C.batch);
        ms_chunk_set_clear(&C.batch);
        batch = 0;
        nbatch = 0;
        struct ms_msg r;
        ms_msg_init(&r, MS_MSG_EVICTED);
        r.progress.epoch = o->epoch;
        r.progress.runs_done = k + 1;
        r.progress.bytes = freed;
        ms__cl_csend(&r, m->seq);
    }
    ms__host_gate_leave();
    ms__cl_order_timed("eviction", work, step, freed, &longest, &started);
    if (C.up && !C.broken)
        ms__cl_report(true); /* host chunks made for the victims: `msched status` shows them */
    C.hold = false;
    ms__cl_broadcast();
}

bool ms__cl_pop_pending(void)
{
    return C.pop_active && C.pop_done < C.pop_n && C.up && !C.broken;
}

/* The populations the credit allows, batch by batch, inside one gate (as ms__cl_on_evict). */
void ms__cl_pop_batches(void)
{
    while (ms__cl_pop_pending()) {
        ms_chunk_set_clear(&C.batch);
        uint32_t j = C.pop_done;
        uint64_t taken = C.pop_taken, batch = 0;
        while (j < C.pop_n && batch < BATCH_BYTES && j - C.pop_done < BATCH_RUNS) {
            uint64_t rb = ms__cl_run_bytes(&C.pop_runs[j]);
            if (rb > C.pop_credit - MS_MIN(C.pop_credit, taken))
                break; /* wait for CREDIT */
            if (ms__cl_run_chunks(&C.pop_runs[j], &C.batch)) {
                ms__cl_conn_break("out of memory");
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
        uint64_t t0 = ms__cl_now_ns();
        if (C.eng->exec(NULL, &C.batch, &xs) != MS_OK) {
            ms__cl_conn_break("a population failed");
            return;
        }
        uint64_t dt = ms__cl_now_ns() - t0;
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
        ms__cl_csend(&r, C.pop_seq);
        ms__cl_broadcast(); /* a waiting command may have what it needs now (early RUN) */
    }
    if (C.pop_active && C.pop_done == C.pop_n) {
        C.pop_active = false;
        C.dem_pending = false;
        ms__cl_order_timed("population", C.pop_work, C.pop_step, C.pop_taken, &C.pop_longest,
                           &C.pop_started);
        ms__cl_broadcast();
    }
}

void ms__cl_pop_progress(void)
{
    bool gate = ms__cl_pop_pending(); /* none pending: pop_batches only completes the order */
    if (gate)
        ms__host_gate_enter();
    ms__cl_pop_batches();
    if (gate)
        ms__host_gate_leave();
}

void ms__cl_on_populate(struct ms_msg *m)
{
    C.st.pop_orders++;
    ms_free(C.pop_runs);
    C.pop_runs = NULL;
    C.pop_active = false;
    if (m->order.nruns) {
        C.pop_runs = ms_malloc(m->order.nruns * sizeof(*C.pop_runs));
        if (!C.pop_runs) {
            ms__cl_conn_break("out of memory");
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
    ms__cl_pop_progress();
}

void ms__cl_on_credit(const struct ms_msg *m)
{
    if (!C.pop_active || m->credit.epoch != C.pop_epoch || m->credit.credit < C.pop_credit)
        return; /* late, or a shrinking credit: ignore it */
    C.pop_credit = m->credit.credit;
    ms__cl_pop_progress();
}

/* The daemon is gone: close, let the engine run alone, wake every waiting thread. */
void ms__cl_gone(const char *why)
{
    if (!C.up)
        return;
    C.up = false;
    uint64_t now = ms__cl_now_ns();
    ms__cl_slice_end(now);
    ms__cl_dwait_close(now);
    C.running = false;
    C.pop_active = false;
    C.dem_pending = false;
    ms_conn_fini(&C.conn);
    C.conn.fd = -1;
    C.eng->daemon_gone(why);
    ms__cl_broadcast();
}

void ms__cl_handle(struct ms_msg *m)
{
    C.last_rx = ms__cl_now_ns();
    C.probe_at = 0;
    switch (m->type) {
    case MS_MSG_STATUS: break; /* the answer to a liveness probe */
    case MS_MSG_RUN: ms__cl_on_run(m); break;
    case MS_MSG_STOP: ms__cl_on_stop(m); break;
    case MS_MSG_PREPARE: on_prepare(m); break;
    case MS_MSG_EVICT: ms__cl_on_evict(m); break;
    case MS_MSG_POPULATE: ms__cl_on_populate(m); break;
    case MS_MSG_CREDIT: ms__cl_on_credit(m); break;
    case MS_MSG_ERROR: {
        char why[MS_PROTO_TEXT_MAX + 32];
        snprintf(why, sizeof(why), "it said: %s", m->error.text);
        ms__cl_gone(why);
        break;
    }
    case MS_MSG_BYE: ms__cl_gone("it said goodbye"); break;
    default: MS_LOG_ONCE("unexpected %s from the daemon; ignored", ms_msg_type_name(m->type));
    }
}

/* Read and handle everything available. */
void ms__cl_serve(void)
{
    if (ms_conn_flush(&C.conn) < 0) {
        ms__cl_gone("a write to its socket failed");
        return;
    }
    for (;;) {
        int r = ms_conn_fill(&C.conn);
        if (r < 0) {
            ms__cl_gone("a read from its socket failed");
            return;
        }
        struct ms_msg m;
        int d = 0;
        while (C.up && !C.quit && !C.broken && (d = ms_conn_next(&C.conn, &m)) == 1) {
            ms__cl_handle(&m);
            ms_msg_free(&m);
        }
        if (!C.up || C.quit || C.broken)
            return;
        if (d < 0) {
            ms__cl_gone("it sent a malformed frame");
            return;
        }
        if (C.conn.eof) {
            ms__cl_gone("its socket closed");
            return;
        }
        if (r == 0)
            return;
    }
}

/* The connection broke on our side (a failed send): the daemon may have said why first. */
void ms__cl_last_words(void)
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
    ms__cl_gone(why);
}

/* Running and quiet for idle_ns: say IDLE ("Idle" in client.h). Returns how long the service
 * thread may sleep, in milliseconds, before it should look again. */
int ms__cl_check_quiet(void)
{
    if (!C.up || C.broken || !C.running || C.idle_sent || !C.idle_ns)
        return 1000;
    uint64_t now = ms__cl_now_ns();
    bool busy = __atomic_exchange_n(&ms__cl_active, 0, __ATOMIC_RELAXED) ||
                __atomic_load_n(&ms__cl_inflight, __ATOMIC_SEQ_CST) > 0 ||
                __atomic_load_n(&ms__cl_insync, __ATOMIC_RELAXED) > 0 || C.waiters > 0 ||
                C.pop_active;
    if (busy) {
        C.quiet_t0 = now;
    } else if (now - C.quiet_t0 >= C.idle_ns) {
        struct ms_msg idle;
        ms_msg_init(&idle, MS_MSG_IDLE);
        if (ms__cl_csend(&idle, 0) == MS_OK) {
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
void ms__cl_check_hang(void)
{
    if (!C.up || C.broken || !C.hang_ns)
        return;
    if (C.waiters == 0 && !C.pop_active) {
        C.probe_at = 0;
        return;
    }
    uint64_t now = ms__cl_now_ns(), every = MS_MIN(C.hang_ns / 2, 5000000000ull);
    if (C.probe_at && now - C.probe_at >= C.hang_ns) {
        char why[96];
        snprintf(why, sizeof(why), "it has not answered for %llu s",
                 (unsigned long long)((now - C.probe_at) / 1000000000ull));
        ms__cl_gone(why);
    } else if (!C.probe_at && now - C.last_rx >= every) {
        struct ms_msg m;
        ms_msg_init(&m, MS_MSG_STATUS_REQ);
        if (ms__cl_csend(&m, 0) == MS_OK)
            C.probe_at = now;
    }
}

void *ms__cl_service(void *arg)
{
    (void)arg;
    MS_REAL(cuCtxSetCurrent)((CUcontext)C.ctx);
    struct ms_lock *mu = C.eng->lock;
    ms_lock(mu);
    while (!C.quit && C.up) {
        if (C.broken) {
            ms__cl_last_words();
            break;
        }
        ms__cl_check_hang();
        if (!C.up)
            break;
        int tmo = ms__cl_check_quiet();
        if (ms__cl_prepare_step())
            tmo = 0; /* more to make: only look at the socket in between */
        if (C.quit || !C.up || C.broken)
            continue;
        struct pollfd p[2] = {
            {.fd = C.conn.fd, .events = POLLIN | (ms_conn_out_pending(&C.conn) ? POLLOUT : 0)},
            {.fd = C.wakefd, .events = POLLIN},
        };
        ms_unlock(mu);
        int n = poll(p, 2, tmo);
        int err = errno;
        uint64_t t0 = ms__cl_now_ns();
        ms_lock(mu);
        uint64_t waited = ms__cl_now_ns() - t0;
        if (waited >= SLOW_DRAIN_NS)
            ms__shim_log("slow service: the engine's lock was held %.1f ms by another thread",
                         (double)waited / 1e6);
        if (C.quit)
            break;
        if (n < 0 && err != EINTR) {
            ms__cl_gone("poll failed");
            break;
        }
        uint64_t v;
        if (p[1].revents & POLLIN) {
            ssize_t rd = read(C.wakefd, &v, sizeof(v));
            (void)rd;
        }
        if (!C.broken)
            ms__cl_serve();
    }
    ms_unlock(mu);
    return NULL;
}
