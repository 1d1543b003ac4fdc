/*
 * template_text.c - the template store's text format: writer, strict reader, and the human
 * summary (contract: template.h; layout: template_int.h; definition: docs/templates.md).
 *
 * Design
 *   The writer emits one canonical form (fixed field order, lowercase hex, no leading zeros,
 *   names escaped as in traces). The reader is line-based and strict like core/trace.c: the
 *   writer's field order, every number range-checked, errors "line N: reason". It parses the
 *   whole text into a scratch store and merges (ms__tmpl_merge) only when all of it was valid,
 *   so a parse error leaves the target store as it was. format(parse(text)) == text for any text
 *   the writer produced.
 *
 * Invariants: a parsed store satisfies template_int.h's invariants except that a rule read from
 * text is taken as written (it need not explain its observations); every heap byte goes through
 * ms_malloc/ms_free.
 */
#include "template_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define MS_PRINTF_ATTR __attribute__((format(printf, 2, 3)))
#else
#define MS_PRINTF_ATTR
#endif

#define TM_MAX_NAME 511u             /* bytes of a decoded name, as traces */
#define TM_MAX_PARAMS 4096u          /* parameter bytes of a launch, as traces */
#define TM_MAX_OBS_BLOCKS (1u << 20) /* regular blocks one observation may name */

/* ------------------------------------------------------------------------------------------ */
/* Text writer                                                                                  */

struct sbuf {
    char *b;
    size_t n, cap;
    bool nomem;
};

static MS_PRINTF_ATTR void sb_printf(struct sbuf *w, const char *fmt, ...);

static void sb_printf(struct sbuf *w, const char *fmt, ...)
{
    if (w->nomem)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(w->b ? w->b + w->n : NULL, w->b ? w->cap - w->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            w->nomem = true;
            return;
        }
        if (w->b && (size_t)n < w->cap - w->n) {
            w->n += (size_t)n;
            return;
        }
        if (ms_grow((void **)&w->b, &w->cap, w->n + (size_t)n + 1, 1)) {
            w->nomem = true;
            return;
        }
    }
}

static void sb_name(struct sbuf *w, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c > 0x20 && c < 0x7f && c != '%')
            sb_printf(w, "%c", c);
        else
            sb_printf(w, "%%%02X", c);
    }
}

static void sb_x(struct sbuf *w, struct ms__tmpl_x x)
{
    sb_printf(w, "x%u:%u", (unsigned)x.off, (unsigned)x.size);
}

static void sb_term(struct sbuf *w, const char *key, const struct ms__tmpl_term *t)
{
    sb_printf(w, " %s=%lld", key, (long long)t->c0);
    for (int i = 0; i < 2; i++) {
        if (t->c[i] == 0)
            continue;
        sb_printf(w, ",%lld*", (long long)t->c[i]);
        sb_x(w, t->x[i][0]);
        if (t->x[i][1].size) {
            sb_printf(w, "*");
            sb_x(w, t->x[i][1]);
        }
    }
}

static const char *const form_names[] = {"none", "fixed", "linear", "strided"};

static int sb_done(struct sbuf *w, char **out, size_t *len)
{
    if (!w->nomem && !w->b)
        sb_printf(w, "%s", "");
    if (w->nomem) {
        ms_free(w->b);
        return MS_E_NOMEM;
    }
    *out = w->b;
    if (len)
        *len = w->n;
    return MS_OK;
}

