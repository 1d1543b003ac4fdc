/*
 * template.c - the template store: kernels and their per-argument rules, incremental
 * observations, merging, and evaluation for one launch (contract: template.h; layout:
 * template_int.h; the analyzer is template_fit.c; the text format is template_text.c).
 *
 * Design
 *   The store is a sorted array of pointers to kernels, so lookups are a binary search by
 *   (name, mod) and an entry never moves once handed out. A kernel's args are a sorted array
 *   searched by offset. Evaluation reads integer arguments straight from the launch's parameter
 *   bytes (no allocation, a few multiplications per term), so a launch with a handful of
 *   pointer words costs well under a microsecond (bench: tests/unit/test_template.c prints it).
 * *
 * Invariants: those of template_int.h; every heap byte goes through ms_malloc/ms_free.
 */
#include "template_int.h"

#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Store and entries                                                                            */

int ms_tmpl_store_new(struct ms_tmpl_store **out)
{
    if (!out)
        return MS_E_INVAL;
    *out = ms_calloc(1, sizeof **out);
    return *out ? MS_OK : MS_E_NOMEM;
}

void ms__tmpl_kernel_free(struct ms_tmpl_kernel *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->nargs; i++)
        ms_free(k->args[i].obs);
    ms_free(k->args);
    ms_free(k->name);
    ms_free(k);
}

void ms_tmpl_store_free(struct ms_tmpl_store *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        ms__tmpl_kernel_free(s->k[i]);
    ms_free(s->k);
    ms_free(s);
}

size_t ms_tmpl_store_count(const struct ms_tmpl_store *s)
{
    return s ? s->n : 0;
}

static int kcmp(const char *name, uint64_t mod, const struct ms_tmpl_kernel *k)
{
    int c = strcmp(name, k->name);
    if (c)
        return c;
    return mod < k->mod ? -1 : mod > k->mod;
}

