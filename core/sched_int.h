/*
 * sched_int.h - the scheduling state machine's private state and the functions its files share
 * (not an interface of anything else; the contract is sched.h, the design notes sched.c).
 *
 * The state machine is five files; a function one of them uses from another is declared here
 * with the prefix ms__sched_, everything else stays static in its file:
 *   sched.c         the entry points, settle() and the RUNNING decisions, the task lifecycle
 *                   (hello, gone, drop, stall, ghosts, zombies) and the action queue
 *   sched_mirror.c  the tasks as the mirror holds them: lookups, chunk transitions, orders'
 *                   bookkeeping, releasing regions, REGION and DEMAND, order replies
 *   sched_plan.c    planning and dispatching switches and incremental populations, credit, RUN
 *   sched_share.c   sharing: the phases SHARED and UNSHARING
 *   sched_status.c  configuration, status and setters, the invariant checker ms_sched_check
 * Like the rest of core/, none of it does I/O or takes a lock: every function runs inside one
 * call of a public entry point (sched.h).
 */
#ifndef MS_SCHED_INT_H
#define MS_SCHED_INT_H

#include "sched.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NONE MS_TASK_NONE
#define RETRY_NS 10000000ull /* 10 ms */
/* A running task's demand that found its room pinned (a ghost's memory): planned again at once
 * when memory is released (every settle tries it), and at this interval meanwhile. */
#define PINNED_RETRY_NS 100000000ull /* 100 ms */

/* One chunk of an order. */
struct oentry {
    ms_chunk_id id;
    uint64_t bytes;
    uint8_t valid; /* 0 once its region was freed */
    uint8_t fresh; /* POPULATE: the chunk was EMPTY (map, no copy) */
};

struct ms_sorder {
    bool active;
    uint32_t epoch;
    struct oentry *e;
    size_t n, cap;
    uint32_t *run_end; /* run k covers entries [run_end[k-1], run_end[k]) */
    size_t nruns, capruns;
    uint32_t runs_done;
    size_t granted;  /* POPULATE: entries [0, granted) are credited */
    uint64_t credit; /* POPULATE: bytes of the credited entries */
    uint64_t deadline;
    uint64_t t0; /* when it was sent (for the switch record) */
};

/* A task's part in sharing (phases SHARED, UNSHARING). */
enum { SH_NONE = 0, SH_LOADING, SH_RUN, SH_STOPPING };

struct rmap_ent {
    uint32_t rid;  /* the shim's region id */
    uint32_t slot; /* the mirror's region slot */
};

struct ms_stask {
    uint32_t id, pid;
    int32_t prio;
    uint32_t weight;
    uint64_t limit; /* 0 = none */
    char name[MS_PROTO_NAME_MAX + 1];
    bool ghost;        /* dropped; memory charged until its process exits; pins its chunks */
    bool stalled;      /* did not stop or migrate in time; its resident chunks pinned (stall) */
    bool stall_demand; /* stalled, and a DEMAND came after its last IDLE */
    uint64_t stalled_at;
    bool runnable;     /* DEMAND more recent than IDLE */
    bool dirty_demand; /* DEMAND arrived while holding RUN: maybe an incremental migration */
    uint64_t idle_at;  /* when its last IDLE arrived (0: none since its last DEMAND) */
    uint64_t gap_avg;  /* its recent idle gaps, IDLE to DEMAND (moving average) */
    bool gap_known;    /* ... measured at least once */
    uint32_t dflags;
    struct ms_chunk_set next_ws, recent_ws; /* mirror ids, access order, no duplicates */
    struct rmap_ent *rmap;                  /* ascending rid */
    size_t nrmap, caprmap;
    uint32_t max_rid;
    bool any_rid;
    uint64_t nchunks;
    uint64_t resident; /* bytes of its chunks in resident states */
    struct ms_sorder evict, pop;
    uint32_t run_epoch;
    bool started;       /* a STARTED for run_epoch came (one counts per RUN) */
    uint64_t prep_sent; /* the bytes the last PREPARE of run_epoch named (0: none) */
    uint64_t slice_ns;
    uint64_t bytes_in, bytes_out, switches, run_ns, run_since;
    uint64_t misses;      /* the shim's count of commands run with named chunks off the device */
    uint64_t host_bytes;  /* host bytes its shim holds pinned, as last reported */
    uint64_t host_pool;   /* of those, its pool's free host chunks (room at the host limit) */
    uint64_t host_limit;  /* the most its shim may pin (HELLO), 0 = none */
    bool host_capped;     /* the last plan kept some of its memory on the device: host limit */
    uint8_t share;        /* SH_*: its part in sharing */
    uint32_t share_epoch; /* SH_LOADING: the epoch its RUN will carry (its POPULATE's) */
};

