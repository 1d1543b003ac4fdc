/*
 * engine_gate.c - the launch gate: what a command needs, made resident before it is submitted
 * (file layering: engine_int.h; contract: engine.h).
 *
 * History and the predicted future. Every admitted command appends the chunks it uses to the
 * history (core/history.h). At a fault the future is predicted by assuming the process
 * repeats itself; the planner gets the faulting command's chunks plus the next `prefetch` bytes
 * of that future as ws[0] (populated in that order) and the rest, in groups, as ws[1..] for
 * OPT's next-use distances.
 */
#include "shim/engine_int.h"

#include <pthread.h>
#include <time.h>

/* fault(): the budget is full of chunks other threads' commands pin for a moment: retry. */
#define OVERFLOW_QUIET 256u /* faults without an over-budget command before prefetch resumes */
#define RETRY_AFTER_UNPIN (-1)
#define MAX_TMAPS 16 /* tensor maps one launch may pass that bound its prediction */

/* The chunks this thread's admitted command pinned (alone), until its hook returns: chunk ids,
 * and HELD_WHOLE(region) for a region pinned whole (ms_region_pin_all). held_pins counts them
 * in chunks (E.pinned counts every thread's). */
static _Thread_local struct ms_chunk_set held;
static _Thread_local uint64_t held_pins;
#define HELD_WHOLE(region) MS_CHUNK_ID(region, UINT32_MAX)
/* Commands this thread has admitted (alone) whose hooks have not returned (E.admitted counts
 * every thread's). */
static _Thread_local uint64_t my_admitted;

#include "shim/accuracy.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/hostmem.h"
#include "shim/phases.h"
#include "shim/tensormap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Chunks of `need` that must be resident for correctness: those of regions that are not
 * always mapped (fallback application VMM mappings, hook_vmm.c) and EMPTY ones (mapped nowhere
 * yet). The rest is performance. */
static uint64_t must_bytes(const struct ms_chunk_set *need, bool *all_ready)
{
    uint64_t b = 0;
    *all_ready = true;
    for (size_t i = 0; i < need->n; i++) {
        const struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(need->ids[i]));
        const struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        if (!r || !c || (r->amap && c->state != MS_CS_EMPTY))
            continue;
        b += c->bytes;
        if (!ms_chunk_state_ready((enum ms_chunk_state)c->state))
            *all_ready = false;
    }
    return b;
}

/* E.scratch = the part of `need` a plan can make resident under the budget (core/predict.h,
 * ms_chunk_set_fit). */
static int fitting_part(const struct ms_chunk_set *need)
{
    return ms_chunk_set_fit(&E.rt, need, E.budget, &E.scratch);
}

/* Plan making `want` resident, with `prefetch` bytes of the predicted future on the first
 * attempt (lock held). */
static int plan_for(const struct ms_chunk_set *want, uint64_t prefetch)
{
    int e = MS_E_NOSPACE;
    for (int attempt = 0; attempt < 2 && e == MS_E_NOSPACE; attempt++) {
        e = ms_history_plan_sets(&E.hist, &E.rt, want, attempt == 0 ? prefetch : 0, GROUP, &E.ws,
                                 &E.capws, &E.nws);
        if (e)
            break;
        struct ms_plan_input in = {
            .rt = &E.rt, .budget = E.budget, .ws = E.ws, .nws = E.nws, .policy = MS_EVICT_OPT};
        e = ms_plan_build(&in, &E.plan);
    }
    return e;
}

/*
 * Make `need` resident (lock held). Returns a CUresult. Always-mapped chunks that cannot all
 * be had under the budget are a performance matter: as many as fit are made resident and the
 * command runs with the rest on the host (counted as misses at admission). Only chunks of
 * regions that are not always mapped must all be resident, or the command is refused.
 */
