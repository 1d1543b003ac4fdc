/*
 * client_int.h - the daemon client's state and the functions its files share (not an interface
 * of anything else; the client's contract is client.h, its design client.c).
 *
 * The client is four files, each above the ones before it (no call goes the other way):
 *   client_conn.c    the state; sending, the wire ids of regions, running time, wake-ups
 *   client_gate.c    the daemon-mode launch gate: admission, DEMAND, waiting for RUN
 *   client_orders.c  the service thread: the daemon's orders (RUN, STOP, EVICT, POPULATE,
 *                    CREDIT), idleness and liveness
 *   client.c         configuration, connection, start and shutdown, region mirroring, stats
 * Everything here is under the engine's lock (C.eng->lock) unless said (client.c, "State").
 */
#ifndef MS_SHIM_CLIENT_INT_H
#define MS_SHIM_CLIENT_INT_H

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

struct ms_client_state {
    const struct ms_client_engine *eng; /* the engine's operations (ms_client_attach) */
    /* configuration */
    bool allowed;
    bool reverse_demand; /* MSCHED_REVERSE_DEMAND (tests): DEMAND's chunks in reverse order */
    bool bare_late;      /* MSCHED_DEFER_HOST_MAP=2 (tests): bare chunks mapped at the gate only */
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
    uint64_t slice_ns;
    uint64_t cap;      /* what this task may hold: the daemon's budget (the engine keeps it as
                        * its budget in force), or its limit when lower */
    bool cap_is_limit; /* ... the limit (MSCHED_BUDGET) */
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
    bool started_sent;  /* this RUN's STARTED went out (its first command was admitted) */
    uint64_t prep_want; /* PREPARE of this RUN: host memory to make ahead (0: none or done) */
    uint32_t waiters;
    uint32_t dwait; /* threads waiting on a demand's population (Where running time goes) */
    uint64_t dw_t0; /* running && dwait > 0 since then; 0: not */
    bool dem_pending, want_whole;
    uint64_t dem_at;          /* when the last DEMAND went out */
    uint64_t misses_sent;     /* the misses count the daemon has (DEMAND, STOPPED, REPORT) */
    uint64_t host_sent;       /* the pinned host bytes the daemon has (same messages) */
    uint64_t pool_sent;       /* of those, the pool's */
    uint64_t trim_at;         /* the last look for pooled host memory to give back */
    bool trim_more;           /* that look gave some back: look again at once */
    uint64_t report_at;       /* when the last REPORT went out */
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
};

/* The client (client_conn.c). */
extern MS_HIDDEN struct ms_client_state ms__client;
#define C ms__client

extern MS_HIDDEN uint64_t ms__cl_inflight; /* atomic */
extern MS_HIDDEN int ms__cl_stopping;      /* atomic */
extern MS_HIDDEN int
    ms__cl_active; /* atomic: a command was admitted or finished since the last look */
extern MS_HIDDEN uint32_t ms__cl_insync; /* atomic: threads inside a synchronizing call */
extern MS_HIDDEN _Thread_local bool ms__cl_admitted;

MS_HIDDEN uint64_t ms__cl_now_ns(void);
MS_HIDDEN void ms__cl_dwait_close(uint64_t now);
MS_HIDDEN void ms__cl_dwait_set(bool *mine, bool on);
MS_HIDDEN void ms__cl_slice_end(uint64_t now);
MS_HIDDEN void ms__cl_cond_init(void);
MS_HIDDEN void ms__cl_wake(void);
MS_HIDDEN void ms__cl_broadcast(void);
MS_HIDDEN void ms__cl_conn_break(const char *why);
MS_HIDDEN int ms__cl_csend(struct ms_msg *m, uint32_t seq);
MS_HIDDEN struct wreg *ms__cl_wreg_of(uint32_t wid);
MS_HIDDEN void ms__cl_prune_dead(void);
MS_HIDDEN uint64_t ms__cl_run_bytes(const struct ms_run *run);
MS_HIDDEN int ms__cl_run_chunks(const struct ms_run *run, struct ms_chunk_set *out);
MS_HIDDEN int ms__cl_to_runs(const struct ms_chunk_set *s, size_t *n);
MS_HIDDEN void ms__cl_timed_wait(uint64_t ns);
MS_HIDDEN int ms__cl_want_add(const struct ms_chunk_set *s);
MS_HIDDEN void ms__cl_drop_dead(struct ms_chunk_set *s);
MS_HIDDEN void ms__cl_send_demand_ex(const struct ms_chunk_set *need, bool whole, bool exact);
MS_HIDDEN void ms__cl_send_demand(const struct ms_chunk_set *need, bool whole);
/* REPORT the misses count and pinned host bytes if either changed since the daemon last heard
 * them: at most every 100 ms, unless now_anyway. Lock held. */
MS_HIDDEN void ms__cl_report(bool now_anyway);
MS_HIDDEN void ms__cl_drain(const char *why);
MS_HIDDEN void ms__cl_on_run(const struct ms_msg *m);
MS_HIDDEN void ms__cl_on_stop(const struct ms_msg *m);
/* The service thread's background work between messages, one step (lock held; released while
 * pinning or unpinning): bare chunks mapped, a PREPARE's host memory made, pooled host memory
 * that sat unused given back. True: more to do at once. */
MS_HIDDEN bool ms__cl_prepare_step(void);
MS_HIDDEN uint64_t ms__cl_resident_bytes_of(const struct ms_chunk_set *s);
MS_HIDDEN void ms__cl_order_timed(const char *what, uint64_t work_ns, uint64_t step_ns,
                                  uint64_t bytes, const struct ms_exec_stats *step,
                                  const struct timespec *at);
MS_HIDDEN void ms__cl_on_evict(const struct ms_msg *m);
MS_HIDDEN bool ms__cl_pop_pending(void);
MS_HIDDEN void ms__cl_pop_batches(void);
MS_HIDDEN void ms__cl_pop_progress(void);
MS_HIDDEN void ms__cl_on_populate(struct ms_msg *m);
MS_HIDDEN void ms__cl_on_credit(const struct ms_msg *m);
MS_HIDDEN void ms__cl_gone(const char *why);
MS_HIDDEN void ms__cl_handle(struct ms_msg *m);
MS_HIDDEN void ms__cl_serve(void);
MS_HIDDEN void ms__cl_last_words(void);
MS_HIDDEN int ms__cl_check_quiet(void);
MS_HIDDEN void ms__cl_check_hang(void);
MS_HIDDEN void *ms__cl_service(void *arg);

#endif /* MS_SHIM_CLIENT_INT_H */
