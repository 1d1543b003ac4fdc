/*
 * test_sched.c - the daemon's scheduling state machine (core/sched.h), driven by scripted
 * scenarios on a virtual clock.
 *
 * The harness plays the shims: each fake shim keeps its own view of which of its chunks hold
 * device memory, obeys orders the way the protocol says (populates only within credit, replies
 * with cumulative progress, optionally one run at a time), and can be told to hold a kind of
 * order unanswered so a test can kill it mid-migration. After every event the harness checks
 * ms_sched_check and, independently of the scheduler's accounting, that the bytes all fake
 * shims really hold never exceed the budget. Every message the scheduler sends is logged as
 * (task, type) so tests can check the order of messages.
 *
 * Scenarios: round-robin order; priority preemption; OPT evicting the chunks needed furthest
 * in the future across tasks (and LRU choosing differently); task death at each point of a
 * switch; the adaptive slice; protocol violations; timeouts; per-task limits; whole-process
 * swapping; incremental population of the running task; early RUN; a lowered budget; sharing
 * (tasks that fit run at once, pressure ends it and its end brings it back, PRIO and unequal
 * weights never share, a sharer that ignores its STOP is stalled, no flapping); a seeded
 * randomized stress run (sharing on in about half its rounds); and an allocation-failure sweep
 * over a whole scenario (sharing on at every other position). Scenarios about slicing run with
 * share off.
 */
#include "core/sched.h"
#include "tests/support/ms_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MS 1000000ull
#define SLICE (10 * MS)
#define CH MS_GRAN /* 2 MiB chunks in these tests */
#define MAXSHIM 16
#define MAXREG 8
#define MAXLOG 4096

struct freg {
    uint32_t rid;
    uint32_t nchunks;
    uint64_t cb, span;
    uint8_t res[2048];
    uint8_t hosted[2048]; /* evicted at least once: its host copy exists (the shim keeps it) */
    bool live;
};

struct fshim {
    uint32_t task;
    bool alive;  /* connected: receives messages */
    bool exited; /* its process is gone, and its memory with it */
    int32_t prio;
    uint64_t limit;
    struct freg regs[MAXREG];
    int nregs;
    uint32_t next_rid;
    uint64_t resident; /* what this shim really holds */
    uint64_t peak;
    bool running;
    uint32_t run_epoch;
    uint64_t run_slice;
    int runs_got;
    /* the POPULATE in progress */
    bool pop_active;
    uint32_t pop_epoch;
    struct ms_run pop_runs[256];
    uint32_t pop_n, pop_done;
    uint64_t pop_credit, pop_used;
    /* behaviour */
    bool hold_evict, hold_pop, hold_stop; /* leave these orders unanswered */
    int notes;                            /* MS_ACT_NOTE lines about it */
    uint64_t host_limit, host_bytes;      /* HELLO's host limit; host copies it holds */
    uint64_t pool; /* free host chunks it also holds (STOPPED reports them, as a shim's pool):
                    * an eviction past the limit takes them first */
    /* the last EVICT left unanswered (answer_evict replies to it) */
    struct ms_run held_runs[256];
    uint32_t held_n, held_epoch;
    bool held;
    bool partial;       /* progress one run per reply */
    bool sloppy_credit; /* populate beyond credit (a broken shim) */
    int errors, drops;
    int32_t last_error;
    int prepares;        /* PREPARE hints got */
    uint64_t prep_bytes; /* ... the last one's bytes */
};

struct logent {
    uint32_t task;
    uint16_t type;
};

struct world {
    struct ms_sched s;
    uint64_t now;
    uint64_t budget;
    struct fshim sh[MAXSHIM];
    int nsh;
    struct logent log[MAXLOG];
    int nlog;
    bool in_pump;
    uint32_t weight;          /* the weight add_task's HELLO asks for (0: none) */
    uint64_t host_limit;      /* the host limit add_task's HELLO gives (0: none) */
    int share_notes;          /* MS_ACT_NOTE lines about no task (the sharing mode) */
    char last_note[128];      /* ... the latest of them */
    char last_task_note[256]; /* the latest MS_ACT_NOTE about a task */
};

static struct fshim *shim_of(struct world *w, uint32_t task)
{
    for (int i = 0; i < w->nsh; i++)
        if (w->sh[i].task == task && w->sh[i].alive)
            return &w->sh[i];
    return NULL;
}

static void check_world(struct world *w)
{
    char why[256];
    int rc = ms_sched_check(&w->s, why, sizeof(why));
    if (rc)
        fail_msg("ms_sched_check: %s", why);
    uint64_t real = 0;
    for (int i = 0; i < w->nsh; i++)
        if (!w->sh[i].exited)
            real += w->sh[i].resident;
    if (real > w->s.cfg.budget && !w->s.over_budget)
        fail_msg("shims hold %llu bytes over the budget of %llu", (unsigned long long)real,
                 (unsigned long long)w->s.cfg.budget);
    for (int i = 0; i < w->nsh; i++) {
        struct fshim *f = &w->sh[i];
        if (f->alive && f->limit && f->resident > f->limit)
            fail_msg("task %u holds %llu over its limit %llu", f->task,
                     (unsigned long long)f->resident, (unsigned long long)f->limit);
    }
}

static void pump(struct world *w);

static void to_sched(struct world *w, struct fshim *f, struct ms_msg *m)
{
    ms_sched_message(&w->s, w->now, f->task, m);
    ms_msg_free(m);
    check_world(w);
}

/* The region with this id, live or freed (a freed one still has its geometry). */
static struct freg *freg_of(struct fshim *f, uint32_t rid)
{
    for (int i = 0; i < f->nregs; i++)
        if (f->regs[i].rid == rid)
            return &f->regs[i];
    return NULL;
}

static uint64_t chunk_bytes(const struct freg *r, uint32_t i)
{
    return i + 1 < r->nchunks ? r->cb : r->span - (uint64_t)(r->nchunks - 1) * r->cb;
}

/* Populate within credit; report progress. */
static void pop_progress(struct world *w, struct fshim *f)
{
    if (!f->pop_active || f->hold_pop)
        return;
    uint32_t done = f->pop_done;
    while (done < f->pop_n) {
        struct ms_run *r = &f->pop_runs[done];
        struct freg *g = freg_of(f, r->region);
        assert_non_null(g);
        uint64_t need = 0; /* a freed region's runs still count (the protocol's credit rule) */
        for (uint32_t c = r->first; c < r->first + r->count; c++)
            need += chunk_bytes(g, c);
        if (f->pop_used + need > f->pop_credit && !f->sloppy_credit)
            break;
        for (uint32_t c = r->first; c < r->first + r->count && g->live; c++) {
            if (!g->res[c]) {
                g->res[c] = 1;
                f->resident += chunk_bytes(g, c);
            }
        }
        f->pop_used += need;
        done++;
        if (f->partial)
            break;
    }
    f->peak = MS_MAX(f->peak, f->resident);
    if (done == f->pop_done)
        return;
    f->pop_done = done;
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_POPULATED);
    m.progress.epoch = f->pop_epoch;
    m.progress.runs_done = done;
    m.progress.bytes = f->pop_used;
    if (done == f->pop_n)
        f->pop_active = false;
    to_sched(w, f, &m);
    if (f->partial && f->pop_active && f->alive)
        pop_progress(w, f);
}

static void do_evict(struct world *w, struct fshim *f, const struct ms_msg_order *o)
{
    uint64_t freed = 0;
    for (uint32_t k = 0; k < o->nruns; k++) {
        struct freg *g = freg_of(f, o->runs[k].region);
        assert_true(g && g->live); /* the daemon names only live regions */
        for (uint32_t c = o->runs[k].first; c < o->runs[k].first + o->runs[k].count; c++) {
            assert_true(c < g->nchunks);
            if (g->res[c]) {
                g->res[c] = 0;
                f->resident -= chunk_bytes(g, c);
                freed += chunk_bytes(g, c);
                if (!g->hosted[c]) {
                    g->hosted[c] = 1;
                    f->host_bytes += chunk_bytes(g, c);
                    f->pool -= MS_MIN(f->pool, chunk_bytes(g, c));
                    /* The daemon never asks for more host memory than the shim may pin. */
                    assert_true(!f->host_limit || f->host_bytes <= f->host_limit);
                }
            }
        }
        if (f->partial || k + 1 == o->nruns) {
            struct ms_msg m;
            ms_msg_init(&m, MS_MSG_EVICTED);
            m.progress.epoch = o->epoch;
            m.progress.runs_done = k + 1;
            m.progress.bytes = freed;
            to_sched(w, f, &m);
            if (!f->alive)
                return;
        }
    }
}

static void deliver(struct world *w, struct fshim *f, struct ms_msg *m)
{
    switch (m->type) {
    case MS_MSG_WELCOME: f->task = m->welcome.task; break;
    case MS_MSG_RUN:
        assert_false(f->running);
        f->running = true;
        f->run_epoch = m->run.epoch;
        f->run_slice = m->run.slice_ns;
        f->runs_got++;
        break;
    case MS_MSG_STOP:
        assert_true(f->running);
        assert_int_equal(m->stop.epoch, f->run_epoch);
        if (f->hold_stop)
            break;
        f->running = false;
        struct ms_msg r;
        ms_msg_init(&r, MS_MSG_STOPPED);
        r.stopped.epoch = m->stop.epoch;
        r.stopped.host_bytes = f->host_bytes + f->pool;
        r.stopped.host_pool = f->pool;
        to_sched(w, f, &r);
        break;
    case MS_MSG_EVICT:
        if (!f->hold_evict) {
            do_evict(w, f, &m->order);
        } else if (m->order.nruns <= MS_ARRAY_LEN(f->held_runs)) {
            memcpy(f->held_runs, m->order.runs, m->order.nruns * sizeof(struct ms_run));
            f->held_n = m->order.nruns;
            f->held_epoch = m->order.epoch;
            f->held = true;
        }
        break;
    case MS_MSG_POPULATE:
        assert_false(f->pop_active);
        assert_true(m->order.nruns <= MS_ARRAY_LEN(f->pop_runs));
        f->pop_active = true;
        f->pop_epoch = m->order.epoch;
        memcpy(f->pop_runs, m->order.runs, m->order.nruns * sizeof(struct ms_run));
        f->pop_n = m->order.nruns;
        f->pop_done = 0;
        f->pop_credit = m->order.credit;
        f->pop_used = 0;
        pop_progress(w, f);
        break;
    case MS_MSG_CREDIT:
        assert_true(f->pop_active);
        assert_int_equal(m->credit.epoch, f->pop_epoch);
        assert_true(m->credit.credit >= f->pop_credit);
        f->pop_credit = m->credit.credit;
        pop_progress(w, f);
        break;
    case MS_MSG_ERROR:
        f->errors++;
        f->last_error = m->error.code;
        break;
    case MS_MSG_PREPARE: {
        /* Only while running, for this RUN, growing within it, and never more than the
         * shim's resident chunks that were never hosted. */
        assert_true(f->running);
        assert_int_equal(m->prepare.epoch, f->run_epoch);
        uint64_t fresh = 0;
        for (int i = 0; i < f->nregs; i++)
            for (uint32_t k = 0; f->regs[i].live && k < f->regs[i].nchunks; k++)
                if (f->regs[i].res[k] && !f->regs[i].hosted[k])
                    fresh += chunk_bytes(&f->regs[i], k);
        assert_true(m->prepare.bytes <= fresh);
        f->prepares++;
        f->prep_bytes = m->prepare.bytes;
        break;
    }
    default: fail_msg("unexpected %s to a shim", ms_msg_type_name(m->type));
    }
}

static void pump(struct world *w)
{
    if (w->in_pump)
        return;
    w->in_pump = true;
    struct ms_action a;
    while (ms_sched_next_action(&w->s, &a)) {
        struct fshim *f = shim_of(w, a.task);
        if (getenv("SCHED_DEBUG"))
            fprintf(stderr, "t=%llu %s -> %u\n", (unsigned long long)w->now,
                    a.kind == MS_ACT_SEND   ? ms_msg_type_name(a.msg.type)
                    : a.kind == MS_ACT_NOTE ? a.why
                                            : "DROP",
                    a.task);
        if (a.kind == MS_ACT_NOTE) {
            if (f) {
                f->notes++;
                snprintf(w->last_task_note, sizeof(w->last_task_note), "%s", a.why);
            }
            if (a.task == MS_TASK_NONE) {
                w->share_notes++;
                snprintf(w->last_note, sizeof(w->last_note), "%s", a.why);
            }
        } else if (a.kind == MS_ACT_SEND) {
            if (w->nlog < MAXLOG)
                w->log[w->nlog++] = (struct logent){.task = a.task, .type = a.msg.type};
            if (f)
                deliver(w, f, &a.msg);
        } else {
            assert_int_equal(a.kind, MS_ACT_DROP);
            if (f) {
                f->drops++;
                f->alive = false; /* the process may live on, holding its memory */
            }
        }
        ms_msg_free(&a.msg);
    }
    w->in_pump = false;
}

