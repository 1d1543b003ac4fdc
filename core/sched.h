/*
 * sched.h - the daemon's scheduling state machine: from events (a task registered, a message
 * arrived, a task died, time passed) to actions (messages to send, sessions to drop).
 *
 * Design
 *   Pure and single-threaded: no I/O, no clock. Every entry point takes the current time `now`
 *   (nanoseconds on any monotonic clock) and appends actions to a FIFO the caller drains with
 *   ms_sched_next_action. The daemon feeds it from its event loop; the tests script scenarios
 *   with a virtual clock and play the shims themselves. Policy computes, mechanism executes: the
 *   scheduler decides which task runs and which chunks move; the shims move them.
 *
 *   State. Every task's regions are mirrored in one region table (core/region.h) with
 *   region.task = task id, so the planner sees all tasks at once. The mirror's chunk states mean
 *   "device memory the daemon has accounted for": EMPTY/HOST hold none; IN (a population was
 *   credited), DIRTY (resident; the daemon does not track cleanliness: every resident chunk is
 *   DIRTY once settled) and OUT (an eviction was ordered, not yet reported) hold their bytes.
 *   So rt.resident_bytes is the device memory the shims may be holding, and the scheduler keeps
 *   it <= budget at every step: populations are credited only as reported evictions free memory.
 *
 *   A context switch, phase by phase:
 *     RUNNING    task A holds RUN. Its slice ends (timer), a higher-priority task demands (PRIO:
 *                preemption at once), or A goes IDLE while others wait
 *                (after its hold, below) ->
 *     STOPPING   STOP{epoch} sent to A; wait for STOPPED (timeout: A is dropped) ->
 *     (planning) the policy's timeline (core/timeline.h) names B = entry 0 and the tasks after
 *                it; under PRIO, idle tasks of higher priority than B (services between
 *                requests: they preempt as soon as they demand) are planned right after B;
 *                ws[k] = the demanded working set of entry k's task (its `next` set at its
 *                first appearance, its `recent` set after); ms_plan_build (OPT/LRU/WHOLE across
 *                all tasks) gives the evictions and B's populations ->
 *     MIGRATING  EVICT orders to the victims' owners (one order per owner), POPULATE to B with
 *                the credit that fits now; each EVICTED frees memory and more credit goes to B
 *                (CREDIT). When B reports its POPULATE complete ->
 *     RUNNING    RUN{epoch, slice} to B.
 *   With early_run, RUN goes out with the POPULATE and the shim's launch gate waits for the
 *   chunks each launch needs; the slice starts when the population completes (no slice end
 *   before), so what the task runs meanwhile is a gain and waiting never eats into its slice. A
 * running task that DEMANDs chunks it does not have gets an incremental migration (its own resident
 * chunks are pinned so they are not victims) without losing the GPU; when those pinned chunks leave
 * no room for any of them, the task is stopped instead, so that a full switch can evict its own
 * other chunks. That switch is a refill: while the task's slice has at least a tenth of the base
 * slice left, the task itself comes first in the switch's timeline and runs the rest of its
 * slice (the refill's time counts against it; the rest is at least that tenth), then the
 * policy's next task as before. Without it, every demand of a task whose working set exceeds
 * the free memory handed the GPU to the next task: on an H100, two one-buffer Llamas under a
 * budget of half one's weights switched about every 95 ms under `adaptive`, whose slices are
 * meant to be seconds. A new plan is made only when no order is outstanding, so every task has
 * at most one EVICT and one POPULATE order in flight.
 *
 *   Policies: RR and PRIO come from core/timeline.h; ADAPTIVE is round-robin whose slice grows
 *   so that the predicted cost of the switch that starts it (core/cost.h: the bytes its plan
 *   moves, both directions pipelined, plus mapping) is at most switch_frac_pct percent of the
 *   slice, between slice_ns and slice_max_ns; when RUN is sent, the switch's measured time so
 *   far (its drain, a migration slower than predicted) can stretch it further, within the same
 *   bounds. The eviction policy (OPT, LRU, WHOLE) is the
 *   planner's. A task's mem_limit caps its resident bytes: its working set is cut to the limit
 *   and its own other chunks are evicted as needed.
 *
 *   Idle hold (RR, ADAPTIVE). A running task that reports IDLE while others wait keeps the GPU
 *   until its slice ends or for as long as recent switches took (a moving average of STOP sent
 *   to RUN, capped at idle_hold_ns), whichever comes first; if it demands again by then it runs
 *   on. A switch leaves the GPU without compute for about that long, and an idle task that
 *   comes back soon costs a second one: waiting at most one switch's time before switching is
 *   the ski-rental rule, which never wastes more than twice what the better choice in hindsight
 *   would have. A task's own gaps (IDLE to its next DEMAND, a moving average) refine it: one
 *   whose gaps outlast the hold is not held at all, since holding would only idle the GPU. With
 *   memory at rest switches take well under a millisecond and the hold vanishes. PRIO yields at
 *   once: a waiting higher-priority task must not wait. test_sched's test_idle_hold_effect
 *   plays the rule against scripted tasks on a virtual clock.
 *
 *   Sharing (cfg.share, on by default). Exclusive slices lose the overlap that
 *   programs sharing a GPU natively get, and gain nothing when memory is not short. So while
 *   the chunks every task needs fit in the budget together, the scheduler leaves slicing: phase
 *   SHARED, where every task that demands gets RUN (after the population of what it lacks, from
 *   free memory only: no eviction, no plan) and keeps it, and no slice timer stops anyone. A
 *   task's need is what it holds resident plus what of its demanded set (its `next` set; its
 *   whole footprint under WHOLE) is not; ghosts and stalled tasks count what they hold. The
 *   memory "fits" when the needs of all tasks sum to at most the budget, no task's need exceeds
 *   its mem_limit, and nothing asks for exclusivity: the policy is not PRIO (priorities mean
 *   preemption), every live task has the same weight (weights mean unequal slices), and the
 *   budget was not lowered below what is resident. Every settle re-checks it:
 *     entering   from IDLE (nothing outstanding), or from RUNNING with no order in flight: the
 *                running task keeps its RUN and becomes one of the sharers ->
 *     SHARED     a runnable task without RUN gets a POPULATE of what it lacks (fully credited:
 *                it fits) and RUN when that completes (with the POPULATE under early_run); a
 *                sharer that DEMANDs chunks it lacks gets a POPULATE and keeps RUN; an IDLE
 *                sharer keeps RUN (it has nothing to launch). When the memory no longer fits
 *                (a demand beyond free memory, a PRIO policy, a new weight, a lower budget,
 *                share turned off) ->
 *     UNSHARING  STOP to every sharer holding RUN (a sharer still loading simply stops being
 *                one; its population completes), wait for all their STOPPEDs (stop_timeout:
 *                the late ones are stalled, as in a switch) -> IDLE, and exclusive switching
 *                goes on from the round-robin position of the last task that stopped.
 *   The sets counted are the tasks' last demands, idle tasks' included, so a task that was
 *   evicted by exclusive switching still counts what it will want back. After configuration
 *   (share, policy, weights) ended it, sharing comes back by the same test. After memory
 *   pressure ended it (share_blocked), it comes back only once the tasks' whole footprints
 *   (every chunk of their device regions) fit together: a task exited, freed regions, or the
 *   budget grew. The demanded sets alone would let it flap: programs whose kernels touch
 *   different parts of footprints that do not fit would fit again after every switch's
 *   evictions and overflow again at their next demands, each time a round of STOPs. Each transition
 * is an MS_ACT_NOTE for task MS_TASK_NONE ("sharing: on (...)" / "sharing: off (...)");
 * ms_sched_sharing tells the mode.
 *
 *   Death (ms_sched_task_gone) releases the task at once: its chunks vanish from the mirror
 *   (whatever state they were in, IN and OUT included), its orders are forgotten, and if it was
 *   running, stopping or loading the schedule moves on. Memory it held becomes credit for
 *   whoever is populating. A task the scheduler drops itself (protocol violation, timeout)
 *   leaves the schedule the same way but keeps its memory charged as a ghost until its process
 *   is known to have exited: a hung process still holds what it mapped.
 *
 *   Host memory ahead of a switch (cfg.prepare_host, on by default; not under PRIO). A
 *   chunk's first eviction needs new host memory, which its shim pins at a few GB/s: on the
 *   critical path of a switch that is hundreds of milliseconds per GiB. While a task runs and
 *   others wait, the next switch will evict what the waiting task's demanded set lacks beyond
 *   free memory, and under RR and ADAPTIVE the running task's chunks are the ones used last,
 *   so they go first. The estimate: the largest such shortfall among the waiting tasks, at
 *   most the running task's resident chunks that were never hosted (a hosted chunk keeps its
 *   host copy) and its host room. PREPARE{its RUN's epoch, bytes} tells it, and again when the
 *   estimate grows by a 2 MiB granule or more within the same RUN; never while the task's own
 *   population is in progress (its credited chunks count before it has them). A hint, not an order:
 *   nothing in the mirror changes, and a shim may ignore it.
 *
 *   Stalls: a task that does not answer its STOP within stop_timeout (stopped with Ctrl-Z,
 *   hung, or draining a very long kernel) is not dropped: it leaves the schedule, its resident
 *   chunks are pinned (capacity set aside: the others run in the rest of the budget), its
 *   orders lose their deadlines, and its DEMANDs are kept without making it runnable. Its
 *   STOPPED (of the stopped slice's epoch) ends the stall: the pins go, and it waits for memory
 *   like any task. Status shows it as "stalled"; each stall and its end is an MS_ACT_NOTE.
 *
 * Invariants (ms_sched_check verifies them; tests call it after every event)
 *   S1  ms_rtable_check passes and every live region belongs to a live task
 *   S2  rt.resident_bytes <= budget (unless the budget was lowered and no migration since)
 *   S3  each task's resident counter equals the sum over its chunks
 *   S4  at most one task holds RUN, except in phase SHARED, where every sharer may; phase,
 *       cur and next agree (see sched.c); in SHARED no EVICT order is in flight and every
 *       chunk of a sharer's demanded set is resident (IN counts: populated into free memory)
 *       unless its newest DEMAND is still to be handled; only SHARED and UNSHARING have
 *       sharers, and in UNSHARING each of them is being stopped
 *   S5  every valid, unreported entry of an EVICT order is an OUT chunk of the order's task;
 *       every credited, unreported entry of a POPULATE order is an IN or DIRTY chunk
 *   S6  between calls, exactly the resident chunks of ghosts and stalled tasks are pinned
 *
 * Ownership: the scheduler owns its table, tasks and queued actions; an action handed out by
 * ms_sched_next_action belongs to the caller (free its message with ms_msg_free). Errors
 * follow core/ms.h. Locking: none; one thread.
 */
