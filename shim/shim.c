/*
 * shim.c - libmsched's loader: find the real driver, fill the forwarding slots, and the
 * process-wide plumbing (configuration, logging, fork, exit).
 *
 * Design
 *   libmsched is installed as libcuda.so.1 in msched's own directory and found first on the
 *   library path (or preloaded, shim/preload.c). It must therefore load the *real* driver
 *   itself, by absolute path, and never itself: a self-lookup through RTLD_DEFAULT recurses
 *   (HAMi-core #215). Candidates, in order:
 *     1. $MSCHED_REAL_LIBCUDA;
 *     2. libcuda.so.1 in each directory of $LD_LIBRARY_PATH;
 *     3. the usual driver locations (Debian/Ubuntu multiarch, RHEL lib64, the NVIDIA container
 *        toolkit's /usr/local/nvidia, WSL).
 *   A candidate is rejected when it is the same file as libmsched (device and inode of the
 *   mapping that holds this code, from /proc/self/maps), when it exports ms_shim_marker
 *   (another libmsched build), or when it does not export cuInit. It is opened RTLD_NOW |
 *   RTLD_LOCAL and never through RTLD_DEFAULT. Not RTLD_DEEPBIND: it would bind the driver to
 *   the C library's malloc even where the application preloads another one, and it is refused
 *   by the sanitizers.
 *
 *   Initialisation is lazy (first call of any driver function, through a hook or a
 *   trampoline's slow path) and runs once (pthread_once): a process that merely loads
 *   libmsched, or a shell that inherits LD_PRELOAD, never loads a driver. It reads the
 *   environment once, loads the driver, resolves every exported symbol into its slot and
 *   registers the fork handlers. A symbol the driver lacks gets a stub that returns
 *   CUDA_ERROR_NOT_FOUND; without any driver every slot returns CUDA_ERROR_NOT_INITIALIZED and
 *   cuInit returns CUDA_ERROR_NO_DEVICE, as on a machine without GPUs. Every exported driver
 *   function returns CUresult, so one stub fits all of them (arguments are ignored; the
 *   caller cleans up its own stack on x86-64).
 *
 * Invariants
 *   - Slots go from NULL to their final value once (release store); readers use acquire loads
 *     (or plain loads in the trampolines: x86-64 orders them).
 *   - A driver call made while the driver is being loaded (its constructors calling back into
 *     libcuda) gets CUDA_ERROR_NOT_INITIALIZED instead of deadlocking on the once-guard.
 *   - fork: ms__events_lock is held across fork() by the prepare handler and re-initialised in
 *     the child, so the child never inherits a lock held by a thread that does not exist there.
 */
#include "shim/shim_int.h"
#include "shim/profile.h"
#include "shim/locks.h"
#include "shim/client.h"
#include "shim/config.h"
#include "shim/engine.h"
#include "shim/hostmem.h"
#include "shim/phases.h"
#include "shim/tensormap.h"

#include "cuabi/procaddr.h"
#include "shim/shim_events.h"

#include "core/units.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static bool initialized; /* init_all finished (atomic access) */

/* The hooks of shim/hooks.def, by symbol index; NULL for forwarded symbols. */
#define MS_HOOK(name) [MS_SYM_##name] = (void *)&name,
static void *const hooks[MS_SYM_COUNT] = {
#include "shim/hooks.def"
};
#undef MS_HOOK

/* ------------------------------------------------------------------------------------------ */
/* Logging and configuration                                                                    */

/* ------------------------------------------------------------------------------------------ */
/* Initialisation, fork, exit                                                                   */

static void atfork_prepare(void)
{
    ms_lock(&ms__events_lock);
}

static void atfork_parent(void)
{
    ms_unlock(&ms__events_lock);
}

static void atfork_child(void)
{
    ms_lock_reset(&ms__events_lock);
    ms__shim_events_atfork_child();
    ms__host_atfork_child();
    ms_engine_atfork_child();
    ms_prof_atfork_child();
    ms__shim_capture_atfork_child();
    ms__tmap_atfork_child();
    ms__graph_pieces_atfork_child();
}

