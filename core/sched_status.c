/*
 * sched_status.c - configuration, status and setters, and the invariant checker (part of the
 * state machine: contract and invariants S1-S6 sched.h, design notes sched.c, the files' roles
 * sched_int.h).
 *
 * The setters change the configuration and call settle() like any event, so a new budget,
 * slice, policy or eviction policy takes effect through the usual decisions. ms_sched_check
 * reads the state only; tests call it after every event.
 */
#include "sched_int.h"

#include <stdio.h>
#include <string.h>

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
    c->prepare_host = true;
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
    const struct ms_stask *t = ms__sched_find_task(s, task);
    return t ? state_of(s, t) : -1;
}

uint64_t ms_sched_task_resident(const struct ms_sched *s, uint32_t task)
{
    const struct ms_stask *t = ms__sched_find_task(s, task);
    return t ? t->resident : 0;
}

void ms__sched_on_started(struct ms_sched *s, uint64_t now, struct ms_stask *t,
                          const struct ms_msg_started *m)
{
    if (m->epoch != t->run_epoch || t->started)
        return; /* late (a RUN since gone), or said twice: one counts per RUN */
    t->started = true;
    s->run_first[s->run_first_at] = m->wait_ns;
    s->run_first_at = (s->run_first_at + 1) % MS_SCHED_FIRST_RING;
    s->run_first_n = MS_MIN(s->run_first_n + 1, MS_SCHED_FIRST_RING);
    s->run_first_max = MS_MAX(s->run_first_max, m->wait_ns);
    if (s->last_switch.first_wait && s->last_switch.to == t->id &&
        s->last_switch.run_epoch == m->epoch) {
        s->last_switch.first_wait = false;
        s->last_switch.first_ns = now > s->last_switch.t0 ? now - s->last_switch.t0 : 0;
        s->first_ns_total += s->last_switch.first_ns;
        s->first_count++;
    }
}

/* The median of the recent RUN-to-first-command times (the lower middle of an even count). */
static uint64_t run_first_median(const struct ms_sched *s)
{
    uint64_t v[MS_SCHED_FIRST_RING];
    uint32_t n = s->run_first_n;
    if (n == 0)
        return 0;
    memcpy(v, s->run_first, n * sizeof(v[0]));
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: at most 64 */
        uint64_t x = v[i];
        uint32_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    return v[(n - 1) / 2];
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
    st->first_ns_total = s->first_ns_total;
    st->first_count = s->first_count;
    st->complete_ns_total = s->complete_ns_total;
    st->complete_count = s->complete_count;
    st->run_first_p50_ns = run_first_median(s);
    st->run_first_max_ns = s->run_first_max;
    st->refills = s->refills;
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
        ts->host_pool = t->host_pool;
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
    ms__sched_settle(s, now);
    return MS_OK;
}

int ms_sched_set_slice(struct ms_sched *s, uint64_t now, uint64_t slice_ns)
{
    if (slice_ns == 0)
        return MS_E_INVAL;
    s->cfg.slice_ns = slice_ns;
    if (s->cfg.slice_max_ns < slice_ns)
        s->cfg.slice_max_ns = slice_ns;
    ms__sched_settle(s, now);
    return MS_OK;
}

int ms_sched_set_policy(struct ms_sched *s, uint64_t now, enum ms_sched_policy p)
{
    if ((unsigned)p >= MS_SCHED_POLICY_COUNT)
        return MS_E_INVAL;
    s->cfg.policy = p;
    ms__sched_settle(s, now);
    return MS_OK;
}

int ms_sched_set_share(struct ms_sched *s, uint64_t now, bool on)
{
    s->cfg.share = on;
    s->share_blocked = false; /* asked for: the demanded sets decide again */
    ms__sched_settle(s, now);
    return MS_OK;
}

int ms_sched_set_evict(struct ms_sched *s, uint64_t now, enum ms_evict_policy p)
{
    if (p != MS_EVICT_OPT && p != MS_EVICT_LRU && p != MS_EVICT_WHOLE)
        return MS_E_INVAL;
    s->cfg.evict = p;
    ms__sched_settle(s, now);
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
        if (s->rt.regions[i].live && !ms__sched_find_task(s, s->rt.regions[i].task))
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
                if (!c || c->state != MS_CS_OUT || ms__sched_owner_of(s, ev->e[k].id) != t)
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
        if (s->phase != MS_PH_SHARED || t->dirty_demand || ms__sched_wants_whole(s, t))
            continue;
        uint64_t b;
        for (size_t k = 0; k < t->next_ws.n; k++)
            if (!ms__sched_chunk_resident(s, t->next_ws.ids[k], &b))
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
        if (!ms__sched_find_live(s, s->cur) || s->next != NONE)
            SFAIL(4, "S4: phase %d with cur %u next %u", s->phase, s->cur, s->next);
        break;
    case MS_PH_MIGRATING:
        if (!ms__sched_find_live(s, s->next) ||
            (s->incremental ? s->cur != s->next : s->cur != NONE))
            SFAIL(4, "S4: migrating with cur %u next %u incremental %d", s->cur, s->next,
                  s->incremental);
        break;
    default: SFAIL(4, "S4: phase %d", s->phase);
    }
    return 0;
}
