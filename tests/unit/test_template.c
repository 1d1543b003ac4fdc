/*
 * test_template.c - argument templates (core/template.h): fitting from version-2 profiles, the
 * store's text format, evaluation and ms_predict_launch_tmpl.
 *
 * What is covered
 *   - each rule form fitted from a generated profile: fixed, linear in one argument (a vector
 *     of n floats), a product of two (rows*cols), offset-linear (pointer plus an offset
 *     argument, a sum of two), strided (a submatrix of a row-major matrix); a launch outside the
 *     learned cases (larger n) is predicted by the formula;
 *   - refusals: inconsistent launches get no rule; opaque kernels; `-` touches make a kernel
 *     unsafe; a touch with no prof=seen kernel before it is a parse error;
 *   - incremental learning (two profiles, and through the text format), the 64-observation cap;
 *   - store round-trip (format, parse, format is identical), parser errors with line numbers;
 *   - ms_predict_launch_tmpl against ms_predict_launch on 1 GiB regions (64 MiB chunks);
 *   - allocation failure at every allocation of learning and parsing, with no leak;
 *   - a timing loop of 1e6 predictions of an 8-parameter launch (printed; bound very loose).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/template.h"

static const uint64_t A = 0x7f0000000000ull, B = 0x7f0040000000ull; /* 1 GiB regions */

/* ---- trace builder ---------------------------------------------------------------------- */

static char tbuf[1 << 22];
static size_t tlen;

static void tb(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tbuf + tlen, sizeof tbuf - tlen, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof tbuf - tlen);
    tlen += (size_t)n;
}

static void tb_start(void)
{
    tlen = 0;
    tb("msched-trace 2\nalloc 1 0x%llx 1073741824 device\nalloc 1 0x%llx 1073741824 device\n",
       (unsigned long long)A, (unsigned long long)B);
}

static void put64(uint8_t *p, size_t off, uint64_t v)
{
    memcpy(p + off, &v, 8);
}

static void put32(uint8_t *p, size_t off, uint32_t v)
{
    memcpy(p + off, &v, 4);
}

static void tb_kernel(const char *name, const uint8_t *p, size_t n, const char *layout,
                      const char *prof)
{
    tb("kernel 1 0 100 grid=1,1,1 block=1,1,1 name=%s params=", name);
    for (size_t i = 0; i < n; i++)
        tb("%02x", p[i]);
    if (layout)
        tb(" layout=%s", layout);
    tb(" mod=abc prof=%s\n", prof);
}

static void tb_touch(int arg, const char *mode, uint64_t addr, uint64_t bytes)
{
    if (arg < 0)
        tb("touch 1 - %s 0x%llx %llu\n", mode, (unsigned long long)addr, (unsigned long long)bytes);
    else
        tb("touch 1 %d %s 0x%llx %llu\n", arg, mode, (unsigned long long)addr,
           (unsigned long long)bytes);
}

static struct ms_tmpl_store *learn_tb(void)
{
    struct ms_tmpl_store *s;
    char why[256];
    assert_int_equal(ms_tmpl_store_new(&s), MS_OK);
    int rc = ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why);
    if (rc)
        fail_msg("learn: %d %s", rc, why);
    return s;
}

/* saxpy(const float *x, float *y, int n): x read, y read and written, n floats each */
static void saxpy(uint64_t x, uint64_t y, uint32_t n)
{
    uint8_t p[20];
    put64(p, 0, x);
    put64(p, 8, y);
    put32(p, 16, n);
    tb_kernel("saxpy", p, sizeof p, "0:8,8:8,16:4", "seen");
    tb_touch(0, "r", x, 4ull * n);
    tb_touch(8, "r", y, 2ull * n); /* two overlapping records: merged */
    tb_touch(8, "rw", y + 4, 4ull * n - 4);
}

static int eval1(const struct ms_tmpl_kernel *k, uint32_t arg, uint64_t ptr, const uint8_t *p,
                 size_t n, const struct ms_param_layout *lay, size_t nlay, struct ms_range *out,
                 size_t cap)
{
    struct ms_launch l = {1, p, n, lay, nlay};
    return ms_tmpl_eval(k, arg, ptr, &l, out, cap);
}

static const struct ms_param_layout saxpy_lay[] = {{0, 8}, {8, 8}, {16, 4}};

/* ---- fitting ---------------------------------------------------------------------------- */

static void test_fit_fixed(void **state)
{
    (void)state;
    tb_start();
    for (uint32_t n = 1; n <= 4; n++) {
        uint8_t p[12];
        put64(p, 0, A + n * 8 * MS_MIB);
        put32(p, 8, n * 1000);
        tb_kernel("fixed", p, sizeof p, "0:8,8:4", "seen");
        tb_touch(0, "r", A + n * 8 * MS_MIB + 256, 1024 * 1024);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "fixed", 0xabc);
    assert_non_null(k);
    assert_null(ms_tmpl_find(s, "fixed", 0xabd));
    bool written = true;
    uint64_t launches = 0;
    assert_int_equal(ms_tmpl_rule(k, 0, &written, &launches), MS_TMPL_FIXED);
    assert_false(written);
    assert_int_equal(launches, 4);
    assert_int_equal(ms_tmpl_kernel_launches(k), 4);
    uint8_t p[12];
    put64(p, 0, B);
    put32(p, 8, 99999);
    struct ms_range g[4];
    assert_int_equal(eval1(k, 0, B, p, sizeof p, NULL, 0, g, 4), 1);
    assert_int_equal(g[0].addr, B + 256);
    assert_int_equal(g[0].bytes, 1024 * 1024);
    assert_int_equal(eval1(k, 8, B, p, sizeof p, NULL, 0, g, 4), MS_E_NOTFOUND); /* no rule */
    /* by name alone (the engine knows no module): while the name is unique */
    assert_ptr_equal(ms_tmpl_find_name(s, "fixed"), k);
    assert_null(ms_tmpl_find_name(s, "fixe"));
    assert_null(ms_tmpl_find_name(s, "fixedd"));
    tb_start();
    tb("kernel 1 0 100 grid=1,1,1 block=1,1,1 name=fixed params=00 mod=abd prof=seen\n");
    char why[128];
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_non_null(ms_tmpl_find(s, "fixed", 0xabd));
    assert_null(ms_tmpl_find_name(s, "fixed")); /* two modules: ambiguous */
    ms_tmpl_store_free(s);
}

static void test_fit_linear_one(void **state)
{
    (void)state;
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A + 64 * MS_MIB, B + 4096, 3000000);
    saxpy(A, B, 7000000);
    saxpy(A, B, 7000000); /* a repeat counts, adds nothing */
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "saxpy", 0xabc);
    assert_non_null(k);
    bool written;
    uint64_t launches;
    assert_int_equal(ms_tmpl_rule(k, 0, &written, &launches), MS_TMPL_LINEAR);
    assert_false(written);
    assert_int_equal(launches, 4);
    assert_int_equal(ms_tmpl_rule(k, 8, &written, NULL), MS_TMPL_LINEAR);
    assert_true(written);
    /* a launch far outside the learned cases: the formula, not the envelope */
    uint8_t p[20];
    put64(p, 0, A);
    put64(p, 8, B);
    put32(p, 16, 100000000);
    struct ms_range g[4];
    assert_int_equal(eval1(k, 0, A, p, sizeof p, saxpy_lay, 3, g, 4), 1);
    assert_int_equal(g[0].addr, A);
    assert_int_equal(g[0].bytes, 400000000ull);
    put32(p, 16, 0);
    assert_int_equal(eval1(k, 8, B, p, sizeof p, saxpy_lay, 3, g, 4), 0); /* n = 0: nothing */
    ms_tmpl_store_free(s);
}

