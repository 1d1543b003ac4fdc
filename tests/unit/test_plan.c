/*
 * test_plan.c - the migration planner (core/plan.h).
 *
 * Three layers:
 *   - fixed cases: each policy's victim order and tie rules, and every edge the contract names
 *     (empty working set, everything fits, nothing evictable -> NOSPACE, pinned / moving /
 *     host-kind chunks never chosen, IN and OUT chunks of ws[0], duplicates, a shrunken budget,
 *     bad input), plus hand-made bad plans that ms_plan_verify must reject;
 *   - seeded replays: random region tables, schedules from ms_policy_timeline and random
 *     working sets, replayed step by step the way an executor would (ms_chunk_apply), checking
 *     after every step the plan (ms_plan_verify), the table (ms_rtable_check), the slice's
 *     readiness, the budget, the laziness of evictions and each policy's victim order stated
 *     independently. A "chaos" mode adds pins, evictions still in flight (OUT) across steps and
 *     populations already in flight (IN) when the planner runs;
 *   - optimality: with uniform chunk sizes and the whole future, OPT populates no more than LRU
 *     or WHOLE, and on tiny worlds exactly as little as an exhaustive dynamic program over all
 *     resident sets. Uniform sizes matter: Belady's furthest-next-use rule is optimal for
 *     equal-size pages only (with mixed sizes the problem is NP-hard and furthest-first can lose
 *     to evicting one large chunk instead of several small ones), so the property is only
 *     asserted there.
 * Every random test takes its seed from MS_SEED (or a fixed default) and prints it. The random
 * worlds come from tests/support (ms_test_world_build). The file is one concept, the planner's
 * contract, and just over 1000 lines because the replay checker states each policy's rule
 * independently of plan.c; splitting it would only scatter that statement.
 */
#include "core/plan.h"
#include "core/timeline.h"
#include "tests/support/ms_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define G MS_GRAN
#define C(r, i) MS_CHUNK_ID(r, i)
#define EV(id)                                                                                     \
    {                                                                                              \
        .op = MS_STEP_EVICT, .chunk = (id)                                                         \
    }
#define PO(id)                                                                                     \
    {                                                                                              \
        .op = MS_STEP_POPULATE, .chunk = (id)                                                      \
    }

/* ---- fixture helpers ------------------------------------------------------------------- */

static uint32_t add_region(struct ms_rtable *rt, uint32_t task, uint32_t nchunks)
{
    /* Bases far apart per task and per region count so regions never overlap. */
    uint64_t base = 0x100000000ull * (task + 1) + (uint64_t)rt->nslots * 0x40000000ull;
    uint32_t reg;
    assert_int_equal(ms_region_add(rt, task, base, (uint64_t)nchunks * G, MS_RK_DEVICE, G, &reg),
                     MS_OK);
    return reg;
}

/* Drive a chunk into state s through legal events only. */
static void put(struct ms_rtable *rt, ms_chunk_id id, enum ms_chunk_state s)
{
    switch (s) {
    case MS_CS_EMPTY: break;
    case MS_CS_HOST:
        assert_int_equal(ms_test_populate(rt, id), MS_OK);
        assert_int_equal(ms_test_evict(rt, id), MS_OK);
        break;
    case MS_CS_IN:
        put(rt, id, MS_CS_HOST);
        assert_int_equal(ms_chunk_apply(rt, id, MS_CE_POP_START), MS_OK);
        break;
    case MS_CS_CLEAN:
        put(rt, id, MS_CS_HOST);
        assert_int_equal(ms_test_populate(rt, id), MS_OK);
        break;
    case MS_CS_DIRTY: assert_int_equal(ms_test_populate(rt, id), MS_OK); break;
    case MS_CS_OUT:
        put(rt, id, MS_CS_DIRTY);
        assert_int_equal(ms_chunk_apply(rt, id, MS_CE_EVICT_START), MS_OK);
        break;
    default: fail();
    }
    assert_int_equal(ms_chunk_get(rt, id)->state, s);
}

static void set_ws(struct ms_chunk_set *s, const ms_chunk_id *ids, size_t n)
{
    ms_chunk_set_clear(s);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ms_chunk_set_add(s, ids[i]), MS_OK);
}
#define SET_WS(s, ...)                                                                             \
    set_ws((s), (const ms_chunk_id[]){__VA_ARGS__},                                                \
           sizeof((const ms_chunk_id[]){__VA_ARGS__}) / sizeof(ms_chunk_id))

struct fx {
    struct ms_rtable rt;
    struct ms_plan p;
    struct ms_chunk_set ws[6];
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    ms_rtable_init(&f->rt);
    ms_plan_init(&f->p);
    for (size_t i = 0; i < MS_ARRAY_LEN(f->ws); i++)
        ms_chunk_set_init(&f->ws[i]);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    ms_plan_fini(&f->p);
    for (size_t i = 0; i < MS_ARRAY_LEN(f->ws); i++)
        ms_chunk_set_fini(&f->ws[i]);
    ms_rtable_fini(&f->rt);
    free(f);
    return ms_alloc_live() == 0 ? 0 : -1; /* a leak fails the test */
}

static struct ms_plan_input fx_input(struct fx *f, uint64_t budget, size_t nws,
                                     enum ms_evict_policy pol)
{
    return (struct ms_plan_input){
        .rt = &f->rt, .budget = budget, .tl = NULL, .ws = f->ws, .nws = nws, .policy = pol};
}

/* Build, then check the result with the verifier and the table checker. */
static int fx_build(struct fx *f, uint64_t budget, size_t nws, enum ms_evict_policy pol)
{
    struct ms_plan_input in = fx_input(f, budget, nws, pol);
    int rc = ms_plan_build(&in, &f->p);
    if (rc == MS_OK) {
        char why[256];
        int v = ms_plan_verify(&in, &f->p, why, sizeof(why));
        if (v)
            fail_msg("verify: %s", why);
        /* Only a table already over budget (a shrunken budget) may start above it. */
        assert_true(f->p.peak_resident <= MS_MAX(budget, f->rt.resident_bytes));
    } else {
        assert_int_equal(f->p.n, 0);
        assert_int_equal(f->p.evict_bytes, 0);
        assert_int_equal(f->p.populate_bytes, 0);
    }
    assert_int_equal(ms_rtable_check(&f->rt, NULL, 0), 0);
    return rc;
}

