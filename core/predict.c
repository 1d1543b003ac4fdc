/*
 * predict.c - launch and range prediction (contract: predict.h).
 *
 * A launch scan reads each candidate 8-byte word with memcpy (the buffer need not be aligned in
 * host memory; alignment is relative to the start of the parameter buffer, as the driver lays
 * parameters out) and looks it up in the region table: O(words * log regions). Zero and small
 * values are skipped cheaply by the lookup failing. Each referenced region contributes all of its
 * chunks once.
 */
#include "predict.h"

#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ms_chunk_set_init(struct ms_chunk_set *s)
{
    memset(s, 0, sizeof(*s));
    s->asc = true;
}

void ms_chunk_set_fini(struct ms_chunk_set *s)
{
    ms_free(s->ids);
    memset(s, 0, sizeof(*s));
    s->asc = true;
}

void ms_chunk_set_clear(struct ms_chunk_set *s)
{
    s->n = 0;
    s->asc = true;
}

int ms_chunk_set_add_region(struct ms_chunk_set *s, const struct ms_rtable *rt, uint32_t region)
{
    const struct ms_region *r =
        region < rt->nslots && rt->regions[region].live ? &rt->regions[region] : NULL;
    if (!r || !r->nchunks)
        return MS_OK;
    int e = ms_grow((void **)&s->ids, &s->cap, s->n + r->nchunks, sizeof(*s->ids));
    if (e)
        return e;
    ms_chunk_id first = MS_CHUNK_ID(region, 0), *d = s->ids + s->n;
    if (s->n && first <= d[-1])
        s->asc = false;
    /* A whole region's ids are consecutive numbers: two per vector store (a launch naming a
     * large allocation names every one of its chunks). */
    typedef uint64_t v2u64 __attribute__((vector_size(16)));
    v2u64 v = {first, first + 1}, two = {2, 2};
    uint32_t k = 0, nc = r->nchunks;
    for (; k + 2 <= nc; k += 2) {
        memcpy(d + k, &v, sizeof(v));
        v += two;
    }
    if (k < nc)
        d[k] = first + k;
    s->n += r->nchunks;
    return MS_OK;
}

struct ms_region *ms_chunk_set_whole(struct ms_rtable *rt, const struct ms_chunk_set *s, size_t i)
{
    if (i >= s->n)
        return NULL;
    if (!s->asc)
        return ms_region_whole(rt, s->ids + i, s->n - i);
    /* Strictly ascending from (reg, 0) to (reg, nchunks - 1) in nchunks ids: every id between
     * is there, so the ends are the whole answer. */
    struct ms_region *r = ms_region_whole_ends(rt, s->ids + i, s->n - i);
#ifdef MS_CHECK_SETS
    if (r && ms_region_whole(rt, s->ids + i, s->n - i) != r) {
        fprintf(stderr, "ms_chunk_set_whole: a set marked ascending is not (at %zu of %zu)\n", i,
                s->n);
        abort();
    }
#endif
    return r;
}

int ms_chunk_set_add(struct ms_chunk_set *s, ms_chunk_id id)
{
    if (s->n == s->cap) {
        int e = ms_grow((void **)&s->ids, &s->cap, s->n + 1, sizeof(*s->ids));
        if (e)
            return e;
    }
    if (s->n && id <= s->ids[s->n - 1])
        s->asc = false;
    s->ids[s->n++] = id;
    return MS_OK;
}

static int id_cmp(const void *a, const void *b)
{
    ms_chunk_id x = *(const ms_chunk_id *)a, y = *(const ms_chunk_id *)b;
    return x < y ? -1 : x > y;
}

/* Merge the sorted runs a[0, m) and a[m, n) through tmp (n ids). */
static void merge_runs(ms_chunk_id *a, size_t m, size_t n, ms_chunk_id *tmp)
{
    size_t i = 0, j = m, k = 0;
    while (i < m && j < n)
        tmp[k++] = a[j] < a[i] ? a[j++] : a[i++];
    while (i < m)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof(*a));
}

