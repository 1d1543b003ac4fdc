/*
 * template_fit.c - fitting argument templates: from observations to the simplest rule that
 *   explains them, and the check that a rule explains an observation (contract: template.h;
 *   layout: template_int.h; observations come from template_learn.c).
 *
 * Design
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

#include <string.h>

#define MS_FIT_MAX_X 16
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

/* Spread of the residuals y - (monomials) of term t. */
static uint64_t spread(const struct ms__tmpl_term *t, const struct fitdata *d, const int64_t *y)
{
    struct ms__tmpl_term lo = *t, hi = *t;
    if (!envelope(&lo, d, y, -1) || !envelope(&hi, d, y, 1))
        return UINT64_MAX;
    return (uint64_t)hi.c0 - (uint64_t)lo.c0;
}

/* The slope dy/dx between observations i and j (rounded), 0 when they do not differ in X. */
static bool slope(const struct fitdata *d, const int64_t *y, int a, int b, size_t i, size_t j,
                  int64_t *c)
{
    int64_t xi, xj, dx, dy;
    *c = 0;
    if (!xval(d, i, a, b, &xi) || !xval(d, j, a, b, &xj))
        return false;
    if (xi == xj)
        return true;
    return !__builtin_sub_overflow(xj, xi, &dx) && !__builtin_sub_overflow(y[j], y[i], &dy) &&
           div_round(dy, dx, c);
}

/*
 * c1 * X(a[,b]): c1 is the slope between two observations. One pair is not enough: a launch
 * whose range was clipped at its allocation's start (the first block of a buffer that does not
 * start on a profiling granule) bends the line at one end. So three pairs are tried, the first
 * two observations that differ in X, the two with the smallest X and the two with the largest,
 * and the slope whose residuals spread least wins (ties: the first).
 */
static bool cand_one(const struct fitdata *d, const int64_t *y, int dir, int a, int b,
                     struct ms__tmpl_term *t)
{
    size_t pair[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    int64_t x0, xi;
    size_t lo1 = SIZE_MAX, lo2 = SIZE_MAX, hi1 = SIZE_MAX, hi2 = SIZE_MAX; /* by X */
    int64_t vlo1 = 0, vlo2 = 0, vhi1 = 0, vhi2 = 0;
    if (!xval(d, 0, a, b, &x0))
        return false;
    for (size_t i = 0; i < d->n; i++) {
        if (!xval(d, i, a, b, &xi))
            return false;
        if (i > 0 && xi != x0 && pair[0][1] == 0)
            pair[0][1] = i;
        if (lo1 == SIZE_MAX || xi < vlo1) {
            if (lo1 != SIZE_MAX && vlo1 != xi)
                lo2 = lo1, vlo2 = vlo1;
            lo1 = i, vlo1 = xi;
        } else if (xi != vlo1 && (lo2 == SIZE_MAX || xi < vlo2)) {
            lo2 = i, vlo2 = xi;
        }
        if (hi1 == SIZE_MAX || xi > vhi1) {
            if (hi1 != SIZE_MAX && vhi1 != xi)
                hi2 = hi1, vhi2 = vhi1;
            hi1 = i, vhi1 = xi;
        } else if (xi != vhi1 && (hi2 == SIZE_MAX || xi > vhi2)) {
            hi2 = i, vhi2 = xi;
        }
    }
    if (pair[0][1] == 0)
        return false; /* X is the same in every observation */
    pair[1][0] = lo1, pair[1][1] = lo2;
    pair[2][0] = hi2, pair[2][1] = hi1;
    bool found = false;
    uint64_t best = UINT64_MAX;
    for (int p = 0; p < 3; p++) {
        int64_t c;
        if (pair[p][0] == SIZE_MAX || pair[p][1] == SIZE_MAX ||
            !slope(d, y, a, b, pair[p][0], pair[p][1], &c) || c == 0)
            continue;
        struct ms__tmpl_term u;
        memset(&u, 0, sizeof u);
        u.c[0] = c;
        u.x[0][0] = xof(d, a);
        u.x[0][1] = xof(d, b);
        if (!envelope(&u, d, y, dir))
            continue;
        uint64_t sp = spread(&u, d, y);
        if (!found || sp < best) {
            *t = u;
            best = sp;
            found = true;
        }
    }
    return found;
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
