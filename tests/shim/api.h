/*
 * api.h - the driver functions the shim tests call, as one table of typed pointers.
 *
 * Design
 *   The same workload must run however a program reaches the driver: linked against libcuda
 *   (legacy or per-thread-default-stream names), through dlopen + dlsym of the exported names,
 *   or through cuGetProcAddress_v2 with or without CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 *   So the workload calls only through struct ms_api, and four loaders fill it:
 *     ms_api_link_legacy / ms_api_link_pt   api_link.c, compiled twice (take &cuX; cuda.h's
 *                                           macros pick the exported names)
 *     ms_api_dlsym                          dlsym(handle, exported name)
 *     ms_api_procaddr                       cuGetProcAddress_v2(base name, version, flags)
 *   Every field has the PFN type of the ABI CUDA 13.0 selects, so a wrong assignment does not
 *   compile (link loaders) and a wrong lookup is caught by the tests comparing results.
 */
#ifndef MS_TESTS_SHIM_API_H
#define MS_TESTS_SHIM_API_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdbool.h>

/* X(field, base name, PFN version, legacy export, per-thread export): the field has type
 * PFN_<base>_v<version>, the ABI a CUDA 13.0 program compiled with cuda.h gets. */
#define MS_API_FUNCS(X)                                                                            \
    X(Init, cuInit, 2000, cuInit, cuInit)                                                          \
    X(DriverGetVersion, cuDriverGetVersion, 2020, cuDriverGetVersion, cuDriverGetVersion)          \
    X(DeviceGet, cuDeviceGet, 2000, cuDeviceGet, cuDeviceGet)                                      \
    X(DeviceGetCount, cuDeviceGetCount, 2000, cuDeviceGetCount, cuDeviceGetCount)                  \
    X(DeviceGetName, cuDeviceGetName, 2000, cuDeviceGetName, cuDeviceGetName)                      \
    X(DeviceTotalMem, cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2, cuDeviceTotalMem_v2)            \
    X(DeviceGetAttribute, cuDeviceGetAttribute, 2000, cuDeviceGetAttribute, cuDeviceGetAttribute)  \
    X(CtxCreate, cuCtxCreate, 12050, cuCtxCreate_v4, cuCtxCreate_v4)                               \
    X(CtxDestroy, cuCtxDestroy, 4000, cuCtxDestroy_v2, cuCtxDestroy_v2)                            \
    X(PrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain,                  \
      cuDevicePrimaryCtxRetain)                                                                    \
    X(PrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2,           \
      cuDevicePrimaryCtxRelease_v2)                                                                \
    X(CtxSetCurrent, cuCtxSetCurrent, 4000, cuCtxSetCurrent, cuCtxSetCurrent)                      \
    X(CtxGetCurrent, cuCtxGetCurrent, 4000, cuCtxGetCurrent, cuCtxGetCurrent)                      \
    X(CtxSynchronize, cuCtxSynchronize, 2000, cuCtxSynchronize, cuCtxSynchronize)                  \
    X(MemGetInfo, cuMemGetInfo, 3020, cuMemGetInfo_v2, cuMemGetInfo_v2)                            \
    X(MemAlloc, cuMemAlloc, 3020, cuMemAlloc_v2, cuMemAlloc_v2)                                    \
    X(MemAllocPitch, cuMemAllocPitch, 3020, cuMemAllocPitch_v2, cuMemAllocPitch_v2)                \
    X(MemAllocManaged, cuMemAllocManaged, 6000, cuMemAllocManaged, cuMemAllocManaged)              \
    X(MemAllocHost, cuMemAllocHost, 3020, cuMemAllocHost_v2, cuMemAllocHost_v2)                    \
    X(MemHostAlloc, cuMemHostAlloc, 2020, cuMemHostAlloc, cuMemHostAlloc)                          \
    X(MemFreeHost, cuMemFreeHost, 2000, cuMemFreeHost, cuMemFreeHost)                              \
    X(MemHostRegister, cuMemHostRegister, 6050, cuMemHostRegister_v2, cuMemHostRegister_v2)        \
    X(MemHostUnregister, cuMemHostUnregister, 4000, cuMemHostUnregister, cuMemHostUnregister)      \
    X(MemFree, cuMemFree, 3020, cuMemFree_v2, cuMemFree_v2)                                        \
    X(MemAllocAsync, cuMemAllocAsync, 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz)                \
    X(MemFreeAsync, cuMemFreeAsync, 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz)                    \
    X(Memcpy, cuMemcpy, 4000, cuMemcpy, cuMemcpy_ptds)                                             \
    X(MemcpyAsync, cuMemcpyAsync, 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz)                         \
    X(MemcpyHtoD, cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)                       \
    X(MemcpyDtoH, cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)                       \
    X(MemcpyDtoD, cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)                       \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz)   \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz)   \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz)   \
    X(Memcpy2D, cuMemcpy2D, 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds)                               \
    X(MemsetD8, cuMemsetD8, 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds)                               \
    X(MemsetD16, cuMemsetD16, 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds)                           \
    X(MemsetD32, cuMemsetD32, 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds)                           \
    X(MemsetD8Async, cuMemsetD8Async, 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz)                 \
    X(MemsetD32Async, cuMemsetD32Async, 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz)             \
    X(MemsetD2D32, cuMemsetD2D32, 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds)                   \
    X(StreamCreate, cuStreamCreate, 2000, cuStreamCreate, cuStreamCreate)                          \
    X(StreamSynchronize, cuStreamSynchronize, 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz) \
    X(StreamDestroy, cuStreamDestroy, 4000, cuStreamDestroy_v2, cuStreamDestroy_v2)                \
    X(EventCreate, cuEventCreate, 2000, cuEventCreate, cuEventCreate)                              \
    X(EventRecord, cuEventRecord, 2000, cuEventRecord, cuEventRecord_ptsz)                         \
    X(EventSynchronize, cuEventSynchronize, 2000, cuEventSynchronize, cuEventSynchronize)          \
    X(EventElapsedTime, cuEventElapsedTime, 12080, cuEventElapsedTime_v2, cuEventElapsedTime_v2)   \
    X(EventDestroy, cuEventDestroy, 4000, cuEventDestroy_v2, cuEventDestroy_v2)                    \
    X(MemAddressReserve, cuMemAddressReserve, 10020, cuMemAddressReserve, cuMemAddressReserve)     \
    X(MemAddressFree, cuMemAddressFree, 10020, cuMemAddressFree, cuMemAddressFree)                 \
    X(MemCreate, cuMemCreate, 10020, cuMemCreate, cuMemCreate)                                     \
    X(MemRelease, cuMemRelease, 10020, cuMemRelease, cuMemRelease)                                 \
    X(MemMap, cuMemMap, 10020, cuMemMap, cuMemMap)                                                 \
    X(MemUnmap, cuMemUnmap, 10020, cuMemUnmap, cuMemUnmap)                                         \
    X(MemSetAccess, cuMemSetAccess, 10020, cuMemSetAccess, cuMemSetAccess)                         \
    X(MemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020,                           \
      cuMemGetAllocationGranularity, cuMemGetAllocationGranularity)                                \
    X(FuncGetParamInfo, cuFuncGetParamInfo, 12040, cuFuncGetParamInfo, cuFuncGetParamInfo)         \
    X(FuncGetName, cuFuncGetName, 12030, cuFuncGetName, cuFuncGetName)                             \
    X(LaunchKernel, cuLaunchKernel, 4000, cuLaunchKernel, cuLaunchKernel_ptsz)                     \
    X(LaunchKernelEx, cuLaunchKernelEx, 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz)            \
    X(LaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel,         \
      cuLaunchCooperativeKernel_ptsz)                                                              \
    X(GetProcAddress, cuGetProcAddress, 12000, cuGetProcAddress_v2, cuGetProcAddress_v2)

/* The PFN type of each field. */
#define MS_API_TYPEDEF(field, base, version, legacy, pt)                                           \
    typedef PFN_##base##_v##version ms_pfn_##field;
MS_API_FUNCS(MS_API_TYPEDEF)
#undef MS_API_TYPEDEF

struct ms_api {
#define MS_API_FIELD(field, base, version, legacy, pt) ms_pfn_##field field;
    MS_API_FUNCS(MS_API_FIELD)
#undef MS_API_FIELD
};

/* The loaders. Each returns the number of functions it could not find (0 = complete) and
 * prints their names to stderr. */
int ms_api_link_legacy(struct ms_api *a);
int ms_api_link_pt(struct ms_api *a);
int ms_api_dlsym(struct ms_api *a, void *handle, bool per_thread);
int ms_api_procaddr(struct ms_api *a, PFN_cuGetProcAddress_v12000 gpa, bool per_thread);

#endif /* MS_TESTS_SHIM_API_H */
