/*
 * trace.c - reader and writer of the trace format (docs/trace-format.md has the grammar).
 *
 * Design
 *   The reader takes one line of bytes (not NUL-terminated, its length given) and turns it into
 *   a struct ms_trace_rec in three steps:
 *     1. whole-line checks: length limit, no NUL byte anywhere, a trailing CR is dropped, blank
 *        and '#' comment lines end here; every other byte must be a space, a tab or printable
 *        ASCII (names carry other bytes as %XX escapes);
 *     2. tokens split on runs of spaces and tabs: the record keyword, its positional fields in
 *        their fixed order, then (task, kernel) key=value fields in any order, each at most once;
 *     3. rec_check(), the semantic rules that span fields (address ranges must not wrap, the
 *        layout must lie inside the parameter buffer, ...).
 *   The writer runs the same rec_check() before writing anything, so a record the writer accepts
 *   is exactly a record the reader can produce: format(parse(x)) parses back to an equal record.
 *   Sharing the check, rather than keeping a second list of rules in the writer, is what keeps the
 *   two sides from drifting apart; it is also why reader and writer stay in one file of about
 *   1,000 lines (rec_check and the field tables are static, seen by both and by nothing else).
 *
 *   The header's version (1 or 2) is kept in the reader: version-2 syntax (kernel keys mod= and
 *   prof=, touch records) in a version-1 trace is refused with a message naming the version.
 *
 *   The parser never reads past len and never needs the input to be terminated. Numbers are
 *   parsed by hand (no strtoull: it needs a terminator, accepts signs and spaces, and reports
 *   overflow through errno). Every error writes one line, "line N: <why>", into r->err; bytes
 *   quoted from the input are cut short and stripped of anything unprintable.
 *
 * Invariants
 *   - On success *out is written whole; on error *out is untouched.
 *   - A record's name, params and layout point into the reader's buffers (or at static empty
 *     objects), valid until the next call on that reader.
 *   - r->err is empty after a call that succeeded and holds one line after one that failed.
 *   - Every byte of heap memory goes through ms_grow/ms_free; fini returns the reader to its
 *     initial state, so a second fini is harmless.
 */
#include "trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define MS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MS_PRINTF(f, a)
#endif

/* Limits that trace.h does not name (docs/trace-format.md lists them all). */
#define TR_MAX_TASK (UINT32_MAX - 1u)       /* UINT32_MAX means "all tasks" elsewhere */
#define TR_MAX_DUR ((uint64_t)INT64_MAX)    /* durations fit a signed 64-bit clock */
#define TR_MAX_BYTES (1ull << 48)           /* 256 TiB: beyond any GPU's virtual address space */
#define TR_NAME_LEN (MS_TRACE_MAX_NAME - 1) /* longest decoded name, bytes, NUL excluded */

static const char *const rkind_names[MS_RK_COUNT] = {"device", "async", "vmm", "managed", "host"};
static const char *const dir_names[] = {"h2d", "d2h", "d2d", "h2h"};

static const uint8_t empty_params[1];

const char *ms_region_kind_name(enum ms_region_kind k)
{
    if ((unsigned)k < MS_RK_COUNT)
        return rkind_names[k];
    return "unknown";
}

const char *ms_copy_dir_name(enum ms_copy_dir d)
{
    if ((unsigned)d < MS_ARRAY_LEN(dir_names))
        return dir_names[d];
    return "unknown";
}

/* ------------------------------------------------------------------------------------------ */
/* Shared semantic check                                                                        */

/* Length of a NUL-terminated name, or SIZE_MAX when it is longer than TR_NAME_LEN. */
static size_t name_len(const char *s)
{
    if (!s)
        return 0;
    for (size_t i = 0; i <= TR_NAME_LEN; i++)
        if (s[i] == '\0')
            return i;
    return SIZE_MAX;
}

static bool range_ok(uint64_t addr, uint64_t bytes)
{
    return bytes <= TR_MAX_BYTES && addr <= UINT64_MAX - bytes;
}

/*
 * The rules of docs/trace-format.md that a single token cannot show. Returns NULL when rec is
 * valid, else a static reason.
 */
