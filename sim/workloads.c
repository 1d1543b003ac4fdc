/*
 * workloads.c - the built-in workloads (the MSched paper's combinations) and random ones.
 *
 * Design
 *   Each generator turns (pressure, budget, cost profile) into tasks, regions and one loop of
 *   commands per task. Pressure scales the footprint the way the paper does (msched-paper.md
 *   §4.3): problem size for micro and A, batch size for B and C, number of instances for D.
 *   Kernel durations come from the profile: memory-bound kernels move their bytes at
 *   MEM_EFF x hbm_gbps, compute-bound ones run their FLOPs at FLOP_EFF x tflops; the LLM decode
 *   step is the paper's measured 12.7 ms on the RTX 5080, scaled by HBM bandwidth for other
 *   profiles. Every figure and its source is in docs/workloads.md; change both together.
 *
 *   Kernel arguments are 8-byte words: region base addresses (what the predictor finds) and
 *   plain integers (sizes), laid out the way a CUDA kernel's parameter buffer would be.
 *
 * Invariants: the generators are pure functions of their spec (same spec, same workload).
 */
#include "sim/workload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9
#define MEM_EFF 0.70  /* fraction of the profile's HBM bandwidth memory-bound kernels reach */
#define FLOP_EFF 0.60 /* fraction of the profile's dense FLOP rate compute-bound kernels reach */

/* The paper's LLM (msched-paper.md §1.2): Llama3-8B int8 in llama.cpp on the RTX 5080. */
#define LLM_WEIGHTS (7.6 * GB)
#define LLM_KV (0.5 * GB)
#define LLM_ACT (0.3 * GB)
#define LLM_INSTANCE (8.5 * GB)
#define LLM_OTHER (LLM_INSTANCE - LLM_WEIGHTS - LLM_KV - LLM_ACT) /* 0.1 GB: logits, scratch */
#define LLM_LAYERS 32
#define LLM_HEAD_BYTES (128256.0 * 4096.0 * 34.0 / 32.0) /* output matrix in q8_0 */
#define LLM_STEP_NS 12.7e6                               /* decode step on the RTX 5080 */

static const struct ms_wl_info builtins[] = {
    {"micro", "2 vector-add (memory-bound) + 2 matmul (compute-bound) tasks, equal footprints"},
    {"A", "scientific: hotspot, dwt2d, cfd, nn (Rodinia-like), problem size scales"},
    {"B", "multi-DNN inference: ResNet152, VGG19, InceptionV3, DenseNet201, batch scales"},
    {"C", "hybrid: B + one Llama3-8B int8 decoder, batch scales"},
    {"D", "multi-LLM: Llama3-8B int8 decoders of 8.5 GB, instance count scales"},
    {"random", "random regions and kernels (tests); --seed picks it"},
};

const struct ms_wl_info *ms_wl_builtins(size_t *out_n)
{
    *out_n = MS_ARRAY_LEN(builtins);
    return builtins;
}

uint64_t ms_wl_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct gen {
    struct ms_workload *w;
    const struct ms_cost *cost;
    int rc;
};

static uint64_t round_bytes(double b)
{
    if (b < (double)MS_GRAN)
        return MS_GRAN;
    return MS_ROUND_UP((uint64_t)b, MS_GRAN);
}

static uint64_t mem_ns(const struct gen *g, double bytes)
{
    return (uint64_t)llround(bytes / (g->cost->hbm_gbps * MEM_EFF));
}

