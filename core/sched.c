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
 */
#include "sched.h"

#include "timeline.h"
#include "units.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE MS_TASK_NONE
#define RETRY_NS 10000000ull /* 10 ms */
/* A running task's demand that found its room pinned (a ghost's memory): planned again at once
 * when memory is released (every settle tries it), and at this interval meanwhile. */
#define PINNED_RETRY_NS 100000000ull /* 100 ms */

/* One chunk of an order. */
struct oentry {
    ms_chunk_id id;
    uint64_t bytes;
    uint8_t valid; /* 0 once its region was freed */
    uint8_t fresh; /* POPULATE: the chunk was EMPTY (map, no copy) */
};

struct ms_sorder {
    bool active;
    uint32_t epoch;
    struct oentry *e;
    size_t n, cap;
    uint32_t *run_end; /* run k covers entries [run_end[k-1], run_end[k]) */
    size_t nruns, capruns;
    uint32_t runs_done;
    size_t granted;  /* POPULATE: entries [0, granted) are credited */
    uint64_t credit; /* POPULATE: bytes of the credited entries */
    uint64_t deadline;
    uint64_t t0; /* when it was sent (for the switch record) */
};

/* A task's part in sharing (phases SHARED, UNSHARING). */
enum { SH_NONE = 0, SH_LOADING, SH_RUN, SH_STOPPING };

struct rmap_ent {
    uint32_t rid;  /* the shim's region id */
    uint32_t slot; /* the mirror's region slot */
};

struct ms_stask {
    uint32_t id, pid;
    int32_t prio;
    uint32_t weight;
    uint64_t limit; /* 0 = none */
    char name[MS_PROTO_NAME_MAX + 1];
    bool ghost;        /* dropped; memory charged until its process exits; pins its chunks */
    bool stalled;      /* did not stop or migrate in time; its resident chunks pinned (stall) */
    bool stall_demand; /* stalled, and a DEMAND came after its last IDLE */
    uint64_t stalled_at;
    bool runnable;     /* DEMAND more recent than IDLE */
    bool dirty_demand; /* DEMAND arrived while holding RUN: maybe an incremental migration */
    uint64_t idle_at;  /* when its last IDLE arrived (0: none since its last DEMAND) */
    uint64_t gap_avg;  /* its recent idle gaps, IDLE to DEMAND (moving average) */
    bool gap_known;    /* ... measured at least once */
    uint32_t dflags;
    struct ms_chunk_set next_ws, recent_ws; /* mirror ids, access order, no duplicates */
    struct rmap_ent *rmap;                  /* ascending rid */
    size_t nrmap, caprmap;
    uint32_t max_rid;
    bool any_rid;
    uint64_t nchunks;
    uint64_t resident; /* bytes of its chunks in resident states */
    struct ms_sorder evict, pop;
    uint32_t run_epoch;
    uint64_t slice_ns;
    uint64_t bytes_in, bytes_out, switches, run_ns, run_since;
    uint64_t misses;      /* the shim's count of commands run with named chunks off the device */
    uint64_t host_bytes;  /* host bytes its shim holds pinned, as last reported */
    uint64_t host_limit;  /* the most its shim may pin (HELLO), 0 = none */
    uint8_t share;        /* SH_*: its part in sharing */
    uint32_t share_epoch; /* SH_LOADING: the epoch its RUN will carry (its POPULATE's) */
};

struct ms_zombie {
    uint32_t task;
    int32_t err;
    char why[128];
};

/* ---- configuration --------------------------------------------------------------------------- */

void ms_sched_config_default(struct ms_sched_config *c)
{
    memset(c, 0, sizeof(*c));
    c->policy = MS_SCHED_RR;
    c->evict = MS_EVICT_OPT;
    c->budget = 16 * MS_GIB;
    c->slice_ns = 100000000ull;      /* 100 ms */
    c->slice_max_ns = 4000000000ull; /* 4 s */
    c->switch_frac_pct = 10;
    c->cost = NULL;
    c->stop_timeout_ns = 3000000000ull;   /* 3 s */
    c->order_timeout_ns = 60000000000ull; /* 60 s without progress */
    c->horizon = 8;
    c->early_run = false;
    c->idle_hold_ns = 1000000000ull; /* 1 s */
    c->share = true;
    c->max_tasks = 256;
    c->max_regions = 65536;
    c->max_chunks = 1u << 20;
}

int ms_sched_config_check(const struct ms_sched_config *c, char *why, size_t whylen)
{
#define CFAIL(...)                                                                                 \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        return MS_E_INVAL;                                                                         \
    } while (0)
    if (!c)
        CFAIL("no configuration");
    if ((unsigned)c->policy >= MS_SCHED_POLICY_COUNT)
        CFAIL("unknown policy %u", (unsigned)c->policy);
    if (c->evict != MS_EVICT_OPT && c->evict != MS_EVICT_LRU && c->evict != MS_EVICT_WHOLE)
        CFAIL("unknown eviction policy %u", (unsigned)c->evict);
    if (c->budget < MS_GRAN)
        CFAIL("budget must be at least 2 MiB");
    if (c->slice_ns == 0 || c->slice_max_ns < c->slice_ns)
        CFAIL("slice must be > 0 and slice_max >= slice");
    if (c->switch_frac_pct < 1 || c->switch_frac_pct > 100)
        CFAIL("switch fraction must be 1..100 %%");
    if (c->stop_timeout_ns == 0 || c->order_timeout_ns == 0)
        CFAIL("timeouts must be > 0");
    if (c->idle_hold_ns > 600000000000ull)
        CFAIL("idle hold must be at most 600 s");
    if (c->horizon < 1 || c->horizon > 1024)
        CFAIL("horizon must be 1..1024");
    if (c->max_tasks < 1 || c->max_tasks > 65536 || c->max_regions < 1 || c->max_chunks < 1)
        CFAIL("limits must be >= 1 (at most 65536 tasks)");
    return MS_OK;
#undef CFAIL
}