/* tick(b, i) writes 64 KiB granule i of a buffer that starts 44 KiB into a granule: the profile's
 * granules are clipped to the allocation, so launch 0 touched [0, 20 KiB) and launch i >= 1
 * [i*64K - 44K, (i+1)*64K - 44K). The slope between launches 0 and 1 (20 KiB) explains nothing;
 * the one between the two largest i does (64 KiB), with launch 0 inside the prediction. */
static void test_fit_linear_clipped(void **state)
{
    (void)state;
    tb_start();
    const uint64_t G = 65536, off = 45056;
    const uint32_t ticks[] = {0, 1, 2, 3, 8, 13, 18, 23, 28, 33, 38};
    for (size_t t = 0; t < sizeof ticks / sizeof ticks[0]; t++) {
        uint32_t i = ticks[t];
        uint8_t p[12];
        put64(p, 0, A + off);
        put32(p, 8, i);
        tb_kernel("tick", p, sizeof p, "0:8,8:4", "seen");
        uint64_t lo = i == 0 ? A + off : A + i * G, hi = A + (i + 1) * G;
        tb_touch(0, "w", lo, hi - lo);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "tick", 0xabc);
    assert_non_null(k);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_LINEAR);
    uint8_t p[12];
    put64(p, 0, A + off);
    put32(p, 8, 100);
    struct ms_range g[4];
    static const struct ms_param_layout lay[] = {{0, 8}, {8, 4}};
    assert_int_equal(eval1(k, 0, A + off, p, sizeof p, lay, 2, g, 4), 1);
    assert_int_equal(g[0].addr, A + 100 * G);
    assert_int_equal(g[0].bytes, G);
    ms_tmpl_store_free(s);
}

/* fill(T *p, int n) as the profiler sees it: 2n bytes from p, recorded in whole 64 KiB granules
 * (PyTorch's FillFunctor on bf16 views of one buffer). With p off a granule boundary by a
 * different amount in each launch, the envelope rule starts up to a granule before p and ends up
 * to a granule after 2n: a launch of one granule is over-predicted by nearly two. The slack must
 * allow that, or every such kernel is left on whole allocations (a 7 GiB weights buffer per
 * fill, on the one-buffer Llama). */
static void test_fit_granule_ends(void **state)
{
    (void)state;
    tb_start();
    const uint64_t G = 65536;
    static const struct {
        uint64_t off;
        uint32_t n;
    } f[] = {{0, 16777216}, {12288, 786432}, {54784, 24576}, {52736, 24576}, {0, 24576},
             {48640, 4096}, {32256, 131072}, {65024, 24576}, {0, 835584},    {11264, 4096}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        uint64_t ptr = A + (i + 1) * 64 * MS_MIB + f[i].off;
        uint8_t p[16];
        put32(p, 0, f[i].n);
        put64(p, 8, ptr);
        tb_kernel("fill", p, sizeof p, "0:4,8:8", "seen");
        uint64_t lo = ptr & ~(G - 1), hi = (ptr + 2ull * f[i].n + G - 1) & ~(G - 1);
        tb_touch(8, "w", lo, hi - lo);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "fill", 0xabc);
    assert_non_null(k);
    assert_int_equal(ms_tmpl_rule(k, 8, NULL, NULL), MS_TMPL_LINEAR);
    /* a fill never seen: 100 MB from an unaligned pointer, covered and not much more */
    uint64_t ptr = A + 512 * MS_MIB + 40000;
    uint8_t p[16];
    put32(p, 0, 50000000);
    put64(p, 8, ptr);
    static const struct ms_param_layout lay[] = {{0, 4}, {8, 8}};
    struct ms_range g[4];
    assert_int_equal(eval1(k, 8, ptr, p, sizeof p, lay, 2, g, 4), 1);
    assert_true(g[0].addr <= ptr && g[0].addr + G > ptr);
    assert_true(g[0].addr + g[0].bytes >= ptr + 100000000);
    assert_true(g[0].addr + g[0].bytes <= ptr + 100000000 + 2 * G);
    /* evaluated at the touches' resolution: a fill from further into its granule than any
     * profiled one (the rule starts 65024 bytes before the pointer, this touch 65500) misses
     * nothing, since the rule's range is rounded out to the granule as the engine's chunks are */
    tb_start();
    ptr = A + 64 * MS_MIB + 65500;
    put32(p, 0, 24576);
    put64(p, 8, ptr);
    tb_kernel("fill", p, sizeof p, "0:4,8:8", "seen");
    tb_touch(8, "w", ptr - 65500, 2 * G);
    struct ms_tmpl_acc a;
    char why[128];
    assert_int_equal(ms_tmpl_accuracy(s, tbuf, tlen, &a, why, sizeof why), MS_OK);
    assert_int_equal(a.tmpl_launches, 1);
    assert_int_equal(a.touched, 2 * G);
    assert_int_equal(a.tmpl_miss, 0);
    assert_true(a.tmpl_pred <= 4 * G); /* the slack's two granules, each end rounded out */
    ms_tmpl_store_free(s);
}

/* Accuracy (ms_tmpl_accuracy): learned from two saxpy launches, evaluated on two others (other
 * sizes): templates predict every touched byte and little more, allocation granularity the
 * whole 1 GiB regions; a kernel not in the store, and an opaque launch, as documented. */