/* Pump until quiet: every delivery can queue more actions. */
static void settle_world(struct world *w)
{
    for (int i = 0; i < 1000 && (w->s.head < w->s.nacts || w->s.nzq > 0); i++)
        pump(w);
    pump(w);
    check_world(w);
}

static void world_init(struct world *w, enum ms_sched_policy pol, enum ms_evict_policy ev,
                       uint64_t budget)
{
    memset(w, 0, sizeof(*w));
    struct ms_sched_config c;
    ms_sched_config_default(&c);
    c.policy = pol;
    c.evict = ev;
    c.budget = budget;
    c.slice_ns = SLICE;
    c.slice_max_ns = 100 * SLICE;
    c.stop_timeout_ns = 50 * MS;
    c.order_timeout_ns = 500 * MS;
    /* Most scenarios are about exclusive slicing and switching, with tasks whose memory would
     * fit together: sharing off; the sharing scenarios (and the stress run, at random) turn it
     * on. */
    c.share = false;
    w->budget = budget;
    w->now = 1000;
    assert_int_equal(ms_sched_init(&w->s, &c, w->now), MS_OK);
}

static void world_fini(struct world *w)
{
    ms_sched_fini(&w->s);
}

/* A task with regions of the given chunk counts (2 MiB chunks). */
static struct fshim *add_task(struct world *w, const char *name, int32_t prio, uint64_t limit,
                              const uint32_t *nchunks, int nregs)
{
    assert_true(w->nsh < MAXSHIM);
    struct fshim *f = &w->sh[w->nsh++];
    memset(f, 0, sizeof(*f));
    f->alive = true;
    f->prio = prio;
    f->limit = limit;
    f->next_rid = 10;
    struct ms_msg_hello h;
    memset(&h, 0, sizeof(h));
    h.version = 1;
    h.pid = 100 + (uint32_t)w->nsh;
    h.prio = prio;
    h.mem_limit = limit;
    h.weight = w->weight;
    h.host_limit = w->host_limit;
    f->host_limit = w->host_limit;
    snprintf(h.name, sizeof(h.name), "%s", name);
    uint32_t id;
    assert_int_equal(ms_sched_hello(&w->s, w->now, &h, 0, &id), MS_OK);
    f->task = id;
    settle_world(w);
    for (int i = 0; i < nregs; i++) {
        struct freg *g = &f->regs[f->nregs++];
        g->rid = f->next_rid;
        f->next_rid += 3;
        g->nchunks = nchunks[i];
        g->cb = CH;
        g->span = nchunks[i] * CH;
        g->live = true;
        struct ms_msg m;
        ms_msg_init(&m, MS_MSG_REGION);
        m.region.op = MS_REGION_ADD;
        m.region.kind = MS_RK_DEVICE;
        m.region.region = g->rid;
        m.region.base = 0x10000000ull * (uint64_t)(i + 1);
        m.region.size = g->span - 4096; /* an odd size: rounds up to the chunks */
        m.region.chunk_bytes = CH;
        to_sched(w, f, &m);
    }
    settle_world(w);
    return f;
}

/* DEMAND: the listed runs as next (and recent = next). */
static void demand_runs(struct world *w, struct fshim *f, const struct ms_run *runs, uint32_t n,
                        uint32_t flags)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_DEMAND);
    m.demand.flags = flags;
    m.demand.nnext = n;
    m.demand.next = ms_malloc((n ? n : 1) * sizeof(struct ms_run));
    memcpy(m.demand.next, runs, n * sizeof(struct ms_run));
    m.demand.nrecent = n;
    m.demand.recent = ms_malloc((n ? n : 1) * sizeof(struct ms_run));
    memcpy(m.demand.recent, runs, n * sizeof(struct ms_run));
    to_sched(w, f, &m);
    settle_world(w);
}

/* DEMAND all chunks of all its regions. */
static void demand_all(struct world *w, struct fshim *f)
{
    struct ms_run runs[MAXREG];
    uint32_t n = 0;
    for (int i = 0; i < f->nregs; i++)
        if (f->regs[i].live)
            runs[n++] = (struct ms_run){f->regs[i].rid, 0, f->regs[i].nchunks};
    demand_runs(w, f, runs, n, 0);
}

static void idle(struct world *w, struct fshim *f)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_IDLE);
    to_sched(w, f, &m);
    settle_world(w);
}

static void advance(struct world *w, uint64_t dt)
{
    w->now += dt;
    ms_sched_tick(&w->s, w->now);
    settle_world(w);
}

/* Advance to the scheduler's next deadline (at most `max`). */
static void advance_to_deadline(struct world *w, uint64_t max)
{
    uint64_t d = ms_sched_deadline(&w->s);
    uint64_t to = d == UINT64_MAX || d > w->now + max ? w->now + max : MS_MAX(d, w->now);
    advance(w, to - w->now);
}

/* The process exits (dropped or not): its memory is gone. */
static void kill_task(struct world *w, struct fshim *f)
{
    f->alive = false;
    f->exited = true;
    f->resident = 0;
    ms_sched_task_gone(&w->s, w->now, f->task);
    settle_world(w);
}

static struct fshim *running(struct world *w)
{
    struct fshim *r = NULL;
    for (int i = 0; i < w->nsh; i++) {
        if (w->sh[i].alive && w->sh[i].running) {
            assert_null(r); /* at most one */
            r = &w->sh[i];
        }
    }
    return r;
}

/* How many live shims hold RUN (sharing: several may). */
static int nrunning(struct world *w)
{
    int n = 0;
    for (int i = 0; i < w->nsh; i++)
        n += w->sh[i].alive && w->sh[i].running;
    return n;
}

/* The log since index `from`, as "type@task" items, for failure messages and checks. */
static int count_log(struct world *w, int from, uint16_t type, uint32_t task)
{
    int n = 0;
    for (int i = from; i < w->nlog; i++)
        if (w->log[i].type == type && (task == MS_TASK_NONE || w->log[i].task == task))
            n++;
    return n;
}

static int find_log(struct world *w, int from, uint16_t type, uint32_t task)
{
    for (int i = from; i < w->nlog; i++)
        if (w->log[i].type == type && (task == MS_TASK_NONE || w->log[i].task == task))
            return i;
    return -1;
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static void test_rr_order(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 64 * CH);
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, four, 1);
    assert_int_equal(count_log(&w, 0, MS_MSG_WELCOME, MS_TASK_NONE), 3);
    assert_null(running(&w));

    int mark = w.nlog;
    demand_all(&w, a);
    /* a is alone: POPULATE then RUN, no STOP, no EVICT. */
    assert_int_equal(w.log[mark].type, MS_MSG_POPULATE);
    assert_int_equal(w.log[mark].task, a->task);
    assert_int_equal(w.log[mark + 1].type, MS_MSG_RUN);
    assert_ptr_equal(running(&w), a);
    assert_true(a->run_slice == SLICE);
    demand_all(&w, b);
    demand_all(&w, c);
    assert_ptr_equal(running(&w), a); /* RR does not preempt */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_RUNNING);
    assert_int_equal(ms_sched_task_state(&w.s, b->task), MS_TS_WAITING);

    /* Slices in id order, cyclically: a b c a b c a. */
    struct fshim *want[] = {b, c, a, b, c, a};
    for (size_t i = 0; i < MS_ARRAY_LEN(want); i++) {
        mark = w.nlog;
        advance_to_deadline(&w, 1000 * MS);
        assert_ptr_equal(running(&w), want[i]);
        struct fshim *prev = i == 0 ? a : want[i - 1];
        /* STOP to the previous task comes first, RUN to the next last. */
        assert_int_equal(w.log[mark].type, MS_MSG_STOP);
        assert_int_equal(w.log[mark].task, prev->task);
        assert_int_equal(w.log[w.nlog - 1].type, MS_MSG_RUN);
        assert_int_equal(w.log[w.nlog - 1].task, want[i]->task);
        /* Everyone fits: nothing is evicted, and a working set is populated only once. */
        assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE), 0);
        assert_int_equal(count_log(&w, mark, MS_MSG_POPULATE, MS_TASK_NONE), i < 2 ? 1 : 0);
    }
    assert_true(w.s.switches == 7);
    /* An idle task drops out of the rotation. */
    idle(&w, b);
    advance_to_deadline(&w, 1000 * MS); /* a -> c (b skipped) */
    assert_ptr_equal(running(&w), c);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);

    struct ms_msg st;
    assert_int_equal(ms_sched_status(&w.s, w.now, &st), MS_OK);
    assert_int_equal(st.status.ntasks, 3);
    assert_true(st.status.resident == 12 * CH);
    assert_int_equal(st.status.tasks[0].state, MS_TS_RUNNING);
    assert_int_equal(st.status.tasks[1].state, MS_TS_IDLE);
    assert_true(st.status.tasks[0].footprint == 4 * CH);
    assert_string_equal(st.status.policy, "rr");
    assert_int_equal(ms_msg_validate(&st, NULL, 0), MS_OK);
    ms_msg_free(&st);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* A task that is alone keeps the GPU past its slice; nobody is stopped for nothing. */
static void test_alone_keeps_running(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 64 * CH);
    uint32_t two[] = {2};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, two, 1);
    demand_all(&w, a);
    assert_true(ms_sched_deadline(&w.s) == UINT64_MAX);
    int mark = w.nlog;
    advance(&w, 5 * SLICE);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    assert_ptr_equal(running(&w), a);
    idle(&w, a); /* idle and alone: still holds RUN, no round trip needed for new work */
    assert_ptr_equal(running(&w), a);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, two, 1);
    demand_all(&w, b); /* a is idle: it is stopped at once */
    assert_ptr_equal(running(&w), b);
    world_fini(&w);
}

static void test_priority_preemption(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_PRIO, MS_EVICT_OPT, 8 * CH);
    uint32_t six[] = {6}, four[] = {4};
    struct fshim *be = add_task(&w, "be", MS_PRIO_BE, 0, six, 1);
    struct fshim *be2 = add_task(&w, "be2", MS_PRIO_BE, 0, four, 1);
    struct fshim *rt = add_task(&w, "rt", MS_PRIO_RT, 0, four, 1);
    demand_all(&w, be);
    demand_all(&w, be2);
    assert_ptr_equal(running(&w), be);
    advance(&w, SLICE / 2);
    int mark = w.nlog;
    demand_all(&w, rt); /* preempts at once, same instant */
    assert_ptr_equal(running(&w), rt);
    assert_int_equal(w.log[mark].type, MS_MSG_STOP);
    assert_int_equal(w.log[mark].task, be->task);
    /* The RT task's working set is restored: 4 chunks in, 2 of be's out. */
    assert_int_equal(ms_sched_task_resident(&w.s, rt->task), 4 * CH);
    assert_true(count_log(&w, mark, MS_MSG_EVICT, be->task) == 1);
    /* RT runs slice after slice while it has work; BE tasks wait. */
    for (int i = 0; i < 5; i++) {
        advance(&w, SLICE);
        assert_ptr_equal(running(&w), rt);
    }
    idle(&w, rt);
    assert_true(running(&w) == be2 || running(&w) == be);
    struct fshim *first = running(&w);
    advance_to_deadline(&w, 1000 * MS);
    assert_true(running(&w) != first && running(&w) != rt);
    /* A lower priority arrival never preempts. */
    demand_all(&w, rt);
    assert_ptr_equal(running(&w), rt);
    mark = w.nlog;
    struct ms_run r = {be->regs[0].rid, 0, 1};
    demand_runs(&w, be, &r, 1, 0);
    assert_ptr_equal(running(&w), rt);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    world_fini(&w);
}

/*
 * PRIO: an idle higher-priority task (a service between requests) is planned to come back next,
 * so OPT evicts a runnable best-effort task's chunks before the service's.
 */
