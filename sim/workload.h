/*
 * workload.h - what the simulator replays: tasks, their regions, and their looping command
 * streams.
 *
 * Design
 *   A workload is a set of tasks. Each task owns regions (device allocations) and a command
 *   stream that repeats forever: kernels, copies and memsets, each with a duration. Commands are
 *   kept in the shape of trace records (core/trace.h), so the simulator sees exactly what a shim
 *   would see: a kernel is its raw parameter bytes (pointer arguments are 8-byte words holding
 *   region addresses) plus an optional parameter layout, and the core predictor
 *   (ms_predict_launch) finds the regions it references; copies and memsets name byte ranges.
 *
 *   Beyond what a trace can carry, the workload holds ground truth the replay's oracle uses:
 *     - region.ro: kernels never change the region (weights, inputs). Copies into it still do.
 *     - kernel "hidden" ranges: memory the kernel touches although its parameters do not name
 *       it (pointers stored in device memory). The predictor cannot see them; the oracle can, so
 *       they turn into launch faults under the planned policies.
 *
 *   Addresses: every region gets a fresh simulator address from one bump allocator (2 MiB
 *   aligned, a 2 MiB gap between regions), so addresses are unique across tasks. The simulated
 *   GPU identifies chunks by address, which needs that uniqueness. Traces recorded from
 *   separate processes may reuse addresses, so ms_wl_from_trace relocates each allocation to a
 *   fresh address and rewrites the kernel parameter words and copy/memset addresses that point
 *   into it (using the predictor's own rule for which words are candidates).
 *
 *   Built-in workloads (sim/workloads.c; parameters and sources in docs/workloads.md) follow the
 *   MSched paper's combinations: micro, A (scientific), B (multi-DNN), C (B + one LLM),
 *   D (multi-LLM), plus "random" for tests.
 *
 * Invariants
 *   - every region has size > 0, belongs to an existing task, and [base, base+size) overlaps no
 *     other region of any task.
 *   - every command's offsets into the pools (params, layout, hidden, names) are in bounds.
 *   - task.loop_ns == sum of its commands' durations.
 *
 * Ownership: the workload owns all its arrays; ms_wl_fini frees them. Pointers into the pools
 * are invalidated by any later ms_wl_add_*. No locking.
 */
#ifndef MS_SIM_WORKLOAD_H
#define MS_SIM_WORKLOAD_H

#include "core/cost.h"
#include "core/predict.h"
#include "core/trace.h"

#include <stdbool.h>

enum ms_wl_cmd_kind { MS_WL_KERNEL = 0, MS_WL_COPY, MS_WL_MEMSET };

struct ms_wl_region {
    uint64_t base; /* simulator address, unique across tasks */
    uint64_t size; /* bytes */
    uint32_t task; /* index into workload.tasks */
    bool ro;       /* ground truth: no kernel changes it */
    char name[32];
};

struct ms_wl_cmd {
    uint8_t kind;             /* enum ms_wl_cmd_kind */
    uint8_t dir;              /* COPY: enum ms_copy_dir */
    uint64_t dur_ns;          /* how long the command keeps the GPU busy */
    uint32_t name;            /* offset of its NUL-terminated name in workload.names (0: none) */
    uint32_t params, nparams; /* KERNEL: parameter bytes params[params .. +nparams) */
    uint32_t layout, nlayout; /* KERNEL: layout[layout .. +nlayout); nlayout 0 = no layout */
    uint32_t hidden, nhidden; /* KERNEL: hidden[hidden .. +nhidden), see the Design note */
    uint64_t dst, src, bytes; /* COPY: device addresses of the device sides (host side unused);
                                 MEMSET: dst and bytes */
};

struct ms_wl_task {
    char name[48];
    uint32_t id; /* id in the trace or generator */
    int32_t prio;
    struct ms_wl_cmd *cmds; /* the stream; it loops */
    size_t ncmds, capcmds;
    uint64_t loop_ns; /* sum of the command durations */
};

struct ms_workload {
    char name[64];  /* "D", "micro", a trace's file name */
    char desc[160]; /* one line for humans */
    struct ms_wl_task *tasks;
    size_t ntasks, captasks;
    struct ms_wl_region *regions;
    size_t nregions, capregions;
    uint8_t *params;
    size_t nparams, capparams;
    struct ms_param_layout *layout;
    size_t nlayout, caplayout;
    struct ms_range *hidden;
    size_t nhidden, caphidden;
    char *names; /* names[0] == '\0' is "no name" */
    size_t nnames, capnames;
    uint64_t next_va; /* bump allocator for region addresses */
};

void ms_wl_init(struct ms_workload *w);
void ms_wl_fini(struct ms_workload *w);

/* Errors for all builders: MS_E_INVAL (unknown task, zero size, offsets past 4 GiB of pool),
 * MS_E_NOMEM. On error the workload is unchanged. */
int ms_wl_add_task(struct ms_workload *w, const char *name, uint32_t id, int32_t prio,
                   uint32_t *out_task);
int ms_wl_add_region(struct ms_workload *w, uint32_t task, uint64_t size, bool ro, const char *name,
                     uint64_t *out_base);
