/*
 * sched_share.c - sharing: the phases SHARED and UNSHARING (part of the state machine: the
 * rules are sched.h, "Sharing"; design notes sched.c; the files' roles sched_int.h).
 *
 * When every live task's demanded set fits in the budget beside what is set aside (ghosts,
 * stalled tasks), and the configuration allows it (share on, not prio, equal weights), all
 * tasks hold RUN at once: each sharer's part is its `share` state (SH_*), never s->cur, so the
 * exclusive phases see at most one task holding RUN. A sharer's new demand is populated fully
 * credited. When memory stops fitting, every sharer is stopped (UNSHARING), and after a leave
 * for lack of memory sharing comes back only once the whole footprints fit (share_blocked: no
 * flapping between the two modes).
 */
#include "sched_int.h"

#include "units.h"

#include <stdio.h>

/* ---- sharing (sched.h, "Sharing") ------------------------------------------------------------ */

bool ms__sched_chunk_resident(const struct ms_sched *s, ms_chunk_id id, uint64_t *bytes)
{
    const struct ms_chunk *c = ms_chunk_get((struct ms_rtable *)&s->rt, id);
    *bytes = c ? c->bytes : 0;
    return !c || ms_chunk_state_resident((enum ms_chunk_state)c->state);
}

/* Whether t's demanded set is its whole footprint (a WHOLE demand, or WHOLE eviction). */
bool ms__sched_wants_whole(const struct ms_sched *s, const struct ms_stask *t)
{
    return (t->dflags & MS_DEMAND_WHOLE) || s->cfg.evict == MS_EVICT_WHOLE;
}

/* Bytes of t's demanded set that are not resident (what sharing would populate); whole: of its
 * whole footprint. */
static uint64_t share_missing(const struct ms_sched *s, const struct ms_stask *t, bool whole)
{
    uint64_t miss = 0, b;
    if (whole || ms__sched_wants_whole(s, t)) {
        for (size_t i = 0; i < t->nrmap; i++) {
            const struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
            if (r->kind == MS_RK_HOST)
                continue;
            for (uint32_t k = 0; k < r->nchunks; k++)
                if (!ms_chunk_state_resident((enum ms_chunk_state)r->chunks[k].state))
                    miss += r->chunks[k].bytes;
        }
        return miss;
    }
    for (size_t i = 0; i < t->next_ws.n; i++)
        if (!ms__sched_chunk_resident(s, t->next_ws.ids[i], &b))
            miss += b;
    return miss;
}

/* A size for a log line ("15.2 GiB"); buf: 16 bytes. */
static const char *hsize(uint64_t b, char *buf)
{
    ms_format_size_h(b, buf, 16);
    return buf;
}

/* share_fits: the tasks may share; they may not, for lack of memory, or by configuration. */
enum { SHARE_FITS = 0, SHARE_MEMORY, SHARE_EXCLUSIVE };

/*
 * Whether the tasks may share the GPU now ("Sharing", sched.h); *need: the bytes all of them
 * need together (their whole footprints with `whole`). why: the reason when not.
 */
static int share_fits(const struct ms_sched *s, bool whole, uint64_t *need, char *why,
                      size_t whylen)
{
    *need = 0;
    if (!s->cfg.share) {
        snprintf(why, whylen, "turned off");
        return SHARE_EXCLUSIVE;
    }
    if (s->cfg.policy == MS_SCHED_PRIO) {
        snprintf(why, whylen, "policy prio: priorities preempt");
        return SHARE_EXCLUSIVE;
    }
    if (s->over_budget || s->shrink) {
        snprintf(why, whylen, "the budget was lowered below what is resident");
        return SHARE_MEMORY;
    }
    const struct ms_stask *first = NULL, *worst = NULL;
    uint64_t total = 0, worst_miss = 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        if (t->ghost || t->stalled) {
            total += t->resident;
            continue;
        }
        uint32_t w = t->weight ? t->weight : 1;
        if (!first) {
            first = t;
        } else if (w != (first->weight ? first->weight : 1)) {
            snprintf(why, whylen, "task %u has weight %u, task %u %u: weights slice", t->id, w,
                     first->id, first->weight ? first->weight : 1);
            return SHARE_EXCLUSIVE;
        }
        uint64_t miss = share_missing(s, t, whole);
        if (t->limit && t->resident + miss > t->limit) {
            char b1[16], b2[16];
            snprintf(why, whylen, "task %u needs %s, over its limit of %s", t->id,
                     hsize(t->resident + miss, b1), hsize(t->limit, b2));
            return SHARE_MEMORY;
        }
        total += t->resident + miss;
        if (!worst || miss > worst_miss) {
            worst = t;
            worst_miss = miss;
        }
    }
    *need = total;
    if (total > s->cfg.budget) {
        uint64_t res = s->rt.resident_bytes;
        char b1[16], b2[16], b3[16], b4[16];
        snprintf(why, whylen, "task %u demands %s more, %s free; all need %s of %s",
                 worst ? worst->id : NONE, hsize(worst_miss, b1),
                 hsize(res < s->cfg.budget ? s->cfg.budget - res : 0, b2), hsize(total, b3),
                 hsize(s->cfg.budget, b4));
        return SHARE_MEMORY;
    }
    return SHARE_FITS;
}

