/*
 * engine_int.h - the memory engine's state and the functions its files share (not an interface
 * of anything else; the engine's contract is engine.h).
 *
 * The engine is five files, each above the ones before it (no call goes the other way):
 *   engine_mem.c    the state; regions, pointer tables, chunk sets, plans and their execution
 *   engine_gate.c   the launch gate: admission, faults, MSCHED_STRICT
 *   engine_graph.c  what an instantiated CUDA graph reaches, and its launch's gate
 *   engine.c        configuration, start, modes, the application's VMM mappings, the daemon
 *                   going away, statistics, exit
 *   engine_alloc.c  allocations (regions, small ones in slabs) and their frees
 * Everything here is under E.lock (shim/locks.h level 2) unless said.
 */
#ifndef MS_SHIM_ENGINE_INT_H
#define MS_SHIM_ENGINE_INT_H

#include "shim/engine.h"
#include "shim/locks.h"
#include "shim/shim_int.h"

#include "cuabi/ptrattr.h"

#include "core/exec.h"
#include "core/history.h"
#include "core/plan.h"
#include "core/predict.h"
#include "core/template.h"
#include "core/region.h"
#include "core/slab.h"
#include "gpu/cuda/gpu_cuda.h"

#include <stdbool.h>
#include <stdint.h>

#define HIST_CAP 65536u        /* chunk ids remembered */
#define GROUP 4u               /* ids per future working set handed to OPT */
#define MAX_REFS 64u           /* regions one pointer table may reference */
#define SCAN_LIMIT (64 * 1024) /* largest host-to-device copy scanned for pointers */

/* Per region slot: the regions its pointer table references, and the buffer id pointer
 * queries report for it (unique over the process's life, as the driver's are). */
struct refs {
    uint32_t n;
    uint32_t region[MAX_REFS];
    unsigned long long buffer;
    bool sync_memops;    /* cuPointerSetAttribute(SYNC_MEMOPS) (ms_engine_ptr_set_sync) */
    uint64_t misses;     /* admitted commands that named this region while part of it was off
                          * the device (always mapped: they ran on its host chunks) */
    uint64_t base, size; /* the region's, kept after it is freed (for the exit summary) */
};

/* A freed region's misses, kept when its slot is reused (the exit summary's top regions). */
struct freed_misses {
    uint64_t base, size, misses;
};
#define FREED_MISSES 3

/* What an instantiated graph reaches: regions (id and base, so a freed and reused slot is
 * noticed), each whole or, where every kernel node that names it was predicted by a template,
 * only the chunks in `chunks` (its EMPTY chunks are added at each launch); or everything. */
struct graph_reach {
    const void *exec;
    bool unbounded;
    uint32_t n, cap;
    struct {
        const void *node; /* the top-level graph node it came from */
        uint32_t id;
        uint64_t base, size;
        bool whole;
    } * reg;
    ms_chunk_id *chunks; /* of the regions not whole, ascending */
    size_t nchunks, capchunks;
};

/* Kernels whose launches ran with named chunks on the host (the exit summary's "most" list):
 * a small table by name, the least-missed entry replaced when it is full. */
#define KMISS_MAX 32

/* PREPARE's plan (ms__eng_host_prepare_step): how many host chunks of each size the hint's
 * bytes come to, the most recently used chunks first. Made once per hint (the table's scan and
 * sort would otherwise run under the lock before every chunk), again every PREP_REPLAN steps
 * and after any eviction (which gives chunks host chunks, the pool's among them). */
#define PREP_SIZES 8 /* distinct chunk sizes one plan holds (regions' tails make a few) */
struct prep_plan {
    uint64_t want; /* the hint it was made for (0: none) */
    uint32_t steps;
    size_t ng;
    struct {
        uint64_t bytes;
        uint32_t n;
    } g[PREP_SIZES];
};
#define KMISS_NAME 64
struct kmiss {
    char name[KMISS_NAME]; /* "" = free; truncated */
    uint64_t launches, chunks;
};

enum mode { MODE_ALONE = 0, MODE_DAEMON, MODE_FAILED };
/* How regions are backed (MSCHED_ENGINE): VMM chunks, or managed memory moved by prefetches
 * (UNIFIED) or brought in by the GPU's page faults (DEMAND, the demand-paging baseline). */
enum backing { BACK_VMM = 0, BACK_UNIFIED, BACK_DEMAND };
extern MS_HIDDEN const char *const ms__eng_backing_name[];

