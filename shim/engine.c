/*
 * engine.c - virtual device memory under a budget, inside the application (contract: engine.h).
 *
 * State: one region table (task 0 = this process), the CUDA seam (gpu/cuda), a history ring of
 * the chunks recent launches used, and statistics, all under E.lock. The daemon client's
 * service thread needs the lock to answer any order, a STOP included, so slow driver calls that
 * touch none of this state (reserving an allocation's range, pinning or unpinning its host
 * backing: seconds for GiBs) run without it.
 *
 * History and the predicted future. Every gated command appends the chunks it uses to a ring
 * (consecutive repeats skipped). At a fault the future is predicted by assuming the process
 * repeats itself: find the most recent earlier use of the faulting command's first chunk; what
 * followed it then is what comes next now, then the older history. The planner gets the
 * faulting command's chunks plus the next `prefetch` bytes of that future as ws[0] (populated in
 * that order) and the rest, in groups, as ws[1..] for OPT's next-use distances.
 *
 * Pointer tables. A small host-to-device copy into a region is scanned for addresses of other
 * regions (cuBLAS-style pointer arrays are built on the host and copied over); those regions
 * become the destination region's references and are made resident with it whenever a launch
 * names it. A copy to the region's first byte starts a new table (the old references go).
 * Pointers that kernels write into device memory cannot be seen (docs/engine.md).
 *
 * Modes. ALONE: the engine faults chunks in itself under its own budget (MSCHED_BUDGET).
 * DAEMON: connected to mschedd (client.h): the daemon's budget, its orders move memory, the
 * gate waits for RUN and asks the daemon (DEMAND) instead of faulting. FAILED: the daemon went
 * away and the footprint cannot be held alone: every gated command fails (said once). A daemon
 * that goes away turns DAEMON into ALONE (under MSCHED_BUDGET when set, else with everything
 * resident when it fits the GPU's free memory) or FAILED; nothing goes back to DAEMON.
 */
#include "shim/engine.h"
#include "shim/locks.h"

#include "shim/accuracy.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/hostmem.h"
#include "shim/shim_int.h"

#include "core/exec.h"
#include "core/history.h"
#include "core/plan.h"
#include "core/predict.h"
#include "core/region.h"
#include "gpu/cuda/gpu_cuda.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern const char *const ms_hash_ptx; /* generated from gpu/cuda/hash.cu; NULL without nvcc */

#define HIST_CAP 65536u        /* chunk ids remembered */
#define GROUP 4u               /* ids per future working set handed to OPT */
#define MAX_REFS 64u           /* regions one pointer table may reference */
#define SCAN_LIMIT (64 * 1024) /* largest host-to-device copy scanned for pointers */

struct refs {
    uint32_t n;
    uint32_t region[MAX_REFS];
};

/* What an instantiated graph reaches: regions (id and base, so a freed and reused slot is
 * noticed), or everything. */
struct graph_reach {
    const void *exec;
    bool unbounded;
    uint32_t n, cap;
    struct {
        uint32_t id;
        uint64_t base;
    } * reg;
};

enum mode { MODE_ALONE = 0, MODE_DAEMON, MODE_FAILED };
/* How regions are backed (MSCHED_ENGINE): VMM chunks, or managed memory moved by prefetches
 * (UNIFIED) or brought in by the GPU's page faults (DEMAND, the demand-paging baseline). */
enum backing { BACK_VMM = 0, BACK_UNIFIED, BACK_DEMAND };
static const char *const backing_name[] = {"vmm", "unified", "demand"};

static struct {
    struct ms_lock lock;
    bool want, active, broken;
    enum mode mode;
    enum backing backing;
    uint64_t budget, prefetch;
    uint64_t alone_budget; /* MSCHED_BUDGET (0: none) */
    bool strict_want;      /* MSCHED_STRICT=1 */
    bool strict;           /* ... and on: alone, VMM (decided at start) */
    CUcontext ctx;
    struct ms_rtable rt;
    struct ms_cuda_api api;
    struct ms_gpu_cuda *gpu;
    const struct ms_gpu_ops *ops;
    struct ms_history hist;
    struct refs *refs; /* indexed by region slot */
    size_t nrefs;
    struct ms_chunk_set need, scratch;
    struct ms_chunk_set *ws;
    size_t nws, capws;
    struct ms_plan plan;
    struct graph_reach *graphs;
    size_t ngraphs, capgraphs;
    struct ms_engine_stats st;
    int acc_state; /* 0 not asked, 1 to start (outside the lock), 2 started or refused */
} E = {.lock = MS_LOCK_INIT(MS_LK_ENGINE, "engine")};

#define say ms__shim_say
#define now_ns ms__shim_now_ns

static bool all_ready(const struct ms_chunk_set *s);
static int exec_sets(const struct ms_chunk_set *evict, const struct ms_chunk_set *pop,
                     struct ms_exec_stats *st);
static int predict(const struct ms_chunk_set *need, uint64_t next_cap,
                   struct ms_chunk_set *out_next, uint64_t recent_cap,
                   struct ms_chunk_set *out_recent);
static void admitted(const struct ms_chunk_set *need);
static void daemon_gone(const char *why);

/* What the daemon client may do with the engine (client.h). */
static const struct ms_client_engine client_ops = {
    .lock = &E.lock,
    .rt = &E.rt,
    .all_ready = all_ready,
    .exec = exec_sets,
    .predict = predict,
    .admitted = admitted,
    .daemon_gone = daemon_gone,
};

void ms_engine_configure(void)
{
    ms_client_attach(&client_ops);
    ms_lock(&E.lock);
    uint64_t budget = ms__shim_opt(MS_OPT_BUDGET);
    uint64_t engine = ms__shim_opt(MS_OPT_ENGINE);
    E.strict_want = ms__shim_opt(MS_OPT_STRICT) != 0;
    E.budget = budget;
    E.alone_budget = budget;
    E.want = (budget > 0 || ms_client_allowed()) && engine != MS_ENGINE_OFF;
    E.backing = engine == MS_ENGINE_UNIFIED  ? BACK_UNIFIED
                : engine == MS_ENGINE_DEMAND ? BACK_DEMAND
                                             : BACK_VMM;
    E.prefetch = budget / 4;
    ms_rtable_init(&E.rt);
    ms_chunk_set_init(&E.need);
    ms_chunk_set_init(&E.scratch);
    ms_plan_init(&E.plan);
    E.st.budget = budget;
    if (E.want && ms_history_init(&E.hist, HIST_CAP) != MS_OK) {
        ms__shim_say("memory engine disabled: no memory for its history");
        E.want = false;
    }
    ms_unlock(&E.lock);
}

