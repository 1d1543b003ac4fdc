/*
 * engine_alloc.c - the engine's allocations: cuMemAlloc-family memory as always-mapped regions,
 * small ones as blocks of shared slabs (core/slab.h), and their frees (file layering:
 * engine_int.h; contract: engine.h, ms_engine_alloc and ms_engine_free).
 *
 * Design
 *   A region's address range is reserved, and its host chunks are pinned, without the engine
 *   lock (a reservation is a driver call launches need not wait for; pinning takes seconds for
 *   GiBs), so the lock is released and taken again inside alloc_region; everything read before
 *   is read again after. A free waits for the device as cuMemFree does, releases the device
 *   memory under the lock and the range and host backing outside it.
 *
 * Invariants
 *   - Every slab in E.slabs is a live region of E.rt; E.st.slabs counts them.
 *   - No empty slab outlives the call that emptied (or made) it, unless its region could not be
 *     dropped.
 */
#include "shim/engine_int.h"

#include "shim/hostmem.h"

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
        ms__eng_backing_name[E.backing], (unsigned long long)(span / MS_MIB),
        (unsigned long long)((E.st.footprint + span) / MS_MIB),
        (unsigned long long)(room / MS_MIB));
    return false;
}

/*
 * A new region of `bytes` for an allocation (lock held; released while the range is reserved
 * and host chunks are pinned): *va its address, *id its slot. Returns a CUresult: out of memory
 * when no range or backing can be had (nothing is left of the attempt).
 */
static int alloc_region(uint64_t bytes, uint64_t *va_out, uint32_t *id_out)
{
    uint64_t span = MS_ROUND_UP(bytes, MS_GRAN);
    CUdeviceptr va = 0;
    CUresult r;
    if (E.backing != BACK_VMM) {
        r = managed_room(span) ? E.api.cuMemAllocManaged(&va, span, CU_MEM_ATTACH_GLOBAL)
                               : CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        /* Not under the lock: a reservation is a driver call the service thread (a STOP, an
         * order) and every launch need not wait for. */
        ms_unlock(&E.lock);
        r = MS_REAL(cuMemAddressReserve)(&va, span, 0, 0, 0);
        ms_lock(&E.lock);
    }
    uint32_t id = 0;
    int e = MS_OK;
    struct ms_host_set hs = {0};
    bool daemon = E.mode == MODE_DAEMON;
    if (r == CUDA_SUCCESS && E.backing == BACK_VMM && !daemon && !ms__eng_fits(span)) {
        /* No room on the device: the allocation starts on host chunks, made without the lock
         * (pinning: seconds for GiBs) before its region exists. */
        ms_unlock(&E.lock);
        e = ms__eng_host_make(va, bytes, &hs);
        ms_lock(&E.lock);
        if (e != MS_OK) {
            const char *why = ms_gpu_cuda_host_error(E.gpu);
            say("cannot back a new allocation of %llu MiB with host memory: %s",
                (unsigned long long)(span / MS_MIB), why[0] ? why : ms_strerror(e));
        }
    }
    if (r == CUDA_SUCCESS && e == MS_OK) {
        e = ms__eng_region_new(va, bytes, MS_RK_DEVICE, NULL, 0, &id);
        if (e == MS_OK && E.backing == BACK_VMM) {
            /* With the daemon, device memory is the daemon's to grant: the region stays EMPTY
             * (mapped nowhere, no host memory) until its first POPULATE maps it fresh; every
             * command that may touch an EMPTY chunk waits for it (its chunks are needed, not
             * preferred: ms_chunk_set_fit, ms__eng_need_everything). */
            if (daemon)
                ms_region_get(&E.rt, id)->amap = true;
            else
                e = hs.c ? ms__eng_region_adopt_host(id, &hs) : ms__eng_region_place_device(id);
            if (e != MS_OK) {
                say("cannot map a new allocation of %llu MiB: %s (%s)",
                    (unsigned long long)(span / MS_MIB), ms_strerror(e),
                    ms_gpu_cuda_last_error(E.gpu));
                ms__eng_region_drop(id);
            }
        }
    }
    if (hs.c) { /* not adopted */
        ms_unlock(&E.lock);
        ms__eng_host_unmake(&hs);
        ms_lock(&E.lock);
    }
    if (r != CUDA_SUCCESS || e != MS_OK) {
        if (va)
            release_va(va, span);
        /* No room for the range or its backing: what cuMemAlloc says when memory is short
         * (the reservation of an absurd size is refused as an invalid value). */
        return r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_OUT_OF_MEMORY
                                                                  : (int)r;
    }
    *va_out = va;
    *id_out = id;
    return CUDA_SUCCESS;
}

/* Release a region the application no longer holds (lock held on entry, released on return):
 * its device memory, then its range and host backing outside the lock. A slab (an empty one)
 * leaves the slab table first, and goes back into it if the region cannot be dropped, so that
 * nothing refers to a region that is no longer a slab. */