struct ms_engine_state {
    struct ms_lock lock;
    bool want, active, broken;
    enum mode mode;
    enum backing backing;
    uint64_t budget, prefetch; /* in force: MSCHED_BUDGET alone, the daemon's, or the free memory */
    bool strict_want;          /* MSCHED_STRICT=1 */
    bool strict;               /* ... and on: alone, VMM (decided at start) */
    bool defer_bare;           /* the plan being executed leaves evicted chunks bare */
    CUcontext ctx;
    CUdevice dev;
    unsigned long long next_buffer; /* buffer ids handed out */
    struct ms_rtable rt;
    struct ms_slabs slabs;  /* small allocations' slabs (core/slab.h), regions of rt */
    bool slab_on;           /* MSCHED_PACK_SMALL */
    uint64_t vmm_fallbacks; /* live application VMM regions that are fallback mappings */
    struct ms_cuda_api api;
    struct ms_gpu_cuda *gpu;
    const struct ms_gpu_ops *ops;
    struct ms_history hist;
    struct refs *refs; /* indexed by region slot */
    size_t nrefs;
    struct freed_misses freed_missed[FREED_MISSES]; /* the most missed regions whose slots
                                                     * were reused, most first */
    struct ms_chunk_set need, scratch;
    struct ms_chunk_set *ws;
    size_t nws, capws;
    struct ms_plan plan;
    struct graph_reach *graphs;
    size_t ngraphs, capgraphs;
    /* Graph launches gated, and of those of unknown reach, why (the exit summary's "graphs"
     * line): without a record, with a record that could not bound a node (graph_why: the first
     * such node), reaching memory freed since with nothing there now; forget_why: the last call
     * that dropped a record. */
    uint64_t graph_gates, graph_walks, graph_norec, graph_unb, graph_freed;
    uint64_t graph_overlap; /* entries freed since, taken as the regions now at their range */
    uint64_t graph_pieces;  /* pieces gated: graphs launched in pieces (shim/graph_pieces.c) */
    uint64_t graph_split;   /* graph launches made as pieces */
    /* MSCHED_PROGRESS_MS with MSCHED_VERBOSE: a progress line at most every progress_ns (0:
     * none), looked at as commands are gated; the next one is due at progress_next. */
    uint64_t progress_ns, progress_next, progress_t0;
    char graph_why[96];
    const char *forget_why;
    struct ms_engine_stats st;
    int acc_state; /* 0 not asked, 1 to start (outside the lock), 2 started or refused */
    /* Running alone: chunks an admitted command uses stay pinned (ms_chunk.pins) until its
     * hook's forwarded call returned (ms_engine_gate_end), so that no other thread's fault
     * evicts them in between; `pinned` counts those pins, `unpinned` is signalled as they go. */
    uint64_t pinned;
    pthread_cond_t unpinned;
    /* Threads in wait_unpinned: only then is `unpinned` signalled (atomic: the settled fast
     * path's end reads it without the lock). */
    uint32_t unpin_waiters;
    /* Running alone: commands admitted whose hooks have not returned (every thread's). A fault
     * migrates only when no other thread's is left: such a command may touch chunks it did not
     * name, and must reach the driver before the cuCtxSynchronize that covers it. Atomic: the
     * settled fast path counts its commands here without the lock. */
    uint64_t admitted;
    /* MSCHED_SETTLED (engine_gate.c, "Settled"): `settled` says, while true, that every chunk is
     * on the device and mapped there, running alone, so a command needs no prediction, history
     * or pin. Set only by a gate under the lock after checking the table; cleared (seq_cst)
     * before anything that may move a chunk or add one (ms__eng_settle_off); read without the
     * lock. */
    bool settle_opt;
    bool settled;
    uint64_t settles;     /* times it became settled (atomic, relaxed) */
    uint64_t fast_cmds;   /* commands admitted by the fast path (atomic, relaxed) */
    uint64_t mispredict;  /* MSCHED_MISPREDICT percent (tests) */
    uint64_t overflow_at; /* 1 + E.st.faults at the last command naming more than the budget */
    uint64_t rng;         /* its generator */
    uint64_t last_missed; /* chunks the last admitted command named that were on the host */
    /* Device memory the application took from the driver past the engine (a cuMemCreate not
     * virtualized): alone, the engine's own budget shrinks by it (alone_budget()). */
    uint64_t driver_bytes;
    bool said_over; /* the process held more than its budget because of it: said once */
    bool said_bare; /* alone, bare chunks could not be mapped before a command: said once */
    struct prep_plan prep;
    struct kmiss kmiss[KMISS_MAX];
    /* Kernel templates (MSCHED_TEMPLATES, core/template.h): loaded at configuration, read-only
     * afterwards; NULL when none. */
    struct ms_tmpl_store *tmpl;
};

