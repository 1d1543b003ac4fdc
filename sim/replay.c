/*
 * replay.c - the simulator's scheduler loop (contract and model: replay.h, docs/simulator.md).
 *
 * Implementation notes
 *   Setup puts every workload region into one region table (task = workload task index) and
 *   runs the predictor once per command: a command's predicted chunks (what a shim would see),
 *   its true chunks (predicted plus hidden ranges: what the oracle checks) and the chunks it
 *   really writes (true chunks of regions that are not read-only; copy and memset
 *   destinations) are stored as id lists in one pool. The predictor is deterministic, so
 *   running it once per command gives the same sets as running it at every switch.
 *
 *   Working set of a slice (slice_ws): walk the task's loop from a cursor, adding each command's
 *   predicted chunks in first-appearance order, while the summed durations are below the slice
 *   length - the same rule the slice itself uses to stop, so a prediction never misses a
 *   command the slice runs. After one whole loop the set cannot grow, so whole extra loops are
 *   skipped arithmetically. Future timeline entries of the same task continue from the cursor
 *   where the previous entry's walk ended.
 *
 *   Chunks have a flat index (flat_base[region slot] + chunk index) for the per-chunk arrays:
 *   stamp (dedup marks, compared with an epoch that grows each use) and migrated (demand's
 *   least-recently-migrated order).
 *
 *   Counters accumulate from the start; at the end of the warm-up round a copy is taken and the
 *   result is the difference.
 */
#include "sim/replay.h"

#include "core/exec.h"
#include "core/plan.h"
#include "core/template.h"
#include "core/timeline.h"
#include "gpu/sim/gpu_sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const policy_names[MS_SIM_NPOLICIES] = {
    "ideal", "opt", "opt-serial", "lru", "whole", "demand",
};

int ms_sim_policy_parse(const char *s, enum ms_sim_policy *out)
{
    for (int i = 0; s && i < MS_SIM_NPOLICIES; i++) {
        if (strcmp(s, policy_names[i]) == 0) {
            *out = (enum ms_sim_policy)i;
            return MS_OK;
        }
    }
    return MS_E_NOTFOUND;
}

const char *ms_sim_policy_name(enum ms_sim_policy p)
{
    return (unsigned)p < MS_SIM_NPOLICIES ? policy_names[p] : "?";
}

void ms_replay_opts_default(struct ms_replay_opts *o, const struct ms_cost *cost, uint64_t budget)
{
    memset(o, 0, sizeof(*o));
    o->policy = MS_SIM_OPT;
    o->cost = cost;
    o->budget = budget;
    o->slice_ns = 200ull * 1000 * 1000;
    o->duration_ns = 30ull * 1000 * 1000 * 1000;
    o->hash_clean = true;
    o->warmup = true;
}

struct cmd_info {
    uint32_t pred, npred;   /* predicted chunks: ids[pred .. +npred) */
    uint32_t truth, ntruth; /* touched chunks (oracle) */
    uint32_t wr, nwr;       /* written chunks */
};

struct lrm {
    ms_chunk_id id;
    uint64_t stamp; /* valid while migrated[flat(id)] == stamp */
};

struct rp {
    const struct ms_workload *w;
    const struct ms_replay_opts *o;
    char *why;
    size_t whylen;
    struct ms_rtable rt;
    struct ms_gpu_sim *gpu;
    struct ms_gpu_ops ops;
    bool planned;
    uint64_t budget;
    enum ms_evict_policy evict;
    struct ms_exec_opts xo;
    size_t *flat_base; /* by region slot */
    size_t nflat;
    uint64_t *stamp;
    uint64_t epoch;
    uint64_t *migrated; /* demand: per flat chunk, stamp of its last migration in */
    uint64_t mig_clock;
    struct lrm *q; /* demand: migrations in order, oldest at qhead (stale entries skipped) */
    size_t qhead, qtail, qcap;
    struct lrm *prot; /* demand: scratch for entries the current command protects */
    size_t capprot;
    struct cmd_info **ci; /* per task, per command */
    ms_chunk_id *ids;     /* pool of chunk id lists */
    size_t nids, capids;
    size_t *cursor;            /* per task: next command to run */
    size_t *pcursor;           /* per task: scratch for predicting future entries */
    uint64_t *ran;             /* per task: commands run so far (warm-up) */
    struct ms_chunk_set *foot; /* per task: whole footprint, in region order */
    struct ms_task_sched *ts;
    struct ms_timeline tl;
    struct ms_chunk_set *ws; /* per timeline entry */
    size_t nws, capws;
    struct ms_chunk_set *lfws; /* launch fault: [cmd chunks, ws[0..nws)] (shallow) */
    struct ms_chunk_set cmdset;
    struct ms_chunk_set tmp;
    struct ms_plan plan;
    uint64_t *ready_at; /* early start: per flat chunk, when this switch's population of it ends */
    struct ms_exec_stats xs;     /* cumulative */
    struct ms_replay_result acc; /* cumulative counters (bytes from xs are added at the end) */
};

static int fail(struct rp *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, r->whylen, fmt, ap);
    va_end(ap);
    return rc;
}

static void fmt_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b >= MS_GIB)
        snprintf(buf, cap, "%.2f GiB", (double)b / (double)MS_GIB);
    else
        snprintf(buf, cap, "%.1f MiB", (double)b / (double)MS_MIB);
}

