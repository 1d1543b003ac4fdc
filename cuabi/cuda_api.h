/*
 * cuda_api.h - cuda.h as a driver implementation sees it (shim and fake driver only).
 *
 * Design
 *   An application's cuda.h renames functions with macros (cuMemAlloc -> cuMemAlloc_v2,
 *   cuLaunchKernel -> cuLaunchKernel_ptsz under per-thread streams) and declares only the newest
 *   ABI of each name. A library that *implements* the driver must define every exported name
 *   literally, old ABIs and _ptds/_ptsz variants included. __CUDA_API_VERSION_INTERNAL is the
 *   switch NVIDIA's own build uses: with it, cuda.h declares each of the 637 exported symbols of
 *   CUDA 13.0 under its exported name, with its own prototype, and leaves no renaming macro
 *   behind (scripts/gen_shim.py's type checks rely on this).
 *
 *   Everything declared here gets default visibility, so a hook or fake function defined with a
 *   cuda.h prototype is exported even though the libraries build with -fvisibility=hidden.
 *   Include this header instead of <cuda.h> in shim/ and gpu/fakecuda/, and before any other
 *   header that might include <cuda.h> itself.
 */
#ifndef MS_CUABI_CUDA_API_H
#define MS_CUABI_CUDA_API_H

#ifdef CUDA_VERSION
#error "cuabi/cuda_api.h must be included before <cuda.h>"
#endif

#define __CUDA_API_VERSION_INTERNAL 1
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>
#pragma GCC visibility pop
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>

#endif /* MS_CUABI_CUDA_API_H */
