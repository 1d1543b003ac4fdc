/*
 * test_history.c - the history ring and the future it predicts (core/history.h), on a CPU.
 *
 * Regions here are one 64 MiB chunk each unless said, so a chunk id names a "buffer" of a
 * looping program. Residency is set with the chunk state machine's own events (EMPTY -> map
 * fresh -> CLEAN; evict -> HOST), so "missing" means what it means in the engine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/history.h"
#include "core/plan.h"

#define NBUF 6
#define CH (64 * MS_MIB)

struct fixture {
    struct ms_rtable rt;
    struct ms_history h;
    ms_chunk_id buf[NBUF];
    struct ms_chunk_set need, next, recent;
    struct ms_chunk_set *ws;
    size_t capws, nws;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    ms_rtable_init(&f->rt);
    for (int i = 0; i < NBUF; i++) {
        uint32_t id;
        assert_int_equal(ms_region_add(&f->rt, 0, 0x7f0000000000ull + (uint64_t)i * (1ull << 32),
                                       CH, MS_RK_DEVICE, CH, &id),
                         MS_OK);
        f->buf[i] = MS_CHUNK_ID(id, 0);
    }
    assert_int_equal(ms_history_init(&f->h, 64), MS_OK);
    ms_chunk_set_init(&f->need);
    ms_chunk_set_init(&f->next);
    ms_chunk_set_init(&f->recent);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    for (size_t i = 0; i < f->capws; i++)
        ms_chunk_set_fini(&f->ws[i]);
    ms_free(f->ws);
    ms_chunk_set_fini(&f->need);
    ms_chunk_set_fini(&f->next);
    ms_chunk_set_fini(&f->recent);
    ms_history_fini(&f->h);
    ms_rtable_fini(&f->rt);
    free(f);
    return 0;
}

static void use(struct fixture *f, int b)
{
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    assert_int_equal(ms_chunk_set_add(&s, f->buf[b]), MS_OK);
    ms_history_append(&f->h, &s);
    ms_chunk_set_fini(&s);
}

static void make_resident(struct fixture *f, int b)
{
    assert_int_equal(ms_chunk_apply(&f->rt, f->buf[b], MS_CE_MAP_FRESH), MS_OK);
}

static void need_only(struct fixture *f, int b)
{
    ms_chunk_set_clear(&f->need);
    assert_int_equal(ms_chunk_set_add(&f->need, f->buf[b]), MS_OK);
}

static int index_of(struct fixture *f, ms_chunk_id id)
{
    for (int i = 0; i < NBUF; i++)
        if (f->buf[i] == id)
            return i;
    return -1;
}

/* The set as buffer numbers, e.g. "1 2 3". */
static const char *names(struct fixture *f, const struct ms_chunk_set *s)
{
    static char out[256];
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->n && n + 8 < sizeof out; i++)
        n +=
            (size_t)snprintf(out + n, sizeof out - n, "%s%d", i ? " " : "", index_of(f, s->ids[i]));
    return out;
}

static void append_skips_recent_repeats(void **state)
{
    struct fixture *f = *state;
    for (int r = 0; r < 3; r++)
        use(f, 0); /* the same buffer again and again: once */
    assert_int_equal((int)ms_history_len(&f->h), 1);
    for (int b = 1; b < NBUF; b++)
        use(f, b);
    use(f, 1); /* within the last 8: skipped */
    assert_int_equal((int)ms_history_len(&f->h), NBUF);
    /* A ring smaller than the history keeps the newest. */
    struct ms_history small;
    assert_int_equal(ms_history_init(&small, 4), MS_OK);
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    for (int b = 0; b < NBUF; b++)
        assert_int_equal(ms_chunk_set_add(&s, f->buf[b]), MS_OK);
    ms_history_append(&small, &s);
    assert_int_equal((int)ms_history_len(&small), 4);
    uint64_t start;
    assert_false(ms_history_locate(&small, &f->rt, &f->need, false, &start));
    assert_int_equal(index_of(f, ms_history_future(&small, start, 0)), 2); /* oldest kept */
    assert_int_equal(index_of(f, ms_history_future(&small, start, 3)), 5);
    ms_chunk_set_fini(&s);
    ms_history_fini(&small);
    assert_int_equal(ms_history_init(&small, 0), MS_E_INVAL);
}

