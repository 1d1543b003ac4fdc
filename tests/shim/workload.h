/*
 * workload.h - the shim tests' driver workload and its expected counts.
 *
 * The workload (workload.c) exercises every hooked family through struct ms_api: allocations
 * of each kind, synchronous/asynchronous/2D/unified copies, memsets, launches through
 * kernelParams, through `extra`, of a kernel without parameter information, of a by-value
 * struct, cooperative and Ex launches, the VMM API, streams, events, four threads at once, and
 * a few calls the driver must reject. It checks every result itself and counts what each
 * observer should have seen:
 *   fake    the fake driver's own record (successful operations only)
 *   shim    libmsched's counters (launches, copies and memsets are counted when submitted,
 *           before the driver accepts or rejects them; allocations and frees when they
 *           succeed)
 *   trace   the MSCHED_TRACE records (like shim, but a launch with a zero grid dimension
 *           leaves no record)
 */
#ifndef MS_TESTS_SHIM_WORKLOAD_H
#define MS_TESTS_SHIM_WORKLOAD_H

#include "gpu/fakecuda/fakecuda.h"
#include "tests/shim/api.h"

#include <stdint.h>
#include <stdio.h>

struct ms_expect {
    int launches, allocs, frees, copies, memsets;            /* fake */
    int s_launches, s_copies, s_memsets, s_unknown, s_syncs; /* shim (allocs, frees as fake) */
    int s_maps;                                              /* shim: VMM maps = unmaps */
    int s_host;                                              /* shim: host allocations */
    int t_kernels;                                           /* trace (others as shim) */
};

/* The fake-only functions, found by dlopen($MS_FAKECUDA). */
struct ms_fake_api {
    ms_fake_register_kernel_fn register_kernel;
    ms_fake_get_stats_fn get_stats;
};

/*
 * Run the workload. Prints "RESULT <hash of all data read back>", the "EXPECT ..." lines, one
 * "EXPECT_KERNEL name params layout" line per kernel whose packed parameters it knows, and
 * "FAKE ..." from the fake's own counters. Returns 0, or 1 after printing "FAIL: why".
 */
int ms_workload_run(const struct ms_api *a, const struct ms_fake_api *fk);

/* Print "FAIL: <what>: <rc>" and return 1 when rc differs from want. */
int ms_check_rc(const char *what, CUresult rc, CUresult want);

#define MS_CK(call)                                                                                \
    do {                                                                                           \
        if (ms_check_rc(#call, (call), CUDA_SUCCESS))                                              \
            return 1;                                                                              \
    } while (0)

#endif /* MS_TESTS_SHIM_WORKLOAD_H */
