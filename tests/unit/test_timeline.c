/*
 * test_timeline.c - scheduling policies (core/timeline.h).
 *
 * Fixed cases pin down each rule of the contract (RR order and start, weights, runnable
 * filtering, priority preemption, horizon, errors, parse/name). A seeded randomized test checks
 * the same rules as properties on random task sets, against an independent brute-force
 * statement of them (not a copy of the implementation), and an allocation-failure sweep checks
 * that every failure is clean.
 */
#include "core/timeline.h"
#include "tests/support/ms_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define SLICE 1000000ull

static const struct ms_policy RR = {.kind = MS_POLICY_RR, .slice_ns = SLICE};
static const struct ms_policy PRIO = {.kind = MS_POLICY_PRIO, .slice_ns = SLICE};

static void expect_tasks(const struct ms_timeline *tl, const uint32_t *want, size_t n)
{
    assert_int_equal(tl->n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tl->e[i].task, want[i]);
}

static void test_rr_order_and_start(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {
        {.id = 3, .runnable = true}, {.id = 1, .runnable = true}, {.id = 2, .runnable = true}};
    struct ms_timeline tl;
    ms_timeline_init(&tl);

    assert_int_equal(ms_policy_timeline(&RR, t, 3, MS_TASK_NONE, 5, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){1, 2, 3, 1, 2}, 5);
    for (size_t i = 0; i < tl.n; i++)
        assert_int_equal(tl.e[i].slice_ns, SLICE);

    assert_int_equal(ms_policy_timeline(&RR, t, 3, 2, 4, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){3, 1, 2, 3}, 4);
    assert_int_equal(ms_policy_timeline(&RR, t, 3, 3, 2, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){1, 2}, 2);
    /* `last` need not be a known task: start at the next id above it. */
    assert_int_equal(ms_policy_timeline(&RR, t, 3, 0, 1, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){1}, 1);
    t[2].runnable = false; /* id 2 */
    assert_int_equal(ms_policy_timeline(&RR, t, 3, 1, 3, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){3, 1, 3}, 3);
    ms_timeline_fini(&tl);
    assert_null(tl.e);
}

static void test_rr_weights(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {{.id = 7, .weight = 0, .runnable = true},
                                {.id = 8, .weight = 3, .runnable = true},
                                {.id = 9, .weight = 1, .runnable = true}};
    struct ms_timeline tl;
    ms_timeline_init(&tl);
    assert_int_equal(ms_policy_timeline(&RR, t, 3, MS_TASK_NONE, 3, &tl), MS_OK);
    assert_int_equal(tl.e[0].slice_ns, SLICE);
    assert_int_equal(tl.e[1].slice_ns, 3 * SLICE);
    assert_int_equal(tl.e[2].slice_ns, SLICE);

    /* The product saturates instead of wrapping. */
    struct ms_policy big = {.kind = MS_POLICY_RR, .slice_ns = UINT64_MAX / 2};
    assert_int_equal(ms_policy_timeline(&big, t, 3, 7, 1, &tl), MS_OK);
    assert_int_equal(tl.e[0].task, 8);
    assert_true(tl.e[0].slice_ns == UINT64_MAX);
    ms_timeline_fini(&tl);
}

static void test_nothing_runnable_and_horizon(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {{.id = 1}, {.id = 2}};
    struct ms_timeline tl;
    ms_timeline_init(&tl);
    assert_int_equal(ms_policy_timeline(&RR, t, 2, MS_TASK_NONE, 4, &tl), MS_OK);
    assert_int_equal(tl.n, 0);
    assert_int_equal(ms_policy_timeline(&PRIO, t, 2, MS_TASK_NONE, 4, &tl), MS_OK);
    assert_int_equal(tl.n, 0);
    assert_int_equal(ms_policy_timeline(&RR, NULL, 0, MS_TASK_NONE, 4, &tl), MS_OK);
    assert_int_equal(tl.n, 0);

    t[0].runnable = true;
    assert_int_equal(ms_policy_timeline(&RR, t, 2, MS_TASK_NONE, 0, &tl), MS_OK);
    assert_int_equal(tl.n, 0);
    /* A single runnable task fills the horizon; the call replaces earlier contents. */
    assert_int_equal(ms_policy_timeline(&RR, t, 2, 1, 6, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){1, 1, 1, 1, 1, 1}, 6);
    assert_int_equal(ms_policy_timeline(&RR, t, 2, 1, 2, &tl), MS_OK);
    assert_int_equal(tl.n, 2);
    ms_timeline_fini(&tl);
}