/* active and broken are read without the lock (the hooks' fast paths): atomic accesses. */
static bool is_active(void)
{
    return __atomic_load_n(&E.active, __ATOMIC_ACQUIRE);
}
static void set_flag(bool *f, bool v)
{
    __atomic_store_n(f, v, __ATOMIC_RELEASE);
}

bool ms_engine_active(void)
{
    return E.want && !__atomic_load_n(&E.broken, __ATOMIC_ACQUIRE);
}

/*
 * The primary context the daemon client runs its orders in stays alive as long as the engine
 * may use it. A CUDA runtime program releases the primary context it retained as it exits,
 * before libmsched's destructor has shut the client down, and that release to zero destroys
 * the context under whatever order the daemon sent meanwhile (on the H200: "migration failed:
 * ... unknown error" as one process exited in 17 of 92 sweep runs, every one after its work was
 * done, the daemon then waiting for the failed order). The engine takes a reference of its own when
 * its context is the device's active primary context (checked first, so nothing is ever created)
 * and never gives it back: the engine lives until the process ends, and the driver's teardown frees
 * the context then.
 */
static void hold_primary(CUcontext ctx, CUdevice dev)
{
    unsigned int flags = 0;
    int on = 0;
    CUcontext p = NULL;
    if (MS_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &on) != CUDA_SUCCESS || !on)
        return;
    if (MS_REAL(cuDevicePrimaryCtxRetain)(&p, dev) != CUDA_SUCCESS)
        return;
    if (p != ctx)
        MS_REAL(cuDevicePrimaryCtxRelease_v2)(dev); /* the engine runs in a context of its own */
}

/*
 * The driver also shuts itself down as the process exits, in an exit handler registered as it
 * initialises, and an order that runs after that fails (on the H200, with the reference above
 * held, still one process in 26 sweep runs: "cuMemcpyDtoHAsync: unknown error" after its work
 * was done). Exit handlers run in reverse order of registration and library destructors after
 * all of them, so the engine leaves the daemon in an exit handler registered when it starts
 * (after cuInit: it runs before the driver's). ms_client_shutdown may run twice; libmsched's
 * destructor calls it again. A process that ends without running exit handlers (_exit, a
 * signal) just closes its socket, and the daemon drops the task.
 */
static void leave_daemon_at_exit(void)
{
    ms_client_shutdown();
}

/*
 * Start on the first allocation, in the caller's (current) context. Lock held. With a daemon
 * (its socket exists) the engine connects first; without one, it runs alone under
 * MSCHED_BUDGET, or not at all (no driver call is made then: the shim only observes).
 */