#ifndef MS_SCHED_H
#define MS_SCHED_H

#include "cost.h"
#include "plan.h"
#include "proto.h"
#include "region.h"

#include <stdbool.h>

enum ms_sched_policy { MS_SCHED_RR = 0, MS_SCHED_PRIO, MS_SCHED_ADAPTIVE, MS_SCHED_POLICY_COUNT };

struct ms_sched_config {
    enum ms_sched_policy policy;
    enum ms_evict_policy evict;
    uint64_t budget;            /* device bytes all tasks together may hold, > 0 */
    uint64_t slice_ns;          /* base slice (times the task's weight), > 0 */
    uint64_t slice_max_ns;      /* ADAPTIVE: longest slice (>= slice_ns) */
    uint32_t switch_frac_pct;   /* ADAPTIVE: switch cost at most this % of the slice, 1..100 */
    const struct ms_cost *cost; /* cost profile for predictions; NULL = ms_cost_h200 */
    uint64_t stop_timeout_ns;   /* STOP .. STOPPED, else the task is stalled (see below) */
    uint64_t order_timeout_ns;  /* an order without progress for this long drops its task */
    uint32_t horizon;           /* timeline entries the planner looks ahead, >= 1 */
    bool early_run;             /* send RUN with the POPULATE instead of after it */
    uint64_t idle_hold_ns;      /* RR, ADAPTIVE: longest hold for an idle task (0: none) */
    bool share;                 /* run tasks at once while their memory fits (Sharing) */
    bool prepare_host;          /* PREPARE: host memory ahead of a switch (below) */
    uint32_t max_tasks;
    uint32_t max_regions; /* per task */
    uint64_t max_chunks;  /* per task, over all its regions */
};

