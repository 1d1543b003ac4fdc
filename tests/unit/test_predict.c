/*
 * test_predict.c - launch-argument scanning and range prediction.
 *
 * Parameter buffers are packed here the way the driver lays them out (offsets from
 * cuFuncGetParamInfo, e.g. docs/h200-measurements.md: k(int, const float*, double, char, void*,
 * int*) -> offsets 0, 8, 16, 24, 32, 40). A seeded test compares the scanner against a brute
 * force over random buffers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/predict.h"

struct fixture {
    struct ms_rtable rt;
    uint32_t a, b, c, other;
};

static const uint64_t A = 0x7f0000000000ull, B = 0x7f0040000000ull, C = 0x7f0080000000ull;

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    ms_rtable_init(&f->rt);
    assert_int_equal(ms_region_add(&f->rt, 1, A, 300 * MS_MIB, MS_RK_DEVICE, 0, &f->a), MS_OK);
    assert_int_equal(ms_region_add(&f->rt, 1, B, 4 * MS_MIB, MS_RK_DEVICE, 0, &f->b), MS_OK);
    assert_int_equal(ms_region_add(&f->rt, 1, C, MS_MIB, MS_RK_ASYNC, 0, &f->c), MS_OK);
    assert_int_equal(ms_region_add(&f->rt, 2, A, 4 * MS_MIB, MS_RK_DEVICE, 0, &f->other), MS_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    ms_rtable_fini(&f->rt);
    free(f);
    return 0;
}

static void put64(uint8_t *buf, size_t off, uint64_t v)
{
    memcpy(buf + off, &v, 8);
}

static void layout_params(void **state)
{
    struct fixture *f = *state;
    /* k(int n, const float *x, double d, char ch, void *y, int *z) */
    uint8_t p[48] = {0};
    uint32_t n = 77;
    memcpy(p, &n, 4);
    put64(p, 8, A + 100 * MS_MIB); /* inside a, chunk 1 */
    double d = 1.5;
    memcpy(p + 16, &d, 8);
    p[24] = 'x';
    put64(p, 32, C + 5);
    put64(p, 40, 0x1234); /* not device memory */
    struct ms_param_layout lay[] = {{0, 4}, {8, 8}, {16, 8}, {24, 1}, {32, 8}, {40, 8}};
    struct ms_launch l = {.task = 1, .params = p, .params_len = 48, .layout = lay, .nlayout = 6};
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 2);
    /* a has 300 MiB in 64 MiB chunks = 5 chunks; c has one. Whole regions are predicted. */
    assert_int_equal(s.n, 6);
    for (uint32_t k = 0; k < 5; k++)
        assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->a, k)));
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->c, 0)));
    assert_false(ms_chunk_set_has(&s, MS_CHUNK_ID(f->b, 0)));
    assert_int_equal(ms_chunk_set_bytes(&s, &f->rt), 300 * MS_MIB + 2 * MS_MIB);

    /* The same addresses in task 2's parameters name task 2's region only. */
    ms_chunk_set_clear(&s);
    l.task = 2;
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 0); /* A+100MiB is outside task 2's */
    put64(p, 8, A + 5);
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 1);
    assert_int_equal(s.n, 1);
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->other, 0)));
    ms_chunk_set_fini(&s);
}

