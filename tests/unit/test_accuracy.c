/*
 * test_accuracy.c - range normalization and the prediction-accuracy tally.
 *
 * Hand-checked cases first (empty, inside, straddling, unsorted/overlapping/adjacent, zero-length,
 * the top of the address space), then a seeded comparison against a brute-force bitmap over a
 * 4096-byte window, placed both at address 0 and at the very top of the address space so that
 * clamping is exercised too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/accuracy.h"
#include "tests/support/ms_testutil.h"

static void check_tally(const struct ms_acc_tally *t, uint64_t pred, uint64_t touched, uint64_t hit,
                        uint64_t miss_first)
{
    assert_int_equal(t->pred_bytes, pred);
    assert_int_equal(t->touched_bytes, touched);
    assert_int_equal(t->hit_bytes, hit);
    assert_int_equal(t->miss_bytes, touched - hit);
    assert_int_equal(t->miss_first, miss_first);
    assert_int_equal(t->covered, touched == hit);
}

static void check_range(const struct ms_range *r, uint64_t addr, uint64_t bytes)
{
    assert_int_equal(r->addr, addr);
    assert_int_equal(r->bytes, bytes);
}

static void empty_inputs(void **state)
{
    struct ms_acc_tally t;
    memset(&t, 0xff, sizeof(t));
    ms_acc_tally(NULL, 0, NULL, 0, &t);
    check_tally(&t, 0, 0, 0, 0);
    assert_true(t.covered);
    assert_int_equal(ms_range_normalize(NULL, 0), 0);

    /* Nothing predicted, something touched: all of it is a miss. */
    struct ms_range touched[] = {{4096, 100}};
    ms_acc_tally(NULL, 0, touched, 1, &t);
    check_tally(&t, 0, 100, 0, 4096);
    assert_false(t.covered);

    /* Predicted, nothing touched: covered. */
    struct ms_range pred[] = {{4096, 100}};
    ms_acc_tally(pred, 1, NULL, 0, &t);
    check_tally(&t, 100, 0, 0, 0);
    assert_true(t.covered);
}

static void inside_one_range(void **state)
{
    struct ms_range pred[] = {{0x7f0000000000ull, 64 * MS_MIB}};
    struct ms_range touched[] = {{0x7f0000000000ull + 4096, 8192}};
    struct ms_acc_tally t;
    ms_acc_tally(pred, 1, touched, 1, &t);
    check_tally(&t, 64 * MS_MIB, 8192, 8192, 0);
    assert_true(t.covered);

    /* Exactly the predicted range. */
    touched[0] = pred[0];
    ms_acc_tally(pred, 1, touched, 1, &t);
    check_tally(&t, 64 * MS_MIB, 64 * MS_MIB, 64 * MS_MIB, 0);
    assert_true(t.covered);
}

static void straddles_end(void **state)
{
    /* Predicted [1000, 2000); touched [1900, 2100): 100 hit, 100 missed from 2000 on. */
    struct ms_range pred[] = {{1000, 1000}};
    struct ms_range touched[] = {{1900, 200}};
    struct ms_acc_tally t;
    ms_acc_tally(pred, 1, touched, 1, &t);
    check_tally(&t, 1000, 200, 100, 2000);
    assert_false(t.covered);

    /* Straddling the start instead: the miss is the touched range's own start. */
    touched[0] = (struct ms_range){900, 200};
    ms_acc_tally(pred, 1, touched, 1, &t);
    check_tally(&t, 1000, 200, 100, 900);

    /* A gap between two predicted ranges inside one touched range. */
    struct ms_range pred2[] = {{300, 100}, {100, 100}}; /* [100,200) [300,400) */
    struct ms_range touched2[] = {{150, 200}};          /* [150,350) */
    ms_acc_tally(pred2, 2, touched2, 1, &t);
    check_tally(&t, 200, 200, 100, 200);
}

