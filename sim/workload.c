/*
 * workload.c - building workloads, their footprints, and converting them from and to traces.
 *
 * Design
 *   Builders append to per-workload pools (parameter bytes, layouts, hidden ranges, names) and
 *   refer to them by 32-bit offsets, so a command is a small fixed-size record and a task's
 *   stream is one array. Every builder either succeeds or leaves the workload as it was.
 *
 *   Trace loading (ms_wl_from_trace) walks the records once. Per trace task it keeps the list of
 *   allocations live at this point of the trace, sorted by trace address, each with the fresh
 *   simulator address it was given; pointer words and copy/memset addresses inside a live
 *   allocation are rewritten to the simulator address (same offset). Candidate words follow
 *   the predictor's rule (core/predict.h): with a layout, the 8-byte-aligned words inside
 *   parameters of at least 8 bytes; without one, every 8-byte-aligned word.
 */
#include "sim/workload.h"

#include "core/slab.h"

#include <stdio.h>
#include <string.h>

#define WL_VA_START (1ull << 40) /* first simulator address: 1 TiB, clear of 0 and small ints */

void ms_wl_init(struct ms_workload *w)
{
    memset(w, 0, sizeof(*w));
    w->next_va = WL_VA_START;
}

void ms_wl_fini(struct ms_workload *w)
{
    for (size_t i = 0; i < w->ntasks; i++)
        ms_free(w->tasks[i].cmds);
    ms_free(w->tasks);
    ms_free(w->regions);
    ms_free(w->params);
    ms_free(w->layout);
    ms_free(w->hidden);
    ms_free(w->names);
    ms_wl_init(w);
}

