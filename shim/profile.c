/*
 * profile.c - the access profiler: sampling, one profiled launch at a time, attribution of the
 * touched granules to pointer arguments, and the profile's records (contract: profile.h; the
 * touch source: profile_san.c).
 *
 * The region table is a sorted array of the live allocations (from the same events the trace
 * recorder sees); at a profiled launch it is copied into the touch source's record with each
 * region's first bitmap index. Sampling counts live in an open-addressing table keyed by the
 * CUfunction. Records are formatted into a buffer and written at each profiled launch and at
 * exit; the kernel line is the recorder's (ms_trace_format) with the version 2 keys appended,
 * in one function (kernel_line) to be replaced by core/trace.c's version 2 writer.
 */
#include "shim/shim_int.h"
#include "shim/locks.h"
#include "shim/config.h"

#include "core/trace.h"
#include "shim/profile.h"
#include "shim/profile_patch.h"
#include "shim/recorder.h"
#include "shim/shim_events.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROFILE_VERSION 2
#define LINE_BYTES (48u * 1024u)

struct reg {
    uint64_t base, end;
};

struct count {
    const void *func; /* NULL: free slot */
    uint64_t n;
};

static struct {
    struct ms_lock lock;
    int state; /* atomic: 0 not started, 1 starting, 2 on, 3 off */
    const struct ms_touch_source *src;
    FILE *out;
    uint32_t task;
    uint64_t first, every;
    struct reg *regs;
    size_t nregs, capregs;
    struct count *counts;
    size_t ncounts, capcounts; /* capcounts: 0 or a power of two */
    char *line;
    uint64_t profiled, opaque, outside;
    /* the open profiled launch (lock held by its thread) */
    struct ms_trace_rec rec;
    char name[MS_TRACE_MAX_NAME];
    uint8_t params[MS_TRACE_MAX_PARAMS];
    struct ms_param_layout layout[MS_TRACE_MAX_LAYOUT];
    bool have_layout;
    struct ms_prof_region *snap;
    size_t capsnap;
    uint32_t nsnap;
    uint64_t total;
    uint64_t t0;
} P = {.lock = MS_LOCK_INIT(MS_LK_PROF, "prof")};

static _Thread_local bool armed_here;

