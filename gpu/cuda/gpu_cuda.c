/*
 * gpu_cuda.c - the seam on a real GPU (contract: gpu_cuda.h).
 *
 * Physical handles: a small array pool of (size, handle) pairs. map pops a pooled handle of the
 * exact size or creates one; unmap pushes the handle back while the pool holds less than
 * pool_limit bytes, else releases it. When cuMemCreate reports out-of-memory the pool is
 * emptied (released) and creation retried once.
 *
 * Events: CU_EVENT_DISABLE_TIMING events on a free list; the token handed out is the CUevent
 * pointer value.
 */
#include "gpu_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pooled {
    uint64_t bytes;
    CUmemGenericAllocationHandle h;
};

/* A host chunk: its handle and the shadow address where it stays mapped. */
struct hchunk {
    CUmemGenericAllocationHandle h;
    CUdeviceptr shadow;
    uint64_t bytes;
    uint64_t pooled_ns; /* when it went into the pool (c_now) */
};

struct ms_gpu_cuda {
    struct ms_gpu_ops ops;
    const struct ms_cuda_api *api;
    CUdevice dev;
    CUstream stream[2];
    CUstream hstream;
    CUevent *free_ev;
    size_t nfree_ev, capfree_ev;
    struct pooled *pool;
    size_t npool, cappool;
    uint64_t pooled_bytes, pool_limit;
    CUmodule hmod;
    CUfunction hfn;
    CUdeviceptr hout;         /* hcap 8-byte result slots on the device */
    unsigned long long *hres; /* hcap pinned host slots */
    size_t hcap;
    bool demand;           /* unified seam: populations left to the GPU's page faults */
    struct hchunk **hpool; /* released host chunks, shadow-mapped, for reuse */
    size_t nhpool, caphpool;
    uint64_t hpooled_bytes, hpool_limit;
    uint64_t host_limit; /* pinned bytes host chunks may hold (live + pooled + pending); 0: none */
    uint64_t hpending;   /* bytes of host chunks being created now */
    struct ms_gpu_cuda_host_stats hst;
    pthread_mutex_t hmu;            /* the host chunk pool, hst and herr */
    char herr[192], herr_copy[192]; /* the host calls' last error (herr_copy: the caller's) */
    char last_err[128];
};

#define LOAD(field, name)                                                                          \
    do {                                                                                           \
        *(void **)&api->field = dlsym(h, name);                                                    \
        if (!api->field) {                                                                         \
            if (missing)                                                                           \
                *missing = name;                                                                   \
            return MS_E_NOTFOUND;                                                                  \
        }                                                                                          \
    } while (0)

