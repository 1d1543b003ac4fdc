/*
 * fuzz_templates.c - libFuzzer target for the template store's text format and the analyzer
 * (core/template.c, core/template_fit.c).
 *
 * An input that starts with "msched-trace" is a profile: it is learned into a fresh store, and
 * the store is evaluated against it (ms_tmpl_accuracy_kernels: its counts must be consistent,
 * the per-kernel entries summing to the totals).
 * Any other input is a store text: it is parsed into a fresh store. Either way, when that
 * succeeds the store is formatted, the text parsed into a second fresh store and formatted again:
 * the two texts must be identical (the writer's output is canonical and reads back exactly), and
 * describe must work. A failure must leave one line "line N: ..." (or "out of memory"). After the
 * input every store is freed and ms_alloc_live() must be back at its starting value.
 *
 * A second pass replays the input with an allocation failure injected at a position chosen from
 * the input's length, to reach the out-of-memory paths; only crashes and leaks matter there.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "core/template.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int rc, const char *why)
{
    if (rc != MS_E_PARSE && rc != MS_E_VERSION && rc != MS_E_NOMEM)
        abort();
    if (rc != MS_E_NOMEM && (strncmp(why, "line ", 5) != 0 || strchr(why, '\n') || strlen(why) < 8))
        abort();
}

static void run(const uint8_t *data, size_t size, int strict)
{
    struct ms_tmpl_store *s, *s2;
    char why[256];
    if (ms_tmpl_store_new(&s) != MS_OK)
        return;
    int rc;
    if (size >= 12 && memcmp(data, "msched-trace", 12) == 0) {
        if (size > 65536) { /* fitting is quadratic in candidates: keep inputs fast */
            ms_tmpl_store_free(s);
            return;
        }
        rc = ms_tmpl_learn_trace(s, (const char *)data, size, why, sizeof why);
        if (rc == MS_OK) {
            /* the learned store against its own profile: it must explain every touch it learned
             * from, except through kernels it refused (unsafe, no rule: whole allocations) */
            struct ms_tmpl_acc a;
            struct ms_tmpl_acc_kernel *kv;
            size_t nk;
            int ra = ms_tmpl_accuracy_kernels(s, (const char *)data, size, &a, &kv, &nk, why,
                                              sizeof why);
            if (ra != MS_OK && (strict || ra != MS_E_NOMEM))
                abort();
            if (ra == MS_OK && (a.alloc_miss > a.touched || a.tmpl_miss > a.touched ||
                                a.tmpl_launches > a.launches))
                abort();
            /* the per-kernel entries sum to the totals */
            uint64_t launches = 0, touched = 0, miss = 0;
            for (size_t i = 0; i < nk; i++) {
                launches += kv[i].launches;
                touched += kv[i].touched;
                miss += kv[i].tmpl_miss;
            }
            if (ra == MS_OK &&
                (launches != a.launches || touched != a.touched || miss != a.tmpl_miss))
                abort();
            ms_tmpl_acc_kernels_free(kv, nk);
        }
    } else {
        rc = ms_tmpl_store_parse(s, (const char *)data, size, why, sizeof why);
        if (rc != MS_OK && strict && ms_tmpl_store_count(s) != 0)
            abort(); /* a failed parse merges nothing */
    }
    if (rc != MS_OK) {
        if (strict)
            check_err(rc, why);
        ms_tmpl_store_free(s);
        return;
    }
    char *t1 = NULL, *t2 = NULL, *d = NULL;
    size_t n1, n2, nd;
    if (ms_tmpl_store_format(s, &t1, &n1) != MS_OK || ms_tmpl_store_describe(s, &d, &nd) != MS_OK ||
        ms_tmpl_store_new(&s2) != MS_OK) {
        if (strict)
            abort();
        goto out;
    }
    if (strlen(t1) != n1 || strlen(d) != nd)
        abort();
    rc = ms_tmpl_store_parse(s2, t1, n1, why, sizeof why);
    if (rc == MS_OK)
        rc = ms_tmpl_store_format(s2, &t2, &n2);
    if (rc == MS_OK && (n1 != n2 || memcmp(t1, t2, n1) != 0))
        abort();
    if (rc != MS_OK && (strict || rc != MS_E_NOMEM))
        abort();
    ms_tmpl_store_free(s2);
out:
    ms_free(t1);
    ms_free(t2);
    ms_free(d);
    ms_tmpl_store_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t base = ms_alloc_live();
    run(data, size, 1);
    if (ms_alloc_live() != base)
        abort();

    ms_alloc_fail_after(1 + size % 11);
    run(data, size, 0);
    ms_alloc_fail_after(0);
    if (ms_alloc_live() != base)
        abort();
    return 0;
}
