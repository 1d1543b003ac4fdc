/*
 * alloc.c - the core's allocator wrapper and error strings.
 *
 * Every heap allocation in core/ passes through here so that tests can inject a failure at the
 * Nth allocation and count live blocks. The wrappers add no header: ms_free() cannot know sizes,
 * it only counts blocks. The counters are relaxed atomics, so the shim's threads may allocate
 * through here too (the core itself takes no lock and starts no thread; see ms.h).
 */
#include "ms.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fail_countdown; /* 0: never fail; k: the kth allocation from now fails */
static uint64_t live_blocks;

static int should_fail(void)
{
    uint64_t c = __atomic_load_n(&fail_countdown, __ATOMIC_RELAXED);
    while (c != 0) {
        if (__atomic_compare_exchange_n(&fail_countdown, &c, c - 1, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return c == 1;
    }
    return 0;
}

static void live_add(int64_t d)
{
    __atomic_add_fetch(&live_blocks, (uint64_t)d, __ATOMIC_RELAXED);
}

void ms_alloc_fail_after(uint64_t n)
{
    __atomic_store_n(&fail_countdown, n, __ATOMIC_RELAXED);
}

uint64_t ms_alloc_live(void)
{
    return __atomic_load_n(&live_blocks, __ATOMIC_RELAXED);
}

void *ms_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    void *p = malloc(n ? n : 1);
    if (p)
        live_add(1);
    return p;
}

void *ms_calloc(size_t count, size_t n)
{
    if (should_fail())
        return NULL;
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (p)
        live_add(1);
    return p;
}

void *ms_realloc(void *p, size_t n)
{
    if (n == 0) {
        ms_free(p);
        return NULL;
    }
    if (should_fail())
        return NULL;
    void *q = realloc(p, n);
    if (q && !p)
        live_add(1);
    return q;
}

char *ms_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ms_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void ms_free(void *p)
{
    if (!p)
        return;
    live_add(-1);
    free(p);
}

int ms_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return MS_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return MS_E_NOMEM;
        ncap *= 2;
    }
    void *p = ms_realloc(*arr, ncap * elem);
    if (!p)
        return MS_E_NOMEM;
    *arr = p;
    *cap = ncap;
    return MS_OK;
}

const char *ms_strerror(int err)
{
    switch (err) {
    case MS_OK: return "success";
    case MS_E_NOMEM: return "out of memory";
    case MS_E_INVAL: return "invalid argument";
    case MS_E_NOSPACE: return "the memory budget cannot hold the request";
    case MS_E_GPU: return "GPU operation failed";
    case MS_E_PARSE: return "malformed input";
    case MS_E_NOTFOUND: return "not found";
    case MS_E_BUSY: return "object is in use";
    case MS_E_STATE: return "illegal state transition";
    case MS_E_OVERLAP: return "region overlaps an existing region";
    case MS_E_VERSION: return "unsupported version";
    case MS_E_IO: return "input/output error";
    default: return "unknown error";
    }
}