int ms_cuda_api_load(struct ms_cuda_api *api, void *h, const char **missing)
{
    memset(api, 0, sizeof(*api));
    LOAD(cuMemCreate, "cuMemCreate");
    LOAD(cuMemRelease, "cuMemRelease");
    LOAD(cuMemMap, "cuMemMap");
    LOAD(cuMemUnmap, "cuMemUnmap");
    LOAD(cuMemSetAccess, "cuMemSetAccess");
    LOAD(cuMemAddressReserve, "cuMemAddressReserve");
    LOAD(cuMemAddressFree, "cuMemAddressFree");
    LOAD(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    LOAD(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    LOAD(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    LOAD(cuStreamCreate, "cuStreamCreate");
    LOAD(cuStreamDestroy, "cuStreamDestroy_v2");
    LOAD(cuStreamSynchronize, "cuStreamSynchronize");
    LOAD(cuEventCreate, "cuEventCreate");
    LOAD(cuEventRecord, "cuEventRecord");
    LOAD(cuEventSynchronize, "cuEventSynchronize");
    LOAD(cuEventDestroy, "cuEventDestroy_v2");
    LOAD(cuMemGetInfo, "cuMemGetInfo_v2");
    LOAD(cuModuleLoadData, "cuModuleLoadData");
    LOAD(cuModuleUnload, "cuModuleUnload");
    LOAD(cuModuleGetFunction, "cuModuleGetFunction");
    LOAD(cuLaunchKernel, "cuLaunchKernel");
    LOAD(cuMemAlloc, "cuMemAlloc_v2");
    LOAD(cuMemFree, "cuMemFree_v2");
    LOAD(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    LOAD(cuCtxGetDevice, "cuCtxGetDevice");
    LOAD(cuGetErrorName, "cuGetErrorName");
    LOAD(cuMemsetD32Async, "cuMemsetD32Async");
    LOAD(cuMemHostAlloc, "cuMemHostAlloc");
    LOAD(cuMemFreeHost, "cuMemFreeHost");
    *(void **)&api->cuMemPrefetchAsync = dlsym(h, "cuMemPrefetchAsync_v2");
    *(void **)&api->cuMemAllocManaged = dlsym(h, "cuMemAllocManaged");
    return MS_OK;
}

static int fail(struct ms_gpu_cuda *g, const char *call, CUresult r)
{
    const char *name = NULL;
    if (g->api->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown error";
    snprintf(g->last_err, sizeof(g->last_err), "%s: %s", call, name);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? MS_E_NOSPACE : MS_E_GPU;
}

#define CK(g, call, expr)                                                                          \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return fail((g), (call), r_);                                                          \
    } while (0)

static void pool_drain(struct ms_gpu_cuda *g)
{
    for (size_t i = 0; i < g->npool; i++)
        g->api->cuMemRelease(g->pool[i].h);
    g->npool = 0;
    g->pooled_bytes = 0;
}

static int handle_get(struct ms_gpu_cuda *g, uint64_t bytes, CUmemGenericAllocationHandle *out)
{
    for (size_t i = g->npool; i-- > 0;) {
        if (g->pool[i].bytes == bytes) {
            *out = g->pool[i].h;
            g->pooled_bytes -= bytes;
            g->pool[i] = g->pool[--g->npool];
            return MS_OK;
        }
    }
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g->dev;
    CUresult r = g->api->cuMemCreate(out, bytes, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && g->npool) {
        pool_drain(g);
        r = g->api->cuMemCreate(out, bytes, &prop, 0);
    }
    if (r != CUDA_SUCCESS)
        return fail(g, "cuMemCreate", r);
    return MS_OK;
}

static void handle_put(struct ms_gpu_cuda *g, uint64_t bytes, CUmemGenericAllocationHandle h)
{
    if (g->pooled_bytes + bytes <= g->pool_limit) {
        if (g->npool == g->cappool) {
            size_t n = g->cappool ? g->cappool * 2 : 16;
            struct pooled *p = realloc(g->pool, n * sizeof(*p));
            if (p) {
                g->pool = p;
                g->cappool = n;
            }
        }
        if (g->npool < g->cappool) {
            g->pool[g->npool++] = (struct pooled){bytes, h};
            g->pooled_bytes += bytes;
            return;
        }
    }
    g->api->cuMemRelease(h);
}

static CUmemAccessDesc rw_access(const struct ms_gpu_cuda *g)
{
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = g->dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return acc;
}

/* Map handle h (bytes long) at va, read-write for the device; on failure nothing is mapped.
 * *call names the failing call. */
static CUresult map_at(struct ms_gpu_cuda *g, CUdeviceptr va, uint64_t bytes,
                       CUmemGenericAllocationHandle h, const char **call)
{
    CUmemAccessDesc acc = rw_access(g);
    *call = "cuMemMap";
    CUresult r = g->api->cuMemMap(va, bytes, 0, h, 0);
    if (r != CUDA_SUCCESS)
        return r;
    *call = "cuMemSetAccess";
    r = g->api->cuMemSetAccess(va, bytes, &acc, 1);
    if (r != CUDA_SUCCESS)
        g->api->cuMemUnmap(va, bytes);
    return r;
}

static uint64_t c_now(void *impl);

static const struct hchunk *hc_of(const struct ms_gpu_chunk *c)
{
    return (const struct hchunk *)(uintptr_t)c->hchunk;
}

static int c_unmap(void *impl, struct ms_gpu_chunk *c, size_t n);

static int c_map(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    for (size_t i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va = (CUdeviceptr)c[i].va;
        int e = handle_get(g, c[i].bytes, &h);
        const char *call = NULL;
        CUresult r = CUDA_SUCCESS;
        bool hosted = c[i].hchunk && !c[i].bare; /* the host chunk is mapped at va */
        if (e == MS_OK && hosted) {
            call = "cuMemUnmap";
            r = g->api->cuMemUnmap(va, c[i].bytes); /* the host chunk keeps its shadow */
        }
        if (e == MS_OK && r == CUDA_SUCCESS) {
            r = map_at(g, va, c[i].bytes, h, &call);
            if (r != CUDA_SUCCESS && hosted) {
                const char *ignored;
                map_at(g, va, c[i].bytes, hc_of(&c[i])->h, &ignored); /* as it was */
            }
        }
        if (e == MS_OK && r != CUDA_SUCCESS) {
            handle_put(g, c[i].bytes, h);
            e = fail(g, call, r);
        }
        if (e != MS_OK) {
            if (i)
                c_unmap(g, c, i); /* all-or-nothing (host chunks mapped back) */
            return e;
        }
        c[i].phys = (uint64_t)h;
    }
    return MS_OK;
}

static int c_unmap(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    int first = MS_OK;
    for (size_t i = 0; i < n; i++) {
        CUdeviceptr va = (CUdeviceptr)c[i].va;
        CUmemGenericAllocationHandle h = (CUmemGenericAllocationHandle)c[i].phys;
        CUresult r = g->api->cuMemUnmap(va, c[i].bytes);
        const char *call = "cuMemUnmap";
        if (r == CUDA_SUCCESS && c[i].hchunk && !c[i].bare) {
            r = map_at(g, va, c[i].bytes, hc_of(&c[i])->h, &call);
            if (r != CUDA_SUCCESS) {
                /* Never leave the chunk unmapped: back to its device memory, still resident. */
                const char *ignored;
                map_at(g, va, c[i].bytes, h, &ignored);
                if (first == MS_OK)
                    first = fail(g, call, r);
                continue;
            }
        }
        if (r != CUDA_SUCCESS) {
            if (first == MS_OK)
                first = fail(g, call, r);
            continue;
        }
        handle_put(g, c[i].bytes, h);
    }
    return first;
}

/* ---- host chunks ---------------------------------------------------------------------------
 * These four calls may run beside the others, from any thread, on chunks no other call uses
 * (the engine makes an allocation's host chunks without its lock): the pool and the counters
 * are under hmu, errors go to herr (under hmu), and the driver calls are thread-safe. */

static int hfail(struct ms_gpu_cuda *g, const char *call, CUresult r)
{
    const char *name = NULL;
    if (g->api->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown error";
    pthread_mutex_lock(&g->hmu);
    snprintf(g->herr, sizeof(g->herr), "%s: %s", call, name);
    pthread_mutex_unlock(&g->hmu);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? MS_E_NOSPACE : MS_E_GPU;
}

static void hchunk_destroy(struct ms_gpu_cuda *g, struct hchunk *hc)
{
    g->api->cuMemUnmap(hc->shadow, hc->bytes);
    g->api->cuMemAddressFree(hc->shadow, hc->bytes);
    g->api->cuMemRelease(hc->h);
    free(hc);
}

/* Empty the pool (returns how many were released). */
static size_t hpool_drain(struct ms_gpu_cuda *g)
{
    pthread_mutex_lock(&g->hmu);
    struct hchunk **v = g->hpool;
    size_t n = g->nhpool;
    g->hpool = NULL;
    g->nhpool = g->caphpool = 0;
    g->hpooled_bytes = 0;
    pthread_mutex_unlock(&g->hmu);
    for (size_t i = 0; i < n; i++)
        hchunk_destroy(g, v[i]);
    free(v);
    return n;
}

static int hchunk_create_new(struct ms_gpu_cuda *g, uint64_t bytes, bool may_drain,
                             struct hchunk **out);

/* Put hc into the pool, if the pool's array can hold it (hmu held; false: it did not). */
static bool hpool_push(struct ms_gpu_cuda *g, struct hchunk *hc)
{
    if (g->nhpool == g->caphpool &&
        ms_grow((void **)&g->hpool, &g->caphpool, g->nhpool + 1, sizeof(*g->hpool)) != MS_OK)
        return false;
    hc->pooled_ns = c_now(g);
    g->hpool[g->nhpool++] = hc;
    g->hpooled_bytes += hc->bytes;
    return true;
}

/* A host chunk of `bytes`: from the pool, else a new one within the host memory limit. */
static int hchunk_create(struct ms_gpu_cuda *g, uint64_t bytes, struct hchunk **out)
{
    pthread_mutex_lock(&g->hmu);
    for (size_t i = g->nhpool; i-- > 0;) {
        if (g->hpool[i]->bytes == bytes) {
            *out = g->hpool[i];
            g->hpool[i] = g->hpool[--g->nhpool];
            g->hpooled_bytes -= bytes;
            g->hst.reused++;
            pthread_mutex_unlock(&g->hmu);
            return MS_OK;
        }
    }
    bool over =
        g->host_limit && g->hst.live_bytes + g->hpooled_bytes + g->hpending + bytes > g->host_limit;
    pthread_mutex_unlock(&g->hmu);
    if (over && hpool_drain(g)) {
        pthread_mutex_lock(&g->hmu);
        over = g->hst.live_bytes + g->hpooled_bytes + g->hpending + bytes > g->host_limit;
        pthread_mutex_unlock(&g->hmu);
    }
    pthread_mutex_lock(&g->hmu);
    if (over) {
        g->hst.limit_hits++;
        snprintf(g->herr, sizeof(g->herr),
                 "the host memory limit: %llu MiB of host chunks held, %llu MiB more asked, "
                 "limit %llu MiB (MSCHED_HOST_LIMIT)",
                 (unsigned long long)((g->hst.live_bytes + g->hpending) >> 20),
                 (unsigned long long)(bytes >> 20), (unsigned long long)(g->host_limit >> 20));
    } else {
        g->hpending += bytes;
    }
    pthread_mutex_unlock(&g->hmu);
    if (over)
        return MS_E_NOSPACE;
    int e = hchunk_create_new(g, bytes, true, out);
    pthread_mutex_lock(&g->hmu);
    g->hpending -= bytes;
    pthread_mutex_unlock(&g->hmu);
    return e;
}

/* Create a host chunk (pin, reserve its shadow, map it there). may_drain: when the driver is
 * out of memory, empty the pool and try once more (a chunk made ahead of need must not: it
 * would destroy the pool's chunks only to make one more, and the next step would do it again). */
static int hchunk_create_new(struct ms_gpu_cuda *g, uint64_t bytes, bool may_drain,
                             struct hchunk **out)
{
    uint64_t t0 = c_now(g);
    struct hchunk *hc = calloc(1, sizeof(*hc));
    if (!hc)
        return MS_E_NOMEM;
    hc->bytes = bytes;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    prop.location.id = 0;
    CUresult r = g->api->cuMemCreate(&hc->h, bytes, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && may_drain && hpool_drain(g))
        r = g->api->cuMemCreate(&hc->h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS) {
        free(hc);
        return hfail(g, "cuMemCreate (host)", r);
    }
    r = g->api->cuMemAddressReserve(&hc->shadow, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        g->api->cuMemRelease(hc->h);
        free(hc);
        return hfail(g, "cuMemAddressReserve", r);
    }
    const char *call;
    r = map_at(g, hc->shadow, bytes, hc->h, &call);
    if (r != CUDA_SUCCESS) {
        g->api->cuMemAddressFree(hc->shadow, bytes);
        g->api->cuMemRelease(hc->h);
        free(hc);
        return hfail(g, call, r);
    }
    pthread_mutex_lock(&g->hmu);
    g->hst.created++;
    g->hst.created_bytes += bytes;
    g->hst.create_ns += c_now(g) - t0;
    pthread_mutex_unlock(&g->hmu);
    *out = hc;
    return MS_OK;
}

static void c_host_free(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    for (size_t i = 0; i < n; i++) {
        struct hchunk *hc = (struct hchunk *)(uintptr_t)c[i].hchunk;
        if (!hc)
            continue;
        pthread_mutex_lock(&g->hmu);
        g->hst.live--;
        g->hst.live_bytes -= hc->bytes;
        bool pooled = g->hpooled_bytes + hc->bytes <= g->hpool_limit && hpool_push(g, hc);
        pthread_mutex_unlock(&g->hmu);
        if (!pooled)
            hchunk_destroy(g, hc);
    }
}

static int c_host_new(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    size_t *made = malloc((n ? n : 1) * sizeof(*made)), nmade = 0;
    if (!made)
        return MS_E_NOMEM;
    int e = MS_OK;
    for (size_t i = 0; i < n && e == MS_OK; i++) {
        if (c[i].hchunk)
            continue;
        struct hchunk *hc = NULL;
        e = hchunk_create(g, c[i].bytes, &hc);
        if (e == MS_OK) {
            c[i].hchunk = (uint64_t)(uintptr_t)hc;
            made[nmade++] = i;
            pthread_mutex_lock(&g->hmu);
            g->hst.live++;
            g->hst.live_bytes += hc->bytes;
            pthread_mutex_unlock(&g->hmu);
        }
    }
    if (e != MS_OK) /* all-or-nothing: release the ones made here */
        for (size_t k = 0; k < nmade; k++) {
            c_host_free(g, &c[made[k]], 1);
            c[made[k]].hchunk = 0;
        }
    free(made);
    return e;
}

static int c_host_unmap(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    int first = MS_OK;
    for (size_t i = 0; i < n; i++) {
        CUresult r = g->api->cuMemUnmap((CUdeviceptr)c[i].va, c[i].bytes);
        if (r != CUDA_SUCCESS && first == MS_OK)
            first = hfail(g, "cuMemUnmap", r);
    }
    return first;
}

static int c_host_map(void *impl, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].hchunk) {
            c_host_unmap(g, c, i);
            return MS_E_INVAL;
        }
        const char *call;
        CUresult r = map_at(g, (CUdeviceptr)c[i].va, c[i].bytes, hc_of(&c[i])->h, &call);
        if (r != CUDA_SUCCESS) {
            c_host_unmap(g, c, i);
            return hfail(g, call, r);
        }
    }
    return MS_OK;
}

int ms_gpu_cuda_host_reserve(struct ms_gpu_cuda *g, uint64_t bytes, uint32_t want, bool *made)
{
    *made = false;
    if (!bytes || bytes % MS_GRAN)
        return MS_E_INVAL;
    pthread_mutex_lock(&g->hmu);
    uint32_t have = 0;
    for (size_t i = 0; i < g->nhpool && have < want; i++)
        have += g->hpool[i]->bytes == bytes;
    bool over =
        g->host_limit && g->hst.live_bytes + g->hpooled_bytes + g->hpending + bytes > g->host_limit;
    bool go = have < want && !over;
    if (go)
        g->hpending += bytes;
    pthread_mutex_unlock(&g->hmu);
    if (have >= want)
        return MS_OK;
    if (over)
        return MS_E_NOSPACE;
    struct hchunk *hc = NULL;
    int e = hchunk_create_new(g, bytes, false, &hc);
    pthread_mutex_lock(&g->hmu);
    g->hpending -= bytes;
    if (e == MS_OK && hpool_push(g, hc)) {
        g->hst.reserved++;
        g->hst.reserved_bytes += bytes;
        *made = true;
        hc = NULL;
    } else if (e == MS_OK) {
        e = MS_E_NOMEM;
    }
    pthread_mutex_unlock(&g->hmu);
    if (hc)
        hchunk_destroy(g, hc);
    return e;
}

void ms_gpu_cuda_set_host_limit(struct ms_gpu_cuda *g, uint64_t bytes)
{
    pthread_mutex_lock(&g->hmu);
    g->host_limit = bytes;
    pthread_mutex_unlock(&g->hmu);
}

void ms_gpu_cuda_set_host_pool(struct ms_gpu_cuda *g, uint64_t bytes)
{
    pthread_mutex_lock(&g->hmu);
    g->hpool_limit = bytes;
    pthread_mutex_unlock(&g->hmu);
}

int ms_gpu_cuda_host_trim(struct ms_gpu_cuda *g, uint64_t idle_ns, uint64_t *freed)
{
    *freed = 0;
    uint64_t now = c_now(g);
    pthread_mutex_lock(&g->hmu);
    size_t old = g->nhpool;
    for (size_t i = 0; i < g->nhpool; i++)
        if (now - g->hpool[i]->pooled_ns >= idle_ns &&
            (old == g->nhpool || g->hpool[i]->pooled_ns < g->hpool[old]->pooled_ns))
            old = i;
    struct hchunk *hc = NULL;
    if (old < g->nhpool) {
        hc = g->hpool[old];
        g->hpool[old] = g->hpool[--g->nhpool];
        g->hpooled_bytes -= hc->bytes;
        g->hst.trimmed++;
        g->hst.trimmed_bytes += hc->bytes;
    }
    pthread_mutex_unlock(&g->hmu);
    if (!hc)
        return MS_OK;
    *freed = hc->bytes;
    hchunk_destroy(g, hc);
    return MS_OK;
}

const char *ms_gpu_cuda_host_error(struct ms_gpu_cuda *g)
{
    pthread_mutex_lock(&g->hmu);
    snprintf(g->herr_copy, sizeof(g->herr_copy), "%s", g->herr);
    pthread_mutex_unlock(&g->hmu);
    return g->herr_copy;
}

void ms_gpu_cuda_host_stats(struct ms_gpu_cuda *g, struct ms_gpu_cuda_host_stats *out)
{
    pthread_mutex_lock(&g->hmu);
    *out = g->hst;
    out->pooled_bytes = g->hpooled_bytes;
    out->limit = g->host_limit;
    pthread_mutex_unlock(&g->hmu);
}

static int c_copy(void *impl, enum ms_stream s, const struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    for (size_t i = 0; i < n; i++) {
        if (c[i].hchunk) {
            const struct hchunk *hc = (const struct hchunk *)(uintptr_t)c[i].hchunk;
            CUdeviceptr va = (CUdeviceptr)c[i].va;
            CK(g, "cuMemcpyDtoDAsync",
               g->api->cuMemcpyDtoDAsync(s == MS_STREAM_OUT ? hc->shadow : va,
                                         s == MS_STREAM_OUT ? va : hc->shadow, c[i].bytes,
                                         g->stream[s]));
            continue;
        }
        if (!c[i].host)
            return MS_E_INVAL;
        if (s == MS_STREAM_OUT)
            CK(g, "cuMemcpyDtoHAsync",
               g->api->cuMemcpyDtoHAsync(c[i].host, (CUdeviceptr)c[i].va, c[i].bytes,
                                         g->stream[s]));
        else
            CK(g, "cuMemcpyHtoDAsync",
               g->api->cuMemcpyHtoDAsync((CUdeviceptr)c[i].va, c[i].host, c[i].bytes,
                                         g->stream[s]));
    }
    return MS_OK;
}

static int c_record(void *impl, enum ms_stream s, uint64_t *out)
{
    struct ms_gpu_cuda *g = impl;
    CUevent ev;
    if (g->nfree_ev)
        ev = g->free_ev[--g->nfree_ev];
    else
        CK(g, "cuEventCreate", g->api->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUresult r = g->api->cuEventRecord(ev, g->stream[s]);
    if (r != CUDA_SUCCESS) {
        g->api->cuEventDestroy(ev);
        return fail(g, "cuEventRecord", r);
    }
    *out = (uint64_t)(uintptr_t)ev;
    return MS_OK;
}

static int c_wait(void *impl, uint64_t event)
{
    struct ms_gpu_cuda *g = impl;
    CK(g, "cuEventSynchronize", g->api->cuEventSynchronize((CUevent)(uintptr_t)event));
    return MS_OK;
}

static void c_release(void *impl, uint64_t event)
{
    struct ms_gpu_cuda *g = impl;
    CUevent ev = (CUevent)(uintptr_t)event;
    if (g->nfree_ev == g->capfree_ev) {
        size_t n = g->capfree_ev ? g->capfree_ev * 2 : 64;
        CUevent *p = realloc(g->free_ev, n * sizeof(*p));
        if (!p) {
            g->api->cuEventDestroy(ev);
            return;
        }
        g->free_ev = p;
        g->capfree_ev = n;
    }
    g->free_ev[g->nfree_ev++] = ev;
}

static int hash_reserve(struct ms_gpu_cuda *g, size_t n)
{
    if (n <= g->hcap)
        return MS_OK;
    size_t cap = g->hcap ? g->hcap : 256;
    while (cap < n)
        cap *= 2;
    CUdeviceptr d;
    void *h;
    CK(g, "cuMemAlloc", g->api->cuMemAlloc(&d, cap * 8));
    CUresult r = g->api->cuMemHostAlloc(&h, cap * 8, 0);
    if (r != CUDA_SUCCESS) {
        g->api->cuMemFree(d);
        return fail(g, "cuMemHostAlloc", r);
    }
    if (g->hout)
        g->api->cuMemFree(g->hout);
    if (g->hres)
        g->api->cuMemFreeHost(g->hres);
    g->hout = d;
    g->hres = h;
    g->hcap = cap;
    return MS_OK;
}

static int c_hash(void *impl, const struct ms_gpu_chunk *c, size_t n, uint64_t *out)
{
    struct ms_gpu_cuda *g = impl;
    int e = hash_reserve(g, n);
    if (e)
        return e;
    CK(g, "cuMemsetD32Async", g->api->cuMemsetD32Async(g->hout, 0, 2 * n, g->hstream));
    for (size_t i = 0; i < n; i++) {
        unsigned long long words = c[i].bytes / 8;
        CUdeviceptr p = (CUdeviceptr)c[i].va, slot = g->hout + 8 * i;
        void *args[] = {&p, &words, &slot};
        CK(g, "cuLaunchKernel",
           g->api->cuLaunchKernel(g->hfn, 264, 1, 1, 512, 1, 1, 0, g->hstream, args, NULL));
    }
    CK(g, "cuMemcpyDtoHAsync", g->api->cuMemcpyDtoHAsync(g->hres, g->hout, 8 * n, g->hstream));
    CK(g, "cuStreamSynchronize", g->api->cuStreamSynchronize(g->hstream));
    for (size_t i = 0; i < n; i++)
        out[i] = g->hres[i] ? g->hres[i] : 1;
    return MS_OK;
}

static int c_info(void *impl, struct ms_gpu_info *out)
{
    struct ms_gpu_cuda *g = impl;
    size_t fr = 0, tot = 0;
    CK(g, "cuMemGetInfo", g->api->cuMemGetInfo(&fr, &tot));
    out->free_bytes = fr;
    out->total_bytes = tot;
    return MS_OK;
}

static uint64_t c_now(void *impl)
{
    (void)impl;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ms_gpu_cuda_new(const struct ms_cuda_api *api, const char *hash_ptx, uint64_t pool_limit,
                    struct ms_gpu_cuda **out)
{
    struct ms_gpu_cuda *g = calloc(1, sizeof(*g));
    if (!g)
        return MS_E_NOMEM;
    g->api = api;
    g->pool_limit = pool_limit;
    g->hpool_limit = pool_limit;
    pthread_mutex_init(&g->hmu, NULL);
    int e = MS_OK;
    CUresult r = api->cuCtxGetDevice(&g->dev);
    if (r != CUDA_SUCCESS)
        e = fail(g, "cuCtxGetDevice", r);
    for (int s = 0; s < 2 && e == MS_OK; s++) {
        r = api->cuStreamCreate(&g->stream[s], CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS)
            e = fail(g, "cuStreamCreate", r);
    }
    if (e == MS_OK && hash_ptx) {
        /* Without the hash kernel the seam still works: it reports no hash (ops->hash NULL)
         * and every dirty eviction is copied. The reason stays in last_err. */
        r = api->cuStreamCreate(&g->hstream, CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS)
            r = api->cuModuleLoadData(&g->hmod, hash_ptx);
        if (r == CUDA_SUCCESS)
            r = api->cuModuleGetFunction(&g->hfn, g->hmod, "ms_hash64");
        if (r != CUDA_SUCCESS || hash_reserve(g, 256) != MS_OK) {
            if (r != CUDA_SUCCESS)
                fail(g, "hash kernel setup", r);
            g->hfn = NULL;
        }
    }
    g->ops = (struct ms_gpu_ops){
        .name = "cuda",
        .impl = g,
        .map = c_map,
        .unmap = c_unmap,
        .copy = c_copy,
        .record = c_record,
        .wait = c_wait,
        .release_event = c_release,
        .hash = g->hfn ? c_hash : NULL,
        .info = c_info,
        .now_ns = c_now,
        .host_new = c_host_new,
        .host_free = c_host_free,
        .host_map = c_host_map,
        .host_unmap = c_host_unmap,
    };
    if (e != MS_OK) {
        ms_gpu_cuda_free(g);
        return e;
    }
    *out = g;
    return MS_OK;
}

/* ---- unified memory ------------------------------------------------------------------------ */

/* Prefetch each chunk to the host (OUT) or to the device (IN) on that direction's stream. */
static int u_prefetch(struct ms_gpu_cuda *g, enum ms_stream s, const struct ms_gpu_chunk *c,
                      size_t n)
{
    CUmemLocation loc;
    memset(&loc, 0, sizeof(loc));
    loc.type = s == MS_STREAM_OUT ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = s == MS_STREAM_OUT ? 0 : g->dev;
    for (size_t i = 0; i < n; i++)
        CK(g, "cuMemPrefetchAsync",
           g->api->cuMemPrefetchAsync((CUdeviceptr)c[i].va, c[i].bytes, loc, 0, g->stream[s]));
    return MS_OK;
}

/*
 * Managed memory is always mapped: "map" is where the pages are brought to the device (a
 * prefetch on the IN stream, before the executor records its event there), for never-written
 * chunks too, so a first touch does not fault; with `demand`, nothing (the GPU's faults do it).
 */
static int u_map(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    struct ms_gpu_cuda *g = impl;
    int e = g->demand ? MS_OK : u_prefetch(g, MS_STREAM_IN, c, n);
    for (size_t i = 0; e == MS_OK && i < n; i++)
        c[i].phys = 1; /* no handle to hold */
    return e;
}

static int u_unmap(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    (void)impl;
    (void)c;
    (void)n;
    return MS_OK;
}

/* OUT: the eviction itself (the data moves to the host). IN: already queued by u_map. */
static int u_copy(void *impl, enum ms_stream s, const struct ms_gpu_chunk *c, size_t n)
{
    return s == MS_STREAM_OUT ? u_prefetch(impl, s, c, n) : MS_OK;
}

int ms_gpu_cuda_new_unified(const struct ms_cuda_api *api, bool demand, struct ms_gpu_cuda **out)
{
    if (!api->cuMemPrefetchAsync || !api->cuMemAllocManaged)
        return MS_E_NOTFOUND;
    struct ms_gpu_cuda *g;
    int e = ms_gpu_cuda_new(api, NULL, 0, &g);
    if (e)
        return e;
    g->demand = demand;
    g->ops.name = demand ? "cuda-demand" : "cuda-unified";
    g->ops.map = u_map;
    g->ops.unmap = u_unmap;
    g->ops.copy = u_copy;
    g->ops.hash = NULL;
    g->ops.copy_to_evict = true;
    g->ops.host_new = NULL;
    g->ops.host_free = NULL;
    g->ops.host_map = NULL;
    g->ops.host_unmap = NULL;
    *out = g;
    return MS_OK;
}

void ms_gpu_cuda_free(struct ms_gpu_cuda *g)
{
    if (!g)
        return;
    const struct ms_cuda_api *api = g->api;
    for (int s = 0; s < 2; s++)
        if (g->stream[s]) {
            api->cuStreamSynchronize(g->stream[s]);
            api->cuStreamDestroy(g->stream[s]);
        }
    if (g->hstream)
        api->cuStreamDestroy(g->hstream);
    if (g->hout)
        api->cuMemFree(g->hout);
    if (g->hres)
        api->cuMemFreeHost(g->hres);
    if (g->hmod)
        api->cuModuleUnload(g->hmod);
    for (size_t i = 0; i < g->nfree_ev; i++)
        api->cuEventDestroy(g->free_ev[i]);
    free(g->free_ev);
    pool_drain(g);
    free(g->pool);
    hpool_drain(g);
    pthread_mutex_destroy(&g->hmu);
    free(g);
}

const struct ms_gpu_ops *ms_gpu_cuda_ops(struct ms_gpu_cuda *g)
{
    return &g->ops;
}
const char *ms_gpu_cuda_last_error(const struct ms_gpu_cuda *g)
{
    return g->last_err;
}
uint64_t ms_gpu_cuda_pooled(const struct ms_gpu_cuda *g)
{
    return g->pooled_bytes;
}
