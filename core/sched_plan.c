/*
 * sched_plan.c - planning and dispatching (part of the state machine: contract sched.h, design
 * notes sched.c, the files' roles sched_int.h).
 *
 * A full switch (ms__sched_plan_switch, phase IDLE) asks the policy for a timeline, gives each
 * entry a working set (fill_future), builds an eviction plan over them (build_plan, OPT/LRU/
 * WHOLE, shortening the first set while it cannot fit) and dispatches it. An incremental
 * population (ms__sched_plan_incremental) does the same for the running task's new demand
 * without a switch, its resident chunks pinned as work in flight may use them. dispatch()
 * fills everything first (orders, messages, queue room) and can fail with nothing changed
 * (the caller retries at the next tick), then commits transitions only. Credit
 * (ms__sched_grant) lets a population load only what fits in the budget and the task's limit.
 */
#include "sched_int.h"

#include "timeline.h"

#include <string.h>

/* ---- planning -------------------------------------------------------------------------------- */

static const struct ms_cost *cost_of(const struct ms_sched *s)
{
    return s->cfg.cost ? s->cfg.cost : &ms_cost_h200;
}

static int sched_tasks(const struct ms_sched *s, struct ms_task_sched **out)
{
    struct ms_task_sched *a = ms_malloc((s->ntasks ? s->ntasks : 1) * sizeof(*a));
    if (!a)
        return MS_E_NOMEM;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        a[i] = (struct ms_task_sched){
            .id = t->id, .prio = t->prio, .weight = t->weight, .runnable = t->runnable};
    }
    *out = a;
    return MS_OK;
}

int ms__sched_make_timeline(struct ms_sched *s, uint32_t last, size_t horizon)
{
    struct ms_task_sched *a;
    int rc = sched_tasks(s, &a);
    if (rc)
        return rc;
    struct ms_policy p = {.kind = s->cfg.policy == MS_SCHED_PRIO ? MS_POLICY_PRIO : MS_POLICY_RR,
                          .slice_ns = s->cfg.slice_ns};
    rc = ms_policy_timeline(&p, a, s->ntasks, last, horizon, &s->tl);
    ms_free(a);
    return rc;
}

static int ws_copy(struct ms_chunk_set *dst, const struct ms_chunk_set *src)
{
    for (size_t i = 0; i < src->n; i++) {
        int rc = ms_chunk_set_add(dst, src->ids[i]);
        if (rc)
            return rc;
    }
    return MS_OK;
}

/*
 * ws[first..first+tl.n): the working set of each timeline entry: a task's `next` set at its
 * first appearance, its `recent` set (or `next` when it has none) later; whole footprints for
 * tasks that asked for it.
 */
static int fill_future(struct ms_sched *s, size_t first)
{
    for (size_t k = 0; k < s->tl.n; k++) {
        struct ms_chunk_set *w = &s->ws[first + k];
        ms_chunk_set_clear(w);
        struct ms_stask *t = ms__sched_find_task(s, s->tl.e[k].task);
        if (!t)
            continue;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = s->tl.e[j].task == t->id;
        int rc;
        if (t->dflags & MS_DEMAND_WHOLE)
            rc = ms__sched_whole_footprint(s, t, w);
        else if (seen && t->recent_ws.n > 0)
            rc = ws_copy(w, &t->recent_ws);
        else
            rc = ws_copy(w, &t->next_ws);
        if (rc)
            return rc;
    }
    return MS_OK;
}

/* Cut ws to its longest prefix whose distinct chunks fit in cap bytes. */
static void truncate_ws(struct ms_sched *s, struct ms_chunk_set *ws, uint64_t cap)
{
    for (size_t i = 0; i < ws->n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, ws->ids[i]);
        if (c)
            c->mark = 0;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < ws->n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, ws->ids[i]);
        if (!c || c->mark)
            continue;
        if (c->bytes > cap - sum) {
            ws->n = i;
            return;
        }
        sum += c->bytes;
        c->mark = 1;
    }
}

/* The host memory a task's shim may still pin (plan.h host_room): its HELLO limit less what
 * it holds. What it holds is known two ways: the mirror's chunks that were evicted or are
 * being evicted (exact for what this daemon moved, current at every event), and the shim's
 * last report (which also counts host memory the daemon never asked for, but lags behind
 * orders in flight); the larger counts. */
static uint64_t task_hosted(const struct ms_sched *s, const struct ms_stask *t)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < t->nrmap; i++) {
        const struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            if (r->chunks[k].hosted || r->chunks[k].state == MS_CS_OUT)
                sum += r->chunks[k].bytes;
    }
    return sum;
}

