/*
 * cost.c - machine profiles and the arithmetic that turns bytes and calls into time.
 *
 * Every figure below has its source in docs/cost-model.md; none is fitted to a simulation
 * result. Bandwidths are GB/s (1e9 B/s), so bytes / gbps is nanoseconds.
 *
 * Two-way transfers: with out bytes leaving and in bytes arriving at once, the transfer ends no
 * sooner than either direction alone at its one-way rate, and no sooner than all bytes at the
 * duplex aggregate: t = max(out / d2h, in / h2d, (out + in) / duplex). Serial transfers add up.
 */
#include "cost.h"

#include <math.h>
#include <string.h>

const struct ms_cost ms_cost_h200 = {
    .name = "h200",
    .source = "docs/h200-measurements.md and bench/results/gpu (H200, PCIe Gen5 x16, driver "
              "580.159, CUDA 13.0)",
    .hbm_bytes = (uint64_t)(139.8 * (double)MS_GIB),
    .h2d_gbps = 55.0,
    .d2h_gbps = 55.2,
    .duplex_gbps = 96.4,
    .copy_call_us = 4.2,
    .map_us = 45.0,
    .map_us_per_mib = 0.3,
    .unmap_us = 33.0,
    .unmap_us_per_mib = 1.5,
    .fault_us = 11.9,
    .fault_bytes = 64 * MS_KIB,
    .um_fault_gbps = 5.5,
    .um_evict_gbps = 13.0,
    .hash_gbps = 1570.0,
    .hbm_gbps = 4300.0,
    .tflops = 790.0,
};

const struct ms_cost ms_cost_rtx5080 = {
    .name = "rtx5080",
    .source = "MSched paper (arXiv 2512.24637) Fig. 9a and section 3: RTX 5080, PCIe 5.0",
    .hbm_bytes = 16 * MS_GIB,
    .h2d_gbps = 45.6,
    .d2h_gbps = 37.8,
    .duplex_gbps = 63.5,
    .copy_call_us = 0.0,
    .map_us = 0.0, /* the paper's evict/populate figures include unmap/map */
    .map_us_per_mib = 0.0,
    .unmap_us = 0.0,
    .unmap_us_per_mib = 0.0,
    .fault_us = 31.79,
    .fault_bytes = 4 * MS_KIB,
    .um_fault_gbps = 0.12,
    .um_evict_gbps = 8.9,
    .hash_gbps = 350.0,
    .hbm_gbps = 960.0,
    .tflops = 56.3,
};

const struct ms_cost *ms_cost_find(const char *name)
{
    static const struct ms_cost *const all[] = {&ms_cost_h200, &ms_cost_rtx5080};
    if (!name)
        return NULL;
    for (size_t i = 0; i < MS_ARRAY_LEN(all); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

static uint64_t ns_for(double bytes, double gbps)
{
    if (bytes <= 0.0)
        return 0;
    if (gbps <= 0.0)
        return UINT64_MAX / 4;
    return (uint64_t)ceil(bytes / gbps);
}

static uint64_t us_to_ns(double us)
{
    return us <= 0.0 ? 0 : (uint64_t)llround(us * 1000.0);
}

uint64_t ms_cost_copy_ns(const struct ms_cost *c, bool to_device, uint64_t bytes)
{
    double bw = to_device ? c->h2d_gbps : c->d2h_gbps;
    return us_to_ns(c->copy_call_us) + ns_for((double)bytes, bw);
}

uint64_t ms_cost_transfer_ns(const struct ms_cost *c, uint64_t out, uint64_t in, bool pipelined)
{
    uint64_t t_out = ns_for((double)out, c->d2h_gbps);
    uint64_t t_in = ns_for((double)in, c->h2d_gbps);
    if (!pipelined)
        return t_out + t_in;
    uint64_t t = MS_MAX(t_out, t_in);
    return MS_MAX(t, ns_for((double)out + (double)in, c->duplex_gbps));
}

uint64_t ms_cost_map_ns(const struct ms_cost *c, uint64_t bytes)
{
    return us_to_ns(c->map_us + c->map_us_per_mib * ((double)bytes / (double)MS_MIB));
}

uint64_t ms_cost_unmap_ns(const struct ms_cost *c, uint64_t bytes)
{
    return us_to_ns(c->unmap_us + c->unmap_us_per_mib * ((double)bytes / (double)MS_MIB));
}

uint64_t ms_cost_hash_ns(const struct ms_cost *c, uint64_t bytes)
{
    return ns_for((double)bytes, c->hash_gbps);
}

uint64_t ms_cost_fault_ns(const struct ms_cost *c, uint64_t bytes, uint64_t *out_faults)
{
    if (out_faults)
        *out_faults = c->fault_bytes ? (bytes + c->fault_bytes - 1) / c->fault_bytes : 0;
    return ns_for((double)bytes, c->um_fault_gbps);
}

uint64_t ms_cost_um_evict_ns(const struct ms_cost *c, uint64_t bytes)
{
    return ns_for((double)bytes, c->um_evict_gbps);
}

double ms_cost_duplex_share_gbps(const struct ms_cost *c, bool to_device)
{
    /* Both directions busy: the aggregate is shared equally (the measured duplex figure is for
     * equal bytes each way), except that a direction slower than half the aggregate leaves the
     * rest to the other; never more than the direction's own one-way rate. */
    double mine = to_device ? c->h2d_gbps : c->d2h_gbps;
    double other = to_device ? c->d2h_gbps : c->h2d_gbps;
    double share = c->duplex_gbps / 2.0;
    if (other < share)
        share = c->duplex_gbps - other;
    return share < mine ? share : mine;
}