static void copy_name(char *dst, size_t cap, const char *src)
{
    if (!src)
        src = "";
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int ms_wl_add_task(struct ms_workload *w, const char *name, uint32_t id, int32_t prio,
                   uint32_t *out_task)
{
    if (w->ntasks >= UINT32_MAX - 1)
        return MS_E_INVAL;
    if (ms_grow((void **)&w->tasks, &w->captasks, w->ntasks + 1, sizeof(*w->tasks)))
        return MS_E_NOMEM;
    struct ms_wl_task *t = &w->tasks[w->ntasks];
    memset(t, 0, sizeof(*t));
    copy_name(t->name, sizeof(t->name), name);
    t->id = id;
    t->prio = prio;
    if (out_task)
        *out_task = (uint32_t)w->ntasks;
    w->ntasks++;
    return MS_OK;
}

int ms_wl_add_region(struct ms_workload *w, uint32_t task, uint64_t size, bool ro, const char *name,
                     uint64_t *out_base)
{
    if (task >= w->ntasks || size == 0 || size > (1ull << 50))
        return MS_E_INVAL;
    uint64_t span = MS_ROUND_UP(size, MS_GRAN) + MS_GRAN;
    if (w->next_va > UINT64_MAX - span)
        return MS_E_INVAL;
    if (ms_grow((void **)&w->regions, &w->capregions, w->nregions + 1, sizeof(*w->regions)))
        return MS_E_NOMEM;
    struct ms_wl_region *r = &w->regions[w->nregions++];
    memset(r, 0, sizeof(*r));
    r->base = w->next_va;
    r->size = size;
    r->task = task;
    r->ro = ro;
    copy_name(r->name, sizeof(r->name), name);
    w->next_va += span;
    if (out_base)
        *out_base = r->base;
    return MS_OK;
}

/* Append n bytes to a pool; *out_off gets the offset. */
static int pool_add(void **pool, size_t *len, size_t *cap, const void *src, size_t n, size_t elem,
                    uint32_t *out_off)
{
    if (*len + n > UINT32_MAX)
        return MS_E_INVAL;
    if (n > 0 && ms_grow(pool, cap, *len + n, elem))
        return MS_E_NOMEM;
    if (n > 0)
        memcpy((char *)*pool + *len * elem, src, n * elem);
    *out_off = (uint32_t)*len;
    *len += n;
    return MS_OK;
}

static int name_add(struct ms_workload *w, const char *name, uint32_t *out_off)
{
    if (w->nnames == 0) { /* offset 0 is the empty name */
        uint32_t z;
        int rc = pool_add((void **)&w->names, &w->nnames, &w->capnames, "", 1, 1, &z);
        if (rc)
            return rc;
    }
    if (!name || !*name) {
        *out_off = 0;
        return MS_OK;
    }
    return pool_add((void **)&w->names, &w->nnames, &w->capnames, name, strlen(name) + 1, 1,
                    out_off);
}

static struct ms_wl_cmd *cmd_new(struct ms_workload *w, uint32_t task)
{
    if (task >= w->ntasks)
        return NULL;
    struct ms_wl_task *t = &w->tasks[task];
    if (ms_grow((void **)&t->cmds, &t->capcmds, t->ncmds + 1, sizeof(*t->cmds)))
        return NULL;
    struct ms_wl_cmd *c = &t->cmds[t->ncmds];
    memset(c, 0, sizeof(*c));
    return c;
}

static void cmd_commit(struct ms_workload *w, uint32_t task, const struct ms_wl_cmd *c)
{
    struct ms_wl_task *t = &w->tasks[task];
    t->cmds[t->ncmds++] = *c;
    t->loop_ns += c->dur_ns;
}

int ms_wl_add_kernel_raw(struct ms_workload *w, uint32_t task, const char *name, uint64_t dur_ns,
                         const uint8_t *params, size_t nparams,
                         const struct ms_param_layout *layout, size_t nlayout)
{
    if (task >= w->ntasks || (nparams && !params) || (nlayout && !layout))
        return MS_E_INVAL;
    for (size_t i = 0; i < nlayout; i++)
        if ((uint64_t)layout[i].offset + layout[i].size > nparams)
            return MS_E_INVAL;
    struct ms_wl_cmd *slot = cmd_new(w, task);
    if (!slot)
        return MS_E_NOMEM;
    /* pools only grow; on a later failure the bytes already appended are unreferenced garbage,
     * which keeps the workload valid (nothing points at them) */
    size_t save_p = w->nparams, save_l = w->nlayout, save_n = w->nnames;
    struct ms_wl_cmd c;
    memset(&c, 0, sizeof(c));
    c.kind = MS_WL_KERNEL;
    c.dur_ns = dur_ns;
    int rc = name_add(w, name, &c.name);
    if (!rc)
        rc = pool_add((void **)&w->params, &w->nparams, &w->capparams, params, nparams, 1,
                      &c.params);
    if (!rc)
        rc = pool_add((void **)&w->layout, &w->nlayout, &w->caplayout, layout, nlayout,
                      sizeof(*layout), &c.layout);
    if (rc) {
        w->nparams = save_p;
        w->nlayout = save_l;
        w->nnames = save_n;
        return rc;
    }
    c.nparams = (uint32_t)nparams;
    c.nlayout = (uint32_t)nlayout;
    cmd_commit(w, task, &c);
    return MS_OK;
}

int ms_wl_add_kernel(struct ms_workload *w, uint32_t task, const char *name, uint64_t dur_ns,
                     const uint64_t *args, size_t nargs)
{
    uint8_t buf[MS_TRACE_MAX_PARAMS];
    if (nargs * 8 > sizeof(buf))
        return MS_E_INVAL;
    for (size_t i = 0; i < nargs; i++)
        for (int b = 0; b < 8; b++)
            buf[i * 8 + (size_t)b] = (uint8_t)(args[i] >> (8 * b)); /* little-endian, as CUDA */
    return ms_wl_add_kernel_raw(w, task, name, dur_ns, buf, nargs * 8, NULL, 0);
}

int ms_wl_add_hidden(struct ms_workload *w, uint32_t task, struct ms_range r)
{
    if (task >= w->ntasks || w->tasks[task].ncmds == 0 || r.bytes == 0)
        return MS_E_INVAL;
    struct ms_wl_cmd *c = &w->tasks[task].cmds[w->tasks[task].ncmds - 1];
    if (c->kind != MS_WL_KERNEL)
        return MS_E_INVAL;
    /* a kernel's hidden ranges must be contiguous in the pool: only the last kernel appends */
    if (c->nhidden > 0 && c->hidden + c->nhidden != w->nhidden)
        return MS_E_INVAL;
    uint32_t off;
    int rc = pool_add((void **)&w->hidden, &w->nhidden, &w->caphidden, &r, 1, sizeof(r), &off);
    if (rc)
        return rc;
    if (c->nhidden == 0)
        c->hidden = off;
    c->nhidden++;
    return MS_OK;
}

int ms_wl_add_copy(struct ms_workload *w, uint32_t task, uint64_t dur_ns, enum ms_copy_dir dir,
                   uint64_t dst, uint64_t src, uint64_t bytes)
{
    if (task >= w->ntasks || (unsigned)dir > MS_COPY_H2H)
        return MS_E_INVAL;
    struct ms_wl_cmd *slot = cmd_new(w, task);
    if (!slot)
        return MS_E_NOMEM;
    struct ms_wl_cmd c;
    memset(&c, 0, sizeof(c));
    c.kind = MS_WL_COPY;
    c.dir = (uint8_t)dir;
    c.dur_ns = dur_ns;
    c.dst = (dir == MS_COPY_H2D || dir == MS_COPY_D2D) ? dst : 0;
    c.src = (dir == MS_COPY_D2H || dir == MS_COPY_D2D) ? src : 0;
    c.bytes = bytes;
    cmd_commit(w, task, &c);
    return MS_OK;
}

int ms_wl_add_memset(struct ms_workload *w, uint32_t task, uint64_t dur_ns, uint64_t dst,
                     uint64_t bytes)
{
    if (task >= w->ntasks)
        return MS_E_INVAL;
    struct ms_wl_cmd *slot = cmd_new(w, task);
    if (!slot)
        return MS_E_NOMEM;
    struct ms_wl_cmd c;
    memset(&c, 0, sizeof(c));
    c.kind = MS_WL_MEMSET;
    c.dur_ns = dur_ns;
    c.dst = dst;
    c.bytes = bytes;
    cmd_commit(w, task, &c);
    return MS_OK;
}

const char *ms_wl_cmd_name(const struct ms_workload *w, const struct ms_wl_cmd *c)
{
    if (c->kind == MS_WL_COPY)
        return "copy";
    if (c->kind == MS_WL_MEMSET)
        return "memset";
    if (!w->names || c->name >= w->nnames)
        return "kernel";
    return w->names[c->name] ? w->names + c->name : "kernel";
}

uint64_t ms_wl_footprint(const struct ms_workload *w, uint32_t task)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < w->nregions; i++)
        if (task == UINT32_MAX || w->regions[i].task == task)
            sum += MS_ROUND_UP(w->regions[i].size, MS_GRAN);
    return sum;
}

