/*
 * test_exec_amap.c - the executor on always-mapped regions (region.amap), against the fake
 * seam's host chunks, with real bytes.
 *
 * The property under test is the correctness rule of docs/architecture.md: every chunk of an
 * always-mapped region can be reached at its address at every moment between seam calls,
 * resident or not, and reads there give the chunk's latest data. A "kernel" here is a write
 * through ms_gpu_fake_access at the chunk's address, whatever the chunk's state: a write to a
 * chunk off the device is a missed prediction, which lands in its host chunk and must survive
 * the next population. The failure sweep fails every seam call in turn and checks the same
 * after each try, plus: no host chunk leaked, none missing (I9).
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
#define NCH 4
#define CH (2 * MS_MIB)

struct world {
    struct ms_rtable rt;
    struct ms_gpu_fake *fake;
    uint32_t reg[NREG];
    uint32_t version[NREG][NCH]; /* 0: never written */
};

static uint64_t word(uint32_t r, uint32_t k, uint32_t v)
{
    return ((uint64_t)r << 48) ^ ((uint64_t)k << 32) ^ v ^ 0x9e3779b9u;
}

static uint8_t *at(struct world *w, uint32_t r, uint32_t k)
{
    const struct ms_region *g = ms_region_get(&w->rt, w->reg[r]);
    return ms_gpu_fake_access(w->fake, g->base + (uint64_t)k * CH, CH);
}

/* A kernel writes chunk (r,k) at its address, resident or not. */
static void write_chunk(struct world *w, uint32_t r, uint32_t k)
{
    uint8_t *p = at(w, r, k);
    assert_non_null(p); /* always mapped */
    ms_chunk_id id = MS_CHUNK_ID(w->reg[r], k);
    struct ms_chunk *c = ms_chunk_get(&w->rt, id);
    if (ms_chunk_state_ready((enum ms_chunk_state)c->state))
        assert_int_equal(ms_chunk_apply(&w->rt, id, MS_CE_TOUCH), MS_OK);
    uint64_t v = word(w->reg[r], k, ++w->version[r][k]);
    for (uint64_t i = 0; i < CH; i += 4096)
        memcpy(p + i, &v, 8);
}

static void check(struct world *w)
{
    char why[256];
    int bad = ms_rtable_check(&w->rt, why, sizeof(why));
    if (bad)
        fail_msg("invariant %d: %s", bad, why);
    uint64_t with_host = 0, resident = 0;
    for (uint32_t r = 0; r < NREG; r++)
        for (uint32_t k = 0; k < NCH; k++) {
            const struct ms_chunk *c = ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[r], k));
            assert_true(c->state != MS_CS_IN && c->state != MS_CS_OUT);
            with_host += c->host != 0;
            resident += ms_chunk_state_resident((enum ms_chunk_state)c->state);
            if (c->state == MS_CS_EMPTY)
                continue; /* never mapped: the edge maps regions before use */
            if (c->bare) {
                assert_null(at(w, r, k)); /* defer_host_map: mapped nowhere until map_bare */
                continue;
            }
            uint8_t *p = at(w, r, k);
            assert_non_null(p);
            if (w->version[r][k]) {
                uint64_t v = word(w->reg[r], k, w->version[r][k]);
                for (uint64_t i = 0; i < CH; i += 4096)
                    assert_memory_equal(p + i, &v, 8);
            }
        }
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), with_host);
    assert_int_equal(ms_gpu_fake_live_maps(w->fake), resident);
    assert_int_equal(ms_gpu_fake_used(w->fake), w->rt.resident_bytes);
    assert_int_equal(ms_gpu_fake_live_events(w->fake), 0);
}

