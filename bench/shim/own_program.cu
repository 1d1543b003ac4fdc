// own_program.cu - a CUDA C program of our own for the shim identity check: runtime API
// allocations, copies, memsets, three kernels (one with a by-value struct of pointers), a
// stream and events. Prints a JSON line with a digest of its results and the number of kernel
// launches it made.
#include <cstdio>
#include <cstdint>
#include <vector>

struct Pair {
    const float *a;
    float *out;
    int n;
};

__global__ void init(float *p, int n, float s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = sinf(i * 0.001f) * s;
}

__global__ void axpy(Pair pr, const float *b, float k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pr.n)
        pr.out[i] = pr.a[i] * k + b[i];
}

__global__ void sum(const float *p, int n, float *acc)
{
    __shared__ float s[256];
    float v = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += p[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o)
            s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(acc, s[0]);
}

int main()
{
    const int n = 1 << 24;
    float *a, *b, *c, *acc;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    cudaStreamCreate(&st);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMalloc(&a, n * sizeof(float));
    cudaMalloc(&b, n * sizeof(float));
    cudaMalloc(&c, n * sizeof(float));
    cudaMalloc(&acc, sizeof(float));
    std::vector<float> host(n);
    for (int i = 0; i < n; i++)
        host[i] = (float)(i % 97) * 0.5f;
    cudaMemcpy(b, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemsetAsync(acc, 0, sizeof(float), st);
    cudaEventRecord(e0, st);
    int launches = 0;
    for (int it = 0; it < 20; it++) {
        init<<<(n + 255) / 256, 256, 0, st>>>(a, n, 1.0f + it);
        axpy<<<(n + 255) / 256, 256, 0, st>>>(Pair{a, c, n}, b, 0.25f);
        launches += 2;
    }
    sum<<<264, 256, 0, st>>>(c, n, acc);
    launches++;
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    std::vector<float> out(n);
    float total = 0;
    cudaMemcpy(out.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(&total, acc, sizeof(float), cudaMemcpyDeviceToHost);
    uint64_t h = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)out.data();
    for (size_t i = 0; i < out.size() * sizeof(float); i++)
        h = (h ^ bytes[i]) * 1099511628211ull;
    cudaError_t err = cudaGetLastError();
    printf("{\"program\": \"own_cuda\", \"digest\": \"%016llx\", \"launches\": %d, \"error\": \"%s\"}\n",
           (unsigned long long)h, launches, cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 1;
}