/* What the caller must do. */
enum ms_action_kind {
    MS_ACT_SEND = 1, /* send msg to task's session */
    MS_ACT_DROP,     /* close task's session; the task is a ghost (or gone, after BYE) */
    MS_ACT_NOTE,     /* log `why` about task (a change the operator should see) */
};

struct ms_action {
    uint8_t kind; /* enum ms_action_kind */
    uint32_t task;
    struct ms_msg msg; /* SEND: owned by the action's receiver */
    int32_t err;       /* DROP: why, an MS_E_* code */
    char why[128];     /* DROP, NOTE: one line for the log */
};

struct ms_stask;  /* a task (sched_int.h) */
struct ms_zombie; /* a dropped task whose DROP is not handed out yet (sched.c) */

enum ms_sched_phase {
    MS_PH_IDLE = 0,
    MS_PH_RUNNING,
    MS_PH_STOPPING,
    MS_PH_MIGRATING,
    MS_PH_SHARED,    /* sharing: every sharer holds RUN (cur == next == NONE) */
    MS_PH_UNSHARING, /* leaving it: STOP sent to every sharer, waiting for their STOPPEDs */
};

struct ms_sched {
    struct ms_sched_config cfg;
    struct ms_rtable rt;
    struct ms_stask **tasks; /* live tasks, ascending id */
    size_t ntasks, captasks;
    uint32_t next_id;
    uint32_t *slot_rid; /* mirror slot -> the owner's region id */
    size_t capslot;

