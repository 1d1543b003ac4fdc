/*
 * test_region.c - the region table and the chunk state machine.
 *
 * Every test calls ms_rtable_check after each change. The state-machine test drives every
 * (state, event) pair and compares with the table in region.h written out independently here.
 * A seeded random walk mixes adds, removes, lookups and events against a shadow model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/region.h"

#define CHECK(rt)                                                                                  \
    do {                                                                                           \
        char why_[256];                                                                            \
        int bad_ = ms_rtable_check((rt), why_, sizeof(why_));                                      \
        if (bad_)                                                                                  \
            fail_msg("invariant %d: %s", bad_, why_);                                              \
    } while (0)

static uint64_t seed_from_env(void)
{
    const char *s = getenv("MS_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10) : 12345;
    printf("seed=%llu\n", (unsigned long long)seed);
    return seed;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void chunk_sizes(void **unused)
{
    (void)unused;
    assert_int_equal(ms_chunk_bytes_for(1), MS_GRAN);
    assert_int_equal(ms_chunk_bytes_for(3 * MS_MIB), 4 * MS_MIB);
    assert_int_equal(ms_chunk_bytes_for(128 * MS_MIB), 128 * MS_MIB);
    assert_int_equal(ms_chunk_bytes_for(128 * MS_MIB + 1), 64 * MS_MIB);
    /* another chunk size: one chunk up to twice it; rounded up to 2 MiB, clamped to
     * [MS_GRAN, MS_CHUNK_MAX] */
    assert_int_equal(ms_chunk_bytes_with(32 * MS_MIB, 16 * MS_MIB), 32 * MS_MIB);
    assert_int_equal(ms_chunk_bytes_with(32 * MS_MIB + 1, 16 * MS_MIB), 16 * MS_MIB);
    assert_int_equal(ms_chunk_bytes_with(1 * MS_GIB, 3 * MS_MIB), 4 * MS_MIB);
    assert_int_equal(ms_chunk_bytes_with(1 * MS_GIB, 0), MS_GRAN);
    assert_int_equal(ms_chunk_bytes_with(8 * MS_GIB, 4 * MS_GIB), MS_CHUNK_MAX);
    assert_int_equal(ms_chunk_bytes_with(0, 16 * MS_MIB), MS_GRAN);
    for (uint64_t s = 1; s < 300 * MS_MIB; s += 7 * MS_MIB + 12345)
        assert_int_equal(ms_chunk_bytes_with(s, MS_CHUNK_DEFAULT), ms_chunk_bytes_for(s));

    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t id;
    /* 200 MiB + 1 byte: span 202 MiB -> 64, 64, 64, 10 */
    assert_int_equal(ms_region_add(&rt, 1, 0x10000000, 200 * MS_MIB + 1, MS_RK_DEVICE, 0, &id),
                     MS_OK);
    struct ms_region *r = ms_region_get(&rt, id);
    assert_non_null(r);
    assert_int_equal(r->nchunks, 4);
    assert_int_equal(r->chunks[3].bytes, 10 * MS_MIB);
    assert_int_equal(ms_region_chunk_at(r, 64 * MS_MIB), 1);
    assert_int_equal(ms_region_chunk_at(r, 64 * MS_MIB - 1), 0);
    assert_int_equal(ms_region_chunk_offset(r, 3), 192 * MS_MIB);
    CHECK(&rt);
    /* Explicit chunk size must be a multiple of 2 MiB. */
    assert_int_equal(ms_region_add(&rt, 1, 0x90000000, MS_MIB, MS_RK_DEVICE, MS_MIB, NULL),
                     MS_E_INVAL);
    assert_int_equal(ms_region_add(&rt, 1, 0x90000000, 0, MS_RK_DEVICE, 0, NULL), MS_E_INVAL);
    assert_int_equal(ms_region_add(&rt, 1, UINT64_MAX - MS_MIB, 4 * MS_MIB, MS_RK_DEVICE, 0, NULL),
                     MS_E_INVAL);
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