static void expect_steps(const struct ms_plan *p, const struct ms_plan_step *want, size_t n)
{
    for (size_t i = 0; i < MS_MIN(n, p->n); i++) {
        if (p->steps[i].op != want[i].op || p->steps[i].chunk != want[i].chunk)
            fail_msg("step %zu: got %s %u:%u, want %s %u:%u", i,
                     p->steps[i].op == MS_STEP_EVICT ? "evict" : "populate",
                     MS_CHUNK_REGION(p->steps[i].chunk), MS_CHUNK_INDEX(p->steps[i].chunk),
                     want[i].op == MS_STEP_EVICT ? "evict" : "populate",
                     MS_CHUNK_REGION(want[i].chunk), MS_CHUNK_INDEX(want[i].chunk));
    }
    assert_int_equal(p->n, n);
}
#define EXPECT_STEPS(p, ...)                                                                       \
    expect_steps((p), (const struct ms_plan_step[]){__VA_ARGS__},                                  \
                 sizeof((const struct ms_plan_step[]){__VA_ARGS__}) / sizeof(struct ms_plan_step))

/* ---- fixed cases ----------------------------------------------------------------------- */

static void test_empty_ws(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 3);
    put(&f->rt, C(a, 0), MS_CS_DIRTY);
    put(&f->rt, C(a, 1), MS_CS_CLEAN);
    for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++) {
        assert_int_equal(fx_build(f, 10 * G, 1, (enum ms_evict_policy)pol), MS_OK);
        assert_int_equal(f->p.n, 0);
        assert_int_equal(f->p.peak_resident, 2 * G);
        assert_int_equal(fx_build(f, 10 * G, 0, (enum ms_evict_policy)pol), MS_OK);
        assert_int_equal(f->p.n, 0);
    }
}

static void test_everything_fits(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 4);
    uint32_t b = add_region(&f->rt, 1, 2);
    put(&f->rt, C(a, 1), MS_CS_HOST);
    put(&f->rt, C(a, 2), MS_CS_CLEAN);
    put(&f->rt, C(b, 0), MS_CS_DIRTY);
    put(&f->rt, C(b, 1), MS_CS_DIRTY);
    /* Access order, not id order; a resident chunk needs no step. */
    SET_WS(&f->ws[0], C(a, 3), C(a, 2), C(a, 1), C(a, 0));
    for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++) {
        assert_int_equal(fx_build(f, 6 * G, 1, (enum ms_evict_policy)pol), MS_OK);
        EXPECT_STEPS(&f->p, PO(C(a, 3)), PO(C(a, 1)), PO(C(a, 0)));
        assert_int_equal(f->p.populate_bytes, 3 * G);
        assert_int_equal(f->p.evict_bytes, 0);
        assert_int_equal(f->p.peak_resident, 6 * G);
    }
    /* UINT64_MAX as the budget must not overflow the arithmetic. */
    assert_int_equal(fx_build(f, UINT64_MAX, 1, MS_EVICT_OPT), MS_OK);
    assert_int_equal(f->p.n, 3);
    /* Once carried out, the same request needs no step. */
    assert_int_equal(ms_test_apply_plan(&f->rt, &f->p), MS_OK);
    assert_int_equal(fx_build(f, 6 * G, 1, MS_EVICT_OPT), MS_OK);
    assert_int_equal(f->p.n, 0);
}

/* Resident task-1 chunks B0..B3 with chosen last_use; ws[0] needs three chunks of task 0. */
static void opt_lru_setup(struct fx *f, uint32_t *a, uint32_t *b)
{
    *a = add_region(&f->rt, 0, 3);
    *b = add_region(&f->rt, 1, 4);
    static const uint64_t use[4] = {10, 5, 30, 20};
    for (uint32_t i = 0; i < 4; i++) {
        put(&f->rt, C(*b, i), i % 2 ? MS_CS_CLEAN : MS_CS_DIRTY);
        ms_chunk_get(&f->rt, C(*b, i))->last_use = use[i];
    }
    SET_WS(&f->ws[0], C(*a, 0), C(*a, 1), C(*a, 2));
    SET_WS(&f->ws[1], C(*b, 1));
    SET_WS(&f->ws[2], C(*b, 3), C(*b, 2));
    SET_WS(&f->ws[3], C(*b, 1));
}

static void test_opt_order(void **state)
{
    struct fx *f = *state;
    uint32_t a, b;
    opt_lru_setup(f, &a, &b);
    /* B0 is never used again; B2 and B3 are next used in ws[2] (tie: B3 is older); B1 next. */
    assert_int_equal(fx_build(f, 4 * G, 4, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 3)), PO(C(a, 1)), EV(C(b, 2)),
                 PO(C(a, 2)));
    assert_int_equal(f->p.evict_bytes, 3 * G);
    assert_int_equal(f->p.populate_bytes, 3 * G);
    assert_int_equal(f->p.peak_resident, 4 * G);
    /* Without the future every candidate is "never used": pure LRU order. */
    assert_int_equal(fx_build(f, 4 * G, 1, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 1)), PO(C(a, 0)), EV(C(b, 0)), PO(C(a, 1)), EV(C(b, 3)),
                 PO(C(a, 2)));
    /* More room, fewer evictions: only what each population needs. */
    assert_int_equal(fx_build(f, 6 * G, 4, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, PO(C(a, 0)), PO(C(a, 1)), EV(C(b, 0)), PO(C(a, 2)));
    /* A timeline may be longer than the working sets given, never shorter. */
    struct ms_timeline tl = {.e = NULL, .n = 4, .cap = 0};
    struct ms_plan_input in = fx_input(f, 4 * G, 4, MS_EVICT_OPT);
    in.tl = &tl;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_OK);
    tl.n = 3;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_E_INVAL);
}

/* Host room per task for the tests: ctx is an array indexed by task. */
static uint64_t room_of(void *ctx, uint32_t task)
{
    return ((const uint64_t *)ctx)[task];
}

static void test_host_room(void **state)
{
    struct fx *f = *state;
    uint32_t a, b;
    opt_lru_setup(f, &a, &b); /* b0, b2 DIRTY never hosted; b1, b3 CLEAN (were evicted) */
    uint64_t room[2] = {UINT64_MAX, 0};
    struct ms_plan_input in = fx_input(f, 5 * G, 4, MS_EVICT_OPT);
    in.host_room = room_of;
    in.host_ctx = room;
    /* No room for task 1: only its hosted chunks go (b3, then b1); b0 and b2 stay. */
    assert_int_equal(ms_plan_build(&in, &f->p), MS_OK);
    EXPECT_STEPS(&f->p, PO(C(a, 0)), EV(C(b, 3)), PO(C(a, 1)), EV(C(b, 1)), PO(C(a, 2)));
    assert_int_equal(f->p.host_skipped_bytes, 2 * G);
    char why[256];
    assert_int_equal(ms_plan_verify(&in, &f->p, why, sizeof(why)), MS_OK);
    /* Room for one chunk: b0 (never used again) goes first, then the hosted b3. */
    room[1] = G;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_OK);
    EXPECT_STEPS(&f->p, PO(C(a, 0)), EV(C(b, 0)), PO(C(a, 1)), EV(C(b, 3)), PO(C(a, 2)));
    assert_int_equal(f->p.host_skipped_bytes, 0);
    assert_int_equal(ms_plan_verify(&in, &f->p, why, sizeof(why)), MS_OK);
    /* The verifier refuses that plan when the room is gone. */
    room[1] = 0;
    assert_int_equal(ms_plan_verify(&in, &f->p, why, sizeof(why)), MS_E_INVAL);
    assert_non_null(strstr(why, "host memory"));
    /* Three evictions needed, two hosted chunks: no plan, and why is kept. */
    in.budget = 4 * G;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_E_NOSPACE);
    assert_int_equal(f->p.n, 0);
    assert_true(f->p.host_skipped_bytes > 0);
    /* WHOLE passes over the same chunks. */
    in.budget = 5 * G;
    in.policy = MS_EVICT_WHOLE;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_OK);
    assert_int_equal(ms_plan_verify(&in, &f->p, why, sizeof(why)), MS_OK);
    for (size_t i = 0; i < f->p.n; i++)
        if (f->p.steps[i].op == MS_STEP_EVICT)
            assert_true(ms_chunk_get(&f->rt, f->p.steps[i].chunk)->hosted);
    /* A chunk evicted once is hosted from then on, and DISCARD forgets it. */
    assert_true(ms_chunk_get(&f->rt, C(b, 1))->hosted);
    assert_false(ms_chunk_get(&f->rt, C(b, 0))->hosted);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 1), MS_CE_DISCARD), MS_OK);
    assert_false(ms_chunk_get(&f->rt, C(b, 1))->hosted);
}