int ms_wl_validate(const struct ms_workload *w, char *why, size_t whylen)
{
    if (w->ntasks == 0) {
        snprintf(why, whylen, "the workload has no tasks");
        return MS_E_INVAL;
    }
    for (size_t i = 0; i < w->ntasks; i++) {
        const struct ms_wl_task *t = &w->tasks[i];
        if (t->ncmds == 0) {
            snprintf(why, whylen, "task %zu (%s) has no commands", i, t->name);
            return MS_E_INVAL;
        }
        if (t->loop_ns == 0) {
            snprintf(why, whylen,
                     "task %zu (%s): every command has duration 0, so its slice "
                     "would never end",
                     i, t->name);
            return MS_E_INVAL;
        }
    }
    return MS_OK;
}

/* ---- from a trace -------------------------------------------------------------------------- */

struct live_alloc {
    uint64_t base, size; /* trace addresses */
    uint64_t sim;        /* simulator address */
};

struct trace_task {
    uint32_t id;             /* trace task id */
    uint32_t idx;            /* index in the workload */
    struct live_alloc *live; /* sorted by base, non-overlapping */
    size_t nlive, caplive;
    struct ms_slabs slabs; /* its small allocations' slabs, as the engine packs them */
};

struct trace_ctx {
    struct ms_workload *w;
    struct trace_task *tt;
    size_t ntt, captt;
};

