/*
 * engine.h - the memory engine inside libmsched: virtual device memory under a budget.
 *
 * Design
 *   Active only when a budget is configured (MSCHED_BUDGET, bytes; `msched run --budget`) and
 *   MSCHED_ENGINE is not "off". Then every cuMemAlloc_v2, cuMemAllocPitch_v2 and
 *   cuMemAllocAsync of the process's first context becomes a region (core/region.h): a reserved
 *   virtual range whose chunks are mapped to physical memory only while resident
 *   (gpu/cuda/gpu_cuda.h), at the same addresses for the allocation's life, with a pinned host
 *   backing store allocated with the region. The application's own VMM mappings of plain
 *   device handles become regions too (hook_vmm.c, ms_engine_vmm_*). Nothing is
 *   mapped at allocation: the first command that touches a chunk maps it.
 *
 *   The launch gate (the correctness rule, docs/architecture.md): before a kernel launch, copy
 *   or memset is forwarded, the chunks it references (core/predict.h: launch parameters scanned
 *   for addresses; exact ranges for copies) must be resident. If they are, the call goes ahead
 *   at once. If not (a "launch fault"), the engine waits for the context's work in flight (so
 *   nothing in use is evicted), plans with OPT (core/plan.h) where the future is predicted from
 *   recent history (the process repeats itself: decode steps, training iterations), populating
 *   the missing chunks plus the chunks history says come next (prefetch), and executes the plan
 *   pipelined (core/exec.h). Launches whose reach cannot be bounded (unknown parameter layout,
 *   cooperative launches) need the whole footprint resident; if it does not fit, the launch is
 *   refused with CUDA_ERROR_OUT_OF_MEMORY rather than run on non-resident memory.
 *
 *   MSCHED_ENGINE=unified|demand backs regions with managed memory instead (cuMemAllocManaged;
 *   the seam prefetches to evict and, for unified, to populate; demand leaves populations to
 *   the GPU's page faults): docs/engine.md. Everything else is the same.
 *
 *   Allocations the engine does not take (explicit pools, managed, exportable VMM handles, a
 *   second context) go to the real driver and are neither evicted nor counted against the
 *   budget.
 *
 *   With a daemon (client.h: its socket exists and MSCHED_DAEMON is not "off") the engine is
 *   active even without MSCHED_BUDGET and runs in daemon mode: the budget is the daemon's, the
 *   daemon's orders evict and populate (on the client's service thread), and the gate admits a
 *   command only while the daemon lets this process run and its chunks are resident, asking
 *   the daemon (DEMAND) for what is missing instead of faulting. When the daemon goes away the
 *   engine runs alone: under MSCHED_BUDGET when set; else with every chunk made resident when
 *   the footprint fits the GPU's free memory (the budget becomes that memory); else every gated
 *   command fails with CUDA_ERROR_OUT_OF_MEMORY. One line on stderr says which.
 *   Without a daemon and without a budget the engine is off and makes no driver call.
 *
 * Locking: the engine lock (shim/locks.h, level 2), held across a fault's migration (faults are
 * serialized) and across the execution of the daemon's orders; the fast path holds it for the
 * prediction only. A daemon-mode gate waits on a condition of that lock. The files of the
 * engine and their layering: shim/engine_int.h.
 *
 * Errors: functions return a CUresult value as int (0 = CUDA_SUCCESS); an engine that could not
 * start (no hash kernel, seam failure) logs once and stays inactive: calls pass through.
 */
#ifndef MS_SHIM_ENGINE_H
#define MS_SHIM_ENGINE_H

#include "shim/shim_events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Take the configuration (shim/config.h: MSCHED_BUDGET, MSCHED_ENGINE, MSCHED_STRICT: "1"
 * means before every command, alone with the VMM engine, evict every chunk the command's
 * prediction does not name, so a reach past the prediction faults; a coverage check, slow by
 * design), once, from the shim's initialisation. */
