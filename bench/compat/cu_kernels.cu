// cu_kernels.cu - a plain CUDA C program (runtime API): four 256 MiB buffers, two streams
// ordered by events, initialization and a 10-step stencil in ping-pong, saxpy, device-to-device
// copies, memsets, host-to-device copies from page-locked and from pageable memory, and a
// two-pass block reduction in a fixed order (no atomics). About 1 GiB. Prints the digest of
// every buffer and the sums.
#include "compat_cu.h"

#include <vector>

__global__ void init(float *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_float(i, seed);
}

__global__ void stencil(const float *in, float *out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float l = in[i == 0 ? n - 1 : i - 1], r = in[i + 1 == n ? 0 : i + 1];
        out[i] = 0.25f * l + 0.5f * in[i] + 0.25f * r;
    }
}

__global__ void saxpy(const float *x, float *y, size_t n, float a, float b)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}

__global__ void partial_sums(const float *p, size_t n, double *part)
{
    __shared__ double s[256];
    double v = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        v += p[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o)
            s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[blockIdx.x] = s[0];
}

__global__ void final_sum(const double *part, int n, double *out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double v = 0;
        for (int i = 0; i < n; i++)
            v += part[i];
        *out = v;
    }
}

int main()
{
    const size_t n = 64ull << 20; // 64 Mi floats = 256 MiB per buffer
    const size_t bytes = n * sizeof(float);
    const int grid = 1024, block = 256;
    float *A = dev_alloc<float>(bytes), *B = dev_alloc<float>(bytes);
    float *C = dev_alloc<float>(bytes), *D = dev_alloc<float>(bytes);
    double *part = dev_alloc<double>(grid * sizeof(double));
    double *sums = dev_alloc<double>(4 * sizeof(double));
    cudaStream_t s0, s1;
    cudaEvent_t e0, e1;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));

    init<<<grid, block, 0, s0>>>(A, n, 1);
    init<<<grid, block, 0, s1>>>(B, n, 2);
    CK(cudaMemsetAsync(C, 0, bytes, s0));
    for (int it = 0; it < 10; it++) {
        stencil<<<grid, block, 0, s0>>>(A, C, n);
        stencil<<<grid, block, 0, s0>>>(C, A, n);
    }
    saxpy<<<grid, block, 0, s1>>>(B, D, n, 2.0f, 1.0f);
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s0, e1, 0));
    // a quarter of D into C, a memset over an eighth of B
    CK(cudaMemcpyAsync(C + n / 4, D, bytes / 4, cudaMemcpyDeviceToDevice, s0));
    CK(cudaMemsetAsync(B + n / 2, 0x3f, bytes / 8, s0));
    // host to device: 64 MiB from page-locked memory into B, 64 MiB from pageable into D
    const size_t hn = 16ull << 20;
    float *pinned = nullptr;
    CK(cudaMallocHost(&pinned, hn * sizeof(float)));
    std::vector<float> pageable(hn);
    for (size_t i = 0; i < hn; i++) {
        pinned[i] = hash_float(i, 3);
        pageable[i] = hash_float(i, 4);
    }
    CK(cudaMemcpyAsync(B, pinned, hn * sizeof(float), cudaMemcpyHostToDevice, s0));
    CK(cudaMemcpyAsync(D + n - hn, pageable.data(), hn * sizeof(float), cudaMemcpyHostToDevice, s0));
    CK(cudaEventRecord(e0, s0));
    CK(cudaStreamWaitEvent(s1, e0, 0));
    saxpy<<<grid, block, 0, s1>>>(C, D, n / 2, -0.5f, 0.25f);
    float *bufs[4] = {A, B, C, D};
    for (int k = 0; k < 4; k++) {
        partial_sums<<<grid, block, 0, s1>>>(bufs[k], n, part);
        final_sum<<<1, 32, 0, s1>>>(part, grid, sums + k);
    }
    CK(cudaStreamSynchronize(s1));
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());

    double h_sums[4];
    CK(cudaMemcpy(h_sums, sums, sizeof(h_sums), cudaMemcpyDeviceToHost));
    Digest d;
    for (int k = 0; k < 4; k++)
        digest_device(d, bufs[k], bytes);
    d.add(h_sums, sizeof(h_sums));
    finish("cu_kernels", d, g_allocated, 4, h_sums, "buffers=4x%zuMiB", bytes >> 20);
    CK(cudaFreeHost(pinned));
    return 0;
}