/*
 * Sort a[0, n) of `runs` ascending runs by merging neighbouring runs, round by round
 * (O(n log runs)): a launch's set is the concatenation of its regions' chunk ranges, each
 * ascending, so a set of a few thousand ids is a handful of runs. False when tmp cannot be had.
 */
static bool merge_sort_runs(ms_chunk_id *a, size_t n, size_t runs)
{
    ms_chunk_id stack[512];
    ms_chunk_id *tmp = n <= MS_ARRAY_LEN(stack) ? stack : ms_malloc(n * sizeof(*tmp));
    if (!tmp)
        return false;
    while (runs > 1) {
        size_t start = 0;
        runs = 0;
        while (start < n) {
            size_t mid = start + 1;
            while (mid < n && a[mid - 1] <= a[mid])
                mid++;
            size_t end = mid;
            if (end < n) {
                end++;
                while (end < n && a[end - 1] <= a[end])
                    end++;
                merge_runs(a + start, mid - start, end - start, tmp);
            }
            runs++;
            start = end;
        }
    }
    if (tmp != stack)
        ms_free(tmp);
    return true;
}

void ms_chunk_set_normalize(struct ms_chunk_set *s)
{
    if (s->asc || s->n < 2) {
        s->asc = true;
        return;
    }
    size_t runs = 1, dups = 0;
    for (size_t i = 1; i < s->n; i++) {
        runs += s->ids[i] < s->ids[i - 1];
        dups += s->ids[i] == s->ids[i - 1];
    }
    s->asc = true; /* below, whichever way */
    if (runs == 1 && dups == 0)
        return; /* strictly ascending: one region, or regions named in order */
    if (runs == 1) {
        /* ascending with repeats: only the duplicates go */
    } else if (s->n <= 32) {
        /* A launch names a few chunks: an insertion sort beats qsort's setup and calls. */
        for (size_t i = 1; i < s->n; i++) {
            ms_chunk_id v = s->ids[i];
            size_t j = i;
            for (; j > 0 && s->ids[j - 1] > v; j--)
                s->ids[j] = s->ids[j - 1];
            s->ids[j] = v;
        }
    } else if (runs > s->n / 8 || !merge_sort_runs(s->ids, s->n, runs)) {
        qsort(s->ids, s->n, sizeof(*s->ids), id_cmp);
    }
    size_t w = 1;
    for (size_t i = 1; i < s->n; i++)
        if (s->ids[i] != s->ids[w - 1])
            s->ids[w++] = s->ids[i];
    s->n = w;
}

bool ms_chunk_set_has(const struct ms_chunk_set *s, ms_chunk_id id)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->ids[lo] == id;
}

uint64_t ms_chunk_set_bytes(const struct ms_chunk_set *s, struct ms_rtable *rt)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(rt, s->ids[i]);
        if (c)
            sum += c->bytes;
    }
    return sum;
}

/* Add all chunks of `region` unless already added in this call (tracked in seen). */
static int add_region(const struct ms_rtable *rt, uint32_t region, struct ms_chunk_set *out,
                      uint32_t *seen, size_t *nseen)
{
    for (size_t i = 0; i < *nseen; i++)
        if (seen[i] == region)
            return 0;
    int e = ms_chunk_set_add_region(out, rt, region);
    if (e)
        return e;
    seen[(*nseen)++] = region;
    return 1;
}

/* Words of p[off, end) that are addresses in task's regions, [lo, hi) their span
 * (ms_rtable_span, taken once per launch). */
static int scan_words(const struct ms_rtable *rt, uint32_t task, uint64_t lo, uint64_t hi,
                      const uint8_t *p, size_t off, size_t end, struct ms_chunk_set *out,
                      uint32_t *seen, size_t *nseen)
{
    int found = 0;
    for (size_t w = MS_ROUND_UP(off, 8); w + 8 <= end; w += 8) {
        uint64_t v;
        memcpy(&v, p + w, sizeof(v));
        uint32_t region;
        /* sizes, counts, floats, host pointers: outside every region, no search */
        if (v == 0 || v < lo || v >= hi || ms_rtable_lookup(rt, task, v, &region, NULL) != MS_OK)
            continue;
        int e = add_region(rt, region, out, seen, nseen);
        if (e < 0)
            return e;
        found += e;
    }
    return found;
}