    enum ms_sched_phase phase;
    uint32_t cur;     /* holds RUN (RUNNING, incremental MIGRATING) or is stopping; or NONE */
    uint32_t next;    /* MIGRATING: the task being loaded; or NONE */
    bool incremental; /* MIGRATING for cur, which keeps RUN */
    uint32_t last;    /* the task that ran last (round-robin position) */
    uint32_t epoch;
    uint64_t slice_end;  /* RUNNING: when cur's slice ends (UINT64_MAX: early_run, loading) */
    uint64_t stop_by;    /* STOPPING: deadline for STOPPED */
    bool in_switch;      /* a switch is in progress (STOP sent or planning begun) */
    uint64_t switch_t0;  /* when it began */
    uint64_t next_slice; /* MIGRATING: the slice the next task will get */
    bool over_budget;    /* the budget was lowered below resident; cleared once back under */
    bool shrink;         /* ... and the running task must be stopped so a plan can shrink */
    bool retry;          /* a decision failed for lack of memory: retry at the next tick */
    uint64_t retry_at;
    uint64_t switch_avg_ns; /* recent switches' mean duration (moving average), for holds */
    bool holding;           /* RUNNING: cur went idle and keeps the GPU for now */
    bool rr_hint_said;      /* the note that rr's slices are shorter than its switches, said */
    uint32_t refill;        /* STOPPING for a refill: the task, which runs again next; or NONE */
    uint64_t refill_end;    /* ... the end of its slice when it was stopped */
    uint32_t refill_run;    /* the task whose next RUN ends a refill (keeps the slice's rest) */

