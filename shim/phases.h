/*
 * phases.h - where libmsched's time per command goes (MSCHED_PHASES=1): each phase of the
 * kernel launch path timed with the monotonic clock and summed, printed at exit.
 *
 * Design
 *   A phase is a span of one hook: packing the parameters, the recorder's counters, waiting for
 *   the engine's lock, the prediction, the gate (with, inside it, the daemon's client, the
 *   admission and history, the pins), the real driver call, the work after it, and the whole
 *   hook from entry to return. Each call site takes ms__ph_start() and hands it to
 *   ms__ph_stop(): off (the default) the start is one load and a branch and the stop does
 *   nothing; on, each is one clock read (vDSO, about 20 ns; the report says what a read cost
 *   on this machine) and the stop two relaxed atomic additions. The sums are process-wide, so
 *   threads' phases add up; a phase nested in another (the client inside the gate) is counted
 *   in both, and the report indents it under its parent. The whole hook minus the driver call
 *   is libmsched's own cost per launch; the phases under it say which part.
 *
 *   Not a profiler: it answers "which part of the gate" on a machine without perf, at the cost
 *   of the clock reads it adds (the report's first line says how many per launch).
 *
 * Locking: none; counters are atomics. The switch is set once at initialisation, before any
 * hook runs, and read without synchronisation afterwards.
 * Layering: a leaf of the shim (calls nothing in it; log.h for MS_HIDDEN only).
 */
#ifndef MS_SHIM_PHASES_H
#define MS_SHIM_PHASES_H

#include "shim/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum ms_phase {
    MS_PH_HOOK = 0, /* a kernel launch hook, entry to return */
    MS_PH_PACK,     /* its parameter buffer built (funcinfo lookup, copies) */
    MS_PH_RECORD,   /* the recorder's counters and trace (the events lock) */
    MS_PH_ENGINE,   /* the engine's launch gate, whole */
    MS_PH_LOCK,     /*   waiting for the engine's lock */
    MS_PH_PREDICT,  /*   the prediction (and VMM neighbours, pointer tables) */
    MS_PH_GATE,     /*   the gate: residency, faults, the daemon */
    MS_PH_CLIENT,   /*     the daemon's client (its lock, the slice, demands) */
    MS_PH_ADMIT,    /*     admission: touches, misses, the history */
    MS_PH_PIN,      /*     pins held across the driver call */
    MS_PH_DRIVER,   /* the real driver call */
    MS_PH_END,      /* after the driver call: pins released, the slice's end */
    MS_PH_COPY,     /* a copy or memset's gate (not part of the launch hook) */
    MS_PH_COUNT
};

/* Set by ms__ph_configure; read by the inline helpers. */
MS_HIDDEN extern bool ms__ph_on;

/* At initialisation: on or off for the process's life. On measures the clock read's cost. */
MS_HIDDEN void ms__ph_configure(bool on);

MS_HIDDEN uint64_t ms__ph_clock(void);
MS_HIDDEN void ms__ph_add(enum ms_phase p, uint64_t t0);

/* The start of a phase: 0 when off (ms__ph_stop then does nothing). */
static inline uint64_t ms__ph_start(void)
{
    return __builtin_expect(ms__ph_on, 0) ? ms__ph_clock() : 0;
}

static inline void ms__ph_stop(enum ms_phase p, uint64_t t0)
{
    if (__builtin_expect(t0 != 0, 0))
        ms__ph_add(p, t0);
}

/* For a cleanup attribute: the whole launch hook ends when its scope does. */
static inline void ms__ph_stop_hook(uint64_t *t0)
{
    ms__ph_stop(MS_PH_HOOK, *t0);
}

/* The sums so far (for tests): count and nanoseconds of phase p. */
MS_HIDDEN void ms__ph_get(enum ms_phase p, uint64_t *count, uint64_t *ns);

/* The report, one line per phase that ran, prefixed "msched[pid]: " (nothing when off). */
MS_HIDDEN void ms__ph_report(FILE *f);

#endif /* MS_SHIM_PHASES_H */
