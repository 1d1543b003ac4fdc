/*
 * slab.c - small allocations packed into shared 2 MiB regions (contract: slab.h).
 *
 * Design
 *   Each slab keeps a bitmap of its granules and a sorted array of its live blocks. Placing a
 *   block scans the slabs in address order, skipping those with too few free granules, and
 *   in each the bitmap for the first run long enough (whole words at a time where they are
 *   full): a few hundred word reads at worst, against the microseconds a driver allocation
 *   costs. Lookups are binary searches, over the slabs and then over a slab's blocks.
 */
#include "core/slab.h"

#include <string.h>

#define WORDS (MS_SLAB_GRANULES / 64)

static bool bit(const struct ms_slab *s, uint32_t g)
{
    return (s->used[g / 64] >> (g % 64)) & 1u;
}

static void set_bits(struct ms_slab *s, uint32_t g, uint32_t n, bool on)
{
    for (uint32_t i = g; i < g + n; i++) {
        uint64_t m = 1ull << (i % 64);
        s->used[i / 64] = on ? s->used[i / 64] | m : s->used[i / 64] & ~m;
    }
}

/* The first granule of a free run of n in s, or -1. */
static long first_fit(const struct ms_slab *s, uint32_t n)
{
    uint32_t run = 0, start = 0;
    for (uint32_t g = 0; g < MS_SLAB_GRANULES;) {
        if (g % 64 == 0 && s->used[g / 64] == ~0ull) {
            run = 0;
            g += 64;
            continue;
        }
        if (bit(s, g)) {
            run = 0;
        } else {
            if (run++ == 0)
                start = g;
            if (run == n)
                return (long)start;
        }
        g++;
    }
    return -1;
}

/* Index of the first block of s with offset >= off. */
static size_t block_pos(const struct ms_slab *s, uint32_t off)
{
    size_t lo = 0, hi = s->nblk;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->blk[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the first slab with base >= base. */
static size_t slab_pos(const struct ms_slabs *t, uint64_t base)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->s[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

long ms_slabs_find(const struct ms_slabs *t, uint64_t p)
{
    /* the last slab with base <= p */
    size_t at = p == UINT64_MAX ? t->n : slab_pos(t, p + 1);
    if (at == 0 || p - t->s[at - 1].base >= MS_GRAN)
        return -1;
    return (long)(at - 1);
}

int ms_slabs_add(struct ms_slabs *t, uint64_t base, uint32_t region)
{
    if (!t || base % MS_SLAB_ALIGN != 0 || base > UINT64_MAX - MS_GRAN)
        return MS_E_INVAL;
    size_t lo = slab_pos(t, base);
    if ((lo < t->n && t->s[lo].base < base + MS_GRAN) ||
        (lo > 0 && t->s[lo - 1].base + MS_GRAN > base))
        return MS_E_OVERLAP;
    int e = ms_grow((void **)&t->s, &t->cap, t->n + 1, sizeof(*t->s));
    if (e != MS_OK)
        return e;
    memmove(&t->s[lo + 1], &t->s[lo], (t->n - lo) * sizeof(*t->s));
    t->s[lo] = (struct ms_slab){.base = base, .region = region, .free_granules = MS_SLAB_GRANULES};
    t->n++;
    return MS_OK;
}

int ms_slabs_alloc(struct ms_slabs *t, uint64_t bytes, unsigned long long buffer, uint64_t *out,
                   uint32_t *region)
{
    if (!t || !out || !region || bytes == 0 || bytes > MS_SLAB_MAX)
        return MS_E_INVAL;
    uint32_t n = (uint32_t)(MS_ROUND_UP(bytes, MS_SLAB_ALIGN) / MS_SLAB_ALIGN);
    for (size_t i = 0; i < t->n; i++) {
        struct ms_slab *s = &t->s[i];
        if (s->free_granules < n)
            continue;
        long g = first_fit(s, n);
        if (g < 0)
            continue;
        uint32_t off = (uint32_t)g * MS_SLAB_ALIGN;
        int e = ms_grow((void **)&s->blk, &s->capblk, s->nblk + 1, sizeof(*s->blk));
        if (e != MS_OK)
            return e;
        size_t at = block_pos(s, off);
        memmove(&s->blk[at + 1], &s->blk[at], (s->nblk - at) * sizeof(*s->blk));
        s->blk[at] = (struct ms_slab_block){.off = off, .size = (uint32_t)bytes, .buffer = buffer};
        s->nblk++;
        set_bits(s, (uint32_t)g, n, true);
        s->free_granules -= n;
        *out = s->base + off;
        *region = s->region;
        return MS_OK;
    }
    return MS_E_NOSPACE;
}

struct ms_slab_block *ms_slabs_block_at(const struct ms_slabs *t, size_t slab, uint64_t p)
{
    if (!t || slab >= t->n || p < t->s[slab].base || p - t->s[slab].base >= MS_GRAN)
        return NULL;
    const struct ms_slab *s = &t->s[slab];
    uint32_t off = (uint32_t)(p - s->base);
    size_t at = block_pos(s, off + 1); /* the first block past off; the one before may hold it */
    if (at == 0)
        return NULL;
    struct ms_slab_block *b = &s->blk[at - 1];
    return off < b->off + b->size ? b : NULL;
}

int ms_slabs_free(struct ms_slabs *t, uint64_t p, uint32_t *region, bool *empty)
{
    if (!t || !region || !empty)
        return MS_E_INVAL;
    long i = ms_slabs_find(t, p);
    if (i < 0)
        return MS_E_NOTFOUND;
    struct ms_slab *s = &t->s[i];
    uint32_t off = (uint32_t)(p - s->base);
    size_t at = block_pos(s, off);
    if (at == s->nblk || s->blk[at].off != off)
        return MS_E_NOTFOUND;
    uint32_t n = (uint32_t)(MS_ROUND_UP(s->blk[at].size, MS_SLAB_ALIGN) / MS_SLAB_ALIGN);
    set_bits(s, off / MS_SLAB_ALIGN, n, false);
    s->free_granules += n;
    memmove(&s->blk[at], &s->blk[at + 1], (s->nblk - at - 1) * sizeof(*s->blk));
    s->nblk--;
    *region = s->region;
    *empty = s->nblk == 0;
    return MS_OK;
}

int ms_slabs_remove(struct ms_slabs *t, uint32_t region)
{
    if (!t)
        return MS_E_INVAL;
    for (size_t i = 0; i < t->n; i++)
        if (t->s[i].region == region) {
            if (t->s[i].nblk)
                return MS_E_STATE;
            ms_free(t->s[i].blk);
            memmove(&t->s[i], &t->s[i + 1], (t->n - i - 1) * sizeof(*t->s));
            t->n--;
            return MS_OK;
        }
    return MS_E_NOTFOUND;
}

void ms_slabs_fini(struct ms_slabs *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        ms_free(t->s[i].blk);
    ms_free(t->s);
    *t = (struct ms_slabs){0};
}