static const char *rec_check(const struct ms_trace_rec *rec)
{
    switch (rec->kind) {
    case MS_TR_HEADER:
        return rec->version >= MS_TRACE_VERSION_MIN && rec->version <= MS_TRACE_VERSION_MAX
                   ? NULL
                   : "unsupported version";
    case MS_TR_SYNC:
    case MS_TR_FREE: break;
    case MS_TR_TASK:
        if (name_len(rec->name) == SIZE_MAX)
            return "name longer than 511 bytes";
        break;
    case MS_TR_ALLOC:
        if ((unsigned)rec->rkind >= MS_RK_COUNT)
            return "unknown region kind";
        if (rec->addr == 0)
            return "address 0 cannot be an allocation";
        if (rec->size == 0 || rec->size > TR_MAX_BYTES)
            return "size out of range 1..281474976710656";
        if (!range_ok(rec->addr, rec->size))
            return "address + size wraps past 2^64";
        break;
    case MS_TR_KERNEL:
        for (int i = 0; i < 3; i++)
            if (rec->grid[i] == 0 || rec->block[i] == 0)
                return "grid and block dimensions must be >= 1";
        if (name_len(rec->name) == SIZE_MAX)
            return "name longer than 511 bytes";
        if (rec->params_len > MS_TRACE_MAX_PARAMS)
            return "more than 4096 parameter bytes";
        if (rec->params_len > 0 && !rec->params)
            return "parameter bytes missing";
        if (rec->nlayout > MS_TRACE_MAX_LAYOUT)
            return "more than 1024 layout entries";
        if ((unsigned)rec->prof > MS_PROF_OPAQUE)
            return "unknown profiling state";
        if (rec->nlayout > 0 && !rec->layout)
            return "layout entries missing";
        for (size_t i = 0; i < rec->nlayout; i++) {
            const struct ms_param_layout *e = &rec->layout[i];
            if (e->size == 0)
                return "layout entry of size 0";
            if ((uint64_t)e->offset + e->size > rec->params_len)
                return "layout entry outside the parameter bytes";
            if (i > 0 && e->offset < (uint64_t)rec->layout[i - 1].offset + rec->layout[i - 1].size)
                return "layout entries overlap or are not in ascending order";
        }
        break;
    case MS_TR_COPY:
        if ((unsigned)rec->dir >= MS_ARRAY_LEN(dir_names))
            return "unknown copy direction";
        if (rec->size > TR_MAX_BYTES)
            return "bytes out of range 0..281474976710656";
        if (!range_ok(rec->dst, rec->size))
            return "destination + bytes wraps past 2^64";
        if (!range_ok(rec->src, rec->size))
            return "source + bytes wraps past 2^64";
        break;
    case MS_TR_MEMSET:
        if (rec->size > TR_MAX_BYTES)
            return "bytes out of range 0..281474976710656";
        if (!range_ok(rec->addr, rec->size))
            return "destination + bytes wraps past 2^64";
        break;
    case MS_TR_TOUCH:
        if (rec->arg < -1 || rec->arg > (int32_t)(MS_TRACE_MAX_PARAMS - 8) ||
            (rec->arg >= 0 && rec->arg % 8 != 0))
            return "arg must be -, or a multiple of 8 in 0..4088";
        if (rec->mode == 0 || rec->mode > (MS_TOUCH_R | MS_TOUCH_W))
            return "mode must be r, w or rw";
        if (rec->size == 0 || rec->size > TR_MAX_BYTES)
            return "bytes out of range 1..281474976710656";
        if (!range_ok(rec->addr, rec->size))
            return "address + bytes wraps past 2^64";
        break;
    default: return "unknown record kind";
    }
    if (rec->kind != MS_TR_HEADER && rec->task > TR_MAX_TASK)
        return "task id out of range 0..4294967294";
    bool timed = rec->kind == MS_TR_KERNEL || rec->kind == MS_TR_COPY || rec->kind == MS_TR_MEMSET;
    if (timed && rec->dur_ns > TR_MAX_DUR)
        return "duration out of range 0..9223372036854775807";
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Reader                                                                                       */

struct tok {
    const char *s;
    size_t n;
};

struct cursor {
    const char *p;
    size_t len, pos;
};

void ms_trace_reader_init(struct ms_trace_reader *r)
{
    memset(r, 0, sizeof *r);
}

void ms_trace_reader_fini(struct ms_trace_reader *r)
{
    if (!r)
        return;
    ms_free(r->name);
    ms_free(r->params);
    ms_free(r->layout);
    ms_trace_reader_init(r);
}

static MS_PRINTF(3, 4) int fail(struct ms_trace_reader *r, int code, const char *fmt, ...)
{
    int n = snprintf(r->err, sizeof r->err, "line %llu: ", (unsigned long long)r->line);
    if (n < 0 || (size_t)n >= sizeof r->err)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, sizeof r->err - (size_t)n, fmt, ap);
    va_end(ap);
    return code;
}