static struct trace_task *trace_task_get(struct trace_ctx *x, uint32_t id, const char *name,
                                         int32_t prio, bool declare, int *rc)
{
    for (size_t i = 0; i < x->ntt; i++) {
        if (x->tt[i].id == id) {
            if (declare) {
                struct ms_wl_task *t = &x->w->tasks[x->tt[i].idx];
                copy_name(t->name, sizeof(t->name), name);
                t->prio = prio;
            }
            return &x->tt[i];
        }
    }
    if (ms_grow((void **)&x->tt, &x->captt, x->ntt + 1, sizeof(*x->tt))) {
        *rc = MS_E_NOMEM;
        return NULL;
    }
    char def[32];
    snprintf(def, sizeof(def), "task%u", (unsigned)id);
    uint32_t idx;
    *rc = ms_wl_add_task(x->w, declare && name && *name ? name : def, id, declare ? prio : 0, &idx);
    if (*rc)
        return NULL;
    struct trace_task *t = &x->tt[x->ntt++];
    memset(t, 0, sizeof(*t));
    t->id = id;
    t->idx = idx;
    return t;
}

/* A small device allocation of task t: a block of one of its slabs (core/slab.h: the engine
 * packs allocations of up to MS_SLAB_MAX into shared 2 MiB regions), a new slab region added when
 * none has room. *sim its simulator address. */
static int place_small(struct trace_ctx *x, struct trace_task *t, uint64_t size, uint64_t *sim)
{
    uint32_t slab;
    int rc = ms_slabs_alloc(&t->slabs, size, 0, sim, &slab);
    if (rc != MS_E_NOSPACE)
        return rc;
    uint64_t base;
    rc = ms_wl_add_region(x->w, t->idx, MS_GRAN, false, "slab", &base);
    if (!rc)
        rc = ms_slabs_add(&t->slabs, base, (uint32_t)(x->w->nregions - 1));
    return rc ? rc : ms_slabs_alloc(&t->slabs, size, 0, sim, &slab);
}