static uint64_t flop_ns(const struct gen *g, double flops)
{
    return (uint64_t)llround(flops / (g->cost->tflops * 1e3 * FLOP_EFF));
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint32_t task(struct gen *g, const char *name)
{
    uint32_t t = 0;
    if (!g->rc)
        g->rc = ms_wl_add_task(g->w, name, (uint32_t)g->w->ntasks, 0, &t);
    return t;
}

static uint64_t region(struct gen *g, uint32_t t, double bytes, bool ro, const char *name)
{
    uint64_t base = 0;
    if (!g->rc)
        g->rc = ms_wl_add_region(g->w, t, round_bytes(bytes), ro, name, &base);
    return base;
}

static void kernel(struct gen *g, uint32_t t, const char *name, uint64_t dur, const uint64_t *args,
                   size_t nargs)
{
    if (!g->rc)
        g->rc = ms_wl_add_kernel(g->w, t, name, dur ? dur : 1, args, nargs);
}

/* dst/src: device addresses of the device sides (0 for host sides). */
static void copy(struct gen *g, uint32_t t, enum ms_copy_dir dir, uint64_t dst, uint64_t src,
                 uint64_t bytes)
{
    if (g->rc)
        return;
    uint64_t dur;
    if (dir == MS_COPY_D2D) {
        dur = mem_ns(g, 2.0 * (double)bytes);
    } else {
        double bw = dir == MS_COPY_H2D ? g->cost->h2d_gbps : g->cost->d2h_gbps;
        dur = (uint64_t)llround((double)bytes / bw + g->cost->copy_call_us * 1e3);
    }
    g->rc = ms_wl_add_copy(g->w, t, dur, dir, dst, src, bytes);
}

/* ---- micro --------------------------------------------------------------------------------- */

static void gen_micro(struct gen *g, double per_task)
{
    for (int v = 0; v < 2; v++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "vadd%d", v);
        uint32_t t = task(g, nm);
        double third = per_task / 3;
        uint64_t a = region(g, t, third, true, "a");
        uint64_t b = region(g, t, third, true, "b");
        uint64_t c = region(g, t, third, false, "c");
        uint64_t n = round_bytes(third) / 4;
        uint64_t args[] = {a, b, c, n};
        kernel(g, t, "vector_add", mem_ns(g, 3.0 * (double)round_bytes(third)), args, 4);
    }
    const double dim = 8192, mat = dim * dim * 4; /* fp32 8192 x 8192: 256 MiB */
    long groups = lround(per_task / (3 * mat));
    if (groups < 1)
        groups = 1;
    for (int m = 0; m < 2; m++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "matmul%d", m);
        uint32_t t = task(g, nm);
        for (long i = 0; i < groups && !g->rc; i++) {
            char rn[3][24];
            snprintf(rn[0], sizeof(rn[0]), "A%ld", i);
            snprintf(rn[1], sizeof(rn[1]), "B%ld", i);
            snprintf(rn[2], sizeof(rn[2]), "C%ld", i);
            uint64_t a = region(g, t, mat, true, rn[0]);
            uint64_t b = region(g, t, mat, true, rn[1]);
            uint64_t c = region(g, t, mat, false, rn[2]);
            uint64_t args[] = {a, b, c, (uint64_t)dim, (uint64_t)dim, (uint64_t)dim};
            uint64_t dur = max_u64(flop_ns(g, 2 * dim * dim * dim), mem_ns(g, 3 * mat));
            kernel(g, t, "matmul", dur, args, 6);
        }
    }
    snprintf(g->w->desc, sizeof(g->w->desc),
             "micro: 2 vector-add + 2 matmul (%ld x 8192^2 fp32 triples) tasks", groups);
}

/* ---- A: scientific ------------------------------------------------------------------------- */

static void gen_hotspot(struct gen *g, double f)
{
    uint32_t t = task(g, "hotspot");
    double grid = f / 3;
    uint64_t power = region(g, t, grid, true, "power");
    uint64_t t0 = region(g, t, grid, false, "temp0");
    uint64_t t1 = region(g, t, grid, false, "temp1");
    double cells = grid / 4;
    /* pyramid height 2: one pass over the three grids computes two time steps */
    uint64_t dur = max_u64(mem_ns(g, 3 * grid), flop_ns(g, cells * 2 * 15));
    uint64_t a1[] = {power, t0, t1, (uint64_t)sqrt(cells), 2};
    uint64_t a2[] = {power, t1, t0, (uint64_t)sqrt(cells), 2};
    kernel(g, t, "calculate_temp", dur, a1, 5);
    kernel(g, t, "calculate_temp", dur, a2, 5);
}

static void gen_dwt2d(struct gen *g, double f)
{
    uint32_t t = task(g, "dwt2d");
    double px = f / 27; /* rgb input 3 B + 3 float components 12 B + 3 float outputs 12 B */
    uint64_t in = region(g, t, 3 * px, true, "image");
    uint64_t comp[3], out[3];
    const char *cn[3] = {"c_r", "c_g", "c_b"}, *on[3] = {"o_r", "o_g", "o_b"};
    for (int i = 0; i < 3; i++) {
        comp[i] = region(g, t, 4 * px, false, cn[i]);
        out[i] = region(g, t, 4 * px, false, on[i]);
    }
    uint64_t a0[] = {in, comp[0], comp[1], comp[2], (uint64_t)px};
    kernel(g, t, "c_CopySrcToComponents", mem_ns(g, 15 * px), a0, 5);
    for (int c = 0; c < 3; c++) {
        double lv = px;
        for (int l = 0; l < 3; l++) { /* three levels, each a quarter of the previous */
            uint64_t a[] = {comp[c], out[c], (uint64_t)lv, (uint64_t)l};
            kernel(g, t, "fdwt97", max_u64(mem_ns(g, 8 * lv), flop_ns(g, 40 * lv)), a, 4);
            lv /= 4;
        }
    }
}

