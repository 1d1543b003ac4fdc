/*
 * timeline.h - scheduling policies and the timeline they emit.
 *
 * Design
 *   A policy is a pure function from the tasks' scheduling state to a timeline: the ordered
 *   (task, slice length) entries it will run next. Entry 0 is the task to run now. The daemon,
 *   the simulator and the tests all use it; the planner reads the timeline as the future (OPT).
 *
 *   Round-robin (MS_POLICY_RR): runnable tasks in ascending id order, cyclically, starting with
 *   the first runnable task after `last` (the task that ran last); each gets slice_ns * weight
 *   (weight 0 counts as 1).
 *   Priority (MS_POLICY_PRIO): only the runnable tasks of the highest priority present appear,
 *   round-robin among themselves; lower-priority tasks appear only when no higher one is
 *   runnable. Priority is preemptive: the caller re-asks for a timeline whenever a task becomes
 *   runnable, and if entry 0 changed, the running slice ends now. Higher number = more urgent
 *   (MS_PRIO_RT > MS_PRIO_BE).
 *
 *   The timeline has `horizon` entries (repeating the cycle as needed), or none if no task is
 *   runnable.
 *
 * Ownership: ms_timeline owns its entry array. No locking.
 */
#ifndef MS_TIMELINE_H
#define MS_TIMELINE_H

#include "ms.h"

#include <stdbool.h>

#define MS_PRIO_BE 0
#define MS_PRIO_RT 10
#define MS_TASK_NONE UINT32_MAX

enum ms_policy_kind { MS_POLICY_RR = 0, MS_POLICY_PRIO };

struct ms_task_sched {
    uint32_t id;
    int32_t prio;    /* MS_PRIO_BE .. MS_PRIO_RT */
    uint32_t weight; /* slice multiplier, 0 = 1 */
    bool runnable;
};

struct ms_tl_entry {
    uint32_t task;
    uint64_t slice_ns;
};

struct ms_timeline {
    struct ms_tl_entry *e;
    size_t n, cap;
};

struct ms_policy {
    enum ms_policy_kind kind;
    uint64_t slice_ns; /* base slice, > 0 */
};

void ms_timeline_init(struct ms_timeline *tl);
void ms_timeline_fini(struct ms_timeline *tl);

/*
 * Fill `out` (replacing its contents) with up to `horizon` entries. `tasks` need not be sorted;
 * ids must be distinct. last = MS_TASK_NONE when nothing ran yet.
 * Errors: MS_E_INVAL (slice 0, duplicate ids), MS_E_NOMEM.
 */
int ms_policy_timeline(const struct ms_policy *p, const struct ms_task_sched *tasks, size_t ntasks,
                       uint32_t last, size_t horizon, struct ms_timeline *out);

/*
 * The adaptive policy's slice: long enough that a switch costing cost_ns is at most
 * switch_frac_pct (1..100) percent of it, at least base and at most max(slice_max_ns, base).
 * Shared by the scheduler (core/sched.c) and the simulator (sim/replay.c).
 */
uint64_t ms_adaptive_slice(uint64_t base, uint64_t cost_ns, uint64_t slice_max_ns,
                           uint32_t switch_frac_pct);

/* Parse "rr" / "prio"; MS_E_NOTFOUND otherwise. */
int ms_policy_kind_parse(const char *s, enum ms_policy_kind *out);
const char *ms_policy_kind_name(enum ms_policy_kind k);

#endif /* MS_TIMELINE_H */