/* The engine (engine_mem.c). */
extern MS_HIDDEN struct ms_engine_state ms__engine;
#define E ms__engine

#define say ms__shim_say
#define now_ns ms__shim_now_ns

/* engine.c: start the engine on the first allocation, in the current context (lock held):
 * false when it stays off; whether the current context is the engine's (lock held). */
MS_HIDDEN bool ms__eng_start(void);
MS_HIDDEN bool ms__eng_mine_ctx(void);

/* engine_mem.c: flags, regions, chunk sets, plans (lock held unless said). */
MS_HIDDEN bool ms__eng_is_active(void); /* no lock: an atomic load */
MS_HIDDEN void ms__eng_set_flag(bool *f, bool v);
/* chunk_bytes 0: ms_chunk_bytes_for(bytes). */
MS_HIDDEN int ms__eng_region_new(uint64_t va, uint64_t bytes, enum ms_region_kind kind, void *host,
                                 uint64_t chunk_bytes, uint32_t *out);
MS_HIDDEN int ms__eng_region_drop(uint32_t id);
/* A new allocation's host chunks, made and mapped at its addresses before its region exists. */
struct ms_host_set {
    struct ms_gpu_chunk *c; /* one per chunk of the region-to-be, host chunk in c[k].hchunk */
    size_t n;
    uint64_t ns, bytes; /* time spent making them (not waiting at the gate), their bytes */
};
/* Whether an allocation of `span` bytes fits under the budget now, running alone. */
MS_HIDDEN bool ms__eng_fits(uint64_t span);
/* Map a new region (all EMPTY) to fresh device memory; it becomes always mapped. */
MS_HIDDEN int ms__eng_region_place_device(uint32_t id);
/* Without the lock: host chunks for an allocation at [va, va + bytes), made one per pin call
 * (the migration gate, hostmem.h) and mapped there. All-or-nothing. */
MS_HIDDEN int ms__eng_host_make(uint64_t va, uint64_t bytes, struct ms_host_set *out);
/* Without the lock: undo ms__eng_host_make (nothing left of h). */
MS_HIDDEN void ms__eng_host_unmake(struct ms_host_set *h);
/* Lock held: a new region (all EMPTY, laid out as h) takes h's host chunks: always mapped, every
 * chunk HOST. On success h is emptied; on error (MS_E_INVAL, MS_E_STATE) nothing changes. */
MS_HIDDEN int ms__eng_region_adopt_host(uint32_t id, struct ms_host_set *h);
/* Lock held (released while pinning): every EMPTY chunk of an always-mapped region in `need`
 * (a daemon-mode allocation before its first POPULATE: mapped nowhere) gets a host chunk mapped
 * at its address and becomes HOST, for a command a stream capture records: the driver checks a
 * captured copy's pointers at capture time, and a capture can neither wait for the daemon nor
 * synchronize. `need` is read before the lock is released, never after. A chunk that stopped
 * being EMPTY meanwhile keeps its state (its host chunk is freed). Errors: MS_E_NOMEM, the
 * seam's (some chunks may then be HOST already, each correctly mapped). */
MS_HIDDEN int ms__eng_map_empty_host(const struct ms_chunk_set *need);
/* Lock held (released while pinning): one step of making host chunks ahead of an eviction the
 * daemon expects (its PREPARE, client.h): the resident chunks of always-mapped regions that have
 * no host chunk, most recently used first up to `want` bytes, grouped by size; for the first size
 * the seam's pool holds too few of, one host chunk is made into the pool (one pin call, inside the
 * migration gate), for the eviction's host_new to take. Returns 1 when it made one (call again),
 * 0 when the pool covers them (or the backing has no host chunks), or an MS_E_* code (the host
 * memory limit: MS_E_NOSPACE). */
