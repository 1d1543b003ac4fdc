/*
 * history.c - the history ring and the future it predicts (contract: history.h).
 */
#include "history.h"

#include <string.h>

int ms_history_init(struct ms_history *h, uint32_t cap)
{
    memset(h, 0, sizeof(*h));
    if (cap == 0)
        return MS_E_INVAL;
    h->ring = ms_calloc(cap, sizeof(*h->ring));
    if (!h->ring)
        return MS_E_NOMEM;
    h->cap = cap;
    return MS_OK;
}

void ms_history_fini(struct ms_history *h)
{
    ms_free(h->ring);
    memset(h, 0, sizeof(*h));
}

void ms_history_clear(struct ms_history *h)
{
    h->seq = 0;
}

uint64_t ms_history_len(const struct ms_history *h)
{
    return MS_MIN(h->seq, (uint64_t)h->cap);
}

static ms_chunk_id at(const struct ms_history *h, uint64_t s)
{
    return h->ring[s % h->cap];
}

void ms_history_append(struct ms_history *h, const struct ms_chunk_set *s)
{
    if (!h->cap || !s->n)
        return;
    /* The ids among the last `win` appended (the ring keeps no more than cap), copied here and
     * kept as they change: one pass over s, no division per id (a launch may name thousands of
     * chunks). recent[] is circular; the oldest is at recent[top] once it is full. */
    /* Slots not filled hold an id no chunk has (region and index UINT32_MAX), so the search
     * below always compares all of them: a fixed count the compiler unrolls. */
    ms_chunk_id recent[MS_HISTORY_RECENT_SKIP];
    for (size_t k = 0; k < MS_HISTORY_RECENT_SKIP; k++)
        recent[k] = UINT64_MAX;
    size_t win = MS_MIN((size_t)MS_HISTORY_RECENT_SKIP, (size_t)h->cap);
    size_t nrecent = (size_t)MS_MIN(ms_history_len(h), (uint64_t)win);
    uint32_t pos = (uint32_t)(h->seq % h->cap);
    for (size_t k = 0, q = (pos + h->cap - nrecent) % h->cap; k < nrecent; k++) {
        recent[k] = h->ring[q];
        q = q + 1 == h->cap ? 0 : q + 1;
    }
    size_t top = nrecent % win;
    /* While s is strictly ascending (a normalized set), the ids of s among recent[] are all
     * smaller than the current one: once `win` of them were appended, none can match. */
    size_t from_s = 0;
    for (size_t i = 0; i < s->n; i++) {
        ms_chunk_id id = s->ids[i];
        if (i > 0 && id <= s->ids[i - 1])
            from_s = 0; /* not ascending: scan again from here on */
        if (from_s >= win) {
            /* The rest of this ascending run cannot be among recent[]: copied as a block. */
            size_t j = s->asc ? s->n : i + 1; /* an ascending set: the rest at once */
            while (j < s->n && s->ids[j] > s->ids[j - 1])
                j++;
            for (size_t k = i; k < j;) {
                size_t m = MS_MIN(j - k, (size_t)(h->cap - pos));
                memcpy(&h->ring[pos], &s->ids[k], m * sizeof(*h->ring));
                k += m;
                pos = pos + m == h->cap ? 0 : (uint32_t)(pos + m);
            }
            h->seq += j - i;
            for (size_t k = j - MS_MIN(j - i, win); k < j; k++) {
                recent[top] = s->ids[k];
                top = top + 1 == win ? 0 : top + 1;
            }
            i = j - 1;
            continue;
        }
        _Static_assert(MS_HISTORY_RECENT_SKIP == 8, "the search below compares eight slots");
        bool seen = (recent[0] == id) | (recent[1] == id) | (recent[2] == id) | (recent[3] == id) |
                    (recent[4] == id) | (recent[5] == id) | (recent[6] == id) | (recent[7] == id);
        if (seen)
            continue;
        from_s++;
        h->ring[pos] = id;
        pos = pos + 1 == h->cap ? 0 : pos + 1;
        h->seq++;
        recent[top] = id;
        top = top + 1 == win ? 0 : top + 1;
        if (nrecent < win)
            nrecent++;
    }
}

bool ms_history_locate(const struct ms_history *h, struct ms_rtable *rt,
                       const struct ms_chunk_set *need, bool any_needed, uint64_t *start)
{
    uint64_t first = h->seq - ms_history_len(h);
    *start = first;
    if (!need->n)
        return false;
    for (int pass = 0; pass < (any_needed ? 2 : 1); pass++) {
        for (uint64_t q = h->seq; q-- > first;) {
            ms_chunk_id id = at(h, q);
            const struct ms_chunk *c = ms_chunk_get(rt, id);
            if (c && ms_chunk_set_has(need, id) &&
                (pass == 1 || !ms_chunk_state_ready((enum ms_chunk_state)c->state))) {
                *start = q + 1;
                return true;
            }
        }
    }
    return false;
}

ms_chunk_id ms_history_future(const struct ms_history *h, uint64_t start, uint64_t k)
{
    uint64_t first = h->seq - ms_history_len(h);
    uint64_t s = start + k;
    if (s >= h->seq)
        s = first + (s - h->seq); /* wrap to the oldest history */
    return at(h, s);
}

