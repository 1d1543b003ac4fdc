/*
 * template_fit.c - the analyzer of argument templates: from a profile (a version-2 trace) to
 * observations, and from observations to the simplest rule that explains them (contract:
 * template.h; layout: template_int.h).
 *
 * Design
 *   Learning walks the trace once. A prof=seen kernel record opens the task's pending launch: its
 *   name, module, parameter bytes, which 8-byte words are pointers into the task's regions (as of
 *   the launch), and its integer arguments. Touch records of the task add to it. The task's next
 *   kernel record, or the end of the trace, closes it: per pointer word (and per word a touch
 *   names), its touches are made relative to the pointer value, sorted and merged, and summarized
 *   into one observation (span, bytes, and count/len/stride when the blocks are regular). The
 *   reader keeps no per-task state, so the rule "a touch follows a prof=seen kernel of its task"
 *   is checked here.
 *
 *   Fitting is exact integer arithmetic, no least squares. For each of the rule's terms the
 *   analyzer builds candidates: a constant; c1*x(a) with c1 from two observations that differ in
 *   x(a) (rounded to the nearest integer); c1*x(a)*x(b) likewise; c1*x(a) + c2*x(b) from three
 *   observations (Cramer's rule, exact division only). c0 is then the envelope of the residuals:
 *   the minimum for lo (the prediction starts no later than any launch's first byte), the maximum
 *   for hi and count. A candidate rule is accepted when ms__tmpl_explains holds for every
 *   observation, so the heuristics only choose what to try; coverage and slack are always
 *   checked. Order: fixed, linear in one argument, linear with one product or two-argument sum,
 *   strided (only when some launch touched two or more regular blocks).
 *
 *   Bounds: integer arguments considered per fit: the first MS_FIT_MAX_X present in every
 *   observation that touched something; candidates per term: 1 + n + 2 * n(n-1)/2.
 *
 * Invariants
 *   - a fitted rule explains every stored observation of its argument;
 *   - every arithmetic step on trace values is overflow-checked: an overflow drops the candidate.
 */
#include "template_int.h"

#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS_FIT_MAX_X 16
#define MS_FIT_MAX_BLOCKS (1u << 20) /* regular blocks one observation may name (as the store) */
#define MS_FIT_MAX_CAND (1 + MS_FIT_MAX_X + MS_FIT_MAX_X * (MS_FIT_MAX_X - 1))

/* ------------------------------------------------------------------------------------------ */
/* Verification                                                                                 */

