// cu_graph.cu - CUDA graphs from plain CUDA C: a stream capture (global mode) of a memset, two
// kernels, a device-to-device copy, a fork to a second stream and back through events, and a
// host function node; the graph is instantiated once and launched 60 times (each launch feeds
// the next through the buffers), on two different streams; then a second graph is built with
// the explicit node API (kernel node + memcpy node) and launched. Four 128 MiB buffers, about
// 0.5 GiB. Prints the digest of every buffer, the launches the host node counted, and sums.
#include "compat_cu.h"

#include <vector>

__global__ void mix(const float *a, float *b, size_t n, float k)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = 0.5f * a[i] + k * sinf(a[i]);
}

__global__ void combine(const float *b, const float *c, float *d, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        d[i] = b[i] - 0.25f * c[(i + 1) % n] + 0.125f;
}

__global__ void feedback(const float *d, float *a, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = 0.9f * d[i] + 0.1f * a[i];
}

__global__ void init(float *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_float(i, seed);
}

static void CUDART_CB count_launch(void *arg) { ++*static_cast<int *>(arg); }

int main()
{
    const size_t n = 32ull << 20; // 128 MiB per buffer
    const size_t bytes = n * sizeof(float);
    const int grid = 512, block = 256;
    float *A = dev_alloc<float>(bytes), *B = dev_alloc<float>(bytes);
    float *C = dev_alloc<float>(bytes), *D = dev_alloc<float>(bytes);
    cudaStream_t s, s2, s3;
    cudaEvent_t fork, join;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    init<<<grid, block, 0, s>>>(A, n, 7);
    CK(cudaStreamSynchronize(s));

    int launches = 0;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(C, 0, bytes, s));
    mix<<<grid, block, 0, s>>>(A, B, n, 0.3f);
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    mix<<<grid, block, 0, s2>>>(B, C, n / 2, -0.2f); // the fork: first half of C on s2
    CK(cudaEventRecord(join, s2));
    CK(cudaMemcpyAsync(C + n / 2, B + n / 2, bytes / 2, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamWaitEvent(s, join, 0));
    combine<<<grid, block, 0, s>>>(B, C, D, n);
    feedback<<<grid, block, 0, s>>>(D, A, n);
    CK(cudaLaunchHostFunc(s, count_launch, &launches));
    CK(cudaStreamEndCapture(s, &graph));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, nullptr, &nodes));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 60; i++)
        CK(cudaGraphLaunch(exec, i % 2 ? s : s3));
    CK(cudaDeviceSynchronize());

    // A second graph through the node API: D = mix(A), then a copy D -> B.
    cudaGraph_t g2;
    cudaGraphExec_t e2;
    CK(cudaGraphCreate(&g2, 0));
    cudaGraphNode_t kn, cn;
    float k = 0.7f;
    size_t nn = n;
    void *args[] = {&A, &D, &nn, &k};
    cudaKernelNodeParams kp = {};
    kp.func = reinterpret_cast<void *>(mix);
    kp.gridDim = dim3(grid);
    kp.blockDim = dim3(block);
    kp.kernelParams = args;
    CK(cudaGraphAddKernelNode(&kn, g2, nullptr, 0, &kp));
    CK(cudaGraphAddMemcpyNode1D(&cn, g2, &kn, 1, B, D, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaGraphInstantiate(&e2, g2, 0));
    CK(cudaGraphLaunch(e2, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());

    Digest d;
    float *bufs[4] = {A, B, C, D};
    double vals[5];
    std::vector<float> h(n);
    for (int b = 0; b < 4; b++) {
        CK(cudaMemcpy(h.data(), bufs[b], bytes, cudaMemcpyDeviceToHost));
        d.add(h.data(), bytes);
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += h[i];
        vals[b] = sum;
    }
    d.add_u64(launches);
    vals[4] = launches;
    finish("cu_graph", d, g_allocated, 5, vals, "captured_nodes=%zu host_node_runs=%d", nodes, launches);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphExecDestroy(e2));
    CK(cudaGraphDestroy(graph));
    CK(cudaGraphDestroy(g2));
    return 0;
}