static void test_accuracy(void **state)
{
    (void)state;
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A, B, 3000000);
    struct ms_tmpl_store *s = learn_tb();
    tb_start();
    saxpy(A, B, 2000000);
    saxpy(A + 4096, B, 5000000);
    uint8_t p[8];
    put64(p, 0, B);
    tb_kernel("unknown", p, sizeof p, "0:8", "seen");
    tb_touch(0, "r", B, 1000);
    tb_kernel("saxpy", p, sizeof p, "0:8", "opaque");
    struct ms_tmpl_acc a;
    char why[128];
    assert_int_equal(ms_tmpl_accuracy(s, tbuf, tlen, &a, why, sizeof why), MS_OK);
    assert_int_equal(a.launches, 3);
    assert_int_equal(a.opaque, 1);
    assert_int_equal(a.tmpl_launches, 2);
    /* saxpy(n) touches 4n bytes of x and 4n of y; unknown touches 1000 bytes of B */
    uint64_t touched = 8ull * 2000000 + 8ull * 5000000 + 1000;
    assert_int_equal(a.touched, touched);
    assert_int_equal(a.alloc_miss, 0);
    assert_int_equal(a.alloc_pred, 2 * 2 * MS_GIB + MS_GIB);
    assert_int_equal(a.tmpl_miss, 0);
    /* templates: the saxpy launches within the slack, unknown's whole region */
    assert_true(a.tmpl_pred >= touched - 1000 + MS_GIB);
    assert_true(a.tmpl_pred - MS_GIB <= touched + 4 * (touched / 16 + MS_TMPL_SLACK_ABS));
    /* the same per kernel name: sorted, summing to the totals, the opaque launch in none */
    struct ms_tmpl_acc b;
    struct ms_tmpl_acc_kernel *kv;
    size_t nk;
    assert_int_equal(ms_tmpl_accuracy_kernels(s, tbuf, tlen, &b, &kv, &nk, why, sizeof why), MS_OK);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(nk, 2);
    assert_string_equal(kv[0].name, "saxpy");
    assert_string_equal(kv[1].name, "unknown");
    assert_true(kv[0].tmpl);
    assert_false(kv[1].tmpl);
    assert_int_equal(kv[0].launches, 2);
    assert_int_equal(kv[1].launches, 1);
    assert_int_equal(kv[1].touched, 1000);
    assert_int_equal(kv[1].tmpl_pred, MS_GIB);
    assert_int_equal(kv[0].touched + kv[1].touched, a.touched);
    assert_int_equal(kv[0].tmpl_pred + kv[1].tmpl_pred, a.tmpl_pred);
    assert_int_equal(kv[0].alloc_pred + kv[1].alloc_pred, a.alloc_pred);
    assert_int_equal(kv[0].alloc_pred, 4 * MS_GIB);
    ms_tmpl_acc_kernels_free(kv, nk);
    /* kv and nk go together */
    assert_int_equal(ms_tmpl_accuracy_kernels(s, tbuf, tlen, &b, &kv, NULL, why, sizeof why),
                     MS_E_INVAL);
    assert_null(kv);
    /* a store that knows nothing: templates are allocation granularity */
    struct ms_tmpl_store *empty;
    assert_int_equal(ms_tmpl_store_new(&empty), MS_OK);
    assert_int_equal(ms_tmpl_accuracy(empty, tbuf, tlen, &a, why, sizeof why), MS_OK);
    assert_int_equal(a.tmpl_launches, 0);
    assert_int_equal(a.tmpl_pred, a.alloc_pred);
    /* a bad trace is an error with its line */
    assert_int_equal(
        ms_tmpl_accuracy(empty, "msched-trace 2\ntouch 1 0 r 0x10 4\n", 34, &a, why, sizeof why),
        MS_E_PARSE);
    assert_non_null(strstr(why, "line 2"));
    ms_tmpl_store_free(empty);
    ms_tmpl_store_free(s);
}

/* A kernel whose one parameter is a struct {const float *x; int n; int pad; float *y;}: the
 * sizes inside a struct are integer arguments too, so both pointers get linear rules. */
static void test_fit_struct_param(void **state)
{
    (void)state;
    tb_start();
    static const uint32_t ns[] = {1000000, 3000000, 2000000};
    for (size_t i = 0; i < 3; i++) {
        uint8_t p[24];
        put64(p, 0, A);
        put32(p, 8, ns[i]);
        put32(p, 12, 7);
        put64(p, 16, B);
        tb_kernel("gemv", p, sizeof p, "0:24", "seen");
        tb_touch(0, "r", A, 4ull * ns[i]);
        tb_touch(16, "w", B, 8ull * ns[i]);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "gemv", 0xabc);
    assert_non_null(k);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_LINEAR);
    assert_int_equal(ms_tmpl_rule(k, 16, NULL, NULL), MS_TMPL_LINEAR);
    uint8_t p[24];
    put64(p, 0, A);
    put32(p, 8, 5000000);
    put32(p, 12, 7);
    put64(p, 16, B);
    static const struct ms_param_layout lay[] = {{0, 24}};
    struct ms_range g[4];
    assert_int_equal(eval1(k, 16, B, p, sizeof p, lay, 1, g, 4), 1);
    assert_int_equal(g[0].addr, B);
    assert_int_equal(g[0].bytes, 40000000);
    ms_tmpl_store_free(s);
}

static void test_fit_linear_two(void **state)
{
    (void)state;
    /* half-precision matrix m(const half *a, int rows, int cols): rows * cols * 2 bytes */
    static const uint32_t rc[][2] = {{1000, 2000}, {3000, 500}, {1500, 1500}, {4000, 4000}};
    tb_start();
    for (size_t i = 0; i < MS_ARRAY_LEN(rc); i++) {
        uint8_t p[16];
        put64(p, 0, A);
        put32(p, 8, rc[i][0]);
        put32(p, 12, rc[i][1]);
        tb_kernel("mat", p, sizeof p, "0:8,8:4,12:4", "seen");
        tb_touch(0, "w", A, 2ull * rc[i][0] * rc[i][1]);
    }
    /* offset-linear: k(float *p, long off, int n) touches [p + 4 off, p + 4 off + 4 n) */
    static const uint64_t on[][2] = {{0, 1000000}, {2000000, 3000000}, {500000, 6000000}};
    for (size_t i = 0; i < MS_ARRAY_LEN(on); i++) {
        uint8_t p[20];
        put64(p, 0, B);
        put64(p, 8, on[i][0]);
        put32(p, 16, (uint32_t)on[i][1]);
        tb_kernel("offs", p, sizeof p, "0:8,8:8,16:4", "seen");
        tb_touch(0, "r", B + 4 * on[i][0], 4 * on[i][1]);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "mat", 0xabc);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_LINEAR);
    uint8_t p[20];
    put64(p, 0, A);
    put32(p, 8, 5000);
    put32(p, 12, 6000);
    struct ms_range g[4];
    assert_int_equal(eval1(k, 0, A, p, 16, NULL, 0, g, 4), 1);
    assert_int_equal(g[0].addr, A);
    assert_int_equal(g[0].bytes, 60000000ull);

    k = ms_tmpl_find(s, "offs", 0xabc);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_LINEAR);
    put64(p, 0, B);
    put64(p, 8, 10000000);
    put32(p, 16, 20000000);
    assert_int_equal(eval1(k, 0, B, p, 20, NULL, 0, g, 4), 1);
    assert_int_equal(g[0].addr, B + 40000000ull);
    assert_int_equal(g[0].bytes, 80000000ull);
    ms_tmpl_store_free(s);
}

/* sub(float *m, int ld, int rows, int cols): rows blocks of 4 cols bytes every 4 ld bytes */
static void submatrix(uint64_t m, uint32_t ld, uint32_t rows, uint32_t cols)
{
    uint8_t p[20];
    put64(p, 0, m);
    put32(p, 8, ld);
    put32(p, 12, rows);
    put32(p, 16, cols);
    tb_kernel("sub", p, sizeof p, "0:8,8:4,12:4,16:4", "seen");
    for (uint32_t r = 0; r < rows; r++)
        tb_touch(0, "rw", m + 4ull * ld * r, 4ull * cols);
}

static void test_fit_strided(void **state)
{
    (void)state;
    tb_start();
    submatrix(A, 4096, 100, 1000);
    submatrix(A + 4000, 8192, 300, 2000);
    submatrix(A, 3000, 50, 500);
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "sub", 0xabc);
    bool written;
    assert_int_equal(ms_tmpl_rule(k, 0, &written, NULL), MS_TMPL_STRIDED);
    assert_true(written);
    uint8_t p[20];
    put64(p, 0, B);
    put32(p, 8, 10000);
    put32(p, 12, 64);
    put32(p, 16, 100);
    struct ms_range g[MS_TMPL_MAX_RANGES];
    assert_int_equal(eval1(k, 0, B, p, 20, NULL, 0, g, MS_ARRAY_LEN(g)), 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(g[i].addr, B + 40000ull * (uint64_t)i);
        assert_int_equal(g[i].bytes, 400);
    }
    /* more blocks than the cap (or than the caller's room): one covering range */
    put32(p, 12, 1000);
    assert_int_equal(eval1(k, 0, B, p, 20, NULL, 0, g, MS_ARRAY_LEN(g)), 1);
    assert_int_equal(g[0].addr, B);
    assert_int_equal(g[0].bytes, 40000ull * 999 + 400);
    put32(p, 12, 10);
    assert_int_equal(eval1(k, 0, B, p, 20, NULL, 0, g, 4), 1);
    assert_int_equal(g[0].bytes, 40000ull * 9 + 400);

    char *txt;
    size_t n;
    assert_int_equal(ms_tmpl_store_describe(s, &txt, &n), MS_OK);
    assert_non_null(strstr(txt, "strided"));
    assert_non_null(strstr(txt, "sub (module abc): 3 profiled launches"));
    ms_free(txt);
    ms_tmpl_store_free(s);
}