/* Regions 0 and 1 start on the host (ms_exec_map_host); region 2 stays EMPTY (fresh). */
static struct world *world_new(uint64_t capacity)
{
    struct world *w = calloc(1, sizeof(*w));
    ms_rtable_init(&w->rt);
    w->fake = ms_gpu_fake_new(capacity);
    struct ms_exec_stats st;
    memset(&st, 0, sizeof(st));
    for (uint32_t r = 0; r < NREG; r++) {
        assert_int_equal(ms_region_add(&w->rt, 1, 0x100000000ull * (r + 1), NCH * CH, MS_RK_DEVICE,
                                       CH, &w->reg[r]),
                         MS_OK);
        ms_region_get(&w->rt, w->reg[r])->amap = true;
        if (r < 2)
            assert_int_equal(ms_exec_map_host(&w->rt, ms_gpu_fake_ops(w->fake), w->reg[r], &st),
                             MS_OK);
    }
    assert_int_equal(st.host_chunks, 2 * NCH);
    check(w);
    return w;
}

static void world_free(struct world *w)
{
    ms_rtable_fini(&w->rt);
    ms_gpu_fake_free(w->fake);
    free(w);
}

static void step(struct ms_plan *p, int op, struct world *w, uint32_t r, uint32_t k)
{
    assert_int_equal(ms_grow((void **)&p->steps, &p->cap, p->n + 1, sizeof(*p->steps)), MS_OK);
    p->steps[p->n++] = (struct ms_plan_step){(uint8_t)op, MS_CHUNK_ID(w->reg[r], k)};
}

static void whole(struct ms_plan *p, int op, struct world *w, uint32_t r)
{
    for (uint32_t k = 0; k < NCH; k++)
        step(p, op, w, r, k);
}

static bool defer; /* exec() with defer_host_map */

static int exec(struct world *w, const struct ms_plan *p, uint64_t budget, bool pipelined,
                bool hash, struct ms_exec_stats *st)
{
    struct ms_exec_opts o = {.pipelined = pipelined, .hash_clean = hash, .defer_host_map = defer};
    memset(st, 0, sizeof(*st));
    return ms_exec_plan(&w->rt, ms_gpu_fake_ops(w->fake), budget, p, &o, st);
}

/* Writes on the host side (misses) survive population; evictions map the host chunk back. */
static void misses_are_kept(void **unused)
{
    (void)unused;
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(4 * CH);
        for (uint32_t k = 0; k < NCH; k++)
            write_chunk(w, 0, k); /* off the device: lands in the host chunks */
        assert_true(ms_gpu_fake_host_hits(w->fake) >= NCH);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        whole(&p, MS_STEP_POPULATE, w, 0);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, true, &st), MS_OK);
        assert_int_equal(st.bytes_in, 4 * CH);
        check(w);
        write_chunk(w, 0, 1); /* on the device now */
        /* Swap region 0 for region 2 (fresh): 0's clean chunks drop, chunk 1 is copied. */
        p.n = 0;
        whole(&p, MS_STEP_EVICT, w, 0);
        whole(&p, MS_STEP_POPULATE, w, 2);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, true, &st), MS_OK);
        assert_int_equal(st.bytes_out, CH);
        assert_int_equal(st.bytes_dropped, 3 * CH);
        assert_int_equal(st.bytes_fresh, 4 * CH);
        assert_int_equal(st.host_chunks, 0); /* region 0's chunks had theirs */
        check(w);
        write_chunk(w, 0, 2); /* a miss again, after the eviction */
        for (uint32_t k = 0; k < NCH; k++)
            write_chunk(w, 2, k);
        /* Region 2 has no host chunks yet: evicting it makes them (lazily). */
        p.n = 0;
        whole(&p, MS_STEP_EVICT, w, 2);
        whole(&p, MS_STEP_POPULATE, w, 0);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, false, &st), MS_OK);
        assert_int_equal(st.host_chunks, NCH);
        assert_int_equal(st.bytes_out, 4 * CH);
        check(w);
        ms_plan_fini(&p);
        world_free(w);
    }
}

/* Every seam call fails in turn: after each try the world is consistent, always mapped, and
 * nothing written is lost. */