static bool obs_x(const struct ms__tmpl_obs *o, struct ms__tmpl_x x, int64_t *v)
{
    size_t lo = 0, hi = o->nint;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct ms__tmpl_ival *iv = &o->ints[mid];
        if (iv->off == x.off && iv->size == x.size) {
            *v = iv->val;
            return true;
        }
        if (iv->off < x.off || (iv->off == x.off && iv->size < x.size))
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static bool mono_obs(const struct ms__tmpl_term *t, int i, const struct ms__tmpl_obs *o,
                     int64_t *out)
{
    int64_t a, b = 1;
    if (!obs_x(o, t->x[i][0], &a))
        return false;
    if (t->x[i][1].size && !obs_x(o, t->x[i][1], &b))
        return false;
    return !__builtin_mul_overflow(a, b, out);
}

static bool term_obs(const struct ms__tmpl_term *t, const struct ms__tmpl_obs *o, int64_t *out)
{
    int64_t v = t->c0;
    for (int i = 0; i < 2; i++) {
        if (t->c[i] == 0)
            continue;
        int64_t x, p;
        if (!mono_obs(t, i, o, &x) || __builtin_mul_overflow(t->c[i], x, &p) ||
            __builtin_add_overflow(v, p, &v))
            return false;
    }
    *out = v;
    return true;
}

bool ms__tmpl_explains(const struct ms__tmpl_rule *r, const struct ms__tmpl_obs *o)
{
    if (o->touched == 0)
        return true;
    int64_t lo, hi, cnt, st, len, span, end;
    if (!term_obs(&r->lo, o, &lo) || !term_obs(&r->hi, o, &hi) || !term_obs(&r->count, o, &cnt) ||
        !term_obs(&r->stride, o, &st))
        return false;
    if (cnt <= 0 || hi <= lo || __builtin_sub_overflow(hi, lo, &len))
        return false;
    if (cnt > 1 && st < 0)
        return false;
    uint64_t pred;
    if (cnt == 1 || st <= len) {
        if (__builtin_mul_overflow(cnt - 1, st, &span) ||
            __builtin_add_overflow(span, len, &span) || __builtin_add_overflow(lo, span, &end))
            return false;
        if (lo > o->lo || end < o->hi)
            return false;
        pred = (uint64_t)span;
    } else {
        int64_t p;
        if (__builtin_mul_overflow(cnt, len, &p))
            return false;
        pred = (uint64_t)p;
        if (o->count == 0)
            return false;
        for (uint64_t k = 0; k < o->count; k++) {
            int64_t b = o->lo + (int64_t)k * o->stride, e = b + (int64_t)o->len;
            if (b < lo)
                return false;
            int64_t j = (b - lo) / st;
            if (j >= cnt || e > lo + j * st + len)
                return false;
        }
    }
    uint64_t over = pred > o->touched ? pred - o->touched : 0;
    return over <= o->touched / 16 + MS_TMPL_SLACK_ABS;
}

/* ------------------------------------------------------------------------------------------ */
/* Candidates                                                                                   */

struct fitdata {
    const struct ms__tmpl_obs *o[MS_TMPL_MAX_OBS]; /* observations that touched something */
    size_t n;
    struct ms__tmpl_x x[MS_FIT_MAX_X]; /* integer arguments present in all of them */
    size_t nx;
    int64_t v[MS_TMPL_MAX_OBS][MS_FIT_MAX_X]; /* v[i][j] = x[j] in o[i] */
};

struct cand {
    struct ms__tmpl_term t;
    int level;
    uint64_t spread; /* max - min of the residuals: 0 for an exact fit */
};

/* X of monomial (a, b) in observation i (b < 0: x(a) alone). */
static bool xval(const struct fitdata *d, size_t i, int a, int b, int64_t *out)
{
    if (b < 0) {
        *out = d->v[i][a];
        return true;
    }
    return !__builtin_mul_overflow(d->v[i][a], d->v[i][b], out);
}

/* Set c0 to the envelope of y - (monomials); dir < 0: min, > 0: max, 0: all equal. */
static bool envelope(struct ms__tmpl_term *t, const struct fitdata *d, const int64_t *y, int dir)
{
    int64_t best = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct ms__tmpl_term z = *t;
        z.c0 = 0;
        int64_t m, r;
        if (!term_obs(&z, d->o[i], &m) || __builtin_sub_overflow(y[i], m, &r))
            return false;
        if (i == 0 || (dir < 0 && r < best) || (dir > 0 && r > best))
            best = r;
        else if (dir == 0 && r != best)
            return false;
    }
    t->c0 = best;
    return true;
}

/* Nearest integer to n / q (q != 0); false on overflow. */
static bool div_round(int64_t n, int64_t q, int64_t *out)
{
    if (q == -1 && n == INT64_MIN)
        return false;
    int64_t r = n / q, m = n % q;
    if (m != 0) {
        uint64_t am = m < 0 ? (uint64_t)0 - (uint64_t)m : (uint64_t)m;
        uint64_t aq = q < 0 ? (uint64_t)0 - (uint64_t)q : (uint64_t)q;
        if (2 * am >= aq)
            r += ((n < 0) != (q < 0)) ? -1 : 1;
    }
    *out = r;
    return true;
}

static struct ms__tmpl_x xof(const struct fitdata *d, int a)
{
    return a < 0 ? (struct ms__tmpl_x){0, 0} : d->x[a];
}