MS_HIDDEN int ms__eng_host_prepare_step(uint64_t want);
/* Lock held: evict `evict` leaving each always-mapped chunk bare (core/exec.h,
 * defer_host_map; MSCHED_DEFER_HOST_MAP=0 maps them within the eviction): for a process that
 * runs no GPU work until ms__eng_map_bare has mapped them. Like ms__eng_exec_sets otherwise. */
MS_HIDDEN int ms__eng_evict_bare(const struct ms_chunk_set *evict, struct ms_exec_stats *st);
/* Lock held: map the host chunks of up to `max` bare chunks (0: all) at their addresses.
 * `before_command`: a command is about to be admitted (counted apart: those maps are on its
 * path). Returns how many are still bare, or an MS_E_* code. */
MS_HIDDEN int ms__eng_map_bare(size_t max, bool before_command);
MS_HIDDEN void ms__eng_add_exec_stats(const struct ms_exec_stats *x);
/* A launch of kernel `name` ran with `chunks` named chunks on the host (lock held). */
MS_HIDDEN void ms__eng_kernel_missed(const char *name, uint64_t chunks);
/* Commands so far that ran with named chunks off the device (lock held). */
MS_HIDDEN uint64_t ms__eng_misses(void);
/* Host bytes this process holds pinned for msched now: host chunks handed out or pooled, and
 * backing stores; *pool gets the pooled host chunks' part (lock held or not: the counters have
 * their own locks). */
MS_HIDDEN uint64_t ms__eng_host_bytes(uint64_t *pool);
/* Give back the pooled host chunk that sat unused longest, if that is MSCHED_HOST_POOL_IDLE_MS
 * or more (lock held; released while unpinning): 1 gave one back, 0 none to give back. */
MS_HIDDEN int ms__eng_host_trim(void);
/* The host memory limit (MSCHED_HOST_LIMIT, default half the RAM; 0: none). */
MS_HIDDEN uint64_t ms__eng_host_limit(void);
MS_HIDDEN int ms__eng_add_region_chunks(struct ms_chunk_set *s, uint32_t region);
/* MSCHED_SETTLED (engine_gate.c): leave the settled state, before a chunk may move or a region
 * be added (lock held). Commands already admitted by the fast path are counted in `admitted`:
 * a migration waits for them as for any other thread's. */
MS_HIDDEN void ms__eng_settle_off(void);
/* Add to a normalized set the VMM mappings near its VMM mappings / the regions its pointer
 * tables reference; normalized again on return (not re-sorted when nothing was added: a launch
 * naming a large allocation pays no extra pass). Lock held; MS_E_NOMEM. */
MS_HIDDEN int ms__eng_add_vmm_neighbors(struct ms_chunk_set *s);
MS_HIDDEN int ms__eng_add_refs(struct ms_chunk_set *s);
MS_HIDDEN int ms__eng_need_everything(void);
MS_HIDDEN bool ms__eng_all_ready(const struct ms_chunk_set *s);
MS_HIDDEN void ms__eng_admitted(const struct ms_chunk_set *need);
MS_HIDDEN int ms__eng_plan_step(enum ms_step_op op, ms_chunk_id id);
MS_HIDDEN int ms__eng_exec_plan(uint64_t budget, struct ms_exec_stats *x);
MS_HIDDEN int ms__eng_exec_sets(const struct ms_chunk_set *evict, const struct ms_chunk_set *pop,
                                struct ms_exec_stats *st);
MS_HIDDEN int ms__eng_predict(const struct ms_chunk_set *need, uint64_t next_cap,
                              struct ms_chunk_set *out_next, uint64_t recent_cap,
                              struct ms_chunk_set *out_recent);

/* The CUresult that says what an engine error (MS_E_*) means to the application: a budget or
 * host memory that cannot hold what is asked is CUDA_ERROR_OUT_OF_MEMORY, a bad argument
 * CUDA_ERROR_INVALID_VALUE, a region or object that is not there CUDA_ERROR_NOT_FOUND, the
 * GPU seam's failure or anything else CUDA_ERROR_UNKNOWN (after a line on stderr from the
 * caller). MS_OK is CUDA_SUCCESS. */
MS_HIDDEN int ms__eng_cuerr(int e);

/* engine_gate.c: need is filled (normalized); gate it (lock held; see engine_gate.c). */
MS_HIDDEN int ms__eng_gate(struct ms_chunk_set *need, bool unbounded, struct ms_shim_stream s);

#endif /* MS_SHIM_ENGINE_INT_H */
