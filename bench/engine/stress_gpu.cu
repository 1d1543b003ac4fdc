// stress_gpu.cu - the memory engine's correctness stress on a real GPU.
//
// Random allocations, frees, kernels, copies and memsets over buffers whose total is several
// times the budget it runs under (msched run --budget ...), every buffer mirrored by a host
// shadow and compared at random points and at the end. Two kinds of work reach memory through
// pointers stored in device memory: a kernel that follows a pointer table, and cuBLAS batched
// GEMM with arrays of matrix pointers (checked against one plain GEMM per matrix).
//
// Usage: stress_gpu [ops] [seed]. Prints one JSON line; exits 1 on any mismatch or CUDA error.
#include <cublas_v2.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define NBUF 64
#define MIB (1024ull * 1024ull)

static uint64_t rng = 1;
static uint64_t rnd()
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

__host__ __device__ static uint32_t pattern(uint64_t i, uint32_t seed)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (uint32_t)(x * 0xbf58476d1ce4e5b9ull >> 32);
}

__global__ void k_fill(uint32_t *p, uint64_t n, uint32_t seed)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void k_add(uint32_t *d, const uint32_t *s, uint64_t n)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        d[i] += s[i];
}

__global__ void k_ptrtab(uint32_t *const *tab, uint64_t ntab, uint64_t n)
{
    for (uint64_t t = 0; t < ntab; t++)
        for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
             i += (uint64_t)gridDim.x * blockDim.x)
            tab[t][i] += 7;
}