    /* statistics */
    uint64_t start_ns, now;
    uint64_t switches, switch_ns_total, switch_ns_max;
    uint64_t stop_ns_total; /* part of switch_ns_total from STOP sent to STOPPED (the drain) */
    uint64_t stop_pending;  /* this switch's drain, counted once the switch ends in RUN */
    uint32_t stop_from;     /* the task whose STOPPED ended this switch's drain */
    /* The last completed switch (seq == switches when it is the latest); the daemon logs the
     * slow ones. from is MS_TASK_NONE when nothing had to stop. in/out: the bytes its orders
     * moved by the time the task ran; plans: the plans it took (more than one when memory
     * had to be waited for); predicted_ns: the cost model's time for those plans' bytes;
     * evict_ns: its longest eviction order, sent to completed, and evict_task its owner
     * (MS_TASK_NONE when none completed); pop_ns: its longest population order, which
     * includes waiting for the room its credit needs (the evictions). Only orders sent during
     * the switch count, and only their progress before RUN: with early_run (RUN sent with the
     * POPULATE) the record holds the drain and the plan, not the migration. stop_ns/from: the
     * drain, also when the outgoing task never answered its STOP and was dropped. t0: when
     * the switch began (STOP sent); run_epoch: its RUN's. first_ns: t0 to the incoming task's
     * STARTED (its first command admitted), complete_ns: t0 to its population complete (at RUN
     * when nothing was left to populate then); 0 until they happen (first_wait and
     * complete_wait say they are still awaited). */
    struct {
        uint64_t seq, ns, stop_ns;
        uint64_t in, out, plans, predicted_ns, evict_ns, pop_ns;
        uint32_t from, to, evict_task;
        uint64_t t0, first_ns, complete_ns;
        uint32_t run_epoch;
        bool first_wait, complete_wait;
    } last_switch;
    /* The switches split (`msched status`): the sums of last_switch.first_ns and complete_ns
     * over the switches that reached those points, and how many did. */
    uint64_t first_ns_total, first_count, complete_ns_total, complete_count;
    /* RUN to first command as the shims measure it (STARTED's wait_ns, any RUN, sharing's
     * too): the last MS_SCHED_FIRST_RING of them, and the longest ever. */
#define MS_SCHED_FIRST_RING 64
    uint64_t run_first[MS_SCHED_FIRST_RING];
    uint32_t run_first_n, run_first_at;
    uint64_t run_first_max;
    /* the switch in progress */
    uint64_t sw_in, sw_out, sw_plans0, sw_predicted_ns, sw_evict_ns, sw_pop_ns;
    uint32_t sw_evict_task;
    uint64_t bytes_in, bytes_out;
    uint64_t plans, plan_failures, drops;
    uint64_t host_limited_plans; /* plans that kept memory on the device: host limits */
    uint64_t stalls;             /* tasks that did not answer a STOP within stop_timeout */
    uint64_t idle_holds;         /* times an idle task kept the GPU while others waited */
    uint64_t idle_resumes;       /* ... and demanded again before its hold ran out */
    uint64_t refills;       /* switches that ran the stopped task again (counted in switches) */
    bool share_blocked;     /* pressure ended sharing: it returns once the footprints fit */
    uint64_t share_ons;     /* times sharing began */
    uint64_t share_offs;    /* ... and ended (memory pressure, exclusivity asked for) */
    uint64_t prepares;      /* PREPARE hints sent */
    uint64_t prepare_bytes; /* ... the bytes of each, summed */

    /* queued actions: acts[head..n), then the zombies' DROPs */
    struct ms_action *acts;
    size_t head, nacts, capacts;
    struct ms_zombie *zq; /* room for one per live task is kept reserved */
    size_t nzq, capzq;

    /* scratch kept between calls to avoid reallocating */
    struct ms_timeline tl;
    struct ms_chunk_set *ws;
    size_t capws;
    struct ms_plan plan;
};

void ms_sched_config_default(struct ms_sched_config *c);
/* Check a configuration's ranges; MS_E_INVAL with a reason in why. */
int ms_sched_config_check(const struct ms_sched_config *c, char *why, size_t whylen);

/* Errors: MS_E_INVAL (bad config). */
int ms_sched_init(struct ms_sched *s, const struct ms_sched_config *cfg, uint64_t now);
/* Frees everything, queued actions included. */
void ms_sched_fini(struct ms_sched *s);

/*
 * A shim said HELLO. Registers a task and queues WELCOME to it. pid is the one the kernel
 * reported for the connection (0: use the HELLO's). Errors: MS_E_NOSPACE (max_tasks reached),
 * MS_E_VERSION (hello->version < 1), MS_E_NOMEM; nothing is queued on error.
 */
