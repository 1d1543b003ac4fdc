/*
 * plan.c - the migration planner (contract: plan.h).
 *
 * Design
 *   One call runs in five passes over the table and the working sets, using chunk.mark as
 *   scratch (its value is meaningless before and after a call):
 *     1. every chunk of every live region: mark = NEVER;
 *     2. ws[nws-1] down to ws[1]: mark = k, so each chunk ends with its first future use;
 *     3. ws[0] in order: mark = IN_WS0 (0) on first sight, so duplicates are seen once; the
 *        distinct bytes of ws[0] add up to the fixed part of the need;
 *     4. the live regions task by task (the table's index is sorted by task): resident chunks that
 *        cannot move (pinned, IN, OUT, host-kind regions) add to the need, the others outside
 *        ws[0] become candidates with a sort key from the policy; if the need exceeds the budget
 *        the call fails with MS_E_NOSPACE before any step is written;
 *     5. candidates are sorted once, then ws[0] is walked in order again: before each population
 *        the next candidates are evicted until the chunk fits (WHOLE evicts a whole task at a
 *        time), and mark = DONE stops a duplicate from being populated twice.
 *   Cost: O(chunks in the table + total ws size + candidates * log candidates). Pass 1 touches
 *   every chunk because the table keeps no list of resident ones; it is a linear sweep of small
 *   structs and finds the candidates at the same time as pass 4.
 *
 *   Why a sort and not a heap: every policy needs the same order (a total order on the
 *   candidates), the candidates are at most the resident chunks, and a sorted array makes
 *   WHOLE's "a whole task at a time" a contiguous run.
 *
 *   Budget arithmetic replays the steps: cur starts at rt->resident_bytes (IN and OUT chunks
 *   hold device memory and count), a populate adds its chunk, an evict subtracts. If the table
 *   is already over budget (the budget shrank), the first population's evictions bring it
 *   under; with no population, trailing evictions do.
 *
 *   A ws[0] chunk that is OUT (being evicted) counts as resident and gets no step: the state
 *   machine has no OUT -> IN edge. Once its eviction completes it is HOST, and the launch gate
 *   populates it on first use (or the caller re-plans after completing the eviction).
 *
 * Invariants of a successful plan (ms_plan_verify checks them on a replay)
 *   - each chunk appears in at most one step; victims are resident, not moving, not pinned, not
 *     in ws[0], not in host-kind regions; populations target EMPTY/HOST chunks of ws[0], in the
 *     order of their first appearance in ws[0];
 *   - resident bytes never exceed the budget after a population, and end <= budget;
 *   - evict_bytes / populate_bytes are the sums over the steps; peak_resident is the maximum of
 *     the resident bytes before the first step and after every step.
 *   On any error the plan is empty (n == 0, counters 0); its array is kept for reuse.
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_WS0 0ull              /* chunk is in ws[0] (pass 3 on) */
#define MARK_DONE (UINT64_MAX - 1) /* ws[0] chunk already handled in pass 5 */
#define MARK_NEVER UINT64_MAX      /* no use in ws[1..nws-1] */

static const struct ms_chunk_set empty_set; /* ws[0] when nws == 0 */

struct cand {
    uint64_t k1, k2; /* policy sort keys, ascending = evict first */
    ms_chunk_id id;
    uint64_t bytes;
    uint32_t task;
    uint32_t room;   /* index into the host rooms (with host_room), else 0 */
    uint8_t newhost; /* never hosted: evicting it takes `bytes` of its task's host room */
};

/* Host memory one task may still take (ms_plan_input.host_room), consumed by pass 5. */
struct room {
    uint64_t left;
};

void ms_plan_init(struct ms_plan *p)
{
    memset(p, 0, sizeof(*p));
}

void ms_plan_fini(struct ms_plan *p)
{
    ms_free(p->steps);
    ms_plan_init(p);
}

static void plan_clear(struct ms_plan *p)
{
    p->n = 0;
    p->evict_bytes = 0;
    p->populate_bytes = 0;
    p->peak_resident = 0;
}

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->k1 != y->k1)
        return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2 ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool policy_valid(enum ms_evict_policy pol)
{
    return pol == MS_EVICT_OPT || pol == MS_EVICT_LRU || pol == MS_EVICT_WHOLE;
}

