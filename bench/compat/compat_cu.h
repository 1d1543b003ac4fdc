// compat_cu.h - what the CUDA C compatibility programs share: error checks, an allocation
// counter for FOOTPRINT_MIB, a digest of host copies of their results, and the output lines
// (bench/compat/compat.py describes them: FOOTPRINT_MIB, INFO, RESULT last).
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static size_t g_allocated; // bytes the program asked the device for (its footprint)

template <typename T> static T *dev_alloc(size_t bytes)
{
    void *p = nullptr;
    CK(cudaMalloc(&p, bytes));
    g_allocated += bytes;
    return static_cast<T *>(p);
}

// Two 64-bit running hashes over 8-byte words (the tail byte-wise): enough to tell runs apart.
struct Digest {
    uint64_t a = 0xcbf29ce484222325ULL, b = 0x9e3779b97f4a7c15ULL, n = 0;
    void word(uint64_t w)
    {
        a = (a ^ w) * 0x100000001b3ULL;
        b = (b + w * 0xc2b2ae3d27d4eb4fULL);
        b = ((b << 31) | (b >> 33)) * 0x9e3779b97f4a7c15ULL;
        n++;
    }
    void add(const void *p, size_t bytes)
    {
        const unsigned char *c = static_cast<const unsigned char *>(p);
        size_t words = bytes / 8;
        for (size_t i = 0; i < words; i++) {
            uint64_t w;
            memcpy(&w, c + 8 * i, 8);
            word(w);
        }
        for (size_t i = words * 8; i < bytes; i++)
            word(c[i]);
        word(bytes);
    }
    void add_u64(uint64_t v)
    {
        word(v);
    }
};

// Device buffer -> host -> digest, in 64 MiB pieces.
static void digest_device(Digest &d, const void *dev, size_t bytes)
{
    const size_t piece = 64ull << 20;
    unsigned char *h = nullptr;
    CK(cudaMallocHost(&h, piece));
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        CK(cudaMemcpy(h, static_cast<const unsigned char *>(dev) + off, n, cudaMemcpyDeviceToHost));
        d.add(h, n);
    }
    CK(cudaFreeHost(h));
}

// The three output lines; values are the summary numbers after tol=.
static void finish(const char *name, const Digest &d, size_t footprint_bytes, int nvals,
                   const double *vals, const char *info_fmt, ...)
{
    printf("FOOTPRINT_MIB %zu\n", (footprint_bytes + (1u << 20) - 1) >> 20);
    printf("INFO ");
    va_list ap;
    va_start(ap, info_fmt);
    vprintf(info_fmt, ap);
    va_end(ap);
    printf("\nRESULT %s %016llx%016llx tol=1e-12", name, (unsigned long long)d.a,
           (unsigned long long)d.b);
    for (int i = 0; i < nvals; i++)
        printf(" %.17g", vals[i]);
    printf("\n");
    fflush(stdout);
}

// A deterministic pseudo-random float in [-1, 1) from an index and a seed (splitmix64).
__host__ __device__ inline float hash_float(uint64_t i, uint64_t seed)
{
    uint64_t z = i + seed * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) / (float)(1u << 23) - 1.0f;
}