static void test_lru_order(void **state)
{
    struct fx *f = *state;
    uint32_t a, b;
    opt_lru_setup(f, &a, &b);
    assert_int_equal(fx_build(f, 4 * G, 4, MS_EVICT_LRU), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 1)), PO(C(a, 0)), EV(C(b, 0)), PO(C(a, 1)), EV(C(b, 3)),
                 PO(C(a, 2)));
}

static void test_ties_by_id(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 2);
    uint32_t b = add_region(&f->rt, 1, 2);
    uint32_t c = add_region(&f->rt, 2, 2);
    ms_chunk_id order[] = {C(c, 1), C(b, 1), C(c, 0), C(b, 0)};
    for (size_t i = 0; i < 4; i++) {
        put(&f->rt, order[i], MS_CS_DIRTY);
        ms_chunk_get(&f->rt, order[i])->last_use = 7;
    }
    SET_WS(&f->ws[0], C(a, 0), C(a, 1));
    SET_WS(&f->ws[1], C(b, 0), C(c, 1));
    SET_WS(&f->ws[2], C(c, 0), C(b, 1));
    /* OPT: never-used none; ws[2] users b1, c0 tie on last_use: lowest id (b1) first. */
    assert_int_equal(fx_build(f, 4 * G, 3, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 1)), PO(C(a, 0)), EV(C(c, 0)), PO(C(a, 1)));
    /* LRU: all equal, lowest ids first. */
    assert_int_equal(fx_build(f, 4 * G, 3, MS_EVICT_LRU), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 1)), PO(C(a, 1)));
}

static void test_whole(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 3);
    uint32_t b = add_region(&f->rt, 1, 3);
    uint32_t c = add_region(&f->rt, 2, 2);
    uint32_t d = add_region(&f->rt, 3, 1);
    for (uint32_t i = 0; i < 3; i++)
        put(&f->rt, C(b, i), MS_CS_DIRTY);
    put(&f->rt, C(c, 0), MS_CS_CLEAN);
    put(&f->rt, C(c, 1), MS_CS_DIRTY);
    put(&f->rt, C(d, 0), MS_CS_DIRTY);
    /* Task recency = most recent use of any chunk: task 3 < task 1 < task 2. */
    ms_chunk_get(&f->rt, C(d, 0))->last_use = 1;
    ms_chunk_get(&f->rt, C(b, 0))->last_use = 2;
    ms_chunk_get(&f->rt, C(b, 1))->last_use = 50;
    ms_chunk_get(&f->rt, C(b, 2))->last_use = 3;
    ms_chunk_get(&f->rt, C(c, 0))->last_use = 40;
    ms_chunk_get(&f->rt, C(c, 1))->last_use = 60;
    SET_WS(&f->ws[0], C(a, 0), C(a, 1), C(a, 2));
    /* Budget 7, 6 resident: a0 fits; a1 needs one chunk, and the oldest task (3) has one; a2
     * needs one more, and WHOLE then swaps out all of task 1, not one chunk of it. */
    assert_int_equal(fx_build(f, 7 * G, 1, MS_EVICT_WHOLE), MS_OK);
    EXPECT_STEPS(&f->p, PO(C(a, 0)), EV(C(d, 0)), PO(C(a, 1)), EV(C(b, 0)), EV(C(b, 1)),
                 EV(C(b, 2)), PO(C(a, 2)));
    assert_int_equal(f->p.evict_bytes, 4 * G);
    assert_int_equal(f->p.peak_resident, 7 * G);
    /* With a pinned chunk, the rest of its task still goes. */
    ms_chunk_get(&f->rt, C(b, 1))->pins = 1;
    assert_int_equal(fx_build(f, 6 * G, 1, MS_EVICT_WHOLE), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(d, 0)), PO(C(a, 0)), EV(C(b, 0)), EV(C(b, 2)), PO(C(a, 1)),
                 PO(C(a, 2)));
    ms_chunk_get(&f->rt, C(b, 1))->pins = 0;
}

static void test_nospace(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 4);
    uint32_t b = add_region(&f->rt, 1, 3);
    SET_WS(&f->ws[0], C(a, 0), C(a, 1), C(a, 2), C(a, 3));
    /* A successful plan first, so we see that failure empties it. */
    assert_int_equal(fx_build(f, 4 * G, 1, MS_EVICT_OPT), MS_OK);
    assert_int_equal(f->p.n, 4);
    assert_int_equal(fx_build(f, 3 * G, 1, MS_EVICT_OPT), MS_E_NOSPACE);
    assert_int_equal(f->p.peak_resident, 0);
    /* ws[0] alone fits, but pinned and moving chunks cannot make way. */
    put(&f->rt, C(b, 0), MS_CS_DIRTY);
    ms_chunk_get(&f->rt, C(b, 0))->pins = 2;
    for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++)
        assert_int_equal(fx_build(f, 4 * G, 1, (enum ms_evict_policy)pol), MS_E_NOSPACE);
    assert_int_equal(fx_build(f, 5 * G, 1, MS_EVICT_OPT), MS_OK);
    put(&f->rt, C(b, 1), MS_CS_OUT);
    assert_int_equal(fx_build(f, 5 * G, 1, MS_EVICT_OPT), MS_E_NOSPACE);
    put(&f->rt, C(b, 2), MS_CS_IN);
    assert_int_equal(fx_build(f, 6 * G, 1, MS_EVICT_LRU), MS_E_NOSPACE);
    assert_int_equal(fx_build(f, 7 * G, 1, MS_EVICT_LRU), MS_OK);
    assert_int_equal(f->p.n, 4);
    ms_chunk_get(&f->rt, C(b, 0))->pins = 0;
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 1), MS_CE_EVICT_DONE), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_POP_DONE), MS_OK);
}