static size_t flat_of(const struct rp *r, ms_chunk_id id)
{
    return r->flat_base[MS_CHUNK_REGION(id)] + MS_CHUNK_INDEX(id);
}

static uint64_t chunk_va(struct rp *r, ms_chunk_id id)
{
    struct ms_region *rg = ms_region_get(&r->rt, MS_CHUNK_REGION(id));
    return rg->base + ms_region_chunk_offset(rg, MS_CHUNK_INDEX(id));
}

static int pool_append(struct rp *r, const struct ms_chunk_set *s, uint32_t *off, uint32_t *n)
{
    if (r->nids + s->n > UINT32_MAX)
        return MS_E_NOMEM;
    if (ms_grow((void **)&r->ids, &r->capids, r->nids + s->n, sizeof(*r->ids)))
        return MS_E_NOMEM;
    if (s->n)
        memcpy(r->ids + r->nids, s->ids, s->n * sizeof(*s->ids));
    *off = (uint32_t)r->nids;
    *n = (uint32_t)s->n;
    r->nids += s->n;
    return MS_OK;
}

static int add_range(struct rp *r, uint32_t task, uint64_t addr, uint64_t bytes,
                     struct ms_chunk_set *s)
{
    if (bytes == 0 || addr == 0)
        return MS_OK;
    struct ms_range rg = {addr, bytes};
    int64_t e = ms_predict_range(&r->rt, task, rg, s);
    return e < 0 ? (int)e : MS_OK;
}

/* Predicted, true and written chunk sets of one command. */
static int classify(struct rp *r, uint32_t task, const struct ms_wl_cmd *c, struct cmd_info *ci)
{
    const struct ms_workload *w = r->w;
    struct ms_chunk_set *s = &r->cmdset;
    int rc = MS_OK;
    ms_chunk_set_clear(s);
    ms_chunk_set_clear(&r->tmp);
    if (c->kind == MS_WL_KERNEL) {
        struct ms_launch l = {
            .task = task,
            .params = c->nparams ? w->params + c->params : NULL,
            .params_len = c->nparams,
            .layout = c->nlayout ? w->layout + c->layout : NULL,
            .nlayout = c->nlayout,
        };
        const struct ms_tmpl_kernel *k =
            r->o->templates && c->name ? ms_tmpl_find_name(r->o->templates, w->names + c->name)
                                       : NULL;
        rc = k ? ms_predict_launch_tmpl_model(&r->rt, &l, k, s) : ms_predict_launch(&r->rt, &l, s);
        rc = rc < 0 ? rc : MS_OK;
        if (!rc)
            rc = pool_append(r, s, &ci->pred, &ci->npred);
        for (uint32_t h = 0; !rc && h < c->nhidden; h++) {
            const struct ms_range *hr = &w->hidden[c->hidden + h];
            rc = add_range(r, task, hr->addr, hr->bytes, s);
        }
        if (!rc)
            rc = pool_append(r, s, &ci->truth, &ci->ntruth);
        for (size_t i = 0; !rc && i < s->n; i++) {
            /* workload region i is table slot i (see setup) */
            if (!w->regions[MS_CHUNK_REGION(s->ids[i])].ro)
                rc = ms_chunk_set_add(&r->tmp, s->ids[i]);
        }
    } else {
        uint64_t rd = 0, wr = 0;
        if (c->kind == MS_WL_MEMSET) {
            wr = c->dst;
        } else if (c->dir == MS_COPY_H2D) {
            wr = c->dst;
        } else if (c->dir == MS_COPY_D2H) {
            rd = c->src;
        } else if (c->dir == MS_COPY_D2D) {
            rd = c->src;
            wr = c->dst;
        }
        rc = add_range(r, task, wr, c->bytes, &r->tmp);
        if (!rc)
            rc = add_range(r, task, rd, c->bytes, s);
        if (!rc)
            rc = add_range(r, task, wr, c->bytes, s);
        if (!rc)
            rc = pool_append(r, s, &ci->pred, &ci->npred);
        ci->truth = ci->pred;
        ci->ntruth = ci->npred;
    }
    if (!rc) {
        ms_chunk_set_normalize(&r->tmp);
        rc = pool_append(r, &r->tmp, &ci->wr, &ci->nwr);
    }
    return rc;
}

