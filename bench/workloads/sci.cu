// sci.cu - workload A (scientific): our own CUDA C versions of four Rodinia-style kernels, one
// process each, the problem size scaling the footprint to GIB.
//
//   sci hotspot GIB SECONDS  2D thermal stencil: temperature (two grids, ping-pong) and power;
//                            a task is one time step over the whole grid
//   sci dwt2d GIB SECONDS    one level of a 2D Haar wavelet transform of an image into four
//                            subbands (rows, then columns, through a scratch image); a task is
//                            one transform
//   sci cfd GIB SECONDS      an unstructured finite-volume update: five conserved variables per
//                            cell, four neighbour indices per cell, fluxes gathered through the
//                            indices; a task is one explicit step
//   sci nn GIB SECONDS       nearest neighbour: distance from a query point to every record
//                            (latitude, longitude), block minima, the host picks the least; a
//                            task is one query
//
// Each runs tasks back to back for SECONDS of wall time after one warm-up task and prints one
// JSON line (the same fields as bench/micro/micro.cu, so bench/micro/run_sweep.sh reads it):
// tasks, tasks per second, footprint, a checksum of the final state, and progress samples
// (bench/progress.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../progress.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("{\"program\": \"sci\", \"error\": \"%s: %s\"}\n", #x, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static const int G = 1056, T = 256;

__global__ void fill(float *p, size_t n, float a, float b)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = a + b * (float)(i % 977) / 977.0f;
}

__global__ void fill_idx(int *p, size_t n, size_t cells, unsigned salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (int)((i / 4 + 1 + (i % 4) * 7919u + salt) % cells);
}

// ---- hotspot ---------------------------------------------------------------------------------
__global__ void hotspot(const float *t, const float *pw, float *out, size_t side)
{
    const float cap = 0.5f, rx = 0.1f, ry = 0.1f, rz = 0.05f, amb = 80.0f;
    size_t n = side * side;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / side, c = i % side;
        float me = t[i];
        float n_ = r > 0 ? t[i - side] : me, s_ = r + 1 < side ? t[i + side] : me;
        float w_ = c > 0 ? t[i - 1] : me, e_ = c + 1 < side ? t[i + 1] : me;
        out[i] = me + cap * (pw[i] + (n_ + s_ - 2 * me) * ry + (e_ + w_ - 2 * me) * rx +
                             (amb - me) * rz);
    }
}

// ---- dwt2d -----------------------------------------------------------------------------------
__global__ void haar_rows(const float *in, float *out, size_t side)
{
    size_t half = side / 2, n = side * half;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / half, k = i % half;
        float a = in[r * side + 2 * k], b = in[r * side + 2 * k + 1];
        out[r * side + k] = (a + b) * 0.70710678f;
        out[r * side + half + k] = (a - b) * 0.70710678f;
    }
}

__global__ void haar_cols(const float *in, float *out, size_t side)
{
    size_t half = side / 2, n = half * side;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t k = i / side, c = i % side;
        float a = in[(2 * k) * side + c], b = in[(2 * k + 1) * side + c];
        out[k * side + c] = (a + b) * 0.70710678f;
        out[(half + k) * side + c] = (a - b) * 0.70710678f;
    }
}

// ---- cfd -------------------------------------------------------------------------------------
// Five conserved variables in structure-of-arrays order (var * cells + cell).
__global__ void cfd_step(const float *u, float *un, const int *nb, const float *area, size_t cells)
{
    const float dt = 1e-4f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < cells;
         i += (size_t)gridDim.x * blockDim.x) {
        float flux[5] = {0, 0, 0, 0, 0};
        float rho = u[i], e = u[4 * cells + i];
        float p = 0.4f * (e - 0.5f * (u[cells + i] * u[cells + i] + u[2 * cells + i] * u[2 * cells + i] +
                                      u[3 * cells + i] * u[3 * cells + i]) /
                                     fmaxf(rho, 1e-3f));
        for (int k = 0; k < 4; k++) {
            size_t j = (size_t)nb[4 * i + k];
            float a = area[4 * i + k];
            for (int v = 0; v < 5; v++)
                flux[v] += a * (u[v * cells + j] - u[v * cells + i]);
            flux[1 + (k % 3)] += a * p * 1e-3f;
        }
        for (int v = 0; v < 5; v++)
            un[v * cells + i] = u[v * cells + i] + dt * flux[v];
    }
}

