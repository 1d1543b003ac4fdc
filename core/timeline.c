/*
 * timeline.c - scheduling policies: from the tasks' scheduling state to a timeline (timeline.h).
 *
 * Design
 *   Both policies reduce to the same shape: pick the eligible tasks, order them by id, and cycle
 *   through them starting just after the task that ran last. Round-robin makes every runnable
 *   task eligible; priority makes only the runnable tasks of the highest runnable priority
 *   eligible, so a lower-priority task never appears while a higher one is runnable (preemption is
 *   the caller's part: it re-asks whenever a task becomes runnable and compares entry 0).
 *
 *   One scratch array, (id, position) pairs sorted by id, serves both the duplicate-id check
 *   and the cyclic order, so a call costs O(ntasks log ntasks + horizon) and two allocations at
 *   most (the scratch and, if needed, growing the output).
 *
 *   The adaptive policy is round-robin with a stretched slice; the stretch rule
 *   (ms_adaptive_slice) lives here so the scheduler and the simulator apply the same one.
 *
 * Invariants
 *   - On success out->n == horizon when at least one task is eligible, else 0.
 *   - Every entry names an eligible task; consecutive entries follow the ascending-id cycle; the
 *     first entry is the first eligible id greater than `last`, wrapping to the smallest.
 *   - slice_ns of an entry = policy slice * max(weight, 1), saturating at UINT64_MAX.
 *   - On any error out->n == 0 (its array, if any, is kept for reuse).
 */
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

void ms_timeline_init(struct ms_timeline *tl)
{
    tl->e = NULL;
    tl->n = 0;
    tl->cap = 0;
}

void ms_timeline_fini(struct ms_timeline *tl)
{
    ms_free(tl->e);
    ms_timeline_init(tl);
}

/* Scratch entry: a task's id next to its position in the caller's array (qsort has no context). */
struct by_id {
    uint32_t id;
    size_t idx;
};

static int cmp_by_id(const void *a, const void *b)
{
    uint32_t ia = ((const struct by_id *)a)->id, ib = ((const struct by_id *)b)->id;
    return ia < ib ? -1 : ia > ib;
}

static uint64_t slice_for(uint64_t slice_ns, uint32_t weight)
{
    uint64_t w = weight ? weight : 1;
    if (slice_ns > UINT64_MAX / w)
        return UINT64_MAX;
    return slice_ns * w;
}

int ms_policy_timeline(const struct ms_policy *p, const struct ms_task_sched *tasks, size_t ntasks,
                       uint32_t last, size_t horizon, struct ms_timeline *out)
{
    if (!out)
        return MS_E_INVAL;
    out->n = 0;
    if (!p || p->slice_ns == 0 || (ntasks > 0 && !tasks))
        return MS_E_INVAL;
    if (p->kind != MS_POLICY_RR && p->kind != MS_POLICY_PRIO)
        return MS_E_INVAL;
    if (ntasks == 0)
        return MS_OK;
    if (ntasks > SIZE_MAX / sizeof(struct by_id))
        return MS_E_NOMEM;

    struct by_id *order = ms_malloc(ntasks * sizeof(*order));
    if (!order)
        return MS_E_NOMEM;
    for (size_t i = 0; i < ntasks; i++)
        order[i] = (struct by_id){.id = tasks[i].id, .idx = i};
    qsort(order, ntasks, sizeof(*order), cmp_by_id);

    int rc = MS_OK;
    for (size_t i = 1; i < ntasks; i++) {
        if (order[i].id == order[i - 1].id) {
            rc = MS_E_INVAL;
            goto done;
        }
    }

    /* Eligible tasks, compacted in place into order[0..nelig), still ascending by id. */
    bool any = false;
    int32_t top = 0;
    for (size_t i = 0; i < ntasks; i++) {
        const struct ms_task_sched *t = &tasks[order[i].idx];
        if (t->runnable && (!any || t->prio > top)) {
            top = t->prio;
            any = true;
        }
    }
    size_t nelig = 0;
    for (size_t i = 0; i < ntasks; i++) {
        const struct ms_task_sched *t = &tasks[order[i].idx];
        if (!t->runnable || (p->kind == MS_POLICY_PRIO && t->prio != top))
            continue;
        order[nelig++] = order[i];
    }
    if (nelig == 0 || horizon == 0)
        goto done;

    rc = ms_grow((void **)&out->e, &out->cap, horizon, sizeof(*out->e));
    if (rc)
        goto done;

    /* First eligible id > last, wrapping to the smallest (last == MS_TASK_NONE wraps at once). */
    size_t start = 0;
    while (start < nelig && order[start].id <= last)
        start++;
    if (start == nelig)
        start = 0;

    for (size_t k = 0; k < horizon; k++) {
        const struct ms_task_sched *t = &tasks[order[(start + k) % nelig].idx];
        out->e[k].task = t->id;
        out->e[k].slice_ns = slice_for(p->slice_ns, t->weight);
    }
    out->n = horizon;
done:
    ms_free(order);
    return rc;
}

int ms_policy_kind_parse(const char *s, enum ms_policy_kind *out)
{
    if (!s || !out)
        return MS_E_INVAL;
    if (strcmp(s, "rr") == 0)
        *out = MS_POLICY_RR;
    else if (strcmp(s, "prio") == 0)
        *out = MS_POLICY_PRIO;
    else
        return MS_E_NOTFOUND;
    return MS_OK;
}

const char *ms_policy_kind_name(enum ms_policy_kind k)
{
    switch (k) {
    case MS_POLICY_RR: return "rr";
    case MS_POLICY_PRIO: return "prio";
    }
    return "unknown";
}

uint64_t ms_adaptive_slice(uint64_t base, uint64_t cost_ns, uint64_t slice_max_ns,
                           uint32_t switch_frac_pct)
{
    uint32_t frac = switch_frac_pct ? switch_frac_pct : 1;
    uint64_t want = cost_ns > UINT64_MAX / 100 ? UINT64_MAX : cost_ns * 100 / frac;
    return MS_MIN(MS_MAX(want, base), MS_MAX(slice_max_ns, base));
}