/* c1 * X(a[,b]) from the first two observations that differ in X. */
static bool cand_one(const struct fitdata *d, const int64_t *y, int dir, int a, int b,
                     struct ms__tmpl_term *t)
{
    int64_t x0, xi, dx, dy, c;
    if (!xval(d, 0, a, b, &x0))
        return false;
    for (size_t i = 1; i < d->n; i++) {
        if (!xval(d, i, a, b, &xi) || xi == x0)
            continue;
        if (__builtin_sub_overflow(xi, x0, &dx) || __builtin_sub_overflow(y[i], y[0], &dy) ||
            !div_round(dy, dx, &c) || c == 0)
            return false;
        memset(t, 0, sizeof *t);
        t->c[0] = c;
        t->x[0][0] = xof(d, a);
        t->x[0][1] = xof(d, b);
        return envelope(t, d, y, dir);
    }
    return false;
}

/* c1 * x(a) + c2 * x(b) from three observations, exact. */
static bool cand_sum(const struct fitdata *d, const int64_t *y, int dir, int a, int b,
                     struct ms__tmpl_term *t)
{
    for (size_t i = 1; i < d->n; i++)
        for (size_t j = i + 1; j < d->n; j++) {
            int64_t a1 = d->v[i][a] - d->v[0][a], b1 = d->v[i][b] - d->v[0][b];
            int64_t a2 = d->v[j][a] - d->v[0][a], b2 = d->v[j][b] - d->v[0][b];
            int64_t y1 = y[i] - y[0], y2 = y[j] - y[0], det, p, q, n1, n2;
            if (__builtin_mul_overflow(a1, b2, &p) || __builtin_mul_overflow(a2, b1, &q) ||
                __builtin_sub_overflow(p, q, &det) || det == 0)
                continue;
            if (__builtin_mul_overflow(y1, b2, &p) || __builtin_mul_overflow(y2, b1, &q) ||
                __builtin_sub_overflow(p, q, &n1))
                return false;
            if (__builtin_mul_overflow(a1, y2, &p) || __builtin_mul_overflow(a2, y1, &q) ||
                __builtin_sub_overflow(p, q, &n2))
                return false;
            if (n1 % det || n2 % det || n1 / det == 0 || n2 / det == 0)
                return false;
            memset(t, 0, sizeof *t);
            t->c[0] = n1 / det;
            t->x[0][0] = d->x[a];
            t->c[1] = n2 / det;
            t->x[1][0] = d->x[b];
            return envelope(t, d, y, dir);
        }
    return false;
}

/* Spread of the residuals y - (monomials) of term t. */
static uint64_t spread(const struct ms__tmpl_term *t, const struct fitdata *d, const int64_t *y)
{
    struct ms__tmpl_term lo = *t, hi = *t;
    if (!envelope(&lo, d, y, -1) || !envelope(&hi, d, y, 1))
        return UINT64_MAX;
    return (uint64_t)hi.c0 - (uint64_t)lo.c0;
}

