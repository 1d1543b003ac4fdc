// launch_overhead.cu - what the shim adds to each kernel launch.
//
// Launches an empty kernel (three pointer arguments, so the launch gate has parameters to scan)
// back to back: batches of 1000 launches, each timed on the host (submission cost), 200 batches
// after a warm-up. Prints the median and 10th/90th percentile nanoseconds per launch as JSON.
// Run it with and without the shim in one session and subtract the medians.
// Usage: launch_overhead [LABEL [BIG_MIB]]: with BIG_MIB, the first pointer is the start of an
// allocation of that many MiB (a weights buffer the engine names whole at allocation
// granularity, BIG_MIB / 64 chunks per launch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void tiny(float *a, const float *b, int *c)
{
    if (threadIdx.x == 1000)
        a[0] = b[0] + c[0];
}

int main(int argc, char **argv)
{
    const char *label = argc > 1 ? argv[1] : "run";
    float *a, *b;
    int *c;
    size_t abytes = argc > 2 ? (size_t)strtoull(argv[2], nullptr, 10) << 20 : 0;
    cudaMalloc(&a, abytes > (1u << 20) ? abytes : 1u << 20);
    cudaMalloc(&b, 1 << 20);
    cudaMalloc(&c, 1 << 20);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const int batch = 1000, batches = 200;
    for (int i = 0; i < 5000; i++)
        tiny<<<1, 32, 0, s>>>(a, b, c);
    cudaStreamSynchronize(s);
    std::vector<double> per;
    for (int k = 0; k < batches; k++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < batch; i++)
            tiny<<<1, 32, 0, s>>>(a, b, c);
        auto t1 = std::chrono::steady_clock::now();
        cudaStreamSynchronize(s);
        per.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
    }
    std::sort(per.begin(), per.end());
    printf("{\"program\": \"launch_overhead\", \"mode\": \"%s\", \"median_ns\": %.1f, "
           "\"p10_ns\": %.1f, \"p90_ns\": %.1f, \"big_mib\": %zu, \"error\": \"%s\"}\n",
           label, per[batches / 2], per[batches / 10], per[batches * 9 / 10],
           abytes >> 20, cudaGetErrorString(cudaGetLastError()));
    return 0;
}
