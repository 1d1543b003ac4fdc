/*
 * sched.c - the daemon's scheduling state machine (contract, phases and invariants: sched.h;
 * the message flow: docs/protocol.md, docs/daemon.md).
 *
 * Design notes
 *   Every public entry point changes state for its event, then calls settle(), which moves the
 *   machine forward as far as it can without new input: it credits populations as memory
 *   frees, finishes a migration whose population completed (RUN), decides whether the running
 *   task must stop, and plans the next switch when nothing is outstanding. settle() is the only
 *   place decisions are made, so an event never needs to know what it unblocks.
 *
 *   All chunk transitions of the mirror go through chunk_apply(), which keeps each task's
 *   resident counter next to the table's (S3). Orders remember their chunks as entries
 *   (mirror chunk id, bytes, valid) grouped into runs the way the wire names them; a region
 *   freed while an order names it only invalidates those entries, so a late reply can never
 *   touch a region that reused the slot. Credit is cumulative bytes over the populate order's
 *   entries in order, invalid entries included, exactly as the shim counts it.
 *
 *   Dispatching a plan is split in two: a fill step that allocates everything (order arrays,
 *   message arrays, action queue room) and can fail without having changed anything, then a
 *   commit step that only applies transitions and queues what was prepared. A failure in the
 *   fill step sets `retry`: the decision is retried at the next tick instead of leaving the
 *   mirror half-changed.
 *
 *   Dropping a task cannot fail: its DROP is recorded in a zombie list whose room was reserved
 *   when the task said HELLO, and ms_sched_next_action hands zombies out after the queued
 *   messages (so an ERROR precedes its DROP).
 *
 * Phase consistency (S4)
 *   IDLE       cur == next == NONE
 *   RUNNING    cur live, holds RUN; next == NONE
 *   STOPPING   cur live, STOP sent; next == NONE
 *   MIGRATING  next live; incremental => cur == next (keeps RUN), else cur == NONE
 *   SHARED     cur == next == NONE; sharers (share != SH_NONE) hold RUN or are loading
 *   UNSHARING  cur == next == NONE; sharers are all SH_STOPPING (STOP sent)
 *   Sharing ("Sharing", sched.h) keeps its sharers in each task's `share` state instead of
 *   cur, so the exclusive phases never see more than one task holding RUN.
 *
 * Files (each opens with its own notes; what they share is in sched_int.h)
 *   sched.c         the entry points, settle() and the RUNNING decisions, the task lifecycle
 *                   (hello, gone, drop, stall, ghosts, zombies) and the action queue
 *   sched_mirror.c  the tasks as the mirror holds them: lookups, chunk_apply, orders' bookkeeping,
 *                   releasing regions, REGION and DEMAND, order replies (EVICTED, POPULATED)
 *   sched_plan.c    planning and dispatching switches and incremental populations, credit, RUN
 *   sched_share.c   sharing: the phases SHARED and UNSHARING
 *   sched_status.c  configuration, status and setters, the invariant checker ms_sched_check
 * A function one file uses from another carries the prefix ms__sched_ (settle() is
 * ms__sched_settle); these notes name such functions without it.
 */
#include "sched_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct ms_zombie {
    uint32_t task;
    int32_t err;
    char why[128];
};

/* ---- the action queue ------------------------------------------------------------------------ */

int ms__sched_reserve_actions(struct ms_sched *s, size_t k)
{
    if (s->head == s->nacts)
        s->head = s->nacts = 0;
    return ms_grow((void **)&s->acts, &s->capacts, s->nacts + k, sizeof(*s->acts));
}

/* Queue msg for task (ownership of its arrays moves to the queue). Room must be reserved. */
void ms__sched_push_send(struct ms_sched *s, uint32_t task, struct ms_msg *msg)
{
    struct ms_action *a = &s->acts[s->nacts++];
    memset(a, 0, sizeof(*a));
    a->kind = MS_ACT_SEND;
    a->task = task;
    a->msg = *msg;
    memset(msg, 0, sizeof(*msg));
}