/* Candidates for one term up to maxlevel, by level, then tightest first. Returns how many. */
static size_t candidates(const struct fitdata *d, const int64_t *y, int dir, int maxlevel,
                         struct cand *out)
{
    size_t n = 0;
    memset(&out[0], 0, sizeof out[0]);
    if (envelope(&out[0].t, d, y, dir))
        out[n++].level = 0;
    for (int a = 0; maxlevel >= 1 && a < (int)d->nx; a++)
        if (cand_one(d, y, dir, a, -1, &out[n].t))
            out[n++].level = 1;
    for (int a = 0; maxlevel >= 2 && a < (int)d->nx; a++)
        for (int b = a + 1; b < (int)d->nx; b++) {
            if (cand_one(d, y, dir, a, b, &out[n].t))
                out[n++].level = 2;
            if (cand_sum(d, y, dir, a, b, &out[n].t))
                out[n++].level = 2;
        }
    for (size_t i = 0; i < n; i++)
        out[i].spread = spread(&out[i].t, d, y);
    for (size_t i = 1; i < n; i++) { /* stable insertion sort by (level, spread) */
        struct cand c = out[i];
        size_t j = i;
        while (j > 0 && (out[j - 1].level > c.level ||
                         (out[j - 1].level == c.level && out[j - 1].spread > c.spread))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c;
    }
    return n;
}

/* The first exact candidate (no spread), else the tightest constant. */
static bool best_exact(const struct fitdata *d, const int64_t *y, int dir, struct ms__tmpl_term *t)
{
    struct cand c[MS_FIT_MAX_CAND];
    size_t n = candidates(d, y, dir, 1, c);
    if (n == 0)
        return false;
    *t = c[0].t; /* tightest of the simplest level: verification decides */
    for (size_t i = 0; i < n; i++)
        if (c[i].spread == 0) {
            *t = c[i].t;
            break;
        }
    return true;
}

static struct ms__tmpl_term tconst(int64_t v)
{
    struct ms__tmpl_term t;
    memset(&t, 0, sizeof t);
    t.c0 = v;
    return t;
}

static bool same_x(struct ms__tmpl_x a, struct ms__tmpl_x b)
{
    return a.off == b.off && a.size == b.size;
}

/* a + b with like monomials merged; false when more than two monomials remain or on overflow. */
static bool term_add(const struct ms__tmpl_term *a, const struct ms__tmpl_term *b,
                     struct ms__tmpl_term *out)
{
    struct ms__tmpl_term r = *a;
    if (__builtin_add_overflow(a->c0, b->c0, &r.c0))
        return false;
    for (int i = 0; i < 2; i++) {
        if (b->c[i] == 0)
            continue;
        int j;
        for (j = 0; j < 2; j++)
            if (r.c[j] != 0 && same_x(r.x[j][0], b->x[i][0]) && same_x(r.x[j][1], b->x[i][1]))
                break;
        if (j < 2) {
            if (__builtin_add_overflow(r.c[j], b->c[i], &r.c[j]))
                return false;
            continue;
        }
        for (j = 0; j < 2 && r.c[j] != 0; j++)
            ;
        if (j == 2)
            return false;
        r.c[j] = b->c[i];
        r.x[j][0] = b->x[i][0];
        r.x[j][1] = b->x[i][1];
    }
    /* canonical: drop zero monomials, fill c[0] first */
    for (int i = 0; i < 2; i++)
        if (r.c[i] == 0)
            memset(r.x[i], 0, sizeof r.x[i]);
    if (r.c[0] == 0 && r.c[1] != 0) {
        r.c[0] = r.c[1];
        memcpy(r.x[0], r.x[1], sizeof r.x[0]);
        r.c[1] = 0;
        memset(r.x[1], 0, sizeof r.x[1]);
    }
    *out = r;
    return true;
}

static bool explains_all(const struct ms__tmpl_rule *r, const struct ms__tmpl_arg *a)
{
    for (size_t i = 0; i < a->nobs; i++)
        if (!ms__tmpl_explains(r, &a->obs[i]))
            return false;
    return true;
}

static bool fit_strided(const struct fitdata *d, const struct ms__tmpl_arg *a,
                        struct ms__tmpl_rule *r)
{
    int64_t ycount[MS_TMPL_MAX_OBS], ylen[MS_TMPL_MAX_OBS], ylo[MS_TMPL_MAX_OBS];
    bool multi = false;
    for (size_t i = 0; i < d->n; i++) {
        if (d->o[i]->count == 0 || d->o[i]->count > INT64_MAX || d->o[i]->len > INT64_MAX)
            return false;
        ycount[i] = (int64_t)d->o[i]->count;
        ylen[i] = (int64_t)d->o[i]->len;
        ylo[i] = d->o[i]->lo;
        multi |= d->o[i]->count >= 2;
    }
    if (!multi)
        return false;
    struct ms__tmpl_term tlen;
    if (!best_exact(d, ycount, 1, &r->count) || !best_exact(d, ylen, 1, &tlen) ||
        !best_exact(d, ylo, -1, &r->lo) || !term_add(&r->lo, &tlen, &r->hi))
        return false;
    /* stride: from the launches with two or more blocks */
    struct fitdata m = *d;
    int64_t ystride[MS_TMPL_MAX_OBS];
    m.n = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->o[i]->count >= 2) {
            m.o[m.n] = d->o[i];
            memcpy(m.v[m.n], d->v[i], sizeof m.v[0]);
            ystride[m.n++] = d->o[i]->stride;
        }
    if (!best_exact(&m, ystride, 0, &r->stride))
        return false;
    return explains_all(r, a);
}