/* Copy at most 40 bytes of t into q (cap >= 48), unprintable bytes as '?', "..." if cut. */
static const char *quote(char *q, size_t cap, struct tok t)
{
    size_t room = MS_MIN(cap - 4, (size_t)40), i, j = 0;
    for (i = 0; i < t.n && j < room; i++) {
        unsigned char c = (unsigned char)t.s[i];
        q[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (i < t.n) {
        memcpy(q + j, "...", 3);
        j += 3;
    }
    q[j] = '\0';
    return q;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

static bool next_tok(struct cursor *c, struct tok *t)
{
    while (c->pos < c->len && is_space(c->p[c->pos]))
        c->pos++;
    if (c->pos == c->len)
        return false;
    size_t start = c->pos;
    while (c->pos < c->len && !is_space(c->p[c->pos]))
        c->pos++;
    t->s = c->p + start;
    t->n = c->pos - start;
    return true;
}

static bool tok_is(struct tok t, const char *s)
{
    size_t n = strlen(s);
    return t.n == n && memcmp(t.s, s, n) == 0;
}

enum num_status { NUM_OK = 0, NUM_SYNTAX, NUM_RANGE };

/* Unsigned decimal: digits only, value in [min, max]. */
static enum num_status dec_u64(struct tok t, uint64_t min, uint64_t max, uint64_t *out)
{
    if (t.n == 0)
        return NUM_SYNTAX;
    for (size_t i = 0; i < t.n; i++)
        if (t.s[i] < '0' || t.s[i] > '9')
            return NUM_SYNTAX;
    uint64_t v = 0;
    for (size_t i = 0; i < t.n; i++) {
        unsigned d = (unsigned)(t.s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NUM_RANGE;
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return NUM_RANGE;
    *out = v;
    return NUM_OK;
}

/* Signed 32-bit decimal: an optional '-', then digits. */
static enum num_status dec_i32(struct tok t, int32_t *out)
{
    bool neg = t.n > 0 && t.s[0] == '-';
    struct tok mag = {t.s + neg, t.n - neg};
    uint64_t v;
    enum num_status st = dec_u64(mag, 0, neg ? 2147483648u : 2147483647u, &v);
    if (st != NUM_OK)
        return st;
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return NUM_OK;
}

/* Hexadecimal with a 0x or 0X prefix, at most 64 bits of value. */
static enum num_status hex_u64(struct tok t, uint64_t *out)
{
    if (t.n < 3 || t.s[0] != '0' || (t.s[1] != 'x' && t.s[1] != 'X'))
        return NUM_SYNTAX;
    for (size_t i = 2; i < t.n; i++)
        if (ms_hexval((unsigned char)t.s[i]) < 0)
            return NUM_SYNTAX;
    uint64_t v = 0;
    for (size_t i = 2; i < t.n; i++) {
        if (v > (UINT64_MAX >> 4))
            return NUM_RANGE;
        v = (v << 4) | (uint64_t)ms_hexval((unsigned char)t.s[i]);
    }
    *out = v;
    return NUM_OK;
}

/* Parsing context for one line: the reader, the record keyword, the cursor. */
struct pctx {
    struct ms_trace_reader *r;
    const char *kw;
    struct cursor c;
};

static int num_fail(struct pctx *p, const char *field, struct tok t, enum num_status st,
                    const char *expect)
{
    char q[48];
    if (st == NUM_SYNTAX)
        return fail(p->r, MS_E_PARSE, "%s: %s '%s' is not %s", p->kw, field, quote(q, sizeof q, t),
                    expect);
    return fail(p->r, MS_E_PARSE, "%s: %s '%s' is out of range", p->kw, field,
                quote(q, sizeof q, t));
}

/* The next positional field; a missing one, or a key=value in its place, is an error. */
static int need_pos(struct pctx *p, const char *field, struct tok *t)
{
    if (!next_tok(&p->c, t))
        return fail(p->r, MS_E_PARSE, "%s: missing field <%s>", p->kw, field);
    if (memchr(t->s, '=', t->n)) {
        char q[48];
        return fail(p->r, MS_E_PARSE, "%s: missing field <%s> before '%s'", p->kw, field,
                    quote(q, sizeof q, *t));
    }
    return 0;
}

static int pos_u64(struct pctx *p, const char *field, uint64_t min, uint64_t max, uint64_t *out)
{
    struct tok t;
    int rc = need_pos(p, field, &t);
    if (rc)
        return rc;
    enum num_status st = dec_u64(t, min, max, out);
    if (st != NUM_OK) {
        char q[48];
        if (st == NUM_SYNTAX)
            return num_fail(p, field, t, st, "a decimal number");
        return fail(p->r, MS_E_PARSE, "%s: %s '%s' is out of range %llu..%llu", p->kw, field,
                    quote(q, sizeof q, t), (unsigned long long)min, (unsigned long long)max);
    }
    return 0;
}

static int pos_u32(struct pctx *p, const char *field, uint64_t max, uint32_t *out)
{
    uint64_t v;
    int rc = pos_u64(p, field, 0, max, &v);
    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

static int pos_addr(struct pctx *p, const char *field, uint64_t *out)
{
    struct tok t;
    int rc = need_pos(p, field, &t);
    if (rc)
        return rc;
    enum num_status st = hex_u64(t, out);
    if (st != NUM_OK)
        return num_fail(p, field, t, st, "a hexadecimal address (0x...)");
    return 0;
}

static int no_more(struct pctx *p)
{
    struct tok t;
    if (next_tok(&p->c, &t)) {
        char q[48];
        return fail(p->r, MS_E_PARSE, "%s: unexpected extra field '%s'", p->kw,
                    quote(q, sizeof q, t));
    }
    return 0;
}

/* Key=value fields: walk the rest of the line, calling back per key; each key at most once. */
typedef int (*key_fn)(struct pctx *p, int key, struct tok val, void *arg);

static int keyed(struct pctx *p, const char *const *keys, int nkeys, unsigned required, key_fn fn,
                 void *arg)
{
    unsigned seen = 0;
    struct tok t;
    char q[48];
    while (next_tok(&p->c, &t)) {
        const char *eq = memchr(t.s, '=', t.n);
        if (!eq)
            return fail(p->r, MS_E_PARSE, "%s: unexpected field '%s' (expected key=value)", p->kw,
                        quote(q, sizeof q, t));
        struct tok key = {t.s, (size_t)(eq - t.s)};
        struct tok val = {eq + 1, t.n - key.n - 1};
        int k;
        for (k = 0; k < nkeys; k++)
            if (tok_is(key, keys[k]))
                break;
        if (k == nkeys)
            return fail(p->r, MS_E_PARSE, "%s: unknown field '%s'", p->kw, quote(q, sizeof q, key));
        if (seen & (1u << k))
            return fail(p->r, MS_E_PARSE, "%s: duplicate field %s=", p->kw, keys[k]);
        seen |= 1u << k;
        int rc = fn(p, k, val, arg);
        if (rc)
            return rc;
    }
    for (int k = 0; k < nkeys; k++)
        if ((required & (1u << k)) && !(seen & (1u << k)))
            return fail(p->r, MS_E_PARSE, "%s: missing field %s=", p->kw, keys[k]);
    return 0;
}

static int nomem(struct pctx *p)
{
    return fail(p->r, MS_E_NOMEM, "%s: out of memory", p->kw);
}

/* Decode a %XX-escaped name into the reader's name buffer. */
static int parse_name(struct pctx *p, struct tok v, const char **out)
{
    char q[48];
    size_t n = 0;
    for (size_t i = 0; i < v.n; n++) {
        if (v.s[i] != '%') {
            i++;
            continue;
        }
        if (v.n - i < 3)
            return fail(p->r, MS_E_PARSE, "%s: name '%s' has a truncated %%XX escape", p->kw,
                        quote(q, sizeof q, v));
        int hi = ms_hexval((unsigned char)v.s[i + 1]), lo = ms_hexval((unsigned char)v.s[i + 2]);
        if (hi < 0 || lo < 0)
            return fail(p->r, MS_E_PARSE, "%s: name '%s' has a bad %%XX escape", p->kw,
                        quote(q, sizeof q, v));
        if (hi == 0 && lo == 0)
            return fail(p->r, MS_E_PARSE, "%s: name '%s' contains %%00 (NUL)", p->kw,
                        quote(q, sizeof q, v));
        i += 3;
    }
    if (n > TR_NAME_LEN)
        return fail(p->r, MS_E_PARSE, "%s: name is %zu bytes long (max %u)", p->kw, n,
                    (unsigned)TR_NAME_LEN);
    if (n == 0) {
        *out = "";
        return 0;
    }
    void *buf = p->r->name;
    if (ms_grow(&buf, &p->r->name_cap, n + 1, 1) != MS_OK)
        return nomem(p);
    p->r->name = buf;
    size_t j = 0;
    for (size_t i = 0; i < v.n; j++) {
        if (v.s[i] == '%') {
            p->r->name[j] = (char)(ms_hexval((unsigned char)v.s[i + 1]) << 4 |
                                   ms_hexval((unsigned char)v.s[i + 2]));
            i += 3;
        } else {
            p->r->name[j] = v.s[i++];
        }
    }
    p->r->name[j] = '\0';
    *out = p->r->name;
    return 0;
}

/* ---- task ---- */

enum { TK_PRIO, TK_NAME };
static const char *const task_keys[] = {"prio", "name"};

static int task_key(struct pctx *p, int key, struct tok val, void *arg)
{
    struct ms_trace_rec *rec = arg;
    if (key == TK_NAME)
        return parse_name(p, val, &rec->name);
    enum num_status st = dec_i32(val, &rec->prio);
    if (st != NUM_OK) {
        char q[48];
        if (st == NUM_SYNTAX)
            return num_fail(p, "prio", val, st, "a decimal integer");
        return fail(p->r, MS_E_PARSE, "%s: prio '%s' is out of range -2147483648..2147483647",
                    p->kw, quote(q, sizeof q, val));
    }
    return 0;
}

static int parse_task(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task);
    if (rc)
        return rc;
    return keyed(p, task_keys, 2, 3u, task_key, rec);
}

/* ---- alloc, free ---- */

static int parse_alloc(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    struct tok t;
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) || (rc = pos_addr(p, "addr", &rec->addr)))
        return rc;
    if ((rc = pos_u64(p, "size", 1, TR_MAX_BYTES, &rec->size)) || (rc = need_pos(p, "kind", &t)))
        return rc;
    int k;
    for (k = 0; k < MS_RK_COUNT; k++)
        if (tok_is(t, rkind_names[k]))
            break;
    if (k == MS_RK_COUNT) {
        char q[48];
        return fail(p->r, MS_E_PARSE,
                    "%s: kind '%s' is not one of device, async, vmm, managed, host", p->kw,
                    quote(q, sizeof q, t));
    }
    rec->rkind = (enum ms_region_kind)k;
    return no_more(p);
}

static int parse_free(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) || (rc = pos_addr(p, "addr", &rec->addr)))
        return rc;
    return no_more(p);
}

/* ---- kernel ---- */

enum { KK_GRID, KK_BLOCK, KK_NAME, KK_PARAMS, KK_LAYOUT, KK_MOD, KK_PROF };
static const char *const kernel_keys[] = {"grid",   "block", "name", "params",
                                          "layout", "mod",   "prof"};

/* "x,y,z", each 1..UINT32_MAX. */
static int parse_dim3(struct pctx *p, const char *field, struct tok v, uint32_t out[3])
{
    char q[48];
    size_t pos = 0;
    for (int i = 0; i < 3; i++) {
        size_t start = pos;
        while (pos < v.n && v.s[pos] != ',')
            pos++;
        struct tok part = {v.s + start, pos - start};
        if ((i < 2) != (pos < v.n))
            return fail(p->r, MS_E_PARSE, "%s: %s '%s' is not three numbers x,y,z", p->kw, field,
                        quote(q, sizeof q, v));
        uint64_t x;
        enum num_status st = dec_u64(part, 1, UINT32_MAX, &x);
        if (st == NUM_SYNTAX)
            return fail(p->r, MS_E_PARSE, "%s: %s '%s' is not three numbers x,y,z", p->kw, field,
                        quote(q, sizeof q, v));
        if (st == NUM_RANGE)
            return fail(p->r, MS_E_PARSE, "%s: %s '%s': each dimension must be 1..4294967295",
                        p->kw, field, quote(q, sizeof q, v));
        out[i] = (uint32_t)x;
        pos++; /* past the comma */
    }
    return 0;
}

static int parse_params(struct pctx *p, struct tok v, struct ms_trace_rec *rec)
{
    char q[48];
    if (v.n % 2 != 0)
        return fail(p->r, MS_E_PARSE, "%s: params has an odd number of hex digits (%zu)", p->kw,
                    v.n);
    if (v.n / 2 > MS_TRACE_MAX_PARAMS)
        return fail(p->r, MS_E_PARSE, "%s: params is %zu bytes (max %u)", p->kw, v.n / 2,
                    MS_TRACE_MAX_PARAMS);
    for (size_t i = 0; i < v.n; i++)
        if (ms_hexval((unsigned char)v.s[i]) < 0)
            return fail(p->r, MS_E_PARSE, "%s: params '%s' is not hex bytes", p->kw,
                        quote(q, sizeof q, v));
    size_t n = v.n / 2;
    rec->params_len = n;
    if (n == 0) {
        rec->params = empty_params;
        return 0;
    }
    void *buf = p->r->params;
    if (ms_grow(&buf, &p->r->params_cap, n, 1) != MS_OK)
        return nomem(p);
    p->r->params = buf;
    for (size_t i = 0; i < n; i++)
        p->r->params[i] = (uint8_t)(ms_hexval((unsigned char)v.s[2 * i]) << 4 |
                                    ms_hexval((unsigned char)v.s[2 * i + 1]));
    rec->params = p->r->params;
    return 0;
}

static int parse_layout(struct pctx *p, struct tok v, struct ms_trace_rec *rec)
{
    char q[48];
    if (v.n == 0)
        return fail(p->r, MS_E_PARSE, "%s: layout is empty (leave the field out when unknown)",
                    p->kw);
    size_t n = 1;
    for (size_t i = 0; i < v.n; i++)
        n += v.s[i] == ',';
    if (n > MS_TRACE_MAX_LAYOUT)
        return fail(p->r, MS_E_PARSE, "%s: layout has %zu entries (max %u)", p->kw, n,
                    MS_TRACE_MAX_LAYOUT);
    rec->nlayout = n;
    void *buf = p->r->layout;
    if (ms_grow(&buf, &p->r->layout_cap, n, sizeof *p->r->layout) != MS_OK)
        return nomem(p);
    p->r->layout = buf;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t start = pos;
        while (pos < v.n && v.s[pos] != ',')
            pos++;
        struct tok e = {v.s + start, pos - start};
        pos++;
        const char *colon = memchr(e.s, ':', e.n);
        if (!colon)
            return fail(p->r, MS_E_PARSE, "%s: layout entry '%s' is not offset:size", p->kw,
                        quote(q, sizeof q, e));
        struct tok off = {e.s, (size_t)(colon - e.s)};
        struct tok sz = {colon + 1, e.n - off.n - 1};
        uint64_t o, s;
        enum num_status st = dec_u64(off, 0, UINT32_MAX, &o);
        if (st == NUM_OK)
            st = dec_u64(sz, 0, UINT32_MAX, &s);
        if (st == NUM_SYNTAX)
            return fail(p->r, MS_E_PARSE, "%s: layout entry '%s' is not offset:size", p->kw,
                        quote(q, sizeof q, e));
        if (st == NUM_RANGE)
            return fail(p->r, MS_E_PARSE, "%s: layout entry '%s' is out of range", p->kw,
                        quote(q, sizeof q, e));
        p->r->layout[i].offset = (uint32_t)o;
        p->r->layout[i].size = (uint32_t)s;
    }
    rec->layout = p->r->layout;
    return 0;
}

