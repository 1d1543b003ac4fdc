/*
 * cost.h - the cost model: how long data movement and mapping take on a given machine.
 *
 * Design
 *   A profile is a table of measured figures (docs/cost-model.md gives each figure's source).
 *   Bandwidths are in GB/s (1e9 bytes per second). The simulator's GPU backend and the planner's
 *   callers turn bytes and calls into nanoseconds with the functions below; nothing here is
 *   fitted to a result.
 *
 *   Copies: a copy of b bytes one way costs copy_call_us + b / bw. When both directions run at
 *   once, each direction's rate is limited by its one-way bandwidth and the two together by
 *   duplex_gbps. Mapping: a chunk of b bytes costs map_us + b * map_us_per_mib / MiB to map and
 *   unmap_us + b * unmap_us_per_mib / MiB to unmap (driver VMM work, done by the CPU).
 *   Demand paging (unified memory): faults move fault_bytes each at fault_us apiece, with
 *   um_fault_gbps the effective fault-driven bandwidth; unified-memory eviction runs at
 *   um_evict_gbps. GPU hashing of a chunk reads it at hash_gbps.
 */
#ifndef MS_COST_H
#define MS_COST_H

#include "ms.h"

#include <stdbool.h>

struct ms_cost {
    const char *name;
    const char *source;  /* one line: where the figures come from */
    uint64_t hbm_bytes;  /* device memory of the profile's GPU */
    double h2d_gbps;     /* pinned host->device, one direction alone */
    double d2h_gbps;     /* pinned device->host, one direction alone */
    double duplex_gbps;  /* both directions at once, aggregate */
    double copy_call_us; /* fixed cost per copy call */
    double map_us, map_us_per_mib;
    double unmap_us, unmap_us_per_mib;
    double fault_us;      /* one GPU page fault, control plane included */
    uint64_t fault_bytes; /* bytes one fault migrates */
    double um_fault_gbps; /* effective fault-driven population bandwidth */
    double um_evict_gbps; /* unified-memory eviction bandwidth (prefetch to host) */
    double hash_gbps;     /* GPU reads a chunk to hash it */
    double hbm_gbps;      /* device memory bandwidth (for synthetic kernel durations) */
    double tflops;        /* dense throughput (for synthetic kernel durations) */
};

extern const struct ms_cost ms_cost_h200;
extern const struct ms_cost ms_cost_rtx5080;

/* Look a profile up by name ("h200", "rtx5080"); NULL if unknown. */
const struct ms_cost *ms_cost_find(const char *name);

/* Nanoseconds for one copy call of `bytes` in one direction, alone on the link. */
uint64_t ms_cost_copy_ns(const struct ms_cost *c, bool to_device, uint64_t bytes);
/* Nanoseconds to move `out` bytes device->host and `in` bytes host->device. pipelined: both
 * directions at once (duplex limit); otherwise one after the other. Copy call costs excluded. */
uint64_t ms_cost_transfer_ns(const struct ms_cost *c, uint64_t out, uint64_t in, bool pipelined);
uint64_t ms_cost_map_ns(const struct ms_cost *c, uint64_t bytes);
uint64_t ms_cost_unmap_ns(const struct ms_cost *c, uint64_t bytes);
uint64_t ms_cost_hash_ns(const struct ms_cost *c, uint64_t bytes);
/* Demand paging: nanoseconds and fault count to fault `bytes` in. */
uint64_t ms_cost_fault_ns(const struct ms_cost *c, uint64_t bytes, uint64_t *out_faults);
uint64_t ms_cost_um_evict_ns(const struct ms_cost *c, uint64_t bytes);
/* Per-direction bandwidth (GB/s) while the other direction is also busy: half the duplex
 * aggregate each (more if the other direction cannot use its half), capped by the one-way rate. */
double ms_cost_duplex_share_gbps(const struct ms_cost *c, bool to_device);

#endif /* MS_COST_H */