static void test_priority_returner_kept(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_PRIO, MS_EVICT_OPT, 12 * CH);
    uint32_t four[] = {4}, six[] = {6};
    struct fshim *rt = add_task(&w, "rt", MS_PRIO_RT, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, four, 1);
    struct fshim *be = add_task(&w, "be", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, rt);
    assert_ptr_equal(running(&w), rt);
    idle(&w, rt); /* between requests */
    demand_all(&w, c);
    assert_ptr_equal(running(&w), c);
    demand_all(&w, be);
    assert_int_equal(w.s.rt.resident_bytes, 8 * CH);
    int mark = w.nlog;
    advance_to_deadline(&w, 1000 * MS); /* c's slice ends: be needs 6, 4 free: 2 must go */
    assert_ptr_equal(running(&w), be);
    assert_int_equal(ms_sched_task_resident(&w.s, be->task), 6 * CH);
    /* Without the returner rt's chunks have no next use and would be the victims. */
    assert_int_equal(ms_sched_task_resident(&w.s, rt->task), 4 * CH);
    assert_int_equal(ms_sched_task_resident(&w.s, c->task), 2 * CH);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, rt->task), 0);
    /* The service's next request preempts and finds its memory resident: nothing moves. */
    mark = w.nlog;
    demand_all(&w, rt);
    assert_ptr_equal(running(&w), rt);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE), 0);
    world_fini(&w);
}

/* OPT evicts what the timeline needs furthest in the future, across tasks; LRU does not. */
static void opt_vs_lru(enum ms_evict_policy ev, uint32_t *out_victim)
{
    struct world w;
    world_init(&w, MS_SCHED_RR, ev, 8 * CH);
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a); /* a runs */
    demand_all(&w, b);
    advance_to_deadline(&w, 1000 * MS); /* b runs: a and b resident, 8 chunks: full */
    assert_ptr_equal(running(&w), b);
    assert_int_equal(w.s.rt.resident_bytes, 8 * CH);
    demand_all(&w, c);
    int mark = w.nlog;
    advance_to_deadline(&w, 1000 * MS); /* c runs; after it the timeline says a, then b */
    assert_ptr_equal(running(&w), c);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE), 1);
    int e = find_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE);
    *out_victim = w.log[e].task == a->task ? 0 : w.log[e].task == b->task ? 1 : 2;
    assert_int_equal(ms_sched_task_resident(&w.s, c->task), 4 * CH);
    /* Evictions precede the population's completion; RUN comes last. */
    assert_true(e < find_log(&w, mark, MS_MSG_RUN, c->task));
    world_fini(&w);
}

static void test_opt_across_tasks(void **state)
{
    (void)state;
    uint32_t victim;
    opt_vs_lru(MS_EVICT_OPT, &victim);
    assert_int_equal(victim, 1); /* b: its next slice is after a's */
    opt_vs_lru(MS_EVICT_LRU, &victim);
    assert_int_equal(victim, 0); /* a: least recently used */
}

/* The victim chosen is the chunk furthest away, chunk by chunk, with partial working sets. */
static void test_opt_chunk_order(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 10 * CH);
    uint32_t six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, six, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, six, 1);
    /* a uses chunks 0-3 now and later; b uses 0-5. Budget 10: a's 4 + b's 6. */
    struct ms_run ra = {a->regs[0].rid, 0, 4};
    demand_runs(&w, a, &ra, 1, 0);
    demand_all(&w, b);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), b);
    assert_int_equal(w.s.rt.resident_bytes, 10 * CH);
    /* Now a wants chunks 2-5: 4 and 5 are new; b's chunks are needed after a's slice, a's
     * chunks 0-1 never: they go first, no b chunk is evicted. */
    struct ms_run ra2 = {a->regs[0].rid, 2, 4};
    demand_runs(&w, a, &ra2, 1, 0);
    int mark = w.nlog;
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, b->task), 0);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, a->task), 1);
    assert_false(a->regs[0].res[0] || a->regs[0].res[1]);
    assert_true(a->regs[0].res[4] && a->regs[0].res[5]);
    world_fini(&w);
}

/* Death at each point of a switch: the others continue, nothing leaks. */
static void death_case(int where)
{
    uint64_t live = ms_alloc_live();
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    uint32_t four[] = {4}, six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    demand_all(&w, c);
    assert_ptr_equal(running(&w), a);
    switch (where) {
    case 0: /* the running task dies */
        kill_task(&w, a);
        assert_ptr_equal(running(&w), b);
        break;
    case 1: /* the task being stopped dies before STOPPED */
        a->hold_stop = true;
        advance_to_deadline(&w, 1000 * MS);
        assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STOPPING);
        kill_task(&w, a);
        assert_ptr_equal(running(&w), b);
        break;
    case 2: /* a victim dies with its EVICT unanswered: its memory is the credit */
        advance_to_deadline(&w, 1000 * MS); /* b runs: a 4 + b 4 = 8 */
        assert_ptr_equal(running(&w), b);
        a->hold_evict = true;
        b->hold_evict = true;
        advance_to_deadline(&w, 1000 * MS); /* to c: needs 6, evicts from a and/or b */
        assert_int_equal(ms_sched_task_state(&w.s, c->task), MS_TS_LOADING);
        assert_null(running(&w));
        kill_task(&w, a);
        if (ms_sched_task_state(&w.s, c->task) == MS_TS_LOADING) {
            b->hold_evict = false;
            /* b answers its pending EVICT now (re-deliver by hand) */
            struct ms_msg m;
            ms_msg_init(&m, MS_MSG_EVICTED);
            m.progress.epoch = w.s.epoch;
            m.progress.runs_done = 0;
            for (int i = 0; i < 4; i++) {
                if (b->regs[0].res[i])
                    m.progress.runs_done = 1;
                b->regs[0].res[i] = 0;
            }
            b->resident = 0;
            to_sched(&w, b, &m);
            settle_world(&w);
        }
        assert_ptr_equal(running(&w), c);
        break;
    case 3: /* the task being loaded dies mid-population */
        advance_to_deadline(&w, 1000 * MS);
        assert_ptr_equal(running(&w), b);
        c->hold_pop = true;
        advance_to_deadline(&w, 1000 * MS);
        assert_int_equal(ms_sched_task_state(&w.s, c->task), MS_TS_LOADING);
        kill_task(&w, c);
        assert_true(running(&w) == a || running(&w) == b);
        break;
    case 4: /* a victim dies while the population waits for its credit; loader partial */
        advance_to_deadline(&w, 1000 * MS);
        a->hold_evict = true;
        c->partial = true;
        advance_to_deadline(&w, 1000 * MS);
        kill_task(&w, a);
        assert_ptr_equal(running(&w), c);
        break;
    }
    /* The schedule goes on among the survivors. */
    int mark = w.nlog;
    for (int i = 0; i < 6; i++)
        advance_to_deadline(&w, 1000 * MS);
    assert_true(count_log(&w, mark, MS_MSG_RUN, MS_TASK_NONE) >= 3);
    for (int i = 0; i < w.nsh; i++)
        if (!w.sh[i].alive)
            assert_int_equal(ms_sched_task_state(&w.s, w.sh[i].task), -1);
    assert_true(w.s.ntasks == 2);
    /* The dead task's regions are gone from the mirror. */
    assert_int_equal(w.s.rt.live_regions, 2);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

static void test_death_mid_switch(void **state)
{
    (void)state;
    for (int where = 0; where <= 4; where++)
        death_case(where);
}

/* f answers the EVICT it held. */
static void answer_evict(struct world *w, struct fshim *f)
{
    assert_true(f->held);
    f->hold_evict = false;
    f->held = false;
    struct ms_msg_order o = {.epoch = f->held_epoch, .runs = f->held_runs, .nruns = f->held_n};
    do_evict(w, f, &o);
    settle_world(w);
}

/* a answers the STOP it held. */
static void answer_stop(struct world *w, struct fshim *a)
{
    a->hold_stop = false;
    a->running = false;
    struct ms_msg r;
    ms_msg_init(&r, MS_MSG_STOPPED);
    r.stopped.epoch = a->run_epoch;
    to_sched(w, a, &r);
    settle_world(w);
}

static void test_adaptive_slice(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_ADAPTIVE, MS_EVICT_OPT, 4096 * CH);
    w.s.cfg.slice_max_ns = 10000 * SLICE;
    uint32_t small[] = {1}, big[] = {2000};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, small, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, big, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, big, 1);
    demand_all(&w, a);
    /* One fresh chunk: the mapping cost alone is far below 10 % of 10 ms: the base slice. */
    assert_true(a->run_slice == SLICE);
    demand_all(&w, b);
    advance_to_deadline(&w, 100000 * MS);
    assert_ptr_equal(running(&w), b);
    uint64_t fresh_slice = b->run_slice; /* 4000 MiB mapped fresh: map cost only */
    assert_true(fresh_slice >= SLICE);
    /* Make b's chunks host-resident by evicting them (budget shrinks to push them out). */
    demand_all(&w, c);
    assert_int_equal(ms_sched_set_budget(&w.s, w.now, 2100 * CH), MS_OK);
    advance_to_deadline(&w, 100000 * MS); /* c: b's 2000 chunks go out, c's come in fresh */
    assert_ptr_equal(running(&w), c);
    uint64_t slice_c = c->run_slice;
    advance_to_deadline(&w, 100000 * MS); /* a (tiny) */
    advance_to_deadline(&w, 100000 * MS); /* b again: 4000 MiB copied in, 4000 out */
    assert_ptr_equal(running(&w), b);
    uint64_t copy_slice = b->run_slice;
    /* Moving 4 GB each way at ~90 GB/s takes ~90 ms: the slice is about 10x that. */
    const struct ms_cost *cost = &ms_cost_h200;
    uint64_t t = ms_cost_transfer_ns(cost, 2000 * CH, 2000 * CH, true);
    assert_true(copy_slice >= 10 * t);
    assert_true(copy_slice > slice_c);
    assert_true(copy_slice > fresh_slice);
    assert_true(copy_slice <= 10000 * SLICE);
    /* With a tight maximum the slice is capped. */
    w.s.cfg.slice_max_ns = 2 * SLICE;
    advance_to_deadline(&w, 100000 * MS);
    advance_to_deadline(&w, 100000 * MS);
    advance_to_deadline(&w, 100000 * MS);
    assert_true(b->run_slice <= 2 * SLICE && c->run_slice <= 2 * SLICE);
    world_fini(&w);
}

/* Adaptive: the slice answers the switch as it went, not only as planned. A drain of 40 ms
 * (the outgoing task stopping late) before a switch whose plan moves almost nothing still
 * stretches the incoming slice to 10x the switch (switch_frac 10 %). */
static void test_adaptive_slice_measured(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_ADAPTIVE, MS_EVICT_OPT, 4096 * CH);
    uint32_t small[] = {1};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, small, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, small, 1);
    demand_all(&w, a);
    assert_ptr_equal(running(&w), a);
    assert_true(a->run_slice == SLICE); /* one fresh chunk: predicted cost far below 1 ms */
    demand_all(&w, b);
    a->hold_stop = true;
    advance_to_deadline(&w, 100000 * MS); /* a's slice ends: STOP, held */
    assert_false(b->running);
    advance(&w, 40 * MS);
    answer_stop(&w, a);
    assert_ptr_equal(running(&w), b);
    assert_true(b->run_slice >= 400 * MS && b->run_slice <= 100 * SLICE);
    /* ... and never past slice_max */
    w.s.cfg.slice_max_ns = 2 * SLICE;
    b->hold_stop = true;
    advance_to_deadline(&w, 100000 * MS);
    advance(&w, 40 * MS);
    answer_stop(&w, b);
    assert_ptr_equal(running(&w), a);
    assert_true(a->run_slice == 2 * SLICE);
    world_fini(&w);
}

/* Round-robin whose switches take longer than half a slice: one note, after 8 switches, that
 * names the adaptive policy; none while switches are short, none under adaptive. */
static int rr_hint_notes(enum ms_sched_policy policy, uint64_t switch_ns, int switches)
{
    struct world w;
    world_init(&w, policy, MS_EVICT_OPT, 4096 * CH);
    uint32_t small[] = {1};
    struct fshim *t[2] = {add_task(&w, "a", MS_PRIO_BE, 0, small, 1),
                          add_task(&w, "b", MS_PRIO_BE, 0, small, 1)};
    demand_all(&w, t[0]);
    demand_all(&w, t[1]);
    int notes = 0;
    for (int i = 0; i < switches; i++) {
        struct fshim *cur = running(&w);
        assert_non_null(cur);
        cur->hold_stop = true;
        advance_to_deadline(&w, 100000 * MS);
        advance(&w, switch_ns);
        answer_stop(&w, cur);
        assert_ptr_not_equal(running(&w), cur);
        if (strstr(w.last_note, "policy adaptive stretches slices")) {
            notes++;
            w.last_note[0] = 0;
        }
    }
    world_fini(&w);
    return notes;
}

