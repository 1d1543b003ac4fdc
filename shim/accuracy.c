/*
 * accuracy.c - the prediction-accuracy probe (contract: accuracy.h).
 *
 * CUPTI hands its unified-memory reports over in buffers, from whichever thread flushes (here:
 * the measuring thread, inside cuptiActivityFlushAll) or from its own worker; the buffer
 * callback only appends the reports it cares about to `recs` under `rec_mu`. The measuring
 * thread takes them after each synchronization and sorts them by time: inside the launch's
 * window (touched), inside the previous launch's (late), or elsewhere (counted, so a clock
 * offset between the reports and the window shows). Before every launch every live region goes
 * back to the host, whatever the reports said: a region the driver touched without a report
 * must not stay resident and hide later touches. Built without CUPTI's headers, the mode
 * reports that it is unavailable.
 */
#include "shim/shim_int.h"
#include "shim/locks.h"
#include "shim/config.h"

#include "core/accuracy.h"
#include "gpu/cuda/gpu_cuda.h"
#include "shim/accuracy.h"
#include "shim/client.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<cupti_activity.h>)
#define MS_HAVE_CUPTI 1
#endif
#endif

#define PAGE 4096u
#define BUF_BYTES (4u << 20)
#define GAP_NS 2000000L /* between a launch's eviction and the launch */

/* One report: a faulting page (bytes 0) or a host-to-device migration. */
struct rec {
    uint64_t ts, addr, bytes;
};

struct vec_rec {
    struct rec *v;
    size_t n, cap;
};

struct vec_range {
    struct ms_range *v;
    size_t n, cap;
};

static int vr_push(struct vec_range *a, uint64_t addr, uint64_t bytes)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        struct ms_range *v = ms_realloc(a->v, cap * sizeof *v);
        if (!v)
            return MS_E_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (struct ms_range){addr, bytes};
    return MS_OK;
}

static struct {
    struct ms_lock lock;   /* one measurement at a time (accuracy.h) */
    struct ms_lock rec_mu; /* recs, rec_nomem, reports, buffers, dropped, thrash, remote, dtoh */
    bool on;
    FILE *out;
    const struct ms_cuda_api *api;
    uint64_t max, measured;
    struct vec_rec recs;
    bool rec_nomem;
    struct vec_range regs; /* the live regions when the launch was admitted */
    struct vec_range pred, lo, hi;
    char name[256];
    bool unbounded;
    bool prepared;                         /* ms_acc_prepare readied the open measurement */
    uint64_t t0, t_sync, prev_t0, prev_t1; /* CUPTI timestamps; t_sync: the last collect's */
    /* totals */
    uint64_t covered, unbounded_n, pred_bytes, lo_bytes, hi_bytes, miss_bytes, faults, late;
    uint64_t before_bytes, after_bytes;   /* reported during a measurement, stamped outside it */
    uint64_t launch_before, launch_after; /* the same for the open measurement */
    uint64_t reports, buffers;            /* every CUPTI record and buffer delivered (diagnosis) */
    uint64_t dropped;        /* records CUPTI says it dropped; UINT64_MAX: cannot tell */
    uint64_t thrash, remote; /* the driver's thrashing / throttling and remote-map reports */
    bool mitigation;         /* those counters could be enabled */
    bool dtoh_watched;       /* device-to-host migrations are reported */
    uint64_t dtoh;           /* device-to-host bytes reported since the last reset */
    uint64_t launch_evicted; /* the open measurement's eviction, as the driver reported it */
    uint64_t evicted_bytes;  /* total of launch_evicted */
    int early;               /* atomic: 0 not tried, 1 starting, 2 CUPTI on, 3 failed */
    char early_why[256];
    char err[160];
} A = {.lock = MS_LOCK_INIT(MS_LK_ACC, "acc"), .rec_mu = MS_LOCK_INIT(MS_LK_ACC_REC, "acc_rec")};

static _Thread_local bool open_here;

bool ms_acc_on(void)
{
    return __atomic_load_n(&A.on, __ATOMIC_ACQUIRE);
}

/* Stop measuring after an error (lock held); the program runs on unmeasured. */
static void stop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void write_name(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            fputc(c, f);
    }
    fputc('"', f);
}

#ifdef MS_HAVE_CUPTI
#include <cupti_activity.h>
#include <cupti_result.h>