/* Host bytes the task's shim holds and cannot give back: its pool's free host chunks (those a
 * PREPARE made ahead among them) are taken or released before any new pinning at its limit,
 * so they are room, not held. */
static uint64_t task_held(const struct ms_sched *s, const struct ms_stask *t)
{
    uint64_t pool = MS_MIN(t->host_pool, t->host_bytes);
    return MS_MAX(t->host_bytes - pool, task_hosted(s, t));
}

static uint64_t host_room(void *ctx, uint32_t task)
{
    const struct ms_sched *s = ctx;
    const struct ms_stask *t = ms__sched_find_task(s, task);
    if (!t || !t->host_limit)
        return UINT64_MAX;
    uint64_t held = task_held(s, t);
    return t->host_limit > held ? t->host_limit - held : 0;
}

/* After a plan: say once per episode which tasks keep memory on the device because of their
 * host memory limit. */
static void host_account(struct ms_sched *s)
{
    bool any = false;
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        /* Capped: victims were passed over and this task has less room than a big chunk
         * (128 MiB, the largest ms_chunk_bytes_for makes). */
        uint64_t held = t->host_limit ? task_held(s, t) : 0;
        bool capped =
            s->plan.host_skipped_bytes > 0 && t->host_limit && held + 128 * MS_MIB > t->host_limit;
        if (capped && !t->host_capped)
            ms__sched_push_note(s, t->id,
                                "reached its host memory limit (%llu MiB pinned of %llu MiB): "
                                "its memory stays on the device, no more oversubscription",
                                (unsigned long long)(held >> 20),
                                (unsigned long long)(t->host_limit >> 20));
        else if (!capped && t->host_capped && s->plan.host_skipped_bytes == 0)
            ms__sched_push_note(s, t->id, "is below its host memory limit again");
        if (capped || s->plan.host_skipped_bytes == 0)
            t->host_capped = capped;
        any |= capped;
    }
    if (any)
        s->host_limited_plans++;
}

static int build_plan_inner(struct ms_sched *s, size_t nws, const struct ms_timeline *tl)
{
    struct ms_plan_input in = {.rt = &s->rt,
                               .budget = s->cfg.budget,
                               .tl = tl,
                               .ws = s->ws,
                               .nws = nws,
                               .policy = s->cfg.evict,
                               .host_room = host_room,
                               .host_ctx = s};
    size_t full = s->ws[0].n;
    int rc = ms_plan_build(&in, &s->plan);
    if (rc != MS_E_NOSPACE || full == 0)
        return rc;
    /* Shortened below: keep why (victims passed over for host room) for host_account. */
    uint64_t skipped = s->plan.host_skipped_bytes;
    s->plan_failures++;
    /* The longest prefix of ws[0] that fits (memory pinned elsewhere, e.g. by a ghost): lo
     * fits or is 0, hi does not. The longest, not just a shorter one, so that the running task
     * is left with none of its own memory outside its need when its need cannot fit whole
     * (plan_incremental then keeps the demand open instead of stopping it again and again). */
    size_t lo = 0, hi = full;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        s->ws[0].n = mid;
        rc = ms_plan_build(&in, &s->plan);
        if (rc == MS_OK)
            lo = mid;
        else if (rc == MS_E_NOSPACE)
            hi = mid;
        else
            return rc;
    }
    s->ws[0].n = lo;
    rc = ms_plan_build(&in, &s->plan);
    s->plan.host_skipped_bytes = MS_MAX(s->plan.host_skipped_bytes, skipped);
    return rc;
}

/* Build s->plan for ws[0..nws), shortening ws[0] while it cannot fit. */
static int build_plan(struct ms_sched *s, size_t nws, const struct ms_timeline *tl)
{
    int rc = build_plan_inner(s, nws, tl);
    if (rc == MS_OK)
        host_account(s);
    return rc;
}

