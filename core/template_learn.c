/*
 * template_learn.c - learning argument templates from a profile (a version-2 trace): launches
 * and their touches to observations, observations into the store (contract: template.h; layout:
 * template_int.h; the fitting itself is template_fit.c), and evaluating a store against a
 * profile's touches (ms_tmpl_accuracy: the same walk, launches evaluated instead of learned).
 *
 * Design
 *   Learning walks the trace once. A prof=seen kernel record opens the task's pending launch: its
 *   name, module, parameter bytes, which 8-byte words are pointers into the task's regions (as of
 *   the launch), and its integer arguments. Touch records of the task add to it. The task's next
 *   kernel record, or the end of the trace, closes it: per pointer word (and per word a touch
 *   names), its touches are made relative to the pointer value, sorted and merged, and summarized
 *   into one observation (span, bytes, and count/len/stride when the blocks are regular). The
 *   trace reader keeps no per-task state, so the rule "a touch follows a prof=seen kernel of its
 *   task" is checked here. Regions are a sorted (task, base) array of the trace's live allocations.
 *
 * Invariants
 *   - an observation passes the store reader's checks (template_text.c): spans above 2^62 make
 *     the kernel unsafe instead, more than MS_LEARN_MAX_BLOCKS regular blocks count as irregular;
 *   - every heap byte goes through ms_malloc/ms_free and is freed before ms_tmpl_learn_trace
 *     returns, whatever it returns.
 */
#include "template_int.h"

#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Regular blocks one observation may name (the store reader's bound). */
#define MS_LEARN_MAX_BLOCKS (1u << 20)

struct treg {
    uint32_t task;
    uint64_t base, size;
};

struct ttouch {
    int32_t arg;
    uint8_t mode;
    uint64_t addr, size;
};

struct pend {
    uint32_t task;
    bool active;
    char name[MS_TRACE_MAX_NAME];
    uint64_t mod;
    uint8_t params[MS_TRACE_MAX_PARAMS];
    size_t plen;
    uint16_t ptr[MS_TRACE_MAX_PARAMS / 8]; /* offsets of pointer words */
    size_t nptr;
    struct ms__tmpl_ival ints[MS_TMPL_MAX_INTS];
    uint32_t nint;
    struct ttouch *t;
    size_t nt, capt;
    struct ms_param_layout layout[MS_TRACE_MAX_LAYOUT]; /* the record's (evaluation only) */
    size_t nlayout;
};

struct learn {
    struct ms_tmpl_store *s;          /* learning into it, or */
    const struct ms_tmpl_store *eval; /* evaluating it against the touches (acc) */
    struct ms_tmpl_acc *acc;
    bool by_kernel; /* also count per kernel name in kv (sorted by name) */
    struct ms_tmpl_acc_kernel *kv;
    size_t nk, capk;
    struct ms_range *ra, *rb, *rc; /* evaluation scratch: touched, allocations, templates */
    size_t capa, capb, capc;
    struct treg *reg;
    size_t nreg, capreg;
    struct pend **p;
    size_t np, capp;
};

static int treg_cmp(uint32_t task, uint64_t base, const struct treg *r)
{
    if (task != r->task)
        return task < r->task ? -1 : 1;
    return base < r->base ? -1 : base > r->base;
}