static void overlap_and_lookup(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t a, b, c;
    assert_int_equal(ms_region_add(&rt, 7, 0x100000000, 4 * MS_MIB, MS_RK_DEVICE, 0, &a), MS_OK);
    /* Overlaps the span (rounded to 2 MiB) of a. */
    assert_int_equal(ms_region_add(&rt, 7, 0x100000000 + 3 * MS_MIB, MS_MIB, MS_RK_DEVICE, 0, NULL),
                     MS_E_OVERLAP);
    assert_int_equal(ms_region_add(&rt, 7, 0x100000000 - MS_MIB, 2 * MS_MIB, MS_RK_DEVICE, 0, NULL),
                     MS_E_OVERLAP);
    /* Same addresses in another task are fine (another process). */
    assert_int_equal(ms_region_add(&rt, 8, 0x100000000, 4 * MS_MIB, MS_RK_DEVICE, 0, &b), MS_OK);
    assert_int_equal(ms_region_add(&rt, 7, 0x100000000 + 4 * MS_MIB, 1, MS_RK_ASYNC, 0, &c), MS_OK);
    CHECK(&rt);

    uint32_t reg, ch;
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000, &reg, &ch), MS_OK);
    assert_int_equal(reg, a);
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000 + 4 * MS_MIB - 1, &reg, &ch), MS_OK);
    assert_int_equal(reg, a);
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000 + 4 * MS_MIB, &reg, &ch), MS_OK);
    assert_int_equal(reg, c);
    /* c's span is 2 MiB even though it asked for 1 byte. */
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000 + 6 * MS_MIB - 1, &reg, NULL), MS_OK);
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000 + 6 * MS_MIB, &reg, NULL), MS_E_NOTFOUND);
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0xfff, &reg, NULL), MS_E_NOTFOUND);
    assert_int_equal(ms_rtable_lookup(&rt, 8, 0x100000000 + 2, &reg, NULL), MS_OK);
    assert_int_equal(reg, b);
    assert_int_equal(ms_rtable_lookup(&rt, 9, 0x100000000, &reg, NULL), MS_E_NOTFOUND);
    assert_int_equal(ms_rtable_footprint(&rt, 7), 6 * MS_MIB);
    assert_int_equal(ms_rtable_footprint(&rt, UINT32_MAX), 10 * MS_MIB);
    /* lookup_next: the containing region, else the next of the task above, else none. */
    assert_int_equal(ms_rtable_lookup_next(&rt, 7, 0x100000000 + 5, &reg), MS_OK);
    assert_int_equal(reg, a);
    assert_int_equal(ms_rtable_lookup_next(&rt, 7, 0x1000, &reg), MS_OK);
    assert_int_equal(reg, a);
    assert_int_equal(ms_rtable_lookup_next(&rt, 7, 0x100000000 + 5 * MS_MIB, &reg), MS_OK);
    assert_int_equal(reg, c);
    assert_int_equal(ms_rtable_lookup_next(&rt, 7, 0x100000000 + 6 * MS_MIB, &reg),
                     MS_E_NOTFOUND); /* task 8's region at the same addresses is not 7's */
    assert_int_equal(ms_rtable_lookup_next(&rt, 8, 0x1000, &reg), MS_OK);
    assert_int_equal(reg, b);
    /* task 6 has none: the index's next entry is task 7's */
    assert_int_equal(ms_rtable_lookup_next(&rt, 6, 0x100000000, &reg), MS_E_NOTFOUND);

    assert_int_equal(ms_region_remove(&rt, a), MS_OK);
    assert_int_equal(ms_region_remove(&rt, a), MS_E_NOTFOUND);
    assert_int_equal(ms_rtable_lookup(&rt, 7, 0x100000000, &reg, NULL), MS_E_NOTFOUND);
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

/* The expected transition table, written independently of region.c. */
static int expect_next(int s, int ev)
{
    switch (ev) {
    case MS_CE_MAP_FRESH: return s == MS_CS_EMPTY ? MS_CS_DIRTY : -1;
    case MS_CE_POP_START: return s == MS_CS_HOST ? MS_CS_IN : -1;
    case MS_CE_POP_DONE: return s == MS_CS_IN ? MS_CS_CLEAN : -1;
    case MS_CE_POP_FAIL: return s == MS_CS_IN ? MS_CS_HOST : -1;
    case MS_CE_TOUCH: return (s == MS_CS_CLEAN || s == MS_CS_DIRTY) ? MS_CS_DIRTY : -1;
    case MS_CE_EVICT_START: return s == MS_CS_DIRTY ? MS_CS_OUT : -1;
    case MS_CE_EVICT_DONE: return s == MS_CS_OUT ? MS_CS_HOST : -1;
    case MS_CE_EVICT_FAIL: return s == MS_CS_OUT ? MS_CS_DIRTY : -1;
    case MS_CE_DROP: return (s == MS_CS_CLEAN || s == MS_CS_DIRTY) ? MS_CS_HOST : -1;
    case MS_CE_DISCARD:
        return (s == MS_CS_EMPTY || s == MS_CS_HOST || s == MS_CS_CLEAN || s == MS_CS_DIRTY)
                   ? MS_CS_EMPTY
                   : -1;
    }
    return -1;
}

