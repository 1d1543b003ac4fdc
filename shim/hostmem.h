/*
 * hostmem.h - the pinned host memory behind device memory that the engine may evict.
 *
 * Design
 *   Every region of the VMM engine, and every handle of the application's own VMM calls, has a
 *   host backing store that its evicted bytes are copied to. It is pinned, so that the copies
 *   run at the link's speed. Pinning runs inside the driver at 1.5-3 GiB/s, under locks that
 *   other processes' driver calls take too (docs/engine.md, "Host backing"), so one call that
 *   pins GiBs can hold up another process's eviction for a second or more.
 *
 *   With a piece size (MSCHED_PIN_PIECE, default 64 MiB), a store is mapped as ordinary
 *   anonymous memory (not inherited by a fork) and registered with the driver one piece at a
 *   time (cuMemHostRegister), so that no single driver call pins more than a piece. A piece is
 *   a multiple of the caller's alignment (its chunk size), so no chunk's copy spans two
 *   registrations. If a registration fails, the pieces done are released and the store falls
 *   back to one cuMemHostAlloc. With a piece size of 0, a store is one cuMemHostAlloc.
 *
 *   Within the process, the driver also makes copy submissions wait for a pin call in flight.
 *   The migration gate (below) keeps pin calls out of a migration: the migration waits for the
 *   pieces in flight, the pinning thread for the migration.
 *
 *   Every store's pinning is timed. A store whose pinning took SLOW_PIN (300 ms) or more is
 *   logged when verbose, with the local wall-clock time it started (the format of mschedd's
 *   log), so that a stall in another process can be matched to it.
 *
 * Ownership: a store belongs to the caller from ms__host_pin until ms__host_unpin.
 * Locking: thread-safe (two internal mutexes, neither held across a driver call). ms__host_pin can
 *   take seconds: call it without holding a lock that others need.
 * Errors: the driver's CUresult; CUDA_ERROR_OUT_OF_MEMORY when the store or its bookkeeping
 *   cannot be had. On error nothing is held.
 */
#ifndef MS_SHIM_HOSTMEM_H
#define MS_SHIM_HOSTMEM_H

#include "shim/shim_int.h"

#include <stddef.h>
#include <stdint.h>

/* The piece size when MSCHED_PIN_PIECE is not set. On the H200, stores pinned in 64 MiB pieces
 * at 2.5-3.2 GiB/s, in one call at 1.5-2.4 GiB/s (docs/engine.md, "Host backing"). */
#define MS_PIN_PIECE_DEFAULT (64ull << 20)

/* Before any pin: the piece size in bytes (rounded up to 2 MiB); 0 pins each store in one call. */
MS_HIDDEN void ms__host_configure(uint64_t piece);

/* A pinned store of `bytes` into *out (*out is NULL on error). Pieces are multiples of
 * `align`: the caller's chunk size, the store's size for a single piece, or 0 for none. */
MS_HIDDEN CUresult ms__host_pin(size_t bytes, size_t align, void **out);

/* Release a store from ms__host_pin; NULL does nothing. Returns the driver's first error (the
 * store is released as far as the driver allows either way; errors are also counted in the
 * statistics, for callers whose own call has already succeeded and cannot report one). */
MS_HIDDEN CUresult ms__host_unpin(void *p);

struct ms_host_stats {
    uint64_t stores;       /* pinned so far */
    uint64_t bytes;        /* their bytes */
    uint64_t live_bytes;   /* bytes of the stores pinned now (not yet unpinned) */
    uint64_t pin_ns;       /* time in the driver pinning them */
    uint64_t longest_ns;   /* the slowest store's */
    uint64_t pieced;       /* stores registered in pieces */
    uint64_t fallbacks;    /* stores whose registration failed and that cuMemHostAlloc made */
    uint64_t unpin_errors; /* releases the driver refused */
    uint64_t piece;        /* the configured piece size (0: none) */
    uint64_t gate_waits;   /* migrations that waited for a pin call to return */
    uint64_t gate_wait_ns, gate_longest_ns; /* their total and longest wait */
};

MS_HIDDEN void ms__host_stats(struct ms_host_stats *out);

/* The migration gate. The driver serializes a pin call with this process's copy submissions,
 * so a pin running beside a migration stalls the migration's copies for as long as it runs
 * (on the H200, an eviction's copies waited 603 ms behind a 746 ms pin: docs/engine.md). A
 * migration calls enter before its first copy and leave after its last: enter waits for the pin
 * and unpin calls in flight to return (one piece each when pieced) and holds new ones back
 * until leave. Calls nest (a count), so an order can hold the gate across its batches; enter
 * may block, so call it with no lock a pinning thread needs (pinning takes none of the
 * engine's; an unpin under the engine's lock cannot meet a migration, which holds that lock). */
MS_HIDDEN void ms__host_gate_enter(void);
MS_HIDDEN void ms__host_gate_leave(void);

/* The pin side of the gate, for other calls that pin (the engine's host chunks, one chunk per
 * call): begin waits out the migrations in flight and returns the nanoseconds it waited; end
 * follows the call. Not under a lock a migration needs (the engine's). */
MS_HIDDEN uint64_t ms__host_pin_begin(void);
MS_HIDDEN void ms__host_pin_end(void);

/* In a forked child (single-threaded): the locks and the gate's counts start afresh, since
 * the parent's other threads (mid-pin, mid-migration) do not exist there. */
MS_HIDDEN void ms__host_atfork_child(void);

#endif /* MS_SHIM_HOSTMEM_H */
