/*
 * test_slab.c - the small-allocation slabs' bookkeeping (core/slab.h).
 *
 * Random allocations and frees over a few slabs, checked after every step against a shadow list
 * of live blocks: no two overlap, each lies in its slab, the granule bitmaps and free counts are
 * exactly the live blocks', every lookup inside a block finds it and every other address none.
 * Then the edges: a full slab refuses, a block of MS_SLAB_MAX fits an empty slab, frees of a
 * non-start or twice are refused, removing a slab that holds blocks is refused, overlapping
 * slabs are refused, and an allocation failure changes nothing (ms_alloc_fail_after).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/slab.h"

#define NS 3
#define BASE0 (1ull << 40)

struct live {
    uint64_t p, size;
    unsigned long long buffer;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void check_all(const struct ms_slabs *t, const struct live *l, size_t n)
{
    for (size_t i = 0; i < t->n; i++) {
        const struct ms_slab *s = &t->s[i];
        if (i > 0)
            assert_true(t->s[i - 1].base + MS_GRAN <= s->base);
        /* the bitmap is exactly the live blocks' granules */
        uint64_t want[MS_SLAB_GRANULES / 64] = {0};
        uint32_t used = 0;
        for (size_t k = 0; k < n; k++) {
            if (l[k].p < s->base || l[k].p >= s->base + MS_GRAN)
                continue;
            uint64_t g0 = (l[k].p - s->base) / MS_SLAB_ALIGN;
            uint64_t ng = MS_ROUND_UP(l[k].size, MS_SLAB_ALIGN) / MS_SLAB_ALIGN;
            assert_true(l[k].p + ng * MS_SLAB_ALIGN <= s->base + MS_GRAN);
            for (uint64_t g = g0; g < g0 + ng; g++) {
                assert_false((want[g / 64] >> (g % 64)) & 1u); /* no overlap */
                want[g / 64] |= 1ull << (g % 64);
            }
            used += (uint32_t)ng;
        }
        assert_memory_equal(want, s->used, sizeof(want));
        assert_int_equal(s->free_granules, MS_SLAB_GRANULES - used);
        for (size_t b = 1; b < s->nblk; b++)
            assert_true(s->blk[b - 1].off < s->blk[b].off);
    }
    for (size_t k = 0; k < n; k++) {
        long si = ms_slabs_find(t, l[k].p);
        assert_true(si >= 0);
        uint64_t probes[] = {l[k].p, l[k].p + l[k].size - 1, l[k].p + l[k].size / 2};
        for (size_t j = 0; j < MS_ARRAY_LEN(probes); j++) {
            const struct ms_slab_block *b = ms_slabs_block_at(t, (size_t)si, probes[j]);
            assert_non_null(b);
            assert_int_equal(t->s[si].base + b->off, l[k].p);
            assert_int_equal(b->size, l[k].size);
            assert_int_equal(b->buffer, l[k].buffer);
        }
    }
    /* a granule no block holds is in no block */
    for (size_t i = 0; i < t->n; i++)
        for (uint32_t g = 0; g < MS_SLAB_GRANULES; g += 37)
            if (!((t->s[i].used[g / 64] >> (g % 64)) & 1u))
                assert_null(ms_slabs_block_at(t, i, t->s[i].base + (uint64_t)g * MS_SLAB_ALIGN));
}

static void random_ops(void **unused)
{
    (void)unused;
    struct ms_slabs t = {0};
    for (uint32_t i = 0; i < NS; i++)
        assert_int_equal(ms_slabs_add(&t, BASE0 + (NS - i) * 4 * MS_GRAN, 10 + i), MS_OK);
    static struct live l[NS * MS_SLAB_GRANULES];
    size_t n = 0, refused = 0;
    unsigned long long next = 1;
    for (int op = 0; op < 6000; op++) {
        if (n && rnd() % 100 < 45) {
            size_t k = rnd() % n;
            uint32_t region = 0;
            bool empty = false;
            assert_int_equal(ms_slabs_free(&t, l[k].p, &region, &empty), MS_OK);
            long si = ms_slabs_find(&t, l[k].p);
            assert_true(si >= 0);
            assert_int_equal(region, t.s[si].region);
            assert_int_equal(empty, t.s[si].nblk == 0);
            l[k] = l[--n];
        } else {
            /* mostly small, some up to the limit */
            uint64_t size = rnd() % 8 ? 1 + rnd() % 8192 : 1 + rnd() % MS_SLAB_MAX;
            uint64_t p = 0;
            uint32_t region = 0;
            int e = ms_slabs_alloc(&t, size, next, &p, &region);
            if (e == MS_E_NOSPACE) {
                refused++;
                continue;
            }
            assert_int_equal(e, MS_OK);
            assert_int_equal(p % MS_SLAB_ALIGN, 0);
            long si = ms_slabs_find(&t, p);
            assert_true(si >= 0);
            assert_int_equal(region, t.s[si].region);
            l[n++] = (struct live){p, size, next++};
        }
        if (op % 50 == 0)
            check_all(&t, l, n);
    }
    check_all(&t, l, n);
    assert_true(refused > 0); /* the slabs filled up at times */
    ms_slabs_fini(&t);
    assert_int_equal(ms_alloc_live(), 0);
}