static void test_rr_hint(void **state)
{
    (void)state;
    assert_int_equal(rr_hint_notes(MS_SCHED_RR, 6 * MS, 20), 1); /* 6 ms switches, 10 ms slices */
    assert_int_equal(rr_hint_notes(MS_SCHED_RR, 6 * MS, 6), 0);  /* not before 8 switches */
    assert_int_equal(rr_hint_notes(MS_SCHED_RR, 1 * MS, 20), 0); /* cheap switches */
    assert_int_equal(rr_hint_notes(MS_SCHED_ADAPTIVE, 6 * MS, 20), 0);
}

/* PREPARE (sched.h, "Host memory ahead of a switch"): the running task is told what the next
 * switch will evict of its never-hosted chunks. Budget 8 chunks, two tasks of 6. a runs with 6;
 * b waits for 6 with 2 free: a hears 4. After a round each way a's 4 evicted chunks are hosted:
 * a, running again, hears only its 2 never-hosted ones. Nothing with prepare_host off, nothing
 * under PRIO, nothing while nobody waits. */
static void prepare_round(enum ms_sched_policy pol, bool on, int *a_first, uint64_t *a_bytes,
                          int *b_first, int *a_third, uint64_t *a_third_bytes)
{
    struct world w;
    world_init(&w, pol, MS_EVICT_OPT, 8 * CH);
    w.s.cfg.prepare_host = on;
    uint32_t six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, six, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, a);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(a->prepares, 0); /* nobody waits */
    demand_all(&w, b);
    *a_first = a->prepares;
    *a_bytes = a->prep_bytes;
    advance_to_deadline(&w, 1000 * MS); /* a's slice ends: b runs */
    assert_ptr_equal(running(&w), b);
    *b_first = b->prepares;
    advance_to_deadline(&w, 1000 * MS); /* b's slice ends: a runs again */
    assert_ptr_equal(running(&w), a);
    *a_third = a->prepares;
    *a_third_bytes = a->prep_bytes;
    world_fini(&w);
}

static void test_prepare_hint(void **state)
{
    (void)state;
    int a1, b1, a3;
    uint64_t ab, a3b;
    prepare_round(MS_SCHED_RR, true, &a1, &ab, &b1, &a3, &a3b);
    assert_int_equal(a1, 1);
    assert_true(ab == 4 * CH);
    assert_int_equal(b1, 1); /* b's 6 are all new; a lacks 4 with nothing free */
    assert_int_equal(a3, 2);
    assert_true(a3b == 2 * CH);
    prepare_round(MS_SCHED_ADAPTIVE, true, &a1, &ab, &b1, &a3, &a3b);
    assert_true(a1 == 1 && ab == 4 * CH && a3 == 2 && a3b == 2 * CH);
    prepare_round(MS_SCHED_RR, false, &a1, &ab, &b1, &a3, &a3b);
    assert_true(a1 == 0 && b1 == 0 && a3 == 0);
    prepare_round(MS_SCHED_PRIO, true, &a1, &ab, &b1, &a3, &a3b);
    assert_true(a1 == 0 && b1 == 0 && a3 == 0);
}

/* A demand that cannot be met yet is kept, not lost. A ghost (its session closed, its process
 * still exiting) pins 9 chunks of a 16-chunk budget; the task that runs next needs all 9 of its
 * own (one launch over its whole footprint) and gets the 7 that fit. Its DEMAND for the rest
 * finds no room and nothing of its own to give up. The shim waits for that population and does
 * not ask twice, and nobody else waits, so the scheduler must keep a deadline and populate the
 * rest once the ghost's process is gone. */
static void test_demand_kept_beside_ghost(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    uint32_t nine[] = {9};
    struct fshim *g = add_task(&w, "g", MS_PRIO_BE, 0, nine, 1);
    struct fshim *t = add_task(&w, "t", MS_PRIO_BE, 0, nine, 1);
    demand_all(&w, g);
    demand_all(&w, t);
    assert_ptr_equal(running(&w), g);
    assert_int_equal(ms_sched_task_drop(&w.s, w.now, g->task, MS_E_IO, "closed"), MS_OK);
    settle_world(&w);
    assert_ptr_equal(running(&w), t); /* beside the ghost's 9 chunks: part of its own */
    assert_false(t->regs[0].res[8]);
    int mark = w.nlog;
    demand_all(&w, t); /* running, it launches over all 9 */
    assert_int_equal(count_log(&w, mark, MS_MSG_POPULATE, t->task), 0); /* no room yet */
    assert_true(ms_sched_deadline(&w.s) != UINT64_MAX);                 /* ... but not lost */
    advance(&w, 100 * MS);
    assert_ptr_equal(running(&w), t);
    kill_task(&w, g); /* the ghost's process exits: its memory is free */
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), t);
    assert_true(count_log(&w, mark, MS_MSG_POPULATE, t->task) > 0);
    for (int k = 0; k < 9; k++)
        assert_true(t->regs[0].res[k]);
    world_fini(&w);
}

/* The same beside a ghost when the task also holds memory outside its need: the switch that
 * brings it in must give it the longest part of its need that fits (evicting its other memory),
 * not a shorter one that leaves that memory in place. Otherwise each DEMAND finds memory of its
 * own to give up, stops the task, and the next switch makes the same plan: a stop-run loop at
 * message speed until the ghost's process exits. */
static void test_no_stop_loop_beside_ghost(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    uint32_t nine[] = {9}, tregs[] = {9, 3};
    struct fshim *g = add_task(&w, "g", MS_PRIO_BE, 0, nine, 1);
    struct fshim *t = add_task(&w, "t", MS_PRIO_BE, 0, tregs, 2);
    struct ms_run extra = {t->regs[1].rid, 0, 3}, need = {t->regs[0].rid, 0, 9};
    demand_runs(&w, t, &extra, 1, 0); /* t first, with its 3 other chunks */
    demand_all(&w, g);
    advance_to_deadline(&w, 1000 * MS); /* g: 9 + t's 3 fit in 16 */
    assert_ptr_equal(running(&w), g);
    demand_runs(&w, t, &need, 1, 0);
    assert_int_equal(ms_sched_task_drop(&w.s, w.now, g->task, MS_E_IO, "closed"), MS_OK);
    settle_world(&w);
    assert_ptr_equal(running(&w), t);
    assert_int_equal(ms_sched_task_resident(&w.s, t->task), 7 * CH); /* 7 of its need */
    assert_false(t->regs[1].res[0]);
    int mark = w.nlog;
    for (int k = 0; k < 4; k++) {
        demand_runs(&w, t, &need, 1, 0);
        advance(&w, 20 * MS);
    }
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, t->task), 0);
    assert_ptr_equal(running(&w), t);
    kill_task(&w, g);
    advance_to_deadline(&w, 1000 * MS);
    assert_true(t->regs[0].res[8]);
    world_fini(&w);
}

/* A running task whose demand only its own other chunks could make room for is stopped, and
 * the switch that evicts them runs it again (a refill) for the rest of its slice; the next
 * task runs when that slice ends. Before, the STOP handed the GPU to the next task at once:
 * one-buffer Llamas under a budget below each one's weights switched about every 95 ms. With
 * under a tenth of the slice left, the switch goes to the next task as before. */
static void test_refill(void **state)
{
    (void)state;
    for (int late = 0; late < 2; late++) {
        struct world w;
        world_init(&w, late ? MS_SCHED_RR : MS_SCHED_ADAPTIVE, MS_EVICT_OPT, 8 * CH);
        uint32_t twelve[] = {12};
        struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, twelve, 1);
        struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, twelve, 1);
        struct ms_run first = {a->regs[0].rid, 0, 8}, second = {a->regs[0].rid, 8, 4};
        demand_runs(&w, a, &first, 1, 0);
        assert_ptr_equal(running(&w), a);
        demand_all(&w, b); /* b waits */
        uint64_t end = w.s.slice_end, slice = a->run_slice;
        int mark = w.nlog;
        advance(&w, late ? slice - slice / 20 : slice / 4);
        demand_runs(&w, a, &second, 1, 0); /* memory is a's: only its own chunks make room */
        assert_int_equal(count_log(&w, mark, MS_MSG_STOP, a->task), 1);
        if (late) {
            assert_ptr_equal(running(&w), b);
            assert_int_equal(w.s.refills, 0);
            world_fini(&w);
            continue;
        }
        assert_ptr_equal(running(&w), a); /* again, with the chunks it asked for */
        assert_int_equal(w.s.refills, 1);
        for (uint32_t k = 8; k < 12; k++)
            assert_true(a->regs[0].res[k]);
        assert_true(w.s.slice_end == end); /* the rest of its slice, not a new one */
        assert_true(a->run_slice == end - w.now);
        assert_false(b->running);
        advance_to_deadline(&w, 100000 * MS);
        assert_ptr_equal(running(&w), b); /* then the next task, as before */
        world_fini(&w);
    }
}

static void expect_dropped(struct world *w, struct fshim *f, int32_t err)
{
    assert_int_equal(f->drops, 1);
    assert_false(f->alive);
    /* A ghost until its process exits; after BYE nothing is left. */
    assert_int_equal(ms_sched_task_state(&w->s, f->task), err ? MS_TS_DROPPED : -1);
    if (err) {
        assert_int_equal(f->errors, 1);
        assert_int_equal(f->last_error, err);
    } else {
        assert_int_equal(f->errors, 0);
    }
}