int ms_history_plan_sets(const struct ms_history *h, struct ms_rtable *rt,
                         const struct ms_chunk_set *need, uint64_t prefetch, uint32_t group,
                         struct ms_chunk_set **ws, size_t *capws, size_t *nws)
{
    uint64_t have = ms_history_len(h);
    uint64_t start;
    if (!ms_history_locate(h, rt, need, false, &start))
        prefetch = 0;
    if (group == 0)
        group = 1;
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
    /* OPT reads ws[1..] only for the next use of resident chunks (the eviction candidates), and
     * only a chunk's first use counts: once every resident chunk was seen and the prefetch is
     * taken, the rest of the future changes nothing. Seen chunks carry a stamp in their mark
     * (scratch between calls; the stamp's top bit keeps it apart from the planner's and the
     * executor's small values). A program with a full history and its resident chunks all in
     * use soon stops after a few groups instead of walking all of them on every fault. */
    uint64_t resident = rt->count[MS_CS_IN] + rt->count[MS_CS_CLEAN] + rt->count[MS_CS_DIRTY] +
                        rt->count[MS_CS_OUT];
    uint64_t stamp = (1ull << 63) | ms_rtable_tick(rt), seen = 0;
    for (size_t i = 0; i < need->n; i++) { /* ws[0]: never a candidate */
        struct ms_chunk *c = ms_chunk_get(rt, need->ids[i]);
        if (c && c->mark != stamp && ms_chunk_state_resident((enum ms_chunk_state)c->state)) {
            c->mark = stamp;
            seen++;
        }
    }
    uint64_t taken = 0;
    size_t g = 1;
    for (uint64_t k = 0; k < have; k++) {
        if (seen >= resident && (g > 1 || taken >= prefetch))
            break;
        ms_chunk_id id = ms_history_future(h, start, k);
        struct ms_chunk *c = ms_chunk_get(rt, id);
        if (!c)
            continue; /* freed since */
        bool res = ms_chunk_state_resident((enum ms_chunk_state)c->state);
        if (g == 1 && taken < prefetch && !res) {
            taken += c->bytes;
            if ((e = ms_chunk_set_add(&w[0], id)))
                return e;
            continue;
        }
        if (w[g].n >= group && g < groups)
            g++;
        if ((e = ms_chunk_set_add(&w[g], id)))
            return e;
        if (res && c->mark != stamp) {
            c->mark = stamp;
            seen++;
        }
    }
    *nws = g + 1;
    return MS_OK;
}

/* Append id to out when its mark lacks `bit` and it fits in cap; marks it. */
static int take(struct ms_rtable *rt, struct ms_chunk_set *out, ms_chunk_id id, uint64_t bit,
                uint64_t cap, uint64_t *bytes, bool *full)
{
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!c || (c->mark & bit))
        return MS_OK;
    if (c->bytes > cap - MS_MIN(cap, *bytes)) {
        *full = true;
        return MS_OK;
    }
    c->mark |= bit;
    *bytes += c->bytes;
    return ms_chunk_set_add(out, id);
}

int ms_history_predict(const struct ms_history *h, struct ms_rtable *rt,
                       const struct ms_chunk_set *need, uint64_t next_cap,
                       struct ms_chunk_set *out_next, uint64_t recent_cap,
                       struct ms_chunk_set *out_recent)
{
    ms_chunk_set_clear(out_next);
    ms_chunk_set_clear(out_recent);
    ms_rtable_clear_marks(rt);
    uint64_t have = ms_history_len(h);
    uint64_t first = h->seq - have;
    int e = MS_OK;
    /* recent: distinct chunks walking back from the newest use, then oldest first. */
    uint64_t bytes = 0;
    bool full = false;
    for (uint64_t q = h->seq; q-- > first && !full && e == MS_OK;)
        e = take(rt, out_recent, at(h, q), 2, recent_cap, &bytes, &full);
    for (size_t i = 0, j = out_recent->n; i < j / 2; i++) {
        ms_chunk_id t = out_recent->ids[i];
        out_recent->ids[i] = out_recent->ids[j - 1 - i];
        out_recent->ids[j - 1 - i] = t;
        out_recent->asc = false;
    }
    /* next: the need (all of it), then the future. */
    bytes = 0;
    full = false;
    for (size_t i = 0; i < need->n && e == MS_OK; i++) {
        struct ms_chunk *c = ms_chunk_get(rt, need->ids[i]);
        if (c && !(c->mark & 1)) {
            c->mark |= 1;
            bytes += c->bytes;
            e = ms_chunk_set_add(out_next, need->ids[i]);
        }
    }
    if (need->n == 0) {
        for (size_t i = 0; i < out_recent->n && e == MS_OK && !full; i++)
            e = take(rt, out_next, out_recent->ids[i], 1, next_cap, &bytes, &full);
        return e;
    }
    uint64_t start;
    ms_history_locate(h, rt, need, true, &start);
    for (uint64_t k = 0; k < have && e == MS_OK && !full; k++)
        e = take(rt, out_next, ms_history_future(h, start, k), 1, next_cap, &bytes, &full);
    return e;
}