static void gen_cfd(struct gen *g, double f)
{
    uint32_t t = task(g, "cfd");
    double cells = f / 132; /* bytes per cell, see docs/workloads.md */
    uint64_t vars = region(g, t, 20 * cells, false, "variables");
    uint64_t old = region(g, t, 20 * cells, false, "old_variables");
    uint64_t flux = region(g, t, 20 * cells, false, "fluxes");
    uint64_t sf = region(g, t, 4 * cells, false, "step_factors");
    uint64_t areas = region(g, t, 4 * cells, true, "areas");
    uint64_t elem = region(g, t, 16 * cells, true, "elements_surrounding");
    uint64_t norm = region(g, t, 48 * cells, true, "normals");
    uint64_t nel = (uint64_t)cells;
    copy(g, t, MS_COPY_D2D, old, vars, round_bytes(20 * cells));
    for (int rk = 0; rk < 3; rk++) {
        uint64_t a1[] = {nel, vars, areas, sf};
        kernel(g, t, "compute_step_factor", mem_ns(g, 28 * cells), a1, 4);
        uint64_t a2[] = {nel, elem, norm, vars, flux};
        /* four neighbours' variables are gathered: 4 x 20 B more per cell, ~150 flops */
        kernel(g, t, "compute_flux",
               max_u64(mem_ns(g, (16 + 48 + 20 + 80 + 20) * cells), flop_ns(g, 150 * cells)), a2,
               5);
        uint64_t a3[] = {(uint64_t)rk, nel, old, vars, sf, flux};
        kernel(g, t, "time_step", mem_ns(g, 84 * cells), a3, 6);
    }
}

static void gen_nn(struct gen *g, double f)
{
    uint32_t t = task(g, "nn");
    double recs = f / 12; /* float2 location + float distance */
    uint64_t loc = region(g, t, 8 * recs, true, "locations");
    uint64_t dist = region(g, t, 4 * recs, false, "distances");
    uint64_t args[] = {loc, dist, (uint64_t)recs, 0x42213333ull /* lat, lng as floats */};
    kernel(g, t, "euclid", mem_ns(g, 12 * recs), args, 4);
    copy(g, t, MS_COPY_D2H, 0, dist, round_bytes(4 * recs));
}

/* ---- B, C: DNN inference and an LLM ------------------------------------------------------- */

struct dnn {
    const char *name;
    double params; /* parameters (fp32 weights) */
    double gmacs;  /* multiply-accumulates per sample, billions */
    int layers;    /* kernels per forward pass (layer groups) */
    double act;    /* largest activation tensor per sample, bytes (fp32) */
    double in;     /* input per sample, bytes */
};

static const struct dnn dnns[4] = {
    {"resnet152", 60.2e6, 11.5, 52, 64 * 112 * 112 * 4.0, 3 * 224 * 224 * 4.0},
    {"vgg19", 143.7e6, 19.6, 19, 64 * 224 * 224 * 4.0, 3 * 224 * 224 * 4.0},
    {"inceptionv3", 23.8e6, 5.7, 17, 64 * 147 * 147 * 4.0, 3 * 299 * 299 * 4.0},
    {"densenet201", 20.0e6, 4.3, 103, 256 * 56 * 56 * 4.0, 3 * 224 * 224 * 4.0},
};