/* A launch whose parameter bytes and layout can be read: every layout entry inside them. */
static bool launch_ok(const struct ms_launch *l)
{
    if (!l || (l->params_len && !l->params) || (l->nlayout && !l->layout))
        return false;
    for (size_t i = 0; i < l->nlayout; i++) {
        const struct ms_param_layout *pl = &l->layout[i];
        if ((size_t)pl->offset > l->params_len || (size_t)pl->size > l->params_len - pl->offset)
            return false;
    }
    return true;
}

int ms_predict_launch(const struct ms_rtable *rt, const struct ms_launch *l,
                      struct ms_chunk_set *out)
{
    if (!launch_ok(l))
        return MS_E_INVAL;
    /* At most one region per 8-byte word: bound the seen list by the word count. */
    size_t maxwords = l->params_len / 8 + 1;
    uint32_t stackseen[64];
    uint32_t *seen = stackseen;
    if (maxwords > MS_ARRAY_LEN(stackseen)) {
        seen = ms_malloc(maxwords * sizeof(*seen));
        if (!seen)
            return MS_E_NOMEM;
    }
    size_t nseen = 0;
    int found = 0, e = 0;
    uint64_t lo, hi;
    ms_rtable_span(rt, l->task, &lo, &hi);
    if (l->nlayout == 0) {
        e = scan_words(rt, l->task, lo, hi, l->params, 0, l->params_len, out, seen, &nseen);
        found = e;
    } else {
        for (size_t i = 0; i < l->nlayout && e >= 0; i++) {
            const struct ms_param_layout *pl = &l->layout[i];
            if (pl->size < 8)
                continue;
            e = scan_words(rt, l->task, lo, hi, l->params, pl->offset,
                           (size_t)pl->offset + pl->size, out, seen, &nseen);
            if (e > 0)
                found += e;
        }
    }
    if (seen != stackseen)
        ms_free(seen);
    if (e < 0)
        return e;
    ms_chunk_set_normalize(out);
    return found;
}

