/*
 * client.h - libmsched's side of the daemon protocol (docs/protocol.md): the connection to
 * mschedd, the service thread that obeys its orders, and the launch gate's time slicing.
 *
 * Design
 *   When the daemon's socket exists (ipc/ipc.h path rules: $MSCHED_SOCKET, else the default
 *   path) and MSCHED_DAEMON is not "off", the engine (engine.h) connects at its start (first
 *   allocation in a context): HELLO (priority MSCHED_PRIORITY rt|be|0..10, weight MSCHED_WEIGHT
 *   0..1000, memory limit MSCHED_BUDGET: what this process may keep resident, the program's
 *   name), WELCOME. The engine then runs in daemon mode:
 *     - every engine region is mirrored with REGION add/free; the wire ids only increase (the
 *       engine's table reuses slots, so the client keeps its own id map, and remembers the
 *       geometry of freed regions so that orders crossing a free still count their bytes);
 *     - the budget is the daemon's: the shim maps only what a POPULATE credited and unmaps on
 *       EVICT; it never faults locally;
 *     - a command (kernel, copy, memset) is admitted only between RUN and STOP. A thread that
 *       may not submit waits on a condition variable, having sent DEMAND (next = the chunks its
 *       command needs, then what history predicts comes next, up to half of what the task may
 *       hold (the budget, or its limit); recent = the chunks used most recently, up to all of
 *       it). A command needing more than that fails with CUDA_ERROR_OUT_OF_MEMORY. While
 *       running, a command whose chunks are not resident sends DEMAND too and waits for the
 *       daemon's incremental POPULATE (or its STOP, when the task's own chunks leave no
 *       room). Commands on a stream being captured (cuStreamIsCapturing) are never held:
 *       nothing runs until the graph is launched, and a graph launch is gated on what its nodes
 *       reach (engine.md).
 *     - a private service thread owns the socket's reading side: it makes the engine's CUDA
 *       context current (the real cuCtxSetCurrent) and executes orders with the core executor:
 *       EVICT (one EVICTED per batch of runs, so credit flows to the populating task while it
 *       works), POPULATE and CREDIT (runs mapped while their cumulative bytes stay within the
 *       credit; one POPULATED per batch), STOP (admissions stop, admitted commands reach the
 *       driver, the real cuCtxSynchronize, then STOPPED; IDLE too when no thread waits).
 *   Idle. A running task that goes quiet tells the daemon (IDLE), so a waiting task can have
 *     the GPU without waiting for the slice to end, and a high-priority task that serves
 *     requests does not hold the GPU between them. Quiet: for idle_ms (MSCHED_IDLE_MS, default
 *     20) no command was admitted or finished, none is in flight, no thread is inside a
 *     synchronizing call (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize: waiting
 *     for the GPU is not idleness) and no thread waits at the gate. The service thread checks
 *     every idle_ms / 2 while running. The next admitted command, if the task still holds
 *     RUN, sends a DEMAND of its chunks so the daemon counts the task runnable again. GPU work
 *     already queued is not looked at: a task that queues more than idle_ms of work and then
 *     neither submits nor waits (CPU work between steps) looks quiet and may be stopped before
 *     its slice ends; the STOP drains that work first, so nothing is lost but the rest of the
 *     slice.
 *   Hung. While a thread waits on the daemon (for RUN or a POPULATE) and the daemon has sent
 *     nothing for min(hang_ms / 2, 5 s), the service thread sends STATUS_REQ as a liveness
 *     probe; any message from the daemon answers it. A probe unanswered for hang_ms
 *     (MSCHED_DAEMON_TIMEOUT_MS, default 30 s) means a daemon that is stopped or stuck with its
 *     socket open: it is treated as gone ("it has not answered for N s").
 *   When the daemon goes away (the socket closes, BYE, ERROR, a malformed frame, a failed
 *   send) the service thread tells the engine, which runs alone (engine.h, "daemon gone"):
 *   nothing waits for the daemon again, and one line on stderr says so.
 *
 * In flight. The gate counts a command it admits; the hook's cleanup (ms__shim_gate_end, after
 * the forwarded call) uncounts it. STOP waits for the count to reach zero before it synchronizes,
 * so no admitted command can reach the driver after STOPPED.
 *
 * Locking: the client has no lock of its own. Every function here except ms_client_configure,
 * ms_client_gate_end, ms_client_sync_begin/_end, ms_client_shutdown and ms_client_atfork_child
 * is called with the engine's
 * lock held (struct ms_client_engine.lock); the service thread takes that lock for everything but
 * its poll(). Waits (RUN, populations, admitted commands) are condition waits on that lock.
 *
 * Errors: functions that can fail return MS_OK or an MS_E_* code; the gate returns a CUresult.
 * Nothing aborts; a client that cannot go on closes its connection and the engine runs alone.
 */