/* One DNN inference task with footprint close to f (batch size scales the activations). */
static long gen_dnn(struct gen *g, const struct dnn *d, double f)
{
    uint32_t t = task(g, d->name);
    double w = d->params * 4;
    double per_sample = 2 * d->act + d->in + 1000 * 4; /* ping-pong activations, input, logits */
    long batch = (long)floor((f - w) / per_sample);
    if (batch < 1)
        batch = 1;
    uint64_t in = region(g, t, d->in * (double)batch, true, "input");
    uint64_t act[2];
    act[0] = region(g, t, d->act * (double)batch, false, "act0");
    act[1] = region(g, t, d->act * (double)batch, false, "act1");
    uint64_t out = region(g, t, 4000.0 * (double)batch, false, "logits");
    copy(g, t, MS_COPY_H2D, in, 0, round_bytes(d->in * (double)batch));
    double lw = w / d->layers;
    double lflops = 2 * d->gmacs * 1e9 * (double)batch / d->layers;
    for (int l = 0; l < d->layers && !g->rc; l++) {
        char rn[16];
        snprintf(rn, sizeof(rn), "w%d", l);
        uint64_t wl = region(g, t, lw, true, rn);
        uint64_t src = l == 0 ? in : act[(l + 1) % 2];
        uint64_t dst = l == d->layers - 1 ? out : act[l % 2];
        uint64_t args[] = {src, wl, dst, (uint64_t)batch};
        double bytes = lw + 2 * d->act * (double)batch;
        kernel(g, t, "layer", max_u64(flop_ns(g, lflops), mem_ns(g, bytes)), args, 4);
    }
    copy(g, t, MS_COPY_D2H, 0, out, round_bytes(4000.0 * (double)batch));
    return batch;
}

/* One llama.cpp-like decoder: batch sequences share the weights; KV and activations scale. */
static void gen_llm(struct gen *g, const char *name, long batch)
{
    uint32_t t = task(g, name);
    double head = LLM_HEAD_BYTES;
    double layer_w = (LLM_WEIGHTS - head) / LLM_LAYERS;
    double kv = LLM_KV * (double)batch / LLM_LAYERS;
    double act_b = LLM_ACT * (double)batch, other = LLM_OTHER * (double)batch;
    uint64_t act = region(g, t, act_b, false, "compute");
    uint64_t oth = region(g, t, other, false, "logits+scratch");
    uint64_t wl[LLM_LAYERS], kvl[LLM_LAYERS];
    for (int l = 0; l < LLM_LAYERS; l++) {
        char rn[16];
        snprintf(rn, sizeof(rn), "blk%d", l);
        wl[l] = region(g, t, layer_w, true, rn);
        snprintf(rn, sizeof(rn), "kv%d", l);
        kvl[l] = region(g, t, kv, false, rn);
    }
    uint64_t wh = region(g, t, head, true, "output");
    /* the step reads everything once; its time splits in proportion to the bytes each kernel
     * streams (activations are re-read by every kernel and are left out of the split) */
    const struct ms_cost *ref = ms_cost_find("rtx5080");
    double scale = ref && ref->hbm_gbps > 0 ? ref->hbm_gbps / g->cost->hbm_gbps : 1.0;
    double streamed = LLM_WEIGHTS + LLM_KV * (double)batch + other;
    double step = LLM_STEP_NS * scale * streamed / (LLM_WEIGHTS + LLM_KV + LLM_OTHER);
    for (int l = 0; l < LLM_LAYERS && !g->rc; l++) {
        uint64_t args[] = {wl[l], kvl[l], act, (uint64_t)batch, 4096};
        kernel(g, t, "decoder_layer", (uint64_t)llround(step * (layer_w + kv) / streamed), args, 5);
    }
    uint64_t args[] = {wh, act, oth, (uint64_t)batch};
    kernel(g, t, "output", (uint64_t)llround(step * (head + other) / streamed), args, 4);
}