int ms_sched_policy_parse(const char *str, enum ms_sched_policy *out)
{
    if (!str || !out)
        return MS_E_INVAL;
    if (strcmp(str, "rr") == 0)
        *out = MS_SCHED_RR;
    else if (strcmp(str, "prio") == 0)
        *out = MS_SCHED_PRIO;
    else if (strcmp(str, "adaptive") == 0)
        *out = MS_SCHED_ADAPTIVE;
    else
        return MS_E_NOTFOUND;
    return MS_OK;
}

const char *ms_sched_policy_name(enum ms_sched_policy p)
{
    switch (p) {
    case MS_SCHED_RR: return "rr";
    case MS_SCHED_PRIO: return "prio";
    case MS_SCHED_ADAPTIVE: return "adaptive";
    default: return "unknown";
    }
}

/* ---- small helpers --------------------------------------------------------------------------- */

static struct ms_stask *find_task(const struct ms_sched *s, uint32_t id)
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
static struct ms_stask *find_live(const struct ms_sched *s, uint32_t id)
{
    struct ms_stask *t = find_task(s, id);
    return t && !t->ghost ? t : NULL;
}

static struct ms_stask *owner_of(const struct ms_sched *s, ms_chunk_id id)
{
    uint32_t slot = MS_CHUNK_REGION(id);
    if (slot >= s->rt.nslots || !s->rt.regions[slot].live)
        return NULL;
    return find_task(s, s->rt.regions[slot].task);
}

static const struct ms_cost *cost_of(const struct ms_sched *s)
{
    return s->cfg.cost ? s->cfg.cost : &ms_cost_h200;
}

/* Apply a chunk event, keeping the owner's resident counter in step with the table's. */
static int chunk_apply(struct ms_sched *s, struct ms_stask *t, ms_chunk_id id,
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
static bool any_order_active(const struct ms_sched *s)
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
static bool owes(const struct ms_sorder *o, bool evict)
{
    if (!o->active)
        return false;
    if (evict)
        return true;
    return o->runs_done < o->nruns && o->run_end[o->runs_done] <= o->granted;
}

static void order_reset(struct ms_sorder *o)
{
    o->active = false;
    o->n = 0;
    o->nruns = 0;
    o->runs_done = 0;
    o->granted = 0;
    o->credit = 0;
    o->deadline = 0;
}

static void order_fini(struct ms_sorder *o)
{
    ms_free(o->e);
    ms_free(o->run_end);
    memset(o, 0, sizeof(*o));
}

static void task_free(struct ms_stask *t)
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

/* ---- the action queue ------------------------------------------------------------------------ */

static int reserve_actions(struct ms_sched *s, size_t k)
{
    if (s->head == s->nacts)
        s->head = s->nacts = 0;
    return ms_grow((void **)&s->acts, &s->capacts, s->nacts + k, sizeof(*s->acts));
}

/* Queue msg for task (ownership of its arrays moves to the queue). Room must be reserved. */
static void push_send(struct ms_sched *s, uint32_t task, struct ms_msg *msg)
{
    struct ms_action *a = &s->acts[s->nacts++];
    memset(a, 0, sizeof(*a));
    a->kind = MS_ACT_SEND;
    a->task = task;
    a->msg = *msg;
    memset(msg, 0, sizeof(*msg));
}

/* Queue a log line about task (best effort: without room it is lost, nothing else). */
static void push_note(struct ms_sched *s, uint32_t task, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void push_note(struct ms_sched *s, uint32_t task, const char *fmt, ...)
{
    if (reserve_actions(s, 1))
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
    int rc = reserve_actions(s, 1);
    if (rc)
        return rc;
    push_send(s, task, msg);
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
static void release_region(struct ms_sched *s, struct ms_stask *t, uint32_t slot)
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
            chunk_apply(s, t, id, MS_CE_EVICT_DONE);
        else if (c->state == MS_CS_IN)
            chunk_apply(s, t, id, MS_CE_POP_FAIL);
        if (c->state != MS_CS_EMPTY)
            chunk_apply(s, t, id, MS_CE_DISCARD);
    }
    t->nchunks -= r->nchunks;
    ms_region_remove(&s->rt, slot);
}

static void settle(struct ms_sched *s, uint64_t now);

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
        release_region(s, t, t->rmap[i].slot);
    t->nrmap = 0;
    size_t pos = 0;
    while (pos < s->ntasks && s->tasks[pos] != t)
        pos++;
    memmove(&s->tasks[pos], &s->tasks[pos + 1], (s->ntasks - pos - 1) * sizeof(s->tasks[0]));
    s->ntasks--;
    task_free(t);
}

/* Pin t's resident chunks (on) so that no plan counts on them, or unpin all of them. */
static void pin_resident(struct ms_sched *s, struct ms_stask *t, bool on)
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
    order_reset(&t->evict);
    order_reset(&t->pop);
    ms_chunk_set_clear(&t->next_ws);
    ms_chunk_set_clear(&t->recent_ws);
    t->stalled = false;
    pin_resident(s, t, true);
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
    pin_resident(s, t, true);
    s->stalls++;
    push_note(s, t->id,
              "did not stop within %llu ms (stopped or hung): its %llu MiB stay resident, set "
              "aside; the others run in the rest of the budget until it answers",
              (unsigned long long)(s->cfg.stop_timeout_ns / 1000000ull),
              (unsigned long long)(t->resident >> 20));
}