/* Drive a fresh chunk into state s through legal events. */
static void reach(struct ms_rtable *rt, ms_chunk_id id, int s)
{
    static const int path[MS_CS_COUNT][4] = {
        [MS_CS_EMPTY] = {-1},
        [MS_CS_HOST] = {MS_CE_MAP_FRESH, MS_CE_EVICT_START, MS_CE_EVICT_DONE, -1},
        [MS_CS_IN] = {MS_CE_MAP_FRESH, MS_CE_DROP, MS_CE_POP_START, -1},
        [MS_CS_CLEAN] = {MS_CE_MAP_FRESH, MS_CE_DROP, MS_CE_POP_START, MS_CE_POP_DONE},
        [MS_CS_DIRTY] = {MS_CE_MAP_FRESH, -1},
        [MS_CS_OUT] = {MS_CE_MAP_FRESH, MS_CE_EVICT_START, -1},
    };
    for (int i = 0; i < 4 && path[s][i] >= 0; i++)
        assert_int_equal(ms_chunk_apply(rt, id, path[s][i]), MS_OK);
    assert_int_equal(ms_chunk_get(rt, id)->state, s);
}

static void state_machine_exhaustive(void **unused)
{
    (void)unused;
    for (int s = 0; s < MS_CS_COUNT; s++) {
        for (int ev = 0; ev < MS_CE_COUNT; ev++) {
            struct ms_rtable rt;
            ms_rtable_init(&rt);
            uint32_t r;
            assert_int_equal(ms_region_add(&rt, 1, 0, 2 * MS_MIB, MS_RK_DEVICE, 0, &r), MS_OK);
            ms_chunk_id id = MS_CHUNK_ID(r, 0);
            reach(&rt, id, s);
            uint64_t before = rt.resident_bytes;
            int want = expect_next(s, ev);
            int got = ms_chunk_apply(&rt, id, ev);
            if (want < 0) {
                assert_int_equal(got, MS_E_STATE);
                assert_int_equal(ms_chunk_get(&rt, id)->state, s);
                assert_int_equal(rt.resident_bytes, before);
            } else {
                assert_int_equal(got, MS_OK);
                assert_int_equal(ms_chunk_get(&rt, id)->state, want);
                uint64_t expect_res = ms_chunk_state_resident(want) ? 2 * MS_MIB : 0;
                assert_int_equal(rt.resident_bytes, expect_res);
            }
            CHECK(&rt);
            /* Settle so the region can be removed. */
            struct ms_chunk *c = ms_chunk_get(&rt, id);
            if (c->state == MS_CS_IN)
                ms_chunk_apply(&rt, id, MS_CE_POP_FAIL);
            if (c->state == MS_CS_OUT)
                ms_chunk_apply(&rt, id, MS_CE_EVICT_DONE);
            if (c->state == MS_CS_CLEAN || c->state == MS_CS_DIRTY)
                assert_int_equal(ms_region_remove(&rt, r), MS_E_BUSY);
            ms_chunk_apply(&rt, id, MS_CE_DISCARD);
            assert_int_equal(ms_region_remove(&rt, r), MS_OK);
            CHECK(&rt);
            ms_rtable_fini(&rt);
        }
    }
}

