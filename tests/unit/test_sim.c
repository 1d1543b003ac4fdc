/*
 * test_sim.c - the simulator: the simulated GPU seam (gpu/sim), workloads and traces (sim/),
 * and the replay under every policy.
 *
 * Three layers:
 *   - the seam's timing against the cost model, computed independently here: a copy of N bytes
 *     takes copy_call + N / bw; two directions at once finish sooner than one after the other
 *     but no sooner than the duplex limit allows; map/unmap/hash charge the clock; content
 *     versions change hashes; capacity and stale handles are refused;
 *   - replays of fixed cases: deterministic (same inputs, same numbers), ideal moves nothing and
 *     is 100 %, a trace round trip replays exactly like the built-in it came from, impossible
 *     budgets and malformed traces fail with a reason;
 *   - seeded random workloads (MS_SEED): every policy replays in check mode (the region table's
 *     invariants and the budget after every command and every plan, the planner's own
 *     verification, and zero oracle misses beyond counted launch faults); on uniform chunks OPT
 *     moves no more bytes in than LRU or whole-process swapping over the same slices.
 */
#include "gpu/sim/gpu_sim.h"
#include "sim/replay.h"
#include "sim/svg.h"
#include "sim/sweep.h"
#include "sim/workload.h"
#include "tests/support/ms_testutil.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/template.h"

static uint64_t g_seed;

/* ---- the seam ------------------------------------------------------------------------------ */

static struct ms_gpu_chunk chunk_at(uint64_t va, uint64_t bytes)
{
    struct ms_gpu_chunk c = {.va = va, .bytes = bytes, .host = NULL, .phys = 0};
    return c;
}

static uint64_t wait_for(struct ms_gpu_ops *g, enum ms_stream s)
{
    uint64_t ev = 0;
    assert_int_equal(g->record(g->impl, s, &ev), MS_OK);
    assert_true(ev != 0);
    assert_int_equal(g->wait(g->impl, ev), MS_OK);
    g->release_event(g->impl, ev);
    return g->now_ns(g->impl);
}

static void test_seam_one_copy(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    for (int dir = 0; dir < 2; dir++) {
        struct ms_gpu_sim *s;
        struct ms_gpu_ops g;
        assert_int_equal(ms_gpu_sim_create(c, UINT64_MAX, &s), MS_OK);
        ms_gpu_sim_ops(s, &g);
        uint64_t n = 1024 * MS_MIB;
        struct ms_gpu_chunk ch = chunk_at(1ull << 40, n);
        assert_int_equal(g.copy(g.impl, (enum ms_stream)dir, &ch, 1), MS_OK);
        uint64_t t = wait_for(&g, (enum ms_stream)dir);
        double bw = dir == MS_STREAM_IN ? c->h2d_gbps : c->d2h_gbps;
        double want = c->copy_call_us * 1e3 + (double)n / bw;
        assert_true(fabs((double)t - want) <= 2.0);
        struct ms_gpu_sim_stats st;
        ms_gpu_sim_stats(s, &st);
        assert_int_equal(dir == MS_STREAM_IN ? st.bytes_h2d : st.bytes_d2h, n);
        assert_int_equal(st.copies, 1);
        ms_gpu_sim_destroy(s);
    }
}

static void test_seam_duplex(void **state)
{
    (void)state;
    const struct ms_cost *profiles[] = {&ms_cost_h200, &ms_cost_rtx5080};
    for (size_t p = 0; p < MS_ARRAY_LEN(profiles); p++) {
        const struct ms_cost *c = profiles[p];
        struct ms_gpu_sim *s;
        struct ms_gpu_ops g;
        assert_int_equal(ms_gpu_sim_create(c, UINT64_MAX, &s), MS_OK);
        ms_gpu_sim_ops(s, &g);
        uint64_t n = 2048 * MS_MIB;
        struct ms_gpu_chunk a = chunk_at(1ull << 40, n), b = chunk_at(1ull << 41, n);
        assert_int_equal(g.copy(g.impl, MS_STREAM_OUT, &a, 1), MS_OK);
        assert_int_equal(g.copy(g.impl, MS_STREAM_IN, &b, 1), MS_OK);
        uint64_t t_out = wait_for(&g, MS_STREAM_OUT);
        uint64_t t = wait_for(&g, MS_STREAM_IN);
        if (t_out > t)
            t = t_out;
        double serial =
            2 * c->copy_call_us * 1e3 + (double)n / c->h2d_gbps + (double)n / c->d2h_gbps;
        double floor_ns = 2.0 * (double)n / c->duplex_gbps;
        double one_way = (double)n / (c->h2d_gbps > c->d2h_gbps ? c->h2d_gbps : c->d2h_gbps);
        assert_true((double)t < serial);
        assert_true((double)t + 2 >= floor_ns);
        assert_true((double)t + 2 >= one_way);
        struct ms_gpu_sim_stats st;
        ms_gpu_sim_stats(s, &st);
        assert_true(st.overlap_ns > 0);
        ms_gpu_sim_destroy(s);
    }
}

