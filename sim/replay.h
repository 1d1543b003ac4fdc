/*
 * replay.h - replay a workload under one memory policy on the simulated GPU.
 *
 * Design
 *   The replay is the simulator's scheduler loop, built only from core/ and the sim seam:
 *   a round-robin timeline (core/timeline.h) picks the next task; at the switch a planned policy
 *   predicts working sets (core/predict.h on every command the task will run in its slice),
 *   builds a plan (core/plan.h) and executes it (core/exec.h) through the simulated GPU
 *   (gpu/sim/gpu_sim.h); then the slice runs command by command. An oracle checks before each
 *   command that every chunk it really touches (its predicted chunks plus any hidden ranges) is
 *   resident; a miss is served as a "launch fault" (plan and execute just that command's chunks)
 *   and counted. The full model, with every approximation, is docs/simulator.md.
 *
 *   Policies:
 *     ideal       unlimited memory, everything resident, no migration: the in-memory reference
 *     opt         predicted working sets + OPT planner + pipelined executor
 *     opt-serial  the same with the executor not pipelined (the paper's ablation)
 *     lru         predicted working sets, LRU victims, pipelined
 *     whole       whole-process swapping: the next task's whole footprint, whole tasks evicted
 *     demand      demand paging (unified memory): no plan; each non-resident chunk a command
 *                 touches faults in (ms_cost_fault_ns), evicting the least recently migrated
 *                 chunks first (ms_cost_um_evict_ns each, always copied out)
 *
 *   Time: a slice is wall time from its first command (after the switch's migration; with early
 *   start, from the switch's start, each command waiting for its own chunks) and ends
 *   at the first command boundary at or after its length; launch faults and demand faults
 *   happen inside it. Work = compute time of the commands run. The replay starts with every
 *   chunk on the host, as if the tasks had loaded their data before the measurement; with
 *   warm-up (the default) nothing is measured until every task has had a slice and has run its
 *   whole command loop once, so the numbers describe the steady state, not the cold start.
 *
 *   Deterministic: no randomness, no wall clock; same inputs give the same result.
 *
 * Errors (ms_replay_run): MS_E_INVAL (bad options or an unreplayable workload), MS_E_NOSPACE
 * (a slice's working set, a single command, or - for whole - a task's footprint does not fit in
 * the budget), MS_E_STATE (check mode found a broken invariant), MS_E_GPU / MS_E_NOMEM from the
 * layers below. A one-line reason is written to why.
 *
 * Ownership: borrows the workload and cost profile; allocates and frees its own state.
 */
#ifndef MS_SIM_REPLAY_H
#define MS_SIM_REPLAY_H

#include "sim/workload.h"

enum ms_sim_policy {
    MS_SIM_IDEAL = 0,
    MS_SIM_OPT,
    MS_SIM_OPT_SERIAL,
    MS_SIM_LRU,
    MS_SIM_WHOLE,
    MS_SIM_DEMAND,
    MS_SIM_NPOLICIES
};

/* "ideal", "opt", "opt-serial", "lru", "whole", "demand"; MS_E_NOTFOUND otherwise. */
int ms_sim_policy_parse(const char *s, enum ms_sim_policy *out);
const char *ms_sim_policy_name(enum ms_sim_policy p);

struct ms_replay_opts {
    enum ms_sim_policy policy;
    const struct ms_cost *cost;
    uint64_t budget;   /* device bytes the tasks may use (ignored by ideal) */
    uint64_t slice_ns; /* round-robin slice, > 0 */
    /* Adaptive slices (the daemon's `adaptive` policy) when slice_max_ns > 0: a slice that
     * starts with a switch lasts long enough for that switch to cost at most switch_frac_pct
     * percent of it, between slice_ns and max(slice_max_ns, slice_ns). The daemon predicts the
     * switch's cost from its plan; here it is the simulated switch's time. 0: fixed slices. */
    uint64_t slice_max_ns;
    uint32_t switch_frac_pct; /* 1..100 when adaptive */
    uint64_t duration_ns;     /* measured virtual time; used when nslices == 0 */
    uint64_t nslices;         /* measured slices; 0: run for duration_ns */
    bool hash_clean;          /* executor drops touched-but-unchanged chunks (GPU hash) */
    bool warmup;              /* do not measure until every task ran its loop once */
    uint32_t horizon;         /* timeline entries the planner sees; 0: 2 x tasks */
    bool check;               /* verify the table and the budget after every step (slow; tests) */
    /* Early start (the daemon's early_run) for planned policies: the incoming task's slice
     * starts with its migration, and each command starts once the chunks it touches are in.
     * A chunk the switch populates is taken to arrive as the migration's bytes do: the k-th
     * populated byte at k / (bytes populated) of the migration's time (the executor streams
     * populations in the plan's order, which is the working set's access order). */
    bool early_start;
    /* Kernel templates (core/template.h; NULL: allocation granularity): a kernel found by name
     * is predicted by its rules (ms_predict_launch_tmpl_model), taken as exact: its true set
     * is the prediction plus its hidden ranges, as for any kernel. Borrowed for the call. */
    const struct ms_tmpl_store *templates;
    void (*progress)(void *ctx, double done); /* optional: fraction done, once per slice */
    void *progress_ctx;
};

struct ms_replay_result {
    enum ms_sim_policy policy;
    uint64_t budget;
    uint64_t total_ns;      /* measured virtual time */
    uint64_t compute_ns;    /* of which commands ran */
    double throughput;      /* compute_ns / total_ns: work per second, normalized to in-memory */
    uint64_t bytes_in;      /* host->device copied (demand: faulted in) */
    uint64_t bytes_out;     /* device->host copied (demand: evicted) */
    uint64_t bytes_dropped; /* evicted without a copy (clean) */
    uint64_t bytes_fresh;   /* mapped without a copy (never written) */
    uint64_t faults;        /* demand: GPU page faults; planned: launch faults */
    uint64_t fault_ns;      /* time spent serving them */
    uint64_t switches;      /* slices that started a different task than the previous one */
    uint64_t switch_ns;     /* time spent migrating at those switches */
    uint64_t first_ns;      /* of those switches: time from the switch's start to the first
                             * command (early start: when its chunks were in; else switch_ns) */
    uint64_t slices, commands;
    uint64_t slice_ns;      /* the slices' lengths summed (slice_ns / slices: the mean slice) */
    uint64_t peak_resident; /* most device bytes resident after any step */
    uint64_t misses;        /* commands run with a touched chunk not resident: must be 0 */
    uint64_t hashes;        /* chunks hashed by the executor */
};

/* Fill *o with defaults: opt, 200 ms slices, 30 s measured, hash_clean on, warm-up on. */
void ms_replay_opts_default(struct ms_replay_opts *o, const struct ms_cost *cost, uint64_t budget);

int ms_replay_run(const struct ms_workload *w, const struct ms_replay_opts *o,
                  struct ms_replay_result *out, char *why, size_t whylen);

#endif /* MS_SIM_REPLAY_H */