/* The process's initialisation (driver.h runs it once, at the first driver call). */
static void init_all(void)
{
    ms__shim_config_load();
    ms__shim_log_configure(ms__shim_opt(MS_OPT_VERBOSE) != 0);
    ms__ph_configure(ms__shim_opt(MS_OPT_PHASES) != 0);
    ms__drv_load(ms__shim_opt_text(MS_OPT_REAL_LIBCUDA));
    ms__shim_events_init(ms__shim_opt_text(MS_OPT_TRACE));
    ms_client_configure();
    ms_engine_configure();
    ms__host_configure(ms__shim_opt(MS_OPT_PIN_PIECE));
    if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child) != 0)
        ms__shim_log("pthread_atfork failed; a forked child may inherit a held lock");
    __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
}

/* Registered before any driver call can be made: libraries initialise before the programs and
 * libraries that depend on them, and a preloaded one first of all. */
__attribute__((constructor)) static void shim_load(void)
{
    ms__drv_set_init(init_all);
}

void *ms__shim_hook_for(int idx)
{
    if (idx < 0 || idx >= MS_SYM_COUNT)
        return NULL;
    return hooks[idx];
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE)) {
        bool held = ms_lock_any_held(); /* exit() from a signal handler inside the shim */
        ms_engine_exit(ms__shim_verbose());
        if (!held) {
            ms_prof_finish();
            ms__shim_events_exit(ms__shim_verbose());
            ms__ph_report(stderr);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* cuGetProcAddress                                                                             */

void *ms__shim_procaddr_wrap(const char *symbol, int cuda_version, cuuint64_t flags, void *real_fn)
{
    if (!symbol || !real_fn)
        return real_fn;
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int sel = ms_procaddr_select(symbol, cuda_version, per_thread, NULL);

    /* The driver knows which ABI it handed out: when its answer is the address of exactly one
     * exported variant, that variant wins over the table's choice. */
    int vars[32], match = -1, nmatch = 0;
    int n = ms_procaddr_variants(symbol, vars, (int)MS_ARRAY_LEN(vars));
    for (int i = 0; i < n && i < (int)MS_ARRAY_LEN(vars); i++) {
        if (ms__shim_real((unsigned)vars[i]) == real_fn) {
            match = vars[i];
            nmatch++;
        }
    }
    if (nmatch == 1 && match != sel) {
        MS_LOG_ONCE("cuGetProcAddress(%s, %d, %#llx): driver chose %s, tables chose %s", symbol,
                    cuda_version, (unsigned long long)flags, ms_sym_name(match),
                    sel >= 0 ? ms_sym_name(sel) : "nothing");
        sel = match;
    }
    void *hook = ms__shim_hook_for(sel);
    ms_shim_on_procaddr(hook != NULL);
    return hook ? hook : real_fn;
}

/*
 * cuGetProcAddress(_v2) is how cudart (and through it PyTorch) reaches every driver function:
 * it asks for cuGetProcAddress itself first and uses what it gets for everything after
 * (docs/h200-measurements.md). So both variants call the real one first (it validates the
 * request and fills symbolStatus), then swap the returned pointer for the hook with the same
 * ABI, if there is one (ms__shim_procaddr_wrap). Asked for "cuGetProcAddress", they therefore
 * return themselves. Failed lookups pass through unchanged. They live here, beside the hook
 * table, because they hand it out: every other hook is below this file.
 */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult rc = MS_REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ms__shim_procaddr_wrap(symbol, cudaVersion, flags, *pfn);
    return rc;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult rc = MS_REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ms__shim_procaddr_wrap(symbol, cudaVersion, flags, *pfn);
    return rc;
}

/* For tests (tests/shim/alloc_fail.c): make the nth heap allocation from now fail, in the shim
 * and the core alike (core/ms.h; 0 stops). Exported; harmless in production (nobody calls it). */
__attribute__((visibility("default"))) void ms_shim_test_alloc_fail_after(uint64_t n);
void ms_shim_test_alloc_fail_after(uint64_t n)
{
    ms_alloc_fail_after(n);
}