static void sweep_one(bool pipelined, bool hash, bool fail_wait)
{
    for (uint64_t n = 1;; n++) {
        struct world *w = world_new(6 * CH);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        whole(&p, MS_STEP_POPULATE, w, 0);
        step(&p, MS_STEP_POPULATE, w, 2, 0);
        assert_int_equal(exec(w, &p, 6 * CH, pipelined, hash, &st), MS_OK);
        for (uint32_t k = 0; k < NCH; k++)
            write_chunk(w, 0, k);
        write_chunk(w, 2, 0);
        write_chunk(w, 1, 3); /* a miss */
        p.n = 0;
        whole(&p, MS_STEP_EVICT, w, 0);
        step(&p, MS_STEP_POPULATE, w, 1, 3);
        step(&p, MS_STEP_POPULATE, w, 2, 1);
        step(&p, MS_STEP_EVICT, w, 2, 0);
        step(&p, MS_STEP_POPULATE, w, 0, 2);
        if (fail_wait)
            ms_gpu_fake_fail_wait_after(w->fake, n);
        else
            ms_gpu_fake_fail_after(w->fake, n);
        int e = exec(w, &p, 6 * CH, pipelined, hash, &st);
        ms_gpu_fake_fail_after(w->fake, 0);
        ms_gpu_fake_fail_wait_after(w->fake, 0);
        check(w);
        /* Deferred host maps: whatever the failure left bare maps now, with its bytes. */
        assert_int_equal(ms_exec_map_bare(&w->rt, ms_gpu_fake_ops(w->fake), 0, NULL), 0);
        check(w);
        ms_plan_fini(&p);
        world_free(w);
        if (e == MS_OK)
            break;
        if (e != MS_E_GPU)
            fail_msg("pipelined=%d hash=%d fail_wait=%d n=%llu: %s", pipelined, hash, fail_wait,
                     (unsigned long long)n, ms_strerror(e));
        assert_true(n < 500);
    }
}

static void failure_sweep(void **unused)
{
    (void)unused;
    for (int mask = 0; mask < 16; mask++) {
        defer = mask & 8;
        sweep_one(mask & 1, mask & 2, mask & 4);
    }
    defer = false;
}

/* defer_host_map: evicted chunks are left bare (mapped nowhere, their bytes in their host
 * chunks); a bare chunk populates without a host unmap; map_bare maps the rest, a given number
 * at a time; a region freed or detached with bare chunks leaks nothing. */
