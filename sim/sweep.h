/*
 * sweep.h - a simulation experiment: one workload at several memory pressures, each replayed
 * under several policies, with the results as a table, JSON and (sim/svg.h) a plot.
 *
 * Design
 *   For a built-in workload the budget is fixed and the pressure scales the workload (the
 *   generator picks problem size, batch or instance count); the pressure actually reached is
 *   reported next to the one asked for. For a trace the workload is fixed and the pressure sets
 *   the budget (footprint / pressure), or an explicit budget gives one point.
 *   The ideal policy (unlimited memory) always runs first at every point: normalized throughput
 *   is a policy's work per second divided by the ideal's.
 *
 * Ownership: ms_sweep owns its points; ms_sweep_fini frees them. The options are borrowed for
 * the duration of ms_sweep_run only. No locking.
 */
#ifndef MS_SIM_SWEEP_H
#define MS_SIM_SWEEP_H

#include "sim/replay.h"

#include <stdio.h>

#define MS_SWEEP_MAX_POINTS 16

struct ms_sweep_opts {
    const char *workload;            /* built-in name; NULL when trace is set */
    const struct ms_workload *trace; /* a loaded trace (fixed footprint), or NULL */
    double pressures[MS_SWEEP_MAX_POINTS];
    size_t npressures; /* 0 with a trace: one point at `budget` */
    uint64_t budget;   /* built-in: required; trace: used when no pressures */
    const struct ms_cost *cost;
    bool policies[MS_SIM_NPOLICIES]; /* which to run (ideal always runs) */
    struct ms_replay_opts replay;    /* slice, duration/nslices, hash_clean, horizon, check */
    uint64_t seed;                   /* random workload */
    void (*progress)(void *ctx, const char *label, double done); /* optional */
    void *progress_ctx;
};

struct ms_sweep_point {
    double pressure;        /* asked for (0: none, trace at a given budget) */
    double actual_pressure; /* footprint / budget */
    uint64_t budget, footprint;
    size_t ntasks;
    char desc[160];
    bool ran[MS_SIM_NPOLICIES];
    struct ms_replay_result res[MS_SIM_NPOLICIES];
    int rc;          /* 0, or why the point failed (the policies before it ran) */
    char error[400]; /* the failure, when rc != 0 */
};

struct ms_sweep {
    char workload[64];
    const char *profile;
    uint64_t slice_ns, duration_ns, nslices;
    uint64_t slice_max_ns;    /* adaptive slices up to this (0: fixed slices) */
    uint32_t switch_frac_pct; /* ... the switch at most this percent of the slice */
    bool hash_clean;
    bool early_start; /* planned policies start each slice with its migration (replay.h) */
    uint64_t seed;
    struct ms_sweep_point pts[MS_SWEEP_MAX_POINTS];
    size_t n;       /* points, failed ones included */
    size_t nfailed; /* points with rc != 0 */
};

/*
 * Run every point. A point that fails (its workload cannot be built at that pressure, or a
 * replay fails: a budget that cannot hold a slice) keeps its error in pts[i].rc and .error,
 * and the other points still run. Returns 0 when every point ran; else the first failed
 * point's error code, with why saying which points failed. MS_E_INVAL (nothing ran) for bad
 * options.
 */
int ms_sweep_run(const struct ms_sweep_opts *o, struct ms_sweep *out, char *why, size_t whylen);

/* Normalized throughput of policy p at point i (0..1; 0 when it did not run). */
double ms_sweep_norm(const struct ms_sweep *s, size_t i, enum ms_sim_policy p);

/* One table per point, human readable; a failed point says why. */
void ms_sweep_print(const struct ms_sweep *s, FILE *f);
/* The whole sweep as one JSON object (a failed point has "error"). Returns 0 or MS_E_IO. */
int ms_sweep_json(const struct ms_sweep *s, FILE *f);

/* "12.3 GiB", "512.0 MiB", "0 B" into buf. */
void ms_fmt_bytes(char *buf, size_t cap, uint64_t b);
/* "1.23 s", "45.6 ms", "7.8 us", "12 ns" into buf. */
void ms_fmt_ns(char *buf, size_t cap, uint64_t ns);

#endif /* MS_SIM_SWEEP_H */