/* A region adopted with data: EMPTY -> HOST once, before use; never afterwards. */
static void mark_host(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t r;
    assert_int_equal(ms_region_add(&rt, 1, 0, 6 * MS_MIB, MS_RK_VMM, 0, &r), MS_OK);
    assert_int_equal(ms_region_mark_host(&rt, r), MS_OK);
    CHECK(&rt);
    for (uint32_t k = 0; k < ms_region_get(&rt, r)->nchunks; k++)
        assert_int_equal(ms_chunk_get(&rt, MS_CHUNK_ID(r, k))->state, MS_CS_HOST);
    /* HOST chunks populate by copying in. */
    assert_int_equal(ms_chunk_apply(&rt, MS_CHUNK_ID(r, 0), MS_CE_POP_START), MS_OK);
    assert_int_equal(ms_region_mark_host(&rt, r), MS_E_STATE);
    assert_int_equal(ms_region_mark_host(&rt, r + 1), MS_E_NOTFOUND);
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

/* One never-populated chunk of an always-mapped region moves to a host chunk (a stream capture
 * naming it under the daemon): only EMPTY chunks of amap regions, with a token, and I9 holds. */
static void chunk_mark_host(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t r, plain;
    assert_int_equal(ms_region_add(&rt, 1, 0, 512 * MS_MIB, MS_RK_DEVICE, 0, &r), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, 1024 * MS_MIB, 2 * MS_MIB, MS_RK_DEVICE, 0, &plain),
                     MS_OK);
    ms_region_get(&rt, r)->amap = true;
    assert_true(ms_region_get(&rt, r)->nchunks > 1);
    ms_chunk_id id = MS_CHUNK_ID(r, 1);
    assert_int_equal(ms_chunk_mark_host(&rt, id, 0), MS_E_INVAL);
    assert_int_equal(ms_chunk_mark_host(&rt, MS_CHUNK_ID(plain, 0), 7), MS_E_INVAL);
    assert_int_equal(ms_chunk_mark_host(&rt, MS_CHUNK_ID(r + 5, 0), 7), MS_E_NOTFOUND);
    assert_int_equal(ms_chunk_get(&rt, id)->state, MS_CS_EMPTY);
    assert_int_equal(ms_chunk_mark_host(&rt, id, 7), MS_OK);
    assert_int_equal(ms_chunk_get(&rt, id)->state, MS_CS_HOST);
    assert_int_equal(ms_chunk_get(&rt, id)->host, 7);
    assert_int_equal(ms_chunk_get(&rt, MS_CHUNK_ID(r, 0))->state, MS_CS_EMPTY);
    assert_int_equal(rt.count[MS_CS_HOST], 1);
    CHECK(&rt);
    assert_int_equal(ms_chunk_mark_host(&rt, id, 8), MS_E_STATE);
    assert_int_equal(ms_chunk_get(&rt, id)->host, 7);
    /* It populates by copying in, like any HOST chunk. */
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_POP_START), MS_OK);
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

static void pins_block_eviction(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t r;
    assert_int_equal(ms_region_add(&rt, 1, 0, 2 * MS_MIB, MS_RK_DEVICE, 0, &r), MS_OK);
    ms_chunk_id id = MS_CHUNK_ID(r, 0);
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_MAP_FRESH), MS_OK);
    ms_chunk_get(&rt, id)->pins = 1;
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_EVICT_START), MS_E_BUSY);
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_DROP), MS_E_BUSY);
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_DISCARD), MS_E_BUSY);
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_TOUCH), MS_OK);
    CHECK(&rt);
    ms_chunk_get(&rt, id)->pins = 0;
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_EVICT_START), MS_OK);
    /* A pin on a non-resident chunk breaks I7. */
    assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_EVICT_DONE), MS_OK);
    ms_chunk_get(&rt, id)->pins = 1;
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 7);
    ms_chunk_get(&rt, id)->pins = 0;
    /* Corrupting the counters is caught too. */
    rt.resident_bytes += MS_GRAN;
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 5);
    rt.resident_bytes -= MS_GRAN;
    rt.count[MS_CS_HOST]++;
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 6);
    rt.count[MS_CS_HOST]--;
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

/* Whole-region runs (I11): a set naming every chunk of a region in order is recognized, and
 * checked, touched and pinned through the region's summaries exactly as chunk by chunk. */