static int check_input(const struct ms_plan_input *in)
{
    if (!in || !in->rt || (in->nws > 0 && !in->ws) || !policy_valid(in->policy))
        return MS_E_INVAL;
    if (in->tl && in->nws > in->tl->n)
        return MS_E_INVAL; /* a working set for a timeline entry that does not exist */
    for (size_t k = 0; k < in->nws; k++)
        if (in->ws[k].n > 0 && !in->ws[k].ids)
            return MS_E_INVAL;
    return MS_OK;
}

/* Chunks that hold device memory but cannot be chosen as victims (beyond ws[0] membership). */
static bool unmovable(const struct ms_region *r, const struct ms_chunk *c)
{
    return ms_chunk_pins(r, c) > 0 || c->state == MS_CS_IN || c->state == MS_CS_OUT ||
           r->kind == MS_RK_HOST;
}

static void push_step(struct ms_plan *p, enum ms_step_op op, ms_chunk_id id)
{
    /* Capacity was reserved up front: ncand + distinct ws[0] chunks bounds the steps. */
    p->steps[p->n].op = (uint8_t)op;
    p->steps[p->n].chunk = id;
    p->n++;
}

/* Pass 4: candidates and the bytes that must stay. Returns 0 or MS_E_NOMEM. */
static int collect(const struct ms_plan_input *in, struct cand **cands, size_t *ncand,
                   size_t *capcand, uint64_t *need, struct room **rooms, size_t *nrooms,
                   size_t *caprooms)
{
    struct ms_rtable *rt = in->rt;
    size_t i = 0;
    while (i < rt->nindex) {
        uint32_t task = rt->index[i].task;
        uint32_t room = 0;
        if (in->host_room) {
            int e = ms_grow((void **)rooms, caprooms, *nrooms + 1, sizeof(**rooms));
            if (e)
                return e;
            room = (uint32_t)*nrooms;
            (*rooms)[(*nrooms)++].left = in->host_room(in->host_ctx, task);
        }
        size_t j = i;
        uint64_t task_use = 0; /* the task's most recent use, over all its chunks (WHOLE) */
        for (; j < rt->nindex && rt->index[j].task == task; j++) {
            const struct ms_region *r = &rt->regions[rt->index[j].region];
            for (uint32_t c = 0; c < r->nchunks; c++)
                task_use = MS_MAX(task_use, ms_chunk_last_use(r, &r->chunks[c]));
        }
        for (size_t k = i; k < j; k++) {
            uint32_t ridx = rt->index[k].region;
            const struct ms_region *r = &rt->regions[ridx];
            for (uint32_t c = 0; c < r->nchunks; c++) {
                const struct ms_chunk *ch = &r->chunks[c];
                if (!ms_chunk_state_resident((enum ms_chunk_state)ch->state) ||
                    ch->mark == MARK_WS0)
                    continue;
                if (unmovable(r, ch)) {
                    *need += ch->bytes;
                    continue;
                }
                int e = ms_grow((void **)cands, capcand, *ncand + 1, sizeof(**cands));
                if (e)
                    return e;
                struct cand *cd = &(*cands)[(*ncand)++];
                cd->id = MS_CHUNK_ID(ridx, c);
                cd->bytes = ch->bytes;
                cd->task = task;
                cd->room = room;
                cd->newhost = in->host_room && !ch->hosted;
                switch (in->policy) {
                case MS_EVICT_OPT:
                    cd->k1 = UINT64_MAX - ch->mark; /* NEVER -> 0, then furthest first */
                    cd->k2 = ms_chunk_last_use(r, ch);
                    break;
                case MS_EVICT_LRU:
                    cd->k1 = ms_chunk_last_use(r, ch);
                    cd->k2 = 0;
                    break;
                case MS_EVICT_WHOLE:
                    cd->k1 = task_use;
                    cd->k2 = task;
                    break;
                }
            }
        }
        i = j;
    }
    return MS_OK;
}

