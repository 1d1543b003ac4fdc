/*
 * procaddr.h - which exported driver symbol answers a cuGetProcAddress request.
 *
 * Design
 *   cuGetProcAddress(symbol, pfn, cudaVersion, flags) names a *base* name ("cuMemAlloc") and the
 *   CUDA version whose ABI the caller compiled against; the answer is one exported variant
 *   ("cuMemAlloc_v2"). The generated tables (cuabi/gen/syms.h) list, per base name, every ABI
 *   with the version that introduced it and whether it is the per-thread-default-stream
 *   flavour. Selection follows cuda.h's documentation of cuGetProcAddress:
 *     - with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the newest per-thread entry whose
 *       version <= cudaVersion; when there is none, fall back to the legacy entries;
 *     - otherwise (LEGACY_STREAM, or DEFAULT, which a driver treats as legacy: the per-thread
 *       choice for DEFAULT is made by cuda.h's inline wrapper in the application), the newest
 *       legacy entry whose version <= cudaVersion.
 *   Both libmsched (to pick the hook with the requested ABI) and the fake driver (to answer
 *   with its own functions) use this, so the two cannot disagree.
 *
 * Pure functions over constant tables: no locking, no allocation.
 */
#ifndef MS_CUABI_PROCADDR_H
#define MS_CUABI_PROCADDR_H

#include <stdbool.h>

/* Results for *out_status; the values of CUdriverProcAddressQueryResult. */
enum {
    MS_PA_FOUND = 0,
    MS_PA_NOT_FOUND = 1,
    MS_PA_VERSION_LOW = 2,
};

/* Index (enum ms_sym) of the exported symbol named `name`, or -1. */
int ms_sym_index(const char *name);

/* Name of symbol idx; NULL when out of range. */
const char *ms_sym_name(int idx);

/*
 * The exported symbol answering (base, cuda_version, per_thread), or -1 with *out_status
 * MS_PA_NOT_FOUND (unknown base name) or MS_PA_VERSION_LOW (every ABI of it is newer than
 * cuda_version). out_status may be NULL.
 */
int ms_procaddr_select(const char *base, int cuda_version, bool per_thread, int *out_status);

/*
 * The symbols of every ABI of base name `base` (any version, either flavour), written to
 * out (at most cap of them). Returns how many there are (may exceed cap), 0 for an unknown
 * base name.
 */
int ms_procaddr_variants(const char *base, int *out, int cap);

#endif /* MS_CUABI_PROCADDR_H */