/* The skip rule as first written (a scan of the ring's last 8 entries per id), the reference
 * the append is checked against. */
static void append_reference(struct ms_history *h, const struct ms_chunk_set *s)
{
    for (size_t i = 0; h->cap && i < s->n; i++) {
        bool recent = false;
        for (uint64_t k = 1; k <= MS_HISTORY_RECENT_SKIP && k <= ms_history_len(h) && !recent; k++)
            recent = h->ring[(h->seq - k) % h->cap] == s->ids[i];
        if (!recent)
            h->ring[h->seq++ % h->cap] = s->ids[i];
    }
}

/* Random sets (0 to 40 ids from a range of 24, repeats within and across sets; every other one
 * normalized) appended to rings of 1 to 20 and 64 ids: the same sequence numbers and ring contents
 * as the reference. */
static void append_matches_reference(void **state)
{
    (void)state;
    uint64_t rng = 99;
    const uint32_t caps[] = {1, 2, 3, 5, 7, 8, 9, 13, 20, 64};
    for (size_t c = 0; c < MS_ARRAY_LEN(caps); c++) {
        struct ms_history a, b;
        assert_int_equal(ms_history_init(&a, caps[c]), MS_OK);
        assert_int_equal(ms_history_init(&b, caps[c]), MS_OK);
        struct ms_chunk_set s;
        ms_chunk_set_init(&s);
        for (int round = 0; round < 300; round++) {
            ms_chunk_set_clear(&s);
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            /* Small sets of few ids (repeats, the recent-window skip) and, every other pair of
             * rounds, long ones (ascending runs far past the window: the block copy). */
            bool wide = round % 4 >= 2;
            size_t n = (size_t)((rng >> 33) % (wide ? 201 : 41));
            for (size_t i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t k = (uint32_t)((rng >> 33) % (wide ? 300 : 24));
                assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(1 + k % 2, k)), MS_OK);
            }
            if (round % 2)
                ms_chunk_set_normalize(&s); /* ascending, as the engine appends */
            ms_history_append(&a, &s);
            append_reference(&b, &s);
            assert_int_equal(a.seq, b.seq);
            assert_memory_equal(a.ring, b.ring, caps[c] * sizeof(*a.ring));
        }
        ms_chunk_set_fini(&s);
        ms_history_fini(&a);
        ms_history_fini(&b);
    }
}

/* ms_history_plan_sets as first written (every group of the future, however far), the
 * reference the early stop is checked against. */
static int plan_sets_reference(const struct ms_history *h, struct ms_rtable *rt,
                               const struct ms_chunk_set *need, uint64_t prefetch, uint32_t group,
                               struct ms_chunk_set **ws, size_t *capws, size_t *nws)
{
    uint64_t have = ms_history_len(h);
    uint64_t start;
    if (!ms_history_locate(h, rt, need, false, &start))
        prefetch = 0;
    size_t groups = (size_t)(have / group) + 2;
    int e = ms_chunk_sets_reserve(ws, capws, groups + 1);
    if (e)
        return e;
    struct ms_chunk_set *w = *ws;
    for (size_t i = 0; i <= groups; i++)
        ms_chunk_set_clear(&w[i]);
    for (size_t i = 0; i < need->n; i++)
        if ((e = ms_chunk_set_add(&w[0], need->ids[i])))
            return e;
    uint64_t taken = 0;
    size_t g = 1;
    for (uint64_t k = 0; k < have; k++) {
        ms_chunk_id id = ms_history_future(h, start, k);
        const struct ms_chunk *c = ms_chunk_get(rt, id);
        if (!c)
            continue;
        if (g == 1 && taken < prefetch && !ms_chunk_state_resident((enum ms_chunk_state)c->state)) {
            taken += c->bytes;
            if ((e = ms_chunk_set_add(&w[0], id)))
                return e;
            continue;
        }
        if (w[g].n >= group && g < groups)
            g++;
        if ((e = ms_chunk_set_add(&w[g], id)))
            return e;
    }
    *nws = g + 1;
    return MS_OK;
}

