/*
 * tmpl_probe.cu - kernels whose reach follows their arguments in the ways argument templates
 * model (docs/templates.md), for `msched profile` on a GPU: the profile, the rules learned, their
 * accuracy on a run with other sizes (--scale), and a run under a budget with the templates.
 *
 * All buffers are views into one arena (one cuMemAlloc, as an allocator's pool), so allocation
 * granularity names the whole arena for every launch:
 *   saxpy(x, y, n)            reads x[0 .. n), reads and writes y[0 .. n)          (linear)
 *   rows(p)                   p = {const float *m; int ld; int r0; int nrows; float *out}: sums
 *                             rows r0 .. r0 + nrows of an ld-wide matrix          (struct, strided)
 *   tick(b, i)                writes 64 KiB block i of b                          (linear in i)
 *   chase(t)                  reads t[0], a pointer no argument names            (unsafe)
 * Usage: tmpl_probe [--scale S] [--rounds R]: sizes grow with S (1..8); R rounds of every
 * launch. Prints "checksum <hex>" of every output (the same for the same options) and
 * "arena_mib N".
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "tmpl_probe: %s: %s\n", #x, cudaGetErrorString(e_));                   \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

struct rows_args {
    const float *m;
    int ld, r0, nrows;
    float *out;
};

__global__ void saxpy(const float *x, float *y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] + y[i];
}

__global__ void rows(struct rows_args a)
{
    /* one thread per row, in order: the sums are the same in every run */
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < a.nrows; r += gridDim.x * blockDim.x) {
        float s = 0;
        for (int c = 0; c < 256; c++)
            s += a.m[(size_t)(a.r0 + r) * a.ld + c];
        a.out[r] += s;
    }
}

__global__ void tick(float *b, int i)
{
    float *blk = b + (size_t)i * 16384; /* 64 KiB of floats */
    for (int k = threadIdx.x; k < 16384; k += blockDim.x)
        blk[k] += 1.0f;
}

__global__ void chase(float *const *t)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        t[0][0] += 1.0f;
}

__global__ void fill(float *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (float)((i * 2654435761u + seed) % 1000u) / 1000.0f;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv)
{
    int scale = 1, rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: tmpl_probe [--scale 1..8] [--rounds N]\n");
            return 2;
        }
    }
    if (scale < 1 || scale > 8 || rounds < 1) {
        fprintf(stderr, "tmpl_probe: --scale 1..8, --rounds >= 1\n");
        return 2;
    }
    const size_t MiB = 1 << 20;
    /* the arena: x, y (n floats each), a 4096 x ld matrix, its row sums, the tick buffer, the
     * chase table and its target, 64 MiB apart so that each lies in its own chunks */
    const int n = scale * (8 << 20);       /* 32 MiB per scale */
    const int ld = 4096, mrows = 4096;     /* 64 MiB matrix */
    const size_t slot = 320 * MiB, nslots = 7;
    char *arena;
    CK(cudaMalloc((void **)&arena, slot * nslots));
    float *x = (float *)(arena + 0 * slot), *y = (float *)(arena + 1 * slot);
    float *m = (float *)(arena + 2 * slot), *out = (float *)(arena + 3 * slot);
    float *b = (float *)(arena + 4 * slot), *target = (float *)(arena + 6 * slot);
    float **tab = (float **)(arena + 5 * slot);
    fill<<<256, 256>>>(x, (size_t)n, 1);
    fill<<<256, 256>>>(y, (size_t)n, 2);
    fill<<<256, 256>>>(m, (size_t)ld * mrows, 3);
    CK(cudaMemset(out, 0, 4096 * sizeof(float)));
    CK(cudaMemset(b, 0, 64 * 65536));
    CK(cudaMemset(target, 0, 4096));
    CK(cudaMemcpy(tab, &target, sizeof target, cudaMemcpyHostToDevice));
    for (int r = 0; r < rounds; r++) {
        saxpy<<<1024, 256>>>(x, y, n);
        struct rows_args a = {m, ld, 64 * scale, 128 * scale, out};
        rows<<<8, 128>>>(a);
        for (int i = 0; i < 8 * scale; i++)
            tick<<<1, 256>>>(b, (i * 7 + r) % 64);
        chase<<<1, 32>>>(tab);
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    uint64_t h = 0xcbf29ce484222325ull;
    float *host = (float *)malloc(64 * 65536);
    if (!host)
        return 2;
    CK(cudaMemcpy(host, y, 4 * MiB, cudaMemcpyDeviceToHost));
    h = fnv(h, host, 4 * MiB);
    CK(cudaMemcpy(host, out, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    h = fnv(h, host, 4096 * sizeof(float));
    CK(cudaMemcpy(host, b, 64 * 65536, cudaMemcpyDeviceToHost));
    h = fnv(h, host, 64 * 65536);
    CK(cudaMemcpy(host, target, 4, cudaMemcpyDeviceToHost));
    h = fnv(h, host, 4);
    free(host);
    CK(cudaFree(arena));
    printf("arena_mib %zu\nchecksum %016llx\n", slot * nslots / MiB, (unsigned long long)h);
    return 0;
}
