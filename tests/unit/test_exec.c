/*
 * test_exec.c - the executor against the fake GPU seam, with real bytes.
 *
 * Each chunk's data is a pattern derived from (chunk id, version). Tests write patterns into
 * device memory through the fake, run plans, and check that wherever a chunk's data lives
 * (device while resident, host backing otherwise) it is the latest version. The failure sweep
 * makes the Nth seam call fail for every N until the plan succeeds, and checks after each try:
 * invariants hold, no mapping or event leaked, no data lost.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/exec.h"
#include "gpu/fake/gpu_fake.h"

#define NREG 3
#define CHUNKS_PER_REG 4
#define CH (2 * MS_MIB)

struct world {
    struct ms_rtable rt;
    struct ms_gpu_fake *fake;
    uint32_t reg[NREG];
    uint32_t version[NREG][CHUNKS_PER_REG]; /* 0: never written */
};

static uint64_t fill_word(uint32_t reg, uint32_t k, uint32_t v)
{
    return ((uint64_t)reg << 48) ^ ((uint64_t)k << 32) ^ v ^ 0x5bd1e995u;
}

static void write_pattern(uint8_t *p, uint32_t reg, uint32_t k, uint32_t v)
{
    uint64_t w = fill_word(reg, k, v);
    for (uint64_t i = 0; i < CH; i += 4096)
        memcpy(p + i, &w, 8);
}

static int has_pattern(const uint8_t *p, uint32_t reg, uint32_t k, uint32_t v)
{
    uint64_t w = fill_word(reg, k, v);
    for (uint64_t i = 0; i < CH; i += 4096)
        if (memcmp(p + i, &w, 8) != 0)
            return 0;
    return 1;
}

static struct world *world_new(uint64_t capacity)
{
    struct world *w = calloc(1, sizeof(*w));
    ms_rtable_init(&w->rt);
    w->fake = ms_gpu_fake_new(capacity);
    for (uint32_t r = 0; r < NREG; r++) {
        assert_int_equal(ms_region_add(&w->rt, 1, 0x100000000ull * (r + 1), CHUNKS_PER_REG * CH,
                                       MS_RK_DEVICE, CH, &w->reg[r]),
                         MS_OK);
        ms_region_get(&w->rt, w->reg[r])->host = calloc(CHUNKS_PER_REG, CH);
    }
    return w;
}

static void world_free(struct world *w)
{
    for (uint32_t r = 0; r < NREG; r++)
        free(ms_region_get(&w->rt, w->reg[r])->host);
    ms_rtable_fini(&w->rt);
    ms_gpu_fake_free(w->fake);
    free(w);
}

static uint8_t *dev(struct world *w, uint32_t r, uint32_t k)
{
    struct ms_region *reg = ms_region_get(&w->rt, w->reg[r]);
    return ms_gpu_fake_access(w->fake, reg->base + (uint64_t)k * CH, CH);
}

static uint8_t *host(struct world *w, uint32_t r, uint32_t k)
{
    return (uint8_t *)ms_region_get(&w->rt, w->reg[r])->host + (uint64_t)k * CH;
}

/* A kernel "writes" chunk (r,k): must be resident (the oracle), bumps its version. */
static void gpu_write(struct world *w, uint32_t r, uint32_t k)
{
    uint8_t *p = dev(w, r, k);
    assert_non_null(p);
    ms_chunk_id id = MS_CHUNK_ID(w->reg[r], k);
    assert_true(ms_chunk_state_ready(ms_chunk_get(&w->rt, id)->state));
    assert_int_equal(ms_chunk_apply(&w->rt, id, MS_CE_TOUCH), MS_OK);
    write_pattern(p, w->reg[r], k, ++w->version[r][k]);
}

