/*
 * sched_mirror.c - the scheduler's tasks as its mirror of their memory holds them (part of the
 * state machine: contract sched.h, design notes sched.c, the files' roles sched_int.h).
 *
 * A task's regions live in the one region table (s->rt) with region.task = its id; the task
 * maps the shim's region ids to the table's slots (rmap, ascending rid). Every chunk
 * transition goes through ms__sched_chunk_apply, which keeps the task's resident counter next
 * to the table's (S3). Orders hold their chunks as entries grouped in runs the way the wire
 * names them; a freed region only invalidates its entries (scrub_slot), so a late reply never
 * touches a slot that was reused. REGION, DEMAND and the order replies (EVICTED, POPULATED)
 * change this state only; what they unblock is decided by settle() (sched.c).
 */
#include "sched_int.h"

#include <stdio.h>
#include <string.h>

/* ---- small helpers --------------------------------------------------------------------------- */

struct ms_stask *ms__sched_find_task(const struct ms_sched *s, uint32_t id)
{
    size_t lo = 0, hi = s->ntasks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->tasks[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->ntasks && s->tasks[lo]->id == id ? s->tasks[lo] : NULL;
}

/* A task that may still talk to us (not a ghost). */
struct ms_stask *ms__sched_find_live(const struct ms_sched *s, uint32_t id)
{
    struct ms_stask *t = ms__sched_find_task(s, id);
    return t && !t->ghost ? t : NULL;
}

struct ms_stask *ms__sched_owner_of(const struct ms_sched *s, ms_chunk_id id)
{
    uint32_t slot = MS_CHUNK_REGION(id);
    if (slot >= s->rt.nslots || !s->rt.regions[slot].live)
        return NULL;
    return ms__sched_find_task(s, s->rt.regions[slot].task);
}

/* Apply a chunk event, keeping the owner's resident counter in step with the table's. */
int ms__sched_chunk_apply(struct ms_sched *s, struct ms_stask *t, ms_chunk_id id,
                          enum ms_chunk_event ev)
{
    struct ms_chunk *c = ms_chunk_get(&s->rt, id);
    if (!c)
        return MS_E_INVAL;
    bool was = ms_chunk_state_resident((enum ms_chunk_state)c->state);
    int rc = ms_chunk_apply(&s->rt, id, ev);
    if (rc)
        return rc;
    bool is = ms_chunk_state_resident((enum ms_chunk_state)c->state);
    if (was && !is)
        t->resident -= c->bytes;
    else if (!was && is)
        t->resident += c->bytes;
    return MS_OK;
}

/* An order of a task that is not stalled is in progress (a stalled task's wait for it). */
bool ms__sched_any_order_active(const struct ms_sched *s)
{
    for (size_t i = 0; i < s->ntasks; i++)
        if (!s->tasks[i]->stalled && (s->tasks[i]->evict.active || s->tasks[i]->pop.active))
            return true;
    return false;
}

static int rmap_find(const struct ms_stask *t, uint32_t rid)
{
    size_t lo = 0, hi = t->nrmap;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->rmap[mid].rid < rid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->nrmap && t->rmap[lo].rid == rid ? (int)lo : -1;
}

/* The shim owes progress on o: an EVICT always, a POPULATE only when its credit covers the next
 * whole run (a population waiting for credit is waiting for others, not for its shim). */
bool ms__sched_owes(const struct ms_sorder *o, bool evict)
{
    if (!o->active)
        return false;
    if (evict)
        return true;
    return o->runs_done < o->nruns && o->run_end[o->runs_done] <= o->granted;
}

void ms__sched_order_reset(struct ms_sorder *o)
{
    o->active = false;
    o->n = 0;
    o->nruns = 0;
    o->runs_done = 0;
    o->granted = 0;
    o->credit = 0;
    o->deadline = 0;
}

void ms__sched_order_start(const struct ms_sched *s, struct ms_sorder *o, uint32_t epoch,
                           uint64_t now)
{
    o->active = true;
    o->epoch = epoch;
    o->deadline = now + s->cfg.order_timeout_ns;
    o->t0 = now;
}

static void order_fini(struct ms_sorder *o)
{
    ms_free(o->e);
    ms_free(o->run_end);
    memset(o, 0, sizeof(*o));
}

void ms__sched_task_free(struct ms_stask *t)
{
    if (!t)
        return;
    ms_chunk_set_fini(&t->next_ws);
    ms_chunk_set_fini(&t->recent_ws);
    ms_free(t->rmap);
    order_fini(&t->evict);
    order_fini(&t->pop);
    ms_free(t);
}

/* ---- releasing memory ------------------------------------------------------------------------ */

/* Forget the slot in t's orders and working sets (it is about to be removed). */
static void scrub_slot(struct ms_stask *t, uint32_t slot)
{
    struct ms_sorder *orders[2] = {&t->evict, &t->pop};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < orders[k]->n; i++)
            if (MS_CHUNK_REGION(orders[k]->e[i].id) == slot)
                orders[k]->e[i].valid = 0;
    struct ms_chunk_set *sets[2] = {&t->next_ws, &t->recent_ws};
    for (int k = 0; k < 2; k++) {
        size_t w = 0;
        for (size_t i = 0; i < sets[k]->n; i++)
            if (MS_CHUNK_REGION(sets[k]->ids[i]) != slot)
                sets[k]->ids[w++] = sets[k]->ids[i];
        sets[k]->n = w;
    }
}