/* Coalesce an order's entries into runs; fill the message's run array. */
int ms__sched_order_runs(struct ms_sched *s, struct ms_sorder *o, struct ms_msg *m)
{
    size_t nruns = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (i == 0 || MS_CHUNK_REGION(o->e[i].id) != MS_CHUNK_REGION(o->e[i - 1].id) ||
            MS_CHUNK_INDEX(o->e[i].id) != MS_CHUNK_INDEX(o->e[i - 1].id) + 1)
            nruns++;
    }
    int rc = ms_grow((void **)&o->run_end, &o->capruns, nruns, sizeof(o->run_end[0]));
    if (rc)
        return rc;
    struct ms_run *runs = ms_malloc((nruns ? nruns : 1) * sizeof(*runs));
    if (!runs)
        return MS_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        ms_chunk_id id = o->e[i].id;
        if (i > 0 && MS_CHUNK_REGION(id) == MS_CHUNK_REGION(o->e[i - 1].id) &&
            MS_CHUNK_INDEX(id) == MS_CHUNK_INDEX(o->e[i - 1].id) + 1) {
            runs[k - 1].count++;
            o->run_end[k - 1] = (uint32_t)(i + 1);
            continue;
        }
        runs[k].region = s->slot_rid[MS_CHUNK_REGION(id)];
        runs[k].first = MS_CHUNK_INDEX(id);
        runs[k].count = 1;
        o->run_end[k] = (uint32_t)(i + 1);
        k++;
    }
    o->nruns = nruns;
    m->order.runs = runs;
    m->order.nruns = (uint32_t)nruns;
    return MS_OK;
}

int ms__sched_order_add(struct ms_sorder *o, ms_chunk_id id, uint64_t bytes, bool fresh)
{
    int rc = ms_grow((void **)&o->e, &o->cap, o->n + 1, sizeof(o->e[0]));
    if (rc)
        return rc;
    o->e[o->n++] = (struct oentry){.id = id, .bytes = bytes, .valid = 1, .fresh = fresh};
    return MS_OK;
}

/* Credit the populate order of t as far as memory allows. Returns true when credit grew. */
bool ms__sched_grant(struct ms_sched *s, struct ms_stask *t)
{
    struct ms_sorder *o = &t->pop;
    bool grew = false;
    while (o->granted < o->n) {
        struct oentry *e = &o->e[o->granted];
        struct ms_chunk *c = e->valid ? ms_chunk_get(&s->rt, e->id) : NULL;
        if (c && (c->state == MS_CS_EMPTY || c->state == MS_CS_HOST)) {
            if (s->rt.resident_bytes > s->cfg.budget ||
                c->bytes > s->cfg.budget - s->rt.resident_bytes)
                break;
            if (t->limit && (t->resident > t->limit || c->bytes > t->limit - t->resident))
                break;
            if (ms__sched_chunk_apply(s, t, e->id, e->fresh ? MS_CE_MAP_FRESH : MS_CE_POP_START))
                e->valid = 0; /* cannot happen: states checked above */
        }
        o->credit += e->bytes;
        o->granted++;
        grew = true;
    }
    if (grew)
        o->deadline = s->now + s->cfg.order_timeout_ns;
    return grew;
}

/* Extra evictions of t's own chunks so that, after the plan, it stays within its limit. */
static int limit_victims(struct ms_sched *s, struct ms_stask *t, struct ms_sorder *o)
{
    if (!t->limit)
        return MS_OK;
    /* Resident after the plan: now - own evictions in the plan + populations. */
    uint64_t after = t->resident;
    for (size_t i = 0; i < s->plan.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, s->plan.steps[i].chunk);
        if (s->plan.steps[i].op == MS_STEP_POPULATE)
            after += c->bytes;
        else if (ms__sched_owner_of(s, s->plan.steps[i].chunk) == t)
            after -= c->bytes;
    }
    if (after <= t->limit)
        return MS_OK;
    /* Candidates: t's resident, settled chunks outside ws[0] and not already victims. */
    for (size_t i = 0; i < t->nrmap; i++) {
        struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            r->chunks[k].mark = 0;
    }
    for (size_t i = 0; i < s->ws[0].n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, s->ws[0].ids[i]);
        if (c)
            c->mark = 1;
    }
    for (size_t i = 0; i < s->plan.n; i++)
        ms_chunk_get(&s->rt, s->plan.steps[i].chunk)->mark = 1;
    /* Its own evictions need host room too (plan.h): what the plan already takes of it is
     * counted by task_hosted once those victims are OUT; here, the plan's never-hosted
     * victims of t are charged first. */
    uint64_t room = host_room(s, t->id);
    for (size_t i = 0; room != UINT64_MAX && i < s->plan.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, s->plan.steps[i].chunk);
        if (s->plan.steps[i].op == MS_STEP_EVICT && !c->hosted &&
            ms__sched_owner_of(s, s->plan.steps[i].chunk) == t)
            room = room > c->bytes ? room - c->bytes : 0;
    }
    while (after > t->limit) {
        ms_chunk_id best = 0;
        struct ms_chunk *bc = NULL;
        uint64_t bc_use = 0;
        for (size_t i = 0; i < t->nrmap; i++) {
            uint32_t slot = t->rmap[i].slot;
            struct ms_region *r = &s->rt.regions[slot];
            for (uint32_t k = 0; k < r->nchunks; k++) {
                struct ms_chunk *c = &r->chunks[k];
                if (c->mark || ms_chunk_pins(r, c) ||
                    (c->state != MS_CS_DIRTY && c->state != MS_CS_CLEAN))
                    continue;
                if (!c->hosted && c->bytes > room)
                    continue; /* no host room for it: it stays */
                if (!bc || ms_chunk_last_use(r, c) < bc_use) {
                    bc = c;
                    bc_use = ms_chunk_last_use(r, c);
                    best = MS_CHUNK_ID(slot, k);
                }
            }
        }
        if (!bc)
            break; /* nothing more to give back: the populations wait for credit instead */
        bc->mark = 1;
        if (!bc->hosted && room != UINT64_MAX)
            room -= bc->bytes;
        int rc = ms__sched_order_add(o, best, bc->bytes, false);
        if (rc)
            return rc;
        after -= bc->bytes;
    }
    return MS_OK;
}