static bool start(void)
{
    if (is_active())
        return true;
    if (E.broken)
        return false;
    bool daemon = ms_client_available();
    if (!daemon && E.alone_budget == 0) {
        set_flag(&E.broken, true);
        return false;
    }
    CUcontext ctx = NULL;
    if (MS_REAL(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx)
        return false; /* no context: let the driver report it */
    struct ms_client_welcome w = {0};
    CUdevice dev = 0;
    if (MS_REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS || dev < 0)
        dev = 0;
    if (daemon) {
        int c = ms_client_connect((unsigned)dev, E.alone_budget, &w);
        if (c != MS_OK) {
            ms__shim_log("no daemon (%s); %s", ms_strerror(c),
                         E.alone_budget ? "running alone" : "memory engine off");
            daemon = false;
            if (!E.alone_budget) {
                set_flag(&E.broken, true);
                return false;
            }
        }
    }
    const char *missing = NULL;
    void *h = ms__shim_real_handle();
    int e = h ? ms_cuda_api_load(&E.api, h, &missing) : MS_E_NOTFOUND;
    if (e == MS_OK && E.backing != BACK_VMM) {
        e = ms_gpu_cuda_new_unified(&E.api, E.backing == BACK_DEMAND, &E.gpu);
        if (e == MS_E_NOTFOUND)
            missing = "cuMemPrefetchAsync_v2 or cuMemAllocManaged in the driver";
    } else if (e == MS_OK) {
        e = ms_gpu_cuda_new(&E.api, ms_hash_ptx, 0, &E.gpu);
    }
    if (e != MS_OK) {
        say("memory engine disabled: %s", missing ? missing : ms_strerror(e));
        set_flag(&E.broken, true);
        if (daemon)
            ms_client_close();
        return false;
    }
    E.ops = ms_gpu_cuda_ops(E.gpu);
    E.ctx = ctx;
    E.mode = MODE_ALONE;
    if (daemon) {
        E.mode = MODE_DAEMON;
        E.budget = w.budget;
        E.st.budget = w.budget;
        hold_primary(ctx, dev);
        static bool exit_hook; /* under the lock; a child after fork inherits it */
        if (!exit_hook) {
            exit_hook = atexit(leave_daemon_at_exit) == 0;
            if (!exit_hook)
                ms__shim_log("no exit handler: the daemon client stops only at unload");
        }
        if (ms_client_start(ctx) != MS_OK) {
            /* No service thread: run alone (or observe only) from the start. */
            E.mode = MODE_ALONE;
            E.budget = E.alone_budget;
            E.st.budget = E.budget;
            if (!E.alone_budget) {
                ms_gpu_cuda_free(E.gpu);
                E.gpu = NULL;
                E.ops = NULL;
                set_flag(&E.broken, true);
                return false;
            }
        }
    }
    E.prefetch = E.budget / 4;
    if (E.strict_want && (E.mode != MODE_ALONE || E.backing != BACK_VMM))
        say("MSCHED_STRICT=1 needs the VMM engine without the daemon; strict mode off");
    E.strict = E.strict_want && E.mode == MODE_ALONE && E.backing == BACK_VMM;
    if (E.strict)
        say("MSCHED_STRICT=1: every command runs with only its predicted memory mapped");
    ms__shim_log("memory engine on (%s): %s, budget %llu MiB, GPU hash %s", backing_name[E.backing],
                 E.mode == MODE_DAEMON ? "with the daemon" : "alone",
                 (unsigned long long)(E.budget / MS_MIB), E.ops->hash ? "on" : "off");
    __atomic_store_n(&E.acc_state, 1, __ATOMIC_RELEASE);
    set_flag(&E.active, true);
    return true;
}

/* The address range of a region: a reservation, or the managed allocation itself. */
static void release_va(CUdeviceptr va, uint64_t span)
{
    if (E.backing != BACK_VMM)
        E.api.cuMemFree(va);
    else
        MS_REAL(cuMemAddressFree)(va, span);
}

/*
 * Managed memory is never allocated beyond what the GPU could hold: the process's whole managed
 * footprint must fit the device memory free now plus what the engine holds resident, so the
 * driver never has to oversubscribe the card (the budget, not the card, is what is exceeded).
 */
static bool managed_room(uint64_t span)
{
    size_t fr = 0, tot = 0;
    if (MS_REAL(cuMemGetInfo_v2)(&fr, &tot) != CUDA_SUCCESS)
        return false;
    uint64_t room = (uint64_t)fr + E.rt.resident_bytes;
    if (E.st.footprint + span <= room)
        return true;
    say("%s engine: refusing %llu MiB more managed memory: %llu MiB would exceed the %llu MiB "
        "the GPU can hold now",
        backing_name[E.backing], (unsigned long long)(span / MS_MIB),
        (unsigned long long)((E.st.footprint + span) / MS_MIB),
        (unsigned long long)(room / MS_MIB));
    return false;
}

static bool mine_ctx(void)
{
    CUcontext ctx = NULL;
    return MS_REAL(cuCtxGetCurrent)(&ctx) == CUDA_SUCCESS && ctx == E.ctx;
}

/* A new region at [va, va + bytes) with host backing `host` (lock held): table, pointer-table
 * slot, statistics, the daemon told. */
static int region_new(uint64_t va, uint64_t bytes, enum ms_region_kind kind, void *host,
                      uint32_t *out)
{
    uint32_t id = 0;
    int e = ms_region_add(&E.rt, 0, va, bytes, kind, 0, &id);
    if (e == MS_OK && id >= E.nrefs) {
        size_t n = E.nrefs ? E.nrefs * 2 : 64;
        while (n <= id)
            n *= 2;
        struct refs *p = realloc(E.refs, n * sizeof(*p));
        if (!p) {
            ms_region_remove(&E.rt, id);
            return MS_E_NOMEM;
        }
        memset(p + E.nrefs, 0, (n - E.nrefs) * sizeof(*p));
        E.refs = p;
        E.nrefs = n;
    }
    if (e != MS_OK)
        return e;
    ms_region_get(&E.rt, id)->host = host;
    E.refs[id].n = 0;
    E.st.regions++;
    E.st.footprint += MS_ROUND_UP(bytes, MS_GRAN);
    if (E.mode == MODE_DAEMON)
        ms_client_region_add(id, va, bytes, ms_chunk_bytes_for(bytes));
    *out = id;
    return MS_OK;
}

/* Release region id's device memory and forget it (lock held, device idle). The caller owns
 * the address range and the host backing. */
static int region_drop(uint32_t id)
{
    uint64_t span = MS_ROUND_UP(ms_region_get(&E.rt, id)->size, MS_GRAN);
    int e = ms_exec_free_region(&E.rt, E.ops, id);
    if (e != MS_OK)
        return e;
    E.refs[id].n = 0;
    /* Drop references to the freed region from every pointer table. */
    for (size_t i = 0; i < E.nrefs; i++)
        for (uint32_t k = 0; k < E.refs[i].n;)
            if (E.refs[i].region[k] == id)
                E.refs[i].region[k] = E.refs[i].region[--E.refs[i].n];
            else
                k++;
    if (E.mode == MODE_DAEMON)
        ms_client_region_free(id); /* its device memory is released: the daemon may reuse it */
    E.st.regions--;
    E.st.footprint -= span;
    return MS_OK;
}

int ms_engine_alloc(uint64_t *dptr, uint64_t bytes, bool *handled)
{
    *handled = false;
    if (!ms_engine_active() || bytes == 0)
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    if (!start() || !mine_ctx()) {
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    uint64_t span = MS_ROUND_UP(bytes, MS_GRAN);
    CUdeviceptr va = 0;
    void *host = NULL;
    CUresult r;
    if (E.backing != BACK_VMM) {
        r = managed_room(span) ? E.api.cuMemAllocManaged(&va, span, CU_MEM_ATTACH_GLOBAL)
                               : CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        /* Pinning GiBs of host backing takes seconds: not under the lock, where the service
         * thread (a STOP, an order) and every launch would wait for it. */
        ms_unlock(&E.lock);
        r = MS_REAL(cuMemAddressReserve)(&va, span, 0, 0, 0);
        if (r == CUDA_SUCCESS)
            r = ms__host_pin(span, ms_chunk_bytes_for(bytes), &host);
        ms_lock(&E.lock);
    }
    uint32_t id = 0;
    int e = MS_OK;
    if (r == CUDA_SUCCESS)
        e = region_new(va, bytes, MS_RK_DEVICE, host, &id);
    if (r != CUDA_SUCCESS || e != MS_OK) {
        ms__host_unpin(host); /* the allocation fails either way */
        if (va)
            release_va(va, span);
        ms_unlock(&E.lock);
        *handled = true;
        /* No room for the range or its backing store: what cuMemAlloc says when memory is
         * short (the reservation of an absurd size is refused as an invalid value). */
        return r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_OUT_OF_MEMORY
                                                                  : (int)r;
    }
    *dptr = va;
    *handled = true;
    ms_unlock(&E.lock);
    return CUDA_SUCCESS;
}

int ms_engine_free(uint64_t dptr, bool *handled)
{
    *handled = false;
    if (!is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    uint32_t id;
    struct ms_region *r = NULL;
    if (ms_rtable_lookup(&E.rt, 0, dptr, &id, NULL) == MS_OK)
        r = ms_region_get(&E.rt, id);
    if (!r || r->base != dptr) {
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    *handled = true;
    /* cuMemFree waits for the device; so does this: nothing in flight may use it. */
    MS_REAL(cuCtxSynchronize)();
    uint64_t span = MS_ROUND_UP(r->size, MS_GRAN);
    void *host = r->host;
    if (r->kind == MS_RK_VMM) {
        ms_unlock(&E.lock);
        return CUDA_ERROR_INVALID_VALUE; /* the application's own mapping: not cuMemFree's */
    }
    int e = region_drop(id);
    if (e != MS_OK) {
        ms_unlock(&E.lock);
        say("cannot release an allocation: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
        return CUDA_ERROR_UNKNOWN;
    }
    ms_unlock(&E.lock);
    /* The region is forgotten: its range and host backing are this thread's to release, and
     * unpinning takes long enough (as pinning does) to keep it out of the lock. */
    release_va(dptr, span);
    /* The device memory is gone whatever the driver says about the host store; a failure to
     * release that is counted in the exit summary, not returned for a free that happened. */
    ms__host_unpin(host);
    return CUDA_SUCCESS;
}

/* ---- the application's own VMM mappings (hook_vmm.c) ----------------------------------------- */

bool ms_engine_vmm_ready(void)
{
    if (!ms_engine_active())
        return false;
    ms_lock(&E.lock);
    bool ok = start() && mine_ctx();
    ms_unlock(&E.lock);
    return ok;
}

/* Carry out E.plan, pipelined, inside the host-memory gate (hostmem.h): no pin call of this
 * process runs beside the migration's copies. Caller holds E.lock. */
static int exec_plan(uint64_t budget, struct ms_exec_stats *x)
{
    struct ms_exec_opts o = {.pipelined = true, .hash_clean = true};
    ms__host_gate_enter();
    int e = ms_exec_plan(&E.rt, E.ops, budget, &E.plan, &o, x);
    ms__host_gate_leave();
    return e;
}
static int plan_step(enum ms_step_op op, ms_chunk_id id);
static int add_region_chunks(struct ms_chunk_set *s, uint32_t region);

int ms_engine_vmm_map(uint64_t va, uint64_t bytes, void *host, bool has_data)
{
    if (!is_active())
        return CUDA_ERROR_NOT_SUPPORTED;
    ms_lock(&E.lock);
    uint32_t id;
    int e = region_new(va, bytes, MS_RK_VMM, host, &id);
    int rc = e == MS_OK ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (e == MS_OK && has_data && ms_region_mark_host(&E.rt, id) != MS_OK) {
        region_drop(id);
        rc = CUDA_ERROR_UNKNOWN;
    }
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_vmm_unmap(uint64_t va, uint64_t bytes, bool *handled)
{
    *handled = false;
    if (!is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    uint32_t id;
    struct ms_region *r = NULL;
    if (ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK)
        r = ms_region_get(&E.rt, id);
    if (!r || r->kind != MS_RK_VMM || r->base != va || r->size != bytes) {
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    *handled = true;
    /* The handle keeps its contents across an unmap: evict what is resident to the host
     * backing (which is the handle's), then release the device memory. */
    MS_REAL(cuCtxSynchronize)();
    E.plan.n = 0;
    E.plan.evict_bytes = E.plan.populate_bytes = 0;
    ms_rtable_clear_marks(&E.rt);
    int e = MS_OK;
    for (uint32_t k = 0; k < r->nchunks && e == MS_OK; k++)
        if (ms_chunk_state_resident((enum ms_chunk_state)r->chunks[k].state))
            e = plan_step(MS_STEP_EVICT, MS_CHUNK_ID(id, k));
    if (e == MS_OK && E.plan.n) {
        struct ms_exec_stats x;
        memset(&x, 0, sizeof(x));
        e = exec_plan(UINT64_MAX, &x);
        E.st.bytes_out += x.bytes_out;
        E.st.bytes_dropped += x.bytes_dropped;
    }
    if (e == MS_OK)
        e = region_drop(id);
    ms_unlock(&E.lock);
    if (e != MS_OK) {
        say("cannot unmap an application mapping: %s (%s)", ms_strerror(e),
            ms_gpu_cuda_last_error(E.gpu));
        return CUDA_ERROR_UNKNOWN;
    }
    return CUDA_SUCCESS;
}

bool ms_engine_owns(uint64_t va)
{
    if (!is_active())
        return false;
    ms_lock(&E.lock);
    uint32_t id;
    bool yes = ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK;
    ms_unlock(&E.lock);
    return yes;
}

bool ms_engine_vmm_owns(uint64_t va)
{
    if (!is_active())
        return false;
    ms_lock(&E.lock);
    uint32_t id;
    bool yes = ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK &&
               ms_region_get(&E.rt, id)->kind == MS_RK_VMM;
    ms_unlock(&E.lock);
    return yes;
}

static int add_region_chunks(struct ms_chunk_set *s, uint32_t region)
{
    struct ms_region *r = ms_region_get(&E.rt, region);
    for (uint32_t k = 0; r && k < r->nchunks; k++) {
        int e = ms_chunk_set_add(s, MS_CHUNK_ID(region, k));
        if (e)
            return e;
    }
    return MS_OK;
}

/*
 * Application VMM mappings that touch each other form one span (an expandable segment): a
 * pointer into one of them says nothing about where its object ends, which may be in the next
 * mapping. Add every mapping contiguous with an application mapping in `s` (normalized after).
 */
static int add_vmm_neighbors(struct ms_chunk_set *s)
{
    size_t n = s->n;
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        uint32_t reg = MS_CHUNK_REGION(s->ids[i]);
        const struct ms_region *r = ms_region_get(&E.rt, reg);
        if (reg == last || !r || r->kind != MS_RK_VMM)
            continue;
        last = reg;
        for (int dir = -1; dir <= 1; dir += 2) {
            const struct ms_region *cur = r;
            for (;;) {
                uint64_t probe =
                    dir < 0 ? cur->base - 1 : cur->base + MS_ROUND_UP(cur->size, MS_GRAN);
                uint32_t nb;
                if (ms_rtable_lookup(&E.rt, 0, probe, &nb, NULL) != MS_OK)
                    break;
                const struct ms_region *q = ms_region_get(&E.rt, nb);
                if (q->kind != MS_RK_VMM)
                    break;
                int e = add_region_chunks(s, nb);
                if (e)
                    return e;
                cur = q;
            }
        }
    }
    ms_chunk_set_normalize(s);
    return MS_OK;
}

/* Add the chunks of the regions that the pointer tables in `s` reference (one level). */
static int add_refs(struct ms_chunk_set *s)
{
    size_t n = s->n;
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        uint32_t reg = MS_CHUNK_REGION(s->ids[i]);
        if (reg == last || reg >= E.nrefs)
            continue;
        last = reg;
        for (uint32_t k = 0; k < E.refs[reg].n; k++) {
            int e = add_region_chunks(s, E.refs[reg].region[k]);
            if (e)
                return e;
        }
    }
    ms_chunk_set_normalize(s);
    return MS_OK;
}

static bool all_ready(const struct ms_chunk_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct ms_chunk *c = ms_chunk_get(&E.rt, s->ids[i]);
        if (!c || !ms_chunk_state_ready(c->state))
            return false;
    }
    return true;
}

/* Make `need` resident (lock held). Returns a CUresult. */
static int fault(struct ms_chunk_set *need, bool unbounded)
{
    uint64_t t0 = now_ns();
    MS_REAL(cuCtxSynchronize)(); /* nothing in flight may use a victim */
    int e = MS_E_NOSPACE;
    for (int attempt = 0; attempt < 2 && e == MS_E_NOSPACE; attempt++) {
        e = ms_history_plan_sets(&E.hist, &E.rt, need, attempt == 0 ? E.prefetch : 0, GROUP, &E.ws,
                                 &E.capws, &E.nws);
        if (e)
            break;
        struct ms_plan_input in = {
            .rt = &E.rt, .budget = E.budget, .ws = E.ws, .nws = E.nws, .policy = MS_EVICT_OPT};
        e = ms_plan_build(&in, &E.plan);
    }
    if (e == MS_E_NOSPACE) {
        say("%s needs %llu MiB resident, more than the budget of %llu MiB: refused",
            unbounded ? "a launch msched cannot bound (whole footprint)" : "a command",
            (unsigned long long)(ms_chunk_set_bytes(need, &E.rt) / MS_MIB),
            (unsigned long long)(E.budget / MS_MIB));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct ms_exec_stats st;
    memset(&st, 0, sizeof(st));
    e = exec_plan(E.budget, &st);
    E.st.faults++;
    E.st.bytes_in += st.bytes_in;
    E.st.bytes_out += st.bytes_out;
    E.st.bytes_dropped += st.bytes_dropped;
    E.st.migrate_ns += now_ns() - t0;
    if (e != MS_OK) {
        say("migration failed: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
        return e == MS_E_NOSPACE ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    }
    if (!all_ready(need)) {
        say("migration left memory a command needs non-resident: refused");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* MSCHED_STRICT: evict every resident chunk `need` does not name, so that a command reaching
 * past its prediction touches unmapped memory (lock held). Returns a CUresult. */
static int strict_evict(const struct ms_chunk_set *need)
{
    ms_rtable_clear_marks(&E.rt);
    for (size_t i = 0; i < need->n; i++) {
        struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        if (c)
            c->mark = 1;
    }
    ms_chunk_set_clear(&E.scratch);
    for (uint32_t r = 0; r < E.rt.nslots; r++) {
        const struct ms_region *g = &E.rt.regions[r];
        for (uint32_t k = 0; g->live && k < g->nchunks; k++)
            if (ms_chunk_state_ready((enum ms_chunk_state)g->chunks[k].state) &&
                !g->chunks[k].mark && ms_chunk_set_add(&E.scratch, MS_CHUNK_ID(r, k)))
                return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!E.scratch.n)
        return CUDA_SUCCESS;
    MS_REAL(cuCtxSynchronize)(); /* nothing in flight may use a victim */
    E.st.strict_evictions += E.scratch.n;
    return exec_sets(&E.scratch, NULL, NULL) == MS_OK ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

static void admitted(const struct ms_chunk_set *need)
{
    for (size_t i = 0; i < need->n; i++)
        ms_chunk_apply(&E.rt, need->ids[i], MS_CE_TOUCH);
    ms_history_append(&E.hist, need);
}

/*
 * need is filled (normalized); gate it. Lock held (released while a daemon-mode gate waits, so
 * `need` may be E.need only until the client copies it). With the daemon every command waits
 * for RUN, even one that touches no region (time slicing); alone only memory matters.
 */
static int gate(struct ms_chunk_set *need, bool unbounded, struct ms_shim_stream s)
{
    int rc = CUDA_SUCCESS;
    if (E.mode == MODE_DAEMON) {
        struct ms_chunk_set own;
        ms_chunk_set_init(&own);
        bool alone = false;
        rc = ms_client_gate(&need, &own, unbounded, s, &alone);
        if (!alone) {
            ms_chunk_set_fini(&own);
            return rc;
        }
        /* The daemon went away while the command waited: gate it alone. */
        if (need == &own) {
            ms_chunk_set_clear(&E.need);
            for (size_t i = 0; i < own.n && rc == CUDA_SUCCESS; i++)
                if (ms_chunk_set_add(&E.need, own.ids[i]))
                    rc = CUDA_ERROR_OUT_OF_MEMORY;
            need = &E.need;
        }
        ms_chunk_set_fini(&own);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    if (E.mode == MODE_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (E.strict && (rc = strict_evict(need)) != CUDA_SUCCESS)
        return rc;
    if (!need->n)
        return CUDA_SUCCESS;
    if (!all_ready(need))
        rc = fault(need, unbounded);
    if (rc == CUDA_SUCCESS)
        admitted(need);
    return rc;
}

/* ---- for the daemon client (client.h; lock held) ------------------------------------------- */

static int plan_step(enum ms_step_op op, ms_chunk_id id)
{
    int e = ms_grow((void **)&E.plan.steps, &E.plan.cap, E.plan.n + 1, sizeof(E.plan.steps[0]));
    if (e)
        return e;
    E.plan.steps[E.plan.n++] = (struct ms_plan_step){.op = (uint8_t)op, .chunk = id};
    return MS_OK;
}

static int exec_sets(const struct ms_chunk_set *evict, const struct ms_chunk_set *pop,
                     struct ms_exec_stats *st)
{
    uint64_t t0 = now_ns();
    E.plan.n = 0;
    E.plan.evict_bytes = E.plan.populate_bytes = 0;
    ms_rtable_clear_marks(&E.rt);
    int e = MS_OK;
    for (size_t i = 0; evict && i < evict->n && e == MS_OK; i++) {
        struct ms_chunk *c = ms_chunk_get(&E.rt, evict->ids[i]);
        if (c && ms_chunk_state_ready((enum ms_chunk_state)c->state) && !c->pins && !c->mark) {
            c->mark = 1;
            E.plan.evict_bytes += c->bytes;
            e = plan_step(MS_STEP_EVICT, evict->ids[i]);
        }
    }
    for (size_t i = 0; pop && i < pop->n && e == MS_OK; i++) {
        struct ms_chunk *c = ms_chunk_get(&E.rt, pop->ids[i]);
        if (c && !ms_chunk_state_resident((enum ms_chunk_state)c->state) && !c->mark) {
            c->mark = 1;
            E.plan.populate_bytes += c->bytes;
            e = plan_step(MS_STEP_POPULATE, pop->ids[i]);
        }
    }
    if (e != MS_OK || E.plan.n == 0)
        return e;
    struct ms_exec_stats x;
    memset(&x, 0, sizeof(x));
    e = exec_plan(UINT64_MAX, &x);
    E.st.bytes_in += x.bytes_in;
    E.st.bytes_out += x.bytes_out;
    E.st.bytes_dropped += x.bytes_dropped;
    E.st.migrate_ns += now_ns() - t0;
    if (st) {
        st->bytes_in += x.bytes_in;
        st->bytes_out += x.bytes_out;
        st->bytes_dropped += x.bytes_dropped;
        st->bytes_fresh += x.bytes_fresh;
        st->elapsed_ns += x.elapsed_ns;
        st->hash_ns += x.hash_ns;
        st->issue_ns += x.issue_ns;
        st->wait_ns += x.wait_ns;
        st->map_ns += x.map_ns;
        st->unmap_ns += x.unmap_ns;
    }
    if (e != MS_OK)
        say("migration failed: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
    return e;
}

static int predict(const struct ms_chunk_set *need, uint64_t next_cap,
                   struct ms_chunk_set *out_next, uint64_t recent_cap,
                   struct ms_chunk_set *out_recent)
{
    return ms_history_predict(&E.hist, &E.rt, need, next_cap, out_next, recent_cap, out_recent);
}

static void daemon_gone(const char *why)
{
    if (E.mode != MODE_DAEMON)
        return;
    uint64_t fp = E.st.footprint;
    if (E.alone_budget) {
        E.mode = MODE_ALONE;
        E.budget = E.alone_budget;
        E.prefetch = E.budget / 4;
        E.st.budget = E.budget;
        say("the daemon is gone (%s); running alone under MSCHED_BUDGET (%llu MiB)", why,
            (unsigned long long)(E.budget / MS_MIB));
        return;
    }
    size_t fr = 0, tot = 0;
    if (MS_REAL(cuMemGetInfo_v2)(&fr, &tot) != CUDA_SUCCESS)
        fr = 0;
    uint64_t room = (uint64_t)fr + E.rt.resident_bytes;
    int e = MS_E_NOSPACE;
    if (fp <= room) {
        ms_chunk_set_clear(&E.scratch);
        e = MS_OK;
        for (size_t i = 0; i < E.rt.nslots && e == MS_OK; i++)
            if (E.rt.regions[i].live)
                e = add_region_chunks(&E.scratch, (uint32_t)i);
        if (e == MS_OK) {
            MS_REAL(cuCtxSynchronize)();
            e = exec_sets(NULL, &E.scratch, NULL);
        }
    }
    if (e == MS_OK) {
        E.mode = MODE_ALONE;
        E.budget = room;
        E.prefetch = room / 4;
        E.st.budget = room;
        say("the daemon is gone (%s); running alone with all %llu MiB resident", why,
            (unsigned long long)(fp / MS_MIB));
        return;
    }
    E.mode = MODE_FAILED;
    say("the daemon is gone (%s) and this process's %llu MiB do not fit the %llu MiB the GPU "
        "has free: its GPU work now fails (set MSCHED_BUDGET to run alone under a budget)",
        why, (unsigned long long)(fp / MS_MIB), (unsigned long long)(room / MS_MIB));
}

/* E.need = every chunk of every region (lock held; E.need cleared by the caller). */
static int need_everything(void)
{
    E.st.unbounded++;
    int e = MS_OK;
    for (size_t i = 0; i < E.rt.nslots && e == MS_OK; i++)
        if (E.rt.regions[i].live)
            e = add_region_chunks(&E.need, (uint32_t)i);
    ms_chunk_set_normalize(&E.need);
    return e;
}

int ms_engine_gate_unbounded(struct ms_shim_stream s)
{
    if (!is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    int e = need_everything();
    int rc = e == MS_OK ? gate(&E.need, true, s) : CUDA_ERROR_OUT_OF_MEMORY;
    ms_unlock(&E.lock);
    return rc;
}

/* ---- graphs (lock held) ---------------------------------------------------------------------- */

static struct graph_reach *graph_find(const void *exec)
{
    for (size_t i = 0; i < E.ngraphs; i++)
        if (E.graphs[i].exec == exec)
            return &E.graphs[i];
    return NULL;
}

static void graph_add_region(struct graph_reach *g, uint32_t id)
{
    if (g->unbounded)
        return;
    const struct ms_region *r = ms_region_get(&E.rt, id);
    for (uint32_t i = 0; i < g->n; i++)
        if (g->reg[i].id == id)
            return;
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 8;
        void *p = realloc(g->reg, cap * sizeof(*g->reg));
        if (!p) {
            g->unbounded = true; /* cannot remember: fall back to everything */
            return;
        }
        g->reg = p;
        g->cap = cap;
    }
    g->reg[g->n].id = id;
    g->reg[g->n].base = r->base;
    g->n++;
}

void ms_engine_graph_begin(const void *exec)
{
    if (!is_active() || !exec)
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (!g && E.ngraphs == E.capgraphs) {
        size_t cap = E.capgraphs ? E.capgraphs * 2 : 16;
        void *p = realloc(E.graphs, cap * sizeof(*E.graphs));
        if (p) {
            E.graphs = p;
            E.capgraphs = cap;
        }
    }
    if (!g && E.ngraphs < E.capgraphs) {
        g = &E.graphs[E.ngraphs++];
        memset(g, 0, sizeof(*g));
        g->exec = exec;
    }
    if (g) {
        g->n = 0;
        g->unbounded = false;
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_launch(const void *exec, const struct ms_shim_launch *l)
{
    if (!is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g && (!l->params_known || !l->layout || l->kind == MS_SHIM_LAUNCH_COOP)) {
        g->unbounded = true;
    } else if (g) {
        struct ms_launch ml = {.task = 0,
                               .params = l->params,
                               .params_len = l->params_len,
                               .layout = l->layout,
                               .nlayout = l->nlayout};
        ms_chunk_set_clear(&E.scratch);
        if (ms_predict_launch(&E.rt, &ml, &E.scratch) < 0)
            g->unbounded = true;
        for (size_t i = 0; i < E.scratch.n; i++)
            if (i == 0 ||
                MS_CHUNK_REGION(E.scratch.ids[i]) != MS_CHUNK_REGION(E.scratch.ids[i - 1]))
                graph_add_region(g, MS_CHUNK_REGION(E.scratch.ids[i]));
    }
    ms_unlock(&E.lock);
}

void ms_engine_graph_add_addr(const void *exec, uint64_t addr)
{
    if (!is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    uint32_t id;
    if (g && ms_rtable_lookup(&E.rt, 0, addr, &id, NULL) == MS_OK)
        graph_add_region(g, id);
    ms_unlock(&E.lock);
}

void ms_engine_graph_unbounded(const void *exec)
{
    if (!is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g)
        g->unbounded = true;
    ms_unlock(&E.lock);
}

void ms_engine_graph_forget(const void *exec)
{
    if (!is_active())
        return;
    ms_lock(&E.lock);
    struct graph_reach *g = graph_find(exec);
    if (g) {
        free(g->reg);
        *g = E.graphs[--E.ngraphs];
    }
    ms_unlock(&E.lock);
}

int ms_engine_gate_graph(const void *exec, struct ms_shim_stream s)
{
    if (!is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    struct graph_reach *g = graph_find(exec);
    bool unbounded = !g || g->unbounded;
    for (uint32_t i = 0; g && !unbounded && i < g->n; i++) {
        const struct ms_region *r = ms_region_get(&E.rt, g->reg[i].id);
        if (!r || !r->live || r->base != g->reg[i].base)
            unbounded = true; /* freed since: the graph's reach is no longer known */
        else if (add_region_chunks(&E.need, g->reg[i].id) != MS_OK)
            unbounded = true;
    }
    int e = MS_OK;
    if (unbounded) {
        ms_chunk_set_clear(&E.need);
        e = need_everything();
    } else {
        ms_chunk_set_normalize(&E.need);
        e = add_vmm_neighbors(&E.need);
        if (e == MS_OK)
            e = add_refs(&E.need);
    }
    int rc = e == MS_OK ? gate(&E.need, unbounded, s) : CUDA_ERROR_OUT_OF_MEMORY;
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_launch(const struct ms_shim_launch *l)
{
    if (!is_active())
        return CUDA_SUCCESS;
    int want_acc = 1;
    if (__atomic_compare_exchange_n(&E.acc_state, &want_acc, 2, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        /* Outside the engine lock: CUPTI's start calls into the driver (through the hooks). */
        ms_acc_start(&E.api, E.backing == BACK_DEMAND && E.mode == MODE_ALONE);
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    bool unbounded = !l->params_known || !l->layout || l->kind == MS_SHIM_LAUNCH_COOP;
    int e = MS_OK;
    if (unbounded) {
        e = need_everything();
    } else {
        struct ms_launch ml = {.task = 0,
                               .params = l->params,
                               .params_len = l->params_len,
                               .layout = l->layout,
                               .nlayout = l->nlayout};
        int n = ms_predict_launch(&E.rt, &ml, &E.need);
        e = n < 0 ? n : add_vmm_neighbors(&E.need);
        if (e == MS_OK)
            e = add_refs(&E.need);
    }
    int rc = e == MS_OK ? gate(&E.need, unbounded, l->stream) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && ms_acc_on())
        ms_acc_begin(&E.rt, &E.need, l->name, unbounded);
    ms_unlock(&E.lock);
    if (rc == CUDA_SUCCESS)
        ms_acc_prepare();
    return rc;
}

int ms_engine_gate_ranges(uint64_t a, uint64_t abytes, uint64_t b, uint64_t bbytes,
                          struct ms_shim_stream s)
{
    if (!is_active() || (abytes == 0 && bbytes == 0))
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    /* Both sides in one set: faulting one side in must not evict the other. */
    int64_t in = ms_predict_range(&E.rt, 0, (struct ms_range){a, abytes}, &E.need);
    if (in >= 0)
        in = ms_predict_range(&E.rt, 0, (struct ms_range){b, bbytes}, &E.need);
    int rc = in < 0 ? CUDA_ERROR_OUT_OF_MEMORY : gate(&E.need, false, s);
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_rangev(const uint64_t *addr, const uint64_t *bytes, size_t n,
                          struct ms_shim_stream s)
{
    if (!is_active() || n == 0)
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    int64_t in = 0;
    for (size_t i = 0; i < n && in >= 0; i++)
        if (bytes[i])
            in = ms_predict_range(&E.rt, 0, (struct ms_range){addr[i], bytes[i]}, &E.need);
    int rc = in < 0 ? CUDA_ERROR_OUT_OF_MEMORY : gate(&E.need, false, s);
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_range(uint64_t addr, uint64_t bytes, struct ms_shim_stream s)
{
    return ms_engine_gate_ranges(addr, bytes, 0, 0, s);
}

void ms_engine_gate_end(void)
{
    ms_acc_end();
    ms_client_gate_end();
}

/* A host-to-device copy of a small buffer: remember which regions it points into. */
void ms_engine_note_h2d(uint64_t dst, const void *src, uint64_t bytes)
{
    if (!is_active() || !src || bytes < 8 || bytes > SCAN_LIMIT)
        return;
    ms_lock(&E.lock);
    uint32_t to;
    if (ms_rtable_lookup(&E.rt, 0, dst, &to, NULL) == MS_OK && to < E.nrefs) {
        /* A copy to the start of the region writes a new table: forget the old one's. */
        if (ms_region_get(&E.rt, to)->base == dst)
            E.refs[to].n = 0;
        const unsigned char *p = src;
        for (uint64_t off = 0; off + 8 <= bytes; off += 8) {
            uint64_t v;
            memcpy(&v, p + off, 8);
            uint32_t reg;
            if (v == 0 || ms_rtable_lookup(&E.rt, 0, v, &reg, NULL) != MS_OK || reg == to)
                continue;
            struct refs *rf = &E.refs[to];
            bool seen = false;
            for (uint32_t k = 0; k < rf->n && !seen; k++)
                seen = rf->region[k] == reg;
            if (!seen && rf->n < MAX_REFS)
                rf->region[rf->n++] = reg;
        }
    }
    ms_unlock(&E.lock);
}

void ms_engine_stats_get(struct ms_engine_stats *out)
{
    ms_lock(&E.lock);
    *out = E.st;
    out->resident = E.rt.resident_bytes;
    out->daemon = E.mode == MODE_DAEMON;
    out->failed = E.mode == MODE_FAILED;
    ms_unlock(&E.lock);
}

void ms_engine_atfork_child(void)
{
    ms_lock_reset(&E.lock);
    ms_client_atfork_child();
    if (E.mode == MODE_DAEMON) {
        /* The parent's connection is not the child's: run alone (CUDA in a child of a process
         * that used it is not supported by the driver anyway). */
        E.mode = E.alone_budget ? MODE_ALONE : MODE_FAILED;
        E.budget = E.alone_budget;
    }
}

void ms_engine_exit(bool verbose)
{
    ms_acc_finish();
    ms_client_shutdown();
    if (!is_active() || !verbose)
        return;
    struct ms_engine_stats s;
    ms_engine_stats_get(&s);
    fprintf(stderr,
            "msched[%d]: engine (%s): budget %llu MiB, %llu regions (%llu MiB), %llu MiB resident, "
            "%llu faults, %llu unbounded launches, in %llu MiB, out %llu MiB, dropped %llu MiB, "
            "%.3f s migrating\n",
            (int)getpid(), backing_name[E.backing], (unsigned long long)(s.budget / MS_MIB),
            (unsigned long long)s.regions, (unsigned long long)(s.footprint / MS_MIB),
            (unsigned long long)(s.resident / MS_MIB), (unsigned long long)s.faults,
            (unsigned long long)s.unbounded, (unsigned long long)(s.bytes_in / MS_MIB),
            (unsigned long long)(s.bytes_out / MS_MIB),
            (unsigned long long)(s.bytes_dropped / MS_MIB), (double)s.migrate_ns / 1e9);
    if (E.strict)
        fprintf(stderr, "msched[%d]: strict: %llu chunks evicted outside the predictions\n",
                (int)getpid(), (unsigned long long)s.strict_evictions);
    struct ms_host_stats h;
    ms__host_stats(&h);
    if (h.stores)
        fprintf(stderr,
                "msched[%d]: host backing: %llu stores, %llu MiB pinned in %.3f s (slowest "
                "%.1f ms), %llu in pieces of %llu MiB, %llu fallbacks, %llu release errors; "
                "%llu migrations waited for a pin, %.1f ms (longest %.1f ms)\n",
                (int)getpid(), (unsigned long long)h.stores, (unsigned long long)(h.bytes / MS_MIB),
                (double)h.pin_ns / 1e9, (double)h.longest_ns / 1e6, (unsigned long long)h.pieced,
                (unsigned long long)(h.piece / MS_MIB), (unsigned long long)h.fallbacks,
                (unsigned long long)h.unpin_errors, (unsigned long long)h.gate_waits,
                (double)h.gate_wait_ns / 1e6, (double)h.gate_longest_ns / 1e6);
    struct ms_client_stats c;
    ms_client_stats_get(&c);
    if (c.slices || c.demands)
        fprintf(stderr,
                "msched[%d]: daemon: %s, %llu slices, %llu stops, %llu demands (%llu repeated), "
                "%llu idles (%llu quiet), %llu evict orders, %llu populate orders, %llu waits "
                "(%.3f s), ran %.3f s (%.3f s of it waiting on demands, %.3f s executing orders "
                "under the lock)\n",
                (int)getpid(),
                s.daemon   ? "connected"
                : s.failed ? "gone, failed"
                           : "gone, alone",
                (unsigned long long)c.slices, (unsigned long long)c.stops,
                (unsigned long long)c.demands, (unsigned long long)c.demand_repeats,
                (unsigned long long)c.idles, (unsigned long long)c.quiet_idles,
                (unsigned long long)c.evict_orders, (unsigned long long)c.pop_orders,
                (unsigned long long)c.waits, (double)c.wait_ns / 1e9, (double)c.run_ns / 1e9,
                (double)c.dwait_ns / 1e9, (double)c.order_run_ns / 1e9);
}
