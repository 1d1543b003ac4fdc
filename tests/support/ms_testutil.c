/*
 * ms_testutil.c - shared unit-test helpers (contract: ms_testutil.h).
 *
 * Random tables place each task's regions at increasing, gap-separated bases so they never
 * overlap; every task gets at least one region. Everything random flows from the caller's
 * ms_rng, so the same seed builds the same table.
 */
#include "ms_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t ms_test_seed(uint64_t fallback)
{
    uint64_t seed = fallback;
    const char *s = getenv("MS_SEED");
    if (s && *s) {
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, 0);
        if (end && *end == '\0')
            seed = v;
    }
    printf("seed=%llu\n", (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

void ms_rng_seed(struct ms_rng *r, uint64_t seed)
{
    r->state = seed;
}

uint64_t ms_rng_next(struct ms_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ms_rng_below(struct ms_rng *r, uint64_t n)
{
    return n ? ms_rng_next(r) % n : 0;
}

bool ms_rng_chance(struct ms_rng *r, uint64_t num, uint64_t den)
{
    return ms_rng_below(r, den) < num;
}

void ms_rng_shuffle_ids(struct ms_rng *r, ms_chunk_id *ids, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)ms_rng_below(r, i);
        ms_chunk_id t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
}

int ms_test_random_rtable(struct ms_rtable *rt, struct ms_rng *r,
                          const struct ms_test_table_opts *o)
{
    for (uint32_t t = 0; t < o->ntasks; t++) {
        uint64_t base = 0x7f0000000000ull + (uint64_t)t * 0x10000000000ull;
        uint32_t span = o->regions_max >= o->regions_min ? o->regions_max - o->regions_min : 0;
        uint32_t nreg = o->regions_min + (uint32_t)ms_rng_below(r, span + 1);
        if (nreg == 0)
            nreg = 1;
        for (uint32_t k = 0; k < nreg; k++) {
            uint64_t size, chunk;
            if (o->uniform) {
                size = (1 + ms_rng_below(r, o->max_chunks ? o->max_chunks : 1)) * MS_GRAN;
                chunk = MS_GRAN;
            } else {
                uint64_t max = o->max_region_bytes ? o->max_region_bytes : 64 * MS_MIB;
                size = 1 + ms_rng_below(r, max);
                /* Half automatic chunk sizes, half 2-16 MiB chunks. */
                chunk = ms_rng_chance(r, 1, 2) ? 0 : (1 + ms_rng_below(r, 8)) * MS_GRAN;
            }
            int e = ms_region_add(rt, t, base, size, MS_RK_DEVICE, chunk, NULL);
            if (e)
                return e;
            base += MS_ROUND_UP(size, MS_GRAN) + MS_GRAN * (1 + ms_rng_below(r, 4));
        }
    }
    return MS_OK;
}

int ms_test_task_chunks(struct ms_rtable *rt, uint32_t task, struct ms_chunk_set *out)
{
    for (size_t i = 0; i < rt->nindex; i++) {
        if (rt->index[i].task != task)
            continue;
        uint32_t reg = rt->index[i].region;
        const struct ms_region *r = &rt->regions[reg];
        for (uint32_t c = 0; c < r->nchunks; c++) {
            int e = ms_chunk_set_add(out, MS_CHUNK_ID(reg, c));
            if (e)
                return e;
        }
    }
    return MS_OK;
}

int ms_test_populate(struct ms_rtable *rt, ms_chunk_id id)
{
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!c)
        return MS_E_INVAL;
    if (c->state == MS_CS_EMPTY)
        return ms_chunk_apply(rt, id, MS_CE_MAP_FRESH);
    int e = ms_chunk_apply(rt, id, MS_CE_POP_START);
    return e ? e : ms_chunk_apply(rt, id, MS_CE_POP_DONE);
}

int ms_test_evict(struct ms_rtable *rt, ms_chunk_id id)
{
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!c)
        return MS_E_INVAL;
    if (c->state == MS_CS_CLEAN)
        return ms_chunk_apply(rt, id, MS_CE_DROP);
    int e = ms_chunk_apply(rt, id, MS_CE_EVICT_START);
    return e ? e : ms_chunk_apply(rt, id, MS_CE_EVICT_DONE);
}

int ms_test_make_resident(struct ms_rtable *rt, ms_chunk_id id, bool dirty)
{
    struct ms_chunk *c = ms_chunk_get(rt, id);
    if (!c)
        return MS_E_INVAL;
    if (!ms_chunk_state_resident((enum ms_chunk_state)c->state)) {
        int e = ms_test_populate(rt, id);
        if (e)
            return e;
    }
    return dirty ? ms_chunk_apply(rt, id, MS_CE_TOUCH) : MS_OK;
}

int ms_test_apply_plan(struct ms_rtable *rt, const struct ms_plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        int e = p->steps[i].op == MS_STEP_EVICT ? ms_test_evict(rt, p->steps[i].chunk)
                                                : ms_test_populate(rt, p->steps[i].chunk);
        if (e)
            return e;
    }
    return MS_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((e = (x)) != 0)                                                                        \
            goto out;                                                                              \
    } while (0)