/* Queue a log line about task (best effort: without room it is lost, nothing else). */
void ms__sched_push_note(struct ms_sched *s, uint32_t task, const char *fmt, ...)
{
    if (ms__sched_reserve_actions(s, 1))
        return;
    struct ms_action *a = &s->acts[s->nacts++];
    memset(a, 0, sizeof(*a));
    a->kind = MS_ACT_NOTE;
    a->task = task;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->why, sizeof(a->why), fmt, ap);
    va_end(ap);
}

/* Queue a message without arrays; MS_E_NOMEM when there is no room. */
static int send_simple(struct ms_sched *s, uint32_t task, struct ms_msg *msg)
{
    int rc = ms__sched_reserve_actions(s, 1);
    if (rc)
        return rc;
    ms__sched_push_send(s, task, msg);
    return MS_OK;
}

int ms_sched_next_action(struct ms_sched *s, struct ms_action *out)
{
    if (s->head < s->nacts) {
        *out = s->acts[s->head++];
        if (s->head == s->nacts)
            s->head = s->nacts = 0;
        return 1;
    }
    if (s->nzq > 0) {
        memset(out, 0, sizeof(*out));
        out->kind = MS_ACT_DROP;
        out->task = s->zq[0].task;
        out->err = s->zq[0].err;
        memcpy(out->why, s->zq[0].why, sizeof(out->why));
        memmove(&s->zq[0], &s->zq[1], (s->nzq - 1) * sizeof(s->zq[0]));
        s->nzq--;
        return 1;
    }
    return 0;
}

/* ---- leaving the schedule: ghosts, stalls, drops ------------------------------------------ */

/* Take t out of the schedule: if it was running, stopping or loading, the schedule moves on. */
static void leave_schedule(struct ms_sched *s, struct ms_stask *t)
{
    uint32_t id = t->id;
    if (s->cur == id) {
        s->cur = NONE;
        s->last = id;
        if (s->phase == MS_PH_STOPPING && s->in_switch) {
            /* It never answered its STOP (dropped, or gone): the wait was its drain. */
            s->stop_pending = s->now > s->switch_t0 ? s->now - s->switch_t0 : 0;
            s->stop_from = id;
        }
        if (s->phase == MS_PH_RUNNING || s->phase == MS_PH_STOPPING ||
            (s->phase == MS_PH_MIGRATING && s->incremental)) {
            s->phase = MS_PH_IDLE;
            s->next = NONE;
            s->incremental = false;
        }
    }
    if (s->next == id) {
        s->next = NONE;
        s->incremental = false;
        s->phase = MS_PH_IDLE;
    }
    t->runnable = false;
    t->dirty_demand = false;
    t->share = SH_NONE; /* UNSHARING moves on once no sharer is left to stop (settle) */
}

static void queue_drop(struct ms_sched *s, uint32_t id, int err, const char *why)
{
    if (s->nzq < s->capzq) { /* room reserved at HELLO */
        struct ms_zombie *z = &s->zq[s->nzq++];
        z->task = id;
        z->err = err;
        snprintf(z->why, sizeof(z->why), "%s", why ? why : "");
    }
    s->drops++;
}

/* Forget a task: memory, orders, place in the schedule. */
static void remove_task(struct ms_sched *s, struct ms_stask *t)
{
    leave_schedule(s, t);
    for (size_t i = t->nrmap; i-- > 0;)
        ms__sched_release_region(s, t, t->rmap[i].slot);
    t->nrmap = 0;
    size_t pos = 0;
    while (pos < s->ntasks && s->tasks[pos] != t)
        pos++;
    memmove(&s->tasks[pos], &s->tasks[pos + 1], (s->ntasks - pos - 1) * sizeof(s->tasks[0]));
    s->ntasks--;
    ms__sched_task_free(t);
}

