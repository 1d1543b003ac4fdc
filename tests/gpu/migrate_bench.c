/*
 * migrate_bench.c - evict, populate and swap real device memory through the core's planner and
 * executor on the CUDA seam, checking every byte; the real-GPU end-to-end slice and the
 * migration benchmark.
 *
 * Usage: migrate_bench --ptx DIR [--gib N[,N...]] [--chunk-mib M[,M...]] [--amap]
 *   DIR holds kernels.ptx (fill/check) and hash.ptx (the seam's GPU hash).
 *   --amap: the regions are always mapped, as the engine's allocations are: no host backing
 *   store; every chunk starts on a host chunk of its own size (pinned host memory as a VMM
 *   handle, ms_exec_map_host: its time is `host_chunks_s`), and eviction and population swap
 *   the chunk's address between its device memory and its host chunk. Step 10 does not apply
 *   (its no-op mapping cannot swap a host chunk), so `premapped_swap_gbps` and `map_delay` are
 *   null. This is the measure behind the engine's chunk size (docs/engine.md).
 *
 * For each size N and chunk size M: two regions A and B of N GiB each (reserved VA, host backing
 * pinned once with cuMemHostAlloc), a budget of N GiB, so only one fits:
 *   1. B: map fresh, fill (seed 1), evict (dirty copy out)          -> B lives on the host
 *   2. A: map fresh, fill (seed 2)
 *   3. evict-only: evict A (dirty)                                  -> GB/s
 *   4. populate-only: populate A, check seed 2                      -> GB/s, mismatches
 *   5. refill A (seed 3); swap: plan B in (OPT evicts A), pipelined -> GB/s both ways, check B
 *   6. swap back (A in, B out), check A seed 3
 *   7. clean eviction: A was populated and not changed: evict it    -> dropped, vs step 3
 *   8. pipelined swap without hashing (A back in, A dirty, B in)    -> the pipeline alone
 *   9. unpipelined swap B in / A out                                -> the pipeline's gain
 *  10. the swap of step 8 again (B dirty out, A in, no hashing) with A's chunks mapped
 *      beforehand and map/unmap turned into no-ops: the same copies, pipeline and budget
 *      waits without any mapping work                                -> premapped GB/s
 * Map/unmap time is measured two ways: the CPU time spent in the seam's map and unmap calls
 * (map_frac: a share of the transfer's wall time; the calls overlap the copies), and what the
 * mapping work delays the transfer (map_delay = t(step 8) / t(step 10) - 1).
 * One JSON object per (N, M) on stdout; progress on stderr. Exit 1 on any mismatch or error.
 * Never uses managed memory; sizes stay far below the card (2N GiB device-reserved VA, N GiB
 * physical).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/exec.h"
#include "core/plan.h"
#include "gpu/cuda/gpu_cuda.h"

static struct ms_cuda_api api;
static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuCtxSynchronize)(void);
static CUfunction f_fill, f_check;

/* Timing wrapper around the seam's map/unmap. */
static const struct ms_gpu_ops *inner;
static uint64_t map_ns;
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Step 10: when premap_tok is set, map hands out the token premapped for the chunk's address
 * (chunks of premap_chunk bytes from premap_base) and unmap does nothing. */