int ms_plan_build(const struct ms_plan_input *in, struct ms_plan *p)
{
    if (!p)
        return MS_E_INVAL;
    plan_clear(p);
    p->host_skipped_bytes = 0; /* kept on MS_E_NOSPACE: why the set did not fit */
    int rc = check_input(in);
    if (rc)
        return rc;
    struct ms_rtable *rt = in->rt;

    /* Pass 1. */
    for (size_t i = 0; i < rt->nslots; i++) {
        struct ms_region *r = &rt->regions[i];
        if (!r->live)
            continue;
        for (uint32_t c = 0; c < r->nchunks; c++)
            r->chunks[c].mark = MARK_NEVER;
    }
    /* Pass 2. */
    for (size_t k = in->nws; k-- > 1;) {
        for (size_t i = 0; i < in->ws[k].n; i++) {
            struct ms_chunk *ch = ms_chunk_get(rt, in->ws[k].ids[i]);
            if (!ch)
                return MS_E_INVAL;
            ch->mark = k;
        }
    }
    /* Pass 3. */
    uint64_t need = 0;
    size_t nws0 = 0; /* distinct ws[0] chunks */
    const struct ms_chunk_set *ws0 = in->nws > 0 ? &in->ws[0] : &empty_set;
    for (size_t i = 0; i < ws0->n; i++) {
        struct ms_chunk *ch = ms_chunk_get(rt, ws0->ids[i]);
        if (!ch)
            return MS_E_INVAL;
        if (ch->mark == MARK_WS0)
            continue;
        ch->mark = MARK_WS0;
        need += ch->bytes;
        nws0++;
    }
    /* Pass 4. */
    struct cand *cands = NULL;
    size_t ncand = 0, capcand = 0;
    struct room *rooms = NULL;
    size_t nrooms = 0, caprooms = 0;
    rc = collect(in, &cands, &ncand, &capcand, &need, &rooms, &nrooms, &caprooms);
    if (rc)
        goto out;
    if (need > in->budget) {
        rc = MS_E_NOSPACE;
        goto out;
    }
    rc = ms_grow((void **)&p->steps, &p->cap, ncand + nws0, sizeof(*p->steps));
    if (rc)
        goto out;
    if (ncand > 1)
        qsort(cands, ncand, sizeof(*cands), cmp_cand);

    /* Pass 5. */
    uint64_t cur = rt->resident_bytes, budget = in->budget;
    size_t next = 0; /* next candidate to evict */
    p->peak_resident = cur;
    for (size_t i = 0; i <= ws0->n; i++) {
        uint64_t b = 0;
        struct ms_chunk *ch = NULL;
        if (i < ws0->n) {
            ch = ms_chunk_get(rt, ws0->ids[i]);
            if (ch->mark != MARK_WS0)
                continue; /* a duplicate already handled */
            ch->mark = MARK_DONE;
            if (ch->state != MS_CS_EMPTY && ch->state != MS_CS_HOST)
                continue; /* resident or arriving: nothing to do */
            b = ch->bytes;
        }
        /* i == ws0->n: a final round with b = 0 brings an over-budget table under budget. */
        while ((cur > budget || b > budget - cur) && next < ncand) {
            uint32_t task = cands[next].task;
            do {
                struct cand *cd = &cands[next++];
                if (cd->newhost) {
                    struct room *ro = &rooms[cd->room];
                    if (cd->bytes > ro->left) {
                        p->host_skipped_bytes += cd->bytes; /* stays on the device */
                        continue;
                    }
                    ro->left -= cd->bytes;
                }
                push_step(p, MS_STEP_EVICT, cd->id);
                cur -= cd->bytes;
                p->evict_bytes += cd->bytes;
            } while (in->policy == MS_EVICT_WHOLE && next < ncand && cands[next].task == task);
        }
        if (cur > budget || b > budget - cur) {
            /* Reached only when victims were passed over for host room (the need check above
             * holds otherwise). */
            rc = MS_E_NOSPACE;
            goto out;
        }
        if (ch) {
            push_step(p, MS_STEP_POPULATE, ws0->ids[i]);
            cur += b;
            p->populate_bytes += b;
            p->peak_resident = MS_MAX(p->peak_resident, cur);
        }
    }
out:
    ms_free(cands);
    ms_free(rooms);
    if (rc)
        plan_clear(p);
    return rc;
}