static void test_refusals(void **state)
{
    (void)state;
    tb_start();
    /* inconsistent: the same n touches 4 MB once and 40 MB once */
    uint32_t ns[] = {1000000, 1000000, 2000000};
    uint64_t bytes[] = {4000000, 40000000, 1000000};
    for (int i = 0; i < 3; i++) {
        uint8_t p[12];
        put64(p, 0, A);
        put32(p, 8, ns[i]);
        tb_kernel("incons", p, sizeof p, "0:8,8:4", "seen");
        tb_touch(0, "r", A, bytes[i]);
    }
    saxpy(A, B, 1000000);
    tb_kernel("saxpy", (const uint8_t[20]){0}, 20, "0:8,8:8,16:4", "opaque");
    uint8_t p[8];
    put64(p, 0, A);
    tb_kernel("chase", p, 8, NULL, "seen");
    tb_touch(0, "r", A, 64);
    tb_touch(-1, "r", B + 4096, 64);
    struct ms_tmpl_store *s = learn_tb();

    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "incons", 0xabc);
    uint64_t launches;
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, &launches), MS_TMPL_NONE);
    assert_int_equal(launches, 3);
    struct ms_range g[4];
    assert_int_equal(eval1(k, 0, A, p, 8, NULL, 0, g, 4), MS_E_NOTFOUND);

    k = ms_tmpl_find(s, "saxpy", 0xabc);
    assert_true(ms_tmpl_kernel_opaque(k));
    assert_int_equal(ms_tmpl_kernel_launches(k), 2);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_NONE);

    k = ms_tmpl_find(s, "chase", 0xabc);
    assert_true(ms_tmpl_kernel_unsafe(k));
    assert_false(ms_tmpl_kernel_opaque(k));
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_NONE);
    assert_int_equal(eval1(k, 0, A, p, 8, NULL, 0, g, 4), MS_E_NOTFOUND);
    ms_tmpl_store_free(s);

    /* a touch with no prof=seen kernel of its task before it */
    char why[256];
    assert_int_equal(ms_tmpl_store_new(&s), MS_OK);
    const char *bad[][2] = {
        {"msched-trace 2\ntouch 1 0 r 0x10 1\n", "line 2: touch: no prof=seen kernel of task 1"},
        {"msched-trace 2\nkernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=00 prof=seen\n"
         "kernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=00\ntouch 1 - r 0x10 1\n",
         "line 4: touch: no prof=seen"},
        {"msched-trace 2\nkernel 2 0 5 grid=1,1,1 block=1,1,1 name=k params=00 prof=seen\n"
         "touch 1 - r 0x10 1\n",
         "line 3: touch: no prof=seen kernel of task 1"},
        {"msched-trace 2\nkernel 1 0 5 grid=1,1,1 block=1,1,1 name=k params=0000 prof=seen\n"
         "touch 1 0 r 0x10 1\n",
         "line 3: touch: arg 0 is beyond the kernel's 2 parameter bytes"},
        {"msched-trace 1\ntouch 1 0 r 0x10 1\n", "line 2: touch: the touch record needs"},
        {"# nothing\n", "no 'msched-trace N' header"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        int rc = ms_tmpl_learn_trace(s, bad[i][0], strlen(bad[i][0]), why, sizeof why);
        if (rc != MS_E_PARSE || !strstr(why, bad[i][1]))
            fail_msg("bad trace %zu: rc %d why '%s', want '%s'", i, rc, why, bad[i][1]);
    }
    ms_tmpl_store_free(s);
}

static void test_incremental(void **state)
{
    (void)state;
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A, B, 2000000);
    struct ms_tmpl_store *s = learn_tb(), *s2;
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "saxpy", 0xabc);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_LINEAR);

    /* through the text format: the observations travel with the rules */
    char *txt, why[256];
    size_t n;
    assert_int_equal(ms_tmpl_store_format(s, &txt, &n), MS_OK);
    assert_int_equal(ms_tmpl_store_new(&s2), MS_OK);
    assert_int_equal(ms_tmpl_store_parse(s2, txt, n, why, sizeof why), MS_OK);
    ms_free(txt);

    tb_start();
    saxpy(A, B, 5000000);
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_learn_trace(s2, tbuf, tlen, why, sizeof why), MS_OK);
    uint64_t launches;
    assert_ptr_equal(ms_tmpl_find(s, "saxpy", 0xabc), k); /* entries never move */
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, &launches), MS_TMPL_LINEAR);
    assert_int_equal(launches, 3);
    assert_int_equal(ms_tmpl_rule(ms_tmpl_find(s2, "saxpy", 0xabc), 0, NULL, &launches),
                     MS_TMPL_LINEAR);
    assert_int_equal(launches, 3);

    /* a profile that contradicts: n = 1e6 touching 40 MB; no rule explains all */
    tb_start();
    uint8_t p[20];
    put64(p, 0, A);
    put64(p, 8, B);
    put32(p, 16, 1000000);
    tb_kernel("saxpy", p, 20, "0:8,8:8,16:4", "seen");
    tb_touch(0, "r", A, 40000000);
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, &launches), MS_TMPL_NONE);
    assert_int_equal(launches, 4);
    assert_int_equal(ms_tmpl_rule(k, 8, NULL, NULL), MS_TMPL_LINEAR); /* y was not touched */
    ms_tmpl_store_free(s);

    /* merging a text into a store that has the kernel learns the text's observations */
    tb_start();
    saxpy(A, B, 9000000);
    assert_int_equal(ms_tmpl_store_new(&s), MS_OK);
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_rule(ms_tmpl_find(s, "saxpy", 0xabc), 0, NULL, NULL), MS_TMPL_FIXED);
    assert_int_equal(ms_tmpl_store_format(s2, &txt, &n), MS_OK);
    assert_int_equal(ms_tmpl_store_parse(s, txt, n, why, sizeof why), MS_OK);
    ms_free(txt);
    assert_int_equal(ms_tmpl_rule(ms_tmpl_find(s, "saxpy", 0xabc), 0, NULL, &launches),
                     MS_TMPL_LINEAR);
    assert_int_equal(launches, 4);
    ms_tmpl_store_free(s);
    ms_tmpl_store_free(s2);
}

