/*
 * hook_vmm.c - hooks for the application's own virtual memory management (cuMemCreate,
 * cuMemMap and the rest), as PyTorch's expandable segments, JAX/XLA's allocator and llama.cpp's
 * pools use it.
 *
 * Design
 *   When the memory engine takes VMM memory (engine.h: ms_engine_vmm_ready), cuMemCreate of
 *   plain pinned device memory on the current device (no compression or usage flags; a POSIX
 *   file descriptor or fabric export type and RDMA capability are accepted unless
 *   MSCHED_VMM_EXPORTABLE=0) returns a *virtual* handle: a record with the requested size and
 *   properties; no device memory is taken, and no host memory. Its slots are chunks of
 *   ms_engine_chunk_bytes(size) bytes (`cb`).
 *
 *   cuMemMap of a virtual handle that lines up with its slots (an offset at a slot boundary, an
 *   end at one or at the handle's end: the driver maps whole handles at offset 0) while no
 *   other mapping of it covers those slots becomes an always-mapped engine region (kind
 *   MS_RK_VMM, its chunks the slots; ms_engine_vmm_map_amap), like a cuMemAlloc allocation:
 *   every chunk is mapped at the application's address, inside its reservation, to device
 *   memory or to a host chunk (the engine says which). cuMemUnmap evicts what is resident into
 *   host chunks, and the engine hands their tokens back; the handle keeps them by slot (`kept`)
 *   and its next mapping over those slots takes them (those chunks start HOST, with their
 *   bytes), at the same address or another. Host memory is thus pinned only for chunks that
 *   left the device. The last mapping of a handle already released (CUDA's samples release a
 *   handle right after mapping it) saves nothing at its unmap: nobody can map it again.
 *   Allocators free the other way round: PyTorch's expandable segments (and XLA's allocator)
 *   unmap a handle they still hold and release it right after, so saving its contents at the
 *   unmap copied every freed tensor to the host for nothing. Such an unmap (always mapped, the
 *   handle still referenced) is *pending* instead: the mapping leaves `maps` at once (the
 *   application's view), its region stays as it was, and it is carried out when the handle's
 *   last reference goes (then nothing is saved: the region is dropped), or before anything
 *   that could use the range or the handle again: any cuMemMap, a cuMemUnmap or
 *   cuMemAddressFree over its range (then with its contents saved, as before). With MAX_PEND
 *   pending, an unmap is carried out at once, as before.
 *
 *   Anything else (a handle mapped twice at once, a mapping that does not line up, a handle
 *   whose store holds data) is the fallback, as every mapping was before: a region backed by a
 *   pinned host store of the handle's size (`host`, pinned at the first fallback mapping, in
 *   one piece: a mapping may start anywhere in the handle), resident only when used and
 *   unmapped when evicted, so commands need its chunks resident; its cuMemUnmap saves what is
 *   resident into the store (`has_data`), unless the handle's contents live in host chunks
 *   (kept, or an always-mapped mapping of it is still there): the two mappings never shared
 *   their bytes, and the host chunks win, so a handle mapped twice can be mapped whole again. A
 *   fallback mapping over slots that keep host chunks is refused (CUDA_ERROR_NOT_SUPPORTED,
 *   said once): their bytes cannot move into the store.
 *
 *   cuMemSetAccess on adopted ranges succeeds (the engine maps its chunks read-write for this
 *   device); cuMemRelease frees the record, its store and its kept host chunks once it is
 *   neither referenced nor mapped. Retaining, property and access queries are answered from
 *   the record. Export of a virtual handle is refused (CUDA_ERROR_NOT_SUPPORTED, one line on
 *   stderr naming MSCHED_VMM_EXPORTABLE=0): its memory moves, so another process could not
 *   hold it. PyTorch's expandable segments and XLA ask for an exportable handle (a POSIX file
 *   descriptor type, RDMA capability where the GPU has it) but export only when a tensor is
 *   shared with another process: virtualized by default (the RDMA request ignored), they work
 *   until such sharing, which then fails cleanly. NCCL creates its buffers exportable and
 *   exports them to the other ranks: MSCHED_VMM_EXPORTABLE=0 passes exportable handles to the
 *   driver. Any cuMemCreate that goes to the driver says why on stderr (the first one), and its
 *   device memory is counted against the budget until its release (ms_engine_driver_mem,
 *   `dhandles`). Everything else, and every handle that is not virtual, goes to the driver;
 *   ranges that mix adopted and driver mappings are split, the driver getting the parts that
 *   are its own. Mappings are reported as allocations (MS_RK_VMM) either way, so the shim's
 *   live bytes include them.
 *
 * Invariants (under vmm_lock): every virtual handle is in `handles`; every adopted mapping is
 *   in `maps`, which is sorted by address, or, unmapped by the application but not carried
 *   out yet, in `pend` (at most MAX_PEND; still counted in its handle's nmaps, its region
 *   still the engine's); a handle's store and kept host chunks are freed only when its
 *   references and mappings are both zero; a slot's kept token is 0 while an always-mapped
 *   mapping covers it (its region holds the host chunk then); `dhandles` lists the device
 *   memory handles the driver made past the engine that are not released yet.
 *   Lock order: vmm_lock, then the engine's (never the reverse).
 */