static uint64_t adaptive_slice(const struct ms_sched *s, uint64_t base, uint64_t cost_ns)
{
    return ms_adaptive_slice(base, cost_ns, s->cfg.slice_max_ns, s->cfg.switch_frac_pct);
}

/* Predicted time of the migration prepared in the tasks' orders. */
static uint64_t predict_cost(struct ms_sched *s)
{
    const struct ms_cost *c = cost_of(s);
    uint64_t out = 0, in = 0, fixed = 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        for (size_t k = 0; k < t->evict.n; k++) {
            out += t->evict.e[k].bytes;
            fixed += ms_cost_unmap_ns(c, t->evict.e[k].bytes);
        }
        for (size_t k = 0; k < t->pop.n; k++) {
            if (!t->pop.e[k].fresh)
                in += t->pop.e[k].bytes;
            fixed += ms_cost_map_ns(c, t->pop.e[k].bytes);
        }
    }
    return ms_cost_transfer_ns(c, out, in, true) + fixed;
}

/* Round-robin slices no longer than twice the switches between them leave a third or more of
 * the GPU's time to moving memory (on an H100 two Llamas under one 3.5 GiB budget switched 1462
 * times in 200 s, 120 ms switches after 100 ms slices). Said once per daemon, after 8 switches,
 * with what would stretch the slices (docs/daemon.md, Policies). */
#define RR_HINT_SWITCHES 8
static void rr_hint(struct ms_sched *s)
{
    if (s->cfg.policy != MS_SCHED_RR || s->rr_hint_said || s->switches < RR_HINT_SWITCHES ||
        2 * s->switch_avg_ns < s->cfg.slice_ns)
        return;
    s->rr_hint_said = true;
    double sw = (double)s->switch_avg_ns / 1e6, sl = (double)s->cfg.slice_ns / 1e6;
    /* one line of the log, under the note's 128 bytes */
    ms__sched_push_note(s, NONE,
                        "switches take %.0f ms against %.0f ms slices (%.0f %% moving memory): "
                        "policy adaptive stretches slices",
                        sw, sl, 100.0 * sw / (sw + sl));
}

/* A switch begins (STOP sent, or planning begun with nothing to stop): its clock, and its
 * record's counters from zero (plans: from the running total). */
void ms__sched_switch_begin(struct ms_sched *s, uint64_t now)
{
    s->in_switch = true;
    s->switch_t0 = now;
    s->sw_in = s->sw_out = 0;
    s->sw_plans0 = s->plans;
    s->sw_predicted_ns = 0;
    s->sw_evict_ns = s->sw_pop_ns = 0;
    s->sw_evict_task = NONE;
    s->last_switch.first_wait = s->last_switch.complete_wait = false; /* that one is over */
}

