/*
 * gpu_sim.h - the simulated GPU: the seam (core/gpu.h) on a virtual clock.
 *
 * Design
 *   A deterministic model of one GPU and its host link, driven by a cost profile (core/cost.h).
 *   Time is a virtual nanosecond clock that only moves when the caller does something:
 *     map / unmap     the CPU issues driver VMM calls: the clock advances by ms_cost_map_ns /
 *                     ms_cost_unmap_ns of each chunk at once (the caller is blocked meanwhile).
 *     copy            queues one transfer per chunk on the stream's FIFO and returns at once.
 *                     The call's fixed cost (copy_call_us) is the head of the transfer's time on
 *                     the stream. Transfers move as a fluid: a transfer runs at the one-way
 *                     bandwidth of its direction while the other stream is idle (or still in a
 *                     call-cost phase), and at ms_cost_duplex_share_gbps while both are moving
 *                     bytes. A copy queued later on the other stream slows the rest of a transfer
 *                     already running, as on a real full-duplex link. Both streams are advanced
 *                     lazily, up to the clock, whenever something is queued or waited for.
 *     record / wait   an event names the last transfer queued on its stream; wait advances the
 *                     clock to that transfer's completion (never backwards).
 *     hash            the GPU reads each chunk (ms_cost_hash_ns each, the caller waits) and
 *                     returns a value derived from the chunk's address and its content version;
 *                     the replay bumps a chunk's version (ms_gpu_sim_write) whenever a command
 *                     really writes it, so unchanged chunks keep their hash.
 *     info            the configured capacity, minus the bytes mapped now.
 *   Chunks are identified by their device address (va): the simulator lays out every task's
 *   regions in one address space so that va is unique (sim/workload.h).
 *
 *   Why fluid and not "start at max(clock, busy-until)": the executor interleaves the two
 *   directions chunk by chunk, so most transfers overlap a transfer on the other stream that
 *   was queued after them. A fixed duration decided at queue time would charge the first
 *   direction full one-way speed and the second the duplex share; the fluid model charges both
 *   the share for exactly the time they overlap.
 *
 * Invariants
 *   - the clock never moves backwards; the fluid time of the streams never passes the clock
 *     except while wait() runs them forward to the completion it returns.
 *   - mapped_bytes == sum of the bytes of live physical handles <= capacity.
 *   - it never fails on its own ("fail-never"): errors are only MS_E_INVAL for calls that break
 *     the seam's contract (unknown handle or event, zero-byte chunk), MS_E_GPU for a map beyond
 *     the capacity (an executor bug the replay must see), and MS_E_NOMEM.
 *
 * Ownership and locking
 *   ms_gpu_sim_create allocates; ms_gpu_sim_destroy frees everything. The ops table filled by
 *   ms_gpu_sim_ops borrows the sim (impl pointer). Not thread-safe: one caller at a time.
 */
#ifndef MS_GPU_SIM_H
#define MS_GPU_SIM_H

#include "core/cost.h"
#include "core/gpu.h"

struct ms_gpu_sim;

struct ms_gpu_sim_stats {
    uint64_t bytes_h2d;    /* bytes queued host->device */
    uint64_t bytes_d2h;    /* bytes queued device->host */
    uint64_t copies;       /* transfers queued (one per chunk) */
    uint64_t copy_calls;   /* copy() calls */
    uint64_t maps, unmaps; /* chunks mapped / unmapped */
    uint64_t hashes;       /* chunks hashed */
    uint64_t mapped_bytes; /* device memory mapped now */
    uint64_t peak_mapped;  /* highest mapped_bytes so far */
    uint64_t busy_ns[2];   /* time each stream (MS_STREAM_OUT, MS_STREAM_IN) was moving data */
    uint64_t overlap_ns;   /* time both streams were moving data at once */
};

/*
 * Create a simulated GPU with `capacity` bytes of device memory (UINT64_MAX: unlimited) using
 * cost profile `cost` (borrowed; must outlive the sim). The clock starts at 0.
 * Errors: MS_E_INVAL (NULL cost or out), MS_E_NOMEM.
 */
int ms_gpu_sim_create(const struct ms_cost *cost, uint64_t capacity, struct ms_gpu_sim **out);
void ms_gpu_sim_destroy(struct ms_gpu_sim *s);

/* Fill *out with the seam's function table bound to s (name "sim"). */
void ms_gpu_sim_ops(struct ms_gpu_sim *s, struct ms_gpu_ops *out);

/* The virtual clock, in nanoseconds. */
uint64_t ms_gpu_sim_now(const struct ms_gpu_sim *s);
/* Compute time: the GPU's SMs are busy for ns; queued copies keep moving meanwhile. */
void ms_gpu_sim_advance(struct ms_gpu_sim *s, uint64_t ns);
/* Advance the clock by ns of CPU-side work (same effect as ms_gpu_sim_advance). */
void ms_gpu_sim_cpu(struct ms_gpu_sim *s, uint64_t ns);

/* A command wrote the chunk whose first byte is at va: its content version changes. */
int ms_gpu_sim_write(struct ms_gpu_sim *s, uint64_t va);
/* Content version of the chunk at va (0 until first written). */
uint64_t ms_gpu_sim_version(const struct ms_gpu_sim *s, uint64_t va);

void ms_gpu_sim_stats(struct ms_gpu_sim *s, struct ms_gpu_sim_stats *out);

#endif /* MS_GPU_SIM_H */
