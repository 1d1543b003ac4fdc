// kernels.cu - GPU kernels of the real-GPU tests and benchmarks (loaded as PTX by the drivers).
//
// ms_fill writes a pattern that depends on the word index and a seed; ms_check counts words that
// differ from it. Together they prove data survived an eviction and a population.
__device__ unsigned long long ms_pattern(unsigned long long i, unsigned long long seed)
{
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

extern "C" __global__ void ms_fill(unsigned long long *p, unsigned long long n,
                                   unsigned long long seed)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        p[i] = ms_pattern(i, seed);
}

extern "C" __global__ void ms_check(const unsigned long long *p, unsigned long long n,
                                    unsigned long long seed, unsigned long long *bad)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long mine = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        mine += p[i] != ms_pattern(i, seed);
    if (mine)
        atomicAdd(bad, mine);
}