/* ---- random -------------------------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s, uint64_t lo, uint64_t hi)
{
    return lo + (hi > lo ? ms_wl_rand(s) % (hi - lo + 1) : 0);
}

int ms_wl_random(const struct ms_wl_random_spec *sp, struct ms_workload *w)
{
    if (sp->ntasks == 0 || sp->max_regions == 0 || sp->max_cmds == 0 ||
        (sp->uniform_bytes == 0 && sp->max_region_bytes < MS_GRAN))
        return MS_E_INVAL;
    uint64_t s = sp->seed;
    int rc = MS_OK;
    snprintf(w->name, sizeof(w->name), "random");
    snprintf(w->desc, sizeof(w->desc), "random workload, seed %llu", (unsigned long long)sp->seed);
    uint64_t maxdur = sp->max_dur_ns > 1000 ? sp->max_dur_ns : 1000;
    /* With total_bytes each task gets an equal share of it, split over its regions by weights
     * drawn from a second stream first, so the sizes are known before any region exists; the
     * main stream then draws everything else as without it. */
    bool scaled = sp->total_bytes > 0 && sp->uniform_bytes == 0;
    uint32_t *tot_nreg = NULL;
    uint64_t(*tot_size)[64] = NULL;
    if (scaled) {
        if (sp->ntasks > 64)
            return MS_E_INVAL;
        tot_nreg = ms_calloc(sp->ntasks, sizeof(*tot_nreg));
        tot_size = ms_calloc(sp->ntasks, sizeof(*tot_size));
        if (!tot_nreg || !tot_size) {
            ms_free(tot_nreg);
            ms_free(tot_size);
            return MS_E_NOMEM;
        }
        uint64_t s2 = sp->seed ^ 0x5851f42d4c957f2dull;
        double share = (double)sp->total_bytes / (double)sp->ntasks;
        for (uint32_t ti = 0; ti < sp->ntasks; ti++) {
            uint64_t sum = 0;
            tot_nreg[ti] = (uint32_t)MS_MIN(rnd(&s2, 1, sp->max_regions), 64);
            for (uint32_t r = 0; r < tot_nreg[ti]; r++)
                sum += tot_size[ti][r] = rnd(&s2, 1, 1000);
            for (uint32_t r = 0; r < tot_nreg[ti]; r++) {
                double b = share * (double)tot_size[ti][r] / (double)sum;
                uint64_t g = (uint64_t)llround(b / (double)MS_GRAN);
                tot_size[ti][r] = (g ? g : 1) * MS_GRAN;
            }
        }
    }
    for (uint32_t ti = 0; ti < sp->ntasks && !rc; ti++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "rand%u", (unsigned)ti);
        uint32_t t;
        rc = ms_wl_add_task(w, nm, ti, 0, &t);
        uint32_t nreg = (uint32_t)rnd(&s, 1, sp->max_regions);
        uint64_t bases[64], sizes[64];
        if (nreg > 64)
            nreg = 64;
        if (scaled)
            nreg = tot_nreg[ti];
        for (uint32_t r = 0; r < nreg && !rc; r++) {
            sizes[r] = sp->uniform_bytes ? sp->uniform_bytes
                       : scaled          ? tot_size[ti][r]
                                         : MS_GRAN * rnd(&s, 1, sp->max_region_bytes / MS_GRAN);
            bool ro = rnd(&s, 0, 99) < sp->ro_pct;
            rc = ms_wl_add_region(w, t, sizes[r], ro, "r", &bases[r]);
        }
        uint32_t ncmd = (uint32_t)rnd(&s, 1, sp->max_cmds);
        for (uint32_t c = 0; c < ncmd && !rc; c++) {
            uint64_t dur = rnd(&s, 1000, maxdur);
            uint64_t kind = sp->copies ? rnd(&s, 0, 9) : 0;
            uint32_t r0 = (uint32_t)rnd(&s, 0, nreg - 1);
            uint64_t off = rnd(&s, 0, sizes[r0] - 1);
            if (kind == 8) {
                uint64_t len = rnd(&s, 1, sizes[r0] - off);
                rc = ms_wl_add_memset(w, t, dur, bases[r0] + off, len);
                continue;
            }
            if (kind == 9) {
                uint64_t len = rnd(&s, 1, sizes[r0] - off);
                enum ms_copy_dir d = (enum ms_copy_dir)rnd(&s, 0, 1);
                rc = ms_wl_add_copy(w, t, dur, d, d == MS_COPY_H2D ? bases[r0] + off : 0,
                                    d == MS_COPY_D2H ? bases[r0] + off : 0, len);
                continue;
            }
            uint64_t args[8];
            size_t na = (size_t)rnd(&s, 1, 6);
            for (size_t a = 0; a < na; a++) {
                uint32_t r = (uint32_t)rnd(&s, 0, nreg - 1);
                args[a] = rnd(&s, 0, 3) == 0 ? rnd(&s, 0, 1 << 20) /* a scalar */
                                             : bases[r] + rnd(&s, 0, sizes[r] - 1);
            }
            rc = ms_wl_add_kernel(w, t, "k", dur, args, na);
            if (!rc && rnd(&s, 0, 99) < sp->hidden_pct) {
                uint32_t r = (uint32_t)rnd(&s, 0, nreg - 1);
                struct ms_range hr = {bases[r], sizes[r]};
                rc = ms_wl_add_hidden(w, t, hr);
            }
        }
    }
    ms_free(tot_nreg);
    ms_free(tot_size);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