static void test_prio_preemptive(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {
        {.id = 1, .prio = MS_PRIO_BE, .runnable = true},
        {.id = 2, .prio = MS_PRIO_BE, .runnable = true},
        {.id = 5, .prio = MS_PRIO_RT, .runnable = false},
        {.id = 4, .prio = MS_PRIO_RT, .weight = 2, .runnable = false},
    };
    struct ms_timeline tl;
    ms_timeline_init(&tl);
    /* Only BE tasks runnable: RR among them. */
    assert_int_equal(ms_policy_timeline(&PRIO, t, 4, 1, 4, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){2, 1, 2, 1}, 4);
    /* An RT task wakes: it takes entry 0 (the caller preempts) and alone fills the timeline. */
    t[2].runnable = true;
    assert_int_equal(ms_policy_timeline(&PRIO, t, 4, 1, 3, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){5, 5, 5}, 3);
    /* Two RT tasks: RR among them with their weights; BE tasks never appear. */
    t[3].runnable = true;
    assert_int_equal(ms_policy_timeline(&PRIO, t, 4, 4, 4, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){5, 4, 5, 4}, 4);
    assert_int_equal(tl.e[1].slice_ns, 2 * SLICE);
    /* RR ignores priority. */
    assert_int_equal(ms_policy_timeline(&RR, t, 4, 2, 4, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){4, 5, 1, 2}, 4);
    /* Negative and custom priorities order the same way. */
    struct ms_task_sched u[] = {{.id = 1, .prio = -3, .runnable = true},
                                {.id = 2, .prio = -1, .runnable = true}};
    assert_int_equal(ms_policy_timeline(&PRIO, u, 2, MS_TASK_NONE, 2, &tl), MS_OK);
    expect_tasks(&tl, (uint32_t[]){2, 2}, 2);
    ms_timeline_fini(&tl);
}

