/*
 * shim_int.h - what libmsched's hooks share: the gate macro, the hook table, kernel facts and
 * launch descriptions (not an interface of anything else).
 *
 * Glossary
 *   hook          libmsched's own C implementation of a symbol listed in shim/hooks.def.
 *   real driver, slot: shim/driver.h.
 *
 * Invariants
 *   - Nothing here aborts the process; unexpected conditions are logged once (MSCHED_VERBOSE)
 *     and passed through.
 *   - Locks and their order: shim/locks.h.
 */
#ifndef MS_SHIM_INT_H
#define MS_SHIM_INT_H

#include "cuabi/cuda_api.h"

#include "core/predict.h"
#include "shim/driver.h"
#include "shim/log.h"
#include "cuabi/gen/syms.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Run an event that may hold the call (the launch gate); a non-zero result is the CUresult the
 * hook returns instead of forwarding. A command the gate admitted stays "in flight" until the
 * hook returns: the cleanup (ms__shim_gate_end) runs after the forwarded call, so the daemon
 * client can wait for admitted commands to reach the driver before it answers STOP. MS_GATED
 * must therefore be used once, at function scope, before the real call.
 */
MS_HIDDEN void ms__shim_gate_end(int *gate);
#define MS_GATED(call)                                                                             \
    int ms_gate_ __attribute__((cleanup(ms__shim_gate_end))) = (call);                             \
    if (ms_gate_ != 0)                                                                             \
    return (CUresult)ms_gate_

/* libmsched's hook for symbol idx, or NULL when the symbol is only forwarded. */
MS_HIDDEN void *ms__shim_hook_for(int idx);

/*
 * cuGetProcAddress post-processing: `real_fn` is what the real driver returned for
 * (symbol, cuda_version, flags); the result is the hook with exactly that ABI when there is
 * one, else real_fn.
 */
MS_HIDDEN void *ms__shim_procaddr_wrap(const char *symbol, int cuda_version, cuuint64_t flags,
                                       void *real_fn);

/* Kernel facts cached per CUfunction (shim/funcinfo.c). */
struct ms_funcinfo {
    const void *func; /* the handle it describes */
    bool known;       /* the driver reported the parameter layout */
    uint32_t nparams;
    uint32_t params_bytes;          /* end of the last parameter (0 when none or unknown) */
    struct ms_param_layout *layout; /* nparams entries (NULL when nparams is 0) */
    const char *name;               /* never NULL; "" when the driver gave none */
};

/*
 * Facts about f, queried from the driver on first use. Never NULL; the result stays valid
 * for the life of the process (flushed entries are retired, not freed). Takes the events lock
 * briefly; the driver queries run without it.
 */
MS_HIDDEN const struct ms_funcinfo *ms__shim_funcinfo(const void *f);

struct ms_shim_launch;
struct ms_shim_stream;
/* Describe a launch as the device will see it (hook_launch.c): parameters packed into local
 * (cap bytes) or a malloc'd *heap the caller frees. */
MS_HIDDEN void ms__shim_launch_build(struct ms_shim_launch *out, int kind, CUfunction f,
                                     const unsigned grid[3], const unsigned block[3], unsigned smem,
                                     struct ms_shim_stream s, void **kernelParams, void **extra,
                                     uint8_t *local, size_t cap, uint8_t **heap);

/* Forget cached facts (a module or library was unloaded: handles may be reused). */
MS_HIDDEN void ms__shim_funcinfo_flush(void);

/* A stream capture in global or thread-local mode is open in this process (shim/hook_capture.c):
 * a context synchronization now, from any thread, would invalidate it. Thread-safe. */
MS_HIDDEN bool ms__shim_capture_open(void);