static int setup(struct rp *r)
{
    const struct ms_workload *w = r->w;
    ms_rtable_init(&r->rt);
    ms_timeline_init(&r->tl);
    ms_plan_init(&r->plan);
    ms_chunk_set_init(&r->cmdset);
    ms_chunk_set_init(&r->tmp);
    int rc = ms_wl_validate(w, r->why, r->whylen);
    if (rc)
        return rc;
    for (size_t i = 0; i < w->nregions; i++) {
        const struct ms_wl_region *g = &w->regions[i];
        uint32_t slot;
        rc = ms_region_add(&r->rt, g->task, g->base, g->size, MS_RK_DEVICE, 0, &slot);
        if (rc)
            return fail(r, rc, "region %zu (%s of task %u): %s", i, g->name, (unsigned)g->task,
                        ms_strerror(rc));
        if (slot != i)
            return fail(r, MS_E_STATE, "region table slots are not dense");
    }
    r->flat_base = ms_calloc(w->nregions + 1, sizeof(*r->flat_base));
    if (!r->flat_base)
        return MS_E_NOMEM;
    for (size_t i = 0; i < w->nregions; i++) {
        r->flat_base[i] = r->nflat;
        r->nflat += ms_region_get(&r->rt, (uint32_t)i)->nchunks;
    }
    r->stamp = ms_calloc(r->nflat + 1, sizeof(*r->stamp));
    r->migrated = ms_calloc(r->nflat + 1, sizeof(*r->migrated));
    r->ready_at = ms_calloc(r->nflat + 1, sizeof(*r->ready_at));
    r->ci = ms_calloc(w->ntasks, sizeof(*r->ci));
    r->cursor = ms_calloc(w->ntasks, sizeof(*r->cursor));
    r->pcursor = ms_calloc(w->ntasks, sizeof(*r->pcursor));
    r->ran = ms_calloc(w->ntasks, sizeof(*r->ran));
    r->foot = ms_calloc(w->ntasks, sizeof(*r->foot));
    r->ts = ms_calloc(w->ntasks, sizeof(*r->ts));
    if (!r->stamp || !r->migrated || !r->ready_at || !r->ci || !r->cursor || !r->pcursor ||
        !r->ran || !r->foot || !r->ts)
        return MS_E_NOMEM;
    for (size_t t = 0; t < w->ntasks; t++) {
        const struct ms_wl_task *tk = &w->tasks[t];
        r->ci[t] = ms_calloc(tk->ncmds, sizeof(**r->ci));
        if (!r->ci[t])
            return MS_E_NOMEM;
        for (size_t k = 0; k < tk->ncmds; k++) {
            rc = classify(r, (uint32_t)t, &tk->cmds[k], &r->ci[t][k]);
            if (rc)
                return fail(r, rc, "predicting command %zu of task %zu: %s", k, t, ms_strerror(rc));
        }
        r->ts[t].id = (uint32_t)t;
        r->ts[t].prio = MS_PRIO_BE;
        r->ts[t].weight = 1;
        r->ts[t].runnable = true;
    }
    for (size_t i = 0; i < w->nregions; i++) {
        struct ms_region *rg = ms_region_get(&r->rt, (uint32_t)i);
        for (uint32_t k = 0; k < rg->nchunks; k++) {
            rc = ms_chunk_set_add(&r->foot[rg->task], MS_CHUNK_ID(i, k));
            if (rc)
                return rc;
        }
    }
    return MS_OK;
}

/* Every chunk resident (ideal) or on the host (everything else), without seam calls. */
static int initial_state(struct rp *r, bool resident)
{
    for (size_t i = 0; i < r->w->nregions; i++) {
        struct ms_region *rg = ms_region_get(&r->rt, (uint32_t)i);
        for (uint32_t k = 0; k < rg->nchunks; k++) {
            ms_chunk_id id = MS_CHUNK_ID(i, k);
            int rc = ms_chunk_apply(&r->rt, id, MS_CE_MAP_FRESH);
            if (!rc && !resident)
                rc = ms_chunk_apply(&r->rt, id, MS_CE_EVICT_START);
            if (!rc && !resident)
                rc = ms_chunk_apply(&r->rt, id, MS_CE_EVICT_DONE);
            if (rc)
                return fail(r, rc, "initial state: %s", ms_strerror(rc));
        }
    }
    return MS_OK;
}

static void teardown(struct rp *r)
{
    if (r->ci)
        for (size_t t = 0; t < r->w->ntasks; t++)
            ms_free(r->ci[t]);
    if (r->foot)
        for (size_t t = 0; t < r->w->ntasks; t++)
            ms_chunk_set_fini(&r->foot[t]);
    for (size_t k = 0; k < r->capws; k++)
        ms_chunk_set_fini(&r->ws[k]);
    ms_free(r->ws);
    ms_free(r->lfws);
    ms_free(r->ci);
    ms_free(r->ids);
    ms_free(r->flat_base);
    ms_free(r->stamp);
    ms_free(r->migrated);
    ms_free(r->ready_at);
    ms_free(r->q);
    ms_free(r->prot);
    ms_free(r->cursor);
    ms_free(r->pcursor);
    ms_free(r->ran);
    ms_free(r->foot);
    ms_free(r->ts);
    ms_chunk_set_fini(&r->cmdset);
    ms_chunk_set_fini(&r->tmp);
    ms_plan_fini(&r->plan);
    ms_timeline_fini(&r->tl);
    ms_rtable_fini(&r->rt);
    ms_gpu_sim_destroy(r->gpu);
}

/* ---- checks -------------------------------------------------------------------------------- */

static int check_state(struct rp *r, const char *where)
{
    if (!r->o->check)
        return MS_OK;
    char why[200];
    int bad = ms_rtable_check(&r->rt, why, sizeof(why));
    if (bad)
        return fail(r, MS_E_STATE, "%s: region table invariant I%d broken: %s", where, bad, why);
    if (r->rt.resident_bytes > r->budget)
        return fail(r, MS_E_STATE, "%s: %llu bytes resident, over the budget of %llu", where,
                    (unsigned long long)r->rt.resident_bytes, (unsigned long long)r->budget);
    return MS_OK;
}

static void note_peak(struct rp *r)
{
    if (r->rt.resident_bytes > r->acc.peak_resident)
        r->acc.peak_resident = r->rt.resident_bytes;
}

/* ---- working sets -------------------------------------------------------------------------- */