void ms__sched_start_run(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_RUN);
    m.run.epoch = s->epoch;
    m.run.slice_ns = s->next_slice ? s->next_slice : s->cfg.slice_ns;
    /* Adaptive: the switch as it went (its drain, and a migration slower than predicted)
     * stretches the slice the plan chose, never shortens it. A refill's RUN gets what is left
     * of the slice it interrupted: the refill's own time counts against it (sched.h). */
    if (s->refill_run == t->id) {
        uint64_t end = MS_MAX(s->refill_end, now + s->cfg.slice_ns / 10);
        m.run.slice_ns = end - now;
        s->refill_run = NONE;
        s->refills++;
    } else if (s->cfg.policy == MS_SCHED_ADAPTIVE && s->in_switch && now > s->switch_t0) {
        m.run.slice_ns = adaptive_slice(s, m.run.slice_ns, now - s->switch_t0);
    }
    t->run_epoch = s->epoch;
    t->started = false;
    t->prep_sent = 0;
    t->slice_ns = m.run.slice_ns;
    ms__sched_push_send(s, t->id, &m); /* room reserved by the caller */
    t->switches++;
    t->run_since = now;
    s->phase = MS_PH_RUNNING;
    s->cur = t->id;
    s->next = NONE;
    s->incremental = false;
    /* early_run: the slice starts when the working set is complete (ms__sched_on_progress) */
    s->slice_end = s->cfg.early_run && t->pop.active ? UINT64_MAX : now + t->slice_ns;
    s->switches++;
    uint64_t d = s->in_switch && now > s->switch_t0 ? now - s->switch_t0 : 0;
    s->last_switch.t0 = now - d;
    s->last_switch.run_epoch = t->run_epoch;
    s->last_switch.first_ns = 0;
    s->last_switch.first_wait = true;
    s->last_switch.complete_ns = 0;
    s->last_switch.complete_wait = t->pop.active; /* early_run: it completes after RUN */
    if (!t->pop.active) {
        s->last_switch.complete_ns = d;
        s->complete_ns_total += d;
        s->complete_count++;
    }
    s->in_switch = false;
    s->stop_ns_total += MS_MIN(s->stop_pending, d);
    s->last_switch.seq = s->switches;
    s->last_switch.ns = d;
    s->last_switch.stop_ns = MS_MIN(s->stop_pending, d);
    s->last_switch.from = s->stop_from;
    s->last_switch.to = t->id;
    s->last_switch.in = s->sw_in;
    s->last_switch.out = s->sw_out;
    s->last_switch.plans = s->plans - s->sw_plans0;
    s->last_switch.predicted_ns = s->sw_predicted_ns;
    s->last_switch.evict_ns = s->sw_evict_ns;
    s->last_switch.evict_task = s->sw_evict_task;
    s->last_switch.pop_ns = s->sw_pop_ns;
    s->stop_pending = 0;
    s->stop_from = NONE;
    s->switch_ns_total += d;
    s->switch_ns_max = MS_MAX(s->switch_ns_max, d);
    s->switch_avg_ns = s->switches == 1 ? d : (3 * s->switch_avg_ns + d) / 4;
    s->holding = false;
    rr_hint(s);
    /* LRU: the working set is in use from now on. */
    for (size_t i = 0; i < t->next_ws.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state))
            ms__sched_chunk_apply(s, t, t->next_ws.ids[i], MS_CE_TOUCH);
    }
}

void ms__sched_prepare_hint(struct ms_sched *s, struct ms_stask *t)
{
    /* Not while t is populated: its credited chunks are counted resident before it has them. */
    if (!s->cfg.prepare_host || s->cfg.policy == MS_SCHED_PRIO || t->stalled || t->ghost ||
        t->pop.active)
        return;
    uint64_t free = s->cfg.budget > s->rt.resident_bytes ? s->cfg.budget - s->rt.resident_bytes : 0;
    uint64_t want = 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *o = s->tasks[i];
        if (o == t || !o->runnable || o->stalled || o->ghost)
            continue;
        uint64_t need = 0;
        for (size_t k = 0; k < o->next_ws.n; k++) {
            const struct ms_chunk *c = ms_chunk_get(&s->rt, o->next_ws.ids[k]);
            if (c && !ms_chunk_state_resident((enum ms_chunk_state)c->state))
                need += c->bytes;
        }
        want = MS_MAX(want, need);
    }
    if (want <= free)
        return;
    want -= free;
    uint64_t fresh = 0; /* t's resident chunks that were never hosted */
    for (size_t i = 0; i < t->nrmap; i++) {
        const struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            if (ms_chunk_state_ready((enum ms_chunk_state)r->chunks[k].state) &&
                !r->chunks[k].hosted)
                fresh += r->chunks[k].bytes;
    }
    want = MS_MIN(MS_MIN(want, fresh), host_room(s, t->id));
    if (want < t->prep_sent + MS_GRAN || ms__sched_reserve_actions(s, 1))
        return;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_PREPARE);
    m.prepare.epoch = t->run_epoch;
    m.prepare.bytes = want;
    ms__sched_push_send(s, t->id, &m);
    t->prep_sent = want;
    s->prepares++;
    s->prepare_bytes += want;
}

