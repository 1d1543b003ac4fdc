/*
 * fakecuda.c - the fake driver's core: initialisation, the device, contexts, streams, events,
 * error strings and entry-point resolution (cuGetProcAddress).
 *
 * Design
 *   MSCHED_FAKE_GPUS physical devices (default 1, at most FK_MAX_GPUS), each with the memory
 *   size MSCHED_FAKE_MEM_BYTES (one pool: a process is expected to use one device) and a
 *   deterministic UUID of its own (fk_uuid: GPU-a0..., GPU-a1..., one per physical index).
 *   CUDA_VISIBLE_DEVICES is honoured as the real driver honours it: a comma-separated list of
 *   physical indices or UUIDs ("GPU-a1" or any unique prefix of one) becomes ordinals 0, 1, ...
 *   in that order; the list ends at the first entry that names no device (or one already
 *   listed), so "" or "-1" hides every device (cuInit then fails with CUDA_ERROR_NO_DEVICE). Each
 * visible device has its own primary context. Contexts are small heap objects with a magic number;
 * the current context is thread-local, with a push/pop stack of 16 entries. Streams and events are
 * heap objects in small live lists, so a stale or foreign handle is an error
 * (CUDA_ERROR_INVALID_HANDLE), not a crash. The primary context is destroyed when its last holder
 * releases it (as the CUDA runtime does at exit): until it is retained again, a call that needs a
 * context fails in any thread that has it current (CUDA_ERROR_CONTEXT_IS_DESTROYED). Like the real
 * driver, the fake shuts down as the process exits: an exit handler registered by the first cuInit
 * marks it shut down, and every call after that fails with CUDA_ERROR_DEINITIALIZED (exit handlers
 * registered later run before it, library destructors after it). Nothing is ever queued: work runs
 * when submitted, so stream and event waits return at once and an event records the time of its
 * cuEventRecord.
 *
 *   cuGetProcAddress(_v2) answers with the fake's own functions. Which exported name answers a
 *   (base name, version, flags) request is decided by cuabi/procaddr.c over the tables
 *   scripts/gen_shim.py generated from the toolkit; this file only maps that name to a
 *   function (`functions` below lists every driver function the fake implements, once).
 *
 * Invariants
 *   - Every function other than cuInit, cuDriverGetVersion, cuGetErrorString/Name and
 *     cuGetProcAddress(_v2) returns CUDA_ERROR_NOT_INITIALIZED before cuInit succeeded, and
 *     CUDA_ERROR_DEINITIALIZED once the exit handler has run.
 *   - Live-handle lists are only touched under ms__fk_lock.
 */
#include "gpu/fakecuda/fakecuda_int.h"

#include "cuabi/procaddr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CTX_MAGIC 0x6b637478u /* "xtck" */
#define MAX_HANDLES 4096u     /* live streams, events, contexts each */
#define CTX_STACK 16
#define FK_MAX_GPUS 16

pthread_mutex_t ms__fk_lock = PTHREAD_MUTEX_INITIALIZER;
struct ms_fake_stats ms__fk_stats;

struct fk_ctx {
    uint32_t magic;
    CUdevice dev;
    bool primary;
    unsigned int flags; /* cuCtxSetFlags (under ms__fk_lock) */
};

struct fk_event {
    bool recorded;
    uint64_t t_ns;
};

static bool inited;          /* cuInit succeeded (atomic access) */
static bool shut_down;       /* the exit handler ran (atomic access) */
static uint64_t total_bytes; /* fixed at the first cuInit */
/* The visible devices (fixed at the first cuInit): ordinal i is physical device phys_of[i]. */
static int nvisible;
static int phys_of[FK_MAX_GPUS];
/* One primary context per ordinal; gone: released by its last holder, destroyed until
 * retained again. */
static struct fk_ctx primary[FK_MAX_GPUS];
static int primary_refs[FK_MAX_GPUS];
static bool primary_gone[FK_MAX_GPUS];
static _Thread_local CUcontext ctx_stack[CTX_STACK]; /* [0..ctx_depth) ; top is current */
static _Thread_local int ctx_depth;

/* Live handle sets (ms__fk_lock held). */
struct handles {
    void *h[MAX_HANDLES];
    size_t n;
};
static struct handles streams, events, contexts;

static bool handle_has(const struct handles *s, const void *h)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->h[i] == h)
            return true;
    return false;
}