bool ms_prof_on(void)
{
    return __atomic_load_n(&P.state, __ATOMIC_ACQUIRE) == 2;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Stop profiling after an error (lock held): said once, the program runs on; the profile ends
 * with a comment saying why. */
static void stop(const char *what, const char *why)
{
    ms__shim_say("MSCHED_PROFILE: profiling stops: %s%s%s", what, why && *why ? ": " : "",
                 why ? why : "");
    __atomic_store_n(&P.state, 3, __ATOMIC_RELEASE);
    /* A comment in the profile itself, so that a reader knows it ends early. */
    if (P.out && fprintf(P.out, "# profiling stopped: %s%s%s\n", what, why && *why ? ": " : "",
                         why ? why : "") < 0) {
        fclose(P.out);
        P.out = NULL;
    }
}

/* Write one formatted record (lock held). */
static void put(const char *s)
{
    if (P.out && fputs(s, P.out) == EOF)
        stop("cannot write the profile", strerror(errno));
}

static void put_rec(const struct ms_trace_rec *rec)
{
    int n = ms_trace_format(rec, P.line, LINE_BYTES);
    if (n < 0) {
        MS_LOG_ONCE("MSCHED_PROFILE: cannot format a record of kind %d", (int)rec->kind);
        return;
    }
    put(P.line);
}

/*
 * The version 2 kernel line: the recorder's kernel record plus mod= and prof=. The one place
 * that knows the version 2 keys of the kernel record (to become core/trace.c's writer).
 */
static void kernel_line(const struct ms_trace_rec *rec, uint64_t mod, bool opaque)
{
    int n = ms_trace_format(rec, P.line, LINE_BYTES - 64);
    if (n <= 0) {
        MS_LOG_ONCE("MSCHED_PROFILE: cannot format the kernel record of %s", rec->name);
        return;
    }
    n--; /* its newline */
    if (mod)
        n += snprintf(P.line + n, LINE_BYTES - (size_t)n, " mod=%" PRIx64, mod);
    snprintf(P.line + n, LINE_BYTES - (size_t)n, " prof=%s\n", opaque ? "opaque" : "seen");
    put(P.line);
}

/* Open the profile and write its header (state 1, lock held). */
static bool open_profile(const char *path)
{
    char full[4096];
    if (!ms__rec_expand_path(path, full, sizeof full)) {
        ms__shim_say("MSCHED_PROFILE: the path %s is too long; not profiling", path);
        return false;
    }
    P.line = ms_malloc(LINE_BYTES);
    P.out = P.line ? fopen(full, "we") : NULL;
    if (!P.out) {
        ms__shim_say("MSCHED_PROFILE: cannot write %s: %s; not profiling", full, strerror(errno));
        return false;
    }
    P.task = (uint32_t)getpid();
    fprintf(P.out, "msched-trace %d\n", PROFILE_VERSION);
    char name[MS_TRACE_MAX_NAME];
    snprintf(name, sizeof name, "%s", program_invocation_short_name);
    struct ms_trace_rec rec = {.kind = MS_TR_TASK, .task = P.task, .name = name};
    put_rec(&rec);
    return true;
}

void ms_prof_early(void)
{
    int want = 0;
    if (!__atomic_compare_exchange_n(&P.state, &want, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* done, or a cuInit of the source's own while starting */
    const char *path = ms__shim_opt_text(MS_OPT_PROFILE);
    if (!path || !*path) {
        __atomic_store_n(&P.state, 3, __ATOMIC_RELEASE);
        return;
    }
    char why[256] = "";
    bool ok = false;
    if (ms__shim_opt(MS_OPT_ENGINE) != MS_ENGINE_OFF) {
        snprintf(why, sizeof why, "it needs MSCHED_ENGINE=off (msched profile sets it)");
    } else {
        P.src = &ms__prof_sanitizer;
        ok = P.src->start(why, sizeof why) == MS_OK;
    }
    ms_lock(&P.lock);
    if (ok)
        ok = open_profile(path);
    else
        ms__shim_say("MSCHED_PROFILE: not profiling: %s", why);
    P.first = ms__shim_opt(MS_OPT_PROFILE_FIRST);
    P.every = ms__shim_opt(MS_OPT_PROFILE_EVERY);
    __atomic_store_n(&P.state, ok ? 2 : 3, __ATOMIC_RELEASE);
    ms_unlock(&P.lock);
}

/* ---- regions ---- */

static size_t reg_lower(uint64_t base)
{
    size_t lo = 0, hi = P.nregs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (P.regs[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void ms_prof_alloc(uint64_t ptr, uint64_t bytes, enum ms_region_kind kind)
{
    if (!ms_prof_on() || ptr == 0 || bytes == 0)
        return;
    ms_lock(&P.lock);
    size_t i = reg_lower(ptr);
    if (i < P.nregs && P.regs[i].base == ptr) {
        P.regs[i].end = ptr + bytes;
    } else if (ms_grow((void **)&P.regs, &P.capregs, P.nregs + 1, sizeof *P.regs) == MS_OK) {
        memmove(&P.regs[i + 1], &P.regs[i], (P.nregs - i) * sizeof *P.regs);
        P.regs[i] = (struct reg){ptr, ptr + bytes};
        P.nregs++;
    } else {
        MS_LOG_ONCE("MSCHED_PROFILE: out of memory tracking allocations");
    }
    struct ms_trace_rec rec = {
        .kind = MS_TR_ALLOC, .task = P.task, .addr = ptr, .size = bytes, .rkind = kind};
    put_rec(&rec);
    ms_unlock(&P.lock);
}

void ms_prof_free(uint64_t ptr)
{
    if (!ms_prof_on() || ptr == 0)
        return;
    ms_lock(&P.lock);
    size_t i = reg_lower(ptr);
    if (i < P.nregs && P.regs[i].base == ptr) {
        memmove(&P.regs[i], &P.regs[i + 1], (P.nregs - i - 1) * sizeof *P.regs);
        P.nregs--;
        struct ms_trace_rec rec = {.kind = MS_TR_FREE, .task = P.task, .addr = ptr};
        put_rec(&rec);
    }
    ms_unlock(&P.lock);
}

/* ---- sampling ---- */

static size_t func_hash(const void *f, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)f;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* This launch's index among f's launches (0-based), counted; UINT64_MAX when out of memory. */
static uint64_t count_launch(const void *f)
{
    if (P.ncounts + 1 > P.capcounts / 2) {
        size_t cap = P.capcounts ? 2 * P.capcounts : 64;
        struct count *n = ms_calloc(cap, sizeof *n);
        if (!n)
            return UINT64_MAX;
        for (size_t i = 0; i < P.capcounts; i++) {
            if (!P.counts[i].func)
                continue;
            size_t j = func_hash(P.counts[i].func, cap);
            while (n[j].func)
                j = (j + 1) & (cap - 1);
            n[j] = P.counts[i];
        }
        ms_free(P.counts);
        P.counts = n;
        P.capcounts = cap;
    }
    size_t j = func_hash(f, P.capcounts);
    while (P.counts[j].func && P.counts[j].func != f)
        j = (j + 1) & (P.capcounts - 1);
    if (!P.counts[j].func) {
        P.counts[j].func = f;
        P.ncounts++;
    }
    return P.counts[j].n++;
}

static bool sampled(uint64_t n)
{
    return n < P.first || (n - P.first + 1) % P.every == 0;
}

/* ---- one profiled launch ---- */

/* Copy what the record needs of l (lock held). False: the launch cannot be recorded. */
static bool keep_launch(const struct ms_shim_launch *l)
{
    struct ms_trace_rec rec = {.kind = MS_TR_KERNEL, .task = P.task};
    ms_lock(&ms__events_lock);
    rec.stream = ms__rec_stream_id(l->stream);
    ms_unlock(&ms__events_lock);
    for (int i = 0; i < 3; i++) {
        rec.grid[i] = l->grid[i];
        rec.block[i] = l->block[i];
        if (!rec.grid[i] || !rec.block[i])
            return false; /* the driver refuses it */
    }
    snprintf(P.name, sizeof P.name, "%s", l->name);
    rec.name = P.name;
    P.have_layout = false;
    if (l->params_known && l->params_len <= MS_TRACE_MAX_PARAMS) {
        memcpy(P.params, l->params, l->params_len);
        rec.params = P.params;
        rec.params_len = l->params_len;
        bool fits = l->layout && l->nlayout <= MS_TRACE_MAX_LAYOUT;
        for (size_t i = 0; fits && i < l->nlayout; i++)
            fits = (uint64_t)l->layout[i].offset + l->layout[i].size <= l->params_len;
        if (fits) {
            memcpy(P.layout, l->layout, l->nlayout * sizeof *P.layout);
            rec.layout = P.layout;
            rec.nlayout = l->nlayout;
            P.have_layout = true;
        }
    }
    P.rec = rec;
    return true;
}

/* The regions as the touch source's record wants them (lock held). */
static int snapshot(void)
{
    if (ms_grow((void **)&P.snap, &P.capsnap, P.nregs ? P.nregs : 1, sizeof *P.snap) != MS_OK)
        return MS_E_NOMEM;
    uint64_t bit = 0;
    for (size_t i = 0; i < P.nregs; i++) {
        P.snap[i] = (struct ms_prof_region){P.regs[i].base, P.regs[i].end, bit};
        bit += MS_PROF_REGION_GRANULES(P.regs[i].base, P.regs[i].end);
    }
    P.nsnap = (uint32_t)P.nregs;
    P.total = bit;
    return MS_OK;
}

void ms_prof_launch_begin(const struct ms_shim_launch *l)
{
    if (!ms_prof_on() || armed_here)
        return;
    ms_lock(&P.lock);
    uint64_t n = ms_prof_on() ? count_launch(l->func) : UINT64_MAX;
    if (n == UINT64_MAX || !sampled(n) || ms__shim_capture_open() || !keep_launch(l)) {
        ms_unlock(&P.lock);
        return;
    }
    char why[256] = "";
    CUresult cr = MS_REAL(cuCtxSynchronize)();
    if (cr != CUDA_SUCCESS) {
        snprintf(why, sizeof why, "error %d", (int)cr);
        stop("cuCtxSynchronize before a launch", why);
    } else if (snapshot() != MS_OK) {
        stop("out of memory", NULL);
    } else if (P.src->arm(P.snap, P.nsnap, P.total, why, sizeof why) != MS_OK) {
        stop("arming the touch source", why);
    } else {
        P.t0 = now_ns();
        armed_here = true; /* the lock stays held until ms_prof_launch_end */
        return;
    }
    ms_unlock(&P.lock);
}

/* The pointer argument (its offset) for a touched range of region r ending at end, or -1. A
 * pointer argument is an 8-byte word of the parameter buffer; with the layout known, a word that
 * lies wholly inside one parameter, so the pointers of a struct parameter count too (PyTorch's
 * elementwise kernels pass every tensor's address in one struct), as the engine's prediction
 * reads them (docs/templates.md). */
static int64_t arg_for(const struct ms_prof_region *r, uint64_t end)
{
    const uint8_t *p = P.rec.params;
    size_t len = P.rec.params_len;
    int64_t best = -1, lowest = -1;
    uint64_t bestv = 0, lowv = UINT64_MAX;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        if (P.have_layout) {
            bool ptr = false;
            for (size_t i = 0; i < P.rec.nlayout && !ptr; i++)
                ptr = P.layout[i].offset <= off && off + 8 <= P.layout[i].offset + P.layout[i].size;
            if (!ptr)
                continue;
        }
        uint64_t v;
        memcpy(&v, p + off, 8);
        if (v < r->base || v >= r->end)
            continue;
        if (v < end && (best < 0 || v > bestv)) {
            best = (int64_t)off;
            bestv = v;
        }
        if (v < lowv) {
            lowest = (int64_t)off;
            lowv = v;
        }
    }
    return best >= 0 ? best : lowest;
}

static void touch_line(int64_t arg, uint32_t mode, uint64_t addr, uint64_t bytes)
{
    static const char *const modes[] = {"", "r", "w", "rw"};
    char a[24];
    if (arg < 0)
        snprintf(a, sizeof a, "-");
    else
        snprintf(a, sizeof a, "%" PRId64, arg);
    snprintf(P.line, LINE_BYTES, "touch %" PRIu32 " %s %s 0x%" PRIx64 " %" PRIu64 "\n", P.task, a,
             modes[mode & 3], addr, bytes);
    put(P.line);
}

/* The touch records of one launch from its bitmap (lock held). */
static void write_touches(const uint32_t *map)
{
    for (uint32_t i = 0; i < P.nsnap; i++) {
        const struct ms_prof_region *r = &P.snap[i];
        uint64_t ng = MS_PROF_REGION_GRANULES(r->base, r->end);
        /* the open range */
        int64_t arg = -1;
        uint32_t mode = 0;
        uint64_t start = 0, end = 0;
        for (uint64_t k = 0; k <= ng; k++) {
            uint32_t m = 0;
            uint64_t lo = 0, hi = 0;
            if (k < ng) {
                uint64_t b = r->bit0 + k;
                m = (map[(2 * b) / 32] >> ((2 * b) % 32)) & 3u;
                lo = r->base + (k << MS_PROF_GRANULE_SHIFT);
                hi = lo + MS_PROF_GRANULE;
                hi = hi > r->end ? r->end : hi;
            }
            int64_t a = m ? arg_for(r, hi) : -1;
            if (mode && (!m || m != mode || a != arg || lo != end)) {
                touch_line(arg, mode, start, end - start);
                mode = 0;
            }
            if (m && !mode) {
                arg = a;
                mode = m;
                start = lo;
            }
            if (m)
                end = hi;
        }
    }
}

void ms_prof_launch_end(void)
{
    if (!armed_here)
        return;
    armed_here = false;
    char why[256] = "";
    CUresult cr = MS_REAL(cuCtxSynchronize)();
    uint64_t t1 = now_ns();
    struct ms_touch_result res;
    memset(&res, 0, sizeof res);
    if (cr != CUDA_SUCCESS) {
        snprintf(why, sizeof why, "error %d", (int)cr);
        stop("cuCtxSynchronize after a launch", why);
    } else if (P.src->collect(&res, why, sizeof why) != MS_OK) {
        stop("reading the touches back", why);
    } else if (res.seen) {
        P.rec.dur_ns = t1 - P.t0;
        P.profiled++;
        P.opaque += res.opaque;
        P.outside += res.outside;
        kernel_line(&P.rec, res.mod, res.opaque);
        if (!res.opaque)
            write_touches(res.map);
        if (P.out)
            fflush(P.out);
    } else {
        MS_LOG_ONCE("MSCHED_PROFILE: the touch source did not see a launch of %s", P.name);
    }
    ms_unlock(&P.lock);
}

void ms_prof_finish(void)
{
    if (armed_here)
        return; /* exiting inside a profiled launch (a signal): the lock is this thread's */
    ms_lock(&P.lock);
    if (P.out) {
        fclose(P.out);
        P.out = NULL;
        ms__shim_log("MSCHED_PROFILE: %" PRIu64 " launches profiled, %" PRIu64 " opaque, %" PRIu64
                     " accesses outside every allocation",
                     P.profiled, P.opaque, P.outside);
    }
    if (P.state == 2)
        __atomic_store_n(&P.state, 3, __ATOMIC_RELEASE);
    ms_unlock(&P.lock);
}

void ms_prof_atfork_child(void)
{
    ms_lock_reset(&P.lock);
    armed_here = false;
    if (P.out) {
        close(fileno(P.out)); /* not fclose: the parent writes what is buffered */
        P.out = NULL;
    }
    __atomic_store_n(&P.state, 3, __ATOMIC_RELEASE);
    if (P.src && P.src->atfork_child)
        P.src->atfork_child();
}