static void test_protocol_violations(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 64 * CH);
    uint32_t two[] = {2};
    struct ms_msg m;

    struct fshim *f = add_task(&w, "unknown-region", MS_PRIO_BE, 0, two, 1);
    struct ms_run bad = {999, 0, 1};
    demand_runs(&w, f, &bad, 1, 0);
    expect_dropped(&w, f, MS_E_NOTFOUND);

    f = add_task(&w, "beyond-region", MS_PRIO_BE, 0, two, 1);
    struct ms_run beyond = {f->regs[0].rid, 1, 2};
    demand_runs(&w, f, &beyond, 1, 0);
    expect_dropped(&w, f, MS_E_PARSE);

    f = add_task(&w, "rid-order", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_ADD;
    m.region.region = f->regs[0].rid; /* reused id */
    m.region.base = 0x7000000000ull;
    m.region.size = CH;
    to_sched(&w, f, &m);
    settle_world(&w);
    expect_dropped(&w, f, MS_E_STATE);

    f = add_task(&w, "overlap", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_ADD;
    m.region.region = 1000;
    m.region.base = 0x10000000ull + CH; /* inside its first region */
    m.region.size = CH;
    to_sched(&w, f, &m);
    settle_world(&w);
    expect_dropped(&w, f, MS_E_OVERLAP);

    f = add_task(&w, "free-unknown", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_FREE;
    m.region.region = 5;
    to_sched(&w, f, &m);
    settle_world(&w);
    expect_dropped(&w, f, MS_E_NOTFOUND);

    f = add_task(&w, "wrong-type", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_RUN);
    m.run.slice_ns = 1;
    to_sched(&w, f, &m);
    settle_world(&w);
    expect_dropped(&w, f, MS_E_PARSE);

    f = add_task(&w, "beyond-credit", MS_PRIO_BE, 0, two, 1);
    struct fshim *g = add_task(&w, "hog", MS_PRIO_BE, 0, (uint32_t[]){60}, 1);
    demand_all(&w, g); /* 60 of 64 chunks */
    f->sloppy_credit = true;
    struct fshim *h = add_task(&w, "h", MS_PRIO_BE, 0, (uint32_t[]){8}, 1);
    demand_all(&w, h);
    g->hold_evict = true; /* so h's credit stays short */
    advance_to_deadline(&w, 1000 * MS);
    h->sloppy_credit = true;
    assert_int_equal(ms_sched_task_state(&w.s, h->task), MS_TS_LOADING);
    /* h populated everything although its credit did not cover it: dropped */
    ms_msg_init(&m, MS_MSG_POPULATED);
    m.progress.epoch = h->pop_epoch;
    m.progress.runs_done = 1;
    to_sched(&w, h, &m);
    settle_world(&w);
    expect_dropped(&w, h, MS_E_STATE);
    g->hold_evict = false;

    /* Progress beyond the order, on an active order. */
    struct fshim *k = add_task(&w, "k", MS_PRIO_BE, 0, (uint32_t[]){8}, 1);
    k->hold_pop = true;
    demand_all(&w, k);
    advance_to_deadline(&w, 1000 * MS);
    if (k->pop_active) {
        ms_msg_init(&m, MS_MSG_POPULATED);
        m.progress.epoch = k->pop_epoch;
        m.progress.runs_done = k->pop_n + 1;
        to_sched(&w, k, &m);
        settle_world(&w);
        expect_dropped(&w, k, MS_E_STATE);
    }

    /* BYE: dropped without an ERROR. */
    struct fshim *q = add_task(&w, "bye", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_BYE);
    to_sched(&w, q, &m);
    settle_world(&w);
    expect_dropped(&w, q, 0);

    /* A stale progress message (no order) is ignored, not fatal. */
    struct fshim *r = add_task(&w, "stale", MS_PRIO_BE, 0, two, 1);
    ms_msg_init(&m, MS_MSG_EVICTED);
    m.progress.epoch = 12345;
    m.progress.runs_done = 3;
    to_sched(&w, r, &m);
    ms_msg_init(&m, MS_MSG_STOPPED);
    to_sched(&w, r, &m);
    settle_world(&w);
    assert_true(r->alive);
    assert_int_equal(ms_sched_message(&w.s, w.now, 4242, &m), MS_E_NOTFOUND);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

static void test_timeouts(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    uint32_t four[] = {4}, six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    a->hold_stop = true;
    advance_to_deadline(&w, 1000 * MS); /* STOP to a, no answer */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STOPPING);
    advance(&w, 49 * MS);
    assert_true(a->alive);
    advance(&w, 2 * MS); /* 50 ms stop timeout: stalled (test_stalled_task), not dropped */
    assert_true(a->alive);
    assert_int_equal(a->drops, 0);
    /* a's process still holds its 4 chunks: b gets what is left, cut to fit. */
    assert_true(b->running);
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 4 * CH);
    assert_true(ms_sched_task_resident(&w.s, b->task) <= 4 * CH);
    struct ms_msg st;
    assert_int_equal(ms_sched_status(&w.s, w.now, &st), MS_OK);
    assert_int_equal(st.status.tasks[0].state, MS_TS_STALLED);
    ms_msg_free(&st);
    kill_task(&w, a); /* the process exits: its memory is free */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), -1);
    demand_all(&w, b); /* b's launch gate asks for the rest */
    assert_int_equal(ms_sched_task_resident(&w.s, b->task), 6 * CH);

    /* An order that makes no progress drops its task. */
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, c);
    b->hold_evict = true;
    advance_to_deadline(&w, 1000 * MS); /* to c: evicts b, which does not answer */
    assert_int_equal(ms_sched_task_state(&w.s, c->task), MS_TS_LOADING);
    advance(&w, 499 * MS);
    assert_true(b->alive);
    advance(&w, 2 * MS);
    expect_dropped(&w, b, MS_E_STATE);
    /* b's chunks in motion stay charged: c waits for b's process to go. */
    assert_int_equal(ms_sched_task_state(&w.s, c->task), MS_TS_LOADING);
    kill_task(&w, b);
    assert_ptr_equal(running(&w), c);
    world_fini(&w);
}

/* A switch's record counts the bytes its orders moved, its plans and the model's time for
 * them: what the daemon's slow-switch line reports. a and b (4 chunks each) share 6: the
 * switch to b evicts 2 of a's chunks and maps b's 4 new ones (no copy: not counted in); the
 * switch back evicts 2 of b's and copies a's 2 back. */
static void test_switch_record(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 6 * CH);
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    assert_ptr_equal(running(&w), a);
    uint64_t seq = w.s.last_switch.seq;
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), b);
    assert_true(w.s.last_switch.seq == seq + 1);
    assert_int_equal(w.s.last_switch.to, b->task);
    assert_true(w.s.last_switch.out == 2 * CH);
    assert_true(w.s.last_switch.in == 0);
    assert_true(w.s.last_switch.plans == 1);
    assert_true(w.s.last_switch.predicted_ns > 0);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(w.s.last_switch.from, b->task);
    assert_true(w.s.last_switch.out == 2 * CH);
    assert_true(w.s.last_switch.in == 2 * CH);
    assert_true(w.s.last_switch.plans == 1);
    assert_true(w.s.last_switch.predicted_ns > 0);
    assert_int_equal(w.s.last_switch.evict_task, b->task);
    /* Who held a switch up: b's eviction, answered 30 ms late, and a's population, which
     * waited for it. */
    advance_to_deadline(&w, 1000 * MS); /* to b */
    assert_ptr_equal(running(&w), b);
    b->hold_evict = true;
    advance_to_deadline(&w, 1000 * MS); /* back to a: b's eviction is held */
    assert_ptr_not_equal(running(&w), a);
    advance(&w, 30 * MS);
    answer_evict(&w, b);
    advance(&w, 1 * MS);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(w.s.last_switch.evict_task, b->task);
    assert_true(w.s.last_switch.evict_ns >= 30 * MS);
    assert_true(w.s.last_switch.pop_ns >= 30 * MS);
    assert_true(w.s.last_switch.ns >= w.s.last_switch.pop_ns);
    world_fini(&w);

    /* An outgoing task that never answers its STOP stalls at stop_timeout (50 ms here): the
     * switch names it, and the wait is its drain. */
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    a->hold_stop = true;
    advance_to_deadline(&w, 1000 * MS); /* STOP to a, never answered */
    advance(&w, 60 * MS);
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STALLED);
    assert_true(b->running);
    assert_int_equal(w.s.last_switch.from, a->task);
    assert_true(w.s.last_switch.stop_ns >= 50 * MS);
    world_fini(&w);
}

/*
 * A task stopped with Ctrl-Z while it holds the GPU (its STOP unanswered): past stop_timeout it
 * stalls instead of stalling everyone. Its resident memory is set aside (pinned), the others
 * run in the rest of the budget, it is not dropped and gets nothing; its orders do not time
 * out. When it answers (SIGCONT), it waits for memory like any task and runs again.
 */
static void test_stalled_task(void **state)
{
    (void)state;
    struct world w;
    uint32_t four[] = {4}, two[] = {2};
    /* Budget 8 chunks: a holds 4; b (4) fits beside them, c (2) too, so both run in the rest. */
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, two, 1);
    demand_all(&w, a);
    advance_to_deadline(&w, 10 * MS);
    assert_true(a->running);
    assert_int_equal(a->resident, 4 * CH);
    demand_all(&w, b);
    demand_all(&w, c);
    a->hold_stop = true;                /* Ctrl-Z */
    advance_to_deadline(&w, 1000 * MS); /* the slice ends: STOP to a, never answered */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STOPPING);
    int runs_a = a->runs_got;
    advance(&w, 60 * MS); /* past stop_timeout */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STALLED);
    assert_int_equal(a->drops, 0);
    assert_true(a->alive);
    assert_int_equal(a->notes, 1);
    assert_int_equal(w.s.stalls, 1);
    /* The others take turns in the 4 chunks left; a's memory is never ordered out. */
    int ran_b = 0, ran_c = 0;
    for (int i = 0; i < 40; i++) {
        advance_to_deadline(&w, 1000 * MS);
        ran_b += b->running;
        ran_c += c->running;
        if (!b->running)
            demand_all(&w, b);
        if (!c->running)
            demand_all(&w, c);
        assert_int_equal(a->resident, 4 * CH);
        assert_int_equal(a->runs_got, runs_a);
        assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STALLED);
    }
    assert_true(ran_b > 0 && ran_c > 0);
    /* Orders do not time out on it either: a stays, well past order_timeout (500 ms). */
    assert_int_equal(a->drops, 0);
    /* SIGCONT: a answers its STOP, waits for memory like any task, and runs again. */
    answer_stop(&w, a);
    assert_int_equal(a->notes, 2);
    assert_int_not_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STALLED);
    for (int i = 0; i < 40 && a->runs_got == runs_a; i++) {
        advance_to_deadline(&w, 1000 * MS);
        if (!b->running)
            demand_all(&w, b);
    }
    assert_true(a->runs_got > runs_a);
    assert_int_equal(a->drops, 0);
    world_fini(&w);
}

/* The drain's share of a switch: STOP sent .. STOPPED received, summed in stop_ns_total. */
static void test_stop_time(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    assert_true(w.s.stop_ns_total == 0);
    a->hold_stop = true;
    advance_to_deadline(&w, 1000 * MS); /* STOP to a, held */
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STOPPING);
    uint64_t sw0 = w.s.switch_ns_total;
    advance(&w, 20 * MS);
    answer_stop(&w, a);
    advance(&w, 1 * MS);
    assert_ptr_equal(running(&w), b);
    assert_true(w.s.stop_ns_total == 20 * MS);
    assert_true(w.s.switch_ns_total - sw0 >= 20 * MS);
    /* The last switch names who had to stop, who runs, and its parts. */
    assert_true(w.s.last_switch.seq == w.s.switches);
    assert_int_equal(w.s.last_switch.from, a->task);
    assert_int_equal(w.s.last_switch.to, b->task);
    assert_true(w.s.last_switch.stop_ns == 20 * MS);
    assert_true(w.s.last_switch.ns >= 20 * MS && w.s.last_switch.ns == w.s.switch_ns_total - sw0);
    world_fini(&w);
}

/* f's first command since its RUN was admitted, wait_ns after the RUN (STARTED). */
static void started(struct world *w, struct fshim *f, uint32_t epoch, uint64_t wait_ns)
{
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_STARTED);
    m.started.epoch = epoch;
    m.started.wait_ns = wait_ns;
    to_sched(w, f, &m);
    settle_world(w);
}

/*
 * The switch split (`msched status`): STOP to the incoming task's first command (its
 * STARTED) and to its working set complete. Without early_run the population completes before
 * RUN; with it, after, and the first command may come before it. One STARTED counts per RUN;
 * a repeat and a stale epoch are ignored. RUN to first command: the median and the longest.
 */
static void test_switch_split(void **state)
{
    (void)state;
    for (int early = 0; early < 2; early++) {
        struct world w;
        world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 6 * CH);
        w.s.cfg.early_run = early;
        uint32_t four[] = {4};
        struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
        struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
        demand_all(&w, a);
        demand_all(&w, b);
        assert_ptr_equal(running(&w), a);
        pop_progress(&w, a);
        settle_world(&w);
        /* a's own first RUN counts as a switch too (from nothing) */
        uint64_t c0 = w.s.complete_count;
        assert_true(c0 == 1 && w.s.first_count == 0);
        b->hold_pop = true;
        advance_to_deadline(&w, 1000 * MS); /* a's slice ends: a stops, b is populated */
        if (!early) {
            /* b's population is held: no RUN yet, nothing complete */
            assert_false(b->running);
            advance(&w, 4 * MS);
            b->hold_pop = false;
            pop_progress(&w, b);
            settle_world(&w);
        }
        assert_ptr_equal(running(&w), b);
        assert_int_equal(w.s.last_switch.to, b->task);
        uint64_t sw = w.s.last_switch.ns;
        assert_true(w.s.complete_count == c0 + (early ? 0u : 1u));
        assert_true(early ? w.s.last_switch.complete_wait
                          : w.s.last_switch.complete_ns == sw && sw >= 4 * MS);
        assert_true(w.s.first_count == 0 && w.s.last_switch.first_wait);
        /* early_run: no slice end while the working set comes in */
        assert_true(!early || w.s.slice_end == UINT64_MAX);
        advance(&w, 1 * MS);
        started(&w, b, b->run_epoch + 1, 5 * MS); /* not this RUN's: ignored */
        assert_true(w.s.first_count == 0 && w.s.run_first_n == 0);
        started(&w, b, b->run_epoch, 1 * MS);
        assert_true(w.s.first_count == 1 && w.s.last_switch.first_ns == sw + 1 * MS);
        assert_true(w.s.first_ns_total == sw + 1 * MS);
        started(&w, b, b->run_epoch, 7 * MS); /* a repeat: ignored */
        assert_true(w.s.first_count == 1 && w.s.run_first_n == 1 && w.s.run_first_max == MS);
        if (early) {
            /* the working set completes after the first command ran */
            advance(&w, 3 * MS);
            b->hold_pop = false;
            pop_progress(&w, b);
            settle_world(&w);
            assert_true(w.s.complete_count == c0 + 1 && !w.s.last_switch.complete_wait);
            assert_true(w.s.last_switch.complete_ns == sw + 4 * MS);
            /* the slice counts from the working set complete */
            assert_true(w.s.slice_end == w.now + b->run_slice);
        }
        /* The status carries the split; the median of 1, 2, 3 ms is 2 ms. */
        advance_to_deadline(&w, 1000 * MS); /* back to a */
        assert_ptr_equal(running(&w), a);
        pop_progress(&w, a);
        started(&w, a, a->run_epoch, 3 * MS);
        advance_to_deadline(&w, 1000 * MS);
        pop_progress(&w, b);
        settle_world(&w);
        assert_ptr_equal(running(&w), b);
        started(&w, b, b->run_epoch, 2 * MS);
        struct ms_msg st;
        assert_int_equal(ms_sched_status(&w.s, w.now, &st), MS_OK);
        assert_true(st.status.first_count == 3 && st.status.run_first_p50_ns == 2 * MS);
        assert_true(st.status.run_first_max_ns == 3 * MS);
        assert_true(st.status.complete_count >= c0 + 2 && st.status.first_ns_total > 0);
        ms_msg_free(&st);
        world_fini(&w);
    }
    /* Adaptive under early_run: the switch as it went (STOP to complete) stretches the slice
     * at completion, as the switch's time does at RUN without early_run. */
    struct world w;
    world_init(&w, MS_SCHED_ADAPTIVE, MS_EVICT_OPT, 6 * CH);
    w.s.cfg.early_run = true;
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    pop_progress(&w, a);
    settle_world(&w);
    b->hold_pop = true;
    advance_to_deadline(&w, 100000 * MS);
    assert_ptr_equal(running(&w), b);
    advance(&w, 300 * MS); /* a slow population: 30 slices' worth */
    b->hold_pop = false;
    pop_progress(&w, b);
    settle_world(&w);
    uint64_t cost = w.s.last_switch.complete_ns;
    assert_true(cost >= 300 * MS);
    uint64_t want = ms_adaptive_slice(SLICE, cost, w.s.cfg.slice_max_ns, w.s.cfg.switch_frac_pct);
    assert_true(want > SLICE && w.s.slice_end == w.now + want);
    world_fini(&w);
}