static bool handle_add(struct handles *s, void *h)
{
    if (s->n == MAX_HANDLES)
        return false;
    s->h[s->n++] = h;
    return true;
}

static bool handle_del(struct handles *s, const void *h)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->h[i] == h) {
            s->h[i] = s->h[--s->n];
            return true;
        }
    }
    return false;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static CUcontext current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

/* The ordinal whose primary context c is, or -1. */
static int primary_index(CUcontext c)
{
    struct fk_ctx *k = (struct fk_ctx *)c;
    return k >= primary && k < primary + FK_MAX_GPUS ? (int)(k - primary) : -1;
}

static bool dev_ok(CUdevice dev)
{
    return dev >= 0 && dev < __atomic_load_n(&nvisible, __ATOMIC_ACQUIRE);
}

bool ms__fk_dev_ok(int dev)
{
    return dev_ok(dev);
}

CUresult ms__fk_inited(void)
{
    if (__atomic_load_n(&shut_down, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_DEINITIALIZED;
    return __atomic_load_n(&inited, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

static void shut_down_at_exit(void)
{
    __atomic_store_n(&shut_down, true, __ATOMIC_RELEASE);
}

CUresult ms__fk_ready(void)
{
    CUresult rc = ms__fk_inited();
    if (rc == CUDA_SUCCESS && !current())
        rc = CUDA_ERROR_INVALID_CONTEXT;
    int p = rc == CUDA_SUCCESS ? primary_index(current()) : -1;
    if (p >= 0 && __atomic_load_n(&primary_gone[p], __ATOMIC_ACQUIRE))
        rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return rc;
}

CUresult ms__fk_stream_ok(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_has(&streams, s);
    pthread_mutex_unlock(&ms__fk_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

uint64_t ms__fk_total_bytes(void)
{
    return total_bytes;
}

MS_FK_EXPORT void ms_fake_get_stats(struct ms_fake_stats *out)
{
    pthread_mutex_lock(&ms__fk_lock);
    *out = ms__fk_stats;
    pthread_mutex_unlock(&ms__fk_lock);
    ms__fk_um_stats(out);
}

/* ------------------------------------------------------------------------------------------ */
/* Initialisation and the device                                                                */

static uint64_t parse_bytes(const char *s, uint64_t dflt)
{
    if (!s || !*s)
        return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        end++;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        end++;
        break;
    default: break;
    }
    return (*end || v == 0) ? dflt : v;
}

/* Physical device p's UUID: a fixed pattern with p in the first and the last byte. */
static void fk_uuid(int p, CUuuid *out)
{
    static const unsigned char pattern[16] = {0xa0, 0x5c, 0x4e, 0x11, 0x6d, 0x73, 0x63, 0x68,
                                              0x65, 0x64, 0x66, 0x61, 0x6b, 0x65, 0x00, 0x00};
    memcpy(out->bytes, pattern, sizeof(pattern));
    out->bytes[0] = (char)(0xa0 + p);
    out->bytes[15] = (char)p;
}

/* The physical device a CUDA_VISIBLE_DEVICES entry names (an index, or a UUID "GPU-..." or a
 * unique prefix of one, dashes included as nvidia-smi prints them), or -1. */
static int fk_entry(const char *e, size_t n, int nphys)
{
    while (n && (*e == ' ' || *e == '\t'))
        e++, n--;
    while (n && (e[n - 1] == ' ' || e[n - 1] == '\t'))
        n--;
    if (n == 0)
        return -1;
    if (n > 4 && strncmp(e, "GPU-", 4) == 0) {
        int found = -1;
        for (int p = 0; p < nphys; p++) {
            CUuuid u;
            char text[48];
            fk_uuid(p, &u);
            const unsigned char *b = (const unsigned char *)u.bytes;
            snprintf(text, sizeof(text),
                     "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                     b[12], b[13], b[14], b[15]);
            if (n <= strlen(text) && strncmp(text, e, n) == 0) {
                if (found >= 0)
                    return -1; /* ambiguous prefix */
                found = p;
            }
        }
        return found;
    }
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i] < '0' || e[i] > '9' || v > 1000)
            return -1;
        v = v * 10 + (e[i] - '0');
    }
    return v < nphys ? v : -1;
}

/* MSCHED_FAKE_GPUS and CUDA_VISIBLE_DEVICES into nvisible and phys_of (ms__fk_lock held). */
static void fk_devices(void)
{
    const char *g = getenv("MSCHED_FAKE_GPUS");
    int nphys = 1;
    if (g && *g) {
        char *end;
        long v = strtol(g, &end, 10);
        if (*end == '\0' && v >= 1 && v <= FK_MAX_GPUS)
            nphys = (int)v;
    }
    for (int i = 0; i < FK_MAX_GPUS; i++)
        primary[i] = (struct fk_ctx){CTX_MAGIC, i, true, 0};
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (!cvd) {
        for (; n < nphys; n++)
            phys_of[n] = n;
    } else {
        const char *e = cvd;
        while (n < nphys) {
            size_t len = strcspn(e, ",");
            int p = fk_entry(e, len, nphys);
            bool dup = false;
            for (int i = 0; i < n; i++)
                dup = dup || phys_of[i] == p;
            if (p < 0 || dup)
                break;
            phys_of[n++] = p;
            if (!e[len])
                break;
            e += len + 1;
        }
    }
    __atomic_store_n(&nvisible, n, __ATOMIC_RELEASE);
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    if (!inited) {
        total_bytes = parse_bytes(getenv("MSCHED_FAKE_MEM_BYTES"), 16ull << 30);
        fk_devices();
        if (__atomic_load_n(&nvisible, __ATOMIC_ACQUIRE) == 0) {
            pthread_mutex_unlock(&ms__fk_lock);
            return CUDA_ERROR_NO_DEVICE; /* as the driver does when every GPU is hidden */
        }
        if (atexit(shut_down_at_exit) != 0) {
            pthread_mutex_unlock(&ms__fk_lock);
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        ms__fk_stats.total_bytes = total_bytes;
        __atomic_store_n(&inited, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = MS_FK_VERSION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult rc = ms__fk_inited();
    if (rc == CUDA_SUCCESS && !count)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *count = __atomic_load_n(&nvisible, __ATOMIC_ACQUIRE);
    return rc;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", "msched fake GPU");
    return CUDA_SUCCESS;
}

/* The same UUID for both ABIs: the fake has no MIG instances. */
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    fk_uuid(phys_of[dev], uuid);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = total_bytes;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *pi = 1; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Contexts                                                                                     */

static bool ctx_valid(CUcontext c)
{
    if (primary_index(c) >= 0)
        return dev_ok(primary_index(c));
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_has(&contexts, c);
    pthread_mutex_unlock(&ms__fk_lock);
    return ok;
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    (void)flags;
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fk_ctx *c = malloc(sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct fk_ctx){CTX_MAGIC, dev, false, 0};
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_add(&contexts, c);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx_stack[ctx_depth++] = (CUcontext)c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (primary_index(ctx) >= 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_del(&contexts, ctx);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == ctx)
            ctx_stack[i] = NULL; /* this thread's stack; others keep a dead handle (their bug) */
    while (ctx_depth > 0 && !ctx_stack[ctx_depth - 1])
        ctx_depth--;
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ms__fk_lock);
    primary_refs[dev]++;
    __atomic_store_n(&primary_gone[dev], false, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ms__fk_lock);
    *pctx = (CUcontext)&primary[dev];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ms__fk_lock);
    *active = primary_refs[dev] > 0;
    pthread_mutex_unlock(&ms__fk_lock);
    *flags = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ms__fk_lock);
    rc = primary_refs[dev] > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (primary_refs[dev] > 0 && --primary_refs[dev] == 0)
        __atomic_store_n(&primary_gone[dev], true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ms__fk_lock);
    return rc;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx && !ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx || !ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ((struct fk_ctx *)current())->dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    *flags = ((struct fk_ctx *)current())->flags;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

/* Only the flags the driver lets one change after creation: the scheduling ones and
 * CU_CTX_SYNC_MEMOPS (what a VMM allocation's sync_memops falls back to). */
CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags & ~(unsigned int)(CU_CTX_SCHED_MASK | CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    ((struct fk_ctx *)current())->flags = flags;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    CUresult rc = ms__fk_ready();
    return rc == CUDA_SUCCESS ? ms__fk_capture_sync(NULL, true) : rc;
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = ms__fk_inited();
    if (rc == CUDA_SUCCESS && ctx && !ctx_valid(ctx))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && !ctx)
        rc = ms__fk_ready();
    return rc == CUDA_SUCCESS ? ms__fk_capture_sync(NULL, true) : rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Streams and events                                                                           */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    void *s = malloc(16);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_add(&streams, s);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = hStream && handle_del(&streams, hStream);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    free(hStream);
    return CUDA_SUCCESS;
}

static CUresult stream_wait(CUstream s)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(s);
    return rc == CUDA_SUCCESS ? ms__fk_capture_sync(s, false) : rc;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return stream_wait(hStream);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_wait(hStream);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    return stream_wait(hStream);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    return stream_wait(hStream);
}

static bool event_valid(CUevent e)
{
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = e && handle_has(&events, e);
    pthread_mutex_unlock(&ms__fk_lock);
    return ok;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    (void)Flags;
    CUresult rc = ms__fk_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = handle_add(&events, e);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

/* The checks of a call that puts event hEvent on stream hStream (record, wait). */
static CUresult event_on_stream(CUevent hEvent, CUstream hStream)
{
    CUresult rc = ms__fk_ready();
    if (rc == CUDA_SUCCESS)
        rc = ms__fk_stream_ok(hStream);
    if (rc == CUDA_SUCCESS && !event_valid(hEvent))
        rc = CUDA_ERROR_INVALID_HANDLE;
    return rc;
}

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
    CUresult rc = event_on_stream(hEvent, hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fk_event *e = (struct fk_event *)hEvent;
    pthread_mutex_lock(&ms__fk_lock);
    e->recorded = true;
    e->t_ns = now_ns();
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream);
}

/* The fake runs every command when it is issued: a stream waiting on an event has nothing to
 * wait for; the call is checked and counted (ms_fake_stats.event_waits). */
static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int flags)
{
    CUresult rc = event_on_stream(hEvent, hStream);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ms__fk_lock);
    ms__fk_stats.event_waits++;
    pthread_mutex_unlock(&ms__fk_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    return event_valid(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    return cuEventSynchronize(hEvent);
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!event_valid(a) || !event_valid(b))
        return CUDA_ERROR_INVALID_HANDLE;
    const struct fk_event *ea = (const struct fk_event *)a, *eb = (const struct fk_event *)b;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = ea->recorded && eb->recorded;
    double d = ((double)eb->t_ns - (double)ea->t_ns) / 1e6;
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)d;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    CUresult rc = ms__fk_inited();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ms__fk_lock);
    bool ok = hEvent && handle_del(&events, hEvent);
    pthread_mutex_unlock(&ms__fk_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    free(hEvent);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */

static const struct {
    CUresult rc;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was "
     "encountered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult error_str(CUresult error, const char **pStr, bool name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].rc == error) {
            *pStr = name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    return error_str(error, pStr, false);
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    return error_str(error, pStr, true);
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                 */

/* The fake has none of NVIDIA's private tables; every id gets this one, so tests can check
 * that an interposer hands the call through untouched (same pointer back). */
static const void *export_table[4];

CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = export_table;
    return CUDA_SUCCESS;
}

/* Every exported driver function of the fake, by its exported name. */
/* clang-format off */
#define FK_ENTRY(name) {#name, (void *)&name}
/* clang-format on */
static const struct {
    const char *name;
    void *fn;
} functions[] = {
    FK_ENTRY(cuCtxCreate_v4),
    FK_ENTRY(cuCtxDestroy_v2),
    FK_ENTRY(cuCtxGetCurrent),
    FK_ENTRY(cuCtxGetDevice),
    FK_ENTRY(cuCtxPopCurrent_v2),
    FK_ENTRY(cuCtxPushCurrent_v2),
    FK_ENTRY(cuCtxSetCurrent),
    FK_ENTRY(cuCtxSynchronize),
    FK_ENTRY(cuCtxSynchronize_v2),
    FK_ENTRY(cuDeviceGet),
    FK_ENTRY(cuDeviceGetAttribute),
    FK_ENTRY(cuDeviceGetCount),
    FK_ENTRY(cuDeviceGetName),
    FK_ENTRY(cuDeviceGetUuid),
    FK_ENTRY(cuDeviceGetUuid_v2),
    FK_ENTRY(cuDevicePrimaryCtxGetState),
    FK_ENTRY(cuDevicePrimaryCtxRelease_v2),
    FK_ENTRY(cuDevicePrimaryCtxRetain),
    FK_ENTRY(cuDeviceTotalMem_v2),
    FK_ENTRY(cuDriverGetVersion),
    FK_ENTRY(cuEventCreate),
    FK_ENTRY(cuEventDestroy_v2),
    FK_ENTRY(cuEventElapsedTime),
    FK_ENTRY(cuEventElapsedTime_v2),
    FK_ENTRY(cuEventQuery),
    FK_ENTRY(cuEventRecord),
    FK_ENTRY(cuEventRecord_ptsz),
    FK_ENTRY(cuEventSynchronize),
    FK_ENTRY(cuFuncGetName),
    FK_ENTRY(cuFuncGetParamInfo),
    FK_ENTRY(cuTensorMapEncodeTiled),
    FK_ENTRY(cuTensorMapReplaceAddress),
    FK_ENTRY(cuGetErrorName),
    FK_ENTRY(cuGetErrorString),
    FK_ENTRY(cuGetExportTable),
    FK_ENTRY(cuGetProcAddress),
    FK_ENTRY(cuGetProcAddress_v2),
    FK_ENTRY(cuMemGetAddressRange_v2),
    FK_ENTRY(cuPointerGetAttribute),
    FK_ENTRY(cuPointerGetAttributes),
    FK_ENTRY(cuPointerSetAttribute),
    FK_ENTRY(cuMemGetHandleForAddressRange),
    FK_ENTRY(cuCtxGetFlags),
    FK_ENTRY(cuCtxSetFlags),
    FK_ENTRY(cuInit),
    FK_ENTRY(cuKernelGetName),
    FK_ENTRY(cuKernelGetParamInfo),
    FK_ENTRY(cuLaunchCooperativeKernel),
    FK_ENTRY(cuLaunchCooperativeKernel_ptsz),
    FK_ENTRY(cuLaunchKernel),
    FK_ENTRY(cuLaunchKernelEx),
    FK_ENTRY(cuLaunchKernelEx_ptsz),
    FK_ENTRY(cuLaunchKernel_ptsz),
    FK_ENTRY(cuMemAddressFree),
    FK_ENTRY(cuMemAddressReserve),
    FK_ENTRY(cuMemAllocAsync),
    FK_ENTRY(cuMemAllocAsync_ptsz),
    FK_ENTRY(cuMemAllocManaged),
    FK_ENTRY(cuMemPrefetchAsync_v2),
    FK_ENTRY(cuStreamWriteValue32_v2),
    FK_ENTRY(cuStreamWriteValue32_v2_ptsz),
    FK_ENTRY(cuMemAllocHost_v2),
    FK_ENTRY(cuMemHostAlloc),
    FK_ENTRY(cuMemFreeHost),
    FK_ENTRY(cuMemHostRegister_v2),
    FK_ENTRY(cuMemHostUnregister),
    FK_ENTRY(cuMemcpy3D_v2),
    FK_ENTRY(cuMemcpy3D_v2_ptds),
    FK_ENTRY(cuMemcpy3DAsync_v2),
    FK_ENTRY(cuMemcpy3DAsync_v2_ptsz),
    FK_ENTRY(cuMemcpyBatchAsync_v2),
    FK_ENTRY(cuMemcpyBatchAsync_v2_ptsz),
    FK_ENTRY(cuGraphCreate),
    FK_ENTRY(cuStreamBeginCapture_v2),
    FK_ENTRY(cuStreamBeginCapture_v2_ptsz),
    FK_ENTRY(cuStreamEndCapture),
    FK_ENTRY(cuStreamEndCapture_ptsz),
    FK_ENTRY(cuStreamIsCapturing),
    FK_ENTRY(cuStreamIsCapturing_ptsz),
    FK_ENTRY(cuStreamWaitEvent),
    FK_ENTRY(cuStreamWaitEvent_ptsz),
    FK_ENTRY(cuGraphAddKernelNode_v2),
    FK_ENTRY(cuGraphGetNodes),
    FK_ENTRY(cuGraphNodeGetType),
    FK_ENTRY(cuGraphKernelNodeGetParams_v2),
    FK_ENTRY(cuGraphInstantiateWithFlags),
    FK_ENTRY(cuGraphLaunch),
    FK_ENTRY(cuGraphLaunch_ptsz),
    FK_ENTRY(cuGraphExecDestroy),
    FK_ENTRY(cuGraphDestroy),
    FK_ENTRY(cuMemAllocPitch_v2),
    FK_ENTRY(cuMemAlloc_v2),
    FK_ENTRY(cuMemCreate),
    FK_ENTRY(cuMemFreeAsync),
    FK_ENTRY(cuMemFreeAsync_ptsz),
    FK_ENTRY(cuMemFree_v2),
    FK_ENTRY(cuMemGetAllocationGranularity),
    FK_ENTRY(cuMemGetInfo_v2),
    FK_ENTRY(cuMemMap),
    FK_ENTRY(cuMemRelease),
    FK_ENTRY(cuMemSetAccess),
    FK_ENTRY(cuMemUnmap),
    FK_ENTRY(cuMemcpy),
    FK_ENTRY(cuMemcpy2D_v2),
    FK_ENTRY(cuMemcpy2D_v2_ptds),
    FK_ENTRY(cuMemcpyAsync),
    FK_ENTRY(cuMemcpyAsync_ptsz),
    FK_ENTRY(cuMemcpyDtoDAsync_v2),
    FK_ENTRY(cuMemcpyDtoDAsync_v2_ptsz),
    FK_ENTRY(cuMemcpyDtoD_v2),
    FK_ENTRY(cuMemcpyDtoD_v2_ptds),
    FK_ENTRY(cuMemcpyDtoHAsync_v2),
    FK_ENTRY(cuMemcpyDtoHAsync_v2_ptsz),
    FK_ENTRY(cuMemcpyDtoH_v2),
    FK_ENTRY(cuMemcpyDtoH_v2_ptds),
    FK_ENTRY(cuMemcpyHtoDAsync_v2),
    FK_ENTRY(cuMemcpyHtoDAsync_v2_ptsz),
    FK_ENTRY(cuMemcpyHtoD_v2),
    FK_ENTRY(cuMemcpyHtoD_v2_ptds),
    FK_ENTRY(cuMemcpy_ptds),
    FK_ENTRY(cuMemsetD16Async),
    FK_ENTRY(cuMemsetD16Async_ptsz),
    FK_ENTRY(cuMemsetD16_v2),
    FK_ENTRY(cuMemsetD16_v2_ptds),
    FK_ENTRY(cuMemsetD2D32_v2),
    FK_ENTRY(cuMemsetD2D32_v2_ptds),
    FK_ENTRY(cuMemsetD32Async),
    FK_ENTRY(cuMemsetD32Async_ptsz),
    FK_ENTRY(cuMemsetD32_v2),
    FK_ENTRY(cuMemsetD32_v2_ptds),
    FK_ENTRY(cuMemsetD8Async),
    FK_ENTRY(cuMemsetD8Async_ptsz),
    FK_ENTRY(cuMemsetD8_v2),
    FK_ENTRY(cuMemsetD8_v2_ptds),
    FK_ENTRY(cuOccupancyMaxPotentialBlockSizeWithFlags),
    FK_ENTRY(cuStreamCreate),
    FK_ENTRY(cuStreamDestroy_v2),
    FK_ENTRY(cuStreamQuery),
    FK_ENTRY(cuStreamQuery_ptsz),
    FK_ENTRY(cuStreamSynchronize),
    FK_ENTRY(cuStreamSynchronize_ptsz),
    FK_ENTRY(cuTexRefSetMipmapLevelClamp),
};

void *ms__fk_lookup_function(const char *name)
{
    for (size_t i = 0; name && i < sizeof functions / sizeof functions[0]; i++)
        if (strcmp(functions[i].name, name) == 0)
            return functions[i].fn;
    return NULL;
}

static CUresult procaddr(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *symbolStatus)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (cudaVersion > MS_FK_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    int status;
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int sym = ms_procaddr_select(symbol, cudaVersion, per_thread, &status);
    void *fn = sym >= 0 ? ms__fk_lookup_function(ms_sym_name(sym)) : NULL;
    if (sym >= 0 && !fn)
        status = MS_PA_NOT_FOUND; /* a real symbol the fake does not implement */
    if (symbolStatus)
        *symbolStatus = (CUdriverProcAddressQueryResult)status;
    if (!fn)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = fn;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return procaddr(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return procaddr(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ------------------------------------------------------------------------------------------ */
/* Modules: the fake runs no device code; kernels are registered host functions.              */

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    (void)module;
    (void)image;
    CUresult rc = ms__fk_ready();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    (void)hmod;
    return ms__fk_ready();
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    (void)hfunc;
    (void)hmod;
    (void)name;
    CUresult rc = ms__fk_ready();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_FOUND;
}