// ---- nn --------------------------------------------------------------------------------------
__global__ void nn_dist(const float *lat, const float *lon, size_t n, float qlat, float qlon,
                        float *bmin)
{
    __shared__ float s[256];
    float best = 3.0e38f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float dx = lat[i] - qlat, dy = lon[i] - qlon;
        best = fminf(best, sqrtf(dx * dx + dy * dy));
    }
    s[threadIdx.x] = best;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            s[threadIdx.x] = fminf(s[threadIdx.x], s[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        bmin[blockIdx.x] = s[0];
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "hotspot") && strcmp(argv[1], "dwt2d") &&
                     strcmp(argv[1], "cfd") && strcmp(argv[1], "nn"))) {
        fprintf(stderr, "usage: sci hotspot|dwt2d|cfd|nn GIB SECONDS\n");
        return 2;
    }
    const char *kind = argv[1];
    double gib = atof(argv[2]), seconds = atof(argv[3]);
    if (!(gib > 0) || !(seconds > 0)) {
        fprintf(stderr, "sci: GIB and SECONDS must be positive\n");
        return 2;
    }
    size_t bytes = (size_t)(gib * 1024 * 1024 * 1024);
    std::vector<void *> bufs;
    bool failed = false;
    auto dalloc = [&](size_t n) -> void * {
        void *p = nullptr;
        if (n == 0 || cudaMalloc(&p, n) != cudaSuccess) {
            failed = true;
            return nullptr;
        }
        bufs.push_back(p);
        return p;
    };
    float *t0 = nullptr, *t1 = nullptr, *pw = nullptr, *img = nullptr, *tmp = nullptr,
          *u = nullptr, *un = nullptr, *area = nullptr, *lat = nullptr, *lon = nullptr,
          *bmin = nullptr;
    int *nb = nullptr;
    size_t side = 0, cells = 0, n = 0;
    int k = kind[0] == 'h' ? 0 : kind[0] == 'd' ? 1 : kind[0] == 'c' ? 2 : 3;
    if (k == 0) { // three grids of side^2 floats
        side = (size_t)sqrt((double)bytes / (3 * sizeof(float)));
        t0 = (float *)dalloc(side * side * 4);
        t1 = (float *)dalloc(side * side * 4);
        pw = (float *)dalloc(side * side * 4);
    } else if (k == 1) { // image and scratch, side even
        side = (size_t)sqrt((double)bytes / (2 * sizeof(float))) / 2 * 2;
        img = (float *)dalloc(side * side * 4);
        tmp = (float *)dalloc(side * side * 4);
    } else if (k == 2) { // per cell: 2 x 5 floats, 4 ints, 4 floats = 72 bytes
        cells = bytes / 72;
        u = (float *)dalloc(cells * 5 * 4);
        un = (float *)dalloc(cells * 5 * 4);
        nb = (int *)dalloc(cells * 4 * 4);
        area = (float *)dalloc(cells * 4 * 4);
    } else { // two float arrays
        n = bytes / 8;
        lat = (float *)dalloc(n * 4);
        lon = (float *)dalloc(n * 4);
        bmin = (float *)dalloc(G * 4);
    }
    if (failed) {
        printf("{\"program\": \"sci\", \"error\": \"cudaMalloc failed\"}\n");
        return 1;
    }
    if (k == 0) {
        fill<<<G, T>>>(t0, side * side, 60.0f, 20.0f);
        fill<<<G, T>>>(pw, side * side, 0.0f, 1.0f);
    } else if (k == 1) {
        fill<<<G, T>>>(img, side * side, 0.0f, 255.0f);
    } else if (k == 2) {
        fill<<<G, T>>>(u, cells * 5, 1.0f, 0.5f);
        fill_idx<<<G, T>>>(nb, cells * 4, cells, 13u);
        fill<<<G, T>>>(area, cells * 4, 0.1f, 0.2f);
    } else {
        fill<<<G, T>>>(lat, n, -90.0f, 180.0f);
        fill<<<G, T>>>(lon, n, -180.0f, 360.0f);
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> hmin(G);
    double check = 0;
    size_t task = 0;
    auto run_task = [&]() -> int {
        if (k == 0) {
            hotspot<<<G, T>>>(t0, pw, t1, side);
            std::swap(t0, t1);
        } else if (k == 1) {
            haar_rows<<<G, T>>>(img, tmp, side);
            haar_cols<<<G, T>>>(tmp, img, side);
        } else if (k == 2) {
            cfd_step<<<G, T>>>(u, un, nb, area, cells);
            std::swap(u, un);
        } else {
            nn_dist<<<G, T>>>(lat, lon, n, (float)(task % 90), (float)(task % 180), bmin);
            if (cudaMemcpy(hmin.data(), bmin, G * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
                return 1;
            float best = hmin[0];
            for (float v : hmin)
                best = v < best ? v : best;
            check += best;
        }
        task++;
        return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
    };
    if (run_task())
        return 1;
    task = 0;
    ms_bench_barrier();
    auto start = std::chrono::steady_clock::now();
    ms_progress prog;
    double el = 0;
    while (el < seconds) {
        if (run_task()) {
            printf("{\"program\": \"sci\", \"error\": \"task failed\"}\n");
            return 1;
        }
        prog.tick(task);
        el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (k != 3) { // checksum: a sample of the final state
        float *src = k == 0 ? t0 : k == 1 ? img : u;
        float v[64];
        CK(cudaMemcpy(v, src, sizeof v, cudaMemcpyDeviceToHost));
        for (float x : v)
            check += x;
    }
    printf("{\"program\": \"sci\", \"kind\": \"%s\", \"footprint_gib\": %.2f, \"tasks\": %zu, "
           "\"seconds\": %.3f, \"tasks_per_s\": %.3f, \"checksum\": %.6g",
           kind, gib, task, el, task / el, check);
    prog.print(stdout, task);
    printf("}\n");
    for (void *p : bufs)
        cudaFree(p);
    return 0;
}