/* Pin t's resident chunks (on) so that no plan counts on them, or unpin all of them. */
void ms__sched_pin_resident(struct ms_sched *s, struct ms_stask *t, bool on)
{
    for (size_t i = 0; i < t->nrmap; i++) {
        struct ms_region *r = &s->rt.regions[t->rmap[i].slot];
        for (uint32_t k = 0; k < r->nchunks; k++)
            r->chunks[k].pins =
                on && ms_chunk_state_resident((enum ms_chunk_state)r->chunks[k].state) ? 1 : 0;
    }
}

/*
 * Make t a ghost: out of the schedule, its orders forgotten (chunks in motion stay IN or OUT:
 * nobody will report them), its resident chunks pinned so no plan counts on them.
 */
static void ghostify(struct ms_sched *s, struct ms_stask *t)
{
    leave_schedule(s, t);
    ms__sched_order_reset(&t->evict);
    ms__sched_order_reset(&t->pop);
    ms_chunk_set_clear(&t->next_ws);
    ms_chunk_set_clear(&t->recent_ws);
    t->stalled = false;
    ms__sched_pin_resident(s, t, true);
    t->ghost = true;
}

/*
 * t did not answer its STOP within stop_timeout: stopped (Ctrl-Z), hung, or draining a very
 * long kernel. It leaves the schedule and its resident chunks are pinned: capacity set aside,
 * so the others run in the rest of the budget instead of waiting for it. Its session stays;
 * its orders stay (a later reply is applied as usual; no plan resets them) but have no
 * deadline while it is stalled. Its STOPPED ends the stall (unstall): it then waits for memory
 * like any task. A task that stops while it is being loaded, or is ordered to evict, is still
 * dropped by order_timeout.
 */
static void stall(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    t->run_ns += now - t->run_since;
    leave_schedule(s, t);
    t->stalled = true;
    t->stall_demand = true; /* it was running: it has work */
    t->stalled_at = now;
    ms__sched_pin_resident(s, t, true);
    s->stalls++;
    ms__sched_push_note(
        s, t->id,
        "did not stop within %llu ms (stopped or hung): its %llu MiB stay resident, set "
        "aside; the others run in the rest of the budget until it answers",
        (unsigned long long)(s->cfg.stop_timeout_ns / 1000000ull),
        (unsigned long long)(t->resident >> 20));
}

static void unstall(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    ms__sched_pin_resident(s, t, false);
    t->stalled = false;
    t->runnable = t->stall_demand;
    t->dirty_demand = false;
    ms__sched_push_note(s, t->id,
                        "answered its STOP after %.1f s stalled: it waits for memory again",
                        (double)(now - t->stalled_at) / 1e9);
}

/* Protocol violation or limit: ERROR (best effort) then DROP. */
static int fail_task(struct ms_sched *s, uint64_t now, struct ms_stask *t, int err, const char *why)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_ERROR);
    m.error.code = err < 0 ? err : MS_E_STATE;
    snprintf(m.error.text, sizeof(m.error.text), "%s", why);
    send_simple(s, t->id, &m); /* without room the DROP alone still closes the session */
    ghostify(s, t);
    queue_drop(s, t->id, err, why);
    (void)now;
    return err;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

int ms_sched_init(struct ms_sched *s, const struct ms_sched_config *cfg, uint64_t now)
{
    memset(s, 0, sizeof(*s));
    if (ms_sched_config_check(cfg, NULL, 0))
        return MS_E_INVAL;
    s->cfg = *cfg;
    ms_rtable_init(&s->rt);
    ms_timeline_init(&s->tl);
    ms_plan_init(&s->plan);
    s->cur = s->next = s->last = s->stop_from = s->sw_evict_task = s->refill = s->refill_run = NONE;
    s->phase = MS_PH_IDLE;
    s->start_ns = s->now = now;
    s->next_id = 1;
    ms__sched_settle(s, now); /* nothing demanded: sharing (when on) begins at once */
    return MS_OK;
}