static void deferred_host_maps(void **unused)
{
    (void)unused;
    for (int pipe = 0; pipe < 2; pipe++) {
        struct world *w = world_new(4 * CH);
        const struct ms_gpu_ops *ops = ms_gpu_fake_ops(w->fake);
        struct ms_plan p;
        ms_plan_init(&p);
        struct ms_exec_stats st;
        whole(&p, MS_STEP_POPULATE, w, 0);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, true, &st), MS_OK);
        for (uint32_t k = 0; k < NCH; k++)
            write_chunk(w, 0, k);
        defer = true;
        p.n = 0;
        whole(&p, MS_STEP_EVICT, w, 0);
        whole(&p, MS_STEP_POPULATE, w, 2);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, true, &st), MS_OK);
        assert_int_equal(st.bare, NCH);
        assert_int_equal(w->rt.bare, NCH);
        check(w); /* region 0 mapped nowhere, its bytes in its host chunks */
        /* Chunk 1 back while bare (region 2's chunk 0 makes room, bare too). */
        p.n = 0;
        step(&p, MS_STEP_EVICT, w, 2, 0);
        step(&p, MS_STEP_POPULATE, w, 0, 1);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, false, &st), MS_OK);
        assert_int_equal(st.bytes_in, CH);
        assert_int_equal(w->rt.bare, NCH); /* 3 of region 0, 1 of region 2 */
        check(w);
        defer = false;
        /* One at a time (each call goes on where the last stopped, across regions), then the
         * rest at once. */
        assert_int_equal(ms_exec_map_bare(&w->rt, ops, 1, &st), NCH - 1);
        check(w);
        assert_int_equal(ms_exec_map_bare(&w->rt, ops, 1, &st), NCH - 2);
        check(w);
        assert_int_equal(ms_exec_map_bare(&w->rt, ops, 0, &st), 0);
        assert_int_equal(w->rt.bare, 0);
        check(w);             /* everything reachable again with its latest bytes */
        write_chunk(w, 0, 2); /* a miss on the host chunk now mapped */
        check(w);
        /* Bare again, then freed (region 0) and detached (region 2): nothing leaks. */
        defer = true;
        p.n = 0;
        step(&p, MS_STEP_EVICT, w, 0, 1);
        whole(&p, MS_STEP_EVICT, w, 2);
        assert_int_equal(exec(w, &p, 4 * CH, pipe, false, &st), MS_OK);
        defer = false;
        check(w);
        assert_int_equal(ms_exec_free_region(&w->rt, ops, w->reg[0]), MS_OK);
        assert_int_equal(w->rt.bare, NCH - 1);
        assert_int_equal(ms_gpu_fake_host_chunks(w->fake), 2 * NCH);
        uint64_t tok[NCH];
        assert_int_equal(ms_exec_detach_host(&w->rt, ops, w->reg[2], tok), MS_OK);
        assert_int_equal(w->rt.bare, 0);
        char why[160];
        assert_int_equal(ms_rtable_check(&w->rt, why, sizeof(why)), 0);
        ms_plan_fini(&p);
        world_free(w);
    }
}

/* Freeing releases device memory and host chunks alike. */
static void free_releases_host_chunks(void **unused)
{
    (void)unused;
    struct world *w = world_new(8 * CH);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_exec_stats st;
    step(&p, MS_STEP_POPULATE, w, 0, 0);
    step(&p, MS_STEP_POPULATE, w, 0, 1);
    assert_int_equal(exec(w, &p, 8 * CH, true, false, &st), MS_OK);
    ms_plan_fini(&p);
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), 2 * NCH);
    assert_int_equal(ms_exec_free_region(&w->rt, ms_gpu_fake_ops(w->fake), w->reg[0]), MS_OK);
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), NCH);
    assert_int_equal(ms_gpu_fake_live_maps(w->fake), 0);
    assert_null(ms_gpu_fake_access(w->fake, 0x100000000ull, 8)); /* nothing left there */
    assert_int_equal(ms_exec_free_region(&w->rt, ms_gpu_fake_ops(w->fake), w->reg[1]), MS_OK);
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), 0);
    world_free(w);
}

/* map_host refuses what it cannot do, and is all-or-nothing when the seam fails. */
static void map_host_refusals(void **unused)
{
    (void)unused;
    struct world *w = world_new(8 * CH);
    struct ms_exec_stats st;
    memset(&st, 0, sizeof(st));
    const struct ms_gpu_ops *ops = ms_gpu_fake_ops(w->fake);
    assert_int_equal(ms_exec_map_host(&w->rt, ops, w->reg[0], &st), MS_E_STATE); /* not EMPTY */
    assert_int_equal(ms_exec_map_host(&w->rt, ops, 999, &st), MS_E_NOTFOUND);
    ms_gpu_fake_fail_after(w->fake, 2); /* host_new passes, host_map fails */
    assert_int_equal(ms_exec_map_host(&w->rt, ops, w->reg[2], &st), MS_E_GPU);
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), 2 * NCH); /* none kept */
    check(w);
    ms_region_get(&w->rt, w->reg[2])->amap = false;
    assert_int_equal(ms_exec_map_host(&w->rt, ops, w->reg[2], &st), MS_E_INVAL);
    world_free(w);
}

/* A region's host chunks outlive it (detach) and carry its bytes into a new region at another
 * address (attach), as an application VMM handle unmapped and mapped again elsewhere. */