void ms_engine_configure(void);
bool ms_engine_active(void);

/* cuMemAlloc_v2 in engine mode: reserve and register; *handled false means "not mine, forward". */
int ms_engine_alloc(uint64_t *dptr, uint64_t bytes, bool *handled);
/* cuMemFree_v2: *handled false when the address is not an engine region. */
int ms_engine_free(uint64_t dptr, bool *handled);

/*
 * The launch gate: 0 lets the hook forward the command, anything else is the CUresult the hook
 * returns instead. A forwarded command stays in flight until the hook calls ms_engine_gate_end
 * (after the real call returned): the daemon client waits for that before it answers STOP.
 * `s` is the command's stream (a stream being captured is never held).
 */
int ms_engine_gate_launch(const struct ms_shim_launch *l);
int ms_engine_gate_range(uint64_t addr, uint64_t bytes, struct ms_shim_stream s);
/* Work whose reach is unknown: the whole footprint resident. */
int ms_engine_gate_unbounded(struct ms_shim_stream s);

/*
 * CUDA graphs. At instantiation the hooks walk the graph and tell the engine what its nodes
 * reach: ms_engine_graph_begin(exec) starts (or restarts) the record, then one call per kernel
 * node (its launch, as a launch hook would build it) or per device address of a copy or memset
 * node, or ms_engine_graph_unbounded(exec, ...) for a node whose reach cannot be known. The record
 * keeps the regions reached (the whole region, as for launches, plus what their pointer tables
 * reference at launch time). ms_engine_gate_graph gates a launch of exec on that union; an exec
 * without a record (instantiated before the engine started, by an entry point not hooked, or
 * changed in a way not followed: ms_engine_graph_forget) needs the whole footprint.
 * Each entry is tagged with the top-level node it came from (`node`, the node handle of the
 * graph the exec was instantiated from): a node's parameters set on the exec afterwards
 * (cuGraphExecKernelNodeSetParams and kin, as XLA's command buffers do before every run)
 * replace that node's entries (ms_engine_graph_node_reset, then the adds again). A region of
 * the record freed since is looked up again at launch: a live region starting at the same
 * address and at least as large takes its place (an allocator that gave the same address
 * back); otherwise the launch is unbounded. Lock: the engine mutex.
 */
void ms_engine_graph_begin(const void *exec);
void ms_engine_graph_add_launch(const void *exec, const void *node, const struct ms_shim_launch *l);
void ms_engine_graph_add_addr(const void *exec, const void *node, uint64_t addr);
void ms_engine_graph_node_reset(const void *exec, const void *node);
/* why: what could not be followed (a static string, or NULL for a destroyed exec; code: a node
 * type, or -1), kept for the exit summary. */
void ms_engine_graph_unbounded(const void *exec, const char *why, int code);
void ms_engine_graph_forget(const void *exec, const char *why);
int ms_engine_gate_graph(const void *exec, struct ms_shim_stream s);
/*
 * Graphs in pieces (shim/graph_pieces.c). ms_engine_graph_oversized: exec's record is bounded
 * and names more than the budget. ms_engine_graph_cut: the top-level nodes of exec's graph in
 * a topological order (`order`, n of them, as the record tags them) cut into consecutive
 * pieces, each naming at most half the budget (a node naming more is a piece of its own):
 * starts[0..*npieces) are the pieces' first positions (starts holds n entries); *npieces is 0
 * when the record is unknown or unbounded. Returns MS_OK or MS_E_NOMEM.
 * ms_engine_gate_graph_part gates one piece: what the record reaches through `nodes` (nn of
 * them, sorted by address); `first` for a launch's first piece (the launch counters).
 */
bool ms_engine_graph_oversized(const void *exec);
int ms_engine_graph_cut(const void *exec, const void *const *order, size_t n, size_t *starts,
                        size_t *npieces);
int ms_engine_gate_graph_part(const void *exec, const void *const *nodes, size_t nn, bool first,
                              struct ms_shim_stream s);