#include "shim/shim_int.h"
#include "shim/locks.h"
#include "shim/config.h"

#include "shim/client.h"
#include "shim/engine.h"
#include "shim/hostmem.h"
#include "shim/shim_events.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VH_MAGIC 0x6d737668u /* "msvh" */

struct vhandle {
    uint32_t magic;
    uint64_t size;
    void *host; /* the store: NULL until a fallback mapping needs it */
    CUmemAllocationProp prop;
    uint32_t refs, nmaps;
    bool has_data; /* a fallback mapping was unmapped after use: the store holds contents */
    uint64_t cb; /* slot (chunk) size of its always-mapped mappings: ms_engine_chunk_bytes(size) */
    size_t nslots;
    uint64_t *kept; /* per slot: the host chunk token an unmapped mapping left (0: none) */
};

struct vmap {
    uint64_t va, size, offset;
    struct vhandle *vh;
    bool amap; /* always mapped (slot-aligned); else the fallback on the store */
};

static struct ms_lock vmm_lock = MS_LOCK_INIT(MS_LK_VMM, "vmm");
static struct vhandle **handles;
static size_t nhandles, caphandles;
static struct vmap *maps;
static size_t nmaps, capmaps;
#define MAX_PEND 64
static struct vmap pend[MAX_PEND];
static size_t npend;

/* Device memory handles the driver made past the engine (counted against the budget:
 * ms_engine_driver_mem), until their release. */
struct dhandle {
    CUmemGenericAllocationHandle h;
    uint64_t size;
};
static struct dhandle *dhandles;
static size_t ndhandles, capdhandles;

static void driver_note(CUmemGenericAllocationHandle h, uint64_t size)
{
    ms_lock(&vmm_lock);
    bool ok = ms_grow((void **)&dhandles, &capdhandles, ndhandles + 1, sizeof(*dhandles)) == MS_OK;
    if (ok)
        dhandles[ndhandles++] = (struct dhandle){h, size};
    ms_unlock(&vmm_lock);
    if (ok)
        ms_engine_driver_mem((int64_t)size);
}

/* The driver released handle h: its bytes no longer count (vmm_lock held). */
static uint64_t driver_forget(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < ndhandles; i++)
        if (dhandles[i].h == h) {
            uint64_t size = dhandles[i].size;
            dhandles[i] = dhandles[--ndhandles];
            return size;
        }
    return 0;
}

static struct vhandle *virt(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < nhandles; i++)
        if ((CUmemGenericAllocationHandle)(uintptr_t)handles[i] == h)
            return handles[i];
    return NULL;
}

static struct vmap *map_at(uint64_t va)
{
    for (size_t i = 0; i < nmaps; i++)
        if (va - maps[i].va < maps[i].size)
            return &maps[i];
    return NULL;
}

/* Whether a mapping of vh covers part of [lo, hi) of the handle (vmm_lock held). */
static bool handle_mapped(const struct vhandle *vh, uint64_t lo, uint64_t hi)
{
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].vh == vh && maps[i].offset < hi && maps[i].offset + maps[i].size > lo)
            return true;
    return false;
}