static void struct_by_value_and_no_layout(void **state)
{
    struct fixture *f = *state;
    /* k(struct {void *p; int n; void *q;} s, int m): one 24-byte parameter, then an int. */
    uint8_t p[32] = {0};
    put64(p, 0, B + 8);
    put64(p, 16, C);
    struct ms_param_layout lay[] = {{0, 24}, {24, 4}};
    struct ms_launch l = {.task = 1, .params = p, .params_len = 28, .layout = lay, .nlayout = 2};
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 2);
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->b, 0)));
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->c, 0)));

    /* No layout: every aligned word is scanned; duplicates are reported once. */
    ms_chunk_set_clear(&s);
    put64(p, 8, B);
    l.layout = NULL;
    l.nlayout = 0;
    l.params_len = 32;
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 2);
    assert_int_equal(s.n, 2);

    /* Small parameters are never pointers: a 4-byte param at offset 8 holding half an address. */
    ms_chunk_set_clear(&s);
    struct ms_param_layout small[] = {{0, 4}, {8, 4}};
    uint8_t q[16] = {0};
    put64(q, 8, B);
    l.params = q;
    l.params_len = 16;
    l.layout = small;
    l.nlayout = 2;
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), 0);

    /* A layout entry beyond the buffer is refused. */
    struct ms_param_layout bad[] = {{12, 8}};
    l.layout = bad;
    l.nlayout = 1;
    assert_int_equal(ms_predict_launch(&f->rt, &l, &s), MS_E_INVAL);
    ms_chunk_set_fini(&s);
}

static void ranges(void **state)
{
    struct fixture *f = *state;
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    /* 10 bytes straddling a's chunk 0 and 1. */
    struct ms_range r = {A + 64 * MS_MIB - 5, 10};
    assert_int_equal(ms_predict_range(&f->rt, 1, r, &s), 10);
    assert_int_equal(s.n, 2);
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->a, 0)));
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->a, 1)));
    /* A range covering the end of a, a gap, and all of b: only bytes inside regions count. */
    ms_chunk_set_clear(&s);
    r = (struct ms_range){A + 300 * MS_MIB - MS_MIB, (B + 4 * MS_MIB) - (A + 299 * MS_MIB)};
    assert_int_equal(ms_predict_range(&f->rt, 1, r, &s), MS_MIB + 4 * MS_MIB);
    assert_int_equal(s.n, 2);
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->a, 4)));
    assert_true(ms_chunk_set_has(&s, MS_CHUNK_ID(f->b, 0)));
    /* Host memory and empty ranges add nothing. */
    ms_chunk_set_clear(&s);
    r = (struct ms_range){0x1000, 4096};
    assert_int_equal(ms_predict_range(&f->rt, 1, r, &s), 0);
    r = (struct ms_range){A, 0};
    assert_int_equal(ms_predict_range(&f->rt, 1, r, &s), 0);
    assert_int_equal(s.n, 0);
    /* A wrapping range is clamped, not trusted. */
    r = (struct ms_range){C, UINT64_MAX};
    assert_true(ms_predict_range(&f->rt, 1, r, &s) > 0);
    ms_chunk_set_fini(&s);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random buffers salted with region addresses: scanner == brute force. */