static int kernel_key(struct pctx *p, int key, struct tok val, void *arg)
{
    struct ms_trace_rec *rec = arg;
    switch (key) {
    case KK_GRID: return parse_dim3(p, "grid", val, rec->grid);
    case KK_BLOCK: return parse_dim3(p, "block", val, rec->block);
    case KK_NAME: return parse_name(p, val, &rec->name);
    case KK_PARAMS: return parse_params(p, val, rec);
    case KK_LAYOUT: return parse_layout(p, val, rec);
    default: break;
    }
    char q[48];
    if (p->r->version < 2)
        return fail(p->r, MS_E_PARSE, "%s: %s= needs msched-trace 2 (this trace is version %u)",
                    p->kw, kernel_keys[key], (unsigned)p->r->version);
    if (key == KK_PROF) {
        if (tok_is(val, "seen"))
            rec->prof = MS_PROF_SEEN;
        else if (tok_is(val, "opaque"))
            rec->prof = MS_PROF_OPAQUE;
        else
            return fail(p->r, MS_E_PARSE, "%s: prof '%s' is not seen or opaque", p->kw,
                        quote(q, sizeof q, val));
        return 0;
    }
    /* mod: 1..16 hex digits, no prefix */
    if (val.n == 0 || val.n > 16)
        return fail(p->r, MS_E_PARSE, "%s: mod '%s' is not 1..16 hex digits", p->kw,
                    quote(q, sizeof q, val));
    uint64_t m = 0;
    for (size_t i = 0; i < val.n; i++) {
        int h = ms_hexval((unsigned char)val.s[i]);
        if (h < 0)
            return fail(p->r, MS_E_PARSE, "%s: mod '%s' is not 1..16 hex digits", p->kw,
                        quote(q, sizeof q, val));
        m = (m << 4) | (uint64_t)h;
    }
    rec->mod = m;
    return 0;
}