static void whole_region_ops(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t a, b;
    assert_int_equal(ms_region_add(&rt, 1, 0, 8 * MS_GRAN, MS_RK_DEVICE, MS_GRAN, &a), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, 64 * MS_MIB, MS_GRAN, MS_RK_DEVICE, 0, &b), MS_OK);
    ms_chunk_id ids[10];
    for (uint32_t k = 0; k < 8; k++)
        ids[k] = MS_CHUNK_ID(a, k);
    ids[8] = MS_CHUNK_ID(b, 0);
    struct ms_region *ra = ms_region_get(&rt, a);
    assert_ptr_equal(ms_region_whole(&rt, ids, 9), ra);
    assert_ptr_equal(ms_region_whole(&rt, ids, 8), ra);
    assert_null(ms_region_whole(&rt, ids, 7));     /* too short */
    assert_null(ms_region_whole(&rt, ids + 1, 8)); /* starts past chunk 0 */
    assert_ptr_equal(ms_region_whole(&rt, ids + 8, 1), ms_region_get(&rt, b));
    ids[3] = MS_CHUNK_ID(a, 2); /* a repeat where chunk 3 belongs */
    assert_null(ms_region_whole(&rt, ids, 8));
    ids[3] = MS_CHUNK_ID(a, 3);
    /* Not all ready: no whole touch or pin, nothing changes. */
    assert_false(ms_region_all_ready(ra));
    assert_int_equal(ms_region_touch_all(&rt, ra), MS_E_STATE);
    assert_int_equal(ms_region_pin_all(ra), MS_E_STATE);
    assert_int_equal(ms_region_unpin_all(ra), MS_E_STATE);
    for (uint32_t k = 0; k < 8; k++)
        assert_int_equal(ms_chunk_apply(&rt, ids[k], MS_CE_MAP_FRESH), MS_OK);
    /* Chunk 5 goes out and back in: CLEAN, counted. */
    assert_int_equal(ms_chunk_apply(&rt, ids[5], MS_CE_EVICT_START), MS_OK);
    assert_false(ms_region_all_ready(ra));
    assert_int_equal(ms_chunk_apply(&rt, ids[5], MS_CE_EVICT_DONE), MS_OK);
    assert_int_equal(ms_chunk_apply(&rt, ids[5], MS_CE_POP_START), MS_OK);
    assert_int_equal(ms_chunk_apply(&rt, ids[5], MS_CE_POP_DONE), MS_OK);
    assert_int_equal(ra->nready, 8);
    assert_int_equal(ra->nclean, 1);
    CHECK(&rt);
    /* A whole touch makes the CLEAN chunk DIRTY and every chunk's last use the region's. */
    uint64_t before = rt.clock;
    assert_int_equal(ms_region_touch_all(&rt, ra), MS_OK);
    assert_int_equal(ra->nclean, 0);
    assert_int_equal(ra->chunks[5].state, MS_CS_DIRTY);
    assert_int_equal(rt.count[MS_CS_CLEAN], 0);
    for (uint32_t k = 0; k < 8; k++)
        assert_true(ms_chunk_last_use(ra, &ra->chunks[k]) > before);
    /* A later touch of one chunk is later than the region's. */
    assert_int_equal(ms_chunk_touch(&rt, ra, &ra->chunks[2]), MS_OK);
    assert_true(ms_chunk_last_use(ra, &ra->chunks[2]) > ms_chunk_last_use(ra, &ra->chunks[3]));
    CHECK(&rt);
    /* A whole pin blocks every chunk's eviction, like a pin on each, until it is dropped. */
    assert_int_equal(ms_region_pin_all(ra), MS_OK);
    for (uint32_t k = 0; k < 8; k++) {
        assert_int_equal(ms_chunk_pins(ra, &ra->chunks[k]), 1);
        assert_int_equal(ms_chunk_apply(&rt, ids[k], MS_CE_EVICT_START), MS_E_BUSY);
        assert_int_equal(ms_chunk_apply(&rt, ids[k], MS_CE_DROP), MS_E_BUSY);
        assert_int_equal(ms_chunk_apply(&rt, ids[k], MS_CE_DISCARD), MS_E_BUSY);
    }
    CHECK(&rt);
    /* Summaries that disagree with the chunks are caught (I11). */
    ra->nready--;
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 11);
    ra->nready++;
    ra->nclean++;
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 11);
    ra->nclean--;
    assert_int_equal(ms_region_unpin_all(ra), MS_OK);
    assert_int_equal(ms_chunk_apply(&rt, ids[0], MS_CE_EVICT_START), MS_OK);
    assert_int_equal(ms_chunk_apply(&rt, ids[0], MS_CE_EVICT_DONE), MS_OK);
    ra->pins_all = 1; /* a whole pin with a chunk off the device breaks I11 */
    assert_int_equal(ms_rtable_check(&rt, NULL, 0), 11);
    ra->pins_all = 0;
    assert_int_equal(ra->nready, 7);
    CHECK(&rt);
    ms_rtable_fini(&rt);
}