static void test_seam_late_copy_slows_early_one(void **state)
{
    (void)state;
    /* OUT alone would take n/d2h; an IN copy queued halfway shares the link for the rest */
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_gpu_sim *s;
    struct ms_gpu_ops g;
    assert_int_equal(ms_gpu_sim_create(c, UINT64_MAX, &s), MS_OK);
    ms_gpu_sim_ops(s, &g);
    uint64_t n = 1024 * MS_MIB;
    struct ms_gpu_chunk a = chunk_at(1ull << 40, n), b = chunk_at(1ull << 41, 4 * n);
    assert_int_equal(g.copy(g.impl, MS_STREAM_OUT, &a, 1), MS_OK);
    double call = c->copy_call_us * 1e3;
    double alone = call + (double)n / c->d2h_gbps;
    uint64_t half = (uint64_t)(call + (double)n / c->d2h_gbps / 2);
    ms_gpu_sim_advance(s, half);
    assert_int_equal(g.copy(g.impl, MS_STREAM_IN, &b, 1), MS_OK);
    uint64_t t = wait_for(&g, MS_STREAM_OUT);
    /* bytes left at `half`, minus what moves alone during IN's call cost, at the shared rate */
    double left = (double)n - ((double)half - call) * c->d2h_gbps - call * c->d2h_gbps;
    double want = (double)half + call + left / ms_cost_duplex_share_gbps(c, false);
    assert_true((double)t > alone + 1);
    assert_true(fabs((double)t - want) <= 2.0);
    ms_gpu_sim_destroy(s);
}

static void test_seam_map_hash_capacity(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_gpu_sim *s;
    struct ms_gpu_ops g;
    assert_int_equal(ms_gpu_sim_create(c, 256 * MS_MIB, &s), MS_OK);
    ms_gpu_sim_ops(s, &g);
    struct ms_gpu_chunk ch[2] = {chunk_at(1ull << 40, 128 * MS_MIB),
                                 chunk_at((1ull << 40) + 128 * MS_MIB, 64 * MS_MIB)};
    assert_int_equal(g.map(g.impl, ch, 2), MS_OK);
    uint64_t want = ms_cost_map_ns(c, 128 * MS_MIB) + ms_cost_map_ns(c, 64 * MS_MIB);
    assert_int_equal(g.now_ns(g.impl), want);
    struct ms_gpu_info info;
    assert_int_equal(g.info(g.impl, &info), MS_OK);
    assert_int_equal(info.total_bytes, 256 * MS_MIB);
    assert_int_equal(info.free_bytes, 64 * MS_MIB);
    /* over capacity: refused, nothing mapped, no time passes */
    struct ms_gpu_chunk big = chunk_at(1ull << 42, 128 * MS_MIB);
    assert_int_equal(g.map(g.impl, &big, 1), MS_E_GPU);
    assert_int_equal(g.now_ns(g.impl), want);
    /* hashes: equal for equal content, changed by a write, cost charged */
    uint64_t h1[2], h2[2];
    assert_int_equal(g.hash(g.impl, ch, 2, h1), MS_OK);
    assert_int_equal(g.hash(g.impl, ch, 2, h2), MS_OK);
    assert_true(h1[0] == h2[0] && h1[1] == h2[1] && h1[0] != h1[1] && h1[0] != 0);
    assert_int_equal(ms_gpu_sim_write(s, ch[1].va), MS_OK);
    assert_int_equal(g.hash(g.impl, ch, 2, h2), MS_OK);
    assert_true(h1[0] == h2[0] && h1[1] != h2[1]);
    assert_int_equal(ms_gpu_sim_version(s, ch[1].va), 1);
    want += 2 * (ms_cost_hash_ns(c, 128 * MS_MIB) + ms_cost_hash_ns(c, 64 * MS_MIB)) +
            ms_cost_hash_ns(c, 128 * MS_MIB) + ms_cost_hash_ns(c, 64 * MS_MIB);
    assert_int_equal(g.now_ns(g.impl), want);
    /* unmap charges and frees; a second unmap of the same handle is refused */
    assert_int_equal(g.unmap(g.impl, ch, 1), MS_OK);
    want += ms_cost_unmap_ns(c, 128 * MS_MIB);
    assert_int_equal(g.now_ns(g.impl), want);
    assert_int_equal(g.unmap(g.impl, ch, 1), MS_E_INVAL);
    assert_int_equal(g.info(g.impl, &info), MS_OK);
    assert_int_equal(info.free_bytes, 192 * MS_MIB);
    /* an event on an idle stream is complete at once; a released event is unknown */
    uint64_t ev;
    assert_int_equal(g.record(g.impl, MS_STREAM_IN, &ev), MS_OK);
    assert_int_equal(g.wait(g.impl, ev), MS_OK);
    assert_int_equal(g.now_ns(g.impl), want);
    g.release_event(g.impl, ev);
    assert_int_equal(g.wait(g.impl, ev), MS_E_INVAL);
    ms_gpu_sim_destroy(s);
}