void ms__tmpl_fit(struct ms__tmpl_arg *a)
{
    struct fitdata d; /* about 9 KiB; with the candidates about 40 KiB of stack */
    struct cand clo[MS_FIT_MAX_CAND], chi[MS_FIT_MAX_CAND];
    a->form = MS_TMPL_NONE;
    memset(&a->rule, 0, sizeof a->rule);
    if (a->refused)
        return;
    d.n = 0;
    for (size_t i = 0; i < a->nobs; i++)
        if (a->obs[i].touched > 0)
            d.o[d.n++] = &a->obs[i];
    struct ms__tmpl_rule r;
    r.count = tconst(1);
    r.stride = tconst(0);
    if (d.n == 0) { /* never touched: predict nothing */
        r.lo = tconst(0);
        r.hi = tconst(0);
        a->rule = r;
        a->form = MS_TMPL_FIXED;
        return;
    }
    /* integer arguments present in every touching observation */
    d.nx = 0;
    for (uint32_t j = 0; j < d.o[0]->nint && d.nx < MS_FIT_MAX_X; j++) {
        struct ms__tmpl_x x = {d.o[0]->ints[j].off, d.o[0]->ints[j].size};
        bool all = true;
        for (size_t i = 0; i < d.n && all; i++)
            all = obs_x(d.o[i], x, &d.v[i][d.nx]);
        if (all)
            d.x[d.nx++] = x;
    }
    int64_t ylo[MS_TMPL_MAX_OBS], yhi[MS_TMPL_MAX_OBS];
    for (size_t i = 0; i < d.n; i++) {
        ylo[i] = d.o[i]->lo;
        yhi[i] = d.o[i]->hi;
    }
    size_t nlo = candidates(&d, ylo, -1, 2, clo), nhi = candidates(&d, yhi, 1, 2, chi);
    for (int level = 0; level <= 2; level++)
        for (size_t i = 0; i < nlo; i++)
            for (size_t j = 0; j < nhi; j++) {
                int hiw = MS_MAX(clo[i].level, chi[j].level);
                int low = MS_MIN(clo[i].level, chi[j].level);
                if (hiw != level || low > 1)
                    continue;
                r.lo = clo[i].t;
                r.hi = chi[j].t;
                if (explains_all(&r, a)) {
                    a->rule = r;
                    a->form = level == 0 ? MS_TMPL_FIXED : MS_TMPL_LINEAR;
                    return;
                }
            }
    if (fit_strided(&d, a, &r)) {
        a->rule = r;
        a->form = MS_TMPL_STRIDED;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Learning from a trace                                                                        */

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
};

struct learn {
    struct ms_tmpl_store *s;
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

/* Classify the launch's words: pointers (by the rules of ms_predict_launch) and integers. */
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
        bool any = false;
        if (e->size >= 8)
            for (size_t w = MS_ROUND_UP((size_t)e->offset, 8); w + 8 <= (size_t)e->offset + e->size;
                 w += 8)
                if (is_ptr(L, rec->task, (uint64_t)word(pd->params, w, 8))) {
                    pd->ptr[pd->nptr++] = (uint16_t)w;
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
    if (nblk > MS_FIT_MAX_BLOCKS)
        regular = false; /* verification walks the blocks: bound it */
    o->count = regular ? nblk : 0;
    if (!regular) {
        o->len = 0;
        o->stride = 0;
    }
    return true;
}

static int close_launch(struct learn *L, struct pend *pd)
{
    if (!pd->active)
        return MS_OK;
    pd->active = false;
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
        if (rec->prof == MS_PROF_OPAQUE) {
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

int ms_tmpl_learn_trace(struct ms_tmpl_store *s, const char *buf, size_t len, char *why,
                        size_t whylen)
{
    char dummy[8];
    if (!why || whylen == 0) {
        why = dummy;
        whylen = sizeof dummy;
    }
    why[0] = '\0';
    if (!s || (!buf && len > 0))
        return MS_E_INVAL;
    struct learn L = {.s = s};
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
    if (rc == MS_E_NOMEM && why[0] == '\0')
        snprintf(why, whylen, "out of memory");
    return rc;
}