static void test_skips_unevictable(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 3);
    uint32_t b = add_region(&f->rt, 1, 5);
    uint32_t h;
    assert_int_equal(ms_region_add(&f->rt, 2, 0x900000000ull, G, MS_RK_HOST, G, &h), MS_OK);
    put(&f->rt, C(a, 0), MS_CS_DIRTY); /* in ws[0]: oldest, yet never a victim */
    for (uint32_t i = 0; i < 5; i++)
        put(&f->rt, C(b, i), MS_CS_DIRTY);
    put(&f->rt, C(h, 0), MS_CS_DIRTY);
    ms_chunk_get(&f->rt, C(a, 0))->last_use = 0;
    ms_chunk_get(&f->rt, C(h, 0))->last_use = 0;
    for (uint32_t i = 0; i < 5; i++)
        ms_chunk_get(&f->rt, C(b, i))->last_use = 1 + i;
    ms_chunk_get(&f->rt, C(b, 0))->pins = 1;                                     /* pinned */
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 1), MS_CE_EVICT_START), MS_OK); /* OUT */
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_EVICT_START), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_EVICT_DONE), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_POP_START), MS_OK); /* IN */
    SET_WS(&f->ws[0], C(a, 1), C(a, 0), C(a, 2));
    /* 7 resident (a0, b0-b4, h0); two populations under a budget of 7 need b3 then b4. */
    for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_LRU; pol++) {
        assert_int_equal(fx_build(f, 7 * G, 1, (enum ms_evict_policy)pol), MS_OK);
        EXPECT_STEPS(&f->p, EV(C(b, 3)), PO(C(a, 1)), EV(C(b, 4)), PO(C(a, 2)));
    }
    assert_int_equal(fx_build(f, 6 * G, 1, MS_EVICT_OPT), MS_E_NOSPACE);
    ms_chunk_get(&f->rt, C(b, 0))->pins = 0;
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 1), MS_CE_EVICT_DONE), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_POP_DONE), MS_OK);
}

static void test_ws0_in_out_and_duplicates(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 4);
    uint32_t b = add_region(&f->rt, 1, 2);
    put(&f->rt, C(a, 0), MS_CS_IN);  /* arriving: no step */
    put(&f->rt, C(a, 1), MS_CS_OUT); /* leaving: no step (no OUT -> IN edge) */
    put(&f->rt, C(b, 0), MS_CS_CLEAN);
    put(&f->rt, C(b, 1), MS_CS_CLEAN);
    SET_WS(&f->ws[0], C(a, 2), C(a, 0), C(a, 2), C(a, 1), C(a, 3), C(a, 3), C(a, 0));
    assert_int_equal(fx_build(f, 5 * G, 1, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, PO(C(a, 2)), EV(C(b, 0)), PO(C(a, 3)));
    assert_int_equal(f->p.populate_bytes, 2 * G);
    assert_int_equal(fx_build(f, 3 * G, 1, MS_EVICT_OPT), MS_E_NOSPACE);
    assert_int_equal(fx_build(f, 4 * G, 1, MS_EVICT_OPT), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 0)), PO(C(a, 2)), EV(C(b, 1)), PO(C(a, 3)));
    assert_int_equal(ms_chunk_apply(&f->rt, C(a, 0), MS_CE_POP_DONE), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(a, 1), MS_CE_EVICT_DONE), MS_OK);
}

static void test_shrunken_budget(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 1);
    uint32_t b = add_region(&f->rt, 1, 4);
    for (uint32_t i = 0; i < 4; i++) {
        put(&f->rt, C(b, i), MS_CS_DIRTY);
        ms_chunk_get(&f->rt, C(b, i))->last_use = 10 - i;
    }
    /* Nothing to populate, 4 resident, budget 2: evict down to the budget, LRU first. */
    assert_int_equal(fx_build(f, 2 * G, 1, MS_EVICT_LRU), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 3)), EV(C(b, 2)));
    assert_int_equal(f->p.peak_resident, 4 * G);
    assert_int_equal(fx_build(f, 2 * G, 0, MS_EVICT_LRU), MS_OK);
    assert_int_equal(f->p.n, 2);
    /* With a population the excess goes before it. */
    SET_WS(&f->ws[0], C(a, 0));
    assert_int_equal(fx_build(f, 2 * G, 1, MS_EVICT_LRU), MS_OK);
    EXPECT_STEPS(&f->p, EV(C(b, 3)), EV(C(b, 2)), EV(C(b, 1)), PO(C(a, 0)));
    assert_int_equal(f->p.peak_resident, 4 * G);
}

static void test_bad_input(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 2);
    SET_WS(&f->ws[0], C(a, 0));
    SET_WS(&f->ws[1], C(a, 1), C(a + 7, 0));
    assert_int_equal(fx_build(f, 4 * G, 1, MS_EVICT_OPT), MS_OK);
    assert_int_equal(fx_build(f, 4 * G, 2, MS_EVICT_OPT), MS_E_INVAL);
    SET_WS(&f->ws[1], C(a, 1));
    SET_WS(&f->ws[0], C(a, 2));
    assert_int_equal(fx_build(f, 4 * G, 2, MS_EVICT_OPT), MS_E_INVAL);
    SET_WS(&f->ws[0], C(a, 0));
    assert_int_equal(fx_build(f, 4 * G, 2, (enum ms_evict_policy)9), MS_E_INVAL);
    struct ms_plan_input in = fx_input(f, 4 * G, 2, MS_EVICT_OPT);
    assert_int_equal(ms_plan_build(NULL, &f->p), MS_E_INVAL);
    assert_int_equal(ms_plan_build(&in, NULL), MS_E_INVAL);
    in.ws = NULL;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_E_INVAL);
    in.rt = NULL;
    in.ws = f->ws;
    assert_int_equal(ms_plan_build(&in, &f->p), MS_E_INVAL);
}