static void alloc_failures(void **unused)
{
    (void)unused;
    uint64_t base = ms_alloc_live();
    for (uint64_t n = 1;; n++) {
        struct ms_rtable rt;
        ms_rtable_init(&rt);
        int e = MS_OK;
        ms_alloc_fail_after(n);
        for (int i = 0; i < 20 && e == MS_OK; i++)
            e = ms_region_add(&rt, (uint32_t)(i % 3), (uint64_t)i << 32,
                              (uint64_t)(i + 1) * MS_GRAN, MS_RK_DEVICE, 0, NULL);
        ms_alloc_fail_after(0);
        CHECK(&rt);
        ms_rtable_fini(&rt);
        assert_int_equal(ms_alloc_live(), base);
        if (e == MS_OK)
            break;
        assert_int_equal(e, MS_E_NOMEM);
        assert_true(n < 1000);
    }
}

/* Random adds/removes/events against a shadow list of live regions. */
static void random_walk(void **unused)
{
    (void)unused;
    rng_state = seed_from_env() | 1;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    struct shadow {
        uint32_t id, task;
        uint64_t base, span;
        int live;
    } sh[64] = {{0}};
    int nsh = 0;
    for (int step = 0; step < 4000; step++) {
        uint64_t op = rnd() % 10;
        if (op < 3 && nsh < 64) {
            uint32_t task = (uint32_t)(rnd() % 3);
            uint64_t base = (rnd() % 64) * MS_GRAN * 4;
            uint64_t size = 1 + rnd() % (12 * MS_MIB);
            uint64_t span = MS_ROUND_UP(size, MS_GRAN);
            int overlaps = 0;
            for (int i = 0; i < nsh; i++)
                if (sh[i].live && sh[i].task == task && sh[i].base < base + span &&
                    base < sh[i].base + sh[i].span)
                    overlaps = 1;
            uint32_t id;
            int e =
                ms_region_add(&rt, task, base, size, MS_RK_DEVICE, (rnd() & 1) ? MS_GRAN : 0, &id);
            assert_int_equal(e, overlaps ? MS_E_OVERLAP : MS_OK);
            if (!e)
                sh[nsh++] = (struct shadow){id, task, base, span, 1};
        } else if (op < 4 && nsh > 0) {
            int i = (int)(rnd() % (uint64_t)nsh);
            if (!sh[i].live)
                continue;
            struct ms_region *r = ms_region_get(&rt, sh[i].id);
            assert_non_null(r);
            for (uint32_t k = 0; k < r->nchunks; k++) {
                ms_chunk_id id = MS_CHUNK_ID(sh[i].id, k);
                struct ms_chunk *c = &r->chunks[k];
                if (c->state == MS_CS_IN)
                    ms_chunk_apply(&rt, id, MS_CE_POP_DONE);
                if (c->state == MS_CS_OUT)
                    ms_chunk_apply(&rt, id, MS_CE_EVICT_DONE);
                c->pins = 0;
                assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_DISCARD), MS_OK);
            }
            assert_int_equal(ms_region_remove(&rt, sh[i].id), MS_OK);
            sh[i] = sh[--nsh];
        } else if (nsh > 0) {
            int i = (int)(rnd() % (uint64_t)nsh);
            struct ms_region *r = ms_region_get(&rt, sh[i].id);
            uint32_t k = (uint32_t)(rnd() % r->nchunks);
            int ev = (int)(rnd() % MS_CE_COUNT);
            int before = r->chunks[k].state;
            int e = ms_chunk_apply(&rt, MS_CHUNK_ID(sh[i].id, k), ev);
            int want = expect_next(before, ev);
            if (want < 0)
                assert_int_equal(e, MS_E_STATE);
            else
                assert_int_equal(r->chunks[k].state, want);
            /* Lookup of a random address inside agrees with the shadow. */
            uint64_t addr = sh[i].base + rnd() % sh[i].span;
            uint32_t reg;
            assert_int_equal(ms_rtable_lookup(&rt, sh[i].task, addr, &reg, NULL), MS_OK);
            assert_int_equal(reg, sh[i].id);
        }
        CHECK(&rt);
    }
    ms_rtable_fini(&rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_sizes),
        cmocka_unit_test(overlap_and_lookup),
        cmocka_unit_test(state_machine_exhaustive),
        cmocka_unit_test(mark_host),
        cmocka_unit_test(chunk_mark_host),
        cmocka_unit_test(pins_block_eviction),
        cmocka_unit_test(whole_region_ops),
        cmocka_unit_test(alloc_failures),
        cmocka_unit_test(random_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