/* A kernel whose parameters are nargs 8-byte words (pointers and scalars), no layout. */
int ms_wl_add_kernel(struct ms_workload *w, uint32_t task, const char *name, uint64_t dur_ns,
                     const uint64_t *args, size_t nargs);
/* A kernel with raw parameter bytes and an optional layout (nlayout 0: none). */
int ms_wl_add_kernel_raw(struct ms_workload *w, uint32_t task, const char *name, uint64_t dur_ns,
                         const uint8_t *params, size_t nparams,
                         const struct ms_param_layout *layout, size_t nlayout);
/* Add a hidden range to the task's last command, which must be a kernel. */
int ms_wl_add_hidden(struct ms_workload *w, uint32_t task, struct ms_range r);
/* dst/src: device addresses of the sides that are on the device, 0 for host sides. */
int ms_wl_add_copy(struct ms_workload *w, uint32_t task, uint64_t dur_ns, enum ms_copy_dir dir,
                   uint64_t dst, uint64_t src, uint64_t bytes);
int ms_wl_add_memset(struct ms_workload *w, uint32_t task, uint64_t dur_ns, uint64_t dst,
                     uint64_t bytes);

const char *ms_wl_cmd_name(const struct ms_workload *w, const struct ms_wl_cmd *c);

/* Bytes of the regions of `task` (UINT32_MAX: all tasks), each rounded up to MS_GRAN. */
uint64_t ms_wl_footprint(const struct ms_workload *w, uint32_t task);

/*
 * Check that the workload can be replayed: at least one task, every task has at least one
 * command and a loop of non-zero duration. MS_E_INVAL with a reason in why otherwise.
 */
int ms_wl_validate(const struct ms_workload *w, char *why, size_t whylen);

/*
 * Load a workload from trace text (docs/trace-format.md). Each task's commands form its loop;
 * alloc records become regions (kept for the whole replay: a free ends an allocation's life in
 * the trace, so later pointers to the same addresses find the next allocation there, but the
 * simulator does not reuse its memory); sync records are ignored. Regions are not read-only
 * (a trace cannot tell). Tasks with no commands are dropped.
 * Errors: MS_E_PARSE / MS_E_VERSION with the reader's "line N: why" in why, MS_E_INVAL for a
 * trace with nothing to replay, MS_E_NOMEM.
 */
int ms_wl_from_trace(const char *text, size_t len, const char *name, struct ms_workload *w,
                     char *why, size_t whylen);

/*
 * Write the workload as trace text (header, task, alloc, then each task's commands once) into a
 * heap buffer *out (ms_malloc'd, NUL-terminated, caller frees with ms_free). Read-only flags and
 * hidden ranges are not representable and are lost. Errors: MS_E_NOMEM, MS_E_INVAL.
 */
int ms_wl_to_trace(const struct ms_workload *w, char **out, size_t *out_len);

/* ---- built-in workloads (sim/workloads.c) ------------------------------------------------- */

struct ms_wl_spec {
    const char *name;           /* see ms_wl_builtins() */
    double pressure;            /* wanted total footprint / budget, > 0 */
    uint64_t budget;            /* device memory the replay will give the tasks */
    const struct ms_cost *cost; /* profile: kernel durations follow its HBM and FLOP rates */
    uint64_t seed;              /* "random" only */
};

struct ms_wl_info {
    const char *name;
    const char *desc;
};

/* The built-in workloads, for help text and validation. */
const struct ms_wl_info *ms_wl_builtins(size_t *out_n);

/*
 * Build a built-in workload into w (initialized by the caller, empty). Errors: MS_E_NOTFOUND
 * (unknown name), MS_E_INVAL (bad pressure or budget, with why), MS_E_NOMEM.
 */
int ms_wl_builtin(const struct ms_wl_spec *spec, struct ms_workload *w, char *why, size_t whylen);

/* Random workloads for tests. */
struct ms_wl_random_spec {
    uint64_t seed;
    uint32_t ntasks;           /* >= 1 */
    uint32_t max_regions;      /* per task, >= 1 */
    uint32_t max_cmds;         /* per task, >= 1 */
    uint64_t uniform_bytes;    /* 0: mixed region sizes; else every region is this size */
    uint64_t max_region_bytes; /* mixed sizes: upper bound, >= MS_GRAN */
    uint64_t total_bytes;      /* mixed sizes: > 0 scales them to this footprint in all (to
                                * MS_GRAN per region; at most 64 tasks); 0: as drawn */
    uint64_t max_dur_ns;       /* command durations are 1 us .. max_dur_ns */
    uint32_t hidden_pct;       /* chance (percent) that a kernel also touches a hidden range */
    uint32_t ro_pct;           /* chance (percent) that a region is read-only */
    bool copies;               /* also emit copies and memsets */
};
int ms_wl_random(const struct ms_wl_random_spec *spec, struct ms_workload *w);

/* Deterministic 64-bit PRNG step (splitmix64) shared by the generators and tests. */
uint64_t ms_wl_rand(uint64_t *state);

#endif /* MS_SIM_WORKLOAD_H */