/* Index of (name, mod) in s->k, or of where it would go (*found false). */
size_t ms__tmpl_kfind(const struct ms_tmpl_store *s, const char *name, uint64_t mod, bool *found)
{
    size_t lo = 0, hi = s->n;
    *found = false;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = kcmp(name, mod, s->k[mid]);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ms__tmpl_kinsert(struct ms_tmpl_store *s, size_t at, struct ms_tmpl_kernel *k)
{
    if (ms_grow((void **)&s->k, &s->cap, s->n + 1, sizeof *s->k))
        return MS_E_NOMEM;
    memmove(&s->k[at + 1], &s->k[at], (s->n - at) * sizeof *s->k);
    s->k[at] = k;
    s->n++;
    return MS_OK;
}

struct ms_tmpl_kernel *ms__tmpl_kernel_get(struct ms_tmpl_store *s, const char *name, uint64_t mod,
                                           bool create, int *rc)
{
    bool found;
    if (!name)
        name = "";
    size_t at = ms__tmpl_kfind(s, name, mod, &found);
    if (found)
        return s->k[at];
    if (!create)
        return NULL;
    struct ms_tmpl_kernel *k = ms_calloc(1, sizeof *k);
    if (k)
        k->name = ms_strdup(name);
    if (!k || !k->name || ms__tmpl_kinsert(s, at, k)) {
        ms__tmpl_kernel_free(k);
        *rc = MS_E_NOMEM;
        return NULL;
    }
    k->mod = mod;
    return k;
}

const struct ms_tmpl_kernel *ms_tmpl_find(const struct ms_tmpl_store *s, const char *name,
                                          uint64_t mod)
{
    if (!s || !name)
        return NULL;
    bool found;
    size_t at = ms__tmpl_kfind(s, name, mod, &found);
    return found ? s->k[at] : NULL;
}

const struct ms_tmpl_kernel *ms_tmpl_find_name(const struct ms_tmpl_store *s, const char *name)
{
    if (!s || !name)
        return NULL;
    bool found;
    size_t at = ms__tmpl_kfind(s, name, 0, &found); /* the first of that name: mods ascend */
    if (at >= s->n || strcmp(s->k[at]->name, name) != 0)
        return NULL;
    if (at + 1 < s->n && strcmp(s->k[at + 1]->name, name) == 0)
        return NULL; /* several modules have one: which one this launch is, is unknown */
    return s->k[at];
}

static const struct ms__tmpl_arg *arg_find(const struct ms_tmpl_kernel *k, uint32_t off)
{
    size_t lo = 0, hi = k->nargs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (k->args[mid].off == off)
            return &k->args[mid];
        if (k->args[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

struct ms__tmpl_arg *ms__tmpl_arg_get(struct ms_tmpl_kernel *k, uint32_t off)
{
    size_t at = 0;
    while (at < k->nargs && k->args[at].off < off)
        at++;
    if (at < k->nargs && k->args[at].off == off)
        return &k->args[at];
    if (ms_grow((void **)&k->args, &k->capargs, k->nargs + 1, sizeof *k->args))
        return NULL;
    memmove(&k->args[at + 1], &k->args[at], (k->nargs - at) * sizeof *k->args);
    memset(&k->args[at], 0, sizeof k->args[at]);
    k->args[at].off = off;
    k->nargs++;
    return &k->args[at];
}

static bool obs_equal(const struct ms__tmpl_obs *a, const struct ms__tmpl_obs *b)
{
    if (a->lo != b->lo || a->hi != b->hi || a->touched != b->touched || a->count != b->count ||
        a->len != b->len || a->stride != b->stride || a->nint != b->nint)
        return false;
    for (uint32_t i = 0; i < a->nint; i++)
        if (a->ints[i].off != b->ints[i].off || a->ints[i].size != b->ints[i].size ||
            a->ints[i].val != b->ints[i].val)
            return false;
    return true;
}

int ms__tmpl_add_obs(struct ms__tmpl_arg *a, const struct ms__tmpl_obs *o)
{
    for (size_t i = 0; i < a->nobs; i++)
        if (obs_equal(&a->obs[i], o)) {
            a->launches++;
            return MS_OK;
        }
    bool explained = a->form != MS_TMPL_NONE && ms__tmpl_explains(&a->rule, o);
    if (a->refused || a->nobs >= MS_TMPL_MAX_OBS) {
        if (!explained) {
            a->refused = true;
            a->form = MS_TMPL_NONE;
            memset(&a->rule, 0, sizeof a->rule);
        }
        a->launches++;
        return MS_OK;
    }
    size_t cap = a->nobs; /* the array is always exactly nobs long */
    if (ms_grow((void **)&a->obs, &cap, a->nobs + 1, sizeof *a->obs))
        return MS_E_NOMEM;
    a->obs[a->nobs++] = *o;
    a->launches++;
    ms__tmpl_fit(a); /* even when explained: more launches can pick a better formula */
    return MS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Accessors and evaluation                                                                     */

bool ms_tmpl_kernel_opaque(const struct ms_tmpl_kernel *k)
{
    return k && k->opaque;
}

bool ms_tmpl_kernel_unsafe(const struct ms_tmpl_kernel *k)
{
    return k && k->unsafe;
}

uint64_t ms_tmpl_kernel_launches(const struct ms_tmpl_kernel *k)
{
    return k ? k->launches : 0;
}

enum ms_tmpl_form ms_tmpl_rule(const struct ms_tmpl_kernel *k, uint32_t arg, bool *written,
                               uint64_t *launches)
{
    const struct ms__tmpl_arg *a = k ? arg_find(k, arg) : NULL;
    if (written)
        *written = a ? a->written : true;
    if (launches)
        *launches = a ? a->launches : 0;
    if (!a || k->opaque || k->unsafe)
        return MS_TMPL_NONE;
    return a->form;
}

static bool launch_x(const struct ms_launch *l, struct ms__tmpl_x x, int64_t *v)
{
    if ((size_t)x.off + x.size > l->params_len)
        return false;
    if (x.size == 4) {
        int32_t w;
        memcpy(&w, l->params + x.off, 4);
        *v = w;
    } else {
        memcpy(v, l->params + x.off, 8);
    }
    return true;
}

static bool term_launch(const struct ms__tmpl_term *t, const struct ms_launch *l, int64_t *out)
{
    int64_t v = t->c0;
    for (int i = 0; i < 2; i++) {
        if (t->c[i] == 0)
            continue;
        int64_t a, b = 1, p;
        if (!launch_x(l, t->x[i][0], &a) || (t->x[i][1].size && !launch_x(l, t->x[i][1], &b)) ||
            __builtin_mul_overflow(a, b, &p) || __builtin_mul_overflow(t->c[i], p, &p) ||
            __builtin_add_overflow(v, p, &v))
            return false;
    }
    *out = v;
    return true;
}

int ms_tmpl_eval(const struct ms_tmpl_kernel *k, uint32_t arg, uint64_t ptr,
                 const struct ms_launch *l, struct ms_range *out, size_t cap)
{
    if (!k || !l || !out || cap == 0 || k->opaque || k->unsafe)
        return MS_E_NOTFOUND;
    const struct ms__tmpl_arg *a = arg_find(k, arg);
    if (!a || a->form == MS_TMPL_NONE)
        return MS_E_NOTFOUND;
    const struct ms__tmpl_rule *r = &a->rule;
    int64_t lo, hi, cnt, st, len, span;
    if (!term_launch(&r->lo, l, &lo) || !term_launch(&r->hi, l, &hi) ||
        !term_launch(&r->count, l, &cnt) || !term_launch(&r->stride, l, &st))
        return MS_E_NOTFOUND;
    if (cnt <= 0 || hi <= lo)
        return 0;
    if (__builtin_sub_overflow(hi, lo, &len) || (cnt > 1 && st < 0))
        return MS_E_NOTFOUND;
    uint64_t base = ptr + (uint64_t)lo;
    if ((lo < 0 && base > ptr) || (lo > 0 && base < ptr))
        return MS_E_NOTFOUND; /* wraps the address space */
    bool single = cnt == 1 || st <= len;
    if (single || (uint64_t)cnt > MS_MIN(cap, (size_t)MS_TMPL_MAX_RANGES)) {
        if (__builtin_mul_overflow(cnt - 1, st, &span) ||
            __builtin_add_overflow(span, len, &span) || base + (uint64_t)span < base)
            return MS_E_NOTFOUND;
        out[0] = (struct ms_range){base, (uint64_t)span};
        return 1;
    }
    if (__builtin_mul_overflow(cnt - 1, st, &span) || __builtin_add_overflow(span, len, &span) ||
        base + (uint64_t)span < base)
        return MS_E_NOTFOUND;
    for (int64_t i = 0; i < cnt; i++)
        out[i] = (struct ms_range){base + (uint64_t)(i * st), (uint64_t)len};
    return (int)cnt;
}

/* ------------------------------------------------------------------------------------------ */
/* Merging (ms_tmpl_store_parse)                                                                */

/* Merge t's kernels into s (t is emptied of the ones it hands over). */
int ms__tmpl_merge(struct ms_tmpl_store *s, struct ms_tmpl_store *t)
{
    for (size_t i = 0; i < t->n; i++) {
        struct ms_tmpl_kernel *kt = t->k[i];
        bool found;
        size_t at = ms__tmpl_kfind(s, kt->name, kt->mod, &found);
        if (!found) {
            if (ms__tmpl_kinsert(s, at, kt))
                return MS_E_NOMEM;
            t->k[i] = NULL;
            continue;
        }
        struct ms_tmpl_kernel *ks = s->k[at];
        ks->opaque |= kt->opaque;
        ks->unsafe |= kt->unsafe;
        ks->launches += kt->launches;
        for (size_t j = 0; j < kt->nargs; j++) {
            const struct ms__tmpl_arg *at_ = &kt->args[j];
            struct ms__tmpl_arg *as = ms__tmpl_arg_get(ks, at_->off);
            if (!as)
                return MS_E_NOMEM;
            as->written |= at_->written;
            if (at_->refused) {
                as->refused = true;
                as->form = MS_TMPL_NONE;
                memset(&as->rule, 0, sizeof as->rule);
            }
            for (size_t m = 0; m < at_->nobs; m++) {
                int rc = ms__tmpl_add_obs(as, &at_->obs[m]);
                if (rc)
                    return rc;
            }
            if (at_->launches > at_->nobs)
                as->launches += at_->launches - at_->nobs;
        }
    }
    return MS_OK;
}