/* Stop a (running, its STOP held) `ms` of virtual time after its STOP: a switch that slow. */
static void slow_stop(struct world *w, struct fshim *a, uint64_t ms)
{
    a->hold_stop = true;
    advance_to_deadline(w, 1000 * MS); /* the slice ends: STOP to a, held */
    assert_int_equal(ms_sched_task_state(&w->s, a->task), MS_TS_STOPPING);
    advance(w, ms);
    answer_stop(w, a);
}

/*
 * Idle hold (sched.h): a task that goes idle while another waits keeps the GPU for as long as
 * recent switches took, and runs on if it demands again by then; past the hold it is stopped.
 * No hold with idle_hold 0 or under PRIO.
 */
static void test_idle_hold(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    w.s.cfg.slice_ns = 100 * MS;
    uint32_t four[] = {4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    assert_ptr_equal(running(&w), a);
    assert_true(w.s.switch_avg_ns == 0);
    /* Until a switch has taken time there is nothing to hold for: a yields at once. */
    idle(&w, a);
    assert_ptr_equal(running(&w), b);
    assert_true(w.s.idle_holds == 0);
    demand_all(&w, a);
    slow_stop(&w, b, 40 * MS); /* b -> a, 40 ms */
    assert_ptr_equal(running(&w), a);
    uint64_t hold = w.s.switch_avg_ns;
    assert_true(hold > 0 && hold <= 40 * MS);

    /* Idle, then busy again within the hold: a runs on, no STOP. */
    int mark = w.nlog;
    idle(&w, a);
    assert_ptr_equal(running(&w), a);
    assert_true(ms_sched_deadline(&w.s) == w.now + hold);
    advance(&w, hold / 2);
    demand_all(&w, a);
    advance(&w, hold);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    assert_true(w.s.idle_holds == 1 && w.s.idle_resumes == 1);

    /* Idle past the hold: stopped when it runs out, b runs. */
    idle(&w, a);
    uint64_t t_idle = w.now;
    assert_true(ms_sched_deadline(&w.s) == t_idle + hold);
    advance(&w, hold - 1);
    assert_ptr_equal(running(&w), a);
    advance_to_deadline(&w, 1000 * MS);
    assert_true(w.now == t_idle + hold);
    assert_ptr_equal(running(&w), b);
    assert_true(w.s.idle_holds == 2 && w.s.idle_resumes == 1);

    /* The hold never outlasts the slice. */
    demand_all(&w, a);
    uint64_t end = w.s.slice_end;
    advance(&w, end - w.now - hold / 4);
    idle(&w, b);
    assert_true(ms_sched_deadline(&w.s) == end);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);

    /* idle_hold 0: no hold. */
    w.s.cfg.idle_hold_ns = 0;
    demand_all(&w, b);
    idle(&w, a);
    assert_ptr_equal(running(&w), b);
    w.s.cfg.idle_hold_ns = 1000 * MS;

    /* PRIO: no hold either (a waiting task of higher priority must not wait). */
    assert_int_equal(ms_sched_set_policy(&w.s, w.now, MS_SCHED_PRIO), MS_OK);
    assert_true(w.s.switch_avg_ns > 0);
    demand_all(&w, a);
    idle(&w, b);
    assert_ptr_equal(running(&w), a);
    world_fini(&w);
}

/*
 * The idle hold's effect, with the real scheduler and scripted shims on a virtual clock: three
 * tasks of 6 chunks under an 8-chunk budget (every switch moves a whole task), each populate
 * taking `pop` ms, 1 s slices (as in the D runs on the H200, where switches took 70-130 ms).
 * Each task loops: `busy` ms of GPU work (done only while it holds RUN), then a CPU gap of
 * `gap` ms; 20 ms into a gap it says IDLE (as the shim does), at the gap's end it demands
 * again. Returns the loops all tasks completed in `secs` seconds.
 */
static uint64_t hold_scenario(uint64_t hold_ns, int pop, int busy, int gap, int secs)
{
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    w.s.cfg.slice_ns = 1000 * MS;
    w.s.cfg.idle_hold_ns = hold_ns;
    w.s.cfg.stop_timeout_ns = 1000 * MS; /* populations take `pop` ms: slow, not stalled */
    uint32_t six[] = {6};
    struct fshim *t[3];
    int left[3], pop_ms[3] = {0, 0, 0};
    bool in_gap[3] = {false, false, false}, said_idle[3] = {false, false, false};
    uint64_t loops = 0;
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        t[i] = add_task(&w, name, MS_PRIO_BE, 0, six, 1);
        t[i]->hold_pop = true;
        left[i] = busy;
    }
    for (int i = 0; i < 3; i++)
        demand_all(&w, t[i]);
    for (int step = 0; step < secs * 1000; step++) {
        advance(&w, MS);
        for (int i = 0; i < 3; i++) {
            struct fshim *f = t[i];
            if (f->pop_active && ++pop_ms[i] >= pop) {
                f->hold_pop = false;
                pop_progress(&w, f);
                settle_world(&w);
                f->hold_pop = true;
                pop_ms[i] = 0;
            }
            if (!in_gap[i]) {
                if (f->running && !f->pop_active && --left[i] == 0) {
                    loops++;
                    in_gap[i] = true;
                    left[i] = gap;
                }
                continue;
            }
            if (gap - left[i] == 20 && !said_idle[i]) {
                idle(&w, f);
                said_idle[i] = true;
            }
            if (--left[i] == 0) {
                in_gap[i] = false;
                left[i] = busy;
                if (said_idle[i])
                    demand_all(&w, f);
                said_idle[i] = false;
            }
        }
    }
    world_fini(&w);
    return loops;
}

static void test_idle_hold_effect(void **state)
{
    (void)state;
    /* Loops done in 60 s with the hold, at least min_pct % of those without. Short gaps
     * (resumed within the hold) save a switch each; a task whose gaps outlast a switch stops
     * being held once its gaps are known, so it loses at most the first hold. */
    static const struct {
        int pop, busy, gap, min_pct;
    } cases[] = {{100, 300, 25, 110},
                 {100, 300, 60, 100},
                 {100, 300, 400, 97},
                 {10, 300, 25, 97},
                 {100, 30, 25, 200}};
    for (size_t i = 0; i < MS_ARRAY_LEN(cases); i++) {
        uint64_t off = hold_scenario(0, cases[i].pop, cases[i].busy, cases[i].gap, 60);
        uint64_t on = hold_scenario(1000 * MS, cases[i].pop, cases[i].busy, cases[i].gap, 60);
        print_message("idle hold, %d ms populate, %d ms busy, %d ms gaps: %llu loops without, "
                      "%llu with\n",
                      cases[i].pop, cases[i].busy, cases[i].gap, (unsigned long long)off,
                      (unsigned long long)on);
        assert_true(off > 0 && on * 100 >= off * (uint64_t)cases[i].min_pct);
    }
}

static void test_limit(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 64 * CH);
    uint32_t regs[] = {4, 4};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 5 * CH, regs, 2);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, regs, 2);
    struct ms_run first = {a->regs[0].rid, 0, 4};
    demand_runs(&w, a, &first, 1, 0);
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 4 * CH);
    demand_all(&w, b);
    advance_to_deadline(&w, 1000 * MS);
    /* a now wants its other region: only 5 chunks may be resident, its old ones go. */
    struct ms_run second = {a->regs[1].rid, 0, 4};
    demand_runs(&w, a, &second, 1, 0);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);
    assert_true(a->regs[1].res[0] && a->regs[1].res[3]);
    assert_true(ms_sched_task_resident(&w.s, a->task) <= 5 * CH);
    /* A working set larger than the limit is cut to it. */
    demand_all(&w, a);
    advance_to_deadline(&w, 1000 * MS);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);
    assert_true(ms_sched_task_resident(&w.s, a->task) <= 5 * CH);
    assert_true(a->peak <= 5 * CH);
    world_fini(&w);
}

/* A task at its host memory limit keeps its memory on the device: the daemon evicts only what
 * its shim can hold on the host, runs the next task on what fits, and says so once. */
static void test_host_limit(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    w.host_limit = 2 * CH;
    uint32_t regs[] = {8};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, regs, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, regs, 1);
    demand_all(&w, a);
    advance_to_deadline(&w, 1000 * MS);
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 8 * CH);
    int notes0 = a->notes;
    demand_all(&w, b);
    for (int i = 0; i < 6; i++)
        advance_to_deadline(&w, 1000 * MS);
    /* a gave back what its host limit holds (2 chunks), never more (do_evict asserts it). */
    assert_true(a->host_bytes <= 2 * CH);
    assert_true(a->host_bytes > 0);
    assert_true(ms_sched_task_resident(&w.s, a->task) >= 6 * CH);
    assert_true(ms_sched_task_resident(&w.s, b->task) <= 2 * CH);
    assert_true(a->notes > notes0);
    assert_true(w.s.host_limited_plans > 0);
    assert_non_null(strstr(w.last_task_note, "host memory limit"));
    world_fini(&w);
}

/* Free host chunks in a shim's pool (made ahead by PREPARE, or released) are room at its host
 * limit, not held memory: a task whose pinned bytes are all pool still gives back what its limit
 * allows. */
static void test_host_limit_pool(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    w.host_limit = 2 * CH;
    uint32_t regs[] = {8};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, regs, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, regs, 1);
    a->pool = 2 * CH; /* pinned to its limit, all of it free pool */
    demand_all(&w, a);
    advance_to_deadline(&w, 1000 * MS);
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 8 * CH);
    demand_all(&w, b);
    for (int i = 0; i < 6; i++)
        advance_to_deadline(&w, 1000 * MS);
    /* a's evictions took the pool's chunks: b ran on the two chunks a gave back. */
    assert_int_equal(a->host_bytes, 2 * CH);
    assert_int_equal(a->pool, 0);
    assert_true(b->peak > 0 && b->runs_got > 0);
    world_fini(&w);
}

static void test_whole_swapping(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_WHOLE, 10 * CH);
    uint32_t regs[] = {3, 3};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, regs, 2);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, regs, 2);
    struct ms_run one = {a->regs[0].rid, 0, 1};
    demand_runs(&w, a, &one, 1, 0);
    /* Whole-process swapping populates the whole footprint, not just the working set. */
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 6 * CH);
    struct ms_run oneb = {b->regs[0].rid, 0, 1};
    demand_runs(&w, b, &oneb, 1, 0);
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), b);
    /* 6 + 6 > 10: a is evicted entirely. */
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 0);
    assert_int_equal(ms_sched_task_resident(&w.s, b->task), 6 * CH);
    world_fini(&w);
}