static void test_obs_cap(void **state)
{
    (void)state;
    tb_start();
    for (uint32_t i = 1; i <= MS_TMPL_MAX_OBS + 6; i++)
        saxpy(A, B, 100000 * i);
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "saxpy", 0xabc);
    uint64_t launches;
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, &launches), MS_TMPL_LINEAR);
    assert_int_equal(launches, MS_TMPL_MAX_OBS + 6);
    char *txt, why[256];
    size_t n;
    assert_int_equal(ms_tmpl_store_format(s, &txt, &n), MS_OK);
    size_t nobs = 0;
    for (const char *q = txt; (q = strstr(q, "\nobs ")); q++)
        nobs++;
    assert_int_equal(nobs, 2 * MS_TMPL_MAX_OBS); /* x and y, 64 each */
    ms_free(txt);
    /* past the cap, a launch the rule does not explain refuses the argument for good */
    tb_start();
    uint8_t p[20];
    put64(p, 0, A);
    put64(p, 8, B);
    put32(p, 16, 1000);
    tb_kernel("saxpy", p, 20, "0:8,8:8,16:4", "seen");
    tb_touch(0, "r", A, 500000000);
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_NONE);
    tb_start();
    saxpy(A, B, 123);
    assert_int_equal(ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_rule(k, 0, NULL, NULL), MS_TMPL_NONE);
    assert_int_equal(ms_tmpl_store_format(s, &txt, &n), MS_OK);
    assert_non_null(strstr(txt, "arg 0 form=none written=0 refused=1"));
    ms_free(txt);
    ms_tmpl_store_free(s);
}

/* ---- the text format ---------------------------------------------------------------------- */

static void test_store_roundtrip(void **state)
{
    (void)state;
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A, B, 3000000);
    submatrix(A, 4096, 100, 1000);
    submatrix(A + 4000, 8192, 300, 2000);
    uint8_t p[8];
    put64(p, 0, A);
    tb_kernel("we%20ird%25name", p, 8, NULL, "seen");
    tb_touch(0, "r", A - 64, 64); /* before the pointer: negative lo */
    tb_kernel("tma", p, 8, NULL, "opaque");
    struct ms_tmpl_store *s = learn_tb(), *s2;
    assert_int_equal(ms_tmpl_store_count(s), 4);
    assert_non_null(ms_tmpl_find(s, "we ird%name", 0xabc));
    char *t1, *t2, why[256];
    size_t n1, n2;
    assert_int_equal(ms_tmpl_store_format(s, &t1, &n1), MS_OK);
    assert_int_equal(strlen(t1), n1);
    assert_true(strncmp(t1, "msched-templates 1\n", 19) == 0);
    assert_non_null(strstr(t1, "name=we%20ird%25name"));
    assert_non_null(strstr(t1, "lo=-64 hi=0"));
    assert_int_equal(ms_tmpl_store_new(&s2), MS_OK);
    assert_int_equal(ms_tmpl_store_parse(s2, t1, n1, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_store_format(s2, &t2, &n2), MS_OK);
    assert_int_equal(n1, n2);
    assert_string_equal(t1, t2);
    ms_free(t2);
    /* the parsed store predicts like the learned one */
    struct ms_range g1[4], g2[4];
    uint8_t q[20];
    put64(q, 0, A);
    put64(q, 8, B);
    put32(q, 16, 77777);
    assert_int_equal(eval1(ms_tmpl_find(s2, "saxpy", 0xabc), 8, B, q, 20, NULL, 0, g2, 4), 1);
    assert_int_equal(eval1(ms_tmpl_find(s, "saxpy", 0xabc), 8, B, q, 20, NULL, 0, g1, 4), 1);
    assert_memory_equal(g1, g2, sizeof g1[0]);
    ms_free(t1);
    ms_tmpl_store_free(s2);

    /* an empty store */
    assert_int_equal(ms_tmpl_store_new(&s2), MS_OK);
    assert_int_equal(ms_tmpl_store_format(s2, &t1, &n1), MS_OK);
    assert_string_equal(t1, "msched-templates 1\n");
    ms_free(t1);
    assert_int_equal(ms_tmpl_store_describe(s, &t1, &n1), MS_OK);
    assert_non_null(strstr(t1, "tma (module abc): 1 profiled launches; opaque"));
    assert_non_null(strstr(t1, "linear, bytes [P + 0, P + 0 + 4*x@16); read-only"));
    ms_free(t1);
    ms_tmpl_store_free(s2);
    ms_tmpl_store_free(s);
}