int ms_tmpl_store_format(const struct ms_tmpl_store *s, char **out, size_t *len)
{
    if (!s || !out)
        return MS_E_INVAL;
    struct sbuf w = {0};
    sb_printf(&w, "msched-templates %d\n", MS_TMPL_VERSION);
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_tmpl_kernel *k = s->k[i];
        sb_printf(&w, "kernel mod=%llx launches=%llu opaque=%d unsafe=%d name=",
                  (unsigned long long)k->mod, (unsigned long long)k->launches, k->opaque,
                  k->unsafe);
        sb_name(&w, k->name);
        sb_printf(&w, "\n");
        for (size_t j = 0; j < k->nargs; j++) {
            const struct ms__tmpl_arg *a = &k->args[j];
            sb_printf(&w, "arg %u form=%s written=%d refused=%d launches=%llu", (unsigned)a->off,
                      form_names[a->form], a->written, a->refused, (unsigned long long)a->launches);
            sb_term(&w, "lo", &a->rule.lo);
            sb_term(&w, "hi", &a->rule.hi);
            sb_term(&w, "count", &a->rule.count);
            sb_term(&w, "stride", &a->rule.stride);
            sb_printf(&w, "\n");
            for (size_t m = 0; m < a->nobs; m++) {
                const struct ms__tmpl_obs *o = &a->obs[m];
                sb_printf(&w, "obs %lld %lld %llu %llu %llu %lld ints=", (long long)o->lo,
                          (long long)o->hi, (unsigned long long)o->touched,
                          (unsigned long long)o->count, (unsigned long long)o->len,
                          (long long)o->stride);
                for (uint32_t q = 0; q < o->nint; q++)
                    sb_printf(&w, "%s%u:%u:%lld", q ? "," : "", (unsigned)o->ints[q].off,
                              (unsigned)o->ints[q].size, (long long)o->ints[q].val);
                sb_printf(&w, "\n");
            }
        }
        sb_printf(&w, "end\n");
    }
    return sb_done(&w, out, len);
}

/* "c0 + c1*x(16:4)*x(24:8) + ..." */
static void sb_term_words(struct sbuf *w, const struct ms__tmpl_term *t)
{
    sb_printf(w, "%lld", (long long)t->c0);
    for (int i = 0; i < 2; i++) {
        if (t->c[i] == 0)
            continue;
        sb_printf(w, " %s %lld*x@%u", t->c[i] < 0 ? "-" : "+",
                  t->c[i] < 0 ? -(long long)t->c[i] : (long long)t->c[i], (unsigned)t->x[i][0].off);
        if (t->x[i][1].size)
            sb_printf(w, "*x@%u", (unsigned)t->x[i][1].off);
    }
}

int ms_tmpl_store_describe(const struct ms_tmpl_store *s, char **out, size_t *len)
{
    if (!s || !out)
        return MS_E_INVAL;
    struct sbuf w = {0};
    sb_printf(&w, "%zu kernels (x@N: the integer argument at parameter byte N)\n", s->n);
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_tmpl_kernel *k = s->k[i];
        sb_printf(&w, "%s (module %llx): %llu profiled launches", k->name,
                  (unsigned long long)k->mod, (unsigned long long)k->launches);
        if (k->opaque)
            sb_printf(&w, "; opaque (traffic the profiler cannot see): whole allocations");
        else if (k->unsafe)
            sb_printf(&w, "; reaches memory no argument names: whole allocations");
        sb_printf(&w, "\n");
        for (size_t j = 0; j < k->nargs; j++) {
            const struct ms__tmpl_arg *a = &k->args[j];
            sb_printf(&w, "  pointer @%u: ", (unsigned)a->off);
            if (a->form == MS_TMPL_NONE) {
                sb_printf(&w, "no rule%s: whole allocation", a->refused ? " (refused)" : "");
            } else {
                sb_printf(&w, "%s, bytes [P + ", form_names[a->form]);
                sb_term_words(&w, &a->rule.lo);
                sb_printf(&w, ", P + ");
                sb_term_words(&w, &a->rule.hi);
                sb_printf(&w, ")");
                if (a->form == MS_TMPL_STRIDED) {
                    sb_printf(&w, " repeated ");
                    sb_term_words(&w, &a->rule.count);
                    sb_printf(&w, " times every ");
                    sb_term_words(&w, &a->rule.stride);
                    sb_printf(&w, " bytes");
                }
            }
            sb_printf(&w, "; %s; %llu launches\n", a->written ? "written" : "read-only",
                      (unsigned long long)a->launches);
        }
    }
    return sb_done(&w, out, len);
}

/* ------------------------------------------------------------------------------------------ */
/* Text reader                                                                                  */

struct tok {
    const char *s;
    size_t n;
};

struct rd {
    uint64_t line;
    char *why;
    size_t whylen;
    const char *p; /* the current line */
    size_t len, pos;
};

static MS_PRINTF_ATTR int rfail(struct rd *r, const char *fmt, ...);