/* Everything consistent: invariants, no leaks, and every written chunk's latest data present. */
static void check_world(struct world *w)
{
    char why[256];
    int bad = ms_rtable_check(&w->rt, why, sizeof(why));
    if (bad)
        fail_msg("invariant %d: %s", bad, why);
    uint64_t resident_chunks = 0;
    for (uint32_t r = 0; r < NREG; r++) {
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++) {
            struct ms_chunk *c = ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[r], k));
            assert_true(c->state != MS_CS_IN && c->state != MS_CS_OUT);
            if (ms_chunk_state_resident(c->state)) {
                resident_chunks++;
                assert_non_null(dev(w, r, k));
                if (w->version[r][k])
                    assert_true(has_pattern(dev(w, r, k), w->reg[r], k, w->version[r][k]));
            } else {
                assert_null(dev(w, r, k));
                if (w->version[r][k]) {
                    assert_int_equal(c->state, MS_CS_HOST);
                    assert_true(has_pattern(host(w, r, k), w->reg[r], k, w->version[r][k]));
                }
            }
        }
    }
    assert_int_equal(ms_gpu_fake_live_maps(w->fake), resident_chunks);
    assert_int_equal(ms_gpu_fake_used(w->fake), w->rt.resident_bytes);
    assert_int_equal(ms_gpu_fake_live_events(w->fake), 0);
}

static void add_step(struct ms_plan *p, int op, struct world *w, uint32_t r, uint32_t k)
{
    assert_int_equal(ms_grow((void **)&p->steps, &p->cap, p->n + 1, sizeof(*p->steps)), MS_OK);
    p->steps[p->n++] = (struct ms_plan_step){(uint8_t)op, MS_CHUNK_ID(w->reg[r], k)};
}

/* Populate all of region r (fresh map or copy in). */
static void plan_region(struct ms_plan *p, int op, struct world *w, uint32_t r)
{
    for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
        add_step(p, op, w, r, k);
}

static void run(struct world *w, const struct ms_plan *p, uint64_t budget, bool pipelined,
                bool hash_clean, struct ms_exec_stats *st)
{
    struct ms_exec_opts o = {.pipelined = pipelined, .hash_clean = hash_clean};
    memset(st, 0, sizeof(*st));
    int e = ms_exec_plan(&w->rt, ms_gpu_fake_ops(w->fake), budget, p, &o, st);
    assert_int_equal(e, MS_OK);
    check_world(w);
}

static void round_trip(void **unused)
{
    (void)unused;
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(8 * CH);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        run(w, &p, 8 * CH, pipe, false, &st);
        assert_int_equal(st.bytes_fresh, 4 * CH); /* never written: mapped, not copied */
        assert_int_equal(st.bytes_in, 0);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            gpu_write(w, 0, k);

        /* Swap region 0 out and region 1 in, then back. */
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 0);
        plan_region(&p, MS_STEP_POPULATE, w, 1);
        run(w, &p, 4 * CH, pipe, false, &st);
        assert_int_equal(st.bytes_out, 4 * CH);
        assert_int_equal(st.copies, 4);
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 1);
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        run(w, &p, 4 * CH, pipe, false, &st);
        assert_int_equal(st.bytes_in, 4 * CH);
        /* Region 1 was never written by a kernel but was mapped fresh: DIRTY, so copied out. */
        assert_int_equal(st.bytes_out, 4 * CH);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            assert_int_equal(ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], k))->state, MS_CS_CLEAN);

        /* Clean chunks are dropped without a copy. */
        uint64_t copies = ms_gpu_fake_calls(w->fake, MS_FAKE_COPY);
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 0);
        run(w, &p, 4 * CH, pipe, false, &st);
        assert_int_equal(ms_gpu_fake_calls(w->fake, MS_FAKE_COPY), copies);
        assert_int_equal(st.bytes_dropped, 4 * CH);
        ms_plan_fini(&p);
        world_free(w);
    }
}

/* A backend that moves data to evict it (unified memory) gets a copy for every eviction, even
 * of chunks that are clean or that the hash finds unchanged. */