/*
 * Turn s->plan into orders for t (fill, then commit). incremental: t keeps RUN. Returns
 * MS_E_NOMEM with nothing changed, or MS_OK with orders queued and the phase advanced.
 */
static int dispatch(struct ms_sched *s, uint64_t now, struct ms_stask *t, bool incremental,
                    uint64_t base_slice)
{
    int rc = MS_OK;
    size_t nowners = 0;
    struct ms_msg *msgs = NULL;
    struct ms_stask **owners = NULL;

    /* Fill: entries of every owner's EVICT order and t's POPULATE order (a stalled task keeps
     * its orders: its chunks in motion are settled by its late replies). */
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i]->stalled)
            continue;
        ms__sched_order_reset(&s->tasks[i]->evict);
        ms__sched_order_reset(&s->tasks[i]->pop);
    }
    for (size_t i = 0; i < s->plan.n && !rc; i++) {
        ms_chunk_id id = s->plan.steps[i].chunk;
        struct ms_chunk *c = ms_chunk_get(&s->rt, id);
        if (s->plan.steps[i].op == MS_STEP_EVICT)
            rc = ms__sched_order_add(&ms__sched_owner_of(s, id)->evict, id, c->bytes, false);
        else
            rc = ms__sched_order_add(&t->pop, id, c->bytes, c->state == MS_CS_EMPTY);
    }
    if (!rc && !incremental)
        rc = limit_victims(s, t, &t->evict);
    if (rc)
        goto undo;
    for (size_t i = 0; i < s->ntasks; i++)
        nowners += s->tasks[i]->evict.n > 0;
    msgs = ms_calloc(nowners + 1, sizeof(*msgs));
    owners = ms_calloc(nowners + 1, sizeof(*owners));
    if (!msgs || !owners) {
        rc = MS_E_NOMEM;
        goto undo;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *o = s->tasks[i];
        if (!o->evict.n)
            continue;
        ms_msg_init(&msgs[k], MS_MSG_EVICT);
        owners[k] = o;
        rc = ms__sched_order_runs(s, &o->evict, &msgs[k]);
        k++;
        if (rc)
            goto undo;
    }
    if (t->pop.n) {
        ms_msg_init(&msgs[nowners], MS_MSG_POPULATE);
        rc = ms__sched_order_runs(s, &t->pop, &msgs[nowners]);
        if (rc)
            goto undo;
    }
    rc = ms__sched_reserve_actions(s, nowners + 2);
    if (rc)
        goto undo;

    /* Commit. */
    uint32_t epoch = ++s->epoch;
    if (!incremental)
        s->shrink = false; /* this plan brings the table under the budget */
    s->plans++;
    uint64_t cost = predict_cost(s);
    if (s->in_switch)
        s->sw_predicted_ns += cost;
    if (!incremental) {
        uint64_t slice = base_slice;
        if (s->cfg.policy == MS_SCHED_ADAPTIVE && s->refill_run != t->id)
            slice = adaptive_slice(s, base_slice, cost);
        s->next_slice = slice;
    }
    for (k = 0; k < nowners; k++) {
        struct ms_stask *o = owners[k];
        for (size_t i = 0; i < o->evict.n; i++) {
            ms_chunk_id id = o->evict.e[i].id;
            struct ms_chunk *c = ms_chunk_get(&s->rt, id);
            if (c->state == MS_CS_CLEAN)
                ms__sched_chunk_apply(s, o, id, MS_CE_TOUCH);
            if (ms__sched_chunk_apply(s, o, id, MS_CE_EVICT_START))
                o->evict.e[i].valid = 0; /* cannot happen: victims are settled, unpinned */
        }
        ms__sched_order_start(s, &o->evict, epoch, now);
        msgs[k].order.epoch = epoch;
        ms__sched_push_send(s, o->id, &msgs[k]);
    }
    if (t->pop.n) {
        ms__sched_grant(s, t);
        ms__sched_order_start(s, &t->pop, epoch, now);
        msgs[nowners].order.epoch = epoch;
        msgs[nowners].order.credit = t->pop.credit;
        ms__sched_push_send(s, t->id, &msgs[nowners]);
    }
    ms_free(msgs);
    ms_free(owners);

    if (incremental) {
        s->phase = t->pop.active ? MS_PH_MIGRATING : MS_PH_RUNNING;
        s->next = t->pop.active ? t->id : NONE;
        s->incremental = t->pop.active;
    } else if (!t->pop.active || s->cfg.early_run) {
        ms__sched_start_run(s, now, t);
    } else {
        s->phase = MS_PH_MIGRATING;
        s->next = t->id;
        s->incremental = false;
    }
    return MS_OK;