static void random_against_brute_force(void **state)
{
    struct fixture *f = *state;
    const char *env = getenv("MS_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : 99;
    printf("seed=%llu\n", (unsigned long long)seed);
    rng_state = seed | 1;
    const uint64_t bases[] = {A, B, C, A + 299 * MS_MIB, B + 4 * MS_MIB, 0x42, 0};
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    for (int it = 0; it < 2000; it++) {
        uint8_t p[256];
        size_t len = 8 + rnd() % 248;
        for (size_t i = 0; i < len; i++)
            p[i] = (uint8_t)rnd();
        for (int k = 0; k < 4; k++) {
            size_t off = (rnd() % (len / 8)) * 8;
            uint64_t v = bases[rnd() % MS_ARRAY_LEN(bases)] + (rnd() % 3) * MS_MIB;
            if (off + 8 <= len)
                put64(p, off, v);
        }
        struct ms_launch l = {.task = 1, .params = p, .params_len = len};
        ms_chunk_set_clear(&s);
        int got = ms_predict_launch(&f->rt, &l, &s);
        int want = 0;
        uint32_t regs[4] = {f->a, f->b, f->c, UINT32_MAX};
        int hit[3] = {0};
        for (size_t w = 0; w + 8 <= len; w += 8) {
            uint64_t v;
            memcpy(&v, p + w, 8);
            for (int r = 0; r < 3; r++) {
                struct ms_region *reg = ms_region_get(&f->rt, regs[r]);
                if (v >= reg->base && v < reg->base + MS_ROUND_UP(reg->size, MS_GRAN))
                    hit[r] = 1;
            }
        }
        size_t chunks = 0;
        for (int r = 0; r < 3; r++)
            if (hit[r]) {
                want++;
                chunks += ms_region_get(&f->rt, regs[r])->nchunks;
            }
        assert_int_equal(got, want);
        assert_int_equal(s.n, chunks);
    }
    ms_chunk_set_fini(&s);
}

static void alloc_failure(void **state)
{
    struct fixture *f = *state;
    uint8_t p[8 * 100];
    for (int i = 0; i < 100; i++)
        put64(p, (size_t)i * 8, (i % 2) ? A : C);
    struct ms_launch l = {.task = 1, .params = p, .params_len = sizeof(p)};
    uint64_t base = ms_alloc_live();
    for (uint64_t n = 1;; n++) {
        struct ms_chunk_set s;
        ms_chunk_set_init(&s);
        ms_alloc_fail_after(n);
        int e = ms_predict_launch(&f->rt, &l, &s);
        ms_alloc_fail_after(0);
        ms_chunk_set_fini(&s);
        assert_int_equal(ms_alloc_live(), base);
        if (e >= 0) {
            assert_int_equal(e, 2);
            break;
        }
        assert_int_equal(e, MS_E_NOMEM);
    }
}

/* ms_chunk_set_fit: must-chunks first, resident small chunks kept, smallest region first, a big
 * region's resident chunks before its others, and its others only into free memory. */
static void fit_within(void **unused)
{
    (void)unused;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t big, kv, act, vmm;
    const uint64_t M = MS_MIB;
    assert_int_equal(ms_region_add(&rt, 0, 0x10000000000ull, 256 * M, MS_RK_DEVICE, 0, &big),
                     MS_OK);
    assert_int_equal(ms_region_add(&rt, 0, 0x20000000000ull, 32 * M, MS_RK_DEVICE, 0, &kv), MS_OK);
    assert_int_equal(ms_region_add(&rt, 0, 0x30000000000ull, 2 * M, MS_RK_DEVICE, 0, &act), MS_OK);
    assert_int_equal(ms_region_add(&rt, 0, 0x40000000000ull, 8 * M, MS_RK_VMM, 0, &vmm), MS_OK);
    ms_region_get(&rt, big)->amap = ms_region_get(&rt, kv)->amap = true;
    ms_region_get(&rt, act)->amap = true;
    /* Always-mapped chunks start on the host; big's chunk 2 and kv are resident (as the seam
     * would leave them). An EMPTY chunk (mapped nowhere) would be a must, like vmm's. */
    assert_int_equal(ms_region_mark_host(&rt, big), MS_OK);
    assert_int_equal(ms_region_mark_host(&rt, kv), MS_OK);
    assert_int_equal(ms_region_mark_host(&rt, act), MS_OK);
    ms_chunk_id c2 = MS_CHUNK_ID(big, 2), k0 = MS_CHUNK_ID(kv, 0);
    for (int i = 0; i < 2; i++) {
        ms_chunk_id id = i ? k0 : c2;
        assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_POP_START), MS_OK);
        assert_int_equal(ms_chunk_apply(&rt, id, MS_CE_POP_DONE), MS_OK);
    }
    struct ms_chunk_set need, out;
    ms_chunk_set_init(&need);
    ms_chunk_set_init(&out);
    for (uint32_t k = 0; k < 4; k++)
        assert_int_equal(ms_chunk_set_add(&need, MS_CHUNK_ID(big, k)), MS_OK);
    assert_int_equal(ms_chunk_set_add(&need, MS_CHUNK_ID(act, 0)), MS_OK);
    assert_int_equal(ms_chunk_set_add(&need, MS_CHUNK_ID(vmm, 0)), MS_OK);
    ms_chunk_set_normalize(&need);
    /* cap 150 MiB, 96 resident (big 2, kv): vmm (8, must) + act (2) + big 2 (resident, 64);
     * another big chunk would need memory kv holds: not taken. */
    assert_int_equal(ms_chunk_set_fit(&rt, &need, 150 * M, &out), MS_OK);
    assert_int_equal(out.n, 3);
    assert_true(ms_chunk_set_has(&out, MS_CHUNK_ID(vmm, 0)));
    assert_true(ms_chunk_set_has(&out, MS_CHUNK_ID(act, 0)));
    assert_true(ms_chunk_set_has(&out, c2));
    /* A larger cap with room: one more big chunk (in order), then no more room. */
    assert_int_equal(ms_chunk_set_fit(&rt, &need, 200 * M, &out), MS_OK);
    assert_int_equal(out.n, 4);
    assert_true(ms_chunk_set_has(&out, MS_CHUNK_ID(big, 0)));
    /* A cap below the must-chunks still lists them (the caller refuses). */
    assert_int_equal(ms_chunk_set_fit(&rt, &need, 4 * M, &out), MS_OK);
    assert_true(ms_chunk_set_has(&out, MS_CHUNK_ID(vmm, 0)));
    assert_int_equal(ms_chunk_set_fit(&rt, &need, 150 * M, &need), MS_E_INVAL);
    ms_chunk_set_fini(&need);
    ms_chunk_set_fini(&out);
    ms_rtable_fini(&rt);
}