int ms_test_world_build(struct ms_test_world *w, uint64_t seed, enum ms_test_world_kind kind,
                        size_t nsteps)
{
    struct ms_rng r;
    ms_rng_seed(&r, seed);
    memset(w, 0, sizeof(*w));
    ms_rtable_init(&w->rt);
    ms_timeline_init(&w->tl);
    struct ms_timeline part;
    ms_timeline_init(&part);
    struct ms_chunk_set all[8], hot[8];
    for (size_t t = 0; t < 8; t++) {
        ms_chunk_set_init(&all[t]);
        ms_chunk_set_init(&hot[t]);
    }
    int e = MS_OK;

    struct ms_test_table_opts o = {.ntasks = 2 + (uint32_t)ms_rng_below(&r, 4),
                                   .regions_min = 1,
                                   .regions_max = 4,
                                   .max_chunks = 6,
                                   .max_region_bytes = 200 * MS_MIB,
                                   .uniform = kind != MS_TW_MIXED};
    if (kind == MS_TW_TINY) {
        o.ntasks = 2 + (uint32_t)ms_rng_below(&r, 2);
        o.regions_max = 2;
        o.max_chunks = 2;
    }
    TRY(ms_test_random_rtable(&w->rt, &r, &o));

    uint64_t maxfp = 0, total = ms_rtable_footprint(&w->rt, UINT32_MAX);
    for (uint32_t t = 0; t < o.ntasks; t++)
        maxfp = MS_MAX(maxfp, ms_rtable_footprint(&w->rt, t));
    w->budget = maxfp + ms_rng_below(&r, (total - maxfp) / 2 + 1);
    if (kind != MS_TW_MIXED)
        w->budget -= w->budget % MS_GRAN; /* maxfp is a multiple: still >= maxfp */

    /* The schedule: the policies themselves, re-asked as runnable flags and priorities change. */
    struct ms_task_sched ts[8];
    TRY(ms_grow((void **)&w->tl.e, &w->tl.cap, nsteps, sizeof(*w->tl.e)));
    uint32_t last = MS_TASK_NONE;
    while (w->tl.n < nsteps) {
        bool any = false;
        for (uint32_t t = 0; t < o.ntasks; t++) {
            ts[t] = (struct ms_task_sched){
                .id = t,
                .prio = ms_rng_chance(&r, 1, 6) ? MS_PRIO_RT : MS_PRIO_BE,
                .weight = (uint32_t)ms_rng_below(&r, 3),
                .runnable = ms_rng_chance(&r, 3, 4),
            };
            any |= ts[t].runnable;
        }
        if (!any)
            ts[ms_rng_below(&r, o.ntasks)].runnable = true;
        struct ms_policy pol = {.kind = ms_rng_chance(&r, 1, 2) ? MS_POLICY_RR : MS_POLICY_PRIO,
                                .slice_ns = 1000000};
        TRY(ms_policy_timeline(&pol, ts, o.ntasks, last, 1 + (size_t)ms_rng_below(&r, 4), &part));
        if (part.n == 0) {
            e = MS_E_STATE; /* a runnable task must appear */
            goto out;
        }
        for (size_t i = 0; i < part.n && w->tl.n < nsteps; i++)
            w->tl.e[w->tl.n++] = part.e[i];
        last = w->tl.e[w->tl.n - 1].task;
    }

    /* Working sets: a per-task hot set plus random extras, in random order, some duplicates. */
    for (uint32_t t = 0; t < o.ntasks; t++) {
        TRY(ms_test_task_chunks(&w->rt, t, &all[t]));
        for (size_t i = 0; i < all[t].n; i++)
            if (ms_rng_chance(&r, 1, 2))
                TRY(ms_chunk_set_add(&hot[t], all[t].ids[i]));
    }
    w->nsteps = nsteps;
    w->ws = calloc(nsteps ? nsteps : 1, sizeof(*w->ws));
    w->whole = calloc(nsteps ? nsteps : 1, sizeof(*w->whole));
    if (!w->ws || !w->whole) {
        e = MS_E_NOMEM;
        goto out;
    }
    for (size_t k = 0; k < nsteps; k++) {
        uint32_t t = w->tl.e[k].task;
        struct ms_chunk_set *s = &w->ws[k];
        for (size_t i = 0; i < all[t].n; i++) {
            if (ms_chunk_set_has(&hot[t], all[t].ids[i]) || ms_rng_chance(&r, 1, 3))
                TRY(ms_chunk_set_add(s, all[t].ids[i]));
            TRY(ms_chunk_set_add(&w->whole[k], all[t].ids[i]));
        }
        ms_rng_shuffle_ids(&r, s->ids, s->n);
        if (s->n > 0 && ms_rng_chance(&r, 1, 5))
            TRY(ms_chunk_set_add(s, s->ids[ms_rng_below(&r, s->n)]));
    }
out:
    ms_timeline_fini(&part);
    for (size_t t = 0; t < 8; t++) {
        ms_chunk_set_fini(&all[t]);
        ms_chunk_set_fini(&hot[t]);
    }
    if (e)
        ms_test_world_free(w);
    return e;
}

void ms_test_world_free(struct ms_test_world *w)
{
    for (size_t k = 0; w->ws && k < w->nsteps; k++)
        ms_chunk_set_fini(&w->ws[k]);
    for (size_t k = 0; w->whole && k < w->nsteps; k++)
        ms_chunk_set_fini(&w->whole[k]);
    free(w->ws);
    free(w->whole);
    ms_timeline_fini(&w->tl);
    ms_rtable_fini(&w->rt);
    memset(w, 0, sizeof(*w));
}
