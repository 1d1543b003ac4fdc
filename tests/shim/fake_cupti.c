/*
 * fake_cupti.c - a stand-in for libcupti over the fake CUDA driver, so the prediction-accuracy
 * probe (shim/accuracy.c) runs end to end in CI against touches that are known exactly.
 *
 * Design
 *   Only what the probe calls: activity callbacks, the unified-memory counter configuration,
 *   enable/disable, flush, record iteration, timestamps, result strings and the dropped-record
 *   count. The reports come from the fake driver's own log of page moves
 *   (ms_fake_um_drain, gpu/fakecuda/fakecuda.h), found by dlopening the driver at
 *   MSCHED_REAL_LIBCUDA (the same object libmsched loaded): a page a GPU fault brought in
 *   becomes a GPU_PAGE_FAULT report and a BYTES_TRANSFER_HTOD report of the page; a prefetch
 *   to the device an HTOD report, one to the host a DTOH report. Timestamps are
 *   CLOCK_MONOTONIC nanoseconds, as the log's and as cuptiGetTimestamp's. Kinds the
 *   configuration did not enable are not reported. Reports are delivered in the flushing thread
 *   (cuptiActivityFlushAll), one buffer per flush.
 *
 *   FAKE_CUPTI_CONFIG_MAX=N refuses configurations of more than N counter kinds (as a CUPTI
 *   without the newer kinds would), to test the probe's fallbacks.
 */
#include "gpu/fakecuda/fakecuda.h"

#include <cupti_activity.h>
#include <cupti_result.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

static CUpti_BuffersCallbackRequestFunc req;
static CUpti_BuffersCallbackCompleteFunc done;
static bool on[CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_COUNT];
static bool enabled;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ms_fake_um_drain_fn drain;

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                                  CUpti_BuffersCallbackCompleteFunc c)
{
    if (!r || !c)
        return CUPTI_ERROR_INVALID_PARAMETER;
    req = r;
    done = c;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityConfigureUnifiedMemoryCounter(
    CUpti_ActivityUnifiedMemoryCounterConfig *cfg, uint32_t count)
{
    const char *m = getenv("FAKE_CUPTI_CONFIG_MAX");
    if (!cfg || (m && *m && count > (uint32_t)atoi(m)))
        return CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED;
    memset(on, 0, sizeof on);
    for (uint32_t i = 0; i < count; i++)
        if ((unsigned)cfg[i].kind < CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_COUNT)
            on[cfg[i].kind] = cfg[i].enable != 0;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
    if (kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
        return CUPTI_ERROR_NOT_COMPATIBLE;
    const char *path = getenv("MSCHED_REAL_LIBCUDA");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    *(void **)&drain = h ? dlsym(h, "ms_fake_um_drain") : NULL;
    if (!drain)
        return CUPTI_ERROR_NOT_INITIALIZED;
    enabled = true;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
    (void)kind;
    enabled = false;
    return CUPTI_SUCCESS;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *t)
{
    if (!t)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *t = now_ns();
    return CUPTI_SUCCESS;
}

/* Append one report to buf if the kind is on and it fits. */
static void put(uint8_t *buf, size_t size, size_t *used, CUpti_ActivityUnifiedMemoryCounterKind k,
                const struct ms_fake_um_event *e, uint64_t value)
{
    if (!on[k] || *used + sizeof(CUpti_ActivityUnifiedMemoryCounter3) > size)
        return;
    CUpti_ActivityUnifiedMemoryCounter3 r;
    memset(&r, 0, sizeof r);
    r.kind = CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER;
    r.counterKind = k;
    r.value = value;
    r.start = r.end = e->ns;
    r.address = e->addr;
    memcpy(buf + *used, &r, sizeof r);
    *used += sizeof r;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag;
    if (!enabled || !req || !done)
        return CUPTI_SUCCESS;
    pthread_mutex_lock(&mu);
    struct ms_fake_um_event ev[256];
    size_t n;
    while ((n = drain(ev, 256)) > 0) {
        uint8_t *buf = NULL;
        size_t size = 0, maxrec = 0, used = 0;
        req(&buf, &size, &maxrec);
        if (!buf)
            break;
        for (size_t i = 0; i < n; i++) {
            const struct ms_fake_um_event *e = &ev[i];
            if (e->kind == MS_FAKE_UM_FAULT) {
                put(buf, size, &used, CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, e,
                    1);
                put(buf, size, &used,
                    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, e, e->bytes);
            } else {
                put(buf, size, &used,
                    e->kind == MS_FAKE_UM_PREFETCH_IN
                        ? CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD
                        : CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                    e, e->bytes);
            }
        }
        done(NULL, 0, buf, size, used);
    }
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
                                              CUpti_Activity **record)
{
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    uint8_t *next =
        *record ? (uint8_t *)*record + sizeof(CUpti_ActivityUnifiedMemoryCounter3) : buffer;
    if (next + sizeof(CUpti_ActivityUnifiedMemoryCounter3) > buffer + valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream,
                                                     size_t *dropped)
{
    (void)ctx, (void)stream;
    if (!dropped)
        return CUPTI_ERROR_INVALID_PARAMETER;
    const char *path = getenv("MSCHED_REAL_LIBCUDA");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    ms_fake_um_dropped_fn f = NULL;
    *(void **)&f = h ? dlsym(h, "ms_fake_um_dropped") : NULL;
    /* As CUPTI: the count since the last call. */
    static uint64_t told;
    static pthread_mutex_t dmu = PTHREAD_MUTEX_INITIALIZER; /* not mu: called from inside a flush */
    pthread_mutex_lock(&dmu);
    uint64_t all = f ? f() : 0;
    *dropped = (size_t)(all - told);
    told = all;
    pthread_mutex_unlock(&dmu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **str)
{
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *str = r == CUPTI_SUCCESS ? "success" : "fake CUPTI error";
    return CUPTI_SUCCESS;
}