static void unstall(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    pin_resident(s, t, false);
    t->stalled = false;
    t->runnable = t->stall_demand;
    t->dirty_demand = false;
    push_note(s, t->id, "answered its STOP after %.1f s stalled: it waits for memory again",
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
    s->cur = s->next = s->last = s->stop_from = s->sw_evict_task = NONE;
    s->phase = MS_PH_IDLE;
    s->start_ns = s->now = now;
    s->next_id = 1;
    settle(s, now); /* nothing demanded: sharing (when on) begins at once */
    return MS_OK;
}

void ms_sched_fini(struct ms_sched *s)
{
    for (size_t i = 0; i < s->ntasks; i++)
        task_free(s->tasks[i]);
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
        rc = reserve_actions(s, 1);
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
    push_send(s, t->id, &m);
    if (out_task)
        *out_task = t->id;
    settle(s, now);
    return MS_OK;
}

void ms_sched_task_gone(struct ms_sched *s, uint64_t now, uint32_t task)
{
    s->now = now;
    struct ms_stask *t = find_task(s, task);
    if (!t)
        return;
    remove_task(s, t);
    settle(s, now);
}

int ms_sched_task_drop(struct ms_sched *s, uint64_t now, uint32_t task, int err, const char *why)
{
    s->now = now;
    struct ms_stask *t = find_live(s, task);
    if (!t)
        return MS_E_NOTFOUND;
    fail_task(s, now, t, err < 0 ? err : MS_E_STATE, why ? why : "dropped");
    settle(s, now);
    return MS_OK;
}

/* ---- regions and demands --------------------------------------------------------------------- */

static int on_region(struct ms_sched *s, uint64_t now, struct ms_stask *t,
                     const struct ms_msg_region *r, char *why, size_t whylen)
{
    if (r->op == MS_REGION_FREE) {
        int k = rmap_find(t, r->region);
        if (k < 0) {
            snprintf(why, whylen, "REGION free of unknown region %u", r->region);
            return MS_E_NOTFOUND;
        }
        release_region(s, t, t->rmap[k].slot);
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
static void clear_marks(struct ms_sched *s, struct ms_stask *t)
{
    for (size_t i = 0; i < t->nrmap; i++)
        ms_region_clear_marks(&s->rt, t->rmap[i].slot);
}

/* Every chunk of t's device-memory regions, in region-id order. */
static int whole_footprint(struct ms_sched *s, struct ms_stask *t, struct ms_chunk_set *out)
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
    clear_marks(s, t);
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

static int on_demand(struct ms_sched *s, struct ms_stask *t, const struct ms_msg_demand *d,
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
            rc = whole_footprint(s, t, &nx);
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

static int on_progress(struct ms_sched *s, uint64_t now, struct ms_stask *t, bool evict,
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
            if (chunk_apply(s, t, e->id, MS_CE_EVICT_DONE) == MS_OK) {
                t->bytes_out += e->bytes;
                s->bytes_out += e->bytes;
                s->sw_out += mine ? e->bytes : 0;
            }
        } else if (!e->fresh) {
            if (chunk_apply(s, t, e->id, MS_CE_POP_DONE) == MS_OK) {
                chunk_apply(s, t, e->id, MS_CE_TOUCH);
                t->bytes_in += e->bytes;
                s->bytes_in += e->bytes;
                s->sw_in += mine ? e->bytes : 0;
            }
        }
    }
    o->runs_done = p->runs_done;
    o->deadline = now + s->cfg.order_timeout_ns;
    if (t->stalled)
        pin_resident(s, t, true); /* S6: exactly its resident chunks, as they are now */
    if (o->runs_done == o->nruns) {
        uint64_t took = now > o->t0 ? now - o->t0 : 0;
        if (mine && evict && took >= s->sw_evict_ns) {
            s->sw_evict_ns = took;
            s->sw_evict_task = t->id;
        }
        if (mine && !evict)
            s->sw_pop_ns = MS_MAX(s->sw_pop_ns, took);
        order_reset(o);
    }
    return MS_OK;
}

/* ---- planning -------------------------------------------------------------------------------- */

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

static int make_timeline(struct ms_sched *s, uint32_t last, size_t horizon)
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
        struct ms_stask *t = find_task(s, s->tl.e[k].task);
        if (!t)
            continue;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = s->tl.e[j].task == t->id;
        int rc;
        if (t->dflags & MS_DEMAND_WHOLE)
            rc = whole_footprint(s, t, w);
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

/* Build s->plan for ws[0..nws), shortening ws[0] while it cannot fit. */
static int build_plan(struct ms_sched *s, size_t nws, const struct ms_timeline *tl)
{
    struct ms_plan_input in = {.rt = &s->rt,
                               .budget = s->cfg.budget,
                               .tl = tl,
                               .ws = s->ws,
                               .nws = nws,
                               .policy = s->cfg.evict};
    size_t full = s->ws[0].n;
    int rc = ms_plan_build(&in, &s->plan);
    if (rc != MS_E_NOSPACE || full == 0)
        return rc;
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
    return ms_plan_build(&in, &s->plan);
}

/* Coalesce an order's entries into runs; fill the message's run array. */
static int order_runs(struct ms_sched *s, struct ms_sorder *o, struct ms_msg *m)
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

static int order_add(struct ms_sorder *o, ms_chunk_id id, uint64_t bytes, bool fresh)
{
    int rc = ms_grow((void **)&o->e, &o->cap, o->n + 1, sizeof(o->e[0]));
    if (rc)
        return rc;
    o->e[o->n++] = (struct oentry){.id = id, .bytes = bytes, .valid = 1, .fresh = fresh};
    return MS_OK;
}

/* Credit the populate order of t as far as memory allows. Returns true when credit grew. */
static bool grant(struct ms_sched *s, struct ms_stask *t)
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
            if (chunk_apply(s, t, e->id, e->fresh ? MS_CE_MAP_FRESH : MS_CE_POP_START))
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
        else if (owner_of(s, s->plan.steps[i].chunk) == t)
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
    while (after > t->limit) {
        ms_chunk_id best = 0;
        struct ms_chunk *bc = NULL;
        for (size_t i = 0; i < t->nrmap; i++) {
            uint32_t slot = t->rmap[i].slot;
            struct ms_region *r = &s->rt.regions[slot];
            for (uint32_t k = 0; k < r->nchunks; k++) {
                struct ms_chunk *c = &r->chunks[k];
                if (c->mark || c->pins || (c->state != MS_CS_DIRTY && c->state != MS_CS_CLEAN))
                    continue;
                if (!bc || c->last_use < bc->last_use) {
                    bc = c;
                    best = MS_CHUNK_ID(slot, k);
                }
            }
        }
        if (!bc)
            break; /* nothing more to give back: the populations wait for credit instead */
        bc->mark = 1;
        int rc = order_add(o, best, bc->bytes, false);
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

/* A switch begins (STOP sent, or planning begun with nothing to stop): its clock, and its
 * record's counters from zero (plans: from the running total). */
static void switch_begin(struct ms_sched *s, uint64_t now)
{
    s->in_switch = true;
    s->switch_t0 = now;
    s->sw_in = s->sw_out = 0;
    s->sw_plans0 = s->plans;
    s->sw_predicted_ns = 0;
    s->sw_evict_ns = s->sw_pop_ns = 0;
    s->sw_evict_task = NONE;
}

static void start_run(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_RUN);
    m.run.epoch = s->epoch;
    m.run.slice_ns = s->next_slice ? s->next_slice : s->cfg.slice_ns;
    /* Adaptive: the switch as it went (its drain, and a migration slower than predicted)
     * stretches the slice the plan chose, never shortens it. */
    if (s->cfg.policy == MS_SCHED_ADAPTIVE && s->in_switch && now > s->switch_t0)
        m.run.slice_ns = adaptive_slice(s, m.run.slice_ns, now - s->switch_t0);
    t->run_epoch = s->epoch;
    t->slice_ns = m.run.slice_ns;
    push_send(s, t->id, &m); /* room reserved by the caller */
    t->switches++;
    t->run_since = now;
    s->phase = MS_PH_RUNNING;
    s->cur = t->id;
    s->next = NONE;
    s->incremental = false;
    s->slice_end = now + t->slice_ns;
    s->switches++;
    uint64_t d = s->in_switch && now > s->switch_t0 ? now - s->switch_t0 : 0;
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
    /* LRU: the working set is in use from now on. */
    for (size_t i = 0; i < t->next_ws.n; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state))
            chunk_apply(s, t, t->next_ws.ids[i], MS_CE_TOUCH);
    }
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
        order_reset(&s->tasks[i]->evict);
        order_reset(&s->tasks[i]->pop);
    }
    for (size_t i = 0; i < s->plan.n && !rc; i++) {
        ms_chunk_id id = s->plan.steps[i].chunk;
        struct ms_chunk *c = ms_chunk_get(&s->rt, id);
        if (s->plan.steps[i].op == MS_STEP_EVICT)
            rc = order_add(&owner_of(s, id)->evict, id, c->bytes, false);
        else
            rc = order_add(&t->pop, id, c->bytes, c->state == MS_CS_EMPTY);
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
        rc = order_runs(s, &o->evict, &msgs[k]);
        k++;
        if (rc)
            goto undo;
    }
    if (t->pop.n) {
        ms_msg_init(&msgs[nowners], MS_MSG_POPULATE);
        rc = order_runs(s, &t->pop, &msgs[nowners]);
        if (rc)
            goto undo;
    }
    rc = reserve_actions(s, nowners + 2);
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
        if (s->cfg.policy == MS_SCHED_ADAPTIVE)
            slice = adaptive_slice(s, base_slice, cost);
        s->next_slice = slice;
    }
    for (k = 0; k < nowners; k++) {
        struct ms_stask *o = owners[k];
        for (size_t i = 0; i < o->evict.n; i++) {
            ms_chunk_id id = o->evict.e[i].id;
            struct ms_chunk *c = ms_chunk_get(&s->rt, id);
            if (c->state == MS_CS_CLEAN)
                chunk_apply(s, o, id, MS_CE_TOUCH);
            if (chunk_apply(s, o, id, MS_CE_EVICT_START))
                o->evict.e[i].valid = 0; /* cannot happen: victims are settled, unpinned */
        }
        o->evict.active = true;
        o->evict.epoch = epoch;
        o->evict.deadline = now + s->cfg.order_timeout_ns;
        o->evict.t0 = now;
        msgs[k].order.epoch = epoch;
        push_send(s, o->id, &msgs[k]);
    }
    if (t->pop.n) {
        grant(s, t);
        t->pop.active = true;
        t->pop.epoch = epoch;
        t->pop.deadline = now + s->cfg.order_timeout_ns;
        t->pop.t0 = now;
        msgs[nowners].order.epoch = epoch;
        msgs[nowners].order.credit = t->pop.credit;
        push_send(s, t->id, &msgs[nowners]);
    }
    ms_free(msgs);
    ms_free(owners);

    if (incremental) {
        s->phase = t->pop.active ? MS_PH_MIGRATING : MS_PH_RUNNING;
        s->next = t->pop.active ? t->id : NONE;
        s->incremental = t->pop.active;
    } else if (!t->pop.active || s->cfg.early_run) {
        start_run(s, now, t);
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
        order_reset(&s->tasks[i]->evict);
        order_reset(&s->tasks[i]->pop);
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

/* Plan and start the switch to the policy's next task. Phase IDLE, no orders outstanding. */
static int plan_switch(struct ms_sched *s, uint64_t now)
{
    int rc = make_timeline(s, s->last, s->cfg.horizon);
    if (!rc && s->tl.n > 0)
        rc = add_returners(s, find_task(s, s->tl.e[0].task), 1);
    if (rc || s->tl.n == 0)
        return rc;
    struct ms_stask *t = find_task(s, s->tl.e[0].task);
    uint64_t base_slice = s->tl.e[0].slice_ns;
    rc = ms_chunk_sets_reserve(&s->ws, &s->capws, s->tl.n);
    if (!rc)
        rc = fill_future(s, 0);
    if (!rc && s->cfg.evict == MS_EVICT_WHOLE) {
        ms_chunk_set_clear(&s->ws[0]);
        rc = whole_footprint(s, t, &s->ws[0]);
    }
    if (rc)
        return rc;
    truncate_ws(s, &s->ws[0], t->limit ? MS_MIN(t->limit, s->cfg.budget) : s->cfg.budget);
    rc = build_plan(s, s->tl.n, &s->tl);
    if (rc)
        return rc;
    return dispatch(s, now, t, false, base_slice);
}

static bool needs_population(struct ms_sched *s, struct ms_stask *t)
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
    clear_marks(s, t);
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
static int plan_incremental(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
    int rc = make_timeline(s, t->id, s->cfg.horizon);
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

/* ---- sharing (sched.h, "Sharing") ------------------------------------------------------------ */

static bool chunk_resident(const struct ms_sched *s, ms_chunk_id id, uint64_t *bytes)
{
    const struct ms_chunk *c = ms_chunk_get((struct ms_rtable *)&s->rt, id);
    *bytes = c ? c->bytes : 0;
    return !c || ms_chunk_state_resident((enum ms_chunk_state)c->state);
}

/* Whether t's demanded set is its whole footprint (a WHOLE demand, or WHOLE eviction). */
static bool wants_whole(const struct ms_sched *s, const struct ms_stask *t)
{
    return (t->dflags & MS_DEMAND_WHOLE) || s->cfg.evict == MS_EVICT_WHOLE;
}

/* Bytes of t's demanded set that are not resident (what sharing would populate); whole: of its
 * whole footprint. */
static uint64_t share_missing(const struct ms_sched *s, const struct ms_stask *t, bool whole)
{
    uint64_t miss = 0, b;
    if (whole || wants_whole(s, t)) {
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
        if (!chunk_resident(s, t->next_ws.ids[i], &b))
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
        struct ms_stask *t = find_task(s, s->cur);
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
    push_note(s, NONE, "sharing: on (%zu task%s, %s of %s)", n, n == 1 ? "" : "s", hsize(need, b1),
              hsize(s->cfg.budget, b2));
}

/* End sharing: STOP every sharer holding RUN; UNSHARING until they all stopped. memory: for
 * lack of memory (sharing comes back only once the whole footprints fit: share_blocked). */
static void share_leave(struct ms_sched *s, uint64_t now, bool memory, const char *why)
{
    size_t n = 0;
    for (size_t i = 0; i < s->ntasks; i++)
        n += s->tasks[i]->share == SH_RUN;
    if (reserve_actions(s, n + 1)) {
        s->retry = true;
        s->retry_at = now + RETRY_NS;
        return;
    }
    s->share_offs++;
    s->share_blocked = memory;
    push_note(s, NONE, "sharing: off (%s)", why);
    for (size_t i = 0; i < s->ntasks; i++) {
        struct ms_stask *t = s->tasks[i];
        if (t->share == SH_RUN) {
            struct ms_msg m;
            ms_msg_init(&m, MS_MSG_STOP);
            m.stop.epoch = t->run_epoch;
            push_send(s, t->id, &m);
            t->share = SH_STOPPING;
        } else {
            t->share = SH_NONE; /* loading: not running yet; its population completes */
        }
        t->dirty_demand = false;
    }
    if (n > 0) {
        s->phase = MS_PH_UNSHARING;
        s->stop_by = now + s->cfg.stop_timeout_ns;
        switch_begin(s, now);
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
    push_send(s, t->id, &m);
    t->run_epoch = epoch;
    t->slice_ns = m.run.slice_ns;
    t->run_since = now;
    t->switches++;
    t->share = SH_RUN;
    s->last = t->id;
    for (size_t i = 0; i < t->next_ws.n; i++) { /* LRU: in use from now on */
        struct ms_chunk *c = ms_chunk_get(&s->rt, t->next_ws.ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state))
            chunk_apply(s, t, t->next_ws.ids[i], MS_CE_TOUCH);
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
    if (wants_whole(s, t)) {
        rc = whole_footprint(s, t, &whole);
        ws = &whole;
    }
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_POPULATE);
    order_reset(&t->pop);
    for (size_t i = 0; i < ws->n && !rc; i++) {
        struct ms_chunk *c = ms_chunk_get(&s->rt, ws->ids[i]);
        if (c && (c->state == MS_CS_EMPTY || c->state == MS_CS_HOST))
            rc = order_add(&t->pop, ws->ids[i], c->bytes, c->state == MS_CS_EMPTY);
    }
    ms_chunk_set_fini(&whole);
    if (!rc && t->pop.n)
        rc = order_runs(s, &t->pop, &m);
    if (!rc)
        rc = reserve_actions(s, 2);
    if (rc) {
        ms_msg_free(&m);
        order_reset(&t->pop);
        return rc;
    }
    uint32_t epoch = ++s->epoch;
    if (t->pop.n) {
        grant(s, t);
        t->pop.active = true;
        t->pop.epoch = epoch;
        t->pop.deadline = now + s->cfg.order_timeout_ns;
        t->pop.t0 = now;
        m.order.epoch = epoch;
        m.order.credit = t->pop.credit;
        push_send(s, t->id, &m);
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
static void decide_shared(struct ms_sched *s, uint64_t now)
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
            rc = reserve_actions(s, 1);
            if (!rc)
                share_run(s, now, t, t->share_epoch);
        } else if (t->share == SH_RUN && t->dirty_demand) {
            t->dirty_demand = false;
            rc =
                needs_population(s, t) || wants_whole(s, t) ? share_serve(s, now, t, false) : MS_OK;
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
static bool try_share(struct ms_sched *s)
{
    uint64_t need;
    char why[128];
    if (!s->cfg.share || s->cfg.policy == MS_SCHED_PRIO || any_order_active(s))
        return false;
    if (share_fits(s, s->share_blocked, &need, why, sizeof(why)) != SHARE_FITS)
        return false;
    if (s->share_blocked) /* the note tells the demanded sets' need, not the footprints' */
        share_fits(s, false, &need, why, sizeof(why));
    s->share_blocked = false;
    share_enter(s, need);
    return true;
}

bool ms_sched_sharing(const struct ms_sched *s)
{
    return s->phase == MS_PH_SHARED;
}

/* ---- decisions ------------------------------------------------------------------------------- */

static void send_stop(struct ms_sched *s, uint64_t now, struct ms_stask *t)
{
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
    switch_begin(s, now);
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
    struct ms_stask *t = find_task(s, s->cur);
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
    if (!t->runnable && now < hold_until(s, t)) {
        if (!s->holding)
            s->idle_holds++;
        s->holding = true;
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
    if (now < s->slice_end)
        return;
    if (make_timeline(s, t->id, 1)) {
        s->retry = true;
        s->retry_at = now + RETRY_NS;
        return;
    }
    if (s->tl.n > 0 && s->tl.e[0].task != t->id)
        send_stop(s, now, t);
    else
        s->slice_end = now + (t->slice_ns ? t->slice_ns : s->cfg.slice_ns);
}

static void settle(struct ms_sched *s, uint64_t now)
{
    for (int guard = 0; guard < 16; guard++) {
        enum ms_sched_phase before = s->phase;
        uint32_t cur = s->cur, nx = s->next;

        /* Credit populations as far as memory allows. */
        for (size_t i = 0; i < s->ntasks; i++) {
            struct ms_stask *t = s->tasks[i];
            if (!t->pop.active || t->pop.granted == t->pop.n || t->stalled)
                continue;
            if (reserve_actions(s, 1)) {
                s->retry = true;
                s->retry_at = now + RETRY_NS;
                break;
            }
            if (grant(s, t)) {
                struct ms_msg m;
                ms_msg_init(&m, MS_MSG_CREDIT);
                m.credit.epoch = t->pop.epoch;
                m.credit.credit = t->pop.credit;
                push_send(s, t->id, &m);
            }
        }
        if (s->over_budget && s->rt.resident_bytes <= s->cfg.budget)
            s->over_budget = false;

        if (s->phase == MS_PH_MIGRATING) {
            struct ms_stask *t = find_task(s, s->next);
            if (t && !t->pop.active) {
                if (s->incremental) {
                    s->phase = MS_PH_RUNNING;
                    s->next = NONE;
                    s->incremental = false;
                } else if (reserve_actions(s, 1) == MS_OK) {
                    start_run(s, now, t);
                } else {
                    s->retry = true;
                    s->retry_at = now + RETRY_NS;
                }
            }
        } else if (s->phase == MS_PH_RUNNING && try_share(s)) {
            /* the running task became a sharer: SHARED at the next turn */
        } else if (s->phase == MS_PH_RUNNING) {
            struct ms_stask *t = find_task(s, s->cur);
            if (t->dirty_demand && !any_order_active(s)) {
                t->dirty_demand = false;
                int rc = needs_population(s, t) ? plan_incremental(s, now, t) : MS_OK;
                if (rc == MS_E_BUSY) {
                    send_stop(s, now, t); /* its own chunks must make room: a full switch */
                } else if (rc) {
                    t->dirty_demand = true;
                    s->retry = true;
                    s->retry_at = now + (rc == MS_E_NOSPACE ? PINNED_RETRY_NS : RETRY_NS);
                }
            }
            if (s->phase == MS_PH_RUNNING && s->shrink && !any_order_active(s)) {
                s->shrink = false;
                send_stop(s, now, t); /* the next plan evicts down to the new budget */
            }
            if (s->phase == MS_PH_RUNNING)
                decide_running(s, now);
        } else if (s->phase == MS_PH_SHARED) {
            decide_shared(s, now);
        } else if (s->phase == MS_PH_UNSHARING) {
            bool left = false;
            for (size_t i = 0; i < s->ntasks; i++)
                left |= s->tasks[i]->share == SH_STOPPING;
            if (!left)
                s->phase = MS_PH_IDLE; /* exclusive switching goes on from here */
        } else if (s->phase == MS_PH_IDLE && !any_order_active(s) && try_share(s)) {
            /* SHARED at the next turn */
        } else if (s->phase == MS_PH_IDLE && !any_order_active(s)) {
            if (!s->in_switch)
                switch_begin(s, now);
            int rc = plan_switch(s, now);
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
    struct ms_stask *t = find_live(s, task);
    if (!t)
        return MS_E_NOTFOUND;
    char why[128] = "";
    int rc = MS_OK;
    if (!m) {
        rc = MS_E_INVAL;
        snprintf(why, sizeof(why), "no message");
    } else {
        switch (m->type) {
        case MS_MSG_REGION: rc = on_region(s, now, t, &m->region, why, sizeof(why)); break;
        case MS_MSG_DEMAND: rc = on_demand(s, t, &m->demand, why, sizeof(why)); break;
        case MS_MSG_IDLE:
            t->runnable = false;
            t->dirty_demand = false;
            t->stall_demand = false;
            t->idle_at = now;
            break;
        case MS_MSG_REPORT:
            t->misses = MS_MAX(t->misses, m->report.misses);
            t->host_bytes = m->report.host_bytes;
            break;
        case MS_MSG_STOPPED:
            t->misses = MS_MAX(t->misses, m->stopped.misses);
            t->host_bytes = m->stopped.host_bytes;
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
            rc = on_progress(s, now, t, m->type == MS_MSG_EVICTED, &m->progress, why, sizeof(why));
            break;
        case MS_MSG_BYE:
            queue_drop(s, t->id, MS_OK, "said goodbye");
            remove_task(s, t);
            settle(s, now);
            return MS_OK;
        default:
            rc = MS_E_PARSE;
            snprintf(why, sizeof(why), "unexpected %s from a task", ms_msg_type_name(m->type));
            break;
        }
    }
    if (rc) {
        fail_task(s, now, t, rc, why);
        settle(s, now);
        return rc;
    }
    settle(s, now);
    return MS_OK;
}

void ms_sched_tick(struct ms_sched *s, uint64_t now)
{
    s->now = now;
    if (s->phase == MS_PH_STOPPING && now >= s->stop_by) {
        struct ms_stask *t = find_live(s, s->cur);
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
        if ((owes(&t->evict, true) && now >= t->evict.deadline) ||
            (owes(&t->pop, false) && now >= t->pop.deadline))
            fail_task(s, now, t, MS_E_STATE, "a migration order made no progress in time");
    }
    if (s->retry && now >= s->retry_at)
        s->retry = false;
    settle(s, now);
}

uint64_t ms_sched_deadline(const struct ms_sched *s)
{
    uint64_t d = UINT64_MAX;
    if (s->phase == MS_PH_RUNNING) {
        /* The slice end matters only when someone else waits. */
        for (size_t i = 0; i < s->ntasks; i++)
            if (s->tasks[i]->runnable && s->tasks[i]->id != s->cur) {
                d = MS_MIN(d, s->slice_end);
                const struct ms_stask *c = find_task(s, s->cur);
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
        if (owes(&t->evict, true))
            d = MS_MIN(d, t->evict.deadline);
        if (owes(&t->pop, false))
            d = MS_MIN(d, t->pop.deadline);
    }
    if (s->retry)
        d = MS_MIN(d, s->retry_at);
    return d;
}

/* ---- status and configuration ---------------------------------------------------------------- */

static uint8_t state_of(const struct ms_sched *s, const struct ms_stask *t)
{
    if (t->ghost)
        return MS_TS_DROPPED;
    if (t->stalled)
        return MS_TS_STALLED;
    if (t->share == SH_RUN)
        return MS_TS_RUNNING;
    if (t->share == SH_LOADING)
        return MS_TS_LOADING;
    if (t->share == SH_STOPPING)
        return MS_TS_STOPPING;
    if (s->cur == t->id) {
        if (s->phase == MS_PH_STOPPING)
            return MS_TS_STOPPING;
        return MS_TS_RUNNING;
    }
    if (s->next == t->id)
        return MS_TS_LOADING;
    return t->runnable ? MS_TS_WAITING : MS_TS_IDLE;
}

int ms_sched_task_state(const struct ms_sched *s, uint32_t task)
{
    const struct ms_stask *t = find_task(s, task);
    return t ? state_of(s, t) : -1;
}

uint64_t ms_sched_task_resident(const struct ms_sched *s, uint32_t task)
{
    const struct ms_stask *t = find_task(s, task);
    return t ? t->resident : 0;
}

int ms_sched_status(struct ms_sched *s, uint64_t now, struct ms_msg *out)
{
    ms_msg_init(out, MS_MSG_STATUS);
    struct ms_msg_status *st = &out->status;
    st->budget = s->cfg.budget;
    st->resident = s->rt.resident_bytes;
    st->uptime_ns = now > s->start_ns ? now - s->start_ns : 0;
    st->switches = s->switches;
    st->switch_ns_total = s->switch_ns_total;
    st->switch_ns_max = s->switch_ns_max;
    st->slice_ns = s->cfg.slice_ns;
    st->bytes_in = s->bytes_in;
    st->bytes_out = s->bytes_out;
    snprintf(st->policy, sizeof(st->policy), "%s", ms_sched_policy_name(s->cfg.policy));
    snprintf(st->evict, sizeof(st->evict), "%s", ms_evict_policy_name(s->cfg.evict));
    st->sharing = ms_sched_sharing(s);
    if (s->ntasks == 0)
        return MS_OK;
    st->tasks = ms_calloc(s->ntasks, sizeof(*st->tasks));
    if (!st->tasks)
        return MS_E_NOMEM;
    st->ntasks = (uint32_t)s->ntasks;
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        struct ms_task_status *ts = &st->tasks[i];
        ts->task = t->id;
        ts->pid = t->pid;
        ts->prio = t->prio;
        ts->weight = MS_MIN(t->weight, MS_PROTO_WEIGHT_MAX);
        ts->state = state_of(s, t);
        ts->resident = t->resident;
        ts->footprint = ms_rtable_footprint(&s->rt, t->id);
        ts->limit = t->limit;
        ts->bytes_in = t->bytes_in;
        ts->bytes_out = t->bytes_out;
        ts->switches = t->switches;
        bool holds = (s->cur == t->id && s->phase != MS_PH_IDLE) || t->share == SH_RUN ||
                     t->share == SH_STOPPING;
        ts->run_ns = t->run_ns + (holds ? now - t->run_since : 0);
        ts->misses = t->misses;
        ts->host_bytes = t->host_bytes;
        ts->host_limit = t->host_limit;
        snprintf(ts->name, sizeof(ts->name), "%s", t->name);
    }
    return MS_OK;
}

int ms_sched_set_budget(struct ms_sched *s, uint64_t now, uint64_t budget)
{
    if (budget < MS_GRAN)
        return MS_E_INVAL;
    s->cfg.budget = budget;
    if (s->rt.resident_bytes > budget) {
        s->over_budget = true;
        s->shrink = true;
    }
    settle(s, now);
    return MS_OK;
}

int ms_sched_set_slice(struct ms_sched *s, uint64_t now, uint64_t slice_ns)
{
    if (slice_ns == 0)
        return MS_E_INVAL;
    s->cfg.slice_ns = slice_ns;
    if (s->cfg.slice_max_ns < slice_ns)
        s->cfg.slice_max_ns = slice_ns;
    settle(s, now);
    return MS_OK;
}

int ms_sched_set_policy(struct ms_sched *s, uint64_t now, enum ms_sched_policy p)
{
    if ((unsigned)p >= MS_SCHED_POLICY_COUNT)
        return MS_E_INVAL;
    s->cfg.policy = p;
    settle(s, now);
    return MS_OK;
}

int ms_sched_set_share(struct ms_sched *s, uint64_t now, bool on)
{
    s->cfg.share = on;
    s->share_blocked = false; /* asked for: the demanded sets decide again */
    settle(s, now);
    return MS_OK;
}

int ms_sched_set_evict(struct ms_sched *s, uint64_t now, enum ms_evict_policy p)
{
    if (p != MS_EVICT_OPT && p != MS_EVICT_LRU && p != MS_EVICT_WHOLE)
        return MS_E_INVAL;
    s->cfg.evict = p;
    settle(s, now);
    return MS_OK;
}

/* ---- invariants ------------------------------------------------------------------------------ */

#define SFAIL(n, ...)                                                                              \
    do {                                                                                           \
        if (why && whylen)                                                                         \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        return (n);                                                                                \
    } while (0)

int ms_sched_check(const struct ms_sched *s, char *why, size_t whylen)
{
    char inner[160];
    if (ms_rtable_check(&s->rt, inner, sizeof(inner)))
        SFAIL(1, "S1: %s", inner);
    for (size_t i = 0; i < s->rt.nslots; i++)
        if (s->rt.regions[i].live && !find_task(s, s->rt.regions[i].task))
            SFAIL(1, "S1: region %zu belongs to dead task %u", i, s->rt.regions[i].task);
    if (s->rt.resident_bytes > s->cfg.budget && !s->over_budget)
        SFAIL(2, "S2: %llu bytes resident over a budget of %llu",
              (unsigned long long)s->rt.resident_bytes, (unsigned long long)s->cfg.budget);
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        if (i > 0 && s->tasks[i - 1]->id >= t->id)
            SFAIL(4, "S4: task array not sorted at %zu", i);
        uint64_t res = 0;
        for (size_t k = 0; k < t->nrmap; k++) {
            const struct ms_region *r = &s->rt.regions[t->rmap[k].slot];
            if (!r->live || r->task != t->id)
                SFAIL(1, "S1: task %u maps region %u to a slot it does not own", t->id,
                      t->rmap[k].rid);
            for (uint32_t c = 0; c < r->nchunks; c++) {
                bool resident = ms_chunk_state_resident((enum ms_chunk_state)r->chunks[c].state);
                if (resident)
                    res += r->chunks[c].bytes;
                if ((r->chunks[c].pins != 0) != ((t->ghost || t->stalled) && resident))
                    SFAIL(6, "S6: chunk %u of %stask %u's region %u has %u pins", c,
                          t->ghost     ? "ghost "
                          : t->stalled ? "stalled "
                                       : "",
                          t->id, t->rmap[k].rid, r->chunks[c].pins);
            }
        }
        if (res != t->resident)
            SFAIL(3, "S3: task %u resident %llu, chunks say %llu", t->id,
                  (unsigned long long)t->resident, (unsigned long long)res);
        const struct ms_sorder *ev = &t->evict, *po = &t->pop;
        if (t->ghost && (ev->active || po->active || t->runnable))
            SFAIL(4, "S4: ghost %u has orders or work", t->id);
        if (t->stalled && (t->runnable || t->ghost || s->cur == t->id || s->next == t->id))
            SFAIL(4, "S4: stalled task %u is in the schedule", t->id);
        if (ev->active) {
            size_t from = ev->runs_done ? ev->run_end[ev->runs_done - 1] : 0;
            for (size_t k = from; k < ev->n; k++) {
                if (!ev->e[k].valid)
                    continue;
                const struct ms_chunk *c = ms_chunk_get((struct ms_rtable *)&s->rt, ev->e[k].id);
                if (!c || c->state != MS_CS_OUT || owner_of(s, ev->e[k].id) != t)
                    SFAIL(5, "S5: task %u's EVICT entry %zu is not an OUT chunk of its own", t->id,
                          k);
            }
        }
        if (po->active) {
            size_t from = po->runs_done ? po->run_end[po->runs_done - 1] : 0;
            for (size_t k = from; k < po->granted; k++) {
                if (!po->e[k].valid)
                    continue;
                const struct ms_chunk *c = ms_chunk_get((struct ms_rtable *)&s->rt, po->e[k].id);
                if (!c || (c->state != MS_CS_IN && c->state != MS_CS_DIRTY))
                    SFAIL(5, "S5: task %u's credited POPULATE entry %zu is %s", t->id, k,
                          c ? ms_chunk_state_name((enum ms_chunk_state)c->state) : "gone");
            }
        }
    }
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct ms_stask *t = s->tasks[i];
        if (!t->share)
            continue;
        if (t->ghost || t->stalled || t->share > SH_STOPPING)
            SFAIL(4, "S4: task %u is a sharer (%u) while %s", t->id, t->share,
                  t->ghost     ? "a ghost"
                  : t->stalled ? "stalled"
                               : "in no known state");
        if (s->phase != MS_PH_SHARED && s->phase != MS_PH_UNSHARING)
            SFAIL(4, "S4: task %u is a sharer (%u) in phase %d", t->id, t->share, s->phase);
        if ((s->phase == MS_PH_UNSHARING) != (t->share == SH_STOPPING))
            SFAIL(4, "S4: task %u is a sharer (%u) in phase %d", t->id, t->share, s->phase);
        if (s->phase != MS_PH_SHARED || t->dirty_demand || wants_whole(s, t))
            continue;
        uint64_t b;
        for (size_t k = 0; k < t->next_ws.n; k++)
            if (!chunk_resident(s, t->next_ws.ids[k], &b))
                SFAIL(4, "S4: sharer %u lacks chunk %zu of its demanded set", t->id, k);
    }
    switch (s->phase) {
    case MS_PH_SHARED:
    case MS_PH_UNSHARING:
        if (s->cur != NONE || s->next != NONE)
            SFAIL(4, "S4: phase %d with cur %u next %u", s->phase, s->cur, s->next);
        for (size_t i = 0; s->phase == MS_PH_SHARED && i < s->ntasks; i++)
            if (!s->tasks[i]->stalled && s->tasks[i]->evict.active)
                SFAIL(4, "S4: task %u evicts while tasks share", s->tasks[i]->id);
        break;
    case MS_PH_IDLE:
        if (s->cur != NONE || s->next != NONE)
            SFAIL(4, "S4: idle with cur %u next %u", s->cur, s->next);
        break;
    case MS_PH_RUNNING:
    case MS_PH_STOPPING:
        if (!find_live(s, s->cur) || s->next != NONE)
            SFAIL(4, "S4: phase %d with cur %u next %u", s->phase, s->cur, s->next);
        break;
    case MS_PH_MIGRATING:
        if (!find_live(s, s->next) || (s->incremental ? s->cur != s->next : s->cur != NONE))
            SFAIL(4, "S4: migrating with cur %u next %u incremental %d", s->cur, s->next,
                  s->incremental);
        break;
    default: SFAIL(4, "S4: phase %d", s->phase);
    }
    return 0;
}
