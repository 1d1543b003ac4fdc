/*
 * test_trace.c - the trace reader and writer (core/trace.c, docs/trace-format.md).
 *
 * What is covered
 *   - every record kind parses, with every field checked against the text;
 *   - blank lines, comments, tabs, CRLF, input that is not NUL-terminated;
 *   - a seeded round-trip property: random valid records -> format -> parse -> equal record, also
 *     after the separators are replaced by random runs of spaces and tabs (ms_test_seed: MS_SEED
 *     or a fixed default, printed as seed=N so a failure can be replayed);
 *   - a table of malformed lines, each rejected with the expected code and a message that says
 *     what is wrong ("line N: ...", one line);
 *   - header rules (missing, duplicate, unknown version -> MS_E_VERSION);
 *   - the writer's refusals (MS_E_INVAL for unreadable records, MS_E_NOSPACE at every short cap);
 *   - allocation failure at every allocation of a parse, with no leak afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/trace.h"
#include "tests/support/ms_testutil.h"

#define FMT_CAP 65536

/* ---- helpers ---------------------------------------------------------------------------- */

static struct ms_rng rng;

static uint64_t rnd(void)
{
    return ms_rng_next(&rng);
}

/* Uniform-ish in [0, max], with the edges 0, 1, max-1, max over-represented. */
static uint64_t rnd_upto(uint64_t max)
{
    uint64_t v;
    switch (rnd() % 8) {
    case 0: v = 0; break;
    case 1: v = 1; break;
    case 2: v = max; break;
    case 3: v = max - 1; break;
    case 4: v = rnd() & 0xffff; break;
    default: v = rnd() >> (rnd() % 64); break;
    }
    if (max == UINT64_MAX)
        return v;
    return v > max ? v % (max + 1) : v;
}

static uint64_t rnd_range(uint64_t lo, uint64_t hi)
{
    return lo + rnd_upto(hi - lo);
}

static int parse_str(struct ms_trace_reader *r, const char *s, struct ms_trace_rec *out)
{
    return ms_trace_parse_line(r, s, strlen(s), out);
}

/* A reader that has already read the header line (version 2: it reads every version-1 record
 * too). */