void ms_sched_fini(struct ms_sched *s)
{
    for (size_t i = 0; i < s->ntasks; i++)
        ms__sched_task_free(s->tasks[i]);
    ms_free(s->tasks);
    for (size_t i = s->head; i < s->nacts; i++)
        ms_msg_free(&s->acts[i].msg);
    ms_free(s->acts);
    ms_free(s->slot_rid);
    for (size_t k = 0; k < s->capws; k++)
        ms_chunk_set_fini(&s->ws[k]);
    ms_free(s->ws);
    ms_timeline_fini(&s->tl);
    ms_plan_fini(&s->plan);
    ms_rtable_fini(&s->rt);
    ms_free(s->zq);
    memset(s, 0, sizeof(*s));
}

int ms_sched_hello(struct ms_sched *s, uint64_t now, const struct ms_msg_hello *hello, uint32_t pid,
                   uint32_t *out_task)
{
    s->now = now;
    if (!hello)
        return MS_E_INVAL;
    if (hello->version < 1)
        return MS_E_VERSION;
    if (s->ntasks >= s->cfg.max_tasks || s->next_id == NONE)
        return MS_E_NOSPACE;
    int rc = ms_grow((void **)&s->tasks, &s->captasks, s->ntasks + 1, sizeof(s->tasks[0]));
    if (!rc)
        rc = ms_grow((void **)&s->zq, &s->capzq, s->ntasks + s->nzq + 1, sizeof(s->zq[0]));
    if (!rc)
        rc = ms__sched_reserve_actions(s, 1);
    if (rc)
        return rc;
    struct ms_stask *t = ms_calloc(1, sizeof(*t));
    if (!t)
        return MS_E_NOMEM;
    t->id = s->next_id++;
    t->pid = pid ? pid : hello->pid;
    t->prio = MS_MAX(MS_PRIO_BE, MS_MIN(MS_PRIO_RT, hello->prio));
    t->weight = hello->weight;
    t->limit = hello->mem_limit;
    t->host_limit = hello->host_limit;
    snprintf(t->name, sizeof(t->name), "%s", hello->name);
    ms_chunk_set_init(&t->next_ws);
    ms_chunk_set_init(&t->recent_ws);
    s->tasks[s->ntasks++] = t; /* ids only grow: the array stays sorted */

    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_WELCOME);
    m.welcome.version = MS_PROTO_VERSION;
    m.welcome.task = t->id;
    m.welcome.budget = s->cfg.budget;
    m.welcome.slice_ns = s->cfg.slice_ns;
    ms__sched_push_send(s, t->id, &m);
    if (out_task)
        *out_task = t->id;
    ms__sched_settle(s, now);
    return MS_OK;
}

void ms_sched_task_gone(struct ms_sched *s, uint64_t now, uint32_t task)
{
    s->now = now;
    struct ms_stask *t = ms__sched_find_task(s, task);
    if (!t)
        return;
    remove_task(s, t);
    ms__sched_settle(s, now);
}

int ms_sched_task_drop(struct ms_sched *s, uint64_t now, uint32_t task, int err, const char *why)
{
    s->now = now;
    struct ms_stask *t = ms__sched_find_live(s, task);
    if (!t)
        return MS_E_NOTFOUND;
    fail_task(s, now, t, err < 0 ? err : MS_E_STATE, why ? why : "dropped");
    ms__sched_settle(s, now);
    return MS_OK;
}

/* ---- decisions ------------------------------------------------------------------------------- */

static void send_stop(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    s->refill = NONE; /* the caller that stops for a refill says so afterwards */
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_STOP);
    m.stop.epoch = t->run_epoch;
    if (send_simple(s, t->id, &m)) {
        s->retry = true;
        s->retry_at = now + RETRY_NS;
        return;
    }
    s->phase = MS_PH_STOPPING;
    s->stop_by = now + s->cfg.stop_timeout_ns;
    ms__sched_switch_begin(s, now);
}

