/*
 * funcinfo.c - per-kernel facts (parameter layout, name), asked of the driver once per handle.
 *
 * Design
 *   A launch's kernelParams is an array of pointers, one per parameter, without sizes: to pack
 *   them into the buffer the device sees, the shim needs each parameter's offset and size.
 *   cuFuncGetParamInfo(f, i) gives them (CUDA >= 12.4), and CUDA_ERROR_INVALID_VALUE past the
 *   last parameter; a CUkernel passed as a CUfunction may need cuKernelGetParamInfo instead.
 *   When neither answers, the layout is unknown and the launch is recorded as such. A layout
 *   that is not ascending and non-overlapping, or longer than the 32 KiB CUDA allows, is
 *   treated as unknown rather than trusted.
 *
 *   The cache is an open-addressing hash table keyed by handle. Every launch looks its kernel
 *   up, so the lookup takes no lock: the table in use is one pointer, loaded with acquire, and
 *   each slot goes from NULL to its entry once, by a release store. Writers (under
 *   ms__events_lock) insert in place, or, when the table would be more than half full, fill a
 *   table twice the size and publish it instead; a lookup that ran on an older table and missed
 *   takes the lock and looks again before it asks the driver. A miss queries the driver without
 *   the lock, then inserts (a racing thread's entry wins, ours is dropped). Entries are
 *   immutable once published and live until exit, and so does every table ever published: a
 *   module unload, or a growth, moves the old table to a retired list instead of freeing it, so
 *   a launch in another thread can keep reading it. Module loads and unloads are rare; the
 *   retired memory is bounded by twice the number of kernels ever launched.
 */
#include "shim/shim_int.h"
#include "shim/locks.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 1024u              /* more than this: unknown layout (the trace's limit too) */
#define MAX_PARAM_BYTES (32u * 1024u) /* CUDA's limit on a kernel's parameter space */

struct table {
    struct ms_funcinfo **slots; /* cap entries, NULL = free; each set once (release) */
    size_t cap;                 /* a power of two */
    struct table *retired_next; /* on the retired list (under the lock) */
};

static struct table *cur;     /* the table in use, NULL when empty (atomic: acquire / release) */
static size_t ncur;           /* entries in cur (under the lock) */
static struct table *retired; /* tables no longer in use, never freed (under the lock) */
static const struct ms_funcinfo unknown_fi = {.name = ""};

static size_t fhash(const void *f, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)f;
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (size_t)x & (cap - 1);
}

/* Lookup in t (any thread, no lock); NULL when absent. A table is at most half full, so the
 * probe meets a free slot. */
static struct ms_funcinfo *find_in(const struct table *t, const void *f)
{
    if (!t)
        return NULL;
    for (size_t j = fhash(f, t->cap);; j = (j + 1) & (t->cap - 1)) {
        struct ms_funcinfo *e = __atomic_load_n(&t->slots[j], __ATOMIC_ACQUIRE);
        if (!e || e->func == f)
            return e;
    }
}

static struct ms_funcinfo *find(const void *f)
{
    return find_in(__atomic_load_n(&cur, __ATOMIC_ACQUIRE), f);
}

static void retire(struct table *t)
{
    t->retired_next = retired;
    retired = t;
}

/* Insert under the lock; false when out of memory. */
static bool insert(struct ms_funcinfo *fi)
{
    struct table *t = cur;
    if (!t || (ncur + 1) * 2 > t->cap) {
        size_t ncap = t ? t->cap * 2 : 256;
        struct table *g = ms_calloc(1, sizeof *g);
        struct ms_funcinfo **s = ms_calloc(ncap, sizeof *s);
        if (!g || !s) {
            ms_free(g);
            ms_free(s);
            return false;
        }
        for (size_t i = 0; t && i < t->cap; i++) {
            if (!t->slots[i])
                continue;
            size_t j = fhash(t->slots[i]->func, ncap);
            while (s[j])
                j = (j + 1) & (ncap - 1);
            s[j] = t->slots[i];
        }
        g->slots = s;
        g->cap = ncap;
        __atomic_store_n(&cur, g, __ATOMIC_RELEASE);
        if (t)
            retire(t);
        t = g;
    }
    size_t j = fhash(fi->func, t->cap);
    while (t->slots[j])
        j = (j + 1) & (t->cap - 1);
    __atomic_store_n(&t->slots[j], fi, __ATOMIC_RELEASE);
    ncur++;
    return true;
}

