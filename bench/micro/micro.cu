// micro.cu - the paper's section 7.1 microbenchmark tasks, one process each.
//
//   micro vecadd GIB SECONDS   c = a + b over three arrays of GIB/3 each: short memory-bound
//                              bursts that touch the whole footprint
//   micro matmul GIB SECONDS   fp32 GEMMs (cuBLAS) over as many 8192^2 triples as fit GIB,
//                              one triple per task: compute-bound
//
// Runs tasks back to back for SECONDS of wall time (after one warm-up task) and prints one JSON
// line: tasks completed, tasks per second, footprint, progress samples (bench/progress.h). Under msched the same binary is run with
// and without a budget; throughput normalized to the unconstrained run is the paper's metric.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../progress.h"

#include <cublas_v2.h>

__global__ void vadd(const float *a, const float *b, float *c, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

__global__ void init(float *p, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = s * (float)(i % 1024) / 1024.0f;
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("{\"program\": \"micro\", \"error\": \"%s: %s\"}\n", #x,                      \
                   cudaGetErrorString(e_));                                                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "vecadd") && strcmp(argv[1], "matmul"))) {
        fprintf(stderr, "usage: micro vecadd|matmul GIB SECONDS\n");
        return 2;
    }
    bool vec = strcmp(argv[1], "vecadd") == 0;
    double gib = atof(argv[2]), seconds = atof(argv[3]);
    size_t bytes = (size_t)(gib * 1024 * 1024 * 1024);
    const int G = 1056, T = 256;
    std::vector<float *> bufs;
    cublasHandle_t h = nullptr;
    size_t n = 0, triples = 0, dim = 8192;
    if (vec) {
        n = bytes / 3 / sizeof(float);
        for (int k = 0; k < 3; k++) {
            float *p;
            CK(cudaMalloc(&p, n * sizeof(float)));
            init<<<G, T>>>(p, n, 1.0f + k);
            bufs.push_back(p);
        }
    } else {
        size_t mat = dim * dim * sizeof(float);
        triples = bytes / (3 * mat);
        if (triples == 0)
            triples = 1;
        for (size_t k = 0; k < 3 * triples; k++) {
            float *p;
            CK(cudaMalloc(&p, mat));
            init<<<G, T>>>(p, dim * dim, 0.5f + (float)k);
            bufs.push_back(p);
        }
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
            return 1;
    }
    CK(cudaDeviceSynchronize());
    size_t task = 0;
    auto run_task = [&]() -> int {
        if (vec) {
            vadd<<<G, T>>>(bufs[0], bufs[1], bufs[2], n);
        } else {
            size_t t = task % triples;
            const float one = 1.0f, zero = 0.0f;
            if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)dim, (int)dim, (int)dim, &one,
                            bufs[3 * t], (int)dim, bufs[3 * t + 1], (int)dim, &zero,
                            bufs[3 * t + 2], (int)dim) != CUBLAS_STATUS_SUCCESS)
                return 1;
        }
        task++;
        return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
    };
    if (run_task())
        return 1;
    task = 0;
    ms_bench_barrier();
    auto t0 = std::chrono::steady_clock::now();
    ms_progress prog;
    double el = 0;
    while (el < seconds) {
        if (run_task()) {
            printf("{\"program\": \"micro\", \"error\": \"task failed\"}\n");
            return 1;
        }
        prog.tick(task);
        el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    printf("{\"program\": \"micro\", \"kind\": \"%s\", \"footprint_gib\": %.2f, \"tasks\": %zu, "
           "\"seconds\": %.3f, \"tasks_per_s\": %.3f",
           argv[1], gib, task, el, task / el);
    prog.print(stdout, task);
    printf("}\n");
    return 0;
}