undo:
    if (msgs)
        for (size_t i = 0; i <= nowners; i++)
            ms_msg_free(&msgs[i]);
    ms_free(msgs);
    ms_free(owners);
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i]->stalled)
            continue;
        ms__sched_order_reset(&s->tasks[i]->evict);
        ms__sched_order_reset(&s->tasks[i]->pop);
    }
    return rc;
}

/*
 * PRIO: a task of higher priority than `run` (the task about to run, or running) that is idle
 * now (a service between requests) preempts as soon as it demands again, so for eviction it
 * comes next: insert it at position `at` of the planning timeline, the entry right after
 * `run` (fill_future gives it its last `next` set). OPT then evicts other tasks' chunks before
 * the returner's, and a returning request finds its memory resident as far as the budget
 * allows. Only plans see these entries; who runs is still the policy's timeline (make_timeline
 * is called afresh for every decision).
 */
static int add_returners(struct ms_sched *s, const struct ms_stask *run, size_t at)
{
    if (s->cfg.policy != MS_SCHED_PRIO || !run || at > s->tl.n)
        return MS_OK;
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        if (t == run || t->runnable || t->prio <= run->prio || t->next_ws.n == 0)
            continue;
        int rc = ms_grow((void **)&s->tl.e, &s->tl.cap, s->tl.n + 1, sizeof(s->tl.e[0]));
        if (rc)
            return rc;
        memmove(&s->tl.e[at + 1], &s->tl.e[at], (s->tl.n - at) * sizeof(s->tl.e[0]));
        s->tl.e[at] = (struct ms_tl_entry){.task = t->id, .slice_ns = s->cfg.slice_ns};
        s->tl.n++;
    }
    return MS_OK;
}

/* A refill (sched.h): t, stopped to make room for its own demand, runs again first while its
 * slice has at least a tenth of the base slice left. Consumes s->refill either way. */
static int refill_first(struct ms_sched *s, uint64_t now)
{
    struct ms_stask *t = ms__sched_find_task(s, s->refill);
    s->refill = NONE;
    if (!t || !t->runnable || t->stalled || t->ghost || s->cfg.policy == MS_SCHED_PRIO ||
        s->refill_end == UINT64_MAX || s->refill_end < now + s->cfg.slice_ns / 10)
        return MS_OK;
    if (!(s->tl.n > 0 && s->tl.e[0].task == t->id)) {
        int rc = ms_grow((void **)&s->tl.e, &s->tl.cap, s->tl.n + 1, sizeof(s->tl.e[0]));
        if (rc)
            return rc;
        memmove(&s->tl.e[1], &s->tl.e[0], s->tl.n * sizeof(s->tl.e[0]));
        s->tl.n++;
    }
    s->tl.e[0] = (struct ms_tl_entry){.task = t->id, .slice_ns = s->refill_end - now};
    s->refill_run = t->id;
    return MS_OK;
}

/* Plan and start the switch to the policy's next task (or a refill's task). Phase IDLE, no
 * orders outstanding. */
int ms__sched_plan_switch(struct ms_sched *s, uint64_t now)
{
    s->refill_run = NONE;
    int rc = ms__sched_make_timeline(s, s->last, s->cfg.horizon);
    if (!rc && s->refill != NONE)
        rc = refill_first(s, now);
    if (!rc && s->tl.n > 0)
        rc = add_returners(s, ms__sched_find_task(s, s->tl.e[0].task), 1);
    if (rc || s->tl.n == 0)
        return rc;
    struct ms_stask *t = ms__sched_find_task(s, s->tl.e[0].task);
    uint64_t base_slice = s->tl.e[0].slice_ns;
    rc = ms_chunk_sets_reserve(&s->ws, &s->capws, s->tl.n);
    if (!rc)
        rc = fill_future(s, 0);
    if (!rc && s->cfg.evict == MS_EVICT_WHOLE) {
        ms_chunk_set_clear(&s->ws[0]);
        rc = ms__sched_whole_footprint(s, t, &s->ws[0]);
    }
    if (rc)
        return rc;
    truncate_ws(s, &s->ws[0], t->limit ? MS_MIN(t->limit, s->cfg.budget) : s->cfg.budget);
    rc = build_plan(s, s->tl.n, &s->tl);
    if (rc)
        return rc;
    return dispatch(s, now, t, false, base_slice);
}