static bool layout_sane(const struct ms_param_layout *l, uint32_t n)
{
    uint64_t end = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (l[i].size == 0 || l[i].offset < end)
            return false;
        end = (uint64_t)l[i].offset + l[i].size;
        if (end > MAX_PARAM_BYTES)
            return false;
    }
    return true;
}

/* Parameter i of f, asked as a CUfunction (k == 0) or as a CUkernel (k == 1). */
static CUresult param_info(int k, const void *f, size_t i, size_t *off, size_t *size)
{
    if (k == 0)
        return MS_REAL(cuFuncGetParamInfo)((CUfunction)f, i, off, size);
    return MS_REAL(cuKernelGetParamInfo)((CUkernel)f, i, off, size);
}

/* Ask the driver (no lock held). Fills fi's layout; leaves fi->known false when unknown. */
static void query_layout(const void *f, struct ms_funcinfo *fi)
{
    struct ms_param_layout *l = NULL;
    for (int k = 0; k < 2; k++) {
        uint32_t n = 0, cap = 0;
        CUresult rc = CUDA_SUCCESS;
        while (n <= MAX_PARAMS) {
            size_t off = 0, size = 0;
            rc = param_info(k, f, n, &off, &size);
            if (rc != CUDA_SUCCESS)
                break;
            if (off > UINT32_MAX || size > UINT32_MAX) {
                rc = CUDA_ERROR_UNKNOWN;
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                struct ms_param_layout *g = ms_realloc(l, cap * sizeof *l);
                if (!g) {
                    rc = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
                l = g;
            }
            l[n++] = (struct ms_param_layout){(uint32_t)off, (uint32_t)size};
        }
        /* INVALID_VALUE ends the list; at index 0 it means "no parameters". Anything else at
         * index 0 means "no information": try the CUkernel query. */
        if (rc == CUDA_ERROR_INVALID_VALUE && n <= MAX_PARAMS && layout_sane(l, n)) {
            fi->known = true;
            fi->nparams = n;
            fi->layout = n ? l : NULL;
            fi->params_bytes = n ? l[n - 1].offset + l[n - 1].size : 0;
            if (!n)
                ms_free(l);
            return;
        }
        if (n > 0 || rc == CUDA_ERROR_INVALID_VALUE) {
            MS_LOG_ONCE("kernel %p: unusable parameter layout (%u entries, error %d); "
                        "launches of such kernels are recorded with unknown layout",
                        f, n, (int)rc);
            break;
        }
    }
    ms_free(l);
}

static const char *query_name(const void *f)
{
    const char *name = NULL;
    if (MS_REAL(cuFuncGetName)(&name, (CUfunction)f) != CUDA_SUCCESS)
        name = NULL;
    if (!name && MS_REAL(cuKernelGetName)(&name, (CUkernel)f) != CUDA_SUCCESS)
        name = NULL;
    char *copy = name ? ms_strdup(name) : NULL;
    return copy ? copy : "";
}

const struct ms_funcinfo *ms__shim_funcinfo(const void *f)
{
    struct ms_funcinfo *e = find(f);
    if (e)
        return e;

    struct ms_funcinfo *fi = ms_calloc(1, sizeof *fi);
    if (!fi) {
        MS_LOG_ONCE("out of memory caching kernel facts");
        return &unknown_fi;
    }
    fi->func = f;
    query_layout(f, fi);
    fi->name = query_name(f);

    ms_lock(&ms__events_lock);
    e = find(f);
    if (!e && insert(fi)) {
        e = fi;
        fi = NULL;
    }
    ms_unlock(&ms__events_lock);
    if (!fi)
        return e;
    /* Lost a race, or no memory to insert: ours is not shared with anyone. Keep it alive
     * (leaked) when it is what we return. */
    if (e) {
        ms_free(fi->layout);
        if (fi->name[0])
            ms_free((char *)fi->name);
        ms_free(fi);
        return e;
    }
    MS_LOG_ONCE("out of memory caching kernel facts");
    return fi;
}

void ms__shim_funcinfo_flush(void)
{
    ms_lock(&ms__events_lock);
    struct table *t = cur;
    if (t) { /* retired: a launch in another thread may still read it */
        __atomic_store_n(&cur, NULL, __ATOMIC_RELEASE);
        retire(t);
        ncur = 0;
    }
    ms_unlock(&ms__events_lock);
}