static void test_store_errors(void **state)
{
    (void)state;
    static const char K[] =
        "msched-templates 1\nkernel mod=1 launches=1 opaque=0 unsafe=0 name=k\n";
    static const char ARG[] =
        "arg 0 form=linear written=0 refused=0 launches=1 lo=0 hi=0,4*x16:4 count=1 stride=0\n";
    struct {
        const char *text;
        int rc;
        const char *why;
    } bad[] = {
        {"", MS_E_PARSE, "line 0: no 'msched-templates 1' header"},
        {"msched-templates 2\n", MS_E_VERSION, "line 1: unsupported templates version 2"},
        {"msched-templates x\n", MS_E_PARSE, "line 1: header: version"},
        {"kernel mod=1\n", MS_E_PARSE, "line 1: expected the header"},
        {"msched-templates 1\nkernel mod=1 launches=1 opaque=0 unsafe=0 name=k\n", MS_E_PARSE,
         "line 2: kernel 'k' has no 'end'"},
        {"msched-templates 1\nkernel mod=0x1 launches=1 opaque=0 unsafe=0 name=k\nend\n",
         MS_E_PARSE, "line 2: mod '0x1'"},
        {"msched-templates 1\nkernel mod=1 launches=1 opaque=2 unsafe=0 name=k\nend\n", MS_E_PARSE,
         "line 2: opaque '2' is not a decimal number in 0..1"},
        {"msched-templates 1\nkernel mod=1 launches=1 unsafe=0 opaque=0 name=k\nend\n", MS_E_PARSE,
         "line 2: expected field opaque="},
        {"msched-templates 1\nkernel mod=1 launches=1 opaque=0 unsafe=0 name=k%00\nend\n",
         MS_E_PARSE, "line 2: name has a bad %XX escape"},
        {"msched-templates 1\nkernel mod=1 launches=1 opaque=0 unsafe=0 name=k\nend\n"
         "kernel mod=1 launches=1 opaque=0 unsafe=0 name=k\nend\n",
         MS_E_PARSE, "line 4: kernel 'k' mod 1 appears twice"},
        {"msched-templates 1\narg 0\n", MS_E_PARSE, "line 2: arg outside a kernel block"},
        {"msched-templates 1\nobs 0 0 0 0 0 0 ints=\n", MS_E_PARSE, "line 2: obs before any arg"},
        {"msched-templates 1\nend\n", MS_E_PARSE, "line 2: end outside"},
        {"msched-templates 1\nbogus\n", MS_E_PARSE, "line 2: unknown record 'bogus'"},
        {"msched-templates 1\nkernel mod=1 launches=1 opaque=0 unsafe=0 name=k extra\n", MS_E_PARSE,
         "line 2: unexpected extra field 'extra'"},
        {"msched-templates 1\nk\xc3\xa9\n", MS_E_PARSE, "line 2: byte 0xc3"},
    };
    char why[256];
    struct ms_tmpl_store *s;
    assert_int_equal(ms_tmpl_store_new(&s), MS_OK);
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        int rc = ms_tmpl_store_parse(s, bad[i].text, strlen(bad[i].text), why, sizeof why);
        if (rc != bad[i].rc || !strstr(why, bad[i].why))
            fail_msg("bad store %zu: rc %d why '%s', want %d '%s'", i, rc, why, bad[i].rc,
                     bad[i].why);
        assert_int_equal(ms_tmpl_store_count(s), 0); /* nothing merged */
    }
    /* arg and obs lines: each a kernel block with one bad line at line 3 or 4 */
    struct {
        const char *arg, *obs, *why;
    } lines[] = {
        {"arg 4 form=none written=0 refused=0 launches=0 lo=0 hi=0 count=0 stride=0", NULL,
         "line 3: arg: offset is not a multiple of 8"},
        {"arg 4096 form=none written=0 refused=0 launches=0 lo=0 hi=0 count=0 stride=0", NULL,
         "line 3: arg: offset"},
        {"arg 0 form=curvy written=0 refused=0 launches=0 lo=0 hi=0 count=0 stride=0", NULL,
         "line 3: arg: form 'curvy'"},
        {"arg 0 form=fixed written=0 refused=1 launches=0 lo=0 hi=0 count=1 stride=0", NULL,
         "line 3: arg 0: refused=1 needs form=none"},
        {"arg 0 form=fixed written=0 refused=0 launches=0 lo=9223372036854775808 hi=0 count=1 "
         "stride=0",
         NULL, "line 3: lo: constant '9223372036854775808'"},
        {"arg 0 form=fixed written=0 refused=0 launches=0 lo=0,0*x0:4 hi=0 count=1 stride=0", NULL,
         "line 3: lo: monomial '0*x0:4'"},
        {"arg 0 form=fixed written=0 refused=0 launches=0 lo=0,1*x2:4 hi=0 count=1 stride=0", NULL,
         "line 3: lo: factor"},
        {"arg 0 form=fixed written=0 refused=0 launches=0 lo=0,1*x0:4,1*x4:4,1*x8:4 hi=0 "
         "count=1 stride=0",
         NULL, "line 3: lo: more than two monomials"},
        {"arg 0 form=fixed written=0 refused=0 launches=0 lo=0 hi=0,1*x4092:8 count=1 stride=0",
         NULL, "line 3: hi: factor"},
        {ARG, "obs 0 100 200 0 0 0 ints=", "line 4: obs: touched bytes do not fit"},
        {ARG, "obs 0 0 0 1 0 0 ints=", "line 4: obs: touched 0 needs"},
        {ARG, "obs 0 100 100 2 50 50 ints=", "line 4: obs: count, len and stride"},
        {ARG, "obs 0 100 50 2 25 60 ints=", "line 4: obs: count, len and stride"},
        {ARG, "obs 0 100 50 0 25 0 ints=", "line 4: obs: irregular"},
        {ARG, "obs 0 100 100 1 100 0 ints=16:4:2147483648", "line 4: obs: int '16:4:2147483648'"},
        {ARG, "obs 0 100 100 1 100 0 ints=16:4:1,8:8:1", "line 4: obs: ints must be in ascending"},
        {ARG, "obs 0 100 100 1 100 0 ints=16:2:1", "line 4: obs: int '16:2:1'"},
        {ARG, "obs 0 100 100 1 100 0", "line 4: missing field ints="},
        {ARG, "obs 0 100", "line 4: obs: expected"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(lines); i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s%s%send\n", K, lines[i].arg,
                 strchr(lines[i].arg, '\n') ? "" : "\n", lines[i].obs ? lines[i].obs : "",
                 lines[i].obs ? "\n" : "");
        int rc = ms_tmpl_store_parse(s, text, strlen(text), why, sizeof why);
        if (rc != MS_E_PARSE || !strstr(why, lines[i].why))
            fail_msg("bad line %zu: rc %d why '%s', want '%s'", i, rc, why, lines[i].why);
        assert_int_equal(ms_tmpl_store_count(s), 0);
    }
    /* a good one, with comments, blank lines and CRLF */
    char text[1024];
    snprintf(text, sizeof text, "# templates\r\n%s\n%sobs 0 400 400 1 400 0 ints=16:4:100\r\nend\n",
             K, ARG);
    assert_int_equal(ms_tmpl_store_parse(s, text, strlen(text), why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_store_count(s), 1);
    ms_tmpl_store_free(s);
}

/* ---- prediction with templates ------------------------------------------------------------- */

/* A region as the engine keeps one always mapped (region.h, I9): amap, every chunk on its host
 * chunk (HOST), so the templates may leave chunks out. */
static void amap_host(struct ms_rtable *rt, uint32_t region)
{
    struct ms_region *r = ms_region_get(rt, region);
    assert_non_null(r);
    r->amap = true;
    for (uint32_t c = 0; c < r->nchunks; c++)
        assert_int_equal(ms_chunk_mark_host(rt, MS_CHUNK_ID(region, c), 1000 + c), MS_OK);
}

/* A TMA kernel's tensor maps (ms_predict_launch_bounded): a 128-byte parameter whose words hold
 * the tensor's address names only the chunks of the tensor's extent, in an always-mapped region
 * (with its EMPTY chunks); the whole region otherwise; the rest of the buffer as before. */
static void test_predict_bounded(void **state)
{
    (void)state;
    struct ms_rtable rt;
    uint32_t ra, rb, rc;
    ms_rtable_init(&rt);
    assert_int_equal(ms_region_add(&rt, 1, A, MS_GIB, MS_RK_DEVICE, 0, &ra), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, B, MS_GIB, MS_RK_DEVICE, 0, &rb), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, B + 2 * MS_GIB, MS_GIB, MS_RK_DEVICE, 0, &rc), MS_OK);
    amap_host(&rt, ra);
    amap_host(&rt, rb); /* rc is not always mapped */
    uint8_t p[320], scratch[320];
    memset(p, 0, sizeof p);
    put64(p, 64 + 8, A + 100 * MS_MIB); /* tensor map 1 at 64: A + 100 MiB, 40 MiB */
    put64(p, 192 + 16, B + 2 * MS_GIB); /* tensor map 2 at 192: into rc */
    put64(p, 0, B + 300 * MS_MIB);      /* a plain pointer: B whole */
    struct ms_param_layout lay[] = {{0, 8}, {64, 256}};
    struct ms_launch l = {1, p, sizeof p, lay, 2};
    struct ms_param_bound bd[] = {{64, 128, {A + 100 * MS_MIB, 40 * MS_MIB}},
                                  {192, 128, {B + 2 * MS_GIB, 4096}}};
    struct ms_chunk_set got, whole;
    ms_chunk_set_init(&got);
    ms_chunk_set_init(&whole);
    assert_int_equal(ms_predict_launch(&rt, &l, &whole), 3);
    assert_int_equal(whole.n, 16 + 16 + 16);
    assert_true(ms_predict_launch_bounded(&rt, &l, NULL, bd, 2, scratch, &got) >= 0);
    /* A: chunks 1 and 2 (100..140 MiB); B whole (16); rc whole (16, not always mapped) */
    assert_int_equal(got.n, 2 + 16 + 16);
    assert_true(ms_chunk_set_has(&got, MS_CHUNK_ID(ra, 1)));
    assert_true(ms_chunk_set_has(&got, MS_CHUNK_ID(ra, 2)));
    assert_false(ms_chunk_set_has(&got, MS_CHUNK_ID(ra, 0)));
    assert_false(ms_chunk_set_has(&got, MS_CHUNK_ID(ra, 3)));
    assert_memory_equal(p + 64 + 8, &(uint64_t){A + 100 * MS_MIB}, 8); /* params untouched */
    /* an EMPTY chunk of A stays named */
    struct ms_chunk *c5 = ms_chunk_get(&rt, MS_CHUNK_ID(ra, 5));
    c5->state = MS_CS_EMPTY;
    ms_chunk_set_clear(&got);
    assert_true(ms_predict_launch_bounded(&rt, &l, NULL, bd, 1, scratch, &got) >= 0);
    assert_true(ms_chunk_set_has(&got, MS_CHUNK_ID(ra, 5)));
    assert_int_equal(got.n, 3 + 16 + 16); /* map 2 unbounded now: its word names rc whole */
    /* no bounds: exactly ms_predict_launch; a bound outside the buffer: MS_E_INVAL */
    ms_chunk_set_clear(&got);
    ms_chunk_set_clear(&whole);
    assert_int_equal(ms_predict_launch_bounded(&rt, &l, NULL, NULL, 0, NULL, &got),
                     ms_predict_launch(&rt, &l, &whole));
    assert_int_equal(got.n, whole.n);
    struct ms_param_bound out[] = {{256, 128, {A, 8}}};
    assert_int_equal(ms_predict_launch_bounded(&rt, &l, NULL, out, 1, scratch, &got), MS_E_INVAL);
    ms_chunk_set_fini(&got);
    ms_chunk_set_fini(&whole);
    ms_rtable_fini(&rt);
}