/* Whether an always-mapped mapping of vh exists (vmm_lock held). */
static bool amap_mapped(const struct vhandle *vh)
{
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].vh == vh && maps[i].amap)
            return true;
    return false;
}

/* Whether vh keeps host chunks for a slot that [lo, hi) of the handle overlaps. */
static bool kept_in(const struct vhandle *vh, uint64_t lo, uint64_t hi)
{
    for (size_t k = (size_t)(lo / vh->cb); vh->kept && k < vh->nslots && k * vh->cb < hi; k++)
        if (vh->kept[k])
            return true;
    return false;
}

static void vh_maybe_free(struct vhandle *vh)
{
    if (vh->refs || vh->nmaps)
        return;
    for (size_t i = 0; i < nhandles; i++)
        if (handles[i] == vh) {
            handles[i] = handles[--nhandles];
            break;
        }
    ms__host_unpin(vh->host); /* a release cannot be undone: nothing to report it to */
    if (vh->kept)
        ms_engine_vmm_host_free(vh->kept, vh->nslots);
    ms_free(vh->kept);
    vh->magic = 0;
    ms_free(vh);
}

/* Why a cuMemCreate cannot be virtualized, or NULL when it can. */
static const char *not_virtualizable(size_t size, const CUmemAllocationProp *p,
                                     unsigned long long flags)
{
    CUdevice dev;
    if (!p || flags != 0 || size == 0 || size % MS_GRAN != 0)
        return "unusual size or flags";
    if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return "not plain device memory";
    bool exportable = ms__shim_opt(MS_OPT_VMM_EXPORTABLE) != 0;
    if (!exportable &&
        (p->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE || p->allocFlags.gpuDirectRDMACapable))
        return "it asks for an exportable or RDMA-capable handle, as NCCL and PyTorch's "
               "expandable segments do, and MSCHED_VMM_EXPORTABLE=0 passes those to the driver";
    if (p->requestedHandleTypes &
        ~(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC))
        return "an export handle type other than a file descriptor or fabric handle";
    if (p->allocFlags.compressionType != 0 || p->allocFlags.usage != 0)
        return "compressible or special-usage memory";
    if (MS_REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS || dev != p->location.id)
        return "memory of another device than the current context's";
    return NULL;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!handle)
        return MS_REAL(cuMemCreate)(handle, size, prop, flags);
    const char *why = NULL;
    if (!ms_engine_vmm_ready()) {
        if (!ms_engine_active())
            return MS_REAL(cuMemCreate)(handle, size, prop, flags); /* the shim only observes */
        why = "the memory engine in force does not move VMM memory (MSCHED_ENGINE=vmm does), or "
              "the call is in another context than the engine's";
    } else {
        why = not_virtualizable(size, prop, flags);
    }
    if (why) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            ms__shim_say("cuMemCreate passed to the driver, not moved by msched (%s): such "
                         "memory stays resident and counts against the budget",
                         why);
        CUresult rc = MS_REAL(cuMemCreate)(handle, size, prop, flags);
        if (rc == CUDA_SUCCESS && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
            driver_note(*handle, size);
        return rc;
    }
    struct vhandle *vh = ms_calloc(1, sizeof(*vh));
    if (!vh)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vh->magic = VH_MAGIC;
    vh->size = size;
    vh->cb = ms_engine_chunk_bytes(size);
    vh->nslots = (size_t)((size + vh->cb - 1) / vh->cb);
    vh->prop = *prop;
    vh->refs = 1;
    ms_lock(&vmm_lock);
    bool ok = true;
    if (nhandles == caphandles) {
        size_t cap = caphandles ? caphandles * 2 : 64;
        void *p = ms_realloc(handles, cap * sizeof(*handles));
        if (p) {
            handles = p;
            caphandles = cap;
        } else {
            ok = false;
        }
    }
    if (ok)
        handles[nhandles++] = vh;
    ms_unlock(&vmm_lock);
    if (!ok) {
        ms_free(vh);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)vh;
    return CUDA_SUCCESS;
}

/* Carry out the unmap of adopted mapping m, no longer in `maps` (vmm_lock held): its contents
 * saved unless nobody can map them again, its handle's count of mappings down (the caller then
 * calls vh_maybe_free). On failure the mapping is still there (its region unchanged). */