static void test_incremental_and_early_run(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 10 * CH);
    uint32_t eight[] = {8};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, eight, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, eight, 1);
    struct ms_run r = {a->regs[0].rid, 0, 2};
    demand_runs(&w, a, &r, 1, 0);
    demand_all(&w, b);
    advance_to_deadline(&w, 1000 * MS); /* b runs with 8, a keeps 2 */
    assert_ptr_equal(running(&w), b);
    assert_int_equal(w.s.rt.resident_bytes, 10 * CH);
    /* b (running) asks for nothing new: no migration. */
    int mark = w.nlog;
    demand_all(&w, b);
    assert_int_equal(w.nlog, mark);
    /* a's turn; it then demands more while running: populated without a switch, b's chunks
     * are the victims (a's own resident chunks are pinned). */
    advance_to_deadline(&w, 1000 * MS);
    assert_ptr_equal(running(&w), a);
    mark = w.nlog;
    struct ms_run more = {a->regs[0].rid, 0, 6};
    demand_runs(&w, a, &more, 1, 0);
    assert_ptr_equal(running(&w), a);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    assert_int_equal(count_log(&w, mark, MS_MSG_POPULATE, a->task), 1);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, b->task), 1);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, a->task), 0);
    assert_int_equal(ms_sched_task_resident(&w.s, a->task), 6 * CH);
    world_fini(&w);

    /* early_run: RUN goes out right after the POPULATE. */
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 10 * CH);
    w.s.cfg.early_run = true;
    a = add_task(&w, "a", MS_PRIO_BE, 0, eight, 1);
    a->hold_pop = true;
    mark = w.nlog;
    demand_all(&w, a);
    assert_int_equal(w.log[mark].type, MS_MSG_POPULATE);
    assert_int_equal(w.log[mark + 1].type, MS_MSG_RUN);
    assert_ptr_equal(running(&w), a);
    a->hold_pop = false;
    pop_progress(&w, a);
    settle_world(&w);
    assert_false(a->pop_active);
    world_fini(&w);
}

static void test_budget_lowered(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 16 * CH);
    uint32_t six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, six, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    advance_to_deadline(&w, 1000 * MS);
    assert_int_equal(w.s.rt.resident_bytes, 12 * CH);
    int mark0 = w.nlog;
    assert_int_equal(ms_sched_set_budget(&w.s, w.now, 8 * CH), MS_OK);
    assert_true(w.s.over_budget);
    assert_int_equal(ms_sched_set_budget(&w.s, w.now, 1), MS_E_INVAL);
    settle_world(&w); /* the running task is stopped at once; the switch brings it under */
    assert_int_equal(count_log(&w, mark0, MS_MSG_STOP, MS_TASK_NONE), 1);
    assert_false(w.s.over_budget);
    assert_true(w.s.rt.resident_bytes <= 8 * CH);
    advance_to_deadline(&w, 1000 * MS);
    /* A task alone is stopped once so that a plan can shrink it to a lower budget. */
    idle(&w, a);
    advance_to_deadline(&w, 1000 * MS);
    struct fshim *alone = running(&w);
    assert_non_null(alone);
    int mark = w.nlog;
    assert_int_equal(ms_sched_set_budget(&w.s, w.now, 4 * CH), MS_OK);
    settle_world(&w);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 1);
    assert_ptr_equal(running(&w), alone);
    assert_false(w.s.over_budget);
    assert_true(w.s.rt.resident_bytes <= 4 * CH);
    assert_int_equal(ms_sched_set_budget(&w.s, w.now, 16 * CH), MS_OK);
    demand_all(&w, a);
    assert_int_equal(ms_sched_set_slice(&w.s, w.now, 0), MS_E_INVAL);
    assert_int_equal(ms_sched_set_slice(&w.s, w.now, 3 * SLICE), MS_OK);
    assert_int_equal(ms_sched_set_policy(&w.s, w.now, MS_SCHED_POLICY_COUNT), MS_E_INVAL);
    assert_int_equal(ms_sched_set_policy(&w.s, w.now, MS_SCHED_PRIO), MS_OK);
    assert_int_equal(ms_sched_set_evict(&w.s, w.now, (enum ms_evict_policy)7), MS_E_INVAL);
    assert_int_equal(ms_sched_set_evict(&w.s, w.now, MS_EVICT_LRU), MS_OK);
    advance_to_deadline(&w, 1000 * MS);
    assert_true(running(&w)->run_slice == 3 * SLICE);
    world_fini(&w);
}

static void test_region_free_mid_order(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
    uint32_t regs[] = {2, 2}, six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, regs, 2);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, six, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    a->hold_evict = true;
    advance_to_deadline(&w, 1000 * MS); /* b needs 6: 2 of a's 4 chunks go out */
    assert_int_equal(ms_sched_task_state(&w.s, b->task), MS_TS_LOADING);
    /* a frees both its regions while the EVICT is outstanding. */
    for (int i = 0; i < 2; i++) {
        struct ms_msg m;
        ms_msg_init(&m, MS_MSG_REGION);
        m.region.op = MS_REGION_FREE;
        m.region.region = a->regs[i].rid;
        for (uint32_t c = 0; c < a->regs[i].nchunks; c++)
            if (a->regs[i].res[c])
                a->resident -= CH;
        a->regs[i].live = false;
        to_sched(&w, a, &m);
        settle_world(&w);
    }
    assert_ptr_equal(running(&w), b); /* the freed memory was b's credit */
    /* The late EVICTED for the vanished runs is harmless. */
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_EVICTED);
    m.progress.epoch = w.s.epoch;
    m.progress.runs_done = 1;
    to_sched(&w, a, &m);
    settle_world(&w);
    assert_true(a->alive);
    assert_int_equal(w.s.rt.live_regions, 1);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* Random tasks, working sets, demands, idles, deaths and budgets; invariants at every step. */
static void test_random_stress(void **state)
{
    (void)state;
    struct ms_rng rng;
    ms_rng_seed(&rng, ms_test_seed(0x5ced));
    uint64_t live = ms_alloc_live();
    uint64_t ons = 0, offs = 0;
    for (int round = 0; round < 40; round++) {
        struct world w;
        enum ms_sched_policy pol = (enum ms_sched_policy)ms_rng_below(&rng, 3);
        enum ms_evict_policy ev = (enum ms_evict_policy)ms_rng_below(&rng, 3);
        world_init(&w, pol, ev, (8 + ms_rng_below(&rng, 24)) * CH);
        w.s.cfg.early_run = ms_rng_chance(&rng, 1, 3);
        w.s.cfg.share = ms_rng_chance(&rng, 1, 2);
        /* Sometimes a host limit: do_evict asserts no shim is asked to pin more. */
        w.host_limit = ms_rng_chance(&rng, 1, 3) ? (1 + ms_rng_below(&rng, 6)) * CH : 0;
        int ntask = 2 + (int)ms_rng_below(&rng, 5);
        for (int i = 0; i < ntask; i++) {
            uint32_t regs[3];
            int nr = 1 + (int)ms_rng_below(&rng, 3);
            for (int k = 0; k < nr; k++)
                regs[k] = 1 + (uint32_t)ms_rng_below(&rng, 8);
            char name[16];
            snprintf(name, sizeof(name), "t%d", i);
            struct fshim *f = add_task(
                &w, name, ms_rng_chance(&rng, 1, 4) ? MS_PRIO_RT : MS_PRIO_BE,
                ms_rng_chance(&rng, 1, 4) ? (2 + ms_rng_below(&rng, 8)) * CH : 0, regs, nr);
            f->partial = ms_rng_chance(&rng, 1, 2);
        }
        for (int step = 0; step < 150; step++) {
            struct fshim *f = &w.sh[ms_rng_below(&rng, (uint64_t)w.nsh)];
            switch (ms_rng_below(&rng, 8)) {
            case 0:
            case 1: {
                if (!f->alive)
                    break;
                struct ms_run runs[6];
                uint32_t n = 0;
                for (int k = 0; k < f->nregs && n < 6; k++) {
                    struct freg *g = &f->regs[k];
                    if (!g->live || ms_rng_chance(&rng, 1, 3))
                        continue;
                    uint32_t first = (uint32_t)ms_rng_below(&rng, g->nchunks);
                    uint32_t cnt = 1 + (uint32_t)ms_rng_below(&rng, g->nchunks - first);
                    runs[n++] = (struct ms_run){g->rid, first, cnt};
                }
                demand_runs(&w, f, runs, n, ms_rng_chance(&rng, 1, 10) ? MS_DEMAND_WHOLE : 0);
                break;
            }
            case 2:
                if (f->alive)
                    idle(&w, f);
                break;
            case 3:
                if (f->alive && ms_rng_chance(&rng, 1, 6))
                    kill_task(&w, f);
                break;
            case 4:
                ms_sched_set_budget(&w.s, w.now, (6 + ms_rng_below(&rng, 30)) * CH);
                settle_world(&w);
                break;
            default: advance_to_deadline(&w, 50 * MS); break;
            }
        }
        ons += w.s.share_ons;
        offs += w.s.share_offs;
        world_fini(&w);
    }
    assert_true(ons > 0 && offs > 0); /* sharing began and ended along the way */
    assert_int_equal(ms_alloc_live(), live);
}

/* One allocation failure at every position of a whole scenario: no crash, no leak, and the
 * invariants hold throughout (a failed decision is retried at the next tick). */
static void test_alloc_failure_sweep(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    int completed = 0;
    for (uint64_t n = 1; n < 400; n++) {
        struct world w;
        world_init(&w, MS_SCHED_RR, MS_EVICT_OPT, 8 * CH);
        w.s.cfg.share = n % 2; /* sharing, then pressure ends it (3 x 4 chunks > 8) */
        ms_alloc_fail_after(n);
        struct ms_msg_hello h;
        memset(&h, 0, sizeof(h));
        h.version = 1;
        int ok = 0;
        for (int i = 0; i < 3; i++) {
            struct fshim *f = &w.sh[w.nsh];
            memset(f, 0, sizeof(*f));
            uint32_t id;
            if (ms_sched_hello(&w.s, w.now, &h, 0, &id) != MS_OK)
                continue;
            w.nsh++;
            f->alive = true;
            f->task = id;
            f->regs[0] =
                (struct freg){.rid = 1, .nchunks = 4, .cb = CH, .span = 4 * CH, .live = true};
            f->nregs = 1;
            struct ms_msg m;
            ms_msg_init(&m, MS_MSG_REGION);
            m.region.op = MS_REGION_ADD;
            m.region.region = 1;
            m.region.base = 1ull << 30;
            m.region.size = 4 * CH;
            m.region.chunk_bytes = CH;
            to_sched(&w, f, &m);
            settle_world(&w);
            if (!f->alive)
                continue;
            struct ms_run r = {1, 0, 4};
            ms_msg_init(&m, MS_MSG_DEMAND);
            m.demand.nnext = 1;
            m.demand.next = ms_malloc(sizeof(r));
            if (m.demand.next)
                memcpy(m.demand.next, &r, sizeof(r));
            else
                m.demand.nnext = 0;
            to_sched(&w, f, &m);
            settle_world(&w);
            ok++;
        }
        for (int k = 0; k < 12; k++)
            advance_to_deadline(&w, 20 * MS);
        bool failure_pending = ms_alloc_live() > 0 && n > 0;
        (void)failure_pending;
        ms_alloc_fail_after(0);
        for (int k = 0; k < 12; k++)
            advance_to_deadline(&w, 20 * MS);
        int ran = 0;
        for (int i = 0; i < w.nsh; i++)
            ran += w.sh[i].alive && w.sh[i].runs_got > 0;
        int alive = 0;
        for (int i = 0; i < w.nsh; i++)
            alive += w.sh[i].alive;
        if (ran == alive && alive == 3)
            completed++;
        if (getenv("SCHED_DEBUG"))
            fprintf(stderr, "n=%llu alive=%d ran=%d nsh=%d\n", (unsigned long long)n, alive, ran,
                    w.nsh);
        /* Every task still alive gets the GPU eventually, whatever failed. */
        assert_int_equal(ran, alive);
        world_fini(&w);
        assert_int_equal(ms_alloc_live(), live);
    }
    assert_true(completed > 0);
}

/* ---- sharing -------------------------------------------------------------------------------- */

static void share_world(struct world *w, enum ms_sched_policy pol, uint64_t budget)
{
    world_init(w, pol, MS_EVICT_OPT, budget);
    w->s.cfg.share = true;
}