static int add_ids(struct rp *r, struct ms_chunk_set *s, uint32_t off, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        ms_chunk_id id = r->ids[off + i];
        size_t f = flat_of(r, id);
        if (r->stamp[f] == r->epoch)
            continue;
        r->stamp[f] = r->epoch;
        int rc = ms_chunk_set_add(s, id);
        if (rc)
            return rc;
    }
    return MS_OK;
}

/* Predicted chunks of the commands task t runs in one slice from *cur; *cur moves past them. */
static int slice_ws(struct rp *r, uint32_t t, size_t *cur, uint64_t slice, struct ms_chunk_set *s)
{
    const struct ms_wl_task *tk = &r->w->tasks[t];
    ms_chunk_set_clear(s);
    r->epoch++;
    uint64_t el = 0;
    size_t i = *cur, steps = 0;
    while (el < slice) {
        if (steps == tk->ncmds && tk->loop_ns > 0 && el + tk->loop_ns < slice)
            el += (slice - 1 - el) / tk->loop_ns * tk->loop_ns; /* whole loops add nothing */
        const struct cmd_info *ci = &r->ci[t][i];
        int rc = add_ids(r, s, ci->pred, ci->npred);
        if (rc)
            return rc;
        el += tk->cmds[i].dur_ns;
        i = (i + 1) % tk->ncmds;
        steps++;
    }
    *cur = i;
    return MS_OK;
}

/* Working sets of every timeline entry (the next task's whole footprint first for whole). */
static int timeline_ws(struct rp *r)
{
    size_t n = r->tl.n;
    if (n > r->capws) {
        struct ms_chunk_set *nw = ms_realloc(r->ws, n * sizeof(*nw));
        if (!nw)
            return MS_E_NOMEM;
        r->ws = nw;
        for (size_t k = r->capws; k < n; k++)
            ms_chunk_set_init(&r->ws[k]);
        r->capws = n;
        struct ms_chunk_set *lf = ms_realloc(r->lfws, (n + 1) * sizeof(*lf));
        if (!lf)
            return MS_E_NOMEM;
        r->lfws = lf;
    }
    r->nws = n;
    memcpy(r->pcursor, r->cursor, r->w->ntasks * sizeof(*r->pcursor));
    for (size_t k = 0; k < n; k++) {
        uint32_t t = r->tl.e[k].task;
        int rc = slice_ws(r, t, &r->pcursor[t], r->tl.e[k].slice_ns, &r->ws[k]);
        if (rc)
            return rc;
    }
    if (r->o->policy == MS_SIM_WHOLE) {
        struct ms_chunk_set *f = &r->foot[r->tl.e[0].task];
        ms_chunk_set_clear(&r->ws[0]);
        for (size_t i = 0; i < f->n; i++) {
            int rc = ms_chunk_set_add(&r->ws[0], f->ids[i]);
            if (rc)
                return rc;
        }
    }
    return MS_OK;
}

/* ---- migration ----------------------------------------------------------------------------- */

static int run_plan(struct rp *r, const struct ms_plan_input *in, const char *what)
{
    int rc = ms_plan_build(in, &r->plan);
    if (rc == MS_E_NOSPACE) {
        char need[32], bud[32];
        fmt_bytes(need, sizeof(need), ms_chunk_set_bytes(&in->ws[0], &r->rt));
        fmt_bytes(bud, sizeof(bud), r->budget);
        return fail(r, rc, "%s needs %s resident at once; the budget is %s", what, need, bud);
    }
    if (rc)
        return fail(r, rc, "planning %s: %s", what, ms_strerror(rc));
    if (r->o->check) {
        char why[200];
        if (ms_plan_verify(in, &r->plan, why, sizeof(why)))
            return fail(r, MS_E_STATE, "plan for %s fails verification: %s", what, why);
    }
    note_peak(r);
    rc = ms_exec_plan(&r->rt, &r->ops, r->budget, &r->plan, &r->xo, &r->xs);
    if (rc)
        return fail(r, rc, "executing the plan for %s: %s", what, ms_strerror(rc));
    note_peak(r);
    return check_state(r, what);
}

static int switch_to(struct rp *r, uint32_t t)
{
    int rc = timeline_ws(r);
    if (rc)
        return fail(r, rc, "predicting working sets: %s", ms_strerror(rc));
    struct ms_plan_input in = {
        .rt = &r->rt,
        .budget = r->budget,
        .tl = &r->tl,
        .ws = r->ws,
        .nws = r->nws,
        .policy = r->evict,
    };
    char what[96];
    if (r->o->policy == MS_SIM_WHOLE)
        snprintf(what, sizeof(what), "task %u (%s): its whole footprint", (unsigned)t,
                 r->w->tasks[t].name);
    else
        snprintf(what, sizeof(what), "task %u (%s): one %.0f ms slice", (unsigned)t,
                 r->w->tasks[t].name, (double)r->tl.e[0].slice_ns / 1e6);
    return run_plan(r, &in, what);
}

static bool ready(struct rp *r, ms_chunk_id id)
{
    struct ms_chunk *c = ms_chunk_get(&r->rt, id);
    return c && ms_chunk_state_ready((enum ms_chunk_state)c->state);
}