/* Drive chunk id to a state through the state machine's own events. */
static void set_state(struct ms_rtable *rt, ms_chunk_id id, int which)
{
    static const enum ms_chunk_event path[6][4] = {
        {MS_CE_COUNT},                                                  /* EMPTY */
        {MS_CE_MAP_FRESH, MS_CE_COUNT},                                 /* DIRTY */
        {MS_CE_MAP_FRESH, MS_CE_DROP, MS_CE_COUNT},                     /* HOST */
        {MS_CE_MAP_FRESH, MS_CE_DROP, MS_CE_POP_START, MS_CE_POP_DONE}, /* CLEAN */
        {MS_CE_MAP_FRESH, MS_CE_DROP, MS_CE_POP_START, MS_CE_COUNT},    /* IN */
        {MS_CE_MAP_FRESH, MS_CE_EVICT_START, MS_CE_COUNT},              /* OUT */
    };
    for (int i = 0; i < 4 && path[which][i] != MS_CE_COUNT; i++)
        assert_int_equal(ms_chunk_apply(rt, id, path[which][i]), MS_OK);
}

/* The plan OPT builds from the working sets is the same whether the future is walked to its end
 * or only until every resident chunk was seen: random tables (30 regions of 1 to 3 chunks in all
 * six states, some pinned, some freed after the history was written), histories, needs,
 * prefetch sizes and budgets. */