static void edges(void **unused)
{
    (void)unused;
    struct ms_slabs t = {0};
    uint64_t p = 0, q = 0;
    uint32_t region = 0;
    bool empty = false;
    assert_int_equal(ms_slabs_alloc(&t, 1, 1, &p, &region), MS_E_NOSPACE);
    assert_int_equal(ms_slabs_add(&t, BASE0 + 100, 1), MS_E_INVAL);
    assert_int_equal(ms_slabs_add(&t, BASE0, 1), MS_OK);
    assert_int_equal(ms_slabs_add(&t, BASE0 + MS_GRAN / 2, 2), MS_E_OVERLAP);
    assert_int_equal(ms_slabs_add(&t, BASE0 - MS_GRAN / 2, 2), MS_E_OVERLAP);
    assert_int_equal(ms_slabs_alloc(&t, 0, 1, &p, &region), MS_E_INVAL);
    assert_int_equal(ms_slabs_alloc(&t, MS_SLAB_MAX + 1, 1, &p, &region), MS_E_INVAL);
    /* two halves fill the slab */
    assert_int_equal(ms_slabs_alloc(&t, MS_SLAB_MAX, 1, &p, &region), MS_OK);
    assert_int_equal(region, 1);
    assert_int_equal(ms_slabs_alloc(&t, MS_SLAB_MAX, 2, &q, &region), MS_OK);
    assert_int_equal(q, p + MS_SLAB_MAX);
    assert_int_equal(ms_slabs_alloc(&t, 1, 3, &p, &region), MS_E_NOSPACE);
    assert_int_equal(ms_slabs_remove(&t, 1), MS_E_STATE);
    assert_int_equal(ms_slabs_free(&t, q + 512, &region, &empty), MS_E_NOTFOUND);
    assert_int_equal(ms_slabs_free(&t, q, &region, &empty), MS_OK);
    assert_false(empty);
    assert_int_equal(ms_slabs_free(&t, q, &region, &empty), MS_E_NOTFOUND);
    assert_int_equal(ms_slabs_free(&t, BASE0 + 8 * MS_GRAN, &region, &empty), MS_E_NOTFOUND);
    assert_int_equal(ms_slabs_free(&t, BASE0, &region, &empty), MS_OK);
    assert_true(empty);
    assert_int_equal(ms_slabs_remove(&t, 1), MS_OK);
    assert_int_equal(ms_slabs_remove(&t, 1), MS_E_NOTFOUND);
    assert_int_equal(ms_slabs_find(&t, BASE0), -1);
    /* a failed allocation of a fresh slab's block array changes nothing */
    assert_int_equal(ms_slabs_add(&t, BASE0, 5), MS_OK);
    ms_alloc_fail_after(1);
    assert_int_equal(ms_slabs_alloc(&t, 4096, 4, &q, &region), MS_E_NOMEM);
    ms_alloc_fail_after(0);
    assert_int_equal(t.s[0].free_granules, MS_SLAB_GRANULES);
    assert_int_equal(t.s[0].nblk, 0);
    assert_int_equal(ms_slabs_alloc(&t, 4096, 4, &q, &region), MS_OK);
    assert_int_equal(q, BASE0);
    assert_int_equal(region, 5);
    ms_slabs_fini(&t);
    assert_int_equal(ms_alloc_live(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_ops),
        cmocka_unit_test(edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