/* ---- fixed replays ------------------------------------------------------------------------- */

static void build(const char *name, double pressure, uint64_t budget, const struct ms_cost *c,
                  struct ms_workload *w)
{
    ms_wl_init(w);
    struct ms_wl_spec spec = {name, pressure, budget, c, 7};
    char why[256];
    int rc = ms_wl_builtin(&spec, w, why, sizeof(why));
    if (rc)
        fail_msg("%s: %s", name, why);
}

static struct ms_replay_result replay(const struct ms_workload *w, enum ms_sim_policy p,
                                      const struct ms_cost *c, uint64_t budget, uint64_t nslices,
                                      bool hash_clean, int want_rc)
{
    struct ms_replay_opts o;
    ms_replay_opts_default(&o, c, budget);
    o.policy = p;
    o.nslices = nslices;
    o.hash_clean = hash_clean;
    struct ms_replay_result r;
    char why[300];
    uint64_t live = ms_alloc_live();
    int rc = ms_replay_run(w, &o, &r, why, sizeof(why));
    if (rc != want_rc)
        fail_msg("%s on %s: rc %d (%s), wanted %d", ms_sim_policy_name(p), w->name, rc, why,
                 want_rc);
    assert_int_equal(ms_alloc_live(), live);
    return r;
}

static void test_replay_deterministic_and_ideal(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_rtx5080;
    struct ms_workload w;
    build("D", 2.0, 16 * MS_GIB, c, &w);
    assert_int_equal(w.ntasks, 4);
    for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
        struct ms_replay_result a =
            replay(&w, (enum ms_sim_policy)p, c, 16 * MS_GIB, 12, false, MS_OK);
        struct ms_replay_result b =
            replay(&w, (enum ms_sim_policy)p, c, 16 * MS_GIB, 12, false, MS_OK);
        assert_memory_equal(&a, &b, sizeof(a));
        assert_int_equal(a.misses, 0);
        if (p == MS_SIM_IDEAL) {
            assert_int_equal(a.bytes_in + a.bytes_out + a.bytes_dropped + a.faults, 0);
            assert_int_equal(a.compute_ns, a.total_ns);
            assert_true(a.throughput == 1.0);
            assert_int_equal(a.slices, 12);
        } else {
            assert_true(a.throughput < 1.0 && a.throughput > 0);
            assert_true(a.bytes_in > 0);
        }
        if (p != MS_SIM_DEMAND && p != MS_SIM_IDEAL)
            assert_true(a.peak_resident <= 16 * MS_GIB);
    }
    ms_wl_fini(&w);
}

static void test_replay_fits_no_migration(void **state)
{
    (void)state;
    /* everything fits: after warm-up no policy moves a byte and all run at 100 % */
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    build("micro", 0.9, 16 * MS_GIB, c, &w);
    for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
        struct ms_replay_result r =
            replay(&w, (enum ms_sim_policy)p, c, 16 * MS_GIB, 8, true, MS_OK);
        assert_int_equal(r.bytes_in + r.bytes_out + r.faults, 0);
        assert_true(r.throughput == 1.0);
    }
    ms_wl_fini(&w);
}

static void test_replay_hash_clean_drops_weights(void **state)
{
    (void)state;
    /* D's weights are read-only: with hash-clean they are dropped, not copied out */
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    build("D", 2.0, 16 * MS_GIB, c, &w);
    struct ms_replay_result off = replay(&w, MS_SIM_OPT, c, 16 * MS_GIB, 16, false, MS_OK);
    struct ms_replay_result on = replay(&w, MS_SIM_OPT, c, 16 * MS_GIB, 16, true, MS_OK);
    assert_int_equal(off.bytes_dropped, 0);
    assert_true(on.bytes_dropped > on.bytes_out);
    assert_true(on.bytes_out < off.bytes_out / 4);
    assert_true(on.throughput > off.throughput);
    ms_wl_fini(&w);
}