/* normalize sorts and drops duplicates on both of its paths (insertion sort up to 32 ids, qsort
 * above): random sets of 0 to 80 ids drawn from a small range (many duplicates), checked against
 * a presence table. */
static void normalize_both_paths(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    for (int round = 0; round < 400; round++) {
        struct ms_chunk_set s;
        ms_chunk_set_init(&s);
        bool present[48] = {false};
        size_t n = (size_t)(round % 81);
        for (size_t i = 0; i < n; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t k = (uint32_t)((rng >> 33) % 48);
            present[k] = true;
            /* appended unsorted on purpose (ms_chunk_set_add keeps no order) */
            assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(k % 3 + 1, k)), MS_OK);
        }
        ms_chunk_set_normalize(&s);
        size_t want = 0;
        for (uint32_t k = 0; k < 48; k++) {
            want += present[k];
            assert_int_equal(ms_chunk_set_has(&s, MS_CHUNK_ID(k % 3 + 1, k)), present[k]);
        }
        assert_int_equal(s.n, want);
        for (size_t i = 1; i < s.n; i++)
            assert_true(s.ids[i - 1] < s.ids[i]);
        ms_chunk_set_fini(&s);
    }
}

/* The run-merging path: sets made of 1 to 12 ascending runs of random lengths (up to 2000 ids
 * in all, past the merge's stack buffer), overlapping and repeating each other as the chunks of
 * regions named by several arguments do, checked against a presence table. */
static void normalize_runs(void **state)
{
    (void)state;
    enum { RANGE = 4096 };
    uint64_t rng = 777;
    static bool present[RANGE];
    for (int round = 0; round < 300; round++) {
        struct ms_chunk_set s;
        ms_chunk_set_init(&s);
        memset(present, 0, sizeof present);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t runs = 1 + (size_t)((rng >> 33) % 12);
        for (size_t r = 0; r < runs; r++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t start = (uint32_t)((rng >> 33) % RANGE);
            uint32_t len = (uint32_t)((rng >> 13) % 200) + 1;
            if (round % 3 == 0)
                len *= 10; /* some sets pass 512 ids */
            for (uint32_t k = start; k < start + len && k < RANGE; k++) {
                present[k] = true;
                assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(k / 1024 + 1, k % 1024)), MS_OK);
            }
        }
        ms_chunk_set_normalize(&s);
        size_t want = 0;
        for (uint32_t k = 0; k < RANGE; k++) {
            want += present[k];
            assert_int_equal(ms_chunk_set_has(&s, MS_CHUNK_ID(k / 1024 + 1, k % 1024)), present[k]);
        }
        assert_int_equal(s.n, want);
        for (size_t i = 1; i < s.n; i++)
            assert_true(s.ids[i - 1] < s.ids[i]);
        ms_chunk_set_fini(&s);
    }
}