int64_t ms_predict_range(const struct ms_rtable *rt, uint32_t task, struct ms_range r,
                         struct ms_chunk_set *out)
{
    if (r.bytes == 0)
        return 0;
    uint64_t end = r.addr + r.bytes;
    if (end < r.addr)
        end = UINT64_MAX; /* clamp a wrapping range */
    int64_t inside = 0;
    /* Walk the task's regions in address order from the one at or before r.addr. */
    size_t lo = 0, hi = rt->nindex;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct ms_rindex *ix = &rt->index[mid];
        if (ix->task < task || (ix->task == task && ix->base <= r.addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t pos = lo > 0 ? lo - 1 : 0;
    for (; pos < rt->nindex && rt->index[pos].task <= task; pos++) {
        const struct ms_rindex *ix = &rt->index[pos];
        if (ix->task != task)
            continue;
        const struct ms_region *reg = &rt->regions[ix->region];
        uint64_t rb = reg->base, re = reg->base + MS_ROUND_UP(reg->size, MS_GRAN);
        if (rb >= end)
            break;
        if (re <= r.addr)
            continue;
        uint64_t a = MS_MAX(rb, r.addr), b = MS_MIN(re, end);
        uint32_t k0 = ms_region_chunk_at(reg, a - rb), k1 = ms_region_chunk_at(reg, b - 1 - rb);
        for (uint32_t k = k0; k <= k1; k++) {
            int e = ms_chunk_set_add(out, MS_CHUNK_ID(ix->region, k));
            if (e)
                return e;
        }
        inside += (int64_t)(b - a);
    }
    ms_chunk_set_normalize(out);
    return inside;
}

int ms_chunk_sets_reserve(struct ms_chunk_set **sets, size_t *cap, size_t n)
{
    if (n <= *cap)
        return MS_OK;
    size_t c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    struct ms_chunk_set *w = ms_realloc(*sets, c * sizeof(*w));
    if (!w)
        return MS_E_NOMEM;
    for (size_t k = *cap; k < c; k++)
        ms_chunk_set_init(&w[k]);
    *sets = w;
    *cap = c;
    return MS_OK;
}

/* A region that cannot be resident whole beside others: half the budget or more. */
static bool big_region(const struct ms_region *r, uint64_t cap)
{
    return MS_ROUND_UP(r->size, MS_GRAN) >= cap / 2;
}

int ms_chunk_set_fit(struct ms_rtable *rt, const struct ms_chunk_set *need, uint64_t cap,
                     struct ms_chunk_set *out)
{
    if (!rt || !need || !out || need == out)
        return MS_E_INVAL;
    ms_chunk_set_clear(out);
    uint64_t used = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < need->n; i++) {
            const struct ms_region *r = ms_region_get(rt, MS_CHUNK_REGION(need->ids[i]));
            const struct ms_chunk *c = ms_chunk_get(rt, need->ids[i]);
            if (!r || !c)
                continue;
            bool ready = ms_chunk_state_ready((enum ms_chunk_state)c->state);
            /* must: not always mapped, or EMPTY (mapped nowhere until populated) */
            bool must = !r->amap || c->state == MS_CS_EMPTY;
            if (pass == 0 ? !must : (must || !ready || big_region(r, cap)))
                continue;
            if (pass == 1 && used + c->bytes > cap)
                continue;
            used += c->bytes;
            int e = ms_chunk_set_add(out, need->ids[i]);
            if (e)
                return e;
        }
    /* The rest, by region size (regions of one command: a handful; a selection each round). */
    uint32_t last = UINT32_MAX;
    uint64_t moving = 0; /* non-resident bytes taken so far */
    for (;;) {
        uint64_t best_size = UINT64_MAX;
        uint32_t best = UINT32_MAX;
        for (size_t i = 0; i < need->n; i++) {
            uint32_t reg = MS_CHUNK_REGION(need->ids[i]);
            const struct ms_region *r = ms_region_get(rt, reg);
            if (!r || !r->amap || r->size >= best_size)
                continue;
            if (last != UINT32_MAX) {
                const struct ms_region *l = ms_region_get(rt, last);
                if (r->size < l->size || (r->size == l->size && reg <= last))
                    continue; /* taken in an earlier round */
            }
            best_size = r->size;
            best = reg;
        }
        if (best == UINT32_MAX)
            break;
        bool big = big_region(ms_region_get(rt, best), cap);
        for (size_t i = 0; i < need->n; i++) {
            const struct ms_chunk *c = ms_chunk_get(rt, need->ids[i]);
            if (MS_CHUNK_REGION(need->ids[i]) != best || !c || c->state == MS_CS_EMPTY ||
                used + c->bytes > cap)
                continue;
            bool ready = ms_chunk_state_ready((enum ms_chunk_state)c->state);
            if (ready && !big)
                continue; /* small regions' resident chunks are in already */
            /* A big region grows only into free memory: evicting other regions' chunks for
             * it pushes out what the next commands need (churn: tests/shim, engine/onebuf). */
            if (!ready && big && rt->resident_bytes + moving + c->bytes > cap)
                continue;
            if (!ready)
                moving += c->bytes;
            used += c->bytes;
            int e = ms_chunk_set_add(out, need->ids[i]);
            if (e)
                return e;
        }
        last = best;
    }
    ms_chunk_set_normalize(out);
    return MS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* With argument templates (core/template.h)                                                    */

/*
 * Chunks of region `region` overlapping range g clamped to the region; nothing when disjoint.
 * A range spanning several chunks leaves out an end chunk it overlaps by less than one profile
 * granule (MS_TMPL_GRANULE): profiles record touches in whole granules, so such an overlap is
 * most likely the rounding of a buffer that starts or ends near a chunk boundary (an arena's
 * sub-buffer), not bytes the kernel reads; were it read, it is read on its host chunk.
 */
static int add_clamped(const struct ms_rtable *rt, uint32_t region, struct ms_range g,
                       struct ms_chunk_set *out)
{
    const struct ms_region *reg = &rt->regions[region];
    uint64_t rb = reg->base, re = reg->base + reg->size;
    uint64_t a = MS_MAX(rb, g.addr), b = MS_MIN(re, g.addr + g.bytes);
    if (g.bytes == 0 || a >= b)
        return MS_OK;
    uint32_t k0 = ms_region_chunk_at(reg, a - rb), k1 = ms_region_chunk_at(reg, b - 1 - rb);
    if (k0 < k1 && rb + ms_region_chunk_offset(reg, k0 + 1) - a < MS_TMPL_GRANULE)
        k0++;
    if (k0 < k1 && b - (rb + ms_region_chunk_offset(reg, k1)) < MS_TMPL_GRANULE)
        k1--;
    for (uint32_t k = k0; k <= k1; k++) {
        int e = ms_chunk_set_add(out, MS_CHUNK_ID(region, k));
        if (e)
            return e;
    }
    return MS_OK;
}

/* One candidate word: its region whole (no rule) or the chunks its rule's ranges overlap.
 * model: every region counts as always mapped and populated (ms_predict_launch_tmpl_model). */
static int tmpl_word(const struct ms_rtable *rt, const struct ms_launch *l,
                     const struct ms_tmpl_kernel *k, size_t w, const uint64_t span[2],
                     struct ms_chunk_set *out, uint32_t *seen, size_t *nseen, uint32_t *refd,
                     size_t *nrefd, bool model)
{
    uint64_t v;
    memcpy(&v, l->params + w, sizeof(v));
    uint32_t region;
    if (v == 0 || v < span[0] || v >= span[1] ||
        ms_rtable_lookup(rt, l->task, v, &region, NULL) != MS_OK)
        return 0;
    size_t i;
    for (i = 0; i < *nrefd && refd[i] != region; i++)
        ;
    if (i == *nrefd)
        refd[(*nrefd)++] = region;
    struct ms_range g[MS_TMPL_MAX_RANGES];
    const struct ms_region *reg = &rt->regions[region];
    /* Only an always-mapped region shrinks: a chunk it leaves out stays reachable (on its host
     * chunk), so a rule that is wrong costs time, never a fault. */
    int n =
        reg->amap || model ? ms_tmpl_eval(k, (uint32_t)w, v, l, g, MS_ARRAY_LEN(g)) : MS_E_NOTFOUND;
    if (n < 0) {
        int e = add_region(rt, region, out, seen, nseen);
        return e < 0 ? e : 0;
    }
    for (int j = 0; j < n; j++) {
        int e = add_clamped(rt, region, g[j], out);
        if (e)
            return e;
    }
    /* ... except its EMPTY chunks, which are mapped nowhere until first used. */
    for (uint32_t c = 0; !model && c < reg->nchunks; c++)
        if (reg->chunks[c].state == MS_CS_EMPTY) {
            int e = ms_chunk_set_add(out, MS_CHUNK_ID(region, c));
            if (e)
                return e;
        }
    return 0;
}

static int predict_tmpl(const struct ms_rtable *rt, const struct ms_launch *l,
                        const struct ms_tmpl_kernel *k, struct ms_chunk_set *out, bool model)
{
    if (!k || ms_tmpl_kernel_opaque(k) || ms_tmpl_kernel_unsafe(k))
        return ms_predict_launch(rt, l, out);
    if (!launch_ok(l))
        return MS_E_INVAL;
    size_t maxwords = l->params_len / 8 + 1;
    uint32_t stack[2 * 64];
    uint32_t *seen = stack;
    if (maxwords > 64) {
        seen = ms_malloc(2 * maxwords * sizeof(*seen));
        if (!seen)
            return MS_E_NOMEM;
    }
    uint32_t *refd = seen + maxwords;
    if (seen == stack)
        refd = stack + 64;
    size_t nseen = 0, nrefd = 0;
    int e = 0;
    uint64_t span[2];
    ms_rtable_span(rt, l->task, &span[0], &span[1]);
    if (l->nlayout == 0) {
        for (size_t w = 0; w + 8 <= l->params_len && e == 0; w += 8)
            e = tmpl_word(rt, l, k, w, span, out, seen, &nseen, refd, &nrefd, model);
    } else {
        for (size_t i = 0; i < l->nlayout && e == 0; i++) {
            const struct ms_param_layout *pl = &l->layout[i];
            if (pl->size < 8)
                continue;
            for (size_t w = MS_ROUND_UP((size_t)pl->offset, 8);
                 w + 8 <= (size_t)pl->offset + pl->size && e == 0; w += 8)
                e = tmpl_word(rt, l, k, w, span, out, seen, &nseen, refd, &nrefd, model);
        }
    }
    if (seen != stack)
        ms_free(seen);
    if (e < 0)
        return e;
    ms_chunk_set_normalize(out);
    return (int)nrefd;
}

int ms_predict_launch_tmpl(const struct ms_rtable *rt, const struct ms_launch *l,
                           const struct ms_tmpl_kernel *k, struct ms_chunk_set *out)
{
    return predict_tmpl(rt, l, k, out, false);
}

int ms_predict_launch_tmpl_model(const struct ms_rtable *rt, const struct ms_launch *l,
                                 const struct ms_tmpl_kernel *k, struct ms_chunk_set *out)
{
    return predict_tmpl(rt, l, k, out, true);
}

int ms_predict_launch_bounded(const struct ms_rtable *rt, const struct ms_launch *l,
                              const struct ms_tmpl_kernel *k, const struct ms_param_bound *b,
                              size_t nb, uint8_t *scratch, struct ms_chunk_set *out)
{
    if (!l || (nb && (!b || !scratch)) || (l->params_len && !l->params))
        return MS_E_INVAL;
    for (size_t i = 0; i < nb; i++)
        if (b[i].off > l->params_len || b[i].len > l->params_len - b[i].off)
            return MS_E_INVAL;
    struct ms_launch copy = *l;
    if (nb) {
        memcpy(scratch, l->params, l->params_len);
        for (size_t i = 0; i < nb; i++)
            memset(scratch + b[i].off, 0, b[i].len);
        copy.params = scratch;
    }
    int n = predict_tmpl(rt, &copy, k, out, false);
    for (size_t i = 0; i < nb && n >= 0; i++) {
        uint32_t region;
        if (b[i].r.bytes == 0 || ms_rtable_lookup(rt, l->task, b[i].r.addr, &region, NULL) != MS_OK)
            continue;
        const struct ms_region *reg = &rt->regions[region];
        uint32_t seen[1];
        size_t nseen = 0;
        int e = MS_OK;
        if (!reg->amap) {
            e = add_region(rt, region, out, seen, &nseen);
        } else {
            uint64_t a = b[i].r.addr, rend = reg->base + reg->size;
            uint64_t end = b[i].r.bytes >= rend - a ? rend : a + b[i].r.bytes;
            uint32_t k0 = ms_region_chunk_at(reg, a - reg->base);
            uint32_t k1 = ms_region_chunk_at(reg, end - 1 - reg->base);
            for (uint32_t c = 0; c < reg->nchunks && !e; c++)
                if ((c >= k0 && c <= k1) || reg->chunks[c].state == MS_CS_EMPTY)
                    e = ms_chunk_set_add(out, MS_CHUNK_ID(region, c));
        }
        if (e < 0)
            n = e;
    }
    if (n >= 0)
        ms_chunk_set_normalize(out);
    return n;
}