/* Index of the live allocation containing addr, or -1. */
static long live_find(const struct trace_task *t, uint64_t addr)
{
    size_t lo = 0, hi = t->nlive;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->live[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const struct live_alloc *a = &t->live[lo - 1];
    return addr - a->base < a->size ? (long)(lo - 1) : -1;
}

static uint64_t reloc(const struct trace_task *t, uint64_t addr)
{
    long i = live_find(t, addr);
    if (i < 0)
        return addr;
    return t->live[i].sim + (addr - t->live[i].base);
}

static void reloc_word(const struct trace_task *t, uint8_t *p)
{
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)p[b] << (8 * b);
    long i = live_find(t, v);
    if (i < 0)
        return;
    v = t->live[i].sim + (v - t->live[i].base);
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static int trace_record(struct trace_ctx *x, const struct ms_trace_rec *rec, uint64_t line,
                        char *why, size_t whylen)
{
    int rc = MS_OK;
    struct trace_task *t;
    switch (rec->kind) {
    case MS_TR_HEADER: return MS_OK;
    case MS_TR_TASK:
        t = trace_task_get(x, rec->task, rec->name, rec->prio, true, &rc);
        return t ? MS_OK : rc;
    case MS_TR_SYNC:
    case MS_TR_TOUCH: return MS_OK; /* a profile's observation, not a command */
    default: break;
    }
    t = trace_task_get(x, rec->task, NULL, 0, false, &rc);
    if (!t)
        return rc;
    uint32_t ti = t->idx;
    switch (rec->kind) {
    case MS_TR_ALLOC: {
        if (rec->size == 0 || rec->addr > UINT64_MAX - rec->size) {
            snprintf(why, whylen, "line %llu: alloc of %llu bytes at 0x%llx is not a valid range",
                     (unsigned long long)line, (unsigned long long)rec->size,
                     (unsigned long long)rec->addr);
            return MS_E_PARSE;
        }
        long a = live_find(t, rec->addr);
        long b = live_find(t, rec->addr + rec->size - 1);
        /* also catch a new allocation that swallows a live one */
        size_t pos = 0;
        while (pos < t->nlive && t->live[pos].base < rec->addr)
            pos++;
        bool covers = pos < t->nlive && t->live[pos].base < rec->addr + rec->size;
        if (a >= 0 || b >= 0 || covers) {
            snprintf(why, whylen,
                     "line %llu: alloc at 0x%llx overlaps a live allocation of task "
                     "%u",
                     (unsigned long long)line, (unsigned long long)rec->addr, (unsigned)rec->task);
            return MS_E_PARSE;
        }
        if (ms_grow((void **)&t->live, &t->caplive, t->nlive + 1, sizeof(*t->live)))
            return MS_E_NOMEM;
        /* host memory the device reaches is never device-resident: no region, no relocation
         * (it stays in the live list so that its free matches) */
        uint64_t sim = rec->addr;
        char rname[32];
        snprintf(rname, sizeof(rname), "0x%llx", (unsigned long long)rec->addr);
        /* what the engine packs: the cuMemAlloc family's device allocations (a trace records an
         * explicit pool's allocations as async too: packed here, not by the engine) */
        bool small =
            (rec->rkind == MS_RK_DEVICE || rec->rkind == MS_RK_ASYNC) && rec->size <= MS_SLAB_MAX;
        if (small)
            rc = place_small(x, t, rec->size, &sim);
        else if (rec->rkind != MS_RK_HOST)
            rc = ms_wl_add_region(x->w, ti, rec->size, false, rname, &sim);
        if (rc) {
            snprintf(why, whylen, "line %llu: alloc of %llu bytes: %s", (unsigned long long)line,
                     (unsigned long long)rec->size,
                     rc == MS_E_INVAL ? "too large" : ms_strerror(rc));
            return rc == MS_E_NOMEM ? rc : MS_E_PARSE;
        }
        memmove(&t->live[pos + 1], &t->live[pos], (t->nlive - pos) * sizeof(*t->live));
        t->live[pos].base = rec->addr;
        t->live[pos].size = rec->size;
        t->live[pos].sim = sim;
        t->nlive++;
        return MS_OK;
    }
    case MS_TR_FREE: {
        long i = live_find(t, rec->addr);
        if (i < 0 || t->live[i].base != rec->addr) {
            snprintf(why, whylen, "line %llu: free of 0x%llx, which task %u has not allocated",
                     (unsigned long long)line, (unsigned long long)rec->addr, (unsigned)rec->task);
            return MS_E_PARSE;
        }
        uint32_t slab;
        bool empty;
        /* a small allocation's block is free for the next one (its slab stays a region) */
        if (ms_slabs_find(&t->slabs, t->live[i].sim) >= 0 &&
            ms_slabs_free(&t->slabs, t->live[i].sim, &slab, &empty) != MS_OK) {
            snprintf(why, whylen, "line %llu: free of 0x%llx: no such block",
                     (unsigned long long)line, (unsigned long long)rec->addr);
            return MS_E_STATE;
        }
        memmove(&t->live[i], &t->live[i + 1], (t->nlive - (size_t)i - 1) * sizeof(*t->live));
        t->nlive--;
        return MS_OK;
    }
    case MS_TR_KERNEL: {
        uint8_t buf[MS_TRACE_MAX_PARAMS];
        size_t n = rec->params_len;
        if (n > sizeof(buf)) {
            snprintf(why, whylen, "line %llu: %zu parameter bytes (at most %u)",
                     (unsigned long long)line, n, MS_TRACE_MAX_PARAMS);
            return MS_E_PARSE;
        }
        if (n)
            memcpy(buf, rec->params, n);
        if (rec->layout && rec->nlayout > 0) {
            for (size_t i = 0; i < rec->nlayout; i++) {
                const struct ms_param_layout *l = &rec->layout[i];
                if ((uint64_t)l->offset + l->size > n) {
                    snprintf(why, whylen,
                             "line %llu: parameter %zu lies outside the %zu "
                             "parameter bytes",
                             (unsigned long long)line, i, n);
                    return MS_E_PARSE;
                }
                if (l->size < 8)
                    continue;
                size_t o = MS_ROUND_UP((size_t)l->offset, 8);
                for (; o + 8 <= (size_t)l->offset + l->size; o += 8)
                    reloc_word(t, buf + o);
            }
        } else {
            for (size_t o = 0; o + 8 <= n; o += 8)
                reloc_word(t, buf + o);
        }
        if (rec->layout && rec->nlayout == 0)
            n = 0; /* "layout=": the kernel has no parameters, nothing to scan */
        return ms_wl_add_kernel_raw(x->w, ti, rec->name, rec->dur_ns, buf, n, rec->layout,
                                    rec->layout ? rec->nlayout : 0);
    }
    case MS_TR_COPY: {
        uint64_t dst = rec->dst, src = rec->src;
        if (rec->dir == MS_COPY_H2D || rec->dir == MS_COPY_D2D)
            dst = reloc(t, dst);
        if (rec->dir == MS_COPY_D2H || rec->dir == MS_COPY_D2D)
            src = reloc(t, src);
        return ms_wl_add_copy(x->w, ti, rec->dur_ns, rec->dir, dst, src, rec->size);
    }
    case MS_TR_MEMSET:
        return ms_wl_add_memset(x->w, ti, rec->dur_ns, reloc(t, rec->addr), rec->size);
    default:
        snprintf(why, whylen, "line %llu: unexpected record kind %d", (unsigned long long)line,
                 (int)rec->kind);
        return MS_E_PARSE;
    }
}

/* Drop tasks without commands (their regions go too), keeping task indices dense. */
static void drop_idle_tasks(struct ms_workload *w)
{
    uint32_t *map = ms_calloc(w->ntasks ? w->ntasks : 1, sizeof(*map));
    if (!map)
        return; /* keep them: validate() reports the idle task instead */
    size_t nt = 0;
    for (size_t i = 0; i < w->ntasks; i++) {
        if (w->tasks[i].ncmds == 0) {
            ms_free(w->tasks[i].cmds);
            map[i] = UINT32_MAX;
            continue;
        }
        map[i] = (uint32_t)nt;
        w->tasks[nt++] = w->tasks[i];
    }
    w->ntasks = nt;
    size_t nr = 0;
    for (size_t i = 0; i < w->nregions; i++) {
        uint32_t m = map[w->regions[i].task];
        if (m == UINT32_MAX)
            continue;
        w->regions[nr] = w->regions[i];
        w->regions[nr++].task = m;
    }
    w->nregions = nr;
    ms_free(map);
}

int ms_wl_from_trace(const char *text, size_t len, const char *name, struct ms_workload *w,
                     char *why, size_t whylen)
{
    struct ms_trace_reader rd;
    struct trace_ctx x;
    memset(&x, 0, sizeof(x));
    x.w = w;
    ms_trace_reader_init(&rd);
    copy_name(w->name, sizeof(w->name), name ? name : "trace");
    int rc = MS_OK;
    size_t pos = 0;
    uint64_t records = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        struct ms_trace_rec rec;
        int r = ms_trace_parse_line(&rd, text + pos, end - pos, &rec);
        if (r < 0) {
            snprintf(why, whylen, "%s", rd.err[0] ? rd.err : ms_strerror(r));
            rc = r;
            break;
        }
        if (r == 1) {
            records++;
            rc = trace_record(&x, &rec, rd.line, why, whylen);
            if (rc) {
                if (rc == MS_E_NOMEM)
                    snprintf(why, whylen, "out of memory at line %llu",
                             (unsigned long long)rd.line);
                break;
            }
        }
        pos = nl ? end + 1 : len;
    }
    if (!rc && !rd.have_header) {
        snprintf(why, whylen, "no \"msched-trace\" header: not a trace");
        rc = MS_E_PARSE;
    }
    for (size_t i = 0; i < x.ntt; i++) {
        ms_free(x.tt[i].live);
        ms_slabs_fini(&x.tt[i].slabs);
    }
    ms_free(x.tt);
    ms_trace_reader_fini(&rd);
    if (rc)
        return rc;
    drop_idle_tasks(w);
    if (w->ntasks == 0) {
        snprintf(why, whylen, "the trace has no commands to replay (%llu records)",
                 (unsigned long long)records);
        return MS_E_INVAL;
    }
    snprintf(w->desc, sizeof(w->desc), "trace %s: %zu task%s, %zu regions", w->name, w->ntasks,
             w->ntasks == 1 ? "" : "s", w->nregions);
    return ms_wl_validate(w, why, whylen);
}