/* The ascending promise (predict.h): random appends of single ids and whole regions, clears and
 * normalizations; after each, a set marked ascending is strictly ascending, ids appended in order
 * keep the mark, and ms_chunk_set_whole answers as ms_region_whole over the same ids at every
 * position, marked or not. */
static void ascending_promise(void **state)
{
    struct fixture *f = *state;
    const uint32_t regs[] = {f->a, f->b, f->c, f->other};
    assert_true(f->rt.regions[f->a].nchunks > 2); /* a whole run with a middle to check */
    uint64_t rng = 4242;
    struct ms_chunk_set s;
    ms_chunk_set_init(&s);
    assert_true(s.asc);
    for (int step = 0; step < 4000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t pick = (uint32_t)(rng >> 33);
        ms_chunk_id last = s.n ? s.ids[s.n - 1] : 0;
        bool was = s.asc, in_order;
        switch (pick % 8) {
        case 0:
            ms_chunk_set_clear(&s);
            assert_true(s.asc);
            break;
        case 1:
            ms_chunk_set_normalize(&s);
            assert_true(s.asc);
            break;
        case 2:
        case 3: {
            uint32_t r = regs[(pick >> 4) % 4];
            in_order = !s.n || MS_CHUNK_ID(r, 0) > last;
            assert_int_equal(ms_chunk_set_add_region(&s, &f->rt, r), MS_OK);
            assert_int_equal(s.asc, was && in_order);
            break;
        }
        default: {
            uint32_t r = regs[(pick >> 4) % 4];
            ms_chunk_id id = MS_CHUNK_ID(r, (pick >> 8) % f->rt.regions[r].nchunks);
            in_order = !s.n || id > last;
            assert_int_equal(ms_chunk_set_add(&s, id), MS_OK);
            assert_int_equal(s.asc, was && in_order);
            break;
        }
        }
        if (s.asc)
            for (size_t i = 1; i < s.n; i++)
                assert_true(s.ids[i - 1] < s.ids[i]);
        for (size_t i = 0; i < s.n; i++)
            assert_ptr_equal(ms_chunk_set_whole(&f->rt, &s, i),
                             ms_region_whole(&f->rt, s.ids + i, s.n - i));
        assert_null(ms_chunk_set_whole(&f->rt, &s, s.n));
    }
    /* A region named whole, then its first and last chunk only: whole, then not. */
    ms_chunk_set_clear(&s);
    assert_int_equal(ms_chunk_set_add_region(&s, &f->rt, f->a), MS_OK);
    assert_ptr_equal(ms_chunk_set_whole(&f->rt, &s, 0), &f->rt.regions[f->a]);
    ms_chunk_set_clear(&s);
    assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(f->a, 0)), MS_OK);
    assert_int_equal(ms_chunk_set_add(&s, MS_CHUNK_ID(f->a, f->rt.regions[f->a].nchunks - 1)),
                     MS_OK);
    assert_null(ms_chunk_set_whole(&f->rt, &s, 0));
    ms_chunk_set_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(layout_params, setup, teardown),
        cmocka_unit_test_setup_teardown(struct_by_value_and_no_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(random_against_brute_force, setup, teardown),
        cmocka_unit_test_setup_teardown(alloc_failure, setup, teardown),
        cmocka_unit_test(fit_within),
        cmocka_unit_test(normalize_both_paths),
        cmocka_unit_test(normalize_runs),
        cmocka_unit_test_setup_teardown(ascending_promise, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