int ms_wl_builtin(const struct ms_wl_spec *sp, struct ms_workload *w, char *why, size_t whylen)
{
    size_t nb;
    const struct ms_wl_info *bi = ms_wl_builtins(&nb);
    const struct ms_wl_info *info = NULL;
    for (size_t i = 0; i < nb; i++)
        if (sp->name && strcmp(sp->name, bi[i].name) == 0)
            info = &bi[i];
    if (!info) {
        snprintf(why, whylen, "unknown workload '%s'", sp->name ? sp->name : "");
        return MS_E_NOTFOUND;
    }
    if (!(sp->pressure > 0) || sp->pressure > 1000) {
        snprintf(why, whylen, "pressure %g is out of range (0, 1000]", sp->pressure);
        return MS_E_INVAL;
    }
    if (sp->budget < 64 * MS_MIB) {
        snprintf(why, whylen, "a budget below 64 MiB cannot hold any built-in workload");
        return MS_E_INVAL;
    }
    if (!sp->cost || !(sp->cost->hbm_gbps > 0) || !(sp->cost->tflops > 0)) {
        snprintf(why, whylen, "the cost profile lacks HBM or FLOP rates");
        return MS_E_INVAL;
    }
    struct gen g = {w, sp->cost, MS_OK};
    double total = sp->pressure * (double)sp->budget;
    snprintf(w->name, sizeof(w->name), "%s", info->name);
    if (strcmp(info->name, "micro") == 0) {
        gen_micro(&g, total / 4);
    } else if (strcmp(info->name, "A") == 0) {
        gen_hotspot(&g, total / 4);
        gen_dwt2d(&g, total / 4);
        gen_cfd(&g, total / 4);
        gen_nn(&g, total / 4);
        snprintf(w->desc, sizeof(w->desc), "A (scientific): hotspot, dwt2d, cfd, nn");
    } else if (strcmp(info->name, "B") == 0) {
        long b[4];
        for (int i = 0; i < 4; i++)
            b[i] = gen_dnn(&g, &dnns[i], total / 4);
        snprintf(w->desc, sizeof(w->desc),
                 "B (multi-DNN): ResNet152 b%ld, VGG19 b%ld, InceptionV3 b%ld, DenseNet201 b%ld",
                 b[0], b[1], b[2], b[3]);
    } else if (strcmp(info->name, "C") == 0) {
        long lb = lround((total / 5 - LLM_WEIGHTS) / (LLM_INSTANCE - LLM_WEIGHTS));
        if (lb < 1)
            lb = 1;
        double llm = LLM_WEIGHTS + (double)lb * (LLM_INSTANCE - LLM_WEIGHTS);
        double rest = (total - llm) / 4;
        long b[4];
        for (int i = 0; i < 4; i++)
            b[i] = gen_dnn(&g, &dnns[i], rest);
        gen_llm(&g, "llama3-8b", lb);
        snprintf(w->desc, sizeof(w->desc),
                 "C (hybrid): B (batches %ld/%ld/%ld/%ld) + Llama3-8B int8, %ld sequence%s", b[0],
                 b[1], b[2], b[3], lb, lb == 1 ? "" : "s");
    } else if (strcmp(info->name, "D") == 0) {
        long n = lround(total / LLM_INSTANCE);
        if (n < 1)
            n = 1;
        for (long i = 0; i < n && !g.rc; i++) {
            char nm[32];
            snprintf(nm, sizeof(nm), "llama%ld", i);
            gen_llm(&g, nm, 1);
        }
        snprintf(w->desc, sizeof(w->desc), "D (multi-LLM): %ld x Llama3-8B int8 (8.5 GB each)", n);
    } else { /* random */
        struct ms_wl_random_spec rs = {
            .seed = sp->seed,
            .ntasks = 4,
            .max_regions = 12,
            .max_cmds = 40,
            .max_region_bytes = MS_ROUND_UP((uint64_t)(total / 4 / 6), MS_GRAN),
            .total_bytes = (uint64_t)total, /* the pressure asked for */
            .max_dur_ns = 20 * 1000 * 1000,
            .hidden_pct = 2,
            .ro_pct = 30,
            .copies = true,
        };
        if (rs.max_region_bytes < MS_GRAN)
            rs.max_region_bytes = MS_GRAN;
        g.rc = ms_wl_random(&rs, w);
    }
    if (g.rc) {
        snprintf(why, whylen, "building workload %s: %s", info->name, ms_strerror(g.rc));
        return g.rc;
    }
    return ms_wl_validate(w, why, whylen);
}