static int launch_fault(struct rp *r, uint32_t t, size_t k, const struct cmd_info *ci)
{
    ms_chunk_set_clear(&r->cmdset);
    for (uint32_t i = 0; i < ci->ntruth; i++) {
        int rc = ms_chunk_set_add(&r->cmdset, r->ids[ci->truth + i]);
        if (rc)
            return rc;
    }
    r->lfws[0] = r->cmdset;
    for (size_t i = 0; i < r->nws; i++)
        r->lfws[i + 1] = r->ws[i];
    struct ms_plan_input in = {
        .rt = &r->rt,
        .budget = r->budget,
        .tl = NULL,
        .ws = r->lfws,
        .nws = r->nws + 1,
        .policy = r->evict == MS_EVICT_WHOLE ? MS_EVICT_LRU : r->evict,
    };
    char what[96];
    snprintf(what, sizeof(what), "command %zu (%s) of task %u", k,
             ms_wl_cmd_name(r->w, &r->w->tasks[t].cmds[k]), (unsigned)t);
    uint64_t t0 = ms_gpu_sim_now(r->gpu);
    int rc = run_plan(r, &in, what);
    r->acc.faults++;
    r->acc.fault_ns += ms_gpu_sim_now(r->gpu) - t0;
    return rc;
}

/* Demand's least-recently-migrated order: a FIFO of migrations, since stamps only grow. */
static int lrm_push(struct rp *r, ms_chunk_id id)
{
    if (r->qhead > 0 && r->qtail == r->qcap) {
        memmove(r->q, r->q + r->qhead, (r->qtail - r->qhead) * sizeof(*r->q));
        r->qtail -= r->qhead;
        r->qhead = 0;
    }
    if (ms_grow((void **)&r->q, &r->qcap, r->qtail + 1, sizeof(*r->q)))
        return MS_E_NOMEM;
    r->migrated[flat_of(r, id)] = ++r->mig_clock;
    r->q[r->qtail].id = id;
    r->q[r->qtail].stamp = r->mig_clock;
    r->qtail++;
    return MS_OK;
}

/* The least recently migrated resident chunk the current command does not touch (stamp ==
 * epoch marks those); MS_E_NOSPACE when there is none. Skipped protected entries go back to
 * the front in their order. */
static int lrm_victim(struct rp *r, ms_chunk_id *out)
{
    size_t nprot = 0;
    int rc = MS_E_NOSPACE;
    while (r->qhead < r->qtail) {
        struct lrm e = r->q[r->qhead++];
        size_t f = flat_of(r, e.id);
        if (r->migrated[f] != e.stamp || !ready(r, e.id))
            continue; /* stale: evicted since, or migrated again later */
        if (r->stamp[f] == r->epoch) {
            if (ms_grow((void **)&r->prot, &r->capprot, nprot + 1, sizeof(*r->prot))) {
                r->qhead--;
                rc = MS_E_NOMEM;
                break;
            }
            r->prot[nprot++] = e;
            continue;
        }
        *out = e.id;
        rc = MS_OK;
        break;
    }
    r->qhead -= nprot; /* the protected entries came from just before qhead, in order */
    if (nprot)
        memcpy(r->q + r->qhead, r->prot, nprot * sizeof(*r->prot));
    return rc;
}

/* Demand paging: fault in every non-resident chunk the command touches. */
static int demand_fault(struct rp *r, uint32_t t, size_t k, const struct cmd_info *ci)
{
    const struct ms_cost *cost = r->o->cost;
    uint64_t ns = 0;
    r->epoch++;
    for (uint32_t i = 0; i < ci->ntruth; i++)
        r->stamp[flat_of(r, r->ids[ci->truth + i])] = r->epoch; /* protected */
    for (uint32_t i = 0; i < ci->ntruth; i++) {
        ms_chunk_id id = r->ids[ci->truth + i];
        struct ms_chunk *c = ms_chunk_get(&r->rt, id);
        if (ms_chunk_state_ready((enum ms_chunk_state)c->state))
            continue;
        while (r->rt.resident_bytes + c->bytes > r->budget) {
            ms_chunk_id best;
            int rc = lrm_victim(r, &best);
            if (rc == MS_E_NOSPACE) {
                char bud[32];
                fmt_bytes(bud, sizeof(bud), r->budget);
                return fail(r, rc, "command %zu of task %u touches more than the budget of %s", k,
                            (unsigned)t, bud);
            }
            if (rc)
                return rc;
            struct ms_chunk *v = ms_chunk_get(&r->rt, best);
            ns += ms_cost_um_evict_ns(cost, v->bytes);
            r->acc.bytes_out += v->bytes; /* unified memory migrates: no host copy to keep */
            rc = v->state == MS_CS_CLEAN ? ms_chunk_apply(&r->rt, best, MS_CE_DROP)
                                         : ms_chunk_apply(&r->rt, best, MS_CE_EVICT_START);
            if (!rc && v->state == MS_CS_OUT)
                rc = ms_chunk_apply(&r->rt, best, MS_CE_EVICT_DONE);
            if (rc)
                return fail(r, rc, "demand eviction: %s", ms_strerror(rc));
        }
        uint64_t nf = 0;
        ns += ms_cost_fault_ns(cost, c->bytes, &nf);
        r->acc.faults += nf;
        int rc;
        if (c->state == MS_CS_EMPTY) {
            rc = ms_chunk_apply(&r->rt, id, MS_CE_MAP_FRESH);
            r->acc.bytes_fresh += c->bytes;
        } else {
            rc = ms_chunk_apply(&r->rt, id, MS_CE_POP_START);
            if (!rc)
                rc = ms_chunk_apply(&r->rt, id, MS_CE_POP_DONE);
            r->acc.bytes_in += c->bytes;
        }
        if (rc)
            return fail(r, rc, "demand fault: %s", ms_strerror(rc));
        rc = lrm_push(r, id);
        if (rc)
            return rc;
        note_peak(r);
    }
    ms_gpu_sim_cpu(r->gpu, ns);
    r->acc.fault_ns += ns;
    return check_state(r, "demand fault");
}