#ifndef MS_SHIM_CLIENT_H
#define MS_SHIM_CLIENT_H

#include "shim/shim_events.h"
#include "shim/locks.h"
#include "shim/locks.h"
#include "shim/shim_int.h"

#include "core/exec.h"
#include "core/predict.h"
#include "core/region.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the client, called by the engine ----------------------------------------------------- */

/* Take the configuration (shim/config.h: MSCHED_DAEMON, MSCHED_PRIORITY, MSCHED_WEIGHT,
 * MSCHED_IDLE_MS: see "Idle" above, MSCHED_DAEMON_TIMEOUT_MS: see "Hung" above), once, at the
 * shim's initialisation (no lock). */
void ms_client_configure(void);
/* MSCHED_DAEMON allows a daemon (it is not "off"). */
bool ms_client_allowed(void);
/* Allowed and the socket exists now (a stat, no connection). */
bool ms_client_available(void);

struct ms_client_welcome {
    uint32_t task;
    uint64_t budget;
    uint64_t slice_ns;
};

/* Connect, HELLO, wait for WELCOME (bounded: about 3 s). uuid: the device's UUID, which names
 * its daemon's socket (gpu-<uuid>.sock); gpu: the device's ordinal in this process, whose
 * gpu<N>.sock is used only when uuid is NULL or no socket has the UUID's name and gpu<N>.sock
 * is a socket of its own (a daemon that knows no UUID), never when it is a link (the index
 * of some other process's numbering). $MSCHED_SOCKET overrides both.
 * limit: the HELLO's memory limit (MSCHED_BUDGET; 0 = none).
 * Errors: MS_E_NOTFOUND (no daemon), MS_E_IO, MS_E_STATE (refused: said once on stderr). */
int ms_client_connect(unsigned gpu, const char *uuid, uint64_t limit,
                      struct ms_client_welcome *out);
/* Start the service thread, which will make ctx current. On failure the connection is closed
 * and MS_E_IO returned: the engine runs alone. */
int ms_client_start(void *ctx);
/* Close the connection (before ms_client_start, or when the engine cannot start after all). */
void ms_client_close(void);

/* Mirror an engine region (slot = the engine table's region id). A failure breaks the
 * connection (the engine then runs alone). */
void ms_client_region_add(uint32_t slot, uint64_t base, uint64_t size, uint64_t chunk_bytes);
void ms_client_region_free(uint32_t slot);

/*
 * The daemon-mode launch gate. *need (normalized; the whole footprint when unbounded) is what
 * the command touches. Returns CUDA_SUCCESS when the command may be submitted (admitted: the
 * hook's cleanup calls ms_client_gate_end), or a CUresult to fail it with. While waiting the
 * engine's lock is released, so a need living in shared scratch is first copied into `own`
 * (caller-initialised, caller-freed) and *need pointed at it. *alone is set when the daemon is
 * gone: the engine must gate the command itself (standalone), with *need.
 */
int ms_client_gate(struct ms_chunk_set **need, struct ms_chunk_set *own, bool unbounded,
                   struct ms_shim_stream stream, bool *alone);
/* s is being captured into a graph (cuStreamIsCapturing): its commands are recorded, not run,
 * and nothing may synchronize while it captures. No lock needed. */
bool ms_client_capturing(struct ms_shim_stream s);
/* The hook that the gate admitted returned (no lock held; cheap when nothing was admitted). */
void ms_client_gate_end(void);
/* A synchronizing call (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize) begins or
 * has returned: waiting for the GPU is not idleness ("Idle" above). No lock; any thread. */
void ms_client_sync_begin(void);
void ms_client_sync_end(void);

/* At exit (no lock held): stop the service thread (bounded wait) and close the connection. */
void ms_client_shutdown(void);
/* At exit from a thread that holds a shim lock (exit() from a signal handler that interrupted
 * the shim): take no lock and wait for nothing; shut the connection's socket so the daemon
 * releases this task (the process is ending: nothing else is cleaned up). */
void ms_client_abandon(void);
/* In a forked child (one thread, fresh locks): forget the parent's connection, silently. */
void ms_client_atfork_child(void);