static void test_verify_rejects(void **state)
{
    struct fx *f = *state;
    uint32_t a = add_region(&f->rt, 0, 3);
    uint32_t b = add_region(&f->rt, 1, 3);
    put(&f->rt, C(a, 2), MS_CS_DIRTY);
    put(&f->rt, C(b, 0), MS_CS_DIRTY);
    put(&f->rt, C(b, 1), MS_CS_CLEAN);
    put(&f->rt, C(b, 2), MS_CS_OUT);
    SET_WS(&f->ws[0], C(a, 0), C(a, 1), C(a, 2));
    struct ms_plan_input in = fx_input(f, 5 * G, 1, MS_EVICT_OPT);
    assert_int_equal(ms_plan_build(&in, &f->p), MS_OK);
    char why[200];
    assert_int_equal(ms_plan_verify(&in, &f->p, why, sizeof(why)), MS_OK);
    assert_string_equal(why, "");

    struct {
        struct ms_plan_step s[4];
        size_t n;
        const char *what;
    } bad[] = {
        {{PO(C(a, 0)), PO(C(a, 1))}, 2, "over a budget"},
        {{EV(C(a, 2)), PO(C(a, 0)), PO(C(a, 1))}, 3, "of ws[0]"},
        {{EV(C(b, 2)), PO(C(a, 0)), EV(C(b, 0)), PO(C(a, 1))}, 4, "state out"},
        {{EV(C(b, 0)), PO(C(a, 0))}, 2, "not made resident"},
        {{EV(C(b, 0)), PO(C(a, 1)), EV(C(b, 1)), PO(C(a, 0))}, 4, "order"},
        {{EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 0)), PO(C(a, 1))}, 4, "more than one step"},
        {{EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 1)), PO(C(a, 2))}, 4, "state dirty"},
        {{EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 1)), PO(C(b, 2))}, 4, "outside ws[0]"},
        {{EV(C(b, 0)), PO(C(a, 0)), EV(C(a + 5, 1)), PO(C(a, 1))}, 4, "unknown chunk"},
    };
    for (size_t k = 0; k < MS_ARRAY_LEN(bad); k++) {
        struct ms_plan q = {.steps = bad[k].s, .n = bad[k].n, .cap = 4};
        /* Counters that match the steps, so only the named fault is wrong. */
        for (size_t i = 0; i < q.n; i++) {
            if (q.steps[i].op == MS_STEP_EVICT)
                q.evict_bytes += G;
            else
                q.populate_bytes += G;
        }
        q.peak_resident = 5 * G;
        assert_int_equal(ms_plan_verify(&in, &q, why, sizeof(why)), MS_E_INVAL);
        if (!strstr(why, bad[k].what))
            fail_msg("case %zu: want \"%s\" in \"%s\"", k, bad[k].what, why);
    }
    /* Pinned victim, and counters that lie. */
    struct ms_plan_step ok[] = {EV(C(b, 0)), PO(C(a, 0)), EV(C(b, 1)), PO(C(a, 1))};
    struct ms_plan q = {.steps = ok,
                        .n = 4,
                        .cap = 4,
                        .evict_bytes = 2 * G,
                        .populate_bytes = 2 * G,
                        .peak_resident = 4 * G};
    assert_int_equal(ms_plan_verify(&in, &q, why, sizeof(why)), MS_OK);
    q.peak_resident = 5 * G;
    assert_int_equal(ms_plan_verify(&in, &q, why, sizeof(why)), MS_E_INVAL);
    assert_non_null(strstr(why, "counters"));
    q.peak_resident = 4 * G;
    ms_chunk_get(&f->rt, C(b, 1))->pins = 1;
    assert_int_equal(ms_plan_verify(&in, &q, why, sizeof(why)), MS_E_INVAL);
    assert_non_null(strstr(why, "pinned"));
    ms_chunk_get(&f->rt, C(b, 1))->pins = 0;
    assert_int_equal(ms_plan_verify(&in, &q, NULL, 0), MS_OK);
    assert_int_equal(ms_chunk_apply(&f->rt, C(b, 2), MS_CE_EVICT_DONE), MS_OK);
}

static void test_parse_name(void **state)
{
    (void)state;
    enum ms_evict_policy p;
    for (int i = MS_EVICT_OPT; i <= MS_EVICT_WHOLE; i++) {
        assert_int_equal(ms_evict_policy_parse(ms_evict_policy_name((enum ms_evict_policy)i), &p),
                         MS_OK);
        assert_int_equal((int)p, i);
    }
    assert_string_equal(ms_evict_policy_name(MS_EVICT_OPT), "opt");
    assert_string_equal(ms_evict_policy_name(MS_EVICT_LRU), "lru");
    assert_string_equal(ms_evict_policy_name(MS_EVICT_WHOLE), "whole");
    assert_string_equal(ms_evict_policy_name((enum ms_evict_policy)99), "unknown");
    assert_int_equal(ms_evict_policy_parse("belady", &p), MS_E_NOTFOUND);
    assert_int_equal(ms_evict_policy_parse("OPT", &p), MS_E_NOTFOUND);
    assert_int_equal(ms_evict_policy_parse(NULL, &p), MS_E_INVAL);
}

/* ---- random worlds --------------------------------------------------------------------- */

static bool set_has(const struct ms_chunk_set *s, ms_chunk_id id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->ids[i] == id)
            return true;
    return false;
}

/* Index of the first future set (after `now`) that uses id, or SIZE_MAX. Brute force. */
static size_t next_use(const struct ms_test_world *w, const struct ms_chunk_set *sets, size_t now,
                       ms_chunk_id id)
{
    for (size_t k = now + 1; k < w->nsteps; k++)
        if (set_has(&sets[k], id))
            return k;
    return SIZE_MAX;
}

/* The bytes that must stay or arrive: distinct ws[0] chunks plus unmovable resident ones. */
static uint64_t need_bytes(struct ms_rtable *rt, const struct ms_chunk_set *ws0)
{
    uint64_t need = 0;
    for (size_t i = 0; i < ws0->n; i++) {
        bool first = true;
        for (size_t j = 0; j < i; j++)
            first &= ws0->ids[j] != ws0->ids[i];
        if (first)
            need += ms_chunk_get(rt, ws0->ids[i])->bytes;
    }
    for (size_t s = 0; s < rt->nslots; s++) {
        const struct ms_region *r = &rt->regions[s];
        for (uint32_t c = 0; r->live && c < r->nchunks; c++) {
            const struct ms_chunk *ch = &r->chunks[c];
            if (!set_has(ws0, MS_CHUNK_ID(s, c)) &&
                (ch->pins || ch->state == MS_CS_IN || ch->state == MS_CS_OUT))
                need += ch->bytes;
        }
    }
    return need;
}

static bool evictable(struct ms_rtable *rt, const struct ms_chunk_set *ws0, ms_chunk_id id)
{
    const struct ms_chunk *ch = ms_chunk_get(rt, id);
    return (ch->state == MS_CS_CLEAN || ch->state == MS_CS_DIRTY) && ch->pins == 0 &&
           !set_has(ws0, id);
}

static uint64_t task_recency(struct ms_rtable *rt, uint32_t task)
{
    uint64_t u = 0;
    for (size_t s = 0; s < rt->nslots; s++) {
        const struct ms_region *r = &rt->regions[s];
        for (uint32_t c = 0; r->live && r->task == task && c < r->nchunks; c++)
            u = MS_MAX(u, r->chunks[c].last_use);
    }
    return u;
}

/*
 * Check, before the plan is applied, that it evicts lazily (each run of evictions ends with one
 * that was needed) and in its policy's order (stated directly from plan.h, by brute force).
 */
