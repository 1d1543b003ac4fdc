/*
 * shim_int.h - libmsched's internals shared by its files (not an interface of anything else).
 *
 * Glossary
 *   real driver   the NVIDIA libcuda.so.1 (or the fake one in CI) that libmsched loads by
 *                 absolute path and forwards to; never libmsched itself.
 *   slot          ms__shim_slots[i]: the real driver's address of exported symbol i (enum
 *                 ms_sym), or a stub returning an error when the driver lacks it. Empty (NULL)
 *                 only before initialisation; trampolines and MS_REAL read them.
 *   hook          libmsched's own C implementation of a symbol listed in shim/hooks.def.
 *
 * Invariants
 *   - After ms__shim_init() returns, every slot is non-NULL and never changes again.
 *   - Nothing here aborts the process; unexpected conditions are logged once (MSCHED_VERBOSE)
 *     and passed through.
 *   - ms__shim_lock is the shim's one mutex; it is never held across a call into the driver.
 */
#ifndef MS_SHIM_INT_H
#define MS_SHIM_INT_H

#include "shim/cuda_api.h"

#include "core/predict.h"
#include "shim/gen/syms.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MS_HIDDEN __attribute__((visibility("hidden")))
#define MS_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define MS_HIDDEN
#define MS_PRINTF_LIKE(f, a)
#endif

/* Read by the generated trampolines (shim/gen/tramp.c) as plain memory. */
extern MS_HIDDEN void *ms__shim_slots[MS_SYM_COUNT];

/* The shim's one mutex (events, caches). Reset in a forked child. */
extern MS_HIDDEN pthread_mutex_t ms__shim_lock;

/* Load the real driver and fill the slots, once per process; safe from any thread. */
MS_HIDDEN void ms__shim_init(void);

/* Slot idx after initialisation; never NULL. */
MS_HIDDEN void *ms__shim_real(unsigned idx);

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

/* The real driver's function for `name`, typed with name's cuda.h prototype. */
#define MS_REAL(name) ((__typeof__(&name))ms__shim_real(MS_SYM_##name))

/* Called by the trampolines' slow path (symbol index in, function out; never NULL). */
MS_HIDDEN void *ms__shim_resolve(unsigned idx);

/* libmsched's hook for symbol idx, or NULL when the symbol is only forwarded. */
MS_HIDDEN void *ms__shim_hook_for(int idx);

/* The real driver's dlopen handle; NULL before initialisation or when none was found. */
MS_HIDDEN void *ms__shim_real_handle(void);

/* glibc's dlsym, found without going through an interposed one. */
MS_HIDDEN void *ms__shim_libc_dlsym(void *handle, const char *name);

/*
 * cuGetProcAddress post-processing: `real_fn` is what the real driver returned for
 * (symbol, cuda_version, flags); the result is the hook with exactly that ABI when there is
 * one, else real_fn.
 */
MS_HIDDEN void *ms__shim_procaddr_wrap(const char *symbol, int cuda_version, cuuint64_t flags,
                                       void *real_fn);

/* Configuration, read once at initialisation. */
MS_HIDDEN bool ms__shim_verbose(void);

/* One line to stderr, prefixed "msched[pid]: ", only when verbose. */
MS_HIDDEN void ms__shim_log(const char *fmt, ...) MS_PRINTF_LIKE(1, 2);

/* A wall-clock instant (CLOCK_REALTIME) as mschedd's log writes it, in local time
 * ("2026-12-03T17:02:34.500"), so that a shim's line can be matched to the daemon's. Taking
 * the instant is one clock read; format it only for a line that is logged. */
struct timespec;
MS_HIDDEN void ms__shim_wallclock(const struct timespec *at, char *buf, size_t n);

/* Log a message the first time this call site is reached. */
#define MS_LOG_ONCE(...)                                                                           \
    do {                                                                                           \
        static int ms_once_;                                                                       \
        if (!__atomic_exchange_n(&ms_once_, 1, __ATOMIC_RELAXED))                                  \
            ms__shim_log(__VA_ARGS__);                                                             \
    } while (0)

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
 * for the life of the process (flushed entries are retired, not freed). Takes ms__shim_lock
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

#endif /* MS_SHIM_INT_H */