/* ---- the slice ----------------------------------------------------------------------------- */

/* Run command k of task t: serve a miss, apply its writes and touches, count its work, and
 * (advance) move the clock by its duration; without advance the caller places it in time. */
static int run_command(struct rp *r, uint32_t t, size_t k, bool advance, bool *out_faulted)
{
    const struct ms_wl_cmd *c = &r->w->tasks[t].cmds[k];
    const struct cmd_info *ci = &r->ci[t][k];
    bool miss = false;
    for (uint32_t i = 0; i < ci->ntruth && !miss; i++)
        miss = !ready(r, r->ids[ci->truth + i]);
    *out_faulted = miss;
    if (miss) {
        int rc =
            r->o->policy == MS_SIM_DEMAND ? demand_fault(r, t, k, ci) : launch_fault(r, t, k, ci);
        if (rc)
            return rc;
        miss = false;
        for (uint32_t i = 0; i < ci->ntruth && !miss; i++)
            miss = !ready(r, r->ids[ci->truth + i]);
        if (miss) {
            r->acc.misses++;
            if (r->o->check)
                return fail(r, MS_E_STATE,
                            "command %zu of task %u ran with a chunk it touches "
                            "not resident",
                            k, (unsigned)t);
        }
    }
    for (uint32_t i = 0; i < ci->nwr; i++) {
        int rc = ms_gpu_sim_write(r->gpu, chunk_va(r, r->ids[ci->wr + i]));
        if (rc)
            return rc;
    }
    /* the shim marks everything a launch may write: it cannot tell reads from writes */
    for (uint32_t i = 0; i < ci->ntruth; i++) {
        ms_chunk_id id = r->ids[ci->truth + i];
        if (ready(r, id))
            ms_chunk_apply(&r->rt, id, MS_CE_TOUCH);
    }
    if (advance)
        ms_gpu_sim_advance(r->gpu, c->dur_ns);
    r->acc.compute_ns += c->dur_ns;
    r->acc.commands++;
    return check_state(r, "command");
}

/* Early start: when the switch's plan (r->plan, executed from t0 to now) brings each chunk in,
 * as the migration's bytes arrive (replay.h). */
static void mark_ready(struct rp *r, uint64_t t0)
{
    uint64_t now = ms_gpu_sim_now(r->gpu), total = 0, sofar = 0;
    for (size_t i = 0; i < r->plan.n; i++)
        if (r->plan.steps[i].op == MS_STEP_POPULATE)
            total += ms_chunk_get(&r->rt, r->plan.steps[i].chunk)->bytes;
    for (size_t i = 0; i < r->plan.n && total; i++) {
        if (r->plan.steps[i].op != MS_STEP_POPULATE)
            continue;
        ms_chunk_id id = r->plan.steps[i].chunk;
        sofar += ms_chunk_get(&r->rt, id)->bytes;
        r->ready_at[flat_of(r, id)] =
            t0 + (uint64_t)((unsigned __int128)(now - t0) * sofar / total);
    }
}

/* Early start: when command k of task t can start (all it touches in), or UINT64_MAX when a
 * chunk it touches is not resident at all (a miss: it waits for the migration to end). */
static uint64_t cmd_ready_at(struct rp *r, uint32_t t, size_t k)
{
    const struct cmd_info *ci = &r->ci[t][k];
    uint64_t at = 0;
    for (uint32_t i = 0; i < ci->ntruth; i++) {
        ms_chunk_id id = r->ids[ci->truth + i];
        if (!ready(r, id))
            return UINT64_MAX;
        at = MS_MAX(at, r->ready_at[flat_of(r, id)]);
    }
    return at;
}

/*
 * Run one slice. Once the task has run a whole loop without a fault, nothing in the table can
 * change until the slice ends (only faults move memory; every chunk the loop touches is
 * resident, TOUCHed and, if written, already has a new content version), so further whole
 * loops are skipped arithmetically: same end time, work and position as running them.
 */
