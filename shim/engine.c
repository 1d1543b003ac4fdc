/*
 * engine.c - virtual device memory under a budget, inside the application (contract: engine.h).
 *
 * This file: configuration, start, modes, allocations, the application's VMM mappings, the
 * daemon going away, statistics and exit; the rest of the engine is below it (engine_int.h).
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
#include "shim/engine_int.h"

#include "shim/accuracy.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/hostmem.h"
#include "shim/tensormap.h"

#include "ipc/ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const char *const ms_hash_ptx; /* generated from gpu/cuda/hash.cu; NULL without nvcc */

/* MSCHED_BUDGET (0: none): what the engine runs under alone; E.budget is the budget in force. */
#define ALONE_BUDGET ms__shim_opt(MS_OPT_BUDGET)

/* The engine's own budget running alone under MSCHED_BUDGET: what device memory taken from
 * the driver past the engine (E.driver_bytes) leaves of it (lock held). */
static uint64_t alone_budget(void)
{
    return ALONE_BUDGET > E.driver_bytes ? ALONE_BUDGET - E.driver_bytes : 0;
}

static void daemon_gone(const char *why);

/* What the daemon client may do with the engine (client.h). */
static const struct ms_client_engine client_ops = {
    .lock = &E.lock,
    .rt = &E.rt,
    .all_ready = ms__eng_all_ready,
    .exec = ms__eng_exec_sets,
    .predict = ms__eng_predict,
    .admitted = ms__eng_admitted,
    .daemon_gone = daemon_gone,
    .misses = ms__eng_misses,
    .host_bytes = ms__eng_host_bytes,
    .host_limit = ms__eng_host_limit,
    .map_empty = ms__eng_map_empty_host,
    .prepare = ms__eng_host_prepare_step,
    .host_trim = ms__eng_host_trim,
    .evict_bare = ms__eng_evict_bare,
    .map_bare = ms__eng_map_bare,
};

/*
 * The kernel templates (MSCHED_TEMPLATES, else the store `msched profile` writes, when there is
 * one): read whole and parsed before the engine starts, read-only afterwards. A store that
 * cannot be read or parsed is said once and ignored: predictions stay whole allocations.
 */
#define MAX_TMPL_BYTES (256u << 20)
static struct ms_tmpl_store *load_templates(void)
{
    char path[4096];
    int how = ms__shim_templates_path(path, sizeof path);
    if (how == 0)
        return NULL;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (how == 1 || errno != ENOENT)
            say("templates: cannot open %s: %s; predicting whole allocations", path,
                strerror(errno));
        return NULL;
    }
    char *buf = NULL, whybuf[160] = "";
    size_t len = 0, cap = 0;
    struct ms_tmpl_store *s = NULL;
    int e = MS_OK;
    for (;;) {
        if (len == cap) {
            char *nb = cap >= MAX_TMPL_BYTES ? NULL : realloc(buf, cap ? 2 * cap : 65536);
            if (!nb) {
                e = cap >= MAX_TMPL_BYTES ? MS_E_INVAL : MS_E_NOMEM;
                if (e == MS_E_INVAL)
                    snprintf(whybuf, sizeof whybuf, "larger than %u MiB", MAX_TMPL_BYTES >> 20);
                break;
            }
            buf = nb;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            e = ferror(f) ? MS_E_IO : MS_OK;
            break;
        }
    }
    fclose(f);
    if (e == MS_OK)
        e = ms_tmpl_store_new(&s);
    if (e == MS_OK)
        e = ms_tmpl_store_parse(s, buf, len, whybuf, sizeof whybuf);
    free(buf);
    if (e != MS_OK) {
        say("templates: %s is not usable (%s%s%s); predicting whole allocations", path,
            ms_strerror(e), whybuf[0] ? ": " : "", whybuf);
        ms_tmpl_store_free(s);
        return NULL;
    }
    ms__shim_log("templates: %zu kernels from %s", ms_tmpl_store_count(s), path);
    return s;
}