/* Adaptive slices: at 300 % a switch moves a 12 GiB task each way (about 0.25 s on the H200's
 * link), so 1 s slices lose about a fifth of the GPU; stretching a slice until its switch is at
 * most 10 % of it bounds the loss at 1/11, and the slices stay within [slice, slice_max]. With
 * slice_max equal to the slice it is the fixed-slice run exactly. */
/* Kernel templates in the model: two tasks, each with a 2 GiB arena of which its kernel uses
 * 64 MiB, under a 3 GiB budget. Named whole, the arenas do not fit together and every switch
 * moves an arena; with the kernel's template (a store text, as msched profile writes) the two
 * working sets fit and nothing moves after warm-up. */
static void test_replay_templates(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    ms_wl_init(&w);
    snprintf(w.name, sizeof w.name, "arenas");
    for (uint32_t t = 0; t < 2; t++) {
        uint32_t task;
        uint64_t base;
        assert_int_equal(ms_wl_add_task(&w, t ? "b" : "a", t, 0, &task), MS_OK);
        assert_int_equal(ms_wl_add_region(&w, task, 2 * MS_GIB, false, "arena", &base), MS_OK);
        uint64_t args[2] = {base + 512 * MS_MIB, 16 * MS_MIB}; /* p, n (floats) */
        for (int k = 0; k < 4; k++)
            assert_int_equal(ms_wl_add_kernel(&w, task, "scale", 2000000, args, 2), MS_OK);
    }
    struct ms_tmpl_store *st;
    assert_int_equal(ms_tmpl_store_new(&st), MS_OK);
    const char *text = "msched-templates 1\n"
                       "kernel mod=0 launches=2 opaque=0 unsafe=0 name=scale\n"
                       "arg 0 form=linear written=1 refused=0 launches=2 lo=0 hi=0,4*x8:8 "
                       "count=1 stride=0\n"
                       "end\n";
    char why[300];
    assert_int_equal(ms_tmpl_store_parse(st, text, strlen(text), why, sizeof why), MS_OK);
    struct ms_replay_opts o;
    ms_replay_opts_default(&o, c, 3 * MS_GIB);
    o.policy = MS_SIM_OPT;
    o.nslices = 12;
    o.check = true;
    struct ms_replay_result whole, tm;
    assert_int_equal(ms_replay_run(&w, &o, &whole, why, sizeof why), MS_OK);
    o.templates = st;
    assert_int_equal(ms_replay_run(&w, &o, &tm, why, sizeof why), MS_OK);
    assert_int_equal(whole.misses + tm.misses, 0);
    assert_true(whole.bytes_in >= 4 * MS_GIB); /* an arena's worth at most switches */
    assert_int_equal(tm.bytes_in, 0);          /* 64 MiB each: both stay resident */
    assert_true(tm.throughput > whole.throughput);
    assert_true(tm.throughput == 1.0);
    ms_tmpl_store_free(st);
    ms_wl_fini(&w);
}

static void test_replay_adaptive_slices(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    build("micro", 3.0, 16 * MS_GIB, c, &w);
    struct ms_replay_opts o;
    ms_replay_opts_default(&o, c, 16 * MS_GIB);
    o.slice_ns = 1000000000ull;
    o.duration_ns = 60000000000ull;
    char why[300];
    struct ms_replay_result fixed, same, adapt;
    assert_int_equal(ms_replay_run(&w, &o, &fixed, why, sizeof(why)), MS_OK);
    o.switch_frac_pct = 10;
    o.slice_max_ns = o.slice_ns;
    assert_int_equal(ms_replay_run(&w, &o, &same, why, sizeof(why)), MS_OK);
    assert_memory_equal(&fixed, &same, sizeof(fixed));
    o.slice_max_ns = 4000000000ull;
    assert_int_equal(ms_replay_run(&w, &o, &adapt, why, sizeof(why)), MS_OK);
    assert_int_equal(adapt.misses, 0);
    double mean_switch = (double)adapt.switch_ns / (double)adapt.switches;
    double mean_slice = (double)adapt.slice_ns / (double)adapt.slices;
    assert_true(fixed.throughput < 0.85); /* the switch is a fifth of a 1 s slice */
    assert_true(mean_switch > 1e8);       /* ... so every slice stretches */
    assert_true(mean_slice > 9.9 * mean_switch && mean_slice < 10.1 * mean_switch);
    assert_true(mean_slice <= 4e9);
    assert_true(adapt.throughput >= 1 / 1.1 - 0.005 && adapt.throughput > fixed.throughput);
    /* a switch_frac out of range is refused when adaptive */
    o.switch_frac_pct = 0;
    assert_int_equal(ms_replay_run(&w, &o, &adapt, why, sizeof(why)), MS_E_INVAL);
    ms_wl_fini(&w);
}