static bool status_sharing(struct world *w)
{
    struct ms_msg st;
    assert_int_equal(ms_sched_status(&w->s, w->now, &st), MS_OK);
    assert_int_equal(ms_msg_validate(&st, NULL, 0), MS_OK);
    bool on = st.status.sharing;
    ms_msg_free(&st);
    assert_true(on == ms_sched_sharing(&w->s));
    return on;
}

/* Three tasks whose sets fit: each gets RUN after its population, nobody is stopped, no slice
 * timer runs, and a sharer's new demand is populated while it keeps RUN. */
static void test_share_fits(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    share_world(&w, MS_SCHED_RR, 16 * CH);
    uint32_t four[] = {4}, six[] = {6};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, six, 1);
    assert_true(status_sharing(&w)); /* nothing demanded: everything fits */
    assert_int_equal(w.share_notes, 1);
    assert_non_null(strstr(w.last_note, "sharing: on"));
    int mark = w.nlog;
    demand_all(&w, a);
    demand_all(&w, b);
    demand_all(&w, c);
    assert_int_equal(nrunning(&w), 3);
    for (int i = 0; i < 3; i++) {
        struct fshim *f = &w.sh[i];
        assert_int_equal(ms_sched_task_state(&w.s, f->task), MS_TS_RUNNING);
        assert_int_equal(f->runs_got, 1);
        /* POPULATE first, RUN after it completed */
        assert_true(find_log(&w, mark, MS_MSG_POPULATE, f->task) <
                    find_log(&w, mark, MS_MSG_RUN, f->task));
    }
    assert_true(w.s.rt.resident_bytes == 14 * CH);
    assert_true(ms_sched_deadline(&w.s) == UINT64_MAX); /* no slice to end */
    for (int k = 0; k < 10; k++)
        advance(&w, SLICE);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    assert_int_equal(count_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE), 0);
    assert_int_equal(nrunning(&w), 3);
    assert_true(w.s.switches == 0);
    /* An idle sharer keeps RUN; its next demand (a new region) is populated without a RUN. */
    idle(&w, a);
    assert_true(a->running);
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_RUNNING);
    struct ms_msg m;
    ms_msg_init(&m, MS_MSG_REGION);
    m.region.op = MS_REGION_ADD;
    m.region.kind = MS_RK_DEVICE;
    m.region.region = 100;
    m.region.base = 0x90000000ull;
    m.region.size = 2 * CH;
    m.region.chunk_bytes = CH;
    to_sched(&w, a, &m);
    a->regs[a->nregs++] =
        (struct freg){.rid = 100, .nchunks = 2, .cb = CH, .span = 2 * CH, .live = true};
    mark = w.nlog;
    demand_all(&w, a); /* 14 + 2 = 16 chunks: still fits */
    assert_int_equal(count_log(&w, mark, MS_MSG_POPULATE, a->task), 1);
    assert_int_equal(count_log(&w, mark, MS_MSG_RUN, MS_TASK_NONE), 0);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    assert_true(a->resident == 6 * CH);
    assert_true(status_sharing(&w));
    assert_int_equal(w.share_notes, 1);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* A fourth task whose demand does not fit ends sharing: every sharer is stopped, exclusive
 * switching takes over; when that task exits, sharing comes back. */
static void test_share_pressure(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    share_world(&w, MS_SCHED_RR, 16 * CH);
    uint32_t four[] = {4}, eight[] = {8};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    demand_all(&w, c);
    assert_int_equal(nrunning(&w), 3);
    struct fshim *d = add_task(&w, "d", MS_PRIO_BE, 0, eight, 1);
    assert_true(status_sharing(&w)); /* d has demanded nothing yet */
    int mark = w.nlog;
    demand_all(&w, d); /* 12 + 8 > 16 */
    assert_false(status_sharing(&w));
    assert_int_equal(w.share_notes, 2);
    assert_non_null(strstr(w.last_note, "sharing: off"));
    assert_non_null(strstr(w.last_note, "task 4 demands 16.0 MiB more, 8.00 MiB free"));
    /* the three STOPs went out before anything else, and all were answered */
    for (int i = 0; i < 3; i++)
        assert_int_equal(w.log[mark + i].type, MS_MSG_STOP);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 3);
    /* exclusive switching: one task at a time, evictions make room */
    assert_non_null(running(&w));
    for (int k = 0; k < 12; k++) {
        advance_to_deadline(&w, 100 * MS);
        assert_true(nrunning(&w) <= 1);
        assert_false(ms_sched_sharing(&w.s));
    }
    assert_true(d->runs_got >= 1);
    assert_true(count_log(&w, mark, MS_MSG_EVICT, MS_TASK_NONE) > 0);
    assert_true(w.s.switches >= 4);
    /* d exits: a, b and c fit again and share */
    kill_task(&w, d);
    for (int k = 0; k < 4 && nrunning(&w) < 3; k++)
        advance_to_deadline(&w, 100 * MS);
    assert_int_equal(nrunning(&w), 3);
    assert_true(status_sharing(&w));
    assert_int_equal(w.share_notes, 3);
    assert_non_null(strstr(w.last_note, "sharing: on (3 tasks"));
    assert_true(w.s.share_ons == 2 && w.s.share_offs == 1);
    mark = w.nlog;
    for (int k = 0; k < 5; k++)
        advance(&w, SLICE);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 0);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* PRIO never shares, nor do tasks of unequal weights; turning share off at run time slices. */
static void test_share_exclusive(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    uint32_t four[] = {4};
    struct world w;
    share_world(&w, MS_SCHED_PRIO, 64 * CH);
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    for (int k = 0; k < 6; k++) {
        assert_true(nrunning(&w) <= 1);
        advance_to_deadline(&w, 100 * MS);
    }
    assert_false(status_sharing(&w));
    assert_int_equal(w.share_notes, 0);
    world_fini(&w);

    share_world(&w, MS_SCHED_RR, 64 * CH);
    w.weight = 1;
    a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    w.weight = 3;
    b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    for (int k = 0; k < 6; k++) {
        assert_true(nrunning(&w) <= 1);
        advance_to_deadline(&w, 100 * MS);
    }
    assert_false(status_sharing(&w));
    assert_true(w.s.switches >= 4);
    /* b leaves: a alone has one weight, and shares (with nobody) */
    kill_task(&w, b);
    advance_to_deadline(&w, 100 * MS);
    assert_true(status_sharing(&w));
    assert_true(a->running);
    world_fini(&w);

    /* share turned off while sharing: STOPs, then slices */
    share_world(&w, MS_SCHED_RR, 64 * CH);
    a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    assert_int_equal(nrunning(&w), 2);
    int mark = w.nlog;
    ms_sched_set_share(&w.s, w.now, false);
    settle_world(&w);
    assert_int_equal(count_log(&w, mark, MS_MSG_STOP, MS_TASK_NONE), 2);
    assert_int_equal(nrunning(&w), 1);
    assert_non_null(strstr(w.last_note, "sharing: off (turned off)"));
    for (int k = 0; k < 6; k++) {
        advance_to_deadline(&w, 100 * MS);
        assert_int_equal(nrunning(&w), 1);
    }
    /* a PRIO policy set at run time ends sharing the same way */
    ms_sched_set_share(&w.s, w.now, true);
    settle_world(&w);
    for (int k = 0; k < 3 && nrunning(&w) < 2; k++)
        advance_to_deadline(&w, 100 * MS);
    assert_int_equal(nrunning(&w), 2);
    ms_sched_set_policy(&w.s, w.now, MS_SCHED_PRIO);
    settle_world(&w);
    assert_int_equal(nrunning(&w), 1);
    assert_false(status_sharing(&w));
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* Pressure from demands that move over footprints that do not fit together does not flap:
 * after sharing ended for lack of memory it comes back only once the footprints fit. */
static void test_share_no_flap(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    struct world w;
    share_world(&w, MS_SCHED_RR, 16 * CH);
    uint32_t twelve[] = {12};
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, twelve, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, twelve, 1);
    struct ms_run a1 = {a->regs[0].rid, 0, 4}, b1 = {b->regs[0].rid, 0, 4};
    demand_runs(&w, a, &a1, 1, 0);
    demand_runs(&w, b, &b1, 1, 0);
    assert_int_equal(nrunning(&w), 2);
    assert_true(ms_sched_sharing(&w.s));
    struct ms_run b2 = {b->regs[0].rid, 4, 8};
    demand_runs(&w, b, &b2, 1, 0);
    assert_true(ms_sched_sharing(&w.s)); /* 4 (a) + 12 (b) = 16: fits */
    struct ms_run a2 = {a->regs[0].rid, 4, 4};
    demand_runs(&w, a, &a2, 1, 0); /* 8 + 12 > 16 */
    assert_false(ms_sched_sharing(&w.s));
    assert_true(w.s.share_offs == 1);
    /* Turns: each demands 4 chunks at a time over its 12, the next 4 each slice. */
    for (int k = 0; k < 30; k++) {
        advance_to_deadline(&w, 100 * MS);
        assert_true(nrunning(&w) <= 1);
        struct fshim *r = running(&w);
        if (r && k % 3 == 0) {
            struct ms_run n = {r->regs[0].rid, (uint32_t)(4 * ((k / 3) % 3)), 4};
            demand_runs(&w, r, &n, 1, 0);
        }
    }
    assert_true(w.s.share_ons == 1 && w.s.share_offs == 1); /* no flapping */
    assert_false(status_sharing(&w));
    /* b exits: a's footprint (12) fits, sharing returns */
    kill_task(&w, b);
    for (int k = 0; k < 4 && !ms_sched_sharing(&w.s); k++)
        advance_to_deadline(&w, 100 * MS);
    assert_true(status_sharing(&w));
    assert_true(w.s.share_ons == 2);
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

/* A sharer that does not answer its STOP when sharing ends is stalled; the others go on. */
static void test_share_stall(void **state)
{
    (void)state;
    uint64_t live = ms_alloc_live();
    uint32_t four[] = {4}, ten[] = {10};
    struct world w;
    share_world(&w, MS_SCHED_RR, 16 * CH);
    struct fshim *a = add_task(&w, "a", MS_PRIO_BE, 0, four, 1);
    struct fshim *b = add_task(&w, "b", MS_PRIO_BE, 0, four, 1);
    demand_all(&w, a);
    demand_all(&w, b);
    a->hold_stop = true;
    struct fshim *c = add_task(&w, "c", MS_PRIO_BE, 0, ten, 1);
    demand_all(&w, c); /* 8 + 10 > 16 */
    assert_false(ms_sched_sharing(&w.s));
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STOPPING);
    for (int k = 0; k < 10; k++)
        advance_to_deadline(&w, 100 * MS);
    assert_int_equal(ms_sched_task_state(&w.s, a->task), MS_TS_STALLED);
    assert_true(w.s.stalls == 1);
    assert_true(c->runs_got >= 1); /* in the 12 chunks a does not hold */
    world_fini(&w);
    assert_int_equal(ms_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rr_order),
        cmocka_unit_test(test_alone_keeps_running),
        cmocka_unit_test(test_priority_preemption),
        cmocka_unit_test(test_opt_across_tasks),
        cmocka_unit_test(test_opt_chunk_order),
        cmocka_unit_test(test_death_mid_switch),
        cmocka_unit_test(test_adaptive_slice),
        cmocka_unit_test(test_adaptive_slice_measured),
        cmocka_unit_test(test_rr_hint),
        cmocka_unit_test(test_demand_kept_beside_ghost),
        cmocka_unit_test(test_no_stop_loop_beside_ghost),
        cmocka_unit_test(test_refill),
        cmocka_unit_test(test_protocol_violations),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_stop_time),
        cmocka_unit_test(test_stalled_task),
        cmocka_unit_test(test_switch_record),
        cmocka_unit_test(test_prepare_hint),
        cmocka_unit_test(test_idle_hold),
        cmocka_unit_test(test_idle_hold_effect),
        cmocka_unit_test(test_priority_returner_kept),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_host_limit),
        cmocka_unit_test(test_host_limit_pool),
        cmocka_unit_test(test_whole_swapping),
        cmocka_unit_test(test_incremental_and_early_run),
        cmocka_unit_test(test_switch_split),
        cmocka_unit_test(test_budget_lowered),
        cmocka_unit_test(test_region_free_mid_order),
        cmocka_unit_test(test_share_fits),
        cmocka_unit_test(test_share_pressure),
        cmocka_unit_test(test_share_exclusive),
        cmocka_unit_test(test_share_stall),
        cmocka_unit_test(test_share_no_flap),
        cmocka_unit_test(test_random_stress),
        cmocka_unit_test(test_alloc_failure_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
