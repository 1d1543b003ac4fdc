/*
 * accuracy.c - prediction-accuracy accounting (contract: accuracy.h).
 *
 * Normalization clamps every range in place, sorts by (address, length) with qsort, then merges
 * in one pass: the write index never passes the read index, and each slot at or past the final
 * count is never written after the sort, so it still holds an input range (the union of the
 * whole array never changes).
 *
 * The tally walks the touched list once with a cursor into the predicted list. For each touched
 * range it skips the predicted ranges that end at or before it, then visits the ones that start
 * before its end; only the last of those can reach into the next touched range (the touched
 * ranges are disjoint), so every predicted range is visited at most twice: O(npred + ntouched).
 */
#include "accuracy.h"

#include <stdlib.h>

/* End of a clamped range: no overflow once clamp() has run. */
static uint64_t range_end(const struct ms_range *r)
{
    return r->addr + r->bytes;
}

static void clamp(struct ms_range *r)
{
    if (r->bytes > UINT64_MAX - r->addr)
        r->bytes = UINT64_MAX - r->addr;
}

static int range_cmp(const void *a, const void *b)
{
    const struct ms_range *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

size_t ms_range_normalize(struct ms_range *r, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        clamp(&r[i]);
    if (n > 1)
        qsort(r, n, sizeof(*r), range_cmp);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].bytes == 0)
            continue;
        if (w > 0 && r[i].addr <= range_end(&r[w - 1])) {
            /* Overlapping or adjacent: extend the last output range. */
            uint64_t e = MS_MAX(range_end(&r[w - 1]), range_end(&r[i]));
            r[w - 1].bytes = e - r[w - 1].addr;
        } else {
            r[w++] = r[i];
        }
    }
    return w;
}

static uint64_t union_bytes(const struct ms_range *r, size_t n)
{
    uint64_t sum = 0; /* disjoint ranges below UINT64_MAX: the sum cannot overflow */
    for (size_t i = 0; i < n; i++)
        sum += r[i].bytes;
    return sum;
}

void ms_acc_tally(struct ms_range *pred, size_t npred, struct ms_range *touched, size_t ntouched,
                  struct ms_acc_tally *out)
{
    npred = ms_range_normalize(pred, npred);
    ntouched = ms_range_normalize(touched, ntouched);

    uint64_t hit = 0, miss_first = 0;
    bool missed = false;
    size_t p = 0;
    for (size_t t = 0; t < ntouched; t++) {
        uint64_t a = touched[t].addr, e = range_end(&touched[t]);
        while (p < npred && range_end(&pred[p]) <= a)
            p++;
        uint64_t cursor = a; /* touched bytes below cursor are accounted for */
        for (size_t k = p; k < npred && pred[k].addr < e; k++) {
            if (!missed && pred[k].addr > cursor) {
                missed = true;
                miss_first = cursor;
            }
            uint64_t lo = MS_MAX(pred[k].addr, a), hi = MS_MIN(range_end(&pred[k]), e);
            hit += hi - lo;
            cursor = hi;
        }
        if (!missed && cursor < e) {
            missed = true;
            miss_first = cursor;
        }
    }

    out->pred_bytes = union_bytes(pred, npred);
    out->touched_bytes = union_bytes(touched, ntouched);
    out->hit_bytes = hit;
    out->miss_bytes = out->touched_bytes - hit;
    out->miss_first = miss_first;
    out->covered = out->miss_bytes == 0;
}