static uint64_t *premap_tok, premap_base, premap_chunk;
static int t_map(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    if (premap_tok) {
        for (size_t i = 0; i < n; i++)
            c[i].phys = premap_tok[(c[i].va - premap_base) / premap_chunk];
        return MS_OK;
    }
    uint64_t t = now_ns();
    int e = inner->map(impl, c, n);
    map_ns += now_ns() - t;
    return e;
}
static int t_unmap(void *impl, struct ms_gpu_chunk *c, size_t n)
{
    if (premap_tok)
        return MS_OK;
    uint64_t t = now_ns();
    int e = inner->unmap(impl, c, n);
    map_ns += now_ns() - t;
    return e;
}

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "migrate_bench: " __VA_ARGS__);                                            \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static char *read_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        DIE("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        DIE("cannot read %s", path);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void launch(CUfunction fn, CUdeviceptr p, uint64_t bytes, uint64_t seed, CUdeviceptr bad)
{
    unsigned long long n = bytes / 8, s = seed;
    void *args4[] = {&p, &n, &s, &bad};
    CUresult r = api.cuLaunchKernel(fn, 528, 1, 1, 512, 1, 1, 0, NULL, args4, NULL);
    if (r != CUDA_SUCCESS)
        DIE("launch failed: %d", (int)r);
    if (p_cuCtxSynchronize() != CUDA_SUCCESS)
        DIE("kernel failed");
}

static uint64_t check(CUdeviceptr p, uint64_t bytes, uint64_t seed, CUdeviceptr bad)
{
    unsigned long long zero = 0, got = 0;
    api.cuMemcpyHtoDAsync(bad, &zero, 8, NULL);
    launch(f_check, p, bytes, seed, bad);
    api.cuMemcpyDtoH(&got, bad, 8);
    return got;
}

struct bench {
    struct ms_rtable rt;
    struct ms_gpu_ops ops;
    uint32_t a, b;
    uint64_t bytes, budget;
};

static void region_set(struct bench *w, uint32_t reg, struct ms_chunk_set *s)
{
    ms_chunk_set_clear(s);
    struct ms_region *r = ms_region_get(&w->rt, reg);
    for (uint32_t k = 0; k < r->nchunks; k++)
        ms_chunk_set_add(s, MS_CHUNK_ID(reg, k));
}

/* Bring `in` resident with OPT (everything else has no future use) and return seconds. */
static double switch_to(struct bench *w, uint32_t in, bool pipelined, bool hash,
                        struct ms_exec_stats *st)
{
    struct ms_chunk_set ws[1];
    ms_chunk_set_init(&ws[0]);
    region_set(w, in, &ws[0]);
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_plan_input pi = {
        .rt = &w->rt, .budget = w->budget, .ws = ws, .nws = 1, .policy = MS_EVICT_OPT};
    int e = ms_plan_build(&pi, &p);
    if (e)
        DIE("plan: %s", ms_strerror(e));
    struct ms_exec_opts o = {.pipelined = pipelined, .hash_clean = hash};
    memset(st, 0, sizeof(*st));
    map_ns = 0;
    uint64_t t = now_ns();
    e = ms_exec_plan(&w->rt, &w->ops, w->budget, &p, &o, st);
    double sec = (double)(now_ns() - t) / 1e9;
    if (e)
        DIE("exec: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(w->ops.impl));
    ms_plan_fini(&p);
    ms_chunk_set_fini(&ws[0]);
    return sec;
}

static double evict_all(struct bench *w, uint32_t reg, bool hash, struct ms_exec_stats *st)
{
    struct ms_plan p;
    ms_plan_init(&p);
    struct ms_region *r = ms_region_get(&w->rt, reg);
    for (uint32_t k = 0; k < r->nchunks; k++) {
        ms_grow((void **)&p.steps, &p.cap, p.n + 1, sizeof(*p.steps));
        p.steps[p.n++] = (struct ms_plan_step){MS_STEP_EVICT, MS_CHUNK_ID(reg, k)};
    }
    struct ms_exec_opts o = {.pipelined = true, .hash_clean = hash};
    memset(st, 0, sizeof(*st));
    map_ns = 0;
    uint64_t t = now_ns();
    int e = ms_exec_plan(&w->rt, &w->ops, w->budget, &p, &o, st);
    double sec = (double)(now_ns() - t) / 1e9;
    if (e)
        DIE("evict: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(w->ops.impl));
    ms_plan_fini(&p);
    return sec;
}

static void touch_all(struct bench *w, uint32_t reg)
{
    struct ms_region *r = ms_region_get(&w->rt, reg);
    for (uint32_t k = 0; k < r->nchunks; k++)
        ms_chunk_apply(&w->rt, MS_CHUNK_ID(reg, k), MS_CE_TOUCH);
}

static void run_one(struct ms_gpu_cuda *g, uint64_t gib, uint64_t chunk_mib, bool amap,
                    CUdeviceptr bad)
{
    struct bench w;
    memset(&w, 0, sizeof(w));
    ms_rtable_init(&w.rt);
    inner = ms_gpu_cuda_ops(g);
    w.ops = *inner;
    w.ops.map = t_map;
    w.ops.unmap = t_unmap;
    w.bytes = gib * MS_GIB;
    w.budget = w.bytes;
    CUdeviceptr va[2];
    void *host[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        if (api.cuMemAddressReserve(&va[i], w.bytes, 0, 0, 0) != CUDA_SUCCESS)
            DIE("reserve failed");
        if (amap)
            continue;
        uint64_t t = now_ns();
        if (p_cuMemHostAlloc(&host[i], w.bytes, 0) != CUDA_SUCCESS)
            DIE("cuMemHostAlloc(%llu GiB) failed", (unsigned long long)gib);
        fprintf(stderr, "  pinned %llu GiB host backing in %.2f s\n", (unsigned long long)gib,
                (double)(now_ns() - t) / 1e9);
    }
    uint32_t ids[2];
    double t_hostchunks = 0;
    struct ms_exec_stats st;
    for (int i = 0; i < 2; i++) {
        if (ms_region_add(&w.rt, 1, va[i], w.bytes, amap ? MS_RK_VMM : MS_RK_DEVICE,
                          chunk_mib * MS_MIB, &ids[i]))
            DIE("region_add");
        struct ms_region *r = ms_region_get(&w.rt, ids[i]);
        r->host = host[i];
        r->amap = amap;
        if (amap) {
            uint64_t t = now_ns();
            memset(&st, 0, sizeof(st));
            if (ms_exec_map_host(&w.rt, &w.ops, ids[i], &st))
                DIE("host chunks: %s", ms_gpu_cuda_last_error(w.ops.impl));
            t_hostchunks += (double)(now_ns() - t) / 1e9;
        }
    }
    if (amap)
        fprintf(stderr, "  made %llu GiB of host chunks in %.2f s\n", (unsigned long long)(2 * gib),
                t_hostchunks);
    w.a = ids[0];
    w.b = ids[1];
    uint64_t bad_total = 0;

    switch_to(&w, w.b, true, false, &st); /* fresh map (always mapped: populated) */
    launch(f_fill, va[1], w.bytes, 1, bad);
    touch_all(&w, w.b);
    evict_all(&w, w.b, false, &st);
    switch_to(&w, w.a, true, false, &st);
    launch(f_fill, va[0], w.bytes, 2, bad);
    touch_all(&w, w.a);

    double t_evict = evict_all(&w, w.a, false, &st);
    double map_evict = (double)map_ns / 1e9;
    uint64_t out_bytes = st.bytes_out;
    double t_pop = switch_to(&w, w.a, true, true, &st);
    double map_pop = (double)map_ns / 1e9;
    uint64_t in_bytes = st.bytes_in;
    bad_total += check(va[0], w.bytes, 2, bad);

    launch(f_fill, va[0], w.bytes, 3, bad);
    touch_all(&w, w.a);
    double t_swap = switch_to(&w, w.b, true, true, &st);
    double map_swap = (double)map_ns / 1e9;
    uint64_t swap_bytes = st.bytes_in + st.bytes_out;
    bad_total += check(va[1], w.bytes, 1, bad);
    double t_swap_back = switch_to(&w, w.a, true, true, &st);
    uint64_t swap_back_bytes = st.bytes_in + st.bytes_out;
    uint64_t dropped_back = st.bytes_dropped;
    bad_total += check(va[0], w.bytes, 3, bad);

    /* A is CLEAN now (populated, unchanged); touch it without changing it: hash finds it clean. */
    touch_all(&w, w.a);
    double t_clean = evict_all(&w, w.a, true, &st);
    uint64_t clean_dropped = st.bytes_dropped, clean_copied = st.bytes_out;

    /* Pipelined swap without any hashing: the pipeline alone. */
    switch_to(&w, w.a, true, false, &st);
    bad_total += check(va[0], w.bytes, 3, bad);
    touch_all(&w, w.a);
    double t_nohash = switch_to(&w, w.b, true, false, &st);
    uint64_t nohash_bytes = st.bytes_in + st.bytes_out;
    bad_total += check(va[1], w.bytes, 1, bad);

    /* Unpipelined swap (the ablation): bring A back (from host), then make A dirty, swap B in. */
    switch_to(&w, w.a, true, false, &st);
    bad_total += check(va[0], w.bytes, 3, bad);
    touch_all(&w, w.a);
    double t_serial = switch_to(&w, w.b, false, false, &st);
    uint64_t serial_bytes = st.bytes_in + st.bytes_out;
    bad_total += check(va[1], w.bytes, 1, bad);

    /* Step 10: the step 8 swap without mapping work (see the header); not always mapped. */
    double t_premapped = 0;
    uint64_t premapped_bytes = 0;
    if (!amap) {
        touch_all(&w, w.b);
        struct ms_region *ra = ms_region_get(&w.rt, w.a), *rb = ms_region_get(&w.rt, w.b);
        size_t nc = ra->nchunks;
        struct ms_gpu_chunk *da = calloc(nc, sizeof(*da)), *db = calloc(rb->nchunks, sizeof(*db));
        uint64_t *tok = calloc(nc, sizeof(*tok));
        if (!da || !db || !tok)
            DIE("out of memory");
        for (uint32_t k = 0; k < nc; k++)
            da[k] = (struct ms_gpu_chunk){.va = ra->base + ms_region_chunk_offset(ra, k),
                                          .bytes = ra->chunks[k].bytes};
        for (uint32_t k = 0; k < rb->nchunks; k++)
            db[k] = (struct ms_gpu_chunk){.va = rb->base + ms_region_chunk_offset(rb, k),
                                          .bytes = rb->chunks[k].bytes,
                                          .phys = rb->chunks[k].phys};
        if (inner->map(inner->impl, da, nc))
            DIE("premap: %s", ms_gpu_cuda_last_error(inner->impl));
        for (size_t k = 0; k < nc; k++)
            tok[k] = da[k].phys;
        premap_base = ra->base;
        premap_chunk = chunk_mib * MS_MIB;
        premap_tok = tok;
        t_premapped = switch_to(&w, w.a, true, false, &st);
        premapped_bytes = st.bytes_in + st.bytes_out;
        premap_tok = NULL;
        if (inner->unmap(inner->impl, db, rb->nchunks)) /* B's memory, kept mapped by the no-op */
            DIE("unmap B: %s", ms_gpu_cuda_last_error(inner->impl));
        bad_total += check(va[0], w.bytes, 3, bad);
        free(da);
        free(db);
        free(tok);
    }
    char premapped[32] = "null", delay[32] = "null";
    if (!amap) {
        snprintf(premapped, sizeof(premapped), "%.2f", premapped_bytes / t_premapped / 1e9);
        snprintf(delay, sizeof(delay), "%.3f", t_nohash / t_premapped - 1);
    }

    printf("{\"gib\": %llu, \"chunk_mib\": %llu, \"amap\": %s, \"host_chunks_s\": %.3f, "
           "\"evict_gbps\": %.2f, \"evict_map_frac\": %.3f, "
           "\"populate_gbps\": %.2f, \"populate_map_frac\": %.3f, \"swap_gbps\": %.2f, "
           "\"swap_map_frac\": %.3f, \"swap_back_gbps\": %.2f, \"swap_back_dropped\": %llu, "
           "\"clean_evict_s\": %.5f, \"dirty_evict_s\": %.5f, \"clean_speedup\": %.1f, "
           "\"clean_dropped\": %llu, \"clean_copied\": %llu, \"swap_nohash_gbps\": %.2f, "
           "\"serial_swap_gbps\": %.2f, \"premapped_swap_gbps\": %s, \"map_delay\": %s, "
           "\"mismatches\": %llu}\n",
           (unsigned long long)gib, (unsigned long long)chunk_mib, amap ? "true" : "false",
           t_hostchunks, out_bytes / t_evict / 1e9, map_evict / t_evict, in_bytes / t_pop / 1e9,
           map_pop / t_pop, swap_bytes / t_swap / 1e9, map_swap / t_swap,
           swap_back_bytes / t_swap_back / 1e9, (unsigned long long)dropped_back, t_clean, t_evict,
           t_evict / t_clean, (unsigned long long)clean_dropped, (unsigned long long)clean_copied,
           nohash_bytes / t_nohash / 1e9, serial_bytes / t_serial / 1e9, premapped, delay,
           (unsigned long long)bad_total);
    fflush(stdout);

    /* Tear down: unmap whatever is resident, free VA and host memory. */
    for (int i = 0; i < 2; i++) {
        if (ms_exec_free_region(&w.rt, &w.ops, ids[i]))
            DIE("free_region");
        api.cuMemAddressFree(va[i], w.bytes);
        if (host[i])
            p_cuMemFreeHost(host[i]);
    }
    ms_rtable_fini(&w.rt);
    if (bad_total)
        DIE("%llu mismatching words", (unsigned long long)bad_total);
}

static int parse_list(const char *s, uint64_t *v, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        v[n++] = strtoull(s, &end, 10);
        if (end == s)
            return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    uint64_t gibs[8] = {1}, chunks[8] = {64};
    int ngib = 1, nchunk = 1;
    bool amap = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ptx") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            ngib = parse_list(argv[++i], gibs, 8);
        else if (!strcmp(argv[i], "--chunk-mib") && i + 1 < argc)
            nchunk = parse_list(argv[++i], chunks, 8);
        else if (!strcmp(argv[i], "--amap"))
            amap = true;
        else
            DIE("usage: migrate_bench --ptx DIR [--gib N,..] [--chunk-mib M,..] [--amap]");
    }
    if (!dir || ngib <= 0 || nchunk <= 0)
        DIE("usage: migrate_bench --ptx DIR [--gib N,..] [--chunk-mib M,..] [--amap]");
    for (int j = 0; j < nchunk; j++)
        if (!chunks[j] || chunks[j] % 2)
            DIE("--chunk-mib: %llu is not a positive multiple of 2", (unsigned long long)chunks[j]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        DIE("dlopen libcuda.so.1: %s", dlerror());
    const char *missing = NULL;
    if (ms_cuda_api_load(&api, h, &missing))
        DIE("libcuda lacks %s", missing);
    *(void **)&p_cuInit = dlsym(h, "cuInit");
    *(void **)&p_cuDeviceGet = dlsym(h, "cuDeviceGet");
    *(void **)&p_cuDevicePrimaryCtxRetain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&p_cuCtxSetCurrent = dlsym(h, "cuCtxSetCurrent");
    *(void **)&p_cuMemHostAlloc = dlsym(h, "cuMemHostAlloc");
    *(void **)&p_cuMemFreeHost = dlsym(h, "cuMemFreeHost");
    *(void **)&p_cuCtxSynchronize = dlsym(h, "cuCtxSynchronize");
    CUdevice dev;
    CUcontext ctx;
    if (p_cuInit(0) || p_cuDeviceGet(&dev, 0) || p_cuDevicePrimaryCtxRetain(&ctx, dev) ||
        p_cuCtxSetCurrent(ctx))
        DIE("CUDA init failed");
    char *kptx = read_file(dir, "kernels.ptx"), *hptx = read_file(dir, "hash.ptx");
    CUmodule mod;
    if (api.cuModuleLoadData(&mod, kptx) || api.cuModuleGetFunction(&f_fill, mod, "ms_fill") ||
        api.cuModuleGetFunction(&f_check, mod, "ms_check"))
        DIE("loading kernels.ptx failed");
    struct ms_gpu_cuda *g;
    int e = ms_gpu_cuda_new(&api, hptx, 512 * MS_MIB, &g);
    if (e)
        DIE("seam: %s", ms_strerror(e));
    CUdeviceptr bad;
    if (api.cuMemAlloc(&bad, 8))
        DIE("alloc");
    for (int i = 0; i < ngib; i++)
        for (int j = 0; j < nchunk; j++) {
            fprintf(stderr, "migrate_bench: %llu GiB in %llu MiB chunks%s\n",
                    (unsigned long long)gibs[i], (unsigned long long)chunks[j],
                    amap ? ", always mapped" : "");
            run_one(g, gibs[i], chunks[j], amap, bad);
        }
    api.cuMemFree(bad);
    ms_gpu_cuda_free(g);
    free(kptx);
    free(hptx);
    return 0;
}