static int parse_kernel(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) ||
        (rc = pos_u32(p, "stream", UINT32_MAX, &rec->stream)) ||
        (rc = pos_u64(p, "dur_ns", 0, TR_MAX_DUR, &rec->dur_ns)))
        return rc;
    return keyed(p, kernel_keys, 7, 0xfu, kernel_key, rec);
}

/* ---- copy, memset, sync ---- */

static int parse_copy(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    struct tok t;
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) ||
        (rc = pos_u32(p, "stream", UINT32_MAX, &rec->stream)) ||
        (rc = pos_u64(p, "dur_ns", 0, TR_MAX_DUR, &rec->dur_ns)) || (rc = need_pos(p, "dir", &t)))
        return rc;
    size_t d;
    for (d = 0; d < MS_ARRAY_LEN(dir_names); d++)
        if (tok_is(t, dir_names[d]))
            break;
    if (d == MS_ARRAY_LEN(dir_names)) {
        char q[48];
        return fail(p->r, MS_E_PARSE, "%s: dir '%s' is not one of h2d, d2h, d2d, h2h", p->kw,
                    quote(q, sizeof q, t));
    }
    rec->dir = (enum ms_copy_dir)d;
    if ((rc = pos_addr(p, "dst", &rec->dst)) || (rc = pos_addr(p, "src", &rec->src)) ||
        (rc = pos_u64(p, "bytes", 0, TR_MAX_BYTES, &rec->size)))
        return rc;
    return no_more(p);
}