bool ms__sched_needs_population(struct ms_sched *s, struct ms_stask *t)
{
    for (size_t i = 0; i < t->next_ws.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c && (c->state == MS_CS_EMPTY || c->state == MS_CS_HOST))
            return true;
    }
    return false;
}

/* Bytes of t's settled resident chunks outside its `next` set (a full switch could evict them). */
static uint64_t own_spare(struct ms_sched *s, struct ms_stask *t)
{
    ms__sched_clear_marks(s, t);
    for (size_t i = 0; i < t->next_ws.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c)
            c->mark = 1;
    }
    uint64_t spare = 0;
    for (size_t i = 0; i < t->nrmap; i++) {
        struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++) {
            struct ms_chunk *c = &r->chunks[k];
            if (!c->mark && ms_chunk_state_ready((enum ms_chunk_state)c->state))
                spare += c->bytes;
        }
    }
    return spare;
}

/*
 * The running task demanded chunks it does not have: populate them without a switch. When its
 * own resident chunks (pinned here: work in flight may use them) leave no room for even one
 * of them but a full switch could evict some, MS_E_BUSY asks the caller to stop the task
 * instead (a task alone would otherwise wait forever). When neither helps (the room is pinned,
 * e.g. by a ghost), the demand stays open and is retried (MS_E_NOSPACE, or MS_OK with
 * dirty_demand and a retry set when an eviction-only plan was sent).
 */
int ms__sched_plan_incremental(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    int rc = ms__sched_make_timeline(s, t->id, s->cfg.horizon);
    if (!rc)
        rc = add_returners(s, t, 0);
    if (!rc)
        rc = ms_chunk_sets_reserve(&s->ws, &s->capws, s->tl.n + 1);
    if (!rc)
        rc = fill_future(s, 1);
    if (!rc) {
        ms_chunk_set_clear(&s->ws[0]);
        rc = ws_copy(&s->ws[0], &t->next_ws);
    }
    if (rc)
        return rc;
    truncate_ws(s, &s->ws[0], t->limit ? MS_MIN(t->limit, s->cfg.budget) : s->cfg.budget);
    /* The running task's other chunks may be in use by work in flight: never victims. */
    for (size_t i = 0; i < t->nrmap; i++) {
        struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            if (ms_chunk_state_resident((enum ms_chunk_state)r->chunks[k].state))
                r->chunks[k].pins++;
    }
    rc = build_plan(s, s->tl.n + 1, NULL);
    for (size_t i = 0; i < t->nrmap; i++) {
        struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            r->chunks[k].pins = 0;
    }
    if (rc == MS_E_NOSPACE && own_spare(s, t) > 0)
        return MS_E_BUSY;
    if (rc)
        return rc;
    /* Respect the limit: populate only what fits beside what the task holds. */
    if (t->limit) {
        uint64_t room = t->limit > t->resident ? t->limit - t->resident : 0, sum = 0;
        size_t w = 0;
        for (size_t i = 0; i < s->plan.n; i++) {
            struct ms_plan_step st = s->plan.steps[i];
            if (st.op == MS_STEP_POPULATE) {
                uint64_t b = ms_chunk_get(&s->rt, st.chunk)->bytes;
                if (b > room - sum)
                    continue;
                sum += b;
            }
            s->plan.steps[w++] = st;
        }
        s->plan.n = w;
    }
    size_t pops = 0;
    for (size_t i = 0; i < s->plan.n; i++)
        pops += s->plan.steps[i].op == MS_STEP_POPULATE;
    if (pops == 0) {
        if (own_spare(s, t) > 0)
            return MS_E_BUSY;
        /* Nothing it lacks fits yet, and a switch would free nothing of its own: the room is
         * held by memory that cannot move now (a ghost's, until its process exits) or is on
         * its way out. Send what the plan frees and keep the demand open, so that it is
         * planned again (the retry, and any release of memory) instead of lost: its shim
         * waits for this population and does not ask twice. */
        if (s->plan.n == 0)
            return MS_E_NOSPACE;
        rc = dispatch(s, now, t, true, 0);
        if (rc)
            return rc;
        t->dirty_demand = true;
        s->retry = true;
        s->retry_at = now + PINNED_RETRY_NS;
        return MS_OK;
    }
    return dispatch(s, now, t, true, 0);
}
