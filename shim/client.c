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
#include "shim/client_int.h"

#include <sys/socket.h>

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
    C.reverse_demand = ms__shim_opt(MS_OPT_REVERSE_DEMAND) != 0;
    C.bare_late = ms__shim_opt(MS_OPT_DEFER_HOST_MAP) == 2;
    ms__cl_cond_init();
}

bool ms_client_allowed(void)
{
    return C.allowed;
}

bool ms_client_available(void)
{
    if (!C.allowed || !C.cond_ready)
        return false;
    /* The device is not known yet (no driver call is made here): any GPU's socket will do;
     * ms_client_connect uses the context's. $MSCHED_SOCKET names one path for every GPU. */
    return ms_ipc_any_socket();
}

/* The socket of the device (contract: client.h). */
static int device_socket(unsigned gpu, const char *uuid, char *path, size_t len)
{
    if (uuid && ms_ipc_uuid_socket_path(uuid, path, len) == MS_OK) {
        struct stat st;
        if (lstat(path, &st) == 0 || getenv("MSCHED_SOCKET"))
            return MS_OK;
    }
    int rc = ms_ipc_socket_path(gpu, path, len);
    if (rc == MS_OK && uuid) {
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
            return MS_E_NOTFOUND; /* a link names another numbering's GPU */
    }
    return rc;
}

void ms_client_stats_locked(struct ms_client_stats *out)
{
    *out = C.st;
    /* A slice (or a wait) still open counts up to now. */
    uint64_t now = ms__cl_now_ns();
    if (C.running)
        out->run_ns += now - C.run_t0;
    if (C.dw_t0)
        out->dwait_ns += now - C.dw_t0;
}

void ms_client_stats_get(struct ms_client_stats *out)
{
    ms_lock(C.eng->lock);
    ms_client_stats_locked(out);
    ms_unlock(C.eng->lock);
}

void ms_client_region_add(uint32_t slot, uint64_t base, uint64_t size, uint64_t chunk_bytes)
{
    if (!C.up)
        return;
    if (ms_grow((void **)&C.w, &C.capw, C.nw + 1, sizeof(C.w[0])) ||
        ms_grow((void **)&C.slot_wid, &C.capslot, (size_t)slot + 1, sizeof(C.slot_wid[0]))) {
        ms__cl_conn_break("out of memory");
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
    ms__cl_csend(&m, 0);
}

void ms_client_region_free(uint32_t slot)
{
    if (!C.up || slot >= C.capslot || !C.slot_wid[slot])
        return;
    uint32_t wid = C.slot_wid[slot];
    C.slot_wid[slot] = 0;
    struct wreg *r = ms__cl_wreg_of(wid);
    if (r && r->live) {
        r->live = false;
        C.ndead++;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_FREE;
    m.region.region = wid;
    ms__cl_csend(&m, 0);
    ms__cl_prune_dead();
}

int ms_client_connect(unsigned gpu, const char *uuid, uint64_t limit, struct ms_client_welcome *out)
{
    char path[MS_IPC_PATH_MAX + 1];
    int rc = device_socket(gpu, uuid, path, sizeof(path));
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
    hello.hello.host_limit = C.eng && C.eng->host_limit ? C.eng->host_limit() : 0;
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
    C.last_rx = ms__cl_now_ns();
    C.probe_at = 0;
    uint64_t budget = reply.welcome.budget;
    C.slice_ns = reply.welcome.slice_ns;
    C.cap_is_limit = limit && limit < budget;
    C.cap = C.cap_is_limit ? limit : budget;
    ms_msg_free(&reply);
    C.up = true;
    out->task = C.task;
    out->budget = budget;
    out->slice_ns = C.slice_ns;
    ms__shim_log("daemon: task %u, budget %llu MiB, on %s", C.task,
                 (unsigned long long)(budget / MS_MIB), path);
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
        rc = pthread_create(&C.thread, NULL, ms__cl_service, NULL);
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
    ms__cl_wake();
    ms__cl_broadcast();
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

void ms_client_abandon(void)
{
    int fd = __atomic_load_n(&C.conn.fd, __ATOMIC_RELAXED);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR); /* not close: the service thread may still poll it */
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
    __atomic_store_n(&ms__cl_inflight, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ms__cl_stopping, 0, __ATOMIC_SEQ_CST);
    if (C.cond_ready)
        ms__cl_cond_init();
}