static void check_policy(struct ms_test_world *w, const struct ms_chunk_set *sets, size_t now,
                         enum ms_evict_policy pol, const struct ms_plan *p)
{
    struct ms_rtable *rt = &w->rt;
    const struct ms_chunk_set *ws0 = &sets[now];
    uint64_t cur = rt->resident_bytes;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t b = ms_chunk_get(rt, p->steps[i].chunk)->bytes;
        if (p->steps[i].op == MS_STEP_EVICT) {
            bool run_end = i + 1 == p->n || p->steps[i + 1].op == MS_STEP_POPULATE;
            uint64_t want = i + 1 < p->n ? ms_chunk_get(rt, p->steps[i + 1].chunk)->bytes : 0;
            if (pol != MS_EVICT_WHOLE && run_end && cur + want <= w->budget)
                fail_msg("step %zu: eviction was not needed", i);
            cur -= b;
        } else {
            cur += b;
        }
    }
    /* Victims vs survivors: every evicted chunk must rank before every evictable survivor. */
    for (size_t i = 0; i < p->n; i++) {
        if (p->steps[i].op != MS_STEP_EVICT)
            continue;
        ms_chunk_id v = p->steps[i].chunk;
        const struct ms_chunk *vc = ms_chunk_get(rt, v);
        uint32_t vt = ms_region_get(rt, MS_CHUNK_REGION(v))->task;
        for (size_t s = 0; s < rt->nslots; s++) {
            const struct ms_region *r = &rt->regions[s];
            for (uint32_t c = 0; r->live && c < r->nchunks; c++) {
                ms_chunk_id u = MS_CHUNK_ID(s, c);
                if (!evictable(rt, ws0, u))
                    continue;
                bool evicted = false;
                for (size_t j = 0; j < p->n; j++)
                    evicted |= p->steps[j].op == MS_STEP_EVICT && p->steps[j].chunk == u;
                if (evicted)
                    continue;
                const struct ms_chunk *uc = &r->chunks[c];
                if (pol == MS_EVICT_OPT) {
                    size_t nv = next_use(w, sets, now, v), nu = next_use(w, sets, now, u);
                    assert_true(nv > nu || (nv == nu && vc->last_use <= uc->last_use));
                } else if (pol == MS_EVICT_LRU) {
                    assert_true(vc->last_use <= uc->last_use);
                } else {
                    /* WHOLE: victims' tasks are swapped out entirely, oldest tasks first. */
                    assert_int_not_equal(r->task, vt);
                    assert_true(task_recency(rt, vt) <= task_recency(rt, r->task));
                }
            }
        }
    }
}

struct totals {
    uint64_t populate, evict, evict_steps, nospace;
};

/*
 * Replay a whole schedule with one policy, the way the daemon and executor would, checking
 * everything after each step. chaos adds pins, OUT chunks left in flight across steps and
 * population already in flight (IN) when the planner runs.
 */