static void plan_sets_early_stop_same_plan(void **state)
{
    (void)state;
    uint64_t rng = 4242;
#define RND(n) ((rng = rng * 6364136223846793005ull + 1442695040888963407ull), (rng >> 33) % (n))
    struct ms_chunk_set *wa = NULL, *wb = NULL;
    size_t capa = 0, capb = 0, na = 0, nb = 0;
    struct ms_plan pa, pb;
    ms_plan_init(&pa);
    ms_plan_init(&pb);
    int same_steps = 0;
    for (int round = 0; round < 400; round++) {
        struct ms_rtable rt;
        ms_rtable_init(&rt);
        uint32_t reg[30];
        for (int i = 0; i < 30; i++) {
            uint64_t n = 1 + RND(3);
            assert_int_equal(ms_region_add(&rt, 0, 0x7f0000000000ull + (uint64_t)i * (1ull << 32),
                                           n * CH, MS_RK_DEVICE, CH, &reg[i]),
                             MS_OK);
            for (uint32_t k = 0; k < n; k++) {
                set_state(&rt, MS_CHUNK_ID(reg[i], k), (int)RND(6));
                struct ms_chunk *c = ms_chunk_get(&rt, MS_CHUNK_ID(reg[i], k));
                if (ms_chunk_state_resident((enum ms_chunk_state)c->state) && RND(8) == 0)
                    c->pins = 1;
            }
        }
        struct ms_history h;
        assert_int_equal(ms_history_init(&h, (uint32_t)(16 + RND(200))), MS_OK);
        struct ms_chunk_set s, need;
        ms_chunk_set_init(&s);
        ms_chunk_set_init(&need);
        for (int k = 0; k < 300; k++) {
            ms_chunk_set_clear(&s);
            for (uint64_t j = RND(4); j > 0; j--) {
                uint32_t r = reg[RND(30)];
                uint32_t nc = ms_region_get(&rt, r)->nchunks;
                assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(r, (uint32_t)RND(nc))), MS_OK);
            }
            ms_chunk_set_normalize(&s);
            ms_history_append(&h, &s);
        }
        for (uint64_t j = 1 + RND(3); j > 0; j--) {
            uint32_t r = reg[RND(30)];
            assert_int_equal(ms_chunk_set_add(&need, MS_CHUNK_ID(r, 0)), MS_OK);
        }
        ms_chunk_set_normalize(&need);
        if (RND(3) == 0) { /* a region freed since the history was written */
            uint32_t r = reg[RND(30)];
            bool in_need = false;
            for (size_t i = 0; i < need.n; i++)
                in_need |= MS_CHUNK_REGION(need.ids[i]) == r;
            struct ms_region *g = ms_region_get(&rt, r);
            for (uint32_t k = 0; g && !in_need && k < g->nchunks; k++)
                g->chunks[k].pins = 0;
            for (uint32_t k = 0; g && !in_need && k < g->nchunks; k++) {
                struct ms_chunk *c = &g->chunks[k];
                if (c->state == MS_CS_IN)
                    ms_chunk_apply(&rt, MS_CHUNK_ID(r, k), MS_CE_POP_FAIL);
                else if (c->state == MS_CS_OUT)
                    ms_chunk_apply(&rt, MS_CHUNK_ID(r, k), MS_CE_EVICT_DONE);
                if (c->state == MS_CS_CLEAN || c->state == MS_CS_DIRTY)
                    ms_chunk_apply(&rt, MS_CHUNK_ID(r, k), MS_CE_DROP);
            }
            if (!in_need)
                assert_int_equal(ms_region_remove(&rt, r), MS_OK);
        }
        uint64_t prefetch = RND(4) * CH, budget = (4 + RND(40)) * CH;
        uint32_t group = (uint32_t)(1 + RND(6));
        assert_int_equal(ms_history_plan_sets(&h, &rt, &need, prefetch, group, &wa, &capa, &na),
                         MS_OK);
        struct ms_plan_input in = {
            .rt = &rt, .budget = budget, .ws = wa, .nws = na, .policy = MS_EVICT_OPT};
        int ea = ms_plan_build(&in, &pa);
        assert_int_equal(plan_sets_reference(&h, &rt, &need, prefetch, group, &wb, &capb, &nb),
                         MS_OK);
        assert_true(na <= nb);
        assert_int_equal(wa[0].n, wb[0].n); /* the same prefetch */
        assert_memory_equal(wa[0].ids, wb[0].ids, wa[0].n * sizeof(*wa[0].ids));
        in.ws = wb;
        in.nws = nb;
        int eb = ms_plan_build(&in, &pb);
        assert_int_equal(ea, eb);
        assert_int_equal(pa.n, pb.n);
        for (size_t i = 0; i < pa.n; i++) {
            assert_int_equal(pa.steps[i].op, pb.steps[i].op);
            assert_int_equal(pa.steps[i].chunk, pb.steps[i].chunk);
        }
        same_steps += pa.n > 0;
        ms_chunk_set_fini(&s);
        ms_chunk_set_fini(&need);
        ms_history_fini(&h);
        ms_rtable_fini(&rt);
    }
    assert_true(same_steps > 100); /* the plans compared did something */
    for (size_t i = 0; i < capa; i++)
        ms_chunk_set_fini(&wa[i]);
    for (size_t i = 0; i < capb; i++)
        ms_chunk_set_fini(&wb[i]);
    ms_free(wa);
    ms_free(wb);
    ms_plan_fini(&pa);
    ms_plan_fini(&pb);
#undef RND
}

/*
 * A looping program (the engine stress test's "cycle"): buffers 0..5 in order, twice. Under a
 * budget for two buffers, the fault on buffer 2 (missing) must predict 3, 4, 5, 0, 1 next:
 * the prefetch takes the next non-resident ones, and OPT's sets follow in that order.
 */