/* Two ranges resident at once (a device-to-device copy's both sides). */
int ms_engine_gate_ranges(uint64_t a, uint64_t abytes, uint64_t b, uint64_t bbytes,
                          struct ms_shim_stream s);
/* n ranges resident at once (a batch of copies): addr[i], bytes[i]. */
int ms_engine_gate_rangev(const uint64_t *addr, const uint64_t *bytes, size_t n,
                          struct ms_shim_stream s);
/* The hook's forwarded call returned (no lock held; cheap when nothing was admitted). */
void ms_engine_gate_end(void);
/* A host-to-device copy: scan small buffers for pointers to regions (pointer tables). */
void ms_engine_note_h2d(uint64_t dst, const void *src, uint64_t bytes);

/* The chunk size of a new region of `size` bytes: ms_chunk_bytes_with(size, MSCHED_CHUNK).
 * Every region the shim makes, and the host chunks and VMM slots laid over one, use this rule. */
uint64_t ms_engine_chunk_bytes(uint64_t size);

/*
 * The application's own VMM memory (hook_vmm.c). ms_engine_vmm_ready starts the engine if it
 * can and says whether it takes VMM memory now.
 * ms_engine_vmm_map_amap adopts a mapping [va, va + bytes) of a virtual handle as an always-
 * mapped region (kind MS_RK_VMM, chunks of chunk_bytes): chunk k with tokens[k] != 0 starts
 * HOST on that host chunk (kept from an earlier mapping; the region owns it on success, the
 * caller still does on error); the others start on device memory when they fit the budget
 * (alone), else on new host chunks, or EMPTY until the daemon's first POPULATE.
 * ms_engine_vmm_map (the fallback: a mapping the handle's chunks do not line up with, or a
 * handle mapped twice) adopts a mapping whose contents live in `host` (pinned, the caller's):
 * a region resident only when used (not always mapped: commands need its chunks resident);
 * has_data: the handle already holds data (mapped before): the region starts on the host.
 * ms_engine_vmm_unmap saves what is resident (into the store, or into the region's host
 * chunks, whose tokens it writes to tokens[0..nchunks) with *kept set: the caller owns them
 * now; ntokens is the room there) and forgets the region (*handled false: not an adopted
 * mapping that starts at va with that size); with keep false (the handle is released and this
 * is its last mapping: nobody can map the contents again) nothing is saved. ms_engine_vmm_host_free
 * releases kept host chunks (0 tokens skipped). ms_engine_vmm_owns: va lies in an adopted mapping.
 * CUresult values.
 */
bool ms_engine_vmm_ready(void);
int ms_engine_vmm_map_amap(uint64_t va, uint64_t bytes, uint64_t chunk_bytes,
                           const uint64_t *tokens);
int ms_engine_vmm_map(uint64_t va, uint64_t bytes, void *host, bool has_data);
int ms_engine_vmm_unmap(uint64_t va, uint64_t bytes, bool keep, bool *handled, uint64_t *tokens,
                        size_t ntokens, bool *kept);
void ms_engine_vmm_host_free(const uint64_t *tokens, size_t n);
bool ms_engine_vmm_owns(uint64_t va);
/*
 * Device memory taken from the driver past the engine (a cuMemCreate the shim does not
 * virtualize: delta > 0; its release: delta < 0). Running alone it counts against the budget
 * (the engine keeps that much less resident); the first time the process holds more device
 * memory than its budget because of it, that is said on stderr (whatever the verbosity).
 */
void ms_engine_driver_mem(int64_t delta);
/*
 * Pointer queries (hook_ptr.c): the facts of the engine region holding p, for answering as the
 * driver would for a cuMemAlloc pointer, whether or not its chunks are mapped or resident:
 * device memory of the engine's context, the region's base and size, a buffer id of its own,
 * not managed, not IPC-capable (its memory moves); a small allocation's block of a slab answers
 * as its own allocation. Returns MS_PTR_ALLOC (out filled), MS_PTR_NONE (not an engine region:
 * VMM engine only, managed-memory engines leave the answers to the driver) or MS_PTR_HOLE
 * (engine memory that no allocation holds: a slab's free space or a block's rounding, answered
 * as the driver answers an address in no allocation). Takes the engine lock.
 */