static void copy_to_evict_never_drops(void **unused)
{
    (void)unused;
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(8 * CH);
        struct ms_gpu_ops ops = *ms_gpu_fake_ops(w->fake);
        ops.copy_to_evict = true;
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_opts o = {.pipelined = pipe, .hash_clean = true};
        struct ms_exec_stats st;
        memset(&st, 0, sizeof(st));
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        assert_int_equal(ms_exec_plan(&w->rt, &ops, 8 * CH, &p, &o, &st), MS_OK);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            gpu_write(w, 0, k);
        p.n = 0; /* out (dirty), then back in: CLEAN */
        plan_region(&p, MS_STEP_EVICT, w, 0);
        assert_int_equal(ms_exec_plan(&w->rt, &ops, 8 * CH, &p, &o, &st), MS_OK);
        p.n = 0;
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        assert_int_equal(ms_exec_plan(&w->rt, &ops, 8 * CH, &p, &o, &st), MS_OK);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            assert_int_equal(ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], k))->state, MS_CS_CLEAN);
        memset(&st, 0, sizeof(st));
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 0);
        assert_int_equal(ms_exec_plan(&w->rt, &ops, 8 * CH, &p, &o, &st), MS_OK);
        assert_int_equal(st.bytes_dropped, 0);
        assert_int_equal(st.bytes_out, 4 * CH);
        check_world(w);
        ms_plan_fini(&p);
        world_free(w);
    }
}

/* A plan that evicts a chunk and later populates it again leaves it resident, whether the
 * eviction was a (deferred) drop or a copy. */
static void evict_then_repopulate(void **unused)
{
    (void)unused;
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(8 * CH);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        run(w, &p, 8 * CH, pipe, false, &st);
        gpu_write(w, 0, 1); /* chunk 1 dirty, chunk 0 fresh-dirty */
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 0);
        run(w, &p, 8 * CH, pipe, false, &st);
        p.n = 0;
        plan_region(&p, MS_STEP_POPULATE, w, 0); /* all CLEAN now */
        run(w, &p, 8 * CH, pipe, false, &st);
        gpu_write(w, 0, 2);
        p.n = 0;
        add_step(&p, MS_STEP_EVICT, w, 0, 0); /* clean: a drop */
        add_step(&p, MS_STEP_EVICT, w, 0, 2); /* dirty: a copy */
        add_step(&p, MS_STEP_POPULATE, w, 0, 0);
        add_step(&p, MS_STEP_POPULATE, w, 0, 2);
        run(w, &p, 8 * CH, pipe, false, &st);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            assert_true(
                ms_chunk_state_resident(ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], k))->state));
        ms_plan_fini(&p);
        world_free(w);
    }
}

static void hash_detects_unchanged(void **unused)
{
    (void)unused;
    struct world *w = world_new(8 * CH);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_exec_stats st;
    plan_region(&p, MS_STEP_POPULATE, w, 0);
    run(w, &p, 8 * CH, true, true, &st);
    for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
        gpu_write(w, 0, k);
    p.n = 0;
    plan_region(&p, MS_STEP_EVICT, w, 0);
    run(w, &p, 8 * CH, true, true, &st);
    p.n = 0;
    plan_region(&p, MS_STEP_POPULATE, w, 0);
    run(w, &p, 8 * CH, true, true, &st);
    assert_int_equal(st.hashes, 4); /* hashed at population */
    /* Chunk 0 and 1 are touched (a kernel that only reads); chunk 1 is really changed. */
    assert_int_equal(ms_chunk_apply(&w->rt, MS_CHUNK_ID(w->reg[0], 0), MS_CE_TOUCH), MS_OK);
    gpu_write(w, 0, 1);
    p.n = 0;
    plan_region(&p, MS_STEP_EVICT, w, 0);
    run(w, &p, 8 * CH, true, true, &st);
    assert_int_equal(st.bytes_out, CH);         /* only the changed one is copied */
    assert_int_equal(st.bytes_dropped, 3 * CH); /* two CLEAN, one DIRTY-but-unchanged */
    ms_plan_fini(&p);
    world_free(w);
}

