/*
 * ms.h - what every part of msched shares: error codes, sizes, identifiers, and the allocator.
 *
 * Design
 *   core/ is pure C11: no cuda.h, no sockets, no threads, no getenv, no printing. It decides;
 *   the programs around it (shim, daemon, cli, simulator) act. Every fallible function returns an
 *   int that is MS_OK (0) or a negative MS_E_* code; nothing logs and continues.
 *
 *   All heap memory in core/ goes through ms_malloc/ms_calloc/ms_realloc/ms_free so tests can make
 *   the Nth allocation fail (ms_alloc_fail_after) and check that nothing leaked
 *   (ms_alloc_live). The counters are process-global relaxed atomics, so the shim's threads
 *   allocate through the same wrappers (and the same fault injection reaches them); the core's
 *   data structures themselves are used by one thread at a time (the shim's locks serialize).
 *
 * Invariants
 *   - ms_free(NULL) is a no-op; ms_realloc(p, 0) frees p and returns NULL.
 *   - ms_alloc_live() == number of blocks handed out and not yet freed.
 */
#ifndef MS_H
#define MS_H

#include <stddef.h>
#include <stdint.h>

#define MS_KIB (1024ull)
#define MS_MIB (1024ull * 1024ull)
#define MS_GIB (1024ull * 1024ull * 1024ull)

/* Physical granularity of the driver's virtual memory management: chunks are multiples of it. */
#define MS_GRAN (2ull * MS_MIB)
/* Chunks of big regions (core/region.h, ms_chunk_bytes_for): 64 MiB by default, at most 1 GiB. */
#define MS_CHUNK_DEFAULT (64ull * MS_MIB)
#define MS_CHUNK_MAX (1024ull * MS_MIB)

#define MS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MS_ROUND_UP(x, a) ((((x) + (a)-1) / (a)) * (a))
#define MS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MS_MAX(a, b) ((a) > (b) ? (a) : (b))

enum ms_err {
    MS_OK = 0,
    MS_E_NOMEM = -1,    /* an allocation failed */
    MS_E_INVAL = -2,    /* a bad argument: caller's bug or bad input */
    MS_E_NOSPACE = -3,  /* the memory budget cannot hold what is asked */
    MS_E_GPU = -4,      /* the GPU seam reported a failure */
    MS_E_PARSE = -5,    /* malformed input (trace, message, config) */
    MS_E_NOTFOUND = -6, /* no such region, task or name */
    MS_E_BUSY = -7,     /* the object is in use (pinned, moving) */
    MS_E_STATE = -8,    /* an illegal state transition was requested */
    MS_E_OVERLAP = -9,  /* a new region overlaps an existing one */
    MS_E_VERSION = -10, /* unsupported format or protocol version */
    MS_E_IO = -11,      /* a read or write failed (edges only) */
};

/* Static, never NULL, one line, no trailing newline. */
const char *ms_strerror(int err);

/* A chunk is named by its region slot and its index in that region. */
typedef uint64_t ms_chunk_id;
#define MS_CHUNK_ID(region, idx) (((uint64_t)(region) << 32) | (uint32_t)(idx))
#define MS_CHUNK_REGION(id) ((uint32_t)((id) >> 32))
#define MS_CHUNK_INDEX(id) ((uint32_t)(id))

/* Allocator (core/alloc.c). Same contracts as the C library's functions. */
void *ms_malloc(size_t n);
void *ms_calloc(size_t count, size_t n);
void *ms_realloc(void *p, size_t n);
void ms_free(void *p);
/* A copy of s from ms_malloc (NULL when out of memory). */
char *ms_strdup(const char *s);
/* Grow *arr (element size elem) so it holds at least need elements; *cap is updated. */
int ms_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* Test hooks: fail the Nth allocation from now (1 = the next one), 0 disables. */
void ms_alloc_fail_after(uint64_t n);
/* Number of blocks currently allocated through ms_malloc & co. */
uint64_t ms_alloc_live(void);

/* The value of one hexadecimal digit (either case), or -1 (the text formats' parsers). */
static inline int ms_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif /* MS_H */