static void test_errors(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {{.id = 1, .runnable = true}, {.id = 1, .runnable = false}};
    struct ms_timeline tl;
    ms_timeline_init(&tl);
    struct ms_policy zero = {.kind = MS_POLICY_RR, .slice_ns = 0};
    struct ms_policy bad = {.kind = (enum ms_policy_kind)7, .slice_ns = 1};

    /* A successful call first, to show that errors leave an empty timeline. */
    assert_int_equal(ms_policy_timeline(&RR, t, 1, MS_TASK_NONE, 3, &tl), MS_OK);
    assert_int_equal(tl.n, 3);
    assert_int_equal(ms_policy_timeline(&zero, t, 1, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(tl.n, 0);
    assert_int_equal(ms_policy_timeline(&RR, t, 2, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(ms_policy_timeline(&PRIO, t, 2, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(tl.n, 0);
    assert_int_equal(ms_policy_timeline(&bad, t, 1, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(ms_policy_timeline(NULL, t, 1, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(ms_policy_timeline(&RR, NULL, 1, MS_TASK_NONE, 3, &tl), MS_E_INVAL);
    assert_int_equal(ms_policy_timeline(&RR, t, 1, MS_TASK_NONE, 3, NULL), MS_E_INVAL);
    ms_timeline_fini(&tl);
}

static void test_parse_name(void **state)
{
    (void)state;
    enum ms_policy_kind k;
    assert_int_equal(ms_policy_kind_parse("rr", &k), MS_OK);
    assert_int_equal(k, MS_POLICY_RR);
    assert_int_equal(ms_policy_kind_parse("prio", &k), MS_OK);
    assert_int_equal(k, MS_POLICY_PRIO);
    assert_int_equal(ms_policy_kind_parse("RR", &k), MS_E_NOTFOUND);
    assert_int_equal(ms_policy_kind_parse("", &k), MS_E_NOTFOUND);
    assert_int_equal(ms_policy_kind_parse("priority", &k), MS_E_NOTFOUND);
    assert_int_equal(ms_policy_kind_parse(NULL, &k), MS_E_INVAL);
    for (int i = MS_POLICY_RR; i <= MS_POLICY_PRIO; i++) {
        assert_int_equal(ms_policy_kind_parse(ms_policy_kind_name((enum ms_policy_kind)i), &k),
                         MS_OK);
        assert_int_equal((int)k, i);
    }
    assert_string_equal(ms_policy_kind_name((enum ms_policy_kind)42), "unknown");
}

static void test_alloc_failure(void **state)
{
    (void)state;
    struct ms_task_sched t[] = {{.id = 4, .runnable = true}, {.id = 2, .runnable = true}};
    uint64_t base = ms_alloc_live();
    for (uint64_t n = 1;; n++) {
        struct ms_timeline tl;
        ms_timeline_init(&tl);
        ms_alloc_fail_after(n);
        int rc = ms_policy_timeline(&RR, t, 2, MS_TASK_NONE, 100, &tl);
        ms_alloc_fail_after(0);
        if (rc == MS_OK) {
            assert_int_equal(tl.n, 100);
            assert_true(n > 2); /* the scratch array and the entries both failed once */
            ms_timeline_fini(&tl);
            assert_int_equal(ms_alloc_live(), base);
            break;
        }
        assert_int_equal(rc, MS_E_NOMEM);
        assert_int_equal(tl.n, 0);
        ms_timeline_fini(&tl);
        assert_int_equal(ms_alloc_live(), base);
        assert_true(n < 100);
    }
}

/* The rules of timeline.h, stated directly: is `id` eligible under policy p? */
static bool eligible(const struct ms_policy *p, const struct ms_task_sched *t, size_t n,
                     uint32_t id)
{
    const struct ms_task_sched *me = NULL;
    for (size_t i = 0; i < n; i++)
        if (t[i].id == id)
            me = &t[i];
    if (!me || !me->runnable)
        return false;
    if (p->kind == MS_POLICY_RR)
        return true;
    for (size_t i = 0; i < n; i++)
        if (t[i].runnable && t[i].prio > me->prio)
            return false;
    return true;
}

/* Smallest eligible id strictly greater than `after`, wrapping to the smallest eligible id. */
static uint32_t successor(const struct ms_policy *p, const struct ms_task_sched *t, size_t n,
                          uint64_t after)
{
    uint64_t best = UINT64_MAX, lowest = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!eligible(p, t, n, t[i].id))
            continue;
        if (t[i].id < lowest)
            lowest = t[i].id;
        if (t[i].id > after && t[i].id < best)
            best = t[i].id;
    }
    return (uint32_t)(best != UINT64_MAX ? best : lowest);
}

static void test_random_properties(void **state)
{
    (void)state;
    struct ms_rng r;
    ms_rng_seed(&r, ms_test_seed(0x7131e));
    struct ms_timeline tl;
    ms_timeline_init(&tl);
    for (int iter = 0; iter < 2000; iter++) {
        struct ms_task_sched t[12];
        size_t n = (size_t)ms_rng_below(&r, 13);
        for (size_t i = 0; i < n; i++) {
            uint32_t id;
            bool dup;
            do { /* distinct ids from a small range, so `last` often hits or misses one */
                id = (uint32_t)ms_rng_below(&r, 30);
                dup = false;
                for (size_t j = 0; j < i; j++)
                    dup |= t[j].id == id;
            } while (dup);
            t[i] = (struct ms_task_sched){.id = id,
                                          .prio = (int32_t)ms_rng_below(&r, 3) * 5,
                                          .weight = (uint32_t)ms_rng_below(&r, 4),
                                          .runnable = ms_rng_chance(&r, 2, 3)};
        }
        struct ms_policy p = {.kind = ms_rng_chance(&r, 1, 2) ? MS_POLICY_RR : MS_POLICY_PRIO,
                              .slice_ns = 1 + ms_rng_below(&r, 5000)};
        uint32_t last = ms_rng_chance(&r, 1, 5) ? MS_TASK_NONE : (uint32_t)ms_rng_below(&r, 32);
        size_t horizon = (size_t)ms_rng_below(&r, 20);
        assert_int_equal(ms_policy_timeline(&p, t, n, last, horizon, &tl), MS_OK);

        bool any = false;
        for (size_t i = 0; i < n; i++)
            any |= t[i].runnable;
        assert_int_equal(tl.n, any ? horizon : 0);
        uint64_t prev = last == MS_TASK_NONE ? UINT64_MAX : last;
        for (size_t k = 0; k < tl.n; k++) {
            uint32_t id = tl.e[k].task;
            assert_true(eligible(&p, t, n, id));
            assert_int_equal(id, successor(&p, t, n, prev));
            for (size_t i = 0; i < n; i++)
                if (t[i].id == id)
                    assert_int_equal(tl.e[k].slice_ns,
                                     p.slice_ns * (t[i].weight ? t[i].weight : 1));
            prev = id;
        }
    }
    ms_timeline_fini(&tl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rr_order_and_start),
        cmocka_unit_test(test_rr_weights),
        cmocka_unit_test(test_nothing_runnable_and_horizon),
        cmocka_unit_test(test_prio_preemptive),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_parse_name),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_random_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