void ms_engine_configure(void)
{
    struct ms_tmpl_store *tmpl = NULL;
    if (ms__shim_opt(MS_OPT_ENGINE) == MS_ENGINE_VMM)
        tmpl = load_templates();
    ms_client_attach(&client_ops);
    ms_lock(&E.lock);
    uint64_t budget = ms__shim_opt(MS_OPT_BUDGET);
    uint64_t engine = ms__shim_opt(MS_OPT_ENGINE);
    E.strict_want = ms__shim_opt(MS_OPT_STRICT) != 0;
    E.slab_on = ms__shim_opt(MS_OPT_PACK_SMALL) != 0;
    E.mispredict = ms__shim_opt(MS_OPT_MISPREDICT);
    E.settle_opt = ms__shim_opt(MS_OPT_SETTLED) != 0;
    if (ms__shim_verbose() && ms__shim_opt(MS_OPT_PROGRESS_MS)) {
        E.progress_ns = ms__shim_opt(MS_OPT_PROGRESS_MS) * 1000000ull;
        E.progress_t0 = now_ns();
        E.progress_next = E.progress_t0 + E.progress_ns;
    }
    E.rng = 0x853c49e6748fea9bull;
    E.budget = budget;
    E.want = (budget > 0 || ms_client_allowed()) && engine != MS_ENGINE_OFF;
    E.backing = engine == MS_ENGINE_UNIFIED  ? BACK_UNIFIED
                : engine == MS_ENGINE_DEMAND ? BACK_DEMAND
                                             : BACK_VMM;
    E.prefetch = budget / 4;
    E.tmpl = tmpl;
    E.st.tmpl_kernels = tmpl ? ms_tmpl_store_count(tmpl) : 0;
    ms_rtable_init(&E.rt);
    ms_chunk_set_init(&E.need);
    ms_chunk_set_init(&E.scratch);
    ms_plan_init(&E.plan);
    if (E.want && ms_history_init(&E.hist, HIST_CAP) != MS_OK) {
        ms__shim_say("memory engine disabled: no memory for its history");
        E.want = false;
    }
    ms_unlock(&E.lock);
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
    if (ms_lock_any_held())
        ms_client_abandon(); /* exit() from a signal handler inside the shim: never wait */
    else
        ms_client_shutdown();
}

/* MSCHED_HOST_LIMIT, or half the machine's RAM when it is not set (0: no limit). */
uint64_t ms__eng_host_limit(void)
{
    if (ms__shim_opt_set(MS_OPT_HOST_LIMIT))
        return ms__shim_opt(MS_OPT_HOST_LIMIT);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 0;
}

/*
 * Start on the first allocation, in the caller's (current) context. Lock held. With a daemon
 * (its socket exists) the engine connects first; without one, it runs alone under
 * MSCHED_BUDGET, or not at all (no driver call is made then: the shim only observes).
 */