static void many_ranges(void **state)
{
    /* Predicted, unsorted: [300,350) [100,200) [200,220) [150,160) and an empty one.
       Union: [100,220) (adjacent ranges merged, [150,160) swallowed) and [300,350) = 170. */
    struct ms_range pred[] = {{300, 50}, {100, 100}, {200, 20}, {150, 10}, {0, 0}};
    /* Touched, unsorted: [340,360) [90,110) [95,100) [210,310) and an empty one.
       Union: [90,110) [210,310) [340,360) = 140.
       Hits: [100,110) 10 + [210,220) 10 + [300,310) 10 + [340,350) 10 = 40. First miss: 90. */
    struct ms_range touched[] = {{340, 20}, {90, 20}, {95, 5}, {210, 100}, {500, 0}};
    struct ms_acc_tally t;
    ms_acc_tally(pred, MS_ARRAY_LEN(pred), touched, MS_ARRAY_LEN(touched), &t);
    check_tally(&t, 170, 140, 40, 90);
    assert_int_equal(t.miss_bytes, 100);

    /* The caller's arrays now start with the normalized lists. */
    check_range(&pred[0], 100, 120);
    check_range(&pred[1], 300, 50);
    check_range(&touched[0], 90, 20);
    check_range(&touched[1], 210, 100);
    check_range(&touched[2], 340, 20);

    /* Tallying the same (now normalized, same count) arrays again gives the same answer. */
    struct ms_acc_tally again;
    ms_acc_tally(pred, MS_ARRAY_LEN(pred), touched, MS_ARRAY_LEN(touched), &again);
    check_tally(&again, 170, 140, 40, 90);

    /* First miss in a later touched range: [90,110) now fully predicted. */
    struct ms_range pred3[] = {{80, 40}, {200, 120}};              /* [80,120) [200,320) */
    struct ms_range touched3[] = {{330, 5}, {90, 20}, {210, 100}}; /* all hit but [330,335) */
    ms_acc_tally(pred3, 2, touched3, 3, &t);
    check_tally(&t, 160, 125, 120, 330);
}

static void normalize_exact(void **state)
{
    struct ms_range r[] = {{50, 10}, {10, 0}, {0, 10}, {10, 5}, {40, 10}, {20, 1}, {55, 1}};
    /* [0,10)+[10,15) adjacent -> [0,15); [20,21); [40,50)+[50,60)+[55,56) -> [40,60). */
    size_t n = ms_range_normalize(r, MS_ARRAY_LEN(r));
    assert_int_equal(n, 3);
    check_range(&r[0], 0, 15);
    check_range(&r[1], 20, 1);
    check_range(&r[2], 40, 20);
    /* Normalizing the whole array again (stale tail included) gives the same list. */
    assert_int_equal(ms_range_normalize(r, MS_ARRAY_LEN(r)), 3);
    assert_int_equal(r[0].bytes, 15);
    assert_int_equal(r[2].bytes, 20);
}

static void zero_length_ignored(void **state)
{
    /* Zero-length ranges never count, even inside, at the edge of or outside other ranges. */
    struct ms_range pred[] = {{100, 0}, {200, 0}};
    struct ms_range touched[] = {{100, 0}, {150, 0}, {300, 0}};
    struct ms_acc_tally t;
    ms_acc_tally(pred, 2, touched, 3, &t);
    check_tally(&t, 0, 0, 0, 0);
    assert_true(t.covered);
    assert_int_equal(ms_range_normalize(pred, 2), 0);

    /* A zero-length "range" in the gap between two adjacent-looking ranges does not bridge it. */
    struct ms_range p2[] = {{100, 50}, {150, 0}, {151, 49}};
    assert_int_equal(ms_range_normalize(p2, 3), 2);
    struct ms_range p3[] = {{100, 50}, {150, 0}, {151, 49}};
    struct ms_range t3[] = {{140, 20}};
    ms_acc_tally(p3, 3, t3, 1, &t);
    check_tally(&t, 99, 20, 19, 150);
}

static void top_of_address_space(void **state)
{
    const uint64_t M = UINT64_MAX;
    /* [M-100, M-100+1000) overflows: clamped to [M-100, M), 100 bytes. */
    struct ms_range pred[] = {{M - 100, 1000}, {M, 5}}; /* the second is empty once clamped */
    struct ms_range touched[] = {{M - 50, M}, {M - 200, 150}}; /* [M-200, M) once merged */
    struct ms_acc_tally t;
    ms_acc_tally(pred, 2, touched, 2, &t);
    check_tally(&t, 100, 200, 100, M - 200);
    assert_int_equal(pred[0].addr, M - 100);
    assert_int_equal(pred[0].bytes, 100);
    assert_int_equal(touched[0].addr, M - 200);
    assert_int_equal(touched[0].bytes, 200);

    /* The whole address space, twice over: one range of UINT64_MAX bytes. */
    struct ms_range all[] = {{5, M}, {0, M}, {M - 1, 1}};
    assert_int_equal(ms_range_normalize(all, 3), 1);
    assert_int_equal(all[0].addr, 0);
    assert_int_equal(all[0].bytes, M);

    /* All predicted: a touch near the top is a hit; the byte at M itself never counts. */
    struct ms_range pall[] = {{0, M}};
    struct ms_range tt[] = {{M - 10, 10}, {M - 3, 100}};
    ms_acc_tally(pall, 1, tt, 2, &t);
    check_tally(&t, M, 10, 10, 0);
    assert_true(t.covered);

    /* Touched everything, predicted one range: miss_bytes does not overflow. */
    struct ms_range tall[] = {{0, M}};
    struct ms_range p1[] = {{M - 4096, 4096}};
    ms_acc_tally(p1, 1, tall, 1, &t);
    check_tally(&t, 4096, M, 4096, 0);
    assert_int_equal(t.miss_bytes, M - 4096);
    assert_false(t.covered);
}

