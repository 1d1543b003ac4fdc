/*
 * ms_testutil.h - shared helpers for the unit tests: a seeded random generator, random region
 * tables, and chunk moves through the state machine the way an executor would make them.
 *
 * Design
 *   Randomized tests must be reproducible: ms_test_seed() takes the seed from the environment
 *   (MS_SEED) or a fixed default and prints "seed=N" so a failing run can be repeated. The
 *   generator is splitmix64: tiny, full period, and identical on every platform.
 *   The chunk helpers apply only legal events (region.h) and return the first error, so a test
 *   can assert on them; they never bypass the table's accounting.
 *
 * Ownership: nothing here keeps state beyond what the caller passes in. Not thread-safe.
 */
#ifndef MS_TESTUTIL_H
#define MS_TESTUTIL_H

#include "core/plan.h"
#include "core/predict.h"
#include "core/region.h"
#include "core/timeline.h"

#include <stdbool.h>
#include <stdint.h>

struct ms_rng {
    uint64_t state;
};

/* Seed from env MS_SEED (decimal or 0x hex) if set, else `fallback`; prints "seed=N". */
uint64_t ms_test_seed(uint64_t fallback);

void ms_rng_seed(struct ms_rng *r, uint64_t seed);
uint64_t ms_rng_next(struct ms_rng *r);
/* Uniform in [0, n); n == 0 returns 0. */
uint64_t ms_rng_below(struct ms_rng *r, uint64_t n);
/* True with probability num/den. */
bool ms_rng_chance(struct ms_rng *r, uint64_t num, uint64_t den);
/* Fisher-Yates shuffle of ids[0..n). */
void ms_rng_shuffle_ids(struct ms_rng *r, ms_chunk_id *ids, size_t n);

struct ms_test_table_opts {
    uint32_t ntasks;      /* tasks 0..ntasks-1 */
    uint32_t regions_min; /* regions per task, inclusive range */
    uint32_t regions_max;
    uint32_t max_chunks;       /* uniform: chunks per region 1..max_chunks */
    uint64_t max_region_bytes; /* non-uniform: region size 1..max_region_bytes bytes */
    bool uniform;              /* every chunk exactly MS_GRAN bytes */
};

/*
 * Add random regions to rt (which should be empty). Uniform tables use 2 MiB chunks and sizes
 * that are multiples of 2 MiB; others mix odd sizes, automatic chunk sizes (ms_chunk_bytes_for)
 * and random multiples of 2 MiB. Returns 0 or the table's error.
 */
int ms_test_random_rtable(struct ms_rtable *rt, struct ms_rng *r,
                          const struct ms_test_table_opts *o);

/* Append every chunk of `task`'s live regions to out, in (task, base) order. */
int ms_test_task_chunks(struct ms_rtable *rt, uint32_t task, struct ms_chunk_set *out);

/* EMPTY -> MAP_FRESH (DIRTY); HOST -> POP_START + POP_DONE (CLEAN). */
int ms_test_populate(struct ms_rtable *rt, ms_chunk_id id);
/* DIRTY -> EVICT_START + EVICT_DONE; CLEAN -> DROP. Both end HOST. */
int ms_test_evict(struct ms_rtable *rt, ms_chunk_id id);
/* Make a chunk resident (populate if needed), then TOUCH it if dirty is true. */
int ms_test_make_resident(struct ms_rtable *rt, ms_chunk_id id, bool dirty);
/* Carry out every step of a plan with the helpers above. */
int ms_test_apply_plan(struct ms_rtable *rt, const struct ms_plan *p);

/*
 * A random world for replays: a region table of 2-5 tasks (all chunks EMPTY), a budget that
 * holds any one task's footprint but usually not all of them, a schedule of nsteps entries made
 * by ms_policy_timeline under changing runnable flags and priorities, and for every step the
 * predicted working set of its task (a per-task hot set plus random extras, in random order,
 * sometimes with a duplicate) and the task's whole footprint (for MS_EVICT_WHOLE).
 * Same seed, kind and nsteps -> the same world.
 */
enum ms_test_world_kind {
    MS_TW_UNIFORM, /* 2 MiB chunks only; budget a multiple of 2 MiB */
    MS_TW_MIXED,   /* odd region sizes, mixed chunk sizes up to 64 MiB */
    MS_TW_TINY,    /* uniform, at most 12 chunks: small enough for exhaustive search */
};

struct ms_test_world {
    struct ms_rtable rt;
    uint64_t budget;
    size_t nsteps;
    struct ms_timeline tl;      /* the whole schedule, one entry per step */
    struct ms_chunk_set *ws;    /* predicted working set of each step */
    struct ms_chunk_set *whole; /* the whole footprint of each step's task */
};

/* Returns 0 or an error (the world is then freed). */
int ms_test_world_build(struct ms_test_world *w, uint64_t seed, enum ms_test_world_kind kind,
                        size_t nsteps);
void ms_test_world_free(struct ms_test_world *w);

#endif /* MS_TESTUTIL_H */