static int rfail(struct rd *r, const char *fmt, ...)
{
    if (r->why && r->whylen) {
        int n = snprintf(r->why, r->whylen, "line %llu: ", (unsigned long long)r->line);
        if (n >= 0 && (size_t)n < r->whylen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->why + n, r->whylen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return MS_E_PARSE;
}

static bool next_tok(struct rd *r, struct tok *t)
{
    while (r->pos < r->len && (r->p[r->pos] == ' ' || r->p[r->pos] == '\t'))
        r->pos++;
    if (r->pos == r->len)
        return false;
    size_t st = r->pos;
    while (r->pos < r->len && r->p[r->pos] != ' ' && r->p[r->pos] != '\t')
        r->pos++;
    t->s = r->p + st;
    t->n = r->pos - st;
    return true;
}

static bool tok_is(struct tok t, const char *s)
{
    return t.n == strlen(s) && memcmp(t.s, s, t.n) == 0;
}

static bool dec_u64(struct tok t, uint64_t max, uint64_t *out)
{
    if (t.n == 0 || t.n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (t.s[i] < '0' || t.s[i] > '9')
            return false;
        unsigned d = (unsigned)(t.s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

static bool dec_i64(struct tok t, int64_t *out)
{
    bool neg = t.n > 0 && t.s[0] == '-';
    uint64_t v;
    if (!dec_u64((struct tok){t.s + neg, t.n - neg}, neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX, &v))
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* The next token, which must be "key=..."; the value into *v. */
static int need_key(struct rd *r, const char *key, struct tok *v)
{
    struct tok t;
    size_t kn = strlen(key);
    if (!next_tok(r, &t))
        return rfail(r, "missing field %s=", key);
    if (t.n <= kn || memcmp(t.s, key, kn) != 0 || t.s[kn] != '=')
        return rfail(r, "expected field %s=, found '%.*s'", key, (int)MS_MIN(t.n, (size_t)40), t.s);
    *v = (struct tok){t.s + kn + 1, t.n - kn - 1};
    return 0;
}

static int key_u64(struct rd *r, const char *key, uint64_t max, uint64_t *out)
{
    struct tok v;
    int rc = need_key(r, key, &v);
    if (rc)
        return rc;
    if (!dec_u64(v, max, out))
        return rfail(r, "%s '%.*s' is not a decimal number in 0..%llu", key,
                     (int)MS_MIN(v.n, (size_t)40), v.s, (unsigned long long)max);
    return 0;
}

static int key_bool(struct rd *r, const char *key, bool *out)
{
    uint64_t v;
    int rc = key_u64(r, key, 1, &v);
    if (rc == 0)
        *out = v != 0;
    return rc;
}

static int no_more(struct rd *r)
{
    struct tok t;
    if (next_tok(r, &t))
        return rfail(r, "unexpected extra field '%.*s'", (int)MS_MIN(t.n, (size_t)40), t.s);
    return 0;
}

/* "x<off>:<size>" with off % 4 == 0, size 4 or 8, off + size <= 4096. */
static bool parse_x(struct tok t, struct ms__tmpl_x *x)
{
    const char *colon = t.n > 1 && t.s[0] == 'x' ? memchr(t.s, ':', t.n) : NULL;
    uint64_t off, size;
    if (!colon || !dec_u64((struct tok){t.s + 1, (size_t)(colon - t.s) - 1}, 4092, &off) ||
        !dec_u64((struct tok){colon + 1, t.n - (size_t)(colon - t.s) - 1}, 8, &size))
        return false;
    if ((size != 4 && size != 8) || off % 4 || off + size > 4096)
        return false;
    *x = (struct ms__tmpl_x){(uint16_t)off, (uint8_t)size};
    return true;
}

/* Split t at the first c: head into *a, rest (after c) into *b; false when c is absent. */
static bool split(struct tok t, char c, struct tok *a, struct tok *b)
{
    const char *p = memchr(t.s, c, t.n);
    if (!p) {
        *a = t;
        return false;
    }
    *a = (struct tok){t.s, (size_t)(p - t.s)};
    *b = (struct tok){p + 1, t.n - a->n - 1};
    return true;
}

static int key_term(struct rd *r, const char *key, struct ms__tmpl_term *t)
{
    struct tok v, head, rest;
    int rc = need_key(r, key, &v);
    if (rc)
        return rc;
    memset(t, 0, sizeof *t);
    bool more = split(v, ',', &head, &rest);
    if (!dec_i64(head, &t->c0))
        return rfail(r, "%s: constant '%.*s' is not a 64-bit integer", key,
                     (int)MS_MIN(head.n, (size_t)40), head.s);
    for (int i = 0; more; i++) {
        struct tok mono = rest, c, f1, f2;
        more = split(rest, ',', &mono, &rest);
        if (i == 2)
            return rfail(r, "%s: more than two monomials", key);
        if (!split(mono, '*', &c, &f1) || !dec_i64(c, &t->c[i]) || t->c[i] == 0)
            return rfail(r, "%s: monomial '%.*s' is not <c>*x<off>:<size> with c != 0", key,
                         (int)MS_MIN(mono.n, (size_t)40), mono.s);
        bool prod = split(f1, '*', &f1, &f2);
        if (!parse_x(f1, &t->x[i][0]) || (prod && !parse_x(f2, &t->x[i][1])))
            return rfail(r,
                         "%s: factor in '%.*s' is not x<off>:<size> (off a multiple of 4, size "
                         "4 or 8, inside 4096 bytes)",
                         key, (int)MS_MIN(mono.n, (size_t)40), mono.s);
    }
    return 0;
}

static int parse_name(struct rd *r, struct tok v, char *out)
{
    size_t j = 0;
    for (size_t i = 0; i < v.n; j++) {
        if (j >= TM_MAX_NAME)
            return rfail(r, "name longer than %u bytes", TM_MAX_NAME);
        if (v.s[i] != '%') {
            out[j] = v.s[i++];
            continue;
        }
        int hi = i + 2 < v.n ? ms_hexval((unsigned char)v.s[i + 1]) : -1;
        int lo = i + 2 < v.n ? ms_hexval((unsigned char)v.s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return rfail(r, "name has a bad %%XX escape (or %%00)");
        out[j] = (char)(hi << 4 | lo);
        i += 3;
    }
    out[j] = '\0';
    return 0;
}

static int parse_kernel(struct rd *r, struct ms_tmpl_store *t, struct ms_tmpl_kernel **out)
{
    struct tok v;
    uint64_t mod = 0, launches;
    bool opaque, unsafe;
    int rc;
    if ((rc = need_key(r, "mod", &v)))
        return rc;
    if (v.n == 0 || v.n > 16)
        return rfail(r, "mod '%.*s' is not 1..16 hex digits", (int)MS_MIN(v.n, (size_t)40), v.s);
    for (size_t i = 0; i < v.n; i++) {
        int h = ms_hexval((unsigned char)v.s[i]);
        if (h < 0)
            return rfail(r, "mod '%.*s' is not 1..16 hex digits", (int)MS_MIN(v.n, (size_t)40),
                         v.s);
        mod = mod << 4 | (uint64_t)h;
    }
    if ((rc = key_u64(r, "launches", UINT64_MAX, &launches)) ||
        (rc = key_bool(r, "opaque", &opaque)) || (rc = key_bool(r, "unsafe", &unsafe)) ||
        (rc = need_key(r, "name", &v)))
        return rc;
    char name[TM_MAX_NAME + 1];
    if ((rc = parse_name(r, v, name)) || (rc = no_more(r)))
        return rc;
    if (ms_tmpl_find(t, name, mod))
        return rfail(r, "kernel '%.40s' mod %llx appears twice", name, (unsigned long long)mod);
    struct ms_tmpl_kernel *k = ms__tmpl_kernel_get(t, name, mod, true, &rc);
    if (!k)
        return rc;
    k->launches = launches;
    k->opaque = opaque;
    k->unsafe = unsafe;
    *out = k;
    return 0;
}

static int parse_arg(struct rd *r, struct ms_tmpl_kernel *k, struct ms__tmpl_arg **out)
{
    struct tok t, v;
    uint64_t off;
    if (!next_tok(r, &t) || !dec_u64(t, TM_MAX_PARAMS - 8, &off) || off % 8)
        return rfail(r, "arg: offset is not a multiple of 8 in 0..4088");
    if (k->nargs && k->args[k->nargs - 1].off >= off)
        return rfail(r, "arg %llu: args must be in ascending offset order, each once",
                     (unsigned long long)off);
    int rc;
    if ((rc = need_key(r, "form", &v)))
        return rc;
    size_t f;
    for (f = 0; f < MS_ARRAY_LEN(form_names); f++)
        if (tok_is(v, form_names[f]))
            break;
    if (f == MS_ARRAY_LEN(form_names))
        return rfail(r, "arg: form '%.*s' is not none, fixed, linear or strided",
                     (int)MS_MIN(v.n, (size_t)40), v.s);
    struct ms__tmpl_arg *a = ms__tmpl_arg_get(k, (uint32_t)off);
    if (!a)
        return MS_E_NOMEM;
    a->form = (enum ms_tmpl_form)f;
    if ((rc = key_bool(r, "written", &a->written)) || (rc = key_bool(r, "refused", &a->refused)) ||
        (rc = key_u64(r, "launches", UINT64_MAX, &a->launches)) ||
        (rc = key_term(r, "lo", &a->rule.lo)) || (rc = key_term(r, "hi", &a->rule.hi)) ||
        (rc = key_term(r, "count", &a->rule.count)) ||
        (rc = key_term(r, "stride", &a->rule.stride)) || (rc = no_more(r)))
        return rc;
    if (a->refused && a->form != MS_TMPL_NONE)
        return rfail(r, "arg %llu: refused=1 needs form=none", (unsigned long long)off);
    *out = a;
    return 0;
}

static int parse_obs(struct rd *r, struct ms__tmpl_arg *a)
{
    struct tok t[6], v;
    for (int i = 0; i < 6; i++)
        if (!next_tok(r, &t[i]))
            return rfail(r, "obs: expected <lo> <hi> <touched> <count> <len> <stride> ints=");
    struct ms__tmpl_obs o;
    memset(&o, 0, sizeof o);
    if (!dec_i64(t[0], &o.lo) || !dec_i64(t[1], &o.hi) || !dec_u64(t[2], INT64_MAX, &o.touched) ||
        !dec_u64(t[3], TM_MAX_OBS_BLOCKS, &o.count) || !dec_u64(t[4], INT64_MAX, &o.len) ||
        !dec_i64(t[5], &o.stride))
        return rfail(r, "obs: a number is malformed or out of range");
    /* consistency: the span holds what was touched; regular blocks add up */
    uint64_t span = (uint64_t)o.hi - (uint64_t)o.lo;
    if (o.touched == 0) {
        if (o.lo || o.hi || o.count || o.len || o.stride)
            return rfail(r, "obs: touched 0 needs every other number 0");
    } else if (o.hi <= o.lo || o.touched > span) {
        return rfail(r, "obs: touched bytes do not fit the span [lo, hi)");
    } else if (o.count > 0) {
        int64_t last, end;
        if (o.len == 0 || (o.count == 1) != (o.stride == 0) || o.stride < 0 ||
            (o.count > 1 && (uint64_t)o.stride <= o.len) ||
            __builtin_mul_overflow((int64_t)o.count - 1, o.stride, &last) ||
            __builtin_add_overflow(o.lo, last, &end) ||
            __builtin_add_overflow(end, (int64_t)o.len, &end) || end != o.hi ||
            o.touched / o.count != o.len || o.touched % o.count)
            return rfail(r, "obs: count, len and stride do not describe [lo, hi)");
    } else if (o.len || o.stride) {
        return rfail(r, "obs: irregular (count 0) needs len and stride 0");
    }
    int rc = need_key(r, "ints", &v);
    if (rc)
        return rc;
    struct tok rest = v, one;
    bool more = v.n > 0;
    while (more) {
        more = split(rest, ',', &one, &rest);
        struct tok f_off, f_sz, f_val, tail;
        if (o.nint == MS_TMPL_MAX_INTS)
            return rfail(r, "obs: more than %d ints", MS_TMPL_MAX_INTS);
        struct ms__tmpl_ival *iv = &o.ints[o.nint];
        uint64_t off, sz;
        if (!split(one, ':', &f_off, &tail) || !split(tail, ':', &f_sz, &f_val) ||
            !dec_u64(f_off, 4092, &off) || !dec_u64(f_sz, 8, &sz) || !dec_i64(f_val, &iv->val) ||
            (sz != 4 && sz != 8) || off % 4 || off + sz > 4096 ||
            (sz == 4 && (iv->val < INT32_MIN || iv->val > INT32_MAX)))
            return rfail(r, "obs: int '%.*s' is not <off>:<4|8>:<value> in range",
                         (int)MS_MIN(one.n, (size_t)40), one.s);
        iv->off = (uint16_t)off;
        iv->size = (uint8_t)sz;
        if (o.nint && (o.ints[o.nint - 1].off > iv->off ||
                       (o.ints[o.nint - 1].off == iv->off && o.ints[o.nint - 1].size >= iv->size)))
            return rfail(r, "obs: ints must be in ascending (offset, size) order");
        o.nint++;
    }
    if ((rc = no_more(r)))
        return rc;
    if (a->nobs >= MS_TMPL_MAX_OBS)
        return rfail(r, "obs: more than %d observations for one arg", MS_TMPL_MAX_OBS);
    size_t cap = a->nobs;
    if (ms_grow((void **)&a->obs, &cap, a->nobs + 1, sizeof *a->obs))
        return MS_E_NOMEM;
    a->obs[a->nobs++] = o;
    return 0;
}

/* Parse the whole text into t (empty). */
static int parse_all(struct rd *r, struct ms_tmpl_store *t, const char *buf, size_t len)
{
    struct ms_tmpl_kernel *k = NULL;
    struct ms__tmpl_arg *a = NULL;
    bool header = false;
    size_t pos = 0;
    int rc = 0;
    while (pos < len && rc == 0) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        r->line++;
        r->p = buf + pos;
        r->len = n;
        r->pos = 0;
        pos += n + 1;
        if (n > 0 && r->p[n - 1] == '\r')
            r->len--;
        for (size_t i = 0; i < r->len; i++) {
            unsigned char c = (unsigned char)r->p[i];
            if (c != '\t' && (c < 0x20 || c >= 0x7f))
                return rfail(r, "byte 0x%02x at column %zu is not printable ASCII", c, i + 1);
        }
        struct tok kw;
        if (!next_tok(r, &kw) || kw.s[0] == '#')
            continue;
        if (!header) {
            struct tok v;
            uint64_t ver;
            if (!tok_is(kw, "msched-templates") || !next_tok(r, &v))
                return rfail(r, "expected the header 'msched-templates %d'", MS_TMPL_VERSION);
            if (!dec_u64(v, UINT32_MAX, &ver))
                return rfail(r, "header: version is not a decimal number");
            if (ver != MS_TMPL_VERSION) {
                rfail(r, "unsupported templates version %llu (this reader knows version %d)",
                      (unsigned long long)ver, MS_TMPL_VERSION);
                return MS_E_VERSION;
            }
            rc = no_more(r);
            header = true;
        } else if (tok_is(kw, "kernel")) {
            if (k)
                return rfail(r, "kernel: the previous kernel has no 'end'");
            rc = parse_kernel(r, t, &k);
            a = NULL;
        } else if (tok_is(kw, "arg")) {
            if (!k)
                return rfail(r, "arg outside a kernel block");
            rc = parse_arg(r, k, &a);
        } else if (tok_is(kw, "obs")) {
            if (!a)
                return rfail(r, "obs before any arg of its kernel");
            rc = parse_obs(r, a);
        } else if (tok_is(kw, "end")) {
            if (!k)
                return rfail(r, "end outside a kernel block");
            rc = no_more(r);
            k = NULL;
            a = NULL;
        } else {
            return rfail(r, "unknown record '%.*s'", (int)MS_MIN(kw.n, (size_t)40), kw.s);
        }
    }
    if (rc)
        return rc;
    if (!header)
        return rfail(r, "no 'msched-templates %d' header", MS_TMPL_VERSION);
    if (k)
        return rfail(r, "kernel '%.40s' has no 'end'", k->name);
    return 0;
}

int ms_tmpl_store_parse(struct ms_tmpl_store *s, const char *buf, size_t len, char *why,
                        size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (!s || (!buf && len > 0))
        return MS_E_INVAL;
    struct ms_tmpl_store *t;
    int rc = ms_tmpl_store_new(&t);
    if (rc)
        return rc;
    struct rd r = {.why = why, .whylen = whylen};
    rc = parse_all(&r, t, buf, len);
    if (rc == MS_E_NOMEM && why && whylen)
        snprintf(why, whylen, "line %llu: out of memory", (unsigned long long)r.line);
    if (rc == 0)
        rc = ms__tmpl_merge(s, t);
    /* kernels handed over are NULL in t */
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->k[i])
            t->k[w++] = t->k[i];
    t->n = w;
    ms_tmpl_store_free(t);
    return rc;
}