static void detach_attach_carries_data(void **unused)
{
    (void)unused;
    struct world *w = world_new(8 * CH);
    const struct ms_gpu_ops *ops = ms_gpu_fake_ops(w->fake);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_exec_stats st;
    step(&p, MS_STEP_POPULATE, w, 0, 1);
    assert_int_equal(exec(w, &p, 8 * CH, true, false, &st), MS_OK);
    for (uint32_t k = 0; k < NCH; k++)
        write_chunk(w, 0, k); /* chunk 1 on the device, the others in their host chunks */
    uint64_t tok[NCH];
    /* A resident chunk: refused, nothing changes. */
    assert_int_equal(ms_exec_detach_host(&w->rt, ops, w->reg[0], tok), MS_E_BUSY);
    check(w);
    p.n = 0;
    step(&p, MS_STEP_EVICT, w, 0, 1);
    assert_int_equal(exec(w, &p, 8 * CH, true, false, &st), MS_OK);
    check(w);
    /* The seam fails at the second host unmap: the first is mapped back. */
    ms_gpu_fake_fail_after(w->fake, 2);
    assert_int_equal(ms_exec_detach_host(&w->rt, ops, w->reg[0], tok), MS_E_GPU);
    ms_gpu_fake_fail_after(w->fake, 0);
    check(w);
    assert_int_equal(ms_exec_detach_host(&w->rt, ops, w->reg[0], tok), MS_OK);
    for (uint32_t k = 0; k < NCH; k++) {
        assert_true(tok[k] != 0);
        assert_int_equal(ms_chunk_get(&w->rt, MS_CHUNK_ID(w->reg[0], k))->state, MS_CS_EMPTY);
    }
    assert_null(ms_gpu_fake_access(w->fake, 0x100000000ull, 8)); /* mapped nowhere now */
    assert_int_equal(ms_exec_free_region(&w->rt, ops, w->reg[0]), MS_OK);
    assert_int_equal(ms_gpu_fake_host_chunks(w->fake), 2 * NCH); /* the tokens kept theirs */
    /* Mapped again elsewhere: the chunks start HOST with their bytes. */
    uint32_t nr;
    assert_int_equal(ms_region_add(&w->rt, 1, 0x900000000ull, NCH * CH, MS_RK_VMM, CH, &nr), MS_OK);
    ms_region_get(&w->rt, nr)->amap = true;
    ms_chunk_apply(&w->rt, MS_CHUNK_ID(nr, 0), MS_CE_MAP_FRESH); /* not EMPTY: refused */
    assert_int_equal(ms_exec_attach_host(&w->rt, ops, nr, tok), MS_E_STATE);
    ms_chunk_apply(&w->rt, MS_CHUNK_ID(nr, 0), MS_CE_DISCARD);
    ms_gpu_fake_fail_after(w->fake, 3); /* the third host map fails: none stays */
    assert_int_equal(ms_exec_attach_host(&w->rt, ops, nr, tok), MS_E_GPU);
    ms_gpu_fake_fail_after(w->fake, 0);
    assert_null(ms_gpu_fake_access(w->fake, 0x900000000ull, 8));
    assert_int_equal(ms_exec_attach_host(&w->rt, ops, nr, tok), MS_OK);
    w->reg[0] = nr;
    check(w); /* the bytes written before are at the new address */
    /* And they populate from there. */
    p.n = 0;
    whole(&p, MS_STEP_POPULATE, w, 0);
    assert_int_equal(exec(w, &p, 8 * CH, true, false, &st), MS_OK);
    assert_int_equal(st.bytes_in, NCH * CH);
    check(w);
    ms_plan_fini(&p);
    world_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(misses_are_kept),    cmocka_unit_test(failure_sweep),
        cmocka_unit_test(deferred_host_maps), cmocka_unit_test(free_releases_host_chunks),
        cmocka_unit_test(map_host_refusals),  cmocka_unit_test(detach_attach_carries_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