/*
 * Early start (replay.h): the slice starts with the migration and each command once its own
 * chunks are in; the slice still counts from the migration's end. On micro at 300 % with 200 ms
 * slices the first commands start before the migrations end, nothing misses (check mode), and
 * the work done meanwhile is a gain; without it the first command waits for the whole switch.
 */
static void test_replay_early_start(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    build("micro", 3.0, 16 * MS_GIB, c, &w);
    struct ms_replay_opts o;
    ms_replay_opts_default(&o, c, 16 * MS_GIB);
    o.duration_ns = 10000000000ull;
    o.check = true;
    char why[300];
    struct ms_replay_result plain, early;
    assert_int_equal(ms_replay_run(&w, &o, &plain, why, sizeof(why)), MS_OK);
    o.early_start = true;
    assert_int_equal(ms_replay_run(&w, &o, &early, why, sizeof(why)), MS_OK);
    assert_int_equal(plain.misses + early.misses, 0);
    assert_true(plain.switches > 10 && early.switches > 10);
    assert_true(plain.first_ns == plain.switch_ns);
    assert_true(early.first_ns < early.switch_ns * 3 / 4); /* first commands start before */
    assert_true(early.throughput > plain.throughput + 0.01);
    /* ideal has no migration: early start changes nothing */
    o.policy = MS_SIM_IDEAL;
    assert_int_equal(ms_replay_run(&w, &o, &early, why, sizeof(why)), MS_OK);
    assert_true(early.throughput == 1.0 && early.first_ns == 0);
    ms_wl_fini(&w);
}

static void test_replay_impossible_budget(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_workload w;
    build("D", 2.0, 16 * MS_GIB, c, &w);
    struct ms_replay_opts o;
    ms_replay_opts_default(&o, c, 4 * MS_GIB); /* one instance needs 8.5 GB per slice */
    o.nslices = 4;
    char why[300];
    struct ms_replay_result r;
    for (int p = MS_SIM_OPT; p < MS_SIM_DEMAND; p++) {
        o.policy = (enum ms_sim_policy)p;
        why[0] = 0;
        assert_int_equal(ms_replay_run(&w, &o, &r, why, sizeof(why)), MS_E_NOSPACE);
        assert_non_null(strstr(why, "budget"));
    }
    o.budget = 64 * MS_MIB; /* smaller than one layer's kernel */
    o.policy = MS_SIM_DEMAND;
    assert_int_equal(ms_replay_run(&w, &o, &r, why, sizeof(why)), MS_E_NOSPACE);
    assert_non_null(strstr(why, "budget"));
    ms_wl_fini(&w);
}

static void test_trace_round_trip(void **state)
{
    (void)state;
    const struct ms_cost *c = &ms_cost_rtx5080;
    const char *names[] = {"micro", "A", "B", "C", "D"};
    const uint64_t budget = 16 * MS_GIB;
    for (size_t i = 0; i < MS_ARRAY_LEN(names); i++) {
        struct ms_workload w, t;
        build(names[i], 1.5, budget, c, &w);
        char *text;
        size_t len;
        assert_int_equal(ms_wl_to_trace(&w, &text, &len), MS_OK);
        ms_wl_init(&t);
        char why[300];
        int rc = ms_wl_from_trace(text, len, "rt", &t, why, sizeof(why));
        if (rc)
            fail_msg("%s: %s", names[i], why);
        ms_free(text);
        assert_int_equal(t.ntasks, w.ntasks);
        assert_int_equal(t.nregions, w.nregions);
        assert_int_equal(ms_wl_footprint(&t, UINT32_MAX), ms_wl_footprint(&w, UINT32_MAX));
        /* read-only flags are lost in a trace, but they matter only to hash-clean */
        struct ms_replay_result a = replay(&w, MS_SIM_OPT, c, budget, 10, false, MS_OK);
        struct ms_replay_result b = replay(&t, MS_SIM_OPT, c, budget, 10, false, MS_OK);
        assert_true(a.bytes_in > 0);
        assert_int_equal(a.bytes_in, b.bytes_in);
        assert_int_equal(a.bytes_out, b.bytes_out);
        assert_int_equal(a.total_ns, b.total_ns);
        ms_wl_fini(&w);
        ms_wl_fini(&t);
    }
}

/* Small allocations are packed as the engine packs them (core/slab.h): 300 allocations of 4 KiB,
 * each freed and made again, are blocks of one task's slabs, not 600 regions of 2 MiB; a kernel
 * naming one names its slab, relocated into it. */