/* sched.c: entry points, settle() and the RUNNING decisions, task lifecycle, action queue */
int ms__sched_reserve_actions(struct ms_sched *s, size_t k);
void ms__sched_push_send(struct ms_sched *s, uint32_t task, struct ms_msg *msg);
void ms__sched_push_note(struct ms_sched *s, uint32_t task, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ms__sched_pin_resident(struct ms_sched *s, struct ms_stask *t, bool on);
void ms__sched_settle(struct ms_sched *s, uint64_t now);

/* sched_mirror.c: lookups, chunk transitions, orders, REGION, DEMAND, order replies */
struct ms_stask *ms__sched_find_task(const struct ms_sched *s, uint32_t id);
struct ms_stask *ms__sched_find_live(const struct ms_sched *s, uint32_t id);
struct ms_stask *ms__sched_owner_of(const struct ms_sched *s, ms_chunk_id id);
int ms__sched_chunk_apply(struct ms_sched *s, struct ms_stask *t, ms_chunk_id id,
                          enum ms_chunk_event ev);
bool ms__sched_any_order_active(const struct ms_sched *s);
bool ms__sched_owes(const struct ms_sorder *o, bool evict);
void ms__sched_order_reset(struct ms_sorder *o);
/* The order goes out now: active, of `epoch`, its order_timeout deadline from `now`. */
void ms__sched_order_start(const struct ms_sched *s, struct ms_sorder *o, uint32_t epoch,
                           uint64_t now);
void ms__sched_task_free(struct ms_stask *t);
void ms__sched_release_region(struct ms_sched *s, struct ms_stask *t, uint32_t slot);
int ms__sched_on_region(struct ms_sched *s, uint64_t now, struct ms_stask *t,
                        const struct ms_msg_region *r, char *why, size_t whylen);
void ms__sched_clear_marks(struct ms_sched *s, struct ms_stask *t);
int ms__sched_whole_footprint(struct ms_sched *s, struct ms_stask *t, struct ms_chunk_set *out);
int ms__sched_on_demand(struct ms_sched *s, struct ms_stask *t, const struct ms_msg_demand *d,
                        char *why, size_t whylen);
int ms__sched_on_progress(struct ms_sched *s, uint64_t now, struct ms_stask *t, bool evict,
                          const struct ms_msg_progress *p, char *why, size_t whylen);

/* sched_plan.c: planning and dispatching switches and incremental populations */
int ms__sched_make_timeline(struct ms_sched *s, uint32_t last, size_t horizon);
int ms__sched_order_runs(struct ms_sched *s, struct ms_sorder *o, struct ms_msg *m);
int ms__sched_order_add(struct ms_sorder *o, ms_chunk_id id, uint64_t bytes, bool fresh);
bool ms__sched_grant(struct ms_sched *s, struct ms_stask *t);
void ms__sched_switch_begin(struct ms_sched *s, uint64_t now);
void ms__sched_start_run(struct ms_sched *s, uint64_t now, struct ms_stask *t);
/* RUNNING, others waiting: PREPARE to t when the next switch's expected eviction of its
 * never-hosted chunks grew (sched.h, "Host memory ahead of a switch"). */
void ms__sched_prepare_hint(struct ms_sched *s, struct ms_stask *t);
int ms__sched_plan_switch(struct ms_sched *s, uint64_t now);
bool ms__sched_needs_population(struct ms_sched *s, struct ms_stask *t);
int ms__sched_plan_incremental(struct ms_sched *s, uint64_t now, struct ms_stask *t);

/* sched_share.c: sharing (SHARED, UNSHARING) */
bool ms__sched_chunk_resident(const struct ms_sched *s, ms_chunk_id id, uint64_t *bytes);
bool ms__sched_wants_whole(const struct ms_sched *s, const struct ms_stask *t);
void ms__sched_decide_shared(struct ms_sched *s, uint64_t now);
bool ms__sched_try_share(struct ms_sched *s);

/* sched_status.c: a STARTED from t (the switch record's first command; RUN to first command) */
void ms__sched_on_started(struct ms_sched *s, uint64_t now, struct ms_stask *t,
                          const struct ms_msg_started *m);

#endif