/* Release a region's chunks whatever their state, then remove it. Cannot fail. */
void ms__sched_release_region(struct ms_sched *s, struct ms_stask *t, uint32_t slot)
{
    struct ms_region *r = ms_region_get(&s->rt, slot);
    if (!r)
        return;
    scrub_slot(t, slot);
    for (uint32_t i = 0; i < r->nchunks; i++) {
        ms_chunk_id id = MS_CHUNK_ID(slot, i);
        struct ms_chunk *c = &r->chunks[i];
        c->pins = 0;
        if (c->state == MS_CS_OUT)
            ms__sched_chunk_apply(s, t, id, MS_CE_EVICT_DONE);
        else if (c->state == MS_CS_IN)
            ms__sched_chunk_apply(s, t, id, MS_CE_POP_FAIL);
        if (c->state != MS_CS_EMPTY)
            ms__sched_chunk_apply(s, t, id, MS_CE_DISCARD);
    }
    t->nchunks -= r->nchunks;
    ms_region_remove(&s->rt, slot);
}

/* ---- regions and demands --------------------------------------------------------------------- */

int ms__sched_on_region(struct ms_sched *s, uint64_t now, struct ms_stask *t,
                        const struct ms_msg_region *r, char *why, size_t whylen)
{
    if (r->op == MS_REGION_FREE) {
        int k = rmap_find(t, r->region);
        if (k < 0) {
            snprintf(why, whylen, "REGION free of unknown region %u", r->region);
            return MS_E_NOTFOUND;
        }
        ms__sched_release_region(s, t, t->rmap[k].slot);
        memmove(&t->rmap[k], &t->rmap[k + 1], (t->nrmap - (size_t)k - 1) * sizeof(t->rmap[0]));
        t->nrmap--;
        return MS_OK;
    }
    if (t->any_rid && r->region <= t->max_rid) {
        snprintf(why, whylen, "REGION id %u does not increase (last %u)", r->region, t->max_rid);
        return MS_E_STATE;
    }
    if (t->nrmap >= s->cfg.max_regions) {
        snprintf(why, whylen, "more than %u regions", s->cfg.max_regions);
        return MS_E_NOSPACE;
    }
    uint64_t cb = r->chunk_bytes ? r->chunk_bytes : ms_chunk_bytes_for(r->size);
    uint64_t span = MS_ROUND_UP(r->size, MS_GRAN);
    uint64_t nch = (span + cb - 1) / cb;
    if (nch > s->cfg.max_chunks || t->nchunks + nch > s->cfg.max_chunks) {
        snprintf(why, whylen, "more than %llu chunks", (unsigned long long)s->cfg.max_chunks);
        return MS_E_NOSPACE;
    }
    int rc = ms_grow((void **)&t->rmap, &t->caprmap, t->nrmap + 1, sizeof(t->rmap[0]));
    if (!rc)
        rc = ms_grow((void **)&s->slot_rid, &s->capslot, s->rt.nslots + 1, sizeof(s->slot_rid[0]));
    if (rc) {
        snprintf(why, whylen, "out of memory");
        return rc;
    }
    uint32_t slot;
    rc = ms_region_add(&s->rt, t->id, r->base, r->size, (enum ms_region_kind)r->kind, cb, &slot);
    if (rc) {
        snprintf(why, whylen, "REGION %u [0x%llx, +%llu): %s", r->region,
                 (unsigned long long)r->base, (unsigned long long)r->size, ms_strerror(rc));
        return rc;
    }
    s->slot_rid[slot] = r->region;
    t->rmap[t->nrmap++] = (struct rmap_ent){.rid = r->region, .slot = slot};
    t->any_rid = true;
    t->max_rid = r->region;
    t->nchunks += nch;
    (void)now;
    return MS_OK;
}