/* ------------------------------------------------------------------------------------------ */

#define WIN 4096
#define MAXR 24

static struct ms_rng rng;
static uint64_t rnd(void)
{
    return ms_rng_next(&rng);
}

/* Random ranges inside [base, base + WIN]; some run past the window (clamped at the top). */
static size_t random_ranges(struct ms_range *r, uint64_t base)
{
    size_t n = rnd() % (MAXR + 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t off = rnd() % WIN;
        uint64_t len = (rnd() % 8 == 0) ? 0 : rnd() % 400;
        if (base == 0 && off + len > WIN)
            len = WIN - off;
        if (base != 0 && rnd() % 16 == 0)
            len = UINT64_MAX - rnd() % 1000; /* wraps: clamped to end at UINT64_MAX */
        r[i] = (struct ms_range){base + off, len};
    }
    return n;
}

/* Mark the window bytes [base, base + WIN) that the ranges cover (clamping as documented). */
static void paint(uint8_t *map, const struct ms_range *r, size_t n, uint64_t base)
{
    memset(map, 0, WIN);
    for (size_t i = 0; i < n; i++) {
        uint64_t end = r[i].bytes > UINT64_MAX - r[i].addr ? UINT64_MAX : r[i].addr + r[i].bytes;
        for (uint64_t a = r[i].addr; a < end && a - base < WIN; a++)
            map[a - base] = 1;
    }
}

static void check_normalized(const struct ms_range *r, size_t n, const uint8_t *want, uint64_t base)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(r[i].bytes > 0);
        assert_true(r[i].bytes <= UINT64_MAX - r[i].addr);
        if (i > 0)
            assert_true(r[i - 1].addr + r[i - 1].bytes < r[i].addr);
    }
    uint8_t got[WIN];
    paint(got, r, n, base);
    assert_memory_equal(got, want, WIN);
}

static void random_against_bitmap(void **state)
{
    ms_rng_seed(&rng, ms_test_seed(12345));
    uint64_t live = ms_alloc_live();
    for (int trial = 0; trial < 200; trial++) {
        uint64_t base = (trial % 2) ? UINT64_MAX - (WIN - 1) : 0;
        struct ms_range pred[MAXR], touched[MAXR], copy[MAXR];
        size_t np = random_ranges(pred, base), nt = random_ranges(touched, base);
        uint8_t pm[WIN], tm[WIN];
        paint(pm, pred, np, base);
        paint(tm, touched, nt, base);

        uint64_t want_p = 0, want_t = 0, want_h = 0, want_first = 0;
        int first = -1;
        for (int i = 0; i < WIN; i++) {
            want_p += pm[i];
            want_t += tm[i];
            want_h += pm[i] && tm[i];
            if (first < 0 && tm[i] && !pm[i])
                first = i;
        }
        if (first >= 0)
            want_first = base + (uint64_t)first;

        /* ms_range_normalize alone: the invariants and the same union. */
        memcpy(copy, pred, sizeof(copy));
        size_t nc = ms_range_normalize(copy, np);
        check_normalized(copy, nc, pm, base);
        assert_int_equal(ms_range_normalize(copy, np), nc); /* stale tail included */
        check_normalized(copy, nc, pm, base);

        struct ms_acc_tally t;
        ms_acc_tally(pred, np, touched, nt, &t);
        check_tally(&t, want_p, want_t, want_h, want_first);
        assert_int_equal(t.covered, first < 0);
    }
    assert_int_equal(ms_alloc_live(), live); /* nothing allocated */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_inputs),         cmocka_unit_test(inside_one_range),
        cmocka_unit_test(straddles_end),        cmocka_unit_test(many_ranges),
        cmocka_unit_test(normalize_exact),      cmocka_unit_test(zero_length_ignored),
        cmocka_unit_test(top_of_address_space), cmocka_unit_test(random_against_bitmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