static int parse_memset(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) ||
        (rc = pos_u32(p, "stream", UINT32_MAX, &rec->stream)) ||
        (rc = pos_u64(p, "dur_ns", 0, TR_MAX_DUR, &rec->dur_ns)) ||
        (rc = pos_addr(p, "dst", &rec->addr)) ||
        (rc = pos_u64(p, "bytes", 0, TR_MAX_BYTES, &rec->size)))
        return rc;
    return no_more(p);
}

static int parse_sync(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task);
    return rc ? rc : no_more(p);
}

/* touch <tid> <arg> <mode> <addr> <bytes> (version 2) */
static int parse_touch(struct pctx *p, struct ms_trace_rec *rec)
{
    int rc;
    struct tok t;
    char q[48];
    if (p->r->version < 2)
        return fail(p->r, MS_E_PARSE,
                    "touch: the touch record needs msched-trace 2 (this trace is version %u)",
                    (unsigned)p->r->version);
    if ((rc = pos_u32(p, "tid", TR_MAX_TASK, &rec->task)) || (rc = need_pos(p, "arg", &t)))
        return rc;
    if (tok_is(t, "-")) {
        rec->arg = -1;
    } else {
        uint64_t a;
        if (dec_u64(t, 0, MS_TRACE_MAX_PARAMS - 8, &a) != NUM_OK || a % 8 != 0)
            return fail(p->r, MS_E_PARSE, "touch: arg '%s' is not -, or a multiple of 8 in 0..4088",
                        quote(q, sizeof q, t));
        rec->arg = (int32_t)a;
    }
    if ((rc = need_pos(p, "mode", &t)))
        return rc;
    if (tok_is(t, "r"))
        rec->mode = MS_TOUCH_R;
    else if (tok_is(t, "w"))
        rec->mode = MS_TOUCH_W;
    else if (tok_is(t, "rw"))
        rec->mode = MS_TOUCH_R | MS_TOUCH_W;
    else
        return fail(p->r, MS_E_PARSE, "touch: mode '%s' is not r, w or rw", quote(q, sizeof q, t));
    if ((rc = pos_addr(p, "addr", &rec->addr)) ||
        (rc = pos_u64(p, "bytes", 1, TR_MAX_BYTES, &rec->size)))
        return rc;
    return no_more(p);
}

static int parse_header(struct pctx *p, struct ms_trace_rec *rec)
{
    struct tok t;
    char q[48];
    if (!next_tok(&p->c, &t))
        return fail(p->r, MS_E_PARSE, "header: missing version (expected 'msched-trace %d')",
                    MS_TRACE_VERSION_MAX);
    uint64_t v;
    if (dec_u64(t, 0, UINT32_MAX, &v) != NUM_OK)
        return fail(p->r, MS_E_PARSE, "header: version '%s' is not a decimal number",
                    quote(q, sizeof q, t));
    if (v < MS_TRACE_VERSION_MIN || v > MS_TRACE_VERSION_MAX)
        return fail(p->r, MS_E_VERSION,
                    "unsupported trace version %llu (this reader knows versions %d to %d)",
                    (unsigned long long)v, MS_TRACE_VERSION_MIN, MS_TRACE_VERSION_MAX);
    rec->version = (uint32_t)v;
    return no_more(p);
}

static const struct {
    const char *kw;
    enum ms_trace_kind kind;
    int (*parse)(struct pctx *p, struct ms_trace_rec *rec);
} record_kinds[] = {
    {"msched-trace", MS_TR_HEADER, parse_header}, {"task", MS_TR_TASK, parse_task},
    {"alloc", MS_TR_ALLOC, parse_alloc},          {"free", MS_TR_FREE, parse_free},
    {"kernel", MS_TR_KERNEL, parse_kernel},       {"copy", MS_TR_COPY, parse_copy},
    {"memset", MS_TR_MEMSET, parse_memset},       {"sync", MS_TR_SYNC, parse_sync},
    {"touch", MS_TR_TOUCH, parse_touch},
};

