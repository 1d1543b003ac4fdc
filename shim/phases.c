/*
 * phases.c - the phase sums of MSCHED_PHASES (contract and design: phases.h).
 *
 * Invariants
 *   - sums[p] only grow; count and ns of one phase are two relaxed atomics, so a report taken
 *     while hooks run may pair a count with a slightly older sum (the exit report is exact for
 *     what finished).
 *   - ms__ph_clock never returns 0 (CLOCK_MONOTONIC is time since boot), so 0 can mean "off".
 */
#include "shim/phases.h"

#include <time.h>
#include <unistd.h>

bool ms__ph_on;

static struct {
    uint64_t n, ns;
} sums[MS_PH_COUNT];

static double read_ns; /* what one clock read cost, measured at configuration */

/* Name and depth (indentation under its parent) of each phase, in report order. */
static const struct {
    const char *name;
    int depth;
} info[MS_PH_COUNT] = {
    [MS_PH_HOOK] = {"launch hook (entry to return)", 0},
    [MS_PH_PACK] = {"packing the parameters", 1},
    [MS_PH_RECORD] = {"recorder counters", 1},
    [MS_PH_ENGINE] = {"engine launch gate", 1},
    [MS_PH_LOCK] = {"waiting for the engine lock", 2},
    [MS_PH_PREDICT] = {"prediction", 2},
    [MS_PH_GATE] = {"gate", 2},
    [MS_PH_CLIENT] = {"daemon client (copies' too)", 3},
    [MS_PH_ADMIT] = {"admission, history (copies' too)", 3},
    [MS_PH_PIN] = {"pins (copies' too)", 3},
    [MS_PH_DRIVER] = {"real driver call", 1},
    [MS_PH_END] = {"after the call (every gated call)", 1},
    [MS_PH_COPY] = {"copy and memset gates", 0},
};

uint64_t ms__ph_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    return ns ? ns : 1;
}

void ms__ph_configure(bool on)
{
    if (!on)
        return;
    enum { READS = 1000 };
    uint64_t t0 = ms__ph_clock(), t = t0;
    for (int i = 0; i < READS; i++)
        t = ms__ph_clock();
    read_ns = (double)(t - t0) / READS;
    __atomic_store_n(&ms__ph_on, true, __ATOMIC_RELEASE);
}

void ms__ph_add(enum ms_phase p, uint64_t t0)
{
    uint64_t d = ms__ph_clock() - t0;
    __atomic_fetch_add(&sums[p].n, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&sums[p].ns, d, __ATOMIC_RELAXED);
}

void ms__ph_get(enum ms_phase p, uint64_t *count, uint64_t *ns)
{
    *count = __atomic_load_n(&sums[p].n, __ATOMIC_RELAXED);
    *ns = __atomic_load_n(&sums[p].ns, __ATOMIC_RELAXED);
}

void ms__ph_report(FILE *f)
{
    if (!ms__ph_on)
        return;
    int pid = (int)getpid();
    uint64_t hooks, hook_ns, drv, drv_ns;
    ms__ph_get(MS_PH_HOOK, &hooks, &hook_ns);
    ms__ph_get(MS_PH_DRIVER, &drv, &drv_ns);
    fprintf(f,
            "msched[%d]: phases (MSCHED_PHASES; one clock read costs %.1f ns, and each phase "
            "adds two): calls, seconds, ns each\n",
            pid, read_ns);
    for (int p = 0; p < MS_PH_COUNT; p++) {
        uint64_t n, ns;
        ms__ph_get((enum ms_phase)p, &n, &ns);
        if (!n)
            continue;
        fprintf(f, "msched[%d]:   %*s%-*s %10llu %9.3f %9.1f\n", pid, 2 * info[p].depth, "",
                40 - 2 * info[p].depth, info[p].name, (unsigned long long)n, (double)ns / 1e9,
                (double)ns / (double)n);
    }
    if (hooks && drv)
        fprintf(f,
                "msched[%d]: phases: libmsched's own part of a launch hook (the hook less the "
                "driver call) %.1f ns each\n",
                pid, ((double)hook_ns - (double)drv_ns) / (double)hooks);
}