bool ms__eng_start(void)
{
    if (ms__eng_is_active())
        return true;
    if (E.broken)
        return false;
    bool daemon = ms_client_available();
    if (!daemon && ALONE_BUDGET == 0) {
        ms__eng_set_flag(&E.broken, true);
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
        /* The daemon is the physical GPU's, found by its UUID: the ordinal is this process's
         * (CUDA_VISIBLE_DEVICES, a container), not the daemon's. A driver without the UUID
         * call leaves only the index name. */
        CUuuid u;
        char uuid[MS_IPC_UUID_MAX] = "";
        if (MS_REAL(cuDeviceGetUuid_v2)(&u, dev) == CUDA_SUCCESS ||
            MS_REAL(cuDeviceGetUuid)(&u, dev) == CUDA_SUCCESS)
            ms_ipc_uuid_format((const unsigned char *)u.bytes, uuid, sizeof(uuid));
        int c = ms_client_connect((unsigned)dev, uuid[0] ? uuid : NULL, ALONE_BUDGET, &w);
        if (c != MS_OK) {
            ms__shim_log("no daemon (%s); %s", ms_strerror(c),
                         ALONE_BUDGET ? "running alone" : "memory engine off");
            daemon = false;
            if (!ALONE_BUDGET) {
                ms__eng_set_flag(&E.broken, true);
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
        if (e == MS_OK) {
            ms_gpu_cuda_set_host_limit(E.gpu, ms__eng_host_limit());
            ms_gpu_cuda_set_host_pool(E.gpu, ms__shim_opt(MS_OPT_HOST_POOL));
        }
    }
    if (e != MS_OK) {
        say("memory engine disabled: %s", missing ? missing : ms_strerror(e));
        ms__eng_set_flag(&E.broken, true);
        if (daemon)
            ms_client_close();
        return false;
    }
    E.ops = ms_gpu_cuda_ops(E.gpu);
    E.ctx = ctx;
    E.dev = dev;
    E.mode = MODE_ALONE;
    if (daemon) {
        E.mode = MODE_DAEMON;
        E.budget = w.budget;
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
            E.budget = alone_budget();
            if (!ALONE_BUDGET) {
                ms_gpu_cuda_free(E.gpu);
                E.gpu = NULL;
                E.ops = NULL;
                ms__eng_set_flag(&E.broken, true);
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
    ms__shim_log("memory engine on (%s): %s, budget %llu MiB, GPU hash %s",
                 ms__eng_backing_name[E.backing],
                 E.mode == MODE_DAEMON ? "with the daemon" : "alone",
                 (unsigned long long)(E.budget / MS_MIB), E.ops->hash ? "on" : "off");
    __atomic_store_n(&E.acc_state, 1, __ATOMIC_RELEASE);
    ms__eng_set_flag(&E.active, true);
    return true;
}

/* The engine's context is the caller's current one (lock held). */
bool ms__eng_mine_ctx(void)
{
    CUcontext ctx = NULL;
    return MS_REAL(cuCtxGetCurrent)(&ctx) == CUDA_SUCCESS && ctx == E.ctx;
}

bool ms_engine_vmm_ready(void)
{
    if (!ms_engine_active())
        return false;
    ms_lock(&E.lock);
    /* Only the VMM engine moves VMM memory: under the unified engines the application's
     * handles are the driver's (a virtual one could not be mapped: no host chunks there). */
    bool ok = ms__eng_start() && ms__eng_mine_ctx() && E.backing == BACK_VMM;
    ms_unlock(&E.lock);
    return ok;
}

int ms_engine_vmm_map(uint64_t va, uint64_t bytes, void *host, bool has_data)
{
    if (!ms__eng_is_active())
        return CUDA_ERROR_NOT_SUPPORTED;
    ms_lock(&E.lock);
    uint32_t id;
    int e = ms__eng_region_new(va, bytes, MS_RK_VMM, host, 0, &id);
    if (e == MS_OK)
        E.vmm_fallbacks++; /* not always mapped: ms__eng_region_drop counts it down */
    int rc = ms__eng_cuerr(e);
    if (e == MS_OK && has_data && ms_region_mark_host(&E.rt, id) != MS_OK) {
        ms__eng_region_drop(id);
        rc = CUDA_ERROR_UNKNOWN;
    }
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_vmm_map_amap(uint64_t va, uint64_t bytes, uint64_t chunk_bytes,
                           const uint64_t *tokens)
{
    if (!ms__eng_is_active())
        return CUDA_ERROR_NOT_SUPPORTED;
    ms_lock(&E.lock);
    uint32_t id;
    int e = ms__eng_region_new(va, bytes, MS_RK_VMM, NULL, chunk_bytes, &id);
    if (e != MS_OK) {
        ms_unlock(&E.lock);
        return ms__eng_cuerr(e);
    }
    struct ms_region *r = ms_region_get(&E.rt, id);
    r->amap = true;
    /* The chunks the handle kept from an earlier mapping start HOST, with their bytes. */
    e = ms_exec_attach_host(&E.rt, E.ops, id, tokens);
    /* The rest never held data. Alone: device memory when it fits the budget (as a new
     * allocation), else host chunks. With the daemon they stay EMPTY (mapped nowhere) until its
     * first POPULATE: device memory is the daemon's to grant (ms_engine_alloc). */
    if (e == MS_OK && E.mode != MODE_DAEMON) {
        ms_chunk_set_clear(&E.scratch);
        uint64_t fresh = 0;
        for (uint32_t k = 0; k < r->nchunks && e == MS_OK; k++)
            if (r->chunks[k].state == MS_CS_EMPTY) {
                fresh += r->chunks[k].bytes;
                e = ms_chunk_set_add(&E.scratch, MS_CHUNK_ID(id, k));
            }
        if (e == MS_OK && fresh)
            e = ms__eng_fits(fresh) ? ms__eng_exec_sets(NULL, &E.scratch, NULL)
                                    : ms__eng_map_empty_host(&E.scratch); /* unlocks to pin */
        r = ms_region_get(&E.rt, id);
        for (uint32_t k = 0; e == MS_OK && r && k < r->nchunks; k++)
            if (r->chunks[k].state == MS_CS_EMPTY)
                e = MS_E_STATE; /* every chunk must be mapped before the mapping is returned */
    }
    if (e != MS_OK) {
        say("cannot map an application VMM mapping of %llu MiB: %s (%s)",
            (unsigned long long)(bytes / MS_MIB), ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
        /* The caller keeps its tokens: take them back off the region (those chunks are still
         * HOST on them) before it goes with whatever else it holds. */
        for (uint32_t k = 0; r && k < r->nchunks; k++) {
            struct ms_chunk *c = &r->chunks[k];
            if (!tokens[k] || c->state != MS_CS_HOST || c->host != tokens[k])
                continue;
            struct ms_gpu_chunk g = {
                .va = r->base + ms_region_chunk_offset(r, k), .bytes = c->bytes, .hchunk = c->host};
            E.ops->host_unmap(E.ops->impl, &g, 1);
            c->host = 0;
            ms_chunk_apply(&E.rt, MS_CHUNK_ID(id, k), MS_CE_DISCARD);
        }
        MS_REAL(cuCtxSynchronize)();
        ms__eng_region_drop(id);
    }
    ms_unlock(&E.lock);
    return ms__eng_cuerr(e);
}

void ms_engine_vmm_host_free(const uint64_t *tokens, size_t n)
{
    if (!ms__eng_is_active() || !E.ops || !E.ops->host_free)
        return;
    for (size_t i = 0; i < n; i++)
        if (tokens[i]) {
            struct ms_gpu_chunk g = {.hchunk = tokens[i]};
            E.ops->host_free(E.ops->impl, &g, 1);
        }
}

int ms_engine_vmm_unmap(uint64_t va, uint64_t bytes, bool keep, bool *handled, uint64_t *tokens,
                        size_t ntokens, bool *kept)
{
    *handled = false;
    *kept = false;
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    uint32_t id;
    struct ms_region *r = NULL;
    if (ms_rtable_lookup(&E.rt, 0, va, &id, NULL) == MS_OK)
        r = ms_region_get(&E.rt, id);
    if (!r || r->kind != MS_RK_VMM || r->base != va || r->size != bytes ||
        (r->amap && r->nchunks > ntokens)) {
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    *handled = true;
    /* The handle keeps its contents across an unmap: evict what is resident to the host
     * backing (the handle's store, or the chunks' host chunks, which go to the handle), then
     * release the device memory. Contents nobody can map again (!keep) are just dropped. */
    MS_REAL(cuCtxSynchronize)();
    if (!keep) {
        int d = ms__eng_region_drop(id);
        ms_unlock(&E.lock);
        if (d != MS_OK)
            say("cannot unmap an application mapping: %s (%s)", ms_strerror(d),
                ms_gpu_cuda_last_error(E.gpu));
        return d == MS_OK ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    }
    E.plan.n = 0;
    E.plan.evict_bytes = E.plan.populate_bytes = 0;
    ms_rtable_clear_marks(&E.rt);
    int e = MS_OK;
    for (uint32_t k = 0; k < r->nchunks && e == MS_OK; k++)
        if (ms_chunk_state_resident((enum ms_chunk_state)r->chunks[k].state))
            e = ms__eng_plan_step(MS_STEP_EVICT, MS_CHUNK_ID(id, k));
    if (e == MS_OK && E.plan.n) {
        struct ms_exec_stats x;
        memset(&x, 0, sizeof(x));
        e = ms__eng_exec_plan(UINT64_MAX, &x);
        ms__eng_add_exec_stats(&x);
    }
    bool amap = r->amap;
    if (e == MS_OK && amap) {
        e = ms_exec_detach_host(&E.rt, E.ops, id, tokens);
        *kept = e == MS_OK;
    }
    if (e == MS_OK)
        e = ms__eng_region_drop(id);
    ms_unlock(&E.lock);
    if (e != MS_OK) {
        say("cannot unmap an application mapping: %s (%s)", ms_strerror(e),
            ms_gpu_cuda_last_error(E.gpu));
        return CUDA_ERROR_UNKNOWN;
    }
    return CUDA_SUCCESS;
}

void ms_engine_driver_mem(int64_t delta)
{
    if (!ms__eng_is_active())
        return;
    ms_lock(&E.lock);
    if (delta < 0)
        E.driver_bytes -= MS_MIN(E.driver_bytes, (uint64_t)-delta);
    else
        E.driver_bytes += (uint64_t)delta;
    /* The limit the process is held to: MSCHED_BUDGET alone, the daemon's budget with it. */
    uint64_t limit = E.mode == MODE_ALONE ? ALONE_BUDGET : E.budget;
    if (E.mode == MODE_ALONE && ALONE_BUDGET) {
        ms__eng_settle_off(); /* a smaller budget: the next command's gate sees it */
        E.budget = alone_budget();
        E.prefetch = E.budget / 4;
    }
    bool over = limit && delta > 0 && E.driver_bytes + E.rt.resident_bytes > limit;
    bool tell = over && !E.said_over;
    if (tell)
        E.said_over = true;
    uint64_t drv = E.driver_bytes, res = E.rt.resident_bytes;
    ms_unlock(&E.lock);
    if (tell)
        say("OVER BUDGET: this process now holds %llu MiB of device memory, more than its "
            "budget of %llu MiB: %llu MiB of it the application took from the driver with "
            "cuMemCreate that msched does not move (the line on cuMemCreate above says why)",
            (unsigned long long)((drv + res) / MS_MIB), (unsigned long long)(limit / MS_MIB),
            (unsigned long long)(drv / MS_MIB));
}

static void daemon_gone(const char *why)
{
    if (E.mode != MODE_DAEMON)
        return;
    /* Alone from now on, commands are admitted without the client's gate: nothing may stay
     * bare. What cannot be mapped now, the engine's own gate tries again before each command
     * and refuses the command while it fails (engine_gate.c). */
    int be = ms__eng_map_bare(0, true);
    if (be < 0)
        say("cannot map evicted memory back to its host copy (%s): commands are refused until "
            "it is",
            ms_strerror(be));
    uint64_t fp = E.st.footprint;
    if (ALONE_BUDGET) {
        E.mode = MODE_ALONE;
        E.budget = alone_budget();
        E.prefetch = E.budget / 4;
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
                e = ms__eng_add_region_chunks(&E.scratch, (uint32_t)i);
        if (e == MS_OK) {
            MS_REAL(cuCtxSynchronize)();
            e = ms__eng_exec_sets(NULL, &E.scratch, NULL);
        }
    }
    if (e == MS_OK) {
        E.mode = MODE_ALONE;
        E.budget = room;
        E.prefetch = room / 4;
        say("the daemon is gone (%s); running alone with all %llu MiB resident", why,
            (unsigned long long)(fp / MS_MIB));
        return;
    }
    E.mode = MODE_FAILED;
    say("the daemon is gone (%s) and this process's %llu MiB do not fit the %llu MiB the GPU "
        "has free: its GPU work now fails (set MSCHED_BUDGET to run alone under a budget)",
        why, (unsigned long long)(fp / MS_MIB), (unsigned long long)(room / MS_MIB));
}

void ms_engine_stats_get(struct ms_engine_stats *out)
{
    ms_lock(&E.lock);
    *out = E.st;
    out->budget = E.budget;
    out->resident = E.rt.resident_bytes;
    out->daemon = E.mode == MODE_DAEMON;
    out->failed = E.mode == MODE_FAILED;
    ms_unlock(&E.lock);
}

void ms_engine_atfork_child(void)
{
    ms_lock_reset(&E.lock);
    /* The settled state is the child's gate to find again. */
    __atomic_store_n(&E.settled, false, __ATOMIC_SEQ_CST);
    ms_client_atfork_child();
    if (E.mode == MODE_DAEMON) {
        /* The parent's connection is not the child's: run alone (CUDA in a child of a process
         * that used it is not supported by the driver anyway). */
        E.mode = ALONE_BUDGET ? MODE_ALONE : MODE_FAILED;
        E.budget = alone_budget();
    }
}

/* The exit summary's line on misses and host chunks, with the regions missed most. */
static void print_misses(const struct ms_engine_stats *s)
{
    char top[256] = "";
    size_t len = 0;
    ms_lock(&E.lock);
    /* The regions missed most: live ones and freed ones (their slot's record while not reused,
     * else E.freed_missed), each named by the base and size it had. */
    size_t fi = 0; /* the next of E.freed_missed */
    for (int k = 0; k < 3; k++) {
        size_t best = SIZE_MAX;
        /* every slot the pointer tables ever had: a freed one past the region table's end
         * keeps its record too */
        for (size_t i = 0; i < E.nrefs; i++)
            if (E.refs[i].misses && (best == SIZE_MAX || E.refs[i].misses > E.refs[best].misses))
                best = i;
        uint64_t base, size, misses;
        bool live;
        if (fi < FREED_MISSES && E.freed_missed[fi].misses &&
            (best == SIZE_MAX || E.freed_missed[fi].misses > E.refs[best].misses)) {
            base = E.freed_missed[fi].base;
            size = E.freed_missed[fi].size;
            misses = E.freed_missed[fi++].misses;
            live = false;
        } else if (best != SIZE_MAX) {
            base = E.refs[best].base;
            size = E.refs[best].size;
            misses = E.refs[best].misses;
            live = best < E.rt.nslots && E.rt.regions[best].live;
            E.refs[best].misses = 0; /* the summary is the last reader */
        } else {
            break;
        }
        if (len < sizeof(top))
            len += (size_t)snprintf(top + len, sizeof(top) - len, "%s%s %llu MiB at 0x%llx: %llu",
                                    k ? ", " : " (most: ", live ? "region" : "freed region",
                                    (unsigned long long)(MS_ROUND_UP(size, MS_GRAN) / MS_MIB),
                                    (unsigned long long)base, (unsigned long long)misses);
    }
    if (len && len < sizeof(top) - 1)
        len += (size_t)snprintf(top + len, sizeof(top) - len, ")");
    /* The kernels missed most (by launches). */
    char kern[3 * (KMISS_NAME + 48)] = "";
    size_t klen = 0;
    for (int k = 0; k < 3; k++) {
        struct kmiss *best = NULL;
        for (size_t i = 0; i < KMISS_MAX; i++)
            if (E.kmiss[i].name[0] && E.kmiss[i].launches &&
                (!best || E.kmiss[i].launches > best->launches))
                best = &E.kmiss[i];
        if (!best)
            break;
        if (klen < sizeof(kern))
            klen += (size_t)snprintf(
                kern + klen, sizeof(kern) - klen, "%s%s: %llu launches, %llu chunks",
                k ? "; " : " (kernels: ", best->name, (unsigned long long)best->launches,
                (unsigned long long)best->chunks);
        best->launches = 0; /* the summary is the last reader */
    }
    if (klen && klen < sizeof(kern) - 1)
        snprintf(kern + klen, sizeof(kern) - klen, ")");
    struct ms_gpu_cuda_host_stats hs = {0};
    if (E.gpu && E.backing == BACK_VMM)
        ms_gpu_cuda_host_stats(E.gpu, &hs);
    ms_unlock(&E.lock);
    char lim[240] = "";
    if (hs.limit_hits || s->host_limited)
        snprintf(lim, sizeof(lim),
                 "; the host memory limit (%llu MiB) refused %llu host chunks, %llu faults moved "
                 "nothing",
                 (unsigned long long)(hs.limit / MS_MIB), (unsigned long long)hs.limit_hits,
                 (unsigned long long)s->host_limited);
    if (s->capture_skips) {
        size_t l = strlen(lim);
        snprintf(lim + l, sizeof(lim) - l, "; %llu faults moved nothing during a stream capture",
                 (unsigned long long)s->capture_skips);
    }
    fprintf(stderr,
            "msched[%d]: misses: %llu commands ran with %llu named chunks on the host%s%s, %llu "
            "of unknown reach with allocations on the host; %llu host chunks made (%llu MiB), "
            "%llu allocations started on the host (%.3f s making their host chunks)%s\n",
            (int)getpid(), (unsigned long long)s->miss_cmds, (unsigned long long)s->miss_chunks,
            top, kern, (unsigned long long)s->miss_unbounded, (unsigned long long)s->host_chunks,
            (unsigned long long)(s->host_bytes / MS_MIB), (unsigned long long)s->host_placed,
            (double)s->host_ns / 1e9, lim);
}

void ms_engine_exit(bool verbose)
{
    if (ms_lock_any_held()) {
        /* exit() from a signal handler that interrupted this thread inside the shim: its locks
         * are held by the very thread that would wait for them. Leave without the summary. */
        ms_client_abandon();
        return;
    }
    ms_acc_finish();
    ms_client_shutdown();
    if (!ms__eng_is_active() || !verbose)
        return;
    struct ms_engine_stats s;
    ms_engine_stats_get(&s);
    fprintf(stderr,
            "msched[%d]: engine (%s): budget %llu MiB, %llu regions (%llu MiB), %llu MiB resident, "
            "%llu faults, %llu unbounded launches, in %llu MiB, out %llu MiB, dropped %llu MiB, "
            "%.3f s migrating\n",
            (int)getpid(), ms__eng_backing_name[E.backing], (unsigned long long)(s.budget / MS_MIB),
            (unsigned long long)s.regions, (unsigned long long)(s.footprint / MS_MIB),
            (unsigned long long)(s.resident / MS_MIB), (unsigned long long)s.faults,
            (unsigned long long)s.unbounded, (unsigned long long)(s.bytes_in / MS_MIB),
            (unsigned long long)(s.bytes_out / MS_MIB),
            (unsigned long long)(s.bytes_dropped / MS_MIB), (double)s.migrate_ns / 1e9);
    ms_lock(&E.lock);
    uint64_t gnorec = E.graph_norec, gunb = E.graph_unb, gfreed = E.graph_freed;
    if (gnorec + gunb + gfreed + E.graph_overlap)
        fprintf(stderr,
                "msched[%d]: graphs: %llu launches gated, %llu records made, %llu freed regions "
                "taken as what is now at their addresses; of unknown reach: %llu without a "
                "record (last dropped by %s), %llu with a node not followed (first: %s), %llu "
                "reaching memory freed since\n",
                (int)getpid(), (unsigned long long)E.graph_gates, (unsigned long long)E.graph_walks,
                (unsigned long long)E.graph_overlap, (unsigned long long)gnorec,
                E.forget_why ? E.forget_why : "none", (unsigned long long)gunb,
                E.graph_why[0] ? E.graph_why : "none", (unsigned long long)gfreed);
    if (E.graph_split)
        fprintf(stderr,
                "msched[%d]: graphs in pieces: %llu launches naming more than the budget made as "
                "%llu pieces\n",
                (int)getpid(), (unsigned long long)E.graph_split,
                (unsigned long long)E.graph_pieces);
    ms_unlock(&E.lock);
    if (s.small_allocs)
        fprintf(stderr,
                "msched[%d]: small allocations: %llu packed into slabs of 2 MiB, at most %llu "
                "slabs at once\n",
                (int)getpid(), (unsigned long long)s.small_allocs,
                (unsigned long long)s.slabs_peak);
    if (E.settle_opt)
        fprintf(stderr,
                "msched[%d]: settled: %llu commands admitted with everything on the device, "
                "without prediction or pins (settled %llu times)\n",
                (int)getpid(), (unsigned long long)__atomic_load_n(&E.fast_cmds, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&E.settles, __ATOMIC_RELAXED));
    if (E.strict)
        fprintf(stderr, "msched[%d]: strict: %llu chunks evicted outside the predictions\n",
                (int)getpid(), (unsigned long long)s.strict_evictions);
    if (E.backing == BACK_VMM)
        print_misses(&s);
    if (s.tmpl_kernels)
        fprintf(stderr, "msched[%d]: templates: %llu kernels, %llu launches predicted with them\n",
                (int)getpid(), (unsigned long long)s.tmpl_kernels,
                (unsigned long long)s.tmpl_launches);
    uint64_t tmaps = ms__tmap_recorded();
    if (tmaps)
        fprintf(stderr,
                "msched[%d]: tensor maps: %llu encoded, %llu launches predicted with them\n",
                (int)getpid(), (unsigned long long)tmaps, (unsigned long long)s.tmap_launches);
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
                "(%.3f s), %llu orders waited for a capture, ran %.3f s (%.3f s of it waiting on "
                "demands, %.3f s executing orders "
                "under the lock); RUN to first command %.2f ms mean, %.2f ms longest (%llu RUNs)\n",
                (int)getpid(),
                s.daemon   ? "connected"
                : s.failed ? "gone, failed"
                           : "gone, alone",
                (unsigned long long)c.slices, (unsigned long long)c.stops,
                (unsigned long long)c.demands, (unsigned long long)c.demand_repeats,
                (unsigned long long)c.idles, (unsigned long long)c.quiet_idles,
                (unsigned long long)c.evict_orders, (unsigned long long)c.pop_orders,
                (unsigned long long)c.waits, (double)c.wait_ns / 1e9,
                (unsigned long long)c.capture_waits, (double)c.run_ns / 1e9,
                (double)c.dwait_ns / 1e9, (double)c.order_run_ns / 1e9,
                c.first_runs ? (double)c.first_ns / (double)c.first_runs / 1e6 : 0.0,
                (double)c.first_ns_max / 1e6, (unsigned long long)c.first_runs);
    if (c.prepares || s.prep_chunks)
        fprintf(stderr,
                "msched[%d]: host memory ahead of evictions: %llu PREPARE hints (%llu given up), "
                "%llu host chunks made ahead (%llu MiB, %.3f s pinning)\n",
                (int)getpid(), (unsigned long long)c.prepares, (unsigned long long)c.prep_failed,
                (unsigned long long)s.prep_chunks, (unsigned long long)(s.prep_bytes / MS_MIB),
                (double)s.prep_ns / 1e9);
    struct ms_gpu_cuda_host_stats hs = {0};
    if (E.gpu && E.backing == BACK_VMM)
        ms_gpu_cuda_host_stats(E.gpu, &hs);
    if (hs.reused || hs.pooled_bytes || s.trim_chunks)
        fprintf(stderr,
                "msched[%d]: host memory pool: %llu host chunks taken from it (made ahead or "
                "released before), %llu given back after sitting unused (%llu MiB), %llu MiB left "
                "in it\n",
                (int)getpid(), (unsigned long long)hs.reused, (unsigned long long)s.trim_chunks,
                (unsigned long long)(s.trim_bytes / MS_MIB),
                (unsigned long long)(hs.pooled_bytes / MS_MIB));
    if (s.bare_left)
        fprintf(stderr,
                "msched[%d]: deferred host maps: %llu evicted chunks left unmapped, %llu mapped "
                "after their eviction, %llu just before a command (%.3f s mapping), the rest "
                "populated first or freed\n",
                (int)getpid(), (unsigned long long)s.bare_left, (unsigned long long)s.bare_mapped,
                (unsigned long long)s.bare_gate, (double)s.bare_ns / 1e9);
}