static CUresult unmap_adopted(struct vmap m)
{
    bool handled = false, kept = false;
    size_t slot0 = (size_t)(m.offset / m.vh->cb);
    /* A released handle's last mapping: its contents die with it, nothing to save. */
    bool keep = m.vh->refs > 0 || m.vh->nmaps > 1;
    CUresult rc = (CUresult)ms_engine_vmm_unmap(m.va, m.size, keep, &handled, m.vh->kept + slot0,
                                                m.amap ? m.vh->nslots - slot0 : 0, &kept);
    if (rc == CUDA_SUCCESS && !handled)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    m.vh->nmaps--;
    /* A fallback mapping's contents are in the store now, unless the handle's contents live in
     * host chunks (kept, or an always-mapped mapping of it still there): the two never shared
     * their bytes, and those win, so the next mapping can take them. */
    if (!kept && !kept_in(m.vh, 0, m.vh->size) && !amap_mapped(m.vh))
        m.vh->has_data = true;
    return CUDA_SUCCESS; /* the caller frees the handle's record if it can go */
}

/* Put m back into `maps`, sorted (vmm_lock held; room was there when it left). */
static void maps_insert(struct vmap m)
{
    size_t i = nmaps;
    while (i > 0 && maps[i - 1].va > m.va)
        i--;
    memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof(*maps));
    maps[i] = m;
    nmaps++;
}

/* Carry out the pending unmaps of handle vh (NULL: of any handle) that overlap [lo, hi)
 * (vmm_lock held). One that fails is an adopted mapping again (the application may unmap it
 * once more); the first failure is returned. */
static CUresult settle(const struct vhandle *vh, uint64_t lo, uint64_t hi)
{
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < npend;) {
        struct vmap m = pend[i];
        if ((vh && m.vh != vh) || (!vh && (m.va >= hi || m.va + m.size <= lo))) {
            i++;
            continue;
        }
        pend[i] = pend[--npend];
        CUresult r = unmap_adopted(m);
        if (r != CUDA_SUCCESS) {
            maps_insert(m);
            if (rc == CUDA_SUCCESS)
                rc = r;
        } else if (!vh) {
            vh_maybe_free(m.vh); /* settling vh's own: its caller frees it */
        }
    }
    return rc;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ms_lock(&vmm_lock);
    struct vhandle *vh = virt(handle);
    CUresult rc = CUDA_SUCCESS;
    if (vh && vh->refs == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (vh) {
        vh->refs--;
        /* Its pending unmaps (nobody can map its contents again now): dropped, nothing saved. */
        if (vh->refs == 0)
            rc = settle(vh, 0, 0);
        vh_maybe_free(vh);
    }
    ms_unlock(&vmm_lock);
    if (vh)
        return rc;
    rc = MS_REAL(cuMemRelease)(handle);
    if (rc == CUDA_SUCCESS) {
        ms_lock(&vmm_lock);
        uint64_t gone = driver_forget(handle);
        ms_unlock(&vmm_lock);
        if (gone)
            ms_engine_driver_mem(-(int64_t)gone);
    }
    return rc;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    ms_lock(&vmm_lock);
    /* A range or a handle of a pending unmap may be mapped again: carry them out first. */
    CUresult sr = settle(NULL, 0, UINT64_MAX);
    if (sr != CUDA_SUCCESS) {
        ms_unlock(&vmm_lock);
        return sr;
    }
    struct vhandle *vh = virt(handle);
    if (!vh) {
        ms_unlock(&vmm_lock);
        CUresult rc = MS_REAL(cuMemMap)(ptr, size, offset, handle, flags);
        if (rc == CUDA_SUCCESS)
            ms_shim_on_alloc(ptr, size, MS_RK_VMM);
        return rc;
    }
    CUresult rc = CUDA_SUCCESS;
    if (flags != 0 || size == 0 || size % MS_GRAN || offset % MS_GRAN || ptr % MS_GRAN ||
        offset > vh->size || size > vh->size - offset || map_at(ptr) || map_at(ptr + size - 1))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (ms_grow((void **)&maps, &capmaps, nmaps + 1, sizeof(*maps)) != MS_OK)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!vh->kept && !(vh->kept = ms_calloc(vh->nslots, sizeof(*vh->kept))))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t end = offset + size;
    bool amap = rc == CUDA_SUCCESS && !vh->has_data && offset % vh->cb == 0 &&
                (end % vh->cb == 0 || end == vh->size) && !handle_mapped(vh, offset, end);
    size_t slot0 = (size_t)(offset / vh->cb);
    if (rc == CUDA_SUCCESS && amap) {
        rc = (CUresult)ms_engine_vmm_map_amap(ptr, size, vh->cb, vh->kept + slot0);
        if (rc == CUDA_SUCCESS) /* the region holds them now */
            memset(vh->kept + slot0, 0, (size_t)((size + vh->cb - 1) / vh->cb) * sizeof(uint64_t));
    } else if (rc == CUDA_SUCCESS && kept_in(vh, offset, end)) {
        /* The contents of that part of the handle live in host chunks an always-mapped mapping
         * left, which a mapping that does not line up with them cannot take. */
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            ms__shim_say("cuMemMap refused (CUDA_ERROR_NOT_SUPPORTED): part of a VMM handle "
                         "mapped again at an offset or size that does not line up with its "
                         "%llu MiB chunks, after a mapping that did; run the program with "
                         "MSCHED_ENGINE=off if it needs this",
                         (unsigned long long)(vh->cb / MS_MIB));
        rc = CUDA_ERROR_NOT_SUPPORTED;
    } else if (rc == CUDA_SUCCESS) {
        /* The fallback: the store is pinned at its first such mapping, in one piece (a
         * mapping may start anywhere in the handle, so its chunks need not fall on piece
         * boundaries). */
        if (!vh->host && ms__host_pin(vh->size, vh->size, &vh->host) != CUDA_SUCCESS)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc == CUDA_SUCCESS)
            rc = (CUresult)ms_engine_vmm_map(ptr, size, (char *)vh->host + offset, vh->has_data);
    }
    if (rc == CUDA_SUCCESS) {
        size_t i = nmaps;
        while (i > 0 && maps[i - 1].va > ptr)
            i--;
        memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof(*maps));
        maps[i] = (struct vmap){ptr, size, offset, vh, amap};
        nmaps++;
        vh->nmaps++;
    }
    ms_unlock(&vmm_lock);
    if (rc == CUDA_SUCCESS)
        ms_shim_on_alloc(ptr, size, MS_RK_VMM);
    return rc;
}