static void test_predict_tmpl(void **state)
{
    (void)state;
    struct ms_rtable rt;
    uint32_t ra, rb, rsmall;
    ms_rtable_init(&rt);
    assert_int_equal(ms_region_add(&rt, 1, A, MS_GIB, MS_RK_DEVICE, 0, &ra), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, B, MS_GIB, MS_RK_DEVICE, 0, &rb), MS_OK);
    assert_int_equal(ms_region_add(&rt, 1, B + 2 * MS_GIB, 4 * MS_MIB, MS_RK_DEVICE, 0, &rsmall),
                     MS_OK);
    amap_host(&rt, ra);
    amap_host(&rt, rb);
    amap_host(&rt, rsmall);
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A, B, 3000000);
    tb_kernel("chase", (const uint8_t[8]){0}, 8, NULL, "seen");
    tb_touch(-1, "r", A, 64);
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "saxpy", 0xabc);

    struct ms_chunk_set whole, part;
    ms_chunk_set_init(&whole);
    ms_chunk_set_init(&part);
    uint8_t p[20];
    /* x at A + 200 MiB, 20e6 floats = 80 MB: chunks 3 and 4; y at B: chunks 0 and 1 */
    put64(p, 0, A + 200 * MS_MIB);
    put64(p, 8, B);
    put32(p, 16, 20000000);
    struct ms_launch l = {1, p, sizeof p, saxpy_lay, 3};
    assert_int_equal(ms_predict_launch(&rt, &l, &whole), 2);
    assert_int_equal(whole.n, 32);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    ms_chunk_id want[] = {MS_CHUNK_ID(ra, 3), MS_CHUNK_ID(ra, 4), MS_CHUNK_ID(rb, 0),
                          MS_CHUNK_ID(rb, 1)};
    assert_int_equal(part.n, MS_ARRAY_LEN(want));
    assert_memory_equal(part.ids, want, sizeof want);
    for (size_t i = 0; i < part.n; i++)
        assert_true(ms_chunk_set_has(&whole, part.ids[i])); /* never more than whole regions */

    /* the same without a layout: the same chunks */
    l.layout = NULL;
    l.nlayout = 0;
    ms_chunk_set_clear(&part);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_memory_equal(part.ids, want, sizeof want);

    /* clamped to the region: x near A's end asks past it; n = 0 adds nothing for x, y */
    put64(p, 0, A + MS_GIB - 8 * MS_MIB);
    ms_chunk_set_clear(&part);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_int_equal(part.ids[0], MS_CHUNK_ID(ra, 15));
    assert_int_equal(part.n, 3);
    put32(p, 16, 0);
    ms_chunk_set_clear(&part);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_int_equal(part.n, 0);

    /* a pointer word with no rule (y replaced by a third region's pointer in the n word?) no:
     * a kernel whose second word has no rule: use a kernel learned with x only */
    put32(p, 16, 1000);
    put64(p, 8, B + 2 * MS_GIB);
    ms_chunk_set_clear(&part);
    ms_chunk_set_clear(&whole);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_int_equal(part.n, 2); /* A's chunk 15, the small region's one chunk */

    /* NULL, opaque and unsafe kernels: exactly ms_predict_launch */
    const struct ms_tmpl_kernel *chase = ms_tmpl_find(s, "chase", 0xabc);
    assert_true(ms_tmpl_kernel_unsafe(chase));
    const struct ms_tmpl_kernel *ks[] = {NULL, chase};
    put64(p, 8, B);
    put32(p, 16, 20000000);
    assert_int_equal(ms_predict_launch(&rt, &l, &whole), 2);
    for (size_t i = 0; i < MS_ARRAY_LEN(ks); i++) {
        ms_chunk_set_clear(&part);
        assert_int_equal(ms_predict_launch_tmpl(&rt, &l, ks[i], &part), 2);
        assert_int_equal(part.n, whole.n);
        assert_memory_equal(part.ids, whole.ids, whole.n * sizeof whole.ids[0]);
    }
    /* safety: a region that is not always mapped is taken whole (a chunk left out would be
     * unmapped), and an always-mapped one keeps its EMPTY chunks (mapped nowhere yet) */
    put64(p, 0, A + 200 * MS_MIB);
    ms_chunk_set_clear(&part);
    struct ms_region *rrb = ms_region_get(&rt, rb);
    rrb->amap = false;
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_int_equal(part.n, 2 + 16); /* A's chunks 3 and 4, all of B */
    rrb->amap = true;
    uint32_t ra2;
    assert_int_equal(ms_region_add(&rt, 1, B + 4 * MS_GIB, MS_GIB, MS_RK_DEVICE, 0, &ra2), MS_OK);
    ms_region_get(&rt, ra2)->amap = true; /* a daemon task's new allocation: every chunk EMPTY */
    assert_int_equal(ms_chunk_mark_host(&rt, MS_CHUNK_ID(ra2, 7), 7), MS_OK);
    put64(p, 0, B + 4 * MS_GIB);
    ms_chunk_set_clear(&part);
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), 2);
    assert_int_equal(part.n,
                     15 + 2); /* ra2's 15 EMPTY chunks (not 7: HOST, unpredicted), B's 0, 1 */
    assert_false(ms_chunk_set_has(&part, MS_CHUNK_ID(ra2, 7)));
    assert_true(ms_chunk_set_has(&part, MS_CHUNK_ID(ra2, 0)));

    /* a bad layout is refused as by ms_predict_launch */
    struct ms_param_layout badlay[] = {{16, 8}};
    l.layout = badlay;
    l.nlayout = 1;
    assert_int_equal(ms_predict_launch_tmpl(&rt, &l, k, &part), MS_E_INVAL);

    ms_chunk_set_fini(&whole);
    ms_chunk_set_fini(&part);
    ms_tmpl_store_free(s);
    ms_rtable_fini(&rt);
}