struct Buf {
    uint32_t *d = nullptr;
    uint64_t words = 0;
    std::vector<uint32_t> shadow;
};

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("{\"program\": \"stress_gpu\", \"error\": \"%s: %s\"}\n", #x,                 \
                   cudaGetErrorString(e_));                                                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int gemm_check(cublasHandle_t h, uint64_t *bad)
{
    // Batched GEMM through device arrays of pointers vs one plain GEMM per matrix.
    const int n = 256, batch = 8;
    std::vector<float *> a(batch), b(batch), c(batch), r(batch);
    std::vector<float> host(n * n);
    for (int k = 0; k < batch; k++) {
        CK(cudaMalloc(&a[k], n * n * 4));
        CK(cudaMalloc(&b[k], n * n * 4));
        CK(cudaMalloc(&c[k], n * n * 4));
        CK(cudaMalloc(&r[k], n * n * 4));
        for (int i = 0; i < n * n; i++)
            host[i] = (float)((rnd() % 2001) - 1000) / 1000.0f;
        CK(cudaMemcpy(a[k], host.data(), n * n * 4, cudaMemcpyHostToDevice));
        for (int i = 0; i < n * n; i++)
            host[i] = (float)((rnd() % 2001) - 1000) / 1000.0f;
        CK(cudaMemcpy(b[k], host.data(), n * n * 4, cudaMemcpyHostToDevice));
    }
    float **da, **db, **dc;
    CK(cudaMalloc(&da, batch * sizeof(float *)));
    CK(cudaMalloc(&db, batch * sizeof(float *)));
    CK(cudaMalloc(&dc, batch * sizeof(float *)));
    CK(cudaMemcpy(da, a.data(), batch * sizeof(float *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), batch * sizeof(float *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dc, c.data(), batch * sizeof(float *), cudaMemcpyHostToDevice));
    const float one = 1.0f, zero = 0.0f;
    if (cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n,
                           batch) != CUBLAS_STATUS_SUCCESS)
        return 1;
    for (int k = 0; k < batch; k++)
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a[k], n, b[k], n, &zero, r[k],
                        n) != CUBLAS_STATUS_SUCCESS)
            return 1;
    CK(cudaDeviceSynchronize());
    std::vector<float> x(n * n), y(n * n);
    for (int k = 0; k < batch; k++) {
        CK(cudaMemcpy(x.data(), c[k], n * n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(y.data(), r[k], n * n * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n * n; i++)
            *bad += fabsf(x[i] - y[i]) > 1e-3f * (1.0f + fabsf(y[i]));
        CK(cudaFree(a[k]));
        CK(cudaFree(b[k]));
        CK(cudaFree(c[k]));
        CK(cudaFree(r[k]));
    }
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    return 0;
}

int main(int argc, char **argv)
{
    int ops = argc > 1 ? atoi(argv[1]) : 800;
    rng = argc > 2 ? strtoull(argv[2], nullptr, 10) : 42;
    if (!rng)
        rng = 1;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("{\"program\": \"stress_gpu\", \"error\": \"cublasCreate failed\"}\n");
        return 1;
    }
    Buf b[NBUF];
    uint64_t mismatches = 0, gemm_bad = 0, launches = 0, footprint_max = 0, footprint = 0;
    std::vector<uint32_t> tmp(64 * MIB / 4);
    const int G = 264, T = 256;
    for (int op = 0; op < ops; op++) {
        int i = (int)(rnd() % NBUF), j = (int)(rnd() % NBUF);
        int kind = (int)(rnd() % 12);
        if (!b[i].d || kind == 0) {
            if (b[i].d) {
                CK(cudaFree(b[i].d));
                footprint -= b[i].words * 4;
            }
            b[i].words = (4 * MIB + rnd() % (28 * MIB)) / 4;
            CK(cudaMalloc(&b[i].d, b[i].words * 4));
            footprint += b[i].words * 4;
            footprint_max = footprint > footprint_max ? footprint : footprint_max;
            uint32_t seed = (uint32_t)rnd();
            k_fill<<<G, T>>>(b[i].d, b[i].words, seed);
            launches++;
            b[i].shadow.resize(b[i].words);
            for (uint64_t k = 0; k < b[i].words; k++)
                b[i].shadow[k] = pattern(k, seed);
            continue;
        }
        switch (kind) {
        case 1:
        case 2:
        case 3: {
            if (!b[j].d || j == i)
                break;
            uint64_t n = b[i].words < b[j].words ? b[i].words : b[j].words;
            k_add<<<G, T>>>(b[i].d, b[j].d, n);
            launches++;
            for (uint64_t k = 0; k < n; k++)
                b[i].shadow[k] += b[j].shadow[k];
            break;
        }
        case 4: {
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            for (uint64_t k = 0; k < n; k++)
                tmp[k] = (uint32_t)rnd();
            CK(cudaMemcpy(b[i].d + off, tmp.data(), n * 4, cudaMemcpyHostToDevice));
            memcpy(&b[i].shadow[off], tmp.data(), n * 4);
            break;
        }
        case 5: {
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            CK(cudaMemcpy(tmp.data(), b[i].d + off, n * 4, cudaMemcpyDeviceToHost));
            for (uint64_t k = 0; k < n; k++)
                mismatches += tmp[k] != b[i].shadow[off + k];
            break;
        }
        case 6: {
            uint64_t off = rnd() % b[i].words, n = 1 + rnd() % (b[i].words - off);
            unsigned char v = (unsigned char)rnd();
            CK(cudaMemset(b[i].d + off, v, n * 4));
            memset(&b[i].shadow[off], v, n * 4);
            break;
        }
        case 7: {
            if (!b[j].d || j == i)
                break;
            uint64_t n = b[i].words < b[j].words ? b[i].words : b[j].words;
            CK(cudaMemcpy(b[i].d, b[j].d, n * 4, cudaMemcpyDeviceToDevice));
            memcpy(b[i].shadow.data(), b[j].shadow.data(), n * 4);
            break;
        }
        case 8: {
            uint32_t *tab[3];
            uint64_t ntab = 0, n = UINT64_MAX;
            for (int t = 0; t < 3; t++) {
                int k = (int)(rnd() % NBUF);
                bool dup = false;
                for (uint64_t u = 0; u < ntab; u++)
                    dup |= tab[u] == b[k].d;
                if (!b[k].d || k == i || dup)
                    continue;
                tab[ntab++] = b[k].d;
                n = b[k].words < n ? b[k].words : n;
            }
            if (!ntab)
                break;
            CK(cudaMemcpy(b[i].d, tab, ntab * 8, cudaMemcpyHostToDevice));
            memcpy(b[i].shadow.data(), tab, ntab * 8);
            n = n < 65536 ? n : 65536;
            k_ptrtab<<<G, T>>>((uint32_t *const *)b[i].d, ntab, n);
            launches++;
            for (uint64_t t = 0; t < ntab; t++)
                for (int k = 0; k < NBUF; k++)
                    if (b[k].d == tab[t])
                        for (uint64_t w = 0; w < n; w++)
                            b[k].shadow[w] += 7;
            break;
        }
        case 9:
            if (op % 50 == 9 && gemm_check(h, &gemm_bad))
                return 1;
            break;
        default:
            break;
        }
        CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < NBUF; i++) {
        if (!b[i].d)
            continue;
        std::vector<uint32_t> all(b[i].words);
        CK(cudaMemcpy(all.data(), b[i].d, b[i].words * 4, cudaMemcpyDeviceToHost));
        for (uint64_t k = 0; k < b[i].words; k++)
            mismatches += all[k] != b[i].shadow[k];
        CK(cudaFree(b[i].d));
    }
    printf("{\"program\": \"stress_gpu\", \"ops\": %d, \"launches\": %llu, \"footprint_max_mib\": "
           "%llu, \"mismatches\": %llu, \"gemm_mismatches\": %llu}\n",
           ops, (unsigned long long)launches, (unsigned long long)(footprint_max / MIB),
           (unsigned long long)mismatches, (unsigned long long)gemm_bad);
    return mismatches || gemm_bad ? 1 : 0;
}
