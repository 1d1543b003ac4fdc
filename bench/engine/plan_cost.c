/*
 * plan_cost.c - what a fault of the engine running alone spends planning, on the CPU.
 *
 * The shim's launch fault predicts the future from its history (core/history.h) and builds an
 * OPT plan over it (core/plan.h). This program sets up what a long-running program looks like
 * to that code: REGIONS allocations of one 64 MiB chunk, the first RESIDENT of them on the
 * device, and a full history (65536 ids, the shim's HIST_CAP) of commands that each use three
 * allocations in a loop over all of them. It then times ms_history_plan_sets alone and followed
 * by ms_plan_build for a command needing the last allocation (not resident), with the shim's
 * prefetch of a quarter of the budget and groups of 4, and prints the mean microseconds and
 * the working sets handed to OPT. No GPU, no driver.
 *
 * Usage: plan_cost [REGIONS [RESIDENT [ROUNDS]]]  (defaults 400 200 200)
 */
#include "core/history.h"
#include "core/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int nreg = argc > 1 ? atoi(argv[1]) : 400;
    int nres = argc > 2 ? atoi(argv[2]) : 200;
    int rounds = argc > 3 ? atoi(argv[3]) : 200;
    if (nreg < 2 || nres < 0 || nres >= nreg || rounds < 1) {
        fprintf(stderr, "usage: plan_cost [REGIONS>=2 [RESIDENT<REGIONS [ROUNDS>=1]]]\n");
        return 2;
    }
    const uint64_t chunk = 64 * MS_MIB, budget = (uint64_t)nres * chunk;
    struct ms_rtable rt;
    ms_rtable_init(&rt);
    uint32_t *ids = malloc((size_t)nreg * sizeof(*ids));
    struct ms_history h;
    struct ms_chunk_set s, need;
    ms_chunk_set_init(&s);
    ms_chunk_set_init(&need);
    struct ms_chunk_set *ws = NULL;
    size_t capws = 0, nws = 0;
    struct ms_plan p;
    ms_plan_init(&p);
    if (!ids || ms_history_init(&h, 65536) != MS_OK)
        return 1;
    for (int i = 0; i < nreg; i++)
        if (ms_region_add(&rt, 0, 0x7f0000000000ull + (uint64_t)i * (1ull << 30), chunk,
                          MS_RK_DEVICE, chunk, &ids[i]) != MS_OK ||
            (i < nres && ms_chunk_apply(&rt, MS_CHUNK_ID(ids[i], 0), MS_CE_MAP_FRESH) != MS_OK))
            return 1;
    for (int k = 0; k < 70000; k++) {
        ms_chunk_set_clear(&s);
        for (int j = 0; j < 3; j++)
            if (ms_chunk_set_add(&s, MS_CHUNK_ID(ids[(k + j * 7) % nreg], 0)) != MS_OK)
                return 1;
        ms_chunk_set_normalize(&s);
        ms_history_append(&h, &s);
    }
    if (ms_chunk_set_add(&need, MS_CHUNK_ID(ids[nreg - 1], 0)) != MS_OK)
        return 1;
    double t0 = now_s();
    for (int i = 0; i < rounds; i++)
        if (ms_history_plan_sets(&h, &rt, &need, budget / 4, 4, &ws, &capws, &nws) != MS_OK)
            return 1;
    double t1 = now_s();
    for (int i = 0; i < rounds; i++) {
        if (ms_history_plan_sets(&h, &rt, &need, budget / 4, 4, &ws, &capws, &nws) != MS_OK)
            return 1;
        struct ms_plan_input in = {
            .rt = &rt, .budget = budget, .ws = ws, .nws = nws, .policy = MS_EVICT_OPT};
        if (ms_plan_build(&in, &p) != MS_OK)
            return 1;
    }
    double t2 = now_s();
    printf("{\"program\": \"plan_cost\", \"regions\": %d, \"resident\": %d, \"history\": %llu, "
           "\"plan_sets_us\": %.1f, \"plan_sets_and_build_us\": %.1f, \"working_sets\": %zu, "
           "\"steps\": %zu}\n",
           nreg, nres, (unsigned long long)ms_history_len(&h), (t1 - t0) / rounds * 1e6,
           (t2 - t1) / rounds * 1e6, nws, p.n);
    for (size_t i = 0; i < capws; i++)
        ms_chunk_set_fini(&ws[i]);
    ms_free(ws);
    ms_plan_fini(&p);
    ms_chunk_set_fini(&s);
    ms_chunk_set_fini(&need);
    ms_history_fini(&h);
    ms_rtable_fini(&rt);
    free(ids);
    return 0;
}
