/*
 * driver.h - the real CUDA driver under libmsched: finding it, and its functions by symbol.
 *
 * Glossary
 *   real driver   the NVIDIA libcuda.so.1 (or the fake one in CI) that libmsched loads by
 *                 absolute path and forwards to; never libmsched itself.
 *   slot          ms__shim_slots[i]: the real driver's address of exported symbol i (enum
 *                 ms_sym), or a stub returning an error when the driver lacks it. Empty (NULL)
 *                 only before initialisation; trampolines and MS_REAL read them.
 *
 * Design
 *   libmsched is installed as libcuda.so.1 in msched's own directory and found first on the
 *   library path (or preloaded, shim/preload.c). It must therefore load the *real* driver
 *   itself, by absolute path, and never itself: a self-lookup through RTLD_DEFAULT recurses
 *   (HAMi-core #215). Candidates, in order:
 *     1. the explicit path ($MSCHED_REAL_LIBCUDA, passed in by the caller);
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
 *   Initialisation is lazy: the first call of any driver function (through a hook's MS_REAL or
 *   a trampoline's slow path) runs the process's initialisation once (pthread_once). What that
 *   is, is registered from above (ms__drv_set_init: libmsched's whole configuration, shim.c),
 *   so that this layer calls nothing above it; the registered function must call
 *   ms__drv_load exactly once. A symbol the driver lacks gets a stub that returns
 *   CUDA_ERROR_NOT_FOUND; without any driver every slot returns CUDA_ERROR_NOT_INITIALIZED and
 *   cuInit returns CUDA_ERROR_NO_DEVICE, as on a machine without GPUs. Every exported driver
 *   function returns CUresult, so one stub fits all of them (arguments are ignored; the
 *   caller cleans up its own stack on x86-64).
 *
 * Invariants
 *   - After ms__drv_init() returns, every slot is non-NULL and never changes again.
 *   - Slots go from NULL to their final value once (release store); readers use acquire loads
 *     (or plain loads in the trampolines: x86-64 orders them).
 *   - A driver call made while the driver is being loaded (its constructors calling back into
 *     libcuda) gets CUDA_ERROR_NOT_INITIALIZED instead of deadlocking on the once-guard.
 *
 * Locking: none of its own (pthread_once; atomics). Safe from any thread.
 */
#ifndef MS_SHIM_DRIVER_H
#define MS_SHIM_DRIVER_H

#include "cuabi/cuda_api.h"
#include "cuabi/gen/syms.h"
#include "shim/log.h"

/* Read by the generated trampolines (shim/gen/tramp.c) as plain memory. */
extern MS_HIDDEN void *ms__shim_slots[MS_SYM_COUNT];

/* What initialisation runs (called once, from a constructor, before any driver call). */
MS_HIDDEN void ms__drv_set_init(void (*init)(void));

/* Run the registered initialisation once per process; safe from any thread, and a no-op on
 * the thread that is running it. */
MS_HIDDEN void ms__drv_init(void);

/* Load the real driver (explicit_path first when not NULL) and fill the slots. Only from the
 * registered initialisation. */
MS_HIDDEN void ms__drv_load(const char *explicit_path);

/* Slot idx after initialisation; never NULL. */
MS_HIDDEN void *ms__shim_real(unsigned idx);

/* Called by the trampolines' slow path (symbol index in, function out; never NULL). */
MS_HIDDEN void *ms__shim_resolve(unsigned idx);

/* The real driver's dlopen handle; NULL before initialisation or when none was found. */
MS_HIDDEN void *ms__shim_real_handle(void);

/* glibc's dlsym, found without going through an interposed one. */
MS_HIDDEN void *ms__shim_libc_dlsym(void *handle, const char *name);

/* The real driver's function for `name`, typed with name's cuda.h prototype. */
#define MS_REAL(name) ((__typeof__(&name))ms__shim_real(MS_SYM_##name))

#endif /* MS_SHIM_DRIVER_H */