int ms_trace_parse_line(struct ms_trace_reader *r, const char *line, size_t len,
                        struct ms_trace_rec *out)
{
    if (!r)
        return MS_E_INVAL;
    r->line++;
    r->err[0] = '\0';
    if (!out || (!line && len > 0))
        return fail(r, MS_E_INVAL, "no line or no record to fill");
    if (len > MS_TRACE_MAX_LINE)
        return fail(r, MS_E_PARSE, "line is %zu bytes long (max %u)", len, MS_TRACE_MAX_LINE);
    const char *nul = len ? memchr(line, '\0', len) : NULL;
    if (nul)
        return fail(r, MS_E_PARSE, "NUL byte at column %zu", (size_t)(nul - line) + 1);
    if (len > 0 && line[len - 1] == '\r')
        len--;

    size_t pos = 0;
    while (pos < len && is_space(line[pos]))
        pos++;
    if (pos == len || line[pos] == '#')
        return 0;
    for (size_t i = pos; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (!(c == '\t' || (c >= 0x20 && c < 0x7f)))
            return fail(
                r, MS_E_PARSE,
                "byte 0x%02x at column %zu is not printable ASCII (names escape it as %%XX)", c,
                i + 1);
    }

    struct pctx p = {r, "", {line, len, pos}};
    struct tok kw;
    next_tok(&p.c, &kw);
    size_t k;
    for (k = 0; k < MS_ARRAY_LEN(record_kinds); k++)
        if (tok_is(kw, record_kinds[k].kw))
            break;
    char q[48];
    if (!r->have_header && k != 0)
        return fail(r, MS_E_PARSE, "expected the header 'msched-trace N' before '%s'",
                    quote(q, sizeof q, kw));
    if (k == MS_ARRAY_LEN(record_kinds))
        return fail(r, MS_E_PARSE, "unknown record kind '%s'", quote(q, sizeof q, kw));
    if (k == 0 && r->have_header)
        return fail(r, MS_E_PARSE, "duplicate header");

    struct ms_trace_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.kind = record_kinds[k].kind;
    p.kw = record_kinds[k].kw;
    int rc = record_kinds[k].parse(&p, &rec);
    if (rc)
        return rc;
    const char *why = rec_check(&rec);
    if (why)
        return fail(r, MS_E_PARSE, "%s: %s", p.kw, why);
    if (rec.kind == MS_TR_HEADER) {
        r->have_header = true;
        r->version = rec.version;
    }
    *out = rec;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Writer                                                                                       */

/* A bounded output buffer; full is sticky. Invariant: n < cap, so a NUL always fits. */
struct wbuf {
    char *b;
    size_t cap, n;
    bool full;
};

static void put(struct wbuf *w, const char *s, size_t n)
{
    if (w->full || n >= w->cap - w->n) {
        w->full = true;
        return;
    }
    memcpy(w->b + w->n, s, n);
    w->n += n;
}

static void puts_(struct wbuf *w, const char *s)
{
    put(w, s, strlen(s));
}

static void put_u64(struct wbuf *w, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(w, tmp + i, sizeof tmp - i);
}

static void put_i64(struct wbuf *w, int64_t v)
{
    if (v < 0) {
        put(w, "-", 1);
        put_u64(w, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(w, (uint64_t)v);
    }
}

static const char hexdig[] = "0123456789abcdef";

static void put_hex(struct wbuf *w, uint64_t v)
{
    char tmp[18];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = hexdig[v & 15];
        v >>= 4;
    } while (v);
    tmp[--i] = 'x';
    tmp[--i] = '0';
    put(w, tmp + i, sizeof tmp - i);
}

static void put_sp_u64(struct wbuf *w, uint64_t v)
{
    put(w, " ", 1);
    put_u64(w, v);
}

static void put_sp_hex(struct wbuf *w, uint64_t v)
{
    put(w, " ", 1);
    put_hex(w, v);
}

static void put_name(struct wbuf *w, const char *s)
{
    static const char upper[] = "0123456789ABCDEF";
    puts_(w, " name=");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c > 0x20 && c < 0x7f && c != '%') {
            put(w, (const char *)&c, 1);
        } else {
            char e[3] = {'%', upper[c >> 4], upper[c & 15]};
            put(w, e, 3);
        }
    }
}

static void put_dim3(struct wbuf *w, const char *key, const uint32_t d[3])
{
    puts_(w, key);
    for (int i = 0; i < 3; i++) {
        if (i)
            put(w, ",", 1);
        put_u64(w, d[i]);
    }
}