static void cycle_plan_sets(void **state)
{
    struct fixture *f = *state;
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < NBUF; b++)
            use(f, b);
    make_resident(f, 0);
    make_resident(f, 1);
    need_only(f, 2);
    assert_int_equal(
        ms_history_plan_sets(&f->h, &f->rt, &f->need, 2 * CH, 2, &f->ws, &f->capws, &f->nws),
        MS_OK);
    assert_string_equal(names(f, &f->ws[0]), "2 3 4"); /* need, then 128 MiB of prefetch */
    assert_int_equal((int)f->nws, 3);
    assert_string_equal(names(f, &f->ws[1]), "5 0");
    /* 0 and 1 are all that is resident: the future stops once both were seen. */
    assert_string_equal(names(f, &f->ws[2]), "1");
    /* Without prefetch, ws[0] is the need alone and the future follows. */
    assert_int_equal(
        ms_history_plan_sets(&f->h, &f->rt, &f->need, 0, 2, &f->ws, &f->capws, &f->nws), MS_OK);
    assert_string_equal(names(f, &f->ws[0]), "2");
    assert_string_equal(names(f, &f->ws[1]), "3 4");
    /* Needing a resident chunk locates nothing: no prefetch, the future from the oldest end. */
    need_only(f, 0);
    assert_int_equal(
        ms_history_plan_sets(&f->h, &f->rt, &f->need, 4 * CH, 2, &f->ws, &f->capws, &f->nws),
        MS_OK);
    assert_string_equal(names(f, &f->ws[0]), "0");
    assert_string_equal(names(f, &f->ws[1]), "0 1");
}

/* The daemon's sets: next = need then the future within next_cap; recent = newest first
 * within recent_cap, handed out oldest first. A freed buffer is skipped. */
static void cycle_predict(void **state)
{
    struct fixture *f = *state;
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < NBUF; b++)
            use(f, b);
    make_resident(f, 4);
    need_only(f, 1);
    assert_int_equal(
        ms_history_predict(&f->h, &f->rt, &f->need, 4 * CH, &f->next, 3 * CH, &f->recent), MS_OK);
    assert_string_equal(names(f, &f->next), "1 2 3 4");
    assert_string_equal(names(f, &f->recent), "3 4 5");
    /* A resident needed chunk still locates (any_needed): 4 is followed by 5, 0, 1. */
    need_only(f, 4);
    assert_int_equal(ms_history_predict(&f->h, &f->rt, &f->need, 4 * CH, &f->next, CH, &f->recent),
                     MS_OK);
    assert_string_equal(names(f, &f->next), "4 5 0 1");
    assert_string_equal(names(f, &f->recent), "5");
    /* Nothing needed: the most recent chunks, oldest first. */
    ms_chunk_set_clear(&f->need);
    assert_int_equal(
        ms_history_predict(&f->h, &f->rt, &f->need, 2 * CH, &f->next, 3 * CH, &f->recent), MS_OK);
    assert_string_equal(names(f, &f->next), "3 4");
    /* Buffer 5 freed: never predicted again. */
    assert_int_equal(ms_region_remove(&f->rt, MS_CHUNK_REGION(f->buf[5])), MS_OK);
    need_only(f, 3);
    assert_int_equal(
        ms_history_predict(&f->h, &f->rt, &f->need, 6 * CH, &f->next, 6 * CH, &f->recent), MS_OK);
    assert_string_equal(names(f, &f->next), "3 4 0 1 2");
    assert_string_equal(names(f, &f->recent), "0 1 2 3 4");
}

/* Allocation failures surface as MS_E_NOMEM, never a crash (core/ms.h fault injection). */
static void out_of_memory(void **state)
{
    struct fixture *f = *state;
    for (int b = 0; b < NBUF; b++)
        use(f, b);
    need_only(f, 2);
    bool failed = false;
    for (int nth = 1; nth < 8; nth++) {
        struct ms_chunk_set next, recent;
        ms_chunk_set_init(&next);
        ms_chunk_set_init(&recent);
        ms_alloc_fail_after((uint64_t)nth);
        int e = ms_history_predict(&f->h, &f->rt, &f->need, 6 * CH, &next, 6 * CH, &recent);
        ms_alloc_fail_after(0);
        assert_true(e == MS_OK || e == MS_E_NOMEM);
        failed |= e == MS_E_NOMEM;
        ms_chunk_set_fini(&next);
        ms_chunk_set_fini(&recent);
    }
    assert_true(failed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(append_skips_recent_repeats, setup, teardown),
        cmocka_unit_test(append_matches_reference),
        cmocka_unit_test(plan_sets_early_stop_same_plan),
        cmocka_unit_test_setup_teardown(cycle_plan_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(cycle_predict, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_memory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
