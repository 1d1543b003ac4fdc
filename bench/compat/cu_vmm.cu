// cu_vmm.cu - a program's own virtual memory management and stream-ordered allocation: the
// driver API's cuMemCreate (8 handles of 128 MiB), cuMemAddressReserve, cuMemMap and
// cuMemSetAccess into one 1 GiB range written and read by kernels; two handles unmapped and
// mapped back swapped (the data moves with them); cudaMallocAsync / cudaFreeAsync (256 MiB from
// the default pool); cuMemAlloc and cuMemcpyDtoD. About 1.4 GiB. Prints the digest of the range
// before and after the swap, the pool buffer and the cuMemAlloc copy, and whether the swap moved
// the data as expected.
#include "compat_cu.h"

#include <cuda.h>
#include <vector>

#define CU(x)                                                                          \
    do {                                                                               \
        CUresult r_ = (x);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                      \
            const char *s_ = "?";                                                      \
            cuGetErrorString(r_, &s_);                                                 \
            fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #x, s_, (int)r_); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__global__ void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_float(i, seed);
}

__global__ void scale_add(const float *a, float *b, size_t n, float k)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = b[i] * k + a[i % (n / 2)];
}

int main()
{
    CK(cudaFree(nullptr)); // the runtime's primary context, current for the driver calls below
    CUdevice dev;
    CU(cuCtxGetDevice(&dev));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    size_t gran = 0;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    const int handles = 8;
    const size_t piece = ((128ull << 20) + gran - 1) / gran * gran;
    const size_t range = piece * handles;
    std::vector<CUmemGenericAllocationHandle> h(handles);
    for (int i = 0; i < handles; i++)
        CU(cuMemCreate(&h[i], piece, &prop, 0));
    CUdeviceptr va = 0;
    CU(cuMemAddressReserve(&va, range, 0, 0, 0));
    for (int i = 0; i < handles; i++)
        CU(cuMemMap(va + i * piece, piece, 0, h[i], 0));
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(va, range, &acc, 1));
    size_t footprint = range;

    const size_t n = range / sizeof(float);
    float *p = reinterpret_cast<float *>(va);
    fill<<<1024, 256>>>(p, n, 11);
    scale_add<<<1024, 256>>>(p, p + n / 2, n / 2, 0.5f);
    CK(cudaDeviceSynchronize());
    Digest d;
    digest_device(d, p, range);

    // swap handles 2 and 5: unmap both, map each where the other was
    std::vector<float> before2(1024), before5(1024), after2(1024), after5(1024);
    CK(cudaMemcpy(before2.data(), (char *)p + 2 * piece, 4096, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(before5.data(), (char *)p + 5 * piece, 4096, cudaMemcpyDeviceToHost));
    CU(cuMemUnmap(va + 2 * piece, piece));
    CU(cuMemUnmap(va + 5 * piece, piece));
    CU(cuMemMap(va + 2 * piece, piece, 0, h[5], 0));
    CU(cuMemMap(va + 5 * piece, piece, 0, h[2], 0));
    CU(cuMemSetAccess(va + 2 * piece, piece, &acc, 1));
    CU(cuMemSetAccess(va + 5 * piece, piece, &acc, 1));
    CK(cudaMemcpy(after2.data(), (char *)p + 2 * piece, 4096, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(after5.data(), (char *)p + 5 * piece, 4096, cudaMemcpyDeviceToHost));
    bool swapped = before2 == after5 && before5 == after2;
    scale_add<<<1024, 256>>>(p, p + n / 2, n / 2, -1.5f);
    CK(cudaDeviceSynchronize());
    digest_device(d, p, range);

    // stream-ordered allocation from the default pool
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *q = nullptr;
    const size_t qbytes = 256ull << 20;
    CK(cudaMallocAsync(reinterpret_cast<void **>(&q), qbytes, s));
    footprint += qbytes;
    fill<<<1024, 256, 0, s>>>(q, qbytes / sizeof(float), 12);
    scale_add<<<1024, 256, 0, s>>>(p, q, qbytes / sizeof(float), 2.0f);
    CK(cudaStreamSynchronize(s));
    digest_device(d, q, qbytes);
    CK(cudaFreeAsync(q, s));
    CK(cudaStreamSynchronize(s));

    // the driver's own allocation and copy
    CUdeviceptr r = 0;
    const size_t rbytes = 128ull << 20;
    CU(cuMemAlloc(&r, rbytes));
    footprint += rbytes;
    CU(cuMemcpyDtoD(r, va + 3 * piece, rbytes));
    CK(cudaDeviceSynchronize());
    digest_device(d, reinterpret_cast<void *>(r), rbytes);
    d.add_u64(swapped);
    double vals[1] = {swapped ? 1.0 : 0.0};
    finish("cu_vmm", d, footprint, 1, vals, "granularity=%zu handles=%dx%zuMiB swapped=%d", gran, handles,
           piece >> 20, (int)swapped);

    CU(cuMemFree(r));
    for (int i = 0; i < handles; i++)
        CU(cuMemUnmap(va + i * piece, piece));
    for (int i = 0; i < handles; i++)
        CU(cuMemRelease(h[i]));
    CU(cuMemAddressFree(va, range));
    return swapped ? 0 : 1;
}