static void test_trace_small_allocations(void **state)
{
    (void)state;
    size_t cap = 64 * 1024, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "msched-trace 1\ntask 1 prio=0 name=a\n");
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 300; i++)
            len += (size_t)snprintf(text + len, cap - len, "alloc 1 0x%llx 4096 device\n",
                                    0x7f0000000000ull + (unsigned long long)i * 4096);
        if (round == 0)
            for (int i = 0; i < 300; i++)
                len += (size_t)snprintf(text + len, cap - len, "free 1 0x%llx\n",
                                        0x7f0000000000ull + (unsigned long long)i * 4096);
    }
    /* a kernel naming the 151st allocation (0x7f0000096000), little-endian */
    len += (size_t)snprintf(text + len, cap - len,
                            "kernel 1 0 1000 grid=1,1,1 block=1,1,1 name=k "
                            "params=00600900007f0000 layout=0:8\n");
    assert_true(len < cap);
    struct ms_workload w;
    ms_wl_init(&w);
    char why[300];
    int rc = ms_wl_from_trace(text, len, "small", &w, why, sizeof(why));
    free(text);
    if (rc)
        fail_msg("%s", why);
    /* 300 blocks of 4 KiB: 1200 KiB, one slab; the frees make room for the second 300 */
    assert_int_equal(w.nregions, 1);
    assert_int_equal(w.regions[0].size, MS_GRAN);
    const struct ms_wl_cmd *k = &w.tasks[0].cmds[0];
    uint64_t p;
    memcpy(&p, &w.params[k->params], 8);
    assert_true(p >= w.regions[0].base && p < w.regions[0].base + MS_GRAN);
    assert_int_equal((p - w.regions[0].base) % 4096, 0);
    ms_wl_fini(&w);
}