static int drop_region_unlock(uint32_t id, bool slab)
{
    struct ms_region *r = ms_region_get(&E.rt, id);
    uint64_t base = r->base, span = MS_ROUND_UP(r->size, MS_GRAN);
    void *host = r->host;
    if (slab) {
        if (ms_slabs_remove(&E.slabs, id) != MS_OK) {
            ms_unlock(&E.lock);
            return CUDA_ERROR_UNKNOWN;
        }
        E.st.slabs--;
    }
    int e = ms__eng_region_drop(id);
    if (e != MS_OK && slab && ms_slabs_add(&E.slabs, base, id) == MS_OK)
        E.st.slabs++;
    ms_unlock(&E.lock);
    if (e != MS_OK) {
        say("cannot release an allocation: %s (%s)", ms_strerror(e), ms_gpu_cuda_last_error(E.gpu));
        return CUDA_ERROR_UNKNOWN;
    }
    /* The region is forgotten: its range and host backing are this thread's to release, and
     * unpinning takes long enough (as pinning does) to keep it out of the lock. */
    release_va(base, span);
    /* The device memory is gone whatever the driver says about the host store; a failure to
     * release that is counted in the exit summary, not returned for a free that happened. */
    ms__host_unpin(host);
    return CUDA_SUCCESS;
}

/*
 * A small allocation (core/slab.h): a block of a slab with room, or of a new slab (lock held;
 * released while a new slab's region is made). The buffer id is the allocation's own.
 */
static int alloc_small(uint64_t bytes, uint64_t *dptr)
{
    uint32_t region;
    int e = ms_slabs_alloc(&E.slabs, bytes, E.next_buffer + 1, dptr, &region);
    if (e == MS_E_NOSPACE) {
        uint64_t va = 0;
        uint32_t id = 0;
        int rc = alloc_region(MS_GRAN, &va, &id);
        if (rc != CUDA_SUCCESS)
            return rc;
        e = ms_slabs_add(&E.slabs, va, id);
        if (e != MS_OK) {
            drop_region_unlock(id, false);
            ms_lock(&E.lock);
            return e == MS_E_NOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
        }
        E.st.slabs++;
        E.st.slabs_peak = MS_MAX(E.st.slabs_peak, E.st.slabs);
        e = ms_slabs_alloc(&E.slabs, bytes, E.next_buffer + 1, dptr, &region);
        /* No empty slab stays: not when the block could not be had, nor when a free while the
         * lock was released made room in an older slab, which took it. */
        if (e != MS_OK || region != id) {
            drop_region_unlock(id, true);
            ms_lock(&E.lock);
        }
    }
    if (e != MS_OK)
        return e == MS_E_NOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    E.next_buffer++;
    E.st.small_allocs++;
    return CUDA_SUCCESS;
}

int ms_engine_alloc(uint64_t *dptr, uint64_t bytes, bool *handled)
{
    *handled = false;
    if (!ms_engine_active() || bytes == 0)
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    if (!ms__eng_start() || !ms__eng_mine_ctx()) {
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    *handled = true;
    uint64_t va = 0;
    uint32_t id = 0;
    /* Small allocations share slabs where pointer queries can answer for each one (the VMM
     * backing: a managed allocation's queries are the driver's, which knows only the slab). */
    int rc = bytes <= MS_SLAB_MAX && E.backing == BACK_VMM && E.slab_on
                 ? alloc_small(bytes, &va)
                 : alloc_region(bytes, &va, &id);
    if (rc == CUDA_SUCCESS)
        *dptr = va;
    ms_unlock(&E.lock);
    return rc;
}

int ms_engine_free(uint64_t dptr, bool *handled)
{
    *handled = false;
    if (!ms__eng_is_active())
        return CUDA_SUCCESS;
    ms_lock(&E.lock);
    uint32_t id;
    struct ms_region *r = NULL;
    if (ms_rtable_lookup(&E.rt, 0, dptr, &id, NULL) == MS_OK)
        r = ms_region_get(&E.rt, id);
    long slab = r ? ms_slabs_find(&E.slabs, dptr) : -1;
    if (!r || (slab < 0 && r->base != dptr) ||
        (slab >= 0 &&
         (!ms_slabs_block_at(&E.slabs, (size_t)slab, dptr) ||
          ms_slabs_block_at(&E.slabs, (size_t)slab, dptr)->off != dptr - E.slabs.s[slab].base))) {
        /* Not the start of an allocation of the engine's: the driver's to refuse. */
        ms_unlock(&E.lock);
        return CUDA_SUCCESS;
    }
    *handled = true;
    if (r->kind == MS_RK_VMM) {
        ms_unlock(&E.lock);
        return CUDA_ERROR_INVALID_VALUE; /* the application's own mapping: not cuMemFree's */
    }
    /* cuMemFree waits for the device; so does this: nothing in flight may use it. */
    MS_REAL(cuCtxSynchronize)();
    if (slab >= 0) {
        uint32_t region;
        bool empty = false;
        int e = ms_slabs_free(&E.slabs, dptr, &region, &empty);
        /* An empty slab goes at once, as a region of its own would (a program that frees
         * everything holds nothing, host chunks included). The block is free either way. */
        if (e == MS_OK && empty) {
            drop_region_unlock(region, true);
            return CUDA_SUCCESS;
        }
        ms_unlock(&E.lock);
        return e == MS_OK ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    }
    return drop_region_unlock(id, false);
}