/* Index of the first region > (task, addr). */
static size_t treg_upper(const struct learn *L, uint32_t task, uint64_t addr)
{
    size_t lo = 0, hi = L->nreg;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (treg_cmp(task, addr, &L->reg[mid]) >= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool is_ptr(const struct learn *L, uint32_t task, uint64_t v)
{
    if (v == 0)
        return false;
    size_t i = treg_upper(L, task, v);
    if (i == 0)
        return false;
    const struct treg *r = &L->reg[i - 1];
    return r->task == task && v - r->base < r->size;
}

static int64_t word(const uint8_t *p, size_t off, size_t size)
{
    if (size == 4) {
        int32_t v;
        memcpy(&v, p + off, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p + off, 8);
    return v;
}

static void add_int(struct pend *pd, uint32_t off, uint8_t size)
{
    if (pd->nint < MS_TMPL_MAX_INTS)
        pd->ints[pd->nint++] =
            (struct ms__tmpl_ival){(uint16_t)off, size, word(pd->params, off, size)};
}

/* Classify the launch's words: pointers (by the rules of ms_predict_launch) and integers (a
 * 4- or 8-byte parameter; inside a larger one, every aligned word that is not a pointer). */
static void classify(const struct learn *L, struct pend *pd, const struct ms_trace_rec *rec)
{
    pd->nptr = 0;
    pd->nint = 0;
    if (rec->nlayout == 0) {
        for (size_t w = 0; w + 4 <= pd->plen; w += 4) {
            bool ptr8 = w % 8 == 0 && w + 8 <= pd->plen &&
                        is_ptr(L, rec->task, (uint64_t)word(pd->params, w, 8));
            if (ptr8) {
                pd->ptr[pd->nptr++] = (uint16_t)w;
                w += 4; /* both halves belong to the pointer */
                continue;
            }
            add_int(pd, (uint32_t)w, 4);
            if (w % 8 == 0 && w + 8 <= pd->plen)
                add_int(pd, (uint32_t)w, 8);
        }
        return;
    }
    for (size_t i = 0; i < rec->nlayout; i++) {
        const struct ms_param_layout *e = &rec->layout[i];
        size_t end = (size_t)e->offset + e->size;
        if (end > pd->plen)
            continue;
        if (e->size > 8) {
            /* a struct (cuBLAS-style kernels take their sizes and pointers in one): its
             * pointer words, and its other aligned words as integers, as without a layout */
            for (size_t w = MS_ROUND_UP((size_t)e->offset, 4); w + 4 <= end; w += 4) {
                if (w % 8 == 0 && w + 8 <= end &&
                    is_ptr(L, rec->task, (uint64_t)word(pd->params, w, 8))) {
                    pd->ptr[pd->nptr++] = (uint16_t)w;
                    w += 4;
                    continue;
                }
                add_int(pd, (uint32_t)w, 4);
                if (w % 8 == 0 && w + 8 <= end)
                    add_int(pd, (uint32_t)w, 8);
            }
            continue;
        }
        bool any = false;
        if (e->size == 8 && e->offset % 8 == 0 &&
            is_ptr(L, rec->task, (uint64_t)word(pd->params, e->offset, 8))) {
            pd->ptr[pd->nptr++] = (uint16_t)e->offset;
            any = true;
        }
        if (!any && (e->size == 4 || e->size == 8) && e->offset % 4 == 0)
            add_int(pd, e->offset, (uint8_t)e->size);
    }
}

static struct pend *pend_of(struct learn *L, uint32_t task, bool create, int *rc)
{
    for (size_t i = 0; i < L->np; i++)
        if (L->p[i]->task == task)
            return L->p[i];
    if (!create)
        return NULL;
    if (ms_grow((void **)&L->p, &L->capp, L->np + 1, sizeof *L->p)) {
        *rc = MS_E_NOMEM;
        return NULL;
    }
    struct pend *pd = ms_calloc(1, sizeof *pd);
    if (!pd) {
        *rc = MS_E_NOMEM;
        return NULL;
    }
    pd->task = task;
    L->p[L->np++] = pd;
    return pd;
}

static int cmp_touch(const void *x, const void *y)
{
    const struct ttouch *a = x, *b = y;
    if (a->arg != b->arg)
        return a->arg < b->arg ? -1 : 1;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* Summarize touches t[0..n) of one argument (sorted by addr) relative to ptr. False when a
 * range cannot be expressed relative to ptr in 64 signed bits. */
static bool summarize(const struct ttouch *t, size_t n, uint64_t ptr, struct ms__tmpl_obs *o)
{
    int64_t bs = 0, be = 0, prev_start = 0;
    bool regular = true;
    o->lo = o->hi = 0;
    o->touched = o->count = o->len = 0;
    o->stride = 0;
    uint64_t nblk = 0;
    for (size_t i = 0; i <= n; i++) {
        int64_t s = 0, e = 0;
        if (i < n) {
            uint64_t d = t[i].addr - ptr; /* two's complement difference */
            s = (int64_t)d;
            bool neg = t[i].addr < ptr;
            if ((neg && s >= 0) || (!neg && s < 0) ||
                __builtin_add_overflow(s, (int64_t)t[i].size, &e))
                return false;
            if (nblk > 0 && s <= be) { /* overlaps or touches the open block */
                be = MS_MAX(be, e);
                continue;
            }
        }
        if (nblk > 0) { /* close the open block [bs, be) */
            uint64_t len = (uint64_t)(be - bs);
            o->touched += len;
            o->hi = be;
            if (nblk == 1) {
                o->lo = bs;
                o->len = len;
            } else {
                if (len != o->len)
                    regular = false;
                if (nblk == 2)
                    o->stride = bs - prev_start;
                else if (bs - prev_start != o->stride)
                    regular = false;
            }
            prev_start = bs;
        }
        if (i < n) {
            bs = s;
            be = e;
            nblk++;
        }
    }
    if ((uint64_t)o->hi - (uint64_t)o->lo > (1ull << 62))
        return false; /* a span no 64-bit rule arithmetic should meet */
    if (nblk > MS_LEARN_MAX_BLOCKS)
        regular = false; /* verification walks the blocks: bound it */
    o->count = regular ? nblk : 0;
    if (!regular) {
        o->len = 0;
        o->stride = 0;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Evaluation: predicted bytes against touched bytes (ms_tmpl_accuracy)                         */

static int range_cmp(const void *x, const void *y)
{
    const struct ms_range *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* Sort and merge v[0..n) in place; returns the new count. */
static size_t merge(struct ms_range *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, range_cmp);
    size_t m = 0;
    for (size_t i = 1; i < n; i++) {
        uint64_t end = v[m].addr + v[m].bytes;
        if (v[i].addr <= end) {
            uint64_t e2 = v[i].addr + v[i].bytes;
            if (e2 > end)
                v[m].bytes = e2 - v[m].addr;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

static uint64_t total(const struct ms_range *v, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += v[i].bytes;
    return t;
}

/* Bytes of merged list a that merged list b covers. */
static uint64_t overlap(const struct ms_range *a, size_t na, const struct ms_range *b, size_t nb)
{
    uint64_t t = 0;
    size_t j = 0;
    for (size_t i = 0; i < na; i++) {
        uint64_t a0 = a[i].addr, a1 = a[i].addr + a[i].bytes;
        while (j < nb && b[j].addr + b[j].bytes <= a0)
            j++;
        for (size_t k = j; k < nb && b[k].addr < a1; k++) {
            uint64_t lo = MS_MAX(a0, b[k].addr), hi = MS_MIN(a1, b[k].addr + b[k].bytes);
            if (hi > lo)
                t += hi - lo;
        }
    }
    return t;
}

static int push(struct ms_range **v, size_t *cap, size_t *n, struct ms_range r)
{
    if (r.bytes == 0)
        return MS_OK;
    if (ms_grow((void **)v, cap, *n + 1, sizeof **v))
        return MS_E_NOMEM;
    (*v)[(*n)++] = r;
    return MS_OK;
}

static const struct treg *region_of(const struct learn *L, uint32_t task, uint64_t v)
{
    size_t i = treg_upper(L, task, v);
    if (i == 0)
        return NULL;
    const struct treg *r = &L->reg[i - 1];
    return r->task == task && v - r->base < r->size ? r : NULL;
}

/* The per-kernel entry for name (inserted, zeroed, when new), or NULL when out of memory. */
static struct ms_tmpl_acc_kernel *acc_kernel(struct learn *L, const char *name)
{
    size_t lo = 0, hi = L->nk;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, L->kv[mid].name);
        if (c == 0)
            return &L->kv[mid];
        if (c > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    char *copy = ms_strdup(name);
    if (!copy || ms_grow((void **)&L->kv, &L->capk, L->nk + 1, sizeof *L->kv)) {
        ms_free(copy);
        return NULL;
    }
    memmove(&L->kv[lo + 1], &L->kv[lo], (L->nk - lo) * sizeof *L->kv);
    L->kv[lo] = (struct ms_tmpl_acc_kernel){.name = copy};
    L->nk++;
    return &L->kv[lo];
}

/* One profiled launch against the allocations its pointers name (allocation granularity) and
 * against its kernel's template (acc, template.h). */
static int eval_launch(struct learn *L, struct pend *pd)
{
    struct ms_tmpl_acc *a = L->acc;
    size_t nt = 0, na = 0, nb = 0;
    int rc = MS_OK;
    /* touched: L->ra[0..nt) */
    for (size_t i = 0; i < pd->nt && rc == MS_OK; i++)
        rc = push(&L->ra, &L->capa, &nt, (struct ms_range){pd->t[i].addr, pd->t[i].size});
    if (rc)
        return rc;
    nt = merge(L->ra, nt);
    uint64_t touched = total(L->ra, nt);
    const struct ms_tmpl_kernel *k = ms_tmpl_find(L->eval, pd->name, pd->mod);
    if (!k)
        k = ms_tmpl_find_name(L->eval, pd->name);
    bool usable = k && !ms_tmpl_kernel_opaque(k) && !ms_tmpl_kernel_unsafe(k);
    struct ms_launch l = {pd->task, pd->params, pd->plen, pd->nlayout ? pd->layout : NULL,
                          pd->nlayout};
    /* allocation granularity: L->rb[0..na); templates: L->rc[0..nb) */
    for (int pass = 0; pass < 2 && rc == MS_OK; pass++) {
        struct ms_range **v = pass ? &L->rc : &L->rb;
        size_t *cap = pass ? &L->capc : &L->capb, *n = pass ? &nb : &na;
        for (size_t i = 0; i < pd->nptr && rc == MS_OK; i++) {
            uint64_t val = (uint64_t)word(pd->params, pd->ptr[i], 8);
            const struct treg *r = region_of(L, pd->task, val);
            if (!r)
                continue;
            struct ms_range g[MS_TMPL_MAX_RANGES];
            int ng = pass == 1 && usable ? ms_tmpl_eval(k, pd->ptr[i], val, &l, g, MS_ARRAY_LEN(g))
                                         : MS_E_NOTFOUND;
            if (ng < 0) {
                rc = push(v, cap, n, (struct ms_range){r->base, r->size});
                continue;
            }
            for (int j = 0; j < ng && rc == MS_OK; j++) {
                uint64_t lo = MS_MAX(g[j].addr, r->base);
                uint64_t hi = MS_MIN(g[j].addr + g[j].bytes, r->base + r->size);
                if (hi > lo) { /* at the touches' resolution: whole granules of the allocation */
                    const uint64_t G = MS_TMPL_GRANULE;
                    uint64_t end = (hi - r->base) + G - 1 < hi - r->base
                                       ? r->size
                                       : ((hi - r->base) + G - 1) / G * G;
                    lo = r->base + (lo - r->base) / G * G;
                    hi = r->base + MS_MIN(end, r->size);
                }
                if (hi > lo)
                    rc = push(v, cap, n, (struct ms_range){lo, hi - lo});
            }
        }
        *n = merge(*v, *n);
    }
    if (rc)
        return rc;
    uint64_t pa = total(L->rb, na), pb = total(L->rc, nb);
    uint64_t ha = overlap(L->ra, nt, L->rb, na), hb = overlap(L->ra, nt, L->rc, nb);
    if (L->by_kernel) {
        struct ms_tmpl_acc_kernel *e = acc_kernel(L, pd->name);
        if (!e)
            return MS_E_NOMEM;
        e->tmpl = usable;
        e->launches++;
        e->touched += touched;
        e->alloc_pred += pa;
        e->alloc_miss += touched - ha;
        e->tmpl_pred += pb;
        e->tmpl_miss += touched - hb;
    }
    a->launches++;
    a->tmpl_launches += usable;
    a->touched += touched;
    a->alloc_pred += pa;
    a->alloc_miss += touched - ha;
    a->tmpl_pred += pb;
    a->tmpl_miss += touched - hb;
    return MS_OK;
}

static int close_launch(struct learn *L, struct pend *pd)
{
    if (!pd->active)
        return MS_OK;
    pd->active = false;
    if (L->eval)
        return eval_launch(L, pd);
    int rc = MS_OK;
    struct ms_tmpl_kernel *k = ms__tmpl_kernel_get(L->s, pd->name, pd->mod, true, &rc);
    if (!k)
        return rc;
    k->launches++;
    if (pd->nt > 1)
        qsort(pd->t, pd->nt, sizeof *pd->t, cmp_touch);
    if (pd->nt > 0 && pd->t[0].arg < 0)
        k->unsafe = true;
    /* arguments: pointer words and words touches name, ascending */
    uint16_t args[MS_TRACE_MAX_PARAMS / 8];
    size_t nargs = 0;
    bool seen[MS_TRACE_MAX_PARAMS / 8] = {false};
    for (size_t i = 0; i < pd->nptr; i++)
        seen[pd->ptr[i] / 8] = true;
    for (size_t i = 0; i < pd->nt; i++)
        if (pd->t[i].arg >= 0)
            seen[pd->t[i].arg / 8] = true;
    for (size_t w = 0; w < MS_ARRAY_LEN(seen); w++)
        if (seen[w])
            args[nargs++] = (uint16_t)(w * 8);
    size_t ti = 0;
    while (ti < pd->nt && pd->t[ti].arg < 0)
        ti++;
    struct ms__tmpl_obs o;
    for (size_t i = 0; i < nargs; i++) {
        size_t t0 = ti;
        bool written = false;
        while (ti < pd->nt && pd->t[ti].arg == args[i])
            written |= (pd->t[ti++].mode & MS_TOUCH_W) != 0;
        struct ms__tmpl_arg *a = ms__tmpl_arg_get(k, args[i]);
        if (!a)
            return MS_E_NOMEM;
        a->written |= written;
        if (!summarize(pd->t + t0, ti - t0, (uint64_t)word(pd->params, args[i], 8), &o)) {
            k->unsafe = true; /* a range that no rule over this pointer can name */
            continue;
        }
        o.nint = pd->nint;
        memcpy(o.ints, pd->ints, pd->nint * sizeof o.ints[0]);
        if ((rc = ms__tmpl_add_obs(a, &o)))
            return rc;
    }
    return MS_OK;
}

static int learn_rec(struct learn *L, struct ms_trace_reader *r, const struct ms_trace_rec *rec,
                     char *why, size_t whylen)
{
    int rc = MS_OK;
    struct pend *pd;
    switch (rec->kind) {
    case MS_TR_ALLOC: {
        size_t i = treg_upper(L, rec->task, rec->addr);
        if (ms_grow((void **)&L->reg, &L->capreg, L->nreg + 1, sizeof *L->reg))
            return MS_E_NOMEM;
        memmove(&L->reg[i + 1], &L->reg[i], (L->nreg - i) * sizeof *L->reg);
        L->reg[i] = (struct treg){rec->task, rec->addr, rec->size};
        L->nreg++;
        return MS_OK;
    }
    case MS_TR_FREE: {
        size_t i = treg_upper(L, rec->task, rec->addr);
        if (i > 0 && L->reg[i - 1].task == rec->task && L->reg[i - 1].base == rec->addr) {
            memmove(&L->reg[i - 1], &L->reg[i], (L->nreg - i) * sizeof *L->reg);
            L->nreg--;
        }
        return MS_OK;
    }
    case MS_TR_KERNEL:
        pd = pend_of(L, rec->task, rec->prof != MS_PROF_NONE, &rc);
        if (rc)
            return rc;
        if (pd && (rc = close_launch(L, pd)))
            return rc;
        if (rec->prof == MS_PROF_OPAQUE && L->eval) {
            L->acc->opaque++;
        } else if (rec->prof == MS_PROF_OPAQUE) {
            struct ms_tmpl_kernel *k = ms__tmpl_kernel_get(L->s, rec->name, rec->mod, true, &rc);
            if (!k)
                return rc;
            k->opaque = true;
            k->launches++;
        } else if (rec->prof == MS_PROF_SEEN) {
            pd->active = true;
            snprintf(pd->name, sizeof pd->name, "%s", rec->name ? rec->name : "");
            pd->mod = rec->mod;
            pd->plen = rec->params_len;
            if (rec->params_len)
                memcpy(pd->params, rec->params, rec->params_len);
            pd->nt = 0;
            pd->nlayout = rec->nlayout <= MS_TRACE_MAX_LAYOUT ? rec->nlayout : 0;
            if (pd->nlayout)
                memcpy(pd->layout, rec->layout, pd->nlayout * sizeof pd->layout[0]);
            classify(L, pd, rec);
        }
        return MS_OK;
    case MS_TR_TOUCH:
        pd = pend_of(L, rec->task, false, &rc);
        if (!pd || !pd->active) {
            snprintf(why, whylen, "line %llu: touch: no prof=seen kernel of task %u before it",
                     (unsigned long long)r->line, (unsigned)rec->task);
            return MS_E_PARSE;
        }
        if (rec->arg >= 0 && (size_t)rec->arg + 8 > pd->plen) {
            snprintf(why, whylen,
                     "line %llu: touch: arg %d is beyond the kernel's %zu parameter bytes",
                     (unsigned long long)r->line, (int)rec->arg, pd->plen);
            return MS_E_PARSE;
        }
        if (ms_grow((void **)&pd->t, &pd->capt, pd->nt + 1, sizeof *pd->t))
            return MS_E_NOMEM;
        pd->t[pd->nt++] = (struct ttouch){rec->arg, rec->mode, rec->addr, rec->size};
        return MS_OK;
    default: return MS_OK;
    }
}

static int walk(struct learn *L0, const char *buf, size_t len, char *why, size_t whylen);

int ms_tmpl_learn_trace(struct ms_tmpl_store *s, const char *buf, size_t len, char *why,
                        size_t whylen)
{
    if (!s)
        return MS_E_INVAL;
    struct learn L = {.s = s};
    return walk(&L, buf, len, why, whylen);
}

int ms_tmpl_accuracy(const struct ms_tmpl_store *s, const char *buf, size_t len,
                     struct ms_tmpl_acc *out, char *why, size_t whylen)
{
    return ms_tmpl_accuracy_kernels(s, buf, len, out, NULL, NULL, why, whylen);
}

int ms_tmpl_accuracy_kernels(const struct ms_tmpl_store *s, const char *buf, size_t len,
                             struct ms_tmpl_acc *out, struct ms_tmpl_acc_kernel **kv, size_t *nk,
                             char *why, size_t whylen)
{
    if (kv)
        *kv = NULL;
    if (nk)
        *nk = 0;
    if (!s || !out || !kv != !nk)
        return MS_E_INVAL;
    memset(out, 0, sizeof *out);
    struct learn L = {.eval = s, .acc = out, .by_kernel = kv != NULL};
    int rc = walk(&L, buf, len, why, whylen);
    ms_free(L.ra);
    ms_free(L.rb);
    ms_free(L.rc);
    if (kv) {
        *kv = L.kv;
        *nk = L.nk;
    }
    return rc;
}

void ms_tmpl_acc_kernels_free(struct ms_tmpl_acc_kernel *kv, size_t nk)
{
    for (size_t i = 0; i < nk; i++)
        ms_free(kv[i].name);
    ms_free(kv);
}

static int walk(struct learn *L0, const char *buf, size_t len, char *why, size_t whylen)
{
    char dummy[8];
    if (!why || whylen == 0) {
        why = dummy;
        whylen = sizeof dummy;
    }
    why[0] = '\0';
    if (!buf && len > 0)
        return MS_E_INVAL;
    struct learn L = *L0;
    struct ms_trace_reader r;
    ms_trace_reader_init(&r);
    int rc = MS_OK;
    size_t pos = 0;
    while (pos < len && rc == MS_OK) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        struct ms_trace_rec rec;
        int got = ms_trace_parse_line(&r, buf + pos, n, &rec);
        if (got < 0) {
            snprintf(why, whylen, "%s", r.err);
            rc = got;
        } else if (got == 1) {
            rc = learn_rec(&L, &r, &rec, why, whylen);
        }
        pos += n + 1;
    }
    if (rc == MS_OK && !r.have_header) {
        snprintf(why, whylen, "line %llu: no 'msched-trace N' header", (unsigned long long)r.line);
        rc = MS_E_PARSE;
    }
    for (size_t i = 0; i < L.np; i++) {
        if (rc == MS_OK)
            rc = close_launch(&L, L.p[i]);
        ms_free(L.p[i]->t);
        ms_free(L.p[i]);
    }
    ms_free(L.p);
    ms_free(L.reg);
    ms_trace_reader_fini(&r);
    L0->ra = L.ra;
    L0->rb = L.rb;
    L0->rc = L.rc;
    L0->kv = L.kv;
    L0->nk = L.nk;
    L0->capk = L.capk;
    if (rc == MS_E_NOMEM && why[0] == '\0')
        snprintf(why, whylen, "out of memory");
    return rc;
}