static struct {
    __typeof__(&cuptiActivityRegisterCallbacks) reg;
    __typeof__(&cuptiActivityConfigureUnifiedMemoryCounter) conf;
    __typeof__(&cuptiActivityEnable) enable;
    __typeof__(&cuptiActivityDisable) disable;
    __typeof__(&cuptiActivityFlushAll) flush;
    __typeof__(&cuptiActivityGetNextRecord) next;
    __typeof__(&cuptiGetTimestamp) stamp;
    __typeof__(&cuptiGetResultString) str;
    __typeof__(&cuptiActivityGetNumDroppedRecords) ndropped; /* optional */
} C;

static const char *cupti_err(CUptiResult r)
{
    const char *s = NULL;
    if (!C.str || C.str(r, &s) != CUPTI_SUCCESS || !s)
        return "unknown CUPTI error";
    return s;
}

static void CUPTIAPI buf_request(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void rec_push(uint64_t ts, uint64_t addr, uint64_t bytes)
{
    struct vec_rec *r = &A.recs;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        struct rec *v = ms_realloc(r->v, cap * sizeof *v);
        if (!v) {
            A.rec_nomem = true;
            return;
        }
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (struct rec){ts, addr, bytes};
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                  size_t valid)
{
    (void)size;
    CUpti_Activity *a = NULL;
    size_t lost = 0;
    bool told = C.ndropped && C.ndropped(ctx, stream, &lost) == CUPTI_SUCCESS;
    ms_lock(&A.rec_mu);
    A.buffers++;
    if (!told)
        A.dropped = UINT64_MAX;
    else if (A.dropped != UINT64_MAX)
        A.dropped += lost;
    while (C.next(buffer, valid, &a) == CUPTI_SUCCESS) {
        A.reports++;
        if (a->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
            continue;
        const CUpti_ActivityUnifiedMemoryCounter3 *u = (const void *)a;
        switch (u->counterKind) {
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
            rec_push(u->start, u->address & ~(uint64_t)(PAGE - 1), 0);
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
            rec_push(u->start, u->address, u->value);
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
            A.dtoh += u->value;
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
            /* The GPU reaches these bytes where they are, without a migration or (later) a
             * fault: touched all the same. */
            A.remote++;
            rec_push(u->start, u->address, u->value ? u->value : PAGE);
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING: A.thrash++; break;
        default: break;
        }
    }
    ms_unlock(&A.rec_mu);
    free(buffer);
}

static void *open_cupti(void)
{
    const char *want = ms__shim_opt_text(MS_OPT_CUPTI);
    if (want && *want)
        return dlopen(want, RTLD_NOW | RTLD_LOCAL);
    static const char *const names[] = {"libcupti.so.13", "libcupti.so",
                                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                                        "/usr/local/cuda/lib64/libcupti.so",
                                        "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so"};
    for (size_t i = 0; i < MS_ARRAY_LEN(names); i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

static bool cupti_start(char *why, size_t whylen)
{
    void *h = open_cupti();
    if (!h) {
        snprintf(why, whylen, "cannot load libcupti (set MSCHED_CUPTI): %s", dlerror());
        return false;
    }
#define SYM(f, n)                                                                                  \
    if (!(*(void **)&C.f = dlsym(h, n))) {                                                         \
        snprintf(why, whylen, "libcupti lacks %s", n);                                             \
        return false;                                                                              \
    }
    SYM(reg, "cuptiActivityRegisterCallbacks");
    SYM(conf, "cuptiActivityConfigureUnifiedMemoryCounter");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(flush, "cuptiActivityFlushAll");
    SYM(next, "cuptiActivityGetNextRecord");
    SYM(stamp, "cuptiGetTimestamp");
    SYM(str, "cuptiGetResultString");
#undef SYM
    *(void **)&C.ndropped = dlsym(h, "cuptiActivityGetNumDroppedRecords");
    /* Faults and host-to-device migrations are required; device-to-host migrations (what the
     * eviction moved) and the driver's thrashing mitigation (throttling, remote mapping instead
     * of migrating) are watched where CUPTI offers them. */
    static const CUpti_ActivityUnifiedMemoryCounterKind kinds[] = {
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING};
    CUpti_ActivityUnifiedMemoryCounterConfig cfg[MS_ARRAY_LEN(kinds)];
    memset(cfg, 0, sizeof cfg);
    for (size_t i = 0; i < MS_ARRAY_LEN(kinds); i++) {
        cfg[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
        cfg[i].kind = kinds[i];
        cfg[i].enable = 1;
    }
    CUptiResult r = C.reg(buf_request, buf_complete);
    A.mitigation = r == CUPTI_SUCCESS && C.conf(cfg, MS_ARRAY_LEN(kinds)) == CUPTI_SUCCESS;
    A.dtoh_watched = A.mitigation || (r == CUPTI_SUCCESS && C.conf(cfg, 3) == CUPTI_SUCCESS);
    if (r == CUPTI_SUCCESS && !A.dtoh_watched)
        r = C.conf(cfg, 2);
    if (r == CUPTI_SUCCESS)
        r = C.enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    if (r != CUPTI_SUCCESS) {
        snprintf(why, whylen, "CUPTI unified-memory counters: %s", cupti_err(r));
        return false;
    }
    return true;
}

static uint64_t stamp(void)
{
    uint64_t t = 0;
    C.stamp(&t);
    return t;
}

/* Synchronize, then collect every report delivered so far: into lo / hi those inside [from,
 * to] (`to` UINT64_MAX: now); with lo, the others' bytes into launch_before / launch_after;
 * without, they are dropped. Lock held. */
static int collect(uint64_t from, uint64_t to, struct vec_range *lo, struct vec_range *hi)
{
    CUresult cr = MS_REAL(cuCtxSynchronize)();
    if (cr != CUDA_SUCCESS) {
        stop("cuCtxSynchronize: error %d", (int)cr);
        return MS_E_GPU;
    }
    A.t_sync = stamp();
    if (to == UINT64_MAX)
        to = A.t_sync;
    CUptiResult r = C.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) {
        stop("cuptiActivityFlushAll: %s", cupti_err(r));
        return MS_E_GPU;
    }
    ms_lock(&A.rec_mu);
    int e = A.rec_nomem ? MS_E_NOMEM : MS_OK;
    for (size_t i = 0; i < A.recs.n && e == MS_OK; i++) {
        const struct rec *x = &A.recs.v[i];
        uint64_t bytes = x->bytes ? x->bytes : PAGE;
        if (lo && x->ts >= from && x->ts <= to) {
            if (!x->bytes) {
                A.faults++;
                e = vr_push(lo, x->addr, PAGE);
            }
            if (e == MS_OK)
                e = vr_push(hi, x->addr, bytes);
        } else if (x->ts >= A.prev_t0 && x->ts <= A.prev_t1) {
            A.late++;
        } else if (lo) {
            *(x->ts < from ? &A.launch_before : &A.launch_after) += bytes;
        }
    }
    A.recs.n = 0;
    A.rec_nomem = false;
    ms_unlock(&A.rec_mu);
    if (e != MS_OK)
        stop("out of memory collecting reports");
    return e;
}

/* Prefetch every live region of the snapshot back to the host. Lock held. */
static int evict_all(void)
{
    CUmemLocation host;
    memset(&host, 0, sizeof host);
    host.type = CU_MEM_LOCATION_TYPE_HOST;
    for (size_t k = 0; k < A.regs.n; k++) {
        CUresult cr = A.api->cuMemPrefetchAsync((CUdeviceptr)A.regs.v[k].addr, A.regs.v[k].bytes,
                                                host, 0, NULL);
        if (cr != CUDA_SUCCESS) {
            stop("cuMemPrefetchAsync to the host: error %d", (int)cr);
            return MS_E_GPU;
        }
    }
    return MS_OK;
}

void ms_acc_early(void)
{
    int want = 0;
    if (!__atomic_compare_exchange_n(&A.early, &want, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* done, or CUPTI's own cuInit while starting */
    const char *path = ms__shim_opt_text(MS_OPT_ACCURACY);
    bool on = path && *path && cupti_start(A.early_why, sizeof A.early_why);
    __atomic_store_n(&A.early, on ? 2 : 3, __ATOMIC_RELEASE);
}

void ms_acc_start(const struct ms_cuda_api *api, bool ok)
{
    const char *path = ms__shim_opt_text(MS_OPT_ACCURACY);
    if (!path || !*path)
        return;
    char why[256] = "";
    int early = __atomic_load_n(&A.early, __ATOMIC_ACQUIRE);
    if (!ok) {
        snprintf(why, sizeof why, "needs MSCHED_ENGINE=demand, no daemon, and a budget");
    } else if (!api->cuMemPrefetchAsync) {
        snprintf(why, sizeof why, "the driver lacks cuMemPrefetchAsync_v2");
    } else if (early != 2) {
        snprintf(why, sizeof why, "%s",
                 early == 3 ? A.early_why : "CUPTI was not started at cuInit");
    } else if (!(A.out = fopen(path, "we"))) {
        snprintf(why, sizeof why, "cannot write %s", path);
    }
    if (!A.out) {
        if (early == 2)
            C.disable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
        ms__shim_say("MSCHED_ACCURACY: not measuring: %s", why);
        return;
    }
    A.max = ms__shim_opt(MS_OPT_ACCURACY_MAX);
    A.api = api;
    __atomic_store_n(&A.on, true, __ATOMIC_RELEASE);
}

void ms_acc_begin(const struct ms_rtable *rt, const struct ms_chunk_set *need, const char *name,
                  bool unbounded)
{
    if (!ms_acc_on() || open_here)
        return;
    ms_lock(&A.lock);
    if (!A.on || A.measured >= A.max) {
        ms_unlock(&A.lock);
        return;
    }
    /* Snapshots for ms_acc_prepare, which runs without the engine lock: the live regions and
     * the predicted chunks. */
    int e = MS_OK;
    A.regs.n = A.pred.n = 0;
    for (size_t i = 0; e == MS_OK && i < rt->nslots; i++)
        if (rt->regions[i].live)
            e = vr_push(&A.regs, rt->regions[i].base, rt->regions[i].size);
    for (size_t i = 0; e == MS_OK && i < need->n; i++) {
        ms_chunk_id id = need->ids[i];
        const struct ms_region *r = &rt->regions[MS_CHUNK_REGION(id)];
        uint32_t k = MS_CHUNK_INDEX(id);
        e = vr_push(&A.pred, r->base + ms_region_chunk_offset(r, k), r->chunks[k].bytes);
    }
    if (e != MS_OK) {
        stop("out of memory");
        ms_unlock(&A.lock);
        return;
    }
    snprintf(A.name, sizeof A.name, "%s", name ? name : "?");
    A.unbounded = unbounded;
    A.prepared = false;
    open_here = true; /* the lock stays held until ms_acc_end */
}

/* The first launches' steps are logged (verbose), so a probe that stops shows where. */
#define TRACE_LAUNCHES 3
#define STEP(what)                                                                                 \
    do {                                                                                           \
        if (A.measured < TRACE_LAUNCHES)                                                           \
            ms__shim_log("MSCHED_ACCURACY: launch %" PRIu64 " (%s): %s", A.measured, A.name,       \
                         what);                                                                    \
    } while (0)

void ms_acc_prepare(void)
{
    if (!open_here)
        return;
    /* The whole footprint goes back to the host (prefetching what is there already is cheap). */
    STEP("collecting");
    if (collect(0, UINT64_MAX, NULL, NULL) != MS_OK)
        return;
    ms_lock(&A.rec_mu);
    A.dtoh = 0;
    ms_unlock(&A.rec_mu);
    STEP("evicting");
    if (evict_all() != MS_OK)
        return;
    STEP("collecting the eviction");
    if (collect(0, UINT64_MAX, NULL, NULL) != MS_OK)
        return;
    ms_lock(&A.rec_mu);
    A.launch_evicted = A.dtoh;
    ms_unlock(&A.rec_mu);
    /* The driver takes a page that moves to the host and back within its thrashing lapse
     * (500 us in NVIDIA's open kernel modules) for thrashing, and may then pin it and map it
     * remotely: no more faults or migrations to see. Let the lapse pass. */
    struct timespec gap = {0, GAP_NS};
    nanosleep(&gap, NULL);
    STEP("launching");
    A.launch_before = A.launch_after = 0;
    A.t0 = stamp();
    A.prepared = true;
}

void ms_acc_end(void)
{
    if (!open_here)
        return;
    open_here = false;
    A.lo.n = A.hi.n = 0;
    uint64_t t0 = A.t0;
    if (A.prepared)
        STEP("collecting its reports");
    if (A.prepared && collect(t0, UINT64_MAX, &A.lo, &A.hi) == MS_OK) {
        struct ms_acc_tally lo, hi;
        ms_acc_tally(A.pred.v, A.pred.n, A.lo.v, A.lo.n, &lo);
        /* The pred array is normalized now; tallying it again is cheap. */
        ms_acc_tally(A.pred.v, A.pred.n, A.hi.v, A.hi.n, &hi);
        A.measured++;
        A.covered += hi.covered;
        A.unbounded_n += A.unbounded;
        A.pred_bytes += lo.pred_bytes;
        A.lo_bytes += lo.touched_bytes;
        A.hi_bytes += hi.touched_bytes;
        A.miss_bytes += hi.miss_bytes;
        A.before_bytes += A.launch_before;
        A.after_bytes += A.launch_after;
        A.evicted_bytes += A.launch_evicted;
        fprintf(A.out, "{\"kernel\":");
        write_name(A.out, A.name);
        fprintf(A.out,
                ",\"unbounded\":%s,\"pred\":%" PRIu64 ",\"touch_lo\":%" PRIu64
                ",\"touch_hi\":%" PRIu64 ",\"miss\":%" PRIu64 ",\"miss_at\":%" PRIu64
                ",\"covered\":%s,\"before\":%" PRIu64 ",\"after\":%" PRIu64 ",\"evicted\":%" PRIu64
                "}\n",
                A.unbounded ? "true" : "false", lo.pred_bytes, lo.touched_bytes, hi.touched_bytes,
                hi.miss_bytes, hi.miss_first, hi.covered ? "true" : "false", A.launch_before,
                A.launch_after, A.launch_evicted);
        fflush(A.out);
    }
    A.prev_t0 = t0;
    A.prev_t1 = A.t_sync;
    ms_unlock(&A.lock);
}

#else /* !MS_HAVE_CUPTI */

void ms_acc_early(void) {}

void ms_acc_start(const struct ms_cuda_api *api, bool ok)
{
    (void)api, (void)ok;
    const char *path = ms__shim_opt_text(MS_OPT_ACCURACY);
    if (path && *path)
        ms__shim_say("MSCHED_ACCURACY: not measuring: built without CUPTI headers");
}

void ms_acc_begin(const struct ms_rtable *rt, const struct ms_chunk_set *need, const char *name,
                  bool unbounded)
{
    (void)rt, (void)need, (void)name, (void)unbounded;
}

void ms_acc_prepare(void) {}

void ms_acc_end(void) {}

#endif /* MS_HAVE_CUPTI */

static void stop(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(A.err, sizeof A.err, fmt, ap);
    va_end(ap);
    __atomic_store_n(&A.on, false, __ATOMIC_RELEASE);
}

void ms_acc_finish(void)
{
    ms_lock(&A.lock);
    ms_lock(&A.rec_mu);
    uint64_t reports = A.reports, buffers = A.buffers, thrash = A.thrash, remote = A.remote;
    int64_t dropped = A.dropped == UINT64_MAX ? -1 : (int64_t)A.dropped;
    ms_unlock(&A.rec_mu);
    if (A.out) {
        fprintf(A.out,
                "{\"summary\":true,\"launches\":%" PRIu64 ",\"covered\":%" PRIu64
                ",\"unbounded\":%" PRIu64 ",\"pred\":%" PRIu64 ",\"touch_lo\":%" PRIu64
                ",\"touch_hi\":%" PRIu64 ",\"miss\":%" PRIu64 ",\"faults\":%" PRIu64
                ",\"late\":%" PRIu64 ",\"before\":%" PRIu64 ",\"after\":%" PRIu64
                ",\"evicted\":%" PRIu64 ",\"dtoh_watched\":%s"
                ",\"max\":%" PRIu64 ",\"reports\":%" PRIu64 ",\"buffers\":%" PRIu64
                ",\"dropped\":%" PRId64 ",\"thrashing\":%" PRIu64 ",\"remote_maps\":%" PRIu64
                ",\"mitigation_watched\":%s,\"error\":",
                A.measured, A.covered, A.unbounded_n, A.pred_bytes, A.lo_bytes, A.hi_bytes,
                A.miss_bytes, A.faults, A.late, A.before_bytes, A.after_bytes, A.evicted_bytes,
                A.dtoh_watched ? "true" : "false", A.max, reports, buffers, dropped, thrash, remote,
                A.mitigation ? "true" : "false");
        write_name(A.out, A.err);
        fprintf(A.out, "}\n");
        fclose(A.out);
        A.out = NULL;
    }
    __atomic_store_n(&A.on, false, __ATOMIC_RELEASE);
    ms_unlock(&A.lock);
}