struct ms_ptrattr_mem;
enum ms_ptr_kind { MS_PTR_NONE = 0, MS_PTR_ALLOC, MS_PTR_HOLE };
enum ms_ptr_kind ms_engine_ptr_info(uint64_t p, struct ms_ptrattr_mem *out);
/*
 * cuPointerSetAttribute(SYNC_MEMOPS, on) for p, as the driver answers it for a cuMemAlloc
 * pointer: the driver refuses it for VMM memory (CUDA_ERROR_NOT_SUPPORTED), which an engine
 * region is underneath, so the engine sets the context-wide CU_CTX_SYNC_MEMOPS instead (what
 * the attribute falls back to for VMM memory) and remembers the value for pointer queries.
 * Returns a CUresult, or -1 (MS_PTRATTR_UNKNOWN) when p is not an engine region of a
 * cuMemAlloc-family allocation (the driver answers). Takes the engine lock.
 */
int ms_engine_ptr_set_sync(uint64_t p, bool on);

/* va lies in any region the engine virtualizes (its memory moves: not shareable by IPC). */
bool ms_engine_owns(uint64_t va);

struct ms_engine_stats {
    uint64_t regions, footprint, resident, budget;
    uint64_t slabs;        /* regions that are slabs of small allocations (core/slab.h) */
    uint64_t slabs_peak;   /* the most at once */
    uint64_t small_allocs; /* allocations placed in slabs */
    uint64_t faults, unbounded, bytes_in, bytes_out, bytes_dropped, migrate_ns;
    uint64_t strict_evictions; /* chunks MSCHED_STRICT evicted */
    uint64_t miss_cmds;        /* admitted commands that ran with named chunks off the device */
    uint64_t miss_chunks;      /* those chunks, summed over the commands */
    uint64_t miss_unbounded;   /* commands of unknown reach admitted with allocations off it */
    uint64_t host_chunks, host_bytes; /* host chunks created (always-mapped regions) */
    uint64_t host_ns;                 /* time making an allocation's host chunks */
    uint64_t host_placed;             /* allocations that started on host chunks (no room) */
    uint64_t prep_chunks, prep_bytes; /* host chunks made ahead of an eviction (PREPARE) */
    uint64_t prep_ns;                 /* time making them */
    uint64_t trim_chunks, trim_bytes; /* pooled host chunks given back after idling */
    uint64_t bare_left;               /* evicted chunks left bare (MSCHED_DEFER_HOST_MAP) */
    uint64_t bare_mapped;             /* ... mapped afterwards, between the daemon's messages */
    uint64_t bare_gate;               /* ... mapped just before a command was admitted */
    uint64_t bare_ns;                 /* time mapping them afterwards (both kinds) */
    uint64_t host_limited;  /* faults that moved nothing: host chunks over the host memory limit */
    uint64_t capture_skips; /* faults that moved nothing: a stream capture was open */
    uint64_t tmpl_kernels;  /* kernels in the template store loaded (MSCHED_TEMPLATES) */
    uint64_t tmpl_launches; /* launches predicted with a kernel's template */
    uint64_t tmap_launches; /* launches whose TMA tensor maps bounded their prediction */
    bool daemon;            /* connected to the daemon now */
    bool failed;            /* the daemon went away and the footprint could not be held alone */
};
void ms_engine_stats_get(struct ms_engine_stats *out);

/* In a forked child (from the shim's pthread_atfork child handler). */
void ms_engine_atfork_child(void);

/* At exit: stops the daemon client; summary lines when verbose. */
void ms_engine_exit(bool verbose);

#endif /* MS_SHIM_ENGINE_H */