static int fault(struct ms_chunk_set *need, bool unbounded)
{
    uint64_t t0 = now_ns();
    /* Before the check of other threads' admitted commands below: a fast-path command either
     * sees this or is counted there (ms__eng_settle_off). */
    ms__eng_settle_off();
    /* While commands name more than fits, prefetching the predicted future only pushes out what
     * they keep: off until OVERFLOW_QUIET faults pass without one. */
    bool overflowing = E.overflow_at && E.st.faults - E.overflow_at < OVERFLOW_QUIET;
    /* A command naming more than the budget cannot be planned whole (ms_plan_build refuses a
     * ws[0] over the budget): skip the history walk that would find that out. */
    int e = ms_chunk_set_bytes(need, &E.rt) > E.budget
                ? MS_E_NOSPACE
                : plan_for(need, overflowing ? 0 : E.prefetch);
    if (e == MS_E_NOSPACE) {
        E.overflow_at = E.st.faults + 1;
        /* More than fits: no prefetch (it would push out what this command keeps). */
        e = fitting_part(need);
        /* The part that fits already resident (the steady state of a command that names more
         * than fits: every launch of a kernel over a too-large allocation) and the table within
         * the budget: a plan would have no step. */
        if (e == MS_OK && E.rt.resident_bytes <= E.budget && ms__eng_all_ready(&E.scratch))
            E.plan.n = 0, E.plan.evict_bytes = E.plan.populate_bytes = 0;
        else if (e == MS_OK)
            e = plan_for(&E.scratch, 0);
    }
    bool must_ready;
    uint64_t must = must_bytes(need, &must_ready);
    if (e == MS_E_NOSPACE && E.pinned > held_pins)
        return RETRY_AFTER_UNPIN; /* other threads' commands hold chunks for a moment */
    if (e == MS_E_NOSPACE && must_ready)
        return CUDA_SUCCESS; /* nothing more fits beside the pinned: run on what is mapped */
    if (e == MS_E_NOSPACE) {
        say("%s needs %llu MiB resident, more than the budget of %llu MiB: refused",
            unbounded ? "a launch msched cannot bound (every fallback application VMM mapping)"
                      : "a command's fallback application VMM mappings",
            (unsigned long long)(must / MS_MIB), (unsigned long long)(E.budget / MS_MIB));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (e) {
        say("cannot plan a migration: %s", ms_strerror(e));
        return ms__eng_cuerr(e);
    }
    if (E.plan.n == 0)
        return CUDA_SUCCESS; /* what fits is resident; the rest runs from the host */
    /* An open stream capture (another thread's: a captured command never faults) forbids the
     * synchronization a migration needs: run on what is mapped, a miss, not a broken graph. */
    if (must_ready && ms__shim_capture_open()) {
        E.st.capture_skips++;
        return CUDA_SUCCESS;
    }
    /* Nothing in flight may use a victim: other threads' admitted commands reach the driver
     * first (they may touch chunks they did not name), then the GPU finishes everything. */
    if (__atomic_load_n(&E.admitted, __ATOMIC_SEQ_CST) > my_admitted)
        return RETRY_AFTER_UNPIN;
    MS_REAL(cuCtxSynchronize)();
    struct ms_exec_stats st;
    memset(&st, 0, sizeof(st));
    struct ms_gpu_cuda_host_stats h0, h1;
    ms_gpu_cuda_host_stats(E.gpu, &h0);
    e = ms__eng_exec_plan(E.budget, &st);
    ms_gpu_cuda_host_stats(E.gpu, &h1);
    E.st.faults++;
    ms__eng_add_exec_stats(&st);
    E.st.migrate_ns += now_ns() - t0;
    if (e == MS_E_NOSPACE && h1.limit_hits > h0.limit_hits) {
        /* The victims' host chunks are over the host memory limit: nothing moved, everything
         * is mapped where it was, so the command runs on what is resident (a miss, slower). */
        must_bytes(need, &must_ready);
        if (must_ready) {
            if (!E.st.host_limited++)
                say("host chunks refused (%s): commands run on what is resident; raise "
                    "MSCHED_HOST_LIMIT to let memory move",
                    ms_gpu_cuda_host_error(E.gpu));
            return CUDA_SUCCESS;
        }
    }
    if (e != MS_OK) {
        say("migration failed: %s (%s)", ms_strerror(e),
            h1.limit_hits > h0.limit_hits ? ms_gpu_cuda_host_error(E.gpu)
                                          : ms_gpu_cuda_last_error(E.gpu));
        return ms__eng_cuerr(e);
    }
    must_bytes(need, &must_ready);
    if (!must_ready) {
        say("migration left an application VMM mapping a command needs non-resident: refused");
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
    if (!E.scratch.n || ms__shim_capture_open())
        return CUDA_SUCCESS;     /* nothing to evict, or a synchronization would break a capture */
    MS_REAL(cuCtxSynchronize)(); /* nothing in flight may use a victim */
    E.st.strict_evictions += E.scratch.n;
    return ms__eng_cuerr(ms__eng_exec_sets(&E.scratch, NULL, NULL));
}

/*
 * need is filled (normalized); gate it. Lock held (released while a daemon-mode gate waits, so
 * `need` may be E.need only until the client copies it). With the daemon every command waits
 * for RUN, even one that touches no region (time slicing); alone only memory matters.
 */
/* A thread's `held` storage is freed as the thread exits (a key's destructor). */
static pthread_key_t held_key;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;

static void held_free(void *p)
{
    ms_chunk_set_fini(p);
}

static void held_key_create(void)
{
    if (pthread_key_create(&held_key, held_free) != 0)
        held_key = (pthread_key_t)-1;
}

/* Pin `need` for this thread's command (lock held): each region it names whole with one
 * region pin, the rest chunk by chunk. */
static int pin_held(const struct ms_chunk_set *need)
{
    struct ms_chunk_set *h = &held;
    if (!h->ids && need->n) {
        pthread_once(&held_once, held_key_create);
        if (held_key != (pthread_key_t)-1)
            pthread_setspecific(held_key, h);
    }
    if (ms_grow((void **)&h->ids, &h->cap, h->n + need->n, sizeof(*h->ids)) != MS_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t pins = 0;
    for (size_t i = 0; i < need->n; i++) {
        /* A whole region, all ready: one pin on the region (region.h, I11). */
        struct ms_region *w = ms_chunk_set_whole(&E.rt, need, i);
        if (w && ms_region_pin_all(w) == MS_OK) {
            h->ids[h->n++] = HELD_WHOLE(MS_CHUNK_REGION(need->ids[i]));
            pins += w->nchunks;
            i += w->nchunks - 1;
            continue;
        }
        struct ms_chunk *c = ms_chunk_get(&E.rt, need->ids[i]);
        if (!c)
            continue;
        h->ids[h->n++] = need->ids[i];
        c->pins++;
        pins++;
    }
    h->asc = false; /* HELD_WHOLE entries among the ids: held pins, not a set of chunks */
    E.pinned += pins;
    held_pins += pins;
    return CUDA_SUCCESS;
}

/* Drop this thread's pins (lock held). */
static void unpin_held(void)
{
    struct ms_chunk_set *h = &held;
    for (size_t i = 0; i < h->n; i++) {
        if (MS_CHUNK_INDEX(h->ids[i]) == MS_CHUNK_INDEX(HELD_WHOLE(0))) {
            struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(h->ids[i]));
            if (r)
                (void)ms_region_unpin_all(r);
            continue;
        }
        struct ms_chunk *c = ms_chunk_get(&E.rt, h->ids[i]);
        if (c && c->pins)
            c->pins--;
    }
    E.pinned -= MS_MIN(E.pinned, held_pins);
    held_pins = 0;
    ms_chunk_set_clear(h);
    if (__atomic_load_n(&E.unpin_waiters, __ATOMIC_SEQ_CST))
        pthread_cond_broadcast(&E.unpinned);
}

/* Wait (lock held, released meanwhile) until some pin goes, or 50 ms. */
static void wait_unpinned(void)
{
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_nsec += 50000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    __atomic_add_fetch(&E.unpin_waiters, 1, __ATOMIC_SEQ_CST);
    ms_lock_timedwait(&E.unpinned, &E.lock, &at);
    __atomic_sub_fetch(&E.unpin_waiters, 1, __ATOMIC_SEQ_CST);
}

/* MSCHED_MISPREDICT (a test of the correctness rule): drop about that percent of the
 * always-mapped chunks, and of every application VMM mapping's, from every command's predicted
 * set, so the command runs with them on the host when strict mode evicts what it does not name
 * (lock held). A fallback VMM mapping (not always mapped) may then be reached off the device:
 * the fake's oracle kills that, as it killed every VMM mapping before they were always mapped
 * (tests/shim engine/vmm-mispredict leaves the fallback out). */
static void mispredict(struct ms_chunk_set *need)
{
    size_t k = 0;
    for (size_t i = 0; i < need->n; i++) {
        const struct ms_region *r = ms_region_get(&E.rt, MS_CHUNK_REGION(need->ids[i]));
        E.rng = E.rng * 6364136223846793005ull + 1442695040888963407ull;
        if (r && (r->amap || r->kind == MS_RK_VMM) && (E.rng >> 33) % 100 < E.mispredict)
            continue;
        need->ids[k++] = need->ids[i];
    }
    need->n = k;
}

static int gate(struct ms_chunk_set *need, bool unbounded, struct ms_shim_stream s, bool *alone)
{
    int rc = CUDA_SUCCESS;
    if (E.mode == MODE_DAEMON) {
        struct ms_chunk_set own;
        ms_chunk_set_init(&own);
        /* Never "the whole footprint": an unbounded command's need already lists every chunk
         * that must be resident (fallback application VMM mappings); always-mapped memory is
         * reachable wherever it is. */
        uint64_t t = ms__ph_start();
        rc = ms_client_gate(&need, &own, false, s, alone);
        ms__ph_stop(MS_PH_CLIENT, t);
        if (!*alone) {
            /* Admitted, refused, or (with chunks missing) recorded by a stream capture: what a
             * captured command names must be memory now (ms__eng_map_empty_host). */
            if (rc == CUDA_SUCCESS && !ms__eng_all_ready(need))
                rc = ms__eng_cuerr(ms__eng_map_empty_host(need));
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
    *alone = true;
    if (E.mode == MODE_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Alone (the daemon gone, or left at exit while the process's last commands still come):
     * no command runs while an eviction left an address mapped to nothing; one that cannot be
     * mapped refuses the command (an unmapped address would fault the whole context). */
    if (E.rt.bare) {
        int left = ms__eng_map_bare(0, true);
        if (left != 0) {
            if (!E.said_bare)
                say("cannot map evicted memory to its host copy (%s): its commands are refused",
                    left < 0 ? ms_strerror(left) : "some stayed unmapped");
            E.said_bare = true;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (E.mispredict)
        mispredict(need);
    if (!need->n && !E.strict)
        return CUDA_SUCCESS;
    /* A command on a stream being captured is recorded into a graph, not run: nothing to make
     * resident now (the graph's launches are gated on its reach), and a fault's synchronization
     * would invalidate the capture (on the H200: cuBLAS inside torch.cuda.graph failed). */
    bool ready = ms__eng_all_ready(need);
    if ((E.strict || !ready) && ms_client_capturing(s))
        return ms__eng_cuerr(ms__eng_map_empty_host(need));
    if (E.strict) {
        if ((rc = strict_evict(need)) != CUDA_SUCCESS)
            return rc;
        ready = ms__eng_all_ready(need);
    }
    /* Waiting for another thread's pins releases the lock, and `need` may be the shared
     * scratch: wait with a copy of it. */
    struct ms_chunk_set own;
    ms_chunk_set_init(&own);
    for (int tries = 0;; tries++) {
        rc = ready ? CUDA_SUCCESS : fault(need, unbounded);
        if (rc != RETRY_AFTER_UNPIN)
            break;
        if (need != &own) {
            for (size_t i = 0; i < need->n && rc == RETRY_AFTER_UNPIN; i++)
                if (ms_chunk_set_add(&own, need->ids[i]))
                    rc = CUDA_ERROR_OUT_OF_MEMORY;
            if (rc != RETRY_AFTER_UNPIN)
                break;
            need = &own;
        }
        wait_unpinned();
        ready = ms__eng_all_ready(need);
    }
    if (rc == CUDA_SUCCESS) {
        uint64_t t = ms__ph_start();
        ms__eng_admitted(need);
        ms__ph_stop(MS_PH_ADMIT, t);
        t = ms__ph_start();
        rc = pin_held(need);
        if (rc != CUDA_SUCCESS)
            unpin_held();
        ms__ph_stop(MS_PH_PIN, t);
    }
    ms_chunk_set_fini(&own);
    return rc;
}

/* The progress line (lock held): what the exit summary's first lines count so far, for a run
 * that may never reach its exit summary (cut by a time limit, or killed). */
static void progress(uint64_t now)
{
    E.progress_next = now + E.progress_ns;
    /* with the daemon, its side too: how often this task was stopped, and why it asked */
    struct ms_client_stats c;
    ms_client_stats_locked(&c);
    char d[192] = "";
    if (c.slices || c.demands)
        snprintf(d, sizeof(d),
                 "; daemon: %llu slices, %llu stops, %llu demands, %llu idles (%llu quiet), ran "
                 "%.1f s",
                 (unsigned long long)c.slices, (unsigned long long)c.stops,
                 (unsigned long long)c.demands, (unsigned long long)c.idles,
                 (unsigned long long)c.quiet_idles, (double)c.run_ns / 1e9);
    fprintf(stderr,
            "msched[%d]: after %.1f s: %llu faults, %llu unbounded launches (graphs: %llu without "
            "a record, %llu with a node not followed, %llu reaching freed memory), in %llu MiB, "
            "out %llu MiB, %.3f s migrating, %llu commands with named chunks on the host, %llu of "
            "%llu MiB resident%s\n",
            (int)getpid(), (double)(now - E.progress_t0) / 1e9, (unsigned long long)E.st.faults,
            (unsigned long long)E.st.unbounded, (unsigned long long)E.graph_norec,
            (unsigned long long)E.graph_unb, (unsigned long long)E.graph_freed,
            (unsigned long long)(E.st.bytes_in / MS_MIB),
            (unsigned long long)(E.st.bytes_out / MS_MIB), (double)E.st.migrate_ns / 1e9,
            (unsigned long long)E.st.miss_cmds, (unsigned long long)(E.rt.resident_bytes / MS_MIB),
            (unsigned long long)(E.budget / MS_MIB), d);
}

/*
 * Settled (MSCHED_SETTLED=1). Running alone with every chunk on the device and mapped there
 * (CLEAN or DIRTY, nothing bare) and the table within the budget, no command can miss and none
 * needs a migration first, so the gate's work (prediction, history, touches, pins) only keeps
 * a record for a migration that may never come. While `settled` holds, a command is admitted
 * with two atomic operations and no lock; the first migration after it plans from a history
 * that stopped when the state began (the plan is still safe, only less informed).
 *
 * Safety rests on one order (Dekker's): the fast path counts its command in `admitted` and then
 * checks `settled` again; ms__eng_settle_off clears `settled` before the caller looks at
 * `admitted` (a fault, engine_gate.c) or moves anything, both seq_cst. So a command either
 * sees the state gone and takes the slow gate, or is counted, and a fault waits for it to reach
 * the driver as for any admitted command. Chunks the fast path's commands write while CLEAN
 * are not marked DIRTY; a migration verifies CLEAN chunks before dropping them (verify_clean,
 * ms__eng_exec_plan), so their data is never lost.
 *
 * Set only here, under the lock, at the end of a slow gate; cleared by ms__eng_settle_off
 * (engine_mem.c, below every caller): a new region, a plan carried out, a fault, a smaller
 * budget.
 */
/* After a slow gate admitted a command (lock held): settled now? */
static void settle_check(void)
{
    if (!E.settle_opt || E.mode != MODE_ALONE || E.strict || E.mispredict || ms_acc_on() ||
        __atomic_load_n(&E.settled, __ATOMIC_RELAXED))
        return;
    uint64_t all = 0;
    for (int k = 0; k < MS_CS_COUNT; k++)
        all += E.rt.count[k];
    if (!all || E.rt.count[MS_CS_CLEAN] + E.rt.count[MS_CS_DIRTY] != all || E.rt.bare ||
        E.rt.resident_bytes > E.budget)
        return;
    __atomic_add_fetch(&E.settles, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&E.settled, true, __ATOMIC_SEQ_CST);
}

/* The fast path (no lock): admitted when settled, counted in `admitted` first. */
static bool settled_gate(void)
{
    if (!__atomic_load_n(&E.settled, __ATOMIC_ACQUIRE))
        return false;
    __atomic_add_fetch(&E.admitted, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&E.settled, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&E.admitted, 1, __ATOMIC_SEQ_CST);
        return false;
    }
    my_admitted++;
    __atomic_add_fetch(&E.fast_cmds, 1, __ATOMIC_RELAXED);
    return true;
}

int ms__eng_gate(struct ms_chunk_set *need, bool unbounded, struct ms_shim_stream s)
{
    if (E.progress_ns) {
        uint64_t now = now_ns();
        if (now >= E.progress_next)
            progress(now);
    }
    bool alone = false;
    int rc = gate(need, unbounded, s, &alone);
    if (rc == CUDA_SUCCESS && alone) {
        /* Admitted alone: until its hook returns, no fault of another thread migrates. */
        __atomic_add_fetch(&E.admitted, 1, __ATOMIC_SEQ_CST);
        my_admitted++;
        settle_check();
    }
    /* Of unknown reach while allocations are off the device (every chunk a command of unknown
     * reach must have is resident now, so a HOST chunk is an allocation's): a possible miss. */
    if (rc == CUDA_SUCCESS && unbounded && E.rt.count[MS_CS_HOST])
        E.st.miss_unbounded++;
    return rc;
}

int ms_engine_gate_unbounded(struct ms_shim_stream s)
{
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    int e = ms__eng_need_everything();
    int rc = e == MS_OK ? ms__eng_gate(&E.need, true, s) : ms__eng_cuerr(e);
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_launch(const struct ms_shim_launch *l)
{
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    int want_acc = 1;
    if (__atomic_compare_exchange_n(&E.acc_state, &want_acc, 2, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        /* Outside the engine lock: CUPTI's start calls into the driver (through the hooks). */
        ms_acc_start(&E.api, E.backing == BACK_DEMAND && E.mode == MODE_ALONE);
    if (settled_gate())
        return CUDA_SUCCESS;
    uint64_t t = ms__ph_start();
    ms_lock(&E.lock);
    ms__ph_stop(MS_PH_LOCK, t);
    t = ms__ph_start();
    ms_chunk_set_clear(&E.need);
    bool unbounded = !l->params_known || !l->layout || l->kind == MS_SHIM_LAUNCH_COOP;
    int e = MS_OK;
    if (unbounded) {
        e = ms__eng_need_everything();
    } else {
        struct ms_launch ml = {.task = 0,
                               .params = l->params,
                               .params_len = l->params_len,
                               .layout = l->layout,
                               .nlayout = l->nlayout};
        /* With a template of the kernel (by name: the engine knows no module), only the
         * chunks its arguments' rules reach, in always-mapped regions (core/template.h). */
        const struct ms_tmpl_kernel *tk = E.tmpl ? ms_tmpl_find_name(E.tmpl, l->name) : NULL;
        /* TMA tensor maps among the parameters: each names only its tensor (tensormap.h). */
        struct ms_param_bound bd[MAX_TMAPS];
        size_t nb =
            ms__tmap_bounds(l->params, l->params_len, l->layout, l->nlayout, bd, MS_ARRAY_LEN(bd));
        uint8_t *scratch = nb ? ms_malloc(l->params_len) : NULL;
        bool bounded = nb && scratch; /* out of memory: without the bounds, as before */
        int n = bounded ? ms_predict_launch_bounded(&E.rt, &ml, tk, bd, nb, scratch, &E.need)
                : tk    ? ms_predict_launch_tmpl(&E.rt, &ml, tk, &E.need)
                        : ms_predict_launch(&E.rt, &ml, &E.need);
        ms_free(scratch);
        if (bounded && n >= 0)
            E.st.tmap_launches++;
        if (tk && n >= 0)
            E.st.tmpl_launches++;
        e = n < 0 ? n : ms__eng_add_vmm_neighbors(&E.need);
        if (e == MS_OK)
            e = ms__eng_add_refs(&E.need);
    }
    ms__ph_stop(MS_PH_PREDICT, t);
    t = ms__ph_start();
    E.last_missed = 0;
    int rc = e == MS_OK ? ms__eng_gate(&E.need, unbounded, l->stream) : ms__eng_cuerr(e);
    ms__ph_stop(MS_PH_GATE, t);
    if (rc == CUDA_SUCCESS && E.last_missed)
        ms__eng_kernel_missed(l->name, E.last_missed);
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
    if (!ms__eng_is_active() || (abytes == 0 && bbytes == 0) || settled_gate())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    /* Both sides in one set: faulting one side in must not evict the other. */
    int64_t in = ms_predict_range(&E.rt, 0, (struct ms_range){a, abytes}, &E.need);
    if (in >= 0)
        in = ms_predict_range(&E.rt, 0, (struct ms_range){b, bbytes}, &E.need);
    int rc = in < 0 ? ms__eng_cuerr((int)in) : ms__eng_gate(&E.need, false, s);
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_gate_rangev(const uint64_t *addr, const uint64_t *bytes, size_t n,
                          struct ms_shim_stream s)
{
    if (!ms__eng_is_active() || n == 0 || settled_gate())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    ms_chunk_set_clear(&E.need);
    int64_t in = 0;
    for (size_t i = 0; i < n && in >= 0; i++)
        if (bytes[i])
            in = ms_predict_range(&E.rt, 0, (struct ms_range){addr[i], bytes[i]}, &E.need);
    int rc = in < 0 ? ms__eng_cuerr((int)in) : ms__eng_gate(&E.need, false, s);
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
    if (held.n) {
        ms_lock(&E.lock);
        unpin_held(); /* signals E.unpinned */
        __atomic_sub_fetch(&E.admitted, my_admitted, __ATOMIC_SEQ_CST);
        my_admitted = 0;
        ms_unlock(&E.lock);
    } else if (my_admitted) {
        /* Nothing pinned (the settled fast path, or a command naming nothing): the count goes
         * without the lock; a thread waiting for it is woken under the lock. One that starts
         * waiting just after this looks again within its 50 ms. */
        __atomic_sub_fetch(&E.admitted, my_admitted, __ATOMIC_SEQ_CST);
        my_admitted = 0;
        if (__atomic_load_n(&E.unpin_waiters, __ATOMIC_SEQ_CST)) {
            ms_lock(&E.lock);
            pthread_cond_broadcast(&E.unpinned);
            ms_unlock(&E.lock);
        }
    }
}