static size_t live_count(const struct ms_sched *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->ntasks; i++)
        n += !s->tasks[i]->ghost && !s->tasks[i]->stalled;
    return n;
}

/* Begin sharing: from IDLE, or from RUNNING (cur keeps its RUN and becomes a sharer). */
static void share_enter(struct ms_sched *s, uint64_t need)
{
    if (s->phase == MS_PH_RUNNING) {
        struct ms_stask *t = ms__sched_find_task(s, s->cur);
        t->share = SH_RUN;
        t->dirty_demand = true; /* what its plan left out (memory that was short) comes now */
        s->last = t->id;
    }
    s->phase = MS_PH_SHARED;
    s->cur = s->next = NONE;
    s->incremental = false;
    s->holding = false;
    s->in_switch = false; /* a switch that had begun ends here, without a RUN to count */
    s->stop_pending = 0;
    s->stop_from = NONE;
    s->share_ons++;
    size_t n = live_count(s);
    char b1[16], b2[16];
    ms__sched_push_note(s, NONE, "sharing: on (%zu task%s, %s of %s)", n, n == 1 ? "" : "s",
                        hsize(need, b1), hsize(s->cfg.budget, b2));
}

/* End sharing: STOP every sharer holding RUN; UNSHARING until they all stopped. memory: for
 * lack of memory (sharing comes back only once the whole footprints fit: share_blocked). */
static void share_leave(struct ms_sched *s, uint64_t now, bool memory, const char *why)
{
    size_t n = 0;
    for (size_t i = 0; i < s->ntasks; i++)
        n += s->tasks[i]->share == SH_RUN;
    if (ms__sched_reserve_actions(s, n + 1)) {
        s->retry = true;
        s->retry_at = now + RETRY_NS;
        return;
    }
    s->share_offs++;
    s->share_blocked = memory;
    ms__sched_push_note(s, NONE, "sharing: off (%s)", why);
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        if (t->share == SH_RUN) {
            struct ms_msg m;
            ms_msg_init(&m, MS_MSG_STOP);
            m.stop.epoch = t->run_epoch;
            ms__sched_push_send(s, t->id, &m);
            t->share = SH_STOPPING;
        } else {
            t->share = SH_NONE; /* loading: not running yet; its population completes */
        }
        t->dirty_demand = false;
    }
    if (n > 0) {
        s->phase = MS_PH_UNSHARING;
        s->stop_by = now + s->cfg.stop_timeout_ns;
        ms__sched_switch_begin(s, now);
    } else {
        s->phase = MS_PH_IDLE;
    }
}

/* RUN to a sharer (room reserved by the caller). */
static void share_run(struct ms_sched *s, uint64_t now, struct ms_stask *t, uint32_t epoch)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_RUN);
    m.run.epoch = epoch;
    m.run.slice_ns = s->cfg.slice_ns; /* no timer stops it: the shim only counts slices */
    ms__sched_push_send(s, t->id, &m);
    t->run_epoch = epoch;
    t->started = false;
    t->slice_ns = m.run.slice_ns;
    t->run_since = now;
    t->switches++;
    t->share = SH_RUN;
    s->last = t->id;
    for (size_t i = 0; i < t->next_ws.n; i++) { /* LRU: in use from now on */
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state))
            ms__sched_chunk_apply(s, t, t->next_ws.ids[i], MS_CE_TOUCH);
    }
}