/* ---- verification ---------------------------------------------------------------------- */

struct vpos {
    ms_chunk_id id;
    size_t pos; /* first position in ws[0], or step index */
};

static int cmp_vpos(const void *a, const void *b)
{
    const struct vpos *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static const struct vpos *vfind(const struct vpos *v, size_t n, ms_chunk_id id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].id == id ? &v[lo] : NULL;
}

#define VFAIL(...)                                                                                 \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        rc = MS_E_INVAL;                                                                           \
        goto out;                                                                                  \
    } while (0)

#define CID(id) MS_CHUNK_REGION(id), MS_CHUNK_INDEX(id)

int ms_plan_verify(const struct ms_plan_input *in, const struct ms_plan *p, char *why,
                   size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (!p || (p->n > 0 && !p->steps)) {
        if (why && whylen)
            snprintf(why, whylen, "no plan");
        return MS_E_INVAL;
    }
    int rc = check_input(in);
    if (rc) {
        if (why && whylen)
            snprintf(why, whylen, "bad planner input");
        return rc;
    }
    struct ms_rtable *rt = in->rt;
    const struct ms_chunk_set *ws0 = in->nws > 0 ? &in->ws[0] : &empty_set;
    size_t n0 = ws0->n;
    struct vpos *w = NULL, *s = NULL;

    /* ws[0] as (id, first position), sorted by id; duplicates keep their first position. */
    w = ms_malloc((n0 ? n0 : 1) * sizeof(*w));
    s = ms_malloc((p->n ? p->n : 1) * sizeof(*s));
    if (!w || !s) {
        rc = MS_E_NOMEM;
        if (why && whylen)
            snprintf(why, whylen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n0; i++)
        w[i] = (struct vpos){.id = ws0->ids[i], .pos = i};
    if (n0 > 1)
        qsort(w, n0, sizeof(*w), cmp_vpos);
    size_t nw = 0;
    for (size_t i = 0; i < n0; i++) {
        if (nw > 0 && w[nw - 1].id == w[i].id)
            continue;
        if (!ms_chunk_get(rt, w[i].id))
            VFAIL("ws[0] names unknown chunk %u:%u", CID(w[i].id));
        w[nw++] = w[i];
    }
    for (size_t i = 0; i < p->n; i++)
        s[i] = (struct vpos){.id = p->steps[i].chunk, .pos = i};
    if (p->n > 1)
        qsort(s, p->n, sizeof(*s), cmp_vpos);
    for (size_t i = 1; i < p->n; i++)
        if (s[i].id == s[i - 1].id)
            VFAIL("chunk %u:%u has more than one step (%zu and %zu)", CID(s[i].id), s[i - 1].pos,
                  s[i].pos);

    uint64_t cur = rt->resident_bytes, peak = cur, ev = 0, pop = 0;
    size_t last_pos = 0;
    bool any_pop = false;
    for (size_t i = 0; i < p->n; i++) {
        ms_chunk_id id = p->steps[i].chunk;
        const struct ms_chunk *ch = ms_chunk_get(rt, id);
        if (!ch)
            VFAIL("step %zu names unknown chunk %u:%u", i, CID(id));
        const struct vpos *wp = vfind(w, nw, id);
        if (p->steps[i].op == MS_STEP_EVICT) {
            if (wp)
                VFAIL("step %zu evicts chunk %u:%u of ws[0]", i, CID(id));
            if (ms_chunk_pins(&rt->regions[MS_CHUNK_REGION(id)], ch) > 0)
                VFAIL("step %zu evicts pinned chunk %u:%u", i, CID(id));
            if (ch->state != MS_CS_CLEAN && ch->state != MS_CS_DIRTY)
                VFAIL("step %zu evicts chunk %u:%u in state %s", i, CID(id),
                      ms_chunk_state_name((enum ms_chunk_state)ch->state));
            if (ms_region_get(rt, MS_CHUNK_REGION(id))->kind == MS_RK_HOST)
                VFAIL("step %zu evicts host-kind chunk %u:%u", i, CID(id));
            cur -= ch->bytes;
            ev += ch->bytes;
        } else if (p->steps[i].op == MS_STEP_POPULATE) {
            if (!wp)
                VFAIL("step %zu populates chunk %u:%u outside ws[0]", i, CID(id));
            if (ch->state != MS_CS_EMPTY && ch->state != MS_CS_HOST)
                VFAIL("step %zu populates chunk %u:%u in state %s", i, CID(id),
                      ms_chunk_state_name((enum ms_chunk_state)ch->state));
            if (any_pop && wp->pos < last_pos)
                VFAIL("step %zu populates out of ws[0] order", i);
            any_pop = true;
            last_pos = wp->pos;
            cur += ch->bytes;
            pop += ch->bytes;
            if (cur > in->budget)
                VFAIL("step %zu: %llu bytes resident over a budget of %llu", i,
                      (unsigned long long)cur, (unsigned long long)in->budget);
        } else {
            VFAIL("step %zu has unknown op %u", i, p->steps[i].op);
        }
        peak = MS_MAX(peak, cur);
    }
    if (cur > in->budget)
        VFAIL("plan ends with %llu bytes resident over a budget of %llu", (unsigned long long)cur,
              (unsigned long long)in->budget);
    for (size_t i = 0; i < nw; i++) {
        const struct ms_chunk *ch = ms_chunk_get(rt, w[i].id);
        if (!ms_chunk_state_resident((enum ms_chunk_state)ch->state) && !vfind(s, p->n, w[i].id))
            VFAIL("ws[0] chunk %u:%u is not made resident", CID(w[i].id));
    }
    /* Host room: each task's evictions of never-hosted chunks within what it may take. s is
     * reused as (task, bytes) pairs sorted by task. */
    if (in->host_room) {
        size_t nt = 0;
        for (size_t i = 0; i < p->n; i++) {
            ms_chunk_id id = p->steps[i].chunk;
            if (p->steps[i].op == MS_STEP_EVICT && !ms_chunk_get(rt, id)->hosted)
                s[nt++] = (struct vpos){.id = ms_region_get(rt, MS_CHUNK_REGION(id))->task,
                                        .pos = ms_chunk_get(rt, id)->bytes};
        }
        if (nt > 1)
            qsort(s, nt, sizeof(*s), cmp_vpos);
        for (size_t i = 0; i < nt;) {
            uint64_t take = 0;
            size_t j = i;
            for (; j < nt && s[j].id == s[i].id; j++)
                take += s[j].pos;
            uint64_t room = in->host_room(in->host_ctx, (uint32_t)s[i].id);
            if (take > room)
                VFAIL("task %u's evictions need %llu bytes of new host memory, over its room "
                      "of %llu",
                      (unsigned)s[i].id, (unsigned long long)take, (unsigned long long)room);
            i = j;
        }
    }
    if (ev != p->evict_bytes || pop != p->populate_bytes || peak != p->peak_resident)
        VFAIL("plan counters disagree with its steps (evict %llu/%llu populate %llu/%llu "
              "peak %llu/%llu)",
              (unsigned long long)p->evict_bytes, (unsigned long long)ev,
              (unsigned long long)p->populate_bytes, (unsigned long long)pop,
              (unsigned long long)p->peak_resident, (unsigned long long)peak);
out:
    ms_free(w);
    ms_free(s);
    return rc;
}

int ms_evict_policy_parse(const char *s, enum ms_evict_policy *out)
{
    if (!s || !out)
        return MS_E_INVAL;
    if (strcmp(s, "opt") == 0)
        *out = MS_EVICT_OPT;
    else if (strcmp(s, "lru") == 0)
        *out = MS_EVICT_LRU;
    else if (strcmp(s, "whole") == 0)
        *out = MS_EVICT_WHOLE;
    else
        return MS_E_NOTFOUND;
    return MS_OK;
}

const char *ms_evict_policy_name(enum ms_evict_policy p)
{
    switch (p) {
    case MS_EVICT_OPT: return "opt";
    case MS_EVICT_LRU: return "lru";
    case MS_EVICT_WHOLE: return "whole";
    }
    return "unknown";
}