/*
 * Hand the parts of [ptr, ptr + size) outside adopted mappings to `real` (vmm_lock held);
 * CUDA_SUCCESS when every part succeeded. `adopted`: whether any adopted mapping overlaps.
 */
static CUresult gaps(uint64_t ptr, uint64_t size, CUresult (*real)(uint64_t, uint64_t, void *),
                     void *arg, bool *adopted)
{
    *adopted = false;
    uint64_t cur = ptr, end = ptr + size;
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < nmaps && cur < end; i++) {
        if (maps[i].va + maps[i].size <= cur || maps[i].va >= end)
            continue;
        *adopted = true;
        if (maps[i].va > cur && rc == CUDA_SUCCESS)
            rc = real(cur, maps[i].va - cur, arg);
        cur = maps[i].va + maps[i].size;
    }
    if (!*adopted)
        return CUDA_SUCCESS; /* the caller forwards the whole call itself */
    if (cur < end && rc == CUDA_SUCCESS)
        rc = real(cur, end - cur, arg);
    return rc;
}

static CUresult real_unmap(uint64_t p, uint64_t n, void *arg)
{
    (void)arg;
    return MS_REAL(cuMemUnmap)((CUdeviceptr)p, n);
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ms_lock(&vmm_lock);
    /* A pending unmap over this range first (unmapped twice: the driver answers as natively). */
    CUresult rc = settle(NULL, ptr, ptr + size);
    if (rc != CUDA_SUCCESS) {
        ms_unlock(&vmm_lock);
        return rc;
    }
    bool adopted;
    rc = gaps(ptr, size, real_unmap, NULL, &adopted);
    if (!adopted) {
        ms_unlock(&vmm_lock);
        struct ms_shim_alloc was;
        bool known = ms_shim_on_free_begin(ptr, &was);
        rc = MS_REAL(cuMemUnmap)(ptr, size);
        ms_shim_on_free_end(ptr, known ? &was : NULL, rc == CUDA_SUCCESS);
        return rc;
    }
    for (size_t i = 0; i < nmaps && rc == CUDA_SUCCESS;) {
        struct vmap m = maps[i];
        if (m.va < ptr || m.va + m.size > ptr + size) {
            if (m.va < ptr + size && m.va + m.size > ptr)
                rc = CUDA_ERROR_INVALID_VALUE; /* only part of a mapping */
            i++;
            continue;
        }
        struct ms_shim_alloc was;
        bool known = ms_shim_on_free_begin(m.va, &was);
        memmove(&maps[i], &maps[i + 1], (nmaps - i - 1) * sizeof(*maps));
        nmaps--;
        /* Always mapped, of a handle still held: pending (see Design) while there is room,
         * else carried out now, its contents saved. */
        if (m.amap && m.vh->refs > 0 && npend < MAX_PEND) {
            pend[npend++] = m;
        } else {
            rc = unmap_adopted(m);
            if (rc != CUDA_SUCCESS)
                maps_insert(m);
            else
                vh_maybe_free(m.vh);
        }
        ms_shim_on_free_end(m.va, known ? &was : NULL, rc == CUDA_SUCCESS);
    }
    ms_unlock(&vmm_lock);
    return rc;
}