static void replay(uint64_t seed, enum ms_test_world_kind kind, enum ms_evict_policy pol,
                   bool chaos, struct totals *tot)
{
    struct ms_test_world w;
    assert_int_equal(ms_test_world_build(&w, seed, kind, 40), MS_OK);
    struct ms_rng cr;
    ms_rng_seed(&cr, seed ^ 0xc4a05c4a05ull);
    const struct ms_chunk_set *sets = pol == MS_EVICT_WHOLE ? w.whole : w.ws;
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_chunk_set outgoing, pinned, arriving;
    ms_chunk_set_init(&outgoing);
    ms_chunk_set_init(&pinned);
    ms_chunk_set_init(&arriving);
    memset(tot, 0, sizeof(*tot));
    char why[256];

    for (size_t t = 0; t < w.nsteps; t++) {
        const struct ms_chunk_set *ws0 = &sets[t];
        struct ms_rtable *rt = &w.rt;
        if (chaos) {
            /* Some evictions finish now; those the next slice needs always do. */
            size_t keep = 0;
            for (size_t i = 0; i < outgoing.n; i++) {
                ms_chunk_id id = outgoing.ids[i];
                if (set_has(ws0, id) || ms_rng_chance(&cr, 1, 2))
                    assert_int_equal(ms_chunk_apply(rt, id, MS_CE_EVICT_DONE), MS_OK);
                else
                    outgoing.ids[keep++] = id;
            }
            outgoing.n = keep;
            /* A background eviction may have started (say, a write-back the daemon chose). */
            if (ms_rng_chance(&cr, 1, 3)) {
                size_t s = (size_t)ms_rng_below(&cr, rt->nslots);
                struct ms_region *r = &rt->regions[s];
                ms_chunk_id id = MS_CHUNK_ID(s, ms_rng_below(&cr, r->nchunks));
                const struct ms_chunk *ch = ms_chunk_get(rt, id);
                if (ch->state == MS_CS_DIRTY && !set_has(ws0, id)) {
                    assert_int_equal(ms_chunk_apply(rt, id, MS_CE_EVICT_START), MS_OK);
                    assert_int_equal(ms_chunk_set_add(&outgoing, id), MS_OK);
                }
            }
            /* A population of the next slice may already be in flight. */
            if (ws0->n > 0 && ms_rng_chance(&cr, 1, 3)) {
                ms_chunk_id id = ws0->ids[ms_rng_below(&cr, ws0->n)];
                const struct ms_chunk *ch = ms_chunk_get(rt, id);
                if (ch->state == MS_CS_HOST && rt->resident_bytes + ch->bytes <= w.budget) {
                    assert_int_equal(ms_chunk_apply(rt, id, MS_CE_POP_START), MS_OK);
                    assert_int_equal(ms_chunk_set_add(&arriving, id), MS_OK);
                }
            }
            /* Queued GPU work pins some resident chunks. */
            for (size_t s = 0; s < rt->nslots; s++) {
                struct ms_region *r = &rt->regions[s];
                for (uint32_t c = 0; r->live && c < r->nchunks; c++) {
                    if (ms_chunk_state_ready((enum ms_chunk_state)r->chunks[c].state) &&
                        ms_rng_chance(&cr, 1, 12)) {
                        r->chunks[c].pins++;
                        assert_int_equal(ms_chunk_set_add(&pinned, MS_CHUNK_ID(s, c)), MS_OK);
                    }
                }
            }
        }

        struct ms_timeline view = {.e = w.tl.e + t, .n = w.nsteps - t, .cap = 0};
        struct ms_plan_input in = {.rt = rt,
                                   .budget = w.budget,
                                   .tl = &view,
                                   .ws = sets + t,
                                   .nws = w.nsteps - t,
                                   .policy = pol};
        int rc = ms_plan_build(&in, &p);
        if (need_bytes(rt, ws0) > w.budget) {
            assert_int_equal(rc, MS_E_NOSPACE);
            assert_int_equal(p.n, 0);
            tot->nospace++;
            /* What the daemon does: wait for the work and the copies in flight, then re-plan. */
            for (size_t i = 0; i < pinned.n; i++)
                ms_chunk_get(rt, pinned.ids[i])->pins--;
            ms_chunk_set_clear(&pinned);
            for (size_t i = 0; i < outgoing.n; i++)
                assert_int_equal(ms_chunk_apply(rt, outgoing.ids[i], MS_CE_EVICT_DONE), MS_OK);
            ms_chunk_set_clear(&outgoing);
            rc = ms_plan_build(&in, &p);
        }
        assert_int_equal(rc, MS_OK);
        if (ms_plan_verify(&in, &p, why, sizeof(why)))
            fail_msg("seed %llu step %zu %s: %s", (unsigned long long)seed, t,
                     ms_evict_policy_name(pol), why);
        assert_true(p.peak_resident <= w.budget);
        check_policy(&w, sets, t, pol, &p);

        /* Execute, pipelined like the executor: evictions are issued as they come, and each
         * population first waits for the evictions issued before it. Evictions after the last
         * population may still be in flight when the slice runs (chaos). */
        size_t first_unfinished = outgoing.n;
        for (size_t i = 0; i < p.n; i++) {
            ms_chunk_id id = p.steps[i].chunk;
            if (p.steps[i].op == MS_STEP_POPULATE) {
                for (size_t j = first_unfinished; j < outgoing.n; j++)
                    assert_int_equal(ms_chunk_apply(rt, outgoing.ids[j], MS_CE_EVICT_DONE), MS_OK);
                outgoing.n = first_unfinished;
                assert_int_equal(ms_test_populate(rt, id), MS_OK);
                assert_true(rt->resident_bytes <= w.budget);
            } else if (ms_chunk_get(rt, id)->state == MS_CS_CLEAN) {
                assert_int_equal(ms_chunk_apply(rt, id, MS_CE_DROP), MS_OK);
            } else {
                assert_int_equal(ms_chunk_apply(rt, id, MS_CE_EVICT_START), MS_OK);
                assert_int_equal(ms_chunk_set_add(&outgoing, id), MS_OK);
            }
        }
        for (size_t j = first_unfinished; j < outgoing.n; j++) {
            if (!chaos || ms_rng_chance(&cr, 1, 2)) {
                assert_int_equal(ms_chunk_apply(rt, outgoing.ids[j], MS_CE_EVICT_DONE), MS_OK);
                outgoing.ids[j--] = outgoing.ids[--outgoing.n];
            }
        }
        if (ms_rtable_check(rt, why, sizeof(why)))
            fail_msg("seed %llu step %zu: %s", (unsigned long long)seed, t, why);
        for (size_t i = 0; i < arriving.n; i++)
            assert_int_equal(ms_chunk_apply(rt, arriving.ids[i], MS_CE_POP_DONE), MS_OK);
        ms_chunk_set_clear(&arriving);
        for (size_t i = 0; i < pinned.n; i++)
            ms_chunk_get(rt, pinned.ids[i])->pins--;
        ms_chunk_set_clear(&pinned);

        /* The slice runs: everything it needs is ready, within budget; it touches its chunks. */
        assert_true(rt->resident_bytes <= w.budget);
        ms_rtable_tick(rt);
        for (size_t i = 0; i < ws0->n; i++) {
            ms_chunk_id id = ws0->ids[i];
            assert_true(ms_chunk_state_ready((enum ms_chunk_state)ms_chunk_get(rt, id)->state));
            if (!chaos || ms_rng_chance(&cr, 3, 4))
                assert_int_equal(ms_chunk_apply(rt, id, MS_CE_TOUCH), MS_OK);
        }
        if (ms_rtable_check(rt, why, sizeof(why)))
            fail_msg("seed %llu step %zu: %s", (unsigned long long)seed, t, why);
        tot->populate += p.populate_bytes;
        tot->evict += p.evict_bytes;
        for (size_t i = 0; i < p.n; i++)
            tot->evict_steps += p.steps[i].op == MS_STEP_EVICT;
    }
    for (size_t i = 0; i < outgoing.n; i++)
        assert_int_equal(ms_chunk_apply(&w.rt, outgoing.ids[i], MS_CE_EVICT_DONE), MS_OK);
    ms_chunk_set_fini(&outgoing);
    ms_chunk_set_fini(&pinned);
    ms_chunk_set_fini(&arriving);
    ms_plan_fini(&p);
    ms_test_world_free(&w);
}

static uint64_t derive(uint64_t base, uint64_t i)
{
    struct ms_rng r;
    ms_rng_seed(&r, base + i * 0x9e3779b97f4a7c15ull);
    return ms_rng_next(&r);
}

static void test_random_replay_safety(void **state)
{
    (void)state;
    uint64_t base = ms_test_seed(20260101);
    uint64_t nospace = 0, live = ms_alloc_live();
    for (uint64_t i = 0; i < 30; i++) {
        uint64_t seed = derive(base, i);
        for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++) {
            struct totals a, b;
            replay(seed, i % 2 ? MS_TW_MIXED : MS_TW_UNIFORM, (enum ms_evict_policy)pol, true, &a);
            replay(seed, i % 2 ? MS_TW_MIXED : MS_TW_UNIFORM, (enum ms_evict_policy)pol, true, &b);
            assert_memory_equal(&a, &b, sizeof(a)); /* deterministic */
            nospace += a.nospace;
        }
    }
    assert_int_equal(ms_alloc_live(), live);
    printf("chaos replays hit NOSPACE %llu times\n", (unsigned long long)nospace);
}

static void test_random_replay_opt_wins(void **state)
{
    (void)state;
    uint64_t base = ms_test_seed(424242);
    uint64_t sum[3] = {0}, evsteps = 0;
    for (uint64_t i = 0; i < 40; i++) {
        uint64_t seed = derive(base, i);
        struct totals t[3], again;
        for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++) {
            replay(seed, MS_TW_UNIFORM, (enum ms_evict_policy)pol, false, &t[pol]);
            sum[pol] += t[pol].populate;
        }
        replay(seed, MS_TW_UNIFORM, MS_EVICT_OPT, false, &again);
        assert_memory_equal(&again, &t[MS_EVICT_OPT], sizeof(again));
        evsteps += t[MS_EVICT_OPT].evict_steps;
        if (t[MS_EVICT_OPT].populate > t[MS_EVICT_LRU].populate ||
            t[MS_EVICT_OPT].populate > t[MS_EVICT_WHOLE].populate)
            fail_msg("seed %llu: populated opt %llu lru %llu whole %llu", (unsigned long long)seed,
                     (unsigned long long)t[0].populate, (unsigned long long)t[1].populate,
                     (unsigned long long)t[2].populate);
    }
    assert_true(evsteps > 0); /* the worlds did oversubscribe */
    printf("populated MiB: opt %llu lru %llu whole %llu\n", (unsigned long long)(sum[0] / MS_MIB),
           (unsigned long long)(sum[1] / MS_MIB), (unsigned long long)(sum[2] / MS_MIB));
}

