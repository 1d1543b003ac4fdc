/*
 * plan.h - the migration planner: what to evict and what to populate at a context switch.
 *
 * Design
 *   A pure function from (residency, budget, timeline, predicted working sets) to an ordered list
 *   of steps. The daemon, the shim (alone, without a daemon), the simulator and the tests call the
 *   same function; the executor (exec.h) carries a plan out through the GPU seam.
 *
 *   Input: ws[k] is the predicted working set of timeline entry k, as chunk ids in predicted
 *   access order (ws[0] belongs to the task about to run; it may be empty). Output: steps that
 *   make every chunk of ws[0] resident, evicting as needed, such that replaying the steps in order
 *   never has more than `budget` bytes resident (a populate counts from its step on; an evict
 *   frees at its step). Populations follow ws[0]'s order; each one is preceded by just the
 *   evictions it needs, so an executor can overlap the two directions.
 *
 *   Victims are never chunks of ws[0], never pinned chunks, never chunks in motion (IN, OUT),
 *   never non-resident ones. Among the rest, the eviction policy orders them:
 *     MS_EVICT_OPT    Belady: the chunk whose next use in ws[1..n-1] is furthest first; chunks
 *                     with no next use first of all (ties: least recently used, then lowest id)
 *     MS_EVICT_LRU    least recently used first (chunk.last_use), ties by lowest id
 *     MS_EVICT_WHOLE  whole-process swapping: evicts every resident chunk of other tasks' whole
 *                     footprints, task by task in LRU order of their most recent use, until the
 *                     working set fits; the caller passes the next task's whole footprint as
 *                     ws[0]
 *   Demand paging has no plan: its model lives in the simulator (docs/simulator.md).
 *
 *   If ws[0] cannot fit (its bytes + pinned bytes + bytes in motion > budget, or too few
 *   victims have host room, below) the planner returns MS_E_NOSPACE and an empty plan.
 *
 *   Host room (optional, ms_plan_input.host_room): an eviction of a chunk that was never
 *   hosted costs its task new host memory; victims whose task cannot take it are passed over.
 *
 * Ownership: ms_plan owns its step array. The planner writes chunk.mark scratch fields of the
 * table it reads; nothing else in the table changes. No locking.
 */
#ifndef MS_PLAN_H
#define MS_PLAN_H

#include "predict.h"
#include "region.h"
#include "timeline.h"

enum ms_evict_policy { MS_EVICT_OPT = 0, MS_EVICT_LRU, MS_EVICT_WHOLE };

enum ms_step_op { MS_STEP_EVICT = 0, MS_STEP_POPULATE };

struct ms_plan_step {
    uint8_t op; /* enum ms_step_op */
    ms_chunk_id chunk;
};

struct ms_plan {
    struct ms_plan_step *steps;
    size_t n, cap;
    uint64_t evict_bytes;
    uint64_t populate_bytes;
    uint64_t peak_resident;      /* highest resident byte count while replaying the steps */
    uint64_t host_skipped_bytes; /* victims passed over: their task had no host room (kept
                                  * when ms_plan_build fails with MS_E_NOSPACE) */
};

struct ms_plan_input {
    struct ms_rtable *rt;
    uint64_t budget;
    const struct ms_timeline *tl;  /* may be NULL; only its length matters to the planner */
    const struct ms_chunk_set *ws; /* nws sets; ws[k] for timeline entry k, in access order */
    size_t nws;
    enum ms_evict_policy policy;
    /* Optional (NULL: no bound): the host memory task `task` may still take, in bytes. A
     * victim that was never hosted (chunk.hosted == 0) needs that much new host memory; one
     * whose task has no room left is passed over (ms_plan.host_skipped_bytes), so a task at its
     * host memory limit keeps its memory on the device instead of failing an eviction. */
    uint64_t (*host_room)(void *ctx, uint32_t task);
    void *host_ctx;
};

void ms_plan_init(struct ms_plan *p);
void ms_plan_fini(struct ms_plan *p);

/* Build a plan into p (replacing its contents). Errors: MS_E_NOSPACE, MS_E_INVAL, MS_E_NOMEM. */
int ms_plan_build(const struct ms_plan_input *in, struct ms_plan *p);

/*
 * Check a plan against the table it was built for: replays it on the residency (without
 * changing the table) and verifies that no step exceeds the budget, no victim is in ws[0] or
 * pinned, every populate targets a non-resident chunk and every ws[0] chunk ends resident.
 * Returns 0 or MS_E_INVAL with a reason in why.
 */
int ms_plan_verify(const struct ms_plan_input *in, const struct ms_plan *p, char *why,
                   size_t whylen);

int ms_evict_policy_parse(const char *s, enum ms_evict_policy *out);
const char *ms_evict_policy_name(enum ms_evict_policy p);

#endif /* MS_PLAN_H */