static void test_trace_relocation_and_errors(void **state)
{
    (void)state;
    /* two tasks reuse the same addresses (separate processes); a layout limits the scan */
    const char *text =
        "msched-trace 1\n"
        "task 5 prio=0 name=a\n"
        "task 9 prio=0 name=b\n"
        "alloc 5 0x7f0000000000 67108864 device\n"
        "alloc 9 0x7f0000000000 33554432 device\n"
        "alloc 9 0x7f0010000000 4194304 device\n"
        "alloc 9 0x55d0c0000000 65536 host\n"
        "kernel 5 0 1000000 grid=1,1,1 block=1,1,1 name=k params=00000000007f0000 layout=0:8\n"
        "kernel 9 0 500000 grid=1,1,1 block=1,1,1 name=k "
        "params=00001000007f000001000000 layout=0:8,8:4\n"
        "copy 9 0 100000 h2d 0x7f0000000000 0x55d0c0000000 4096\n"
        "free 9 0x7f0010000000\n";
    struct ms_workload w;
    ms_wl_init(&w);
    char why[300];
    int rc = ms_wl_from_trace(text, strlen(text), "t", &w, why, sizeof(why));
    if (rc)
        fail_msg("%s", why);
    assert_int_equal(w.ntasks, 2);
    assert_int_equal(w.nregions, 3); /* the host allocation is not device memory */
    assert_true(w.regions[0].base != w.regions[1].base);
    const struct ms_cost *c = &ms_cost_h200;
    struct ms_replay_result r = replay(&w, MS_SIM_OPT, c, 64 * MS_MIB, 6, true, MS_OK);
    assert_int_equal(r.misses, 0);
    assert_true(r.bytes_in > 0); /* 64 MiB + 36 MiB do not fit in 64 MiB together */
    ms_wl_fini(&w);

    struct {
        const char *text;
        const char *want;
    } bad[] = {
        {"msched-trace 1\nalloc 1 0x1000 0 device\n", "line 2"},
        {"msched-trace 3\n", "line 1"},
        {"task 1 prio=0 name=x\n", "line 1"},
        {"msched-trace 1\nalloc 1 0x1000 4096 device\nalloc 1 0x1800 4096 device\n", "overlaps"},
        {"msched-trace 1\nfree 1 0x1000\n", "line 2"},
        {"msched-trace 1\ntask 1 prio=0 name=x\n", "no commands"},
        {"", "header"},
        {"msched-trace 1\nkernel 1 0 0 grid=1,1,1 block=1,1,1 name=k params=\n", "duration 0"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        ms_wl_init(&w);
        why[0] = 0;
        uint64_t live = ms_alloc_live();
        rc = ms_wl_from_trace(bad[i].text, strlen(bad[i].text), "bad", &w, why, sizeof(why));
        ms_wl_fini(&w);
        assert_int_equal(ms_alloc_live(), live);
        if (rc == MS_OK || !strstr(why, bad[i].want))
            fail_msg("bad trace %zu: rc %d, why '%s' (wanted '%s')", i, rc, why, bad[i].want);
    }
}

static void test_sweep_outputs(void **state)
{
    (void)state;
    struct ms_sweep_opts so;
    memset(&so, 0, sizeof(so));
    so.workload = "micro";
    so.pressures[0] = 1.5;
    so.pressures[1] = 2;
    so.npressures = 2;
    so.budget = 2 * MS_GIB;
    so.cost = &ms_cost_h200;
    for (int p = 0; p < MS_SIM_NPOLICIES; p++)
        so.policies[p] = true;
    ms_replay_opts_default(&so.replay, so.cost, so.budget);
    so.replay.nslices = 8;
    struct ms_sweep *sw = malloc(sizeof(*sw));
    assert_non_null(sw);
    char why[300];
    assert_int_equal(ms_sweep_run(&so, sw, why, sizeof(why)), MS_OK);
    assert_int_equal(sw->n, 2);
    for (size_t i = 0; i < sw->n; i++) {
        assert_true(ms_sweep_norm(sw, i, MS_SIM_IDEAL) == 1.0);
        assert_true(ms_sweep_norm(sw, i, MS_SIM_OPT) >= ms_sweep_norm(sw, i, MS_SIM_DEMAND));
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(ms_svg_write(sw, true, f), MS_OK);
    fclose(f);
    assert_non_null(strstr(buf, "<svg"));
    assert_non_null(strstr(buf, "</svg>"));
    assert_non_null(strstr(buf, "opt-serial"));
    free(buf);
    f = open_memstream(&buf, &len);
    assert_int_equal(ms_sweep_json(sw, f), MS_OK);
    fclose(f);
    assert_non_null(strstr(buf, "\"normalized_throughput\""));
    assert_non_null(strstr(buf, "\"demand\""));
    free(buf);
    free(sw);
}

/* ---- random workloads ---------------------------------------------------------------------- */

static void random_spec(struct ms_wl_random_spec *sp, uint64_t seed, bool uniform)
{
    uint64_t s = seed;
    memset(sp, 0, sizeof(*sp));
    sp->seed = ms_wl_rand(&s);
    sp->ntasks = 1 + (uint32_t)(ms_wl_rand(&s) % 4);
    sp->max_regions = 1 + (uint32_t)(ms_wl_rand(&s) % 8);
    sp->max_cmds = 1 + (uint32_t)(ms_wl_rand(&s) % 12);
    sp->uniform_bytes = uniform ? MS_GRAN : 0;
    sp->max_region_bytes = (1 + ms_wl_rand(&s) % 80) * MS_GRAN;
    sp->max_dur_ns = 1000 + ms_wl_rand(&s) % (30 * 1000 * 1000);
    sp->hidden_pct = uniform ? 0 : (uint32_t)(ms_wl_rand(&s) % 30);
    sp->ro_pct = (uint32_t)(ms_wl_rand(&s) % 60);
    sp->copies = !uniform && ms_wl_rand(&s) % 2;
}

/* Run policy p with a budget that starts at frac of the footprint and grows until it fits. */
static int replay_fitting(const struct ms_workload *w, struct ms_replay_opts *o,
                          struct ms_replay_result *r, double frac)
{
    uint64_t foot = ms_wl_footprint(w, UINT32_MAX);
    uint64_t b = MS_ROUND_UP((uint64_t)((double)foot * frac), MS_GRAN);
    char why[300];
    for (;;) {
        o->budget = b < MS_GRAN ? MS_GRAN : b;
        int rc = ms_replay_run(w, o, r, why, sizeof(why));
        if (rc != MS_E_NOSPACE || b >= foot) {
            if (rc)
                print_error("%s: %s\n", ms_sim_policy_name(o->policy), why);
            return rc;
        }
        b = MS_ROUND_UP(b + b / 4 + MS_GRAN, MS_GRAN);
    }
}

static void test_random_policies_check(void **state)
{
    (void)state;
    uint64_t s = g_seed;
    const struct ms_cost *c = &ms_cost_h200;
    uint64_t faults = 0;
    for (int iter = 0; iter < 40; iter++) {
        struct ms_wl_random_spec sp;
        random_spec(&sp, ms_wl_rand(&s), false);
        struct ms_workload w;
        ms_wl_init(&w);
        assert_int_equal(ms_wl_random(&sp, &w), MS_OK);
        if (ms_wl_validate(&w, NULL, 0) != MS_OK) {
            ms_wl_fini(&w);
            continue;
        }
        double frac = 0.3 + (double)(ms_wl_rand(&s) % 60) / 100;
        for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
            struct ms_replay_opts o;
            ms_replay_opts_default(&o, c, 0);
            o.policy = (enum ms_sim_policy)p;
            o.slice_ns = 1000000 + ms_wl_rand(&s) % 50000000;
            o.nslices = 3 + ms_wl_rand(&s) % 12;
            o.hash_clean = ms_wl_rand(&s) % 2;
            o.check = true;
            struct ms_replay_result r;
            uint64_t live = ms_alloc_live();
            int rc = replay_fitting(&w, &o, &r, frac);
            if (rc)
                fail_msg("iteration %d, policy %s: rc %d", iter, ms_sim_policy_name(o.policy), rc);
            assert_int_equal(ms_alloc_live(), live);
            assert_int_equal(r.misses, 0);
            assert_int_equal(r.slices, o.nslices);
            if (p != MS_SIM_IDEAL)
                assert_true(r.peak_resident <= o.budget);
            if (p != MS_SIM_DEMAND)
                faults += r.faults;
        }
        ms_wl_fini(&w);
    }
    print_message("launch faults served over the random replays: %llu\n",
                  (unsigned long long)faults);
}

static void test_random_opt_moves_least(void **state)
{
    (void)state;
    uint64_t s = g_seed ^ 0x5eed;
    const struct ms_cost *c = &ms_cost_h200;
    for (int iter = 0; iter < 40; iter++) {
        struct ms_wl_random_spec sp;
        random_spec(&sp, ms_wl_rand(&s), true);
        struct ms_workload w;
        ms_wl_init(&w);
        assert_int_equal(ms_wl_random(&sp, &w), MS_OK);
        double frac = 0.3 + (double)(ms_wl_rand(&s) % 60) / 100;
        uint64_t slice = 1000000 + ms_wl_rand(&s) % 50000000;
        uint64_t nslices = 4 + ms_wl_rand(&s) % 20;
        /* one budget for all three: the largest any of them needs */
        uint64_t budget = 0;
        enum ms_sim_policy pols[3] = {MS_SIM_OPT, MS_SIM_LRU, MS_SIM_WHOLE};
        struct ms_replay_result r[3];
        struct ms_replay_opts o[3];
        for (int k = 0; k < 3; k++) {
            ms_replay_opts_default(&o[k], c, 0);
            o[k].policy = pols[k];
            o[k].slice_ns = slice;
            o[k].nslices = nslices;
            o[k].hash_clean = false;
            o[k].warmup = false;
            o[k].horizon = 64; /* the whole future of these short runs, or close */
            assert_int_equal(replay_fitting(&w, &o[k], &r[k], frac), MS_OK);
            if (o[k].budget > budget)
                budget = o[k].budget;
        }
        for (int k = 0; k < 3; k++) {
            o[k].budget = budget;
            char why[300];
            assert_int_equal(ms_replay_run(&w, &o[k], &r[k], why, sizeof(why)), MS_OK);
            assert_int_equal(r[k].faults, 0);
        }
        if (r[0].bytes_in > r[1].bytes_in || r[0].bytes_in > r[2].bytes_in)
            fail_msg("iteration %d: opt moved %llu bytes in, lru %llu, whole %llu (budget %llu)",
                     iter, (unsigned long long)r[0].bytes_in, (unsigned long long)r[1].bytes_in,
                     (unsigned long long)r[2].bytes_in, (unsigned long long)budget);
        ms_wl_fini(&w);
    }
}

int main(void)
{
    g_seed = ms_test_seed(20260101);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seam_one_copy),
        cmocka_unit_test(test_seam_duplex),
        cmocka_unit_test(test_seam_late_copy_slows_early_one),
        cmocka_unit_test(test_seam_map_hash_capacity),
        cmocka_unit_test(test_replay_deterministic_and_ideal),
        cmocka_unit_test(test_replay_fits_no_migration),
        cmocka_unit_test(test_replay_hash_clean_drops_weights),
        cmocka_unit_test(test_replay_impossible_budget),
        cmocka_unit_test(test_replay_adaptive_slices),
        cmocka_unit_test(test_replay_early_start),
        cmocka_unit_test(test_replay_templates),
        cmocka_unit_test(test_trace_round_trip),
        cmocka_unit_test(test_trace_relocation_and_errors),
        cmocka_unit_test(test_trace_small_allocations),
        cmocka_unit_test(test_sweep_outputs),
        cmocka_unit_test(test_random_policies_check),
        cmocka_unit_test(test_random_opt_moves_least),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