/*
 * Exhaustive optimum for a tiny uniform world: the fewest chunk loads over the schedule, over all
 * ways of choosing what stays resident. Restricting each step's resident set to a subset of
 * (previous set + requested set) loses nothing (a load can always be delayed until its use).
 */
static uint64_t dp_optimum(struct ms_test_world *w)
{
    ms_chunk_id ids[16];
    size_t n = 0;
    for (size_t s = 0; s < w->rt.nslots; s++)
        for (uint32_t c = 0; w->rt.regions[s].live && c < w->rt.regions[s].nchunks; c++) {
            assert_true(n < 16);
            ids[n++] = MS_CHUNK_ID(s, c);
        }
    uint64_t cap = w->budget / G;
    size_t nstates = (size_t)1 << n;
    uint64_t *cost = malloc(nstates * sizeof(*cost)), *nx = malloc(nstates * sizeof(*nx));
    assert_non_null(cost);
    assert_non_null(nx);
    for (size_t m = 0; m < nstates; m++)
        cost[m] = UINT64_MAX;
    cost[0] = 0;
    for (size_t k = 0; k < w->nsteps; k++) {
        uint32_t req = 0;
        for (size_t i = 0; i < w->ws[k].n; i++)
            for (size_t b = 0; b < n; b++)
                if (ids[b] == w->ws[k].ids[i])
                    req |= 1u << b;
        for (size_t m = 0; m < nstates; m++)
            nx[m] = UINT64_MAX;
        for (uint32_t m = 0; m < nstates; m++) {
            if (cost[m] == UINT64_MAX)
                continue;
            uint64_t c = cost[m] + (uint64_t)__builtin_popcount(req & ~m);
            uint32_t rest = m & ~req;
            for (uint32_t keep = rest;; keep = (keep - 1) & rest) { /* every submask of rest */
                uint32_t to = req | keep;
                if ((uint64_t)__builtin_popcount(to) <= cap && c < nx[to])
                    nx[to] = c;
                if (keep == 0)
                    break;
            }
        }
        memcpy(cost, nx, nstates * sizeof(*cost));
    }
    uint64_t best = UINT64_MAX;
    for (size_t m = 0; m < nstates; m++)
        best = MS_MIN(best, cost[m]);
    free(cost);
    free(nx);
    return best;
}

static void test_opt_matches_exhaustive_optimum(void **state)
{
    (void)state;
    uint64_t base = ms_test_seed(777);
    uint64_t strict = 0;
    for (uint64_t i = 0; i < 60; i++) {
        uint64_t seed = derive(base, i);
        struct ms_test_world w;
        assert_int_equal(ms_test_world_build(&w, seed, MS_TW_TINY, 40), MS_OK);
        uint64_t best = dp_optimum(&w);
        ms_test_world_free(&w);
        struct totals opt, lru;
        replay(seed, MS_TW_TINY, MS_EVICT_OPT, false, &opt);
        replay(seed, MS_TW_TINY, MS_EVICT_LRU, false, &lru);
        if (opt.populate / G != best)
            fail_msg("seed %llu: opt loads %llu chunks, optimum is %llu", (unsigned long long)seed,
                     (unsigned long long)(opt.populate / G), (unsigned long long)best);
        strict += lru.populate / G > best;
    }
    printf("LRU worse than optimal in %llu of 60 tiny worlds\n", (unsigned long long)strict);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    uint64_t base = ms_test_seed(99), failures = 0, live0 = ms_alloc_live();
    for (uint64_t i = 0; i < 6; i++) {
        struct ms_test_world w;
        assert_int_equal(ms_test_world_build(&w, derive(base, i), MS_TW_MIXED, 10), MS_OK);
        struct ms_rng r;
        ms_rng_seed(&r, derive(base, i) + 1);
        /* Fill the budget with chunks of other tasks so the plan must evict. */
        for (size_t s = 0; s < w.rt.nslots; s++)
            for (uint32_t c = 0; c < w.rt.regions[s].nchunks; c++) {
                ms_chunk_id id = MS_CHUNK_ID(s, c);
                if (!set_has(&w.ws[0], id) &&
                    w.rt.resident_bytes + w.rt.regions[s].chunks[c].bytes <= w.budget)
                    assert_int_equal(ms_test_make_resident(&w.rt, id, ms_rng_chance(&r, 1, 2)),
                                     MS_OK);
            }
        for (int pol = MS_EVICT_OPT; pol <= MS_EVICT_WHOLE; pol++) {
            const struct ms_chunk_set *sets = pol == MS_EVICT_WHOLE ? w.whole : w.ws;
            struct ms_plan_input in = {.rt = &w.rt,
                                       .budget = w.budget,
                                       .tl = &w.tl,
                                       .ws = sets,
                                       .nws = w.nsteps,
                                       .policy = (enum ms_evict_policy)pol};
            uint64_t live = ms_alloc_live();
            for (uint64_t n = 1;; n++) {
                struct ms_plan p;
                ms_plan_init(&p);
                ms_alloc_fail_after(n);
                int rc = ms_plan_build(&in, &p);
                ms_alloc_fail_after(0);
                if (rc == MS_OK) {
                    assert_int_equal(ms_plan_verify(&in, &p, NULL, 0), MS_OK);
                    /* verify allocates too: it must fail cleanly as well. */
                    ms_alloc_fail_after(1);
                    assert_int_equal(ms_plan_verify(&in, &p, NULL, 0), MS_E_NOMEM);
                    ms_alloc_fail_after(2);
                    assert_int_equal(ms_plan_verify(&in, &p, NULL, 0), MS_E_NOMEM);
                    ms_alloc_fail_after(0);
                    ms_plan_fini(&p);
                    assert_int_equal(ms_alloc_live(), live);
                    break;
                }
                assert_int_equal(rc, MS_E_NOMEM);
                assert_int_equal(p.n, 0);
                failures++;
                ms_plan_fini(&p);
                assert_int_equal(ms_alloc_live(), live);
                assert_true(n < 1000);
            }
            assert_int_equal(ms_rtable_check(&w.rt, NULL, 0), 0);
        }
        ms_test_world_free(&w);
    }
    assert_true(failures > 6); /* the sweep did reach the planner's allocations */
    assert_int_equal(ms_alloc_live(), live0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_ws, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_everything_fits, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_opt_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lru_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_host_room, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_ties_by_id, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_whole, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_nospace, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_skips_unevictable, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_ws0_in_out_and_duplicates, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_shrunken_budget, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_verify_rejects, fx_setup, fx_teardown),
        cmocka_unit_test(test_parse_name),
        cmocka_unit_test(test_random_replay_safety),
        cmocka_unit_test(test_random_replay_opt_wins),
        cmocka_unit_test(test_opt_matches_exhaustive_optimum),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