/* RUNNING, cur idle while others wait: until when it keeps the GPU ("Idle hold", sched.h). */
static uint64_t hold_until(const struct ms_sched *s, const struct ms_stask *t)
{
    if (s->cfg.policy == MS_SCHED_PRIO)
        return 0;
    uint64_t hold = MS_MIN(s->switch_avg_ns, s->cfg.idle_hold_ns);
    if (t->gap_known && t->gap_avg >= hold)
        return 0; /* its gaps outlast a switch: holding would only waste the GPU */
    return MS_MIN(t->idle_at + hold, s->slice_end);
}

/* RUNNING: should cur give the GPU up now? */
static void decide_running(struct ms_sched *s, uint64_t now)
{
    struct ms_stask *t = ms__sched_find_task(s, s->cur);
    bool others = false;
    int32_t top = MS_PRIO_BE - 1;
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *o = s->tasks[i];
        if (o == t || !o->runnable)
            continue;
        others = true;
        top = MS_MAX(top, o->prio);
    }
    if (!others) {
        s->holding = false; /* nobody waits: nothing is held up */
        if (now >= s->slice_end)
            s->slice_end = now + (t->slice_ns ? t->slice_ns : s->cfg.slice_ns);
        return;
    }
    /* PREPARE goes only where t keeps the GPU for now (never just before its STOP). */
    if (!t->runnable && now < hold_until(s, t)) {
        if (!s->holding)
            s->idle_holds++;
        s->holding = true;
        ms__sched_prepare_hint(s, t);
        return;
    }
    if (!t->runnable || (s->cfg.policy == MS_SCHED_PRIO && top > t->prio)) {
        send_stop(s, now, t);
        return;
    }
    if (s->holding) {
        s->holding = false;
        s->idle_resumes++;
    }
    if (now < s->slice_end) {
        ms__sched_prepare_hint(s, t);
        return;
    }
    if (ms__sched_make_timeline(s, t->id, 1)) {
        s->retry = true;
        s->retry_at = now + RETRY_NS;
        return;
    }
    if (s->tl.n > 0 && s->tl.e[0].task != t->id) {
        send_stop(s, now, t);
    } else {
        s->slice_end = now + (t->slice_ns ? t->slice_ns : s->cfg.slice_ns);
        ms__sched_prepare_hint(s, t);
    }
}