int ms_trace_format(const struct ms_trace_rec *rec, char *buf, size_t cap)
{
    if (!rec || (!buf && cap > 0) || rec_check(rec))
        return MS_E_INVAL;
    if (cap == 0)
        return MS_E_NOSPACE;
    struct wbuf w = {buf, cap, 0, false};
    switch (rec->kind) {
    case MS_TR_HEADER:
        puts_(&w, "msched-trace");
        put_sp_u64(&w, rec->version);
        break;
    case MS_TR_TASK:
        puts_(&w, "task");
        put_sp_u64(&w, rec->task);
        puts_(&w, " prio=");
        put_i64(&w, rec->prio);
        put_name(&w, rec->name);
        break;
    case MS_TR_ALLOC:
        puts_(&w, "alloc");
        put_sp_u64(&w, rec->task);
        put_sp_hex(&w, rec->addr);
        put_sp_u64(&w, rec->size);
        put(&w, " ", 1);
        puts_(&w, ms_region_kind_name(rec->rkind));
        break;
    case MS_TR_FREE:
        puts_(&w, "free");
        put_sp_u64(&w, rec->task);
        put_sp_hex(&w, rec->addr);
        break;
    case MS_TR_KERNEL:
        puts_(&w, "kernel");
        put_sp_u64(&w, rec->task);
        put_sp_u64(&w, rec->stream);
        put_sp_u64(&w, rec->dur_ns);
        put_dim3(&w, " grid=", rec->grid);
        put_dim3(&w, " block=", rec->block);
        put_name(&w, rec->name);
        puts_(&w, " params=");
        for (size_t i = 0; i < rec->params_len; i++) {
            char h[2] = {hexdig[rec->params[i] >> 4], hexdig[rec->params[i] & 15]};
            put(&w, h, 2);
        }
        if (rec->nlayout > 0) {
            puts_(&w, " layout=");
            for (size_t i = 0; i < rec->nlayout; i++) {
                if (i)
                    put(&w, ",", 1);
                put_u64(&w, rec->layout[i].offset);
                put(&w, ":", 1);
                put_u64(&w, rec->layout[i].size);
            }
        }
        if (rec->mod != 0) {
            char h[16];
            size_t i = sizeof h;
            uint64_t m = rec->mod;
            while (m) {
                h[--i] = hexdig[m & 15];
                m >>= 4;
            }
            puts_(&w, " mod=");
            put(&w, h + i, sizeof h - i);
        }
        if (rec->prof == MS_PROF_SEEN)
            puts_(&w, " prof=seen");
        else if (rec->prof == MS_PROF_OPAQUE)
            puts_(&w, " prof=opaque");
        break;
    case MS_TR_TOUCH:
        puts_(&w, "touch");
        put_sp_u64(&w, rec->task);
        put(&w, " ", 1);
        if (rec->arg < 0)
            put(&w, "-", 1);
        else
            put_u64(&w, (uint64_t)rec->arg);
        puts_(&w, rec->mode == MS_TOUCH_R ? " r" : rec->mode == MS_TOUCH_W ? " w" : " rw");
        put_sp_hex(&w, rec->addr);
        put_sp_u64(&w, rec->size);
        break;
    case MS_TR_COPY:
        puts_(&w, "copy");
        put_sp_u64(&w, rec->task);
        put_sp_u64(&w, rec->stream);
        put_sp_u64(&w, rec->dur_ns);
        put(&w, " ", 1);
        puts_(&w, ms_copy_dir_name(rec->dir));
        put_sp_hex(&w, rec->dst);
        put_sp_hex(&w, rec->src);
        put_sp_u64(&w, rec->size);
        break;
    case MS_TR_MEMSET:
        puts_(&w, "memset");
        put_sp_u64(&w, rec->task);
        put_sp_u64(&w, rec->stream);
        put_sp_u64(&w, rec->dur_ns);
        put_sp_hex(&w, rec->addr);
        put_sp_u64(&w, rec->size);
        break;
    case MS_TR_SYNC:
        puts_(&w, "sync");
        put_sp_u64(&w, rec->task);
        break;
    }
    put(&w, "\n", 1);
    buf[w.n] = '\0';
    if (w.full) {
        buf[0] = '\0';
        return MS_E_NOSPACE;
    }
    return (int)w.n;
}

static const char *nonnull(const char *s)
{
    return s ? s : "";
}

bool ms_trace_rec_equal(const struct ms_trace_rec *a, const struct ms_trace_rec *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case MS_TR_HEADER: return a->version == b->version;
    case MS_TR_TASK:
        return a->task == b->task && a->prio == b->prio &&
               strcmp(nonnull(a->name), nonnull(b->name)) == 0;
    case MS_TR_ALLOC:
        return a->task == b->task && a->addr == b->addr && a->size == b->size &&
               a->rkind == b->rkind;
    case MS_TR_FREE: return a->task == b->task && a->addr == b->addr;
    case MS_TR_KERNEL:
        if (a->task != b->task || a->stream != b->stream || a->dur_ns != b->dur_ns)
            return false;
        if (memcmp(a->grid, b->grid, sizeof a->grid) || memcmp(a->block, b->block, sizeof a->block))
            return false;
        if (strcmp(nonnull(a->name), nonnull(b->name)) != 0 || a->params_len != b->params_len)
            return false;
        if (a->params_len && memcmp(a->params, b->params, a->params_len))
            return false;
        if (a->nlayout != b->nlayout) /* no entries: unknown layout, whatever the pointer */
            return false;
        if (a->mod != b->mod || a->prof != b->prof)
            return false;
        for (size_t i = 0; i < a->nlayout; i++)
            if (a->layout[i].offset != b->layout[i].offset ||
                a->layout[i].size != b->layout[i].size)
                return false;
        return true;
    case MS_TR_COPY:
        return a->task == b->task && a->stream == b->stream && a->dur_ns == b->dur_ns &&
               a->dir == b->dir && a->dst == b->dst && a->src == b->src && a->size == b->size;
    case MS_TR_MEMSET:
        return a->task == b->task && a->stream == b->stream && a->dur_ns == b->dur_ns &&
               a->addr == b->addr && a->size == b->size;
    case MS_TR_SYNC: return a->task == b->task;
    case MS_TR_TOUCH:
        return a->task == b->task && a->arg == b->arg && a->mode == b->mode && a->addr == b->addr &&
               a->size == b->size;
    }
    return false;
}