/* Time 1e6 predictions of an 8-parameter launch (4 pointers with rules, 4 integers). */
static void test_predict_timing(void **state)
{
    (void)state;
    struct ms_rtable rt;
    uint32_t r;
    ms_rtable_init(&rt);
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            ms_region_add(&rt, 1, A + (uint64_t)i * MS_GIB, MS_GIB, MS_RK_DEVICE, 0, &r), MS_OK);
    for (uint32_t i = 0; i < 4; i++)
        amap_host(&rt, i);
    /* millions of floats per launch and argument; no column an affine function of another */
    static const uint32_t m[4][4] = {{1, 2, 3, 4}, {2, 1, 4, 3}, {3, 4, 2, 1}, {2, 4, 1, 3}};
    tb_start();
    for (int n = 0; n < 4; n++) {
        uint8_t p[48];
        for (int i = 0; i < 4; i++)
            put64(p, 8 * (size_t)i, A + (uint64_t)i * MS_GIB);
        for (int i = 0; i < 4; i++)
            put32(p, 32 + 4 * (size_t)i, m[i][n] * 1000000);
        tb_kernel("eight", p, sizeof p, "0:8,8:8,16:8,24:8,32:4,36:4,40:4,44:4", "seen");
        for (int i = 0; i < 4; i++)
            tb_touch(8 * i, "r", A + (uint64_t)i * MS_GIB, 4ull * m[i][n] * 1000000);
    }
    struct ms_tmpl_store *s = learn_tb();
    const struct ms_tmpl_kernel *k = ms_tmpl_find(s, "eight", 0xabc);
    for (uint32_t i = 0; i < 32; i += 8)
        assert_int_equal(ms_tmpl_rule(k, i, NULL, NULL), MS_TMPL_LINEAR);
    uint8_t p[48];
    for (int i = 0; i < 4; i++)
        put64(p, 8 * (size_t)i, A + (uint64_t)i * MS_GIB);
    for (int i = 0; i < 4; i++)
        put32(p, 32 + 4 * (size_t)i, 5000000);
    struct ms_param_layout lay[] = {{0, 8},  {8, 8},  {16, 8}, {24, 8},
                                    {32, 4}, {36, 4}, {40, 4}, {44, 4}};
    struct ms_launch l = {1, p, sizeof p, lay, 8};
    struct ms_chunk_set cs;
    ms_chunk_set_init(&cs);
    const int N = 1000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        ms_chunk_set_clear(&cs);
        if (ms_predict_launch_tmpl(&rt, &l, k, &cs) != 4)
            fail();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    assert_int_equal(cs.n, 4); /* 20 MB from each region's start: its first chunk */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        ms_chunk_set_clear(&cs);
        if (ms_predict_launch(&rt, &l, &cs) != 4)
            fail();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns0 = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    printf("predict with templates: %.0f ns/launch (without: %.0f ns/launch; 8 params, 4 "
           "pointers)\n",
           ns, ns0);
    assert_true(ns < 50000); /* very loose: sanitizer builds and loaded machines */
    ms_chunk_set_fini(&cs);
    ms_tmpl_store_free(s);
    ms_rtable_fini(&rt);
}

/* ---- allocation failure ------------------------------------------------------------------ */

/* ms_tmpl_find_name over a store of 2000 kernels whose mangled names share a long prefix (as
 * PyTorch's do): the engine's per-launch lookup. Prints the cost; asserts only correctness. */
static void test_find_name_timing(void **state)
{
    (void)state;
    static char text[1 << 20];
    size_t n = (size_t)snprintf(text, sizeof text, "msched-templates 1\n");
    static const char *fmt = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctor"
                             "IfEENS_6detail5ArrayIPcLi1EEEEEvi%04dT0_T1_";
    for (int i = 0; i < 2000; i++) {
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "kernel mod=1 launches=1 opaque=0 "
                              "unsafe=0 name=");
        n += (size_t)snprintf(text + n, sizeof text - n, fmt, i);
        n += (size_t)snprintf(text + n, sizeof text - n, "\nend\n");
    }
    struct ms_tmpl_store *s;
    char why[128];
    assert_int_equal(ms_tmpl_store_new(&s), MS_OK);
    assert_int_equal(ms_tmpl_store_parse(s, text, n, why, sizeof why), MS_OK);
    assert_int_equal(ms_tmpl_store_count(s), 2000);
    static char names[2000][160];
    for (int i = 0; i < 2000; i++)
        snprintf(names[i], sizeof names[i], fmt, i);
    const int N = 1000000;
    struct timespec t0, t1;
    size_t found = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++)
        found += ms_tmpl_find_name(s, names[((size_t)i * 7919u) % 2000u]) != NULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    assert_int_equal(found, (size_t)N);
    printf("find by name: %.0f ns/lookup (2000 kernels, 110-byte names, shared prefix)\n", ns);
    ms_tmpl_store_free(s);
}

static void test_alloc_failure(void **state)
{
    (void)state;
    tb_start();
    saxpy(A, B, 1000000);
    saxpy(A, B, 2000000);
    submatrix(A, 4096, 10, 1000);
    uint64_t base = ms_alloc_live();
    char *txt, why[256];
    size_t n;
    {
        struct ms_tmpl_store *s = learn_tb();
        assert_int_equal(ms_tmpl_store_format(s, &txt, &n), MS_OK);
        ms_tmpl_store_free(s);
    }
    uint64_t live_txt = ms_alloc_live();
    int failures = 0;
    uint64_t i;
    for (i = 1; i < 1000; i++) {
        struct ms_tmpl_store *s = NULL;
        ms_alloc_fail_after(i);
        int rc = ms_tmpl_store_new(&s);
        if (rc == MS_OK)
            rc = ms_tmpl_learn_trace(s, tbuf, tlen, why, sizeof why);
        if (rc == MS_OK)
            rc = ms_tmpl_store_parse(s, txt, n, why, sizeof why);
        char *t2 = NULL;
        size_t n2;
        if (rc == MS_OK)
            rc = ms_tmpl_store_format(s, &t2, &n2);
        struct ms_tmpl_acc acc;
        struct ms_tmpl_acc_kernel *kv = NULL;
        size_t nk = 0;
        if (rc == MS_OK) /* per-kernel entries are freed after a failure too */
            rc = ms_tmpl_accuracy_kernels(s, tbuf, tlen, &acc, &kv, &nk, why, sizeof why);
        ms_alloc_fail_after(0);
        ms_tmpl_acc_kernels_free(kv, nk);
        ms_free(t2);
        ms_tmpl_store_free(s);
        assert_true(ms_alloc_live() == live_txt);
        if (rc == MS_OK)
            break;
        assert_int_equal(rc, MS_E_NOMEM);
        failures++;
    }
    assert_true(i < 1000);
    assert_true(failures >= 5);
    ms_free(txt);
    assert_true(ms_alloc_live() == base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_fixed),
        cmocka_unit_test(test_fit_linear_one),
        cmocka_unit_test(test_fit_linear_clipped),
        cmocka_unit_test(test_fit_granule_ends),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_fit_struct_param),
        cmocka_unit_test(test_fit_linear_two),
        cmocka_unit_test(test_fit_strided),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_obs_cap),
        cmocka_unit_test(test_store_roundtrip),
        cmocka_unit_test(test_store_errors),
        cmocka_unit_test(test_predict_tmpl),
        cmocka_unit_test(test_predict_bounded),
        cmocka_unit_test(test_predict_timing),
        cmocka_unit_test(test_find_name_timing),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