static int run_slice(struct rp *r, uint32_t t, uint64_t slice, uint64_t start, uint64_t *first)
{
    const struct ms_wl_task *tk = &r->w->tasks[t];
    size_t clean = 0; /* commands run since the last fault */
    *first = UINT64_MAX;
    /* Early start (start before the clock: the switch's migration ran from start to now): while
     * the migration is in flight, commands run in virtual time v, each once its chunks are in;
     * the overlap ends when one would end after the migration or touches a chunk it misses.
     * The slice counts from the migration's end, as the daemon's does under early_run: what
     * runs before is a gain, and waiting for chunks never eats into the slice. */
    uint64_t v = start, mig_end = ms_gpu_sim_now(r->gpu);
    while (v < ms_gpu_sim_now(r->gpu)) {
        size_t k = r->cursor[t];
        uint64_t at = cmd_ready_at(r, t, k), now = ms_gpu_sim_now(r->gpu);
        if (at == UINT64_MAX)
            break; /* a miss: it is served after the migration, as without early start */
        uint64_t st = MS_MAX(v, at), end = st + tk->cmds[k].dur_ns;
        bool faulted;
        int rc = run_command(r, t, k, false, &faulted);
        if (rc)
            return rc;
        *first = MS_MIN(*first, st);
        clean++;
        r->cursor[t] = (k + 1) % tk->ncmds;
        r->ran[t]++;
        v = end;
        if (end > now)
            ms_gpu_sim_advance(r->gpu, end - now); /* it ran past the migration's end */
    }
    if (*first == UINT64_MAX)
        *first = ms_gpu_sim_now(r->gpu);
    start = mig_end;
    while (ms_gpu_sim_now(r->gpu) - start < slice) {
        uint64_t el = ms_gpu_sim_now(r->gpu) - start;
        if (clean >= tk->ncmds && el + tk->loop_ns < slice) {
            uint64_t m = (slice - 1 - el) / tk->loop_ns;
            ms_gpu_sim_advance(r->gpu, m * tk->loop_ns);
            r->acc.compute_ns += m * tk->loop_ns;
            r->acc.commands += m * tk->ncmds;
            r->ran[t] += m * tk->ncmds;
            clean = 0;
            continue;
        }
        bool faulted;
        int rc = run_command(r, t, r->cursor[t], true, &faulted);
        if (rc)
            return rc;
        clean = faulted ? 0 : clean + 1;
        r->cursor[t] = (r->cursor[t] + 1) % tk->ncmds;
        r->ran[t]++;
    }
    r->acc.slices++;
    return MS_OK;
}

/* Fail early, before any time is simulated, when a budget cannot work at all. */
static int precheck(struct rp *r)
{
    if (!r->planned && r->o->policy != MS_SIM_DEMAND)
        return MS_OK;
    char bud[32], need[32];
    fmt_bytes(bud, sizeof(bud), r->budget);
    for (size_t t = 0; t < r->w->ntasks; t++) {
        const struct ms_wl_task *tk = &r->w->tasks[t];
        for (size_t k = 0; k < tk->ncmds; k++) {
            uint64_t b = 0;
            const struct cmd_info *ci = &r->ci[t][k];
            for (uint32_t i = 0; i < ci->ntruth; i++)
                b += ms_chunk_get(&r->rt, r->ids[ci->truth + i])->bytes;
            if (b > r->budget) {
                fmt_bytes(need, sizeof(need), b);
                return fail(r, MS_E_NOSPACE,
                            "command %zu (%s) of task %zu (%s) touches %s; "
                            "the budget is %s",
                            k, ms_wl_cmd_name(r->w, &tk->cmds[k]), t, tk->name, need, bud);
            }
        }
        uint64_t b = 0;
        if (r->o->policy == MS_SIM_WHOLE) {
            b = ms_chunk_set_bytes(&r->foot[t], &r->rt);
        } else if (r->planned) {
            size_t cur = 0;
            int rc = slice_ws(r, (uint32_t)t, &cur, r->o->slice_ns, &r->cmdset);
            if (rc)
                return rc;
            b = ms_chunk_set_bytes(&r->cmdset, &r->rt);
        }
        if (b > r->budget) {
            fmt_bytes(need, sizeof(need), b);
            return fail(r, MS_E_NOSPACE,
                        "task %zu (%s) needs %s resident for %s; the budget is "
                        "%s",
                        t, tk->name, need,
                        r->o->policy == MS_SIM_WHOLE ? "whole-process swapping" : "one slice", bud);
        }
    }
    return MS_OK;
}

/* Warm-up ends once every task has had a slice and has run its whole loop at least once. */
static bool warmed_up(const struct rp *r, uint64_t slices)
{
    if (slices < r->w->ntasks)
        return false;
    for (size_t t = 0; t < r->w->ntasks; t++)
        if (r->ran[t] < r->w->tasks[t].ncmds)
            return false;
    return true;
}

static void finish(struct rp *r, struct ms_replay_result *res)
{
    res->bytes_in = r->acc.bytes_in + r->xs.bytes_in;
    res->bytes_out = r->acc.bytes_out + r->xs.bytes_out;
    res->bytes_dropped = r->acc.bytes_dropped + r->xs.bytes_dropped;
    res->bytes_fresh = r->acc.bytes_fresh + r->xs.bytes_fresh;
    res->hashes = r->acc.hashes + r->xs.hashes;
    res->faults = r->acc.faults;
    res->fault_ns = r->acc.fault_ns;
    res->switches = r->acc.switches;
    res->switch_ns = r->acc.switch_ns;
    res->first_ns = r->acc.first_ns;
    res->slices = r->acc.slices;
    res->slice_ns = r->acc.slice_ns;
    res->commands = r->acc.commands;
    res->compute_ns = r->acc.compute_ns;
    res->misses = r->acc.misses;
    res->total_ns = ms_gpu_sim_now(r->gpu);
}