/* Set mark = 0 on every chunk of t (scratch for de-duplication). */
void ms__sched_clear_marks(struct ms_sched *s, struct ms_stask *t)
{
    for (size_t i = 0; i < t->nrmap; i++)
        ms_region_clear_marks(&s->rt, t->rmap[i].slot);
}

/* Every chunk of t's device-memory regions, in region-id order. */
int ms__sched_whole_footprint(struct ms_sched *s, struct ms_stask *t, struct ms_chunk_set *out)
{
    for (size_t i = 0; i < t->nrmap; i++) {
        uint32_t slot = t->rmap[i].slot;
        struct ms_region *r = &s->rt.regions[slot];
        if (r->kind == MS_RK_HOST)
            continue;
        for (uint32_t k = 0; k < r->nchunks; k++) {
            int rc = ms_chunk_set_add(out, MS_CHUNK_ID(slot, k));
            if (rc)
                return rc;
        }
    }
    return MS_OK;
}

/* Runs in the shim's numbering -> mirror ids, first occurrence kept, host regions skipped. */
static int expand_runs(struct ms_sched *s, struct ms_stask *t, const struct ms_run *runs,
                       uint32_t n, struct ms_chunk_set *out, uint64_t *budget_visits, char *why,
                       size_t whylen)
{
    ms__sched_clear_marks(s, t);
    for (uint32_t i = 0; i < n; i++) {
        int k = rmap_find(t, runs[i].region);
        if (k < 0) {
            snprintf(why, whylen, "DEMAND names unknown region %u", runs[i].region);
            return MS_E_NOTFOUND;
        }
        uint32_t slot = t->rmap[k].slot;
        struct ms_region *r = &s->rt.regions[slot];
        if ((uint64_t)runs[i].first + runs[i].count > r->nchunks) {
            snprintf(why, whylen, "DEMAND run %u:%u+%u beyond the region's %u chunks",
                     runs[i].region, runs[i].first, runs[i].count, r->nchunks);
            return MS_E_PARSE;
        }
        if (runs[i].count > *budget_visits) {
            snprintf(why, whylen, "DEMAND names too many chunks");
            return MS_E_NOSPACE;
        }
        *budget_visits -= runs[i].count;
        if (r->kind == MS_RK_HOST)
            continue;
        for (uint32_t c = runs[i].first; c < runs[i].first + runs[i].count; c++) {
            if (r->chunks[c].mark)
                continue;
            r->chunks[c].mark = 1;
            int rc = ms_chunk_set_add(out, MS_CHUNK_ID(slot, c));
            if (rc) {
                snprintf(why, whylen, "out of memory");
                return rc;
            }
        }
    }
    return MS_OK;
}

int ms__sched_on_demand(struct ms_sched *s, struct ms_stask *t, const struct ms_msg_demand *d,
                        char *why, size_t whylen)
{
    struct ms_chunk_set nx, rc_set;
    ms_chunk_set_init(&nx);
    ms_chunk_set_init(&rc_set);
    uint64_t visits = 4 * t->nchunks + 4096;
    int rc;
    if (d->flags & MS_DEMAND_WHOLE) {
        /* The runs are still checked: a broken message is broken whatever its flags. */
        rc = expand_runs(s, t, d->next, d->nnext, &rc_set, &visits, why, whylen);
        ms_chunk_set_clear(&rc_set);
        if (!rc)
            rc = ms__sched_whole_footprint(s, t, &nx);
    } else {
        rc = expand_runs(s, t, d->next, d->nnext, &nx, &visits, why, whylen);
    }
    if (!rc)
        rc = expand_runs(s, t, d->recent, d->nrecent, &rc_set, &visits, why, whylen);
    if (rc) {
        if (rc == MS_E_NOMEM)
            snprintf(why, whylen, "out of memory");
        ms_chunk_set_fini(&nx);
        ms_chunk_set_fini(&rc_set);
        return rc;
    }
    ms_chunk_set_fini(&t->next_ws);
    ms_chunk_set_fini(&t->recent_ws);
    t->next_ws = nx;
    t->recent_ws = rc_set;
    t->dflags = d->flags;
    t->misses = MS_MAX(t->misses, d->misses);
    t->host_bytes = d->host_bytes;
    t->host_pool = d->host_pool;
    if (!t->runnable && t->idle_at) {
        uint64_t g = s->now > t->idle_at ? s->now - t->idle_at : 0;
        t->gap_avg = t->gap_known ? (3 * t->gap_avg + g) / 4 : g;
        t->gap_known = true;
        t->idle_at = 0;
    }
    if (t->stalled) { /* scheduled again only once its STOPPED comes */
        t->stall_demand = true;
        return MS_OK;
    }
    t->runnable = true;
    if (s->cur == t->id || s->next == t->id || t->share != SH_NONE)
        t->dirty_demand = true;
    return MS_OK;
}