void ms__sched_settle(struct ms_sched *s, uint64_t now)
{
    for (int guard = 0; guard < 16; guard++) {
        enum ms_sched_phase before = s->phase;
        uint32_t cur = s->cur, nx = s->next;

        /* Credit populations as far as memory allows. */
        for (size_t i = 0; i < s->ntasks; i++) {
            struct ms_stask *t = s->tasks[i];
            if (!t->pop.active || t->pop.granted == t->pop.n || t->stalled)
                continue;
            if (ms__sched_reserve_actions(s, 1)) {
                s->retry = true;
                s->retry_at = now + RETRY_NS;
                break;
            }
            if (ms__sched_grant(s, t)) {
                struct ms_msg m;
                ms_msg_init(&m, MS_MSG_CREDIT);
                m.credit.epoch = t->pop.epoch;
                m.credit.credit = t->pop.credit;
                ms__sched_push_send(s, t->id, &m);
            }
        }
        if (s->over_budget && s->rt.resident_bytes <= s->cfg.budget)
            s->over_budget = false;

        if (s->phase == MS_PH_MIGRATING) {
            struct ms_stask *t = ms__sched_find_task(s, s->next);
            if (t && !t->pop.active) {
                if (s->incremental) {
                    s->phase = MS_PH_RUNNING;
                    s->next = NONE;
                    s->incremental = false;
                } else if (ms__sched_reserve_actions(s, 1) == MS_OK) {
                    ms__sched_start_run(s, now, t);
                } else {
                    s->retry = true;
                    s->retry_at = now + RETRY_NS;
                }
            }
        } else if (s->phase == MS_PH_RUNNING && ms__sched_try_share(s)) {
            /* the running task became a sharer: SHARED at the next turn */
        } else if (s->phase == MS_PH_RUNNING) {
            struct ms_stask *t = ms__sched_find_task(s, s->cur);
            if (t->dirty_demand && !ms__sched_any_order_active(s)) {
                t->dirty_demand = false;
                int rc = ms__sched_needs_population(s, t) ? ms__sched_plan_incremental(s, now, t)
                                                          : MS_OK;
                if (rc == MS_E_BUSY) {
                    /* Its own chunks must make room: a full switch, which runs it again. */
                    uint64_t end = s->slice_end;
                    send_stop(s, now, t);
                    if (s->phase == MS_PH_STOPPING) {
                        s->refill = t->id;
                        s->refill_end = end;
                    }
                } else if (rc) {
                    t->dirty_demand = true;
                    s->retry = true;
                    s->retry_at = now + (rc == MS_E_NOSPACE ? PINNED_RETRY_NS : RETRY_NS);
                }
            }
            if (s->phase == MS_PH_RUNNING && s->shrink && !ms__sched_any_order_active(s)) {
                s->shrink = false;
                send_stop(s, now, t); /* the next plan evicts down to the new budget */
            }
            if (s->phase == MS_PH_RUNNING)
                decide_running(s, now);
        } else if (s->phase == MS_PH_SHARED) {
            ms__sched_decide_shared(s, now);
        } else if (s->phase == MS_PH_UNSHARING) {
            bool left = false;
            for (size_t i = 0; i < s->ntasks; i++)
                left |= s->tasks[i]->share == SH_STOPPING;
            if (!left)
                s->phase = MS_PH_IDLE; /* exclusive switching goes on from here */
        } else if (s->phase == MS_PH_IDLE && !ms__sched_any_order_active(s) &&
                   ms__sched_try_share(s)) {
            /* SHARED at the next turn */
        } else if (s->phase == MS_PH_IDLE && !ms__sched_any_order_active(s)) {
            if (!s->in_switch)
                ms__sched_switch_begin(s, now);
            int rc = ms__sched_plan_switch(s, now);
            if (rc) {
                s->plan_failures++;
                s->retry = true;
                s->retry_at = now + RETRY_NS;
            }
            if (s->phase == MS_PH_IDLE && !rc) {
                s->in_switch = false; /* nobody to run: no switch, no drain to count */
                s->stop_pending = 0;
                s->stop_from = NONE;
            }
        }
        if (s->phase == before && s->cur == cur && s->next == nx)
            return;
    }
}

/* ---- entry points ---------------------------------------------------------------------------- */