static void sub(struct ms_replay_result *a, const struct ms_replay_result *b)
{
#define SUB(f) a->f -= b->f
    SUB(bytes_in);
    SUB(bytes_out);
    SUB(bytes_dropped);
    SUB(bytes_fresh);
    SUB(hashes);
    SUB(faults);
    SUB(fault_ns);
    SUB(switches);
    SUB(switch_ns);
    SUB(first_ns);
    SUB(slices);
    SUB(slice_ns);
    SUB(commands);
    SUB(compute_ns);
    SUB(misses);
    SUB(total_ns);
#undef SUB
}

int ms_replay_run(const struct ms_workload *w, const struct ms_replay_opts *o,
                  struct ms_replay_result *out, char *why, size_t whylen)
{
    char dummy[8];
    if (!why || whylen == 0) {
        why = dummy;
        whylen = sizeof(dummy);
    }
    why[0] = '\0';
    if (!w || !o || !out || !o->cost || o->slice_ns == 0 ||
        (o->slice_max_ns && (o->switch_frac_pct < 1 || o->switch_frac_pct > 100)) ||
        (o->nslices == 0 && o->duration_ns == 0) || (unsigned)o->policy >= MS_SIM_NPOLICIES) {
        snprintf(why, whylen, "bad replay options");
        return MS_E_INVAL;
    }
    struct rp r;
    memset(&r, 0, sizeof(r));
    r.w = w;
    r.o = o;
    r.why = why;
    r.whylen = whylen;
    r.planned = o->policy != MS_SIM_IDEAL && o->policy != MS_SIM_DEMAND;
    r.budget = o->policy == MS_SIM_IDEAL ? UINT64_MAX : o->budget;
    r.evict = o->policy == MS_SIM_LRU     ? MS_EVICT_LRU
              : o->policy == MS_SIM_WHOLE ? MS_EVICT_WHOLE
                                          : MS_EVICT_OPT;
    r.xo.pipelined = o->policy != MS_SIM_OPT_SERIAL;
    r.xo.hash_clean = o->hash_clean;
    memset(out, 0, sizeof(*out));
    out->policy = o->policy;
    out->budget = r.budget;

    int rc = setup(&r);
    if (!rc && r.budget == 0)
        rc = fail(&r, MS_E_INVAL, "the budget is 0 bytes");
    if (!rc)
        rc = ms_gpu_sim_create(o->cost, r.planned ? r.budget : UINT64_MAX, &r.gpu);
    if (!rc) {
        ms_gpu_sim_ops(r.gpu, &r.ops);
        rc = initial_state(&r, o->policy == MS_SIM_IDEAL);
    }
    if (!rc)
        rc = precheck(&r);
    if (rc) {
        if (!why[0])
            snprintf(why, whylen, "%s", ms_strerror(rc));
        teardown(&r);
        return rc;
    }
    note_peak(&r);

    size_t ntasks = w->ntasks;
    size_t horizon = o->horizon ? o->horizon : 2 * ntasks;
    struct ms_policy pol = {.kind = MS_POLICY_RR, .slice_ns = o->slice_ns};
    uint32_t last = MS_TASK_NONE;
    uint64_t slices = 0, warm_slices = 0;
    struct ms_replay_result base;
    memset(&base, 0, sizeof(base));
    bool measuring = !o->warmup;
    uint64_t t0 = 0;
    for (;;) {
        if (!measuring && warmed_up(&r, slices)) {
            finish(&r, &base);
            t0 = ms_gpu_sim_now(r.gpu);
            warm_slices = slices;
            measuring = true;
        }
        if (measuring) {
            uint64_t done_slices = slices - warm_slices;
            uint64_t el = ms_gpu_sim_now(r.gpu) - t0;
            if (o->nslices ? done_slices >= o->nslices : el >= o->duration_ns)
                break;
            if (o->progress)
                o->progress(o->progress_ctx, o->nslices ? (double)done_slices / o->nslices
                                                        : (double)el / o->duration_ns);
        }
        rc = ms_policy_timeline(&pol, r.ts, ntasks, last, horizon, &r.tl);
        if (rc || r.tl.n == 0) {
            fail(&r, rc ? rc : MS_E_STATE, "round-robin timeline: %s",
                 ms_strerror(rc ? rc : MS_E_STATE));
            rc = rc ? rc : MS_E_STATE;
            break;
        }
        uint32_t t = r.tl.e[0].task;
        uint64_t ts = ms_gpu_sim_now(r.gpu);
        if (r.planned) {
            rc = switch_to(&r, t);
            if (rc)
                break;
        }
        uint64_t slice = r.tl.e[0].slice_ns;
        bool early = r.planned && o->early_start;
        if (early)
            mark_ready(&r, ts);
        if (t != last) {
            uint64_t sw = ms_gpu_sim_now(r.gpu) - ts;
            r.acc.switches++;
            r.acc.switch_ns += sw;
            if (o->slice_max_ns)
                slice = ms_adaptive_slice(slice, sw, o->slice_max_ns, o->switch_frac_pct);
        }
        r.acc.slice_ns += slice;
        uint64_t first;
        rc = run_slice(&r, t, slice, early ? ts : ms_gpu_sim_now(r.gpu), &first);
        if (rc)
            break;
        if (t != last)
            r.acc.first_ns += first - ts;
        last = t;
        slices++;
    }
    if (!rc) {
        finish(&r, out);
        sub(out, &base);
        out->peak_resident = r.acc.peak_resident;
        out->throughput = out->total_ns ? (double)out->compute_ns / (double)out->total_ns : 0;
    }
    teardown(&r);
    return rc;
}