static void reader_with_header(struct ms_trace_reader *r)
{
    struct ms_trace_rec rec;
    ms_trace_reader_init(r);
    assert_int_equal(parse_str(r, "msched-trace 2", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_HEADER);
    assert_int_equal(rec.version, 2);
}

/* ---- every kind parses -------------------------------------------------------------------- */

static void test_every_kind(void **state)
{
    (void)state;
    uint64_t base = ms_alloc_live();
    struct ms_trace_reader r;
    struct ms_trace_rec rec;
    reader_with_header(&r);
    assert_int_equal(r.line, 1);

    assert_int_equal(parse_str(&r, "task 3 prio=-7 name=train%20job", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_TASK);
    assert_int_equal(rec.task, 3);
    assert_int_equal(rec.prio, -7);
    assert_string_equal(rec.name, "train job");

    assert_int_equal(parse_str(&r, "task 4 name=x prio=2147483647", &rec), 1);
    assert_int_equal(rec.prio, 2147483647);
    assert_string_equal(rec.name, "x");

    assert_int_equal(parse_str(&r, "alloc 3 0x7F0000200000 1048576 async", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_ALLOC);
    assert_int_equal(rec.task, 3);
    assert_true(rec.addr == 0x7f0000200000ull);
    assert_true(rec.size == 1048576);
    assert_int_equal(rec.rkind, MS_RK_ASYNC);

    static const char *kinds[] = {"device", "async", "vmm", "managed", "host"};
    for (int k = 0; k < MS_RK_COUNT; k++) {
        char aline[64];
        snprintf(aline, sizeof aline, "alloc 1 0x1000 4096 %s", kinds[k]);
        assert_int_equal(parse_str(&r, aline, &rec), 1);
        assert_int_equal(rec.rkind, k);
        assert_string_equal(ms_region_kind_name(rec.rkind), kinds[k]);
    }

    assert_int_equal(parse_str(&r, "free 3 0x7f0000200000", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_FREE);
    assert_true(rec.addr == 0x7f0000200000ull);

    assert_int_equal(parse_str(&r,
                               "kernel 3 7 12000 grid=128,2,1 block=256,1,4 name=_Z3addPfS_i "
                               "params=0000200000 layout=0:2,2:3",
                               &rec),
                     1);
    assert_int_equal(rec.kind, MS_TR_KERNEL);
    assert_int_equal(rec.task, 3);
    assert_int_equal(rec.stream, 7);
    assert_true(rec.dur_ns == 12000);
    assert_int_equal(rec.grid[0], 128);
    assert_int_equal(rec.grid[1], 2);
    assert_int_equal(rec.grid[2], 1);
    assert_int_equal(rec.block[0], 256);
    assert_int_equal(rec.block[2], 4);
    assert_string_equal(rec.name, "_Z3addPfS_i");
    assert_int_equal(rec.params_len, 5);
    assert_int_equal(rec.params[2], 0x20);
    assert_non_null(rec.layout);
    assert_int_equal(rec.nlayout, 2);
    assert_int_equal(rec.layout[1].offset, 2);
    assert_int_equal(rec.layout[1].size, 3);

    /* Keys in any order; no layout; empty params and name. */
    assert_int_equal(parse_str(&r, "kernel 0 0 0 params= name= block=1,1,1 grid=1,1,1", &rec), 1);
    assert_int_equal(rec.params_len, 0);
    assert_null(rec.layout);
    assert_int_equal(rec.nlayout, 0);
    assert_string_equal(rec.name, "");

    /* Unknown layout: the writer leaves it out whatever the pointer, the reader gives NULL. */
    static const struct ms_param_layout one = {0, 1};
    struct ms_trace_rec k0 = {.kind = MS_TR_KERNEL,
                              .grid = {1, 1, 1},
                              .block = {1, 1, 1},
                              .name = "k",
                              .layout = &one,
                              .nlayout = 0};
    char line[256];
    assert_true(ms_trace_format(&k0, line, sizeof line) > 0);
    assert_string_equal(line, "kernel 0 0 0 grid=1,1,1 block=1,1,1 name=k params=\n");

    static const char *dirs[] = {"h2d", "d2h", "d2d", "h2h"};
    for (int d = 0; d < 4; d++) {
        snprintf(line, sizeof line, "copy 2 1 500 %s 0xa0 0xB0 64", dirs[d]);
        assert_int_equal(parse_str(&r, line, &rec), 1);
        assert_int_equal(rec.kind, MS_TR_COPY);
        assert_int_equal(rec.dir, d);
        assert_string_equal(ms_copy_dir_name(rec.dir), dirs[d]);
        assert_true(rec.dst == 0xa0 && rec.src == 0xb0 && rec.size == 64 && rec.dur_ns == 500);
        assert_int_equal(rec.stream, 1);
    }

    assert_int_equal(parse_str(&r, "memset 2 9 800 0x7f0000000000 4096", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_MEMSET);
    assert_int_equal(rec.stream, 9);
    assert_true(rec.addr == 0x7f0000000000ull && rec.size == 4096 && rec.dur_ns == 800);

    assert_int_equal(parse_str(&r, "sync 4294967294", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_SYNC);
    assert_true(rec.task == 4294967294u);

    assert_string_equal(ms_region_kind_name((enum ms_region_kind)99), "unknown");
    assert_string_equal(ms_copy_dir_name((enum ms_copy_dir)99), "unknown");

    ms_trace_reader_fini(&r);
    ms_trace_reader_fini(&r); /* harmless twice */
    assert_true(ms_alloc_live() == base);
}

static void test_blank_comment_whitespace(void **state)
{
    (void)state;
    struct ms_trace_reader r;
    struct ms_trace_rec rec;
    ms_trace_reader_init(&r);
    /* Blank and comment lines before the header are fine. */
    assert_int_equal(parse_str(&r, "", &rec), 0);
    assert_int_equal(parse_str(&r, "   \t ", &rec), 0);
    assert_int_equal(parse_str(&r, "# recorded by msched \xc3\xa9", &rec), 0);
    assert_int_equal(parse_str(&r, "\t  # indented comment", &rec), 0);
    assert_int_equal(parse_str(&r, "\r", &rec), 0);
    assert_int_equal(ms_trace_parse_line(&r, NULL, 0, &rec), 0);
    assert_int_equal(parse_str(&r, " \tmsched-trace\t 1 \r", &rec), 1);
    assert_int_equal(r.line, 7);
    assert_string_equal(r.err, "");
    assert_int_equal(parse_str(&r, "\tsync\t\t5   ", &rec), 1);
    assert_int_equal(rec.task, 5);
    assert_int_equal(parse_str(&r, "sync 6\r", &rec), 1);
    assert_int_equal(rec.task, 6);

    /* Not NUL-terminated: the bytes after len must not be read as part of the line. */
    const char buf[] = {'s', 'y', 'n', 'c', ' ', '1', '2', '3'};
    assert_int_equal(ms_trace_parse_line(&r, buf, 6, &rec), 1);
    assert_int_equal(rec.task, 1);
    assert_int_equal(ms_trace_parse_line(&r, buf, 8, &rec), 1);
    assert_int_equal(rec.task, 123);
    assert_int_equal(ms_trace_parse_line(&r, buf, 5, &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "missing field <tid>"));

    /* Leading zeros are accepted. */
    assert_int_equal(parse_str(&r, "alloc 007 0x0000000000000000000001 010 device", &rec), 1);
    assert_int_equal(rec.task, 7);
    assert_true(rec.addr == 1 && rec.size == 10);
    ms_trace_reader_fini(&r);
}

/* ---- round trip ------------------------------------------------------------------------- */

static void rnd_name(char *buf, size_t maxlen)
{
    size_t n;
    switch (rnd() % 4) {
    case 0: n = 0; break;
    case 1: n = maxlen; break;
    default: n = rnd() % 40; break;
    }
    for (size_t i = 0; i < n; i++) {
        char c;
        if (rnd() % 4 == 0)
            c = (char)(1 + rnd() % 255); /* any byte but NUL: spaces, %, UTF-8, controls */
        else
            c = (char)('a' + rnd() % 26);
        buf[i] = c;
    }
    buf[n] = '\0';
}

struct gen {
    char name[MS_TRACE_MAX_NAME];
    uint8_t params[MS_TRACE_MAX_PARAMS];
    struct ms_param_layout layout[MS_TRACE_MAX_LAYOUT];
};

static void rnd_rec(struct ms_trace_rec *rec, struct gen *g)
{
    memset(rec, 0, sizeof *rec);
    rec->kind = (enum ms_trace_kind)(rnd() % 9);
    rec->task = (uint32_t)rnd_upto(UINT32_MAX - 1);
    switch (rec->kind) {
    case MS_TR_HEADER: rec->version = 1 + (uint32_t)(rnd() % 2); break;
    case MS_TR_TOUCH:
        rec->arg = rnd() % 4 == 0 ? -1 : (int32_t)(8 * (rnd() % (MS_TRACE_MAX_PARAMS / 8)));
        rec->mode = (uint8_t)(1 + rnd() % 3);
        rec->size = rnd_range(1, 1ull << 48);
        rec->addr = rnd_upto(UINT64_MAX - rec->size);
        break;
    case MS_TR_TASK:
        rec->prio = (int32_t)(uint32_t)rnd_upto(UINT32_MAX);
        rnd_name(g->name, MS_TRACE_MAX_NAME - 1);
        rec->name = (rnd() % 8) ? g->name : NULL;
        break;
    case MS_TR_ALLOC:
        rec->size = rnd_range(1, 1ull << 48);
        rec->addr = rnd_range(1, UINT64_MAX - rec->size);
        rec->rkind = (enum ms_region_kind)(rnd() % MS_RK_COUNT);
        break;
    case MS_TR_FREE: rec->addr = rnd_upto(UINT64_MAX); break;
    case MS_TR_KERNEL: {
        rec->stream = (uint32_t)rnd_upto(UINT32_MAX);
        rec->dur_ns = rnd_upto(INT64_MAX);
        for (int i = 0; i < 3; i++) {
            rec->grid[i] = (uint32_t)rnd_range(1, UINT32_MAX);
            rec->block[i] = (uint32_t)rnd_range(1, UINT32_MAX);
        }
        rnd_name(g->name, MS_TRACE_MAX_NAME - 1);
        rec->name = g->name;
        rec->mod = rnd() % 2 ? rnd_upto(UINT64_MAX) : 0;
        rec->prof = (enum ms_trace_prof)(rnd() % 3);
        size_t np = rnd() % 4 == 0 ? MS_TRACE_MAX_PARAMS : rnd() % 64;
        if (rnd() % 8 == 0)
            np = 0;
        for (size_t i = 0; i < np; i++)
            g->params[i] = (uint8_t)rnd();
        rec->params = np ? g->params : NULL;
        rec->params_len = np;
        if (rnd() % 3 == 0)
            break; /* no layout */
        size_t off = 0, n = 0;
        while (off < np && n < MS_TRACE_MAX_LAYOUT) {
            off += rnd() % 3; /* gaps allowed */
            if (off >= np)
                break;
            uint32_t sz = (uint32_t)(1 + rnd() % MS_MIN(np - off, 16));
            g->layout[n].offset = (uint32_t)off;
            g->layout[n].size = sz;
            n++;
            off += sz;
        }
        rec->layout = g->layout;
        rec->nlayout = n;
        break;
    }
    case MS_TR_COPY:
        rec->stream = (uint32_t)rnd_upto(UINT32_MAX);
        rec->dur_ns = rnd_upto(INT64_MAX);
        rec->dir = (enum ms_copy_dir)(rnd() % 4);
        rec->size = rnd_upto(1ull << 48);
        rec->dst = rnd_upto(UINT64_MAX - rec->size);
        rec->src = rnd_upto(UINT64_MAX - rec->size);
        break;
    case MS_TR_MEMSET:
        rec->stream = (uint32_t)rnd_upto(UINT32_MAX);
        rec->dur_ns = rnd_upto(INT64_MAX);
        rec->size = rnd_upto(1ull << 48);
        rec->addr = rnd_upto(UINT64_MAX - rec->size);
        break;
    case MS_TR_SYNC: break;
    }
}

/* Replace every single space separator by a random run of spaces and tabs. */
static size_t respace(const char *in, size_t n, char *out)
{
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == ' ') {
            size_t runs = 1 + rnd() % 3;
            for (size_t k = 0; k < runs; k++)
                out[j++] = rnd() % 2 ? ' ' : '\t';
        } else {
            out[j++] = in[i];
        }
    }
    if (rnd() % 2)
        out[j++] = '\r';
    return j;
}

static void test_roundtrip_random(void **state)
{
    (void)state;
    uint64_t seed = ms_test_seed(20240611);
    ms_rng_seed(&rng, seed);

    uint64_t base = ms_alloc_live();
    static struct gen g;
    static char line[FMT_CAP], line2[FMT_CAP], spaced[3 * FMT_CAP];
    struct ms_trace_reader r, r2;
    reader_with_header(&r);
    reader_with_header(&r2);
    for (int iter = 0; iter < 20000; iter++) {
        struct ms_trace_rec rec, got, again;
        rnd_rec(&rec, &g);
        if (rec.kind == MS_TR_HEADER)
            continue; /* a second header is an error; covered elsewhere */
        int n = ms_trace_format(&rec, line, sizeof line);
        if (n < 0)
            fail_msg("seed=%llu iter %d: format failed %d", (unsigned long long)seed, iter, n);
        assert_int_equal(line[n - 1], '\n');
        assert_int_equal(strlen(line), (size_t)n);
        assert_null(memchr(line, '\n', (size_t)n - 1));
        int rc = ms_trace_parse_line(&r, line, (size_t)n - 1, &got);
        if (rc != 1)
            fail_msg("seed=%llu iter %d: %s -> %s", (unsigned long long)seed, iter, line, r.err);
        if (!ms_trace_rec_equal(&rec, &got))
            fail_msg("seed=%llu iter %d: mismatch after round trip: %s", (unsigned long long)seed,
                     iter, line);

        /* The writer is canonical: formatting the parsed record gives the same text. */
        int n2 = ms_trace_format(&got, line2, sizeof line2);
        assert_int_equal(n2, n);
        assert_memory_equal(line, line2, (size_t)n);

        /* Separators are any runs of spaces and tabs; a CR before the newline is dropped. */
        size_t ns = respace(line, (size_t)n - 1, spaced);
        rc = ms_trace_parse_line(&r2, spaced, ns, &again);
        if (rc != 1 || !ms_trace_rec_equal(&rec, &again))
            fail_msg("seed=%llu iter %d: respaced line failed: %s", (unsigned long long)seed, iter,
                     r2.err);
    }
    ms_trace_reader_fini(&r);
    ms_trace_reader_fini(&r2);
    assert_true(ms_alloc_live() == base);
}

static void test_names(void **state)
{
    (void)state;
    struct ms_trace_reader r;
    struct ms_trace_rec rec;
    char line[4096], name[MS_TRACE_MAX_NAME + 8];
    reader_with_header(&r);

    /* Escapes decode in either case; the writer escapes space, %, controls, non-ASCII. */
    assert_int_equal(parse_str(&r, "task 1 prio=0 name=a%25b%c3%A9%7e=,#:", &rec), 1);
    assert_string_equal(rec.name, "a%b\xc3\xa9~=,#:");
    int n = ms_trace_format(&rec, line, sizeof line);
    assert_true(n > 0);
    assert_string_equal(line, "task 1 prio=0 name=a%25b%C3%A9~=,#:\n");

    struct ms_trace_rec t = {.kind = MS_TR_TASK, .task = 1, .name = "a b\tc\n"};
    n = ms_trace_format(&t, line, sizeof line);
    assert_string_equal(line, "task 1 prio=0 name=a%20b%09c%0A\n");

    /* The longest name (511 bytes) is accepted, one more is refused on both sides. */
    memset(name, 'n', MS_TRACE_MAX_NAME - 1);
    name[MS_TRACE_MAX_NAME - 1] = '\0';
    snprintf(line, sizeof line, "task 1 prio=0 name=%s", name);
    assert_int_equal(parse_str(&r, line, &rec), 1);
    assert_int_equal(strlen(rec.name), MS_TRACE_MAX_NAME - 1);
    t.name = name;
    assert_true(ms_trace_format(&t, line, sizeof line) > 0);
    name[MS_TRACE_MAX_NAME - 1] = 'n';
    name[MS_TRACE_MAX_NAME] = '\0';
    snprintf(line, sizeof line, "task 1 prio=0 name=%s", name);
    assert_int_equal(parse_str(&r, line, &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "name is 512 bytes long"));
    assert_int_equal(ms_trace_format(&t, line, sizeof line), MS_E_INVAL);
    /* Escaped bytes count once each: 511 x "%41" is fine. */
    char *p = line + sprintf(line, "task 1 prio=0 name=");
    for (int i = 0; i < 511; i++)
        p += sprintf(p, "%%41");
    assert_int_equal(parse_str(&r, line, &rec), 1);
    assert_int_equal(strlen(rec.name), 511);
    ms_trace_reader_fini(&r);
}

/* ---- malformed lines ---------------------------------------------------------------------- */

struct bad {
    const char *line;
    int code;
    const char *why; /* must appear in r->err */
};

static const struct bad bad_lines[] = {
    /* record kinds and fields */
    {"frobnicate 1", MS_E_PARSE, "unknown record kind 'frobnicate'"},
    {"Task 1 prio=0 name=x", MS_E_PARSE, "unknown record kind 'Task'"},
    {"msched-trace 1", MS_E_PARSE, "duplicate header"},
    {"sync", MS_E_PARSE, "sync: missing field <tid>"},
    {"sync 1 2", MS_E_PARSE, "unexpected extra field '2'"},
    {"sync x", MS_E_PARSE, "tid 'x' is not a decimal number"},
    {"sync -1", MS_E_PARSE, "tid '-1' is not a decimal number"},
    {"sync +1", MS_E_PARSE, "is not a decimal number"},
    {"sync 0x10", MS_E_PARSE, "is not a decimal number"},
    {"sync 4294967295", MS_E_PARSE, "tid '4294967295' is out of range 0..4294967294"},
    {"sync 99999999999999999999999", MS_E_PARSE, "out of range"},
    {"task 1 prio=0", MS_E_PARSE, "task: missing field name="},
    {"task 1 name=x", MS_E_PARSE, "task: missing field prio="},
    {"task prio=1 name=x", MS_E_PARSE, "missing field <tid> before 'prio=1'"},
    {"task 1 prio=0 name=x prio=1", MS_E_PARSE, "duplicate field prio="},
    {"task 1 prio=0 name=x colour=red", MS_E_PARSE, "unknown field 'colour'"},
    {"task 1 prio=0 name=x extra", MS_E_PARSE, "unexpected field 'extra' (expected key=value)"},
    {"task 1 prio=2147483648 name=x", MS_E_PARSE, "prio '2147483648' is out of range"},
    {"task 1 prio=-2147483649 name=x", MS_E_PARSE, "out of range"},
    {"task 1 prio=- name=x", MS_E_PARSE, "is not a decimal integer"},
    {"task 1 prio= name=x", MS_E_PARSE, "is not a decimal integer"},
    {"task 1 prio=0 name=a%2", MS_E_PARSE, "truncated %XX escape"},
    {"task 1 prio=0 name=a%zz", MS_E_PARSE, "bad %XX escape"},
    {"task 1 prio=0 name=a%00b", MS_E_PARSE, "contains %00 (NUL)"},
    {"task 1 prio=0 name=\xc3\xa9", MS_E_PARSE, "byte 0xc3 at column 20 is not printable ASCII"},
    {"task 1 prio=0 name=a\x01", MS_E_PARSE, "byte 0x01 at column 21"},
    {"sync 1\r\r", MS_E_PARSE, "byte 0x0d"},
    /* alloc and free */
    {"alloc 1 0x1000 4096", MS_E_PARSE, "alloc: missing field <kind>"},
    {"alloc 1 0x1000 4096 gpu", MS_E_PARSE, "kind 'gpu' is not one of device"},
    {"alloc 1 1000 4096 device", MS_E_PARSE, "addr '1000' is not a hexadecimal address"},
    {"alloc 1 0x 4096 device", MS_E_PARSE, "is not a hexadecimal address"},
    {"alloc 1 0xg1 4096 device", MS_E_PARSE, "is not a hexadecimal address"},
    {"alloc 1 0x10000000000000000 4096 device", MS_E_PARSE,
     "addr '0x10000000000000000' is out of range"},
    {"alloc 1 0x0 4096 device", MS_E_PARSE, "address 0 cannot be an allocation"},
    {"alloc 1 0x1000 0 device", MS_E_PARSE, "size '0' is out of range 1..281474976710656"},
    {"alloc 1 0x1000 281474976710657 device", MS_E_PARSE, "out of range 1..281474976710656"},
    {"alloc 1 0x1000 18446744073709551616 device", MS_E_PARSE, "out of range"},
    {"alloc 1 0xffffffffffff0000 65536 device", MS_E_PARSE, "address + size wraps"},
    {"alloc 1 0x1000 4096 device x", MS_E_PARSE, "unexpected extra field 'x'"},
    {"free 1", MS_E_PARSE, "free: missing field <addr>"},
    {"free 1 0x10 0x20", MS_E_PARSE, "unexpected extra field"},
    /* kernel */
    {"kernel 1 0 5 block=1,1,1 name=k params=", MS_E_PARSE, "missing field grid="},
    {"kernel 1 0 5 grid=1,1,1 name=k params=", MS_E_PARSE, "missing field block="},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 params=", MS_E_PARSE, "missing field name="},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k", MS_E_PARSE, "missing field params="},
    {"kernel 1 0 grid=1,1,1 block=1,1,1 name=k params=", MS_E_PARSE, "missing field <dur_ns>"},
    {"kernel 1 0 9223372036854775808 grid=1,1,1 block=1,1,1 name=k params=", MS_E_PARSE,
     "dur_ns '9223372036854775808' is out of range"},
    {"kernel 1 4294967296 5 grid=1,1,1 block=1,1,1 name=k params=", MS_E_PARSE,
     "stream '4294967296' is out of range"},
    {"kernel 1 0 5 grid=0,1,1 block=1,1,1 name=k params=", MS_E_PARSE,
     "each dimension must be 1..4294967295"},
    {"kernel 1 0 5 grid=1,1,4294967296 block=1,1,1 name=k params=", MS_E_PARSE,
     "each dimension must be"},
    {"kernel 1 0 5 grid=1,1 block=1,1,1 name=k params=", MS_E_PARSE, "not three numbers x,y,z"},
    {"kernel 1 0 5 grid=1,1,1,1 block=1,1,1 name=k params=", MS_E_PARSE, "not three numbers"},
    {"kernel 1 0 5 grid=1,,1 block=1,1,1 name=k params=", MS_E_PARSE, "not three numbers"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1, name=k params=", MS_E_PARSE, "not three numbers"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=abc", MS_E_PARSE, "odd number of hex"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=zz", MS_E_PARSE, "is not hex bytes"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0x00", MS_E_PARSE, "is not hex bytes"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=000000 layout=0:2,1:2", MS_E_PARSE,
     "overlap or are not in ascending order"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=000000 layout=2:1,0:1", MS_E_PARSE,
     "not in ascending order"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0:3", MS_E_PARSE,
     "layout entry outside the parameter bytes"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=4294967295:1", MS_E_PARSE,
     "outside the parameter bytes"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0:4294967295", MS_E_PARSE,
     "outside the parameter bytes"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=1:0", MS_E_PARSE,
     "layout entry of size 0"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0:1,", MS_E_PARSE,
     "is not offset:size"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0-1", MS_E_PARSE,
     "layout entry '0-1' is not offset:size"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0:x", MS_E_PARSE,
     "is not offset:size"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 layout=0:4294967296", MS_E_PARSE,
     "is out of range"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=00 layout=0:1 layout=0:1", MS_E_PARSE,
     "duplicate field layout="},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= layout=", MS_E_PARSE,
     "layout is empty (leave the field out when unknown)"},
    {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= =1", MS_E_PARSE, "unknown field ''"},
    /* copy, memset */
    {"copy 1 0 5 h2d 0x10 0x20", MS_E_PARSE, "copy: missing field <bytes>"},
    {"copy 1 0 5 up 0x10 0x20 4", MS_E_PARSE, "dir 'up' is not one of h2d, d2h, d2d, h2h"},
    {"copy 1 0 5 H2D 0x10 0x20 4", MS_E_PARSE, "dir 'H2D'"},
    {"copy 1 0 5 h2d 0xffffffffffffffff 0x20 2", MS_E_PARSE, "destination + bytes wraps"},
    {"copy 1 0 5 h2d 0x20 0xffffffffffffffff 2", MS_E_PARSE, "source + bytes wraps"},
    {"copy 1 0 5 h2d 0x20 0x10 281474976710657", MS_E_PARSE, "out of range 0..281474976710656"},
    {"memset 1 0 5 0x10", MS_E_PARSE, "memset: missing field <bytes>"},
    {"memset 1 0 5 0xfffffffffffffff0 17", MS_E_PARSE, "destination + bytes wraps"},
    {"memset 1 0 5 16 17", MS_E_PARSE, "dst '16' is not a hexadecimal address"},
};

static void test_malformed(void **state)
{
    (void)state;
    uint64_t base = ms_alloc_live();
    for (size_t i = 0; i < MS_ARRAY_LEN(bad_lines); i++) {
        struct ms_trace_reader r;
        struct ms_trace_rec rec;
        reader_with_header(&r);
        memset(&rec, 0xa5, sizeof rec);
        struct ms_trace_rec before = rec;
        int rc = parse_str(&r, bad_lines[i].line, &rec);
        if (rc != bad_lines[i].code || !strstr(r.err, bad_lines[i].why))
            fail_msg("'%s': rc %d err '%s', want %d '%s'", bad_lines[i].line, rc, r.err,
                     bad_lines[i].code, bad_lines[i].why);
        assert_memory_equal(r.err, "line 2: ", 8);
        assert_null(strchr(r.err, '\n'));
        assert_memory_equal(&rec, &before, sizeof rec); /* untouched on error */
        /* The reader carries on after an error. */
        assert_int_equal(parse_str(&r, "sync 1", &rec), 1);
        assert_string_equal(r.err, "");
        ms_trace_reader_fini(&r);
    }
    assert_true(ms_alloc_live() == base);
}

static void test_header_rules(void **state)
{
    (void)state;
    struct ms_trace_reader r;
    struct ms_trace_rec rec;

    ms_trace_reader_init(&r);
    assert_int_equal(parse_str(&r, "# comment", &rec), 0);
    assert_int_equal(parse_str(&r, "sync 1", &rec), MS_E_PARSE);
    assert_string_equal(r.err, "line 2: expected the header 'msched-trace N' before 'sync'");
    assert_int_equal(parse_str(&r, "msched-trace 3", &rec), MS_E_VERSION);
    assert_string_equal(r.err,
                        "line 3: unsupported trace version 3 (this reader knows versions 1 to 2)");
    assert_int_equal(parse_str(&r, "msched-trace 0 extra=1", &rec), MS_E_VERSION);
    assert_int_equal(parse_str(&r, "msched-trace 4294967295", &rec), MS_E_VERSION);
    assert_int_equal(parse_str(&r, "msched-trace 4294967296", &rec), MS_E_PARSE);
    assert_int_equal(parse_str(&r, "msched-trace 1.0", &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "version '1.0' is not a decimal number"));
    assert_int_equal(parse_str(&r, "msched-trace", &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "missing version"));
    assert_int_equal(parse_str(&r, "msched-trace 1 x", &rec), MS_E_PARSE);
    assert_int_equal(parse_str(&r, "MSCHED-TRACE 1", &rec), MS_E_PARSE);
    /* Still no header: records keep being refused. */
    assert_int_equal(parse_str(&r, "sync 1", &rec), MS_E_PARSE);
    assert_int_equal(parse_str(&r, "msched-trace 01", &rec), 1);
    assert_int_equal(rec.version, 1);
    assert_int_equal(parse_str(&r, "sync 1", &rec), 1);
    assert_int_equal(parse_str(&r, "msched-trace 1", &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "line 14: duplicate header"));
    ms_trace_reader_fini(&r);
}

static void test_line_limits(void **state)
{
    (void)state;
    struct ms_trace_reader r;
    struct ms_trace_rec rec;
    reader_with_header(&r);

    const char nulline[] = {'s', 'y', 'n', 'c', ' ', '1', '\0', '2'};
    assert_int_equal(ms_trace_parse_line(&r, nulline, sizeof nulline, &rec), MS_E_PARSE);
    assert_string_equal(r.err, "line 2: NUL byte at column 7");
    const char nulcomment[] = {'#', ' ', '\0'};
    assert_int_equal(ms_trace_parse_line(&r, nulcomment, sizeof nulcomment, &rec), MS_E_PARSE);

    /* MS_TRACE_MAX_LINE bytes is fine (a padded comment), one more is refused. */
    size_t big = MS_TRACE_MAX_LINE + 1;
    char *buf = malloc(big);
    assert_non_null(buf);
    memset(buf, ' ', big);
    buf[0] = '#';
    assert_int_equal(ms_trace_parse_line(&r, buf, big - 1, &rec), 0);
    assert_int_equal(ms_trace_parse_line(&r, buf, big, &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "line is 1048577 bytes long (max 1048576)"));
    memcpy(buf, "sync 1", 6);
    assert_int_equal(ms_trace_parse_line(&r, buf, big - 1, &rec), 1);

    /* Parameter bytes: 4096 accepted, 4097 refused. */
    size_t off = (size_t)sprintf(buf, "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=");
    memset(buf + off, 'f', 2 * MS_TRACE_MAX_PARAMS);
    assert_int_equal(ms_trace_parse_line(&r, buf, off + 2 * MS_TRACE_MAX_PARAMS, &rec), 1);
    assert_int_equal(rec.params_len, MS_TRACE_MAX_PARAMS);
    assert_int_equal(rec.params[MS_TRACE_MAX_PARAMS - 1], 0xff);
    memset(buf + off, 'f', 2 * MS_TRACE_MAX_PARAMS + 2);
    assert_int_equal(ms_trace_parse_line(&r, buf, off + 2 * MS_TRACE_MAX_PARAMS + 2, &rec),
                     MS_E_PARSE);
    assert_non_null(strstr(r.err, "params is 4097 bytes (max 4096)"));

    /* Layout entries: 1024 accepted, 1025 refused. */
    off = (size_t)sprintf(buf, "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=");
    memset(buf + off, '0', 2 * 1025);
    off += 2 * 1025;
    off += (size_t)sprintf(buf + off, " layout=");
    for (unsigned i = 0; i < MS_TRACE_MAX_LAYOUT; i++)
        off += (size_t)sprintf(buf + off, "%s%u:1", i ? "," : "", i);
    assert_int_equal(ms_trace_parse_line(&r, buf, off, &rec), 1);
    assert_int_equal(rec.nlayout, MS_TRACE_MAX_LAYOUT);
    assert_int_equal(rec.layout[1023].offset, 1023);
    off += (size_t)sprintf(buf + off, ",1024:1");
    assert_int_equal(ms_trace_parse_line(&r, buf, off, &rec), MS_E_PARSE);
    assert_non_null(strstr(r.err, "layout has 1025 entries (max 1024)"));

    /* Long quoted tokens are cut short in messages. */
    memset(buf, 'z', 300);
    assert_int_equal(ms_trace_parse_line(&r, buf, 300, &rec), MS_E_PARSE);
    assert_true(strlen(r.err) < 100);
    assert_non_null(strstr(r.err, "...'"));

    /* Bad arguments. */
    assert_int_equal(ms_trace_parse_line(&r, NULL, 3, &rec), MS_E_INVAL);
    assert_int_equal(ms_trace_parse_line(&r, "x", 1, NULL), MS_E_INVAL);
    assert_int_equal(ms_trace_parse_line(NULL, "x", 1, &rec), MS_E_INVAL);
    free(buf);
    ms_trace_reader_fini(&r);
}

/* ---- writer ------------------------------------------------------------------------------ */

static void test_format(void **state)
{
    (void)state;
    char buf[256];
    static const uint8_t params[] = {0x00, 0x10, 0xab, 0xff};
    static const struct ms_param_layout lay[] = {{0, 2}, {2, 2}};
    struct ms_trace_rec k = {.kind = MS_TR_KERNEL,
                             .task = 3,
                             .stream = 7,
                             .dur_ns = 12000,
                             .grid = {128, 1, 1},
                             .block = {256, 1, 1},
                             .name = "_Z3addPfS_i",
                             .params = params,
                             .params_len = 4,
                             .layout = lay,
                             .nlayout = 2};
    const char *want = "kernel 3 7 12000 grid=128,1,1 block=256,1,1 name=_Z3addPfS_i "
                       "params=0010abff layout=0:2,2:2\n";
    int n = ms_trace_format(&k, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(want));
    assert_string_equal(buf, want);

    /* Every capacity below len+1 is too small, len+1 is enough. */
    for (size_t cap = 0; cap <= (size_t)n; cap++) {
        memset(buf, 'x', sizeof buf);
        assert_int_equal(ms_trace_format(&k, buf, cap), MS_E_NOSPACE);
        if (cap > 0)
            assert_int_equal(buf[0], '\0');
    }
    assert_int_equal(ms_trace_format(&k, buf, (size_t)n + 1), n);

    struct {
        struct ms_trace_rec rec;
        const char *want;
    } ok[] = {
        {{.kind = MS_TR_HEADER, .version = 1}, "msched-trace 1\n"},
        {{.kind = MS_TR_TASK, .task = 0, .prio = INT32_MIN, .name = NULL},
         "task 0 prio=-2147483648 name=\n"},
        {{.kind = MS_TR_ALLOC, .task = 2, .addr = 0xABC000, .size = 5, .rkind = MS_RK_MANAGED},
         "alloc 2 0xabc000 5 managed\n"},
        {{.kind = MS_TR_FREE, .task = 2, .addr = 0}, "free 2 0x0\n"},
        {{.kind = MS_TR_COPY,
          .task = 1,
          .stream = 4,
          .dur_ns = 9,
          .dir = MS_COPY_D2H,
          .dst = 1,
          .src = 2,
          .size = 0},
         "copy 1 4 9 d2h 0x1 0x2 0\n"},
        {{.kind = MS_TR_MEMSET, .task = 1, .stream = 0, .dur_ns = 0, .addr = 0xff, .size = 1},
         "memset 1 0 0 0xff 1\n"},
        {{.kind = MS_TR_SYNC, .task = 4294967294u, .stream = 99}, "sync 4294967294\n"},
        {{.kind = MS_TR_HEADER, .version = 2}, "msched-trace 2\n"},
        {{.kind = MS_TR_TOUCH, .task = 3, .arg = -1, .mode = 3, .addr = 0x10, .size = 1},
         "touch 3 - rw 0x10 1\n"},
        {{.kind = MS_TR_TOUCH, .task = 3, .arg = 4088, .mode = 2, .addr = 0, .size = 1ull << 48},
         "touch 3 4088 w 0x0 281474976710656\n"},
        {{.kind = MS_TR_KERNEL,
          .task = 1,
          .grid = {1, 1, 1},
          .block = {2, 1, 1},
          .name = "k",
          .mod = 0xABCDEF0123456789ull,
          .prof = MS_PROF_OPAQUE},
         "kernel 1 0 0 grid=1,1,1 block=2,1,1 name=k params= mod=abcdef0123456789 prof=opaque\n"},
        {{.kind = MS_TR_KERNEL,
          .task = 1,
          .grid = {1, 1, 1},
          .block = {2, 1, 1},
          .name = "k",
          .mod = 1,
          .prof = MS_PROF_SEEN},
         "kernel 1 0 0 grid=1,1,1 block=2,1,1 name=k params= mod=1 prof=seen\n"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(ok); i++) {
        n = ms_trace_format(&ok[i].rec, buf, sizeof buf);
        assert_int_equal(n, (int)strlen(ok[i].want));
        assert_string_equal(buf, ok[i].want);
    }

    /* Records the reader could not produce are refused. */
    struct ms_trace_rec bad[] = {
        {.kind = MS_TR_HEADER, .version = 3},
        {.kind = MS_TR_HEADER, .version = 0},
        {.kind = (enum ms_trace_kind)42},
        {.kind = MS_TR_TOUCH, .arg = 4, .mode = 1, .addr = 1, .size = 1},
        {.kind = MS_TR_TOUCH, .arg = -2, .mode = 1, .addr = 1, .size = 1},
        {.kind = MS_TR_TOUCH, .arg = 4096, .mode = 1, .addr = 1, .size = 1},
        {.kind = MS_TR_TOUCH, .arg = 0, .mode = 0, .addr = 1, .size = 1},
        {.kind = MS_TR_TOUCH, .arg = 0, .mode = 4, .addr = 1, .size = 1},
        {.kind = MS_TR_TOUCH, .arg = 0, .mode = 1, .addr = 1, .size = 0},
        {.kind = MS_TR_TOUCH, .arg = 0, .mode = 1, .addr = UINT64_MAX, .size = 1},
        {.kind = MS_TR_KERNEL, .grid = {1, 1, 1}, .block = {1, 1, 1}, .prof = 3},
        {.kind = MS_TR_SYNC, .task = UINT32_MAX},
        {.kind = MS_TR_ALLOC, .task = 1, .addr = 0, .size = 1},
        {.kind = MS_TR_ALLOC, .task = 1, .addr = 1, .size = 0},
        {.kind = MS_TR_ALLOC, .task = 1, .addr = UINT64_MAX, .size = 1},
        {.kind = MS_TR_ALLOC, .task = 1, .addr = 1, .size = 1, .rkind = MS_RK_COUNT},
        {.kind = MS_TR_COPY, .dir = (enum ms_copy_dir)4},
        {.kind = MS_TR_COPY, .dst = UINT64_MAX, .size = 1},
        {.kind = MS_TR_MEMSET, .size = (1ull << 48) + 1},
        {.kind = MS_TR_MEMSET, .dur_ns = (uint64_t)INT64_MAX + 1},
        {.kind = MS_TR_KERNEL, .grid = {1, 1, 1}, .block = {1, 0, 1}},
        {.kind = MS_TR_KERNEL, .grid = {1, 1, 1}, .block = {1, 1, 1}, .params_len = 4},
        {.kind = MS_TR_KERNEL,
         .grid = {1, 1, 1},
         .block = {1, 1, 1},
         .params = params,
         .params_len = MS_TRACE_MAX_PARAMS + 1},
        {.kind = MS_TR_KERNEL, .grid = {1, 1, 1}, .block = {1, 1, 1}, .nlayout = 1},
        {.kind = MS_TR_KERNEL,
         .grid = {1, 1, 1},
         .block = {1, 1, 1},
         .params = params,
         .params_len = 3,
         .layout = lay,
         .nlayout = 2},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        if (ms_trace_format(&bad[i], buf, sizeof buf) != MS_E_INVAL)
            fail_msg("bad record %zu was formatted: %s", i, buf);
    }
    assert_int_equal(ms_trace_format(NULL, buf, sizeof buf), MS_E_INVAL);
    assert_int_equal(ms_trace_format(&k, NULL, 10), MS_E_INVAL);
}

/* ---- version 2: mod, prof, touch ------------------------------------------------------- */

static void test_version2(void **state)
{
    (void)state;
    struct ms_trace_reader r;
    struct ms_trace_rec rec;

    /* Every version-2 addition is refused in a version-1 trace, saying why. */
    const char *v2only[] = {
        "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= mod=ff",
        "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= prof=seen",
        "touch 1 0 r 0x1000 16",
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(v2only); i++) {
        ms_trace_reader_init(&r);
        assert_int_equal(parse_str(&r, "msched-trace 1", &rec), 1);
        assert_int_equal(parse_str(&r, v2only[i], &rec), MS_E_PARSE);
        assert_non_null(strstr(r.err, "needs msched-trace 2"));
        assert_non_null(strstr(r.err, "version 1"));
        ms_trace_reader_fini(&r);
    }

    reader_with_header(&r);
    assert_int_equal(parse_str(&r,
                               "kernel 7 1 5 grid=1,1,1 block=1,1,1 name=k params=0010 "
                               "prof=seen  mod=00FfEe",
                               &rec),
                     1);
    assert_int_equal(rec.mod, 0xffee);
    assert_int_equal(rec.prof, MS_PROF_SEEN);
    assert_int_equal(parse_str(&r, "kernel 7 1 5 grid=1,1,1 block=1,1,1 name=k params=", &rec), 1);
    assert_int_equal(rec.mod, 0);
    assert_int_equal(rec.prof, MS_PROF_NONE);
    assert_int_equal(parse_str(&r, "touch 7 16 rw 0x7f0000001000 4096", &rec), 1);
    assert_int_equal(rec.kind, MS_TR_TOUCH);
    assert_int_equal(rec.task, 7);
    assert_int_equal(rec.arg, 16);
    assert_int_equal(rec.mode, MS_TOUCH_R | MS_TOUCH_W);
    assert_int_equal(rec.addr, 0x7f0000001000ull);
    assert_int_equal(rec.size, 4096);
    assert_int_equal(parse_str(&r, "touch 7 - w 0x10 1", &rec), 1);
    assert_int_equal(rec.arg, -1);
    assert_int_equal(rec.mode, MS_TOUCH_W);

    struct {
        const char *line, *why;
    } bad[] = {
        {"touch 7 4 r 0x10 1", "arg '4' is not -, or a multiple of 8"},
        {"touch 7 4096 r 0x10 1", "arg '4096'"},
        {"touch 7 -1 r 0x10 1", "arg '-1'"},
        {"touch 7 0 x 0x10 1", "mode 'x' is not r, w or rw"},
        {"touch 7 0 wr 0x10 1", "mode 'wr'"},
        {"touch 7 0 r 0x10 0", "out of range 1..281474976710656"},
        {"touch 7 0 r 0x10 281474976710657", "out of range"},
        {"touch 7 0 r 0xffffffffffffffff 2", "wraps"},
        {"touch 7 0 r 0x10", "missing field <bytes>"},
        {"touch 7 0 r 0x10 1 2", "unexpected extra field"},
        {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= mod=", "mod '' is not 1..16 hex"},
        {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= mod=0x1", "mod '0x1'"},
        {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= mod=11111111111111111",
         "not 1..16 hex"},
        {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= prof=yes", "prof 'yes'"},
        {"kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params= prof=seen prof=seen", "duplicate"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        if (parse_str(&r, bad[i].line, &rec) != MS_E_PARSE || !strstr(r.err, bad[i].why))
            fail_msg("'%s' gave '%s', want '%s'", bad[i].line, r.err, bad[i].why);
    }
    ms_trace_reader_fini(&r);
}

/* ---- allocation failure ----------------------------------------------------------------- */

/* Parse a small then a larger kernel line (so buffers grow) with the nth allocation failing. */
static int parse_two(uint64_t fail_at)
{
    static const char *lines[] = {
        "msched-trace 1",
        "task 1 prio=0 name=ab",
        "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0102 layout=0:2",
        "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=a_much_longer_kernel_name_to_grow "
        "params=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f "
        "layout=0:8,8:8,16:4,20:4,24:8",
    };
    struct ms_trace_reader r;
    struct ms_trace_rec rec;
    int result = 0;
    ms_trace_reader_init(&r);
    ms_alloc_fail_after(fail_at);
    for (size_t i = 0; i < MS_ARRAY_LEN(lines); i++) {
        int rc = parse_str(&r, lines[i], &rec);
        if (rc == MS_E_NOMEM) {
            assert_non_null(strstr(r.err, "out of memory"));
            assert_true(strncmp(r.err, "line ", 5) == 0);
            result = rc;
            continue; /* the reader stays usable */
        }
        assert_int_equal(rc, 1);
    }
    if (result == 0) {
        assert_int_equal(rec.nlayout, 5);
        assert_int_equal(rec.params[31], 0x1f);
        assert_string_equal(rec.name, "a_much_longer_kernel_name_to_grow");
    }
    ms_alloc_fail_after(0);
    ms_trace_reader_fini(&r);
    return result;
}

static void test_alloc_failure(void **state)
{
    (void)state;
    uint64_t base = ms_alloc_live();
    uint64_t n;
    int failures = 0;
    for (n = 1; n < 100; n++) {
        int rc = parse_two(n);
        assert_true(ms_alloc_live() == base);
        if (rc == 0)
            break;
        assert_int_equal(rc, MS_E_NOMEM);
        failures++;
    }
    assert_true(n < 100);
    assert_true(failures >= 3); /* name, params, layout at least */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind),       cmocka_unit_test(test_blank_comment_whitespace),
        cmocka_unit_test(test_roundtrip_random), cmocka_unit_test(test_names),
        cmocka_unit_test(test_malformed),        cmocka_unit_test(test_header_rules),
        cmocka_unit_test(test_line_limits),      cmocka_unit_test(test_format),
        cmocka_unit_test(test_alloc_failure),    cmocka_unit_test(test_version2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