struct ms_client_stats {
    uint64_t slices, stops, demands, idles, evict_orders, pop_orders, waits, wait_ns;
    uint64_t quiet_idles;    /* of idles: sent while running because the task went quiet */
    uint64_t demand_repeats; /* of demands: repeated because nothing answered the last one */
    uint64_t capture_waits;  /* STOP or EVICT orders that waited for a stream capture to end */
    uint64_t prepares;       /* PREPARE hints got (for the current RUN) */
    uint64_t prep_steps;     /* ... host chunks made for them (one per step) */
    uint64_t prep_failed;    /* ... hints given up: the host memory limit, a driver error */
    /* Where running time goes (client.c): all on the monotonic clock, in nanoseconds. */
    uint64_t run_ns;       /* holding RUN: each slice from RUN to STOPPED (or to now) */
    uint64_t dwait_ns;     /* of it: some thread waiting on a demand's population (a union) */
    uint64_t order_run_ns; /* of it: orders executed in the engine under its lock */
    /* RUN to the first command admitted after it (STARTED), over the RUNs that had one. */
    uint64_t first_runs, first_ns, first_ns_max;
};
void ms_client_stats_get(struct ms_client_stats *out);
/* The same, with the engine lock already held (the engine's progress line). */
void ms_client_stats_locked(struct ms_client_stats *out);

/* ---- the engine, for the client ------------------------------------------------------------- */

/*
 * What the client needs of the engine, handed over once (ms_client_attach, at the engine's
 * configuration) so that the client calls nothing of the engine by name: the engine is above
 * the client. The functions are called with the engine's lock held.
 *   lock         the engine's lock (shim/locks.h level 2); the client's own state lives under
 *                it, and its waits are condition waits on it
 *   rt           the engine's region table (read: chunk geometry and states)
 *   all_ready    every chunk of need is ready (CLEAN or DIRTY): the command can run
 *   exec         evict every settled resident chunk of evict, then populate every non-resident
 *                chunk of pop (in order), with no budget of its own (the daemon's credit is
 *                the limit); bytes moved and time (exec.h) are added to *st when not NULL;
 *                errors: the executor's (the table stays consistent)
 *   predict      the daemon's wanted sets (core/history.h, ms_history_predict)
 *   admitted     a command was admitted: mark its chunks used and remember them
 *   daemon_gone  the daemon is gone (why: one phrase); once, from the service thread
 */
struct ms_client_engine {
    struct ms_lock *lock;
    struct ms_rtable *rt;
    bool (*all_ready)(const struct ms_chunk_set *need);
    int (*exec)(const struct ms_chunk_set *evict, const struct ms_chunk_set *pop,
                struct ms_exec_stats *st);
    int (*predict)(const struct ms_chunk_set *need, uint64_t next_cap,
                   struct ms_chunk_set *out_next, uint64_t recent_cap,
                   struct ms_chunk_set *out_recent);
    void (*admitted)(const struct ms_chunk_set *need);
    void (*daemon_gone)(const char *why);
    /* Commands so far that ran with named chunks off the device (reported in DEMAND and
     * STOPPED, shown by `msched status`). */
    uint64_t (*misses)(void);
    /* Host bytes pinned now (of those, *pool: the pool's free host chunks), and the most that
     * may be (HELLO, DEMAND, STOPPED, REPORT). */
    uint64_t (*host_bytes)(uint64_t *pool);
    uint64_t (*host_limit)(void);
    /* Map the never-populated chunks `need` names to host chunks (the engine's
     * ms__eng_map_empty_host: releases the lock while pinning; `need` must not be shared). */
    int (*map_empty)(const struct ms_chunk_set *need);
    /* One step of making host memory ahead of an eviction the daemon expects (PREPARE: the
     * engine's ms__eng_host_prepare_step; releases the lock while pinning): 1 made some (call
     * again), 0 nothing left to make, an MS_E_* code. NULL: never prepares. */
    int (*prepare)(uint64_t want);
    /* One step of giving back host memory that sat unused in the pool (the engine's
     * ms__eng_host_trim; releases the lock while unpinning): 1 gave some back (call again), 0
     * nothing to give back. NULL: never. */
    int (*host_trim)(void);
    /* Evict leaving each chunk's address unmapped ("bare": the engine's ms__eng_evict_bare),
     * for an EVICT that comes while no command of this process can run; map_bare maps up to
     * `max` of them (0: all) and must have mapped them all before a command is admitted
     * (before_command: that is why it runs now). map_bare returns how many are still bare or
     * an MS_E_* code. NULL: evictions map within themselves. */
    int (*evict_bare)(const struct ms_chunk_set *evict, struct ms_exec_stats *st);
    int (*map_bare)(size_t max, bool before_command);
};

/* Hand over the engine's operations (once, before ms_client_connect; kept by reference). */
void ms_client_attach(const struct ms_client_engine *eng);

#endif /* MS_SHIM_CLIENT_H */