static void budget_is_respected(void **unused)
{
    (void)unused;
    /* The fake's capacity equals the budget: mapping beyond it would fail the plan. */
    struct world *w = world_new(5 * CH);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_exec_stats st;
    plan_region(&p, MS_STEP_POPULATE, w, 0);
    add_step(&p, MS_STEP_POPULATE, w, 1, 0);
    run(w, &p, 5 * CH, true, false, &st);
    for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
        gpu_write(w, 0, k);
    /* Interleaved: evictions stay in flight until a population needs the room. */
    p.n = 0;
    for (uint32_t k = 0; k < CHUNKS_PER_REG; k++) {
        add_step(&p, MS_STEP_EVICT, w, 0, k);
        add_step(&p, MS_STEP_POPULATE, w, 2, k);
    }
    run(w, &p, 5 * CH, true, false, &st);
    /* A population that cannot fit fails cleanly. */
    p.n = 0;
    add_step(&p, MS_STEP_POPULATE, w, 0, 0);
    add_step(&p, MS_STEP_POPULATE, w, 0, 1);
    struct ms_exec_opts o = {.pipelined = true};
    assert_int_equal(ms_exec_plan(&w->rt, ms_gpu_fake_ops(w->fake), 5 * CH, &p, &o, &st),
                     MS_E_NOSPACE);
    check_world(w);
    ms_plan_fini(&p);
    world_free(w);
}

/* Build the same starting world, then a mixed plan; fail the nth seam call. */
static void failure_sweep_one(bool pipelined, bool hash, bool fail_wait)
{
    for (uint64_t n = 1;; n++) {
        struct world *w = world_new(6 * CH);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        plan_region(&p, MS_STEP_POPULATE, w, 0);
        add_step(&p, MS_STEP_POPULATE, w, 1, 0);
        run(w, &p, 6 * CH, pipelined, hash, &st);
        for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
            gpu_write(w, 0, k);
        gpu_write(w, 1, 0);
        /* Evict region 0 and bring it back partly, with region 2 fresh in between. */
        p.n = 0;
        plan_region(&p, MS_STEP_EVICT, w, 0);
        add_step(&p, MS_STEP_POPULATE, w, 2, 0);
        add_step(&p, MS_STEP_POPULATE, w, 2, 1);
        add_step(&p, MS_STEP_EVICT, w, 1, 0);
        add_step(&p, MS_STEP_POPULATE, w, 0, 2);
        add_step(&p, MS_STEP_POPULATE, w, 0, 3);

        uint64_t before = ms_gpu_fake_total_calls(w->fake);
        if (fail_wait)
            ms_gpu_fake_fail_wait_after(w->fake, n);
        else
            ms_gpu_fake_fail_after(w->fake, n);
        struct ms_exec_opts o = {.pipelined = pipelined, .hash_clean = hash};
        memset(&st, 0, sizeof(st));
        int e = ms_exec_plan(&w->rt, ms_gpu_fake_ops(w->fake), 6 * CH, &p, &o, &st);
        ms_gpu_fake_fail_after(w->fake, 0);
        ms_gpu_fake_fail_wait_after(w->fake, 0);
        check_world(w); /* consistent, nothing leaked, no data lost, success or not */
        uint64_t used = ms_gpu_fake_total_calls(w->fake) - before;
        ms_plan_fini(&p);
        world_free(w);
        if (e == MS_OK) {
            assert_true(n > 1 || used == 0);
            break;
        }
        if (e != MS_E_GPU)
            fail_msg("pipelined=%d hash=%d fail_wait=%d n=%llu: %s", pipelined, hash, fail_wait,
                     (unsigned long long)n, ms_strerror(e));
        assert_true(n < 500);
    }
}

static void failure_sweep(void **unused)
{
    (void)unused;
    for (int mask = 0; mask < 8; mask++)
        failure_sweep_one(mask & 1, mask & 2, mask & 4);
}