/*
 * Graphs in pieces (graph_pieces.c). _track: exec x was made from (or updated to) graph g:
 * when it names more than the budget, g is cloned to be launched in pieces. _update: a node's
 * new parameters on x, made on the clone and the pieces too (else the split is dropped).
 * _forget: x changed in a way not followed (its next launch, whole, still waits for the last
 * one in pieces). _launch: true when x was launched in pieces through `real` (*rc its result);
 * false: launch it whole (what it must wait for first is already enqueued on the stream).
 * Launches of one exec stay ordered as the driver orders them, whatever their streams.
 * Thread-safe.
 */
enum ms_graph_upd_kind {
    MS_GRAPH_UPD_KERNEL,  /* p: const CUDA_KERNEL_NODE_PARAMS * */
    MS_GRAPH_UPD_COPY,    /* p: const CUDA_MEMCPY3D *, ctx */
    MS_GRAPH_UPD_SET,     /* p: const CUDA_MEMSET_NODE_PARAMS *, ctx */
    MS_GRAPH_UPD_CHILD,   /* p: the child CUgraph */
    MS_GRAPH_UPD_GENERIC, /* p: CUgraphNodeParams * */
    MS_GRAPH_UPD_HOST,    /* p: const CUDA_HOST_NODE_PARAMS * */
    MS_GRAPH_UPD_RECORD,  /* p: the CUevent an event record node records */
    MS_GRAPH_UPD_WAIT,    /* p: the CUevent an event wait node waits for */
    MS_GRAPH_UPD_SIGNAL,  /* p: const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS * */
    MS_GRAPH_UPD_SEMWAIT, /* p: const CUDA_EXT_SEM_WAIT_NODE_PARAMS * */
    MS_GRAPH_UPD_ENABLED, /* on: the node enabled (1) or disabled (0) on the exec */
};
struct ms_graph_update {
    enum ms_graph_upd_kind kind;
    const void *p;
    CUcontext ctx;
    unsigned on;
};
MS_HIDDEN void ms__graph_pieces_track(CUgraphExec x, CUgraph g);
MS_HIDDEN void ms__graph_pieces_update(CUgraphExec x, CUgraphNode node,
                                       const struct ms_graph_update *u);
MS_HIDDEN void ms__graph_pieces_forget(CUgraphExec x);
/* x is being destroyed: its split and what orders its next launch go. */
MS_HIDDEN void ms__graph_pieces_destroyed(CUgraphExec x);
/* In a forked child: the lock re-initialised, the table emptied. */
MS_HIDDEN void ms__graph_pieces_atfork_child(void);
/* What a whole launch of an exec that was ever split owes the order of its launches: set by
 * _launch, settled by _whole_end (the hook's cleanup, after the forwarded call). */
struct ms_graph_whole {
    void *order;        /* NULL: nothing owed */
    const void *stream; /* the launch's stream, */
    bool per_thread;    /* ... of a _ptsz entry point */
};
MS_HIDDEN bool ms__graph_pieces_launch(CUgraphExec x, struct ms_shim_stream s,
                                       CUresult (*real)(CUgraphExec, CUstream), CUresult *rc,
                                       struct ms_graph_whole *w);
MS_HIDDEN void ms__graph_pieces_whole_end(struct ms_graph_whole *w);
/* Around a context synchronization that must not invalidate a capture (the daemon client's
 * drain): hold stops captures from beginning (a begin waits until release); quiet says that no
 * capture is beginning or open, so the synchronization may run; release lets begins go on.
 * The caller holds, waits (its own way) until quiet, synchronizes, then releases. One holder
 * at a time (the client's service thread). Thread-safe. */
MS_HIDDEN void ms__shim_capture_hold(void);
MS_HIDDEN bool ms__shim_capture_quiet(void);
MS_HIDDEN void ms__shim_capture_release(void);
/* In a forked child (one thread): no holder exists there, nor any begin in progress; the
 * child's captures are its own (the parent's table is dropped). */
MS_HIDDEN void ms__shim_capture_atfork_child(void);

#endif /* MS_SHIM_INT_H */