/*
 * Admit t (admit: it does not hold RUN yet) or serve a sharer's new demand: POPULATE what of
 * its demanded set is not resident, fully credited (share_fits said it fits in free memory),
 * and RUN when it has nothing to wait for (or at once under early_run). MS_E_NOMEM with
 * nothing changed.
 */
static int share_serve(struct ms_sched *s, uint64_t now, struct ms_stask *t, bool admit)
{
    struct ms_chunk_set whole;
    ms_chunk_set_init(&whole);
    const struct ms_chunk_set *ws = &t->next_ws;
    int rc = MS_OK;
    if (ms__sched_wants_whole(s, t)) {
        rc = ms__sched_whole_footprint(s, t, &whole);
        ws = &whole;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_POPULATE);
    ms__sched_order_reset(&t->pop);
    for (size_t i = 0; i < ws->n && !rc; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, ws->ids[i]);
        if (c && (c->state == MS_CS_EMPTY || c->state == MS_CS_HOST))
            rc = ms__sched_order_add(&t->pop, ws->ids[i], c->bytes, c->state == MS_CS_EMPTY);
    }
    ms_chunk_set_fini(&whole);
    if (!rc && t->pop.n)
        rc = ms__sched_order_runs(s, &t->pop, &m);
    if (!rc)
        rc = ms__sched_reserve_actions(s, 2);
    if (rc) {
        ms_msg_free(&m);
        ms__sched_order_reset(&t->pop);
        return rc;
    }
    uint32_t epoch = ++s->epoch;
    if (t->pop.n) {
        ms__sched_grant(s, t);
        ms__sched_order_start(s, &t->pop, epoch, now);
        m.order.epoch = epoch;
        m.order.credit = t->pop.credit;
        ms__sched_push_send(s, t->id, &m);
        s->plans++;
    } else {
        ms_msg_free(&m);
    }
    if (admit) {
        t->share_epoch = epoch;
        if (!t->pop.active || s->cfg.early_run)
            share_run(s, now, t, epoch);
        else
            t->share = SH_LOADING;
    }
    return MS_OK;
}

/* Phase SHARED: leave it when the memory no longer fits, else serve every task. */
void ms__sched_decide_shared(struct ms_sched *s, uint64_t now)
{
    uint64_t need;
    char why[128];
    int fit = share_fits(s, false, &need, why, sizeof(why));
    if (fit != SHARE_FITS) {
        share_leave(s, now, fit == SHARE_MEMORY, why);
        return;
    }
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        if (t->ghost || t->stalled || t->pop.active)
            continue;
        int rc = MS_OK;
        if (t->share == SH_LOADING) {
            rc = ms__sched_reserve_actions(s, 1);
            if (!rc)
                share_run(s, now, t, t->share_epoch);
        } else if (t->share == SH_RUN && t->dirty_demand) {
            t->dirty_demand = false;
            rc = ms__sched_needs_population(s, t) || ms__sched_wants_whole(s, t)
                     ? share_serve(s, now, t, false)
                     : MS_OK;
            if (rc)
                t->dirty_demand = true;
        } else if (t->share == SH_NONE && t->runnable) {
            t->dirty_demand = false;
            rc = share_serve(s, now, t, true);
        }
        if (rc) {
            s->retry = true;
            s->retry_at = now + RETRY_NS;
            return;
        }
    }
}

/* Phase IDLE or RUNNING, nothing in flight: begin sharing when the memory fits. */
bool ms__sched_try_share(struct ms_sched *s)
{
    uint64_t need;
    char why[128];
    if (!s->cfg.share || s->cfg.policy == MS_SCHED_PRIO || ms__sched_any_order_active(s))
        return false;
    if (share_fits(s, s->share_blocked, &need, why, sizeof(why)) != SHARE_FITS)
        return false;
    if (s->share_blocked) /* the note tells the demanded sets' need, not the footprints' */
        share_fits(s, false, &need, why, sizeof(why));
    s->share_blocked = false;
    s->refill = NONE; /* a refill's STOP ends in sharing: nothing to run again first */
    share_enter(s, need);
    return true;
}

bool ms_sched_sharing(const struct ms_sched *s)
{
    return s->phase == MS_PH_SHARED;
}