int ms_sched_message(struct ms_sched *s, uint64_t now, uint32_t task, const struct ms_msg *m)
{
    s->now = now;
    struct ms_stask *t = ms__sched_find_live(s, task);
    if (!t)
        return MS_E_NOTFOUND;
    char why[128] = "";
    int rc = MS_OK;
    if (!m) {
        rc = MS_E_INVAL;
        snprintf(why, sizeof(why), "no message");
    } else {
        switch (m->type) {
        case MS_MSG_REGION:
            rc = ms__sched_on_region(s, now, t, &m->region, why, sizeof(why));
            break;
        case MS_MSG_DEMAND: rc = ms__sched_on_demand(s, t, &m->demand, why, sizeof(why)); break;
        case MS_MSG_IDLE:
            t->runnable = false;
            t->dirty_demand = false;
            t->stall_demand = false;
            t->idle_at = now;
            break;
        case MS_MSG_REPORT:
            t->misses = MS_MAX(t->misses, m->report.misses);
            t->host_bytes = m->report.host_bytes;
            t->host_pool = m->report.host_pool;
            break;
        case MS_MSG_STARTED: ms__sched_on_started(s, now, t, &m->started); return MS_OK;
        case MS_MSG_STOPPED:
            t->misses = MS_MAX(t->misses, m->stopped.misses);
            t->host_bytes = m->stopped.host_bytes;
            t->host_pool = m->stopped.host_pool;
            if (t->stalled && m->stopped.epoch == t->run_epoch) {
                unstall(s, now, t);
            } else if (t->share == SH_STOPPING && m->stopped.epoch == t->run_epoch) {
                t->run_ns += now - t->run_since;
                t->share = SH_NONE;
                s->last = t->id;
                if (s->in_switch) {
                    s->stop_pending = now > s->switch_t0 ? now - s->switch_t0 : 0;
                    s->stop_from = t->id;
                }
            } else if (s->phase == MS_PH_STOPPING && s->cur == t->id &&
                       m->stopped.epoch == t->run_epoch) {
                t->run_ns += now - t->run_since;
                if (s->in_switch) {
                    s->stop_pending = now > s->switch_t0 ? now - s->switch_t0 : 0;
                    s->stop_from = t->id;
                }
                s->last = t->id;
                s->cur = NONE;
                s->phase = MS_PH_IDLE;
            }
            break;
        case MS_MSG_EVICTED:
        case MS_MSG_POPULATED:
            rc = ms__sched_on_progress(s, now, t, m->type == MS_MSG_EVICTED, &m->progress, why,
                                       sizeof(why));
            break;
        case MS_MSG_BYE:
            queue_drop(s, t->id, MS_OK, "said goodbye");
            remove_task(s, t);
            ms__sched_settle(s, now);
            return MS_OK;
        default:
            rc = MS_E_PARSE;
            snprintf(why, sizeof(why), "unexpected %s from a task", ms_msg_type_name(m->type));
            break;
        }
    }
    if (rc) {
        fail_task(s, now, t, rc, why);
        ms__sched_settle(s, now);
        return rc;
    }
    ms__sched_settle(s, now);
    return MS_OK;
}

void ms_sched_tick(struct ms_sched *s, uint64_t now)
{
    s->now = now;
    if (s->phase == MS_PH_STOPPING && now >= s->stop_by) {
        struct ms_stask *t = ms__sched_find_live(s, s->cur);
        if (t)
            stall(s, now, t);
    }
    if (s->phase == MS_PH_UNSHARING && now >= s->stop_by)
        for (size_t i = 0; i < s->ntasks; i++)
            if (s->tasks[i]->share == SH_STOPPING && !s->tasks[i]->ghost)
                stall(s, now, s->tasks[i]);
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        if (t->stalled)
            continue; /* its orders wait for it, like its STOP */
        if ((ms__sched_owes(&t->evict, true) && now >= t->evict.deadline) ||
            (ms__sched_owes(&t->pop, false) && now >= t->pop.deadline))
            fail_task(s, now, t, MS_E_STATE, "a migration order made no progress in time");
    }
    if (s->retry && now >= s->retry_at)
        s->retry = false;
    ms__sched_settle(s, now);
}

uint64_t ms_sched_deadline(const struct ms_sched *s)
{
    uint64_t d = UINT64_MAX;
    if (s->phase == MS_PH_RUNNING) {
        /* The slice end matters only when someone else waits. */
        for (size_t i = 0; i < s->ntasks; i++)
            if (s->tasks[i]->runnable && s->tasks[i]->id != s->cur) {
                d = MS_MIN(d, s->slice_end);
                const struct ms_stask *c = ms__sched_find_task(s, s->cur);
                if (c && !c->runnable && s->holding)
                    d = MS_MIN(d, hold_until(s, c));
                break;
            }
    }
    if (s->phase == MS_PH_STOPPING || s->phase == MS_PH_UNSHARING)
        d = MS_MIN(d, s->stop_by);
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        if (t->stalled)
            continue;
        if (ms__sched_owes(&t->evict, true))
            d = MS_MIN(d, t->evict.deadline);
        if (ms__sched_owes(&t->pop, false))
            d = MS_MIN(d, t->pop.deadline);
    }
    if (s->retry)
        d = MS_MIN(d, s->retry_at);
    return d;
}