int ms_sched_hello(struct ms_sched *s, uint64_t now, const struct ms_msg_hello *hello, uint32_t pid,
                   uint32_t *out_task);

/*
 * A message from a registered task: REGION, DEMAND, IDLE, STOPPED, EVICTED, POPULATED, BYE.
 * Anything else, or a message that breaks the protocol (an unknown region, progress beyond an
 * order, populating beyond credit, ...), drops the task: ERROR and DROP are queued and the
 * error is returned (MS_E_PARSE, MS_E_STATE, MS_E_NOTFOUND, MS_E_OVERLAP, MS_E_NOSPACE for
 * limits, MS_E_NOMEM). A dropped task's process may still be alive and holding device memory,
 * so the task stays as a ghost (state MS_TS_DROPPED): never scheduled, never sent anything,
 * its resident chunks pinned and still charged to the budget, until ms_sched_task_gone says its
 * process exited. BYE (the shim released its memory) removes the task at once, with a DROP
 * and no ERROR. MS_E_NOTFOUND without actions for an unknown or ghost task.
 */
int ms_sched_message(struct ms_sched *s, uint64_t now, uint32_t task, const struct ms_msg *m);

/*
 * The task's process exited, or its session closed (which is taken as its exit): its memory is
 * released at once. Also ends a ghost. Unknown ids are ignored.
 */
void ms_sched_task_gone(struct ms_sched *s, uint64_t now, uint32_t task);

/*
 * The edge drops a task itself (a malformed frame, a client too slow to read its messages):
 * handled like a protocol violation found here: ERROR and DROP are queued and the task becomes
 * a ghost. Errors: MS_E_NOTFOUND (unknown or already a ghost).
 */
int ms_sched_task_drop(struct ms_sched *s, uint64_t now, uint32_t task, int err, const char *why);

/* Time passed: slice ends, timeouts, retries. */
void ms_sched_tick(struct ms_sched *s, uint64_t now);

/* The earliest time ms_sched_tick has something to do; UINT64_MAX when nothing is pending. */
uint64_t ms_sched_deadline(const struct ms_sched *s);

/* Pop the oldest queued action into *out. Returns 1, or 0 when the queue is empty. */
int ms_sched_next_action(struct ms_sched *s, struct ms_action *out);

/*
 * Fill a STATUS message (out is initialised here; free it with ms_msg_free). daemon_pid and gpu
 * are left 0 for the caller. Errors: MS_E_NOMEM.
 */
int ms_sched_status(struct ms_sched *s, uint64_t now, struct ms_msg *out);

/*
 * Runtime configuration. A new budget, slice or policy applies from the next decision. A budget
 * lower than what is resident is reached by the next plan: the running task is stopped at once
 * (once) so that plan happens now. Errors: MS_E_INVAL (out of range).
 */
int ms_sched_set_budget(struct ms_sched *s, uint64_t now, uint64_t budget);
int ms_sched_set_slice(struct ms_sched *s, uint64_t now, uint64_t slice_ns);
int ms_sched_set_policy(struct ms_sched *s, uint64_t now, enum ms_sched_policy p);
int ms_sched_set_evict(struct ms_sched *s, uint64_t now, enum ms_evict_policy p);
int ms_sched_set_share(struct ms_sched *s, uint64_t now, bool on);

/* The mode: true while tasks share the GPU (phase SHARED), false while it is sliced. */
bool ms_sched_sharing(const struct ms_sched *s);

/* Resident bytes the scheduler accounts to a task (0 for an unknown task). */
uint64_t ms_sched_task_resident(const struct ms_sched *s, uint32_t task);
/* Task state (enum ms_task_state), or -1 for an unknown task. */
int ms_sched_task_state(const struct ms_sched *s, uint32_t task);

/* Check S1-S6. Returns 0, or the number of the first violated invariant with a reason. */
int ms_sched_check(const struct ms_sched *s, char *why, size_t whylen);

int ms_sched_policy_parse(const char *str, enum ms_sched_policy *out);
const char *ms_sched_policy_name(enum ms_sched_policy p);

#endif /* MS_SCHED_H */