static void free_region(void **unused)
{
    (void)unused;
    struct world *w = world_new(8 * CH);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_exec_stats st;
    plan_region(&p, MS_STEP_POPULATE, w, 0);
    run(w, &p, 8 * CH, true, false, &st);
    ms_plan_fini(&p);
    ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], 1))->pins = 1;
    assert_int_equal(ms_exec_free_region(&w->rt, ms_gpu_fake_ops(w->fake), w->reg[0]), MS_E_BUSY);
    check_world(w);
    ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], 1))->pins = 0;
    void *h = ms_region_get(&w->rt, w->reg[0])->host;
    assert_int_equal(ms_exec_free_region(&w->rt, ms_gpu_fake_ops(w->fake), w->reg[0]), MS_OK);
    free(h);
    assert_null(ms_region_get(&w->rt, w->reg[0]));
    assert_int_equal(ms_gpu_fake_live_maps(w->fake), 0);
    assert_int_equal(w->rt.resident_bytes, 0);
    for (uint32_t r = 1; r < NREG; r++)
        free(ms_region_get(&w->rt, w->reg[r])->host);
    ms_rtable_fini(&w->rt);
    ms_gpu_fake_free(w->fake);
    free(w);
}

/* Each phase of the stats is the time spent in its seam calls: the fake's clock advances 1 us
 * per call, so each phase is 1 us times its calls, and together they are the whole elapsed
 * time (the fake's release_event costs nothing). Rounds: map fresh, evict (copies), populate
 * (copies back and hashes), evict half changed (hashes, drops two, copies two). */
static void phases_add_up(void **unused)
{
    (void)unused;
    static const int op[4] = {MS_STEP_POPULATE, MS_STEP_EVICT, MS_STEP_POPULATE, MS_STEP_EVICT};
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(8 * CH);
        struct ms_plan p;
        ms_plan_init(&p);
        for (int round = 0; round < 4; round++) {
            uint64_t before[MS_FAKE_OPS];
            for (int k = 0; k < MS_FAKE_OPS; k++)
                before[k] = ms_gpu_fake_calls(w->fake, (enum ms_fake_op)k);
            struct ms_exec_stats st;
            p.n = 0;
            plan_region(&p, op[round], w, 0);
            run(w, &p, 8 * CH, pipe, true, &st);
            uint64_t d[MS_FAKE_OPS];
            for (int k = 0; k < MS_FAKE_OPS; k++)
                d[k] = 1000 * (ms_gpu_fake_calls(w->fake, (enum ms_fake_op)k) - before[k]);
            assert_int_equal(st.map_ns, d[MS_FAKE_MAP]);
            assert_int_equal(st.unmap_ns, d[MS_FAKE_UNMAP]);
            assert_int_equal(st.wait_ns, d[MS_FAKE_WAIT]);
            assert_int_equal(st.hash_ns, d[MS_FAKE_HASH]);
            assert_int_equal(st.issue_ns, d[MS_FAKE_COPY] + d[MS_FAKE_RECORD]);
            assert_int_equal(st.elapsed_ns,
                             st.map_ns + st.unmap_ns + st.wait_ns + st.hash_ns + st.issue_ns);
            if (round == 0) {
                assert_true(st.map_ns > 0 && st.issue_ns == 0 && st.wait_ns == 0);
                for (uint32_t k = 0; k < CHUNKS_PER_REG; k++)
                    gpu_write(w, 0, k);
            } else if (round == 2) {
                assert_true(st.map_ns > 0 && st.issue_ns > 0 && st.wait_ns > 0 && st.hash_ns > 0);
                gpu_write(w, 0, 0);
                gpu_write(w, 0, 3);
            } else if (round == 3) {
                assert_int_equal(st.bytes_dropped, 2 * CH);
                assert_int_equal(st.bytes_out, 2 * CH);
                assert_true(st.hash_ns > 0 && st.issue_ns > 0 && st.wait_ns > 0 &&
                            st.unmap_ns > 0 && st.map_ns == 0);
            }
        }
        ms_plan_fini(&p);
        world_free(w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(copy_to_evict_never_drops),
        cmocka_unit_test(phases_add_up),
        cmocka_unit_test(evict_then_repopulate),
        cmocka_unit_test(hash_detects_unchanged),
        cmocka_unit_test(budget_is_respected),
        cmocka_unit_test(failure_sweep),
        cmocka_unit_test(free_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