/* ---- order progress -------------------------------------------------------------------------- */

int ms__sched_on_progress(struct ms_sched *s, uint64_t now, struct ms_stask *t, bool evict,
                          const struct ms_msg_progress *p, char *why, size_t whylen)
{
    struct ms_sorder *o = evict ? &t->evict : &t->pop;
    if (!o->active || p->epoch != o->epoch)
        return MS_OK; /* a late reply to an order that is gone: harmless */
    if (p->runs_done < o->runs_done || p->runs_done > o->nruns) {
        snprintf(why, whylen, "%s runs_done %u outside %u..%zu", evict ? "EVICTED" : "POPULATED",
                 p->runs_done, o->runs_done, o->nruns);
        return MS_E_STATE;
    }
    size_t from = o->runs_done ? o->run_end[o->runs_done - 1] : 0;
    size_t to = p->runs_done ? o->run_end[p->runs_done - 1] : 0;
    if (!evict && to > o->granted) {
        snprintf(why, whylen, "POPULATED %u runs, beyond the credit of %llu bytes", p->runs_done,
                 (unsigned long long)o->credit);
        return MS_E_STATE;
    }
    /* Only an order sent during the switch in progress counts in its record (an incremental
     * order of the slice before may finish inside it). */
    bool mine = s->in_switch && o->t0 >= s->switch_t0;
    for (size_t i = from; i < to; i++) {
        struct oentry *e = &o->e[i];
        if (!e->valid)
            continue;
        if (evict) {
            if (ms__sched_chunk_apply(s, t, e->id, MS_CE_EVICT_DONE) == MS_OK) {
                t->bytes_out += e->bytes;
                s->bytes_out += e->bytes;
                s->sw_out += mine ? e->bytes : 0;
            }
        } else if (!e->fresh) {
            if (ms__sched_chunk_apply(s, t, e->id, MS_CE_POP_DONE) == MS_OK) {
                ms__sched_chunk_apply(s, t, e->id, MS_CE_TOUCH);
                t->bytes_in += e->bytes;
                s->bytes_in += e->bytes;
                s->sw_in += mine ? e->bytes : 0;
            }
        }
    }
    o->runs_done = p->runs_done;
    o->deadline = now + s->cfg.order_timeout_ns;
    if (t->stalled)
        ms__sched_pin_resident(s, t, true); /* S6: exactly its resident chunks, as they are now */
    if (o->runs_done == o->nruns) {
        uint64_t took = now > o->t0 ? now - o->t0 : 0;
        if (mine && evict && took >= s->sw_evict_ns) {
            s->sw_evict_ns = took;
            s->sw_evict_task = t->id;
        }
        if (mine && !evict)
            s->sw_pop_ns = MS_MAX(s->sw_pop_ns, took);
        if (!evict && s->last_switch.complete_wait && s->last_switch.to == t->id &&
            o->t0 >= s->last_switch.t0) {
            /* early_run: the switch's population completes after its RUN. The slice counts
             * from here: what the task ran meanwhile is a gain, and waiting for its chunks
             * never eats into its slice (docs/daemon.md, early_run). Under `adaptive` the
             * switch as it went (STOP to complete) stretches the slice as it does at RUN
             * without early_run, so both make switches the same share of the time. */
            s->last_switch.complete_wait = false;
            s->last_switch.complete_ns = now - s->last_switch.t0;
            s->complete_ns_total += s->last_switch.complete_ns;
            s->complete_count++;
            if (s->phase == MS_PH_RUNNING && s->cur == t->id) {
                if (s->cfg.policy == MS_SCHED_ADAPTIVE)
                    t->slice_ns = ms_adaptive_slice(t->slice_ns, s->last_switch.complete_ns,
                                                    s->cfg.slice_max_ns, s->cfg.switch_frac_pct);
                if (s->slice_end == UINT64_MAX || s->slice_end < now + t->slice_ns)
                    s->slice_end = now + t->slice_ns;
            }
        }
        ms__sched_order_reset(o);
    }
    return MS_OK;
}