/* The application frees a reservation: pending unmaps inside it are carried out first (the
 * driver frees only an unmapped range). */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ms_lock(&vmm_lock);
    CUresult rc = settle(NULL, ptr, ptr + size);
    ms_unlock(&vmm_lock);
    return rc == CUDA_SUCCESS ? MS_REAL(cuMemAddressFree)(ptr, size) : rc;
}

struct access_args {
    const CUmemAccessDesc *desc;
    size_t count;
};

static CUresult real_access(uint64_t p, uint64_t n, void *arg)
{
    const struct access_args *a = arg;
    return MS_REAL(cuMemSetAccess)((CUdeviceptr)p, n, a->desc, a->count);
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    if (!desc || count == 0)
        return MS_REAL(cuMemSetAccess)(ptr, size, desc, count);
    struct access_args a = {desc, count};
    ms_lock(&vmm_lock);
    bool adopted;
    CUresult rc = gaps(ptr, size, real_access, &a, &adopted);
    ms_unlock(&vmm_lock);
    return adopted ? rc : MS_REAL(cuMemSetAccess)(ptr, size, desc, count);
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    ms_lock(&vmm_lock);
    struct vmap *m = map_at(ptr);
    int dev = m ? m->vh->prop.location.id : 0;
    ms_unlock(&vmm_lock);
    if (!m)
        return MS_REAL(cuMemGetAccess)(flags, location, ptr);
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == dev
                 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ms_lock(&vmm_lock);
    struct vmap *m = map_at((uint64_t)(uintptr_t)addr);
    if (m && handle) {
        m->vh->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->vh;
    }
    ms_unlock(&vmm_lock);
    if (!m)
        return MS_REAL(cuMemRetainAllocationHandle)(handle, addr);
    return handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    ms_lock(&vmm_lock);
    struct vhandle *vh = virt(handle);
    if (vh && prop)
        *prop = vh->prop;
    ms_unlock(&vmm_lock);
    if (!vh)
        return MS_REAL(cuMemGetAllocationPropertiesFromHandle)(prop, handle);
    return prop ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    ms_lock(&vmm_lock);
    bool v = virt(handle) != NULL;
    ms_unlock(&vmm_lock);
    if (v) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            ms__shim_say("cuMemExportToShareableHandle refused (CUDA_ERROR_NOT_SUPPORTED): "
                         "msched virtualizes exportable VMM handles (it moves their memory, so "
                         "another process could not hold it); run the program with "
                         "MSCHED_VMM_EXPORTABLE=0 to give such handles to the driver (resident, "
                         "counted against the budget), or with --engine off (MSCHED_ENGINE=off)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return MS_REAL(cuMemExportToShareableHandle)(shareableHandle, handle, handleType, flags);
}