/* ---- to a trace ---------------------------------------------------------------------------- */

struct textbuf {
    char *p;
    size_t n, cap;
};

static int emit(struct textbuf *b, const struct ms_trace_rec *rec)
{
    for (;;) {
        if (ms_grow((void **)&b->p, &b->cap, b->n + 4096, 1))
            return MS_E_NOMEM;
        int r = ms_trace_format(rec, b->p + b->n, b->cap - b->n);
        if (r >= 0) {
            b->n += (size_t)r;
            return MS_OK;
        }
        if (r != MS_E_NOSPACE)
            return r;
        if (ms_grow((void **)&b->p, &b->cap, b->cap * 2, 1))
            return MS_E_NOMEM;
        if (b->cap - b->n > 2 * MS_TRACE_MAX_LINE)
            return MS_E_INVAL;
    }
}

int ms_wl_to_trace(const struct ms_workload *w, char **out, size_t *out_len)
{
    struct textbuf b = {0};
    struct ms_trace_rec rec;
    memset(&rec, 0, sizeof(rec));
    rec.kind = MS_TR_HEADER;
    rec.version = MS_TRACE_VERSION;
    int rc = emit(&b, &rec);
    for (size_t i = 0; !rc && i < w->ntasks; i++) {
        memset(&rec, 0, sizeof(rec));
        rec.kind = MS_TR_TASK;
        rec.task = (uint32_t)i;
        rec.prio = w->tasks[i].prio;
        rec.name = w->tasks[i].name[0] ? w->tasks[i].name : "task";
        rc = emit(&b, &rec);
    }
    for (size_t i = 0; !rc && i < w->nregions; i++) {
        memset(&rec, 0, sizeof(rec));
        rec.kind = MS_TR_ALLOC;
        rec.task = w->regions[i].task;
        rec.addr = w->regions[i].base;
        rec.size = w->regions[i].size;
        rec.rkind = MS_RK_DEVICE;
        rc = emit(&b, &rec);
    }
    for (size_t i = 0; !rc && i < w->ntasks; i++) {
        const struct ms_wl_task *t = &w->tasks[i];
        for (size_t k = 0; !rc && k < t->ncmds; k++) {
            const struct ms_wl_cmd *c = &t->cmds[k];
            memset(&rec, 0, sizeof(rec));
            rec.task = (uint32_t)i;
            rec.dur_ns = c->dur_ns;
            if (c->kind == MS_WL_KERNEL) {
                rec.kind = MS_TR_KERNEL;
                rec.name = ms_wl_cmd_name(w, c);
                for (int d = 0; d < 3; d++)
                    rec.grid[d] = rec.block[d] = 1;
                rec.params = c->nparams ? w->params + c->params : NULL;
                rec.params_len = c->nparams;
                rec.layout = c->nlayout ? w->layout + c->layout : NULL;
                rec.nlayout = c->nlayout;
            } else if (c->kind == MS_WL_COPY) {
                rec.kind = MS_TR_COPY;
                rec.dir = (enum ms_copy_dir)c->dir;
                rec.dst = c->dst;
                rec.src = c->src;
                rec.size = c->bytes;
            } else {
                rec.kind = MS_TR_MEMSET;
                rec.addr = c->dst;
                rec.size = c->bytes;
            }
            rc = emit(&b, &rec);
        }
    }
    if (rc) {
        ms_free(b.p);
        return rc;
    }
    if (ms_grow((void **)&b.p, &b.cap, b.n + 1, 1)) {
        ms_free(b.p);
        return MS_E_NOMEM;
    }
    b.p[b.n] = '\0';
    *out = b.p;
    *out_len = b.n;
    return MS_OK;
}
