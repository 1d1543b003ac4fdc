/*
 * profile.h - the access profiler (MSCHED_PROFILE=<file>): per sampled kernel launch, the byte
 * ranges each pointer argument's accesses fell in, for `msched profile` and the template
 * learner (core/template.h).
 *
 * Design
 *   Granule: 64 KiB. Touches are collected as a per-launch device bitmap of 64 KiB granules
 *   (a read bit and a written bit each), not as an access log: on the H200 a 64 KiB-granule
 *   bitmap cost 1.19x on an 8192^3 SGEMM while logging every access cost 15x, and the engine's
 *   chunks are 2-64 MiB, so 64 KiB resolves working sets well below a chunk.
 *
 *   Sampling, for bounded overhead: the first MSCHED_PROFILE_FIRST (default 4) launches of each
 *   kernel (by CUfunction) are profiled, then one in MSCHED_PROFILE_EVERY (default 32): launch
 *   n (0-based) of a function is profiled when n < FIRST or (n - FIRST + 1) % EVERY == 0.
 *   Launches not profiled run as usual and are not written.
 *
 *   A profiled launch runs alone: under the profile lock (one at a time), the context is
 *   synchronized before it (earlier work must not mark its bitmap) and after it (its bitmap is
 *   complete), then its touched granules are read back from the touch source and attributed.
 *   Launches into a stream being captured are not profiled (a synchronization would break the
 *   capture; the launch does not run then anyway).
 *
 *   The profiler needs nothing of the memory engine and must not race it: it profiles only
 *   with MSCHED_ENGINE=off (observe mode: nothing moves), which `msched profile` sets; with the
 *   engine on it says so once and stays off. Its region table is its own, fed by the same
 *   alloc/free events as the trace recorder.
 *
 *   Attribution: granules start at each allocation's base (shim/profile_patch.h); a touched
 *   granule's range
 *   is attributed to the pointer argument pointing into that allocation: the 8-byte-aligned
 *   words of the parameter buffer that hold a pointer (the layout's 8-byte entries at 8-byte
 *   offsets; every aligned word when the layout is unknown) whose value lies in the
 *   allocation; when several do, the one with the largest value below the granule's end
 *   (the argument whose data starts nearest before or inside it), else the smallest. No such
 * argument: `-` (reached through memory, pointer chasing). Adjacent granules of one allocation with
 * the same argument and mode merge into one range.
 *
 *   Output (the trace format's version 2 records, written here as text until core/trace.c
 *   writes version 2): `msched-trace 2`, a task record, the program's alloc and free records
 *   as they happen, and for each profiled launch its kernel record (as the recorder writes it,
 *   dur_ns the host-measured time between the two synchronizations) plus `mod=<hex>` (a hash
 *   of the module image, when the touch source knows it) and `prof=seen` followed by its
 *   `touch <tid> <arg> <mode> <addr> <bytes>` records, or `prof=opaque` and none (the launch
 *   moved memory the source cannot see: bulk/TMA copies, cluster launches).
 *
 *   Touch sources (struct ms_touch_source, profile_san.c): the NVIDIA Compute Sanitizer API,
 *   loaded with dlopen (MSCHED_SANITIZER=<path>, else libsanitizer-public.so from the library
 *   path or the toolkit's compute-sanitizer directory), with a device patch compiled at build
 *   time; in CI its stand-in tests/shim/fake_sanitizer.c over the fake driver. Built without
 *   the Sanitizer headers or the patch, the mode says so once and stays off.
 *
 * Locking: the profile lock (shim/locks.h, level 5) is taken by ms_prof_launch_begin and kept
 *   by the launching thread until ms_prof_launch_end when the launch is profiled (no engine or
 *   accuracy lock is held then); alloc/free take it briefly. The touch source's callbacks take
 *   only its own inner lock (prof_rec).
 *
 * Errors: a failure to start is said once on stderr and leaves the mode off; a driver or touch
 *   source error during a launch stops profiling (the program runs on) and is said once.
 */
#ifndef MS_SHIM_PROFILE_H
#define MS_SHIM_PROFILE_H

#include "core/region.h"
#include "shim/log.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ms_shim_launch; /* shim/shim_events.h */

/* At the first successful cuInit: when MSCHED_PROFILE is set, start the touch source (before
 * any module is loaded, so that every module gets patched). Any thread, no lock. */
MS_HIDDEN void ms_prof_early(void);
MS_HIDDEN bool ms_prof_on(void);

/* The program's allocations (no lock held). */
MS_HIDDEN void ms_prof_alloc(uint64_t ptr, uint64_t bytes, enum ms_region_kind kind);
MS_HIDDEN void ms_prof_free(uint64_t ptr);

/* Before the real launch call (no shim lock held): decide whether this launch is profiled;
 * when it is, take the profile lock, synchronize and arm the touch source. */
MS_HIDDEN void ms_prof_launch_begin(const struct ms_shim_launch *l);
/* After the real call returned (no shim lock held); a no-op unless this thread armed one. */
MS_HIDDEN void ms_prof_launch_end(void);
/* At exit: flush and close the file. */
MS_HIDDEN void ms_prof_finish(void);
/* In a forked child (one thread, from shim.c's fork handler): the child does not profile (the
 * file is the parent's; its buffered records are dropped, not written twice). */
MS_HIDDEN void ms_prof_atfork_child(void);

/* ---- the touch source seam (profile_san.c implements it; profile.c uses it) ---- */

/* What a source gives back for one profiled launch. */
struct ms_touch_result {
    bool seen;           /* the source saw the launch at all */
    bool opaque;         /* its traffic was (partly) invisible to the source */
    uint64_t mod;        /* hash of its module's image, 0 when unknown */
    uint64_t outside;    /* accesses in no region */
    const uint32_t *map; /* the bitmap, MS_PROF_WORDS(total) words (profile_patch.h) */
};

struct ms_prof_region;
struct ms_touch_source {
    const char *name;
    /* Load and subscribe (at cuInit). MS_OK, or an error with one sentence in why. */
    int (*start)(char *why, size_t whylen);
    /* This thread's next launch is profiled over these regions (sorted, bit0 filled; total
     * granules). Called with the profile lock held, after the synchronization. */
    int (*arm)(const struct ms_prof_region *regs, uint32_t nreg, uint64_t total, char *why,
               size_t whylen);
    /* After the launch and the synchronization: its result (valid until the next arm). */
    int (*collect)(struct ms_touch_result *out, char *why, size_t whylen);
    /* In a forked child: reset the source's locks. */
    void (*atfork_child)(void);
};

/* The Compute Sanitizer source (profile_san.c). */
extern MS_HIDDEN const struct ms_touch_source ms__prof_sanitizer;

#endif /* MS_SHIM_PROFILE_H */
