/*
 * tensormap.h - the TMA tensor maps the program encoded, as bounds for launch prediction
 * (design: tensormap.c).
 *
 * Ownership: the table is the module's; callers pass their own buffers.
 * Locking: any thread; the module's leaf lock (tmap) is taken inside. Callable with the engine's
 * lock held (tmap is below it in locks.h).
 * Errors: none: a descriptor that cannot be recorded (no memory, an unknown type) is not, and
 * its launches name whole allocations as before.
 */
#ifndef MS_SHIM_TENSORMAP_H
#define MS_SHIM_TENSORMAP_H

#include "core/template.h"
#include "shim/log.h"

#include <stddef.h>
#include <stdint.h>

/* The bounds (core/template.h) of a launch's parameters: every 64-byte-aligned 128-byte window
 * inside a layout entry of at least 128 bytes that holds a recorded tensor map, at most max of
 * them, into out. Returns how many. Cheap when nothing was ever recorded. */
MS_HIDDEN size_t ms__tmap_bounds(const uint8_t *params, size_t len,
                                 const struct ms_param_layout *layout, size_t nlayout,
                                 struct ms_param_bound *out, size_t max);

/* Tensor maps recorded since the start (the exit summary). */
MS_HIDDEN uint64_t ms__tmap_recorded(void);

/* In a forked child: the lock, re-initialised. */
MS_HIDDEN void ms__tmap_atfork_child(void);

#endif /* MS_SHIM_TENSORMAP_H */
