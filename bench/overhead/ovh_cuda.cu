// ovh_cuda.cu [SECONDS] - a plain CUDA C program for the overhead benchmark: three 1 GiB
// buffers, a STREAM-like triad over them and an arithmetic kernel over 256 MiB per step, each
// step synchronized. Prints the JSON line of bench/overhead/ovh.py: startup_s (from the
// process's start, read from /proc/self/stat, to the first timed step: context creation,
// allocations, initialization, three warm-up steps) and steady_per_s in GB moved per second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static double process_age()
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long start = 0;
    // after ")": field 3 (state) ... field 22 (starttime)
    int field = 2;
    for (char *t = strtok(p + 1, " "); t; t = strtok(nullptr, " ")) {
        if (++field == 22) {
            start = strtoull(t, nullptr, 10);
            break;
        }
    }
    double up = 0;
    FILE *u = fopen("/proc/uptime", "r");
    if (!u || fscanf(u, "%lf", &up) != 1)
        return -1;
    fclose(u);
    return up - (double)start / sysconf(_SC_CLK_TCK);
}

__global__ void init(float *p, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v + (float)(i % 1000) * 1e-3f;
}

__global__ void triad(float *a, const float *b, const float *c, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = b[i] + s * c[i];
}

__global__ void arith(float *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = p[i];
        for (int k = 0; k < 64; k++)
            x = x * 0.999f + 0.001f;
        p[i] = x;
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    const size_t n = 256ull << 20; // 1 GiB of floats per buffer
    float *a, *b, *c;
    CK(cudaMalloc(&a, n * 4));
    CK(cudaMalloc(&b, n * 4));
    CK(cudaMalloc(&c, n * 4));
    init<<<2048, 256>>>(b, n, 1.0f);
    init<<<2048, 256>>>(c, n, 2.0f);
    auto step = [&]() {
        triad<<<4096, 256>>>(a, b, c, n, 0.5f);
        arith<<<4096, 256>>>(a, n / 4);
        CK(cudaDeviceSynchronize());
    };
    for (int i = 0; i < 3; i++)
        step();
    double startup = process_age();
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    std::vector<double> ms;
    for (;;) {
        auto s = clk::now();
        step();
        auto e = clk::now();
        ms.push_back(std::chrono::duration<double, std::milli>(e - s).count());
        if (std::chrono::duration<double>(e - t0).count() >= seconds)
            break;
    }
    double el = std::chrono::duration<double>(clk::now() - t0).count();
    CK(cudaGetLastError());
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double gb_per_step = (3.0 * n * 4 + 2.0 * (n / 4) * 4) / 1e9;
    printf("{\"program\": \"cuda_triad\", \"startup_s\": %.3f, \"steady_s\": %.3f, \"steps\": %zu, "
           "\"unit\": \"GB\", \"steady_per_s\": %.3f, \"step_ms_median\": %.3f, \"step_ms_p90\": %.3f}\n",
           startup, el, ms.size(), ms.size() * gb_per_step / el, sorted[sorted.size() / 2],
           sorted[(size_t)(0.9 * (sorted.size() - 1))]);
    return 0;
}
